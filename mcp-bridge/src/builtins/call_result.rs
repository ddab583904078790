//! `appduct_call_result` (§M8.10): the outcome of an `appduct_call_tool` call by its callId,
//! through the daemon's kept results (`tools.result`, control.md §C8.43, §C10.10), so an agent
//! whose bridge was restarted mid-call still learns how the call ended (§M17).

use appduct_client::client::{ClientError, ToolCallError};
use appduct_protocol::control::{
    CallResultState, MAX_RESULT_WAIT_MS, ToolsResult, ToolsResultParams,
};
use rmcp::model::CallToolResponse;
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

use super::builtin::{Call, Definition, Entry, READ_ONLY, Reply};
use super::call_tool::settled_result;
use crate::context::unless_cancelled;
use crate::error::{ToolFailure, success};

pub const NAME: &str = "appduct_call_result";

pub const BUILTIN: Entry = Entry {
    name: NAME,
    definition,
    handler,
};

/// How much longer than `waitMs` the bridge waits for the daemon's answer.
const ANSWER_MARGIN: Duration = Duration::from_secs(10);

fn definition() -> Definition {
    Definition {
        title: "Fetch call result",
        description: "Fetch the outcome of an appduct_call_tool call by its callId (in progress messages and _meta[\"appduct/call\"]), e.g. after the server restarted mid-call. Returns the call's result or error; state running while it runs.",
        hints: READ_ONLY,
        input: json!({
            "type": "object",
            "properties": {
                "callId": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z0-9_-]{1,128}$", "description": "The callId of an appduct_call_tool call."},
                "waitMs": {"type": "integer", "minimum": 0, "maximum": 600000, "description": "While the call runs, wait up to this long for it to end; default 0."}
            },
            "required": ["callId"],
            "additionalProperties": false
        }),
        output: None,
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    call_id: String,
    wait_ms: Option<u64>,
}

fn handler(call: Call<'_>) -> Reply<'_> {
    Box::pin(async move {
        let args: Args = call.args.parse()?;
        let bridge = call.bridge;
        let max_image_bytes = bridge.options.max_image_bytes;
        unless_cancelled(call.context, async move {
            let client = bridge.control().await?;
            let wait_ms = args.wait_ms.unwrap_or(0).min(MAX_RESULT_WAIT_MS);
            let kept = client
                .call_with_timeout::<ToolsResult>(
                    ToolsResultParams::new(args.call_id.clone()).with_wait_ms(Some(wait_ms)),
                    Duration::from_millis(wait_ms) + ANSWER_MARGIN,
                )
                .await
                .map_err(|e| ToolFailure::from_client(&e))?;
            render(kept, max_image_bytes)
        })
        .await
    })
}

/// A settled outcome exactly as `appduct_call_tool` returned (or would have returned) it;
/// a running call as `{callId, state: "running"}` (§M8.10).
fn render(
    kept: appduct_protocol::control::ToolsResultResult,
    max_image_bytes: u64,
) -> Result<CallToolResponse, ToolFailure> {
    match (kept.state, kept.response, kept.error) {
        (CallResultState::Ok, Some(r), _) => Ok(settled_result(&r, max_image_bytes).into()),
        (CallResultState::Error, _, Some(e)) => {
            let call_id = e.data.call_id.clone().unwrap_or(kept.call_id.clone());
            let failed = ToolCallError {
                error: ClientError::Rpc {
                    code: e.code,
                    error_type: e.error_type(),
                    message: e.message,
                    details: e.data.details,
                    call_id: Some(call_id.clone()),
                },
                call_id: Some(call_id.clone()),
            };
            Err(ToolFailure::from_tool_call(&failed).with_call(json!({ "callId": call_id })))
        }
        (CallResultState::Running, _, _) => Ok(success(
            json!({"callId": kept.call_id, "state": "running"}),
            Some(json!({"callId": kept.call_id})),
        )
        .into()),
        _ => Err(ToolFailure::new(
            appduct_protocol::errors::ErrorType::InternalError,
            format!(
                "the daemon's answer for callId {} is incomplete",
                kept.call_id
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_arguments_read_every_schema_property() {
        super::super::builtin::assert_reads_every_property::<Args>(&definition());
    }
}
