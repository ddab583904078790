//! Calls across processes (04; §L4, §L7.3; §C10.5; SEC-44, 45): `tools call` results and
//! exit codes with their `--json` envelopes, policy denial from `config.json`, per-call progress
//! from a playground process to a raw control client, Ctrl-C and SIGTERM of a `tools call`
//! child as the device sees them, and the audit records all of it leaves behind.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use appduct_e2e::control::Control;
use appduct_e2e::device::{RawDevice, mint, sdk_device};
use appduct_e2e::harness::{Ran, Sandbox, audit_records_in};
use appduct_e2e::{OrFail as _, blocking};
use appduct_sdk::{CallContext, ToolError};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

/// The second `argsSha256` vector of §C12.2.
const VECTOR_ARGS: &str = r#"{"b":1,"a":{"d":[3,{"z":true,"y":null}],"c":"é"}}"#;
const VECTOR_SHA: &str = "02172be57d57ea7b7494626b319ee00bdef9f61503b51b3c24bacb0032a3898e";
/// A value that must never reach a log or audit file.
const SECRET: &str = "s3cret-e2e-marker-7f1d";

fn run(sb: &Sandbox, args: &[&str]) -> Ran {
    blocking(|| sb.run(args)).or_fail()
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

fn wait_audit(dir: &Path, count: usize) -> Vec<Value> {
    let mut records = Vec::new();
    Sandbox::wait_until(WAIT, || {
        records = audit_records_in(dir);
        records.len() >= count
    });
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_call_exit_codes_envelopes_policy_and_audit() {
    let config = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1",
        "policy": {"destructive": "deny", "tools": {"pixel-8/guarded": "prompt"}}}"#;
    let sb = Sandbox::with_config(config).or_fail();
    let sock = sb.state_dir().join("daemon.sock");

    // 65 for bad input, decided before any daemon is contacted (none is spawned).
    for input in ["not json", "[1]"] {
        let ran = run(&sb, &["--json", "tools", "call", "echo", "--input", input]);
        assert_eq!(ran.code, 65, "{ran:?}");
        let doc = ran.json().or_fail();
        assert_eq!(doc["error"]["type"], "validation_error");
        assert_eq!(doc["error"]["details"]["param"], "--input", "{doc}");
    }
    assert!(!sock.exists(), "invalid input spawned a daemon");

    // 71 without a session; the failure envelope has no meta.
    let ran = run(&sb, &["--json", "tools", "call", "echo"]);
    assert_eq!(ran.code, 71, "{ran:?}");
    let doc = ran.json().or_fail();
    assert_eq!(keys(&doc), ["ok", "error"]);
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["error"]["type"], "no_session");
    assert_eq!(ran.stdout.lines().count(), 1);
    assert_eq!(ran.stderr, "");

    let link = blocking(|| mint(&sb, &[])).or_fail();
    let device = sdk_device(&link, "Pixel 8", "p8").or_fail();
    // SEC-44: denied tools never run; these handlers count their runs.
    let runs = Arc::new(AtomicUsize::new(0));
    for descriptor in [
        json!({"name": "wipe", "description": "Erases everything.",
               "annotations": {"destructiveHint": true}}),
        json!({"name": "guarded", "description": "Needs a person's consent."}),
    ] {
        let runs = runs.clone();
        device
            .register_tool(&descriptor, move |_args: Value, _ctx: CallContext| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, ToolError>(Value::Null) }
            })
            .or_fail();
    }
    device.connect(&link.deep_link).await.or_fail();
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 4)
    ));

    // Success: exactly {ok, data}, data verbatim.
    let ran = run(
        &sb,
        &["--json", "tools", "call", "echo", "--input", VECTOR_ARGS],
    );
    assert_eq!(ran.code, 0, "{ran:?}");
    let doc = ran.json().or_fail();
    assert_eq!(keys(&doc), ["ok", "data"]);
    let args: Value = serde_json::from_str(VECTOR_ARGS).or_fail();
    assert_eq!(doc["data"], json!({"device": "p8", "args": args}));

    // --verbose adds meta with the call.
    let secret = format!(r#"{{"token": "{SECRET}"}}"#);
    let ran = run(
        &sb,
        &[
            "--json",
            "--verbose",
            "tools",
            "call",
            "pixel-8",
            "echo",
            "--input",
            &secret,
        ],
    );
    assert_eq!(ran.code, 0, "{ran:?}");
    let doc = ran.json().or_fail();
    assert_eq!(keys(&doc), ["ok", "data", "meta"]);
    assert_eq!(doc["meta"]["command"], "tools call");
    let call_meta = &doc["meta"]["call"];
    assert!(
        call_meta["callId"]
            .as_str()
            .unwrap_or_default()
            .starts_with("cli-"),
        "{doc}"
    );
    assert_eq!(call_meta["alias"], "pixel-8");
    assert_eq!(call_meta["sessionId"], json!(link.session_id));

    // 72 for an unknown tool, naming what exists.
    let ran = run(&sb, &["--json", "tools", "call", "nope"]);
    assert_eq!(ran.code, 72, "{ran:?}");
    let error = &ran.json().or_fail()["error"];
    assert_eq!(error["type"], "tool_not_found");

    // 77 for a destructive tool under `policy.destructive: "deny"`.
    let ran = run(&sb, &["--json", "tools", "call", "wipe"]);
    assert_eq!(ran.code, 77, "{ran:?}");
    let error = ran.json().or_fail()["error"].clone();
    assert_eq!(error["type"], "policy_denied");
    let details = &error["details"];
    assert_eq!(details["reason"], "policy");
    assert_eq!(details["decision"], "deny");
    assert_eq!(details["source"], "policy.destructive");
    assert_eq!(details["configKey"], r#"policy.tools["pixel-8/wipe"]"#);
    assert_eq!(
        details["configPath"],
        json!(sb.state_dir().join("config.json").display().to_string())
    );
    // Human mode: the error block on stderr, nothing on stdout.
    let human = run(&sb, &["tools", "call", "wipe"]);
    assert_eq!(human.code, 77);
    assert_eq!(human.stdout, "");
    assert!(
        human.stderr.starts_with("Command failed\n"),
        "{}",
        human.stderr
    );
    assert!(
        human.stderr.contains("  Type:     policy_denied\n"),
        "{}",
        human.stderr
    );

    // `prompt` without a consent channel fails closed for the CLI.
    let ran = run(&sb, &["--json", "tools", "call", "guarded"]);
    assert_eq!(ran.code, 77, "{ran:?}");
    let error = ran.json().or_fail()["error"].clone();
    assert_eq!(error["type"], "policy_denied");
    assert_eq!(error["details"]["reason"], "no_consent_channel", "{error}");
    assert_eq!(error["details"]["decision"], "prompt");
    assert_eq!(
        error["details"]["source"],
        r#"policy.tools["pixel-8/guarded"]"#
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "a denied tool ran");

    // SEC-44/45: one record per resolved call; hashes, never raw arguments.
    let records = wait_audit(&sb.state_dir(), 6);
    assert_eq!(records.len(), 6, "{records:#?}");
    let tools: Vec<&str> = records.iter().filter_map(|r| r["tool"].as_str()).collect();
    assert_eq!(tools, ["echo", "echo", "nope", "wipe", "wipe", "guarded"]);
    assert_eq!(records[5]["outcome"], "denied");
    assert_eq!(records[5]["deniedReason"], "no_consent_channel");
    let first = &records[0];
    assert_eq!(
        keys(first),
        [
            "ts",
            "callId",
            "sessionId",
            "alias",
            "tool",
            "argsSha256",
            "outcome",
            "durationMs",
            "caller"
        ]
    );
    assert_eq!(first["argsSha256"], VECTOR_SHA);
    assert_eq!(first["outcome"], "ok");
    assert_eq!(first["caller"], "cli");
    assert_eq!(first["alias"], "pixel-8");
    assert_eq!(
        records[1]["argsSha256"],
        json!(appduct_protocol::canonical::args_sha256(
            &serde_json::from_str(&secret).or_fail()
        ))
    );
    assert_eq!(records[1]["callId"], call_meta["callId"]);
    assert_eq!(records[2]["outcome"], "error");
    assert_eq!(records[2]["errorType"], "tool_not_found");
    assert_eq!(records[3]["outcome"], "denied");
    assert_eq!(records[3]["deniedReason"], "policy");
    assert!(records[3].get("errorType").is_none());

    for name in ["audit", "events.log", "daemon.log"] {
        let path = sb.state_dir().join(name);
        let paths: Vec<_> = if path.is_dir() {
            std::fs::read_dir(&path)
                .or_fail()
                .filter_map(|e| Some(e.ok()?.path()))
                .collect()
        } else {
            vec![path]
        };
        for p in paths {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            assert!(!text.contains(SECRET), "raw arguments in {}", p.display());
            assert!(
                !text.contains(&link.token),
                "a claim token in {}",
                p.display()
            );
        }
    }
    let day = std::fs::read_dir(sb.state_dir().join("audit"))
        .or_fail()
        .filter_map(|e| Some(e.ok()?.path()))
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap_or_else(|| panic!("no audit day file"));
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&day).or_fail().permissions().mode() & 0o777,
        0o600
    );
    device.disconnect();
}

#[test]
fn progress_from_a_playground_process_reaches_a_control_client() {
    let sb = Sandbox::new().or_fail();
    let (_playground, ready) = sb.spawn_ready(&["--json", "playground"]).or_fail();
    let alias = ready["data"]["alias"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let session_id = ready["data"]["sessionId"].clone();
    sb.status().or_fail();

    let mut control = Control::connect(&sb.state_dir().join("daemon.sock"), WAIT).or_fail();
    let response = control
        .request(
            "tools.call",
            json!({"name": "slow_task", "progress": true, "callId": "e2e-progress-1"}),
        )
        .or_fail();
    assert_eq!(
        response["result"]["result"],
        json!({"done": true}),
        "{response}"
    );
    assert_eq!(response["result"]["callId"], "e2e-progress-1");
    assert_eq!(response["result"]["alias"], json!(alias));
    let methods: Vec<&str> = control
        .notifications
        .iter()
        .filter_map(|n| n["method"].as_str())
        .collect();
    assert_eq!(
        methods,
        [
            "tool_call_started",
            "tool_call_progress",
            "tool_call_progress",
            "tool_call_progress"
        ]
    );
    let started = &control.notifications[0]["params"];
    assert_eq!(started["name"], "slow_task");
    assert_eq!(started["callId"], "e2e-progress-1");
    assert_eq!(started["sessionId"], session_id);
    assert_eq!(started["deadlineMs"], 5000);
    let steps: Vec<(Value, Value)> = control.notifications[1..]
        .iter()
        .map(|n| {
            (
                n["params"]["progress"].clone(),
                n["params"]["message"].clone(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            (json!(0.33), json!("warming up")),
            (json!(0.66), json!("almost there")),
            (json!(1.0), json!("done")),
        ]
    );

    // Without a terminal the CLI shows no progress at all.
    let ran = sb.run(&["--json", "tools", "call", "slow_task"]).or_fail();
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(ran.stderr, "");
    assert_eq!(ran.stdout, "{\"ok\":true,\"data\":{\"done\":true}}\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupting_tools_call_cancels_the_call_on_the_device() {
    let sb = Sandbox::with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let (mut device, _ack) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    device
        .register(
            json!([{"name": "hang", "description": "Never answers by itself."},
                         {"name": "quick", "description": "Answers at once."}]),
        )
        .await
        .or_fail();
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 2)
    ));

    // Ctrl-C: `tools.cancel` with client_cancelled; the app's answer settles the call.
    let cli = sb.spawn(&["--json", "tools", "call", "hang"]).or_fail();
    let call = device.expect_frame("tool_call").await.or_fail();
    assert_eq!(call["name"], "hang");
    assert!(cli.signal("INT"));
    let cancel = device.expect_frame("tool_cancel").await.or_fail();
    assert_eq!(cancel["id"], call["id"]);
    assert_eq!(cancel["reason"], "client_cancelled");
    device
        .reply_error(&call, "tool_cancelled", "hang stopped")
        .await
        .or_fail();
    let ran = blocking(|| cli.finish(WAIT)).or_fail();
    assert_eq!(ran.code, 72, "{ran:?}");
    let error = &ran.json().or_fail()["error"];
    assert_eq!(error["type"], "tool_cancelled");
    assert_eq!(error["message"], "hang stopped");

    // The next frame is the next call: the device saw exactly one tool_cancel.
    let quick = sb.spawn(&["--json", "tools", "call", "quick"]).or_fail();
    let next = device.expect_frame("tool_call").await.or_fail();
    assert_eq!(next["name"], "quick");
    device.reply(&next, json!({"n": 1})).await.or_fail();
    let ran = blocking(|| quick.finish(WAIT)).or_fail();
    assert_eq!(ran.stdout, "{\"ok\":true,\"data\":{\"n\":1}}\n", "{ran:?}");

    // SIGTERM: the CLI closes its connection; the daemon cancels with connection_closed.
    let cli = sb.spawn(&["--json", "tools", "call", "hang"]).or_fail();
    let call = device.expect_frame("tool_call").await.or_fail();
    assert!(cli.signal("TERM"));
    let cancel = device.expect_frame("tool_cancel").await.or_fail();
    assert_eq!(cancel["id"], call["id"]);
    assert_eq!(cancel["reason"], "connection_closed");
    device
        .reply_error(&call, "tool_cancelled", "hang stopped")
        .await
        .or_fail();
    let ran = blocking(|| cli.finish(WAIT)).or_fail();
    assert_eq!(ran.code, 72, "{ran:?}");
    let error = &ran.json().or_fail()["error"];
    assert_eq!(error["type"], "tool_cancelled");
    assert_eq!(error["details"]["settledBy"], "cli", "{error}");
    assert_eq!(error["details"]["reason"], "client_cancelled");

    let records = blocking(|| wait_audit(&sb.state_dir(), 3));
    let outcomes: Vec<(&Value, &Value, &Value)> = records
        .iter()
        .map(|r| (&r["tool"], &r["outcome"], &r["errorType"]))
        .collect();
    assert_eq!(
        outcomes,
        [
            (
                &json!("hang"),
                &json!("cancelled"),
                &json!("tool_cancelled")
            ),
            (&json!("quick"), &json!("ok"), &Value::Null),
            (
                &json!("hang"),
                &json!("cancelled"),
                &json!("tool_cancelled")
            ),
        ],
        "{records:#?}"
    );
}
