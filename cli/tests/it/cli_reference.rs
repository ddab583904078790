//! The command-line references that cannot drift from the binary (docs/cli.md §L15):
//!
//! - docs/cli-flags.md, every command and subcommand with its usage, arguments and flags, is
//!   rendered from the clap definition (`Cli::command()`, the parser the binary runs);
//! - docs/man/*.1, one man page per command, rendered from the same definition with
//!   `clap_mangen`;
//! - docs/cli.md, the hand-written reference, names every command path and every long flag,
//!   and gives each top-level command a section of its own.
//!
//! The first two fail when the committed text differs from the rendering; run with
//! `UPDATE_DOCS=1` to rewrite them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use appduct_cli::commands::Cli;
use clap::{Arg, ArgAction, Command, CommandFactory as _};

const UPDATE_ENV: &str = "UPDATE_DOCS";
const FLAGS_DOC: &str = "docs/cli-flags.md";
const MAN_DIR: &str = "docs/man";
const CLI_DOC: &str = "docs/cli.md";

fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn updating() -> bool {
    std::env::var_os(UPDATE_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The clap tree as the binary parses it, built (global flags propagated, bin names set).
fn built_cli() -> Command {
    let mut cmd = Cli::command();
    cmd.build();
    cmd
}

/// Every visible command, depth first in definition order, with its words after `appduct`.
fn walk(cmd: &Command) -> Vec<(Vec<String>, Command)> {
    fn go(cmd: &Command, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, Command)>) {
        out.push((path.clone(), cmd.clone()));
        // clap's generated `help` subcommands (`appduct help <command>`, §L1) print other
        // commands' help and get no page of their own.
        for sub in cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            path.push(sub.get_name().to_owned());
            go(sub, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    go(cmd, &mut Vec::new(), &mut out);
    out
}

fn visible_args(cmd: &Command) -> impl Iterator<Item = &Arg> {
    cmd.get_arguments().filter(|a| !a.is_hide_set())
}

fn plain(text: Option<&clap::builder::StyledStr>) -> String {
    text.map(|t| t.to_string()).unwrap_or_default()
}

/// A table cell: one line, `|` escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn arg_name(a: &Arg) -> String {
    if a.is_positional() {
        let name = a.get_value_names().and_then(|v| v.first()).map_or_else(
            || a.get_id().to_string().to_uppercase(),
            ToString::to_string,
        );
        let multiple = matches!(a.get_action(), ArgAction::Append)
            || a.get_num_args().is_some_and(|n| n.max_values() > 1);
        let mut text = if a.is_required_set() {
            format!("<{name}>")
        } else {
            format!("[{name}]")
        };
        if multiple {
            text.push_str("...");
        }
        return format!("`{text}`");
    }
    let mut names = Vec::new();
    if let Some(s) = a.get_short() {
        names.push(format!("`-{s}`"));
    }
    if let Some(l) = a.get_long() {
        names.push(format!("`--{l}`"));
    }
    names.join(", ")
}

fn arg_value(a: &Arg) -> String {
    if !a.get_action().takes_values() {
        return String::new();
    }
    let possible: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|p| !p.is_hide_set())
        .map(|p| p.get_name().to_owned())
        .collect();
    if a.is_positional() {
        // The name column already shows the value name.
        return if possible.is_empty() {
            String::new()
        } else {
            format!("`{}`", possible.join(" \\| "))
        };
    }
    let value = if possible.is_empty() {
        a.get_value_names()
            .map(|v| {
                v.iter()
                    .map(|n| format!("<{n}>"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| format!("<{}>", a.get_id().as_str().to_uppercase()))
    } else {
        possible.join(" \\| ")
    };
    let optional = a.get_num_args().is_some_and(|n| n.min_values() == 0);
    if optional {
        format!("`[={value}]`")
    } else {
        format!("`{value}`")
    }
}

fn arg_notes(a: &Arg) -> String {
    let mut notes = Vec::new();
    // A flag without a value defaults to off; saying so on every row is noise.
    let takes_values = a.get_action().takes_values();
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if takes_values && !defaults.is_empty() {
        notes.push(format!("default `{}`", defaults.join(",")));
    }
    if let Some(env) = a.get_env() {
        notes.push(format!("env `{}`", env.to_string_lossy()));
    }
    if a.is_required_set() && !a.is_positional() {
        notes.push("required".to_owned());
    }
    notes.join("; ")
}

fn usage_of(cmd: &Command) -> String {
    let text = cmd.clone().render_usage().to_string();
    let text = text.trim();
    text.strip_prefix("Usage:")
        .unwrap_or(text)
        .trim()
        .to_owned()
}

fn args_table(out: &mut String, args: &[&Arg]) {
    out.push_str("| Argument or flag | Value | Notes | Description |\n");
    out.push_str("| --- | --- | --- | --- |\n");
    for a in args {
        let help = plain(a.get_long_help().or(a.get_help()));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            arg_name(a),
            arg_value(a),
            cell(&arg_notes(a)),
            cell(&help)
        );
    }
}

/// docs/cli-flags.md as rendered from the clap definition.
fn render_flags_reference() -> String {
    let root = built_cli();
    let mut out = String::new();
    out.push_str(
        "# `appduct` flags reference (generated)\n\n\
         <!-- Generated from the clap definition by cli/tests/it/cli_reference.rs; do not edit.\n\
         Refresh with: UPDATE_DOCS=1 cargo test -p appduct --test it cli_reference -->\n\n\
         Every command and subcommand of the `appduct` binary with its usage, arguments and\n\
         flags, rendered from the parser the binary runs; a test fails when this file and the\n\
         binary disagree. What each command does, its output and its exit codes are in the\n\
         hand-written reference, [cli.md](cli.md); man pages rendered from the same definition\n\
         are in [man/](man/).\n",
    );
    let globals: Vec<&Arg> = visible_args(&root).filter(|a| a.is_global_set()).collect();
    out.push_str(
        "\n## Global options\n\nAccepted before or after the command words, by every command.\n\n",
    );
    args_table(&mut out, &globals);
    for (path, cmd) in walk(&root) {
        let title = if path.is_empty() {
            "appduct".to_owned()
        } else {
            format!("appduct {}", path.join(" "))
        };
        let _ = write!(out, "\n## `{title}`\n\n");
        let about = plain(cmd.get_long_about().or(cmd.get_about()));
        if !about.trim().is_empty() {
            let _ = write!(out, "{}\n\n", about.trim());
        }
        let _ = writeln!(out, "Usage: `{}`", usage_of(&cmd));
        let subs: Vec<&Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
        if !subs.is_empty() {
            out.push_str("\n| Command | Description |\n| --- | --- |\n");
            for s in subs {
                let _ = writeln!(
                    out,
                    "| `{} {}` | {} |",
                    title,
                    s.get_name(),
                    cell(&plain(s.get_about()))
                );
            }
        }
        let own: Vec<&Arg> = visible_args(&cmd)
            .filter(|a| !a.is_global_set() && a.get_id() != "help")
            .collect();
        if !own.is_empty() {
            out.push('\n');
            args_table(&mut out, &own);
        }
        let after = plain(cmd.get_after_long_help().or(cmd.get_after_help()));
        if !after.trim().is_empty() {
            out.push_str("\n```text\n");
            out.push_str(after.trim_end());
            out.push_str("\n```\n");
        }
    }
    out
}

/// Every man page (file name → roff text) rendered from the clap definition.
fn render_man_pages() -> BTreeMap<String, Vec<u8>> {
    let root = built_cli();
    let mut pages = BTreeMap::new();
    for (_, cmd) in walk(&root) {
        let man = clap_mangen::Man::new(cmd);
        let mut text = Vec::new();
        man.render(&mut text)
            .unwrap_or_else(|e| panic!("render {}: {e}", man.get_filename()));
        pages.insert(man.get_filename(), text);
    }
    pages
}

fn stale(what: &str) -> String {
    format!(
        "{what} differs from the clap definition of the binary; run \
         `{UPDATE_ENV}=1 cargo test -p appduct --test it cli_reference` to rewrite it, then \
         review the diff and update the hand-written docs/cli.md to match"
    )
}

#[test]
fn the_flags_reference_matches_the_clap_definition() {
    let path = repo_root().join(FLAGS_DOC);
    let rendered = render_flags_reference();
    if updating() {
        std::fs::write(&path, &rendered).expect("write docs/cli-flags.md");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(committed == rendered, "{}", stale(FLAGS_DOC));
}

#[test]
fn the_man_pages_match_the_clap_definition() {
    let dir = repo_root().join(MAN_DIR);
    let pages = render_man_pages();
    assert!(pages.contains_key("appduct.1"));
    assert!(pages.contains_key("appduct-tools-call.1"));
    if updating() {
        std::fs::create_dir_all(&dir).expect("create docs/man");
        for entry in std::fs::read_dir(&dir).expect("read docs/man").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".1") && !pages.contains_key(&name) {
                std::fs::remove_file(entry.path()).expect("remove a stale man page");
            }
        }
        for (name, text) in &pages {
            std::fs::write(dir.join(name), text).expect("write a man page");
        }
        return;
    }
    let mut committed: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".1") {
                committed.insert(name, std::fs::read(entry.path()).unwrap_or_default());
            }
        }
    }
    let differ: std::collections::BTreeSet<&String> = pages
        .keys()
        .chain(committed.keys())
        .filter(|name| pages.get(*name) != committed.get(*name))
        .collect();
    assert!(differ.is_empty(), "{}: {differ:?}", stale("docs/man/"));
}

/// The lines of docs/cli.md that are headings, and its whole text.
fn cli_doc() -> (Vec<String>, String) {
    let text = std::fs::read_to_string(repo_root().join(CLI_DOC))
        .unwrap_or_else(|e| panic!("{CLI_DOC}: {e}"));
    let headings = text
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    (headings, text)
}

#[test]
fn every_top_level_command_has_a_hand_written_section() {
    let (headings, _) = cli_doc();
    let missing: Vec<String> = built_cli()
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name().to_owned())
        .filter(|name| {
            !headings.iter().any(|h| {
                h.contains(&format!("`appduct {name}")) || h.contains(&format!("`{name}`"))
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{CLI_DOC} has no section (a heading naming `appduct <command>`) for: {missing:?}"
    );
}

#[test]
fn the_hand_written_reference_names_every_command_and_long_flag() {
    let (_, text) = cli_doc();
    let root = built_cli();
    let mut missing = Vec::new();
    for (path, cmd) in walk(&root) {
        if !path.is_empty() {
            let words = format!("appduct {}", path.join(" "));
            if !text.contains(&words) {
                missing.push(words);
            }
        }
        for a in visible_args(&cmd) {
            if let Some(long) = a.get_long() {
                let flag = format!("--{long}");
                let named = text.match_indices(&flag).any(|(i, _)| {
                    // `--limit` must not be satisfied by `--limits`.
                    text[i + flag.len()..]
                        .chars()
                        .next()
                        .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
                });
                if !named {
                    missing.push(format!("{flag} (appduct {})", path.join(" ")));
                }
            }
        }
    }
    missing.dedup();
    assert!(missing.is_empty(), "docs/cli.md never names: {missing:?}");
}
