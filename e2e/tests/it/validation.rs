//! Argument validation across processes (§C10.8, §L7.3): an app built with the Rust SDK, which
//! never checks arguments against a JSON Schema itself, behind a spawned daemon; `appduct tools
//! call` with wrong arguments exits 72 with the daemon's typed refusal and the handler never
//! runs; right arguments reach it; `daemon reload` with `validation.arguments: "off"` lets the
//! wrong ones through.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use appduct_e2e::device::{mint, sdk_device};
use appduct_e2e::harness::{Ran, Sandbox};
use appduct_e2e::{OrFail as _, blocking};
use appduct_sdk::{CallContext, ToolError};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

fn run(sb: &Sandbox, args: &[&str]) -> Ran {
    blocking(|| sb.run(args)).or_fail()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_call_with_wrong_arguments_exits_72_and_the_handler_never_runs() {
    let sb = Sandbox::with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let device = sdk_device(&link, "Pixel 8", "p8").or_fail();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    device
        .register_tool(
            &json!({"name": "sum", "description": "Adds a and b.",
                    "input_schema": {"type": "object",
                        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                        "required": ["a", "b"]},
                    "output_schema": {"type": "object"}}),
            move |args: Value, _ctx: CallContext| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    let total = args["a"].as_f64().unwrap_or(f64::NAN)
                        + args["b"].as_f64().unwrap_or(f64::NAN);
                    Ok::<_, ToolError>(json!({"total": total}))
                }
            },
        )
        .or_fail();
    device.connect(&link.deep_link).await.or_fail();
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 3)
    ));

    let bad = r#"{"a": "one"}"#;
    let ran = run(&sb, &["--json", "tools", "call", "sum", "--input", bad]);
    assert_eq!(ran.code, 72, "{ran:?}");
    let doc = ran.json().or_fail();
    let error = &doc["error"];
    assert_eq!(error["type"], "tool_input_validation_error", "{doc}");
    assert_eq!(error["details"]["checkedBy"], "daemon", "{doc}");
    let Some(issues) = error["details"]["issues"].as_array() else {
        panic!("no issues in {doc}");
    };
    assert!(
        issues
            .iter()
            .any(|i| i["path"] == json!(["a"]) && i["keyword"] == "type"),
        "{doc}"
    );
    assert!(issues.iter().any(|i| i["keyword"] == "required"), "{doc}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the handler ran");

    let ran = run(
        &sb,
        &[
            "--json",
            "tools",
            "call",
            "sum",
            "--input",
            r#"{"a": 1, "b": 2}"#,
        ],
    );
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(ran.json().or_fail()["data"], json!({"total": 3.0}));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Off, by reload: the wrong arguments reach the handler (which does not check them).
    std::fs::write(
        sb.state_dir().join("config.json"),
        r#"{"wssPort": 0, "advertisedIp": "127.0.0.1", "validation": {"arguments": "off"}}"#,
    )
    .or_fail();
    let ran = run(&sb, &["--json", "daemon", "reload"]);
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(
        ran.json().or_fail()["data"]["applied"],
        json!(["validation"]),
        "{ran:?}"
    );
    let ran = run(&sb, &["--json", "tools", "call", "sum", "--input", bad]);
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    drop(device);
}
