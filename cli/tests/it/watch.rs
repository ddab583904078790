//! `appduct watch` (§L23) end to end: the view runs in a real pseudo-terminal (a tmux pane on a
//! private tmux server) against the real daemon and the playground. A CLI call of a `prompt`
//! tool parks, the view lists it, a key press starts the approval, the one-time code the daemon
//! writes to the pane is read back from the pane and typed, and the call completes. Also: the
//! refusals without a terminal and without a daemon.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

const CONFIG: &str = r#"{"wssPort": 0, "consent": {"fallback": "operator", "approvalTimeoutMs": 60000},
 "policy": {"tools": {"playground/call_count": "prompt"}}}"#;

const MARKER: &str = "type this code only if you started that approval yourself: ";

/// A private tmux server (`tmux -L <name>`), killed when dropped.
struct Tmux {
    name: String,
}

impl Tmux {
    /// Starts a server with one 160×48 window running `script`, which runs `watch` and then
    /// prints its exit status and waits.
    fn start(sb: &Sandbox, args: &[&str]) -> Self {
        Self::start_with(sb, args, false)
    }

    /// [`Tmux::start`], but the pane waits for Enter (`read`) before running `watch`: its
    /// terminal exists from now on, whatever starts before `watch` does.
    fn start_held(sb: &Sandbox, args: &[&str]) -> Self {
        Self::start_with(sb, args, true)
    }

    fn start_with(sb: &Sandbox, args: &[&str], held: bool) -> Self {
        let name = format!("appduct-watch-{}-{}", std::process::id(), unique());
        let inner = sb.command(args);
        let mut script = String::from("#!/bin/sh\n");
        if held {
            script.push_str("echo WATCH-HELD\nread _\n");
        }
        for (key, value) in inner.get_envs() {
            let key = key.to_string_lossy();
            match value {
                Some(v) => {
                    script.push_str(&format!("export {key}={}\n", quote(&v.to_string_lossy())))
                }
                None => script.push_str(&format!("unset {key}\n")),
            }
        }
        if let Some(dir) = inner.get_current_dir() {
            script.push_str(&format!("cd {}\n", quote(&dir.to_string_lossy())));
        }
        script.push_str(&quote(&inner.get_program().to_string_lossy()));
        for arg in inner.get_args() {
            script.push(' ');
            script.push_str(&quote(&arg.to_string_lossy()));
        }
        script.push_str("\necho \"WATCH-EXIT $?\"\nread _\n");
        let path = sb.root().join(format!("{name}.sh"));
        std::fs::write(&path, script).unwrap();
        let tmux = Self { name };
        let ok = tmux
            .cmd(&["new-session", "-d", "-x", "160", "-y", "48", "-s", "w"])
            .arg(format!("sh {}", path.display()))
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux new-session failed");
        tmux
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.arg("-L").arg(&self.name).args(args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn screen(&self) -> String {
        let out = self
            .cmd(&["capture-pane", "-p", "-J", "-t", "w"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls the pane (bounded) until `check` holds; returns the screen that satisfied it.
    fn wait_for(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if check(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; pane:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "w"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status().unwrap().success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).status();
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn approval_id_in(screen: &str) -> Option<String> {
    let at = screen.find("> apr_")? + 2;
    Some(
        screen[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .collect(),
    )
}

fn tmux_available() -> bool {
    Path::new("/usr/bin/tmux").exists()
        || Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
}

#[test]
fn a_parked_call_is_approved_with_a_key_press_in_the_live_view() {
    assert!(
        tmux_available(),
        "tmux is needed for the live view's pty test"
    );
    let sb = sandbox_with_config(CONFIG);
    // The operator's terminal (the pane) exists before the daemon starts, as a person's does:
    // the daemon refuses a code to a terminal opened after, or less than 50 ms before, the
    // request (SECURITY.md §4.18). `watch` runs in it once the playground is up.
    let tmux = Tmux::start_held(&sb, &["watch"]);
    tmux.wait_for("the held pane", |s| s.contains("WATCH-HELD"));
    let pg = Playground::start(&sb);
    assert_eq!(pg.alias(), "playground");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the session row", |s| {
        s.contains("Sessions") && s.contains("playground")
    });

    // The caller, without a terminal.
    let mut call = sb.command(&["tools", "call", "call_count"]);
    call.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut caller = call.spawn().unwrap();

    // The view lists the approval (selected) and the parked call, without polling the daemon.
    let screen = tmux.wait_for("the pending approval", |s| {
        approval_id_in(s).is_some() && s.contains("approval")
    });
    let approval_id = approval_id_in(&screen).unwrap();
    assert!(
        approval_id.starts_with("apr_") && approval_id.len() > 10,
        "{approval_id}"
    );
    assert!(screen.contains("call_count"), "{screen}");

    // `a`: the view steps out of the alternate screen, the daemon writes the code to this
    // terminal, and the prompt waits for it.
    tmux.keys(&["a"]);
    let screen = tmux.wait_for("the one-time code and the prompt", |s| {
        s.contains(MARKER) && s.contains("Type it to approve")
    });
    let at = screen.find(MARKER).unwrap() + MARKER.len();
    let code: String = screen[at..].chars().take(7).collect();
    assert!(
        code.len() == 7 && code.as_bytes()[3] == b'-',
        "{code:?} in\n{screen}"
    );
    tmux.keys(&[&code, "Enter"]);

    // The call ran, and the view is back with the outcome in its footer.
    assert_eq!(wait_child(&mut caller, Duration::from_secs(20)), 0);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut caller.stdout.take().unwrap(), &mut out).unwrap();
    assert!(out.contains("Result (call_count on playground"), "{out}");
    let screen = tmux.wait_for("the view with the outcome", |s| {
        s.contains(&format!("Approved {approval_id}.")) && s.contains("Sessions")
    });
    assert!(
        !screen.contains(MARKER),
        "the code left the screen:\n{screen}"
    );
    tmux.wait_for("the finished call in the audit panel", |s| {
        s.lines()
            .any(|l| l.contains("call_count") && l.contains(" ok"))
    });

    // `q` quits with status 0 and gives the terminal back.
    tmux.keys(&["q"]);
    tmux.wait_for("the exit status", |s| s.contains("WATCH-EXIT 0"));
    assert_eq!(pg.stop(), 0);
}

#[test]
fn without_a_daemon_the_view_says_so_and_exits_70() {
    assert!(
        tmux_available(),
        "tmux is needed for the live view's pty test"
    );
    let sb = sandbox();
    let tmux = Tmux::start(&sb, &["watch"]);
    let screen = tmux.wait_for("the exit status", |s| s.contains("WATCH-EXIT"));
    assert!(screen.contains("WATCH-EXIT 70"), "{screen}");
    assert!(screen.contains("No appduct daemon is running"), "{screen}");
    assert!(!sb.socket().exists(), "watch must not start a daemon");
}

#[test]
fn sigterm_restores_the_terminal_and_exits_0() {
    assert!(
        tmux_available(),
        "tmux is needed for the live view's pty test"
    );
    let sb = sandbox();
    sb.ok(&["daemon", "start"]);
    let tmux = Tmux::start(&sb, &["watch"]);
    tmux.wait_for("the view", |s| s.contains("Sessions"));
    let pane = tmux
        .cmd(&["display", "-p", "-t", "w", "#{pane_pid}"])
        .output()
        .unwrap();
    let shell: u32 = String::from_utf8_lossy(&pane.stdout)
        .trim()
        .parse()
        .unwrap();
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap();
    let watch: u32 = children.split_whitespace().next().unwrap().parse().unwrap();
    assert!(signal(watch, "TERM"));
    let screen = tmux.wait_for("the exit status", |s| s.contains("WATCH-EXIT"));
    assert!(screen.contains("WATCH-EXIT 0"), "{screen}");
    // Back on the main screen: the view's frame is gone.
    assert!(!screen.contains("Sessions"), "{screen}");
}

#[test]
fn without_a_terminal_it_refuses_with_a_usage_error() {
    let sb = sandbox();
    let (code, _out, err) = sb.output(&["watch"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("needs an interactive terminal"), "{err}");
    let (code, doc) = sb.json(&["watch"]);
    assert_eq!(code, 64, "{doc}");
    assert_eq!(doc["error"]["type"], "usage_error");
}
