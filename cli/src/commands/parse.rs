//! Raw arguments in, a typed [`Invocation`] out, or the exact thing to print instead (help,
//! version, a `usage_error`) (§L1, §L2.3). Clap's own errors, unknown words and bare nouns are
//! mapped here; each command validates its own arguments (see `validate` in `commands/mod.rs`).
//!
//! Every argument rule is checked before anything contacts the daemon, so a wrong command line
//! never spawns one.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use std::io::IsTerminal as _;

use clap::{CommandFactory as _, FromArgMatches as _, ValueEnum as _};

use super::args::absolute;
use super::{Cli, Invocation, validate};
use crate::error::CliError;
use crate::globals::{Globals, RestartFlag};
use crate::output::OutputFlags;
use crate::render::{ColorMode, ColourEnv, colour_enabled};

/// The v2 top-level words and their replacements (§L1).
pub const REMOVED_WORDS: [(&str, &str); 4] = [
    ("ls", "sessions ls"),
    ("revoke", "sessions revoke"),
    ("link", "sessions link"),
    ("invoke", "tools call"),
];

/// What to do instead of running a command.
#[derive(Debug)]
pub enum Early {
    /// Help or version text for stdout, exit 0 (`--help` and `--version` ignore `--json`).
    Print(String),
    /// Clap's own help display (keeps its styling); print it, exit 0.
    Help(clap::Error),
    /// An argument error: render with these flags, exit 64.
    Usage(CliError, OutputFlags),
}

/// Parses `args` (including the program name) into an [`Invocation`].
pub fn parse(args: Vec<OsString>) -> Result<Invocation, Early> {
    let flags = prescan_output_flags(&args);
    // Help goes to stdout: styled when colour would be used there (never under --json).
    let help_colour = !flags.json
        && colour_enabled(
            flags.color,
            &ColourEnv::from_process(),
            std::io::stdout().is_terminal(),
        );
    let mut cmd = Cli::command().color(if help_colour {
        clap::ColorChoice::Always
    } else {
        clap::ColorChoice::Never
    });
    let matches = match cmd.try_get_matches_from_mut(args.iter()) {
        Ok(m) => m,
        Err(e) => return Err(from_clap_error(e, &args, flags)),
    };
    let cli = Cli::from_arg_matches(&matches).map_err(|e| from_clap_error(e, &args, flags))?;
    if cli.globals.version {
        return Err(Early::Print(version_line()));
    }
    let output = OutputFlags {
        json: cli.globals.json,
        pretty: cli.globals.pretty,
        verbose: cli.globals.verbose,
        color: match (cli.globals.no_color, cli.globals.color) {
            (true, _) => ColorMode::Never,
            (false, mode) => mode.unwrap_or_default(),
        },
    };
    let restart = match (cli.globals.daemon_restart, cli.globals.no_daemon_restart) {
        (true, _) => RestartFlag::Force,
        (false, true) => RestartFlag::Forbid,
        (false, false) => RestartFlag::Unset,
    };
    let globals = Globals {
        output,
        state_dir_flag: cli.globals.state_dir.as_deref().map(absolute),
        restart,
    };
    let Some(top) = cli.command else {
        // Bare `appduct`: top-level help on stdout, exit 0.
        return Err(Early::Print(cmd.render_help().to_string()));
    };
    // Flags after an unknown word are not parsed by clap; the prescan still sees them.
    let error_flags = OutputFlags {
        json: output.json || flags.json,
        pretty: output.pretty || flags.pretty,
        verbose: output.verbose || flags.verbose,
        color: if output.color == ColorMode::Auto {
            flags.color
        } else {
            output.color
        },
    };
    let command = validate(top).map_err(|e| Early::Usage(e, error_flags))?;
    Ok(Invocation { globals, command })
}

/// `appduct <version>`.
pub fn version_line() -> String {
    format!("appduct {}\n", env!("CARGO_PKG_VERSION"))
}

/// The output flags, found without clap so that a command line clap refuses is still reported
/// in the requested format. Stops at `--`. For `--color`, the last valid value counts.
pub fn prescan_output_flags(args: &[OsString]) -> OutputFlags {
    let mut flags = OutputFlags::default();
    let mut iter = args.iter().skip(1);
    while let Some(arg) = iter.next() {
        let colour = |value: Option<&OsString>| {
            value
                .and_then(|v| v.to_str())
                .and_then(|v| ColorMode::from_str(v, false).ok())
        };
        match arg.to_str() {
            Some("--") => break,
            Some("--json") => flags.json = true,
            Some("--pretty") => flags.pretty = true,
            Some("--verbose") => flags.verbose = true,
            Some("--no-color") => flags.color = ColorMode::Never,
            Some("--color") => {
                if let Some(mode) = colour(iter.next()) {
                    flags.color = mode;
                }
            }
            Some(a) if a.starts_with("--color=") => {
                if let Ok(mode) = ColorMode::from_str(&a["--color=".len()..], false) {
                    flags.color = mode;
                }
            }
            _ => {}
        }
    }
    flags
}

// ---------------------------------------------------------------------------------------------
// clap errors
// ---------------------------------------------------------------------------------------------

fn from_clap_error(err: clap::Error, args: &[OsString], flags: OutputFlags) -> Early {
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Early::Help(err),
        _ => Early::Usage(clap_usage_error(&err, args), flags),
    }
}

/// A clap parse error as a `usage_error`: its first paragraph as one line, with the
/// missing-value case phrased as "requires a value" (§L2.3).
fn clap_usage_error(err: &clap::Error, args: &[OsString]) -> CliError {
    let arg_name = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => Some(flag_name(s).to_owned()),
        _ => None,
    };
    let missing_value = err.kind() == ErrorKind::InvalidValue
        && matches!(err.get(ContextKind::InvalidValue), Some(ContextValue::String(v)) if v.is_empty());
    let message = match (&arg_name, missing_value) {
        (Some(name), true) => format!("{name} requires a value"),
        _ => first_paragraph(&err.render().to_string()),
    };
    let mut e = CliError::usage(message);
    if let Some(name) = arg_name {
        e = e.with_detail("argument", name);
    }
    e.with_hint(help_hint(args))
}

/// `--filter <TEXT>` → `--filter`.
fn flag_name(rendered: &str) -> &str {
    rendered.split([' ', '=']).next().unwrap_or(rendered)
}

fn first_paragraph(rendered: &str) -> String {
    let text = rendered.trim_start();
    let text = text.strip_prefix("error: ").unwrap_or(text);
    let para = text.split("\n\n").next().unwrap_or(text);
    para.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `Run "appduct tools ls --help" for usage.` for the deepest known command words in `args`.
fn help_hint(args: &[OsString]) -> String {
    let path = known_command_path(args);
    if path.is_empty() {
        "Run \"appduct --help\" for usage.".to_owned()
    } else {
        format!("Run \"appduct {} --help\" for usage.", path.join(" "))
    }
}

/// The known noun (and verb) among the positional words of `args`.
fn known_command_path(args: &[OsString]) -> Vec<String> {
    let root = Cli::command();
    let mut words = Vec::new();
    let mut current = &root;
    let mut iter = args.iter().skip(1);
    while let Some(arg) = iter.next() {
        let Some(text) = arg.to_str() else { break };
        if text == "--state-dir" || text == "--color" {
            iter.next();
            continue;
        }
        if text.starts_with('-') {
            continue;
        }
        match current.find_subcommand(text) {
            Some(sub) => {
                words.push(text.to_owned());
                current = sub;
            }
            None => break,
        }
    }
    words
}

/// The verbs of `noun`, from the clap definition.
fn verbs_of(noun: &str) -> Vec<String> {
    Cli::command()
        .find_subcommand(noun)
        .map(|n| {
            n.get_subcommands()
                .map(|s| s.get_name().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn commands_list() -> Vec<String> {
    Cli::command()
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect()
}

pub fn unknown_top_command(words: &[OsString]) -> CliError {
    let word = words
        .first()
        .map(|w| w.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some((_, replacement)) = REMOVED_WORDS.iter().find(|(w, _)| *w == word) {
        return CliError::usage(format!(
            "\"appduct {word}\" was removed; use \"appduct {replacement}\""
        ))
        .with_detail("command", word.as_str())
        .with_detail("replacement", *replacement);
    }
    CliError::usage(format!("unknown command \"{word}\""))
        .with_detail("command", word.as_str())
        .with_detail("commands", commands_list())
        .with_hint("Run \"appduct --help\" to list the commands.")
}

pub fn missing_verb(noun: &str) -> CliError {
    let verbs = verbs_of(noun);
    CliError::usage(format!(
        "\"appduct {noun}\" needs a verb: {}",
        verbs.join(", ")
    ))
    .with_detail("verbs", verbs)
    .with_hint(format!("Run \"appduct {noun} --help\" for usage."))
}

pub fn unknown_verb(noun: &str, words: &[OsString]) -> CliError {
    let verb = words
        .first()
        .map(|w| w.to_string_lossy().into_owned())
        .unwrap_or_default();
    let verbs = verbs_of(noun);
    CliError::usage(format!(
        "unknown command \"{noun} {verb}\"; the verbs of {noun} are: {}",
        verbs.join(", ")
    ))
    .with_detail("verbs", verbs)
    .with_hint(format!("Run \"appduct {noun} --help\" for usage."))
}
