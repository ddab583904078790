//! Issue #23 against the built binary: the waits for a session end when the app is ready (its
//! registry arrived), at once with a typed error when the app refuses the link, and with a hint
//! when nothing claims it; `sessions link --wait` and `appduct_wait_for_session` alike.

use std::time::Duration;

use appduct_e2e::device::{Link, RawDevice, mint};
use appduct_e2e::harness::Sandbox;
use appduct_e2e::mcp::Mcp;
use appduct_e2e::{OrFail as _, blocking, fail};
use appduct_protocol::ids::ClaimToken;
use appduct_protocol::link::{RefusalReason, refusal_proof};
use serde_json::{Value, json};

const CONFIG: &str = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#;
const WAIT: Duration = Duration::from_secs(20);

fn tools() -> Value {
    json!([{"name": "ping", "description": "Answers pong", "input_schema": {"type": "object"}}])
}

/// A `link_refused` frame for `link` with a valid proof.
fn refusal(link: &Link, reason: RefusalReason) -> String {
    let token = ClaimToken::from_base64url(&link.token)
        .unwrap_or_else(|| fail("the link's token is not 32 bytes"));
    let proof = refusal_proof(&token, &link.session_id, reason);
    json!({"type": "link_refused", "session_id": link.session_id, "reason": reason.as_str(),
           "proof": proof})
    .to_string()
}

/// `sessions link --wait=…` in human mode: the running command and the link it printed.
fn spawn_link_wait(sb: &Sandbox, wait_ms: u64) -> (appduct_e2e::harness::Proc, Link) {
    let wait = format!("--wait={wait_ms}");
    let proc = sb
        .spawn(&["--no-color", "sessions", "link", "--scheme", "e2e", &wait])
        .or_fail();
    loop {
        let line = proc
            .next_stdout_line(WAIT)
            .unwrap_or_else(|| fail(format!("no deep link printed; stderr: {}", proc.stderr())));
        if let Some(at) = line.find("e2e:///?") {
            let deep_link = line[at..].trim_end().to_owned();
            let link =
                Link::from_data(&json!({"deepLink": deep_link, "transport": "native"})).or_fail();
            return (proc, link);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_wait_for_session_returns_once_the_tools_arrived_and_list_tools_is_not_empty() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
    blocking(|| mcp.initialize("2025-11-25")).or_fail();
    let id = blocking(|| {
        mcp.send_request(
            "tools/call",
            json!({"name": "appduct_wait_for_session",
                   "arguments": {"sessionId": link.session_id, "timeoutMs": 20000}}),
        )
    })
    .or_fail();
    // The app claims, and only sends its registry once it has its ack.
    let (mut device, ack) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    assert_eq!(ack["type"], "session_ack");
    device.register(tools()).await.or_fail();
    let response = blocking(|| mcp.wait_response(id)).or_fail();
    let out = &response["result"]["structuredContent"];
    assert_eq!(out["registry"], "received", "{response}");
    assert_eq!(out["toolCount"], 1, "{response}");
    assert_eq!(out["alias"], "pixel-8");
    // Right after the wait, the tools are there.
    let listed = blocking(|| mcp.call_tool("appduct_list_tools", json!({}))).or_fail();
    let names: Vec<&str> = listed["structuredContent"]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["ping"], "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_wait_for_session_ends_at_once_on_a_refusal() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
    blocking(|| mcp.initialize("2025-11-25")).or_fail();
    let id = blocking(|| {
        mcp.send_request(
            "tools/call",
            json!({"name": "appduct_wait_for_session",
                   "arguments": {"sessionId": link.session_id, "timeoutMs": 600000}}),
        )
    })
    .or_fail();
    let mut device = RawDevice::open(&link.endpoint()).await.or_fail();
    device
        .send_text(refusal(&link, RefusalReason::UnsupportedLink))
        .await
        .or_fail();
    let closed = device.expect_close().await.or_fail();
    assert_eq!(
        (closed.code, closed.reason.as_str()),
        (Some(1000), "refusal_recorded")
    );
    let response = blocking(|| mcp.wait_response(id)).or_fail();
    let meta = &response["result"]["_meta"]["appduct/error"];
    assert_eq!(meta["type"], "unknown_session", "{response}");
    assert_eq!(meta["details"]["refused"], "unsupported_link", "{response}");
    let hint = meta["details"]["hint"].as_str().unwrap_or_default();
    assert!(hint.contains("react-native"), "{hint}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_link_wait_reports_ready_tools_and_refusals() {
    let sb = Sandbox::with_config(CONFIG).or_fail();

    // Claimed, then the registry: the command ends with the session and its tools.
    let (proc, link) = blocking(|| spawn_link_wait(&sb, 20_000));
    let (mut device, _) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    device.register(tools()).await.or_fail();
    let ran = blocking(|| proc.finish(WAIT)).or_fail();
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.stdout.contains("Session ready"), "{}", ran.stdout);
    assert!(ran.stdout.contains("1 registered"), "{}", ran.stdout);

    // Refused: exit 71 at once, the reason and the hint on stderr.
    let (proc, link) = blocking(|| spawn_link_wait(&sb, 600_000));
    let mut device = RawDevice::open(&link.endpoint()).await.or_fail();
    device
        .send_text(refusal(&link, RefusalReason::UnsupportedLink))
        .await
        .or_fail();
    let ran = blocking(|| proc.finish(WAIT)).or_fail();
    assert_eq!(ran.code, 71, "{}", ran.stderr);
    assert!(ran.stderr.contains("unsupported_link"), "{}", ran.stderr);
    assert!(ran.stderr.contains("--for react-native"), "{}", ran.stderr);

    // Nobody claims it: tool_timeout (72) with the native link's hint, under --json.
    let (code, doc) = blocking(|| sb.json(&["sessions", "link", "--scheme", "e2e", "--wait=1000"]));
    assert_eq!(code, 72, "{doc}");
    assert_eq!(doc["error"]["type"], "tool_timeout");
    let hint = doc["error"]["details"]["hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains("only the JavaScript SDK cannot use a native link"),
        "{hint}"
    );
}
