//! The built `appduct mcp` host at the process level (§M14, §M15, §L12): signals during
//! startup, early errors kept off stdout, and the startup diagnostics on stderr.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::os::unix::net::UnixListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::{Sandbox, sandbox, signal, spawn_until_line, wait_child};

/// A "daemon" socket that accepts connections and never answers, so the bridge's startup
/// handshake hangs (for 10 s, its request timeout).
fn silent_daemon(sb: &Sandbox) -> UnixListener {
    let listener = UnixListener::bind(sb.socket()).unwrap();
    listener.set_nonblocking(true).unwrap();
    listener
}

/// Accepts the bridge's startup connection (bounded wait) and keeps it open.
fn accept_within(listener: &UnixListener, limit: Duration) -> std::os::unix::net::UnixStream {
    let deadline = Instant::now() + limit;
    loop {
        match listener.accept() {
            Ok((stream, _)) => return stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "the bridge never connected");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

#[test]
fn sigterm_and_sigint_during_the_startup_connection_exit_0() {
    for sig in ["TERM", "INT"] {
        let sb = sandbox();
        let listener = silent_daemon(&sb);
        let mut child = sb
            .command(&["mcp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The bridge is now waiting for `daemon.hello` to be answered.
        let _held = accept_within(&listener, Duration::from_secs(10));
        signal(child.id(), sig);
        let code = wait_child(&mut child, Duration::from_secs(5));
        assert_eq!(code, 0, "SIG{sig} during startup must exit 0");
        let mut out = String::new();
        std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
        assert_eq!(out, "", "nothing on stdout before the first response");
    }
}

#[test]
fn usage_errors_of_mcp_stay_off_stdout_even_with_json() {
    let sb = sandbox();
    for args in [
        &["--json", "mcp", "--bogus"][..],
        &["mcp", "--json", "--bogus"],
        &["--pretty", "--json", "mcp", "extra"],
    ] {
        let (code, stdout, stderr) = sb.output(args);
        assert_eq!(code, 64, "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}: stdout carries only JSON-RPC");
        assert!(
            !stderr.trim().is_empty(),
            "{args:?}: the error is on stderr"
        );
        assert!(
            serde_json::from_str::<serde_json::Value>(stderr.trim()).is_err(),
            "{args:?}: --json has no effect on mcp, so no envelope: {stderr}"
        );
    }
    // Other commands keep the envelope on stdout.
    let (code, stdout, _) = sb.output(&["--json", "sessions", "ls", "--bogus"]);
    assert_eq!(code, 64);
    assert!(stdout.contains("\"ok\":false"), "{stdout}");
}

#[test]
fn a_state_dir_that_cannot_be_resolved_is_reported_on_stderr_for_mcp() {
    // A relative --state-dir while the working directory no longer exists: the state dir
    // cannot be made absolute, so it cannot be resolved.
    let sb = sandbox();
    let gone = sb.root().join("gone");
    std::fs::create_dir(&gone).unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"cd "$1" && rmdir "$1" && exec "$2" --json --state-dir rel mcp"#)
        .arg("sh")
        .arg(&gone)
        .arg(env!("CARGO_BIN_EXE_appduct"))
        .env("HOME", sb.home())
        .env_remove("APPDUCT_STATE_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout, "", "stdout carries only JSON-RPC");
    assert!(
        stderr.contains("rel"),
        "the error names the state dir: {stderr}"
    );
}

#[test]
fn scheme_problems_at_startup_are_one_stderr_line_and_the_bridge_still_starts() {
    let sb = sandbox();
    // An invalid --scheme.
    let (code, stdout, stderr) = sb.output(&["mcp", "--scheme", "http"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("deep-link scheme"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("Invalid deep-link scheme"), "{stderr}");
    assert!(lines[0].contains("starting anyway"), "{stderr}");
    // No scheme anywhere: the working directory is empty.
    let (code, stdout, stderr) = sb.output(&["mcp"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("deep-link scheme"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("could not resolve the deep-link scheme"),
        "{stderr}"
    );
    assert!(lines[0].contains("starting anyway"), "{stderr}");
    // A resolvable scheme: nothing to report.
    let (code, _, stderr) = sb.output(&["mcp", "--scheme", "shopapp"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("deep-link scheme"), "{stderr}");
}

#[test]
fn a_failed_startup_prints_exactly_one_stderr_line_with_both_remedies() {
    let mut sb = sandbox();
    sb.set_env("APPDUCT_DAEMON_VERSION_OVERRIDE", "0.0.1");
    let (mut daemon, _ready) = spawn_until_line(&sb, &["--json", "daemon", "run"]);
    // A pending link makes the older daemon busy, so it may not be replaced.
    let mut control = std::os::unix::net::UnixStream::connect(sb.socket()).unwrap();
    std::io::Write::write_all(
        &mut control,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"link.create\",\"params\":{}}\n",
    )
    .unwrap();
    let mut answer = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(&control), &mut answer).unwrap();
    assert!(answer.contains("sessionId"), "{answer}");
    // An invalid scheme too: its diagnostic must not precede the failure line.
    let (code, stdout, stderr) = sb.output(&["mcp", "--scheme", "http"]);
    assert_eq!(code, 70, "{stderr}");
    assert_eq!(stdout, "");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one line: {stderr}");
    for part in [
        "0.0.1",
        env!("CARGO_PKG_VERSION"),
        "appduct daemon stop",
        "--daemon-restart",
    ] {
        assert!(lines[0].contains(part), "{part}: {stderr}");
    }
    assert_eq!(daemon.try_wait().unwrap(), None, "the busy daemon was kept");
    let _ = daemon.kill();
}
