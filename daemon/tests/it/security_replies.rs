//! Issue #20, defects 1 and 4: what a paired app can make the daemon hold and write. A real
//! in-process daemon, real `appduct-sdk` apps over the wss listener, typed control clients;
//! every wait is bounded and tied to a condition.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;

use appduct_client::client::ControlClient;
use appduct_daemon::daemon::{Daemon, DaemonHandle, DaemonOptions};
use appduct_protocol::control::{LinkCreate, LinkCreateParams, SessionState, ToolsCallParams};
use appduct_protocol::descriptor::validate_tool_descriptor;
use appduct_protocol::limits::{MAX_JSON_DEPTH, MAX_REGISTRY_BYTES};
use appduct_protocol::link::compose_deep_link;
use appduct_sdk::{CallContext, Client, ClientState, Trust};
use daemon_support::{WAIT, memory_client, state_dir};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::time::timeout;

struct Setup {
    _dir: TempDir,
    daemon: DaemonHandle,
    app: Client,
    session_id: String,
}

/// A daemon and one SDK app holding `register`'s tools, connected and active.
async fn setup(register: impl FnOnce(&Client)) -> Setup {
    setup_with(|o| o, register).await
}

async fn setup_with(
    options: impl FnOnce(DaemonOptions) -> DaemonOptions,
    register: impl FnOnce(&Client),
) -> Setup {
    let dir = state_dir();
    let daemon = Daemon::start(options(DaemonOptions::for_tests(dir.path())))
        .await
        .unwrap();
    let link = memory_client(&daemon)
        .call::<LinkCreate>(LinkCreateParams::default())
        .await
        .unwrap();
    let pin = daemon.pin();
    let deep_link = compose_deep_link("test", &link.deep_link_payload, Some(&pin)).unwrap();
    let app = Client::builder()
        .trust(Trust::Pin(vec![pin]))
        .build()
        .unwrap();
    register(&app);
    timeout(WAIT, app.connect(&deep_link))
        .await
        .unwrap()
        .unwrap();
    let session_id = link.session_id;
    wait_active(&daemon, &session_id).await;
    Setup {
        _dir: dir,
        daemon,
        app,
        session_id,
    }
}

async fn wait_active(daemon: &DaemonHandle, session_id: &str) {
    let sessions = daemon.sessions().clone();
    daemon_support::until(move || {
        sessions
            .summary(session_id)
            .is_some_and(|s| s.state == SessionState::Active)
            && sessions.tools_of(session_id).is_some_and(|t| !t.is_empty())
    })
    .await;
}

fn call(name: &str, args: Value) -> ToolsCallParams {
    serde_json::from_value(json!({"name": name, "args": args})).unwrap()
}

/// An object nested `depth` levels (`{"a":{"a":…{}}}`), the outermost being level 1.
fn nested_object(depth: usize) -> Value {
    let mut v = json!({});
    for _ in 1..depth {
        v = json!({ "a": v });
    }
    v
}

fn register_echo(app: &Client) {
    let descriptor = json!({"name": "echo", "description": "Wraps its input.",
                            "input_schema": {"type": "object"},
                            "output_schema": {"type": "object"}});
    app.register_tool(&descriptor, |args: Value, _ctx: CallContext| async move {
        Ok(json!({ "echo": args }))
    })
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Defect 4: an answer nested past the cap fails its call and keeps the app
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_answer_nested_past_the_cap_fails_its_call_and_keeps_the_app_connected() {
    let s = setup(register_echo).await;
    let control: ControlClient = memory_client(&s.daemon);

    // The args are at the cap, so the daemon accepts them; the echo is one level deeper.
    let deep = nested_object(MAX_JSON_DEPTH);
    let failed = timeout(WAIT, control.call_tool(call("echo", deep)))
        .await
        .expect("the call never settled")
        .expect_err("a 65-deep answer cannot be passed on");
    assert_eq!(
        failed.error.error_type().as_str(),
        "tool_serialization_error",
        "{failed:?}"
    );
    let details = failed.error.details().unwrap_or_default();
    assert_eq!(details["reason"], "too_deep", "{details}");
    assert_eq!(details["maxDepth"], MAX_JSON_DEPTH, "{details}");

    // The app was not disconnected: still active on both sides, and the next call succeeds.
    assert_eq!(s.app.state(), ClientState::Active);
    assert_eq!(
        s.daemon.sessions().summary(&s.session_id).unwrap().state,
        SessionState::Active
    );
    let ok = timeout(WAIT, control.call_tool(call("echo", json!({"x": 1}))))
        .await
        .expect("the call never settled")
        .unwrap();
    assert_eq!(ok.result, Some(json!({"echo": {"x": 1}})));
    assert_eq!(s.app.state(), ClientState::Active);
    s.daemon.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Defect 1 (a): a session's registry is bounded in bytes
// ---------------------------------------------------------------------------------------------

/// A tool of about 200 KB: one frame each, so only many of them reach the cap.
fn big_tool(i: usize) -> Value {
    json!({"name": format!("big_{i:03}"), "description": "Large schema.",
           "input_schema": {"type": "object", "description": "x".repeat(200_000)}})
}

fn held(descriptor: &Value) -> usize {
    validate_tool_descriptor(descriptor).unwrap().held_bytes()
}

fn register_noop(app: &Client, descriptor: &Value) {
    app.register_tool(descriptor, |_args: Value, _ctx: CallContext| async move {
        Ok(Value::Null)
    })
    .unwrap();
}

async fn wait_tools(daemon: &DaemonHandle, session_id: &str, count: usize) {
    let sessions = daemon.sessions().clone();
    daemon_support::until(move || {
        sessions
            .tools_of(session_id)
            .is_some_and(|t| t.len() == count)
    })
    .await;
}

#[tokio::test]
async fn registry_bytes_up_to_the_cap_are_held_and_one_delta_past_it_closes_invalid_registry() {
    let small = json!({"name": "small", "description": "A small tool."});
    let s = setup(|app| register_noop(app, &small)).await;

    // As many big tools as fit under the cap with the small one: all accepted.
    let fit = (MAX_REGISTRY_BYTES - held(&small)) / held(&big_tool(0));
    assert!(fit > 10, "the cap takes many frames: {fit}");
    for i in 0..fit {
        register_noop(&s.app, &big_tool(i));
    }
    wait_tools(&s.daemon, &s.session_id, fit + 1).await;
    let total: usize = held(&small) + (0..fit).map(|i| held(&big_tool(i))).sum::<usize>();
    assert!(total <= MAX_REGISTRY_BYTES);
    assert_eq!(s.app.state(), ClientState::Active);

    // One more passes the cap: the app is closed `1008 invalid_registry` (terminal) and the
    // daemon keeps the registry it held before the frame.
    register_noop(&s.app, &big_tool(fit));
    let app = s.app.clone();
    daemon_support::until(move || matches!(app.state(), ClientState::Closed { .. })).await;
    assert_eq!(
        s.app.state(),
        ClientState::Closed {
            reason: "invalid_registry".to_owned()
        }
    );
    let kept = s.daemon.sessions().tools_of(&s.session_id).unwrap();
    assert_eq!(kept.len(), fit + 1);
    assert!(kept.iter().all(|t| t.name != format!("big_{fit:03}")));
    s.daemon.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Defect 1 (b): clients that never read are cut, not buffered for
// ---------------------------------------------------------------------------------------------

const SMALL_CAP: usize = 64 * 1024;
const SMALL_REPLY_CAP: usize = 1_048_576;

#[tokio::test]
async fn four_clients_that_never_read_their_replies_are_closed_past_the_cap_and_one_reply() {
    use tokio::io::AsyncWriteExt;
    // Lowered caps (the defaults are 4 MiB and 16 MiB): each `tools.list` is ~600 KB, so a
    // connection may queue the cap plus one reply's worth, and the third unread reply cuts it.
    let small = json!({"name": "small", "description": "A small tool."});
    let s = setup_with(
        |o| {
            o.subscriber_buffer_cap(SMALL_CAP)
                .control_reply_cap(SMALL_REPLY_CAP)
        },
        |app| register_noop(app, &small),
    )
    .await;
    for i in 0..3 {
        register_noop(&s.app, &big_tool(i));
    }
    wait_tools(&s.daemon, &s.session_id, 4).await;
    let handler = s.daemon.handler().clone();
    let mut held_streams = Vec::new();
    for _ in 0..4 {
        let mut stream = s.daemon.control_stream();
        let mut lines = Vec::new();
        for id in 1..=8 {
            lines.extend_from_slice(
                format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools.list\",\"params\":{{}}}}\n")
                    .as_bytes(),
            );
        }
        stream.write_all(&lines).await.unwrap();
        held_streams.push(stream);
    }
    // Each connection counts from its first request line; none can close before three of its
    // replies are built, so all four are seen open first.
    let seen = handler.clone();
    daemon_support::until(move || seen.connection_count() == 4).await;
    // Eight unread replies each: every connection is closed instead of queueing them all.
    daemon_support::until(move || handler.connection_count() == 0).await;
    // What the closed ones held is bounded by the queue bound; the daemon serves everyone else.
    let listed = memory_client(&s.daemon)
        .call::<appduct_protocol::control::ToolsList>(Default::default())
        .await
        .unwrap();
    assert_eq!(listed.total, 4);
    drop(held_streams);
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn a_reply_past_the_reply_cap_pages_or_answers_too_large() {
    // Three ~200 KB tools with a 300 KB reply cap: `tools.list` pages by bytes (one per page)
    // and a client pages through; `sessions.list` and others are bounded by the same check.
    let small = json!({"name": "small", "description": "A small tool."});
    let s = setup_with(
        |o| o.control_reply_cap(300_000),
        |app| register_noop(app, &small),
    )
    .await;
    for i in 0..3 {
        register_noop(&s.app, &big_tool(i));
    }
    wait_tools(&s.daemon, &s.session_id, 4).await;
    let control = memory_client(&s.daemon);
    // PAGE_ITEM_BYTES follows the default cap, so the page itself is cut by the reply check:
    // the typed error names the reason and the limit.
    let err = control
        .call::<appduct_protocol::control::ToolsList>(Default::default())
        .await
        .unwrap_err();
    assert_eq!(err.error_type().as_str(), "invalid_request", "{err:?}");
    let details = err.details().unwrap_or_default();
    assert_eq!(details, json!({"reason": "too_large", "limit": 300_000}));
    // A page that fits is served, and the connection keeps working.
    let one = control
        .call::<appduct_protocol::control::ToolsList>(
            serde_json::from_value(json!({"limit": 1})).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(one.tools.len(), 1);
    assert!(one.has_more);
    s.daemon.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Issue #17: a 5 MiB content result crosses a real wss socket in parts (device.md §D17.2)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_five_mib_result_from_an_sdk_app_crosses_in_parts_intact() {
    use appduct_sdk::{ContentBlock, ImageMimeType, ToolOutput};
    // A "screenshot": a PNG signature followed by 5 MiB of varied bytes.
    let mut png = vec![0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
    png.extend((0..5 * 1_048_576u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    let sent = png.clone();
    let s = setup(move |app: &Client| {
        // Debug builds take seconds to encode, check and parse 7 MiB of JSON: a long deadline.
        let descriptor = json!({"name": "screenshot", "description": "Captures the screen.",
                                "output_schema": {"type": "object"}, "timeout_ms": 120_000});
        app.register_content_tool(&descriptor, move |_args: Value, _ctx: CallContext| {
            let png = sent.clone();
            async move {
                Ok(ToolOutput::content(vec![
                    ContentBlock::text("the screen"),
                    ContentBlock::image(&png, ImageMimeType::Png),
                ])
                .with_result(json!({"width": 1, "height": 1})))
            }
        })
        .unwrap();
    })
    .await;
    let control: ControlClient = memory_client(&s.daemon);
    let result = timeout(WAIT * 12, control.call_tool(call("screenshot", json!({}))))
        .await
        .expect("the call never settled")
        .unwrap();
    assert_eq!(result.result, Some(json!({"width": 1, "height": 1})));
    let content = result.content.expect("content");
    assert_eq!(content.len(), 2);
    match &content[1] {
        ContentBlock::Image { data, mime_type } => {
            assert_eq!(*mime_type, ImageMimeType::Png);
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data)
                .unwrap();
            assert!(bytes == png, "the image arrived altered");
        }
        other => panic!("not an image: {other:?}"),
    }
    assert_eq!(s.daemon.calls().buffered_result_bytes(), 0);
    assert_eq!(s.app.state(), ClientState::Active);
    s.daemon.shutdown().await;
}
