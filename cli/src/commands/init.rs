//! `appduct init` (§L10): records the project's deep-link scheme and app ids in
//! `<cwd>/.appduct/config.json`. Never contacts the daemon, never creates daemon files.

use appduct_client::platform::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::fs::{self, DirBuilder};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use appduct_client::project::{self, AppKind, PROBED_FILES};
use appduct_client::state_dir;
use appduct_protocol::link::validate_scheme;
use clap::Args;
use serde_json::{Map, Value, json};

use super::Command;
use super::args::{app_id, scheme};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::Success;
use crate::render::{self, Row, Section};

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
    /// What kind of app this is; picks the kind of link `sessions link` and `appduct_connect`
    /// mint by default (default: react-native when package.json depends on react-native or
    /// expo)
    #[arg(long, value_enum, value_name = "PLATFORM")]
    pub platform: Option<PlatformArg>,
    /// Replace recorded values
    #[arg(long)]
    pub force: bool,
    /// Also write the project's .mcp.json for Claude Code (as `appduct mcp install --client
    /// claude-code --project`)
    #[arg(long)]
    pub mcp_json: bool,
}

/// `--platform` (and `sessions link --for`): the kinds of [`AppKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlatformArg {
    ReactNative,
    Web,
    Native,
}

impl PlatformArg {
    pub fn kind(self) -> AppKind {
        match self {
            PlatformArg::ReactNative => AppKind::ReactNative,
            PlatformArg::Web => AppKind::Web,
            PlatformArg::Native => AppKind::Native,
        }
    }
}

/// `init` (§L10); values already checked against §L5.1 and §L5.2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitRequest {
    pub scheme: Option<String>,
    pub ios_app_id: Option<String>,
    pub android_app_id: Option<String>,
    /// `--platform`; else detected, else left out.
    pub platform: Option<AppKind>,
    pub force: bool,
    /// `--mcp-json`: also run `mcp install --client claude-code --project` (§L20).
    pub mcp_json: bool,
}

pub fn validate(a: InitArgs) -> Result<Command, CliError> {
    Ok(Command::Init(InitRequest {
        scheme: a.scheme.map(scheme).transpose()?,
        ios_app_id: a
            .ios_app_id
            .map(|v| app_id("--ios-app-id", v))
            .transpose()?,
        android_app_id: a
            .android_app_id
            .map(|v| app_id("--android-app-id", v))
            .transpose()?,
        platform: a.platform.map(PlatformArg::kind),
        force: a.force,
        mcp_json: a.mcp_json,
    }))
}

const DIR_NAME: &str = ".appduct";
const FILE_NAME: &str = "config.json";
const NEXT_STEPS: [&str; 3] = [
    "Add the appduct SDK to the app and register a tool",
    "Run \"appduct sessions link --qr\" and scan the code",
    "Connect your agent: \"appduct init --mcp-json\" writes this project's .mcp.json, or \"appduct mcp install --client <client>\"",
];

/// Where `init` runs and which directories it must never take over.
#[derive(Debug, Clone)]
pub struct InitEnv {
    pub cwd: PathBuf,
    /// The active state dir, when it could be resolved.
    pub state_dir: Option<PathBuf>,
    pub home: Option<PathBuf>,
}

/// The scheme chosen and why.
struct Chosen {
    scheme: String,
    source: String,
    origin: Option<PathBuf>,
    note: Option<String>,
}

impl InitEnv {
    /// The process's working directory, active state dir and home directory.
    pub fn current(globals: &Globals) -> Result<Self, CliError> {
        let cwd = std::env::current_dir()
            .map_err(|e| CliError::usage(format!("cannot determine the current directory: {e}")))?;
        Ok(Self {
            cwd,
            state_dir: globals.state_dir().ok().map(|d| d.path().to_path_buf()),
            home: std::env::home_dir(),
        })
    }
}

pub fn run(req: &InitRequest, env: &InitEnv) -> Result<Success, CliError> {
    let dir = env.cwd.join(DIR_NAME);
    let path = dir.join(FILE_NAME);
    refuse_reserved_dir(&dir, env)?;
    if fs::symlink_metadata(&dir).is_ok() && !dir.is_dir() {
        return Err(CliError::usage(format!(
            "{} exists and is not a directory",
            dir.display()
        )));
    }
    if path.is_dir() {
        return Err(CliError::usage(format!(
            "{} is a directory, not a file",
            path.display()
        )));
    }
    let existing = read_existing(&path)?;
    let created = existing.is_none();
    let mut config = existing.clone().unwrap_or_default();

    let recorded = match config.get("scheme") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(malformed(&path, "\"scheme\" must be a string")),
    };
    let chosen = choose_scheme(req, recorded.as_deref(), &env.cwd)?;
    config.insert("scheme".into(), Value::String(chosen.scheme.clone()));

    let mut app_ids = match config.get("appId") {
        None => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => return Err(malformed(&path, "\"appId\" must be an object")),
    };
    for (platform, flag, given) in [
        ("ios", "--ios-app-id", &req.ios_app_id),
        ("android", "--android-app-id", &req.android_app_id),
    ] {
        let Some(given) = given else { continue };
        match app_ids.get(platform).and_then(Value::as_str) {
            Some(current) if current == given => {}
            Some(current) if !req.force => {
                return Err(CliError::usage(format!(
                    "{} already records appId.{platform} \"{current}\"; pass --force to replace it with \"{given}\" ({flag})",
                    path.display()
                )));
            }
            _ => {
                app_ids.insert(platform.into(), Value::String(given.clone()));
            }
        }
    }
    if !app_ids.is_empty() {
        config.insert("appId".into(), Value::Object(app_ids.clone()));
    }
    let platform = choose_platform(req, &config, &path, &env.cwd)?;
    if let Some(kind) = platform {
        config.insert(AppKind::CONFIG_KEY.into(), json!(kind.as_str()));
    }

    let changed = existing.as_ref() != Some(&config);
    if changed {
        create_private_dir(&dir)?;
        write_config(&path, &config)?;
    }
    tighten(&dir, 0o700)?;
    tighten(&path, 0o600)?;

    Ok(render_result(
        &path, &chosen, created, changed, &app_ids, platform,
    ))
}

/// The `platform` to record (issue #23): `--platform`, else the recorded one, else detected
/// from `package.json`; a different `--platform` than the recorded one needs `--force`.
fn choose_platform(
    req: &InitRequest,
    config: &Map<String, Value>,
    path: &Path,
    cwd: &Path,
) -> Result<Option<AppKind>, CliError> {
    let recorded = match config.get(AppKind::CONFIG_KEY) {
        None => None,
        Some(Value::String(s)) => match AppKind::parse(s) {
            Some(kind) => Some(kind),
            None if req.force || req.platform.is_some() => None,
            None => {
                return Err(malformed(
                    path,
                    "\"platform\" must be \"react-native\", \"web\" or \"native\"",
                ));
            }
        },
        Some(_) => return Err(malformed(path, "\"platform\" must be a string")),
    };
    match (req.platform, recorded) {
        (Some(given), Some(current)) if given != current && !req.force => {
            Err(CliError::usage(format!(
                "{} already records platform \"{current}\"; pass --force to replace it with \"{given}\"",
                path.display()
            )))
        }
        (Some(given), _) => Ok(Some(given)),
        (None, Some(current)) => Ok(Some(current)),
        (None, None) => Ok(project::detect_app_kind(cwd)),
    }
}

fn choose_scheme(
    req: &InitRequest,
    recorded: Option<&str>,
    cwd: &Path,
) -> Result<Chosen, CliError> {
    let given = |scheme: &str| Chosen {
        scheme: scheme.to_owned(),
        source: "--scheme".into(),
        origin: None,
        note: None,
    };
    let kept = |scheme: &str, note| Chosen {
        scheme: scheme.to_owned(),
        source: "already-recorded".into(),
        origin: None,
        note,
    };
    let chosen = match (req.scheme.as_deref(), recorded) {
        (Some(s), None) => given(s),
        (Some(s), Some(r)) if s == r || req.force => given(s),
        (Some(s), Some(r)) => {
            return Err(CliError::usage(format!(
                "the project already records scheme \"{r}\"; pass --force to replace it with \"{s}\""
            )));
        }
        (None, Some(r)) if !req.force => {
            // Keep the recorded scheme; mention a disagreeing discovery.
            let note = match project::discover_scheme(cwd) {
                Ok(Some(found)) if found.scheme != r => Some(format!(
                    "{} ({}) names scheme \"{}\", but \"{r}\" is recorded; run \"appduct init --force\" to adopt it",
                    found.source,
                    found.origin.display(),
                    found.scheme
                )),
                _ => None,
            };
            kept(r, note)
        }
        (None, recorded) => match discover(cwd)? {
            Some(found) => Chosen {
                scheme: found.scheme,
                source: found.source.as_str().into(),
                origin: Some(found.origin),
                note: None,
            },
            None => match recorded {
                Some(r) => kept(r, None),
                None => {
                    return Err(CliError::usage(format!(
                        "no deep-link scheme found: pass --scheme <scheme>, or add one to the project files ({PROBED_FILES})"
                    )));
                }
            },
        },
    };
    validate_scheme(&chosen.scheme).map_err(|e| {
        let from = match &chosen.origin {
            Some(origin) => format!("{} in {}", chosen.source, origin.display()),
            None => chosen.source.clone(),
        };
        CliError::usage(format!("{e} (\"{}\" from {from})", chosen.scheme))
    })?;
    Ok(chosen)
}

fn discover(cwd: &Path) -> Result<Option<project::Found>, CliError> {
    project::discover_scheme(cwd).map_err(|conflict| {
        CliError::usage(format!("{conflict}; pass --scheme <scheme> to choose"))
    })
}

/// Refuses `<cwd>/.appduct` when it is the active state dir or `<home>/.appduct`.
fn refuse_reserved_dir(dir: &Path, env: &InitEnv) -> Result<(), CliError> {
    let reserved = [
        env.state_dir.clone(),
        env.home.as_ref().map(|h| h.join(DIR_NAME)),
    ];
    for other in reserved.into_iter().flatten() {
        if same_path(dir, &other) {
            return Err(CliError::usage(format!(
                "{} is appduct's state directory, not a project configuration; run appduct init in the project directory",
                dir.display()
            )));
        }
    }
    Ok(())
}

fn same_path(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => std::path::absolute(a).ok() == std::path::absolute(b).ok(),
    }
}

fn malformed(path: &Path, why: &str) -> CliError {
    CliError::usage(format!("{} is malformed: {why}", path.display()))
        .with_detail("path", path.display().to_string())
}

fn read_existing(path: &Path) -> Result<Option<Map<String, Value>>, CliError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(CliError::usage(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(_) => Err(malformed(path, "the top level must be a JSON object")),
        Err(e) => Err(malformed(path, &format!("not valid JSON ({e})"))),
    }
}

fn create_private_dir(dir: &Path) -> Result<(), CliError> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_error(dir, &e)),
    }
}

/// Temporary file (0600, exclusive) next to the target, then rename.
fn write_config(path: &Path, config: &Map<String, Value>) -> Result<(), CliError> {
    let mut text = serde_json::to_string_pretty(config)
        .map_err(|e| CliError::internal(format!("cannot serialise the configuration: {e}")))?;
    text.push('\n');
    let tmp = path.with_file_name(format!(".{FILE_NAME}.tmp-{}", std::process::id()));
    let write = || -> io::Result<()> {
        // The one opener for files appduct writes (O_EXCL|O_NOFOLLOW, 0600, fstat checks).
        let mut file = state_dir::create_new(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_error(path, &e)
    })
}

/// Sets `mode` when the path has any group or other bits (loose modes are tightened even when
/// nothing else changes).
fn tighten(path: &Path, mode: u32) -> Result<(), CliError> {
    let current = fs::metadata(path)
        .map_err(|e| io_error(path, &e))?
        .permissions()
        .mode();
    if current & 0o077 != 0 {
        appduct_client::platform::chmod(path, mode).map_err(|e| io_error(path, &e))?;
    }
    Ok(())
}

fn io_error(path: &Path, e: &io::Error) -> CliError {
    CliError::usage(format!("{}: {e}", path.display()))
        .with_detail("path", path.display().to_string())
}

/// The MCP server entry, with the args array on one line as in §L10.
fn mcp_entry_text(scheme: &str) -> String {
    let args = ["mcp", "--scheme", scheme]
        .iter()
        .map(|a| Value::String((*a).to_owned()).to_string())
        .collect::<Vec<_>>()
        .join(", ");
    format!("{{\n  \"command\": \"appduct\",\n  \"args\": [{args}]\n}}")
}

fn render_result(
    path: &Path,
    chosen: &Chosen,
    created: bool,
    changed: bool,
    app_ids: &Map<String, Value>,
    platform: Option<AppKind>,
) -> Success {
    let mut data = Map::new();
    data.insert("path".into(), json!(path.display().to_string()));
    data.insert("scheme".into(), json!(chosen.scheme));
    data.insert("source".into(), json!(chosen.source));
    if let Some(origin) = &chosen.origin {
        data.insert("origin".into(), json!(origin.display().to_string()));
    }
    data.insert("created".into(), json!(created));
    data.insert("changed".into(), json!(changed));
    if !app_ids.is_empty() {
        data.insert("appId".into(), Value::Object(app_ids.clone()));
    }
    if let Some(kind) = platform {
        data.insert("platform".into(), json!(kind.as_str()));
    }
    data.insert(
        "mcpServerEntry".into(),
        json!({"command": "appduct", "args": ["mcp", "--scheme", chosen.scheme]}),
    );
    data.insert("nextSteps".into(), json!(NEXT_STEPS));
    if let Some(note) = &chosen.note {
        data.insert("note".into(), json!(note));
    }

    let state = match (created, changed) {
        (true, _) => "created",
        (false, true) => "updated",
        (false, false) => "unchanged",
    };
    let from = match chosen.source.as_str() {
        "already-recorded" => "already recorded".to_owned(),
        source => format!("from {source}"),
    };
    let mut rows = vec![
        Row::field("Config", format!("{} ({state})", path.display())),
        Row::field("Scheme", format!("{} ({from})", chosen.scheme)),
    ];
    if !app_ids.is_empty() {
        let ids: Vec<String> = app_ids
            .iter()
            .map(|(platform, id)| format!("{platform} {}", id.as_str().unwrap_or_default()))
            .collect();
        rows.push(Row::field("App ids", ids.join(", ")));
    }
    if let Some(kind) = platform {
        let links = match kind.transport() {
            appduct_protocol::control::Transport::Sealed => "sealed links",
            appduct_protocol::control::Transport::Web => "web links",
            appduct_protocol::control::Transport::Native => "native links",
        };
        rows.push(Row::field("Platform", format!("{kind} ({links})")));
    }
    if let Some(note) = &chosen.note {
        rows.push(Row::field("Note", note.as_str()));
    }
    let mut human = render::sections(&[Section::new("Project configured", rows)]);
    human.push_str("\nMCP server entry for your agent:\n");
    human.push_str(&render::indent(&mcp_entry_text(&chosen.scheme), 2));
    human.push_str("\nNext steps:\n");
    for (i, step) in NEXT_STEPS.iter().enumerate() {
        human.push_str(&format!("  {}. {step}\n", i + 1));
    }
    Success::new(Value::Object(data), human)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::Permissions;
    use std::time::{Duration, SystemTime};

    struct Project {
        tmp: tempfile::TempDir,
    }

    impl Project {
        fn new() -> Self {
            Self {
                tmp: tempfile::tempdir().unwrap(),
            }
        }
        fn cwd(&self) -> PathBuf {
            self.tmp.path().join("shop")
        }
        fn env(&self) -> InitEnv {
            fs::create_dir_all(self.cwd()).unwrap();
            InitEnv {
                cwd: self.cwd(),
                state_dir: Some(self.tmp.path().join("state")),
                home: Some(self.tmp.path().join("home")),
            }
        }
        fn config_path(&self) -> PathBuf {
            self.cwd().join(".appduct/config.json")
        }
        fn config(&self) -> Value {
            serde_json::from_str(&fs::read_to_string(self.config_path()).unwrap()).unwrap()
        }
        fn write(&self, rel: &str, text: &str) {
            let path = self.cwd().join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
    }

    fn req(scheme: Option<&str>, force: bool) -> InitRequest {
        InitRequest {
            scheme: scheme.map(str::to_owned),
            ios_app_id: None,
            android_app_id: None,
            platform: None,
            force,
            mcp_json: false,
        }
    }

    #[test]
    fn platform_is_given_detected_kept_and_replaced_only_with_force() {
        let p = Project::new();
        let env = p.env();
        // Nothing to detect: no platform recorded (links default to native).
        run(&req(Some("shop"), false), &env).unwrap();
        assert_eq!(p.config().get("platform"), None);
        // Detected from package.json.
        p.write("package.json", r#"{"dependencies": {"expo": "~52.0.0"}}"#);
        let done = run(&req(None, false), &env).unwrap();
        assert_eq!(p.config()["platform"], "react-native");
        assert_eq!(done.data["platform"], "react-native");
        assert!(
            done.human.contains("react-native (sealed links)"),
            "{}",
            done.human
        );
        // A different --platform needs --force.
        let mut native = req(None, false);
        native.platform = Some(AppKind::Native);
        let e = run(&native, &env).unwrap_err();
        assert_eq!(e.exit_code(), 64);
        assert!(e.to_string().contains("--force"), "{e}");
        native.force = true;
        run(&native, &env).unwrap();
        assert_eq!(p.config()["platform"], "native");
        // Kept on a later run, even though package.json says react-native.
        run(&req(None, false), &env).unwrap();
        assert_eq!(p.config()["platform"], "native");
        assert_eq!(p.config()["scheme"], "shop");
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn creates_the_config_from_app_json_with_private_modes() {
        let p = Project::new();
        p.write("app.json", r#"{"expo":{"scheme":"shop"}}"#);
        let mut r = req(None, false);
        r.android_app_id = Some("com.example.shop".into());
        let s = run(&r, &p.env()).unwrap();
        assert_eq!(s.data["scheme"], "shop");
        assert_eq!(s.data["source"], "app.json");
        assert_eq!(
            s.data["origin"],
            p.cwd().join("app.json").display().to_string()
        );
        assert_eq!(s.data["created"], true);
        assert_eq!(s.data["changed"], true);
        assert_eq!(s.data["appId"], json!({"android": "com.example.shop"}));
        assert_eq!(
            s.data["mcpServerEntry"],
            json!({"command": "appduct", "args": ["mcp", "--scheme", "shop"]})
        );
        assert_eq!(
            p.config(),
            json!({"scheme": "shop", "appId": {"android": "com.example.shop"}})
        );
        assert_eq!(mode(&p.cwd().join(".appduct")), 0o700);
        assert_eq!(mode(&p.config_path()), 0o600);
        let expected_human = format!(
            "Project configured
  Config:   {} (created)
  Scheme:   shop (from app.json)
  App ids:  android com.example.shop

MCP server entry for your agent:
  {{
    \"command\": \"appduct\",
    \"args\": [\"mcp\", \"--scheme\", \"shop\"]
  }}

Next steps:
  1. Add the appduct SDK to the app and register a tool
  2. Run \"appduct sessions link --qr\" and scan the code
  3. Connect your agent: \"appduct init --mcp-json\" writes this project's .mcp.json, or \"appduct mcp install --client <client>\"
",
            p.config_path().display()
        );
        assert_eq!(s.human, expected_human);
    }

    #[test]
    fn same_scheme_again_is_idempotent_and_leaves_mtime() {
        let p = Project::new();
        run(&req(Some("shop"), false), &p.env()).unwrap();
        let old = SystemTime::now() - Duration::from_secs(3600);
        fs::File::options()
            .write(true)
            .open(p.config_path())
            .unwrap()
            .set_modified(old)
            .unwrap();
        let s = run(&req(Some("shop"), false), &p.env()).unwrap();
        assert_eq!(
            (s.data["created"].clone(), s.data["changed"].clone()),
            (json!(false), json!(false))
        );
        assert_eq!(
            fs::metadata(p.config_path()).unwrap().modified().unwrap(),
            old
        );
        assert!(s.human.contains("(unchanged)"));
        // No --scheme and no discovery: the recorded scheme is kept.
        let s = run(&req(None, false), &p.env()).unwrap();
        assert_eq!(s.data["source"], "already-recorded");
        assert_eq!(s.data["changed"], false);
    }

    #[test]
    fn loose_modes_are_tightened_without_other_changes() {
        let p = Project::new();
        run(&req(Some("shop"), false), &p.env()).unwrap();
        fs::set_permissions(p.config_path(), Permissions::from_mode(0o644)).unwrap();
        fs::set_permissions(p.cwd().join(".appduct"), Permissions::from_mode(0o755)).unwrap();
        let s = run(&req(Some("shop"), false), &p.env()).unwrap();
        assert_eq!(s.data["changed"], false);
        assert_eq!(mode(&p.config_path()), 0o600);
        assert_eq!(mode(&p.cwd().join(".appduct")), 0o700);
    }

    #[test]
    fn a_different_scheme_needs_force_and_force_merges() {
        let p = Project::new();
        p.write(".appduct/config.json", r#"{"scheme":"old","custom":1}"#);
        let e = run(&req(Some("new"), false), &p.env()).unwrap_err();
        assert_eq!(e.exit_code(), 64);
        assert!(e.message.contains("--force"));
        let s = run(&req(Some("new"), true), &p.env()).unwrap();
        assert_eq!(s.data["changed"], true);
        assert_eq!(s.data["created"], false);
        assert_eq!(p.config(), json!({"scheme": "new", "custom": 1}));
    }

    #[test]
    fn disagreeing_discovery_keeps_the_recorded_scheme_with_a_note_until_force() {
        let p = Project::new();
        p.write(".appduct/config.json", r#"{"scheme":"old"}"#);
        p.write("app.json", r#"{"expo":{"scheme":"fresh"}}"#);
        let s = run(&req(None, false), &p.env()).unwrap();
        assert_eq!(s.data["scheme"], "old");
        assert_eq!(s.data["source"], "already-recorded");
        assert!(s.data["note"].as_str().unwrap().contains("\"fresh\""));
        let s = run(&req(None, true), &p.env()).unwrap();
        assert_eq!(s.data["scheme"], "fresh");
        assert_eq!(s.data["source"], "app.json");
        assert_eq!(p.config()["scheme"], "fresh");
    }

    #[test]
    fn app_ids_are_independent_and_replacing_one_needs_force() {
        let p = Project::new();
        let mut r = req(Some("shop"), false);
        r.ios_app_id = Some("com.example.ios".into());
        run(&r, &p.env()).unwrap();
        let mut r = req(Some("shop"), false);
        r.android_app_id = Some("com.example.android".into());
        run(&r, &p.env()).unwrap();
        assert_eq!(
            p.config()["appId"],
            json!({"ios": "com.example.ios", "android": "com.example.android"})
        );
        let mut r = req(Some("shop"), false);
        r.ios_app_id = Some("com.other".into());
        assert_eq!(run(&r, &p.env()).unwrap_err().exit_code(), 64);
        r.force = true;
        run(&r, &p.env()).unwrap();
        assert_eq!(p.config()["appId"]["ios"], "com.other");
        assert_eq!(p.config()["appId"]["android"], "com.example.android");
    }

    #[test]
    fn refusals() {
        // No scheme anywhere.
        let p = Project::new();
        let e = run(&req(None, false), &p.env()).unwrap_err();
        assert!(e.message.contains("no deep-link scheme found"));
        assert!(!p.cwd().join(".appduct").exists());

        // Invalid discovered scheme.
        p.write("app.json", r#"{"expo":{"scheme":"https"}}"#);
        let e = run(&req(None, false), &p.env()).unwrap_err();
        assert!(
            e.message.contains("Invalid deep-link scheme"),
            "{}",
            e.message
        );

        // Malformed existing JSON.
        let p = Project::new();
        p.write(".appduct/config.json", "{oops");
        assert!(
            run(&req(Some("shop"), false), &p.env())
                .unwrap_err()
                .message
                .contains("malformed")
        );

        // `.appduct` is a file.
        let p = Project::new();
        p.write(".appduct", "x");
        assert_eq!(
            run(&req(Some("shop"), false), &p.env())
                .unwrap_err()
                .exit_code(),
            64
        );

        // `config.json` is a directory.
        let p = Project::new();
        fs::create_dir_all(p.config_path()).unwrap();
        assert_eq!(
            run(&req(Some("shop"), false), &p.env())
                .unwrap_err()
                .exit_code(),
            64
        );
    }

    #[test]
    fn refuses_the_state_dir_and_home_appduct() {
        let p = Project::new();
        let mut env = p.env();
        env.home = Some(env.cwd.clone());
        let e = run(&req(Some("shop"), false), &env).unwrap_err();
        assert!(e.message.contains("state directory"));

        let mut env = p.env();
        env.state_dir = Some(env.cwd.join(".appduct"));
        assert_eq!(
            run(&req(Some("shop"), false), &env)
                .unwrap_err()
                .exit_code(),
            64
        );
        assert!(!p.cwd().join(".appduct").exists());
    }

    #[test]
    fn conflicting_native_probes_are_a_usage_error() {
        let p = Project::new();
        p.write("project.yml", "CFBundleURLSchemes: [one]\n");
        p.write(
            "android/app/build.gradle",
            r#"manifestPlaceholders = [appductScheme: "two"]"#,
        );
        let e = run(&req(None, false), &p.env()).unwrap_err();
        assert!(e.message.contains("--scheme"));
        // --scheme settles it without looking at the probes.
        assert_eq!(
            run(&req(Some("one"), false), &p.env()).unwrap().data["source"],
            "--scheme"
        );
    }
}
