//! Issue #23: typed link refusals (`link_refused` as a first frame, checked against a pending
//! link's claim token) and the registry state waiters read (`SessionSummary.registry`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::engine_support;

use appduct_protocol::bootstrap;
use appduct_protocol::control::{EventData, EventKind, RegistryState, Transport};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::ids::ClaimToken;
use appduct_protocol::link::{RefusalReason, refusal_proof};
use engine_support::*;
use serde_json::{Value, json};

/// The claim token bytes of a link.
fn token_bytes(payload: &str) -> [u8; 32] {
    *bootstrap::decode(payload).unwrap().token.as_bytes()
}

fn refusal(session_id: &str, reason: &str, proof: &str) -> Value {
    json!({"type": "link_refused", "session_id": session_id, "reason": reason, "proof": proof})
}

fn proof(token: &[u8; 32], session_id: &str, reason: RefusalReason) -> String {
    refusal_proof(&ClaimToken::from_bytes(*token), session_id, reason)
}

/// `unknown_session` details of a pending link, as `sessions.describe` answers.
fn pending_details(h: &Harness, id: &str) -> Value {
    let e = h.mgr.describe(Some(id)).unwrap_err();
    assert_eq!(e.data.error_type, ErrorType::UnknownSession);
    *e.data.details.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_valid_refusal_is_recorded_once_and_the_link_stays_claimable() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({}));
    h.event_of(EventKind::LinkCreated).await;
    let key = token_bytes(&link.deep_link_payload);
    let id = link.session_id.as_str();

    // Any listener: the app may refuse on the one it could reach.
    let mut app = h.connect(Transport::Web);
    let first = proof(&key, id, RefusalReason::UnsupportedLink);
    app.send_text(refusal(id, "unsupported_link", &first).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1000, "refusal_recorded").await;
    let e = h.next_event().await;
    assert_eq!(
        serde_json::to_value(&e).unwrap(),
        json!({"kind": "link_refused", "sessionId": id, "ts": START_MS, "seq": 0,
               "data": {"reason": "unsupported_link"}})
    );
    let details = pending_details(&h, id);
    assert_eq!(details["refused"], "unsupported_link");
    assert_eq!(details["pending"], true);
    assert_eq!(details["transport"], "native");
    assert_eq!(
        details["endpoint"],
        json!({"address": link.endpoint.address, "port": link.endpoint.port})
    );

    // A second valid refusal is answered the same, but only the first is kept.
    let mut again = h.connect(Transport::Native);
    let second = proof(&key, id, RefusalReason::PinMismatch);
    again
        .send_text(refusal(id, "pin_mismatch", &second).to_string())
        .await
        .unwrap();
    assert_closed(&mut again, 1000, "refusal_recorded").await;
    settle().await;
    assert!(h.drain_events().is_empty(), "one link_refused event only");
    assert_eq!(pending_details(&h, id)["refused"], "unsupported_link");

    // Refusals never count as failed claims: five of them leave the link claimable.
    for _ in 0..5 {
        let mut more = h.connect(Transport::Native);
        more.send_text(refusal(id, "unsupported_link", &first).to_string())
            .await
            .unwrap();
        assert_closed(&mut more, 1000, "refusal_recorded").await;
    }
    let mut claimer = h.connect(Transport::Native);
    claimer
        .send_text(claim_frame(id, &token, None).to_string())
        .await
        .unwrap();
    assert_eq!(expect_text(&mut claimer).await["type"], "session_ack");
}

#[tokio::test(start_paused = true)]
async fn invalid_refusals_close_1008_and_change_nothing() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({}));
    let key = token_bytes(&link.deep_link_payload);
    let id = link.session_id.as_str();
    let mut wrong_key = key;
    wrong_key[31] ^= 0x80;
    let (other, _) = h.link(json!({}));
    h.drain_events();

    let cases = [
        // The proof of another reason, another link, or under another token.
        refusal(
            id,
            "link_expired",
            &proof(&key, id, RefusalReason::UnsupportedLink),
        ),
        refusal(
            id,
            "unsupported_link",
            &proof(&key, &other.session_id, RefusalReason::UnsupportedLink),
        ),
        refusal(
            id,
            "unsupported_link",
            &proof(&wrong_key, id, RefusalReason::UnsupportedLink),
        ),
        // No such pending link.
        refusal(
            "AAAAAAAAAAAAAAAA",
            "unsupported_link",
            &proof(&key, "AAAAAAAAAAAAAAAA", RefusalReason::UnsupportedLink),
        ),
        // Malformed frames.
        json!({"type": "link_refused", "session_id": id, "reason": "bored",
               "proof": proof(&key, id, RefusalReason::UnsupportedLink)}),
        json!({"type": "link_refused", "session_id": id, "reason": "unsupported_link", "proof": token}),
        json!({"type": "link_refused", "session_id": id, "reason": "unsupported_link"}),
    ];
    // Five is the burn limit of failed claims; refusals must not count towards it.
    for case in cases {
        let mut app = h.connect(Transport::Native);
        app.send_text(case.to_string()).await.unwrap();
        assert_closed(&mut app, 1008, "invalid_refusal").await;
    }
    settle().await;
    assert!(
        h.drain_events().is_empty(),
        "an invalid refusal emits nothing"
    );
    assert!(pending_details(&h, id).get("refused").is_none());

    // A refusal is a first frame only: after the ack it is an unknown type.
    let mut claimed = h.connect(Transport::Native);
    claimed
        .send_text(claim_frame(id, &token, None).to_string())
        .await
        .unwrap();
    assert_eq!(expect_text(&mut claimed).await["type"], "session_ack");
    let late = refusal(
        id,
        "unsupported_link",
        &proof(&key, id, RefusalReason::UnsupportedLink),
    );
    claimed.send_text(late.to_string()).await.unwrap();
    assert_closed(&mut claimed, 1008, "unknown_message_type").await;

    // A claimed session cannot be refused either.
    let mut after = h.connect(Transport::Native);
    after.send_text(late.to_string()).await.unwrap();
    assert_closed(&mut after, 1008, "invalid_refusal").await;
    settle().await;
    assert!(
        !h.drain_events()
            .iter()
            .any(|e| e.kind() == EventKind::LinkRefused)
    );
}

#[tokio::test(start_paused = true)]
async fn the_registry_is_pending_from_the_claim_until_the_first_snapshot() {
    let mut h = Harness::new();
    let c = h.claim(Some("Pixel 8")).await;
    let id = c.session_id.clone();
    assert_eq!(
        h.mgr.describe(Some(&id)).unwrap().registry,
        RegistryState::Pending
    );
    assert_eq!(h.mgr.list()[0].registry, RegistryState::Pending);
    let wire = serde_json::to_value(h.mgr.describe(Some(&id)).unwrap()).unwrap();
    assert_eq!(wire["registry"], "pending");

    // A delta before any snapshot does not make the registry "received".
    let tool = json!({"name": "ping", "description": "Ping", "input_schema": {"type": "object"}});
    c.app
        .send_text(
            json!({"type": "tool_registry_delta", "session_id": id, "operation": "upsert", "tool": tool})
                .to_string(),
        )
        .await
        .unwrap();
    h.event_of(EventKind::ToolsChanged).await;
    assert_eq!(
        h.mgr.describe(Some(&id)).unwrap().registry,
        RegistryState::Pending
    );

    c.app
        .send_text(
            json!({"type": "tool_registry_snapshot", "session_id": id, "tools": [tool]})
                .to_string(),
        )
        .await
        .unwrap();
    let changed = h.event_of(EventKind::ToolsChanged).await;
    assert!(matches!(changed.data, EventData::ToolsChanged(_)));
    let summary = h.mgr.describe(Some(&id)).unwrap();
    assert_eq!(summary.registry, RegistryState::Received);
    assert_eq!(summary.tool_count, 1);

    // It stays received across a resume (the registry is kept).
    drop(c.app);
    h.event_of(EventKind::SessionSuspended).await;
    let (_app, ack) = h.resume(Transport::Native, &id, &c.resume_token).await;
    assert_eq!(ack["type"], "session_ack");
    assert_eq!(
        h.mgr.describe(Some(&id)).unwrap().registry,
        RegistryState::Received
    );
}
