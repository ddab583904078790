//! Faults the engine must survive (02 §8): peers that never read, internal panics, wall-clock
//! expiry, and frames racing a takeover. Paused tokio clock; waits are bounded, never sleeps to
//! synchronise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod engine_support;

use std::sync::Arc;
use std::time::Duration;

use appduct_daemon::device_socket::{from_websocket, websocket_config};
use appduct_daemon::events::EventBus;
use appduct_daemon::links::StaticLinkEnv;
use appduct_daemon::seams::ManualClock;
use appduct_daemon::sessions::{EngineOptions, SessionManager};
use appduct_protocol::control::Transport;
use engine_support::START_MS;
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::Role;

/// A masked empty ping, as a client would send it.
const PING: [u8; 6] = [0x89, 0x80, 0, 0, 0, 0];

fn bare_manager() -> SessionManager {
    let clock = ManualClock::new(START_MS);
    let bus = EventBus::new(Arc::new(clock.clone()), 16);
    SessionManager::new(
        EngineOptions::default(),
        bus,
        Arc::new(clock),
        Arc::new(StaticLinkEnv::default()),
    )
}

/// A real WebSocket adapter over a 64-byte pipe; the returned client end is never read.
async fn stalled_connection(mgr: &SessionManager) -> (tokio::task::JoinHandle<()>, DuplexStream) {
    let (server, client) = tokio::io::duplex(64);
    let ws = WebSocketStream::from_raw_socket(server, Role::Server, Some(websocket_config())).await;
    let task = mgr.spawn_connection(
        from_websocket(ws),
        Transport::Native,
        tokio::time::Instant::now() + Duration::from_secs(10),
        (),
    );
    (task, client)
}

/// 02 §8: "After sending a close frame the daemon waits at most 1 s for the peer's close, then
/// drops TCP." A peer that pings but never reads fills the daemon's write path; the pre-claim
/// timeout's close must still drop it one close wait later.
#[tokio::test(start_paused = true)]
async fn preclaim_peer_that_never_reads_is_dropped_after_the_close_wait() {
    let mgr = bare_manager();
    let (task, mut client) = stalled_connection(&mgr).await;
    let accepted = tokio::time::Instant::now();
    // The client never reads, so the daemon's pongs fill the pipe and block its writer.
    for _ in 0..40 {
        client.write_all(&PING).await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(mgr.connection_count(), 0);
    // Pre-claim timeout (10 s) plus at most the close wait (1 s) and the engine's own wait.
    let dropped = tokio::time::timeout(Duration::from_secs(60), async {
        while client.write_all(&PING).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        dropped.is_ok(),
        "the daemon still holds the connection after closing it"
    );
    let held = accepted.elapsed();
    assert!(held <= Duration::from_millis(12_100), "held for {held:?}");
}

/// Control for the test above: the probe also sees the drop when the writer is not blocked.
#[tokio::test(start_paused = true)]
async fn an_idle_preclaim_peer_is_dropped_at_the_timeout() {
    let mgr = bare_manager();
    let (task, mut client) = stalled_connection(&mgr).await;
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(client.write_all(&PING).await.is_err());
}
