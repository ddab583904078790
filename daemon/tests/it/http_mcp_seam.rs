//! The `/mcp` seam of the HTTP API (docs/http.md §H7.1): a stub `McpEndpoint` stands in for the
//! bridge, so these tests show what the daemon guarantees before and around it: the checks of
//! §H2 run first (the stub never sees a refused request), the body arrives read under the cap,
//! other methods are `405`, a daemon without an endpoint answers `404`, the endpoint gets
//! working in-process control connections, and it is shut down when the server stops.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use appduct_client::client::ControlClient;
use appduct_client::config::{Config, HttpConfig};
use appduct_client::http_token;
use appduct_daemon::daemon::{Daemon, DaemonHandle, DaemonOptions};
use appduct_daemon::http_api::{
    BoxFuture, ControlStreams, HttpLimits, McpEndpoint, McpEndpointFactory, McpRequest, McpResponse,
};
use appduct_protocol::control::SessionsList;
use daemon_support::{WAIT, state_dir};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Records what reached it; answers `stub <method> <body length> <sessions.list ok>`.
struct Stub {
    streams: ControlStreams,
    seen: Mutex<Vec<(String, usize)>>,
    /// The peer pid each request came with (SECURITY.md §4.19).
    peers: Mutex<Vec<Option<u32>>>,
    shut: AtomicBool,
}

#[derive(Clone)]
struct Shared(Arc<Mutex<Option<Arc<Stub>>>>);

struct StubEndpoint(Arc<Stub>);

impl McpEndpoint for StubEndpoint {
    fn handle(&self, request: McpRequest, peer_pid: Option<u32>) -> BoxFuture<McpResponse> {
        let stub = Arc::clone(&self.0);
        Box::pin(async move {
            let method = request.method().to_string();
            let len = request.body().len();
            stub.seen.lock().unwrap().push((method.clone(), len));
            stub.peers.lock().unwrap().push(peer_pid);
            let listed = ControlClient::from_stream((stub.streams)(peer_pid))
                .call::<SessionsList>(Default::default())
                .await
                .is_ok();
            let body = format!("stub {method} {len} {listed}");
            hyper::Response::new(Full::new(Bytes::from(body)).boxed())
        })
    }

    fn shutdown(&self) {
        self.0.shut.store(true, Ordering::SeqCst);
    }
}

struct Setup {
    _dir: TempDir,
    daemon: DaemonHandle,
    addr: SocketAddr,
    token: String,
    stub: Shared,
}

async fn setup(with_endpoint: bool) -> Setup {
    let dir = state_dir();
    let mut config = Config::defaults(dir.path());
    config.http = Some(HttpConfig {
        port: 0,
        cors_origins: Vec::new(),
    });
    let stub = Shared(Arc::new(Mutex::new(None)));
    let mut options = DaemonOptions::for_tests(dir.path())
        .config(config)
        .http_limits(HttpLimits {
            max_body_bytes: 1024,
            ..HttpLimits::default()
        });
    if with_endpoint {
        let slot = stub.clone();
        options = options.mcp_http(McpEndpointFactory::new(move |streams| {
            let s = Arc::new(Stub {
                streams,
                seen: Mutex::new(Vec::new()),
                peers: Mutex::new(Vec::new()),
                shut: AtomicBool::new(false),
            });
            *slot.0.lock().unwrap() = Some(Arc::clone(&s));
            Arc::new(StubEndpoint(s))
        }));
    }
    let daemon = Daemon::start(options).await.unwrap();
    let addr = daemon.http_addr().unwrap();
    let token = http_token::read_token(dir.path()).unwrap().unwrap();
    Setup {
        _dir: dir,
        daemon,
        addr,
        token,
        stub,
    }
}

impl Setup {
    fn stub(&self) -> Arc<Stub> {
        Arc::clone(self.stub.0.lock().unwrap().as_ref().unwrap())
    }

    async fn send(&self, method: &str, host: &str, token: Option<&str>, body: &str) -> String {
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let raw = format!(
            "{method} /mcp HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        stream.write_all(raw.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        timeout(WAIT, stream.read_to_end(&mut buf))
            .await
            .unwrap()
            .unwrap();
        String::from_utf8_lossy(&buf).into_owned()
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.addr.port())
    }
}

fn status(response: &str) -> &str {
    response.split(' ').nth(1).unwrap_or_default()
}

#[tokio::test]
async fn mcp_requests_pass_the_http_checks_first_and_arrive_read() {
    let s = setup(true).await;
    let host = s.host();
    let token = s.token.clone();

    let ok = s
        .send("POST", &host, Some(&token), r#"{"jsonrpc":"2.0"}"#)
        .await;
    assert_eq!(status(&ok), "200", "{ok}");
    assert!(ok.ends_with("stub POST 17 true"), "{ok}");

    let refused = [
        (s.send("POST", &host, None, "{}").await, "401"),
        (s.send("POST", &host, Some("nope"), "{}").await, "401"),
        (
            s.send("POST", "evil.example:80", Some(&token), "{}").await,
            "403",
        ),
        (
            s.send("POST", &host, Some(&token), &"x".repeat(2000)).await,
            "413",
        ),
        (s.send("PUT", &host, Some(&token), "{}").await, "405"),
    ];
    for (response, want) in &refused {
        assert_eq!(status(response), *want, "{response}");
        assert!(response.contains("\"error\""), "{response}");
    }
    assert!(
        refused[4].0.contains("GET, POST, DELETE"),
        "{}",
        refused[4].0
    );
    let delete = s.send("DELETE", &host, Some(&token), "").await;
    assert!(delete.ends_with("stub DELETE 0 true"), "{delete}");
    assert_eq!(
        *s.stub().seen.lock().unwrap(),
        vec![("POST".to_owned(), 17), ("DELETE".to_owned(), 0)],
        "a refused request reached the endpoint"
    );
    // This process opened both connections; off Linux the pid is not looked up.
    let me = cfg!(target_os = "linux").then(std::process::id);
    assert_eq!(*s.stub().peers.lock().unwrap(), vec![me, me]);

    assert!(!s.stub().shut.load(Ordering::SeqCst));
    let stub = s.stub();
    s.daemon.shutdown().await;
    assert!(
        stub.shut.load(Ordering::SeqCst),
        "the endpoint was not shut down with the server"
    );
}

#[tokio::test]
async fn without_an_endpoint_mcp_is_an_unknown_route() {
    let s = setup(false).await;
    let host = s.host();
    let response = s.send("POST", &host, Some(&s.token.clone()), "{}").await;
    assert_eq!(status(&response), "404", "{response}");
    assert!(response.contains("unknown_route"), "{response}");
}
