//! The clap definition of the command tree (05 §1–§2). It only describes the surface; every
//! value is checked and typed by [`crate::command`], so all argument rules live in one place and
//! produce `usage_error`s with the CLI's own messages.
//!
//! Integer flags are taken as text (negative numbers allowed) so `--limit -1` and
//! `--offset abc` reach our validation instead of clap's generic errors. Each noun has an
//! external-subcommand catch-all so an unknown verb is reported with the noun's verb list.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use clap_complete::Shell;

const GLOBAL: &str = "Global options";

#[derive(Debug, Parser)]
#[command(
    name = "appduct",
    about = "Call functions inside running apps from agents, terminals and test runners",
    disable_help_subcommand = true,
    disable_version_flag = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten)]
    pub globals: GlobalArgs,
    #[command(subcommand)]
    pub command: Option<TopCommand>,
}

/// Flags accepted before or after the command words (05 §2.1).
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
    /// No ANSI colours
    #[arg(long = "no-color", global = true, help_heading = GLOBAL)]
    pub no_color: bool,
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
    Sessions(SessionsNoun),
    /// Tools registered by a session's app
    Tools(ToolsNoun),
    /// Events declared and emitted by a session's app
    Events(EventsNoun),
    /// The per-user daemon
    Daemon(DaemonNoun),
    /// Record the project's deep-link scheme and app ids in .appduct/config.json
    Init(InitArgs),
    /// Create the daemon's host key
    Keygen(KeygenArgs),
    /// Run the MCP bridge on stdio
    Mcp(McpArgs),
    /// Inspect a built app (.apk, .aab, .ipa, .app) for the appduct native module
    Doctor(DoctorArgs),
    /// Print a shell completion script
    Completions(CompletionsArgs),
    /// Run the playground: a demo app connected to the daemon, to try every command on
    Playground(PlaygroundArgs),
    #[command(external_subcommand)]
    Unknown(Vec<OsString>),
}

// ---------------------------------------------------------------------------------------------
// sessions
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Args)]
pub struct SessionsNoun {
    #[command(subcommand)]
    pub verb: Option<SessionsVerb>,
}

#[derive(Debug, Subcommand)]
pub enum SessionsVerb {
    /// List live sessions
    Ls,
    /// Revoke a session, or discard a pending link named by its id
    Revoke(SelectorArgs),
    /// Mint a link (deep link, QR code or web link) and optionally deliver it
    Link(LinkArgs),
    #[command(external_subcommand)]
    Unknown(Vec<OsString>),
}

/// An optional session selector (session id or alias).
#[derive(Debug, Args)]
pub struct SelectorArgs {
    /// Session id or alias; optional when exactly one live session exists
    #[arg(value_name = "SELECTOR")]
    pub positionals: Vec<String>,
}

/// `[selector] <value>`: one positional is the value, two are selector and value (05 §2.3).
#[derive(Debug, Args)]
pub struct SelectorValueArgs {
    /// Optional session id or alias, then the required value (tool name or cursor)
    #[arg(value_name = "ARGS", allow_negative_numbers = true)]
    pub positionals: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OpenArg {
    Android,
    IosSim,
    IosDevice,
    Web,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    Native,
    Web,
}

#[derive(Debug, Args)]
pub struct LinkArgs {
    /// Link lifetime in seconds, 1-86400 (default: the daemon's linkTtlSeconds)
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub ttl: Option<String>,
    /// Print the deep link as a QR code (human mode only)
    #[arg(long)]
    pub qr: bool,
    /// Deep-link scheme
    #[arg(long, value_name = "SCHEME")]
    pub scheme: Option<String>,
    /// Deliver the link to a device or print a web link
    #[arg(long, value_enum, value_name = "TARGET")]
    pub open: Option<OpenArg>,
    /// Link transport (web: the JS-only React Native entry)
    #[arg(long, value_enum, value_name = "TRANSPORT")]
    pub transport: Option<TransportArg>,
    /// Device serial or UDID (with --open android, ios-sim or ios-device)
    #[arg(long, value_name = "ID")]
    pub device: Option<String>,
    /// Android application id or iOS bundle id (with --open android or ios-device)
    #[arg(long, value_name = "ID")]
    pub app_id: Option<String>,
    /// Terminate a running app first (with --open ios-device)
    #[arg(long)]
    pub relaunch: bool,
    /// The page URL (required with, and only with, --open web)
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    #[arg(hide = true)]
    pub positionals: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// tools
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Args)]
pub struct ToolsNoun {
    #[command(subcommand)]
    pub verb: Option<ToolsVerb>,
}

#[derive(Debug, Subcommand)]
pub enum ToolsVerb {
    /// List a session's tools
    Ls(ToolsLsArgs),
    /// Show one tool's signature, policy and schemas
    #[command(override_usage = "appduct tools describe [OPTIONS] [SELECTOR] <NAME>")]
    Describe(SelectorValueArgs),
    /// Call a tool
    #[command(override_usage = "appduct tools call [OPTIONS] [SELECTOR] <NAME>")]
    Call(ToolsCallArgs),
    /// Write or check a reviewable snapshot of the app's tool surface
    Snapshot(ToolsSnapshotArgs),
    #[command(external_subcommand)]
    Unknown(Vec<OsString>),
}

#[derive(Debug, Args)]
pub struct ToolsLsArgs {
    #[command(flatten)]
    pub selector: SelectorArgs,
    /// Only tools in this group (1 or 2 "/"-separated segments)
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Show the group summary only
    #[arg(long, conflicts_with_all = ["group", "filter", "limit", "offset", "full"])]
    pub groups: bool,
    /// Case-insensitive substring of name or description (at most 256 characters)
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
    /// At most this many tools (human default 50)
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<String>,
    /// Skip this many tools
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub offset: Option<String>,
    /// Show a describe block per tool
    #[arg(long)]
    pub full: bool,
}

#[derive(Debug, Args)]
pub struct ToolsCallArgs {
    #[command(flatten)]
    pub positionals: SelectorValueArgs,
    /// Arguments as a JSON object (default {})
    #[arg(long, value_name = "JSON", conflicts_with = "input_file")]
    pub input: Option<String>,
    /// Read the JSON object from a file ("-" reads stdin)
    #[arg(long, value_name = "PATH")]
    pub input_file: Option<PathBuf>,
    /// Call timeout in milliseconds (the daemon clamps it to 1000-600000)
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    pub timeout: Option<String>,
    /// Never show the progress display
    #[arg(long)]
    pub no_progress: bool,
}

#[derive(Debug, Args)]
pub struct ToolsSnapshotArgs {
    #[command(flatten)]
    pub selector: SelectorArgs,
    /// Write the live surface to FILE ("-" prints it)
    #[arg(long, value_name = "FILE")]
    pub write: Option<PathBuf>,
    /// Compare the live surface with FILE
    #[arg(long, value_name = "FILE")]
    pub check: Option<PathBuf>,
}

// ---------------------------------------------------------------------------------------------
// events
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Args)]
pub struct EventsNoun {
    #[command(subcommand)]
    pub verb: Option<EventsVerb>,
}

#[derive(Debug, Subcommand)]
pub enum EventsVerb {
    /// List the events a session's app declares
    Ls(EventsLsArgs),
    /// Print app events as they happen (Ctrl-C to stop)
    Tail(EventsTailArgs),
    /// Print retained app events after a cursor
    #[command(override_usage = "appduct events since [OPTIONS] [SELECTOR] <CURSOR>")]
    Since(EventsSinceArgs),
    #[command(external_subcommand)]
    Unknown(Vec<OsString>),
}

#[derive(Debug, Args)]
pub struct EventsLsArgs {
    #[command(flatten)]
    pub selector: SelectorArgs,
    /// Name glob ("*" matches any run of characters)
    #[arg(long, value_name = "GLOB")]
    pub name: Option<String>,
    /// At most this many events (human default 50)
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<String>,
    /// Skip this many events
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub offset: Option<String>,
}

#[derive(Debug, Args)]
pub struct EventsTailArgs {
    #[command(flatten)]
    pub selector: SelectorArgs,
    /// Only app events whose name matches this glob
    #[arg(long, value_name = "GLOB")]
    pub name: Option<String>,
    /// Truncate payloads larger than N bytes
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub payload_max_bytes: Option<String>,
    /// Accepted and ignored (tail always follows)
    #[arg(long, hide = true)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct EventsSinceArgs {
    #[command(flatten)]
    pub positionals: SelectorValueArgs,
    /// Name glob
    #[arg(long, value_name = "GLOB")]
    pub name: Option<String>,
    /// Truncate payloads larger than N bytes
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub payload_max_bytes: Option<String>,
    /// At most this many events
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// daemon
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Args)]
pub struct DaemonNoun {
    #[command(subcommand)]
    pub verb: Option<DaemonVerb>,
}

#[derive(Debug, Subcommand)]
pub enum DaemonVerb {
    /// Host the daemon in the foreground
    Run,
    /// Start the daemon if it is not running
    Start,
    /// Stop the running daemon
    Stop,
    /// Show the daemon's status, policy, audit and events log
    Status,
    #[command(external_subcommand)]
    Unknown(Vec<OsString>),
}

// ---------------------------------------------------------------------------------------------
// commands without verbs
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Deep-link scheme (default: discovered from app.json or the native project files)
    #[arg(long, value_name = "SCHEME")]
    pub scheme: Option<String>,
    /// iOS bundle id
    #[arg(long, value_name = "ID")]
    pub ios_app_id: Option<String>,
    /// Android application id
    #[arg(long, value_name = "ID")]
    pub android_app_id: Option<String>,
    /// Replace recorded values
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Key file (default: keyPath of <state-dir>/config.json, else <state-dir>/key.pem)
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Replace an existing key (apps embedding the old pin will refuse the new key)
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Deep-link scheme for links the bridge creates
    #[arg(long, value_name = "SCHEME")]
    pub scheme: Option<String>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The built app: .apk, .aab, .ipa or .app
    #[arg(value_name = "ARTIFACT")]
    pub positionals: Vec<PathBuf>,
    /// Fail (exit 3) unless the native module is present
    #[arg(long)]
    pub assert_present: bool,
    /// Fail (exit 3) unless the native module is absent
    #[arg(long)]
    pub assert_absent: bool,
}

#[derive(Debug, Args)]
pub struct PlaygroundArgs {
    /// Run a short scripted tour of the commands against the playground, then exit
    #[arg(long)]
    pub tour: bool,
}

#[derive(Debug, Args)]
#[command(after_help = COMPLETIONS_INSTALL)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, powershell or elvish
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: Option<Shell>,
}

const COMPLETIONS_INSTALL: &str = "\
Where to install the script:
  bash        appduct completions bash > ~/.local/share/bash-completion/completions/appduct
  zsh         appduct completions zsh > \"${fpath[1]}/_appduct\"   (a directory in $fpath)
  fish        appduct completions fish > ~/.config/fish/completions/appduct.fish
  powershell  appduct completions powershell >> $PROFILE
  elvish      appduct completions elvish >> ~/.config/elvish/rc.elv

Completions are static: commands, flags and enum values; selectors and tool names are not
completed.";
