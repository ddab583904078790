//! Test harness for the bridge (ARCHITECTURE.md#test-layers): a `FakeDaemon` that answers only the methods a test
//! registers (with the selector rules of §C6) and fails loudly on any other, a connector that
//! serves it over `tokio::io::duplex`, and an rmcp client over a second duplex.
//!
//! "Fails loudly" (§M1): an unregistered method is answered `-32601` and recorded; the
//! [`Harness`] and [`RawClient`] check the record when they are dropped, which happens on the
//! test's own thread at the end of the test, so the test fails. (A panic in the fake's own
//! `Drop` would not do: the last reference usually dies inside a tokio task, where the panic is
//! swallowed.) Tests that use the fake without either call [`FakeDaemon::assert_no_unexpected`].
#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

mod line_client;
pub use line_client::{LineClient, SID, fake_bridge, prompt_fake};

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use appduct_client::client::{ClientError, ControlClient};
use appduct_client::command_runner::{CommandRunner, ScriptedCommandRunner};
use appduct_daemon::control_server::BoxFuture;
use appduct_mcp::project::ProjectEnv;
use appduct_mcp::{Bridge, BridgeOptions, DaemonConnector};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, mpsc, oneshot};

pub use appduct_daemon::testing::{
    CallHook, FakeDaemon, FakeHandler, FakeState, Hold, PIN, session, tool,
};

/// Serves the fake over a fresh in-memory connection per connect.
#[derive(Debug)]
pub struct FakeConnector {
    pub fake: Arc<FakeDaemon>,
    /// `connect(false)` (status) finds no daemon.
    pub no_daemon_without_spawn: bool,
}

impl DaemonConnector for FakeConnector {
    fn connect(&self, spawn: bool) -> BoxFuture<'_, Result<ControlClient, ClientError>> {
        let fake = self.fake.clone();
        let refuse = self.no_daemon_without_spawn && !spawn;
        Box::pin(async move {
            if refuse {
                return Err(ClientError::Unreachable {
                    socket: "/nonexistent/daemon.sock".into(),
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                });
            }
            fake.connections.fetch_add(1, Ordering::SeqCst);
            Ok(in_memory_client(&fake))
        })
    }
}

/// A control client connected in memory to the fake, served by the daemon's own control
/// server (what every fake connector hands the bridge).
pub fn in_memory_client(fake: &Arc<FakeDaemon>) -> ControlClient {
    ControlClient::from_stream(fake.connect())
}

/// A bridge on the fake (always reachable) that runs `runner` for `adb` / `xcrun`; with a
/// [`FakeDaemon::hold`], a test can act mid-step.
pub fn bridge_with_runner(fake: &Arc<FakeDaemon>, runner: Arc<dyn CommandRunner>) -> Bridge {
    Bridge::with_runner(
        Arc::new(FakeConnector {
            fake: fake.clone(),
            no_daemon_without_spawn: false,
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
        fake: fake.clone(),
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

/// `_meta["appduct/error"].type` of an error result, after checking the contract (§M6).
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
            fake: fake.clone(),
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
