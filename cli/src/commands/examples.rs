//! The `Examples:` sections of `--help` (and `appduct help <command>`, §L1): real invocations
//! for every top-level command and the common verbs, attached to the clap tree in one place
//! ([`sessions`], [`tools`], … are applied by `mut_subcommand` on [`super::Cli`]). A unit test
//! parses every example line, so an example that stops being a valid command line fails the
//! build. Examples that name a session use the playground's alias (`appduct playground`, §L16),
//! so they can be tried as written.

use clap::Command;

/// Examples of the whole command line (`appduct --help`).
pub const ROOT: &str = "\
Examples:
  appduct playground                      # a demo app to try every command on
  appduct sessions ls
  appduct tools call playground sum --input '{\"a\":1,\"b\":2}'
  appduct help tools call                 # the same as: appduct tools call --help";

const SESSIONS: &str = "\
Examples:
  appduct sessions ls
  appduct sessions link --open android --wait
  appduct sessions revoke playground";

const SESSIONS_LS: &str = "\
Examples:
  appduct sessions ls
  appduct sessions ls --json";

const SESSIONS_LINK: &str = "\
Examples:
  appduct sessions link --qr                              # scan it with the phone
  appduct sessions link --open android --wait             # deliver through adb, wait for the app
  appduct sessions link --open ios-sim --scheme myapp
  appduct sessions link --open web --url http://127.0.0.1:5173/";

const SESSIONS_REVOKE: &str = "\
Examples:
  appduct sessions revoke               # the only live session
  appduct sessions revoke playground";

const SESSIONS_LEASE: &str = "\
Examples:
  appduct sessions lease playground             # hold it until Ctrl-C
  appduct sessions lease playground --ttl 300 --steal
  appduct sessions lease playground --release   # end whoever's lease it is";

const TOOLS: &str = "\
Examples:
  appduct tools ls playground
  appduct tools describe playground sum
  appduct tools call playground sum --input '{\"a\":1,\"b\":2}'";

const TOOLS_LS: &str = "\
Examples:
  appduct tools ls
  appduct tools ls playground --filter count --full
  appduct tools ls --groups";

const TOOLS_DESCRIBE: &str = "\
Examples:
  appduct tools describe sum
  appduct tools describe playground sum --json";

const TOOLS_CALL: &str = "\
Examples:
  appduct tools call sum --input '{\"a\":1,\"b\":2}'
  appduct tools call playground slow_task --timeout 10000
  echo '{\"a\":1,\"b\":2}' | appduct tools call sum --input-file -
  appduct tools call sum --input '{\"a\":1,\"b\":2}' --json --verbose";

const TOOLS_SNAPSHOT: &str = "\
Examples:
  appduct tools snapshot --write appduct-tools.json
  appduct tools snapshot --check appduct-tools.json    # in CI: exit 3 when the surface changed
  npx appduct-sdk snapshot dist/tools.js | appduct tools snapshot --from - --check appduct-tools.json";

const TOOLS_TEST: &str = "\
Examples:
  appduct tools test
  appduct tools test playground --tool call_count
  appduct tools test --allow-destructive --json    # in CI: exit 3 when a case fails";

const EVENTS: &str = "\
Examples:
  appduct events ls
  appduct events tail playground --name 'playground_*'
  appduct events since playground 0";

const DAEMON: &str = "\
Examples:
  appduct daemon status
  appduct daemon reload
  appduct daemon stop";

const APPROVALS: &str = "\
Examples:
  appduct approvals ls
  appduct approvals approve apr_0123456789abcdef --for 15   # then type the code shown
  appduct approvals deny apr_0123456789abcdef";

const POLICY: &str = "\
Examples:
  appduct policy ls
  appduct policy set destructive prompt
  appduct policy set '*/reset_counter' deny
  appduct policy reset '*/reset_counter'";

const AUDIT: &str = "\
Examples:
  appduct audit --since 1h
  appduct audit --tool sum --outcome error --json
  appduct audit --session playground --follow";

const MCP: &str = "\
Examples:
  appduct mcp                                            # what an agent client runs
  appduct mcp install --client claude-code --project
  appduct mcp install --client cursor --dry-run";

const MCP_INSTALL: &str = "\
Examples:
  appduct mcp install --client claude-code --project --skill
  appduct mcp install --client codex --user
  appduct mcp install --client vscode --project --dry-run";

const MCP_UNINSTALL: &str = "\
Examples:
  appduct mcp uninstall --client claude-code --project";

const INIT: &str = "\
Examples:
  appduct init
  appduct init --scheme myapp --android-app-id com.example.shop --ios-app-id com.example.shop
  appduct init --mcp-json";

const KEYGEN: &str = "\
Examples:
  appduct keygen
  appduct keygen --out ./dev-key.pem";

const DOCTOR: &str = "\
Examples:
  appduct doctor app-release.apk
  appduct doctor build/MyApp.ipa --assert-absent     # in CI: exit 3 if appduct shipped";

const PLAYGROUND: &str = "\
Examples:
  appduct playground            # stays connected; try commands from another terminal
  appduct playground --tour     # a scripted tour of the commands";

const HTTP: &str = "\
Examples:
  appduct http enable           # serve the loopback HTTP API on a port the OS picks
  appduct http enable --port 7777
  appduct http status
  appduct http token            # the bearer token for curl -H 'Authorization: Bearer …'
  appduct http disable";

const WATCH: &str = "\
Examples:
  appduct watch                 # live view; a/A/d approve or deny, q quits
  appduct --state-dir /tmp/ad watch   # the daemon of another state dir";

/// Which command (the words after `appduct`) shows which section.
pub const EXAMPLES: &[(&str, &str)] = &[
    ("sessions", SESSIONS),
    ("sessions ls", SESSIONS_LS),
    ("sessions link", SESSIONS_LINK),
    ("sessions revoke", SESSIONS_REVOKE),
    ("sessions lease", SESSIONS_LEASE),
    ("tools", TOOLS),
    ("tools ls", TOOLS_LS),
    ("tools describe", TOOLS_DESCRIBE),
    ("tools call", TOOLS_CALL),
    ("tools snapshot", TOOLS_SNAPSHOT),
    ("tools test", TOOLS_TEST),
    ("events", EVENTS),
    ("daemon", DAEMON),
    ("approvals", APPROVALS),
    ("policy", POLICY),
    ("audit", AUDIT),
    ("mcp", MCP),
    ("mcp install", MCP_INSTALL),
    ("mcp uninstall", MCP_UNINSTALL),
    ("init", INIT),
    ("keygen", KEYGEN),
    ("doctor", DOCTOR),
    ("playground", PLAYGROUND),
    ("watch", WATCH),
    ("http", HTTP),
];

/// Attaches the examples to a top-level command and its verbs, in place (the order of the
/// commands is kept). Used as `mut_subcommands(examples::attach)` on [`super::Cli`].
pub fn attach(cmd: Command) -> Command {
    let path = cmd.get_name().to_owned();
    attach_at(cmd, &path)
}

fn attach_at(cmd: Command, path: &str) -> Command {
    let cmd = match EXAMPLES.iter().find(|(p, _)| *p == path) {
        Some((_, text)) => cmd.after_help(*text),
        None => cmd,
    };
    cmd.mut_subcommands(|sub| {
        let sub_path = format!("{path} {}", sub.get_name());
        attach_at(sub, &sub_path)
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use clap::CommandFactory as _;

    use super::super::{Cli, Early, parse};
    use super::EXAMPLES;

    /// `appduct …` command lines of an Examples section: from `appduct` up to a `#` comment or
    /// a redirection, split on spaces outside single quotes (the examples need no more).
    fn example_lines(text: &str) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        for line in text.lines().skip_while(|l| *l != "Examples:").skip(1) {
            let line = line.split(" #").next().unwrap_or_default().trim();
            let Some(start) = line.find("appduct ").or(line.eq("appduct").then_some(0)) else {
                continue;
            };
            let mut words = Vec::new();
            let mut word = String::new();
            let mut quoted = false;
            let line = &line[start..];
            let line = line.split(" > ").next().unwrap_or_default();
            for c in line.chars() {
                match c {
                    '\'' => quoted = !quoted,
                    ' ' if !quoted => {
                        if !word.is_empty() {
                            words.push(std::mem::take(&mut word));
                        }
                    }
                    c => word.push(c),
                }
            }
            if !word.is_empty() {
                words.push(word);
            }
            out.push(words);
        }
        out
    }

    fn built() -> clap::Command {
        let mut cmd = Cli::command();
        cmd.build();
        cmd
    }

    #[test]
    fn every_top_level_command_and_the_common_verbs_have_examples() {
        let root = built();
        let mut paths: Vec<Vec<&str>> = root
            .get_subcommands()
            .map(|s| s.get_name())
            .filter(|n| !["help", "completions"].contains(n))
            .map(|n| vec![n])
            .collect();
        paths.extend(
            [
                ["sessions", "link"],
                ["sessions", "ls"],
                ["sessions", "revoke"],
                ["sessions", "lease"],
                ["tools", "ls"],
                ["tools", "describe"],
                ["tools", "call"],
                ["tools", "snapshot"],
                ["tools", "test"],
                ["mcp", "install"],
                ["mcp", "uninstall"],
            ]
            .map(|p| p.to_vec()),
        );
        // `completions` keeps its own after-help (install lines, then examples).
        paths.push(vec!["completions"]);
        paths.push(vec![]);
        for path in paths {
            let mut cmd = &root;
            for word in &path {
                cmd = cmd
                    .find_subcommand(word)
                    .unwrap_or_else(|| panic!("{path:?}"));
            }
            let after = cmd
                .get_after_help()
                .map(ToString::to_string)
                .unwrap_or_default();
            assert!(after.contains("Examples:\n  "), "{path:?} has no examples");
            assert!(!example_lines(&after).is_empty(), "{path:?}");
        }
    }

    #[test]
    fn every_examples_entry_names_a_command() {
        let root = built();
        for (path, _) in EXAMPLES {
            let mut cmd = &root;
            for word in path.split(' ') {
                cmd = cmd
                    .find_subcommand(word)
                    .unwrap_or_else(|| panic!("{path}"));
            }
        }
    }

    #[test]
    fn every_example_is_a_valid_command_line() {
        fn visit(cmd: &clap::Command, seen: &mut usize) {
            let after = cmd
                .get_after_help()
                .map(ToString::to_string)
                .unwrap_or_default();
            for words in example_lines(&after) {
                // Reading stdin is part of parsing `--input-file -`; the test has none.
                if words.windows(2).any(|w| w == ["--input-file", "-"]) {
                    continue;
                }
                *seen += 1;
                let args: Vec<OsString> = words.iter().map(OsString::from).collect();
                match parse(args) {
                    Ok(_) | Err(Early::Help(_) | Early::Print(_)) => {}
                    Err(Early::Usage(e, _)) => panic!("{words:?}: {}", e.message),
                }
            }
            for sub in cmd.get_subcommands() {
                visit(sub, seen);
            }
        }
        let mut seen = 0;
        visit(&built(), &mut seen);
        assert!(seen > 40, "{seen}");
    }
}
