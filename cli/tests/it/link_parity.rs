//! The CLI and the MCP bridge produce byte-identical deep links, and run identical delivery
//! argument vectors, for the same inputs (§D5.1, §L6.4): `sessions link` (its planning and
//! minting code) and `appduct_connect` (through an MCP client) against the fake daemon
//! (`appduct_daemon::testing`), whose `link.create` always answers the same link, with the same
//! scripted `adb` / `xcrun`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use appduct_cli::commands::sessions::link::{self as sessions, LinkRequest, OpenTarget};
use appduct_client::client::{ClientError, ControlClient};
use appduct_client::command_runner::{CommandOutput, ScriptedCommandRunner};
use appduct_client::project::ResolveEnv;
use appduct_client::state_dir::StateDir;
use appduct_daemon::control_server::BoxFuture;
use appduct_daemon::testing::FakeDaemon;
use appduct_mcp::project::ProjectEnv;
use appduct_mcp::{Bridge, BridgeOptions, DaemonConnector};
use appduct_protocol::control::Transport;
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

/// The fake daemon of the comparison: `link.create` alone, answered with one fixed link per
/// transport, its params logged.
fn fixed_links() -> Arc<FakeDaemon> {
    FakeDaemon::new(&["link.create"])
}

fn serve(fake: &Arc<FakeDaemon>) -> ControlClient {
    ControlClient::from_stream(fake.connect())
}

#[derive(Debug)]
struct Connector(Arc<FakeDaemon>);

impl DaemonConnector for Connector {
    fn connect(&self, _spawn: bool) -> BoxFuture<'_, Result<ControlClient, ClientError>> {
        let client = serve(&self.0);
        Box::pin(async move { Ok(client) })
    }
}

/// `adb` / `xcrun` answers: detection output, then successful delivery commands.
fn runner(detection: &str) -> Arc<ScriptedCommandRunner> {
    let r = Arc::new(ScriptedCommandRunner::new());
    for stdout in [detection, "", ""] {
        r.push_output(CommandOutput {
            code: Some(0),
            stdout: stdout.into(),
            stderr: String::new(),
        });
    }
    r
}

fn argv(r: &ScriptedCommandRunner) -> Vec<Vec<String>> {
    r.invocations()
        .into_iter()
        .map(|i| std::iter::once(i.program).chain(i.args).collect())
        .collect()
}

/// One case: `sessions link --open <open> [--transport web]` vs `appduct_connect`.
struct Case {
    open: Option<OpenTarget>,
    transport: Transport,
    detection: &'static str,
    /// `appduct_connect` arguments besides `cwd`.
    connect: Value,
    /// Commands each side must run (detection included).
    commands: usize,
}

struct Outcome {
    deep_link: String,
    argv: Vec<Vec<String>>,
    minted: Vec<Value>,
}

async fn via_cli(case: &Case, project: &std::path::Path, state: &std::path::Path) -> Outcome {
    let fake = fixed_links();
    let client = serve(&fake);
    let req = LinkRequest {
        ttl_seconds: Some(120),
        qr: false,
        scheme: None,
        open: case.open,
        transport: case.transport,
        transport_defaulted: false,
        device: None,
        app_id: None,
        relaunch: false,
        url: None,
        wait: None,
    };
    let env = ResolveEnv {
        dir: project.to_path_buf(),
        home: None,
        state_dir: Some(state.to_path_buf()),
        env_scheme: None,
    };
    let plan = sessions::plan(&req, &env, None).unwrap();
    let r = runner(case.detection);
    let dir = StateDir::new(state).unwrap();
    let success = sessions::mint_and_deliver(&client, &dir, &req, &plan, r.as_ref())
        .await
        .unwrap();
    let minted = fake.requests("link.create");
    Outcome {
        deep_link: success.data["deepLink"].as_str().unwrap().to_owned(),
        argv: argv(&r),
        minted,
    }
}

async fn via_bridge(case: &Case, project: &std::path::Path, state: &std::path::Path) -> Outcome {
    let fake = fixed_links();
    let r = runner(case.detection);
    let options = BridgeOptions {
        state_dir: Some(state.to_path_buf()),
        ..BridgeOptions::default()
    };
    let env = ProjectEnv {
        server_cwd: Some(project.to_path_buf()),
        ..ProjectEnv::default()
    };
    let bridge = Bridge::with_runner(Arc::new(Connector(fake.clone())), options, env, r.clone());
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(running) = rmcp::serve_server(bridge, server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client = ().serve(client_io).await.unwrap();
    let mut args = case.connect.clone();
    args["cwd"] = json!(project.display().to_string());
    args["ttlSeconds"] = json!(120);
    let result = client
        .peer()
        .call_tool(
            CallToolRequestParams::new("appduct_connect")
                .with_arguments(args.as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let data = result.structured_content.unwrap();
    let minted = fake.requests("link.create");
    Outcome {
        deep_link: data["deepLink"].as_str().unwrap().to_owned(),
        argv: argv(&r),
        minted,
    }
}

#[tokio::test]
async fn cli_and_bridge_compose_identical_links_and_run_identical_argv() {
    let project = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.path().join(".appduct")).unwrap();
    std::fs::write(
        project.path().join(".appduct/config.json"),
        r#"{"scheme": "shopapp", "appId": {"android": "com.example.shop"}}"#,
    )
    .unwrap();
    let adb = "List of devices attached\nemulator-5554\tdevice\n";
    let sim = r#"{"devices":{"ios-18":[{"udid":"AAAA-1111","state":"Booted"}]}}"#;
    let cases = [
        Case {
            open: Some(OpenTarget::Android),
            transport: Transport::Native,
            detection: adb,
            connect: json!({"target": "android"}),
            commands: 3,
        },
        Case {
            open: Some(OpenTarget::Android),
            transport: Transport::Web,
            detection: adb,
            connect: json!({"target": "android", "transport": "web"}),
            commands: 3,
        },
        Case {
            open: Some(OpenTarget::IosSim),
            transport: Transport::Native,
            detection: sim,
            connect: json!({"target": "ios-sim"}),
            commands: 2,
        },
        Case {
            open: None,
            transport: Transport::Native,
            detection: "",
            connect: json!({"target": "none"}),
            commands: 0,
        },
        // Sealed links (issue #23): `--for react-native` and `"for": "react-native"`.
        Case {
            open: None,
            transport: Transport::Sealed,
            detection: "",
            connect: json!({"target": "none", "for": "react-native"}),
            commands: 0,
        },
        Case {
            open: Some(OpenTarget::Android),
            transport: Transport::Sealed,
            detection: adb,
            connect: json!({"target": "android", "transport": "sealed"}),
            commands: 3,
        },
    ];
    for case in &cases {
        let cli = via_cli(case, project.path(), state.path()).await;
        let bridge = via_bridge(case, project.path(), state.path()).await;
        let what = &case.connect;
        assert!(cli.deep_link.starts_with("shopapp:///?appduct="), "{what}");
        // Only a native link carries a pin; a sealed link carries the daemon's key inside.
        assert_eq!(
            cli.deep_link.contains("&pin="),
            case.transport == Transport::Native,
            "{what}"
        );
        if case.transport == Transport::Sealed {
            let payload = cli.deep_link.trim_start_matches("shopapp:///?appduct=");
            let sealed = appduct_protocol::bootstrap::decode_sealed(payload).unwrap();
            assert_eq!(sealed.static_key, appduct_daemon::testing::SEALED_KEY);
        }
        assert_eq!(
            cli.deep_link, bridge.deep_link,
            "deep links differ for {what}"
        );
        assert_eq!(cli.argv.len(), case.commands, "{what}: {:?}", cli.argv);
        assert_eq!(cli.argv, bridge.argv, "argument vectors differ for {what}");
        assert_eq!(
            cli.minted, bridge.minted,
            "link.create params differ for {what}"
        );
        assert_eq!(
            appduct_client::qr::terminal_qr(&cli.deep_link).unwrap(),
            appduct_client::qr::terminal_qr(&bridge.deep_link).unwrap()
        );
    }
}
