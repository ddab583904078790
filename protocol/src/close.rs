//! WebSocket close codes and reasons of the device protocol (§D11).
//!
//! Only code 1008 is terminal, decided from the code alone, never from the reason.

/// Normal closure: `session_replaced`, `revoked`, or an app disconnecting.
pub const NORMAL: u16 = 1000;
/// Going away: `app_backgrounded` (app) or `daemon_shutdown` (daemon).
pub const GOING_AWAY: u16 = 1001;
/// Protocol error (RFC 6455 §7.4.1): a WebSocket framing violation (project decision, issue #20).
pub const PROTOCOL_ERROR: u16 = 1002;
/// Unsupported data: a binary message.
pub const UNSUPPORTED_DATA: u16 = 1003;
/// Invalid frame payload data (RFC 6455 §7.4.1): a text message that is not UTF-8 (project
/// decision, issue #20).
pub const INVALID_PAYLOAD: u16 = 1007;
/// Policy violation: every terminal protocol rejection.
pub const POLICY_VIOLATION: u16 = 1008;
/// Message too big.
pub const MESSAGE_TOO_BIG: u16 = 1009;
/// Internal error: write failure or an internal fault on one connection.
pub const INTERNAL_ERROR: u16 = 1011;

/// Whether a close with this code ends a session for good (§D11, 16.2).
pub fn is_terminal(code: Option<u16>) -> bool {
    code == Some(POLICY_VIOLATION)
}

/// One close the daemon (or an app) sends: a code with its machine-readable reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    SessionReplaced,
    Revoked,
    AppBackgrounded,
    DaemonShutdown,
    BinaryFrameNotSupported,
    PreClaimTimeout,
    InvalidJson,
    ExpectedClaimOrResume,
    UnknownMessageType,
    SessionMismatch,
    AlreadyClaimed,
    UnknownSession,
    LinkExpired,
    ClaimAttemptsExceeded,
    InvalidToken,
    InvalidResumeToken,
    InvalidRegistry,
    InvalidMessage,
    WrongTransport,
    MessageTooBig,
    SendFailed,
    InternalError,
    /// A WebSocket framing violation: unmasked frame, reserved bits, orphan continuation,
    /// oversized or fragmented control frame, unknown opcode, malformed close (RFC 6455 §7.1.7).
    ProtocolError,
    /// A text message (or close reason) that is not valid UTF-8.
    InvalidPayload,
    /// Sealed route (issue #23): the first message was text and not a `link_refused` frame.
    ExpectedSealedHandshake,
    /// Sealed route: Noise message 1 of the wrong size, or one that does not decrypt (a link
    /// minted for another static key), or a handshake payload that is not the agreed JSON.
    SealedHandshakeFailed,
    /// Sealed route: a record that fails authentication (tampered, replayed, reordered,
    /// truncated). Sent as a bare WebSocket close: the channel can no longer seal a record.
    SealedRecordInvalid,
    /// A `link_refused` frame for an unknown or non-pending session, or with a bad proof.
    InvalidRefusal,
    /// A `link_refused` frame was checked and recorded on its pending link.
    RefusalRecorded,
}

impl CloseReason {
    /// Every reason of the table, in table order.
    pub const ALL: [CloseReason; 29] = [
        Self::SessionReplaced,
        Self::Revoked,
        Self::AppBackgrounded,
        Self::DaemonShutdown,
        Self::BinaryFrameNotSupported,
        Self::PreClaimTimeout,
        Self::InvalidJson,
        Self::ExpectedClaimOrResume,
        Self::UnknownMessageType,
        Self::SessionMismatch,
        Self::AlreadyClaimed,
        Self::UnknownSession,
        Self::LinkExpired,
        Self::ClaimAttemptsExceeded,
        Self::InvalidToken,
        Self::InvalidResumeToken,
        Self::InvalidRegistry,
        Self::InvalidMessage,
        Self::WrongTransport,
        Self::MessageTooBig,
        Self::SendFailed,
        Self::InternalError,
        Self::ProtocolError,
        Self::InvalidPayload,
        Self::ExpectedSealedHandshake,
        Self::SealedHandshakeFailed,
        Self::SealedRecordInvalid,
        Self::InvalidRefusal,
        Self::RefusalRecorded,
    ];

    pub const fn code(self) -> u16 {
        match self {
            Self::SessionReplaced | Self::Revoked | Self::RefusalRecorded => NORMAL,
            Self::AppBackgrounded | Self::DaemonShutdown => GOING_AWAY,
            Self::BinaryFrameNotSupported => UNSUPPORTED_DATA,
            Self::ProtocolError => PROTOCOL_ERROR,
            Self::InvalidPayload => INVALID_PAYLOAD,
            Self::MessageTooBig => MESSAGE_TOO_BIG,
            Self::SendFailed | Self::InternalError => INTERNAL_ERROR,
            Self::PreClaimTimeout
            | Self::InvalidJson
            | Self::ExpectedClaimOrResume
            | Self::UnknownMessageType
            | Self::SessionMismatch
            | Self::AlreadyClaimed
            | Self::UnknownSession
            | Self::LinkExpired
            | Self::ClaimAttemptsExceeded
            | Self::InvalidToken
            | Self::InvalidResumeToken
            | Self::InvalidRegistry
            | Self::InvalidMessage
            | Self::WrongTransport
            | Self::ExpectedSealedHandshake
            | Self::SealedHandshakeFailed
            | Self::SealedRecordInvalid
            | Self::InvalidRefusal => POLICY_VIOLATION,
        }
    }

    pub const fn reason(self) -> &'static str {
        match self {
            Self::SessionReplaced => "session_replaced",
            Self::Revoked => "revoked",
            Self::AppBackgrounded => "app_backgrounded",
            Self::DaemonShutdown => "daemon_shutdown",
            Self::BinaryFrameNotSupported => "binary_frame_not_supported",
            Self::PreClaimTimeout => "pre_claim_timeout",
            Self::InvalidJson => "invalid_json",
            Self::ExpectedClaimOrResume => "expected_claim_or_resume",
            Self::UnknownMessageType => "unknown_message_type",
            Self::SessionMismatch => "session_mismatch",
            Self::AlreadyClaimed => "already_claimed",
            Self::UnknownSession => "unknown_session",
            Self::LinkExpired => "link_expired",
            Self::ClaimAttemptsExceeded => "claim_attempts_exceeded",
            Self::InvalidToken => "invalid_token",
            Self::InvalidResumeToken => "invalid_resume_token",
            Self::InvalidRegistry => "invalid_registry",
            Self::InvalidMessage => "invalid_message",
            Self::WrongTransport => "wrong_transport",
            Self::MessageTooBig => "message_too_big",
            Self::SendFailed => "send_failed",
            Self::InternalError => "internal_error",
            Self::ProtocolError => "protocol_error",
            Self::InvalidPayload => "invalid_payload",
            Self::ExpectedSealedHandshake => "expected_sealed_handshake",
            Self::SealedHandshakeFailed => "sealed_handshake_failed",
            Self::SealedRecordInvalid => "sealed_record_invalid",
            Self::InvalidRefusal => "invalid_refusal",
            Self::RefusalRecorded => "refusal_recorded",
        }
    }

    /// Looks a reason up by code and reason string; `None` when the pair is not in the table.
    pub fn from_parts(code: u16, reason: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|r| r.code() == code && r.reason() == reason)
    }

    pub const fn is_terminal(self) -> bool {
        self.code() == POLICY_VIOLATION
    }
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.code(), self.reason())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_1008_is_terminal() {
        for r in CloseReason::ALL {
            assert_eq!(r.is_terminal(), r.code() == 1008, "{r}");
            assert_eq!(CloseReason::from_parts(r.code(), r.reason()), Some(r));
        }
        assert!(is_terminal(Some(1008)));
        assert!(!is_terminal(Some(1006)));
        assert!(!is_terminal(Some(4000)));
        assert!(!is_terminal(None));
    }

    #[test]
    fn reasons_are_short_ascii_tokens() {
        for r in CloseReason::ALL {
            assert!(
                r.reason().len() <= 123,
                "close reasons must fit a close frame"
            );
            assert!(
                r.reason()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_')
            );
        }
        assert_eq!(CloseReason::from_parts(1008, "revoked"), None);
    }
}
