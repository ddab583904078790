//! Control-plane methods (§C8): names, params with their validation (§C5), results, the
//! shared shapes of §C9, events (§C13.1) and per-call notifications (§C10.5).
//!
//! The daemon validates with [`Method::validate`] (or [`ControlRequest::parse`] for dispatch by
//! name); clients build `Params` values with `new`/`default` and the `with_*` setters, and decode
//! `Result`s with serde, ignoring unknown keys. Optional result keys are omitted when absent,
//! never sent as `null`, except `group`.

use std::collections::BTreeMap;
use std::fmt::{self, Debug, Display};
use std::io;
use std::net::IpAddr;
use std::str::FromStr;

use serde::de::DeserializeOwned;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Number, Value};

use crate::errors::ErrorType;
use crate::jsonrpc::{ErrorObject, Notification, RequestId};
use crate::limits;
use crate::text::{as_finite, as_integer, json_depth};

// ---------------------------------------------------------------------------------------------
// Method trait and dispatch
// ---------------------------------------------------------------------------------------------

/// One control method: its wire name, params and result (ARCHITECTURE.md#the-client-crate).
pub trait Method {
    const NAME: &'static str;
    type Params: Serialize + DeserializeOwned + Debug + Clone + PartialEq + Send + 'static;
    type Result: Serialize + DeserializeOwned + Debug + Clone + PartialEq + Send + 'static;

    /// Validates raw `params` (absent or `null` = `{}`) under §C5 and the method's table.
    fn validate(params: Option<&Value>) -> Result<Self::Params, ParamError>;
}

macro_rules! methods {
    ($( $(#[$doc:meta])* $ty:ident = $name:literal, $params:ty => $result:ty; )*) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
            pub struct $ty;

            impl Method for $ty {
                const NAME: &'static str = $name;
                type Params = $params;
                type Result = $result;
                fn validate(params: Option<&Value>) -> Result<$params, ParamError> {
                    <$params>::validate(params)
                }
            }
        )*

        /// Every method of §C8, in the order of its summary table.
        pub const METHODS: &[&str] = &[$($name),*];

        /// A validated request, for dispatch by method name.
        #[derive(Debug, Clone, PartialEq)]
        pub enum ControlRequest {
            $( $ty($params), )*
        }

        impl ControlRequest {
            /// Resolves `method` and validates `params`: an unknown or reserved method is
            /// `-32601` (§C3.1, §C8.16), bad params `-32602` (§C5).
            pub fn parse(method: &str, params: Option<&Value>) -> Result<Self, ErrorObject> {
                match method {
                    $( $name => <$ty as Method>::validate(params)
                        .map(Self::$ty)
                        .map_err(ErrorObject::from), )*
                    _ => Err(ErrorObject::method_not_found(method)),
                }
            }

            /// [`parse`](Self::parse) of params the caller owns: a `tools.call`'s `args` move
            /// into the request instead of being copied (issue #24).
            pub fn parse_owned(method: &str, params: Option<Value>) -> Result<Self, ErrorObject> {
                if method == <ToolsCall as Method>::NAME {
                    return ToolsCallParams::validate_owned(params)
                        .map(Self::ToolsCall)
                        .map_err(ErrorObject::from);
                }
                Self::parse(method, params.as_ref())
            }

            /// The method name of this request.
            pub fn method(&self) -> &'static str {
                match self {
                    $( Self::$ty(_) => $name, )*
                }
            }
        }
    };
}

methods! {
    /// `daemon.hello` (§C8.1).
    DaemonHello = "daemon.hello", HelloParams => HelloResult;
    /// `daemon.status` (§C8.2).
    DaemonStatus = "daemon.status", NoParams => StatusResult;
    /// `daemon.shutdown` (§C8.3).
    DaemonShutdown = "daemon.shutdown", NoParams => OkResult;
    /// `link.create` (§C8.4).
    LinkCreate = "link.create", LinkCreateParams => LinkCreateResult;
    /// `consent.create` (§C8.14).
    ConsentCreate = "consent.create", ConsentCreateParams => ConsentCreateResult;
    /// `consent.take` (§C8.14).
    ConsentTake = "consent.take", ConsentTakeParams => ConsentRecord;
    /// `sessions.list` (§C8.5).
    SessionsList = "sessions.list", NoParams => Vec<SessionSummary>;
    /// `sessions.describe` (§C8.6).
    SessionsDescribe = "sessions.describe", SelectorParams => SessionSummary;
    /// `sessions.revoke` (§C8.7).
    SessionsRevoke = "sessions.revoke", SelectorParams => RevokeResult;
    /// `tools.list` (§C8.8).
    ToolsList = "tools.list", ToolsListParams => ToolsListResult;
    /// `tools.call` (§C8.9).
    ToolsCall = "tools.call", ToolsCallParams => ToolsCallResult;
    /// `tools.cancel` (§C8.10).
    ToolsCancel = "tools.cancel", ToolsCancelParams => ToolsCancelResult;
    /// `events.list` (§C8.11).
    EventsList = "events.list", EventsListParams => EventsListResult;
    /// `events.subscribe` (§C8.12).
    EventsSubscribe = "events.subscribe", SubscribeParams => SubscribeResult;
    /// `events.since` (§C8.13).
    EventsSince = "events.since", EventsSinceParams => EventsSinceResult;
    /// `approvals.list` (§C8.17).
    ApprovalsList = "approvals.list", NoParams => ApprovalsListResult;
    /// `approvals.challenge` (§C8.18).
    ApprovalsChallenge = "approvals.challenge", ApprovalIdParams => ApprovalChallengeResult;
    /// `approvals.decide` (§C8.19).
    ApprovalsDecide = "approvals.decide", ApprovalsDecideParams => ApprovalsDecideResult;
    /// `grants.list` (§C8.20).
    GrantsList = "grants.list", NoParams => GrantsListResult;
    /// `grants.revoke` (§C8.21).
    GrantsRevoke = "grants.revoke", GrantsRevokeParams => GrantsRevokeResult;
    /// `policy.list` (§C8.30).
    PolicyList = "policy.list", NoParams => PolicyListResult;
    /// `policy.set` (§C8.31).
    PolicySet = "policy.set", PolicySetParams => PolicyChangeResult;
    /// `policy.reset` (§C8.32).
    PolicyReset = "policy.reset", PolicyResetParams => PolicyChangeResult;
    /// `daemon.reload` (§C8.33).
    DaemonReload = "daemon.reload", NoParams => ReloadResult;
    /// `calls.list` (§C8.40).
    CallsList = "calls.list", NoParams => CallsListResult;
    /// `sessions.lease` (§C8.41).
    SessionsLease = "sessions.lease", SessionsLeaseParams => SessionsLeaseResult;
    /// `sessions.release` (§C8.42).
    SessionsRelease = "sessions.release", SelectorParams => SessionsReleaseResult;
    /// `tools.result` (§C8.43).
    ToolsResult = "tools.result", ToolsResultParams => ToolsResultResult;
}

/// Names reserved for later waves; the daemon answers `-32601` for them (§C8.16).
pub fn is_reserved_method(method: &str) -> bool {
    method == "web.attach" || ["tasks.", "leases."].iter().any(|p| method.starts_with(p))
}

/// Capability strings of `daemon.hello` `features` (§C8.1).
pub mod features {
    pub const CALLS_CALL_ID: &str = "calls.callId";
    pub const CALLS_PROGRESS: &str = "calls.progress";
    pub const CONSENT_RECORDS: &str = "consent.records";
    pub const EVENTS_SUBSCRIBE_SINCE: &str = "events.subscribe.since";
    pub const EVENTS_LIST: &str = "events.list";
    pub const TOOLS_GROUPS: &str = "tools.groups";
    /// `approvals.*` and `grants.*` (§C8.17–§C8.21).
    pub const APPROVALS: &str = "approvals";
    /// `sessions.lease`, `sessions.release` and `session_leased` (§C8.41, §C10.9).
    pub const SESSIONS_LEASE: &str = "sessions.lease";
    /// `tools.result` over a retention window of settled calls (§C8.43, §C10.10).
    pub const CALLS_RESULTS: &str = "calls.results";
    /// Everything this crate's control protocol offers, in the order of §C8.1.
    pub const ALL: &[&str] = &[
        CALLS_CALL_ID,
        CALLS_PROGRESS,
        CONSENT_RECORDS,
        EVENTS_SUBSCRIBE_SINCE,
        EVENTS_LIST,
        TOOLS_GROUPS,
        APPROVALS,
        SESSIONS_LEASE,
        CALLS_RESULTS,
    ];
}

/// What `Debug` prints in place of a secret (claim tokens inside link payloads, consent
/// handles).
const REDACTED: &str = "<redacted>";

/// Default `tools.cancel` reason (§C8.10).
pub const DEFAULT_CANCEL_REASON: &str = "client_cancelled";
/// Longest selector, characters (§C6).
pub const MAX_SELECTOR_LEN: usize = 128;
/// Longest `consent.take` handle, characters (§C8.14).
pub const MAX_CONSENT_HANDLE_LEN: usize = 128;
/// `daemon.hello` client name and version length bound (§C8.1).
pub const MAX_CLIENT_FIELD_LEN: usize = 64;
/// Longest `tools.cancel` reason (§C8.10).
pub const MAX_CANCEL_REASON_LEN: usize = 64;

// ---------------------------------------------------------------------------------------------
// Parameter errors and the shared reader of §C5
// ---------------------------------------------------------------------------------------------

/// A params validation failure: becomes a `-32602` `invalid_request` error whose message and
/// `details.param` name the parameter (§C5).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ParamError {
    message: String,
    details: Map<String, Value>,
}

impl ParamError {
    /// A failure of `param`; `message` must name it.
    pub fn new(param: &str, message: impl Into<String>) -> Self {
        let mut details = Map::new();
        details.insert("param".into(), Value::String(param.to_owned()));
        Self {
            message: message.into(),
            details,
        }
    }

    /// `Invalid parameter "<param>": <rule>`.
    pub fn invalid(param: &str, rule: impl Display) -> Self {
        Self::new(param, format!("Invalid parameter \"{param}\": {rule}"))
    }

    /// Adds one key to `details`.
    pub fn with_detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    /// `events.since` with `since` above the session's high-water mark (§C8.13); only the
    /// daemon knows the mark, so it raises this after validation.
    pub fn since_beyond_high_water_mark(since: u64, high_water_mark: u64) -> Self {
        Self::invalid(
            "since",
            format!("{since} is greater than the session's high-water mark {high_water_mark}"),
        )
        .with_detail("highWaterMark", high_water_mark)
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn details(&self) -> &Map<String, Value> {
        &self.details
    }

    /// The parameter named in `details.param`.
    pub fn param(&self) -> Option<&str> {
        self.details.get("param").and_then(Value::as_str)
    }
}

impl From<ParamError> for ErrorObject {
    fn from(e: ParamError) -> Self {
        ErrorObject::invalid_params(e.message, e.details)
    }
}

fn rule_len(min: usize, max: usize) -> String {
    if min == 0 {
        format!("must be a string of at most {max} characters")
    } else {
        format!("must be a string of {min} to {max} characters")
    }
}

fn rule_int(min: u64, max: u64) -> String {
    if max >= limits::MAX_SAFE_INTEGER {
        format!("must be an integer of at least {min}")
    } else {
        format!("must be an integer from {min} to {max}")
    }
}

/// A params object (or a nested one) under the common rules: `null` values are absent, unknown
/// keys are rejected.
struct Obj<'a> {
    map: Option<&'a Map<String, Value>>,
    prefix: String,
}

impl<'a> Obj<'a> {
    fn params(params: Option<&'a Value>, accepted: &[&str]) -> Result<Self, ParamError> {
        Self::at(params, "params", String::new(), accepted)
    }

    fn at(
        value: Option<&'a Value>,
        name: &str,
        prefix: String,
        accepted: &[&str],
    ) -> Result<Self, ParamError> {
        let map = match value {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m),
            Some(_) => return Err(ParamError::invalid(name, "must be an object")),
        };
        if let Some(m) = map {
            let unknown: Vec<&String> = m
                .iter()
                .filter(|(k, v)| !v.is_null() && !accepted.contains(&k.as_str()))
                .map(|(k, _)| k)
                .collect();
            if let Some(first) = unknown.first() {
                let list = |keys: &mut dyn Iterator<Item = &str>| {
                    keys.map(|k| format!("\"{prefix}{k}\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let accepted_text = if accepted.is_empty() {
                    "this method takes no parameters".to_owned()
                } else {
                    format!("accepted: {}", list(&mut accepted.iter().copied()))
                };
                let message = format!(
                    "Unknown parameter {} ({accepted_text})",
                    list(&mut unknown.iter().map(|k| k.as_str()))
                );
                return Err(ParamError::new(&format!("{prefix}{first}"), message)
                    .with_detail(
                        "unknownKeys",
                        unknown.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
                    )
                    .with_detail("acceptedKeys", accepted.to_vec()));
            }
        }
        Ok(Self { map, prefix })
    }

    fn name(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map?.get(key).filter(|v| !v.is_null())
    }

    fn nested(&self, key: &str, accepted: &[&str]) -> Result<Option<Obj<'a>>, ParamError> {
        match self.get(key) {
            None => Ok(None),
            v => Obj::at(v, &self.name(key), format!("{}.", self.name(key)), accepted).map(Some),
        }
    }

    /// A string of `min..=max` characters (Unicode scalar values, §C5).
    fn string(&self, key: &str, min: usize, max: usize) -> Result<Option<String>, ParamError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if (min..=max).contains(&s.chars().count()) => {
                Ok(Some(s.clone()))
            }
            Some(_) => Err(ParamError::invalid(&self.name(key), rule_len(min, max))),
        }
    }

    /// A string of any length, the empty one included.
    fn any_string(&self, key: &str) -> Result<Option<String>, ParamError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ParamError::invalid(&self.name(key), "must be a string")),
        }
    }

    fn required<T>(&self, key: &str, v: Option<T>) -> Result<T, ParamError> {
        v.ok_or_else(|| {
            let name = self.name(key);
            ParamError::new(&name, format!("Missing required parameter \"{name}\""))
        })
    }

    /// A string that must also satisfy `valid`, described by `rule`.
    fn pattern(
        &self,
        key: &str,
        valid: fn(&str) -> bool,
        rule: &str,
    ) -> Result<Option<String>, ParamError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if valid(s) => Ok(Some(s.clone())),
            Some(_) => Err(ParamError::invalid(&self.name(key), rule)),
        }
    }

    /// An integer within `min..=max` under the wire rule (`2.0` passes, `1.5` fails).
    fn integer(&self, key: &str, min: u64, max: u64) -> Result<Option<u64>, ParamError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        as_integer(v)
            .and_then(|i| u64::try_from(i).ok())
            .filter(|i| (min..=max).contains(i))
            .map(Some)
            .ok_or_else(|| ParamError::invalid(&self.name(key), rule_int(min, max)))
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>, ParamError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(ParamError::invalid(&self.name(key), "must be a boolean")),
        }
    }

    /// A wire enum decoded from its string form.
    fn enumeration<T: FromStr>(&self, key: &str, rule: &str) -> Result<Option<T>, ParamError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => s
                .parse()
                .map(Some)
                .map_err(|_| ParamError::invalid(&self.name(key), rule)),
            Some(_) => Err(ParamError::invalid(&self.name(key), rule)),
        }
    }

    /// A session selector: 1–128 characters (§C6).
    fn selector(&self, key: &str) -> Result<Option<String>, ParamError> {
        self.string(key, 1, MAX_SELECTOR_LEN)
    }

    /// A name glob: 1–4096 characters (§C13.5). Matching lives in [`crate::glob`].
    fn glob(&self, key: &str) -> Result<Option<String>, ParamError> {
        self.string(key, 1, limits::MAX_GLOB_LEN)
    }
}

/// `^[A-Za-z0-9_-]{1,128}$` (§C10.2).
pub fn is_valid_call_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `[a-z0-9_]{1,64}` (§C8.10).
pub fn is_valid_cancel_reason(s: &str) -> bool {
    (1..=MAX_CANCEL_REASON_LEN).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

pub use crate::descriptor::is_valid_group;

/// 64 lower-case hex digits (§C8.14).
pub fn is_valid_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Byte length of `v` serialised as compact JSON, without building the string.
pub fn compact_json_len(v: &Value) -> usize {
    struct Counter(usize);
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter(0);
    // Serialising a `Value` into a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// `clamp(x) = min(600000, max(1000, trunc(x)))` of §C10.3.
pub fn clamp_timeout_ms(x: f64) -> u64 {
    let t = x.trunc().clamp(
        limits::MIN_CALL_TIMEOUT_MS as f64,
        limits::MAX_CALL_TIMEOUT_MS as f64,
    );
    // Within [1000, 600000] and integral, so exact.
    t as u64
}

fn is_false(b: &bool) -> bool {
    !*b
}

// ---------------------------------------------------------------------------------------------
// Small wire enums
// ---------------------------------------------------------------------------------------------

macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $wire:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
        pub enum $name {
            $( #[serde(rename = $wire)] $variant, )+
        }

        impl $name {
            pub const ALL: &[$name] = &[$(Self::$variant),+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $wire, )+
                }
            }
        }

        impl FromStr for $name {
            type Err = UnknownValue;
            fn from_str(s: &str) -> Result<Self, UnknownValue> {
                match s {
                    $( $wire => Ok(Self::$variant), )+
                    _ => Err(UnknownValue(s.to_owned())),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// A string outside a wire enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown value {0:?}")]
pub struct UnknownValue(pub String);

wire_enum! {
    /// Listener a link or session belongs to (§D2.4); `sealed` is ours (issue #23): the plain
    /// route of the wss port with a Noise channel inside.
    Transport { Native = "native", Web = "web", Sealed = "sealed" }
}
wire_enum! {
    /// Where a sealed app's Noise ephemeral key came from, as it said in handshake message 1
    /// (issue #23): the platform CSPRNG, or the HMAC-DRBG seeded from tokens and timing.
    RngSource { Csprng = "csprng", Drbg = "drbg" }
}
wire_enum! {
    /// `SessionSummary.state` (§C9.1).
    SessionState { Active = "active", Suspended = "suspended" }
}
wire_enum! {
    /// Why a session is suspended (§C9.1).
    SuspendReason { AppBackgrounded = "app_backgrounded", ConnectionLost = "connection_lost" }
}
wire_enum! {
    /// `SessionSummary.registry` (issue #23; ours): whether the app's first
    /// `tool_registry_snapshot` since the claim has arrived.
    RegistryState { Pending = "pending", Received = "received" }
}

/// A daemon that does not report `registry` predates it: its waits resolved at the claim.
impl Default for RegistryState {
    fn default() -> Self {
        Self::Received
    }
}

wire_enum! {
    /// A policy decision (§C11).
    PolicyDecision { Allow = "allow", Deny = "deny", Prompt = "prompt" }
}
wire_enum! {
    /// Who issued a `tools.call` (§C8.9); `http` is the daemon's loopback HTTP API (§H4).
    Caller { Cli = "cli", Mcp = "mcp", Client = "client", Http = "http" }
}
wire_enum! {
    /// Consent attached to a `tools.call`; the legacy `"client"` is read as absent (§C8.9).
    Consent { Elicitation = "elicitation", Operator = "operator" }
}
wire_enum! {
    /// `sessions.revoke` result `revoked` (§C8.7).
    RevokedKind { Session = "session", Link = "link" }
}
wire_enum! {
    /// `daemon.status` `advertisedAddress.source` (§C8.2).
    AddressSource { Config = "config", Detected = "detected" }
}
wire_enum! {
    /// `session_revoked` `previousState` (§C13.1).
    PreviousState { Active = "active", Suspended = "suspended", Pending = "pending" }
}
wire_enum! {
    /// Outcome of a settled call (§C12.1).
    CallOutcome { Ok = "ok", Error = "error", Denied = "denied", Cancelled = "cancelled" }
}
wire_enum! {
    /// Why policy denied a call (§C11).
    DeniedReason {
        Policy = "policy",
        NoConsentChannel = "no_consent_channel",
        OperatorDenied = "operator_denied",
        ApprovalExpired = "approval_expired",
    }
}
wire_enum! {
    /// Every event kind (§C13.1).
    EventKind {
        DaemonStarted = "daemon_started",
        LinkCreated = "link_created",
        LinkExpired = "link_expired",
        LinkRefused = "link_refused",
        DeviceRefused = "device_refused",
        SessionClaimed = "session_claimed",
        SessionSuspended = "session_suspended",
        SessionResumed = "session_resumed",
        SessionRevoked = "session_revoked",
        SessionExpired = "session_expired",
        ToolsChanged = "tools_changed",
        EventsChanged = "events_changed",
        AppEvent = "app_event",
        ToolCallStarted = "tool_call_started",
        ToolCallProgress = "tool_call_progress",
        ToolCallFinished = "tool_call_finished",
        ApprovalPending = "approval_pending",
        ApprovalSettled = "approval_settled",
        PolicyChanged = "policy_changed",
        LeaseTaken = "lease_taken",
        LeaseReleased = "lease_released",
    }
}
wire_enum! {
    /// `approvals.decide` `decision` (§C8.19).
    ApprovalDecision { Approve = "approve", Deny = "deny" }
}
wire_enum! {
    /// How a pending approval ended (§C8.19, §C13.1).
    ApprovalVerdict {
        Approved = "approved",
        Denied = "denied",
        Expired = "expired",
        Cancelled = "cancelled",
    }
}
wire_enum! {
    /// `approvals.decide` `grant.scope` (§C8.19).
    GrantScope { Call = "call", Tool = "tool" }
}
wire_enum! {
    /// What a pending approval would let through (§C8.17): a parked tool call, or a policy
    /// change that loosens policy (§C11.2).
    ApprovalKind { Call = "call", Policy = "policy" }
}

// `wire_enum!` cannot mark a `#[default]` variant.
#[allow(clippy::derivable_impls)]
impl Default for ApprovalKind {
    fn default() -> Self {
        Self::Call
    }
}

impl ApprovalKind {
    /// For `skip_serializing_if`: `call` is left out, as before the field existed.
    pub fn is_call(&self) -> bool {
        *self == Self::Call
    }
}

// ---------------------------------------------------------------------------------------------
// Params
// ---------------------------------------------------------------------------------------------

/// Declares a params struct with each field's wire key written next to it, so the key is
/// defined once: serde renames the field to it, and `KEYS` lists the keys in declaration order,
/// which is what `validate` accepts and what an unknown-key error reports as `acceptedKeys`
/// (§C5). Each key is also an associated constant named after its field (`"ttlSeconds"` =>
/// `ttl_seconds` gives `TTL_SECONDS`), which `validate` uses instead of repeating the literal,
/// so a misspelt key does not compile. A field written `=> with_x` gets a `with_x` setter taking
/// anything that converts into the field's type (for an optional field: `T` or `Option<T>`).
/// The struct is `#[non_exhaustive]`: other crates start from `new`/`default` and chain setters.
macro_rules! params {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                $key:literal => pub $field:ident: $ty:ty $(=> $setter:ident)?,
            )*
        }
    ) => {
        $(#[$meta])*
        #[non_exhaustive]
        pub struct $name {
            $(
                $(#[$fmeta])*
                #[serde(rename = $key)]
                pub $field: $ty,
            )*
        }

        impl $name {
            /// The wire keys of this params object, in declaration order (§C5).
            pub const KEYS: &'static [&'static str] = &[$($key),*];

            pastey::paste! {
                $(
                    #[doc = concat!("The wire key `", $key, "`.")]
                    pub const [<$field:upper>]: &'static str = $key;
                )*
            }

            $($(
                #[must_use]
                pub fn $setter(mut self, value: impl Into<$ty>) -> Self {
                    self.$field = value.into();
                    self
                }
            )?)*
        }
    };
}

/// Params of methods that take none; `{}` is accepted (§C8.2).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
pub struct NoParams {}

impl NoParams {
    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        Obj::params(params, &[])?;
        Ok(Self {})
    }
}

params! {
    /// `daemon.hello` `client` (§C8.1).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct ClientInfo {
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 64)))]
        "name" => pub name: String,
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 64)))]
        "version" => pub version: String,
    }
}

impl ClientInfo {
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
        }
    }
}

params! {
    /// `daemon.hello` params (§C8.1).
    #[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct HelloParams {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        "client" => pub client: Option<ClientInfo> => with_client,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 1, max = crate::limits::MAX_SAFE_INTEGER)))]
        "controlProtocol" => pub control_protocol: Option<u64> => with_control_protocol,
    }
}

impl HelloParams {
    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        let client = match p.nested(Self::CLIENT, ClientInfo::KEYS)? {
            None => None,
            Some(c) => {
                let name = c.string(ClientInfo::NAME, 1, MAX_CLIENT_FIELD_LEN)?;
                let version = c.string(ClientInfo::VERSION, 1, MAX_CLIENT_FIELD_LEN)?;
                Some(ClientInfo {
                    name: c.required(ClientInfo::NAME, name)?,
                    version: c.required(ClientInfo::VERSION, version)?,
                })
            }
        };
        let control_protocol = p.integer(Self::CONTROL_PROTOCOL, 1, limits::MAX_SAFE_INTEGER)?;
        Ok(Self {
            client,
            control_protocol,
        })
    }
}

params! {
    /// `link.create` params (§C8.4).
    #[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    // Web links always use 127.0.0.1: no `addressOverride` with `transport: "web"`.
    #[cfg_attr(feature = "schemas", schemars(extend("allOf" = [{
        "if": {
            "required": ["transport", "addressOverride"],
            "properties": {"transport": {"const": "web"}, "addressOverride": {"type": "string"}}
        },
        "then": false
    }])))]
    pub struct LinkCreateParams {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 1, max = 86400)))]
        "ttlSeconds" => pub ttl_seconds: Option<u32> => with_ttl_seconds,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        "addressOverride" => pub address_override: Option<IpAddr> => with_address_override,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        "transport" => pub transport: Option<Transport> => with_transport,
    }
}

impl LinkCreateParams {
    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        let ttl_seconds = p
            .integer(Self::TTL_SECONDS, 1, u64::from(limits::MAX_LINK_TTL_S))?
            .map(|t| t as u32);
        let address_override = match p.get(Self::ADDRESS_OVERRIDE) {
            None => None,
            Some(Value::String(s)) => Some(s.parse::<IpAddr>().map_err(|_| {
                ParamError::invalid(Self::ADDRESS_OVERRIDE, "must be an IPv4 or IPv6 literal")
            })?),
            Some(_) => {
                return Err(ParamError::invalid(
                    Self::ADDRESS_OVERRIDE,
                    "must be an IPv4 or IPv6 literal",
                ));
            }
        };
        let transport = p.enumeration::<Transport>(
            Self::TRANSPORT,
            "must be \"native\", \"web\" or \"sealed\"",
        )?;
        if address_override.is_some() && transport == Some(Transport::Web) {
            return Err(ParamError::invalid(
                Self::ADDRESS_OVERRIDE,
                "is not allowed with transport \"web\" (web links always use 127.0.0.1)",
            ));
        }
        Ok(Self {
            ttl_seconds,
            address_override,
            transport,
        })
    }

    /// `transport`, defaulting to native.
    pub fn transport(&self) -> Transport {
        self.transport.unwrap_or(Transport::Native)
    }
}

params! {
    /// `consent.create` params (§C8.14).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct ConsentCreateParams {
        "sessionId" => pub session_id: String,
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 64)))]
        "name" => pub name: String,
        #[cfg_attr(feature = "schemas", schemars(pattern(r"^[0-9a-f]{64}$")))]
        "argsSha256" => pub args_sha256: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 128)))]
        "selector" => pub selector: Option<String> => with_selector,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 1000, max = 600000)))]
        "timeoutMs" => pub timeout_ms: Option<u64> => with_timeout_ms,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 1000, max = 600000)))]
        "ttlMs" => pub ttl_ms: Option<u64> => with_ttl_ms,
    }
}

impl ConsentCreateParams {
    /// Params with the three required keys; `selector`, `timeoutMs` and `ttlMs` through the
    /// `with_*` setters.
    pub fn new(
        session_id: impl Into<String>,
        name: impl Into<String>,
        args_sha256: impl Into<String>,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            name: name.into(),
            args_sha256: args_sha256.into(),
            selector: None,
            timeout_ms: None,
            ttl_ms: None,
        }
    }

    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        // Any string is looked up as it is: an id that names no live session (the empty string
        // included) is `unknown_session`, decided by the daemon (§C8.14).
        let session_id = p.any_string(Self::SESSION_ID)?;
        let name = p.string(Self::NAME, 1, limits::MAX_TOOL_NAME_LEN)?;
        let args_sha256 = p.pattern(
            Self::ARGS_SHA256,
            is_valid_sha256_hex,
            "must be 64 lower-case hex digits",
        )?;
        let (min, max) = (limits::MIN_CALL_TIMEOUT_MS, limits::MAX_CALL_TIMEOUT_MS);
        Ok(Self {
            session_id: p.required(Self::SESSION_ID, session_id)?,
            name: p.required(Self::NAME, name)?,
            args_sha256: p.required(Self::ARGS_SHA256, args_sha256)?,
            selector: p.selector(Self::SELECTOR)?,
            timeout_ms: p.integer(Self::TIMEOUT_MS, min, max)?,
            ttl_ms: p.integer(Self::TTL_MS, min, max)?,
        })
    }

    /// `ttlMs`, defaulting to 600000.
    pub fn ttl_ms(&self) -> u64 {
        self.ttl_ms.unwrap_or(limits::DEFAULT_CONSENT_TTL_MS)
    }

    /// The record `consent.take` returns.
    pub fn record(&self) -> ConsentRecord {
        ConsentRecord {
            session_id: self.session_id.clone(),
            name: self.name.clone(),
            args_sha256: self.args_sha256.clone(),
            selector: self.selector.clone(),
            timeout_ms: self.timeout_ms,
        }
    }
}

params! {
    /// `consent.take` params (§C8.14).
    #[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct ConsentTakeParams {
        /// A bearer secret: whoever holds it consumes the consent.
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 128)))]
        "handle" => pub handle: String,
    }
}

impl Debug for ConsentTakeParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsentTakeParams")
            .field("handle", &REDACTED)
            .finish()
    }
}

impl ConsentTakeParams {
    pub fn new(handle: impl Into<String>) -> Self {
        Self {
            handle: handle.into(),
        }
    }

    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        let handle = p.string(Self::HANDLE, 1, MAX_CONSENT_HANDLE_LEN)?;
        Ok(Self {
            handle: p.required(Self::HANDLE, handle)?,
        })
    }
}

params! {
    /// `{selector?}` of `sessions.describe` and `sessions.revoke` (§C8.6, §C8.7).
    #[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct SelectorParams {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 128)))]
        "selector" => pub selector: Option<String> => with_selector,
    }
}

impl SelectorParams {
    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        Ok(Self {
            selector: p.selector(Self::SELECTOR)?,
        })
    }
}

params! {
    /// `tools.list` params (§C8.8).
    #[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct ToolsListParams {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 128)))]
        "selector" => pub selector: Option<String> => with_selector,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(pattern(r"^[A-Za-z0-9_-]{1,64}(/[A-Za-z0-9_-]{1,64})?$")))]
        "group" => pub group: Option<String> => with_group,
        /// Up to 256 characters; an empty string means no filter (read as absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(max = 256)))]
        "filter" => pub filter: Option<String> => with_filter,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 1, max = crate::limits::MAX_SAFE_INTEGER)))]
        "limit" => pub limit: Option<u64> => with_limit,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 0, max = crate::limits::MAX_SAFE_INTEGER)))]
        "offset" => pub offset: Option<u64> => with_offset,
    }
}

impl ToolsListParams {
    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        Ok(Self {
            selector: p.selector(Self::SELECTOR)?,
            group: p.pattern(
                Self::GROUP,
                is_valid_group,
                "must be 1 or 2 segments joined by \"/\", each [a-zA-Z0-9_-]{1,64}",
            )?,
            filter: p
                .string(Self::FILTER, 0, limits::MAX_TOOLS_FILTER_LEN)?
                .filter(|f| !f.is_empty()),
            limit: p.integer(Self::LIMIT, 1, limits::MAX_SAFE_INTEGER)?,
            offset: p.integer(Self::OFFSET, 0, limits::MAX_SAFE_INTEGER)?,
        })
    }
}

params! {
    /// `tools.call` params (§C8.9).
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct ToolsCallParams {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 128)))]
        "selector" => pub selector: Option<String> => with_selector,
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 64)))]
        "name" => pub name: String,
        /// `{}` when absent.
        #[serde(default)]
        "args" => pub args: Map<String, Value> => with_args,
        /// After validation: truncated and clamped to [1000, 600000] (§C10.3).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(with = "Option<f64>"))]
        "timeoutMs" => pub timeout_ms: Option<u64> => with_timeout_ms,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        "caller" => pub caller: Option<Caller> => with_caller,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(with = "Option<crate::schema::ConsentParam>"))]
        "consent" => pub consent: Option<Consent> => with_consent,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(pattern(r"^[A-Za-z0-9_-]{1,128}$")))]
        "callId" => pub call_id: Option<String> => with_call_id,
        #[serde(default, skip_serializing_if = "is_false")]
        "progress" => pub progress: bool => with_progress,
        /// The call outlives its connection: closing it does not cancel the call, whose
        /// outcome `tools.result` returns (§C10.10).
        #[serde(default, skip_serializing_if = "is_false")]
        "detach" => pub detach: bool => with_detach,
    }
}

impl ToolsCallParams {
    /// A call of tool `name` with `{}` args; the rest through the `with_*` setters.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let args = match params {
            Some(Value::Object(m)) => m.get(Self::ARGS).filter(|v| !v.is_null()),
            _ => None,
        };
        let mut valid = Self::validate_with_args(params, args)?;
        if let Some(Value::Object(m)) = args {
            valid.args = m.clone();
        }
        Ok(valid)
    }

    /// [`validate`](Self::validate) of params the caller owns: `args` is moved out, not copied
    /// (the daemon's call path, issue #24).
    pub fn validate_owned(mut params: Option<Value>) -> Result<Self, ParamError> {
        // Left as `null`, which the rules read as absent; `args` is checked from `taken`.
        let taken = match &mut params {
            Some(Value::Object(m)) => m.get_mut(Self::ARGS).map(std::mem::take),
            _ => None,
        }
        .filter(|v| !v.is_null());
        let mut valid = Self::validate_with_args(params.as_ref(), taken.as_ref())?;
        if let Some(Value::Object(m)) = taken {
            valid.args = m;
        }
        Ok(valid)
    }

    /// Every rule of §C8.9, with `args` (absent or `null` = `None`) checked from `args_value`;
    /// the returned `args` is empty, for the caller to fill.
    fn validate_with_args(
        params: Option<&Value>,
        args_value: Option<&Value>,
    ) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        let name = p.string(Self::NAME, 1, limits::MAX_TOOL_NAME_LEN)?;
        let args = match args_value {
            None => Map::new(),
            Some(v @ Value::Object(_)) => {
                if compact_json_len(v) > limits::MAX_ARGS_BYTES {
                    return Err(ParamError::invalid(
                        "args",
                        format!(
                            "its compact JSON must be at most {} bytes",
                            limits::MAX_ARGS_BYTES
                        ),
                    )
                    .with_detail("maxArgsBytes", limits::MAX_ARGS_BYTES));
                }
                // The `tool_call` frame carries `args` as one of its values (§D7.10).
                if json_depth(v) > limits::MAX_JSON_DEPTH {
                    return Err(ParamError::invalid(
                        "args",
                        format!(
                            "must nest at most {} levels of arrays and objects",
                            limits::MAX_JSON_DEPTH
                        ),
                    )
                    .with_detail("maxDepth", limits::MAX_JSON_DEPTH));
                }
                Map::new()
            }
            Some(_) => return Err(ParamError::invalid(Self::ARGS, "must be a JSON object")),
        };
        let timeout_ms =
            match p.get(Self::TIMEOUT_MS) {
                None => None,
                Some(v) => Some(as_finite(v).map(clamp_timeout_ms).ok_or_else(|| {
                    ParamError::invalid(Self::TIMEOUT_MS, "must be a finite number")
                })?),
            };
        let consent = match p.get(Self::CONSENT) {
            None => None,
            Some(Value::String(s)) if s == "elicitation" => Some(Consent::Elicitation),
            // Legacy value, accepted and ignored (§C11).
            Some(Value::String(s)) if s == "client" => None,
            Some(_) => {
                return Err(ParamError::invalid(
                    Self::CONSENT,
                    "must be \"elicitation\"",
                ));
            }
        };
        Ok(Self {
            selector: p.selector(Self::SELECTOR)?,
            name: p.required(Self::NAME, name)?,
            args,
            timeout_ms,
            caller: p.enumeration(
                Self::CALLER,
                "must be \"cli\", \"mcp\", \"client\" or \"http\"",
            )?,
            consent,
            call_id: p.pattern(
                Self::CALL_ID,
                is_valid_call_id,
                "must match ^[A-Za-z0-9_-]{1,128}$",
            )?,
            progress: p.boolean(Self::PROGRESS)?.unwrap_or(false),
            detach: p.boolean(Self::DETACH)?.unwrap_or(false),
        })
    }

    /// `caller`, defaulting to `cli`.
    pub fn caller(&self) -> Caller {
        self.caller.unwrap_or(Caller::Cli)
    }
}

/// A `tools.call` request line in its common form, read without a `Value` tree for the
/// envelope or the params (issue #24): an integer `id`, strings without escapes (borrowed),
/// no members beyond these. Anything else fails to deserialise here.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainCallLine<'a> {
    #[serde(borrow)]
    jsonrpc: &'a str,
    id: Number,
    #[serde(borrow)]
    method: &'a str,
    #[serde(borrow)]
    params: PlainCallParams<'a>,
}

/// The params of a [`PlainCallLine`]: the members of [`ToolsCallParams`] the CLI, the MCP
/// bridge and clients send on most calls (`null` reads as absent, as in the general rules).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainCallParams<'a> {
    #[serde(borrow, default)]
    selector: Option<&'a str>,
    #[serde(borrow)]
    name: &'a str,
    #[serde(default)]
    args: Option<Map<String, Value>>,
    #[serde(borrow, default, rename = "callId")]
    call_id: Option<&'a str>,
    #[serde(borrow, default)]
    caller: Option<&'a str>,
    #[serde(default)]
    progress: Option<bool>,
    #[serde(default)]
    detach: Option<bool>,
}

/// A `tools.call` request line (terminator removed) in its common form: its id and params,
/// exactly as [`crate::jsonrpc::parse_incoming`] then [`ControlRequest::parse_owned`] would give
/// them, without a `Value` tree for the envelope or the params (the daemon's call path, issue
/// #24). `None` for any other line, or one that breaks a rule of §C8.9 or carries a member
/// outside the common form (`timeoutMs`, `consent`, a string id, an escape in a string, …):
/// the general path then answers it, with its exact errors.
pub fn parse_plain_tools_call(line: &[u8]) -> Option<(RequestId, ToolsCallParams)> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = std::str::from_utf8(line).ok()?;
    // A struct would also read an array positionally; only objects take this path.
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let plain: PlainCallLine<'_> = serde_json::from_str(text).ok()?;
    if plain.jsonrpc != crate::jsonrpc::VERSION || plain.method != <ToolsCall as Method>::NAME {
        return None;
    }
    let id = RequestId::from_value(&Value::Number(plain.id))?;
    let p = plain.params;
    let chars_within = |s: &str, max: usize| (1..=max).contains(&s.chars().count());
    if !p.selector.is_none_or(|s| chars_within(s, MAX_SELECTOR_LEN))
        || !chars_within(p.name, limits::MAX_TOOL_NAME_LEN)
        || !p.call_id.is_none_or(is_valid_call_id)
    {
        return None;
    }
    let caller = match p.caller {
        None => None,
        Some(c) => Some(c.parse::<Caller>().ok()?),
    };
    let args = match p.args {
        None => Map::new(),
        Some(args) => {
            let args = Value::Object(args);
            if compact_json_len(&args) > limits::MAX_ARGS_BYTES
                || json_depth(&args) > limits::MAX_JSON_DEPTH
            {
                return None;
            }
            let Value::Object(args) = args else {
                return None;
            };
            args
        }
    };
    Some((
        id,
        ToolsCallParams {
            selector: p.selector.map(str::to_owned),
            name: p.name.to_owned(),
            args,
            timeout_ms: None,
            caller,
            consent: None,
            call_id: p.call_id.map(str::to_owned),
            progress: p.progress.unwrap_or(false),
            detach: p.detach.unwrap_or(false),
        },
    ))
}

params! {
    /// `tools.cancel` params (§C8.10).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct ToolsCancelParams {
        #[cfg_attr(feature = "schemas", schemars(pattern(r"^[A-Za-z0-9_-]{1,128}$")))]
        "callId" => pub call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 128)))]
        "selector" => pub selector: Option<String> => with_selector,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(pattern(r"^[a-z0-9_]{1,64}$")))]
        "reason" => pub reason: Option<String> => with_reason,
    }
}

impl ToolsCancelParams {
    pub fn new(call_id: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            selector: None,
            reason: None,
        }
    }

    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        let call_id = p.pattern(
            Self::CALL_ID,
            is_valid_call_id,
            "must match ^[A-Za-z0-9_-]{1,128}$",
        )?;
        Ok(Self {
            call_id: p.required(Self::CALL_ID, call_id)?,
            selector: p.selector(Self::SELECTOR)?,
            reason: p.pattern(
                Self::REASON,
                is_valid_cancel_reason,
                "must match [a-z0-9_]{1,64}",
            )?,
        })
    }

    /// `reason`, defaulting to `client_cancelled`.
    pub fn reason(&self) -> &str {
        self.reason.as_deref().unwrap_or(DEFAULT_CANCEL_REASON)
    }
}

params! {
    /// `events.list` params (§C8.11).
    #[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct EventsListParams {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 128)))]
        "selector" => pub selector: Option<String> => with_selector,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 4096)))]
        "name" => pub name: Option<String> => with_name,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 1, max = crate::limits::MAX_SAFE_INTEGER)))]
        "limit" => pub limit: Option<u64> => with_limit,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 0, max = crate::limits::MAX_SAFE_INTEGER)))]
        "offset" => pub offset: Option<u64> => with_offset,
    }
}

impl EventsListParams {
    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        Ok(Self {
            selector: p.selector(Self::SELECTOR)?,
            name: p.glob(Self::NAME)?,
            limit: p.integer(Self::LIMIT, 1, limits::MAX_SAFE_INTEGER)?,
            offset: p.integer(Self::OFFSET, 0, limits::MAX_SAFE_INTEGER)?,
        })
    }
}

params! {
    /// `events.subscribe` params (§C8.12).
    #[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    // `since` needs `sessionSelector`, and `kinds` absent or holding `app_event`.
    #[cfg_attr(feature = "schemas", schemars(extend("allOf" = [
        {
            "if": {"required": ["since"], "properties": {"since": {"type": "integer"}}},
            "then": {"required": ["sessionSelector"], "properties": {"sessionSelector": {"type": "string"}}}
        },
        {
            "if": {
                "required": ["since", "kinds"],
                "properties": {"since": {"type": "integer"}, "kinds": {"type": "array"}}
            },
            "then": {"properties": {"kinds": {"contains": {"const": "app_event"}}}}
        }
    ])))]
    pub struct SubscribeParams {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 128)))]
        "sessionSelector" => pub session_selector: Option<String> => with_session_selector,
        /// Non-empty and distinct when present; absent = all kinds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1), extend("uniqueItems" = true)))]
        "kinds" => pub kinds: Option<Vec<EventKind>> => with_kinds,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 4096)))]
        "name" => pub name: Option<String> => with_name,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 1, max = crate::limits::MAX_SAFE_INTEGER)))]
        "payloadMaxBytes" => pub payload_max_bytes: Option<u64> => with_payload_max_bytes,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 0, max = crate::limits::MAX_SAFE_INTEGER)))]
        "since" => pub since: Option<u64> => with_since,
    }
}

impl SubscribeParams {
    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        let kinds = match p.get(Self::KINDS) {
            None => None,
            Some(Value::Array(items)) if !items.is_empty() => {
                let mut kinds = Vec::with_capacity(items.len());
                for item in items {
                    let kind = item
                        .as_str()
                        .and_then(|s| s.parse::<EventKind>().ok())
                        .ok_or_else(|| {
                            ParamError::invalid(Self::KINDS, format!("{item} is not an event kind"))
                                .with_detail(
                                    "acceptedValues",
                                    EventKind::ALL
                                        .iter()
                                        .map(|k| k.as_str())
                                        .collect::<Vec<_>>(),
                                )
                        })?;
                    if kinds.contains(&kind) {
                        return Err(ParamError::invalid(
                            "kinds",
                            format!("\"{kind}\" is listed twice"),
                        ));
                    }
                    kinds.push(kind);
                }
                Some(kinds)
            }
            Some(_) => {
                return Err(ParamError::invalid(
                    Self::KINDS,
                    "must be a non-empty array of event kinds",
                ));
            }
        };
        let session_selector = p.selector(Self::SESSION_SELECTOR)?;
        let since = p.integer(Self::SINCE, 0, limits::MAX_SAFE_INTEGER)?;
        if since.is_some() {
            if session_selector.is_none() {
                return Err(ParamError::invalid(
                    Self::SINCE,
                    "requires \"sessionSelector\"",
                ));
            }
            if kinds
                .as_ref()
                .is_some_and(|k| !k.contains(&EventKind::AppEvent))
            {
                return Err(ParamError::invalid(
                    Self::SINCE,
                    "requires \"kinds\" to be absent or to contain \"app_event\"",
                ));
            }
        }
        Ok(Self {
            session_selector,
            kinds,
            name: p.glob(Self::NAME)?,
            payload_max_bytes: p.integer(Self::PAYLOAD_MAX_BYTES, 1, limits::MAX_SAFE_INTEGER)?,
            since,
        })
    }

    /// Whether the filter admits `kind` (absent `kinds` = all).
    pub fn admits(&self, kind: EventKind) -> bool {
        self.kinds.as_ref().is_none_or(|k| k.contains(&kind))
    }
}

params! {
    /// `events.since` params (§C8.13).
    #[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct EventsSinceParams {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 128)))]
        "selector" => pub selector: Option<String> => with_selector,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 0, max = crate::limits::MAX_SAFE_INTEGER)))]
        "since" => pub since: Option<u64> => with_since,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 1, max = crate::limits::MAX_SAFE_INTEGER)))]
        "limit" => pub limit: Option<u64> => with_limit,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 4096)))]
        "name" => pub name: Option<String> => with_name,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 1, max = crate::limits::MAX_SAFE_INTEGER)))]
        "payloadMaxBytes" => pub payload_max_bytes: Option<u64> => with_payload_max_bytes,
    }
}

impl EventsSinceParams {
    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        Ok(Self {
            selector: p.selector(Self::SELECTOR)?,
            since: p.integer(Self::SINCE, 0, limits::MAX_SAFE_INTEGER)?,
            limit: p.integer(Self::LIMIT, 1, limits::MAX_SAFE_INTEGER)?,
            name: p.glob(Self::NAME)?,
            payload_max_bytes: p.integer(Self::PAYLOAD_MAX_BYTES, 1, limits::MAX_SAFE_INTEGER)?,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Shared shapes (§C9)
// ---------------------------------------------------------------------------------------------

/// Device fields as claimed; `{}` when none (§C9.1).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct Device {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
}

setters!(Device {
    with_manufacturer => manufacturer: Option<String>,
    with_model => model: Option<String>,
    with_os => os: Option<String>,
});

/// A live session (§C9.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub session_id: String,
    pub alias: String,
    pub state: SessionState,
    pub transport: Transport,
    #[serde(default)]
    pub device: Device,
    pub created_at: String,
    pub claimed_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend_reason: Option<SuspendReason>,
    pub tool_count: u64,
    pub event_count: u64,
    /// Sealed sessions only (issue #23): the randomness source the app named in handshake
    /// message 1 on its latest connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rng: Option<RngSource>,
    /// Whether the app's tool registry has arrived (issue #23; ours). Waiters resolve on
    /// `received`; a session stays `pending` from its claim until its first snapshot.
    #[serde(default)]
    pub registry: RegistryState,
    /// The session's lease while one is held (§C10.9); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<SessionLease>,
}

/// One `tools.list` entry: the app's descriptor verbatim plus `group` and `policy` (§C9.2).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolsListEntry {
    /// Descriptor fields in the order the app sent them, without `group`.
    pub descriptor: Map<String, Value>,
    /// `None` is sent as `null`: the key is always present.
    pub group: Option<String>,
    pub policy: PolicyDecision,
}

impl ToolsListEntry {
    /// An entry from descriptor fields already filtered to [`Self::DESCRIPTOR_KEYS`].
    pub fn new(
        descriptor: Map<String, Value>,
        group: Option<String>,
        policy: PolicyDecision,
    ) -> Self {
        Self {
            descriptor,
            group,
            policy,
        }
    }

    /// Descriptor fields of §D8.1 that a listing reports; anything else the app sent was an
    /// ignored unknown field (a stray `timeoutMs`, for example).
    pub const DESCRIPTOR_KEYS: &[&str] = &[
        "name",
        "description",
        "input_schema",
        "output_schema",
        "annotations",
        "timeout_ms",
        // §D18 (an extension): registry declarations.
        "riskLevel",
        "requiredPermissions",
        "testCases",
    ];

    /// Builds an entry from a registered descriptor object: `group` is moved out of it,
    /// unknown keys are dropped, the rest is kept verbatim in received order.
    pub fn from_descriptor(descriptor: &Map<String, Value>, policy: PolicyDecision) -> Self {
        let group = descriptor
            .get("group")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let descriptor = descriptor
            .iter()
            .filter(|(k, _)| Self::DESCRIPTOR_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self {
            descriptor,
            group,
            policy,
        }
    }

    pub fn name(&self) -> &str {
        self.descriptor
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    pub fn description(&self) -> &str {
        self.descriptor
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

impl Serialize for ToolsListEntry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in &self.descriptor {
            if k != "group" && k != "policy" {
                m.serialize_entry(k, v)?;
            }
        }
        m.serialize_entry("group", &self.group)?;
        m.serialize_entry("policy", &self.policy)?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for ToolsListEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut descriptor = Map::deserialize(d)?;
        let group = match descriptor.remove("group") {
            None | Some(Value::Null) => None,
            Some(Value::String(g)) => Some(g),
            Some(_) => return Err(D::Error::custom("\"group\" must be a string or null")),
        };
        let policy = descriptor
            .remove("policy")
            .ok_or_else(|| D::Error::missing_field("policy"))
            .and_then(|p| PolicyDecision::deserialize(p).map_err(D::Error::custom))?;
        Ok(Self {
            descriptor,
            group,
            policy,
        })
    }
}

/// One `groups` row of `tools.list`; `group: null` counts ungrouped tools (§C8.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct GroupTotal {
    pub group: Option<String>,
    pub total: u64,
}

impl GroupTotal {
    pub fn new(group: Option<String>, total: u64) -> Self {
        Self { group, total }
    }
}

/// A declared event as listed by `events.list` (§C9.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct EventsListEntry {
    pub name: String,
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_schema: Option<Value>,
}

impl EventsListEntry {
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            payload_schema: None,
        }
    }
}

setters!(EventsListEntry {
    with_payload_schema => payload_schema: Option<Value>,
});

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

/// `daemon.hello` result (§C8.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct HelloResult {
    pub version: String,
    pub control_protocol: u32,
    pub min_control_protocol: u32,
    pub pid: u32,
    pub started_at: String,
    pub state_dir: String,
    pub features: Vec<String>,
    pub session_count: u64,
    pub pending_links: u64,
    pub pending_calls: u64,
}

impl HelloResult {
    /// `minControlProtocol ≤ ours ≤ controlProtocol` (§C7 step 2).
    pub fn is_compatible(&self, ours: u32) -> bool {
        (self.min_control_protocol..=self.control_protocol).contains(&ours)
    }

    pub fn has_feature(&self, feature: &str) -> bool {
        self.features.iter().any(|f| f == feature)
    }

    /// No sessions, pending links or pending calls (§C7 step 4).
    pub fn is_idle(&self) -> bool {
        self.session_count == 0 && self.pending_links == 0 && self.pending_calls == 0
    }
}

/// `daemon.status` `advertisedAddress` (§C8.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct AdvertisedAddress {
    pub address: String,
    pub family: u8,
    pub source: AddressSource,
}

impl AdvertisedAddress {
    pub fn new(address: impl Into<String>, family: u8, source: AddressSource) -> Self {
        Self {
            address: address.into(),
            family,
            source,
        }
    }
}

/// `daemon.status` `policy`; `tools` is omitted when empty (§C8.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct PolicySummary {
    pub default: PolicyDecision,
    pub destructive: PolicyDecision,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, PolicyDecision>,
}

impl PolicySummary {
    /// A summary without per-tool overrides; add them with `with_tools`.
    pub fn new(default: PolicyDecision, destructive: PolicyDecision) -> Self {
        Self {
            default,
            destructive,
            tools: BTreeMap::new(),
        }
    }
}

setters!(PolicySummary {
    with_tools => tools: BTreeMap<String, PolicyDecision>,
});

/// `daemon.status` `audit`; `files` and `bytes` are omitted when the directory cannot be read
/// (§C8.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AuditStatus {
    pub path: String,
    pub failed_writes: u64,
    pub failed_prunes: u64,
    pub retention_days: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

impl AuditStatus {
    /// A status without `files` and `bytes` (the directory could not be read); add them with
    /// the setters.
    pub fn new(
        path: impl Into<String>,
        failed_writes: u64,
        failed_prunes: u64,
        retention_days: u32,
    ) -> Self {
        Self {
            path: path.into(),
            failed_writes,
            failed_prunes,
            retention_days,
            files: None,
            bytes: None,
        }
    }
}

setters!(AuditStatus {
    with_files => files: Option<u64>,
    with_bytes => bytes: Option<u64>,
});

/// `daemon.status` `eventsLog` (§C8.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct EventsLogStatus {
    pub path: String,
    pub failed_writes: u64,
}

impl EventsLogStatus {
    pub fn new(path: impl Into<String>, failed_writes: u64) -> Self {
        Self {
            path: path.into(),
            failed_writes,
        }
    }
}

/// `daemon.status` result (§C8.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StatusResult {
    pub version: String,
    pub control_protocol: u32,
    pub pid: u32,
    pub started_at: String,
    pub state_dir: String,
    pub wss_port: u16,
    pub web_port: u16,
    pub advertised_address: AdvertisedAddress,
    pub pinned_keys: Vec<String>,
    pub sessions: Vec<SessionSummary>,
    pub pending_links: u64,
    pub pending_calls: u64,
    pub policy: PolicySummary,
    pub audit: AuditStatus,
    pub events_log: EventsLogStatus,
    /// The daemon's sealed-transport static public key (issue #23), unpadded base64url of 32
    /// bytes; absent only when the host key could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_key: Option<String>,
    /// Unexpired operator grants (§C8.20); omitted when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<GrantSummary>,
    /// The port of the loopback HTTP API on 127.0.0.1 (§H1); omitted while it is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_port: Option<u16>,
}

/// Longest `policy.set` / `policy.reset` `target` (§C8.31).
pub const MAX_POLICY_TARGET_LEN: usize = 200;

params! {
    /// `policy.set` params (§C8.31): `target` is `default`, `destructive` or a
    /// `policy.tools` key `<alias>/<tool>` (either part may be a glob).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct PolicySetParams {
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 200)))]
        "target" => pub target: String,
        "decision" => pub decision: PolicyDecision,
    }
}

impl PolicySetParams {
    pub fn new(target: impl Into<String>, decision: PolicyDecision) -> Self {
        Self {
            target: target.into(),
            decision,
        }
    }

    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        let target = p.string(Self::TARGET, 1, MAX_POLICY_TARGET_LEN)?;
        let decision =
            p.enumeration(Self::DECISION, "must be \"allow\", \"deny\" or \"prompt\"")?;
        Ok(Self {
            target: p.required(Self::TARGET, target)?,
            decision: p.required(Self::DECISION, decision)?,
        })
    }
}

params! {
    /// `policy.reset` params (§C8.32): without `target`, the whole policy returns to the
    /// built-in defaults.
    #[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct PolicyResetParams {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 200)))]
        "target" => pub target: Option<String> => with_target,
    }
}

impl PolicyResetParams {
    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        Ok(Self {
            target: p.string(Self::TARGET, 1, MAX_POLICY_TARGET_LEN)?,
        })
    }
}

/// One effective decision of `policy.list` (§C8.30): a tool of a live session and the rule that
/// decides it (`source`: `policy.tools["<key>"]`, `policy.destructive` or `policy.default`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PolicyEffective {
    pub session_id: String,
    pub alias: String,
    pub tool: String,
    pub decision: PolicyDecision,
    pub source: String,
}

impl PolicyEffective {
    pub fn new(
        session_id: impl Into<String>,
        alias: impl Into<String>,
        tool: impl Into<String>,
        decision: PolicyDecision,
        source: impl Into<String>,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            alias: alias.into(),
            tool: tool.into(),
            decision,
            source: source.into(),
        }
    }
}

/// `policy.list` result (§C8.30).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PolicyListResult {
    pub policy: PolicySummary,
    pub config_path: String,
    /// Every tool of every live session, by alias then tool name.
    pub effective: Vec<PolicyEffective>,
}

impl PolicyListResult {
    pub fn new(
        policy: PolicySummary,
        config_path: impl Into<String>,
        effective: Vec<PolicyEffective>,
    ) -> Self {
        Self {
            policy,
            config_path: config_path.into(),
            effective,
        }
    }
}

/// `policy.set` / `policy.reset` result (§C8.31, §C8.32): the policy now in force, and whether
/// the call changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PolicyChangeResult {
    pub changed: bool,
    pub policy: PolicySummary,
    pub config_path: String,
}

impl PolicyChangeResult {
    pub fn new(changed: bool, policy: PolicySummary, config_path: impl Into<String>) -> Self {
        Self {
            changed,
            policy,
            config_path: config_path.into(),
        }
    }
}

/// `daemon.reload` result (§C8.33): `applied` lists the `config.json` keys put in force,
/// `restartRequired` the changed keys that take effect only after a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ReloadResult {
    pub applied: Vec<String>,
    pub restart_required: Vec<String>,
    pub policy: PolicySummary,
    pub config_path: String,
}

impl ReloadResult {
    pub fn new(
        applied: Vec<String>,
        restart_required: Vec<String>,
        policy: PolicySummary,
        config_path: impl Into<String>,
    ) -> Self {
        Self {
            applied,
            restart_required,
            policy,
            config_path: config_path.into(),
        }
    }
}

/// `{ok: true}` of `daemon.shutdown` (§C8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
pub struct OkResult {
    pub ok: bool,
}

impl Default for OkResult {
    fn default() -> Self {
        Self { ok: true }
    }
}

/// `link.create` `endpoint` (§C8.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct Endpoint {
    pub address: String,
    pub port: u16,
    pub family: u8,
}

impl Endpoint {
    pub fn new(address: impl Into<String>, port: u16, family: u8) -> Self {
        Self {
            address: address.into(),
            port,
            family,
        }
    }
}

/// `link.create` result (§C8.4).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LinkCreateResult {
    pub session_id: String,
    pub transport: Transport,
    /// The bootstrap payload, claim token included: redacted from `Debug`.
    #[cfg_attr(
        feature = "schemas",
        schemars(
            description = "The bootstrap payload in its text form (§D4.2), claim token included: a secret."
        )
    )]
    pub deep_link_payload: String,
    pub endpoint: Endpoint,
    /// Unix seconds.
    pub expires_at: u64,
    pub pin: String,
    /// Sealed links only (issue #23): the daemon's X25519 static public key the payload carries,
    /// unpadded base64url of 32 bytes (also inside `deepLinkPayload`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_key: Option<String>,
}

impl LinkCreateResult {
    pub fn new(
        session_id: impl Into<String>,
        transport: Transport,
        deep_link_payload: impl Into<String>,
        endpoint: Endpoint,
        expires_at: u64,
        pin: impl Into<String>,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            transport,
            deep_link_payload: deep_link_payload.into(),
            endpoint,
            expires_at,
            pin: pin.into(),
            sealed_key: None,
        }
    }

    /// Sets `sealedKey` (sealed links).
    pub fn with_sealed_key(mut self, key: Option<String>) -> Self {
        self.sealed_key = key;
        self
    }
}

impl Debug for LinkCreateResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkCreateResult")
            .field("session_id", &self.session_id)
            .field("transport", &self.transport)
            .field("deep_link_payload", &REDACTED)
            .field("endpoint", &self.endpoint)
            .field("expires_at", &self.expires_at)
            .field("pin", &self.pin)
            .field("sealed_key", &self.sealed_key)
            .finish()
    }
}

/// `consent.create` result (§C8.14).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ConsentCreateResult {
    /// A bearer secret: redacted from `Debug`.
    pub handle: String,
    /// Unix seconds: `floor((now_ms + ttlMs) / 1000)`.
    pub expires_at: u64,
}

impl ConsentCreateResult {
    pub fn new(handle: impl Into<String>, expires_at: u64) -> Self {
        Self {
            handle: handle.into(),
            expires_at,
        }
    }
}

impl Debug for ConsentCreateResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsentCreateResult")
            .field("handle", &REDACTED)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// The stored consent record, returned by `consent.take` (§C8.14).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ConsentRecord {
    pub session_id: String,
    pub name: String,
    #[serde(rename = "argsSha256")]
    pub args_sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl ConsentRecord {
    pub fn new(
        session_id: impl Into<String>,
        name: impl Into<String>,
        args_sha256: impl Into<String>,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            name: name.into(),
            args_sha256: args_sha256.into(),
            selector: None,
            timeout_ms: None,
        }
    }
}

setters!(ConsentRecord {
    with_selector => selector: Option<String>,
    with_timeout_ms => timeout_ms: Option<u64>,
});

/// `sessions.revoke` result; `alias` is `null` for a link (§C8.7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RevokeResult {
    pub ok: bool,
    pub session_id: String,
    pub alias: Option<String>,
    pub revoked: RevokedKind,
}

impl RevokeResult {
    /// `{ok: true, …}`: `alias` is `None` for a link.
    pub fn new(session_id: impl Into<String>, alias: Option<String>, revoked: RevokedKind) -> Self {
        Self {
            ok: true,
            session_id: session_id.into(),
            alias,
            revoked,
        }
    }
}

/// `tools.list` result (§C8.8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolsListResult {
    pub tools: Vec<ToolsListEntry>,
    pub total: u64,
    pub has_more: bool,
    pub offset: u64,
    pub groups: Vec<GroupTotal>,
}

impl ToolsListResult {
    pub fn new(
        tools: Vec<ToolsListEntry>,
        total: u64,
        has_more: bool,
        offset: u64,
        groups: Vec<GroupTotal>,
    ) -> Self {
        Self {
            tools,
            total,
            has_more,
            offset,
            groups,
        }
    }
}

/// `tools.call` result (§C8.9); `result` is the app's value verbatim, `null` included.
/// Issue #17 (§D17): `content` holds the app's content blocks, verbatim and in order, when it
/// sent any; `result` is then absent when the app sent no JSON result (and present, `null`
/// included, in every other case).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolsCallResult {
    /// `Some(Value::Null)` is an explicit `null`; `None` (only with `content`) an absent key.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_value"
    )]
    #[cfg_attr(feature = "schemas", schemars(with = "Value"))]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 64)))]
    pub content: Option<Vec<crate::content::ContentBlock>>,
    pub call_id: String,
    pub session_id: String,
    pub alias: String,
    pub duration_ms: u64,
}

/// A present key as `Some`, `null` included (serde reads `null` into `None` otherwise).
fn present_value<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

setters!(ToolsCallResult {
    with_content => content: Option<Vec<crate::content::ContentBlock>>,
});

impl ToolsCallResult {
    /// A result with `result` present (`None` only with content: add it with `with_content`).
    pub fn new(
        result: impl Into<Option<Value>>,
        call_id: impl Into<String>,
        session_id: impl Into<String>,
        alias: impl Into<String>,
        duration_ms: u64,
    ) -> Self {
        Self {
            result: result.into(),
            content: None,
            call_id: call_id.into(),
            session_id: session_id.into(),
            alias: alias.into(),
            duration_ms,
        }
    }
}

/// `tools.cancel` result (§C8.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct ToolsCancelResult {
    pub cancelled: bool,
}

impl ToolsCancelResult {
    pub fn new(cancelled: bool) -> Self {
        Self { cancelled }
    }
}

/// `events.list` result (§C8.11).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct EventsListResult {
    pub events: Vec<EventsListEntry>,
    pub total: u64,
    pub has_more: bool,
    pub offset: u64,
}

impl EventsListResult {
    pub fn new(events: Vec<EventsListEntry>, total: u64, has_more: bool, offset: u64) -> Self {
        Self {
            events,
            total,
            has_more,
            offset,
        }
    }
}

/// `events.subscribe` `replay` (§C8.12, §C13.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct Replay {
    pub count: u64,
    pub dropped: u64,
    pub cursor: u64,
}

impl Replay {
    pub fn new(count: u64, dropped: u64, cursor: u64) -> Self {
        Self {
            count,
            dropped,
            cursor,
        }
    }
}

/// `events.subscribe` result (§C8.12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SubscribeResult {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<Replay>,
}

impl SubscribeResult {
    /// `{ok: true}`; a session subscription adds `sessionId` and `replay` with the setters.
    pub fn new() -> Self {
        Self {
            ok: true,
            session_id: None,
            replay: None,
        }
    }
}

impl Default for SubscribeResult {
    fn default() -> Self {
        Self::new()
    }
}

setters!(SubscribeResult {
    with_session_id => session_id: Option<String>,
    with_replay => replay: Option<Replay>,
});

/// `events.since` result (§C8.13, §C13.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct EventsSinceResult {
    pub events: Vec<EventNotification>,
    pub cursor: u64,
    pub dropped: u64,
    pub remaining: u64,
}

impl EventsSinceResult {
    pub fn new(events: Vec<EventNotification>, cursor: u64, dropped: u64, remaining: u64) -> Self {
        Self {
            events,
            cursor,
            dropped,
            remaining,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Events (§C13.1)
// ---------------------------------------------------------------------------------------------

/// `data` of kinds that carry nothing: `{}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
pub struct Empty {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct DaemonStartedData {
    pub version: String,
    pub pid: u32,
}

impl DaemonStartedData {
    pub fn new(version: impl Into<String>, pid: u32) -> Self {
        Self {
            version: version.into(),
            pid,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LinkCreatedData {
    /// Unix seconds.
    pub expires_at: u64,
    pub transport: Transport,
}

impl LinkCreatedData {
    pub fn new(expires_at: u64, transport: Transport) -> Self {
        Self {
            expires_at,
            transport,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SessionClaimedData {
    #[serde(default)]
    pub device: Device,
    pub transport: Transport,
}

impl SessionClaimedData {
    pub fn new(device: Device, transport: Transport) -> Self {
        Self { device, transport }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SessionSuspendedData {
    pub reason: SuspendReason,
}

impl SessionSuspendedData {
    pub fn new(reason: SuspendReason) -> Self {
        Self { reason }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SessionResumedData {
    pub replaced_socket: bool,
}

impl SessionResumedData {
    pub fn new(replaced_socket: bool) -> Self {
        Self { replaced_socket }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SessionRevokedData {
    pub previous_state: PreviousState,
}

impl SessionRevokedData {
    pub fn new(previous_state: PreviousState) -> Self {
        Self { previous_state }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolsChangedData {
    pub tool_count: u64,
}

impl ToolsChangedData {
    pub fn new(tool_count: u64) -> Self {
        Self { tool_count }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct EventsChangedData {
    pub event_count: u64,
}

impl EventsChangedData {
    pub fn new(event_count: u64) -> Self {
        Self { event_count }
    }
}

/// `app_event` data, whole or truncated by `payloadMaxBytes` (§C13.6). `ts` is the app's
/// number, kept as sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum AppEventData {
    Full {
        name: String,
        /// `null` when the app's frame had no payload.
        payload: Value,
        ts: Number,
    },
    Truncated {
        name: String,
        #[serde(rename = "payloadPreview")]
        payload_preview: String,
        truncated: bool,
        #[serde(rename = "payloadBytes")]
        payload_bytes: u64,
        ts: Number,
    },
}

impl AppEventData {
    pub fn name(&self) -> &str {
        match self {
            Self::Full { name, .. } | Self::Truncated { name, .. } => name,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolCallStartedData {
    pub name: String,
    pub call_id: String,
    pub wire_id: String,
    pub caller: Caller,
    pub deadline_ms: u64,
}

impl ToolCallStartedData {
    pub fn new(
        name: impl Into<String>,
        call_id: impl Into<String>,
        wire_id: impl Into<String>,
        caller: Caller,
        deadline_ms: u64,
    ) -> Self {
        Self {
            name: name.into(),
            call_id: call_id.into(),
            wire_id: wire_id.into(),
            caller,
            deadline_ms,
        }
    }
}

/// `progress` and `message` are forwarded as the app sent them (§C10.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolCallProgressData {
    pub call_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ToolCallProgressData {
    pub fn new(call_id: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            progress: None,
            message: None,
        }
    }
}

setters!(ToolCallProgressData {
    with_progress => progress: Option<Number>,
    with_message => message: Option<String>,
});

/// `tool_call_finished` data; `errorType` iff the outcome is `error` or `cancelled`,
/// `deniedReason` iff `denied` (§C12.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolCallFinishedData {
    pub name: String,
    pub call_id: String,
    pub caller: Caller,
    pub duration_ms: u64,
    pub outcome: CallOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<ErrorType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied_reason: Option<DeniedReason>,
    /// Issue #17 (§D17): what content the result carried (type, image mime type, bytes),
    /// never the data; only for an `ok` outcome with content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_summary: Option<Vec<crate::content::ContentSummary>>,
}

setters!(ToolCallFinishedData {
    with_content_summary => content_summary: Option<Vec<crate::content::ContentSummary>>,
});

/// How a call settled, with exactly the fields its outcome carries (§C12.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    Ok,
    /// Any error other than `tool_cancelled`.
    Error(ErrorType),
    Denied(DeniedReason),
    Cancelled,
}

impl Settlement {
    /// Classifies a settling error: `tool_cancelled` is `cancelled`, anything else `error`.
    pub fn from_error(t: ErrorType) -> Self {
        if t == ErrorType::ToolCancelled {
            Self::Cancelled
        } else {
            Self::Error(t)
        }
    }

    /// `(outcome, errorType, deniedReason)` with the presence rules of §C12.1.
    pub fn fields(self) -> (CallOutcome, Option<ErrorType>, Option<DeniedReason>) {
        match self {
            Self::Ok => (CallOutcome::Ok, None, None),
            Self::Error(t) => (CallOutcome::Error, Some(t), None),
            Self::Denied(r) => (CallOutcome::Denied, None, Some(r)),
            Self::Cancelled => (CallOutcome::Cancelled, Some(ErrorType::ToolCancelled), None),
        }
    }
}

impl ToolCallFinishedData {
    pub fn new(
        name: impl Into<String>,
        call_id: impl Into<String>,
        caller: Caller,
        duration_ms: u64,
        settlement: Settlement,
    ) -> Self {
        let (outcome, error_type, denied_reason) = settlement.fields();
        Self {
            name: name.into(),
            call_id: call_id.into(),
            caller,
            duration_ms,
            outcome,
            error_type,
            denied_reason,
            content_summary: None,
        }
    }
}

/// `link_refused` data (issue #23; ours): the reason the app gave, first refusal only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LinkRefusedData {
    #[serde(with = "refusal_reason")]
    #[cfg_attr(feature = "schemas", schemars(with = "crate::link::RefusalReason"))]
    pub reason: crate::link::RefusalReason,
}

/// `RefusalReason` as its wire string.
mod refusal_reason {
    use crate::link::RefusalReason;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(r: &RefusalReason, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(r.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<RefusalReason, D::Error> {
        let s = String::deserialize(d)?;
        RefusalReason::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown refusal reason {s:?}")))
    }
}

impl LinkRefusedData {
    pub fn new(reason: crate::link::RefusalReason) -> Self {
        Self { reason }
    }
}

/// `device_refused` data (ours, §C13.1): the daemon closed a device connection over what it
/// sent (§D6.2) or refused its claim or resume (§D9.3, §D9.4). `code` and `reason` are the
/// close sent, unchanged; the rest says which field was at fault and why, never its value.
/// Rate-limited daemon-wide: `suppressed` counts the refusals left unreported since the
/// previous event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct DeviceRefusedData {
    /// The listener the connection came in on.
    pub transport: Transport,
    pub code: u16,
    pub reason: String,
    /// The frame type the daemon recognised (never the peer's text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame_type: Option<String>,
    /// The field at fault as a path (`token`, `tools[3].name`); absent when the message as a
    /// whole was at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// What was wrong, in a short sentence.
    pub problem: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub suppressed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl DeviceRefusedData {
    pub fn new(
        transport: Transport,
        code: u16,
        reason: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        Self {
            transport,
            code,
            reason: reason.into(),
            frame_type: None,
            field: None,
            problem: problem.into(),
            suppressed: 0,
        }
    }
}

setters!(DeviceRefusedData {
    with_frame_type => frame_type: Option<String>,
    with_field => field: Option<String>,
    with_suppressed => suppressed: u64,
});

/// `data` of an event, by kind (§C13.1).
#[derive(Debug, Clone, PartialEq)]
pub enum EventData {
    DaemonStarted(DaemonStartedData),
    LinkCreated(LinkCreatedData),
    LinkExpired(Empty),
    LinkRefused(LinkRefusedData),
    DeviceRefused(DeviceRefusedData),
    SessionClaimed(SessionClaimedData),
    SessionSuspended(SessionSuspendedData),
    SessionResumed(SessionResumedData),
    SessionRevoked(SessionRevokedData),
    SessionExpired(Empty),
    ToolsChanged(ToolsChangedData),
    EventsChanged(EventsChangedData),
    AppEvent(AppEventData),
    ToolCallStarted(ToolCallStartedData),
    ToolCallProgress(ToolCallProgressData),
    ToolCallFinished(ToolCallFinishedData),
    ApprovalPending(ApprovalPendingData),
    ApprovalSettled(ApprovalSettledData),
    PolicyChanged(PolicyChangedData),
    LeaseTaken(LeaseTakenData),
    LeaseReleased(LeaseReleasedData),
}

wire_enum! {
    /// What changed the policy (`policy_changed` `cause`, §C13.1).
    PolicyChangeCause { Set = "set", Reset = "reset", Reload = "reload" }
}

/// `policy_changed` data (§C13.1): the cause, the `target` of a set or reset (absent for a
/// whole reset and for a reload), the `decision` of a set, and the policy now in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct PolicyChangedData {
    pub cause: PolicyChangeCause,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<PolicyDecision>,
    pub policy: PolicySummary,
}

impl PolicyChangedData {
    pub fn new(cause: PolicyChangeCause, policy: PolicySummary) -> Self {
        Self {
            cause,
            target: None,
            decision: None,
            policy,
        }
    }
}

setters!(PolicyChangedData {
    with_target => target: Option<String>,
    with_decision => decision: Option<PolicyDecision>,
});

impl EventData {
    pub fn kind(&self) -> EventKind {
        match self {
            Self::DaemonStarted(_) => EventKind::DaemonStarted,
            Self::LinkCreated(_) => EventKind::LinkCreated,
            Self::LinkExpired(_) => EventKind::LinkExpired,
            Self::LinkRefused(_) => EventKind::LinkRefused,
            Self::DeviceRefused(_) => EventKind::DeviceRefused,
            Self::SessionClaimed(_) => EventKind::SessionClaimed,
            Self::SessionSuspended(_) => EventKind::SessionSuspended,
            Self::SessionResumed(_) => EventKind::SessionResumed,
            Self::SessionRevoked(_) => EventKind::SessionRevoked,
            Self::SessionExpired(_) => EventKind::SessionExpired,
            Self::ToolsChanged(_) => EventKind::ToolsChanged,
            Self::EventsChanged(_) => EventKind::EventsChanged,
            Self::AppEvent(_) => EventKind::AppEvent,
            Self::ToolCallStarted(_) => EventKind::ToolCallStarted,
            Self::ToolCallProgress(_) => EventKind::ToolCallProgress,
            Self::ToolCallFinished(_) => EventKind::ToolCallFinished,
            Self::ApprovalPending(_) => EventKind::ApprovalPending,
            Self::ApprovalSettled(_) => EventKind::ApprovalSettled,
            Self::PolicyChanged(_) => EventKind::PolicyChanged,
            Self::LeaseTaken(_) => EventKind::LeaseTaken,
            Self::LeaseReleased(_) => EventKind::LeaseReleased,
        }
    }

    fn serialize_data<M: SerializeMap>(&self, m: &mut M) -> Result<(), M::Error> {
        match self {
            Self::DaemonStarted(d) => m.serialize_entry("data", d),
            Self::LinkCreated(d) => m.serialize_entry("data", d),
            Self::LinkExpired(d) | Self::SessionExpired(d) => m.serialize_entry("data", d),
            Self::LinkRefused(d) => m.serialize_entry("data", d),
            Self::DeviceRefused(d) => m.serialize_entry("data", d),
            Self::SessionClaimed(d) => m.serialize_entry("data", d),
            Self::SessionSuspended(d) => m.serialize_entry("data", d),
            Self::SessionResumed(d) => m.serialize_entry("data", d),
            Self::SessionRevoked(d) => m.serialize_entry("data", d),
            Self::ToolsChanged(d) => m.serialize_entry("data", d),
            Self::EventsChanged(d) => m.serialize_entry("data", d),
            Self::AppEvent(d) => m.serialize_entry("data", d),
            Self::ToolCallStarted(d) => m.serialize_entry("data", d),
            Self::ToolCallProgress(d) => m.serialize_entry("data", d),
            Self::ToolCallFinished(d) => m.serialize_entry("data", d),
            Self::ApprovalPending(d) => m.serialize_entry("data", d),
            Self::ApprovalSettled(d) => m.serialize_entry("data", d),
            Self::PolicyChanged(d) => m.serialize_entry("data", d),
            Self::LeaseTaken(d) => m.serialize_entry("data", d),
            Self::LeaseReleased(d) => m.serialize_entry("data", d),
        }
    }

    /// Decodes `data` for a known kind.
    pub fn from_value(kind: EventKind, data: Value) -> Result<Self, serde_json::Error> {
        use serde_json::from_value as de;
        Ok(match kind {
            EventKind::DaemonStarted => Self::DaemonStarted(de(data)?),
            EventKind::LinkCreated => Self::LinkCreated(de(data)?),
            EventKind::LinkExpired => Self::LinkExpired(de(data)?),
            EventKind::LinkRefused => Self::LinkRefused(de(data)?),
            EventKind::DeviceRefused => Self::DeviceRefused(de(data)?),
            EventKind::SessionClaimed => Self::SessionClaimed(de(data)?),
            EventKind::SessionSuspended => Self::SessionSuspended(de(data)?),
            EventKind::SessionResumed => Self::SessionResumed(de(data)?),
            EventKind::SessionRevoked => Self::SessionRevoked(de(data)?),
            EventKind::SessionExpired => Self::SessionExpired(de(data)?),
            EventKind::ToolsChanged => Self::ToolsChanged(de(data)?),
            EventKind::EventsChanged => Self::EventsChanged(de(data)?),
            EventKind::AppEvent => Self::AppEvent(de(data)?),
            EventKind::ToolCallStarted => Self::ToolCallStarted(de(data)?),
            EventKind::ToolCallProgress => Self::ToolCallProgress(de(data)?),
            EventKind::ToolCallFinished => Self::ToolCallFinished(de(data)?),
            EventKind::ApprovalPending => Self::ApprovalPending(de(data)?),
            EventKind::ApprovalSettled => Self::ApprovalSettled(de(data)?),
            EventKind::PolicyChanged => Self::PolicyChanged(de(data)?),
            EventKind::LeaseTaken => Self::LeaseTaken(de(data)?),
            EventKind::LeaseReleased => Self::LeaseReleased(de(data)?),
        })
    }
}

/// Params of the `event` notification and items of `events.since` (§C13.1). Serialised as
/// `{kind, sessionId?, alias?, ts, seq, data}`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EventNotification {
    /// Absent for `daemon_started` and for a `device_refused` before the ack; the link's id
    /// for `link_*`.
    pub session_id: Option<String>,
    pub alias: Option<String>,
    /// Daemon time of emission, unix ms.
    pub ts: u64,
    /// Per-session sequence for `app_event` (≥ 1), `0` for every other kind.
    pub seq: u64,
    pub data: EventData,
}

setters!(EventNotification {
    with_session_id => session_id: Option<String>,
    with_alias => alias: Option<String>,
});

impl EventNotification {
    /// An event without `sessionId` and `alias` (a daemon-wide kind); add them with the setters.
    pub fn new(ts: u64, seq: u64, data: EventData) -> Self {
        Self {
            session_id: None,
            alias: None,
            ts,
            seq,
            data,
        }
    }

    pub fn kind(&self) -> EventKind {
        self.data.kind()
    }
}

/// An event line a client cannot decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventDecodeError {
    /// Clients ignore kinds they do not know (§C16).
    #[error("unknown event kind {0:?}")]
    UnknownKind(String),
    #[error("invalid event: {0}")]
    Invalid(String),
}

impl EventNotification {
    /// Decodes an event, telling an unknown kind apart from a malformed event.
    pub fn from_value(value: Value) -> Result<Self, EventDecodeError> {
        let invalid = |m: &str| EventDecodeError::Invalid(m.to_owned());
        let Value::Object(mut obj) = value else {
            return Err(invalid("not an object"));
        };
        let kind = match obj.remove("kind") {
            Some(Value::String(k)) => k
                .parse::<EventKind>()
                .map_err(|_| EventDecodeError::UnknownKind(k))?,
            _ => return Err(invalid("\"kind\" must be a string")),
        };
        let opt_string = |v: Option<Value>, key: &str| match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(EventDecodeError::Invalid(format!(
                "\"{key}\" must be a string"
            ))),
        };
        let session_id = opt_string(obj.remove("sessionId"), "sessionId")?;
        let alias = opt_string(obj.remove("alias"), "alias")?;
        let uint = |key: &str| {
            obj.get(key)
                .and_then(Value::as_u64)
                .ok_or_else(|| EventDecodeError::Invalid(format!("\"{key}\" must be an integer")))
        };
        let ts = uint("ts")?;
        let seq = uint("seq")?;
        let data = obj.remove("data").unwrap_or(Value::Object(Map::new()));
        let data = EventData::from_value(kind, data)
            .map_err(|e| EventDecodeError::Invalid(format!("{kind} data: {e}")))?;
        Ok(Self {
            session_id,
            alias,
            ts,
            seq,
            data,
        })
    }
}

impl Serialize for EventNotification {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("kind", &self.kind())?;
        if let Some(id) = &self.session_id {
            m.serialize_entry("sessionId", id)?;
        }
        if let Some(alias) = &self.alias {
            m.serialize_entry("alias", alias)?;
        }
        m.serialize_entry("ts", &self.ts)?;
        m.serialize_entry("seq", &self.seq)?;
        self.data.serialize_data(&mut m)?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for EventNotification {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::from_value(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

// ---------------------------------------------------------------------------------------------
// Notifications (§C3.2, §C10.5)
// ---------------------------------------------------------------------------------------------

/// A daemon → client notification method.
pub trait NotificationMethod {
    const NAME: &'static str;
    type Params: Serialize + DeserializeOwned + Debug + Clone + PartialEq + Send + 'static;

    /// The JSON-RPC notification carrying `params`.
    fn notification(params: &Self::Params) -> Result<Notification, serde_json::Error> {
        Ok(Notification::new(
            Self::NAME,
            Some(serde_json::to_value(params)?),
        ))
    }
}

/// `event` (§C3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventNotify;
impl NotificationMethod for EventNotify {
    const NAME: &'static str = "event";
    type Params = EventNotification;
}

/// Per-call `tool_call_started` (§C10.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ToolCallStartedNotify;
impl NotificationMethod for ToolCallStartedNotify {
    const NAME: &'static str = "tool_call_started";
    type Params = ToolCallStartedParams;
}

/// Per-call `tool_call_progress` (§C10.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ToolCallProgressNotify;
impl NotificationMethod for ToolCallProgressNotify {
    const NAME: &'static str = "tool_call_progress";
    type Params = ToolCallProgressParams;
}

/// Params of the per-call `tool_call_started` notification (§C10.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolCallStartedParams {
    /// JSON-RPC id of the `tools.call`.
    pub request_id: RequestId,
    pub call_id: String,
    pub session_id: String,
    pub alias: String,
    pub name: String,
    /// Effective deadline (§C10.3).
    pub deadline_ms: u64,
    pub ts: u64,
}

impl ToolCallStartedParams {
    pub fn new(
        request_id: RequestId,
        call_id: impl Into<String>,
        session_id: impl Into<String>,
        alias: impl Into<String>,
        name: impl Into<String>,
        deadline_ms: u64,
        ts: u64,
    ) -> Self {
        Self {
            request_id,
            call_id: call_id.into(),
            session_id: session_id.into(),
            alias: alias.into(),
            name: name.into(),
            deadline_ms,
            ts,
        }
    }
}

/// Params of the per-call `tool_call_progress` notification (§C10.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolCallProgressParams {
    pub request_id: RequestId,
    pub call_id: String,
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Set only on the notification of a call parked for an operator (§C8.17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// With `approvalId`: when the approval expires, unix seconds. The call's deadline starts
    /// only once it is approved, so a caller's watchdog should wait until then plus the
    /// deadline (§C10.3, §C11.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    pub ts: u64,
}

impl ToolCallProgressParams {
    pub fn new(
        request_id: RequestId,
        call_id: impl Into<String>,
        session_id: impl Into<String>,
        ts: u64,
    ) -> Self {
        Self {
            request_id,
            call_id: call_id.into(),
            session_id: session_id.into(),
            progress: None,
            message: None,
            approval_id: None,
            expires_at: None,
            ts,
        }
    }
}

setters!(ToolCallProgressParams {
    with_progress => progress: Option<Number>,
    with_message => message: Option<String>,
    with_approval_id => approval_id: Option<String>,
    with_expires_at => expires_at: Option<u64>,
});

/// A notification as a client sees it. Unknown methods and event kinds are kept as
/// [`ServerNotification::Unknown`] so the caller can ignore them (§C16).
#[derive(Debug, Clone, PartialEq)]
pub enum ServerNotification {
    Event(EventNotification),
    ToolCallStarted(ToolCallStartedParams),
    ToolCallProgress(ToolCallProgressParams),
    Unknown(Notification),
}

/// A known notification whose params do not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {method} notification: {reason}")]
#[non_exhaustive]
pub struct NotificationError {
    pub method: String,
    pub reason: String,
}

impl ServerNotification {
    pub fn parse(n: Notification) -> Result<Self, NotificationError> {
        let err = |reason: String| NotificationError {
            method: n.method.clone(),
            reason,
        };
        let params = n.params.clone().unwrap_or(Value::Null);
        match n.method.as_str() {
            EventNotify::NAME => match EventNotification::from_value(params) {
                Ok(e) => Ok(Self::Event(e)),
                Err(EventDecodeError::UnknownKind(_)) => Ok(Self::Unknown(n)),
                Err(e) => Err(err(e.to_string())),
            },
            ToolCallStartedNotify::NAME => serde_json::from_value(params)
                .map(Self::ToolCallStarted)
                .map_err(|e| err(e.to_string())),
            ToolCallProgressNotify::NAME => serde_json::from_value(params)
                .map(Self::ToolCallProgress)
                .map_err(|e| err(e.to_string())),
            _ => Ok(Self::Unknown(n)),
        }
    }
}

mod leases;
pub use leases::{
    CallResultState, DEFAULT_LEASE_TTL_MS, LeaseEndReason, LeaseHolder, LeaseReleasedData,
    LeaseTakenData, MAX_LEASE_TTL_MS, MAX_RESULT_WAIT_MS, MIN_LEASE_TTL_MS, SessionLease,
    SessionsLeaseParams, SessionsLeaseResult, SessionsReleaseResult, ToolsResultParams,
    ToolsResultResult,
};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(r: Result<impl Debug, ParamError>) -> ParamError {
        match r {
            Ok(v) => panic!("expected a param error, got {v:?}"),
            Err(e) => e,
        }
    }

    /// The general path of the daemon: the line classified, then its params validated.
    fn general_tools_call(line: &str) -> Result<(RequestId, ControlRequest), String> {
        match crate::jsonrpc::parse_incoming(line.as_bytes()) {
            crate::jsonrpc::Incoming::Request(r) => {
                ControlRequest::parse_owned(&r.method, r.params)
                    .map(|p| (r.id, p))
                    .map_err(|e| format!("{e:?}"))
            }
            other => Err(format!("{other:?}")),
        }
    }

    /// Issue #24: the plain `tools.call` fast path gives exactly the general path's id and
    /// params, and leaves every other line (errors included) to it.
    #[test]
    fn a_plain_tools_call_parses_as_the_general_path_does() {
        let args = r#"{"text":"é \" \ud83d\ude00","n":-1.5e3,"big":18446744073709551615,"a":[null,true,{}],"z":{"b":1,"a":2}}"#;
        let deep = (0..limits::MAX_JSON_DEPTH).fold(json!(1), |v, _| json!([v]));
        let too_deep = json!({ "a": deep });
        let long_args = json!({ "s": "x".repeat(limits::MAX_ARGS_BYTES) });
        let fast = [
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools.call","params":{{"selector":"app","name":"echo","args":{args}}}}}"#),
            r#"{"jsonrpc":"2.0","id":7,"method":"tools.call","params":{"name":"echo"}}"#.to_owned(),
            r#" { "params" : { "args" : null , "selector" : null, "name" : "é" } , "method" : "tools.call" , "id" : 2.0 , "jsonrpc" : "2.0" } "#.to_owned(),
            r#"{"jsonrpc":"2.0","id":-9007199254740991,"method":"tools.call","params":{"name":"t","callId":"c_1-A","caller":"mcp","progress":true,"detach":false,"args":{}}}"#.to_owned(),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{{"name":"{}","selector":"{}"}}}}"#, "n".repeat(limits::MAX_TOOL_NAME_LEN), "s".repeat(MAX_SELECTOR_LEN)),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{{"name":"t","args":{{"a":{deep}}}}}}}"#, deep = json!([(0..limits::MAX_JSON_DEPTH - 2).fold(json!(1), |v, _| json!([v]))])),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"t"}}"#.to_owned() + "\r",
        ];
        let general = [
            // Other members, forms and methods.
            r#"{"jsonrpc":"2.0","id":"s","method":"tools.call","params":{"name":"t"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"t","timeoutMs":5000}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"t","consent":"elicitation"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"t","x":1}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"t"},"x":1}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.list","params":{"name":"t"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call"}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":null}"#.to_owned(),
            r#"{"jsonrpc":"1.0","id":1,"method":"tools.call","params":{"name":"t"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools.call","params":{"name":"t"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":9007199254740992,"method":"tools.call","params":{"name":"t"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools.call","params":{"name":"t"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"t","name":"u"}}"#.to_owned(),
            r#"["2.0",1,"tools.call",{"name":"t"}]"#.to_owned(),
            // Escapes in borrowed strings, bad values.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"\u0074"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":""}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":null}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"t","selector":""}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"t","callId":"a b"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"t","caller":"bot"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"t","progress":1}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"t","args":[]}}"#.to_owned(),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{{"name":"{}"}}}}"#, "n".repeat(limits::MAX_TOOL_NAME_LEN + 1)),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{{"name":"t","args":{too_deep}}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{{"name":"t","args":{long_args}}}}}"#),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"t"}"#.to_owned(),
        ];
        for line in &fast {
            let (id, params) = parse_plain_tools_call(line.as_bytes())
                .unwrap_or_else(|| panic!("not on the fast path: {line}"));
            assert_eq!(
                Ok((id, ControlRequest::ToolsCall(params))),
                general_tools_call(line),
                "{line}"
            );
        }
        for line in &general {
            assert!(parse_plain_tools_call(line.as_bytes()).is_none(), "{line}");
        }
    }

    #[test]
    fn patterns() {
        assert!(is_valid_call_id("mcp_Q2n7VbX0sLk4Tz9Rw1pHcA"));
        assert!(is_valid_call_id(&"a".repeat(128)));
        assert!(!is_valid_call_id(&"a".repeat(129)));
        assert!(!is_valid_call_id(""));
        assert!(!is_valid_call_id("a b"));
        assert!(!is_valid_call_id("é"));
        assert!(is_valid_cancel_reason("mcp_client_cancelled"));
        assert!(!is_valid_cancel_reason("Client"));
        assert!(!is_valid_cancel_reason("a-b"));
        assert!(!is_valid_cancel_reason(&"a".repeat(65)));
        assert!(is_valid_group("checkout"));
        assert!(is_valid_group("checkout/payment"));
        assert!(!is_valid_group("a/b/c"));
        assert!(!is_valid_group("a/"));
        assert!(!is_valid_group("/a"));
        assert!(!is_valid_group(""));
        assert!(!is_valid_group(&"a".repeat(65)));
        assert!(is_valid_sha256_hex(&"0a".repeat(32)));
        assert!(!is_valid_sha256_hex(&"0A".repeat(32)));
        assert!(!is_valid_sha256_hex(&"0a".repeat(31)));
    }

    #[test]
    fn clamp_truncates_then_bounds() {
        assert_eq!(clamp_timeout_ms(1500.7), 1500);
        assert_eq!(clamp_timeout_ms(999.0), 1000);
        assert_eq!(clamp_timeout_ms(-5.0), 1000);
        assert_eq!(clamp_timeout_ms(600_001.0), 600_000);
        assert_eq!(clamp_timeout_ms(1e300), 600_000);
    }

    #[test]
    fn compact_len_matches_serialisation() {
        let v = json!({"text": "héllo wörld", "n": [1, 2.5, null]});
        assert_eq!(
            compact_json_len(&v),
            serde_json::to_vec(&v).map(|b| b.len()).unwrap_or(0)
        );
    }

    #[test]
    fn unknown_keys_list_both_sets() {
        let e = err(SelectorParams::validate(Some(
            &json!({"selectr": "x", "also": 1}),
        )));
        assert_eq!(e.param(), Some("selectr"));
        assert_eq!(e.details()["unknownKeys"], json!(["selectr", "also"]));
        assert_eq!(e.details()["acceptedKeys"], json!(["selector"]));
        assert!(e.message().contains("\"selectr\""), "{}", e.message());
        let obj = ErrorObject::from(e);
        assert_eq!(obj.code, -32602);
        assert_eq!(obj.error_type(), ErrorType::InvalidRequest);
    }

    #[test]
    fn params_keys_are_the_serialised_keys() {
        fn keys(v: impl Serialize) -> Vec<String> {
            match serde_json::to_value(v) {
                Ok(Value::Object(m)) => m.keys().cloned().collect(),
                other => panic!("not an object: {other:?}"),
            }
        }
        let s = || "x".to_owned();
        let full_call = ToolsCallParams::new("t")
            .with_selector(s())
            .with_timeout_ms(1000)
            .with_caller(Caller::Mcp)
            .with_consent(Consent::Elicitation)
            .with_call_id(s())
            .with_progress(true)
            .with_detach(true);
        assert_eq!(keys(full_call), ToolsCallParams::KEYS);
        let full_subscribe = SubscribeParams::default()
            .with_session_selector(s())
            .with_kinds(vec![EventKind::AppEvent])
            .with_name(s())
            .with_payload_max_bytes(1)
            .with_since(0);
        assert_eq!(keys(full_subscribe), SubscribeParams::KEYS);
        let full_consent = ConsentCreateParams::new(s(), s(), s())
            .with_selector(s())
            .with_timeout_ms(1000)
            .with_ttl_ms(1000);
        assert_eq!(keys(full_consent), ConsentCreateParams::KEYS);
        let hello = HelloParams::default()
            .with_client(ClientInfo::new(s(), s()))
            .with_control_protocol(1);
        assert_eq!(keys(&hello), HelloParams::KEYS);
        assert_eq!(keys(hello.client), ClientInfo::KEYS);
    }

    #[test]
    fn null_values_are_absent_even_for_unknown_keys() {
        assert_eq!(
            SelectorParams::validate(Some(&json!({"selector": null, "other": null}))),
            Ok(SelectorParams { selector: None })
        );
    }

    #[test]
    fn non_object_params_fail() {
        for p in [json!([]), json!("x"), json!(1), json!(true)] {
            let e = err(NoParams::validate(Some(&p)));
            assert_eq!(e.param(), Some("params"));
        }
        assert_eq!(NoParams::validate(Some(&Value::Null)), Ok(NoParams {}));
        assert_eq!(NoParams::validate(None), Ok(NoParams {}));
    }

    #[test]
    fn dispatch_by_name() {
        let r = ControlRequest::parse("tools.cancel", Some(&json!({"callId": "b"})));
        assert!(
            matches!(&r, Ok(ControlRequest::ToolsCancel(p)) if p.reason() == "client_cancelled")
        );
        assert_eq!(r.map(|r| r.method()).ok(), Some("tools.cancel"));
        for m in ["web.attach", "tasks.list", "nope", ""] {
            let e = ControlRequest::parse(m, None).err();
            assert_eq!(e.map(|e| e.code), Some(-32601), "{m}");
        }
        assert!(is_reserved_method("web.attach"));
        assert!(is_reserved_method("leases.take"));
        assert!(!is_reserved_method("approvals.list"));
        assert!(!is_reserved_method("tools.list"));
        let e = ControlRequest::parse("tools.call", Some(&json!({})));
        assert_eq!(e.err().map(|e| e.code), Some(-32602));
        assert_eq!(METHODS.len(), 28);
    }
}

// ---------------------------------------------------------------------------------------------
// Operator approvals (§C8.17–§C8.21, §C11.1)
// ---------------------------------------------------------------------------------------------

/// Longest approval or grant id accepted in params, characters.
pub const MAX_APPROVAL_ID_LEN: usize = 128;
/// Longest `approvals.decide` `code`, characters.
pub const MAX_APPROVAL_CODE_LEN: usize = 32;
/// Longest `tool` grant, minutes (24 h).
pub const MAX_GRANT_MINUTES: u64 = 1_440;
/// `grant.minutes` when a `tool` grant gives none.
pub const DEFAULT_GRANT_MINUTES: u64 = 15;

fn is_valid_approval_id(s: &str) -> bool {
    (1..=MAX_APPROVAL_ID_LEN).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

params! {
    /// `{approvalId}` of `approvals.challenge` (§C8.18).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct ApprovalIdParams {
        #[cfg_attr(feature = "schemas", schemars(pattern(r"^[A-Za-z0-9_-]{1,128}$")))]
        "approvalId" => pub approval_id: String,
    }
}

impl ApprovalIdParams {
    pub fn new(approval_id: impl Into<String>) -> Self {
        Self {
            approval_id: approval_id.into(),
        }
    }

    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        let id = p.pattern(
            Self::APPROVAL_ID,
            is_valid_approval_id,
            "must match ^[A-Za-z0-9_-]{1,128}$",
        )?;
        Ok(Self {
            approval_id: p.required(Self::APPROVAL_ID, id)?,
        })
    }
}

/// `approvals.decide` `grant` (§C8.19).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
// `minutes` only with `scope: "tool"`.
#[cfg_attr(feature = "schemas", schemars(extend("allOf" = [{
    "if": {
        "required": ["scope", "minutes"],
        "properties": {"scope": {"const": "call"}, "minutes": {"type": "integer"}}
    },
    "then": false
}])))]
#[non_exhaustive]
pub struct GrantRequest {
    pub scope: GrantScope,
    /// Only with `scope: "tool"`: 1 to 1440, default 15.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemas", schemars(range(min = 1, max = 1440)))]
    pub minutes: Option<u64>,
}

impl GrantRequest {
    pub fn call() -> Self {
        Self {
            scope: GrantScope::Call,
            minutes: None,
        }
    }

    pub fn tool(minutes: Option<u64>) -> Self {
        Self {
            scope: GrantScope::Tool,
            minutes,
        }
    }

    /// The grant's length for a `tool` scope.
    pub fn minutes(&self) -> u64 {
        self.minutes.unwrap_or(DEFAULT_GRANT_MINUTES)
    }
}

params! {
    /// `approvals.decide` params (§C8.19).
    #[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    // `grant` only with `decision: "approve"`.
    #[cfg_attr(feature = "schemas", schemars(extend("allOf" = [{
        "if": {
            "required": ["decision", "grant"],
            "properties": {"decision": {"const": "deny"}, "grant": {"type": "object"}}
        },
        "then": false
    }])))]
    pub struct ApprovalsDecideParams {
        #[cfg_attr(feature = "schemas", schemars(pattern(r"^[A-Za-z0-9_-]{1,128}$")))]
        "approvalId" => pub approval_id: String,
        "decision" => pub decision: ApprovalDecision,
        /// The one-time code the daemon wrote to the operator's terminal (§C8.18); a secret.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 32)))]
        "code" => pub code: Option<String> => with_code,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        "grant" => pub grant: Option<GrantRequest> => with_grant,
    }
}

impl Debug for ApprovalsDecideParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalsDecideParams")
            .field("approval_id", &self.approval_id)
            .field("decision", &self.decision)
            .field("code", &self.code.as_ref().map(|_| REDACTED))
            .field("grant", &self.grant)
            .finish()
    }
}

impl ApprovalsDecideParams {
    pub fn new(approval_id: impl Into<String>, decision: ApprovalDecision) -> Self {
        Self {
            approval_id: approval_id.into(),
            decision,
            code: None,
            grant: None,
        }
    }

    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        let id = p.pattern(
            Self::APPROVAL_ID,
            is_valid_approval_id,
            "must match ^[A-Za-z0-9_-]{1,128}$",
        )?;
        let decision =
            p.enumeration::<ApprovalDecision>(Self::DECISION, "must be \"approve\" or \"deny\"")?;
        let code = p.string(Self::CODE, 1, MAX_APPROVAL_CODE_LEN)?;
        let grant = match p.nested(Self::GRANT, &["scope", "minutes"])? {
            None => None,
            Some(g) => {
                let scope = g.enumeration::<GrantScope>("scope", "must be \"call\" or \"tool\"")?;
                let scope = g.required("scope", scope)?;
                let minutes = g.integer("minutes", 1, MAX_GRANT_MINUTES)?;
                if scope == GrantScope::Call && minutes.is_some() {
                    return Err(ParamError::invalid(
                        "grant.minutes",
                        "is only accepted with scope \"tool\"",
                    ));
                }
                Some(GrantRequest { scope, minutes })
            }
        };
        let decision = p.required(Self::DECISION, decision)?;
        if decision == ApprovalDecision::Deny && grant.is_some() {
            return Err(ParamError::invalid(
                Self::GRANT,
                "is only accepted with decision \"approve\"",
            ));
        }
        Ok(Self {
            approval_id: p.required(Self::APPROVAL_ID, id)?,
            decision,
            code,
            grant,
        })
    }
}

params! {
    /// `grants.revoke` params (§C8.21).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct GrantsRevokeParams {
        #[cfg_attr(feature = "schemas", schemars(pattern(r"^[A-Za-z0-9_-]{1,128}$")))]
        "grantId" => pub grant_id: String,
    }
}

impl GrantsRevokeParams {
    pub fn new(grant_id: impl Into<String>) -> Self {
        Self {
            grant_id: grant_id.into(),
        }
    }

    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        let id = p.pattern(
            Self::GRANT_ID,
            is_valid_approval_id,
            "must match ^[A-Za-z0-9_-]{1,128}$",
        )?;
        Ok(Self {
            grant_id: p.required(Self::GRANT_ID, id)?,
        })
    }
}

/// Who decided an approval: the deciding connection's `daemon.hello` client name and its
/// peer pid, each when known (§C8.19).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct Decider {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl Decider {
    pub fn new(client: Option<String>, pid: Option<u32>) -> Self {
        Self { client, pid }
    }
}

/// One pending approval (§C8.17). Never carries the one-time code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ApprovalSummary {
    pub approval_id: String,
    /// `policy` for a policy change waiting for an operator (§C11.2): then `callId`,
    /// `sessionId` and `alias` are empty, `tool` is the method (`policy.set`, `policy.reset`
    /// or `daemon.reload`) and `argsPreview` describes the change. Absent for a call.
    #[serde(default, skip_serializing_if = "ApprovalKind::is_call")]
    pub kind: ApprovalKind,
    pub call_id: String,
    pub session_id: String,
    pub alias: String,
    pub tool: String,
    pub caller: Caller,
    pub args_sha256: String,
    /// The arguments as the operator sees them: at most 200 characters, long strings and
    /// containers cut, hidden characters escaped (`crate::preview`). Absent from daemons
    /// before it was added.
    #[serde(default)]
    pub args_preview: String,
    /// ISO 8601 UTC with milliseconds.
    pub created_at: String,
    /// Unix seconds.
    pub expires_at: u64,
    /// Wrong codes still accepted before the approval is denied.
    pub attempts_left: u32,
}

impl ApprovalSummary {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        approval_id: String,
        call_id: String,
        session_id: String,
        alias: String,
        tool: String,
        caller: Caller,
        args_sha256: String,
        created_at: String,
        expires_at: u64,
        attempts_left: u32,
    ) -> Self {
        Self {
            approval_id,
            kind: ApprovalKind::Call,
            call_id,
            session_id,
            alias,
            tool,
            caller,
            args_sha256,
            args_preview: String::new(),
            created_at,
            expires_at,
            attempts_left,
        }
    }

    /// Sets `argsPreview`.
    pub fn with_args_preview(mut self, preview: impl Into<String>) -> Self {
        self.args_preview = preview.into();
        self
    }

    /// Sets `kind`.
    pub fn with_kind(mut self, kind: ApprovalKind) -> Self {
        self.kind = kind;
        self
    }
}

/// `approvals.list` result (§C8.17).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct ApprovalsListResult {
    pub approvals: Vec<ApprovalSummary>,
}

impl ApprovalsListResult {
    pub fn new(approvals: Vec<ApprovalSummary>) -> Self {
        Self { approvals }
    }
}

/// `approvals.challenge` result (§C8.18): where the code was written, never the code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ApprovalChallengeResult {
    pub approval_id: String,
    /// The terminal device the code was written to, e.g. `/dev/pts/3`.
    pub terminal: String,
    /// When the code stops being accepted, unix seconds.
    pub expires_at: u64,
}

impl ApprovalChallengeResult {
    pub fn new(
        approval_id: impl Into<String>,
        terminal: impl Into<String>,
        expires_at: u64,
    ) -> Self {
        Self {
            approval_id: approval_id.into(),
            terminal: terminal.into(),
            expires_at,
        }
    }
}

/// An operator grant: tool `tool` on session `sessionId` runs without parking until
/// `expiresAt` (§C8.19, §C8.20).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct GrantSummary {
    pub grant_id: String,
    pub session_id: String,
    pub alias: String,
    pub tool: String,
    /// The approval it was given with.
    pub approval_id: String,
    /// ISO 8601 UTC with milliseconds.
    pub created_at: String,
    /// Unix seconds.
    pub expires_at: u64,
    pub by: Decider,
}

impl GrantSummary {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        grant_id: String,
        session_id: String,
        alias: String,
        tool: String,
        approval_id: String,
        created_at: String,
        expires_at: u64,
        by: Decider,
    ) -> Self {
        Self {
            grant_id,
            session_id,
            alias,
            tool,
            approval_id,
            created_at,
            expires_at,
            by,
        }
    }
}

/// `approvals.decide` result (§C8.19).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ApprovalsDecideResult {
    pub approval_id: String,
    /// `approved` or `denied`.
    pub decision: ApprovalVerdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<GrantSummary>,
}

impl ApprovalsDecideResult {
    pub fn new(
        approval_id: impl Into<String>,
        decision: ApprovalVerdict,
        grant: Option<GrantSummary>,
    ) -> Self {
        Self {
            approval_id: approval_id.into(),
            decision,
            grant,
        }
    }
}

/// `grants.list` result (§C8.20).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct GrantsListResult {
    pub grants: Vec<GrantSummary>,
}

impl GrantsListResult {
    pub fn new(grants: Vec<GrantSummary>) -> Self {
        Self { grants }
    }
}

/// `grants.revoke` result (§C8.21).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct GrantsRevokeResult {
    pub revoked: bool,
}

impl GrantsRevokeResult {
    pub fn new(revoked: bool) -> Self {
        Self { revoked }
    }
}

/// `approval_pending` data (§C13.1); `sessionId` and `alias` are the event's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ApprovalPendingData {
    pub approval_id: String,
    /// As in `approvals.list` (§C8.17): `policy` for a policy change; absent for a call.
    #[serde(default, skip_serializing_if = "ApprovalKind::is_call")]
    pub kind: ApprovalKind,
    pub call_id: String,
    pub tool: String,
    pub caller: Caller,
    pub args_sha256: String,
    /// Unix seconds.
    pub expires_at: u64,
}

impl ApprovalPendingData {
    pub fn new(
        approval_id: impl Into<String>,
        call_id: impl Into<String>,
        tool: impl Into<String>,
        caller: Caller,
        args_sha256: impl Into<String>,
        expires_at: u64,
    ) -> Self {
        Self {
            approval_id: approval_id.into(),
            kind: ApprovalKind::Call,
            call_id: call_id.into(),
            tool: tool.into(),
            caller,
            args_sha256: args_sha256.into(),
            expires_at,
        }
    }

    /// Sets `kind`.
    pub fn with_kind(mut self, kind: ApprovalKind) -> Self {
        self.kind = kind;
        self
    }
}

/// `approval_settled` data (§C13.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ApprovalSettledData {
    pub approval_id: String,
    pub call_id: String,
    pub decision: ApprovalVerdict,
    /// Present for `approved` and `denied`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<Decider>,
    /// `"wrong_code"` when too many wrong codes denied it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The `tool` grant given with an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
}

impl ApprovalSettledData {
    pub fn new(
        approval_id: impl Into<String>,
        call_id: impl Into<String>,
        decision: ApprovalVerdict,
    ) -> Self {
        Self {
            approval_id: approval_id.into(),
            call_id: call_id.into(),
            decision,
            by: None,
            reason: None,
            grant_id: None,
        }
    }
}

setters!(ApprovalSettledData {
    with_by => by: Option<Decider>,
    with_reason => reason: Option<String>,
    with_grant_id => grant_id: Option<String>,
});

// ---------------------------------------------------------------------------------------------
// Calls in flight (§C8.40)
// ---------------------------------------------------------------------------------------------

wire_enum! {
    /// Where a call in flight stands (`calls.list` `state`, §C8.40).
    CallState {
        Running = "running",
        Cancelling = "cancelling",
        AwaitingApproval = "awaiting_approval",
    }
}

/// The last `tool_call_progress` the app sent for a call, as forwarded (§C8.40, §C10.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CallProgressSnapshot {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl CallProgressSnapshot {
    pub fn new(progress: Option<Number>, message: Option<String>) -> Self {
        Self { progress, message }
    }
}

/// One unsettled `tools.call` (§C8.40). `sessionId` and `alias` are absent only in the instant
/// before the call resolved its session; `expiresAt` (unix seconds) once the call passed policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CallSummary {
    pub call_id: String,
    pub wire_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    pub tool: String,
    pub caller: Caller,
    pub state: CallState,
    /// ISO 8601 UTC with milliseconds: when the daemon read the request.
    pub started_at: String,
    /// Milliseconds since `startedAt`, at the time of the reply.
    pub elapsed_ms: u64,
    /// The effective deadline (§C10.1), 0 before it is known.
    pub deadline_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<CallProgressSnapshot>,
    /// The pending approval while `state` is `awaiting_approval` (§C8.17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

impl CallSummary {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        call_id: impl Into<String>,
        wire_id: impl Into<String>,
        tool: impl Into<String>,
        caller: Caller,
        state: CallState,
        started_at: impl Into<String>,
        elapsed_ms: u64,
        deadline_ms: u64,
    ) -> Self {
        Self {
            call_id: call_id.into(),
            wire_id: wire_id.into(),
            session_id: None,
            alias: None,
            tool: tool.into(),
            caller,
            state,
            started_at: started_at.into(),
            elapsed_ms,
            deadline_ms,
            expires_at: None,
            progress: None,
            approval_id: None,
        }
    }
}

setters!(CallSummary {
    with_session_id => session_id: Option<String>,
    with_alias => alias: Option<String>,
    with_expires_at => expires_at: Option<u64>,
    with_progress => progress: Option<CallProgressSnapshot>,
    with_approval_id => approval_id: Option<String>,
});

/// `calls.list` result (§C8.40): the unsettled calls daemon-wide, oldest first, at most
/// [`limits::MAX_CALLS_LISTED`](crate::limits::MAX_CALLS_LISTED).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct CallsListResult {
    pub calls: Vec<CallSummary>,
    /// More calls were unsettled than listed (the newest were left out); absent when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
}

impl CallsListResult {
    pub fn new(calls: Vec<CallSummary>) -> Self {
        Self {
            calls,
            truncated: false,
        }
    }

    pub fn with_truncated(mut self, truncated: bool) -> Self {
        self.truncated = truncated;
        self
    }
}
