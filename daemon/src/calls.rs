//! The calls module (§C8.8–§C8.10, §C8.14, §C10.2; 04): `tools.list`, the `tools.call` pipeline,
//! deadlines, progress, cancellation, policy, consent records and the audit trail of every
//! settled call. It is the one execution path for app tools (§C10.1).
//!
//! Every `tools.call` gets an entry in one daemon-wide table from step 2 (its callId reserved)
//! until it settles. The entry is found by callId (`tools.cancel`), by the daemon-minted wire id
//! (the app's `tool_result` / `tool_error` / `tool_call_progress`) and by session (transitions).
//! A call settles exactly once: whoever removes the entry from the table (an app answer, a
//! timer, a transition, shutdown, or the pipeline itself) emits `tool_call_finished`, enqueues
//! the audit record and writes the response (§C10.1). The one exception is a call whose
//! `tool_call` is being written: only the writing task learns whether the frame went out, so
//! the settler hands the removed call to it (see [`Writing`]).
//!
//! Nothing on a request path waits for room in a device queue indefinitely: the `tool_call`
//! write stops on a cancel, on settling and at the effective deadline, and a `tool_cancel` is
//! queued without waiting (§C8.10).
//!
//! Locking: the table lock is never held while calling the [`SessionManager`] (the engine calls
//! the [`CallRouter`] hooks under its own lock), so lock order is engine → table → bus /
//! connection queues. Progress is forwarded under the table lock while the entry exists, and the
//! response is written only after the entry was removed, so no per-call notification can follow
//! the response (§C14). A call is registered before its frame is written, so a transition
//! during the write still fails it.

mod errors;
mod leases;
mod list;
mod results;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use appduct_protocol::canonical::args_sha256;
use appduct_protocol::content::{ContentBlock, summarize};
use appduct_protocol::control::{
    self, ApprovalsListResult, CallProgressSnapshot, CallState, CallSummary, Caller,
    CallsListResult, Consent, ConsentCreateParams, ConsentCreateResult, ControlRequest,
    DeniedReason, EventData, EventKind, GrantSummary, GrantsListResult, GrantsRevokeResult,
    SessionState, Settlement, ToolCallFinishedData, ToolCallProgressData, ToolCallProgressNotify,
    ToolCallProgressParams, ToolCallStartedData, ToolCallStartedNotify, ToolCallStartedParams,
    ToolsCallParams, ToolsCallResult, ToolsCancelParams, ToolsCancelResult, ToolsListParams,
    ToolsListResult, ToolsResultParams, ToolsResultResult,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::frames::{
    DaemonFrame, ToolCall, ToolCallProgress, ToolCancel, ToolResultPart,
};
use appduct_protocol::ids::CALL_ID_PREFIX;
use appduct_protocol::jsonrpc::{ErrorObject, RequestId};
use appduct_protocol::limits;
use appduct_protocol::parts::{PartError, ResultAssembler, ResultBody};
use appduct_protocol::preview::args_preview;
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::approvals::{Approvals, Parked, Verdict};
use crate::arguments::{ArgumentsSwitch, check_arguments_blocking};
use crate::audit::{AuditEntry, AuditWriter, OperatorRecord, TRANSPORT_HTTP};
use crate::clock::Clock;
use crate::consent::ConsentStore;
use crate::control_server::{BoxFuture, Connection, ConnectionId, Reply, Via, respond_off_thread};
use crate::daemon::CallsContext;
use crate::events::EventBus;
use crate::handlers::CallsApi;
use crate::policy::{Permit, PolicyDenial, PolicyEngine};
use crate::rng::fast_random_bytes;
use crate::sessions::{CallFrame, CallRouter, CallsEnded, SendFailure, SessionManager};
use appduct_client::timestamp::format_iso_ms;

pub use leases::{Leases, session_leased};
pub use results::Results;

pub use list::{
    ToolsPage, group_totals, in_group, list_tools, list_tools_within, simple_lowercase,
};

/// How long the daemon waits for the app after sending `tool_cancel` (§C10.6).
pub const CANCEL_GRACE: Duration = Duration::from_millis(limits::CANCEL_GRACE_MS);
/// `tool_cancel.reason` when the issuing control connection closes (§C10.6).
pub const CONNECTION_CLOSED: &str = "connection_closed";
/// A wait for a message: whole seconds, or milliseconds below 1 s.
fn wait_text(wait: Duration) -> String {
    if wait.subsec_millis() == 0 || wait.as_secs() >= 10 {
        format!("{} s", wait.as_secs())
    } else {
        format!("{} ms", wait.as_millis())
    }
}

/// `tool_cancel.reason` when the daemon's deadline fires (§C10.3).
pub const TIMEOUT_REASON: &str = "timeout";
/// `tool_cancel.reason` when a result sent in parts passes a memory bound (§D17.3).
pub const RESULT_TOO_LARGE_REASON: &str = "result_too_large";

/// The effective deadline of §C10.3: the tool's `timeout_ms` clamped to [1000, 600000] (10000
/// when absent), shortened by the caller's `timeoutMs` (clamped the same way) but never
/// lengthened.
pub fn effective_deadline_ms(tool_timeout_ms: Option<u64>, caller_timeout_ms: Option<u64>) -> u64 {
    let clamp = |t: u64| t.clamp(limits::MIN_CALL_TIMEOUT_MS, limits::MAX_CALL_TIMEOUT_MS);
    let tool = tool_timeout_ms.map_or(limits::DEFAULT_CALL_TIMEOUT_MS, clamp);
    caller_timeout_ms.map_or(tool, |caller| clamp(caller).min(tool))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------------------------
// The table of unsettled calls
// ---------------------------------------------------------------------------------------------

/// Where a call is between reservation and settling.
enum Phase {
    /// Steps 2–7: callId reserved, no frame written yet.
    Preparing,
    /// Step 8: the `tool_call` frame is being written by the request's task, which holds the
    /// other (strong) reference.
    Sending(Weak<Writing>),
    /// Steps 9–10: the frame was written; a pending call (§C10).
    Sent,
}

/// How the step-8 write of a `tool_call` ended.
enum Written {
    /// The frame is in the device queue.
    Queued,
    /// A cancel was requested or the call settled; nothing was queued.
    Stopped,
    /// No usable socket, or the frame is too large; nothing was queued.
    Failed(SendFailure),
    /// The queue stayed full for the whole effective deadline; nothing was queued.
    TimedOut,
}

/// What the task writing a call's `tool_call` (step 8) shares with the call's other inputs.
///
/// Whether the frame went out is known only to that task, once its write returns, so a call
/// settled meanwhile (a transition, shutdown) is handed over to it rather than finished by the
/// settler: the task emits `tool_call_started` first exactly when the frame was queued, then
/// finishes the call (§C10.1, §C13.1 ordering).
#[derive(Default)]
struct Writing {
    /// Wakes the write when a cancel was requested or the call was settled meanwhile; the
    /// write then stops without queueing the frame if it has not finished.
    wake: Notify,
    /// The call, removed from the table, and how it settled.
    settled: Mutex<Option<(Call, Outcome)>>,
}

impl Writing {
    fn take_settled(&self) -> Option<(Call, Outcome)> {
        self.settled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// A cancel requested for a call (§C10.6).
#[derive(Debug)]
struct CancelRequest {
    reason: String,
    /// The one `tool_cancel` frame of this call was sent, or is being sent.
    frame_sent: bool,
}

/// The session a call was resolved to (step 3), as it was at call time.
#[derive(Debug, Clone)]
struct Target {
    session_id: String,
    alias: String,
}

struct Call {
    call_id: Arc<str>,
    wire_id: Arc<str>,
    request_id: RequestId,
    conn: Connection,
    name: String,
    caller: Caller,
    args_sha256: String,
    progress: bool,
    t0: Instant,
    /// Unix ms when the request was read (`calls.list` `startedAt`, §C8.40).
    started_at_ms: u64,
    /// Unix seconds (rounded up) when the deadline passes, once the call passed policy
    /// (§C8.40).
    expires_at_s: Option<u64>,
    /// The last progress the app sent (§C8.40).
    last_progress: Option<CallProgressSnapshot>,
    target: Option<Target>,
    /// Set once policy let the call through (step 6).
    consent: Option<Consent>,
    /// The pending approval while the call is parked for an operator (§C11.1).
    parked: Option<String>,
    /// The audit record's `operator` key: set when the call is parked or runs under a grant.
    operator: Option<OperatorRecord>,
    deadline_ms: u64,
    phase: Phase,
    cancel: Option<CancelRequest>,
    /// `tool_call_started` (event and notification) went out.
    started: bool,
    timers: Vec<AbortHandle>,
    /// Wakes the request task once the response is written (or dropped).
    done: Option<oneshot::Sender<()>>,
    /// A result arriving in parts (§D17.2); its bytes are counted in [`Table::buffered`].
    transfer: Option<ResultAssembler>,
    /// `detach: true`: the issuing connection closing does not cancel the call (§C10.10).
    detached: bool,
}

#[derive(Default)]
struct Table {
    next_key: u64,
    calls: HashMap<u64, Call>,
    /// Keyed by the call's own shared callId and wire id (no copy per index, issue #24).
    by_call_id: HashMap<Arc<str>, u64>,
    by_wire_id: HashMap<Arc<str>, u64>,
    /// Control connections whose close hook is registered.
    hooked: HashSet<ConnectionId>,
    shutting_down: bool,
    timers_stopped: bool,
    /// Result bytes buffered per session, across its calls' transfers (§D17.3).
    buffered: HashMap<String, u64>,
    /// The same, all sessions together; shared so it can be read without the table lock.
    buffered_total: Arc<AtomicU64>,
    /// CallIds of calls that left `by_call_id` but whose outcome is not kept yet (review19 M3):
    /// `tools.result` waits on these rather than answering `call_not_retained` (§C8.43). A
    /// count, because a new call may reuse the callId meanwhile.
    settling: HashMap<Arc<str>, u32>,
    /// `tools.result` requests waiting per connection (bounded by
    /// [`limits::MAX_RESULT_WAITS`], review19 L5).
    result_waits: HashMap<ConnectionId, usize>,
    /// The same, all connections together (bounded by [`limits::MAX_RESULT_WAITS_TOTAL`]).
    result_waits_total: usize,
}

/// One waiting `tools.result` of a connection, counted until dropped.
struct ResultWait<'a> {
    inner: &'a Inner,
    conn: ConnectionId,
}

impl Drop for ResultWait<'_> {
    fn drop(&mut self) {
        let mut table = self.inner.table();
        if let Some(n) = table.result_waits.get_mut(&self.conn) {
            *n -= 1;
            if *n == 0 {
                table.result_waits.remove(&self.conn);
            }
            table.result_waits_total -= 1;
        }
    }
}

impl Table {
    /// Step 1 of settling: the entry leaves the table with its wire id and callId, and its
    /// timers stop; a transfer in progress is freed. The callId stays marked settling until
    /// [`Inner::finish`] kept the outcome (or [`Self::unmark`] for a call never kept).
    fn remove(&mut self, key: u64) -> Option<Call> {
        let mut call = self.calls.remove(&key)?;
        self.by_call_id.remove(&call.call_id);
        *self.settling.entry(call.call_id.clone()).or_default() += 1;
        self.by_wire_id.remove(&call.wire_id);
        for timer in &call.timers {
            timer.abort();
        }
        self.free_transfer(&mut call);
        Some(call)
    }

    /// Ends the settling mark [`Self::remove`] put on `call_id`.
    fn unmark(&mut self, call_id: &str) {
        if let Some(n) = self.settling.get_mut(call_id) {
            *n -= 1;
            if *n == 0 {
                self.settling.remove(call_id);
            }
        }
    }

    /// Drops a call's transfer buffer and gives its bytes back to the budgets.
    fn free_transfer(&mut self, call: &mut Call) {
        if let (Some(transfer), Some(target)) = (call.transfer.take(), &call.target) {
            self.release(&target.session_id, transfer.received());
        }
    }

    /// Counts `bytes` of a parsed body in the daemon-wide counter only (§D17.3), unless that
    /// would take it past `max_total`; `false` then, and nothing is counted.
    fn reserve_parsed(&mut self, bytes: u64, max_total: u64) -> bool {
        let total = self.buffered_total.load(Ordering::Relaxed);
        if total.saturating_add(bytes) > max_total {
            return false;
        }
        self.buffered_total.fetch_add(bytes, Ordering::Relaxed);
        true
    }

    /// Gives back what [`Self::reserve_parsed`] counted.
    fn release_parsed(&mut self, bytes: u64) {
        self.buffered_total.fetch_sub(bytes, Ordering::Relaxed);
    }

    fn release(&mut self, session_id: &str, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.buffered_total.fetch_sub(bytes, Ordering::Relaxed);
        if let Some(held) = self.buffered.get_mut(session_id) {
            *held = held.saturating_sub(bytes);
            if *held == 0 {
                self.buffered.remove(session_id);
            }
        }
    }

    /// Step 1 of settling call `key` as `outcome`. Returns the call for the caller to finish,
    /// unless its frame is being written: then it goes to the writing task (see [`Writing`]).
    fn take(&mut self, key: u64, outcome: Outcome) -> Option<(Call, Outcome)> {
        let call = self.remove(key)?;
        let writing = match &call.phase {
            Phase::Sending(writing) => writing.upgrade(),
            Phase::Preparing | Phase::Sent => None,
        };
        match writing {
            Some(writing) => {
                *writing
                    .settled
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some((call, outcome));
                writing.wake.notify_one();
                None
            }
            None => Some((call, outcome)),
        }
    }

    /// The call with wire id `wire_id` on `session_id`; frames from another session never match.
    fn by_wire(&self, session_id: &str, wire_id: &str) -> Option<u64> {
        let key = *self.by_wire_id.get(wire_id)?;
        let call = self.calls.get(&key)?;
        call.target
            .as_ref()
            .is_some_and(|t| t.session_id == session_id)
            .then_some(key)
    }

    fn keys_where(&self, pred: impl Fn(&Call) -> bool) -> Vec<u64> {
        self.calls
            .iter()
            .filter(|(_, c)| pred(c))
            .map(|(k, _)| *k)
            .collect()
    }
}

/// How a call settles.
enum Outcome {
    /// The app's `tool_result` `result` and `content`, verbatim (`result` is `None` only with
    /// content, §D17.1).
    Result {
        result: Option<Value>,
        content: Option<Vec<ContentBlock>>,
    },
    Failed(ErrorObject, Settlement),
}

impl Outcome {
    fn error(e: ErrorObject) -> Self {
        let settlement = Settlement::from_error(e.error_type());
        Self::Failed(e, settlement)
    }
}

#[derive(Debug, Clone, Copy)]
enum TimerKind {
    Deadline,
    CancelGrace,
}

/// What step 2 hands the rest of the pipeline.
struct Reserved {
    key: u64,
    call_id: Arc<str>,
    wire_id: Arc<str>,
    done: oneshot::Receiver<()>,
}

fn lock(m: &Mutex<Table>) -> MutexGuard<'_, Table> {
    // Every section leaves the table consistent; keep serving it after a panic elsewhere.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A fresh wire id: `call_` + base64url of 16 CSPRNG bytes (§D9.5), the bytes from the
/// thread's OS-seeded ChaCha20 generator ([`crate::rng`]), the text put together on the stack
/// and shared by the call's entry, its indexes and the pipeline (one allocation).
fn mint_wire_id() -> Result<Arc<str>, ErrorObject> {
    use base64::Engine as _;
    let bytes = fast_random_bytes::<{ limits::CALL_WIRE_ID_BYTES }>()
        .map_err(|_| ErrorObject::internal("The operating system's random source failed"))?;
    let mut text = [0u8; 64];
    let prefix = CALL_ID_PREFIX.len();
    text[..prefix].copy_from_slice(CALL_ID_PREFIX.as_bytes());
    let written = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode_slice(bytes, &mut text[prefix..])
        .map_err(|_| ErrorObject::internal("A wire id did not fit its buffer"))?;
    let id = std::str::from_utf8(&text[..prefix + written])
        .map_err(|_| ErrorObject::internal("A wire id was not UTF-8"))?;
    Ok(Arc::from(id))
}

// ---------------------------------------------------------------------------------------------
// Test seam
// ---------------------------------------------------------------------------------------------

/// Places in the `tools.call` pipeline where a [`PipelineProbe`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checkpoint {
    /// Step 3 resolved the session; the call does not carry it yet.
    Resolved,
    /// Step 6: policy let the call through.
    PolicyPassed,
    /// Step 8: the `tool_call` frame is in the device queue; the call is not marked sent yet.
    FrameQueued,
    /// Settling: the call left the table (step 1 of §C10.1) but its outcome is not kept for
    /// `tools.result` yet. Runs on the settling task, which may hold the engine lock.
    Settling,
}

/// A test seam: runs synchronously on the request's task at each [`Checkpoint`], with no lock
/// held, so a test can land a transition, a shutdown or a cancel exactly between two steps
/// that otherwise run back to back.
pub trait PipelineProbe: Send + Sync + fmt::Debug {
    fn reached(&self, call_id: &str, at: Checkpoint);

    /// The module stopped its timers (shutdown step 1, or a start that failed after step 6).
    fn timers_stopped(&self) {}

    /// Shutdown step 2 rejected the pending calls; runs once they are settled.
    fn pending_rejected(&self) {}
}

// ---------------------------------------------------------------------------------------------
// The module
// ---------------------------------------------------------------------------------------------

struct Inner {
    sessions: SessionManager,
    bus: EventBus,
    clock: Arc<dyn Clock>,
    policy: PolicyEngine,
    audit: AuditWriter,
    consent: ConsentStore,
    approvals: Arc<Approvals>,
    table: Mutex<Table>,
    probe: Option<Arc<dyn PipelineProbe>>,
    /// `results.maxBytes` and `results.maxBufferedBytes` (§D17.3).
    result_max_bytes: u64,
    result_max_buffered_bytes: u64,
    /// `validation.arguments` in force (§C10.8).
    arguments: ArgumentsSwitch,
    /// Session leases (§C10.9).
    leases: Leases,
    /// Settled outcomes for `tools.result` (§C10.10).
    results: Results,
    this: Weak<Inner>,
}

/// The calls module: the control-plane side ([`CallsApi`]) and the engine side ([`CallRouter`],
/// installed on the session engine by [`Calls::start`]). Cheap to clone.
#[derive(Clone)]
pub struct Calls {
    inner: Arc<Inner>,
}

impl fmt::Debug for Calls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = lock(&self.inner.table);
        f.debug_struct("Calls")
            .field("pending", &table.calls.len())
            .field("shutting_down", &table.shutting_down)
            .field("consent", &self.inner.consent)
            .finish_non_exhaustive()
    }
}

/// The engine keeps its router for its lifetime; a weak reference avoids a cycle through the
/// module's own handle on the engine.
struct Router(Weak<Inner>);

impl CallRouter for Router {
    fn on_call_frame(&self, session_id: &str, frame: CallFrame) {
        if let Some(inner) = self.0.upgrade() {
            inner.on_call_frame(session_id, frame);
        }
    }

    fn on_session_ended_calls(&self, session_id: &str, why: CallsEnded) {
        if let Some(inner) = self.0.upgrade() {
            inner.on_session_ended(session_id, why);
        }
    }
}

impl Calls {
    /// Builds the module from the daemon's parts and installs its router on the engine; `probe`
    /// (tests) runs at each pipeline [`Checkpoint`].
    pub fn start(ctx: &CallsContext, probe: Option<Arc<dyn PipelineProbe>>) -> Self {
        let inner = Arc::new_cyclic(|this| Inner {
            sessions: ctx.sessions.clone(),
            bus: ctx.bus.clone(),
            clock: Arc::clone(&ctx.clock),
            policy: ctx.policy.clone(),
            audit: ctx.audit.clone(),
            consent: ConsentStore::new(),
            approvals: Arc::clone(&ctx.approvals),
            table: Mutex::new(Table::default()),
            probe,
            result_max_bytes: ctx.config.results.max_bytes,
            result_max_buffered_bytes: ctx.config.results.max_buffered_bytes,
            arguments: ctx.arguments.clone(),
            leases: Leases::new(ctx.bus.clone(), Arc::clone(&ctx.clock)),
            results: Results::new(
                usize::try_from(ctx.config.results.retain_count).unwrap_or(usize::MAX),
                ctx.config.results.retain_bytes,
            ),
            this: this.clone(),
        });
        ctx.sessions
            .set_router(Arc::new(Router(Arc::downgrade(&inner))));
        Self { inner }
    }

    /// Result bytes the daemon holds for transfers in progress, all sessions together
    /// (§D17.3): 0 when none is in progress.
    pub fn buffered_result_bytes(&self) -> u64 {
        lock(&self.inner.table)
            .buffered_total
            .load(Ordering::Relaxed)
    }

    /// Unsettled `tools.call` requests.
    pub fn pending(&self) -> usize {
        lock(&self.inner.table).calls.len()
    }

    /// `tools.result` requests waiting, all connections together (tests).
    pub fn result_waits(&self) -> usize {
        lock(&self.inner.table).result_waits_total
    }

    /// Settled outcomes kept for `tools.result` and their bytes (§C10.10).
    pub fn retained_results(&self) -> (usize, u64) {
        self.inner.results.usage()
    }

    /// `tools.result` (§C8.43) as the control method answers it, without a connection: for
    /// tests that ask from a [`PipelineProbe`], where no request can be awaited.
    pub fn tools_result(
        &self,
        params: ToolsResultParams,
    ) -> impl Future<Output = Result<Arc<ToolsResultResult>, ErrorObject>> + Send + 'static {
        let inner = Arc::clone(&self.inner);
        async move { inner.tools_result(None, &params).await }
    }
}

impl CallsApi for Calls {
    fn handle(
        &self,
        conn: &Connection,
        id: RequestId,
        request: ControlRequest,
    ) -> BoxFuture<'static, Reply> {
        // t0 of §C10.1: the request line was parsed just before this.
        let t0 = Instant::now();
        let inner = Arc::clone(&self.inner);
        let conn = conn.clone();
        Box::pin(async move {
            match request {
                ControlRequest::ToolsList(p) => {
                    respond_off_thread(conn, id, move || inner.tools_list(&p)).await
                }
                ControlRequest::ToolsCall(p) => inner.tools_call(conn, id, p, t0).await,
                ControlRequest::ToolsCancel(p) => Reply::from_result(inner.tools_cancel(&p).await),
                ControlRequest::ConsentCreate(p) => Reply::from_result(inner.consent_create(&p)),
                ControlRequest::ConsentTake(p) => Reply::from_result(inner.consent.take(&p.handle)),
                ControlRequest::ApprovalsList(_) => Reply::from_result(Ok::<_, ErrorObject>(
                    ApprovalsListResult::new(inner.approvals.list()),
                )),
                ControlRequest::ApprovalsChallenge(p) => {
                    // Reads `/proc` and writes a terminal: off the runtime thread.
                    let approvals = Arc::clone(&inner.approvals);
                    let asker = conn.clone();
                    let answer = tokio::task::spawn_blocking(move || {
                        approvals.challenge(&asker, &p.approval_id)
                    })
                    .await
                    .unwrap_or_else(|e| Err(ErrorObject::internal(e.to_string())));
                    Reply::from_result(answer)
                }
                ControlRequest::ApprovalsDecide(p) => {
                    // Approving a held policy change writes `config.json`: off the runtime
                    // thread.
                    let approvals = Arc::clone(&inner.approvals);
                    let answer = tokio::task::spawn_blocking(move || approvals.decide(&conn, &p))
                        .await
                        .unwrap_or_else(|e| Err(ErrorObject::internal(e.to_string())));
                    Reply::from_result(answer)
                }
                ControlRequest::CallsList(_) => {
                    Reply::from_result(Ok::<_, ErrorObject>(inner.calls_list()))
                }
                ControlRequest::SessionsLease(p) => Reply::from_result(
                    inner.sessions.resolve(p.selector.as_deref()).and_then(|s| {
                        inner
                            .leases
                            .take(&conn, &s.session_id, &s.alias, p.ttl_ms(), p.steal)
                    }),
                ),
                ControlRequest::SessionsRelease(p) => {
                    Reply::from_result(inner.sessions.resolve(p.selector.as_deref()).map(|s| {
                        control::SessionsReleaseResult::new(
                            &s.session_id,
                            &s.alias,
                            inner.leases.release(&conn, &s.session_id),
                        )
                    }))
                }
                ControlRequest::ToolsResult(p) => {
                    // Written from the kept outcome itself, not a copy (review19 L5).
                    match inner.tools_result(Some(conn.id()), &p).await {
                        Ok(kept) => conn.respond_with(&id, Ok(&*kept)),
                        Err(e) => conn.respond_with::<ToolsResultResult>(&id, Err(&e)),
                    };
                    Reply::AlreadySent
                }
                ControlRequest::GrantsList(_) => Reply::from_result(Ok::<_, ErrorObject>(
                    GrantsListResult::new(inner.approvals.grants()),
                )),
                ControlRequest::GrantsRevoke(p) => Reply::from_result(Ok::<_, ErrorObject>(
                    GrantsRevokeResult::new(inner.approvals.revoke(&p.grant_id)),
                )),
                other => Reply::Err(ErrorObject::internal(format!(
                    "{} is not a calls method",
                    other.method()
                ))),
            }
        })
    }

    fn pending_calls(&self) -> u64 {
        self.pending() as u64
    }

    fn features(&self) -> Vec<&'static str> {
        vec![
            control::features::CALLS_CALL_ID,
            control::features::CALLS_PROGRESS,
            control::features::CONSENT_RECORDS,
            control::features::TOOLS_GROUPS,
            control::features::APPROVALS,
            control::features::SESSIONS_LEASE,
            control::features::CALLS_RESULTS,
        ]
    }

    fn grants(&self) -> Vec<GrantSummary> {
        self.inner.approvals.grants()
    }

    fn annotate_leases(&self, sessions: &mut [control::SessionSummary]) {
        self.inner.leases.annotate(sessions);
    }

    fn stop_timers(&self) {
        {
            let mut table = lock(&self.inner.table);
            table.timers_stopped = true;
            for call in table.calls.values_mut() {
                for timer in call.timers.drain(..) {
                    timer.abort();
                }
            }
        }
        if let Some(probe) = &self.inner.probe {
            probe.timers_stopped();
        }
    }

    fn reject_pending_for_shutdown(&self) {
        let calls: Vec<(Call, Outcome)> = {
            let mut table = lock(&self.inner.table);
            table.shutting_down = true;
            // A call without a session is inside steps 2–3 on its request task, which runs
            // them without yielding; it settles itself (audited) as soon as it attaches the
            // session it resolved, or answers a selector error unaudited.
            //
            // A call whose frame is being written is handed to its request task, which this
            // wakes, and settles there as soon as the write stops.
            let keys = table.keys_where(|c| c.target.is_some());
            keys.into_iter()
                .filter_map(|k| table.take(k, Outcome::error(errors::daemon_shutdown())))
                .collect()
        };
        for (call, outcome) in calls {
            self.inner.finish(call, outcome);
        }
        if let Some(probe) = &self.inner.probe {
            probe.pending_rejected();
        }
    }
}

impl Inner {
    fn table(&self) -> MutexGuard<'_, Table> {
        lock(&self.table)
    }

    fn checkpoint(&self, call_id: &str, at: Checkpoint) {
        if let Some(probe) = &self.probe {
            probe.reached(call_id, at);
        }
    }

    // -- tools.list ---------------------------------------------------------------------------

    /// `tools.list` (§C8.8), also for suspended sessions.
    fn tools_list(&self, params: &ToolsListParams) -> Result<ToolsListResult, ErrorObject> {
        let session = self.sessions.resolve(params.selector.as_deref())?;
        let registry = self.sessions.tools_of(&session.session_id).ok_or_else(|| {
            ErrorObject::application(
                ErrorType::UnknownSession,
                format!(
                    "Session {} is not live (revoked or expired)",
                    session.session_id
                ),
            )
            .with_details(json!({ "sessionId": session.session_id }))
        })?;
        let page = list_tools(&registry, params, |tool| {
            self.policy.evaluate(&session.alias, tool).decision
        });
        Ok(ToolsListResult::new(
            page.tools,
            page.total,
            page.has_more,
            page.offset,
            page.groups,
        ))
    }

    // -- consent records ----------------------------------------------------------------------

    /// `calls.list` (§C8.40): every unsettled call, oldest first (by the order the daemon read
    /// the requests).
    fn calls_list(&self) -> CallsListResult {
        let table = self.table();
        let mut keys: Vec<u64> = table.calls.keys().copied().collect();
        keys.sort_unstable();
        // Bounded (§C8.40): the oldest, and whether more exist.
        let truncated = keys.len() > limits::MAX_CALLS_LISTED;
        keys.truncate(limits::MAX_CALLS_LISTED);
        let calls = keys
            .iter()
            .filter_map(|k| table.calls.get(k))
            .map(|call| {
                let state = if call.cancel.is_some() {
                    CallState::Cancelling
                } else if call.parked.is_some() {
                    CallState::AwaitingApproval
                } else {
                    CallState::Running
                };
                CallSummary::new(
                    call.call_id.to_string(),
                    call.wire_id.to_string(),
                    call.name.clone(),
                    call.caller,
                    state,
                    format_iso_ms(call.started_at_ms),
                    millis(call.t0.elapsed()),
                    call.deadline_ms,
                )
                .with_session_id(call.target.as_ref().map(|t| t.session_id.clone()))
                .with_alias(call.target.as_ref().map(|t| t.alias.clone()))
                .with_expires_at(call.expires_at_s)
                .with_progress(call.last_progress.clone())
                .with_approval_id(call.parked.clone())
            })
            .collect();
        CallsListResult::new(calls).with_truncated(truncated)
    }

    fn consent_create(
        &self,
        params: &ConsentCreateParams,
    ) -> Result<ConsentCreateResult, ErrorObject> {
        self.consent.create(params, self.clock.now_unix_ms(), |id| {
            self.sessions.summary(id).is_some()
        })
    }

    // -- tools.call ---------------------------------------------------------------------------

    /// The pipeline of §C10.1. Step 1 (params) already ran in `ControlRequest::parse`. Failures
    /// before step 4 answer directly; everything from step 4 on settles through the table.
    async fn tools_call(
        self: Arc<Self>,
        conn: Connection,
        id: RequestId,
        params: ToolsCallParams,
        t0: Instant,
    ) -> Reply {
        let ToolsCallParams {
            selector,
            name,
            args,
            timeout_ms,
            caller,
            consent,
            call_id,
            progress,
            detach,
            ..
        } = params;
        let args = Value::Object(args);
        let sha = args_sha256(&args);

        // 2. The callId.
        let reserved = match self.reserve(
            &conn,
            &id,
            call_id,
            name.clone(),
            caller.unwrap_or(Caller::Cli),
            sha,
            progress,
            t0,
        ) {
            Ok(r) => r,
            Err(e) => return Reply::Err(e),
        };
        let Reserved {
            key,
            call_id,
            wire_id,
            done,
        } = reserved;
        if detach && let Some(call) = self.table().calls.get_mut(&key) {
            call.detached = true;
        }
        let finished = async move {
            // The sender lives in the entry; it is dropped unsent only if the entry vanished
            // without settling, which the request guard then answers as an internal error.
            let _ = done.await;
            Reply::AlreadySent
        };

        // 3. The session, once; everything below routes by its id.
        let session = match self.sessions.resolve(selector.as_deref()) {
            Ok(s) => s,
            Err(e) => {
                let mut table = self.table();
                if table.remove(key).is_some() {
                    table.unmark(&call_id);
                }
                drop(table);
                return Reply::Err(e.with_call_id(call_id.to_string()));
            }
        };
        self.checkpoint(&call_id, Checkpoint::Resolved);
        let crate::sessions::ResolvedSession {
            session_id,
            alias,
            state,
            suspend_reason,
        } = session;
        // Shutdown step 2 leaves a call without a session to this task (see
        // `reject_pending_for_shutdown`), so a call that passed step 3 is always audited.
        let shut_down = {
            let mut table = self.table();
            let shutting_down = table.shutting_down;
            match table.calls.get_mut(&key) {
                Some(call) => {
                    call.target = Some(Target {
                        session_id: session_id.clone(),
                        alias: alias.clone(),
                    });
                    if shutting_down {
                        table.remove(key)
                    } else {
                        None
                    }
                }
                None => None,
            }
        };
        if let Some(call) = shut_down {
            self.finish(call, Outcome::error(errors::daemon_shutdown()));
            return finished.await;
        }

        // 4. Active only; a suspended session fails at once.
        if state == SessionState::Suspended {
            let reason = suspend_reason.unwrap_or(control::SuspendReason::ConnectionLost);
            self.settle(key, |_| {
                Some(Outcome::error(errors::session_suspended(
                    &session_id,
                    &alias,
                    reason,
                )))
            });
            return finished.await;
        }

        // 4a. The session's lease, if another connection holds it (§C10.9).
        if let Err(e) = self.leases.check(conn.id(), &session_id) {
            self.settle(key, |_| Some(Outcome::error(e)));
            return finished.await;
        }

        // 5. The registry as it is now.
        let Some(tool) = self.sessions.tool_of(&session_id, &name) else {
            self.settle(key, |_| {
                Some(Outcome::error(errors::tool_not_found(
                    &name,
                    &session_id,
                    &alias,
                )))
            });
            return finished.await;
        };

        // 5a. The arguments against the tool's input schema, with `validation.arguments:
        //     "enforce"` (§C10.8); a refusal never reaches the app or an operator.
        //     Compile and check run on a blocking thread behind a few slots. The wait for a
        //     slot and the check together are bounded by the call's effective deadline: a
        //     schema whose check never ends (exponential `$ref` fan-out) must not leave the
        //     callers of every checked tool waiting for ever.
        let args = if self.arguments.enforcing() {
            let limit_ms = effective_deadline_ms(tool.timeout_ms, timeout_ms);
            match tokio::time::timeout(
                Duration::from_millis(limit_ms),
                check_arguments_blocking(Arc::clone(&tool), args),
            )
            .await
            {
                Ok((args, Ok(()))) => args,
                Ok((_, Err(e))) => {
                    self.settle(key, |_| Some(Outcome::error(e)));
                    return finished.await;
                }
                Err(_elapsed) => {
                    tracing::warn!(
                        tool = %name,
                        alias = %alias,
                        "the argument check of a call to {name:?} did not end within its {limit_ms} ms deadline; the call is refused tool_timeout"
                    );
                    let e = errors::tool_timeout(&name, &alias, limit_ms)
                        .with_details(json!({ "deadlineMs": limit_ms, "stage": "argument_check" }));
                    self.settle(key, |_| Some(Outcome::error(e)));
                    return finished.await;
                }
            }
        } else {
            args
        };

        // 6. Policy; with `consent.fallback: "operator"` an unconsented `prompt` waits here for
        //    an operator or passes under a grant (§C11.1).
        let full_deadline_ms = effective_deadline_ms(tool.timeout_ms, timeout_ms);
        let (permit, deadline_ms) = match self.policy.check(&alias, &tool, consent) {
            Ok(permit) => (permit, full_deadline_ms),
            Err(denial)
                if denial.reason == DeniedReason::NoConsentChannel
                    && self.approvals.operator_fallback() =>
            {
                let target = Target {
                    session_id: session_id.clone(),
                    alias: alias.clone(),
                };
                match self
                    .operator_gate(
                        key,
                        &call_id,
                        &target,
                        &name,
                        &args,
                        &denial,
                        full_deadline_ms,
                    )
                    .await
                {
                    // Policy may have changed to `deny` while the call was parked: the
                    // approval does not outrank it.
                    Some(_)
                        if let Err(denial) = self.policy.check(&alias, &tool, consent)
                            && denial.reason == DeniedReason::Policy =>
                    {
                        self.settle(key, |_| {
                            Some(Outcome::Failed(denial.to_error(), denial.settlement()))
                        });
                        return finished.await;
                    }
                    // Nor a lease another connection took while the call was parked (step 4a
                    // again, review19 L3).
                    Some(_) if let Err(e) = self.leases.check(conn.id(), &session_id) => {
                        self.settle(key, |_| Some(Outcome::error(e)));
                        return finished.await;
                    }
                    Some(remaining_ms) => (
                        Permit {
                            consent: Some(Consent::Operator),
                        },
                        remaining_ms,
                    ),
                    None => return finished.await,
                }
            }
            Err(denial) => {
                self.settle(key, |_| {
                    Some(Outcome::Failed(denial.to_error(), denial.settlement()))
                });
                return finished.await;
            }
        };
        // 7. The deadline (for a parked call, what is left of it). Both are on the call from
        //    here, so whoever settles it next (a transition, shutdown) audits the consent and
        //    reports the deadline.
        if let Some(call) = self.table().calls.get_mut(&key) {
            call.consent = permit.consent;
            call.deadline_ms = deadline_ms;
            let at_ms = self.clock.now_unix_ms().saturating_add(deadline_ms);
            call.expires_at_s = Some(at_ms.div_ceil(1000));
        }
        self.checkpoint(&call_id, Checkpoint::PolicyPassed);

        // 8. Register as sending (unless settled, cancelled or shutting down meanwhile), then
        //    write.
        let registered = {
            let mut table = self.table();
            let shutting_down = table.shutting_down;
            match table.calls.get_mut(&key) {
                // Settled meanwhile (a transition or shutdown): nothing is sent.
                None => Err(None),
                Some(call) => {
                    let stop = if shutting_down {
                        Some(Outcome::error(errors::daemon_shutdown()))
                    } else {
                        call.cancel.as_ref().map(|cancel| {
                            Outcome::error(errors::cancelled_by_daemon(
                                &name,
                                &alias,
                                &cancel.reason,
                            ))
                        })
                    };
                    match stop {
                        None => {
                            let writing = Arc::new(Writing::default());
                            call.phase = Phase::Sending(Arc::downgrade(&writing));
                            Ok(writing)
                        }
                        Some(outcome) => Err(table.remove(key).map(|call| (call, outcome))),
                    }
                }
            }
        };
        let writing = match registered {
            Ok(writing) => writing,
            Err(settled) => {
                if let Some((call, outcome)) = settled {
                    self.finish(call, outcome);
                }
                return finished.await;
            }
        };
        let Value::Object(args) = args else {
            self.settle(key, |_| {
                Some(Outcome::error(ErrorObject::internal(
                    "The arguments stopped being an object",
                )))
            });
            return finished.await;
        };
        // The frame borrows nothing: it takes the session id and gives it back after the write
        // (one copy less per call, issue #24).
        let frame =
            DaemonFrame::ToolCall(ToolCall::new(session_id, wire_id.to_string(), name, args));
        let session_id = frame.session_id();
        // A full device queue makes the write wait; a cancel, the issuing connection closing
        // or the call settling meanwhile stops it. `mpsc` sends are cancel-safe: a write
        // dropped before it finished queued nothing, so no frame reaches the app (§C10.6).
        // An app that reads nothing for the whole effective deadline gets no frame either:
        // the caller hears `session_not_active` well before its watchdog (§C10.3).
        // One timer per call: it bounds the write, then (reset) the wait for the answer.
        let give_up = tokio::time::sleep(Duration::from_millis(deadline_ms));
        tokio::pin!(give_up);
        let written = {
            let write = self.sessions.send_to_session(session_id, &frame);
            tokio::pin!(write);
            loop {
                tokio::select! {
                    biased;
                    () = writing.wake.notified() => {
                        if self.write_must_stop(key) {
                            break Written::Stopped;
                        }
                    }
                    written = &mut write => break match written {
                        Ok(()) => Written::Queued,
                        Err(failure) => Written::Failed(failure),
                    },
                    () = &mut give_up => break Written::TimedOut,
                }
            }
        };
        match &written {
            Written::Queued => self.checkpoint(&call_id, Checkpoint::FrameQueued),
            Written::Failed(failure) => {
                tracing::debug!(%call_id, %session_id, "tool_call not sent: {failure}");
            }
            Written::TimedOut => {
                tracing::debug!(%call_id, %session_id, "tool_call not sent: the app read nothing within {deadline_ms} ms");
            }
            Written::Stopped => {}
        }
        // The frame owns the arguments (up to 256 KiB); the call may wait up to 600 s more:
        // they are dropped here, the session id taken back.
        let session_id = match frame {
            DaemonFrame::ToolCall(ToolCall { session_id, .. }) => session_id,
            other => other.session_id().to_owned(),
        };
        let target = Target { session_id, alias };
        let armed = self.after_write(key, &target, &writing, written).await;

        // 10–11. Wait for the settling input; the settler writes the response. The deadline
        //    runs on this task, which lives until the call settles: no timer task per call.
        tokio::pin!(finished);
        if armed {
            give_up
                .as_mut()
                .reset(tokio::time::Instant::now() + Duration::from_millis(deadline_ms));
            tokio::select! {
                reply = &mut finished => return reply,
                () = &mut give_up => self.on_timer(key, TimerKind::Deadline),
            }
        }
        finished.await
    }

    /// Step 6 under `consent.fallback: "operator"` (§C11.1): a grant lets the call through at
    /// once; otherwise it is parked until an operator decides, `consent.approvalTimeoutMs`
    /// passes, or it is cancelled. The wait does not spend the call's deadline: `Some` is the
    /// whole deadline, which starts when the call is released to the app; `None` means the
    /// call was settled (or is being settled by someone else).
    #[allow(clippy::too_many_arguments)]
    async fn operator_gate(
        &self,
        key: u64,
        call_id: &str,
        target: &Target,
        name: &str,
        args: &Value,
        denial: &PolicyDenial,
        deadline_ms: u64,
    ) -> Option<u64> {
        if let Some(grant) = self.approvals.grant_for(&target.session_id, name) {
            let call = &mut self.table();
            let call = call.calls.get_mut(&key)?;
            call.operator = Some(OperatorRecord {
                approval_id: None,
                grant_id: Some(grant.grant_id),
                decision: "granted",
                by: Some(grant.by),
                reason: None,
                terminal: None,
            });
            return Some(deadline_ms);
        }
        // The operator gets the whole approval timeout whatever the tool's deadline (§C11.1).
        let wait = self.approvals.approval_timeout();
        let (caller, caller_pid, asker, sha) = {
            let table = self.table();
            let call = table.calls.get(&key)?;
            (
                call.caller,
                call.conn.peer_pid(),
                call.conn.id(),
                call.args_sha256.clone(),
            )
        };
        let Parked {
            approval_id,
            expires_at,
            verdict,
        } = match self.approvals.park(
            call_id,
            &target.session_id,
            &target.alias,
            name,
            caller,
            caller_pid,
            Some(asker),
            &sha,
            args.as_object().map(args_preview).unwrap_or_default(),
            wait,
        ) {
            Ok(parked) => parked,
            Err(e) => {
                self.settle(key, |_| Some(Outcome::error(e)));
                return None;
            }
        };
        // Attach the approval to the call, unless the call settled or was cancelled meanwhile.
        let attached = {
            let mut table = self.table();
            match table.calls.get_mut(&key) {
                Some(call) if call.cancel.is_none() => {
                    call.parked = Some(approval_id.clone());
                    // What a transition or a cancel leaves in the audit record.
                    call.operator = Some(OperatorRecord {
                        approval_id: Some(approval_id.clone()),
                        grant_id: None,
                        decision: "cancelled",
                        by: None,
                        reason: None,
                        terminal: None,
                    });
                    if call.progress {
                        let message = format!(
                            "Waiting for an operator: run `appduct approvals approve {approval_id}` in a terminal (expires in {})",
                            wait_text(wait)
                        );
                        call.conn.notify::<ToolCallProgressNotify>(
                            &ToolCallProgressParams::new(
                                call.request_id.clone(),
                                call.call_id.to_string(),
                                target.session_id.clone(),
                                self.clock.now_unix_ms(),
                            )
                            .with_message(Some(message))
                            .with_approval_id(Some(approval_id.clone()))
                            .with_expires_at(Some(expires_at)),
                        );
                    }
                    true
                }
                _ => false,
            }
        };
        tracing::debug!(%call_id, %approval_id, expires_at, "call parked");
        let verdict = if attached {
            tokio::pin!(verdict);
            tokio::select! {
                v = &mut verdict => v.unwrap_or(Verdict::Cancelled),
                () = tokio::time::sleep(wait) => {
                    if self.approvals.settle(&approval_id, Verdict::Expired) {
                        Verdict::Expired
                    } else {
                        // Decided at the same moment: the verdict is already sent.
                        verdict.await.unwrap_or(Verdict::Cancelled)
                    }
                }
            }
        } else {
            self.approvals.settle(&approval_id, Verdict::Cancelled);
            Verdict::Cancelled
        };
        let record = |decision: &'static str, by, reason| OperatorRecord {
            approval_id: Some(approval_id.clone()),
            grant_id: None,
            decision,
            by,
            reason,
            terminal: None,
        };
        let operator_denial = |reason: DeniedReason, message: String| {
            let mut denial = denial.clone();
            denial.reason = reason;
            let mut details = denial.details();
            details["approvalId"] = json!(approval_id);
            Outcome::Failed(
                ErrorObject::application(ErrorType::PolicyDenied, message).with_details(details),
                Settlement::Denied(reason),
            )
        };
        let quoted = Value::String(name.to_owned());
        match verdict {
            Verdict::Approved { by, terminal } => {
                let mut table = self.table();
                let call = table.calls.get_mut(&key)?;
                call.parked = None;
                call.operator = Some(OperatorRecord {
                    terminal,
                    ..record("approved", Some(by), None)
                });
                Some(deadline_ms)
            }
            Verdict::Denied { by, wrong_code } => {
                let outcome = operator_denial(
                    DeniedReason::OperatorDenied,
                    format!(
                        "An operator denied {quoted} on {} ({approval_id})",
                        target.alias
                    ),
                );
                self.settle(key, |call| {
                    call.parked = None;
                    call.operator = Some(record(
                        "denied",
                        Some(by),
                        wrong_code.then_some("wrong_code"),
                    ));
                    Some(outcome)
                });
                None
            }
            Verdict::Expired => {
                let outcome = operator_denial(
                    DeniedReason::ApprovalExpired,
                    format!(
                        "No operator approved {quoted} on {} within {} ({approval_id})",
                        target.alias,
                        wait_text(wait)
                    ),
                );
                self.settle(key, |call| {
                    call.parked = None;
                    call.operator = Some(record("expired", None, None));
                    Some(outcome)
                });
                None
            }
            Verdict::Cancelled => {
                // A cancel request, or a transition or shutdown that already settled the call.
                self.settle(key, |call| {
                    call.parked = None;
                    let reason = call
                        .cancel
                        .as_ref()
                        .map_or(control::DEFAULT_CANCEL_REASON, |c| c.reason.as_str());
                    Some(Outcome::error(errors::cancelled_by_daemon(
                        &call.name,
                        &target.alias,
                        reason,
                    )))
                });
                None
            }
        }
    }

    /// Whether the step-8 write of call `key` must stop: the call settled or a cancel was
    /// requested.
    fn write_must_stop(&self, key: u64) -> bool {
        self.table()
            .calls
            .get(&key)
            .is_none_or(|call| call.cancel.is_some())
    }

    /// After the step-8 write of call `key` to `target` ended. A call settled during the write
    /// was handed over here (see [`Writing`]) and is finished, announced first if its frame
    /// went out. Otherwise a written frame makes it pending (step 9), and an unsent one
    /// settles it: cancelled, too large, or no usable socket. Returns whether the caller must
    /// now run the call's deadline.
    async fn after_write(
        &self,
        key: u64,
        target: &Target,
        writing: &Writing,
        written: Written,
    ) -> bool {
        let (cancel, armed) = self.after_write_locked(key, target, writing, written);
        if let Some(frame) = cancel {
            self.send_cancel(key, frame).await;
        }
        armed
    }

    /// [`after_write`](Self::after_write) up to the cancel a written call still has to get.
    fn after_write_locked(
        &self,
        key: u64,
        target: &Target,
        writing: &Writing,
        written: Written,
    ) -> (Option<DaemonFrame>, bool) {
        let queued = matches!(written, Written::Queued);
        let mut table = self.table();
        // Calls are handed over under the table lock; once this finds none, the phase changes
        // below (still under it), so none can be any more.
        if let Some((mut call, outcome)) = writing.take_settled() {
            drop(table);
            if queued {
                self.announce_start(&mut call);
            }
            self.finish(call, outcome);
            return (None, false);
        }
        let timers_stopped = table.timers_stopped;
        let Some(call) = table.calls.get_mut(&key) else {
            return (None, false);
        };
        let error = match written {
            Written::Queued => {
                // 9. The deadline, `tool_call_started`, and a cancel requested meanwhile.
                call.phase = Phase::Sent;
                self.announce_start(call);
                let cancel = match &mut call.cancel {
                    Some(cancel) if !cancel.frame_sent => {
                        cancel.frame_sent = true;
                        Some(cancel_frame(target, &call.wire_id, &cancel.reason))
                    }
                    _ => None,
                };
                return (cancel, !timers_stopped);
            }
            Written::Stopped => {
                let reason = call
                    .cancel
                    .as_ref()
                    .map_or(control::DEFAULT_CANCEL_REASON, |c| c.reason.as_str());
                errors::cancelled_by_daemon(&call.name, &target.alias, reason)
            }
            Written::Failed(SendFailure::TooLarge(too_large)) => {
                errors::frame_too_large(too_large.bytes)
            }
            Written::Failed(_) | Written::TimedOut => {
                errors::session_not_active(&target.session_id, &target.alias)
            }
        };
        let call = table.remove(key);
        drop(table);
        if let Some(call) = call {
            self.finish(call, Outcome::error(error));
        }
        (None, false)
    }

    /// Step 2: reserves the caller's callId (or mints one) and a fresh wire id, and registers
    /// the connection's close hook the first time it issues a call.
    #[allow(clippy::too_many_arguments)]
    fn reserve(
        &self,
        conn: &Connection,
        request_id: &RequestId,
        call_id: Option<String>,
        name: String,
        caller: Caller,
        args_sha256: String,
        progress: bool,
        t0: Instant,
    ) -> Result<Reserved, ErrorObject> {
        let (tx, rx) = oneshot::channel();
        let mut table = self.table();
        if table.shutting_down {
            return Err(errors::daemon_shutdown());
        }
        if let Some(id) = &call_id
            && table.by_call_id.contains_key(id.as_str())
        {
            return Err(errors::call_id_in_use(id));
        }
        // Re-rolled in the unlikely case it collides with an unsettled wire id or callId.
        let wire_id = loop {
            let minted = mint_wire_id()?;
            if !table.by_wire_id.contains_key(&minted) && !table.by_call_id.contains_key(&minted) {
                break minted;
            }
        };
        let call_id: Arc<str> = call_id.map_or_else(|| Arc::clone(&wire_id), Arc::from);
        let key = table.next_key;
        table.next_key += 1;
        table.by_call_id.insert(Arc::clone(&call_id), key);
        table.by_wire_id.insert(Arc::clone(&wire_id), key);
        table.calls.insert(
            key,
            Call {
                call_id: Arc::clone(&call_id),
                wire_id: Arc::clone(&wire_id),
                request_id: request_id.clone(),
                conn: conn.clone(),
                name,
                caller,
                args_sha256,
                progress,
                t0,
                started_at_ms: self.clock.now_unix_ms(),
                expires_at_s: None,
                last_progress: None,
                detached: false,
                target: None,
                consent: None,
                parked: None,
                operator: None,
                deadline_ms: 0,
                phase: Phase::Preparing,
                cancel: None,
                started: false,
                timers: Vec::new(),
                done: Some(tx),
                transfer: None,
            },
        );
        let hook = table.hooked.insert(conn.id());
        drop(table);
        if hook {
            self.hook_connection(conn);
        }
        Ok(Reserved {
            key,
            call_id,
            wire_id,
            done: rx,
        })
    }

    /// `tool_call_started`: the bus event and, with `progress: true`, the per-call notification.
    /// Exactly once, before any progress; runs under the table lock.
    fn announce_start(&self, call: &mut Call) {
        if call.started || call.target.is_none() {
            return;
        }
        call.started = true;
        let Some(target) = &call.target else {
            return;
        };
        self.bus.emit_lazy(
            &target.session_id,
            &target.alias,
            EventKind::ToolCallStarted,
            &StartedLine {
                name: &call.name,
                call_id: &call.call_id,
                wire_id: &call.wire_id,
                caller: call.caller,
                deadline_ms: call.deadline_ms,
            },
            || {
                EventData::ToolCallStarted(ToolCallStartedData::new(
                    call.name.clone(),
                    call.call_id.to_string(),
                    call.wire_id.to_string(),
                    call.caller,
                    call.deadline_ms,
                ))
            },
        );
        if call.progress {
            call.conn
                .notify::<ToolCallStartedNotify>(&ToolCallStartedParams::new(
                    call.request_id.clone(),
                    call.call_id.to_string(),
                    target.session_id.clone(),
                    target.alias.clone(),
                    call.name.clone(),
                    call.deadline_ms,
                    self.clock.now_unix_ms(),
                ));
        }
    }

    fn spawn_timer(&self, key: u64, after: Duration, kind: TimerKind) -> AbortHandle {
        let weak = self.this.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            if let Some(inner) = weak.upgrade() {
                inner.on_timer(key, kind);
            }
        })
        .abort_handle()
    }

    /// A deadline or cancel grace fired. Runs on the timer's own task, which settling aborts,
    /// so it never awaits: the timeout's `tool_cancel` goes out on a new task.
    fn on_timer(&self, key: u64, kind: TimerKind) {
        let mut timed_out = None;
        self.settle_while_timers_run(key, |call| {
            let alias = call.target.as_ref().map_or("", |t| t.alias.as_str());
            Some(match (&call.cancel, kind) {
                // After a cancel request, the grace or the deadline ends the call as cancelled.
                (Some(cancel), _) => Outcome::error(errors::cancelled_by_daemon(
                    &call.name,
                    alias,
                    &cancel.reason,
                )),
                (None, TimerKind::Deadline) => {
                    timed_out = call
                        .target
                        .as_ref()
                        .map(|t| cancel_frame(t, &call.wire_id, TIMEOUT_REASON));
                    Outcome::error(errors::tool_timeout(&call.name, alias, call.deadline_ms))
                }
                // A grace timer only exists after a cancel request.
                (None, TimerKind::CancelGrace) => return None,
            })
        });
        if let Some(frame) = timed_out {
            // The call is settled: the app's answer to this cancel is dropped (§D7.5).
            let sessions = self.sessions.clone();
            tokio::spawn(async move {
                let session_id = frame.session_id().to_owned();
                if let Err(e) = sessions.send_to_session(&session_id, &frame).await {
                    tracing::debug!(%session_id, "tool_cancel (timeout) not sent: {e}");
                }
            });
        }
    }

    // -- settling -----------------------------------------------------------------------------

    /// Settles call `key` if `decide` returns an outcome, deciding and removing under one lock
    /// so no other input can slip in between. Returns whether this call settled it.
    fn settle(&self, key: u64, decide: impl FnOnce(&mut Call) -> Option<Outcome>) -> bool {
        self.settle_unless(key, false, decide)
    }

    /// [`settle`](Self::settle) for a timer: nothing once shutdown stopped the timers (it
    /// settles every call itself).
    fn settle_while_timers_run(
        &self,
        key: u64,
        decide: impl FnOnce(&mut Call) -> Option<Outcome>,
    ) -> bool {
        self.settle_unless(key, true, decide)
    }

    fn settle_unless(
        &self,
        key: u64,
        timers_only: bool,
        decide: impl FnOnce(&mut Call) -> Option<Outcome>,
    ) -> bool {
        let taken = {
            let mut table = self.table();
            if timers_only && table.timers_stopped {
                return false;
            }
            let outcome = match table.calls.get_mut(&key) {
                Some(call) => decide(call),
                None => None,
            };
            match outcome {
                Some(outcome) => table.take(key, outcome),
                None => None,
            }
        };
        match taken {
            Some((call, outcome)) => {
                self.finish(call, outcome);
                true
            }
            None => false,
        }
    }

    /// Steps 2–4 of §C10.1 for a call already removed from the table (step 1): the
    /// `tool_call_finished` event and the audit record when a session was resolved, then the
    /// response if the issuing connection is still open.
    fn finish(&self, mut call: Call, outcome: Outcome) {
        self.checkpoint(&call.call_id, Checkpoint::Settling);
        // A parked call settled by a transition or shutdown: its approval ends too.
        if let Some(approval_id) = call.parked.take() {
            self.approvals.settle(&approval_id, Verdict::Cancelled);
        }
        let duration_ms = millis(call.t0.elapsed());
        let (settlement, content_summary) = match &outcome {
            Outcome::Result { content, .. } => (Settlement::Ok, content.as_deref().map(summarize)),
            Outcome::Failed(_, settlement) => (*settlement, None),
        };
        if let Some(target) = &call.target {
            let (outcome_field, error_type, denied_reason) = settlement.fields();
            self.bus.emit_lazy(
                &target.session_id,
                &target.alias,
                EventKind::ToolCallFinished,
                &FinishedLine {
                    name: &call.name,
                    call_id: &call.call_id,
                    caller: call.caller,
                    duration_ms,
                    outcome: outcome_field,
                    error_type,
                    denied_reason,
                    content_summary: content_summary.as_deref(),
                },
                || {
                    EventData::ToolCallFinished(
                        ToolCallFinishedData::new(
                            call.name.clone(),
                            call.call_id.to_string(),
                            call.caller,
                            duration_ms,
                            settlement,
                        )
                        .with_content_summary(content_summary.clone()),
                    )
                },
            );
            self.audit.enqueue_entry(&AuditEntry {
                ts_unix_ms: self.clock.now_unix_ms(),
                call_id: &call.call_id,
                session_id: &target.session_id,
                alias: &target.alias,
                tool: &call.name,
                args_sha256: &call.args_sha256,
                settlement,
                duration_ms,
                caller: call.caller,
                transport: match call.conn.via() {
                    Via::Http => Some(TRANSPORT_HTTP),
                    Via::Local => None,
                },
                consent: call.consent,
                operator: call.operator.as_ref(),
                content_summary: content_summary.as_deref(),
            });
        }
        tracing::debug!(
            call_id = %call.call_id,
            wire_id = %call.wire_id,
            tool = %call.name,
            duration_ms,
            ?settlement,
            "call settled"
        );
        // The call ends here: the response gets a copy of the callId, the kept outcome the
        // shared one for its index (issue #24).
        let call_id = call.call_id.to_string();
        let kept_id = Arc::clone(&call.call_id);
        let response = match (outcome, call.target.take()) {
            (Outcome::Result { result, content }, Some(target)) => Ok(ToolsCallResult::new(
                result,
                call_id,
                target.session_id,
                target.alias,
                duration_ms,
            )
            .with_content(content)),
            (Outcome::Result { .. }, None) => Err(ErrorObject::internal(
                "A call without a session produced a result",
            )
            .with_call_id(call_id)),
            (Outcome::Failed(error, _), _) => Err(error.with_call_id(call_id)),
        };
        // The outcome is kept for `tools.result` (§C10.10) whether or not anyone still waits
        // for it, and the response is written from the kept copy. A closed connection drops
        // the response (§C10.1 step 4).
        let kept = self
            .results
            .keep(kept_id, response, self.clock.now_unix_ms());
        // Kept: `tools.result` finds it now, so the settling mark can go.
        self.table().unmark(&kept.call_id);
        let unreachable;
        let response = match (&kept.response, &kept.error) {
            (Some(result), _) => Ok(result),
            (None, Some(error)) => Err(error),
            (None, None) => {
                unreachable = ErrorObject::internal("A settled outcome without a result")
                    .with_call_id(kept.call_id.clone());
                Err(&unreachable)
            }
        };
        call.conn.respond_with(&call.request_id, response);
        if let Some(done) = call.done.take() {
            let _ = done.send(());
        }
    }

    // -- app frames and transitions (engine lock held) ---------------------------------------

    fn on_call_frame(&self, session_id: &str, frame: CallFrame) {
        match frame {
            CallFrame::Progress(progress) => self.forward_progress(session_id, &progress),
            CallFrame::Result(result) => {
                let outcome = Outcome::Result {
                    result: result.result,
                    content: result.content,
                };
                self.settle_by_wire(session_id, &result.id, outcome);
            }
            CallFrame::Part(part) => self.on_part(session_id, part),
            CallFrame::Error(error) => {
                let body = error.error;
                let outcome = Outcome::error(ErrorObject::app_tool_error(
                    body.error_type,
                    body.message,
                    body.details,
                ));
                self.settle_by_wire(session_id, &error.id, outcome);
            }
            CallFrame::Invalid { id, detail, fault } => {
                // The closest type of §C4.3 for an answer the daemon cannot pass on (project
                // decision, issue #20 defect 4): the result was not serialisable within bounds.
                let outcome = answer_failed(&detail, &fault);
                self.settle_by_wire(session_id, &id, outcome);
            }
        }
    }

    /// One `tool_result_part` (§D17.2), under the engine lock like every call frame. Parts for
    /// no call in flight, or for a call being cancelled, are dropped. The part's bytes are
    /// reserved in both budgets before they are kept; the last part's body is checked and
    /// parsed on the blocking pool, its parse reserved daemon-wide first (§D17.3), and the call
    /// settles from there.
    fn on_part(&self, session_id: &str, part: ToolResultPart) {
        let mut table = self.table();
        let Some(key) = table.by_wire(session_id, &part.id) else {
            tracing::debug!(%session_id, wire_id = %part.id, "dropping a result part for no call in flight");
            return;
        };
        let step = self.take_part(&mut table, key, session_id, &part);
        drop(table);
        match step {
            PartStep::More => {}
            PartStep::Failed(fault) => {
                let cancel = matches!(fault, PartError::TooLarge { .. });
                tracing::debug!(%session_id, wire_id = %part.id, reason = fault.reason(), "a result sent in parts failed");
                let mut target = None;
                self.settle(key, |call| {
                    target = call.target.clone();
                    Some(answer_failed(&fault.to_string(), &fault))
                });
                // §D17.3: the app is told to stop sending.
                if cancel && let Some(target) = target {
                    let frame = cancel_frame(&target, &part.id, RESULT_TOO_LARGE_REASON);
                    let sessions = self.sessions.clone();
                    tokio::spawn(async move {
                        let session_id = frame.session_id().to_owned();
                        if let Err(e) = sessions.send_to_session(&session_id, &frame).await {
                            tracing::debug!(%session_id, "tool_cancel (result_too_large) not sent: {e}");
                        }
                    });
                }
            }
            PartStep::Complete(transfer) => {
                let weak = self.this.clone();
                let session_id = session_id.to_owned();
                let wire_id = part.id;
                let held = transfer.received();
                let finish = move || {
                    let Some(inner) = weak.upgrade() else {
                        return;
                    };
                    // §D17.3: the parsed tree is counted too, in the daemon-wide budget, before
                    // it is built; a body whose tree does not fit fails `too_large` unparsed.
                    let parsed = transfer.parsed_estimate();
                    let max = inner.result_max_buffered_bytes;
                    let reserved = inner.table().reserve_parsed(parsed, max);
                    let outcome = if reserved {
                        match transfer.finish() {
                            Ok(ResultBody { result, content }) => {
                                Outcome::Result { result, content }
                            }
                            Err(fault) => answer_failed(&fault.to_string(), &fault),
                        }
                    } else {
                        drop(transfer);
                        tracing::debug!(%session_id, %wire_id, parsed, "a result sent in parts would parse past the buffered-bytes bound");
                        let fault = PartError::TooLarge { max_bytes: max };
                        answer_failed(&fault.to_string(), &fault)
                    };
                    // The reply is built from the outcome here (or, rarely, by the task still
                    // writing the call's frame); only then are the body's and the tree's bytes
                    // given back.
                    inner.settle_by_wire(&session_id, &wire_id, outcome);
                    let mut table = inner.table();
                    table.release(&session_id, held);
                    if reserved {
                        table.release_parsed(parsed);
                    }
                };
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => {
                        runtime.spawn_blocking(finish);
                    }
                    Err(_) => finish(),
                }
            }
        }
    }

    /// Checks and keeps one part of call `key`, table lock held.
    fn take_part(
        &self,
        table: &mut Table,
        key: u64,
        session_id: &str,
        part: &ToolResultPart,
    ) -> PartStep {
        let held = table.buffered.get(session_id).copied().unwrap_or(0);
        let total = table.buffered_total.load(Ordering::Relaxed);
        let Some(call) = table.calls.get_mut(&key) else {
            return PartStep::More;
        };
        if call.cancel.is_some() {
            return PartStep::More;
        }
        // The answer proves the frame reached the app, like any answer.
        self.announce_start(call);
        if call.transfer.is_none() {
            match ResultAssembler::start(part, self.result_max_bytes) {
                Ok(transfer) => call.transfer = Some(transfer),
                Err(fault) => return PartStep::Failed(fault),
            }
        }
        let Some(transfer) = call.transfer.as_mut() else {
            return PartStep::More;
        };
        let checked = match transfer.check(part) {
            Ok(checked) => checked,
            Err(fault) => return PartStep::Failed(fault),
        };
        let n = checked.len() as u64;
        if held + n > self.result_max_bytes {
            return PartStep::Failed(PartError::TooLarge {
                max_bytes: self.result_max_bytes,
            });
        }
        if total + n > self.result_max_buffered_bytes {
            return PartStep::Failed(PartError::TooLarge {
                max_bytes: self.result_max_buffered_bytes,
            });
        }
        let complete = transfer.append(checked);
        let done = if complete { call.transfer.take() } else { None };
        table.buffered_total.fetch_add(n, Ordering::Relaxed);
        *table.buffered.entry(session_id.to_owned()).or_insert(0) += n;
        match done {
            Some(transfer) => PartStep::Complete(transfer),
            None => PartStep::More,
        }
    }

    /// A `tool_result` or `tool_error`; unknown and settled wire ids are dropped silently.
    fn settle_by_wire(&self, session_id: &str, wire_id: &str, outcome: Outcome) {
        let Some(key) = self.table().by_wire(session_id, wire_id) else {
            tracing::debug!(%session_id, %wire_id, "dropping an answer for no call in flight");
            return;
        };
        self.settle(key, |call| {
            // The answer proves the frame reached the app, even if the write has not returned.
            self.announce_start(call);
            Some(outcome)
        });
    }

    /// §C10.5: the bus event and, with `progress: true`, the per-call notification, in the
    /// order the app sent them, while the call is unsettled.
    fn forward_progress(&self, session_id: &str, progress: &ToolCallProgress) {
        let mut table = self.table();
        let Some(key) = table.by_wire(session_id, &progress.id) else {
            return;
        };
        let Some(call) = table.calls.get_mut(&key) else {
            return;
        };
        self.announce_start(call);
        call.last_progress = Some(CallProgressSnapshot::new(
            progress.progress.clone(),
            progress.message.clone(),
        ));
        let Some(target) = &call.target else {
            return;
        };
        self.bus.emit(
            Some(&target.session_id),
            Some(&target.alias),
            EventData::ToolCallProgress(
                ToolCallProgressData::new(call.call_id.to_string())
                    .with_progress(progress.progress.clone())
                    .with_message(progress.message.clone()),
            ),
        );
        if call.progress {
            call.conn.notify::<ToolCallProgressNotify>(
                &ToolCallProgressParams::new(
                    call.request_id.clone(),
                    call.call_id.to_string(),
                    target.session_id.clone(),
                    self.clock.now_unix_ms(),
                )
                .with_progress(progress.progress.clone())
                .with_message(progress.message.clone()),
            );
        }
    }

    /// §D12.4: every call resolved to the session fails; no `tool_cancel` is sent.
    fn on_session_ended(&self, session_id: &str, why: CallsEnded) {
        if matches!(why, CallsEnded::Revoked | CallsEnded::Expired) {
            self.leases.session_ended(session_id);
        }
        let calls: Vec<(Call, Outcome)> = {
            let mut table = self.table();
            let keys = table.keys_where(|c| {
                c.target
                    .as_ref()
                    .is_some_and(|t| t.session_id == session_id)
            });
            keys.into_iter()
                .filter_map(|k| {
                    let alias = table.calls.get(&k)?.target.as_ref()?.alias.clone();
                    let error = errors::session_ended(why, session_id, &alias);
                    table.take(k, Outcome::error(error))
                })
                .collect()
        };
        for (call, outcome) in calls {
            self.finish(call, outcome);
        }
    }

    /// `tools.result` (§C8.43): the kept outcome of a settled call, `running` for a call in
    /// flight or settling (after waiting up to `waitMs` for it to be kept), else
    /// `invalid_request` with `details.reason: "call_not_retained"`. The kept outcome is shared,
    /// not copied (review19 L5).
    async fn tools_result(
        &self,
        conn: Option<ConnectionId>,
        params: &ToolsResultParams,
    ) -> Result<Arc<ToolsResultResult>, ErrorObject> {
        let call_id = params.call_id.as_str();
        let until = Instant::now() + Duration::from_millis(params.wait_ms.unwrap_or(0));
        let mut slot = None;
        loop {
            let settled = self.results.settled();
            tokio::pin!(settled);
            settled.as_mut().enable();
            // A call leaves `by_call_id` before its outcome is kept; it stays marked settling
            // until then, and the kept outcome is looked for first (review19 M3).
            let (running, settling) = {
                let table = self.table();
                (
                    table.by_call_id.contains_key(call_id),
                    table.settling.contains_key(call_id),
                )
            };
            if !running {
                if let Some(kept) = self.results.get(call_id) {
                    return Ok(kept);
                }
                if !settling {
                    return Err(errors::call_not_retained(call_id));
                }
            }
            if Instant::now() >= until {
                return Ok(Arc::new(ToolsResultResult::running(call_id)));
            }
            // About to wait: one of the connection's bounded waits (review19 L5).
            if slot.is_none()
                && let Some(conn) = conn
            {
                slot = Some(self.result_wait(conn)?);
            }
            tokio::select! {
                () = &mut settled => {}
                () = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Counts a waiting `tools.result` of `conn`, unless it has [`limits::MAX_RESULT_WAITS`] or
    /// the daemon has [`limits::MAX_RESULT_WAITS_TOTAL`] (the s10 attack's F3b: 2,000
    /// connections × 256 waits took 2.7 GB).
    fn result_wait(&self, conn: ConnectionId) -> Result<ResultWait<'_>, ErrorObject> {
        let mut table = self.table();
        if table.result_waits_total >= limits::MAX_RESULT_WAITS_TOTAL {
            return Err(errors::too_many_result_waits_daemon_wide(
                limits::MAX_RESULT_WAITS_TOTAL,
            ));
        }
        let n = table.result_waits.entry(conn).or_default();
        if *n >= limits::MAX_RESULT_WAITS {
            return Err(errors::too_many_result_waits(limits::MAX_RESULT_WAITS));
        }
        *n += 1;
        table.result_waits_total += 1;
        Ok(ResultWait { inner: self, conn })
    }

    // -- cancellation -------------------------------------------------------------------------

    /// `tools.cancel` (§C8.10).
    async fn tools_cancel(
        &self,
        params: &ToolsCancelParams,
    ) -> Result<ToolsCancelResult, ErrorObject> {
        let session = match params.selector.as_deref() {
            Some(selector) => Some(self.sessions.resolve(Some(selector))?.session_id),
            None => None,
        };
        let key = {
            let table = self.table();
            table
                .by_call_id
                .get(params.call_id.as_str())
                .copied()
                .filter(|key| match (&session, table.calls.get(key)) {
                    (None, Some(_)) => true,
                    (Some(wanted), Some(call)) => call
                        .target
                        .as_ref()
                        .is_some_and(|t| &t.session_id == wanted),
                    (_, None) => false,
                })
        };
        let cancelled = match key {
            Some(key) => self.cancel(key, params.reason()).await,
            None => false,
        };
        Ok(ToolsCancelResult::new(cancelled))
    }

    /// The cancel procedure of §C10.6 for call `key`; the result is `cancelled`.
    async fn cancel(&self, key: u64, reason: &str) -> bool {
        // 1–2, and a call whose frame is not written yet: record the request; the pipeline
        // stops before the write, or sends the cancel right after it.
        let session_id = {
            let mut table = self.table();
            let Some(call) = table.calls.get_mut(&key) else {
                return false;
            };
            if call.cancel.is_some() {
                return true;
            }
            match (&call.target, &call.phase) {
                (Some(target), Phase::Sent) => target.session_id.clone(),
                (_, phase) => {
                    call.cancel = Some(CancelRequest {
                        reason: reason.to_owned(),
                        frame_sent: false,
                    });
                    if let Phase::Sending(writing) = phase
                        && let Some(writing) = writing.upgrade()
                    {
                        writing.wake.notify_one();
                    }
                    // A parked call: ending its approval wakes it, and it settles cancelled.
                    let parked = call.parked.clone();
                    drop(table);
                    if let Some(approval_id) = parked {
                        self.approvals.settle(&approval_id, Verdict::Cancelled);
                    }
                    return true;
                }
            }
        };
        // 3. No socket: the transition settles the call.
        let active = self
            .sessions
            .summary(&session_id)
            .is_some_and(|s| s.state == SessionState::Active);
        if !active {
            return false;
        }
        // 4. Recorded before the frame goes out, so a concurrent cancel sends nothing more.
        let frame = {
            let mut table = self.table();
            let Some(call) = table.calls.get_mut(&key) else {
                return false;
            };
            if call.cancel.is_some() {
                return true;
            }
            call.cancel = Some(CancelRequest {
                reason: reason.to_owned(),
                frame_sent: true,
            });
            // §D17.2: a transfer in progress is freed at once; later parts are dropped.
            let freed = call.transfer.take().map(|t| t.received());
            let Some(target) = call.target.clone() else {
                return true;
            };
            let frame = cancel_frame(&target, &call.wire_id, reason);
            if let Some(held) = freed {
                table.release(&target.session_id, held);
            }
            frame
        };
        // 5–6.
        self.send_cancel(key, frame).await
    }

    /// Queues a call's one `tool_cancel` without waiting for room in the device queue
    /// (§C8.10: `tools.cancel` returns immediately): tried once here, and when the queue is
    /// full the send goes on on its own task. The cancel grace starts once the frame is
    /// queued. `false` when it could not be queued at once for lack of a usable socket (the
    /// transition then settles the call).
    async fn send_cancel(&self, key: u64, frame: DaemonFrame) -> bool {
        let sessions = self.sessions.clone();
        let mut send = Box::pin(async move {
            let sent = sessions.send_to_session(frame.session_id(), &frame).await;
            (frame, sent)
        });
        // `mpsc` sends are cancel-safe, so polling once and moving on loses nothing.
        let at_once = tokio::select! {
            biased;
            done = &mut send => Some(done),
            () = std::future::ready(()) => None,
        };
        match at_once {
            Some((frame, sent)) => self.cancel_sent(key, &frame, sent),
            None => {
                let weak = self.this.clone();
                tokio::spawn(async move {
                    let (frame, sent) = send.await;
                    if let Some(inner) = weak.upgrade() {
                        inner.cancel_sent(key, &frame, sent);
                    }
                });
                true
            }
        }
    }

    /// The `tool_cancel` of call `key` was queued (its cancel grace starts) or not. A cancel
    /// that was not sent is forgotten, so the call is not reported as being cancelled: a later
    /// `tools.cancel` tries again (and answers `false` without a socket), and the deadline
    /// settles it as `tool_timeout`.
    fn cancel_sent(&self, key: u64, frame: &DaemonFrame, sent: Result<(), SendFailure>) -> bool {
        let mut table = self.table();
        if let Err(e) = sent {
            tracing::debug!(session_id = %frame.session_id(), "tool_cancel not sent: {e}");
            if let Some(call) = table.calls.get_mut(&key)
                && call.cancel.as_ref().is_some_and(|c| c.frame_sent)
            {
                call.cancel = None;
            }
            return false;
        }
        if !table.timers_stopped
            && let Some(call) = table.calls.get_mut(&key)
        {
            call.timers
                .push(self.spawn_timer(key, CANCEL_GRACE, TimerKind::CancelGrace));
        }
        true
    }

    /// Registers the close hook of a connection that issued a call: its unsettled calls are
    /// cancelled with reason `connection_closed`; their responses are dropped.
    fn hook_connection(&self, conn: &Connection) {
        let weak = self.this.clone();
        let conn_id = conn.id();
        conn.on_close(move || {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let keys = {
                let mut table = inner.table();
                table.hooked.remove(&conn_id);
                table.keys_where(|c| c.conn.id() == conn_id && !c.detached)
            };
            if keys.is_empty() {
                return;
            }
            // Close hooks are synchronous; the cancels write frames, so they run on tasks.
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            for key in keys {
                let inner = Arc::clone(&inner);
                runtime.spawn(async move {
                    inner.cancel(key, CONNECTION_CLOSED).await;
                });
            }
        });
    }
}

/// What one part did to its call's transfer.
enum PartStep {
    More,
    Failed(PartError),
    /// The last part arrived: the whole body, still counted in the budgets.
    Complete(ResultAssembler),
}

/// The outcome of an answer the daemon cannot pass on: `tool_serialization_error` with
/// `details` from `fault` (issue #20 defect 4, §D17.3).
/// `tool_call_started` data from the call's own fields: serialises exactly as
/// [`ToolCallStartedData`] (for `events.log` when nobody subscribes, issue #24).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct StartedLine<'a> {
    name: &'a str,
    call_id: &'a str,
    wire_id: &'a str,
    caller: Caller,
    deadline_ms: u64,
}

/// `tool_call_finished` data from the call's own fields: serialises exactly as
/// [`ToolCallFinishedData`].
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct FinishedLine<'a> {
    name: &'a str,
    call_id: &'a str,
    caller: Caller,
    duration_ms: u64,
    outcome: control::CallOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_type: Option<ErrorType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    denied_reason: Option<DeniedReason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_summary: Option<&'a [appduct_protocol::content::ContentSummary]>,
}

fn answer_failed(detail: &str, fault: &PartError) -> Outcome {
    Outcome::error(
        ErrorObject::application(
            ErrorType::ToolSerializationError,
            format!("The app's answer could not be passed on: {detail}."),
        )
        .with_details(fault.details()),
    )
}

fn cancel_frame(target: &Target, wire_id: &str, reason: &str) -> DaemonFrame {
    DaemonFrame::ToolCancel(ToolCancel::new(
        target.session_id.clone(),
        wire_id.to_owned(),
        reason.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use appduct_protocol::control::clamp_timeout_ms;

    /// The table of §C10.3; the caller's value goes through the params clamp first.
    #[test]
    fn the_deadline_table_of_4_1() {
        let rows: [(Option<u64>, Option<f64>, u64); 8] = [
            (None, None, 10_000),
            (Some(20_000), None, 20_000),
            (Some(700_000), None, 600_000),
            (Some(5_000), Some(30_000.0), 5_000),
            (None, Some(3_000.0), 3_000),
            (None, Some(999.0), 1_000),
            (None, Some(1_500.7), 1_500),
            (Some(20_000), Some(600_001.0), 20_000),
        ];
        for (tool, caller, want) in rows {
            let caller = caller.map(clamp_timeout_ms);
            assert_eq!(
                effective_deadline_ms(tool, caller),
                want,
                "tool {tool:?}, caller {caller:?}"
            );
        }
        // A tool below the floor is raised to it; a caller can never lengthen.
        assert_eq!(effective_deadline_ms(Some(1), None), 1_000);
        assert_eq!(effective_deadline_ms(Some(2_000), Some(9_000)), 2_000);
    }

    /// The borrowed `events.log` forms of the two call events serialise byte for byte as the
    /// notifications subscribers get (issue #24: they replace them when nobody subscribes).
    #[test]
    fn borrowed_call_events_serialise_as_the_notifications() {
        use crate::events::BorrowedEvent;
        use appduct_protocol::content::{ContentBlock, summarize};
        use appduct_protocol::control::EventNotification;
        let owned = |data: EventData| {
            serde_json::to_string(
                &EventNotification::new(1_700_000_000_123, 0, data)
                    .with_session_id(Some("s_1".to_owned()))
                    .with_alias(Some("ph\"one".to_owned())),
            )
            .unwrap()
        };
        fn borrowed<D: serde::Serialize>(kind: EventKind, data: &D) -> String {
            serde_json::to_string(&BorrowedEvent {
                kind,
                session_id: "s_1",
                alias: "ph\"one",
                ts: 1_700_000_000_123,
                data,
            })
            .unwrap()
        }
        let started = StartedLine {
            name: "echo",
            call_id: "call_x",
            wire_id: "c_y",
            caller: Caller::Mcp,
            deadline_ms: 10_000,
        };
        assert_eq!(
            borrowed(EventKind::ToolCallStarted, &started),
            owned(EventData::ToolCallStarted(ToolCallStartedData::new(
                "echo",
                "call_x",
                "c_y",
                Caller::Mcp,
                10_000
            )))
        );
        let content = vec![ContentBlock::text("hi")];
        let summary = summarize(&content);
        let settlements = [
            (Settlement::Ok, None),
            (Settlement::Ok, Some(summary)),
            (Settlement::Error(ErrorType::ToolTimeout), None),
            (Settlement::Denied(DeniedReason::Policy), None),
            (Settlement::Cancelled, None),
        ];
        for (settlement, content_summary) in settlements {
            let (outcome, error_type, denied_reason) = settlement.fields();
            let line = FinishedLine {
                name: "echo",
                call_id: "call_x",
                caller: Caller::Cli,
                duration_ms: 12,
                outcome,
                error_type,
                denied_reason,
                content_summary: content_summary.as_deref(),
            };
            assert_eq!(
                borrowed(EventKind::ToolCallFinished, &line),
                owned(EventData::ToolCallFinished(
                    ToolCallFinishedData::new("echo", "call_x", Caller::Cli, 12, settlement)
                        .with_content_summary(content_summary.clone())
                )),
                "{settlement:?}"
            );
        }
    }

    #[test]
    fn wire_ids_are_fresh_and_well_formed() {
        let a = mint_wire_id().unwrap_or_default();
        let b = mint_wire_id().unwrap_or_default();
        assert_ne!(a, b);
        assert!(appduct_protocol::ids::CallId::parse(&a).is_ok(), "{a}");
        assert_eq!(a.len(), 27);
    }
}
