//! Snapshots (insta) of the human renderings of the built binary against a real daemon and the
//! playground device (§L6.1, §L7.1–§L7.3, §L8.1, §L9.4, §L3.3): `sessions ls`, `tools ls` (grouped,
//! with policy tags, and `--groups`), `tools describe`, `tools call` results and failures,
//! `events ls` and `daemon status`. Always `--no-color`; nothing depends on the terminal width.
//!
//! What a run cannot fix — the session id, pid, ports, pin, detected address, version, start
//! time, ages, durations and the temporary state dir — is redacted to a placeholder before the
//! comparison (no RNG or clock seam reaches a separate process; ARCHITECTURE.md#test-layers). Snapshots live in
//! `tests/snapshots/`; under `CI` insta never writes them, so a difference fails the run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::os::unix::fs::PermissionsExt as _;

use support::{Playground, Sandbox, sandbox_with_config};

/// Every occurrence of each value replaced by its placeholder.
fn redact(text: &str, pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .fold(text.to_owned(), |t, (value, placeholder)| {
            t.replace(value, placeholder)
        })
}

/// The value of each `  Label:  value` line named in `labels` replaced, alignment kept.
fn redact_fields(text: &str, labels: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut redacted = line.to_owned();
        for (label, placeholder) in labels {
            let head = format!("  {label}:");
            if let Some(rest) = line.strip_prefix(&head) {
                let pad = rest.len() - rest.trim_start().len();
                redacted = format!("{head}{}{placeholder}", " ".repeat(pad));
            }
        }
        out.push_str(&redacted);
        out.push('\n');
    }
    out
}

/// The AGE cell (the last column) of each `sessions ls` row.
fn redact_ages(table: &str) -> String {
    let mut out = String::new();
    for (i, line) in table.lines().enumerate() {
        let age = line.rsplit(' ').next().unwrap_or_default();
        let is_age = age.len() > 1
            && age[..age.len() - 1].bytes().all(|b| b.is_ascii_digit())
            && age.ends_with(['s', 'm', 'h', 'd']);
        if i > 0 && is_age {
            out.push_str(&line[..line.len() - age.len()]);
            out.push_str("<age>");
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// `, 41 ms)` in the `Result (…)` heading of `tools call`.
fn redact_duration(result: &str) -> String {
    let (head, rest) = result.split_once('\n').unwrap();
    let (before, ms) = head.rsplit_once(", ").unwrap();
    assert!(ms.ends_with(" ms)"), "{head}");
    format!("{before}, <ms> ms)\n{rest}")
}

/// Runs human commands (`--no-color`) and redacts the values a run cannot fix.
struct Human<'a> {
    sb: &'a Sandbox,
    /// (value, placeholder); the state dir first.
    redactions: Vec<(String, String)>,
}

impl<'a> Human<'a> {
    fn new(sb: &'a Sandbox) -> Self {
        let dir = sb.state_dir().display().to_string();
        Self {
            sb,
            redactions: vec![(dir, "<state-dir>".to_owned())],
        }
    }

    fn redact_also(&mut self, value: &str, placeholder: &str) {
        self.redactions
            .push((value.to_owned(), placeholder.to_owned()));
    }

    /// (exit code, stdout, stderr), redacted.
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let mut all = vec!["--no-color"];
        all.extend_from_slice(args);
        let (code, stdout, stderr) = self.sb.output(&all);
        let pairs: Vec<(&str, &str)> = self
            .redactions
            .iter()
            .map(|(v, p)| (v.as_str(), p.as_str()))
            .collect();
        (code, redact(&stdout, &pairs), redact(&stderr, &pairs))
    }
}

#[test]
fn human_renderings_against_the_playground() {
    // A destructive tool denied and one override, so policy shows in listings and errors.
    let sb = sandbox_with_config(
        r#"{"wssPort": 0, "policy": {"destructive": "deny", "tools": {"playground/slow_task": "prompt"}}}"#,
    );
    // As the daemon would create it, so no "tightened" warning joins the output.
    std::fs::set_permissions(sb.state_dir(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut h = Human::new(&sb);
    let (code, out, err) = h.run(&["sessions", "ls"]);
    assert_eq!((code, err.as_str()), (0, ""));
    insta::assert_snapshot!("sessions_ls_empty", out);

    let pg = Playground::start(&sb);
    assert_eq!(pg.alias(), "playground");
    let session_id = pg.ready["data"]["sessionId"].as_str().unwrap().to_owned();
    h.redact_also(&session_id, "<session-id>");

    // Before any call, so the audit directory is still empty.
    let (code, out, err) = h.run(&["daemon", "status"]);
    assert_eq!((code, err.as_str()), (0, ""));
    let out = redact_fields(
        &out,
        &[
            ("Version", "<version>"),
            ("PID", "<pid>"),
            ("Started", "<started> (<age> ago)"),
            ("WSS port", "<wss-port>"),
            ("Web port", "<web-port>"),
            ("Address", "<address> (<source>)"),
            ("Pin", "<pin>"),
            ("Sealed key", "<sealed-key>"),
        ],
    );
    insta::assert_snapshot!("daemon_status", out);

    let (code, out, err) = h.run(&["sessions", "ls"]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(!out.contains("<session-id>"));
    insta::assert_snapshot!("sessions_ls", redact_ages(&out));

    let (code, out, err) = h.run(&["tools", "ls"]);
    assert_eq!((code, err.as_str()), (0, ""));
    insta::assert_snapshot!("tools_ls", out);

    let (code, out, _) = h.run(&["tools", "ls", "--groups"]);
    assert_eq!(code, 0);
    insta::assert_snapshot!("tools_ls_groups", out);

    let (code, out, _) = h.run(&["tools", "ls", "--filter", "count", "--limit", "1"]);
    assert_eq!(code, 0);
    insta::assert_snapshot!("tools_ls_filtered_page", out);

    let (code, out, _) = h.run(&["tools", "describe", "sum"]);
    assert_eq!(code, 0);
    insta::assert_snapshot!("tools_describe_sum", out);

    let (code, out, _) = h.run(&["tools", "describe", "playground", "reset_counter"]);
    assert_eq!(code, 0);
    insta::assert_snapshot!("tools_describe_reset_counter", out);

    let (code, out, err) = h.run(&["tools", "call", "sum", "--input", r#"{"a": 1.5, "b": 2}"#]);
    assert_eq!((code, err.as_str()), (0, ""));
    insta::assert_snapshot!("tools_call_sum", redact_duration(&out));

    let (code, out, err) = h.run(&["tools", "call", "throwing_tool"]);
    assert_eq!((code, out.as_str()), (72, ""));
    insta::assert_snapshot!("tools_call_execution_error", err);

    let (code, out, err) = h.run(&["tools", "call", "reset_counter"]);
    assert_eq!((code, out.as_str()), (77, ""));
    insta::assert_snapshot!("tools_call_policy_denied", err);

    let (code, out, err) = h.run(&["tools", "call", "sum2"]);
    assert_eq!((code, out.as_str()), (72, ""));
    insta::assert_snapshot!("tools_call_not_found", err);

    let (code, out, err) = h.run(&["tools", "call", "sum", "--input", r#"{"a": "one"}"#]);
    assert_eq!((code, out.as_str()), (72, ""));
    insta::assert_snapshot!("tools_call_input_validation_error", err);

    let (code, out, _) = h.run(&["events", "ls"]);
    assert_eq!(code, 0);
    insta::assert_snapshot!("events_ls", out);

    let (code, out, _) = h.run(&["events", "ls", "--name", "playground_ping"]);
    assert_eq!(code, 0);
    insta::assert_snapshot!("events_ls_named", out);

    let (code, out, _) = h.run(&["events", "ls", "--name", "nothing*"]);
    assert_eq!(code, 0);
    insta::assert_snapshot!("events_ls_no_match", out);

    assert_eq!(pg.stop(), 0);
}

#[test]
fn redaction_helpers() {
    assert_eq!(
        redact_fields(
            "Daemon\n  PID:        42\n  Sessions:   1\n",
            &[("PID", "<pid>")]
        ),
        "Daemon\n  PID:        <pid>\n  Sessions:   1\n"
    );
    assert_eq!(
        redact_ages("ALIAS  AGE\np      3s\nq      12m\n"),
        "ALIAS  AGE\np      <age>\nq      <age>\n"
    );
    assert_eq!(
        redact_duration("Result (sum on p, 41 ms)\n  3\n"),
        "Result (sum on p, <ms> ms)\n  3\n"
    );
}
