//! `appduct_describe_tool` (§M8.4): one app tool in full, with its deadline.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::builtin::{
    Call, Definition, Entry, READ_ONLY, Reply, output, selector_prop, tool_name_prop,
};
use crate::app_tools::{deadline_ms, lookup, signature};
use crate::context::{BridgeContext, unless_cancelled};
use crate::error::ToolFailure;

pub const NAME: &str = "appduct_describe_tool";

pub const BUILTIN: Entry = Entry {
    name: NAME,
    definition,
    handler,
};

fn definition() -> Definition {
    Definition {
        title: "Describe app tool",
        description: "Show one app tool in full: description, input and output JSON Schemas, annotations, group, deadline and consent policy.",
        hints: READ_ONLY,
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
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    selector: Option<String>,
    name: String,
}

/// The descriptor's schema keys keep the app's snake_case names.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Output {
    session: String,
    session_id: String,
    name: String,
    signature: String,
    description: String,
    policy: &'static str,
    /// `null` when the tool has no group: the key is always present.
    group: Option<String>,
    #[serde(rename = "input_schema", skip_serializing_if = "Option::is_none")]
    input_schema: Option<Value>,
    #[serde(rename = "output_schema", skip_serializing_if = "Option::is_none")]
    output_schema: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<Value>,
    #[serde(rename = "timeout_ms", skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<Value>,
    deadline_ms: u64,
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
    let entry = lookup(&client, &session, &args.name).await?;
    let field = |key: &str| entry.descriptor.get(key).cloned();
    Ok(Output {
        session: session.alias,
        session_id: session.session_id,
        name: entry.name().to_owned(),
        signature: signature(&entry),
        description: entry.description().to_owned(),
        policy: entry.policy.as_str(),
        group: entry.group.clone(),
        input_schema: field("input_schema"),
        output_schema: field("output_schema"),
        annotations: field("annotations"),
        timeout_ms: field("timeout_ms"),
        deadline_ms: deadline_ms(&entry),
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
