//! Policy at call time and in listings (§C11), consent records (§C8.14) and `tools.list`
//! over the wire (§C8.8), against the composed daemon.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::calls_support;

use std::time::Duration;

use appduct_client::config::Decision;
use appduct_daemon::clock::ManualClock;
use appduct_protocol::control::EventKind;
use calls_support::*;
use serde_json::{Value, json};

fn policy_tools() -> Value {
    let mut tools = standard_tools();
    tools.as_array_mut().unwrap().push(json!(
        {"name": "wipe", "description": "Wipe everything.",
         "annotations": {"destructiveHint": true}}
    ));
    tools
}

/// default allow, destructive deny; overrides: echo deny (beats default), reset_counter allow
/// (beats destructive), slow_task prompt.
async fn policy_fixture() -> Fixture {
    Fixture::with_config(
        |config| {
            config.policy.destructive = Decision::Deny;
            let tools = &mut config.policy.tools;
            tools.insert("pixel-8/echo".into(), Decision::Deny);
            tools.insert("pixel-8/reset_counter".into(), Decision::Allow);
            tools.insert("pixel-8/slow_task".into(), Decision::Prompt);
        },
        policy_tools(),
    )
    .await
}

#[tokio::test]
async fn listings_report_the_policy_calls_will_apply() {
    let mut f = policy_fixture().await;
    let listed = f.wire.request(1, "tools.list", json!({})).await;
    let policies: Vec<(&str, &str)> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["policy"].as_str().unwrap()))
        .collect();
    assert_eq!(
        policies,
        [
            ("echo", "deny"),
            ("quick", "allow"),
            ("reset_counter", "allow"),
            ("slow_task", "prompt"),
            ("wipe", "deny")
        ]
    );
    f.stop().await;
}

#[tokio::test]
async fn a_denial_sends_nothing_and_is_audited_as_denied() {
    let mut f = policy_fixture().await;
    let config_path = f.dir.path().join("config.json").display().to_string();
    let denied = f
        .wire
        .request(1, "tools.call", json!({"name": "wipe", "callId": "w1"}))
        .await;
    let hint = format!(
        "To allow it, ask the person who runs the daemon whether to set policy.tools[\"pixel-8/wipe\"] to \"allow\" in {config_path}."
    );
    assert_eq!(
        denied["error"],
        json!({"code": -32000,
               "message": "Policy denies \"wipe\" on pixel-8 (policy.destructive is \"deny\")",
               "data": {"type": "policy_denied", "callId": "w1",
                        "details": {"reason": "policy", "decision": "deny",
                                    "source": "policy.destructive",
                                    "configKey": "policy.tools[\"pixel-8/wipe\"]",
                                    "configPath": config_path, "hint": hint}}})
    );
    f.device.assert_no_frame();
    let events = drain(&mut f.events);
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, [EventKind::ToolCallFinished], "no tool_call_started");
    let finished = data(&events[0]);
    assert_eq!(finished["outcome"], "denied");
    assert_eq!(finished["deniedReason"], "policy");
    assert!(finished.get("errorType").is_none());

    // The override beats the default (deny) even with consent.
    let denied = f
        .wire
        .request(
            2,
            "tools.call",
            json!({"name": "echo", "consent": "elicitation", "caller": "mcp"}),
        )
        .await;
    assert_eq!(denied["error"]["data"]["details"]["reason"], "policy");
    assert_eq!(
        denied["error"]["data"]["details"]["source"],
        "policy.tools[\"pixel-8/echo\"]"
    );
    f.device.assert_no_frame();

    // The override beats destructive (allow).
    f.wire
        .send(3, "tools.call", json!({"name": "reset_counter"}))
        .await;
    let (wire, _) = f.device.tool_call().await;
    f.device.result(&wire, json!(0)).await;
    assert_eq!(f.wire.response(3).await["result"]["result"], 0);

    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit.len(), 3);
    assert_eq!(
        keys(&audit[0]),
        [
            "ts",
            "callId",
            "sessionId",
            "alias",
            "tool",
            "argsSha256",
            "outcome",
            "deniedReason",
            "durationMs",
            "caller"
        ]
    );
    assert_eq!(
        (&audit[0]["outcome"], &audit[0]["deniedReason"]),
        (&json!("denied"), &json!("policy"))
    );
    assert_eq!(audit[1]["caller"], "mcp");
    assert!(audit[1].get("consent").is_none());
    assert_eq!(audit[2]["outcome"], "ok");
    f.stop().await;
}

#[tokio::test]
async fn prompt_needs_elicitation_consent_and_records_it() {
    let mut f = policy_fixture().await;
    for (id, consent) in [(1, None), (2, Some("client"))] {
        let mut params = json!({"name": "slow_task"});
        if let Some(c) = consent {
            params["consent"] = json!(c);
        }
        let denied = f.wire.request(id, "tools.call", params).await;
        let error = &denied["error"];
        assert_eq!(error["data"]["type"], "policy_denied");
        assert_eq!(
            error["message"],
            "\"slow_task\" on pixel-8 needs a person's consent, and this caller cannot ask for it (policy.tools[\"pixel-8/slow_task\"] is \"prompt\")"
        );
        let details = &error["data"]["details"];
        assert_eq!(details["reason"], "no_consent_channel");
        assert_eq!(details["decision"], "prompt");
        let hint = details["hint"].as_str().unwrap();
        assert!(hint.starts_with(
            "Call it from an MCP client that supports elicitation, or ask the person"
        ));
        // The daemon never tells a caller (maybe an agent) to loosen policy itself.
        assert!(
            !hint.contains("policy set") && !hint.contains("daemon reload"),
            "{hint}"
        );
        assert!(hint.contains(details["configKey"].as_str().unwrap()));
        assert!(hint.contains(details["configPath"].as_str().unwrap()));
    }
    f.device.assert_no_frame();

    f.wire
        .send(
            3,
            "tools.call",
            json!({"name": "slow_task", "consent": "elicitation", "caller": "mcp"}),
        )
        .await;
    let (wire, _) = f.device.tool_call().await;
    // Consent survives a failing tool in the record.
    f.device
        .error(
            &wire,
            json!({"type": "tool_execution_error", "message": "boom"}),
        )
        .await;
    assert_eq!(
        f.wire.response(3).await["error"]["data"]["type"],
        "tool_execution_error"
    );
    // `allow` never records consent, even when sent.
    f.wire
        .send(
            4,
            "tools.call",
            json!({"name": "quick", "consent": "elicitation"}),
        )
        .await;
    let (wire, _) = f.device.tool_call().await;
    f.device.result(&wire, json!(true)).await;
    f.wire.response(4).await;

    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit.len(), 4);
    for record in &audit[..2] {
        assert_eq!(record["deniedReason"], "no_consent_channel");
        assert!(record.get("consent").is_none());
    }
    assert_eq!(audit[2]["consent"], "elicitation");
    assert_eq!(keys(&audit[2]).last().unwrap(), "consent");
    assert_eq!(audit[2]["errorType"], "tool_execution_error");
    assert!(audit[3].get("consent").is_none());
    f.stop().await;
}

#[tokio::test]
async fn consent_records_are_single_use_and_never_audited_or_emitted() {
    let now_ms = 1_764_493_923_120u64;
    let mut f = Fixture::with(|o, _| o.clock(ManualClock::new(now_ms)), standard_tools()).await;
    let sha = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
    let sid = f.device.session_id.clone();
    let created = f
        .wire
        .request(
            1,
            "consent.create",
            json!({"sessionId": sid, "name": "reset_counter", "argsSha256": sha,
                   "selector": "pixel-8", "timeoutMs": 5000}),
        )
        .await;
    let handle = created["result"]["handle"].as_str().unwrap().to_owned();
    assert!(handle.starts_with("cr_") && handle.len() == 46, "{handle}");
    assert_eq!(created["result"]["expiresAt"], (now_ms + 600_000) / 1000);
    let with_ttl = f
        .wire
        .request(
            2,
            "consent.create",
            json!({"sessionId": sid, "name": "echo", "argsSha256": sha, "ttlMs": 5000}),
        )
        .await;
    assert_eq!(with_ttl["result"]["expiresAt"], (now_ms + 5000) / 1000);

    let taken = f
        .wire
        .request(3, "consent.take", json!({"handle": handle}))
        .await;
    assert_eq!(
        taken["result"],
        json!({"sessionId": sid, "name": "reset_counter", "argsSha256": sha,
               "selector": "pixel-8", "timeoutMs": 5000})
    );
    let again = f
        .wire
        .request(4, "consent.take", json!({"handle": handle}))
        .await;
    assert_eq!(again["error"]["code"], -32000);
    assert_eq!(again["error"]["data"]["type"], "invalid_request");
    assert_eq!(
        again["error"]["data"]["details"],
        json!({"reason": "expired"})
    );

    let unknown = f
        .wire
        .request(
            5,
            "consent.create",
            json!({"sessionId": "pixel-8", "name": "echo", "argsSha256": sha}),
        )
        .await;
    assert_eq!(unknown["error"]["data"]["type"], "unknown_session");
    let bad = f
        .wire
        .request(
            6,
            "consent.create",
            json!({"sessionId": sid, "name": "echo", "argsSha256": "ABC"}),
        )
        .await;
    assert_eq!(bad["error"]["code"], -32602);

    assert!(drain(&mut f.events).is_empty());
    assert!(audit_lines(&f.daemon).await.is_empty());
    let dir = f.stop().await;
    let events_log = std::fs::read_to_string(dir.path().join("events.log")).unwrap();
    assert!(!events_log.contains(&handle));
    assert!(!events_log.contains("consent"));
}

#[tokio::test(start_paused = true)]
async fn a_consent_record_expires_after_its_ttl() {
    let mut f = Fixture::new().await;
    let sid = f.device.session_id.clone();
    let created = f
        .wire
        .request(
            1,
            "consent.create",
            json!({"sessionId": sid, "name": "echo", "ttlMs": 1000,
                   "argsSha256": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}),
        )
        .await;
    let handle = created["result"]["handle"].clone();
    tokio::time::sleep(Duration::from_millis(1001)).await;
    let taken = f
        .wire
        .request(2, "consent.take", json!({"handle": handle}))
        .await;
    assert_eq!(taken["error"]["data"]["details"]["reason"], "expired");
    f.stop().await;
}

fn checkout_tools() -> Value {
    json!([
        {"name": "add_item", "description": "Add an item to the cart.",
         "input_schema": {"type": "object", "properties": {"sku": {"type": "string"}},
                          "required": ["sku"]},
         "group": "checkout"},
        {"name": "cart_total", "description": "Return the cart's total in cents.",
         "group": "checkout"},
        {"name": "pay", "description": "Pay with the saved card.", "group": "checkout/payment"},
        {"name": "refund", "description": "Refund a PAYMENT.", "group": "checkout/payment"},
        {"name": "increment", "description": "Add one.", "group": "counter"},
        {"name": "ping", "description": "Liveness."}
    ])
}

#[tokio::test]
async fn tools_list_narrows_filters_pages_and_summarises_groups() {
    let mut f = Fixture::with(|o, _| o, checkout_tools()).await;
    let page = f
        .wire
        .request(1, "tools.list", json!({"group": "checkout", "limit": 1}))
        .await;
    // Schemas come back as sent, key order included; `group` and `policy` follow.
    assert_eq!(
        page["result"].to_string(),
        json!({"tools": [{"name": "add_item", "description": "Add an item to the cart.",
                          "input_schema": {"type": "object",
                                           "properties": {"sku": {"type": "string"}},
                                           "required": ["sku"]},
                          "group": "checkout", "policy": "allow"}],
               "total": 4, "hasMore": true, "offset": 0,
               "groups": [{"group": "checkout", "total": 4},
                          {"group": "checkout/payment", "total": 2},
                          {"group": "counter", "total": 1},
                          {"group": null, "total": 1}]})
        .to_string()
    );
    let filtered = f
        .wire
        .request(2, "tools.list", json!({"filter": "payment", "offset": 0}))
        .await;
    let names: Vec<&str> = filtered["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["refund"]);
    let ungrouped = f
        .wire
        .request(3, "tools.list", json!({"filter": "", "offset": 4}))
        .await;
    // Code-point order: add_item, cart_total, increment, pay, ping, refund.
    assert_eq!(ungrouped["result"]["total"], 6);
    assert_eq!(ungrouped["result"]["tools"].as_array().unwrap().len(), 2);
    assert_eq!(ungrouped["result"]["tools"][0]["name"], "ping");
    assert_eq!(ungrouped["result"]["tools"][0]["group"], Value::Null);
    assert_eq!(ungrouped["result"]["hasMore"], false);
    for (id, params) in [
        (4, json!({"group": "a/b/c"})),
        (5, json!({"group": ""})),
        (6, json!({"filter": "x".repeat(257)})),
        (7, json!({"limit": 0})),
        (8, json!({"offset": -1})),
    ] {
        let bad = f.wire.request(id, "tools.list", params.clone()).await;
        assert_eq!(bad["error"]["code"], -32602, "{params}");
    }
    let unknown = f
        .wire
        .request(9, "tools.list", json!({"selector": "nobody"}))
        .await;
    assert_eq!(unknown["error"]["data"]["type"], "unknown_session");
    f.stop().await;
}
