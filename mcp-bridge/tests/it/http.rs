//! The `/mcp` endpoint (docs/http.md §H7) driven request by request, without a socket: the
//! bridge's `HttpEndpoint` over the fake daemon's in-memory control connections. Sessions,
//! their cap, DELETE, a built-in reaching the daemon through the in-process connector, and
//! `daemon.hello` naming the HTTP client. The HTTP checks in front of it (token, Host) are the
//! daemon's and are tested through the built binary in `e2e/tests/it/mcp_http.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use appduct_daemon::testing::{FakeDaemon, session, tool};
use appduct_mcp::http::{HTTP_CLIENT_NAME, HttpEndpoint, HttpOptions};
use appduct_protocol::control::PolicyDecision;
use http_body_util::BodyExt as _;
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use serde_json::{Value, json};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(10);

/// The peer pid [`send`] gives an `initialize` request, and any other request.
const INITIALIZER_PID: u32 = 4242;
const OTHER_PID: u32 = 777;

fn endpoint(fake: &Arc<FakeDaemon>, max_sessions: usize) -> HttpEndpoint {
    endpoint_recording(fake, max_sessions).0
}

/// Also returns the peer pid of each control connection the endpoint opened.
fn endpoint_recording(
    fake: &Arc<FakeDaemon>,
    max_sessions: usize,
) -> (HttpEndpoint, Arc<std::sync::Mutex<Vec<Option<u32>>>>) {
    let fake = Arc::clone(fake);
    let peers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&peers);
    let endpoint = HttpEndpoint::new(
        Arc::new(move |pid| {
            seen.lock().unwrap().push(pid);
            fake.connect()
        }),
        HttpOptions {
            max_sessions,
            ..HttpOptions::default()
        },
    );
    (endpoint, peers)
}

struct Answer {
    status: StatusCode,
    session: Option<String>,
    /// The JSON-RPC messages of an SSE body, or the JSON body.
    messages: Vec<Value>,
    text: String,
}

async fn send(
    endpoint: &HttpEndpoint,
    method: Method,
    session: Option<&str>,
    body: Option<Value>,
) -> Answer {
    let mut request = Request::builder()
        .method(method)
        .uri("/mcp")
        .header("host", "127.0.0.1:1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(id) = session {
        request = request
            .header("mcp-session-id", id)
            .header("mcp-protocol-version", "2025-11-25");
    }
    let pid = if body.as_ref().is_some_and(|b| b["method"] == "initialize") {
        INITIALIZER_PID
    } else {
        OTHER_PID
    };
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = request.body(Bytes::from(body)).unwrap();
    let response = timeout(WAIT, endpoint.handle(request, Some(pid)))
        .await
        .unwrap();
    let status = response.status();
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = timeout(WAIT, response.into_body().collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let messages = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .chain(std::iter::once(text.as_str()))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .collect();
    Answer {
        status,
        session,
        messages,
        text,
    }
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "http-test", "version": "0"}}})
}

/// Initialize and `notifications/initialized`: the new session's id.
async fn open(endpoint: &HttpEndpoint) -> String {
    let answer = send(endpoint, Method::POST, None, Some(initialize())).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let id = answer.session.expect("Mcp-Session-Id");
    assert_eq!(
        answer.messages[0]["result"]["serverInfo"]["name"], "appduct",
        "{}",
        answer.text
    );
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let answer = send(endpoint, Method::POST, Some(&id), Some(initialized)).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.text);
    id
}

#[tokio::test]
async fn a_session_lists_the_built_ins_and_reaches_the_daemon_in_process() {
    let fake = FakeDaemon::new(&["daemon.hello", "sessions.describe", "tools.list"]);
    fake.add_session(
        session("s-1", "pixel"),
        vec![tool(
            json!({"name": "ping", "description": "Ping."}),
            PolicyDecision::Allow,
        )],
    );
    let (endpoint, peers) = endpoint_recording(&fake, 4);
    let id = open(&endpoint).await;

    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let answer = send(&endpoint, Method::POST, Some(&id), Some(list)).await;
    let names: Vec<&str> = answer.messages[0]["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", answer.text))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names.len(), 10, "{names:?}");

    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "appduct_list_tools", "arguments": {"selector": "pixel"}}});
    let answer = send(&endpoint, Method::POST, Some(&id), Some(call)).await;
    let result = &answer.messages[0]["result"];
    assert_ne!(result["isError"], true, "{}", answer.text);
    assert_eq!(result["structuredContent"]["total"], 1, "{}", answer.text);
    assert_eq!(result["structuredContent"]["tools"][0]["name"], "ping");
    // The session's control connection introduced itself as the HTTP bridge (§H7.3).
    let hello = fake.requests("daemon.hello");
    assert!(
        hello
            .iter()
            .any(|p| p["client"]["name"] == HTTP_CLIENT_NAME),
        "{hello:?}"
    );
    // Every control connection of the session reports the process that initialized it
    // (SECURITY.md §4.19), whichever process sent the later requests.
    let peers = peers.lock().unwrap().clone();
    assert!(!peers.is_empty());
    assert!(
        peers.iter().all(|p| *p == Some(INITIALIZER_PID)),
        "{peers:?}"
    );
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn sessions_are_capped_and_delete_frees_a_slot() {
    let fake = FakeDaemon::new(&["daemon.hello"]);
    let endpoint = endpoint(&fake, 1);
    let first = open(&endpoint).await;
    assert_eq!(endpoint.session_count().await, 1);

    let refused = send(&endpoint, Method::POST, None, Some(initialize())).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.messages[0]["error"]["type"], "connection_error");
    assert_eq!(
        refused.messages[0]["error"]["details"]["reason"],
        "too_many_sessions"
    );

    // Requests of the open session still pass at the cap.
    let ping = json!({"jsonrpc": "2.0", "id": 5, "method": "ping"});
    let answer = send(&endpoint, Method::POST, Some(&first), Some(ping.clone())).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);

    let deleted = send(&endpoint, Method::DELETE, Some(&first), None).await;
    assert_eq!(deleted.status, StatusCode::ACCEPTED, "{}", deleted.text);
    assert_eq!(endpoint.session_count().await, 0);
    let gone = send(&endpoint, Method::POST, Some(&first), Some(ping)).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "{}", gone.text);

    let second = open(&endpoint).await;
    assert_ne!(second, first);
}

#[tokio::test]
async fn requests_without_a_session_or_after_shutdown_are_refused() {
    let fake = FakeDaemon::new(&["daemon.hello"]);
    let endpoint = endpoint(&fake, 4);
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let answer = send(&endpoint, Method::POST, None, Some(list)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.text);

    let id = open(&endpoint).await;
    endpoint.shutdown();
    // The session's worker ends with the server; the count drops to zero.
    let ended = async {
        while endpoint.session_count().await > 0 {
            tokio::task::yield_now().await;
        }
    };
    timeout(WAIT, ended).await.expect("the session did not end");
    let ping = json!({"jsonrpc": "2.0", "id": 5, "method": "ping"});
    let answer = send(&endpoint, Method::POST, Some(&id), Some(ping)).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.text);
}

/// The cap holds in the session manager: an `initialize` whose method name is written with a
/// JSON escape is decoded by rmcp as `initialize` and counts like any other (§H7.4).
#[tokio::test]
async fn an_escaped_initialize_counts_against_the_session_cap() {
    let fake = FakeDaemon::new(&["daemon.hello"]);
    let endpoint = endpoint(&fake, 1);
    let escaped = initialize()
        .to_string()
        .replace("\"initialize\"", "\"\\u0069nitialize\"");
    assert!(escaped.contains("\\u0069nitialize"), "{escaped}");
    let escaped: Value = serde_json::from_str(&escaped).unwrap();
    // Raw bytes, so the escape reaches the endpoint as written.
    let raw = |body: &str| {
        Request::builder()
            .method(Method::POST)
            .uri("/mcp")
            .header("host", "127.0.0.1:1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Bytes::from(body.to_owned()))
            .unwrap()
    };
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"\u0069nitialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"http-test","version":"0"}}}"#;
    let first = timeout(WAIT, endpoint.handle(raw(body), None))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers().contains_key("mcp-session-id"));
    drop(first);
    assert_eq!(endpoint.session_count().await, 1);

    // A second one, escaped or not, is refused with the cap's 503.
    let refused = timeout(WAIT, endpoint.handle(raw(body), None))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    let refused = send(&endpoint, Method::POST, None, Some(escaped)).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        refused.text
    );
    assert_eq!(
        refused.messages[0]["error"]["details"]["reason"],
        "too_many_sessions"
    );
    assert_eq!(endpoint.session_count().await, 1);
}

/// Many `initialize` requests at once on several threads: exactly `cap` sessions are created,
/// the rest get the cap's 503, and the count never goes over the cap (§H7.4).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_initializes_never_exceed_the_session_cap() {
    const CAP: usize = 3;
    const TRIES: usize = 16;
    let fake = FakeDaemon::new(&["daemon.hello"]);
    let endpoint = Arc::new(endpoint(&fake, CAP));
    let start = Arc::new(tokio::sync::Barrier::new(TRIES));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..TRIES {
        let endpoint = Arc::clone(&endpoint);
        let start = Arc::clone(&start);
        tasks.spawn(async move {
            start.wait().await;
            let answer = send(&endpoint, Method::POST, None, Some(initialize())).await;
            let count = endpoint.session_count().await;
            (answer.status, answer.session, count)
        });
    }
    let mut opened = std::collections::HashSet::new();
    let mut refused = 0;
    while let Some(joined) = timeout(WAIT, tasks.join_next()).await.unwrap() {
        let (status, session, count) = joined.unwrap();
        assert!(count <= CAP, "{count} sessions with a cap of {CAP}");
        match status {
            StatusCode::OK => assert!(opened.insert(session.expect("Mcp-Session-Id"))),
            StatusCode::SERVICE_UNAVAILABLE => refused += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(opened.len(), CAP);
    assert_eq!(refused, TRIES - CAP);
    assert_eq!(endpoint.session_count().await, CAP);
}

/// A POST without a session that is not `initialize` (on protocol `2026-07-28` rmcp serves it
/// with a fresh bridge) holds a request slot until its response body is dropped (§H7.4).
#[tokio::test]
async fn session_less_requests_in_flight_are_capped() {
    let fake = FakeDaemon::new(&["daemon.hello"]);
    let endpoint = endpoint(&fake, 1);
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let request = || {
        Request::builder()
            .method(Method::POST)
            .uri("/mcp")
            .header("host", "127.0.0.1:1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Bytes::from(list.clone()))
            .unwrap()
    };
    let held = timeout(WAIT, endpoint.handle(request(), None))
        .await
        .unwrap();
    assert_ne!(held.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(endpoint.requests_in_flight(), 1);

    let refused = timeout(WAIT, endpoint.handle(request(), None))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = timeout(WAIT, refused.into_body().collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"]["details"]["reason"], "too_many_requests");

    // Sessions are a separate cap: an initialize still opens one.
    let id = open(&endpoint).await;
    assert!(!id.is_empty());

    drop(held);
    assert_eq!(endpoint.requests_in_flight(), 0);
    let again = timeout(WAIT, endpoint.handle(request(), None))
        .await
        .unwrap();
    assert_ne!(again.status(), StatusCode::SERVICE_UNAVAILABLE);
}
