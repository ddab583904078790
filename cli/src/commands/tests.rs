//! Parsing and validation of whole command lines, through [`super::parse`].

use std::ffi::OsString;
use std::path::PathBuf;

use appduct_client::project::is_valid_app_id;
use appduct_protocol::control::{EventKind, ToolsListParams, Transport};
use clap_complete::Shell;
use serde_json::Value;

use super::args::{non_negative_int, positive_int};
use super::doctor::{ArtifactFormat, Expectation};
use super::parse::{REMOVED_WORDS, prescan_output_flags};
use super::sessions::link::OpenTarget;
use super::tools::snapshot::SnapshotMode;
use super::{Command, Early, Invocation, parse};
use crate::error::CliError;
use crate::globals::{RestartChoice, RestartFlag};
use appduct_protocol::link::is_http_url;

fn parse_words(words: &[&str]) -> Result<Invocation, Early> {
    let mut args = vec![OsString::from("appduct")];
    args.extend(words.iter().map(OsString::from));
    parse(args)
}

fn command(words: &[&str]) -> Command {
    match parse_words(words) {
        Ok(inv) => inv.command,
        Err(e) => panic!("{words:?} did not parse: {e:?}"),
    }
}

fn usage(words: &[&str]) -> CliError {
    match parse_words(words) {
        Err(Early::Usage(e, _)) => {
            assert_eq!(e.exit_code(), 64, "{words:?}");
            e
        }
        other => panic!("{words:?} was not a usage error: {other:?}"),
    }
}

#[test]
fn bare_appduct_prints_help() {
    match parse_words(&[]) {
        Err(Early::Print(text)) => assert!(text.contains("Usage: appduct")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn version_is_accepted_anywhere() {
    for words in [&["--version"][..], &["-V"], &["tools", "ls", "--version"]] {
        match parse_words(words) {
            Err(Early::Print(text)) => {
                assert_eq!(text, format!("appduct {}\n", env!("CARGO_PKG_VERSION")));
            }
            other => panic!("{words:?}: {other:?}"),
        }
    }
}

#[test]
fn global_flags_before_or_after_command_words() {
    for words in [
        &["--json", "--state-dir", "/tmp/x", "sessions", "ls"][..],
        &["sessions", "ls", "--json", "--state-dir", "/tmp/x"],
        &["sessions", "--json", "ls", "--state-dir=/tmp/x"],
    ] {
        let inv = parse_words(words).unwrap_or_else(|e| panic!("{words:?}: {e:?}"));
        assert!(inv.globals.output.json);
        assert_eq!(inv.globals.state_dir_flag, Some(PathBuf::from("/tmp/x")));
        assert_eq!(inv.command, Command::SessionsLs);
    }
}

#[test]
fn relative_state_dir_is_made_absolute() {
    let inv = parse_words(&["--state-dir", "rel/dir", "sessions", "ls"]).unwrap();
    let dir = inv.globals.state_dir_flag.unwrap();
    assert!(dir.is_absolute());
    assert!(dir.ends_with("rel/dir"));
}

#[test]
fn restart_flags() {
    let inv = parse_words(&["--daemon-restart", "daemon", "start"]).unwrap();
    assert_eq!(inv.globals.restart, RestartFlag::Force);
    assert_eq!(inv.globals.restart_choice(), RestartChoice::Force);
    let inv = parse_words(&["daemon", "start", "--no-daemon-restart"]).unwrap();
    assert_eq!(inv.globals.restart_choice(), RestartChoice::Forbid);
    usage(&["--daemon-restart", "--no-daemon-restart", "daemon", "start"]);
}

#[test]
fn removed_words_name_their_replacement() {
    for (word, replacement) in REMOVED_WORDS {
        let e = usage(&[word]);
        assert!(e.message.contains(replacement), "{}", e.message);
        assert_eq!(
            e.details.as_ref().and_then(|d| d.get("replacement")),
            Some(&Value::from(replacement))
        );
    }
}

#[test]
fn unknown_word_is_unknown_command() {
    match parse_words(&["frobnicate", "--json"]) {
        Err(Early::Usage(e, flags)) => {
            assert!(e.message.starts_with("unknown command \"frobnicate\""));
            // `--json` after the unknown word still selects JSON output.
            assert!(flags.json);
        }
        other => panic!("{other:?}"),
    }
    // `help` is a command: `help <command>` prints that command's help (§L1).
    assert!(matches!(
        parse_words(&["help", "tools", "call"]),
        Err(Early::Help(_))
    ));
    assert!(matches!(parse_words(&["help"]), Err(Early::Help(_))));
}

#[test]
fn bare_noun_and_unknown_verb_list_the_verbs() {
    let e = usage(&["tools"]);
    assert!(
        e.message.contains("ls, describe, call, snapshot"),
        "{}",
        e.message
    );
    let e = usage(&["sessions", "list"]);
    assert!(e.message.contains("ls, revoke, link"), "{}", e.message);
    let e = usage(&["events", "follow"]);
    assert!(e.message.contains("ls, tail, since"), "{}", e.message);
    let e = usage(&["daemon"]);
    assert!(
        e.message.contains("run, start, stop, status"),
        "{}",
        e.message
    );
}

#[test]
fn integer_rules() {
    assert_eq!(positive_int("--limit", "7").ok(), Some(7));
    assert_eq!(positive_int("--limit", "007").ok(), Some(7));
    for bad in [
        "0",
        "-1",
        "abc",
        "",
        "1.5",
        "+3",
        " 3",
        "1e3",
        "9007199254740992",
    ] {
        let e = positive_int("--limit", bad).unwrap_err();
        assert_eq!(
            e.message,
            format!("--limit must be a positive integer (got \"{bad}\")")
        );
    }
    assert_eq!(non_negative_int("--offset", "0").ok(), Some(0));
    assert!(non_negative_int("--offset", "-1").is_err());
    assert!(non_negative_int("--offset", "abc").is_err());
}

#[test]
fn tools_ls_values_are_typed_and_text_is_verbatim() {
    let Command::ToolsLs(ls) = command(&[
        "tools",
        "ls",
        "pixel-8",
        "--filter",
        "07",
        "--limit",
        "5",
        "--offset",
        "0",
        "--group",
        "checkout/payment",
        "--full",
    ]) else {
        panic!()
    };
    assert_eq!(ls.params.selector.as_deref(), Some("pixel-8"));
    assert_eq!(ls.params.filter.as_deref(), Some("07"));
    assert_eq!(ls.params.limit, Some(5));
    assert_eq!(ls.params.offset, Some(0));
    assert_eq!(ls.params.group.as_deref(), Some("checkout/payment"));
    assert!(ls.full && !ls.groups_only);
    // Unset values stay unset (the human default is the renderer's business).
    let Command::ToolsLs(ls) = command(&["tools", "ls"]) else {
        panic!()
    };
    assert_eq!(ls.params, ToolsListParams::default());
}

#[test]
fn tools_ls_argument_errors() {
    assert!(
        usage(&["tools", "ls", "--limit", "0"])
            .message
            .contains("positive integer")
    );
    assert!(
        usage(&["tools", "ls", "--limit", "-1"])
            .message
            .contains("positive integer")
    );
    assert!(
        usage(&["tools", "ls", "--offset", "abc"])
            .message
            .contains("≥ 0")
    );
    assert_eq!(
        usage(&["tools", "ls", "--filter"]).message,
        "--filter requires a value"
    );
    assert!(
        usage(&["tools", "ls", "a", "b"])
            .message
            .starts_with("too many arguments")
    );
    usage(&["tools", "ls", "--groups", "--filter", "x"]);
    usage(&["tools", "ls", "--groups", "--full"]);
    usage(&["tools", "ls", "--group", "a/b/c"]);
    usage(&["tools", "ls", "--filter", &"x".repeat(257)]);
    // --groups with a selector is fine.
    let Command::ToolsLs(ls) = command(&["tools", "ls", "--groups", "checkout"]) else {
        panic!()
    };
    assert!(ls.groups_only);
}

#[test]
fn selector_value_positionals() {
    assert_eq!(
        command(&["tools", "describe", "sum"]),
        Command::ToolsDescribe {
            selector: None,
            name: "sum".into()
        }
    );
    assert_eq!(
        command(&["tools", "describe", "pixel-8", "sum"]),
        Command::ToolsDescribe {
            selector: Some("pixel-8".into()),
            name: "sum".into()
        }
    );
    assert!(usage(&["tools", "call"]).message.contains("needs <name>"));
    usage(&["tools", "call", "a", "b", "c"]);
    usage(&["tools", "describe", "--group", "x", "sum"]);
}

#[test]
fn tools_call_input() {
    let Command::ToolsCall(call) = command(&[
        "tools",
        "call",
        "sum",
        "--input",
        r#"{"a":1}"#,
        "--timeout",
        "5000",
    ]) else {
        panic!()
    };
    assert_eq!(call.args.get("a"), Some(&Value::from(1)));
    assert_eq!(call.timeout_ms, Some(5000));
    let Command::ToolsCall(call) = command(&["tools", "call", "sum"]) else {
        panic!()
    };
    assert!(call.args.is_empty());

    for bad in ["[1]", "{", "null"] {
        match parse_words(&["tools", "call", "sum", "--input", bad]) {
            Err(Early::Usage(e, _)) => {
                assert_eq!(e.exit_code(), 65, "{bad}");
                assert_eq!(e.details.as_ref().unwrap()["param"], "--input");
            }
            other => panic!("{other:?}"),
        }
    }
    usage(&[
        "tools",
        "call",
        "sum",
        "--input",
        "{}",
        "--input-file",
        "x.json",
    ]);
    usage(&["tools", "call", "sum", "--timeout", "0"]);
}

#[test]
fn tools_call_input_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.json");
    std::fs::write(&path, r#"{"b":2}"#).unwrap();
    let Command::ToolsCall(call) = command(&[
        "tools",
        "call",
        "sum",
        "--input-file",
        path.to_str().unwrap(),
    ]) else {
        panic!()
    };
    assert_eq!(call.args.get("b"), Some(&Value::from(2)));
    let missing = dir.path().join("missing.json");
    usage(&[
        "tools",
        "call",
        "sum",
        "--input-file",
        missing.to_str().unwrap(),
    ]);
}

#[test]
fn snapshot_modes() {
    assert_eq!(
        command(&["tools", "snapshot", "--write", "-"]),
        Command::ToolsSnapshot {
            selector: None,
            mode: SnapshotMode::WriteStdout,
            from: None,
        }
    );
    assert_eq!(
        command(&["tools", "snapshot", "p", "--check", "s.json"]),
        Command::ToolsSnapshot {
            selector: Some("p".into()),
            mode: SnapshotMode::Check("s.json".into()),
            from: None,
        }
    );
    assert_eq!(
        command(&["tools", "snapshot", "--from", "-", "--check", "s.json"]),
        Command::ToolsSnapshot {
            selector: None,
            mode: SnapshotMode::Check("s.json".into()),
            from: Some("-".into()),
        }
    );
    usage(&["tools", "snapshot"]);
    usage(&["tools", "snapshot", "--write", "a", "--check", "b"]);
    usage(&["tools", "snapshot", "--from", "a.json"]);
    usage(&["tools", "snapshot", "p", "--from", "a.json", "--check", "b"]);
}

#[test]
fn events_commands() {
    let Command::EventsTail(p) = command(&["events", "tail", "pixel-8", "--name", "check*"]) else {
        panic!()
    };
    assert_eq!(p.session_selector.as_deref(), Some("pixel-8"));
    assert_eq!(p.kinds, Some(vec![EventKind::AppEvent]));
    assert_eq!(p.name.as_deref(), Some("check*"));
    command(&["events", "tail", "--follow"]);
    usage(&["events", "tail", "a", "b"]);

    let Command::EventsSince(p) = command(&["events", "since", "a", "42"]) else {
        panic!()
    };
    assert_eq!((p.selector.as_deref(), p.since), (Some("a"), Some(42)));
    let Command::EventsSince(p) = command(&["events", "since", "0"]) else {
        panic!()
    };
    assert_eq!((p.selector, p.since), (None, Some(0)));
    usage(&["events", "since", "a", "-1"]);
    usage(&["events", "since", "a", "x"]);
    usage(&["events", "since"]);
    usage(&["events", "ls", "--payload-max-bytes", "5"]);
    usage(&["events", "ls", "--limit", "0"]);
}

#[test]
fn link_combination_rules() {
    let bad: &[&[&str]] = &[
        &["--device", "emulator-5554"],
        &["--open", "ios-sim", "--app-id", "com.example"],
        &["--relaunch"],
        &["--open", "android", "--relaunch"],
        &["--url", "https://example.com"],
        &["--open", "web"],
        &["--open", "web", "--url", "ftp://x"],
        &["--transport", "tcp"],
        &["--transport", "web", "--open", "ios-device"],
        &[
            "--transport",
            "native",
            "--open",
            "web",
            "--url",
            "http://x",
        ],
        &["--open", "web", "--url", "http://x", "--qr"],
        &["--open", "web", "--url", "http://x", "--scheme", "myapp"],
        &["--open", "web", "--url", "http://x", "--device", "d"],
        &["--open", "tv"],
        &["--ttl", "0"],
        &["--ttl", "86401"],
        &["--scheme", "myapp://"],
        &["--scheme", "https"],
        &["--open", "android", "--app-id", "-rf"],
        &["extra"],
    ];
    for flags in bad {
        let mut words = vec!["sessions", "link"];
        words.extend_from_slice(flags);
        usage(&words);
    }
}

#[test]
fn link_accepted_combinations() {
    let Command::SessionsLink(l) = command(&[
        "sessions",
        "link",
        "--open",
        "web",
        "--transport",
        "web",
        "--url",
        "http://localhost:5173/#x",
    ]) else {
        panic!()
    };
    assert_eq!(l.transport, Transport::Web);
    assert_eq!(l.open, Some(OpenTarget::Web));
    let Command::SessionsLink(l) = command(&[
        "sessions",
        "link",
        "--open",
        "ios-device",
        "--relaunch",
        "--app-id",
        "com.example.app",
        "--device",
        "00008110-001A",
        "--ttl",
        "86400",
        "--scheme",
        "myapp",
    ]) else {
        panic!()
    };
    assert_eq!(l.transport, Transport::Native);
    assert_eq!(l.ttl_seconds, Some(86_400));
    assert!(l.relaunch);
    let Command::SessionsLink(l) = command(&[
        "sessions",
        "link",
        "--transport",
        "web",
        "--open",
        "android",
    ]) else {
        panic!()
    };
    assert_eq!(l.transport, Transport::Web);
    assert_eq!(
        command(&["sessions", "revoke", "abc"]),
        Command::SessionsRevoke {
            selector: Some("abc".into())
        }
    );
    usage(&["sessions", "revoke", "a", "b"]);
}

#[test]
fn local_commands() {
    assert_eq!(
        command(&["completions", "bash"]),
        Command::Completions { shell: Shell::Bash }
    );
    usage(&["completions", "tcsh"]);
    usage(&["completions"]);
    let Command::Doctor(d) = command(&["doctor", "App.IPA", "--assert-absent"]) else {
        panic!()
    };
    assert_eq!(
        (d.format, d.expect),
        (ArtifactFormat::Ipa, Some(Expectation::Absent))
    );
    usage(&["doctor", "x.zip"]);
    usage(&["doctor", "x.apk", "--assert-present", "--assert-absent"]);
    usage(&["doctor"]);
    usage(&["init", "--scheme", "http"]);
    usage(&["init", "--ios-app-id", "a b"]);
    let Command::Keygen(k) = command(&["keygen", "--out", "k.pem", "--force"]) else {
        panic!()
    };
    assert!(k.out.unwrap().is_absolute() && k.force);
    // mcp keeps even an invalid scheme (reported at startup).
    assert_eq!(
        command(&["mcp", "--scheme", "http"]),
        Command::Mcp {
            scheme: Some("http".into()),
            max_image_bytes: appduct_mcp::content::DEFAULT_MAX_IMAGE_BYTES,
            heartbeat_ms: appduct_mcp::options::DEFAULT_CALL_HEARTBEAT_MS,
        }
    );
    assert_eq!(
        command(&["mcp", "--max-image-bytes", "1000"]),
        Command::Mcp {
            scheme: None,
            max_image_bytes: 1000,
            heartbeat_ms: appduct_mcp::options::DEFAULT_CALL_HEARTBEAT_MS,
        }
    );
    usage(&["mcp", "--max-image-bytes", "0"]);
    assert_eq!(
        command(&["mcp", "--heartbeat-ms", "1000"]),
        Command::Mcp {
            scheme: None,
            max_image_bytes: appduct_mcp::content::DEFAULT_MAX_IMAGE_BYTES,
            heartbeat_ms: 1000,
        }
    );
    usage(&["mcp", "--heartbeat-ms", "100"]);
}

#[test]
fn app_id_and_url_patterns() {
    // The app-id rule itself is tested with `appduct_client::project`.
    assert!(is_valid_app_id("com.example.app"));
    assert!(!is_valid_app_id("com;rm"));
    assert!(is_http_url("https://example.com/x?y#z"));
    assert!(is_http_url("HTTP://localhost:5173"));
    assert!(!is_http_url("http://"));
    assert!(!is_http_url("http:///path"));
    assert!(!is_http_url("https://exa mple.com"));
    assert!(!is_http_url("javascript:alert(1)"));
}

#[test]
fn prescan_stops_at_double_dash() {
    let args: Vec<OsString> = ["appduct", "--pretty", "x", "--", "--json"]
        .iter()
        .map(OsString::from)
        .collect();
    let flags = prescan_output_flags(&args);
    assert!(flags.pretty && !flags.json);
}

#[test]
fn clap_errors_carry_a_help_hint_for_the_command() {
    let e = usage(&["tools", "ls", "--bogus"]);
    assert_eq!(e.hint(), Some("Run \"appduct tools ls --help\" for usage."));
    assert!(e.message.contains("--bogus"), "{}", e.message);
}

#[test]
fn labels_and_daemon_use() {
    assert_eq!(command(&["daemon", "status"]).label(), "daemon status");
    assert!(command(&["daemon", "stop"]).uses_daemon());
    assert!(!command(&["keygen"]).uses_daemon());
    assert!(!command(&["completions", "zsh"]).uses_daemon());
}

#[test]
fn link_for_picks_the_transport_and_conflicts_exit_64() {
    let link = |flags: &[&str]| {
        let mut words = vec!["sessions", "link"];
        words.extend_from_slice(flags);
        let Command::SessionsLink(l) = command(&words) else {
            panic!("{flags:?}")
        };
        l
    };
    for (app, transport) in [
        ("react-native", Transport::Sealed),
        ("web", Transport::Web),
        ("native", Transport::Native),
    ] {
        let l = link(&["--for", app]);
        assert_eq!(
            (l.transport, l.transport_defaulted),
            (transport, false),
            "{app}"
        );
        // --transport naming the same transport agrees.
        let l = link(&["--for", app, "--transport", transport.as_str()]);
        assert_eq!(l.transport, transport);
    }
    assert_eq!(
        link(&["--transport", "sealed"]).transport,
        Transport::Sealed
    );
    let l = link(&[]);
    assert_eq!(
        (l.transport, l.transport_defaulted),
        (Transport::Native, true)
    );
    let l = link(&["--for", "react-native", "--open", "ios-device"]);
    assert_eq!(l.transport, Transport::Sealed);

    for flags in [
        &["--for", "react-native", "--transport", "native"][..],
        &["--for", "native", "--transport", "sealed"],
        &["--for", "web", "--transport", "native"],
        &[
            "--for",
            "react-native",
            "--open",
            "web",
            "--url",
            "http://localhost:5173/",
        ],
        &[
            "--for",
            "native",
            "--open",
            "web",
            "--url",
            "http://localhost:5173/",
        ],
        &[
            "--transport",
            "sealed",
            "--open",
            "web",
            "--url",
            "http://localhost:5173/",
        ],
        &["--for", "ios"],
    ] {
        let mut words = vec!["sessions", "link"];
        words.extend_from_slice(flags);
        assert_eq!(usage(&words).exit_code(), 64, "{flags:?}");
    }
}
