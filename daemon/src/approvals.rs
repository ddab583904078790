//! Operator approvals and grants (§C8.17–§C8.21, §C11.1; SECURITY.md §4.18).
//!
//! With `consent.fallback: "operator"`, the calls module parks a `prompt` call whose caller has
//! no consent channel here as a pending approval, and waits on the [`Verdict`] this store sends
//! it. An approval ends exactly once, by whoever removes it from the store: `approvals.decide`
//! (approved or denied), too many wrong codes (denied), the call's own task (expired), or the
//! calls module when the call was cancelled or settled by a transition (cancelled). Removing it
//! emits `approval_settled` and wakes the parked call.
//!
//! The one-time code: `approvals.challenge` mints six CSPRNG digits, keeps them on the pending
//! approval and writes them to the controlling terminal of the process at the other end of the
//! control connection ([`OperatorTerminal`]), never into a reply, an event, a log line or the
//! audit. `approvals.decide` compares it in constant time; the third wrong code of an approval
//! denies it.
//!
//! Locking: the store's lock is taken under the engine lock (transitions settle parked calls)
//! and emits to the bus under it, so the order is engine → calls table → approvals → bus; this
//! module never calls the engine or the calls table.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use appduct_client::config::{ConsentConfig, ConsentFallback};
use appduct_client::random::random_bytes;
use appduct_client::timestamp::format_iso_ms;
use appduct_protocol::control::{
    ApprovalChallengeResult, ApprovalDecision, ApprovalKind, ApprovalPendingData,
    ApprovalSettledData, ApprovalSummary, ApprovalVerdict, ApprovalsDecideParams,
    ApprovalsDecideResult, Caller, Decider, EventData, GrantScope, GrantSummary,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::ErrorObject;
use appduct_protocol::preview::escape_hidden;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;
use subtle::ConstantTimeEq as _;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::control_server::{Connection, ConnectionId};
use crate::events::EventBus;

/// Wrong codes an approval accepts; the last one denies it.
pub const MAX_CODE_ATTEMPTS: u32 = 3;
/// How long a challenged code is accepted (bounded by the approval's own expiry).
pub const CODE_TTL: Duration = Duration::from_secs(120);
/// How long before its approval's stamp a terminal must have been opened to be an operator's
/// (SECURITY.md §4.18). A devpts node's ctime comes from the kernel's coarse clock, which lags
/// the wall clock by up to one tick (4 ms at 250 Hz, 10 ms at 100 Hz), and the stamp is the end
/// of the socket read that carried the request, a little after the client sent it. 50 ms
/// covers both several times over on a loaded host, and no person opens a terminal and
/// approves from it within 50 ms of asking.
pub const NEW_TERMINAL_MARGIN: Duration = Duration::from_millis(50);
/// Pending approvals (parked calls and held policy changes) the daemon keeps at once; one more
/// is refused `approval_refused` `too_many_approvals` (SECURITY.md §4.18). It also bounds
/// `approvals.list` (each entry is at most about 1 KiB).
pub const MAX_PENDING_APPROVALS: usize = 256;
/// Parked calls of one control connection at once.
pub const MAX_PENDING_PER_CONNECTION: usize = 32;
/// Held policy changes (`kind: "policy"`, §C11.2) daemon-wide at once.
pub const MAX_HELD_POLICY_CHANGES: usize = 8;
/// Refused approval attempts (a wrong code, or a code on another connection) one peer may make
/// within [`PEER_ATTEMPT_WINDOW`]; past it, its approve attempts are refused
/// `too_many_attempts` without being compared or spending any approval's attempts.
pub const MAX_REFUSED_PER_PEER: usize = 10;
/// The sliding window of [`MAX_REFUSED_PER_PEER`].
pub const PEER_ATTEMPT_WINDOW: Duration = Duration::from_secs(600);
/// Peers whose refused attempts are remembered at once (the oldest is forgotten past it).
const MAX_PEERS_TRACKED: usize = 1024;
/// Prefix of approval ids.
pub const APPROVAL_PREFIX: &str = "apr_";
/// Prefix of grant ids.
pub const GRANT_PREFIX: &str = "grt_";

/// How a parked call's approval ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `terminal`: the device the code was written to (none when no code was needed).
    Approved {
        by: Decider,
        terminal: Option<String>,
    },
    Denied {
        by: Decider,
        wrong_code: bool,
    },
    Expired,
    Cancelled,
}

impl Verdict {
    fn wire(&self) -> ApprovalVerdict {
        match self {
            Verdict::Approved { .. } => ApprovalVerdict::Approved,
            Verdict::Denied { .. } => ApprovalVerdict::Denied,
            Verdict::Expired => ApprovalVerdict::Expired,
            Verdict::Cancelled => ApprovalVerdict::Cancelled,
        }
    }
}

/// A terminal device: what [`OperatorTerminal::locate`] finds for a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminalDevice {
    /// Its path, e.g. `/dev/pts/3`.
    pub path: String,
    /// Its device number (`st_rdev`): what `/proc/<pid>/stat` names as `tty_nr`.
    pub rdev: u64,
    /// When its device node was created (its ctime), Unix ms; `None` when unknown. A devpts
    /// node gets its ctime when the pseudo-terminal is opened and keeps it across reads and
    /// writes; a `chmod` (e.g. `mesg`) moves it forward, never back.
    pub created_unix_ms: Option<u64>,
}

/// Whose terminal [`OperatorTerminal::locate`] is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminalOf {
    /// The parked caller's, when its call parks.
    Caller,
    /// The connection asking for a code (`approvals.challenge`).
    Approver,
}

/// Where `approvals.challenge` writes the code: the controlling terminal of the peer. A seam so
/// in-memory tests (no peer process) can say which terminal a process has and read the code a
/// person would see.
pub trait OperatorTerminal: Send + Sync + fmt::Debug {
    /// The controlling terminal of process `pid`; `Err` says in one sentence why there is none.
    /// `of` says whose it is (the production lookup needs only `pid`; tests without peer
    /// processes answer by it).
    fn locate(&self, pid: Option<u32>, of: TerminalOf) -> Result<TerminalDevice, String>;
    /// Writes `text` to `device`; `Err` says in one sentence why not.
    fn write(&self, device: &TerminalDevice, text: &str) -> Result<(), String>;
}

/// The production [`OperatorTerminal`]: on Linux, the terminal `/proc/<pid>/stat` names,
/// matched to a character device `/dev/pts/*` or `/dev/tty*` owned by the daemon's user.
#[derive(Debug, Default, Clone, Copy)]
pub struct ControllingTerminal;

impl OperatorTerminal for ControllingTerminal {
    fn locate(&self, pid: Option<u32>, _of: TerminalOf) -> Result<TerminalDevice, String> {
        let pid = pid.ok_or("the connection's peer process is unknown")?;
        controlling_terminal(pid)
    }

    fn write(&self, device: &TerminalDevice, text: &str) -> Result<(), String> {
        write_terminal(&device.path, text)
    }
}

/// `tty_nr` of `/proc/<pid>/stat` (field 7), matched against `/dev/pts/*` and `/dev/tty*`
/// (never following a symlink, so `/dev/stdin` and the like cannot match); `Err` when the
/// process has none.
#[cfg(target_os = "linux")]
fn controlling_terminal(pid: u32) -> Result<TerminalDevice, String> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("process {pid} cannot be inspected ({e})"))?;
    // The command name (field 2) is in parentheses and may contain anything: skip past the last ')'.
    let rest = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(|| format!("process {pid} has an unreadable status"))?;
    // After ')': state, ppid, pgrp, session, tty_nr.
    let tty_nr: u64 = rest
        .split_whitespace()
        .nth(4)
        .and_then(|f| f.parse::<i64>().ok())
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| format!("process {pid} has an unreadable status"))?;
    if tty_nr == 0 {
        return Err(format!("process {pid} has no controlling terminal"));
    }
    let me = rustix::process::geteuid().as_raw();
    let mut candidates: Vec<std::path::PathBuf> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/dev/pts") {
        candidates.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
    }
    if let Ok(entries) = std::fs::read_dir("/dev") {
        candidates.extend(entries.filter_map(|e| {
            let e = e.ok()?;
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("tty"))
                .then(|| e.path())
        }));
    }
    for path in candidates {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_char_device() && meta.rdev() == tty_nr && meta.uid() == me {
            let created_unix_ms = u64::try_from(meta.ctime()).ok().map(|s| {
                let ns = u64::try_from(meta.ctime_nsec()).unwrap_or(0);
                s.saturating_mul(1000).saturating_add(ns / 1_000_000)
            });
            return Ok(TerminalDevice {
                path: path.display().to_string(),
                rdev: tty_nr,
                created_unix_ms,
            });
        }
    }
    Err(format!(
        "the controlling terminal of process {pid} is not a terminal device of this user"
    ))
}

#[cfg(not(target_os = "linux"))]
fn controlling_terminal(_pid: u32) -> Result<TerminalDevice, String> {
    Err("finding a process's terminal is only implemented on Linux".to_owned())
}

/// Opens `device` write-only, without making it the daemon's controlling terminal and without
/// blocking, and writes `text`.
fn write_terminal(device: &str, text: &str) -> Result<(), String> {
    use appduct_client::platform::fs::OpenOptionsExt as _;
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(appduct_client::platform::o_noctty() | appduct_client::platform::o_nonblock())
        .open(device)
        .map_err(|e| format!("{device} could not be opened ({e})"))?;
    file.write_all(text.as_bytes())
        .map_err(|e| format!("{device} could not be written ({e})"))
}

struct Code {
    digits: [u8; 6],
    until: Instant,
    /// The device the code was written to.
    terminal: String,
    /// The connection that asked for it: only it may present the code (§C8.19).
    conn: ConnectionId,
}

/// What approving a policy change does (§C11.2): applies it, or says why it no longer can.
pub type PolicyApply = Box<dyn FnOnce() -> Result<(), ErrorObject> + Send>;

struct Pending {
    summary: ApprovalSummary,
    /// For a policy change: applies it once approved.
    apply: Option<PolicyApply>,
    expires: Instant,
    tx: Option<oneshot::Sender<Verdict>>,
    code: Option<Code>,
    wrong: u32,
    /// The device number of the parked caller's controlling terminal, if it has one.
    caller_terminal: Option<u64>,
    /// The connection that asked (for a parked call: the caller's), when known.
    asker: Option<ConnectionId>,
    /// When the daemon read the request that created it (`tools.call`, `policy.*`,
    /// `daemon.reload`), Unix ms.
    created_unix_ms: u64,
}

struct Grant {
    summary: GrantSummary,
    expires: Instant,
}

/// Who made an approve attempt: the peer process when the kernel named it, else the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Peer {
    Pid(u32),
    Conn(ConnectionId),
}

impl Peer {
    fn of(conn: &Connection) -> Self {
        conn.peer_pid().map_or(Peer::Conn(conn.id()), Peer::Pid)
    }
}

#[derive(Default)]
struct State {
    /// Oldest first.
    pending: Vec<Pending>,
    /// Oldest first.
    grants: Vec<Grant>,
    /// Refused approve attempts per peer within [`PEER_ATTEMPT_WINDOW`], oldest first.
    refused: std::collections::HashMap<Peer, std::collections::VecDeque<Instant>>,
}

impl State {
    fn prune_grants(&mut self, now: Instant) {
        self.grants.retain(|g| g.expires > now);
    }

    /// Refuses one more approval of `kind` asked for on `asker` when a cap is reached.
    fn room_for(&self, kind: ApprovalKind, asker: Option<ConnectionId>) -> Result<(), ErrorObject> {
        let full = |scope: &str, limit: usize, what: String| {
            tracing::warn!(scope, limit, "approval refused: {what}");
            Err(ErrorObject::application(
                ErrorType::ApprovalRefused,
                format!("{what}; decide or cancel some first (appduct approvals ls)"),
            )
            .with_details(json!({"reason": "too_many_approvals", "scope": scope, "limit": limit})))
        };
        if self.pending.len() >= MAX_PENDING_APPROVALS {
            return full(
                "daemon",
                MAX_PENDING_APPROVALS,
                format!("{MAX_PENDING_APPROVALS} approvals are already pending"),
            );
        }
        match kind {
            ApprovalKind::Policy => {
                let held = self
                    .pending
                    .iter()
                    .filter(|p| p.summary.kind == ApprovalKind::Policy)
                    .count();
                if held >= MAX_HELD_POLICY_CHANGES {
                    return full(
                        "policy",
                        MAX_HELD_POLICY_CHANGES,
                        format!(
                            "{MAX_HELD_POLICY_CHANGES} policy changes already wait for an operator"
                        ),
                    );
                }
            }
            ApprovalKind::Call => {
                if let Some(asker) = asker {
                    let mine = self
                        .pending
                        .iter()
                        .filter(|p| p.asker == Some(asker))
                        .count();
                    if mine >= MAX_PENDING_PER_CONNECTION {
                        return full(
                            "connection",
                            MAX_PENDING_PER_CONNECTION,
                            format!(
                                "{MAX_PENDING_PER_CONNECTION} calls of this connection already wait for an operator"
                            ),
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// When `peer` has spent its budget of refused attempts: how long until one frees up.
    fn over_budget(&mut self, peer: Peer, now: Instant) -> Option<Duration> {
        let times = self.refused.get_mut(&peer)?;
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= PEER_ATTEMPT_WINDOW)
        {
            times.pop_front();
        }
        if times.is_empty() {
            self.refused.remove(&peer);
            return None;
        }
        (times.len() >= MAX_REFUSED_PER_PEER).then(|| {
            times.front().map_or(Duration::ZERO, |t| {
                PEER_ATTEMPT_WINDOW - now.duration_since(*t)
            })
        })
    }

    /// Counts one refused attempt of `peer`.
    fn spend(&mut self, peer: Peer, now: Instant) {
        if !self.refused.contains_key(&peer) && self.refused.len() >= MAX_PEERS_TRACKED {
            // Forget the peer whose latest refusal is oldest.
            if let Some(oldest) = self
                .refused
                .iter()
                .min_by_key(|(_, t)| t.back().copied())
                .map(|(p, _)| *p)
            {
                self.refused.remove(&oldest);
            }
        }
        let times = self.refused.entry(peer).or_default();
        times.push_back(now);
        while times.len() > MAX_REFUSED_PER_PEER {
            times.pop_front();
        }
    }

    fn position(&self, approval_id: &str) -> Option<usize> {
        self.pending
            .iter()
            .position(|p| p.summary.approval_id == approval_id)
    }
}

/// The daemon's pending approvals and grants.
pub struct Approvals {
    state: Mutex<State>,
    bus: EventBus,
    clock: Arc<dyn Clock>,
    config: ConsentConfig,
    terminal: Arc<dyn OperatorTerminal>,
}

impl fmt::Debug for Approvals {
    // Codes stay out of logs: only counts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Approvals")
            .field("pending", &state.pending.len())
            .field("grants", &state.grants.len())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What parking a call gives the calls module.
#[derive(Debug)]
pub struct Parked {
    pub approval_id: String,
    /// Unix seconds.
    pub expires_at: u64,
    pub verdict: oneshot::Receiver<Verdict>,
}

/// The minted id: `prefix` + base64url of 16 CSPRNG bytes.
fn mint_id(prefix: &str) -> Result<String, ErrorObject> {
    let bytes = random_bytes::<16>()
        .map_err(|_| ErrorObject::internal("The operating system's random source failed"))?;
    Ok(format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// Six uniformly drawn decimal digits.
fn mint_code() -> Result<[u8; 6], ErrorObject> {
    let mut digits = [0u8; 6];
    let mut filled = 0;
    while filled < digits.len() {
        let bytes = random_bytes::<16>()
            .map_err(|_| ErrorObject::internal("The operating system's random source failed"))?;
        // 250 = 25 × 10: rejecting 250..=255 keeps every digit equally likely.
        for b in bytes {
            if b < 250 && filled < digits.len() {
                digits[filled] = b'0' + b % 10;
                filled += 1;
            }
        }
    }
    Ok(digits)
}

fn unknown_approval(approval_id: &str) -> ErrorObject {
    ErrorObject::application(
        ErrorType::InvalidRequest,
        format!(
            "No pending approval {approval_id} (it was decided, expired or cancelled, or never existed)"
        ),
    )
    .with_details(json!({"reason": "unknown_approval", "approvalId": approval_id}))
}

fn refused(approval_id: &str, reason: &str, message: String) -> ErrorObject {
    ErrorObject::application(ErrorType::ApprovalRefused, message)
        .with_details(json!({"reason": reason, "approvalId": approval_id}))
}

/// The deciding connection: its `daemon.hello` client name and peer pid.
pub fn decider(conn: &Connection) -> Decider {
    Decider::new(conn.client_name(), conn.peer_pid())
}

impl Approvals {
    pub fn new(
        bus: EventBus,
        clock: Arc<dyn Clock>,
        config: ConsentConfig,
        terminal: Arc<dyn OperatorTerminal>,
    ) -> Self {
        Self {
            state: Mutex::new(State::default()),
            bus,
            clock,
            config,
            terminal,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `consent.fallback` is `"operator"`.
    pub fn operator_fallback(&self) -> bool {
        self.config.fallback == ConsentFallback::Operator
    }

    /// `consent.approvalTimeoutMs`.
    pub fn approval_timeout(&self) -> Duration {
        Duration::from_millis(self.config.approval_timeout_ms)
    }

    /// When the request that creates an approval was read (Unix ms): the wall clock now, less
    /// the time since the daemon read the request line ([`crate::control_server::request_read_at`]);
    /// now when there is no such line.
    fn request_stamp_unix_ms(&self) -> u64 {
        let now = self.clock.now_unix_ms();
        let since = crate::control_server::request_read_at().map_or(0, |at| {
            u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX)
        });
        now.saturating_sub(since)
    }

    fn unix_s_after(&self, wait: Duration) -> u64 {
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        self.clock.now_unix_ms().saturating_add(ms) / 1000
    }

    /// An unexpired grant for `tool` on session `session_id`.
    pub fn grant_for(&self, session_id: &str, tool: &str) -> Option<GrantSummary> {
        let mut state = self.lock();
        state.prune_grants(Instant::now());
        state
            .grants
            .iter()
            .find(|g| g.summary.session_id == session_id && g.summary.tool == tool)
            .map(|g| g.summary.clone())
    }

    /// Parks a call for at most `wait` and emits `approval_pending`.
    #[allow(clippy::too_many_arguments)]
    pub fn park(
        &self,
        call_id: &str,
        session_id: &str,
        alias: &str,
        tool: &str,
        caller: Caller,
        caller_pid: Option<u32>,
        asker: Option<ConnectionId>,
        args_sha256: &str,
        args_preview: String,
        wait: Duration,
    ) -> Result<Parked, ErrorObject> {
        let approval_id = mint_id(APPROVAL_PREFIX)?;
        let created_unix_ms = self.request_stamp_unix_ms();
        let caller_terminal = self
            .terminal
            .locate(caller_pid, TerminalOf::Caller)
            .ok()
            .map(|d| d.rdev);
        let expires_at = self.unix_s_after(wait);
        let (tx, rx) = oneshot::channel();
        let summary = ApprovalSummary::new(
            approval_id.clone(),
            call_id.to_owned(),
            session_id.to_owned(),
            alias.to_owned(),
            tool.to_owned(),
            caller,
            args_sha256.to_owned(),
            format_iso_ms(created_unix_ms),
            expires_at,
            MAX_CODE_ATTEMPTS,
        )
        .with_args_preview(args_preview);
        let mut state = self.lock();
        state.room_for(ApprovalKind::Call, asker)?;
        state.pending.push(Pending {
            summary,
            apply: None,
            expires: Instant::now() + wait,
            tx: Some(tx),
            code: None,
            wrong: 0,
            caller_terminal,
            asker,
            created_unix_ms,
        });
        self.bus.emit(
            Some(session_id),
            Some(alias),
            EventData::ApprovalPending(ApprovalPendingData::new(
                approval_id.clone(),
                call_id,
                tool,
                caller,
                args_sha256,
                expires_at,
            )),
        );
        drop(state);
        tracing::info!(%approval_id, %call_id, %session_id, %tool, "call parked for an operator");
        Ok(Parked {
            approval_id,
            expires_at,
            verdict: rx,
        })
    }

    /// Holds a policy change that loosens policy until an operator approves it (§C11.2):
    /// `method` is the control method, `change` the description the operator sees, `apply`
    /// what approving does. The caller arranges the expiry ([`Approvals::settle`] with
    /// [`Verdict::Expired`] after `wait`). Returns the approval id and its expiry (unix s).
    pub fn park_policy(
        &self,
        method: &str,
        change: &str,
        caller: Caller,
        apply: PolicyApply,
        wait: Duration,
    ) -> Result<(String, u64), ErrorObject> {
        let approval_id = mint_id(APPROVAL_PREFIX)?;
        let created_unix_ms = self.request_stamp_unix_ms();
        let expires_at = self.unix_s_after(wait);
        let preview = escape_hidden(change);
        let summary = ApprovalSummary::new(
            approval_id.clone(),
            String::new(),
            String::new(),
            String::new(),
            method.to_owned(),
            caller,
            String::new(),
            format_iso_ms(created_unix_ms),
            expires_at,
            MAX_CODE_ATTEMPTS,
        )
        .with_args_preview(preview)
        .with_kind(ApprovalKind::Policy);
        let mut state = self.lock();
        state.room_for(ApprovalKind::Policy, None)?;
        state.pending.push(Pending {
            summary,
            apply: Some(apply),
            expires: Instant::now() + wait,
            tx: None,
            code: None,
            wrong: 0,
            // The person who asked for the change approves it from the same terminal.
            caller_terminal: None,
            asker: None,
            created_unix_ms,
        });
        self.bus.emit(
            None,
            None,
            EventData::ApprovalPending(
                ApprovalPendingData::new(approval_id.clone(), "", method, caller, "", expires_at)
                    .with_kind(ApprovalKind::Policy),
            ),
        );
        drop(state);
        tracing::info!(%approval_id, %method, %change, "policy change held for an operator");
        Ok((approval_id, expires_at))
    }

    /// Ends approval `approval_id` with `verdict` unless it already ended: emits
    /// `approval_settled` and wakes the parked call. Returns whether this ended it.
    pub fn settle(&self, approval_id: &str, verdict: Verdict) -> bool {
        self.settle_with_grant(approval_id, verdict, None)
    }

    fn settle_with_grant(
        &self,
        approval_id: &str,
        verdict: Verdict,
        grant_id: Option<String>,
    ) -> bool {
        let mut state = self.lock();
        let Some(at) = state.position(approval_id) else {
            return false;
        };
        let mut pending = state.pending.remove(at);
        let (by, reason) = match &verdict {
            Verdict::Approved { by, .. } => (Some(by.clone()), None),
            Verdict::Denied { by, wrong_code } => (
                Some(by.clone()),
                wrong_code.then(|| "wrong_code".to_owned()),
            ),
            Verdict::Expired | Verdict::Cancelled => (None, None),
        };
        let s = &pending.summary;
        self.bus.emit(
            Some(&s.session_id),
            Some(&s.alias),
            EventData::ApprovalSettled(
                ApprovalSettledData::new(s.approval_id.clone(), s.call_id.clone(), verdict.wire())
                    .with_by(by)
                    .with_reason(reason)
                    .with_grant_id(grant_id),
            ),
        );
        tracing::info!(approval_id = %s.approval_id, call_id = %s.call_id, decision = %verdict.wire(), "approval settled");
        if let Some(tx) = pending.tx.take() {
            let _ = tx.send(verdict);
        }
        true
    }

    /// `approvals.list` (§C8.17).
    pub fn list(&self) -> Vec<ApprovalSummary> {
        self.lock()
            .pending
            .iter()
            .map(|p| {
                let mut s = p.summary.clone();
                s.attempts_left = MAX_CODE_ATTEMPTS.saturating_sub(p.wrong);
                s
            })
            .collect()
    }

    /// `approvals.challenge` (§C8.18).
    pub fn challenge(
        &self,
        conn: &Connection,
        approval_id: &str,
    ) -> Result<ApprovalChallengeResult, ErrorObject> {
        let (kind, tool, alias, preview, caller_terminal, created_unix_ms) = {
            let state = self.lock();
            let at = state
                .position(approval_id)
                .ok_or_else(|| unknown_approval(approval_id))?;
            let p = &state.pending[at];
            (
                p.summary.kind,
                p.summary.tool.clone(),
                p.summary.alias.clone(),
                p.summary.args_preview.clone(),
                p.caller_terminal,
                p.created_unix_ms,
            )
        };
        let no_terminal = |why: String| {
            refused(
                approval_id,
                "no_terminal",
                format!("Approving needs a person at a terminal: {why}"),
            )
            .with_details(json!({
                "reason": "no_terminal",
                "approvalId": approval_id,
                "hint": format!("Run appduct approvals approve {approval_id} in an interactive terminal."),
            }))
        };
        let device = self
            .terminal
            .locate(conn.peer_pid(), TerminalOf::Approver)
            .map_err(no_terminal)?;
        // SECURITY.md §4.18: the parked caller's own terminal, or a terminal opened after the
        // call parked (an agent's `pty.fork()`), is not an operator's.
        if caller_terminal == Some(device.rdev) {
            tracing::warn!(%approval_id, terminal = %device.path, "challenge from the parked caller's own terminal refused");
            return Err(refused(
                approval_id,
                "caller_terminal",
                format!(
                    "{} is the controlling terminal of the caller waiting on {approval_id}: approve it from another terminal",
                    device.path
                ),
            ));
        }
        // Opened after the request was read, or within the margin before it (coarse ctimes).
        let margin = u64::try_from(NEW_TERMINAL_MARGIN.as_millis()).unwrap_or(u64::MAX);
        if device
            .created_unix_ms
            .is_some_and(|t| t.saturating_add(margin) > created_unix_ms)
        {
            tracing::warn!(%approval_id, terminal = %device.path, "challenge from a terminal opened after (or just before) the request refused");
            return Err(refused(
                approval_id,
                "new_terminal",
                format!(
                    "{} was opened after (or less than {margin} ms before) the request of {approval_id}: approve it from a terminal that was already open",
                    device.path
                ),
            ));
        }
        let digits = mint_code()?;
        let shown = format!(
            "{}-{}",
            String::from_utf8_lossy(&digits[..3]),
            String::from_utf8_lossy(&digits[3..])
        );
        let asker = conn.peer_pid().map_or_else(
            || "an unknown process".to_owned(),
            |p| format!("process {p}"),
        );
        // `\r\n`: the terminal may be in raw mode. What the daemon minted, the app's tool
        // name, the alias and the argument preview reach the terminal, with every control,
        // bidi or invisible character escaped (the preview is escaped already).
        let what = match kind {
            ApprovalKind::Policy => format!(
                "\r\nappduct: {asker} asks to approve a policy change by {} ({approval_id}).\r\nappduct: change: {}\r\n",
                escape_hidden(&tool),
                escape_hidden(&preview),
            ),
            ApprovalKind::Call => format!(
                "\r\nappduct: {asker} asks to approve the call of \"{}\" on {} ({approval_id}).\r\nappduct: arguments: {}\r\n",
                escape_hidden(&tool),
                escape_hidden(&alias),
                escape_hidden(&preview),
            ),
        };
        let text = format!(
            "{what}appduct: type this code only if you started that approval yourself: {shown}\r\n"
        );
        self.terminal.write(&device, &text).map_err(no_terminal)?;
        let terminal = device.path;
        let mut state = self.lock();
        let Some(at) = state.position(approval_id) else {
            return Err(unknown_approval(approval_id));
        };
        let pending = &mut state.pending[at];
        let until = (Instant::now() + CODE_TTL).min(pending.expires);
        let until_unix_s = self.unix_s_after(CODE_TTL).min(pending.summary.expires_at);
        pending.code = Some(Code {
            digits,
            until,
            terminal: terminal.clone(),
            conn: conn.id(),
        });
        tracing::info!(%approval_id, %terminal, peer_pid = ?conn.peer_pid(), "approval code written to a terminal");
        Ok(ApprovalChallengeResult::new(
            approval_id,
            terminal,
            until_unix_s,
        ))
    }

    /// `approvals.decide` (§C8.19).
    pub fn decide(
        &self,
        conn: &Connection,
        params: &ApprovalsDecideParams,
    ) -> Result<ApprovalsDecideResult, ErrorObject> {
        let id = params.approval_id.as_str();
        let by = decider(conn);
        if params.decision == ApprovalDecision::Deny {
            if !self.settle(
                id,
                Verdict::Denied {
                    by,
                    wrong_code: false,
                },
            ) {
                return Err(unknown_approval(id));
            }
            return Ok(ApprovalsDecideResult::new(
                id,
                ApprovalVerdict::Denied,
                None,
            ));
        }
        let terminal = if self.config.operator_requires_terminal {
            Some(self.check_code(conn.id(), Peer::of(conn), id, params.code.as_deref(), &by)?)
        } else {
            None
        };
        // A policy change: applied here, after it was settled as approved; a grant is ignored.
        let apply = {
            let mut state = self.lock();
            let at = state.position(id).ok_or_else(|| unknown_approval(id))?;
            state.pending[at].apply.take()
        };
        if let Some(apply) = apply {
            if !self.settle(id, Verdict::Approved { by, terminal }) {
                return Err(unknown_approval(id));
            }
            apply()?;
            return Ok(ApprovalsDecideResult::new(
                id,
                ApprovalVerdict::Approved,
                None,
            ));
        }
        // Approve, with a grant for `scope: "tool"`. The grant is recorded before the call is
        // woken, so a call the caller sends right after this result finds it.
        let grant = match params.grant {
            Some(g) if g.scope == GrantScope::Tool => {
                let summary = {
                    let state = self.lock();
                    let at = state.position(id).ok_or_else(|| unknown_approval(id))?;
                    state.pending[at].summary.clone()
                };
                let minutes = g.minutes();
                let wait = Duration::from_secs(minutes.saturating_mul(60));
                let grant = GrantSummary::new(
                    mint_id(GRANT_PREFIX)?,
                    summary.session_id,
                    summary.alias,
                    summary.tool,
                    id.to_owned(),
                    format_iso_ms(self.clock.now_unix_ms()),
                    self.unix_s_after(wait),
                    by.clone(),
                );
                Some((grant, Instant::now() + wait))
            }
            _ => None,
        };
        let grant_id = grant.as_ref().map(|(g, _)| g.grant_id.clone());
        if let Some((summary, expires)) = &grant {
            let mut state = self.lock();
            if state.position(id).is_none() {
                return Err(unknown_approval(id));
            }
            state.grants.push(Grant {
                summary: summary.clone(),
                expires: *expires,
            });
        }
        if !self.settle_with_grant(id, Verdict::Approved { by, terminal }, grant_id.clone()) {
            if let Some(grant_id) = grant_id {
                self.revoke(&grant_id);
            }
            return Err(unknown_approval(id));
        }
        Ok(ApprovalsDecideResult::new(
            id,
            ApprovalVerdict::Approved,
            grant.map(|(g, _)| g),
        ))
    }

    /// The code check of `approvals.decide`: only on the connection that asked for the code,
    /// constant-time compare, wrong codes counted (a code presented on another connection
    /// counts as one, without being compared), the last one denies the approval. `Ok` is the
    /// terminal the code was written to.
    fn check_code(
        &self,
        conn: ConnectionId,
        peer: Peer,
        id: &str,
        code: Option<&str>,
        by: &Decider,
    ) -> Result<String, ErrorObject> {
        let Some(code) = code else {
            return Err(refused(
                id,
                "code_required",
                format!(
                    "Approving {id} needs the one-time code: run appduct approvals approve {id} in an interactive terminal"
                ),
            ));
        };
        let typed: Vec<u8> = code.bytes().filter(|b| *b != b'-' && *b != b' ').collect();
        let mut state = self.lock();
        let at = state.position(id).ok_or_else(|| unknown_approval(id))?;
        let now = Instant::now();
        if let Some(retry) = state.over_budget(peer, now) {
            tracing::warn!(approval_id = %id, ?peer, "approve attempt refused: the peer spent its budget of refused attempts");
            let retry_s = retry.as_secs().max(1);
            return Err(refused(
                id,
                "too_many_attempts",
                format!(
                    "This process made {MAX_REFUSED_PER_PEER} refused approval attempts in the last {} minutes; try again in {retry_s} s",
                    PEER_ATTEMPT_WINDOW.as_secs() / 60
                ),
            )
            .with_details(json!({"reason": "too_many_attempts", "approvalId": id, "retryAfterS": retry_s})));
        }
        let pending = &mut state.pending[at];
        let Some(expected) = pending.code.as_ref().filter(|c| c.until > Instant::now()) else {
            return Err(refused(
                id,
                "no_challenge",
                format!(
                    "No code is open for {id} (none was requested, or it expired): request a new one with appduct approvals approve {id}"
                ),
            ));
        };
        // A code is bound to the connection that asked for it (§C8.19): another connection
        // presenting one spends an attempt and learns nothing about the code.
        let same_connection = expected.conn == conn;
        if same_connection
            && typed.len() == expected.digits.len()
            && bool::from(typed.ct_eq(&expected.digits))
        {
            let terminal = expected.terminal.clone();
            pending.code = None;
            return Ok(terminal);
        }
        pending.wrong += 1;
        let left = MAX_CODE_ATTEMPTS.saturating_sub(pending.wrong);
        state.spend(peer, now);
        if left > 0 {
            let (reason, message) = if same_connection {
                tracing::warn!(approval_id = %id, attempts_left = left, "wrong approval code");
                (
                    "wrong_code",
                    format!("Wrong code for {id}; {left} attempt(s) left"),
                )
            } else {
                tracing::warn!(approval_id = %id, attempts_left = left, %conn, "approval code presented on a connection that did not ask for it");
                (
                    "other_connection",
                    format!(
                        "The code for {id} was not issued to this connection: approve on the connection that ran approvals.challenge; {left} attempt(s) left"
                    ),
                )
            };
            return Err(refused(id, reason, message)
                .with_details(json!({"reason": reason, "approvalId": id, "attemptsLeft": left})));
        }
        tracing::warn!(approval_id = %id, "last wrong approval code");
        drop(state);
        self.settle(
            id,
            Verdict::Denied {
                by: by.clone(),
                wrong_code: true,
            },
        );
        Err(refused(
            id,
            "too_many_wrong_codes",
            format!("Wrong code for {id}, the {MAX_CODE_ATTEMPTS}rd: the approval is denied"),
        ))
    }

    /// `grants.list` (§C8.20) and `daemon.status.grants`.
    pub fn grants(&self) -> Vec<GrantSummary> {
        let mut state = self.lock();
        state.prune_grants(Instant::now());
        state.grants.iter().map(|g| g.summary.clone()).collect()
    }

    /// `grants.revoke` (§C8.21).
    pub fn revoke(&self, grant_id: &str) -> bool {
        let mut state = self.lock();
        state.prune_grants(Instant::now());
        let before = state.grants.len();
        state.grants.retain(|g| g.summary.grant_id != grant_id);
        let revoked = state.grants.len() != before;
        if revoked {
            tracing::info!(%grant_id, "grant revoked");
        }
        revoked
    }
}
