//! The error contract and argument hygiene (§M4, §M6, §M16 guard 1).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::BTreeSet;

use appduct_mcp::catalog;
use appduct_protocol::control::PolicyDecision;
use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};
use support::*;

/// Built-ins that cannot be driven into an error, with the reason (none today).
const CANNOT_ERROR: &[(&str, &str)] = &[];

#[tokio::test]
async fn every_builtin_is_driven_into_an_error() {
    let fake = FakeDaemon::new(&["sessions.describe", "events.subscribe"]);
    let h = start(
        fake.clone(),
        TestClient::new(ProtocolVersion::V_2025_11_25, None),
    )
    .await;
    let table: Vec<(&str, Value, &str)> = vec![
        (
            catalog::CONNECT,
            json!({"target": "ios-sim", "appId": "com.x"}),
            "invalid_request",
        ),
        (
            catalog::WAIT_FOR_SESSION,
            json!({"sessionId": "nope", "timeoutMs": 1000}),
            "unknown_session",
        ),
        (
            catalog::LIST_TOOLS,
            json!({"search": "x"}),
            "invalid_request",
        ),
        (catalog::DESCRIBE_TOOL, json!({"name": "sum"}), "no_session"),
        (
            catalog::CALL_TOOL,
            json!({"name": "sum", "timeoutMs": 999}),
            "invalid_request",
        ),
        // A malformed callId never reaches the daemon (§M4).
        (
            catalog::CALL_RESULT,
            json!({"callId": "not an id"}),
            "invalid_request",
        ),
        (catalog::LIST_EVENTS, json!({}), "ambiguous_session"),
        (
            catalog::EVENTS,
            json!({"kinds": ["app_event"]}),
            "invalid_request",
        ),
        (catalog::WAIT_FOR_EVENT, json!({}), "invalid_request"),
        (
            catalog::STATUS,
            json!({"cwd": "relative/dir"}),
            "invalid_request",
        ),
    ];
    let listed: BTreeSet<String> = h
        .client
        .peer()
        .list_tools(None)
        .await
        .unwrap()
        .tools
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    let covered: BTreeSet<String> = table
        .iter()
        .map(|(n, _, _)| (*n).to_owned())
        .chain(CANNOT_ERROR.iter().map(|(n, _)| (*n).to_owned()))
        .collect();
    assert_eq!(listed, covered, "a new built-in needs an error case");
    for (name, args, expected) in table {
        if name == catalog::LIST_EVENTS {
            fake.add_session(session("q3VfZ0xkR2ptTnB4", "pixel-8"), vec![]);
            fake.add_session(session("k3J9xQ0vTQm2aB1c", "iphone-15"), vec![]);
        }
        let r = h.call(name, args).await;
        assert_eq!(error_type(&r), expected, "{name}: {r:?}");
    }
    // The ambiguous error lists the aliases.
    let r = h.call(catalog::LIST_EVENTS, json!({})).await;
    let m = error_message(&r);
    assert!(m.contains("pixel-8") && m.contains("iphone-15"), "{m}");
}

#[tokio::test]
async fn unknown_keys_are_named_with_the_accepted_ones() {
    let h = start(
        FakeDaemon::new(&[]),
        TestClient::new(ProtocolVersion::V_2025_11_25, None),
    )
    .await;
    let r = h
        .call(catalog::CALL_TOOL, json!({"name": "sum", "arguments": {}}))
        .await;
    assert_eq!(error_type(&r), "invalid_request");
    assert_eq!(
        error_message(&r),
        "unknown argument \"arguments\"; accepted: selector, name, args, timeoutMs, lease"
    );
    assert_eq!(
        error_details(&r),
        json!({"param": "arguments", "unknownKeys": ["arguments"], "acceptedKeys": ["selector", "name", "args", "timeoutMs", "lease"]})
    );
    // Misspellings on every built-in fail the same way, before any daemon call.
    for (name, bad) in [
        (catalog::CONNECT, "text"),
        (catalog::WAIT_FOR_SESSION, "timeout_ms"),
        (catalog::LIST_TOOLS, "search"),
        (catalog::DESCRIBE_TOOL, "match"),
        (catalog::CALL_TOOL, "text"),
        (catalog::LIST_EVENTS, "kinds"),
        (catalog::EVENTS, "kinds"),
        (catalog::WAIT_FOR_EVENT, "match"),
        (catalog::STATUS, "dir"),
    ] {
        let r = h.call(name, json!({bad: 1})).await;
        assert_eq!(error_type(&r), "invalid_request", "{name}");
        assert_eq!(error_details(&r)["unknownKeys"], json!([bad]));
    }
    assert!(h.fake.methods().is_empty(), "nothing reached the daemon");
}

#[tokio::test]
async fn types_and_ranges_are_checked_never_clamped() {
    let h = start(
        FakeDaemon::new(&[]),
        TestClient::new(ProtocolVersion::V_2025_11_25, None),
    )
    .await;
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            catalog::CALL_TOOL,
            json!({"name": "sum", "timeoutMs": 999}),
            "timeoutMs",
        ),
        (
            catalog::CALL_TOOL,
            json!({"name": "sum", "timeoutMs": 600001}),
            "timeoutMs",
        ),
        (
            catalog::CALL_TOOL,
            json!({"name": "sum", "timeoutMs": 1500.5}),
            "timeoutMs",
        ),
        (
            catalog::CALL_TOOL,
            json!({"name": "sum", "args": [1]}),
            "args",
        ),
        (catalog::CALL_TOOL, json!({"name": ""}), "name"),
        (catalog::CALL_TOOL, json!({"name": null}), "name"),
        (
            catalog::CALL_TOOL,
            json!({"name": "sum", "selector": ""}),
            "selector",
        ),
        (catalog::LIST_TOOLS, json!({"limit": 0}), "limit"),
        (catalog::LIST_TOOLS, json!({"offset": -1}), "offset"),
        (catalog::LIST_TOOLS, json!({"group": "a/b/c"}), "group"),
        (
            catalog::LIST_TOOLS,
            json!({"filter": "x".repeat(257)}),
            "filter",
        ),
        (catalog::DESCRIBE_TOOL, json!({}), "name"),
        (
            catalog::DESCRIBE_TOOL,
            json!({"name": "x".repeat(65)}),
            "name",
        ),
        (catalog::LIST_EVENTS, json!({"name": ""}), "name"),
        (catalog::EVENTS, json!({"since": 1.5}), "since"),
        (
            catalog::EVENTS,
            json!({"payloadMaxBytes": 0}),
            "payloadMaxBytes",
        ),
        (
            catalog::WAIT_FOR_SESSION,
            json!({"sessionId": "x", "timeoutMs": 1500001}),
            "timeoutMs",
        ),
        (
            catalog::WAIT_FOR_SESSION,
            json!({"sessionId": 5}),
            "sessionId",
        ),
        (
            catalog::WAIT_FOR_EVENT,
            json!({"name": "*", "timeoutMs": 0}),
            "timeoutMs",
        ),
        (catalog::CONNECT, json!({"target": "iphone"}), "target"),
        (catalog::CONNECT, json!({"ttlSeconds": 86401}), "ttlSeconds"),
        (catalog::CONNECT, json!({"relaunch": "yes"}), "relaunch"),
        (catalog::STATUS, json!({"cwd": ""}), "cwd"),
    ];
    for (name, args, param) in cases {
        let r = h.call(name, args.clone()).await;
        assert_eq!(error_type(&r), "invalid_request", "{name} {args}");
        assert_eq!(error_details(&r)["param"], param, "{name} {args}");
        assert!(
            error_message(&r).contains(param),
            "{name} {args}: {}",
            error_message(&r)
        );
    }
    assert!(h.fake.methods().is_empty());
}

#[tokio::test]
async fn null_means_absent_and_integral_floats_pass() {
    let fake = FakeDaemon::new(&[
        "sessions.describe",
        "tools.list",
        "tools.call",
        "events.subscribe",
    ]);
    fake.add_session(
        session("q3VfZ0xkR2ptTnB4", "pixel-8"),
        vec![tool(
            json!({"name": "sum", "description": "Add."}),
            PolicyDecision::Allow,
        )],
    );
    let h = start(
        fake.clone(),
        TestClient::new(ProtocolVersion::V_2025_11_25, None),
    )
    .await;
    let r = h
        .call(
            catalog::CALL_TOOL,
            json!({"name": "sum", "selector": null, "args": null, "timeoutMs": 1500.0}),
        )
        .await;
    assert_eq!(structured(&r), json!({"ok": true}));
    let sent = &fake.requests("tools.call")[0];
    assert_eq!(sent["timeoutMs"], json!(1500));
    assert_eq!(sent["args"], json!({}));
    let r = h
        .call(catalog::LIST_TOOLS, json!({"limit": null, "offset": null}))
        .await;
    assert_eq!(structured(&r)["limit"], 50);
    assert!(structured(&r).get("offset").is_none());
}

#[tokio::test]
async fn connect_validates_before_minting() {
    let h = start(
        FakeDaemon::new(&[]),
        TestClient::new(ProtocolVersion::V_2025_11_25, None),
    )
    .await;
    for (args, param) in [
        (json!({"target": "web"}), "url"),
        (json!({"target": "none", "url": "https://x.test"}), "url"),
        (json!({"target": "web", "url": "ftp://x.test"}), "url"),
        (
            json!({"target": "none", "device": "emulator-5554"}),
            "device",
        ),
        (json!({"target": "android", "device": "-bad"}), "device"),
        (
            json!({"target": "web", "url": "https://x.test", "appId": "com.x"}),
            "appId",
        ),
        (json!({"target": "android", "appId": "--evil"}), "appId"),
        (json!({"target": "android", "relaunch": true}), "relaunch"),
        (
            json!({"target": "ios-device", "transport": "web"}),
            "transport",
        ),
        (
            json!({"target": "web", "url": "https://x.test", "transport": "native"}),
            "transport",
        ),
        (json!({"cwd": "relative"}), "cwd"),
        (json!({"cwd": "/definitely/not/here"}), "cwd"),
    ] {
        let r = h.call(catalog::CONNECT, args.clone()).await;
        assert_eq!(error_type(&r), "invalid_request", "{args}");
        assert_eq!(error_details(&r)["param"], param, "{args}");
    }
    assert!(h.fake.methods().is_empty(), "nothing minted");
}

#[tokio::test]
async fn long_details_are_cut_in_the_text_but_complete_in_meta() {
    let f = appduct_mcp::ToolFailure::invalid_request("bad")
        .with_details(json!({"x": "y".repeat(3000)}));
    let r = f.into_result();
    let text = r.content[0].as_text().unwrap().text.clone();
    assert!(text.starts_with("[invalid_request] bad {\"x\":\"yyy"));
    assert!(text.ends_with('…'));
    assert_eq!(
        text.chars().count(),
        "[invalid_request] bad ".chars().count() + 2000 + 1
    );
    assert_eq!(
        r.meta.unwrap().0["appduct/error"]["details"]["x"]
            .as_str()
            .unwrap()
            .len(),
        3000
    );
    assert!(r.structured_content.is_none());
}
