//! `appduct tools describe [selector] <name>` (§L7.2).

use appduct_protocol::control::ToolsListEntry;
use serde_json::{Map, Value, json};

use super::{describe_block, describe_session, list_all, tool_not_found, tool_signature};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Success};
use crate::render::to_value;

/// `tools describe`.
pub async fn run(
    globals: &Globals,
    out: &Output,
    selector: Option<&str>,
    name: &str,
) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let session = describe_session(&client, &dir, selector).await?;
    let all = list_all(&client, &dir, &session.session_id).await?;
    match all.tools.iter().find(|t| t.name() == name) {
        Some(entry) => Ok(tools_describe(entry)),
        None => Err(tool_not_found(name, &session.alias, &all)),
    }
}

/// `tools describe` (§L7.2): the entry plus `signature`.
pub fn tools_describe(entry: &ToolsListEntry) -> Success {
    let mut data = match to_value(entry) {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    data.insert("signature".into(), json!(tool_signature(entry)));
    Success::new(Value::Object(data), describe_block(entry))
}
