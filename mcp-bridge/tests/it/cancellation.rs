//! Cancellation: a cancel before the consent step sends no elicitation and creates no consent
//! record; `appduct_connect` stops on a cancel during detection (nothing minted) and during
//! delivery (the minted link revoked); the read-only built-ins stop between daemon calls
//! (§M6, §M10).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use appduct_client::command_runner::{CommandRunner, ScriptedCommandRunner};
use serde_json::{Value, json};
use support::*;

// ---------------------------------------------------------------------------------------------
// A cancel before the consent step sends nothing more
// ---------------------------------------------------------------------------------------------

/// A round trip through the daemon after the cancelled request went on: by then a request
/// that ignored its cancel would have reached its next step.
async fn settle(c: &mut LineClient, id: i64) -> Vec<Value> {
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "appduct_describe_tool", "arguments": {"name": "reset"}}});
    c.send_line(&call.to_string()).await;
    c.until_response(id).await
}

#[tokio::test]
async fn a_cancel_before_the_consent_step_sends_no_elicitation() {
    let fake = prompt_fake(&["tools.call"]);
    let gate = fake.hold("tools.list");
    let bridge = bridge_with_runner(&fake, Arc::new(ScriptedCommandRunner::new()));
    let mut c = LineClient::with_bridge(bridge, fake.clone());
    c.initialize_with(json!({"elicitation": {}})).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "appduct_call_tool", "arguments": {"name": "reset"}}});
    c.send_line(&call.to_string()).await;
    gate.entered().await;
    let mut seen = c.cancel(7).await;
    gate.open();
    seen.extend(settle(&mut c, 8).await);
    assert!(
        !seen.iter().any(|m| m["method"] == "elicitation/create"),
        "no prompt for a cancelled call: {seen:?}"
    );
    assert!(
        !seen.iter().any(|m| m["id"] == 7),
        "no response for a cancelled request: {seen:?}"
    );
    assert!(fake.requests("tools.call").is_empty());
}

#[tokio::test]
async fn a_cancel_before_the_consent_step_creates_no_consent_record() {
    let fake = prompt_fake(&["daemon.hello", "consent.create"]);
    let gate = fake.hold("tools.list");
    let bridge = bridge_with_runner(&fake, Arc::new(ScriptedCommandRunner::new()));
    let mut c = LineClient::with_bridge(bridge, fake.clone());
    let meta = meta_2026(json!({"elicitation": {"form": {}}}));
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "appduct_call_tool", "arguments": {"name": "reset"}, "_meta": meta}});
    c.send_line(&call.to_string()).await;
    gate.entered().await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 7, "reason": "test"}});
    c.send_line(&cancel.to_string()).await;
    // No ping on 2026-07-28: a later request stands in for it.
    let list =
        json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {"_meta": meta}});
    c.send_line(&list.to_string()).await;
    let mut seen = c.until_response(8).await;
    gate.open();
    let settle_call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "appduct_describe_tool", "arguments": {"name": "reset"}, "_meta": meta}});
    c.send_line(&settle_call.to_string()).await;
    seen.extend(c.until_response(9).await);
    assert!(
        fake.requests("consent.create").is_empty(),
        "no consent record for a cancelled call"
    );
    assert!(!seen.iter().any(|m| m["id"] == 7), "{seen:?}");
}

// ---------------------------------------------------------------------------------------------
// `appduct_connect` and the read-only built-ins stop on a cancel
// ---------------------------------------------------------------------------------------------

const ADB_ONE: &str = "List of devices attached\nemulator-5554\tdevice\n";

/// A scripted runner whose `n`-th command (0-based) waits until released.
#[derive(Debug)]
struct GatedRunner {
    script: ScriptedCommandRunner,
    hold: usize,
    calls: std::sync::atomic::AtomicUsize,
    /// Every command started (held or not), program first.
    started: std::sync::Mutex<Vec<String>>,
    entered: tokio::sync::Notify,
    release: tokio::sync::Semaphore,
}

impl GatedRunner {
    fn new(hold: usize, outputs: &[&str]) -> Arc<Self> {
        let script = ScriptedCommandRunner::new();
        for out in outputs {
            script.push_output(appduct_client::command_runner::CommandOutput {
                code: Some(0),
                stdout: (*out).into(),
                stderr: String::new(),
            });
        }
        Arc::new(Self {
            script,
            hold,
            calls: Default::default(),
            started: Default::default(),
            entered: tokio::sync::Notify::new(),
            release: tokio::sync::Semaphore::new(0),
        })
    }

    fn ran(&self) -> Vec<String> {
        self.started.lock().unwrap().clone()
    }
}

impl CommandRunner for GatedRunner {
    fn run<'a>(
        &'a self,
        program: &'a str,
        args: &'a [String],
        env: &'a [(String, String)],
    ) -> appduct_client::BoxFuture<'a, std::io::Result<appduct_client::command_runner::CommandOutput>>
    {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.started
            .lock()
            .unwrap()
            .push(format!("{program} {}", args.join(" ")));
        Box::pin(async move {
            if n == self.hold {
                self.entered.notify_one();
                let _ = self.release.acquire().await;
            }
            self.script.run(program, args, env).await
        })
    }
}

fn shop_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".appduct")).unwrap();
    std::fs::write(
        dir.path().join(".appduct/config.json"),
        r#"{"scheme": "shopapp", "appId": {"android": "com.example.shop"}}"#,
    )
    .unwrap();
    dir
}

fn connect_line(id: i64, project: &tempfile::TempDir) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "appduct_connect",
        "arguments": {"target": "android", "cwd": project.path().display().to_string()}}})
    .to_string()
}

/// Two round trips through the daemon (`resources/read`), so a request that ignored its
/// cancel would have reached its next step by the end.
async fn settle_reads(c: &mut LineClient, first_id: i64) -> Vec<Value> {
    let mut seen = Vec::new();
    for id in [first_id, first_id + 1] {
        let read = json!({"jsonrpc": "2.0", "id": id, "method": "resources/read",
                          "params": {"uri": "appduct://sessions"}});
        c.send_line(&read.to_string()).await;
        seen.extend(c.until_response(id).await);
    }
    seen
}

async fn wait_entered(n: &tokio::sync::Notify) {
    tokio::time::timeout(Duration::from_secs(10), n.notified())
        .await
        .expect("the gated command ran");
}

/// An initialized client whose `appduct_connect` (id 7, target android) is blocked inside the
/// `hold`-th delivery command; the project dir must outlive the test.
async fn connect_held_at(
    hold: usize,
) -> (
    Arc<FakeDaemon>,
    Arc<GatedRunner>,
    LineClient,
    tempfile::TempDir,
) {
    let fake = FakeDaemon::new(&["link.create", "sessions.revoke", "sessions.list"]);
    let runner = GatedRunner::new(hold, &[ADB_ONE, "", ""]);
    let project = shop_project();
    let mut c = LineClient::with_bridge(bridge_with_runner(&fake, runner.clone()), fake.clone());
    c.initialize().await;
    c.send_line(&connect_line(7, &project)).await;
    wait_entered(&runner.entered).await;
    (fake, runner, c, project)
}

#[tokio::test]
async fn a_cancel_during_device_detection_mints_nothing() {
    let (fake, runner, mut c, _project) = connect_held_at(0).await;
    let mut seen = c.cancel(7).await;
    runner.release.add_permits(1);
    seen.extend(settle_reads(&mut c, 8).await);
    assert!(fake.requests("link.create").is_empty(), "no link minted");
    assert_eq!(
        runner.ran().len(),
        1,
        "only the detection ran: {:?}",
        runner.ran()
    );
    assert!(!seen.iter().any(|m| m["id"] == 7), "{seen:?}");
}

#[tokio::test]
async fn a_cancel_during_delivery_revokes_the_minted_link() {
    // adb devices, then `adb reverse` is held, then `am start` must never run.
    let (fake, runner, mut c, _project) = connect_held_at(1).await;
    assert_eq!(fake.requests("link.create").len(), 1);
    c.cancel(7).await;
    fake.wait_for("sessions.revoke", 1).await;
    assert_eq!(
        fake.requests("sessions.revoke")[0]["selector"],
        "Zk3pQ0mX8sL1vB2n",
        "the minted link is revoked by id"
    );
    runner.release.add_permits(1);
    settle_reads(&mut c, 8).await;
    assert_eq!(
        runner.ran().len(),
        2,
        "the link was never opened: {:?}",
        runner.ran()
    );
}

#[tokio::test]
async fn a_cancel_stops_the_read_only_built_ins_between_daemon_calls() {
    let fake = prompt_fake(&["sessions.list"]);
    let gate = fake.hold("sessions.describe");
    let bridge = bridge_with_runner(&fake, Arc::new(ScriptedCommandRunner::new()));
    let mut c = LineClient::with_bridge(bridge, fake.clone());
    c.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "appduct_list_tools", "arguments": {}}});
    c.send_line(&call.to_string()).await;
    gate.entered().await;
    let mut seen = c.cancel(7).await;
    gate.open();
    seen.extend(settle_reads(&mut c, 8).await);
    assert!(
        fake.requests("tools.list").is_empty(),
        "the listing stopped after the cancel"
    );
    assert!(!seen.iter().any(|m| m["id"] == 7), "{seen:?}");
}
