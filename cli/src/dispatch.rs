//! Runs a validated [`Invocation`]: the local commands here, the daemon-backed ones through
//! [`run_daemon_command`].

use appduct_client::command_runner::TokioCommandRunner;
use appduct_mcp::{BridgeOptions, StdioOptions};

use crate::command::{Command, Globals, Invocation};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::init::{self, InitEnv};
use crate::output::{Output, Success};
use crate::signals::{INTERRUPTED, Interrupts};
use crate::{
    completions, doctor, events, host, keygen, lifecycle, playground, sessions, snapshot, tools,
};

/// `daemon.hello` `client.name` of `appduct mcp`.
pub const MCP_CLIENT_NAME: &str = "appduct-mcp";

/// What a command produced.
#[derive(Debug)]
pub enum Reply {
    /// A result for [`Output::print_success`] (envelope or human text per the flags).
    Success(Success),
    /// The command printed its own output (streams, hosts, raw documents); its exit status.
    Done(u8),
}

/// Runs the command and prints its result; returns the process exit status.
pub fn run(inv: &Invocation, out: &Output) -> u8 {
    match execute(inv, out) {
        Ok(Reply::Success(success)) => out.print_success(&success),
        Ok(Reply::Done(code)) => code,
        Err(err) => out.print_failure(&err),
    }
}

fn execute(inv: &Invocation, out: &Output) -> Result<Reply, CliError> {
    match &inv.command {
        Command::Keygen(req) => keygen::run(req, &inv.globals, out).map(Reply::Success),
        Command::Completions { shell } => completions::run(*shell).map(Reply::Success),
        Command::Init(req) => {
            let cwd = std::env::current_dir().map_err(|e| {
                CliError::usage(format!("cannot determine the current directory: {e}"))
            })?;
            let env = InitEnv {
                cwd,
                state_dir: inv.globals.state_dir().ok().map(|d| d.path().to_path_buf()),
                home: std::env::home_dir(),
            };
            init::run(req, &env).map(Reply::Success)
        }
        Command::Doctor(req) => doctor::run(req).map(Reply::Success),
        _ => run_daemon_command(inv, out),
    }
}

/// The daemon-backed commands: `sessions *`, `tools *`, `events *`, `daemon *`, `playground`
/// and `mcp` (05 §2.4), on a multi-thread tokio runtime, except `daemon run` and `mcp`, which
/// run on a current-thread one (ARCHITECTURE.md: no cross-worker hand-offs per call; the bridge
/// builds its own); `tools call`, `events tail` and `playground` handle SIGINT and SIGTERM
/// themselves; every other command ends with exit 130 and no envelope when interrupted (05 §4).
pub fn run_daemon_command(inv: &Invocation, out: &Output) -> Result<Reply, CliError> {
    if let Command::Mcp { scheme } = &inv.command {
        return Ok(Reply::Done(run_mcp(&inv.globals, scheme.as_ref())));
    }
    let mut builder = if matches!(inv.command, Command::DaemonRun) {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = builder
        .enable_all()
        .build()
        .map_err(|e| CliError::internal(format!("cannot start the async runtime: {e}")))?;
    let result = match &inv.command {
        Command::DaemonRun => inv
            .globals
            .state_dir()
            .map(|dir| Reply::Done(host::run(&runtime, dir.path(), out))),
        _ => runtime.block_on(daemon_command(inv, out)),
    };
    // Nothing left on the runtime may delay the exit (connection tasks, a cancel in flight).
    runtime.shutdown_background();
    result
}

/// `appduct mcp`: the bridge on stdio, on its own current-thread runtime.
fn run_mcp(g: &Globals, scheme: Option<&String>) -> u8 {
    let dir = match g.state_dir() {
        Ok(dir) => dir,
        // stdout stays JSON-RPC only and --json has no effect: stderr (05 §12).
        Err(e) => {
            let flags = crate::output::OutputFlags {
                json: false,
                ..g.output
            };
            return Output::for_process(flags).print_failure(&e);
        }
    };
    let mut client = connect::options(g, &dir, Contact::Full);
    client.client_name = MCP_CLIENT_NAME.to_owned();
    let bridge = BridgeOptions {
        scheme: scheme.cloned(),
        state_dir: Some(dir.path().to_path_buf()),
        ..BridgeOptions::default()
    }
    .with_test_env(|name| std::env::var(name).ok());
    appduct_mcp::run_stdio(StdioOptions { client, bridge })
}

async fn daemon_command(inv: &Invocation, out: &Output) -> Result<Reply, CliError> {
    let g = &inv.globals;
    match &inv.command {
        Command::ToolsCall(c) => tools::call(g, out, c).await.map(Reply::Success),
        Command::EventsTail(p) => events::tail(g, out, p).await,
        Command::Playground { tour } => playground::run(g, out, *tour).await,
        _ => {
            let mut signals = Interrupts::new(false)
                .map_err(|e| CliError::internal(format!("cannot install signal handlers: {e}")))?;
            tokio::select! {
                r = interruptible_command(inv, out) => r,
                _ = signals.recv() => Ok(Reply::Done(INTERRUPTED)),
            }
        }
    }
}

async fn interruptible_command(inv: &Invocation, out: &Output) -> Result<Reply, CliError> {
    let g = &inv.globals;
    if let Command::ToolsSnapshot { selector, mode } = &inv.command {
        return snapshot::run(g, out, selector.as_deref(), mode).await;
    }
    let success = match &inv.command {
        Command::SessionsLs => sessions::ls(g, out).await,
        Command::SessionsRevoke { selector } => sessions::revoke(g, out, selector.as_deref()).await,
        Command::SessionsLink(req) => sessions::link(g, out, req, &TokioCommandRunner::new()).await,
        Command::ToolsLs(req) => tools::ls(g, out, req).await,
        Command::ToolsDescribe { selector, name } => {
            tools::describe(g, out, selector.as_deref(), name).await
        }
        Command::EventsLs(p) => events::ls(g, out, p).await,
        Command::EventsSince(p) => events::since(g, out, p).await,
        Command::DaemonStart => lifecycle::start(g, out).await,
        Command::DaemonStop => lifecycle::stop(g).await,
        Command::DaemonStatus => lifecycle::status(g, out).await,
        other => Err(CliError::internal(format!(
            "appduct {} is not implemented in this build yet",
            other.label()
        ))),
    };
    success.map(Reply::Success)
}
