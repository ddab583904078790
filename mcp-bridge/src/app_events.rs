//! An app event as the built-ins return it (§M8.7, §M8.8).

use appduct_protocol::control::{AppEventData, EventData, EventNotification};
use serde::Serialize;
use serde_json::{Number, Value};

/// An `app_event` flattened for the agent; the keys in this order.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FlatEvent {
    pub name: String,
    /// Present (possibly `null`) for a full event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_preview: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_bytes: Option<u64>,
    pub ts: Number,
    pub seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// `appduct_wait_for_event` only: events after `since` that left the buffer unread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<u64>,
}

/// An `app_event` flattened for the agent; `None` for other kinds.
pub fn flat_event(e: &EventNotification) -> Option<FlatEvent> {
    let EventData::AppEvent(data) = &e.data else {
        return None;
    };
    let mut flat = FlatEvent {
        name: String::new(),
        payload: None,
        payload_preview: None,
        truncated: None,
        payload_bytes: None,
        ts: Number::from(0),
        seq: e.seq,
        session_id: e.session_id.clone(),
        alias: e.alias.clone(),
        dropped: None,
    };
    match data {
        AppEventData::Full { name, payload, ts } => {
            flat.name.clone_from(name);
            flat.payload = Some(payload.clone());
            flat.ts = ts.clone();
        }
        AppEventData::Truncated {
            name,
            payload_preview,
            truncated,
            payload_bytes,
            ts,
        } => {
            flat.name.clone_from(name);
            flat.payload_preview = Some(payload_preview.clone());
            flat.truncated = Some(*truncated);
            flat.payload_bytes = Some(*payload_bytes);
            flat.ts = ts.clone();
        }
    }
    Some(flat)
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::{Map, json};

    pub fn session_json() -> Value {
        json!({
            "sessionId": "q3VfZ0xkR2ptTnB4", "alias": "pixel-8", "state": "active",
            "transport": "native", "createdAt": "2026-11-30T09:12:03.120Z",
            "claimedAt": "2026-11-30T09:12:09.842Z", "toolCount": 0, "eventCount": 0
        })
    }

    /// Full, `null` payload, truncated, without session, and a non-app event.
    pub fn events_json() -> Value {
        json!([
            {"kind": "app_event", "sessionId": "q3VfZ0xkR2ptTnB4", "alias": "pixel-8", "ts": 9, "seq": 5,
             "data": {"name": "checkout_completed", "payload": {"orderId": "A-17", "total": 1.5}, "ts": 7}},
            {"kind": "app_event", "sessionId": "q3VfZ0xkR2ptTnB4", "alias": "pixel-8", "ts": 9, "seq": 6,
             "data": {"name": "nothing", "payload": null, "ts": 7.25}},
            {"kind": "app_event", "sessionId": "q3VfZ0xkR2ptTnB4", "alias": "pixel-8", "ts": 9, "seq": 7,
             "data": {"name": "big", "payloadPreview": "{\"a\":", "truncated": true, "payloadBytes": 90000, "ts": 8}},
            {"kind": "app_event", "ts": 9, "seq": 8,
             "data": {"name": "anonymous", "payload": [1, 2], "ts": 8}},
            {"kind": "session_revoked", "sessionId": "q3VfZ0xkR2ptTnB4", "alias": "pixel-8", "ts": 9, "seq": 0,
             "data": {"previousState": "active"}}
        ])
    }

    /// The hand-built map [`FlatEvent`] replaced, with `dropped` as the wait added it.
    pub fn reference(e: &EventNotification) -> Option<Value> {
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
        m.insert("dropped".into(), json!(3));
        Some(Value::Object(m))
    }

    #[test]
    fn flat_events_serialise_byte_for_byte_as_before() {
        let events: Vec<EventNotification> = serde_json::from_value(events_json()).unwrap();
        let mut seen = 0;
        for e in &events {
            let typed = flat_event(e).map(|f| FlatEvent {
                dropped: Some(3),
                ..f
            });
            let typed = typed.map(|f| serde_json::to_string(&f).unwrap());
            assert_eq!(typed, reference(e).map(|v| v.to_string()));
            seen += usize::from(typed.is_some());
        }
        assert_eq!(seen, 4);
    }
}
