//! Transitions, shutdown and cancels landing between pipeline steps that run back to back
//! (§C10.1, §C10.7, §C12.1). A `PipelineProbe` stops the pipeline at a checkpoint and makes
//! the other input happen right there, so each race is deterministic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::calls_support;

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use appduct_client::config::{Config, Decision};
use appduct_daemon::calls::{Calls, Checkpoint, PipelineProbe};
use appduct_daemon::handlers::CallsApi as _;
use appduct_daemon::sessions::SessionManager;
use appduct_protocol::control::{EventKind, EventNotification};
use calls_support::*;
use serde_json::{Value, json};

type Action = Box<dyn FnOnce(&Calls, &SessionManager) + Send>;

/// Runs one action when the call with `callId` reaches a checkpoint.
#[derive(Default)]
struct Probe {
    calls: OnceLock<Calls>,
    sessions: OnceLock<SessionManager>,
    armed: Mutex<Option<(String, Checkpoint, Action)>>,
    fired: Mutex<Vec<(String, Checkpoint)>>,
}

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Probe")
    }
}

impl Probe {
    fn arm(
        &self,
        call_id: &str,
        at: Checkpoint,
        action: impl FnOnce(&Calls, &SessionManager) + Send + 'static,
    ) {
        *self.armed.lock().unwrap() = Some((call_id.to_owned(), at, Box::new(action)));
    }

    fn fired(&self) -> Vec<(String, Checkpoint)> {
        self.fired.lock().unwrap().clone()
    }
}

impl PipelineProbe for Probe {
    fn reached(&self, call_id: &str, at: Checkpoint) {
        let action = {
            let mut armed = self.armed.lock().unwrap();
            match armed.take() {
                Some((id, point, action)) if id == call_id && point == at => Some(action),
                other => {
                    *armed = other;
                    None
                }
            }
        };
        if let Some(action) = action {
            self.fired.lock().unwrap().push((call_id.to_owned(), at));
            action(self.calls.get().unwrap(), self.sessions.get().unwrap());
        }
    }
}

/// The standard fixture with a probed calls module and `slow_task` on `prompt`.
async fn probed() -> (Fixture, Arc<Probe>) {
    let probe = Arc::new(Probe::default());
    let installed = Arc::clone(&probe) as Arc<dyn PipelineProbe>;
    let f = Fixture::with(
        move |options, dir| {
            let mut config = Config::defaults(dir);
            config
                .policy
                .tools
                .insert("pixel-8/slow_task".into(), Decision::Prompt);
            options.config(config).pipeline_probe(installed)
        },
        standard_tools(),
    )
    .await;
    // The actions run on later calls, so the daemon's parts can be handed over now.
    let _ = probe.calls.set(f.daemon.calls().clone());
    let _ = probe.sessions.set(f.daemon.sessions().clone());
    (f, probe)
}

/// The `tool_call_*` events of `call_id` received so far, as `(kind, data)`.
fn call_events(events: &[EventNotification], call_id: &str) -> Vec<(EventKind, Value)> {
    events
        .iter()
        .filter(|e| data(e)["callId"] == call_id)
        .map(|e| (e.kind(), data(e)))
        .collect()
}

/// §C11, §D12.4: a transition that lands after policy let an elicitation call through but
/// before its frame is written still audits `consent: "elicitation"`.
#[tokio::test]
async fn a_transition_after_policy_still_audits_the_consent() {
    let (mut f, probe) = probed().await;
    let session_id = f.device.session_id.clone();
    probe.arm("p1", Checkpoint::PolicyPassed, move |_, sessions| {
        sessions.revoke(Some(&session_id)).unwrap();
    });
    let response = f
        .wire
        .request(
            1,
            "tools.call",
            json!({"name": "slow_task", "callId": "p1", "consent": "elicitation",
                   "caller": "mcp"}),
        )
        .await;
    assert_eq!(probe.fired(), [("p1".to_owned(), Checkpoint::PolicyPassed)]);
    assert_eq!(response["error"]["data"]["type"], "unknown_session");
    assert_eq!(
        response["error"]["data"]["details"]["reason"],
        json!("revoked")
    );
    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["callId"], "p1");
    assert_eq!(audit[0]["consent"], "elicitation");
    // No frame reached the app: the revoke's close is the first thing it gets.
    assert_eq!(f.device.close_frame().await, (1000, "revoked".to_owned()));
    f.daemon.shutdown().await;
}

/// §C8.3 step 2, §C12.1: shutdown landing between step 3 (resolved) and the call carrying its
/// session still settles the call normally: audited, `tool_call_finished`, the response.
#[tokio::test]
async fn shutdown_right_after_resolving_audits_the_call() {
    let (mut f, probe) = probed().await;
    probe.arm("s1", Checkpoint::Resolved, |calls, _| {
        calls.reject_pending_for_shutdown();
    });
    let response = f
        .wire
        .request(1, "tools.call", json!({"name": "echo", "callId": "s1"}))
        .await;
    assert_eq!(probe.fired(), [("s1".to_owned(), Checkpoint::Resolved)]);
    assert_eq!(
        response["error"],
        json!({"code": -32000, "message": "The daemon is shutting down",
               "data": {"type": "session_not_active", "callId": "s1",
                        "details": {"reason": "daemon_shutdown"}}})
    );
    let finished = next_of(&mut f.events, EventKind::ToolCallFinished).await;
    assert_eq!(data(&finished)["callId"], "s1");
    assert_eq!(data(&finished)["errorType"], "session_not_active");
    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["callId"], "s1");
    assert_eq!(audit[0]["errorType"], "session_not_active");
    f.device.assert_no_frame();
    f.stop().await;
}

/// §C13.1, §C10.1: a transition that lands after the `tool_call` frame was queued but
/// before the call was marked sent still yields `tool_call_started`, before
/// `tool_call_finished`.
#[tokio::test]
async fn a_transition_right_after_the_frame_was_queued_still_announces_the_call() {
    let (mut f, probe) = probed().await;
    let session_id = f.device.session_id.clone();
    probe.arm("f1", Checkpoint::FrameQueued, move |_, sessions| {
        sessions.revoke(Some(&session_id)).unwrap();
    });
    let response = f
        .wire
        .request(
            1,
            "tools.call",
            json!({"name": "echo", "callId": "f1", "progress": true}),
        )
        .await;
    assert_eq!(probe.fired(), [("f1".to_owned(), Checkpoint::FrameQueued)]);
    assert_eq!(response["error"]["data"]["type"], "unknown_session");
    // The per-call notification came before the response.
    let started = f
        .wire
        .log
        .iter()
        .position(|m| m["method"] == "tool_call_started");
    let answered = f.wire.log.iter().position(|m| m["id"] == 1);
    assert!(started.is_some() && started < answered, "{:?}", f.wire.log);
    // Both were emitted before the response was written.
    let events = drain(&mut f.events);
    let kinds: Vec<EventKind> = call_events(&events, "f1").iter().map(|(k, _)| *k).collect();
    assert_eq!(
        kinds,
        [EventKind::ToolCallStarted, EventKind::ToolCallFinished]
    );
    assert_eq!(audit_lines(&f.daemon).await.len(), 1);
    // The frame was queued, so the app got it before the revoke's close.
    let (_, frame) = f.device.tool_call().await;
    assert_eq!(frame["name"], "echo");
    assert_eq!(f.device.close_frame().await, (1000, "revoked".to_owned()));
    f.daemon.shutdown().await;
}

/// §C8.43 (review19 M3): between a call leaving the table of unsettled calls and its outcome
/// being kept, `tools.result` never answers `call_not_retained`: without `waitMs` it says
/// `running`, and a waiting fetch gets the outcome once it is kept.
#[tokio::test]
async fn tools_result_while_the_call_settles_is_running_then_the_outcome() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use appduct_protocol::control::{CallResultState, ToolsResultParams};

    type Fetch = std::pin::Pin<
        Box<
            dyn Future<
                    Output = Result<
                        Arc<appduct_protocol::control::ToolsResultResult>,
                        appduct_protocol::jsonrpc::ErrorObject,
                    >,
                > + Send,
        >,
    >;
    let (mut f, probe) = probed().await;
    type Seen = Arc<Mutex<Option<(Poll<String>, Fetch)>>>;
    let seen: Seen = Arc::default();
    let into = Arc::clone(&seen);
    probe.arm("m3", Checkpoint::Settling, move |calls, _| {
        let state = |r: &Result<Arc<_>, appduct_protocol::jsonrpc::ErrorObject>| match r {
            Ok(kept) => {
                let kept: &Arc<appduct_protocol::control::ToolsResultResult> = kept;
                format!("{:?}", kept.state)
            }
            Err(e) => format!("{:?}", e.data),
        };
        // A fetch without `waitMs` completes on its first poll.
        let mut quick: Fetch = Box::pin(calls.tools_result(ToolsResultParams::new("m3")));
        let mut cx = Context::from_waker(Waker::noop());
        let quick = match quick.as_mut().poll(&mut cx) {
            Poll::Ready(r) => Poll::Ready(state(&r)),
            Poll::Pending => Poll::Pending,
        };
        // A waiting fetch starts waiting here, and is finished after the call.
        let mut waiting: Fetch =
            Box::pin(calls.tools_result(ToolsResultParams::new("m3").with_wait_ms(Some(60_000))));
        match waiting.as_mut().poll(&mut cx) {
            Poll::Pending => {}
            Poll::Ready(r) => panic!("the waiting fetch answered at once: {}", state(&r)),
        }
        *into.lock().unwrap() = Some((quick, waiting));
    });
    f.wire
        .send(1, "tools.call", json!({"name": "echo", "callId": "m3"}))
        .await;
    let (wire_id, _) = f.device.tool_call().await;
    f.device.result(&wire_id, json!({"n": 3})).await;
    let response = f.wire.response(1).await;
    assert_eq!(response["result"]["result"], json!({"n": 3}), "{response}");
    assert_eq!(probe.fired(), [("m3".to_owned(), Checkpoint::Settling)]);
    let (quick, waiting) = seen.lock().unwrap().take().expect("the probe ran");
    assert_eq!(
        quick,
        Poll::Ready(format!("{:?}", CallResultState::Running))
    );
    let fetched = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
        .await
        .expect("the waiting fetch resolves once the outcome is kept")
        .expect("the outcome, not call_not_retained");
    assert_eq!(fetched.state, CallResultState::Ok);
    assert_eq!(
        serde_json::to_value(&fetched.response).unwrap()["result"],
        json!({"n": 3})
    );
    f.stop().await;
}
