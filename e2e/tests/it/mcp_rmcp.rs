//! The built `appduct mcp` driven by rmcp's own MCP client over the child's stdio (§M16;
//! issue #6 "Done when"): the handshake, exactly the ten built-ins, describe and call against a
//! real sdk-rs device, the error contract on a typed result, and exit 0 when the client goes
//! away.

use std::process::Stdio;
use std::time::Duration;

use appduct_e2e::device::{mint, sdk_device};
use appduct_e2e::harness::Sandbox;
use appduct_e2e::{OrFail as _, blocking};
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, CallToolResult};
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

fn params(name: &str, arguments: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(name.to_owned());
    if let Value::Object(m) = arguments {
        p = p.with_arguments(m);
    }
    p
}

fn text(r: &CallToolResult) -> String {
    serde_json::to_value(&r.content).or_fail()[0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_client_lists_describes_and_calls_through_the_built_binary() {
    let sb = Sandbox::with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let device = sdk_device(&link, "Pixel 8", "p8").or_fail();
    let _session = device.connect(&link.deep_link).await.or_fail();
    assert!(blocking(|| sb
        .wait_sessions(Duration::from_secs(10), |l| {
            l.len() == 1 && l[0]["toolCount"] == 2
        })));

    let mut cmd = tokio::process::Command::from(sb.command(&["mcp"]));
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().or_fail();
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        panic!("the child's stdio was not piped");
    };
    let client = ().serve((stdout, stdin)).await.or_fail();

    let Some(info) = client.peer_info() else {
        panic!("no initialize result");
    };
    assert_eq!(
        info.server_info.as_ref().map(|s| s.name.as_str()),
        Some("appduct")
    );
    let tools = client.list_all_tools().await.or_fail();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, BUILT_INS);

    let described = client
        .call_tool(params("appduct_describe_tool", json!({"name": "echo"})))
        .await
        .or_fail();
    assert_ne!(described.is_error, Some(true), "{described:?}");
    assert!(
        text(&described).contains("Returns its arguments"),
        "{described:?}"
    );

    let echoed = client
        .call_tool(params(
            "appduct_call_tool",
            json!({"name": "echo", "args": {"n": 7}}),
        ))
        .await
        .or_fail();
    assert_ne!(echoed.is_error, Some(true), "{echoed:?}");
    assert_eq!(
        echoed.structured_content,
        Some(json!({"device": "p8", "args": {"n": 7}}))
    );

    // The error contract on a typed result: `[type]` text, `_meta`, no structuredContent.
    let missing = client
        .call_tool(params("appduct_call_tool", json!({"name": "no_such_tool"})))
        .await
        .or_fail();
    assert_eq!(missing.is_error, Some(true));
    assert!(missing.structured_content.is_none());
    assert!(
        text(&missing).starts_with("[tool_not_found]"),
        "{missing:?}"
    );
    let meta = serde_json::to_value(&missing.meta).or_fail();
    assert_eq!(meta["appduct/error"]["type"], "tool_not_found", "{meta}");

    // The client going away (stdin closed) ends the bridge with exit 0.
    client.cancel().await.or_fail();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .or_fail()
        .or_fail();
    assert!(status.success(), "appduct mcp exited {status:?}");
}
