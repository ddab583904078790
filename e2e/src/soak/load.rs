//! The control side of the soak: callers keeping one call in flight each (echo, failing,
//! unknown tool, timeout, cancel), clients that leave with a call in flight, short visits
//! (hello plus one read), and a subscriber that stays for the whole run. Every call's outcome
//! goes into the [`Ledger`] the audit is checked against.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::fleet::SLOW_MS;
use super::rpc::{Rpc, answer};
use super::{Rng, Soak, bump, lock};

/// What the audit must hold for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Answered: exactly one record with this outcome and error type.
    Settled {
        outcome: &'static str,
        error_type: Option<String>,
    },
    /// The caller left before the answer: exactly one record, any outcome.
    Abandoned,
    /// Refused before a session was resolved (never expected here): no record.
    Unaudited,
}

/// Every call the soak made, by callId, and a tally of outcomes.
#[derive(Debug, Default)]
pub struct Ledger {
    calls: Mutex<HashMap<String, Expect>>,
    tally: Mutex<BTreeMap<String, u64>>,
    next: AtomicU64,
}

impl Ledger {
    /// A fresh callId (chosen by the caller, so the audit can be matched call by call).
    pub fn call_id(&self) -> String {
        format!("soak_{}", self.next.fetch_add(1, Ordering::Relaxed))
    }

    fn record(&self, call_id: String, expect: Expect, label: String) {
        lock(&self.calls).insert(call_id, expect);
        *lock(&self.tally).entry(label).or_default() += 1;
    }

    /// Calls booked so far.
    pub fn count(&self) -> usize {
        lock(&self.calls).len()
    }

    /// Calls that must have exactly one audit record.
    pub fn audited(&self) -> usize {
        lock(&self.calls)
            .values()
            .filter(|e| **e != Expect::Unaudited)
            .count()
    }

    pub fn tally(&self) -> BTreeMap<String, u64> {
        lock(&self.tally).clone()
    }

    pub fn take(&self) -> HashMap<String, Expect> {
        std::mem::take(&mut *lock(&self.calls))
    }
}

/// The kinds of call a caller makes, per mille.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Echo,
    Fail,
    Missing,
    Timeout,
    Cancel,
}

impl Kind {
    fn pick(rng: &mut Rng) -> Self {
        match rng.below(1000) {
            0..20 => Self::Fail,
            20..30 => Self::Missing,
            30..40 => Self::Timeout,
            40..60 => Self::Cancel,
            _ => Self::Echo,
        }
    }

    /// The error type this kind ends in when the device stays connected.
    fn expected_error(self) -> Option<&'static str> {
        match self {
            Self::Echo => None,
            Self::Fail => Some("tool_execution_error"),
            Self::Missing => Some("tool_not_found"),
            Self::Timeout => Some("tool_timeout"),
            Self::Cancel => Some("tool_cancelled"),
        }
    }
}

/// Error types of a call to a device that dropped meanwhile: allowed for every kind.
const DROPPED: [&str; 2] = ["session_suspended", "session_not_active"];
/// Error types returned before a session is resolved (§C10.1 steps 1–3): never audited.
const UNAUDITED: [&str; 3] = ["invalid_request", "no_session", "ambiguous_session"];

/// Books an answered call: checks it against what `kind` allows and, for a result, that it
/// came from the device it was sent to.
fn settle(soak: &Soak, call_id: String, kind: Option<Kind>, target: &str, response: &Value) {
    if let Some(result) = response.get("result") {
        let from = &result["result"]["device"];
        if result["sessionId"] != target || *from != target {
            bump(&soak.counters.misrouted_at_caller);
            soak.counters.note(format!(
                "misrouted at the caller: {call_id} to {target} answered by {from} ({})",
                result["sessionId"]
            ));
        }
        if kind != Some(Kind::Echo) {
            soak.counters
                .unexpected(format!("{call_id} ({kind:?}) succeeded: {response}"));
        }
        let expect = Expect::Settled {
            outcome: "ok",
            error_type: None,
        };
        soak.ledger.record(call_id, expect, "ok".to_owned());
        return;
    }
    let error = &response["error"];
    let error_type = error["data"]["type"].as_str().unwrap_or("").to_owned();
    let outcome = match error_type.as_str() {
        "tool_cancelled" => "cancelled",
        "policy_denied" => "denied",
        _ => "error",
    };
    let allowed = DROPPED.contains(&error_type.as_str())
        || kind.and_then(Kind::expected_error) == Some(&error_type);
    if !allowed {
        soak.counters
            .unexpected(format!("{call_id} ({kind:?}) to {target}: {error}"));
    }
    let label = format!("{outcome}: {error_type}");
    let expect = if error_type.is_empty() || UNAUDITED.contains(&error_type.as_str()) {
        Expect::Unaudited
    } else {
        Expect::Settled {
            outcome,
            error_type: Some(error_type),
        }
    };
    soak.ledger.record(call_id, expect, label);
}

/// A caller: one control connection, one call in flight, targets picked at random from the
/// pool. A broken connection is counted and replaced.
pub async fn caller(soak: Arc<Soak>, mut rng: Rng) {
    let mut rpc: Option<Rpc> = None;
    while let Some(_busy) = soak.gate.enter().await {
        if rpc.is_none() {
            match Rpc::connect(&soak.socket, None).await {
                Ok(c) => rpc = Some(c),
                Err(e) => {
                    soak.counters.unexpected(e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let Some(conn) = &rpc else { continue };
        let Some(target) = soak.pool.pick(&mut rng) else {
            continue;
        };
        if let Err(e) = one_call(
            &soak,
            conn,
            &target.session_id,
            Kind::pick(&mut rng),
            &mut rng,
        )
        .await
        {
            soak.counters.unexpected(e);
            rpc = None;
        }
    }
}

async fn one_call(
    soak: &Soak,
    rpc: &Rpc,
    target: &str,
    kind: Kind,
    rng: &mut Rng,
) -> Result<(), String> {
    let call_id = soak.ledger.call_id();
    let (name, args) = match kind {
        Kind::Echo => (
            "echo",
            json!({"target": target, "text": "The quick brown fox jumps over the lazy dog."}),
        ),
        Kind::Fail => ("fail", json!({"target": target})),
        Kind::Missing => ("no_such_tool", json!({"target": target})),
        Kind::Timeout | Kind::Cancel => ("slow", json!({"target": target, "ms": SLOW_MS})),
    };
    let mut params = json!({"selector": target, "name": name, "args": args, "callId": call_id,
                            "caller": "client"});
    if kind == Kind::Timeout {
        params["timeoutMs"] = json!(1000);
    }
    let (_, rx) = match rpc.send("tools.call", params).await {
        Ok(sent) => sent,
        Err(e) => {
            // The line may have reached the daemon: the audit may or may not hold it.
            soak.ledger
                .record(call_id, Expect::Unaudited, "lost (write failed)".to_owned());
            return Err(e);
        }
    };
    if kind == Kind::Cancel {
        tokio::time::sleep(rng.millis(5, 60)).await;
        bump(&soak.counters.cancels_sent);
        match rpc.result("tools.cancel", json!({"callId": call_id})).await {
            Ok(cancelled) if cancelled["cancelled"] == true => {
                bump(&soak.counters.cancels_accepted);
            }
            Ok(_) => {}
            Err(e) => soak.counters.unexpected(e),
        }
    }
    match answer(rx, "tools.call").await {
        Ok(response) => {
            settle(soak, call_id, Some(kind), target, &response);
            Ok(())
        }
        Err(e) => {
            soak.ledger
                .record(call_id, Expect::Abandoned, "lost (no answer)".to_owned());
            Err(e)
        }
    }
}

/// Clients that issue a slow call with `progress: true`, wait for its `tool_call_started`
/// and leave (the daemon cancels it with `connection_closed` and still audits it). Targets are
/// long-lived devices only.
pub async fn leavers(soak: Arc<Soak>, mut rng: Rng) {
    while let Some(busy) = soak.gate.enter().await {
        let target = soak.stable[rng.below(soak.stable.len())].session_id.clone();
        if let Err(e) = leave_once(&soak, &target, &mut rng).await {
            soak.counters.unexpected(e);
        }
        drop(busy);
        soak.gate.sleep(rng.millis(200, 800)).await;
    }
}

async fn leave_once(soak: &Soak, target: &str, rng: &mut Rng) -> Result<(), String> {
    let (tx, mut notes) = mpsc::unbounded_channel();
    let rpc = Rpc::connect(&soak.socket, Some(tx)).await?;
    let call_id = soak.ledger.call_id();
    let params = json!({"selector": target, "name": "slow", "caller": "client",
                        "args": {"target": target, "ms": SLOW_MS}, "callId": call_id,
                        "progress": true});
    let (_, mut rx) = rpc.send("tools.call", params).await?;
    let started = async {
        while let Some(note) = notes.recv().await {
            if note["method"] == "tool_call_started" && note["params"]["callId"] == call_id.as_str()
            {
                return true;
            }
        }
        false
    };
    tokio::select! {
        response = &mut rx => {
            let response = response.map_err(|_| "leaver: the connection closed".to_owned())?;
            settle(soak, call_id, None, target, &response);
            return Ok(());
        }
        seen = tokio::time::timeout(Duration::from_secs(10), started) => {
            if seen != Ok(true) {
                soak.ledger.record(call_id, Expect::Abandoned, "lost (no start)".to_owned());
                return Err("leaver: no tool_call_started within 10 s".to_owned());
            }
        }
    }
    tokio::time::sleep(rng.millis(0, 50)).await;
    if let Ok(response) = rx.try_recv() {
        settle(soak, call_id, None, target, &response);
        return Ok(());
    }
    drop(rpc);
    bump(&soak.counters.abandoned);
    soak.ledger.record(
        call_id,
        Expect::Abandoned,
        "left with the call in flight".to_owned(),
    );
    Ok(())
}

/// Short control visits: connect, `daemon.hello`, one read (status, sessions, tools, events,
/// or a subscription held for 100 ms), leave.
pub async fn visitors(soak: Arc<Soak>, mut rng: Rng) {
    while let Some(busy) = soak.gate.enter().await {
        match visit_once(&soak, &mut rng).await {
            Ok(()) => bump(&soak.counters.visitors),
            Err(e) => {
                bump(&soak.counters.visitor_failures);
                soak.counters.note(format!("visitor: {e}"));
            }
        }
        drop(busy);
        soak.gate.sleep(rng.millis(20, 180)).await;
    }
}

async fn visit_once(soak: &Soak, rng: &mut Rng) -> Result<(), String> {
    let (tx, mut notes) = mpsc::unbounded_channel();
    let rpc = Rpc::connect(&soak.socket, Some(tx)).await?;
    rpc.result(
        "daemon.hello",
        json!({"client": {"name": "appduct-soak", "version": "1"}}),
    )
    .await?;
    let target = &soak.stable[rng.below(soak.stable.len())].session_id;
    match rng.below(6) {
        0 => rpc.result("daemon.status", json!({})).await.map(drop),
        1 => rpc.result("sessions.list", json!({})).await.map(drop),
        2 => rpc
            .result("tools.list", json!({"selector": target}))
            .await
            .map(drop),
        3 => rpc
            .result("events.since", json!({"selector": target, "limit": 16}))
            .await
            .map(drop),
        4 => rpc
            .result("events.list", json!({"selector": target, "limit": 16}))
            .await
            .map(drop),
        _ => {
            rpc.result("events.subscribe", json!({"kinds": ["app_event"]}))
                .await?;
            let _ = tokio::time::timeout(Duration::from_millis(100), notes.recv()).await;
            Ok(())
        }
    }
}

/// One subscriber for the whole run, counting `app_event` and `tool_call_finished`.
pub async fn subscriber(soak: Arc<Soak>) -> Result<Rpc, String> {
    let (tx, mut notes) = mpsc::unbounded_channel::<Value>();
    let rpc = Rpc::connect(&soak.socket, Some(tx)).await?;
    rpc.result(
        "events.subscribe",
        json!({"kinds": ["app_event", "tool_call_finished"]}),
    )
    .await?;
    tokio::spawn(async move {
        while let Some(note) = notes.recv().await {
            match note["params"]["kind"].as_str() {
                Some("app_event") => bump(&soak.counters.events_seen),
                Some("tool_call_finished") => bump(&soak.counters.finished_seen),
                _ => {}
            }
        }
    });
    Ok(rpc)
}
