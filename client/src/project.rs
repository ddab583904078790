//! Client side: the project a link is for (§L5, §M13), shared by the CLI and the MCP
//! bridge so both resolve the same scheme and app ids from the same files.
//!
//! - Scheme (§L5.1): the flag, `APPDUCT_SCHEME`, the nearest project `.appduct/config.json`
//!   walking up from the start directory, the state dir's `config.json`, then the static probes
//!   of §L5.3 in the start directory only. The start directory is the CLI's current directory
//!   or the bridge's project directory D (§M13; finding D is the bridge's business).
//! - App id (§L5.2): the flag, else the nearest project config's `appId.<platform>`.
//! - Static probes (§L5.3): nothing is executed (`app.config.js` / `.ts` are never run); each
//!   probe reads one kind of file as text. The parsers are deliberately small and tolerant: a
//!   file they cannot read yields no scheme rather than an error, and disagreement between
//!   native probes is reported, never guessed.
//!
//! Failures are [`ProjectError`]s: every one is an argument error (CLI exit 64, bridge
//! `invalid_request`) whose message both frontends show as is.

use std::fmt;
use std::path::{Path, PathBuf};

use appduct_protocol::control::Transport;
use appduct_protocol::link::{SchemeError, validate_scheme};
use serde_json::{Value, json};

/// The variable of scheme tier 2 (§L2.2).
pub const SCHEME_ENV: &str = "APPDUCT_SCHEME";
/// A project's client-side settings live in `<project>/.appduct/config.json` (§L5.4).
pub const PROJECT_DIR: &str = ".appduct";
pub const CONFIG_FILE: &str = "config.json";
/// The app-id rule of §L5.2, as shown in messages.
pub const APP_ID_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$";

/// `^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$` (§L5.2): no value can be read as an option or break
/// out of a shell word.
pub fn is_valid_app_id(s: &str) -> bool {
    let mut bytes = s.bytes();
    s.len() <= 255
        && bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// What resolution looks at. Frontends build it from their process (or from D); tests give
/// their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveEnv {
    /// Where the walk-up and the probes start: the CLI's current directory, the bridge's D.
    pub dir: PathBuf,
    /// The home directory; its `.appduct` is a state dir, never a project.
    pub home: Option<PathBuf>,
    /// The active state directory: skipped in the walk, and its `config.json` is tier 4.
    pub state_dir: Option<PathBuf>,
    /// `APPDUCT_SCHEME` (an empty value counts as unset).
    pub env_scheme: Option<String>,
}

impl ResolveEnv {
    /// `dir` with this process's home directory and `APPDUCT_SCHEME`.
    pub fn from_process(dir: PathBuf, state_dir: Option<PathBuf>) -> Self {
        Self {
            dir,
            home: std::env::home_dir(),
            state_dir,
            env_scheme: std::env::var(SCHEME_ENV).ok(),
        }
    }

    /// `<d>/.appduct/config.json` for `dir` and each ancestor that has one, nearest first,
    /// skipping `~/.appduct` and the active state dir (§L5.1 step 3).
    pub fn project_configs(&self) -> Vec<PathBuf> {
        let reserved: Vec<PathBuf> = [
            self.state_dir.clone(),
            self.home.as_ref().map(|h| h.join(PROJECT_DIR)),
        ]
        .into_iter()
        .flatten()
        .collect();
        self.dir
            .ancestors()
            .map(|d| d.join(PROJECT_DIR))
            .filter(|dot| !reserved.iter().any(|r| same_path(r, dot)))
            .map(|dot| dot.join(CONFIG_FILE))
            .filter(|config| config.is_file())
            .collect()
    }

    /// The nearest project record (§M13 maps each client root to it), canonical where
    /// possible so two spellings of one file compare equal.
    pub fn nearest_project_config(&self) -> Option<PathBuf> {
        let nearest = self.project_configs().into_iter().next()?;
        Some(std::fs::canonicalize(&nearest).unwrap_or(nearest))
    }

    fn state_config(&self) -> Option<PathBuf> {
        self.state_dir.as_ref().map(|d| d.join(CONFIG_FILE))
    }
}

fn same_path(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Which app id is wanted: Android application id or iOS bundle id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Android,
    Ios,
}

impl Platform {
    /// The key under `appId` in the project config.
    pub fn key(self) -> &'static str {
        match self {
            Platform::Android => "android",
            Platform::Ios => "ios",
        }
    }

    /// The `appduct init` flag that records it.
    pub fn init_flag(self) -> &'static str {
        match self {
            Platform::Android => "--android-app-id",
            Platform::Ios => "--ios-app-id",
        }
    }
}

/// What kind of app a link is for (issue #23): `appduct sessions link --for`, the `for`
/// argument of `appduct_connect`, and the `platform` key `appduct init` records in the project
/// config. It picks the link's transport; this is the one place that mapping lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AppKind {
    /// A JavaScript-only React Native app (`@appduct/sdk/react-native`, Expo Go included):
    /// sealed links, which it can use without native code.
    ReactNative,
    /// A web page: loopback web links.
    Web,
    /// An app with a pinning native module (any appduct v2 SDK): native links.
    Native,
}

impl AppKind {
    pub const ALL: [AppKind; 3] = [AppKind::ReactNative, AppKind::Web, AppKind::Native];
    /// The project config key `appduct init` writes.
    pub const CONFIG_KEY: &'static str = "platform";

    pub fn as_str(self) -> &'static str {
        match self {
            AppKind::ReactNative => "react-native",
            AppKind::Web => "web",
            AppKind::Native => "native",
        }
    }

    /// `react-native`, `web` or `native`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The transport of links for this kind of app.
    pub fn transport(self) -> Transport {
        match self {
            AppKind::ReactNative => Transport::Sealed,
            AppKind::Web => Transport::Web,
            AppKind::Native => Transport::Native,
        }
    }
}

impl fmt::Display for AppKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `platform` of the nearest project config that has one. A value that is not an
/// [`AppKind`] is an error naming the file, like a bad `scheme`.
pub fn project_app_kind(env: &ResolveEnv) -> Result<Option<AppKind>, ProjectError> {
    for path in env.project_configs() {
        if let Some(value) = string_key(&read_json(&path)?, "/platform", &path)? {
            return AppKind::parse(&value)
                .map(Some)
                .ok_or(ProjectError::InvalidPlatform { value, path });
        }
    }
    Ok(None)
}

/// The kind a link is for when the caller names none: the project's `platform`, else
/// `native` (the transport of every appduct v2 SDK).
pub fn default_app_kind(env: &ResolveEnv) -> Result<AppKind, ProjectError> {
    Ok(project_app_kind(env)?.unwrap_or(AppKind::Native))
}

/// What `appduct init` records when not told: `react-native` when the `package.json` in `dir`
/// depends on `react-native` or `expo` (any dependency list); nothing otherwise, since a native
/// app and a web page cannot be told apart from files reliably.
pub fn detect_app_kind(dir: &Path) -> Option<AppKind> {
    let text = std::fs::read_to_string(dir.join("package.json")).ok()?;
    let json: Value = serde_json::from_str(&text).ok()?;
    let lists = [
        "dependencies",
        "devDependencies",
        "peerDependencies",
        "optionalDependencies",
    ];
    let depends = |name: &str| {
        lists
            .iter()
            .any(|list| json.get(*list).and_then(|deps| deps.get(name)).is_some())
    };
    (depends("react-native") || depends("expo")).then_some(AppKind::ReactNative)
}

/// Where a resolved scheme came from (`schemeSource` of `appduct_status`, §M8.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemeSource {
    Flag,
    Env,
    ProjectConfig,
    StateConfig,
    Probe(ProbeSource),
}

impl SchemeSource {
    pub fn as_str(self) -> &'static str {
        match self {
            SchemeSource::Flag => "flag",
            SchemeSource::Env => "env",
            SchemeSource::ProjectConfig => "project-config",
            SchemeSource::StateConfig => "state-config",
            SchemeSource::Probe(p) => p.as_str(),
        }
    }
}

/// A scheme that passed the scheme rule, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedScheme {
    pub scheme: String,
    pub source: SchemeSource,
    /// The file it was read from (none for the flag and the environment).
    pub origin: Option<PathBuf>,
}

/// Why a scheme or app id could not be resolved. Every variant is an argument error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectError {
    #[error("cannot read {}: {message}", path.display())]
    Unreadable { path: PathBuf, message: String },
    #[error("{} is not valid JSON: {message}", path.display())]
    InvalidJson { path: PathBuf, message: String },
    #[error("{key} in {} must be a string", path.display())]
    NotAString { key: String, path: PathBuf },
    #[error("{error} (from {origin})")]
    InvalidScheme {
        scheme: String,
        origin: String,
        error: SchemeError,
    },
    #[error(
        "No deep-link scheme found. Tried --scheme, {SCHEME_ENV}, .appduct/config.json in {dir} \
         and its parents (run \"appduct init\"), {state_config}, and the project files in {dir} \
         ({PROBED_FILES}).",
        dir = dir.display(),
        state_config = state_config.as_ref().map_or_else(|| "<state-dir>/config.json".into(), |p| p.display().to_string())
    )]
    NoScheme {
        dir: PathBuf,
        state_config: Option<PathBuf>,
    },
    #[error("{0}; pass --scheme to choose one")]
    ProbeConflict(Conflict),
    #[error("the app id \"{id}\" from {origin} must match {APP_ID_PATTERN}")]
    InvalidAppId { id: String, origin: String },
    #[error(
        "No app id for {key}: pass --app-id, or set appId.{key} in .appduct/config.json",
        key = platform.key()
    )]
    NoAppId { platform: Platform },
    #[error(
        "platform \"{value}\" in {} must be \"react-native\", \"web\" or \"native\"",
        path.display()
    )]
    InvalidPlatform { value: String, path: PathBuf },
}

impl ProjectError {
    /// Machine-readable `details` (without a hint).
    pub fn details(&self) -> Option<Value> {
        match self {
            ProjectError::Unreadable { path, .. }
            | ProjectError::InvalidJson { path, .. }
            | ProjectError::NotAString { path, .. } => {
                Some(json!({"path": path.display().to_string()}))
            }
            ProjectError::InvalidScheme { scheme, origin, .. } => {
                Some(json!({"scheme": scheme, "source": origin}))
            }
            ProjectError::NoScheme { dir, .. } => {
                Some(json!({"projectDir": dir.display().to_string()}))
            }
            ProjectError::ProbeConflict(conflict) => Some(json!({
                "candidates": conflict.0.iter().map(|f| json!({
                    "scheme": f.scheme,
                    "source": f.source.as_str(),
                    "origin": f.origin.display().to_string(),
                })).collect::<Vec<_>>(),
            })),
            ProjectError::InvalidAppId { id, origin } => {
                Some(json!({"appId": id, "source": origin}))
            }
            ProjectError::NoAppId { platform } => Some(json!({"platform": platform.key()})),
            ProjectError::InvalidPlatform { value, path } => {
                Some(json!({"platform": value, "path": path.display().to_string()}))
            }
        }
    }

    /// What to do about it, when there is one obvious step.
    pub fn hint(&self) -> Option<String> {
        match self {
            ProjectError::NoScheme { .. } => Some(
                "Pass --scheme <scheme>, or run \"appduct init --scheme <scheme>\" in the project \
                 directory."
                    .into(),
            ),
            ProjectError::NoAppId { platform } => Some(format!(
                "Run \"appduct init {} <id>\" in the project directory.",
                platform.init_flag()
            )),
            _ => None,
        }
    }
}

/// A config file's JSON; unreadable or not valid JSON is an error naming the file.
fn read_json(path: &Path) -> Result<Value, ProjectError> {
    let text = std::fs::read_to_string(path).map_err(|e| ProjectError::Unreadable {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| ProjectError::InvalidJson {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// A string key of a config file; present with another type is an error.
fn string_key(json: &Value, pointer: &str, path: &Path) -> Result<Option<String>, ProjectError> {
    match json.pointer(pointer) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ProjectError::NotAString {
            key: pointer.trim_start_matches('/').replace('/', "."),
            path: path.to_path_buf(),
        }),
    }
}

fn checked_scheme(
    scheme: String,
    source: SchemeSource,
    origin: Option<PathBuf>,
    origin_text: String,
) -> Result<ResolvedScheme, ProjectError> {
    match validate_scheme(&scheme) {
        Ok(()) => Ok(ResolvedScheme {
            scheme,
            source,
            origin,
        }),
        Err(error) => Err(ProjectError::InvalidScheme {
            scheme,
            origin: origin_text,
            error,
        }),
    }
}

/// The deep-link scheme (§L5.1, §M13); first match wins and every candidate is checked
/// against the scheme rule. `flag` is `--scheme` (of `sessions link` or `appduct mcp`).
pub fn resolve_scheme(
    flag: Option<&str>,
    env: &ResolveEnv,
) -> Result<ResolvedScheme, ProjectError> {
    if let Some(flag) = flag {
        return checked_scheme(flag.into(), SchemeSource::Flag, None, "--scheme".into());
    }
    if let Some(s) = env.env_scheme.as_deref().filter(|s| !s.is_empty()) {
        return checked_scheme(s.into(), SchemeSource::Env, None, SCHEME_ENV.into());
    }
    for path in env.project_configs() {
        if let Some(s) = string_key(&read_json(&path)?, "/scheme", &path)? {
            let shown = path.display().to_string();
            return checked_scheme(s, SchemeSource::ProjectConfig, Some(path), shown);
        }
    }
    if let Some(path) = env.state_config().filter(|p| p.is_file())
        && let Some(s) = string_key(&read_json(&path)?, "/scheme", &path)?
    {
        let shown = path.display().to_string();
        return checked_scheme(s, SchemeSource::StateConfig, Some(path), shown);
    }
    match discover_scheme(&env.dir) {
        Ok(Some(found)) => {
            let shown = format!("{}, {}", found.source, found.origin.display());
            checked_scheme(
                found.scheme,
                SchemeSource::Probe(found.source),
                Some(found.origin),
                shown,
            )
        }
        Ok(None) => Err(ProjectError::NoScheme {
            dir: env.dir.clone(),
            state_config: env.state_config(),
        }),
        Err(conflict) => Err(ProjectError::ProbeConflict(conflict)),
    }
}

/// `appId.<platform>` of the nearest project config that has it, and that file.
fn nearest_app_id(
    platform: Platform,
    env: &ResolveEnv,
) -> Result<Option<(String, PathBuf)>, ProjectError> {
    let pointer = format!("/appId/{}", platform.key());
    for path in env.project_configs() {
        if let Some(id) = string_key(&read_json(&path)?, &pointer, &path)? {
            return Ok(Some((id, path)));
        }
    }
    Ok(None)
}

/// `appId.<platform>` of the nearest project config that has it, unchecked (what
/// `appduct_status` reports). The state-dir config is never used (§L5.2).
pub fn project_app_id(
    platform: Platform,
    env: &ResolveEnv,
) -> Result<Option<String>, ProjectError> {
    Ok(nearest_app_id(platform, env)?.map(|(id, _)| id))
}

/// The Android application id or iOS bundle id (§L5.2): `flag` (`--app-id`), else the
/// nearest project config's `appId.<platform>`; either must match [`APP_ID_PATTERN`].
pub fn resolve_app_id(
    flag: Option<&str>,
    platform: Platform,
    env: &ResolveEnv,
) -> Result<String, ProjectError> {
    let (id, origin) = match flag {
        Some(flag) => (flag.to_owned(), "--app-id".to_owned()),
        None => match nearest_app_id(platform, env)? {
            Some((id, path)) => (id, path.display().to_string()),
            None => return Err(ProjectError::NoAppId { platform }),
        },
    };
    if is_valid_app_id(&id) {
        Ok(id)
    } else {
        Err(ProjectError::InvalidAppId { id, origin })
    }
}

/// Where a discovered scheme came from (`init`'s `source`, §L10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProbeSource {
    AppJson,
    AndroidGradle,
    AndroidManifest,
    IosInfoPlist,
    IosProjectYml,
}

impl ProbeSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeSource::AppJson => "app.json",
            ProbeSource::AndroidGradle => "android-gradle",
            ProbeSource::AndroidManifest => "android-manifest",
            ProbeSource::IosInfoPlist => "ios-info-plist",
            ProbeSource::IosProjectYml => "ios-project-yml",
        }
    }
}

impl fmt::Display for ProbeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One scheme found by a probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub scheme: String,
    pub source: ProbeSource,
    /// The file the probe read.
    pub origin: PathBuf,
}

/// The native probes found more than one distinct scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict(pub Vec<Found>);

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the project files name different deep-link schemes: ")?;
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|found| {
                format!(
                    "\"{}\" ({}, {})",
                    found.scheme,
                    found.source,
                    found.origin.display()
                )
            })
            .collect();
        f.write_str(&parts.join(", "))
    }
}

/// The files the probes read, for "every place tried" messages.
pub const PROBED_FILES: &str = "app.json, android/app/build.gradle(.kts), \
android/app/src/main/AndroidManifest.xml, Info.plist files, project.yml or ios/project.yml";

/// Runs the probes of §L5.3 in `dir` (no walk-up). `app.json` wins when it yields a scheme;
/// otherwise the native probes must agree, and the first source in table order is reported.
pub fn discover_scheme(dir: &Path) -> Result<Option<Found>, Conflict> {
    let app_json = dir.join("app.json");
    if let Some(scheme) = read(&app_json).as_deref().and_then(scheme_from_app_json) {
        return Ok(Some(Found {
            scheme,
            source: ProbeSource::AppJson,
            origin: app_json,
        }));
    }
    let mut found = Vec::new();
    let mut collect = |source, origin: PathBuf, schemes: Vec<String>| {
        for scheme in schemes {
            found.push(Found {
                scheme,
                source,
                origin: origin.clone(),
            });
        }
    };
    for name in ["build.gradle", "build.gradle.kts"] {
        let path = dir.join("android/app").join(name);
        if let Some(text) = read(&path) {
            collect(ProbeSource::AndroidGradle, path, schemes_from_gradle(&text));
        }
    }
    let manifest = dir.join("android/app/src/main/AndroidManifest.xml");
    if let Some(text) = read(&manifest) {
        collect(
            ProbeSource::AndroidManifest,
            manifest,
            schemes_from_manifest(&text),
        );
    }
    for plist in info_plists(dir) {
        if let Some(text) = read(&plist) {
            collect(
                ProbeSource::IosInfoPlist,
                plist,
                schemes_from_info_plist(&text),
            );
        }
    }
    for rel in ["project.yml", "ios/project.yml"] {
        let path = dir.join(rel);
        if let Some(text) = read(&path) {
            collect(
                ProbeSource::IosProjectYml,
                path,
                schemes_from_project_yml(&text),
            );
        }
    }
    let mut distinct: Vec<&str> = found.iter().map(|f| f.scheme.as_str()).collect();
    distinct.sort_unstable();
    distinct.dedup();
    match distinct.len() {
        0 => Ok(None),
        1 => Ok(found.into_iter().next()),
        _ => Err(Conflict(found)),
    }
}

/// A regular file's text; `None` when missing, not a regular file or not UTF-8.
fn read(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// `Info.plist` files at most 2 directories below `dir`, skipping `Pods`, `build`,
/// `node_modules` and `DerivedData`; symlinked directories are not followed. Sorted.
fn info_plists(dir: &Path) -> Vec<PathBuf> {
    const SKIPPED: [&str; 4] = ["Pods", "build", "node_modules", "DerivedData"];
    let mut out = Vec::new();
    let mut level = vec![dir.to_path_buf()];
    for depth in 0..=2 {
        let mut next = Vec::new();
        for d in &level {
            let plist = d.join("Info.plist");
            if plist.is_file() {
                out.push(plist);
            }
            if depth == 2 {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(d) else {
                continue;
            };
            let mut subdirs: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter(|e| !SKIPPED.iter().any(|s| e.file_name() == *s))
                .map(|e| e.path())
                .collect();
            subdirs.sort();
            next.extend(subdirs);
        }
        level = next;
    }
    out
}

/// `expo.scheme` if a string, or its first element if an array of strings.
pub fn scheme_from_app_json(text: &str) -> Option<String> {
    let value: Value = serde_json::from_str(text).ok()?;
    match value.get("expo")?.get("scheme")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) if items.iter().all(Value::is_string) => {
            items.first().and_then(Value::as_str).map(str::to_owned)
        }
        _ => None,
    }
}

/// The string value of the manifest placeholder `appductScheme` in a Gradle build file
/// (Groovy `appductScheme: "x"`, Kotlin `"appductScheme" to "x"` or
/// `manifestPlaceholders["appductScheme"] = "x"`).
pub fn schemes_from_gradle(text: &str) -> Vec<String> {
    const KEY: &str = "appductScheme";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(KEY) {
        let after = &rest[at + KEY.len()..];
        rest = after;
        let s = after.strip_prefix(['"', '\'']).unwrap_or(after);
        let s = s.trim_start();
        let s = s.strip_prefix(']').unwrap_or(s).trim_start();
        let s = if let Some(t) = s.strip_prefix("to") {
            t
        } else if let Some(t) = s.strip_prefix([':', '=', ',']) {
            t
        } else {
            continue;
        };
        if let Some(value) = quoted(s.trim_start()) {
            push_unique(&mut out, value);
        }
    }
    out
}

/// A leading `"…"` or `'…'` literal.
fn quoted(s: &str) -> Option<String> {
    let quote = s.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let body = &s[1..];
    let end = body.find(quote)?;
    Some(body[..end].to_owned())
}

fn push_unique(out: &mut Vec<String>, value: String) {
    if !out.contains(&value) {
        out.push(value);
    }
}

/// Removes `<!-- … -->` comments.
fn strip_xml_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<!--") {
        out.push_str(&rest[..start]);
        match rest[start..].find("-->") {
            Some(end) => rest = &rest[start + end + 3..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// The value of attribute `name` in the tag text `tag`.
fn xml_attr(tag: &str, name: &str) -> Option<String> {
    let mut rest = tag;
    while let Some(at) = rest.find(name) {
        let before_ok = rest[..at]
            .chars()
            .next_back()
            .is_none_or(char::is_whitespace);
        let after = rest[at + name.len()..].trim_start();
        rest = &rest[at + name.len()..];
        if !before_ok {
            continue;
        }
        if let Some(value) = after.strip_prefix('=') {
            return quoted(value.trim_start());
        }
    }
    None
}

/// The tags named `name` (`<name …>` or `<name …/>`) in `text`, as their inner text.
fn xml_tags<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let open = format!("<{name}");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(&open) {
        let after = &rest[at + open.len()..];
        let boundary = after
            .chars()
            .next()
            .is_some_and(|c| c.is_whitespace() || c == '>' || c == '/');
        let end = after.find('>').unwrap_or(after.len());
        if boundary {
            out.push(&after[..end]);
        }
        rest = &after[end..];
    }
    out
}

/// `android:scheme` of `<data>` in each `<intent-filter>` whose action is
/// `android.intent.action.VIEW`, ignoring `http`, `https` and `${…}` placeholders.
pub fn schemes_from_manifest(text: &str) -> Vec<String> {
    let text = strip_xml_comments(text);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("<intent-filter") {
        let block_start = &rest[start..];
        let end = block_start
            .find("</intent-filter>")
            .unwrap_or(block_start.len());
        let block = &block_start[..end];
        rest = &block_start[end..];
        let is_view = xml_tags(block, "action").iter().any(|tag| {
            xml_attr(tag, "android:name").as_deref() == Some("android.intent.action.VIEW")
        });
        if !is_view {
            continue;
        }
        for tag in xml_tags(block, "data") {
            if let Some(scheme) = xml_attr(tag, "android:scheme")
                && !scheme.eq_ignore_ascii_case("http")
                && !scheme.eq_ignore_ascii_case("https")
                && !scheme.contains("${")
            {
                push_unique(&mut out, scheme);
            }
        }
    }
    out
}

/// The `<string>` values of the `<array>` after each `<key>CFBundleURLSchemes</key>` (these
/// only occur inside `CFBundleURLTypes`), ignoring values containing `$(`.
pub fn schemes_from_info_plist(text: &str) -> Vec<String> {
    const KEY: &str = "<key>CFBundleURLSchemes</key>";
    let text = strip_xml_comments(text);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(KEY) {
        rest = rest[at + KEY.len()..].trim_start();
        let Some(array) = rest.strip_prefix("<array>") else {
            continue;
        };
        let end = array.find("</array>").unwrap_or(array.len());
        let mut items = &array[..end];
        while let Some(s) = items.find("<string>") {
            let value_start = &items[s + "<string>".len()..];
            let Some(e) = value_start.find("</string>") else {
                break;
            };
            let value = value_start[..e].trim();
            if !value.is_empty() && !value.contains("$(") {
                push_unique(&mut out, value.to_owned());
            }
            items = &value_start[e..];
        }
    }
    out
}

/// `CFBundleURLSchemes` entries of an XcodeGen `project.yml`: a flow list
/// (`CFBundleURLSchemes: [a, b]`) or a block list of `- a` lines indented below the key.
pub fn schemes_from_project_yml(text: &str) -> Vec<String> {
    const KEY: &str = "CFBundleURLSchemes:";
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let Some(after) = trimmed
            .strip_prefix(KEY)
            .or_else(|| trimmed.strip_prefix("- ").and_then(|t| t.strip_prefix(KEY)))
        else {
            continue;
        };
        let indent = line.len() - trimmed.len();
        let after = strip_yaml_comment(after).trim();
        if let Some(flow) = after.strip_prefix('[') {
            let flow = flow.split(']').next().unwrap_or_default();
            for item in flow.split(',') {
                push_yaml_scalar(&mut out, item);
            }
            continue;
        }
        if !after.is_empty() {
            continue;
        }
        for next in &lines[i + 1..] {
            let t = next.trim_start();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let next_indent = next.len() - t.len();
            match t.strip_prefix('-') {
                Some(item) if next_indent >= indent => {
                    push_yaml_scalar(&mut out, strip_yaml_comment(item));
                }
                _ => break,
            }
        }
    }
    out
}

fn strip_yaml_comment(s: &str) -> &str {
    match s.find(" #") {
        Some(at) => &s[..at],
        None => s,
    }
}

fn push_yaml_scalar(out: &mut Vec<String>, raw: &str) {
    let raw = raw.trim();
    let value = quoted(raw).unwrap_or_else(|| raw.to_owned());
    if !value.is_empty() && !value.contains("$(") {
        push_unique(out, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_json_scheme_string_or_first_of_array() {
        assert_eq!(
            scheme_from_app_json(r#"{"expo":{"scheme":"shop"}}"#).as_deref(),
            Some("shop")
        );
        assert_eq!(
            scheme_from_app_json(r#"{"expo":{"scheme":["a","b"]}}"#).as_deref(),
            Some("a")
        );
        assert_eq!(scheme_from_app_json(r#"{"expo":{"scheme":["a",1]}}"#), None);
        assert_eq!(scheme_from_app_json(r#"{"expo":{"name":"x"}}"#), None);
        assert_eq!(scheme_from_app_json("not json"), None);
    }

    #[test]
    fn gradle_placeholder_in_groovy_and_kotlin() {
        let groovy = r#"
            defaultConfig {
                manifestPlaceholders = [appductScheme: "shop", other: "x"]
            }"#;
        assert_eq!(schemes_from_gradle(groovy), ["shop"]);
        assert_eq!(
            schemes_from_gradle(r#"manifestPlaceholders["appductScheme"] = "kts1""#),
            ["kts1"]
        );
        assert_eq!(
            schemes_from_gradle(r#"manifestPlaceholders += mapOf("appductScheme" to 'kts2')"#),
            ["kts2"]
        );
        // A mention without a string value yields nothing.
        assert!(schemes_from_gradle("// set appductScheme in gradle.properties").is_empty());
        assert!(schemes_from_gradle("appductScheme: someVariable").is_empty());
    }

    #[test]
    fn manifest_view_intent_filters_only() {
        let xml = r#"
<manifest xmlns:android="http://schemas.android.com/apk/res/android">
  <application>
    <!-- <intent-filter><action android:name="android.intent.action.VIEW"/><data android:scheme="commented"/></intent-filter> -->
    <activity android:name=".MainActivity">
      <intent-filter>
        <action android:name="android.intent.action.MAIN" />
        <data android:scheme="notview" />
      </intent-filter>
      <intent-filter>
        <action android:name="android.intent.action.VIEW" />
        <category android:name="android.intent.category.BROWSABLE" />
        <data android:scheme="https" android:host="example.com" />
        <data android:scheme="${appductScheme}" />
        <data android:scheme="shop" />
      </intent-filter>
    </activity>
  </application>
</manifest>"#;
        assert_eq!(schemes_from_manifest(xml), ["shop"]);
        assert!(schemes_from_manifest("<manifest/>").is_empty());
    }

    #[test]
    fn info_plist_url_schemes() {
        let plist = r#"<?xml version="1.0" encoding="UTF-8"?>
<plist version="1.0"><dict>
  <key>CFBundleURLTypes</key>
  <array>
    <dict>
      <key>CFBundleURLSchemes</key>
      <array>
        <string>shop</string>
        <string>$(PRODUCT_BUNDLE_IDENTIFIER)</string>
      </array>
    </dict>
  </array>
</dict></plist>"#;
        assert_eq!(schemes_from_info_plist(plist), ["shop"]);
        assert!(schemes_from_info_plist("<plist><dict/></plist>").is_empty());
    }

    #[test]
    fn project_yml_block_and_flow_lists() {
        let block = "
targets:
  App:
    info:
      properties:
        CFBundleURLTypes:
          - CFBundleURLSchemes:
              - shop # main
              - \"$(SCHEME)\"
            CFBundleURLName: x
";
        assert_eq!(schemes_from_project_yml(block), ["shop"]);
        let flow = "        CFBundleURLSchemes: [shop, 'other']\n";
        assert_eq!(schemes_from_project_yml(flow), ["shop", "other"]);
        assert!(schemes_from_project_yml("name: App\n").is_empty());
    }

    fn write(dir: &Path, rel: &str, text: &str) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn app_json_wins_over_native_probes() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "app.json", r#"{"expo":{"scheme":"expo-shop"}}"#);
        write(
            tmp.path(),
            "android/app/build.gradle",
            r#"manifestPlaceholders = [appductScheme: "native"]"#,
        );
        let found = discover_scheme(tmp.path()).unwrap().unwrap();
        assert_eq!(found.scheme, "expo-shop");
        assert_eq!(found.source, ProbeSource::AppJson);
        assert_eq!(found.origin, tmp.path().join("app.json"));
    }

    #[test]
    fn agreeing_native_probes_report_the_first_source() {
        let tmp = tempfile::tempdir().unwrap();
        write(
            tmp.path(),
            "ios/App/Info.plist",
            "<key>CFBundleURLSchemes</key><array><string>shop</string></array>",
        );
        write(
            tmp.path(),
            "android/app/build.gradle.kts",
            r#"manifestPlaceholders["appductScheme"] = "shop""#,
        );
        let found = discover_scheme(tmp.path()).unwrap().unwrap();
        assert_eq!(found.source, ProbeSource::AndroidGradle);
        assert_eq!(found.scheme, "shop");
    }

    #[test]
    fn disagreeing_native_probes_are_a_conflict() {
        let tmp = tempfile::tempdir().unwrap();
        write(
            tmp.path(),
            "ios/App/Info.plist",
            "<key>CFBundleURLSchemes</key><array><string>one</string></array>",
        );
        write(tmp.path(), "project.yml", "CFBundleURLSchemes: [two]\n");
        let conflict = discover_scheme(tmp.path()).unwrap_err();
        let text = conflict.to_string();
        assert!(text.contains("\"one\" (ios-info-plist"), "{text}");
        assert!(text.contains("\"two\" (ios-project-yml"), "{text}");
    }

    #[test]
    fn plists_deeper_than_two_levels_or_in_skipped_dirs_are_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let plist = "<key>CFBundleURLSchemes</key><array><string>deep</string></array>";
        write(tmp.path(), "a/b/c/Info.plist", plist);
        write(tmp.path(), "ios/Pods/Info.plist", plist);
        write(tmp.path(), "node_modules/x/Info.plist", plist);
        assert_eq!(discover_scheme(tmp.path()).unwrap(), None);
        write(tmp.path(), "a/b/Info.plist", plist);
        assert_eq!(
            discover_scheme(tmp.path()).unwrap().map(|f| f.scheme),
            Some("deep".to_owned())
        );
    }

    // --- resolution (§L5.1, §L5.2) ---

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
                dir: self.tmp.path().join("proj/app/src"),
                home: Some(self.tmp.path().join("home")),
                state_dir: Some(self.tmp.path().join("state")),
                env_scheme: None,
            }
        }

        fn write(&self, rel: &str, text: &str) {
            write(self.tmp.path(), rel, text);
        }
    }

    fn scheme_of(flag: Option<&str>, env: &ResolveEnv) -> String {
        resolve_scheme(flag, env).unwrap().scheme
    }

    #[test]
    fn app_id_shape() {
        assert!(is_valid_app_id("com.example.app"));
        assert!(is_valid_app_id("A"));
        assert!(is_valid_app_id(&"a".repeat(255)));
        assert!(!is_valid_app_id(&"a".repeat(256)));
        assert!(!is_valid_app_id(""));
        assert!(!is_valid_app_id(".com"));
        assert!(!is_valid_app_id("-p"));
        assert!(!is_valid_app_id("com;rm"));
    }

    #[test]
    fn flag_beats_environment_beats_project_config() {
        let f = Fixture::new();
        f.write("proj/.appduct/config.json", r#"{"scheme": "fromproject"}"#);
        let mut env = f.env();
        env.env_scheme = Some("fromenv".into());
        let flag = resolve_scheme(Some("flag"), &env).unwrap();
        assert_eq!(
            (flag.scheme.as_str(), flag.source),
            ("flag", SchemeSource::Flag)
        );
        assert_eq!(
            resolve_scheme(None, &env).unwrap().source,
            SchemeSource::Env
        );
        env.env_scheme = Some(String::new());
        let project = resolve_scheme(None, &env).unwrap();
        assert_eq!(project.scheme, "fromproject");
        assert_eq!(project.source.as_str(), "project-config");
        assert_eq!(
            project.origin,
            Some(f.tmp.path().join("proj/.appduct/config.json"))
        );
    }

    #[test]
    fn the_walk_skips_files_without_the_key_and_stops_at_the_nearest_with_it() {
        let f = Fixture::new();
        f.write(
            "proj/app/.appduct/config.json",
            r#"{"appId": {"ios": "com.a"}}"#,
        );
        f.write("proj/.appduct/config.json", r#"{"scheme": "outer"}"#);
        assert_eq!(scheme_of(None, &f.env()), "outer");
        f.write(
            "proj/app/src/.appduct/config.json",
            r#"{"scheme": "inner"}"#,
        );
        assert_eq!(scheme_of(None, &f.env()), "inner");
        assert_eq!(
            f.env().nearest_project_config(),
            Some(
                f.tmp
                    .path()
                    .join("proj/app/src/.appduct/config.json")
                    .canonicalize()
                    .unwrap()
            )
        );
    }

    #[test]
    fn the_state_dir_and_home_appduct_are_skipped_in_the_walk() {
        let f = Fixture::new();
        // dir inside home: <home>/.appduct is that user's state dir and never a project.
        f.write("home/.appduct/config.json", r#"{"scheme": "homecfg"}"#);
        let mut env = f.env();
        env.dir = f.tmp.path().join("home/work");
        std::fs::create_dir_all(&env.dir).unwrap();
        assert!(matches!(
            resolve_scheme(None, &env),
            Err(ProjectError::NoScheme { .. })
        ));
        assert_eq!(env.nearest_project_config(), None);
        // The state dir's config is tier 4.
        f.write("state/config.json", r#"{"scheme": "statecfg"}"#);
        let state = resolve_scheme(None, &env).unwrap();
        assert_eq!(
            (state.scheme.as_str(), state.source),
            ("statecfg", SchemeSource::StateConfig)
        );
        // A state dir that is itself a `.appduct` below the start directory is skipped too.
        f.write("proj/.appduct/config.json", r#"{"scheme": "statedir"}"#);
        let mut env = f.env();
        env.state_dir = Some(f.tmp.path().join("proj/.appduct"));
        assert!(env.project_configs().is_empty());
    }

    #[test]
    fn probes_are_the_last_tier_and_nothing_found_lists_every_place() {
        let f = Fixture::new();
        let e = resolve_scheme(None, &f.env()).unwrap_err();
        let message = e.to_string();
        for place in [
            "--scheme",
            SCHEME_ENV,
            ".appduct/config.json",
            "state/config.json",
            "app.json",
            "AndroidManifest.xml",
            "Info.plist",
            "appduct init",
        ] {
            assert!(message.contains(place), "{place}: {message}");
        }
        assert!(e.hint().unwrap().contains("--scheme"));
        assert!(
            e.details().unwrap()["projectDir"]
                .as_str()
                .unwrap()
                .ends_with("src")
        );
        f.write(
            "proj/app/src/app.json",
            r#"{"expo": {"scheme": "expo-app"}}"#,
        );
        let probed = resolve_scheme(None, &f.env()).unwrap();
        assert_eq!(probed.scheme, "expo-app");
        assert_eq!(probed.source.as_str(), "app.json");
    }

    #[test]
    fn conflicting_probes_are_an_error_listing_each_candidate() {
        let f = Fixture::new();
        f.write("proj/app/src/project.yml", "CFBundleURLSchemes: [one]\n");
        f.write(
            "proj/app/src/android/app/build.gradle",
            r#"manifestPlaceholders = [appductScheme: "two"]"#,
        );
        let e = resolve_scheme(None, &f.env()).unwrap_err();
        assert!(matches!(e, ProjectError::ProbeConflict(_)));
        assert!(e.to_string().contains("pass --scheme"), "{e}");
        let candidates = &e.details().unwrap()["candidates"];
        assert_eq!(candidates[0]["scheme"], "two");
        assert_eq!(candidates[1]["source"], "ios-project-yml");
    }

    #[test]
    fn invalid_schemes_and_invalid_json_are_errors_naming_their_origin() {
        let f = Fixture::new();
        let e = resolve_scheme(Some("myapp://"), &f.env()).unwrap_err();
        assert!(e.to_string().contains("Invalid deep-link scheme"), "{e}");
        assert!(e.to_string().contains("(from --scheme)"), "{e}");
        let mut env = f.env();
        env.env_scheme = Some("https".into());
        assert!(matches!(
            resolve_scheme(None, &env),
            Err(ProjectError::InvalidScheme { .. })
        ));
        f.write("proj/.appduct/config.json", r#"{"scheme": 5}"#);
        let e = resolve_scheme(None, &f.env()).unwrap_err();
        assert!(e.to_string().starts_with("scheme in "), "{e}");
        f.write("proj/.appduct/config.json", "{not json");
        let e = resolve_scheme(None, &f.env()).unwrap_err();
        assert!(matches!(e, ProjectError::InvalidJson { .. }));
        assert!(e.to_string().contains("proj/.appduct/config.json"), "{e}");
        assert!(
            e.details().unwrap()["path"]
                .as_str()
                .unwrap()
                .ends_with("config.json")
        );
    }

    #[test]
    fn app_kinds_map_to_transports_and_default_from_the_project_platform() {
        assert_eq!(AppKind::ReactNative.transport(), Transport::Sealed);
        assert_eq!(AppKind::Web.transport(), Transport::Web);
        assert_eq!(AppKind::Native.transport(), Transport::Native);
        for kind in AppKind::ALL {
            assert_eq!(AppKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(AppKind::parse("ReactNative"), None);

        let f = Fixture::new();
        // No project config: native (the state dir's config is never a project).
        f.write("state/config.json", r#"{"platform": "react-native"}"#);
        assert_eq!(default_app_kind(&f.env()).unwrap(), AppKind::Native);
        f.write("proj/.appduct/config.json", r#"{"scheme": "shop"}"#);
        assert_eq!(default_app_kind(&f.env()).unwrap(), AppKind::Native);
        f.write(
            "proj/.appduct/config.json",
            r#"{"scheme": "shop", "platform": "react-native"}"#,
        );
        assert_eq!(default_app_kind(&f.env()).unwrap(), AppKind::ReactNative);
        // The nearest config that has a platform wins.
        f.write("proj/app/.appduct/config.json", r#"{"platform": "web"}"#);
        assert_eq!(default_app_kind(&f.env()).unwrap(), AppKind::Web);
        f.write("proj/app/.appduct/config.json", r#"{"platform": "ios"}"#);
        let e = default_app_kind(&f.env()).unwrap_err();
        assert!(matches!(e, ProjectError::InvalidPlatform { .. }), "{e}");
        assert!(e.to_string().contains("react-native"), "{e}");
        f.write("proj/app/.appduct/config.json", r#"{"platform": 1}"#);
        assert!(matches!(
            default_app_kind(&f.env()),
            Err(ProjectError::NotAString { .. })
        ));
    }

    #[test]
    fn react_native_is_detected_from_package_json_dependencies() {
        let f = Fixture::new();
        let dir = f.tmp.path().join("proj");
        assert_eq!(detect_app_kind(&dir), None);
        for deps in [
            r#"{"dependencies": {"react-native": "0.76.0"}}"#,
            r#"{"dependencies": {"expo": "~52.0.0"}}"#,
            r#"{"devDependencies": {"react-native": "*"}}"#,
        ] {
            f.write("proj/package.json", deps);
            assert_eq!(detect_app_kind(&dir), Some(AppKind::ReactNative), "{deps}");
        }
        for other in [
            r#"{"dependencies": {"react": "19.0.0", "react-dom": "19.0.0"}}"#,
            r#"{"name": "react-native"}"#,
            "not json",
        ] {
            f.write("proj/package.json", other);
            assert_eq!(detect_app_kind(&dir), None, "{other}");
        }
    }

    #[test]
    fn app_ids_come_from_the_flag_or_the_nearest_project_config_only() {
        let f = Fixture::new();
        f.write(
            "state/config.json",
            r#"{"appId": {"android": "com.state"}}"#,
        );
        let e = resolve_app_id(None, Platform::Android, &f.env()).unwrap_err();
        assert_eq!(
            e,
            ProjectError::NoAppId {
                platform: Platform::Android
            }
        );
        assert!(e.to_string().contains("--app-id") && e.to_string().contains("appId.android"));
        assert!(e.hint().unwrap().contains("--android-app-id"));
        assert_eq!(project_app_id(Platform::Android, &f.env()).unwrap(), None);
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
            project_app_id(Platform::Ios, &f.env()).unwrap().as_deref(),
            Some("com.example.ios")
        );
        assert_eq!(
            resolve_app_id(Some("com.flag"), Platform::Ios, &f.env()).unwrap(),
            "com.flag"
        );
        assert!(matches!(
            resolve_app_id(Some("-p"), Platform::Ios, &f.env()),
            Err(ProjectError::InvalidAppId { .. })
        ));
        f.write(
            "proj/.appduct/config.json",
            r#"{"appId": {"android": "-bad"}}"#,
        );
        let e = resolve_app_id(None, Platform::Android, &f.env()).unwrap_err();
        assert!(e.to_string().contains("proj/.appduct/config.json"), "{e}");
    }
}
