//! The loopback HTTP API end to end (docs/http.md §H1–§H5): a real daemon with `http.port` 0,
//! a real `appduct-sdk` app over wss, and raw HTTP/1.1 over real loopback TCP sockets (so the
//! tests control every byte: bad Host, slow bodies, disconnects). Every wait is bounded and
//! tied to a condition; nothing sleeps to synchronise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;

use std::net::SocketAddr;

use appduct_client::config::{Config, HttpConfig, write_http_port};
use appduct_client::http_token;
use appduct_daemon::daemon::{Daemon, DaemonHandle, DaemonOptions};
use appduct_daemon::http_api::HttpLimits;
use appduct_protocol::control::{
    DaemonReload, DaemonStatus, EventKind, LinkCreate, LinkCreateParams, SessionState,
    SubscribeParams,
};
use appduct_protocol::link::compose_deep_link;
use appduct_sdk::{CallContext, Client, ToolError, Trust};
use daemon_support::{WAIT, memory_client, state_dir};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::timeout;

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

struct Invocation {
    args: Value,
    ctx: CallContext,
    answer: oneshot::Sender<Result<Value, ToolError>>,
}

struct Setup {
    _dir: TempDir,
    daemon: DaemonHandle,
    _app: Client,
    alias: String,
    session_id: String,
    addr: SocketAddr,
    token: String,
    calls: mpsc::UnboundedReceiver<Invocation>,
}

impl Setup {
    async fn next_call(&mut self) -> Invocation {
        timeout(WAIT, self.calls.recv())
            .await
            .expect("no handler invocation")
            .unwrap()
    }

    fn auth(&self) -> String {
        format!("Authorization: Bearer {}\r\n", self.token)
    }

    fn host(&self) -> String {
        format!("Host: 127.0.0.1:{}\r\n", self.addr.port())
    }

    /// `GET path` with a good Host and token.
    async fn get(&self, path: &str) -> Reply {
        let head = format!(
            "GET {path} HTTP/1.1\r\n{}{}Connection: close\r\n\r\n",
            self.host(),
            self.auth()
        );
        send(self.addr, head.as_bytes()).await
    }

    /// `POST path` with a JSON body, a good Host and token.
    async fn post(&self, path: &str, body: &str) -> Reply {
        send(self.addr, self.post_bytes(path, body, "").as_bytes()).await
    }

    fn post_bytes(&self, path: &str, body: &str, extra: &str) -> String {
        format!(
            "POST {path} HTTP/1.1\r\n{}{}{extra}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.host(),
            self.auth(),
            body.len()
        )
    }

    fn call_path(&self, tool: &str) -> String {
        format!("/v1/sessions/{}/tools/{tool}/call", self.alias)
    }
}

fn descriptor(name: &str) -> Value {
    json!({"name": name, "description": format!("The {name} tool."),
           "input_schema": {"type": "object", "properties": {"tag": {"type": "string"}}},
           "output_schema": {"type": "object"}})
}

async fn setup_with(limits: HttpLimits, cors: &[&str]) -> Setup {
    let dir = state_dir();
    let mut config = Config::defaults(dir.path());
    config.http = Some(HttpConfig {
        port: 0,
        cors_origins: cors.iter().map(|s| (*s).to_owned()).collect(),
    });
    let daemon = Daemon::start(
        DaemonOptions::for_tests(dir.path())
            .config(config)
            .http_limits(limits),
    )
    .await
    .unwrap();
    let addr = daemon.http_addr().expect("the HTTP API is on");
    assert!(addr.ip().is_loopback());
    let token = http_token::read_token(dir.path()).unwrap().unwrap();

    let link = memory_client(&daemon)
        .call::<LinkCreate>(LinkCreateParams::default())
        .await
        .unwrap();
    let pin = daemon.pin();
    let deep_link = compose_deep_link("test", &link.deep_link_payload, Some(&pin)).unwrap();
    let app = Client::builder()
        .trust(Trust::Pin(vec![pin]))
        .device(Some("Google"), Some("Pixel 8"), Some("Android 15"))
        .build()
        .unwrap();
    let (tx, calls) = mpsc::unbounded_channel();
    app.register_tool(&descriptor("work"), move |args: Value, ctx: CallContext| {
        let tx = tx.clone();
        async move {
            let (answer, rx) = oneshot::channel();
            let _ = tx.send(Invocation {
                args,
                ctx: ctx.clone(),
                answer,
            });
            tokio::select! {
                answered = rx => answered.unwrap_or_else(|_| Err(ToolError::execution("dropped"))),
                reason = ctx.cancelled() => Err(ToolError::execution(reason)),
            }
        }
    })
    .unwrap();
    timeout(WAIT, app.connect(&deep_link))
        .await
        .unwrap()
        .unwrap();
    let session_id = link.session_id.clone();
    let sessions = daemon.sessions().clone();
    let id = session_id.clone();
    daemon_support::until(move || {
        sessions
            .summary(&id)
            .is_some_and(|s| s.state == SessionState::Active)
            && sessions.tools_of(&id).is_some_and(|t| t.len() == 1)
    })
    .await;
    let alias = daemon.sessions().summary(&session_id).unwrap().alias;
    Setup {
        _dir: dir,
        daemon,
        _app: app,
        alias,
        session_id,
        addr,
        token,
        calls,
    }
}

async fn setup() -> Setup {
    setup_with(HttpLimits::default(), &[]).await
}

/// A parsed response.
#[derive(Debug)]
struct Reply {
    status: u16,
    head: String,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }

    fn error_type(&self) -> String {
        self.json()["error"]["type"].as_str().unwrap().to_owned()
    }

    fn reason(&self) -> String {
        self.json()["error"]["details"]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

fn parse(raw: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Reply {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// Writes `raw` on a new connection and reads the whole response (the server closes it).
async fn send(addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw).await.unwrap();
    read_all(&mut stream).await
}

async fn read_all(stream: &mut TcpStream) -> Reply {
    let mut buf = Vec::new();
    timeout(WAIT, stream.read_to_end(&mut buf))
        .await
        .expect("the response never ended")
        .unwrap();
    parse(&buf)
}

/// Reads until `needle` has arrived; returns everything read so far.
async fn read_until(stream: &mut TcpStream, seen: &mut String, needle: &str) {
    let mut chunk = [0u8; 4096];
    timeout(WAIT, async {
        while !seen.contains(needle) {
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed before {needle:?}; got {seen:?}");
            seen.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {needle:?} in {seen:?}"));
}

// ---------------------------------------------------------------------------------------------
// Routes
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_call_over_http_returns_the_result_and_is_recorded_with_caller_http() {
    let mut s = setup().await;
    let mut finished = memory_client(&s.daemon)
        .subscribe(SubscribeParams::default().with_kinds(Some(vec![EventKind::ToolCallFinished])))
        .await
        .unwrap();
    let raw = s.post_bytes(&s.call_path("work"), r#"{"tag":"hi"}"#, "");
    let request = send(s.addr, raw.as_bytes());
    let driver = async {
        let inv = s.next_call().await;
        assert_eq!(inv.args, json!({"tag": "hi"}));
        inv.answer.send(Ok(json!({"echoed": "hi"}))).unwrap();
    };
    let (reply, ()) = tokio::join!(request, driver);
    assert_eq!(reply.status, 200, "{reply:?}");
    let body = reply.json();
    assert_eq!(body["result"], json!({"echoed": "hi"}));
    assert_eq!(body["alias"], s.alias);
    assert!(body["callId"].as_str().unwrap().starts_with("http-"));
    let event = timeout(WAIT, finished.next()).await.unwrap().unwrap();
    let event = serde_json::to_value(&event).unwrap();
    assert_eq!(event["data"]["caller"], "http", "{event}");
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn progress_streams_over_sse_then_the_result() {
    let mut s = setup().await;
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    let request = s.post_bytes(
        &s.call_path("work"),
        r#"{"tag":"p"}"#,
        "Accept: text/event-stream\r\n",
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut seen = String::new();
    let inv = s.next_call().await;
    read_until(&mut stream, &mut seen, "event: started").await;
    assert!(seen.contains("content-type: text/event-stream"), "{seen}");
    assert!(inv.ctx.progress(Some(0.5), Some("halfway")));
    read_until(&mut stream, &mut seen, "halfway").await;
    assert!(seen.contains("event: progress"), "{seen}");
    assert!(!seen.contains("requestId"), "{seen}");
    inv.answer.send(Ok(json!({"done": true}))).unwrap();
    read_until(&mut stream, &mut seen, "event: result").await;
    read_until(&mut stream, &mut seen, r#""done":true"#).await;
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn concurrent_calls_are_answered_each_with_its_own_result() {
    let mut s = setup().await;
    let requests: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|tag| {
            let raw = s.post_bytes(&s.call_path("work"), &format!(r#"{{"tag":"{tag}"}}"#), "");
            let addr = s.addr;
            tokio::spawn(async move { send(addr, raw.as_bytes()).await })
        })
        .collect();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(s.next_call().await);
    }
    // Answered in reverse order of arrival.
    while let Some(inv) = held.pop() {
        let tag = inv.args["tag"].clone();
        inv.answer.send(Ok(json!({"tag": tag}))).unwrap();
    }
    for (request, tag) in requests.into_iter().zip(["a", "b", "c"]) {
        let reply = request.await.unwrap();
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.json()["result"]["tag"], tag);
    }
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn a_client_that_disconnects_cancels_the_call() {
    let mut s = setup().await;
    for accept in ["", "Accept: text/event-stream\r\n"] {
        let mut stream = TcpStream::connect(s.addr).await.unwrap();
        let raw = s.post_bytes(&s.call_path("work"), "{}", accept);
        stream.write_all(raw.as_bytes()).await.unwrap();
        let inv = s.next_call().await;
        drop(stream);
        let reason = timeout(WAIT, inv.ctx.cancelled())
            .await
            .expect("the handler never saw a cancellation");
        assert_eq!(reason, "http_client_disconnected", "Accept {accept:?}");
    }
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn sessions_tools_and_openapi_describe_the_live_app() {
    let s = setup().await;
    let sessions = s.get("/v1/sessions").await;
    assert_eq!(sessions.status, 200, "{sessions:?}");
    assert_eq!(sessions.json()["sessions"][0]["alias"], s.alias);

    let tools = s.get(&format!("/v1/sessions/{}/tools", s.alias)).await;
    assert_eq!(tools.json()["tools"][0]["name"], "work");
    let tool = s.get(&format!("/v1/sessions/{}/tools/work", s.alias)).await;
    assert_eq!(tool.status, 200);
    assert_eq!(
        tool.json()["input_schema"],
        descriptor("work")["input_schema"]
    );

    let doc = s.get("/v1/openapi.json").await.json();
    assert_eq!(doc["openapi"], "3.1.0");
    let op = &doc["paths"][s.call_path("work")]["post"];
    assert_eq!(
        op["requestBody"]["content"]["application/json"]["schema"],
        descriptor("work")["input_schema"],
        "{doc}"
    );
    s.daemon.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Bad input (issue #18)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_missing_or_wrong_token_is_401() {
    let s = setup().await;
    let missing = format!(
        "GET /v1/sessions HTTP/1.1\r\n{}Connection: close\r\n\r\n",
        s.host()
    );
    let reply = send(s.addr, missing.as_bytes()).await;
    assert_eq!(reply.status, 401);
    assert_eq!(reply.reason(), "missing_token");
    assert_eq!(reply.header("www-authenticate").as_deref(), Some("Bearer"));

    let wrong = format!(
        "GET /v1/sessions HTTP/1.1\r\n{}Authorization: Bearer {}\r\nConnection: close\r\n\r\n",
        s.host(),
        "A".repeat(43)
    );
    let reply = send(s.addr, wrong.as_bytes()).await;
    assert_eq!(reply.status, 401);
    assert_eq!(reply.reason(), "wrong_token");
    assert_eq!(reply.error_type(), "invalid_request");

    // A rotation applies to the next request.
    let rotated = http_token::rotate_token(s._dir.path()).unwrap();
    assert_eq!(s.get("/v1/sessions").await.status, 401);
    let fresh = format!(
        "GET /v1/sessions HTTP/1.1\r\n{}Authorization: Bearer {rotated}\r\nConnection: close\r\n\r\n",
        s.host()
    );
    assert_eq!(send(s.addr, fresh.as_bytes()).await.status, 200);
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn a_non_loopback_host_or_an_unlisted_origin_is_403() {
    let s = setup_with(HttpLimits::default(), &["http://localhost:5173"]).await;
    for host in [
        "evil.example".to_owned(),
        format!("evil.example:{}", s.addr.port()),
        format!("127.0.0.1:{}", s.addr.port() ^ 1),
    ] {
        let raw = format!(
            "GET /v1/sessions HTTP/1.1\r\nHost: {host}\r\n{}Connection: close\r\n\r\n",
            s.auth()
        );
        let reply = send(s.addr, raw.as_bytes()).await;
        assert_eq!(reply.status, 403, "{host}");
        assert_eq!(reply.reason(), "host_not_allowed");
    }
    // Two `Host` headers, the allowed one first: refused, whichever a proxy or router would
    // read (RFC 9112 §3.2: a request with more than one `Host` is invalid).
    let raw = format!(
        "GET /v1/sessions HTTP/1.1\r\n{}Host: evil.example\r\n{}Connection: close\r\n\r\n",
        s.host(),
        s.auth()
    );
    let reply = send(s.addr, raw.as_bytes()).await;
    assert_eq!(reply.status, 403, "two Host headers");
    assert_eq!(reply.reason(), "host_not_allowed");
    let from = |origin: &str| {
        format!(
            "GET /v1/sessions HTTP/1.1\r\n{}{}Origin: {origin}\r\nConnection: close\r\n\r\n",
            s.host(),
            s.auth()
        )
    };
    let reply = send(s.addr, from("http://evil.example").as_bytes()).await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.reason(), "origin_not_allowed");
    let reply = send(s.addr, from("http://localhost:5173").as_bytes()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("access-control-allow-origin").as_deref(),
        Some("http://localhost:5173")
    );
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn a_body_over_the_cap_is_413() {
    let s = setup_with(
        HttpLimits {
            max_body_bytes: 64,
            ..HttpLimits::default()
        },
        &[],
    )
    .await;
    let big = format!(r#"{{"tag":"{}"}}"#, "x".repeat(100));
    let reply = s.post(&s.call_path("work"), &big).await;
    assert_eq!(reply.status, 413, "{reply:?}");
    assert_eq!(reply.reason(), "body_too_large");
    // Chunked, without a Content-Length: counted as it arrives.
    let chunked = format!(
        "POST {} HTTP/1.1\r\n{}{}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
        s.call_path("work"),
        s.host(),
        s.auth(),
        big.len()
    );
    let reply = send(s.addr, chunked.as_bytes()).await;
    assert_eq!(reply.status, 413, "{reply:?}");
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn malformed_json_is_400_with_its_type() {
    let s = setup().await;
    let reply = s.post(&s.call_path("work"), r#"{"tag": "#).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.error_type(), "invalid_request");
    assert_eq!(reply.reason(), "malformed_json");
    let reply = s.post(&s.call_path("work"), "[1]").await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.reason(), "not_an_object");
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn an_unknown_session_tool_or_route_is_404_with_its_type() {
    let s = setup().await;
    let reply = s
        .post("/v1/sessions/no-such-app/tools/work/call", "{}")
        .await;
    assert_eq!(reply.status, 404, "{reply:?}");
    assert_eq!(reply.error_type(), "unknown_session");
    let reply = s.post(&s.call_path("nope"), "{}").await;
    assert_eq!(reply.status, 404, "{reply:?}");
    assert_eq!(reply.error_type(), "tool_not_found");
    let reply = s.get(&format!("/v1/sessions/{}/tools/nope", s.alias)).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.error_type(), "tool_not_found");
    let reply = s.get("/v2/anything").await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.reason(), "unknown_route");
    let reply = s.get(&s.call_path("work")).await;
    assert_eq!(reply.status, 405);
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn an_sse_call_that_fails_before_it_starts_is_a_plain_error_with_its_status() {
    let s = setup().await;
    let sse = "Accept: text/event-stream\r\n";
    let raw = s.post_bytes("/v1/sessions/no-such-app/tools/work/call", "{}", sse);
    let reply = send(s.addr, raw.as_bytes()).await;
    assert_eq!(reply.status, 404, "{reply:?}");
    assert_eq!(reply.error_type(), "unknown_session");
    assert!(!reply.body.contains("event: error"), "{reply:?}");
    let raw = s.post_bytes(&s.call_path("nope"), "{}", sse);
    let reply = send(s.addr, raw.as_bytes()).await;
    assert_eq!(reply.status, 404, "{reply:?}");
    assert_eq!(reply.error_type(), "tool_not_found");
    assert!(
        reply
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{reply:?}"
    );
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn a_body_that_never_finishes_times_out() {
    let s = setup_with(
        HttpLimits {
            body_timeout: std::time::Duration::from_millis(300),
            ..HttpLimits::default()
        },
        &[],
    )
    .await;
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    // Announces 100 bytes, sends 2, then stalls.
    let head = format!(
        "POST {} HTTP/1.1\r\n{}{}Content-Length: 100\r\nConnection: close\r\n\r\n{{}}",
        s.call_path("work"),
        s.host(),
        s.auth()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let reply = read_all(&mut stream).await;
    assert_eq!(reply.status, 408, "{reply:?}");
    assert_eq!(reply.error_type(), "timeout");
    assert_eq!(reply.reason(), "body_timeout");
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn a_head_that_never_finishes_is_closed() {
    let s = setup_with(
        HttpLimits {
            header_timeout: std::time::Duration::from_millis(300),
            ..HttpLimits::default()
        },
        &[],
    )
    .await;
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    stream
        .write_all(b"GET /v1/sessions HTTP/1.1\r\nHost: 127")
        .await
        .unwrap();
    let mut buf = Vec::new();
    timeout(WAIT, stream.read_to_end(&mut buf))
        .await
        .expect("the connection stayed open")
        .ok();
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn connections_over_the_cap_are_refused_with_503() {
    let s = setup_with(
        HttpLimits {
            max_connections: 2,
            ..HttpLimits::default()
        },
        &[],
    )
    .await;
    // Two connections hold the slots (a request head in progress)...
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(s.addr).await.unwrap();
        stream
            .write_all(b"GET /v1/sessions HTTP/1.1\r\n")
            .await
            .unwrap();
        held.push(stream);
    }
    // ...so a third is answered 503 and closed, until one of them goes.
    let reply = s.get("/v1/sessions").await;
    assert_eq!(reply.status, 503, "{reply:?}");
    assert_eq!(reply.reason(), "too_many_connections");
    drop(held.pop());
    let s_ref = &s;
    timeout(WAIT, async move {
        loop {
            if s_ref.get("/v1/sessions").await.status == 200 {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("a slot never came free");
    s.daemon.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// On and off at runtime
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn reload_turns_the_api_on_and_off() {
    let dir = state_dir();
    let daemon = Daemon::start(DaemonOptions::for_tests(dir.path()))
        .await
        .unwrap();
    let control = memory_client(&daemon);
    assert_eq!(daemon.http_addr(), None);
    assert_eq!(
        control
            .call::<DaemonStatus>(Default::default())
            .await
            .unwrap()
            .http_port,
        None
    );

    write_http_port(dir.path(), Some(0)).unwrap();
    let reload = control
        .call::<DaemonReload>(Default::default())
        .await
        .unwrap();
    assert_eq!(reload.applied, vec!["http".to_owned()]);
    // (Test options override wssPort and advertisedIp, which a reload reports; not `http`.)
    assert!(!reload.restart_required.contains(&"http".to_owned()));
    let addr = daemon.http_addr().expect("on after the reload");
    let status = control
        .call::<DaemonStatus>(Default::default())
        .await
        .unwrap();
    assert_eq!(status.http_port, Some(addr.port()));
    let token = http_token::read_token(dir.path()).unwrap().unwrap();
    let raw = format!(
        "GET /v1/sessions HTTP/1.1\r\nHost: localhost:{}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n",
        addr.port()
    );
    assert_eq!(send(addr, raw.as_bytes()).await.status, 200);

    write_http_port(dir.path(), None).unwrap();
    let reload = control
        .call::<DaemonReload>(Default::default())
        .await
        .unwrap();
    assert_eq!(reload.applied, vec!["http".to_owned()]);
    assert_eq!(daemon.http_addr(), None);
    daemon_support::until(move || std::net::TcpStream::connect(addr).is_err()).await;
    daemon.shutdown().await;
}

#[tokio::test]
async fn events_stream_over_sse() {
    let mut s = setup().await;
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    let head = format!(
        "GET /v1/events?kinds=tool_call_finished HTTP/1.1\r\n{}{}Accept: text/event-stream\r\nConnection: close\r\n\r\n",
        s.host(),
        s.auth()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut seen = String::new();
    read_until(&mut stream, &mut seen, "event: subscribed").await;
    let raw = s.post_bytes(&s.call_path("work"), "{}", "");
    let addr = s.addr;
    let request = tokio::spawn(async move { send(addr, raw.as_bytes()).await });
    s.next_call().await.answer.send(Ok(json!({}))).unwrap();
    assert_eq!(request.await.unwrap().status, 200);
    read_until(&mut stream, &mut seen, "event: tool_call_finished").await;
    read_until(&mut stream, &mut seen, r#""caller":"http""#).await;

    // A bad filter is refused before the stream starts.
    let reply = s.get("/v1/events?kinds=nonsense").await;
    assert_eq!(reply.status, 400, "{reply:?}");
    assert_eq!(reply.error_type(), "invalid_request");
    s.daemon.shutdown().await;
}

impl Setup {
    /// Opens `GET path` as an event stream with `extra` headers; returns once `subscribed` came.
    async fn open_events(&self, path: &str, extra: &str) -> (TcpStream, String) {
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        let head = format!(
            "GET {path} HTTP/1.1\r\n{}{}{extra}Accept: text/event-stream\r\nConnection: close\r\n\r\n",
            self.host(),
            self.auth()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut seen = String::new();
        read_until(&mut stream, &mut seen, "event: subscribed").await;
        assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
        (stream, seen)
    }

    fn emit_app_event(&self, name: &str) -> u64 {
        self.daemon
            .events()
            .emit_app_event(
                &self.session_id,
                Some(&self.alias),
                name.to_owned(),
                json!({}),
                serde_json::Number::from(1),
            )
            .unwrap()
    }
}

#[tokio::test]
async fn event_ids_and_last_event_id_need_a_session_filter() {
    let s = setup().await;
    // Without `session`: no `id:` lines, and a `Last-Event-ID` (a reconnect) is ignored
    // instead of refused.
    let (mut all, mut seen_all) = s
        .open_events("/v1/events?kinds=app_event", "Last-Event-ID: 7\r\n")
        .await;
    // With `session`: `id: <seq>`, and `Last-Event-ID` resumes after that seq.
    let path = format!("/v1/events?kinds=app_event&session={}", s.alias);
    let (mut one, mut seen_one) = s.open_events(&path, "").await;
    let first = s.emit_app_event("first");
    let second = s.emit_app_event("second");
    read_until(&mut all, &mut seen_all, r#""name":"second""#).await;
    assert!(!seen_all.contains("\nid: "), "{seen_all}");
    read_until(&mut one, &mut seen_one, r#""name":"second""#).await;
    assert!(seen_one.contains(&format!("\nid: {first}\n")), "{seen_one}");
    assert!(
        seen_one.contains(&format!("\nid: {second}\n")),
        "{seen_one}"
    );
    let (mut resumed, mut seen) = s
        .open_events(&path, &format!("Last-Event-ID: {first}\r\n"))
        .await;
    read_until(&mut resumed, &mut seen, r#""name":"second""#).await;
    assert!(!seen.contains(r#""name":"first""#), "{seen}");
    s.daemon.shutdown().await;
}
