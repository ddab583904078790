//! The control plane over a real Unix socket: peer check, path length, connect-or-spawn and the
//! handshake. No test here replaces a daemon (see `control_replace.rs`), because replacement
//! state is per process.
#![allow(clippy::unwrap_used)]

use crate::control_support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use appduct_client::client::{ClientError, ClientOptions, ControlClient, MismatchReason};
use appduct_client::spawn::{RecordingSpawner, SpawnedChild};
use appduct_protocol::control::{NoParams, SessionsList};
use control_support::{TestHandler, short_tempdir, start_uds};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const VERSION: &str = "0.3.1";

fn options(
    dir: &std::path::Path,
    spawner: Arc<RecordingSpawner>,
    auto_spawn: bool,
) -> ClientOptions {
    let mut o = ClientOptions::new(dir, "appduct-cli");
    o.client_version = VERSION.into();
    o.auto_spawn = auto_spawn;
    o.spawner = spawner;
    o
}

fn no_spawn() -> Arc<RecordingSpawner> {
    Arc::new(RecordingSpawner::new(|_| panic!("must not spawn")))
}

#[tokio::test]
async fn connect_runs_the_handshake_once_per_socket_and_serves_requests() {
    let dir = short_tempdir();
    let h = TestHandler::new(Some(VERSION));
    let _server = start_uds(&dir.path().join("daemon.sock"), h.clone(), true);
    let a = ControlClient::connect(options(dir.path(), no_spawn(), false))
        .await
        .unwrap();
    assert!(a.version_notice().is_none());
    assert_eq!(a.call::<SessionsList>(NoParams {}).await.unwrap(), vec![]);
    let b = ControlClient::connect(options(dir.path(), no_spawn(), false))
        .await
        .unwrap();
    assert_eq!(b.call::<SessionsList>(NoParams {}).await.unwrap(), vec![]);
    assert_eq!(
        h.hellos.load(Ordering::SeqCst),
        1,
        "second connect must skip the check"
    );
}

#[tokio::test]
async fn newer_daemon_is_used_with_a_notice() {
    let dir = short_tempdir();
    let h = TestHandler::new(Some("9.0.0"));
    let _server = start_uds(&dir.path().join("daemon.sock"), h, true);
    let c = ControlClient::connect(options(dir.path(), no_spawn(), false))
        .await
        .unwrap();
    let n = c.version_notice().unwrap();
    assert_eq!(
        (n.daemon_version.as_str(), n.client_version.as_str()),
        ("9.0.0", VERSION)
    );
}

#[tokio::test]
async fn older_busy_daemon_is_left_alone_and_reported() {
    let dir = short_tempdir();
    let h = TestHandler::new(Some("0.2.0"));
    h.set_pending(1, 2, 3);
    let _server = start_uds(&dir.path().join("daemon.sock"), h.clone(), true);
    let spawner = no_spawn();
    match ControlClient::connect(options(dir.path(), spawner.clone(), true)).await {
        Err(ClientError::VersionMismatch {
            daemon,
            client,
            sessions,
            pending_links,
            pending_calls,
            reason,
        }) => {
            assert_eq!((daemon.as_str(), client.as_str()), ("0.2.0", VERSION));
            assert_eq!((sessions, pending_links, pending_calls), (1, 2, 3));
            assert_eq!(reason, MismatchReason::DaemonBusy);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.shutdowns.load(Ordering::SeqCst), 0);
    assert!(spawner.requests().is_empty());
}

#[tokio::test]
async fn legacy_daemon_answers_through_daemon_status() {
    let dir = short_tempdir();
    // No daemon.hello (-32601); its status reports one session, so it is busy and older.
    let h = TestHandler::new(None);
    h.set_pending(1, 0, 0);
    let _server = start_uds(&dir.path().join("daemon.sock"), h, true);
    match ControlClient::connect(options(dir.path(), no_spawn(), false)).await {
        Err(ClientError::VersionMismatch {
            daemon,
            sessions,
            pending_calls,
            ..
        }) => {
            assert_eq!(daemon, "0.0.1");
            assert_eq!((sessions, pending_calls), (1, 0));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn refused_peer_is_closed_without_a_reply() {
    let dir = short_tempdir();
    let socket = dir.path().join("daemon.sock");
    let h = TestHandler::new(Some(VERSION));
    let _server = start_uds(&socket, h.clone(), false);
    let mut s = tokio::net::UnixStream::connect(&socket).await.unwrap();
    // The daemon may already have closed: a failed write is fine, a reply is not.
    let _ = s
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.hello\"}\n")
        .await;
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got).await;
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    assert_eq!(h.hellos.load(Ordering::SeqCst), 0);
    // The typed client sees a closed connection during the handshake.
    let r = ControlClient::connect(options(dir.path(), no_spawn(), false)).await;
    assert!(matches!(r, Err(ClientError::Closed)), "{r:?}");
}

#[tokio::test]
async fn socket_path_over_100_bytes_fails_before_connecting() {
    let dir = short_tempdir();
    let state = dir.path().join("d".repeat(100));
    let spawner = no_spawn();
    let err = ControlClient::connect(options(&state, spawner.clone(), true))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ClientError::Unreachable { .. }), "{err:?}");
    assert!(
        msg.contains(&state.join("daemon.sock").display().to_string()),
        "{msg}"
    );
    assert!(msg.contains("APPDUCT_STATE_DIR"), "{msg}");
    assert!(!state.exists(), "nothing may be created");
    assert!(spawner.requests().is_empty());
}

#[tokio::test]
async fn missing_daemon_without_auto_spawn_is_unreachable() {
    let dir = short_tempdir();
    let err = ControlClient::connect(options(dir.path(), no_spawn(), false))
        .await
        .unwrap_err();
    match &err {
        ClientError::Unreachable { socket, source } => {
            assert_eq!(socket, &dir.path().join("daemon.sock"));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn failed_spawn_reports_the_log_tail_and_releases_the_lock() {
    let dir = short_tempdir();
    let log: String = (1..=25).map(|i| format!("log line {i}\n")).collect();
    std::fs::write(dir.path().join("daemon.log"), log).unwrap();
    let spawner = Arc::new(RecordingSpawner::exiting(3));
    match ControlClient::connect(options(dir.path(), spawner.clone(), true)).await {
        Err(ClientError::SpawnFailed { reason, log_tail }) => {
            assert!(reason.contains("exited"), "{reason}");
            assert!(log_tail.starts_with("log line 6\n"), "{log_tail}");
            assert!(log_tail.ends_with("log line 25\n"), "{log_tail}");
        }
        other => panic!("{other:?}"),
    }
    let reqs = spawner.requests();
    assert_eq!(reqs.len(), 1);
    let args: Vec<_> = reqs[0]
        .args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        args,
        [
            "daemon",
            "run",
            "--state-dir",
            &dir.path().display().to_string()
        ]
    );
    assert!(!dir.path().join("daemon.spawn.lock").exists());
}

#[tokio::test]
async fn auto_spawn_removes_a_stale_socket_and_waits_until_ready() {
    let dir = short_tempdir();
    let socket = dir.path().join("daemon.sock");
    // A socket file nobody serves: connecting is refused.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let h = TestHandler::new(Some(VERSION));
    let spawner = Arc::new(RecordingSpawner::new({
        let h = h.clone();
        move |req| {
            // Binding fails unless the client removed the stale socket first.
            start_uds(&req.state_dir.join("daemon.sock"), h.clone(), true);
            Ok(SpawnedChild::new(4242).0)
        }
    }));
    let c = ControlClient::connect(options(dir.path(), spawner.clone(), true))
        .await
        .unwrap();
    assert_eq!(c.call::<SessionsList>(NoParams {}).await.unwrap(), vec![]);
    assert_eq!(spawner.requests().len(), 1);
    assert!(!dir.path().join("daemon.spawn.lock").exists());
}

#[tokio::test]
async fn shutdown_stops_accepting_and_closes_open_connections() {
    let dir = short_tempdir();
    let socket = dir.path().join("daemon.sock");
    let h = TestHandler::new(Some(VERSION));
    let server = start_uds(&socket, h, true);
    let c = ControlClient::connect(options(dir.path(), no_spawn(), false))
        .await
        .unwrap();
    let stop = ControlClient::from_stream(tokio::net::UnixStream::connect(&socket).await.unwrap());
    assert!(
        stop.call::<appduct_protocol::control::DaemonShutdown>(NoParams {})
            .await
            .unwrap()
            .ok
    );
    server.await.unwrap();
    assert!(!socket.exists());
    assert!(matches!(
        c.call::<SessionsList>(NoParams {}).await,
        Err(ClientError::Closed)
    ));
}
