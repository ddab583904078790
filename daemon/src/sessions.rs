//! The session engine (§D6–§D12.4, §C6–§C8): every device connection from accept to close, the
//! session state machine (T1–T18), pending links, registries, aliases, and the queries the
//! control plane answers from them.
//!
//! All state lives under one lock ([`Inner::state`]), so a claim sees links and sessions in one
//! step and every transition is atomic with its bus event. Nothing awaits under the lock. Lock
//! order: engine state → call router → bus. Timers (link TTL, tombstones, grace, keepalive,
//! pre-claim) are tokio timers, so tests run them with a paused clock; wall-clock values
//! (`createdAt`, `expiresAt`, event `ts`) come from the [`Clock`] seam.
//!
//! Calls are a separate module. It plugs in through [`CallRouter`], which receives the app's
//! call frames and the transitions that end a session's in-flight calls, and writes frames with
//! [`SessionManager::send_to_session`].

mod alias;
mod connection;
mod refusals;
mod registry;
mod transitions;

pub use refusals::{REPORTS_PER_WINDOW, WINDOW as REFUSAL_REPORT_WINDOW};

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, Weak};
use std::time::Duration;

use appduct_protocol::close::CloseReason;
use appduct_protocol::control::{
    Device, EventData, LinkCreateParams, LinkCreateResult, LinkCreatedData, PreviousState,
    RegistryState, RevokeResult, RevokedKind, RngSource, SessionRevokedData, SessionState,
    SessionSummary, SuspendReason, Transport,
};
use appduct_protocol::descriptor::{EventDescriptor, ToolDescriptor};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::frames::{
    AppFrame, DaemonFrame, FrameTooLarge, ToolCallProgress, ToolError, ToolResult, ToolResultPart,
    check_outgoing_size,
};
use appduct_protocol::ids::ResumeToken;
use appduct_protocol::jsonrpc::ErrorObject;
use appduct_protocol::limits::{self};
use appduct_protocol::parts::PartError;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

use crate::clock::Clock;
use crate::device_socket::{DeviceSender, DeviceSocket};
use crate::events::EventBus;
use crate::links::{self, LinkEnvironment, LinkTable};
use appduct_client::config::Config;
pub use registry::SharedTool;
use registry::{Registry, SharedTools};

// ---------------------------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------------------------

/// Engine settings taken from `config.json` (§S2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// `keepaliveIntervalSeconds`: ping period after the ack, sent in the ack.
    pub keepalive_interval_s: u32,
    /// `graceSeconds`: how long a suspended session waits for a resume, sent in the ack.
    pub grace_s: u32,
    /// `linkTtlSeconds`: default `ttlSeconds` of `link.create`.
    pub link_ttl_s: u32,
    /// `results.maxBytes`: sent in the ack as `result_parts_max_bytes` (§D17).
    pub result_max_bytes: u64,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            keepalive_interval_s: limits::DEFAULT_KEEPALIVE_INTERVAL_S,
            grace_s: limits::DEFAULT_GRACE_S,
            link_ttl_s: limits::DEFAULT_LINK_TTL_S,
            result_max_bytes: limits::DEFAULT_RESULT_MAX_BYTES,
        }
    }
}

impl EngineOptions {
    pub fn from_config(config: &Config) -> Self {
        Self {
            keepalive_interval_s: config.keepalive_interval_seconds,
            grace_s: config.grace_seconds,
            link_ttl_s: config.link_ttl_seconds,
            result_max_bytes: config.results.max_bytes,
        }
    }
}

/// An app frame about a call, matched by wire id in the calls module (§C10.2).
#[derive(Debug, Clone, PartialEq)]
pub enum CallFrame {
    Result(ToolResult),
    Error(ToolError),
    Progress(ToolCallProgress),
    /// One part of a result sent in parts (issue #17, §D17.2).
    Part(ToolResultPart),
    /// An answer for call `id` that broke a per-value bound (nesting depth, issue #20 defect
    /// 4; a content block, issue #17) and fails that call, the connection kept; `detail` says
    /// what was wrong, `fault` gives the error's `details`.
    Invalid {
        id: String,
        detail: String,
        fault: PartError,
    },
}

impl CallFrame {
    /// The wire id the frame names.
    pub fn wire_id(&self) -> &str {
        match self {
            Self::Result(f) => &f.id,
            Self::Error(f) => &f.id,
            Self::Progress(f) => &f.id,
            Self::Part(f) => &f.id,
            Self::Invalid { id, .. } => id,
        }
    }
}

/// A transition that ends the in-flight calls of a session (§D12.4, §C10.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallsEnded {
    /// T10: `session_suspended`, with the background message for `app_backgrounded`.
    Suspended(SuspendReason),
    /// T11: a resume replaced the open socket; `session_suspended`.
    Replaced,
    /// T17: `unknown_session`.
    Revoked,
    /// T16: `unknown_session` (normally none remain).
    Expired,
    /// T18: `session_not_active`, reason `daemon_shutdown`.
    Shutdown,
}

/// The calls module's hooks into the engine.
///
/// Both hooks run under the engine lock, right after the transition's bus event, so a call the
/// router registered before [`SessionManager::send_to_session`] can never miss the transition
/// that fails it. Implementations must therefore not call the [`SessionManager`] from a hook,
/// and must not hold their own locks while calling it. With no router installed, call frames
/// are dropped (they cannot match a call in flight).
pub trait CallRouter: Send + Sync {
    /// A `tool_result`, `tool_error` or `tool_call_progress` from the session's current socket.
    fn on_call_frame(&self, session_id: &str, frame: CallFrame);
    /// Every call in flight on `session_id` must now fail as `why` says.
    fn on_session_ended_calls(&self, session_id: &str, why: CallsEnded);
}

/// Why [`SessionManager::send_to_session`] did not write a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendFailure {
    #[error("the session is not live")]
    UnknownSession,
    #[error("the session is suspended ({0})")]
    Suspended(SuspendReason),
    #[error("the session's socket closed before the frame was written")]
    NotActive,
    #[error(transparent)]
    TooLarge(#[from] FrameTooLarge),
}

/// A live session a selector resolved to (§C6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSession {
    pub session_id: String,
    pub alias: String,
    pub state: SessionState,
    /// Set while suspended.
    pub suspend_reason: Option<SuspendReason>,
}

/// `2026-11-30T09:12:03.120Z`: ISO 8601 UTC with milliseconds (§C8).
pub use appduct_client::timestamp::format_iso_ms as format_timestamp_ms;

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

/// Where a live session's socket stands.
enum Socket {
    /// ACTIVE: acked on connection `conn`.
    Attached { conn: u64, sender: DeviceSender },
    /// SUSPENDED: the grace timer runs; `epoch` tells a stale timer apart.
    Suspended {
        since_ms: u64,
        reason: SuspendReason,
        epoch: u64,
        grace: AbortHandle,
    },
}

struct Session {
    alias: String,
    transport: Transport,
    device: Device,
    created_at_ms: u64,
    claimed_at_ms: u64,
    resume_token: ResumeToken,
    /// Sealed sessions: the randomness source of the latest handshake.
    rng: Option<RngSource>,
    socket: Socket,
    /// By name, so listings come out in code-point order.
    /// Shared so a call's lookup ([`SessionManager::tool_of`]) copies nothing.
    tools: Registry<Arc<SharedTool>>,
    events: Registry<EventDescriptor>,
    /// `pending` from the claim until the first `tool_registry_snapshot` (issue #23).
    registry: RegistryState,
}

impl Session {
    fn is_attached(&self, conn: u64) -> bool {
        matches!(self.socket, Socket::Attached { conn: c, .. } if c == conn)
    }

    fn state(&self) -> (SessionState, Option<SuspendReason>) {
        match &self.socket {
            Socket::Attached { .. } => (SessionState::Active, None),
            Socket::Suspended { reason, .. } => (SessionState::Suspended, Some(*reason)),
        }
    }

    fn summary(&self, id: &str) -> SessionSummary {
        let (state, suspend_reason) = self.state();
        let suspended_at = match &self.socket {
            Socket::Suspended { since_ms, .. } => Some(format_timestamp_ms(*since_ms)),
            Socket::Attached { .. } => None,
        };
        SessionSummary {
            session_id: id.to_owned(),
            alias: self.alias.clone(),
            state,
            transport: self.transport,
            device: self.device.clone(),
            created_at: format_timestamp_ms(self.created_at_ms),
            claimed_at: format_timestamp_ms(self.claimed_at_ms),
            suspended_at,
            suspend_reason,
            tool_count: self.tools.len() as u64,
            event_count: self.events.len() as u64,
            rng: self.rng,
            registry: self.registry,
            lease: None,
        }
    }

    fn resolved(&self, id: &str) -> ResolvedSession {
        let (state, suspend_reason) = self.state();
        ResolvedSession {
            session_id: id.to_owned(),
            alias: self.alias.clone(),
            state,
            suspend_reason,
        }
    }
}

/// A connection's control: how others ask it to close, and its sender for a last terminate.
struct ConnCtl {
    stop: watch::Sender<Option<CloseReason>>,
    sender: DeviceSender,
}

impl ConnCtl {
    /// Refuses further frames at once, then asks the connection to close with `reason`.
    fn stop_with(&self, reason: CloseReason) {
        self.sender.refuse_sends();
        self.stop.send_replace(Some(reason));
    }
}

#[derive(Default)]
struct State {
    links: LinkTable,
    sessions: HashMap<String, Session>,
    conns: HashMap<u64, ConnCtl>,
    shared_tools: SharedTools,
    /// Connection ids and suspension epochs.
    next_id: u64,
    shutting_down: bool,
}

impl State {
    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Takes the socket of `conn` away: from this moment (under the engine lock) nothing more
    /// can be queued on it, so no frame sent later overtakes its close (T11, T17, T18).
    fn stop_connection(&self, conn: u64, reason: CloseReason) {
        if let Some(ctl) = self.conns.get(&conn) {
            ctl.stop_with(reason);
        }
    }

    /// Live sessions in `sessions.list` order: `createdAt`, then session id (§C8.5).
    fn ordered(&self) -> Vec<(&String, &Session)> {
        let mut all: Vec<_> = self.sessions.iter().collect();
        all.sort_by(|(ia, a), (ib, b)| {
            a.created_at_ms
                .cmp(&b.created_at_ms)
                .then_with(|| ia.cmp(ib))
        });
        all
    }

    /// Selector resolution of §C6 over live sessions.
    fn resolve(&self, selector: Option<&str>) -> Result<(&String, &Session), ErrorObject> {
        let Some(selector) = selector else {
            let live = self.ordered();
            return match live.as_slice() {
                [] => Err(ErrorObject::application(
                    ErrorType::NoSession,
                    "No app session is connected; create a link and open it in the app first",
                )),
                [one] => Ok(*one),
                many => {
                    let aliases: Vec<&str> = many.iter().map(|(_, s)| s.alias.as_str()).collect();
                    let sessions: Vec<Value> = many
                        .iter()
                        .map(|(id, s)| json!({"sessionId": id, "alias": s.alias}))
                        .collect();
                    Err(ErrorObject::application(
                        ErrorType::AmbiguousSession,
                        format!(
                            "{} sessions are connected ({}); choose one with a selector",
                            many.len(),
                            aliases.join(", ")
                        ),
                    )
                    .with_details(json!({ "sessions": sessions })))
                }
            };
        };
        let len = selector.chars().count();
        if !(1..=appduct_protocol::control::MAX_SELECTOR_LEN).contains(&len) {
            return Err(appduct_protocol::control::ParamError::invalid(
                "selector",
                "must be a string of 1 to 128 characters",
            )
            .into());
        }
        if let Some((id, session)) = self.sessions.get_key_value(selector) {
            return Ok((id, session));
        }
        if let Some(found) = self.sessions.iter().find(|(_, s)| s.alias == selector) {
            return Ok(found);
        }
        if let Some(link) = self.links.get(selector) {
            // `transport` and `endpoint` let a waiter name the likely cause when nothing claims
            // the link; `refused` is the app's first refusal (issue #23).
            let mut details = json!({
                "selector": selector,
                "pending": true,
                "transport": link.transport,
                "endpoint": {"address": link.endpoint.address, "port": link.endpoint.port},
            });
            if let Some(reason) = link.refusal {
                details["refused"] = json!(reason.as_str());
            }
            return Err(ErrorObject::application(
                ErrorType::UnknownSession,
                format!("Session \"{selector}\" is a link that has not been claimed yet"),
            )
            .with_details(details));
        }
        Err(ErrorObject::application(
            ErrorType::UnknownSession,
            format!("No connected session matches \"{selector}\""),
        )
        .with_details(json!({ "selector": selector })))
    }
}

/// The engine behind every [`SessionManager`] clone.
struct Inner {
    options: EngineOptions,
    bus: EventBus,
    clock: Arc<dyn Clock>,
    link_env: Arc<dyn LinkEnvironment>,
    router: RwLock<Option<Arc<dyn CallRouter>>>,
    state: Mutex<State>,
    /// Notified whenever a connection ends (shutdown waits for all of them).
    conn_ended: Notify,
    /// The rate limit of refusal reports (log and `device_refused`).
    refusals: Mutex<refusals::RefusalLimiter>,
    /// `registry.require` (§D18.5): set at start and by `daemon reload`; checked per frame.
    registry_require: RwLock<Vec<&'static str>>,
    this: Weak<Inner>,
}

// ---------------------------------------------------------------------------------------------
// The manager
// ---------------------------------------------------------------------------------------------

/// Mint attempts in one `link.create` when a fresh id is taken between minting and inserting.
const MAX_MINT_ROUNDS: usize = 8;

/// The session engine. Cheap to clone; clones share one engine.
#[derive(Clone)]
pub struct SessionManager {
    inner: Arc<Inner>,
}

impl fmt::Debug for SessionManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.inner.state();
        f.debug_struct("SessionManager")
            .field("options", &self.inner.options)
            .field("sessions", &st.sessions.len())
            .field(
                "pending_links",
                &st.links
                    .pending_count(self.inner.clock.now_unix_ms() / 1000),
            )
            .field("connections", &st.conns.len())
            .field("shutting_down", &st.shutting_down)
            .finish()
    }
}

impl SessionManager {
    /// The manager of an engine, for a connection task that needs a manager-level operation.
    fn from_inner(inner: Arc<Inner>) -> Self {
        Self { inner }
    }

    pub fn new(
        options: EngineOptions,
        bus: EventBus,
        clock: Arc<dyn Clock>,
        link_env: Arc<dyn LinkEnvironment>,
    ) -> Self {
        let inner = Arc::new_cyclic(|this| Inner {
            options,
            bus,
            clock,
            link_env,
            router: RwLock::new(None),
            state: Mutex::new(State::default()),
            conn_ended: Notify::new(),
            refusals: Mutex::default(),
            registry_require: RwLock::new(Vec::new()),
            this: this.clone(),
        });
        Self { inner }
    }

    pub fn options(&self) -> EngineOptions {
        self.inner.options
    }

    pub fn bus(&self) -> &EventBus {
        &self.inner.bus
    }

    /// Sets `registry.require` (§D18.5): the declaration fields (wire names) every tool of a
    /// later registry frame must carry. Tools already registered are not checked again.
    pub fn set_registry_require(&self, fields: Vec<&'static str>) {
        *self
            .inner
            .registry_require
            .write()
            .unwrap_or_else(PoisonError::into_inner) = fields;
    }

    /// Installs (or replaces) the calls module's hooks.
    pub fn set_router(&self, router: Arc<dyn CallRouter>) {
        *self
            .inner
            .router
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(router);
    }

    /// Runs one accepted device connection until it ends: pre-claim deadline (an absolute
    /// tokio instant: TCP accept plus the pre-claim timeout), claim or resume, frames,
    /// keepalive, suspension. `preclaim_guard` (the listener's pre-claim slot) is dropped once
    /// the first claim or resume has been processed or the connection ends.
    pub async fn handle_connection<G: Send>(
        &self,
        socket: DeviceSocket,
        transport: Transport,
        claim_deadline: Instant,
        preclaim_guard: G,
    ) {
        connection::run(
            Arc::clone(&self.inner),
            socket,
            transport,
            claim_deadline,
            preclaim_guard,
        )
        .await;
    }

    /// [`handle_connection`](Self::handle_connection) on a new task.
    pub fn spawn_connection<G: Send + 'static>(
        &self,
        socket: DeviceSocket,
        transport: Transport,
        claim_deadline: Instant,
        preclaim_guard: G,
    ) -> JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            this.handle_connection(socket, transport, claim_deadline, preclaim_guard)
                .await;
        })
    }

    /// `link.create` (§C8.4, T1): mints a link, starts its TTL timer (then the tombstone
    /// window) and emits `link_created`. Must be called within a tokio runtime.
    pub fn create_link(&self, params: &LinkCreateParams) -> Result<LinkCreateResult, ErrorObject> {
        let now = self.inner.clock.now_unix_ms();
        for _ in 0..MAX_MINT_ROUNDS {
            // Minting (and a possible leaf re-mint) runs outside the engine lock.
            let minted = links::mint(
                params,
                self.inner.link_env.as_ref(),
                self.inner.options.link_ttl_s,
                now,
                |id| self.inner.is_id_taken(id),
            )?;
            let mut st = self.inner.state();
            if st.shutting_down {
                return Err(ErrorObject::internal("The daemon is shutting down"));
            }
            if st.links.knows(&minted.id) || st.sessions.contains_key(&minted.id) {
                // Taken between minting and now: mint again.
                continue;
            }
            let id = minted.id;
            let expires_at = minted.result.expires_at;
            // Until the wall-clock `expiresAt` (§D4.3: expired once now_seconds >= expires_at),
            // then a tombstone window of one TTL.
            let until_expiry =
                Duration::from_millis(expires_at.saturating_mul(1000).saturating_sub(now));
            let window = Duration::from_secs(expires_at.saturating_sub(now / 1000));
            st.links.insert(id.clone(), minted.link);
            let weak = Arc::downgrade(&self.inner);
            let timer_id = id.clone();
            let timer = tokio::spawn(async move {
                tokio::time::sleep(until_expiry).await;
                match weak.upgrade() {
                    Some(inner) if inner.expire_link(&timer_id) => {}
                    _ => return,
                }
                tokio::time::sleep(window).await;
                if let Some(inner) = weak.upgrade() {
                    inner.forget_link(&timer_id);
                }
            });
            st.links.set_timer(&id, timer.abort_handle());
            self.inner.bus.emit(
                Some(&id),
                None,
                EventData::LinkCreated(LinkCreatedData::new(
                    minted.result.expires_at,
                    minted.result.transport,
                )),
            );
            return Ok(minted.result);
        }
        Err(links::LinkError::IdSpace.into())
    }

    /// `sessions.list`: live sessions by `createdAt`, then session id (§C8.5).
    pub fn list(&self) -> Vec<SessionSummary> {
        let st = self.inner.state();
        st.ordered()
            .into_iter()
            .map(|(id, s)| s.summary(id))
            .collect()
    }

    /// Selector resolution (§C6): `no_session`, `ambiguous_session` (with
    /// `details.sessions`), or `unknown_session` (with `details.pending` for a pending link).
    pub fn resolve(&self, selector: Option<&str>) -> Result<ResolvedSession, ErrorObject> {
        let st = self.inner.state();
        st.resolve(selector).map(|(id, s)| s.resolved(id))
    }

    /// `sessions.describe` (§C8.6).
    pub fn describe(&self, selector: Option<&str>) -> Result<SessionSummary, ErrorObject> {
        let st = self.inner.state();
        st.resolve(selector).map(|(id, s)| s.summary(id))
    }

    /// The summary of a live session by exact id.
    pub fn summary(&self, session_id: &str) -> Option<SessionSummary> {
        let st = self.inner.state();
        st.sessions.get(session_id).map(|s| s.summary(session_id))
    }

    /// `sessions.revoke` (§C8.7): T17 for a live session, T9 for a pending link named by its
    /// exact id.
    pub fn revoke(&self, selector: Option<&str>) -> Result<RevokeResult, ErrorObject> {
        let mut st = self.inner.state();
        let id = match st.resolve(selector) {
            Ok((id, _)) => id.clone(),
            Err(error) => {
                let Some(link_id) = selector.filter(|s| st.links.is_pending(s)) else {
                    return Err(error);
                };
                st.links.revoke(link_id);
                self.inner.bus.emit(
                    Some(link_id),
                    None,
                    EventData::SessionRevoked(SessionRevokedData::new(PreviousState::Pending)),
                );
                return Ok(RevokeResult::new(
                    link_id.to_owned(),
                    None,
                    RevokedKind::Link,
                ));
            }
        };
        self.revoke_live(st, id)
            .ok_or_else(|| ErrorObject::internal("The resolved session vanished"))
    }

    /// T17 for the live session `id`, under the engine lock `st`; `None` when it is not live.
    fn revoke_live(&self, mut st: MutexGuard<'_, State>, id: String) -> Option<RevokeResult> {
        let session = st.sessions.remove(&id)?;
        let previous_state = match session.socket {
            Socket::Attached { conn, .. } => {
                st.stop_connection(conn, CloseReason::Revoked);
                PreviousState::Active
            }
            Socket::Suspended { grace, .. } => {
                grace.abort();
                PreviousState::Suspended
            }
        };
        self.inner.bus.emit(
            Some(&id),
            Some(&session.alias),
            EventData::SessionRevoked(SessionRevokedData::new(previous_state)),
        );
        self.inner.bus.close_session(&id);
        self.inner.calls_ended(&id, CallsEnded::Revoked);
        Some(RevokeResult::new(
            id,
            Some(session.alias),
            RevokedKind::Session,
        ))
    }

    /// A `session_claim` or `session_resume` that arrived in cleartext on the wss port's plain
    /// route (issue #23): whoever sent it put its token on the LAN in the clear. When the token
    /// is right, the link (revoked, as `sessions.revoke` would: `session_revoked` with
    /// `previousState: "pending"`) or the live session (revoked, T17) is ended, since anyone who
    /// saw the bytes could use it. A wrong token changes nothing and is not counted. The app is
    /// closed `1008 wrong_transport` either way, so the answer reveals nothing.
    pub(crate) fn refuse_cleartext(&self, frame: &AppFrame) {
        let now_s = self.inner.clock.now_unix_ms() / 1000;
        let mut st = self.inner.state();
        match frame {
            AppFrame::SessionClaim(claim) => {
                let id = claim.session_id.as_str();
                let leaked = st.links.get(id).is_some_and(|link| {
                    !link.is_expired(now_s) && link.token_matches(&claim.token)
                });
                if leaked {
                    st.links.revoke(id);
                    tracing::warn!(
                        session = %id,
                        "a claim token arrived in cleartext on the plain route; link revoked"
                    );
                    self.inner.bus.emit(
                        Some(id),
                        None,
                        EventData::SessionRevoked(SessionRevokedData::new(PreviousState::Pending)),
                    );
                }
            }
            AppFrame::SessionResume(resume) => {
                let id = resume.session_id.as_str();
                let leaked = st
                    .sessions
                    .get(id)
                    .is_some_and(|s| s.resume_token.matches(&resume.resume_token));
                if leaked {
                    tracing::warn!(
                        session = %id,
                        "a resume token arrived in cleartext on the plain route; session revoked"
                    );
                    let _ = self.revoke_live(st, id.to_owned());
                }
            }
            _ => {}
        }
    }

    /// The session's tool registry by name (code-point order); also for suspended sessions.
    pub fn tools_of(&self, session_id: &str) -> Option<Vec<ToolDescriptor>> {
        let st = self.inner.state();
        st.sessions
            .get(session_id)
            .map(|s| s.tools.iter().map(|t| t.descriptor().clone()).collect())
    }

    /// One registered tool of a live session (shared, not copied: this runs on every call).
    pub fn tool_of(&self, session_id: &str, name: &str) -> Option<Arc<SharedTool>> {
        let st = self.inner.state();
        st.sessions.get(session_id)?.tools.get(name).cloned()
    }

    /// The session's declared events by name (code-point order); also for suspended sessions.
    pub fn events_of(&self, session_id: &str) -> Option<Vec<EventDescriptor>> {
        let st = self.inner.state();
        st.sessions
            .get(session_id)
            .map(|s| s.events.iter().cloned().collect())
    }

    /// Live sessions (`sessionCount`).
    pub fn session_count(&self) -> usize {
        self.inner.state().sessions.len()
    }

    /// Whether `link.create` may mint one more link under `limit` claimable ones (see
    /// [`links::admit_pending`]). Links past their `expiresAt` by the wall clock become
    /// tombstones first (T6, `link_expired` emitted; their timers then only forget them), so they
    /// keep counting toward the bound on held links until forgotten.
    pub fn admit_link(&self, limit: usize) -> Result<(), links::TooManyPendingLinks> {
        let now_s = self.inner.clock.now_unix_ms() / 1000;
        let mut st = self.inner.state();
        let outcome = st.links.admit(now_s, limit);
        for id in &outcome.expired {
            self.inner
                .bus
                .emit(Some(id), None, EventData::LinkExpired(Default::default()));
        }
        outcome.admitted
    }

    /// Claimable links (`pendingLinks`): tombstones and links past their `expiresAt` (by the
    /// wall clock) do not count.
    pub fn pending_links(&self) -> usize {
        let now_s = self.inner.clock.now_unix_ms() / 1000;
        self.inner.state().links.pending_count(now_s)
    }

    /// Open device connections, claimed or not.
    pub fn connection_count(&self) -> usize {
        self.inner.state().conns.len()
    }

    /// Writes a daemon frame (`tool_call`, `tool_cancel`) to the session's current socket,
    /// waiting for room in its queue. A frame over 262144 bytes is refused before anything is
    /// sent (§D7.5).
    pub async fn send_to_session(
        &self,
        session_id: &str,
        frame: &DaemonFrame,
    ) -> Result<(), SendFailure> {
        let text = frame.encode();
        check_outgoing_size(&text)?;
        let sender = {
            let st = self.inner.state();
            match st.sessions.get(session_id).map(|s| &s.socket) {
                None => return Err(SendFailure::UnknownSession),
                Some(Socket::Suspended { reason, .. }) => {
                    return Err(SendFailure::Suspended(*reason));
                }
                Some(Socket::Attached { sender, .. }) => sender.clone(),
            }
        };
        sender
            .send_text(text)
            .await
            .map_err(|_| SendFailure::NotActive)
    }

    pub fn is_shutting_down(&self) -> bool {
        self.inner.state().shutting_down
    }

    /// T18: refuses new connections and links, stops every link and grace timer, tells the
    /// router, closes every device socket (claimed or not) with `1001 daemon_shutdown` and
    /// waits at most 1 s for them to end; stragglers are terminated. All state is dropped and
    /// no event is emitted.
    pub async fn shutdown(&self) {
        let deadline = Instant::now() + Duration::from_millis(limits::CLOSE_HANDSHAKE_WAIT_MS);
        {
            let mut st = self.inner.state();
            st.shutting_down = true;
            st.links.clear();
            let sessions: Vec<(String, Session)> = st.sessions.drain().collect();
            for ctl in st.conns.values() {
                ctl.stop_with(CloseReason::DaemonShutdown);
            }
            for (id, session) in sessions {
                if let Socket::Suspended { grace, .. } = session.socket {
                    grace.abort();
                }
                self.inner.bus.close_session(&id);
                self.inner.calls_ended(&id, CallsEnded::Shutdown);
            }
        }
        loop {
            let ended = self.inner.conn_ended.notified();
            if self.inner.state().conns.is_empty() {
                return;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                break;
            }
        }
        for ctl in self.inner.state().conns.values() {
            ctl.sender.terminate();
        }
    }
}
