//! Malformed requests: tools/call params that are not an object are -32602, unknown methods
//! -32601, and the stdio framing answers lines that are not JSON or not JSON-RPC requests with
//! an error carrying an `id` member (§M6).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use serde_json::{Value, json};
use support::*;

// ---------------------------------------------------------------------------------------------
// Malformed tools/call params are -32602, unknown methods -32601
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

#[tokio::test]
async fn lines_that_are_not_json_rpc_requests_get_errors_with_an_id_member() {
    let mut c = LineClient::start(FakeDaemon::new(&[]));
    c.initialize().await;
    let cases = [
        ("this is not json", -32700, Value::Null),
        (r#"{"jsonrpc":"2.0","id":77}"#, -32600, json!(77)),
        ("[1,2]", -32600, Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":78,"method":"tools/list","params":[1]}"#,
            -32600,
            json!(78),
        ),
    ];
    for (line, code, id) in cases {
        c.send_line(line).await;
        let r = c.next().await;
        assert_eq!(r["jsonrpc"], "2.0", "{line}: {r}");
        assert_eq!(r["error"]["code"], code, "{line}: {r}");
        assert_eq!(
            r.as_object().unwrap().get("id"),
            Some(&id),
            "{line}: the reply has an id member: {r}"
        );
    }
    // A malformed notification is never answered, and the server is still serving.
    c.send_line(r#"{"jsonrpc":"2.0","method":"notifications/x","params":[1]}"#)
        .await;
    let r = c.request(5, "tools/list", json!({})).await;
    assert_eq!(r["id"], 5, "the next line is the tools/list answer: {r}");
    assert_eq!(r["result"]["tools"].as_array().unwrap().len(), 10);
}
