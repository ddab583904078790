//! Tool calls end to end (issue 4, §C10.1–§C12): a real in-process daemon, real `appduct-sdk`
//! apps that claim over the wss listener with the pin check, and typed control clients. Every
//! wait is bounded and tied to a condition; nothing sleeps to synchronise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;

use std::path::Path;
use std::time::{Duration, Instant};

use appduct_client::client::{CallProgress, ToolCallError};
use appduct_client::config::{Config, Decision};
use appduct_daemon::daemon::{Daemon, DaemonHandle, DaemonOptions};
use appduct_protocol::control::{
    LinkCreate, LinkCreateParams, SessionState, ToolsCallParams, ToolsCallResult, ToolsCancel,
    ToolsCancelParams, ToolsList, ToolsListParams,
};
use appduct_protocol::link::compose_deep_link;
use appduct_sdk::{CallContext, Client, ClientState, ToolError, Trust};
use daemon_support::{WAIT, memory_client, state_dir};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::{mpsc, oneshot};
use tokio::time::timeout;

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// One handler invocation, held by the test: it answers through `answer` (or never does).
struct Invocation {
    args: Value,
    ctx: CallContext,
    answer: oneshot::Sender<Result<Value, ToolError>>,
}

impl Invocation {
    fn tag(&self) -> String {
        self.args["tag"].as_str().unwrap_or_default().to_owned()
    }
}

/// Handlers that hand every invocation to the test and wait for its answer or a cancellation.
struct Gate {
    tx: mpsc::UnboundedSender<Invocation>,
    rx: mpsc::UnboundedReceiver<Invocation>,
}

impl Gate {
    fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self { tx, rx }
    }

    fn register(&self, app: &Client, descriptor: Value) {
        let tx = self.tx.clone();
        app.register_tool(&descriptor, move |args: Value, ctx: CallContext| {
            let tx = tx.clone();
            async move {
                let (answer, rx) = oneshot::channel();
                let _ = tx.send(Invocation {
                    args,
                    ctx: ctx.clone(),
                    answer,
                });
                tokio::select! {
                    answered = rx => answered.unwrap_or_else(|_| Err(ToolError::execution("dropped"))),
                    reason = ctx.cancelled() => Err(ToolError::execution(reason)),
                }
            }
        })
        .unwrap();
    }

    async fn next(&mut self) -> Invocation {
        timeout(WAIT, self.rx.recv())
            .await
            .expect("no handler invocation")
            .unwrap()
    }

    /// Asserts no invocation reached a handler so far.
    fn assert_idle(&mut self) {
        if let Ok(inv) = self.rx.try_recv() {
            panic!("a handler was invoked with {}", inv.args);
        }
    }
}

struct Setup {
    _dir: TempDir,
    daemon: DaemonHandle,
    app: Client,
    alias: String,
    session_id: String,
    gate: Gate,
}

fn object_schema() -> Value {
    json!({"type": "object", "properties": {"tag": {"type": "string"},
           "secret": {"type": "string"}}})
}

fn tool(name: &str) -> Value {
    json!({"name": name, "description": format!("The {name} tool."),
           "input_schema": object_schema(), "output_schema": {"type": "object"}})
}

async fn start_daemon(edit: impl FnOnce(&mut Config, &Path)) -> (TempDir, DaemonHandle) {
    let dir = state_dir();
    let mut config = Config::defaults(dir.path());
    edit(&mut config, dir.path());
    let daemon = Daemon::start(DaemonOptions::for_tests(dir.path()).config(config))
        .await
        .unwrap();
    (dir, daemon)
}

/// Mints a native link, composes the deep link with the daemon's pin, and connects a real SDK
/// app that trusts only that pin and registered `tools` first; returns once the daemon holds
/// its whole registry.
async fn setup_with(edit: impl FnOnce(&mut Config, &Path), tools: &[Value]) -> Setup {
    let (dir, daemon) = start_daemon(edit).await;
    let link = memory_client(&daemon)
        .call::<LinkCreate>(LinkCreateParams::default())
        .await
        .unwrap();
    let pin = daemon.pin();
    assert_eq!(link.pin, pin.to_string());
    let deep_link = compose_deep_link("test", &link.deep_link_payload, Some(&pin)).unwrap();
    let app = Client::builder()
        .trust(Trust::Pin(vec![pin]))
        .device(Some("Google"), Some("Pixel 8"), Some("Android 15"))
        .build()
        .unwrap();
    let gate = Gate::new();
    for descriptor in tools {
        gate.register(&app, descriptor.clone());
    }
    let session = timeout(WAIT, app.connect(&deep_link))
        .await
        .unwrap()
        .unwrap();
    let session_id = link.session_id.clone();
    assert_eq!(session.session_id, session_id);
    wait_registry(&daemon, &session_id, tools.len()).await;
    let alias = daemon.sessions().summary(&session_id).unwrap().alias;
    assert_eq!(session.alias, alias);
    Setup {
        _dir: dir,
        daemon,
        app,
        alias,
        session_id,
        gate,
    }
}

async fn setup(tools: &[Value]) -> Setup {
    setup_with(|_, _| {}, tools).await
}

/// Waits until the session is active and the daemon holds `count` tools of it.
async fn wait_registry(daemon: &DaemonHandle, session_id: &str, count: usize) {
    let sessions = daemon.sessions().clone();
    daemon_support::until(move || {
        sessions
            .summary(session_id)
            .is_some_and(|s| s.state == SessionState::Active)
            && sessions
                .tools_of(session_id)
                .is_some_and(|t| t.len() == count)
    })
    .await;
}

fn call(name: &str, extra: Value) -> ToolsCallParams {
    let mut params = json!({"name": name});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    serde_json::from_value(params).unwrap()
}

async fn settled(
    pending: impl Future<Output = Result<ToolsCallResult, ToolCallError>>,
) -> Result<ToolsCallResult, ToolCallError> {
    timeout(WAIT, pending)
        .await
        .expect("the call never settled")
}

fn error_type(e: &ToolCallError) -> &'static str {
    e.error.error_type().as_str()
}

/// Resolves with the reason once the handler's call is cancelled (bounded).
async fn cancel_reason(ctx: &CallContext) -> String {
    timeout(WAIT, ctx.cancelled())
        .await
        .expect("the handler never saw a cancellation")
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn list_and_call_round_trip_returns_result_and_call_id() {
    let mut s = setup(&[tool("echo")]).await;
    let control = memory_client(&s.daemon);

    let listed = control
        .call::<ToolsList>(ToolsListParams::default())
        .await
        .unwrap();
    assert_eq!(listed.total, 1);
    assert_eq!(listed.tools[0].descriptor["name"], "echo");
    assert_eq!(listed.tools[0].policy.as_str(), "allow");

    let pending = control.call_tool(call("echo", json!({"args": {"tag": "hi"}})));
    let driver = async {
        let inv = s.gate.next().await;
        assert_eq!(inv.args, json!({"tag": "hi"}));
        assert_eq!(inv.ctx.session_id(), s.session_id);
        assert_eq!(inv.ctx.tool_name(), "echo");
        inv.answer.send(Ok(json!({"echoed": "hi"}))).unwrap();
    };
    let (result, ()) = tokio::join!(settled(pending), driver);
    let result = result.unwrap();
    assert_eq!(result.result, Some(json!({"echoed": "hi"})));
    assert!(result.call_id.starts_with("call_"), "{}", result.call_id);
    assert_eq!(result.session_id, s.session_id);
    assert_eq!(result.alias, s.alias);
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn three_concurrent_calls_answered_out_of_order() {
    let mut s = setup(&[tool("work")]).await;
    let control = memory_client(&s.daemon);
    let calls = ["a", "b", "c"].map(|tag| {
        let control = control.clone();
        tokio::spawn(async move {
            settled(control.call_tool(call("work", json!({"args": {"tag": tag}})))).await
        })
    });
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(s.gate.next().await);
    }
    // Released in reverse order of arrival.
    while let Some(inv) = held.pop() {
        let tag = inv.tag();
        inv.answer.send(Ok(json!({"tag": tag}))).unwrap();
    }
    let mut ids = Vec::new();
    for (handle, tag) in calls.into_iter().zip(["a", "b", "c"]) {
        let result = handle.await.unwrap().unwrap();
        assert_eq!(
            result.result,
            Some(json!({"tag": tag})),
            "each caller gets its own result"
        );
        ids.push(result.call_id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn cancelling_one_of_two_concurrent_same_tool_calls_cancels_only_that_one() {
    let mut s = setup(&[tool("work")]).await;
    let control = memory_client(&s.daemon);
    let first = {
        let c = control.clone();
        tokio::spawn(async move {
            settled(c.call_tool(call(
                "work",
                json!({"args": {"tag": "keep"}, "callId": "keep-1"}),
            )))
            .await
        })
    };
    let second = {
        let c = control.clone();
        tokio::spawn(async move {
            settled(c.call_tool(call(
                "work",
                json!({"args": {"tag": "drop"}, "callId": "drop-1"}),
            )))
            .await
        })
    };
    let mut keep = None;
    let mut dropped = None;
    for _ in 0..2 {
        let inv = s.gate.next().await;
        match inv.tag().as_str() {
            "keep" => keep = Some(inv),
            _ => dropped = Some(inv),
        }
    }
    let (keep, dropped) = (keep.unwrap(), dropped.unwrap());

    let cancelled = control
        .call::<ToolsCancel>(ToolsCancelParams::new("drop-1"))
        .await
        .unwrap();
    assert!(cancelled.cancelled);
    assert_eq!(cancel_reason(&dropped.ctx).await, "client_cancelled");
    let e = second.await.unwrap().unwrap_err();
    assert_eq!(error_type(&e), "tool_cancelled");
    assert_eq!(e.call_id.as_deref(), Some("drop-1"));

    assert!(
        !keep.ctx.is_cancelled(),
        "the other call of the same tool saw {:?}",
        keep.ctx.cancel_reason()
    );
    keep.answer.send(Ok(json!({"kept": true}))).unwrap();
    let result = first.await.unwrap().unwrap();
    assert_eq!(result.result, Some(json!({"kept": true})));
    assert_eq!(result.call_id, "keep-1");
    assert!(!keep.ctx.is_cancelled());
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn progress_of_each_call_reaches_only_its_caller() {
    let mut s = setup(&[tool("work")]).await;
    let one = memory_client(&s.daemon);
    let two = memory_client(&s.daemon);
    let (mut stream_one, pending_one) = one.call_tool_with_progress(call(
        "work",
        json!({"args": {"tag": "one"}, "callId": "p-one"}),
    ));
    let (mut stream_two, pending_two) = two.call_tool_with_progress(call(
        "work",
        json!({"args": {"tag": "two"}, "callId": "p-two"}),
    ));
    let mut invs = Vec::new();
    for _ in 0..2 {
        invs.push(s.gate.next().await);
    }
    for inv in &invs {
        let tag = inv.tag();
        assert!(inv.ctx.progress(Some(0.5), Some(&format!("half of {tag}"))));
    }
    // Each stream: started, then its own progress.
    for (stream, id, tag) in [
        (&mut stream_one, "p-one", "one"),
        (&mut stream_two, "p-two", "two"),
    ] {
        match timeout(WAIT, stream.next()).await.unwrap().unwrap() {
            CallProgress::Started(p) => assert_eq!(p.call_id, id),
            other => panic!("expected started, got {other:?}"),
        }
        match timeout(WAIT, stream.next()).await.unwrap().unwrap() {
            CallProgress::Progress(p) => {
                assert_eq!(p.call_id, id);
                assert_eq!(
                    p.message.as_deref(),
                    Some(format!("half of {tag}").as_str())
                );
            }
            other => panic!("expected progress, got {other:?}"),
        }
    }
    for inv in invs {
        let tag = inv.tag();
        inv.answer.send(Ok(json!({"tag": tag}))).unwrap();
    }
    assert_eq!(
        settled(pending_one.result()).await.unwrap().call_id,
        "p-one"
    );
    assert_eq!(
        settled(pending_two.result()).await.unwrap().call_id,
        "p-two"
    );
    // Nothing of the other call ever reached either stream.
    for (stream, id) in [(&mut stream_one, "p-one"), (&mut stream_two, "p-two")] {
        while let Some(n) = timeout(WAIT, stream.next()).await.unwrap() {
            let call_id = match n {
                CallProgress::Started(p) => p.call_id,
                CallProgress::Progress(p) => p.call_id,
            };
            assert_eq!(call_id, id);
        }
    }
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn declared_timeout_is_honoured_and_a_caller_timeout_shortens_it() {
    let mut declared = tool("hang");
    // Far apart, so the bounds below tolerate a loaded machine.
    declared["timeout_ms"] = json!(4000);
    let mut s = setup(&[declared]).await;
    let control = memory_client(&s.daemon);

    // The tool's own 4000 ms, not the 10 s default.
    let began = Instant::now();
    let pending = control.call_tool(call("hang", json!({"args": {"tag": "declared"}})));
    let (outcome, inv) = tokio::join!(settled(pending), s.gate.next());
    let elapsed = began.elapsed();
    let e = outcome.unwrap_err();
    assert_eq!(error_type(&e), "tool_timeout");
    assert!(
        elapsed >= Duration::from_millis(3900) && elapsed < Duration::from_millis(9500),
        "timed out after {elapsed:?}"
    );
    drop(inv);

    // A caller timeoutMs below the declared one wins (clamped at 1000).
    let began = Instant::now();
    let pending = control.call_tool(call(
        "hang",
        json!({"args": {"tag": "caller"}, "timeoutMs": 1000}),
    ));
    let (outcome, _inv) = tokio::join!(settled(pending), s.gate.next());
    let elapsed = began.elapsed();
    assert_eq!(error_type(&outcome.unwrap_err()), "tool_timeout");
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_millis(3800),
        "timed out after {elapsed:?}"
    );
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn dropping_the_control_connection_cancels_with_connection_closed() {
    let mut s = setup(&[tool("work")]).await;
    let control = memory_client(&s.daemon);
    let (progress, pending) =
        control.call_tool_with_progress(call("work", json!({"args": {"tag": "gone"}})));
    let inv = s.gate.next().await;
    drop(progress);
    drop(pending);
    drop(control);
    assert_eq!(cancel_reason(&inv.ctx).await, "connection_closed");
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn suspend_mid_call_fails_it_and_resume_with_snapshot_serves_the_next_call() {
    let mut s = setup(&[tool("work")]).await;
    let control = memory_client(&s.daemon);
    let pending = control.call_tool(call("work", json!({"args": {"tag": "mid"}})));
    let suspend = async {
        let inv = s.gate.next().await;
        s.app.background();
        inv
    };
    let (outcome, inv) = tokio::join!(settled(pending), suspend);
    assert_eq!(error_type(&outcome.unwrap_err()), "session_suspended");
    assert!(inv.ctx.is_cancelled());
    let summary = s.daemon.sessions().summary(&s.session_id).unwrap();
    assert_eq!(summary.state, SessionState::Suspended);

    s.app.foreground();
    let mut state = s.app.watch_state();
    timeout(WAIT, state.wait_for(|st| *st == ClientState::Active))
        .await
        .unwrap()
        .unwrap();
    wait_registry(&s.daemon, &s.session_id, 1).await;

    let pending = control.call_tool(call("work", json!({"args": {"tag": "after"}})));
    let driver = async {
        let inv = s.gate.next().await;
        assert_eq!(inv.tag(), "after");
        inv.answer.send(Ok(json!({"resumed": true}))).unwrap();
    };
    let (result, ()) = tokio::join!(settled(pending), driver);
    assert_eq!(result.unwrap().result, Some(json!({"resumed": true})));
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn policy_deny_prompt_allow_and_per_tool_override() {
    let mut wipe = tool("wipe");
    wipe["annotations"] = json!({"destructiveHint": true});
    let mut wipe_ok = tool("wipe_ok");
    wipe_ok["annotations"] = json!({"destructiveHint": true});
    let tools = [tool("plain"), wipe, wipe_ok, tool("ask")];
    let mut s = setup_with(
        |config, _| {
            config.policy.destructive = Decision::Deny;
            // The alias of the first "Pixel 8" is pixel-8.
            config
                .policy
                .tools
                .insert("pixel-8/wipe_ok".to_owned(), Decision::Allow);
            config
                .policy
                .tools
                .insert("pixel-8/ask".to_owned(), Decision::Prompt);
        },
        &tools,
    )
    .await;
    assert_eq!(s.alias, "pixel-8");
    let control = memory_client(&s.daemon);

    let listed = control
        .call::<ToolsList>(ToolsListParams::default())
        .await
        .unwrap();
    let policies: Vec<(String, &str)> = listed
        .tools
        .iter()
        .map(|t| {
            (
                t.descriptor["name"].as_str().unwrap().to_owned(),
                t.policy.as_str(),
            )
        })
        .collect();
    for expected in [
        ("plain", "allow"),
        ("wipe", "deny"),
        ("wipe_ok", "allow"),
        ("ask", "prompt"),
    ] {
        assert!(
            policies.contains(&(expected.0.to_owned(), expected.1)),
            "{policies:?}"
        );
    }

    // Denied and prompt-without-consent: policy_denied, no frame reaches a handler.
    let e = settled(control.call_tool(call("wipe", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(error_type(&e), "policy_denied");
    let details = e.error.details().unwrap();
    assert_eq!(details["configKey"], "policy.tools[\"pixel-8/wipe\"]");
    let e = settled(control.call_tool(call("ask", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(error_type(&e), "policy_denied");
    assert_eq!(e.error.details().unwrap()["reason"], "no_consent_channel");
    s.gate.assert_idle();

    // The override allows a destructive tool; prompt passes with consent; default allows.
    for (name, extra) in [
        ("wipe_ok", json!({})),
        ("ask", json!({"consent": "elicitation", "caller": "mcp"})),
        ("plain", json!({})),
    ] {
        let pending = control.call_tool(call(name, extra));
        let driver = async {
            let inv = s.gate.next().await;
            assert_eq!(inv.ctx.tool_name(), name);
            inv.answer.send(Ok(json!({"ran": name}))).unwrap();
        };
        let (result, ()) = tokio::join!(settled(pending), driver);
        assert_eq!(result.unwrap().result, Some(json!({"ran": name})));
    }
    s.gate.assert_idle();
    s.daemon.shutdown().await;
}

/// Audit lines (§C12) by bounded polling of `<state>/audit/*.jsonl`.
async fn audit_lines(daemon: &DaemonHandle, at_least: usize) -> (String, Vec<Value>) {
    let dir = daemon.state_dir().path().join("audit");
    timeout(WAIT, async {
        loop {
            daemon.audit().flush(WAIT).await.unwrap();
            let mut text = String::new();
            if let Ok(entries) = std::fs::read_dir(&dir) {
                let mut names: Vec<_> = entries
                    .map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
                    .collect();
                names.sort();
                for name in names {
                    text.push_str(&std::fs::read_to_string(name).unwrap());
                }
            }
            let lines: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            if lines.len() >= at_least {
                return (text, lines);
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the audit lines never appeared")
}

#[tokio::test]
async fn audit_records_ok_error_denied_and_cancelled_without_raw_args() {
    let mut wipe = tool("wipe");
    wipe["annotations"] = json!({"destructiveHint": true});
    let mut s = setup_with(
        |config, _| config.policy.destructive = Decision::Deny,
        &[tool("work"), wipe],
    )
    .await;
    let control = memory_client(&s.daemon);
    const SECRET: &str = "hunter2-do-not-log";
    let args = |tag: &str| json!({"args": {"tag": tag, "secret": SECRET}});

    // ok
    let pending = control.call_tool(call("work", args("ok")));
    let driver = async {
        s.gate.next().await.answer.send(Ok(json!({}))).unwrap();
    };
    let (result, ()) = tokio::join!(settled(pending), driver);
    result.unwrap();

    // error (app-side, passed through)
    let pending = control.call_tool(call("work", args("error")));
    let driver = async {
        let inv = s.gate.next().await;
        inv.answer.send(Err(ToolError::execution("boom"))).unwrap();
    };
    let (result, ()) = tokio::join!(settled(pending), driver);
    assert_eq!(error_type(&result.unwrap_err()), "tool_execution_error");

    // denied
    let e = settled(control.call_tool(call("wipe", args("denied"))))
        .await
        .unwrap_err();
    assert_eq!(error_type(&e), "policy_denied");

    // cancelled
    let pending = control.call_tool(call(
        "work",
        json!({"args": {"tag": "cancelled", "secret": SECRET}, "callId": "audit-c"}),
    ));
    let driver = async {
        let inv = s.gate.next().await;
        control
            .call::<ToolsCancel>(ToolsCancelParams::new("audit-c"))
            .await
            .unwrap();
        inv
    };
    let (result, _inv) = tokio::join!(settled(pending), driver);
    assert_eq!(error_type(&result.unwrap_err()), "tool_cancelled");

    let (text, lines) = audit_lines(&s.daemon, 4).await;
    assert!(!text.contains(SECRET), "raw args leaked into the audit log");
    assert!(!text.contains("\"args\""), "{text}");
    let outcomes: Vec<&str> = lines
        .iter()
        .map(|l| l["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["ok", "error", "denied", "cancelled"]);
    for line in &lines {
        let sha = line["argsSha256"].as_str().unwrap();
        assert_eq!(sha.len(), 64);
        assert!(sha.bytes().all(|b| b.is_ascii_hexdigit()));
    }
    assert_eq!(lines[1]["errorType"], "tool_execution_error");
    assert_eq!(lines[2]["deniedReason"], "policy");
    assert_eq!(lines[3]["errorType"], "tool_cancelled");
    s.daemon.shutdown().await;
}
