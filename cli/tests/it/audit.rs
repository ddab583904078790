//! `appduct audit` over day files written by the daemon's own audit writer
//! (`appduct_daemon::audit::AuditWriter`) into a sandbox's state dir; no daemon runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use appduct_daemon::audit::{AuditRecord, AuditWriter};
use appduct_protocol::control::{Caller, DeniedReason, Settlement};
use appduct_protocol::errors::ErrorType;
use serde_json::Value;

use crate::support::{Sandbox, sandbox};

const WAIT: Duration = Duration::from_secs(15);
const MINUTE: u64 = 60_000;

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn record(ago_ms: u64, session: &str, alias: &str, tool: &str, s: Settlement) -> AuditRecord {
    AuditRecord {
        ts_unix_ms: now_ms() - ago_ms,
        call_id: format!("call-{tool}-{ago_ms}"),
        session_id: session.to_owned(),
        alias: alias.to_owned(),
        tool: tool.to_owned(),
        args_sha256: "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a".to_owned(),
        settlement: s,
        duration_ms: 12,
        caller: Caller::Cli,
        transport: None,
        consent: None,
        operator: None,
        content_summary: None,
    }
}

/// Writes `records` with the daemon's writer and waits until they are on disk.
fn write(state_dir: &Path, records: Vec<AuditRecord>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = state_dir.join("audit");
        std::fs::create_dir_all(&dir).unwrap();
        let writer = AuditWriter::start(dir, 30);
        for r in records {
            writer.enqueue(r);
        }
        writer.flush(WAIT).await.unwrap();
        assert_eq!(writer.failed_writes(), 0);
    });
}

/// A sandbox holding a varied log: three tools, two sessions, every outcome, ages from 10
/// minutes to 26 hours (the oldest in yesterday's day file).
fn seeded() -> Sandbox {
    let sb = sandbox();
    write(
        &sb.state_dir(),
        vec![
            record(26 * 60 * MINUTE, "SessA", "pixel-8", "X", Settlement::Ok),
            record(2 * 60 * MINUTE, "SessA", "pixel-8", "X", Settlement::Ok),
            record(30 * MINUTE, "SessA", "pixel-8", "X", Settlement::Ok),
            record(
                25 * MINUTE,
                "SessA",
                "pixel-8",
                "Y",
                Settlement::Denied(DeniedReason::Policy),
            ),
            record(
                20 * MINUTE,
                "SessB",
                "pixel-8-2",
                "X",
                Settlement::Error(ErrorType::ToolTimeout),
            ),
            record(
                15 * MINUTE,
                "SessB",
                "pixel-8-2",
                "cart_add",
                Settlement::Cancelled,
            ),
            record(
                10 * MINUTE,
                "SessB",
                "pixel-8-2",
                "cart_clear",
                Settlement::Ok,
            ),
        ],
    );
    sb
}

fn records(sb: &Sandbox, args: &[&str]) -> Vec<Value> {
    let mut full = vec!["audit"];
    full.extend_from_slice(args);
    let (code, doc) = sb.json(&full);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["ok"], true, "{doc}");
    doc["data"]["records"].as_array().unwrap().clone()
}

fn tools_and_sessions(rs: &[Value]) -> Vec<(String, String)> {
    rs.iter()
        .map(|r| {
            (
                r["tool"].as_str().unwrap().to_owned(),
                r["sessionId"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn since_and_tool_return_exactly_the_matching_records_as_stored() {
    let sb = seeded();
    let stored = sb.audit_records();
    assert_eq!(stored.len(), 7);
    let got = records(&sb, &["--since", "1h", "--tool", "X"]);
    // Exactly the two `X` records of the last hour, byte for byte as stored (key order too).
    let want: Vec<Value> = vec![stored[2].clone(), stored[4].clone()];
    assert_eq!(got, want);
    let as_text: Vec<String> = got.iter().map(Value::to_string).collect();
    let stored_text: Vec<String> = want.iter().map(Value::to_string).collect();
    assert_eq!(as_text, stored_text);
    // Nothing started a daemon.
    assert_eq!(sb.daemon_pid(), None);
}

#[test]
fn each_filter_narrows_on_its_own() {
    let sb = seeded();
    assert_eq!(records(&sb, &[]).len(), 7);
    assert_eq!(records(&sb, &["--since", "3h"]).len(), 6);
    assert_eq!(records(&sb, &["--since", "90s"]).len(), 0);
    assert_eq!(records(&sb, &["--since", "2d"]).len(), 7);
    let at = appduct_client::timestamp::format_iso_ms(now_ms() - 22 * MINUTE);
    assert_eq!(
        tools_and_sessions(&records(&sb, &["--since", &at])),
        [
            ("X", "SessB"),
            ("cart_add", "SessB"),
            ("cart_clear", "SessB")
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    // Session by id and by the alias recorded at call time.
    assert_eq!(records(&sb, &["--session", "SessB"]).len(), 3);
    assert_eq!(records(&sb, &["--session", "pixel-8-2"]).len(), 3);
    assert_eq!(records(&sb, &["--session", "pixel-8"]).len(), 4);
    assert_eq!(records(&sb, &["--session", "nobody"]).len(), 0);
    // Tool name and glob.
    assert_eq!(records(&sb, &["--tool", "Y"]).len(), 1);
    let carts = records(&sb, &["--tool", "cart_*"]);
    assert_eq!(
        carts
            .iter()
            .map(|r| r["tool"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["cart_add", "cart_clear"]
    );
    // Outcomes.
    let denied = records(&sb, &["--outcome", "denied"]);
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0]["deniedReason"], "policy");
    assert_eq!(
        records(&sb, &["--outcome", "error"])[0]["errorType"],
        "tool_timeout"
    );
    assert_eq!(records(&sb, &["--outcome", "cancelled"]).len(), 1);
    assert_eq!(records(&sb, &["--outcome", "ok"]).len(), 4);
    // Bad values are usage errors (exit 64), before any file is read.
    for bad in [
        &["--outcome", "fine"][..],
        &["--since", "yesterday"],
        &["--since", "5w"],
        &["--tool", ""],
    ] {
        let mut args = vec!["audit"];
        args.extend_from_slice(bad);
        let (code, doc) = sb.json(&args);
        assert_eq!(code, 64, "{bad:?}: {doc}");
        assert_eq!(doc["error"]["type"], "usage_error", "{doc}");
    }
}

#[test]
fn human_output_is_one_aligned_line_per_record() {
    let sb = seeded();
    let (code, stdout, _) = sb.output(&["audit", "--session", "SessB"]);
    assert_eq!(code, 0, "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(lines[0].starts_with("TIME"), "{stdout}");
    let tool_col = lines[0].find("TOOL").unwrap();
    let outcome_col = lines[0].find("OUTCOME").unwrap();
    for (line, (tool, outcome)) in lines[1..].iter().zip([
        ("X", "error:tool_timeout"),
        ("cart_add", "cancelled:tool_cancelled"),
        ("cart_clear", "ok"),
    ]) {
        assert!(line.contains("pixel-8-2"), "{line}");
        assert_eq!(&line[tool_col..tool_col + tool.len()], tool, "{stdout}");
        assert_eq!(
            &line[outcome_col..outcome_col + outcome.len()],
            outcome,
            "{stdout}"
        );
        assert!(line.contains("12 ms") && line.ends_with("cli"), "{line}");
    }
}

#[test]
fn malformed_lines_are_skipped_and_counted() {
    let sb = seeded();
    let today = sb
        .state_dir()
        .join("audit")
        .join(appduct_daemon::audit::day_file_name(now_ms()));
    let mut text = std::fs::read_to_string(&today).unwrap();
    text.push_str("not json\n{\"ts\":\"yesterday\",\"tool\":\"X\"}\n[1,2]\n\n");
    std::fs::write(&today, text).unwrap();
    let (code, stdout, stderr) = sb.output(&["--json", "audit", "--tool", "X"]);
    assert_eq!(code, 0, "{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["data"]["records"].as_array().unwrap().len(), 4, "{doc}");
    assert_eq!(doc["data"]["malformed"], 3, "{doc}");
    assert!(stderr.contains("Skipped 3 malformed lines"), "{stderr}");
}

#[test]
fn follow_prints_records_appended_after_it_started() {
    let sb = sandbox();
    write(
        &sb.state_dir(),
        vec![record(MINUTE, "SessA", "pixel-8", "before", Settlement::Ok)],
    );
    let proc = sb
        .spawn(&[
            "--json", "audit", "--follow", "--since", "1h", "--tool", "b*",
        ])
        .unwrap();
    let first: Value = serde_json::from_str(&proc.next_stdout_line(WAIT).expect("first")).unwrap();
    assert_eq!(first["tool"], "before");
    // Appended after the follower printed what was there: a filtered-out record, then a match.
    write(
        &sb.state_dir(),
        vec![
            record(0, "SessA", "pixel-8", "skipped", Settlement::Ok),
            record(0, "SessA", "pixel-8", "burst", Settlement::Ok),
        ],
    );
    let next: Value =
        serde_json::from_str(&proc.next_stdout_line(WAIT).expect("appended")).unwrap();
    assert_eq!(next["tool"], "burst");
    assert_eq!(next, sb.audit_records()[2]);
    assert!(proc.signal("INT"));
    let ran = proc.finish(WAIT).unwrap();
    assert_eq!(ran.code, 0, "{}", ran.stderr);
}

#[test]
fn an_over_long_line_is_skipped_and_counted_not_held() {
    let sb = seeded();
    let today = sb
        .state_dir()
        .join("audit")
        .join(appduct_daemon::audit::day_file_name(now_ms()));
    let mut text = std::fs::read_to_string(&today).unwrap();
    let before = text.lines().count();
    // A well-formed record, but longer than the 1 MiB line bound: skipped like a bad line.
    let long = format!(
        "{{\"ts\":\"2026-12-01T10:00:00.000Z\",\"sessionId\":\"S\",\"alias\":\"a\",\"tool\":\"{}\",\"outcome\":\"ok\"}}\n",
        "x".repeat(2 << 20)
    );
    text.push_str(&long);
    text.push_str(&std::fs::read_to_string(&today).unwrap());
    std::fs::write(&today, text).unwrap();
    let (code, stdout, stderr) = sb.output(&["--json", "audit"]);
    assert_eq!(code, 0, "{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["data"]["malformed"], 1, "{stderr}");
    let records = doc["data"]["records"].as_array().unwrap();
    assert!(records.len() >= 2 * before, "{}", records.len());
    assert!(
        records
            .iter()
            .all(|r| r["tool"].as_str().unwrap().len() < 100)
    );
    assert!(stderr.contains("Skipped 1 malformed line"), "{stderr}");
}

#[test]
fn pretty_json_streams_the_same_document() {
    let sb = seeded();
    let (code, compact) = sb.json(&["audit"]);
    assert_eq!(code, 0);
    let (code, stdout, stderr) = sb.output(&["--json", "--pretty", "audit"]);
    assert_eq!(code, 0, "{stderr}");
    let pretty: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(pretty, compact);
    assert_eq!(
        stdout,
        format!("{}\n", serde_json::to_string_pretty(&pretty).unwrap())
    );
}

#[test]
fn follow_refuses_a_day_file_that_is_a_fifo() {
    let sb = sandbox();
    let dir = sb.state_dir().join("audit");
    std::fs::create_dir_all(&dir).unwrap();
    let today = dir.join(appduct_daemon::audit::day_file_name(now_ms()));
    let made = std::process::Command::new("mkfifo")
        .arg("-m")
        .arg("600")
        .arg(&today)
        .status()
        .unwrap();
    assert!(made.success());
    // Opening a FIFO for reading would block the follower until a writer came.
    let proc = sb.spawn(&["audit", "--follow", "--since", "1h"]).unwrap();
    assert!(
        Sandbox::wait_until(WAIT, || proc.stderr().contains("is not a regular file")),
        "{}",
        proc.stderr()
    );
    assert!(proc.signal("INT"));
    let ran = proc.finish(WAIT).unwrap();
    assert_eq!(ran.code, 0, "{}", ran.stderr);
}

#[test]
fn follow_never_reads_through_a_symlinked_day_file() {
    let sb = sandbox();
    let dir = sb.state_dir().join("audit");
    std::fs::create_dir_all(&dir).unwrap();
    let elsewhere = sb.root().join("elsewhere.jsonl");
    std::fs::write(&elsewhere, "").unwrap();
    let today = dir.join(appduct_daemon::audit::day_file_name(now_ms()));
    std::os::unix::fs::symlink(&elsewhere, &today).unwrap();
    let proc = sb
        .spawn(&["--json", "audit", "--follow", "--since", "1h"])
        .unwrap();
    assert!(
        Sandbox::wait_until(WAIT, || proc
            .stderr()
            .contains("Not reading the audit file")),
        "{}",
        proc.stderr()
    );
    // Records written through the link are never printed.
    let line = "{\"ts\":\"2026-12-01T10:00:00.000Z\",\"sessionId\":\"S\",\"alias\":\"a\",\"tool\":\"planted\",\"outcome\":\"ok\"}\n";
    std::fs::write(&elsewhere, line).unwrap();
    assert!(proc.signal("INT"));
    let ran = proc.finish(WAIT).unwrap();
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(!ran.stdout.contains("planted"), "{}", ran.stdout);
}
