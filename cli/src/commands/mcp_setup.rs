//! `appduct mcp install` and `appduct mcp uninstall` (§L20): add or remove the `appduct`
//! entry of an agent client's MCP configuration, pointing at the absolute path of the running
//! binary. Everything else in the file is kept: other servers, unknown keys, key order, the
//! JSON indentation and line endings, TOML comments and layout. A file that changes is first
//! copied to `<file>.appduct-backup-<UTC timestamp>`; a file that cannot be parsed is refused
//! (`validation_error`) and left untouched. Never contacts the daemon.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::Serialize as _;
use serde_json::{Map, Value, json};
use time::OffsetDateTime;
use time::macros::format_description;

use super::Command;
use crate::error::CliError;
use crate::output::Success;
use crate::render::{Row, Section, sections};

/// The server name every client's configuration records us under.
pub const SERVER_NAME: &str = "appduct";
/// The arguments after the binary: the MCP bridge on stdio (§L12).
pub const SERVER_ARGS: [&str; 1] = ["mcp"];

/// `mcp install` / `mcp uninstall`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupAction {
    Install,
    Uninstall,
}

/// The agent clients whose configuration we know (§L20.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Client {
    /// Claude Code: .mcp.json (project) or ~/.claude.json (user)
    ClaudeCode,
    /// Claude Desktop: claude_desktop_config.json (user only)
    ClaudeDesktop,
    /// Cursor: .cursor/mcp.json (project) or ~/.cursor/mcp.json (user)
    Cursor,
    /// VS Code: .vscode/mcp.json (project) or the user profile's mcp.json (user)
    Vscode,
    /// Codex: .codex/config.toml (project) or ~/.codex/config.toml (user)
    Codex,
    /// Windsurf: ~/.codeium/windsurf/mcp_config.json (user only)
    Windsurf,
}

impl Client {
    pub const ALL: [Client; 6] = [
        Client::ClaudeCode,
        Client::ClaudeDesktop,
        Client::Cursor,
        Client::Vscode,
        Client::Codex,
        Client::Windsurf,
    ];

    /// The `--client` value.
    pub fn id(self) -> &'static str {
        match self {
            Client::ClaudeCode => "claude-code",
            Client::ClaudeDesktop => "claude-desktop",
            Client::Cursor => "cursor",
            Client::Vscode => "vscode",
            Client::Codex => "codex",
            Client::Windsurf => "windsurf",
        }
    }

    /// The product name, for human output.
    pub fn name(self) -> &'static str {
        match self {
            Client::ClaudeCode => "Claude Code",
            Client::ClaudeDesktop => "Claude Desktop",
            Client::Cursor => "Cursor",
            Client::Vscode => "VS Code",
            Client::Codex => "Codex",
            Client::Windsurf => "Windsurf",
        }
    }

    /// Whether the client reads agent skills (`SKILL.md` directories).
    pub fn has_skills(self) -> bool {
        matches!(self, Client::ClaudeCode | Client::Codex | Client::Vscode)
    }

    /// Whether `mcp install --url` can write the URL form for the client (§L20.5).
    pub fn connects_by_url(self) -> bool {
        matches!(
            self,
            Client::ClaudeCode | Client::Cursor | Client::Vscode | Client::Windsurf
        )
    }

    /// Whether the client reads a configuration file inside the project.
    pub fn has_project_scope(self) -> bool {
        !matches!(self, Client::ClaudeDesktop | Client::Windsurf)
    }
}

/// Which of the client's files: the project's (under the working directory) or the user's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Project,
    User,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Project => "project",
            Scope::User => "user",
        }
    }
}

#[derive(Debug, Args)]
pub struct SetupArgs {
    /// The agent client to configure
    #[arg(long, value_enum, value_name = "CLIENT")]
    pub client: Client,
    /// The project's configuration file, under the current directory
    #[arg(long, conflicts_with = "user")]
    pub project: bool,
    /// The user's configuration file, for every project (the default)
    #[arg(long)]
    pub user: bool,
    /// Print the file that would be written and its full content; write nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Also install (or remove) the appduct agent skill, SKILL.md (claude-code, codex, vscode)
    #[arg(long)]
    pub skill: bool,
    /// Install: connect by URL to the daemon's /mcp with the HTTP token instead of running
    /// `appduct mcp` (needs `appduct http enable --port N`; user file; claude-code, cursor,
    /// vscode, windsurf)
    #[arg(long)]
    pub url: bool,
}

/// A validated `mcp install` / `mcp uninstall`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupRequest {
    pub action: SetupAction,
    pub client: Client,
    pub scope: Scope,
    pub dry_run: bool,
    /// `--skill`: the client reads agent skills (checked in [`validate`]).
    pub skill: bool,
    /// `--url` (install only): the URL form of §L20.5.
    pub url: bool,
}

pub fn validate(action: SetupAction, a: SetupArgs) -> Result<Command, CliError> {
    let scope = if a.project {
        Scope::Project
    } else {
        Scope::User
    };
    if scope == Scope::Project && !a.client.has_project_scope() {
        return Err(CliError::usage(format!(
            "{} has no project configuration file; use --user",
            a.client.name()
        ))
        .with_detail("client", a.client.id()));
    }
    if a.skill && !a.client.has_skills() {
        return Err(CliError::usage(format!(
            "{} does not read agent skills; --skill works with claude-code, codex and vscode",
            a.client.name()
        ))
        .with_detail("client", a.client.id()));
    }
    if a.url {
        let refuse = |why: String| Err(CliError::usage(why).with_detail("client", a.client.id()));
        if action == SetupAction::Uninstall {
            return refuse(
                "--url is for mcp install; mcp uninstall removes either form of the entry".into(),
            );
        }
        if !a.client.connects_by_url() {
            return refuse(format!(
                "{} is configured with a command here; --url works with claude-code, cursor, vscode and windsurf",
                a.client.name()
            ));
        }
        if scope == Scope::Project {
            return refuse(
                "--url writes the HTTP token, and project files are often committed; use --user"
                    .into(),
            );
        }
    }
    Ok(Command::McpSetup(SetupRequest {
        action,
        client: a.client,
        scope,
        dry_run: a.dry_run,
        skill: a.skill,
        url: a.url,
    }))
}

/// The platform, which decides where the desktop applications keep their settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    Linux,
    MacOs,
    Windows,
}

impl Os {
    pub const CURRENT: Os = if cfg!(target_os = "macos") {
        Os::MacOs
    } else if cfg!(windows) {
        Os::Windows
    } else {
        Os::Linux
    };
}

/// Everything outside the request that decides what is written where.
#[derive(Debug, Clone)]
pub struct SetupEnv {
    pub os: Os,
    /// `HOME`.
    pub home: Option<PathBuf>,
    /// The working directory: the project of `--project`.
    pub cwd: PathBuf,
    /// The absolute path of the running binary, written as the server's command.
    pub exe: PathBuf,
    /// `APPDATA` (Windows).
    pub appdata: Option<PathBuf>,
    /// `XDG_CONFIG_HOME` (Linux).
    pub xdg_config_home: Option<PathBuf>,
    /// `CODEX_HOME` (Codex's own override of `~/.codex`).
    pub codex_home: Option<PathBuf>,
    /// `--url`: the daemon's `/mcp` and token, read from the state directory ([`url_form`]).
    pub url: Option<UrlForm>,
}

impl SetupEnv {
    pub fn current() -> Result<Self, CliError> {
        let cwd = std::env::current_dir()
            .map_err(|e| CliError::usage(format!("cannot determine the current directory: {e}")))?;
        let exe = std::env::current_exe()
            .and_then(fs::canonicalize)
            .map_err(|e| CliError::internal(format!("cannot locate the appduct binary: {e}")))?;
        let var = |name| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        Ok(Self {
            os: Os::CURRENT,
            home: std::env::home_dir().filter(|p| p.is_absolute()),
            cwd,
            exe,
            appdata: var("APPDATA"),
            xdg_config_home: var("XDG_CONFIG_HOME"),
            codex_home: var("CODEX_HOME"),
            url: None,
        })
    }

    fn home(&self) -> Result<&Path, CliError> {
        self.home
            .as_deref()
            .ok_or_else(|| CliError::usage("cannot determine the home directory; set HOME"))
    }

    /// The per-user application settings directory of Electron apps (Claude Desktop, VS Code).
    fn app_config_dir(&self) -> Result<PathBuf, CliError> {
        match self.os {
            Os::MacOs => Ok(self.home()?.join("Library/Application Support")),
            Os::Windows => self
                .appdata
                .clone()
                .ok_or_else(|| CliError::usage("cannot determine %APPDATA%; set APPDATA")),
            Os::Linux => match &self.xdg_config_home {
                Some(dir) => Ok(dir.clone()),
                None => Ok(self.home()?.join(".config")),
            },
        }
    }
}

/// The file format of a client's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A JSON object whose `key` object maps server names to entries.
    Json { key: &'static str, typed: bool },
    /// Codex's `config.toml`: `[mcp_servers.<name>]` tables.
    Toml,
}

/// The file a request edits and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub path: PathBuf,
    pub format: Format,
}

/// Where `client` keeps its `scope` configuration (§L20.1).
pub fn target(client: Client, scope: Scope, env: &SetupEnv) -> Result<Target, CliError> {
    const SERVERS: Format = Format::Json {
        key: "mcpServers",
        typed: false,
    };
    let project = |rel: &str| env.cwd.join(rel);
    let (path, format) = match (client, scope) {
        (Client::ClaudeCode, Scope::Project) => (
            project(".mcp.json"),
            Format::Json {
                key: "mcpServers",
                typed: true,
            },
        ),
        (Client::ClaudeCode, Scope::User) => (
            env.home()?.join(".claude.json"),
            Format::Json {
                key: "mcpServers",
                typed: true,
            },
        ),
        (Client::ClaudeDesktop, _) => (
            env.app_config_dir()?
                .join("Claude")
                .join("claude_desktop_config.json"),
            SERVERS,
        ),
        (Client::Cursor, Scope::Project) => (project(".cursor/mcp.json"), SERVERS),
        (Client::Cursor, Scope::User) => (env.home()?.join(".cursor/mcp.json"), SERVERS),
        (Client::Vscode, scope) => {
            let path = match scope {
                Scope::Project => project(".vscode/mcp.json"),
                Scope::User => env
                    .app_config_dir()?
                    .join("Code")
                    .join("User")
                    .join("mcp.json"),
            };
            (
                path,
                Format::Json {
                    key: "servers",
                    typed: true,
                },
            )
        }
        (Client::Codex, Scope::Project) => (project(".codex/config.toml"), Format::Toml),
        (Client::Codex, Scope::User) => {
            let dir = match &env.codex_home {
                Some(dir) => dir.clone(),
                None => env.home()?.join(".codex"),
            };
            (dir.join("config.toml"), Format::Toml)
        }
        (Client::Windsurf, _) => (
            env.home()?.join(".codeium/windsurf/mcp_config.json"),
            SERVERS,
        ),
    };
    Ok(Target { path, format })
}

/// The agent skill shipped with this binary (§L20.4).
pub const SKILL: &str = include_str!("../../skill/SKILL.md");

/// Where `client` reads the `scope` copy of our skill: `<skills dir>/appduct/SKILL.md` (§L20.4).
pub fn skill_path(client: Client, scope: Scope, env: &SetupEnv) -> Result<PathBuf, CliError> {
    let dir = match (client, scope) {
        (Client::ClaudeCode, Scope::Project) => env.cwd.join(".claude/skills"),
        (Client::ClaudeCode, Scope::User) => env.home()?.join(".claude/skills"),
        (Client::Codex, Scope::Project) => env.cwd.join(".agents/skills"),
        (Client::Codex, Scope::User) => env.home()?.join(".agents/skills"),
        (Client::Vscode, Scope::Project) => env.cwd.join(".github/skills"),
        (Client::Vscode, Scope::User) => env.home()?.join(".copilot/skills"),
        (other, _) => {
            return Err(CliError::usage(format!(
                "{} does not read agent skills",
                other.name()
            )));
        }
    };
    Ok(dir.join(SERVER_NAME).join("SKILL.md"))
}

/// Our entry in a JSON configuration: `type` where the client's own tools write one.
pub fn json_entry(exe: &Path, typed: bool) -> Map<String, Value> {
    let mut entry = Map::new();
    if typed {
        entry.insert("type".into(), json!("stdio"));
    }
    entry.insert("command".into(), json!(exe.display().to_string()));
    entry.insert("args".into(), json!(SERVER_ARGS));
    entry
}

/// The URL form of our entry (§L20.5): the daemon's `/mcp` and its bearer token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlForm {
    pub url: String,
    pub token: String,
}

/// The URL form from the state directory (§L20.5): `http.port` of `config.json`, which must be
/// a fixed port, and `<state>/http.token`, which must exist. Neither the daemon nor the token
/// file is created here.
pub fn url_form(state_dir: &Path) -> Result<UrlForm, CliError> {
    let loaded = appduct_client::config::Config::load(state_dir)
        .map_err(|e| CliError::validation(e.to_string()))?;
    let off = || {
        CliError::usage("the HTTP API is off, so there is no URL to connect to")
            .with_hint("run appduct http enable --port <PORT> first")
    };
    let port = match loaded.config.http.map(|h| h.port) {
        None => return Err(off()),
        Some(0) => {
            return Err(CliError::usage(
                "http.port is 0 (a new port at each start), so no URL stays valid",
            )
            .with_hint("run appduct http enable --port <PORT> with a fixed port"));
        }
        Some(port) => port,
    };
    let token = appduct_client::http_token::read_token(state_dir)
        .map_err(|e| CliError::validation(format!("cannot read the HTTP token: {e}")))?
        .ok_or_else(off)?;
    Ok(UrlForm {
        url: format!("http://127.0.0.1:{port}/mcp"),
        token,
    })
}

/// Keys of our entry that one form or the other writes: an install sets its own and removes
/// the other form's, so switching forms never leaves a mixed entry.
const FORM_KEYS: [&str; 6] = ["type", "command", "args", "url", "serverUrl", "headers"];

/// Our entry in the URL form, as each client spells it.
pub fn url_entry(client: Client, form: &UrlForm) -> Map<String, Value> {
    let mut entry = Map::new();
    match client {
        Client::ClaudeCode | Client::Vscode => {
            entry.insert("type".into(), json!("http"));
            entry.insert("url".into(), json!(form.url));
        }
        Client::Windsurf => {
            entry.insert("serverUrl".into(), json!(form.url));
        }
        _ => {
            entry.insert("url".into(), json!(form.url));
        }
    }
    entry.insert(
        "headers".into(),
        json!({"Authorization": format!("Bearer {}", form.token)}),
    );
    entry
}

/// What an edit does to the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Nothing to change.
    Unchanged,
    /// The file's new content.
    Write(String),
    /// Nothing but our entry was left: the file goes.
    Delete,
}

/// Applies `action` to a file's text (`None`: no file). `Err` is why the text is refused.
pub fn edit(
    text: Option<&str>,
    format: Format,
    action: SetupAction,
    exe: &Path,
) -> Result<Edit, String> {
    edit_entry(text, format, action, exe, None)
}

/// [`edit`] with the URL form for `client` when `url` is given (JSON clients only).
pub fn edit_entry(
    text: Option<&str>,
    format: Format,
    action: SetupAction,
    exe: &Path,
    url: Option<(Client, &UrlForm)>,
) -> Result<Edit, String> {
    match (format, url) {
        (Format::Json { key, .. }, Some((client, form))) => {
            edit_json(text, key, &url_entry(client, form), action)
        }
        (Format::Json { key, typed }, None) => {
            edit_json(text, key, &json_entry(exe, typed), action)
        }
        (Format::Toml, _) => edit_toml(text, exe, action),
    }
}

/// The layout of a JSON file, kept when it is rewritten.
struct JsonStyle {
    indent: String,
    crlf: bool,
    final_newline: bool,
}

impl JsonStyle {
    fn of(text: Option<&str>) -> Self {
        let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
            return Self {
                indent: "  ".into(),
                crlf: false,
                final_newline: true,
            };
        };
        let indent = text
            .lines()
            .skip(1)
            .map(|line| {
                let rest = line.trim_start_matches([' ', '\t']);
                &line[..line.len() - rest.len()]
            })
            .find(|ws| !ws.is_empty())
            .unwrap_or("  ")
            .to_owned();
        Self {
            indent,
            crlf: text.contains("\r\n"),
            final_newline: text.ends_with('\n'),
        }
    }

    fn render(&self, doc: &Value) -> Result<String, String> {
        let mut buf = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(self.indent.as_bytes());
        let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
        doc.serialize(&mut ser).map_err(|e| e.to_string())?;
        let mut text = String::from_utf8(buf).map_err(|e| e.to_string())?;
        if self.final_newline {
            text.push('\n');
        }
        if self.crlf {
            text = text.replace('\n', "\r\n");
        }
        Ok(text)
    }
}

fn edit_json(
    text: Option<&str>,
    key: &str,
    entry: &Map<String, Value>,
    action: SetupAction,
) -> Result<Edit, String> {
    let style = JsonStyle::of(text);
    let mut doc = match text.filter(|t| !t.trim().is_empty()) {
        None => Map::new(),
        Some(t) => match serde_json::from_str::<Value>(t) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err("the top level is not a JSON object".into()),
            Err(e) => return Err(format!("not valid JSON: {e}")),
        },
    };
    let not_object = || format!("\"{key}\" is not an object");
    match action {
        SetupAction::Install => {
            let servers = doc
                .entry(key)
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .ok_or_else(not_object)?;
            // Keys of our entry that we do not write (env, disabled, …) are the user's: kept.
            let mut merged = match servers.get(SERVER_NAME) {
                Some(Value::Object(current)) => current.clone(),
                _ => Map::new(),
            };
            // The other form's keys go (stdio ↔ URL, §L20.5); ours are set below.
            merged.retain(|k, _| !FORM_KEYS.contains(&k.as_str()) || entry.contains_key(k));
            for (k, v) in entry {
                merged.insert(k.clone(), v.clone());
            }
            let merged = Value::Object(merged);
            if text.is_some() && servers.get(SERVER_NAME) == Some(&merged) {
                return Ok(Edit::Unchanged);
            }
            servers.insert(SERVER_NAME.into(), merged);
        }
        SetupAction::Uninstall => {
            let Some(servers) = doc.get_mut(key) else {
                return Ok(Edit::Unchanged);
            };
            let servers = servers.as_object_mut().ok_or_else(not_object)?;
            if servers.shift_remove(SERVER_NAME).is_none() {
                return Ok(Edit::Unchanged);
            }
            if servers.is_empty() {
                doc.shift_remove(key);
            }
            if doc.is_empty() {
                return Ok(Edit::Delete);
            }
        }
    }
    style.render(&Value::Object(doc)).map(Edit::Write)
}

fn edit_toml(text: Option<&str>, exe: &Path, action: SetupAction) -> Result<Edit, String> {
    use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, value};

    const KEY: &str = "mcp_servers";
    let mut doc: DocumentMut = text
        .unwrap_or("")
        .parse()
        .map_err(|e: toml_edit::TomlError| format!("not valid TOML: {}", e.message()))?;
    let command = exe.display().to_string();
    let args = || Array::from_iter(SERVER_ARGS);
    let not_table = || format!("\"{KEY}\" is not a table");
    match action {
        SetupAction::Install => {
            let root = doc.as_table_mut();
            if !root.contains_key(KEY) {
                let mut servers = Table::new();
                servers.set_implicit(true);
                root.insert(KEY, Item::Table(servers));
            }
            let servers = root.get_mut(KEY).ok_or_else(not_table)?;
            let inline = servers.is_inline_table();
            let servers = servers.as_table_like_mut().ok_or_else(not_table)?;
            if let Some(current) = servers.get_mut(SERVER_NAME) {
                let current = current
                    .as_table_like_mut()
                    .ok_or_else(|| format!("\"{KEY}.{SERVER_NAME}\" is not a table"))?;
                let same_command =
                    current.get("command").and_then(Item::as_str) == Some(command.as_str());
                let same_args = current
                    .get("args")
                    .and_then(Item::as_array)
                    .is_some_and(|a| a.iter().map(|v| v.as_str()).eq(SERVER_ARGS.map(Some)));
                if same_command && same_args && text.is_some() {
                    return Ok(Edit::Unchanged);
                }
                current.insert("command", value(command));
                current.insert("args", value(args()));
            } else if inline {
                let mut entry = InlineTable::new();
                entry.insert("command", command.into());
                entry.insert("args", args().into());
                servers.insert(SERVER_NAME, value(entry));
            } else {
                let mut entry = Table::new();
                entry.insert("command", value(command));
                entry.insert("args", value(args()));
                if text.is_some_and(|t| !t.trim().is_empty()) {
                    // A blank line between the file's last table and ours.
                    entry.decor_mut().set_prefix("\n");
                }
                servers.insert(SERVER_NAME, Item::Table(entry));
            }
        }
        SetupAction::Uninstall => {
            let root = doc.as_table_mut();
            let Some(servers) = root.get_mut(KEY) else {
                return Ok(Edit::Unchanged);
            };
            let servers = servers.as_table_like_mut().ok_or_else(not_table)?;
            if servers.remove(SERVER_NAME).is_none() {
                return Ok(Edit::Unchanged);
            }
            if servers.is_empty() {
                root.remove(KEY);
            }
            if doc.to_string().trim().is_empty() {
                return Ok(Edit::Delete);
            }
        }
    }
    Ok(Edit::Write(doc.to_string()))
}

/// What a run did (or, with `--dry-run`, would do) to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Created,
    Updated,
    Unchanged,
    Removed,
    Deleted,
    Absent,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Unchanged => "unchanged",
            Outcome::Removed => "removed",
            Outcome::Deleted => "deleted",
            Outcome::Absent => "absent",
        }
    }
}

/// Runs a validated request against `env`.
pub fn run(req: &SetupRequest, env: &SetupEnv) -> Result<Success, CliError> {
    let target = target(req.client, req.scope, env)?;
    let path = &target.path;
    // A symlinked configuration (dotfile managers) is edited where it points.
    let real = fs::canonicalize(path).unwrap_or_else(|_| path.clone());
    let text = match fs::read(&real) {
        Ok(bytes) => {
            Some(String::from_utf8(bytes).map_err(|_| malformed(path, "not UTF-8 text".into()))?)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) if e.kind() == io::ErrorKind::IsADirectory => {
            return Err(CliError::usage(format!(
                "{} is a directory, not a file",
                path.display()
            )));
        }
        Err(e) => return Err(io_error("cannot read", path, &e)),
    };
    let url = match (&env.url, req.url) {
        (Some(form), true) => Some((req.client, form)),
        (None, true) => return Err(CliError::internal("--url without the daemon's URL")),
        _ => None,
    };
    let edit = edit_entry(text.as_deref(), target.format, req.action, &env.exe, url)
        .map_err(|why| malformed(path, why))?;
    let outcome = match (&edit, req.action, text.is_some()) {
        (Edit::Unchanged, SetupAction::Install, _) => Outcome::Unchanged,
        (Edit::Unchanged, SetupAction::Uninstall, _) => Outcome::Absent,
        (Edit::Write(_), SetupAction::Install, false) => Outcome::Created,
        (Edit::Write(_), SetupAction::Install, true) => Outcome::Updated,
        (Edit::Write(_), SetupAction::Uninstall, _) => Outcome::Removed,
        (Edit::Delete, _, _) => Outcome::Deleted,
    };
    let content = match &edit {
        Edit::Write(new) => Some(new.clone()),
        Edit::Unchanged => text.clone(),
        Edit::Delete => None,
    };
    let mut skill = match req.skill {
        true => Some(SkillPlan::new(req, env)?),
        false => None,
    };
    let mut backup = None;
    if !req.dry_run {
        if text.is_some() && edit != Edit::Unchanged {
            backup = Some(make_backup(&real, path)?);
        }
        match &edit {
            Edit::Unchanged => {}
            Edit::Write(new) => {
                write_atomic(&real, new)?;
                // The file now holds the HTTP token: readable by its owner only (§L20.5).
                if url.is_some() {
                    owner_only(&real).map_err(|e| io_error("cannot restrict", path, &e))?;
                }
            }
            Edit::Delete => {
                fs::remove_file(&real).map_err(|e| io_error("cannot delete", path, &e))?
            }
        }
        if let Some(plan) = &mut skill {
            plan.apply()?;
        }
    }
    Ok(render(
        req,
        env,
        &target,
        outcome,
        content,
        backup,
        skill.as_ref(),
    ))
}

/// `--skill`: our `SKILL.md` at the client's skills directory (§L20.4).
struct SkillPlan {
    path: PathBuf,
    outcome: Outcome,
    exists: bool,
    backup: Option<PathBuf>,
}

impl SkillPlan {
    fn new(req: &SetupRequest, env: &SetupEnv) -> Result<Self, CliError> {
        let path = skill_path(req.client, req.scope, env)?;
        let current = match fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error("cannot read", &path, &e)),
        };
        let outcome = match (req.action, &current) {
            (SetupAction::Install, None) => Outcome::Created,
            (SetupAction::Install, Some(c)) if c == SKILL.as_bytes() => Outcome::Unchanged,
            (SetupAction::Install, Some(_)) => Outcome::Updated,
            (SetupAction::Uninstall, None) => Outcome::Absent,
            (SetupAction::Uninstall, Some(_)) => Outcome::Deleted,
        };
        Ok(Self {
            path,
            outcome,
            exists: current.is_some(),
            backup: None,
        })
    }

    fn apply(&mut self) -> Result<(), CliError> {
        if matches!(self.outcome, Outcome::Unchanged | Outcome::Absent) {
            return Ok(());
        }
        // A skill the user edited is kept as a backup, like a configuration file.
        if self.exists {
            self.backup = Some(make_backup(&self.path, &self.path)?);
        }
        if self.outcome == Outcome::Deleted {
            fs::remove_file(&self.path).map_err(|e| io_error("cannot delete", &self.path, &e))?;
            return Ok(());
        }
        write_atomic(&self.path, SKILL)
    }

    fn json(&self) -> Value {
        json!({
            "path": self.path.display().to_string(),
            "result": self.outcome.as_str(),
            "backup": self.backup.as_ref().map(|b| b.display().to_string()),
        })
    }
}

fn malformed(path: &Path, why: String) -> CliError {
    CliError::validation(format!(
        "{} cannot be edited: {why}; nothing was changed",
        path.display()
    ))
    .with_detail("path", path.display().to_string())
    .with_detail("reason", why)
    .with_hint("fix the file (or move it aside) and run the command again")
}

fn io_error(what: &str, path: &Path, e: &io::Error) -> CliError {
    CliError::internal(format!("{what} {}: {e}", path.display()))
        .with_detail("path", path.display().to_string())
}

/// Copies `real` beside `shown` as `<name>.appduct-backup-<UTC timestamp>` (with `-2`, `-3`, …
/// when that name is taken); returns the backup's path.
fn make_backup(real: &Path, shown: &Path) -> Result<PathBuf, CliError> {
    let stamp = OffsetDateTime::now_utc()
        .format(format_description!(
            "[year][month][day]T[hour][minute][second]Z"
        ))
        .map_err(|e| CliError::internal(format!("cannot format a timestamp: {e}")))?;
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = real.parent().unwrap_or(Path::new("."));
    for n in 1u32.. {
        let suffix = if n == 1 {
            String::new()
        } else {
            format!("-{n}")
        };
        let candidate = dir.join(format!("{name}.appduct-backup-{stamp}{suffix}"));
        // create_new: never overwrite an earlier backup.
        let mut file = match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&candidate)
        {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_error("cannot write a backup of", shown, &e)),
        };
        let copy = (|| {
            let bytes = fs::read(real)?;
            file.set_permissions(fs::metadata(real)?.permissions())?;
            file.write_all(&bytes)?;
            file.sync_all()
        })();
        if let Err(e) = copy {
            let _ = fs::remove_file(&candidate);
            return Err(io_error("cannot write a backup of", shown, &e));
        }
        return Ok(candidate);
    }
    Err(CliError::internal("no free backup name"))
}

#[cfg(unix)]
fn owner_only(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
}

#[cfg(not(unix))]
fn owner_only(_path: &Path) -> io::Result<()> {
    Ok(())
}

/// Replaces `path` with `text` through a temporary file in the same directory and a rename,
/// keeping an existing file's permissions (a reader never sees half a file).
fn write_atomic(path: &Path, text: &str) -> Result<(), CliError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| io_error("cannot create the directory of", path, &e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.appduct-{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        if let Ok(meta) = fs::metadata(path) {
            file.set_permissions(meta.permissions())?;
        }
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(io_error("cannot write", path, &e));
    }
    Ok(())
}

fn render(
    req: &SetupRequest,
    env: &SetupEnv,
    target: &Target,
    outcome: Outcome,
    content: Option<String>,
    backup: Option<PathBuf>,
    skill: Option<&SkillPlan>,
) -> Success {
    let path = target.path.display().to_string();
    let command = env.exe.display().to_string();
    let action = match req.action {
        SetupAction::Install => "install",
        SetupAction::Uninstall => "uninstall",
    };
    let data = json!({
        "client": req.client.id(),
        "scope": req.scope.as_str(),
        "action": action,
        "path": path,
        "result": outcome.as_str(),
        "changed": !matches!(outcome, Outcome::Unchanged | Outcome::Absent),
        "dryRun": req.dry_run,
        "backup": backup.as_ref().map(|b| b.display().to_string()),
        "server": match (&env.url, req.url) {
            (Some(form), true) => json!({"name": SERVER_NAME, "url": form.url}),
            _ => json!({"name": SERVER_NAME, "command": command, "args": SERVER_ARGS}),
        },
        "content": content,
        "skill": skill.map(SkillPlan::json),
    });

    let client = req.client.name();
    let scope = req.scope.as_str();
    let human = if req.dry_run {
        let verb = match outcome {
            Outcome::Created => "would create",
            Outcome::Updated | Outcome::Removed => "would update",
            Outcome::Deleted => "would delete",
            Outcome::Unchanged | Outcome::Absent => "would leave unchanged",
        };
        let mut text = format!("Dry run ({client}, {scope}): {verb} {path}; nothing was written\n");
        if let Some(plan) = skill {
            text.push_str(&format!(
                "Skill: {} would be {}\n",
                plan.path.display(),
                plan.outcome.as_str()
            ));
        }
        if let Some(content) = &content {
            text.push_str(&format!("--- {path}\n{content}"));
            if !content.ends_with('\n') {
                text.push('\n');
            }
        }
        text
    } else {
        let title = match outcome {
            Outcome::Created | Outcome::Updated => format!("appduct added to {client} ({scope})"),
            Outcome::Unchanged => format!("appduct is already in {client} ({scope})"),
            Outcome::Removed | Outcome::Deleted => {
                format!("appduct removed from {client} ({scope})")
            }
            Outcome::Absent => format!("appduct is not in {client} ({scope})"),
        };
        let mut rows = vec![Row::field(
            "Config",
            format!("{path} ({})", outcome.as_str()),
        )];
        if let Some(b) = &backup {
            rows.push(Row::field("Backup", b.display().to_string()));
        }
        match (&env.url, req.action) {
            (Some(form), SetupAction::Install) if req.url => {
                rows.push(Row::field(
                    "Server",
                    format!("{} (Authorization: Bearer <token>)", form.url),
                ));
            }
            (_, SetupAction::Install) => rows.push(Row::field(
                "Server",
                format!("{command} {}", SERVER_ARGS.join(" ")),
            )),
            (_, SetupAction::Uninstall) => {}
        }
        let mut text = sections(&[Section::new(title, rows)]);
        if matches!(
            outcome,
            Outcome::Created | Outcome::Updated | Outcome::Removed | Outcome::Deleted
        ) {
            text.push_str(&format!(
                "Restart {client} (or reload its MCP servers) to apply the change.\n"
            ));
        }
        text
    };
    Success::new(data, human)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn exe() -> PathBuf {
        PathBuf::from("/opt/appduct/bin/appduct")
    }

    fn json_fmt(typed: bool) -> Format {
        Format::Json {
            key: "mcpServers",
            typed,
        }
    }

    fn write(edit: Edit) -> String {
        match edit {
            Edit::Write(t) => t,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn json_install_keeps_order_indent_and_unknown_keys() {
        let before = "{\n    \"theme\": \"dark\",\n    \"mcpServers\": {\n        \"other\": {\"command\": \"x\"}\n    },\n    \"zeta\": 1\n}";
        let after =
            write(edit(Some(before), json_fmt(false), SetupAction::Install, &exe()).unwrap());
        let doc: Value = serde_json::from_str(&after).unwrap();
        let keys: Vec<_> = doc.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["theme", "mcpServers", "zeta"]);
        assert_eq!(doc["mcpServers"]["other"], json!({"command": "x"}));
        assert_eq!(
            doc["mcpServers"]["appduct"],
            json!({"command": "/opt/appduct/bin/appduct", "args": ["mcp"]})
        );
        assert!(after.contains("\n    \"theme\""), "{after}");
        assert!(!after.ends_with('\n'));
        // Uninstall gives back the original content.
        let back = write(
            edit(
                Some(&after),
                json_fmt(false),
                SetupAction::Uninstall,
                &exe(),
            )
            .unwrap(),
        );
        let original: Value = serde_json::from_str(before).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&back).unwrap(), original);
    }

    #[test]
    fn json_install_is_idempotent_and_keeps_user_keys_of_our_entry() {
        let first = write(edit(None, json_fmt(true), SetupAction::Install, &exe()).unwrap());
        assert_eq!(
            edit(Some(&first), json_fmt(true), SetupAction::Install, &exe()).unwrap(),
            Edit::Unchanged
        );
        let mut doc: Value = serde_json::from_str(&first).unwrap();
        doc["mcpServers"]["appduct"]["env"] = json!({"APPDUCT_LOG": "debug"});
        doc["mcpServers"]["appduct"]["command"] = json!("/old/appduct");
        let edited = serde_json::to_string_pretty(&doc).unwrap();
        let again =
            write(edit(Some(&edited), json_fmt(true), SetupAction::Install, &exe()).unwrap());
        let doc: Value = serde_json::from_str(&again).unwrap();
        assert_eq!(
            doc["mcpServers"]["appduct"]["env"],
            json!({"APPDUCT_LOG": "debug"})
        );
        assert_eq!(
            doc["mcpServers"]["appduct"]["command"],
            json!("/opt/appduct/bin/appduct")
        );
        assert_eq!(doc["mcpServers"]["appduct"]["type"], json!("stdio"));
    }

    #[test]
    fn json_uninstall_of_our_only_entry_deletes_and_absent_is_unchanged() {
        let only = write(edit(None, json_fmt(false), SetupAction::Install, &exe()).unwrap());
        assert_eq!(
            edit(Some(&only), json_fmt(false), SetupAction::Uninstall, &exe()).unwrap(),
            Edit::Delete
        );
        assert_eq!(
            edit(None, json_fmt(false), SetupAction::Uninstall, &exe()).unwrap(),
            Edit::Unchanged
        );
        assert_eq!(
            edit(
                Some("{\"a\": 1}"),
                json_fmt(false),
                SetupAction::Uninstall,
                &exe()
            )
            .unwrap(),
            Edit::Unchanged
        );
    }

    #[test]
    fn json_crlf_and_tabs_are_kept() {
        let before = "{\r\n\t\"mcpServers\": {}\r\n}\r\n";
        let after =
            write(edit(Some(before), json_fmt(false), SetupAction::Install, &exe()).unwrap());
        assert!(after.contains("\r\n\t\t\"appduct\""), "{after:?}");
        assert!(after.ends_with("}\r\n"));
        assert!(!after.replace("\r\n", "").contains('\n'));
    }

    #[test]
    fn malformed_json_is_refused() {
        for (text, why) in [
            ("{", "not valid JSON"),
            ("[]", "not a JSON object"),
            ("{\"mcpServers\": []}", "\"mcpServers\" is not an object"),
            ("{\"a\": 1, // comment\n}", "not valid JSON"),
        ] {
            let err = edit(Some(text), json_fmt(false), SetupAction::Install, &exe()).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
        let err = edit(
            Some("{\"mcpServers\": 3}"),
            json_fmt(false),
            SetupAction::Uninstall,
            &exe(),
        )
        .unwrap_err();
        assert!(err.contains("not an object"));
    }

    #[test]
    fn toml_install_keeps_comments_and_uninstall_restores_bytes() {
        let before = "# my codex config\nmodel = \"o3\" # favourite\n\n[mcp_servers.other]\ncommand = \"other\"\nargs = [\"--x\"]\n";
        let after = write(edit(Some(before), Format::Toml, SetupAction::Install, &exe()).unwrap());
        assert!(after.starts_with(before), "{after}");
        assert!(
            after.ends_with("\n[mcp_servers.appduct]\ncommand = \"/opt/appduct/bin/appduct\"\nargs = [\"mcp\"]\n"),
            "{after}"
        );
        assert_eq!(
            edit(Some(&after), Format::Toml, SetupAction::Install, &exe()).unwrap(),
            Edit::Unchanged
        );
        let back = write(edit(Some(&after), Format::Toml, SetupAction::Uninstall, &exe()).unwrap());
        assert_eq!(back, before);
    }

    #[test]
    fn toml_new_file_and_removal() {
        let created = write(edit(None, Format::Toml, SetupAction::Install, &exe()).unwrap());
        assert_eq!(
            created,
            "[mcp_servers.appduct]\ncommand = \"/opt/appduct/bin/appduct\"\nargs = [\"mcp\"]\n"
        );
        assert_eq!(
            edit(Some(&created), Format::Toml, SetupAction::Uninstall, &exe()).unwrap(),
            Edit::Delete
        );
        let err = edit(
            Some("mcp_servers = 3\n"),
            Format::Toml,
            SetupAction::Install,
            &exe(),
        )
        .unwrap_err();
        assert!(err.contains("not a table"), "{err}");
        let err = edit(
            Some("[mcp_servers\n"),
            Format::Toml,
            SetupAction::Install,
            &exe(),
        )
        .unwrap_err();
        assert!(err.contains("not valid TOML"), "{err}");
    }

    #[test]
    fn toml_inline_servers_table_gets_an_inline_entry() {
        let before = "mcp_servers = { other = { command = \"o\" } }\n";
        let after = write(edit(Some(before), Format::Toml, SetupAction::Install, &exe()).unwrap());
        let doc: toml_edit::DocumentMut = after.parse().unwrap();
        assert_eq!(
            doc["mcp_servers"]["appduct"]["command"].as_str(),
            Some("/opt/appduct/bin/appduct")
        );
        assert_eq!(doc["mcp_servers"]["other"]["command"].as_str(), Some("o"));
    }

    fn env(os: Os) -> SetupEnv {
        SetupEnv {
            os,
            home: Some("/home/u".into()),
            cwd: "/work/app".into(),
            exe: exe(),
            appdata: Some("C:/Users/u/AppData/Roaming".into()),
            xdg_config_home: None,
            url: None,
            codex_home: None,
        }
    }

    #[test]
    fn locations_per_client_scope_and_platform() {
        let at = |c, s, e: &SetupEnv| target(c, s, e).unwrap().path;
        let linux = env(Os::Linux);
        assert_eq!(
            at(Client::ClaudeCode, Scope::Project, &linux),
            Path::new("/work/app/.mcp.json")
        );
        assert_eq!(
            at(Client::ClaudeCode, Scope::User, &linux),
            Path::new("/home/u/.claude.json")
        );
        assert_eq!(
            at(Client::ClaudeDesktop, Scope::User, &linux),
            Path::new("/home/u/.config/Claude/claude_desktop_config.json")
        );
        assert_eq!(
            at(Client::ClaudeDesktop, Scope::User, &env(Os::MacOs)),
            Path::new("/home/u/Library/Application Support/Claude/claude_desktop_config.json")
        );
        assert_eq!(
            at(Client::ClaudeDesktop, Scope::User, &env(Os::Windows)),
            Path::new("C:/Users/u/AppData/Roaming/Claude/claude_desktop_config.json")
        );
        assert_eq!(
            at(Client::Cursor, Scope::Project, &linux),
            Path::new("/work/app/.cursor/mcp.json")
        );
        assert_eq!(
            at(Client::Cursor, Scope::User, &linux),
            Path::new("/home/u/.cursor/mcp.json")
        );
        assert_eq!(
            at(Client::Vscode, Scope::Project, &linux),
            Path::new("/work/app/.vscode/mcp.json")
        );
        assert_eq!(
            at(Client::Vscode, Scope::User, &linux),
            Path::new("/home/u/.config/Code/User/mcp.json")
        );
        assert_eq!(
            at(Client::Codex, Scope::User, &linux),
            Path::new("/home/u/.codex/config.toml")
        );
        assert_eq!(
            at(Client::Codex, Scope::Project, &linux),
            Path::new("/work/app/.codex/config.toml")
        );
        let mut custom = env(Os::Linux);
        custom.codex_home = Some("/c".into());
        custom.xdg_config_home = Some("/x".into());
        assert_eq!(
            at(Client::Codex, Scope::User, &custom),
            Path::new("/c/config.toml")
        );
        assert_eq!(
            at(Client::Vscode, Scope::User, &custom),
            Path::new("/x/Code/User/mcp.json")
        );
        assert_eq!(
            at(Client::Windsurf, Scope::User, &linux),
            Path::new("/home/u/.codeium/windsurf/mcp_config.json")
        );
        let mut homeless = env(Os::Linux);
        homeless.home = None;
        assert_eq!(
            target(Client::Cursor, Scope::User, &homeless)
                .unwrap_err()
                .exit_code(),
            64
        );
    }
}
