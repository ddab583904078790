//! Runs a validated [`Invocation`]: the local commands here, the daemon-backed ones through
//! [`run_daemon_command`].

use crate::command::{Command, Invocation};
use crate::error::CliError;
use crate::init::{self, InitEnv};
use crate::output::{Output, Success};
use crate::{completions, keygen};

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
        Command::Doctor(_) => Err(CliError::internal(format!(
            "appduct {} is not implemented in this build yet",
            inv.command.label()
        ))),
        _ => run_daemon_command(inv, out),
    }
}

/// The daemon-backed commands: `sessions *`, `tools *`, `events *`, `daemon *` and `mcp`
/// (05 §2.4). Arguments are already validated; `inv.globals.state_dir()` and
/// `inv.globals.restart_choice()` give the connection settings.
///
/// PLACEHOLDER until the typed control client (`appduct_daemon::client`) is wired in: every
/// daemon-backed command fails with `connection_error` (exit 70).
pub fn run_daemon_command(inv: &Invocation, out: &Output) -> Result<Reply, CliError> {
    let _ = (inv, out);
    Err(CliError::connection(
        "this appduct build cannot reach the daemon yet",
    ))
}
