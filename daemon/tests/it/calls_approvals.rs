//! Operator approvals (§C8.17–§C8.21, §C11.1; SECURITY.md §4.18) against the composed daemon:
//! a `prompt` call without consent parks under `consent.fallback: "operator"`, and ends on
//! approval (with the one-time code only), denial, wrong codes, expiry or cancel, each audited
//! with who decided. The one-time code is read from a capturing [`OperatorTerminal`], as a
//! person would read it from their terminal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::calls_support;

use std::sync::{Arc, Mutex};

use appduct_client::config::Decision;
use appduct_daemon::approvals::{OperatorTerminal, TerminalDevice, TerminalOf};
use appduct_protocol::control::EventKind;
use appduct_protocol::errors::ErrorType;
use calls_support::*;
use serde_json::{Value, json};

/// Records what the daemon writes to "the operator's terminal"; refuses approvers when
/// `refuse`. The approver's terminal is `/dev/pts/test` (device 1, opened at the epoch) unless
/// `approver` says otherwise; the caller has no terminal unless `caller` gives it one.
#[derive(Debug, Default)]
struct CapturedTerminal {
    written: Mutex<Vec<String>>,
    refuse: bool,
    caller: Option<TerminalDevice>,
    approver: Option<TerminalDevice>,
}

fn pts(n: u64, created_unix_ms: u64) -> TerminalDevice {
    TerminalDevice {
        path: format!("/dev/pts/{n}"),
        rdev: n,
        created_unix_ms: Some(created_unix_ms),
    }
}

impl OperatorTerminal for CapturedTerminal {
    fn locate(&self, _pid: Option<u32>, of: TerminalOf) -> Result<TerminalDevice, String> {
        match of {
            TerminalOf::Caller => self
                .caller
                .clone()
                .ok_or_else(|| "the caller has no controlling terminal".to_owned()),
            TerminalOf::Approver if self.refuse => {
                Err("process 4242 has no controlling terminal".into())
            }
            TerminalOf::Approver => Ok(self.approver.clone().unwrap_or(TerminalDevice {
                path: "/dev/pts/test".into(),
                rdev: 1,
                created_unix_ms: Some(0),
            })),
        }
    }

    fn write(&self, _device: &TerminalDevice, text: &str) -> Result<(), String> {
        self.written.lock().unwrap().push(text.to_owned());
        Ok(())
    }
}

impl CapturedTerminal {
    /// The code of the latest challenge: the digits after the last ": ".
    fn code(&self) -> String {
        let written = self.written.lock().unwrap();
        let text = written.last().expect("no code was written");
        let shown = text.trim_end().rsplit(": ").next().unwrap().to_owned();
        assert!(
            shown.len() == 7 && shown.as_bytes()[3] == b'-',
            "code shown as 123-456: {shown:?}"
        );
        shown
    }
}

/// `slow_task` is `prompt`; approvals on, expiring after `timeout_ms`.
async fn fixture(
    timeout_ms: u64,
    requires_terminal: bool,
    terminal: Arc<CapturedTerminal>,
) -> Fixture {
    Fixture::with(
        move |options, dir| {
            let mut config = appduct_client::config::Config::defaults(dir);
            calls_support::slow_task_needs_an_operator(&mut config);
            config.consent.approval_timeout_ms = timeout_ms;
            config.consent.operator_requires_terminal = requires_terminal;
            options.config(config).operator_terminal(terminal)
        },
        standard_tools(),
    )
    .await
}

/// An operator's connection that introduced itself as `op-console`.
async fn operator(f: &Fixture) -> Wire {
    let mut op = Wire::new(&f.daemon);
    let hello = op
        .request(
            1,
            "daemon.hello",
            json!({"client": {"name": "op-console", "version": "1.0.0"}}),
        )
        .await;
    assert!(
        hello["result"]["features"]
            .as_array()
            .unwrap()
            .contains(&json!("approvals")),
        "{hello}"
    );
    op
}

/// Sends a `slow_task` call with progress as request `id` and returns the approval id named by
/// the parking notification, after checking `approval_pending`.
/// The operator approves `approval_id` (no code needed) and the daemon says so.
async fn approve(op: &mut Wire, id: i64, approval_id: &str) {
    let approved = op
        .request(
            id,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve"}),
        )
        .await;
    assert_eq!(approved["result"]["decision"], "approved", "{approved}");
}

async fn park(f: &mut Fixture, id: i64, call_id: &str) -> String {
    f.wire
        .send(
            id,
            "tools.call",
            json!({"name": "slow_task", "args": {"n": 1}, "callId": call_id, "progress": true}),
        )
        .await;
    let note = f
        .wire
        .notification("tool_call_progress", |p| p["callId"] == call_id)
        .await;
    let approval_id = note["params"]["approvalId"].as_str().unwrap().to_owned();
    assert!(approval_id.starts_with("apr_"), "{note}");
    let message = note["params"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("appduct approvals approve {approval_id}")),
        "{message}"
    );
    let pending = next_of(&mut f.events, EventKind::ApprovalPending).await;
    assert_eq!(data(&pending)["approvalId"], approval_id.as_str());
    assert_eq!(data(&pending)["callId"], call_id);
    assert_eq!(
        pending.session_id.as_deref(),
        Some(f.device.session_id.as_str())
    );
    approval_id
}

fn audit_of<'a>(lines: &'a [Value], call_id: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["callId"] == call_id)
        .unwrap_or_else(|| panic!("no audit record for {call_id}: {lines:?}"))
}

#[tokio::test]
async fn a_parked_call_runs_only_after_approval_with_the_code() {
    let terminal = Arc::new(CapturedTerminal::default());
    let mut f = fixture(60_000, true, Arc::clone(&terminal)).await;
    let approval_id = park(&mut f, 2, "ap-1").await;
    // Parked: nothing reached the app, and the call counts as pending.
    f.device.assert_no_frame();
    let mut op = operator(&f).await;
    let listed = op.request(2, "approvals.list", json!({})).await;
    let entry = &listed["result"]["approvals"][0];
    assert_eq!(entry["approvalId"], approval_id.as_str());
    assert_eq!(entry["tool"], "slow_task");
    assert_eq!(entry["attemptsLeft"], 3);
    assert_eq!(entry["argsPreview"], r#"{"n": 1}"#);

    // Approving without a code is refused and changes nothing.
    let refused = op
        .request(
            3,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve"}),
        )
        .await;
    assert_eq!(
        refused["error"]["data"]["type"], "approval_refused",
        "{refused}"
    );
    assert_eq!(
        refused["error"]["data"]["details"]["reason"],
        "code_required"
    );

    let challenged = op
        .request(4, "approvals.challenge", json!({"approvalId": approval_id}))
        .await;
    assert_eq!(
        challenged["result"]["terminal"], "/dev/pts/test",
        "{challenged}"
    );
    let code = terminal.code();
    // The code is in no reply.
    assert!(!challenged.to_string().contains(&code), "{challenged}");
    let approved = op
        .request(
            5,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve", "code": code}),
        )
        .await;
    assert_eq!(approved["result"]["decision"], "approved", "{approved}");
    let settled = next_of(&mut f.events, EventKind::ApprovalSettled).await;
    assert_eq!(data(&settled)["decision"], "approved");
    assert_eq!(data(&settled)["by"]["client"], "op-console");

    let (wire_id, frame) = f.device.tool_call().await;
    assert_eq!(frame["name"], "slow_task");
    f.device.result(&wire_id, json!({"done": true})).await;
    let reply = f.wire.response(2).await;
    assert_eq!(reply["result"]["result"], json!({"done": true}), "{reply}");

    let lines = audit_lines(&f.daemon).await;
    let record = audit_of(&lines, "ap-1");
    assert_eq!(record["outcome"], "ok");
    assert_eq!(record["consent"], "operator");
    assert_eq!(record["operator"]["approvalId"], approval_id.as_str());
    assert_eq!(record["operator"]["decision"], "approved");
    assert_eq!(record["operator"]["by"]["client"], "op-console");
    assert_eq!(record["operator"]["terminal"], "/dev/pts/test");
    let digits: String = code.chars().filter(char::is_ascii_digit).collect();
    let raw = raw_audit(&f.daemon.state_dir().path().join("audit"));
    assert!(!raw.contains(&digits) && !raw.contains(&code), "{raw}");
    for message in &op.log {
        assert!(!message.to_string().contains(&code), "{message}");
    }
    f.stop().await;
}

#[tokio::test]
async fn three_wrong_codes_deny_the_approval() {
    let terminal = Arc::new(CapturedTerminal::default());
    let mut f = fixture(60_000, true, Arc::clone(&terminal)).await;
    let approval_id = park(&mut f, 2, "ap-2").await;
    let mut op = operator(&f).await;
    op.request(2, "approvals.challenge", json!({"approvalId": approval_id}))
        .await;
    let right = terminal.code();
    let wrong = if right.starts_with('0') {
        "111-111"
    } else {
        "000-000"
    };
    for (id, left) in [(3, json!(2)), (4, json!(1))] {
        let reply = op
            .request(
                id,
                "approvals.decide",
                json!({"approvalId": approval_id, "decision": "approve", "code": wrong}),
            )
            .await;
        let details = &reply["error"]["data"]["details"];
        assert_eq!(details["reason"], "wrong_code", "{reply}");
        assert_eq!(details["attemptsLeft"], left);
    }
    let third = op
        .request(
            5,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve", "code": wrong}),
        )
        .await;
    assert_eq!(
        third["error"]["data"]["details"]["reason"], "too_many_wrong_codes",
        "{third}"
    );
    // The right code no longer helps: the approval is gone.
    let late = op
        .request(
            6,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve", "code": right}),
        )
        .await;
    assert_eq!(
        late["error"]["data"]["details"]["reason"], "unknown_approval",
        "{late}"
    );
    let reply = f.wire.response(2).await;
    assert_eq!(reply["error"]["data"]["type"], "policy_denied", "{reply}");
    assert_eq!(
        reply["error"]["data"]["details"]["reason"],
        "operator_denied"
    );
    f.device.assert_no_frame();
    let lines = audit_lines(&f.daemon).await;
    let record = audit_of(&lines, "ap-2");
    assert_eq!(record["outcome"], "denied");
    assert_eq!(record["deniedReason"], "operator_denied");
    assert_eq!(record["operator"]["decision"], "denied");
    assert_eq!(record["operator"]["reason"], "wrong_code");
    f.stop().await;
}

#[tokio::test]
async fn deny_expiry_and_cancel_each_end_the_call_and_are_audited() {
    let terminal = Arc::new(CapturedTerminal::default());
    let mut f = fixture(1_000, true, terminal).await;
    let mut op = operator(&f).await;

    // Deny: no code needed.
    let denied_id = park(&mut f, 2, "ap-deny").await;
    let denied = op
        .request(
            2,
            "approvals.decide",
            json!({"approvalId": denied_id, "decision": "deny"}),
        )
        .await;
    assert_eq!(denied["result"]["decision"], "denied", "{denied}");
    let reply = f.wire.response(2).await;
    assert_eq!(
        reply["error"]["data"]["details"]["reason"], "operator_denied",
        "{reply}"
    );
    assert_eq!(
        reply["error"]["data"]["details"]["approvalId"],
        denied_id.as_str()
    );

    // Expiry (approvalTimeoutMs 1000, below the tool's deadline).
    park(&mut f, 3, "ap-expire").await;
    let reply = f.wire.response(3).await;
    assert_eq!(reply["error"]["data"]["type"], "policy_denied", "{reply}");
    assert_eq!(
        reply["error"]["data"]["details"]["reason"],
        "approval_expired"
    );
    let settled = next_of(&mut f.events, EventKind::ApprovalSettled).await;
    let settled = if data(&settled)["callId"] == "ap-expire" {
        settled
    } else {
        next_of(&mut f.events, EventKind::ApprovalSettled).await
    };
    assert_eq!(data(&settled)["decision"], "expired");

    // Cancel by the caller.
    let cancel_id = park(&mut f, 4, "ap-cancel").await;
    let cancelled = f
        .wire
        .request(5, "tools.cancel", json!({"callId": "ap-cancel"}))
        .await;
    assert_eq!(cancelled["result"]["cancelled"], true, "{cancelled}");
    let reply = f.wire.response(4).await;
    assert_eq!(reply["error"]["data"]["type"], "tool_cancelled", "{reply}");
    let listed = op.request(3, "approvals.list", json!({})).await;
    assert_eq!(listed["result"]["approvals"], json!([]), "{listed}");
    f.device.assert_no_frame();

    let lines = audit_lines(&f.daemon).await;
    let r = audit_of(&lines, "ap-deny");
    assert_eq!(
        (&r["outcome"], &r["deniedReason"]),
        (&json!("denied"), &json!("operator_denied"))
    );
    assert_eq!(r["operator"]["by"]["client"], "op-console");
    let r = audit_of(&lines, "ap-expire");
    assert_eq!(
        (&r["outcome"], &r["deniedReason"]),
        (&json!("denied"), &json!("approval_expired"))
    );
    assert_eq!(r["operator"]["decision"], "expired");
    let r = audit_of(&lines, "ap-cancel");
    assert_eq!(r["outcome"], "cancelled");
    assert_eq!(r["operator"]["approvalId"], cancel_id.as_str());
    assert_eq!(r["operator"]["decision"], "cancelled");
    f.stop().await;
}

#[tokio::test]
async fn without_a_terminal_no_code_is_issued() {
    let terminal = Arc::new(CapturedTerminal {
        refuse: true,
        ..CapturedTerminal::default()
    });
    let mut f = fixture(60_000, true, terminal).await;
    let approval_id = park(&mut f, 2, "ap-3").await;
    let mut op = operator(&f).await;
    let reply = op
        .request(2, "approvals.challenge", json!({"approvalId": approval_id}))
        .await;
    assert_eq!(
        reply["error"]["data"]["type"], "approval_refused",
        "{reply}"
    );
    assert_eq!(reply["error"]["data"]["details"]["reason"], "no_terminal");
    let reply = op
        .request(
            3,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve", "code": "123-456"}),
        )
        .await;
    assert_eq!(
        reply["error"]["data"]["details"]["reason"], "no_challenge",
        "{reply}"
    );
    // Neither counted as a wrong code.
    let listed = op.request(4, "approvals.list", json!({})).await;
    assert_eq!(listed["result"]["approvals"][0]["attemptsLeft"], 3);
    f.stop().await;
}

#[tokio::test]
async fn a_tool_grant_skips_parking_until_revoked() {
    let terminal = Arc::new(CapturedTerminal::default());
    let mut f = fixture(60_000, false, terminal).await;
    let approval_id = park(&mut f, 2, "ap-g1").await;
    let mut op = operator(&f).await;
    // operatorRequiresTerminal: false: no code needed (the documented weakening).
    let approved = op
        .request(
            2,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve",
                   "grant": {"scope": "tool", "minutes": 5}}),
        )
        .await;
    let grant_id = approved["result"]["grant"]["grantId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(grant_id.starts_with("grt_"), "{approved}");
    let (wire_id, _) = f.device.tool_call().await;
    f.device.result(&wire_id, json!(1)).await;
    assert_eq!(f.wire.response(2).await["result"]["result"], 1);

    // Covered by the grant: runs at once.
    f.wire
        .send(
            3,
            "tools.call",
            json!({"name": "slow_task", "callId": "ap-g2"}),
        )
        .await;
    let (wire_id, _) = f.device.tool_call().await;
    f.device.result(&wire_id, json!(2)).await;
    assert_eq!(f.wire.response(3).await["result"]["result"], 2);
    let status = op.request(3, "daemon.status", json!({})).await;
    assert_eq!(
        status["result"]["grants"][0]["grantId"],
        grant_id.as_str(),
        "{status}"
    );
    let listed = op.request(4, "grants.list", json!({})).await;
    assert_eq!(listed["result"]["grants"][0]["tool"], "slow_task");

    let revoked = op
        .request(5, "grants.revoke", json!({"grantId": grant_id}))
        .await;
    assert_eq!(revoked["result"]["revoked"], true, "{revoked}");
    let again = op
        .request(6, "grants.revoke", json!({"grantId": grant_id}))
        .await;
    assert_eq!(again["result"]["revoked"], false);
    // Parks again.
    park(&mut f, 4, "ap-g3").await;
    f.device.assert_no_frame();

    let lines = audit_lines(&f.daemon).await;
    let r = audit_of(&lines, "ap-g2");
    assert_eq!(r["consent"], "operator");
    assert_eq!(r["operator"]["decision"], "granted");
    assert_eq!(r["operator"]["grantId"], grant_id.as_str());
    assert_eq!(r["operator"]["by"]["client"], "op-console");
    f.stop().await;
}

#[tokio::test]
async fn the_default_fallback_still_denies_without_parking() {
    let mut f = Fixture::with_config(
        |config| {
            config
                .policy
                .tools
                .insert("pixel-8/slow_task".into(), Decision::Prompt);
        },
        standard_tools(),
    )
    .await;
    let reply = f
        .wire
        .request(
            2,
            "tools.call",
            json!({"name": "slow_task", "progress": true}),
        )
        .await;
    assert_eq!(reply["error"]["data"]["type"], "policy_denied", "{reply}");
    assert_eq!(
        reply["error"]["data"]["details"]["reason"],
        "no_consent_channel"
    );
    assert!(
        drain(&mut f.events)
            .iter()
            .all(|e| e.kind() != EventKind::ApprovalPending)
    );
    assert!(f.wire.pending().is_empty(), "{:?}", f.wire.pending());
    let listed = f.wire.request(3, "approvals.list", json!({})).await;
    assert_eq!(listed["result"]["approvals"], json!([]));
    f.stop().await;
}

#[tokio::test]
async fn the_approval_wait_spends_no_deadline_and_a_revoke_ends_a_parked_call() {
    let terminal = Arc::new(CapturedTerminal::default());
    let mut f = fixture(60_000, false, terminal).await;
    // A 1 s deadline, parked: the operator still has the whole 60 s.
    f.wire
        .send(
            2,
            "tools.call",
            json!({"name": "slow_task", "callId": "ap-t", "timeoutMs": 1000, "progress": true}),
        )
        .await;
    let note = f
        .wire
        .notification("tool_call_progress", |p| p["callId"] == "ap-t")
        .await;
    let approval_id = note["params"]["approvalId"].as_str().unwrap().to_owned();
    let pending = next_of(&mut f.events, EventKind::ApprovalPending).await;
    let expires = data(&pending)["expiresAt"].as_u64().unwrap();
    assert_eq!(note["params"]["expiresAt"], expires, "{note}");
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        expires >= now_s + 55,
        "the wait is approvalTimeoutMs, not the deadline: {expires} vs {now_s}"
    );
    // A clock: an unanswered `echo` with the same 1 s deadline, sent after the call parked,
    // times out; the parked call is still waiting then.
    f.wire
        .send(
            3,
            "tools.call",
            json!({"name": "echo", "callId": "clock", "timeoutMs": 1000}),
        )
        .await;
    let (_, frame) = f.device.tool_call().await;
    assert_eq!(frame["name"], "echo");
    let timed_out = f.wire.response(3).await;
    assert_eq!(
        timed_out["error"]["data"]["type"], "tool_timeout",
        "{timed_out}"
    );
    f.device.tool_cancel().await;
    let mut op = operator(&f).await;
    let listed = op.request(2, "approvals.list", json!({})).await;
    assert_eq!(
        listed["result"]["approvals"][0]["callId"], "ap-t",
        "{listed}"
    );
    let approved = op
        .request(
            3,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve"}),
        )
        .await;
    assert_eq!(approved["result"]["decision"], "approved", "{approved}");
    let settled = next_of(&mut f.events, EventKind::ApprovalSettled).await;
    assert_eq!(data(&settled)["callId"], "ap-t");
    // Released with its whole deadline.
    let (wire_id, frame) = f.device.tool_call().await;
    assert_eq!(frame["name"], "slow_task");
    let started = f
        .wire
        .notification("tool_call_started", |p| p["callId"] == "ap-t")
        .await;
    assert_eq!(started["params"]["deadlineMs"], 1000, "{started}");
    f.device.result(&wire_id, json!("late but fine")).await;
    let reply = f.wire.response(2).await;
    assert_eq!(reply["result"]["result"], "late but fine", "{reply}");

    // Revoking the session while a call is parked ends both.
    park(&mut f, 4, "ap-r").await;
    let revoked = f.wire.request(5, "sessions.revoke", json!({})).await;
    assert_eq!(revoked["result"]["revoked"], "session", "{revoked}");
    let reply = f.wire.response(4).await;
    assert_eq!(reply["error"]["data"]["type"], "unknown_session", "{reply}");
    let settled = next_of(&mut f.events, EventKind::ApprovalSettled).await;
    assert_eq!(data(&settled)["callId"], "ap-r");
    assert_eq!(data(&settled)["decision"], "cancelled");
    let listed = f.wire.request(6, "approvals.list", json!({})).await;
    assert_eq!(listed["result"]["approvals"], json!([]));

    let lines = audit_lines(&f.daemon).await;
    let r = audit_of(&lines, "ap-t");
    assert_eq!(r["outcome"], "ok");
    assert_eq!(r["operator"]["decision"], "approved");
    let r = audit_of(&lines, "ap-r");
    assert_eq!(r["errorType"], "unknown_session");
    assert_eq!(r["operator"]["decision"], "cancelled");
    assert!(r.get("consent").is_none(), "{r}");
}

#[tokio::test]
async fn a_caller_that_hangs_up_cancels_its_parked_call() {
    let terminal = Arc::new(CapturedTerminal::default());
    let mut f = fixture(60_000, true, terminal).await;
    let mut caller = Wire::new(&f.daemon);
    caller
        .send(
            2,
            "tools.call",
            json!({"name": "slow_task", "callId": "ap-hang"}),
        )
        .await;
    let pending = next_of(&mut f.events, EventKind::ApprovalPending).await;
    assert_eq!(data(&pending)["callId"], "ap-hang");
    caller.close();
    let settled = next_of(&mut f.events, EventKind::ApprovalSettled).await;
    assert_eq!(data(&settled)["decision"], "cancelled");
    let finished = next_of(&mut f.events, EventKind::ToolCallFinished).await;
    assert_eq!(data(&finished)["outcome"], "cancelled");
    f.device.assert_no_frame();
    let lines = audit_lines(&f.daemon).await;
    let r = audit_of(&lines, "ap-hang");
    assert_eq!(r["outcome"], "cancelled");
    assert_eq!(r["operator"]["decision"], "cancelled");
    f.stop().await;
}

/// Challenges `approval_id` and expects `approval_refused` with `reason`; no code is written
/// and no attempt is spent.
async fn challenge_refused(
    op: &mut Wire,
    terminal: &CapturedTerminal,
    approval_id: &str,
    reason: &str,
) {
    let reply = op
        .request(
            20,
            "approvals.challenge",
            json!({"approvalId": approval_id}),
        )
        .await;
    assert_eq!(
        reply["error"]["data"]["type"], "approval_refused",
        "{reply}"
    );
    assert_eq!(
        reply["error"]["data"]["details"]["reason"], reason,
        "{reply}"
    );
    assert!(terminal.written.lock().unwrap().is_empty());
    let listed = op.request(21, "approvals.list", json!({})).await;
    assert_eq!(
        listed["result"]["approvals"][0]["attemptsLeft"], 3,
        "{listed}"
    );
}

#[tokio::test]
async fn the_parked_callers_own_terminal_gets_no_code() {
    // An agent that shares the operator's terminal: the approver's terminal is the caller's.
    let terminal = Arc::new(CapturedTerminal {
        caller: Some(pts(7, 0)),
        approver: Some(pts(7, 0)),
        ..CapturedTerminal::default()
    });
    let mut f = fixture(60_000, true, Arc::clone(&terminal)).await;
    let approval_id = park(&mut f, 2, "ap-own").await;
    let mut op = operator(&f).await;
    challenge_refused(&mut op, &terminal, &approval_id, "caller_terminal").await;
    f.device.assert_no_frame();
    f.stop().await;
}

#[tokio::test]
async fn a_terminal_opened_after_the_call_parked_gets_no_code() {
    // An agent that parked its call and then opened a pty (`pty.fork()`) to approve it.
    let terminal = Arc::new(CapturedTerminal {
        approver: Some(pts(9, u64::MAX)),
        ..CapturedTerminal::default()
    });
    let mut f = fixture(60_000, true, Arc::clone(&terminal)).await;
    let approval_id = park(&mut f, 2, "ap-new").await;
    let mut op = operator(&f).await;
    challenge_refused(&mut op, &terminal, &approval_id, "new_terminal").await;
    f.device.assert_no_frame();
    f.stop().await;
}

/// Approvals on, the daemon's wall clock fixed at `now_ms`, and the approver's terminal opened
/// at `opened_ms` (its devpts ctime).
async fn fixture_at(
    now_ms: u64,
    opened_ms: u64,
    terminal_out: &mut Option<Arc<CapturedTerminal>>,
) -> Fixture {
    let terminal = Arc::new(CapturedTerminal {
        approver: Some(pts(11, opened_ms)),
        ..CapturedTerminal::default()
    });
    *terminal_out = Some(Arc::clone(&terminal));
    Fixture::with(
        move |options, dir| {
            let mut config = appduct_client::config::Config::defaults(dir);
            calls_support::slow_task_needs_an_operator(&mut config);
            config.consent.approval_timeout_ms = 60_000;
            options
                .config(config)
                .clock(appduct_daemon::clock::ManualClock::new(now_ms))
                .operator_terminal(terminal)
        },
        standard_tools(),
    )
    .await
}

#[tokio::test]
async fn a_terminal_opened_just_before_the_request_gets_no_code() {
    // The hostile-peer attack: send the request, open a pty at once. Its coarse devpts ctime can
    // read a few ms before the daemon's stamp, so terminals opened within the margin are new.
    const NOW: u64 = 1_800_000_000_000;
    let mut terminal = None;
    let mut f = fixture_at(NOW, NOW - 30, &mut terminal).await;
    let terminal = terminal.unwrap();
    let approval_id = park(&mut f, 2, "ap-margin").await;
    let mut op = operator(&f).await;
    challenge_refused(&mut op, &terminal, &approval_id, "new_terminal").await;
    f.device.assert_no_frame();
    f.stop().await;

    // A terminal opened well before the request (past the margin) is an operator's.
    let margin = u64::try_from(appduct_daemon::approvals::NEW_TERMINAL_MARGIN.as_millis()).unwrap();
    let mut terminal = None;
    let mut f = fixture_at(NOW, NOW - margin - 100, &mut terminal).await;
    let terminal = terminal.unwrap();
    let approval_id = park(&mut f, 2, "ap-old").await;
    let mut op = operator(&f).await;
    let challenged = op
        .request(4, "approvals.challenge", json!({"approvalId": approval_id}))
        .await;
    assert_eq!(
        challenged["result"]["terminal"], "/dev/pts/11",
        "{challenged}"
    );
    assert_eq!(terminal.code().len(), 7);
    f.stop().await;
}

#[tokio::test]
async fn an_approved_call_whose_tool_became_deny_while_parked_is_denied() {
    let terminal = Arc::new(CapturedTerminal::default());
    let mut f = fixture(60_000, false, Arc::clone(&terminal)).await;
    let approval_id = park(&mut f, 2, "ap-deny").await;
    let mut op = operator(&f).await;
    let set = op
        .request(
            3,
            "policy.set",
            json!({"target": "pixel-8/slow_task", "decision": "deny"}),
        )
        .await;
    assert!(set.get("result").is_some(), "{set}");
    approve(&mut op, 4, &approval_id).await;
    let reply = f.wire.response(2).await;
    assert_eq!(reply["error"]["data"]["type"], "policy_denied", "{reply}");
    assert_eq!(
        reply["error"]["data"]["details"]["reason"], "policy",
        "{reply}"
    );
    f.device.assert_no_frame();
    let lines = audit_lines(&f.daemon).await;
    assert_eq!(audit_of(&lines, "ap-deny")["outcome"], "denied");
    f.stop().await;
}

/// §C10.9 (review19 L3): a lease another connection took while the call was parked refuses
/// the call when it is approved, as step 4a would have.
#[tokio::test]
async fn an_approved_call_whose_session_was_leased_while_parked_is_refused() {
    let terminal = Arc::new(CapturedTerminal::default());
    let mut f = fixture(60_000, false, Arc::clone(&terminal)).await;
    let approval_id = park(&mut f, 2, "ap-lease").await;
    let mut op = operator(&f).await;
    let leased = op.request(3, "sessions.lease", json!({})).await;
    assert!(leased.get("result").is_some(), "{leased}");
    approve(&mut op, 4, &approval_id).await;
    let reply = f.wire.response(2).await;
    assert_eq!(reply["error"]["data"]["type"], "session_leased", "{reply}");
    assert_eq!(
        reply["error"]["data"]["details"]["holder"]["client"],
        "op-console"
    );
    f.device.assert_no_frame();
    let lines = audit_lines(&f.daemon).await;
    assert_eq!(audit_of(&lines, "ap-lease")["errorType"], "session_leased");
    f.stop().await;
}

#[tokio::test]
async fn a_code_is_accepted_only_on_the_connection_that_asked_for_it() {
    let terminal = Arc::new(CapturedTerminal::default());
    let mut f = fixture(60_000, true, Arc::clone(&terminal)).await;
    let approval_id = park(&mut f, 2, "ap-bound").await;
    let mut op = operator(&f).await;
    op.request(2, "approvals.challenge", json!({"approvalId": approval_id}))
        .await;
    let code = terminal.code();
    // Another connection with the right code: refused, not compared, one attempt spent.
    let mut other = operator(&f).await;
    let stolen = other
        .request(
            2,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve", "code": code}),
        )
        .await;
    assert_eq!(
        stolen["error"]["data"]["type"], "approval_refused",
        "{stolen}"
    );
    let details = &stolen["error"]["data"]["details"];
    assert_eq!(details["reason"], "other_connection", "{stolen}");
    assert_eq!(details["attemptsLeft"], 2);
    f.device.assert_no_frame();
    let listed = op.request(3, "approvals.list", json!({})).await;
    assert_eq!(listed["result"]["approvals"][0]["attemptsLeft"], 2);
    // The connection that asked for it still approves with it.
    let approved = op
        .request(
            4,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve", "code": code}),
        )
        .await;
    assert_eq!(approved["result"]["decision"], "approved", "{approved}");
    let (wire_id, _) = f.device.tool_call().await;
    f.device.result(&wire_id, json!(1)).await;
    assert_eq!(f.wire.response(2).await["result"]["result"], 1);
    f.stop().await;
}

#[tokio::test]
async fn the_operator_sees_an_escaped_cut_preview_of_the_arguments() {
    let terminal = Arc::new(CapturedTerminal::default());
    let mut f = fixture(60_000, true, Arc::clone(&terminal)).await;
    let hostile = format!("\u{1b}[2J\u{202e}gpj.exe\u{7}{}", "z".repeat(300));
    f.wire
        .send(
            2,
            "tools.call",
            json!({"name": "slow_task", "callId": "ap-pre", "progress": true,
                   "args": {"path": hostile, "force": true, "list": [1, 2, 3, 4]}}),
        )
        .await;
    let pending = next_of(&mut f.events, EventKind::ApprovalPending).await;
    let approval_id = data(&pending)["approvalId"].as_str().unwrap().to_owned();
    // The event (retained in events.log) carries no arguments.
    assert!(data(&pending).get("argsPreview").is_none(), "{pending:?}");
    let mut op = operator(&f).await;
    let listed = op.request(2, "approvals.list", json!({})).await;
    let preview = listed["result"]["approvals"][0]["argsPreview"]
        .as_str()
        .unwrap()
        .to_owned();
    let expected = format!(
        r#"{{"path": "\u001b[2J\u202egpj.exe\u0007{}…", "force": true, "list": [1, 2, 3, …+1]}}"#,
        "z".repeat(40 - 13)
    );
    assert_eq!(preview, expected);
    assert!(preview.chars().count() <= 200);
    op.request(3, "approvals.challenge", json!({"approvalId": approval_id}))
        .await;
    let written = terminal.written.lock().unwrap().last().unwrap().clone();
    assert!(
        written.contains(&format!("appduct: arguments: {expected}\r\n")),
        "{written:?}"
    );
    assert!(
        !written
            .chars()
            .any(|c| (c.is_control() && c != '\r' && c != '\n') || c == '\u{202e}'),
        "{written:?}"
    );
    f.stop().await;
}

/// `policy.tools["pixel-8/slow_task"]` as `policy.list` reports it.
async fn slow_task_rule(op: &mut Wire, id: i64) -> Value {
    let listed = op.request(id, "policy.list", json!({})).await;
    listed["result"]["policy"]["tools"]["pixel-8/slow_task"].clone()
}

#[tokio::test]
async fn a_loosening_policy_change_waits_for_an_operator_and_tightening_does_not() {
    let terminal = Arc::new(CapturedTerminal::default());
    let f = fixture(60_000, true, Arc::clone(&terminal)).await;
    let mut op = operator(&f).await;
    // Tightening applies at once.
    let tightened = op
        .request(
            2,
            "policy.set",
            json!({"target": "*/echo", "decision": "deny"}),
        )
        .await;
    assert_eq!(tightened["result"]["changed"], true, "{tightened}");
    // Loosening (prompt -> allow) is held: nothing changes until approved.
    let held = op
        .request(
            3,
            "policy.set",
            json!({"target": "pixel-8/slow_task", "decision": "allow"}),
        )
        .await;
    assert_eq!(held["error"]["data"]["type"], "approval_refused", "{held}");
    let details = &held["error"]["data"]["details"];
    assert_eq!(details["reason"], "operator_approval_required", "{held}");
    assert_eq!(details["change"], "pixel-8/slow_task prompt -> allow");
    let approval_id = details["approvalId"].as_str().unwrap().to_owned();
    assert_eq!(slow_task_rule(&mut op, 4).await, "prompt");
    let listed = op.request(5, "approvals.list", json!({})).await;
    let entry = &listed["result"]["approvals"][0];
    assert_eq!(entry["kind"], "policy", "{listed}");
    assert_eq!(entry["tool"], "policy.set");
    assert_eq!(entry["argsPreview"], "pixel-8/slow_task prompt -> allow");
    // Removing the deny rule also loosens.
    let removed = op
        .request(6, "policy.reset", json!({"target": "*/echo"}))
        .await;
    assert_eq!(
        removed["error"]["data"]["details"]["change"], "rule */echo deny removed",
        "{removed}"
    );
    // Approving needs the code, on this connection; then the change is in force.
    let refused = op
        .request(
            7,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve"}),
        )
        .await;
    assert_eq!(
        refused["error"]["data"]["details"]["reason"], "code_required",
        "{refused}"
    );
    op.request(8, "approvals.challenge", json!({"approvalId": approval_id}))
        .await;
    let written = terminal.written.lock().unwrap().last().unwrap().clone();
    assert!(
        written.contains("policy change by policy.set")
            && written.contains("change: pixel-8/slow_task prompt -> allow"),
        "{written:?}"
    );
    let code = terminal.code();
    let approved = op
        .request(
            9,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve", "code": code}),
        )
        .await;
    assert_eq!(approved["result"]["decision"], "approved", "{approved}");
    assert_eq!(slow_task_rule(&mut op, 10).await, "allow");
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(f.daemon.state_dir().path().join("config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        file["policy"]["tools"]["pixel-8/slow_task"], "allow",
        "{file}"
    );
    f.stop().await;
}

#[tokio::test]
async fn a_loosening_reload_is_held_on_request_and_refused_on_sighup() {
    let terminal = Arc::new(CapturedTerminal::default());
    let f = fixture(60_000, false, Arc::clone(&terminal)).await;
    let mut op = operator(&f).await;
    // A tightening set writes config.json with the policy in force; then a hand edit
    // loosens pixel-8/slow_task.
    let set = op
        .request(
            20,
            "policy.set",
            json!({"target": "*/echo", "decision": "deny"}),
        )
        .await;
    assert_eq!(set["result"]["changed"], true, "{set}");
    let path = f.daemon.state_dir().path().join("config.json");
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    file["policy"]["tools"]["pixel-8/slow_task"] = json!("allow");
    std::fs::write(&path, serde_json::to_vec(&file).unwrap()).unwrap();
    // SIGHUP cannot be approved: nothing applies.
    let signal = f.daemon.reload().await.unwrap_err();
    assert_eq!(
        signal.error_type(),
        ErrorType::ApprovalRefused,
        "{signal:?}"
    );
    assert_eq!(slow_task_rule(&mut op, 2).await, "prompt");
    let listed = op.request(3, "approvals.list", json!({})).await;
    assert_eq!(listed["result"]["approvals"], json!([]), "{listed}");
    // `daemon.reload` by request is held; approving (no code: operatorRequiresTerminal off)
    // applies the file.
    let held = op.request(4, "daemon.reload", json!({})).await;
    let details = &held["error"]["data"]["details"];
    assert_eq!(details["reason"], "operator_approval_required", "{held}");
    let approval_id = details["approvalId"].as_str().unwrap().to_owned();
    assert_eq!(slow_task_rule(&mut op, 5).await, "prompt");
    let approved = op
        .request(
            6,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve"}),
        )
        .await;
    assert_eq!(approved["result"]["decision"], "approved", "{approved}");
    assert_eq!(slow_task_rule(&mut op, 7).await, "allow");
    f.stop().await;
}

#[tokio::test]
async fn a_reload_with_config_json_deleted_keeps_the_running_policy() {
    let terminal = Arc::new(CapturedTerminal::default());
    let f = fixture(60_000, false, terminal).await;
    let mut op = operator(&f).await;
    let set = op
        .request(
            2,
            "policy.set",
            json!({"target": "*/echo", "decision": "deny"}),
        )
        .await;
    assert_eq!(set["result"]["changed"], true, "{set}");
    std::fs::remove_file(f.daemon.state_dir().path().join("config.json")).unwrap();
    let reply = op.request(3, "daemon.reload", json!({})).await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is missing; the running configuration stays in force"),
        "{reply}"
    );
    assert_eq!(slow_task_rule(&mut op, 4).await, "prompt");
    let listed = op.request(5, "policy.list", json!({})).await;
    assert_eq!(
        listed["result"]["policy"]["tools"]["*/echo"], "deny",
        "{listed}"
    );
    f.stop().await;
}

#[tokio::test]
async fn an_approved_reload_applies_only_the_approved_file() {
    let terminal = Arc::new(CapturedTerminal::default());
    let f = fixture(60_000, false, terminal).await;
    let mut op = operator(&f).await;
    let set = op
        .request(
            2,
            "policy.set",
            json!({"target": "*/echo", "decision": "deny"}),
        )
        .await;
    assert_eq!(set["result"]["changed"], true, "{set}");
    let path = f.daemon.state_dir().path().join("config.json");
    let original: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut asked = original.clone();
    asked["policy"]["tools"]["pixel-8/slow_task"] = json!("allow");
    std::fs::write(&path, serde_json::to_vec(&asked).unwrap()).unwrap();
    let held = op.request(3, "daemon.reload", json!({})).await;
    let details = &held["error"]["data"]["details"];
    assert_eq!(details["reason"], "operator_approval_required", "{held}");
    let approval_id = details["approvalId"].as_str().unwrap().to_owned();
    // The file is swapped for a looser one before the operator approves.
    let mut swapped = asked.clone();
    swapped["policy"]["tools"]
        .as_object_mut()
        .unwrap()
        .remove("*/echo");
    std::fs::write(&path, serde_json::to_vec(&swapped).unwrap()).unwrap();
    let approved = op
        .request(
            4,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve"}),
        )
        .await;
    assert_eq!(
        approved["error"]["data"]["details"]["reason"], "config_changed",
        "{approved}"
    );
    assert_eq!(slow_task_rule(&mut op, 5).await, "prompt");
    let listed = op.request(6, "policy.list", json!({})).await;
    assert_eq!(
        listed["result"]["policy"]["tools"]["*/echo"], "deny",
        "{listed}"
    );
    // Asked again with the approved content back in place: exactly that applies.
    std::fs::write(&path, serde_json::to_vec(&asked).unwrap()).unwrap();
    let held = op.request(7, "daemon.reload", json!({})).await;
    let approval_id = held["error"]["data"]["details"]["approvalId"]
        .as_str()
        .unwrap()
        .to_owned();
    let approved = op
        .request(
            8,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "approve"}),
        )
        .await;
    assert_eq!(approved["result"]["decision"], "approved", "{approved}");
    assert_eq!(slow_task_rule(&mut op, 9).await, "allow");
    let listed = op.request(10, "policy.list", json!({})).await;
    assert_eq!(
        listed["result"]["policy"]["tools"]["*/echo"], "deny",
        "{listed}"
    );
    f.stop().await;
}

/// Sends `slow_task` calls `first..first + n` on `wire` and waits until each has parked.
async fn park_many(wire: &mut Wire, tag: &str, first: i64, n: i64) {
    for i in first..first + n {
        wire.send(
            i,
            "tools.call",
            json!({"name": "slow_task", "args": {"n": i}, "callId": format!("{tag}-{i}"), "progress": true}),
        )
        .await;
    }
    for i in first..first + n {
        let call_id = format!("{tag}-{i}");
        wire.notification("tool_call_progress", |p| {
            p["callId"] == call_id.as_str() && p["approvalId"].is_string()
        })
        .await;
    }
}

/// The `too_many_approvals` refusal of request `id` on `wire`, with its `scope`.
async fn refused_as_full(wire: &mut Wire, id: i64, scope: &str, limit: usize) {
    let reply = wire.response(id).await;
    assert_eq!(
        reply["error"]["data"]["type"], "approval_refused",
        "{reply}"
    );
    let details = &reply["error"]["data"]["details"];
    assert_eq!(details["reason"], "too_many_approvals", "{reply}");
    assert_eq!(details["scope"], scope, "{reply}");
    assert_eq!(details["limit"], limit, "{reply}");
}

#[tokio::test]
async fn pending_approvals_are_capped_per_connection_and_daemon_wide() {
    use appduct_daemon::approvals::{MAX_PENDING_APPROVALS, MAX_PENDING_PER_CONNECTION};
    let per_conn = i64::try_from(MAX_PENDING_PER_CONNECTION).unwrap();
    let terminal = Arc::new(CapturedTerminal::default());
    let mut f = fixture(60_000, true, Arc::clone(&terminal)).await;
    // One connection parks its quota; one more call of it is refused, typed, at once.
    park_many(&mut f.wire, "a", 100, per_conn).await;
    f.wire
        .send(
            99,
            "tools.call",
            json!({"name": "slow_task", "args": {}, "callId": "a-over"}),
        )
        .await;
    refused_as_full(&mut f.wire, 99, "connection", MAX_PENDING_PER_CONNECTION).await;
    // Other connections are not held back by it, until the daemon-wide cap.
    let mut others = Vec::new();
    for c in 1..MAX_PENDING_APPROVALS / MAX_PENDING_PER_CONNECTION {
        let mut wire = Wire::new(&f.daemon);
        park_many(&mut wire, &format!("c{c}"), 100, per_conn).await;
        others.push(wire);
    }
    let mut late = Wire::new(&f.daemon);
    late.send(
        1,
        "tools.call",
        json!({"name": "slow_task", "args": {}, "callId": "late"}),
    )
    .await;
    refused_as_full(&mut late, 1, "daemon", MAX_PENDING_APPROVALS).await;
    // A loosening policy change is refused the same way (nothing changes).
    let held = late
        .request(
            2,
            "policy.set",
            json!({"target": "pixel-8/slow_task", "decision": "allow"}),
        )
        .await;
    assert_eq!(
        held["error"]["data"]["details"]["reason"], "too_many_approvals",
        "{held}"
    );
    let listed = late.request(3, "approvals.list", json!({})).await;
    assert_eq!(
        listed["result"]["approvals"].as_array().unwrap().len(),
        MAX_PENDING_APPROVALS
    );
    // Room again once one is decided.
    let first = listed["result"]["approvals"][0]["approvalId"]
        .as_str()
        .unwrap()
        .to_owned();
    let denied = late
        .request(
            4,
            "approvals.decide",
            json!({"approvalId": first, "decision": "deny"}),
        )
        .await;
    assert_eq!(denied["result"]["decision"], "denied", "{denied}");
    park_many(&mut late, "late", 10, 1).await;
    f.device.assert_no_frame();
    f.stop().await;
}

#[tokio::test]
async fn held_policy_changes_are_capped() {
    use appduct_daemon::approvals::MAX_HELD_POLICY_CHANGES;
    let terminal = Arc::new(CapturedTerminal::default());
    let f = fixture(60_000, true, Arc::clone(&terminal)).await;
    let mut op = operator(&f).await;
    let ask = |i: usize| json!({"target": format!("pixel-8/tool_{i}"), "decision": "allow"});
    for i in 0..MAX_HELD_POLICY_CHANGES {
        let held = op
            .request(10 + i64::try_from(i).unwrap(), "policy.set", ask(i))
            .await;
        assert_eq!(
            held["error"]["data"]["details"]["reason"], "operator_approval_required",
            "{held}"
        );
    }
    op.send(2, "policy.set", ask(MAX_HELD_POLICY_CHANGES)).await;
    refused_as_full(&mut op, 2, "policy", MAX_HELD_POLICY_CHANGES).await;
    // Parked calls still have room: the policy cap is its own.
    let mut f = f;
    park_many(&mut f.wire, "still-room", 3, 1).await;
    f.stop().await;
}

#[tokio::test]
async fn policy_file_io_never_stalls_the_runtime() {
    // A current-thread runtime: were `config.json` read on it, a stalled read would stall
    // every connection. The probe holds the read of `policy.set` until released.
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (release_tx, release) = std::sync::mpsc::channel::<()>();
    let release = Arc::new(Mutex::new(release));
    // Set when the test released the read (not the probe's own timeout): on the runtime
    // thread the test could not run to release it.
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let released_in_probe = Arc::clone(&released);
    let first = std::sync::atomic::AtomicBool::new(true);
    let probe = appduct_daemon::policy_control::IoProbe(Arc::new(move || {
        // Only the first read is held.
        if !first.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let _ = entered_tx.send(());
        let by_test = release
            .lock()
            .unwrap()
            .recv_timeout(std::time::Duration::from_secs(10))
            .is_ok();
        released_in_probe.store(by_test, std::sync::atomic::Ordering::SeqCst);
    }));
    let f = Fixture::with(
        move |options, dir| {
            options
                .config(appduct_client::config::Config::defaults(dir))
                .config_io_probe(probe)
        },
        standard_tools(),
    )
    .await;
    let mut setter = operator(&f).await;
    setter
        .send(
            2,
            "policy.set",
            json!({"target": "*/echo", "decision": "deny"}),
        )
        .await;
    entered.recv().await.unwrap();
    // The read is held: another connection is still answered at once.
    let mut other = Wire::new(&f.daemon);
    let status = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        other.request(1, "daemon.status", json!({})),
    )
    .await
    .expect("daemon.status was not answered while policy.set's file I/O was held");
    assert!(status.get("result").is_some(), "{status}");
    release_tx.send(()).unwrap();
    let set = setter.response(2).await;
    assert_eq!(set["result"]["changed"], true, "{set}");
    assert!(
        released.load(std::sync::atomic::Ordering::SeqCst),
        "the held read blocked the runtime until its own timeout"
    );
    f.stop().await;
}

#[tokio::test]
async fn a_peer_that_keeps_guessing_is_cut_off_without_spending_more_attempts() {
    use appduct_daemon::approvals::MAX_REFUSED_PER_PEER;
    let terminal = Arc::new(CapturedTerminal::default());
    let mut f = fixture(60_000, true, Arc::clone(&terminal)).await;
    park_many(&mut f.wire, "g", 100, 5).await;
    let mut op = operator(&f).await;
    let listed = op.request(2, "approvals.list", json!({})).await;
    let ids: Vec<String> = listed["result"]["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["approvalId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 5);
    // The operator asked for a code for each; a grinder presents guesses on its own connection.
    for (i, id) in ids.iter().enumerate() {
        let c = op
            .request(
                10 + i64::try_from(i).unwrap(),
                "approvals.challenge",
                json!({"approvalId": id}),
            )
            .await;
        assert!(c.get("result").is_some(), "{c}");
    }
    let mut grinder = Wire::new(&f.daemon);
    let mut refused = 0;
    let mut request = 100;
    let mut guess = |id: &str| {
        request += 1;
        (
            request,
            json!({"approvalId": id, "decision": "approve", "code": "000-000"}),
        )
    };
    'approvals: for id in &ids {
        loop {
            let (rid, params) = guess(id);
            let reply = grinder.request(rid, "approvals.decide", params).await;
            let reason = reply["error"]["data"]["details"]["reason"].clone();
            assert_eq!(
                reply["error"]["data"]["type"], "approval_refused",
                "{reply}"
            );
            if reason == "too_many_attempts" {
                assert_eq!(refused, MAX_REFUSED_PER_PEER, "{reply}");
                assert!(
                    reply["error"]["data"]["details"]["retryAfterS"]
                        .as_u64()
                        .unwrap()
                        > 0,
                    "{reply}"
                );
                break 'approvals;
            }
            refused += 1;
            assert!(refused <= MAX_REFUSED_PER_PEER, "{reply}");
            if reason == "too_many_wrong_codes" {
                continue 'approvals;
            }
        }
    }
    assert_eq!(refused, MAX_REFUSED_PER_PEER);
    // The cut-off attempt spent nothing: the approval it named keeps the 2 attempts left after
    // the one wrong code, and the operator approves it with a code on their own connection.
    let listed = op.request(3, "approvals.list", json!({})).await;
    let last = &ids[3];
    let entry = listed["result"]["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["approvalId"] == last.as_str())
        .unwrap()
        .clone();
    assert_eq!(entry["attemptsLeft"], 2, "{listed}");
    let c = op
        .request(4, "approvals.challenge", json!({"approvalId": last}))
        .await;
    assert!(c.get("result").is_some(), "{c}");
    let approved = op
        .request(
            5,
            "approvals.decide",
            json!({"approvalId": last, "decision": "approve", "code": terminal.code()}),
        )
        .await;
    assert_eq!(approved["result"]["decision"], "approved", "{approved}");
    f.stop().await;
}
