//! The fixed MCP surface (06 §6.3, §6.8): server identity, instructions, and the nine built-in
//! tools with their shipped descriptions, annotations and schemas, in `tools/list` order.
//!
//! Schemas are written as JSON literals so they read like the spec; the argument validator
//! ([`crate::args`]) walks the same input schemas, so what is advertised is what is enforced.

use std::sync::{Arc, OnceLock};

use rmcp::model::{Implementation, JsonObject, ServerCapabilities, Tool, ToolAnnotations};
use serde_json::{Value, json};

/// `serverInfo.name` and `title` (06 §6.3).
pub const SERVER_NAME: &str = "appduct";
/// This crate's version, reported as `serverInfo.version`.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Server instructions (06 §6.3): the rules shared by many tools, sent once.
pub const INSTRUCTIONS: &str = "appduct reaches tools that running apps register. Pair an app \
with appduct_connect, then appduct_wait_for_session. App tools are not MCP tools: find them with \
appduct_list_tools, read one with appduct_describe_tool and run it with appduct_call_tool. \
selector is a session id or alias and may be omitted when exactly one session is live. Failed \
calls start with [type] and carry the same type in _meta[\"appduct/error\"]. Tools whose policy \
is prompt ask the user first; a client that cannot ask gets policy_denied. The project directory \
used for the deep-link scheme and app ids is the cwd argument, else the client's workspace root \
(several roots must agree), else CLAUDE_PROJECT_DIR, else the server's own directory; when \
appduct_status reports cwdSource server or claude-project-dir, pass cwd.";

/// The built-in tool names, in `tools/list` order (06 §6.8).
pub const CONNECT: &str = "appduct_connect";
pub const WAIT_FOR_SESSION: &str = "appduct_wait_for_session";
pub const LIST_TOOLS: &str = "appduct_list_tools";
pub const DESCRIBE_TOOL: &str = "appduct_describe_tool";
pub const CALL_TOOL: &str = "appduct_call_tool";
pub const LIST_EVENTS: &str = "appduct_list_events";
pub const EVENTS: &str = "appduct_events";
pub const WAIT_FOR_EVENT: &str = "appduct_wait_for_event";
pub const STATUS: &str = "appduct_status";

pub const BUILTIN_NAMES: [&str; 9] = [
    CONNECT,
    WAIT_FOR_SESSION,
    LIST_TOOLS,
    DESCRIBE_TOOL,
    CALL_TOOL,
    LIST_EVENTS,
    EVENTS,
    WAIT_FOR_EVENT,
    STATUS,
];

/// `serverInfo` (06 §6.3): never rmcp's default.
pub fn server_info() -> Implementation {
    let mut info = Implementation::new(SERVER_NAME, SERVER_VERSION);
    info.title = Some(SERVER_NAME.to_owned());
    info
}

/// Exactly `{tools: {}, resources: {}}` (06 §6.3): no `listChanged`, no `subscribe`.
pub fn capabilities() -> ServerCapabilities {
    let caps = json!({"tools": {}, "resources": {}});
    serde_json::from_value(caps).unwrap_or_default()
}

/// One built-in: its definition plus the raw input schema the validator walks.
#[derive(Debug, Clone)]
pub struct Builtin {
    pub name: &'static str,
    pub input_schema: Value,
    pub tool: Tool,
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

struct Def {
    name: &'static str,
    title: &'static str,
    description: &'static str,
    /// readOnly, destructive, idempotent, openWorld.
    hints: [bool; 4],
    input: Value,
    output: Option<Value>,
}

fn selector_prop() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 128, "description": "Session id or alias; optional when exactly one session is live."})
}

fn glob_prop() -> Value {
    json!({"type": "string", "minLength": 1, "description": "Whole-name glob, case-sensitive; * matches any run of characters."})
}

fn cwd_prop() -> Value {
    json!({"type": "string", "minLength": 1, "description": "Optional absolute project directory; defaults to the client's workspace root."})
}

fn payload_max_prop() -> Value {
    json!({"type": "integer", "minimum": 1, "default": 4096, "description": "Larger payloads become a payloadPreview; default 4096."})
}

fn wait_timeout_prop() -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 1500000, "description": "How long to wait; default 120000."})
}

fn tool_name_prop() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 64, "description": "Tool name as listed by appduct_list_tools."})
}

fn defs() -> Vec<Def> {
    vec![
        Def {
            name: CONNECT,
            title: "Connect an app",
            description: "Pair a running app: mint a one-time link and open it on a booted simulator or attached Android device, or return a QR code and deep link for the user. Then call appduct_wait_for_session with the sessionId.",
            hints: [false, false, false, true],
            input: json!({
                "type": "object",
                "properties": {
                    "target": {"type": "string", "enum": ["android", "ios-sim", "ios-device", "web", "none"], "description": "Where to open the link; omitted = auto-detect one simulator or Android device, else QR."},
                    "device": {"type": "string", "minLength": 1, "description": "Device serial or simulator UDID when several match target."},
                    "appId": {"type": "string", "minLength": 1, "description": "Android package or iOS bundle id; defaults to the project's appduct config."},
                    "relaunch": {"type": "boolean", "description": "ios-device only: terminate the running app before opening the link."},
                    "url": {"type": "string", "minLength": 1, "description": "web only: http(s) page URL to open with the link."},
                    "transport": {"type": "string", "enum": ["native", "web"], "description": "web = loopback link for JS-only SDKs (simulator, emulator, adb reverse); default native."},
                    "ttlSeconds": {"type": "integer", "minimum": 1, "maximum": 86400, "description": "Link lifetime in seconds; default 300."},
                    "cwd": cwd_prop()
                },
                "additionalProperties": false
            }),
            output: Some(json!({
                "type": "object",
                "properties": {
                    "sessionId": {"type": "string"},
                    "expiresAt": {"type": "integer", "description": "Unix seconds after which the link cannot be claimed."},
                    "delivered": {"type": "boolean", "description": "True when the link was opened on a device; otherwise show qr and deepLink to the user."},
                    "deepLink": {"type": "string"},
                    "qr": {"type": "string"},
                    "url": {"type": "string"},
                    "instructions": {"type": "string"}
                },
                "required": ["sessionId", "expiresAt"]
            })),
        },
        Def {
            name: WAIT_FOR_SESSION,
            title: "Wait for session",
            description: "Wait until the app given a link by appduct_connect claims its session; returns the session's alias. Fails with tool_timeout if nothing claims it in time.",
            hints: [true, false, true, false],
            input: json!({
                "type": "object",
                "properties": {
                    "sessionId": {"type": "string", "minLength": 1, "description": "sessionId returned by appduct_connect."},
                    "timeoutMs": wait_timeout_prop()
                },
                "required": ["sessionId"],
                "additionalProperties": false
            }),
            output: Some(
                json!({"type":"object","properties":{"sessionId":{"type":"string"},"alias":{"type":"string"},"claimed":{"type":"boolean"}},"required":["sessionId","alias","claimed"]}),
            ),
        },
        Def {
            name: LIST_TOOLS,
            title: "List app tools",
            description: "List the tools a connected app registered as signatures with one-line summaries, 50 per page. Narrow with group or filter, page with offset. Use appduct_describe_tool for schemas and appduct_call_tool to run one.",
            hints: [true, false, true, false],
            input: json!({
                "type": "object",
                "properties": {
                    "selector": selector_prop(),
                    "group": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}(/[a-zA-Z0-9_-]{1,64})?$", "description": "Only tools in this group or its subgroups."},
                    "filter": {"type": "string", "maxLength": 256, "description": "Case-insensitive text matched against names and descriptions."},
                    "limit": {"type": "integer", "minimum": 1, "default": 50, "description": "Page size; default 50."},
                    "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "Tools to skip; default 0."}
                },
                "additionalProperties": false
            }),
            output: Some(json!({
                "type": "object",
                "properties": {
                    "session": {"type": "string"},
                    "sessionId": {"type": "string"},
                    "total": {"type": "integer", "description": "Matching tools before paging."},
                    "hasMore": {"type": "boolean", "description": "True when tools beyond this page match; raise offset."},
                    "tools": {"type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "signature": {"type": "string"},
                            "summary": {"type": "string"},
                            "policy": {"type": "string", "description": "allow, deny or prompt (asks the user)."}
                        },
                        "required": ["name", "signature", "policy"]
                    }},
                    "groups": {"type": "array"}
                },
                "required": ["session", "sessionId", "total", "hasMore", "tools"]
            })),
        },
        Def {
            name: DESCRIBE_TOOL,
            title: "Describe app tool",
            description: "Show one app tool in full: description, input and output JSON Schemas, annotations, group, deadline and consent policy.",
            hints: [true, false, true, false],
            input: json!({
                "type": "object",
                "properties": {
                    "selector": selector_prop(),
                    "name": tool_name_prop()
                },
                "required": ["name"],
                "additionalProperties": false
            }),
            output: Some(
                json!({"type":"object","properties":{"session":{"type":"string"},"sessionId":{"type":"string"},"name":{"type":"string"},"signature":{"type":"string"},"policy":{"type":"string"},"deadlineMs":{"type":"integer","description":"The tool's deadline; the largest timeoutMs appduct_call_tool accepts."}},"required":["session","sessionId","name","signature","policy","deadlineMs"]}),
            ),
        },
        Def {
            name: CALL_TOOL,
            title: "Call app tool",
            description: "Run a tool the app registered with args matching its input schema and return the tool's result. timeoutMs may only shorten the tool's deadline. Tools whose policy is prompt ask the user first.",
            hints: [false, true, false, true],
            input: json!({
                "type": "object",
                "properties": {
                    "selector": selector_prop(),
                    "name": tool_name_prop(),
                    "args": {"type": "object", "description": "Arguments for the tool; default {}."},
                    "timeoutMs": {"type": "integer", "minimum": 1000, "maximum": 600000, "description": "Shorter deadline in ms, at most the tool's deadlineMs."}
                },
                "required": ["name"],
                "additionalProperties": false
            }),
            output: None,
        },
        Def {
            name: LIST_EVENTS,
            title: "List app events",
            description: "List the events the app declared it may post, with payload signatures. An exact name (no *) also returns that event's payload schema.",
            hints: [true, false, true, false],
            input: json!({
                "type": "object",
                "properties": {
                    "selector": selector_prop(),
                    "name": glob_prop(),
                    "limit": {"type": "integer", "minimum": 1, "default": 50, "description": "Page size; default 50."},
                    "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "Events to skip; default 0."}
                },
                "additionalProperties": false
            }),
            output: Some(
                json!({"type":"object","properties":{"session":{"type":"string"},"sessionId":{"type":"string"},"total":{"type":"integer"},"hasMore":{"type":"boolean"},"events":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"signature":{"type":"string"},"description":{"type":"string"}},"required":["name"]}}},"required":["session","sessionId","total","hasMore","events"]}),
            ),
        },
        Def {
            name: EVENTS,
            title: "Read app events",
            description: "Read events the app posted, oldest first, from the session's retained buffer. Pass the returned cursor as since to read only newer events.",
            hints: [true, false, true, false],
            input: json!({
                "type": "object",
                "properties": {
                    "selector": selector_prop(),
                    "since": {"type": "integer", "minimum": 0, "description": "Return events with seq above this; default 0 (all retained)."},
                    "limit": {"type": "integer", "minimum": 1, "default": 50, "description": "Maximum events; default 50."},
                    "name": glob_prop(),
                    "payloadMaxBytes": payload_max_prop()
                },
                "additionalProperties": false
            }),
            output: Some(json!({
                "type": "object",
                "properties": {
                    "sessionId": {"type": "string"},
                    "events": {"type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "seq": {"type": "integer"},
                            "ts": {"type": "number"},
                            "truncated": {"type": "boolean", "description": "True when payload was replaced by payloadPreview."}
                        },
                        "required": ["name", "seq"]
                    }},
                    "cursor": {"type": "integer", "description": "Pass as since on the next read."},
                    "dropped": {"type": "integer", "description": "Events after since that left the buffer unread."},
                    "remaining": {"type": "integer"},
                    "total": {"type": "integer"},
                    "hasMore": {"type": "boolean"}
                },
                "required": ["events", "cursor", "dropped", "remaining", "total", "hasMore"]
            })),
        },
        Def {
            name: WAIT_FOR_EVENT,
            title: "Wait for event",
            description: "Wait for an app event whose name matches a glob. A retained match newer than since returns at once; otherwise waits for the next one. Fails with tool_timeout when none arrives in time.",
            hints: [true, false, true, false],
            input: json!({
                "type": "object",
                "properties": {
                    "selector": selector_prop(),
                    "name": glob_prop(),
                    "since": {"type": "integer", "minimum": 0, "description": "Only events with seq above this; default 0."},
                    "timeoutMs": wait_timeout_prop(),
                    "payloadMaxBytes": payload_max_prop()
                },
                "required": ["name"],
                "additionalProperties": false
            }),
            output: Some(
                json!({"type":"object","properties":{"name":{"type":"string"},"seq":{"type":"integer","description":"Pass as since to wait for a later event."},"ts":{"type":"number"},"sessionId":{"type":"string"},"truncated":{"type":"boolean"},"dropped":{"type":"integer"}},"required":["name","seq","sessionId","dropped"]}),
            ),
        },
        Def {
            name: STATUS,
            title: "Appduct status",
            description: "Report server and daemon versions, live sessions, the consent channel, and how the project directory, scheme and app ids resolve. Never contacts a device.",
            hints: [true, false, true, false],
            input: json!({
                "type": "object",
                "properties": {
                    "cwd": cwd_prop()
                },
                "additionalProperties": false
            }),
            output: Some(json!({
                "type": "object",
                "properties": {
                    "server": {"type": "object", "properties": {"version": {"type": "string"}, "protocolVersion": {"type": "string"}}},
                    "daemon": {"type": "object", "properties": {"running": {"type": "boolean"}, "version": {"type": "string"}}, "required": ["running"]},
                    "sessions": {"type": "array", "items": {"type": "object", "properties": {"sessionId": {"type": "string"}, "alias": {"type": "string"}, "state": {"type": "string"}}}},
                    "consent": {"type": "string", "description": "elicitation, input_required or none; none denies prompt-policy tools."},
                    "project": {"type": "object", "properties": {"dir": {"type": "string"}, "cwdSource": {"type": "string", "description": "argument, client-root, claude-project-dir or server; for the last two pass cwd."}}}
                },
                "required": ["server", "daemon", "sessions", "consent", "project"]
            })),
        },
    ]
}

fn build(def: Def) -> Builtin {
    let [read_only, destructive, idempotent, open_world] = def.hints;
    let annotations = ToolAnnotations::from_raw(
        Some(def.title.to_owned()),
        Some(read_only),
        Some(destructive),
        Some(idempotent),
        Some(open_world),
    );
    let mut tool = Tool::new(
        def.name,
        def.description,
        Arc::new(object(def.input.clone())),
    );
    tool.title = Some(def.title.to_owned());
    tool.annotations = Some(annotations);
    tool.output_schema = def.output.map(|o| Arc::new(object(o)));
    Builtin {
        name: def.name,
        input_schema: def.input,
        tool,
    }
}

/// The nine built-ins, in `tools/list` order; built once per process.
pub fn builtins() -> &'static [Builtin] {
    static BUILTINS: OnceLock<Vec<Builtin>> = OnceLock::new();
    BUILTINS.get_or_init(|| defs().into_iter().map(build).collect())
}

/// The built-in called `name`, if any.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    builtins().iter().find(|b| b.name == name)
}

/// The `tools/list` page: every built-in, no cursor (06 §6.3).
pub fn tools() -> Vec<Tool> {
    builtins().iter().map(|b| b.tool.clone()).collect()
}
