//! The one failure type of every command (§L3.1): an `error.type`, a message and optional
//! `details`, rendered as the JSON envelope or the human error block by [`crate::output`].

use appduct_protocol::errors::ErrorType;
use serde_json::{Map, Value};

/// A command failure. The body is boxed so `Result<_, CliError>` stays small; its fields are
/// reached through `Deref` (`err.message`, `err.details`, …).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {}", .body.error_type, .body.message)]
pub struct CliError {
    body: Box<ErrorBody>,
}

/// The contents of a [`CliError`].
///
/// `error_type` is kept as the wire string so a daemon error type this build does not know is
/// still printed verbatim (§L3.1); its exit code is that of `internal_error` (§L4).
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorBody {
    pub error_type: String,
    pub message: String,
    /// `details` of the envelope; a `hint` key is shown as the human `Hint` line.
    pub details: Option<Value>,
    /// Human mode only: leave `Details` out of the error block (`tools snapshot --check` shows
    /// its own listing instead, §L7.4).
    pub hide_human_details: bool,
    /// Human mode only: text printed on stderr after the error block.
    pub human_tail: Option<String>,
}

impl std::ops::Deref for CliError {
    type Target = ErrorBody;
    fn deref(&self) -> &ErrorBody {
        &self.body
    }
}

impl std::ops::DerefMut for CliError {
    fn deref_mut(&mut self) -> &mut ErrorBody {
        &mut self.body
    }
}

impl CliError {
    pub fn new(error_type: ErrorType, message: impl Into<String>) -> Self {
        Self::from_wire(error_type.as_str(), message, None)
    }

    /// An error as the daemon reported it (`data.type` verbatim).
    pub fn from_wire(error_type: &str, message: impl Into<String>, details: Option<Value>) -> Self {
        Self {
            body: Box::new(ErrorBody {
                error_type: error_type.to_owned(),
                message: message.into(),
                details,
                hide_human_details: false,
                human_tail: None,
            }),
        }
    }

    /// `usage_error` (exit 64): an argument the CLI refuses before contacting the daemon.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ErrorType::UsageError, message)
    }

    pub fn validation(message: impl Into<String>) -> Self {
        Self::new(ErrorType::ValidationError, message)
    }

    pub fn inspection(message: impl Into<String>) -> Self {
        Self::new(ErrorType::InspectionError, message)
    }

    pub fn connection(message: impl Into<String>) -> Self {
        Self::new(ErrorType::ConnectionError, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorType::InternalError, message)
    }

    /// Adds one key to `details` (creating the object; a non-object `details` is replaced).
    pub fn with_detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        let mut map = match self.details.take() {
            Some(Value::Object(map)) => map,
            _ => Map::new(),
        };
        map.insert(key.to_owned(), value.into());
        self.details = Some(Value::Object(map));
        self
    }

    /// Sets `details.hint`, shown as the human `Hint` line.
    pub fn with_hint(self, hint: impl Into<String>) -> Self {
        self.with_detail("hint", Value::String(hint.into()))
    }

    /// The type this error is classified as; unknown wire strings are `internal_error`.
    pub fn kind(&self) -> ErrorType {
        ErrorType::from_wire(&self.error_type)
    }

    /// Process exit status (§L4), from the one table in the protocol crate.
    pub fn exit_code(&self) -> u8 {
        self.kind().exit_code()
    }

    /// `details.hint`, when it is a string.
    pub fn hint(&self) -> Option<&str> {
        self.details
            .as_ref()
            .and_then(|d| d.get("hint"))
            .and_then(Value::as_str)
    }

    /// `details` without its `hint` key; `None` when nothing is left (§L3.3).
    pub fn details_without_hint(&self) -> Option<Value> {
        match &self.details {
            None => None,
            Some(Value::Object(map)) => {
                let rest: Map<String, Value> = map
                    .iter()
                    .filter(|(k, _)| k.as_str() != "hint")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                (!rest.is_empty()).then_some(Value::Object(rest))
            }
            Some(other) => Some(other.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exit_codes_come_from_the_protocol_table() {
        assert_eq!(CliError::usage("x").exit_code(), 64);
        assert_eq!(CliError::validation("x").exit_code(), 65);
        assert_eq!(CliError::inspection("x").exit_code(), 66);
        assert_eq!(CliError::connection("x").exit_code(), 70);
        assert_eq!(CliError::internal("x").exit_code(), 1);
        assert_eq!(
            CliError::from_wire("policy_denied", "x", None).exit_code(),
            77
        );
    }

    #[test]
    fn unknown_wire_type_is_kept_verbatim_and_exits_one() {
        let e = CliError::from_wire("rate_limited", "slow down", None);
        assert_eq!(e.error_type, "rate_limited");
        assert_eq!(e.kind(), ErrorType::InternalError);
        assert_eq!(e.exit_code(), 1);
    }

    #[test]
    fn hint_is_split_from_details() {
        let e = CliError::usage("x")
            .with_detail("name", "sum")
            .with_hint("try --force");
        assert_eq!(e.hint(), Some("try --force"));
        assert_eq!(e.details_without_hint(), Some(json!({"name": "sum"})));

        let only_hint = CliError::usage("x").with_hint("h");
        assert_eq!(only_hint.details_without_hint(), None);
        assert_eq!(CliError::usage("x").hint(), None);
        assert_eq!(CliError::usage("x").details_without_hint(), None);
    }

    #[test]
    fn non_object_details_are_shown_as_is() {
        let e = CliError::from_wire("internal_error", "x", Some(json!([1, 2])));
        assert_eq!(e.details_without_hint(), Some(json!([1, 2])));
        assert_eq!(e.hint(), None);
    }
}
