//! `appduct_list_events` (§M8.6): the events an app declared, with payload signatures; an
//! exact name also returns that event's payload schema.

use appduct_protocol::control::{EventsList, EventsListParams, EventsListResult, SessionSummary};
use appduct_protocol::signature::render_event_signature;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::builtin::{
    Call, DEFAULT_LIMIT, Definition, Entry, READ_ONLY, Reply, glob_prop, output, selector_prop,
};
use crate::context::{BridgeContext, unless_cancelled};
use crate::error::ToolFailure;

pub const NAME: &str = "appduct_list_events";

pub const BUILTIN: Entry = Entry {
    name: NAME,
    definition,
    handler,
};

fn definition() -> Definition {
    Definition {
        title: "List app events",
        description: "List the events the app declared it may post, with payload signatures. An exact name (no *) also returns that event's payload schema.",
        hints: READ_ONLY,
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
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    selector: Option<String>,
    name: Option<String>,
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
    name: Option<String>,
    has_more: bool,
    events: Vec<EventLine>,
}

/// One declared event of the page.
#[derive(Debug, Serialize)]
struct EventLine {
    name: String,
    signature: String,
    description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_schema: Option<Value>,
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
        .call::<EventsList>(
            EventsListParams::default()
                .with_selector(Some(session.session_id.clone()))
                .with_name(args.name.clone())
                .with_limit(Some(limit))
                .with_offset(args.offset),
        )
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    Ok(output_page(session, list, args))
}

fn output_page(session: SessionSummary, list: EventsListResult, args: Args) -> Output {
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
    let exact = args.name.as_deref().filter(|n| !n.contains('*'));
    let mut events = list.events;
    events.sort_by(|a, b| a.name.cmp(&b.name));
    let events: Vec<EventLine> = events
        .into_iter()
        .map(|e| EventLine {
            signature: render_event_signature(&e.name, e.payload_schema.as_ref()),
            payload_schema: e.payload_schema.filter(|_| exact == Some(e.name.as_str())),
            name: e.name,
            description: e.description,
        })
        .collect();
    let has_more = args.offset.unwrap_or(0) + (events.len() as u64) < list.total;
    Output {
        session: session.alias,
        session_id: session.session_id,
        total: list.total,
        limit,
        offset: args.offset,
        name: args.name,
        has_more,
        events,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::Map;

    #[test]
    fn the_typed_arguments_read_every_schema_property() {
        super::super::builtin::assert_reads_every_property::<Args>(&definition());
    }

    /// The hand-built map this output replaced, kept as the reference for its bytes.
    fn reference(session: &SessionSummary, list: &EventsListResult, args: &Args) -> Value {
        let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
        let offset = args.offset;
        let name = args.name.as_deref();
        let exact = name.filter(|n| !n.contains('*'));
        let mut events = list.events.clone();
        events.sort_by(|a, b| a.name.cmp(&b.name));
        let entries: Vec<Value> = events
            .iter()
            .map(|e| {
                let mut m = Map::new();
                m.insert("name".into(), json!(e.name));
                m.insert(
                    "signature".into(),
                    json!(render_event_signature(&e.name, e.payload_schema.as_ref())),
                );
                m.insert("description".into(), json!(e.description));
                if exact == Some(e.name.as_str())
                    && let Some(schema) = &e.payload_schema
                {
                    m.insert("payload_schema".into(), schema.clone());
                }
                Value::Object(m)
            })
            .collect();
        let has_more = offset.unwrap_or(0) + (entries.len() as u64) < list.total;
        let mut out = Map::new();
        out.insert("session".into(), json!(session.alias));
        out.insert("sessionId".into(), json!(session.session_id));
        out.insert("total".into(), json!(list.total));
        out.insert("limit".into(), json!(limit));
        if let Some(o) = offset {
            out.insert("offset".into(), json!(o));
        }
        if let Some(n) = name {
            out.insert("name".into(), json!(n));
        }
        out.insert("hasMore".into(), json!(has_more));
        out.insert("events".into(), Value::Array(entries));
        Value::Object(out)
    }

    #[test]
    fn the_page_serialises_byte_for_byte_as_before() {
        let session: SessionSummary =
            serde_json::from_value(crate::app_events::tests::session_json()).unwrap();
        let list: EventsListResult = serde_json::from_value(json!({
            "events": [
                {"name": "b_event", "description": "B.", "payload_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
                {"name": "a_event", "description": "A."}
            ],
            "total": 7, "hasMore": true, "offset": 0
        }))
        .unwrap();
        for args in [
            json!({}),
            json!({"name": "b_event", "limit": 2, "offset": 1}),
            json!({"name": "*_event", "offset": 0}),
            json!({"name": "a_event"}),
        ] {
            let parse = || serde_json::from_value::<Args>(args.clone()).unwrap();
            let typed = serde_json::to_string(&output_page(session.clone(), list.clone(), parse()))
                .unwrap();
            assert_eq!(
                typed,
                reference(&session, &list, &parse()).to_string(),
                "{args}"
            );
        }
    }
}
