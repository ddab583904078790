//! The consent channels (MRTR and elicitation): an MRTR retry without an answer is asked again
//! only while the client still declares the channel, `appduct_status` reports input_required
//! only when the daemon keeps consent records, and one transient failure (a failed
//! `daemon.hello`, a failed elicitation) does not disable MRTR or elicitation for good
//! (§M8.1, §M8.9).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;

use appduct_client::command_runner::ScriptedCommandRunner;
use appduct_daemon::control_server::Reply;
use serde_json::{Value, json};
use support::*;

// ---------------------------------------------------------------------------------------------
// An MRTR retry without an answer checks the channel again
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_mrtr_retry_without_an_answer_gets_input_required_only_with_the_channel() {
    let fake = prompt_fake(&[
        "tools.call",
        "daemon.hello",
        "consent.create",
        "consent.take",
    ]);
    let mut raw = RawClient::start(fake.clone());
    let form = meta_2026(json!({"elicitation": {"form": {}}}));
    let first = json!({"name": "appduct_call_tool", "arguments": {"name": "reset"}, "_meta": form});
    let (r, _) = raw.request(1, "tools/call", first.clone()).await;
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    // A retry that still declares form mode is asked again, with a new handle.
    let mut retry = first.clone();
    retry["requestState"] = r["result"]["requestState"].clone();
    let (r, _) = raw.request(2, "tools/call", retry).await;
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    // A retry that declares no elicitation gets the no-channel row: the call goes to the
    // daemon without consent (which answers policy_denied / no_consent_channel).
    let mut retry = first;
    retry["requestState"] = r["result"]["requestState"].clone();
    retry["_meta"] = meta_2026(json!({}));
    let (r, _) = raw.request(3, "tools/call", retry).await;
    assert_ne!(
        r["result"]["resultType"], "input_required",
        "no input_required for an input type the client did not declare: {r}"
    );
    let calls = fake.requests("tools.call");
    assert_eq!(calls.len(), 1, "{r}");
    assert!(calls[0].get("consent").is_none(), "{calls:?}");
    assert_eq!(fake.requests("consent.create").len(), 2);
}

// ---------------------------------------------------------------------------------------------
// `appduct_status` reports input_required only if the daemon has consent records
// ---------------------------------------------------------------------------------------------

/// Scripts the fake's `daemon.hello` to advertise `features`, failing (with an internal error)
/// the first `failures` hellos; returns the count of hellos received.
fn script_hello(
    fake: &Arc<FakeDaemon>,
    features: &[&'static str],
    failures: usize,
) -> Arc<std::sync::atomic::AtomicUsize> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hellos = Arc::new(AtomicUsize::new(0));
    let failures = AtomicUsize::new(failures);
    let features = features.to_vec();
    let counted = hellos.clone();
    fake.script("daemon.hello", move |_, _, _| {
        counted.fetch_add(1, Ordering::SeqCst);
        let failing = failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let reply = if failing {
            Reply::Err(appduct_protocol::jsonrpc::ErrorObject::application(
                appduct_protocol::errors::ErrorType::InternalError,
                "hello failed",
            ))
        } else {
            Reply::Ok(json!({
                "version": env!("CARGO_PKG_VERSION"), "controlProtocol": 1, "minControlProtocol": 1,
                "pid": 1, "startedAt": "2026-11-30T09:12:03.120Z", "stateDir": "/tmp/x",
                "features": features, "sessionCount": 0, "pendingLinks": 0, "pendingCalls": 0
            }))
        };
        Box::pin(async move { reply })
    });
    hellos
}

/// A line client on a bridge that reaches the fake on every connect, status included.
fn hello_client(fake: &Arc<FakeDaemon>) -> LineClient {
    let bridge = bridge_with_runner(fake, Arc::new(ScriptedCommandRunner::new()));
    LineClient::with_bridge(bridge, fake.clone())
}

async fn status_consent_2026(c: &mut LineClient, id: i64) -> Value {
    let meta = meta_2026(json!({"elicitation": {"form": {}}}));
    let r = c
        .request(
            id,
            "tools/call",
            json!({"name": "appduct_status", "arguments": {}, "_meta": meta}),
        )
        .await;
    r["result"]["structuredContent"]["consent"].clone()
}

#[tokio::test]
async fn status_on_2026_reports_input_required_only_with_consent_records() {
    let old = FakeDaemon::new(&["daemon.status"]);
    script_hello(&old, &["events.subscribe"], 0);
    let mut c = hello_client(&old);
    assert_eq!(
        status_consent_2026(&mut c, 1).await,
        "none",
        "a daemon without consent.records gives no channel"
    );
    let current = FakeDaemon::new(&["daemon.status"]);
    script_hello(
        &current,
        &[appduct_protocol::control::features::CONSENT_RECORDS],
        0,
    );
    let mut c = hello_client(&current);
    assert_eq!(status_consent_2026(&mut c, 1).await, "input_required");
}

// ---------------------------------------------------------------------------------------------
// One transient failure does not disable MRTR or elicitation for good
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_failed_daemon_hello_is_retried_on_the_next_need() {
    let fake = prompt_fake(&["tools.call", "consent.create"]);
    let hellos = script_hello(
        &fake,
        &[appduct_protocol::control::features::CONSENT_RECORDS],
        1,
    );
    let mut c = hello_client(&fake);
    let meta = meta_2026(json!({"elicitation": {"form": {}}}));
    let call = json!({"name": "appduct_call_tool", "arguments": {"name": "reset"}, "_meta": meta});
    // The hello fails: this call has no channel, and goes to the daemon without consent.
    let r = c.request(1, "tools/call", call.clone()).await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(fake.requests("tools.call").len(), 1);
    // The next call asks again, learns consent.records, and gets the MRTR round.
    let r = c.request(2, "tools/call", call).await;
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    assert_eq!(hellos.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// Sends a prompt call and answers its `elicitation/create` with `answer` (a JSON-RPC error
/// object, or a result); returns whether an elicitation was asked at all.
async fn prompt_call(c: &mut LineClient, id: i64, answer: Value) -> bool {
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "appduct_call_tool", "arguments": {"name": "reset"}}});
    c.send_line(&call.to_string()).await;
    let mut asked = false;
    loop {
        let m = c.next().await;
        if m["method"] == "elicitation/create" {
            asked = true;
            let mut reply = json!({"jsonrpc": "2.0", "id": m["id"]});
            if answer.get("code").is_some() {
                reply["error"] = answer.clone();
            } else {
                reply["result"] = answer.clone();
            }
            c.send_line(&reply.to_string()).await;
        } else if m["id"] == id {
            return asked;
        }
    }
}

#[tokio::test]
async fn only_a_rejected_form_request_disables_elicitation() {
    let fake = prompt_fake(&["tools.call"]);
    let mut c = LineClient::start(fake.clone());
    c.initialize_with(json!({"elicitation": {}})).await;
    let transient = json!({"code": -32603, "message": "busy"});
    assert!(prompt_call(&mut c, 1, transient.clone()).await);
    // A transient failure costs that call its channel, not the next one.
    assert!(prompt_call(&mut c, 2, transient).await, "asked again");
    let malformed = json!({"unexpected": true});
    assert!(prompt_call(&mut c, 3, malformed).await);
    assert!(prompt_call(&mut c, 4, json!({"code": -32603, "message": "x"})).await);
    // Invalid params: the client rejects the form request; it is not asked again.
    let rejected = json!({"code": -32602, "message": "unknown field mode"});
    assert!(prompt_call(&mut c, 5, rejected).await);
    assert!(
        !prompt_call(&mut c, 6, json!({"action": "accept"})).await,
        "a client that rejects the request is not asked again"
    );
    // Every call without consent went to the daemon without it.
    let calls = fake.requests("tools.call");
    assert_eq!(calls.len(), 6);
    assert!(
        calls.iter().all(|p| p.get("consent").is_none()),
        "{calls:?}"
    );
}
