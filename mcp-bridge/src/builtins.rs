//! The read-only session built-ins: `appduct_list_tools`, `appduct_describe_tool`,
//! `appduct_list_events`, `appduct_events` (06 §6.8.3, §6.8.4, §6.8.6, §6.8.7), and the helpers
//! `appduct_call_tool` shares with them (registry lookup, deadline, flat events).

use appduct_daemon::client::ControlClient;
use appduct_protocol::control::{
    AppEventData, EventData, EventNotification, EventsList, EventsListParams, EventsSince,
    EventsSinceParams, SessionSummary, ToolsList, ToolsListEntry, ToolsListParams,
    clamp_timeout_ms,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::limits;
use appduct_protocol::signature::{
    render_event_signature, render_tool_signature, summarize_description,
};
use serde_json::{Map, Value, json};

use crate::args::Args;
use crate::error::ToolFailure;
use crate::server::Inner;

/// Default page size of the list built-ins (06 §6.4).
pub const DEFAULT_LIMIT: u64 = 50;
/// Default `payloadMaxBytes` (06 §6.4).
pub const DEFAULT_PAYLOAD_MAX_BYTES: u64 = 4_096;

fn signature(entry: &ToolsListEntry) -> String {
    render_tool_signature(
        entry.name(),
        entry.descriptor.get("input_schema"),
        entry.descriptor.get("output_schema"),
    )
}

/// `deadlineMs` (06 §6.8.4): the declared `timeout_ms` clamped to [1000, 600000], else 10000.
pub fn deadline_ms(entry: &ToolsListEntry) -> u64 {
    entry
        .descriptor
        .get("timeout_ms")
        .and_then(Value::as_f64)
        .filter(|t| t.is_finite())
        .map_or(limits::DEFAULT_CALL_TIMEOUT_MS, clamp_timeout_ms)
}

/// Finds `name` in the whole, unpaged registry of one session id (06 §6.8.4): unknown →
/// `tool_not_found` naming the tool and the alias. The request carries `filter: name`: a
/// substring match over names and descriptions (03 §9.8) always keeps the entry named `name`,
/// and the answer no longer grows with the registry.
pub async fn lookup(
    client: &ControlClient,
    session: &SessionSummary,
    name: &str,
) -> Result<ToolsListEntry, ToolFailure> {
    let list = client
        .call::<ToolsList>(
            ToolsListParams::default()
                .with_selector(Some(session.session_id.clone()))
                .with_filter(Some(name.to_owned())),
        )
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    list.tools
        .into_iter()
        .find(|t| t.name() == name)
        .ok_or_else(|| {
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

pub async fn list_tools(inner: &Inner, args: &Args) -> Result<Value, ToolFailure> {
    let client = inner.control().await?;
    let session = inner.resolve(&client, args.str("selector")).await?;
    let limit = args.u64("limit").unwrap_or(DEFAULT_LIMIT);
    let offset = args.u64("offset");
    let list = client
        .call::<ToolsList>(
            ToolsListParams::default()
                .with_selector(Some(session.session_id.clone()))
                .with_group(args.str("group").map(str::to_owned))
                .with_filter(args.str("filter").map(str::to_owned))
                .with_limit(Some(limit))
                .with_offset(offset),
        )
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    let mut tools = list.tools;
    tools.sort_by(|a, b| a.name().cmp(b.name()));
    let entries: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut e = Map::new();
            e.insert("name".into(), json!(t.name()));
            e.insert("signature".into(), json!(signature(t)));
            e.insert(
                "summary".into(),
                json!(summarize_description(t.description())),
            );
            e.insert("group".into(), json!(t.group));
            e.insert("policy".into(), json!(t.policy.as_str()));
            if let Some(a) = t.descriptor.get("annotations") {
                e.insert("annotations".into(), a.clone());
            }
            Value::Object(e)
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
    if let Some(f) = args.str("filter") {
        out.insert("filter".into(), json!(f));
    }
    if let Some(g) = args.str("group") {
        out.insert("group".into(), json!(g));
    }
    out.insert("hasMore".into(), json!(has_more));
    out.insert("tools".into(), Value::Array(entries));
    out.insert(
        "groups".into(),
        serde_json::to_value(&list.groups).unwrap_or(Value::Array(Vec::new())),
    );
    Ok(Value::Object(out))
}

pub async fn describe_tool(inner: &Inner, args: &Args) -> Result<Value, ToolFailure> {
    let client = inner.control().await?;
    let session = inner.resolve(&client, args.str("selector")).await?;
    let name = args.str("name").unwrap_or_default();
    let entry = lookup(&client, &session, name).await?;
    let mut out = Map::new();
    out.insert("session".into(), json!(session.alias));
    out.insert("sessionId".into(), json!(session.session_id));
    out.insert("name".into(), json!(entry.name()));
    out.insert("signature".into(), json!(signature(&entry)));
    out.insert("description".into(), json!(entry.description()));
    out.insert("policy".into(), json!(entry.policy.as_str()));
    out.insert("group".into(), json!(entry.group));
    for key in ["input_schema", "output_schema", "annotations", "timeout_ms"] {
        if let Some(v) = entry.descriptor.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    out.insert("deadlineMs".into(), json!(deadline_ms(&entry)));
    Ok(Value::Object(out))
}

pub async fn list_events(inner: &Inner, args: &Args) -> Result<Value, ToolFailure> {
    let client = inner.control().await?;
    let session = inner.resolve(&client, args.str("selector")).await?;
    let limit = args.u64("limit").unwrap_or(DEFAULT_LIMIT);
    let offset = args.u64("offset");
    let name = args.str("name");
    let list = client
        .call::<EventsList>(
            EventsListParams::default()
                .with_selector(Some(session.session_id.clone()))
                .with_name(name.map(str::to_owned))
                .with_limit(Some(limit))
                .with_offset(offset),
        )
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    let exact = name.filter(|n| !n.contains('*'));
    let mut events = list.events;
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
    Ok(Value::Object(out))
}

/// An `app_event` flattened for the agent (06 §6.8.7); `None` for other kinds.
pub fn flat_event(e: &EventNotification) -> Option<Map<String, Value>> {
    let EventData::AppEvent(data) = &e.data else {
        return None;
    };
    let mut m = Map::new();
    match data {
        AppEventData::Full { name, payload, ts } => {
            m.insert("name".into(), json!(name));
            m.insert("payload".into(), payload.clone());
            m.insert("ts".into(), Value::Number(ts.clone()));
        }
        AppEventData::Truncated {
            name,
            payload_preview,
            truncated,
            payload_bytes,
            ts,
        } => {
            m.insert("name".into(), json!(name));
            m.insert("payloadPreview".into(), json!(payload_preview));
            m.insert("truncated".into(), json!(truncated));
            m.insert("payloadBytes".into(), json!(payload_bytes));
            m.insert("ts".into(), Value::Number(ts.clone()));
        }
    }
    m.insert("seq".into(), json!(e.seq));
    if let Some(id) = &e.session_id {
        m.insert("sessionId".into(), json!(id));
    }
    if let Some(alias) = &e.alias {
        m.insert("alias".into(), json!(alias));
    }
    Some(m)
}

pub async fn events(inner: &Inner, args: &Args) -> Result<Value, ToolFailure> {
    let client = inner.control().await?;
    let session = inner.resolve(&client, args.str("selector")).await?;
    let page = client
        .call::<EventsSince>(
            EventsSinceParams::default()
                .with_selector(Some(session.session_id.clone()))
                .with_since(Some(args.u64("since").unwrap_or(0)))
                .with_limit(Some(args.u64("limit").unwrap_or(DEFAULT_LIMIT)))
                .with_name(args.str("name").map(str::to_owned))
                .with_payload_max_bytes(Some(
                    args.u64("payloadMaxBytes")
                        .unwrap_or(DEFAULT_PAYLOAD_MAX_BYTES),
                )),
        )
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    let events: Vec<Value> = page
        .events
        .iter()
        .filter_map(flat_event)
        .map(Value::Object)
        .collect();
    let total = events.len() as u64 + page.remaining;
    Ok(json!({
        "session": session.alias,
        "sessionId": session.session_id,
        "events": events,
        "cursor": page.cursor,
        "dropped": page.dropped,
        "remaining": page.remaining,
        "total": total,
        "hasMore": page.remaining > 0,
    }))
}
