//! Who the bridge says it is (§M3): server identity, instructions and capabilities.

use rmcp::model::{Implementation, ServerCapabilities};
use serde_json::json;

/// `serverInfo.name` and `title` (§M3).
pub const SERVER_NAME: &str = "appduct";
/// This crate's version, reported as `serverInfo.version`.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Server instructions (§M3): the rules shared by many tools, sent once.
pub const INSTRUCTIONS: &str = "appduct reaches tools that running apps register. Pair an app \
with appduct_connect, then appduct_wait_for_session. App tools are not MCP tools: find them with \
appduct_list_tools, read one with appduct_describe_tool and run it with appduct_call_tool; \
appduct_call_result fetches a call's outcome by its callId after a restart. \
selector is a session id or alias and may be omitted when exactly one session is live. Failed \
calls start with [type] and carry the same type in _meta[\"appduct/error\"]. Tools whose policy \
is prompt ask the user first; a client that cannot ask gets policy_denied. The project directory \
used for the deep-link scheme and app ids is the cwd argument, else the client's workspace root \
(several roots must agree), else CLAUDE_PROJECT_DIR, else the server's own directory; when \
appduct_status reports cwdSource server or claude-project-dir, pass cwd.";

/// `serverInfo` (§M3): never rmcp's default.
pub fn server_info() -> Implementation {
    let mut info = Implementation::new(SERVER_NAME, SERVER_VERSION);
    info.title = Some(SERVER_NAME.to_owned());
    info
}

/// Exactly `{tools: {}, resources: {}}` (§M3): no `listChanged`, no `subscribe`.
pub fn capabilities() -> ServerCapabilities {
    let caps = json!({"tools": {}, "resources": {}});
    serde_json::from_value(caps).unwrap_or_default()
}
