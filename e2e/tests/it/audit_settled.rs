//! What the audit log holds when the daemon dies (issue #20 defect 8, §C12.1–9.3): one record
//! per settled call, written when it settles; a call still in flight at a SIGKILL never settled,
//! so it has no record (project decision in SECURITY.md 4.12: the audit records settled calls
//! only, as §C12.1 defines, and `tool_call_started` events show calls in flight).

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use appduct_e2e::control::Control;
use appduct_e2e::device::{mint, sdk_device};
use appduct_e2e::harness::{Sandbox, audit_records_in, is_alive, signal};
use appduct_e2e::{OrFail as _, blocking};
use appduct_sdk::{CallContext, ToolError};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);
const IN_FLIGHT: &str = "in-flight-at-kill";

fn wait_audit(dir: &Path, count: usize) -> Vec<Value> {
    let mut records = Vec::new();
    Sandbox::wait_until(WAIT, || {
        records = audit_records_in(dir);
        records.len() >= count
    });
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_record_per_settled_call_and_none_for_a_call_in_flight_at_sigkill() {
    let sb = Sandbox::with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let device = sdk_device(&link, "Pixel 8", "p8").or_fail();
    // The handler reports that the call reached the app, then never answers.
    let (reached, reached_rx) = std::sync::mpsc::channel::<()>();
    let reached = Mutex::new(reached);
    device
        .register_tool(
            &json!({"name": "hang", "description": "Never answers."}),
            move |_args: Value, _ctx: CallContext| {
                let _ = reached.lock().map(|tx| tx.send(()));
                std::future::pending::<Result<Value, ToolError>>()
            },
        )
        .or_fail();
    device.connect(&link.deep_link).await.or_fail();
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 3)
    ));

    // Two settled calls: two records.
    for _ in 0..2 {
        let ran = blocking(|| sb.run(&["--json", "tools", "call", "echo"])).or_fail();
        assert_eq!(ran.code, 0, "{ran:?}");
    }
    let settled = blocking(|| wait_audit(&sb.state_dir(), 2));
    assert_eq!(settled.len(), 2, "{settled:?}");

    // A third call is in flight on the device when the daemon is killed.
    let mut control = Control::connect(&sb.state_dir().join("daemon.sock"), WAIT).or_fail();
    control
        .send_request(
            "tools.call",
            json!({"name": "hang", "callId": IN_FLIGHT, "timeoutMs": 600_000}),
        )
        .or_fail();
    blocking(|| reached_rx.recv_timeout(WAIT)).or_fail();
    let pid = sb.daemon_pid().unwrap_or_else(|| panic!("no daemon pid"));
    assert!(signal(pid, "KILL"));
    assert!(blocking(|| Sandbox::wait_until(WAIT, || !is_alive(pid))));

    let records = audit_records_in(&sb.state_dir());
    assert_eq!(records, settled, "exactly the settled calls' records");
    for record in &records {
        assert_eq!(record["tool"], "echo");
        assert_eq!(record["outcome"], "ok");
        assert_ne!(record["callId"], IN_FLIGHT);
    }
    device.disconnect();
}
