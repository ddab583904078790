//! An app's tool registry as the built-ins read it (§M8.3–§M8.5): the signature line, the
//! deadline, and the unpaged lookup of one tool.

use appduct_client::client::ControlClient;
use appduct_protocol::control::{
    SessionSummary, ToolsList, ToolsListEntry, ToolsListParams, clamp_timeout_ms,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::limits;
use appduct_protocol::signature::render_tool_signature;
use serde_json::{Value, json};

use crate::error::ToolFailure;

/// The one-line signature of a tool (§M8.3).
pub fn signature(entry: &ToolsListEntry) -> String {
    render_tool_signature(
        entry.name(),
        entry.descriptor.get("input_schema"),
        entry.descriptor.get("output_schema"),
    )
}

/// `deadlineMs` (§M8.4): the declared `timeout_ms` clamped to [1000, 600000], else 10000.
pub fn deadline_ms(entry: &ToolsListEntry) -> u64 {
    entry
        .descriptor
        .get("timeout_ms")
        .and_then(Value::as_f64)
        .filter(|t| t.is_finite())
        .map_or(limits::DEFAULT_CALL_TIMEOUT_MS, clamp_timeout_ms)
}

/// Finds `name` in the whole, unpaged registry of one session id (§M8.4): unknown →
/// `tool_not_found` naming the tool and the alias. The request carries `filter: name`: a
/// substring match over names and descriptions (§C8.8) always keeps the entry named `name`,
/// and the answer no longer grows with the registry.
pub async fn lookup(
    client: &ControlClient,
    session: &SessionSummary,
    name: &str,
) -> Result<ToolsListEntry, ToolFailure> {
    let params = ToolsListParams::default()
        .with_selector(Some(session.session_id.clone()))
        .with_filter(Some(name.to_owned()));
    // The filter can match many tools and the daemon pages by bytes: pages come in name order,
    // so read on until the page that reaches `name`, holding one page at a time.
    let mut offset = 0u64;
    let mut found = None;
    loop {
        let page = client
            .call::<ToolsList>(params.clone().with_offset((offset > 0).then_some(offset)))
            .await
            .map_err(|e| ToolFailure::from_client(&e))?;
        let reached = page.tools.last().is_some_and(|t| t.name() >= name);
        offset += page.tools.len() as u64;
        if let Some(entry) = page.tools.into_iter().find(|t| t.name() == name) {
            found = Some(entry);
            break;
        }
        if reached || !page.has_more || offset == 0 {
            break;
        }
    }
    found.ok_or_else(|| {
        ToolFailure::new(
            ErrorType::ToolNotFound,
            format!(
                "\"{name}\" is not a tool of {}; see appduct_list_tools",
                session.alias
            ),
        )
        .with_details(json!({
            "name": name,
            "session": session.alias,
            "sessionId": session.session_id,
        }))
    })
}
