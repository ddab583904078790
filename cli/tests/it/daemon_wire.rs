//! The built binary against real daemons (§L6, §L9, §S3): `daemon run | start | stop |
//! status`, `sessions ls | revoke | link`, and link delivery through fake `adb` / `xcrun`
//! executables first on PATH.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::io::{BufRead as _, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Playground, Sandbox, exists, is_stopped, sandbox, sandbox_with_config, signal,
    spawn_until_line, wait_child, write_script,
};

#[test]
fn daemon_run_prints_the_ready_line_refuses_a_second_host_and_stops_on_sigterm() {
    let sb = sandbox();
    let (mut child, ready) = spawn_until_line(&sb, &["--json", "daemon", "run"]);
    let daemon = &ready["data"]["daemon"];
    assert_eq!(ready["ok"], true, "{ready}");
    assert_eq!(daemon["pid"], json!(child.id()));
    assert_eq!(daemon["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(daemon["stateDir"], sb.state_dir().display().to_string());
    assert_eq!(daemon["socketPath"], sb.socket().display().to_string());
    // Printed once the socket accepts: a client gets an answer at once.
    assert!(exists(&sb.socket()));
    assert_eq!(
        sb.ok(&["daemon", "status"])["daemon"]["pid"],
        json!(child.id())
    );

    let (code, doc) = sb.json(&["daemon", "run"]);
    assert_eq!(code, 70, "{doc}");
    assert_eq!(doc["error"]["type"], "connection_error");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already running")
    );
    assert_eq!(doc["error"]["details"]["pid"], json!(child.id()));

    signal(child.id(), "TERM");
    assert_eq!(wait_child(&mut child, Duration::from_secs(15)), 0);
    assert!(!exists(&sb.socket()) && !exists(&sb.pidfile()));
}

#[test]
fn daemon_run_human_line_and_sigint() {
    let sb = sandbox();
    let mut cmd = sb.command(&["daemon", "run"]);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(
        line,
        format!(
            "Daemon running (pid {}, state dir {}). Press Ctrl-C to stop.\n",
            child.id(),
            sb.state_dir().display()
        )
    );
    signal(child.id(), "INT");
    assert_eq!(wait_child(&mut child, Duration::from_secs(15)), 0);
}

#[test]
fn a_second_signal_during_daemon_run_teardown_exits_130() {
    let sb = sandbox();
    let mut cmd = sb.command(&["daemon", "run"]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut ready = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert!(ready.starts_with("Daemon running (pid "), "{ready}");
    // Daemon logs (info by default) arrive line by line.
    let (log_tx, log_rx) = mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if log_tx.send(line).is_err() {
                break;
            }
        }
    });

    // A device that cannot answer the close handshake holds teardown step 3 open for up to
    // 1 s (§S3.6): the playground, stopped with SIGSTOP once connected.
    let pg = Playground::start(&sb);
    let device = pg.child.id();
    signal(device, "STOP");
    sb.wait_for("the playground to stop", || is_stopped(device));

    signal(child.id(), "TERM");
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut logs = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = log_rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("teardown never started; logs: {logs:#?}"));
        let started = line.contains("daemon shutting down");
        logs.push(line);
        if started {
            break;
        }
    }
    signal(child.id(), "TERM");
    assert_eq!(
        wait_child(&mut child, Duration::from_secs(15)),
        130,
        "logs: {logs:#?}"
    );
    let rest: Vec<String> = log_rx.try_iter().collect();
    assert!(
        rest.iter()
            .any(|l| l.contains("second interrupt during shutdown")),
        "{rest:#?}"
    );
    assert!(
        !rest.iter().any(|l| l.contains("daemon stopped")),
        "teardown ran to its end: {rest:#?}"
    );

    // The host exited mid-teardown: its pidfile and socket are stale; the sandbox must not
    // signal the dead pid they name.
    let _ = std::fs::remove_file(sb.pidfile());
    let _ = std::fs::remove_file(sb.socket());
    signal(device, "CONT");
    drop(pg);
}

#[test]
fn daemon_run_reloads_on_sighup_and_keeps_running() {
    let sb = sandbox();
    let (mut child, ready) = spawn_until_line(&sb, &["--json", "daemon", "run"]);
    assert_eq!(ready["ok"], true, "{ready}");
    std::fs::write(
        sb.state_dir().join("config.json"),
        r#"{"wssPort": 0, "policy": {"default": "deny"}}"#,
    )
    .unwrap();
    signal(child.id(), "HUP");
    sb.wait_for("SIGHUP to reload the policy", || {
        sb.ok(&["policy", "ls"])["policy"]["default"] == "deny"
    });
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGHUP stopped the daemon"
    );
    signal(child.id(), "TERM");
    assert_eq!(wait_child(&mut child, Duration::from_secs(15)), 0);
    assert!(!exists(&sb.socket()) && !exists(&sb.pidfile()));
}

#[test]
fn mcp_with_an_invalid_scheme_still_starts_and_exits_0_when_stdin_closes() {
    let sb = sandbox();
    // --json has no effect on mcp; stdin is empty, so the client "left" at once.
    let (code, stdout, stderr) = sb.output(&["--json", "mcp", "--scheme", "http"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "", "stdout carries only MCP messages");
    let scheme_lines = stderr
        .lines()
        .filter(|l| l.contains("Invalid deep-link scheme"))
        .count();
    assert_eq!(scheme_lines, 1, "{stderr}");
}

#[test]
fn invalid_configuration_stops_daemon_run_with_65() {
    let sb = sandbox_with_config(r#"{"wssPort": "eighty"}"#);
    let (code, doc) = sb.json(&["daemon", "run"]);
    assert_eq!(code, 65, "{doc}");
    assert_eq!(doc["error"]["type"], "validation_error");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("wssPort"),
        "{doc}"
    );
    assert!(!exists(&sb.socket()));
}

#[test]
fn start_spawns_once_status_reports_and_stop_leaves_nothing() {
    let sb = sandbox();
    let started = sb.ok(&["daemon", "start"]);
    let d = &started["daemon"];
    assert_eq!(d["spawned"], true, "{started}");
    let pid = d["pid"].as_u64().unwrap();
    for key in ["version", "wssPort", "webPort", "startedAt"] {
        assert!(d.get(key).is_some(), "{key} missing: {started}");
    }
    assert_ne!(d["wssPort"], 0);

    let again = sb.ok(&["daemon", "start"]);
    assert_eq!(again["daemon"]["spawned"], false);
    assert_eq!(again["daemon"]["pid"], pid);
    let (code, human, _) = sb.output(&["daemon", "start"]);
    assert_eq!(code, 0);
    assert!(human.starts_with(&format!("Daemon already running (pid {pid}, wss port ")));

    let status = sb.ok(&["daemon", "status"]);
    let keys: Vec<&str> = status
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["daemon", "policy", "audit", "eventsLog"]);
    let daemon = status["daemon"].as_object().unwrap();
    let keys: Vec<&str> = daemon.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "version",
            "controlProtocol",
            "pid",
            "startedAt",
            "stateDir",
            "wssPort",
            "webPort",
            "advertisedAddress",
            "pinnedKeys",
            "sealedKey",
            "sessionCount",
            "sessionsByTransport",
            "pendingLinks",
            "pendingCalls"
        ]
    );
    assert_eq!(status["daemon"]["sessionCount"], 0);
    assert!(
        status["daemon"]["pinnedKeys"][0]
            .as_str()
            .unwrap()
            .starts_with("sha256/")
    );
    let (code, human, _) = sb.output(&["daemon", "status"]);
    assert_eq!(code, 0);
    assert!(human.starts_with("Daemon\n  Version:"), "{human}");

    let stopped = sb.ok(&["daemon", "stop"]);
    assert_eq!(
        stopped,
        json!({"daemon": {"ok": true, "method": "rpc", "pid": pid}})
    );
    assert!(!exists(&sb.socket()), "socket left behind");
    assert!(!exists(&sb.pidfile()), "pidfile left behind");

    let (code, doc) = sb.json(&["daemon", "stop"]);
    assert_eq!(code, 70);
    assert_eq!(doc["error"]["type"], "connection_error");
    assert_eq!(doc["error"]["message"], "No appduct daemon is running");
    let (code, stdout, stderr) = sb.output(&["daemon", "stop"]);
    assert_eq!((code, stdout.as_str()), (70, ""));
    assert!(stderr.contains("No appduct daemon is running"));
}

#[test]
fn stop_with_nothing_ever_started_is_70_and_spawns_nothing() {
    let sb = sandbox();
    let (code, doc) = sb.json(&["daemon", "stop"]);
    assert_eq!(code, 70, "{doc}");
    assert!(!exists(&sb.socket()) && !exists(&sb.pidfile()));
}

#[test]
fn sessions_without_an_app() {
    let sb = sandbox();
    assert_eq!(sb.ok(&["sessions", "ls"]), json!([]));
    let (code, human, stderr) = sb.output(&["sessions", "ls"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        human,
        "No sessions. Run \"appduct sessions link\" to connect an app.\n"
    );

    let (code, doc) = sb.json(&["sessions", "revoke"]);
    assert_eq!(code, 71, "{doc}");
    assert_eq!(doc["error"]["type"], "no_session");
    let (code, doc) = sb.json(&["sessions", "revoke", "nobody"]);
    assert_eq!(code, 71, "{doc}");
    assert_eq!(doc["error"]["type"], "unknown_session");
    let (code, doc) = sb.json(&["tools", "ls"]);
    assert_eq!(code, 71, "{doc}");
}

fn pending_links(sb: &Sandbox) -> u64 {
    sb.ok(&["daemon", "status"])["daemon"]["pendingLinks"]
        .as_u64()
        .unwrap()
}

#[test]
fn link_creation_composes_the_pinned_deep_link_and_revoke_discards_it() {
    let sb = sandbox();
    let link = sb.ok(&["sessions", "link", "--scheme", "myapp", "--ttl", "120"]);
    let deep = link["deepLink"].as_str().unwrap();
    assert!(deep.starts_with("myapp:///?appduct="), "{deep}");
    assert!(deep.contains("&pin=sha256%2F"), "{deep}");
    assert_eq!(link["transport"], "native");
    assert!(link["pin"].as_str().unwrap().starts_with("sha256/"));
    assert!(link.get("delivered").is_none());
    assert_eq!(pending_links(&sb), 1);

    let id = link["sessionId"].as_str().unwrap();
    let revoked = sb.ok(&["sessions", "revoke", id]);
    assert_eq!(revoked["revoked"], "link");
    assert_eq!(pending_links(&sb), 0);

    // The web transport: no pin anywhere, loopback and the web port.
    let web = sb.ok(&[
        "sessions",
        "link",
        "--scheme",
        "myapp",
        "--transport",
        "web",
    ]);
    assert_eq!(web["transport"], "web");
    assert!(!web["deepLink"].as_str().unwrap().contains("pin="));
    assert!(web.get("pin").is_none());
    assert_eq!(web["endpoint"]["address"], "127.0.0.1");

    let page = sb.ok(&[
        "sessions",
        "link",
        "--open",
        "web",
        "--url",
        "http://localhost:3000/app#old",
    ]);
    let url = page["url"].as_str().unwrap();
    assert!(
        url.starts_with("http://localhost:3000/app#appduct="),
        "{url}"
    );
    assert!(
        page["script"]
            .as_str()
            .unwrap()
            .starts_with("window.__APPDUCT__.connect(\"")
    );
}

#[test]
fn link_scheme_comes_from_the_environment_or_project_config_else_64() {
    let mut sb = sandbox();
    let (code, doc) = sb.json(&["sessions", "link"]);
    assert_eq!(code, 64, "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("APPDUCT_SCHEME")
    );
    assert_eq!(pending_links(&sb), 0);

    std::fs::create_dir_all(sb.cwd().join(".appduct")).unwrap();
    std::fs::write(
        sb.cwd().join(".appduct/config.json"),
        r#"{"scheme": "fromproject"}"#,
    )
    .unwrap();
    let link = sb.ok(&["sessions", "link"]);
    assert!(
        link["deepLink"]
            .as_str()
            .unwrap()
            .starts_with("fromproject:///")
    );
    sb.set_env("APPDUCT_SCHEME", "fromenv");
    let link = sb.ok(&["sessions", "link"]);
    assert!(
        link["deepLink"]
            .as_str()
            .unwrap()
            .starts_with("fromenv:///")
    );
}

#[test]
fn human_link_with_qr_prints_the_block_and_the_code() {
    let sb = sandbox();
    let (code, out, err) = sb.output(&["sessions", "link", "--scheme", "myapp", "--qr"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("Link created\n  Session:    "), "{out}");
    assert!(out.contains("  Deep link:  myapp:///?appduct="));
    assert!(out.contains('▀') || out.contains('▄'), "no QR code: {out}");
    // --json never carries the QR code.
    let (_, stdout, _) = sb.output(&["--json", "sessions", "link", "--scheme", "myapp", "--qr"]);
    assert!(!stdout.contains('█'));
}

/// A fake `adb` that logs each argv (one line, arguments joined by `|`) and answers from
/// environment-selected behaviour.
fn fake_adb(sb: &mut Sandbox, devices: &str, fail_reverse: bool) -> std::path::PathBuf {
    let bin = sb.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = sb.root().join("adb.log");
    let fail = if fail_reverse {
        "case \"$*\" in *reverse*) echo 'error: device offline' >&2; exit 1;; esac\n"
    } else {
        ""
    };
    write_script(
        &bin.join("adb"),
        &format!(
            "IFS='|'; echo \"$*\" >> '{}'\n{fail}if [ \"$1\" = devices ]; then printf 'List of devices attached\\n{devices}'; fi\nexit 0\n",
            log.display()
        ),
    );
    sb.set_path_prefix(bin);
    log
}

fn log_lines(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn android_delivery_runs_the_exact_argument_vectors() {
    let mut sb = sandbox();
    let log = fake_adb(&mut sb, "emulator-5554\\tdevice\\n", false);
    let link = sb.ok(&[
        "sessions",
        "link",
        "--open",
        "android",
        "--app-id",
        "com.example.app",
        "--scheme",
        "myapp",
    ]);
    assert_eq!(link["delivered"], true, "{link}");
    assert_eq!(link["target"], "android");
    assert_eq!(link["device"], "emulator-5554");
    assert_eq!(link["endpoint"]["address"], "127.0.0.1");
    let deep = link["deepLink"].as_str().unwrap();
    assert!(deep.contains("&pin=sha256%2F"));
    let port = link["endpoint"]["port"].as_u64().unwrap();
    assert_eq!(
        log_lines(&log),
        vec![
            "devices".to_owned(),
            format!("-s|emulator-5554|reverse|tcp:{port}|tcp:{port}"),
            format!(
                "-s|emulator-5554|shell|am|start|-a|android.intent.action.VIEW|-d|'{deep}'|-p|com.example.app"
            ),
        ]
    );
    assert_eq!(pending_links(&sb), 1);
}

#[test]
fn android_refusals_mint_nothing_and_a_failed_delivery_revokes_the_link() {
    let mut sb = sandbox();
    let log = fake_adb(&mut sb, "a1\\tdevice\\nb2\\tdevice\\n", false);
    // No app id: refused before anything runs.
    let (code, doc) = sb.json(&["sessions", "link", "--open", "android", "--scheme", "myapp"]);
    assert_eq!(code, 64, "{doc}");
    assert!(log_lines(&log).is_empty());
    // Two devices and no --device: the list, nothing minted.
    let args = [
        "sessions", "link", "--open", "android", "--app-id", "com.x", "--scheme", "myapp",
    ];
    let (code, doc) = sb.json(&args);
    assert_eq!(code, 64, "{doc}");
    assert_eq!(doc["error"]["details"]["devices"], json!(["a1", "b2"]));
    assert_eq!(pending_links(&sb), 0);
    // A --device of the wrong shape never runs adb.
    let before = log_lines(&log).len();
    let (code, _) = sb.json(&[
        "sessions", "link", "--open", "android", "--app-id", "com.x", "--scheme", "myapp",
        "--device", "a b",
    ]);
    assert_eq!(code, 64);
    assert_eq!(log_lines(&log).len(), before);

    let mut sb = sandbox();
    let _log = fake_adb(&mut sb, "a1\\tdevice\\n", true);
    let (code, doc) = sb.json(&args);
    assert_eq!(code, 70, "{doc}");
    let details = &doc["error"]["details"];
    assert_eq!(details["argv"][0], "adb");
    assert_eq!(details["argv"][3], "reverse");
    assert_eq!(details["exitCode"], 1);
    assert_eq!(details["stderr"], "error: device offline");
    assert_eq!(
        pending_links(&sb),
        0,
        "the undelivered link must be revoked"
    );
}

#[test]
fn sigint_during_an_ordinary_command_exits_130_without_an_envelope() {
    let mut sb = sandbox();
    // `adb devices` announces itself, then hangs: the CLI is mid-command when interrupted.
    let bin = sb.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let marker = sb.root().join("adb-started");
    write_script(
        &bin.join("adb"),
        &format!("touch '{}'\nexec sleep 5\n", marker.display()),
    );
    sb.set_path_prefix(bin);
    sb.ok(&["daemon", "start"]);

    let mut cmd = sb.command(&[
        "--json",
        "sessions",
        "link",
        "--open",
        "android",
        "--scheme",
        "myapp",
        "--app-id",
        "com.example.app",
    ]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    sb.wait_for("adb to run", || exists(&marker));
    signal(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert!(out.stdout.is_empty(), "no envelope: {:?}", out.stdout);
    assert!(
        out.stderr.is_empty(),
        "no prose under --json: {:?}",
        out.stderr
    );
    // Interrupted before minting: nothing is pending.
    assert_eq!(pending_links(&sb), 0);
}

#[test]
fn events_tail_ends_with_exit_0_when_the_daemon_closes_the_stream() {
    let sb = sandbox();
    sb.ok(&["daemon", "start"]);
    let mut cmd = sb.command(&["events", "tail"]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut notice = String::new();
    stderr.read_line(&mut notice).unwrap();
    // Printed once the subscription is confirmed.
    assert_eq!(
        notice,
        "Listening for app events on all sessions (Ctrl-C to stop)…\n"
    );
    sb.ok(&["daemon", "stop"]);
    assert_eq!(wait_child(&mut child, Duration::from_secs(15)), 0);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert_eq!(rest, "The daemon closed the stream.\n");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert_eq!(out, "");
}

#[test]
fn a_missing_delivery_tool_is_a_connection_error_naming_it() {
    let mut sb = sandbox();
    let bin = sb.root().join("empty-bin");
    std::fs::create_dir_all(&bin).unwrap();
    sb.set_path_prefix(bin);
    sb.set_env("PATH", &sb.root().join("empty-bin").display().to_string());
    let (code, doc) = sb.json(&["sessions", "link", "--open", "ios-sim", "--scheme", "myapp"]);
    assert_eq!(code, 70, "{doc}");
    let hint = doc["error"]["details"]["hint"].as_str().unwrap_or_default();
    assert!(hint.contains("xcrun"), "{doc}");
    let _: Value = doc;
}

#[test]
fn web_transport_to_android_reverses_the_web_port_and_drops_the_pin() {
    let mut sb = sandbox();
    let log = fake_adb(&mut sb, "emulator-5554\\tdevice\\n", false);
    let link = sb.ok(&[
        "sessions",
        "link",
        "--open",
        "android",
        "--transport",
        "web",
        "--app-id",
        "com.x",
        "--scheme",
        "myapp",
    ]);
    let web_port = sb.ok(&["daemon", "status"])["daemon"]["webPort"]
        .as_u64()
        .unwrap();
    assert_eq!(link["transport"], "web");
    assert_eq!(
        link["endpoint"],
        json!({"address": "127.0.0.1", "port": web_port, "family": 4})
    );
    let deep = link["deepLink"].as_str().unwrap();
    assert!(!deep.contains("pin="), "{deep}");
    assert!(link.get("pin").is_none());
    let lines = log_lines(&log);
    assert_eq!(
        lines[1],
        format!("-s|emulator-5554|reverse|tcp:{web_port}|tcp:{web_port}")
    );
    assert!(lines[2].contains(&format!("|-d|'{deep}'|")), "{lines:?}");
}

#[test]
fn ios_simulator_delivery_opens_the_link_on_the_booted_simulator() {
    let mut sb = sandbox();
    let bin = sb.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = sb.root().join("xcrun.log");
    write_script(
        &bin.join("xcrun"),
        &format!(
            "IFS='|'; echo \"$*\" >> '{}'\nif [ \"$2\" = list ]; then echo '{{\"devices\":{{\"ios-18\":[{{\"udid\":\"AAAA-1111\",\"state\":\"Booted\"}}]}}}}'; fi\nexit 0\n",
            log.display()
        ),
    );
    sb.set_path_prefix(bin);
    let link = sb.ok(&["sessions", "link", "--open", "ios-sim", "--scheme", "myapp"]);
    assert_eq!(link["device"], "AAAA-1111");
    assert_eq!(link["target"], "ios-sim");
    let deep = link["deepLink"].as_str().unwrap();
    assert!(deep.contains("&pin=sha256%2F"));
    assert_eq!(
        log_lines(&log),
        vec![
            "simctl|list|devices|booted|--json".to_owned(),
            format!("simctl|openurl|AAAA-1111|{deep}"),
        ]
    );
    // A --device that is not booted: listed, nothing minted.
    let (code, doc) = sb.json(&[
        "sessions", "link", "--open", "ios-sim", "--scheme", "myapp", "--device", "BBBB",
    ]);
    assert_eq!(code, 64, "{doc}");
    assert_eq!(doc["error"]["details"]["devices"], json!(["AAAA-1111"]));
}

#[test]
fn ios_device_refuses_a_loopback_address_before_minting() {
    // SEC-43.
    let sb = sandbox_with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#);
    let (code, doc) = sb.json(&[
        "sessions",
        "link",
        "--open",
        "ios-device",
        "--app-id",
        "com.x",
        "--scheme",
        "myapp",
    ]);
    assert_eq!(code, 64, "{doc}");
    assert!(
        doc["error"]["details"]["hint"]
            .as_str()
            .unwrap()
            .contains("advertisedIp")
    );
    assert_eq!(pending_links(&sb), 0);
}

#[test]
fn a_failed_auto_spawn_names_the_socket_and_the_log_tail() {
    let sb = sandbox_with_config(r#"{"wssPort": "eighty"}"#);
    let (code, doc) = sb.json(&["sessions", "ls"]);
    assert_eq!(code, 70, "{doc}");
    assert_eq!(doc["error"]["type"], "connection_error");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&sb.socket().display().to_string()),
        "{message}"
    );
    assert!(message.contains("daemon.log"), "{message}");
    assert!(
        message.contains("wssPort"),
        "the log tail names the problem: {message}"
    );
    let (code, _) = sb.json(&["daemon", "start"]);
    assert_eq!(code, 70);
}

#[test]
fn stop_falls_back_to_sigterm_when_the_socket_is_gone_but_the_lock_is_held() {
    let sb = sandbox();
    let (mut child, _) = spawn_until_line(&sb, &["--json", "daemon", "run"]);
    std::fs::remove_file(sb.socket()).unwrap();
    let stopped = sb.ok(&["daemon", "stop"]);
    assert_eq!(
        stopped,
        json!({"daemon": {"ok": true, "method": "sigterm", "pid": child.id()}})
    );
    assert_eq!(wait_child(&mut child, Duration::from_secs(15)), 0);
    assert!(!exists(&sb.pidfile()));
}
