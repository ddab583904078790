//! The built `appduct` binary: help, version, argument errors, removed words, the output
//! contract of failures, `keygen` and `completions` (§L15). Every run uses its own short
//! state dir under /tmp and a scrubbed environment; argument errors must leave that state dir
//! untouched (no daemon spawned, no socket).

// Helpers outside #[test] functions unwrap too; a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use serde_json::Value;
use serde_json::json;

use crate::support;
use support::{Pty, Sandbox};

/// A sandbox without a state dir: argument errors must never create one.
fn sandbox() -> Sandbox {
    Sandbox::without_state_dir(env!("CARGO_BIN_EXE_appduct")).unwrap()
}

/// The state dir was never created: nothing contacted or spawned a daemon.
fn assert_untouched(sb: &Sandbox, args: &[&str]) {
    assert!(
        !sb.state_dir().exists(),
        "{args:?} created the state dir {}",
        sb.state_dir().display()
    );
    assert!(
        !sb.home().join(".appduct").exists(),
        "{args:?} used ~/.appduct"
    );
}

const COMMAND_PATHS: &[&[&str]] = &[
    &[],
    &["sessions"],
    &["sessions", "ls"],
    &["sessions", "revoke"],
    &["sessions", "link"],
    &["tools"],
    &["tools", "ls"],
    &["tools", "describe"],
    &["tools", "call"],
    &["tools", "snapshot"],
    &["events"],
    &["events", "ls"],
    &["events", "tail"],
    &["events", "since"],
    &["daemon"],
    &["daemon", "run"],
    &["daemon", "start"],
    &["daemon", "stop"],
    &["daemon", "status"],
    &["init"],
    &["keygen"],
    &["mcp"],
    &["mcp", "install"],
    &["mcp", "uninstall"],
    &["doctor"],
    &["completions"],
    &["playground"],
];

#[test]
fn every_command_help_exits_zero_on_stdout() {
    let sb = sandbox();
    for path in COMMAND_PATHS {
        for flag in ["--help", "-h"] {
            let mut args = path.to_vec();
            args.push(flag);
            // --json is ignored by --help.
            args.push("--json");
            let (code, stdout, stderr) = sb.output(&args);
            assert_eq!(code, 0, "{args:?}: {stderr}");
            assert!(stdout.contains("Usage: appduct"), "{args:?}: {stdout}");
            assert_eq!(stderr, "", "{args:?}");
            assert_untouched(&sb, &args);
        }
    }
}

#[test]
fn noun_help_lists_the_verbs() {
    let sb = sandbox();
    let cases: &[(&str, &[&str])] = &[
        ("sessions", &["ls", "revoke", "link"]),
        ("tools", &["ls", "describe", "call", "snapshot"]),
        ("events", &["ls", "tail", "since"]),
        ("daemon", &["run", "start", "stop", "status"]),
    ];
    for (noun, verbs) in cases {
        let (code, stdout, _) = sb.output(&[noun, "--help"]);
        assert_eq!(code, 0);
        for verb in *verbs {
            assert!(
                stdout.contains(&format!("\n  {verb} ")),
                "{noun}: {verb}\n{stdout}"
            );
        }
    }
}

#[test]
fn completions_help_says_where_to_install() {
    let sb = sandbox();
    let (code, stdout, _) = sb.output(&["completions", "--help"]);
    assert_eq!(code, 0);
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        assert!(stdout.contains(&format!("  {shell} ")), "{shell}\n{stdout}");
    }
}

#[test]
fn bare_appduct_prints_help_and_exits_zero() {
    let sb = sandbox();
    let (code, stdout, stderr) = sb.output(&[]);
    assert_eq!(code, 0);
    assert!(stdout.contains("Usage: appduct"));
    assert!(stdout.contains("sessions"));
    assert_eq!(stderr, "");
    assert_untouched(&sb, &[]);
}

#[test]
fn version_prints_name_and_version() {
    let sb = sandbox();
    for args in [
        &["--version"][..],
        &["-V"],
        &["--json", "--version"],
        &["tools", "-V"],
    ] {
        let (code, stdout, stderr) = sb.output(args);
        assert_eq!(code, 0, "{args:?}");
        assert_eq!(stdout, format!("appduct {}\n", env!("CARGO_PKG_VERSION")));
        assert_eq!(stderr, "");
    }
}

/// The argument errors of §L15 (and a few more of §L2.3, §L6–§L8).
const ARGUMENT_ERRORS: &[&[&str]] = &[
    &["tools", "ls", "--limit", "0"],
    &["tools", "ls", "--limit", "-1"],
    &["tools", "ls", "--offset", "abc"],
    &["tools", "ls", "--filter"],
    &["tools", "ls", "a", "b"],
    &["tools", "call"],
    &["sessions", "revoke", "a", "b"],
    &["events", "tail", "a", "b"],
    &["events", "since", "a", "-1"],
    &["tools", "ls", "--groups", "--filter", "x"],
    &["sessions", "link", "--device", "emulator-5554"],
    &[
        "sessions",
        "link",
        "--open",
        "ios-sim",
        "--app-id",
        "com.example.app",
    ],
    &["sessions", "link", "--relaunch"],
    &["sessions", "link", "--url", "https://example.com"],
    &["sessions", "link", "--transport", "tcp"],
    &[
        "sessions",
        "link",
        "--transport",
        "web",
        "--open",
        "ios-device",
    ],
    &[
        "sessions",
        "link",
        "--transport",
        "native",
        "--open",
        "web",
        "--url",
        "http://x",
    ],
    // Beyond the required list.
    &["tools", "ls", "--group", "a/b/c"],
    &["tools", "call", "a", "b", "c"],
    &["tools", "describe", "--filter", "x", "sum"],
    &["tools", "snapshot"],
    &["tools", "call", "sum", "--timeout", "0"],
    &["events", "ls", "--payload-max-bytes", "10"],
    &["events", "since"],
    &["events", "since", "a", "b", "c"],
    &["sessions", "link", "--ttl", "0"],
    &["sessions", "link", "--open", "tv"],
    &["sessions", "link", "--open", "web"],
    &["sessions", "link", "--scheme", "https"],
    &["sessions", "ls", "extra"],
    &["completions", "tcsh"],
    &["doctor", "app.zip"],
    &["init", "--scheme", "myapp://"],
];

#[test]
fn argument_errors_exit_64_without_touching_the_state_dir() {
    let sb = sandbox();
    for args in ARGUMENT_ERRORS {
        let (code, stdout, stderr) = sb.output(args);
        assert_eq!(code, 64, "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
        assert!(
            stderr.starts_with("Command failed\n  Type:     usage_error\n  Message:  "),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains('\x1b'),
            "no colour when stderr is not a terminal"
        );
        assert_untouched(&sb, args);
    }
}

#[test]
fn argument_errors_under_json_are_one_envelope_line() {
    let sb = sandbox();
    for args in ARGUMENT_ERRORS {
        let mut with_json = args.to_vec();
        with_json.push("--json");
        let (code, stdout, stderr) = sb.output(&with_json);
        assert_eq!(code, 64, "{with_json:?}");
        assert_eq!(stderr, "", "{with_json:?}: no stderr prose under --json");
        assert_eq!(stdout.matches('\n').count(), 1, "{with_json:?}: {stdout}");
        assert!(stdout.ends_with('\n'));
        let v: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["type"], "usage_error");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        assert!(v.get("meta").is_none(), "no meta without --verbose");
        assert_untouched(&sb, &with_json);
    }
}

#[test]
fn input_that_is_not_a_json_object_exits_65() {
    let sb = sandbox();
    let (code, stdout, _) = sb.output(&["--json", "tools", "call", "sum", "--input", "[1,2]"]);
    assert_eq!(code, 65);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["error"]["type"], "validation_error");
    assert_eq!(v["error"]["details"]["param"], "--input");
    let (code, _, _) = sb.output(&["tools", "call", "sum", "--input", "{nope"]);
    assert_eq!(code, 65);
    assert_untouched(&sb, &["tools", "call"]);
}

#[test]
fn text_flags_require_a_value() {
    let sb = sandbox();
    for flag in ["--filter", "--group"] {
        let (code, stdout, _) = sb.output(&["--json", "tools", "ls", flag]);
        assert_eq!(code, 64);
        let v: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(v["error"]["message"], format!("{flag} requires a value"));
    }
    let (code, stdout, _) = sb.output(&["--json", "events", "ls", "--name"]);
    assert_eq!(code, 64);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["error"]["message"], "--name requires a value");
}

#[test]
fn removed_words_name_the_replacement() {
    let sb = sandbox();
    for (word, replacement) in [
        ("ls", "sessions ls"),
        ("revoke", "sessions revoke"),
        ("link", "sessions link"),
        ("invoke", "tools call"),
    ] {
        let (code, stdout, stderr) = sb.output(&[word]);
        assert_eq!(code, 64, "{word}");
        assert_eq!(stdout, "");
        assert!(
            stderr.contains(&format!("\"appduct {replacement}\"")),
            "{stderr}"
        );
        assert_untouched(&sb, &[word]);
    }
}

#[test]
fn unknown_words_bare_nouns_and_unknown_verbs() {
    let sb = sandbox();
    let (code, _, stderr) = sb.output(&["frobnicate"]);
    assert_eq!(code, 64);
    assert!(
        stderr.contains("unknown command \"frobnicate\""),
        "{stderr}"
    );

    for (args, verbs) in [
        (&["tools"][..], "ls, describe, call, snapshot"),
        (&["tools", "list"], "ls, describe, call, snapshot"),
        (&["sessions"], "ls, revoke, link"),
        (&["events", "follow"], "ls, tail, since"),
        (&["daemon", "restart"], "run, start, stop, status"),
    ] {
        let (code, stdout, stderr) = sb.output(args);
        assert_eq!(code, 64, "{args:?}");
        assert_eq!(stdout, "");
        assert!(stderr.contains(verbs), "{args:?}: {stderr}");
        assert_untouched(&sb, args);
    }
}

#[test]
fn pretty_failure_is_multi_line_json() {
    let sb = sandbox();
    let (code, stdout, stderr) = sb.output(&["tools", "ls", "--limit", "0", "--json", "--pretty"]);
    assert_eq!(code, 64);
    assert_eq!(stderr, "");
    assert!(stdout.lines().count() > 3, "{stdout}");
    assert!(
        stdout.starts_with("{\n  \"ok\": false,\n  \"error\": {\n"),
        "{stdout}"
    );
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["error"]["type"], "usage_error");
}

#[test]
fn verbose_parse_errors_have_meta_command_cli() {
    let sb = sandbox();
    for args in [
        &["--verbose", "--json", "tools", "ls", "--limit", "0"][..],
        &["--verbose", "--json", "tools", "ls", "--bogus"],
        &["--verbose", "--json", "frobnicate"],
        &["frobnicate", "--verbose", "--json"],
    ] {
        let (code, stdout, _) = sb.output(args);
        assert_eq!(code, 64, "{args:?}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(v["meta"]["command"], "cli", "{args:?}");
        assert!(v["meta"]["durationMs"].is_u64());
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["ok", "error", "meta"]);
    }
    // Human mode: the meta block follows the error block on stderr.
    let (_, stdout, stderr) = sb.output(&["--verbose", "tools", "ls", "--limit", "0"]);
    assert_eq!(stdout, "");
    assert!(stderr.contains("\nMeta\n  Command:    cli\n"), "{stderr}");
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn keygen_creates_a_private_key_and_prints_the_pin() {
    // SEC-03: keygen onto an existing key without --force exits 64 and keeps the file.
    let sb = sandbox();
    let (code, stdout, stderr) = sb.output(&["keygen"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stderr, "");
    let key = sb.state_dir().join("key.pem");
    assert_eq!(mode(&key), 0o600);
    assert_eq!(mode(&sb.state_dir()), 0o700);
    assert!(
        std::fs::read_to_string(&key)
            .unwrap()
            .starts_with("-----BEGIN PRIVATE KEY-----")
    );
    assert!(stdout.starts_with("Key ready\n"), "{stdout}");
    assert!(stdout.contains(&format!("  Path:        {}\n", key.display())));
    assert!(stdout.contains("  Algorithm:   EC P-256\n"));
    let sealed_line = stdout
        .lines()
        .find(|l| l.starts_with("  Sealed key:"))
        .unwrap();
    assert_eq!(
        sealed_line.trim_start_matches("  Sealed key:").trim().len(),
        43
    );
    let pin_line = stdout.lines().find(|l| l.starts_with("  Pin:")).unwrap();
    let pin = pin_line.trim_start_matches("  Pin:").trim();
    assert!(pin.starts_with("sha256/") && pin.ends_with('='), "{pin}");
    assert!(!sb.state_dir().join("daemon.sock").exists());

    // Again without --force: exit 64 naming --force, key untouched.
    let before = std::fs::read(&key).unwrap();
    let (code, _, stderr) = sb.output(&["keygen"]);
    assert_eq!(code, 64);
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(std::fs::read(&key).unwrap(), before);

    // With --force and --json: a new key, `replaced: true`, a different pin.
    let (code, stdout, stderr) = sb.output(&["keygen", "--force", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(stderr, "");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["data"]["path"], key.display().to_string());
    assert_eq!(v["data"]["algorithm"], "ec-p256");
    assert_eq!(v["data"]["replaced"], true);
    assert_ne!(v["data"]["pin"], pin);
    assert_eq!(mode(&key), 0o600);
}

#[test]
fn keygen_out_needs_an_existing_directory() {
    let sb = sandbox();
    let target = sb.root().join("missing").join("k.pem");
    let (code, _, _) = sb.output(&["keygen", "--out", target.to_str().unwrap()]);
    assert_eq!(code, 64);
    assert!(!target.exists());

    let (code, stdout, _) = sb.output(&["--json", "keygen", "--out", "rel.pem"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    // A relative --out is resolved against the current directory.
    assert_eq!(
        v["data"]["path"],
        sb.cwd().join("rel.pem").display().to_string()
    );
    assert_eq!(mode(&sb.cwd().join("rel.pem")), 0o600);
    assert_untouched(&sb, &["keygen", "--out"]);
}

#[test]
fn every_shell_gets_a_completion_script() {
    let sb = sandbox();
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef appduct"),
        ("fish", "complete -c appduct"),
        ("powershell", "Register-ArgumentCompleter"),
        ("elvish", "edit:completion:arg-completer[appduct]"),
    ] {
        let (code, stdout, stderr) = sb.output(&["completions", shell]);
        assert_eq!((code, stderr.as_str()), (0, ""), "{shell}");
        assert!(stdout.contains(marker), "{shell}: {marker} missing");
        // Static completions include the commands and the --open targets.
        for word in ["sessions", "snapshot", "ios-device"] {
            assert!(stdout.contains(word), "{shell}: {word} missing");
        }
    }
    assert_untouched(&sb, &["completions"]);
}

/// A usage error with stderr on a pseudo-terminal: the error block as the terminal got it.
fn usage_error_on_a_terminal(sb: &Sandbox, flag: Option<&str>, no_color: Option<&str>) -> String {
    let mut pty = Pty::open();
    let mut args = vec!["tools", "ls", "--limit", "0"];
    args.extend(flag);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_appduct"));
    cmd.args(["--state-dir", sb.state_dir().to_str().unwrap()])
        .args(&args)
        .env_remove("NO_COLOR")
        .stdout(std::process::Stdio::null())
        .stderr(pty.take_slave());
    if let Some(v) = no_color {
        cmd.env("NO_COLOR", v);
    }
    let status = cmd.status().unwrap();
    drop(cmd);
    assert_eq!(status.code(), Some(64));
    pty.read_to_end().to_owned()
}

#[test]
fn colour_only_on_a_terminal_without_no_color() {
    let sb = sandbox();
    let red = "\x1b[1;31mCommand failed\x1b[0m";
    assert!(usage_error_on_a_terminal(&sb, None, None).contains(red));
    // An empty NO_COLOR does not disable colour (§L2.2).
    assert!(usage_error_on_a_terminal(&sb, None, Some("")).contains(red));
    for (flag, env) in [(Some("--no-color"), None), (None, Some("1"))] {
        let text = usage_error_on_a_terminal(&sb, flag, env);
        assert!(
            text.starts_with("Command failed\r\n"),
            "{flag:?} {env:?}: {text:?}"
        );
        assert!(!text.contains('\x1b'), "{flag:?} {env:?}: {text:?}");
    }
    // Not a terminal: never colour (the argument-error tests above read a pipe).
    assert_untouched(&sb, &["tools", "ls"]);
}

#[test]
fn init_records_the_project_scheme_through_the_binary() {
    let sb = sandbox();
    let project = sb.cwd();
    std::fs::write(project.join("app.json"), r#"{"expo": {"scheme": "shop"}}"#).unwrap();
    let config = project.join(".appduct").join("config.json");

    let (code, stdout, stderr) =
        sb.output(&["--json", "init", "--android-app-id", "com.example.shop"]);
    assert_eq!((code, stderr.as_str()), (0, ""), "{stdout}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let data = &v["data"];
    assert_eq!(data["path"], config.display().to_string());
    assert_eq!(
        (
            &data["scheme"],
            &data["source"],
            &data["created"],
            &data["changed"]
        ),
        (
            &json!("shop"),
            &json!("app.json"),
            &json!(true),
            &json!(true)
        )
    );
    assert_eq!(
        data["origin"],
        project.join("app.json").display().to_string()
    );
    assert_eq!(data["appId"], json!({"android": "com.example.shop"}));
    assert_eq!(
        data["mcpServerEntry"],
        json!({"command": "appduct", "args": ["mcp", "--scheme", "shop"]})
    );
    assert_eq!(mode(&project.join(".appduct")), 0o700);
    assert_eq!(mode(&config), 0o600);
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(
        written,
        json!({"scheme": "shop", "appId": {"android": "com.example.shop"}})
    );

    // Again: nothing changes, the file is not rewritten.
    let before = std::fs::metadata(&config).unwrap().modified().unwrap();
    let (code, stdout, _) = sb.output(&["--json", "init"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (&v["data"]["created"], &v["data"]["changed"]),
        (&json!(false), &json!(false))
    );
    assert_eq!(
        std::fs::metadata(&config).unwrap().modified().unwrap(),
        before
    );

    // Another scheme needs --force; --force merges.
    let (code, _, stderr) = sb.output(&["init", "--scheme", "other"]);
    assert_eq!(code, 64);
    assert!(stderr.contains("--force"), "{stderr}");
    let (code, stdout, _) = sb.output(&["--no-color", "init", "--scheme", "other", "--force"]);
    assert_eq!(code, 0);
    let dir = project.display().to_string();
    insta::assert_snapshot!("init_human_force", stdout.replace(&dir, "<project>"));
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(
        written,
        json!({"scheme": "other", "appId": {"android": "com.example.shop"}})
    );
    // Never a daemon, a key or the state dir.
    assert_untouched(&sb, &["init"]);
}

#[test]
fn completions_print_a_script() {
    let sb = sandbox();
    let (code, stdout, stderr) = sb.output(&["completions", "bash"]);
    assert_eq!(code, 0);
    assert_eq!(stderr, "");
    assert!(stdout.len() > 100);
    assert!(stdout.contains("appduct"));
    let (code, stdout, _) = sb.output(&["completions", "zsh", "--json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["data"]["shell"], "zsh");
    assert!(
        v["data"]["script"]
            .as_str()
            .is_some_and(|s| s.contains("#compdef appduct"))
    );
    assert_untouched(&sb, &["completions"]);
}
