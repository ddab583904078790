//! The audit log (§C12): record shape, day files, modes, write failures, flush, retention and
//! status.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use appduct_client::state_dir::StateDir;
use appduct_daemon::audit::{
    AuditRecord, AuditWriter, FlushError, PRUNE_PERIOD, SHUTDOWN_FLUSH_TIMEOUT,
};
use appduct_daemon::clock::{Clock, ManualClock};
use appduct_protocol::canonical::args_sha256;
use appduct_protocol::control::{Caller, Consent, DeniedReason, Settlement};
use appduct_protocol::errors::ErrorType;
use serde_json::{Value, json};

/// 2026-11-30T09:14:22.518Z
const TS: u64 = 1_796_030_062_518;
/// 2026-12-01T00:00:00.000Z
const DEC_1: u64 = 1_796_083_200_000;
const DAY_MS: u64 = 86_400_000;
const EMPTY_ARGS_SHA: &str = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";

fn temp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("aa")
        .tempdir_in("/tmp")
        .unwrap()
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

fn record(ts: u64, call_id: &str, settlement: Settlement) -> AuditRecord {
    AuditRecord {
        ts_unix_ms: ts,
        call_id: call_id.into(),
        session_id: "q3VfZ0xkR2ptTnB4".into(),
        alias: "pixel-8".into(),
        tool: "reset_counter".into(),
        args_sha256: args_sha256(&json!({})),
        settlement,
        duration_ms: 0,
        caller: Caller::Cli,
        transport: None,
        consent: None,
        operator: None,
        content_summary: None,
    }
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

async fn flushed(writer: &AuditWriter) {
    writer.flush(SHUTDOWN_FLUSH_TIMEOUT).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Record shape

#[test]
fn denied_record_is_the_example_of_9_3_byte_for_byte() {
    let r = record(
        TS,
        "call_Yx1Q9m0v3w6Hk2a8Jd4cFQ",
        Settlement::Denied(DeniedReason::Policy),
    );
    assert_eq!(
        r.to_line(),
        concat!(
            r#"{"ts":"2026-11-30T09:14:22.518Z","callId":"call_Yx1Q9m0v3w6Hk2a8Jd4cFQ","#,
            r#""sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","tool":"reset_counter","#,
            r#""argsSha256":"44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","#,
            r#""outcome":"denied","deniedReason":"policy","durationMs":0,"caller":"cli"}"#,
            "\n"
        )
    );
    assert_eq!(r.day_file_name(), "2026-11-30.jsonl");
}

#[test]
fn field_order_and_presence_follow_the_outcome() {
    const BASE: [&str; 6] = ["ts", "callId", "sessionId", "alias", "tool", "argsSha256"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        BASE.iter().copied().chain(extra.iter().copied()).collect()
    };
    let cases = [
        (
            Settlement::Ok,
            None,
            None,
            with(&["outcome", "durationMs", "caller"]),
        ),
        (
            Settlement::Error(ErrorType::ToolTimeout),
            None,
            None,
            with(&["outcome", "errorType", "durationMs", "caller"]),
        ),
        (
            Settlement::Cancelled,
            None,
            None,
            with(&["outcome", "errorType", "durationMs", "caller"]),
        ),
        (
            Settlement::Denied(DeniedReason::NoConsentChannel),
            None,
            None,
            with(&["outcome", "deniedReason", "durationMs", "caller"]),
        ),
        (
            Settlement::Ok,
            Some(Consent::Elicitation),
            None,
            with(&["outcome", "durationMs", "caller", "consent"]),
        ),
        // A call through the HTTP listener: `transport` right after `caller`.
        (
            Settlement::Ok,
            Some(Consent::Elicitation),
            Some("http"),
            with(&["outcome", "durationMs", "caller", "transport", "consent"]),
        ),
    ];
    for (settlement, consent, transport, want) in cases {
        let mut r = record(TS, "c1", settlement);
        r.consent = consent;
        r.transport = transport;
        r.caller = Caller::Mcp;
        r.duration_ms = 41;
        let line = r.to_line();
        assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(keys(&v), want, "{settlement:?}");
        assert_eq!(v["durationMs"], 41);
        assert_eq!(v["caller"], "mcp");
        match settlement {
            Settlement::Error(_) => {
                assert_eq!(v["outcome"], "error");
                assert_eq!(v["errorType"], "tool_timeout");
            }
            Settlement::Cancelled => {
                assert_eq!(v["outcome"], "cancelled");
                assert_eq!(v["errorType"], "tool_cancelled");
            }
            Settlement::Denied(_) => {
                assert_eq!(v["outcome"], "denied");
                assert_eq!(v["deniedReason"], "no_consent_channel");
            }
            Settlement::Ok => assert_eq!(v["outcome"], "ok"),
        }
        if transport.is_some() {
            assert_eq!(v["transport"], "http");
        }
        if consent.is_some() {
            assert_eq!(v["consent"], "elicitation");
        }
    }
}

#[test]
fn args_hash_vectors_of_9_4() {
    assert_eq!(args_sha256(&json!({})), EMPTY_ARGS_SHA);
    assert_eq!(
        args_sha256(&json!({"b":1,"a":{"d":[3,{"z":true,"y":null}],"c":"é"}})),
        "02172be57d57ea7b7494626b319ee00bdef9f61503b51b3c24bacb0032a3898e"
    );
    let spelled: Value = serde_json::from_str(r#"{"a":1.0,"b":2}"#).unwrap();
    assert_eq!(
        args_sha256(&spelled),
        "43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777"
    );
}

// ---------------------------------------------------------------------------------------------
// Writer

#[tokio::test]
async fn writes_asynchronously_in_enqueue_order_and_never_raw_args() {
    let tmp = temp();
    let state = StateDir::new(tmp.path()).unwrap();
    let writer = AuditWriter::open(&state, 30).unwrap();
    assert_eq!(mode_of(&state.audit_dir()), 0o700);

    let secret_args = json!({"password": "hunter2-do-not-log"});
    for i in 0..50 {
        let mut r = record(TS + i, &format!("call-{i}"), Settlement::Ok);
        r.args_sha256 = args_sha256(&secret_args);
        writer.enqueue(r);
    }
    let day = state.audit_dir().join("2026-11-30.jsonl");
    // Enqueueing did no file work: the writer task has not run yet on this thread.
    assert!(!day.exists());

    flushed(&writer).await;
    let text = std::fs::read_to_string(&day).unwrap();
    assert!(
        !text.contains("hunter2"),
        "raw arguments reached the audit log"
    );
    let ids: Vec<String> = lines(&day)
        .iter()
        .map(|v| v["callId"].as_str().unwrap().to_owned())
        .collect();
    let want: Vec<String> = (0..50).map(|i| format!("call-{i}")).collect();
    assert_eq!(ids, want);
    assert_eq!(mode_of(&day), 0o600);
    assert_eq!(writer.failed_writes(), 0);
}

#[tokio::test]
async fn day_file_is_the_utc_date_of_each_record() {
    let tmp = temp();
    let writer = AuditWriter::start(tmp.path(), 30);
    let clock = ManualClock::new(DEC_1 - 1);
    writer.enqueue(record(clock.now_unix_ms(), "last-of-nov", Settlement::Ok));
    clock.advance(Duration::from_millis(1));
    writer.enqueue(record(clock.now_unix_ms(), "first-of-dec", Settlement::Ok));
    flushed(&writer).await;

    let nov = lines(&tmp.path().join("2026-11-30.jsonl"));
    let dec = lines(&tmp.path().join("2026-12-01.jsonl"));
    assert_eq!(nov.len(), 1);
    assert_eq!(nov[0]["callId"], "last-of-nov");
    assert_eq!(nov[0]["ts"], "2026-11-30T23:59:59.999Z");
    assert_eq!(dec.len(), 1);
    assert_eq!(dec[0]["ts"], "2026-12-01T00:00:00.000Z");
}

#[tokio::test]
async fn mode_is_reapplied_after_every_append() {
    let tmp = temp();
    let day = tmp.path().join("2026-11-30.jsonl");
    std::fs::write(&day, b"").unwrap();
    std::fs::set_permissions(&day, std::fs::Permissions::from_mode(0o644)).unwrap();
    let writer = AuditWriter::start(tmp.path(), 30);
    writer.enqueue(record(TS, "a", Settlement::Ok));
    flushed(&writer).await;
    assert_eq!(mode_of(&day), 0o600);
    assert_eq!(lines(&day).len(), 1);

    std::fs::set_permissions(&day, std::fs::Permissions::from_mode(0o666)).unwrap();
    writer.enqueue(record(TS, "b", Settlement::Ok));
    flushed(&writer).await;
    assert_eq!(mode_of(&day), 0o600);
    assert_eq!(lines(&day).len(), 2);
}

#[tokio::test]
async fn write_failures_are_counted_and_later_records_still_land() {
    let tmp = temp();
    // A directory and a symlink where day files should be: open fails for both (the symlink
    // is refused, not followed).
    std::fs::create_dir(tmp.path().join("2026-11-30.jsonl")).unwrap();
    let target = tmp.path().join("target");
    symlink(&target, tmp.path().join("2026-11-29.jsonl")).unwrap();

    let writer = AuditWriter::start(tmp.path(), 30);
    writer.enqueue(record(TS, "into-a-directory", Settlement::Ok));
    writer.enqueue(record(TS - DAY_MS, "through-a-symlink", Settlement::Ok));
    writer.enqueue(record(DEC_1, "fine", Settlement::Ok));
    flushed(&writer).await;

    assert_eq!(writer.failed_writes(), 2);
    assert!(!target.exists(), "the symlink must not be followed");
    assert_eq!(lines(&tmp.path().join("2026-12-01.jsonl")).len(), 1);
    assert_eq!(writer.status().failed_writes, 2);
}

#[tokio::test]
async fn a_missing_directory_fails_writes_and_hides_files_and_bytes() {
    let tmp = temp();
    let gone = tmp.path().join("no-such-dir");
    let writer = AuditWriter::start(&gone, 7);
    writer.enqueue(record(TS, "a", Settlement::Ok));
    flushed(&writer).await;
    assert_eq!(writer.failed_writes(), 1);

    let status = writer.status();
    assert_eq!(status.files, None);
    assert_eq!(status.bytes, None);
    assert_eq!(
        serde_json::to_value(&status).unwrap(),
        json!({"path": gone.display().to_string(), "failedWrites": 1, "failedPrunes": 0,
               "retentionDays": 7})
    );
}

#[tokio::test]
async fn a_full_queue_drops_records_and_counts_them() {
    let tmp = temp();
    let writer = AuditWriter::start_with_capacity(tmp.path(), 30, 2);
    // The writer task cannot run between these calls (single-threaded runtime, no await).
    for i in 0..5 {
        writer.enqueue(record(TS, &format!("c{i}"), Settlement::Ok));
    }
    assert_eq!(writer.failed_writes(), 3);
    flushed(&writer).await;
    let ids: Vec<Value> = lines(&tmp.path().join("2026-11-30.jsonl"))
        .into_iter()
        .map(|v| v["callId"].clone())
        .collect();
    assert_eq!(ids, vec![json!("c0"), json!("c1")]);
    assert_eq!(writer.failed_writes(), 3);
}

#[test]
fn flush_times_out_while_the_writer_cannot_run_then_drains() {
    let tmp = temp();
    // The writer lives on a runtime nobody drives yet, so its queue cannot drain.
    let writer_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let writer = writer_rt.block_on(async { AuditWriter::start(tmp.path(), 30) });
    writer.enqueue(record(TS, "a", Settlement::Ok));

    let caller_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let wait = Duration::from_millis(20);
    assert_eq!(
        caller_rt.block_on(writer.flush(wait)),
        Err(FlushError::Timeout(wait))
    );
    assert!(!tmp.path().join("2026-11-30.jsonl").exists());

    // Once the writer runs, the same record is written and a flush completes.
    assert_eq!(
        writer_rt.block_on(writer.flush(SHUTDOWN_FLUSH_TIMEOUT)),
        Ok(())
    );
    assert_eq!(lines(&tmp.path().join("2026-11-30.jsonl")).len(), 1);
}

#[tokio::test]
async fn a_fifo_under_a_day_file_name_fails_instead_of_hanging() {
    let tmp = temp();
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        tmp.path().join("2026-11-30.jsonl"),
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    let writer = AuditWriter::start(tmp.path(), 30);
    writer.enqueue(record(TS, "a", Settlement::Ok));
    flushed(&writer).await;
    assert_eq!(writer.failed_writes(), 1);
}

#[tokio::test]
async fn status_counts_day_files_and_their_bytes() {
    let tmp = temp();
    std::fs::write(tmp.path().join("notes.txt"), b"not a day file").unwrap();
    let writer = AuditWriter::start(tmp.path(), 30);
    writer.enqueue(record(TS, "a", Settlement::Ok));
    writer.enqueue(record(DEC_1, "b", Settlement::Ok));
    flushed(&writer).await;
    let bytes: u64 = ["2026-11-30.jsonl", "2026-12-01.jsonl"]
        .iter()
        .map(|n| std::fs::metadata(tmp.path().join(n)).unwrap().len())
        .sum();
    let status = writer.status();
    assert_eq!(status.path, tmp.path().display().to_string());
    assert_eq!(status.retention_days, 30);
    assert_eq!(status.files, Some(2));
    assert_eq!(status.bytes, Some(bytes));
    assert_eq!((status.failed_writes, status.failed_prunes), (0, 0));
}

// ---------------------------------------------------------------------------------------------
// Retention

fn touch(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, b"{}\n").unwrap();
    path
}

#[tokio::test]
async fn prune_example_of_9_6() {
    let tmp = temp();
    let dir = tmp.path();
    // Every day from 2026-10-01 through 2026-11-30.
    let first = 1_790_812_800_000; // 2026-10-01T00:00:00Z
    let mut all = Vec::new();
    let mut day = first;
    while day <= TS {
        let name = appduct_daemon::audit::day_file_name(day);
        touch(dir, &name);
        all.push(name);
        day += DAY_MS;
    }
    assert_eq!(all.len(), 61);
    touch(dir, "notes.txt");
    touch(dir, "2026-02-30.jsonl");
    touch(dir, "2026-10-01.jsonl.bak");
    std::fs::create_dir(dir.join("2020-01-01.jsonl")).unwrap();
    let outside = temp();
    let outside_file = touch(outside.path(), "keep.jsonl");
    symlink(&outside_file, dir.join("2020-01-02.jsonl")).unwrap();

    let writer = AuditWriter::start(dir, 30);
    let report = writer.prune(TS).await.unwrap();
    assert_eq!(report.failed, 0);
    let mut removed = report.removed.clone();
    removed.sort();
    let want: Vec<String> = all
        .iter()
        .filter(|n| n.as_str() <= "2026-10-30.jsonl")
        .cloned()
        .collect();
    assert_eq!(removed, want);
    assert_eq!(want.last().unwrap(), "2026-10-30.jsonl");

    let kept_days: Vec<&String> = all.iter().filter(|n| dir.join(n).exists()).collect();
    assert_eq!(kept_days.len(), 31);
    assert_eq!(kept_days[0], "2026-10-31.jsonl");
    for other in [
        "notes.txt",
        "2026-02-30.jsonl",
        "2026-10-01.jsonl.bak",
        "2020-01-01.jsonl",
    ] {
        assert!(dir.join(other).exists(), "{other} must be kept");
    }
    assert!(std::fs::symlink_metadata(dir.join("2020-01-02.jsonl")).is_ok());
    assert!(outside_file.exists());
    assert_eq!(writer.failed_prunes(), 0);
}

#[tokio::test]
async fn an_unreadable_directory_counts_a_failed_prune() {
    let tmp = temp();
    let writer = AuditWriter::start(tmp.path().join("missing"), 30);
    let report = writer.prune(TS).await.unwrap();
    assert_eq!(report.failed, 1);
    assert_eq!(writer.failed_prunes(), 1);
    assert_eq!(writer.status().failed_prunes, 1);
}

#[tokio::test(start_paused = true)]
async fn schedule_prunes_at_start_and_every_24_hours() {
    let tmp = temp();
    let dir = tmp.path();
    let clock = ManualClock::new(TS);
    let writer = AuditWriter::start(dir, 1);
    let mut passes = writer.prune_passes();

    // 2026-11-28 is older than today (11-30) − 1 day; 11-29 is not.
    let old = touch(dir, "2026-11-28.jsonl");
    let yesterday = touch(dir, "2026-11-29.jsonl");
    let schedule = writer.spawn_prune_schedule(Arc::new(clock.clone()) as Arc<dyn Clock>);

    passes.wait_for(|n| *n >= 1).await.unwrap();
    assert!(!old.exists());
    assert!(yesterday.exists());

    // A day later by both clocks, 11-29 has become old.
    clock.advance(Duration::from_millis(DAY_MS));
    tokio::time::advance(PRUNE_PERIOD).await;
    passes.wait_for(|n| *n >= 2).await.unwrap();
    assert!(!yesterday.exists());

    // Stopped: no more passes, however long the daemon keeps running.
    schedule.stop();
    let stale = touch(dir, "2026-11-01.jsonl");
    tokio::time::advance(PRUNE_PERIOD * 3).await;
    flushed(&writer).await;
    assert_eq!(*passes.borrow(), 2);
    assert!(stale.exists());
}
