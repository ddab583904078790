//! A scriptable fake daemon for tests of control clients (the bridge, the CLI) and of the
//! control server itself: the real control server ([`serve_connection`]) in front of a
//! [`FakeDaemon`] that answers only the methods a test registers and records every request.
//!
//! - Registered methods get the fake's built-in answers, which follow the daemon's rules over
//!   a small state ([`FakeState`]: sessions, tools, pending links, consent records; selector
//!   resolution of §C6), or a test's own [`FakeDaemon::script`].
//! - Any other method is answered `-32601` and recorded as unexpected, so the test can fail on
//!   its own thread ([`FakeDaemon::assert_no_unexpected`]); [`FakeDaemon::script_other`]
//!   replaces that for tests that answer everything.
//! - [`FakeDaemon::hold`] delays the answer to the first request of a method until released,
//!   so a test can act mid-step; [`FakeDaemon::on_close`] sees connections close.
//! - [`FakeDaemon::connect`] serves one in-memory connection; [`FakeDaemon::handler`] plugs the
//!   fake into `serve_unix` or `serve_connection` directly.
//!
//! Built with the `testing` feature only; the daemon never uses it.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use appduct_protocol::bootstrap::{BootstrapPayload, Decoded, SealedBootstrapPayload};
use appduct_protocol::control::{
    ControlRequest, Device, PolicyDecision, RegistryState, SessionState, SessionSummary,
    ToolsCallParams, ToolsListEntry, Transport, features,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::{ErrorObject, RequestId};
use serde_json::{Value, json};
use tokio::io::DuplexStream;
use tokio::sync::{Notify, Semaphore};

use crate::control_server::{
    BoxFuture, Connection, ConnectionId, ControlHandler, Reply, ServerOptions, serve_connection,
};

/// What [`FakeDaemon::on_close`] runs.
type CloseObserver = Arc<dyn Fn(ConnectionId) + Send + Sync>;

/// A test's answer to one method (see [`FakeDaemon::script`]).
pub type Script =
    Arc<dyn Fn(&Connection, RequestId, ControlRequest) -> BoxFuture<'static, Reply> + Send + Sync>;

pub type CallHook =
    Arc<dyn Fn(Connection, RequestId, ToolsCallParams) -> BoxFuture<'static, Reply> + Send + Sync>;

/// What the built-in answers read and change.
#[derive(Debug, Default)]
pub struct FakeState {
    pub sessions: Vec<SessionSummary>,
    pub pending_links: Vec<String>,
    /// Extra `unknown_session` details of a pending link (`transport`, `endpoint`, `refused`).
    pub pending_details: HashMap<String, Value>,
    pub tools: HashMap<String, Vec<ToolsListEntry>>,
    pub consent: HashMap<String, Value>,
    pub next_handle: usize,
    /// `daemon.status` `advertisedAddress.address`; `192.168.1.20` when unset.
    pub advertised: Option<String>,
}

/// The fake daemon. Unregistered methods are recorded; see [`FakeDaemon::assert_no_unexpected`].
#[derive(Default)]
pub struct FakeDaemon {
    /// Answers of the test's own, in place of the built-in ones.
    scripts: Mutex<HashMap<String, Script>>,
    /// The answer to every unregistered method, in place of `-32601` and the record.
    other: Mutex<Option<Script>>,
    holds: Mutex<HashMap<String, Arc<Hold>>>,
    closed: Mutex<Vec<CloseObserver>>,
    pub state: Mutex<FakeState>,
    allowed: Mutex<HashSet<String>>,
    /// Methods answered with an error on purpose (not "unexpected"): see [`FakeDaemon::refuse`].
    refused: Mutex<HashSet<String>>,
    /// Every request received: (method, params).
    pub log: Mutex<Vec<(String, Value)>>,
    unexpected: Mutex<Vec<String>>,
    call_hook: Mutex<Option<CallHook>>,
    pub logged: Notify,
    pub connections: AtomicUsize,
    pub subscribers: Mutex<Vec<Connection>>,
}

/// The sealed static public key of the fake daemon's sealed links.
pub const SEALED_KEY: [u8; 32] = [0x5e; 32];

pub const PIN: &str = "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=";

pub fn session(id: &str, alias: &str) -> SessionSummary {
    SessionSummary {
        session_id: id.to_owned(),
        alias: alias.to_owned(),
        state: SessionState::Active,
        transport: Transport::Native,
        device: Device::default(),
        created_at: "2026-11-30T09:12:03.120Z".into(),
        claimed_at: "2026-11-30T09:12:09.842Z".into(),
        suspended_at: None,
        suspend_reason: None,
        tool_count: 0,
        event_count: 0,
        rng: None,
        registry: RegistryState::Received,
        lease: None,
    }
}

pub fn tool(descriptor: Value, policy: PolicyDecision) -> ToolsListEntry {
    ToolsListEntry::from_descriptor(
        descriptor
            .as_object()
            .unwrap_or_else(|| panic!("a tool descriptor is an object: {descriptor}")),
        policy,
    )
}

fn rpc(t: ErrorType, message: &str, details: Value) -> Reply {
    Reply::Err(ErrorObject::application(t, message).with_details(details))
}

impl FakeDaemon {
    pub fn new(methods: &[&str]) -> Arc<Self> {
        let f = Self::default();
        f.allowed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(methods.iter().map(|m| (*m).to_owned()));
        Arc::new(f)
    }

    pub fn add_session(&self, s: SessionSummary, tools: Vec<ToolsListEntry>) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.tools.insert(s.session_id.clone(), tools);
        st.sessions.push(s);
    }

    pub fn remove_session(&self, id: &str) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.sessions.retain(|s| s.session_id != id);
        st.tools.remove(id);
    }

    /// Answers `method` with `invalid_request`, as a daemon that cannot serve it would; it is
    /// logged but does not fail the test.
    pub fn refuse(&self, method: &str) {
        self.refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(method.to_owned());
    }

    /// The unregistered methods received so far, in order.
    pub fn unexpected(&self) -> Vec<String> {
        self.unexpected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Panics (on the caller's thread, so the test fails) if any unregistered method was
    /// received.
    pub fn assert_no_unexpected(&self) {
        let unexpected = self.unexpected();
        assert!(
            unexpected.is_empty(),
            "FakeDaemon received unregistered methods: {unexpected:?}"
        );
    }

    /// Answers `method` with `script` (registering it), in place of the built-in answer.
    pub fn script(
        &self,
        method: &str,
        script: impl Fn(&Connection, RequestId, ControlRequest) -> BoxFuture<'static, Reply>
        + Send
        + Sync
        + 'static,
    ) {
        self.allowed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(method.to_owned());
        self.scripts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(method.to_owned(), Arc::new(script));
    }

    /// Answers every unregistered method with `script` instead of `-32601`; nothing is
    /// recorded as unexpected.
    pub fn script_other(
        &self,
        script: impl Fn(&Connection, RequestId, ControlRequest) -> BoxFuture<'static, Reply>
        + Send
        + Sync
        + 'static,
    ) {
        *self.other.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(script));
    }

    /// Holds the answer to the first request for `method` until [`Hold::open`]. The answer is
    /// computed when the request arrives; only its delivery waits.
    pub fn hold(&self, method: &str) -> Arc<Hold> {
        let hold = Arc::new(Hold {
            method: method.to_owned(),
            used: AtomicBool::new(false),
            entered: Notify::new(),
            release: Semaphore::new(0),
        });
        self.holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(method.to_owned(), hold.clone());
        hold
    }

    /// Runs `f` with the id of every connection that closes (after its close hooks).
    pub fn on_close(&self, f: impl Fn(ConnectionId) + Send + Sync + 'static) {
        self.closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::new(f));
    }

    /// The fake as the handler of a control server (`serve_unix`, `serve_connection`).
    pub fn handler(self: &Arc<Self>) -> Arc<FakeHandler> {
        Arc::new(FakeHandler(self.clone()))
    }

    /// One in-memory connection to the fake, served by the daemon's own control server: the
    /// client end (for `ControlClient::from_stream`, or raw lines).
    pub fn connect(self: &Arc<Self>) -> DuplexStream {
        self.connect_with(ServerOptions::default(), 64 * 1024)
    }

    /// [`FakeDaemon::connect`] with server options and a duplex buffer of `buffer` bytes.
    pub fn connect_with(self: &Arc<Self>, options: ServerOptions, buffer: usize) -> DuplexStream {
        let (client, server) = tokio::io::duplex(buffer);
        tokio::spawn(serve_connection(server, self.handler(), options));
        client
    }

    pub fn on_call(&self, hook: CallHook) {
        *self
            .call_hook
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(hook);
    }

    pub fn methods(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(m, _)| m.clone())
            .collect()
    }

    pub fn requests(&self, method: &str) -> Vec<Value> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(m, _)| m == method)
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// Waits until `method` was received `n` times.
    pub async fn wait_for(&self, method: &str, n: usize) {
        loop {
            let notified = self.logged.notified();
            if self.requests(method).len() >= n {
                return;
            }
            tokio::time::timeout(Duration::from_secs(10), notified)
                .await
                .unwrap_or_else(|_| panic!("timed out waiting for {method}"));
        }
    }

    /// Selector resolution of §C6.
    fn resolve(&self, selector: Option<&str>) -> Result<SessionSummary, Reply> {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match selector {
            Some(sel) => {
                if let Some(s) = st.sessions.iter().find(|s| s.session_id == sel) {
                    return Ok(s.clone());
                }
                if let Some(s) = st.sessions.iter().find(|s| s.alias == sel) {
                    return Ok(s.clone());
                }
                let mut details = json!({"selector": sel});
                let message = if st.pending_links.iter().any(|p| p == sel) {
                    details["pending"] = json!(true);
                    if let Some(Value::Object(extra)) = st.pending_details.get(sel) {
                        for (k, v) in extra {
                            details[k] = v.clone();
                        }
                    }
                    format!("The link {sel} has not been claimed yet")
                } else {
                    format!("No live session matches {sel:?}")
                };
                Err(rpc(ErrorType::UnknownSession, &message, details))
            }
            None => match st.sessions.as_slice() {
                [] => Err(rpc(ErrorType::NoSession, "No live session", json!({}))),
                [one] => Ok(one.clone()),
                many => {
                    let aliases: Vec<&str> = many.iter().map(|s| s.alias.as_str()).collect();
                    let list: Vec<Value> = many
                        .iter()
                        .map(|s| json!({"sessionId": s.session_id, "alias": s.alias}))
                        .collect();
                    Err(rpc(
                        ErrorType::AmbiguousSession,
                        &format!("Several sessions are live: {}", aliases.join(", ")),
                        json!({"sessions": list}),
                    ))
                }
            },
        }
    }

    fn answer(
        self: &Arc<Self>,
        conn: &Connection,
        id: RequestId,
        req: ControlRequest,
    ) -> BoxFuture<'static, Reply> {
        let ready = |r: Reply| -> BoxFuture<'static, Reply> { Box::pin(async move { r }) };
        match req {
            ControlRequest::DaemonHello(_) => ready(Reply::Ok(json!({
                "version": env!("CARGO_PKG_VERSION"), "controlProtocol": 1, "minControlProtocol": 1,
                "pid": 1, "startedAt": "2026-11-30T09:12:03.120Z", "stateDir": "/tmp/x",
                "features": features::ALL, "sessionCount": 0, "pendingLinks": 0, "pendingCalls": 0
            }))),
            ControlRequest::SessionsDescribe(p) => {
                ready(match self.resolve(p.selector.as_deref()) {
                    Ok(s) => Reply::from_result(Ok(s)),
                    Err(r) => r,
                })
            }
            ControlRequest::SessionsList(_) => {
                let s = self
                    .state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .sessions
                    .clone();
                ready(Reply::from_result(Ok(s)))
            }
            ControlRequest::ToolsList(p) => ready(match self.resolve(p.selector.as_deref()) {
                Err(r) => r,
                Ok(s) => {
                    let mut tools = self
                        .state
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .tools
                        .get(&s.session_id)
                        .cloned()
                        .unwrap_or_default();
                    tools.sort_by(|a, b| a.name().cmp(b.name()));
                    let total = tools.len() as u64;
                    let offset = p.offset.unwrap_or(0);
                    let page: Vec<ToolsListEntry> = tools
                        .into_iter()
                        .skip(offset as usize)
                        .take(p.limit.unwrap_or(u64::MAX) as usize)
                        .collect();
                    let has_more = offset + (page.len() as u64) < total;
                    let page: Vec<Value> = page.iter().map(to_json).collect();
                    Reply::Ok(
                        json!({"tools": page, "total": total, "hasMore": has_more, "offset": offset, "groups": []}),
                    )
                }
            }),
            ControlRequest::ToolsCall(p) => match self.resolve(p.selector.as_deref()) {
                Err(r) => ready(r),
                Ok(s) => {
                    let hook = self
                        .call_hook
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone();
                    match hook {
                        Some(h) => h(conn.clone(), id, p),
                        None => ready(Reply::Ok(json!({
                            "result": {"ok": true}, "callId": p.call_id, "sessionId": s.session_id,
                            "alias": s.alias, "durationMs": 3
                        }))),
                    }
                }
            },
            ControlRequest::ToolsCancel(_) => ready(Reply::Ok(json!({"cancelled": true}))),
            ControlRequest::SessionsRevoke(p) => {
                let id = p.selector.unwrap_or_default();
                self.state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .pending_links
                    .retain(|l| *l != id);
                ready(Reply::Ok(
                    json!({"ok": true, "sessionId": id, "alias": null, "revoked": "link"}),
                ))
            }
            ControlRequest::DaemonStatus(_) => {
                let address = self
                    .state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .advertised
                    .clone()
                    .unwrap_or_else(|| "192.168.1.20".into());
                ready(Reply::Ok(json!({
                    "version": env!("CARGO_PKG_VERSION"), "controlProtocol": 1, "pid": 1,
                    "startedAt": "2026-11-30T09:12:03.120Z", "stateDir": "/tmp/x",
                    "wssPort": 8443, "webPort": 53120,
                    "advertisedAddress": {"address": address, "family": 4, "source": "detected"},
                    "pinnedKeys": [], "sessions": [], "pendingLinks": 0, "pendingCalls": 0,
                    "policy": {"default": "allow", "destructive": "prompt"},
                    "audit": {"path": "/tmp/x/audit", "failedWrites": 0, "failedPrunes": 0, "retentionDays": 30},
                    "eventsLog": {"path": "/tmp/x/events.log", "failedWrites": 0},
                })))
            }
            ControlRequest::LinkCreate(p) => {
                let web = p.transport() == Transport::Web;
                let view = Decoded::new(
                    4,
                    if web { "127.0.0.1" } else { "192.168.1.20" },
                    if web { 53120 } else { 8443 },
                    "Zk3pQ0mX8sL1vB2n",
                    "A".repeat(43),
                    1_764_494_223,
                );
                let fields = BootstrapPayload::try_from(&view)
                    .unwrap_or_else(|e| panic!("the fixed link is valid: {e:?}"));
                let sealed = p.transport() == Transport::Sealed;
                let payload = if sealed {
                    SealedBootstrapPayload::new(fields, SEALED_KEY).encode()
                } else {
                    fields.encode()
                }
                .unwrap_or_else(|e| panic!("the fixed link encodes: {e:?}"));
                let mut link = json!({
                    "sessionId": "Zk3pQ0mX8sL1vB2n", "transport": p.transport().as_str(),
                    "deepLinkPayload": payload,
                    "endpoint": {"address": view.address, "port": view.port, "family": 4},
                    "expiresAt": 1_764_494_223u64, "pin": PIN,
                });
                if sealed {
                    link["sealedKey"] = json!(crate::tls::sealed_key_text(&SEALED_KEY));
                }
                ready(Reply::Ok(link))
            }
            ControlRequest::ConsentCreate(p) => {
                if self.resolve(Some(&p.session_id)).is_err() {
                    return ready(rpc(ErrorType::UnknownSession, "no such session", json!({})));
                }
                let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                st.next_handle += 1;
                let handle = format!("cr_test{}", st.next_handle);
                st.consent.insert(handle.clone(), to_json(&p.record()));
                ready(Reply::Ok(
                    json!({"handle": handle, "expiresAt": 1_800_000_000u64}),
                ))
            }
            ControlRequest::ConsentTake(p) => {
                let taken = self
                    .state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .consent
                    .remove(&p.handle);
                ready(match taken {
                    Some(r) => Reply::Ok(r),
                    None => rpc(
                        ErrorType::InvalidRequest,
                        "unknown or expired consent handle",
                        json!({"reason": "expired"}),
                    ),
                })
            }
            ControlRequest::EventsSubscribe(p) => {
                let conn = conn.clone();
                let this = self.clone();
                Box::pin(async move {
                    if let Some(sel) = p.session_selector.as_deref()
                        && let Err(r) = this.resolve(Some(sel))
                    {
                        return r;
                    }
                    conn.set_subscribed();
                    let mut result = json!({"ok": true});
                    if p.since.is_some() {
                        result["replay"] = json!({"count": 0, "dropped": 2, "cursor": 0});
                    }
                    conn.respond(&id, Ok(result));
                    this.subscribers
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(conn);
                    this.logged.notify_waiters();
                    Reply::AlreadySent
                })
            }
            other => ready(Reply::Err(ErrorObject::method_not_found(other.method()))),
        }
    }

    /// Sends an `event` notification to every subscriber.
    pub fn emit(&self, event: Value) {
        let line = format!(
            "{}\n",
            json!({"jsonrpc": "2.0", "method": "event", "params": event})
        );
        for c in self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            c.send_notification(line.clone().into_bytes());
        }
    }

    /// Closes every subscriber connection.
    pub fn close_subscribers(&self) {
        for c in self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            c.close();
        }
    }
}

fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap_or_else(|e| panic!("params serialise: {e}"))
}

/// The request's params as JSON (`null` for methods whose params the log does not keep).
fn params_of(request: &ControlRequest) -> Value {
    match request {
        ControlRequest::DaemonHello(p) => to_json(p),
        ControlRequest::ToolsCall(p) => to_json(p),
        ControlRequest::ToolsCancel(p) => to_json(p),
        ControlRequest::ToolsList(p) => to_json(p),
        ControlRequest::SessionsDescribe(p) => to_json(p),
        ControlRequest::EventsSubscribe(p) => to_json(p),
        ControlRequest::ConsentCreate(p) => to_json(p),
        ControlRequest::ConsentTake(p) => to_json(p),
        ControlRequest::EventsSince(p) => to_json(p),
        ControlRequest::EventsList(p) => to_json(p),
        ControlRequest::LinkCreate(p) => to_json(p),
        ControlRequest::SessionsRevoke(p) => to_json(p),
        ControlRequest::SessionsLease(p) => to_json(p),
        ControlRequest::SessionsRelease(p) => to_json(p),
        ControlRequest::ToolsResult(p) => to_json(p),
        _ => Value::Null,
    }
}

/// [`FakeDaemon`] as a [`ControlHandler`].
pub struct FakeHandler(pub Arc<FakeDaemon>);

impl fmt::Debug for FakeHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FakeHandler")
    }
}

impl fmt::Debug for FakeDaemon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FakeDaemon")
    }
}

impl ControlHandler for FakeHandler {
    fn handle(
        &self,
        conn: &Connection,
        id: RequestId,
        request: ControlRequest,
    ) -> BoxFuture<'static, Reply> {
        let fake = self.0.clone();
        let method = request.method().to_owned();
        let allowed = fake
            .allowed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&method);
        fake.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((method.clone(), params_of(&request)));
        let refused = fake
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&method);
        let script = fake
            .scripts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&method)
            .cloned();
        let other = fake
            .other
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let reply: BoxFuture<'static, Reply> = if refused {
            let method = method.clone();
            Box::pin(async move {
                Reply::Err(ErrorObject::application(
                    ErrorType::InvalidRequest,
                    format!("{method} is refused by this test"),
                ))
            })
        } else if let Some(script) = script {
            script(conn, id, request)
        } else if allowed {
            fake.answer(conn, id, request)
        } else if let Some(other) = other {
            other(conn, id, request)
        } else {
            fake.unexpected
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(method.clone());
            let method = method.clone();
            Box::pin(async move { Reply::Err(ErrorObject::method_not_found(&method)) })
        };
        fake.logged.notify_waiters();
        let hold = fake
            .holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&method)
            .filter(|h| !h.used.swap(true, Ordering::SeqCst))
            .cloned();
        match hold {
            None => reply,
            Some(hold) => Box::pin(async move {
                hold.entered.notify_one();
                let _ = hold.release.acquire().await;
                reply.await
            }),
        }
    }

    fn on_close(&self, conn: ConnectionId) {
        let observers = self
            .0
            .closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for observer in observers {
            observer(conn);
        }
    }
}

/// The delayed answer of [`FakeDaemon::hold`].
pub struct Hold {
    method: String,
    used: AtomicBool,
    entered: Notify,
    release: Semaphore,
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hold({})", self.method)
    }
}

impl Hold {
    /// Waits (at most 10 s) until the held request arrived.
    pub async fn entered(&self) {
        tokio::time::timeout(Duration::from_secs(10), self.entered.notified())
            .await
            .unwrap_or_else(|_| panic!("{} was never called", self.method));
    }

    /// Lets the held answer go.
    pub fn open(&self) {
        self.release.add_permits(1);
    }
}
