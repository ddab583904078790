//! Terminal polish through the built binary (§L1, §L3.3, §L14.1): `appduct help <command>`,
//! `--color`, `CLICOLOR_FORCE`, and dynamic completion of selectors and tool names against a
//! live playground session.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{Playground, Pty, Sandbox, sandbox, wait_child};

/// `appduct <args>` without `--state-dir` (the sandbox's command adds it first, which would
/// hide the words a completion request carries after `--`).
fn bare(sb: &Sandbox, args: &[&str]) -> Command {
    let cmd = sb.command::<&str>(&[]);
    // Rebuild with the same environment but our own arguments.
    let mut bare = Command::new(cmd.get_program());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => bare.env(k, v),
            None => bare.env_remove(k),
        };
    }
    bare.current_dir(cmd.get_current_dir().unwrap())
        .env("APPDUCT_STATE_DIR", sb.state_dir())
        .args(args);
    bare
}

fn run(mut cmd: Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_subcommand_prints_the_same_as_dash_dash_help() {
    let sb = sandbox();
    for words in [
        &["tools", "call"][..],
        &["sessions"],
        &["mcp", "install"],
        &["audit"],
        &[],
    ] {
        let mut help = vec!["help"];
        help.extend(words);
        let (code, via_help, stderr) = sb.output(&help);
        assert_eq!((code, stderr.as_str()), (0, ""), "{help:?}");
        let mut dash = words.to_vec();
        dash.push("--help");
        let (_, via_flag, _) = sb.output(&dash);
        assert_eq!(via_help, via_flag, "{help:?}");
        assert!(via_help.contains("Usage: appduct"), "{help:?}");
    }
    // The examples are part of the help.
    let (_, text, _) = sb.output(&["help", "tools", "call"]);
    assert!(
        text.contains("Examples:\n  appduct tools call sum --input"),
        "{text}"
    );
    // `tools help call` too.
    let (code, text, _) = sb.output(&["tools", "help", "call"]);
    assert_eq!(code, 0);
    assert!(text.starts_with("Call a tool"), "{text}");
    // An unknown command after help is a usage error, in the --json envelope when asked.
    let (code, stdout, stderr) = sb.output(&["--json", "help", "frobnicate"]);
    assert_eq!((code, stderr.as_str()), (64, ""));
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["type"], "usage_error");
    // Nothing of this spawned a daemon.
    assert!(!sb.socket().exists());
}

#[test]
fn color_always_colours_a_pipe_and_never_under_json() {
    let sb = sandbox();
    let red = "\x1b[1;31mCommand failed\x1b[0m";
    // stderr is a pipe here: only --color=always (or CLICOLOR_FORCE) colours it.
    let (code, _, stderr) = sb.output(&["tools", "ls", "--limit", "0"]);
    assert_eq!(code, 64);
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
    for flag in ["--color=always", "--color always"] {
        let mut args: Vec<&str> = flag.split(' ').collect();
        args.extend(["tools", "ls", "--limit", "0"]);
        let (code, _, stderr) = sb.output(&args);
        assert_eq!(code, 64, "{flag}");
        assert!(stderr.contains(red), "{flag}: {stderr:?}");
    }
    // CLICOLOR_FORCE colours a pipe; NO_COLOR beats it; --color=always beats NO_COLOR.
    let with_env = |env: &[(&str, &str)], extra: &[&str]| {
        let mut args = extra.to_vec();
        args.extend(["tools", "ls", "--limit", "0"]);
        let mut cmd = sb.command(&args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        run(cmd).2
    };
    assert!(with_env(&[("CLICOLOR_FORCE", "1")], &[]).contains(red));
    assert!(!with_env(&[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")], &[]).contains('\x1b'));
    assert!(with_env(&[("NO_COLOR", "1")], &["--color=always"]).contains(red));
    assert!(!with_env(&[("CLICOLOR_FORCE", "1")], &["--color=never"]).contains('\x1b'));
    // Help is styled too.
    let (_, help, _) = sb.output(&["--color=always", "tools", "--help"]);
    assert!(help.contains('\x1b'), "{help}");
    // Under --json: never, whatever the flag or variables say.
    let (code, stdout, stderr) =
        sb.output(&["--json", "--color=always", "tools", "ls", "--limit", "0"]);
    assert_eq!(code, 64);
    assert!(!stdout.contains('\x1b') && stderr.is_empty(), "{stdout:?}");
    // `appduct mcp` never colours its stderr (an agent's log), even when told to.
    let (code, stdout, stderr) = sb.output(&["--color=always", "mcp", "--bogus"]);
    assert_eq!((code, stdout.as_str()), (64, ""));
    assert!(
        stderr.contains("Command failed") && !stderr.contains('\x1b'),
        "{stderr:?}"
    );
    // Contradicting flags and bad values are usage errors.
    let (code, _, _) = sb.output(&["--color=always", "--no-color", "sessions", "ls"]);
    assert_eq!(code, 64);
    let (code, _, stderr) = sb.output(&["--color=sometimes", "sessions", "ls"]);
    assert_eq!(code, 64);
    assert!(stderr.contains("sometimes"), "{stderr}");
    assert!(!sb.socket().exists());
}

/// The candidates for the last word of `line`, as the fish script asks for them, without the
/// flags the engine offers beside them.
fn complete(sb: &Sandbox, line: &str) -> Vec<String> {
    let mut args = vec!["--"];
    args.extend(line.split(' '));
    let mut cmd = bare(sb, &args);
    cmd.env("APPDUCT_COMPLETE", "fish");
    let (_, stdout, _) = run(cmd);
    stdout
        .lines()
        .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
        .filter(|c| !c.starts_with('-'))
        .collect()
}

#[test]
fn dynamic_completion_offers_live_aliases_and_tool_names() {
    let sb = sandbox();
    // No daemon: no candidates, and none is started.
    assert!(complete(&sb, "appduct tools ls ").is_empty());
    assert!(!sb.socket().exists(), "completion spawned a daemon");

    let pg = Playground::start(&sb);
    let alias = pg.alias();
    let session_id = pg.ready["data"]["sessionId"].as_str().unwrap().to_owned();

    let got = complete(&sb, "appduct tools ls ");
    assert!(got.contains(&alias) && got.contains(&session_id), "{got:?}");
    let got = complete(&sb, &format!("appduct sessions revoke {}", &alias[..3]));
    assert_eq!(got, std::slice::from_ref(&alias));
    // tools call: the selectors, and the tools of the only live session.
    let got = complete(&sb, "appduct tools call ");
    for want in [alias.as_str(), "sum", "slow_task"] {
        assert!(got.iter().any(|g| g == want), "{want}: {got:?}");
    }
    // After a selector: that session's tool names, by prefix.
    let got = complete(&sb, &format!("appduct tools call {alias} s"));
    assert!(
        got.contains(&"sum".to_owned()) && got.contains(&"slow_task".to_owned()),
        "{got:?}"
    );
    assert!(!got.iter().any(|g| g == "call_count"), "{got:?}");
    let got = complete(&sb, &format!("appduct tools describe --json {alias} reset"));
    assert_eq!(got, ["reset_counter"]);
    // --state-dir on the completed line is honoured (here: an empty one, so nothing).
    let other = tempfile::tempdir().unwrap();
    let got = complete(
        &sb,
        &format!("appduct --state-dir {} tools ls ", other.path().display()),
    );
    assert!(got.is_empty(), "{got:?}");
    // Static completion still works in the same mode.
    let got = complete(&sb, "appduct tools ca");
    assert_eq!(got, ["call"]);

    // The registration script names the variable and the binary.
    let mut cmd = bare(&sb, &[]);
    cmd.env("APPDUCT_COMPLETE", "bash");
    let (code, script, _) = run(cmd);
    assert_eq!(code, 0);
    assert!(script.contains("APPDUCT_COMPLETE=\"bash\""), "{script}");
    assert!(script.contains("appduct"), "{script}");
    drop(pg);
}

/// The progress frames drawn on a terminal: the text after each `\r` and the escape
/// sequences that start a redraw (erase line, cursor up, erase below).
fn frames(text: &str) -> Vec<String> {
    text.split('\r')
        .map(|piece| {
            let mut rest = piece;
            while let Some(after) = rest.strip_prefix("\x1b[") {
                let end = after.find(|c: char| c.is_ascii_alphabetic()).unwrap();
                rest = &after[end + 1..];
            }
            rest.trim_end_matches('\n').to_owned()
        })
        .filter(|f| !f.is_empty())
        .collect()
}

#[test]
fn the_progress_line_fits_a_narrow_terminal_and_a_resize() {
    let sb = sandbox();
    let pg = Playground::start(&sb);
    let mut pty = Pty::open();
    pty.set_size(20, 24);
    let mut call = sb.command(&["tools", "call", "slow_task"]);
    call.stdout(Stdio::piped()).stderr(pty.take_slave());
    let mut child = call.spawn().unwrap();
    drop(call);
    // The first progress report: at 20 columns the line is cut with an ellipsis.
    pty.wait_for("[###-------] 33% s…");
    // Widen, let a frame be drawn that is wider than 20 columns, then narrow again.
    pty.set_size(100, 24);
    pty.wait_for("warming up");
    pty.set_size(20, 24);
    assert_eq!(wait_child(&mut child, Duration::from_secs(20)), 0);
    let text = pty.read_to_end();
    let drawn = frames(text);
    assert!(drawn.iter().any(|f| f.ends_with("warming up")), "{text:?}");
    // Every frame fits the widest size the terminal had; the frames drawn after the last
    // narrowing (at least the last one: the call goes on for a second) fit 19 columns.
    let width = |f: &String| unicode_width::UnicodeWidthStr::width(f.as_str());
    assert!(drawn.iter().all(|f| width(f) <= 99), "{text:?}");
    assert!(drawn.iter().any(|f| width(f) > 19), "{text:?}");
    let last = drawn.last().unwrap();
    assert!(width(last) <= 19, "{last:?} in {text:?}");
    // Narrowing after a wide frame erases the rows it may have been reflowed onto.
    assert!(text.contains("A\x1b[J"), "{text:?}");
    drop(pg);
}
