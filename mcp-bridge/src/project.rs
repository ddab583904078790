//! Project directory resolution (§M13): the bridge-specific part, finding D from the `cwd`
//! argument, the client's roots, `CLAUDE_PROJECT_DIR` or the server's own directory. Scheme
//! and app ids are then resolved in D by the shared client-side resolver,
//! `appduct_client::project` (§L5.1–§L5.3), exactly as the CLI resolves them in its current
//! directory; its errors become `invalid_request` with the same message.

use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use appduct_client::project::{self as shared, Platform, ProjectError, ResolveEnv, ResolvedScheme};
use rmcp::RoleServer;
use rmcp::model::{ClientResult, ProtocolVersion, ServerRequest};
use rmcp::service::{Peer, PeerRequestOptions, RequestContext};
use serde_json::{Value, json};

use crate::error::ToolFailure;

/// Where the project directory came from (`cwdSource`, §M13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CwdSource {
    Argument,
    ClientRoot,
    ClaudeProjectDir,
    Server,
}

impl CwdSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Argument => "argument",
            Self::ClientRoot => "client-root",
            Self::ClaudeProjectDir => "claude-project-dir",
            Self::Server => "server",
        }
    }

    /// The two sources after which the agent should pass `cwd`.
    pub fn needs_cwd_note(self) -> bool {
        matches!(self, Self::ClaudeProjectDir | Self::Server)
    }
}

/// The resolved project directory D.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectDir {
    pub dir: PathBuf,
    pub source: CwdSource,
    /// The client's roots when they were consulted.
    pub roots: Option<Vec<PathBuf>>,
}

/// Process-wide inputs of resolution (injectable for tests).
#[derive(Debug, Clone, Default)]
pub struct ProjectEnv {
    /// `APPDUCT_SCHEME`.
    pub scheme_env: Option<String>,
    /// `CLAUDE_PROJECT_DIR`.
    pub claude_project_dir: Option<String>,
    /// The bridge process's own working directory.
    pub server_cwd: Option<PathBuf>,
    /// The home directory (its `.appduct` is skipped when walking up).
    pub home: Option<PathBuf>,
    /// `ANDROID_SERIAL`: the Android device when `device` is not given (§L6.4).
    pub android_serial: Option<String>,
    /// Whether booted iOS simulators are auto-detected (macOS only, §M8.1).
    pub detects_simulators: bool,
}

impl ProjectEnv {
    pub fn from_process() -> Self {
        Self {
            scheme_env: std::env::var(shared::SCHEME_ENV).ok(),
            claude_project_dir: std::env::var("CLAUDE_PROJECT_DIR").ok(),
            server_cwd: std::env::current_dir().ok(),
            home: std::env::home_dir(),
            android_serial: std::env::var(appduct_client::delivery::ANDROID_SERIAL_ENV).ok(),
            detects_simulators: cfg!(target_os = "macos"),
        }
    }

    /// The shared resolver's inputs for project directory `dir`.
    pub fn resolve_env(&self, dir: &Path, state_dir: Option<&Path>) -> ResolveEnv {
        ResolveEnv {
            dir: dir.to_path_buf(),
            home: self.home.clone(),
            state_dir: state_dir.map(Path::to_path_buf),
            env_scheme: self.scheme_env.clone(),
        }
    }
}

/// The roots answer cache (§M13): read once, dropped by `notifications/roots/list_changed`;
/// a failed read keeps the last good list. Concurrent resolutions share one `roots/list`, and
/// an answer to a read that a list-changed overtook is used once but not kept as current.
#[derive(Debug, Default)]
pub struct RootsCache {
    state: Mutex<RootsState>,
    /// Held for the duration of a read, so a second resolution waits for the first's answer.
    reading: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct RootsState {
    last_good: Option<Vec<PathBuf>>,
    /// Bumped by every list-changed notification.
    generation: u64,
    /// The generation during which the last read started and ended, if that is the current
    /// one: the cached answer is current.
    read_in: Option<u64>,
}

impl RootsState {
    fn current(&self) -> Option<Vec<PathBuf>> {
        (self.read_in == Some(self.generation)).then(|| self.last_good.clone().unwrap_or_default())
    }
}

impl RootsCache {
    /// `notifications/roots/list_changed`: the next resolution reads again.
    pub fn invalidate(&self) {
        self.lock().generation += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RootsState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn roots(&self, peer: &Peer<RoleServer>, timeout: Duration) -> Vec<PathBuf> {
        if let Some(current) = self.lock().current() {
            return current;
        }
        let _reading = self.reading.lock().await;
        // A read that finished while this one waited counts.
        let generation = {
            let st = self.lock();
            if let Some(current) = st.current() {
                return current;
            }
            st.generation
        };
        let read = read_roots(peer, timeout).await;
        let mut st = self.lock();
        if let Some(list) = &read {
            st.last_good = Some(list.clone());
        }
        // A failed read also counts as a read (a client that never answers costs the timeout
        // once per list-changed), unless a list-changed arrived meanwhile.
        if st.generation == generation {
            st.read_in = Some(generation);
        }
        match read {
            Some(list) => list,
            None => st.last_good.clone().unwrap_or_default(),
        }
    }
}

/// `roots/list` with the timeout; a timed-out request is cancelled with
/// `notifications/cancelled` (rmcp sends it when the bound passes).
#[allow(deprecated)]
async fn read_roots(peer: &Peer<RoleServer>, timeout: Duration) -> Option<Vec<PathBuf>> {
    let request = ServerRequest::ListRootsRequest(Default::default());
    let handle = match peer
        .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
        .await
    {
        Ok(h) => h,
        Err(e) => {
            tracing::debug!("roots/list could not be sent: {e}");
            return None;
        }
    };
    let value = match handle.await_response().await {
        Ok(ClientResult::ListRootsResult(r)) => serde_json::to_value(r).ok()?,
        Ok(ClientResult::CustomResult(c)) => c.0,
        other => {
            tracing::debug!("roots/list gave no usable answer: {other:?}");
            return None;
        }
    };
    Some(parse_roots(&value))
}

/// Reads `{roots: [{uri}]}` leniently: only `file://` URIs count, bad entries are skipped, two
/// spellings of one directory count once.
pub fn parse_roots(value: &Value) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let Some(items) = value.get("roots").and_then(Value::as_array) else {
        return out;
    };
    for item in items {
        let Some(uri) = item.get("uri").and_then(Value::as_str) else {
            continue;
        };
        let Some(path) = file_uri_to_path(uri) else {
            continue;
        };
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// `file:///a/b%20c` → `/a/b c`, normalised (`.`/`..` removed, symlinks resolved where the
/// path exists). Non-file URIs and non-absolute paths are `None`.
pub fn file_uri_to_path(uri: &str) -> Option<PathBuf> {
    let rest = uri
        .strip_prefix("file://")
        .or_else(|| uri.strip_prefix("FILE://"))?;
    // `file://localhost/x` and `file:///x` both name `/x`.
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    let decoded = appduct_protocol::text::percent_decode(rest)?;
    let path = Path::new(&decoded);
    if !path.is_absolute() {
        return None;
    }
    Some(normalise(path))
}

/// Lexical normalisation, then `canonicalize` when the path exists.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    std::fs::canonicalize(&out).unwrap_or(out)
}

/// Whether the request's protocol revision still has roots (the older two, §M13).
fn roots_allowed(version: Option<&ProtocolVersion>) -> bool {
    version.is_none_or(|v| v.as_str() < ProtocolVersion::V_2026_07_28.as_str())
}

/// Resolves D (§M13): the `cwd` argument, the client's roots, `CLAUDE_PROJECT_DIR`, the
/// server's own directory.
pub async fn resolve_dir(
    cwd: Option<&str>,
    context: &RequestContext<RoleServer>,
    cache: &RootsCache,
    env: &ProjectEnv,
    state_dir: Option<&Path>,
    roots_timeout: Duration,
) -> Result<ProjectDir, ToolFailure> {
    if let Some(cwd) = cwd {
        return argument_dir(cwd).map(|dir| ProjectDir {
            dir,
            source: CwdSource::Argument,
            roots: None,
        });
    }
    let declared = context
        .client_capabilities()
        .is_some_and(|c| c.roots.is_some());
    if declared && roots_allowed(context.protocol_version().as_ref()) {
        let roots = cache.roots(&context.peer, roots_timeout).await;
        if let Some(dir) = dir_from_roots(&roots, env, state_dir)? {
            return Ok(ProjectDir {
                dir,
                source: CwdSource::ClientRoot,
                roots: Some(roots),
            });
        }
    }
    if let Some(dir) = claude_project_dir(env) {
        return Ok(ProjectDir {
            dir,
            source: CwdSource::ClaudeProjectDir,
            roots: None,
        });
    }
    let dir = env.server_cwd.clone().ok_or_else(|| {
        ToolFailure::invalid_request("cannot determine the server's directory; pass cwd")
    })?;
    Ok(ProjectDir {
        dir,
        source: CwdSource::Server,
        roots: None,
    })
}

/// D for a request without `cwd` and roots: `CLAUDE_PROJECT_DIR` (absolute, existing), else
/// the server's own directory (§M13, sources 3 and 4).
pub fn startup_dir(env: &ProjectEnv) -> Option<PathBuf> {
    claude_project_dir(env).or_else(|| env.server_cwd.clone())
}

/// `CLAUDE_PROJECT_DIR` when it names an absolute, existing directory.
fn claude_project_dir(env: &ProjectEnv) -> Option<PathBuf> {
    let p = Path::new(env.claude_project_dir.as_deref()?);
    (p.is_absolute() && p.is_dir()).then(|| normalise(p))
}

/// The `cwd` argument: an absolute path to an existing directory.
pub fn argument_dir(cwd: &str) -> Result<PathBuf, ToolFailure> {
    let p = Path::new(cwd);
    if !p.is_absolute() {
        return Err(ToolFailure::invalid_request(format!(
            "\"cwd\" must be an absolute path, not {cwd:?}"
        ))
        .with_details(json!({"param": "cwd"})));
    }
    if !p.is_dir() {
        return Err(ToolFailure::invalid_request(format!(
            "\"cwd\" must name an existing directory; {cwd:?} is not one"
        ))
        .with_details(json!({"param": "cwd"})));
    }
    Ok(normalise(p))
}

/// One root → that root. Several → they must share one project record (nearest
/// `.appduct/config.json`); none with a record → nothing; different records → error.
fn dir_from_roots(
    roots: &[PathBuf],
    env: &ProjectEnv,
    state_dir: Option<&Path>,
) -> Result<Option<PathBuf>, ToolFailure> {
    match roots {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        many => {
            let mut chosen: Option<(PathBuf, PathBuf)> = None;
            for root in many {
                let Some(record) = nearest_record(root, env, state_dir) else {
                    continue;
                };
                match &chosen {
                    None => chosen = Some((root.clone(), record)),
                    Some((_, r)) if *r == record => {}
                    Some(_) => {
                        let list: Vec<String> =
                            many.iter().map(|r| r.display().to_string()).collect();
                        return Err(ToolFailure::invalid_request(format!(
                            "the client's workspace roots belong to different appduct projects ({}); pass cwd to choose one",
                            list.join(", ")
                        ))
                        .with_details(json!({"param": "cwd", "roots": list})));
                    }
                }
            }
            Ok(chosen.map(|(root, _)| root))
        }
    }
}

/// The nearest project record of `dir` (an unreadable one still counts).
fn nearest_record(dir: &Path, env: &ProjectEnv, state_dir: Option<&Path>) -> Option<PathBuf> {
    env.resolve_env(dir, state_dir).nearest_project_config()
}

/// A resolution failure as the bridge reports it: `invalid_request` with the CLI's message
/// (§M13), the shared details and hint, and the parameter it concerns.
pub fn project_failure(e: &ProjectError) -> ToolFailure {
    let param = match e {
        ProjectError::InvalidScheme { .. }
        | ProjectError::NoScheme { .. }
        | ProjectError::ProbeConflict(_) => Some("scheme"),
        ProjectError::InvalidAppId { .. } | ProjectError::NoAppId { .. } => Some("appId"),
        _ => None,
    };
    let mut f = ToolFailure::invalid_request(e.to_string());
    if let Some(d) = e.details() {
        f = f.merge_details(d);
    }
    if let Some(p) = param {
        f = f.merge_details(json!({"param": p}));
    }
    if let Some(h) = e.hint() {
        f = f.merge_details(json!({"hint": h}));
    }
    f
}

/// The scheme for D (§L5.1 with the CLI's directory replaced by D, §M13).
pub fn resolve_scheme(
    dir: &Path,
    flag: Option<&str>,
    env: &ProjectEnv,
    state_dir: Option<&Path>,
) -> Result<ResolvedScheme, ToolFailure> {
    shared::resolve_scheme(flag, &env.resolve_env(dir, state_dir)).map_err(|e| project_failure(&e))
}

/// `appId` for `status`: whichever platforms the project config names.
pub fn project_app_ids(dir: &Path, env: &ProjectEnv, state_dir: Option<&Path>) -> Value {
    let renv = env.resolve_env(dir, state_dir);
    let mut out = serde_json::Map::new();
    for platform in [Platform::Android, Platform::Ios] {
        if let Ok(Some(id)) = shared::project_app_id(platform, &renv) {
            out.insert(platform.key().into(), json!(id));
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_are_parsed_leniently_and_deduplicated() {
        let v = json!({"roots": [
            {"uri": "file:///tmp/a%20b/./c/.."},
            {"uri": "file:///tmp/a%20b"},
            {"uri": "https://example.com"},
            {"name": "no uri"},
            {"uri": "file://relative"},
            {"uri": "file:///bad%zz"},
        ]});
        assert_eq!(parse_roots(&v), vec![PathBuf::from("/tmp/a b")]);
        assert!(parse_roots(&json!({"roots": "x"})).is_empty());
    }

    #[test]
    fn the_argument_must_be_absolute_and_exist() {
        assert!(argument_dir("relative/dir").is_err());
        assert!(argument_dir("/definitely/not/a/dir").is_err());
        assert!(argument_dir(&std::env::temp_dir().display().to_string()).is_ok());
    }

    #[test]
    fn resolution_errors_are_invalid_requests_naming_their_parameter() {
        let dir = tempfile::tempdir().unwrap();
        let env = ProjectEnv::default();
        let f = resolve_scheme(dir.path(), None, &env, None).unwrap_err();
        assert_eq!(
            f.error_type,
            appduct_protocol::errors::ErrorType::InvalidRequest
        );
        let details = f.details.as_deref().unwrap();
        assert_eq!(details["param"], "scheme");
        assert!(details["hint"].as_str().unwrap().contains("appduct init"));
        assert!(f.message.contains("APPDUCT_SCHEME"), "{}", f.message);
        // The native probes count in D too.
        std::fs::create_dir_all(dir.path().join("android/app")).unwrap();
        std::fs::write(
            dir.path().join("android/app/build.gradle"),
            r#"manifestPlaceholders = [appductScheme: "gradle-app"]"#,
        )
        .unwrap();
        let s = resolve_scheme(dir.path(), None, &env, None).unwrap();
        assert_eq!(
            (s.scheme.as_str(), s.source.as_str()),
            ("gradle-app", "android-gradle")
        );
        let f = project_failure(&ProjectError::NoAppId {
            platform: Platform::Ios,
        });
        assert_eq!(f.details.as_deref().unwrap()["param"], "appId");
    }
}
