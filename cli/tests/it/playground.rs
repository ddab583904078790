//! `appduct playground` and the commands that need an app, against the built binary: the
//! playground device connects over the daemon's real wss listener, a second client lists,
//! describes and calls its tools, tails its events, snapshots its surface, and interrupts
//! calls (§L7, §L8, §T14).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::io::Write as _;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Playground, Pty, Sandbox, is_stopped, sandbox, signal, wait_child};

fn pending_calls(sb: &Sandbox) -> u64 {
    sb.ok(&["daemon", "status"])["daemon"]["pendingCalls"]
        .as_u64()
        .unwrap()
}

#[test]
fn the_playground_serves_the_contract_to_a_second_client() {
    let sb = sandbox();
    let mut pg = Playground::start(&sb);
    let data = &pg.ready["data"];
    assert_eq!(
        data["tools"],
        json!([
            "sum",
            "call_count",
            "reset_counter",
            "slow_task",
            "throwing_tool",
            "counter_chart"
        ])
    );
    let sessions = sb.ok(&["sessions", "ls"]);
    assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions}");
    assert_eq!(sessions[0]["toolCount"], 6);
    assert_eq!(sessions[0]["alias"], data["alias"]);

    // A ping line on stdin posts playground_ping.
    let mut stdin = pg.child.stdin.take().unwrap();
    stdin.write_all(b"ping\n").unwrap();
    stdin.flush().unwrap();
    sb.wait_for("playground_ping", || {
        let since = sb.ok(&["events", "since", "0"]);
        since["events"].as_array().unwrap().iter().any(|e| {
            e["data"]["name"] == "playground_ping" && e["data"]["payload"]["at"].is_number()
        })
    });
    let events = sb.ok(&["events", "ls"]);
    assert_eq!(events["events"][0]["name"], "playground_ping");

    let result = sb.ok(&["tools", "call", "sum", "--input", r#"{"a": 1.5, "b": 2}"#]);
    assert_eq!(result, json!({"total": 3.5}));
    let result = sb.ok(&["tools", "call", "sum", "--input", r#"{"a": 1, "b": 2}"#]);
    assert_eq!(result.to_string(), r#"{"total":3}"#);
    assert_eq!(sb.ok(&["tools", "call", "call_count"]), json!({"count": 2}));

    let (code, human, err) = sb.output(&[
        "tools",
        "call",
        &pg.alias(),
        "sum",
        "--input",
        r#"{"a":2,"b":2}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        human.starts_with(&format!("Result (sum on {}, ", pg.alias())),
        "{human}"
    );
    assert!(human.ends_with("  {\n    \"total\": 4\n  }\n"), "{human}");

    let (code, doc) = sb.json(&["tools", "call", "throwing_tool"]);
    assert_eq!(code, 72, "{doc}");
    assert_eq!(doc["error"]["type"], "tool_execution_error");
    assert_eq!(
        doc["error"]["message"],
        "throwing_tool always fails on purpose."
    );

    let (code, doc) = sb.json(&["tools", "call", "sum2"]);
    assert_eq!(code, 72, "{doc}");
    assert_eq!(doc["error"]["type"], "tool_not_found");

    drop(stdin);
    assert_eq!(pg.stop(), 0);
    assert_eq!(
        sb.ok(&["sessions", "ls"]),
        json!([]),
        "the playground revokes its session"
    );
}

#[test]
fn listing_describing_and_snapshotting_the_playground() {
    let sb = sandbox();
    let pg = Playground::start(&sb);
    let listed = sb.ok(&["tools", "ls"]);
    assert_eq!(listed["total"], 6);
    assert_eq!(listed["hasMore"], false);
    assert!(
        listed.get("limit").is_none(),
        "JSON has no default limit: {listed}"
    );
    let (code, human, _) = sb.output(&["tools", "ls"]);
    assert_eq!(code, 0);
    assert!(
        human.starts_with(&format!("Tools on {}\n", pg.alias())),
        "{human}"
    );
    assert!(
        human.contains("sum(a: number, b: number) -> { total: number }"),
        "{human}"
    );

    let described = sb.ok(&["tools", "describe", "slow_task"]);
    assert_eq!(described["group"], "diagnostics/progress");
    assert_eq!(described["timeout_ms"], 5000);
    assert_eq!(described["signature"], "slow_task() -> { done: bool }");
    let (code, doc) = sb.json(&["tools", "describe", "nope"]);
    assert_eq!(code, 72, "{doc}");
    assert_eq!(
        doc["error"]["details"]["available"]
            .as_array()
            .unwrap()
            .len(),
        6
    );

    let file = sb.cwd().join("tools.snapshot.json");
    let written = sb.ok(&["tools", "snapshot", "--write", "tools.snapshot.json"]);
    assert_eq!(
        written,
        json!({"path": "tools.snapshot.json", "tools": 6, "events": 1, "changed": true})
    );
    let checked = sb.ok(&["tools", "snapshot", "--check", "tools.snapshot.json"]);
    assert_eq!(checked["matches"], true);
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("Adds a and b", "Adds b and a")).unwrap();
    let (code, doc) = sb.json(&["tools", "snapshot", "--check", "tools.snapshot.json"]);
    assert_eq!(code, 3, "{doc}");
    assert_eq!(doc["error"]["details"]["changed"]["tools"], json!(["sum"]));
    let (code, stdout, _) = sb.output(&["--json", "tools", "snapshot", "--write", "-"]);
    assert_eq!(code, 0);
    assert!(
        stdout.starts_with("{\n  \"events\": ["),
        "no envelope: {stdout}"
    );

    // `--groups <word>` where the word is no session suggests --group.
    let (code, doc) = sb.json(&["tools", "ls", "--groups", "counter"]);
    assert_eq!(code, 64, "{doc}");
    assert!(
        doc["error"]["details"]["hint"]
            .as_str()
            .unwrap()
            .contains("--group counter")
    );
    let groups = sb.ok(&["tools", "ls", "--groups"]);
    assert_eq!(groups["total"], 6);

    // Text flags are sent verbatim: `--filter 07` is the string "07" (the daemon echoes it).
    let filtered = sb.ok(&["tools", "ls", "--filter", "07"]);
    assert_eq!(filtered["filter"], json!("07"));
    assert_eq!(filtered["total"], 0);

    // --verbose: meta after data, with the call's handle for tools call.
    let (code, doc) = sb.json(&[
        "--verbose",
        "tools",
        "call",
        "sum",
        "--input",
        r#"{"a":1,"b":1}"#,
    ]);
    assert_eq!(code, 0, "{doc}");
    let keys: Vec<&String> = doc.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["ok", "data", "meta"]);
    assert_eq!(doc["meta"]["command"], "tools call");
    let call = &doc["meta"]["call"];
    assert!(
        call["callId"].as_str().unwrap().starts_with("cli-"),
        "{call}"
    );
    assert_eq!(call["alias"], pg.alias());
    assert!(
        call["sessionId"].is_string() && call["durationMs"].is_u64(),
        "{call}"
    );
    let (code, doc) = sb.json(&["--verbose", "tools", "ls"]);
    assert_eq!(code, 0);
    assert_eq!(doc["meta"]["command"], "tools ls");
    assert!(doc["meta"].get("call").is_none());
    let (code, human, _) = sb.output(&["--verbose", "sessions", "ls"]);
    assert_eq!(code, 0);
    assert!(
        human.contains("\nMeta\n  Command:    sessions ls\n"),
        "{human}"
    );

    // --timeout only shortens the tool's deadline: slow_task (1.5 s) times out at 1 s.
    let (code, doc) = sb.json(&["tools", "call", "slow_task", "--timeout", "1000"]);
    assert_eq!(code, 72, "{doc}");
    assert_eq!(doc["error"]["type"], "tool_timeout");

    // Without a terminal the progress display stays off: nothing on stderr.
    let (code, stdout, stderr) = sb.output(&["tools", "call", "slow_task"]);
    assert_eq!(code, 0);
    assert!(stdout.starts_with("Result (slow_task on "), "{stdout}");
    assert_eq!(stderr, "");
    assert_eq!(pg.stop(), 0);
}

#[test]
fn ctrl_c_cancels_a_call_and_sigterm_settles_it_locally() {
    let sb = sandbox();
    let pg = Playground::start(&sb);

    let mut call = sb.command(&["--json", "tools", "call", "slow_task"]);
    call.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = call.spawn().unwrap();
    sb.wait_for("the call to be pending", || pending_calls(&sb) == 1);
    signal(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(72));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["type"], "tool_cancelled", "{doc}");
    assert!(out.stderr.is_empty(), "no stderr prose under --json");
    // The cancelled slow_task did not count.
    assert_eq!(sb.ok(&["tools", "call", "call_count"]), json!({"count": 0}));

    let mut call = sb.command(&["--json", "tools", "call", "slow_task"]);
    call.stdout(Stdio::piped()).stderr(Stdio::null());
    let child = call.spawn().unwrap();
    sb.wait_for("the call to be pending", || pending_calls(&sb) == 1);
    signal(child.id(), "TERM");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(72));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["error"]["message"],
        "Call cancelled; the daemon did not confirm in time"
    );
    assert_eq!(doc["error"]["details"]["settledBy"], "cli");
    assert_eq!(doc["error"]["details"]["reason"], "client_cancelled");
    // The closed connection cancels the call in the daemon.
    sb.wait_for("the call to settle", || pending_calls(&sb) == 0);
    assert_eq!(pg.stop(), 0);
}

/// The keys of every object in reverse order.
fn reverse_keys(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .rev()
                .map(|(k, v)| (k.clone(), reverse_keys(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(reverse_keys).collect()),
        other => other.clone(),
    }
}

#[test]
fn the_tools_snapshot_guard_fails_both_ways() {
    let sb = sandbox();
    let pg = Playground::start(&sb);
    let file = sb.cwd().join("tools.snapshot.json");
    sb.ok(&["tools", "snapshot", "--write", "tools.snapshot.json"]);
    let text = std::fs::read_to_string(&file).unwrap();
    // The canonical document of the playground contract (§L7.4).
    insta::assert_snapshot!("playground_tools_snapshot", text);
    let written: Value = serde_json::from_str(&text).unwrap();
    // The TypeScript playground's static snapshot (its declarations, §T17) is this live surface
    // but `counter_chart`, which only this playground has (§T14.1): no other entry differs.
    let ts_static = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sdk-ts/playground/tools.snapshot.json"
    );
    let (code, doc) = sb.json(&[
        "tools",
        "snapshot",
        "--from",
        ts_static,
        "--check",
        "tools.snapshot.json",
    ]);
    assert_eq!(code, 3, "{doc}");
    let none = json!({"tools": [], "events": []});
    assert_eq!(doc["error"]["details"]["added"], none);
    assert_eq!(doc["error"]["details"]["changed"], none);
    assert_eq!(
        doc["error"]["details"]["removed"],
        json!({"tools": ["counter_chart"], "events": []})
    );
    let check = |doc: &Value| {
        std::fs::write(&file, serde_json::to_string_pretty(doc).unwrap()).unwrap();
        sb.json(&["tools", "snapshot", "--check", "tools.snapshot.json"])
    };
    let tool_index = |doc: &Value, name: &str| {
        doc["tools"]
            .as_array()
            .unwrap()
            .iter()
            .position(|t| t["name"] == name)
            .unwrap()
    };

    // Key order is not part of the surface.
    let (code, doc) = check(&reverse_keys(&written));
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["data"]["matches"], true);

    // The file lacks a live tool: added.
    let mut fewer = written.clone();
    let sum = tool_index(&fewer, "sum");
    fewer["tools"].as_array_mut().unwrap().remove(sum);
    let (code, doc) = check(&fewer);
    assert_eq!(code, 3, "{doc}");
    assert_eq!(doc["error"]["type"], "assertion_error");
    assert_eq!(doc["error"]["details"]["added"]["tools"], json!(["sum"]));
    assert_eq!(doc["error"]["details"]["removed"]["tools"], json!([]));

    // The file has a tool the app no longer registers, and an event it no longer declares:
    // removed.
    let mut more = written.clone();
    more["tools"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "zz_gone", "description": "Gone.", "group": null}));
    more["events"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "zz_event", "description": "Gone."}));
    let (code, doc) = check(&more);
    assert_eq!(code, 3, "{doc}");
    assert_eq!(
        doc["error"]["details"]["removed"]["tools"],
        json!(["zz_gone"])
    );
    assert_eq!(
        doc["error"]["details"]["removed"]["events"],
        json!(["zz_event"])
    );
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("0 added, 2 removed, 0 changed"),
        "{doc}"
    );

    // A schema's contents changed: changed, with a diff from the file to the live surface.
    let mut schema = written.clone();
    let sum = tool_index(&schema, "sum");
    schema["tools"][sum]["input_schema"]["properties"]["a"]["type"] = json!("string");
    let (code, doc) = check(&schema);
    assert_eq!(code, 3, "{doc}");
    assert_eq!(doc["error"]["details"]["changed"]["tools"], json!(["sum"]));
    let diff = doc["error"]["details"]["diff"].as_str().unwrap();
    assert!(
        diff.starts_with("--- tools.snapshot.json\n+++ live (playground)\n@@ "),
        "{diff}"
    );
    assert!(
        diff.contains("\n-            \"type\": \"string\"\n"),
        "{diff}"
    );
    assert!(
        diff.contains("\n+            \"type\": \"number\"\n"),
        "{diff}"
    );
    // Human: the error block without Details, one line per entry, the diff, the next step.
    let (code, stdout, stderr) = sb.output(&[
        "--no-color",
        "tools",
        "snapshot",
        "--check",
        "tools.snapshot.json",
    ]);
    assert_eq!((code, stdout.as_str()), (3, ""));
    insta::assert_snapshot!("tools_snapshot_check_mismatch", stderr);

    // A file that cannot be used: 66 naming it.
    for (content, needle) in [
        (None, "tools.snapshot.json"),
        (Some("not json"), "tools.snapshot.json"),
        (
            Some(r#"{"snapshotVersion": 2, "tools": [], "events": []}"#),
            "snapshotVersion",
        ),
    ] {
        match content {
            Some(c) => std::fs::write(&file, c).unwrap(),
            None => std::fs::remove_file(&file).unwrap(),
        }
        let (code, doc) = sb.json(&["tools", "snapshot", "--check", "tools.snapshot.json"]);
        assert_eq!(code, 66, "{doc}");
        assert_eq!(doc["error"]["type"], "inspection_error");
        let message = doc["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{needle}: {message}");
    }
    assert_eq!(pg.stop(), 0);
}

#[test]
fn on_a_terminal_progress_shows_and_a_second_ctrl_c_settles_locally() {
    let sb = sandbox();
    let pg = Playground::start(&sb);
    let mut pty = Pty::open();
    let mut call = sb.command(&["tools", "call", "slow_task"]);
    call.stdout(Stdio::piped()).stderr(pty.take_slave());
    let mut child = call.spawn().unwrap();
    // The parent's copy of the terminal goes, so the reader ends when the child does.
    drop(call);
    let mut stdout = child.stdout.take().unwrap();

    // stderr is a terminal: the display shows the app's progress and message.
    pty.wait_for("warming up");
    assert!(
        pty.text
            .contains("[###-------] 33% slow_task on playground"),
        "{:?}",
        pty.text
    );
    // The app stops answering, so the first Ctrl-C's cancel stays unconfirmed.
    let device = pg.child.id();
    signal(device, "STOP");
    sb.wait_for("the playground to stop", || is_stopped(device));

    signal(child.id(), "INT");
    pty.wait_for("Cancelling…");
    signal(child.id(), "INT");
    assert_eq!(wait_child(&mut child, Duration::from_secs(15)), 72);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
    assert_eq!(out, "", "progress and human failures never reach stdout");
    let text = pty.read_to_end();
    // The display is erased before the error block is printed; on a terminal the block's
    // title is coloured.
    assert!(
        text.contains("\r\x1b[2K\x1b[1;31mCommand failed\x1b[0m"),
        "{text:?}"
    );
    assert!(text.contains("tool_cancelled"), "{text:?}");
    assert!(
        text.contains("Call cancelled; the daemon did not confirm in time"),
        "{text:?}"
    );
    // Settled by the CLI at once, not by the daemon's 2 s cancel grace.
    assert!(text.contains("\"settledBy\":\"cli\""), "{text:?}");

    signal(device, "CONT");
    sb.wait_for("the daemon to settle the call", || pending_calls(&sb) == 0);
    assert_eq!(pg.stop(), 0);
}

#[test]
fn json_and_no_progress_keep_the_terminal_quiet() {
    let sb = sandbox();
    let pg = Playground::start(&sb);
    for flags in [&["--json"][..], &["--no-progress"]] {
        let mut pty = Pty::open();
        let mut args = vec!["tools", "call", "slow_task"];
        args.extend_from_slice(flags);
        let mut call = sb.command(&args);
        call.stdout(Stdio::piped()).stderr(pty.take_slave());
        let child = call.spawn().unwrap();
        drop(call);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{flags:?}");
        assert_eq!(pty.read_to_end(), "", "{flags:?}: nothing on the terminal");
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(stdout.contains("\"done\""), "{flags:?}: {stdout}");
    }
    assert_eq!(pg.stop(), 0);
}

#[test]
fn events_tail_streams_app_events_until_sigint() {
    let sb = sandbox();
    let mut pg = Playground::start(&sb);
    let mut tail = sb.command(&["--json", "events", "tail"]);
    tail.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = tail.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = std::io::BufReader::new(stdout);
        let mut line = String::new();
        while std::io::BufRead::read_line(&mut reader, &mut line).is_ok_and(|n| n > 0) {
            let _ = tx.send(line.clone());
            line.clear();
        }
    });
    let mut stdin = pg.child.stdin.take().unwrap();
    // The subscription may start after a ping; keep pinging until one arrives.
    let mut tries = 0;
    let line = loop {
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(300)) {
            break line;
        }
        tries += 1;
        assert!(tries < 50, "no app event reached events tail");
    };
    let event: Value = serde_json::from_str(line.trim_end()).unwrap();
    assert_eq!(event["kind"], "app_event");
    assert_eq!(event["data"]["name"], "playground_ping");
    signal(child.id(), "INT");
    assert_eq!(wait_child(&mut child, Duration::from_secs(10)), 0);
    drop(stdin);
    assert_eq!(pg.stop(), 0);
}

#[test]
fn the_tour_runs_every_step_and_exits_zero() {
    let sb = sandbox();
    let (code, out, err) = sb.output(&["playground", "--tour"]);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    for step in [
        "$ appduct sessions ls",
        "tools describe",
        "throwing_tool",
        "Tour complete.",
    ] {
        assert!(out.contains(step), "{step} missing: {out}");
    }
    assert!(out.contains("[###-------] 33% warming up"), "{out}");
    assert!(out.contains("tool_cancelled"), "{out}");

    let data = sb.ok(&["playground", "--tour"]);
    assert_eq!(data["ok"], true);
    let codes: Vec<u64> = data["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["exitCode"].as_u64().unwrap())
        .collect();
    assert_eq!(codes, [0, 0, 0, 0, 0, 0, 72, 72]);
    // The picture step saved the counter chart (§L16): a PNG file that decodes.
    let chart = &data["steps"][5];
    assert!(
        chart["command"]
            .as_str()
            .unwrap()
            .contains("tools call playground counter_chart --out-dir "),
        "{chart}"
    );
    let path = chart["data"]["content"][0]["path"].as_str().unwrap();
    let (width, height) = png_size(&std::fs::read(path).unwrap());
    assert_eq!((width, height), (320, 160));
    assert!(out.contains("[0] image/png, "), "{out}");
    assert_eq!(sb.ok(&["sessions", "ls"]), json!([]));
}

fn png_size(bytes: &[u8]) -> (u32, u32) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    (info.width, info.height)
}

#[test]
fn counter_chart_with_out_dir_writes_a_png_of_the_counter_that_decodes() {
    let sb = sandbox();
    let pg = Playground::start(&sb);
    sb.ok(&["tools", "call", "sum", "--input", r#"{"a": 1, "b": 2}"#]);
    let dir = sb.cwd().join("shots");
    let dir_arg = dir.display().to_string();
    let data = sb.ok(&["tools", "call", "counter_chart", "--out-dir", &dir_arg]);
    assert!(data.get("result").is_none(), "{data}");
    let block = &data["content"][0];
    assert_eq!(block["type"], "image");
    assert_eq!(block["mimeType"], "image/png");
    let path = std::path::PathBuf::from(block["path"].as_str().unwrap());
    assert_eq!(path.parent(), Some(dir.as_path()));
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(block["bytes"], bytes.len());
    assert_eq!(png_size(&bytes), (320, 160));

    // Human output without --out-dir names the image and says how to save it.
    let (code, human, err) = sb.output(&["tools", "call", &pg.alias(), "counter_chart"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        human.starts_with(&format!("Result (counter_chart on {}, ", pg.alias())),
        "{human}"
    );
    assert!(human.contains("Content\n  [0] image/png, "), "{human}");
    assert!(human.contains(" — use --out-dir DIR to save\n"), "{human}");
}
