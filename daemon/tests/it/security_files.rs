//! Files the daemon writes (SECURITY.md §4.5, issue #20 defect 3): every file opened for writing must be
//! a regular file of the daemon's uid with one link, and a foreign entry anywhere under a
//! directory others could write to (`audit/` included) stops the start. Tests that plant files
//! of another uid need root and skip themselves otherwise, saying so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use appduct_client::state_dir::{StateDir, StateDirError, UnsafeFileError};
use appduct_daemon::audit::{AuditRecord, AuditWriter, SHUTDOWN_FLUSH_TIMEOUT, day_file_name};
use appduct_daemon::clock::ManualClock;
use appduct_daemon::daemon::{Daemon, DaemonOptions, StartError};
use appduct_daemon::events::{EventBus, EventsLog};
use appduct_protocol::canonical::args_sha256;
use appduct_protocol::control::{Caller, EventData, Settlement, ToolsChangedData};
use appduct_protocol::errors::ErrorType;
use daemon_support::*;
use serde_json::json;

/// 2026-11-30T09:14:22.518Z
const TS: u64 = 1_796_030_062_518;
const OTHER_UID: u32 = 4242;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn record(call_id: &str) -> AuditRecord {
    AuditRecord {
        ts_unix_ms: TS,
        call_id: call_id.into(),
        session_id: "q3VfZ0xkR2ptTnB4".into(),
        alias: "pixel-8".into(),
        tool: "reset_counter".into(),
        args_sha256: args_sha256(&json!({})),
        settlement: Settlement::Ok,
        duration_ms: 0,
        caller: Caller::Cli,
        transport: None,
        consent: None,
        operator: None,
        content_summary: None,
    }
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// An empty file at `path` owned by [`OTHER_UID`], mode 0666, as another user would leave it.
fn plant_foreign_file(path: &Path) {
    std::fs::write(path, b"").unwrap();
    set_mode(path, 0o666);
    std::os::unix::fs::lchown(path, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
}

/// Enqueues one record for `day` in `audit_dir`, flushes, and returns the failed writes.
async fn write_one_record(audit_dir: &Path) -> u64 {
    let writer = AuditWriter::start(audit_dir, 30);
    writer.enqueue(record("call_a"));
    writer.flush(SHUTDOWN_FLUSH_TIMEOUT).await.unwrap();
    writer.failed_writes()
}

/// Defect 3: today's day file owned by another user is never appended to; the record counts as
/// a failed write (§C12.1) and the writer keeps working for files of its own.
#[tokio::test]
async fn a_foreign_owned_audit_day_file_is_refused_and_nothing_is_appended() {
    if !is_root() {
        eprintln!("skipping: planting an audit file of another uid needs root");
        return;
    }
    let dir = state_dir();
    let audit = StateDir::new(dir.path())
        .unwrap()
        .ensure_audit_dir()
        .unwrap();
    let day = audit.join(day_file_name(TS));
    plant_foreign_file(&day);

    assert_eq!(write_one_record(&audit).await, 1, "the record is refused");
    assert_eq!(
        std::fs::metadata(&day).unwrap().len(),
        0,
        "nothing appended"
    );
    assert_eq!(std::fs::metadata(&day).unwrap().uid(), OTHER_UID);

    // Once the operator removes it, the next record lands in a file of the daemon's own.
    std::fs::remove_file(&day).unwrap();
    assert_eq!(write_one_record(&audit).await, 0);
    assert_eq!(std::fs::read_to_string(&day).unwrap().lines().count(), 1);
    assert_eq!(mode_of(&day), 0o600);
}

/// Defect 3: a day file of the daemon's own uid with a second name (another user's hard link,
/// or any other) is refused: the other name would expose every record appended.
#[tokio::test]
async fn a_hard_linked_audit_day_file_is_refused_and_nothing_is_appended() {
    let dir = state_dir();
    let audit = StateDir::new(dir.path())
        .unwrap()
        .ensure_audit_dir()
        .unwrap();
    let day = audit.join(day_file_name(TS));
    std::fs::write(&day, b"").unwrap();
    set_mode(&day, 0o600);
    let elsewhere = dir.path().join("reader-copy");
    std::fs::hard_link(&day, &elsewhere).unwrap();

    assert_eq!(write_one_record(&audit).await, 1, "the record is refused");
    assert_eq!(
        std::fs::metadata(&elsewhere).unwrap().len(),
        0,
        "nothing leaked"
    );

    // The refusal names the file and the way out, through the one opener.
    let err = appduct_client::state_dir::open_append(&day).unwrap_err();
    let refused = UnsafeFileError::of(&err).expect("a typed refusal");
    assert!(
        matches!(refused, UnsafeFileError::HardLinked { links: 2, path } if *path == day),
        "{refused:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&*day.to_string_lossy()) && text.contains("samefile"),
        "{text}"
    );
}

/// Defect 3 (the reported setup): the state directory and `audit/` were left 0777, another user
/// created today's day file and a hard link to it in a directory of its own. The daemon
/// tightens both directories, then refuses to start, naming the planted file; nothing is
/// appended to it.
#[tokio::test]
async fn a_day_file_planted_in_a_writable_audit_dir_stops_the_start() {
    if !is_root() {
        eprintln!("skipping: planting an audit file of another uid needs root");
        return;
    }
    let dir = state_dir();
    let root = dir.path().join("state");
    std::fs::create_dir(&root).unwrap();
    let audit = root.join("audit");
    std::fs::create_dir(&audit).unwrap();
    set_mode(&root, 0o777);
    set_mode(&audit, 0o777);
    let day = audit.join(day_file_name(TS));
    plant_foreign_file(&day);
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::hard_link(&day, theirs.join("audit-copy")).unwrap();

    let err = Daemon::start(DaemonOptions::for_tests(&root))
        .await
        .unwrap_err();
    match &err {
        StartError::StateDir(StateDirError::ForeignEntry { path, owner, .. }) => {
            assert_eq!(path, &day);
            assert_eq!(*owner, OTHER_UID);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(err.error_type(), ErrorType::ConnectionError);
    assert!(err.to_string().contains(&*day.to_string_lossy()), "{err}");
    assert_eq!(mode_of(&root), 0o700, "the state directory is tightened");
    assert_eq!(
        std::fs::metadata(&day).unwrap().len(),
        0,
        "nothing appended"
    );
    assert!(!root.join("daemon.sock").exists() && !root.join("key.pem").exists());

    // `audit/` alone writable by others (the state directory private all along) is enough.
    set_mode(&root, 0o700);
    set_mode(&audit, 0o777);
    let err = Daemon::start(DaemonOptions::for_tests(&root))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            StartError::StateDir(StateDirError::ForeignEntry { path, dir, mode: 0o777, .. })
                if *path == day && *dir == audit
        ),
        "{err:?}"
    );

    // Removed, the daemon starts, and `audit/` is 0700.
    std::fs::remove_file(&day).unwrap();
    let daemon = start(&root).await;
    assert_eq!(mode_of(&audit), 0o700);
    daemon.shutdown().await;
}

/// A foreign entry planted in `audit/` after `prepare` walked it (through a descriptor opened
/// while it was writable) is caught when the audit writer tightens the directory.
#[test]
fn ensure_audit_dir_tightens_then_refuses_a_foreign_entry() {
    if !is_root() {
        eprintln!("skipping: planting an audit file of another uid needs root");
        return;
    }
    let dir = state_dir();
    let state = StateDir::new(dir.path()).unwrap();
    let audit = state.audit_dir();
    std::fs::create_dir(&audit).unwrap();
    set_mode(&audit, 0o733);
    let planted: PathBuf = audit.join("notes.txt");
    plant_foreign_file(&planted);

    let err = state.ensure_audit_dir().unwrap_err();
    assert!(
        matches!(&err, StateDirError::ForeignEntry { path, owner: OTHER_UID, .. } if *path == planted),
        "{err:?}"
    );
    assert_eq!(mode_of(&audit), 0o700, "tightened before the check");

    // `audit/` itself owned by another uid is refused too.
    std::fs::remove_file(&planted).unwrap();
    std::os::unix::fs::lchown(&audit, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    assert!(matches!(
        state.ensure_audit_dir(),
        Err(StateDirError::ForeignOwner {
            owner: OTHER_UID,
            ..
        })
    ));
}

/// The other writers take the same path: a hard-linked `events.log` is never appended to (its
/// lines count as failed writes), and a hard-linked `daemon.pid` stops the start.
#[tokio::test]
async fn a_hard_linked_events_log_or_pidfile_is_refused() {
    let dir = state_dir();
    let state = StateDir::new(dir.path()).unwrap();
    state.prepare().unwrap();
    let log = state.events_log_path();
    std::fs::write(&log, b"").unwrap();
    set_mode(&log, 0o600);
    let copy = dir.path().join("copy-of-events");
    std::fs::hard_link(&log, &copy).unwrap();

    let daemon = start(dir.path()).await;
    let writer = daemon
        .events()
        .events_log()
        .expect("the daemon writes events.log");
    until(|| writer.failed_writes() >= 1).await;
    daemon.shutdown().await;
    assert_eq!(std::fs::metadata(&copy).unwrap().len(), 0, "nothing leaked");
    std::fs::remove_file(&copy).unwrap();

    let pid = state.pid_path();
    std::fs::write(&pid, b"").unwrap();
    set_mode(&pid, 0o600);
    std::fs::hard_link(&pid, dir.path().join("copy-of-pid")).unwrap();
    let err = Daemon::start(DaemonOptions::for_tests(dir.path()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("hard links"), "{err}");
    assert!(!state.socket_path().exists());
}

/// `EventsLog` alone: a foreign-owned `events.log` is never written; its lines count as failed
/// writes.
#[test]
fn a_foreign_owned_events_log_is_never_written() {
    if !is_root() {
        eprintln!("skipping: planting an events.log of another uid needs root");
        return;
    }
    let dir = state_dir();
    let log = dir.path().join("events.log");
    plant_foreign_file(&log);
    let writer = EventsLog::start(log.clone(), dir.path().join("events.log.1"), 1 << 20).unwrap();
    let bus = EventBus::with_events_log(Arc::new(ManualClock::new(0)), 8, writer);
    bus.emit(
        None,
        None,
        EventData::ToolsChanged(ToolsChangedData::new(1)),
    );
    assert!(bus.events_log().unwrap().flush_blocking(WAIT));
    assert_eq!(bus.events_log_status().unwrap().failed_writes, 1);
    assert_eq!(std::fs::metadata(&log).unwrap().len(), 0);
}
