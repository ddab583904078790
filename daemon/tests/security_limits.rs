//! Bounds on what a control client can make the daemon hold (SECURITY.md §4.4, project
//! decisions): pending links per daemon, requests in flight per control connection, and the
//! size of the `-32601` reply to a hostile method name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod control_support;
mod daemon_support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use appduct_daemon::client::ControlClient;
use appduct_daemon::control_server::{
    BoxFuture, Connection, ControlHandler, Reply, ServerOptions, serve_connection,
};
use appduct_daemon::daemon::{Daemon, DaemonOptions};
use appduct_daemon::seams::ManualClock;
use appduct_protocol::control::{
    ControlRequest, DaemonStatus, LinkCreate, LinkCreateParams, NoParams, SelectorParams,
    SessionsRevoke, Transport,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::RequestId;
use appduct_protocol::limits::{MAX_CONTROL_IN_FLIGHT, MAX_PENDING_LINKS, MAX_QUOTED_METHOD_LEN};
use control_support::{Raw, TestHandler, request, serve};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::{Semaphore, watch};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Pending links
// ---------------------------------------------------------------------------------------------

fn link_params(ttl_seconds: u32, transport: Transport) -> LinkCreateParams {
    LinkCreateParams {
        ttl_seconds: Some(ttl_seconds),
        transport: Some(transport),
        ..LinkCreateParams::default()
    }
}

async fn pending(client: &ControlClient) -> u64 {
    client
        .call::<DaemonStatus>(NoParams {})
        .await
        .unwrap()
        .pending_links
}

/// The exact refusal of a `link.create` over the cap.
fn assert_refused(response: &Value) {
    assert_eq!(response["error"]["code"], -32000, "{response}");
    assert_eq!(response["error"]["data"]["type"], "invalid_request");
    assert_eq!(
        response["error"]["data"]["details"],
        json!({"reason": "too_many_pending_links", "limit": MAX_PENDING_LINKS})
    );
    let message = response["error"]["message"].as_str().unwrap();
    assert!(message.contains("1024"), "{message}");
    assert!(response.get("result").is_none());
}

#[tokio::test]
async fn link_create_past_1024_pending_links_is_refused_until_one_is_revoked_claimed_or_expires() {
    const NOW_MS: u64 = 1_764_493_923_000;
    let dir = daemon_support::state_dir();
    let clock = ManualClock::new(NOW_MS);
    let daemon = Daemon::start(DaemonOptions::for_tests(dir.path()).clock(clock.clone()))
        .await
        .unwrap();
    let client = daemon_support::memory_client(&daemon);
    let mut raw = daemon_support::RawControl::new(&daemon);

    // Both transports share the one cap.
    let mut links = Vec::new();
    for n in 0..MAX_PENDING_LINKS {
        let transport = if n % 2 == 0 {
            Transport::Native
        } else {
            Transport::Web
        };
        links.push(
            client
                .call::<LinkCreate>(link_params(60, transport))
                .await
                .unwrap(),
        );
    }
    assert_eq!(pending(&client).await, 1024);
    assert_refused(&raw.request(1, "link.create", json!({})).await);
    assert_refused(
        &raw.request(2, "link.create", json!({"transport": "web"}))
            .await,
    );
    let typed = client
        .call::<LinkCreate>(LinkCreateParams::default())
        .await
        .unwrap_err();
    assert_eq!(typed.error_type(), ErrorType::InvalidRequest);
    assert_eq!(
        pending(&client).await,
        1024,
        "a refusal mints nothing and leaves the others claimable"
    );

    // A revoked link frees its slot.
    client
        .call::<SessionsRevoke>(SelectorParams {
            selector: Some(links[0].session_id.clone()),
        })
        .await
        .unwrap();
    let replacement = raw
        .request(3, "link.create", json!({"ttlSeconds": 300}))
        .await;
    assert!(
        replacement["result"]["sessionId"].is_string(),
        "{replacement}"
    );
    assert_refused(&raw.request(4, "link.create", json!({})).await);

    // A claimed link frees its slot (the session it became is not a pending link).
    let app = daemon_support::claim_link(&daemon, &links[2], "Pixel 8").await;
    assert_eq!(pending(&client).await, 1023);
    let replacement = raw
        .request(5, "link.create", json!({"ttlSeconds": 300}))
        .await;
    assert!(
        replacement["result"]["sessionId"].is_string(),
        "{replacement}"
    );
    assert_refused(&raw.request(6, "link.create", json!({})).await);

    // Links past their `expiresAt` stop counting at once, before their timers fire.
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        pending(&client).await,
        2,
        "only the two 300 s links are left"
    );
    let fresh = raw.request(7, "link.create", json!({})).await;
    assert!(fresh["result"]["sessionId"].is_string(), "{fresh}");
    assert_eq!(pending(&client).await, 3);

    let closed = app.answer_close();
    daemon.shutdown().await;
    timeout(WAIT, closed).await.unwrap().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Requests in flight per control connection
// ---------------------------------------------------------------------------------------------

/// `sessions.list` waits for a permit of `gate`; `daemon.status` answers at once. Counts what
/// started and the most requests it held at once.
struct GatedHandler {
    gate: Arc<Semaphore>,
    started: watch::Sender<usize>,
    running: AtomicUsize,
    most_running: AtomicUsize,
}

impl GatedHandler {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            gate: Arc::new(Semaphore::new(0)),
            started: watch::channel(0).0,
            running: AtomicUsize::new(0),
            most_running: AtomicUsize::new(0),
        })
    }

    async fn until_started(&self, n: usize) {
        let mut rx = self.started.subscribe();
        timeout(WAIT, rx.wait_for(|started| *started >= n))
            .await
            .expect("the requests never started")
            .unwrap();
    }
}

struct Gated(Arc<GatedHandler>);

impl ControlHandler for Gated {
    fn handle(
        &self,
        _conn: &Connection,
        _id: RequestId,
        request: ControlRequest,
    ) -> BoxFuture<'static, Reply> {
        let h = self.0.clone();
        match request {
            ControlRequest::SessionsList(_) => {
                let running = h.running.fetch_add(1, Ordering::SeqCst) + 1;
                h.most_running.fetch_max(running, Ordering::SeqCst);
                h.started.send_modify(|n| *n += 1);
                Box::pin(async move {
                    let permit = h.gate.acquire().await.unwrap();
                    permit.forget();
                    h.running.fetch_sub(1, Ordering::SeqCst);
                    Reply::Ok(json!([]))
                })
            }
            _ => Box::pin(async { Reply::Ok(json!({"probe": true})) }),
        }
    }
}

fn lines(requests: impl IntoIterator<Item = Value>) -> Vec<u8> {
    let mut bytes = Vec::new();
    for r in requests {
        bytes.extend(serde_json::to_vec(&r).unwrap());
        bytes.push(b'\n');
    }
    bytes
}

/// Reads `n` responses and returns their ids, in arrival order.
async fn response_ids(raw: &mut Raw, n: usize) -> Vec<Value> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let response = timeout(WAIT, raw.recv())
            .await
            .expect("a response is missing")
            .expect("the connection closed");
        assert!(response.get("error").is_none(), "{response}");
        ids.push(response["id"].clone());
    }
    ids
}

#[tokio::test]
async fn pipelining_past_the_in_flight_cap_waits_in_the_socket_and_every_request_gets_one_response()
{
    let h = GatedHandler::new();
    // Small enough that the requests past the cap cannot all sit in the pipe.
    let (client, server) = tokio::io::duplex(16 * 1024);
    let served = tokio::spawn(serve_connection(
        server,
        Arc::new(Gated(h.clone())),
        ServerOptions::default(),
    ));
    let mut raw = Raw::new(client);

    let total = 4 * MAX_CONTROL_IN_FLIGHT;
    let bytes = lines((0..total).map(|id| request(id, "sessions.list", json!({}))));
    let mut writer = raw.writer;
    let written = tokio::spawn(async move {
        writer.write_all(&bytes).await.unwrap();
        writer
    });

    h.until_started(MAX_CONTROL_IN_FLIGHT).await;
    assert_eq!(*h.started.borrow(), MAX_CONTROL_IN_FLIGHT);
    assert!(
        !written.is_finished(),
        "the daemon must stop reading: the rest of the requests wait in the socket"
    );

    h.gate.add_permits(total);
    raw.writer = timeout(WAIT, written).await.unwrap().unwrap();
    let ids = response_ids(&mut raw, total).await;
    let unique: HashSet<u64> = ids.iter().map(|id| id.as_u64().unwrap()).collect();
    assert_eq!(unique.len(), total, "every request answered exactly once");
    assert_eq!(unique, (0..total as u64).collect());
    assert_eq!(
        h.most_running.load(Ordering::SeqCst),
        MAX_CONTROL_IN_FLIGHT,
        "the cap is reached and never passed"
    );

    // Nothing more: the connection is idle and still serves.
    raw.send_line(&request("after", "daemon.status", json!({})))
        .await;
    assert_eq!(response_ids(&mut raw, 1).await, vec![json!("after")]);
    drop(raw);
    timeout(WAIT, served).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_request_past_the_in_flight_cap_runs_only_after_one_in_flight_is_answered() {
    let h = GatedHandler::new();
    let (client, server) = tokio::io::duplex(1 << 20);
    tokio::spawn(serve_connection(
        server,
        Arc::new(Gated(h.clone())),
        ServerOptions::default(),
    ));
    let mut raw = Raw::new(client);

    // The cap of held requests, then one that would answer at once.
    let held = (0..MAX_CONTROL_IN_FLIGHT).map(|id| request(id, "sessions.list", json!({})));
    let probe = request("probe", "daemon.status", json!({}));
    raw.send(&lines(held.chain([probe]))).await;
    h.until_started(MAX_CONTROL_IN_FLIGHT).await;

    h.gate.add_permits(1);
    let first_two = response_ids(&mut raw, 2).await;
    assert!(
        first_two[0].is_u64(),
        "a held request is answered first, then the probe gets its slot: {first_two:?}"
    );
    assert_eq!(first_two[1], json!("probe"));

    h.gate.add_permits(MAX_CONTROL_IN_FLIGHT);
    let rest = response_ids(&mut raw, MAX_CONTROL_IN_FLIGHT - 1).await;
    let all: HashSet<Value> = first_two.into_iter().chain(rest).collect();
    assert_eq!(all.len(), MAX_CONTROL_IN_FLIGHT + 1);
}

// ---------------------------------------------------------------------------------------------
// The -32601 reply to a hostile method name
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_unknown_method_reply_quotes_at_most_64_units_of_the_name() {
    let h = TestHandler::new(Some("0.1.0"));
    let (stream, _task) = serve(h, ServerOptions::default(), 1 << 20);
    let mut raw = Raw::new(stream);

    // Exactly 64 units: quoted whole.
    let at_cap = "m".repeat(MAX_QUOTED_METHOD_LEN);
    raw.send_line(&request(1, &at_cap, json!({}))).await;
    let reply = raw.recv().await.unwrap();
    assert_eq!(reply["error"]["code"], -32601);
    assert_eq!(reply["error"]["data"]["type"], "invalid_request");
    assert_eq!(reply["error"]["data"]["details"]["method"], at_cap);
    assert_eq!(
        reply["error"]["message"],
        format!("Unknown method \"{at_cap}\"")
    );

    // 65 units: cut to 64 and marked.
    let over = format!("{at_cap}x");
    raw.send_line(&request(2, &over, json!({}))).await;
    let reply = raw.recv().await.unwrap();
    assert_eq!(reply["error"]["code"], -32601);
    assert_eq!(
        reply["error"]["data"]["details"]["method"],
        format!("{at_cap}…")
    );

    // A hostile name that escapes to many bytes per character: the reply stays small.
    let hostile: String = "\u{1}\u{301}\"\\\u{200b}".repeat(40_000);
    let line = serde_json::to_vec(&request(3, &hostile, json!({}))).unwrap();
    assert!(line.len() > 500_000);
    raw.send_line(&request(3, &hostile, json!({}))).await;
    let mut reply_line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut raw.reader, &mut reply_line)
        .await
        .unwrap();
    assert!(
        reply_line.len() < 2_048,
        "a {}-byte line got a {}-byte reply",
        line.len(),
        reply_line.len()
    );
    let reply: Value = serde_json::from_str(&reply_line).unwrap();
    assert_eq!(reply["id"], 3);
    assert_eq!(reply["error"]["code"], -32601);
    let quoted = reply["error"]["data"]["details"]["method"]
        .as_str()
        .unwrap();
    assert!(quoted.ends_with('…'));
    assert!(hostile.starts_with(quoted.trim_end_matches('…')));
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        !message.chars().any(|c| c.is_control()),
        "control characters are escaped in the message: {message:?}"
    );

    // The connection still serves real methods.
    raw.send_line(&request(4, "sessions.list", json!({}))).await;
    assert_eq!(raw.recv().await.unwrap()["result"], json!([]));
}
