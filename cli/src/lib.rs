//! The `appduct` command line (docs/cli.md) as a library, so the binary stays a thin
//! `main` and tests can reach the parser and renderers.
//!
//! - [`commands`]: one module per command (or noun), each owning its clap arguments, their
//!   validation into a typed request, its run and its human/JSON view; `commands/mod.rs` holds
//!   the top-level clap tree and the dispatch table ([`commands::run`]: daemon-backed commands
//!   on a tokio runtime, with exit 130 on SIGINT/SIGTERM unless the command handles them
//!   itself), `commands/parse.rs` turns arguments into a [`commands::Invocation`] (or help,
//!   version, usage error). `sessions link` resolves schemes and app ids, runs the link-connect
//!   flow and draws the terminal QR code with `appduct-client`'s `project`, `link_flow` and
//!   `qr` modules, shared with the MCP bridge; `doctor` reads artifacts with the bounded
//!   readers of `appduct-doctor` and never contacts the daemon.
//! - [`output`] and [`render`]: the output contract of §L3 (with [`output::Reply`], what a
//!   command returns to be printed) and the shared human helpers.
//! - [`globals`]: the parsed global flags every command reads.
//! - [`connect`]: the typed control client per command (auto-spawn, version policy, notices)
//!   and the mapping of client failures onto CLI errors.
//! - [`progress`], [`signals`], [`logging`], [`error`]: the `tools call` progress display,
//!   SIGINT/SIGTERM, tracing setup, `CliError` and exit codes.

pub mod commands;
pub mod connect;
pub mod error;
pub mod globals;
pub mod logging;
pub mod output;
pub mod progress;
pub mod render;
pub mod signals;

use std::ffi::OsString;

use commands::{Command, Early};
use logging::{LogRole, LogSetup};
use output::Output;

/// Runs the command line `args` (program name first) and returns the process exit status.
pub fn main_with_args(args: Vec<OsString>) -> u8 {
    let mcp = names_mcp(&args);
    match commands::parse(args) {
        Err(Early::Print(text)) => {
            output::write_stdout(&text);
            0
        }
        Err(Early::Help(help)) => {
            // Clap prints help to stdout with its own terminal styling.
            let _ = help.print();
            0
        }
        // `mcp` ignores --json and keeps stdout for JSON-RPC: its errors go to stderr (§L12),
        // never coloured (its stderr is usually an agent's log, §L3.3).
        Err(Early::Usage(err, flags)) if mcp => Output::for_process(output::OutputFlags {
            json: false,
            color: render::ColorMode::Never,
            ..flags
        })
        .print_failure(&err),
        Err(Early::Usage(err, flags)) => Output::for_process(flags).print_failure(&err),
        Ok(inv) => {
            let mut flags = inv.globals.output;
            if matches!(inv.command, Command::Mcp { .. }) {
                // The MCP host never colours its stderr, whatever --color says (§L3.3).
                flags.color = render::ColorMode::Never;
            }
            let mut out = Output::for_process(flags);
            out.set_command(inv.command.label());
            let role = match inv.command {
                Command::DaemonRun => LogRole::DaemonHost,
                Command::Mcp { .. } => LogRole::McpHost,
                _ => LogRole::Client,
            };
            let env = std::env::var(logging::LOG_ENV).ok();
            LogSetup::choose(role, inv.globals.output.json, env.as_deref())
                .install(out.stderr_paint.enabled);
            commands::run(&inv, &out)
        }
    }
}

/// Whether `args` (program name first) run the stdio server `mcp` (not `mcp install` or
/// `mcp uninstall`, §L20, whose output follows §L3).
fn names_mcp(args: &[OsString]) -> bool {
    let mut words = args.iter().skip(1);
    let mut seen_mcp = false;
    while let Some(arg) = words.next() {
        match arg.to_str() {
            // The global flag and the mcp flag that take a separate value.
            Some("--state-dir" | "--scheme" | "--color") => {
                words.next();
            }
            Some(a) if a.starts_with('-') => {}
            word if seen_mcp => {
                return !word.is_some_and(|w| commands::mcp::SETUP_WORDS.contains(&w));
            }
            Some("mcp") => seen_mcp = true,
            _ => return false,
        }
    }
    seen_mcp
}
