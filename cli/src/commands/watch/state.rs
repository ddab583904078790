//! The live view's model (§L23): what `appduct watch` knows, fed by control replies
//! (`sessions.list`, `calls.list`, `approvals.list`), the `events.subscribe` stream and the
//! audit day files. Pure data: no I/O and no clock of its own (`now_ms` is passed in), so the
//! renderer and the tests see exactly the same state.

use std::collections::VecDeque;

use appduct_protocol::control::{
    ApprovalSummary, CallProgressSnapshot, CallState, CallSummary, EventData, EventNotification,
    LeaseHolder, SessionLease, SessionSummary,
};

use appduct_client::timestamp::format_iso_ms;

use crate::commands::audit::Record;
use crate::render;

/// Event lines kept for the event panel.
pub const MAX_EVENT_LINES: usize = 200;
/// Audit records kept for the audit panel.
pub const MAX_AUDIT_RECORDS: usize = 100;
/// Seconds of history behind the calls-per-second and latency sparklines.
pub const RATE_WINDOW_S: usize = 60;

/// One second of finished calls: how many, and their summed duration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bucket {
    pub second: u64,
    pub calls: u64,
    pub total_ms: u64,
}

/// What needs asking the daemon again after an event the view cannot apply by itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stale {
    pub sessions: bool,
    pub calls: bool,
    pub approvals: bool,
}

impl Stale {
    pub fn any(&self) -> bool {
        self.sessions || self.calls || self.approvals
    }
}

/// Everything the live view shows.
#[derive(Debug, Clone, Default)]
pub struct WatchState {
    /// The daemon's time as last seen (unix ms): ages and elapsed times count from it.
    pub now_ms: u64,
    pub daemon: Option<String>,
    pub sessions: Vec<SessionSummary>,
    pub calls: Vec<CallSummary>,
    pub approvals: Vec<ApprovalSummary>,
    pub events: VecDeque<String>,
    pub audit: VecDeque<Record>,
    /// Oldest first; at most [`RATE_WINDOW_S`] seconds, empty seconds included.
    pub rate: VecDeque<Bucket>,
    /// Index into `approvals` of the highlighted row.
    pub selected: usize,
    /// The last outcome of a key action, shown in the footer.
    pub status: Option<String>,
    pub stale: Stale,
}

impl WatchState {
    pub fn new(now_ms: u64) -> Self {
        Self {
            now_ms,
            ..Self::default()
        }
    }

    pub fn set_sessions(&mut self, mut sessions: Vec<SessionSummary>) {
        sessions.sort_by(|a, b| a.alias.cmp(&b.alias));
        self.sessions = sessions;
        self.stale.sessions = false;
    }

    pub fn set_calls(&mut self, calls: Vec<CallSummary>) {
        self.calls = calls;
        self.stale.calls = false;
    }

    pub fn set_approvals(&mut self, approvals: Vec<ApprovalSummary>) {
        self.approvals = approvals;
        self.selected = self.selected.min(self.approvals.len().saturating_sub(1));
        self.stale.approvals = false;
    }

    /// The highlighted pending approval.
    pub fn selected_approval(&self) -> Option<&ApprovalSummary> {
        self.approvals.get(self.selected)
    }

    pub fn select_next(&mut self) {
        if self.selected + 1 < self.approvals.len() {
            self.selected += 1;
        }
    }

    pub fn select_previous(&mut self) {
        self.selected = self.selected.saturating_sub(1);
    }

    /// Advances the clock; seconds without finished calls become empty buckets.
    pub fn tick(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        self.roll_rate(self.now_ms / 1000);
    }

    fn roll_rate(&mut self, second: u64) {
        let last = self.rate.back().map(|b| b.second);
        match last {
            Some(last) if last >= second => {}
            Some(last) => {
                let from = last.max(second.saturating_sub(RATE_WINDOW_S as u64)) + 1;
                for s in from..=second {
                    self.rate.push_back(Bucket {
                        second: s,
                        ..Bucket::default()
                    });
                }
            }
            None => self.rate.push_back(Bucket {
                second,
                ..Bucket::default()
            }),
        }
        while self.rate.len() > RATE_WINDOW_S {
            self.rate.pop_front();
        }
    }

    fn record_finished(&mut self, at_ms: u64, duration_ms: u64) {
        let second = at_ms / 1000;
        self.roll_rate(second);
        if let Some(bucket) = self.rate.iter_mut().rev().find(|b| b.second == second) {
            bucket.calls += 1;
            bucket.total_ms = bucket.total_ms.saturating_add(duration_ms);
        }
    }

    /// Calls per second over the window, oldest first (for the sparkline).
    pub fn calls_per_second(&self) -> Vec<u64> {
        self.rate.iter().map(|b| b.calls).collect()
    }

    /// Mean latency per second over the window, oldest first; 0 for seconds without calls.
    pub fn latency_ms(&self) -> Vec<u64> {
        self.rate
            .iter()
            .map(|b| b.total_ms.checked_div(b.calls).unwrap_or(0))
            .collect()
    }

    pub fn push_audit(&mut self, record: Record) {
        self.audit.push_back(record);
        while self.audit.len() > MAX_AUDIT_RECORDS {
            self.audit.pop_front();
        }
    }

    fn push_event_line(&mut self, line: String) {
        self.events.push_back(line);
        while self.events.len() > MAX_EVENT_LINES {
            self.events.pop_front();
        }
    }

    /// Applies one `event` notification (§C13.1): calls and approvals change in place where
    /// the event says enough; otherwise the matching part is marked [`Stale`] for the loop to
    /// ask again. Every event also becomes a line of the event panel.
    pub fn apply(&mut self, event: &EventNotification) {
        self.tick(event.ts);
        let sid = event.session_id.clone();
        let alias = event.alias.clone();
        match &event.data {
            EventData::ToolCallStarted(d) => {
                if let Some(call) = self.call_mut(&d.call_id) {
                    call.state = CallState::Running;
                    call.approval_id = None;
                } else {
                    self.calls.push(
                        CallSummary::new(
                            d.call_id.clone(),
                            d.wire_id.clone(),
                            d.name.clone(),
                            d.caller,
                            CallState::Running,
                            format_iso_ms(event.ts),
                            0,
                            d.deadline_ms,
                        )
                        .with_session_id(sid.clone())
                        .with_alias(alias.clone())
                        .with_expires_at(Some(
                            event.ts.saturating_add(d.deadline_ms).div_ceil(1000),
                        )),
                    );
                }
            }
            EventData::ToolCallProgress(d) => match self.call_mut(&d.call_id) {
                Some(call) => {
                    call.progress = Some(CallProgressSnapshot::new(
                        d.progress.clone(),
                        d.message.clone(),
                    ));
                }
                None => self.stale.calls = true,
            },
            EventData::ToolCallFinished(d) => {
                self.calls.retain(|c| c.call_id != d.call_id);
                self.record_finished(event.ts, d.duration_ms);
            }
            EventData::ApprovalPending(d) => {
                if let Some(call) = self.call_mut(&d.call_id) {
                    call.state = CallState::AwaitingApproval;
                    call.approval_id = Some(d.approval_id.clone());
                } else {
                    self.stale.calls = true;
                }
                // The list carries `createdAt` and `attemptsLeft`, which the event does not.
                self.stale.approvals = true;
            }
            EventData::ApprovalSettled(d) => {
                self.approvals.retain(|a| a.approval_id != d.approval_id);
                self.selected = self.selected.min(self.approvals.len().saturating_sub(1));
                if let Some(call) = self.call_mut(&d.call_id) {
                    call.approval_id = None;
                    call.state = CallState::Running;
                }
            }
            // Leases (§C10.9): the session row shows the holder until the lease ends.
            EventData::LeaseTaken(d) => match self.session_mut(sid.as_deref()) {
                Some(s) => s.lease = Some(SessionLease::new(d.holder.clone(), d.expires_at)),
                None => self.stale.sessions = true,
            },
            EventData::LeaseReleased(_) => match self.session_mut(sid.as_deref()) {
                Some(s) => s.lease = None,
                None => self.stale.sessions = true,
            },
            EventData::SessionClaimed(_)
            | EventData::SessionSuspended(_)
            | EventData::SessionResumed(_)
            | EventData::SessionRevoked(_)
            | EventData::SessionExpired(_)
            | EventData::ToolsChanged(_)
            | EventData::EventsChanged(_) => self.stale.sessions = true,
            EventData::DaemonStarted(d) => {
                self.daemon = Some(format!("appduct {} (pid {})", d.version, d.pid));
                self.stale = Stale {
                    sessions: true,
                    calls: true,
                    approvals: true,
                };
            }
            _ => {}
        }
        self.push_event_line(event_line(event));
    }

    fn session_mut(&mut self, session_id: Option<&str>) -> Option<&mut SessionSummary> {
        let id = session_id?;
        self.sessions.iter_mut().find(|s| s.session_id == id)
    }

    fn call_mut(&mut self, call_id: &str) -> Option<&mut CallSummary> {
        self.calls.iter_mut().find(|c| c.call_id == call_id)
    }
}

/// One line of the event panel: time, session, kind and the data that says most. App text is
/// cleaned (SECURITY.md §4.13).
pub fn event_line(event: &EventNotification) -> String {
    let time = render::iso_seconds_from_unix_ms(i64::try_from(event.ts).unwrap_or(i64::MAX))
        .map(|t| t.get(11..19).unwrap_or(&t).to_owned())
        .unwrap_or_default();
    let who = event
        .alias
        .as_deref()
        .or(event.session_id.as_deref())
        .unwrap_or("-");
    let what = match &event.data {
        EventData::ToolCallStarted(d) => format!("{} started ({})", d.name, d.caller),
        EventData::ToolCallProgress(d) => {
            let mut s = String::from("progress");
            if let Some(p) = &d.progress {
                s.push_str(&format!(" {p}"));
            }
            if let Some(m) = &d.message {
                s.push_str(&format!(" {m}"));
            }
            s
        }
        EventData::ToolCallFinished(d) => {
            let mut s = format!("{} {} in {} ms", d.name, d.outcome.as_str(), d.duration_ms);
            if let Some(t) = d.error_type {
                s.push_str(&format!(" ({})", t.as_str()));
            }
            s
        }
        EventData::ApprovalPending(d) => format!("{} waits for approval {}", d.tool, d.approval_id),
        EventData::ApprovalSettled(d) => format!("{} {}", d.approval_id, d.decision.as_str()),
        EventData::AppEvent(_) => "app event".to_owned(),
        EventData::LeaseTaken(d) => {
            let mut s = format!("leased to {}", holder_text(&d.holder));
            if let Some(from) = &d.stolen_from {
                s.push_str(&format!(", taken from {}", holder_text(from)));
            }
            s
        }
        EventData::LeaseReleased(d) => format!(
            "lease of {} ended ({})",
            holder_text(&d.holder),
            d.reason.as_str()
        ),
        other => other.kind().as_str().to_owned(),
    };
    let kind = event.data.kind();
    let what = match &event.data {
        EventData::AppEvent(d) => serde_json::to_value(d)
            .ok()
            .and_then(|v| v.get("name").and_then(|n| n.as_str()).map(str::to_owned))
            .unwrap_or(what),
        _ => what,
    };
    render::clean_line(&format!("{time}  {who}  {}  {what}", kind.as_str()))
}

/// A lease holder as text: `appduct-mcp (pid 4242)`; what is unknown is left out.
pub fn holder_text(holder: &LeaseHolder) -> String {
    let client = holder.client.as_deref().unwrap_or("a client");
    match holder.pid {
        Some(pid) => format!("{client} (pid {pid})"),
        None => client.to_owned(),
    }
}

/// The LEASE cell of a session row: holder and seconds left at `now_ms`, `-` without a lease.
pub fn lease_cell(session: &SessionSummary, now_ms: u64) -> String {
    match &session.lease {
        None => "-".to_owned(),
        Some(l) => {
            let left = l.expires_at.saturating_sub(now_ms / 1000);
            format!("{} {left}s", holder_text(&l.holder))
        }
    }
}

/// How far along a call is, as a fraction for the progress bar: a `progress` between 0 and 1
/// is taken as the fraction (§D7.13 sets no scale; 0–1 is what the SDKs report).
pub fn progress_ratio(call: &CallSummary) -> Option<f64> {
    let p = call.progress.as_ref()?.progress.as_ref()?.as_f64()?;
    (0.0..=1.0).contains(&p).then_some(p)
}

/// Milliseconds the call has run at `now_ms`: from `startedAt`, never less than the reply's
/// own `elapsedMs` (clocks of the view and the daemon may differ slightly).
pub fn elapsed_ms(call: &CallSummary, now_ms: u64) -> u64 {
    render::parse_instant(&call.started_at)
        .and_then(|t| u64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok())
        .and_then(|started| now_ms.checked_sub(started))
        .map_or(call.elapsed_ms, |e| e.max(call.elapsed_ms))
}
