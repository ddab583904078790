//! Session routing, list/describe/call mapping, progress, cancellation and consent
//! (§M5, §M7, §M8.3–§M8.5, §M10–§M12).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;

use appduct_daemon::control_server::Reply;
use appduct_mcp::catalog;
use appduct_protocol::control::NotificationMethod;
use appduct_protocol::control::{PolicyDecision, ToolCallProgressNotify, ToolCallProgressParams};
use appduct_protocol::jsonrpc::RequestId;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest,
    ElicitationAction, ProtocolVersion, ServerResult,
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

fn sum_tool(policy: PolicyDecision) -> appduct_protocol::control::ToolsListEntry {
    tool(
        json!({"name": "sum", "description": "Add two numbers.", "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}),
        policy,
    )
}

#[tokio::test]
async fn list_tools_pages_summarises_and_routes_by_id() {
    let fake = FakeDaemon::new(&["sessions.describe", "tools.list"]);
    let mut tools: Vec<_> = (0..60)
        .map(|i| {
            tool(
                json!({"name": format!("t{i:02}"), "description": "Short."}),
                PolicyDecision::Allow,
            )
        })
        .collect();
    tools.push(tool(
        json!({"name": "a_long", "description": "é".repeat(4000)}),
        PolicyDecision::Prompt,
    ));
    fake.add_session(session(ID, ALIAS), tools);
    let h = start(fake.clone(), v2025()).await;
    let r = structured(
        &h.call(catalog::LIST_TOOLS, json!({"selector": ALIAS}))
            .await,
    );
    assert_eq!(r["session"], ALIAS);
    assert_eq!(r["sessionId"], ID);
    assert_eq!(r["total"], 61);
    assert_eq!(r["hasMore"], true);
    assert_eq!(r["limit"], 50);
    assert_eq!(r["tools"].as_array().unwrap().len(), 50);
    let first = &r["tools"][0];
    assert_eq!(first["name"], "a_long");
    assert_eq!(first["policy"], "prompt");
    assert_eq!(first["group"], Value::Null);
    let summary = first["summary"].as_str().unwrap();
    assert_eq!(summary.chars().count(), 121);
    assert!(summary.ends_with('…'));
    assert_eq!(first["signature"], "a_long()");
    // Later daemon calls carry the id, never the alias.
    assert_eq!(fake.requests("sessions.describe")[0]["selector"], ALIAS);
    assert_eq!(fake.requests("tools.list")[0]["selector"], ID);
    let r = structured(
        &h.call(catalog::LIST_TOOLS, json!({"offset": 50, "filter": "t"}))
            .await,
    );
    assert_eq!(r["offset"], 50);
    assert_eq!(r["filter"], "t");
    assert_eq!(r["hasMore"], false);
}

#[tokio::test]
async fn describe_reports_the_deadline_and_unknown_names() {
    let fake = FakeDaemon::new(&["sessions.describe", "tools.list"]);
    fake.add_session(
        session(ID, ALIAS),
        vec![
            sum_tool(PolicyDecision::Allow),
            tool(
                json!({"name": "slow", "description": "", "timeout_ms": 700000}),
                PolicyDecision::Allow,
            ),
        ],
    );
    let h = start(fake, v2025()).await;
    let r = structured(&h.call(catalog::DESCRIBE_TOOL, json!({"name": "sum"})).await);
    assert_eq!(r["deadlineMs"], 10000);
    assert_eq!(r["signature"], "sum(a?: number, b?: number)");
    assert_eq!(r["input_schema"]["type"], "object");
    assert!(r.get("timeout_ms").is_none());
    assert_eq!(r["group"], Value::Null);
    let r = structured(
        &h.call(catalog::DESCRIBE_TOOL, json!({"name": "slow"}))
            .await,
    );
    assert_eq!(r["deadlineMs"], 600000);
    assert_eq!(r["timeout_ms"], 700000);
    let r = h
        .call(catalog::DESCRIBE_TOOL, json!({"name": "nope"}))
        .await;
    assert_eq!(error_type(&r), "tool_not_found");
    assert_eq!(
        error_details(&r),
        json!({"name": "nope", "session": ALIAS, "sessionId": ID})
    );
    assert!(error_message(&r).contains("appduct_list_tools"));
}

#[tokio::test]
async fn call_maps_results_and_sends_explicit_deadlines() {
    let fake = FakeDaemon::new(&[
        "sessions.describe",
        "tools.list",
        "tools.call",
        "events.subscribe",
    ]);
    fake.add_session(
        session(ID, ALIAS),
        vec![
            sum_tool(PolicyDecision::Allow),
            tool(
                json!({"name": "thirty", "description": "", "timeout_ms": 30000}),
                PolicyDecision::Allow,
            ),
            tool(
                json!({"name": "list", "description": ""}),
                PolicyDecision::Allow,
            ),
        ],
    );
    fake.on_call(Arc::new(|_conn, _id, p| {
        Box::pin(async move {
            let result = if p.name == "list" { json!([1, 2]) } else { json!({"total": 3.5}) };
            Reply::Ok(json!({"result": result, "callId": p.call_id, "sessionId": ID, "alias": ALIAS, "durationMs": 41}))
        })
    }));
    let h = start(fake.clone(), v2025()).await;
    let r = h
        .call(
            catalog::CALL_TOOL,
            json!({"selector": ALIAS, "name": "sum", "args": {"a": 1}}),
        )
        .await;
    assert_eq!(r.is_error, None);
    assert_eq!(structured(&r), json!({"total": 3.5}));
    assert_eq!(r.content[0].as_text().unwrap().text, "{\"total\":3.5}");
    let call = r.meta.as_ref().unwrap().0["appduct/call"].clone();
    let call_id = call["callId"].as_str().unwrap().to_owned();
    assert!(
        call_id.starts_with("mcp_") && call_id.len() == 26,
        "{call_id}"
    );
    assert_eq!(
        call,
        json!({"callId": call_id, "sessionId": ID, "alias": ALIAS, "durationMs": 41})
    );
    let sent = &fake.requests("tools.call")[0];
    assert_eq!(sent["selector"], ID);
    assert_eq!(sent["callId"], call_id.as_str());
    assert_eq!(sent["caller"], "mcp");
    assert_eq!(sent["args"], json!({"a": 1}));
    assert!(sent.get("consent").is_none());
    // A non-object result is text only.
    let r = h.call(catalog::CALL_TOOL, json!({"name": "list"})).await;
    assert!(r.structured_content.is_none());
    assert_eq!(r.content[0].as_text().unwrap().text, "[1,2]");
    // Deadlines are always explicit: [30000, 5000, 10000].
    h.call(catalog::CALL_TOOL, json!({"name": "thirty"})).await;
    h.call(
        catalog::CALL_TOOL,
        json!({"name": "thirty", "timeoutMs": 5000}),
    )
    .await;
    h.call(catalog::CALL_TOOL, json!({"name": "sum"})).await;
    let timeouts: Vec<Value> = fake.requests("tools.call")[2..]
        .iter()
        .map(|p| p["timeoutMs"].clone())
        .collect();
    assert_eq!(timeouts, [json!(30000), json!(5000), json!(10000)]);
    // Longer than the tool's deadline: rejected naming deadlineMs, nothing sent.
    let before = fake.requests("tools.call").len();
    let r = h
        .call(
            catalog::CALL_TOOL,
            json!({"name": "sum", "timeoutMs": 20000}),
        )
        .await;
    assert_eq!(error_type(&r), "invalid_request");
    assert!(error_message(&r).contains("deadlineMs"));
    assert_eq!(error_details(&r)["deadlineMs"], 10000);
    let r = h.call(catalog::CALL_TOOL, json!({"name": "nope"})).await;
    assert_eq!(error_type(&r), "tool_not_found");
    assert_eq!(fake.requests("tools.call").len(), before);
}

/// The fake's `tools.call` answer with content blocks (§D17.1) and no JSON result.
fn content_reply(call_id: Option<String>) -> Reply {
    let png = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        b"\x89PNG\r\n\x1a\n0123456789",
    );
    Reply::Ok(json!({"content": [
        {"type": "image", "data": png, "mimeType": "image/png"},
        {"type": "text", "text": "the cart"},
        {"type": "resource_link", "uri": "https://shop.test/cart", "name": "cart"},
    ], "callId": call_id, "sessionId": ID, "alias": ALIAS, "durationMs": 7}))
}

#[tokio::test]
async fn content_results_map_to_mcp_blocks_and_big_images_to_a_note() {
    let png = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        b"\x89PNG\r\n\x1a\n0123456789",
    );
    for (limit, first) in [
        (
            18,
            json!({"type": "image", "data": png, "mimeType": "image/png"}),
        ),
        (17, Value::Null),
    ] {
        let fake = FakeDaemon::new(&[
            "sessions.describe",
            "tools.list",
            "tools.call",
            "events.subscribe",
        ]);
        fake.add_session(
            session(ID, ALIAS),
            vec![tool(
                json!({"name": "shot", "description": ""}),
                PolicyDecision::Allow,
            )],
        );
        fake.on_call(Arc::new(|_conn, _id, p| {
            Box::pin(async move { content_reply(p.call_id) })
        }));
        let options = appduct_mcp::BridgeOptions {
            max_image_bytes: limit,
            ..test_options()
        };
        let h = start_with(fake.clone(), v2025(), options, test_env()).await;
        let r = h.call(catalog::CALL_TOOL, json!({"name": "shot"})).await;
        assert_eq!(r.is_error, None);
        assert!(r.structured_content.is_none(), "no JSON result");
        let v = serde_json::to_value(&r).unwrap();
        let content = v["content"].as_array().unwrap();
        assert_eq!(content.len(), 3, "{v}");
        if first.is_null() {
            // 18 decoded bytes over a limit of 17: a text note, and the call succeeds.
            assert_eq!(content[0]["type"], "text");
            let text = content[0]["text"].as_str().unwrap();
            assert!(
                text.starts_with("Image 0 (image/png, 18 B = 18 bytes) was left out"),
                "{text}"
            );
            assert!(text.contains("limit of 17 B (17 bytes)"), "{text}");
        } else {
            assert_eq!(content[0], first);
        }
        assert_eq!(content[1], json!({"type": "text", "text": "the cart"}));
        assert_eq!(
            content[2],
            json!({"type": "resource_link", "uri": "https://shop.test/cart", "name": "cart"})
        );
        assert_eq!(v["_meta"]["appduct/call"]["durationMs"], 7);
    }
}

#[tokio::test]
async fn daemon_errors_pass_through_with_the_call_handle() {
    let fake = FakeDaemon::new(&[
        "sessions.describe",
        "tools.list",
        "tools.call",
        "events.subscribe",
    ]);
    fake.add_session(session(ID, ALIAS), vec![sum_tool(PolicyDecision::Deny)]);
    fake.on_call(Arc::new(|_conn, _id, p| {
        Box::pin(async move {
            Reply::Err(
                appduct_protocol::jsonrpc::ErrorObject::application(
                    appduct_protocol::errors::ErrorType::PolicyDenied,
                    "Policy denies \"sum\" on pixel-8",
                )
                .with_details(json!({"reason": "policy"}))
                .with_call_id(p.call_id.clone().unwrap()),
            )
        })
    }));
    let h = start(fake.clone(), v2025()).await;
    let r = h.call(catalog::CALL_TOOL, json!({"name": "sum"})).await;
    assert_eq!(error_type(&r), "policy_denied");
    assert_eq!(error_details(&r), json!({"reason": "policy"}));
    let meta = &r.meta.as_ref().unwrap().0;
    assert_eq!(
        meta["appduct/call"]["callId"],
        fake.requests("tools.call")[0]["callId"]
    );
    assert_eq!(meta["appduct/call"]["sessionId"], ID);
}

/// A call hook that waits for the test to release each call by callId, sending progress first.
fn slow_task(
    fake: &FakeDaemon,
) -> mpsc::UnboundedReceiver<(
    String,
    appduct_daemon::control_server::Connection,
    RequestId,
    oneshot::Sender<Reply>,
)> {
    let (tx, rx) = mpsc::unbounded_channel();
    fake.on_call(Arc::new(move |conn, id, p| {
        let tx = tx.clone();
        Box::pin(async move {
            let (otx, orx) = oneshot::channel();
            tx.send((p.call_id.clone().unwrap(), conn, id, otx))
                .unwrap();
            orx.await.unwrap_or(Reply::Ok(json!(null)))
        })
    }));
    rx
}

fn progress_line(request_id: &RequestId, call_id: &str, p: f64) -> Vec<u8> {
    let n = ToolCallProgressNotify::notification(
        &ToolCallProgressParams::new(request_id.clone(), call_id.to_owned(), ID.to_owned(), 1)
            .with_progress(serde_json::Number::from_f64(p))
            .with_message(Some(format!("at {p}"))),
    )
    .unwrap();
    let mut line = serde_json::to_vec(&n).unwrap();
    line.push(b'\n');
    line
}

fn done(call_id: &str) -> Reply {
    Reply::Ok(
        json!({"result": {"done": call_id}, "callId": call_id, "sessionId": ID, "alias": ALIAS, "durationMs": 1}),
    )
}

async fn send_call(h: &Harness, name: &str) -> rmcp::service::RequestHandle<rmcp::RoleClient> {
    let params =
        CallToolRequestParams::new(catalog::CALL_TOOL).with_arguments(obj(json!({"name": name})));
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
async fn progress_is_routed_by_call_id_per_token() {
    let fake = FakeDaemon::new(&[
        "sessions.describe",
        "tools.list",
        "tools.call",
        "events.subscribe",
    ]);
    fake.add_session(
        session(ID, ALIAS),
        vec![tool(
            json!({"name": "slow_task", "description": ""}),
            PolicyDecision::Allow,
        )],
    );
    let mut calls = slow_task(&fake);
    let client = v2025();
    let h = start(fake.clone(), client.clone()).await;
    let a = send_call(&h, "slow_task").await;
    let b = send_call(&h, "slow_task").await;
    let (token_a, token_b) = (a.progress_token.clone(), b.progress_token.clone());
    let first = calls.recv().await.unwrap();
    let second = calls.recv().await.unwrap();
    assert_ne!(first.0, second.0, "distinct callIds");
    let mut sent = 0;
    for p in [0.33, 0.66, 1.0] {
        for c in [&first, &second] {
            c.1.send_notification(progress_line(&c.2, &c.0, p));
            sent += 1;
            client.wait_progress(sent).await;
        }
    }
    let (ida, idb) = (first.0.clone(), second.0.clone());
    first.3.send(done(&ida)).unwrap();
    second.3.send(done(&idb)).unwrap();
    let ra = a.await_response().await.unwrap();
    let rb = b.await_response().await.unwrap();
    for (r, call_id) in [(ra, &ida), (rb, &idb)] {
        let ServerResult::CallToolResult(r) = r else {
            panic!("{r:?}")
        };
        assert_eq!(r.structured_content, Some(json!({"done": call_id})));
    }
    let progress = client.progress.lock().unwrap().clone();
    for token in [token_a, token_b] {
        let mine: Vec<f64> = progress
            .iter()
            .filter(|p| p.progress_token == token)
            .map(|p| p.progress)
            .collect();
        assert_eq!(mine, [0.33, 0.66, 1.0]);
        assert!(
            progress
                .iter()
                .filter(|p| p.progress_token == token)
                .all(|p| p.total.is_none())
        );
    }
}

#[tokio::test]
async fn cancelling_one_call_cancels_exactly_that_call() {
    let fake = FakeDaemon::new(&[
        "sessions.describe",
        "tools.list",
        "tools.call",
        "events.subscribe",
        "tools.cancel",
    ]);
    fake.add_session(
        session(ID, ALIAS),
        vec![tool(
            json!({"name": "slow_task", "description": ""}),
            PolicyDecision::Allow,
        )],
    );
    let mut calls = slow_task(&fake);
    let h = start(fake.clone(), v2025()).await;
    let a = send_call(&h, "slow_task").await;
    let b = send_call(&h, "slow_task").await;
    let first = calls.recv().await.unwrap();
    let second = calls.recv().await.unwrap();
    // Which MCP request owns which call is not ordered; cancel `b` and find its callId.
    h.client
        .peer()
        .notify_cancelled(CancelledNotificationParam::new(
            Some(b.id.clone()),
            Some("user".into()),
        ))
        .await
        .unwrap();
    fake.wait_for("tools.cancel", 1).await;
    let cancels = fake.requests("tools.cancel");
    assert_eq!(cancels.len(), 1);
    let cancelled = cancels[0]["callId"].as_str().unwrap().to_owned();
    assert_eq!(cancels[0]["reason"], "mcp_client_cancelled");
    assert_eq!(cancels[0]["selector"], ID);
    assert!(cancelled == first.0 || cancelled == second.0);
    let (survivor, victim) = if cancelled == first.0 {
        (second, first)
    } else {
        (first, second)
    };
    victim.3.send(done(&victim.0)).unwrap();
    survivor.3.send(done(&survivor.0)).unwrap();
    let ServerResult::CallToolResult(r) = a.await_response().await.unwrap() else {
        panic!()
    };
    assert_eq!(r.structured_content, Some(json!({"done": survivor.0})));
    drop(b);
}

#[tokio::test]
async fn consent_by_elicitation() {
    let fake = FakeDaemon::new(&[
        "sessions.describe",
        "tools.list",
        "tools.call",
        "events.subscribe",
    ]);
    fake.add_session(
        session(ID, ALIAS),
        vec![tool(
            json!({"name": "reset_counter", "description": "", "annotations": {"destructiveHint": true}}),
            PolicyDecision::Prompt,
        )],
    );
    let (tx, mut prompts) = mpsc::unbounded_channel();
    let h = start(
        fake.clone(),
        TestClient::new(ProtocolVersion::V_2025_11_25, Some(Elicit::Manual(tx))),
    )
    .await;
    let call = |action: ElicitationAction| {
        let peer = h.client.peer().clone();
        let params = CallToolRequestParams::new(catalog::CALL_TOOL)
            .with_arguments(obj(json!({"name": "reset_counter", "args": {"to": 0}})));
        (
            action,
            tokio::spawn(async move { peer.call_tool(params).await.unwrap() }),
        )
    };
    // Accept → tools.call with consent "elicitation".
    let (action, pending) = call(ElicitationAction::Accept);
    let (message, answer) = prompts.recv().await.unwrap();
    assert_eq!(
        message,
        format!(
            "appduct wants to run \"reset_counter\" on {ALIAS} (session {ID}).\nArguments: {{\"to\":0}}\nThe app marks this tool as destructive.\nAllow this call?"
        )
    );
    answer.send(action).unwrap();
    let r = pending.await.unwrap();
    assert_eq!(structured(&r), json!({"ok": true}));
    assert_eq!(fake.requests("tools.call")[0]["consent"], "elicitation");
    // Decline and cancel → consent_declined; nothing reaches the daemon.
    for (action, reason) in [
        (ElicitationAction::Decline, "declined"),
        (ElicitationAction::Cancel, "cancelled"),
    ] {
        let (action, pending) = call(action);
        let (_, answer) = prompts.recv().await.unwrap();
        answer.send(action).unwrap();
        let r = pending.await.unwrap();
        assert_eq!(error_type(&r), "consent_declined");
        assert_eq!(error_details(&r), json!({"reason": reason}));
    }
    // No answer within the (injected, 300 ms) timeout.
    let (_, pending) = call(ElicitationAction::Accept);
    let (_, answer) = prompts.recv().await.unwrap();
    let r = pending.await.unwrap();
    assert_eq!(error_type(&r), "consent_declined");
    assert_eq!(error_details(&r), json!({"reason": "timed_out"}));
    // The wait is named as configured, not rounded down to "0 s".
    let m = error_message(&r);
    assert!(m.contains("within 0.3 s"), "{m}");
    drop(answer);
    assert_eq!(fake.requests("tools.call").len(), 1);
}

#[tokio::test]
async fn a_failing_or_missing_consent_channel_lets_the_daemon_deny() {
    for client in [
        TestClient::new(ProtocolVersion::V_2025_11_25, Some(Elicit::Fail)),
        TestClient::new(ProtocolVersion::V_2025_11_25, None),
    ] {
        let fake = FakeDaemon::new(&[
            "sessions.describe",
            "tools.list",
            "tools.call",
            "events.subscribe",
        ]);
        fake.add_session(session(ID, ALIAS), vec![sum_tool(PolicyDecision::Prompt)]);
        let h = start(fake.clone(), client).await;
        h.call(catalog::CALL_TOOL, json!({"name": "sum"})).await;
        let sent = fake.requests("tools.call");
        assert_eq!(sent.len(), 1);
        assert!(
            sent[0].get("consent").is_none(),
            "no consent without a channel"
        );
    }
}

#[tokio::test]
async fn an_alias_taken_over_during_consent_is_never_called() {
    // SEC-47.
    let fake = FakeDaemon::new(&[
        "sessions.describe",
        "tools.list",
        "tools.call",
        "events.subscribe",
    ]);
    fake.add_session(session(ID, ALIAS), vec![sum_tool(PolicyDecision::Prompt)]);
    let (tx, mut prompts) = mpsc::unbounded_channel();
    let h = start(
        fake.clone(),
        TestClient::new(ProtocolVersion::V_2025_11_25, Some(Elicit::Manual(tx))),
    )
    .await;
    let peer = h.client.peer().clone();
    let params = CallToolRequestParams::new(catalog::CALL_TOOL)
        .with_arguments(obj(json!({"selector": ALIAS, "name": "sum"})));
    let pending = tokio::spawn(async move { peer.call_tool(params).await.unwrap() });
    let (_, answer) = prompts.recv().await.unwrap();
    // The session is revoked and a new device inherits the alias.
    fake.remove_session(ID);
    fake.add_session(
        session("NEWDEVICE0000000", ALIAS),
        vec![sum_tool(PolicyDecision::Allow)],
    );
    answer.send(ElicitationAction::Accept).unwrap();
    let r = pending.await.unwrap();
    assert_eq!(error_type(&r), "unknown_session");
    let sent = fake.requests("tools.call");
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0]["selector"], ID,
        "routed by the old id, so the new device gets nothing"
    );
}

#[tokio::test]
async fn mrtr_consent_rounds_on_2026() {
    let fake = FakeDaemon::new(&[
        "sessions.describe",
        "tools.list",
        "tools.call",
        "events.subscribe",
        "daemon.hello",
        "consent.create",
        "consent.take",
    ]);
    fake.add_session(session(ID, ALIAS), vec![sum_tool(PolicyDecision::Prompt)]);
    let mut raw = RawClient::start(fake.clone());
    let caps = json!({"elicitation": {"form": {}}});
    let args = json!({"name": "sum", "args": {"a": 1}});
    let first = |args: Value| json!({"name": "appduct_call_tool", "arguments": args, "_meta": meta_2026(caps.clone())});
    let (r, _) = raw.request(1, "tools/call", first(args.clone())).await;
    let result = &r["result"];
    assert_eq!(result["resultType"], "input_required");
    let req = &result["inputRequests"]["appduct_consent"];
    assert_eq!(req["method"], "elicitation/create");
    assert_eq!(req["params"]["mode"], "form");
    assert_eq!(
        req["params"]["requestedSchema"],
        json!({"type": "object", "properties": {}})
    );
    let handle = result["requestState"].as_str().unwrap().to_owned();
    let created = &fake.requests("consent.create")[0];
    assert_eq!(created["sessionId"], ID);
    assert_eq!(created["ttlMs"], 600000);
    assert_eq!(
        created["argsSha256"],
        appduct_protocol::canonical::args_sha256(&json!({"a": 1}))
    );
    // Retry without a response → a new round with a new handle.
    let mut retry = first(args.clone());
    retry["requestState"] = json!(handle);
    let (r, _) = raw.request(2, "tools/call", retry).await;
    assert_eq!(r["result"]["resultType"], "input_required");
    let handle2 = r["result"]["requestState"].as_str().unwrap().to_owned();
    assert_ne!(handle, handle2);
    // Reusing the consumed handle → expired.
    let mut retry = first(args.clone());
    retry["requestState"] = json!(handle);
    retry["inputResponses"] = json!({"appduct_consent": {"action": "accept"}});
    let (r, _) = raw.request(3, "tools/call", retry).await;
    assert_eq!(
        r["result"]["_meta"]["appduct/error"]["details"],
        json!({"reason": "expired"})
    );
    // Changed arguments → mismatch.
    let mut retry = first(json!({"name": "sum", "args": {"a": 2}}));
    retry["requestState"] = json!(handle2);
    retry["inputResponses"] = json!({"appduct_consent": {"action": "accept"}});
    let (r, _) = raw.request(4, "tools/call", retry).await;
    assert_eq!(
        r["result"]["_meta"]["appduct/error"]["details"],
        json!({"reason": "mismatch"})
    );
    assert!(fake.requests("tools.call").is_empty());
    // A fresh round answered with accept → tools.call with consent.
    let (r, _) = raw.request(5, "tools/call", first(args.clone())).await;
    let handle3 = r["result"]["requestState"].as_str().unwrap().to_owned();
    let mut retry = first(args.clone());
    retry["requestState"] = json!(handle3);
    retry["inputResponses"] = json!({"appduct_consent": {"action": "accept"}});
    let (r, _) = raw.request(6, "tools/call", retry).await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["structuredContent"], json!({"ok": true}));
    let sent = fake.requests("tools.call");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["consent"], "elicitation");
    assert_eq!(sent[0]["selector"], ID);
    // Decline.
    let (r, _) = raw.request(7, "tools/call", first(args.clone())).await;
    let mut retry = first(args.clone());
    retry["requestState"] = r["result"]["requestState"].clone();
    retry["inputResponses"] = json!({"appduct_consent": {"action": "decline"}});
    let (r, _) = raw.request(8, "tools/call", retry).await;
    assert_eq!(
        r["result"]["_meta"]["appduct/error"]["details"],
        json!({"reason": "declined"})
    );
    assert_eq!(fake.requests("tools.call").len(), 1);
}
