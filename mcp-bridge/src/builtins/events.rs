//! `appduct_events` (§M8.7): the events an app posted, oldest first, from the session's
//! retained buffer, with a cursor for the next read.

use appduct_protocol::control::{
    EventsSince, EventsSinceParams, EventsSinceResult, SessionSummary,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::builtin::{
    Call, DEFAULT_LIMIT, DEFAULT_PAYLOAD_MAX_BYTES, Definition, Entry, READ_ONLY, Reply, glob_prop,
    output, payload_max_prop, selector_prop,
};
use crate::app_events::{FlatEvent, flat_event};
use crate::context::{BridgeContext, unless_cancelled};
use crate::error::ToolFailure;

pub const NAME: &str = "appduct_events";

pub const BUILTIN: Entry = Entry {
    name: NAME,
    definition,
    handler,
};

fn definition() -> Definition {
    Definition {
        title: "Read app events",
        description: "Read events the app posted, oldest first, from the session's retained buffer. Pass the returned cursor as since to read only newer events.",
        hints: READ_ONLY,
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
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    selector: Option<String>,
    since: Option<u64>,
    limit: Option<u64>,
    name: Option<String>,
    payload_max_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Output {
    session: String,
    session_id: String,
    events: Vec<FlatEvent>,
    cursor: u64,
    dropped: u64,
    remaining: u64,
    total: u64,
    has_more: bool,
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
    let page = client
        .call::<EventsSince>(
            EventsSinceParams::default()
                .with_selector(Some(session.session_id.clone()))
                .with_since(Some(args.since.unwrap_or(0)))
                .with_limit(Some(args.limit.unwrap_or(DEFAULT_LIMIT)))
                .with_name(args.name)
                .with_payload_max_bytes(Some(
                    args.payload_max_bytes.unwrap_or(DEFAULT_PAYLOAD_MAX_BYTES),
                )),
        )
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    Ok(output_page(session, &page))
}

fn output_page(session: SessionSummary, page: &EventsSinceResult) -> Output {
    let events: Vec<FlatEvent> = page.events.iter().filter_map(flat_event).collect();
    let total = events.len() as u64 + page.remaining;
    Output {
        session: session.alias,
        session_id: session.session_id,
        events,
        cursor: page.cursor,
        dropped: page.dropped,
        remaining: page.remaining,
        total,
        has_more: page.remaining > 0,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::{Map, Value};

    #[test]
    fn the_typed_arguments_read_every_schema_property() {
        super::super::builtin::assert_reads_every_property::<Args>(&definition());
    }

    /// The hand-built map this output replaced, kept as the reference for its bytes.
    fn reference(session: &SessionSummary, page: &EventsSinceResult) -> Value {
        let events: Vec<Value> = page
            .events
            .iter()
            .filter_map(|e| {
                let mut m: Map<String, Value> =
                    serde_json::from_value(crate::app_events::tests::reference(e)?).unwrap();
                m.remove("dropped");
                Some(Value::Object(m))
            })
            .collect();
        let total = events.len() as u64 + page.remaining;
        json!({
            "session": session.alias,
            "sessionId": session.session_id,
            "events": events,
            "cursor": page.cursor,
            "dropped": page.dropped,
            "remaining": page.remaining,
            "total": total,
            "hasMore": page.remaining > 0,
        })
    }

    #[test]
    fn the_page_serialises_byte_for_byte_as_before() {
        let session: SessionSummary =
            serde_json::from_value(crate::app_events::tests::session_json()).unwrap();
        let page: EventsSinceResult = serde_json::from_value(json!({
            "events": crate::app_events::tests::events_json(),
            "cursor": 12, "dropped": 2, "remaining": 3
        }))
        .unwrap();
        let typed = serde_json::to_string(&output_page(session.clone(), &page)).unwrap();
        assert_eq!(typed, reference(&session, &page).to_string());
    }
}
