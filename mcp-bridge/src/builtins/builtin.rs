//! What a built-in is: a name, a definition for `tools/list`, and a handler for `tools/call`;
//! plus the schema fragments and defaults several built-ins share (§M4, §M8) and the
//! rendering of a typed output (§M5).

use std::future::Future;
use std::pin::Pin;

use appduct_protocol::errors::ErrorType;
use rmcp::RoleServer;
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use rmcp::service::RequestContext;
use serde::Serialize;
use serde_json::{Value, json};

use crate::args::Args;
use crate::context::BridgeContext;
use crate::error::{ToolFailure, success};

/// One built-in in the registry (`BUILTINS`).
#[derive(Clone, Copy)]
pub struct Entry {
    pub name: &'static str,
    /// Built once per process, for `tools/list` and the argument validator.
    pub definition: fn() -> Definition,
    pub handler: Handler,
}

/// The `tools/list` entry of a built-in, apart from its name.
pub struct Definition {
    pub title: &'static str,
    pub description: &'static str,
    pub hints: Hints,
    /// Advertised, and walked by the argument validator ([`crate::args`]).
    pub input: Value,
    pub output: Option<Value>,
}

/// The tool annotations' hints (§M8).
pub struct Hints {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
}

/// Read-only, not destructive, idempotent, closed world: most built-ins.
pub const READ_ONLY: Hints = Hints {
    read_only: true,
    destructive: false,
    idempotent: true,
    open_world: false,
};

/// One `tools/call` of a built-in, its arguments already validated against its input schema.
pub struct Call<'a> {
    pub bridge: &'a BridgeContext,
    pub context: &'a RequestContext<RoleServer>,
    pub request: &'a CallToolRequestParams,
    pub args: Args,
}

/// A handler's answer; a failure becomes the error result of §M6. Most handlers run their
/// steps inside [`unless_cancelled`](crate::context::unless_cancelled), since each can simply be
/// dropped; `appduct_connect` and `appduct_call_tool` handle a cancel step by step (a minted
/// link is revoked, a sent call is cancelled, §M12).
pub type Reply<'a> =
    Pin<Box<dyn Future<Output = Result<CallToolResponse, ToolFailure>> + Send + 'a>>;
pub type Handler = for<'a> fn(Call<'a>) -> Reply<'a>;

/// A typed output as the success result of §M5.
pub fn output<T: Serialize>(value: &T) -> Result<CallToolResponse, ToolFailure> {
    let value = serde_json::to_value(value).map_err(|e| {
        ToolFailure::new(
            ErrorType::InternalError,
            format!("cannot serialise the result: {e}"),
        )
    })?;
    Ok(success(value, None).into())
}

/// Default page size of the list built-ins (§M4).
pub const DEFAULT_LIMIT: u64 = 50;
/// Default `payloadMaxBytes` (§M4).
pub const DEFAULT_PAYLOAD_MAX_BYTES: u64 = 4_096;
/// Default `timeoutMs` of both waits (§M4).
pub const DEFAULT_WAIT_MS: u64 = 120_000;

pub fn selector_prop() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 128, "description": "Session id or alias; optional when exactly one session is live."})
}

pub fn glob_prop() -> Value {
    json!({"type": "string", "minLength": 1, "description": "Whole-name glob, case-sensitive; * matches any run of characters."})
}

pub fn cwd_prop() -> Value {
    json!({"type": "string", "minLength": 1, "description": "Optional absolute project directory; defaults to the client's workspace root."})
}

pub fn payload_max_prop() -> Value {
    json!({"type": "integer", "minimum": 1, "default": 4096, "description": "Larger payloads become a payloadPreview; default 4096."})
}

pub fn wait_timeout_prop() -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 1500000, "description": "How long to wait; default 120000."})
}

pub fn tool_name_prop() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 64, "description": "Tool name as listed by appduct_list_tools."})
}

/// Checks that a built-in's typed arguments `T` read every property of its input schema: each
/// property gets a valid value, the whole is validated, then parsed into `T`
/// (`deny_unknown_fields`), and any failure panics with its text.
#[cfg(test)]
pub fn assert_reads_every_property<T: serde::de::DeserializeOwned>(definition: &Definition) {
    let mut arguments = serde_json::Map::new();
    let properties = definition.input["properties"].as_object();
    for (key, prop) in properties.into_iter().flatten() {
        let value = match prop["type"].as_str() {
            Some("string") => match prop["enum"].as_array() {
                Some(values) => values[0].clone(),
                None => json!("a".repeat(prop["minLength"].as_u64().unwrap_or(1) as usize)),
            },
            Some("integer") => json!(prop["minimum"].as_u64().unwrap_or(1)),
            Some("boolean") => json!(true),
            _ => json!({}),
        };
        arguments.insert(key.clone(), value);
    }
    let parsed = crate::args::validate(&definition.input, Some(&arguments))
        .and_then(|args| args.parse::<T>());
    if let Err(f) = parsed {
        panic!("{}", f.text());
    }
}
