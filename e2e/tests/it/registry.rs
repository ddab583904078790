//! Registry declarations (device.md §D18) across processes: `registry.require` refuses a tool
//! that lacks a declaration (`1008 invalid_registry`, the tool and field named in the daemon's
//! log) and accepts it once a `daemon reload` turned the guard off; an SDK device's
//! declarations reach `tools describe`; `appduct tools test` (§L7.6) passes, fails and skips.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use appduct_e2e::device::{Link, RawDevice, mint};
use appduct_e2e::harness::Sandbox;
use appduct_e2e::{OrFail as _, blocking};
use appduct_sdk::{CallContext, Client, ToolError};
use serde_json::{Value, json};

const GUARDED: &str = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1",
    "registry": {"require": ["riskLevel", "testCases"]}}"#;
const OPEN: &str = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#;
const WAIT: Duration = Duration::from_secs(10);

fn tool_count(sb: &Sandbox, alias: &str) -> Option<u64> {
    let sessions = sb.data(&["sessions", "ls"]).ok()?;
    sessions
        .as_array()?
        .iter()
        .find(|s| s["alias"] == alias)
        .and_then(|s| s["toolCount"].as_u64())
}

/// Claims `link` as model `model` and registers `tools`; the close, if the daemon sent one
/// instead of taking the registry (seen by a follow-up frame the daemon must answer).
async fn register(link: &Link, model: &str, tools: Value) -> RawDevice {
    let (mut device, _ack) = RawDevice::claim(link, model).await.or_fail();
    device.register(tools).await.or_fail();
    device
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_guards_refuse_an_undeclared_tool_and_accept_it_once_off() {
    let sb = Sandbox::with_config(GUARDED).or_fail();
    let declared = json!({"name": "declared", "description": "Has both declarations.",
        "annotations": {"readOnlyHint": true},
        "testCases": [{"arguments": {}, "expect": {}}]});
    let bare = json!({"name": "bare", "description": "Declares nothing.", "riskLevel": "low"});

    // Guards on: a snapshot whose second tool lacks `testCases` is refused as a whole.
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let mut device = register(&link, "Refused", json!([declared, bare])).await;
    let closed = device.expect_close().await.or_fail();
    assert_eq!(
        (closed.code, closed.reason.as_str()),
        (Some(1008), "invalid_registry")
    );
    let log_names_it = blocking(|| {
        Sandbox::wait_until(WAIT, || {
            std::fs::read_to_string(sb.state_dir().join("daemon.log")).is_ok_and(|log| {
                log.lines().any(|l| {
                    l.contains("field `tools[1].testCases`")
                        && l.contains("tool `bare` lacks `testCases`")
                })
            })
        })
    });
    assert!(
        log_names_it,
        "daemon.log never named the tool and the field"
    );
    assert_eq!(blocking(|| tool_count(&sb, "refused")), Some(0));

    // Guards on: a tool with a derived risk (readOnlyHint) and test cases is accepted.
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let _ok = register(&link, "Accepted", json!([declared])).await;
    let listed = blocking(|| Sandbox::wait_until(WAIT, || tool_count(&sb, "accepted") == Some(1)));
    assert!(listed, "the declared tool was not registered");

    // Guards off after a reload: the same undeclared tool is accepted.
    std::fs::write(sb.state_dir().join("config.json"), OPEN).or_fail();
    let reloaded = blocking(|| sb.data(&["daemon", "reload"])).or_fail();
    assert!(
        reloaded["applied"]
            .as_array()
            .is_some_and(|a| a.contains(&json!("registry"))),
        "{reloaded}"
    );
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let _open = register(&link, "Open", json!([declared, bare])).await;
    let listed = blocking(|| Sandbox::wait_until(WAIT, || tool_count(&sb, "open") == Some(2)));
    assert!(listed, "with the guard off the undeclared tool was refused");
}

/// An SDK device with four tools: `add` passes its case, `broken` answers the wrong shape,
/// `wipe` is destructive and `guess` declares no risk (both counted in `wipes`), `plain`
/// declares no cases.
fn test_device(link: &Link, wipes: Arc<AtomicUsize>) -> Client {
    let mut builder = Client::builder().device(Some("E2E"), Some("Tested"), Some("Linux"));
    if let Some(pin) = &link.pin {
        builder = builder.pins([pin.clone()]);
    }
    let client = builder.build().or_fail();
    let total_shape = json!({"type": "object", "required": ["total"],
                             "properties": {"total": {"type": "integer"}}});
    client
        .register_tool(
            &json!({"name": "add", "description": "Adds a and b.", "riskLevel": "low",
                    "input_schema": {"type": "object"}, "output_schema": {"type": "object"},
                    "requiredPermissions": ["math"],
                    "testCases": [{"name": "one plus two", "arguments": {"a": 1, "b": 2},
                                   "expect": {"schema": total_shape}},
                                  {"name": "refuses text", "arguments": {"a": "x", "b": 2},
                                   "expect": {"error": "tool_input_validation_error"}}]}),
            |args: Value, _ctx: CallContext| async move {
                match (args["a"].as_i64(), args["b"].as_i64()) {
                    (Some(a), Some(b)) => Ok(json!({"total": a + b})),
                    _ => Err(ToolError::input_validation("a and b must be integers")),
                }
            },
        )
        .or_fail();
    client
        .register_tool(
            &json!({"name": "broken", "description": "Answers a string total.",
                    "output_schema": {"type": "object"},
                    "annotations": {"readOnlyHint": true},
                    "testCases": [{"arguments": {}, "expect": {"schema": total_shape}}]}),
            |_args: Value, _ctx: CallContext| async move {
                Ok::<_, ToolError>(json!({"total": "3"}))
            },
        )
        .or_fail();
    let guesses = Arc::clone(&wipes);
    client
        .register_tool(
            &json!({"name": "wipe", "description": "Wipes everything.",
                    "output_schema": {"type": "object"},
                    "annotations": {"destructiveHint": true},
                    "testCases": [{"arguments": {}, "expect": {}}]}),
            move |_args: Value, _ctx: CallContext| {
                wipes.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, ToolError>(json!({"wiped": true})) }
            },
        )
        .or_fail();
    client
        .register_tool(
            &json!({"name": "guess", "description": "Says nothing about its risk.",
                    "testCases": [{"arguments": {}, "expect": {}}]}),
            move |_args: Value, _ctx: CallContext| {
                guesses.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, ToolError>(json!({})) }
            },
        )
        .or_fail();
    client
        .register_tool(
            &json!({"name": "plain", "description": "No cases."}),
            |_args: Value, _ctx: CallContext| async move { Ok::<_, ToolError>(Value::Null) },
        )
        .or_fail();
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_test_passes_fails_and_skips_declared_cases() {
    let sb = Sandbox::with_config(OPEN).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let wipes = Arc::new(AtomicUsize::new(0));
    let device = test_device(&link, Arc::clone(&wipes));
    let session = device.connect(&link.deep_link).await.or_fail();
    let listed =
        blocking(|| Sandbox::wait_until(WAIT, || tool_count(&sb, &session.alias) == Some(5)));
    assert!(listed, "the device's tools were not registered");

    // The SDK's declarations reach tools.describe as sent.
    let described = blocking(|| sb.data(&["tools", "describe", "add"])).or_fail();
    assert_eq!(described["riskLevel"], "low");
    assert_eq!(described["requiredPermissions"], json!(["math"]));
    assert_eq!(described["testCases"][0]["name"], "one plus two");

    // Everything: one failure, so exit 3 with the report in error.details.
    let ran = blocking(|| sb.run(&["--json", "tools", "test"])).or_fail();
    assert_eq!(ran.code, 3, "{ran:?}");
    let doc = ran.json().or_fail();
    assert_eq!(doc["error"]["type"], "assertion_error");
    let report = &doc["error"]["details"];
    assert_eq!(
        (&report["passed"], &report["failed"], &report["skipped"]),
        (&json!(2), &json!(1), &json!(2)),
        "{report}"
    );
    // A tool that declares no risk is presumed destructive, as MCP presumes (§L7.6).
    let reasons: Vec<(&Value, &Value)> = report["cases"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter(|c| c["status"] == "skipped")
                .map(|c| (&c["tool"], &c["reason"]))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        reasons,
        [
            (&json!("guess"), &json!("undeclared_risk")),
            (&json!("wipe"), &json!("destructive"))
        ],
        "{report}"
    );
    assert_eq!(report["untested"], json!(["plain"]));
    let broken = report["cases"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["tool"] == "broken"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(broken["status"], "fail");
    assert_eq!(broken["path"], "/total");
    assert_eq!(wipes.load(Ordering::SeqCst), 0, "a skipped tool ran");

    // One passing tool: exit 0.
    let passed = blocking(|| sb.data(&["tools", "test", "--tool", "add"])).or_fail();
    assert_eq!(
        (&passed["passed"], &passed["failed"]),
        (&json!(2), &json!(0))
    );

    // --allow-destructive runs the destructive tool's case.
    let wiped =
        blocking(|| sb.data(&["tools", "test", "--tool", "wipe", "--allow-destructive"])).or_fail();
    assert_eq!(wiped["passed"], 1, "{wiped}");
    assert_eq!(wipes.load(Ordering::SeqCst), 1);

    // Human output names the failing case and its reason.
    let human = blocking(|| sb.run(&["tools", "test", "--tool", "broken"])).or_fail();
    assert_eq!(human.code, 3);
    assert!(
        human
            .stderr
            .contains("FAIL broken #0: result does not match the shape at /total: expected integer, found a string"),
        "{human:?}"
    );
    device.disconnect();
}
