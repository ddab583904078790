//! Error types of the control plane and its clients (§C4.3), their CLI exit codes (§L4) and
//! the subset apps may send in `tool_error` frames (§D7.3).
//!
//! One namespace serves the daemon, the CLI, the MCP bridge and the TypeScript client. The daemon
//! only ever sends the first table of §C4.3; clients map any type they do not know to
//! `internal_error`.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::jsonrpc::codes;

/// Every `error.data.type` (§C4.3), daemon types first, then the client-side ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ErrorType {
    InvalidRequest,
    NoSession,
    AmbiguousSession,
    UnknownSession,
    SessionNotActive,
    SessionSuspended,
    /// Another control connection holds the session's lease (§C10.9).
    SessionLeased,
    PolicyDenied,
    /// An operator's approval attempt was refused (§C8.18, §C8.19).
    ApprovalRefused,
    ToolNotFound,
    ToolInputValidationError,
    ToolOutputValidationError,
    ToolExecutionError,
    ToolSerializationError,
    ToolTimeout,
    ToolCancelled,
    /// Also what every unknown wire string decodes to.
    #[default]
    InternalError,
    ConnectionError,
    ConsentDeclined,
    Timeout,
    ClientError,
    UsageError,
    ValidationError,
    InspectionError,
    AssertionError,
}

impl ErrorType {
    /// Every type, in the order of the two tables of §C4.3.
    pub const ALL: [ErrorType; 25] = [
        Self::InvalidRequest,
        Self::NoSession,
        Self::AmbiguousSession,
        Self::UnknownSession,
        Self::SessionNotActive,
        Self::SessionSuspended,
        Self::SessionLeased,
        Self::PolicyDenied,
        Self::ApprovalRefused,
        Self::ToolNotFound,
        Self::ToolInputValidationError,
        Self::ToolOutputValidationError,
        Self::ToolExecutionError,
        Self::ToolSerializationError,
        Self::ToolTimeout,
        Self::ToolCancelled,
        Self::InternalError,
        Self::ConnectionError,
        Self::ConsentDeclined,
        Self::Timeout,
        Self::ClientError,
        Self::UsageError,
        Self::ValidationError,
        Self::InspectionError,
        Self::AssertionError,
    ];

    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::NoSession => "no_session",
            Self::AmbiguousSession => "ambiguous_session",
            Self::UnknownSession => "unknown_session",
            Self::SessionNotActive => "session_not_active",
            Self::SessionSuspended => "session_suspended",
            Self::SessionLeased => "session_leased",
            Self::PolicyDenied => "policy_denied",
            Self::ApprovalRefused => "approval_refused",
            Self::ToolNotFound => "tool_not_found",
            Self::ToolInputValidationError => "tool_input_validation_error",
            Self::ToolOutputValidationError => "tool_output_validation_error",
            Self::ToolExecutionError => "tool_execution_error",
            Self::ToolSerializationError => "tool_serialization_error",
            Self::ToolTimeout => "tool_timeout",
            Self::ToolCancelled => "tool_cancelled",
            Self::InternalError => "internal_error",
            Self::ConnectionError => "connection_error",
            Self::ConsentDeclined => "consent_declined",
            Self::Timeout => "timeout",
            Self::ClientError => "client_error",
            Self::UsageError => "usage_error",
            Self::ValidationError => "validation_error",
            Self::InspectionError => "inspection_error",
            Self::AssertionError => "assertion_error",
        }
    }

    /// Reads a wire string the way clients must: an unknown type is `internal_error` (§C4.3).
    pub fn from_wire(s: &str) -> Self {
        s.parse().unwrap_or(Self::InternalError)
    }

    /// CLI exit code of this type (§L4). Types outside the table exit 1 like unknown ones.
    pub const fn exit_code(self) -> u8 {
        match self {
            Self::InternalError | Self::ConsentDeclined | Self::Timeout | Self::ClientError => 1,
            Self::AssertionError => 3,
            Self::UsageError => 64,
            Self::InvalidRequest | Self::ValidationError => 65,
            Self::InspectionError => 66,
            Self::ConnectionError => 70,
            Self::NoSession
            | Self::AmbiguousSession
            | Self::UnknownSession
            | Self::SessionNotActive
            | Self::SessionSuspended
            | Self::SessionLeased => 71,
            Self::ToolNotFound
            | Self::ToolInputValidationError
            | Self::ToolOutputValidationError
            | Self::ToolExecutionError
            | Self::ToolSerializationError
            | Self::ToolTimeout
            | Self::ToolCancelled => 72,
            Self::PolicyDenied | Self::ApprovalRefused => 77,
        }
    }

    /// One of the seven types an app may send in a `tool_error` frame (§D7.3).
    pub const fn is_tool_error(self) -> bool {
        self.as_tool_error().is_some()
    }

    /// The tool error subset this type belongs to, if any.
    pub const fn as_tool_error(self) -> Option<ToolErrorType> {
        Some(match self {
            Self::ToolNotFound => ToolErrorType::ToolNotFound,
            Self::ToolInputValidationError => ToolErrorType::ToolInputValidationError,
            Self::ToolOutputValidationError => ToolErrorType::ToolOutputValidationError,
            Self::ToolExecutionError => ToolErrorType::ToolExecutionError,
            Self::ToolSerializationError => ToolErrorType::ToolSerializationError,
            Self::ToolTimeout => ToolErrorType::ToolTimeout,
            Self::ToolCancelled => ToolErrorType::ToolCancelled,
            _ => return None,
        })
    }

    /// Sent by the daemon on the control socket (first table of §C4.3), as opposed to the
    /// client-side types that share the namespace.
    pub const fn is_daemon_type(self) -> bool {
        !matches!(
            self,
            Self::ConnectionError
                | Self::ConsentDeclined
                | Self::Timeout
                | Self::ClientError
                | Self::UsageError
                | Self::ValidationError
                | Self::InspectionError
                | Self::AssertionError
        )
    }

    /// JSON-RPC code for an application error of this type (§C4.1): `-32603` for
    /// `internal_error`, `-32000` otherwise. Protocol-level `invalid_request` errors (parse
    /// error, bad request object, unknown method, bad params) use the specific constructors of
    /// [`crate::jsonrpc::ErrorObject`] instead.
    pub const fn default_code(self) -> i64 {
        match self {
            Self::InternalError => codes::INTERNAL_ERROR,
            _ => codes::APPLICATION_ERROR,
        }
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no error type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown error type {0:?}")]
pub struct UnknownErrorType(pub String);

impl FromStr for ErrorType {
    type Err = UnknownErrorType;

    /// Strict parse; use [`ErrorType::from_wire`] for the lenient client rule.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownErrorType(s.to_owned()))
    }
}

impl Serialize for ErrorType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorType {
    /// Lenient: any string decodes, unknown ones to `internal_error`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ErrorType;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an error type string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ErrorType, E> {
                Ok(ErrorType::from_wire(v))
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// The seven types an app may send in a `tool_error` frame (§D7.3). Decoding is strict: a
/// frame with any other type is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorType {
    ToolNotFound,
    ToolInputValidationError,
    ToolOutputValidationError,
    ToolExecutionError,
    ToolSerializationError,
    ToolTimeout,
    ToolCancelled,
}

impl ToolErrorType {
    pub const ALL: [ToolErrorType; 7] = [
        Self::ToolNotFound,
        Self::ToolInputValidationError,
        Self::ToolOutputValidationError,
        Self::ToolExecutionError,
        Self::ToolSerializationError,
        Self::ToolTimeout,
        Self::ToolCancelled,
    ];

    pub const fn error_type(self) -> ErrorType {
        match self {
            Self::ToolNotFound => ErrorType::ToolNotFound,
            Self::ToolInputValidationError => ErrorType::ToolInputValidationError,
            Self::ToolOutputValidationError => ErrorType::ToolOutputValidationError,
            Self::ToolExecutionError => ErrorType::ToolExecutionError,
            Self::ToolSerializationError => ErrorType::ToolSerializationError,
            Self::ToolTimeout => ErrorType::ToolTimeout,
            Self::ToolCancelled => ErrorType::ToolCancelled,
        }
    }

    pub const fn as_str(self) -> &'static str {
        self.error_type().as_str()
    }
}

impl fmt::Display for ToolErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<ToolErrorType> for ErrorType {
    fn from(t: ToolErrorType) -> Self {
        t.error_type()
    }
}

impl TryFrom<ErrorType> for ToolErrorType {
    type Error = ErrorType;
    fn try_from(t: ErrorType) -> Result<Self, ErrorType> {
        t.as_tool_error().ok_or(t)
    }
}

impl FromStr for ToolErrorType {
    type Err = UnknownErrorType;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownErrorType(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_strings_round_trip_for_every_type() {
        let expected = [
            "invalid_request",
            "no_session",
            "ambiguous_session",
            "unknown_session",
            "session_not_active",
            "session_suspended",
            "session_leased",
            "policy_denied",
            "approval_refused",
            "tool_not_found",
            "tool_input_validation_error",
            "tool_output_validation_error",
            "tool_execution_error",
            "tool_serialization_error",
            "tool_timeout",
            "tool_cancelled",
            "internal_error",
            "connection_error",
            "consent_declined",
            "timeout",
            "client_error",
            "usage_error",
            "validation_error",
            "inspection_error",
            "assertion_error",
        ];
        for (t, s) in ErrorType::ALL.iter().zip(expected) {
            assert_eq!(serde_json::to_value(t).ok(), Some(json!(s)));
            assert_eq!(serde_json::from_value::<ErrorType>(json!(s)).ok(), Some(*t));
            assert_eq!(s.parse::<ErrorType>(), Ok(*t));
        }
    }

    #[test]
    fn unknown_types_decode_to_internal_error() {
        assert_eq!(ErrorType::from_wire("tool_error"), ErrorType::InternalError);
        assert_eq!(
            serde_json::from_value::<ErrorType>(json!("rate_limited")).ok(),
            Some(ErrorType::InternalError)
        );
        assert!("rate_limited".parse::<ErrorType>().is_err());
        // A non-string type is not silently accepted by serde.
        assert!(serde_json::from_value::<ErrorType>(json!(5)).is_err());
    }

    #[test]
    fn exit_codes_follow_the_cli_table() {
        use ErrorType::*;
        let table = [
            (InternalError, 1),
            (AssertionError, 3),
            (UsageError, 64),
            (ValidationError, 65),
            (InvalidRequest, 65),
            (InspectionError, 66),
            (ConnectionError, 70),
            (NoSession, 71),
            (AmbiguousSession, 71),
            (UnknownSession, 71),
            (SessionNotActive, 71),
            (SessionSuspended, 71),
            (SessionLeased, 71),
            (ToolNotFound, 72),
            (ToolInputValidationError, 72),
            (ToolOutputValidationError, 72),
            (ToolExecutionError, 72),
            (ToolSerializationError, 72),
            (ToolTimeout, 72),
            (ToolCancelled, 72),
            (PolicyDenied, 77),
            (ApprovalRefused, 77),
            (ConsentDeclined, 1),
            (Timeout, 1),
            (ClientError, 1),
        ];
        assert_eq!(table.len(), ErrorType::ALL.len());
        for (t, code) in table {
            assert_eq!(t.exit_code(), code, "{t}");
        }
        assert_eq!(ErrorType::from_wire("brand_new").exit_code(), 1);
    }

    #[test]
    fn exactly_seven_tool_error_types() {
        let tools: Vec<_> = ErrorType::ALL
            .iter()
            .filter(|t| t.is_tool_error())
            .collect();
        assert_eq!(tools.len(), 7);
        for t in ToolErrorType::ALL {
            assert!(ErrorType::from(t).is_tool_error());
            assert_eq!(ToolErrorType::try_from(t.error_type()), Ok(t));
            assert_eq!(serde_json::to_value(t).ok(), Some(json!(t.as_str())));
        }
        assert_eq!(
            ToolErrorType::try_from(ErrorType::PolicyDenied),
            Err(ErrorType::PolicyDenied)
        );
        // `timeout` is a client type, not the app's `tool_timeout`.
        assert!(!ErrorType::Timeout.is_tool_error());
        assert!(serde_json::from_value::<ToolErrorType>(json!("tool_error")).is_err());
        assert!(serde_json::from_value::<ToolErrorType>(json!("internal_error")).is_err());
    }

    #[test]
    fn default_codes_and_daemon_table() {
        assert_eq!(ErrorType::InternalError.default_code(), -32603);
        assert_eq!(ErrorType::PolicyDenied.default_code(), -32000);
        assert_eq!(ErrorType::InvalidRequest.default_code(), -32000);
        assert_eq!(ErrorType::ToolTimeout.default_code(), -32000);
        let daemon = ErrorType::ALL.iter().filter(|t| t.is_daemon_type()).count();
        assert_eq!(daemon, 17);
        assert!(!ErrorType::ConsentDeclined.is_daemon_type());
    }
}
