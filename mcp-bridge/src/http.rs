//! MCP over Streamable HTTP (docs/http.md §H7, docs/mcp.md §M18): the same [`Bridge`] as
//! `appduct mcp`, served by rmcp's streamable-HTTP server transport at `/mcp` of the daemon's
//! loopback HTTP server. The daemon runs its checks (§H2: Host, Origin, bearer token, body cap
//! and timeout, connection cap) and hands each `/mcp` request to [`HttpEndpoint::handle`]; the
//! binary wires the two together, so neither crate depends on the other.
//!
//! Each MCP session (one `initialize`) gets a fresh [`Bridge`] whose [`DaemonConnector`] opens
//! in-process control connections to the same daemon ([`InProcessConnector`]): consent by
//! elicitation, progress, cancellation and approval waits behave exactly as over stdio.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use appduct_client::BoxFuture;
use appduct_client::client::{ClientError, ControlClient};
use appduct_protocol::errors::ErrorType;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
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

/// Opens a new in-process control connection to the daemon.
pub type ControlStreamFn = Arc<dyn Fn() -> DuplexStream + Send + Sync>;

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
/// this process.
#[derive(Clone)]
pub struct InProcessConnector {
    streams: ControlStreamFn,
}

impl InProcessConnector {
    pub fn new(streams: ControlStreamFn) -> Self {
        Self { streams }
    }
}

impl fmt::Debug for InProcessConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InProcessConnector")
    }
}

impl DaemonConnector for InProcessConnector {
    fn connect(&self, _spawn: bool) -> BoxFuture<'_, Result<ControlClient, ClientError>> {
        let client = ControlClient::from_stream((self.streams)());
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

/// The `/mcp` endpoint: rmcp's streamable-HTTP service over per-session bridges, with the
/// session cap in front.
pub struct HttpEndpoint {
    service: StreamableHttpService<Bridge, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    max_sessions: usize,
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
        let sessions = Arc::new(sessions);
        let stop = CancellationToken::new();
        // Host and Origin were checked by the daemon (§H2.2, §H2.4) with the bound port.
        let config = StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .disable_allowed_origins()
            .with_sse_keep_alive(Some(options.sse_keep_alive))
            .with_max_request_body_bytes(options.max_body_bytes)
            .with_cancellation_token(stop.clone());
        let connector: Arc<dyn DaemonConnector> = Arc::new(InProcessConnector::new(streams));
        let bridge_options = options.bridge.clone();
        let service = StreamableHttpService::new(
            move || {
                Ok(Bridge::with_env(
                    Arc::clone(&connector),
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
            stop,
        }
    }

    /// MCP sessions open now.
    pub async fn session_count(&self) -> usize {
        self.sessions.sessions.read().await.len()
    }

    /// Answers one `/mcp` request whose checks passed and whose body was read.
    pub async fn handle(&self, request: Request<Bytes>) -> Response<Body> {
        if request.method() == Method::POST
            && !request.headers().contains_key("mcp-session-id")
            && is_initialize(request.body())
            && self.session_count().await >= self.max_sessions
        {
            tracing::debug!("MCP over HTTP: initialize refused at the session cap");
            return too_many_sessions(self.max_sessions);
        }
        let (parts, body) = request.into_parts();
        self.service
            .handle(Request::from_parts(parts, Full::new(body)))
            .await
    }

    /// Ends every session and refuses new requests.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }
}

/// Whether a POST body is a JSON-RPC `initialize` request (a new session).
fn is_initialize(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<&'a str>,
    }
    serde_json::from_slice::<Method<'_>>(body).is_ok_and(|m| m.method == Some("initialize"))
}

/// `503` in the HTTP API's error shape (docs/http.md §H5).
fn too_many_sessions(max: usize) -> Response<Body> {
    let body: Value = json!({"error": {
        "type": ErrorType::ConnectionError.to_string(),
        "message": format!("Too many MCP sessions open ({max}); end one (DELETE /mcp) or retry later"),
        "details": {"reason": "too_many_sessions", "limit": max}
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
        assert!(!is_initialize(b"[1,2]"));
        assert!(!is_initialize(b"not json"));
    }
}
