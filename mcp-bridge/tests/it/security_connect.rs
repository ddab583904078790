//! SEC-40 through the MCP bridge (SECURITY.md §4.9, §M8.1): `appduct_connect` refuses the hostile
//! app ids and device ids before any command runs and before `link.create`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use appduct_client::command_runner::ScriptedCommandRunner;
use appduct_mcp::catalog;
use rmcp::model::ProtocolVersion;
use serde_json::json;
use std::sync::Arc;
use support::*;

const HOSTILE_IDS: [&str; 4] = ["-x", "a;rm -rf ~", "a b", "a'b"];

#[tokio::test]
async fn sec_40_hostile_app_and_device_ids_are_refused_before_anything_runs() {
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.path().join(".appduct")).unwrap();
    std::fs::write(
        project.path().join(".appduct/config.json"),
        r#"{"scheme": "shopapp"}"#,
    )
    .unwrap();
    let cwd = project.path().display().to_string();
    let fake = FakeDaemon::new(&["link.create"]);
    let runner = Arc::new(ScriptedCommandRunner::new());
    let h = start_with_runner(
        fake.clone(),
        TestClient::new(ProtocolVersion::V_2025_11_25, None),
        test_options(),
        test_env(),
        runner.clone(),
    )
    .await;

    for id in HOSTILE_IDS {
        for target in ["android", "ios-device"] {
            let r = h
                .call(
                    catalog::CONNECT,
                    json!({"target": target, "appId": id, "device": "emulator-5554", "cwd": cwd}),
                )
                .await;
            assert_eq!(error_type(&r), "invalid_request", "{target} {id:?}");
            assert_eq!(error_details(&r)["param"], "appId", "{target} {id:?}");
        }
    }
    for device in ["-s", "--help", "a;b", "a b", "a'b", "$(id)"] {
        let r = h
            .call(
                catalog::CONNECT,
                json!({"target": "android", "appId": "com.example.shop", "device": device,
                       "cwd": cwd}),
            )
            .await;
        assert_eq!(error_type(&r), "invalid_request", "{device:?}");
    }
    assert!(runner.invocations().is_empty(), "a command ran");
    assert!(fake.requests("link.create").is_empty(), "a link was minted");
}
