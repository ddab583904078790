//! `appduct audit` (§L1): reads the audit day files (§C12.1) straight from the state
//! directory. The daemon's audit writer stays their only writer; this command only reads, so
//! it works whether or not the daemon runs.
//!
//! - Filters: `--since` (a duration back from now, `90s` `15m` `1h` `2d`, or an RFC 3339
//!   instant), `--session` (session id or the alias recorded at call time), `--tool` (a name or
//!   a glob, §C13.5) and `--outcome` (`ok`, `error`, `denied`, `cancelled`).
//! - Output: human, one aligned line per record (time, alias, tool, outcome, duration,
//!   caller); `--json`, one envelope `{ok, data: {records, malformed}}` whose records are the
//!   stored objects unchanged (key order kept).
//! - `--follow`: prints the matching records already stored (only with `--since`; without it
//!   it starts at the current end), then tails the current UTC day file and moves on to the
//!   next day's file at UTC midnight (after reading the old one to its end). Under `--json`
//!   each record is one line (the stored object, JSON lines) and no envelope is printed. Runs
//!   until SIGINT or SIGTERM (exit 0).
//! - A line that is not a JSON object with the record's string fields is skipped and counted;
//!   the count goes to stderr (and `data.malformed`), never a failure.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use appduct_protocol::control::CallOutcome;
use appduct_protocol::glob::Glob;
use clap::Args;
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use super::Command;
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{self, Output, Reply, Success};
use crate::render;
use crate::signals::Interrupts;

/// How often `--follow` looks at the day file for appended records.
const FOLLOW_POLL: Duration = Duration::from_millis(200);
/// The longest audit line read (a record is a few hundred bytes; the daemon writes none near
/// this): a longer line is skipped and counted as malformed, and never held whole.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// Most bytes one `--follow` poll reads; the rest waits for the next poll.
const FOLLOW_READ_BYTES: u64 = 4 << 20;
/// Read size when scanning a day file.
const READ_CHUNK: usize = 64 * 1024;

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only records settled in this window: a duration back from now (90s, 15m, 1h, 2d) or an RFC 3339 time
    #[arg(long, value_name = "DURATION|TIME")]
    pub since: Option<String>,
    /// Only records of this session (session id or the alias at call time)
    #[arg(long, value_name = "S")]
    pub session: Option<String>,
    /// Only records of this tool (a name or a glob: "*" matches any run of characters)
    #[arg(long, value_name = "T")]
    pub tool: Option<String>,
    /// Only records with this outcome: ok, error, denied or cancelled
    #[arg(long, value_name = "O")]
    pub outcome: Option<String>,
    /// Keep printing records as they are written (Ctrl-C to stop)
    #[arg(long, short = 'f')]
    pub follow: bool,
    #[arg(hide = true)]
    pub extra: Vec<OsString>,
}

/// The validated `audit` request.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRequest {
    /// Lower bound on `ts`, unix ms (inclusive).
    pub since: Option<Since>,
    pub session: Option<String>,
    pub tool: Option<Glob>,
    pub outcome: Option<CallOutcome>,
    pub follow: bool,
}

/// `--since` as given: relative (resolved when the command runs) or absolute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    Ago(Duration),
    At(u64),
}

impl Since {
    fn cutoff_ms(self, now_ms: u64) -> u64 {
        match self {
            Since::Ago(d) => {
                now_ms.saturating_sub(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            }
            Since::At(ms) => ms,
        }
    }
}

pub fn validate(a: AuditArgs) -> Result<Command, CliError> {
    if let Some(word) = a.extra.first() {
        return Err(CliError::usage(format!(
            "appduct audit takes no positional arguments (got \"{}\")",
            word.to_string_lossy()
        )));
    }
    let since = a.since.as_deref().map(parse_since).transpose()?;
    let tool = a
        .tool
        .as_deref()
        .map(|t| Glob::new(t).map_err(|e| CliError::usage(format!("--tool: {e}"))))
        .transpose()?;
    let outcome = a.outcome.as_deref().map(parse_outcome).transpose()?;
    let session = match a.session {
        Some(s) if s.is_empty() => return Err(CliError::usage("--session requires a value")),
        s => s,
    };
    Ok(Command::Audit(AuditRequest {
        since,
        session,
        tool,
        outcome,
        follow: a.follow,
    }))
}

/// `90s`, `15m`, `1h`, `2d` (a whole number and one unit) or an RFC 3339 instant.
pub fn parse_since(text: &str) -> Result<Since, CliError> {
    if let Some(d) = parse_duration(text) {
        return Ok(Since::Ago(d));
    }
    if let Some(at) = render::parse_instant(text) {
        let ms = at.unix_timestamp_nanos() / 1_000_000;
        return Ok(Since::At(u64::try_from(ms).unwrap_or(0)));
    }
    Err(CliError::usage(format!(
        "--since must be a duration (90s, 15m, 1h, 2d) or an RFC 3339 time \
         (2026-11-30T09:00:00Z), got \"{text}\""
    )))
}

fn parse_duration(text: &str) -> Option<Duration> {
    let unit = text.chars().last()?;
    let seconds_per = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    let digits = &text[..text.len() - 1];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(Duration::from_secs(n.checked_mul(seconds_per)?))
}

fn parse_outcome(text: &str) -> Result<CallOutcome, CliError> {
    serde_json::from_value(Value::String(text.to_owned())).map_err(|_| {
        CliError::usage(format!(
            "--outcome must be one of ok, error, denied, cancelled, got \"{text}\""
        ))
    })
}

// ---------------------------------------------------------------------------------------------
// Records and filters

/// One stored record: the object as read, plus the fields the filters and the view use.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub raw: Map<String, Value>,
    pub ts_ms: u64,
}

impl Record {
    /// A record from one line; `None` when the line is not a record (§C12.1 fields `ts`,
    /// `sessionId`, `alias`, `tool`, `outcome` as strings, `ts` an RFC 3339 instant).
    pub fn parse(line: &str) -> Option<Record> {
        let Value::Object(raw) = serde_json::from_str::<Value>(line).ok()? else {
            return None;
        };
        for key in ["sessionId", "alias", "tool", "outcome"] {
            raw.get(key)?.as_str()?;
        }
        let ts = render::parse_instant(raw.get("ts")?.as_str()?)?;
        let ts_ms = u64::try_from(ts.unix_timestamp_nanos() / 1_000_000).ok()?;
        Some(Record { raw, ts_ms })
    }

    fn str(&self, key: &str) -> &str {
        self.raw.get(key).and_then(Value::as_str).unwrap_or("")
    }
}

impl AuditRequest {
    /// Whether `record` passes every filter; `cutoff_ms` is the resolved `--since`.
    pub fn matches(&self, record: &Record, cutoff_ms: Option<u64>) -> bool {
        if cutoff_ms.is_some_and(|c| record.ts_ms < c) {
            return false;
        }
        if let Some(s) = &self.session
            && record.str("sessionId") != s
            && record.str("alias") != s
        {
            return false;
        }
        if let Some(g) = &self.tool
            && !g.matches(record.str("tool"))
        {
            return false;
        }
        if let Some(o) = self.outcome
            && record.str("outcome") != o.as_str()
        {
            return false;
        }
        true
    }
}

/// Lines split into records and a count of malformed ones. Blank lines are ignored.
fn parse_lines(text: &str, records: &mut Vec<Record>, malformed: &mut u64) {
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        match Record::parse(line) {
            Some(r) => records.push(r),
            None => *malformed += 1,
        }
    }
}

/// `YYYY-MM-DD.jsonl` for the UTC date of `unix_ms` (the writer's naming, §C12.1).
pub fn day_file_name(unix_ms: u64) -> String {
    let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}.jsonl",
        at.year(),
        u8::from(at.month()),
        at.day()
    )
}

fn is_day_file_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".jsonl") else {
        return false;
    };
    let b = stem.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
}

/// The day file names in `dir`, oldest first; a missing directory has none.
fn day_files(dir: &Path) -> Result<Vec<String>, CliError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(CliError::internal(format!(
                "cannot read the audit directory {}: {e}",
                dir.display()
            )));
        }
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| is_day_file_name(n))
        .collect();
    names.sort();
    Ok(names)
}

/// Splits bytes into lines of at most [`MAX_LINE_BYTES`], holding at most one partial line: a
/// longer line is dropped up to its newline and counted ([`LineScanner::overlong`]).
#[derive(Debug, Default)]
pub struct LineScanner {
    line: Vec<u8>,
    skipping: bool,
    /// Lines skipped for being longer than [`MAX_LINE_BYTES`].
    pub overlong: u64,
}

impl LineScanner {
    /// Feeds `bytes`; `each` gets every complete line, without its `\n`.
    pub fn feed(&mut self, mut bytes: &[u8], each: &mut dyn FnMut(&[u8])) {
        while !bytes.is_empty() {
            let (part, rest, ended) = match bytes.iter().position(|b| *b == b'\n') {
                Some(i) => (&bytes[..i], &bytes[i + 1..], true),
                None => (bytes, &[][..], false),
            };
            bytes = rest;
            if !self.skipping {
                if self.line.len() + part.len() > MAX_LINE_BYTES {
                    self.overlong += 1;
                    self.skipping = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            if ended {
                if !self.skipping {
                    each(&self.line);
                }
                self.line.clear();
                self.skipping = false;
            }
        }
    }

    /// At the end of a file: a last line without `\n` is a line too.
    pub fn finish(&mut self, each: &mut dyn FnMut(&[u8])) {
        if !self.skipping && !self.line.is_empty() {
            each(&self.line);
        }
        self.clear();
    }

    /// Forgets a partial line (the file was replaced).
    pub fn clear(&mut self) {
        self.line = Vec::new();
        self.skipping = false;
    }

    /// Bytes of a partial line held.
    pub fn pending(&self) -> usize {
        self.line.len()
    }
}

/// Opens an audit day file to read it: never through a symbolic link (`O_NOFOLLOW`), without
/// blocking on a FIFO (`O_NONBLOCK`), and only a regular file (SECURITY.md §4.12).
pub fn open_day_file(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
        options.custom_flags(i32::try_from(flags.bits()).unwrap_or(0));
    }
    let file = options.open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// One pass over the day files of `dir` (those dated from the cutoff's day and named before
/// `until`), oldest first, reading each up to the length it had when first scanned (`lens`
/// keeps those lengths across passes): `each` gets every matching record as it is read, so
/// memory stays one line whatever the files hold. Returns the malformed line count. A file
/// that is not a regular file (a symlink, a FIFO) is skipped with a note on stderr.
fn scan_records(
    dir: &Path,
    req: &AuditRequest,
    cutoff: Option<u64>,
    until: Option<&str>,
    lens: &mut Vec<(String, u64)>,
    each: &mut dyn FnMut(&Record),
) -> Result<u64, CliError> {
    use std::io::Read as _;
    let first_pass = lens.is_empty();
    if first_pass {
        let first_day = cutoff.map(day_file_name);
        for name in day_files(dir)? {
            if first_day.as_ref().is_some_and(|first| name < *first)
                || until.is_some_and(|until| name.as_str() >= until)
            {
                continue;
            }
            lens.push((name, u64::MAX));
        }
    }
    let mut malformed = 0;
    for (name, len) in lens.iter_mut() {
        let path = dir.join(name.as_str());
        let file = match open_day_file(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                if first_pass {
                    output::write_stderr(&format!(
                        "Skipped the audit file {}: {e}\n",
                        path.display()
                    ));
                }
                *len = 0;
                continue;
            }
        };
        if first_pass {
            *len = file.metadata().map_or(0, |m| m.len());
        }
        let mut reader = file.take(*len);
        let mut scanner = LineScanner::default();
        let mut on_line = |line: &[u8]| {
            let text = String::from_utf8_lossy(line);
            if text.trim().is_empty() {
                return;
            }
            match Record::parse(&text) {
                Some(r) if req.matches(&r, cutoff) => each(&r),
                Some(_) => {}
                None => malformed += 1,
            }
        };
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            let n = reader.read(&mut buf).map_err(|e| {
                CliError::internal(format!(
                    "cannot read the audit file {}: {e}",
                    path.display()
                ))
            })?;
            if n == 0 {
                break;
            }
            scanner.feed(&buf[..n], &mut on_line);
        }
        scanner.finish(&mut on_line);
        malformed += scanner.overlong;
    }
    Ok(malformed)
}

/// Every matching record in the day files of `dir` (files dated before the cutoff's day are
/// not opened), oldest file first, in file order; and the malformed line count. Collects them:
/// for bounded windows (`watch`); `appduct audit` streams ([`scan_records`]).
pub fn read_records(
    dir: &Path,
    req: &AuditRequest,
    now_ms: u64,
) -> Result<(Vec<Record>, u64), CliError> {
    let cutoff = req.since.map(|s| s.cutoff_ms(now_ms));
    let mut records = Vec::new();
    let malformed = scan_records(dir, req, cutoff, None, &mut Vec::new(), &mut |r| {
        records.push(r.clone());
    })?;
    Ok((records, malformed))
}

// ---------------------------------------------------------------------------------------------
// Follow

/// Tails the day files of one directory: the day file of "now" (UTC), from an offset, moving
/// to the next day's file when the date changes (after draining the old file). Only complete
/// lines are consumed; a partial last line waits for its newline. A line longer than
/// [`MAX_LINE_BYTES`] is skipped ([`Follower::overlong`]), a day file that is not a regular
/// file (a symlink, a FIFO) is not read ([`Follower::refused`]), and one poll reads at most 4 MiB.
#[derive(Debug)]
pub struct Follower {
    dir: PathBuf,
    day: String,
    offset: u64,
    scanner: LineScanner,
    /// Why the current day file is not read (reported once by the caller).
    refused: Option<String>,
}

impl Follower {
    /// Starts at the start of today's file (`from_start`) or at its current end.
    pub fn new(dir: &Path, now_ms: u64, from_start: bool) -> Self {
        let day = day_file_name(now_ms);
        let offset = if from_start {
            0
        } else {
            std::fs::symlink_metadata(dir.join(&day)).map_or(0, |m| m.len())
        };
        Follower {
            dir: dir.to_owned(),
            day,
            offset,
            scanner: LineScanner::default(),
            refused: None,
        }
    }

    /// Lines skipped so far for being longer than [`MAX_LINE_BYTES`].
    pub fn overlong(&self) -> u64 {
        self.scanner.overlong
    }

    /// Takes the reason the current day file was refused, once per refusal.
    pub fn refused(&mut self) -> Option<String> {
        self.refused.take()
    }

    /// The complete lines appended since the last poll; `now_ms` decides the day file.
    pub fn poll(&mut self, now_ms: u64) -> String {
        let mut text = self.read_current();
        let today = day_file_name(now_ms);
        if today > self.day {
            // Rollover: the old file was read to its end above; the new one from its start.
            self.day = today;
            self.offset = 0;
            self.scanner.clear();
            text.push_str(&self.read_current());
        }
        text
    }

    fn read_current(&mut self) -> String {
        use std::io::Read as _;
        let path = self.dir.join(&self.day);
        let mut file = match open_day_file(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return String::new(),
            Err(e) => {
                let why = format!("Not reading the audit file {}: {e}", path.display());
                if self.refused.is_none() {
                    self.refused = Some(why);
                }
                return String::new();
            }
        };
        let len = file.metadata().map_or(0, |m| m.len());
        if len < self.offset {
            // Replaced or truncated: start over.
            self.offset = 0;
            self.scanner.clear();
        }
        if len == self.offset || file.seek(SeekFrom::Start(self.offset)).is_err() {
            return String::new();
        }
        let mut text = String::new();
        let mut reader = file.take(FOLLOW_READ_BYTES.min(len - self.offset));
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            self.offset += n as u64;
            self.scanner.feed(&buf[..n], &mut |line| {
                text.push_str(&String::from_utf8_lossy(line));
                text.push('\n');
            });
        }
        text
    }
}

// ---------------------------------------------------------------------------------------------
// Running

pub fn now_ms() -> u64 {
    u64::try_from(OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

pub fn audit_dir(globals: &Globals) -> Result<PathBuf, CliError> {
    Ok(globals.state_dir()?.audit_dir())
}

fn report_malformed(malformed: u64) {
    if malformed > 0 {
        // Under --json too: stdout keeps the envelope, stderr gets the count.
        output::write_stderr(&format!(
            "Skipped {} in the audit files.\n",
            render::plural(malformed, "malformed line", "malformed lines")
        ));
    }
}

/// `appduct audit` without `--follow`: streams. A first pass over the day files counts the
/// malformed lines and (human) measures the columns, a second prints each record as it reads
/// it, up to the lengths the files had in the first pass; neither holds more than one line. The
/// output is what [`audit_list`] would print for the same records.
pub fn run(globals: &Globals, out: &Output, req: &AuditRequest) -> Result<Reply, CliError> {
    let dir = audit_dir(globals)?;
    let cutoff = req.since.map(|s| s.cutoff_ms(now_ms()));
    let json = out.flags.json;
    let mut lens = Vec::new();
    let mut widths: Vec<usize> = HEADER.iter().map(|h| render::display_width(h)).collect();
    let mut count = 0u64;
    let malformed = scan_records(&dir, req, cutoff, None, &mut lens, &mut |r| {
        count += 1;
        if !json {
            for (w, c) in widths.iter_mut().zip(cells(r)) {
                *w = (*w).max(render::display_width(&c));
            }
        }
    })?;
    report_malformed(malformed);
    if json {
        let empty = Success::new(
            json!({"records": [], "malformed": malformed}),
            String::new(),
        );
        let doc = out.json_document(&out.success_envelope(&empty));
        let (head, tail, indent) = split_at_records(&doc);
        output::write_stdout(head);
        let pretty = out.flags.pretty;
        let mut first = true;
        scan_records(&dir, req, cutoff, None, &mut lens, &mut |r| {
            let value = Value::Object(r.raw.clone());
            let mut item = String::new();
            if !first {
                item.push(',');
            }
            first = false;
            if pretty {
                let text = serde_json::to_string_pretty(&value).unwrap_or_default();
                for line in text.lines() {
                    item.push('\n');
                    item.push_str(&indent);
                    item.push_str("  ");
                    item.push_str(line);
                }
            } else {
                item.push_str(&value.to_string());
            }
            output::write_stdout(&item);
        })?;
        if pretty && !first {
            output::write_stdout(&format!("\n{indent}"));
        }
        output::write_stdout(&format!("{tail}\n"));
    } else {
        if count == 0 {
            output::write_stdout(NO_RECORDS);
        } else {
            output::write_stdout(&render::table_row(&HEADER.map(str::to_owned), &widths));
            scan_records(&dir, req, cutoff, None, &mut lens, &mut |r| {
                output::write_stdout(&render::table_row(&cells(r), &widths));
            })?;
        }
        if out.flags.verbose {
            output::write_stdout(&out.meta_human());
        }
    }
    Ok(Reply::Done(0))
}

const HEADER: [&str; 6] = ["TIME", "ALIAS", "TOOL", "OUTCOME", "DURATION", "CALLER"];
const NO_RECORDS: &str = "No audit records match.\n";

/// `doc` (an envelope whose `data.records` is `[]`) split inside that array: the text up to
/// and including `[`, the text from `]` on, and the indentation of the `"records"` line.
fn split_at_records(doc: &str) -> (&str, &str, String) {
    let at = doc
        .find("\"records\":[]")
        .map(|i| i + "\"records\":[".len())
        .or_else(|| {
            doc.find("\"records\": []")
                .map(|i| i + "\"records\": [".len())
        })
        .unwrap_or(doc.len());
    let line_start = doc[..at].rfind('\n').map_or(0, |i| i + 1);
    let indent: String = doc[line_start..]
        .chars()
        .take_while(|c| *c == ' ')
        .collect();
    let (head, tail) = doc.split_at(at);
    (head, tail, indent)
}

/// The `audit` result: `data.records` are the stored objects; human, an aligned table.
pub fn audit_list(records: &[Record], malformed: u64) -> Success {
    let data = json!({
        "records": records.iter().map(|r| Value::Object(r.raw.clone())).collect::<Vec<_>>(),
        "malformed": malformed,
    });
    let human = if records.is_empty() {
        NO_RECORDS.to_owned()
    } else {
        let mut rows = vec![HEADER.map(str::to_owned).to_vec()];
        rows.extend(records.iter().map(cells));
        render::table(&rows)
    };
    Success::new(data, human)
}

/// The human cells of one record. App-supplied text is cleaned (SECURITY.md §4.13).
pub fn cells(r: &Record) -> Vec<String> {
    let time = render::iso_seconds_from_unix_ms(i64::try_from(r.ts_ms).unwrap_or(i64::MAX))
        .unwrap_or_default();
    let outcome = match (
        r.str("outcome"),
        r.raw.get("errorType").and_then(Value::as_str),
        r.raw.get("deniedReason").and_then(Value::as_str),
    ) {
        (o, Some(t), _) => format!("{o}:{t}"),
        (o, None, Some(reason)) => format!("{o}:{reason}"),
        (o, None, None) => o.to_owned(),
    };
    let duration = r
        .raw
        .get("durationMs")
        .and_then(Value::as_u64)
        .map_or_else(|| "-".to_owned(), |d| format!("{d} ms"));
    // Controls dropped, then bidi and invisible characters shown as `\uXXXX` (a `\u202e`
    // in a tool name must not reorder the line).
    let clean = |s: &str| appduct_protocol::preview::escape_hidden(&render::clean_line(s));
    vec![
        time,
        clean(r.str("alias")),
        clean(r.str("tool")),
        clean(&outcome),
        duration,
        clean(r.raw.get("caller").and_then(Value::as_str).unwrap_or("-")),
    ]
}

/// One `--follow` line: fixed-width columns (later records cannot realign earlier ones).
fn follow_line(r: &Record) -> String {
    let c = cells(r);
    format!(
        "{}  {:<16}  {:<24}  {:<22}  {:>9}  {}\n",
        c[0], c[1], c[2], c[3], c[4], c[5]
    )
}

/// `appduct audit --follow`: runs until SIGINT or SIGTERM.
pub async fn run_follow(
    globals: &Globals,
    out: &Output,
    req: &AuditRequest,
) -> Result<Reply, CliError> {
    let mut signals = Interrupts::new(false)
        .map_err(|e| CliError::internal(format!("cannot install signal handlers: {e}")))?;
    let dir = audit_dir(globals)?;
    let start = now_ms();
    let cutoff = req.since.map(|s| s.cutoff_ms(start));
    let mut malformed = 0;
    let mut follower = Follower::new(&dir, start, req.since.is_some());
    if req.since.is_some() {
        // Past days from their files, streamed; today's file is the follower's first poll.
        let today = day_file_name(start);
        malformed += scan_records(&dir, req, cutoff, Some(&today), &mut Vec::new(), &mut |r| {
            emit(out, r);
        })?;
    }
    out.notice("Following the audit log (Ctrl-C to stop)…");
    let mut interval = tokio::time::interval(FOLLOW_POLL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    report_malformed(malformed);
    let mut reported = malformed;
    let mut counted_overlong = 0;
    loop {
        tokio::select! {
            _ = signals.recv() => return Ok(Reply::Done(0)),
            _ = interval.tick() => {
                let text = follower.poll(now_ms());
                if let Some(why) = follower.refused() {
                    output::write_stderr(&format!("{why}\n"));
                }
                let mut records = Vec::new();
                parse_lines(&text, &mut records, &mut malformed);
                malformed += follower.overlong() - counted_overlong;
                counted_overlong = follower.overlong();
                for r in records.iter().filter(|r| req.matches(r, cutoff)) {
                    emit(out, r);
                }
                if malformed > reported {
                    report_malformed(malformed - reported);
                    reported = malformed;
                }
            }
        }
    }
}

fn emit(out: &Output, r: &Record) {
    if out.flags.json {
        let line = Value::Object(r.raw.clone()).to_string();
        output::write_stdout(&format!("{line}\n"));
    } else {
        output::write_stdout(&follow_line(r));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_instants() {
        assert_eq!(
            parse_since("90s").unwrap(),
            Since::Ago(Duration::from_secs(90))
        );
        assert_eq!(
            parse_since("15m").unwrap(),
            Since::Ago(Duration::from_secs(900))
        );
        assert_eq!(
            parse_since("1h").unwrap(),
            Since::Ago(Duration::from_secs(3600))
        );
        assert_eq!(
            parse_since("2d").unwrap(),
            Since::Ago(Duration::from_secs(172_800))
        );
        assert_eq!(
            parse_since("2026-11-30T09:14:22.518Z").unwrap(),
            Since::At(1_796_030_062_518)
        );
        for bad in ["", "h", "1", "1w", "-1h", "1.5h", "yesterday", "１h"] {
            assert!(parse_since(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn human_cells_escape_bidi_and_drop_controls() {
        let line = r#"{"ts":"2026-12-01T10:00:00.000Z","sessionId":"s","alias":"pix\u202eel","tool":"ev\u001b[2Jil\u200b","outcome":"ok","caller":"cli"}"#;
        let record = Record::parse(line).unwrap();
        let c = cells(&record);
        assert_eq!(c[1], "pix\\u202eel");
        assert_eq!(c[2], "ev[2Jil\\u200b");
    }

    #[test]
    fn day_file_names_match_the_writer() {
        assert_eq!(day_file_name(1_796_083_199_999), "2026-11-30.jsonl");
        assert_eq!(day_file_name(1_796_083_200_000), "2026-12-01.jsonl");
        assert!(is_day_file_name("2026-12-01.jsonl"));
        assert!(!is_day_file_name("2026-12-01.jsonl.tmp"));
        assert!(!is_day_file_name("notes.jsonl"));
    }

    fn line(ts: &str, tool: &str) -> String {
        format!(
            "{{\"ts\":\"{ts}\",\"callId\":\"c\",\"sessionId\":\"S\",\"alias\":\"a\",\"tool\":\"{tool}\",\"argsSha256\":\"x\",\"outcome\":\"ok\",\"durationMs\":1,\"caller\":\"cli\"}}\n"
        )
    }

    #[test]
    fn follower_reads_complete_lines_and_rolls_over_at_midnight() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let before_midnight = 1_796_083_199_000; // 2026-11-30T23:59:59Z
        let after_midnight = 1_796_083_201_000; // 2026-12-01T00:00:01Z
        std::fs::write(
            dir.join("2026-11-30.jsonl"),
            line("2026-11-30T23:00:00Z", "old"),
        )
        .unwrap();
        let mut f = Follower::new(dir, before_midnight, false);
        assert_eq!(f.poll(before_midnight), "");

        // A record split across two writes is returned once complete.
        let full = line("2026-11-30T23:59:58Z", "late");
        let (head, tail) = full.split_at(20);
        append(&dir.join("2026-11-30.jsonl"), head);
        assert_eq!(f.poll(before_midnight), "");
        append(&dir.join("2026-11-30.jsonl"), tail);
        assert_eq!(f.poll(before_midnight), full);

        // At rollover the old file is drained, then the new one is read from its start.
        let straggler = line("2026-11-30T23:59:59Z", "straggler");
        append(&dir.join("2026-11-30.jsonl"), &straggler);
        let first = line("2026-12-01T00:00:00Z", "new");
        std::fs::write(dir.join("2026-12-01.jsonl"), &first).unwrap();
        assert_eq!(f.poll(after_midnight), format!("{straggler}{first}"));
        let second = line("2026-12-01T00:00:01Z", "newer");
        append(&dir.join("2026-12-01.jsonl"), &second);
        assert_eq!(f.poll(after_midnight), second);
    }

    #[test]
    fn over_long_lines_are_dropped_and_counted_without_being_held() {
        let mut scanner = LineScanner::default();
        let mut lines = Vec::new();
        let mut each = |l: &[u8]| lines.push(String::from_utf8_lossy(l).into_owned());
        scanner.feed(b"one\ntw", &mut each);
        let chunk = vec![b'x'; MAX_LINE_BYTES / 2];
        for _ in 0..4 {
            scanner.feed(&chunk, &mut each);
            assert!(scanner.pending() <= MAX_LINE_BYTES);
        }
        scanner.feed(b"tail\nthree\nfour", &mut each);
        scanner.finish(&mut each);
        assert_eq!(lines, ["one", "three", "four"]);
        assert_eq!(scanner.overlong, 1);
    }

    #[test]
    fn day_files_open_only_when_regular_and_never_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("2026-12-01.jsonl");
        std::fs::write(&real, "x\n").unwrap();
        assert!(open_day_file(&real).is_ok());
        let link = tmp.path().join("2026-12-02.jsonl");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(open_day_file(&link).is_err());
        assert!(open_day_file(tmp.path()).is_err());
    }

    fn append(path: &Path, text: &str) {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }
}
