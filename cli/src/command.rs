//! Argument parsing and validation (05 §1, §2.3, §6–§14): raw arguments in, a typed
//! [`Invocation`] out, or the exact thing to print instead (help, version, a `usage_error`).
//!
//! Every argument rule is checked here, before anything contacts the daemon, so a wrong
//! command line never spawns one. Daemon-backed commands carry the control-plane params they
//! will send, already valid.

use std::ffi::OsString;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use appduct_daemon::delivery::DeviceTarget;
use appduct_daemon::envflag;
use appduct_daemon::project::{APP_ID_PATTERN, is_valid_app_id};
use appduct_daemon::state_dir::{StateDir, StateDirError};
use appduct_protocol::control::{
    EventKind, EventsListParams, EventsSinceParams, MAX_SELECTOR_LEN, SubscribeParams,
    ToolsListParams, Transport, is_valid_group,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::limits::{
    MAX_GLOB_LEN, MAX_LINK_TTL_S, MAX_SAFE_INTEGER, MAX_TOOLS_FILTER_LEN,
};
use appduct_protocol::link::validate_scheme;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory as _, FromArgMatches as _};
use clap_complete::Shell;
use serde_json::{Map, Value};

use crate::args::{
    Cli, DaemonVerb, DoctorArgs, EventsVerb, LinkArgs, OpenArg, SessionsVerb, ToolsCallArgs,
    ToolsLsArgs, ToolsVerb, TopCommand, TransportArg,
};
use crate::error::CliError;
use crate::output::OutputFlags;

/// The boolean variable that acts as `--daemon-restart` (05 §2.2).
pub const DAEMON_RESTART_ENV: &str = "APPDUCT_DAEMON_RESTART";

/// The v2 top-level words and their replacements (05 §1).
const REMOVED_WORDS: [(&str, &str); 4] = [
    ("ls", "sessions ls"),
    ("revoke", "sessions revoke"),
    ("link", "sessions link"),
    ("invoke", "tools call"),
];

/// A parsed and validated command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    pub globals: Globals,
    pub command: Command,
}

/// The global flags (05 §2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Globals {
    pub output: OutputFlags,
    /// `--state-dir`, made absolute against the current directory.
    pub state_dir_flag: Option<PathBuf>,
    pub restart: RestartFlag,
}

/// `--daemon-restart` / `--no-daemon-restart`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartFlag {
    Unset,
    Force,
    Forbid,
}

/// Whether an older, busy daemon may be replaced on version drift (01 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartChoice {
    /// `--daemon-restart` or `APPDUCT_DAEMON_RESTART` true.
    Force,
    /// `--no-daemon-restart`: overrides the variable and the config key.
    Forbid,
    /// Neither: the daemon config's `restartDaemonOnVersionMismatch` decides.
    FromConfig,
}

impl Globals {
    /// The state directory: `--state-dir` > `APPDUCT_STATE_DIR` > `~/.appduct`, absolute
    /// (01 §4.1). Failing to find one is a `connection_error` naming `APPDUCT_STATE_DIR`.
    pub fn state_dir(&self) -> Result<StateDir, CliError> {
        StateDir::resolve(self.state_dir_flag.as_deref()).map_err(state_dir_error)
    }

    /// The restart choice of this run. Reads `APPDUCT_DAEMON_RESTART` only when no flag was
    /// given; an unrecognised value logs a warning (human mode only) and counts as false.
    pub fn restart_choice(&self) -> RestartChoice {
        match self.restart {
            RestartFlag::Force => RestartChoice::Force,
            RestartFlag::Forbid => RestartChoice::Forbid,
            RestartFlag::Unset if envflag::env_bool(DAEMON_RESTART_ENV) => RestartChoice::Force,
            RestartFlag::Unset => RestartChoice::FromConfig,
        }
    }
}

/// Every state-directory problem is a `connection_error` for clients (01 §4.1).
pub fn state_dir_error(e: StateDirError) -> CliError {
    CliError::connection(e.to_string())
}

/// A validated command.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    SessionsLs,
    SessionsRevoke {
        selector: Option<String>,
    },
    SessionsLink(LinkRequest),
    ToolsLs(ToolsLs),
    ToolsDescribe {
        selector: Option<String>,
        name: String,
    },
    ToolsCall(ToolsCall),
    ToolsSnapshot {
        selector: Option<String>,
        mode: SnapshotMode,
    },
    /// `events ls`: `events.list` params.
    EventsLs(EventsListParams),
    /// `events tail`: `events.subscribe` params (`kinds: ["app_event"]`).
    EventsTail(SubscribeParams),
    /// `events since`: `events.since` params (`since` is the cursor).
    EventsSince(EventsSinceParams),
    DaemonRun,
    DaemonStart,
    DaemonStop,
    DaemonStatus,
    Init(InitRequest),
    Keygen(KeygenRequest),
    /// `mcp`: the scheme is not validated here; an invalid one is reported at startup and the
    /// server still starts (05 §12).
    Mcp {
        scheme: Option<String>,
    },
    Doctor(DoctorRequest),
    Completions {
        shell: Shell,
    },
    /// `playground`: the in-process demo device; `--tour` runs the scripted tour and exits.
    Playground {
        tour: bool,
    },
}

impl Command {
    /// The noun and verb, as in `meta.command` (05 §3.4).
    pub fn label(&self) -> &'static str {
        match self {
            Command::SessionsLs => "sessions ls",
            Command::SessionsRevoke { .. } => "sessions revoke",
            Command::SessionsLink(_) => "sessions link",
            Command::ToolsLs(_) => "tools ls",
            Command::ToolsDescribe { .. } => "tools describe",
            Command::ToolsCall(_) => "tools call",
            Command::ToolsSnapshot { .. } => "tools snapshot",
            Command::EventsLs(_) => "events ls",
            Command::EventsTail(_) => "events tail",
            Command::EventsSince(_) => "events since",
            Command::DaemonRun => "daemon run",
            Command::DaemonStart => "daemon start",
            Command::DaemonStop => "daemon stop",
            Command::DaemonStatus => "daemon status",
            Command::Init(_) => "init",
            Command::Keygen(_) => "keygen",
            Command::Mcp { .. } => "mcp",
            Command::Doctor(_) => "doctor",
            Command::Completions { .. } => "completions",
            Command::Playground { .. } => "playground",
        }
    }

    /// Whether the command talks to (or hosts) the daemon (05 §2.4).
    pub fn uses_daemon(&self) -> bool {
        !matches!(
            self,
            Command::Init(_)
                | Command::Keygen(_)
                | Command::Doctor(_)
                | Command::Completions { .. }
        )
    }
}

/// `sessions link` (05 §6.3), after the flag combination rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRequest {
    pub ttl_seconds: Option<u32>,
    pub qr: bool,
    /// Syntax already checked; resolution (§5.1) happens when the command runs.
    pub scheme: Option<String>,
    pub open: Option<OpenTarget>,
    /// `web` for `--open web` or `--transport web`, else `native`.
    pub transport: Transport,
    pub device: Option<String>,
    pub app_id: Option<String>,
    pub relaunch: bool,
    /// Only with `--open web`; an `http` or `https` URL.
    pub url: Option<String>,
}

/// A `sessions link --open` target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenTarget {
    Android,
    IosSim,
    IosDevice,
    Web,
}

impl OpenTarget {
    /// The delivery target of `--open`; `web` opens nothing.
    pub fn device_target(self) -> Option<DeviceTarget> {
        match self {
            OpenTarget::Android => Some(DeviceTarget::Android),
            OpenTarget::IosSim => Some(DeviceTarget::IosSim),
            OpenTarget::IosDevice => Some(DeviceTarget::IosDevice),
            OpenTarget::Web => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OpenTarget::Android => "android",
            OpenTarget::IosSim => "ios-sim",
            OpenTarget::IosDevice => "ios-device",
            OpenTarget::Web => "web",
        }
    }
}

/// `tools ls` (05 §7.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolsLs {
    /// What the user gave; `limit` stays `None` when not given (the human default of 50 is
    /// applied by the renderer, JSON has no default).
    pub params: ToolsListParams,
    /// `--groups`: the group summary only.
    pub groups_only: bool,
    pub full: bool,
}

/// The human default page size of `tools ls` and `events ls`.
pub const HUMAN_DEFAULT_LIMIT: u64 = 50;

/// `tools call` (05 §7.3). `callId` and `progress` are decided when the call is made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolsCall {
    pub selector: Option<String>,
    pub name: String,
    /// The parsed `--input` / `--input-file` object; `{}` by default.
    pub args: Map<String, Value>,
    pub timeout_ms: Option<u64>,
    pub no_progress: bool,
}

/// `tools snapshot --write` or `--check` (05 §7.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotMode {
    /// `--write -`: the document itself on stdout.
    WriteStdout,
    Write(PathBuf),
    Check(PathBuf),
}

/// `init` (05 §10); values already checked against §5.1 and §5.2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitRequest {
    pub scheme: Option<String>,
    pub ios_app_id: Option<String>,
    pub android_app_id: Option<String>,
    pub force: bool,
}

/// `keygen` (05 §11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeygenRequest {
    /// `--out`, made absolute.
    pub out: Option<PathBuf>,
    pub force: bool,
}

/// `doctor` (05 §13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorRequest {
    pub artifact: PathBuf,
    pub format: ArtifactFormat,
    pub expect: Option<Expectation>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArtifactFormat {
    Apk,
    Aab,
    Ipa,
    App,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expectation {
    Present,
    Absent,
}

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
    let mut cmd = Cli::command();
    if flags.no_color {
        cmd = cmd.color(clap::ColorChoice::Never);
    }
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
        no_color: cli.globals.no_color,
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
        no_color: output.no_color || flags.no_color,
    };
    let command = validate(top).map_err(|e| Early::Usage(e, error_flags))?;
    Ok(Invocation { globals, command })
}

/// `appduct <version>`.
pub fn version_line() -> String {
    format!("appduct {}\n", env!("CARGO_PKG_VERSION"))
}

/// The output flags, found without clap so that a command line clap refuses is still reported
/// in the requested format. Stops at `--`.
pub fn prescan_output_flags(args: &[OsString]) -> OutputFlags {
    let mut flags = OutputFlags::default();
    for arg in args.iter().skip(1) {
        match arg.to_str() {
            Some("--") => break,
            Some("--json") => flags.json = true,
            Some("--pretty") => flags.pretty = true,
            Some("--verbose") => flags.verbose = true,
            Some("--no-color") => flags.no_color = true,
            _ => {}
        }
    }
    flags
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
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
/// missing-value case phrased as "requires a value" (05 §2.3).
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
        if text == "--state-dir" {
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

fn unknown_top_command(words: &[OsString]) -> CliError {
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

fn missing_verb(noun: &str) -> CliError {
    let verbs = verbs_of(noun);
    CliError::usage(format!(
        "\"appduct {noun}\" needs a verb: {}",
        verbs.join(", ")
    ))
    .with_detail("verbs", verbs)
    .with_hint(format!("Run \"appduct {noun} --help\" for usage."))
}

fn unknown_verb(noun: &str, words: &[OsString]) -> CliError {
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

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

fn validate(top: TopCommand) -> Result<Command, CliError> {
    match top {
        TopCommand::Unknown(words) => Err(unknown_top_command(&words)),
        TopCommand::Sessions(noun) => match noun.verb {
            None => Err(missing_verb("sessions")),
            Some(SessionsVerb::Unknown(words)) => Err(unknown_verb("sessions", &words)),
            Some(SessionsVerb::Ls) => Ok(Command::SessionsLs),
            Some(SessionsVerb::Revoke(a)) => Ok(Command::SessionsRevoke {
                selector: optional_selector("sessions revoke", a.positionals)?,
            }),
            Some(SessionsVerb::Link(a)) => Ok(Command::SessionsLink(link(a)?)),
        },
        TopCommand::Tools(noun) => match noun.verb {
            None => Err(missing_verb("tools")),
            Some(ToolsVerb::Unknown(words)) => Err(unknown_verb("tools", &words)),
            Some(ToolsVerb::Ls(a)) => Ok(Command::ToolsLs(tools_ls(a)?)),
            Some(ToolsVerb::Describe(a)) => {
                let (selector, name) = selector_and_value("tools describe", "NAME", a.positionals)?;
                Ok(Command::ToolsDescribe { selector, name })
            }
            Some(ToolsVerb::Call(a)) => Ok(Command::ToolsCall(tools_call(a)?)),
            Some(ToolsVerb::Snapshot(a)) => {
                let selector = optional_selector("tools snapshot", a.selector.positionals)?;
                let mode = match (a.write, a.check) {
                    (Some(w), None) if w.as_os_str() == "-" => SnapshotMode::WriteStdout,
                    (Some(w), None) => SnapshotMode::Write(w),
                    (None, Some(c)) => SnapshotMode::Check(c),
                    _ => {
                        return Err(CliError::usage(
                            "tools snapshot needs exactly one of --write <file> and --check <file>",
                        ));
                    }
                };
                Ok(Command::ToolsSnapshot { selector, mode })
            }
        },
        TopCommand::Events(noun) => match noun.verb {
            None => Err(missing_verb("events")),
            Some(EventsVerb::Unknown(words)) => Err(unknown_verb("events", &words)),
            Some(EventsVerb::Ls(a)) => Ok(Command::EventsLs(
                EventsListParams::default()
                    .with_selector(optional_selector("events ls", a.selector.positionals)?)
                    .with_name(glob(a.name)?)
                    .with_limit(opt(a.limit, |v| positive_int("--limit", v))?)
                    .with_offset(opt(a.offset, |v| non_negative_int("--offset", v))?),
            )),
            Some(EventsVerb::Tail(a)) => Ok(Command::EventsTail(
                SubscribeParams::default()
                    .with_session_selector(optional_selector(
                        "events tail",
                        a.selector.positionals,
                    )?)
                    .with_kinds(Some(vec![EventKind::AppEvent]))
                    .with_name(glob(a.name)?)
                    .with_payload_max_bytes(opt(a.payload_max_bytes, |v| {
                        positive_int("--payload-max-bytes", v)
                    })?),
            )),
            Some(EventsVerb::Since(a)) => {
                let (selector, cursor) =
                    selector_and_value("events since", "CURSOR", a.positionals.positionals)?;
                let since = non_negative_int("<cursor>", &cursor)?;
                Ok(Command::EventsSince(
                    EventsSinceParams::default()
                        .with_selector(selector)
                        .with_since(Some(since))
                        .with_limit(opt(a.limit, |v| positive_int("--limit", v))?)
                        .with_name(glob(a.name)?)
                        .with_payload_max_bytes(opt(a.payload_max_bytes, |v| {
                            positive_int("--payload-max-bytes", v)
                        })?),
                ))
            }
        },
        TopCommand::Daemon(noun) => match noun.verb {
            None => Err(missing_verb("daemon")),
            Some(DaemonVerb::Unknown(words)) => Err(unknown_verb("daemon", &words)),
            Some(DaemonVerb::Run) => Ok(Command::DaemonRun),
            Some(DaemonVerb::Start) => Ok(Command::DaemonStart),
            Some(DaemonVerb::Stop) => Ok(Command::DaemonStop),
            Some(DaemonVerb::Status) => Ok(Command::DaemonStatus),
        },
        TopCommand::Init(a) => Ok(Command::Init(InitRequest {
            scheme: a.scheme.map(scheme).transpose()?,
            ios_app_id: a
                .ios_app_id
                .map(|v| app_id("--ios-app-id", v))
                .transpose()?,
            android_app_id: a
                .android_app_id
                .map(|v| app_id("--android-app-id", v))
                .transpose()?,
            force: a.force,
        })),
        TopCommand::Keygen(a) => Ok(Command::Keygen(KeygenRequest {
            out: a.out.as_deref().map(absolute),
            force: a.force,
        })),
        TopCommand::Mcp(a) => Ok(Command::Mcp { scheme: a.scheme }),
        TopCommand::Doctor(a) => Ok(Command::Doctor(doctor(a)?)),
        TopCommand::Playground(a) => Ok(Command::Playground { tour: a.tour }),
        TopCommand::Completions(a) => match a.shell {
            Some(shell) => Ok(Command::Completions { shell }),
            None => Err(CliError::usage(
                "completions needs a shell: bash, zsh, fish, powershell or elvish",
            )),
        },
    }
}

fn opt<T>(
    raw: Option<String>,
    check: impl FnOnce(&str) -> Result<T, CliError>,
) -> Result<Option<T>, CliError> {
    raw.as_deref().map(check).transpose()
}

/// Decimal digits only: no sign, no spaces, no exponent.
fn parse_digits(raw: &str) -> Option<u64> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

/// An integer flag in `min..=max`; `rule` completes "`flag` must be …".
fn int_in(flag: &str, raw: &str, min: u64, max: u64, rule: &str) -> Result<u64, CliError> {
    parse_digits(raw)
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| {
            CliError::usage(format!("{flag} must be {rule} (got \"{raw}\")"))
                .with_detail("argument", flag)
        })
}

/// `1..=2^53-1` (05 §2.3 "must be a positive integer").
pub fn positive_int(flag: &str, raw: &str) -> Result<u64, CliError> {
    int_in(flag, raw, 1, MAX_SAFE_INTEGER, "a positive integer")
}

/// `0..=2^53-1`.
pub fn non_negative_int(flag: &str, raw: &str) -> Result<u64, CliError> {
    int_in(flag, raw, 0, MAX_SAFE_INTEGER, "an integer ≥ 0")
}

fn too_many(command: &str, takes: &str, got: &[String]) -> CliError {
    CliError::usage(format!(
        "too many arguments: {command} takes {takes} (got {}: {})",
        got.len(),
        got.iter()
            .map(|g| format!("\"{g}\""))
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .with_hint(format!("Run \"appduct {command} --help\" for usage."))
}

fn selector(raw: String) -> Result<String, CliError> {
    let len = raw.chars().count();
    if (1..=MAX_SELECTOR_LEN).contains(&len) {
        Ok(raw)
    } else {
        Err(CliError::usage(format!(
            "a session selector must be 1 to {MAX_SELECTOR_LEN} characters (a session id or alias)"
        )))
    }
}

/// The optional selector of a session-scoped command (05 §2.3).
fn optional_selector(command: &str, positionals: Vec<String>) -> Result<Option<String>, CliError> {
    if positionals.len() > 1 {
        return Err(too_many(command, "at most one selector", &positionals));
    }
    positionals.into_iter().next().map(selector).transpose()
}

/// `[selector] <value>`: one positional is the value, two are selector and value (05 §2.3).
fn selector_and_value(
    command: &str,
    value_name: &str,
    positionals: Vec<String>,
) -> Result<(Option<String>, String), CliError> {
    let mut it = positionals.clone().into_iter();
    match (it.next(), it.next(), it.next()) {
        (None, _, _) => Err(CliError::usage(format!(
            "{command} needs <{}>: appduct {command} [SELECTOR] <{value_name}>",
            value_name.to_lowercase()
        ))
        .with_hint(format!("Run \"appduct {command} --help\" for usage."))),
        (Some(value), None, _) => Ok((None, value)),
        (Some(sel), Some(value), None) => Ok((Some(selector(sel)?), value)),
        (Some(_), Some(_), Some(_)) => Err(too_many(
            command,
            &format!("[SELECTOR] <{value_name}>"),
            &positionals,
        )),
    }
}

/// A name glob: 1–4096 characters.
fn glob(raw: Option<String>) -> Result<Option<String>, CliError> {
    match raw {
        None => Ok(None),
        Some(g) if g.is_empty() => Err(CliError::usage("--name requires a value")),
        Some(g) if g.chars().count() > MAX_GLOB_LEN => Err(CliError::usage(format!(
            "--name must be at most {MAX_GLOB_LEN} characters"
        ))),
        Some(g) => Ok(Some(g)),
    }
}

fn scheme(raw: String) -> Result<String, CliError> {
    validate_scheme(&raw)
        .map(|()| raw.clone())
        .map_err(|e| CliError::usage(e.to_string()).with_detail("scheme", raw.as_str()))
}

fn app_id(flag: &str, raw: String) -> Result<String, CliError> {
    if is_valid_app_id(&raw) {
        Ok(raw)
    } else {
        Err(CliError::usage(format!(
            "{flag} must match {APP_ID_PATTERN} (got \"{raw}\")"
        )))
    }
}

/// `http://` or `https://` (any case), a non-empty authority, and no whitespace or control
/// characters. (The protocol crate's composer applies the same rule but keeps it private.)
pub fn is_http_url(url: &str) -> bool {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        && !authority.is_empty()
}

fn link(a: LinkArgs) -> Result<LinkRequest, CliError> {
    if !a.positionals.is_empty() {
        return Err(too_many(
            "sessions link",
            "no positional arguments",
            &a.positionals,
        ));
    }
    let open = a.open.map(|o| match o {
        OpenArg::Android => OpenTarget::Android,
        OpenArg::IosSim => OpenTarget::IosSim,
        OpenArg::IosDevice => OpenTarget::IosDevice,
        OpenArg::Web => OpenTarget::Web,
    });
    let is = |t: OpenTarget| open == Some(t);
    match (a.transport, open) {
        (Some(TransportArg::Web), Some(OpenTarget::IosDevice)) => {
            return Err(CliError::usage(
                "--transport web is not allowed with --open ios-device",
            ));
        }
        (Some(TransportArg::Native), Some(OpenTarget::Web)) => {
            return Err(CliError::usage(
                "--transport native is not allowed with --open web (a web link always uses the web transport)",
            ));
        }
        _ => {}
    }
    if a.qr && is(OpenTarget::Web) {
        return Err(CliError::usage("--qr is not allowed with --open web"));
    }
    if a.scheme.is_some() && is(OpenTarget::Web) {
        return Err(CliError::usage("--scheme is not allowed with --open web"));
    }
    if a.device.is_some() && (open.is_none() || is(OpenTarget::Web)) {
        return Err(CliError::usage(
            "--device requires --open android, --open ios-sim or --open ios-device",
        ));
    }
    if a.app_id.is_some() && !(is(OpenTarget::Android) || is(OpenTarget::IosDevice)) {
        return Err(CliError::usage(
            "--app-id is only allowed with --open android or --open ios-device",
        ));
    }
    if a.relaunch && !is(OpenTarget::IosDevice) {
        return Err(CliError::usage(
            "--relaunch is only allowed with --open ios-device",
        ));
    }
    match (&a.url, is(OpenTarget::Web)) {
        (Some(_), false) => {
            return Err(CliError::usage("--url is only allowed with --open web"));
        }
        (None, true) => {
            return Err(CliError::usage("--open web requires --url <url>"));
        }
        (Some(url), true) if !is_http_url(url) => {
            return Err(CliError::usage(format!(
                "--url must be an http or https URL (got \"{url}\")"
            )));
        }
        _ => {}
    }
    if a.device.as_deref() == Some("") {
        return Err(CliError::usage("--device requires a value"));
    }
    let ttl_seconds = opt(a.ttl, |v| {
        int_in(
            "--ttl",
            v,
            1,
            u64::from(MAX_LINK_TTL_S),
            &format!("an integer from 1 to {MAX_LINK_TTL_S}"),
        )
    })?
    .map(|t| u32::try_from(t).unwrap_or(MAX_LINK_TTL_S));
    let transport = if is(OpenTarget::Web) || a.transport == Some(TransportArg::Web) {
        Transport::Web
    } else {
        Transport::Native
    };
    Ok(LinkRequest {
        ttl_seconds,
        qr: a.qr,
        scheme: a.scheme.map(scheme).transpose()?,
        open,
        transport,
        device: a.device,
        app_id: a.app_id.map(|v| app_id("--app-id", v)).transpose()?,
        relaunch: a.relaunch,
        url: a.url,
    })
}

fn tools_ls(a: ToolsLsArgs) -> Result<ToolsLs, CliError> {
    let selector = optional_selector("tools ls", a.selector.positionals)?;
    let group = match a.group {
        Some(g) if g.is_empty() => return Err(CliError::usage("--group requires a value")),
        Some(g) if !is_valid_group(&g) => {
            return Err(CliError::usage(format!(
                "--group must be 1 or 2 \"/\"-separated segments of [a-zA-Z0-9_-]{{1,64}} (got \"{g}\")"
            )));
        }
        other => other,
    };
    if let Some(f) = &a.filter
        && f.chars().count() > MAX_TOOLS_FILTER_LEN
    {
        return Err(CliError::usage(format!(
            "--filter must be at most {MAX_TOOLS_FILTER_LEN} characters"
        )));
    }
    Ok(ToolsLs {
        params: ToolsListParams::default()
            .with_selector(selector)
            .with_group(group)
            .with_filter(a.filter)
            .with_limit(opt(a.limit, |v| positive_int("--limit", v))?)
            .with_offset(opt(a.offset, |v| non_negative_int("--offset", v))?),
        groups_only: a.groups,
        full: a.full,
    })
}

fn tools_call(a: ToolsCallArgs) -> Result<ToolsCall, CliError> {
    let (selector, name) = selector_and_value("tools call", "NAME", a.positionals.positionals)?;
    let timeout_ms = opt(a.timeout, |v| positive_int("--timeout", v))?;
    let args = match (a.input, a.input_file) {
        (Some(text), _) => input_object("--input", &text)?,
        (None, Some(path)) => input_object("--input-file", &read_input_file(&path)?)?,
        (None, None) => Map::new(),
    };
    Ok(ToolsCall {
        selector,
        name,
        args,
        timeout_ms,
        no_progress: a.no_progress,
    })
}

/// `--input-file <path>`; `-` reads stdin.
fn read_input_file(path: &Path) -> Result<String, CliError> {
    let mut text = String::new();
    let result = if path.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    result.map(|()| text).map_err(|e| {
        CliError::usage(format!("cannot read --input-file {}: {e}", path.display()))
            .with_detail("path", path.display().to_string())
    })
}

/// The tool arguments: a JSON object, else `validation_error` (exit 65) with
/// `details: {param, error}` (05 §7.3).
pub fn input_object(param: &str, text: &str) -> Result<Map<String, Value>, CliError> {
    let invalid = |error: String| {
        CliError::new(
            ErrorType::ValidationError,
            format!("{param} must be a JSON object: {error}"),
        )
        .with_detail("param", param)
        .with_detail("error", error)
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(invalid(format!(
            "got {}",
            match other {
                Value::Null => "null",
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                Value::Array(_) => "an array",
                Value::Object(_) => "an object",
            }
        ))),
        Err(e) => Err(invalid(format!("not valid JSON ({e})"))),
    }
}

fn doctor(a: DoctorArgs) -> Result<DoctorRequest, CliError> {
    let mut paths = a.positionals;
    if paths.len() > 1 {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(too_many("doctor", "one artifact", &shown));
    }
    let Some(artifact) = paths.pop() else {
        return Err(CliError::usage(
            "doctor needs an artifact: appduct doctor <artifact.apk|.aab|.ipa|.app>",
        ));
    };
    if a.assert_present && a.assert_absent {
        return Err(CliError::usage(
            "--assert-present and --assert-absent cannot be combined",
        ));
    }
    let ext = artifact
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    let format = match ext.as_deref() {
        Some("apk") => ArtifactFormat::Apk,
        Some("aab") => ArtifactFormat::Aab,
        Some("ipa") => ArtifactFormat::Ipa,
        Some("app") => ArtifactFormat::App,
        _ => {
            return Err(CliError::usage(format!(
                "doctor inspects .apk, .aab, .ipa or .app artifacts (got {})",
                artifact.display()
            )));
        }
    };
    let expect = if a.assert_present {
        Some(Expectation::Present)
    } else if a.assert_absent {
        Some(Expectation::Absent)
    } else {
        None
    };
    Ok(DoctorRequest {
        artifact,
        format,
        expect,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(words: &[&str]) -> Result<Invocation, Early> {
        let mut args = vec![OsString::from("appduct")];
        args.extend(words.iter().map(OsString::from));
        parse(args)
    }

    fn command(words: &[&str]) -> Command {
        match parse_words(words) {
            Ok(inv) => inv.command,
            Err(e) => panic!("{words:?} did not parse: {e:?}"),
        }
    }

    fn usage(words: &[&str]) -> CliError {
        match parse_words(words) {
            Err(Early::Usage(e, _)) => {
                assert_eq!(e.exit_code(), 64, "{words:?}");
                e
            }
            other => panic!("{words:?} was not a usage error: {other:?}"),
        }
    }

    #[test]
    fn bare_appduct_prints_help() {
        match parse_words(&[]) {
            Err(Early::Print(text)) => assert!(text.contains("Usage: appduct")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn version_is_accepted_anywhere() {
        for words in [&["--version"][..], &["-V"], &["tools", "ls", "--version"]] {
            match parse_words(words) {
                Err(Early::Print(text)) => {
                    assert_eq!(text, format!("appduct {}\n", env!("CARGO_PKG_VERSION")));
                }
                other => panic!("{words:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn global_flags_before_or_after_command_words() {
        for words in [
            &["--json", "--state-dir", "/tmp/x", "sessions", "ls"][..],
            &["sessions", "ls", "--json", "--state-dir", "/tmp/x"],
            &["sessions", "--json", "ls", "--state-dir=/tmp/x"],
        ] {
            let inv = parse_words(words).unwrap_or_else(|e| panic!("{words:?}: {e:?}"));
            assert!(inv.globals.output.json);
            assert_eq!(inv.globals.state_dir_flag, Some(PathBuf::from("/tmp/x")));
            assert_eq!(inv.command, Command::SessionsLs);
        }
    }

    #[test]
    fn relative_state_dir_is_made_absolute() {
        let inv = parse_words(&["--state-dir", "rel/dir", "sessions", "ls"]).unwrap();
        let dir = inv.globals.state_dir_flag.unwrap();
        assert!(dir.is_absolute());
        assert!(dir.ends_with("rel/dir"));
    }

    #[test]
    fn restart_flags() {
        let inv = parse_words(&["--daemon-restart", "daemon", "start"]).unwrap();
        assert_eq!(inv.globals.restart, RestartFlag::Force);
        assert_eq!(inv.globals.restart_choice(), RestartChoice::Force);
        let inv = parse_words(&["daemon", "start", "--no-daemon-restart"]).unwrap();
        assert_eq!(inv.globals.restart_choice(), RestartChoice::Forbid);
        usage(&["--daemon-restart", "--no-daemon-restart", "daemon", "start"]);
    }

    #[test]
    fn removed_words_name_their_replacement() {
        for (word, replacement) in REMOVED_WORDS {
            let e = usage(&[word]);
            assert!(e.message.contains(replacement), "{}", e.message);
            assert_eq!(
                e.details.as_ref().and_then(|d| d.get("replacement")),
                Some(&Value::from(replacement))
            );
        }
    }

    #[test]
    fn unknown_word_is_unknown_command() {
        match parse_words(&["frobnicate", "--json"]) {
            Err(Early::Usage(e, flags)) => {
                assert!(e.message.starts_with("unknown command \"frobnicate\""));
                // `--json` after the unknown word still selects JSON output.
                assert!(flags.json);
            }
            other => panic!("{other:?}"),
        }
        // `help` is not a command either: help is -h/--help.
        assert!(usage(&["help"]).message.starts_with("unknown command"));
    }

    #[test]
    fn bare_noun_and_unknown_verb_list_the_verbs() {
        let e = usage(&["tools"]);
        assert!(
            e.message.contains("ls, describe, call, snapshot"),
            "{}",
            e.message
        );
        let e = usage(&["sessions", "list"]);
        assert!(e.message.contains("ls, revoke, link"), "{}", e.message);
        let e = usage(&["events", "follow"]);
        assert!(e.message.contains("ls, tail, since"), "{}", e.message);
        let e = usage(&["daemon"]);
        assert!(
            e.message.contains("run, start, stop, status"),
            "{}",
            e.message
        );
    }

    #[test]
    fn integer_rules() {
        assert_eq!(positive_int("--limit", "7").ok(), Some(7));
        assert_eq!(positive_int("--limit", "007").ok(), Some(7));
        for bad in [
            "0",
            "-1",
            "abc",
            "",
            "1.5",
            "+3",
            " 3",
            "1e3",
            "9007199254740992",
        ] {
            let e = positive_int("--limit", bad).unwrap_err();
            assert_eq!(
                e.message,
                format!("--limit must be a positive integer (got \"{bad}\")")
            );
        }
        assert_eq!(non_negative_int("--offset", "0").ok(), Some(0));
        assert!(non_negative_int("--offset", "-1").is_err());
        assert!(non_negative_int("--offset", "abc").is_err());
    }

    #[test]
    fn tools_ls_values_are_typed_and_text_is_verbatim() {
        let Command::ToolsLs(ls) = command(&[
            "tools",
            "ls",
            "pixel-8",
            "--filter",
            "07",
            "--limit",
            "5",
            "--offset",
            "0",
            "--group",
            "checkout/payment",
            "--full",
        ]) else {
            panic!()
        };
        assert_eq!(ls.params.selector.as_deref(), Some("pixel-8"));
        assert_eq!(ls.params.filter.as_deref(), Some("07"));
        assert_eq!(ls.params.limit, Some(5));
        assert_eq!(ls.params.offset, Some(0));
        assert_eq!(ls.params.group.as_deref(), Some("checkout/payment"));
        assert!(ls.full && !ls.groups_only);
        // Unset values stay unset (the human default is the renderer's business).
        let Command::ToolsLs(ls) = command(&["tools", "ls"]) else {
            panic!()
        };
        assert_eq!(ls.params, ToolsListParams::default());
    }

    #[test]
    fn tools_ls_argument_errors() {
        assert!(
            usage(&["tools", "ls", "--limit", "0"])
                .message
                .contains("positive integer")
        );
        assert!(
            usage(&["tools", "ls", "--limit", "-1"])
                .message
                .contains("positive integer")
        );
        assert!(
            usage(&["tools", "ls", "--offset", "abc"])
                .message
                .contains("≥ 0")
        );
        assert_eq!(
            usage(&["tools", "ls", "--filter"]).message,
            "--filter requires a value"
        );
        assert!(
            usage(&["tools", "ls", "a", "b"])
                .message
                .starts_with("too many arguments")
        );
        usage(&["tools", "ls", "--groups", "--filter", "x"]);
        usage(&["tools", "ls", "--groups", "--full"]);
        usage(&["tools", "ls", "--group", "a/b/c"]);
        usage(&["tools", "ls", "--filter", &"x".repeat(257)]);
        // --groups with a selector is fine.
        let Command::ToolsLs(ls) = command(&["tools", "ls", "--groups", "checkout"]) else {
            panic!()
        };
        assert!(ls.groups_only);
    }

    #[test]
    fn selector_value_positionals() {
        assert_eq!(
            command(&["tools", "describe", "sum"]),
            Command::ToolsDescribe {
                selector: None,
                name: "sum".into()
            }
        );
        assert_eq!(
            command(&["tools", "describe", "pixel-8", "sum"]),
            Command::ToolsDescribe {
                selector: Some("pixel-8".into()),
                name: "sum".into()
            }
        );
        assert!(usage(&["tools", "call"]).message.contains("needs <name>"));
        usage(&["tools", "call", "a", "b", "c"]);
        usage(&["tools", "describe", "--group", "x", "sum"]);
    }

    #[test]
    fn tools_call_input() {
        let Command::ToolsCall(call) = command(&[
            "tools",
            "call",
            "sum",
            "--input",
            r#"{"a":1}"#,
            "--timeout",
            "5000",
        ]) else {
            panic!()
        };
        assert_eq!(call.args.get("a"), Some(&Value::from(1)));
        assert_eq!(call.timeout_ms, Some(5000));
        let Command::ToolsCall(call) = command(&["tools", "call", "sum"]) else {
            panic!()
        };
        assert!(call.args.is_empty());

        for bad in ["[1]", "{", "null"] {
            match parse_words(&["tools", "call", "sum", "--input", bad]) {
                Err(Early::Usage(e, _)) => {
                    assert_eq!(e.exit_code(), 65, "{bad}");
                    assert_eq!(e.details.as_ref().unwrap()["param"], "--input");
                }
                other => panic!("{other:?}"),
            }
        }
        usage(&[
            "tools",
            "call",
            "sum",
            "--input",
            "{}",
            "--input-file",
            "x.json",
        ]);
        usage(&["tools", "call", "sum", "--timeout", "0"]);
    }

    #[test]
    fn tools_call_input_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.json");
        std::fs::write(&path, r#"{"b":2}"#).unwrap();
        let Command::ToolsCall(call) = command(&[
            "tools",
            "call",
            "sum",
            "--input-file",
            path.to_str().unwrap(),
        ]) else {
            panic!()
        };
        assert_eq!(call.args.get("b"), Some(&Value::from(2)));
        let missing = dir.path().join("missing.json");
        usage(&[
            "tools",
            "call",
            "sum",
            "--input-file",
            missing.to_str().unwrap(),
        ]);
    }

    #[test]
    fn snapshot_modes() {
        assert_eq!(
            command(&["tools", "snapshot", "--write", "-"]),
            Command::ToolsSnapshot {
                selector: None,
                mode: SnapshotMode::WriteStdout
            }
        );
        assert_eq!(
            command(&["tools", "snapshot", "p", "--check", "s.json"]),
            Command::ToolsSnapshot {
                selector: Some("p".into()),
                mode: SnapshotMode::Check("s.json".into())
            }
        );
        usage(&["tools", "snapshot"]);
        usage(&["tools", "snapshot", "--write", "a", "--check", "b"]);
    }

    #[test]
    fn events_commands() {
        let Command::EventsTail(p) = command(&["events", "tail", "pixel-8", "--name", "check*"])
        else {
            panic!()
        };
        assert_eq!(p.session_selector.as_deref(), Some("pixel-8"));
        assert_eq!(p.kinds, Some(vec![EventKind::AppEvent]));
        assert_eq!(p.name.as_deref(), Some("check*"));
        command(&["events", "tail", "--follow"]);
        usage(&["events", "tail", "a", "b"]);

        let Command::EventsSince(p) = command(&["events", "since", "a", "42"]) else {
            panic!()
        };
        assert_eq!((p.selector.as_deref(), p.since), (Some("a"), Some(42)));
        let Command::EventsSince(p) = command(&["events", "since", "0"]) else {
            panic!()
        };
        assert_eq!((p.selector, p.since), (None, Some(0)));
        usage(&["events", "since", "a", "-1"]);
        usage(&["events", "since", "a", "x"]);
        usage(&["events", "since"]);
        usage(&["events", "ls", "--payload-max-bytes", "5"]);
        usage(&["events", "ls", "--limit", "0"]);
    }

    #[test]
    fn link_combination_rules() {
        let bad: &[&[&str]] = &[
            &["--device", "emulator-5554"],
            &["--open", "ios-sim", "--app-id", "com.example"],
            &["--relaunch"],
            &["--open", "android", "--relaunch"],
            &["--url", "https://example.com"],
            &["--open", "web"],
            &["--open", "web", "--url", "ftp://x"],
            &["--transport", "tcp"],
            &["--transport", "web", "--open", "ios-device"],
            &[
                "--transport",
                "native",
                "--open",
                "web",
                "--url",
                "http://x",
            ],
            &["--open", "web", "--url", "http://x", "--qr"],
            &["--open", "web", "--url", "http://x", "--scheme", "myapp"],
            &["--open", "web", "--url", "http://x", "--device", "d"],
            &["--open", "tv"],
            &["--ttl", "0"],
            &["--ttl", "86401"],
            &["--scheme", "myapp://"],
            &["--scheme", "https"],
            &["--open", "android", "--app-id", "-rf"],
            &["extra"],
        ];
        for flags in bad {
            let mut words = vec!["sessions", "link"];
            words.extend_from_slice(flags);
            usage(&words);
        }
    }

    #[test]
    fn link_accepted_combinations() {
        let Command::SessionsLink(l) = command(&[
            "sessions",
            "link",
            "--open",
            "web",
            "--transport",
            "web",
            "--url",
            "http://localhost:5173/#x",
        ]) else {
            panic!()
        };
        assert_eq!(l.transport, Transport::Web);
        assert_eq!(l.open, Some(OpenTarget::Web));
        let Command::SessionsLink(l) = command(&[
            "sessions",
            "link",
            "--open",
            "ios-device",
            "--relaunch",
            "--app-id",
            "com.example.app",
            "--device",
            "00008110-001A",
            "--ttl",
            "86400",
            "--scheme",
            "myapp",
        ]) else {
            panic!()
        };
        assert_eq!(l.transport, Transport::Native);
        assert_eq!(l.ttl_seconds, Some(86_400));
        assert!(l.relaunch);
        let Command::SessionsLink(l) = command(&[
            "sessions",
            "link",
            "--transport",
            "web",
            "--open",
            "android",
        ]) else {
            panic!()
        };
        assert_eq!(l.transport, Transport::Web);
        assert_eq!(
            command(&["sessions", "revoke", "abc"]),
            Command::SessionsRevoke {
                selector: Some("abc".into())
            }
        );
        usage(&["sessions", "revoke", "a", "b"]);
    }

    #[test]
    fn local_commands() {
        assert_eq!(
            command(&["completions", "bash"]),
            Command::Completions { shell: Shell::Bash }
        );
        usage(&["completions", "tcsh"]);
        usage(&["completions"]);
        let Command::Doctor(d) = command(&["doctor", "App.IPA", "--assert-absent"]) else {
            panic!()
        };
        assert_eq!(
            (d.format, d.expect),
            (ArtifactFormat::Ipa, Some(Expectation::Absent))
        );
        usage(&["doctor", "x.zip"]);
        usage(&["doctor", "x.apk", "--assert-present", "--assert-absent"]);
        usage(&["doctor"]);
        usage(&["init", "--scheme", "http"]);
        usage(&["init", "--ios-app-id", "a b"]);
        let Command::Keygen(k) = command(&["keygen", "--out", "k.pem", "--force"]) else {
            panic!()
        };
        assert!(k.out.unwrap().is_absolute() && k.force);
        // mcp keeps even an invalid scheme (reported at startup).
        assert_eq!(
            command(&["mcp", "--scheme", "http"]),
            Command::Mcp {
                scheme: Some("http".into())
            }
        );
    }

    #[test]
    fn app_id_and_url_patterns() {
        // The app-id rule itself is tested with `appduct_daemon::project`.
        assert!(is_valid_app_id("com.example.app"));
        assert!(!is_valid_app_id("com;rm"));
        assert!(is_http_url("https://example.com/x?y#z"));
        assert!(is_http_url("HTTP://localhost:5173"));
        assert!(!is_http_url("http://"));
        assert!(!is_http_url("http:///path"));
        assert!(!is_http_url("https://exa mple.com"));
        assert!(!is_http_url("javascript:alert(1)"));
    }

    #[test]
    fn prescan_stops_at_double_dash() {
        let args: Vec<OsString> = ["appduct", "--pretty", "x", "--", "--json"]
            .iter()
            .map(OsString::from)
            .collect();
        let flags = prescan_output_flags(&args);
        assert!(flags.pretty && !flags.json);
    }

    #[test]
    fn clap_errors_carry_a_help_hint_for_the_command() {
        let e = usage(&["tools", "ls", "--bogus"]);
        assert_eq!(e.hint(), Some("Run \"appduct tools ls --help\" for usage."));
        assert!(e.message.contains("--bogus"), "{}", e.message);
    }

    #[test]
    fn labels_and_daemon_use() {
        assert_eq!(command(&["daemon", "status"]).label(), "daemon status");
        assert!(command(&["daemon", "stop"]).uses_daemon());
        assert!(!command(&["keygen"]).uses_daemon());
        assert!(!command(&["completions", "zsh"]).uses_daemon());
    }
}
