//! Faults the engine must survive (§D6): peers that never read, internal panics, wall-clock
//! expiry, and frames racing a takeover. Paused tokio clock; waits are bounded, never sleeps to
//! synchronise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::engine_support;

use std::sync::Arc;
use std::time::Duration;

use appduct_daemon::clock::ManualClock;
use appduct_daemon::device_socket::{AppEvent, OUTGOING_QUEUE, from_websocket, websocket_config};
use appduct_daemon::events::EventBus;
use appduct_daemon::links::StaticLinkEnv;
use appduct_daemon::sessions::{
    CallFrame, CallRouter, CallsEnded, EngineOptions, SendFailure, SessionManager,
};
use appduct_protocol::control::{EventData, EventKind, SessionState, SuspendReason, Transport};
use appduct_protocol::frames::{DaemonFrame, ToolCall};
use engine_support::{
    Harness, START_MS, assert_closed, claim_frame, expect_text as next_text, next, settle,
};
use serde_json::json;
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::Role;

/// A masked empty ping, as a client would send it.
const PING: [u8; 6] = [0x89, 0x80, 0, 0, 0, 0];

fn bare_manager() -> SessionManager {
    let clock = ManualClock::new(START_MS);
    let bus = EventBus::new(Arc::new(clock.clone()), 16);
    SessionManager::new(
        EngineOptions::default(),
        bus,
        Arc::new(clock),
        Arc::new(StaticLinkEnv::default()),
    )
}

/// A real WebSocket adapter over a 64-byte pipe; the returned client end is never read.
async fn stalled_connection(mgr: &SessionManager) -> (tokio::task::JoinHandle<()>, DuplexStream) {
    let (server, client) = tokio::io::duplex(64);
    let ws = WebSocketStream::from_raw_socket(server, Role::Server, Some(websocket_config())).await;
    let task = mgr.spawn_connection(
        from_websocket(ws),
        Transport::Native,
        tokio::time::Instant::now() + Duration::from_secs(10),
        (),
    );
    (task, client)
}

/// §D6: "After sending a close frame the daemon waits at most 1 s for the peer's close, then
/// drops TCP." A peer that pings but never reads fills the daemon's write path; the pre-claim
/// timeout's close must still drop it one close wait later.
#[tokio::test(start_paused = true)]
async fn preclaim_peer_that_never_reads_is_dropped_after_the_close_wait() {
    let mgr = bare_manager();
    let (task, mut client) = stalled_connection(&mgr).await;
    let accepted = tokio::time::Instant::now();
    // The client never reads, so the daemon's pongs fill the pipe and block its writer.
    for _ in 0..40 {
        client.write_all(&PING).await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(mgr.connection_count(), 0);
    // Pre-claim timeout (10 s) plus at most the close wait (1 s) and the engine's own wait.
    let dropped = tokio::time::timeout(Duration::from_secs(60), async {
        while client.write_all(&PING).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        dropped.is_ok(),
        "the daemon still holds the connection after closing it"
    );
    let held = accepted.elapsed();
    assert!(held <= Duration::from_millis(12_100), "held for {held:?}");
}

/// Control for the test above: the probe also sees the drop when the writer is not blocked.
#[tokio::test(start_paused = true)]
async fn an_idle_preclaim_peer_is_dropped_at_the_timeout() {
    let mgr = bare_manager();
    let (task, mut client) = stalled_connection(&mgr).await;
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(client.write_all(&PING).await.is_err());
}

#[derive(Debug)]
struct PanickingRouter;

impl CallRouter for PanickingRouter {
    fn on_call_frame(&self, _: &str, _: CallFrame) {
        panic!("a bug in the calls module");
    }

    fn on_session_ended_calls(&self, _: &str, _: CallsEnded) {}
}

/// §D6 / SECURITY.md §4.8: an internal fault on one connection closes it `1011 internal_error` and is
/// treated as socket loss (T10); other sessions carry on.
#[tokio::test(start_paused = true)]
async fn a_panic_while_handling_a_frame_closes_1011_and_suspends_the_session() {
    let mut h = Harness::new();
    let mut other = h.claim(Some("Pixel 7")).await;
    let mut c = h.claim(Some("Pixel 8")).await;
    h.mgr.set_router(Arc::new(PanickingRouter));
    c.app
        .send_text(
            json!({"type": "tool_result", "session_id": c.session_id, "id": "call_x",
                   "result": 1})
            .to_string(),
        )
        .await
        .unwrap();
    assert_closed(&mut c.app, 1011, "internal_error").await;
    let e = h.event_of(EventKind::SessionSuspended).await;
    assert_eq!(e.session_id.as_deref(), Some(c.session_id.as_str()));
    assert!(
        matches!(e.data, EventData::SessionSuspended(ref d) if d.reason == SuspendReason::ConnectionLost),
        "{e:?}"
    );
    assert_eq!(
        h.mgr.summary(&c.session_id).map(|s| s.state),
        Some(SessionState::Suspended)
    );
    // The faulty connection is dropped; the other session is untouched.
    assert_eq!(next(&mut c.app).await, AppEvent::Gone);
    settle().await;
    assert_eq!(h.mgr.connection_count(), 1);
    assert_eq!(
        h.mgr.summary(&other.session_id).map(|s| s.state),
        Some(SessionState::Active)
    );
    other
        .app
        .send_text(
            json!({"type": "tool_registry_snapshot", "session_id": other.session_id, "tools": []})
                .to_string(),
        )
        .await
        .unwrap();
    h.event_of(EventKind::ToolsChanged).await;
    assert!(other.app.try_recv().is_none());
}

/// The suspended session resumes on a new socket as after any socket loss.
#[tokio::test(start_paused = true)]
async fn a_session_suspended_by_a_fault_resumes() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    h.mgr.set_router(Arc::new(PanickingRouter));
    c.app
        .send_text(
            json!({"type": "tool_error", "session_id": c.session_id, "id": "call_x",
                   "error": {"type": "tool_cancelled", "message": "no"}})
            .to_string(),
        )
        .await
        .unwrap();
    assert_closed(&mut c.app, 1011, "internal_error").await;
    h.event_of(EventKind::SessionSuspended).await;
    let (_app, ack) = h
        .resume(Transport::Native, &c.session_id, &c.resume_token)
        .await;
    assert_eq!(ack["type"], "session_ack");
    h.event_of(EventKind::SessionResumed).await;
}

/// §D9.2 T2 ("valid claim ... before expiry"), §D4.3 (expired when now_seconds >= expires_at),
/// §C8.1 (`pendingLinks` counts unexpired links): the wall clock decides, not only the
/// monotonic TTL timer, which stops while the host is suspended.
#[tokio::test(start_paused = true)]
async fn a_link_past_its_expires_at_is_neither_claimable_nor_pending() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({"ttlSeconds": 5}));
    h.event_of(EventKind::LinkCreated).await;
    assert_eq!(h.mgr.pending_links(), 1);
    // The wall clock is one hour past expiresAt; the monotonic clock did not move.
    h.clock.set(link.expires_at * 1000 + 3_600_000);
    assert_eq!(
        h.mgr.pending_links(),
        0,
        "an expired link still counts as pending"
    );
    let mut app = h.connect(Transport::Native);
    app.send_text(claim_frame(&link.session_id, &token, Some("Pixel 8")).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "link_expired").await;
    let expired = h.next_event().await;
    assert_eq!(expired.kind(), EventKind::LinkExpired);
    assert_eq!(
        expired.session_id.as_deref(),
        Some(link.session_id.as_str())
    );
    assert_eq!(h.mgr.session_count(), 0);
    // When the timer catches up it neither expires the link again nor loses the tombstone...
    tokio::time::advance(Duration::from_secs(5)).await;
    settle().await;
    assert!(h.drain_events().is_empty(), "link_expired is emitted once");
    let mut app = h.connect(Transport::Native);
    app.send_text(claim_frame(&link.session_id, &token, None).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "link_expired").await;
    // ...which is forgotten one TTL later (T8).
    tokio::time::advance(Duration::from_secs(5)).await;
    settle().await;
    let mut app = h.connect(Transport::Native);
    app.send_text(claim_frame(&link.session_id, &token, None).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "unknown_session").await;
}

/// The second before `expiresAt` still claims.
#[tokio::test(start_paused = true)]
async fn a_link_is_claimable_until_its_expires_at_second() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({"ttlSeconds": 5}));
    h.clock.set(link.expires_at * 1000 - 1);
    assert_eq!(h.mgr.pending_links(), 1);
    let mut app = h.connect(Transport::Native);
    app.send_text(claim_frame(&link.session_id, &token, None).to_string())
        .await
        .unwrap();
    assert_eq!(next_text(&mut app).await["type"], "session_ack");
    h.event_of(EventKind::SessionClaimed).await;
}

fn tool_call(session_id: &str, id: &str) -> DaemonFrame {
    DaemonFrame::ToolCall(ToolCall::new(
        session_id.to_owned(),
        id.to_owned(),
        "cart.add",
        serde_json::Map::new(),
    ))
}

/// Fills the session's outgoing queue (the app is not reading) and starts one more
/// `send_to_session`, which waits for room on the current socket.
async fn queue_full_with_a_waiting_call(
    h: &Harness,
    session_id: &str,
) -> tokio::task::JoinHandle<Result<(), SendFailure>> {
    for i in 0..OUTGOING_QUEUE {
        h.mgr
            .send_to_session(session_id, &tool_call(session_id, &format!("call_{i}")))
            .await
            .unwrap();
    }
    let mgr = h.mgr.clone();
    let sid = session_id.to_owned();
    let waiting =
        tokio::spawn(async move { mgr.send_to_session(&sid, &tool_call(&sid, "late")).await });
    settle().await;
    assert!(!waiting.is_finished(), "the queue was not full");
    waiting
}

/// The replaced socket sees the queued calls, then its close; the waiting call is refused.
async fn assert_calls_then_close(app: &mut appduct_daemon::device_socket::MemoryApp, reason: &str) {
    for i in 0..OUTGOING_QUEUE {
        match next(app).await {
            AppEvent::Text(text) => {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["id"], format!("call_{i}"));
            }
            other => panic!("expected call_{i}, got {other:?}"),
        }
    }
    assert_closed(app, 1000, reason).await;
}

/// T11: a frame still waiting for room on the old socket when a resume replaces it must not be
/// written to it before (or after) its `session_replaced` close.
#[tokio::test(start_paused = true)]
async fn t11_a_call_waiting_on_the_replaced_socket_is_not_written_to_it() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    let waiting = queue_full_with_a_waiting_call(&h, &c.session_id).await;
    let (mut new_app, ack) = h
        .resume(Transport::Native, &c.session_id, &c.resume_token)
        .await;
    assert_eq!(ack["type"], "session_ack");
    assert_calls_then_close(&mut c.app, "session_replaced").await;
    assert_eq!(waiting.await.unwrap(), Err(SendFailure::NotActive));
    assert!(
        new_app.try_recv().is_none(),
        "the late call is not moved over either"
    );
}

/// T17: a send already granted room on the socket when the revoke comes, but not yet run, is
/// refused: the revoke marks the socket under the engine lock, before the connection's own task
/// gets to queue its close.
#[tokio::test(start_paused = true)]
async fn t17_a_call_granted_room_just_before_a_revoke_is_not_written() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    let waiting = queue_full_with_a_waiting_call(&h, &c.session_id).await;
    // Without yielding: the app frees one slot (the waiting send is woken, not yet run), then
    // the session is revoked.
    assert!(matches!(c.app.try_recv(), Some(AppEvent::Text(_))));
    h.mgr.revoke(Some(&c.session_id)).unwrap();
    for i in 1..OUTGOING_QUEUE {
        match next(&mut c.app).await {
            AppEvent::Text(text) => {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["id"], format!("call_{i}"));
            }
            other => panic!("expected call_{i}, got {other:?}"),
        }
    }
    assert_closed(&mut c.app, 1000, "revoked").await;
    assert_eq!(waiting.await.unwrap(), Err(SendFailure::NotActive));
}
