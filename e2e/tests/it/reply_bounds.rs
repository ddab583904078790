//! Issue #20 defect 1 against the built binary: a hostile app fills its registry up to the byte
//! cap with descriptors whose JSON is six times what the daemon holds (control characters
//! escape to `\u0001`), so one `tools.list` of it would be ~47 MiB. The daemon pages the reply
//! under `MAX_CONTROL_REPLY_BYTES`, and the frontends that read whole registries page through:
//! `tools ls --json`, `tools snapshot --write`, and the bridge's `appduct_describe_tool`.

use std::time::Duration;

use appduct_e2e::control::Control;
use appduct_e2e::device::{mint, sdk_device};
use appduct_e2e::harness::Sandbox;
use appduct_e2e::mcp::Mcp;
use appduct_e2e::{OrFail as _, blocking};
use appduct_protocol::descriptor::validate_tool_descriptor;
use appduct_protocol::limits::{MAX_CONTROL_REPLY_BYTES, MAX_REGISTRY_BYTES};
use appduct_sdk::{CallContext, ToolError};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const HOSTILE: usize = 1_900;

/// A descriptor of 4,096 characters, all but the first escaping to six bytes. Every
/// description contains `x`, so a filter of `x` matches every hostile tool.
fn hostile(name: &str) -> Value {
    let description = format!("x{}", "\u{1}".repeat(4_095));
    json!({"name": name, "description": description})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontends_page_through_a_hostile_registry_at_the_byte_cap() {
    let sb = Sandbox::with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let device = sdk_device(&link, "Pixel 8", "p8").or_fail();
    device.connect(&link.deep_link).await.or_fail();
    // Deltas after the ack: one snapshot frame could not carry them.
    let mut held = 0;
    for name in (0..HOSTILE)
        .map(|i| format!("t_{i:04}"))
        .chain(["x".to_owned()])
    {
        let descriptor = hostile(&name);
        held += validate_tool_descriptor(&descriptor).or_fail().held_bytes();
        device
            .register_tool(&descriptor, |_args: Value, _ctx: CallContext| async move {
                Ok::<_, ToolError>(Value::Null)
            })
            .or_fail();
    }
    assert!(held <= MAX_REGISTRY_BYTES, "{held}");
    let count = HOSTILE + 3; // with the device's whoami and echo
    assert!(blocking(|| sb.wait_sessions(WAIT, |l| {
        l.len() == 1 && l[0]["toolCount"] == count
    })));

    // One request gets one bounded page that says there is more.
    let mut control =
        blocking(|| Control::connect(&sb.state_dir().join("daemon.sock"), WAIT)).or_fail();
    let page = blocking(|| control.result("tools.list", json!({}))).or_fail();
    let listed = page["tools"].as_array().map_or(0, Vec::len);
    assert!(listed > 0 && listed < count, "{listed}");
    assert_eq!(page["hasMore"], true);
    assert_eq!(page["total"], count);
    assert!(page.to_string().len() <= MAX_CONTROL_REPLY_BYTES);

    // `tools ls --json`: every tool.
    let ls = blocking(|| sb.data(&["tools", "ls", "pixel-8"])).or_fail();
    assert_eq!(ls["tools"].as_array().map_or(0, Vec::len), count);
    assert_eq!(ls["hasMore"], false);

    // `tools snapshot --write`: the review file holds every tool.
    blocking(|| sb.data(&["tools", "snapshot", "pixel-8", "--write", "snap.json"])).or_fail();
    let written = std::fs::read_to_string(sb.cwd().join("snap.json")).or_fail();
    let doc: Value = serde_json::from_str(&written).or_fail();
    assert_eq!(doc["tools"].as_array().map_or(0, Vec::len), count);

    // `appduct_describe_tool`: the filter `x` matches every hostile tool; `x` sorts last.
    let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
    blocking(|| mcp.initialize("2025-11-25")).or_fail();
    let described =
        blocking(|| mcp.call_tool("appduct_describe_tool", json!({"name": "x"}))).or_fail();
    assert!(described.get("isError").is_none(), "{described}");
    assert_eq!(described["structuredContent"]["name"], "x");
    drop(mcp);
    device.disconnect();
}
