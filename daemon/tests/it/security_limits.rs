//! Bounds on what a control client can make the daemon hold (SECURITY.md §4.4, project
//! decisions): pending links per daemon, `tools.call`s in flight per control connection, and
//! the size of the `-32601` reply to a hostile method name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::calls_support;
use crate::control_support;
use crate::daemon_support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use appduct_client::client::ControlClient;
use appduct_daemon::clock::ManualClock;
use appduct_daemon::control_server::{Reply, ServerOptions, serve_connection};
use appduct_daemon::daemon::{Daemon, DaemonOptions};
use appduct_daemon::testing::FakeDaemon;
use appduct_protocol::control::{
    DaemonStatus, EventKind, LinkCreate, LinkCreateParams, NoParams, SelectorParams,
    SessionsRevoke, Transport,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::limits::{MAX_CALLS_IN_FLIGHT, MAX_PENDING_LINKS, MAX_QUOTED_METHOD_LEN};
use calls_support::{Device, Fixture, Wire, audit_lines, data, next_of};
use control_support::{Raw, TestHandler, request, serve};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Pending links
// ---------------------------------------------------------------------------------------------

fn link_params(ttl_seconds: u32, transport: Transport) -> LinkCreateParams {
    LinkCreateParams::default()
        .with_ttl_seconds(Some(ttl_seconds))
        .with_transport(Some(transport))
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
        .call::<SessionsRevoke>(
            SelectorParams::default().with_selector(Some(links[0].session_id.clone())),
        )
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

    // Links past their `expiresAt` stop counting at once, before their timers fire; the next
    // `link.create` turns them into tombstones and reports each `link_expired` once.
    let mut events = daemon.events().subscribe_all();
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        pending(&client).await,
        2,
        "only the two 300 s links are left"
    );
    let fresh = raw.request(7, "link.create", json!({})).await;
    assert!(fresh["result"]["sessionId"].is_string(), "{fresh}");
    assert_eq!(pending(&client).await, 3);
    let mut expired = HashSet::new();
    while let Ok(e) = events.try_recv() {
        if e.kind() == EventKind::LinkExpired {
            assert!(expired.insert(e.session_id.clone()), "{e:?}");
        }
    }
    assert_eq!(expired.len(), MAX_PENDING_LINKS - 2);

    let closed = app.answer_close();
    daemon.shutdown().await;
    timeout(WAIT, closed).await.unwrap().unwrap();
}

// ---------------------------------------------------------------------------------------------
// tools.call requests in flight per control connection
// ---------------------------------------------------------------------------------------------

/// Holds `tools.call` until a permit of `calls` and `sessions.list` until a permit of `lists`;
/// everything else answers at once. Counts the requests it started and sees connections close.
struct GatedHandler {
    calls: Semaphore,
    lists: Semaphore,
    started_calls: watch::Sender<usize>,
    started_lists: watch::Sender<usize>,
    closed: watch::Sender<bool>,
}

impl GatedHandler {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            calls: Semaphore::new(0),
            lists: Semaphore::new(0),
            started_calls: watch::channel(0).0,
            started_lists: watch::channel(0).0,
            closed: watch::channel(false).0,
        })
    }
}

async fn until_at_least(counter: &watch::Sender<usize>, n: usize) {
    let mut rx = counter.subscribe();
    timeout(WAIT, rx.wait_for(|started| *started >= n))
        .await
        .expect("the requests never started")
        .unwrap();
}

/// The fake daemon answering for `h`.
fn gated(h: &Arc<GatedHandler>) -> Arc<FakeDaemon> {
    let fake = FakeDaemon::new(&[]);
    let g = h.clone();
    fake.script("tools.call", move |_, _, _| {
        let h = g.clone();
        h.started_calls.send_modify(|n| *n += 1);
        Box::pin(async move {
            h.calls.acquire().await.unwrap().forget();
            Reply::Ok(json!({"result": null}))
        })
    });
    let g = h.clone();
    fake.script("sessions.list", move |_, _, _| {
        let h = g.clone();
        h.started_lists.send_modify(|n| *n += 1);
        Box::pin(async move {
            h.lists.acquire().await.unwrap().forget();
            Reply::Ok(json!([]))
        })
    });
    fake.script_other(|_, _, request| {
        let method = request.method();
        Box::pin(async move { Reply::Ok(json!({"answered": method})) })
    });
    let g = h.clone();
    fake.on_close(move |_| {
        g.closed.send_replace(true);
    });
    fake
}

fn lines(requests: impl IntoIterator<Item = Value>) -> Vec<u8> {
    let mut bytes = Vec::new();
    for r in requests {
        bytes.extend(serde_json::to_vec(&r).unwrap());
        bytes.push(b'\n');
    }
    bytes
}

fn call(id: impl Into<Value>) -> Value {
    request(id, "tools.call", json!({"name": "slow_task"}))
}

/// The exact refusal of a `tools.call` past the per-connection cap.
fn assert_too_many_calls(response: &Value, id: &str) {
    assert_eq!(response["id"], id, "{response}");
    assert_eq!(response["error"]["code"], -32000, "{response}");
    assert_eq!(response["error"]["data"]["type"], "invalid_request");
    assert_eq!(
        response["error"]["data"]["details"],
        json!({"reason": "too_many_calls_in_flight", "limit": MAX_CALLS_IN_FLIGHT})
    );
    let message = response["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("1024") && message.contains("tools.cancel"),
        "the message says what to do: {message}"
    );
    assert!(response.get("result").is_none());
}

async fn next_response(raw: &mut Raw) -> Value {
    timeout(WAIT, raw.recv())
        .await
        .expect("a response is missing")
        .expect("the connection closed")
}

/// A control connection served by the gated handler with [`MAX_CALLS_IN_FLIGHT`] calls held.
async fn connection_holding_the_most_calls() -> (Arc<GatedHandler>, Raw, tokio::task::JoinHandle<()>)
{
    let h = GatedHandler::new();
    let (client, server) = tokio::io::duplex(64 * 1024);
    let served = tokio::spawn(serve_connection(
        server,
        gated(&h).handler(),
        ServerOptions::default(),
    ));
    let mut raw = Raw::new(client);
    raw.send(&lines((0..MAX_CALLS_IN_FLIGHT).map(call))).await;
    until_at_least(&h.started_calls, MAX_CALLS_IN_FLIGHT).await;
    (h, raw, served)
}

#[tokio::test]
async fn the_1025th_tools_call_is_refused_at_once_and_other_requests_still_run() {
    let (h, mut raw, served) = connection_holding_the_most_calls().await;

    // The 1,025th call is answered at once and never reaches the handler.
    raw.send_line(&call("over")).await;
    assert_too_many_calls(&next_response(&mut raw).await, "over");
    assert_eq!(*h.started_calls.borrow(), MAX_CALLS_IN_FLIGHT);

    // tools.cancel and daemon.status on the same connection are dispatched and answered at once.
    raw.send_line(&request("cancel", "tools.cancel", json!({"callId": "c1"})))
        .await;
    let cancel = next_response(&mut raw).await;
    assert_eq!(cancel["id"], "cancel");
    assert_eq!(cancel["result"], json!({"answered": "tools.cancel"}));
    raw.send_line(&request("status", "daemon.status", json!({})))
        .await;
    let status = next_response(&mut raw).await;
    assert_eq!(status["id"], "status");
    assert_eq!(status["result"], json!({"answered": "daemon.status"}));

    // Only tools.call is counted: 2,000 more held requests of another method all run.
    raw.send(&lines((0..2_000).map(|n| {
        request(format!("list{n}"), "sessions.list", json!({}))
    })))
    .await;
    until_at_least(&h.started_lists, 2_000).await;

    // One call answered frees one slot: the next call runs, the one after is refused again.
    h.calls.add_permits(1);
    let answered = next_response(&mut raw).await;
    assert!(answered["id"].is_u64(), "{answered}");
    assert_eq!(answered["result"], json!({"result": null}));
    raw.send_line(&call("again")).await;
    until_at_least(&h.started_calls, MAX_CALLS_IN_FLIGHT + 1).await;
    raw.send_line(&call("over2")).await;
    assert_too_many_calls(&next_response(&mut raw).await, "over2");

    // Every held request is answered exactly once.
    h.calls.add_permits(MAX_CALLS_IN_FLIGHT);
    h.lists.add_permits(2_000);
    let mut ids = HashSet::new();
    for _ in 0..(MAX_CALLS_IN_FLIGHT + 2_000) {
        let response = next_response(&mut raw).await;
        assert!(response.get("error").is_none(), "{response}");
        assert!(ids.insert(response["id"].to_string()), "{response}");
    }
    assert!(ids.contains("\"again\""));
    drop(raw);
    timeout(WAIT, served).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_hang_up_with_1024_calls_in_flight_is_seen_at_once() {
    let (h, raw, served) = connection_holding_the_most_calls().await;

    // The client hangs up with every call still held: the connection closes (its close hooks,
    // which cancel the calls in the daemon, run) without waiting for any of them.
    drop(raw);
    timeout(WAIT, served)
        .await
        .expect("EOF was not seen while the calls were held")
        .unwrap();
    assert!(*h.closed.borrow());
}

/// What [`answering_device`] saw.
struct Seen {
    device: Device,
    /// Wire ids of the `tool_call` frames.
    calls: Vec<String>,
    /// `(wire id, reason)` of the `tool_cancel` frames.
    cancels: Vec<(String, String)>,
}

/// A device that reads every frame: it records each `tool_call`, and answers each
/// `tool_cancel` with `tool_cancelled`, until it has seen `calls` cancels.
fn answering_device(mut device: Device, calls: usize) -> tokio::task::JoinHandle<Seen> {
    tokio::spawn(async move {
        let mut sent = Vec::new();
        let mut cancels = Vec::new();
        while cancels.len() < calls {
            let frame = device.frame().await;
            match frame["type"].as_str() {
                Some("tool_call") => sent.push(frame["id"].as_str().unwrap().to_owned()),
                Some("tool_cancel") => {
                    let wire = frame["id"].as_str().unwrap().to_owned();
                    let reason = frame["reason"].as_str().unwrap().to_owned();
                    device
                        .error(
                            &wire,
                            json!({"type": "tool_cancelled", "message": "stopped"}),
                        )
                        .await;
                    cancels.push((wire, reason));
                }
                _ => panic!("unexpected frame {frame}"),
            }
        }
        Seen {
            device,
            calls: sent,
            cancels,
        }
    })
}

#[tokio::test]
async fn a_client_holding_1024_calls_that_hangs_up_has_every_call_cancelled_with_connection_closed()
{
    let Fixture {
        dir: _dir,
        daemon,
        mut wire,
        device,
        mut events,
    } = Fixture::new().await;
    let device = answering_device(device, MAX_CALLS_IN_FLIGHT);
    let mut issuer = Wire::new(&daemon);
    for n in 0..MAX_CALLS_IN_FLIGHT {
        issuer
            .send(
                n as i64,
                "tools.call",
                json!({"name": "slow_task", "callId": format!("c{n}")}),
            )
            .await;
    }
    for _ in 0..MAX_CALLS_IN_FLIGHT {
        next_of(&mut events, EventKind::ToolCallStarted).await;
    }

    // On the same connection: one more call is refused, nothing is sent for it; a status and a
    // cancel are answered while the 1,024 calls wait on the device.
    let over = issuer
        .request(
            5_000,
            "tools.call",
            json!({"name": "slow_task", "callId": "over"}),
        )
        .await;
    assert_eq!(over["error"]["data"]["type"], "invalid_request", "{over}");
    assert_eq!(
        over["error"]["data"]["details"],
        json!({"reason": "too_many_calls_in_flight", "limit": 1024})
    );
    let status = issuer.request(5_001, "daemon.status", json!({})).await;
    assert_eq!(status["result"]["pendingCalls"], 1024);
    let cancel = issuer
        .request(5_002, "tools.cancel", json!({"callId": "c0"}))
        .await;
    assert_eq!(cancel["result"], json!({"cancelled": true}));
    let settled = issuer.response(0).await;
    assert_eq!(settled["error"]["data"]["type"], "tool_cancelled");

    // The client hangs up holding the other 1,023: each gets its tool_cancel at once.
    issuer.close();
    let Seen {
        device,
        calls: sent,
        cancels,
    } = timeout(WAIT, device).await.unwrap().unwrap();
    assert_eq!(
        sent.len(),
        MAX_CALLS_IN_FLIGHT,
        "nothing sent for the refused call"
    );
    let closed: HashSet<&str> = cancels
        .iter()
        .filter(|(_, reason)| reason == "connection_closed")
        .map(|(wire, _)| wire.as_str())
        .collect();
    assert_eq!(closed.len(), MAX_CALLS_IN_FLIGHT - 1);
    assert_eq!(
        cancels
            .iter()
            .filter(|(_, reason)| reason == "client_cancelled")
            .count(),
        1
    );
    let mut finished = HashSet::new();
    for _ in 0..MAX_CALLS_IN_FLIGHT {
        let e = next_of(&mut events, EventKind::ToolCallFinished).await;
        assert_eq!(data(&e)["outcome"], "cancelled", "{:?}", data(&e));
        finished.insert(data(&e)["callId"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        finished,
        (0..MAX_CALLS_IN_FLIGHT).map(|n| format!("c{n}")).collect()
    );
    let hello = wire.request(1, "daemon.hello", json!({})).await;
    assert_eq!(hello["result"]["pendingCalls"], 0);
    let audit = audit_lines(&daemon).await;
    assert_eq!(audit.len(), MAX_CALLS_IN_FLIGHT);
    assert!(audit.iter().all(|r| r["errorType"] == "tool_cancelled"));

    let closed = device.answer_close();
    daemon.shutdown().await;
    closed.await.unwrap();
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
