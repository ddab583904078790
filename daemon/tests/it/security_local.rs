//! Local access to the daemon (SECURITY.md §4.5, SECURITY.md §4.6; §C1.1; §S1.1): the peer-uid check on every
//! control connection through the `PeerCheck` seam (SEC-10), state directories of another user
//! (also behind a symlink), and configurations that widen the web listener's origins (SEC-29),
//! all refused at start.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;

use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::sync::{Arc, Mutex};

use appduct_client::state_dir::StateDirError;
use appduct_daemon::control_server::{PeerCheck, SameEuid};
use appduct_daemon::daemon::{Daemon, DaemonOptions, StartError};
use appduct_protocol::control::{DaemonStatus, NoParams};
use appduct_protocol::errors::ErrorType;
use daemon_support::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;
use tokio::time::timeout;

/// The production rule (same effective uid) for a daemon that runs as `daemon_uid`, recording
/// every peer uid the accept loop read from the socket.
#[derive(Debug, Clone)]
struct DaemonRunsAs {
    daemon_uid: u32,
    peers: Arc<Mutex<Vec<Option<u32>>>>,
}

impl PeerCheck for DaemonRunsAs {
    fn allow(&self, peer_euid: Option<u32>) -> bool {
        self.peers.lock().unwrap().push(peer_euid);
        peer_euid == Some(self.daemon_uid)
    }
}

fn my_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Sends a request on a fresh connection and returns every byte the daemon wrote until EOF.
async fn raw_exchange(daemon: &appduct_daemon::daemon::DaemonHandle) -> Vec<u8> {
    let mut stream = UnixStream::connect(daemon.socket_path()).await.unwrap();
    // The daemon may already have closed the socket: a failed write is part of the refusal.
    let _ = stream
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.status\"}\n")
        .await;
    let mut received = Vec::new();
    // A reset is a close too (the result is not needed); what matters is that no byte arrived.
    let _ = timeout(WAIT, stream.read_to_end(&mut received))
        .await
        .expect("the daemon neither answered nor closed");
    received
}

/// SEC-10: a control connection whose peer uid differs from the daemon's is closed without a
/// reply. The seam sees the uid the kernel reported for the real socket peer (this process),
/// and the daemon is made to run "as" another uid.
#[tokio::test]
async fn sec_10_a_peer_of_another_uid_is_closed_without_a_reply_on_every_connection() {
    let dir = state_dir();
    let check = DaemonRunsAs {
        daemon_uid: my_uid().wrapping_add(1),
        peers: Arc::default(),
    };
    let daemon = Daemon::start(DaemonOptions::for_tests(dir.path()).peer_check(check.clone()))
        .await
        .unwrap();

    for _ in 0..2 {
        assert!(
            raw_exchange(&daemon).await.is_empty(),
            "a refused peer got a reply"
        );
    }
    // Checked on every accepted connection, with the uid read from the socket.
    assert_eq!(*check.peers.lock().unwrap(), [Some(my_uid()); 2]);
    // The refusals cost the daemon nothing: an in-process connection is still served.
    let status = memory_client(&daemon)
        .call::<DaemonStatus>(NoParams {})
        .await
        .unwrap();
    assert_eq!(status.pid, std::process::id());
    daemon.shutdown().await;

    // The same peer is served when the uids match: the production check.
    let dir = state_dir();
    let check = DaemonRunsAs {
        daemon_uid: my_uid(),
        peers: Arc::default(),
    };
    let daemon = Daemon::start(DaemonOptions::for_tests(dir.path()).peer_check(check.clone()))
        .await
        .unwrap();
    let answer = raw_exchange_first_line(&daemon).await;
    assert!(answer.contains("\"result\""), "{answer}");
    assert_eq!(*check.peers.lock().unwrap(), [Some(my_uid())]);
    daemon.shutdown().await;

    // `SameEuid`, the production seam, is exactly this rule; an unreadable uid is refused.
    let production = SameEuid::new();
    assert!(production.allow(Some(my_uid())));
    assert!(!production.allow(Some(my_uid().wrapping_add(1))));
    assert!(!production.allow(None));
}

async fn raw_exchange_first_line(daemon: &appduct_daemon::daemon::DaemonHandle) -> String {
    let stream = UnixStream::connect(daemon.socket_path()).await.unwrap();
    let (reader, mut writer) = stream.into_split();
    writer
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.status\"}\n")
        .await
        .unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(reader));
    timeout(WAIT, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap_or_default()
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// §S1.1, SECURITY.md §4.5: a state directory owned by another uid is refused at start, untouched,
/// naming the path; nothing is created in it.
#[tokio::test]
async fn a_state_directory_of_another_user_is_refused_and_left_alone() {
    if !is_root() {
        eprintln!("skipping: handing a directory to another uid needs root");
        return;
    }
    let dir = state_dir();
    let root = foreign_dir(dir.path(), "s");
    let err = assert_refused_and_untouched(&root, &root).await;
    assert_eq!(err.error_type(), ErrorType::ConnectionError);
    assert!(err.to_string().contains(&*root.to_string_lossy()), "{err}");
}

/// A directory `name` in `parent` owned by uid 4242, mode 0755 (needs root).
fn foreign_dir(parent: &std::path::Path, name: &str) -> std::path::PathBuf {
    let foreign = parent.join(name);
    std::fs::create_dir(&foreign).unwrap();
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&foreign, Some(4242), Some(4242)).unwrap();
    foreign
}

/// Starting on `given` (the foreign directory or a link to it) fails `ForeignOwner`, and the
/// directory `foreign` stays empty and 0755. Returns the error for further checks.
async fn assert_refused_and_untouched(
    given: &std::path::Path,
    foreign: &std::path::Path,
) -> StartError {
    let err = Daemon::start(DaemonOptions::for_tests(given))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            StartError::StateDir(StateDirError::ForeignOwner { owner: 4242, .. })
        ),
        "{err:?}"
    );
    assert_eq!(
        std::fs::read_dir(foreign).unwrap().count(),
        0,
        "nothing made"
    );
    let mode = std::fs::metadata(foreign).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755, "another user's directory is not chmod-ed");
    err
}

/// SECURITY.md §4.5 (project decision): a state directory found writable by others is tightened, and a
/// `config.json` another user planted in it stops the start instead of setting the policy.
#[tokio::test]
async fn a_config_planted_in_a_writable_state_directory_is_refused() {
    if !is_root() {
        eprintln!("skipping: planting a file of another uid needs root");
        return;
    }
    let dir = state_dir();
    let root = dir.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = root.join("config.json");
    std::fs::write(&config, r#"{"policy": {"default": "allow"}}"#).unwrap();
    std::os::unix::fs::lchown(&config, Some(4242), Some(4242)).unwrap();

    let err = Daemon::start(DaemonOptions::for_tests(root))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            StartError::StateDir(StateDirError::ForeignEntry { owner: 4242, .. })
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&*config.to_string_lossy()),
        "{err}"
    );
    let mode = std::fs::metadata(root).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    assert!(!root.join("daemon.sock").exists() && !root.join("key.pem").exists());
}

/// SECURITY.md §4.5: the state directory may be a symlink (the user keeps it elsewhere); it is followed,
/// and the mode and owner checks apply to the real directory, never to the link.
#[tokio::test]
async fn a_symlinked_state_directory_is_followed_and_the_checks_apply_to_the_real_directory() {
    let dir = state_dir();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o750)).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();

    let daemon = Daemon::start(DaemonOptions::for_tests(&link))
        .await
        .unwrap();
    let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the real directory is tightened");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link itself is left as it is"
    );
    assert!(
        std::fs::symlink_metadata(real.join("daemon.sock"))
            .unwrap()
            .file_type()
            .is_socket(),
        "the socket lives in the real directory"
    );
    let status = memory_client(&daemon)
        .call::<DaemonStatus>(NoParams {})
        .await
        .unwrap();
    assert_eq!(status.pid, std::process::id());
    daemon.shutdown().await;

    // A link to a directory of another user is refused like that directory, and it is untouched.
    if !is_root() {
        eprintln!("skipping the foreign-owner half: handing a directory to another uid needs root");
        return;
    }
    let foreign = foreign_dir(dir.path(), "foreign");
    let to_foreign = dir.path().join("to-foreign");
    std::os::unix::fs::symlink(&foreign, &to_foreign).unwrap();
    assert_refused_and_untouched(&to_foreign, &foreign).await;
}

/// SEC-29: `webOrigins: ["*"]` and a non-array `webOrigins` stop the daemon at startup,
/// naming the key, before any state file exists.
#[tokio::test]
async fn sec_29_wildcard_or_non_array_web_origins_stop_the_start() {
    for config in [
        r#"{"webOrigins": ["*"]}"#,
        r#"{"webOrigins": ["http://localhost:3000", "*"]}"#,
        r#"{"webOrigins": "*"}"#,
        r#"{"webOrigins": "http://localhost:3000"}"#,
        r#"{"webOrigins": {"origin": "http://localhost:3000"}}"#,
    ] {
        let dir = state_dir();
        std::fs::write(dir.path().join("config.json"), config).unwrap();
        let err = Daemon::start(DaemonOptions::for_tests(dir.path()))
            .await
            .unwrap_err();
        assert!(matches!(err, StartError::Config(_)), "{config}: {err:?}");
        assert_eq!(err.exit_code(), 65, "{config}");
        assert!(err.to_string().contains("webOrigins"), "{config}: {err}");
        for file in ["daemon.sock", "daemon.pid", "key.pem"] {
            assert!(!dir.path().join(file).exists(), "{config}: {file} created");
        }
    }
    // An exact origin is accepted.
    let dir = state_dir();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"webOrigins": ["http://devbox.lan:5173"]}"#,
    )
    .unwrap();
    let daemon = start(dir.path()).await;
    daemon.shutdown().await;
}
