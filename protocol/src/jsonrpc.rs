//! JSON-RPC 2.0 envelopes of the control plane (§C2–§C4): message types, error codes, the
//! daemon's strict inbound classifier, the client's lenient response parser and an I/O-free
//! line framer.

use std::fmt;

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value, json};

use crate::errors::{ErrorType, ToolErrorType};
use crate::text::as_integer;

/// The only `jsonrpc` value accepted or sent.
pub const VERSION: &str = "2.0";

/// JSON-RPC codes used on the control plane (§C4.1).
pub mod codes {
    /// Line is not valid UTF-8 or JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a valid request object, line over the cap, duplicate in-flight id.
    pub const INVALID_REQUEST: i64 = -32600;
    /// Unknown method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Params fail validation.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Unexpected daemon failure.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Any typed application error.
    pub const APPLICATION_ERROR: i64 = -32000;
}

/// A request id: a string or an integer (§C3.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    Number(i64),
    String(String),
}

impl RequestId {
    /// Reads an id under the wire rule: a string, or a number with an integral value within
    /// ±(2^53 − 1). Anything else (null, a fraction, an object, ...) is not an id.
    pub fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::String(s) => Some(Self::String(s.clone())),
            Value::Number(_) => as_integer(v).map(Self::Number),
            _ => None,
        }
    }
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        Self::Number(n)
    }
}

impl From<String> for RequestId {
    fn from(s: String) -> Self {
        Self::String(s)
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        Self::String(s.to_owned())
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// A request with an id. `params` is `None` when absent or `null`; method validation treats
/// both as `{}` (§C5).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Request {
    pub id: RequestId,
    pub method: String,
    pub params: Option<Value>,
}

impl Request {
    pub fn new(id: impl Into<RequestId>, method: impl Into<String>, params: Option<Value>) -> Self {
        Self {
            id: id.into(),
            method: method.into(),
            params,
        }
    }
}

impl Serialize for Request {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("jsonrpc", VERSION)?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("method", &self.method)?;
        if let Some(p) = &self.params {
            m.serialize_entry("params", p)?;
        }
        m.end()
    }
}

/// A message without an id: daemon → client notifications (§C3.2), or a client notification
/// the daemon ignores (§C3.1).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Notification {
    pub method: String,
    pub params: Option<Value>,
}

impl Notification {
    pub fn new(method: impl Into<String>, params: Option<Value>) -> Self {
        Self {
            method: method.into(),
            params,
        }
    }
}

impl Serialize for Notification {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("jsonrpc", VERSION)?;
        m.serialize_entry("method", &self.method)?;
        if let Some(p) = &self.params {
            m.serialize_entry("params", p)?;
        }
        m.end()
    }
}

/// A response: `id` is `None` (sent as `null`) when the request's id could not be read.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Response {
    pub id: Option<RequestId>,
    pub outcome: Result<Value, ErrorObject>,
}

impl Response {
    pub fn success(id: RequestId, result: Value) -> Self {
        Self {
            id: Some(id),
            outcome: Ok(result),
        }
    }

    pub fn error(id: Option<RequestId>, error: ErrorObject) -> Self {
        Self {
            id,
            outcome: Err(error),
        }
    }
}

impl Serialize for Response {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("jsonrpc", VERSION)?;
        m.serialize_entry("id", &self.id)?;
        match &self.outcome {
            Ok(result) => m.serialize_entry("result", result)?,
            Err(error) => m.serialize_entry("error", error)?,
        }
        m.end()
    }
}

/// `error` of a response (§C4.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} ({})", data.error_type)]
#[non_exhaustive]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    /// Clients read a missing `data` or `data.type` as `internal_error` (§L4).
    #[serde(default, deserialize_with = "null_as_default")]
    pub data: ErrorData,
}

/// `error.data`: always carries `type` when sent by the daemon (§C4.1).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ErrorData {
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    pub error_type: ErrorType,
    #[serde(rename = "callId", default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// An object on the control socket; app `tool_error` details pass through verbatim.
    /// Boxed so `Result<_, ErrorObject>` stays small.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Box<Value>>,
}

impl ErrorData {
    /// `{type}` without `callId` or `details`.
    pub fn new(error_type: ErrorType) -> Self {
        Self {
            error_type,
            call_id: None,
            details: None,
        }
    }
}

setters!(ErrorData {
    with_call_id => call_id: Option<String>,
    with_details => details: Option<Box<Value>>,
});

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

impl ErrorObject {
    pub fn new(code: i64, error_type: ErrorType, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: ErrorData {
                error_type,
                call_id: None,
                details: None,
            },
        }
    }

    /// A typed application error with the type's default code (`-32000`, or `-32603` for
    /// `internal_error`).
    pub fn application(error_type: ErrorType, message: impl Into<String>) -> Self {
        Self::new(error_type.default_code(), error_type, message)
    }

    /// An app's `tool_error` passed through verbatim (§C4.3): its type, message and details.
    pub fn app_tool_error(
        error_type: ToolErrorType,
        message: impl Into<String>,
        details: Option<Value>,
    ) -> Self {
        let mut e = Self::application(error_type.into(), message);
        e.data.details = details.map(Box::new);
        e
    }

    /// `-32700`: the line is not UTF-8 or not JSON.
    pub fn parse_error(detail: impl fmt::Display) -> Self {
        Self::new(
            codes::PARSE_ERROR,
            ErrorType::InvalidRequest,
            format!("Parse error: {detail}"),
        )
    }

    /// `-32600`: not a valid request object.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_REQUEST, ErrorType::InvalidRequest, message)
    }

    /// `-32600` sent before closing a connection whose line exceeds the cap (§C2).
    pub fn line_too_long(max_line_bytes: usize) -> Self {
        Self::invalid_request(format!(
            "Request line is longer than {max_line_bytes} bytes; closing the connection"
        ))
        .with_details(json!({ "maxLineBytes": max_line_bytes }))
    }

    /// `-32600`: the id equals one still in flight on the connection (§C3.1).
    pub fn duplicate_id(id: &RequestId) -> Self {
        Self::invalid_request(format!(
            "Request id {id} is already in flight on this connection"
        ))
        .with_details(json!({ "reason": "duplicate_id" }))
    }

    /// `-32601` with `details.method`.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            codes::METHOD_NOT_FOUND,
            ErrorType::InvalidRequest,
            format!("Unknown method {method:?}"),
        )
        .with_details(json!({ "method": method }))
    }

    /// `-32602` with the given details (which name the parameter, §C5).
    pub fn invalid_params(message: impl Into<String>, details: Map<String, Value>) -> Self {
        Self::new(codes::INVALID_PARAMS, ErrorType::InvalidRequest, message)
            .with_details(Value::Object(details))
    }

    /// `-32603`: unexpected failure while handling a request.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL_ERROR, ErrorType::InternalError, message)
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.data.details = Some(Box::new(details));
        self
    }

    /// `data.details`, when present.
    pub fn details(&self) -> Option<&Value> {
        self.data.details.as_deref()
    }

    pub fn with_call_id(mut self, call_id: impl Into<String>) -> Self {
        self.data.call_id = Some(call_id.into());
        self
    }

    pub fn error_type(&self) -> ErrorType {
        self.data.error_type
    }
}

/// What the daemon does with one inbound line (§C2, §C3.1).
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// Empty line: ignored.
    Empty,
    /// A request to dispatch. Params are validated by the method (§C5).
    Request(Request),
    /// No id: neither executed nor answered.
    Notification(Notification),
    /// Reply with this error response; the connection stays open.
    Invalid(Response),
}

/// Classifies one line (terminator removed) the way the daemon must (§C2, §C3.1).
///
/// Checks run in this order: UTF-8, JSON, object, `id`, `jsonrpc`, `method`; an unreadable or
/// ill-typed `id` (including `null`) answers with `id: null`, later failures with the id. Only a
/// well-formed message without an `id` key is a notification. `params: null` equals absent.
pub fn parse_incoming(line: &[u8]) -> Incoming {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return Incoming::Empty;
    }
    let text = match std::str::from_utf8(line) {
        Ok(t) => t,
        Err(_) => {
            return Incoming::Invalid(Response::error(
                None,
                ErrorObject::parse_error("line is not valid UTF-8"),
            ));
        }
    };
    if let Some(request) = parse_plain_request(text) {
        return Incoming::Request(request);
    }
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid(Response::error(None, ErrorObject::parse_error(e)));
        }
    };
    let invalid = |id: Option<RequestId>, msg: &str| {
        Incoming::Invalid(Response::error(
            id,
            ErrorObject::invalid_request(format!("Invalid request: {msg}")),
        ))
    };
    let mut obj = match value {
        Value::Object(o) => o,
        Value::Array(_) => return invalid(None, "batches are not supported"),
        _ => return invalid(None, "a request must be a JSON object"),
    };
    let id = match obj.get("id") {
        None => None,
        Some(v) => match RequestId::from_value(v) {
            Some(id) => Some(id),
            None => return invalid(None, "\"id\" must be a string or an integer"),
        },
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some(VERSION) {
        return invalid(id, "\"jsonrpc\" must be \"2.0\"");
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => return invalid(id, "\"method\" must be a string"),
        None => return invalid(id, "\"method\" is missing"),
    };
    let params = obj.remove("params").filter(|p| !p.is_null());
    match id {
        Some(id) => Incoming::Request(Request { id, method, params }),
        None => Incoming::Notification(Notification { method, params }),
    }
}

/// The members of a request as they arrive, `jsonrpc` and `method` borrowed from the line (a
/// string with escapes fails here and takes the general path).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a str>,
    /// `Some(Value::Null)` for `"id": null` (not a notification).
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(borrow, default)]
    method: Option<&'a str>,
    #[serde(default)]
    params: Option<Value>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// The common case of [`parse_incoming`] without a `Value` tree for the envelope (issue #24:
/// one allocation for the method name instead of one per member): a well-formed request with
/// a valid `id`. Anything else is `None`, and the general path answers it.
fn parse_plain_request(text: &str) -> Option<Request> {
    // A struct would also read an array positionally; only objects take this path.
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let envelope: Envelope<'_> = serde_json::from_str(text).ok()?;
    if envelope.jsonrpc != Some(VERSION) {
        return None;
    }
    let id = RequestId::from_value(envelope.id.as_ref()?)?;
    Some(Request {
        id,
        method: envelope.method?.to_owned(),
        params: envelope.params.filter(|p| !p.is_null()),
    })
}

/// A message a client reads from the daemon.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerMessage {
    Response(Response),
    Notification(Notification),
}

/// A daemon line the client cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    #[error("daemon sent a line that is not valid UTF-8")]
    Utf8,
    #[error("daemon sent a line that is not JSON: {0}")]
    Json(String),
    #[error("daemon sent an invalid JSON-RPC message: {0}")]
    Shape(String),
}

/// Parses one daemon line on the client side. Unknown keys are ignored; `data.type` missing or
/// unknown reads as `internal_error`.
pub fn parse_server_message(line: &[u8]) -> Result<ServerMessage, MessageError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = std::str::from_utf8(line).map_err(|_| MessageError::Utf8)?;
    let value: Value = serde_json::from_str(text).map_err(|e| MessageError::Json(e.to_string()))?;
    let shape = |m: &str| MessageError::Shape(m.to_owned());
    let Value::Object(mut obj) = value else {
        return Err(shape("not an object"));
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some(VERSION) {
        return Err(shape("\"jsonrpc\" is not \"2.0\""));
    }
    let Some(id) = obj.remove("id") else {
        let method = match obj.remove("method") {
            Some(Value::String(m)) => m,
            _ => return Err(shape("a notification needs a string \"method\"")),
        };
        let params = obj.remove("params").filter(|p| !p.is_null());
        return Ok(ServerMessage::Notification(Notification { method, params }));
    };
    let id = match id {
        Value::Null => None,
        v => Some(RequestId::from_value(&v).ok_or_else(|| shape("bad \"id\""))?),
    };
    let outcome = match (obj.remove("result"), obj.remove("error")) {
        (Some(result), None) => Ok(result),
        (None, Some(error)) => Err(serde_json::from_value::<ErrorObject>(error)
            .map_err(|e| MessageError::Shape(format!("bad \"error\": {e}")))?),
        (Some(_), Some(_)) => return Err(shape("both \"result\" and \"error\"")),
        (None, None) => return Err(shape("neither \"result\" nor \"error\"")),
    };
    Ok(ServerMessage::Response(Response { id, outcome }))
}

/// Serialises a message as one compact JSON line with its `\n` terminator (§C2).
pub fn to_line<T: Serialize + ?Sized>(message: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = serde_json::to_vec(message)?;
    out.push(b'\n');
    Ok(out)
}

/// More than the line cap of unterminated bytes arrived (§C2): answer with
/// [`ErrorObject::line_too_long`] and close.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("line longer than {cap} bytes")]
pub struct Overflow {
    pub cap: usize,
}

/// I/O-free line framer: push received bytes, pop complete lines. The daemon uses
/// [`crate::limits::CONTROL_LINE_CAP_BYTES`] (tests may lower it); clients must allow at least
/// [`crate::limits::CLIENT_MIN_LINE_BYTES`] (`usize::MAX` for no cap).
///
/// A `\r` right before `\n` is stripped; empty lines are skipped; a line whose content is longer
/// than `cap` bytes is an [`Overflow`] as soon as more than `cap` unterminated bytes are
/// buffered, without waiting for its newline. After an overflow the buffer stays failed.
#[derive(Debug, Clone)]
pub struct LineBuffer {
    buf: Vec<u8>,
    /// Start of the first unconsumed byte in `buf`.
    start: usize,
    /// Bytes before this index (from `start`) are known to contain no `\n`.
    scanned: usize,
    cap: usize,
    failed: bool,
}

impl LineBuffer {
    pub fn new(cap: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            cap,
            failed: false,
        }
    }

    /// The configured cap in bytes, excluding the terminator.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Bytes buffered and not yet returned.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Bytes of memory the buffer holds (its capacity), for callers that bound idle memory.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// When nothing is pending, forgets the consumed bytes and frees the buffer if it holds more
    /// than `keep` bytes: a long line no longer costs its size once it has been returned.
    /// Does nothing while bytes are pending or after an overflow.
    pub fn release_idle(&mut self, keep: usize) {
        if self.failed || self.pending() != 0 {
            return;
        }
        self.buf.clear();
        self.start = 0;
        self.scanned = 0;
        if self.buf.capacity() > keep {
            self.buf = Vec::new();
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if self.failed {
            return;
        }
        // Reclaim consumed space before growing, so memory stays bounded by cap + one read.
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete, non-empty line (without terminator), `None` when more bytes are
    /// needed, or `Err(Overflow)` once the current line exceeds the cap.
    pub fn next_line(&mut self) -> Option<Result<Vec<u8>, Overflow>> {
        self.next_line_span()
            .map(|line| line.map(|span| self.buf[span].to_vec()))
    }

    /// [`next_line`](Self::next_line) without copying: where the line lies in the buffer, for
    /// [`line`](Self::line) until the next [`push`](Self::push) (the daemon's request path
    /// parses it in place, issue #24).
    pub fn next_line_span(&mut self) -> Option<Result<std::ops::Range<usize>, Overflow>> {
        let overflow = Overflow { cap: self.cap };
        loop {
            if self.failed {
                return Some(Err(overflow));
            }
            let from = self.scanned.max(self.start);
            let Some(pos) = self.buf[from..].iter().position(|&b| b == b'\n') else {
                self.scanned = self.buf.len();
                let tail = &self.buf[self.start..];
                // A trailing `\r` may still turn out to be part of the terminator.
                let allowed = self
                    .cap
                    .saturating_add(usize::from(tail.last() == Some(&b'\r')));
                if tail.len() > allowed {
                    self.failed = true;
                    continue;
                }
                return None;
            };
            let end = from + pos;
            let mut line = &self.buf[self.start..end];
            line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.len() > self.cap {
                self.failed = true;
                continue;
            }
            let span = self.start..self.start + line.len();
            self.start = end + 1;
            self.scanned = self.start;
            if !span.is_empty() {
                return Some(Ok(span));
            }
        }
    }

    /// The bytes of a span [`next_line_span`](Self::next_line_span) returned, before the next
    /// [`push`](Self::push).
    pub fn line(&self, span: std::ops::Range<usize>) -> &[u8] {
        &self.buf[span]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(incoming: Incoming) -> (Option<RequestId>, ErrorObject) {
        match incoming {
            Incoming::Invalid(Response {
                id,
                outcome: Err(e),
            }) => (id, e),
            other => panic!("expected an error reply, got {other:?}"),
        }
    }

    #[test]
    fn valid_request_is_dispatched_with_its_params() {
        let got = parse_incoming(
            br#"{"jsonrpc":"2.0","id":7,"method":"tools.list","params":{"limit":2}}"#,
        );
        assert_eq!(
            got,
            Incoming::Request(Request::new(7, "tools.list", Some(json!({"limit": 2}))))
        );
        let got = parse_incoming(br#"{"jsonrpc":"2.0","id":"a","method":"daemon.status"}"#);
        assert_eq!(
            got,
            Incoming::Request(Request::new("a", "daemon.status", None))
        );
    }

    /// The envelope fast path (issue #24) answers exactly as the general path: every line here
    /// gets what a `Value` parse of the whole line gives.
    #[test]
    fn the_envelope_fast_path_agrees_with_the_general_path() {
        let lines: &[&[u8]] = &[
            br#"{"jsonrpc":"2.0","id":7,"method":"tools.call","params":{"name":"e","args":{}}}"#,
            br#"{"jsonrpc":"2.0","id":"x","method":"m","params":null,"extra":[1]}"#,
            br#"{"jsonrpc":"2.0","id":1.0,"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
            br#"{"jsonrpc":"2.0","method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"t\u006fols.list"}"#,
            br#"{"jsonrpc":"2\u002e0","id":1,"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#,
            br#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":null}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":5}"#,
            br#"["2.0",1,"m",null]"#,
            br#" {"jsonrpc":"2.0","id":2,"method":"m"} "#,
            br#"{"jsonrpc":"2.0","id":2,"method":"m"} x"#,
        ];
        for line in lines {
            let text = std::str::from_utf8(line).unwrap();
            let general = {
                // The general path alone: what `parse_incoming` did before the fast path.
                let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
                match value {
                    Value::Object(mut o) => {
                        let id = o.get("id").and_then(RequestId::from_value);
                        let ok = o.get("jsonrpc").and_then(Value::as_str) == Some(VERSION)
                            && o.get("id").is_some()
                            && id.is_some();
                        match (ok, o.remove("method")) {
                            (true, Some(Value::String(m))) => Some(Request {
                                id: id.unwrap(),
                                method: m,
                                params: o.remove("params").filter(|p| !p.is_null()),
                            }),
                            _ => None,
                        }
                    }
                    _ => None,
                }
            };
            match parse_incoming(line) {
                Incoming::Request(r) => assert_eq!(Some(r), general, "{text}"),
                other => assert!(general.is_none(), "{text}: {other:?}"),
            }
            // Whatever the fast path takes, it takes correctly.
            if let Some(fast) = parse_plain_request(text) {
                assert_eq!(Some(fast), general, "{text}");
            }
        }
    }

    #[test]
    fn null_params_equal_absent_and_non_objects_are_left_to_the_method() {
        let got = parse_incoming(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":null}"#);
        assert_eq!(got, Incoming::Request(Request::new(1, "m", None)));
        // The method's validation answers -32602 for arrays and scalars (§C5).
        let got = parse_incoming(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#);
        assert_eq!(
            got,
            Incoming::Request(Request::new(1, "m", Some(json!([1]))))
        );
    }

    #[test]
    fn integral_float_ids_are_integers() {
        let got = parse_incoming(br#"{"jsonrpc":"2.0","id":3.0,"method":"m"}"#);
        assert_eq!(got, Incoming::Request(Request::new(3, "m", None)));
    }

    #[test]
    fn message_without_id_is_a_notification() {
        let got = parse_incoming(br#"{"jsonrpc":"2.0","method":"daemon.shutdown"}"#);
        assert_eq!(
            got,
            Incoming::Notification(Notification::new("daemon.shutdown", None))
        );
    }

    #[test]
    fn bad_utf8_and_bad_json_are_parse_errors_with_null_id() {
        for line in [
            &b"\xff\xfe{}"[..],
            b"{\"jsonrpc\":",
            b"{} trailing",
            b"nope",
        ] {
            let (id, e) = error_of(parse_incoming(line));
            assert_eq!(id, None);
            assert_eq!(e.code, -32700);
            assert_eq!(e.error_type(), ErrorType::InvalidRequest);
        }
    }

    #[test]
    fn non_objects_and_batches_are_invalid_with_null_id() {
        for line in [
            &br#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#[..],
            b"[]",
            b"42",
            b"\"x\"",
            b"null",
        ] {
            let (id, e) = error_of(parse_incoming(line));
            assert_eq!(id, None);
            assert_eq!(e.code, -32600);
            assert_eq!(e.data.error_type, ErrorType::InvalidRequest);
        }
    }

    #[test]
    fn bad_ids_answer_with_null_id() {
        for id in ["1.5", "null", "true", "{}", "[1]", "9007199254740992"] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#);
            let (got, e) = error_of(parse_incoming(line.as_bytes()));
            assert_eq!(got, None, "{id}");
            assert_eq!(e.code, -32600, "{id}");
        }
    }

    #[test]
    fn wrong_jsonrpc_or_method_answers_with_the_readable_id() {
        let cases = [
            r#"{"jsonrpc":"1.0","id":5,"method":"m"}"#,
            r#"{"id":5,"method":"m"}"#,
            r#"{"jsonrpc":2.0,"id":5,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":5}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":null}"#,
        ];
        for line in cases {
            let (id, e) = error_of(parse_incoming(line.as_bytes()));
            assert_eq!(id, Some(RequestId::Number(5)), "{line}");
            assert_eq!(e.code, -32600, "{line}");
        }
        // Without an id an invalid message still gets a reply, with id null.
        let (id, e) = error_of(parse_incoming(br#"{"jsonrpc":"2.0","method":1}"#));
        assert_eq!((id, e.code), (None, -32600));
    }

    #[test]
    fn error_response_serialises_exactly() {
        let r = Response::error(None, ErrorObject::line_too_long(1_048_576));
        let line = to_line(&r).unwrap_or_default();
        assert_eq!(
            String::from_utf8_lossy(&line),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Request line is longer than 1048576 bytes; closing the connection\",\"data\":{\"type\":\"invalid_request\",\"details\":{\"maxLineBytes\":1048576}}}}\n"
        );
        let ok = Response::success(RequestId::Number(3), json!({"cancelled": true}));
        assert_eq!(
            serde_json::to_string(&ok).unwrap_or_default(),
            r#"{"jsonrpc":"2.0","id":3,"result":{"cancelled":true}}"#
        );
        let m = ErrorObject::method_not_found("web.attach");
        assert_eq!(m.code, -32601);
        assert_eq!(m.details(), Some(&json!({"method": "web.attach"})));
        let d = ErrorObject::duplicate_id(&RequestId::Number(1));
        assert_eq!(d.details(), Some(&json!({"reason": "duplicate_id"})));
    }

    #[test]
    fn app_tool_errors_pass_through_verbatim() {
        let e = ErrorObject::app_tool_error(
            ToolErrorType::ToolExecutionError,
            "Cart service unavailable",
            Some(json!({"name": "HttpError"})),
        )
        .with_call_id("call_Yx1Q9m0v3w6Hk2a8Jd4cFQ");
        assert_eq!(
            serde_json::to_value(&e).ok(),
            Some(
                json!({"code": -32000, "message": "Cart service unavailable", "data": {
                "type": "tool_execution_error", "callId": "call_Yx1Q9m0v3w6Hk2a8Jd4cFQ",
                "details": {"name": "HttpError"}}})
            )
        );
    }

    #[test]
    fn uncapped_framer_does_not_overflow_arithmetic() {
        let mut buf = LineBuffer::new(usize::MAX);
        buf.push(b"partial\r");
        assert_eq!(buf.next_line(), None);
        buf.push(b"\n");
        assert_eq!(buf.next_line(), Some(Ok(b"partial".to_vec())));
    }

    #[test]
    fn spec_error_object_round_trips() {
        let text = r#"{"code":-32000,"message":"Tool \"slow_task\" was cancelled.","data":{"type":"tool_cancelled","callId":"b"}}"#;
        let e: ErrorObject = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.error_type(), ErrorType::ToolCancelled);
        assert_eq!(e.data.call_id.as_deref(), Some("b"));
        assert_eq!(serde_json::to_string(&e).unwrap_or_default(), text);
    }

    #[test]
    fn client_parses_responses_and_notifications_ignoring_unknown_keys() {
        let line = br#"{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"x","data":{"type":"tool_cancelled","callId":"b","extra":1}},"extra":true}"#;
        let Ok(ServerMessage::Response(r)) = parse_server_message(line) else {
            panic!("expected a response");
        };
        assert_eq!(r.id, Some(RequestId::Number(2)));
        let Err(e) = r.outcome else {
            panic!("expected an error")
        };
        assert_eq!(e.error_type(), ErrorType::ToolCancelled);

        let line = br#"{"jsonrpc":"2.0","id":"q","result":null}"#;
        let Ok(ServerMessage::Response(r)) = parse_server_message(line) else {
            panic!("expected a response");
        };
        assert_eq!(r.outcome, Ok(Value::Null));

        let line = br#"{"jsonrpc":"2.0","method":"event","params":{"kind":"x"},"more":1}"#;
        assert_eq!(
            parse_server_message(line),
            Ok(ServerMessage::Notification(Notification::new(
                "event",
                Some(json!({"kind": "x"}))
            )))
        );
    }

    #[test]
    fn client_reads_missing_or_unknown_error_types_as_internal_error() {
        for line in [
            &br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"nope"}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"nope","data":null}}"#,
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"m","data":{"type":"new_thing"}}}"#,
        ] {
            let Ok(ServerMessage::Response(Response { outcome: Err(e), .. })) =
                parse_server_message(line)
            else {
                panic!("expected an error response");
            };
            assert_eq!(e.error_type(), ErrorType::InternalError);
        }
    }

    #[test]
    fn client_rejects_malformed_messages() {
        assert_eq!(parse_server_message(b"\xff"), Err(MessageError::Utf8));
        assert!(matches!(
            parse_server_message(b"{"),
            Err(MessageError::Json(_))
        ));
        for line in [
            &b"[]"[..],
            br#"{"id":1,"result":1}"#,
            br#"{"jsonrpc":"2.0","id":1}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}"#,
            br#"{"jsonrpc":"2.0","id":1,"error":{"message":"m"}}"#,
            br#"{"jsonrpc":"2.0","params":{}}"#,
        ] {
            assert!(
                matches!(parse_server_message(line), Err(MessageError::Shape(_))),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    fn drain(buf: &mut LineBuffer) -> Vec<Result<Vec<u8>, Overflow>> {
        let mut out = Vec::new();
        while let Some(item) = buf.next_line() {
            let stop = item.is_err();
            out.push(item);
            if stop {
                break;
            }
        }
        out
    }

    #[test]
    fn framer_strips_cr_and_skips_empty_lines() {
        let mut buf = LineBuffer::new(64);
        buf.push(b"a\r\n\n\r\nb");
        assert_eq!(drain(&mut buf), vec![Ok(b"a".to_vec())]);
        buf.push(b"c\n");
        assert_eq!(drain(&mut buf), vec![Ok(b"bc".to_vec())]);
        // Only a \r right before \n is stripped.
        buf.push(b"x\ry\n");
        assert_eq!(drain(&mut buf), vec![Ok(b"x\ry".to_vec())]);
        assert_eq!(buf.pending(), 0);
    }

    #[test]
    fn framer_reassembles_lines_split_across_pushes() {
        let mut buf = LineBuffer::new(64);
        for b in b"{\"a\":1}\r\n{\"b\":2}\n" {
            buf.push(&[*b]);
        }
        assert_eq!(
            drain(&mut buf),
            vec![Ok(b"{\"a\":1}".to_vec()), Ok(b"{\"b\":2}".to_vec())]
        );
    }

    #[test]
    fn framer_overflows_without_waiting_for_the_newline() {
        let mut buf = LineBuffer::new(8);
        buf.push(b"ok\n12345678");
        // Exactly the cap unterminated: not yet an overflow.
        assert_eq!(drain(&mut buf), vec![Ok(b"ok".to_vec())]);
        buf.push(b"9");
        assert_eq!(drain(&mut buf), vec![Err(Overflow { cap: 8 })]);
        // Sticky.
        buf.push(b"\n");
        assert_eq!(buf.next_line(), Some(Err(Overflow { cap: 8 })));
    }

    #[test]
    fn framer_cap_excludes_the_terminator() {
        let mut buf = LineBuffer::new(8);
        buf.push(b"12345678\r");
        assert_eq!(buf.next_line(), None);
        buf.push(b"\n12345678\n");
        assert_eq!(
            drain(&mut buf),
            vec![Ok(b"12345678".to_vec()), Ok(b"12345678".to_vec())]
        );
        let mut buf = LineBuffer::new(8);
        buf.push(b"123456789\n");
        assert_eq!(buf.next_line(), Some(Err(Overflow { cap: 8 })));
        let mut buf = LineBuffer::new(8);
        buf.push(b"12345678\rx");
        assert_eq!(buf.next_line(), Some(Err(Overflow { cap: 8 })));
    }

    #[test]
    fn framer_compacts_consumed_bytes() {
        let mut buf = LineBuffer::new(16);
        for i in 0..1000 {
            buf.push(format!("line{i}\n").as_bytes());
            assert_eq!(buf.next_line(), Some(Ok(format!("line{i}").into_bytes())));
        }
        assert!(buf.buf.len() < 64);
    }
}
