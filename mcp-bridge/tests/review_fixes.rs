//! Regression tests for the findings of the bridge review: malformed requests, the fake
//! daemon's guard, cancellation before the consent step and during `appduct_connect`, MRTR
//! retries, the roots cache, `appduct_status` side effects and transient failures
//! (06 §6.1, §6.6, §6.8.1, §6.8.9, §6.10, §6.12, §6.13).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use appduct_client::command_runner::{CommandRunner, ScriptedCommandRunner};
use appduct_mcp::{Bridge, DaemonConnector, LineTransport, serve_stdio};
use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

fn v2025() -> TestClient {
    TestClient::new(ProtocolVersion::V_2025_11_25, None)
}

// ---------------------------------------------------------------------------------------------
// Finding 3: an unregistered daemon method fails the test
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_unregistered_daemon_method_fails_the_test_on_its_own_thread() {
    // `sessions.describe` is not registered: the fake answers -32601 and records it.
    let fake = FakeDaemon::new(&[]);
    let h = start(fake.clone(), v2025()).await;
    let r = h.call("appduct_list_tools", json!({})).await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(fake.unexpected(), vec!["sessions.describe".to_owned()]);
    // Dropping the harness (as the end of a test does) panics here, on the test thread.
    let dropped = std::panic::catch_unwind(AssertUnwindSafe(|| drop(h)));
    assert!(
        dropped.is_err(),
        "the harness must fail the test that reached an unregistered method"
    );
    let raw = RawClient::start(fake);
    let dropped = std::panic::catch_unwind(AssertUnwindSafe(|| drop(raw)));
    assert!(dropped.is_err(), "the raw client checks the record too");
}

// ---------------------------------------------------------------------------------------------
// Finding 1: malformed tools/call params are -32602, unknown methods -32601
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn malformed_tools_call_params_are_invalid_params() {
    let mut raw = RawClient::start(FakeDaemon::new(&[]));
    raw.initialize("2025-11-25", json!({})).await;
    let cases = [
        json!({"name": "appduct_status", "arguments": "x"}),
        json!({"name": "appduct_status", "arguments": [1]}),
        json!({"arguments": {}}),
        json!({"name": 7}),
    ];
    for (i, params) in cases.iter().enumerate() {
        let id = 10 + i as i64;
        let (r, _) = raw.request(id, "tools/call", params.clone()).await;
        assert_eq!(r["error"]["code"], -32602, "{params}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("tools/call"),
            "{r}"
        );
    }
    // A resources/read without a uri is -32602 as well.
    let (r, _) = raw.request(20, "resources/read", json!({})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // Methods the bridge does not serve stay -32601, whatever their params.
    let (r, _) = raw.request(21, "prompts/list", json!({})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    let (r, _) = raw.request(22, "no/such/method", json!({"x": 1})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    // `arguments: null` is no arguments: a normal call.
    let (r, _) = raw
        .request(
            23,
            "tools/call",
            json!({"name": "appduct_describe_tool", "arguments": null}),
        )
        .await;
    assert_eq!(
        r["result"]["_meta"]["appduct/error"]["type"], "invalid_request",
        "{r}"
    );
}

// ---------------------------------------------------------------------------------------------
// Finding 2: the stdio framing answers lines that are not JSON or not JSON-RPC
// ---------------------------------------------------------------------------------------------

/// A raw line client on the bridge served over the production framing ([`LineTransport`]).
struct LineClient {
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    fake: Arc<FakeDaemon>,
}

impl Drop for LineClient {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.fake.assert_no_unexpected();
        }
    }
}

fn fake_bridge(fake: &Arc<FakeDaemon>) -> Bridge {
    let connector = Arc::new(FakeConnector {
        fake: FakeRef(fake.clone()),
        no_daemon_without_spawn: true,
    });
    Bridge::with_runner(
        connector,
        test_options(),
        test_env(),
        Arc::new(ScriptedCommandRunner::new()),
    )
}

impl LineClient {
    fn start(fake: Arc<FakeDaemon>) -> Self {
        let (server_io, client_io) = tokio::io::duplex(1 << 20);
        let bridge = fake_bridge(&fake);
        let (r, w) = tokio::io::split(server_io);
        tokio::spawn(async move {
            if let Ok(running) = rmcp::serve_server(bridge, LineTransport::new(r, w)).await {
                let _ = running.waiting().await;
            }
        });
        Self::over(client_io, fake)
    }

    /// Serves `bridge` over the production framing.
    fn with_bridge(bridge: Bridge, fake: Arc<FakeDaemon>) -> Self {
        let (server_io, client_io) = tokio::io::duplex(1 << 20);
        let (r, w) = tokio::io::split(server_io);
        tokio::spawn(async move {
            if let Ok(running) = rmcp::serve_server(bridge, LineTransport::new(r, w)).await {
                let _ = running.waiting().await;
            }
        });
        Self::over(client_io, fake)
    }

    /// Every message up to and including the response to `id`.
    async fn until_response(&mut self, id: i64) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let m = self.next().await;
            let done = m.get("id") == Some(&json!(id)) && m.get("method").is_none();
            seen.push(m);
            if done {
                return seen;
            }
        }
    }

    /// Cancels request `id`, then waits until the bridge has handled the cancel: it handles
    /// messages in order, so the answer to a later `ping` means the cancel was seen.
    async fn cancel(&mut self, id: i64) -> Vec<Value> {
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": id, "reason": "test"}});
        self.send_line(&cancel.to_string()).await;
        let ping = json!({"jsonrpc": "2.0", "id": 900 + id, "method": "ping"});
        self.send_line(&ping.to_string()).await;
        self.until_response(900 + id).await
    }

    fn over(client_io: tokio::io::DuplexStream, fake: Arc<FakeDaemon>) -> Self {
        let (r, w) = tokio::io::split(client_io);
        Self {
            write: w,
            lines: tokio::io::BufReader::new(r).lines(),
            fake,
        }
    }

    /// Closes the client's output: the bridge sees end of input.
    async fn close_input(&mut self) {
        self.write.shutdown().await.unwrap();
    }

    async fn send_line(&mut self, line: &str) {
        self.write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }

    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .expect("a message in time")
            .unwrap()
            .expect("open stream");
        serde_json::from_str(&line).expect("every output line is JSON")
    }

    async fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_line(&msg.to_string()).await;
        self.next().await
    }

    async fn initialize(&mut self) {
        self.initialize_with(json!({})).await;
    }

    async fn initialize_with(&mut self, capabilities: Value) {
        let r = self
            .request(
                0,
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                       "clientInfo": {"name": "raw", "version": "1"}}),
            )
            .await;
        assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{r}");
        self.send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
    }
}

#[tokio::test]
async fn lines_that_are_not_json_rpc_requests_get_errors_with_an_id_member() {
    let mut c = LineClient::start(FakeDaemon::new(&[]));
    c.initialize().await;
    let cases = [
        ("this is not json", -32700, Value::Null),
        (r#"{"jsonrpc":"2.0","id":77}"#, -32600, json!(77)),
        ("[1,2]", -32600, Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":78,"method":"tools/list","params":[1]}"#,
            -32600,
            json!(78),
        ),
    ];
    for (line, code, id) in cases {
        c.send_line(line).await;
        let r = c.next().await;
        assert_eq!(r["jsonrpc"], "2.0", "{line}: {r}");
        assert_eq!(r["error"]["code"], code, "{line}: {r}");
        assert_eq!(
            r.as_object().unwrap().get("id"),
            Some(&id),
            "{line}: the reply has an id member: {r}"
        );
    }
    // A malformed notification is never answered, and the server is still serving.
    c.send_line(r#"{"jsonrpc":"2.0","method":"notifications/x","params":[1]}"#)
        .await;
    let r = c.request(5, "tools/list", json!({})).await;
    assert_eq!(r["id"], 5, "the next line is the tools/list answer: {r}");
    assert_eq!(r["result"]["tools"].as_array().unwrap().len(), 9);
}

// ---------------------------------------------------------------------------------------------
// Finding 4: exit within the grace after EOF or a signal, also during startup
// ---------------------------------------------------------------------------------------------

/// The host over a duplex, stopped by `stop`; returns the client and the host's exit code.
fn host(
    fake: &Arc<FakeDaemon>,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> (LineClient, tokio::task::JoinHandle<u8>) {
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let (r, w) = tokio::io::split(server_io);
    let stop = async move {
        let _ = stop.await;
    };
    let task = tokio::spawn(serve_stdio(fake_bridge(fake), r, w, stop));
    (LineClient::over(client_io, fake.clone()), task)
}

/// A fake with a pending link, so `appduct_wait_for_session` stays in flight.
fn fake_with_pending_link() -> Arc<FakeDaemon> {
    let fake = FakeDaemon::new(&["sessions.describe", "events.subscribe"]);
    fake.state
        .lock()
        .unwrap()
        .pending_links
        .push("Zk3pQ0mX8sL1vB2n".into());
    fake
}

async fn start_long_wait(c: &mut LineClient) {
    c.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "appduct_wait_for_session",
        "arguments": {"sessionId": "Zk3pQ0mX8sL1vB2n", "timeoutMs": 600000}}});
    c.send_line(&call.to_string()).await;
    c.fake.wait_for("sessions.describe", 1).await;
}

#[tokio::test(start_paused = true)]
async fn end_of_input_with_work_in_flight_exits_0_within_the_grace() {
    let fake = fake_with_pending_link();
    let (_keep, stop) = tokio::sync::oneshot::channel();
    let (mut c, task) = host(&fake, stop);
    start_long_wait(&mut c).await;
    let eof_at = tokio::time::Instant::now();
    c.close_input().await;
    assert_eq!(task.await.unwrap(), 0);
    let took = eof_at.elapsed();
    assert!(
        took < test_options().exit_grace,
        "exit {took:?} after EOF, not within {:?}",
        test_options().exit_grace
    );
}

#[tokio::test(start_paused = true)]
async fn a_signal_with_work_in_flight_exits_0_within_the_grace() {
    let fake = fake_with_pending_link();
    let (signal, stop) = tokio::sync::oneshot::channel();
    let (mut c, task) = host(&fake, stop);
    start_long_wait(&mut c).await;
    let signal_at = tokio::time::Instant::now();
    signal.send(()).unwrap();
    assert_eq!(task.await.unwrap(), 0);
    let took = signal_at.elapsed();
    assert!(
        took < test_options().exit_grace,
        "exit {took:?} after the signal"
    );
}

/// A daemon connection that never completes (a daemon that hangs during startup).
#[derive(Debug)]
struct HangingConnector;

impl DaemonConnector for HangingConnector {
    fn connect(
        &self,
        _spawn: bool,
    ) -> appduct_client::BoxFuture<
        '_,
        Result<appduct_client::client::ControlClient, appduct_client::client::ClientError>,
    > {
        Box::pin(std::future::pending())
    }
}

#[tokio::test]
async fn a_signal_during_the_startup_connection_exits_0() {
    let bridge = Bridge::with_runner(
        Arc::new(HangingConnector),
        test_options(),
        test_env(),
        Arc::new(ScriptedCommandRunner::new()),
    );
    let (_client_io, server_io) = tokio::io::duplex(1024);
    let (r, w) = tokio::io::split(server_io);
    let (signal, stop) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve_stdio(bridge, r, w, async move {
        let _ = stop.await;
    }));
    signal.send(()).unwrap();
    let code = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the host ends on the signal although the daemon never answered")
        .unwrap();
    assert_eq!(code, 0);
}

// ---------------------------------------------------------------------------------------------
// Finding 6: a cancel before the consent step sends nothing more
// ---------------------------------------------------------------------------------------------

const SID: &str = "q3VfZ0xkR2ptTnB4";

fn prompt_fake(extra: &[&'static str]) -> Arc<FakeDaemon> {
    let mut methods = vec!["sessions.describe", "tools.list", "events.subscribe"];
    methods.extend_from_slice(extra);
    let fake = FakeDaemon::new(&methods);
    fake.add_session(
        session(SID, "pixel-8"),
        vec![tool(
            json!({"name": "reset", "description": "Reset.", "input_schema": {"type": "object"}}),
            appduct_protocol::control::PolicyDecision::Prompt,
        )],
    );
    fake
}

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
    let gate = Gate::new("tools.list");
    let bridge = gated_bridge(&fake, &gate, Arc::new(ScriptedCommandRunner::new()));
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
    let gate = Gate::new("tools.list");
    let bridge = gated_bridge(&fake, &gate, Arc::new(ScriptedCommandRunner::new()));
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
// Finding 7: appduct_connect and the read-only built-ins stop on a cancel
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
    let mut c = LineClient::with_bridge(
        gated_bridge(&fake, &Gate::new("none"), runner.clone()),
        fake.clone(),
    );
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
    let gate = Gate::new("sessions.describe");
    let bridge = gated_bridge(&fake, &gate, Arc::new(ScriptedCommandRunner::new()));
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

// ---------------------------------------------------------------------------------------------
// Finding 8: an MRTR retry without an answer checks the channel again
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_mrtr_retry_without_an_answer_gets_input_required_only_with_the_channel() {
    let fake = prompt_fake(&[
        "tools.call",
        "daemon.hello",
        "consent.create",
        "consent.take",
    ]);
    let mut raw = RawClient::start(fake.clone());
    let form = meta_2026(json!({"elicitation": {"form": {}}}));
    let first = json!({"name": "appduct_call_tool", "arguments": {"name": "reset"}, "_meta": form});
    let (r, _) = raw.request(1, "tools/call", first.clone()).await;
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    // A retry that still declares form mode is asked again, with a new handle.
    let mut retry = first.clone();
    retry["requestState"] = r["result"]["requestState"].clone();
    let (r, _) = raw.request(2, "tools/call", retry).await;
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    // A retry that declares no elicitation gets the no-channel row: the call goes to the
    // daemon without consent (which answers policy_denied / no_consent_channel).
    let mut retry = first;
    retry["requestState"] = r["result"]["requestState"].clone();
    retry["_meta"] = meta_2026(json!({}));
    let (r, _) = raw.request(3, "tools/call", retry).await;
    assert_ne!(
        r["result"]["resultType"], "input_required",
        "no input_required for an input type the client did not declare: {r}"
    );
    let calls = fake.requests("tools.call");
    assert_eq!(calls.len(), 1, "{r}");
    assert!(calls[0].get("consent").is_none(), "{calls:?}");
    assert_eq!(fake.requests("consent.create").len(), 2);
}

// ---------------------------------------------------------------------------------------------
// Finding 9: the roots cache
// ---------------------------------------------------------------------------------------------

fn roots_client(roots_timeout: Duration) -> LineClient {
    let fake = FakeDaemon::new(&[]);
    let options = appduct_mcp::BridgeOptions {
        roots_timeout,
        ..test_options()
    };
    let bridge = Bridge::with_runner(
        Arc::new(FakeConnector {
            fake: FakeRef(fake.clone()),
            no_daemon_without_spawn: true,
        }),
        options,
        test_env(),
        Arc::new(ScriptedCommandRunner::new()),
    );
    LineClient::with_bridge(bridge, fake)
}

fn status_line(id: i64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "appduct_status", "arguments": {}}})
    .to_string()
}

fn roots_answer(request: &Value, dirs: &[&std::path::Path]) -> String {
    let roots: Vec<Value> = dirs
        .iter()
        .map(|d| json!({"uri": format!("file://{}", d.display())}))
        .collect();
    json!({"jsonrpc": "2.0", "id": request["id"], "result": {"roots": roots}}).to_string()
}

/// The next message, which must be a `roots/list` request.
async fn expect_roots_request(c: &mut LineClient) -> Value {
    let m = c.next().await;
    assert_eq!(
        m["method"], "roots/list",
        "expected a roots/list request: {m}"
    );
    m
}

fn project_dir(response: &Value) -> String {
    response["result"]["structuredContent"]["project"]["dir"]
        .as_str()
        .unwrap_or_else(|| panic!("a status result: {response}"))
        .to_owned()
}

fn canonical(d: &tempfile::TempDir) -> String {
    std::fs::canonicalize(d.path())
        .unwrap()
        .display()
        .to_string()
}

#[tokio::test]
async fn a_list_changed_during_a_roots_read_makes_the_next_call_read_again() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut c = roots_client(Duration::from_secs(10));
    c.initialize_with(json!({"roots": {"listChanged": true}}))
        .await;
    c.send_line(&status_line(1)).await;
    let read = expect_roots_request(&mut c).await;
    // The roots change while the client is still answering the old list.
    c.send_line(r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#)
        .await;
    let pong = json!({"jsonrpc": "2.0", "id": 50, "method": "ping"}).to_string();
    c.send_line(&pong).await;
    assert_eq!(c.next().await["id"], 50);
    c.send_line(&roots_answer(&read, &[a.path()])).await;
    assert_eq!(project_dir(&c.next().await), canonical(&a));
    // The old answer is not kept as current: the next call asks again.
    c.send_line(&status_line(2)).await;
    let read = expect_roots_request(&mut c).await;
    c.send_line(&roots_answer(&read, &[b.path()])).await;
    assert_eq!(project_dir(&c.next().await), canonical(&b));
    // And that answer is cached.
    c.send_line(&status_line(3)).await;
    assert_eq!(project_dir(&c.next().await), canonical(&b));
}

#[tokio::test]
async fn concurrent_first_resolutions_share_one_roots_read() {
    let a = tempfile::tempdir().unwrap();
    let mut c = roots_client(Duration::from_secs(10));
    c.initialize_with(json!({"roots": {}})).await;
    c.send_line(&status_line(1)).await;
    c.send_line(&status_line(2)).await;
    let read = expect_roots_request(&mut c).await;
    // Both calls are under way once a later ping is answered.
    let pong = json!({"jsonrpc": "2.0", "id": 50, "method": "ping"}).to_string();
    c.send_line(&pong).await;
    let mut seen = vec![c.until_response(50).await];
    c.send_line(&roots_answer(&read, &[a.path()])).await;
    let mut answered = 0;
    while answered < 2 {
        let m = c.next().await;
        if m["method"] == "roots/list" {
            c.send_line(&roots_answer(&m, &[a.path()])).await;
        }
        if m.get("result").is_some() {
            assert_eq!(project_dir(&m), canonical(&a));
            answered += 1;
        }
        seen.push(vec![m]);
    }
    let reads = seen
        .iter()
        .flatten()
        .filter(|m| m["method"] == "roots/list")
        .count();
    assert_eq!(
        reads, 0,
        "the second call waited for the first read: {seen:?}"
    );
}

#[tokio::test]
async fn a_roots_read_that_times_out_is_cancelled() {
    let mut c = roots_client(Duration::from_millis(200));
    c.initialize_with(json!({"roots": {}})).await;
    c.send_line(&status_line(1)).await;
    let read = expect_roots_request(&mut c).await;
    // Never answered: the bridge gives up, cancels its request, and falls through.
    let (mut cancelled, mut answered) = (false, false);
    while !(cancelled && answered) {
        let m = c.next().await;
        if m["method"] == "notifications/cancelled" {
            assert_eq!(m["params"]["requestId"], read["id"], "{m}");
            cancelled = true;
        } else if m["id"] == 1 {
            assert_eq!(
                m["result"]["structuredContent"]["project"]["cwdSource"], "server",
                "{m}"
            );
            answered = true;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Finding 10: appduct_status connects without spawning or checking versions
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_status_connection_neither_spawns_nor_runs_the_version_check() {
    let dir = tempfile::Builder::new()
        .prefix("adm")
        .tempdir_in("/tmp")
        .unwrap();
    // A daemon serving only daemon.status on the real socket: a daemon.hello (the version
    // check, which may replace an older daemon) would be an unregistered method.
    let fake = FakeDaemon::new(&["daemon.status"]);
    let listener = tokio::net::UnixListener::bind(dir.path().join("daemon.sock")).unwrap();
    let serving = fake.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(appduct_daemon::control_server::serve_connection(
                stream,
                Arc::new(FakeHandler(serving.clone())),
                appduct_daemon::control_server::ServerOptions::default(),
            ));
        }
    });
    let mut options = appduct_client::client::ClientOptions::new(dir.path(), "appduct-mcp");
    options.version_policy.force_restart = true;
    let connector = appduct_mcp::SocketConnector::new(options);
    let client = connector.connect(false).await.unwrap();
    let status = client
        .call::<appduct_protocol::control::DaemonStatus>(Default::default())
        .await
        .unwrap();
    assert_eq!(status.wss_port, 8443);
    assert_eq!(fake.methods(), vec!["daemon.status".to_owned()]);
    fake.assert_no_unexpected();
    // Without a daemon, nothing is spawned: the state dir gains no pidfile or log.
    let empty = tempfile::Builder::new()
        .prefix("adm")
        .tempdir_in("/tmp")
        .unwrap();
    let options = appduct_client::client::ClientOptions::new(empty.path(), "appduct-mcp");
    let err = appduct_mcp::SocketConnector::new(options)
        .connect(false)
        .await
        .unwrap_err();
    assert!(
        matches!(err, appduct_client::client::ClientError::Unreachable { .. }),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}

// ---------------------------------------------------------------------------------------------
// Finding 12: appduct_status reports input_required only if the daemon has consent records
// ---------------------------------------------------------------------------------------------

/// The fake behind a daemon whose `daemon.hello` advertises `features` (counting the hellos).
struct HelloHandler {
    fake: FakeHandler,
    features: Vec<&'static str>,
    hellos: Arc<std::sync::atomic::AtomicUsize>,
    /// Hellos to fail (with an internal error) before answering.
    failures: Arc<std::sync::atomic::AtomicUsize>,
}

impl appduct_daemon::control_server::ControlHandler for HelloHandler {
    fn handle(
        &self,
        conn: &appduct_daemon::control_server::Connection,
        id: appduct_protocol::jsonrpc::RequestId,
        request: appduct_protocol::control::ControlRequest,
    ) -> appduct_daemon::control_server::BoxFuture<'static, appduct_daemon::control_server::Reply>
    {
        use appduct_daemon::control_server::Reply;
        use std::sync::atomic::Ordering;
        if !matches!(
            request,
            appduct_protocol::control::ControlRequest::DaemonHello(_)
        ) {
            return self.fake.handle(conn, id, request);
        }
        self.hellos.fetch_add(1, Ordering::SeqCst);
        let failing = self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let reply = if failing {
            Reply::Err(appduct_protocol::jsonrpc::ErrorObject::application(
                appduct_protocol::errors::ErrorType::InternalError,
                "hello failed",
            ))
        } else {
            Reply::Ok(json!({
                "version": env!("CARGO_PKG_VERSION"), "controlProtocol": 1, "minControlProtocol": 1,
                "pid": 1, "startedAt": "2026-11-30T09:12:03.120Z", "stateDir": "/tmp/x",
                "features": self.features, "sessionCount": 0, "pendingLinks": 0, "pendingCalls": 0
            }))
        };
        Box::pin(async move { reply })
    }
}

#[derive(Debug)]
struct HelloConnector {
    fake: FakeRef,
    features: Vec<&'static str>,
    hellos: Arc<std::sync::atomic::AtomicUsize>,
    failures: Arc<std::sync::atomic::AtomicUsize>,
}

impl HelloConnector {
    fn new(fake: &Arc<FakeDaemon>, features: &[&'static str], failures: usize) -> Arc<Self> {
        Arc::new(Self {
            fake: FakeRef(fake.clone()),
            features: features.to_vec(),
            hellos: Default::default(),
            failures: Arc::new(failures.into()),
        })
    }
}

impl DaemonConnector for HelloConnector {
    fn connect(
        &self,
        _spawn: bool,
    ) -> appduct_client::BoxFuture<
        '_,
        Result<appduct_client::client::ControlClient, appduct_client::client::ClientError>,
    > {
        let handler = HelloHandler {
            fake: FakeHandler(self.fake.0.clone()),
            features: self.features.clone(),
            hellos: self.hellos.clone(),
            failures: self.failures.clone(),
        };
        Box::pin(async move { Ok(in_memory_client(handler)) })
    }
}

fn hello_client(connector: Arc<HelloConnector>, fake: &Arc<FakeDaemon>) -> LineClient {
    let bridge = Bridge::with_runner(
        connector,
        test_options(),
        test_env(),
        Arc::new(ScriptedCommandRunner::new()),
    );
    LineClient::with_bridge(bridge, fake.clone())
}

async fn status_consent_2026(c: &mut LineClient, id: i64) -> Value {
    let meta = meta_2026(json!({"elicitation": {"form": {}}}));
    let r = c
        .request(
            id,
            "tools/call",
            json!({"name": "appduct_status", "arguments": {}, "_meta": meta}),
        )
        .await;
    r["result"]["structuredContent"]["consent"].clone()
}

#[tokio::test]
async fn status_on_2026_reports_input_required_only_with_consent_records() {
    let old = FakeDaemon::new(&["daemon.status"]);
    let without = HelloConnector::new(&old, &["events.subscribe"], 0);
    let mut c = hello_client(without, &old);
    assert_eq!(
        status_consent_2026(&mut c, 1).await,
        "none",
        "a daemon without consent.records gives no channel"
    );
    let current = FakeDaemon::new(&["daemon.status"]);
    let with = HelloConnector::new(
        &current,
        &[appduct_protocol::control::features::CONSENT_RECORDS],
        0,
    );
    let mut c = hello_client(with, &current);
    assert_eq!(status_consent_2026(&mut c, 1).await, "input_required");
}

// ---------------------------------------------------------------------------------------------
// Finding 13: one transient failure does not disable MRTR or elicitation for good
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_failed_daemon_hello_is_retried_on_the_next_need() {
    let fake = prompt_fake(&["tools.call", "consent.create"]);
    let connector = HelloConnector::new(
        &fake,
        &[appduct_protocol::control::features::CONSENT_RECORDS],
        1,
    );
    let hellos = connector.hellos.clone();
    let mut c = hello_client(connector, &fake);
    let meta = meta_2026(json!({"elicitation": {"form": {}}}));
    let call = json!({"name": "appduct_call_tool", "arguments": {"name": "reset"}, "_meta": meta});
    // The hello fails: this call has no channel, and goes to the daemon without consent.
    let r = c.request(1, "tools/call", call.clone()).await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(fake.requests("tools.call").len(), 1);
    // The next call asks again, learns consent.records, and gets the MRTR round.
    let r = c.request(2, "tools/call", call).await;
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    assert_eq!(hellos.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// Sends a prompt call and answers its `elicitation/create` with `answer` (a JSON-RPC error
/// object, or a result); returns whether an elicitation was asked at all.
async fn prompt_call(c: &mut LineClient, id: i64, answer: Value) -> bool {
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "appduct_call_tool", "arguments": {"name": "reset"}}});
    c.send_line(&call.to_string()).await;
    let mut asked = false;
    loop {
        let m = c.next().await;
        if m["method"] == "elicitation/create" {
            asked = true;
            let mut reply = json!({"jsonrpc": "2.0", "id": m["id"]});
            if answer.get("code").is_some() {
                reply["error"] = answer.clone();
            } else {
                reply["result"] = answer.clone();
            }
            c.send_line(&reply.to_string()).await;
        } else if m["id"] == id {
            return asked;
        }
    }
}

#[tokio::test]
async fn only_a_rejected_form_request_disables_elicitation() {
    let fake = prompt_fake(&["tools.call"]);
    let mut c = LineClient::start(fake.clone());
    c.initialize_with(json!({"elicitation": {}})).await;
    let transient = json!({"code": -32603, "message": "busy"});
    assert!(prompt_call(&mut c, 1, transient.clone()).await);
    // A transient failure costs that call its channel, not the next one.
    assert!(prompt_call(&mut c, 2, transient).await, "asked again");
    let malformed = json!({"unexpected": true});
    assert!(prompt_call(&mut c, 3, malformed).await);
    assert!(prompt_call(&mut c, 4, json!({"code": -32603, "message": "x"})).await);
    // Invalid params: the client rejects the form request; it is not asked again.
    let rejected = json!({"code": -32602, "message": "unknown field mode"});
    assert!(prompt_call(&mut c, 5, rejected).await);
    assert!(
        !prompt_call(&mut c, 6, json!({"action": "accept"})).await,
        "a client that rejects the request is not asked again"
    );
    // Every call without consent went to the daemon without it.
    let calls = fake.requests("tools.call");
    assert_eq!(calls.len(), 6);
    assert!(
        calls.iter().all(|p| p.get("consent").is_none()),
        "{calls:?}"
    );
}
