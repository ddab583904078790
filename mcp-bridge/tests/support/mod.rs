//! Test harness for the bridge (01 §10.3): a `FakeDaemon` that answers only the methods a test
//! registers (with the selector rules of 03 §7) and fails loudly on any other, a connector that
//! serves it over `tokio::io::duplex`, and an rmcp client over a second duplex.
//!
//! "Fails loudly" (06 §6.1): an unregistered method is answered `-32601` and recorded; the
//! [`Harness`] and [`RawClient`] check the record when they are dropped, which happens on the
//! test's own thread at the end of the test, so the test fails. (A panic in the fake's own
//! `Drop` would not do: the last reference usually dies inside a tokio task, where the panic is
//! swallowed.) Tests that use the fake without either call [`FakeDaemon::assert_no_unexpected`].
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use appduct_client::client::{ClientError, ControlClient};
use appduct_client::command_runner::{CommandRunner, ScriptedCommandRunner};
use appduct_daemon::control_server::{
    BoxFuture, Connection, ControlHandler, Reply, ServerOptions, serve_connection,
};
use appduct_mcp::project::ProjectEnv;
use appduct_mcp::{Bridge, BridgeOptions, DaemonConnector};
use appduct_protocol::control::{
    ControlRequest, Device, PolicyDecision, SessionState, SessionSummary, ToolsCallParams,
    ToolsListEntry, Transport, features,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::{ErrorObject, RequestId};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, mpsc, oneshot};

pub type CallHook =
    Arc<dyn Fn(Connection, RequestId, ToolsCallParams) -> BoxFuture<'static, Reply> + Send + Sync>;

#[derive(Default)]
pub struct FakeState {
    pub sessions: Vec<SessionSummary>,
    pub pending_links: Vec<String>,
    pub tools: HashMap<String, Vec<ToolsListEntry>>,
    pub consent: HashMap<String, Value>,
    pub next_handle: usize,
    /// `daemon.status` `advertisedAddress.address`; `192.168.1.20` when unset.
    pub advertised: Option<String>,
}

/// The fake daemon. Unregistered methods are recorded; see [`FakeDaemon::assert_no_unexpected`].
#[derive(Default)]
pub struct FakeDaemon {
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
    }
}

pub fn tool(descriptor: Value, policy: PolicyDecision) -> ToolsListEntry {
    ToolsListEntry::from_descriptor(descriptor.as_object().unwrap(), policy)
}

fn rpc(t: ErrorType, message: &str, details: Value) -> Reply {
    Reply::Err(ErrorObject::application(t, message).with_details(details))
}

impl FakeDaemon {
    pub fn new(methods: &[&str]) -> Arc<Self> {
        let f = Self::default();
        f.allowed
            .lock()
            .unwrap()
            .extend(methods.iter().map(|m| (*m).to_owned()));
        Arc::new(f)
    }

    pub fn add_session(&self, s: SessionSummary, tools: Vec<ToolsListEntry>) {
        let mut st = self.state.lock().unwrap();
        st.tools.insert(s.session_id.clone(), tools);
        st.sessions.push(s);
    }

    pub fn remove_session(&self, id: &str) {
        let mut st = self.state.lock().unwrap();
        st.sessions.retain(|s| s.session_id != id);
        st.tools.remove(id);
    }

    /// Answers `method` with `invalid_request`, as a daemon that cannot serve it would; it is
    /// logged but does not fail the test.
    pub fn refuse(&self, method: &str) {
        self.refused.lock().unwrap().insert(method.to_owned());
    }

    /// The unregistered methods received so far, in order.
    pub fn unexpected(&self) -> Vec<String> {
        self.unexpected.lock().unwrap().clone()
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

    pub fn on_call(&self, hook: CallHook) {
        *self.call_hook.lock().unwrap() = Some(hook);
    }

    pub fn methods(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|(m, _)| m.clone())
            .collect()
    }

    pub fn requests(&self, method: &str) -> Vec<Value> {
        self.log
            .lock()
            .unwrap()
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

    /// Selector resolution of 03 §7.
    fn resolve(&self, selector: Option<&str>) -> Result<SessionSummary, Reply> {
        let st = self.state.lock().unwrap();
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
                let s = self.state.lock().unwrap().sessions.clone();
                ready(Reply::from_result(Ok(s)))
            }
            ControlRequest::ToolsList(p) => ready(match self.resolve(p.selector.as_deref()) {
                Err(r) => r,
                Ok(s) => {
                    let mut tools = self
                        .state
                        .lock()
                        .unwrap()
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
                    let page: Vec<Value> = page
                        .iter()
                        .map(|t| serde_json::to_value(t).unwrap())
                        .collect();
                    Reply::Ok(
                        json!({"tools": page, "total": total, "hasMore": has_more, "offset": offset, "groups": []}),
                    )
                }
            }),
            ControlRequest::ToolsCall(p) => match self.resolve(p.selector.as_deref()) {
                Err(r) => ready(r),
                Ok(s) => {
                    let hook = self.call_hook.lock().unwrap().clone();
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
                    .unwrap()
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
                    .unwrap()
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
                let view = appduct_protocol::bootstrap::Decoded::new(
                    4,
                    if web { "127.0.0.1" } else { "192.168.1.20" },
                    if web { 53120 } else { 8443 },
                    "Zk3pQ0mX8sL1vB2n",
                    "A".repeat(43),
                    1_764_494_223,
                );
                let payload = appduct_protocol::bootstrap::BootstrapPayload::try_from(&view)
                    .unwrap()
                    .encode()
                    .unwrap();
                ready(Reply::Ok(json!({
                    "sessionId": "Zk3pQ0mX8sL1vB2n", "transport": if web { "web" } else { "native" },
                    "deepLinkPayload": payload,
                    "endpoint": {"address": view.address, "port": view.port, "family": 4},
                    "expiresAt": 1_764_494_223u64, "pin": PIN,
                })))
            }
            ControlRequest::ConsentCreate(p) => {
                if self.resolve(Some(&p.session_id)).is_err() {
                    return ready(rpc(ErrorType::UnknownSession, "no such session", json!({})));
                }
                let mut st = self.state.lock().unwrap();
                st.next_handle += 1;
                let handle = format!("cr_test{}", st.next_handle);
                st.consent
                    .insert(handle.clone(), serde_json::to_value(p.record()).unwrap());
                ready(Reply::Ok(
                    json!({"handle": handle, "expiresAt": 1_800_000_000u64}),
                ))
            }
            ControlRequest::ConsentTake(p) => {
                let taken = self.state.lock().unwrap().consent.remove(&p.handle);
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
                    this.subscribers.lock().unwrap().push(conn);
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
        for c in self.subscribers.lock().unwrap().iter() {
            c.send_notification(line.clone().into_bytes());
        }
    }

    /// Closes every subscriber connection.
    pub fn close_subscribers(&self) {
        for c in self.subscribers.lock().unwrap().drain(..) {
            c.close();
        }
    }
}

pub struct FakeHandler(pub Arc<FakeDaemon>);

impl ControlHandler for FakeHandler {
    fn handle(
        &self,
        conn: &Connection,
        id: RequestId,
        request: ControlRequest,
    ) -> BoxFuture<'static, Reply> {
        let method = request.method().to_owned();
        let params = match &request {
            ControlRequest::ToolsCall(p) => serde_json::to_value(p).unwrap(),
            ControlRequest::ToolsCancel(p) => serde_json::to_value(p).unwrap(),
            ControlRequest::ToolsList(p) => serde_json::to_value(p).unwrap(),
            ControlRequest::SessionsDescribe(p) => serde_json::to_value(p).unwrap(),
            ControlRequest::EventsSubscribe(p) => serde_json::to_value(p).unwrap(),
            ControlRequest::ConsentCreate(p) => serde_json::to_value(p).unwrap(),
            ControlRequest::ConsentTake(p) => serde_json::to_value(p).unwrap(),
            ControlRequest::EventsSince(p) => serde_json::to_value(p).unwrap(),
            ControlRequest::EventsList(p) => serde_json::to_value(p).unwrap(),
            ControlRequest::LinkCreate(p) => serde_json::to_value(p).unwrap(),
            ControlRequest::SessionsRevoke(p) => serde_json::to_value(p).unwrap(),
            _ => Value::Null,
        };
        let fake = self.0.clone();
        let allowed = fake.allowed.lock().unwrap().contains(&method);
        fake.log.lock().unwrap().push((method.clone(), params));
        let refused = fake.refused.lock().unwrap().contains(&method);
        let reply = if refused {
            Box::pin(async move {
                Reply::Err(ErrorObject::application(
                    ErrorType::InvalidRequest,
                    format!("{method} is refused by this test"),
                ))
            })
        } else if allowed {
            fake.answer(conn, id, request)
        } else {
            fake.unexpected.lock().unwrap().push(method.clone());
            Box::pin(async move { Reply::Err(ErrorObject::method_not_found(&method)) })
        };
        fake.logged.notify_waiters();
        reply
    }
}

/// Serves the fake over a fresh duplex per connection.
#[derive(Debug)]
pub struct FakeConnector {
    pub fake: FakeRef,
    /// `connect(false)` (status) finds no daemon.
    pub no_daemon_without_spawn: bool,
}

pub struct FakeRef(pub Arc<FakeDaemon>);
impl std::fmt::Debug for FakeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FakeDaemon")
    }
}

impl DaemonConnector for FakeConnector {
    fn connect(&self, spawn: bool) -> BoxFuture<'_, Result<ControlClient, ClientError>> {
        let fake = self.fake.0.clone();
        let refuse = self.no_daemon_without_spawn && !spawn;
        Box::pin(async move {
            if refuse {
                return Err(ClientError::Unreachable {
                    socket: "/nonexistent/daemon.sock".into(),
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                });
            }
            fake.connections.fetch_add(1, Ordering::SeqCst);
            Ok(in_memory_client(FakeHandler(fake)))
        })
    }
}

/// A control client connected in memory to `handler`, served by the daemon's own control
/// server (what every fake connector hands the bridge).
pub fn in_memory_client(
    handler: impl appduct_daemon::control_server::ControlHandler + 'static,
) -> ControlClient {
    let (a, b) = tokio::io::duplex(64 * 1024);
    tokio::spawn(serve_connection(
        a,
        Arc::new(handler),
        ServerOptions::default(),
    ));
    ControlClient::from_stream(b)
}

/// Holds the answer to the first request for `method` until released, so a test can act
/// mid-step (cancel, change the registry). The answer is computed when the request arrives;
/// only its delivery waits.
pub struct Gate {
    method: &'static str,
    used: std::sync::atomic::AtomicBool,
    entered: tokio::sync::Notify,
    release: tokio::sync::Semaphore,
}

impl Gate {
    pub fn new(method: &'static str) -> Arc<Self> {
        Arc::new(Self {
            method,
            used: Default::default(),
            entered: tokio::sync::Notify::new(),
            release: tokio::sync::Semaphore::new(0),
        })
    }

    pub async fn entered(&self) {
        tokio::time::timeout(Duration::from_secs(10), self.entered.notified())
            .await
            .expect("the gated method was called");
    }

    pub fn open(&self) {
        self.release.add_permits(1);
    }
}

pub struct GatedHandler {
    fake: FakeHandler,
    gate: Arc<Gate>,
}

impl appduct_daemon::control_server::ControlHandler for GatedHandler {
    fn handle(
        &self,
        conn: &appduct_daemon::control_server::Connection,
        id: appduct_protocol::jsonrpc::RequestId,
        request: appduct_protocol::control::ControlRequest,
    ) -> appduct_daemon::control_server::BoxFuture<'static, appduct_daemon::control_server::Reply>
    {
        use std::sync::atomic::Ordering;
        let gated =
            request.method() == self.gate.method && !self.gate.used.swap(true, Ordering::SeqCst);
        let reply = self.fake.handle(conn, id, request);
        if !gated {
            return reply;
        }
        let gate = self.gate.clone();
        Box::pin(async move {
            gate.entered.notify_one();
            let _ = gate.release.acquire().await;
            reply.await
        })
    }
}

/// The fake daemon behind a [`Gate`].
#[derive(Debug)]
pub struct GatedConnector {
    pub fake: FakeRef,
    pub gate: GateRef,
}

pub struct GateRef(pub Arc<Gate>);
impl std::fmt::Debug for GateRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gate({})", self.0.method)
    }
}

impl DaemonConnector for GatedConnector {
    fn connect(
        &self,
        _spawn: bool,
    ) -> appduct_client::BoxFuture<
        '_,
        Result<appduct_client::client::ControlClient, appduct_client::client::ClientError>,
    > {
        let handler = GatedHandler {
            fake: FakeHandler(self.fake.0.clone()),
            gate: self.gate.0.clone(),
        };
        Box::pin(async move { Ok(in_memory_client(handler)) })
    }
}

pub fn gated_bridge(
    fake: &Arc<FakeDaemon>,
    gate: &Arc<Gate>,
    runner: Arc<dyn CommandRunner>,
) -> Bridge {
    Bridge::with_runner(
        Arc::new(GatedConnector {
            fake: FakeRef(fake.clone()),
            gate: GateRef(gate.clone()),
        }),
        test_options(),
        test_env(),
        runner,
    )
}

// ---------------------------------------------------------------------------------------------
// The MCP client side
// ---------------------------------------------------------------------------------------------

/// How the test client answers `elicitation/create`.
#[derive(Clone)]
pub enum Elicit {
    Answer(ElicitationAction),
    /// Hands the request to the test, which answers through the oneshot.
    Manual(mpsc::UnboundedSender<(String, oneshot::Sender<ElicitationAction>)>),
    /// Never answers.
    Hang,
    /// Answers with a JSON-RPC error.
    Fail,
}

#[derive(Clone)]
pub struct TestClient {
    pub version: ProtocolVersion,
    pub elicitation: Option<Elicit>,
    pub progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    pub progress_seen: Arc<Notify>,
    pub list_changed: Arc<AtomicUsize>,
    /// Declared `roots` and the URIs `roots/list` answers with.
    pub roots: Option<Vec<String>>,
    pub roots_reads: Arc<AtomicUsize>,
}

impl TestClient {
    pub fn new(version: ProtocolVersion, elicitation: Option<Elicit>) -> Self {
        Self {
            version,
            elicitation,
            progress: Arc::default(),
            progress_seen: Arc::default(),
            list_changed: Arc::default(),
            roots: None,
            roots_reads: Arc::default(),
        }
    }

    pub async fn wait_progress(&self, n: usize) {
        loop {
            let notified = self.progress_seen.notified();
            if self.progress.lock().unwrap().len() >= n {
                return;
            }
            tokio::time::timeout(Duration::from_secs(10), notified)
                .await
                .expect("progress notifications");
        }
    }
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        if self.elicitation.is_some() {
            caps.elicitation = Some(Default::default());
        }
        if self.roots.is_some() {
            caps.roots = Some(Default::default());
        }
        let mut config = ClientConfig::new(caps, Implementation::new("test-client", "1.0.0"));
        config.protocol_version = self.version.clone();
        config
    }

    fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> impl Future<Output = Result<ElicitResult, ErrorData>> + Send + '_ {
        let mode = self.elicitation.clone();
        async move {
            let message = match &request {
                ElicitRequestParams::FormElicitationParams { message, .. } => message.clone(),
                ElicitRequestParams::UrlElicitationParams { message, .. } => message.clone(),
                _ => String::new(),
            };
            let action = match mode {
                Some(Elicit::Answer(a)) => a,
                Some(Elicit::Manual(tx)) => {
                    let (otx, orx) = oneshot::channel();
                    tx.send((message, otx)).unwrap();
                    orx.await.unwrap_or(ElicitationAction::Cancel)
                }
                Some(Elicit::Hang) => std::future::pending().await,
                Some(Elicit::Fail) | None => {
                    return Err(ErrorData::method_not_found::<
                        rmcp::model::ElicitationCreateRequestMethod,
                    >());
                }
            };
            Ok(ElicitResult::new(action))
        }
    }

    // Roots are deprecated on 2026-07-28 only; the two older revisions still use them.
    #[allow(deprecated)]
    fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> impl Future<Output = Result<rmcp::model::ListRootsResult, ErrorData>> + Send + '_ {
        self.roots_reads.fetch_add(1, Ordering::SeqCst);
        let roots = self
            .roots
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(rmcp::model::Root::new)
            .collect();
        std::future::ready(Ok(rmcp::model::ListRootsResult::new(roots)))
    }

    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.progress.lock().unwrap().push(params);
        self.progress_seen.notify_waiters();
        std::future::ready(())
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.list_changed.fetch_add(1, Ordering::SeqCst);
        std::future::ready(())
    }
}

pub struct Harness {
    pub client: RunningService<RoleClient, TestClient>,
    pub fake: Arc<FakeDaemon>,
}

/// Dropped at the end of the test body, on the test thread: an unregistered method fails it.
impl Drop for Harness {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.fake.assert_no_unexpected();
        }
    }
}

pub fn test_options() -> BridgeOptions {
    BridgeOptions {
        consent_timeout: Duration::from_millis(300),
        ..BridgeOptions::default()
    }
}

pub fn test_env() -> ProjectEnv {
    ProjectEnv {
        server_cwd: Some(std::env::temp_dir()),
        ..ProjectEnv::default()
    }
}

pub async fn start_with(
    fake: Arc<FakeDaemon>,
    client: TestClient,
    options: BridgeOptions,
    env: ProjectEnv,
) -> Harness {
    // An empty script: any helper process a test did not plan for fails as not found.
    start_with_runner(
        fake,
        client,
        options,
        env,
        Arc::new(ScriptedCommandRunner::new()),
    )
    .await
}

/// [`start_with`] with the runner of `adb` / `xcrun` given.
pub async fn start_with_runner(
    fake: Arc<FakeDaemon>,
    client: TestClient,
    options: BridgeOptions,
    env: ProjectEnv,
    runner: Arc<dyn CommandRunner>,
) -> Harness {
    let connector = Arc::new(FakeConnector {
        fake: FakeRef(fake.clone()),
        no_daemon_without_spawn: true,
    });
    let bridge = Bridge::with_runner(connector, options, env, runner);
    start_bridge(bridge, fake, client).await
}

/// An rmcp client of `bridge`, whose connector serves `fake`.
pub async fn start_bridge(bridge: Bridge, fake: Arc<FakeDaemon>, client: TestClient) -> Harness {
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let server = tokio::spawn(async move {
        let running = rmcp::serve_server(bridge, server_io)
            .await
            .expect("server starts");
        let _ = running.waiting().await;
    });
    let client = client.serve(client_io).await.expect("client initializes");
    drop(server);
    Harness { client, fake }
}

pub async fn start(fake: Arc<FakeDaemon>, client: TestClient) -> Harness {
    start_with(fake, client, test_options(), test_env()).await
}

impl Harness {
    pub async fn call(&self, name: &str, args: Value) -> CallToolResult {
        let mut params = CallToolRequestParams::new(name.to_owned());
        if let Value::Object(m) = args {
            params = params.with_arguments(m);
        }
        self.client
            .peer()
            .call_tool(params)
            .await
            .expect("tools/call answered")
    }
}

/// `_meta["appduct/error"].type` of an error result, after checking the contract (06 §6.6).
pub fn error_type(r: &CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "expected an error result: {r:?}");
    assert!(
        r.structured_content.is_none(),
        "errors carry no structuredContent"
    );
    assert_eq!(r.content.len(), 1);
    let text = r.content[0].as_text().expect("text item").text.clone();
    let meta = r.meta.as_ref().expect("_meta").0.clone();
    let t = meta["appduct/error"]["type"]
        .as_str()
        .expect("type")
        .to_owned();
    assert!(
        text.starts_with(&format!("[{t}] ")),
        "text {text:?} starts with [{t}]"
    );
    assert!(
        appduct_mcp::PUBLISHED_ERROR_TYPES
            .iter()
            .any(|p| p.as_str() == t),
        "{t} is published"
    );
    t
}

pub fn error_details(r: &CallToolResult) -> Value {
    r.meta.as_ref().unwrap().0["appduct/error"]["details"].clone()
}

pub fn error_message(r: &CallToolResult) -> String {
    r.meta.as_ref().unwrap().0["appduct/error"]["message"]
        .as_str()
        .unwrap()
        .to_owned()
}

pub fn structured(r: &CallToolResult) -> Value {
    assert_ne!(r.is_error, Some(true), "expected success: {r:?}");
    r.structured_content.clone().expect("structuredContent")
}

pub fn obj(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

pub type Pinned<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A raw JSON-RPC line client on the bridge (for wire-level checks rmcp's client hides).
pub struct RawClient {
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    pub fake: Arc<FakeDaemon>,
}

impl Drop for RawClient {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.fake.assert_no_unexpected();
        }
    }
}

impl RawClient {
    pub fn start(fake: Arc<FakeDaemon>) -> Self {
        use tokio::io::AsyncBufReadExt;
        let (server_io, client_io) = tokio::io::duplex(1 << 20);
        let connector = Arc::new(FakeConnector {
            fake: FakeRef(fake.clone()),
            no_daemon_without_spawn: true,
        });
        let bridge = Bridge::with_runner(
            connector,
            test_options(),
            test_env(),
            Arc::new(ScriptedCommandRunner::new()),
        );
        tokio::spawn(async move {
            if let Ok(running) = rmcp::serve_server(bridge, server_io).await {
                let _ = running.waiting().await;
            }
        });
        let (r, w) = tokio::io::split(client_io);
        Self {
            write: w,
            lines: tokio::io::BufReader::new(r).lines(),
            fake,
        }
    }

    pub async fn send(&mut self, v: Value) {
        use tokio::io::AsyncWriteExt;
        let mut line = v.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    /// The next message (response or notification).
    pub async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .expect("a message in time")
            .unwrap()
            .expect("open stream");
        serde_json::from_str(&line).expect("stdout lines are JSON")
    }

    /// The response to `id`, collecting notifications seen before it.
    pub async fn response(&mut self, id: i64) -> (Value, Vec<Value>) {
        let mut notes = Vec::new();
        loop {
            let m = self.next().await;
            if m.get("id") == Some(&json!(id)) && m.get("method").is_none() {
                return (m, notes);
            }
            notes.push(m);
        }
    }

    pub async fn request(&mut self, id: i64, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        self.response(id).await
    }

    pub async fn initialize(&mut self, version: &str, capabilities: Value) -> Value {
        let (r, _) = self
            .request(
                0,
                "initialize",
                json!({"protocolVersion": version, "capabilities": capabilities,
                       "clientInfo": {"name": "raw", "version": "1"}}),
            )
            .await;
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        r
    }
}

/// `_meta` of a 2026-07-28 request.
pub fn meta_2026(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    })
}
