//! The event bus (§C13): every daemon notification goes through [`EventBus::emit`] or
//! [`EventBus::emit_app_event`], which stamp `ts` from the [`Clock`], keep each live session's
//! ring buffer of `app_event`s with its gap-free `seq`, deliver to subscribers whose filter
//! matches (truncating payloads per delivery, §C13.6), feed in-process taps for tests, and queue
//! every non-`app_event` notification for the `events.log` writer (§S3.7, §C12.3).
//!
//! Delivery happens under the bus lock, so every subscriber sees events in emission order and a
//! subscription with replay (§C8.12) can be registered atomically. Sinks therefore must not
//! block and must not call back into the bus or the session engine: they queue and return.
//! Lock order across the daemon is engine state → bus; the bus never calls the engine.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use appduct_protocol::control::{
    AppEventData, EventData, EventKind, EventNotification, EventsLogStatus, EventsSinceResult,
    ParamError, Replay, SubscribeParams,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::glob::Glob;
use appduct_protocol::jsonrpc::ErrorObject;
use serde_json::{Number, Value, json};
use tokio::sync::mpsc;

use crate::clock::Clock;
use crate::control_server::{PAGE_ITEM_BYTES, serialized_len};
use appduct_client::state_dir;

/// Records the events-log writer may hold before new ones are dropped and counted as failed
/// writes (the same bound as the audit queue, §C12.1).
pub const EVENTS_LOG_QUEUE: usize = 10_000;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// Filters and sinks
// ---------------------------------------------------------------------------------------------

/// What one subscriber receives (§C8.12). The bound session is already resolved to an id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    /// Only this session's events; `None` = every session, present and future, and
    /// session-less events.
    pub session_id: Option<String>,
    /// Absent = every kind.
    pub kinds: Option<Vec<EventKind>>,
    /// Filters `app_event` by name; other kinds are unaffected.
    pub name: Option<Glob>,
    /// Truncates `app_event` payloads per delivery (§C13.6).
    pub payload_max_bytes: Option<u64>,
}

impl EventFilter {
    /// The filter of validated `events.subscribe` params, with the selector resolved to
    /// `bound_session`.
    pub fn from_params(
        params: &SubscribeParams,
        bound_session: Option<String>,
    ) -> Result<Self, ErrorObject> {
        let name = params
            .name
            .as_deref()
            .map(Glob::new)
            .transpose()
            .map_err(|e| ErrorObject::from(ParamError::invalid("name", e)))?;
        Ok(Self {
            session_id: bound_session,
            kinds: params.kinds.clone(),
            name,
            payload_max_bytes: params.payload_max_bytes,
        })
    }

    fn admits_kind(&self, kind: EventKind) -> bool {
        self.kinds.as_ref().is_none_or(|k| k.contains(&kind))
    }

    fn admits_name(&self, name: &str) -> bool {
        self.name.as_ref().is_none_or(|g| g.matches(name))
    }

    /// Whether `n` is delivered under this filter (before truncation).
    pub fn matches(&self, n: &EventNotification) -> bool {
        if let Some(bound) = &self.session_id
            && n.session_id.as_deref() != Some(bound.as_str())
        {
            return false;
        }
        if !self.admits_kind(n.kind()) {
            return false;
        }
        match &n.data {
            EventData::AppEvent(d) => self.admits_name(d.name()),
            _ => true,
        }
    }
}

/// Where a subscriber's notifications go. Called under the bus lock: it must queue and return
/// at once, and must not call the bus or the session engine. Returning `false` ends the
/// subscription (its connection is gone or over its buffer cap).
pub trait EventSink: Send {
    fn deliver(&mut self, notification: &EventNotification) -> bool;
}

impl<F> EventSink for F
where
    F: FnMut(&EventNotification) -> bool + Send,
{
    fn deliver(&mut self, notification: &EventNotification) -> bool {
        self(notification)
    }
}

/// Handle of one subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubscriptionId(u64);

/// One `events.subscribe` as the bus sees it.
#[derive(Debug, Clone, Default)]
pub struct SubscribeRequest {
    pub filter: EventFilter,
    /// `since` of §C8.12: replay the bound session's retained matching `app_event`s with a
    /// greater `seq` before live events. Requires a bound session.
    pub since: Option<u64>,
    /// The connection's previous subscription, removed in the same step (a connection has at
    /// most one filter, and a new one replaces it entirely).
    pub replaces: Option<SubscriptionId>,
}

/// `events.since` (§C8.13) on a resolved session.
#[derive(Debug, Clone, Default)]
pub struct SinceQuery {
    pub since: u64,
    pub limit: Option<u64>,
    pub name: Option<Glob>,
    pub payload_max_bytes: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// Payload truncation (§C13.6)
// ---------------------------------------------------------------------------------------------

/// The `app_event` data one delivery carries: whole when `payload_max_bytes` is absent or the
/// compact payload fits, else the truncated form. The retained event is never modified.
pub fn truncate_app_event(data: &AppEventData, payload_max_bytes: Option<u64>) -> AppEventData {
    let (Some(max), AppEventData::Full { name, payload, ts }) = (payload_max_bytes, data) else {
        return data.clone();
    };
    // Compact JSON, object keys in received order (serde_json `preserve_order`).
    let json = payload.to_string();
    let bytes = json.len() as u64;
    if bytes <= max {
        return data.clone();
    }
    let mut end = usize::try_from(max).unwrap_or(usize::MAX).min(json.len());
    while !json.is_char_boundary(end) {
        end -= 1;
    }
    AppEventData::Truncated {
        name: name.clone(),
        payload_preview: json[..end].to_owned(),
        truncated: true,
        payload_bytes: bytes,
        ts: ts.clone(),
    }
}

/// `n` as delivered under `payload_max_bytes`.
pub fn for_delivery(n: &EventNotification, payload_max_bytes: Option<u64>) -> EventNotification {
    match (&n.data, payload_max_bytes) {
        (EventData::AppEvent(d), Some(_)) => {
            let mut delivered = n.clone();
            delivered.data = EventData::AppEvent(truncate_app_event(d, payload_max_bytes));
            delivered
        }
        _ => n.clone(),
    }
}

// ---------------------------------------------------------------------------------------------
// The bus
// ---------------------------------------------------------------------------------------------

/// A live session's retained `app_event`s and its sequence counter (§C13.2, §C13.3).
#[derive(Debug, Default)]
struct SessionBuffer {
    ring: VecDeque<EventNotification>,
    /// Last assigned `seq`; 0 before the first app event.
    high_water_mark: u64,
}

struct Subscriber {
    filter: EventFilter,
    sink: Box<dyn EventSink>,
}

#[derive(Default)]
struct BusState {
    buffers: HashMap<String, SessionBuffer>,
    /// Ordered by id so delivery order between subscribers is stable.
    subscribers: Vec<(SubscriptionId, Subscriber)>,
    next_subscription: u64,
    taps: Vec<mpsc::UnboundedSender<EventNotification>>,
}

struct BusInner {
    clock: Arc<dyn Clock>,
    buffer_size: usize,
    log: Option<EventsLog>,
    state: Mutex<BusState>,
}

/// The daemon's event bus. Cheap to clone; clones share one bus.
#[derive(Clone)]
pub struct EventBus {
    inner: Arc<BusInner>,
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = lock(&self.inner.state);
        f.debug_struct("EventBus")
            .field("buffer_size", &self.inner.buffer_size)
            .field("sessions", &state.buffers.len())
            .field("subscribers", &state.subscribers.len())
            .field("events_log", &self.inner.log)
            .finish()
    }
}

fn unknown_session(session_id: &str) -> ErrorObject {
    ErrorObject::application(
        ErrorType::UnknownSession,
        format!("Session {session_id} is not live (revoked or expired)"),
    )
    .with_details(json!({ "sessionId": session_id }))
}

impl EventBus {
    /// A bus keeping `buffer_size` (`eventBufferSize`, at least 1) app events per session, with
    /// no `events.log`.
    pub fn new(clock: Arc<dyn Clock>, buffer_size: usize) -> Self {
        Self::build(clock, buffer_size, None)
    }

    /// Like [`new`](Self::new), writing every non-`app_event` notification to `log`.
    pub fn with_events_log(clock: Arc<dyn Clock>, buffer_size: usize, log: EventsLog) -> Self {
        Self::build(clock, buffer_size, Some(log))
    }

    fn build(clock: Arc<dyn Clock>, buffer_size: usize, log: Option<EventsLog>) -> Self {
        Self {
            inner: Arc::new(BusInner {
                clock,
                buffer_size: buffer_size.max(1),
                log,
                state: Mutex::new(BusState::default()),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, BusState> {
        lock(&self.inner.state)
    }

    /// Emits a notification of any kind but `app_event` (which goes through
    /// [`emit_app_event`](Self::emit_app_event) to get its `seq`). `session_id` is absent only
    /// for `daemon_started`; for `link_*` it is the link's id. Returns what was emitted.
    pub fn emit(
        &self,
        session_id: Option<&str>,
        alias: Option<&str>,
        data: EventData,
    ) -> EventNotification {
        let notification = EventNotification::new(self.inner.clock.now_unix_ms(), 0, data)
            .with_session_id(session_id.map(str::to_owned))
            .with_alias(alias.map(str::to_owned));
        if let Some(log) = &self.inner.log
            && notification.kind() != EventKind::AppEvent
        {
            log.enqueue(&notification);
        }
        let mut state = self.state();
        state.deliver(&notification);
        notification
    }

    /// [`emit`](Self::emit) of a session's event whose owned form is built only when a
    /// subscriber or tap could receive it (`build`); otherwise only the `events.log` line is
    /// written, serialised from `data` (borrowed fields that serialise exactly as `build()`'s
    /// data). A call emits two such events; with nobody subscribed this copies none of its
    /// strings (issue #24).
    pub fn emit_lazy<D: serde::Serialize>(
        &self,
        session_id: &str,
        alias: &str,
        kind: EventKind,
        data: &D,
        build: impl FnOnce() -> EventData,
    ) {
        let ts = self.inner.clock.now_unix_ms();
        // Under the lock, so a subscription cannot start between the check and the delivery.
        let mut state = self.state();
        if state.wants(session_id, kind) {
            let notification = EventNotification::new(ts, 0, build())
                .with_session_id(Some(session_id.to_owned()))
                .with_alias(Some(alias.to_owned()));
            if let Some(log) = &self.inner.log {
                log.enqueue(&notification);
            }
            state.deliver(&notification);
            return;
        }
        drop(state);
        if let Some(log) = &self.inner.log {
            log.enqueue_serialized(&BorrowedEvent {
                kind,
                session_id,
                alias,
                ts,
                data,
            });
        }
    }

    /// Appends an accepted `event` frame to the session's ring buffer with the next `seq` and
    /// emits it as `app_event` (§D6.2 step 7). `payload` is `null` when the frame had none.
    /// Returns the `seq`, or `None` when the session has no buffer (revoked or expired
    /// meanwhile), in which case nothing is emitted.
    pub fn emit_app_event(
        &self,
        session_id: &str,
        alias: Option<&str>,
        name: String,
        payload: Value,
        ts: Number,
    ) -> Option<u64> {
        let now = self.inner.clock.now_unix_ms();
        let capacity = self.inner.buffer_size;
        let mut state = self.state();
        let buffer = state.buffers.get_mut(session_id)?;
        buffer.high_water_mark += 1;
        let seq = buffer.high_water_mark;
        let notification = EventNotification::new(
            now,
            seq,
            EventData::AppEvent(AppEventData::Full { name, payload, ts }),
        )
        .with_session_id(Some(session_id.to_owned()))
        .with_alias(alias.map(str::to_owned));
        if buffer.ring.len() >= capacity {
            buffer.ring.pop_front();
        }
        buffer.ring.push_back(notification.clone());
        state.deliver(&notification);
        Some(seq)
    }

    /// Creates the session's ring buffer (at claim). An existing buffer is kept.
    pub fn open_session(&self, session_id: &str) {
        self.state()
            .buffers
            .entry(session_id.to_owned())
            .or_default();
    }

    /// Drops the session's ring buffer and counter (revoke or expiry). Suspension keeps them.
    pub fn close_session(&self, session_id: &str) {
        self.state().buffers.remove(session_id);
    }

    /// Whether the session has a ring buffer (it is live).
    pub fn has_session(&self, session_id: &str) -> bool {
        self.state().buffers.contains_key(session_id)
    }

    /// The session's last assigned `seq` (0 before the first app event).
    pub fn high_water_mark(&self, session_id: &str) -> Option<u64> {
        self.state()
            .buffers
            .get(session_id)
            .map(|b| b.high_water_mark)
    }

    /// Registers a subscription. Under the bus lock, atomically: removes `replaces`, takes the
    /// replay (when `since` is set), registers the filter, calls `before_live` (the caller
    /// writes its response there), then delivers the replay in `seq` order. Live events follow,
    /// with nothing lost or repeated in between (§C8.12, §C14).
    ///
    /// Errors: `since` without a bound session or beyond the high-water mark → `-32602`; a
    /// bound session without a buffer when `since` is set → `unknown_session`.
    pub fn subscribe<S, F>(
        &self,
        request: SubscribeRequest,
        sink: S,
        before_live: F,
    ) -> Result<SubscriptionId, ErrorObject>
    where
        S: EventSink + 'static,
        F: FnOnce(Option<Replay>),
    {
        let mut state = self.state();
        let replay = match request.since {
            None => None,
            Some(since) => {
                let Some(session_id) = request.filter.session_id.as_deref() else {
                    return Err(ParamError::invalid("since", "requires \"sessionSelector\"").into());
                };
                let buffer = state
                    .buffers
                    .get(session_id)
                    .ok_or_else(|| unknown_session(session_id))?;
                check_since(buffer, since)?;
                let events: Vec<EventNotification> =
                    if request.filter.admits_kind(EventKind::AppEvent) {
                        matching(buffer, since, request.filter.name.as_ref())
                            .cloned()
                            .collect()
                    } else {
                        Vec::new()
                    };
                let info = Replay::new(
                    events.len() as u64,
                    dropped(buffer, since),
                    buffer.high_water_mark,
                );
                Some((info, events))
            }
        };
        if let Some(old) = request.replaces {
            state.subscribers.retain(|(id, _)| *id != old);
        }
        state.next_subscription += 1;
        let id = SubscriptionId(state.next_subscription);
        let max = request.filter.payload_max_bytes;
        state.subscribers.push((
            id,
            Subscriber {
                filter: request.filter,
                sink: Box::new(sink),
            },
        ));
        before_live(replay.as_ref().map(|(info, _)| *info));
        if let Some((_, events)) = replay {
            let mut keep = true;
            for event in &events {
                if let Some((_, sub)) = state.subscribers.last_mut() {
                    keep = sub.sink.deliver(&for_delivery(event, max));
                }
                if !keep {
                    break;
                }
            }
            if !keep {
                state.subscribers.retain(|(sid, _)| *sid != id);
            }
        }
        Ok(id)
    }

    /// Ends a subscription; `false` when it was already gone.
    pub fn unsubscribe(&self, id: SubscriptionId) -> bool {
        let mut state = self.state();
        let before = state.subscribers.len();
        state.subscribers.retain(|(sid, _)| *sid != id);
        state.subscribers.len() != before
    }

    pub fn subscriber_count(&self) -> usize {
        self.state().subscribers.len()
    }

    /// `events.since` on a resolved session, with `cursor`, `dropped` and `remaining` exactly as
    /// §C13.4 defines them.
    pub fn events_since(
        &self,
        session_id: &str,
        query: &SinceQuery,
    ) -> Result<EventsSinceResult, ErrorObject> {
        let state = self.state();
        let buffer = state
            .buffers
            .get(session_id)
            .ok_or_else(|| unknown_session(session_id))?;
        check_since(buffer, query.since)?;
        let limit = query
            .limit
            .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        let mut events = Vec::new();
        let mut total = 0usize;
        // Bounded in bytes too (project decision, issue #20): the page ends early and `cursor`
        // continues after its last event, as with `limit`.
        let mut bytes = 0usize;
        let mut full = false;
        for event in matching(buffer, query.since, query.name.as_ref()) {
            total += 1;
            if events.len() < limit && !full {
                let delivered = for_delivery(event, query.payload_max_bytes);
                bytes = bytes.saturating_add(serialized_len(&delivered) + 1);
                if bytes > PAGE_ITEM_BYTES && !events.is_empty() {
                    full = true;
                } else {
                    events.push(delivered);
                }
            }
        }
        let remaining = (total - events.len()) as u64;
        let cursor = match events.last() {
            Some(last) if remaining > 0 => last.seq,
            _ => buffer.high_water_mark,
        };
        Ok(EventsSinceResult::new(
            events,
            cursor,
            dropped(buffer, query.since),
            remaining,
        ))
    }

    /// Every notification emitted from now on, untruncated, for in-process observers (tests
    /// synchronise on these instead of sleeping). Dropping the receiver ends the tap.
    pub fn subscribe_all(&self) -> mpsc::UnboundedReceiver<EventNotification> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.state().taps.push(tx);
        rx
    }

    /// `daemon.status.eventsLog`, when a log is attached.
    pub fn events_log_status(&self) -> Option<EventsLogStatus> {
        self.inner.log.as_ref().map(EventsLog::status)
    }

    /// The attached `events.log` writer.
    pub fn events_log(&self) -> Option<&EventsLog> {
        self.inner.log.as_ref()
    }

    /// Waits until every notification queued so far is written, at most `timeout` of wall time
    /// (shutdown step 7). `true` when everything was written; also `true` without a log.
    pub async fn flush(&self, timeout: Duration) -> bool {
        match &self.inner.log {
            Some(log) => log.flush(timeout).await,
            None => true,
        }
    }
}

/// An event notification of a session's kind other than `app_event` (`seq` 0), from borrowed
/// fields: serialises exactly as [`EventNotification`] does.
pub(crate) struct BorrowedEvent<'a, D> {
    pub kind: EventKind,
    pub session_id: &'a str,
    pub alias: &'a str,
    pub ts: u64,
    pub data: &'a D,
}

impl<D: serde::Serialize> serde::Serialize for BorrowedEvent<'_, D> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("kind", &self.kind)?;
        m.serialize_entry("sessionId", self.session_id)?;
        m.serialize_entry("alias", self.alias)?;
        m.serialize_entry("ts", &self.ts)?;
        m.serialize_entry("seq", &0u64)?;
        m.serialize_entry("data", self.data)?;
        m.end()
    }
}

impl BusState {
    /// Whether an event of `kind` for `session_id` would reach any subscriber or tap.
    fn wants(&self, session_id: &str, kind: EventKind) -> bool {
        !self.taps.is_empty()
            || self.subscribers.iter().any(|(_, sub)| {
                sub.filter
                    .session_id
                    .as_deref()
                    .is_none_or(|bound| bound == session_id)
                    && sub.filter.admits_kind(kind)
            })
    }

    fn deliver(&mut self, n: &EventNotification) {
        let mut ended = Vec::new();
        for (id, sub) in &mut self.subscribers {
            if !sub.filter.matches(n) {
                continue;
            }
            let keep = match (&n.data, sub.filter.payload_max_bytes) {
                (EventData::AppEvent(_), Some(max)) => {
                    sub.sink.deliver(&for_delivery(n, Some(max)))
                }
                _ => sub.sink.deliver(n),
            };
            if !keep {
                ended.push(*id);
            }
        }
        if !ended.is_empty() {
            self.subscribers.retain(|(id, _)| !ended.contains(id));
        }
        self.taps.retain(|tap| tap.send(n.clone()).is_ok());
    }
}

/// `since` beyond the high-water mark is a parameter error (§C8.13).
fn check_since(buffer: &SessionBuffer, since: u64) -> Result<(), ErrorObject> {
    if since > buffer.high_water_mark {
        return Err(ParamError::since_beyond_high_water_mark(since, buffer.high_water_mark).into());
    }
    Ok(())
}

/// M of §C13.4: retained events after `since` whose name matches, in `seq` order.
fn matching<'a>(
    buffer: &'a SessionBuffer,
    since: u64,
    name: Option<&'a Glob>,
) -> impl Iterator<Item = &'a EventNotification> + 'a {
    buffer.ring.iter().filter(move |e| {
        e.seq > since
            && match &e.data {
                EventData::AppEvent(d) => name.is_none_or(|g| g.matches(d.name())),
                _ => false,
            }
    })
}

/// Events after `since` evicted before being read, regardless of the glob (§C13.4).
fn dropped(buffer: &SessionBuffer, since: u64) -> u64 {
    buffer.ring.front().map_or(0, |oldest| {
        oldest.seq.saturating_sub(since).saturating_sub(1)
    })
}

// ---------------------------------------------------------------------------------------------
// events.log writer (§S3.7, §C12.3)
// ---------------------------------------------------------------------------------------------

enum LogCommand {
    /// One notification, already a JSON line (no `\n`).
    Write(Vec<u8>),
    Flush(std_mpsc::Sender<()>),
}

#[derive(Debug)]
struct LogShared {
    path: PathBuf,
    failed_writes: AtomicU64,
    queued: AtomicUsize,
    /// Line buffers the writer has emptied, for the next lines (issue #24: no allocation per
    /// line once warm). At most [`SPARE_LINES`], each at most [`SPARE_LINE_BYTES`].
    spare: Mutex<Vec<Vec<u8>>>,
}

impl LogShared {
    fn spare(&self) -> MutexGuard<'_, Vec<Vec<u8>>> {
        self.spare.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A line buffer: an emptied one if any, else a new one.
    fn line_buffer(&self) -> Vec<u8> {
        self.spare()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(LOG_LINE_CAPACITY))
    }

    /// Keeps `line`'s buffer for a later line, unless enough are kept or it grew large.
    fn give_back(&self, mut line: Vec<u8>) {
        if line.capacity() > SPARE_LINE_BYTES {
            return;
        }
        let mut spare = self.spare();
        if spare.len() < SPARE_LINES {
            line.clear();
            spare.push(line);
        }
    }
}

/// The `events.log` writer: a background thread appending one JSON line per notification,
/// mode 0600 without following symlinks, rotating to `events.log.1` past `max_bytes`. Failures
/// only warn and count; they never reach the emitting path.
#[derive(Debug)]
pub struct EventsLog {
    tx: std_mpsc::Sender<LogCommand>,
    shared: Arc<LogShared>,
}

impl EventsLog {
    /// Starts the writer for `path`, rotating to `rotated` (normally `events.log.1` next to it).
    pub fn start(path: PathBuf, rotated: PathBuf, max_bytes: u64) -> io::Result<Self> {
        let (tx, rx) = std_mpsc::channel();
        let shared = Arc::new(LogShared {
            path: path.clone(),
            failed_writes: AtomicU64::new(0),
            queued: AtomicUsize::new(0),
            spare: Mutex::new(Vec::new()),
        });
        let writer = LogWriter {
            path,
            rotated,
            max_bytes,
            file: None,
            shared: Arc::clone(&shared),
        };
        std::thread::Builder::new()
            .name("appduct-events-log".to_owned())
            .spawn(move || writer.run(rx))?;
        Ok(Self { tx, shared })
    }

    /// Queues one notification; a full queue or a stopped writer counts as a failed write.
    /// The line is serialised here, into one buffer, rather than the notification copied for
    /// the writer thread (issue #24: a copy is an allocation per string it holds).
    pub fn enqueue(&self, notification: &EventNotification) {
        self.enqueue_serialized(notification);
    }

    /// [`enqueue`](Self::enqueue) of anything that serialises as a notification.
    fn enqueue_serialized<T: serde::Serialize + ?Sized>(&self, notification: &T) {
        if self.shared.queued.fetch_add(1, Ordering::AcqRel) >= EVENTS_LOG_QUEUE {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            self.fail("the write queue is full");
            return;
        }
        let mut line = self.shared.line_buffer();
        if let Err(e) = serde_json::to_writer(&mut line, notification) {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            self.fail(&e.to_string());
            return;
        }
        if self.tx.send(LogCommand::Write(line)).is_err() {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            self.fail("the writer has stopped");
        }
    }

    fn fail(&self, why: &str) {
        self.shared.failed_writes.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("{}: event not written: {why}", self.shared.path.display());
    }

    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Failed opens, writes and rotations, plus queue overflows, since start.
    pub fn failed_writes(&self) -> u64 {
        self.shared.failed_writes.load(Ordering::Relaxed)
    }

    /// `daemon.status.eventsLog`.
    pub fn status(&self) -> EventsLogStatus {
        EventsLogStatus::new(self.shared.path.display().to_string(), self.failed_writes())
    }

    /// Blocks until everything queued before this call is written, at most `timeout`.
    pub fn flush_blocking(&self, timeout: Duration) -> bool {
        let (done_tx, done_rx) = std_mpsc::channel();
        if self.tx.send(LogCommand::Flush(done_tx)).is_err() {
            return false;
        }
        done_rx.recv_timeout(timeout).is_ok()
    }

    /// [`flush_blocking`](Self::flush_blocking) on tokio's blocking pool, so the wait uses wall
    /// time (and a paused test clock does not advance past it).
    pub async fn flush(&self, timeout: Duration) -> bool {
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || {
            let (done_tx, done_rx) = std_mpsc::channel();
            tx.send(LogCommand::Flush(done_tx)).is_ok() && done_rx.recv_timeout(timeout).is_ok()
        })
        .await
        .unwrap_or(false)
    }
}

struct LogWriter {
    path: PathBuf,
    rotated: PathBuf,
    max_bytes: u64,
    /// The open file and its length (known at open, then counted: no stat per write).
    file: Option<(std::fs::File, u64)>,
    shared: Arc<LogShared>,
}

/// How long the writer lets notifications gather after the first one before writing them all.
/// Every call emits two notifications; waking this thread for each one costs a futex call and
/// a context switch on the cores the call path runs on. While it sleeps, senders wake nobody.
const COALESCE: Duration = Duration::from_millis(5);
/// Bytes reserved for one notification's line: a call's events fit without growing it.
const LOG_LINE_CAPACITY: usize = 384;
/// Emptied line buffers kept for reuse ([`LogShared::give_back`]).
const SPARE_LINES: usize = 64;
/// A line buffer grown past this is freed instead of kept.
const SPARE_LINE_BYTES: usize = 4096;
/// Bytes of lines gathered before they are written even though more are queued.
const LOG_BATCH_BYTES: usize = 256 * 1024;

/// Lines waiting for one write, and how many notifications they hold.
#[derive(Default)]
struct LogBatch {
    bytes: Vec<u8>,
    lines: u64,
}

impl LogWriter {
    fn run(mut self, rx: std_mpsc::Receiver<LogCommand>) {
        let mut batch = LogBatch::default();
        while let Ok(first) = rx.recv() {
            if matches!(first, LogCommand::Write(_)) {
                std::thread::sleep(COALESCE);
            }
            let mut next = Some(first);
            while let Some(command) = next.take() {
                match command {
                    LogCommand::Write(n) => {
                        self.shared.queued.fetch_sub(1, Ordering::AcqRel);
                        self.gather(&mut batch, &n);
                        self.shared.give_back(n);
                        // Rotation stays exact to the line: a batch that takes the file past
                        // `max_bytes` is written (and the file rotated) before the next line.
                        let past_cap = self.open_len() + batch.bytes.len() as u64 > self.max_bytes;
                        if past_cap || batch.bytes.len() >= LOG_BATCH_BYTES {
                            self.write(&mut batch);
                        }
                    }
                    LogCommand::Flush(done) => {
                        self.write(&mut batch);
                        let _ = done.send(());
                    }
                }
                next = rx.try_recv().ok();
            }
            self.write(&mut batch);
        }
    }

    fn gather(&self, batch: &mut LogBatch, line: &[u8]) {
        batch.bytes.extend_from_slice(line);
        batch.bytes.push(b'\n');
        batch.lines += 1;
    }

    /// Appends the batch with one write call (whole lines only, so lines never tear), then
    /// rotates once the file passed `max_bytes`.
    fn write(&mut self, batch: &mut LogBatch) {
        if batch.lines == 0 {
            return;
        }
        if let Err(e) = self.append(&batch.bytes) {
            self.file = None;
            self.failed(batch.lines, &e);
        }
        batch.bytes.clear();
        batch.lines = 0;
    }

    fn failed(&self, lines: u64, e: &io::Error) {
        self.shared
            .failed_writes
            .fetch_add(lines, Ordering::Relaxed);
        tracing::warn!("{}: {lines} event(s) not written: {e}", self.path.display());
    }

    /// The length of the open file, opening it first; 0 when it cannot be opened (the write
    /// then fails and counts).
    fn open_len(&mut self) -> u64 {
        if self.file.is_none()
            && let Ok(file) = state_dir::open_append(&self.path)
            && let Ok(meta) = file.metadata()
        {
            self.file = Some((file, meta.len()));
        }
        self.file.as_ref().map_or(0, |(_, len)| *len)
    }

    fn append(&mut self, lines: &[u8]) -> io::Result<()> {
        let (file, len) = match &mut self.file {
            Some((file, len)) => (file, len),
            None => {
                let file = state_dir::open_append(&self.path)?;
                let len = file.metadata()?.len();
                let (file, len) = self.file.insert((file, len));
                (file, len)
            }
        };
        file.write_all(lines)?;
        *len += lines.len() as u64;
        if *len > self.max_bytes {
            self.file = None;
            state_dir::rotate_if_larger(&self.path, &self.rotated, self.max_bytes)
                .map_err(io::Error::other)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #24: `events.log` line buffers are reused once the writer has emptied them, a
    /// large one is freed, the kept ones are bounded, and the file still gets each line whole.
    #[test]
    fn events_log_line_buffers_are_reused_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.log");
        let log = EventsLog::start(path.clone(), dir.path().join("events.log.1"), 1 << 20).unwrap();
        let big = "x".repeat(2 * SPARE_LINE_BYTES);
        let mut expected = Vec::new();
        for round in 0..3 {
            for i in 0..2 * SPARE_LINES {
                let line = if i == 0 {
                    json!({"round": round, "big": big})
                } else {
                    json!({"round": round, "i": i})
                };
                log.enqueue_serialized(&line);
                expected.push(line);
            }
            assert!(log.flush_blocking(Duration::from_secs(10)));
            let spare = log.shared.spare();
            assert!(!spare.is_empty(), "emptied buffers are kept");
            assert!(spare.len() <= SPARE_LINES);
            assert!(
                spare
                    .iter()
                    .all(|b| b.is_empty() && b.capacity() <= SPARE_LINE_BYTES)
            );
        }
        let written: Vec<Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(written, expected);
    }
}
