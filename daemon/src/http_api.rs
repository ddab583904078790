//! The loopback HTTP API (docs/http.md, §H1–§H6): an HTTP/1.1 server on 127.0.0.1, off unless
//! `config.json` has `http.port` (§S2.2). It is a translator, not a second engine: every request
//! opens an in-process control connection to the daemon's own control server (the one
//! `DaemonHandle::control_stream` serves) and runs the same control methods any client runs
//! (`sessions.list`, `tools.list`, `tools.call` with `caller: "http"`, `tools.cancel`,
//! `events.subscribe`), so policy, consent, audit and events treat an HTTP caller like any other.
//!
//! Before a request reaches a route (§H2): the connection is under the cap, the request head
//! arrived within the header timeout, `Host` is a loopback name with the bound port (DNS
//! rebinding), an `Origin` is one of `http.corsOrigins` (else refused), and the bearer token
//! equals `<state>/http.token` (constant-time compare, file read per request so a rotation
//! applies at once). Bodies are capped and must arrive within the body timeout.
//!
//! Routing is a plain match on path segments under `/v1/`, plus `/mcp` (MCP over Streamable
//! HTTP, §H7) behind the same checks: the daemon does not implement MCP itself; the binary
//! injects an [`McpEndpoint`] (the `appduct mcp` bridge over rmcp's streamable-HTTP transport)
//! through [`McpEndpointFactory`], so this crate never depends on the bridge.

use std::convert::Infallible;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use appduct_client::client::{CallProgress, ClientError, ControlClient, ToolCallError};
use appduct_client::config::HttpConfig;
use appduct_client::http_token;
use appduct_protocol::control::{
    Caller, EventNotification, SessionsList, SubscribeParams, ToolsCallParams, ToolsCancel,
    ToolsCancelParams, ToolsListEntry, ToolsListParams,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::text::percent_decode;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use serde_json::{Map, Value, json};
use subtle::ConstantTimeEq as _;
use tokio::io::{AsyncWriteExt as _, DuplexStream};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use crate::tcp_peer;

/// Opens a new in-process control connection served by the daemon's control handler; the
/// argument is the pid of the HTTP client process when found (SECURITY.md §4.19), which the
/// connection reports as its peer pid like a control socket connection.
pub type ControlStreams = Arc<dyn Fn(Option<u32>) -> DuplexStream + Send + Sync>;

/// The handler of `/mcp` (§H7), one per running server. The daemon has already run every
/// check of §H2 and read the request body under its cap and timeout (§H2.5) when it calls
/// [`McpEndpoint::handle`].
pub trait McpEndpoint: Send + Sync + 'static {
    /// Answers one request to `/mcp`; `peer_pid` is the HTTP client process when found
    /// (SECURITY.md §4.19), for the control connections the request opens.
    fn handle(&self, request: Request<Bytes>, peer_pid: Option<u32>) -> BoxFuture<Response<Body>>;
    /// Ends every MCP session: the server stops (daemon stop, `http` removed, new port).
    fn shutdown(&self);
}

/// A request to `/mcp` as [`McpEndpoint::handle`] receives it: body read in full.
pub type McpRequest = Request<Bytes>;
/// The answer of [`McpEndpoint::handle`].
pub type McpResponse = Response<Body>;

/// A boxed future of [`McpEndpoint::handle`].
pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// Builds the `/mcp` endpoint of a server that starts, from the daemon's in-process control
/// connections (each MCP session runs its own control client over them, §H7.3).
#[derive(Clone)]
pub struct McpEndpointFactory(Arc<dyn Fn(ControlStreams) -> Arc<dyn McpEndpoint> + Send + Sync>);

impl McpEndpointFactory {
    pub fn new(
        build: impl Fn(ControlStreams) -> Arc<dyn McpEndpoint> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(build))
    }

    fn build(&self, streams: ControlStreams) -> Arc<dyn McpEndpoint> {
        (self.0)(streams)
    }
}

impl fmt::Debug for McpEndpointFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("McpEndpointFactory")
    }
}

/// `tools.cancel` reason when the HTTP client of a call goes away (§H4.3).
pub const DISCONNECT_REASON: &str = "http_client_disconnected";

/// Limits of the HTTP API (§H2.5). Defaults are the documented values; tests lower them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request body, bytes (413 above).
    pub max_body_bytes: usize,
    /// Time for the request line and headers to arrive.
    pub header_timeout: Duration,
    /// Time for the whole request body to arrive (408 after).
    pub body_timeout: Duration,
    /// Open connections at once; one more is answered 503 and closed.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 1 << 20,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections: 64,
        }
    }
}

/// Response bodies of the HTTP API (and of an [`McpEndpoint`]).
pub type Body = BoxBody<Bytes, Infallible>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// The controller: on, off, rebind
// ---------------------------------------------------------------------------------------------

struct Running {
    /// The configured port (0: the OS chose `addr`'s).
    configured_port: u16,
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    cors: Arc<Mutex<Vec<String>>>,
    mcp: Option<Arc<dyn McpEndpoint>>,
}

impl Running {
    fn stop(self) {
        self.stop.send_replace(true);
        if let Some(mcp) = &self.mcp {
            mcp.shutdown();
        }
    }
}

struct ApiInner {
    state_dir: PathBuf,
    streams: ControlStreams,
    limits: HttpLimits,
    mcp: Option<McpEndpointFactory>,
    running: Mutex<Option<Running>>,
}

/// The daemon's HTTP API: started, stopped or moved to another port by [`HttpApi::apply`] at
/// start and at each `daemon.reload` (§S2.1). Cheap to clone.
#[derive(Clone)]
pub struct HttpApi {
    inner: Arc<ApiInner>,
}

impl fmt::Debug for HttpApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpApi")
            .field("addr", &self.local_addr())
            .finish_non_exhaustive()
    }
}

impl HttpApi {
    /// `mcp`: the `/mcp` endpoint's factory (§H7); `None` answers `/mcp` like an unknown route.
    pub fn new(
        state_dir: impl Into<PathBuf>,
        streams: ControlStreams,
        limits: HttpLimits,
        mcp: Option<McpEndpointFactory>,
    ) -> Self {
        Self {
            inner: Arc::new(ApiInner {
                state_dir: state_dir.into(),
                streams,
                limits,
                mcp,
                running: Mutex::new(None),
            }),
        }
    }

    /// The bound address while the API is on.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        lock(&self.inner.running).as_ref().map(|r| r.addr)
    }

    /// Makes the server match `config`: off for `None`; started (creating `<state>/http.token`
    /// when missing) when off; rebound when the configured port changed (the new port is bound
    /// before the old server stops, so a failed bind leaves the old one running); only the CORS
    /// list updated otherwise. Must run inside the daemon's runtime.
    pub fn apply(&self, config: Option<&HttpConfig>) -> io::Result<()> {
        let mut running = lock(&self.inner.running);
        let Some(config) = config else {
            if let Some(old) = running.take() {
                let addr = old.addr;
                old.stop();
                tracing::info!(%addr, "HTTP API stopped");
            }
            return Ok(());
        };
        if let Some(current) = running.as_ref()
            && current.configured_port == config.port
        {
            *lock(&current.cors) = config.cors_origins.clone();
            return Ok(());
        }
        http_token::read_or_create_token(&self.inner.state_dir)?;
        let std_listener =
            std::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, config.port)))?;
        std_listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(std_listener)?;
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let cors = Arc::new(Mutex::new(config.cors_origins.clone()));
        // A fresh endpoint per server: MCP sessions end with the server that held them.
        let mcp = self
            .inner
            .mcp
            .as_ref()
            .map(|factory| factory.build(Arc::clone(&self.inner.streams)));
        let server = Arc::new(Server {
            state_dir: self.inner.state_dir.clone(),
            streams: Arc::clone(&self.inner.streams),
            limits: self.inner.limits,
            port: addr.port(),
            cors: Arc::clone(&cors),
            mcp: mcp.clone(),
            lookups: Arc::new(Semaphore::new(tcp_peer::MAX_CONCURRENT_LOOKUPS)),
        });
        tokio::spawn(accept_loop(listener, server, stop_rx));
        if let Some(old) = running.replace(Running {
            configured_port: config.port,
            addr,
            stop,
            cors,
            mcp,
        }) {
            old.stop();
        }
        tracing::info!(%addr, "HTTP API listening");
        Ok(())
    }

    /// Stops the server (daemon shutdown).
    pub fn stop(&self) {
        let _ = self.apply(None);
    }
}

// ---------------------------------------------------------------------------------------------
// Accept loop and connections
// ---------------------------------------------------------------------------------------------

struct Server {
    state_dir: PathBuf,
    streams: ControlStreams,
    limits: HttpLimits,
    /// The bound port, which `Host` must name.
    port: u16,
    cors: Arc<Mutex<Vec<String>>>,
    mcp: Option<Arc<dyn McpEndpoint>>,
    /// Peer-pid lookups running at once ([`tcp_peer::MAX_CONCURRENT_LOOKUPS`], §H2.6).
    lookups: Arc<Semaphore>,
}

async fn accept_loop(listener: TcpListener, server: Arc<Server>, mut stop: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(server.limits.max_connections));
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            () = async { let _ = stop.wait_for(|s| *s).await; } => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("HTTP API accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        match Arc::clone(&slots).try_acquire_owned() {
            Ok(permit) => {
                let server = Arc::clone(&server);
                let stop = stop.clone();
                connections.spawn(async move {
                    serve_connection(stream, server, stop).await;
                    drop(permit);
                });
            }
            Err(_) => {
                tracing::debug!("HTTP API connection refused: at the connection cap");
                connections.spawn(refuse_over_cap(stream));
            }
        }
    }
    drop(listener);
    connections.shutdown().await;
}

/// One connection over the cap: a 503 written within a second, then closed.
async fn refuse_over_cap(mut stream: TcpStream) {
    let body = error_body(
        ErrorType::ConnectionError,
        "Too many open connections to the appduct HTTP API; retry later",
        Some(json!({ "reason": "too_many_connections" })),
    );
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&body).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}

async fn serve_connection(stream: TcpStream, server: Arc<Server>, mut stop: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    // The client process, found once per connection before its first request is read
    // (SECURITY.md §4.19): every control connection its requests open reports it as the peer.
    // Bounded (§H2.6): a few lookups at once, each within LOOKUP_BUDGET from here, turn
    // included; past it the peer is unknown.
    let peer_pid = match (stream.local_addr(), stream.peer_addr()) {
        (Ok(local), Ok(peer)) => {
            let deadline = std::time::Instant::now() + tcp_peer::LOOKUP_BUDGET;
            let turn = tokio::time::timeout_at(
                deadline.into(),
                Arc::clone(&server.lookups).acquire_owned(),
            )
            .await;
            match turn {
                Ok(Ok(permit)) => tokio::task::spawn_blocking(move || {
                    let _permit = permit;
                    tcp_peer::loopback_peer_pid_by(local, peer, deadline)
                })
                .await
                .ok()
                .flatten(),
                _ => {
                    tracing::debug!(%peer, "HTTP peer lookup skipped: no lookup slot in time");
                    None
                }
            }
        }
        _ => None,
    };
    tracing::debug!(?peer_pid, "HTTP API connection accepted");
    let service_server = Arc::clone(&server);
    let service = hyper::service::service_fn(move |req| {
        let server = Arc::clone(&service_server);
        async move { Ok::<_, Infallible>(handle(req, server, peer_pid).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(server.limits.header_timeout)
        .max_buf_size(64 * 1024);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!("HTTP API connection ended: {e}");
            }
        }
        () = async { let _ = stop.wait_for(|s| *s).await; } => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Checks before the routes (§H2)
// ---------------------------------------------------------------------------------------------

/// The request answered with an error envelope (§H5).
#[derive(Debug)]
struct HttpError {
    status: StatusCode,
    error_type: ErrorType,
    message: String,
    details: Option<Value>,
}

impl HttpError {
    fn new(status: StatusCode, error_type: ErrorType, message: impl Into<String>) -> Self {
        Self {
            status,
            error_type,
            message: message.into(),
            details: None,
        }
    }

    fn reason(mut self, reason: &str) -> Self {
        let mut details = match self.details.take() {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        details.insert("reason".into(), Value::String(reason.to_owned()));
        self.details = Some(Value::Object(details));
        self
    }

    fn bad_request(message: impl Into<String>, reason: &str) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorType::InvalidRequest, message).reason(reason)
    }

    /// A failed control request, with its type's status (§H5.2).
    fn from_client(e: &ClientError) -> Self {
        let error_type = e.error_type();
        let mut err = Self::new(status_for(error_type), error_type, e.to_string());
        err.details = e.details();
        err
    }

    fn from_call(e: &ToolCallError) -> Self {
        let (error_type, _) = e.classify();
        let mut err = Self::new(status_for(error_type), error_type, e.error.to_string());
        let mut details = match e.details() {
            Some(Value::Object(m)) => m,
            Some(other) => {
                let mut m = Map::new();
                m.insert("details".into(), other);
                m
            }
            None => Map::new(),
        };
        if let Some(call_id) = &e.call_id {
            details
                .entry("callId")
                .or_insert_with(|| Value::String(call_id.clone()));
        }
        err.details = (!details.is_empty()).then_some(Value::Object(details));
        err
    }

    fn body(&self) -> Bytes {
        error_body(self.error_type, &self.message, self.details.clone())
    }
}

/// The HTTP status of each error type (§H5.2).
pub fn status_for(t: ErrorType) -> StatusCode {
    match t {
        ErrorType::InvalidRequest
        | ErrorType::ValidationError
        | ErrorType::UsageError
        | ErrorType::ToolInputValidationError => StatusCode::BAD_REQUEST,
        ErrorType::UnknownSession | ErrorType::NoSession | ErrorType::ToolNotFound => {
            StatusCode::NOT_FOUND
        }
        ErrorType::PolicyDenied | ErrorType::ApprovalRefused | ErrorType::ConsentDeclined => {
            StatusCode::FORBIDDEN
        }
        ErrorType::AmbiguousSession
        | ErrorType::SessionNotActive
        | ErrorType::SessionSuspended
        | ErrorType::SessionLeased
        | ErrorType::ToolCancelled => StatusCode::CONFLICT,
        ErrorType::ToolTimeout | ErrorType::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorType::ToolExecutionError
        | ErrorType::ToolOutputValidationError
        | ErrorType::ToolSerializationError => StatusCode::BAD_GATEWAY,
        ErrorType::ConnectionError => StatusCode::SERVICE_UNAVAILABLE,
        ErrorType::InternalError
        | ErrorType::ClientError
        | ErrorType::InspectionError
        | ErrorType::AssertionError => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn error_body(error_type: ErrorType, message: &str, details: Option<Value>) -> Bytes {
    let mut error = Map::new();
    error.insert("type".into(), Value::String(error_type.to_string()));
    error.insert("message".into(), Value::String(message.to_owned()));
    if let Some(details) = details {
        error.insert("details".into(), details);
    }
    Bytes::from(json!({ "error": error }).to_string())
}

/// `Host` is `127.0.0.1`, `localhost` or `[::1]`, with exactly the bound port, and there is
/// exactly one `Host` header (§H2.2).
fn host_allowed(headers: &HeaderMap, port: u16) -> bool {
    let mut hosts = headers.get_all(header::HOST).iter();
    let (Some(host), None) = (hosts.next(), hosts.next()) else {
        return false;
    };
    let Ok(host) = host.to_str() else {
        return false;
    };
    let Some((name, host_port)) = host.rsplit_once(':') else {
        return false;
    };
    let name = name.to_ascii_lowercase();
    matches!(name.as_str(), "127.0.0.1" | "localhost" | "[::1]")
        && host_port.parse::<u16>().ok() == Some(port)
}

/// The `Origin` header, when present: `Ok(Some)` if configured (case-insensitive), `Err` if not.
fn check_origin(
    headers: &HeaderMap,
    cors: &Mutex<Vec<String>>,
) -> Result<Option<String>, HttpError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(None);
    };
    let origin = origin.to_str().unwrap_or_default();
    if lock(cors).iter().any(|o| o.eq_ignore_ascii_case(origin)) {
        Ok(Some(origin.to_owned()))
    } else {
        Err(HttpError::new(
            StatusCode::FORBIDDEN,
            ErrorType::InvalidRequest,
            "Requests from web pages are refused unless their origin is listed in http.corsOrigins",
        )
        .reason("origin_not_allowed"))
    }
}

/// The bearer token equals `<state>/http.token` (§H2.1).
fn check_token(headers: &HeaderMap, state_dir: &Path) -> Result<(), HttpError> {
    let unauthorized = |message: &str, reason: &str| {
        HttpError::new(StatusCode::UNAUTHORIZED, ErrorType::InvalidRequest, message).reason(reason)
    };
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| {
            h.split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, t)| t.trim())
        })
    else {
        return Err(unauthorized(
            "Missing bearer token: send Authorization: Bearer <token> (`appduct http token` prints it)",
            "missing_token",
        ));
    };
    let expected = match http_token::read_token(state_dir) {
        Ok(Some(token)) => token,
        Ok(None) | Err(_) => {
            tracing::warn!("the HTTP API token file is missing or unreadable; refusing requests");
            return Err(unauthorized(
                "The daemon has no usable HTTP token; run `appduct http token --rotate`",
                "no_token_file",
            ));
        }
    };
    let equal =
        given.len() == expected.len() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()));
    if equal {
        Ok(())
    } else {
        Err(unauthorized("Wrong bearer token", "wrong_token"))
    }
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

async fn handle(
    req: Request<Incoming>,
    server: Arc<Server>,
    peer_pid: Option<u32>,
) -> Response<Body> {
    if !host_allowed(req.headers(), server.port) {
        return error_response(
            &HttpError::new(
                StatusCode::FORBIDDEN,
                ErrorType::InvalidRequest,
                format!(
                    "The Host header must be 127.0.0.1:{0}, localhost:{0} or [::1]:{0}",
                    server.port
                ),
            )
            .reason("host_not_allowed"),
            None,
        );
    }
    let origin = match check_origin(req.headers(), &server.cors) {
        Ok(origin) => origin,
        Err(e) => return error_response(&e, None),
    };
    if req.method() == Method::OPTIONS
        && let Some(origin) = &origin
    {
        return preflight(origin);
    }
    if let Err(e) = check_token(req.headers(), &server.state_dir) {
        let mut response = error_response(&e, origin.as_deref());
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    match route(req, &server, peer_pid).await {
        Ok(mut response) => {
            allow_origin(&mut response, origin.as_deref());
            response
        }
        Err(e) => error_response(&e, origin.as_deref()),
    }
}

fn allow_origin(response: &mut Response<Body>, origin: Option<&str>) {
    if let Some(value) = origin.and_then(|o| HeaderValue::from_str(o).ok()) {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
        headers.insert(header::VARY, HeaderValue::from_static("Origin"));
        // A browser MCP client must read the session id it is given (§H7.2).
        if headers.contains_key(MCP_SESSION_ID) {
            headers.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(MCP_SESSION_ID),
            );
        }
    }
}

/// The session header of MCP over Streamable HTTP (§H7.2).
const MCP_SESSION_ID: &str = "mcp-session-id";

fn preflight(origin: &str) -> Response<Body> {
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    let headers = response.headers_mut();
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, DELETE"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(
            "authorization, content-type, accept, last-event-id, mcp-session-id, mcp-protocol-version",
        ),
    );
    headers.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    allow_origin(&mut response, Some(origin));
    response
}

fn empty() -> Body {
    Full::new(Bytes::new()).boxed()
}

fn error_response(e: &HttpError, origin: Option<&str>) -> Response<Body> {
    let mut response = Response::new(Full::new(e.body()).boxed());
    *response.status_mut() = e.status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    allow_origin(&mut response, origin);
    response
}

fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Result<Response<Body>, HttpError> {
    let bytes = serde_json::to_vec(value).map_err(|e| {
        HttpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorType::InternalError,
            e.to_string(),
        )
    })?;
    let mut response = Response::new(Full::new(Bytes::from(bytes)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// The query string as decoded pairs (`+` is a space).
fn query_pairs(query: Option<&str>) -> Result<Vec<(String, String)>, HttpError> {
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return Ok(Vec::new());
    };
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let k = percent_decode(&k.replace('+', " "));
            let v = percent_decode(&v.replace('+', " "));
            match (k, v) {
                (Some(k), Some(v)) => Ok((k, v)),
                _ => Err(HttpError::bad_request(
                    "The query string has a broken percent-escape",
                    "bad_query",
                )),
            }
        })
        .collect()
}

fn method_not_allowed(allow: &'static str) -> HttpError {
    let mut e = HttpError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorType::InvalidRequest,
        format!("This route accepts {allow} only"),
    )
    .reason("method_not_allowed");
    e.details = Some(json!({ "reason": "method_not_allowed", "allow": allow }));
    e
}

/// The routes of §H3.
async fn route(
    req: Request<Incoming>,
    server: &Server,
    peer_pid: Option<u32>,
) -> Result<Response<Body>, HttpError> {
    let path = req.uri().path().to_owned();
    let segments: Vec<String> = path
        .strip_prefix('/')
        .unwrap_or(&path)
        .split('/')
        .map(|s| {
            percent_decode(s).ok_or_else(|| {
                HttpError::bad_request("The path has a broken percent-escape", "bad_path")
            })
        })
        .collect::<Result<_, _>>()?;
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = req.method().clone();
    let need = |allowed: Method, allow: &'static str| {
        if method == allowed {
            Ok(())
        } else {
            Err(method_not_allowed(allow))
        }
    };
    match segments.as_slice() {
        ["v1", "sessions"] => {
            need(Method::GET, "GET")?;
            let client = server.client(peer_pid);
            let sessions = client
                .call::<SessionsList>(Default::default())
                .await
                .map_err(|e| HttpError::from_client(&e))?;
            json_response(StatusCode::OK, &json!({ "sessions": sessions }))
        }
        ["v1", "sessions", selector, "tools"] => {
            need(Method::GET, "GET")?;
            let tools = list_tools(&server.client(peer_pid), selector).await?;
            json_response(StatusCode::OK, &tools)
        }
        ["v1", "sessions", selector, "tools", name] => {
            need(Method::GET, "GET")?;
            let tool = find_tool(&server.client(peer_pid), selector, name).await?;
            json_response(StatusCode::OK, &tool)
        }
        ["v1", "sessions", selector, "tools", name, "call"] => {
            need(Method::POST, "POST")?;
            let (selector, name) = ((*selector).to_owned(), (*name).to_owned());
            call(req, server, peer_pid, selector, name).await
        }
        ["v1", "events"] => {
            need(Method::GET, "GET")?;
            events(&req, server, peer_pid).await
        }
        ["v1", "openapi.json"] => {
            need(Method::GET, "GET")?;
            let doc = openapi(&server.client(peer_pid), server.port).await?;
            json_response(StatusCode::OK, &doc)
        }
        ["mcp"] if server.mcp.is_some() => mcp(req, server, peer_pid).await,
        _ => Err(HttpError::new(
            StatusCode::NOT_FOUND,
            ErrorType::InvalidRequest,
            format!("No route {path} (see GET /v1/openapi.json)"),
        )
        .reason("unknown_route")),
    }
}

/// `/mcp` (§H7): the body read under the caps of §H2.5, then the injected endpoint. Methods
/// other than GET, POST and DELETE are refused here, in the §H5 shape.
async fn mcp(
    req: Request<Incoming>,
    server: &Server,
    peer_pid: Option<u32>,
) -> Result<Response<Body>, HttpError> {
    let Some(endpoint) = server.mcp.as_ref().map(Arc::clone) else {
        return Err(HttpError::new(
            StatusCode::NOT_FOUND,
            ErrorType::InvalidRequest,
            "No route /mcp",
        )
        .reason("unknown_route"));
    };
    if !matches!(*req.method(), Method::GET | Method::POST | Method::DELETE) {
        return Err(method_not_allowed("GET, POST, DELETE"));
    }
    let (parts, body) = req.into_parts();
    let body = read_body(&parts.headers, body, &server.limits).await?;
    Ok(endpoint
        .handle(Request::from_parts(parts, body), peer_pid)
        .await)
}

impl Server {
    /// A control client over a fresh in-process control connection whose peer is `peer_pid`.
    fn client(&self, peer_pid: Option<u32>) -> ControlClient {
        ControlClient::from_stream((self.streams)(peer_pid))
    }
}

async fn list_tools(
    client: &ControlClient,
    selector: &str,
) -> Result<appduct_protocol::control::ToolsListResult, HttpError> {
    client
        .list_all_tools(ToolsListParams::default().with_selector(Some(selector.to_owned())))
        .await
        .map_err(|e| HttpError::from_client(&e))
}

async fn find_tool(
    client: &ControlClient,
    selector: &str,
    name: &str,
) -> Result<ToolsListEntry, HttpError> {
    let tools = list_tools(client, selector).await?;
    tools
        .tools
        .into_iter()
        .find(|t| t.descriptor.get("name").and_then(Value::as_str) == Some(name))
        .ok_or_else(|| {
            let mut e = HttpError::new(
                StatusCode::NOT_FOUND,
                ErrorType::ToolNotFound,
                format!("No tool {name} on {selector}"),
            );
            e.details = Some(json!({ "name": name, "selector": selector }));
            e
        })
}

// -- POST …/call (§H4) ---------------------------------------------------------------------------

/// Reads the body under the cap and the body timeout.
async fn read_body(
    headers: &HeaderMap,
    body: Incoming,
    limits: &HttpLimits,
) -> Result<Bytes, HttpError> {
    let too_large = || {
        let mut e = HttpError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorType::InvalidRequest,
            format!(
                "The request body is larger than {} bytes",
                limits.max_body_bytes
            ),
        );
        e.details = Some(json!({ "reason": "body_too_large", "limit": limits.max_body_bytes }));
        e
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limits.max_body_bytes as u64) {
        return Err(too_large());
    }
    let body = Limited::new(body, limits.max_body_bytes);
    match tokio::time::timeout(limits.body_timeout, body.collect()).await {
        Err(_) => Err(HttpError::new(
            StatusCode::REQUEST_TIMEOUT,
            ErrorType::Timeout,
            format!(
                "The request body did not arrive within {} ms",
                limits.body_timeout.as_millis()
            ),
        )
        .reason("body_timeout")),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err(HttpError::bad_request(
            format!("Could not read the request body: {e}"),
            "body_unreadable",
        )),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

fn parse_args(body: &[u8]) -> Result<Map<String, Value>, HttpError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(args)) => Ok(args),
        Ok(_) => Err(HttpError::bad_request(
            "The body must be a JSON object: the tool's arguments",
            "not_an_object",
        )),
        Err(e) => {
            let mut err = HttpError::new(
                StatusCode::BAD_REQUEST,
                ErrorType::InvalidRequest,
                format!("The body is not valid JSON: {e}"),
            );
            err.details = Some(json!({
                "reason": "malformed_json", "line": e.line(), "column": e.column()
            }));
            Err(err)
        }
    }
}

fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .any(|m| m.trim().starts_with("text/event-stream"))
        })
}

fn new_call_id() -> Result<String, HttpError> {
    let bytes = appduct_client::random::random_bytes::<16>().map_err(|e| {
        HttpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorType::InternalError,
            e.to_string(),
        )
    })?;
    Ok(format!("http-{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// Cancels the call when dropped armed: the HTTP client went away before the result (§H4.3).
struct CancelOnDrop {
    client: ControlClient,
    call_id: String,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let client = self.client.clone();
        let params = ToolsCancelParams::new(self.call_id.clone())
            .with_reason(Some(DISCONNECT_REASON.to_owned()));
        tracing::debug!(call_id = %self.call_id, "HTTP client gone; cancelling its call");
        // The task holds the connection open until the cancel is answered, so the call ends
        // with this reason rather than the control connection's `connection_closed`.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = client.call::<ToolsCancel>(params).await;
            });
        }
    }
}

async fn call(
    req: Request<Incoming>,
    server: &Server,
    peer_pid: Option<u32>,
    selector: String,
    name: String,
) -> Result<Response<Body>, HttpError> {
    let mut timeout_ms = None;
    for (key, value) in query_pairs(req.uri().query())? {
        match key.as_str() {
            "timeoutMs" => {
                timeout_ms = Some(value.parse::<u64>().map_err(|_| {
                    HttpError::bad_request(
                        "timeoutMs must be a whole number of milliseconds",
                        "bad_query",
                    )
                })?)
            }
            _ => {
                return Err(HttpError::bad_request(
                    format!("Unknown query parameter {key:?} (only timeoutMs)"),
                    "bad_query",
                ));
            }
        }
    }
    let sse = wants_sse(req.headers());
    let (parts, body) = req.into_parts();
    let body = read_body(&parts.headers, body, &server.limits).await?;
    let args = parse_args(&body)?;
    let call_id = new_call_id()?;
    let params = ToolsCallParams::new(name)
        .with_selector(Some(selector))
        .with_args(args)
        .with_timeout_ms(timeout_ms)
        .with_caller(Some(Caller::Http))
        .with_call_id(Some(call_id.clone()));
    let client = server.client(peer_pid);
    let mut guard = CancelOnDrop {
        client: client.clone(),
        call_id,
        armed: true,
    };
    if !sse {
        let outcome = client.call_tool(params).await;
        guard.armed = false;
        return match outcome {
            Ok(result) => json_response(StatusCode::OK, &result),
            Err(e) => Err(HttpError::from_call(&e)),
        };
    }
    let (mut progress, pending) = client.call_tool_with_progress(params);
    let mut settle = Box::pin(pending.result());
    // The status waits for the call's first `started` or `progress` notification (an approval
    // wait sends `progress` first): a call that settles before either (unknown session,
    // `tool_not_found`, `policy_denied`, …) is a plain error response with its status (§H4.2).
    let first = tokio::select! {
        biased;
        item = progress.next() => match item {
            Some(p) => Ok(p),
            None => Err((&mut settle).await),
        },
        outcome = &mut settle => Err(outcome),
    };
    let first = match first {
        Ok(p) => progress_frame(&p),
        Err(Err(e)) => {
            guard.armed = false;
            return Err(HttpError::from_call(&e));
        }
        Err(Ok(result)) => {
            guard.armed = false;
            let (tx, rx) = mpsc::channel::<Bytes>(1);
            let _ = tx.try_send(sse_frame("result", None, &result));
            return Ok(sse_response(rx));
        }
    };
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let _ = tx.try_send(first);
    tokio::spawn(async move {
        let mut guard = guard;
        let outcome = loop {
            tokio::select! {
                () = tx.closed() => return,
                item = progress.next() => match item {
                    // A client that does not read misses progress, never the result (§C15).
                    Some(p) => {
                        let _ = tx.try_send(progress_frame(&p));
                    }
                    None => break (&mut settle).await,
                },
                outcome = &mut settle => break outcome,
            }
        };
        guard.armed = false;
        let frame = match outcome {
            Ok(result) => sse_frame("result", None, &result),
            Err(e) => {
                let e = HttpError::from_call(&e);
                let body: Value = serde_json::from_slice(&e.body()).unwrap_or(Value::Null);
                sse_frame("error", None, &body)
            }
        };
        let _ = tx.send(frame).await;
    });
    Ok(sse_response(rx))
}

/// The SSE frame of one per-call notification (§H4.2).
fn progress_frame(p: &CallProgress) -> Bytes {
    match p {
        CallProgress::Started(p) => sse_frame("started", None, &strip_request_id(p)),
        CallProgress::Progress(p) => sse_frame("progress", None, &strip_request_id(p)),
    }
}

fn strip_request_id<T: Serialize>(p: &T) -> Value {
    let mut v = serde_json::to_value(p).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.remove("requestId");
    }
    v
}

fn sse_frame<T: Serialize>(event: &str, id: Option<u64>, data: &T) -> Bytes {
    let data = serde_json::to_string(data).unwrap_or_else(|_| "null".to_owned());
    let mut frame = String::with_capacity(data.len() + 32);
    if let Some(id) = id {
        frame.push_str(&format!("id: {id}\n"));
    }
    frame.push_str("event: ");
    frame.push_str(event);
    frame.push_str("\ndata: ");
    frame.push_str(&data);
    frame.push_str("\n\n");
    Bytes::from(frame)
}

/// A response body fed by a channel; dropped by hyper when the client goes away, which
/// closes the channel (what the producers watch for).
struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|bytes| bytes.map(|b| Ok(Frame::data(b))))
    }
}

fn sse_response(rx: mpsc::Receiver<Bytes>) -> Response<Body> {
    let mut response = Response::new(ChannelBody(rx).boxed());
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

// -- GET /v1/events (§H3.5) ----------------------------------------------------------------------

async fn events(
    req: &Request<Incoming>,
    server: &Server,
    peer_pid: Option<u32>,
) -> Result<Response<Body>, HttpError> {
    let mut params = Map::new();
    for (key, value) in query_pairs(req.uri().query())? {
        match key.as_str() {
            "session" => {
                params.insert("sessionSelector".into(), json!(value));
            }
            "kinds" => {
                let kinds: Vec<&str> = value.split(',').filter(|k| !k.is_empty()).collect();
                params.insert("kinds".into(), json!(kinds));
            }
            "name" => {
                params.insert("name".into(), json!(value));
            }
            "since" | "payloadMaxBytes" => {
                let n: u64 = value.parse().map_err(|_| {
                    HttpError::bad_request(format!("{key} must be a whole number"), "bad_query")
                })?;
                let key = if key == "since" {
                    "since"
                } else {
                    "payloadMaxBytes"
                };
                params.insert(key.into(), json!(n));
            }
            _ => {
                return Err(HttpError::bad_request(
                    format!(
                        "Unknown query parameter {key:?} (session, kinds, name, since, payloadMaxBytes)"
                    ),
                    "bad_query",
                ));
            }
        }
    }
    // `seq` counts per session, so `since` needs a session filter (§C8.12): without `session`
    // no `id:` is sent and a `Last-Event-ID` (which a reconnecting `EventSource` could only
    // have from elsewhere) is ignored, so a reconnect never turns into a `400` (§H3.5).
    let resumable = params.contains_key("sessionSelector")
        && params.get("kinds").is_none_or(|k| {
            k.as_array()
                .is_some_and(|k| k.iter().any(|k| k == "app_event"))
        });
    if resumable
        && !params.contains_key("since")
        && let Some(last) = req
            .headers()
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
    {
        let since: u64 = last.trim().parse().map_err(|_| {
            HttpError::bad_request("Last-Event-ID must be a whole number", "bad_last_event_id")
        })?;
        params.insert("since".into(), json!(since));
    }
    let params = SubscribeParams::validate(Some(&Value::Object(params))).map_err(|e| {
        let e: appduct_protocol::jsonrpc::ErrorObject = e.into();
        let mut err = HttpError::new(StatusCode::BAD_REQUEST, e.error_type(), e.message.clone());
        err.details = e.details().cloned();
        err
    })?;
    let client = server.client(peer_pid);
    let mut stream = client
        .subscribe(params)
        .await
        .map_err(|e| HttpError::from_client(&e))?;
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let first = sse_frame("subscribed", None, stream.result());
    tokio::spawn(async move {
        let _client = client;
        if tx.send(first).await.is_err() {
            return;
        }
        loop {
            tokio::select! {
                () = tx.closed() => return,
                next = stream.next() => match next {
                    // Bounded: a client 256 events behind is cut off (§C15).
                    Some(event) => {
                        if let Err(e) = tx.try_send(event_frame(&event, resumable)) {
                            if matches!(e, mpsc::error::TrySendError::Full(_)) {
                                tracing::debug!("HTTP events client too slow; ending its stream");
                            }
                            return;
                        }
                    }
                    None => return,
                },
            }
        }
    });
    Ok(sse_response(rx))
}

/// One event: `event:` its kind, `data:` the notification, and with `resumable` (a `session`
/// filter) `id:` its `seq` for `app_event` (resumable with `Last-Event-ID` or `since`).
fn event_frame(event: &EventNotification, resumable: bool) -> Bytes {
    let value = serde_json::to_value(event).unwrap_or(Value::Null);
    let kind = value
        .get("kind")
        .or_else(|| value.get("data").and_then(|d| d.get("kind")))
        .and_then(Value::as_str)
        .unwrap_or("event")
        .to_owned();
    let id = (resumable && event.seq > 0).then_some(event.seq);
    sse_frame(&kind, id, &value)
}

// -- GET /v1/openapi.json (§H3.6) ------------------------------------------------------------------

fn error_schema() -> Value {
    json!({
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["type", "message"],
                "properties": {
                    "type": { "type": "string" },
                    "message": { "type": "string" },
                    "details": {}
                }
            }
        }
    })
}

async fn openapi(client: &ControlClient, port: u16) -> Result<Value, HttpError> {
    let sessions = client
        .call::<SessionsList>(Default::default())
        .await
        .map_err(|e| HttpError::from_client(&e))?;
    let error_ref = json!({ "$ref": "#/components/schemas/Error" });
    let errors = json!({
        "default": {
            "description": "An error (docs/http.md §H5)",
            "content": { "application/json": { "schema": error_ref } }
        }
    });
    let mut paths = Map::new();
    let plain = |summary: &str| {
        json!({ "get": {
            "summary": summary,
            "responses": {
                "200": { "description": "OK", "content": { "application/json": { "schema": {} } } },
                "default": errors["default"].clone()
            }
        }})
    };
    paths.insert(
        "/v1/sessions".into(),
        plain("Live sessions (sessions.list)"),
    );
    paths.insert(
        "/v1/sessions/{selector}/tools".into(),
        plain("A session's tools (tools.list)"),
    );
    paths.insert(
        "/v1/sessions/{selector}/tools/{name}".into(),
        plain("One tool's descriptor"),
    );
    paths.insert(
        "/v1/events".into(),
        json!({ "get": {
            "summary": "Server-sent events of the daemon's event stream (events.subscribe)",
            "responses": {
                "200": { "description": "SSE", "content": { "text/event-stream": { "schema": { "type": "string" } } } },
                "default": errors["default"].clone()
            }
        }}),
    );
    for session in sessions {
        let Ok(tools) = client
            .list_all_tools(
                ToolsListParams::default().with_selector(Some(session.session_id.clone())),
            )
            .await
        else {
            continue;
        };
        for tool in tools.tools {
            let Some(name) = tool.descriptor.get("name").and_then(Value::as_str) else {
                continue;
            };
            let schema = tool
                .descriptor
                .get("input_schema")
                .cloned()
                .unwrap_or_else(|| json!({ "type": "object" }));
            let mut operation = json!({
                "operationId": format!("{}__{}", session.alias, name),
                "summary": tool.descriptor.get("description").cloned().unwrap_or(Value::Null),
                "tags": [session.alias],
                "parameters": [{
                    "name": "timeoutMs", "in": "query", "required": false,
                    "schema": { "type": "integer", "minimum": 1000, "maximum": 600000 }
                }],
                "requestBody": {
                    "required": false,
                    "content": { "application/json": { "schema": schema } }
                },
                "responses": {
                    "200": {
                        "description": "The tool's result (tools.call)",
                        "content": {
                            "application/json": { "schema": {
                                "type": "object",
                                "properties": { "result": tool.descriptor.get("output_schema").cloned().unwrap_or(json!({})) }
                            } },
                            "text/event-stream": { "schema": { "type": "string" } }
                        }
                    },
                    "default": errors["default"].clone()
                }
            });
            if operation["summary"].is_null()
                && let Value::Object(m) = &mut operation
            {
                m.remove("summary");
            }
            paths.insert(
                format!("/v1/sessions/{}/tools/{}/call", session.alias, name),
                json!({ "post": operation }),
            );
        }
    }
    Ok(json!({
        "openapi": "3.1.0",
        "info": {
            "title": "appduct loopback HTTP API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Tools of the apps held by this appduct daemon (docs/http.md)."
        },
        "servers": [{ "url": format!("http://127.0.0.1:{port}") }],
        "security": [{ "bearer": [] }],
        "paths": paths,
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": { "Error": error_schema() }
        }
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn host_must_be_loopback_with_the_port() {
        let with = |host: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            host_allowed(&h, 8080)
        };
        assert!(with("127.0.0.1:8080"));
        assert!(with("LOCALHOST:8080"));
        assert!(with("[::1]:8080"));
        assert!(!with("127.0.0.1"));
        assert!(!with("127.0.0.1:8081"));
        assert!(!with("evil.example:8080"));
        assert!(!with("localhost.evil.example:8080"));
        assert!(!host_allowed(&HeaderMap::new(), 8080));
    }

    #[test]
    fn segments_decode() {
        assert_eq!(percent_decode("a%20b").as_deref(), Some("a b"));
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%"), None);
    }
}
