//! `appduct tools snapshot --write | --check` (§L7.4): a canonical, reviewable document of a
//! session's tool and event surface, written atomically or compared with a unified diff. With
//! `--from` (§L7.4.1) the surface comes from a snapshot file instead of a live session, such as
//! the one `appduct-sdk snapshot` writes from an app's declarations (§T17).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use appduct_protocol::canonical::to_canonical_pretty;
use appduct_protocol::control::{EventsListParams, EventsListResult, ToolsListResult};
use appduct_protocol::errors::ErrorType;
use clap::Args;
use serde_json::{Map, Value, json};

use super::{describe_session, list_all};
use crate::commands::Command;
use crate::commands::args::{SelectorArgs, optional_selector};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{self, Output, Reply, Success};
use crate::render::{self, Paint};

#[derive(Debug, Args)]
pub struct ToolsSnapshotArgs {
    #[command(flatten)]
    pub selector: SelectorArgs,
    /// Write the live surface to FILE ("-" prints it)
    #[arg(long, value_name = "FILE")]
    pub write: Option<PathBuf>,
    /// Compare the live surface with FILE
    #[arg(long, value_name = "FILE")]
    pub check: Option<PathBuf>,
    /// Take the surface from the snapshot FILE instead of a live session ("-" reads stdin)
    #[arg(long, value_name = "FILE")]
    pub from: Option<PathBuf>,
}

/// `tools snapshot --write` or `--check` (§L7.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotMode {
    /// `--write -`: the document itself on stdout.
    WriteStdout,
    Write(PathBuf),
    Check(PathBuf),
}

pub fn validate(a: ToolsSnapshotArgs) -> Result<Command, CliError> {
    let selector = optional_selector("tools snapshot", a.selector.positionals)?;
    if a.from.is_some() && selector.is_some() {
        return Err(CliError::usage(
            "tools snapshot takes a session selector or --from <file>, not both",
        ));
    }
    let mode = match (a.write, a.check) {
        (Some(w), None) if w.as_os_str() == "-" => SnapshotMode::WriteStdout,
        (Some(w), None) => SnapshotMode::Write(w),
        (None, Some(c)) => SnapshotMode::Check(c),
        _ => {
            return Err(CliError::usage(
                "tools snapshot needs exactly one of --write <file> and --check <file>",
            ));
        }
    };
    Ok(Command::ToolsSnapshot {
        selector,
        mode,
        from: a.from,
    })
}

/// `snapshotVersion` of the document.
pub const SNAPSHOT_VERSION: u64 = 1;
/// The largest snapshot file `--check` reads (16 MiB): a tool surface is far smaller, and a
/// bigger file is refused before it is read.
pub const MAX_SNAPSHOT_FILE_BYTES: u64 = 16 << 20;
/// Lines of context in the diff.
pub const DIFF_CONTEXT: usize = 3;
/// The snapshot document of a tool and event listing: per tool every descriptor field the
/// listing reports (§C9.2) plus `group`, so a descriptor field the listing gains is part of
/// the surface without a change here (and `appduct-sdk snapshot` keeps every wire field, §T17).
pub fn document(tools: &ToolsListResult, events: &EventsListResult) -> Value {
    let mut tool_entries: Vec<Value> = tools
        .tools
        .iter()
        .map(|t| {
            let mut m: Map<String, Value> = t.descriptor.clone();
            m.insert("name".into(), json!(t.name()));
            m.insert("description".into(), json!(t.description()));
            m.insert("group".into(), json!(t.group));
            Value::Object(m)
        })
        .collect();
    tool_entries.sort_by(|a, b| name_of(a).cmp(name_of(b)));
    let mut event_entries: Vec<Value> = events
        .events
        .iter()
        .map(|e| {
            let mut m = Map::new();
            m.insert("name".into(), json!(e.name));
            m.insert("description".into(), json!(e.description));
            if let Some(s) = &e.payload_schema {
                m.insert("payload_schema".into(), s.clone());
            }
            Value::Object(m)
        })
        .collect();
    event_entries.sort_by(|a, b| name_of(a).cmp(name_of(b)));
    json!({"snapshotVersion": SNAPSHOT_VERSION, "tools": tool_entries, "events": event_entries})
}

fn name_of(v: &Value) -> &str {
    v.get("name").and_then(Value::as_str).unwrap_or_default()
}

/// The canonical text: sorted keys, 2-space indent, LF, one final newline.
pub fn canonical_text(doc: &Value) -> String {
    let mut text = to_canonical_pretty(doc);
    text.push('\n');
    text
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn counts(doc: &Value) -> (usize, usize) {
    let len = |k: &str| doc.get(k).and_then(Value::as_array).map_or(0, Vec::len);
    (len("tools"), len("events"))
}

/// `tools snapshot`: from a live session, or from a file without the daemon (`--from`).
pub async fn run(
    globals: &Globals,
    out: &Output,
    selector: Option<&str>,
    mode: &SnapshotMode,
    from: Option<&Path>,
) -> Result<Reply, CliError> {
    if let Some(from) = from {
        return run_from(from, mode, out.stderr_paint);
    }
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let session = describe_session(&client, &dir, selector).await?;
    let tools = list_all(&client, &dir, &session.session_id).await?;
    let events = client
        .list_all_events(
            EventsListParams::default().with_selector(Some(session.session_id.clone())),
        )
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    let doc = document(&tools, &events);
    let text = canonical_text(&doc);
    match mode {
        SnapshotMode::WriteStdout => {
            output::write_stdout(&text);
            Ok(Reply::Done(0))
        }
        SnapshotMode::Write(path) => write(path, &doc, &text).map(Reply::Success),
        SnapshotMode::Check(path) => check(
            path,
            &doc,
            &format!("live ({})", session.alias),
            None,
            out.stderr_paint,
        )
        .map(Reply::Success),
    }
}

/// `--from <file>` (§L7.4.1): the surface of a snapshot file, normalised, written or checked
/// like a live one. No daemon is contacted.
pub fn run_from(from: &Path, mode: &SnapshotMode, paint: Paint) -> Result<Reply, CliError> {
    let shown = if from.as_os_str() == "-" {
        "stdin".to_owned()
    } else {
        from.display().to_string()
    };
    let text = if from.as_os_str() == "-" {
        read_capped(std::io::stdin().lock(), None)
    } else {
        read_snapshot_file(from)
    }
    .map_err(|e| e.into_cli_error(&shown))?;
    let doc = normalise(&parse_document(&text, &shown)?);
    let text = canonical_text(&doc);
    match mode {
        SnapshotMode::WriteStdout => {
            output::write_stdout(&text);
            Ok(Reply::Done(0))
        }
        SnapshotMode::Write(path) => write(path, &doc, &text).map(Reply::Success),
        SnapshotMode::Check(path) => {
            check(path, &doc, &shown, Some(from), paint).map(Reply::Success)
        }
    }
}

/// A document with only the three keys of §L7.4 and both lists sorted by name, so a file
/// written by another tool compares and diffs like a live surface.
fn normalise(doc: &Value) -> Value {
    let sorted = |key: &str| {
        let mut list = doc
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        list.sort_by(|a, b| name_of(a).cmp(name_of(b)));
        list
    };
    json!({"snapshotVersion": SNAPSHOT_VERSION, "tools": sorted("tools"), "events": sorted("events")})
}

/// `--write <file>`: atomic (temporary file in the same directory, then rename), mode 0644.
pub fn write(path: &Path, doc: &Value, text: &str) -> Result<Success, CliError> {
    let shown = path.display().to_string();
    let unwritable = |e: std::io::Error| {
        CliError::usage(format!("cannot write the snapshot to {shown}: {e}"))
            .with_detail("path", shown.as_str())
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(CliError::usage(format!(
            "cannot write the snapshot to {shown}: {} is not a directory",
            parent.display()
        ))
        .with_detail("path", shown.as_str()));
    }
    let changed = std::fs::read(path).map_or(true, |old| old != text.as_bytes());
    if changed {
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "snapshot".into());
        let tmp = parent.join(format!(".{file_name}.{}.tmp", std::process::id()));
        let result = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            appduct_client::platform::fchmod(&f, 0o644)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(unwritable(e));
        }
    }
    let (tools, events) = counts(doc);
    let mut human = format!(
        "Wrote tools snapshot to {shown} ({}, {}).",
        plural(tools, "tool", "tools"),
        plural(events, "event", "events")
    );
    if !changed {
        human.push_str(" Unchanged.");
    }
    human.push('\n');
    Ok(Success::new(
        json!({"path": shown, "tools": tools, "events": events, "changed": changed}),
        human,
    ))
}

/// Entries by name of one list of a document.
fn by_name<'a>(doc: &'a Value, key: &str) -> BTreeMap<&'a str, &'a Value> {
    doc.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| (name_of(v), v)).collect())
        .unwrap_or_default()
}

/// Names added, removed and changed from `file` to `live` in one list.
fn compare<'a>(file: &'a Value, live: &'a Value, key: &str) -> [Vec<&'a str>; 3] {
    let (f, l) = (by_name(file, key), by_name(live, key));
    let added = l.keys().filter(|n| !f.contains_key(*n)).copied().collect();
    let removed = f.keys().filter(|n| !l.contains_key(*n)).copied().collect();
    let changed = l
        .iter()
        .filter(|(n, v)| {
            f.get(*n)
                .is_some_and(|old| to_canonical_pretty(old) != to_canonical_pretty(v))
        })
        .map(|(n, _)| *n)
        .collect();
    [added, removed, changed]
}

/// Why a snapshot file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotReadError {
    /// Larger than [`MAX_SNAPSHOT_FILE_BYTES`]; refused from its size, before reading it.
    #[error("it is larger than {max_bytes} bytes")]
    TooLarge { max_bytes: u64 },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl SnapshotReadError {
    /// An `inspection_error` (exit 66) naming the file, like every other unusable snapshot;
    /// the size cap also goes into `details.maxBytes`.
    pub fn into_cli_error(self, path: &str) -> CliError {
        let err = inspection(path, &self);
        match self {
            SnapshotReadError::TooLarge { max_bytes } => err.with_detail("maxBytes", max_bytes),
            _ => err,
        }
    }
}

/// The snapshot file's text, at most [`MAX_SNAPSHOT_FILE_BYTES`]: a larger regular file is
/// refused from its length, and anything that grows past the cap while read is cut off at
/// one byte over it and refused too.
pub fn read_snapshot_file(path: &Path) -> Result<String, SnapshotReadError> {
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    read_capped(file, Some(len))
}

/// At most [`MAX_SNAPSHOT_FILE_BYTES`] of `reader` as text; `len`, when known, refuses a larger
/// input before reading it.
fn read_capped(reader: impl std::io::Read, len: Option<u64>) -> Result<String, SnapshotReadError> {
    let too_large = SnapshotReadError::TooLarge {
        max_bytes: MAX_SNAPSHOT_FILE_BYTES,
    };
    if len.is_some_and(|len| len > MAX_SNAPSHOT_FILE_BYTES) {
        return Err(too_large);
    }
    // The same text and UTF-8 error as `fs::read_to_string`.
    let text = std::io::read_to_string(reader.take(MAX_SNAPSHOT_FILE_BYTES + 1))?;
    if text.len() as u64 > MAX_SNAPSHOT_FILE_BYTES {
        return Err(too_large);
    }
    Ok(text)
}

fn inspection(path: &str, why: impl std::fmt::Display) -> CliError {
    CliError::inspection(format!("cannot use the snapshot {path}: {why}")).with_detail("path", path)
}

/// A snapshot file's document: JSON, `snapshotVersion` 1, `tools` and `events` lists;
/// anything else is an `inspection_error` naming the file.
fn parse_document(text: &str, shown: &str) -> Result<Value, CliError> {
    let doc: Value = serde_json::from_str(text).map_err(|e| inspection(shown, e))?;
    if doc.get("snapshotVersion").and_then(Value::as_u64) != Some(SNAPSHOT_VERSION) {
        return Err(inspection(shown, "snapshotVersion is not 1"));
    }
    if !doc.get("tools").is_some_and(Value::is_array)
        || !doc.get("events").is_some_and(Value::is_array)
    {
        return Err(inspection(shown, "it has no tools or events list"));
    }
    Ok(doc)
}

/// `--check <file>`: `live` is the surface to check, `label` names it in the diff
/// (`live (<alias>)`, or the `--from` file); `from` is the `--from` argument, for the hint.
pub fn check(
    path: &Path,
    live: &Value,
    label: &str,
    from: Option<&Path>,
    paint: Paint,
) -> Result<Success, CliError> {
    let shown = path.display().to_string();
    let text = read_snapshot_file(path).map_err(|e| e.into_cli_error(&shown))?;
    let file = parse_document(&text, &shown)?;
    let [tools_added, tools_removed, tools_changed] = compare(&file, live, "tools");
    let [events_added, events_removed, events_changed] = compare(&file, live, "events");
    let (tools, events) = counts(live);
    let total = |a: &[&str], b: &[&str]| a.len() + b.len();
    let (added, removed, changed) = (
        total(&tools_added, &events_added),
        total(&tools_removed, &events_removed),
        total(&tools_changed, &events_changed),
    );
    if added + removed + changed == 0 {
        return Ok(Success::new(
            json!({"path": shown, "matches": true, "tools": tools, "events": events}),
            format!(
                "Tools snapshot matches {shown} ({}, {}).\n",
                plural(tools, "tool", "tools"),
                plural(events, "event", "events")
            ),
        ));
    }
    let file_text = canonical_text(&file);
    let live_text = canonical_text(live);
    let diff = unified_diff(&file_text, &live_text, &shown, label);
    let mut err = CliError::new(
        ErrorType::AssertionError,
        format!(
            "Tool surface differs from {shown}: {added} added, {removed} removed, {changed} changed"
        ),
    )
    .with_detail("path", shown.as_str())
    .with_detail(
        "added",
        json!({"tools": tools_added, "events": events_added}),
    )
    .with_detail(
        "removed",
        json!({"tools": tools_removed, "events": events_removed}),
    )
    .with_detail(
        "changed",
        json!({"tools": tools_changed, "events": events_changed}),
    )
    .with_detail("diff", diff.as_str());
    let mut tail = String::new();
    for (mark, kind, names) in [
        ("+", "tool", &tools_added),
        ("-", "tool", &tools_removed),
        ("~", "tool", &tools_changed),
        ("+", "event", &events_added),
        ("-", "event", &events_removed),
        ("~", "event", &events_changed),
    ] {
        for n in names.iter() {
            tail.push_str(&format!("{mark} {kind} {}\n", render::clean_line(n)));
        }
    }
    // The diff shows app-supplied JSON (and the alias): control characters escaped (SECURITY.md §4.13);
    // `details.diff` keeps them exact.
    for line in diff.lines() {
        let line = render::escape_controls(line);
        let line = line.as_str();
        let styled = if line.starts_with("---") || line.starts_with("+++") {
            paint.bold(line)
        } else if line.starts_with('-') {
            paint.red(line)
        } else if line.starts_with('+') {
            paint.green(line)
        } else {
            line.to_owned()
        };
        tail.push_str(&styled);
        tail.push('\n');
    }
    let from = from.map_or(String::new(), |f| format!("--from {} ", f.display()));
    tail.push_str(&format!(
        "Review the change, then run \"appduct tools snapshot {from}--write {shown}\".\n"
    ));
    err.hide_human_details = true;
    err.human_tail = Some(tail);
    Err(err)
}

/// A unified diff of two texts with [`DIFF_CONTEXT`] lines of context; empty when equal.
/// Lines are compared without their line breaks; the line diff is `similar`'s Myers (linear
/// space), grouped into hunks whose context overlaps. Where several shortest diffs exist, the
/// hunks are the one `similar` picks (pinned by `ambiguous_diffs_keep_todays_hunks`).
pub fn unified_diff(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let ops = similar::capture_diff_slices(similar::Algorithm::Myers, &a, &b);
    let hunks = similar::group_diff_ops(ops, DIFF_CONTEXT);
    if hunks.is_empty() {
        return String::new();
    }
    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    for hunk in hunks {
        let (Some(first), Some(last)) = (hunk.first(), hunk.last()) else {
            continue;
        };
        let old_range = first.old_range().start..last.old_range().end;
        let new_range = first.new_range().start..last.new_range().end;
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            hunk_range(&old_range),
            hunk_range(&new_range)
        ));
        for op in &hunk {
            let (tag, old_span, new_span) = op.as_tag_tuple();
            push_lines(&mut out, tag, &a[old_span], &b[new_span]);
        }
    }
    out
}

/// The lines of one diff operation: context, removed, added, or removed then added.
fn push_lines(out: &mut String, tag: similar::DiffTag, old: &[&str], new: &[&str]) {
    let mut push = |mark: char, lines: &[&str]| {
        for line in lines {
            out.push(mark);
            out.push_str(line);
            out.push('\n');
        }
    };
    match tag {
        similar::DiffTag::Equal => push(' ', old),
        similar::DiffTag::Delete => push('-', old),
        similar::DiffTag::Insert => push('+', new),
        similar::DiffTag::Replace => {
            push('-', old);
            push('+', new);
        }
    }
}

/// A hunk side as `first,len` (1-based), just `first` for one line, and the line before for
/// an empty side (`0,0` at the start), as `diff -u` writes it.
fn hunk_range(range: &std::ops::Range<usize>) -> String {
    match range.len() {
        0 => format!("{},0", range.start),
        1 => format!("{}", range.start + 1),
        len => format!("{},{len}", range.start + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn tools(v: Value) -> ToolsListResult {
        serde_json::from_value(
            json!({"tools": v, "total": 0, "hasMore": false, "offset": 0, "groups": []}),
        )
        .unwrap()
    }

    fn events(v: Value) -> EventsListResult {
        serde_json::from_value(json!({"events": v, "total": 0, "hasMore": false, "offset": 0}))
            .unwrap()
    }

    fn playground_like() -> Value {
        document(
            &tools(json!([
                {"name": "sum", "description": "Adds.", "input_schema": {"type": "object", "properties": {"b": {"type": "number"}, "a": {"type": "number"}}}, "group": null, "policy": "allow"},
                {"name": "reset_counter", "description": "Reset.", "annotations": {"idempotentHint": true, "destructiveHint": true}, "group": "counter", "policy": "prompt"}
            ])),
            &events(
                json!([{"name": "playground_ping", "description": "Ping.", "payload_schema": {"type": "object"}}]),
            ),
        )
    }

    #[test]
    fn the_document_is_sorted_canonical_and_leaves_policy_out() {
        let text = canonical_text(&playground_like());
        assert!(text.ends_with("}\n"));
        assert!(!text.contains("policy"));
        let reset = text.find("\"reset_counter\"").unwrap();
        let sum = text.find("\"sum\"").unwrap();
        assert!(reset < sum, "tools sorted by name");
        assert!(
            text.find("\"destructiveHint\"").unwrap() < text.find("\"idempotentHint\"").unwrap()
        );
        assert!(text.contains("\"group\": null"));
        assert!(text.starts_with("{\n  \"events\": ["), "{text}");
    }

    #[test]
    fn write_then_check_matches_and_rewriting_is_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("tools.snapshot.json");
        let doc = playground_like();
        let s = write(&path, &doc, &canonical_text(&doc)).unwrap();
        assert_eq!(s.data["changed"], true);
        assert_eq!(s.data["tools"], 2);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        let s = write(&path, &doc, &canonical_text(&doc)).unwrap();
        assert_eq!(s.data["changed"], false);
        assert!(s.human.ends_with("Unchanged.\n"));
        let ok = check(&path, &doc, "live (pixel-8)", None, Paint::PLAIN).unwrap();
        assert_eq!(ok.data["matches"], true);
    }

    #[test]
    fn reordered_keys_in_the_file_still_match() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.json");
        std::fs::write(
            &path,
            r#"{"tools": [], "snapshotVersion": 1, "events": [{"description": "D", "name": "e"}]}"#,
        )
        .unwrap();
        let live = document(
            &tools(json!([])),
            &events(json!([{"name": "e", "description": "D"}])),
        );
        assert!(check(&path, &live, "a", None, Paint::PLAIN).is_ok());
    }

    #[test]
    fn differences_fail_with_exit_3_and_name_each_entry() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.json");
        let doc = playground_like();
        write(&path, &doc, &canonical_text(&doc)).unwrap();
        let live = document(
            &tools(json!([
                {"name": "sum", "description": "Adds.", "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}}, "group": null, "policy": "allow"},
                {"name": "sum_v2", "description": "New.", "group": null, "policy": "allow"}
            ])),
            &events(
                json!([{"name": "playground_ping", "description": "Ping.", "payload_schema": {"type": "object"}}]),
            ),
        );
        let e = check(&path, &live, "live (pixel-8)", None, Paint::PLAIN).unwrap_err();
        assert_eq!(e.exit_code(), 3);
        assert!(
            e.message.contains("1 added, 1 removed, 1 changed"),
            "{}",
            e.message
        );
        let d = e.details.clone().unwrap();
        assert_eq!(d["added"]["tools"], json!(["sum_v2"]));
        assert_eq!(d["removed"]["tools"], json!(["reset_counter"]));
        assert_eq!(d["changed"]["tools"], json!(["sum"]));
        let diff = d["diff"].as_str().unwrap();
        assert!(diff.starts_with(&format!("--- {}\n+++ live (pixel-8)\n@@ ", path.display())));
        assert!(diff.contains("-            \"type\": \"number\""), "{diff}");
        let tail = e.human_tail.clone().unwrap();
        assert!(tail.contains("+ tool sum_v2\n- tool reset_counter\n~ tool sum\n"));
        assert!(tail.ends_with(&format!("--write {}\".\n", path.display())));
        assert!(e.hide_human_details);
    }

    #[test]
    fn unreadable_or_wrong_version_is_an_inspection_error() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("missing.json");
        let live = playground_like();
        assert_eq!(
            check(&missing, &live, "a", None, Paint::PLAIN)
                .unwrap_err()
                .exit_code(),
            66
        );
        let v2 = tmp.path().join("v2.json");
        std::fs::write(&v2, r#"{"snapshotVersion": 2, "tools": [], "events": []}"#).unwrap();
        let e = check(&v2, &live, "a", None, Paint::PLAIN).unwrap_err();
        assert_eq!(e.exit_code(), 66);
        assert!(e.message.contains("v2.json"));
        let bad = tmp.path().join("bad.json");
        std::fs::write(&bad, "nope").unwrap();
        assert_eq!(
            check(&bad, &live, "a", None, Paint::PLAIN)
                .unwrap_err()
                .exit_code(),
            66
        );
    }

    #[test]
    fn an_oversized_snapshot_file_is_refused_without_reading_it() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("huge.json");
        // Sparse: 64 GiB that would take minutes (and the memory) to read.
        std::fs::File::create(&path)
            .unwrap()
            .set_len(64 << 30)
            .unwrap();
        let e = check(&path, &playground_like(), "a", None, Paint::PLAIN).unwrap_err();
        assert_eq!(e.exit_code(), 66);
        assert_eq!(e.error_type, "inspection_error");
        assert!(e.message.contains("huge.json"), "{}", e.message);
        assert!(
            e.message.contains(&MAX_SNAPSHOT_FILE_BYTES.to_string()),
            "{}",
            e.message
        );
        assert_eq!(
            e.details.clone().unwrap()["maxBytes"],
            json!(MAX_SNAPSHOT_FILE_BYTES)
        );
        // A file whose length says nothing (a device, a pipe) is cut off one byte past the cap.
        let e = check(
            Path::new("/dev/zero"),
            &playground_like(),
            "a",
            None,
            Paint::PLAIN,
        )
        .unwrap_err();
        assert_eq!(
            e.details.clone().unwrap()["maxBytes"],
            json!(MAX_SNAPSHOT_FILE_BYTES)
        );
        // At the cap exactly it is read (and judged on its content).
        let at_cap = tmp.path().join("at-cap.json");
        std::fs::write(&at_cap, vec![b' '; MAX_SNAPSHOT_FILE_BYTES as usize]).unwrap();
        let e = check(&at_cap, &playground_like(), "a", None, Paint::PLAIN).unwrap_err();
        assert!(e.details.clone().unwrap().get("maxBytes").is_none());
    }

    #[test]
    fn a_missing_parent_directory_is_a_usage_error() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("nope/s.json");
        let doc = playground_like();
        let e = write(&path, &doc, &canonical_text(&doc)).unwrap_err();
        assert_eq!(e.exit_code(), 64);
        assert!(e.message.contains("nope/s.json"));
    }

    #[test]
    fn unified_diff_hunks() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
        let new = "a\nb\nc\nd\nE\nf\ng\nh\ni\nj\nk\n";
        let d = unified_diff(old, new, "old", "new");
        assert_eq!(
            d,
            "--- old\n+++ new\n@@ -2,9 +2,10 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n i\n j\n+k\n"
        );
        assert_eq!(unified_diff(old, old, "o", "n"), "");
        let d = unified_diff("", "x\n", "o", "n");
        assert_eq!(d, "--- o\n+++ n\n@@ -0,0 +1 @@\n+x\n");
        let d = unified_diff(
            "1\n2\n3\n4\n5\n6\n7\n8\n9\n",
            "1\n2\n3\n4\n5\n6\n7\n8\n",
            "o",
            "n",
        );
        assert_eq!(d, "--- o\n+++ n\n@@ -6,4 +6,3 @@\n 6\n 7\n 8\n-9\n");
    }

    /// A snapshot of tools named `names`, pretty-printed: every tool object ends in the same
    /// `    },` line, so a diff of two such lists has several equally short answers.
    fn snapshot_of(names: &[&str]) -> String {
        let list: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "description": format!("The {n} tool."), "group": null, "policy": "allow"}))
            .collect();
        canonical_text(&document(&tools(Value::Array(list)), &events(json!([]))))
    }

    /// Golden outputs of ambiguous diffs: hunks follow `similar`'s Myers choice, and these pin
    /// it (the tool-list cases are also what the hand-written Myers printed before).
    #[test]
    fn ambiguous_diffs_keep_todays_hunks() {
        let inserted = unified_diff(
            &snapshot_of(&["alpha", "gamma"]),
            &snapshot_of(&["alpha", "beta", "gamma"]),
            "o",
            "n",
        );
        assert_eq!(
            inserted,
            "--- o\n+++ n\n@@ -8,6 +8,11 @@\n       \"name\": \"alpha\"\n     },\n     {\n\
             +      \"description\": \"The beta tool.\",\n+      \"group\": null,\n\
             +      \"name\": \"beta\"\n+    },\n+    {\n\
             \x20      \"description\": \"The gamma tool.\",\n       \"group\": null,\n\
             \x20      \"name\": \"gamma\"\n"
        );
        let appended = unified_diff(
            &snapshot_of(&["alpha", "beta"]),
            &snapshot_of(&["alpha", "alpha2", "beta", "beta2"]),
            "o",
            "n",
        );
        assert_eq!(
            appended,
            "--- o\n+++ n\n@@ -8,9 +8,19 @@\n       \"name\": \"alpha\"\n     },\n     {\n\
             +      \"description\": \"The alpha2 tool.\",\n+      \"group\": null,\n\
             +      \"name\": \"alpha2\"\n+    },\n+    {\n\
             \x20      \"description\": \"The beta tool.\",\n       \"group\": null,\n\
             \x20      \"name\": \"beta\"\n+    },\n+    {\n\
             +      \"description\": \"The beta2 tool.\",\n+      \"group\": null,\n\
             +      \"name\": \"beta2\"\n     }\n   ]\n }\n"
        );
        let removed = unified_diff(
            &snapshot_of(&["alpha", "beta", "gamma"]),
            &snapshot_of(&["alpha", "gamma"]),
            "o",
            "n",
        );
        assert_eq!(
            removed,
            "--- o\n+++ n\n@@ -8,11 +8,6 @@\n       \"name\": \"alpha\"\n     },\n     {\n\
             -      \"description\": \"The beta tool.\",\n-      \"group\": null,\n\
             -      \"name\": \"beta\"\n-    },\n-    {\n\
             \x20      \"description\": \"The gamma tool.\",\n       \"group\": null,\n\
             \x20      \"name\": \"gamma\"\n"
        );
        // Repeated `},` lines moved around: one of several shortest scripts (the hand-written
        // Myers chose another here).
        let shuffled = unified_diff("x\n},\ny\n},\nz\n", "},\nx\n},\n},\ny\nz\n},\n", "o", "n");
        assert_eq!(
            shuffled,
            "--- o\n+++ n\n@@ -1,5 +1,7 @@\n+},\n x\n },\n+},\n y\n+z\n },\n-z\n"
        );
    }

    #[test]
    fn the_human_diff_escapes_app_control_characters() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.json");
        let doc = playground_like();
        write(&path, &doc, &canonical_text(&doc)).unwrap();
        let hostile = "x\u{1b}]0;t\u{7} \u{1b}[2J \u{9b}2J\u{7f}";
        let live = document(
            &tools(
                json!([{"name": format!("n{hostile}"), "description": hostile, "group": null, "policy": "allow"}]),
            ),
            &events(json!([])),
        );
        let e = check(&path, &live, "live (pixel-8)", None, Paint::PLAIN).unwrap_err();
        let tail = e.human_tail.clone().unwrap();
        assert!(
            !tail.chars().any(|c| c.is_control() && c != '\n'),
            "{tail:?}"
        );
        assert!(tail.contains("+ tool nx]0;t [2J 2J\n"), "{tail}");
        assert!(tail.contains(r"\u009b2J\u007f"), "{tail}");
        // `details.diff` keeps the exact text.
        let d = e.details.clone().unwrap();
        assert!(d["diff"].as_str().unwrap().contains('\u{9b}'));
    }
}
