//! Scheme and app-id resolution for `sessions link` (05 §5.1, §5.2): flag, environment, the
//! nearest project `.appduct/config.json` walking up from the current directory, the state
//! dir's `config.json`, then the static probes of [`crate::project`] in the current directory.

use std::path::{Path, PathBuf};

use appduct_protocol::link::validate_scheme;
use serde_json::Value;

use crate::command::is_valid_app_id;
use crate::error::CliError;
use crate::project;

/// The variable of tier 2 (05 §2.2).
pub const SCHEME_ENV: &str = "APPDUCT_SCHEME";

/// What resolution looks at, so tests can give their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveEnv {
    pub cwd: PathBuf,
    pub home: Option<PathBuf>,
    /// The active state directory (absolute).
    pub state_dir: PathBuf,
    /// `APPDUCT_SCHEME`.
    pub env_scheme: Option<String>,
}

impl ResolveEnv {
    /// The process's current directory, home, `APPDUCT_SCHEME` and the given state dir.
    pub fn from_process(state_dir: &Path) -> Result<Self, CliError> {
        let cwd = std::env::current_dir()
            .map_err(|e| CliError::usage(format!("cannot determine the current directory: {e}")))?;
        Ok(Self {
            cwd,
            home: std::env::home_dir(),
            state_dir: state_dir.to_path_buf(),
            env_scheme: std::env::var(SCHEME_ENV).ok(),
        })
    }

    /// `<dir>/.appduct/config.json` for `cwd` and each ancestor, nearest first, skipping the
    /// ones inside `~/.appduct` or the active state dir (05 §5.1 step 3).
    fn project_configs(&self) -> Vec<PathBuf> {
        let reserved: Vec<PathBuf> = [
            Some(self.state_dir.clone()),
            self.home.as_ref().map(|h| h.join(".appduct")),
        ]
        .into_iter()
        .flatten()
        .collect();
        self.cwd
            .ancestors()
            .map(|dir| dir.join(".appduct"))
            .filter(|dot| !reserved.iter().any(|r| same_path(r, dot)))
            .map(|dot| dot.join("config.json"))
            .filter(|config| config.is_file())
            .collect()
    }
}

fn same_path(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// A config file's JSON; not valid JSON is a usage error naming the file.
fn read_json(path: &Path) -> Result<Value, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        CliError::usage(format!("cannot read {}: {e}", path.display()))
            .with_detail("path", path.display().to_string())
    })?;
    serde_json::from_str(&text).map_err(|e| {
        CliError::usage(format!("{} is not valid JSON: {e}", path.display()))
            .with_detail("path", path.display().to_string())
    })
}

fn checked_scheme(scheme: &str, origin: &str) -> Result<String, CliError> {
    validate_scheme(scheme).map_err(|e| {
        CliError::usage(format!("{e} (from {origin})"))
            .with_detail("scheme", scheme)
            .with_detail("source", origin)
    })?;
    Ok(scheme.to_owned())
}

/// A string key of a config file; present with another type is a usage error.
fn string_key<'a>(
    json: &'a Value,
    pointer: &str,
    path: &Path,
) -> Result<Option<&'a str>, CliError> {
    match json.pointer(pointer) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(CliError::usage(format!(
            "{} in {} must be a string",
            pointer.trim_start_matches('/').replace('/', "."),
            path.display()
        ))),
    }
}

/// The deep-link scheme (05 §5.1); every candidate is checked against the scheme rule.
pub fn resolve_scheme(flag: Option<&str>, env: &ResolveEnv) -> Result<String, CliError> {
    if let Some(flag) = flag {
        return checked_scheme(flag, "--scheme");
    }
    if let Some(s) = env.env_scheme.as_deref().filter(|s| !s.is_empty()) {
        return checked_scheme(s, SCHEME_ENV);
    }
    for path in env.project_configs() {
        let json = read_json(&path)?;
        if let Some(s) = string_key(&json, "/scheme", &path)? {
            return checked_scheme(s, &path.display().to_string());
        }
    }
    let state_config = env.state_dir.join("config.json");
    if state_config.is_file() {
        let json = read_json(&state_config)?;
        if let Some(s) = string_key(&json, "/scheme", &state_config)? {
            return checked_scheme(s, &state_config.display().to_string());
        }
    }
    match project::discover_scheme(&env.cwd) {
        Ok(Some(found)) => checked_scheme(
            &found.scheme,
            &format!("{}, {}", found.source, found.origin.display()),
        ),
        Ok(None) => Err(CliError::usage(format!(
            "No deep-link scheme found. Tried --scheme, {SCHEME_ENV}, .appduct/config.json in this \
             directory and its parents (run \"appduct init\"), {}, and the project files in this \
             directory ({}).",
            state_config.display(),
            project::PROBED_FILES
        ))
        .with_hint("Pass --scheme <scheme>, or run \"appduct init --scheme <scheme>\".")),
        Err(conflict) => Err(
            CliError::usage(format!("{conflict}; pass --scheme to choose one")).with_detail(
                "candidates",
                conflict
                    .0
                    .iter()
                    .map(|f| {
                        serde_json::json!({
                            "scheme": f.scheme,
                            "source": f.source.as_str(),
                            "origin": f.origin.display().to_string(),
                        })
                    })
                    .collect::<Vec<_>>(),
            ),
        ),
    }
}

/// Which app id `resolve_app_id` looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Android,
    Ios,
}

impl Platform {
    fn key(self) -> &'static str {
        match self {
            Platform::Android => "android",
            Platform::Ios => "ios",
        }
    }

    fn init_flag(self) -> &'static str {
        match self {
            Platform::Android => "--android-app-id",
            Platform::Ios => "--ios-app-id",
        }
    }
}

/// The Android application id or iOS bundle id (05 §5.2): `--app-id`, else the nearest project
/// config's `appId.<platform>`; the state-dir config is never used.
pub fn resolve_app_id(
    flag: Option<&str>,
    platform: Platform,
    env: &ResolveEnv,
) -> Result<String, CliError> {
    let checked = |id: &str, origin: &str| {
        if is_valid_app_id(id) {
            Ok(id.to_owned())
        } else {
            Err(CliError::usage(format!(
                "the app id \"{id}\" from {origin} must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,254}}$"
            )))
        }
    };
    if let Some(flag) = flag {
        return checked(flag, "--app-id");
    }
    let pointer = format!("/appId/{}", platform.key());
    for path in env.project_configs() {
        let json = read_json(&path)?;
        if let Some(id) = string_key(&json, &pointer, &path)? {
            return checked(id, &path.display().to_string());
        }
    }
    Err(CliError::usage(format!(
        "No app id for {}: pass --app-id, or set appId.{} in .appduct/config.json",
        platform.key(),
        platform.key()
    ))
    .with_hint(format!(
        "Run \"appduct init {} <id>\" in the project directory.",
        platform.init_flag()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        tmp: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Self {
            let tmp = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(tmp.path().join("home")).unwrap();
            std::fs::create_dir_all(tmp.path().join("state")).unwrap();
            std::fs::create_dir_all(tmp.path().join("proj/app/src")).unwrap();
            Self { tmp }
        }

        fn env(&self) -> ResolveEnv {
            ResolveEnv {
                cwd: self.tmp.path().join("proj/app/src"),
                home: Some(self.tmp.path().join("home")),
                state_dir: self.tmp.path().join("state"),
                env_scheme: None,
            }
        }

        fn write(&self, rel: &str, text: &str) {
            let path = self.tmp.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    #[test]
    fn flag_beats_environment_beats_project_config() {
        let f = Fixture::new();
        f.write("proj/.appduct/config.json", r#"{"scheme": "fromproject"}"#);
        let mut env = f.env();
        env.env_scheme = Some("fromenv".into());
        assert_eq!(resolve_scheme(Some("flag"), &env).unwrap(), "flag");
        assert_eq!(resolve_scheme(None, &env).unwrap(), "fromenv");
        env.env_scheme = Some(String::new());
        assert_eq!(resolve_scheme(None, &env).unwrap(), "fromproject");
    }

    #[test]
    fn the_walk_skips_files_without_the_key_and_stops_at_the_nearest_with_it() {
        let f = Fixture::new();
        f.write(
            "proj/app/.appduct/config.json",
            r#"{"appId": {"ios": "com.a"}}"#,
        );
        f.write("proj/.appduct/config.json", r#"{"scheme": "outer"}"#);
        assert_eq!(resolve_scheme(None, &f.env()).unwrap(), "outer");
        f.write(
            "proj/app/src/.appduct/config.json",
            r#"{"scheme": "inner"}"#,
        );
        assert_eq!(resolve_scheme(None, &f.env()).unwrap(), "inner");
    }

    #[test]
    fn the_state_dir_and_home_appduct_are_skipped_in_the_walk() {
        let f = Fixture::new();
        // cwd inside home: <home>/.appduct is the state dir of that user and never a project.
        f.write("home/.appduct/config.json", r#"{"scheme": "homecfg"}"#);
        let mut env = f.env();
        env.cwd = f.tmp.path().join("home/work");
        std::fs::create_dir_all(&env.cwd).unwrap();
        let e = resolve_scheme(None, &env).unwrap_err();
        assert_eq!(e.exit_code(), 64);
        // The state dir's config is tier 4.
        f.write("state/config.json", r#"{"scheme": "statecfg"}"#);
        assert_eq!(resolve_scheme(None, &env).unwrap(), "statecfg");
    }

    #[test]
    fn probes_are_the_last_tier_and_nothing_found_lists_every_place() {
        let f = Fixture::new();
        let e = resolve_scheme(None, &f.env()).unwrap_err();
        assert_eq!(e.exit_code(), 64);
        for place in [
            "--scheme",
            SCHEME_ENV,
            ".appduct/config.json",
            "config.json",
            "app.json",
        ] {
            assert!(e.message.contains(place), "{place}: {}", e.message);
        }
        f.write(
            "proj/app/src/app.json",
            r#"{"expo": {"scheme": "expo-app"}}"#,
        );
        assert_eq!(resolve_scheme(None, &f.env()).unwrap(), "expo-app");
    }

    #[test]
    fn invalid_schemes_and_invalid_json_are_usage_errors() {
        let f = Fixture::new();
        assert!(
            resolve_scheme(Some("myapp://"), &f.env())
                .unwrap_err()
                .message
                .contains("Invalid deep-link scheme")
        );
        let mut env = f.env();
        env.env_scheme = Some("https".into());
        assert_eq!(resolve_scheme(None, &env).unwrap_err().exit_code(), 64);
        f.write("proj/.appduct/config.json", "{not json");
        let e = resolve_scheme(None, &f.env()).unwrap_err();
        assert_eq!(e.exit_code(), 64);
        assert!(
            e.message.contains("proj/.appduct/config.json"),
            "{}",
            e.message
        );
    }

    #[test]
    fn app_ids_come_from_the_flag_or_the_nearest_project_config_only() {
        let f = Fixture::new();
        f.write(
            "state/config.json",
            r#"{"appId": {"android": "com.state"}}"#,
        );
        let e = resolve_app_id(None, Platform::Android, &f.env()).unwrap_err();
        assert_eq!(e.exit_code(), 64);
        assert!(e.message.contains("--app-id") && e.message.contains("appId.android"));
        assert!(e.hint().unwrap().contains("--android-app-id"));
        f.write(
            "proj/.appduct/config.json",
            r#"{"appId": {"android": "com.example.app", "ios": "com.example.ios"}}"#,
        );
        assert_eq!(
            resolve_app_id(None, Platform::Android, &f.env()).unwrap(),
            "com.example.app"
        );
        assert_eq!(
            resolve_app_id(None, Platform::Ios, &f.env()).unwrap(),
            "com.example.ios"
        );
        assert_eq!(
            resolve_app_id(Some("com.flag"), Platform::Ios, &f.env()).unwrap(),
            "com.flag"
        );
        f.write(
            "proj/.appduct/config.json",
            r#"{"appId": {"android": "-bad"}}"#,
        );
        assert_eq!(
            resolve_app_id(None, Platform::Android, &f.env())
                .unwrap_err()
                .exit_code(),
            64
        );
    }
}
