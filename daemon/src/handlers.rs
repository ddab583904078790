//! The daemon's [`ControlHandler`]: one function per control method of §C8, answering from the
//! session engine, the event bus, the TLS identity and the configuration.
//!
//! `tools.list`, `tools.call`, `tools.cancel`, `consent.create` and `consent.take` belong to the
//! calls module, always installed, which this file reaches through [`CallsApi`]; the
//! `daemon.hello` features that depend on it (`calls.callId`, `calls.progress`,
//! `consent.records`, `tools.groups`) are the ones it reports. Reserved and unknown names never
//! get here:
//! [`ControlRequest::parse`] answers them `-32601` (§C3.1, §C8.16).
//!
//! Locking: the bus delivers subscriptions under its lock, so the subscription sinks built here
//! only queue a line on their connection and return. A sink whose connection went over its
//! buffer cap sees the connection close itself (a state flip inside `control_server`, which runs
//! no hooks); the connection's own task then runs its close hooks and [`ControlHandler::on_close`],
//! which unsubscribes. Lock order here: this handler's table → bus, never the reverse.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use appduct_protocol::control::{
    self, AddressSource, AdvertisedAddress, ControlRequest, EventNotify, EventsListEntry,
    EventsListParams, EventsListResult, EventsLogStatus, EventsSinceParams, EventsSinceResult,
    HelloParams, HelloResult, LinkCreateParams, LinkCreateResult, OkResult, ParamError,
    RevokeResult, SelectorParams, SessionSummary, StatusResult, SubscribeParams, SubscribeResult,
};
use appduct_protocol::descriptor::Schema;
use appduct_protocol::errors::ErrorType;
use appduct_protocol::glob::Glob;
use appduct_protocol::jsonrpc::{ErrorObject, RequestId};
use appduct_protocol::limits;
use serde_json::json;
use tokio::sync::watch;

use crate::address::AddressOrigin;
use crate::audit::AuditWriter;
use crate::control_server::{
    BoxFuture, Connection, ConnectionId, ControlHandler, PAGE_ITEM_BYTES, Reply,
    respond_off_thread, serialized_len,
};
use crate::events::{EventBus, EventFilter, SinceQuery, SubscribeRequest, SubscriptionId};
use crate::links::{DaemonLinkEnv, LinkEnvironment};
use crate::policy::PolicyEngine;
use crate::policy_control::PolicyControl;
use crate::sessions::SessionManager;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// The calls module's side of the control plane
// ---------------------------------------------------------------------------------------------

/// The calls module as the control plane sees it: the five methods it owns, its counters, and
/// its part in shutdown (§C8.3).
pub trait CallsApi: Send + Sync + 'static {
    /// Handles `tools.list`, `tools.call`, `tools.cancel`, `consent.create` or `consent.take`.
    /// Runs on the request's own task, like [`ControlHandler::handle`].
    fn handle(
        &self,
        conn: &Connection,
        id: RequestId,
        request: ControlRequest,
    ) -> BoxFuture<'static, Reply>;

    /// Fills `lease` of each summary whose session is leased (§C9.1, §C10.9).
    fn annotate_leases(&self, _sessions: &mut [SessionSummary]) {}

    /// Unsettled `tools.call` requests (`pendingCalls`).
    fn pending_calls(&self) -> u64;

    /// Unexpired operator grants (`daemon.status.grants`, §C8.20).
    fn grants(&self) -> Vec<control::GrantSummary> {
        Vec::new()
    }

    /// The `daemon.hello` features this module implements (from [`control::features`]).
    fn features(&self) -> Vec<&'static str>;

    /// Shutdown step 1: stop the module's own timers (deadlines, cancel grace, consent expiry).
    fn stop_timers(&self) {}

    /// Shutdown step 2: reject every pending call with `session_not_active`, reason
    /// `daemon_shutdown`, settling each normally. Runs before the engine's own shutdown, which
    /// then reports the same transition per session through the `CallRouter`.
    fn reject_pending_for_shutdown(&self);
}

// ---------------------------------------------------------------------------------------------
// Shutdown switch
// ---------------------------------------------------------------------------------------------

/// Asks the daemon to stop; shared by `daemon.shutdown`, the daemon handle and signal handlers.
#[derive(Debug, Clone)]
pub struct ShutdownSwitch {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for ShutdownSwitch {
    fn default() -> Self {
        Self::new()
    }
}

impl ShutdownSwitch {
    pub fn new() -> Self {
        let (tx, _) = watch::channel(false);
        Self { tx: Arc::new(tx) }
    }

    /// Requests shutdown; idempotent.
    pub fn request(&self) {
        self.tx.send_replace(true);
    }

    pub fn is_requested(&self) -> bool {
        *self.tx.borrow()
    }

    /// Resolves once shutdown was requested.
    pub async fn requested(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives in `self`, so the wait cannot fail while we hold it.
        let _ = rx.wait_for(|requested| *requested).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Context
// ---------------------------------------------------------------------------------------------

/// Facts about this daemon process reported by `daemon.hello` and `daemon.status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonIdentity {
    pub version: String,
    pub pid: u32,
    /// ISO 8601 UTC with milliseconds (§C8).
    pub started_at: String,
    pub state_dir: PathBuf,
    /// `<state>/events.log`, reported when no writer is attached.
    pub events_log_path: PathBuf,
}

/// Everything the handlers answer from.
pub struct HandlerContext {
    pub identity: DaemonIdentity,
    /// Reported by `daemon.status.policy`.
    pub policy: PolicyEngine,
    /// `policy.*` and `daemon.reload` (§C8.30–§C8.33); shares `policy`'s engine.
    pub policy_control: PolicyControl,
    /// Reported by `daemon.status.audit`.
    pub audit: AuditWriter,
    pub sessions: SessionManager,
    pub bus: EventBus,
    /// Bound ports, advertised address and pin.
    pub network: Arc<DaemonLinkEnv>,
    pub calls: Arc<dyn CallsApi>,
    pub shutdown: ShutdownSwitch,
    /// The loopback HTTP API, for `daemon.status.httpPort` (§C8.2, §H1).
    pub http: crate::http_api::HttpApi,
}

impl fmt::Debug for HandlerContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerContext")
            .field("identity", &self.identity)
            .field("shutdown", &self.shutdown.is_requested())
            .finish_non_exhaustive()
    }
}

/// The features this file implements itself (§C8.1).
const OWN_FEATURES: &[&str] = &[
    control::features::EVENTS_SUBSCRIBE_SINCE,
    control::features::EVENTS_LIST,
];

// ---------------------------------------------------------------------------------------------
// The handler
// ---------------------------------------------------------------------------------------------

/// Connections this handler has seen and their subscriptions.
#[derive(Default)]
struct Tracked {
    connections: HashMap<ConnectionId, Connection>,
    subscriptions: HashMap<ConnectionId, SubscriptionId>,
}

struct Inner {
    ctx: HandlerContext,
    tracked: Mutex<Tracked>,
    /// Held across the pending-link count and the mint of `link.create`, so concurrent requests
    /// cannot both pass the cap (links are minted nowhere else). Lock order: this → engine.
    minting: Mutex<()>,
}

/// The daemon's control handler. Cheap to clone; clones share one state.
#[derive(Clone)]
pub struct DaemonHandler {
    inner: Arc<Inner>,
}

impl fmt::Debug for DaemonHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tracked = lock(&self.inner.tracked);
        f.debug_struct("DaemonHandler")
            .field("ctx", &self.inner.ctx)
            .field("connections", &tracked.connections.len())
            .field("subscriptions", &tracked.subscriptions.len())
            .finish()
    }
}

fn shutting_down() -> ErrorObject {
    ErrorObject::internal("The daemon is shutting down")
}

fn unknown_session(session_id: &str) -> ErrorObject {
    ErrorObject::application(
        ErrorType::UnknownSession,
        format!("Session {session_id} is not live (revoked or expired)"),
    )
    .with_details(json!({ "sessionId": session_id }))
}

fn glob(param: &str, source: Option<&str>) -> Result<Option<Glob>, ErrorObject> {
    source
        .map(Glob::new)
        .transpose()
        .map_err(|e| ParamError::invalid(param, e).into())
}

impl DaemonHandler {
    pub fn new(ctx: HandlerContext) -> Self {
        Self {
            inner: Arc::new(Inner {
                ctx,
                tracked: Mutex::new(Tracked::default()),
                minting: Mutex::new(()),
            }),
        }
    }

    pub fn context(&self) -> &HandlerContext {
        &self.inner.ctx
    }

    /// Open control connections that have sent at least one request.
    pub fn connection_count(&self) -> usize {
        lock(&self.inner.tracked).connections.len()
    }

    /// Connections with an active `events.subscribe` filter.
    pub fn subscription_count(&self) -> usize {
        lock(&self.inner.tracked).subscriptions.len()
    }

    /// Shutdown step 5 for every connection this handler has seen: stop reading, wait (at most
    /// `drain` each, concurrently) until the responses still owed and everything queued are
    /// written, then close. Connections that never sent a request have nothing queued; their
    /// owners close them.
    pub async fn close_connections(&self, drain: Duration) {
        let connections: Vec<Connection> = lock(&self.inner.tracked)
            .connections
            .values()
            .cloned()
            .collect();
        let mut flushing = tokio::task::JoinSet::new();
        for conn in connections {
            flushing.spawn(async move { conn.drain_and_close(drain).await });
        }
        while flushing.join_next().await.is_some() {}
    }

    /// Remembers `conn` so shutdown can flush and close it.
    fn track(&self, conn: &Connection) {
        let mut tracked = lock(&self.inner.tracked);
        tracked
            .connections
            .entry(conn.id())
            .or_insert_with(|| conn.clone());
        drop(tracked);
        // Closed meanwhile: `on_close` may already have run, so forget it here.
        if !conn.is_open() {
            self.forget(conn.id());
        }
    }

    /// Drops everything about a closed connection and ends its subscription.
    fn forget(&self, id: ConnectionId) {
        let subscription = {
            let mut tracked = lock(&self.inner.tracked);
            tracked.connections.remove(&id);
            tracked.subscriptions.remove(&id)
        };
        if let Some(subscription) = subscription {
            self.inner.ctx.bus.unsubscribe(subscription);
        }
    }

    async fn dispatch(self, conn: Connection, id: RequestId, request: ControlRequest) -> Reply {
        let ctx = &self.inner.ctx;
        if ctx.shutdown.is_requested() {
            return match request {
                // Asking twice is not an error.
                ControlRequest::DaemonShutdown(_) => {
                    Reply::from_result(Ok::<_, ErrorObject>(OkResult::default()))
                }
                _ => Reply::Err(shutting_down()),
            };
        }
        match request {
            ControlRequest::DaemonHello(p) => {
                if let Some(client) = &p.client {
                    conn.set_client_name(&client.name);
                }
                Reply::from_result(Ok(self.hello(&p)))
            }
            ControlRequest::DaemonStatus(_) => Reply::from_result(Ok(self.status())),
            ControlRequest::DaemonShutdown(_) => self.shutdown(&conn, &id).await,
            ControlRequest::LinkCreate(p) => Reply::from_result(self.link_create(&p)),
            ControlRequest::SessionsList(_) => Reply::from_result(Ok(self.sessions_list())),
            ControlRequest::SessionsDescribe(p) => Reply::from_result(self.sessions_describe(&p)),
            ControlRequest::SessionsRevoke(p) => Reply::from_result(self.sessions_revoke(&p)),
            // Pages of up to the reply cap: built off the runtime thread.
            ControlRequest::EventsList(p) => {
                let this = self.clone();
                respond_off_thread(conn, id, move || this.events_list(&p)).await
            }
            ControlRequest::EventsSubscribe(p) => match self.events_subscribe(&conn, &id, &p) {
                Ok(()) => Reply::AlreadySent,
                Err(e) => Reply::Err(e),
            },
            ControlRequest::EventsSince(p) => {
                let this = self.clone();
                respond_off_thread(conn, id, move || this.events_since(&p)).await
            }
            ControlRequest::PolicyList(_) => {
                Reply::from_result(Ok::<_, ErrorObject>(ctx.policy_control.list(&ctx.sessions)))
            }
            // These read and write `config.json`: off the runtime threads.
            ControlRequest::PolicySet(p) => {
                Reply::from_result(ctx.policy_control.off_thread(move |pc| pc.set(&p)).await)
            }
            ControlRequest::PolicyReset(p) => {
                Reply::from_result(ctx.policy_control.off_thread(move |pc| pc.reset(&p)).await)
            }
            ControlRequest::DaemonReload(_) => Reply::from_result(
                ctx.policy_control
                    .off_thread(|pc| pc.reload(crate::policy_control::ReloadBy::Request))
                    .await,
            ),
            calls @ (ControlRequest::ToolsList(_)
            | ControlRequest::ToolsCall(_)
            | ControlRequest::ToolsCancel(_)
            | ControlRequest::ConsentCreate(_)
            | ControlRequest::ConsentTake(_)
            | ControlRequest::ApprovalsList(_)
            | ControlRequest::ApprovalsChallenge(_)
            | ControlRequest::ApprovalsDecide(_)
            | ControlRequest::GrantsList(_)
            | ControlRequest::GrantsRevoke(_)
            | ControlRequest::CallsList(_)
            | ControlRequest::SessionsLease(_)
            | ControlRequest::SessionsRelease(_)
            | ControlRequest::ToolsResult(_)) => ctx.calls.handle(&conn, id, calls).await,
        }
    }

    // -- daemon.* ---------------------------------------------------------------------------

    fn pending_calls(&self) -> u64 {
        self.inner.ctx.calls.pending_calls()
    }

    /// `features` in the order of §C8.1: ours plus whatever the calls module implements.
    fn features(&self) -> Vec<String> {
        let from_calls = self.inner.ctx.calls.features();
        control::features::ALL
            .iter()
            .filter(|f| OWN_FEATURES.contains(f) || from_calls.contains(f))
            .map(|f| (*f).to_owned())
            .collect()
    }

    /// `daemon.hello` (§C8.1): touches no device and no file.
    fn hello(&self, params: &HelloParams) -> HelloResult {
        if let Some(client) = &params.client {
            tracing::debug!(client = %client.name, version = %client.version, "daemon.hello");
        }
        let ctx = &self.inner.ctx;
        HelloResult {
            version: ctx.identity.version.clone(),
            control_protocol: limits::CONTROL_PROTOCOL,
            min_control_protocol: limits::MIN_CONTROL_PROTOCOL,
            pid: ctx.identity.pid,
            started_at: ctx.identity.started_at.clone(),
            state_dir: ctx.identity.state_dir.display().to_string(),
            features: self.features(),
            session_count: ctx.sessions.session_count() as u64,
            pending_links: ctx.sessions.pending_links() as u64,
            pending_calls: self.pending_calls(),
        }
    }

    /// `daemon.status` (§C8.2).
    fn status(&self) -> StatusResult {
        let ctx = &self.inner.ctx;
        let advertised = ctx.network.advertised();
        let events_log = ctx.bus.events_log_status().unwrap_or_else(|| {
            EventsLogStatus::new(ctx.identity.events_log_path.display().to_string(), 0)
        });
        StatusResult {
            version: ctx.identity.version.clone(),
            control_protocol: limits::CONTROL_PROTOCOL,
            pid: ctx.identity.pid,
            started_at: ctx.identity.started_at.clone(),
            state_dir: ctx.identity.state_dir.display().to_string(),
            wss_port: ctx.network.wss_port(),
            web_port: ctx.network.web_port(),
            advertised_address: AdvertisedAddress::new(
                advertised.address.to_string(),
                advertised.family,
                match advertised.source {
                    AddressOrigin::Config => AddressSource::Config,
                    AddressOrigin::Detected => AddressSource::Detected,
                },
            ),
            pinned_keys: vec![ctx.network.pin()],
            sessions: {
                let mut sessions = ctx.sessions.list();
                ctx.calls.annotate_leases(&mut sessions);
                sessions
            },
            pending_links: ctx.sessions.pending_links() as u64,
            pending_calls: self.pending_calls(),
            policy: ctx.policy.summary(),
            // Counts the day files; `files`/`bytes` are omitted when the directory is unreadable.
            audit: ctx.audit.status(),
            events_log,
            sealed_key: Some(crate::tls::sealed_key_text(&ctx.network.sealed_key())),
            grants: ctx.calls.grants(),
            http_port: ctx.http.local_addr().map(|a| a.port()),
        }
    }

    /// `daemon.shutdown` (§C8.3): the reply is written and flushed before teardown starts.
    async fn shutdown(&self, conn: &Connection, id: &RequestId) -> Reply {
        let ok = match serde_json::to_value(OkResult::default()) {
            Ok(ok) => ok,
            Err(e) => return Reply::Err(ErrorObject::internal(e.to_string())),
        };
        // Bounded: a client that stopped reading must not keep the daemon from stopping.
        if conn.respond(id, Ok(ok))
            && tokio::time::timeout(conn.drain_timeout(), conn.flushed())
                .await
                .is_err()
        {
            tracing::warn!(conn = %conn.id(), "the daemon.shutdown response was not flushed in time");
        }
        tracing::info!(conn = %conn.id(), "shutdown requested over the control socket");
        self.inner.ctx.shutdown.request();
        Reply::AlreadySent
    }

    // -- links and sessions -----------------------------------------------------------------

    /// Mints a link unless [`limits::MAX_PENDING_LINKS`] are already claimable, or twice that
    /// many are held as pending links and tombstones (project decision); claimed, revoked and
    /// burned links do not count, expired ones only until their tombstone is forgotten.
    fn link_create(&self, params: &LinkCreateParams) -> Result<LinkCreateResult, ErrorObject> {
        let sessions = &self.inner.ctx.sessions;
        let _minting = lock(&self.inner.minting);
        sessions.admit_link(limits::MAX_PENDING_LINKS)?;
        sessions.create_link(params)
    }

    fn sessions_list(&self) -> Vec<SessionSummary> {
        let mut sessions = self.inner.ctx.sessions.list();
        self.inner.ctx.calls.annotate_leases(&mut sessions);
        sessions
    }

    fn sessions_describe(&self, params: &SelectorParams) -> Result<SessionSummary, ErrorObject> {
        let mut session = self
            .inner
            .ctx
            .sessions
            .describe(params.selector.as_deref())?;
        self.inner
            .ctx
            .calls
            .annotate_leases(std::slice::from_mut(&mut session));
        Ok(session)
    }

    fn sessions_revoke(&self, params: &SelectorParams) -> Result<RevokeResult, ErrorObject> {
        self.inner.ctx.sessions.revoke(params.selector.as_deref())
    }

    // -- events -----------------------------------------------------------------------------

    /// `events.list` (§C8.11): declared events by name, filtered by the glob, then paged.
    fn events_list(&self, params: &EventsListParams) -> Result<EventsListResult, ErrorObject> {
        let sessions = &self.inner.ctx.sessions;
        let session = sessions.resolve(params.selector.as_deref())?;
        let name = glob("name", params.name.as_deref())?;
        let declared = sessions
            .events_of(&session.session_id)
            .ok_or_else(|| unknown_session(&session.session_id))?;
        let matching: Vec<EventsListEntry> = declared
            .into_iter()
            .filter(|e| name.as_ref().is_none_or(|g| g.matches(&e.name)))
            .map(|e| {
                EventsListEntry::new(e.name, e.description)
                    .with_payload_schema(e.payload_schema.as_ref().map(Schema::to_value))
            })
            .collect();
        let total = matching.len() as u64;
        let offset = params.offset.unwrap_or(0);
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        let take = params
            .limit
            .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        // Bounded in bytes like `tools.list` (project decision, issue #20).
        let mut bytes = 0usize;
        let mut events: Vec<EventsListEntry> = Vec::new();
        for entry in matching.into_iter().skip(skip).take(take) {
            bytes = bytes.saturating_add(serialized_len(&entry) + 1);
            if bytes > PAGE_ITEM_BYTES && !events.is_empty() {
                break;
            }
            events.push(entry);
        }
        let has_more = offset.saturating_add(events.len() as u64) < total;
        Ok(EventsListResult::new(events, total, has_more, offset))
    }

    /// `events.subscribe` (§C8.12, §C14, §C15). Under the bus lock, atomically: the previous
    /// filter of this connection is replaced, the replay taken, the response written, then the
    /// replay and live events follow. The response is written here, so the request answers
    /// [`Reply::AlreadySent`] on success.
    fn events_subscribe(
        &self,
        conn: &Connection,
        id: &RequestId,
        params: &SubscribeParams,
    ) -> Result<(), ErrorObject> {
        let ctx = &self.inner.ctx;
        let bound = match params.session_selector.as_deref() {
            Some(selector) => Some(ctx.sessions.resolve(Some(selector))?.session_id),
            None => None,
        };
        let filter = EventFilter::from_params(params, bound.clone())?;
        let sink_conn = conn.clone();
        // Runs under the bus lock: queue one line and return. `notify` is false once the
        // connection is closed, including when this line took it over its cap.
        let sink = move |n: &control::EventNotification| sink_conn.notify::<EventNotify>(n);
        let mut responded = false;
        let subscription = {
            let mut tracked = lock(&self.inner.tracked);
            let replaces = tracked.subscriptions.get(&conn.id()).copied();
            let request = SubscribeRequest {
                filter,
                since: params.since,
                replaces,
            };
            let subscription = ctx.bus.subscribe(request, sink, |replay| {
                // From here the connection counts as a subscriber for back-pressure (§C15).
                if !conn.set_subscribed() {
                    return;
                }
                let result = SubscribeResult::new()
                    .with_session_id(bound.clone())
                    .with_replay(replay);
                responded = match serde_json::to_value(&result) {
                    Ok(value) => conn.respond(id, Ok(value)),
                    Err(e) => conn.respond(id, Err(ErrorObject::internal(e.to_string()))),
                };
            })?;
            tracked.connections.insert(conn.id(), conn.clone());
            tracked.subscriptions.insert(conn.id(), subscription);
            subscription
        };
        if !conn.is_open() {
            // Closed while subscribing: `on_close` may have run before the insert above.
            self.forget(conn.id());
        }
        if !responded {
            tracing::debug!(conn = %conn.id(), ?subscription, "subscription answered nothing: the connection closed");
        }
        Ok(())
    }

    /// `events.since` (§C8.13): a page of the session's retained `app_event`s.
    fn events_since(&self, params: &EventsSinceParams) -> Result<EventsSinceResult, ErrorObject> {
        let ctx = &self.inner.ctx;
        let session = ctx.sessions.resolve(params.selector.as_deref())?;
        let query = SinceQuery {
            since: params.since.unwrap_or(0),
            limit: params.limit,
            name: glob("name", params.name.as_deref())?,
            payload_max_bytes: params.payload_max_bytes,
        };
        ctx.bus.events_since(&session.session_id, &query)
    }
}

impl ControlHandler for DaemonHandler {
    fn handle(
        &self,
        conn: &Connection,
        id: RequestId,
        request: ControlRequest,
    ) -> BoxFuture<'static, Reply> {
        self.track(conn);
        // A `tools.call` goes straight to the calls module's future: one boxed future per call
        // instead of two (issue #24). `dispatch` would pass it on unchanged unless shutting
        // down, which is checked here instead.
        if matches!(request, ControlRequest::ToolsCall(_))
            && !self.inner.ctx.shutdown.is_requested()
        {
            return self.inner.ctx.calls.handle(conn, id, request);
        }
        Box::pin(self.clone().dispatch(conn.clone(), id, request))
    }

    fn on_close(&self, conn: ConnectionId) {
        self.forget(conn);
    }
}
