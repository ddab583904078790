//! The one typed control client (ARCHITECTURE.md#the-client-crate, §C7–§C16) used by the CLI and the MCP bridge:
//! connect-or-spawn, the version handshake, typed requests correlated by id, event
//! subscriptions and per-call progress.
//!
//! [`ControlClient::from_stream`] works over any stream (tests use `tokio::io::duplex`);
//! [`ControlClient::connect`] reaches `<state-dir>/daemon.sock`, spawning the daemon if allowed.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::platform::connect_control;
use appduct_protocol::control::{
    ClientInfo, DaemonHello, DaemonShutdown, EventNotification, EventsSubscribe, HelloParams,
    HelloResult, Method, NoParams, ServerNotification, SubscribeParams, SubscribeResult,
    ToolCallProgressParams, ToolCallStartedParams, ToolsCall, ToolsCallParams, ToolsCallResult,
    ToolsList, ToolsListParams, ToolsListResult, clamp_timeout_ms,
};
use appduct_protocol::control::{EventsList, EventsListParams, EventsListResult};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::{
    ErrorObject, LineBuffer, Request, RequestId, ServerMessage, codes, parse_server_message,
    to_line,
};
use appduct_protocol::limits;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::config;
use crate::pidfile::owner_alive;
use crate::spawn::{ReexecSpawner, SpawnRequest, SpawnedChild, Spawner};
use crate::spawn_lock::{self, SpawnLock};
use crate::state_dir::{self, StateDir};

/// Default per-request timeout (§C16).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// `daemon.shutdown` waits this long whatever the configured timeout (§C16).
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
/// Request timeout while the spawn lock is held during a version replacement (§S3.4).
pub const LOCKED_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Added to a `tools.call` deadline for the caller watchdog (§C10.3).
pub const WATCHDOG_SLACK_MS: u64 = 5_000;
/// Deadline assumed when a `tools.call` carries no `timeoutMs` (§C10.3).
pub const WATCHDOG_DEFAULT_DEADLINE_MS: u64 = limits::MAX_CALL_TIMEOUT_MS;

/// Longest daemon line this client accepts: well above the 64 MiB minimum of §C2, because
/// an `events.since` page of 256 events of 256 KiB grows past 64 MiB once JSON-escaped.
const CLIENT_LINE_CAP_BYTES: usize = 4 * limits::CLIENT_MIN_LINE_BYTES;

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why the daemon's version cannot be used (§C7). Part of [`ClientError::VersionMismatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MismatchReason {
    /// The daemon is older and has sessions, links or calls, and no restart was forced.
    DaemonBusy,
    /// The daemon was replaced once and still reports a different version.
    StillDifferentAfterRestart,
    /// The daemon is newer and serves only control protocols `min..=max`, not ours.
    IncompatibleProtocol { min: u32, max: u32 },
    /// The daemon lacks a capability this client needs (§C8.1).
    MissingFeature(String),
}

/// Every failure of the typed client (ARCHITECTURE.md#the-client-crate). Map it to a type and exit code with
/// [`classify`].
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("Cannot reach the appduct daemon at {}: {source}", socket.display())]
    Unreachable {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "The appduct daemon could not be started: {reason}{}",
        log_tail_suffix(log_tail)
    )]
    SpawnFailed { reason: String, log_tail: String },
    #[error("The appduct daemon did not answer {method} within {} ms", after.as_millis())]
    Timeout {
        method: &'static str,
        after: Duration,
    },
    #[error("{}", mismatch_message(daemon, client, *sessions, *pending_links, *pending_calls, reason))]
    VersionMismatch {
        daemon: String,
        client: String,
        sessions: u32,
        pending_links: u32,
        pending_calls: u32,
        reason: MismatchReason,
    },
    #[error("{message}")]
    Rpc {
        code: i64,
        error_type: ErrorType,
        message: String,
        /// `data.details`; boxed like the protocol crate's, so results stay small.
        details: Option<Box<Value>>,
        /// `data.callId` of a `tools.call` error.
        call_id: Option<String>,
    },
    #[error("The connection to the appduct daemon closed")]
    Closed,
    #[error("The appduct daemon sent an invalid message: {0}")]
    Protocol(String),
}

fn log_tail_suffix(tail: &str) -> String {
    if tail.trim().is_empty() {
        String::new()
    } else {
        format!("\nLast lines of daemon.log:\n{}", tail.trim_end())
    }
}

fn mismatch_message(
    daemon: &str,
    client: &str,
    sessions: u32,
    links: u32,
    calls: u32,
    reason: &MismatchReason,
) -> String {
    match reason {
        MismatchReason::DaemonBusy => format!(
            "The appduct daemon is version {daemon}, older than this appduct ({client}), and it is \
             in use ({sessions} sessions, {links} pending links, {calls} pending calls). Stop it \
             with `appduct daemon stop`, or rerun with --daemon-restart to replace it (its \
             sessions, links and calls are lost)."
        ),
        MismatchReason::StillDifferentAfterRestart => format!(
            "appduct restarted the daemon but it still reports version {daemon} (this appduct \
             is {client})."
        ),
        MismatchReason::IncompatibleProtocol { min, max } => format!(
            "The appduct daemon is version {daemon} and speaks control protocol {min}..{max}, \
             which this appduct ({client}) does not support. Upgrade appduct."
        ),
        MismatchReason::MissingFeature(f) => format!(
            "The appduct daemon (version {daemon}) lacks the feature \"{f}\" that this appduct \
             ({client}) needs. Restart it with `appduct daemon stop`, or upgrade it."
        ),
    }
}

impl ClientError {
    fn from_rpc(e: ErrorObject) -> Self {
        let error_type = e.error_type();
        let details = e.data.details;
        Self::Rpc {
            code: e.code,
            error_type,
            message: e.message,
            details,
            call_id: e.data.call_id,
        }
    }

    /// The error type this failure is reported as (see [`classify`]).
    pub fn error_type(&self) -> ErrorType {
        classify(self).0
    }

    /// `details` for the error envelope, when this failure has any.
    pub fn details(&self) -> Option<Value> {
        match self {
            Self::VersionMismatch {
                daemon,
                client,
                sessions,
                pending_links,
                pending_calls,
                reason,
            } => {
                let mut d = json!({
                    "daemonVersion": daemon,
                    "clientVersion": client,
                    "sessionCount": sessions,
                    "pendingLinkCount": pending_links,
                    "pendingCallCount": pending_calls,
                });
                if let MismatchReason::MissingFeature(f) = reason {
                    d["feature"] = json!(f);
                }
                Some(d)
            }
            Self::Rpc { details, .. } => details.as_deref().cloned(),
            Self::Unreachable { socket, .. } => {
                Some(json!({ "socketPath": socket.display().to_string() }))
            }
            _ => None,
        }
    }
}

/// The one mapping of client failures onto error types and CLI exit codes (ARCHITECTURE.md#the-client-crate):
/// everything about reaching the daemon is `connection_error`; a daemon error keeps its type;
/// a daemon message that makes no sense is `internal_error`.
pub fn classify(e: &ClientError) -> (ErrorType, u8) {
    let t = match e {
        ClientError::Unreachable { .. }
        | ClientError::SpawnFailed { .. }
        | ClientError::Timeout { .. }
        | ClientError::VersionMismatch { .. }
        | ClientError::Closed => ErrorType::ConnectionError,
        ClientError::Rpc { error_type, .. } => *error_type,
        ClientError::Protocol(_) => ErrorType::InternalError,
    };
    (t, t.exit_code())
}

/// A failed `tools.call`, with its callId when known (from the params, a `tool_call_started`
/// notification or the error itself), so the caller can still `tools.cancel` it after a
/// watchdog expiry or a lost connection (§C16).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct ToolCallError {
    #[source]
    pub error: ClientError,
    pub call_id: Option<String>,
}

impl ToolCallError {
    pub fn classify(&self) -> (ErrorType, u8) {
        classify(&self.error)
    }

    /// `details` for the error envelope: a connection-class error carries `callId`.
    pub fn details(&self) -> Option<Value> {
        let base = self.error.details();
        match (&self.call_id, self.error.error_type()) {
            (Some(call_id), ErrorType::ConnectionError) => {
                let mut d = match base {
                    Some(Value::Object(m)) => m,
                    _ => serde_json::Map::new(),
                };
                d.insert("callId".into(), json!(call_id));
                Some(Value::Object(d))
            }
            _ => base,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Connection state shared with the reader and writer tasks
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
enum Failure {
    Rpc(ErrorObject),
    Closed,
    Protocol(String),
}

impl Failure {
    fn into_error(self) -> ClientError {
        match self {
            Self::Rpc(e) => ClientError::from_rpc(e),
            Self::Closed => ClientError::Closed,
            Self::Protocol(m) => ClientError::Protocol(m),
        }
    }
}

#[derive(Debug)]
struct Settled {
    outcome: Result<Value, Failure>,
    call_id: Option<String>,
}

/// A per-call notification of a `tools.call` with `progress: true` (§C10.5).
#[derive(Debug, Clone, PartialEq)]
pub enum CallProgress {
    Started(ToolCallStartedParams),
    Progress(ToolCallProgressParams),
}

struct Pending {
    tx: oneshot::Sender<Settled>,
    call_id: Option<String>,
    progress: Option<mpsc::UnboundedSender<CallProgress>>,
    /// A `tools.call`: its deadline as the watchdog assumes it (§C10.3); a parking notice
    /// extends the watchdog by it past the approval's expiry (§C11.1).
    call_deadline: Option<Duration>,
    /// The watchdog no longer fires before this (set by a parking notice).
    hold_until: Option<tokio::time::Instant>,
}

/// How long after now a call parked until `expires_at` (unix seconds) may still answer: the
/// rest of the approval wait (rounded up to the next second), then its whole `deadline`.
pub fn parked_call_wait(expires_at: u64, now_unix_ms: u64, deadline: Duration) -> Duration {
    let until_ms = expires_at.saturating_add(1).saturating_mul(1000);
    Duration::from_millis(until_ms.saturating_sub(now_unix_ms)).saturating_add(deadline)
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

struct EventSink {
    token: u64,
    tx: mpsc::UnboundedSender<EventNotification>,
}

struct ClientState {
    open: bool,
    /// Set when the daemon sent something unusable; pending requests fail with it.
    protocol_error: Option<String>,
    pending: HashMap<i64, Pending>,
    events: Option<EventSink>,
}

struct Shared {
    state: Mutex<ClientState>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ClientState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn closed_failure(st: &ClientState) -> Failure {
        match &st.protocol_error {
            Some(m) => Failure::Protocol(m.clone()),
            None => Failure::Closed,
        }
    }

    /// Marks the connection closed and fails every pending request (§C16).
    fn close(&self, protocol_error: Option<String>) {
        let pending = {
            let mut st = self.lock();
            if !st.open {
                return;
            }
            st.open = false;
            st.protocol_error = protocol_error;
            st.events = None;
            std::mem::take(&mut st.pending)
                .into_values()
                .map(|p| (p, Self::closed_failure(&st)))
                .collect::<Vec<_>>()
        };
        for (p, failure) in pending {
            let _ = p.tx.send(Settled {
                outcome: Err(failure),
                call_id: p.call_id,
            });
        }
    }

    fn handle_line(&self, line: &[u8]) -> Result<(), String> {
        match parse_server_message(line).map_err(|e| e.to_string())? {
            ServerMessage::Response(r) => {
                let n = match r.id {
                    Some(RequestId::Number(n)) => n,
                    Some(RequestId::String(s)) => {
                        tracing::debug!("ignoring a response to string id {s:?}");
                        return Ok(());
                    }
                    None => {
                        if let Err(e) = &r.outcome {
                            tracing::warn!("the appduct daemon rejected a message: {e}");
                        }
                        return Ok(());
                    }
                };
                let pending = self.lock().pending.remove(&n);
                match pending {
                    Some(p) => {
                        let _ = p.tx.send(Settled {
                            outcome: r.outcome.map_err(Failure::Rpc),
                            call_id: p.call_id,
                        });
                    }
                    None => tracing::debug!("ignoring a late response to request {n}"),
                }
            }
            ServerMessage::Notification(n) => match ServerNotification::parse(n) {
                Ok(ServerNotification::Event(e)) => {
                    let mut st = self.lock();
                    if let Some(sink) = &st.events
                        && sink.tx.send(e).is_err()
                    {
                        st.events = None;
                    }
                }
                Ok(ServerNotification::ToolCallStarted(p)) => {
                    let id = p.request_id.clone();
                    let call_id = p.call_id.clone();
                    self.route_progress(&id, Some(call_id), CallProgress::Started(p));
                }
                Ok(ServerNotification::ToolCallProgress(p)) => {
                    let id = p.request_id.clone();
                    self.route_progress(&id, None, CallProgress::Progress(p));
                }
                Ok(ServerNotification::Unknown(n)) => {
                    tracing::debug!(method = %n.method, "ignoring an unknown notification");
                }
                Err(e) => tracing::warn!("ignoring a notification: {e}"),
            },
        }
        Ok(())
    }

    fn route_progress(&self, id: &RequestId, call_id: Option<String>, item: CallProgress) {
        let RequestId::Number(n) = id else {
            return;
        };
        let mut st = self.lock();
        let Some(p) = st.pending.get_mut(n) else {
            return;
        };
        if call_id.is_some() {
            p.call_id = call_id;
        }
        // A call parked for an operator: its deadline starts when it is approved (§C11.1).
        if let (CallProgress::Progress(progress), Some(deadline)) = (&item, p.call_deadline)
            && progress.approval_id.is_some()
            && let Some(expires_at) = progress.expires_at
        {
            let until = tokio::time::Instant::now()
                + parked_call_wait(expires_at, now_unix_ms(), deadline)
                + Duration::from_millis(WATCHDOG_SLACK_MS);
            p.hold_until = Some(p.hold_until.map_or(until, |h| h.max(until)));
        }
        if let Some(tx) = &p.progress
            && tx.send(item).is_err()
        {
            p.progress = None;
        }
    }
}

async fn read_loop<S: AsyncRead>(mut reader: ReadHalf<S>, shared: Arc<Shared>) {
    let mut framer = LineBuffer::new(CLIENT_LINE_CAP_BYTES);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                tracing::debug!("control connection read failed: {e}");
                break;
            }
        };
        framer.push(&buf[..n]);
        while let Some(line) = framer.next_line() {
            let result = match line {
                Ok(line) => shared.handle_line(&line),
                Err(o) => Err(format!("a line longer than {} bytes", o.cap)),
            };
            if let Err(msg) = result {
                shared.close(Some(msg));
                return;
            }
        }
    }
    shared.close(None);
}

async fn write_loop<S: AsyncWrite>(
    mut writer: WriteHalf<S>,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    shared: Arc<Shared>,
) {
    while let Some(line) = rx.recv().await {
        let r = async {
            writer.write_all(&line).await?;
            writer.flush().await
        }
        .await;
        if let Err(e) = r {
            tracing::debug!("control connection write failed: {e}");
            shared.close(None);
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------------------------

struct Inner {
    shared: Arc<Shared>,
    next_id: AtomicI64,
    next_token: AtomicU64,
    out: mpsc::UnboundedSender<Vec<u8>>,
    request_timeout: Duration,
    tasks: [AbortHandle; 2],
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropping the last handle closes the stream, so the daemon sees the connection end.
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Inner {
    /// Registers request `id` and queues it. Handlers are registered before the line is sent,
    /// because a response and notifications can arrive in the same read (§C14).
    fn start(
        &self,
        method: &str,
        params: Option<Value>,
        call_id: Option<String>,
        progress: Option<mpsc::UnboundedSender<CallProgress>>,
        call_deadline: Option<Duration>,
    ) -> Result<(i64, oneshot::Receiver<Settled>), ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let line = to_line(&Request::new(id, method, params))
            .map_err(|e| ClientError::Protocol(format!("cannot encode {method}: {e}")))?;
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.shared.lock();
            if !st.open {
                return Err(Shared::closed_failure(&st).into_error());
            }
            st.pending.insert(
                id,
                Pending {
                    tx,
                    call_id,
                    progress,
                    call_deadline,
                    hold_until: None,
                },
            );
        }
        if self.out.send(line).is_err() {
            self.shared.lock().pending.remove(&id);
            return Err(ClientError::Closed);
        }
        Ok((id, rx))
    }

    /// Waits for the response to `id`; on timeout the request is forgotten. The second value
    /// is the callId learned for a `tools.call`.
    async fn finish(
        &self,
        id: i64,
        rx: oneshot::Receiver<Settled>,
        method: &'static str,
        after: Duration,
    ) -> (Result<Value, ClientError>, Option<String>) {
        let mut rx = rx;
        let mut until = tokio::time::Instant::now() + after;
        let waited = loop {
            match tokio::time::timeout_at(until, &mut rx).await {
                Err(elapsed) => {
                    // A parking notice may have moved the watchdog (§C11.1).
                    let hold = self
                        .shared
                        .lock()
                        .pending
                        .get(&id)
                        .and_then(|p| p.hold_until);
                    match hold {
                        Some(h) if h > until => until = h,
                        _ => break Err(elapsed),
                    }
                }
                Ok(settled) => break Ok(settled),
            }
        };
        match waited {
            Ok(Ok(s)) => (s.outcome.map_err(Failure::into_error), s.call_id),
            Ok(Err(_)) => (Err(ClientError::Closed), None),
            Err(_) => {
                let call_id = self
                    .shared
                    .lock()
                    .pending
                    .remove(&id)
                    .and_then(|p| p.call_id);
                (Err(ClientError::Timeout { method, after }), call_id)
            }
        }
    }

    async fn request(
        &self,
        method: &'static str,
        params: Option<Value>,
        after: Duration,
    ) -> Result<Value, ClientError> {
        let (id, rx) = self.start(method, params, None, None, None)?;
        self.finish(id, rx, method, after).await.0
    }
}

fn decode<T: DeserializeOwned>(method: &str, v: Value) -> Result<T, ClientError> {
    // Unknown result keys are ignored: result types do not deny them (§C16).
    serde_json::from_value(v)
        .map_err(|e| ClientError::Protocol(format!("unexpected {method} result: {e}")))
}

/// The `tools.call` watchdog: effective deadline + 5 s, with `clamp(timeoutMs)` or 600 s as the
/// deadline when unknown (§C10.3).
pub fn tool_call_watchdog(timeout_ms: Option<f64>) -> Duration {
    let deadline = timeout_ms.map_or(WATCHDOG_DEFAULT_DEADLINE_MS, clamp_timeout_ms);
    Duration::from_millis(deadline + WATCHDOG_SLACK_MS)
}

/// A connection to the daemon. Cheap to clone; the connection closes when the last clone (and
/// every stream or pending call made from it) is dropped.
#[derive(Clone)]
pub struct ControlClient {
    inner: Arc<Inner>,
    notice: Option<VersionNotice>,
}

impl fmt::Debug for ControlClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlClient")
            .field("open", &self.is_open())
            .field("request_timeout", &self.inner.request_timeout)
            .finish_non_exhaustive()
    }
}

impl ControlClient {
    /// A client over an already-connected stream, with the default request timeout. No
    /// version check runs. Must be called inside a tokio runtime.
    pub fn from_stream<S>(stream: S) -> Self
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        Self::from_stream_with(stream, DEFAULT_REQUEST_TIMEOUT)
    }

    /// [`ControlClient::from_stream`] with a chosen per-request timeout.
    pub fn from_stream_with<S>(stream: S, request_timeout: Duration) -> Self
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let shared = Arc::new(Shared {
            state: Mutex::new(ClientState {
                open: true,
                protocol_error: None,
                pending: HashMap::new(),
                events: None,
            }),
        });
        let (reader, writer) = tokio::io::split(stream);
        let (out, rx) = mpsc::unbounded_channel();
        let r = tokio::spawn(read_loop(reader, shared.clone())).abort_handle();
        let w = tokio::spawn(write_loop(writer, rx, shared.clone())).abort_handle();
        Self {
            inner: Arc::new(Inner {
                shared,
                next_id: AtomicI64::new(1),
                next_token: AtomicU64::new(1),
                out,
                request_timeout,
                tasks: [r, w],
            }),
            notice: None,
        }
    }

    /// False once the connection has closed.
    pub fn is_open(&self) -> bool {
        self.inner.shared.lock().open
    }

    /// The version notice of the handshake run by [`ControlClient::connect`]: the daemon is
    /// newer (print it on stderr in human mode only), or the drift a warn-only check found.
    pub fn version_notice(&self) -> Option<&VersionNotice> {
        self.notice.as_ref()
    }

    /// Sends one typed request and waits for its result. The timeout is the configured one,
    /// except `daemon.shutdown` (10 s) and `tools.call` (the watchdog of §C10.3; prefer
    /// [`ControlClient::call_tool`], which also reports the callId on failure).
    pub async fn call<M: Method>(&self, params: M::Params) -> Result<M::Result, ClientError> {
        let params = serde_json::to_value(&params)
            .map_err(|e| ClientError::Protocol(format!("cannot encode {}: {e}", M::NAME)))?;
        let after = self.timeout_for(M::NAME, &params);
        let v = self.inner.request(M::NAME, Some(params), after).await?;
        decode(M::NAME, v)
    }

    /// `tools.list` through every page from `params.offset` (up to `params.limit` tools when
    /// given): the daemon ends a page early once it holds `MAX_CONTROL_REPLY_BYTES` worth of
    /// descriptors, so a whole registry can take several requests. `total` and `groups` are the
    /// first page's; `hasMore` is the last page's.
    pub async fn list_all_tools(
        &self,
        params: ToolsListParams,
    ) -> Result<ToolsListResult, ClientError> {
        let mut all = self.call::<ToolsList>(params.clone()).await?;
        let start = params.offset.unwrap_or(0);
        while all.has_more && !all.tools.is_empty() {
            let listed = all.tools.len() as u64;
            let remaining = match params.limit {
                Some(limit) if listed >= limit => break,
                Some(limit) => Some(limit - listed),
                None => None,
            };
            let page = self
                .call::<ToolsList>(
                    params
                        .clone()
                        .with_offset(Some(start + listed))
                        .with_limit(remaining),
                )
                .await?;
            if page.tools.is_empty() {
                break;
            }
            all.has_more = page.has_more;
            all.tools.extend(page.tools);
        }
        Ok(all)
    }

    /// `calls.list` (§C8.40): the calls in flight daemon-wide, oldest first.
    pub async fn list_calls(
        &self,
    ) -> Result<Vec<appduct_protocol::control::CallSummary>, ClientError> {
        use appduct_protocol::control::{CallsList, NoParams};
        Ok(self.call::<CallsList>(NoParams {}).await?.calls)
    }

    /// `events.list` through every page, as [`ControlClient::list_all_tools`] does.
    pub async fn list_all_events(
        &self,
        params: EventsListParams,
    ) -> Result<EventsListResult, ClientError> {
        let mut all = self.call::<EventsList>(params.clone()).await?;
        let start = params.offset.unwrap_or(0);
        while all.has_more && !all.events.is_empty() {
            let listed = all.events.len() as u64;
            let remaining = match params.limit {
                Some(limit) if listed >= limit => break,
                Some(limit) => Some(limit - listed),
                None => None,
            };
            let page = self
                .call::<EventsList>(
                    params
                        .clone()
                        .with_offset(Some(start + listed))
                        .with_limit(remaining),
                )
                .await?;
            if page.events.is_empty() {
                break;
            }
            all.has_more = page.has_more;
            all.events.extend(page.events);
        }
        Ok(all)
    }

    /// [`ControlClient::call`] with an explicit timeout.
    pub async fn call_with_timeout<M: Method>(
        &self,
        params: M::Params,
        after: Duration,
    ) -> Result<M::Result, ClientError> {
        let params = serde_json::to_value(&params)
            .map_err(|e| ClientError::Protocol(format!("cannot encode {}: {e}", M::NAME)))?;
        let v = self.inner.request(M::NAME, Some(params), after).await?;
        decode(M::NAME, v)
    }

    fn timeout_for(&self, method: &str, params: &Value) -> Duration {
        match method {
            DaemonShutdown::NAME => SHUTDOWN_TIMEOUT,
            ToolsCall::NAME => tool_call_watchdog(params.get("timeoutMs").and_then(Value::as_f64)),
            _ => self.inner.request_timeout,
        }
    }

    /// Subscribes this connection to events (`events.subscribe`). The stream receives every
    /// `event` notification from the response on, including a `since` replay; it replaces the
    /// stream of an earlier subscription on this connection (§C8.12). Unknown kinds are
    /// skipped.
    pub async fn subscribe(&self, params: SubscribeParams) -> Result<EventStream, ClientError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let token = self.inner.next_token.fetch_add(1, Ordering::Relaxed);
        // Registered before the request: replayed events follow the response in the same read.
        let previous = self
            .inner
            .shared
            .lock()
            .events
            .replace(EventSink { token, tx });
        match self.call::<EventsSubscribe>(params).await {
            Ok(result) => Ok(EventStream {
                rx,
                result,
                _client: self.inner.clone(),
            }),
            Err(e) => {
                let mut st = self.inner.shared.lock();
                if st.events.as_ref().is_some_and(|s| s.token == token) {
                    st.events = previous;
                }
                Err(e)
            }
        }
    }

    /// Calls a tool and waits for its result under the caller watchdog (§C10.3). A watchdog
    /// expiry or a lost connection is a connection error that still names the callId when it
    /// is known.
    pub async fn call_tool(
        &self,
        params: ToolsCallParams,
    ) -> Result<ToolsCallResult, ToolCallError> {
        self.start_tool_call(params, None).result().await
    }

    /// Calls a tool with `progress: true`. The request is sent at once; the stream yields
    /// `tool_call_started` then the `tool_call_progress` notifications of this call only
    /// (routed by request id) and ends with the response.
    pub fn call_tool_with_progress(
        &self,
        mut params: ToolsCallParams,
    ) -> (ProgressStream, PendingToolCall) {
        params.progress = true;
        let (tx, rx) = mpsc::unbounded_channel();
        let pending = self.start_tool_call(params, Some(tx));
        (
            ProgressStream {
                rx,
                _client: self.inner.clone(),
            },
            pending,
        )
    }

    fn start_tool_call(
        &self,
        params: ToolsCallParams,
        progress: Option<mpsc::UnboundedSender<CallProgress>>,
    ) -> PendingToolCall {
        let call_id = params.call_id.clone();
        let watchdog = tool_call_watchdog(params.timeout_ms.map(|t| t as f64));
        let deadline = Duration::from_millis(
            params
                .timeout_ms
                .map_or(WATCHDOG_DEFAULT_DEADLINE_MS, |t| clamp_timeout_ms(t as f64)),
        );
        let started = serde_json::to_value(&params)
            .map_err(|e| ClientError::Protocol(format!("cannot encode tools.call: {e}")))
            .and_then(|p| {
                self.inner.start(
                    ToolsCall::NAME,
                    Some(p),
                    call_id.clone(),
                    progress,
                    Some(deadline),
                )
            });
        PendingToolCall {
            inner: self.inner.clone(),
            started,
            call_id,
            watchdog,
        }
    }
}

/// `event` notifications of one `events.subscribe` (keeps the connection open).
pub struct EventStream {
    rx: mpsc::UnboundedReceiver<EventNotification>,
    result: SubscribeResult,
    _client: Arc<Inner>,
}

impl fmt::Debug for EventStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream")
            .field("result", &self.result)
            .finish_non_exhaustive()
    }
}

impl EventStream {
    /// The next event; `None` once the connection closed (or a later subscription on the same
    /// connection replaced this one) and everything received was read.
    pub async fn next(&mut self) -> Option<EventNotification> {
        self.rx.recv().await
    }

    /// The next event if one has already arrived.
    pub fn try_next(&mut self) -> Option<EventNotification> {
        self.rx.try_recv().ok()
    }

    /// The `events.subscribe` result (`sessionId`, `replay`).
    pub fn result(&self) -> &SubscribeResult {
        &self.result
    }
}

/// Per-call notifications of one `tools.call` with `progress: true`.
pub struct ProgressStream {
    rx: mpsc::UnboundedReceiver<CallProgress>,
    _client: Arc<Inner>,
}

impl fmt::Debug for ProgressStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProgressStream").finish_non_exhaustive()
    }
}

impl ProgressStream {
    /// The next notification; `None` once the call settled and everything was read.
    pub async fn next(&mut self) -> Option<CallProgress> {
        self.rx.recv().await
    }
}

/// A `tools.call` already sent; [`PendingToolCall::result`] waits for its response.
pub struct PendingToolCall {
    inner: Arc<Inner>,
    started: Result<(i64, oneshot::Receiver<Settled>), ClientError>,
    call_id: Option<String>,
    watchdog: Duration,
}

impl fmt::Debug for PendingToolCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingToolCall")
            .field("call_id", &self.call_id)
            .field("watchdog", &self.watchdog)
            .finish_non_exhaustive()
    }
}

impl PendingToolCall {
    /// The watchdog bounding the wait (§C10.3).
    pub fn watchdog(&self) -> Duration {
        self.watchdog
    }

    pub async fn result(self) -> Result<ToolsCallResult, ToolCallError> {
        let (id, rx) = match self.started {
            Ok(s) => s,
            Err(error) => {
                return Err(ToolCallError {
                    error,
                    call_id: self.call_id,
                });
            }
        };
        let (outcome, learned) = self
            .inner
            .finish(id, rx, ToolsCall::NAME, self.watchdog)
            .await;
        let known = learned.or(self.call_id);
        match outcome.and_then(|v| decode::<ToolsCallResult>(ToolsCall::NAME, v)) {
            Ok(r) => Ok(r),
            Err(error) => {
                let call_id = match &error {
                    ClientError::Rpc { call_id, .. } => call_id.clone().or(known),
                    _ => known,
                };
                Err(ToolCallError { error, call_id })
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Version handshake (§C7)
// ---------------------------------------------------------------------------------------------

/// A semantic version, compared by semver 2.0 precedence: a prerelease sorts below its
/// release, build metadata is ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemVer {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<PreId>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PreId {
    Num(u64),
    Alpha(String),
}

impl SemVer {
    /// Parses `MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]`; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.split_once('+').map_or(s, |(v, _)| v);
        let (core, pre) = match s.split_once('-') {
            Some((c, p)) => (c, Some(p)),
            None => (s, None),
        };
        let num = |p: &str| -> Option<u64> {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            p.parse().ok()
        };
        let mut parts = core.split('.');
        let major = num(parts.next()?)?;
        let minor = num(parts.next()?)?;
        let patch = num(parts.next()?)?;
        if parts.next().is_some() {
            return None;
        }
        let pre = match pre {
            None => Vec::new(),
            Some(p) => p
                .split('.')
                .map(|id| {
                    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    {
                        None
                    } else if id.bytes().all(|b| b.is_ascii_digit()) {
                        id.parse().ok().map(PreId::Num)
                    } else {
                        Some(PreId::Alpha(id.to_owned()))
                    }
                })
                .collect::<Option<Vec<_>>>()?,
        };
        Some(Self {
            major,
            minor,
            patch,
            pre,
        })
    }
}

impl Ord for PreId {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        match (self, other) {
            (Self::Num(a), Self::Num(b)) => a.cmp(b),
            (Self::Num(_), Self::Alpha(_)) => CmpOrdering::Less,
            (Self::Alpha(_), Self::Num(_)) => CmpOrdering::Greater,
            (Self::Alpha(a), Self::Alpha(b)) => a.cmp(b),
        }
    }
}

impl PartialOrd for PreId {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl Ord for SemVer {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => CmpOrdering::Equal,
                (true, false) => CmpOrdering::Greater,
                (false, true) => CmpOrdering::Less,
                // Identifier by identifier; a shorter list that is a prefix sorts first.
                (false, false) => self.pre.cmp(&other.pre),
            })
    }
}

impl PartialOrd for SemVer {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

/// Compares a daemon version with the client's. A version that does not parse sorts below
/// every valid one (project decision: such a daemon is treated as older); two unparsable
/// versions are equal only when the strings are.
pub fn compare_versions(daemon: &str, client: &str) -> CmpOrdering {
    match (SemVer::parse(daemon), SemVer::parse(client)) {
        (Some(d), Some(c)) => d.cmp(&c),
        (None, Some(_)) => CmpOrdering::Less,
        (Some(_), None) => CmpOrdering::Greater,
        (None, None) if daemon == client => CmpOrdering::Equal,
        (None, None) => CmpOrdering::Less,
    }
}

/// What the handshake learned about the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonInfo {
    pub version: String,
    /// `(minControlProtocol, controlProtocol)`; `None` for a daemon without `daemon.hello`.
    pub protocols: Option<(u32, u32)>,
    pub features: Vec<String>,
    pub session_count: u64,
    pub pending_links: u64,
    pub pending_calls: u64,
}

impl DaemonInfo {
    pub fn from_hello(h: &HelloResult) -> Self {
        Self {
            version: h.version.clone(),
            protocols: Some((h.min_control_protocol, h.control_protocol)),
            features: h.features.clone(),
            session_count: h.session_count,
            pending_links: h.pending_links,
            pending_calls: h.pending_calls,
        }
    }

    /// Reads a `daemon.status` result of a daemon that predates `daemon.hello`: its version,
    /// session count and `pendingLinks`; `pendingCalls` counts as 0 (§C7 step 1). Read
    /// leniently, since an older daemon's status may lack newer keys.
    pub fn from_legacy_status(v: &Value) -> Result<Self, ClientError> {
        let version = v
            .get("version")
            .and_then(Value::as_str)
            .ok_or_else(|| ClientError::Protocol("daemon.status has no \"version\"".into()))?;
        let session_count = v
            .get("sessions")
            .and_then(Value::as_array)
            .map_or(0, |a| a.len() as u64);
        let pending_links = v.get("pendingLinks").and_then(Value::as_u64).unwrap_or(0);
        Ok(Self {
            version: version.to_owned(),
            protocols: None,
            features: Vec::new(),
            session_count,
            pending_links,
            pending_calls: 0,
        })
    }

    /// No sessions, pending links or pending calls.
    pub fn is_idle(&self) -> bool {
        self.session_count == 0 && self.pending_links == 0 && self.pending_calls == 0
    }
}

/// How a command treats version drift (§L2, §C7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VersionCheck {
    /// The full algorithm of §C7, replacing an older daemon when allowed.
    #[default]
    Enforce,
    /// `daemon status`: never replaces; drift only becomes a notice (a `warning`).
    WarnOnly,
    /// `daemon stop` and the commands that never check.
    Skip,
}

/// The version policy of one process (§C7).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VersionPolicy {
    pub check: VersionCheck,
    /// `--daemon-restart`, `APPDUCT_DAEMON_RESTART` or `restartDaemonOnVersionMismatch`, as
    /// resolved by the caller (`--no-daemon-restart` wins).
    pub force_restart: bool,
    /// `daemon.hello` features this client cannot work without (§C8.1).
    pub required_features: Vec<String>,
}

/// A drift the caller may show (never printed by the client itself): the daemon is newer
/// (stderr in human mode only, §C7 step 4), or a warn-only check found a difference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionNotice {
    pub daemon_version: String,
    pub client_version: String,
    pub message: String,
}

/// The outcome of one handshake round (§C7 steps 2–5).
#[derive(Debug)]
pub enum VersionDecision {
    Proceed,
    /// Proceed, with a notice for the caller.
    Notice(VersionNotice),
    /// Replace the daemon under the spawn lock, then run the handshake again.
    Replace,
    Fail(ClientError),
}

/// Decides what to do with the daemon's version (the table of §C7, the algorithm of §C7).
/// Pure; `already_replaced` is whether this process replaced a daemon before.
pub fn decide_version(
    daemon: &DaemonInfo,
    client_version: &str,
    policy: &VersionPolicy,
    already_replaced: bool,
) -> VersionDecision {
    let sat = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    let mismatch = |reason| {
        VersionDecision::Fail(ClientError::VersionMismatch {
            daemon: daemon.version.clone(),
            client: client_version.to_owned(),
            sessions: sat(daemon.session_count),
            pending_links: sat(daemon.pending_links),
            pending_calls: sat(daemon.pending_calls),
            reason,
        })
    };
    let notice = |message: String| {
        VersionDecision::Notice(VersionNotice {
            daemon_version: daemon.version.clone(),
            client_version: client_version.to_owned(),
            message,
        })
    };
    if policy.check == VersionCheck::Skip {
        return VersionDecision::Proceed;
    }
    let ours = limits::CONTROL_PROTOCOL;
    let order = compare_versions(&daemon.version, client_version);
    // Protocol compatibility first; a daemon without the handshake counts as older.
    let relation = match daemon.protocols {
        None => CmpOrdering::Less,
        Some((min, max)) if !(min..=max).contains(&ours) => {
            if order == CmpOrdering::Greater {
                if policy.check == VersionCheck::WarnOnly {
                    return notice(format!(
                        "The appduct daemon {} speaks control protocol {min}..{max}, which this \
                         appduct ({client_version}) does not support; upgrade appduct.",
                        daemon.version
                    ));
                }
                return mismatch(MismatchReason::IncompatibleProtocol { min, max });
            }
            CmpOrdering::Less
        }
        Some(_) => order,
    };
    if relation != CmpOrdering::Equal && already_replaced && policy.check == VersionCheck::Enforce {
        return mismatch(MismatchReason::StillDifferentAfterRestart);
    }
    match relation {
        CmpOrdering::Equal | CmpOrdering::Greater => {
            if let Some(f) = policy
                .required_features
                .iter()
                .find(|f| !daemon.features.contains(f))
            {
                return mismatch(MismatchReason::MissingFeature(f.clone()));
            }
            if relation == CmpOrdering::Equal {
                VersionDecision::Proceed
            } else {
                notice(format!(
                    "The appduct daemon is version {}, newer than this appduct ({client_version}).",
                    daemon.version
                ))
            }
        }
        CmpOrdering::Less => {
            if policy.check == VersionCheck::WarnOnly {
                notice(format!(
                    "The appduct daemon is version {}, older than this appduct \
                     ({client_version}); `appduct daemon stop` replaces it on the next command.",
                    daemon.version
                ))
            } else if daemon.is_idle() || policy.force_restart {
                VersionDecision::Replace
            } else {
                mismatch(MismatchReason::DaemonBusy)
            }
        }
    }
}

/// Socket paths whose daemon passed the check in this process (§C7: once per process and
/// socket path), and whether this process already replaced a daemon (at most once).
static CHECKED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
static REPLACED: AtomicBool = AtomicBool::new(false);

fn checked() -> MutexGuard<'static, BTreeSet<PathBuf>> {
    CHECKED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Forgets every completed version check and the replacement, so tests can run the handshake
/// again in one process (§C7).
pub fn reset_version_checks() {
    checked().clear();
    REPLACED.store(false, Ordering::SeqCst);
}

impl ControlClient {
    /// Runs `daemon.hello`, falling back to `daemon.status` on `-32601` (§C7 step 1).
    pub async fn handshake(
        &self,
        client_name: &str,
        client_version: &str,
    ) -> Result<DaemonInfo, ClientError> {
        let params = HelloParams::default()
            .with_client(Some(ClientInfo::new(
                client_name.to_owned(),
                client_version.to_owned(),
            )))
            .with_control_protocol(Some(u64::from(limits::CONTROL_PROTOCOL)));
        match self.call::<DaemonHello>(params).await {
            Ok(h) => Ok(DaemonInfo::from_hello(&h)),
            Err(ClientError::Rpc { code, .. }) if code == codes::METHOD_NOT_FOUND => {
                let v = self
                    .inner
                    .request("daemon.status", None, self.inner.request_timeout)
                    .await?;
                DaemonInfo::from_legacy_status(&v)
            }
            Err(e) => Err(e),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Connect-or-spawn (§S3.4) and version replacement (§C7 step 4)
// ---------------------------------------------------------------------------------------------

/// Poll interval while waiting for a daemon to become ready or to go away (§S3.4, §C7).
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Longest wait for a spawned daemon to answer `daemon.hello` (§S3.4 step 7).
const READY_WAIT: Duration = Duration::from_secs(5);
/// Longest wait for a replaced daemon's socket and pidfile to disappear (§C7).
const GONE_WAIT: Duration = Duration::from_secs(5);
/// Lines of `daemon.log` reported with a failed spawn (§S3.4 step 7).
const LOG_TAIL_LINES: usize = 20;
/// Only the end of `daemon.log` is read for its tail.
const LOG_TAIL_BYTES: u64 = 64 * 1024;

/// How [`ControlClient::connect`] reaches the daemon (ARCHITECTURE.md#the-client-crate).
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub state_dir: PathBuf,
    /// Spawn the daemon when its socket is missing or refuses connections (default true).
    pub auto_spawn: bool,
    /// Per-request timeout (default 10 s).
    pub request_timeout: Duration,
    pub version_policy: VersionPolicy,
    pub spawner: Arc<dyn Spawner>,
    /// `daemon.hello` `client.name`: `appduct-cli` or `appduct-mcp`.
    pub client_name: String,
    /// This binary's version (the workspace version by default).
    pub client_version: String,
}

impl ClientOptions {
    pub fn new(state_dir: impl Into<PathBuf>, client_name: impl Into<String>) -> Self {
        Self {
            state_dir: state_dir.into(),
            auto_spawn: true,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            version_policy: VersionPolicy::default(),
            spawner: Arc::new(ReexecSpawner),
            client_name: client_name.into(),
            client_version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

fn unreachable(
    socket: &Path,
    e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> ClientError {
    ClientError::Unreachable {
        socket: socket.to_path_buf(),
        source: io::Error::other(e),
    }
}

/// `ENOENT` or `ECONNREFUSED`: nobody serves the socket (§S3.4 step 3).
fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
    )
}

/// The last [`LOG_TAIL_LINES`] lines of `daemon.log`, empty when it cannot be read.
fn log_tail(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = state_dir::open_read(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))
        .is_err()
    {
        return String::new();
    }
    let mut bytes = Vec::new();
    if f.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let mut tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
    if !tail.is_empty() {
        tail.push('\n');
    }
    tail
}

impl ControlClient {
    /// Connects to `<state-dir>/daemon.sock`, spawning the daemon when allowed (§S3.4), then
    /// runs the version check of §C7 (once per process and socket path).
    pub async fn connect(opts: ClientOptions) -> Result<Self, ClientError> {
        let fallback_socket = opts.state_dir.join(state_dir::SOCKET_FILE);
        let dir = StateDir::new(&opts.state_dir).map_err(|e| unreachable(&fallback_socket, e))?;
        let socket = dir.socket_path();
        // Before anything touches the file system (§C1.1).
        state_dir::check_socket_path_len(&socket).map_err(|e| unreachable(&socket, e))?;
        if opts.auto_spawn {
            dir.prepare().map_err(|e| unreachable(&socket, e))?;
        }
        let client = match connect_control(&socket).await {
            Ok(s) => Self::from_stream_with(s, opts.request_timeout),
            Err(e) if opts.auto_spawn && is_absent(&e) => {
                spawn_and_connect(&dir, &opts, opts.request_timeout).await?
            }
            Err(e) => return Err(ClientError::Unreachable { socket, source: e }),
        };
        client.check_version(&dir, &opts).await
    }

    async fn check_version(
        self,
        dir: &StateDir,
        opts: &ClientOptions,
    ) -> Result<Self, ClientError> {
        let policy = &opts.version_policy;
        let socket = dir.socket_path();
        if policy.check == VersionCheck::Skip || checked().contains(&socket) {
            return Ok(self);
        }
        let mut client = self;
        loop {
            let info = client
                .handshake(&opts.client_name, &opts.client_version)
                .await?;
            let replaced = REPLACED.load(Ordering::SeqCst);
            match decide_version(&info, &opts.client_version, policy, replaced) {
                VersionDecision::Proceed => {
                    if policy.check == VersionCheck::Enforce {
                        checked().insert(socket);
                    }
                    return Ok(client);
                }
                VersionDecision::Notice(n) => {
                    if policy.check == VersionCheck::Enforce {
                        checked().insert(socket);
                    }
                    client.notice = Some(n);
                    return Ok(client);
                }
                VersionDecision::Replace => {
                    REPLACED.store(true, Ordering::SeqCst);
                    tracing::info!(
                        "replacing the appduct daemon {} with {}",
                        info.version,
                        opts.client_version
                    );
                    client = replace_daemon(client, dir, opts).await?;
                }
                VersionDecision::Fail(e) => return Err(e),
            }
        }
    }
}

/// Steps 4–7 of §S3.4: under the spawn lock, spawn unless a daemon is already starting, then
/// wait until it answers `daemon.hello`.
async fn spawn_and_connect(
    dir: &StateDir,
    opts: &ClientOptions,
    request_timeout: Duration,
) -> Result<ControlClient, ClientError> {
    let socket = dir.socket_path();
    let lock = SpawnLock::try_acquire(&dir.spawn_lock_path(), std::process::id())
        .map_err(|e| unreachable(&socket, e))?;
    let Some(lock) = lock else {
        // Another process is spawning: do not spawn, only poll.
        return wait_ready(dir, opts, None, request_timeout).await;
    };
    // Another racer may have finished meanwhile.
    if let Ok(s) = connect_control(&socket).await {
        drop(lock);
        return Ok(ControlClient::from_stream_with(s, opts.request_timeout));
    }
    let child = spawn_if_no_owner(dir, opts)?;
    let ready = wait_ready(dir, opts, child.as_ref(), request_timeout).await;
    drop(lock);
    ready
}

/// Spawns the daemon unless the pidfile lock is held (a daemon is still starting, §S3.4
/// step 5): unlinks a stale socket and rotates `daemon.log` first.
fn spawn_if_no_owner(
    dir: &StateDir,
    opts: &ClientOptions,
) -> Result<Option<SpawnedChild>, ClientError> {
    let socket = dir.socket_path();
    if owner_alive(dir.path()) {
        return Ok(None);
    }
    if dir
        .remove_stale_socket()
        .map_err(|e| unreachable(&socket, e))?
    {
        tracing::info!("removed the stale socket {}", socket.display());
    }
    let max = config::daemon_log_max_bytes_for_rotation(dir.path());
    if let Err(e) = dir.rotate_daemon_log(max) {
        tracing::warn!("cannot rotate daemon.log: {e}");
    }
    let spawn_failed = |reason: String| ClientError::SpawnFailed {
        reason,
        log_tail: log_tail(&dir.daemon_log_path()),
    };
    let req = SpawnRequest::daemon_run(dir.path())
        .map_err(|e| spawn_failed(format!("cannot locate the appduct executable: {e}")))?;
    let child = opts
        .spawner
        .spawn_daemon(req)
        .map_err(|e| spawn_failed(format!("cannot start `appduct daemon run`: {e}")))?;
    tracing::info!(pid = child.pid(), "spawned the appduct daemon");
    Ok(Some(child))
}

/// Polls every 100 ms for up to 5 s until a `daemon.hello` round trip succeeds (any answer,
/// `-32601` included), failing at once if the spawned child exits (§S3.4 step 7).
async fn wait_ready(
    dir: &StateDir,
    opts: &ClientOptions,
    child: Option<&SpawnedChild>,
    request_timeout: Duration,
) -> Result<ControlClient, ClientError> {
    let socket = dir.socket_path();
    let deadline = tokio::time::Instant::now() + READY_WAIT;
    let spawn_failed = |reason: String| ClientError::SpawnFailed {
        reason,
        log_tail: log_tail(&dir.daemon_log_path()),
    };
    loop {
        if let Some(status) = child.and_then(SpawnedChild::try_wait) {
            return Err(spawn_failed(format!(
                "`appduct daemon run` exited ({status}) before it was ready; see {}",
                dir.daemon_log_path().display()
            )));
        }
        if let Ok(s) = connect_control(&socket).await {
            let client = ControlClient::from_stream_with(s, opts.request_timeout);
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            let hello = HelloParams::default()
                .with_client(Some(ClientInfo::new(
                    opts.client_name.clone(),
                    opts.client_version.clone(),
                )))
                .with_control_protocol(Some(u64::from(limits::CONTROL_PROTOCOL)));
            match client
                .call_with_timeout::<DaemonHello>(
                    hello,
                    request_timeout.min(remaining.max(POLL_INTERVAL)),
                )
                .await
            {
                Ok(_) | Err(ClientError::Rpc { .. }) => return Ok(client),
                Err(e) => tracing::debug!("daemon not ready yet: {e}"),
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(spawn_failed(format!(
                "the daemon did not become ready within {} s; see {}",
                READY_WAIT.as_secs(),
                dir.daemon_log_path().display()
            )));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Replaces an older daemon (§C7 step 4): under the spawn lock, `daemon.shutdown`, wait
/// until socket and pidfile are gone, spawn, wait ready. Requests use 3 s while the lock is held.
async fn replace_daemon(
    old: ControlClient,
    dir: &StateDir,
    opts: &ClientOptions,
) -> Result<ControlClient, ClientError> {
    let socket = dir.socket_path();
    let lock = SpawnLock::try_acquire(&dir.spawn_lock_path(), std::process::id())
        .map_err(|e| unreachable(&socket, e))?;
    let Some(lock) = lock else {
        // Another process is replacing or spawning it: wait for it to finish, then connect.
        drop(old);
        wait_lock_released(dir).await;
        return match connect_control(&socket).await {
            Ok(s) => Ok(ControlClient::from_stream_with(s, opts.request_timeout)),
            Err(e) if is_absent(&e) => spawn_and_connect(dir, opts, LOCKED_REQUEST_TIMEOUT).await,
            Err(e) => Err(ClientError::Unreachable { socket, source: e }),
        };
    };
    match old
        .call_with_timeout::<DaemonShutdown>(NoParams {}, LOCKED_REQUEST_TIMEOUT)
        .await
    {
        // Closed: the daemon went away before its answer reached us, which is what we want.
        Ok(_) | Err(ClientError::Closed) => {}
        Err(e) => return Err(e),
    }
    drop(old);
    let deadline = tokio::time::Instant::now() + GONE_WAIT;
    while socket.exists() || dir.pid_path().exists() {
        if tokio::time::Instant::now() >= deadline {
            return Err(ClientError::SpawnFailed {
                reason: format!(
                    "the old daemon did not exit within {} s after daemon.shutdown",
                    GONE_WAIT.as_secs()
                ),
                log_tail: log_tail(&dir.daemon_log_path()),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    let child = spawn_if_no_owner(dir, opts)?;
    let ready = wait_ready(dir, opts, child.as_ref(), LOCKED_REQUEST_TIMEOUT).await;
    drop(lock);
    ready
}

/// Waits (polling, bounded by a stale lock's age) until another process's spawn lock is gone.
async fn wait_lock_released(dir: &StateDir) {
    let deadline = tokio::time::Instant::now() + spawn_lock::STALE_AFTER;
    while dir.spawn_lock_path().exists() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
