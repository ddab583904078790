//! Device frames (§D7): typed frames in both directions, their encoders, the daemon's
//! decoder with the validation order of §D6.2, and the lenient app-side decoder of §D7.5.
//!
//! Everything here is a pure function of one message's text (and, for the daemon, the
//! connection phase); sockets, timers and session state live in the daemon and the SDK.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::close::CloseReason;
use crate::content::{ContentBlock, ContentError, validate_content};
use crate::descriptor::{
    EventDescriptor, ToolDescriptor, json_kind, validate_event_descriptor, validate_tool_descriptor,
};
use crate::limits::{
    MAX_DEVICE_FIELD_LEN, MAX_FREE_TEXT_LEN, MAX_IDENTIFIER_LEN, MAX_JSON_DEPTH, MAX_MESSAGE_BYTES,
    MAX_REGISTRY_ENTRIES, MIN_IDENTIFIER_LEN,
};
use crate::link::RefusalReason;
use crate::parts::PartError;
use crate::text::{as_finite, as_integer, json_depth, truncate_utf16, utf16_len, utf16_len_within};

/// The only `protocol_version` of claims and resumes (§D7.3).
pub const PROTOCOL_VERSION: i64 = 2;

// ---------------------------------------------------------------------------------------------
// Frame size
// ---------------------------------------------------------------------------------------------

/// A frame over the 262144-byte limit that a sender refused to send (§D13.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the frame is {bytes} bytes; the frame limit is {limit} bytes")]
pub struct FrameTooLarge {
    /// UTF-8 bytes of the encoded frame.
    pub bytes: usize,
    /// Always [`MAX_MESSAGE_BYTES`].
    pub limit: usize,
}

/// The sender-side check every outgoing frame passes before it is written (§D6, §D13.6).
pub fn check_outgoing_size(text: &str) -> Result<(), FrameTooLarge> {
    if text.len() > MAX_MESSAGE_BYTES {
        return Err(FrameTooLarge {
            bytes: text.len(),
            limit: MAX_MESSAGE_BYTES,
        });
    }
    Ok(())
}

/// The receiver-side size check of §D6.2 step 1, for a transport that measures a message
/// before it has the whole text (reassembled fragments). [`decode_app_message`] applies it too.
pub fn check_incoming_size(bytes: usize) -> Result<(), Rejection> {
    if bytes > MAX_MESSAGE_BYTES {
        return Err(Rejection::refused(
            CloseReason::MessageTooBig,
            FrameRefusal::message(Problem::TooBig {
                bytes,
                max: MAX_MESSAGE_BYTES,
            }),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Lone surrogates
// ---------------------------------------------------------------------------------------------

/// Rewrites every `\uXXXX` escape of an unpaired UTF-16 surrogate to `\uFFFD` (§D6).
///
/// JavaScript emits such escapes when it stringifies a string cut inside a surrogate pair; they
/// are valid JSON but serde_json refuses them. U+FFFD is one UTF-16 unit, like the surrogate, so
/// every length bound reads the same. Paired escapes, escaped backslashes (`\\ud800` is the
/// literal text `\ud800`) and every other byte are left alone, so valid JSON keeps its meaning
/// and invalid JSON stays invalid. Returns the input unchanged (borrowed) when nothing matched.
pub fn sanitize_lone_surrogates(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    // Bytes of `text` already copied into `out`.
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        match surrogate_escape_at(bytes, i) {
            // `\` and the character it escapes; skipping both keeps `\\` from starting an escape.
            None => i += 2,
            Some(Surrogate::High) if surrogate_escape_at(bytes, i + 6) == Some(Surrogate::Low) => {
                i += 12;
            }
            Some(_) => {
                // Every index here sits on an ASCII byte, so these are char boundaries.
                let buf = out.get_or_insert_with(|| String::with_capacity(text.len()));
                buf.push_str(&text[copied..i]);
                buf.push_str("\\uFFFD");
                i += 6;
                copied = i;
            }
        }
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut buf) => {
            buf.push_str(&text[copied..]);
            Cow::Owned(buf)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surrogate {
    High,
    Low,
}

/// Classifies a `\uXXXX` escape starting at `i` when it encodes a surrogate.
fn surrogate_escape_at(bytes: &[u8], i: usize) -> Option<Surrogate> {
    let esc = bytes.get(i..i + 6)?;
    if esc[0] != b'\\' || esc[1] != b'u' {
        return None;
    }
    let mut unit: u32 = 0;
    for &b in &esc[2..] {
        unit = unit * 16 + char::from(b).to_digit(16)?;
    }
    match unit {
        0xD800..=0xDBFF => Some(Surrogate::High),
        0xDC00..=0xDFFF => Some(Surrogate::Low),
        _ => None,
    }
}

/// Parses one message as a JSON object, reading lone surrogates as U+FFFD.
fn parse_object(text: &str) -> Result<Map<String, Value>, Problem> {
    parse_sanitized_object(&sanitize_lone_surrogates(text))
}

fn parse_sanitized_object(text: &str) -> Result<Map<String, Value>, Problem> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(Problem::NotObject {
            found: json_kind(&other),
        }),
        Err(e) => Err(not_json(&e)),
    }
}

fn not_json(e: &serde_json::Error) -> Problem {
    Problem::NotJson {
        line: e.line(),
        column: e.column(),
    }
}

// ---------------------------------------------------------------------------------------------
// Frame types
// ---------------------------------------------------------------------------------------------

pub use crate::errors::ToolErrorType;

/// The optional device fields of a claim (§D7.3), each at most 256 UTF-16 code units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceInfo {
    pub manufacturer: Option<String>,
    pub model: Option<String>,
    pub os: Option<String>,
}

setters!(DeviceInfo {
    with_manufacturer => manufacturer: Option<String>,
    with_model => model: Option<String>,
    with_os => os: Option<String>,
});

/// `session_claim`: the first frame on a socket, with a link's token.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionClaim {
    pub session_id: String,
    /// base64url of the link's 32 token bytes, compared by the daemon (§D9.5).
    pub token: String,
    pub device: DeviceInfo,
}

impl SessionClaim {
    /// A claim without device fields; add them with `with_device`.
    pub fn new(session_id: impl Into<String>, token: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            token: token.into(),
            device: DeviceInfo::default(),
        }
    }
}

setters!(SessionClaim {
    with_device => device: DeviceInfo,
});

/// `session_resume`: the first frame on a socket, with the latest resume token.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionResume {
    pub session_id: String,
    pub resume_token: String,
}

impl SessionResume {
    pub fn new(session_id: impl Into<String>, resume_token: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            resume_token: resume_token.into(),
        }
    }
}

// Tokens never reach logs (§D9.5), so these frames print without them.
impl fmt::Debug for SessionClaim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionClaim")
            .field("session_id", &self.session_id)
            .field("token", &"<redacted>")
            .field("device", &self.device)
            .finish()
    }
}

impl fmt::Debug for SessionResume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionResume")
            .field("session_id", &self.session_id)
            .field("resume_token", &"<redacted>")
            .finish()
    }
}

/// `tool_registry_snapshot`: replaces the tool registry. Names are unique, at most 2048 tools.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolRegistrySnapshot {
    pub session_id: String,
    pub tools: Vec<ToolDescriptor>,
}

impl ToolRegistrySnapshot {
    pub fn new(session_id: impl Into<String>, tools: Vec<ToolDescriptor>) -> Self {
        Self {
            session_id: session_id.into(),
            tools,
        }
    }
}

/// One change of a tool registry delta.
// Frames are short-lived and decoded one at a time; boxing the descriptor would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum ToolDelta {
    Upsert(ToolDescriptor),
    Remove { name: String },
}

/// `tool_registry_delta`: a tool added or replaced, or removed by name.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolRegistryDelta {
    pub session_id: String,
    pub change: ToolDelta,
}

impl ToolRegistryDelta {
    pub fn new(session_id: impl Into<String>, change: ToolDelta) -> Self {
        Self {
            session_id: session_id.into(),
            change,
        }
    }
}

/// `event_registry_snapshot`: replaces the event registry. Names are unique, at most 2048 events.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EventRegistrySnapshot {
    pub session_id: String,
    pub events: Vec<EventDescriptor>,
}

impl EventRegistrySnapshot {
    pub fn new(session_id: impl Into<String>, events: Vec<EventDescriptor>) -> Self {
        Self {
            session_id: session_id.into(),
            events,
        }
    }
}

/// One change of an event registry delta.
#[derive(Debug, Clone, PartialEq)]
pub enum EventDelta {
    Upsert(EventDescriptor),
    Remove { name: String },
}

/// `event_registry_delta`: an event declared or withdrawn.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EventRegistryDelta {
    pub session_id: String,
    pub change: EventDelta,
}

impl EventRegistryDelta {
    pub fn new(session_id: impl Into<String>, change: EventDelta) -> Self {
        Self {
            session_id: session_id.into(),
            change,
        }
    }
}

/// `tool_result`: the successful reply to a call. `result` may be `null`. Without `content`
/// the `result` key is always sent (v2); with `content` (issue #17, §D17.1, only when the ack
/// announced `result_content`) it may be absent, meaning "no JSON result".
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolResult {
    pub session_id: String,
    pub id: String,
    /// `None` only with `content`: the app sent no JSON result.
    pub result: Option<Value>,
    /// 1..=64 validated blocks (§D17.1).
    pub content: Option<Vec<ContentBlock>>,
}

impl ToolResult {
    /// A v2 result: a JSON `result`, no content; add content with `with_content`.
    pub fn new(session_id: impl Into<String>, id: impl Into<String>, result: Value) -> Self {
        Self {
            session_id: session_id.into(),
            id: id.into(),
            result: Some(result),
            content: None,
        }
    }

    /// A content result without a JSON result (§D17.1).
    pub fn content_only(
        session_id: impl Into<String>,
        id: impl Into<String>,
        content: Vec<ContentBlock>,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            id: id.into(),
            result: None,
            content: Some(content),
        }
    }
}

setters!(ToolResult {
    with_content => content: Option<Vec<ContentBlock>>,
});

/// `tool_result_part` (issue #17; ours, not part of appduct v2; §D17.2): one piece of a result
/// body too large for one frame, sent only when the ack announced `result_parts_max_bytes`.
/// The frame guard checks shapes; [`crate::parts::ResultAssembler`] checks the transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolResultPart {
    pub session_id: String,
    pub id: String,
    /// Body bytes sent before this part.
    pub offset: u64,
    /// Body bytes in all (the same in every part of a call).
    pub total: u64,
    /// 64 lowercase hex digits of the SHA-256 of the whole body.
    pub sha256: String,
    /// Standard padded base64 of this part's bytes (checked by the assembler).
    pub data: String,
}

impl ToolResultPart {
    pub fn new(
        session_id: impl Into<String>,
        id: impl Into<String>,
        offset: u64,
        total: u64,
        sha256: impl Into<String>,
        data: impl Into<String>,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            id: id.into(),
            offset,
            total,
            sha256: sha256.into(),
            data: data.into(),
        }
    }
}

/// The `error` object of a `tool_error`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolErrorBody {
    pub error_type: ToolErrorType,
    /// At most 4096 UTF-16 code units.
    pub message: String,
    /// Any JSON value; `Some(Value::Null)` is an explicit `null`, `None` an absent key.
    pub details: Option<Value>,
}

impl ToolErrorBody {
    /// A body without `details`; add them with `with_details`.
    pub fn new(error_type: ToolErrorType, message: impl Into<String>) -> Self {
        Self {
            error_type,
            message: message.into(),
            details: None,
        }
    }
}

setters!(ToolErrorBody {
    with_details => details: Option<Value>,
});

/// `tool_error`: the failed reply to a call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolError {
    pub session_id: String,
    pub id: String,
    pub error: ToolErrorBody,
}

impl ToolError {
    pub fn new(session_id: impl Into<String>, id: impl Into<String>, error: ToolErrorBody) -> Self {
        Self {
            session_id: session_id.into(),
            id: id.into(),
            error,
        }
    }
}

/// `tool_call_progress`: best-effort progress of a call in flight.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolCallProgress {
    pub session_id: String,
    pub id: String,
    /// A finite number, kept as received (integer or not).
    pub progress: Option<Number>,
    pub message: Option<String>,
}

impl ToolCallProgress {
    pub fn new(session_id: impl Into<String>, id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            id: id.into(),
            progress: None,
            message: None,
        }
    }
}

setters!(ToolCallProgress {
    with_progress => progress: Option<Number>,
    with_message => message: Option<String>,
});

/// `event`: app telemetry outside calls.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EventFrame {
    pub session_id: String,
    /// 1..=4096 UTF-16 code units, any characters.
    pub name: String,
    /// Any JSON value; `Some(Value::Null)` is an explicit `null`, `None` an absent key.
    pub payload: Option<Value>,
    /// Unix milliseconds, a finite number ≥ 0 kept as received.
    pub ts: Number,
}

impl EventFrame {
    /// An event without a payload; add one with `with_payload`.
    pub fn new(session_id: impl Into<String>, name: impl Into<String>, ts: Number) -> Self {
        Self {
            session_id: session_id.into(),
            name: name.into(),
            payload: None,
            ts,
        }
    }
}

setters!(EventFrame {
    with_payload => payload: Option<Value>,
});

/// `link_refused` (issue #23; ours, not part of appduct v2): the first and only frame of a
/// connection on which an app says why it will not use a link. `proof` is
/// [`crate::link::refusal_proof`] of `session_id` and `reason`; the token itself never travels.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkRefused {
    pub session_id: String,
    pub reason: RefusalReason,
    /// 43 characters of canonical base64url (32 bytes), as the guard checked.
    pub proof: String,
}

impl LinkRefused {
    pub fn new(
        session_id: impl Into<String>,
        reason: RefusalReason,
        proof: impl Into<String>,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            reason,
            proof: proof.into(),
        }
    }
}

/// Every app → daemon frame (§D7.3), and our `link_refused`.
#[derive(Debug, Clone, PartialEq)]
pub enum AppFrame {
    SessionClaim(SessionClaim),
    SessionResume(SessionResume),
    /// Accepted only as the first frame of a connection, like a claim or resume.
    LinkRefused(LinkRefused),
    ToolRegistrySnapshot(ToolRegistrySnapshot),
    ToolRegistryDelta(ToolRegistryDelta),
    EventRegistrySnapshot(EventRegistrySnapshot),
    EventRegistryDelta(EventRegistryDelta),
    ToolResult(ToolResult),
    /// Issue #17 (ours, §D17.2).
    ToolResultPart(ToolResultPart),
    ToolError(ToolError),
    ToolCallProgress(ToolCallProgress),
    Event(EventFrame),
}

/// `session_ack`: the daemon's reply to a valid claim or resume (§D7.5).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionAck {
    pub session_id: String,
    pub alias: String,
    pub resume_token: String,
    pub keepalive_interval_s: u64,
    pub grace_s: u64,
    /// Written as `"event_registry": true` when set, omitted otherwise (it is never `false`).
    pub event_registry: bool,
    /// Issue #17 (§D17): `"result_content": true` when set (the daemon accepts `content` in
    /// `tool_result`), omitted otherwise.
    pub result_content: bool,
    /// Issue #17 (§D17): the largest body the daemon accepts in `tool_result_part` frames;
    /// `None` (absent) means no parts.
    pub result_parts_max_bytes: Option<u64>,
}

impl SessionAck {
    /// An ack without `event_registry`; set it with `with_event_registry`.
    pub fn new(
        session_id: impl Into<String>,
        alias: impl Into<String>,
        resume_token: impl Into<String>,
        keepalive_interval_s: u64,
        grace_s: u64,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            alias: alias.into(),
            resume_token: resume_token.into(),
            keepalive_interval_s,
            grace_s,
            event_registry: false,
            result_content: false,
            result_parts_max_bytes: None,
        }
    }
}

setters!(SessionAck {
    with_event_registry => event_registry: bool,
    with_result_content => result_content: bool,
    with_result_parts_max_bytes => result_parts_max_bytes: Option<u64>,
});

impl fmt::Debug for SessionAck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionAck")
            .field("session_id", &self.session_id)
            .field("alias", &self.alias)
            .field("resume_token", &"<redacted>")
            .field("keepalive_interval_s", &self.keepalive_interval_s)
            .field("grace_s", &self.grace_s)
            .field("event_registry", &self.event_registry)
            .field("result_content", &self.result_content)
            .field("result_parts_max_bytes", &self.result_parts_max_bytes)
            .finish()
    }
}

/// `tool_call`: invoke a registered tool. `id` is the daemon-minted wire id.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolCall {
    pub session_id: String,
    pub id: String,
    pub name: String,
    pub args: Map<String, Value>,
}

impl ToolCall {
    pub fn new(
        session_id: impl Into<String>,
        id: impl Into<String>,
        name: impl Into<String>,
        args: Map<String, Value>,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            id: id.into(),
            name: name.into(),
            args,
        }
    }
}

/// `tool_cancel`: ask the app to abandon a call in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolCancel {
    pub session_id: String,
    pub id: String,
    pub reason: String,
}

impl ToolCancel {
    pub fn new(
        session_id: impl Into<String>,
        id: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            id: id.into(),
            reason: reason.into(),
        }
    }
}

/// Every daemon → app frame (§D7.5).
#[derive(Debug, Clone, PartialEq)]
pub enum DaemonFrame {
    SessionAck(SessionAck),
    ToolCall(ToolCall),
    ToolCancel(ToolCancel),
}

// ---------------------------------------------------------------------------------------------
// Encoders
// ---------------------------------------------------------------------------------------------

/// A frame object with its `type` and `session_id`, the two keys every frame starts with.
fn frame_head(ty: &str, session_id: &str) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("type".into(), Value::from(ty));
    map.insert("session_id".into(), Value::from(session_id));
    map
}

fn put(map: &mut Map<String, Value>, key: &str, value: impl Into<Value>) {
    map.insert(key.to_owned(), value.into());
}

fn put_opt<T: Into<Value> + Clone>(map: &mut Map<String, Value>, key: &str, value: &Option<T>) {
    if let Some(v) = value {
        map.insert(key.to_owned(), v.clone().into());
    }
}

impl AppFrame {
    /// The wire id of the call a `tool_result`, `tool_error` or `tool_call_progress` answers.
    pub fn answered_call(&self) -> Option<&str> {
        match self {
            Self::ToolResult(f) => Some(&f.id),
            Self::ToolError(f) => Some(&f.id),
            Self::ToolCallProgress(f) => Some(&f.id),
            _ => None,
        }
    }

    /// The wire `type`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::SessionClaim(_) => "session_claim",
            Self::SessionResume(_) => "session_resume",
            Self::LinkRefused(_) => "link_refused",
            Self::ToolRegistrySnapshot(_) => "tool_registry_snapshot",
            Self::ToolRegistryDelta(_) => "tool_registry_delta",
            Self::EventRegistrySnapshot(_) => "event_registry_snapshot",
            Self::EventRegistryDelta(_) => "event_registry_delta",
            Self::ToolResult(_) => "tool_result",
            Self::ToolResultPart(_) => "tool_result_part",
            Self::ToolError(_) => "tool_error",
            Self::ToolCallProgress(_) => "tool_call_progress",
            Self::Event(_) => "event",
        }
    }

    pub fn session_id(&self) -> &str {
        match self {
            Self::SessionClaim(f) => &f.session_id,
            Self::SessionResume(f) => &f.session_id,
            Self::LinkRefused(f) => &f.session_id,
            Self::ToolRegistrySnapshot(f) => &f.session_id,
            Self::ToolRegistryDelta(f) => &f.session_id,
            Self::EventRegistrySnapshot(f) => &f.session_id,
            Self::EventRegistryDelta(f) => &f.session_id,
            Self::ToolResult(f) => &f.session_id,
            Self::ToolResultPart(f) => &f.session_id,
            Self::ToolError(f) => &f.session_id,
            Self::ToolCallProgress(f) => &f.session_id,
            Self::Event(f) => &f.session_id,
        }
    }

    /// The frame as its wire JSON object; absent optional fields are omitted.
    pub fn to_value(&self) -> Value {
        let ty = self.type_name();
        let mut m = match self {
            // Claims and resumes carry `protocol_version` before `session_id`.
            Self::SessionClaim(_) | Self::SessionResume(_) => {
                let mut m = Map::new();
                put(&mut m, "type", ty);
                put(&mut m, "protocol_version", PROTOCOL_VERSION);
                put(&mut m, "session_id", self.session_id());
                m
            }
            _ => frame_head(ty, self.session_id()),
        };
        match self {
            Self::SessionClaim(f) => {
                put(&mut m, "token", f.token.as_str());
                put_opt(&mut m, "device_manufacturer", &f.device.manufacturer);
                put_opt(&mut m, "device_model", &f.device.model);
                put_opt(&mut m, "device_os", &f.device.os);
            }
            Self::SessionResume(f) => put(&mut m, "resume_token", f.resume_token.as_str()),
            Self::LinkRefused(f) => {
                put(&mut m, "reason", f.reason.as_str());
                put(&mut m, "proof", f.proof.as_str());
            }
            Self::ToolRegistrySnapshot(f) => put(
                &mut m,
                "tools",
                f.tools
                    .iter()
                    .map(ToolDescriptor::to_value)
                    .collect::<Vec<_>>(),
            ),
            Self::ToolRegistryDelta(f) => match &f.change {
                ToolDelta::Upsert(tool) => {
                    put(&mut m, "operation", "upsert");
                    put(&mut m, "tool", tool.to_value());
                }
                ToolDelta::Remove { name } => {
                    put(&mut m, "operation", "remove");
                    put(&mut m, "name", name.as_str());
                }
            },
            Self::EventRegistrySnapshot(f) => put(
                &mut m,
                "events",
                f.events
                    .iter()
                    .map(EventDescriptor::to_value)
                    .collect::<Vec<_>>(),
            ),
            Self::EventRegistryDelta(f) => match &f.change {
                EventDelta::Upsert(event) => {
                    put(&mut m, "operation", "upsert");
                    put(&mut m, "event", event.to_value());
                }
                EventDelta::Remove { name } => {
                    put(&mut m, "operation", "remove");
                    put(&mut m, "name", name.as_str());
                }
            },
            Self::ToolResult(f) => {
                put(&mut m, "id", f.id.as_str());
                put_opt(&mut m, "result", &f.result);
                if let Some(content) = &f.content {
                    put(
                        &mut m,
                        "content",
                        content
                            .iter()
                            .map(ContentBlock::to_value)
                            .collect::<Vec<_>>(),
                    );
                }
            }
            Self::ToolResultPart(f) => {
                put(&mut m, "id", f.id.as_str());
                put(&mut m, "offset", f.offset);
                put(&mut m, "total", f.total);
                put(&mut m, "sha256", f.sha256.as_str());
                put(&mut m, "data", f.data.as_str());
            }
            Self::ToolError(f) => {
                put(&mut m, "id", f.id.as_str());
                let mut e = Map::new();
                put(&mut e, "type", f.error.error_type.as_str());
                put(&mut e, "message", f.error.message.as_str());
                put_opt(&mut e, "details", &f.error.details);
                put(&mut m, "error", e);
            }
            Self::ToolCallProgress(f) => {
                put(&mut m, "id", f.id.as_str());
                put_opt(&mut m, "progress", &f.progress);
                put_opt(&mut m, "message", &f.message);
            }
            Self::Event(f) => {
                put(&mut m, "name", f.name.as_str());
                put_opt(&mut m, "payload", &f.payload);
                put(&mut m, "ts", f.ts.clone());
            }
        }
        Value::Object(m)
    }

    /// The frame as compact JSON text, ready for [`check_outgoing_size`] and the socket.
    pub fn encode(&self) -> String {
        self.to_value().to_string()
    }
}

impl DaemonFrame {
    /// The wire `type`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::SessionAck(_) => "session_ack",
            Self::ToolCall(_) => "tool_call",
            Self::ToolCancel(_) => "tool_cancel",
        }
    }

    pub fn session_id(&self) -> &str {
        match self {
            Self::SessionAck(f) => &f.session_id,
            Self::ToolCall(f) => &f.session_id,
            Self::ToolCancel(f) => &f.session_id,
        }
    }

    /// The frame as its wire JSON object.
    pub fn to_value(&self) -> Value {
        let mut m = frame_head(self.type_name(), self.session_id());
        match self {
            Self::SessionAck(f) => {
                put(&mut m, "status", "ok");
                put(&mut m, "alias", f.alias.as_str());
                put(&mut m, "resume_token", f.resume_token.as_str());
                put(&mut m, "keepalive_interval_s", f.keepalive_interval_s);
                put(&mut m, "grace_s", f.grace_s);
                if f.event_registry {
                    put(&mut m, "event_registry", true);
                }
                if f.result_content {
                    put(&mut m, "result_content", true);
                }
                put_opt(&mut m, "result_parts_max_bytes", &f.result_parts_max_bytes);
            }
            Self::ToolCall(f) => {
                put(&mut m, "id", f.id.as_str());
                put(&mut m, "name", f.name.as_str());
                put(&mut m, "args", f.args.clone());
            }
            Self::ToolCancel(f) => {
                put(&mut m, "id", f.id.as_str());
                put(&mut m, "reason", f.reason.as_str());
            }
        }
        Value::Object(m)
    }

    /// The frame as compact JSON text. The daemon checks it with [`check_outgoing_size`]
    /// before writing (a `tool_call` over the limit fails before anything is sent).
    ///
    /// A `tool_call` (one per call) is written straight from its fields into one buffer, the
    /// same text as [`to_value`](Self::to_value) gives without copying `args` into a second
    /// tree first (issue #24).
    pub fn encode(&self) -> String {
        match self {
            Self::ToolCall(f) => {
                let wire = ToolCallWire {
                    ty: "tool_call",
                    session_id: &f.session_id,
                    id: &f.id,
                    name: &f.name,
                    args: &f.args,
                };
                let mut out = Vec::with_capacity(TOOL_CALL_CAPACITY);
                match serde_json::to_writer(&mut out, &wire) {
                    // serde_json writes UTF-8 only.
                    Ok(()) => {
                        String::from_utf8(out).unwrap_or_else(|_| self.to_value().to_string())
                    }
                    Err(_) => self.to_value().to_string(),
                }
            }
            _ => self.to_value().to_string(),
        }
    }
}

/// Bytes reserved for an encoded `tool_call` before writing it: the envelope and small
/// arguments fit without growing the buffer.
const TOOL_CALL_CAPACITY: usize = 512;

/// A `tool_call` as [`DaemonFrame::to_value`] lays it out (same keys, same order), borrowed.
#[derive(serde::Serialize)]
struct ToolCallWire<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    session_id: &'a str,
    id: &'a str,
    name: &'a str,
    args: &'a Map<String, Value>,
}

// ---------------------------------------------------------------------------------------------
// Field guards (shared by both decoders)
// ---------------------------------------------------------------------------------------------

/// What is wrong with a refused app message (§D6.2), as a value: the daemon reports it (log
/// and `device_refused` event, §C13.1) without parsing text. Never holds a field's value, so a
/// token cannot leak through it; the only peer text it carries is a refused `type`, escaped
/// and cut to 64 UTF-16 units.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// A required field is absent.
    Missing,
    /// The field has another JSON type (an explicit `null` included).
    WrongType {
        expected: &'static str,
        found: &'static str,
    },
    /// A string outside its length bounds, in UTF-16 code units.
    Length { min: usize, max: usize, len: usize },
    /// A value outside the field's closed set; `allowed` describes the set.
    NotAllowed { allowed: &'static str },
    /// A registry array over its entry limit.
    TooMany { count: usize, max: usize },
    /// A registry entry repeats the name of an earlier one.
    Repeated,
    /// A value nests deeper than `max` levels of arrays and objects.
    TooDeep { max: usize },
    /// A `tool_result`'s `content` broke a rule of §D17.1 (the call fails, the connection
    /// stays: see [`Rejection::fault`]).
    InvalidContent(ContentError),
    /// A descriptor (`tools[i]`, `tool`, `events[i]`, `event`) failed its checks (§D8).
    Descriptor(crate::descriptor::DescriptorError),
    /// The `type` is not accepted at this point of the connection. `found` is the peer's
    /// `type`, escaped and cut short.
    NotAccepted {
        expected: &'static str,
        found: String,
    },
    /// `session_id` names another session than the connection's.
    OtherSession,
    /// The text is not JSON; where the parser stopped.
    NotJson { line: usize, column: usize },
    /// The top level is JSON but not an object.
    NotObject { found: &'static str },
    /// The message is over the size limit.
    TooBig { bytes: usize, max: usize },
    /// A binary message.
    Binary,
    /// A well-formed claim or resume the daemon refused (§D9.3, §D9.4); `why` says what the
    /// field failed to match.
    Refused { why: &'static str },
    /// A tool of a registry frame lacks a declaration the daemon's `registry.require` asks
    /// for (§D18.5). `tool` is a valid tool name (it passed §D8.1), so quoting it is safe.
    Undeclared { tool: String, field: &'static str },
    /// A detail given as text to [`Rejection::new`] (tests and external callers).
    Unspecified,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::descriptor::DescriptorError;
        match self {
            Self::Missing => f.write_str("is missing"),
            Self::WrongType { expected, found } => write!(f, "must be {expected}, not {found}"),
            Self::Length { min, max, len } => write!(
                f,
                "must be {min} to {max} UTF-16 code units long, not {len}"
            ),
            Self::NotAllowed { allowed } => write!(f, "must be {allowed}"),
            Self::TooMany { count, max } => {
                write!(f, "holds {count} entries, over the limit of {max}")
            }
            Self::Repeated => f.write_str("repeats the name of an earlier entry"),
            Self::TooDeep { max } => {
                write!(f, "nests more than {max} levels of arrays and objects")
            }
            Self::InvalidContent(e) => write!(f, "has block {} invalid ({})", e.index, e.problem),
            // The one descriptor error that would quote peer text (an unbounded key).
            Self::Descriptor(DescriptorError::UnknownAnnotation { .. }) => f.write_str(
                "`annotations` may only hold readOnlyHint, destructiveHint and idempotentHint",
            ),
            Self::Descriptor(e) => write!(f, "{e}"),
            Self::NotAccepted { expected, found } => {
                write!(f, "must be {expected} here, not {found}")
            }
            Self::OtherSession => f.write_str("does not name this connection's session"),
            Self::NotJson { line, column } => {
                write!(f, "the message is not JSON (line {line}, column {column})")
            }
            Self::NotObject { found } => {
                write!(f, "the top level must be a JSON object, not {found}")
            }
            Self::TooBig { bytes, max } => {
                write!(f, "message of {bytes} bytes is over the {max}-byte limit")
            }
            Self::Binary => f.write_str("binary messages are not supported"),
            Self::Refused { why } => f.write_str(why),
            Self::Undeclared { tool, field } => write!(
                f,
                "tool `{tool}` lacks `{field}`, which this daemon's registry.require asks for (§D18.5)"
            ),
            Self::Unspecified => f.write_str("refused"),
        }
    }
}

/// Which field of which frame a refusal is about, and why (§D6.2, §D11). Rendered as
/// ``session_claim: `token` must be …``; see [`Rejection::refusal`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrameRefusal {
    /// The frame type routing recognised (one of ours, never the peer's text); `None` when the
    /// message was refused before its `type` was known or because of it.
    pub frame_type: Option<&'static str>,
    /// The field at fault as a path (`token`, `tools[3].name`, `error.type`); `None` when the
    /// message as a whole is at fault (not JSON, too big, binary).
    pub field: Option<String>,
    pub problem: Problem,
}

impl FrameRefusal {
    /// A refusal of `field`.
    pub fn field(field: impl Into<String>, problem: Problem) -> Self {
        Self {
            frame_type: None,
            field: Some(field.into()),
            problem,
        }
    }

    /// A refusal of the message as a whole.
    pub fn message(problem: Problem) -> Self {
        Self {
            frame_type: None,
            field: None,
            problem,
        }
    }

    /// This refusal, of a frame of this type.
    pub fn of_frame(mut self, frame_type: &'static str) -> Self {
        self.frame_type = Some(frame_type);
        self
    }
}

impl fmt::Display for FrameRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(t) = self.frame_type {
            write!(f, "{t}: ")?;
        }
        match &self.field {
            Some(field) => write!(f, "`{field}` {}", self.problem),
            None => write!(f, "{}", self.problem),
        }
    }
}

/// A field guard's failure.
type FieldError = FrameRefusal;

type Guarded<T> = Result<T, FieldError>;

fn required<'a>(m: &'a Map<String, Value>, field: &str) -> Guarded<&'a Value> {
    m.get(field)
        .ok_or_else(|| FieldError::field(field, Problem::Missing))
}

fn wrong_type(field: &str, expected: &'static str, found: &Value) -> FieldError {
    FieldError::field(
        field,
        Problem::WrongType {
            expected,
            found: json_kind(found),
        },
    )
}

/// A string of `min..=max` UTF-16 code units.
fn bounded_str(field: &str, v: &Value, min: usize, max: usize) -> Guarded<String> {
    let Value::String(s) = v else {
        return Err(wrong_type(field, "a string", v));
    };
    if !utf16_len_within(s, min, max) {
        return Err(FieldError::field(
            field,
            Problem::Length {
                min,
                max,
                len: utf16_len(s),
            },
        ));
    }
    Ok(s.clone())
}

fn required_str(m: &Map<String, Value>, field: &str, min: usize, max: usize) -> Guarded<String> {
    bounded_str(field, required(m, field)?, min, max)
}

/// An optional string: absent, or a string within bounds (an explicit `null` is invalid).
fn optional_str(m: &Map<String, Value>, field: &str, max: usize) -> Guarded<Option<String>> {
    m.get(field)
        .map(|v| bounded_str(field, v, 0, max))
        .transpose()
}

/// An identifier field (§D7.1): a string of 1..=128 UTF-16 code units.
fn identifier(m: &Map<String, Value>, field: &str) -> Guarded<String> {
    required_str(m, field, MIN_IDENTIFIER_LEN, MAX_IDENTIFIER_LEN)
}

fn finite_number(field: &str, v: &Value) -> Guarded<Number> {
    match v {
        Value::Number(n) if as_finite(v).is_some() => Ok(n.clone()),
        _ => Err(wrong_type(field, "a finite number", v)),
    }
}

fn protocol_version(m: &Map<String, Value>) -> Guarded<()> {
    match as_integer(required(m, "protocol_version")?) {
        Some(PROTOCOL_VERSION) => Ok(()),
        _ => Err(FieldError::field(
            "protocol_version",
            Problem::NotAllowed {
                allowed: "the integer 2",
            },
        )),
    }
}

/// A short, quoted rendering of untrusted text for details (never a token).
fn quoted(s: &str) -> String {
    format!("{:?}", truncate_utf16(s, 64))
}

/// A top-level key as a refusal's field: verbatim when it looks like a protocol field name,
/// else escaped and cut short (a key is peer text).
fn field_name(key: &str) -> String {
    if (1..=32).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
        key.to_owned()
    } else {
        quoted(key)
    }
}

// ---------------------------------------------------------------------------------------------
// App → daemon guards
// ---------------------------------------------------------------------------------------------

fn guard_claim(m: &Map<String, Value>) -> Guarded<AppFrame> {
    protocol_version(m)?;
    let session_id = identifier(m, "session_id")?;
    let token = identifier(m, "token")?;
    let device = DeviceInfo {
        manufacturer: optional_str(m, "device_manufacturer", MAX_DEVICE_FIELD_LEN)?,
        model: optional_str(m, "device_model", MAX_DEVICE_FIELD_LEN)?,
        os: optional_str(m, "device_os", MAX_DEVICE_FIELD_LEN)?,
    };
    Ok(AppFrame::SessionClaim(SessionClaim {
        session_id,
        token,
        device,
    }))
}

/// `link_refused`: `session_id` an identifier, `reason` one of the four strings, `proof` the
/// 43-character canonical base64url of 32 bytes. No `protocol_version` (ours, not v2).
fn guard_refusal(m: &Map<String, Value>) -> Guarded<AppFrame> {
    let session_id = identifier(m, "session_id")?;
    let reason = match required(m, "reason")? {
        Value::String(s) => RefusalReason::parse(s).ok_or_else(|| {
            FieldError::field(
                "reason",
                Problem::NotAllowed {
                    allowed: "unsupported_link, link_expired, handshake_failed or pin_mismatch",
                },
            )
        })?,
        other => return Err(wrong_type("reason", "a string", other)),
    };
    let proof = match required(m, "proof")? {
        Value::String(s) if crate::ids::decode_exact::<32>(s).is_some() => s.clone(),
        Value::String(_) => {
            return Err(FieldError::field(
                "proof",
                Problem::NotAllowed {
                    allowed: "43 base64url characters (32 bytes)",
                },
            ));
        }
        other => return Err(wrong_type("proof", "a string", other)),
    };
    Ok(AppFrame::LinkRefused(LinkRefused {
        session_id,
        reason,
        proof,
    }))
}

fn guard_resume(m: &Map<String, Value>) -> Guarded<AppFrame> {
    protocol_version(m)?;
    Ok(AppFrame::SessionResume(SessionResume {
        session_id: identifier(m, "session_id")?,
        resume_token: identifier(m, "resume_token")?,
    }))
}

/// The array of a registry snapshot: at most 2048 entries, each valid, names unique; one bad
/// element rejects the whole frame (§D7.3).
fn registry_entries<T>(
    m: &Map<String, Value>,
    field: &str,
    validate: impl Fn(&Value) -> Result<T, crate::descriptor::DescriptorError>,
    name_of: impl Fn(&T) -> &str,
) -> Guarded<Vec<T>> {
    let v = required(m, field)?;
    let Value::Array(items) = v else {
        return Err(wrong_type(field, "an array", v));
    };
    if items.len() > MAX_REGISTRY_ENTRIES {
        return Err(FieldError::field(
            field,
            Problem::TooMany {
                count: items.len(),
                max: MAX_REGISTRY_ENTRIES,
            },
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    let mut seen = HashSet::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let entry = validate(item).map_err(|e| descriptor_error(&format!("{field}[{i}]"), e))?;
        if !seen.insert(name_of(&entry).to_owned()) {
            return Err(FieldError::field(
                format!("{field}[{i}].name"),
                Problem::Repeated,
            ));
        }
        out.push(entry);
    }
    Ok(out)
}

/// A descriptor's error at `path` (`tools[3]`, `tool`): the field is the descriptor field at
/// fault under that path.
fn descriptor_error(path: &str, e: crate::descriptor::DescriptorError) -> FieldError {
    let field = match e.field() {
        "" => path.to_owned(),
        inner => format!("{path}.{inner}"),
    };
    FieldError::field(field, Problem::Descriptor(e))
}

/// `operation` of a delta; the payload key is guarded by the caller.
enum Operation {
    Upsert,
    Remove(String),
}

fn delta_operation(m: &Map<String, Value>) -> Guarded<Operation> {
    let op = required(m, "operation")?;
    match op.as_str() {
        Some("upsert") => Ok(Operation::Upsert),
        Some("remove") => Ok(Operation::Remove(required_str(
            m,
            "name",
            1,
            MAX_FREE_TEXT_LEN,
        )?)),
        _ => Err(FieldError::field(
            "operation",
            Problem::NotAllowed {
                allowed: "\"upsert\" or \"remove\"",
            },
        )),
    }
}

fn guard_tool_snapshot(m: &Map<String, Value>) -> Guarded<AppFrame> {
    let session_id = identifier(m, "session_id")?;
    let tools = registry_entries(
        m,
        "tools",
        validate_tool_descriptor,
        |t: &ToolDescriptor| &t.name,
    )?;
    Ok(AppFrame::ToolRegistrySnapshot(ToolRegistrySnapshot {
        session_id,
        tools,
    }))
}

fn guard_tool_delta(m: &Map<String, Value>) -> Guarded<AppFrame> {
    let session_id = identifier(m, "session_id")?;
    let change = match delta_operation(m)? {
        Operation::Remove(name) => ToolDelta::Remove { name },
        Operation::Upsert => ToolDelta::Upsert(
            validate_tool_descriptor(required(m, "tool")?)
                .map_err(|e| descriptor_error("tool", e))?,
        ),
    };
    Ok(AppFrame::ToolRegistryDelta(ToolRegistryDelta {
        session_id,
        change,
    }))
}

fn guard_event_snapshot(m: &Map<String, Value>) -> Guarded<AppFrame> {
    let session_id = identifier(m, "session_id")?;
    let events = registry_entries(
        m,
        "events",
        validate_event_descriptor,
        |e: &EventDescriptor| &e.name,
    )?;
    Ok(AppFrame::EventRegistrySnapshot(EventRegistrySnapshot {
        session_id,
        events,
    }))
}

fn guard_event_delta(m: &Map<String, Value>) -> Guarded<AppFrame> {
    let session_id = identifier(m, "session_id")?;
    let change = match delta_operation(m)? {
        Operation::Remove(name) => EventDelta::Remove { name },
        Operation::Upsert => EventDelta::Upsert(
            validate_event_descriptor(required(m, "event")?)
                .map_err(|e| descriptor_error("event", e))?,
        ),
    };
    Ok(AppFrame::EventRegistryDelta(EventRegistryDelta {
        session_id,
        change,
    }))
}

fn guard_tool_result(m: &Map<String, Value>) -> Guarded<AppFrame> {
    let session_id = identifier(m, "session_id")?;
    let id = identifier(m, "id")?;
    // `result` may be absent only with `content` (§D17.1).
    let result = match (m.get("result"), m.contains_key("content")) {
        (Some(r), _) => Some(r.clone()),
        (None, true) => None,
        (None, false) => return Err(FieldError::field("result", Problem::Missing)),
    };
    let content = m
        .get("content")
        .map(|c| {
            validate_content(c)
                .map_err(|e| FieldError::field("content", Problem::InvalidContent(e)))
        })
        .transpose()?;
    Ok(AppFrame::ToolResult(ToolResult {
        session_id,
        id,
        result,
        content,
    }))
}

/// `tool_result_part` (§D17.2): shapes only. `offset` and `total` integers (`total` ≥ 1),
/// `sha256` 64 lowercase hex digits, `data` a string; the assembler checks the rest.
fn guard_tool_result_part(m: &Map<String, Value>) -> Guarded<AppFrame> {
    let session_id = identifier(m, "session_id")?;
    let id = identifier(m, "id")?;
    let offset = non_negative_integer(m, "offset")?;
    let total = non_negative_integer(m, "total")?;
    if total == 0 {
        return Err(FieldError::field(
            "total",
            Problem::NotAllowed {
                allowed: "an integer of at least 1",
            },
        ));
    }
    let sha256 = match required(m, "sha256")? {
        Value::String(s)
            if s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
        {
            s.clone()
        }
        Value::String(_) => {
            return Err(FieldError::field(
                "sha256",
                Problem::NotAllowed {
                    allowed: "64 lowercase hex digits",
                },
            ));
        }
        other => return Err(wrong_type("sha256", "a string", other)),
    };
    let data = match required(m, "data")? {
        Value::String(s) => s.clone(),
        other => return Err(wrong_type("data", "a string", other)),
    };
    Ok(AppFrame::ToolResultPart(ToolResultPart {
        session_id,
        id,
        offset,
        total,
        sha256,
        data,
    }))
}

fn guard_tool_error(m: &Map<String, Value>) -> Guarded<AppFrame> {
    let session_id = identifier(m, "session_id")?;
    let id = identifier(m, "id")?;
    let error = required(m, "error")?;
    let Value::Object(e) = error else {
        return Err(wrong_type("error", "an object", error));
    };
    let error_type = e
        .get("type")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<ToolErrorType>().ok())
        .ok_or_else(|| {
            FieldError::field(
                "error.type",
                Problem::NotAllowed {
                    allowed: "one of the seven tool_* types",
                },
            )
        })?;
    let message = e
        .get("message")
        .ok_or_else(|| FieldError::field("error.message", Problem::Missing))
        .and_then(|v| bounded_str("error.message", v, 0, MAX_FREE_TEXT_LEN))?;
    Ok(AppFrame::ToolError(ToolError {
        session_id,
        id,
        error: ToolErrorBody {
            error_type,
            message,
            details: e.get("details").cloned(),
        },
    }))
}

fn guard_progress(m: &Map<String, Value>) -> Guarded<AppFrame> {
    Ok(AppFrame::ToolCallProgress(ToolCallProgress {
        session_id: identifier(m, "session_id")?,
        id: identifier(m, "id")?,
        progress: m
            .get("progress")
            .map(|v| finite_number("progress", v))
            .transpose()?,
        message: optional_str(m, "message", MAX_FREE_TEXT_LEN)?,
    }))
}

fn guard_event(m: &Map<String, Value>) -> Guarded<AppFrame> {
    let session_id = identifier(m, "session_id")?;
    let name = required_str(m, "name", 1, MAX_FREE_TEXT_LEN)?;
    let payload = m.get("payload").cloned();
    let ts_value = required(m, "ts")?;
    let ts = finite_number("ts", ts_value)?;
    if as_finite(ts_value).is_none_or(|t| t < 0.0) {
        return Err(FieldError::field(
            "ts",
            Problem::NotAllowed {
                allowed: "at least 0",
            },
        ));
    }
    Ok(AppFrame::Event(EventFrame {
        session_id,
        name,
        payload,
        ts,
    }))
}

// ---------------------------------------------------------------------------------------------
// Daemon-side decoder
// ---------------------------------------------------------------------------------------------

/// Where a connection stands when a message arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase<'a> {
    /// Nothing acked yet: only a valid claim or resume is accepted.
    PreAck,
    /// Acked for this session id.
    Acked { session_id: &'a str },
}

/// Why the daemon closes a connection over one message: the close to send, and which field was
/// at fault and why, for the daemon's log and its `device_refused` event (§D6.2, §C13.1). The
/// close itself carries only [`Self::reason`]'s token. Neither the refusal nor the detail holds
/// a field's value, so no token can leak through them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
#[non_exhaustive]
pub struct Rejection {
    pub reason: CloseReason,
    /// [`Self::refusal`] as text (or the text given to [`Self::new`]).
    pub detail: String,
    /// The frame type, field and problem at fault (boxed: rejections travel in `Result`s).
    pub refusal: Box<FrameRefusal>,
    /// The wire id of the call this message answers, when it is a `tool_result`, `tool_error`
    /// or `tool_call_progress` whose only fault is a value nested deeper than
    /// [`MAX_JSON_DEPTH`]: the daemon fails that one call (`tool_serialization_error`) and keeps
    /// the connection, instead of sending [`Self::reason`] (project decision, issue #20: a caller
    /// whose 64-deep `args` a tool echoes one level deeper must not disconnect the app).
    pub failed_call: Option<String>,
    /// Why [`Self::failed_call`] fails, for the `details` of its `tool_serialization_error`:
    /// [`PartError::TooDeep`] or [`PartError::InvalidContent`] (issue #17: a `content` block
    /// that breaks a rule of §D17.1 fails the call, not the connection). Set iff
    /// `failed_call` is.
    pub fault: Option<PartError>,
}

impl Rejection {
    /// A rejection with a detail given as text; its [`Self::refusal`] is
    /// [`Problem::Unspecified`]. The decoder itself uses [`Self::refused`].
    pub fn new(reason: CloseReason, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
            refusal: Box::new(FrameRefusal::message(Problem::Unspecified)),
            failed_call: None,
            fault: None,
        }
    }

    /// A rejection closing with `reason` because of `refusal`.
    pub fn refused(reason: CloseReason, refusal: FrameRefusal) -> Self {
        Self {
            reason,
            detail: refusal.to_string(),
            refusal: Box::new(refusal),
            failed_call: None,
            fault: None,
        }
    }

    /// This rejection, answering call `wire_id`: see [`Self::failed_call`].
    fn failing_call(mut self, wire_id: String, fault: PartError) -> Self {
        self.failed_call = Some(wire_id);
        self.fault = Some(fault);
        self
    }

    /// A binary message (§D6.2 step 1): `1003 binary_frame_not_supported`.
    pub fn binary_frame() -> Self {
        Self::refused(
            CloseReason::BinaryFrameNotSupported,
            FrameRefusal::message(Problem::Binary),
        )
    }

    /// The close code to send.
    pub fn code(&self) -> u16 {
        self.reason.code()
    }
}

/// The app → daemon types accepted after the ack (§D6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckedType {
    ToolRegistrySnapshot,
    ToolRegistryDelta,
    EventRegistrySnapshot,
    EventRegistryDelta,
    ToolResult,
    ToolResultPart,
    ToolError,
    ToolCallProgress,
    Event,
}

impl AckedType {
    const ALL: [Self; 9] = [
        Self::ToolRegistrySnapshot,
        Self::ToolRegistryDelta,
        Self::EventRegistrySnapshot,
        Self::EventRegistryDelta,
        Self::ToolResult,
        Self::ToolResultPart,
        Self::ToolError,
        Self::ToolCallProgress,
        Self::Event,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Self::ToolRegistrySnapshot => "tool_registry_snapshot",
            Self::ToolRegistryDelta => "tool_registry_delta",
            Self::EventRegistrySnapshot => "event_registry_snapshot",
            Self::EventRegistryDelta => "event_registry_delta",
            Self::ToolResult => "tool_result",
            Self::ToolResultPart => "tool_result_part",
            Self::ToolError => "tool_error",
            Self::ToolCallProgress => "tool_call_progress",
            Self::Event => "event",
        }
    }

    fn from_wire(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == s)
    }

    /// A frame that answers one call by its wire id.
    fn is_call_answer(self) -> bool {
        matches!(
            self,
            Self::ToolResult | Self::ToolError | Self::ToolCallProgress
        )
    }

    fn is_registry(self) -> bool {
        matches!(
            self,
            Self::ToolRegistrySnapshot
                | Self::ToolRegistryDelta
                | Self::EventRegistrySnapshot
                | Self::EventRegistryDelta
        )
    }
}

/// The field guard a message meets once steps 1 to 5 of §D6.2 have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    Claim,
    Resume,
    Refusal,
    Acked(AckedType),
}

impl Guard {
    fn is_call_answer(self) -> bool {
        matches!(self, Self::Acked(kind) if kind.is_call_answer())
    }

    fn type_name(self) -> &'static str {
        match self {
            Self::Claim => "session_claim",
            Self::Resume => "session_resume",
            Self::Refusal => "link_refused",
            Self::Acked(kind) => kind.as_str(),
        }
    }

    /// The close when the guard fails: before the ack anything but a valid claim or resume is
    /// `expected_claim_or_resume`; after it, registry frames fail as `invalid_registry`.
    fn reason(self) -> CloseReason {
        match self {
            Self::Claim | Self::Resume => CloseReason::ExpectedClaimOrResume,
            Self::Refusal => CloseReason::InvalidRefusal,
            Self::Acked(kind) if kind.is_registry() => CloseReason::InvalidRegistry,
            Self::Acked(_) => CloseReason::InvalidMessage,
        }
    }

    fn run(self, m: &Map<String, Value>) -> Guarded<AppFrame> {
        match self {
            Self::Claim => guard_claim(m),
            Self::Resume => guard_resume(m),
            Self::Refusal => guard_refusal(m),
            Self::Acked(AckedType::ToolRegistrySnapshot) => guard_tool_snapshot(m),
            Self::Acked(AckedType::ToolRegistryDelta) => guard_tool_delta(m),
            Self::Acked(AckedType::EventRegistrySnapshot) => guard_event_snapshot(m),
            Self::Acked(AckedType::EventRegistryDelta) => guard_event_delta(m),
            Self::Acked(AckedType::ToolResult) => guard_tool_result(m),
            Self::Acked(AckedType::ToolResultPart) => guard_tool_result_part(m),
            Self::Acked(AckedType::ToolError) => guard_tool_error(m),
            Self::Acked(AckedType::ToolCallProgress) => guard_progress(m),
            Self::Acked(AckedType::Event) => guard_event(m),
        }
    }

    fn reject(self, refusal: FrameRefusal) -> Rejection {
        Rejection::refused(self.reason(), refusal.of_frame(self.type_name()))
    }
}

/// A frame's `type` field as routing sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TypeField<'a> {
    Missing,
    Str(&'a str),
    /// Not a string: the JSON kind it has instead.
    Other(&'static str),
}

impl<'a> TypeField<'a> {
    fn of(v: Option<&'a Value>) -> Self {
        match v {
            None => Self::Missing,
            Some(Value::String(s)) => Self::Str(s),
            Some(other) => Self::Other(json_kind(other)),
        }
    }

    fn as_str(self) -> Option<&'a str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The refusal of this `type` where `expected` types are accepted.
    fn refusal(self, expected: &'static str) -> FrameRefusal {
        let problem = match self {
            Self::Missing => Problem::Missing,
            Self::Str(s) => Problem::NotAccepted {
                expected,
                found: quoted(s),
            },
            Self::Other(found) => Problem::WrongType {
                expected: "a string",
                found,
            },
        };
        FrameRefusal::field("type", problem)
    }
}

/// Steps 3 to 5 of §D6.2: the guard for a message with this `type` and (string)
/// `session_id`, or the rejection that comes before any guard.
fn select_guard(
    ty: TypeField<'_>,
    sent_session_id: Option<&str>,
    phase: Phase<'_>,
) -> Result<Guard, Rejection> {
    match phase {
        Phase::PreAck => match ty.as_str() {
            Some("session_claim") => Ok(Guard::Claim),
            Some("session_resume") => Ok(Guard::Resume),
            Some("link_refused") => Ok(Guard::Refusal),
            _ => Err(Rejection::refused(
                CloseReason::ExpectedClaimOrResume,
                ty.refusal("session_claim or session_resume (the first frame)"),
            )),
        },
        Phase::Acked { session_id } => {
            let Some(kind) = ty.as_str().and_then(AckedType::from_wire) else {
                return Err(Rejection::refused(
                    CloseReason::UnknownMessageType,
                    ty.refusal("one of the nine app frames accepted after the ack"),
                ));
            };
            // A non-string or missing `session_id` is left to the guard (step 6).
            if sent_session_id.is_some_and(|sent| sent != session_id) {
                return Err(Rejection::refused(
                    CloseReason::SessionMismatch,
                    FrameRefusal::field("session_id", Problem::OtherSession)
                        .of_frame(kind.as_str()),
                ));
            }
            Ok(Guard::Acked(kind))
        }
    }
}

/// Deepest a frame may nest: every value inside it at most [`MAX_JSON_DEPTH`] levels, plus the
/// frame object itself.
const MAX_FRAME_DEPTH: usize = MAX_JSON_DEPTH + 1;

/// The refusal of a message too deep to parse (`field: None`) or of its field `field`.
fn too_deep(field: Option<&str>) -> FrameRefusal {
    let problem = Problem::TooDeep {
        max: MAX_JSON_DEPTH,
    };
    match field {
        Some(field) => FrameRefusal::field(field, problem),
        None => FrameRefusal::message(problem),
    }
}

/// Deepest nesting of arrays and objects in a JSON text, counting brackets outside strings.
/// Exact for valid JSON; for anything else the parse that follows decides.
pub(crate) fn text_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// What routing needs of a message too deep to parse into a [`Value`]: its `type` and
/// `session_id`. Reading it walks the rest of the text without building anything (serde_json
/// skips ignored values iteratively), which also checks that the text is JSON.
#[derive(Default)]
struct FrameHead {
    ty: Option<HeadField>,
    session_id: Option<HeadField>,
    id: Option<HeadField>,
}

/// A top-level field: its text when it is a string, else its JSON kind.
struct HeadField(Result<String, &'static str>);

impl FrameHead {
    fn type_field(&self) -> TypeField<'_> {
        match &self.ty {
            None => TypeField::Missing,
            Some(HeadField(Ok(s))) => TypeField::Str(s),
            Some(HeadField(Err(kind))) => TypeField::Other(kind),
        }
    }

    fn session_id(&self) -> Option<&str> {
        match &self.session_id {
            Some(HeadField(Ok(s))) => Some(s),
            _ => None,
        }
    }

    /// The `id` when it is a valid identifier (§D7.1).
    fn call_id(&self) -> Option<String> {
        let Some(HeadField(Ok(id))) = &self.id else {
            return None;
        };
        let m = Map::from_iter([("id".to_owned(), Value::String(id.clone()))]);
        identifier(&m, "id").ok()
    }
}

impl<'de> Deserialize<'de> for FrameHead {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct HeadVisitor;
        impl<'de> Visitor<'de> for HeadVisitor {
            type Value = FrameHead;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FrameHead, A::Error> {
                let mut head = FrameHead::default();
                // A repeated key keeps its last value, as when parsing into a `Value`.
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "type" => head.ty = Some(map.next_value()?),
                        "session_id" => head.session_id = Some(map.next_value()?),
                        "id" => head.id = Some(map.next_value()?),
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(head)
            }
        }
        d.deserialize_map(HeadVisitor)
    }
}

impl<'de> Deserialize<'de> for HeadField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl<'de> Visitor<'de> for FieldVisitor {
            type Value = HeadField;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E>(self, s: &str) -> Result<HeadField, E> {
                Ok(HeadField(Ok(s.to_owned())))
            }
            fn visit_unit<E>(self) -> Result<HeadField, E> {
                Ok(HeadField(Err("null")))
            }
            fn visit_bool<E>(self, _: bool) -> Result<HeadField, E> {
                Ok(HeadField(Err("a boolean")))
            }
            fn visit_i64<E>(self, _: i64) -> Result<HeadField, E> {
                Ok(HeadField(Err("a number")))
            }
            fn visit_u64<E>(self, _: u64) -> Result<HeadField, E> {
                Ok(HeadField(Err("a number")))
            }
            fn visit_f64<E>(self, _: f64) -> Result<HeadField, E> {
                Ok(HeadField(Err("a number")))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<HeadField, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(HeadField(Err("an array")))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HeadField, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(HeadField(Err("an object")))
            }
        }
        d.deserialize_any(FieldVisitor)
    }
}

/// The rejection of a message nested deeper than [`MAX_FRAME_DEPTH`]: `invalid_json` only when
/// it is not a JSON object at all, else whatever routing or the type's guard gives.
fn reject_too_deep(text: &str, phase: Phase<'_>) -> Rejection {
    let head = match serde_json::from_str::<FrameHead>(text) {
        Ok(head) => head,
        Err(e) => {
            return Rejection::refused(
                CloseReason::InvalidJson,
                FrameRefusal::message(not_json(&e)),
            );
        }
    };
    match select_guard(head.type_field(), head.session_id(), phase) {
        Ok(guard) => {
            let rejection = guard.reject(too_deep(None));
            // Too deep to parse, so the rest of the guard cannot run: an answer with a string
            // `session_id` (routing checked it) and a valid `id` fails its call.
            match (guard.is_call_answer(), head.session_id(), head.call_id()) {
                (true, Some(_), Some(id)) => rejection.failing_call(id, PartError::TooDeep),
                _ => rejection,
            }
        }
        Err(rejection) => rejection,
    }
}

/// Decodes one text message from an app, in the validation order of §D6.2 (steps 1 to 6;
/// binary messages never reach here, see [`Rejection::binary_frame`]). `Ok` is a frame that
/// passed its guard; `Err` names the close to send.
///
/// Nesting deeper than [`MAX_JSON_DEPTH`] fails the type's guard (step 6), however deep: the
/// text is measured before parsing, so a frame beyond the parser's own limit is still routed by
/// its `type` instead of being called invalid JSON.
pub fn decode_app_message(text: &str, phase: Phase<'_>) -> Result<AppFrame, Rejection> {
    check_incoming_size(text.len())?;
    if let Some(frame) = plain_tool_result(text, phase) {
        return Ok(frame);
    }
    decode_app_message_general(text, phase)
}

/// The common `tool_result` after the ack (issue #24): exactly the four members `type`,
/// `session_id`, `id` and `result`, the three strings without escapes (borrowed from the
/// text). Read without a `Value` tree for the frame; only `result` is parsed into one.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainToolResult<'a> {
    #[serde(rename = "type", borrow)]
    ty: &'a str,
    #[serde(borrow)]
    session_id: &'a str,
    #[serde(borrow)]
    id: &'a str,
    result: Value,
}

/// [`decode_app_message`]'s fast path: a `tool_result` that passes every check of the general
/// path (type, the session's own id, `id` of 1..=128 UTF-16 units, a non-null `result` within
/// [`MAX_JSON_DEPTH`]) decodes to the same frame. Anything else (another type or member, an
/// escape in a string, a duplicate member, a lone surrogate, which the parser refuses here) is
/// `None`, and the general path decides, with its exact refusal.
fn plain_tool_result(text: &str, phase: Phase<'_>) -> Option<AppFrame> {
    let Phase::Acked { session_id } = phase else {
        return None;
    };
    // A struct would also read an array positionally; only objects take this path.
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let plain: PlainToolResult<'_> = serde_json::from_str(text).ok()?;
    let valid = plain.ty == "tool_result"
        && plain.session_id == session_id
        && utf16_len_within(plain.id, MIN_IDENTIFIER_LEN, MAX_IDENTIFIER_LEN)
        && !plain.result.is_null()
        && json_depth(&plain.result) <= MAX_JSON_DEPTH;
    valid.then(|| {
        AppFrame::ToolResult(ToolResult {
            session_id: plain.session_id.to_owned(),
            id: plain.id.to_owned(),
            result: Some(plain.result),
            content: None,
        })
    })
}

/// [`decode_app_message`] of any message, through the frame's `Value` tree.
fn decode_app_message_general(text: &str, phase: Phase<'_>) -> Result<AppFrame, Rejection> {
    let text = sanitize_lone_surrogates(text);
    if text_depth(&text) > MAX_FRAME_DEPTH {
        return Err(reject_too_deep(&text, phase));
    }
    let mut map = parse_sanitized_object(&text)
        .map_err(|p| Rejection::refused(CloseReason::InvalidJson, FrameRefusal::message(p)))?;
    // A `tool_result`'s `result` (any JSON the app chose) moves into the frame instead of being
    // copied out of the parsed message (issue #24): the guard sees `null` in its place, which
    // it reads only for presence. A result too deep keeps the ordinary path and its refusal.
    let result = match map.get("type").and_then(Value::as_str) {
        Some("tool_result") => match map.get_mut("result") {
            Some(v) if !v.is_null() && json_depth(v) <= MAX_JSON_DEPTH => Some(std::mem::take(v)),
            _ => None,
        },
        _ => None,
    };
    let mut frame = decode_app_object(&map, phase);
    if let (Some(value), Ok(AppFrame::ToolResult(r))) = (result, &mut frame) {
        r.result = Some(value);
    }
    frame
}

/// Steps 2 (object check) to 6 of §D6.2 on an already parsed message.
pub fn decode_app_value(value: &Value, phase: Phase<'_>) -> Result<AppFrame, Rejection> {
    match value {
        Value::Object(map) => decode_app_object(map, phase),
        other => Err(Rejection::refused(
            CloseReason::InvalidJson,
            FrameRefusal::message(Problem::NotObject {
                found: json_kind(other),
            }),
        )),
    }
}

fn decode_app_object(m: &Map<String, Value>, phase: Phase<'_>) -> Result<AppFrame, Rejection> {
    let sent_session_id = m.get("session_id").and_then(Value::as_str);
    let guard = select_guard(TypeField::of(m.get("type")), sent_session_id, phase)?;
    let guarded = guard.run(m).map_err(|e| match e.problem {
        // Issue #17: a bad content block fails the call; the guard read a valid `id` first.
        Problem::InvalidContent(fault) => {
            let id = m.get("id").and_then(Value::as_str).unwrap_or_default();
            let id = id.to_owned();
            guard
                .reject(e)
                .failing_call(id, PartError::InvalidContent(fault))
        }
        _ => guard.reject(e),
    });
    if let Some((key, _)) = m.iter().find(|(_, v)| json_depth(v) > MAX_JSON_DEPTH) {
        let rejection = guard.reject(too_deep(Some(&field_name(key))));
        return Err(match guarded {
            // Well-formed apart from its depth: the call fails, the connection stays.
            Ok(frame) => match frame.answered_call() {
                Some(id) => rejection.failing_call(id.to_owned(), PartError::TooDeep),
                None => rejection,
            },
            Err(_) => rejection,
        });
    }
    guarded
}

// ---------------------------------------------------------------------------------------------
// App-side decoder
// ---------------------------------------------------------------------------------------------

/// Why an app could not read a daemon message. SDKs ignore unknown types (those decode to
/// `Ok(None)`); what is left here is a message that is not a frame at all or a known frame
/// that breaks the bounds of §D7.1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DaemonMessageError {
    #[error(transparent)]
    TooLarge(#[from] FrameTooLarge),
    #[error("{0}")]
    InvalidJson(String),
    #[error("{frame_type}: {detail}")]
    InvalidFrame {
        frame_type: &'static str,
        detail: String,
    },
}

/// Decodes one text message from the daemon, leniently as §D7.5 asks of SDKs: unknown
/// fields are ignored, an unknown (or missing) `type` gives `Ok(None)`, and a `tool_call`
/// whose `args` is not an object gets `{}`.
pub fn decode_daemon_message(text: &str) -> Result<Option<DaemonFrame>, DaemonMessageError> {
    check_outgoing_size(text)?;
    let map = parse_object(text).map_err(|p| DaemonMessageError::InvalidJson(p.to_string()))?;
    decode_daemon_object(&map)
}

/// [`decode_daemon_message`] on an already parsed message.
pub fn decode_daemon_value(value: &Value) -> Result<Option<DaemonFrame>, DaemonMessageError> {
    match value {
        Value::Object(map) => decode_daemon_object(map),
        other => Err(DaemonMessageError::InvalidJson(format!(
            "the top level must be a JSON object, not {}",
            json_kind(other)
        ))),
    }
}

fn decode_daemon_object(m: &Map<String, Value>) -> Result<Option<DaemonFrame>, DaemonMessageError> {
    let (frame_type, guarded) = match m.get("type").and_then(Value::as_str) {
        Some("session_ack") => ("session_ack", guard_ack(m)),
        Some("tool_call") => ("tool_call", guard_tool_call(m)),
        Some("tool_cancel") => ("tool_cancel", guard_tool_cancel(m)),
        _ => return Ok(None),
    };
    guarded
        .map(Some)
        .map_err(|e| DaemonMessageError::InvalidFrame {
            frame_type,
            detail: e.to_string(),
        })
}

fn non_negative_integer(m: &Map<String, Value>, field: &str) -> Guarded<u64> {
    match as_integer(required(m, field)?) {
        Some(i) if i >= 0 => Ok(i.unsigned_abs()),
        _ => Err(FieldError::field(
            field,
            Problem::NotAllowed {
                allowed: "an integer of at least 0",
            },
        )),
    }
}

fn guard_ack(m: &Map<String, Value>) -> Guarded<DaemonFrame> {
    let session_id = identifier(m, "session_id")?;
    if required(m, "status")?.as_str() != Some("ok") {
        return Err(FieldError::field(
            "status",
            Problem::NotAllowed { allowed: "\"ok\"" },
        ));
    }
    let alias = required_str(m, "alias", 0, usize::MAX)?;
    let resume_token = identifier(m, "resume_token")?;
    let keepalive_interval_s = non_negative_integer(m, "keepalive_interval_s")?;
    let grace_s = non_negative_integer(m, "grace_s")?;
    // An older daemon omits the flag; only `true` enables event registry frames.
    let event_registry = m.get("event_registry") == Some(&Value::Bool(true));
    // Issue #17: likewise; a parts cap that is not a positive integer reads as absent.
    let result_content = m.get("result_content") == Some(&Value::Bool(true));
    let result_parts_max_bytes = m
        .get("result_parts_max_bytes")
        .and_then(as_integer)
        .filter(|&n| n > 0)
        .map(i64::unsigned_abs);
    Ok(DaemonFrame::SessionAck(SessionAck {
        session_id,
        alias,
        resume_token,
        keepalive_interval_s,
        grace_s,
        event_registry,
        result_content,
        result_parts_max_bytes,
    }))
}

fn guard_tool_call(m: &Map<String, Value>) -> Guarded<DaemonFrame> {
    let args = match m.get("args") {
        Some(Value::Object(args)) => args.clone(),
        _ => Map::new(),
    };
    Ok(DaemonFrame::ToolCall(ToolCall {
        session_id: identifier(m, "session_id")?,
        id: identifier(m, "id")?,
        name: required_str(m, "name", 0, usize::MAX)?,
        args,
    }))
}

fn guard_tool_cancel(m: &Map<String, Value>) -> Guarded<DaemonFrame> {
    Ok(DaemonFrame::ToolCancel(ToolCancel {
        session_id: identifier(m, "session_id")?,
        id: identifier(m, "id")?,
        reason: required_str(m, "reason", 1, MAX_FREE_TEXT_LEN)?,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    const SID: &str = "Qm9vdHN0cmFwSWQx";
    const ACKED: Phase<'static> = Phase::Acked { session_id: SID };

    fn refusal_of(v: Value, phase: Phase<'_>) -> (CloseReason, FrameRefusal) {
        let r = decode_app_value(&v, phase).unwrap_err();
        assert_eq!(r.detail, r.refusal.to_string());
        (r.reason, *r.refusal)
    }

    /// Issue #24: the plain `tool_result` fast path decodes exactly what the general path
    /// does, and leaves every unusual message to it.
    #[test]
    fn a_plain_tool_result_decodes_as_the_general_path_does() {
        let deep = (0..MAX_JSON_DEPTH).fold(json!(1), |v, _| json!([v]));
        let deeper = json!([deep.clone()]);
        let long_id = "i".repeat(MAX_IDENTIFIER_LEN + 1);
        let fast = [
            format!(r#"{{"type":"tool_result","session_id":"{SID}","id":"c1","result":{{"text":"é \" \ud83d\ude00","n":-1.5e3,"big":18446744073709551615,"a":[null,true,{{}}]}}}}"#),
            format!(r#" {{ "result" : 0 , "id":"c1","session_id":"{SID}","type":"tool_result"}}"#),
            json!({"type": "tool_result", "session_id": SID, "id": "c", "result": deep}).to_string(),
            json!({"type": "tool_result", "session_id": SID, "id": "i".repeat(MAX_IDENTIFIER_LEN), "result": "s"}).to_string(),
        ];
        let general = [
            // Escapes in a borrowed string, other or repeated members, other shapes.
            format!(r#"{{"type":"tool_result","session_id":"{SID}","id":"c\u0031","result":1}}"#),
            format!(r#"{{"type":"tool_result","session_id":"{SID}","id":"c1","result":1,"extra":2}}"#),
            format!(r#"{{"type":"tool_result","session_id":"{SID}","id":"c1","id":"c2","result":1}}"#),
            format!(r#"{{"type":"tool_result","session_id":"{SID}","id":"c1","result":"\ud800"}}"#),
            format!(r#"["tool_result","{SID}","c1",1]"#),
            json!({"type": "tool_result", "session_id": SID, "id": "c", "result": null}).to_string(),
            json!({"type": "tool_result", "session_id": SID, "id": "c"}).to_string(),
            json!({"type": "tool_result", "session_id": "other", "id": "c", "result": 1}).to_string(),
            json!({"type": "tool_result", "session_id": SID, "id": "", "result": 1}).to_string(),
            json!({"type": "tool_result", "session_id": SID, "id": long_id, "result": 1}).to_string(),
            json!({"type": "tool_result", "session_id": SID, "id": 7, "result": 1}).to_string(),
            json!({"type": "tool_result", "session_id": SID, "id": "c", "result": deeper}).to_string(),
            json!({"type": "tool_error", "session_id": SID, "id": "c", "result": 1}).to_string(),
            json!({"type": "tool_result", "session_id": SID, "id": "c", "result": 1, "content": []}).to_string(),
            "{\"type\":\"tool_result\"".to_owned(),
        ];
        for text in &fast {
            assert!(plain_tool_result(text, ACKED).is_some(), "{text}");
            assert_eq!(
                decode_app_message(text, ACKED),
                decode_app_message_general(text, ACKED),
                "{text}"
            );
        }
        for text in &general {
            assert!(plain_tool_result(text, ACKED).is_none(), "{text}");
        }
        // Before the ack nothing takes the fast path.
        assert!(plain_tool_result(&fast[0], Phase::PreAck).is_none());
    }

    /// Issue #24: a `tool_call` is encoded from its fields without a `Value` tree; the text
    /// must stay byte-identical to the tree's (key order, escapes, numbers, nesting).
    #[test]
    fn a_tool_call_encodes_exactly_as_its_value() {
        let args = json!({
            "text": "quote \" backslash \\ newline \n tab \t nul \u{0} é 😀 \u{2028}",
            "z": 1, "a": -2.5, "big": 18446744073709551615u64, "neg": -9223372036854775808i64,
            "f": 1e300, "tiny": 5e-324, "t": true, "n": null,
            "nested": {"b": [1, {"c": []}, {}], "a": "x"},
            "": ""
        });
        let Value::Object(args) = args else {
            unreachable!()
        };
        for frame in [
            DaemonFrame::ToolCall(ToolCall::new(SID, "w\"1", "tool\u{7f}", args)),
            DaemonFrame::ToolCall(ToolCall::new(SID, "c_1", "echo", Map::new())),
        ] {
            assert_eq!(frame.encode(), frame.to_value().to_string());
        }
    }

    #[test]
    fn refusals_carry_the_frame_type_field_and_problem_as_values() {
        let claim = json!({"type": "session_claim", "session_id": SID, "token": "t"});
        let (reason, r) = refusal_of(claim, Phase::PreAck);
        assert_eq!(reason, CloseReason::ExpectedClaimOrResume);
        assert_eq!(r.frame_type, Some("session_claim"));
        assert_eq!(r.field.as_deref(), Some("protocol_version"));
        assert_eq!(r.problem, Problem::Missing);
        assert_eq!(
            r.to_string(),
            "session_claim: `protocol_version` is missing"
        );

        let typo = json!({"type": "sesion_claim"});
        let (_, r) = refusal_of(typo, Phase::PreAck);
        assert_eq!((r.frame_type, r.field.as_deref()), (None, Some("type")));
        assert!(
            matches!(&r.problem, Problem::NotAccepted { found, .. } if found == "\"sesion_claim\""),
            "{r:?}"
        );

        let snapshot = json!({"type": "tool_registry_snapshot", "session_id": SID, "tools": [
            {"name": "a", "description": "d"},
            {"name": "b", "description": "d", "annotations": {"\u{1b}x".repeat(1000): true}}]});
        let (reason, r) = refusal_of(snapshot, ACKED);
        assert_eq!(reason, CloseReason::InvalidRegistry);
        assert_eq!(r.field.as_deref(), Some("tools[1].annotations"));
        // The one descriptor error that held peer text is rendered without it.
        assert!(!r.to_string().contains('\u{1b}'), "{r}");
        assert!(r.to_string().len() < 200, "{r}");

        let (reason, r) = refusal_of(json!({"type": "event", "session_id": "other"}), ACKED);
        assert_eq!(reason, CloseReason::SessionMismatch);
        assert_eq!(r.field.as_deref(), Some("session_id"));
        assert_eq!(r.problem, Problem::OtherSession);

        let r = decode_app_message("{\"type\":", Phase::PreAck).unwrap_err();
        assert_eq!(r.reason, CloseReason::InvalidJson);
        assert_eq!(r.refusal.field, None);
        assert!(matches!(
            r.refusal.problem,
            Problem::NotJson { line: 1, .. }
        ));
    }

    fn acked(v: Value) -> Result<AppFrame, Rejection> {
        decode_app_message(&v.to_string(), ACKED)
    }

    fn reason(r: Result<AppFrame, Rejection>) -> CloseReason {
        r.unwrap_err().reason
    }

    fn parsed(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    // --- surrogate sanitizer ---

    #[test]
    fn sanitizer_replaces_only_unpaired_surrogate_escapes() {
        let cases = [
            (r#""\ud800""#, r#""\uFFFD""#),
            (r#""\uDC00""#, r#""\uFFFD""#),
            (r#""\udc00\ud800""#, r#""\uFFFD\uFFFD""#),
            (r#""\ud800\ud800\udc00""#, r#""\uFFFD\ud800\udc00""#),
            (r#""\ud800\u0041""#, r#""\uFFFD\u0041""#),
            (r#""\ud800\n""#, r#""\uFFFD\n""#),
            (r#""é\ud800x""#, r#""é\uFFFDx""#),
            // An odd run of backslashes still escapes the `u`.
            (r#""\\\ud800""#, r#""\\\uFFFD""#),
            // High surrogate followed by an escaped backslash and literal text.
            (r#""\ud800\\udc00""#, r#""\uFFFD\\udc00""#),
            (r#"{"\ud800":1}"#, r#"{"\uFFFD":1}"#),
        ];
        for (input, want) in cases {
            assert_eq!(sanitize_lone_surrogates(input), want, "{input}");
        }
    }

    #[test]
    fn sanitizer_leaves_pairs_literals_and_other_escapes_alone() {
        for input in [
            r#""\uD83D\uDE00""#,
            r#""\udbff\udfff""#,
            r#""\\ud800""#,
            r#""\\\\ud800""#,
            r#""\u00e9\u0000\/\"""#,
            r#""plain 😀 text""#,
            // Truncated escapes are not surrogates; the parser rejects them itself.
            r#""\ud8"#,
            r#""\ud80"#,
            "\\",
            "",
        ] {
            assert!(
                matches!(sanitize_lone_surrogates(input), Cow::Borrowed(_)),
                "{input}"
            );
        }
    }

    #[test]
    fn lone_surrogates_read_as_replacement_characters() {
        let text = format!(
            r#"{{"type":"event","session_id":"{SID}","name":"cut \ud83d","payload":"\ude00!","ts":0}}"#
        );
        let AppFrame::Event(ev) = decode_app_message(&text, ACKED).unwrap() else {
            panic!("not an event");
        };
        assert_eq!(ev.name, "cut \u{FFFD}");
        assert_eq!(utf16_len(&ev.name), 5);
        assert_eq!(ev.payload, Some(json!("\u{FFFD}!")));
        // A literal `\ud800` (escaped backslash) stays text.
        let text = format!(r#"{{"type":"event","session_id":"{SID}","name":"\\ud800","ts":0}}"#);
        let AppFrame::Event(ev) = decode_app_message(&text, ACKED).unwrap() else {
            panic!("not an event");
        };
        assert_eq!(ev.name, "\\ud800");
    }

    // --- sizes ---

    #[test]
    fn size_checks_name_bytes_and_the_limit() {
        let at_limit = "a".repeat(MAX_MESSAGE_BYTES);
        assert!(check_outgoing_size(&at_limit).is_ok());
        let over = "é".repeat(MAX_MESSAGE_BYTES / 2) + "a";
        let err = check_outgoing_size(&over).unwrap_err();
        assert_eq!(
            err,
            FrameTooLarge {
                bytes: 262_145,
                limit: 262_144
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("262145") && msg.contains("262144"), "{msg}");
        assert!(check_incoming_size(MAX_MESSAGE_BYTES).is_ok());
        let r = check_incoming_size(MAX_MESSAGE_BYTES + 1).unwrap_err();
        assert_eq!((r.reason, r.code()), (CloseReason::MessageTooBig, 1009));
    }

    #[test]
    fn oversized_messages_are_rejected_before_parsing() {
        let over = "x".repeat(MAX_MESSAGE_BYTES + 1);
        for phase in [Phase::PreAck, ACKED] {
            assert_eq!(
                reason(decode_app_message(&over, phase)),
                CloseReason::MessageTooBig
            );
        }
        assert!(matches!(
            decode_daemon_message(&over),
            Err(DaemonMessageError::TooLarge(_))
        ));
        let binary = Rejection::binary_frame();
        assert_eq!(
            (binary.reason, binary.code()),
            (CloseReason::BinaryFrameNotSupported, 1003)
        );
    }

    // --- step 2: JSON ---

    #[test]
    fn non_json_and_non_objects_are_invalid_json_in_both_phases() {
        for text in ["not json", "[1]", "\"x\"", "null", "{\"a\":", "{} {}", ""] {
            for phase in [Phase::PreAck, ACKED] {
                assert_eq!(
                    reason(decode_app_message(text, phase)),
                    CloseReason::InvalidJson,
                    "{text:?}"
                );
            }
        }
        assert_eq!(
            reason(decode_app_value(&json!([1]), ACKED)),
            CloseReason::InvalidJson
        );
    }

    // --- step 3: before the ack ---

    const CLAIM: &str = r#"{"type":"session_claim","protocol_version":2,"session_id":"Qm9vdHN0cmFwSWQx",
 "token":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
 "device_manufacturer":"Samsung","device_model":"Galaxy S24","device_os":"Android 15"}"#;
    const RESUME: &str = r#"{"type":"session_resume","protocol_version":2,"session_id":"Qm9vdHN0cmFwSWQx",
 "resume_token":"nq0yF1Y6m8cQk3dW0pXr2b7sL9eHhA4tVz1uJgK5oM8"}"#;

    #[test]
    fn claims_and_resumes_decode_and_encode_back() {
        let claim = decode_app_message(CLAIM, Phase::PreAck).unwrap();
        let AppFrame::SessionClaim(c) = &claim else {
            panic!("not a claim");
        };
        assert_eq!(c.token, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8");
        assert_eq!(c.device.model.as_deref(), Some("Galaxy S24"));
        assert_eq!(claim.to_value(), parsed(CLAIM));
        assert!(claim.encode().starts_with(
            r#"{"type":"session_claim","protocol_version":2,"session_id":"Qm9vdHN0cmFwSWQx","token":"#
        ));
        let resume = decode_app_message(RESUME, Phase::PreAck).unwrap();
        assert_eq!(resume.type_name(), "session_resume");
        assert_eq!(resume.to_value(), parsed(RESUME));
        // `protocol_version` follows the wire integer rule; device fields may be empty.
        let mut v = parsed(CLAIM);
        v["protocol_version"] = json!(2.0);
        v["device_os"] = json!("");
        assert!(decode_app_value(&v, Phase::PreAck).is_ok());
    }

    #[test]
    fn token_values_never_reach_debug_output_or_details() {
        let claim = decode_app_message(CLAIM, Phase::PreAck).unwrap();
        assert!(!format!("{claim:?}").contains("AAECAwQF"));
        let resume = decode_app_message(RESUME, Phase::PreAck).unwrap();
        assert!(!format!("{resume:?}").contains("nq0yF1Y6"));
        let mut v = parsed(RESUME);
        v["protocol_version"] = json!(3);
        let r = decode_app_value(&v, Phase::PreAck).unwrap_err();
        assert!(!r.detail.contains("nq0yF1Y6"), "{}", r.detail);
    }

    #[test]
    fn anything_but_a_valid_claim_or_resume_first_is_expected_claim_or_resume() {
        let mut bad = Vec::new();
        for (field, value) in [
            ("protocol_version", json!(1)),
            ("protocol_version", json!("2")),
            ("session_id", json!("")),
            ("token", json!("t".repeat(129))),
            ("token", Value::Null),
            ("device_model", json!("m".repeat(257))),
            ("device_os", Value::Null),
            ("device_manufacturer", json!(7)),
        ] {
            let mut v = parsed(CLAIM);
            v[field] = value;
            bad.push(v);
        }
        let mut no_token = parsed(RESUME);
        no_token.as_object_mut().unwrap().remove("resume_token");
        bad.push(no_token);
        bad.push(json!({"type": "tool_result", "session_id": SID, "id": "c", "result": 1}));
        bad.push(json!({"session_id": SID}));
        bad.push(json!({"type": 5}));
        for v in bad {
            assert_eq!(
                reason(decode_app_value(&v, Phase::PreAck)),
                CloseReason::ExpectedClaimOrResume,
                "{v}"
            );
        }
        // Exactly 256 units is fine, counted in UTF-16.
        let mut v = parsed(CLAIM);
        v["device_model"] = json!("😀".repeat(128));
        assert!(decode_app_value(&v, Phase::PreAck).is_ok());
        v["device_model"] = json!(format!("{}x", "😀".repeat(128)));
        assert!(decode_app_value(&v, Phase::PreAck).is_err());
    }

    // --- steps 4 and 5: after the ack ---

    #[test]
    fn types_outside_the_accepted_set_are_unknown_message_type() {
        for v in [
            parsed(CLAIM),
            parsed(RESUME),
            json!({"type": "session_ack", "session_id": SID}),
            json!({"type": "nope", "session_id": SID}),
            json!({"type": 3, "session_id": SID}),
            json!({"session_id": SID}),
        ] {
            assert_eq!(
                reason(acked(v.clone())),
                CloseReason::UnknownMessageType,
                "{v}"
            );
        }
        // The type check comes before the session check.
        assert_eq!(
            reason(acked(json!({"type": "nope", "session_id": "other"}))),
            CloseReason::UnknownMessageType
        );
    }

    #[test]
    fn a_different_session_id_string_is_session_mismatch() {
        let r = acked(json!({"type": "tool_result", "session_id": "other", "id": "c"}));
        assert_eq!(reason(r), CloseReason::SessionMismatch);
        // The mismatch is found before the registry guard runs.
        let r = acked(json!({"type": "tool_registry_snapshot", "session_id": "x", "tools": 1}));
        assert_eq!(reason(r), CloseReason::SessionMismatch);
        // A missing or non-string id fails the guard instead.
        let r = acked(json!({"type": "tool_result", "id": "c", "result": 1}));
        assert_eq!(reason(r), CloseReason::InvalidMessage);
        let r = acked(json!({"type": "tool_registry_snapshot", "session_id": 5, "tools": []}));
        assert_eq!(reason(r), CloseReason::InvalidRegistry);
    }

    // --- step 6: nesting depth ---

    /// JSON text of `n` nested arrays around `1` (`[[1]]` for 2), built as text so even depths
    /// no parser accepts can be sent.
    fn nested_text(n: usize) -> String {
        format!("{}1{}", "[".repeat(n), "]".repeat(n))
    }

    fn with_field(head: &str, field: &str, n: usize) -> String {
        format!("{{{head},\"{field}\":{}}}", nested_text(n))
    }

    const RESULT_HEAD: &str = r#""type":"tool_result","session_id":"Qm9vdHN0cmFwSWQx","id":"c""#;

    #[test]
    fn values_nested_up_to_the_cap_pass_the_guard() {
        let text = with_field(RESULT_HEAD, "result", MAX_JSON_DEPTH);
        let frame = decode_app_message(&text, ACKED).unwrap();
        let AppFrame::ToolResult(result) = &frame else {
            panic!("{frame:?}");
        };
        assert_eq!(json_depth(result.result.as_ref().unwrap()), MAX_JSON_DEPTH);
        // Brackets inside strings are not nesting.
        let text = format!("{{{RESULT_HEAD},\"result\":\"{}\"}}", "[{".repeat(1_000));
        assert!(decode_app_message(&text, ACKED).is_ok());
        // The same frame as a parsed value.
        assert!(decode_app_value(&parsed(&with_field(RESULT_HEAD, "result", 64)), ACKED).is_ok());
        // `tools` is the value: array, descriptor and schema take three of its 64 levels.
        let registry = |n: usize| {
            format!(
                r#"{{"type":"tool_registry_snapshot","session_id":"{SID}","tools":[{{"name":"a","description":"d","input_schema":{{"type":"object","default":{}}}}}]}}"#,
                nested_text(n)
            )
        };
        assert!(decode_app_message(&registry(MAX_JSON_DEPTH - 3), ACKED).is_ok());
        assert_eq!(
            reason(decode_app_message(&registry(MAX_JSON_DEPTH - 2), ACKED)),
            CloseReason::InvalidRegistry
        );
        let claim = with_field(&CLAIM[1..CLAIM.len() - 1], "extra", MAX_JSON_DEPTH);
        assert!(decode_app_message(&claim, Phase::PreAck).is_ok());
    }

    #[test]
    fn values_nested_past_the_cap_fail_the_types_guard_not_the_json_step() {
        // 65 is one past the cap; 127 still parses with serde_json's default limit; 200 and
        // 100000 do not, and are still routed by their type.
        for depth in [MAX_JSON_DEPTH + 1, 127, 200, 100_000] {
            let result = with_field(RESULT_HEAD, "result", depth);
            let r = decode_app_message(&result, ACKED).unwrap_err();
            assert_eq!(
                r.reason,
                CloseReason::InvalidMessage,
                "{depth}: {}",
                r.detail
            );
            assert!(r.detail.starts_with("tool_result: "), "{}", r.detail);
            assert!(r.detail.contains("64 levels"), "{}", r.detail);

            let event_head = r#""type":"event","session_id":"Qm9vdHN0cmFwSWQx","name":"e","ts":1"#;
            let event = with_field(event_head, "payload", depth);
            assert_eq!(
                reason(decode_app_message(&event, ACKED)),
                CloseReason::InvalidMessage,
                "{depth}"
            );

            let registry = format!(
                r#"{{"type":"tool_registry_snapshot","session_id":"{SID}","tools":[{{"name":"a","description":"d","input_schema":{{"type":"object","default":{}}}}}]}}"#,
                nested_text(depth)
            );
            assert_eq!(
                reason(decode_app_message(&registry, ACKED)),
                CloseReason::InvalidRegistry,
                "{depth}"
            );

            // Before the ack the only guard is the claim's.
            let claim = with_field(&CLAIM[1..CLAIM.len() - 1], "extra", depth);
            assert_eq!(
                reason(decode_app_message(&claim, Phase::PreAck)),
                CloseReason::ExpectedClaimOrResume,
                "{depth}"
            );
        }
        // The parsed-value entry point agrees.
        let v = parsed(&with_field(RESULT_HEAD, "result", MAX_JSON_DEPTH + 1));
        assert_eq!(
            reason(decode_app_value(&v, ACKED)),
            CloseReason::InvalidMessage
        );
        let v = parsed(&with_field(&CLAIM[1..CLAIM.len() - 1], "extra", 100));
        assert_eq!(
            reason(decode_app_value(&v, Phase::PreAck)),
            CloseReason::ExpectedClaimOrResume
        );
    }

    #[test]
    fn too_deep_call_answers_name_the_call_to_fail_and_other_frames_do_not() {
        let heads = [
            (RESULT_HEAD, "result"),
            (
                r#""type":"tool_error","session_id":"Qm9vdHN0cmFwSWQx","id":"c","error":{"type":"tool_execution_error","message":"m"}"#,
                "extra",
            ),
            (
                r#""type":"tool_call_progress","session_id":"Qm9vdHN0cmFwSWQx","id":"c""#,
                "extra",
            ),
        ];
        for depth in [MAX_JSON_DEPTH + 1, 127, 200, 100_000] {
            for (head, field) in heads {
                let text = with_field(head, field, depth);
                let r = decode_app_message(&text, ACKED).unwrap_err();
                assert_eq!(r.failed_call.as_deref(), Some("c"), "{depth} {head}");
                assert_eq!(r.reason, CloseReason::InvalidMessage);
            }
            // An answer that breaks its guard too, or names no valid id, closes as before.
            let no_id = with_field(
                r#""type":"tool_result","session_id":"Qm9vdHN0cmFwSWQx","id":7"#,
                "result",
                depth,
            );
            assert_eq!(
                decode_app_message(&no_id, ACKED).unwrap_err().failed_call,
                None
            );
            let event_head = r#""type":"event","session_id":"Qm9vdHN0cmFwSWQx","name":"e","ts":1"#;
            let event = with_field(event_head, "payload", depth);
            assert_eq!(
                decode_app_message(&event, ACKED).unwrap_err().failed_call,
                None
            );
        }
        let missing_result = with_field(
            r#""type":"tool_result","session_id":"Qm9vdHN0cmFwSWQx","id":"c""#,
            "extra",
            MAX_JSON_DEPTH + 1,
        );
        let v = parsed(&missing_result);
        assert_eq!(decode_app_value(&v, ACKED).unwrap_err().failed_call, None);
        let v = parsed(&with_field(RESULT_HEAD, "result", MAX_JSON_DEPTH + 1));
        assert_eq!(
            decode_app_value(&v, ACKED)
                .unwrap_err()
                .failed_call
                .as_deref(),
            Some("c")
        );
    }

    #[test]
    fn deep_frames_keep_the_earlier_steps_of_the_order() {
        for depth in [MAX_JSON_DEPTH + 1, 5_000] {
            // Step 4: type. Step 5: session id. Both come before the depth guard.
            let unknown = with_field(
                r#""type":"nope","session_id":"Qm9vdHN0cmFwSWQx""#,
                "x",
                depth,
            );
            assert_eq!(
                reason(decode_app_message(&unknown, ACKED)),
                CloseReason::UnknownMessageType
            );
            let typeless = format!(r#"{{"type":{}}}"#, nested_text(depth));
            assert_eq!(
                reason(decode_app_message(&typeless, ACKED)),
                CloseReason::UnknownMessageType
            );
            let other = with_field(
                r#""type":"tool_result","session_id":"other","id":"c""#,
                "result",
                depth,
            );
            assert_eq!(
                reason(decode_app_message(&other, ACKED)),
                CloseReason::SessionMismatch
            );
            // Not a JSON object at all is still invalid JSON.
            for text in [
                nested_text(depth),
                format!("{{{RESULT_HEAD},\"result\":{}", "[".repeat(depth)),
                format!("{} trailing", with_field(RESULT_HEAD, "result", depth)),
            ] {
                assert_eq!(
                    reason(decode_app_message(&text, ACKED)),
                    CloseReason::InvalidJson,
                    "{}",
                    &text[..40]
                );
            }
        }
    }

    // --- step 6: registry frames ---

    const TOOL_SNAPSHOT: &str = r#"{"type":"tool_registry_snapshot","session_id":"Qm9vdHN0cmFwSWQx","tools":[
  {"name":"cart_total","description":"Return the cart's total in cents.",
   "output_schema":{"type":"object","properties":{"cents":{"type":"integer"}}},
   "annotations":{"readOnlyHint":true},"group":"checkout"},
  {"name":"clear_cart","description":"Remove every item from the cart.",
   "annotations":{"destructiveHint":true,"idempotentHint":true},"timeout_ms":3000,"group":"checkout/cart"}]}"#;

    fn tool(name: &str) -> Value {
        json!({"name": name, "description": "d"})
    }

    #[test]
    fn tool_registry_frames_decode_and_encode_back() {
        let snap = decode_app_message(TOOL_SNAPSHOT, ACKED).unwrap();
        let AppFrame::ToolRegistrySnapshot(s) = &snap else {
            panic!("not a snapshot");
        };
        assert_eq!(s.tools.len(), 2);
        assert!(s.tools[1].is_destructive());
        assert_eq!(snap.to_value(), parsed(TOOL_SNAPSHOT));
        let empty =
            acked(json!({"type": "tool_registry_snapshot", "session_id": SID, "tools": []}));
        assert!(empty.is_ok());

        let remove = r#"{"type":"tool_registry_delta","session_id":"Qm9vdHN0cmFwSWQx","operation":"remove","name":"clear_cart"}"#;
        let frame = decode_app_message(remove, ACKED).unwrap();
        assert_eq!(frame.encode(), remove);
        let upsert = json!({"type": "tool_registry_delta", "session_id": SID,
                            "operation": "upsert", "tool": tool("t"), "name": "ignored"});
        let frame = acked(upsert).unwrap();
        assert_eq!(
            frame.to_value(),
            json!({"type": "tool_registry_delta", "session_id": SID,
                   "operation": "upsert", "tool": tool("t")})
        );
    }

    #[test]
    fn bad_registry_frames_are_invalid_registry() {
        let at_cap: Vec<Value> = (0..MAX_REGISTRY_ENTRIES)
            .map(|i| tool(&format!("t{i}")))
            .collect();
        let mut over_cap = at_cap.clone();
        over_cap.push(tool("one_more"));
        assert!(
            acked(json!({"type": "tool_registry_snapshot", "session_id": SID, "tools": at_cap}))
                .is_ok()
        );
        let snapshot = |tools: Value| json!({"type": "tool_registry_snapshot", "session_id": SID, "tools": tools});
        let bad = [
            snapshot(json!(over_cap)),
            snapshot(json!([null])),
            snapshot(json!([tool("a"), tool("a")])),
            snapshot(json!([tool("a"), {"name": "b", "description": "d", "group": "a/b/c"}])),
            snapshot(json!({})),
            json!({"type": "tool_registry_snapshot", "session_id": SID}),
            json!({"type": "tool_registry_snapshot", "tools": []}),
            json!({"type": "tool_registry_delta", "session_id": SID, "operation": "replace", "tool": tool("a")}),
            json!({"type": "tool_registry_delta", "session_id": SID, "operation": "upsert"}),
            json!({"type": "tool_registry_delta", "session_id": SID, "operation": "upsert", "tool": {"name": "a b", "description": "d"}}),
            json!({"type": "tool_registry_delta", "session_id": SID, "operation": "remove", "name": ""}),
            json!({"type": "tool_registry_delta", "session_id": SID, "operation": "remove"}),
            json!({"type": "event_registry_snapshot", "session_id": SID, "events": [
                {"name": "e", "description": "d"}, {"name": "e", "description": "again"}]}),
            json!({"type": "event_registry_snapshot", "session_id": SID, "events": [
                {"name": "e", "description": "d", "payload_schema": []}]}),
            json!({"type": "event_registry_delta", "session_id": SID, "operation": "upsert", "event": {"name": "e"}}),
            json!({"type": "event_registry_delta", "session_id": SID, "operation": "remove", "name": "x".repeat(4097)}),
            json!({"type": "event_registry_delta", "session_id": SID, "operation": null, "name": "e"}),
        ];
        for v in bad {
            let r = acked(v.clone()).unwrap_err();
            assert_eq!(r.reason, CloseReason::InvalidRegistry, "{v}: {}", r.detail);
        }
        let r = acked(snapshot(json!([tool("a"), tool("b"), {"name": "c"}]))).unwrap_err();
        assert!(
            r.detail.contains("tools[2]") && r.detail.contains("description"),
            "{}",
            r.detail
        );
    }

    #[test]
    fn event_registry_frames_decode_and_encode_back() {
        let delta = r#"{"type":"event_registry_delta","session_id":"Qm9vdHN0cmFwSWQx","operation":"upsert",
 "event":{"name":"cart.item_added","description":"An item was added to the cart.",
          "payload_schema":{"type":"object","properties":{"sku":{"type":"string"}}}}}"#;
        let frame = decode_app_message(delta, ACKED).unwrap();
        assert_eq!(frame.to_value(), parsed(delta));
        let remove = json!({"type": "event_registry_delta", "session_id": SID, "operation": "remove", "name": "a b.c"});
        assert_eq!(acked(remove.clone()).unwrap().to_value(), remove);
        let snap = json!({"type": "event_registry_snapshot", "session_id": SID, "events": [
            {"name": "a", "description": "d"}, {"name": "b", "description": "d"}]});
        assert_eq!(acked(snap.clone()).unwrap().to_value(), snap);
    }

    // --- step 6: other frames ---

    #[test]
    fn call_replies_decode_and_encode_back() {
        for text in [
            r#"{"type":"tool_result","session_id":"Qm9vdHN0cmFwSWQx","id":"call_k2Xh9QmT0bZr1sVw3yLpAg","result":{"cents":4599}}"#,
            r#"{"type":"tool_result","session_id":"Qm9vdHN0cmFwSWQx","id":"c","result":null}"#,
            r#"{"type":"tool_error","session_id":"Qm9vdHN0cmFwSWQx","id":"call_k2Xh9QmT0bZr1sVw3yLpAg","error":{"type":"tool_execution_error","message":"Cart service unavailable","details":{"name":"HttpError"}}}"#,
            r#"{"type":"tool_error","session_id":"Qm9vdHN0cmFwSWQx","id":"c","error":{"type":"tool_timeout","message":"","details":null}}"#,
            r#"{"type":"tool_call_progress","session_id":"Qm9vdHN0cmFwSWQx","id":"call_k2Xh9QmT0bZr1sVw3yLpAg","progress":0.5,"message":"halfway"}"#,
            r#"{"type":"tool_call_progress","session_id":"Qm9vdHN0cmFwSWQx","id":"c"}"#,
            r#"{"type":"event","session_id":"Qm9vdHN0cmFwSWQx","name":"cart.item_added","payload":{"sku":"TEE-42"},"ts":1764494412345}"#,
            r#"{"type":"event","session_id":"Qm9vdHN0cmFwSWQx","name":"n","payload":null,"ts":0.5}"#,
            r#"{"type":"event","session_id":"Qm9vdHN0cmFwSWQx","name":"n","ts":0}"#,
        ] {
            let frame = decode_app_message(text, ACKED).unwrap();
            assert_eq!(frame.encode(), text, "exact re-encoding");
        }
        for ty in ToolErrorType::ALL {
            let v = json!({"type": "tool_error", "session_id": SID, "id": "c",
                           "error": {"type": ty.as_str(), "message": "m"}});
            let AppFrame::ToolError(e) = acked(v).unwrap() else {
                panic!("not a tool_error");
            };
            assert_eq!(e.error.error_type, ty);
            assert_eq!(e.error.details, None);
        }
    }

    #[test]
    fn tool_result_always_carries_the_result_key() {
        let frame = AppFrame::ToolResult(ToolResult::new(SID, "c", Value::Null));
        assert_eq!(
            frame.encode(),
            r#"{"type":"tool_result","session_id":"Qm9vdHN0cmFwSWQx","id":"c","result":null}"#
        );
    }

    #[test]
    fn content_results_decode_and_bad_blocks_fail_only_the_call() {
        use crate::content::ContentProblem;
        let png = "iVBORw0KGgo="; // the 8-byte PNG signature
        let ok = json!({"type": "tool_result", "session_id": SID, "id": "c",
            "content": [{"type": "image", "data": png, "mimeType": "image/png"}]});
        let AppFrame::ToolResult(r) = acked(ok.clone()).unwrap() else {
            panic!("not a tool_result");
        };
        assert_eq!(r.result, None);
        assert_eq!(r.content.as_ref().unwrap()[0].type_name(), "image");
        // Encoding gives the same object back (no `result` key).
        assert_eq!(parsed(&AppFrame::ToolResult(r).encode()), ok);

        let bad = json!({"type": "tool_result", "session_id": SID, "id": "c", "result": 1,
            "content": [{"type": "image", "data": png, "mimeType": "image/jpeg"}]});
        let r = acked(bad).unwrap_err();
        assert_eq!(r.failed_call.as_deref(), Some("c"));
        assert_eq!(
            r.fault,
            Some(PartError::InvalidContent(ContentError {
                index: 0,
                problem: ContentProblem::Signature
            }))
        );
        // Without content, `result` stays required (v2).
        let v2 = json!({"type": "tool_result", "session_id": SID, "id": "c"});
        assert_eq!(reason(acked(v2)), CloseReason::InvalidMessage);
    }

    #[test]
    fn result_parts_decode_and_malformed_parts_close() {
        let sha = "ab".repeat(32);
        let part = json!({"type": "tool_result_part", "session_id": SID, "id": "c",
            "offset": 0, "total": 10, "sha256": sha, "data": "AAAA"});
        let frame = acked(part.clone()).unwrap();
        assert_eq!(
            frame,
            AppFrame::ToolResultPart(ToolResultPart::new(SID, "c", 0, 10, sha.clone(), "AAAA"))
        );
        assert_eq!(parsed(&frame.encode()), part);
        let with = |k: &str, x: Value| {
            let mut v = part.clone();
            v[k] = x;
            v
        };
        for bad in [
            with("offset", json!(-1)),
            with("total", json!(0)),
            with("total", json!("10")),
            with("sha256", json!("AB".repeat(32))),
            with("sha256", json!("ab")),
            with("data", json!(null)),
            with("id", json!("")),
        ] {
            assert_eq!(reason(acked(bad)), CloseReason::InvalidMessage);
        }
        assert_eq!(
            reason(acked(with("session_id", json!("other")))),
            CloseReason::SessionMismatch
        );
    }

    #[test]
    fn ack_announces_content_and_parts_and_old_acks_read_as_absent() {
        let ack = SessionAck::new(SID, "a", "tok", 15, 600)
            .with_result_content(true)
            .with_result_parts_max_bytes(16_777_216);
        let text = DaemonFrame::SessionAck(ack.clone()).encode();
        assert!(text.contains(r#""result_content":true,"result_parts_max_bytes":16777216"#));
        assert_eq!(
            decode_daemon_message(&text).unwrap(),
            Some(DaemonFrame::SessionAck(ack))
        );
        let old = DaemonFrame::SessionAck(SessionAck::new(SID, "a", "tok", 15, 600)).encode();
        let Some(DaemonFrame::SessionAck(old)) = decode_daemon_message(&old).unwrap() else {
            panic!("not an ack");
        };
        assert!(!old.result_content);
        assert_eq!(old.result_parts_max_bytes, None);
    }

    #[test]
    fn bad_non_registry_frames_are_invalid_message() {
        let base = |ty: &str| json!({"type": ty, "session_id": SID, "id": "c"});
        let with = |mut v: Value, k: &str, x: Value| {
            v[k] = x;
            v
        };
        let err = |t: Value, m: Value| json!({"type": t, "message": m});
        let event = json!({"type": "event", "session_id": SID, "name": "n", "ts": 1});
        let bad = [
            base("tool_result"),
            with(base("tool_result"), "id", json!("")),
            with(
                with(base("tool_result"), "result", json!(1)),
                "id",
                json!("i".repeat(129)),
            ),
            base("tool_error"),
            with(base("tool_error"), "error", json!("boom")),
            with(
                base("tool_error"),
                "error",
                err(json!("execution_error"), json!("m")),
            ),
            with(
                base("tool_error"),
                "error",
                err(json!("session_suspended"), json!("m")),
            ),
            with(
                base("tool_error"),
                "error",
                err(json!("tool_timeout"), Value::Null),
            ),
            with(
                base("tool_error"),
                "error",
                err(json!("tool_timeout"), json!("m".repeat(4097))),
            ),
            with(base("tool_error"), "error", json!({"message": "m"})),
            with(base("tool_call_progress"), "progress", json!("0.5")),
            with(base("tool_call_progress"), "progress", Value::Null),
            with(base("tool_call_progress"), "message", json!(1)),
            with(
                base("tool_call_progress"),
                "message",
                json!("m".repeat(4097)),
            ),
            json!({"type": "tool_call_progress", "session_id": SID}),
            with(event.clone(), "ts", json!(-1)),
            with(event.clone(), "ts", json!("1")),
            with(event.clone(), "ts", Value::Null),
            with(event.clone(), "name", json!("")),
            with(event.clone(), "name", json!("n".repeat(4097))),
            json!({"type": "event", "session_id": SID, "name": "n"}),
        ];
        for v in bad {
            let r = acked(v.clone()).unwrap_err();
            assert_eq!(r.reason, CloseReason::InvalidMessage, "{v}: {}", r.detail);
            assert!(r.reason.is_terminal(), "{v}");
        }
        assert!(acked(with(event, "name", json!("n".repeat(4096)))).is_ok());
    }

    // --- daemon → app ---

    const ACK: &str = r#"{"type":"session_ack","session_id":"Qm9vdHN0cmFwSWQx","status":"ok","alias":"galaxy-s24","resume_token":"nq0yF1Y6m8cQk3dW0pXr2b7sL9eHhA4tVz1uJgK5oM8","keepalive_interval_s":15,"grace_s":600,"event_registry":true}"#;

    #[test]
    fn daemon_frames_encode_exactly_and_decode_back() {
        for text in [
            ACK,
            r#"{"type":"tool_call","session_id":"Qm9vdHN0cmFwSWQx","id":"call_k2Xh9QmT0bZr1sVw3yLpAg","name":"cart_total","args":{}}"#,
            r#"{"type":"tool_cancel","session_id":"Qm9vdHN0cmFwSWQx","id":"call_k2Xh9QmT0bZr1sVw3yLpAg","reason":"client_cancelled"}"#,
        ] {
            let frame = decode_daemon_message(text).unwrap().unwrap();
            assert_eq!(frame.encode(), text);
            assert_eq!(frame.session_id(), SID);
        }
        let ack = decode_daemon_message(ACK).unwrap().unwrap();
        assert!(!format!("{ack:?}").contains("nq0yF1Y6"));
        // An older daemon omits `event_registry`; the encoder omits it when unset.
        let mut old = parsed(ACK);
        old.as_object_mut().unwrap().remove("event_registry");
        let Some(DaemonFrame::SessionAck(a)) = decode_daemon_value(&old).unwrap() else {
            panic!("not an ack");
        };
        assert!(!a.event_registry);
        assert_eq!(DaemonFrame::SessionAck(a).to_value(), old);
    }

    #[test]
    fn the_app_side_decoder_is_lenient_where_the_spec_says() {
        let call = |args: Value| json!({"type": "tool_call", "session_id": SID, "id": "c", "name": "t", "args": args, "x": 1});
        for args in [json!([1]), json!("a"), Value::Null] {
            let Some(DaemonFrame::ToolCall(c)) = decode_daemon_value(&call(args)).unwrap() else {
                panic!("not a call");
            };
            assert!(c.args.is_empty());
        }
        let mut no_args = call(Value::Null);
        no_args.as_object_mut().unwrap().remove("args");
        assert!(decode_daemon_value(&no_args).unwrap().is_some());
        for unknown in [
            json!({"type": "future_frame", "session_id": SID}),
            json!({"session_id": SID}),
            json!({"type": 1}),
            parsed(CLAIM),
        ] {
            assert_eq!(decode_daemon_value(&unknown).unwrap(), None, "{unknown}");
        }
    }

    #[test]
    fn the_app_side_decoder_still_enforces_the_common_bounds() {
        let mut bad = Vec::new();
        for (field, value) in [
            ("resume_token", json!("")),
            ("session_id", json!("s".repeat(129))),
            ("status", json!("error")),
            ("grace_s", json!(-1)),
            ("keepalive_interval_s", json!(1.5)),
            ("alias", Value::Null),
        ] {
            let mut v = parsed(ACK);
            v[field] = value;
            bad.push(v);
        }
        bad.push(json!({"type": "tool_cancel", "session_id": SID, "id": "c", "reason": ""}));
        bad.push(json!({"type": "tool_cancel", "session_id": SID, "reason": "r"}));
        bad.push(json!({"type": "tool_call", "session_id": SID, "id": "c", "args": {}}));
        for v in bad {
            assert!(
                matches!(
                    decode_daemon_value(&v),
                    Err(DaemonMessageError::InvalidFrame { .. })
                ),
                "{v}"
            );
        }
        assert!(matches!(
            decode_daemon_message("[]"),
            Err(DaemonMessageError::InvalidJson(_))
        ));
        assert!(matches!(
            decode_daemon_message("{"),
            Err(DaemonMessageError::InvalidJson(_))
        ));
    }

    const PROOF: &str = "GvLn3Yn_TEoAXwElEcb5enelqhMdUbuR2KnaLd8KuWk";

    #[test]
    fn link_refused_is_a_first_frame_validated_strictly() {
        let good = json!({"type": "link_refused", "session_id": SID, "reason": "unsupported_link", "proof": PROOF});
        let Ok(AppFrame::LinkRefused(r)) = decode_app_value(&good, Phase::PreAck) else {
            panic!("a valid link_refused is refused");
        };
        assert_eq!(r.reason, RefusalReason::UnsupportedLink);
        assert_eq!(r.session_id, SID);
        // Round trip through the encoder.
        let again = decode_app_message(&AppFrame::LinkRefused(r.clone()).encode(), Phase::PreAck);
        assert_eq!(again, Ok(AppFrame::LinkRefused(r)));
        for reason in ["link_expired", "handshake_failed", "pin_mismatch"] {
            let mut v = good.clone();
            v["reason"] = json!(reason);
            assert!(decode_app_value(&v, Phase::PreAck).is_ok(), "{reason}");
        }
        // After the ack it is not accepted at all.
        assert_eq!(
            reason(decode_app_value(&good, ACKED)),
            CloseReason::UnknownMessageType
        );
        let mut bad = Vec::new();
        for (field, value) in [
            ("session_id", json!("")),
            ("session_id", json!(7)),
            ("session_id", json!("x".repeat(129))),
            ("reason", json!("Unsupported_link")),
            ("reason", json!("expired")),
            ("reason", json!(null)),
            ("reason", json!(["unsupported_link"])),
            ("proof", json!(&PROOF[1..])),
            ("proof", json!(format!("{PROOF}A"))),
            ("proof", json!(format!("{PROOF}="))),
            ("proof", json!(PROOF.replace('_', "/"))),
            // Non-canonical trailing bits: the last character must encode zero low bits.
            ("proof", json!(format!("{}l", &PROOF[..42]))),
            ("proof", json!(null)),
        ] {
            let mut v = good.clone();
            v[field] = value;
            bad.push(v);
        }
        for field in ["session_id", "reason", "proof"] {
            let mut v = good.clone();
            v.as_object_mut().unwrap().remove(field);
            bad.push(v);
        }
        for v in bad {
            assert_eq!(
                reason(decode_app_value(&v, Phase::PreAck)),
                CloseReason::InvalidRefusal,
                "{v}"
            );
        }
    }
}
