//! `appduct_list_tools` (§M8.3): a session's tools as signatures with one-line summaries,
//! narrowed and paged by the daemon, sorted by name.

use appduct_protocol::control::{GroupTotal, ToolsList, ToolsListParams};
use appduct_protocol::signature::summarize_description;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::builtin::{
    Call, DEFAULT_LIMIT, Definition, Entry, READ_ONLY, Reply, output, selector_prop,
};
use crate::app_tools::signature;
use crate::context::{BridgeContext, unless_cancelled};
use crate::error::ToolFailure;

pub const NAME: &str = "appduct_list_tools";

pub const BUILTIN: Entry = Entry {
    name: NAME,
    definition,
    handler,
};

fn definition() -> Definition {
    Definition {
        title: "List app tools",
        description: "List the tools a connected app registered as signatures with one-line summaries, 50 per page. Narrow with group or filter, page with offset. Use appduct_describe_tool for schemas and appduct_call_tool to run one.",
        hints: READ_ONLY,
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
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    selector: Option<String>,
    group: Option<String>,
    filter: Option<String>,
    limit: Option<u64>,
    offset: Option<u64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Output {
    session: String,
    session_id: String,
    total: u64,
    limit: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    filter: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    has_more: bool,
    tools: Vec<ToolLine>,
    groups: Vec<GroupTotal>,
}

/// One tool of the page.
#[derive(Debug, Serialize)]
struct ToolLine {
    name: String,
    signature: String,
    summary: String,
    /// `null` when the tool has no group: the key is always present.
    group: Option<String>,
    policy: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<Value>,
}

fn handler(call: Call<'_>) -> Reply<'_> {
    Box::pin(async move {
        let args: Args = call.args.parse()?;
        output(&unless_cancelled(call.context, run(call.bridge, args)).await?)
    })
}

async fn run(bridge: &BridgeContext, args: Args) -> Result<Output, ToolFailure> {
    let client = bridge.control().await?;
    let session = bridge.resolve(&client, args.selector.as_deref()).await?;
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
    let list = client
        .call::<ToolsList>(
            ToolsListParams::default()
                .with_selector(Some(session.session_id.clone()))
                .with_group(args.group.clone())
                .with_filter(args.filter.clone())
                .with_limit(Some(limit))
                .with_offset(args.offset),
        )
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    let mut tools = list.tools;
    tools.sort_by(|a, b| a.name().cmp(b.name()));
    let tools: Vec<ToolLine> = tools
        .iter()
        .map(|t| ToolLine {
            name: t.name().to_owned(),
            signature: signature(t),
            summary: summarize_description(t.description()),
            group: t.group.clone(),
            policy: t.policy.as_str(),
            annotations: t.descriptor.get("annotations").cloned(),
        })
        .collect();
    let has_more = args.offset.unwrap_or(0) + (tools.len() as u64) < list.total;
    Ok(Output {
        session: session.alias,
        session_id: session.session_id,
        total: list.total,
        limit,
        offset: args.offset,
        filter: args.filter,
        group: args.group,
        has_more,
        tools,
        groups: list.groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_arguments_read_every_schema_property() {
        super::super::builtin::assert_reads_every_property::<Args>(&definition());
    }
}
