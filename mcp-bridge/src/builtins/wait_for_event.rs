//! `appduct_wait_for_event` (§M8.8): waits, on its own connection, for an app event whose
//! name matches a glob; a retained match newer than `since` returns at once.

use appduct_protocol::control::{EventData, EventKind, SubscribeParams};
use appduct_protocol::errors::ErrorType;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde::Deserialize;
use serde_json::json;

use super::builtin::{
    Call, DEFAULT_PAYLOAD_MAX_BYTES, DEFAULT_WAIT_MS, Definition, Entry, READ_ONLY, Reply,
    glob_prop, output, payload_max_prop, selector_prop, wait_timeout_prop,
};
use crate::app_events::{FlatEvent, flat_event};
use crate::context::{BridgeContext, unless_cancelled};
use crate::error::ToolFailure;
use crate::wait::{Step, timeout_failure, wait_loop};

pub const NAME: &str = "appduct_wait_for_event";

pub const BUILTIN: Entry = Entry {
    name: NAME,
    definition,
    handler,
};

fn definition() -> Definition {
    Definition {
        title: "Wait for event",
        description: "Wait for an app event whose name matches a glob. A retained match newer than since returns at once; otherwise waits for the next one. Fails with tool_timeout when none arrives in time.",
        hints: READ_ONLY,
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
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    selector: Option<String>,
    name: String,
    since: Option<u64>,
    timeout_ms: Option<u64>,
    payload_max_bytes: Option<u64>,
}

fn handler(call: Call<'_>) -> Reply<'_> {
    Box::pin(async move {
        let args: Args = call.args.parse()?;
        let out = unless_cancelled(call.context, run(call.bridge, call.context, args)).await?;
        output(&out)
    })
}

/// The output is the matching event with the `dropped` count of the replay.
async fn run(
    bridge: &BridgeContext,
    context: &RequestContext<RoleServer>,
    args: Args,
) -> Result<FlatEvent, ToolFailure> {
    let client = bridge.control().await?;
    let session = bridge.resolve(&client, args.selector.as_deref()).await?;
    let glob = args.name;
    let timeout_ms = args.timeout_ms.unwrap_or(DEFAULT_WAIT_MS);
    let extra = bridge
        .connector
        .connect(true)
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    let mut stream = extra
        .subscribe(
            SubscribeParams::default()
                .with_session_selector(Some(session.session_id.clone()))
                .with_kinds(Some(vec![
                    EventKind::AppEvent,
                    EventKind::SessionRevoked,
                    EventKind::SessionExpired,
                ]))
                .with_name(Some(glob.clone()))
                .with_payload_max_bytes(Some(
                    args.payload_max_bytes.unwrap_or(DEFAULT_PAYLOAD_MAX_BYTES),
                ))
                .with_since(Some(args.since.unwrap_or(0))),
        )
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    let dropped = stream.result().replay.as_ref().map_or(0, |r| r.dropped);
    let id = session.session_id.clone();
    let what = format!("event {glob}");
    wait_loop(
        bridge,
        context,
        &mut stream,
        timeout_ms,
        &what,
        || {
            ToolFailure::execution(format!(
                "the connection to the appduct daemon closed while waiting for event {glob} on session {id}"
            ))
            .with_details(json!({"sessionId": id}))
        },
        || timeout_failure(&format!("an event matching {glob}"), timeout_ms),
        |e| match &e.data {
            EventData::AppEvent(_) => match flat_event(&e) {
                Some(event) => Step::Done(Ok(FlatEvent {
                    dropped: Some(dropped),
                    ..event
                })),
                None => Step::Continue,
            },
            EventData::SessionRevoked(_) | EventData::SessionExpired(_) => {
                Step::Done(Err(ToolFailure::new(
                    ErrorType::UnknownSession,
                    format!(
                        "session {} ({}) ended while waiting for event {glob}",
                        session.alias, session.session_id
                    ),
                )
                .with_details(json!({"selector": session.session_id}))))
            }
            _ => Step::Continue,
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_arguments_read_every_schema_property() {
        super::super::builtin::assert_reads_every_property::<Args>(&definition());
    }
}
