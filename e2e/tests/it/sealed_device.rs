//! The built binary with a sealed `appduct-sdk` device in the test process (issue #23): the
//! project records `platform: react-native` (`appduct init`), so a plain `appduct sessions link`
//! mints a sealed link; `--for react-native` does the same explicitly. The Rust SDK's sealed
//! transport claims it over the wss port's plain route and serves a tool the CLI calls; the
//! session shows its transport and randomness source, and `daemon status` the sealed key.

use std::time::Duration;

use appduct_e2e::harness::Sandbox;
use appduct_protocol::bootstrap;
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
async fn a_react_native_project_gets_sealed_links_and_a_sealed_device_serves_calls() {
    let sb = Sandbox::with_config(CONFIG).unwrap_or_else(|e| fail(e));
    std::fs::create_dir_all(sb.cwd()).unwrap_or_else(|e| fail(e));
    std::fs::write(
        sb.cwd().join("package.json"),
        r#"{"dependencies": {"expo": "~52.0.0", "react-native": "0.76.0"}}"#,
    )
    .unwrap_or_else(|e| fail(e));
    let init = cli(|| sb.data(&["init", "--scheme", "e2e"])).unwrap_or_else(|e| fail(e));
    assert_eq!(init["platform"], "react-native", "{init}");

    // The project's platform picks the kind of link; --for says the same explicitly.
    let link = cli(|| sb.data(&["sessions", "link"])).unwrap_or_else(|e| fail(e));
    assert_eq!(link["transport"], "sealed", "{link}");
    let link =
        cli(|| sb.data(&["sessions", "link", "--for", "react-native"])).unwrap_or_else(|e| fail(e));
    assert_eq!(link["transport"], "sealed", "{link}");
    let deep = link["deepLink"].as_str().unwrap_or_default().to_owned();
    let payload = link["payload"].as_str().unwrap_or_default();
    assert_eq!(deep, format!("e2e:///?appduct={payload}"), "no pin: {link}");
    let sealed = bootstrap::decode_sealed(payload).unwrap_or_else(|e| fail(e));
    let status = cli(|| sb.status()).unwrap_or_else(|e| fail(e));
    let key = status["daemon"]["sealedKey"].as_str().unwrap_or_default();
    assert_eq!(link["sealedKey"], key, "{status}");
    assert_eq!(
        sealed.payload.port,
        status["daemon"]["wssPort"].as_u64().unwrap_or_default() as u16
    );
    // An explicit native link still works, and conflicting flags are refused (exit 64).
    let native =
        cli(|| sb.data(&["sessions", "link", "--for", "native"])).unwrap_or_else(|e| fail(e));
    assert_eq!(native["transport"], "native");
    let (code, _, _) = cli(|| {
        sb.output(&[
            "sessions",
            "link",
            "--for",
            "react-native",
            "--transport",
            "native",
        ])
    });
    assert_eq!(code, 64);

    // A device with the Rust SDK: a sealed link selects the sealed transport by itself.
    let device = Client::builder()
        .device(Some("e2e"), Some("Sealed device"), None)
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
    let sessions = cli(|| sb.data(&["sessions", "ls"])).unwrap_or_else(|e| fail(e));
    assert_eq!(sessions[0]["transport"], "sealed", "{sessions}");
    assert_eq!(sessions[0]["rng"], "csprng", "{sessions}");
    let result = cli(|| sb.data(&["tools", "call", "echo", "--input", r#"{"x": 1}"#]))
        .unwrap_or_else(|e| fail(e));
    assert_eq!(result, json!({"echo": {"x": 1}}));
    let status = cli(|| sb.status()).unwrap_or_else(|e| fail(e));
    assert_eq!(
        status["daemon"]["sessionsByTransport"],
        json!({"sealed": 1}),
        "{status}"
    );

    device.disconnect();
    let revoked =
        cli(|| sb.data(&["sessions", "revoke", &session.alias])).unwrap_or_else(|e| fail(e));
    assert_eq!(revoked["revoked"], "session");
}
