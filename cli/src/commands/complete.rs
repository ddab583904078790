//! Dynamic shell completion (§L14.1): with `APPDUCT_COMPLETE=<shell>` in its environment the
//! binary prints the shell's registration script (no other arguments) or the candidates for the
//! word being completed (`appduct -- <words>`, as the registered script calls it), then exits.
//! Commands, flags and enumerated values come from the clap definition (clap_complete's
//! engine); session selectors and tool names are asked of the daemon.
//!
//! The daemon is asked only if it already runs: no spawn, no version check, a 300 ms budget
//! per request and 800 ms in all; any failure gives no candidates, never an error.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use appduct_client::client::{ClientOptions, ControlClient, VersionCheck};
use appduct_client::state_dir::StateDir;
use appduct_protocol::control::{
    NoParams, SessionSummary, SessionsList, ToolsListParams, ToolsListResult,
};
use clap::CommandFactory as _;
use clap_complete::CompletionCandidate;
use clap_complete::engine::ArgValueCompleter;

use super::Cli;
use crate::render;

/// The variable that turns a run into a completion request (§L14.1).
pub const COMPLETE_ENV: &str = "APPDUCT_COMPLETE";
/// The whole budget for asking the daemon during one completion.
pub const DAEMON_BUDGET: Duration = Duration::from_millis(800);
/// The per-request timeout within [`DAEMON_BUDGET`].
const REQUEST_TIMEOUT: Duration = Duration::from_millis(300);
/// `daemon.hello` client name of the completer (it sends none: the version check is skipped).
const CLIENT_NAME: &str = "appduct-complete";

/// Answers a completion request and exits when [`COMPLETE_ENV`] is set (and not empty or `0`);
/// returns otherwise. Called first thing in `main`, before anything is printed.
pub fn complete_if_asked() {
    clap_complete::CompleteEnv::with_factory(Cli::command)
        .var(COMPLETE_ENV)
        .bin("appduct")
        .complete();
}

/// The completer of the selector positionals (`SelectorArgs`, `SelectorValueArgs`): what it
/// offers depends on the command and the positionals before the word ([`wanted`]).
pub fn positional_completer() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| complete_positional(current))
}

/// What the word being completed may be, from the command words and positionals before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    Nothing,
    /// Session aliases and ids.
    Selectors,
    /// Selectors, and the tool names of the only live session.
    SelectorsOrTools,
    /// The tool names of this session.
    ToolsOf(String),
}

/// Reads the line being completed from this process's arguments (what the registered script
/// passes after `--`), decides what is wanted there and asks the daemon.
fn complete_positional(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(prefix) = current.to_str() else {
        return Vec::new();
    };
    let words = line_before_current(std::env::args_os().collect());
    let (path, positionals, state_dir) = scan(&words);
    let wanted = wanted(&path, &positionals);
    if wanted == Wanted::Nothing {
        return Vec::new();
    }
    let Ok(dir) = StateDir::resolve(state_dir.as_deref()) else {
        return Vec::new();
    };
    let (sessions, tools) = ask_daemon(dir.path(), &wanted);
    candidates(&wanted, prefix, &sessions, tools.as_ref())
}

/// The words of the completed line before the current one, program name first. The script
/// calls `appduct -- <words>`; bash and elvish also say which word is current
/// (`_CLAP_COMPLETE_INDEX`), the other shells complete the last one.
fn line_before_current(args: Vec<OsString>) -> Vec<String> {
    let Some(start) = args.iter().position(|a| a == "--") else {
        return Vec::new();
    };
    let words: Vec<String> = args[start + 1..]
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let current = std::env::var("_CLAP_COMPLETE_INDEX")
        .ok()
        .and_then(|i| i.parse::<usize>().ok())
        .unwrap_or(words.len().saturating_sub(1));
    words.into_iter().take(current).collect()
}

/// The command words, the positionals after them and `--state-dir`, in `words` (program name
/// first). Flags are skipped with their separate value when they take one.
pub fn scan(words: &[String]) -> (Vec<String>, Vec<String>, Option<PathBuf>) {
    let mut root = Cli::command();
    root.build();
    let mut cmd = &root;
    let mut path = Vec::new();
    let mut positionals = Vec::new();
    let mut state_dir = None;
    let mut iter = words.iter().skip(1);
    while let Some(word) = iter.next() {
        if let Some(long) = word.strip_prefix("--") {
            if long.is_empty() {
                positionals.extend(iter.by_ref().cloned());
                break;
            }
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (long, None),
            };
            let takes_value = cmd
                .get_arguments()
                .find(|a| a.get_long() == Some(name))
                .is_some_and(|a| a.get_action().takes_values());
            let value = match inline {
                Some(v) => Some(v),
                None if takes_value => iter.next().cloned(),
                None => None,
            };
            if name == "state-dir" {
                state_dir = value.map(|v| crate::commands::args::absolute(Path::new(&v)));
            }
        } else if word.starts_with('-') && word.len() > 1 {
            // Short flags (-h, -V, -f) take no value.
        } else if positionals.is_empty()
            && let Some(sub) = cmd.find_subcommand(word)
        {
            path.push(word.clone());
            cmd = sub;
        } else {
            positionals.push(word.clone());
        }
    }
    (path, positionals, state_dir)
}

/// What the next positional of command `path` may be, after `before`.
pub fn wanted(path: &[String], before: &[String]) -> Wanted {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    match (path.as_slice(), before) {
        (["tools", "call" | "describe"], []) => Wanted::SelectorsOrTools,
        (["tools", "call" | "describe"], [selector]) => Wanted::ToolsOf(selector.clone()),
        (["events", "since"], []) => Wanted::Selectors,
        (["sessions", "revoke"] | ["tools", "ls" | "snapshot"] | ["events", "ls" | "tail"], []) => {
            Wanted::Selectors
        }
        _ => Wanted::Nothing,
    }
}

/// The live sessions and, when wanted, one session's tools; empty when the daemon does not
/// run or does not answer within [`DAEMON_BUDGET`].
fn ask_daemon(state_dir: &Path, wanted: &Wanted) -> (Vec<SessionSummary>, Option<ToolsListResult>) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return (Vec::new(), None);
    };
    let mut opts = ClientOptions::new(state_dir, CLIENT_NAME);
    opts.auto_spawn = false;
    opts.request_timeout = REQUEST_TIMEOUT;
    opts.version_policy.check = VersionCheck::Skip;
    let work = async {
        let client = ControlClient::connect(opts).await.ok()?;
        let sessions = client.call::<SessionsList>(NoParams {}).await.ok()?;
        let selector = match wanted {
            Wanted::ToolsOf(s) => Some(s.clone()),
            Wanted::SelectorsOrTools if sessions.len() == 1 => None,
            _ => return Some((sessions, None)),
        };
        let tools = client
            .call::<appduct_protocol::control::ToolsList>(
                ToolsListParams::default().with_selector(selector),
            )
            .await
            .ok();
        Some((sessions, tools))
    };
    let answer = runtime.block_on(async { tokio::time::timeout(DAEMON_BUDGET, work).await });
    runtime.shutdown_background();
    answer.ok().flatten().unwrap_or_default()
}

/// The candidates starting with `prefix`: aliases (with the device as help) and session ids
/// when selectors are wanted, tool names (with their description's first line) when tools are.
pub fn candidates(
    wanted: &Wanted,
    prefix: &str,
    sessions: &[SessionSummary],
    tools: Option<&ToolsListResult>,
) -> Vec<CompletionCandidate> {
    let mut out = Vec::new();
    let mut push = |value: &str, help: String| {
        // App-supplied names never carry control characters into the shell (SECURITY.md §4.13).
        let value = render::clean_line(value);
        if !value.is_empty() && value.starts_with(prefix) {
            let help = render::cut_to_width(&render::clean_line(&help), 60);
            out.push(CompletionCandidate::new(value).help((!help.is_empty()).then(|| help.into())));
        }
    };
    if matches!(wanted, Wanted::Selectors | Wanted::SelectorsOrTools) {
        for s in sessions {
            push(&s.alias, format!("session {}", s.session_id));
        }
        for s in sessions {
            push(&s.session_id, format!("session id of {}", s.alias));
        }
    }
    if let Some(tools) = tools {
        for t in &tools.tools {
            let description = t.description().lines().next().unwrap_or_default();
            push(t.name(), description.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn scan_finds_the_command_its_positionals_and_the_state_dir() {
        let (path, pos, dir) = scan(&words(
            "appduct --state-dir /s --json tools call --timeout 500 pixel-8",
        ));
        assert_eq!(path, ["tools", "call"]);
        assert_eq!(pos, ["pixel-8"]);
        assert_eq!(dir.as_deref(), Some(Path::new("/s")));
        // A flag with an inline value, a boolean flag, and a positional that is a verb's name.
        let (path, pos, _) = scan(&words("appduct tools call --input={} --no-progress ls"));
        assert_eq!(
            (path.as_slice(), pos.as_slice()),
            (
                &["tools".to_owned(), "call".to_owned()][..],
                &["ls".to_owned()][..]
            )
        );
    }

    #[test]
    fn what_is_wanted_follows_the_selector_rules() {
        let p = |s: &str| words(s);
        assert_eq!(wanted(&p("tools call"), &[]), Wanted::SelectorsOrTools);
        assert_eq!(
            wanted(&p("tools describe"), &p("pixel-8")),
            Wanted::ToolsOf("pixel-8".into())
        );
        assert_eq!(wanted(&p("tools call"), &p("pixel-8 sum")), Wanted::Nothing);
        assert_eq!(wanted(&p("tools ls"), &[]), Wanted::Selectors);
        assert_eq!(wanted(&p("tools ls"), &p("pixel-8")), Wanted::Nothing);
        assert_eq!(wanted(&p("events since"), &[]), Wanted::Selectors);
        assert_eq!(wanted(&p("events since"), &p("pixel-8")), Wanted::Nothing);
        assert_eq!(wanted(&p("sessions revoke"), &[]), Wanted::Selectors);
        assert_eq!(wanted(&p("sessions ls"), &[]), Wanted::Nothing);
    }

    #[test]
    fn candidates_match_the_prefix_and_carry_no_control_characters() {
        use appduct_protocol::control::{PolicyDecision, ToolsListEntry};
        use serde_json::json;
        let session: SessionSummary = serde_json::from_value(json!({
            "sessionId": "q3VfZ0xkR2ptTnB4", "alias": "pixel\u{1b}[2J-8", "state": "active",
            "transport": "native", "device": {},
            "createdAt": "2026-11-30T10:59:00.000Z", "claimedAt": "2026-11-30T11:00:03.000Z",
            "toolCount": 2, "eventCount": 0
        }))
        .unwrap();
        let tool = |name: &str, description: &str| {
            let serde_json::Value::Object(d) = json!({"name": name, "description": description})
            else {
                unreachable!()
            };
            ToolsListEntry::new(d, None, PolicyDecision::Allow)
        };
        let tools = ToolsListResult::new(
            vec![
                tool("sum", "Adds.\u{7}\nSecond line"),
                tool("su\u{9b}b", "x"),
                tool("reset", ""),
            ],
            3,
            false,
            0,
            Vec::new(),
        );
        let values = |c: &[CompletionCandidate]| -> Vec<String> {
            c.iter()
                .map(|c| c.get_value().to_string_lossy().into_owned())
                .collect()
        };
        let got = candidates(
            &Wanted::SelectorsOrTools,
            "",
            std::slice::from_ref(&session),
            Some(&tools),
        );
        assert_eq!(
            values(&got),
            ["pixel[2J-8", "q3VfZ0xkR2ptTnB4", "sum", "sub", "reset"]
        );
        for c in &got {
            let help = c.get_help().map(ToString::to_string).unwrap_or_default();
            assert!(!help.chars().any(char::is_control), "{help:?}");
        }
        let got = candidates(
            &Wanted::ToolsOf("pixel-8".into()),
            "su",
            &[session],
            Some(&tools),
        );
        assert_eq!(values(&got), ["sum", "sub"]);
    }
}
