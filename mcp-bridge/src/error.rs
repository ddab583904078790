//! The error contract of every built-in (§M6): a tool result with `isError: true`, one text
//! item `[<type>] <message> <details>`, `_meta["appduct/error"]`, and no `structuredContent`.

use appduct_client::client::{ClientError, ToolCallError, classify};
use appduct_protocol::errors::ErrorType;
use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::{Map, Value, json};

/// The published type set (§M6). Adding a type is a minor change; renaming or removing
/// one is breaking.
pub const PUBLISHED_ERROR_TYPES: [ErrorType; 18] = [
    ErrorType::NoSession,
    ErrorType::AmbiguousSession,
    ErrorType::UnknownSession,
    ErrorType::SessionNotActive,
    ErrorType::SessionSuspended,
    ErrorType::SessionLeased,
    ErrorType::PolicyDenied,
    ErrorType::InvalidRequest,
    ErrorType::ToolNotFound,
    ErrorType::ToolInputValidationError,
    ErrorType::ToolOutputValidationError,
    ErrorType::ToolExecutionError,
    ErrorType::ToolSerializationError,
    ErrorType::ToolTimeout,
    ErrorType::ToolCancelled,
    ErrorType::ConnectionError,
    ErrorType::ConsentDeclined,
    ErrorType::InternalError,
];

/// `details` longer than this (compact JSON, characters) are cut in the text item.
pub const MAX_TEXT_DETAILS_CHARS: usize = 2_000;

/// `_meta` key of the error object.
pub const ERROR_META_KEY: &str = "appduct/error";
/// `_meta` key of the call handle of `appduct_call_tool` (§M5).
pub const CALL_META_KEY: &str = "appduct/call";

/// A failed built-in, rendered by [`ToolFailure::into_result`].
#[derive(Debug, Clone, PartialEq)]
pub struct ToolFailure {
    pub error_type: ErrorType,
    pub message: String,
    /// Boxed, like the protocol crate's, so results stay small.
    pub details: Option<Box<Value>>,
    /// `_meta["appduct/call"]` once a call id exists.
    pub call: Option<Box<Value>>,
}

impl ToolFailure {
    pub fn new(error_type: ErrorType, message: impl Into<String>) -> Self {
        // A type outside the published set never leaves the bridge as itself.
        if PUBLISHED_ERROR_TYPES.contains(&error_type) {
            Self {
                error_type,
                message: message.into(),
                details: None,
                call: None,
            }
        } else {
            Self {
                error_type: ErrorType::InternalError,
                message: message.into(),
                details: Some(Box::new(json!({ "type": error_type.as_str() }))),
                call: None,
            }
        }
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorType::InvalidRequest, message)
    }

    pub fn execution(message: impl Into<String>) -> Self {
        Self::new(ErrorType::ToolExecutionError, message)
    }

    /// Sets `details` (merging into a `{type}` set by [`ToolFailure::new`]).
    pub fn with_details(self, details: Value) -> Self {
        self.merge_details(details)
    }

    /// Adds the keys of `extra` to `details`.
    pub fn merge_details(mut self, extra: Value) -> Self {
        match (self.details.as_deref_mut(), extra) {
            (Some(Value::Object(base)), Value::Object(more)) => {
                for (k, v) in more {
                    base.insert(k, v);
                }
            }
            (_, extra) => {
                if !extra.is_null() {
                    self.details = Some(Box::new(extra));
                }
            }
        }
        self
    }

    pub fn with_call(mut self, call: Value) -> Self {
        self.call = Some(Box::new(call));
        self
    }

    /// A daemon or connection failure, mapped by its type verbatim (§M6).
    pub fn from_client(e: &ClientError) -> Self {
        let (t, _) = classify(e);
        let f = Self::new(t, e.to_string());
        match e.details() {
            Some(d) => f.merge_details(d),
            None => f,
        }
    }

    /// A failed `tools.call`; a connection-class failure carries `details.callId`.
    pub fn from_tool_call(e: &ToolCallError) -> Self {
        let (t, _) = e.classify();
        let f = Self::new(t, e.error.to_string());
        match e.details() {
            Some(d) => f.merge_details(d),
            None => f,
        }
    }

    /// The text item: `[type] message`, then the compact details cut at 2,000 characters.
    pub fn text(&self) -> String {
        let mut text = format!("[{}] {}", self.error_type.as_str(), self.message);
        if let Some(details) = &self.details {
            let compact = details.to_string();
            text.push(' ');
            match compact.char_indices().nth(MAX_TEXT_DETAILS_CHARS) {
                Some((cut, _)) => {
                    text.push_str(&compact[..cut]);
                    text.push('…');
                }
                None => text.push_str(&compact),
            }
        }
        text
    }

    /// The tool result of §M6.
    pub fn into_result(self) -> CallToolResult {
        let text = self.text();
        let mut error = Map::new();
        error.insert("type".into(), json!(self.error_type.as_str()));
        error.insert("message".into(), json!(self.message));
        if let Some(d) = self.details {
            error.insert("details".into(), *d);
        }
        let mut meta = Map::new();
        meta.insert(ERROR_META_KEY.into(), Value::Object(error));
        if let Some(call) = self.call {
            meta.insert(CALL_META_KEY.into(), *call);
        }
        let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
        result.structured_content = None;
        result.meta = Some(MetaObject(meta));
        result
    }
}

/// A successful built-in (§M5): compact JSON text, plus `structuredContent` for objects.
pub fn success(value: Value, call: Option<Value>) -> CallToolResult {
    let text = serde_json::to_string(&value).unwrap_or_else(|_| "null".to_owned());
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.is_error = None;
    result.structured_content = value.is_object().then_some(value);
    if let Some(call) = call {
        let mut meta = Map::new();
        meta.insert(CALL_META_KEY.into(), call);
        result.meta = Some(MetaObject(meta));
    }
    result
}
