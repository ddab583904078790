//! Heartbeats while an app tool is silent, `lease: true` and detached calls (§M17).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use appduct_daemon::control_server::Reply;
use appduct_mcp::{BridgeOptions, catalog};
use appduct_protocol::control::{ControlRequest, PolicyDecision};
use appduct_protocol::jsonrpc::RequestId;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, ProgressNotificationParam,
    ProgressToken, ProtocolVersion, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{Value, json};
use support::*;
use tokio::sync::{mpsc, oneshot};

const ID: &str = "q3VfZ0xkR2ptTnB4";
const ALIAS: &str = "pixel-8";

fn v2025() -> TestClient {
    TestClient::new(ProtocolVersion::V_2025_11_25, None)
}

type Held = (String, RequestId, oneshot::Sender<Reply>);

/// Each `tools.call` waits until the test answers it.
fn held_calls(fake: &FakeDaemon) -> mpsc::UnboundedReceiver<Held> {
    let (tx, rx) = mpsc::unbounded_channel();
    fake.on_call(Arc::new(move |_conn, id, p| {
        let tx = tx.clone();
        Box::pin(async move {
            let (otx, orx) = oneshot::channel();
            tx.send((p.call_id.clone().unwrap(), id, otx)).unwrap();
            orx.await.unwrap_or(Reply::Ok(json!(null)))
        })
    }));
    rx
}

/// The progress notifications `client` received for `token`, in order.
fn progress_of(client: &TestClient, token: &ProgressToken) -> Vec<ProgressNotificationParam> {
    client
        .progress
        .lock()
        .unwrap()
        .iter()
        .filter(|p| &p.progress_token == token)
        .cloned()
        .collect()
}

fn done(call_id: &str) -> Reply {
    Reply::Ok(
        json!({"result": {"done": call_id}, "callId": call_id, "sessionId": ID, "alias": ALIAS, "durationMs": 1}),
    )
}

fn fake_with_slow_task(extra: &[&str]) -> Arc<FakeDaemon> {
    let mut methods = vec![
        "sessions.describe",
        "tools.list",
        "tools.call",
        "events.subscribe",
    ];
    methods.extend_from_slice(extra);
    let fake = FakeDaemon::new(&methods);
    fake.add_session(
        session(ID, ALIAS),
        vec![tool(
            json!({"name": "slow_task", "description": "", "timeout_ms": 20000}),
            PolicyDecision::Allow,
        )],
    );
    fake
}

async fn send_call(h: &Harness, args: Value) -> rmcp::service::RequestHandle<rmcp::RoleClient> {
    let params = CallToolRequestParams::new(catalog::CALL_TOOL).with_arguments(obj(args));
    h.client
        .peer()
        .send_request_with_option(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_silent_five_second_call_sends_heartbeats() {
    let fake = fake_with_slow_task(&[]);
    let mut calls = held_calls(&fake);
    let client = v2025();
    let options = BridgeOptions {
        call_heartbeat_interval: Duration::from_secs(1),
        ..test_options()
    };
    let h = start_with(fake.clone(), client.clone(), options, test_env()).await;
    let pending = send_call(&h, json!({"name": "slow_task"})).await;
    let token = pending.progress_token.clone();
    let (call_id, _, answer) = calls.recv().await.unwrap();
    // The app says nothing for 5.5 s of (paused) time, then answers.
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    answer.send(done(&call_id)).unwrap();
    let ServerResult::CallToolResult(r) = pending.await_response().await.unwrap() else {
        panic!("not a tool result")
    };
    assert_eq!(r.structured_content, Some(json!({"done": call_id})));

    let beats = progress_of(&client, &token);
    assert_eq!(beats.len(), 5, "one per second of silence: {beats:?}");
    assert!(beats.windows(2).all(|w| w[1].progress > w[0].progress));
    for (i, b) in beats.iter().enumerate() {
        let m = b.message.as_deref().unwrap();
        assert_eq!(
            m,
            format!(
                "\"slow_task\" on {ALIAS} is running ({} s; callId {call_id})",
                i + 1
            )
        );
        assert!(b.total.is_none());
    }
    // The call was sent detached, so a restarted bridge can fetch its outcome.
    assert_eq!(fake.requests("tools.call")[0]["detach"], true);
}

/// Issue #19's "done when" with the shipped settings (review19 L7): the default options send a
/// heartbeat during a silent 5 s call (first after 3 s of silence).
#[tokio::test(start_paused = true)]
async fn a_silent_five_second_call_sends_heartbeats_by_default() {
    let fake = fake_with_slow_task(&[]);
    let mut calls = held_calls(&fake);
    let client = v2025();
    let options = BridgeOptions::default();
    assert_eq!(options.call_heartbeat_interval, Duration::from_secs(3));
    let h = start_with(fake.clone(), client.clone(), options, test_env()).await;
    let pending = send_call(&h, json!({"name": "slow_task"})).await;
    let token = pending.progress_token.clone();
    let (call_id, _, answer) = calls.recv().await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    answer.send(done(&call_id)).unwrap();
    pending.await_response().await.unwrap();
    let beats = progress_of(&client, &token);
    assert_eq!(beats.len(), 1, "{beats:?}");
    assert_eq!(
        beats[0].message.as_deref(),
        Some(format!("\"slow_task\" on {ALIAS} is running (3 s; callId {call_id})").as_str())
    );
}

#[tokio::test(start_paused = true)]
async fn app_progress_postpones_the_next_heartbeat() {
    let fake = fake_with_slow_task(&[]);
    let mut calls = held_calls(&fake);
    let client = v2025();
    let options = BridgeOptions {
        call_heartbeat_interval: Duration::from_secs(2),
        ..test_options()
    };
    let h = start_with(fake.clone(), client.clone(), options, test_env()).await;
    let pending = send_call(&h, json!({"name": "slow_task"})).await;
    let (call_id, _, answer) = calls.recv().await.unwrap();
    // Answered after 1.5 s: no heartbeat was due yet.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    answer.send(done(&call_id)).unwrap();
    pending.await_response().await.unwrap();
    assert!(client.progress.lock().unwrap().is_empty());
}

#[tokio::test]
async fn lease_true_takes_the_lease_on_the_bridge_connection_before_calling() {
    let fake = fake_with_slow_task(&[]);
    fake.script("sessions.lease", |_, _, request| {
        let ControlRequest::SessionsLease(p) = request else {
            panic!("{request:?}")
        };
        Box::pin(async move {
            Reply::Ok(
                json!({"sessionId": ID, "alias": ALIAS, "holder": {"client": "appduct-mcp"},
                             "expiresAt": 1_796_083_332u64, "ttlMs": p.ttl_ms(), "renewed": false}),
            )
        })
    });
    let mut calls = held_calls(&fake);
    let h = start(fake.clone(), v2025()).await;
    let pending = tokio::spawn({
        let client = h.client.peer().clone();
        async move {
            let params = CallToolRequestParams::new(catalog::CALL_TOOL)
                .with_arguments(obj(json!({"name": "slow_task", "lease": true})));
            client.call_tool(params).await
        }
    });
    let (call_id, _, answer) = calls.recv().await.unwrap();
    answer.send(done(&call_id)).unwrap();
    pending.await.unwrap().unwrap();
    let lease = &fake.requests("sessions.lease")[0];
    assert_eq!(lease, &json!({"selector": ID, "ttlMs": 80000}));
    let methods = fake.methods();
    let at = |m: &str| methods.iter().position(|x| x == m).unwrap();
    assert!(at("sessions.lease") < at("tools.call"), "{methods:?}");
}

#[tokio::test]
async fn a_refused_lease_is_the_agents_error_and_nothing_is_called() {
    let fake = fake_with_slow_task(&[]);
    fake.script("sessions.lease", |_, _, _| {
        Box::pin(async move {
            Reply::Err(
                appduct_protocol::jsonrpc::ErrorObject::application(
                    appduct_protocol::errors::ErrorType::SessionLeased,
                    "pixel-8 is leased by appduct (pid 7)",
                )
                .with_details(json!({"sessionId": ID, "alias": ALIAS,
                                     "holder": {"client": "appduct", "pid": 7}, "expiresAt": 1})),
            )
        })
    });
    let h = start(fake.clone(), v2025()).await;
    let r = h
        .call(
            catalog::CALL_TOOL,
            json!({"name": "slow_task", "lease": true}),
        )
        .await;
    assert_eq!(error_type(&r), "session_leased");
    assert_eq!(error_details(&r)["holder"]["pid"], 7);
    assert!(fake.requests("tools.call").is_empty());
}

/// `tools.result` answers `kept` for every callId.
fn script_result(fake: &FakeDaemon, kept: impl Fn(&str) -> Reply + Send + Sync + 'static) {
    let kept = Arc::new(kept);
    fake.script("tools.result", move |_, _, request| {
        let ControlRequest::ToolsResult(p) = request else {
            panic!("{request:?}")
        };
        let reply = kept(&p.call_id);
        Box::pin(async move { reply })
    });
}

fn ok_response(call_id: &str) -> Value {
    json!({"result": {"done": call_id}, "callId": call_id, "sessionId": ID, "alias": ALIAS, "durationMs": 1})
}

#[tokio::test]
async fn call_result_returns_a_kept_outcome_as_call_tool_rendered_it() {
    let fake = fake_with_slow_task(&[]);
    script_result(&fake, |call_id| {
        Reply::Ok(
            json!({"callId": call_id, "state": "ok", "response": ok_response(call_id),
                         "settledAt": 1_796_083_212_341u64}),
        )
    });
    let mut calls = held_calls(&fake);
    let h = start(fake.clone(), v2025()).await;
    let pending = send_call(&h, json!({"name": "slow_task"})).await;
    let (call_id, _, answer) = calls.recv().await.unwrap();
    answer.send(done(&call_id)).unwrap();
    let ServerResult::CallToolResult(direct) = pending.await_response().await.unwrap() else {
        panic!("not a tool result")
    };
    let fetched = h
        .call(
            catalog::CALL_RESULT,
            json!({"callId": call_id, "waitMs": 5000}),
        )
        .await;
    assert_eq!(
        serde_json::to_value(&fetched).unwrap(),
        serde_json::to_value(&direct).unwrap()
    );
    assert_eq!(
        fetched.meta.as_ref().unwrap().0["appduct/call"]["callId"],
        json!(call_id)
    );
    assert_eq!(
        fake.requests("tools.result"),
        vec![json!({"callId": call_id, "waitMs": 5000})]
    );
}

#[tokio::test]
async fn call_result_passes_a_kept_error_and_an_unknown_call_id_through_typed() {
    let fake = fake_with_slow_task(&[]);
    script_result(&fake, |call_id| match call_id {
        "timed_out" => {
            let error = appduct_protocol::jsonrpc::ErrorObject::application(
                appduct_protocol::errors::ErrorType::ToolTimeout,
                "slow_task did not answer within 20000 ms",
            );
            let mut error = serde_json::to_value(error).unwrap();
            error["data"]["callId"] = json!(call_id);
            Reply::Ok(json!({"callId": call_id, "state": "error", "error": error,
                             "settledAt": 1_796_083_212_341u64}))
        }
        "busy" => Reply::Ok(json!({"callId": call_id, "state": "running"})),
        _ => Reply::Err(
            appduct_protocol::jsonrpc::ErrorObject::application(
                appduct_protocol::errors::ErrorType::InvalidRequest,
                format!("no outcome is kept for callId {call_id}"),
            )
            .with_details(json!({"reason": "call_not_retained", "callId": call_id})),
        ),
    });
    let h = start(fake.clone(), v2025()).await;

    let r = h
        .call(catalog::CALL_RESULT, json!({"callId": "timed_out"}))
        .await;
    assert_eq!(error_type(&r), "tool_timeout");
    assert!(error_message(&r).contains("within 20000 ms"));
    assert_eq!(
        r.meta.as_ref().unwrap().0["appduct/call"],
        json!({"callId": "timed_out"})
    );

    let r = h
        .call(catalog::CALL_RESULT, json!({"callId": "gone"}))
        .await;
    assert_eq!(error_type(&r), "invalid_request");
    assert_eq!(error_details(&r)["reason"], json!("call_not_retained"));

    let r = h
        .call(catalog::CALL_RESULT, json!({"callId": "busy"}))
        .await;
    assert_eq!(
        structured(&r),
        json!({"callId": "busy", "state": "running"})
    );
    // waitMs defaults to 0: the daemon answers at once.
    assert_eq!(
        fake.requests("tools.result")[0],
        json!({"callId": "timed_out", "waitMs": 0})
    );

    let r = h
        .call(catalog::CALL_RESULT, json!({"callId": "not an id"}))
        .await;
    assert_eq!(error_type(&r), "invalid_request");
    assert_eq!(fake.requests("tools.result").len(), 3);
}
