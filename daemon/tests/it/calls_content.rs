//! Issue #17 (device.md §D17): content results and results sent in parts, through a real
//! in-process daemon and an in-memory device. Every hostile case ends one call with a typed
//! error, frees what was buffered (the daemon-wide counter is read back to 0) and leaves the
//! app connected; no sleeps, every wait is bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use appduct_client::config::Config;
use appduct_protocol::content::{ContentBlock, ImageMimeType};
use appduct_protocol::control::EventKind;
use appduct_protocol::frames::{AppFrame, ToolResultPart};
use appduct_protocol::parts::{encode_body, sha256_hex, split_body};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::calls_support::{
    Device, Fixture, audit_lines, connect_device, data, next_of, standard_tools,
};
use crate::daemon_support::until;

/// A tiny but real PNG header (signature, IHDR start): what the signature check reads.
const PNG: &[u8] = &[
    0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13, b'I', b'H', b'D', b'R', 0, 0, 0,
    1, 0, 0, 0, 1, 8, 2, 0, 0, 0,
];

async fn send_part(device: &Device, part: &ToolResultPart) {
    device
        .app
        .send_text(AppFrame::ToolResultPart(part.clone()).encode())
        .await
        .unwrap();
}

/// Starts an `echo` call as request `request`; returns its wire id.
async fn start_call(f: &mut Fixture, request: i64, params: Value) -> String {
    f.wire.send(request, "tools.call", params).await;
    f.device.tool_call().await.0
}

/// The `details` of a failed call's error, after checking it is `tool_serialization_error`.
fn serialization_details(response: &Value) -> Value {
    let error = &response["error"];
    assert_eq!(
        error["data"]["type"], "tool_serialization_error",
        "{response}"
    );
    error["data"]["details"].clone()
}

async fn buffered_is_zero(f: &Fixture) {
    let calls = f.daemon.calls().clone();
    until(move || calls.buffered_result_bytes() == 0).await;
}

/// The app is still connected and answers: a plain v2 call succeeds.
async fn still_works(f: &mut Fixture, request: i64) {
    let wire_id = start_call(f, request, json!({"name": "echo"})).await;
    f.device.result(&wire_id, json!({"ok": true})).await;
    let response = f.wire.response(request).await;
    assert_eq!(
        response["result"]["result"],
        json!({"ok": true}),
        "{response}"
    );
}

fn with_results(max_bytes: u64, max_buffered: u64) -> impl FnOnce(&mut Config) {
    move |c: &mut Config| {
        c.results.max_bytes = max_bytes;
        c.results.max_buffered_bytes = max_buffered;
    }
}

#[tokio::test]
async fn the_ack_announces_content_and_parts() {
    let f = Fixture::new().await;
    assert_eq!(f.device.ack["result_content"], true, "{}", f.device.ack);
    assert_eq!(f.device.ack["result_parts_max_bytes"], 16_777_216);
    f.stop().await;

    let f = Fixture::with_config(with_results(262_144, 262_144), standard_tools()).await;
    assert_eq!(f.device.ack["result_parts_max_bytes"], 262_144);
    f.stop().await;
}

#[tokio::test]
async fn a_png_content_block_reaches_tools_call_and_events_and_audit_carry_only_a_summary() {
    let mut f = Fixture::new().await;
    let wire_id = start_call(&mut f, 1, json!({"name": "echo"})).await;
    let data_b64 = STANDARD.encode(PNG);
    f.device
        .send(
            json!({"type": "tool_result", "session_id": f.device.session_id, "id": wire_id,
                     "content": [{"type": "text", "text": "a picture"},
                                 {"type": "image", "data": data_b64, "mimeType": "image/png",
                                  "width": 1, "height": 1}]}),
        )
        .await;
    let response = f.wire.response(1).await;
    let result = &response["result"];
    assert!(
        result.get("result").is_none(),
        "no JSON result was sent: {result}"
    );
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": "a picture"},
               {"type": "image", "data": data_b64, "mimeType": "image/png"}])
    );
    let decoded = STANDARD
        .decode(result["content"][1]["data"].as_str().unwrap())
        .unwrap();
    assert_eq!(decoded, PNG);

    let finished = next_of(&mut f.events, EventKind::ToolCallFinished).await;
    let summary = &data(&finished)["contentSummary"];
    assert_eq!(
        *summary,
        json!([{"type": "text", "bytes": 9},
               {"type": "image", "mimeType": "image/png", "bytes": PNG.len()}])
    );
    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit[0]["contentSummary"], *summary);
    let raw = serde_json::to_string(&audit).unwrap();
    assert!(!raw.contains(&data_b64), "the audit holds image data");
    f.stop().await;
}

#[tokio::test]
async fn a_bad_content_block_fails_the_call_with_its_problem_and_keeps_the_app() {
    let mut f = Fixture::new().await;
    let png = STANDARD.encode(PNG);
    let cases = [
        (json!([{"type": "image", "data": png}]), 0, "mime_type"),
        (
            json!([{"type": "image", "data": png, "mimeType": "image/gif"}]),
            0,
            "mime_type",
        ),
        (
            json!([{"type": "text", "text": "x"}, {"type": "image", "data": "iVBOR!==", "mimeType": "image/png"}]),
            1,
            "base64",
        ),
        (
            json!([{"type": "image", "data": png, "mimeType": "image/webp"}]),
            0,
            "signature",
        ),
        (json!([{"type": "video"}]), 0, "unknown_type"),
        (
            json!(vec![json!({"type": "text", "text": "x"}); 65]),
            64,
            "too_many",
        ),
    ];
    let mut request = 1;
    for (content, index, problem) in cases {
        let wire_id = start_call(&mut f, request, json!({"name": "echo"})).await;
        f.device
            .send(
                json!({"type": "tool_result", "session_id": f.device.session_id,
                         "id": wire_id, "result": null, "content": content}),
            )
            .await;
        let response = f.wire.response(request).await;
        let details = serialization_details(&response);
        assert_eq!(
            details,
            json!({"reason": "invalid_content", "index": index, "problem": problem}),
            "{response}"
        );
        request += 1;
    }
    still_works(&mut f, request).await;
    f.stop().await;
}

#[tokio::test]
async fn a_result_sent_in_parts_arrives_intact_and_frees_its_buffer() {
    let mut f = Fixture::new().await;
    let wire_id = start_call(&mut f, 1, json!({"name": "echo"})).await;
    let big = Value::String("x".repeat(700_000));
    let content = vec![ContentBlock::image(PNG, ImageMimeType::Png)];
    let body = encode_body(Some(&big), Some(&content));
    let parts = split_body(&f.device.session_id, &wire_id, body.as_bytes());
    assert!(parts.len() > 5);
    for part in &parts {
        send_part(&f.device, part).await;
    }
    let response = f.wire.response(1).await;
    assert_eq!(response["result"]["result"], big);
    assert_eq!(response["result"]["content"][0]["mimeType"], "image/png");
    buffered_is_zero(&f).await;
    still_works(&mut f, 2).await;
    f.stop().await;
}

/// Sends the first `n` parts of a `len`-byte body for `wire_id`; returns every part.
async fn send_first_parts(f: &Fixture, wire_id: &str, len: usize, n: usize) -> Vec<ToolResultPart> {
    let body = encode_body(Some(&Value::String("y".repeat(len))), None);
    let parts = split_body(&f.device.session_id, wire_id, body.as_bytes());
    for part in parts.iter().take(n) {
        send_part(&f.device, part).await;
    }
    parts
}

#[tokio::test]
async fn hostile_parts_fail_their_call_with_a_typed_reason() {
    let mut f = Fixture::new().await;
    let mut request = 1;
    // Each case gets a fresh call: the first part is sent as is, then `tamper` makes the
    // second one hostile.
    type Tamper = fn(&mut ToolResultPart);
    let cases: [(Tamper, &str); 5] = [
        (|p| p.total += 1, "part_mismatch"),
        (|p| p.sha256 = sha256_hex(b"other"), "part_mismatch"),
        (|p| p.offset += 1, "part_out_of_order"),
        (|p| p.data = "!!!!".into(), "invalid_part"),
        (
            |p| p.data = STANDARD.encode(vec![b' '; 131_073]),
            "invalid_part",
        ),
    ];
    for (tamper, reason) in cases {
        let wire_id = start_call(&mut f, request, json!({"name": "echo"})).await;
        let mut parts = send_first_parts(&f, &wire_id, 400_000, 1).await;
        tamper(&mut parts[1]);
        send_part(&f.device, &parts[1]).await;
        let response = f.wire.response(request).await;
        assert_eq!(
            serialization_details(&response)["reason"],
            reason,
            "{response}"
        );
        buffered_is_zero(&f).await;
        request += 1;
    }

    // A checksum that does not match the body: found once the last part is in.
    let wire_id = start_call(&mut f, request, json!({"name": "echo"})).await;
    let body = encode_body(Some(&json!("z".repeat(300_000))), None);
    let mut parts = split_body(&f.device.session_id, &wire_id, body.as_bytes());
    for part in &mut parts {
        part.sha256 = sha256_hex(b"not the body");
        send_part(&f.device, part).await;
    }
    let response = f.wire.response(request).await;
    assert_eq!(
        serialization_details(&response)["reason"],
        "checksum_mismatch"
    );
    buffered_is_zero(&f).await;
    request += 1;

    // A body that is not a result object.
    let wire_id = start_call(&mut f, request, json!({"name": "echo"})).await;
    for part in split_body(&f.device.session_id, &wire_id, b"[1,2,3]") {
        send_part(&f.device, &part).await;
    }
    let response = f.wire.response(request).await;
    assert_eq!(serialization_details(&response)["reason"], "invalid_body");
    request += 1;

    still_works(&mut f, request).await;
    f.stop().await;
}

#[tokio::test]
async fn a_declared_total_over_the_cap_fails_at_once_and_cancels_the_app() {
    let mut f = Fixture::with_config(with_results(262_144, 67_108_864), standard_tools()).await;
    let wire_id = start_call(&mut f, 1, json!({"name": "echo"})).await;
    send_first_parts(&f, &wire_id, 300_000, 1).await;
    let response = f.wire.response(1).await;
    assert_eq!(
        serialization_details(&response),
        json!({"reason": "too_large", "maxBytes": 262_144})
    );
    let (cancelled, reason) = f.device.tool_cancel().await;
    assert_eq!(
        (cancelled.as_str(), reason.as_str()),
        (wire_id.as_str(), "result_too_large")
    );
    // The app keeps sending: the parts are dropped, nothing is held.
    let parts = send_first_parts(&f, &wire_id, 300_000, 3).await;
    assert_eq!(parts.len(), 3);
    buffered_is_zero(&f).await;
    still_works(&mut f, 2).await;
    f.stop().await;
}

#[tokio::test]
async fn endless_parts_past_the_session_bound_fail_too_large_and_free_everything() {
    // One session may hold 262,144 bytes across its transfers.
    let mut f = Fixture::with_config(with_results(262_144, 67_108_864), standard_tools()).await;
    let a = start_call(&mut f, 1, json!({"name": "echo", "callId": "a"})).await;
    let b = start_call(&mut f, 2, json!({"name": "echo", "callId": "b"})).await;
    send_first_parts(&f, &a, 250_000, 1).await;
    let parts_b = send_first_parts(&f, &b, 250_000, 1).await;
    let calls = f.daemon.calls().clone();
    until(move || calls.buffered_result_bytes() == 262_144).await;
    // B's next part would take the session past its bound.
    send_part(&f.device, &parts_b[1]).await;
    let response = f.wire.response(2).await;
    assert_eq!(
        serialization_details(&response),
        json!({"reason": "too_large", "maxBytes": 262_144})
    );
    let (cancelled, reason) = f.device.tool_cancel().await;
    assert_eq!(
        (cancelled.as_str(), reason.as_str()),
        (b.as_str(), "result_too_large")
    );
    let calls = f.daemon.calls().clone();
    until(move || calls.buffered_result_bytes() == 131_072).await;
    // A is unaffected and completes.
    let body = encode_body(Some(&Value::String("y".repeat(250_000))), None);
    for part in split_body(&f.device.session_id, &a, body.as_bytes())
        .iter()
        .skip(1)
    {
        send_part(&f.device, part).await;
    }
    let response = f.wire.response(1).await;
    assert_eq!(
        response["result"]["result"].as_str().unwrap().len(),
        250_000
    );
    buffered_is_zero(&f).await;
    f.stop().await;
}

#[tokio::test]
async fn parts_past_the_daemon_wide_bound_fail_too_large() {
    let mut f = Fixture::with_config(with_results(524_288, 262_144), standard_tools()).await;
    let wire_id = start_call(&mut f, 1, json!({"name": "echo"})).await;
    send_first_parts(&f, &wire_id, 400_000, 3).await;
    let response = f.wire.response(1).await;
    assert_eq!(
        serialization_details(&response),
        json!({"reason": "too_large", "maxBytes": 262_144})
    );
    assert_eq!(f.device.tool_cancel().await.1, "result_too_large");
    buffered_is_zero(&f).await;
    f.stop().await;
}

#[tokio::test]
async fn parts_for_an_unknown_or_other_sessions_call_are_dropped() {
    let mut f = Fixture::new().await;
    let other = connect_device(&f.daemon, "Galaxy S24").await;
    other.register(&f.daemon, standard_tools()).await;
    let sid = f.device.session_id.clone();
    let wire_id = start_call(&mut f, 1, json!({"name": "echo", "selector": sid})).await;

    // An id no call has, and this call's id sent by another session: both dropped.
    let body = encode_body(Some(&json!("q".repeat(300_000))), None);
    for part in split_body(
        &f.device.session_id,
        "call_nobodyHasThisWireIdXX",
        body.as_bytes(),
    ) {
        send_part(&f.device, &part).await;
    }
    for part in split_body(&other.session_id, &wire_id, body.as_bytes()) {
        send_part(&other, &part).await;
    }
    // The call is unaffected: its own answer settles it.
    f.device.result(&wire_id, json!("mine")).await;
    let response = f.wire.response(1).await;
    assert_eq!(response["result"]["result"], "mine");
    buffered_is_zero(&f).await;

    // A part naming another session on this connection closes it like any frame (§D6.2).
    let mut part = split_body(&other.session_id, "call_x", b"{}").remove(0);
    part.id = "call_x".into();
    send_part(&f.device, &part).await;
    let (code, reason) = f.device.close_frame().await;
    assert_eq!((code, reason.as_str()), (1008, "session_mismatch"));
    let closed = other.answer_close();
    f.daemon.shutdown().await;
    closed.await.unwrap();
}

#[tokio::test]
async fn an_abandoned_transfer_times_out_and_frees_its_buffer() {
    let mut f = Fixture::new().await;
    let wire_id = start_call(&mut f, 1, json!({"name": "echo", "timeoutMs": 1000})).await;
    send_first_parts(&f, &wire_id, 400_000, 2).await;
    let calls = f.daemon.calls().clone();
    until(move || calls.buffered_result_bytes() == 262_144).await;
    let response = f.wire.response(1).await;
    assert_eq!(
        response["error"]["data"]["type"], "tool_timeout",
        "{response}"
    );
    assert_eq!(f.daemon.calls().buffered_result_bytes(), 0);
    assert_eq!(f.device.tool_cancel().await.1, "timeout");
    f.stop().await;
}

#[tokio::test]
async fn a_cancel_mid_transfer_frees_the_buffer_at_once() {
    let mut f = Fixture::new().await;
    let wire_id = start_call(&mut f, 1, json!({"name": "echo", "callId": "c1"})).await;
    send_first_parts(&f, &wire_id, 400_000, 2).await;
    let calls = f.daemon.calls().clone();
    until(move || calls.buffered_result_bytes() == 262_144).await;
    let cancel = f
        .wire
        .request(2, "tools.cancel", json!({"callId": "c1"}))
        .await;
    assert_eq!(cancel["result"]["cancelled"], true, "{cancel}");
    // Freed before the app even answered the cancel.
    assert_eq!(f.daemon.calls().buffered_result_bytes(), 0);
    assert_eq!(f.device.tool_cancel().await.0, wire_id);
    f.device
        .error(
            &wire_id,
            json!({"type": "tool_cancelled", "message": "stopped"}),
        )
        .await;
    let response = f.wire.response(1).await;
    assert_eq!(
        response["error"]["data"]["type"], "tool_cancelled",
        "{response}"
    );
    f.stop().await;
}

#[tokio::test]
async fn a_plain_answer_during_a_transfer_settles_the_call_and_frees_the_buffer() {
    let mut f = Fixture::new().await;
    let wire_id = start_call(&mut f, 1, json!({"name": "echo"})).await;
    send_first_parts(&f, &wire_id, 400_000, 1).await;
    let calls = f.daemon.calls().clone();
    until(move || calls.buffered_result_bytes() == 131_072).await;
    f.device
        .error(
            &wire_id,
            json!({"type": "tool_execution_error", "message": "gave up"}),
        )
        .await;
    let response = f.wire.response(1).await;
    assert_eq!(
        response["error"]["data"]["type"], "tool_execution_error",
        "{response}"
    );
    buffered_is_zero(&f).await;
    f.stop().await;
}

/// `{"result":[0,0,…]}` of about `len` bytes: two body bytes per JSON value.
fn tiny_values_body(len: usize) -> String {
    format!(r#"{{"result":[{}0]}}"#, "0,".repeat(len / 2))
}

/// §D17.3: the parsed tree of a body is counted in the daemon-wide budget before it is built
/// (`count_values` × 128 bytes). A body of many tiny values whose tree fits arrives intact; one
/// whose tree would not fails `too_large` unparsed, frees its bytes and keeps the app.
#[tokio::test]
async fn a_body_of_many_tiny_values_is_bounded_by_its_parsed_size() {
    use appduct_protocol::parts::{PARSED_BYTES_PER_VALUE, count_values};
    let max_buffered = 64 * 1024 * 1024;
    let mut f = Fixture::with_config(
        with_results(16 * 1024 * 1024, max_buffered),
        standard_tools(),
    )
    .await;

    // 256 KiB of `0,`: about 131,000 values, counted as about 16 MiB: fits.
    let wire_id = start_call(&mut f, 1, json!({"name": "echo"})).await;
    let body = tiny_values_body(262_144);
    let parsed = count_values(body.as_bytes()) * PARSED_BYTES_PER_VALUE;
    assert!(parsed + body.len() as u64 <= max_buffered);
    for part in split_body(&f.device.session_id, &wire_id, body.as_bytes()) {
        send_part(&f.device, &part).await;
    }
    let response = f.wire.response(1).await;
    let result = response["result"]["result"].as_array().expect("an array");
    assert_eq!(result.len(), 131_073);
    assert!(result.iter().all(|v| v == &json!(0)));
    buffered_is_zero(&f).await;

    // 4 MiB of `0,`: about 2.1 million values, counted as about 256 MiB: past the bound.
    let wire_id = start_call(&mut f, 2, json!({"name": "echo"})).await;
    let body = tiny_values_body(4 * 1024 * 1024);
    assert!(count_values(body.as_bytes()) * PARSED_BYTES_PER_VALUE > max_buffered);
    for part in split_body(&f.device.session_id, &wire_id, body.as_bytes()) {
        send_part(&f.device, &part).await;
    }
    let response = f.wire.response(2).await;
    assert_eq!(
        serialization_details(&response),
        json!({"reason": "too_large", "maxBytes": max_buffered})
    );
    buffered_is_zero(&f).await;
    still_works(&mut f, 3).await;
    f.stop().await;
}
