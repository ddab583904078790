//! MCP over Streamable HTTP (docs/http.md §H7, docs/mcp.md §M18): the same [`Bridge`] as
//! `appduct mcp`, served by rmcp's streamable-HTTP server transport at `/mcp` of the daemon's
//! loopback HTTP server. The daemon runs its checks (§H2: Host, Origin, bearer token, body cap
//! and timeout, connection cap) and hands each `/mcp` request to [`HttpEndpoint::handle`]; the
//! binary wires the two together, so neither crate depends on the other.
//!
//! Each MCP session (one `initialize`) gets a fresh [`Bridge`] whose [`DaemonConnector`] opens
//! in-process control connections to the same daemon ([`InProcessConnector`]): consent by
//! elicitation, progress, cancellation and approval waits behave exactly as over stdio.
//!
//! Limits (§H7.4): [`CappedSessions`] wraps rmcp's session manager and refuses to create a
//! session past the cap, so the cap holds whatever the `initialize` body looks like and however
//! many arrive at once. Requests of protocol `2026-07-28` carry no session: rmcp serves each one
//! with a fresh [`Bridge`]; a slot of a second cap of the same size is held for each such
//! request until its response body is dropped.

use std::cell::Cell;
use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use appduct_client::BoxFuture;
use appduct_client::client::{ClientError, ControlClient};
use appduct_protocol::errors::ErrorType;
use futures_util::Stream;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::server_side_http::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, SessionConfig,
};
use rmcp::transport::streamable_http_server::session::{SessionId, SessionManager};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio::io::DuplexStream;
use tokio_util::sync::CancellationToken;

use crate::connector::DaemonConnector;
use crate::identity;
use crate::options::BridgeOptions;
use crate::project::ProjectEnv;
use crate::server::Bridge;

/// `daemon.hello` `client.name` of the control connections of MCP-over-HTTP sessions (§H7.3).
pub const HTTP_CLIENT_NAME: &str = "appduct-mcp-http";

/// Opens a new in-process control connection to the daemon whose peer is the given pid (the
/// HTTP client process, when the daemon found it: SECURITY.md §4.19).
pub type ControlStreamFn = Arc<dyn Fn(Option<u32>) -> DuplexStream + Send + Sync>;

/// Response bodies (the daemon's HTTP body type).
pub type Body = BoxBody<Bytes, std::convert::Infallible>;

/// Limits of the endpoint (§H7.4); defaults in brackets.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// MCP sessions open at once [32]; one more `initialize` is `503`.
    pub max_sessions: usize,
    /// A session with no message either way for this long ends [15 min]. Longer than the
    /// longest call timeout (600 s), so a quiet call never loses its session.
    pub idle_timeout: Duration,
    /// Time from a new session to its `initialize` reaching the bridge [60 s].
    pub init_timeout: Duration,
    /// Keep-alive comments on open SSE streams [15 s].
    pub sse_keep_alive: Duration,
    /// The body cap rmcp applies again (the daemon's own cap applies first) [1 MiB].
    pub max_body_bytes: usize,
    /// The bridge's timing options, as for `appduct mcp`.
    pub bridge: BridgeOptions,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            max_sessions: 32,
            idle_timeout: Duration::from_secs(15 * 60),
            init_timeout: Duration::from_secs(60),
            sse_keep_alive: Duration::from_secs(15),
            max_body_bytes: 1 << 20,
            bridge: BridgeOptions::default(),
        }
    }
}

/// Connects by opening an in-process control connection ([`ControlStreamFn`]) and naming
/// itself [`HTTP_CLIENT_NAME`] in `daemon.hello`. No spawn and no version check: the daemon is
/// this process. `peer_pid` is the process whose request created the bridge (the session's
/// `initialize`, or the one session-less request), passed to each connection it opens.
#[derive(Clone)]
pub struct InProcessConnector {
    streams: ControlStreamFn,
    peer_pid: Option<u32>,
}

impl InProcessConnector {
    pub fn new(streams: ControlStreamFn, peer_pid: Option<u32>) -> Self {
        Self { streams, peer_pid }
    }
}

impl fmt::Debug for InProcessConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcessConnector")
            .field("peer_pid", &self.peer_pid)
            .finish_non_exhaustive()
    }
}

impl DaemonConnector for InProcessConnector {
    fn connect(&self, _spawn: bool) -> BoxFuture<'_, Result<ControlClient, ClientError>> {
        let client = ControlClient::from_stream((self.streams)(self.peer_pid));
        Box::pin(async move {
            client
                .handshake(HTTP_CLIENT_NAME, identity::SERVER_VERSION)
                .await?;
            Ok(client)
        })
    }
}

/// The process inputs of an HTTP session's bridge: the daemon's own working directory and
/// `CLAUDE_PROJECT_DIR` say nothing about the agent's project, so neither is used; the project
/// comes from the `cwd` argument or the client's roots (§M18).
fn http_env() -> ProjectEnv {
    ProjectEnv {
        claude_project_dir: None,
        server_cwd: None,
        ..ProjectEnv::from_process()
    }
}

tokio::task_local! {
    /// Set by [`CappedSessions::create_session`] when it refuses at the cap, so that
    /// [`HttpEndpoint::handle`] answers `503` instead of rmcp's generic `500`.
    static CAP_REFUSED: Cell<bool>;
    /// The HTTP client process of the request being handled (SECURITY.md §4.19): rmcp builds a
    /// session's bridge while handling its `initialize`, inside [`HttpEndpoint::handle`].
    static PEER_PID: Option<u32>;
}

/// Why [`CappedSessions`] refused.
#[derive(Debug, thiserror::Error)]
pub enum CappedSessionsError {
    #[error("too many MCP sessions open ({0})")]
    Full(usize),
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

/// Slots of the session cap: taken before rmcp's manager creates a session, kept while it
/// exists, given back when it closes (DELETE, idle timeout, failed handshake, shutdown).
#[derive(Debug, Default)]
struct Slots {
    taken: usize,
    open: HashSet<SessionId>,
}

/// rmcp's [`LocalSessionManager`] with the session cap (§H7.4) where sessions are created:
/// the count and the reservation happen under one lock, so concurrent `initialize` requests
/// never overshoot, and whatever body rmcp decodes as `initialize` counts.
#[derive(Debug)]
pub struct CappedSessions {
    inner: LocalSessionManager,
    max: usize,
    slots: Mutex<Slots>,
}

impl CappedSessions {
    fn new(inner: LocalSessionManager, max: usize) -> Self {
        Self {
            inner,
            max,
            slots: Mutex::new(Slots::default()),
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sessions open or being created now.
    pub fn count(&self) -> usize {
        self.slots().taken
    }
}

/// Gives a reserved slot back unless the session was created (dropped mid-create included).
struct Reservation<'a> {
    sessions: &'a CappedSessions,
    armed: bool,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.sessions.slots().taken -= 1;
        }
    }
}

impl SessionManager for CappedSessions {
    type Error = CappedSessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        {
            let mut slots = self.slots();
            if slots.taken >= self.max {
                drop(slots);
                let _ = CAP_REFUSED.try_with(|refused| refused.set(true));
                return Err(CappedSessionsError::Full(self.max));
            }
            slots.taken += 1;
        }
        let mut reservation = Reservation {
            sessions: self,
            armed: true,
        };
        let (id, transport) = self.inner.create_session().await?;
        self.slots().open.insert(id.clone());
        reservation.armed = false;
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        // The slot is given back once (DELETE and the worker's exit both close).
        let held = self.slots().open.remove(id);
        let _release = Reservation {
            sessions: self,
            armed: held,
        };
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    // No `restore_session`: no session store is configured, and a restored session would
    // bypass the cap; rmcp answers 404 for an unknown session id.
}

/// A slot of the cap on session-less requests in flight (protocol `2026-07-28`, §H7.4), held
/// by the response body.
struct RequestSlot(Arc<AtomicUsize>);

impl RequestSlot {
    fn take(in_flight: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Self(Arc::clone(in_flight)))
    }
}

impl Drop for RequestSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The `/mcp` endpoint: rmcp's streamable-HTTP service over per-session bridges, with the
/// session cap in its session manager and the request cap in front.
pub struct HttpEndpoint {
    service: StreamableHttpService<Bridge, CappedSessions>,
    sessions: Arc<CappedSessions>,
    max_sessions: usize,
    in_flight: Arc<AtomicUsize>,
    stop: CancellationToken,
}

impl fmt::Debug for HttpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpEndpoint")
            .field("max_sessions", &self.max_sessions)
            .finish_non_exhaustive()
    }
}

impl HttpEndpoint {
    pub fn new(streams: ControlStreamFn, options: HttpOptions) -> Self {
        let mut session_config = SessionConfig::default();
        session_config.keep_alive = Some(options.idle_timeout);
        session_config.init_timeout = Some(options.init_timeout);
        let mut sessions = LocalSessionManager::default();
        sessions.session_config = session_config;
        let sessions = Arc::new(CappedSessions::new(sessions, options.max_sessions));
        let stop = CancellationToken::new();
        // Host and Origin were checked by the daemon (§H2.2, §H2.4) with the bound port.
        let config = StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .disable_allowed_origins()
            .with_sse_keep_alive(Some(options.sse_keep_alive))
            .with_max_request_body_bytes(options.max_body_bytes)
            .with_cancellation_token(stop.clone());
        let bridge_options = options.bridge.clone();
        let service = StreamableHttpService::new(
            move || {
                let peer_pid = PEER_PID.try_with(|p| *p).ok().flatten();
                let connector: Arc<dyn DaemonConnector> =
                    Arc::new(InProcessConnector::new(Arc::clone(&streams), peer_pid));
                Ok(Bridge::with_env(
                    connector,
                    bridge_options.clone(),
                    http_env(),
                ))
            },
            Arc::clone(&sessions),
            config,
        );
        Self {
            service,
            sessions,
            max_sessions: options.max_sessions,
            in_flight: Arc::new(AtomicUsize::new(0)),
            stop,
        }
    }

    /// MCP sessions open (or being created) now.
    pub async fn session_count(&self) -> usize {
        self.sessions.count()
    }

    /// Session-less requests (protocol `2026-07-28`) whose response is still open.
    pub fn requests_in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Answers one `/mcp` request whose checks passed and whose body was read; `peer_pid` is
    /// the HTTP client process when the daemon found it (a bridge created by this request
    /// reports it as its control connections' peer).
    pub async fn handle(&self, request: Request<Bytes>, peer_pid: Option<u32>) -> Response<Body> {
        // A POST without a session that is not `initialize` is served by rmcp with a fresh
        // bridge of its own (or refused): it holds a request slot until its body is dropped.
        // `initialize` is bounded by the session cap in `CappedSessions`; a body this check
        // misreads still meets one of the two caps.
        let slot = if request.method() == Method::POST
            && !request.headers().contains_key("mcp-session-id")
            && !is_initialize(request.body())
        {
            match RequestSlot::take(&self.in_flight, self.max_sessions) {
                Some(slot) => Some(slot),
                None => {
                    tracing::debug!("MCP over HTTP: session-less request refused at the cap");
                    return too_many(self.max_sessions, Limit::Requests);
                }
            }
        } else {
            None
        };
        let (parts, body) = request.into_parts();
        let request = Request::from_parts(parts, Full::new(body));
        let (response, refused) = CAP_REFUSED
            .scope(
                Cell::new(false),
                PEER_PID.scope(peer_pid, async {
                    let response = self.service.handle(request).await;
                    (response, CAP_REFUSED.with(Cell::get))
                }),
            )
            .await;
        if refused {
            tracing::debug!("MCP over HTTP: initialize refused at the session cap");
            return too_many(self.max_sessions, Limit::Sessions);
        }
        match slot {
            Some(slot) => response.map(|body| {
                body.map_frame(move |frame| {
                    let _held = &slot;
                    frame
                })
                .boxed()
            }),
            None => response,
        }
    }

    /// Ends every session and refuses new requests.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }
}

/// Whether a POST body is a JSON-RPC `initialize` request (a new session). The method is
/// decoded as rmcp decodes it (escapes included).
fn is_initialize(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Method {
        method: Option<String>,
    }
    serde_json::from_slice::<Method>(body).is_ok_and(|m| m.method.as_deref() == Some("initialize"))
}

#[derive(Debug, Clone, Copy)]
enum Limit {
    Sessions,
    Requests,
}

/// `503` in the HTTP API's error shape (docs/http.md §H5).
fn too_many(max: usize, limit: Limit) -> Response<Body> {
    let (message, reason) = match limit {
        Limit::Sessions => (
            format!("Too many MCP sessions open ({max}); end one (DELETE /mcp) or retry later"),
            "too_many_sessions",
        ),
        Limit::Requests => (
            format!("Too many session-less MCP requests in flight ({max}); retry later"),
            "too_many_requests",
        ),
    };
    let body: Value = json!({"error": {
        "type": ErrorType::ConnectionError.to_string(),
        "message": message,
        "details": {"reason": reason, "limit": max}
    }});
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initialize_is_recognised_by_its_method_only() {
        assert!(is_initialize(
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#
        ));
        assert!(!is_initialize(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#
        ));
        assert!(is_initialize(
            br#"{"jsonrpc":"2.0","id":1,"method":"\u0069nitialize","params":{}}"#
        ));
        assert!(!is_initialize(b"[1,2]"));
        assert!(!is_initialize(b"not json"));
    }
}
