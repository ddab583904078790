//! `appduct_connect` delivery (§M8.1, §L6.4): device detection and delivery through a
//! scripted `CommandRunner` (exact argument vectors for `adb` and `xcrun`), every check before
//! minting, revoke on a failed delivery, auto-detection and the `qr` field.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::io;
use std::sync::Arc;

use appduct_client::BoxFuture;
use appduct_client::command_runner::{
    CommandInvocation, CommandOutput, CommandRunner, ScriptedCommandRunner,
};
use appduct_mcp::catalog;
use appduct_mcp::project::ProjectEnv;
use appduct_protocol::link::compose_deep_link;
use appduct_protocol::pin::SpkiPin;
use rmcp::model::{CallToolResult, ProtocolVersion};
use serde_json::{Value, json};
use support::*;

const SESSION: &str = "Zk3pQ0mX8sL1vB2n";
const ADB_ONE: &str = "List of devices attached\nemulator-5554\tdevice\n";
const SIM_ONE: &str = r#"{"devices":{"com.apple.CoreSimulator.SimRuntime.iOS-18-1":[{"udid":"A1B2C3D4-0000-1111-2222-333344445555","state":"Booted","name":"iPhone 16"}]}}"#;
const SIM_UDID: &str = "A1B2C3D4-0000-1111-2222-333344445555";

/// A scripted runner that also writes the `--json-output` file of `devicectl list devices`,
/// which the real `xcrun` writes instead of printing.
#[derive(Debug, Default)]
struct Runner {
    script: ScriptedCommandRunner,
    devicectl_json: Option<String>,
}

impl Runner {
    fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn with_devicectl(json: &str) -> Arc<Self> {
        Arc::new(Self {
            script: ScriptedCommandRunner::new(),
            devicectl_json: Some(json.to_owned()),
        })
    }

    fn ok(&self, stdout: &str) -> &Self {
        self.script.push_output(CommandOutput {
            code: Some(0),
            stdout: stdout.into(),
            stderr: String::new(),
        });
        self
    }

    fn fail(&self, code: i32, stderr: &str) -> &Self {
        self.script.push_output(CommandOutput {
            code: Some(code),
            stdout: String::new(),
            stderr: stderr.into(),
        });
        self
    }

    fn missing(&self) -> &Self {
        self.script
            .push_error(io::ErrorKind::NotFound, "No such file or directory");
        self
    }

    /// Every argv run, program first.
    fn argv(&self) -> Vec<Vec<String>> {
        self.script
            .invocations()
            .into_iter()
            .map(|CommandInvocation { program, args, .. }| {
                std::iter::once(program).chain(args).collect()
            })
            .collect()
    }
}

impl CommandRunner for Runner {
    fn run<'a>(
        &'a self,
        program: &'a str,
        args: &'a [String],
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, io::Result<CommandOutput>> {
        if let (Some(json), Some(at)) = (
            &self.devicectl_json,
            args.iter().position(|a| a == "--json-output"),
        ) {
            std::fs::write(&args[at + 1], json).unwrap();
        }
        self.script.run(program, args, env)
    }
}

fn argv(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// A project directory recording the scheme and app ids.
fn project(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".appduct")).unwrap();
    std::fs::write(dir.path().join(".appduct/config.json"), config).unwrap();
    dir
}

fn shop() -> tempfile::TempDir {
    project(
        r#"{"scheme": "shopapp", "appId": {"android": "com.example.shop", "ios": "com.example.ios"}}"#,
    )
}

fn cwd(dir: &tempfile::TempDir) -> String {
    dir.path().display().to_string()
}

async fn harness(fake: Arc<FakeDaemon>, runner: Arc<Runner>, env: ProjectEnv) -> Harness {
    start_with_runner(
        fake,
        TestClient::new(ProtocolVersion::V_2025_11_25, None),
        test_options(),
        env,
        runner,
    )
    .await
}

/// The link the fake's `link.create` answer composes to, by the protocol crate's composer.
fn expected_link(r: &Value, scheme: &str, pinned: bool) -> String {
    let deep = r["deepLink"].as_str().unwrap();
    let payload = deep
        .split("appduct=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let pin = SpkiPin::parse(PIN).unwrap();
    compose_deep_link(scheme, payload, pinned.then_some(&pin)).unwrap()
}

fn details(r: &CallToolResult) -> Value {
    error_details(r)
}

#[tokio::test]
async fn android_runs_the_exact_adb_argument_vectors_on_a_loopback_link() {
    let dir = shop();
    let fake = FakeDaemon::new(&["link.create"]);
    let runner = Runner::new();
    runner.ok(ADB_ONE).ok("").ok("");
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = structured(
        &h.call(
            catalog::CONNECT,
            json!({"target": "android", "cwd": cwd(&dir)}),
        )
        .await,
    );
    let minted = &fake.requests("link.create")[0];
    assert_eq!(minted["addressOverride"], "127.0.0.1");
    assert_eq!(minted["transport"], "native");
    let deep = expected_link(&r, "shopapp", true);
    assert_eq!(r["deepLink"], deep.as_str());
    assert_eq!(r["delivered"], true);
    assert_eq!(r["target"], "android");
    assert_eq!(r["device"], "emulator-5554");
    assert!(r.get("autoDetected").is_none());
    assert!(r.get("qr").is_none());
    assert_eq!(r["sessionId"], SESSION);
    assert_eq!(r["cwdSource"], "argument");
    assert_eq!(
        runner.argv(),
        vec![
            argv(&["adb", "devices"]),
            argv(&[
                "adb",
                "-s",
                "emulator-5554",
                "reverse",
                "tcp:8443",
                "tcp:8443"
            ]),
            argv(&[
                "adb",
                "-s",
                "emulator-5554",
                "shell",
                "am",
                "start",
                "-a",
                "android.intent.action.VIEW",
                "-d",
                &format!("'{deep}'"),
                "-p",
                "com.example.shop",
            ]),
        ]
    );
    assert!(fake.requests("sessions.revoke").is_empty());
}

#[tokio::test]
async fn a_web_transport_android_link_reverses_the_web_port_and_has_no_pin() {
    let dir = shop();
    let fake = FakeDaemon::new(&["link.create"]);
    let runner = Runner::new();
    runner.ok(ADB_ONE).ok("").ok("");
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = structured(
        &h.call(
            catalog::CONNECT,
            json!({"target": "android", "transport": "web", "appId": "com.flag", "device": "emulator-5554", "cwd": cwd(&dir)}),
        )
        .await,
    );
    let minted = &fake.requests("link.create")[0];
    assert_eq!(minted["transport"], "web");
    assert!(minted.get("addressOverride").is_none());
    assert_eq!(r["transport"], "web");
    assert_eq!(r["deepLink"], expected_link(&r, "shopapp", false).as_str());
    assert!(!r["deepLink"].as_str().unwrap().contains("pin="));
    let ran = runner.argv();
    assert_eq!(ran[0], argv(&["adb", "devices"]), "detection always runs");
    assert_eq!(
        ran[1],
        argv(&[
            "adb",
            "-s",
            "emulator-5554",
            "reverse",
            "tcp:53120",
            "tcp:53120"
        ])
    );
    assert_eq!(
        ran[2].last().unwrap(),
        "com.flag",
        "the argument beats the project"
    );
}

#[tokio::test]
async fn ios_simulator_and_device_run_the_exact_xcrun_argument_vectors() {
    let dir = shop();
    let fake = FakeDaemon::new(&["link.create", "daemon.status"]);
    let runner = Runner::new();
    runner.ok(SIM_ONE).ok("");
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = structured(
        &h.call(
            catalog::CONNECT,
            json!({"target": "ios-sim", "cwd": cwd(&dir)}),
        )
        .await,
    );
    let deep = expected_link(&r, "shopapp", true);
    assert_eq!(r["device"], SIM_UDID);
    assert_eq!(
        fake.requests("link.create")[0]["addressOverride"],
        "127.0.0.1"
    );
    assert_eq!(
        runner.argv(),
        vec![
            argv(&["xcrun", "simctl", "list", "devices", "booted", "--json"]),
            argv(&["xcrun", "simctl", "openurl", SIM_UDID, &deep]),
        ]
    );

    let ctl = r#"{"result":{"devices":[{"hardwareProperties":{"udid":"00008030-001A2B3C4D5E802E"},"connectionProperties":{"tunnelState":"connected"}}]}}"#;
    let runner = Runner::with_devicectl(ctl);
    runner.ok("").ok("");
    let fake = FakeDaemon::new(&["link.create", "daemon.status"]);
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = structured(
        &h.call(
            catalog::CONNECT,
            json!({"target": "ios-device", "relaunch": true, "cwd": cwd(&dir)}),
        )
        .await,
    );
    assert_eq!(fake.methods(), ["daemon.status", "link.create"]);
    assert!(
        fake.requests("link.create")[0]
            .get("addressOverride")
            .is_none(),
        "a physical device keeps the LAN address"
    );
    let deep = expected_link(&r, "shopapp", true);
    let ran = runner.argv();
    assert_eq!(
        ran[0][..7],
        argv(&[
            "xcrun",
            "devicectl",
            "list",
            "devices",
            "--timeout",
            "5",
            "--json-output"
        ])
    );
    assert_eq!(
        ran[1],
        argv(&[
            "xcrun",
            "devicectl",
            "device",
            "process",
            "launch",
            "--device",
            "00008030-001A2B3C4D5E802E",
            "--terminate-existing",
            "--payload-url",
            &deep,
            "com.example.ios",
        ])
    );
}

#[tokio::test]
async fn ios_device_with_a_loopback_advertised_address_is_refused_before_detection() {
    let dir = shop();
    let fake = FakeDaemon::new(&["daemon.status"]);
    fake.state.lock().unwrap().advertised = Some("127.0.0.1".into());
    let runner = Runner::new();
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = h
        .call(
            catalog::CONNECT,
            json!({"target": "ios-device", "cwd": cwd(&dir)}),
        )
        .await;
    assert_eq!(error_type(&r), "invalid_request");
    assert_eq!(details(&r)["param"], "advertisedIp");
    assert!(error_message(&r).contains("advertisedIp"));
    assert!(runner.argv().is_empty());
    assert_eq!(fake.methods(), ["daemon.status"]);
}

#[tokio::test]
async fn a_failed_delivery_revokes_the_link_and_reports_argv_exit_code_and_stderr() {
    let dir = shop();
    let fake = FakeDaemon::new(&["link.create", "sessions.revoke"]);
    let runner = Runner::new();
    runner.ok(ADB_ONE).fail(1, "error: device offline");
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = h
        .call(
            catalog::CONNECT,
            json!({"target": "android", "cwd": cwd(&dir)}),
        )
        .await;
    assert_eq!(error_type(&r), "tool_execution_error");
    assert_eq!(
        details(&r),
        json!({
            "argv": ["adb", "-s", "emulator-5554", "reverse", "tcp:8443", "tcp:8443"],
            "exitCode": 1,
            "stderr": "error: device offline",
        })
    );
    assert_eq!(fake.methods(), ["link.create", "sessions.revoke"]);
    assert_eq!(fake.requests("sessions.revoke")[0]["selector"], SESSION);
    assert_eq!(runner.argv().len(), 2, "am start never ran");

    // A missing executable at delivery: the same error, with a hint naming the tool.
    let fake = FakeDaemon::new(&["link.create", "sessions.revoke"]);
    let runner = Runner::new();
    runner.ok(SIM_ONE).missing();
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = h
        .call(
            catalog::CONNECT,
            json!({"target": "ios-sim", "cwd": cwd(&dir)}),
        )
        .await;
    assert_eq!(error_type(&r), "tool_execution_error");
    let d = details(&r);
    assert_eq!(d["argv"][0], "xcrun");
    assert_eq!(d["exitCode"], Value::Null);
    assert!(d["hint"].as_str().unwrap().contains("xcrun"), "{d}");
    assert_eq!(fake.requests("sessions.revoke")[0]["selector"], SESSION);
}

#[tokio::test]
async fn detection_failures_are_reported_before_anything_is_minted() {
    let dir = shop();
    let call = |target: &'static str, device: Option<&'static str>| {
        let mut args = json!({"target": target, "cwd": cwd(&dir)});
        if let Some(d) = device {
            args["device"] = json!(d);
        }
        args
    };
    // Zero candidates: tool_execution_error naming the detection command.
    let fake = FakeDaemon::new(&[]);
    let runner = Runner::new();
    runner.ok("List of devices attached\n");
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = h.call(catalog::CONNECT, call("android", None)).await;
    assert_eq!(error_type(&r), "tool_execution_error");
    assert!(error_message(&r).contains("`adb devices`"));
    assert_eq!(details(&r)["command"], "adb devices");

    // Several candidates without device: invalid_request listing them.
    let runner = Runner::new();
    runner.ok("List of devices attached\na1\tdevice\nb2\tdevice\nc3\toffline\n");
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = h.call(catalog::CONNECT, call("android", None)).await;
    assert_eq!(error_type(&r), "invalid_request");
    assert_eq!(details(&r)["devices"], json!(["a1", "b2"]));
    assert_eq!(details(&r)["param"], "device");
    assert!(error_message(&r).contains("a1, b2"));

    // A device that is not among them: the same.
    let runner = Runner::new();
    runner.ok(SIM_ONE);
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = h
        .call(catalog::CONNECT, call("ios-sim", Some("FFFF-0000")))
        .await;
    assert_eq!(error_type(&r), "invalid_request");
    assert_eq!(details(&r)["devices"], json!([SIM_UDID]));

    // A missing adb at detection: tool_execution_error with the hint.
    let runner = Runner::new();
    runner.missing();
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = h.call(catalog::CONNECT, call("android", None)).await;
    assert_eq!(error_type(&r), "tool_execution_error");
    assert!(details(&r)["hint"].as_str().unwrap().contains("adb"));

    // ANDROID_SERIAL picks among several; a bad one never runs adb.
    let runner = Runner::new();
    runner
        .ok("List of devices attached\na1\tdevice\nb2\tdevice\n")
        .fail(1, "stop here");
    let env = ProjectEnv {
        android_serial: Some("b2".into()),
        ..test_env()
    };
    let ok_fake = FakeDaemon::new(&["link.create", "sessions.revoke"]);
    let h = harness(ok_fake.clone(), runner.clone(), env).await;
    let r = h.call(catalog::CONNECT, call("android", None)).await;
    assert_eq!(error_type(&r), "tool_execution_error");
    assert_eq!(details(&r)["argv"][2], "b2");
    let runner = Runner::new();
    let env = ProjectEnv {
        android_serial: Some("-bad".into()),
        ..test_env()
    };
    let h = harness(fake.clone(), runner.clone(), env).await;
    let r = h.call(catalog::CONNECT, call("android", None)).await;
    assert_eq!(error_type(&r), "invalid_request");
    assert!(error_message(&r).contains("ANDROID_SERIAL"));
    assert!(runner.argv().is_empty());
    assert!(fake.methods().is_empty(), "nothing minted");
}

#[tokio::test]
async fn device_targets_need_an_app_id_before_anything_runs() {
    let dir = project(r#"{"scheme": "shopapp"}"#);
    let fake = FakeDaemon::new(&[]);
    let runner = Runner::new();
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    for (target, key) in [("android", "appId.android"), ("ios-device", "appId.ios")] {
        let r = h
            .call(
                catalog::CONNECT,
                json!({"target": target, "cwd": cwd(&dir)}),
            )
            .await;
        assert_eq!(error_type(&r), "invalid_request", "{target}");
        assert_eq!(details(&r)["param"], "appId");
        let m = error_message(&r);
        assert!(m.contains(key) && m.contains("appduct init"), "{m}");
    }
    assert!(runner.argv().is_empty());
    assert!(fake.methods().is_empty());
}

#[tokio::test]
async fn an_explicit_qr_target_returns_the_shared_terminal_qr_of_the_deep_link() {
    let dir = shop();
    let fake = FakeDaemon::new(&["link.create"]);
    let runner = Runner::new();
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let result = h
        .call(
            catalog::CONNECT,
            json!({"target": "none", "cwd": cwd(&dir)}),
        )
        .await;
    let r = structured(&result);
    let deep = r["deepLink"].as_str().unwrap();
    assert_eq!(r["delivered"], false);
    assert_eq!(
        r["qr"],
        appduct_client::qr::terminal_qr(deep).unwrap().as_str()
    );
    // The same code as an image/png block after the JSON text.
    assert_eq!(result.content.len(), 2);
    let image = result.content[1].as_image().expect("an image block");
    assert_eq!(image.mime_type, "image/png");
    let code = appduct_client::qr::encode(deep).unwrap();
    let png =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &image.data).unwrap();
    assert_eq!(png, appduct_client::picture::qr_png(&code).unwrap());
    assert!(r["instructions"].as_str().unwrap().contains("qr"));
    assert!(r.get("note").is_none());
    assert!(runner.argv().is_empty(), "target none detects nothing");
}

#[tokio::test]
async fn auto_detection_delivers_to_the_only_device_else_returns_a_qr_naming_why() {
    let dir = shop();
    // One Android device (simulators are not looked for off macOS): delivered.
    let fake = FakeDaemon::new(&["link.create"]);
    let runner = Runner::new();
    runner.ok(ADB_ONE).ok("").ok("");
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = structured(&h.call(catalog::CONNECT, json!({"cwd": cwd(&dir)})).await);
    assert_eq!(r["delivered"], true);
    assert_eq!(r["autoDetected"], true);
    assert_eq!(r["target"], "android");
    assert_eq!(
        fake.requests("link.create")[0]["addressOverride"],
        "127.0.0.1"
    );
    assert_eq!(runner.argv()[0], argv(&["adb", "devices"]));
    assert_eq!(runner.argv().len(), 3);

    // A simulator and an Android device: a QR naming both, nothing opened.
    let sims = ProjectEnv {
        detects_simulators: true,
        ..test_env()
    };
    let fake = FakeDaemon::new(&["link.create"]);
    let runner = Runner::new();
    runner.ok(SIM_ONE).ok(ADB_ONE);
    let h = harness(fake.clone(), runner.clone(), sims.clone()).await;
    let r = structured(&h.call(catalog::CONNECT, json!({"cwd": cwd(&dir)})).await);
    assert_eq!(r["delivered"], false);
    let note = r["note"].as_str().unwrap();
    assert!(
        note.contains(SIM_UDID) && note.contains("emulator-5554"),
        "{note}"
    );
    assert!(r["qr"].as_str().unwrap().contains('█'));
    assert!(
        fake.requests("link.create")[0]
            .get("addressOverride")
            .is_none()
    );
    assert_eq!(runner.argv().len(), 2, "detection only");

    // Nothing found (no adb, no xcrun): a QR saying a physical iPhone needs ios-device.
    let fake = FakeDaemon::new(&["link.create"]);
    let runner = Runner::new();
    runner.missing().missing();
    let h = harness(fake.clone(), runner.clone(), sims).await;
    let r = structured(&h.call(catalog::CONNECT, json!({"cwd": cwd(&dir)})).await);
    assert_eq!(r["delivered"], false);
    assert!(r["note"].as_str().unwrap().contains("ios-device"));

    // The only device fails: that link is discarded and a fresh LAN link is the QR result.
    let fake = FakeDaemon::new(&["link.create", "sessions.revoke"]);
    let runner = Runner::new();
    runner.ok(ADB_ONE).fail(1, "error: closed");
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = structured(&h.call(catalog::CONNECT, json!({"cwd": cwd(&dir)})).await);
    assert_eq!(
        fake.methods(),
        ["link.create", "sessions.revoke", "link.create"]
    );
    let minted = fake.requests("link.create");
    assert_eq!(minted[0]["addressOverride"], "127.0.0.1");
    assert!(minted[1].get("addressOverride").is_none());
    assert_eq!(r["delivered"], false);
    assert!(r["qr"].is_string());
    let note = r["note"].as_str().unwrap();
    assert!(
        note.contains("emulator-5554") && note.contains("(error: closed)"),
        "{note}"
    );
}

#[tokio::test]
async fn an_auto_detected_android_device_needs_an_app_id_before_minting() {
    let dir = project(r#"{"scheme": "shopapp"}"#);
    let fake = FakeDaemon::new(&[]);
    let runner = Runner::new();
    runner.ok(ADB_ONE);
    let h = harness(fake.clone(), runner.clone(), test_env()).await;
    let r = h.call(catalog::CONNECT, json!({"cwd": cwd(&dir)})).await;
    assert_eq!(error_type(&r), "invalid_request");
    assert_eq!(details(&r)["param"], "appId");
    assert!(fake.methods().is_empty());
}

#[tokio::test]
async fn for_picks_the_transport_the_project_platform_is_the_default_and_conflicts_are_refused() {
    let fake = FakeDaemon::new(&["link.create"]);
    let h = harness(fake.clone(), Runner::new(), test_env()).await;
    let transport_of = |fake: &Arc<FakeDaemon>| {
        fake.requests("link.create")
            .last()
            .map(|p| p["transport"].clone())
            .unwrap()
    };
    // No platform recorded: native, as before.
    let plain = shop();
    let r = structured(
        &h.call(
            catalog::CONNECT,
            json!({"target": "none", "cwd": cwd(&plain)}),
        )
        .await,
    );
    assert_eq!(r["transport"], "native");
    assert_eq!(transport_of(&fake), "native");
    // A react-native project: sealed, with no pin in the deep link.
    let rn = project(r#"{"scheme": "shopapp", "platform": "react-native"}"#);
    let r = structured(
        &h.call(catalog::CONNECT, json!({"target": "none", "cwd": cwd(&rn)}))
            .await,
    );
    assert_eq!(r["transport"], "sealed");
    assert_eq!(transport_of(&fake), "sealed");
    assert!(!r["deepLink"].as_str().unwrap().contains("pin="), "{r}");
    // `for` wins over the project; `transport` that agrees is fine.
    for args in [
        json!({"target": "none", "cwd": cwd(&rn), "for": "native"}),
        json!({"target": "none", "cwd": cwd(&rn), "for": "native", "transport": "native"}),
    ] {
        let r = structured(&h.call(catalog::CONNECT, args.clone()).await);
        assert_eq!(r["transport"], "native", "{args}");
    }
    let minted = fake.requests("link.create").len();
    for (args, param) in [
        (
            json!({"target": "none", "for": "react-native", "transport": "native"}),
            "transport",
        ),
        (
            json!({"target": "web", "url": "https://x.test", "for": "react-native"}),
            "for",
        ),
        (
            json!({"target": "web", "url": "https://x.test", "transport": "sealed"}),
            "transport",
        ),
    ] {
        let r = h.call(catalog::CONNECT, args.clone()).await;
        assert_eq!(error_type(&r), "invalid_request", "{args}");
        assert_eq!(details(&r)["param"], param, "{args}");
    }
    // A value outside the enum is refused by the input schema.
    let r = h
        .call(catalog::CONNECT, json!({"target": "none", "for": "ios"}))
        .await;
    assert_eq!(error_type(&r), "invalid_request");
    assert_eq!(fake.requests("link.create").len(), minted, "nothing minted");
}
