//! `appduct approvals` and a CLI call parked for an operator (§C11.1; SECURITY.md §4.18),
//! against the real daemon and the playground: the caller is told where to approve, a
//! non-interactive `approve` is refused, and a person at a terminal (a pseudo-terminal that is
//! the approver's controlling terminal) reads the one-time code and types it back.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

const CONFIG: &str = r#"{"wssPort": 0, "consent": {"fallback": "operator", "approvalTimeoutMs": 60000},
 "policy": {"tools": {"playground/call_count": "prompt"}}}"#;

const MARKER: &str = "type this code only if you started that approval yourself: ";

#[test]
fn a_parked_cli_call_completes_after_an_interactive_approval() {
    // The operator's terminal exists before the daemon starts, as a person's does: the daemon
    // refuses a code to a terminal opened after, or less than 50 ms before, the request
    // (SECURITY.md §4.18).
    let mut pty = Pty::open();
    let sb = sandbox_with_config(CONFIG);
    let pg = Playground::start(&sb);
    assert_eq!(pg.alias(), "playground");

    // The caller, without a terminal: it says on stderr where to approve, and waits.
    let mut call = sb.command(&["tools", "call", "call_count"]);
    call.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut caller = call.spawn().unwrap();
    let stderr = caller.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let approval_id = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(15))
            .expect("the caller never said where to approve");
        if let Some(rest) = line.trim().strip_prefix("appduct approvals approve ") {
            break rest.trim().to_owned();
        }
    };
    assert!(approval_id.starts_with("apr_"), "{approval_id}");

    // Listed, without any code.
    let (code, doc) = sb.json(&["approvals", "ls"]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(
        doc["data"]["approvals"][0]["approvalId"],
        approval_id.as_str()
    );
    assert_eq!(doc["data"]["approvals"][0]["tool"], "call_count");

    // As an agent would run it: no terminal, refused with exit 77.
    let (code, doc) = sb.json(&["approvals", "approve", &approval_id]);
    assert_eq!(code, 77, "{doc}");
    assert_eq!(doc["error"]["type"], "approval_refused");
    assert_eq!(doc["error"]["details"]["reason"], "not_interactive");

    // A person: the approver runs in its own session whose controlling terminal is the pty,
    // opened before the daemon started (as a person's terminal is).
    let slave = pty.take_slave_file();
    let inner = sb.command(&["approvals", "approve", &approval_id]);
    let mut approve = Command::new("setsid");
    approve
        .arg("-w")
        .arg("-c")
        .arg(inner.get_program())
        .args(inner.get_args());
    for (key, value) in inner.get_envs() {
        match value {
            Some(v) => approve.env(key, v),
            None => approve.env_remove(key),
        };
    }
    if let Some(dir) = inner.get_current_dir() {
        approve.current_dir(dir);
    }
    approve
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    let mut approver = approve.spawn().unwrap();
    drop(approve);
    pty.wait_for(MARKER);
    let at = pty.text.find(MARKER).unwrap() + MARKER.len();
    let shown: String = pty.text[at..].chars().take(7).collect();
    assert!(
        shown.len() == 7 && shown.as_bytes()[3] == b'-',
        "{shown:?} in {:?}",
        pty.text
    );
    pty.wait_for("Type it to approve");
    pty.type_text(&format!("{shown}\n"));
    assert_eq!(
        wait_child(&mut approver, Duration::from_secs(15)),
        0,
        "{:?}",
        pty.text
    );
    let text = pty.read_to_end().to_owned();
    assert!(
        text.contains(&format!("Approved {approval_id}.")),
        "{text:?}"
    );

    // The parked call ran.
    assert_eq!(wait_child(&mut caller, Duration::from_secs(15)), 0);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut caller.stdout.take().unwrap(), &mut out).unwrap();
    assert!(out.contains("Result (call_count on playground"), "{out}");

    // The audit record says an operator approved it; the code is nowhere in the state dir's
    // logs.
    let digits: String = shown.chars().filter(char::is_ascii_digit).collect();
    let audit_dir = sb.state_dir().join("audit");
    let mut audit = String::new();
    for entry in std::fs::read_dir(&audit_dir).unwrap() {
        audit.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    let record = audit
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["tool"] == "call_count")
        .expect("no audit record");
    assert_eq!(record["consent"], "operator", "{record}");
    assert_eq!(record["operator"]["decision"], "approved");
    assert_eq!(record["operator"]["approvalId"], approval_id.as_str());
    assert!(!audit.contains(&digits), "{audit}");
    let events = std::fs::read_to_string(sb.state_dir().join("events.log")).unwrap_or_default();
    assert!(events.contains("approval_settled"), "{events}");
    assert!(!events.contains(&digits));
    assert_eq!(pg.stop(), 0);
}

#[test]
fn deny_works_without_a_terminal_and_the_caller_gets_policy_denied() {
    let sb = sandbox_with_config(CONFIG);
    let pg = Playground::start(&sb);
    let mut call = sb.command(&["--json", "tools", "call", "call_count"]);
    call.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut caller = call.spawn().unwrap();
    let mut approval_id = String::new();
    sb.wait_for("the call to park", || {
        let (_, doc) = sb.json(&["approvals", "ls"]);
        match doc["data"]["approvals"][0]["approvalId"].as_str() {
            Some(id) => {
                approval_id = id.to_owned();
                true
            }
            None => false,
        }
    });
    let (code, doc) = sb.json(&["approvals", "deny", &approval_id]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["data"]["decision"], "denied");
    assert_eq!(wait_child(&mut caller, Duration::from_secs(15)), 77);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut caller.stdout.take().unwrap(), &mut out).unwrap();
    let doc: serde_json::Value = serde_json::from_str(out.trim_end()).unwrap();
    assert_eq!(doc["error"]["type"], "policy_denied", "{doc}");
    assert_eq!(doc["error"]["details"]["reason"], "operator_denied");
    assert_eq!(pg.stop(), 0);
}

/// Runs `appduct <args>` in its own session whose controlling terminal is `pty`.
#[allow(clippy::unwrap_used)]
fn spawn_in_terminal(sb: &Sandbox, pty: &mut Pty, args: &[&str]) -> std::process::Child {
    let slave = pty.take_slave_file();
    let inner = sb.command(args);
    let mut cmd = Command::new("setsid");
    cmd.arg("-w")
        .arg("-c")
        .arg(inner.get_program())
        .args(inner.get_args());
    for (key, value) in inner.get_envs() {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    if let Some(dir) = inner.get_current_dir() {
        cmd.current_dir(dir);
    }
    cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    cmd.spawn().unwrap()
}

#[test]
fn a_loosening_policy_set_needs_the_code_typed_in_a_terminal() {
    // The person's terminal exists before the daemon starts (so before the change is asked
    // for, by more than the 50 ms margin of SECURITY.md §4.18).
    let mut pty = Pty::open();
    let sb = sandbox_with_config(CONFIG);

    // As an agent would run it: held, exit 77, nothing changed.
    let (code, doc) = sb.json(&["policy", "set", "playground/call_count", "allow"]);
    assert_eq!(code, 77, "{doc}");
    assert_eq!(doc["error"]["type"], "approval_refused");
    assert_eq!(
        doc["error"]["details"]["reason"],
        "operator_approval_required"
    );
    assert_eq!(
        doc["error"]["details"]["change"],
        "playground/call_count prompt -> allow"
    );
    let (_, listed) = sb.json(&["policy", "ls"]);
    assert_eq!(
        listed["data"]["policy"]["tools"]["playground/call_count"], "prompt",
        "{listed}"
    );
    // Tightening needs nothing.
    let (code, doc) = sb.json(&["policy", "set", "*/sum", "deny"]);
    assert_eq!(code, 0, "{doc}");

    // A person at the terminal: the code is written there and typed back.
    let mut setter = spawn_in_terminal(
        &sb,
        &mut pty,
        &["policy", "set", "playground/call_count", "allow"],
    );
    pty.wait_for(MARKER);
    assert!(
        pty.text
            .contains("change: playground/call_count prompt -> allow"),
        "{:?}",
        pty.text
    );
    let at = pty.text.find(MARKER).unwrap() + MARKER.len();
    let shown: String = pty.text[at..].chars().take(7).collect();
    pty.wait_for("Type it to approve");
    pty.type_text(&format!("{shown}\n"));
    assert_eq!(
        wait_child(&mut setter, Duration::from_secs(15)),
        0,
        "{:?}",
        pty.text
    );
    let text = pty.read_to_end().to_owned();
    assert!(text.contains("Policy updated"), "{text:?}");
    let (_, listed) = sb.json(&["policy", "ls"]);
    assert_eq!(
        listed["data"]["policy"]["tools"]["playground/call_count"], "allow",
        "{listed}"
    );
}
