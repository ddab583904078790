//! SEC-24 (SECURITY.md §4.11): after a full session lifecycle — a link, a refused claim, a claim, a
//! registry, a tool call, a dropped socket, a refused stale resume, a resume, a revoke and
//! shutdown — no claim token, resume token, bootstrap payload or deep link appears in the
//! daemon's log output (captured at TRACE, a superset of any `daemon.log`), `events.log`, the
//! audit files, bus notifications (in process and to a control subscriber), `sessions.list`
//! or `daemon.status`. Raw call arguments and the host key stay out of the same places
//! (SECURITY.md §4.10, SECURITY.md §4.11, SEC-45).
//!
//! This file holds one test, in a binary of its own: it installs a process-wide tracing
//! subscriber.

#![allow(clippy::unwrap_used, clippy::expect_used)]

// Shared with the `it` binary, which holds every other daemon test.
#[path = "it/daemon_support/mod.rs"]
mod daemon_support;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use appduct_client::delivery;
use appduct_daemon::device_socket::{AppEvent, memory_device_pair};
use appduct_protocol::bootstrap;
use appduct_protocol::control::{EventKind, LinkCreateResult, Transport};
use base64::Engine as _;
use daemon_support::*;
use serde_json::{Value, json};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};

/// Marker inside the call's arguments; only its hash may be stored.
const ARG_MARKER: &str = "raw-argument-marker-5e1f";

// ---- a tracing subscriber that keeps everything -----------------------------------------------

#[derive(Clone, Default)]
struct Capture {
    text: Arc<Mutex<String>>,
    next_span: Arc<AtomicU64>,
}

struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={value}", field.name());
    }
}

impl Subscriber for Capture {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::always()
    }

    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut text = self.text.lock().unwrap();
        let _ = write!(text, "span {}", span.metadata().name());
        span.record(&mut Fields(&mut text));
        text.push('\n');
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut text = self.text.lock().unwrap();
        values.record(&mut Fields(&mut text));
        text.push('\n');
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut text = self.text.lock().unwrap();
        let _ = write!(
            text,
            "{} {}",
            event.metadata().level(),
            event.metadata().target()
        );
        event.record(&mut Fields(&mut text));
        text.push('\n');
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

// ---- helpers ------------------------------------------------------------------------------------

/// Every textual form a secret could take in an output.
fn forms(raw: &[u8]) -> Vec<String> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    vec![URL_SAFE_NO_PAD.encode(raw), STANDARD.encode(raw), hex]
}

fn token_bytes(base64url: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(base64url)
        .unwrap()
}

async fn close_of(app: &mut appduct_daemon::device_socket::MemoryApp) -> (u16, String) {
    match next_app_event(app).await {
        AppEvent::Close { code, reason } => (code, reason),
        other => panic!("expected a close, got {other:?}"),
    }
}

/// SEC-24, and raw arguments never stored (SEC-45's second half).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_24_no_token_payload_or_deep_link_reaches_logs_audit_events_list_or_status() {
    let capture = Capture::default();
    tracing::subscriber::set_global_default(capture.clone()).unwrap();
    tracing::debug!("capture installed");

    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut bus = daemon.events().subscribe_all();
    let mut bus_seen: Vec<Value> = Vec::new();
    let mut subscriber = RawControl::new(&daemon);
    let subscribed = subscriber.request(1, "events.subscribe", json!({})).await;
    assert!(subscribed["result"].is_object(), "{subscribed}");

    // A native link; its deep link is composed the way both frontends compose it.
    let mut control = RawControl::new(&daemon);
    let created = control.request(1, "link.create", json!({})).await;
    let link: LinkCreateResult = serde_json::from_value(created["result"].clone()).unwrap();
    let deep_link = delivery::deep_link("myapp", &link).unwrap();
    let claim_token = bootstrap::decode(&link.deep_link_payload)
        .unwrap()
        .token
        .to_base64url();
    let sid = link.session_id.clone();

    // A claim with a wrong token is refused; the right one claims.
    let (socket, mut stranger) = memory_device_pair();
    daemon.attach_device(socket, Transport::Native);
    stranger
        .send_text(claim_frame(&sid, &"A".repeat(43), "Intruder").to_string())
        .await
        .unwrap();
    assert_eq!(
        close_of(&mut stranger).await,
        (1008, "invalid_token".into())
    );

    let (socket, mut app) = memory_device_pair();
    daemon.attach_device(socket, Transport::Native);
    app.send_text(claim_frame(&sid, &claim_token, "Pixel 8").to_string())
        .await
        .unwrap();
    let ack = expect_text(&mut app).await;
    assert_eq!(ack["type"], "session_ack", "{ack}");
    let first_resume = ack["resume_token"].as_str().unwrap().to_owned();

    // A registry and one call with arguments.
    app.send_text(
        json!({"type": "tool_registry_snapshot", "session_id": sid,
               "tools": [{"name": "echo", "description": "Echoes."}]})
        .to_string(),
    )
    .await
    .unwrap();
    bus_seen.push(serde_json::to_value(event_of(&mut bus, EventKind::ToolsChanged).await).unwrap());
    let mut caller = RawControl::new(&daemon);
    caller
        .send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools.call",
                     "params": {"name": "echo", "args": {"note": ARG_MARKER}}}))
        .await;
    let call = expect_text(&mut app).await;
    assert_eq!(call["type"], "tool_call", "{call}");
    app.send_text(
        json!({"type": "tool_result", "session_id": sid, "id": call["id"],
               "result": {"echoed": true}})
        .to_string(),
    )
    .await
    .unwrap();
    let answered = caller.next().await.unwrap();
    assert_eq!(answered["result"]["result"], json!({"echoed": true}));

    // The socket drops; the previous token is refused after a resume rotated it.
    app.drop_connection();
    bus_seen
        .push(serde_json::to_value(event_of(&mut bus, EventKind::SessionSuspended).await).unwrap());
    let (socket, mut resumed) = memory_device_pair();
    daemon.attach_device(socket, Transport::Native);
    resumed
        .send_text(
            json!({"type": "session_resume", "protocol_version": 2, "session_id": sid,
                   "resume_token": first_resume})
            .to_string(),
        )
        .await
        .unwrap();
    let ack = expect_text(&mut resumed).await;
    assert_eq!(ack["type"], "session_ack", "{ack}");
    let second_resume = ack["resume_token"].as_str().unwrap().to_owned();
    assert_ne!(second_resume, first_resume);
    let (socket, mut stale) = memory_device_pair();
    daemon.attach_device(socket, Transport::Native);
    stale
        .send_text(
            json!({"type": "session_resume", "protocol_version": 2, "session_id": sid,
                   "resume_token": first_resume})
            .to_string(),
        )
        .await
        .unwrap();
    assert_eq!(
        close_of(&mut stale).await,
        (1008, "invalid_resume_token".into())
    );

    // What a client can list and read.
    let listed = control.request(2, "sessions.list", json!({})).await;
    let status = control.request(3, "daemon.status", json!({})).await;
    let described = control
        .request(4, "sessions.describe", json!({"selector": sid}))
        .await;
    let revoked = control
        .request(5, "sessions.revoke", json!({"selector": sid}))
        .await;
    assert!(revoked["result"].is_object(), "{revoked}");
    bus_seen
        .push(serde_json::to_value(event_of(&mut bus, EventKind::SessionRevoked).await).unwrap());
    daemon.shutdown().await;

    // Everything the subscriber received, then every bus event still queued.
    let mut notifications = Vec::new();
    while let Some(line) = subscriber.next().await {
        notifications.push(line);
    }
    assert!(
        notifications.iter().any(|n| n["method"] == "event"),
        "the subscriber saw no event"
    );
    while let Ok(event) = bus.try_recv() {
        bus_seen.push(serde_json::to_value(event).unwrap());
    }

    let mut outputs: Vec<(String, String)> = vec![
        ("log output".into(), capture.text.lock().unwrap().clone()),
        ("sessions.list".into(), listed.to_string()),
        ("daemon.status".into(), status.to_string()),
        ("sessions.describe".into(), described.to_string()),
        ("sessions.revoke".into(), revoked.to_string()),
        ("tools.call response".into(), answered.to_string()),
        ("bus".into(), Value::from(bus_seen).to_string()),
        (
            "subscriber notifications".into(),
            Value::from(notifications).to_string(),
        ),
    ];
    for name in ["events.log", "events.log.1"] {
        let text = std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
        outputs.push((name.into(), text));
    }
    let mut audit_files = 0;
    for entry in std::fs::read_dir(dir.path().join("audit")).unwrap() {
        let path = entry.unwrap().path();
        audit_files += 1;
        outputs.push((
            path.display().to_string(),
            std::fs::read_to_string(&path).unwrap(),
        ));
    }
    assert_eq!(audit_files, 1, "the call was not audited");
    let log = &outputs[0].1;
    assert!(log.contains("capture installed"), "the capture saw nothing");
    // Positive control: the daemon's debug-level output is captured too.
    assert!(
        log.contains("DEBUG appduct_daemon"),
        "no daemon debug output: {log}"
    );

    let mut secrets: Vec<(String, String)> = Vec::new();
    for (what, token) in [
        ("claim token", &claim_token),
        ("first resume token", &first_resume),
        ("second resume token", &second_resume),
    ] {
        for form in forms(&token_bytes(token)) {
            secrets.push((what.into(), form));
        }
    }
    secrets.push(("bootstrap payload".into(), link.deep_link_payload.clone()));
    secrets.push(("deep link".into(), deep_link));
    secrets.push(("raw arguments".into(), ARG_MARKER.into()));
    // The host key: never logged, emitted or reported (SECURITY.md §4.10); each PEM body line.
    let key_pem = std::fs::read_to_string(dir.path().join("key.pem")).unwrap();
    let body: Vec<&str> = key_pem
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 16)
        .collect();
    assert!(!body.is_empty());
    for line in body {
        secrets.push(("host key".into(), line.to_owned()));
    }
    for (place, text) in &outputs {
        for (what, secret) in &secrets {
            assert!(
                !text.contains(secret.as_str()),
                "the {what} appears in {place}: {text}"
            );
        }
    }
}
