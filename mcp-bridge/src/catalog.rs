//! The fixed MCP surface (§M3, §M8): server identity, instructions, and the ten built-in
//! tools with their shipped descriptions, annotations and schemas, in `tools/list` order, built
//! once from the registry (`builtins::BUILTINS`).
//!
//! Schemas are written as JSON literals (in each built-in's module) so they read like
//! docs/mcp.md; the argument validator ([`crate::args`]) walks the same input schemas, so what is
//! advertised is what is enforced.

use std::sync::{Arc, OnceLock};

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::Value;

use crate::builtins::{self, BUILTINS, Entry, Handler};

pub use crate::identity::{INSTRUCTIONS, SERVER_NAME, SERVER_VERSION, capabilities, server_info};

/// The built-in tool names, in `tools/list` order (§M8).
pub const CONNECT: &str = builtins::connect::NAME;
pub const WAIT_FOR_SESSION: &str = builtins::wait_for_session::NAME;
pub const LIST_TOOLS: &str = builtins::list_tools::NAME;
pub const DESCRIBE_TOOL: &str = builtins::describe_tool::NAME;
pub const CALL_TOOL: &str = builtins::call_tool::NAME;
pub const LIST_EVENTS: &str = builtins::list_events::NAME;
pub const EVENTS: &str = builtins::events::NAME;
pub const WAIT_FOR_EVENT: &str = builtins::wait_for_event::NAME;
pub const STATUS: &str = builtins::status::NAME;
pub const CALL_RESULT: &str = builtins::call_result::NAME;

pub const BUILTIN_NAMES: [&str; BUILTINS.len()] = {
    let mut names = [""; BUILTINS.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = BUILTINS[i].name;
        i += 1;
    }
    names
};

/// One built-in: its definition plus the raw input schema the validator walks.
#[derive(Clone)]
pub struct Builtin {
    pub name: &'static str,
    pub input_schema: Value,
    pub tool: Tool,
    pub(crate) handler: Handler,
}

impl std::fmt::Debug for Builtin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builtin")
            .field("name", &self.name)
            .field("input_schema", &self.input_schema)
            .field("tool", &self.tool)
            .finish_non_exhaustive()
    }
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

fn build(entry: &Entry) -> Builtin {
    let def = (entry.definition)();
    let hints = &def.hints;
    let annotations = ToolAnnotations::from_raw(
        Some(def.title.to_owned()),
        Some(hints.read_only),
        Some(hints.destructive),
        Some(hints.idempotent),
        Some(hints.open_world),
    );
    let mut tool = Tool::new(
        entry.name,
        def.description,
        Arc::new(object(def.input.clone())),
    );
    tool.title = Some(def.title.to_owned());
    tool.annotations = Some(annotations);
    tool.output_schema = def.output.map(|o| Arc::new(object(o)));
    Builtin {
        name: entry.name,
        input_schema: def.input,
        tool,
        handler: entry.handler,
    }
}

/// The ten built-ins, in `tools/list` order; built once per process.
pub fn builtins() -> &'static [Builtin] {
    static BUILT: OnceLock<Vec<Builtin>> = OnceLock::new();
    BUILT.get_or_init(|| BUILTINS.iter().map(build).collect())
}

/// The built-in called `name`, if any.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    builtins().iter().find(|b| b.name == name)
}

/// The `tools/list` page: every built-in, no cursor (§M3).
pub fn tools() -> Vec<Tool> {
    builtins().iter().map(|b| b.tool.clone()).collect()
}
