//! The TypeScript SDK as a separate device process (`appduct-playground-node`, §T14.3;
//! SEC-13): a pinned native claim served to the CLI, a wrong pin refused before any upgrade,
//! and the web transport on the loopback listener.

use std::time::Duration;

use appduct_e2e::OrFail as _;
use appduct_e2e::device::mint;
use appduct_e2e::harness::Sandbox;
use appduct_e2e::node::NodeProc;
use serde_json::{Value, json};

const CONFIG: &str = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#;
const WAIT: Duration = Duration::from_secs(15);

fn claimed(line: &Value) -> bool {
    line["listener"] == "sessionChange" && line["type"] == "claimed"
}

#[test]
fn the_node_sdk_claims_a_pinned_link_serves_calls_and_posts_events() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let link = mint(&sb, &[]).or_fail();
    let pin = link
        .pin
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    let mut device = NodeProc::playground(&sb, &link.deep_link, &["--pins", &pin]).or_fail();
    let claim = device.wait_line(WAIT, claimed).or_fail();
    assert_eq!(claim["sessionId"], json!(link.session_id));
    let alias = claim["alias"].as_str().unwrap_or_default().to_owned();

    assert!(sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 5));
    assert_eq!(
        sb.data(&[
            "tools",
            "call",
            &alias,
            "sum",
            "--input",
            r#"{"a": 2, "b": 3}"#
        ])
        .or_fail(),
        json!({"total": 5})
    );
    let thrown = sb
        .run(&["--json", "tools", "call", "throwing_tool"])
        .or_fail();
    assert_eq!(thrown.code, 72, "{thrown:?}");
    assert_eq!(
        thrown.json().or_fail()["error"]["type"],
        "tool_execution_error"
    );

    device.send_line("ping").or_fail();
    let mut events = Value::Null;
    let posted = Sandbox::wait_until(WAIT, || {
        events = sb
            .data(&["events", "since", &alias, "0"])
            .unwrap_or(Value::Null);
        events["events"].as_array().is_some_and(|e| !e.is_empty())
    });
    assert!(posted, "{events}");
    assert_eq!(events["events"][0]["data"]["name"], "playground_ping");

    // End of stdin: the app disconnects (close 1000) and exits 0; the daemon suspends it.
    device.close_stdin();
    assert_eq!(device.proc().wait_exit(WAIT), Some(0));
    assert!(sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["state"] == "suspended"));
}

#[test]
fn the_node_sdk_refuses_a_daemon_with_another_pin_before_any_upgrade() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let link = mint(&sb, &[]).or_fail();
    let other = "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    let device = NodeProc::playground(&sb, &link.deep_link, &["--pins", other]).or_fail();
    let closed = device
        .wait_line(WAIT, |l| {
            l["listener"] == "stateChange" && l["state"] == "closed"
        })
        .or_fail();
    assert_eq!(closed["reason"], "pin_mismatch", "{closed}");
    // Nothing reached the daemon: no session, and the link is still pending and claimable.
    assert_eq!(sb.sessions().or_fail(), Vec::<Value>::new());
    assert_eq!(sb.status().or_fail()["daemon"]["pendingLinks"], 1);
    let pin = link
        .pin
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    let good = NodeProc::playground(&sb, &link.deep_link, &["--pins", &pin]).or_fail();
    good.wait_line(WAIT, claimed).or_fail();
}

#[test]
fn the_node_sdk_claims_a_web_link_on_the_loopback_listener() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let link = mint(&sb, &["--transport", "web"]).or_fail();
    let device = NodeProc::playground(&sb, &link.deep_link, &["--transport", "web"]).or_fail();
    let claim = device.wait_line(WAIT, claimed).or_fail();
    let alias = claim["alias"].as_str().unwrap_or_default().to_owned();
    assert!(sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 5));
    let list = sb.sessions().or_fail();
    assert_eq!(list[0]["transport"], "web");
    assert_eq!(list[0]["sessionId"], json!(link.session_id));
    assert_eq!(
        sb.data(&["tools", "call", &alias, "call_count"]).or_fail(),
        json!({"count": 0})
    );
}
