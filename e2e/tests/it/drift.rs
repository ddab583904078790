//! Version drift against a daemon that holds state (§C7, §L12, §M14;
//! SEC-53): an older daemon with a live session is never replaced unless a restart is forced,
//! whatever the CLI or the MCP bridge asks, and a replacement that still reports another
//! version is reported, never replaced a second time.
//!
//! The "older" daemon is the binary under test with `APPDUCT_DAEMON_VERSION_OVERRIDE`; its
//! links are minted straight over the control socket, because any CLI command would run the
//! version check first and replace the (then idle) daemon.

use std::time::Duration;

use appduct_e2e::control::Control;
use appduct_e2e::device::{Link, sdk_device};
use appduct_e2e::harness::{Proc, Ran, Sandbox};
use appduct_e2e::mcp::Mcp;
use appduct_e2e::{OrFail as _, blocking};
use serde_json::{Value, json};

const CONFIG: &str = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#;
const WAIT: Duration = Duration::from_secs(15);
const OLD: &str = "0.0.1";

/// `daemon run` reporting `version`, kept alive by the returned guard; and its pid.
fn old_daemon(sb: &Sandbox, version: &str) -> (Proc, u32) {
    let mut cmd = sb.command(&["--json", "daemon", "run"]);
    cmd.env("APPDUCT_DAEMON_VERSION_OVERRIDE", version);
    let (proc, ready) = sb.spawn_ready_with(cmd).or_fail();
    let pid = ready["data"]["daemon"]["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no pid in {ready}")) as u32;
    sb.track_pid(pid);
    (proc, pid)
}

/// Runs `appduct <args…>` with extra environment.
fn run_with(sb: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let mut cmd = sb.command(args);
    cmd.envs(env.iter().copied());
    let out = cmd.output().or_fail();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The `error` of a failed `--json` run, which must be the drift refusal.
#[track_caller]
fn drift_refusal(ran: &Ran, case: &str) -> Value {
    assert_eq!(ran.code, 70, "{case}: {ran:?}");
    let error = ran.json().or_fail()["error"].clone();
    assert_eq!(error["type"], "connection_error", "{case}: {error}");
    assert_eq!(error["details"]["daemonVersion"], OLD, "{case}: {error}");
    assert_eq!(
        error["details"]["clientVersion"],
        env!("CARGO_PKG_VERSION"),
        "{case}: {error}"
    );
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_53_a_daemon_with_a_live_session_is_replaced_only_when_a_restart_is_forced() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let (mut old, old_pid) = blocking(|| old_daemon(&sb, OLD));
    let socket = sb.state_dir().join("daemon.sock");
    let mut control = blocking(|| Control::connect(&socket, WAIT)).or_fail();
    let created = blocking(|| control.result("link.create", json!({}))).or_fail();
    let link = Link::from_create_result(&created).or_fail();
    let device = sdk_device(&link, "Pixel 8", "live").or_fail();
    device.connect(&link.deep_link).await.or_fail();
    let live = |control: &mut Control| -> Vec<Value> {
        control
            .result("sessions.list", json!({}))
            .or_fail()
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let active = blocking(|| {
        Sandbox::wait_until(WAIT, || {
            live(&mut control)
                .iter()
                .any(|s| s["state"] == "active" && s["toolCount"] == 2)
        })
    });
    assert!(active, "{:?}", blocking(|| live(&mut control)));

    // No force, and every way of forcing overridden by --no-daemon-restart.
    let refused = blocking(|| run_with(&sb, &["--json", "sessions", "ls"], &[]));
    let error = drift_refusal(&refused, "plain");
    assert_eq!(error["details"]["sessionCount"], 1, "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("appduct daemon stop") && message.contains("--daemon-restart"),
        "{message}"
    );
    let refused = blocking(|| {
        run_with(
            &sb,
            &["--json", "--no-daemon-restart", "sessions", "ls"],
            &[("APPDUCT_DAEMON_RESTART", "1")],
        )
    });
    drift_refusal(&refused, "env overridden by --no-daemon-restart");
    let refused = blocking(|| {
        run_with(
            &sb,
            &["--json", "sessions", "ls"],
            &[("APPDUCT_DAEMON_RESTART", "0")],
        )
    });
    drift_refusal(&refused, "env false");
    let config = sb.state_dir().join("config.json");
    std::fs::write(
        &config,
        r#"{"wssPort": 0, "advertisedIp": "127.0.0.1", "restartDaemonOnVersionMismatch": true}"#,
    )
    .or_fail();
    let refused = blocking(|| {
        run_with(
            &sb,
            &["--json", "--no-daemon-restart", "sessions", "ls"],
            &[],
        )
    });
    drift_refusal(&refused, "config overridden by --no-daemon-restart");
    std::fs::write(&config, CONFIG).or_fail();

    // The MCP bridge: one stderr line naming both versions, exit 70, nothing served.
    let mut mcp = blocking(|| Mcp::spawn(&sb)).or_fail();
    assert_eq!(
        blocking(|| mcp.proc().wait_exit(WAIT)),
        Some(70),
        "{}",
        mcp.stderr()
    );
    assert_eq!(mcp.stdout_lines(), Vec::<String>::new());
    let stderr = mcp.stderr();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(OLD) && stderr.contains(env!("CARGO_PKG_VERSION")),
        "{stderr}"
    );

    // Through all of that, the same daemon kept the session.
    assert_eq!(
        old.wait_exit(Duration::ZERO),
        None,
        "the daemon was replaced"
    );
    assert_eq!(blocking(|| sb.daemon_processes()), vec![old_pid]);
    let sessions = blocking(|| live(&mut control));
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0]["state"], "active");

    // Forced by the environment: replaced, and the session is lost with it.
    let forced = blocking(|| {
        run_with(
            &sb,
            &["--json", "sessions", "ls"],
            &[("APPDUCT_DAEMON_RESTART", "1")],
        )
    });
    assert_eq!(forced.code, 0, "{forced:?}");
    assert_eq!(forced.json().or_fail()["data"], json!([]), "{forced:?}");
    assert_eq!(blocking(|| old.wait_exit(WAIT)), Some(0));
    let status = blocking(|| sb.status()).or_fail();
    assert_ne!(status["daemon"]["pid"], json!(old_pid));
    assert_eq!(status["daemon"]["version"], env!("CARGO_PKG_VERSION"));
    device.disconnect();
}

#[test]
fn a_replacement_that_still_reports_another_version_is_an_error_not_a_second_replacement() {
    let sb = Sandbox::new().or_fail();
    let (mut old, old_pid) = old_daemon(&sb, OLD);
    // Another appduct holds the spawn lock, as if it were replacing this daemon right now: the
    // CLI waits for it, then finds the daemon still reporting the old version.
    let lock = sb.state_dir().join("daemon.spawn.lock");
    std::fs::write(&lock, format!("{}\n", std::process::id())).or_fail();
    let mut cmd = sb.command(&["--json", "sessions", "ls"]);
    // The info log line marks the moment the CLI commits to replacing (and takes the lock).
    cmd.env("APPDUCT_LOG", "info");
    let cli = Proc::spawn(cmd).or_fail();
    let waiting = Sandbox::wait_until(WAIT, || {
        cli.stderr().contains("replacing the appduct daemon")
    });
    assert!(
        waiting,
        "the CLI never decided to replace: {}",
        cli.stderr()
    );
    std::fs::remove_file(&lock).or_fail();
    let ran = cli.finish(WAIT).or_fail();

    assert_eq!(ran.code, 70, "{ran:?}");
    let error = ran.json().or_fail()["error"].clone();
    assert_eq!(error["type"], "connection_error", "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("restarted the daemon but it still reports") && message.contains(OLD),
        "{message}"
    );
    // Never a second replacement: the old daemon was not asked to stop, nothing was spawned.
    assert_eq!(
        old.wait_exit(Duration::ZERO),
        None,
        "the daemon was stopped"
    );
    assert_eq!(sb.daemon_processes(), vec![old_pid]);
}
