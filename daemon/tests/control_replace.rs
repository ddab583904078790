//! Version replacement over real Unix sockets (§C7 step 4–5, §C7). One test, in a binary
//! of its own, because the "at most one replacement per process" state is global to the
//! process (the `it` binary's version-check tests would see it).
#![allow(clippy::unwrap_used)]

// Shared with the `it` binary, which holds every other control-plane test.
#[path = "it/control_support/mod.rs"]
mod control_support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use appduct_client::client::{
    ClientError, ClientOptions, ControlClient, MismatchReason, reset_version_checks,
};
use appduct_client::spawn::{RecordingSpawner, SpawnedChild};
use appduct_protocol::control::{NoParams, SessionsList};
use control_support::{TestHandler, short_tempdir, start_uds};

const VERSION: &str = "0.3.1";

/// A spawner whose "daemon" reports `version`.
fn spawning(version: &'static str) -> (Arc<RecordingSpawner>, Arc<TestHandler>) {
    let h = TestHandler::new(Some(version));
    let spawner = Arc::new(RecordingSpawner::new({
        let h = h.clone();
        move |req| {
            start_uds(&req.state_dir.join("daemon.sock"), h.clone(), true);
            Ok(SpawnedChild::new(4242).0)
        }
    }));
    (spawner, h)
}

fn options(dir: &std::path::Path, spawner: Arc<RecordingSpawner>) -> ClientOptions {
    let mut o = ClientOptions::new(dir, "appduct-mcp");
    o.client_version = VERSION.into();
    o.spawner = spawner;
    o
}

#[tokio::test]
async fn older_idle_daemon_is_replaced_once_per_process() {
    reset_version_checks();

    // 1. An idle older daemon is shut down and replaced by one of our version.
    let dir = short_tempdir();
    let old = TestHandler::new(Some("0.3.0"));
    start_uds(&dir.path().join("daemon.sock"), old.clone(), true);
    let (spawner, new) = spawning(VERSION);
    let c = ControlClient::connect(options(dir.path(), spawner.clone()))
        .await
        .unwrap();
    assert_eq!(c.call::<SessionsList>(NoParams {}).await.unwrap(), vec![]);
    assert_eq!(old.shutdowns.load(Ordering::SeqCst), 1);
    assert_eq!(spawner.requests().len(), 1);
    assert!(new.hellos.load(Ordering::SeqCst) >= 1);
    assert!(!dir.path().join("daemon.spawn.lock").exists());

    // 2. A replacement that still reports another version fails with its own message.
    reset_version_checks();
    let dir = short_tempdir();
    let old = TestHandler::new(Some("0.3.0"));
    start_uds(&dir.path().join("daemon.sock"), old.clone(), true);
    let (spawner, _stale) = spawning("0.3.0-stale");
    let err = ControlClient::connect(options(dir.path(), spawner.clone()))
        .await
        .unwrap_err();
    match &err {
        ClientError::VersionMismatch { daemon, reason, .. } => {
            assert_eq!(daemon, "0.3.0-stale");
            assert_eq!(reason, &MismatchReason::StillDifferentAfterRestart);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .contains("restarted the daemon but it still reports")
    );
    assert_eq!(spawner.requests().len(), 1);

    // 3. Without a reset, this process never replaces a second daemon.
    let dir = short_tempdir();
    let old = TestHandler::new(Some("0.3.0"));
    start_uds(&dir.path().join("daemon.sock"), old.clone(), true);
    let spawner = Arc::new(RecordingSpawner::new(|_| panic!("must not spawn")));
    let err = ControlClient::connect(options(dir.path(), spawner.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ClientError::VersionMismatch {
                reason: MismatchReason::StillDifferentAfterRestart,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(old.shutdowns.load(Ordering::SeqCst), 0);
}
