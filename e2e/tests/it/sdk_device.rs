//! The built binary with an `appduct-sdk` device in the test process (ARCHITECTURE.md#test-layers): the CLI mints
//! a link, the device verifies the daemon's SPKI pin inside the TLS handshake before any frame,
//! claims, and serves a tool the CLI calls; a device with the wrong pin never claims.

use std::time::Duration;

use appduct_e2e::harness::Sandbox;
use appduct_protocol::pin::SpkiPin;
use appduct_sdk::{CallContext, Client, ToolError};
use serde_json::{Value, json};

/// Advertise loopback so the device's private-LAN rule accepts the link on any machine.
const CONFIG: &str = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#;

fn fail(e: impl std::fmt::Display) -> ! {
    panic!("{e}")
}

/// Runs a blocking CLI command without stalling the device's tasks.
fn cli<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_sdk_device_claims_a_cli_link_and_serves_a_cli_call() {
    let sb = Sandbox::with_config(CONFIG).unwrap_or_else(|e| fail(e));
    let link =
        cli(|| sb.data(&["sessions", "link", "--scheme", "e2e"])).unwrap_or_else(|e| fail(e));
    let deep = link["deepLink"].as_str().unwrap_or_default().to_owned();
    assert!(deep.contains("&pin=sha256%2F"), "{link}");
    let pin = SpkiPin::parse(link["pin"].as_str().unwrap_or_default()).unwrap_or_else(|e| fail(e));

    // A device that embeds another pin refuses the daemon before sending anything.
    let other = SpkiPin::parse("sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
        .unwrap_or_else(|e| fail(e));
    let wrong = Client::builder()
        .pins([other])
        .build()
        .unwrap_or_else(|e| fail(e));
    let refused = wrong.connect(&deep).await;
    assert_eq!(refused.err().map(|e| e.code()), Some("pin_mismatch"));
    wrong.disconnect();
    assert_eq!(
        cli(|| sb.data(&["sessions", "ls"])).unwrap_or_else(|e| fail(e)),
        json!([])
    );

    // The link is still claimable by a device that trusts the daemon's pin.
    let device = Client::builder()
        .pins([pin])
        .device(Some("e2e"), Some("Fake device"), None)
        .build()
        .unwrap_or_else(|e| fail(e));
    device
        .register_tool(
            &json!({"name": "echo", "description": "Returns its arguments.",
                    "input_schema": {"type": "object"}, "output_schema": {"type": "object"}}),
            |args: Value, _ctx: CallContext| async move { Ok::<_, ToolError>(json!({"echo": args})) },
        )
        .unwrap_or_else(|e| fail(e));
    let session = device.connect(&deep).await.unwrap_or_else(|e| fail(e));
    assert_eq!(session.session_id, link["sessionId"]);

    let listed = cli(|| {
        Sandbox::wait_until(Duration::from_secs(10), || {
            sb.data(&["sessions", "ls"])
                .is_ok_and(|s| s[0]["toolCount"] == 1)
        })
    });
    assert!(listed, "the daemon never listed the device's tool");
    let result = cli(|| sb.data(&["tools", "call", "echo", "--input", r#"{"x": 1}"#]))
        .unwrap_or_else(|e| fail(e));
    assert_eq!(result, json!({"echo": {"x": 1}}));

    device.disconnect();
    let revoked =
        cli(|| sb.data(&["sessions", "revoke", &session.alias])).unwrap_or_else(|e| fail(e));
    assert_eq!(revoked["revoked"], "session");
}
