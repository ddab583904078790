//! Pre-claim budgets under a connection flood (issue #20 defect 2; SECURITY.md "Pre-claim
//! budget"): each listener has its own budget, a full budget evicts the oldest pending
//! connection instead of refusing the newcomer, a stranger address is capped at accept, and a
//! claim or resume goes through while a flood holds every slot. Real sockets on 127.0.0.1; tests
//! that need 127.0.0.1 to count as a stranger say so in their `PreclaimPolicy`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;
use crate::tls_support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use appduct_daemon::daemon::{Daemon, DaemonHandle, DaemonOptions};
use appduct_daemon::preclaim::PreclaimPolicy;
use appduct_protocol::control::{
    EventKind, LinkCreate, LinkCreateParams, LinkCreateResult, Transport,
};
use appduct_protocol::limits;
use daemon_support::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::timeout;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

/// More idle connections than one listener's budget.
const FLOOD: usize = limits::MAX_PRECLAIM_CONNECTIONS + 72;

async fn start_with(dir: &std::path::Path, policy: PreclaimPolicy) -> DaemonHandle {
    Daemon::start(DaemonOptions::for_tests(dir).preclaim(policy))
        .await
        .unwrap()
}

async fn create_link(daemon: &DaemonHandle, transport: Transport) -> LinkCreateResult {
    memory_client(daemon)
        .call::<LinkCreate>(LinkCreateParams::default().with_transport(Some(transport)))
        .await
        .unwrap()
}

/// Idle TCP connections that never send a byte, each watched until the daemon closes it.
struct Flood {
    /// Indices (in connect order) of the connections the daemon closed, in the order seen.
    closed: mpsc::UnboundedReceiver<usize>,
    _watchers: JoinSet<()>,
}

impl Flood {
    async fn open(addr: SocketAddr, count: usize) -> Self {
        let (tx, closed) = mpsc::unbounded_channel();
        let mut watchers = JoinSet::new();
        for index in 0..count {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let tx = tx.clone();
            watchers.spawn(async move {
                let mut byte = [0u8; 1];
                // EOF or reset: the daemon let go of this connection.
                let _ = stream.read(&mut byte).await;
                let _ = tx.send(index);
            });
        }
        Self {
            closed,
            _watchers: watchers,
        }
    }

    /// Waits until `count` connections were closed by the daemon; their indices, sorted.
    async fn closes(&mut self, count: usize) -> Vec<usize> {
        let mut seen = Vec::new();
        timeout(WAIT, async {
            while seen.len() < count {
                seen.push(self.closed.recv().await.unwrap());
            }
        })
        .await
        .unwrap_or_else(|_| panic!("only {} of {count} closes seen", seen.len()));
        seen.sort_unstable();
        seen
    }
}

async fn next_json<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>) -> Value {
    loop {
        match timeout(WAIT, ws.next()).await.unwrap() {
            Some(Ok(Message::Text(text))) => return serde_json::from_str(text.as_str()).unwrap(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected a text message, got {other:?}"),
        }
    }
}

type Wss = WebSocketStream<tokio_rustls::client::TlsStream<TcpStream>>;

/// The wss port on 127.0.0.1 (the bound address is the wildcard), so every socket of a test
/// comes from the same source address.
fn wss_v4(daemon: &DaemonHandle) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, daemon.wss_addr().port()))
}

async fn open_wss(daemon: &DaemonHandle) -> std::io::Result<Wss> {
    let addr = wss_v4(daemon);
    let tls = tls_support::connect(addr, "127.0.0.1", daemon.pin()).await?;
    let (ws, _) = timeout(
        WAIT,
        tokio_tungstenite::client_async("wss://127.0.0.1/", tls),
    )
    .await
    .unwrap()
    .map_err(std::io::Error::other)?;
    Ok(ws)
}

async fn send_json<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>, frame: Value) {
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .unwrap();
}

/// Claims a native link over a real wss socket; the socket and the ack.
async fn native_claim(daemon: &DaemonHandle) -> (Wss, Value) {
    let link = create_link(daemon, Transport::Native).await;
    let mut ws = open_wss(daemon).await.unwrap();
    send_json(
        &mut ws,
        claim_frame(&link.session_id, &claim_token(&link), "Pixel 8"),
    )
    .await;
    let ack = next_json(&mut ws).await;
    assert_eq!(ack["type"], "session_ack", "{ack}");
    (ws, ack)
}

fn resume_frame(ack: &Value) -> Value {
    json!({"type": "session_resume", "protocol_version": 2,
           "session_id": ack["session_id"], "resume_token": ack["resume_token"]})
}

/// Claims a native session, then drops its socket: a suspended session waiting for a resume.
async fn suspended_session(daemon: &DaemonHandle) -> Value {
    let mut bus = daemon.events().subscribe_all();
    let (mut ws, ack) = native_claim(daemon).await;
    ws.close(None).await.unwrap();
    drop(ws);
    event_of(&mut bus, EventKind::SessionSuspended).await;
    ack
}

/// Resumes over a new wss socket; the daemon's answer.
async fn resume(daemon: &DaemonHandle, ack: &Value) -> std::io::Result<Value> {
    let mut ws = open_wss(daemon).await?;
    send_json(&mut ws, resume_frame(ack)).await;
    Ok(next_json(&mut ws).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wss_flood_does_not_hold_back_a_web_claim_on_the_loopback_listener() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut flood = Flood::open(wss_v4(&daemon), FLOOD).await;
    // Every flood connection has been accepted once the excess over the budget was let go.
    flood.closes(FLOOD - limits::MAX_PRECLAIM_CONNECTIONS).await;

    let link = create_link(&daemon, Transport::Web).await;
    let tcp = TcpStream::connect(daemon.web_addr()).await.unwrap();
    let (mut page, response) = timeout(
        WAIT,
        tokio_tungstenite::client_async(format!("ws://{}/", daemon.web_addr()), tcp),
    )
    .await
    .unwrap()
    .expect("the web listener refused the upgrade during a wss flood");
    assert_eq!(response.status(), 101);
    send_json(
        &mut page,
        claim_frame(&link.session_id, &claim_token(&link), "Web"),
    )
    .await;
    let ack = next_json(&mut page).await;
    assert_eq!(ack["type"], "session_ack", "{ack}");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wss_flood_does_not_hold_back_the_resume_of_an_existing_session() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let ack = suspended_session(&daemon).await;
    let mut flood = Flood::open(wss_v4(&daemon), FLOOD).await;
    flood.closes(FLOOD - limits::MAX_PRECLAIM_CONNECTIONS).await;

    // The budget is full of idle connections: the resume evicts the oldest of them.
    let resumed = resume(&daemon, &ack)
        .await
        .expect("the resume was refused during a flood");
    assert_eq!(resumed["type"], "session_ack", "{resumed}");
    assert_eq!(resumed["session_id"], ack["session_id"]);
    let evicted = flood.closes(1).await;
    assert_eq!(evicted, vec![FLOOD - limits::MAX_PRECLAIM_CONNECTIONS]);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_many_stranger_addresses_does_not_hold_back_a_resume() {
    // 127.0.0.1 stands for LAN strangers, and without a per-source cap for a flood from as many
    // addresses as it likes: only stranger eviction lets the resume (a stranger too) through.
    let dir = state_dir();
    let policy = PreclaimPolicy::wss()
        .loopback_is_local(false)
        .per_source_cap(usize::MAX);
    let daemon = start_with(dir.path(), policy).await;
    let ack = suspended_session(&daemon).await;
    let stranger_room = limits::MAX_PRECLAIM_CONNECTIONS - limits::PRECLAIM_LOOPBACK_RESERVE;
    let mut flood = Flood::open(wss_v4(&daemon), FLOOD).await;
    let evicted = flood.closes(FLOOD - stranger_room).await;
    // The oldest went first: the newest `stranger_room` connections hold the slots.
    assert_eq!(evicted, (0..FLOOD - stranger_room).collect::<Vec<_>>());

    let resumed = resume(&daemon, &ack)
        .await
        .expect("the resume was refused during a flood");
    assert_eq!(resumed["type"], "session_ack", "{resumed}");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_source_cap_closes_the_excess_at_accept_before_tls() {
    let dir = state_dir();
    let cap = 4;
    let policy = PreclaimPolicy::wss()
        .loopback_is_local(false)
        .per_source_cap(cap);
    let daemon = start_with(dir.path(), policy).await;
    let (mut healthy, _) = native_claim(&daemon).await;

    let count = 10;
    let mut flood = Flood::open(wss_v4(&daemon), count).await;
    // The newest six are closed at once, without a byte; the first four keep their slots.
    assert_eq!(
        flood.closes(count - cap).await,
        (cap..count).collect::<Vec<_>>()
    );
    let started = Instant::now();
    let refused = open_wss(&daemon).await;
    assert!(
        refused.is_err(),
        "a fifth connection from the address got a slot"
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    // The healthy session keeps working, and the address gets slots back once the flood ends.
    healthy
        .send(Message::Ping(b"p".to_vec().into()))
        .await
        .unwrap();
    loop {
        match timeout(WAIT, healthy.next()).await.unwrap() {
            Some(Ok(Message::Pong(payload))) => {
                assert_eq!(payload.as_ref(), b"p");
                break;
            }
            Some(Ok(_)) => continue,
            other => panic!("expected a pong, got {other:?}"),
        }
    }
    drop(flood);
    let (_again, ack) = timeout(WAIT, async {
        loop {
            let link = create_link(&daemon, Transport::Native).await;
            let Ok(mut ws) = open_wss(&daemon).await else {
                // The daemon has not seen every flood socket close yet.
                tokio::task::yield_now().await;
                continue;
            };
            send_json(
                &mut ws,
                claim_frame(&link.session_id, &claim_token(&link), "Pixel 9"),
            )
            .await;
            break (ws.next().await, ws);
        }
    })
    .await
    .map(|(frame, ws)| (ws, frame))
    .unwrap();
    assert!(
        matches!(ack, Some(Ok(Message::Text(ref t))) if t.contains("session_ack")),
        "{ack:?}"
    );
    daemon.shutdown().await;
}

/// Runs by hand: `cargo test -p appduct-daemon --release --test security_preclaim -- --ignored
/// --nocapture`. 1,000 idle sockets that reconnect as soon as the daemon closes them, against
/// one daemon, while claims (web and native) and resumes are timed. Loopback only, about 10 s
/// per scenario.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement, run by hand"]
async fn measure_a_flood_of_1000_reconnecting_idle_sockets() {
    // Strangers: loopback counts as remote, the flood comes from 127.0.0.2 (Linux routes all of
    // 127/8 to lo) and the measured clients from 127.0.0.1, two different hosts.
    let stranger_host = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let scenarios = [
        (
            "baseline: no flood",
            PreclaimPolicy::wss(),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        ),
        (
            "local flood (loopback peers, production policy)",
            PreclaimPolicy::wss(),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        ),
        (
            "one stranger host (per-source cap 16)",
            PreclaimPolicy::wss().loopback_is_local(false),
            stranger_host,
        ),
        (
            "strangers from unlimited addresses (no per-source cap)",
            PreclaimPolicy::wss()
                .loopback_is_local(false)
                .per_source_cap(usize::MAX),
            stranger_host,
        ),
    ];
    for (index, (name, policy, source)) in scenarios.into_iter().enumerate() {
        let sockets = if index == 0 { 0 } else { 1_000 };
        measure(name, policy, source, sockets).await;
    }
}

async fn measure(name: &str, policy: PreclaimPolicy, source: IpAddr, sockets: usize) {
    const ROUNDS: usize = 20;
    let dir = state_dir();
    let daemon = start_with(dir.path(), policy).await;
    let mut ack = suspended_session(&daemon).await;
    let wss = wss_v4(&daemon);
    let (count_tx, mut count_rx) = mpsc::unbounded_channel::<()>();
    let mut flood = JoinSet::new();
    for _ in 0..sockets {
        let count_tx = count_tx.clone();
        flood.spawn(async move {
            loop {
                let socket = TcpSocket::new_v4().unwrap();
                socket.bind(SocketAddr::new(source, 0)).unwrap();
                let Ok(mut stream) = socket.connect(wss).await else {
                    tokio::task::yield_now().await;
                    continue;
                };
                let mut byte = [0u8; 1];
                let _ = stream.read(&mut byte).await;
                let _ = count_tx.send(());
            }
        });
    }
    // Warm-up: the flood has cycled through the budget a few times.
    for _ in 0..(3 * sockets) {
        count_rx.recv().await.unwrap();
    }
    let began = Instant::now();
    let drained = |rx: &mut mpsc::UnboundedReceiver<()>| {
        let mut n = 0usize;
        while rx.try_recv().is_ok() {
            n += 1;
        }
        n
    };
    drained(&mut count_rx);
    let mut web_ok = Vec::new();
    let mut native_ok = Vec::new();
    let mut resume_ok = Vec::new();
    let mut failures = [0usize; 3];
    for _ in 0..ROUNDS {
        // Web claim.
        let link = create_link(&daemon, Transport::Web).await;
        let t = Instant::now();
        let web = async {
            let tcp = TcpStream::connect(daemon.web_addr()).await.ok()?;
            let (mut page, _) =
                tokio_tungstenite::client_async(format!("ws://{}/", daemon.web_addr()), tcp)
                    .await
                    .ok()?;
            send_json(
                &mut page,
                claim_frame(&link.session_id, &claim_token(&link), "Web"),
            )
            .await;
            match page.next().await {
                Some(Ok(Message::Text(t))) if t.contains("session_ack") => Some(()),
                _ => None,
            }
        };
        match timeout(WAIT, web).await {
            Ok(Some(())) => web_ok.push(t.elapsed()),
            _ => failures[0] += 1,
        }
        // Native claim.
        let link = create_link(&daemon, Transport::Native).await;
        let t = Instant::now();
        let native = async {
            let mut ws = open_wss(&daemon).await.ok()?;
            send_json(
                &mut ws,
                claim_frame(&link.session_id, &claim_token(&link), "Pixel"),
            )
            .await;
            match ws.next().await {
                Some(Ok(Message::Text(t))) if t.contains("session_ack") => Some(()),
                _ => None,
            }
        };
        match timeout(WAIT, native).await {
            Ok(Some(())) => native_ok.push(t.elapsed()),
            _ => failures[1] += 1,
        }
        // Resume of the suspended session, then suspend it again.
        let t = Instant::now();
        let resumed = async {
            let mut ws = open_wss(&daemon).await.ok()?;
            send_json(&mut ws, resume_frame(&ack)).await;
            match ws.next().await {
                Some(Ok(Message::Text(t))) => {
                    let value: Value = serde_json::from_str(t.as_str()).ok()?;
                    (value["type"] == "session_ack").then_some((value, ws))
                }
                _ => None,
            }
        };
        match timeout(WAIT, resumed).await {
            Ok(Some((value, mut ws))) => {
                resume_ok.push(t.elapsed());
                ack = value;
                let mut bus = daemon.events().subscribe_all();
                let _ = ws.close(None).await;
                drop(ws);
                event_of(&mut bus, EventKind::SessionSuspended).await;
            }
            _ => failures[2] += 1,
        }
    }
    let churn = drained(&mut count_rx) as f64 / began.elapsed().as_secs_f64();
    flood.abort_all();
    let summary = |label: &str, times: &mut Vec<Duration>, failed: usize| {
        times.sort_unstable();
        let ms = |d: Option<&Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
        println!(
            "  {label}: {ok}/{total} succeeded, median {:.1} ms, max {:.1} ms",
            ms(times.get(times.len() / 2)),
            ms(times.last()),
            ok = times.len(),
            total = times.len() + failed,
        );
    };
    println!("{name}: flood of {sockets} reconnecting idle sockets, {churn:.0} daemon closes/s");
    summary("web claim", &mut web_ok, failures[0]);
    summary("native claim", &mut native_ok, failures[1]);
    summary("resume", &mut resume_ok, failures[2]);
    daemon.shutdown().await;
}
