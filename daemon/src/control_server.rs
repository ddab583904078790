//! The control-socket server (§C1–§C3, ARCHITECTURE.md#test-layers): one task per connection with a line
//! reader that dispatches each request concurrently, and a single writer fed by an ordered
//! queue of whole lines with back-pressure accounting. The daemon core plugs in through
//! [`ControlHandler`]; it receives validated [`ControlRequest`]s and a [`Connection`] handle.
//!
//! [`serve_connection`] is generic over the stream, so every behaviour except socket-file
//! handling is testable over `tokio::io::duplex`; [`serve_unix`] is the Unix-socket accept loop.
//!
//! What one connection can make the daemon hold is bounded: a line by the line cap, unwritten
//! output by the subscriber cap (a client that does not read is not read from), and `tools.call`s
//! in flight by [`limits::MAX_CALLS_IN_FLIGHT`] (one more is refused at once with
//! `invalid_request`; project decision). Every other method finishes without waiting on a
//! device, so the unwritten-output cap bounds them. The reader never stops because of requests
//! in flight: a hang-up is seen at once and its calls are cancelled (§C10.6), and
//! `tools.cancel` is never queued behind calls (§C8.10).

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use appduct_protocol::control::{ControlRequest, NotificationMethod, parse_plain_tools_call};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::{
    ErrorObject, Incoming, Overflow, RequestId, Response, parse_incoming, to_line,
};
use appduct_protocol::{limits, text};
use serde::Serialize;

#[cfg(unix)]
use crate::quiet_unix::QuietUnixStream;
use reader::RequestReader;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
#[cfg(unix)]
use tokio::net::UnixListener;
use tokio::sync::{Notify, watch};

mod peer_check;
#[cfg(windows)]
mod pipe;
#[cfg(windows)]
pub use pipe::{ControlListener, bind_control};
pub mod reader;

pub use peer_check::{FixedPeerCheck, PeerCheck, SameEuid};

/// A boxed `Send` future (`appduct-client`'s alias, shared with its seams), so handlers stay
/// usable as trait objects.
pub use appduct_client::BoxFuture;

/// Runs once when a connection closes (for example: cancel the `tools.call`s it issued with
/// reason `connection_closed`, §C10.6).
pub type CloseHook = Box<dyn FnOnce() + Send + 'static>;

tokio::task_local! {
    /// When the daemon read the request line the current task answers (SECURITY.md §4.18):
    /// approvals are stamped with it, not with the moment a handler gets to them.
    static REQUEST_READ_AT: std::time::Instant;
}

/// When the request line the current task is answering was read from its connection: the end
/// of the socket read that completed it (`None` outside a control request, e.g. the HTTP API).
/// A line taken from the framer after waiting for room keeps the time of that earlier read,
/// which only makes the stamp earlier.
pub fn request_read_at() -> Option<std::time::Instant> {
    REQUEST_READ_AT.try_with(|at| *at).ok()
}

/// Runs `f` with [`request_read_at`] answering `at`: for work a request moves off its task
/// (`spawn_blocking`).
pub fn with_request_read_at<R>(at: Option<std::time::Instant>, f: impl FnOnce() -> R) -> R {
    match at {
        Some(at) => REQUEST_READ_AT.sync_scope(at, f),
        None => f(),
    }
}

/// A close hook registered with [`Connection::add_close_hook`], for
/// [`Connection::remove_close_hook`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CloseHookId(u64);

/// Limits of one control connection. Defaults are the documented values (§C15); tests lower them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerOptions {
    /// Longest inbound line, excluding the terminator (§C2).
    pub line_cap: usize,
    /// Queued unwritten bytes above which a subscriber is disconnected and per-call
    /// notifications are skipped (§C15).
    pub subscriber_buffer_cap: usize,
    /// How long a closing connection may take to flush its queue (after an over-long line or
    /// at daemon shutdown) before it is closed anyway (project decision: a peer that stopped
    /// reading must not hold up shutdown).
    pub drain_timeout: Duration,
    /// Longest response line ([`limits::MAX_CONTROL_REPLY_BYTES`]): a longer one is answered
    /// `-32000` with `details: {reason: "too_large", limit}` instead. Also what a connection may
    /// queue beyond `subscriber_buffer_cap` before it is closed as a client that never reads.
    pub max_reply_bytes: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            line_cap: limits::CONTROL_LINE_CAP_BYTES,
            subscriber_buffer_cap: limits::SUBSCRIBER_BUFFER_CAP_BYTES,
            drain_timeout: Duration::from_secs(1),
            max_reply_bytes: limits::MAX_CONTROL_REPLY_BYTES,
        }
    }
}

/// Identifies one accepted control connection for the daemon's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(u64);

impl ConnectionId {
    fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "control#{}", self.0)
    }
}

/// What a handler answers for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Written as `result`.
    Ok(Value),
    /// Written as `error`.
    Err(ErrorObject),
    /// The handler already wrote the response with [`Connection::respond`] (for example
    /// `events.subscribe`, whose response must precede the first event under the new filter).
    AlreadySent,
}

impl Reply {
    /// Serialises a typed result; a value that cannot be serialised is an internal error.
    pub fn from_result<T: Serialize>(result: Result<T, ErrorObject>) -> Self {
        match result {
            Ok(v) => match serde_json::to_value(v) {
                Ok(v) => Self::Ok(v),
                Err(e) => Self::Err(ErrorObject::internal(format!(
                    "The daemon could not serialise its result: {e}"
                ))),
            },
            Err(e) => Self::Err(e),
        }
    }
}

/// The daemon side of the control plane: answers validated requests.
pub trait ControlHandler: Send + Sync + 'static {
    /// Handles one request. The future runs on its own task, so a slow request never delays
    /// others. `conn` may be cloned and kept (subscriptions, per-call notifications).
    fn handle(
        &self,
        conn: &Connection,
        id: RequestId,
        request: ControlRequest,
    ) -> BoxFuture<'static, Reply>;

    /// Called once after the connection closed and its close hooks ran.
    fn on_close(&self, _conn: ConnectionId) {}
}

// ---------------------------------------------------------------------------------------------
// Connection handle
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// No more reads or notifications; responses still owed to in-flight requests are queued.
    /// The writer flushes the queue and closes once nothing is in flight.
    Draining,
    Closed,
}

/// Whether a message may be skipped under back-pressure (§C15).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Response,
    Notification,
}

struct State {
    phase: Phase,
    queue: VecDeque<Line>,
    /// Bytes queued or being written, not yet fully written.
    unwritten: usize,
    /// The writer holds a popped line it has not finished writing.
    writing: bool,
    subscribed: bool,
    in_flight: HashSet<RequestId>,
    /// The `tools.call` requests among `in_flight`.
    calls_in_flight: HashSet<RequestId>,
    /// In registration order.
    hooks: Vec<(CloseHookId, CloseHook)>,
    next_hook: u64,
    hooks_ran: bool,
}

struct Shared {
    id: ConnectionId,
    peer_pid: Option<u32>,
    via: Via,
    /// `daemon.hello` `client.name`, once sent (who decided an approval, §C8.19).
    client_name: Mutex<Option<String>>,
    cap: usize,
    max_reply_bytes: usize,
    drain_timeout: Duration,
    state: Mutex<State>,
    /// Wakes the writer: a line was queued or the phase changed.
    wake_writer: Notify,
    /// Wakes [`Connection::flushed`] waiters.
    flushed: Notify,
    /// Wakes the reader once the unwritten bytes are back under the cap.
    room: Notify,
    /// `tools.call`s in flight past which another is refused ([`limits::MAX_CALLS_IN_FLIGHT`]).
    max_calls_in_flight: usize,
    /// `true` once draining or closed: the reader reads nothing more.
    stop_reading: watch::Sender<bool>,
    /// `true` once closed; reader and writer stop at once.
    closed: watch::Sender<bool>,
}

/// How a control connection reached the daemon: what the audit record's `transport` says
/// (§C12.1). Known by the daemon, unlike the `caller` a client names itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Via {
    /// The control socket (named pipe on Windows), or an in-memory connection of the daemon's
    /// host (tests, embedding).
    #[default]
    Local,
    /// A request to the loopback HTTP API, `/v1/…` or `/mcp` (docs/http.md §H1, §H7).
    Http,
}

/// What the daemon knows of a connection's peer beyond the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerInfo {
    /// The peer process, when found (SECURITY.md §4.19 for HTTP).
    pub pid: Option<u32>,
    pub via: Via,
}

/// A cloneable handle on one control connection, given to the handler.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("id", &self.shared.id)
            .field("peer_pid", &self.shared.peer_pid)
            .finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding this lock leaves the state consistent enough to keep closing.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Connection {
    fn new(peer: PeerInfo, opts: &ServerOptions) -> Self {
        Self {
            shared: Arc::new(Shared {
                id: ConnectionId::next(),
                peer_pid: peer.pid,
                via: peer.via,
                client_name: Mutex::new(None),
                cap: opts.subscriber_buffer_cap,
                max_reply_bytes: opts.max_reply_bytes,
                drain_timeout: opts.drain_timeout,
                state: Mutex::new(State {
                    phase: Phase::Open,
                    queue: VecDeque::new(),
                    unwritten: 0,
                    writing: false,
                    subscribed: false,
                    in_flight: HashSet::new(),
                    calls_in_flight: HashSet::new(),
                    hooks: Vec::new(),
                    next_hook: 0,
                    hooks_ran: false,
                }),
                wake_writer: Notify::new(),
                flushed: Notify::new(),
                room: Notify::new(),
                max_calls_in_flight: limits::MAX_CALLS_IN_FLIGHT,
                stop_reading: watch::channel(false).0,
                closed: watch::channel(false).0,
            }),
        }
    }

    pub fn id(&self) -> ConnectionId {
        self.shared.id
    }

    /// The peer's pid when the platform reported it (Unix sockets), or when the daemon found
    /// the process behind an HTTP request (Linux, SECURITY.md §4.19).
    pub fn peer_pid(&self) -> Option<u32> {
        self.shared.peer_pid
    }

    /// How the connection reached the daemon (§C12.1 `transport`).
    pub fn via(&self) -> Via {
        self.shared.via
    }

    /// The `client.name` this connection gave in `daemon.hello`, if any.
    pub fn client_name(&self) -> Option<String> {
        self.shared
            .client_name
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records the `daemon.hello` `client.name` (the latest wins).
    pub fn set_client_name(&self, name: &str) {
        *self
            .shared
            .client_name
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(name.to_owned());
    }

    /// How long a closing connection may take to flush ([`ServerOptions::drain_timeout`]); also
    /// the bound on waiting for a response to be flushed before teardown.
    pub fn drain_timeout(&self) -> Duration {
        self.shared.drain_timeout
    }

    /// True until the connection starts closing.
    pub fn is_open(&self) -> bool {
        lock(&self.shared.state).phase == Phase::Open
    }

    /// Marks the connection as having an active `events.subscribe` filter: from now on it is
    /// closed when its unwritten bytes exceed the subscriber cap (§C15). Returns `false`
    /// when the connection is no longer open (or was closed by this check).
    pub fn set_subscribed(&self) -> bool {
        let mut st = lock(&self.shared.state);
        if st.phase != Phase::Open {
            return false;
        }
        st.subscribed = true;
        if st.unwritten > self.shared.cap {
            self.close_over_cap(&mut st);
            return false;
        }
        true
    }

    /// Whether [`Connection::set_subscribed`] was called.
    pub fn is_subscribed(&self) -> bool {
        lock(&self.shared.state).subscribed
    }

    /// Queues one notification line (as produced by [`to_line`]; a missing `\n` is added).
    ///
    /// On a subscribed connection the line is always queued, and the connection is closed if
    /// its unwritten bytes then exceed the cap. Without a subscription the line is skipped
    /// while the unwritten bytes exceed the cap. Returns whether the line was queued.
    pub fn send_notification(&self, line: impl Into<Arc<[u8]>>) -> bool {
        self.enqueue(Line::Shared(terminated(line.into())), Kind::Notification)
    }

    /// Serialises and queues a notification (see [`Connection::send_notification`]).
    pub fn notify<N: NotificationMethod>(&self, params: &N::Params) -> bool {
        match N::notification(params).and_then(|n| to_line(&n)) {
            Ok(line) => self.send_notification(line),
            Err(e) => {
                tracing::error!(conn = %self.shared.id, "cannot serialise a {} notification: {e}", N::NAME);
                false
            }
        }
    }

    /// Writes the response to request `id` now, ordered before anything queued later (for
    /// example the first event under a new filter). The handler then returns
    /// [`Reply::AlreadySent`]. Returns `false` when `id` is not in flight (already answered)
    /// or the connection is no longer open.
    pub fn respond(&self, id: &RequestId, outcome: Result<Value, ErrorObject>) -> bool {
        self.respond_with(id, outcome.as_ref())
    }

    /// [`respond`](Self::respond) with any serialisable result, written straight into the
    /// line: a large result is not first copied into a `Value`.
    pub fn respond_with<T: Serialize>(
        &self,
        id: &RequestId,
        outcome: Result<&T, &ErrorObject>,
    ) -> bool {
        // Nothing to build for a request already answered or a connection that is gone.
        if !self.owes(id) {
            return false;
        }
        let limit = self.shared.max_reply_bytes;
        let line = match bounded_line(&ResponseLine { id, outcome }, limit) {
            Ok(line) => line,
            Err(BoundedLineError::TooLarge) => {
                tracing::warn!(conn = %self.shared.id, "the response to {id} would pass {limit} bytes; answering too_large");
                match to_line(&Response::error(Some(id.clone()), reply_too_large(limit))) {
                    Ok(line) => line,
                    Err(_) => return false,
                }
            }
            Err(BoundedLineError::Json(e)) => {
                tracing::error!(conn = %self.shared.id, "cannot serialise the response to {id}: {e}");
                match to_line(&Response::error(
                    Some(id.clone()),
                    ErrorObject::internal("The daemon could not serialise its response"),
                )) {
                    Ok(line) => line,
                    Err(_) => return false,
                }
            }
        };
        let mut st = lock(&self.shared.state);
        if !st.in_flight.remove(id) {
            return false;
        }
        st.calls_in_flight.remove(id);
        self.push(&mut st, Line::Owned(line), Kind::Response)
    }

    /// Registers a hook that runs once when the connection closes. If it has already closed
    /// and its hooks have run, `hook` runs soon on a task of its own, never on the calling
    /// thread (the caller may hold a lock the hook takes). See
    /// [`add_close_hook`](Self::add_close_hook) for a hook that can be removed again.
    pub fn on_close(&self, hook: impl FnOnce() + Send + 'static) {
        if let Err(hook) = self.add_close_hook(hook) {
            run_detached(hook);
        }
    }

    /// Registers a removable close hook (per-call hooks on a long-lived connection). Once the
    /// connection has closed and its hooks have run, nothing is registered and the hook comes
    /// back as `Err`, for the caller to act on after releasing its own locks.
    pub fn add_close_hook(
        &self,
        hook: impl FnOnce() + Send + 'static,
    ) -> Result<CloseHookId, CloseHook> {
        let mut st = lock(&self.shared.state);
        if st.hooks_ran {
            return Err(Box::new(hook));
        }
        st.next_hook += 1;
        let id = CloseHookId(st.next_hook);
        st.hooks.push((id, Box::new(hook)));
        Ok(id)
    }

    /// Removes a hook before it runs; `false` if it already ran or was removed.
    pub fn remove_close_hook(&self, id: CloseHookId) -> bool {
        let mut st = lock(&self.shared.state);
        let before = st.hooks.len();
        st.hooks.retain(|(hook, _)| *hook != id);
        st.hooks.len() != before
    }

    /// Stops reading, lets the responses still owed to in-flight requests and everything queued
    /// be written (at most `timeout`), then closes (shutdown step 5, §S3.6).
    pub async fn drain_and_close(&self, timeout: Duration) {
        self.begin_drain();
        if tokio::time::timeout(timeout, self.closed()).await.is_err() {
            tracing::warn!(conn = %self.shared.id, "control connection did not flush in time; closing");
        }
        self.close();
    }

    /// Closes the connection at once, dropping anything not yet written.
    pub fn close(&self) {
        let mut st = lock(&self.shared.state);
        self.set_closed(&mut st);
    }

    /// Resolves once everything queued so far has been written (or the connection closed).
    /// `daemon.shutdown` uses it to flush its response before teardown (§C8.3).
    pub async fn flushed(&self) {
        loop {
            let notified = self.shared.flushed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = lock(&self.shared.state);
                if st.phase == Phase::Closed || (st.queue.is_empty() && !st.writing) {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Resolves once the connection is closed.
    pub async fn closed(&self) {
        let mut rx = self.shared.closed.subscribe();
        // The sender lives in `self.shared`, so `wait_for` cannot fail while we hold it.
        let _ = rx.wait_for(|c| *c).await;
    }

    // -- internals ------------------------------------------------------------------------

    fn enqueue(&self, line: Line, kind: Kind) -> bool {
        let mut st = lock(&self.shared.state);
        self.push(&mut st, line, kind)
    }

    fn push(&self, st: &mut State, line: Line, kind: Kind) -> bool {
        // While draining, responses to requests still in flight are owed and still written.
        let accepts = match st.phase {
            Phase::Open => true,
            Phase::Draining => kind == Kind::Response,
            Phase::Closed => false,
        };
        if !accepts {
            return false;
        }
        let cap = self.shared.cap;
        if kind == Kind::Notification && !st.subscribed && st.unwritten > cap {
            tracing::warn!(
                conn = %self.shared.id,
                peer_pid = ?self.shared.peer_pid,
                "skipping a per-call notification: {} bytes are waiting to be written (cap {cap})",
                st.unwritten
            );
            return false;
        }
        st.unwritten += line.bytes().len();
        st.queue.push_back(line);
        if st.subscribed && st.unwritten > cap {
            self.close_over_cap(st);
            return false;
        }
        // Responses are always queued, and requests read before the reader stopped may still
        // answer: past one largest reply beyond the cap the client is not reading, and is cut
        // (project decision, issue #20), so a connection never holds more than that.
        if st.unwritten > cap.saturating_add(self.shared.max_reply_bytes) {
            tracing::warn!(
                conn = %self.shared.id,
                peer_pid = ?self.shared.peer_pid,
                "closing a control client that does not read: {} bytes are waiting to be written",
                st.unwritten
            );
            self.set_closed(st);
            return false;
        }
        self.shared.wake_writer.notify_one();
        true
    }

    fn close_over_cap(&self, st: &mut State) {
        tracing::warn!(
            conn = %self.shared.id,
            peer_pid = ?self.shared.peer_pid,
            "closing a subscriber that stopped reading: {} bytes are waiting to be written (cap {})",
            st.unwritten,
            self.shared.cap
        );
        self.set_closed(st);
    }

    fn set_closed(&self, st: &mut State) {
        if st.phase == Phase::Closed {
            return;
        }
        st.phase = Phase::Closed;
        st.queue.clear();
        st.unwritten = 0;
        self.shared.stop_reading.send_replace(true);
        self.shared.closed.send_replace(true);
        self.shared.wake_writer.notify_one();
        self.shared.flushed.notify_waiters();
    }

    fn begin_drain(&self) {
        let mut st = lock(&self.shared.state);
        if st.phase == Phase::Open {
            st.phase = Phase::Draining;
            self.shared.stop_reading.send_replace(true);
            self.shared.wake_writer.notify_one();
        }
    }

    /// The unwritten bytes while they exceed the cap (§C15): the reader takes no further
    /// line until the client has read some.
    fn over_cap(&self) -> Option<usize> {
        let st = lock(&self.shared.state);
        (st.unwritten > self.shared.cap).then_some(st.unwritten)
    }

    /// Reserves `id` for a new request; `false` if it is already in flight (§C3.1).
    fn begin_request(&self, id: &RequestId) -> bool {
        lock(&self.shared.state).in_flight.insert(id.clone())
    }

    /// Counts the in-flight request `id` as a `tools.call`; `false` (nothing counted) when
    /// [`limits::MAX_CALLS_IN_FLIGHT`] calls are already in flight on this connection.
    fn begin_call(&self, id: &RequestId) -> bool {
        let mut st = lock(&self.shared.state);
        if st.calls_in_flight.len() >= self.shared.max_calls_in_flight {
            return false;
        }
        st.calls_in_flight.insert(id.clone())
    }

    /// Whether a response to `id` would still be written: in flight on a connection that has
    /// not closed.
    fn owes(&self, id: &RequestId) -> bool {
        let st = lock(&self.shared.state);
        st.phase != Phase::Closed && st.in_flight.contains(id)
    }

    fn in_flight(&self, id: &RequestId) -> bool {
        lock(&self.shared.state).in_flight.contains(id)
    }

    /// Queues a response to a message that never became an in-flight request.
    fn reply_now(&self, response: &Response) {
        match to_line(response) {
            Ok(line) => {
                self.enqueue(Line::Owned(line), Kind::Response);
            }
            Err(e) => {
                tracing::error!(conn = %self.shared.id, "cannot serialise an error response: {e}")
            }
        }
    }

    /// Closes, runs the close hooks once, and reports whether this call ran them.
    fn finish(&self) -> bool {
        let hooks = {
            let mut st = lock(&self.shared.state);
            self.set_closed(&mut st);
            if st.hooks_ran {
                return false;
            }
            st.hooks_ran = true;
            std::mem::take(&mut st.hooks)
        };
        for (_, hook) in hooks {
            hook();
        }
        true
    }
}

/// Runs a hook on a task of its own (or here, outside any runtime).
/// A JSON-RPC response (§C3.1) over a borrowed result, serialised like
/// [`Response`](appduct_protocol::jsonrpc::Response).
struct ResponseLine<'a, T> {
    id: &'a RequestId,
    outcome: Result<&'a T, &'a ErrorObject>,
}

impl<T: Serialize> Serialize for ResponseLine<'_, T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("jsonrpc", appduct_protocol::jsonrpc::VERSION)?;
        m.serialize_entry("id", self.id)?;
        match self.outcome {
            Ok(result) => m.serialize_entry("result", result)?,
            Err(error) => m.serialize_entry("error", error)?,
        }
        m.end()
    }
}

fn run_detached(hook: CloseHook) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move { hook() });
        }
        Err(_) => hook(),
    }
}

/// A line in a connection's write queue: a response, built for this connection alone, or a
/// notification, which one event shares between its subscribers. A response is queued as
/// serialised, not copied into an `Arc` first (issue #24: one allocation less per call).
#[derive(Debug)]
enum Line {
    Owned(Vec<u8>),
    Shared(Arc<[u8]>),
}

impl Line {
    fn bytes(&self) -> &[u8] {
        match self {
            Line::Owned(line) => line,
            Line::Shared(line) => line,
        }
    }
}

fn terminated(line: Arc<[u8]>) -> Arc<[u8]> {
    if line.last() == Some(&b'\n') {
        line
    } else {
        let mut v = line.to_vec();
        v.push(b'\n');
        v.into()
    }
}

/// Answers `-32603` if a request task ends without a response (the handler panicked, or
/// returned [`Reply::AlreadySent`] without responding).
struct RespondGuard {
    conn: Connection,
    id: RequestId,
}

impl Drop for RespondGuard {
    fn drop(&mut self) {
        if self.conn.in_flight(&self.id) {
            // A client that hung up (its calls are cancelled) is routine, not a daemon failure:
            // one error line per pending request let any client grow the log.
            if self.conn.is_open() {
                tracing::error!(conn = %self.conn.id(), "request {} ended without a response", self.id);
            } else {
                tracing::debug!(conn = %self.conn.id(), "request {} ended after its connection closed", self.id);
            }
            self.conn.respond(
                &self.id,
                Err(ErrorObject::internal(
                    "The daemon failed while handling the request",
                )),
            );
        }
    }
}

/// Runs close hooks and `on_close` even if the connection future is dropped.
struct FinishGuard {
    conn: Connection,
    handler: Arc<dyn ControlHandler>,
}

impl Drop for FinishGuard {
    fn drop(&mut self) {
        if self.conn.finish() {
            self.handler.on_close(self.conn.id());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Per-connection tasks
// ---------------------------------------------------------------------------------------------

/// Serves one control connection until it closes (§C2–§C3): EOF or a read/write error closes
/// it; an over-long line is answered with `-32600` and then the connection closes; a subscriber
/// over the buffer cap is closed. Close hooks and [`ControlHandler::on_close`] run at the end.
pub fn serve_connection<S>(
    stream: S,
    handler: Arc<dyn ControlHandler>,
    opts: ServerOptions,
) -> impl Future<Output = ()> + Send + 'static
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    run_connection(stream, handler, opts, PeerInfo::default(), None)
}

/// [`serve_connection`] for a peer known by other means than the socket (the HTTP API's
/// loopback TCP peer, SECURITY.md §4.19): `peer.pid` is what [`Connection::peer_pid`] reports,
/// so approvals treat the connection like a socket peer; `peer.via` marks its audit records.
pub fn serve_connection_for(
    stream: impl AsyncRead + AsyncWrite + Send + Unpin + 'static,
    handler: Arc<dyn ControlHandler>,
    opts: ServerOptions,
    peer: PeerInfo,
) -> impl Future<Output = ()> + Send + 'static {
    run_connection(stream, handler, opts, peer, None)
}

async fn run_connection<S>(
    stream: S,
    handler: Arc<dyn ControlHandler>,
    opts: ServerOptions,
    peer: PeerInfo,
    shutdown: Option<watch::Receiver<bool>>,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let conn = Connection::new(peer, &opts);
    tracing::debug!(conn = %conn.id(), peer_pid = ?peer.pid, via = ?peer.via, "control connection opened");
    let _finish = FinishGuard {
        conn: conn.clone(),
        handler: handler.clone(),
    };
    let (reader, writer) = tokio::io::split(stream);
    tokio::join!(
        read_loop(reader, &conn, &handler, &opts, shutdown),
        write_loop(writer, &conn),
    );
    tracing::debug!(conn = %conn.id(), "control connection closed");
}

async fn read_loop<S: AsyncRead>(
    mut reader: ReadHalf<S>,
    conn: &Connection,
    handler: &Arc<dyn ControlHandler>,
    opts: &ServerOptions,
    shutdown: Option<watch::Receiver<bool>>,
) {
    let mut closed = conn.shared.closed.subscribe();
    let mut stop_reading = conn.shared.stop_reading.subscribe();
    let mut shutdown = shutdown;
    // Grows from nothing, and back down once no partial line is buffered (reader.rs).
    let mut framer = RequestReader::new(opts.line_cap);
    // The end of the latest read: the stamp of the lines it completed (SECURITY.md §4.18).
    let mut read_at = std::time::Instant::now();
    let drain = 'read: loop {
        // Lines are taken one at a time, each only while the connection has room: responses are
        // always queued (§C15), so a client that keeps sending requests but never reads is
        // throttled here while its unwritten bytes exceed the cap. What waits stays in the framer
        // (at most one read) or in the socket. Requests in flight never stop the reader.
        loop {
            match wait_for_room(conn, &mut closed, &mut stop_reading, &mut shutdown).await {
                Room::Yes => {}
                Room::Closed => return,
                Room::Drain => break 'read true,
            }
            match framer.next_line_span() {
                None => break,
                Some(Ok(span)) => dispatch(conn, handler, framer.line(span), read_at),
                Some(Err(Overflow { cap })) => {
                    tracing::warn!(conn = %conn.id(), peer_pid = ?conn.peer_pid(), "request line longer than {cap} bytes; closing");
                    conn.reply_now(&Response::error(None, ErrorObject::line_too_long(cap)));
                    break 'read true;
                }
            }
        }
        let n = tokio::select! {
            r = framer.read_from(&mut reader) => r,
            _ = closed.wait_for(|c| *c) => return,
            _ = stop_reading.wait_for(|s| *s) => break true,
            _ = wait_shutdown(&mut shutdown) => break true,
        };
        match n {
            Ok(0) => break false,
            Ok(_) => read_at = std::time::Instant::now(),
            Err(e) => {
                tracing::debug!(conn = %conn.id(), "control read failed: {e}");
                break false;
            }
        }
    };
    if drain {
        conn.begin_drain();
        if tokio::time::timeout(opts.drain_timeout, closed.wait_for(|c| *c))
            .await
            .is_err()
        {
            tracing::warn!(conn = %conn.id(), "control connection did not flush in time; closing");
        }
    }
    conn.close();
}

enum Room {
    Yes,
    Closed,
    /// Shutdown or a drain began while waiting.
    Drain,
}

async fn wait_for_room(
    conn: &Connection,
    closed: &mut watch::Receiver<bool>,
    stop_reading: &mut watch::Receiver<bool>,
    shutdown: &mut Option<watch::Receiver<bool>>,
) -> Room {
    // The common case: room at once, without registering for a wake-up.
    if conn.over_cap().is_none() {
        return Room::Yes;
    }
    let mut warned = false;
    loop {
        let room = conn.shared.room.notified();
        tokio::pin!(room);
        room.as_mut().enable();
        let Some(bytes) = conn.over_cap() else {
            return Room::Yes;
        };
        if !warned {
            warned = true;
            tracing::warn!(
                conn = %conn.id(),
                peer_pid = ?conn.peer_pid(),
                "not reading requests while {bytes} response bytes (more than {}) wait to be written",
                conn.shared.cap
            );
        }
        tokio::select! {
            _ = room => {}
            _ = closed.wait_for(|c| *c) => return Room::Closed,
            _ = stop_reading.wait_for(|s| *s) => return Room::Drain,
            _ = wait_shutdown(shutdown) => return Room::Drain,
        }
    }
}

async fn wait_shutdown(rx: &mut Option<watch::Receiver<bool>>) {
    match rx {
        Some(rx) => {
            if rx.wait_for(|s| *s).await.is_err() {
                // The sender is gone: nobody can ask for shutdown any more.
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

fn dispatch(
    conn: &Connection,
    handler: &Arc<dyn ControlHandler>,
    line: &[u8],
    read_at: std::time::Instant,
) {
    // A `tools.call` in its common form skips the `Value` trees of the general path (issue
    // #24); it gives the same id and params, and anything unusual takes the general path.
    let (id, parsed) = match parse_plain_tools_call(line) {
        Some((id, params)) => {
            if !conn.begin_request(&id) {
                conn.reply_now(&Response::error(
                    Some(id.clone()),
                    ErrorObject::duplicate_id(&id),
                ));
                return;
            }
            (id, ControlRequest::ToolsCall(params))
        }
        None => match parse_general(conn, line) {
            Some(parsed) => parsed,
            None => return,
        },
    };
    run_request(conn, handler, id, parsed, read_at);
}

/// The general path of [`dispatch`]: any line. `None` when it was answered (or ignored) here.
fn parse_general(conn: &Connection, line: &[u8]) -> Option<(RequestId, ControlRequest)> {
    let request = match parse_incoming(line) {
        Incoming::Empty => return None,
        Incoming::Notification(n) => {
            tracing::debug!(conn = %conn.id(), method = %n.method, "ignoring a client notification");
            return None;
        }
        Incoming::Invalid(response) => {
            conn.reply_now(&response);
            return None;
        }
        Incoming::Request(r) => r,
    };
    if !conn.begin_request(&request.id) {
        conn.reply_now(&Response::error(
            Some(request.id.clone()),
            ErrorObject::duplicate_id(&request.id),
        ));
        return None;
    }
    let id = request.id;
    match parse_request(&request.method, request.params) {
        Ok(p) => Some((id, p)),
        Err(e) => {
            conn.respond(&id, Err(e));
            None
        }
    }
}

/// Runs a parsed request on a task of its own; the response is written when it ends.
fn run_request(
    conn: &Connection,
    handler: &Arc<dyn ControlHandler>,
    id: RequestId,
    parsed: ControlRequest,
    read_at: std::time::Instant,
) {
    if matches!(parsed, ControlRequest::ToolsCall(_)) && !conn.begin_call(&id) {
        tracing::warn!(
            conn = %conn.id(),
            peer_pid = ?conn.peer_pid(),
            "refusing a tools.call: {} are in flight on this connection",
            conn.shared.max_calls_in_flight
        );
        conn.respond(&id, Err(too_many_calls(conn.shared.max_calls_in_flight)));
        return;
    }
    let conn = conn.clone();
    let handler = handler.clone();
    tokio::spawn(REQUEST_READ_AT.scope(read_at, async move {
        let guard = RespondGuard {
            conn: conn.clone(),
            id: id.clone(),
        };
        let reply = handler.handle(&conn, id.clone(), parsed).await;
        match reply {
            Reply::Ok(v) => {
                conn.respond(&id, Ok(v));
            }
            Reply::Err(e) => {
                conn.respond(&id, Err(e));
            }
            Reply::AlreadySent => {}
        }
        drop(guard);
    }));
}

/// A reply longer than [`ServerOptions::max_reply_bytes`] (project decision, issue #20): the
/// caller narrows or pages its request, so `-32000 invalid_request` with `details.reason`.
pub fn reply_too_large(limit: usize) -> ErrorObject {
    ErrorObject::application(
        ErrorType::InvalidRequest,
        format!(
            "The reply would be longer than {limit} bytes; narrow the request (a selector, a \
             filter, a smaller limit) and page through the result"
        ),
    )
    .with_details(json!({ "reason": "too_large", "limit": limit }))
}

enum BoundedLineError {
    TooLarge,
    Json(serde_json::Error),
}

/// Bytes reserved for a response line before serialising it (a call's response is ~300).
const RESPONSE_CAPACITY: usize = 512;

/// [`to_line`] that stops writing once the line passes `limit` bytes (terminator included), so
/// an oversized reply is never built whole.
fn bounded_line<T: Serialize>(message: &T, limit: usize) -> Result<Vec<u8>, BoundedLineError> {
    struct Bounded {
        out: Vec<u8>,
        limit: usize,
    }
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.out.len() + buf.len() >= self.limit {
                return Err(std::io::Error::other("too large"));
            }
            self.out.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Most responses fit: one allocation instead of doubling from 8 bytes.
    let mut w = Bounded {
        out: Vec::with_capacity(RESPONSE_CAPACITY.min(limit)),
        limit,
    };
    match serde_json::to_writer(&mut w, message) {
        Ok(()) => {
            w.out.push(b'\n');
            Ok(w.out)
        }
        Err(e) if e.is_io() => Err(BoundedLineError::TooLarge),
        Err(e) => Err(BoundedLineError::Json(e)),
    }
}

/// Replies built off the runtime thread at once (see [`respond_off_thread`]).
static LARGE_REPLY_BUILDERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Builds and writes the response to `id` on the blocking pool, at most two at a time, and
/// answers [`Reply::AlreadySent`] (project decision, issue #20): the daemon runs on one thread,
/// and a reply of up to [`limits::MAX_CONTROL_REPLY_BYTES`] takes long enough to build and
/// serialise that every other session would wait for it. Nothing is built once the connection
/// has closed (a client that never read was cut while the request waited).
pub async fn respond_off_thread<T, F>(conn: Connection, id: RequestId, build: F) -> Reply
where
    T: Serialize,
    F: FnOnce() -> Result<T, ErrorObject> + Send + 'static,
{
    let Ok(_permit) = LARGE_REPLY_BUILDERS.acquire().await else {
        return Reply::Err(ErrorObject::internal("the reply builders are gone"));
    };
    if !conn.owes(&id) {
        return Reply::AlreadySent;
    }
    let built = tokio::task::spawn_blocking(move || {
        let result = build();
        conn.respond_with(&id, result.as_ref());
    })
    .await;
    match built {
        Ok(()) => Reply::AlreadySent,
        Err(e) => Reply::Err(ErrorObject::internal(format!(
            "The daemon could not build its reply: {e}"
        ))),
    }
}

/// Bytes of `value`'s compact JSON, counted without building it: what byte-bounded pages add
/// up per item (0 if it cannot be serialised, which a reply then reports itself).
pub fn serialized_len<T: Serialize + ?Sized>(value: &T) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => 0,
    }
}

/// What the items of one byte-bounded page (`tools.list`, `events.list`, `events.since`) may
/// take together: 15 MiB, 1 MiB under the reply cap these pages were sized for (16 MiB)
/// before issue #17 raised it for content results, so pages keep their size.
pub const PAGE_ITEM_BYTES: usize = 15 * 1_048_576;

/// The refusal of a `tools.call` past [`limits::MAX_CALLS_IN_FLIGHT`] on one connection (project
/// decision): the caller can act on it, so `-32000 invalid_request` with `details.reason`.
fn too_many_calls(limit: usize) -> ErrorObject {
    ErrorObject::application(
        ErrorType::InvalidRequest,
        format!(
            "Too many tool calls in flight on this connection: {limit} are waiting for their \
             results; wait for one to finish or cancel one (tools.cancel), then call again"
        ),
    )
    .with_details(json!({ "reason": "too_many_calls_in_flight", "limit": limit }))
}

/// [`ControlRequest::parse`], except that a method name too long to be any method is answered
/// `-32601` quoting only its first [`limits::MAX_QUOTED_METHOD_LEN`] UTF-16 units and `…`
/// (project decision): the reply escapes the name, so quoting a hostile line whole could make
/// the reply several times the line's size.
fn parse_request(method: &str, params: Option<Value>) -> Result<ControlRequest, ErrorObject> {
    let quotable = text::truncate_utf16(method, limits::MAX_QUOTED_METHOD_LEN);
    if quotable.len() == method.len() {
        return ControlRequest::parse_owned(method, params);
    }
    Err(ErrorObject::method_not_found(&format!("{quotable}…")))
}

/// Bytes one write of the control writer gathers from its queue (a single longer line still
/// goes out whole).
const WRITE_BATCH_BYTES: usize = 64 * 1024;

async fn write_loop<S: AsyncWrite>(mut writer: WriteHalf<S>, conn: &Connection) {
    let shared = &conn.shared;
    let mut closed = shared.closed.subscribe();
    // Lines queued while the previous write was going out leave in one write: a burst of
    // responses costs one syscall, not one each. Reused, so the steady state allocates nothing.
    let mut batch: Vec<u8> = Vec::new();
    loop {
        enum Next {
            Write,
            Wait,
            Drained,
            Stop,
        }
        let next = {
            let mut st = lock(&shared.state);
            if st.phase == Phase::Closed {
                Next::Stop
            } else if !st.queue.is_empty() {
                st.writing = true;
                batch.clear();
                while batch.len() < WRITE_BATCH_BYTES {
                    let Some(line) = st.queue.pop_front() else {
                        break;
                    };
                    batch.extend_from_slice(line.bytes());
                }
                Next::Write
            } else if st.phase == Phase::Draining && st.in_flight.is_empty() {
                Next::Drained
            } else {
                Next::Wait
            }
        };
        match next {
            Next::Write => {}
            Next::Stop => return,
            Next::Wait => {
                tokio::select! {
                    _ = shared.wake_writer.notified() => {}
                    _ = closed.wait_for(|c| *c) => return,
                }
                continue;
            }
            Next::Drained => {
                // Everything queued was written.
                let _ = writer.shutdown().await;
                conn.close();
                return;
            }
        };
        let written = tokio::select! {
            r = write_line(&mut writer, &batch) => r,
            _ = closed.wait_for(|c| *c) => return,
        };
        if let Err(e) = written {
            tracing::debug!(conn = %conn.id(), "control write failed: {e}");
            conn.close();
            return;
        }
        let written_len = batch.len();
        if batch.capacity() > 4 * WRITE_BATCH_BYTES {
            // One huge line came through; do not keep its buffer for the connection's life.
            batch = Vec::new();
        }
        let mut st = lock(&shared.state);
        st.writing = false;
        st.unwritten = st.unwritten.saturating_sub(written_len);
        if st.unwritten <= shared.cap {
            shared.room.notify_waiters();
        }
        if st.queue.is_empty() {
            shared.flushed.notify_waiters();
        }
    }
}

async fn write_line<W: AsyncWrite + Unpin>(w: &mut W, line: &[u8]) -> std::io::Result<()> {
    w.write_all(line).await?;
    w.flush().await
}

// ---------------------------------------------------------------------------------------------
// Accept loop (the Unix socket and the Windows pipe alike)
// ---------------------------------------------------------------------------------------------

/// What the platform tells about the peer of an accepted control connection.
#[derive(Debug, Clone, Copy)]
struct Peer {
    /// The peer's effective uid; `None` when it cannot be read. On Windows: the daemon's own
    /// stand-in uid when the peer process runs as the daemon's account, else `None` (§S4.1).
    euid: Option<u32>,
    pid: Option<u32>,
}

/// A control listener: the Unix domain socket (§C1.1) or the Windows named pipe (§S4.1).
trait AcceptControl {
    /// An accepted connection, before it is handed to [`run_connection`].
    type Accepted;
    /// The connection as [`run_connection`] reads and writes it.
    type Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static;
    /// What the accept loop's messages call the listener.
    const WHAT: &'static str;
    /// Waits for the next connection.
    async fn accept_next(&self) -> std::io::Result<Self::Accepted>;
    /// Who is on the other end.
    fn peer(accepted: &Self::Accepted) -> Peer;
    /// Turns an admitted connection into the stream the connection task runs on.
    fn into_stream(accepted: Self::Accepted) -> std::io::Result<Self::Stream>;
}

/// Accepts control connections until `shutdown` turns true (§C1.1, §S3.6 step 5).
///
/// Each peer's effective uid is read from the socket (on Windows: whether its process runs as
/// the daemon's account, §S4.1); a peer refused by `peer_check` (which sees `None` when the
/// uid cannot be read) is closed without a reply. On shutdown the loop stops accepting, asks
/// every open connection to flush and close, and returns once they have (each bounded by
/// [`ServerOptions::drain_timeout`]).
pub async fn serve_control(
    listener: ControlListener,
    handler: Arc<dyn ControlHandler>,
    opts: ServerOptions,
    peer_check: Arc<dyn PeerCheck>,
    shutdown: watch::Receiver<bool>,
) {
    accept_loop(listener, handler, opts, peer_check, shutdown).await;
}

/// The Unix name of [`serve_control`].
#[cfg(unix)]
pub use self::serve_control as serve_unix;

async fn accept_loop<L: AcceptControl>(
    listener: L,
    handler: Arc<dyn ControlHandler>,
    opts: ServerOptions,
    peer_check: Arc<dyn PeerCheck>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            r = listener.accept_next() => r,
            r = shutdown.wait_for(|s| *s) => {
                if r.is_err() {
                    tracing::warn!("control shutdown signal dropped; stopping the accept loop");
                }
                break;
            }
            // Reap finished connection tasks so the set does not grow without bound.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let accepted = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                tracing::warn!("control {} accept failed: {e}", L::WHAT);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Peer { euid, pid } = L::peer(&accepted);
        if !peer_check.allow(euid) {
            tracing::warn!(
                ?euid,
                peer_pid = ?pid,
                "refusing a control connection from another user"
            );
            drop(accepted);
            continue;
        }
        let stream = match L::into_stream(accepted) {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!("cannot take over a control connection: {e}");
                continue;
            }
        };
        connections.spawn(run_connection(
            stream,
            handler.clone(),
            opts,
            PeerInfo {
                pid,
                via: Via::Local,
            },
            Some(shutdown.clone()),
        ));
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// The control socket's listener (§C1.1): a Unix domain socket.
#[cfg(unix)]
pub type ControlListener = UnixListener;

/// Binds the control socket at `path` (the caller sets its mode).
#[cfg(unix)]
pub fn bind_control(path: &std::path::Path) -> std::io::Result<ControlListener> {
    UnixListener::bind(path)
}

#[cfg(unix)]
impl AcceptControl for UnixListener {
    type Accepted = tokio::net::UnixStream;
    type Stream = QuietUnixStream;
    const WHAT: &'static str = "socket";

    async fn accept_next(&self) -> std::io::Result<Self::Accepted> {
        self.accept().await.map(|(stream, _)| stream)
    }

    fn peer(stream: &Self::Accepted) -> Peer {
        let cred = stream.peer_cred().ok();
        Peer {
            euid: cred.map(|c| c.uid()),
            pid: cred
                .and_then(|c| c.pid())
                .and_then(|p| u32::try_from(p).ok()),
        }
    }

    fn into_stream(stream: Self::Accepted) -> std::io::Result<Self::Stream> {
        QuietUnixStream::new(stream)
    }
}
