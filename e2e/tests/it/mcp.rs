//! `appduct mcp` as a child process with its own state dir (§M2, §M3, §M5, §M6, §M10,
//! §M11, §M12, §M15; SEC-49): MCP JSON-RPC over stdio on two protocol versions, exactly the
//! ten built-ins, list/describe/call against a playground process, progress, the error
//! contract, elicitation consent (decline, accept), cancellation as a raw device sees it, a
//! second device leaving `tools/list` unchanged, stdout purity, and exit on end of stdin.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use appduct_e2e::device::{RawDevice, mint, sdk_device};
use appduct_e2e::harness::Sandbox;
use appduct_e2e::mcp::{Mcp, assert_tool_error};
use appduct_e2e::{OrFail as _, blocking};
use appduct_sdk::{CallContext, ToolError, ToolErrorType};
use serde_json::{Value, json};

const BUILT_INS: [&str; 10] = [
    "appduct_connect",
    "appduct_wait_for_session",
    "appduct_list_tools",
    "appduct_describe_tool",
    "appduct_call_tool",
    "appduct_list_events",
    "appduct_events",
    "appduct_wait_for_event",
    "appduct_status",
    "appduct_call_result",
];

fn tool_names(list: &Value) -> Vec<&str> {
    list["result"]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default()
}

/// The error contract (§M6); returns the message.
#[track_caller]
fn assert_error(result: &Value, error_type: &str) -> String {
    assert_tool_error(result, error_type)["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Closes stdin and checks exit and stdout purity (SEC-49).
#[track_caller]
fn finish(mcp: Mcp) -> Vec<Value> {
    mcp.finish().or_fail()
}

#[test]
fn initialize_on_each_version_lists_exactly_the_nine_built_ins_and_exits_on_eof() {
    for (requested, answered) in [
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2024-11-05", "2025-11-25"),
    ] {
        let sb = Sandbox::new().or_fail();
        let mut mcp = Mcp::spawn(&sb).or_fail();
        let init = mcp.initialize(requested).or_fail();
        assert_eq!(init["protocolVersion"], answered, "{init}");
        assert_eq!(init["serverInfo"]["name"], "appduct");
        assert_eq!(init["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
        // MCP tasks are offered on 2025-11-25 only (§M19).
        let mut capabilities = json!({"tools": {}, "resources": {}});
        if answered == "2025-11-25" {
            capabilities["tasks"] =
                json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
        }
        assert_eq!(init["capabilities"], capabilities, "{init}");
        let list = mcp.request("tools/list", json!({})).or_fail();
        assert_eq!(tool_names(&list), BUILT_INS);
        assert!(list["result"].get("nextCursor").is_none(), "{list}");
        // A method the bridge does not serve is a protocol error, not a crash.
        let unknown = mcp.request("prompts/list", json!({})).or_fail();
        assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
        finish(mcp);
        // The bridge spawned the daemon of this state dir and never stops it.
        let pid = sb
            .daemon_pid()
            .unwrap_or_else(|| panic!("the bridge spawned no daemon"));
        sb.track_pid(pid);
        assert_eq!(sb.daemon_processes(), vec![pid]);
    }
}

#[test]
fn list_describe_call_progress_and_errors_against_a_playground() {
    let sb = Sandbox::new().or_fail();
    let (_playground, ready) = sb.spawn_ready(&["--json", "playground"]).or_fail();
    let session_id = ready["data"]["sessionId"].clone();
    sb.status().or_fail();
    let mut mcp = Mcp::spawn(&sb).or_fail();
    mcp.initialize("2025-11-25").or_fail();

    let listed = mcp.call_tool("appduct_list_tools", json!({})).or_fail();
    assert!(listed.get("isError").is_none(), "{listed}");
    let structured = &listed["structuredContent"];
    assert_eq!(structured["session"], "playground");
    assert_eq!(structured["sessionId"], session_id);
    assert_eq!(structured["total"], 6);
    assert_eq!(structured["hasMore"], false);
    let names: Vec<&str> = structured["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        names,
        [
            "call_count",
            "counter_chart",
            "reset_counter",
            "slow_task",
            "sum",
            "throwing_tool"
        ]
    );
    let text: Value =
        serde_json::from_str(listed["content"][0]["text"].as_str().unwrap_or_default()).or_fail();
    assert_eq!(&text, structured, "text and structuredContent differ");

    let described = mcp
        .call_tool("appduct_describe_tool", json!({"name": "sum"}))
        .or_fail();
    assert!(described.get("isError").is_none(), "{described}");
    let described_text = described["content"][0]["text"].as_str().unwrap_or_default();
    assert!(described_text.contains("Adds a and b"), "{described}");

    let summed = mcp
        .call_tool(
            "appduct_call_tool",
            json!({"name": "sum", "args": {"a": 1, "b": 2}}),
        )
        .or_fail();
    assert_eq!(summed["structuredContent"], json!({"total": 3}), "{summed}");
    assert_eq!(summed["content"][0]["text"], "{\"total\":3}");
    let call = &summed["_meta"]["appduct/call"];
    assert_eq!(call["alias"], "playground");
    assert_eq!(call["sessionId"], session_id);
    assert!(
        call["callId"]
            .as_str()
            .unwrap_or_default()
            .starts_with("mcp_"),
        "{summed}"
    );

    // Progress for a request with a token, echoing it exactly.
    let id = mcp
        .send_request(
            "tools/call",
            json!({"name": "appduct_call_tool", "arguments": {"name": "slow_task"},
                   "_meta": {"progressToken": "tok-7"}}),
        )
        .or_fail();
    let done = mcp.wait_response(id).or_fail();
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"done": true}),
        "{done}"
    );
    let progress: Vec<(Value, Value)> = mcp
        .pending
        .drain(..)
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| {
            assert_eq!(m["params"]["progressToken"], "tok-7", "{m}");
            (
                m["params"]["progress"].clone(),
                m["params"]["message"].clone(),
            )
        })
        .collect();
    assert_eq!(
        progress,
        [
            (json!(0.33), json!("warming up")),
            (json!(0.66), json!("almost there")),
            (json!(1.0), json!("done")),
        ]
    );

    // The error contract: the app's failure, a missing tool, bad arguments, a non-built-in.
    let thrown = mcp
        .call_tool("appduct_call_tool", json!({"name": "throwing_tool"}))
        .or_fail();
    let message = assert_error(&thrown, "tool_execution_error");
    assert_eq!(message, "throwing_tool always fails on purpose.");
    assert_eq!(thrown["_meta"]["appduct/call"]["alias"], "playground");
    assert_error(
        &mcp.call_tool("appduct_describe_tool", json!({"name": "nope"}))
            .or_fail(),
        "tool_not_found",
    );
    assert_error(
        &mcp.call_tool(
            "appduct_call_tool",
            json!({"name": "sum", "timeoutMs": 999}),
        )
        .or_fail(),
        "invalid_request",
    );
    let foreign = mcp.call_tool("sum", json!({})).or_fail();
    assert_error(&foreign, "tool_not_found");
    assert_eq!(foreign["_meta"]["appduct/error"]["details"]["name"], "sum");

    let messages = finish(mcp);
    assert!(
        messages
            .iter()
            .any(|m| m["method"] == "notifications/progress")
    );
    // The bridge's calls are audited as mcp callers.
    let mut callers = Vec::new();
    Sandbox::wait_until(Duration::from_secs(10), || {
        callers = audit_callers(&sb);
        callers.len() >= 3
    });
    assert_eq!(callers, ["mcp", "mcp", "mcp"]);
}

fn audit_callers(sb: &Sandbox) -> Vec<String> {
    sb.audit_records()
        .iter()
        .filter_map(|r| r["caller"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_cancel_reaches_the_device_and_a_second_device_leaves_tools_list_alone() {
    let sb = Sandbox::with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let (mut device, _ack) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    device
        .register(json!([{"name": "hang", "description": "Never answers by itself."}]))
        .await
        .or_fail();
    assert!(blocking(|| sb
        .wait_sessions(Duration::from_secs(10), |l| {
            l.len() == 1 && l[0]["toolCount"] == 1
        })));

    let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
    blocking(|| mcp.initialize("2025-06-18")).or_fail();
    let before = blocking(|| mcp.request("tools/list", json!({}))).or_fail();

    let id = blocking(|| {
        mcp.send_request(
            "tools/call",
            json!({"name": "appduct_call_tool", "arguments": {"name": "hang"}}),
        )
    })
    .or_fail();
    let call = device.expect_frame("tool_call").await.or_fail();
    let wire_id = call["id"].as_str().unwrap_or_default().to_owned();
    assert!(
        wire_id.starts_with("call_"),
        "the bridge's callId reached the app: {call}"
    );
    blocking(|| {
        mcp.notify(
            "notifications/cancelled",
            json!({"requestId": id, "reason": "user stopped it"}),
        )
    })
    .or_fail();
    let cancel = device.expect_frame("tool_cancel").await.or_fail();
    assert_eq!(cancel["id"], json!(wire_id));
    assert_eq!(cancel["reason"], "mcp_client_cancelled");
    device
        .reply_error(&call, "tool_cancelled", "hang stopped")
        .await
        .or_fail();

    // A second device claims and registers: tools/list does not change.
    let second = blocking(|| mint(&sb, &[])).or_fail();
    let (mut other, _ack) = RawDevice::claim(&second, "Pixel 8").await.or_fail();
    other
        .register(json!([{"name": "extra", "description": "Another tool."}]))
        .await
        .or_fail();
    assert!(blocking(
        || sb.wait_sessions(Duration::from_secs(10), |l| l.len() == 2)
    ));
    let after = blocking(|| mcp.request("tools/list", json!({}))).or_fail();
    assert_eq!(before["result"], after["result"]);
    assert_eq!(tool_names(&after), BUILT_INS);

    let messages = blocking(|| finish(mcp));
    assert!(
        !messages.iter().any(|m| m["id"] == json!(id)),
        "a response was written for the cancelled request"
    );
    // The daemon settled and audited the call as cancelled.
    let mut record = Value::Null;
    let audited = blocking(|| {
        Sandbox::wait_until(Duration::from_secs(10), || {
            record = std::fs::read_dir(sb.state_dir().join("audit"))
                .ok()
                .and_then(|mut d| d.next())
                .and_then(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                .and_then(|t| t.lines().next().and_then(|l| serde_json::from_str(l).ok()))
                .unwrap_or(Value::Null);
            !record.is_null()
        })
    });
    assert!(audited);
    assert_eq!(record["tool"], "hang");
    assert_eq!(record["outcome"], "cancelled");
    assert_eq!(record["caller"], "mcp");
    assert!(
        record["callId"]
            .as_str()
            .unwrap_or_default()
            .starts_with("mcp_"),
        "{record}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_tool_asks_through_elicitation_and_runs_only_when_accepted() {
    let config = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1",
                     "policy": {"tools": {"pixel-8/guarded": "prompt"}}}"#;
    let sb = Sandbox::with_config(config).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let device = sdk_device(&link, "Pixel 8", "p8").or_fail();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    device
        .register_tool(
            &json!({"name": "guarded", "description": "Needs consent.",
                    "input_schema": {"type": "object"}, "output_schema": {"type": "object"},
                    "annotations": {"destructiveHint": true}}),
            move |_args: Value, _ctx: CallContext| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, ToolError>(json!({"ran": true})) }
            },
        )
        .or_fail();
    let session = device.connect(&link.deep_link).await.or_fail();
    assert!(blocking(|| sb
        .wait_sessions(Duration::from_secs(10), |l| {
            l.len() == 1 && l[0]["toolCount"] == 3
        })));

    let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
    blocking(|| mcp.initialize_with("2025-06-18", json!({"elicitation": {}}))).or_fail();
    let call = json!({"name": "appduct_call_tool",
                      "arguments": {"name": "guarded", "args": {"n": 1}}});

    // Decline: nothing reaches the app.
    let id = blocking(|| mcp.send_request("tools/call", call.clone())).or_fail();
    let prompt = blocking(|| mcp.wait_server_request("elicitation/create")).or_fail();
    let message = prompt["params"]["message"].as_str().unwrap_or_default();
    assert_eq!(
        message,
        format!(
            "appduct wants to run \"guarded\" on pixel-8 (session {}).\nArguments: \
             {{\"n\":1}}\nThe app marks this tool as destructive.\nAllow this call?",
            session.session_id
        )
    );
    assert_eq!(
        prompt["params"]["requestedSchema"],
        json!({"type": "object", "properties": {}})
    );
    blocking(|| mcp.respond(&prompt, json!({"action": "decline"}))).or_fail();
    let declined = blocking(|| mcp.wait_response(id)).or_fail();
    assert_error(&declined["result"], "consent_declined");
    assert_eq!(
        declined["result"]["_meta"]["appduct/error"]["details"]["reason"],
        "declined"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // Accept: the call runs once, audited with the consent.
    let id = blocking(|| mcp.send_request("tools/call", call.clone())).or_fail();
    let prompt = blocking(|| mcp.wait_server_request("elicitation/create")).or_fail();
    blocking(|| mcp.respond(&prompt, json!({"action": "accept", "content": {}}))).or_fail();
    let accepted = blocking(|| mcp.wait_response(id)).or_fail();
    assert_eq!(
        accepted["result"]["structuredContent"],
        json!({"ran": true}),
        "{accepted}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    blocking(|| finish(mcp));

    let mut records = Vec::new();
    blocking(|| {
        Sandbox::wait_until(Duration::from_secs(10), || {
            records = sb.audit_records();
            !records.is_empty()
        })
    });
    assert_eq!(
        records.len(),
        1,
        "a declined prompt is not audited: {records:?}"
    );
    assert_eq!(records[0]["outcome"], "ok");
    assert_eq!(records[0]["consent"], "elicitation");
    device.disconnect();
}

/// A `daemon run` reporting `version`, kept alive by the returned guard.
fn daemon_reporting(sb: &Sandbox, version: &str) -> appduct_e2e::harness::Proc {
    let mut cmd = sb.command(&["--json", "daemon", "run"]);
    cmd.env("APPDUCT_DAEMON_VERSION_OVERRIDE", version);
    let (proc, ready) = sb.spawn_ready_with(cmd).or_fail();
    if let Some(pid) = ready["data"]["daemon"]["pid"].as_u64() {
        sb.track_pid(pid as u32);
    }
    proc
}

#[test]
fn version_drift_never_reaches_stdout() {
    // A newer daemon: served, with the notice on stderr only.
    let sb = Sandbox::new().or_fail();
    let _newer = daemon_reporting(&sb, "99.0.0");
    let mut mcp = Mcp::spawn(&sb).or_fail();
    mcp.initialize("2025-11-25").or_fail();
    let status = mcp.call_tool("appduct_status", json!({})).or_fail();
    assert!(status.get("isError").is_none(), "{status}");
    let stderr = mcp.stderr();
    finish(mcp);
    assert!(stderr.contains("99.0.0"), "{stderr}");

    // An older busy daemon: one stderr line naming both versions, exit 70, nothing served.
    let sb = Sandbox::new().or_fail();
    let mut older = daemon_reporting(&sb, "0.0.1");
    let mut control = appduct_e2e::control::Control::connect(
        &sb.state_dir().join("daemon.sock"),
        Duration::from_secs(10),
    )
    .or_fail();
    control.result("link.create", json!({})).or_fail();
    let mut mcp = Mcp::spawn(&sb).or_fail();
    assert_eq!(mcp.proc().wait_exit(Duration::from_secs(10)), Some(70));
    assert_eq!(mcp.stdout_lines(), Vec::<String>::new());
    let stderr = mcp.stderr();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("0.0.1"), "{stderr}");
    assert!(lines[0].contains(env!("CARGO_PKG_VERSION")), "{stderr}");
    assert_eq!(
        older.wait_exit(Duration::ZERO),
        None,
        "the busy daemon was replaced"
    );
}

/// Every `additionalProperties: false` in `schema`, by JSON pointer, walking objects and arrays.
fn closed_nodes(schema: &Value, path: &str, found: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            if map.get("additionalProperties") == Some(&json!(false)) {
                found.push(path.to_owned());
            }
            for (key, value) in map {
                closed_nodes(value, &format!("{path}/{key}"), found);
            }
        }
        Value::Array(items) => {
            for (i, value) in items.iter().enumerate() {
                closed_nodes(value, &format!("{path}/{i}"), found);
            }
        }
        _ => {}
    }
}

/// The documented budget for the compact JSON of the `tools` array (§M16 guard 3).
const TOOLS_LIST_BUDGET_CHARS: usize = 16_000;

#[test]
fn every_output_schema_is_open_and_tools_list_fits_its_budget_on_every_version() {
    let sb = Sandbox::new().or_fail();
    let mut lists = Vec::new();
    for version in ["2025-06-18", "2025-11-25"] {
        let mut mcp = Mcp::spawn(&sb).or_fail();
        mcp.initialize(version).or_fail();
        let listed = mcp.request("tools/list", json!({})).or_fail();
        lists.push((version, listed["result"]["tools"].clone()));
        finish(mcp);
    }
    let mut mcp = Mcp::spawn(&sb).or_fail();
    let listed = mcp
        .request_2026("tools/list", json!({}), json!({}))
        .or_fail();
    lists.push(("2026-07-28", listed["result"]["tools"].clone()));
    finish(mcp);

    for (version, tools) in &lists {
        let compact = serde_json::to_string(tools).or_fail();
        let chars = compact.chars().count();
        // The figure the issue asks to see in the test output.
        println!("tools/list on {version}: {chars} characters (budget {TOOLS_LIST_BUDGET_CHARS})");
        assert!(
            chars <= TOOLS_LIST_BUDGET_CHARS,
            "tools/list on {version} is {chars} characters"
        );
        let tools = tools.as_array().cloned().unwrap_or_default();
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, BUILT_INS, "{version}");
        for tool in &tools {
            let name = &tool["name"];
            // Every built-in but appduct_call_tool and appduct_call_result declares an output
            // schema (§M8)…
            let output = tool.get("outputSchema");
            assert_eq!(
                output.is_some(),
                *name != "appduct_call_tool" && *name != "appduct_call_result",
                "{version} {name}: output schema presence"
            );
            // …open at every level, while every input root is closed.
            if let Some(output) = output {
                assert_eq!(output["type"], "object", "{version} {name}");
                let mut closed = Vec::new();
                closed_nodes(output, "", &mut closed);
                assert!(
                    closed.is_empty(),
                    "{version} {name}: output schema closed at {closed:?}"
                );
            }
            assert_eq!(
                tool["inputSchema"]["additionalProperties"], false,
                "{version} {name}"
            );
        }
    }
    // The surface is the same on every version, but for 2025-11-25's task support on
    // appduct_call_tool (§M19).
    let mut on_2025_11 = lists[1].1.clone();
    for tool in on_2025_11.as_array_mut().expect("a tools array") {
        let execution = tool
            .as_object_mut()
            .expect("a tool object")
            .remove("execution");
        let expected =
            (tool["name"] == "appduct_call_tool").then(|| json!({"taskSupport": "optional"}));
        assert_eq!(execution, expected, "{}", tool["name"]);
    }
    assert_eq!(lists[0].1, on_2025_11);
    assert_eq!(lists[0].1, lists[2].1);
}

/// Built-ins that cannot be driven into an error, each with the reason (none today).
const CANNOT_ERROR: &[(&str, &str)] = &[];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_built_in_is_driven_into_an_error_with_its_type_in_text_and_meta() {
    let sb = Sandbox::with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#).or_fail();
    let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
    blocking(|| mcp.initialize("2025-11-25")).or_fail();
    // (built-in, arguments, expected type, live sessions the case needs) — §M16 guard 1.
    let table: [(&str, Value, &str, usize); 10] = [
        (
            "appduct_connect",
            json!({"target": "ios-sim", "appId": "com.x"}),
            "invalid_request",
            0,
        ),
        (
            "appduct_wait_for_session",
            json!({"sessionId": "nope", "timeoutMs": 1000}),
            "unknown_session",
            0,
        ),
        (
            "appduct_list_tools",
            json!({"search": "x"}),
            "invalid_request",
            0,
        ),
        (
            "appduct_describe_tool",
            json!({"name": "sum"}),
            "no_session",
            0,
        ),
        (
            "appduct_call_tool",
            json!({"name": "sum", "timeoutMs": 999}),
            "invalid_request",
            0,
        ),
        (
            "appduct_events",
            json!({"kinds": ["app_event"]}),
            "invalid_request",
            0,
        ),
        ("appduct_wait_for_event", json!({}), "invalid_request", 0),
        (
            "appduct_status",
            json!({"cwd": "relative/dir"}),
            "invalid_request",
            0,
        ),
        ("appduct_list_events", json!({}), "ambiguous_session", 2),
        (
            "appduct_call_result",
            json!({"callId": "never-used"}),
            "invalid_request",
            0,
        ),
    ];
    // A new built-in without an error case fails here.
    let listed = blocking(|| mcp.request("tools/list", json!({}))).or_fail();
    let mut names: Vec<&str> = tool_names(&listed);
    names.sort_unstable();
    let mut covered: Vec<&str> = table
        .iter()
        .map(|(name, ..)| *name)
        .chain(CANNOT_ERROR.iter().map(|(name, _)| *name))
        .collect();
    covered.sort_unstable();
    assert_eq!(names, covered, "every listed built-in needs an error case");

    let mut devices = Vec::new();
    for (name, arguments, expected, sessions) in table {
        while devices.len() < sessions {
            let link = blocking(|| mint(&sb, &[])).or_fail();
            devices.push(RawDevice::claim(&link, "Pixel 8").await.or_fail().0);
        }
        let result = blocking(|| mcp.call_tool(name, arguments.clone())).or_fail();
        let error = assert_tool_error(&result, expected);
        // The text is "[type] message" plus the compact details when there are any.
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        let mut expected_text = format!(
            "[{expected}] {}",
            error["message"].as_str().unwrap_or_default()
        );
        if let Some(details) = error.get("details") {
            expected_text.push(' ');
            expected_text.push_str(&details.to_string());
        }
        assert_eq!(text, expected_text, "{name}");
    }
    let finished = blocking(|| finish(mcp));
    assert!(!finished.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_calls_of_one_tool_get_their_own_progress_and_exactly_one_is_cancelled() {
    let sb = Sandbox::with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let device = sdk_device(&link, "Pixel 8", "p8").or_fail();
    // What the app saw: (wire id, n) per call, (wire id, reason) per cancel.
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<(String, u64)>();
    let (cancel_tx, mut cancels) = tokio::sync::mpsc::unbounded_channel::<(String, String)>();
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = release.clone();
    device
        .register_tool(
            &json!({"name": "steps", "description": "Reports progress until released.",
                    "input_schema": {"type": "object"}, "output_schema": {"type": "object"}}),
            move |args: Value, ctx: CallContext| {
                let n = args["n"].as_u64().unwrap_or_default();
                let started_tx = started_tx.clone();
                let cancel_tx = cancel_tx.clone();
                let gate = gate.clone();
                async move {
                    let id = ctx.call_id().to_owned();
                    ctx.progress(Some(0.25), Some(&format!("n={n} started")));
                    let _ = started_tx.send((id.clone(), n));
                    tokio::select! {
                        reason = ctx.cancelled() => {
                            let _ = cancel_tx.send((id, reason.clone()));
                            return Err(ToolError::new(ToolErrorType::ToolCancelled, reason));
                        }
                        () = gate.notified() => {}
                    }
                    ctx.progress(Some(0.5), Some(&format!("n={n} half")));
                    ctx.progress(Some(1.0), Some(&format!("n={n} done")));
                    Ok::<_, ToolError>(json!({"n": n}))
                }
            },
        )
        .or_fail();
    device.connect(&link.deep_link).await.or_fail();
    assert!(blocking(|| sb
        .wait_sessions(Duration::from_secs(10), |l| {
            l.len() == 1 && l[0]["toolCount"] == 3
        })));

    let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
    blocking(|| mcp.initialize("2025-11-25")).or_fail();
    let request = |n: u64, token: &str| {
        json!({"name": "appduct_call_tool", "arguments": {"name": "steps", "args": {"n": n}},
               "_meta": {"progressToken": token}})
    };
    let kept = blocking(|| mcp.send_request("tools/call", request(1, "tok-a"))).or_fail();
    let victim = blocking(|| mcp.send_request("tools/call", request(2, "tok-b"))).or_fail();
    let wait = Duration::from_secs(10);
    let mut wire = std::collections::BTreeMap::new();
    for _ in 0..2 {
        let (id, n) = tokio::time::timeout(wait, started.recv())
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("both calls did not start"));
        assert!(
            id.starts_with("call_"),
            "a bridge callId reached the app: {id}"
        );
        wire.insert(n, id);
    }
    assert_ne!(wire.get(&1), wire.get(&2), "two calls share a wire id");
    // Both first reports reached their own request before the cancel.
    let progress_of = |messages: &[Value], token: &str| -> Vec<(f64, String)> {
        messages
            .iter()
            .filter(|m| {
                m["method"] == "notifications/progress" && m["params"]["progressToken"] == token
            })
            .map(|m| {
                (
                    m["params"]["progress"].as_f64().unwrap_or(-1.0),
                    m["params"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect()
    };
    let both_reported = blocking(|| {
        let deadline = std::time::Instant::now() + wait;
        while std::time::Instant::now() < deadline {
            if !progress_of(&mcp.pending, "tok-a").is_empty()
                && !progress_of(&mcp.pending, "tok-b").is_empty()
            {
                return true;
            }
            match mcp.next_message(Duration::from_millis(200)) {
                Ok(msg) => mcp.pending.push(msg),
                Err(_) => continue,
            }
        }
        false
    });
    assert!(both_reported, "{:?}", mcp.pending);

    blocking(|| {
        mcp.notify(
            "notifications/cancelled",
            json!({"requestId": victim, "reason": "not this one"}),
        )
    })
    .or_fail();
    let (cancelled_id, reason) = tokio::time::timeout(wait, cancels.recv())
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("the app saw no cancel"));
    assert_eq!(
        Some(&cancelled_id),
        wire.get(&2),
        "the wrong call was cancelled"
    );
    assert_eq!(reason, "mcp_client_cancelled");

    release.notify_one();
    let done = blocking(|| mcp.wait_response(kept)).or_fail();
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"n": 1}),
        "{done}"
    );
    assert!(cancels.try_recv().is_err(), "a second call was cancelled");

    let messages = blocking(|| finish(mcp));
    assert!(
        !messages
            .iter()
            .any(|m| m["id"] == json!(victim) && m.get("method").is_none()),
        "a response was written for the cancelled request"
    );
    // Each token saw only its own call's reports, increasing, the last one flushed before
    // the response.
    let a = progress_of(&messages, "tok-a");
    let b = progress_of(&messages, "tok-b");
    assert!(a.iter().all(|(_, m)| m.starts_with("n=1 ")), "{a:?}");
    assert!(b.iter().all(|(_, m)| m.starts_with("n=2 ")), "{b:?}");
    assert_eq!(b, [(0.25, "n=2 started".to_owned())]);
    assert_eq!(a.first(), Some(&(0.25, "n=1 started".to_owned())));
    assert_eq!(a.last(), Some(&(1.0, "n=1 done".to_owned())));
    assert!(a.windows(2).all(|w| w[0].0 < w[1].0), "{a:?}");
    let done_at = messages
        .iter()
        .position(|m| m["id"] == json!(kept) && m.get("result").is_some());
    let last_a = messages.iter().rposition(|m| {
        m["method"] == "notifications/progress" && m["params"]["progressToken"] == "tok-a"
    });
    assert!(last_a < done_at, "progress after the response");

    // The daemon settled one call ok and the other cancelled.
    let mut records = Vec::new();
    blocking(|| {
        Sandbox::wait_until(Duration::from_secs(10), || {
            records = sb.audit_records();
            records.len() >= 2
        })
    });
    let mut outcomes: Vec<&str> = records
        .iter()
        .filter_map(|r| r["outcome"].as_str())
        .collect();
    outcomes.sort_unstable();
    assert_eq!(outcomes, ["cancelled", "ok"], "{records:#?}");
    device.disconnect();
}

#[test]
fn sigterm_and_sigint_end_the_bridge_with_exit_0_before_and_after_initialize() {
    for (signal, initialize) in [
        ("TERM", false),
        ("INT", false),
        ("TERM", true),
        ("INT", true),
    ] {
        let case = format!("SIG{signal}, initialized: {initialize}");
        let sb = Sandbox::new().or_fail();
        let mut mcp = Mcp::spawn(&sb).or_fail();
        if initialize {
            mcp.initialize("2025-11-25").or_fail();
        } else {
            // The bridge spawns the daemon of this fresh state dir from its startup
            // connection, after it started listening for signals: once the pidfile exists, a
            // signal is the bridge's to handle.
            assert!(
                Sandbox::wait_until(Duration::from_secs(10), || sb.daemon_pid().is_some()),
                "{case}: no daemon was spawned; stderr: {}",
                mcp.stderr()
            );
        }
        if let Some(pid) = sb.daemon_pid() {
            sb.track_pid(pid);
        }
        assert!(mcp.proc().signal(signal), "{case}");
        // Within the 2 s exit grace, plus slack for a loaded machine (§M15).
        let code = mcp.proc().wait_exit(Duration::from_millis(2500));
        assert_eq!(code, Some(0), "{case}: stderr: {}", mcp.stderr());
        let lines = mcp.stdout_lines();
        assert_eq!(lines.len(), usize::from(initialize), "{case}: {lines:?}");
    }
}
