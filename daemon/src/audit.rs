//! The audit log (§C12): one JSON line per audited `tools.call`, in day files
//! `<state-dir>/audit/<YYYY-MM-DD>.jsonl` (UTC date of the record's `ts`), mode 0600.
//!
//! Recording never blocks or fails a call: [`AuditWriter::enqueue`] puts the record on a
//! bounded queue (10 000 records; a full queue drops the record and counts a failed write) and
//! one writer task appends records in enqueue order. File work runs in short `spawn_blocking`
//! batches, which keeps the async runtime free and lets paused-time tests auto-advance around
//! it. Pruning (§C12.1) runs on the same queue, so it never races a write.

use appduct_client::platform::fs::PermissionsExt;
use std::fs::File;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use appduct_protocol::control::{
    AuditStatus, CallOutcome, Caller, Consent, DeniedReason, Settlement,
};
use appduct_protocol::errors::ErrorType;
use serde::Serialize;
use time::{Date, Month, OffsetDateTime, PrimitiveDateTime};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::clock::Clock;
use appduct_client::state_dir::{self, FILE_MODE, StateDir, StateDirError};

/// Records the queue holds before new ones are dropped (§C12.1).
pub const AUDIT_QUEUE_CAPACITY: usize = 10_000;
/// Interval between prunes after the one at start (§C12.1).
pub const PRUNE_PERIOD: Duration = Duration::from_secs(24 * 60 * 60);
/// How long shutdown waits for the queue to drain (§C8.3 step 7).
pub const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// Records appended per blocking batch; bounds how long one batch holds a blocking thread.
const MAX_BATCH: usize = 512;
/// How long the writer waits after the first record of a batch before writing it.
const COALESCE: Duration = Duration::from_millis(5);

// ---------------------------------------------------------------------------------------------
// Records

/// The audit record's `transport` for a call through the loopback HTTP API or `/mcp` (§C12.1).
pub const TRANSPORT_HTTP: &str = "http";

/// One audit record (§C12.1). Holds the arguments' hash only, never the arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// Settle instant, wall clock.
    pub ts_unix_ms: u64,
    pub call_id: String,
    pub session_id: String,
    /// The session's alias at call time.
    pub alias: String,
    /// The requested name, also when the tool was not found.
    pub tool: String,
    /// `appduct_protocol::canonical::args_sha256` of the defaulted arguments (§C12.2).
    pub args_sha256: String,
    /// Gives `outcome`, and `errorType` / `deniedReason` exactly when the outcome carries them.
    pub settlement: Settlement,
    pub duration_ms: u64,
    pub caller: Caller,
    /// `Some("http")` for a call that came through the loopback HTTP API or `/mcp`: how the
    /// caller's connection reached the daemon, which the caller cannot choose (§C12.1).
    pub transport: Option<&'static str>,
    /// `Some` only when a `prompt` decision was satisfied by consent
    /// ([`crate::policy::Permit::consent`]).
    pub consent: Option<Consent>,
    /// Only for a call that was parked for an operator or ran under a grant (§C11.1).
    pub operator: Option<OperatorRecord>,
    /// Issue #17 (§D17): type, image mime type and size of each content block of an `ok`
    /// result that carried content; never the data.
    pub content_summary: Option<Vec<appduct_protocol::content::ContentSummary>>,
}

/// The `operator` key of an audit record (§C12.1): which approval or grant, how it ended, who
/// decided. Never the one-time code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorRecord {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
    /// `approved`, `denied`, `expired`, `cancelled` or `granted`.
    pub decision: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<appduct_protocol::control::Decider>,
    /// `wrong_code` when wrong codes denied the approval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// The terminal the one-time code of an approval was written to (SECURITY.md §4.18).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminal: Option<String>,
}

/// The wire line; field order is the table order of §C12.1 (stable diffs).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AuditLine<'a> {
    ts: &'a str,
    call_id: &'a str,
    session_id: &'a str,
    alias: &'a str,
    tool: &'a str,
    #[serde(rename = "argsSha256")]
    args_sha256: &'a str,
    outcome: CallOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_type: Option<ErrorType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    denied_reason: Option<DeniedReason>,
    duration_ms: u64,
    caller: Caller,
    #[serde(skip_serializing_if = "Option::is_none")]
    transport: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    consent: Option<Consent>,
    #[serde(skip_serializing_if = "Option::is_none")]
    operator: Option<&'a OperatorRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_summary: Option<&'a [appduct_protocol::content::ContentSummary]>,
}

/// An audit record as borrowed fields: what the calls module hands the writer at settling, so
/// no string of the call is copied; the line is built right away (one allocation).
#[derive(Debug, Clone, Copy)]
pub struct AuditEntry<'a> {
    pub ts_unix_ms: u64,
    pub call_id: &'a str,
    pub session_id: &'a str,
    pub alias: &'a str,
    pub tool: &'a str,
    pub args_sha256: &'a str,
    pub settlement: Settlement,
    pub duration_ms: u64,
    pub caller: Caller,
    pub transport: Option<&'static str>,
    pub consent: Option<Consent>,
    pub operator: Option<&'a OperatorRecord>,
    pub content_summary: Option<&'a [appduct_protocol::content::ContentSummary]>,
}

/// Bytes reserved for one line: a typical record fits without growing the buffer.
const LINE_CAPACITY: usize = 320;

impl AuditEntry<'_> {
    /// The compact JSON object followed by `\n`.
    pub fn to_line(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(LINE_CAPACITY);
        self.write_line(&mut bytes);
        bytes
    }

    /// [`Self::to_line`] appended to `bytes`.
    fn write_line(&self, bytes: &mut Vec<u8>) {
        let (outcome, error_type, denied_reason) = self.settlement.fields();
        let ts = TsText::new(self.ts_unix_ms);
        let line = AuditLine {
            ts: ts.as_str(),
            call_id: self.call_id,
            session_id: self.session_id,
            alias: self.alias,
            tool: self.tool,
            args_sha256: self.args_sha256,
            outcome,
            error_type,
            denied_reason,
            duration_ms: self.duration_ms,
            caller: self.caller,
            transport: self.transport,
            consent: self.consent,
            operator: self.operator,
            content_summary: self.content_summary,
        };
        // Strings, integers, unit enums and string maps only: serialising cannot fail.
        let _ = serde_json::to_writer(&mut *bytes, &line);
        bytes.push(b'\n');
    }
}

impl AuditRecord {
    /// The record as borrowed fields.
    pub fn entry(&self) -> AuditEntry<'_> {
        AuditEntry {
            ts_unix_ms: self.ts_unix_ms,
            call_id: &self.call_id,
            session_id: &self.session_id,
            alias: &self.alias,
            tool: &self.tool,
            args_sha256: &self.args_sha256,
            settlement: self.settlement,
            duration_ms: self.duration_ms,
            caller: self.caller,
            transport: self.transport,
            consent: self.consent,
            operator: self.operator.as_ref(),
            content_summary: self.content_summary.as_deref(),
        }
    }

    /// The compact JSON object followed by `\n`.
    pub fn to_line(&self) -> String {
        String::from_utf8(self.entry().to_line()).unwrap_or_default()
    }

    /// `<YYYY-MM-DD>.jsonl` for the UTC date of `ts`.
    pub fn day_file_name(&self) -> String {
        day_file_name(self.ts_unix_ms)
    }
}

// ---------------------------------------------------------------------------------------------
// Dates (private helpers: nothing shared formats instants yet)

fn to_utc(unix_ms: u64) -> OffsetDateTime {
    let nanos = i128::from(unix_ms) * 1_000_000;
    // Past year 9999 (a broken clock) the latest representable instant is used.
    OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .unwrap_or_else(|_| PrimitiveDateTime::MAX.assume_utc())
}

/// ISO 8601 UTC with milliseconds, `2026-11-30T09:14:22.518Z` (§C8).
pub use appduct_client::timestamp::format_iso_ms as format_ts;

/// Milliseconds in a UTC day (no leap seconds in unix time).
const DAY_MS: u64 = 86_400_000;
/// `10000-01-01T00:00:00Z`: from here on [`TsText`] leaves the text to [`format_ts`], which
/// clamps (a broken clock).
const YEAR_10000_MS: u64 = 253_402_300_800_000;

/// Year, month (1–12) and day of the month of the `days`-th day after 1970-01-01 (the
/// proleptic Gregorian calendar, in eras of 400 years).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Writes `value` as `out.len()` decimal digits, zero-padded.
fn put_digits(out: &mut [u8], mut value: u64) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// [`format_ts`] on the stack, without the `fmt` machinery or the calendar crate: the audit
/// line's `ts` is written for every settled call (issue #24).
struct TsText {
    bytes: [u8; 24],
    /// Past year 9999: [`format_ts`]'s clamped text instead.
    slow: Option<String>,
}

impl TsText {
    fn new(unix_ms: u64) -> Self {
        let mut bytes = *b"0000-00-00T00:00:00.000Z";
        if unix_ms >= YEAR_10000_MS {
            return Self {
                bytes,
                slow: Some(format_ts(unix_ms)),
            };
        }
        let (year, month, day) = civil_from_days(unix_ms / DAY_MS);
        let in_day = unix_ms % DAY_MS;
        put_digits(&mut bytes[0..4], year);
        put_digits(&mut bytes[5..7], month);
        put_digits(&mut bytes[8..10], day);
        put_digits(&mut bytes[11..13], in_day / 3_600_000);
        put_digits(&mut bytes[14..16], in_day / 60_000 % 60);
        put_digits(&mut bytes[17..19], in_day / 1_000 % 60);
        put_digits(&mut bytes[20..23], in_day % 1_000);
        Self { bytes, slow: None }
    }

    fn as_str(&self) -> &str {
        match &self.slow {
            Some(text) => text,
            // ASCII digits and separators only.
            None => std::str::from_utf8(&self.bytes).unwrap_or_default(),
        }
    }
}

fn format_date(date: Date) -> String {
    format!(
        "{:04}-{:02}-{:02}",
        date.year(),
        u8::from(date.month()),
        date.day()
    )
}

/// `<YYYY-MM-DD>.jsonl` for the UTC date of `unix_ms` (§C12.1).
pub fn day_file_name(unix_ms: u64) -> String {
    format!("{}.jsonl", format_date(to_utc(unix_ms).date()))
}

/// The date of a name that is exactly `YYYY-MM-DD.jsonl` with a valid calendar date.
fn parse_day_file_name(name: &str) -> Option<Date> {
    let stem = name.strip_suffix(".jsonl")?;
    let b = stem.as_bytes();
    let shape_ok = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
    if !shape_ok {
        return None;
    }
    let year: i32 = stem[0..4].parse().ok()?;
    let month: u8 = stem[5..7].parse().ok()?;
    let day: u8 = stem[8..10].parse().ok()?;
    Date::from_calendar_date(year, Month::try_from(month).ok()?, day).ok()
}

// ---------------------------------------------------------------------------------------------
// The writer

/// What a prune did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// File names deleted, in directory order.
    pub removed: Vec<String>,
    /// Deletions that failed (each also counted in `failedPrunes`).
    pub failed: u64,
}

/// Why [`AuditWriter::flush`] returned before the queue drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FlushError {
    #[error("the audit queue did not drain within {0:?}")]
    Timeout(Duration),
    #[error("the audit writer has stopped")]
    Closed,
}

/// The audit writer has stopped (its runtime shut down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the audit writer has stopped")]
pub struct WriterClosed;

enum Command {
    /// A formatted line and the UTC day (days since 1970-01-01) of its `ts`, which names its
    /// file.
    Line {
        day: u64,
        line: Vec<u8>,
    },
    Prune {
        now_unix_ms: u64,
        done: oneshot::Sender<PruneReport>,
    },
    Flush(oneshot::Sender<()>),
}

#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    retention_days: u32,
    failed_writes: AtomicU64,
    failed_prunes: AtomicU64,
    /// Set while records are being dropped, so a full queue warns once per episode.
    overflowing: AtomicBool,
    /// Completed prune passes, for [`AuditWriter::prune_passes`].
    prune_passes: watch::Sender<u64>,
    /// Line buffers of written batches, for the next records (issue #24: no allocation per
    /// record once warm). At most [`SPARE_LINES`], each at most [`SPARE_LINE_BYTES`].
    spare: std::sync::Mutex<Vec<Vec<u8>>>,
}

/// Emptied line buffers kept for reuse.
const SPARE_LINES: usize = 256;
/// A line buffer grown past this is freed instead of kept.
const SPARE_LINE_BYTES: usize = 4096;

impl Shared {
    fn spare(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.spare
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps the line buffers of a written batch, emptied, for later records.
    fn give_back(&self, batch: Vec<(u64, Vec<u8>)>) {
        let mut spare = self.spare();
        for (_, mut line) in batch {
            if spare.len() >= SPARE_LINES {
                break;
            }
            if line.capacity() <= SPARE_LINE_BYTES {
                line.clear();
                spare.push(line);
            }
        }
    }
}

/// Handle to the audit writer task. Clones share the queue and the counters.
#[derive(Debug, Clone)]
pub struct AuditWriter {
    tx: mpsc::Sender<Command>,
    shared: Arc<Shared>,
}

impl AuditWriter {
    /// Creates `<state-dir>/audit/` (0700, §C12.1) and starts the writer. Must be called
    /// inside a tokio runtime.
    pub fn open(state_dir: &StateDir, retention_days: u32) -> Result<Self, StateDirError> {
        let dir = state_dir.ensure_audit_dir()?;
        Ok(Self::start(dir, retention_days))
    }

    /// Starts the writer on an existing directory. Must be called inside a tokio runtime.
    pub fn start(dir: impl Into<PathBuf>, retention_days: u32) -> Self {
        Self::start_with_capacity(dir, retention_days, AUDIT_QUEUE_CAPACITY)
    }

    /// [`AuditWriter::start`] with another queue bound (tests).
    pub fn start_with_capacity(
        dir: impl Into<PathBuf>,
        retention_days: u32,
        capacity: usize,
    ) -> Self {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let shared = Arc::new(Shared {
            dir: dir.into(),
            retention_days,
            failed_writes: AtomicU64::new(0),
            failed_prunes: AtomicU64::new(0),
            overflowing: AtomicBool::new(false),
            prune_passes: watch::Sender::new(0),
            spare: std::sync::Mutex::new(Vec::new()),
        });
        tokio::spawn(run(rx, Arc::clone(&shared)));
        AuditWriter { tx, shared }
    }

    /// The audit directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    pub fn retention_days(&self) -> u32 {
        self.shared.retention_days
    }

    /// Queues `record` for writing (step 3 of settling, §C10.1). Never blocks and never fails
    /// the call: a full or closed queue drops the record and counts a failed write.
    pub fn enqueue(&self, record: AuditRecord) {
        self.enqueue_entry(&record.entry());
    }

    /// [`enqueue`](Self::enqueue) from borrowed fields: the line is formatted here, in one
    /// allocation, and nothing else of the call is copied (issue #24).
    pub fn enqueue_entry(&self, entry: &AuditEntry<'_>) {
        let mut line = self
            .shared
            .spare()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(LINE_CAPACITY));
        entry.write_line(&mut line);
        let command = Command::Line {
            day: entry.ts_unix_ms / DAY_MS,
            line,
        };
        match self.tx.try_send(command) {
            Ok(()) => self.shared.overflowing.store(false, Ordering::Relaxed),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.shared.failed_writes.fetch_add(1, Ordering::Relaxed);
                if !self.shared.overflowing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "audit queue for {} is full; dropping audit records until it drains",
                        self.shared.dir.display()
                    );
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.shared.failed_writes.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "audit writer for {} has stopped; dropping an audit record",
                    self.shared.dir.display()
                );
            }
        }
    }

    /// Waits until every record enqueued before this call has been written (or has failed),
    /// at most `timeout` (§C12.1; shutdown uses [`SHUTDOWN_FLUSH_TIMEOUT`]).
    pub async fn flush(&self, timeout: Duration) -> Result<(), FlushError> {
        let drained = async {
            let (done, wait) = oneshot::channel();
            self.tx
                .send(Command::Flush(done))
                .await
                .map_err(|_| FlushError::Closed)?;
            wait.await.map_err(|_| FlushError::Closed)
        };
        tokio::time::timeout(timeout, drained)
            .await
            .map_err(|_| FlushError::Timeout(timeout))?
    }

    /// Runs one prune on the writer's queue for "today" = the UTC date of `now_unix_ms`
    /// (§C12.1) and waits for it.
    pub async fn prune(&self, now_unix_ms: u64) -> Result<PruneReport, WriterClosed> {
        let (done, wait) = oneshot::channel();
        self.tx
            .send(Command::Prune { now_unix_ms, done })
            .await
            .map_err(|_| WriterClosed)?;
        wait.await.map_err(|_| WriterClosed)
    }

    /// Prunes now and then every 24 h (§S3.5 step 10), reading "today" from `clock`. The
    /// daemon stops the schedule first at shutdown (§C8.3 step 1); dropping it stops it too.
    pub fn spawn_prune_schedule(&self, clock: Arc<dyn Clock>) -> PruneSchedule {
        let writer = self.clone();
        let task = tokio::spawn(async move {
            let mut interval = tokio::time::interval(PRUNE_PERIOD);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                if writer.prune(clock.now_unix_ms()).await.is_err() {
                    return;
                }
            }
        });
        PruneSchedule { task }
    }

    /// The number of completed prune passes (scheduled or not), so tests and callers can wait
    /// for the schedule instead of sleeping.
    pub fn prune_passes(&self) -> watch::Receiver<u64> {
        self.shared.prune_passes.subscribe()
    }

    pub fn failed_writes(&self) -> u64 {
        self.shared.failed_writes.load(Ordering::Relaxed)
    }

    pub fn failed_prunes(&self) -> u64 {
        self.shared.failed_prunes.load(Ordering::Relaxed)
    }

    /// `daemon.status.audit` (§C8.2). Reads the directory: `files` and `bytes` count the day
    /// files and are omitted when it cannot be read.
    pub fn status(&self) -> AuditStatus {
        let scan = scan_day_files(&self.shared.dir);
        AuditStatus::new(
            self.shared.dir.display().to_string(),
            self.failed_writes(),
            self.failed_prunes(),
            self.shared.retention_days,
        )
        .with_files(scan.map(|(files, _)| files))
        .with_bytes(scan.map(|(_, bytes)| bytes))
    }
}

/// The running prune schedule; stopping or dropping it cancels future prunes.
#[derive(Debug)]
pub struct PruneSchedule {
    task: JoinHandle<()>,
}

impl PruneSchedule {
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for PruneSchedule {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(mut rx: mpsc::Receiver<Command>, shared: Arc<Shared>) {
    // A non-record command read while collecting a batch, handled right after that batch so
    // the queue order holds.
    let mut held: Option<Command> = None;
    loop {
        let command = match held.take() {
            Some(command) => command,
            None => match rx.recv().await {
                Some(command) => command,
                None => return,
            },
        };
        match command {
            Command::Line { day, line } => {
                // Let a burst of calls gather into one batch: one blocking-pool hop and one
                // open of the day file per window instead of per call.
                tokio::time::sleep(COALESCE).await;
                let mut batch = vec![(day, line)];
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(Command::Line { day, line }) => batch.push((day, line)),
                        Ok(other) => {
                            held = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let count = batch.len() as u64;
                let dir = shared.dir.clone();
                let written = tokio::task::spawn_blocking(move || {
                    let failed = write_batch(&dir, &batch);
                    (failed, batch)
                })
                .await;
                let failed = match written {
                    Ok((failed, batch)) => {
                        shared.give_back(batch);
                        failed
                    }
                    Err(e) => {
                        tracing::warn!("audit batch for {} was lost: {e}", shared.dir.display());
                        count
                    }
                };
                shared.failed_writes.fetch_add(failed, Ordering::Relaxed);
            }
            Command::Prune { now_unix_ms, done } => {
                let dir = shared.dir.clone();
                let retention = shared.retention_days;
                let report =
                    tokio::task::spawn_blocking(move || prune_dir(&dir, now_unix_ms, retention))
                        .await
                        .unwrap_or_else(|e| {
                            tracing::warn!(
                                "audit prune of {} did not run: {e}",
                                shared.dir.display()
                            );
                            PruneReport {
                                removed: Vec::new(),
                                failed: 1,
                            }
                        });
                shared
                    .failed_prunes
                    .fetch_add(report.failed, Ordering::Relaxed);
                shared.prune_passes.send_modify(|n| *n += 1);
                let _ = done.send(report);
            }
            Command::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// Appends each line to its day file; returns how many failed. Each day file gets its lines
/// in one append and one mode check per batch (not per record); a failure counts every record
/// of that file and logs one warning naming the path and the OS error.
fn write_batch(dir: &Path, batch: &[(u64, Vec<u8>)]) -> u64 {
    // Day files in first-seen order; a batch normally spans one day, so its name is formatted
    // once per batch.
    let mut days: Vec<(u64, Vec<u8>, u64)> = Vec::new();
    for (day, line) in batch {
        let at = match days.iter().position(|(d, _, _)| d == day) {
            Some(at) => at,
            None => {
                let bytes: usize = batch.iter().map(|(_, l)| l.len()).sum();
                days.push((*day, Vec::with_capacity(bytes), 0));
                days.len() - 1
            }
        };
        let (_, lines, count) = &mut days[at];
        lines.extend_from_slice(line);
        *count += 1;
    }
    let mut failed = 0;
    for (day, lines, count) in days {
        let path = dir.join(day_file_name(day.saturating_mul(DAY_MS)));
        let mut file = match open_day_file(&path) {
            Ok(file) => file,
            Err(e) => {
                tracing::warn!("cannot open audit file {}: {e}", path.display());
                failed += count;
                continue;
            }
        };
        // Whole lines in one append, so lines never interleave.
        if let Err(e) = file.write_all(&lines) {
            tracing::warn!("cannot append to audit file {}: {e}", path.display());
            failed += count;
            continue;
        }
        if let Err(e) = enforce_file_mode(&file) {
            tracing::warn!("cannot chmod audit file {} to 0600: {e}", path.display());
            failed += count;
        }
    }
    failed
}

/// Opens a day file for append through [`state_dir::open_append`]: 0600, `O_NOFOLLOW`,
/// `O_NONBLOCK` (a FIFO planted under a day file's name fails at once instead of hanging the
/// writer and with it the daemon's exit), and refused unless it is a regular file of ours with
/// one link. A refused file is never written: its records count as failed writes with one
/// warning naming the file per batch (§C12.1), and the daemon keeps serving (SECURITY.md 4.5).
fn open_day_file(path: &Path) -> io::Result<File> {
    state_dir::open_append(path)
}

/// 0600 after every append (§C12.1); through the descriptor, so no path race.
fn enforce_file_mode(file: &File) -> io::Result<()> {
    let mode = file.metadata()?.permissions().mode() & 0o7777;
    if mode != FILE_MODE {
        appduct_client::platform::fchmod(file, FILE_MODE)?;
    }
    Ok(())
}

/// Deletes regular day files dated before (today − `retention_days`) (§C12.1). Anything else
/// in the directory is left alone.
fn prune_dir(dir: &Path, now_unix_ms: u64, retention_days: u32) -> PruneReport {
    let mut report = PruneReport::default();
    let today = to_utc(now_unix_ms).date();
    let Some(cutoff) = today.checked_sub(time::Duration::days(i64::from(retention_days))) else {
        // The cutoff is before the first representable date: nothing is old enough.
        return report;
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(
                "cannot read audit directory {} to prune it: {e}",
                dir.display()
            );
            report.failed += 1;
            return report;
        }
    };
    for entry in entries.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let Some(date) = parse_day_file_name(&name) else {
            continue;
        };
        // `file_type` does not follow symlinks: a link named like a day file is kept.
        if date >= cutoff || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => report.removed.push(name),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(
                    "cannot delete old audit file {}: {e}",
                    entry.path().display()
                );
                report.failed += 1;
            }
        }
    }
    report
}

/// `(files, bytes)` of the regular day files, or `None` when the directory cannot be read.
fn scan_day_files(dir: &Path) -> Option<(u64, u64)> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut files = 0;
    let mut bytes = 0;
    for entry in entries.flatten() {
        let is_day_file = entry
            .file_name()
            .to_str()
            .and_then(parse_day_file_name)
            .is_some();
        if !is_day_file {
            continue;
        }
        match entry.metadata() {
            Ok(meta) if meta.is_file() => {
                files += 1;
                bytes += meta.len();
            }
            _ => {}
        }
    }
    Some((files, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #24: the line buffers of written batches are reused, bounded in number and size,
    /// and every record still reaches its day file whole and in order.
    #[tokio::test]
    async fn audit_line_buffers_are_reused_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let writer = AuditWriter::start(dir.path(), 30);
        let big = "t".repeat(2 * SPARE_LINE_BYTES);
        let ts = 1_796_030_062_518;
        let mut expected = Vec::new();
        for round in 0..3 {
            for i in 0..2 * SPARE_LINES {
                let call_id = format!("call_{round}_{i}");
                let entry = AuditEntry {
                    ts_unix_ms: ts,
                    call_id: &call_id,
                    session_id: "q3VfZ0xkR2ptTnB4",
                    alias: "pixel-8",
                    tool: if i == 0 { &big } else { "echo" },
                    args_sha256: "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
                    settlement: appduct_protocol::control::Settlement::Ok,
                    duration_ms: 1,
                    caller: appduct_protocol::control::Caller::Cli,
                    transport: None,
                    consent: None,
                    operator: None,
                    content_summary: None,
                };
                writer.enqueue_entry(&entry);
                expected.extend(entry.to_line());
            }
            writer.flush(SHUTDOWN_FLUSH_TIMEOUT).await.unwrap();
            let spare = writer.shared.spare();
            assert!(!spare.is_empty(), "written lines are kept");
            assert!(spare.len() <= SPARE_LINES);
            assert!(
                spare
                    .iter()
                    .all(|b| b.is_empty() && b.capacity() <= SPARE_LINE_BYTES)
            );
        }
        let written = std::fs::read(dir.path().join(day_file_name(ts))).unwrap();
        assert!(
            written == expected,
            "the day file holds every line in order"
        );
    }

    #[test]
    fn ts_is_iso_utc_with_milliseconds() {
        assert_eq!(format_ts(0), "1970-01-01T00:00:00.000Z");
        // 2026-11-30T09:14:22.518Z
        assert_eq!(format_ts(1_796_030_062_518), "2026-11-30T09:14:22.518Z");
        assert_eq!(format_ts(u64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn the_stack_timestamp_matches_the_calendar_crate() {
        let mut samples = vec![
            0,
            1,
            999,
            DAY_MS - 1,
            DAY_MS,
            951_782_400_000, // 2000-02-29
            951_868_799_999,
            1_796_030_062_518,
            4_107_542_399_999, // 2100-02-28T23:59:59.999Z
            4_107_542_400_000,
            YEAR_10000_MS - 1,
            YEAR_10000_MS,
            u64::MAX,
        ];
        // Every day of 1970–2500 at a varying time of day.
        let mut ms = 0u64;
        while ms < 16_725_225_600_000 {
            samples.push(ms);
            ms += DAY_MS + 3_723_456;
        }
        for ms in samples {
            assert_eq!(TsText::new(ms).as_str(), format_ts(ms), "{ms}");
        }
    }

    #[test]
    fn day_file_names_follow_the_utc_date() {
        assert_eq!(day_file_name(1_796_030_062_518), "2026-11-30.jsonl");
        // One millisecond before and at UTC midnight.
        assert_eq!(day_file_name(1_796_083_199_999), "2026-11-30.jsonl");
        assert_eq!(day_file_name(1_796_083_200_000), "2026-12-01.jsonl");
    }

    #[test]
    fn day_file_pattern_accepts_only_valid_calendar_dates() {
        let ok = parse_day_file_name("2026-10-30.jsonl").unwrap();
        assert_eq!(format_date(ok), "2026-10-30");
        assert!(parse_day_file_name("2024-02-29.jsonl").is_some());
        for bad in [
            "2026-02-30.jsonl",
            "2025-02-29.jsonl",
            "2026-13-01.jsonl",
            "2026-00-10.jsonl",
            "2026-1-01.jsonl",
            "2026-10-30.json",
            "2026-10-30.jsonl.bak",
            "x2026-10-30.jsonl",
            "2026_10_30.jsonl",
            "+026-10-30.jsonl",
            "notes.txt",
            "",
        ] {
            assert!(parse_day_file_name(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn cutoff_overflow_prunes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("2000-01-01.jsonl"), b"").unwrap();
        let report = prune_dir(tmp.path(), 1_796_030_062_518, u32::MAX);
        assert_eq!(report, PruneReport::default());
        assert!(tmp.path().join("2000-01-01.jsonl").exists());
    }
}
