//! What the SDK reports to the app: client states, session events, error reports, and the
//! typed errors of its public calls (§D13.1, §T5.4, §T7.1).

use std::fmt;
use std::net::IpAddr;

use appduct_protocol::bootstrap::DecodeError;
pub use appduct_protocol::content::{ContentBlock, ImageMimeType};
use appduct_protocol::descriptor::DescriptorError;
use appduct_protocol::frames::{FrameTooLarge, ToolErrorType};
use serde_json::Value;

/// `closed` reasons the SDK itself produces (§D13.1). A 1008 close reason from the daemon is
/// reported verbatim next to these.
pub mod reasons {
    pub const CLOSED_BY_APP: &str = "closed_by_app";
    pub const CONNECT_ERROR: &str = "connect_error";
    pub const GRACE_EXPIRED: &str = "grace_expired";
    pub const REVOKED: &str = "revoked";
    pub const REJECTED_BY_DAEMON: &str = "rejected_by_daemon";
    pub const PIN_MISMATCH: &str = "pin_mismatch";
    /// The sealed handshake failed (issue #23): the daemon does not hold the link's key.
    pub const HANDSHAKE_FAILED: &str = "handshake_failed";
    /// Session `lost` reason when a new link replaced a held session (§T7.2).
    pub const SUPERSEDED: &str = "superseded";
}

/// Abort reasons a handler's [`crate::CancellationToken`] may carry besides a daemon's
/// `tool_cancel` reason (§T5.1).
pub mod abort_reasons {
    /// The app-side deadline fired.
    pub const TIMEOUT: &str = "timeout";
    /// The socket was lost or the app went to the background.
    pub const SESSION_SUSPENDED: &str = "session_suspended";
    /// `disconnect()` or a superseding link.
    pub const CLOSED: &str = "closed";
}

/// Connection state of a client (§D13.1). Reported only when it changes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ClientState {
    /// Nothing connected yet.
    #[default]
    Idle,
    /// First claim in progress or retrying.
    Connecting,
    /// Acked socket.
    Active,
    /// Session held, socket lost, within grace.
    Reconnecting,
    /// No session. `reason` is one of [`reasons`] or a daemon's 1008 close reason.
    Closed { reason: String },
}

impl ClientState {
    /// The state's wire-style name: `idle`, `connecting`, `active`, `reconnecting`, `closed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Connecting => "connecting",
            Self::Active => "active",
            Self::Reconnecting => "reconnecting",
            Self::Closed { .. } => "closed",
        }
    }

    /// The reason of a `closed` state; `None` for every other state.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Closed { reason } => Some(reason),
            _ => None,
        }
    }
}

impl fmt::Display for ClientState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Closed { reason } => write!(f, "closed ({reason})"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// The session an ack established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub session_id: String,
    pub alias: String,
}

/// Session changes (§T7.1 `sessionChange`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEvent {
    Claimed(SessionInfo),
    Resumed(SessionInfo),
    /// The held session ended; `reason` is a `closed` reason or [`reasons::SUPERSEDED`].
    Lost {
        reason: String,
    },
}

impl SessionEvent {
    /// `claimed`, `resumed` or `lost`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Claimed(_) => "claimed",
            Self::Resumed(_) => "resumed",
            Self::Lost { .. } => "lost",
        }
    }
}

/// Where an error reported to the app's error listener happened (§T7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorPhase {
    Bootstrap,
    Connect,
    Socket,
    Tool,
}

/// One report to the app's error listener. Never carries a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReport {
    pub phase: ErrorPhase,
    /// A machine-readable code such as `event_not_sent`.
    pub code: Option<String>,
    pub message: String,
    pub tool_name: Option<String>,
    pub call_id: Option<String>,
}

/// Everything a client reports, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    State(ClientState),
    Session(SessionEvent),
    Error(ErrorReport),
}

/// The failure a tool handler returns; it becomes a `tool_error` frame (§D7.3). The message
/// is cut to 4096 UTF-16 code units before sending.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{error_type}: {message}")]
pub struct ToolError {
    pub error_type: ToolErrorType,
    pub message: String,
    pub details: Option<Value>,
}

impl ToolError {
    pub fn new(error_type: ToolErrorType, message: impl Into<String>) -> Self {
        Self {
            error_type,
            message: message.into(),
            details: None,
        }
    }

    /// `tool_execution_error`: the usual failure of a handler.
    pub fn execution(message: impl Into<String>) -> Self {
        Self::new(ToolErrorType::ToolExecutionError, message)
    }

    /// `tool_input_validation_error`: the handler refused its arguments.
    pub fn input_validation(message: impl Into<String>) -> Self {
        Self::new(ToolErrorType::ToolInputValidationError, message)
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

/// What a content tool's handler returns (issue #17, device.md §D17): content blocks
/// (text, images, resource links) and optionally a JSON result. Sent as a `tool_result` with
/// `content` when the daemon's ack announced `result_content`, in `tool_result_part` frames
/// when that frame would pass 262,144 bytes and the ack announced parts. Against a daemon
/// without the extension the content is dropped (with a warning) and the JSON result (or
/// `null`) is sent as in v2.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutput {
    /// `None`: no JSON result (allowed only with content; sent as `null` otherwise).
    pub result: Option<Value>,
    pub content: Vec<ContentBlock>,
}

impl ToolOutput {
    /// Content blocks without a JSON result.
    pub fn content(blocks: Vec<ContentBlock>) -> Self {
        Self {
            result: None,
            content: blocks,
        }
    }

    /// A JSON result only, as a v2 handler returns it.
    pub fn json(result: Value) -> Self {
        Self {
            result: Some(result),
            content: Vec::new(),
        }
    }

    /// This output, with a JSON result as well.
    #[must_use]
    pub fn with_result(mut self, result: Value) -> Self {
        self.result = Some(result);
        self
    }
}

impl From<Value> for ToolOutput {
    fn from(result: Value) -> Self {
        Self::json(result)
    }
}

/// Why `register_tool` or `declare_event` refused a descriptor. Nothing was committed or sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    #[error("invalid descriptor: {0}")]
    Invalid(#[from] DescriptorError),
    #[error("the registry already holds {limit} entries")]
    RegistryFull { limit: usize },
    #[error("the client is gone")]
    ClientGone,
}

impl RegistrationError {
    /// The descriptor field at fault, when there is one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::Invalid(e) => Some(e.field()),
            _ => None,
        }
    }
}

/// Why `post_event` did not send an event. It never panics; the connection stays open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// No acked socket: the event is dropped (no error listener call).
    #[error("the client is not active; the event was dropped")]
    NotActive,
    #[error("an event name must be 1 to 4096 UTF-16 code units long")]
    InvalidName,
    /// The encoded frame is over 262144 bytes (§D13.6).
    #[error("{message}")]
    TooLarge {
        message: String,
        size: FrameTooLarge,
    },
}

/// Why `connect` failed (§T5.4). Validation errors come before anything touches a held
/// session; the others end a claim that started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid_url: the link is not a URL, has a bad escape or a repeated parameter")]
    InvalidUrl,
    #[error("missing_payload: the link has no appduct parameter")]
    MissingPayload,
    #[error("invalid_payload: {0}")]
    InvalidPayload(DecodeError),
    #[error("expired_payload: the link expired at {expires_at} (unix seconds)")]
    ExpiredPayload { expires_at: u64 },
    /// Trust mode `link` and the link carries no well-formed pin (§D3.4).
    #[error("missing_pin: a native connection needs a pin and the link carries none")]
    MissingPin,
    /// `allow_private_lan_only` refused the payload's address (§D3.4).
    #[error("address_not_allowed: {0} is not a private LAN address or 127.0.0.1")]
    AddressNotAllowed(IpAddr),
    #[error("unsupported_link: {0}")]
    UnsupportedLink(&'static str),
    /// The presented leaf's SPKI pin is not trusted; nothing was sent to that peer.
    #[error("pin_mismatch: the daemon's certificate does not match a trusted pin")]
    PinMismatch,
    /// The sealed handshake failed (issue #23): the daemon does not hold the link's static key
    /// (a link minted before `appduct keygen --force`, or an impostor).
    #[error("handshake_failed: the daemon does not hold the sealed link's static key")]
    HandshakeFailed,
    /// The claim ended without an ack: refused with 1008, or the link expired while retrying.
    #[error("connect_error: the claim failed{}", close_reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    Failed { close_reason: Option<String> },
    /// A newer `connect` replaced this one.
    #[error("superseded: a newer link replaced this connection")]
    Superseded,
    #[error("closed_by_app: disconnect() was called")]
    ClosedByApp,
    /// The client was dropped or its runtime stopped.
    #[error("the client is gone")]
    ClientGone,
}

impl ConnectError {
    /// The code of §T5.4 (`invalid_url`, `missing_payload`, …, `connect_error`).
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidUrl => "invalid_url",
            Self::MissingPayload => "missing_payload",
            Self::InvalidPayload(_) => "invalid_payload",
            Self::ExpiredPayload { .. } => "expired_payload",
            Self::MissingPin => "missing_pin",
            Self::AddressNotAllowed(_) => "address_not_allowed",
            Self::UnsupportedLink(_) => "unsupported_link",
            Self::PinMismatch => "pin_mismatch",
            Self::HandshakeFailed => "handshake_failed",
            Self::Failed { .. } => "connect_error",
            Self::Superseded => "superseded",
            Self::ClosedByApp => "closed_by_app",
            Self::ClientGone => "client_gone",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_closed_states_carry_a_reason() {
        assert_eq!(ClientState::Active.reason(), None);
        let closed = ClientState::Closed {
            reason: reasons::REVOKED.into(),
        };
        assert_eq!(closed.reason(), Some("revoked"));
        assert_eq!(closed.as_str(), "closed");
        assert_eq!(closed.to_string(), "closed (revoked)");
        assert_eq!(ClientState::default(), ClientState::Idle);
    }

    #[test]
    fn connect_errors_have_the_sdk_codes() {
        assert_eq!(ConnectError::MissingPin.code(), "missing_pin");
        assert_eq!(
            ConnectError::Failed { close_reason: None }.code(),
            "connect_error"
        );
        let refused = ConnectError::Failed {
            close_reason: Some("invalid_token".into()),
        };
        assert!(refused.to_string().contains("invalid_token"));
        assert_eq!(
            ConnectError::ExpiredPayload { expires_at: 5 }.code(),
            "expired_payload"
        );
    }

    #[test]
    fn tool_errors_build_with_details() {
        let e = ToolError::execution("boom").with_details(serde_json::json!({"k": 1}));
        assert_eq!(e.error_type, ToolErrorType::ToolExecutionError);
        assert_eq!(e.to_string(), "tool_execution_error: boom");
        assert!(e.details.is_some());
    }
}
