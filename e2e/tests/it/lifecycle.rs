//! Daemon lifecycle across processes (§S3, §C7; §L9; SECURITY.md §8 SEC-01, 06–09, 51, 52): auto-spawn
//! on a clean state dir, one daemon out of a spawn race, `daemon stop`, stale-file takeover after
//! a SIGKILL, file modes, refusals at startup, and version drift with
//! `APPDUCT_DAEMON_VERSION_OVERRIDE`.

use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::Path;
use std::time::Duration;

use appduct_e2e::OrFail as _;
use appduct_e2e::control::Control;
use appduct_e2e::harness::{Proc, Sandbox, exists, is_alive, signal};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn pid_of(data: &Value) -> u32 {
    data["daemon"]["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no pid in {data}")) as u32
}

#[test]
fn daemon_start_spawns_on_a_clean_state_dir_with_private_modes() {
    let sb = Sandbox::new().or_fail();
    // SEC-07: a state dir created 0755 beforehand is tightened at start.
    std::fs::set_permissions(sb.state_dir(), std::fs::Permissions::from_mode(0o755)).or_fail();
    assert!(!exists(&sb.state_dir().join("daemon.sock")));

    let started = sb.data(&["daemon", "start"]).or_fail();
    let pid = pid_of(&started);
    sb.track_pid(pid);
    assert_eq!(started["daemon"]["spawned"], true, "{started}");
    assert!(
        started["daemon"]["wssPort"].as_u64().unwrap_or(0) > 0,
        "{started}"
    );
    assert!(is_alive(pid));
    assert_eq!(sb.daemon_pid(), Some(pid));
    // Spawned detached: not a child of this test, and the only daemon of the dir.
    assert_eq!(sb.daemon_processes(), vec![pid]);

    let again = sb.data(&["daemon", "start"]).or_fail();
    assert_eq!(again["daemon"]["spawned"], false, "{again}");
    assert_eq!(pid_of(&again), pid);
    let human = sb.run(&["daemon", "start"]).or_fail();
    assert_eq!(human.code, 0);
    assert!(
        human
            .stdout
            .starts_with(&format!("Daemon already running (pid {pid}, wss port ")),
        "{human:?}"
    );

    let status = sb.status().or_fail();
    assert_eq!(pid_of(&status), pid);
    assert_eq!(
        status["daemon"]["stateDir"],
        json!(sb.state_dir().display().to_string())
    );
    assert!(
        status["daemon"]["webPort"].as_u64().unwrap_or(0) > 0,
        "{status}"
    );
    assert_eq!(status["daemon"]["sessionCount"], 0);

    // SEC-06: modes after startup.
    let dir = sb.state_dir();
    assert_eq!(mode(&dir), 0o700, "state dir");
    let sock = std::fs::symlink_metadata(dir.join("daemon.sock")).or_fail();
    assert!(sock.file_type().is_socket());
    assert_eq!(mode(&dir.join("daemon.sock")), 0o600, "socket");
    assert_eq!(mode(&dir.join("daemon.pid")), 0o600, "pidfile");
    assert_eq!(mode(&dir.join("key.pem")), 0o600, "key");
    assert_eq!(mode(&dir.join("audit")), 0o700, "audit dir");
    assert_eq!(mode(&dir.join("daemon.log")), 0o600, "daemon.log");
    assert!(Sandbox::wait_until(WAIT, || exists(
        &dir.join("events.log")
    )));
    assert_eq!(mode(&dir.join("events.log")), 0o600, "events.log");
    let pidfile = std::fs::read_to_string(dir.join("daemon.pid")).or_fail();
    assert_eq!(pidfile, format!("{pid}\n"));
}

#[test]
fn a_cli_command_auto_spawns_and_daemon_stop_removes_socket_and_pidfile() {
    let sb = Sandbox::new().or_fail();
    let ls = sb.run(&["--json", "sessions", "ls"]).or_fail();
    assert_eq!(
        (ls.code, ls.stdout.as_str()),
        (0, "{\"ok\":true,\"data\":[]}\n")
    );
    assert_eq!(ls.stderr, "", "no stderr prose under --json");
    let pid = sb
        .daemon_pid()
        .unwrap_or_else(|| panic!("no pidfile after sessions ls"));
    sb.track_pid(pid);
    assert!(is_alive(pid));

    let stopped = sb.data(&["daemon", "stop"]).or_fail();
    assert_eq!(
        stopped,
        json!({"daemon": {"ok": true, "method": "rpc", "pid": pid}})
    );
    // `daemon stop` returns only once both files are gone.
    assert!(!exists(&sb.state_dir().join("daemon.sock")));
    assert!(!exists(&sb.pidfile()));
    assert!(Sandbox::wait_until(WAIT, || !is_alive(pid)));

    let again = sb.run(&["--json", "daemon", "stop"]).or_fail();
    assert_eq!(again.code, 70, "{again:?}");
    let doc = again.json().or_fail();
    assert_eq!(doc["error"]["type"], "connection_error");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("No appduct daemon is running"),
        "{doc}"
    );
    // `daemon stop` never spawns.
    assert!(sb.daemon_processes().is_empty());
}

#[test]
fn clients_racing_to_spawn_start_exactly_one_daemon() {
    let sb = Sandbox::new().or_fail();
    let racers: Vec<Proc> = (0..6)
        .map(|_| sb.spawn(&["--json", "sessions", "ls"]).or_fail())
        .collect();
    for racer in racers {
        let ran = racer.finish(Duration::from_secs(30)).or_fail();
        assert_eq!(ran.code, 0, "{ran:?}");
        assert_eq!(ran.json().or_fail()["data"], json!([]));
    }
    let daemons = sb.daemon_processes();
    for pid in &daemons {
        sb.track_pid(*pid);
    }
    assert_eq!(daemons.len(), 1, "daemons serving the dir: {daemons:?}");
    assert_eq!(sb.daemon_pid(), daemons.first().copied());
    assert!(!exists(&sb.state_dir().join("daemon.spawn.lock")));
}

#[test]
fn a_killed_daemons_stale_socket_and_pidfile_are_taken_over() {
    let sb = Sandbox::new().or_fail();
    let first = pid_of(&sb.data(&["daemon", "start"]).or_fail());
    sb.track_pid(first);
    assert!(signal(first, "KILL"));
    assert!(Sandbox::wait_until(WAIT, || !is_alive(first)));
    // The kill left both files behind.
    assert!(exists(&sb.state_dir().join("daemon.sock")));
    assert!(exists(&sb.pidfile()));

    let started = sb.data(&["daemon", "start"]).or_fail();
    let second = pid_of(&started);
    sb.track_pid(second);
    assert_eq!(started["daemon"]["spawned"], true, "{started}");
    assert_ne!(second, first);
    assert_eq!(sb.daemon_pid(), Some(second));
    assert_eq!(sb.daemon_processes(), vec![second]);
    assert_eq!(sb.data(&["sessions", "ls"]).or_fail(), json!([]));
}

#[test]
fn a_second_daemon_run_is_refused_and_the_first_keeps_serving() {
    // SEC-51.
    let sb = Sandbox::new().or_fail();
    let pid = pid_of(&sb.data(&["daemon", "start"]).or_fail());
    sb.track_pid(pid);
    let second = sb
        .spawn(&["--json", "daemon", "run"])
        .or_fail()
        .finish(WAIT)
        .or_fail();
    assert_eq!(second.code, 70, "{second:?}");
    let text = format!("{}{}", second.stdout, second.stderr);
    assert!(text.contains("already running"), "{text}");
    assert_eq!(pid_of(&sb.status().or_fail()), pid);
    assert_eq!(sb.daemon_processes(), vec![pid]);
}

/// `daemon run --json` in `sb`, which must fail at startup with `code`; returns its output.
fn failed_start(sb: &Sandbox, code: i32) -> String {
    let ran = sb
        .spawn(&["--json", "daemon", "run"])
        .or_fail()
        .finish(WAIT)
        .or_fail();
    assert_eq!(ran.code, code, "{ran:?}");
    assert!(sb.daemon_processes().is_empty());
    format!("{}{}", ran.stdout, ran.stderr)
}

#[test]
fn startup_refuses_a_planted_socket_file_a_pidfile_symlink_and_a_loose_key() {
    // SEC-08: a regular file at daemon.sock is not deleted.
    let sb = Sandbox::new().or_fail();
    let sock = sb.state_dir().join("daemon.sock");
    std::fs::write(&sock, "planted").or_fail();
    let out = failed_start(&sb, 70);
    assert!(out.contains(&sock.display().to_string()), "{out}");
    assert_eq!(std::fs::read_to_string(&sock).or_fail(), "planted");

    // SEC-09: a symlink at daemon.pid is not followed.
    let sb = Sandbox::new().or_fail();
    let target = sb.home().join("pid-target");
    std::os::unix::fs::symlink(&target, sb.pidfile()).or_fail();
    let out = failed_start(&sb, 1);
    assert!(out.contains("symbolic link"), "{out}");
    assert!(!exists(&target), "the symlink was followed");

    // SEC-01: a key with group bits stops the daemon, naming the path.
    let sb = Sandbox::new().or_fail();
    let key = sb.state_dir().join("key.pem");
    let made = sb.run(&["--json", "keygen"]).or_fail();
    assert_eq!(made.code, 0, "{made:?}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).or_fail();
    let out = failed_start(&sb, 65);
    assert!(out.contains(&key.display().to_string()), "{out}");
    assert_eq!(
        mode(&key),
        0o640,
        "the daemon must not repair the key silently"
    );
}

/// A `daemon run` that reports `version`, and its pid.
fn old_daemon(sb: &Sandbox, version: &str) -> (Proc, u32) {
    let mut cmd = sb.command(&["--json", "daemon", "run"]);
    cmd.env("APPDUCT_DAEMON_VERSION_OVERRIDE", version);
    let (proc, ready) = sb.spawn_ready_with(cmd).or_fail();
    assert_eq!(ready["data"]["daemon"]["version"], version, "{ready}");
    let pid = pid_of(&ready["data"]);
    sb.track_pid(pid);
    (proc, pid)
}

#[test]
fn an_older_idle_daemon_is_replaced_and_the_spawned_one_drops_the_override() {
    let sb = Sandbox::new().or_fail();
    let (mut old, old_pid) = old_daemon(&sb, "0.0.1");
    // The replacing client carries the override too; the daemon it spawns must not (SEC-52).
    let mut cmd = sb.command(&["--json", "sessions", "ls"]);
    cmd.env("APPDUCT_DAEMON_VERSION_OVERRIDE", "0.0.1");
    let ran = Proc::spawn(cmd).or_fail().finish(WAIT).or_fail();
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(
        old.wait_exit(WAIT),
        Some(0),
        "the old daemon was not shut down"
    );
    let new_pid = sb.daemon_pid().unwrap_or_else(|| panic!("no new daemon"));
    sb.track_pid(new_pid);
    assert_ne!(new_pid, old_pid);
    let environ = std::fs::read(format!("/proc/{new_pid}/environ")).or_fail();
    assert!(
        !String::from_utf8_lossy(&environ).contains("APPDUCT_DAEMON_VERSION_OVERRIDE"),
        "the spawned daemon inherited the override"
    );
    let status = sb.status().or_fail();
    assert_eq!(status["daemon"]["version"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn an_older_busy_daemon_is_kept_unless_a_restart_is_forced() {
    // SEC-53.
    let sb = Sandbox::with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#).or_fail();
    let (mut old, old_pid) = old_daemon(&sb, "0.0.1");
    // A pending link makes the daemon busy; minted over the raw socket (no version check),
    // since every CLI command that mints one would first replace the idle daemon.
    let mut control = Control::connect(&sb.state_dir().join("daemon.sock"), WAIT).or_fail();
    let created = control.result("link.create", json!({})).or_fail();
    assert!(created["sessionId"].is_string(), "{created}");
    // `daemon status` never replaces.
    assert_eq!(sb.ok(&["daemon", "status"])["daemon"]["version"], "0.0.1");

    let refused = sb.run(&["--json", "sessions", "ls"]).or_fail();
    assert_eq!(refused.code, 70, "{refused:?}");
    assert_eq!(refused.stderr, "");
    let error = &refused.json().or_fail()["error"];
    assert_eq!(error["type"], "connection_error");
    assert_eq!(error["details"]["daemonVersion"], "0.0.1", "{error}");
    assert_eq!(error["details"]["clientVersion"], env!("CARGO_PKG_VERSION"));
    assert_eq!(error["details"]["pendingLinkCount"], 1, "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("--daemon-restart"), "{message}");
    let (code, _) = sb.json(&["--no-daemon-restart", "sessions", "ls"]);
    assert_eq!(code, 70);
    assert_eq!(
        old.wait_exit(Duration::ZERO),
        None,
        "a busy daemon was replaced"
    );

    // `daemon status` only warns.
    let status = sb.status().or_fail();
    assert_eq!(pid_of(&status), old_pid);
    assert!(
        status["warning"]
            .as_str()
            .unwrap_or_default()
            .contains("0.0.1"),
        "{status}"
    );

    let forced = sb
        .run(&["--json", "--daemon-restart", "sessions", "ls"])
        .or_fail();
    assert_eq!(forced.code, 0, "{forced:?}");
    assert_eq!(forced.json().or_fail()["data"], json!([]), "{forced:?}");
    // The old daemon was shut down and exits 0; a new daemon of this version serves.
    assert_eq!(old.wait_exit(WAIT), Some(0));
    let new_pid = sb.daemon_pid().unwrap_or_else(|| panic!("no new daemon"));
    sb.track_pid(new_pid);
    assert_ne!(new_pid, old_pid);
    assert_eq!(
        sb.ok(&["daemon", "status"])["daemon"]["version"],
        env!("CARGO_PKG_VERSION")
    );
}

#[test]
fn a_newer_daemon_is_used_with_a_notice_only_in_human_mode() {
    let sb = Sandbox::new().or_fail();
    let (mut newer, pid) = old_daemon(&sb, "99.0.0");
    let json_run = sb.run(&["--json", "sessions", "ls"]).or_fail();
    assert_eq!(json_run.code, 0, "{json_run:?}");
    assert_eq!(json_run.stdout, "{\"ok\":true,\"data\":[]}\n");
    assert_eq!(json_run.stderr, "", "no stderr prose under --json");
    let human = sb.run(&["sessions", "ls"]).or_fail();
    assert_eq!(human.code, 0, "{human:?}");
    assert!(human.stderr.contains("99.0.0"), "{human:?}");
    assert!(human.stderr.contains("newer"), "{human:?}");
    assert_eq!(human.stderr.lines().count(), 1, "{human:?}");
    assert!(human.stdout.starts_with("No sessions."), "{human:?}");
    // `daemon status` warns, in its data and in its human view.
    let status = sb.ok(&["daemon", "status"]);
    assert!(
        status["warning"]
            .as_str()
            .unwrap_or_default()
            .contains("99.0.0"),
        "{status}"
    );
    let (_, human_status, _) = sb.output(&["daemon", "status"]);
    assert!(human_status.contains("\nWarning: "), "{human_status}");
    // Never replaced.
    assert_eq!(newer.wait_exit(Duration::ZERO), None);
    assert_eq!(sb.daemon_pid(), Some(pid));
    // It still stops on SIGTERM, with exit 0.
    assert!(newer.signal("TERM"));
    assert_eq!(newer.wait_exit(WAIT), Some(0));
}

#[test]
fn daemon_stop_never_signals_a_pid_that_holds_no_lock() {
    // SEC-50: a pidfile naming a live process that is not a daemon.
    let sb = Sandbox::new().or_fail();
    let bystander = Proc::spawn({
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30");
        cmd
    })
    .or_fail();
    std::fs::write(sb.pidfile(), format!("{}\n", bystander.pid())).or_fail();
    std::fs::set_permissions(sb.pidfile(), std::fs::Permissions::from_mode(0o600)).or_fail();
    let ran = sb.run(&["--json", "daemon", "stop"]).or_fail();
    assert_eq!(ran.code, 70, "{ran:?}");
    assert_eq!(ran.json().or_fail()["error"]["type"], "connection_error");
    assert!(
        is_alive(bystander.pid()),
        "daemon stop signalled a stranger"
    );
    assert!(
        sb.daemon_processes().is_empty(),
        "daemon stop spawned a daemon"
    );
}
