//! Consent for policy `"prompt"` through the built `appduct mcp` against a real daemon and raw
//! devices (§M7, §M10; SEC-44, SEC-46, SEC-47): the MRTR input-required round trip on
//! 2026-07-28, handles that must never produce a `tool_call` frame, elicitation cancel and
//! timeout, the no-channel denial, and an alias taken over while a prompt is open.
//!
//! "The app was never called" is proven on the device's own socket: frames arrive in order, so
//! after the refused attempts an allowed `probe` call must be the very next `tool_call` the
//! device sees.

use std::time::Duration;

use appduct_e2e::device::{Link, RawDevice, mint};
use appduct_e2e::harness::Sandbox;
use appduct_e2e::mcp::{Mcp, assert_tool_error};
use appduct_e2e::{OrFail as _, blocking};
use serde_json::{Value, json};

/// `guarded` on any `pixel-8` asks first; everything else is allowed.
const CONFIG: &str = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1",
                         "policy": {"tools": {"pixel-8/guarded": "prompt"}}}"#;
const WAIT: Duration = Duration::from_secs(10);
const FORM: &str = r#"{"elicitation": {"form": {}}}"#;

fn form() -> Value {
    serde_json::from_str(FORM).or_fail()
}

/// A raw `Pixel 8` device with `guarded` (destructive, prompt by config) and `probe` (allowed).
async fn pixel(sb: &Sandbox) -> (Link, RawDevice) {
    let link = blocking(|| mint(sb, &[])).or_fail();
    let (mut device, ack) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    assert_eq!(ack["alias"], "pixel-8");
    device
        .register(json!([
            {"name": "guarded", "description": "Needs consent.",
             "annotations": {"destructiveHint": true}},
            {"name": "probe", "description": "Always allowed."}
        ]))
        .await
        .or_fail();
    let id = link.session_id.clone();
    let registered = blocking(|| {
        sb.wait_sessions(WAIT, |l| {
            l.iter()
                .any(|s| s["sessionId"] == json!(id) && s["toolCount"] == 2)
        })
    });
    assert!(registered, "{:?}", blocking(|| sb.sessions()));
    (link, device)
}

fn call_args(name: &str, arguments: Value) -> Value {
    let mut args = arguments;
    args["name"] = json!(name);
    json!({"name": "appduct_call_tool", "arguments": args})
}

/// Calls `probe` on `selector` and requires it to be the next frame the device sees: no
/// `tool_call` reached the device since its last one (frames are ordered on one socket).
async fn probe_is_next(mcp: &mut Mcp, device: &mut RawDevice, selector: &str, v2026: bool) {
    let mut params = call_args("probe", json!({"selector": selector}));
    let id = blocking(|| {
        if v2026 {
            mcp.send_request_2026("tools/call", &mut params, json!({}))
        } else {
            mcp.send_request("tools/call", params.clone())
        }
    })
    .or_fail();
    let call = device.expect_frame("tool_call").await.or_fail();
    assert_eq!(
        call["name"], "probe",
        "a refused call reached the app: {call}"
    );
    device.reply(&call, json!({"probed": true})).await.or_fail();
    let done = blocking(|| mcp.wait_response(id)).or_fail();
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"probed": true}),
        "{done}"
    );
}

/// Audit records, once at least `count` exist (audit files are written asynchronously).
fn wait_audit(sb: &Sandbox, count: usize) -> Vec<Value> {
    let mut records = Vec::new();
    Sandbox::wait_until(WAIT, || {
        records = sb.audit_records();
        records.len() >= count
    });
    records
}

/// The first MRTR round of `guarded` with `arguments`; returns the `input_required` result.
fn first_round(mcp: &mut Mcp, arguments: Value) -> Value {
    let reply = mcp
        .request_2026("tools/call", call_args("guarded", arguments), form())
        .or_fail();
    let result = reply["result"].clone();
    assert_eq!(result["resultType"], "input_required", "{reply}");
    result
}

/// A retry of `guarded` carrying `state` and, when given, the consent `action`.
fn retry(arguments: Value, state: &Value, action: Option<&str>) -> Value {
    let mut params = call_args("guarded", arguments);
    params["requestState"] = state.clone();
    if let Some(action) = action {
        params["inputResponses"] = json!({"appduct_consent": {"action": action, "content": {}}});
    }
    params
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mrtr_input_required_round_trip_on_2026_07_28() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let (link, mut device) = pixel(&sb).await;
    let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
    // No initialize on this revision: discovery, then requests that carry their own _meta.
    let discovered = blocking(|| mcp.request_2026("server/discover", json!({}), form())).or_fail();
    assert_eq!(
        discovered["result"]["supportedVersions"],
        json!(["2025-06-18", "2025-11-25", "2026-07-28"]),
        "{discovered}"
    );

    // First round: nothing is called, the bridge asks for input behind an opaque handle.
    let first = blocking(|| first_round(&mut mcp, json!({"args": {"n": 1}})));
    let request = &first["inputRequests"]["appduct_consent"];
    assert_eq!(request["method"], "elicitation/create", "{first}");
    assert_eq!(request["params"]["mode"], "form");
    assert_eq!(
        request["params"]["requestedSchema"],
        json!({"type": "object", "properties": {}})
    );
    assert_eq!(
        request["params"]["message"],
        format!(
            "appduct wants to run \"guarded\" on pixel-8 (session {}).\nArguments: {{\"n\":1}}\n\
             The app marks this tool as destructive.\nAllow this call?",
            link.session_id
        )
    );
    let handle = first["requestState"].as_str().unwrap_or_default();
    assert!(
        handle.starts_with("cr_") && handle.len() == 3 + 43,
        "not a consent handle: {first}"
    );

    // Accept: the app receives the call, and the result completes the request.
    let id = blocking(|| {
        mcp.send_request_2026(
            "tools/call",
            &mut retry(
                json!({"args": {"n": 1}}),
                &first["requestState"],
                Some("accept"),
            ),
            form(),
        )
    })
    .or_fail();
    let call = device.expect_frame("tool_call").await.or_fail();
    assert_eq!(call["name"], "guarded");
    assert_eq!(call["args"], json!({"n": 1}));
    device.reply(&call, json!({"ran": 1})).await.or_fail();
    let accepted = blocking(|| mcp.wait_response(id)).or_fail();
    let result = &accepted["result"];
    assert_eq!(result["resultType"], "complete", "{accepted}");
    assert_eq!(result["structuredContent"], json!({"ran": 1}));
    assert_eq!(result["_meta"]["appduct/call"]["alias"], "pixel-8");
    assert_eq!(
        result["_meta"]["appduct/call"]["sessionId"],
        json!(link.session_id)
    );

    // Decline: consent_declined, and the app never hears of it.
    let first = blocking(|| first_round(&mut mcp, json!({"args": {"n": 2}})));
    let declined = blocking(|| {
        mcp.request_2026(
            "tools/call",
            retry(
                json!({"args": {"n": 2}}),
                &first["requestState"],
                Some("decline"),
            ),
            form(),
        )
    })
    .or_fail();
    let error = assert_tool_error(&declined["result"], "consent_declined");
    assert_eq!(
        error["details"],
        json!({"reason": "declined"}),
        "{declined}"
    );
    probe_is_next(&mut mcp, &mut device, "pixel-8", true).await;

    // A retry without an answer asks again with a new handle, never an error.
    let first = blocking(|| first_round(&mut mcp, json!({})));
    let again = blocking(|| {
        mcp.request_2026(
            "tools/call",
            retry(json!({}), &first["requestState"], None),
            form(),
        )
    })
    .or_fail();
    assert_eq!(again["result"]["resultType"], "input_required", "{again}");
    assert_ne!(again["result"]["requestState"], first["requestState"]);
    blocking(|| mcp.finish()).or_fail();

    // Audited once, with the consent; the declined round is not audited.
    let records = blocking(|| wait_audit(&sb, 2));
    let guarded: Vec<&Value> = records.iter().filter(|r| r["tool"] == "guarded").collect();
    assert_eq!(guarded.len(), 1, "{records:#?}");
    assert_eq!(guarded[0]["consent"], "elicitation");
    assert_eq!(guarded[0]["outcome"], "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_46_unknown_expired_reused_or_mismatched_handles_never_produce_a_tool_call() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let (_link, mut device) = pixel(&sb).await;
    let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
    let expired_reason = json!({"reason": "expired"});
    let mismatch_reason = json!({"reason": "mismatch"});
    let refused = |mcp: &mut Mcp, params: Value, reason: &Value, case: &str| {
        let reply = blocking(|| mcp.request_2026("tools/call", params, form())).or_fail();
        let error = assert_tool_error(&reply["result"], "consent_declined");
        assert_eq!(&error["details"], reason, "{case}: {reply}");
    };

    // Unknown: a well-formed handle the daemon never issued, and one that is not a handle.
    let forged = json!(format!("cr_{}", "A".repeat(43)));
    refused(
        &mut mcp,
        retry(json!({}), &forged, Some("accept")),
        &expired_reason,
        "forged",
    );
    refused(
        &mut mcp,
        retry(json!({}), &json!("not-a-handle"), Some("accept")),
        &expired_reason,
        "garbage",
    );

    // Reused: accepted once (the app is called), then presented again.
    let first = blocking(|| first_round(&mut mcp, json!({})));
    let state = first["requestState"].clone();
    let id = blocking(|| {
        mcp.send_request_2026(
            "tools/call",
            &mut retry(json!({}), &state, Some("accept")),
            form(),
        )
    })
    .or_fail();
    let call = device.expect_frame("tool_call").await.or_fail();
    device.reply(&call, json!({"once": true})).await.or_fail();
    let done = blocking(|| mcp.wait_response(id)).or_fail();
    assert_eq!(done["result"]["structuredContent"], json!({"once": true}));
    refused(
        &mut mcp,
        retry(json!({}), &state, Some("accept")),
        &expired_reason,
        "reused",
    );

    // Mismatched: another tool, other arguments, another timeout, another selector. Each
    // attempt consumes its handle, so each gets a fresh first round.
    let cases = [
        ("tool", json!({}), {
            let mut p = call_args("probe", json!({}));
            p["inputResponses"] = json!({"appduct_consent": {"action": "accept"}});
            p
        }),
        (
            "args",
            json!({"args": {"n": 1}}),
            retry(json!({"args": {"n": 2}}), &Value::Null, Some("accept")),
        ),
        (
            "timeoutMs",
            json!({}),
            retry(json!({"timeoutMs": 5000}), &Value::Null, Some("accept")),
        ),
        (
            "selector",
            json!({}),
            retry(json!({"selector": "pixel-8"}), &Value::Null, Some("accept")),
        ),
    ];
    for (case, original, mut changed) in cases {
        let first = blocking(|| first_round(&mut mcp, original));
        changed["requestState"] = first["requestState"].clone();
        refused(&mut mcp, changed, &mismatch_reason, case);
    }
    probe_is_next(&mut mcp, &mut device, "pixel-8", true).await;

    // Expired: a second bridge whose handles live 1 s (the minimum ttlMs). Letting that real
    // timer run out is the point of the case, so the test waits it out.
    let mut short =
        blocking(|| Mcp::spawn_with_env(&sb, &[("APPDUCT_TEST_MRTR_TTL_MS", "1000")])).or_fail();
    let first = blocking(|| first_round(&mut short, json!({})));
    std::thread::sleep(Duration::from_millis(1_300));
    refused(
        &mut short,
        retry(json!({}), &first["requestState"], Some("accept")),
        &expired_reason,
        "expired",
    );
    probe_is_next(&mut short, &mut device, "pixel-8", true).await;
    blocking(|| short.finish()).or_fail();
    blocking(|| mcp.finish()).or_fail();

    // Only the one accepted call was ever audited for `guarded`.
    let records = blocking(|| wait_audit(&sb, 3));
    let guarded = records.iter().filter(|r| r["tool"] == "guarded").count();
    assert_eq!(guarded, 1, "{records:#?}");
}

/// Sends a call of `guarded` from an elicitation client and returns the request id and the
/// bridge's `elicitation/create`.
fn prompted(mcp: &mut Mcp, selector: &str) -> (u64, Value) {
    let id = mcp
        .send_request(
            "tools/call",
            call_args("guarded", json!({"selector": selector})),
        )
        .or_fail();
    let prompt = mcp.wait_server_request("elicitation/create").or_fail();
    (id, prompt)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_cancel_and_timeout_are_consent_declined_and_never_reach_the_app() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let (_link, mut device) = pixel(&sb).await;

    // Cancel (the user dismissed the prompt).
    let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
    blocking(|| mcp.initialize_with("2025-11-25", form())).or_fail();
    let (id, prompt) = blocking(|| prompted(&mut mcp, "pixel-8"));
    blocking(|| mcp.respond(&prompt, json!({"action": "cancel"}))).or_fail();
    let cancelled = blocking(|| mcp.wait_response(id)).or_fail();
    let error = assert_tool_error(&cancelled["result"], "consent_declined");
    assert_eq!(
        error["details"],
        json!({"reason": "cancelled"}),
        "{cancelled}"
    );
    probe_is_next(&mut mcp, &mut device, "pixel-8", false).await;
    blocking(|| mcp.finish()).or_fail();

    // Timeout: a bridge whose consent wait is 300 ms; the prompt is never answered in time.
    let mut mcp =
        blocking(|| Mcp::spawn_with_env(&sb, &[("APPDUCT_TEST_CONSENT_TIMEOUT_MS", "300")]))
            .or_fail();
    blocking(|| mcp.initialize_with("2025-06-18", json!({"elicitation": {}}))).or_fail();
    let (id, prompt) = blocking(|| prompted(&mut mcp, "pixel-8"));
    let timed_out = blocking(|| mcp.wait_response(id)).or_fail();
    let error = assert_tool_error(&timed_out["result"], "consent_declined");
    assert_eq!(
        error["details"],
        json!({"reason": "timed_out"}),
        "{timed_out}"
    );
    // The bridge withdrew its own prompt, and a late accept changes nothing.
    let withdrawn = mcp.pending.iter().any(|m| {
        m["method"] == "notifications/cancelled" && m["params"]["requestId"] == prompt["id"]
    });
    assert!(withdrawn, "the prompt was not cancelled: {:?}", mcp.pending);
    blocking(|| mcp.respond(&prompt, json!({"action": "accept", "content": {}}))).or_fail();
    probe_is_next(&mut mcp, &mut device, "pixel-8", false).await;
    blocking(|| mcp.finish()).or_fail();

    // Neither prompt reached the daemon's call pipeline: only the two probes are audited.
    let records = blocking(|| wait_audit(&sb, 2));
    let tools: Vec<&str> = records.iter().filter_map(|r| r["tool"].as_str()).collect();
    assert_eq!(tools, ["probe", "probe"], "{records:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_44_a_client_without_a_consent_channel_is_denied_by_the_daemon() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let (_link, mut device) = pixel(&sb).await;
    let denied = |result: &Value| {
        let error = assert_tool_error(result, "policy_denied");
        let details = &error["details"];
        assert_eq!(details["reason"], "no_consent_channel", "{result}");
        assert_eq!(details["configKey"], "policy.tools[\"pixel-8/guarded\"]");
        assert!(
            details["hint"]
                .as_str()
                .unwrap_or_default()
                .contains("elicitation"),
            "{result}"
        );
    };

    // An older revision without elicitation, and one that declared url mode only.
    for capabilities in [json!({}), json!({"elicitation": {"url": {}}})] {
        let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
        blocking(|| mcp.initialize_with("2025-11-25", capabilities.clone())).or_fail();
        let status = blocking(|| mcp.call_tool("appduct_status", json!({}))).or_fail();
        assert_eq!(
            status["structuredContent"]["consent"], "none",
            "{capabilities}"
        );
        let result = blocking(|| {
            mcp.call_tool(
                "appduct_call_tool",
                json!({"name": "guarded", "selector": "pixel-8"}),
            )
        })
        .or_fail();
        denied(&result);
        probe_is_next(&mut mcp, &mut device, "pixel-8", false).await;
        let messages = blocking(|| mcp.finish()).or_fail();
        assert!(
            !messages.iter().any(|m| m["method"] == "elicitation/create"),
            "asked a client that cannot answer"
        );
    }

    // 2026-07-28 without form mode: no input_required for an input type it did not declare.
    let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
    let status = blocking(|| {
        mcp.request_2026(
            "tools/call",
            json!({"name": "appduct_status", "arguments": {}}),
            json!({}),
        )
    })
    .or_fail();
    assert_eq!(status["result"]["structuredContent"]["consent"], "none");
    let reply =
        blocking(|| mcp.request_2026("tools/call", call_args("guarded", json!({})), json!({})))
            .or_fail();
    assert_eq!(reply["result"]["resultType"], "complete", "{reply}");
    denied(&reply["result"]);
    // The same bridge offers input_required once a request declares form mode.
    let status = blocking(|| {
        mcp.request_2026(
            "tools/call",
            json!({"name": "appduct_status", "arguments": {}}),
            form(),
        )
    })
    .or_fail();
    assert_eq!(
        status["result"]["structuredContent"]["consent"],
        "input_required"
    );
    probe_is_next(&mut mcp, &mut device, "pixel-8", true).await;
    blocking(|| mcp.finish()).or_fail();

    // Each denial is audited by the daemon as denied / no_consent_channel, never called.
    let records = blocking(|| wait_audit(&sb, 6));
    let guarded: Vec<&Value> = records.iter().filter(|r| r["tool"] == "guarded").collect();
    assert_eq!(guarded.len(), 3, "{records:#?}");
    for record in guarded {
        assert_eq!(record["outcome"], "denied", "{record}");
        assert_eq!(record["deniedReason"], "no_consent_channel", "{record}");
        assert!(record.get("consent").is_none(), "{record}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_47_a_call_for_an_ended_session_never_reaches_the_device_that_inherited_its_alias() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let (old_link, mut old) = pixel(&sb).await;
    // A second, unrelated device stays connected throughout.
    let other_link = blocking(|| mint(&sb, &[])).or_fail();
    let (_other, ack) = RawDevice::claim(&other_link, "iPhone 15").await.or_fail();
    assert_eq!(ack["alias"], "iphone-15");

    let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
    blocking(|| mcp.initialize_with("2025-11-25", form())).or_fail();
    // The selector resolves to the old session while its prompt is open…
    let (id, prompt) = blocking(|| prompted(&mut mcp, "pixel-8"));
    assert!(
        prompt["params"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&old_link.session_id),
        "{prompt}"
    );
    // …then that session ends and a new device of the same model takes the alias.
    let revoked = blocking(|| sb.run(&["sessions", "revoke", &old_link.session_id])).or_fail();
    assert_eq!(revoked.code, 0, "{revoked:?}");
    let closed = old.expect_close().await.or_fail();
    assert_eq!(closed.code, Some(1000), "{closed:?}");
    let (_new_link, mut new) = pixel(&sb).await;

    blocking(|| mcp.respond(&prompt, json!({"action": "accept", "content": {}}))).or_fail();
    let stale = blocking(|| mcp.wait_response(id)).or_fail();
    let error = assert_tool_error(&stale["result"], "unknown_session");
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&old_link.session_id)
            || error["details"].to_string().contains(&old_link.session_id),
        "{stale}"
    );

    // Naming the old session id directly fails the same way, for every session-scoped call.
    for (tool, arguments) in [
        (
            "appduct_call_tool",
            json!({"name": "probe", "selector": old_link.session_id}),
        ),
        (
            "appduct_list_tools",
            json!({"selector": old_link.session_id}),
        ),
        ("appduct_events", json!({"selector": old_link.session_id})),
    ] {
        let result = blocking(|| mcp.call_tool(tool, arguments)).or_fail();
        assert_tool_error(&result, "unknown_session");
    }
    // The alias now names the new device, which has received nothing before this probe.
    probe_is_next(&mut mcp, &mut new, "pixel-8", false).await;
    blocking(|| mcp.finish()).or_fail();
}
