//! The commands of `appduct` (§L1): one module per command or noun, each owning its clap
//! arguments, their validation into a typed request, its run and its human/JSON view. This
//! module holds the top-level clap tree, the validated [`Command`] and the dispatch table.
//!
//! [`parse()`] turns raw arguments into an [`Invocation`]; [`run`] executes it and prints its
//! [`Reply`]. Daemon-backed commands run on a tokio runtime, with exit 130 on SIGINT/SIGTERM
//! unless the command handles them itself.

pub mod approvals;
pub mod args;
pub mod audit;
pub mod complete;
pub mod completions;
pub mod daemon;
pub mod doctor;
pub mod events;
pub mod examples;
pub mod http;
pub mod init;
pub mod keygen;
pub mod mcp;
pub mod mcp_setup;
pub mod parse;
pub mod playground;
pub mod policy;
pub mod sessions;
pub mod tools;
pub mod watch;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod view_tests;

use std::ffi::OsString;
use std::path::PathBuf;

use appduct_client::command_runner::TokioCommandRunner;
use appduct_protocol::control::{EventsListParams, EventsSinceParams, SubscribeParams};
use clap::{ArgAction, Args, Parser, Subcommand};
use clap_complete::Shell;

use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Reply};
use crate::signals::{INTERRUPTED, Interrupts};
pub use parse::{Early, parse};

const GLOBAL: &str = "Global options";

#[derive(Debug, Parser)]
#[command(
    name = "appduct",
    about = "Call functions inside running apps from agents, terminals and test runners",
    disable_version_flag = true,
    max_term_width = 100,
    after_help = examples::ROOT,
    // The Examples sections of the commands live in one place (examples.rs).
    mut_subcommands(examples::attach)
)]
pub struct Cli {
    #[command(flatten)]
    pub globals: GlobalArgs,
    #[command(subcommand)]
    pub command: Option<TopCommand>,
}

/// Flags accepted before or after the command words (§L2.1).
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Machine output: one JSON document per command (NDJSON for streams)
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,
    /// Indent JSON documents by 2 spaces
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub pretty: bool,
    /// Add meta (command, timestamp, duration)
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub verbose: bool,
    /// No ANSI colours (the same as --color never)
    #[arg(long = "no-color", global = true, conflicts_with = "color", help_heading = GLOBAL)]
    pub no_color: bool,
    /// ANSI colours: auto (on a terminal; NO_COLOR, CLICOLOR_FORCE, CLICOLOR apply), always or
    /// never. Never under --json
    #[arg(long, global = true, value_enum, value_name = "WHEN", help_heading = GLOBAL)]
    pub color: Option<crate::render::ColorMode>,
    /// State directory [env: APPDUCT_STATE_DIR; default: ~/.appduct]
    #[arg(long, global = true, value_name = "PATH", help_heading = GLOBAL)]
    pub state_dir: Option<PathBuf>,
    /// On version drift, replace an older daemon even if it is busy
    #[arg(long, global = true, conflicts_with = "no_daemon_restart", help_heading = GLOBAL)]
    pub daemon_restart: bool,
    /// Never force a daemon replacement (overrides APPDUCT_DAEMON_RESTART and the config)
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub no_daemon_restart: bool,
    /// Print the version
    #[arg(short = 'V', long, global = true, action = ArgAction::SetTrue, help_heading = GLOBAL)]
    pub version: bool,
}

#[derive(Debug, Subcommand)]
pub enum TopCommand {
    /// Live sessions and pending links
    Sessions(sessions::SessionsNoun),
    /// Tools registered by a session's app
    Tools(tools::ToolsNoun),
    /// Events declared and emitted by a session's app
    Events(events::EventsNoun),
    /// The per-user daemon
    Daemon(daemon::DaemonNoun),
    /// Calls waiting for an operator's approval, and grants
    Approvals(approvals::ApprovalsNoun),
    /// Record the project's deep-link scheme and app ids in .appduct/config.json
    Init(init::InitArgs),
    /// Create the daemon's host key
    Keygen(keygen::KeygenArgs),
    /// Run the MCP bridge on stdio; `mcp install` / `mcp uninstall` configure an agent client
    Mcp(mcp::McpArgs),
    /// Inspect a built app (.apk, .aab, .ipa, .app) for the appduct native module
    Doctor(doctor::DoctorArgs),
    /// The tool policy at runtime (applied without dropping sessions)
    Policy(policy::PolicyNoun),
    /// Read the audit log (records of settled tool calls) from the state directory
    Audit(audit::AuditArgs),
    /// The daemon's loopback HTTP API: enable, disable, status, token
    Http(http::HttpNoun),
    /// Print a shell completion script
    Completions(completions::CompletionsArgs),
    /// Run the playground: a demo app connected to the daemon, to try every command on
    Playground(playground::PlaygroundArgs),
    /// Live view of the daemon: sessions, calls, approvals (approve with a key), events, audit
    Watch(watch::WatchArgs),
    #[command(external_subcommand)]
    Unknown(Vec<OsString>),
}

/// A parsed and validated command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    pub globals: Globals,
    pub command: Command,
}

/// A validated command.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    SessionsLs,
    SessionsRevoke {
        selector: Option<String>,
    },
    SessionsLink(sessions::link::LinkRequest),
    /// `sessions lease` (§L6.5).
    SessionsLease(sessions::lease::LeaseRequest),
    ToolsLs(tools::ls::ToolsLs),
    ToolsDescribe {
        selector: Option<String>,
        name: String,
    },
    ToolsCall(tools::call::ToolsCall),
    ToolsSnapshot {
        selector: Option<String>,
        mode: tools::snapshot::SnapshotMode,
        /// `--from <file>`: the surface from a snapshot file, no daemon (§L7.4.1).
        from: Option<std::path::PathBuf>,
    },
    /// `tools test` (§L7.6).
    ToolsTest(tools::test::ToolsTest),
    /// `events ls`: `events.list` params.
    EventsLs(EventsListParams),
    /// `events tail`: `events.subscribe` params (`kinds: ["app_event"]`).
    EventsTail(SubscribeParams),
    /// `events since`: `events.since` params (`since` is the cursor).
    EventsSince(EventsSinceParams),
    /// `approvals ls | approve | deny | revoke`.
    Approvals(approvals::Approvals),
    DaemonRun,
    DaemonStart,
    DaemonStop,
    DaemonStatus,
    Init(init::InitRequest),
    Keygen(keygen::KeygenRequest),
    /// `mcp`: the scheme is not validated here; an invalid one is reported at startup and the
    /// server still starts (§L12).
    Mcp {
        scheme: Option<String>,
        /// `--max-image-bytes` / `APPDUCT_MCP_MAX_IMAGE_BYTES` (§M8.5).
        max_image_bytes: u64,
        /// `--heartbeat-ms` / `APPDUCT_MCP_HEARTBEAT_MS` (§M17).
        heartbeat_ms: u64,
    },
    /// `mcp install` / `mcp uninstall` (§L20): edits an agent client's configuration file.
    McpSetup(mcp_setup::SetupRequest),
    Doctor(doctor::DoctorRequest),
    Completions {
        shell: Shell,
    },
    /// `playground`: the in-process demo device; `--tour` runs the scripted tour and exits.
    Playground {
        tour: bool,
    },
    PolicyLs,
    PolicySet(appduct_protocol::control::PolicySetParams),
    PolicyReset(appduct_protocol::control::PolicyResetParams),
    DaemonReload,
    /// `audit`: reads the day files; never contacts the daemon.
    Audit(audit::AuditRequest),
    /// `watch`: the live terminal view (§L23).
    Watch,
    /// `http enable | disable | status | token`.
    Http(http::Http),
}

impl Command {
    /// The noun and verb, as in `meta.command` (§L3.4).
    pub fn label(&self) -> &'static str {
        match self {
            Command::SessionsLs => "sessions ls",
            Command::SessionsRevoke { .. } => "sessions revoke",
            Command::SessionsLink(_) => "sessions link",
            Command::SessionsLease(_) => "sessions lease",
            Command::ToolsLs(_) => "tools ls",
            Command::ToolsDescribe { .. } => "tools describe",
            Command::ToolsCall(_) => "tools call",
            Command::ToolsSnapshot { .. } => "tools snapshot",
            Command::ToolsTest(_) => "tools test",
            Command::EventsLs(_) => "events ls",
            Command::EventsTail(_) => "events tail",
            Command::EventsSince(_) => "events since",
            Command::Approvals(a) => a.label(),
            Command::DaemonRun => "daemon run",
            Command::DaemonStart => "daemon start",
            Command::DaemonStop => "daemon stop",
            Command::DaemonStatus => "daemon status",
            Command::Init(_) => "init",
            Command::Keygen(_) => "keygen",
            Command::Mcp { .. } => "mcp",
            Command::McpSetup(r) => match r.action {
                mcp_setup::SetupAction::Install => "mcp install",
                mcp_setup::SetupAction::Uninstall => "mcp uninstall",
            },
            Command::Doctor(_) => "doctor",
            Command::Completions { .. } => "completions",
            Command::Playground { .. } => "playground",
            Command::Audit(_) => "audit",
            Command::PolicyLs => "policy ls",
            Command::PolicySet(_) => "policy set",
            Command::PolicyReset(_) => "policy reset",
            Command::DaemonReload => "daemon reload",
            Command::Watch => "watch",
            Command::Http(h) => h.label(),
        }
    }

    /// Whether the command talks to (or hosts) the daemon (§L2.4).
    pub fn uses_daemon(&self) -> bool {
        !matches!(
            self,
            Command::Init(_)
                | Command::McpSetup(_)
                | Command::Keygen(_)
                | Command::Doctor(_)
                | Command::Completions { .. }
                | Command::Audit(_)
        )
    }
}

/// Validates the clap result: each command checks its own arguments.
fn validate(top: TopCommand) -> Result<Command, CliError> {
    match top {
        TopCommand::Unknown(words) => Err(parse::unknown_top_command(&words)),
        TopCommand::Sessions(noun) => sessions::validate(noun),
        TopCommand::Tools(noun) => tools::validate(noun),
        TopCommand::Events(noun) => events::validate(noun),
        TopCommand::Daemon(noun) => daemon::validate(noun),
        TopCommand::Approvals(noun) => approvals::validate(noun),
        TopCommand::Init(a) => init::validate(a),
        TopCommand::Keygen(a) => keygen::validate(a),
        TopCommand::Mcp(a) => mcp::validate(a),
        TopCommand::Doctor(a) => doctor::validate(a),
        TopCommand::Playground(a) => Ok(playground::validate(a)),
        TopCommand::Completions(a) => completions::validate(a),
        TopCommand::Audit(a) => audit::validate(a),
        TopCommand::Policy(noun) => policy::validate(noun),
        TopCommand::Watch(a) => watch::validate(a),
        TopCommand::Http(noun) => http::validate(noun),
    }
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
            let env = init::InitEnv::current(&inv.globals)?;
            let mut success = init::run(req, &env)?;
            if req.mcp_json {
                // `--mcp-json`: the project's .mcp.json for Claude Code (§L10, §L20).
                let setup = mcp_setup::SetupRequest {
                    action: mcp_setup::SetupAction::Install,
                    client: mcp_setup::Client::ClaudeCode,
                    scope: mcp_setup::Scope::Project,
                    dry_run: false,
                    skill: false,
                    url: false,
                };
                let written = mcp_setup::run(&setup, &mcp_setup::SetupEnv::current()?)?;
                if let serde_json::Value::Object(data) = &mut success.data {
                    data.insert("mcpJson".into(), written.data);
                }
                success.human.push('\n');
                success.human.push_str(&written.human);
            }
            Ok(Reply::Success(success))
        }
        Command::Doctor(req) => doctor::run(req).map(Reply::Success),
        Command::Watch => watch::run(&inv.globals, out),
        Command::McpSetup(req) => {
            let mut env = mcp_setup::SetupEnv::current()?;
            if req.url {
                env.url = Some(mcp_setup::url_form(inv.globals.state_dir()?.path())?);
            }
            mcp_setup::run(req, &env).map(Reply::Success)
        }
        Command::Audit(req) if !req.follow => audit::run(&inv.globals, out, req),
        Command::Audit(req) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| CliError::internal(format!("cannot start the async runtime: {e}")))?;
            let reply = runtime.block_on(audit::run_follow(&inv.globals, out, req));
            runtime.shutdown_background();
            reply
        }
        _ => run_daemon_command(inv, out),
    }
}

/// The daemon-backed commands: `sessions *`, `tools *`, `events *`, `daemon *`, `playground`
/// and `mcp` (§L2.4), on a multi-thread tokio runtime, except `daemon run` and `mcp`, which
/// run on a current-thread one (ARCHITECTURE.md: no cross-worker hand-offs per call; the bridge
/// builds its own); `tools call`, `events tail` and `playground` handle SIGINT and SIGTERM
/// themselves; every other command ends with exit 130 and no envelope when interrupted (§L4).
pub fn run_daemon_command(inv: &Invocation, out: &Output) -> Result<Reply, CliError> {
    if let Command::Mcp {
        scheme,
        max_image_bytes,
        heartbeat_ms,
    } = &inv.command
    {
        return Ok(Reply::Done(mcp::run(
            &inv.globals,
            scheme.as_ref(),
            *max_image_bytes,
            *heartbeat_ms,
        )));
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
            .map(|dir| Reply::Done(daemon::run::run(&runtime, dir.path(), out))),
        _ => runtime.block_on(daemon_command(inv, out)),
    };
    // Nothing left on the runtime may delay the exit (connection tasks, a cancel in flight).
    runtime.shutdown_background();
    result
}

async fn daemon_command(inv: &Invocation, out: &Output) -> Result<Reply, CliError> {
    let g = &inv.globals;
    match &inv.command {
        Command::ToolsCall(c) => tools::call::run(g, out, c).await.map(Reply::Success),
        Command::EventsTail(p) => events::run_tail(g, out, p).await,
        Command::SessionsLease(r) => sessions::lease::run(g, out, r).await,
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
    if let Command::ToolsSnapshot {
        selector,
        mode,
        from,
    } = &inv.command
    {
        return tools::snapshot::run(g, out, selector.as_deref(), mode, from.as_deref()).await;
    }
    let success = match &inv.command {
        Command::SessionsLs => sessions::ls(g, out).await,
        Command::SessionsRevoke { selector } => sessions::revoke(g, out, selector.as_deref()).await,
        Command::SessionsLink(req) => {
            sessions::link::run(g, out, req, &TokioCommandRunner::new()).await
        }
        Command::ToolsLs(req) => tools::ls::run(g, out, req).await,
        Command::ToolsDescribe { selector, name } => {
            tools::describe::run(g, out, selector.as_deref(), name).await
        }
        Command::ToolsTest(t) => tools::test::run(g, out, t).await,
        Command::EventsLs(p) => events::run_ls(g, out, p).await,
        Command::EventsSince(p) => events::run_since(g, out, p).await,
        Command::DaemonStart => daemon::lifecycle::start(g, out).await,
        Command::DaemonStop => daemon::lifecycle::stop(g).await,
        Command::DaemonStatus => daemon::lifecycle::status(g, out).await,
        Command::Approvals(a) => approvals::run(g, out, a).await,
        Command::DaemonReload => policy::reload(g, out).await,
        Command::PolicyLs => policy::ls(g, out).await,
        Command::PolicySet(p) => policy::set(g, out, p).await,
        Command::PolicyReset(p) => policy::reset(g, out, p).await,
        Command::Http(h) => http::run(g, out, h).await,
        other => Err(CliError::internal(format!(
            "appduct {} is not implemented in this build yet",
            other.label()
        ))),
    };
    success.map(Reply::Success)
}
