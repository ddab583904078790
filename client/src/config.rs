//! `config.json` (§S2): loading, validation and the typed configuration.
//!
//! The file is read at daemon start and again by `daemon.reload` (SIGHUP). A missing file means
//! every default; unknown keys are warnings; anything else wrong stops the daemon with an error
//! naming the file, the key and the accepted values (`daemon run` exits 65), or fails the reload
//! and leaves the running configuration in force.
//!
//! [`write_policy`] is the one writer: `policy.set` / `policy.reset` persist the `policy` key
//! with it (atomic replace, 0600, every other key and unknown key kept as written).

use crate::platform::fs::MetadataExt;
use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use appduct_protocol::declarations::DECLARATION_FIELDS;
use appduct_protocol::limits::{
    self, DEFAULT_GRACE_S, DEFAULT_KEEPALIVE_INTERVAL_S, DEFAULT_LINK_TTL_S, MAX_LINK_TTL_S,
};
use appduct_protocol::link::validate_scheme;
use appduct_protocol::text::as_integer;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::state_dir::{CONFIG_FILE, KEY_FILE};

/// Largest "positive integer" of §S2.1 (keeps timer arithmetic in range).
pub const MAX_POSITIVE_INTEGER: i64 = 2_147_483_647;
pub const DEFAULT_WSS_PORT: u16 = 8443;
pub const DEFAULT_EVENT_BUFFER_SIZE: u32 = 256;
pub const DEFAULT_AUDIT_RETENTION_DAYS: u32 = 30;
pub const DEFAULT_LOG_MAX_BYTES: u64 = 10_485_760;

/// Every top-level key the loader accepts, in the order of docs/state.md §S2.2. A key outside
/// this list is an unknown-key warning even if [`Config::from_value`] had a branch for it, so a
/// new key must be added here (and to §S2.2, which `client/tests/it/config_doc.rs` checks).
pub const KEYS: [&str; 19] = [
    "wssPort",
    "keyPath",
    "graceSeconds",
    "linkTtlSeconds",
    "keepaliveIntervalSeconds",
    "eventBufferSize",
    "auditRetentionDays",
    "daemonLogMaxBytes",
    "eventsLogMaxBytes",
    "policy",
    "consent",
    "results",
    "advertisedIp",
    "scheme",
    "restartDaemonOnVersionMismatch",
    "webOrigins",
    "http",
    "validation",
    "registry",
];

/// A policy decision (§C11); the one wire enum lives in the protocol crate.
pub use appduct_protocol::control::PolicyDecision as Decision;

/// The `policy` key, in the shape `daemon.status.policy` reports it (§C8.2): `tools` is
/// omitted when no override is configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub default: Decision,
    pub destructive: Decision,
    /// `"<alias>/<tool>"` → decision.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, Decision>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            default: Decision::Allow,
            destructive: Decision::Allow,
            tools: BTreeMap::new(),
        }
    }
}

/// What the daemon does with a `prompt` call whose caller has no consent channel (§C11.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConsentFallback {
    /// Refuse it with `policy_denied` (`reason: "no_consent_channel"`): the default.
    #[default]
    Deny,
    /// Park it as a pending approval an operator decides (§C8.17–§C8.21).
    Operator,
}

/// Default lifetime of a pending approval (§C11.1).
pub const DEFAULT_APPROVAL_TIMEOUT_MS: u64 = 120_000;
/// Bounds of `consent.approvalTimeoutMs`.
pub const MIN_APPROVAL_TIMEOUT_MS: u64 = 1_000;
pub const MAX_APPROVAL_TIMEOUT_MS: u64 = 600_000;

/// The `consent` key (§C11.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsentConfig {
    pub fallback: ConsentFallback,
    /// How long a parked call waits for an operator, in [1000, 600000].
    pub approval_timeout_ms: u64,
    /// `true` (default): approving needs the one-time code the daemon writes to the deciding
    /// process's controlling terminal (SECURITY.md §4.18). `false` weakens that: any process
    /// of the user may approve.
    pub operator_requires_terminal: bool,
}

impl Default for ConsentConfig {
    fn default() -> Self {
        ConsentConfig {
            fallback: ConsentFallback::Deny,
            approval_timeout_ms: DEFAULT_APPROVAL_TIMEOUT_MS,
            operator_requires_terminal: true,
        }
    }
}

/// The `results` key (issue #17, §D17.3): memory bounds of results sent in parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultsConfig {
    /// Largest body one call may send in parts, and the most one session may have buffered
    /// (announced to apps as `result_parts_max_bytes`); 262144 to 16777216.
    pub max_bytes: u64,
    /// The most all sessions together may have buffered; 262144 to 1073741824.
    pub max_buffered_bytes: u64,
    /// Settled outcomes kept for `tools.result` (issue #19, §C10.10); 0 to 100000, 0 keeps none.
    pub retain_count: u64,
    /// Their bytes, all together, as compact JSON; 0 to 1073741824.
    pub retain_bytes: u64,
}

/// Default `results.retainCount` (§C10.10).
pub const DEFAULT_RESULTS_RETAIN_COUNT: u64 = 256;
/// Default `results.retainBytes` (§C10.10): 64 MiB.
pub const DEFAULT_RESULTS_RETAIN_BYTES: u64 = 67_108_864;

impl Default for ResultsConfig {
    fn default() -> Self {
        ResultsConfig {
            max_bytes: limits::DEFAULT_RESULT_MAX_BYTES,
            max_buffered_bytes: limits::DEFAULT_RESULT_MAX_BUFFERED_BYTES,
            retain_count: DEFAULT_RESULTS_RETAIN_COUNT,
            retain_bytes: DEFAULT_RESULTS_RETAIN_BYTES,
        }
    }
}

/// `validation.arguments` (§C10.8): whether the daemon checks `tools.call` arguments against
/// the tool's input schema before the call leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArgumentValidation {
    /// Arguments reach the app unchecked; only the app validates.
    Off,
    /// Arguments that do not match the tool's input schema are refused with
    /// `tool_input_validation_error` and never reach the app: the default.
    #[default]
    Enforce,
}

/// The `validation` key (§S2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ValidationConfig {
    pub arguments: ArgumentValidation,
}

/// The validated daemon configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Absolute path of the file this came from (even when it does not exist); named in policy
    /// denials (§C11).
    pub config_path: PathBuf,
    /// `0` lets the OS choose.
    pub wss_port: u16,
    /// Absolute: a relative `keyPath` is resolved against the state directory.
    pub key_path: PathBuf,
    pub grace_seconds: u32,
    pub link_ttl_seconds: u32,
    pub keepalive_interval_seconds: u32,
    pub event_buffer_size: u32,
    pub audit_retention_days: u32,
    pub daemon_log_max_bytes: u64,
    pub events_log_max_bytes: u64,
    pub policy: Policy,
    pub consent: ConsentConfig,
    pub results: ResultsConfig,
    /// `None`: auto-detect.
    pub advertised_ip: Option<IpAddr>,
    /// Deep-link scheme; used only by clients.
    pub scheme: Option<String>,
    pub restart_daemon_on_version_mismatch: bool,
    /// Extra allowed web origins, as written.
    pub web_origins: Vec<String>,
    /// The loopback HTTP API (docs/http.md §H1); `None` (no `http` key, or no `http.port`):
    /// off.
    pub http: Option<HttpConfig>,
    /// Argument validation of `tools.call` (§C10.8); applied by `daemon.reload`.
    pub validation: ValidationConfig,
    /// `registry.require` (device.md §D18.5): the declaration fields, by wire name, each tool
    /// must carry; empty (the default): none.
    pub registry_require: Vec<&'static str>,
}

/// The `http` key (§S2.2, §H1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// The TCP port on 127.0.0.1; `0` lets the OS choose at each start.
    pub port: u16,
    /// Origins whose browser requests are allowed (CORS, §H2.4), as written; empty: none.
    pub cors_origins: Vec<String>,
}

/// A problem that does not stop the daemon. Each is also logged once when produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigWarning {
    /// A top-level key, or `policy.<key>`, that this version does not know.
    UnknownKey { path: PathBuf, key: String },
    /// `config.json` is writable by group or others (§S1.2).
    GroupOrOtherWritable { path: PathBuf, mode: u32 },
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigWarning::UnknownKey { path, key } => {
                write!(f, "{}: unknown key {key:?} is ignored", path.display())
            }
            ConfigWarning::GroupOrOtherWritable { path, mode } => write!(
                f,
                "{} is writable by group or others (mode {mode:04o}); other users could change the daemon's policy (chmod go-w)",
                path.display()
            ),
        }
    }
}

/// Why `config.json` stops the daemon (`validation_error`, exit 65).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} is not valid JSON: {detail}", path.display())]
    NotJson { path: PathBuf, detail: String },
    #[error("{}: the top level must be a JSON object", path.display())]
    NotObject { path: PathBuf },
    #[error("{}: {key}: {expected}{}", path.display(), got_suffix(got.as_deref()))]
    InvalidValue {
        path: PathBuf,
        /// The key as written in the file, e.g. `graceSeconds`, `policy.default`,
        /// `policy.tools["Pixel 8/reset"]`, `webOrigins[2]`.
        key: String,
        /// The accepted values.
        expected: String,
        /// A short rendering of the offending value, when showing it helps.
        got: Option<String>,
    },
}

fn got_suffix(got: Option<&str>) -> String {
    got.map_or_else(String::new, |g| format!(", got {g}"))
}

/// Largest `config.json` read, bytes: a real one is a few KiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads `config.json` (a symlink is followed, as documented) without trusting what is there:
/// opened with `O_NONBLOCK` so a FIFO fails at once instead of hanging the daemon's reload,
/// then it must be a regular file of at most [`MAX_CONFIG_BYTES`] (a symlink to `/dev/zero`
/// or a huge file is refused instead of read into memory). Hostile-peer finding (issue #16).
pub fn read_config_file(path: &Path) -> io::Result<Vec<u8>> {
    use crate::platform::fs::OpenOptionsExt as _;
    use std::io::Read as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(crate::platform::o_nonblock())
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len().min(MAX_CONFIG_BYTES) as usize);
    file.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is larger than {} bytes",
                path.display(),
                MAX_CONFIG_BYTES
            ),
        ));
    }
    Ok(bytes)
}

/// The configuration and its warnings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedConfig {
    pub config: Config,
    pub warnings: Vec<ConfigWarning>,
}

impl Config {
    /// Every default, for the state directory `state_dir` (absolute).
    pub fn defaults(state_dir: &Path) -> Self {
        Config {
            config_path: state_dir.join(CONFIG_FILE),
            wss_port: DEFAULT_WSS_PORT,
            key_path: state_dir.join(KEY_FILE),
            grace_seconds: DEFAULT_GRACE_S,
            link_ttl_seconds: DEFAULT_LINK_TTL_S,
            keepalive_interval_seconds: DEFAULT_KEEPALIVE_INTERVAL_S,
            event_buffer_size: DEFAULT_EVENT_BUFFER_SIZE,
            audit_retention_days: DEFAULT_AUDIT_RETENTION_DAYS,
            daemon_log_max_bytes: DEFAULT_LOG_MAX_BYTES,
            events_log_max_bytes: DEFAULT_LOG_MAX_BYTES,
            policy: Policy::default(),
            consent: ConsentConfig::default(),
            results: ResultsConfig::default(),
            advertised_ip: None,
            scheme: None,
            restart_daemon_on_version_mismatch: false,
            web_origins: Vec::new(),
            http: None,
            validation: ValidationConfig::default(),
            registry_require: Vec::new(),
        }
    }

    /// Loads `<state_dir>/config.json`. A missing file gives the defaults. The file is the
    /// user's (appduct writes it only through [`write_policy`], which replaces a symlink's
    /// target, never the link), so a symlink there is followed (dotfile managers).
    pub fn load(state_dir: &Path) -> Result<LoadedConfig, ConfigError> {
        let path = state_dir.join(CONFIG_FILE);
        let bytes = match read_config_file(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(LoadedConfig {
                    config: Config::defaults(state_dir),
                    warnings: Vec::new(),
                });
            }
            Err(source) => return Err(ConfigError::Read { path, source }),
        };
        let mut loaded = Config::from_slice(&bytes, state_dir)?;
        if let Some(warning) = Config::warn_if_group_or_other_writable(&path) {
            loaded.warnings.push(warning);
        }
        Ok(loaded)
    }

    /// Parses and validates the contents of `<state_dir>/config.json`.
    pub fn from_slice(bytes: &[u8], state_dir: &Path) -> Result<LoadedConfig, ConfigError> {
        let path = state_dir.join(CONFIG_FILE);
        let value: Value = serde_json::from_slice(bytes).map_err(|e| ConfigError::NotJson {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        Config::from_value(&value, state_dir)
    }

    /// Validates an already parsed `config.json` value.
    pub fn from_value(value: &Value, state_dir: &Path) -> Result<LoadedConfig, ConfigError> {
        let mut v = Validator {
            path: state_dir.join(CONFIG_FILE),
            warnings: Vec::new(),
        };
        let Value::Object(map) = value else {
            return Err(ConfigError::NotObject { path: v.path });
        };
        let mut config = Config::defaults(state_dir);
        for (key, value) in map {
            if !KEYS.contains(&key.as_str()) {
                v.unknown(key.clone());
                continue;
            }
            match key.as_str() {
                "wssPort" => {
                    config.wss_port =
                        v.int_in(key, value, 0, 65_535, "an integer from 0 to 65535")?
                }
                "keyPath" => config.key_path = state_dir.join(v.key_path(key, value)?),
                "graceSeconds" => config.grace_seconds = v.positive(key, value)?,
                "linkTtlSeconds" => {
                    config.link_ttl_seconds = v.int_in(
                        key,
                        value,
                        1,
                        i64::from(MAX_LINK_TTL_S),
                        "an integer from 1 to 86400",
                    )?
                }
                "keepaliveIntervalSeconds" => {
                    config.keepalive_interval_seconds = v.positive(key, value)?
                }
                "eventBufferSize" => config.event_buffer_size = v.positive(key, value)?,
                "auditRetentionDays" => config.audit_retention_days = v.positive(key, value)?,
                "daemonLogMaxBytes" => {
                    config.daemon_log_max_bytes = u64::from(v.positive::<u32>(key, value)?)
                }
                "eventsLogMaxBytes" => {
                    config.events_log_max_bytes = u64::from(v.positive::<u32>(key, value)?)
                }
                "policy" => config.policy = v.policy(value)?,
                "consent" => config.consent = v.consent(value)?,
                "results" => config.results = v.results(value)?,
                "advertisedIp" => config.advertised_ip = Some(v.ip(key, value)?),
                "scheme" => config.scheme = Some(v.scheme(key, value)?),
                "restartDaemonOnVersionMismatch" => {
                    config.restart_daemon_on_version_mismatch = match value {
                        Value::Bool(b) => *b,
                        other => return Err(v.invalid(key, "must be true or false", other)),
                    }
                }
                "webOrigins" => config.web_origins = v.web_origins(key, value)?,
                "http" => config.http = v.http(value)?,
                "validation" => config.validation = v.validation(value)?,
                "registry" => config.registry_require = v.registry(value)?,
                _ => v.unknown(key.clone()),
            }
        }
        Ok(LoadedConfig {
            config,
            warnings: v.warnings,
        })
    }

    /// Warns (and returns the warning) when `path` is writable by group or others (§S1.2).
    /// `None` when it is not, or cannot be inspected.
    pub fn warn_if_group_or_other_writable(path: &Path) -> Option<ConfigWarning> {
        let mode = std::fs::metadata(path).ok()?.mode() & 0o7777;
        if mode & 0o022 == 0 {
            return None;
        }
        let warning = ConfigWarning::GroupOrOtherWritable {
            path: path.to_path_buf(),
            mode,
        };
        tracing::warn!("{warning}");
        Some(warning)
    }
}

/// The rotation threshold of `daemon.log` for a spawner (§S3.7): `daemonLogMaxBytes` when the
/// file validates, else the default (a broken file is the daemon's to report, not the spawner's).
pub fn daemon_log_max_bytes_for_rotation(state_dir: &Path) -> u64 {
    match Config::load(state_dir) {
        Ok(loaded) => loaded.config.daemon_log_max_bytes,
        Err(_) => DEFAULT_LOG_MAX_BYTES,
    }
}

const DECISIONS: &str = r#"must be "allow", "deny" or "prompt""#;

struct Validator {
    path: PathBuf,
    warnings: Vec<ConfigWarning>,
}

impl Validator {
    fn invalid(&self, key: &str, expected: &str, got: &Value) -> ConfigError {
        ConfigError::InvalidValue {
            path: self.path.clone(),
            key: key.to_owned(),
            expected: expected.to_owned(),
            got: Some(render(got)),
        }
    }

    fn unknown(&mut self, key: String) {
        let warning = ConfigWarning::UnknownKey {
            path: self.path.clone(),
            key,
        };
        tracing::warn!("{warning}");
        self.warnings.push(warning);
    }

    /// An integral JSON number in `min..=max`, converted to the field's type.
    fn int_in<T: TryFrom<i64>>(
        &self,
        key: &str,
        value: &Value,
        min: i64,
        max: i64,
        accepted: &str,
    ) -> Result<T, ConfigError> {
        as_integer(value)
            .filter(|n| (min..=max).contains(n))
            .and_then(|n| T::try_from(n).ok())
            .ok_or_else(|| self.invalid(key, &format!("must be {accepted}"), value))
    }

    fn positive<T: TryFrom<i64>>(&self, key: &str, value: &Value) -> Result<T, ConfigError> {
        self.int_in(
            key,
            value,
            1,
            MAX_POSITIVE_INTEGER,
            "a positive integer (1 to 2147483647)",
        )
    }

    fn key_path(&self, key: &str, value: &Value) -> Result<PathBuf, ConfigError> {
        match value {
            Value::String(s) if !s.is_empty() && !s.contains('\0') => Ok(PathBuf::from(s)),
            other => Err(self.invalid(
                key,
                "must be a non-empty path string (relative paths are resolved against the state directory; ~ is not expanded)",
                other,
            )),
        }
    }

    fn ip(&self, key: &str, value: &Value) -> Result<IpAddr, ConfigError> {
        value
            .as_str()
            .and_then(|s| s.parse::<IpAddr>().ok())
            .ok_or_else(|| {
                self.invalid(
                    key,
                    "must be an IPv4 or IPv6 literal such as \"192.168.1.20\" (a hostname cannot be advertised)",
                    value,
                )
            })
    }

    fn scheme(&self, key: &str, value: &Value) -> Result<String, ConfigError> {
        match value {
            Value::String(s) if validate_scheme(s).is_ok() => Ok(s.clone()),
            other => Err(self.invalid(
                key,
                "must match ^[A-Za-z][A-Za-z0-9+.-]{0,63}$ and must not be http, https, file, ws or wss (write \"myapp\", not \"myapp://\")",
                other,
            )),
        }
    }

    fn web_origins(&self, key: &str, value: &Value) -> Result<Vec<String>, ConfigError> {
        let Value::Array(items) = value else {
            return Err(self.invalid(
                key,
                "must be an array of origins such as \"http://devbox.lan:5173\"",
                value,
            ));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) if is_valid_origin(s) => Ok(s.clone()),
                other => Err(self.invalid(
                    &format!("{key}[{i}]"),
                    "must be an origin http://host[:port] or https://host[:port] with no path, query, fragment or trailing \"/\" (\"*\" and \"null\" are not allowed)",
                    other,
                )),
            })
            .collect()
    }

    /// `http`: an object with optional `port` (absent: off) and `corsOrigins`.
    fn http(&mut self, value: &Value) -> Result<Option<HttpConfig>, ConfigError> {
        let Value::Object(map) = value else {
            return Err(self.invalid(
                "http",
                "must be an object with optional keys \"port\" and \"corsOrigins\"",
                value,
            ));
        };
        let mut port = None;
        let mut cors_origins = Vec::new();
        for (key, value) in map {
            match key.as_str() {
                "port" => {
                    port = Some(self.int_in(
                        "http.port",
                        value,
                        0,
                        65_535,
                        "an integer from 0 to 65535",
                    )?)
                }
                "corsOrigins" => cors_origins = self.web_origins("http.corsOrigins", value)?,
                _ => self.unknown(format!("http.{key}")),
            }
        }
        Ok(port.map(|port| HttpConfig { port, cors_origins }))
    }

    fn policy(&mut self, value: &Value) -> Result<Policy, ConfigError> {
        let Value::Object(map) = value else {
            return Err(self.invalid(
                "policy",
                "must be an object with optional keys \"default\", \"destructive\" and \"tools\"",
                value,
            ));
        };
        let mut policy = Policy::default();
        for (key, value) in map {
            match key.as_str() {
                "default" => policy.default = self.decision("policy.default", value)?,
                "destructive" => policy.destructive = self.decision("policy.destructive", value)?,
                "tools" => policy.tools = self.policy_tools(value)?,
                _ => self.unknown(format!("policy.{key}")),
            }
        }
        Ok(policy)
    }

    /// The `registry` key (§S2.2): `{"require": [...]}`, each entry a field of
    /// [`DECLARATION_FIELDS`]; repeats are kept once.
    fn registry(&mut self, value: &Value) -> Result<Vec<&'static str>, ConfigError> {
        let Value::Object(map) = value else {
            return Err(self.invalid(
                "registry",
                "must be an object with the optional key \"require\"",
                value,
            ));
        };
        let mut require = Vec::new();
        for (key, value) in map {
            match key.as_str() {
                "require" => {
                    const MUST: &str = "must be an array of \"riskLevel\", \"requiredPermissions\" and \"testCases\"";
                    let Value::Array(items) = value else {
                        return Err(self.invalid("registry.require", MUST, value));
                    };
                    for item in items {
                        let Some(field) = item
                            .as_str()
                            .and_then(|s| DECLARATION_FIELDS.iter().find(|f| **f == s))
                        else {
                            return Err(self.invalid("registry.require", MUST, item));
                        };
                        if !require.contains(field) {
                            require.push(*field);
                        }
                    }
                }
                _ => self.unknown(format!("registry.{key}")),
            }
        }
        Ok(require)
    }

    fn results(&mut self, value: &Value) -> Result<ResultsConfig, ConfigError> {
        let Value::Object(map) = value else {
            return Err(self.invalid(
                "results",
                "must be an object with optional keys \"maxBytes\", \"maxBufferedBytes\", \"retainCount\" and \"retainBytes\"",
                value,
            ));
        };
        let mut results = ResultsConfig::default();
        for (key, value) in map {
            match key.as_str() {
                "maxBytes" => {
                    results.max_bytes = self.int_in(
                        "results.maxBytes",
                        value,
                        limits::MIN_RESULT_MAX_BYTES as i64,
                        limits::MAX_RESULT_MAX_BYTES as i64,
                        "an integer from 262144 to 16777216",
                    )?
                }
                "maxBufferedBytes" => {
                    results.max_buffered_bytes = self.int_in(
                        "results.maxBufferedBytes",
                        value,
                        limits::MIN_RESULT_MAX_BUFFERED_BYTES as i64,
                        limits::MAX_RESULT_MAX_BUFFERED_BYTES as i64,
                        "an integer from 262144 to 1073741824",
                    )?
                }
                "retainCount" => {
                    results.retain_count = self.int_in(
                        "results.retainCount",
                        value,
                        0,
                        100_000,
                        "an integer from 0 to 100000",
                    )?
                }
                "retainBytes" => {
                    results.retain_bytes = self.int_in(
                        "results.retainBytes",
                        value,
                        0,
                        1_073_741_824,
                        "an integer from 0 to 1073741824",
                    )?
                }
                _ => self.unknown(format!("results.{key}")),
            }
        }
        Ok(results)
    }

    fn validation(&mut self, value: &Value) -> Result<ValidationConfig, ConfigError> {
        let Value::Object(map) = value else {
            return Err(self.invalid(
                "validation",
                "must be an object with the optional key \"arguments\"",
                value,
            ));
        };
        let mut validation = ValidationConfig::default();
        for (key, value) in map {
            match key.as_str() {
                "arguments" => {
                    validation.arguments = match value.as_str() {
                        Some("off") => ArgumentValidation::Off,
                        Some("enforce") => ArgumentValidation::Enforce,
                        _ => {
                            return Err(self.invalid(
                                "validation.arguments",
                                "must be \"off\" or \"enforce\"",
                                value,
                            ));
                        }
                    }
                }
                _ => self.unknown(format!("validation.{key}")),
            }
        }
        Ok(validation)
    }

    fn consent(&mut self, value: &Value) -> Result<ConsentConfig, ConfigError> {
        let Value::Object(map) = value else {
            return Err(self.invalid(
                "consent",
                "must be an object with optional keys \"fallback\", \"approvalTimeoutMs\" and \"operatorRequiresTerminal\"",
                value,
            ));
        };
        let mut consent = ConsentConfig::default();
        for (key, value) in map {
            match key.as_str() {
                "fallback" => {
                    consent.fallback = match value.as_str() {
                        Some("deny") => ConsentFallback::Deny,
                        Some("operator") => ConsentFallback::Operator,
                        _ => {
                            return Err(self.invalid(
                                "consent.fallback",
                                "must be \"deny\" or \"operator\"",
                                value,
                            ));
                        }
                    }
                }
                "approvalTimeoutMs" => {
                    consent.approval_timeout_ms = self.int_in(
                        "consent.approvalTimeoutMs",
                        value,
                        MIN_APPROVAL_TIMEOUT_MS as i64,
                        MAX_APPROVAL_TIMEOUT_MS as i64,
                        "an integer from 1000 to 600000",
                    )?
                }
                "operatorRequiresTerminal" => {
                    consent.operator_requires_terminal = match value {
                        Value::Bool(b) => *b,
                        other => {
                            return Err(self.invalid(
                                "consent.operatorRequiresTerminal",
                                "must be true or false",
                                other,
                            ));
                        }
                    }
                }
                _ => self.unknown(format!("consent.{key}")),
            }
        }
        Ok(consent)
    }

    fn decision(&self, key: &str, value: &Value) -> Result<Decision, ConfigError> {
        value
            .as_str()
            .and_then(|s| s.parse::<Decision>().ok())
            .ok_or_else(|| self.invalid(key, DECISIONS, value))
    }

    fn policy_tools(&self, value: &Value) -> Result<BTreeMap<String, Decision>, ConfigError> {
        let Value::Object(map) = value else {
            return Err(self.invalid(
                "policy.tools",
                "must be an object mapping \"<alias>/<tool>\" to \"allow\", \"deny\" or \"prompt\"",
                value,
            ));
        };
        let mut tools = BTreeMap::new();
        for (tool_key, value) in map {
            // Rendered like docs/state.md's example: policy.tools["Pixel 8/reset"].
            let name = format!("policy.tools[{}]", render(&Value::String(tool_key.clone())));
            if !is_valid_tool_key(tool_key) {
                return Err(ConfigError::InvalidValue {
                    path: self.path.clone(),
                    key: name,
                    expected: "key must be \"<alias>/<tool>\" (alias: lowercase letters and digits in hyphen-separated words; tool: 1 to 64 of A-Z a-z 0-9 _ -)".to_owned(),
                    got: None,
                });
            }
            tools.insert(tool_key.clone(), self.decision(&name, value)?);
        }
        Ok(tools)
    }
}

/// Compact JSON of `value`, cut to 80 characters for error messages.
fn render(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// `^[a-z0-9]+(-[a-z0-9]+)*/[A-Za-z0-9_-]{1,64}$` (§C11).
/// `"<alias>/<tool>"` where either part may be a glob (`*` any run of characters): the alias
/// part lowercase letters, digits, `-` and `*`, its hyphen-separated words non-empty; the tool
/// part 1 to 64 of `A-Z a-z 0-9 _ - *`.
pub fn is_valid_tool_key(key: &str) -> bool {
    let Some((alias, tool)) = key.split_once('/') else {
        return false;
    };
    let alias_ok = alias.split('-').all(|word| {
        !word.is_empty()
            && word
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'*')
    });
    let tool_ok = (1..=64).contains(&tool.len())
        && tool
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'*');
    alias_ok && tool_ok
}

/// Writes `policy` as the `policy` key of `<state_dir>/config.json`, keeping every other key
/// (unknown ones included, in their order) and any other key inside `policy`: the file is read,
/// changed and written to a fresh 0600 temporary file beside it (`O_EXCL`, `O_NOFOLLOW`),
/// synced and renamed over the original, so a reader sees the old or the new file, never a
/// part. When `config.json` is a symlink (dotfile managers) its target is replaced. A file
/// that is not a JSON object is refused and left alone.
pub fn write_policy(state_dir: &Path, policy: &Policy) -> io::Result<()> {
    update_config(state_dir, |root| {
        let entry = root
            .entry("policy")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(serde_json::Map::new());
        }
        if let Value::Object(obj) = entry {
            obj.insert("default".into(), Value::String(policy.default.to_string()));
            obj.insert(
                "destructive".into(),
                Value::String(policy.destructive.to_string()),
            );
            if policy.tools.is_empty() {
                obj.remove("tools");
            } else {
                let tools = policy
                    .tools
                    .iter()
                    .map(|(k, d)| (k.clone(), Value::String(d.to_string())))
                    .collect();
                obj.insert("tools".into(), Value::Object(tools));
            }
        }
    })
}

/// Sets `http.port` of `<state_dir>/config.json` (`Some`) or removes it (`None`: the HTTP API
/// is off, §H1), keeping every other key, `http.corsOrigins` included; written like
/// [`write_policy`].
pub fn write_http_port(state_dir: &Path, port: Option<u16>) -> io::Result<()> {
    update_config(state_dir, |root| {
        let entry = root
            .entry("http")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(serde_json::Map::new());
        }
        if let Value::Object(obj) = entry {
            match port {
                Some(port) => {
                    obj.insert("port".into(), Value::from(port));
                }
                None => {
                    obj.remove("port");
                }
            }
        }
    })
}

/// Reads `config.json` (a missing file is `{}`), lets `change` edit its top-level object, and
/// writes it back atomically (see [`write_policy`]).
fn update_config(
    state_dir: &Path,
    change: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> io::Result<()> {
    use std::io::Write as _;
    let link = state_dir.join(CONFIG_FILE);
    let path = std::fs::canonicalize(&link).unwrap_or(link);
    let mut doc = match read_config_file(&path) {
        Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Value::Object(serde_json::Map::new()),
        Err(e) => return Err(e),
    };
    let Value::Object(root) = &mut doc else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a JSON object", path.display()),
        ));
    };
    change(root);
    let mut text = serde_json::to_string_pretty(&doc).map_err(io::Error::other)?;
    text.push('\n');
    let dir = path.parent().unwrap_or(state_dir);
    let name = path
        .file_name()
        .map_or_else(|| CONFIG_FILE.into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let mut file = crate::state_dir::create_new(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// An origin `http(s)://host[:port]` with nothing after the authority (§S2.2). The host is a
/// DNS-style name, an IPv4 literal or a bracketed IPv6 literal; the port is 0..=65535.
fn is_valid_origin(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let Some(authority) = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
    else {
        return false;
    };
    let (host_ok, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((inner, after)) = v6.split_once(']') else {
            return false;
        };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return false,
            },
        };
        (inner.parse::<std::net::Ipv6Addr>().is_ok(), port)
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        };
        (is_valid_host_name(host), port)
    };
    host_ok && port.is_none_or(is_valid_port)
}

/// Dot-separated labels of letters, digits, `-` and `_` (also covers IPv4 literals). Anything
/// else, including `/`, `?`, `#`, `@` and `*`, makes the origin invalid.
fn is_valid_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

fn is_valid_port(port: &str) -> bool {
    (1..=5).contains(&port.len())
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u32>().is_ok_and(|n| n <= 65_535)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    const STATE: &str = "/st";

    fn load(value: Value) -> Result<LoadedConfig, ConfigError> {
        Config::from_value(&value, Path::new(STATE))
    }

    fn ok(value: Value) -> Config {
        let loaded = load(value).unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        loaded.config
    }

    /// Asserts `value` is refused for `key`, and that the message names the key and the file.
    fn bad(value: Value, key: &str) -> String {
        let err = load(value).unwrap_err();
        match &err {
            ConfigError::InvalidValue { key: k, path, .. } => {
                assert_eq!(k, key);
                assert_eq!(path, Path::new("/st/config.json"));
            }
            other => panic!("expected InvalidValue for {key}, got {other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains(key), "{text}");
        assert!(text.contains("/st/config.json"), "{text}");
        text
    }

    fn temp() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("ad")
            .tempdir_in("/tmp")
            .unwrap()
    }

    #[test]
    fn empty_object_gives_every_default() {
        let c = ok(json!({}));
        assert_eq!(c, Config::defaults(Path::new(STATE)));
        assert_eq!(c.wss_port, 8443);
        assert_eq!(c.key_path, Path::new("/st/key.pem"));
        assert_eq!(c.grace_seconds, 600);
        assert_eq!(c.link_ttl_seconds, 300);
        assert_eq!(c.keepalive_interval_seconds, 15);
        assert_eq!(c.event_buffer_size, 256);
        assert_eq!(c.audit_retention_days, 30);
        assert_eq!(c.daemon_log_max_bytes, 10_485_760);
        assert_eq!(c.events_log_max_bytes, 10_485_760);
        assert_eq!(c.policy, Policy::default());
        assert_eq!(c.advertised_ip, None);
        assert_eq!(c.scheme, None);
        assert!(!c.restart_daemon_on_version_mismatch);
        assert!(c.web_origins.is_empty());
        assert_eq!(c.config_path, Path::new("/st/config.json"));
    }

    #[test]
    fn spec_example_loads() {
        let c = ok(json!({
            "wssPort": 0,
            "advertisedIp": "192.168.50.12",
            "graceSeconds": 120,
            "policy": {
                "default": "allow",
                "destructive": "prompt",
                "tools": { "galaxy-s24/wipe_local_cache": "deny" }
            },
            "webOrigins": ["http://devbox.lan:5173"]
        }));
        assert_eq!(c.wss_port, 0);
        assert_eq!(c.advertised_ip, Some("192.168.50.12".parse().unwrap()));
        assert_eq!(c.grace_seconds, 120);
        assert_eq!(c.policy.destructive, Decision::Prompt);
        assert_eq!(
            c.policy.tools.get("galaxy-s24/wipe_local_cache"),
            Some(&Decision::Deny)
        );
        assert_eq!(c.web_origins, ["http://devbox.lan:5173"]);
    }

    #[test]
    fn wss_port() {
        assert_eq!(ok(json!({"wssPort": 65535})).wss_port, 65535);
        assert_eq!(ok(json!({"wssPort": 9000.0})).wss_port, 9000);
        let msg = bad(json!({"wssPort": 65536}), "wssPort");
        assert!(msg.contains("0 to 65535"), "{msg}");
        bad(json!({"wssPort": -1}), "wssPort");
        bad(json!({"wssPort": 1.5}), "wssPort");
        bad(json!({"wssPort": "8443"}), "wssPort");
    }

    #[test]
    fn key_path() {
        assert_eq!(
            ok(json!({"keyPath": "keys/host.pem"})).key_path,
            Path::new("/st/keys/host.pem")
        );
        assert_eq!(
            ok(json!({"keyPath": "/etc/appduct/key.pem"})).key_path,
            Path::new("/etc/appduct/key.pem")
        );
        // `~` is not expanded.
        assert_eq!(
            ok(json!({"keyPath": "~/k.pem"})).key_path,
            Path::new("/st/~/k.pem")
        );
        bad(json!({"keyPath": ""}), "keyPath");
        bad(json!({"keyPath": 5}), "keyPath");
        bad(json!({"keyPath": "a\u{0}b"}), "keyPath");
    }

    #[test]
    fn positive_integer_keys() {
        type Get = fn(&Config) -> u64;
        let keys: [(&str, Get); 6] = [
            ("graceSeconds", |c| c.grace_seconds.into()),
            ("keepaliveIntervalSeconds", |c| {
                c.keepalive_interval_seconds.into()
            }),
            ("eventBufferSize", |c| c.event_buffer_size.into()),
            ("auditRetentionDays", |c| c.audit_retention_days.into()),
            ("daemonLogMaxBytes", |c| c.daemon_log_max_bytes),
            ("eventsLogMaxBytes", |c| c.events_log_max_bytes),
        ];
        for (key, get) in keys {
            assert_eq!(get(&ok(json!({ key: 1 }))), 1, "{key}");
            assert_eq!(get(&ok(json!({ key: 2147483647 }))), 2_147_483_647, "{key}");
            assert_eq!(get(&ok(json!({ key: 1e3 }))), 1000, "{key}");
            for invalid in [
                json!(0),
                json!(-5),
                json!(2147483648u64),
                json!(2.5),
                json!("10"),
                json!(true),
                json!([1]),
            ] {
                let msg = bad(json!({ key: invalid }), key);
                assert!(msg.contains("positive integer"), "{msg}");
            }
        }
    }

    #[test]
    fn registry_section() {
        assert!(ok(json!({})).registry_require.is_empty());
        let c = ok(json!({"registry": {"require": ["testCases", "riskLevel", "testCases"]}}));
        assert_eq!(c.registry_require, ["testCases", "riskLevel"]);
        assert!(ok(json!({"registry": {}})).registry_require.is_empty());
        bad(
            json!({"registry": {"require": ["risk"]}}),
            "registry.require",
        );
        bad(
            json!({"registry": {"require": "riskLevel"}}),
            "registry.require",
        );
        bad(json!({"registry": []}), "registry");
    }

    #[test]
    fn results_section() {
        assert_eq!(ok(json!({})).results, ResultsConfig::default());
        assert_eq!(ResultsConfig::default().max_bytes, 16_777_216);
        assert_eq!(ResultsConfig::default().max_buffered_bytes, 67_108_864);
        let c = ok(json!({"results": {"maxBytes": 262144, "maxBufferedBytes": 1048576}}));
        assert_eq!(c.results.max_bytes, 262_144);
        assert_eq!(c.results.max_buffered_bytes, 1_048_576);
        let c = ok(json!({"results": {"retainCount": 0, "retainBytes": 1024}}));
        assert_eq!((c.results.retain_count, c.results.retain_bytes), (0, 1024));
        bad(
            json!({"results": {"retainCount": 100001}}),
            "results.retainCount",
        );
        bad(
            json!({"results": {"retainBytes": -1}}),
            "results.retainBytes",
        );
        bad(json!({"results": {"maxBytes": 262143}}), "results.maxBytes");
        bad(
            json!({"results": {"maxBytes": 16777217}}),
            "results.maxBytes",
        );
        bad(
            json!({"results": {"maxBufferedBytes": 1}}),
            "results.maxBufferedBytes",
        );
        bad(json!({"results": 5}), "results");
    }

    #[test]
    fn validation_section() {
        assert_eq!(
            ok(json!({})).validation.arguments,
            ArgumentValidation::Enforce
        );
        assert_eq!(
            ok(json!({"validation": {"arguments": "off"}}))
                .validation
                .arguments,
            ArgumentValidation::Off
        );
        assert_eq!(
            ok(json!({"validation": {"arguments": "enforce"}}))
                .validation
                .arguments,
            ArgumentValidation::Enforce
        );
        let msg = bad(
            json!({"validation": {"arguments": "warn"}}),
            "validation.arguments",
        );
        assert!(msg.contains("\"off\" or \"enforce\""), "{msg}");
        bad(json!({"validation": "off"}), "validation");
    }

    #[test]
    fn link_ttl_seconds_is_capped_at_a_day() {
        assert_eq!(
            ok(json!({"linkTtlSeconds": 86400})).link_ttl_seconds,
            86_400
        );
        assert_eq!(ok(json!({"linkTtlSeconds": 1})).link_ttl_seconds, 1);
        let msg = bad(json!({"linkTtlSeconds": 86401}), "linkTtlSeconds");
        assert!(msg.contains("1 to 86400"), "{msg}");
        bad(json!({"linkTtlSeconds": 0}), "linkTtlSeconds");
    }

    #[test]
    fn consent_section() {
        let c = ok(json!({}));
        assert_eq!(c.consent, ConsentConfig::default());
        assert_eq!(c.consent.fallback, ConsentFallback::Deny);
        let c = ok(
            json!({"consent": {"fallback": "operator", "approvalTimeoutMs": 30000,
            "operatorRequiresTerminal": false}}),
        );
        assert_eq!(c.consent.fallback, ConsentFallback::Operator);
        assert_eq!(c.consent.approval_timeout_ms, 30_000);
        assert!(!c.consent.operator_requires_terminal);
        bad(json!({"consent": {"fallback": "ask"}}), "consent.fallback");
        bad(
            json!({"consent": {"approvalTimeoutMs": 999}}),
            "consent.approvalTimeoutMs",
        );
        bad(
            json!({"consent": {"approvalTimeoutMs": 600001}}),
            "consent.approvalTimeoutMs",
        );
        bad(
            json!({"consent": {"operatorRequiresTerminal": 1}}),
            "consent.operatorRequiresTerminal",
        );
        bad(json!({"consent": true}), "consent");
    }

    #[test]
    fn policy_decisions() {
        let c = ok(json!({"policy": {"default": "deny", "destructive": "prompt"}}));
        assert_eq!(c.policy.default, Decision::Deny);
        assert_eq!(c.policy.destructive, Decision::Prompt);
        assert!(c.policy.tools.is_empty());
        // Omitted members keep their defaults.
        let c = ok(json!({"policy": {"destructive": "deny"}}));
        assert_eq!(c.policy.default, Decision::Allow);

        let msg = bad(json!({"policy": {"default": "Allow"}}), "policy.default");
        assert!(msg.contains(r#""allow", "deny" or "prompt""#), "{msg}");
        bad(
            json!({"policy": {"destructive": "block"}}),
            "policy.destructive",
        );
        bad(json!({"policy": "allow"}), "policy");
        bad(json!({"policy": {"tools": []}}), "policy.tools");
    }

    #[test]
    fn policy_tool_keys_and_values() {
        let c = ok(json!({"policy": {"tools": {
            "pixel-8/reset_counter": "deny",
            "a1/T-x_9": "prompt",
            "x/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa": "allow"
        }}}));
        assert_eq!(c.policy.tools.len(), 3);
        assert_eq!(
            c.policy.tools.get("pixel-8/reset_counter"),
            Some(&Decision::Deny)
        );

        let msg = bad(
            json!({"policy": {"tools": {"Pixel 8/reset": "deny"}}}),
            r#"policy.tools["Pixel 8/reset"]"#,
        );
        assert!(msg.contains(r#"key must be "<alias>/<tool>""#), "{msg}");
        for key in [
            "pixel-8",
            "pixel--8/x",
            "-pixel/x",
            "pixel-/x",
            "pixel/",
            "pixel/a/b",
            "pixel/a.b",
            "/x",
        ] {
            bad(
                json!({"policy": {"tools": { key: "deny" }}}),
                &format!("policy.tools[{}]", Value::String(key.into())),
            );
        }
        let too_long = format!("x/{}", "a".repeat(65));
        bad(
            json!({"policy": {"tools": { too_long.clone(): "deny" }}}),
            &format!("policy.tools[\"{too_long}\"]"),
        );
        bad(
            json!({"policy": {"tools": {"pixel-8/reset": "no"}}}),
            r#"policy.tools["pixel-8/reset"]"#,
        );
    }

    #[test]
    fn policy_serialises_like_daemon_status() {
        let c = ok(json!({"policy": {"destructive": "prompt",
            "tools": {"pixel-8/reset_counter": "deny"}}}));
        assert_eq!(
            serde_json::to_value(&c.policy).unwrap(),
            json!({"default": "allow", "destructive": "prompt",
                   "tools": {"pixel-8/reset_counter": "deny"}})
        );
        // `tools` is omitted when empty.
        assert_eq!(
            serde_json::to_value(Policy::default()).unwrap(),
            json!({"default": "allow", "destructive": "allow"})
        );
        assert_eq!(Decision::Prompt.to_string(), "prompt");
    }

    #[test]
    fn unknown_policy_keys_warn() {
        let loaded = load(json!({"policy": {"defualt": "deny", "x": 1}})).unwrap();
        let keys: Vec<_> = loaded
            .warnings
            .iter()
            .map(|w| match w {
                ConfigWarning::UnknownKey { key, .. } => key.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(keys, ["policy.defualt", "policy.x"]);
        assert_eq!(loaded.config.policy, Policy::default());
    }

    #[test]
    fn advertised_ip() {
        assert_eq!(
            ok(json!({"advertisedIp": "fd00::1"})).advertised_ip,
            Some("fd00::1".parse().unwrap())
        );
        assert_eq!(
            ok(json!({"advertisedIp": "10.0.0.5"})).advertised_ip,
            Some("10.0.0.5".parse().unwrap())
        );
        let msg = bad(json!({"advertisedIp": "devbox.lan"}), "advertisedIp");
        assert!(msg.contains("IPv4 or IPv6 literal"), "{msg}");
        bad(json!({"advertisedIp": "[fd00::1]"}), "advertisedIp");
        bad(json!({"advertisedIp": "10.0.0.256"}), "advertisedIp");
        bad(json!({"advertisedIp": 10}), "advertisedIp");
    }

    #[test]
    fn scheme() {
        assert_eq!(
            ok(json!({"scheme": "shopdemo"})).scheme.as_deref(),
            Some("shopdemo")
        );
        assert_eq!(
            ok(json!({"scheme": "a+b.c-d"})).scheme.as_deref(),
            Some("a+b.c-d")
        );
        let max = format!("a{}", "b".repeat(63));
        assert_eq!(ok(json!({"scheme": max.clone()})).scheme, Some(max.clone()));
        let msg = bad(json!({"scheme": "myapp://"}), "scheme");
        assert!(msg.contains("myapp"), "{msg}");
        for invalid in ["", "1app", "HTTP", "https", "File", "ws", "WSS", "my app"] {
            bad(json!({ "scheme": invalid }), "scheme");
        }
        bad(json!({"scheme": format!("{max}c")}), "scheme");
        bad(json!({"scheme": 1}), "scheme");
    }

    #[test]
    fn restart_daemon_on_version_mismatch() {
        assert!(
            ok(json!({"restartDaemonOnVersionMismatch": true})).restart_daemon_on_version_mismatch
        );
        assert!(
            !ok(json!({"restartDaemonOnVersionMismatch": false}))
                .restart_daemon_on_version_mismatch
        );
        let msg = bad(
            json!({"restartDaemonOnVersionMismatch": "true"}),
            "restartDaemonOnVersionMismatch",
        );
        assert!(msg.contains("true or false"), "{msg}");
        bad(
            json!({"restartDaemonOnVersionMismatch": 1}),
            "restartDaemonOnVersionMismatch",
        );
    }

    #[test]
    fn http_key() {
        assert_eq!(ok(json!({})).http, None);
        assert_eq!(ok(json!({"http": {}})).http, None);
        assert_eq!(
            ok(json!({"http": {"port": 8765, "corsOrigins": ["http://localhost:5173"]}})).http,
            Some(HttpConfig {
                port: 8765,
                cors_origins: vec!["http://localhost:5173".into()]
            })
        );
        assert_eq!(ok(json!({"http": {"port": 0}})).http.unwrap().port, 0);
        bad(json!({"http": 8765}), "http");
        bad(json!({"http": {"port": 70000}}), "http.port");
        bad(json!({"http": {"port": "8765"}}), "http.port");
        bad(
            json!({"http": {"port": 1, "corsOrigins": ["*"]}}),
            "http.corsOrigins[0]",
        );
        let loaded = load(json!({"http": {"prot": 1}})).unwrap();
        assert_eq!(loaded.config.http, None);
        assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    }

    #[test]
    fn write_http_port_keeps_other_keys() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            r#"{"wssPort": 0, "http": {"corsOrigins": ["http://a.b"]}}"#,
        )
        .unwrap();
        write_http_port(dir.path(), Some(9000)).unwrap();
        let c = Config::load(dir.path()).unwrap().config;
        assert_eq!(c.wss_port, 0);
        assert_eq!(
            c.http,
            Some(HttpConfig {
                port: 9000,
                cors_origins: vec!["http://a.b".into()]
            })
        );
        write_http_port(dir.path(), None).unwrap();
        let c = Config::load(dir.path()).unwrap().config;
        assert_eq!((c.wss_port, c.http), (0, None));
    }

    #[test]
    fn web_origins() {
        let valid = [
            "http://devbox.lan:5173",
            "https://example.com",
            "HTTP://Example.COM:80",
            "http://192.168.1.5:8080",
            "http://[::1]:3000",
            "https://[fd00::1]",
            "http://my_host",
        ];
        let c = ok(json!({ "webOrigins": valid }));
        assert_eq!(c.web_origins, valid);
        assert!(ok(json!({"webOrigins": []})).web_origins.is_empty());

        let msg = bad(json!({"webOrigins": "http://a.b"}), "webOrigins");
        assert!(msg.contains("array"), "{msg}");
        for invalid in [
            "*",
            "null",
            "http://devbox.lan:5173/",
            "http://devbox.lan/app",
            "http://a.b?x=1",
            "http://a.b#f",
            "ftp://a.b",
            "http://",
            "http://:80",
            "http://a.b:",
            "http://a.b:65536",
            "http://a.b:8080x",
            "http://user@a.b",
            "http://a..b",
            "http://[nothex]:1",
            "http://[::1]x",
            "devbox.lan:5173",
        ] {
            bad(
                json!({ "webOrigins": ["http://ok.lan", invalid] }),
                "webOrigins[1]",
            );
        }
        bad(json!({"webOrigins": [5]}), "webOrigins[0]");
        bad(json!({"webOrigins": [null]}), "webOrigins[0]");
    }

    #[test]
    fn null_is_invalid_for_every_key() {
        for key in [
            "wssPort",
            "keyPath",
            "graceSeconds",
            "linkTtlSeconds",
            "keepaliveIntervalSeconds",
            "eventBufferSize",
            "auditRetentionDays",
            "daemonLogMaxBytes",
            "eventsLogMaxBytes",
            "policy",
            "advertisedIp",
            "scheme",
            "restartDaemonOnVersionMismatch",
            "webOrigins",
            "results",
        ] {
            let msg = bad(json!({ key: null }), key);
            assert!(msg.ends_with("got null"), "{msg}");
        }
        for key in ["default", "destructive", "tools"] {
            bad(json!({"policy": { key: null }}), &format!("policy.{key}"));
        }
    }

    #[test]
    fn unknown_keys_warn_once_each_and_do_not_stop() {
        let loaded = load(json!({"graceSecond": 5, "wssPort": 1, "extra": null})).unwrap();
        assert_eq!(loaded.config.wss_port, 1);
        assert_eq!(
            loaded.warnings,
            [
                ConfigWarning::UnknownKey {
                    path: PathBuf::from("/st/config.json"),
                    key: "graceSecond".into()
                },
                ConfigWarning::UnknownKey {
                    path: PathBuf::from("/st/config.json"),
                    key: "extra".into()
                },
            ]
        );
        assert!(loaded.warnings[0].to_string().contains("\"graceSecond\""));
    }

    #[test]
    fn non_json_and_non_object_name_the_file() {
        let err = Config::from_slice(b"{ wssPort: 1 }", Path::new(STATE)).unwrap_err();
        assert!(matches!(err, ConfigError::NotJson { .. }));
        assert!(err.to_string().contains("/st/config.json"), "{err}");
        assert!(matches!(
            Config::from_slice(b"", Path::new(STATE)),
            Err(ConfigError::NotJson { .. })
        ));
        for text in ["[]", "null", "\"x\"", "3"] {
            let err = Config::from_slice(text.as_bytes(), Path::new(STATE)).unwrap_err();
            assert!(matches!(err, ConfigError::NotObject { .. }), "{text}");
            assert!(err.to_string().contains("/st/config.json"));
        }
    }

    #[test]
    fn load_reads_the_file_or_defaults_when_missing() {
        let tmp = temp();
        let loaded = Config::load(tmp.path()).unwrap();
        assert_eq!(loaded.config, Config::defaults(tmp.path()));
        assert!(loaded.warnings.is_empty());

        let path = tmp.path().join("config.json");
        std::fs::write(&path, br#"{"graceSeconds": 42}"#).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let loaded = Config::load(tmp.path()).unwrap();
        assert_eq!(loaded.config.grace_seconds, 42);
        assert!(loaded.warnings.is_empty());

        std::fs::write(&path, b"not json").unwrap();
        assert!(matches!(
            Config::load(tmp.path()),
            Err(ConfigError::NotJson { .. })
        ));

        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let err = Config::load(tmp.path()).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
    }

    /// SECURITY.md 4.5 (defect 7 of #20): `config.json` is a read-only input the user owns, so
    /// a symlink there is followed on purpose (dotfile managers); appduct never writes it.
    #[test]
    fn a_symlinked_config_json_is_followed() {
        let tmp = temp();
        let dotfiles = tmp.path().join("dotfiles");
        std::fs::create_dir(&dotfiles).unwrap();
        let real = dotfiles.join("appduct.json");
        std::fs::write(&real, br#"{"graceSeconds": 42}"#).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        let state = tmp.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::os::unix::fs::symlink(&real, state.join("config.json")).unwrap();

        let loaded = Config::load(&state).unwrap();
        assert_eq!(loaded.config.grace_seconds, 42);
        assert_eq!(std::fs::read(&real).unwrap(), br#"{"graceSeconds": 42}"#);
    }

    #[test]
    fn group_or_other_writable_file_warns() {
        let tmp = temp();
        let path = tmp.path().join("config.json");
        std::fs::write(&path, b"{}").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(Config::warn_if_group_or_other_writable(&path), None);

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o664)).unwrap();
        let loaded = Config::load(tmp.path()).unwrap();
        assert_eq!(
            loaded.warnings,
            [ConfigWarning::GroupOrOtherWritable {
                path: path.clone(),
                mode: 0o664
            }]
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o602)).unwrap();
        assert!(Config::warn_if_group_or_other_writable(&path).is_some());
        assert_eq!(
            Config::warn_if_group_or_other_writable(&tmp.path().join("absent")),
            None
        );
    }

    #[test]
    fn rotation_threshold_falls_back_to_the_default() {
        let tmp = temp();
        assert_eq!(
            daemon_log_max_bytes_for_rotation(tmp.path()),
            DEFAULT_LOG_MAX_BYTES
        );
        let path = tmp.path().join("config.json");
        std::fs::write(&path, br#"{"daemonLogMaxBytes": 1000}"#).unwrap();
        assert_eq!(daemon_log_max_bytes_for_rotation(tmp.path()), 1000);
        std::fs::write(&path, br#"{"daemonLogMaxBytes": 1000, "wssPort": "x"}"#).unwrap();
        assert_eq!(
            daemon_log_max_bytes_for_rotation(tmp.path()),
            DEFAULT_LOG_MAX_BYTES
        );
    }

    #[test]
    fn a_fifo_a_device_or_a_huge_file_at_config_json_is_refused_unread() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(CONFIG_FILE);
        // A FIFO nobody writes to: refused at once instead of blocking the reader.
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        let e = Config::load(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        assert!(write_policy(tmp.path(), &Policy::default()).is_err());
        std::fs::remove_file(&path).unwrap();
        // A symlink to an endless device: refused without reading it.
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        let e = Config::load(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_file(&path).unwrap();
        // Over the cap: refused, whatever it holds.
        let mut big = b"{\"graceSeconds\": 1".to_vec();
        big.resize(MAX_CONFIG_BYTES as usize + 10, b' ');
        big.push(b'}');
        std::fs::write(&path, &big).unwrap();
        let e = Config::load(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
        // At the cap it still loads.
        big.truncate(MAX_CONFIG_BYTES as usize - 1);
        big.push(b'}');
        std::fs::write(&path, &big).unwrap();
        assert_eq!(Config::load(tmp.path()).unwrap().config.grace_seconds, 1);
    }

    #[test]
    fn write_policy_keeps_other_keys_and_writes_0600_atomically() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(CONFIG_FILE);
        std::fs::write(
            &path,
            r#"{"zeta": 1, "wssPort": 0, "policy": {"note": "mine", "tools": {"a/b": "deny"}}, "alpha": true}"#,
        )
        .unwrap();
        let mut policy = Config::from_slice(&std::fs::read(&path).unwrap(), tmp.path())
            .unwrap()
            .config
            .policy;
        policy.tools.insert("pixel-*/re*".into(), Decision::Prompt);
        policy.default = Decision::Deny;
        write_policy(tmp.path(), &policy).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        // Unknown keys and their order kept; the policy's own unknown key kept.
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["zeta", "wssPort", "policy", "alpha"]);
        assert_eq!(v["policy"]["note"], "mine");
        assert_eq!(v["policy"]["default"], "deny");
        assert_eq!(v["policy"]["tools"]["pixel-*/re*"], "prompt");
        // It loads back to the same policy, and nothing else was left in the directory.
        let back = Config::from_slice(text.as_bytes(), tmp.path())
            .unwrap()
            .config;
        assert_eq!(back.policy, policy);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
        // A file that is not an object is refused and left alone.
        std::fs::write(&path, "[1]").unwrap();
        assert!(write_policy(tmp.path(), &policy).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[1]");
    }

    #[test]
    fn tool_keys_accept_globs_in_either_part() {
        for ok in [
            "pixel-8/reset",
            "*/reset",
            "pixel-*/wipe",
            "pixel-8/*",
            "*/*",
            "p*l-8/re*t",
        ] {
            assert!(is_valid_tool_key(ok), "{ok}");
        }
        for bad in [
            "Pixel 8/reset",
            "pixel-8",
            "/reset",
            "pixel-8/",
            "pixel--8/x",
            "a/b/c",
        ] {
            assert!(!is_valid_tool_key(bad), "{bad}");
        }
    }
}
