//! SEC-46 through the MCP bridge (SECURITY.md §4.12, §M10.4): an MRTR consent handle that is
//! unknown, expired, reused, or presented with a different tool, different arguments, another
//! selector or another timeout never produces a `tools.call` (so never a `tool_call` frame),
//! even with an accepting input response. Expiry itself is the daemon's (`consent.take`
//! answers an expired record like an unknown one: `daemon/tests/consent_records.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use appduct_protocol::control::PolicyDecision;
use serde_json::{Value, json};
use support::*;

const ID: &str = "q3VfZ0xkR2ptTnB4";
const ALIAS: &str = "pixel-8";

fn prompt_tool(name: &str) -> appduct_protocol::control::ToolsListEntry {
    tool(
        json!({"name": name, "description": "Needs consent.",
               "input_schema": {"type": "object", "properties": {"a": {"type": "number"}}}}),
        PolicyDecision::Prompt,
    )
}

/// A 2026-era `tools/call` of `appduct_call_tool` with `arguments`.
fn call(arguments: Value) -> Value {
    json!({"name": "appduct_call_tool", "arguments": arguments,
           "_meta": meta_2026(json!({"elicitation": {"form": {}}}))})
}

/// The same call as a retry carrying `handle` and an accepting answer.
fn accepted_retry(arguments: Value, handle: &str) -> Value {
    let mut retry = call(arguments);
    retry["requestState"] = json!(handle);
    retry["inputResponses"] = json!({"appduct_consent": {"action": "accept"}});
    retry
}

fn declined_reason(response: &Value) -> Value {
    response["result"]["_meta"]["appduct/error"]["details"]["reason"].clone()
}

fn next_id(id: &mut i64) -> i64 {
    *id += 1;
    *id
}

#[tokio::test]
async fn sec_46_a_consent_handle_never_runs_another_call() {
    let fake = FakeDaemon::new(&[
        "sessions.describe",
        "tools.list",
        "tools.call",
        "events.subscribe",
        "daemon.hello",
        "consent.create",
        "consent.take",
    ]);
    fake.add_session(
        session(ID, ALIAS),
        vec![prompt_tool("wipe"), prompt_tool("other")],
    );
    let mut raw = RawClient::start(fake.clone());
    let original = json!({"selector": ALIAS, "name": "wipe", "args": {"a": 1}});
    let mut id = 0;

    // Unknown handles, including one of the daemon's shape.
    for unknown in [
        "cr_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "",
        "not-a-handle",
    ] {
        let (r, _) = raw
            .request(
                next_id(&mut id),
                "tools/call",
                accepted_retry(original.clone(), unknown),
            )
            .await;
        assert_eq!(declined_reason(&r), "expired", "{unknown:?}: {r}");
    }

    // Each variation is presented with a fresh handle for the original call.
    let variations = [
        json!({"selector": ALIAS, "name": "other", "args": {"a": 1}}),
        json!({"selector": ALIAS, "name": "wipe", "args": {"a": 2}}),
        json!({"selector": ALIAS, "name": "wipe", "args": {"a": 1, "b": 0}}),
        json!({"selector": ID, "name": "wipe", "args": {"a": 1}}),
        json!({"selector": ALIAS, "name": "wipe", "args": {"a": 1}, "timeoutMs": 5000}),
    ];
    for variation in variations {
        let (first, _) = raw
            .request(next_id(&mut id), "tools/call", call(original.clone()))
            .await;
        assert_eq!(first["result"]["resultType"], "input_required", "{first}");
        let handle = first["result"]["requestState"].as_str().unwrap().to_owned();
        let (r, _) = raw
            .request(
                next_id(&mut id),
                "tools/call",
                accepted_retry(variation.clone(), &handle),
            )
            .await;
        assert_eq!(declined_reason(&r), "mismatch", "{variation}: {r}");
        // The mismatch consumed the handle: the original call cannot use it either.
        let (r, _) = raw
            .request(
                next_id(&mut id),
                "tools/call",
                accepted_retry(original.clone(), &handle),
            )
            .await;
        assert_eq!(declined_reason(&r), "expired", "{variation}: {r}");
    }
    assert!(
        fake.requests("tools.call").is_empty(),
        "a consent handle ran a call"
    );

    // Positive control: the matching retry runs exactly once; reusing its handle does not.
    let (first, _) = raw
        .request(next_id(&mut id), "tools/call", call(original.clone()))
        .await;
    let handle = first["result"]["requestState"].as_str().unwrap().to_owned();
    let (r, _) = raw
        .request(
            next_id(&mut id),
            "tools/call",
            accepted_retry(original.clone(), &handle),
        )
        .await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    let (r, _) = raw
        .request(
            next_id(&mut id),
            "tools/call",
            accepted_retry(original.clone(), &handle),
        )
        .await;
    assert_eq!(declined_reason(&r), "expired", "{r}");
    let sent = fake.requests("tools.call");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["name"], "wipe");
    assert_eq!(sent[0]["selector"], ID, "routed by the record's session id");
}

/// SECURITY.md §4.13: the consent message names the tool, the alias and the session id, and shows the
/// arguments cut to 2048 characters.
#[tokio::test]
async fn the_consent_message_names_the_call_and_cuts_long_arguments() {
    let fake = FakeDaemon::new(&[
        "sessions.describe",
        "tools.list",
        "events.subscribe",
        "daemon.hello",
        "consent.create",
    ]);
    fake.add_session(session(ID, ALIAS), vec![prompt_tool("wipe")]);
    let mut raw = RawClient::start(fake.clone());
    let long = "x".repeat(5000);
    let (r, _) = raw
        .request(
            1,
            "tools/call",
            call(json!({"selector": ALIAS, "name": "wipe", "args": {"a": long}})),
        )
        .await;
    let message = r["result"]["inputRequests"]["appduct_consent"]["params"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no consent message in {r}"))
        .to_owned();
    assert!(message.contains("\"wipe\""), "{message}");
    assert!(message.contains(ALIAS) && message.contains(ID), "{message}");
    let shown = message
        .lines()
        .find_map(|l| l.strip_prefix("Arguments: "))
        .unwrap_or_else(|| panic!("no arguments line in {message}"));
    assert_eq!(shown.chars().count(), 2048 + 1, "{shown}");
    assert!(shown.ends_with('…'));
    assert!(fake.requests("tools.call").is_empty());
}
