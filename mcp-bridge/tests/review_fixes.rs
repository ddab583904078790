//! Regression tests for the findings of the bridge review: malformed requests, the fake
//! daemon's guard, cancellation before the consent step and during `appduct_connect`, MRTR
//! retries, the roots cache, `appduct_status` side effects and transient failures
//! (06 §6.1, §6.6, §6.8.1, §6.8.9, §6.10, §6.12, §6.13).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::panic::AssertUnwindSafe;

use rmcp::model::ProtocolVersion;
use serde_json::json;
use support::*;

fn v2025() -> TestClient {
    TestClient::new(ProtocolVersion::V_2025_11_25, None)
}

// ---------------------------------------------------------------------------------------------
// Finding 3: an unregistered daemon method fails the test
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_unregistered_daemon_method_fails_the_test_on_its_own_thread() {
    // `sessions.describe` is not registered: the fake answers -32601 and records it.
    let fake = FakeDaemon::new(&[]);
    let h = start(fake.clone(), v2025()).await;
    let r = h.call("appduct_list_tools", json!({})).await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(fake.unexpected(), vec!["sessions.describe".to_owned()]);
    // Dropping the harness (as the end of a test does) panics here, on the test thread.
    let dropped = std::panic::catch_unwind(AssertUnwindSafe(|| drop(h)));
    assert!(
        dropped.is_err(),
        "the harness must fail the test that reached an unregistered method"
    );
    let raw = RawClient::start(fake);
    let dropped = std::panic::catch_unwind(AssertUnwindSafe(|| drop(raw)));
    assert!(dropped.is_err(), "the raw client checks the record too");
}

// ---------------------------------------------------------------------------------------------
// Finding 1: malformed tools/call params are -32602, unknown methods -32601
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn malformed_tools_call_params_are_invalid_params() {
    let mut raw = RawClient::start(FakeDaemon::new(&[]));
    raw.initialize("2025-11-25", json!({})).await;
    let cases = [
        json!({"name": "appduct_status", "arguments": "x"}),
        json!({"name": "appduct_status", "arguments": [1]}),
        json!({"arguments": {}}),
        json!({"name": 7}),
    ];
    for (i, params) in cases.iter().enumerate() {
        let id = 10 + i as i64;
        let (r, _) = raw.request(id, "tools/call", params.clone()).await;
        assert_eq!(r["error"]["code"], -32602, "{params}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("tools/call"),
            "{r}"
        );
    }
    // A resources/read without a uri is -32602 as well.
    let (r, _) = raw.request(20, "resources/read", json!({})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // Methods the bridge does not serve stay -32601, whatever their params.
    let (r, _) = raw.request(21, "prompts/list", json!({})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    let (r, _) = raw.request(22, "no/such/method", json!({"x": 1})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    // `arguments: null` is no arguments: a normal call.
    let (r, _) = raw
        .request(
            23,
            "tools/call",
            json!({"name": "appduct_describe_tool", "arguments": null}),
        )
        .await;
    assert_eq!(
        r["result"]["_meta"]["appduct/error"]["type"], "invalid_request",
        "{r}"
    );
}
