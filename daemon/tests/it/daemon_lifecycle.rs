//! Startup and shutdown of the composed daemon (§S3.5, §S3.6, §C1.1, §C8.3): state
//! files and their modes, single instance, stale and foreign socket files, failed starts that
//! leave nothing behind, and `daemon.shutdown` over the real socket.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;

use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};

use appduct_client::pidfile::PidfileOptions;
use appduct_client::state_dir::StateDirError;
use appduct_daemon::daemon::{Daemon, DaemonOptions, StartError};
use appduct_daemon::device_socket::{AppEvent, memory_device_pair};
use appduct_daemon::tls::{self, KeyError, Overwrite};
use appduct_protocol::control::{
    DaemonShutdown, DaemonStatus, EventData, EventKind, NoParams, OkResult, Transport,
};
use appduct_protocol::errors::ErrorType;
use daemon_support::*;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn startup_creates_socket_pidfile_and_key_and_a_second_start_is_refused() {
    // SEC-51 (in process).
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let sock = dir.path().join("daemon.sock");
    let pid = dir.path().join("daemon.pid");
    let key = dir.path().join("key.pem");

    assert_eq!(daemon.socket_path(), sock);
    assert!(
        std::fs::symlink_metadata(&sock)
            .unwrap()
            .file_type()
            .is_socket()
    );
    assert_eq!(mode(&sock), 0o600);
    assert_eq!(mode(&pid), 0o600);
    assert_eq!(
        std::fs::read_to_string(&pid).unwrap(),
        format!("{}\n", std::process::id())
    );
    assert_eq!(mode(&key), 0o600);
    assert_eq!(mode(&dir.path().join("audit")), 0o700);
    // The audit prune ran once at start (§S3.5 step 10).
    let mut prunes = daemon.audit().prune_passes();
    tokio::time::timeout(WAIT, prunes.wait_for(|passes| *passes >= 1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(mode(dir.path()), 0o700);
    assert_ne!(daemon.wss_addr().port(), 0);
    assert_ne!(daemon.web_addr().port(), 0);
    assert!(daemon.web_addr().ip().is_loopback());
    assert!(daemon.pin().as_str().starts_with("sha256/"));

    // A short wait for the lock: nothing is stopping here.
    let quick = PidfileOptions {
        held_wait: std::time::Duration::from_millis(50),
        ..PidfileOptions::default()
    };
    let second = Daemon::start(DaemonOptions::for_tests(dir.path()).pidfile(quick))
        .await
        .unwrap_err();
    assert!(
        matches!(second, StartError::AlreadyRunning { pid: Some(p) } if p == std::process::id()),
        "{second:?}"
    );
    assert_eq!(second.error_type(), ErrorType::ConnectionError);
    assert_eq!(second.exit_code(), 70);
    assert_eq!(second.running_pid(), Some(std::process::id()));
    // The refused start touched nothing of the running daemon.
    assert!(sock.exists() && pid.exists());
    let client = uds_client(dir.path()).await;
    client.call::<DaemonStatus>(NoParams {}).await.unwrap();

    daemon.shutdown().await;
    assert!(!sock.exists());
    assert!(!pid.exists());
    // The key outlives the daemon and is reused (same pin) by the next one.
    let pin = daemon.pin();
    let again = start(dir.path()).await;
    assert_eq!(again.pin(), pin);
    again.shutdown().await;
}

#[tokio::test]
async fn a_stale_socket_file_is_taken_over() {
    let dir = state_dir();
    let sock = dir.path().join("daemon.sock");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    // A socket nobody serves any more: connecting to it is refused.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(std::os::unix::net::UnixStream::connect(&sock).is_err());

    let daemon = start(dir.path()).await;
    // The new socket answers.
    let client = uds_client(dir.path()).await;
    let status = client.call::<DaemonStatus>(NoParams {}).await.unwrap();
    assert_eq!(status.pid, std::process::id());
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_socket_served_without_the_pidfile_lock_is_not_unlinked() {
    let dir = state_dir();
    let sock = dir.path().join("daemon.sock");
    let squatter = tokio::net::UnixListener::bind(&sock).unwrap();

    let err = Daemon::start(DaemonOptions::for_tests(dir.path()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StartError::AlreadyRunning { pid: None }),
        "{err:?}"
    );
    assert!(
        std::fs::symlink_metadata(&sock)
            .unwrap()
            .file_type()
            .is_socket()
    );
    assert!(!dir.path().join("daemon.pid").exists(), "pidfile released");
    drop(squatter);
}

#[tokio::test]
async fn a_regular_file_at_the_socket_path_is_an_error_naming_it() {
    let dir = state_dir();
    let sock = dir.path().join("daemon.sock");
    std::fs::write(&sock, b"not a socket").unwrap();

    let err = Daemon::start(DaemonOptions::for_tests(dir.path()))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StartError::StateDir(StateDirError::NotASocket { path, .. }) if *path == sock),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&sock.display().to_string()),
        "{err}"
    );
    // Left alone, and the pidfile lock was released.
    assert_eq!(std::fs::read(&sock).unwrap(), b"not a socket");
    assert!(!dir.path().join("daemon.pid").exists());
}

#[tokio::test]
async fn an_invalid_config_stops_startup_before_any_file_is_created() {
    let dir = state_dir();
    std::fs::write(dir.path().join("config.json"), r#"{"graceSeconds": 0}"#).unwrap();

    let err = Daemon::start(DaemonOptions::for_tests(dir.path()))
        .await
        .unwrap_err();
    assert!(matches!(err, StartError::Config(_)), "{err:?}");
    assert_eq!(err.exit_code(), 65);
    assert!(err.to_string().contains("graceSeconds"), "{err}");
    assert!(!dir.path().join("daemon.sock").exists());
    assert!(!dir.path().join("daemon.pid").exists());
    assert!(!dir.path().join("key.pem").exists());
}

#[tokio::test]
async fn a_loose_key_mode_stops_startup_and_releases_the_pidfile() {
    let dir = state_dir();
    let key = dir.path().join("key.pem");
    tls::generate_key_file(&key, Overwrite::Never).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();

    let err = Daemon::start(DaemonOptions::for_tests(dir.path()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StartError::Key(KeyError::Permissions { mode: 0o644, .. })
        ),
        "{err:?}"
    );
    assert_eq!(err.error_type(), ErrorType::ValidationError);
    assert_eq!(err.exit_code(), 65);
    assert!(!dir.path().join("daemon.sock").exists());
    assert!(!dir.path().join("daemon.pid").exists());

    // Fixed, the next start succeeds (the lock really was released).
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let daemon = start(dir.path()).await;
    daemon.shutdown().await;
}

#[tokio::test]
async fn daemon_shutdown_over_the_socket_answers_then_tears_down_in_order() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut bus = daemon.events().subscribe_all();

    // A claimed in-memory device and one still before its claim.
    let client = uds_client(dir.path()).await;
    let mut claimed = claim(&daemon, &client, "Pixel 8").await;
    event_of(&mut bus, EventKind::SessionClaimed).await;
    let (socket, mut unclaimed) = memory_device_pair();
    daemon.attach_device(socket, Transport::Web);
    until(|| daemon.sessions().connection_count() == 2).await;

    let ok = client.call::<DaemonShutdown>(NoParams {}).await.unwrap();
    assert_eq!(ok, OkResult { ok: true });

    for app in [&mut claimed.app, &mut unclaimed] {
        assert_eq!(
            next_app_event(app).await,
            AppEvent::Close {
                code: 1001,
                reason: "daemon_shutdown".to_owned()
            }
        );
        app.close(Some(1001), "").await.unwrap();
    }
    daemon.wait().await;
    assert!(daemon.is_stopped());
    assert!(!dir.path().join("daemon.sock").exists());
    assert!(!dir.path().join("daemon.pid").exists());
    // The control connection was closed.
    assert!(client.call::<DaemonStatus>(NoParams {}).await.is_err());
    // A new in-memory connection is refused outright.
    assert!(
        memory_client(&daemon)
            .call::<DaemonStatus>(NoParams {})
            .await
            .is_err()
    );
    // events.log holds the lifecycle events (flushed before `wait` resolved), no app events.
    let log = std::fs::read_to_string(dir.path().join("events.log")).unwrap();
    let kinds: Vec<String> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["kind"].to_string())
        .collect();
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("\"daemon_started\"")
    );
    assert!(
        kinds.iter().any(|k| k == "\"session_claimed\""),
        "{kinds:?}"
    );
}

#[tokio::test]
async fn daemon_started_carries_version_and_pid() {
    let dir = state_dir();
    let daemon = Daemon::start(DaemonOptions::for_tests(dir.path()).version("9.9.9-test"))
        .await
        .unwrap();
    // Emitted before `start` returned, so only events.log has it; read it after a flush.
    daemon.shutdown().await;
    let log = std::fs::read_to_string(dir.path().join("events.log")).unwrap();
    let first: appduct_protocol::control::EventNotification =
        appduct_protocol::control::EventNotification::from_value(
            serde_json::from_str(log.lines().next().unwrap()).unwrap(),
        )
        .unwrap();
    match first.data {
        EventData::DaemonStarted(d) => {
            assert_eq!(d.version, "9.9.9-test");
            assert_eq!(d.pid, std::process::id());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(first.session_id, None);
    assert_eq!(first.seq, 0);
}

#[tokio::test]
async fn requests_after_teardown_started_are_refused() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut raw = RawControl::new(&daemon);
    let hello = raw.request(1, "daemon.hello", serde_json::json!({})).await;
    assert!(hello["result"].is_object(), "{hello}");
    // A device that does not answer its close holds teardown in step 3 (at most 1 s), before
    // control connections are closed in step 5.
    let (socket, mut app) = memory_device_pair();
    daemon.attach_device(socket, Transport::Native);
    until(|| daemon.sessions().connection_count() == 1).await;

    daemon.request_shutdown();
    assert!(matches!(
        next_app_event(&mut app).await,
        AppEvent::Close { code: 1001, .. }
    ));
    let refused = raw.request(2, "sessions.list", serde_json::json!({})).await;
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert_eq!(refused["error"]["data"]["type"], "internal_error");
    assert_eq!(refused["error"]["message"], "The daemon is shutting down");
    // Asking to shut down again is still answered.
    let again = raw
        .request(3, "daemon.shutdown", serde_json::json!({}))
        .await;
    assert_eq!(again["result"], serde_json::json!({"ok": true}));
    // A device arriving now is turned away.
    let (socket, mut late) = memory_device_pair();
    daemon.attach_device(socket, Transport::Native);
    assert!(matches!(
        next_app_event(&mut late).await,
        AppEvent::Close { code: 1001, .. }
    ));

    app.close(Some(1001), "").await.unwrap();
    daemon.wait().await;
    // Step 5 closed the control connection.
    assert_eq!(raw.next().await, None);
}

/// A probe in the calls module that only records the module stopping its timers.
#[derive(Debug, Default)]
struct TimerCalls {
    stopped: std::sync::atomic::AtomicUsize,
}

impl appduct_daemon::calls::PipelineProbe for TimerCalls {
    fn reached(&self, _: &str, _: appduct_daemon::calls::Checkpoint) {}

    fn timers_stopped(&self) {
        self.stopped
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// §S3.5: a start that fails after the calls module started tears it down too (its timers
/// stop), along with everything else begun so far.
#[tokio::test]
async fn a_start_failing_after_the_calls_module_started_stops_its_timers() {
    let dir = state_dir();
    // The wss port is taken, so startup fails at step 7, after the calls module (step 6).
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let calls = std::sync::Arc::new(TimerCalls::default());
    let mut opts = DaemonOptions::for_tests(dir.path()).pipeline_probe(calls.clone());
    opts.overrides.wss_port = Some(taken.local_addr().unwrap().port());
    let err = Daemon::start(opts).await.unwrap_err();
    assert!(
        matches!(
            err,
            StartError::Bind {
                listener: "wss",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(calls.stopped.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(!dir.path().join("daemon.pid").exists());

    // A successful start hands the module to the supervisor: stopped once, at shutdown.
    let calls = std::sync::Arc::new(TimerCalls::default());
    let daemon = Daemon::start(DaemonOptions::for_tests(dir.path()).pipeline_probe(calls.clone()))
        .await
        .unwrap();
    assert_eq!(calls.stopped.load(std::sync::atomic::Ordering::SeqCst), 0);
    daemon.shutdown().await;
    assert_eq!(calls.stopped.load(std::sync::atomic::Ordering::SeqCst), 1);
}
