//! Argument validation in the `tools.call` pipeline (§C10.8, step 5a of §C10.1) against the
//! composed daemon and in-memory devices: wrong arguments are refused with the SDK-shaped issues
//! and never reach the app, right ones pass, `validation.arguments: "off"` (at start or by
//! `daemon.reload`) lets them through, a schema with a remote `$ref` fails closed, huge and deep
//! values are reported within bounds, and a schema is compiled once per shared descriptor; too
//! many or too large patterns fail closed, a pattern match that gives up refuses, and a draft-07
//! schema without `$schema` is read as draft-07.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use appduct_client::config::ArgumentValidation;
use appduct_daemon::arguments::{MAX_ISSUE_MESSAGE_CHARS, MAX_ISSUES};
use appduct_protocol::control::EventKind;
use serde_json::{Value, json};

use crate::calls_support::*;

/// `sum` declares a strict plain JSON Schema (sdk-ts form 3, sdk-rs); `remote` needs a schema
/// the daemon would have to fetch; `tree` is recursive; `loose` has no input schema.
fn tools() -> Value {
    json!([
        {"name": "sum", "description": "Adds a and b.",
         "input_schema": {"type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"},
                           "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}}},
            "required": ["a", "b"], "additionalProperties": false}},
        {"name": "remote", "description": "Refers to a schema elsewhere.",
         "input_schema": {"type": "object",
            "properties": {"x": {"$ref": "https://schemas.invalid/x.json"}}}},
        {"name": "tree", "description": "A recursive schema.",
         "input_schema": {"$defs": {"node": {"type": "object",
            "properties": {"n": {"$ref": "#/$defs/node"}}, "additionalProperties": false}},
            "$ref": "#/$defs/node"}},
        {"name": "self_ref", "description": "Refers to itself without descending.",
         "input_schema": {"type": "object", "$ref": "#"}},
        {"name": "loose", "description": "No input schema."}
    ])
}

async fn call(f: &mut Fixture, id: i64, name: &str, args: Value) -> Value {
    f.wire
        .request(id, "tools.call", json!({"name": name, "args": args}))
        .await
}

/// The refusal's `data`, checked for the parts every refusal shares.
fn refused(response: &Value) -> &Value {
    let data = &response["error"]["data"];
    assert_eq!(data["type"], "tool_input_validation_error", "{response}");
    assert_eq!(response["error"]["code"], -32000, "{response}");
    assert!(data["callId"].is_string(), "{response}");
    assert_eq!(data["details"]["checkedBy"], "daemon", "{response}");
    data
}

/// Sends `args` to `echo`-like tool `name` and asserts the app received exactly them (the
/// refused calls before it never reached the app).
async fn passes(f: &mut Fixture, id: i64, name: &str, args: Value) {
    f.wire
        .send(id, "tools.call", json!({"name": name, "args": args}))
        .await;
    let (wire_id, frame) = f.device.tool_call().await;
    assert_eq!(frame["name"], name);
    assert_eq!(frame["args"], args);
    f.device.result(&wire_id, json!({"ok": true})).await;
    let response = f.wire.response(id).await;
    assert_eq!(
        response["result"]["result"],
        json!({"ok": true}),
        "{response}"
    );
}

#[tokio::test]
async fn wrong_arguments_are_refused_with_sdk_shaped_issues_and_never_reach_the_app() {
    let mut f = Fixture::with(|o, _| o, tools()).await;
    let response = call(
        &mut f,
        1,
        "sum",
        json!({"a": "one", "tags": ["ok", "toolong"], "c": 3}),
    )
    .await;
    let data = refused(&response);
    let message = response["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Invalid arguments for tool \"sum\": "),
        "{message}"
    );
    let issues = data["details"]["issues"].as_array().unwrap();
    // Each issue is `{message, path?, keyword}`: the path as the SDKs give it (keys as strings,
    // indices as numbers), omitted at the root.
    let find = |keyword: &str| {
        issues
            .iter()
            .find(|i| i["keyword"] == keyword)
            .unwrap_or_else(|| panic!("no {keyword} issue in {issues:?}"))
    };
    assert_eq!(find("type")["path"], json!(["a"]));
    assert_eq!(find("maxLength")["path"], json!(["tags", 1]));
    assert!(find("required").get("path").is_none());
    assert!(
        find("required")["message"]
            .as_str()
            .unwrap()
            .contains("\"b\"")
    );
    assert!(find("additionalProperties").get("path").is_none());
    for issue in issues {
        assert!(issue["message"].is_string(), "{issue}");
        let keys: Vec<&String> = issue.as_object().unwrap().keys().collect();
        assert!(
            keys.iter()
                .all(|k| ["message", "path", "keyword"].contains(&k.as_str())),
            "{issue}"
        );
    }
    assert!(data["details"].get("truncated").is_none());

    // The refusal is settled and audited like the other refusals; the app saw nothing of it.
    let finished = next_of(&mut f.events, EventKind::ToolCallFinished).await;
    assert_eq!(data_of(&finished)["outcome"], "error");
    assert_eq!(
        data_of(&finished)["errorType"],
        "tool_input_validation_error"
    );
    passes(&mut f, 2, "sum", json!({"a": 1, "b": 2.5, "tags": ["x"]})).await;
    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit.len(), 2);
    assert_eq!(audit[0]["outcome"], "error");
    assert_eq!(audit[0]["errorType"], "tool_input_validation_error");
    assert_eq!(audit[0]["tool"], "sum");
    assert_eq!(audit[1]["outcome"], "ok");
    f.stop().await;
}

fn data_of(e: &appduct_protocol::control::EventNotification) -> Value {
    data(e)
}

#[tokio::test]
async fn tools_without_an_input_schema_take_any_arguments() {
    let mut f = Fixture::with(|o, _| o, tools()).await;
    passes(&mut f, 1, "loose", json!({"anything": [1, "two"]})).await;
    f.stop().await;
}

#[tokio::test]
async fn validation_off_lets_wrong_arguments_through_to_the_app() {
    let mut f = Fixture::with_config(
        |c| c.validation.arguments = ArgumentValidation::Off,
        tools(),
    )
    .await;
    passes(&mut f, 1, "sum", json!({"a": "one"})).await;
    // Off does not compile schemas either: a remote `$ref` is not looked at.
    passes(&mut f, 2, "remote", json!({"x": 1})).await;
    f.stop().await;
}

#[tokio::test]
async fn daemon_reload_switches_validation_for_the_next_calls() {
    let mut f = Fixture::with(|o, _| o, tools()).await;
    refused(&call(&mut f, 1, "sum", json!({"a": "one"})).await);
    let path = f.daemon.state_dir().path().join("config.json");
    std::fs::write(&path, r#"{"validation": {"arguments": "off"}}"#).unwrap();
    let reload = f.wire.request(2, "daemon.reload", json!({})).await;
    assert_eq!(
        reload["result"]["applied"],
        json!(["validation"]),
        "{reload}"
    );
    passes(&mut f, 3, "sum", json!({"a": "one"})).await;
    std::fs::write(&path, r#"{"validation": {"arguments": "enforce"}}"#).unwrap();
    let reload = f.wire.request(4, "daemon.reload", json!({})).await;
    assert_eq!(
        reload["result"]["applied"],
        json!(["validation"]),
        "{reload}"
    );
    refused(&call(&mut f, 5, "sum", json!({"a": "one"})).await);
    f.stop().await;
}

#[tokio::test]
async fn a_schema_with_a_remote_ref_fails_closed_without_fetching() {
    // A local file the schema refers to: read, it would make `{"x": "s"}` pass.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("x.json");
    std::fs::write(&local, r#"{"type": "string"}"#).unwrap();
    let mut with_file = tools();
    with_file.as_array_mut().unwrap().push(json!(
        {"name": "local", "description": "Refers to a local file.",
         "input_schema": {"type": "object",
            "properties": {"x": {"$ref": format!("file://{}", local.display())}}}}
    ));
    let mut f = Fixture::with(|o, _| o, with_file).await;
    let response = call(&mut f, 10, "local", json!({"x": "s"})).await;
    let details = &refused(&response)["details"];
    assert_eq!(details["reason"], "schema_unusable", "{response}");
    let issue = details["issues"][0]["message"].as_str().unwrap();
    assert!(issue.contains("does not fetch"), "{issue}");
    let response = call(&mut f, 1, "remote", json!({"x": 1})).await;
    let data = refused(&response);
    let details = &data["details"];
    assert_eq!(details["reason"], "schema_unusable", "{response}");
    let issue = details["issues"][0]["message"].as_str().unwrap();
    assert!(issue.contains("schemas.invalid"), "{issue}");
    assert!(
        details["hint"]
            .as_str()
            .unwrap()
            .contains("validation.arguments")
    );
    // Every call of the tool fails the same way, and other tools are not affected.
    let again = call(&mut f, 2, "remote", json!({})).await;
    assert_eq!(refused(&again)["details"]["reason"], "schema_unusable");
    passes(&mut f, 3, "sum", json!({"a": 1, "b": 2})).await;
    f.stop().await;
}

#[tokio::test]
async fn deep_and_recursive_values_are_checked_without_exhausting_the_stack() {
    let mut f = Fixture::with(|o, _| o, tools()).await;
    // 63 levels of `{"n": …}` (the control protocol's depth bound is 64), valid.
    let mut deep = json!({});
    for _ in 0..62 {
        deep = json!({"n": deep});
    }
    passes(&mut f, 1, "tree", deep.clone()).await;
    // The same with a stray key at the bottom: refused, with the whole path.
    let mut bad = json!({"stray": true});
    for _ in 0..62 {
        bad = json!({"n": bad});
    }
    let response = call(&mut f, 2, "tree", bad).await;
    let path = refused(&response)["details"]["issues"][0]["path"].clone();
    assert_eq!(path.as_array().unwrap().len(), 62, "{response}");
    // A schema that refers to itself without descending terminates too (and accepts).
    passes(&mut f, 3, "self_ref", deep).await;
    f.stop().await;
}

#[tokio::test]
async fn huge_values_are_reported_within_the_bounds() {
    let mut f = Fixture::with(|o, _| o, tools()).await;
    // 5,000 wrong items and a 200 KB string where a number belongs.
    let tags: Vec<Value> = (0..5_000).map(|_| json!(12345)).collect();
    let response = call(
        &mut f,
        1,
        "sum",
        json!({"a": "x".repeat(200_000), "b": 1, "tags": tags}),
    )
    .await;
    let data = refused(&response);
    let issues = data["details"]["issues"].as_array().unwrap();
    assert_eq!(issues.len(), MAX_ISSUES);
    assert_eq!(data["details"]["truncated"], true);
    for issue in issues {
        let message = issue["message"].as_str().unwrap();
        assert!(
            message.chars().count() <= MAX_ISSUE_MESSAGE_CHARS,
            "{message}"
        );
    }
    assert!(
        response.to_string().len() < 32 * 1024,
        "the refusal is small"
    );
    f.stop().await;
}

#[tokio::test]
async fn a_schema_is_compiled_once_per_shared_descriptor() {
    let mut f = Fixture::with(|o, _| o, tools()).await;
    let second = connect_device(&f.daemon, "Pixel 9").await;
    second.register(&f.daemon, tools()).await;
    let sessions = f.daemon.sessions();
    let one = sessions.tool_of(&f.device.session_id, "sum").unwrap();
    let two = sessions.tool_of(&second.session_id, "sum").unwrap();
    assert!(Arc::ptr_eq(&one, &two), "equal descriptors are shared");
    assert!(
        !one.input_check().is_compiled(),
        "nothing compiles at claim"
    );
    f.wire
        .send(
            1,
            "tools.call",
            json!({"selector": f.device.session_id, "name": "sum", "args": {"a": 1, "b": 2}}),
        )
        .await;
    let (wire_id, _) = f.device.tool_call().await;
    f.device.result(&wire_id, json!(3)).await;
    assert_eq!(f.wire.response(1).await["result"]["result"], 3);
    assert!(
        two.input_check().is_compiled(),
        "compiled by the first call"
    );
    // A call on the other session finds it compiled (refused by its own arguments).
    f.wire
        .send(
            2,
            "tools.call",
            json!({"selector": second.session_id, "name": "sum", "args": {"a": 1}}),
        )
        .await;
    refused(&f.wire.response(2).await);
    let closed = second.answer_close();
    f.stop().await;
    closed.await.unwrap();
}

#[tokio::test]
async fn a_schema_with_many_or_huge_patterns_is_refused_unusable() {
    // A hundred distinct patterns (each megabytes compiled with the regex defaults): over the
    // per-schema cap, refused before anything is compiled.
    let many: serde_json::Map<String, Value> = (0..100)
        .map(|i| {
            (
                format!("p{i}"),
                json!({"type": "string", "pattern": format!("\\w{{400}}a{i}")}),
            )
        })
        .collect();
    // One pattern whose compiled form passes the size limit (and the regex defaults' do not).
    let tools = json!([
        {"name": "many", "description": "Many patterns.",
         "input_schema": {"type": "object", "properties": many}},
        {"name": "huge", "description": "One huge pattern.",
         "input_schema": {"type": "object", "patternProperties": {"\\p{L}{100}": {}}}}
    ]);
    let mut f = Fixture::with(|o, _| o, tools).await;
    for (id, name, limit) in [(1, "many", "at most 64"), (2, "huge", "regex")] {
        let response = call(&mut f, id, name, json!({})).await;
        let details = &refused(&response)["details"];
        assert_eq!(details["reason"], "schema_unusable", "{response}");
        let issue = details["issues"][0]["message"].as_str().unwrap();
        assert!(issue.contains(limit), "{issue}");
    }
    f.stop().await;
}

#[tokio::test]
async fn a_pattern_that_gives_up_refuses_and_control_requests_still_answer() {
    // `(a|aa)*` then a back-reference and a `c` that never comes backtracks exponentially (the
    // back-reference keeps it on the backtracking engine): on 40 `a`s the match passes the step
    // limit and gives up, which refuses the argument (§C10.8).
    let tools = json!([
        {"name": "slow", "description": "A pathological pattern.",
         "input_schema": {"type": "object", "properties": {"s": {"type": "array",
            "items": {"type": "string", "pattern": "^(?=(a|aa)*\\1c)"}}}}}
    ]);
    let mut f = Fixture::with(|o, _| o, tools).await;
    let subject = "a".repeat(40);
    f.wire
        .send(
            1,
            "tools.call",
            json!({"name": "slow", "args": {"s": vec![subject; 16]}}),
        )
        .await;
    // The check runs on a blocking thread, so this single-threaded runtime answers another
    // request (ordering is not asserted; the slot wait is proven in arguments.rs's unit tests).
    let status = f.wire.request(2, "daemon.status", json!({})).await;
    assert!(status["result"].is_object(), "{status}");
    let response = f.wire.response(1).await;
    let details = &refused(&response)["details"];
    assert!(details.get("reason").is_none(), "{response}");
    assert_eq!(
        details["issues"][0]["message"],
        "Error executing regex: Max limit for backtracking count exceeded",
        "{response}"
    );
    assert_eq!(details["issues"][0]["path"], json!(["s", 0]), "{response}");
    f.stop().await;
}

#[tokio::test]
async fn a_draft_07_schema_without_schema_keyword_is_read_as_draft_07() {
    // `items` as an array (with `additionalItems`) is a draft-07 form 2020-12 refuses.
    let tools = json!([
        {"name": "old", "description": "A draft-07 schema without $schema.",
         "input_schema": {"type": "object", "properties": {
            "pair": {"type": "array", "items": [{"type": "string"}, {"type": "number"}],
                     "additionalItems": false}}}}
    ]);
    let mut f = Fixture::with(|o, _| o, tools).await;
    passes(&mut f, 1, "old", json!({"pair": ["x", 1]})).await;
    let response = call(&mut f, 2, "old", json!({"pair": [1, "x"]})).await;
    assert!(
        refused(&response)["details"].get("reason").is_none(),
        "{response}"
    );
    let response = call(&mut f, 3, "old", json!({"pair": ["x", 1, 2]})).await;
    assert!(
        refused(&response)["details"].get("reason").is_none(),
        "{response}"
    );
    f.stop().await;
}

/// A check that cannot start (every slot busy, as under a schema whose check never ends) is
/// bounded by the call's deadline: the caller gets `tool_timeout` with `stage:
/// "argument_check"`, nothing reaches the app, and calls pass again once a slot is free
/// (§C10.8; found by the session-9 attack run: an exponential `$ref` fan-out held the slots).
#[tokio::test]
async fn a_call_waiting_for_a_check_slot_ends_at_its_deadline_without_reaching_the_app() {
    let mut f = Fixture::with(|o, _| o, tools()).await;
    let held = appduct_daemon::arguments::hold_all_check_slots()
        .await
        .unwrap();
    // Without the deadline the call would wait for a slot for as long as the slots are held:
    // bound the test's own wait so that it fails instead of hanging.
    let response = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        f.wire.request(
            1,
            "tools.call",
            json!({"name": "sum", "args": {"a": 1, "b": 2}, "timeoutMs": 1000}),
        ),
    )
    .await
    .expect("the call waiting for a check slot was never answered");
    drop(held);
    let data = &response["error"]["data"];
    assert_eq!(data["type"], "tool_timeout", "{response}");
    assert_eq!(data["details"]["stage"], "argument_check", "{response}");
    assert_eq!(data["details"]["deadlineMs"], 1000, "{response}");
    f.device.assert_no_frame();
    passes(&mut f, 2, "sum", json!({"a": 1, "b": 2})).await;
    f.stop().await;
}
