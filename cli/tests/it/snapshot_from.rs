//! `appduct tools snapshot --from <file>` (§L7.4.1), against the built binary: the surface of a
//! snapshot file (such as `appduct-sdk snapshot` writes, §T17) written or checked without a
//! daemon, normalised like a live one, with the exit codes of §L4.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::io::Write as _;
use std::process::Stdio;

use serde_json::{Value, json};
use support::sandbox;

/// The TypeScript playground's committed snapshot (§T14, §T17).
const PLAYGROUND: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../sdk-ts/playground/tools.snapshot.json"
);

fn doc(tools: Value) -> Value {
    json!({"snapshotVersion": 1, "tools": tools, "events": [{"name": "e", "description": "E."}]})
}

#[test]
fn from_a_file_writes_and_checks_without_a_daemon() {
    let sb = sandbox();
    let from = sb.cwd().join("from.json");
    // Unsorted tools, an extra top-level key and compact text: normalised to the §L7.4 form.
    let mut unsorted = doc(json!([
        {"name": "zeta", "description": "Z.", "group": null, "timeout_ms": 1000.0},
        {"name": "alpha", "description": "A.", "group": "g", "riskLevel": "low"}
    ]));
    unsorted["note"] = json!("not part of the surface");
    std::fs::write(&from, unsorted.to_string()).unwrap();
    let written = sb.ok(&[
        "tools",
        "snapshot",
        "--from",
        "from.json",
        "--write",
        "s.json",
    ]);
    assert_eq!(
        written,
        json!({"path": "s.json", "tools": 2, "events": 1, "changed": true})
    );
    let text = std::fs::read_to_string(sb.cwd().join("s.json")).unwrap();
    assert!(text.starts_with("{\n  \"events\": ["), "{text}");
    assert!(
        text.find("\"alpha\"").unwrap() < text.find("\"zeta\"").unwrap(),
        "{text}"
    );
    // A descriptor field the CLI does not know is kept: the surface is generic.
    assert!(text.contains("\"riskLevel\": \"low\""), "{text}");
    assert!(text.contains("\"timeout_ms\": 1000\n"), "{text}");
    assert!(!text.contains("note"), "{text}");

    let checked = sb.ok(&[
        "tools",
        "snapshot",
        "--from",
        "from.json",
        "--check",
        "s.json",
    ]);
    assert_eq!(
        checked,
        json!({"path": "s.json", "matches": true, "tools": 2, "events": 1})
    );

    // Drift in the --from surface: exit 3, the diff headed by the --from file.
    std::fs::write(
        &from,
        doc(
            json!([{"name": "alpha", "description": "Changed.", "group": "g", "riskLevel": "low"}]),
        )
        .to_string(),
    )
    .unwrap();
    let (code, out) = sb.json(&[
        "tools",
        "snapshot",
        "--from",
        "from.json",
        "--check",
        "s.json",
    ]);
    assert_eq!(code, 3, "{out}");
    let details = &out["error"]["details"];
    assert_eq!(details["removed"]["tools"], json!(["zeta"]));
    assert_eq!(details["changed"]["tools"], json!(["alpha"]));
    assert!(
        details["diff"]
            .as_str()
            .unwrap()
            .starts_with("--- s.json\n+++ from.json\n@@ "),
        "{out}"
    );
    let (code, _, stderr) = sb.output(&[
        "--no-color",
        "tools",
        "snapshot",
        "--from",
        "from.json",
        "--check",
        "s.json",
    ]);
    assert_eq!(code, 3);
    assert!(
        stderr.ends_with(
            "Review the change, then run \"appduct tools snapshot --from from.json --write s.json\".\n"
        ),
        "{stderr}"
    );

    // An unusable --from file: 66 naming it, like an unusable --check file.
    for content in [
        "not json",
        r#"{"snapshotVersion": 2, "tools": [], "events": []}"#,
    ] {
        std::fs::write(&from, content).unwrap();
        let (code, out) = sb.json(&[
            "tools",
            "snapshot",
            "--from",
            "from.json",
            "--check",
            "s.json",
        ]);
        assert_eq!(code, 66, "{out}");
        assert_eq!(out["error"]["type"], "inspection_error");
        assert_eq!(out["error"]["details"]["path"], "from.json");
    }
    let (code, out) = sb.json(&["tools", "snapshot", "--from", "nope.json", "--write", "-"]);
    assert_eq!(code, 66, "{out}");
    // A selector and --from together, or --from alone: usage errors.
    let (code, _) = sb.json(&[
        "tools", "snapshot", "pixel", "--from", "s.json", "--write", "-",
    ]);
    assert_eq!(code, 64);
    let (code, _) = sb.json(&["tools", "snapshot", "--from", "s.json"]);
    assert_eq!(code, 64);
    // No run contacted (or spawned) a daemon.
    assert!(!sb.socket().exists());
}

#[test]
fn from_stdin_rewrites_the_sdk_snapshot_byte_for_byte() {
    let sb = sandbox();
    let committed = std::fs::read_to_string(PLAYGROUND).unwrap();
    let mut cmd = sb.command(&["tools", "snapshot", "--from", "-", "--write", "-"]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(committed.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), committed);
    assert!(!sb.socket().exists());
}
