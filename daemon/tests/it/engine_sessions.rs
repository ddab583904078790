//! Session state machine (§D9.2): one test per transition T1–T18, plus claim/resume details,
//! aliases, and the control-plane queries (§C6, §C8.5–§C8.7).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::engine_support;

use std::sync::Arc;
use std::time::Duration;

use appduct_daemon::device_socket::AppEvent;
use appduct_daemon::sessions::{CallsEnded, ResolvedSession, format_timestamp_ms};
use appduct_protocol::control::{
    EventData, EventKind, PreviousState, RevokedKind, SessionState, SuspendReason, Transport,
};
use appduct_protocol::errors::ErrorType;
use engine_support::*;
use serde_json::json;
use tokio::time::advance;

const TTL: Duration = Duration::from_secs(300);

// ---- T1: link.create ------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn t1_link_create_makes_a_pending_link_and_emits_link_created() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({}));
    assert_eq!(h.mgr.pending_links(), 1);
    assert_eq!(h.mgr.session_count(), 0);
    assert!(h.mgr.list().is_empty(), "pending links are never listed");
    let e = h.next_event().await;
    assert_eq!(
        serde_json::to_value(&e).unwrap(),
        json!({"kind": "link_created", "sessionId": link.session_id, "ts": START_MS, "seq": 0,
               "data": {"expiresAt": START_MS / 1000 + 300, "transport": "native"}})
    );
    let text = serde_json::to_string(&e).unwrap();
    assert!(!text.contains(&token) && !text.contains(&link.deep_link_payload));
}

// ---- T2: claim ------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn t2_valid_claim_acks_and_emits_session_claimed() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({}));
    let guard = Arc::new(());
    let mut app = h.connect_with_guard(Transport::Native, Arc::clone(&guard));
    app.send_text(claim_frame(&link.session_id, &token, Some("Pixel 8")).to_string())
        .await
        .unwrap();
    let ack = expect_text(&mut app).await;
    let resume_token = ack["resume_token"].as_str().unwrap();
    assert_eq!(resume_token.len(), 43);
    assert_eq!(
        ack,
        json!({"type": "session_ack", "session_id": link.session_id, "status": "ok", "alias": "pixel-8",
               "resume_token": resume_token, "keepalive_interval_s": 15, "grace_s": 600, "event_registry": true,
               "result_content": true, "result_parts_max_bytes": 16_777_216})
    );
    h.event_of(EventKind::LinkCreated).await;
    let claimed = h.next_event().await;
    assert_eq!(
        serde_json::to_value(&claimed).unwrap(),
        json!({"kind": "session_claimed", "sessionId": link.session_id, "alias": "pixel-8", "ts": START_MS,
               "seq": 0, "data": {"device": {"manufacturer": "Google", "model": "Pixel 8", "os": "Android 15"},
                                   "transport": "native"}})
    );
    assert!(
        !serde_json::to_string(&claimed)
            .unwrap()
            .contains(resume_token)
    );
    settle().await;
    assert_eq!(
        Arc::strong_count(&guard),
        1,
        "the pre-claim slot is released after the claim"
    );
    assert_eq!(h.mgr.pending_links(), 0, "the link is consumed");
    assert_eq!(h.mgr.session_count(), 1);
    assert!(
        h.bus.has_session(&link.session_id),
        "the ring buffer exists from the claim"
    );
}

#[tokio::test(start_paused = true)]
async fn t2_claim_tokens_are_single_use() {
    let h = Harness::new();
    let (link, token) = h.link(json!({}));
    let mut first = h.connect(Transport::Native);
    first
        .send_text(claim_frame(&link.session_id, &token, None).to_string())
        .await
        .unwrap();
    assert_eq!(expect_text(&mut first).await["type"], "session_ack");
    let mut second = h.connect(Transport::Native);
    second
        .send_text(claim_frame(&link.session_id, &token, None).to_string())
        .await
        .unwrap();
    // T15: the id is now a live session.
    assert_closed(&mut second, 1008, "already_claimed").await;
}

// ---- T3, T4: wrong claim tokens -------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn t3_wrong_token_closes_invalid_token_and_leaves_the_link_claimable() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({}));
    for bad in ["AAAA", "not base64!", &"A".repeat(43)] {
        let mut app = h.connect(Transport::Native);
        app.send_text(claim_frame(&link.session_id, bad, None).to_string())
            .await
            .unwrap();
        assert_closed(&mut app, 1008, "invalid_token").await;
    }
    assert_eq!(h.mgr.pending_links(), 1);
    let mut app = h.connect(Transport::Native);
    app.send_text(claim_frame(&link.session_id, &token, None).to_string())
        .await
        .unwrap();
    assert_eq!(expect_text(&mut app).await["type"], "session_ack");
    let kinds: Vec<EventKind> = h.drain_events().iter().map(|e| e.kind()).collect();
    // The two tokens that are not unpadded base64url are reported (`device_refused`, §C13.1);
    // the well-encoded wrong one is named by its close alone. No state changed.
    assert_eq!(
        kinds,
        [
            EventKind::LinkCreated,
            EventKind::DeviceRefused,
            EventKind::DeviceRefused,
            EventKind::SessionClaimed
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn t4_fifth_failed_claim_burns_the_link() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({}));
    for attempt in 1..=5 {
        let mut app = h.connect(Transport::Native);
        app.send_text(claim_frame(&link.session_id, "wrong", None).to_string())
            .await
            .unwrap();
        let want = if attempt < 5 {
            "invalid_token"
        } else {
            "claim_attempts_exceeded"
        };
        assert_closed(&mut app, 1008, want).await;
    }
    assert_eq!(h.mgr.pending_links(), 0);
    let mut app = h.connect(Transport::Native);
    app.send_text(claim_frame(&link.session_id, &token, None).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "unknown_session").await;
    // Burning emits nothing and leaves no tombstone behind. ("wrong" is not unpadded
    // base64url, so each `invalid_token` is reported; `claim_attempts_exceeded` is not.)
    let kinds: Vec<EventKind> = h.drain_events().iter().map(|e| e.kind()).collect();
    assert_eq!(
        kinds,
        [
            EventKind::LinkCreated,
            EventKind::DeviceRefused,
            EventKind::DeviceRefused,
            EventKind::DeviceRefused,
            EventKind::DeviceRefused
        ]
    );
    advance(TTL * 3).await;
    settle().await;
    assert!(
        h.drain_events().is_empty(),
        "no link_expired for a burned link"
    );
}

// ---- T5: wrong transport --------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn t5_claim_on_the_other_listener_is_not_counted() {
    let h = Harness::new();
    let (link, token) = h.link(json!({}));
    // Four failures, then wrong-transport claims (even with the right token) do not add a fifth.
    for _ in 0..4 {
        let mut app = h.connect(Transport::Native);
        app.send_text(claim_frame(&link.session_id, "wrong", None).to_string())
            .await
            .unwrap();
        assert_closed(&mut app, 1008, "invalid_token").await;
    }
    for t in ["wrong", token.as_str(), "wrong"] {
        let mut app = h.connect(Transport::Web);
        app.send_text(claim_frame(&link.session_id, t, None).to_string())
            .await
            .unwrap();
        assert_closed(&mut app, 1008, "wrong_transport").await;
    }
    let mut app = h.connect(Transport::Native);
    app.send_text(claim_frame(&link.session_id, &token, None).to_string())
        .await
        .unwrap();
    assert_eq!(expect_text(&mut app).await["type"], "session_ack");
}

#[tokio::test(start_paused = true)]
async fn t5_web_links_are_claimable_only_on_the_web_listener() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({"transport": "web"}));
    assert_eq!(link.endpoint.address, "127.0.0.1");
    let mut app = h.connect(Transport::Native);
    app.send_text(claim_frame(&link.session_id, &token, None).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "wrong_transport").await;
    let mut app = h.connect(Transport::Web);
    app.send_text(claim_frame(&link.session_id, &token, None).to_string())
        .await
        .unwrap();
    assert_eq!(expect_text(&mut app).await["type"], "session_ack");
    let claimed = h.event_of(EventKind::SessionClaimed).await;
    assert!(matches!(
        claimed.data,
        EventData::SessionClaimed(ref d) if d.transport == Transport::Web
    ));
    assert_eq!(h.mgr.list()[0].transport, Transport::Web);
}

// ---- T6, T7, T8: expiry, tombstone, forgotten -----------------------------------------------

#[tokio::test(start_paused = true)]
async fn t6_t7_t8_ttl_tombstone_then_forgotten() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({"ttlSeconds": 60}));
    h.event_of(EventKind::LinkCreated).await;
    let start = tokio::time::Instant::now();
    // T6: link_expired exactly at the wall-clock `expiresAt`: floor(mint second) + TTL.
    let expired = h.next_event().await;
    assert_eq!(expired.kind(), EventKind::LinkExpired);
    assert_eq!(
        expired.session_id.as_deref(),
        Some(link.session_id.as_str())
    );
    assert_eq!(serde_json::to_value(&expired).unwrap()["data"], json!({}));
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(link.expires_at * 1000 - START_MS)
    );
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(60_000 - START_MS % 1000)
    );
    assert_eq!(h.mgr.pending_links(), 0, "expired links are not pending");
    // T7: a claim on the tombstone.
    let mut app = h.connect(Transport::Native);
    app.send_text(claim_frame(&link.session_id, &token, None).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "link_expired").await;
    // T8: after one more TTL the id is forgotten.
    advance(Duration::from_secs(60)).await;
    settle().await;
    let mut app = h.connect(Transport::Native);
    app.send_text(claim_frame(&link.session_id, &token, None).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "unknown_session").await;
    assert!(h.drain_events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_claimed_link_never_expires() {
    let mut h = Harness::new();
    let c = h.claim(Some("Pixel 8")).await;
    // Keep the socket alive past the TTL by answering pings.
    let mut app = c.app;
    for _ in 0..25 {
        match tokio::time::timeout(WAIT, app.recv()).await.unwrap() {
            AppEvent::Ping(p) => app.pong(p).await.unwrap(),
            other => panic!("{other:?}"),
        }
    }
    let kinds: Vec<EventKind> = h.drain_events().iter().map(|e| e.kind()).collect();
    assert!(!kinds.contains(&EventKind::LinkExpired), "{kinds:?}");
    assert_eq!(h.mgr.list()[0].state, SessionState::Active);
}

// ---- T9: revoke a pending link --------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn t9_revoking_a_pending_link_by_id() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({}));
    h.event_of(EventKind::LinkCreated).await;
    // Never reached without an explicit selector.
    let err = h.mgr.revoke(None).unwrap_err();
    assert_eq!(err.error_type(), ErrorType::NoSession);
    let r = h.mgr.revoke(Some(&link.session_id)).unwrap();
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        json!({"ok": true, "sessionId": link.session_id, "alias": null, "revoked": "link"})
    );
    assert_eq!(r.revoked, RevokedKind::Link);
    let e = h.next_event().await;
    assert_eq!(
        serde_json::to_value(&e).unwrap(),
        json!({"kind": "session_revoked", "sessionId": link.session_id, "ts": START_MS, "seq": 0,
               "data": {"previousState": "pending"}})
    );
    assert_eq!(h.mgr.pending_links(), 0);
    let mut app = h.connect(Transport::Native);
    app.send_text(claim_frame(&link.session_id, &token, None).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "unknown_session").await;
    // The TTL timer is gone with the link.
    advance(TTL * 3).await;
    settle().await;
    assert!(h.drain_events().is_empty());
}

// ---- T10: suspension ------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn t10_socket_loss_suspends_with_connection_lost() {
    let mut h = Harness::new();
    let mut c = h.claim(Some("Pixel 8")).await;
    h.clock.advance(Duration::from_millis(2500));
    c.app.drop_connection();
    let e = h.event_of(EventKind::SessionSuspended).await;
    assert_eq!(
        serde_json::to_value(&e).unwrap(),
        json!({"kind": "session_suspended", "sessionId": c.session_id, "alias": "pixel-8",
               "ts": START_MS + 2500, "seq": 0, "data": {"reason": "connection_lost"}})
    );
    let s = &h.mgr.list()[0];
    assert_eq!(s.state, SessionState::Suspended);
    assert_eq!(s.suspend_reason, Some(SuspendReason::ConnectionLost));
    assert_eq!(
        s.suspended_at.as_deref(),
        Some(format_timestamp_ms(START_MS + 2500).as_str())
    );
    assert!(h.router.take().contains(&RouterCall::Ended(
        c.session_id.clone(),
        CallsEnded::Suspended(SuspendReason::ConnectionLost)
    )));
}

#[tokio::test(start_paused = true)]
async fn t10_app_close_1001_app_backgrounded_suspends_app_backgrounded() {
    let mut h = Harness::new();
    let mut c = h.claim(Some("Pixel 8")).await;
    c.app.close(Some(1001), "app_backgrounded").await.unwrap();
    let e = h.event_of(EventKind::SessionSuspended).await;
    assert!(matches!(
        e.data,
        EventData::SessionSuspended(ref d) if d.reason == SuspendReason::AppBackgrounded
    ));
    let r = h.mgr.resolve(None).unwrap();
    assert_eq!(r.suspend_reason, Some(SuspendReason::AppBackgrounded));
}

#[tokio::test(start_paused = true)]
async fn t10_other_app_closes_suspend_connection_lost() {
    for (code, reason) in [
        (Some(1000), ""),
        (Some(1001), "other"),
        (Some(4000), "app_backgrounded"),
        (None, ""),
    ] {
        let mut h = Harness::new();
        let mut c = h.claim(None).await;
        c.app.close(code, reason).await.unwrap();
        let e = h.event_of(EventKind::SessionSuspended).await;
        assert!(
            matches!(e.data, EventData::SessionSuspended(ref d) if d.reason == SuspendReason::ConnectionLost),
            "{code:?} {reason}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn t10_write_failure_suspends() {
    use appduct_daemon::device_socket::{ConnectionEnd, Incoming};
    let mut h = Harness::new();
    let c = h.claim(None).await;
    c.app
        .inject(Incoming::Ended(ConnectionEnd::WriteFailed(
            "broken pipe".into(),
        )))
        .await
        .unwrap();
    let e = h.event_of(EventKind::SessionSuspended).await;
    assert!(matches!(
        e.data,
        EventData::SessionSuspended(ref d) if d.reason == SuspendReason::ConnectionLost
    ));
}

#[tokio::test(start_paused = true)]
async fn t10_registry_and_buffer_survive_suspension() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    let sid = c.session_id.clone();
    c.app
        .send_text(
            json!({"type": "tool_registry_snapshot", "session_id": sid,
                          "tools": [{"name": "t", "description": "d"}]})
            .to_string(),
        )
        .await
        .unwrap();
    c.app
        .send_text(json!({"type": "event", "session_id": sid, "name": "e", "ts": 1}).to_string())
        .await
        .unwrap();
    h.event_of(EventKind::AppEvent).await;
    c.app.drop_connection();
    h.event_of(EventKind::SessionSuspended).await;
    assert_eq!(h.mgr.tools_of(&sid).unwrap().len(), 1);
    assert_eq!(h.mgr.list()[0].tool_count, 1);
    assert_eq!(h.bus.high_water_mark(&sid), Some(1));
}

// ---- T11, T12: resume -----------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn t11_resume_over_an_open_socket_replaces_it() {
    let mut h = Harness::new();
    let mut c = h.claim(Some("Pixel 8")).await;
    h.router.take();
    let (new_app, ack) = h
        .resume(Transport::Native, &c.session_id, &c.resume_token)
        .await;
    assert_eq!(ack["type"], "session_ack");
    assert_eq!(ack["alias"], "pixel-8", "a resume keeps the alias");
    assert_ne!(
        ack["resume_token"],
        c.resume_token.as_str(),
        "token rotated"
    );
    assert_closed(&mut c.app, 1000, "session_replaced").await;
    let e = h.next_event().await;
    assert!(matches!(
        e.data,
        EventData::SessionResumed(ref d) if d.replaced_socket
    ));
    assert_eq!(
        h.router.take(),
        [RouterCall::Ended(
            c.session_id.clone(),
            CallsEnded::Replaced
        )]
    );
    // The old socket's end never suspends the session: no session_suspended for T11.
    c.app.drop_connection();
    settle().await;
    assert!(h.drain_events().is_empty());
    assert_eq!(h.mgr.list()[0].state, SessionState::Active);
    // Frames on the new socket are applied.
    new_app
        .send_text(
            json!({"type": "event", "session_id": c.session_id, "name": "e", "ts": 1}).to_string(),
        )
        .await
        .unwrap();
    assert_eq!(h.event_of(EventKind::AppEvent).await.seq, 1);
}

#[tokio::test(start_paused = true)]
async fn t11_frames_from_the_replaced_socket_are_dropped() {
    let mut h = Harness::new();
    let c = h.claim(None).await;
    let (_new_app, _) = h
        .resume(Transport::Native, &c.session_id, &c.resume_token)
        .await;
    // The old app races a frame in before reading its close.
    let _ = c
        .app
        .send_text(
            json!({"type": "event", "session_id": c.session_id, "name": "late", "ts": 1})
                .to_string(),
        )
        .await;
    settle().await;
    advance(Duration::from_secs(2)).await;
    settle().await;
    let kinds: Vec<EventKind> = h.drain_events().iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, [EventKind::SessionResumed]);
    assert_eq!(h.bus.high_water_mark(&c.session_id), Some(0));
}

/// A tool upsert without `testCases`, for `registry.require: ["testCases"]` (§D18.5).
fn undeclared_upsert(session_id: &str) -> String {
    json!({"type": "tool_registry_delta", "session_id": session_id, "operation": "upsert",
           "tool": {"name": "bare", "description": "No test cases."}})
    .to_string()
}

/// The guard on the delta path (a stale connection's frame is dropped before the guard: the
/// unit test in sessions/transitions.rs, which can reach that ordering deterministically).
#[tokio::test(start_paused = true)]
async fn t11_the_registry_guard_refuses_the_holding_connections_upsert() {
    let mut h = Harness::new();
    h.mgr.set_registry_require(vec!["testCases"]);
    let mut c = h.claim(None).await;
    c.app
        .send_text(undeclared_upsert(&c.session_id))
        .await
        .unwrap();
    assert_closed(&mut c.app, 1008, "invalid_registry").await;
    let refused = h.event_of(EventKind::DeviceRefused).await;
    let text = serde_json::to_string(&refused).unwrap();
    assert!(
        text.contains("testCases") && text.contains("bare"),
        "{text}"
    );
    assert!(h.mgr.tool_of(&c.session_id, "bare").is_none());
}

#[tokio::test(start_paused = true)]
async fn t12_resume_after_suspension_clears_the_grace_timer() {
    let mut h = Harness::new();
    let mut c = h.claim(Some("Pixel 8")).await;
    c.app.drop_connection();
    h.event_of(EventKind::SessionSuspended).await;
    advance(Duration::from_secs(599)).await;
    let (mut app, ack) = h
        .resume(Transport::Native, &c.session_id, &c.resume_token)
        .await;
    assert_eq!(ack["type"], "session_ack");
    let e = h.event_of(EventKind::SessionResumed).await;
    assert!(matches!(
        e.data,
        EventData::SessionResumed(ref d) if !d.replaced_socket
    ));
    let s = &h.mgr.list()[0];
    assert_eq!(s.state, SessionState::Active);
    assert_eq!(s.suspend_reason, None);
    assert_eq!(s.suspended_at, None);
    // Well past the old grace deadline the session is still here (pongs keep it alive).
    for _ in 0..6 {
        match next_including_pings(&mut app).await {
            AppEvent::Ping(p) => app.pong(p).await.unwrap(),
            other => panic!("{other:?}"),
        }
    }
    let kinds: Vec<EventKind> = h.drain_events().iter().map(|e| e.kind()).collect();
    assert!(!kinds.contains(&EventKind::SessionExpired), "{kinds:?}");
    assert_eq!(h.mgr.session_count(), 1);
}

async fn next_including_pings(app: &mut appduct_daemon::device_socket::MemoryApp) -> AppEvent {
    tokio::time::timeout(WAIT, app.recv()).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn resume_rotates_the_token_and_the_old_one_stops_working() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    c.app.drop_connection();
    h.event_of(EventKind::SessionSuspended).await;
    let (mut app, ack) = h
        .resume(Transport::Native, &c.session_id, &c.resume_token)
        .await;
    let fresh = ack["resume_token"].as_str().unwrap().to_owned();
    assert_ne!(fresh, c.resume_token);
    app.drop_connection();
    h.event_of(EventKind::SessionSuspended).await;
    let mut stale = h.connect(Transport::Native);
    stale
        .send_text(resume_frame(&c.session_id, &c.resume_token).to_string())
        .await
        .unwrap();
    assert_closed(&mut stale, 1008, "invalid_resume_token").await;
    let (_app, ack) = h.resume(Transport::Native, &c.session_id, &fresh).await;
    assert_eq!(ack["type"], "session_ack");
}

// ---- T13, T14, T15 --------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn t13_wrong_resume_token_leaves_the_session_unchanged() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    for bad in ["nope", &"A".repeat(43)] {
        let mut app = h.connect(Transport::Native);
        app.send_text(resume_frame(&c.session_id, bad).to_string())
            .await
            .unwrap();
        assert_closed(&mut app, 1008, "invalid_resume_token").await;
    }
    assert_eq!(h.mgr.list()[0].state, SessionState::Active);
    assert_eq!(c.app.try_recv(), None, "the open socket is untouched");
    // While suspended too, and there is no attempt counter.
    c.app.drop_connection();
    h.event_of(EventKind::SessionSuspended).await;
    for _ in 0..10 {
        let mut app = h.connect(Transport::Native);
        app.send_text(resume_frame(&c.session_id, "nope").to_string())
            .await
            .unwrap();
        assert_closed(&mut app, 1008, "invalid_resume_token").await;
    }
    let (_app, ack) = h
        .resume(Transport::Native, &c.session_id, &c.resume_token)
        .await;
    assert_eq!(ack["type"], "session_ack");
}

#[tokio::test(start_paused = true)]
async fn t14_resume_on_the_other_listener_keeps_the_token() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    c.app.drop_connection();
    h.event_of(EventKind::SessionSuspended).await;
    let mut app = h.connect(Transport::Web);
    app.send_text(resume_frame(&c.session_id, &c.resume_token).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "wrong_transport").await;
    let (_app, ack) = h
        .resume(Transport::Native, &c.session_id, &c.resume_token)
        .await;
    assert_eq!(ack["type"], "session_ack", "the token was not rotated");
}

#[tokio::test(start_paused = true)]
async fn t15_claim_naming_a_live_session_is_already_claimed() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    let mut app = h.connect(Transport::Native);
    app.send_text(claim_frame(&c.session_id, "whatever", None).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "already_claimed").await;
    c.app.drop_connection();
    h.event_of(EventKind::SessionSuspended).await;
    let mut app = h.connect(Transport::Web);
    app.send_text(claim_frame(&c.session_id, "whatever", None).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "already_claimed").await;
}

#[tokio::test(start_paused = true)]
async fn resume_of_unknown_or_pending_ids_is_unknown_session() {
    let h = Harness::new();
    let (link, _) = h.link(json!({}));
    for id in [link.session_id.as_str(), "AAAAAAAAAAAAAAAA"] {
        let mut app = h.connect(Transport::Native);
        app.send_text(resume_frame(id, &"A".repeat(43)).to_string())
            .await
            .unwrap();
        assert_closed(&mut app, 1008, "unknown_session").await;
    }
    assert_eq!(
        h.mgr.pending_links(),
        1,
        "a resume attempt does not touch the link"
    );
}

// ---- T16: grace expiry ----------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn t16_grace_elapsed_expires_the_session() {
    let mut h = Harness::new();
    let mut c = h.claim(Some("Pixel 8")).await;
    let sid = c.session_id.clone();
    c.app.drop_connection();
    h.event_of(EventKind::SessionSuspended).await;
    h.router.take();
    let start = tokio::time::Instant::now();
    let e = h.next_event().await;
    assert_eq!(start.elapsed(), Duration::from_secs(600));
    assert_eq!(
        serde_json::to_value(&e).unwrap(),
        json!({"kind": "session_expired", "sessionId": sid, "alias": "pixel-8", "ts": START_MS,
               "seq": 0, "data": {}})
    );
    assert_eq!(h.mgr.session_count(), 0);
    assert!(!h.bus.has_session(&sid), "buffer dropped");
    assert_eq!(
        h.router.take(),
        [RouterCall::Ended(sid.clone(), CallsEnded::Expired)]
    );
    assert_eq!(
        h.mgr.resolve(Some(&sid)).unwrap_err().error_type(),
        ErrorType::UnknownSession
    );
    let mut app = h.connect(Transport::Native);
    app.send_text(resume_frame(&sid, &c.resume_token).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "unknown_session").await;
    // The alias is free again.
    assert_eq!(h.claim(Some("Pixel 8")).await.alias, "pixel-8");
}

// ---- T17: revoke a live session -------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn t17_revoke_an_active_session() {
    let mut h = Harness::new();
    let mut c = h.claim(Some("Pixel 8")).await;
    let sid = c.session_id.clone();
    h.router.take();
    let r = h.mgr.revoke(Some("pixel-8")).unwrap();
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        json!({"ok": true, "sessionId": sid, "alias": "pixel-8", "revoked": "session"})
    );
    assert_closed(&mut c.app, 1000, "revoked").await;
    let e = h.next_event().await;
    assert_eq!(
        serde_json::to_value(&e).unwrap(),
        json!({"kind": "session_revoked", "sessionId": sid, "alias": "pixel-8", "ts": START_MS,
               "seq": 0, "data": {"previousState": "active"}})
    );
    assert_eq!(
        h.router.take(),
        [RouterCall::Ended(sid.clone(), CallsEnded::Revoked)]
    );
    assert_eq!(h.mgr.session_count(), 0);
    assert!(!h.bus.has_session(&sid));
    // The closed socket's end emits nothing more; the daemon drops it within the close wait.
    assert_eq!(next(&mut c.app).await, AppEvent::Gone);
    settle().await;
    assert!(h.drain_events().is_empty());
    assert_eq!(h.mgr.connection_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn t17_revoke_a_suspended_session_stops_its_grace_timer() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    c.app.drop_connection();
    h.event_of(EventKind::SessionSuspended).await;
    let r = h.mgr.revoke(None).unwrap();
    assert_eq!(r.session_id, c.session_id);
    let e = h.next_event().await;
    assert!(matches!(
        e.data,
        EventData::SessionRevoked(ref d) if d.previous_state == PreviousState::Suspended
    ));
    advance(Duration::from_secs(3600)).await;
    settle().await;
    assert!(
        h.drain_events().is_empty(),
        "no session_expired after a revoke"
    );
    let err = h.mgr.revoke(Some(&c.session_id)).unwrap_err();
    assert_eq!(err.error_type(), ErrorType::UnknownSession);
}

// ---- T18: shutdown --------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn t18_shutdown_closes_every_socket_with_1001_and_drops_all_state() {
    let mut h = Harness::new();
    let mut a = h.claim(Some("Pixel 8")).await;
    let mut b = h.claim(Some("Pixel 8")).await;
    b.app.drop_connection();
    h.event_of(EventKind::SessionSuspended).await;
    let mut c = h.claim(Some("iPhone")).await;
    let _pending = h.link(json!({}));
    let mut preclaim = h.connect(Transport::Native);
    settle().await;
    h.drain_events();
    h.router.take();
    let start = tokio::time::Instant::now();
    h.mgr.shutdown().await;
    assert!(
        start.elapsed() <= Duration::from_secs(1),
        "waits at most 1 s"
    );
    for app in [&mut a.app, &mut c.app, &mut preclaim] {
        assert_closed(app, 1001, "daemon_shutdown").await;
    }
    assert_eq!(h.mgr.session_count(), 0);
    assert_eq!(h.mgr.pending_links(), 0);
    assert!(h.mgr.list().is_empty());
    let mut ended: Vec<_> = h.router.take();
    ended.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(ended.len(), 3);
    assert!(
        ended
            .iter()
            .all(|c| matches!(c, RouterCall::Ended(_, CallsEnded::Shutdown)))
    );
    // No events, no timers left: nothing happens however long we wait.
    advance(Duration::from_secs(7200)).await;
    settle().await;
    assert!(h.drain_events().is_empty());
    // New connections and links are refused.
    let mut late = h.connect(Transport::Native);
    assert_closed(&mut late, 1001, "daemon_shutdown").await;
    let params = appduct_protocol::control::LinkCreateParams::default();
    assert!(h.mgr.create_link(&params).is_err());
    assert!(h.mgr.is_shutting_down());
}

#[tokio::test(start_paused = true)]
async fn t18_shutdown_terminates_peers_that_never_finish_the_close() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    h.mgr.shutdown().await;
    assert_closed(&mut c.app, 1001, "daemon_shutdown").await;
    settle().await;
    assert!(matches!(
        next(&mut c.app).await,
        AppEvent::Gone | AppEvent::Terminated
    ));
    assert_eq!(h.mgr.connection_count(), 0);
}

// ---- aliases --------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn aliases_collide_with_suffixes_and_are_reused_after_revoke() {
    let mut h = Harness::new();
    let a = h.claim(Some("Pixel 8")).await;
    let b = h.claim(Some("Pixel 8")).await;
    let c = h.claim(Some("Pixel 8")).await;
    assert_eq!(
        [a.alias.as_str(), b.alias.as_str(), c.alias.as_str()],
        ["pixel-8", "pixel-8-2", "pixel-8-3"]
    );
    h.mgr.revoke(Some("pixel-8")).unwrap();
    let d = h.claim(Some("Pixel 8")).await;
    assert_eq!(d.alias, "pixel-8");
    let e = h.claim(None).await;
    assert_eq!(e.alias, "device");
    // A resume keeps the alias even though a newer session could have taken it.
    let (_app, ack) = h
        .resume(Transport::Native, &b.session_id, &b.resume_token)
        .await;
    assert_eq!(ack["alias"], "pixel-8-2");
}

// ---- queries --------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn list_is_ordered_by_created_at_then_id_and_summaries_match_03_8_2() {
    let h = Harness::new();
    // Links minted in one order, claimed in the other: createdAt is the mint time.
    let (l1, t1) = h.link(json!({}));
    h.clock.advance(Duration::from_millis(10));
    let (l2, t2) = h.link(json!({}));
    h.clock.advance(Duration::from_millis(10));
    let mut second = h.connect(Transport::Native);
    second
        .send_text(claim_frame(&l2.session_id, &t2, Some("Galaxy S24")).to_string())
        .await
        .unwrap();
    expect_text(&mut second).await;
    h.clock.advance(Duration::from_millis(10));
    let mut first = h.connect(Transport::Native);
    first
        .send_text(claim_frame(&l1.session_id, &t1, Some("Pixel 8")).to_string())
        .await
        .unwrap();
    expect_text(&mut first).await;
    let list = h.mgr.list();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].session_id, l1.session_id);
    assert_eq!(
        serde_json::to_value(&list[0]).unwrap(),
        json!({"sessionId": l1.session_id, "alias": "pixel-8", "state": "active", "transport": "native",
               "device": {"manufacturer": "Google", "model": "Pixel 8", "os": "Android 15"},
               "createdAt": format_timestamp_ms(START_MS), "claimedAt": format_timestamp_ms(START_MS + 30),
               "toolCount": 0, "eventCount": 0, "registry": "pending"})
    );
    assert_eq!(list[1].session_id, l2.session_id);
    assert_eq!(list[1].created_at, format_timestamp_ms(START_MS + 10));
    assert_eq!(h.mgr.describe(Some("galaxy-s24")).unwrap(), list[1]);
    assert_eq!(h.mgr.summary(&l1.session_id).unwrap(), list[0]);
}

#[test]
fn timestamps_are_iso_8601_utc_with_milliseconds() {
    assert_eq!(
        format_timestamp_ms(1_764_493_923_120),
        "2025-11-30T09:12:03.120Z"
    );
    assert_eq!(format_timestamp_ms(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(format_timestamp_ms(5), "1970-01-01T00:00:00.005Z");
}

#[tokio::test(start_paused = true)]
async fn selector_resolution_follows_03_7() {
    let mut h = Harness::new();
    assert_eq!(
        h.mgr.resolve(None).unwrap_err().error_type(),
        ErrorType::NoSession
    );
    let a = h.claim(Some("Pixel 8")).await;
    let only = h.mgr.resolve(None).unwrap();
    assert_eq!(
        only,
        ResolvedSession {
            session_id: a.session_id.clone(),
            alias: "pixel-8".into(),
            state: SessionState::Active,
            suspend_reason: None
        }
    );
    h.clock.advance(Duration::from_millis(1));
    let b = h.claim(Some("iPhone 15")).await;
    let err = h.mgr.resolve(None).unwrap_err();
    assert_eq!(err.error_type(), ErrorType::AmbiguousSession);
    assert_eq!(err.code, -32000);
    assert!(err.message.contains("pixel-8") && err.message.contains("iphone-15"));
    assert_eq!(
        err.details().unwrap(),
        &json!({"sessions": [{"sessionId": a.session_id, "alias": "pixel-8"},
                             {"sessionId": b.session_id, "alias": "iphone-15"}]})
    );
    // Id first, then alias; exact and case-sensitive.
    assert_eq!(
        h.mgr.resolve(Some(&b.session_id)).unwrap().alias,
        "iphone-15"
    );
    assert_eq!(
        h.mgr.resolve(Some("pixel-8")).unwrap().session_id,
        a.session_id
    );
    let err = h.mgr.resolve(Some("Pixel-8")).unwrap_err();
    assert_eq!(err.error_type(), ErrorType::UnknownSession);
    assert_eq!(err.details().unwrap(), &json!({"selector": "Pixel-8"}));
    // A pending link is named as such.
    let (link, _) = h.link(json!({}));
    let err = h.mgr.resolve(Some(&link.session_id)).unwrap_err();
    assert_eq!(err.error_type(), ErrorType::UnknownSession);
    assert_eq!(
        err.details().unwrap(),
        &json!({"selector": link.session_id, "pending": true, "transport": "native",
                "endpoint": {"address": "192.168.1.20", "port": 8443}})
    );
    assert!(err.message.contains("not been claimed"));
    // An empty selector is a parameter error.
    assert_eq!(h.mgr.resolve(Some("")).unwrap_err().code, -32602);
    assert_eq!(
        h.mgr.resolve(Some(&"x".repeat(129))).unwrap_err().code,
        -32602
    );
}
