//! Refusals that teach (issue #25, §D6.2, §C13.1): every class of refused claim, resume or app
//! frame closes with the same code and reason token as before, and the daemon reports which
//! field was at fault, and why, as a `device_refused` event and a log line. Reports never quote
//! a token and are rate-limited daemon-wide.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use crate::engine_support;

use appduct_daemon::device_socket::Incoming;
use appduct_daemon::sessions::{REFUSAL_REPORT_WINDOW, REPORTS_PER_WINDOW};
use appduct_protocol::control::{EventKind, EventNotification, Transport};
use base64::Engine as _;
use engine_support::*;
use serde_json::{Value, json};

/// The event's JSON form, as `events.subscribe` delivers it.
fn wire(e: &EventNotification) -> Value {
    serde_json::to_value(e).unwrap()
}

/// Sends `frame` as the first message of a new connection on `transport`, expects the close
/// `(1008, reason)`, then the `device_refused` event; returns its JSON.
async fn refused_first_frame(h: &mut Harness, frame: &str, reason: &str) -> Value {
    let mut app = h.connect(Transport::Native);
    app.send_text(frame).await.unwrap();
    assert_closed(&mut app, 1008, reason).await;
    let e = wire(&h.event_of(EventKind::DeviceRefused).await);
    assert_eq!(e["data"]["code"], 1008, "{e}");
    assert_eq!(e["data"]["reason"], reason, "{e}");
    assert_eq!(e["data"]["transport"], "native", "{e}");
    assert!(
        e.get("sessionId").is_none(),
        "pre-ack refusals name no session: {e}"
    );
    e
}

#[tokio::test(start_paused = true)]
async fn each_class_of_claim_refusal_names_its_field_and_keeps_its_close() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({}));
    let id = link.session_id.as_str();
    let good = claim_frame(id, &token, Some("Pixel 8"));
    let with = |key: &str, value: Value| {
        let mut f = good.clone();
        f[key] = value;
        f.to_string()
    };
    let without = |key: &str| {
        let mut f = good.clone();
        f.as_object_mut().unwrap().remove(key);
        f.to_string()
    };
    // (frame, close reason, field, problem fragment)
    let cases = [
        // Missing field: the frame of issue #25's report.
        (
            without("protocol_version"),
            "expected_claim_or_resume",
            "protocol_version",
            "is missing",
        ),
        // Wrong type.
        (
            with("token", json!(42)),
            "expected_claim_or_resume",
            "token",
            "must be a string, not a number",
        ),
        // Out-of-range protocol_version.
        (
            with("protocol_version", json!(3)),
            "expected_claim_or_resume",
            "protocol_version",
            "must be the integer 2",
        ),
        (
            with("protocol_version", json!("2")),
            "expected_claim_or_resume",
            "protocol_version",
            "must be the integer 2",
        ),
        // Oversized field.
        (
            with("device_model", json!("x".repeat(300))),
            "expected_claim_or_resume",
            "device_model",
            "must be 0 to 256 UTF-16 code units long, not 300",
        ),
        // An unknown frame type before the claim.
        (
            json!({"type": "tool_result", "session_id": id, "id": "c", "result": {}}).to_string(),
            "expected_claim_or_resume",
            "type",
            "must be session_claim or session_resume",
        ),
        (
            json!({"session_id": id}).to_string(),
            "expected_claim_or_resume",
            "type",
            "is missing",
        ),
    ];
    for (frame, reason, field, problem) in cases {
        let e = refused_first_frame(&mut h, &frame, reason).await;
        assert_eq!(e["data"]["field"], field, "{e}");
        let said = e["data"]["problem"].as_str().unwrap();
        assert!(said.contains(problem), "{field}: {said}");
        if field != "type" {
            assert_eq!(e["data"]["frameType"], "session_claim", "{e}");
        }
        assert!(
            !e.to_string().contains(&token),
            "a report quotes the token: {e}"
        );
    }
    // None of them counted as a failed claim: the link is still claimable.
    let mut app = h.connect(Transport::Native);
    app.send_text(good.to_string()).await.unwrap();
    assert_eq!(expect_text(&mut app).await["type"], "session_ack");
}

#[tokio::test(start_paused = true)]
async fn a_token_in_another_encoding_is_reported_as_such_and_still_closes_invalid_token() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({}));
    let id = link.session_id.as_str();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&token)
        .unwrap();
    // The two encodings an SDK author tries first: padded, and standard base64.
    let padded = base64::engine::general_purpose::URL_SAFE.encode(&bytes);
    let standard = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&bytes);
    for bad in [padded, standard] {
        if bad == token {
            continue; // no '-' or '_' in this token: the standard form is the same text
        }
        let frame = claim_frame(id, &bad, None).to_string();
        let e = refused_first_frame(&mut h, &frame, "invalid_token").await;
        assert_eq!(e["data"]["frameType"], "session_claim", "{e}");
        assert_eq!(e["data"]["field"], "token", "{e}");
        assert!(
            e["data"]["problem"]
                .as_str()
                .unwrap()
                .contains("unpadded base64url"),
            "{e}"
        );
        assert!(
            !e.to_string().contains(&bad),
            "a report quotes the token: {e}"
        );
    }
    // A well-encoded wrong token is named by its close alone: logged, no event.
    let mut app = h.connect(Transport::Native);
    app.send_text(claim_frame(id, &"A".repeat(43), None).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "invalid_token").await;
    settle().await;
    assert!(
        !h.drain_events()
            .iter()
            .any(|e| e.kind() == EventKind::DeviceRefused)
    );
}

#[tokio::test(start_paused = true)]
async fn a_resume_token_in_another_encoding_is_reported() {
    let mut h = Harness::new();
    let claimed = h.claim(Some("Pixel 8")).await;
    let padded = format!("{}=", claimed.resume_token);
    let mut app = h.connect(Transport::Native);
    app.send_text(resume_frame(&claimed.session_id, &padded).to_string())
        .await
        .unwrap();
    assert_closed(&mut app, 1008, "invalid_resume_token").await;
    let e = wire(&h.event_of(EventKind::DeviceRefused).await);
    assert_eq!(e["data"]["frameType"], "session_resume", "{e}");
    assert_eq!(e["data"]["field"], "resume_token", "{e}");
    assert!(!e.to_string().contains(&claimed.resume_token), "{e}");
}

#[tokio::test(start_paused = true)]
async fn an_app_frame_refused_after_the_ack_names_session_field_and_type() {
    let mut h = Harness::new();
    let mut claimed = h.claim(Some("Pixel 8")).await;
    let frame = json!({"type": "tool_error", "session_id": claimed.session_id,
                       "id": "call_1", "error": {"type": "boom", "message": "no"}});
    claimed.app.send_text(frame.to_string()).await.unwrap();
    assert_closed(&mut claimed.app, 1008, "invalid_message").await;
    let e = wire(&h.next_event().await);
    assert_eq!(e["kind"], "device_refused", "{e}");
    assert_eq!(e["sessionId"], claimed.session_id.as_str(), "{e}");
    assert_eq!(e["alias"], claimed.alias.as_str(), "{e}");
    assert_eq!(
        e["data"],
        json!({"transport": "native", "code": 1008, "reason": "invalid_message",
               "frameType": "tool_error", "field": "error.type",
               "problem": "must be one of the seven tool_* types"})
    );
    // Then the close suspends the session, as before.
    assert_eq!(h.next_event().await.kind(), EventKind::SessionSuspended);
}

#[tokio::test(start_paused = true)]
async fn registry_and_whole_message_refusals_are_reported_too() {
    let mut h = Harness::new();
    let mut claimed = h.claim(None).await;
    let snapshot = json!({"type": "tool_registry_snapshot", "session_id": claimed.session_id,
                          "tools": [{"name": "ok", "description": "fine"},
                                    {"name": "bad name", "description": "x"}]});
    claimed.app.send_text(snapshot.to_string()).await.unwrap();
    assert_closed(&mut claimed.app, 1008, "invalid_registry").await;
    let e = wire(&h.event_of(EventKind::DeviceRefused).await);
    assert_eq!(e["data"]["field"], "tools[1].name", "{e}");
    assert_eq!(e["data"]["frameType"], "tool_registry_snapshot", "{e}");

    // Not JSON: the message as a whole, no field.
    let e = refused_first_frame(&mut h, "{\"type\": ", "invalid_json").await;
    assert!(e["data"].get("field").is_none(), "{e}");
    assert!(
        e["data"]["problem"].as_str().unwrap().contains("not JSON"),
        "{e}"
    );

    // Over the size limit: 1009, the message as a whole.
    let mut app = h.connect(Transport::Native);
    app.inject(Incoming::TooBig { size: 300_000 })
        .await
        .unwrap();
    assert_closed(&mut app, 1009, "message_too_big").await;
    let e = wire(&h.event_of(EventKind::DeviceRefused).await);
    assert_eq!(e["data"]["code"], 1009, "{e}");
    assert!(e["data"].get("field").is_none(), "{e}");
    assert!(
        e["data"]["problem"]
            .as_str()
            .unwrap()
            .contains("300000 bytes"),
        "{e}"
    );

    // Binary: 1003, reported with the same code.
    let mut app = h.connect(Transport::Web);
    app.send_binary(8).await.unwrap();
    assert_closed(&mut app, 1003, "binary_frame_not_supported").await;
    let e = wire(&h.event_of(EventKind::DeviceRefused).await);
    assert_eq!(e["data"]["code"], 1003, "{e}");
    assert_eq!(e["data"]["transport"], "web", "{e}");
}

#[tokio::test(start_paused = true)]
async fn a_refused_type_is_escaped_and_cut_short() {
    let mut h = Harness::new();
    let hostile = format!("\u{1b}[31m{}", "z".repeat(5000));
    let frame = json!({"type": hostile}).to_string();
    let e = refused_first_frame(&mut h, &frame, "expected_claim_or_resume").await;
    let problem = e["data"]["problem"].as_str().unwrap();
    assert!(!problem.contains('\u{1b}'), "{problem}");
    assert!(problem.contains("\\u{1b}"), "{problem}");
    assert!(problem.len() <= 256, "{} bytes", problem.len());
}

#[tokio::test(start_paused = true)]
async fn reports_are_rate_limited_and_count_what_they_leave_out() {
    let mut h = Harness::new();
    let extra = 5;
    for _ in 0..REPORTS_PER_WINDOW + extra {
        let mut app = h.connect(Transport::Native);
        app.send_text("[]").await.unwrap();
        // The close is never limited.
        assert_closed(&mut app, 1008, "invalid_json").await;
    }
    settle().await;
    let reported = h
        .drain_events()
        .into_iter()
        .filter(|e| e.kind() == EventKind::DeviceRefused)
        .count();
    assert_eq!(reported, REPORTS_PER_WINDOW as usize);

    tokio::time::advance(REFUSAL_REPORT_WINDOW).await;
    let mut app = h.connect(Transport::Native);
    app.send_text("[]").await.unwrap();
    assert_closed(&mut app, 1008, "invalid_json").await;
    let e = wire(&h.event_of(EventKind::DeviceRefused).await);
    assert_eq!(e["data"]["suppressed"], u64::from(extra), "{e}");
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn the_log_line_names_the_field_and_never_the_token() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let mut h = Harness::new();
    let (link, token) = h.link(json!({}));
    let mut frame = claim_frame(&link.session_id, &token, None);
    frame.as_object_mut().unwrap().remove("protocol_version");
    refused_first_frame(&mut h, &frame.to_string(), "expected_claim_or_resume").await;

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("refused a device message"))
        .unwrap_or_else(|| panic!("no refusal line in {log}"));
    assert!(
        line.contains("session_claim: field `protocol_version`: is missing"),
        "{line}"
    );
    assert!(
        line.contains("reason=\"expected_claim_or_resume\""),
        "{line}"
    );
    assert!(line.contains("transport=native"), "{line}");
    assert!(!log.contains(&token), "the log quotes the token");
}

/// Answers that break a bound fail only their call and keep the connection (§D12), and the app
/// chooses how many it sends (even for calls that do not exist): their log lines are capped per
/// connection, so a claimed app cannot fill the disk through daemon.log (hostile-peer finding).
#[tokio::test(start_paused = true)]
async fn answers_breaking_a_bound_log_at_most_twenty_lines_per_connection() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let mut h = Harness::new();
    let c = h.claim(None).await;
    let sid = c.session_id.clone();
    let mut deep = json!(1);
    for _ in 0..70 {
        deep = json!([deep]);
    }
    for i in 0..60 {
        let frame = json!({"type": "tool_result", "session_id": sid, "id": format!("call_{i}"),
                           "result": deep});
        c.app.send_text(frame.to_string()).await.unwrap();
    }
    // Frames of one connection are handled in order: once this one's event is out, all sixty
    // answers were handled, on a connection still open.
    c.app
        .send_text(
            json!({"type": "event", "session_id": sid, "name": "after", "ts": 1}).to_string(),
        )
        .await
        .unwrap();
    h.event_of(EventKind::AppEvent).await;

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let logged = log
        .lines()
        .filter(|l| l.contains("failing a call whose answer breaks a bound"))
        .count();
    assert_eq!(logged, 20, "{log}");
    assert_eq!(
        log.lines().filter(|l| l.contains("are not logged")).count(),
        1,
        "{log}"
    );
}
