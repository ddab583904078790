//! `appduct mcp install` / `mcp uninstall` (§L20) against a temporary home and project: the
//! dry run of every client, a merge into an existing configuration that keeps every other
//! entry, idempotent re-install, uninstall restoring the file, and refusal of a malformed file.
//! None of these commands may contact or spawn a daemon.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::Sandbox;

/// A sandbox whose XDG and Codex locations are pinned inside its home, so nothing can reach
/// the real user's files whatever the test environment exports.
fn sandbox() -> Sandbox {
    let mut sb = Sandbox::without_state_dir(env!("CARGO_BIN_EXE_appduct")).unwrap();
    let home = sb.home();
    sb.set_env(
        "XDG_CONFIG_HOME",
        &home.join(".config").display().to_string(),
    );
    sb.set_env("CODEX_HOME", &home.join(".codex").display().to_string());
    sb
}

fn exe() -> String {
    fs::canonicalize(env!("CARGO_BIN_EXE_appduct"))
        .unwrap()
        .display()
        .to_string()
}

fn ok(sb: &Sandbox, args: &[&str]) -> Value {
    let (code, doc) = sb.json(args);
    assert_eq!(code, 0, "{args:?}: {doc}");
    assert_eq!(doc["ok"], true, "{args:?}: {doc}");
    assert!(!sb.state_dir().exists(), "{args:?} created a state dir");
    doc["data"].clone()
}

/// Every (client, scope flag, expected path relative to home `~` or project `.`, format).
fn cases(sb: &Sandbox) -> Vec<(&'static str, &'static str, PathBuf)> {
    let h = sb.home();
    let p = sb.cwd();
    vec![
        ("claude-code", "--project", p.join(".mcp.json")),
        ("claude-code", "--user", h.join(".claude.json")),
        (
            "claude-desktop",
            "--user",
            h.join(".config/Claude/claude_desktop_config.json"),
        ),
        ("cursor", "--project", p.join(".cursor/mcp.json")),
        ("cursor", "--user", h.join(".cursor/mcp.json")),
        ("vscode", "--project", p.join(".vscode/mcp.json")),
        ("vscode", "--user", h.join(".config/Code/User/mcp.json")),
        ("codex", "--project", p.join(".codex/config.toml")),
        ("codex", "--user", h.join(".codex/config.toml")),
        (
            "windsurf",
            "--user",
            h.join(".codeium/windsurf/mcp_config.json"),
        ),
    ]
}

/// Our entry as written in `content` (JSON or TOML), as JSON.
fn entry_in(client: &str, content: &str) -> Value {
    if client == "codex" {
        let doc: toml_edit::DocumentMut = content.parse().unwrap();
        let t = &doc["mcp_servers"]["appduct"];
        let args: Vec<&str> = t["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        return json!({"command": t["command"].as_str().unwrap(), "args": args});
    }
    let doc: Value = serde_json::from_str(content).unwrap();
    let key = if client == "vscode" {
        "servers"
    } else {
        "mcpServers"
    };
    doc[key]["appduct"].clone()
}

#[test]
fn dry_run_of_every_client_prints_the_path_and_content_and_writes_nothing() {
    let sb = sandbox();
    for (client, scope, path) in cases(&sb) {
        let args = ["mcp", "install", "--client", client, scope, "--dry-run"];
        let data = ok(&sb, &args);
        assert_eq!(data["path"], path.display().to_string(), "{args:?}");
        assert_eq!(data["result"], "created", "{args:?}");
        assert_eq!(data["dryRun"], true);
        assert_eq!(data["backup"], Value::Null);
        let content = data["content"].as_str().unwrap();
        let entry = entry_in(client, content);
        assert_eq!(entry["command"], exe(), "{args:?}: {content}");
        assert_eq!(entry["args"], json!(["mcp"]), "{args:?}");
        if matches!(client, "claude-code" | "vscode") {
            assert_eq!(entry["type"], "stdio", "{args:?}");
        }
        assert!(!path.exists(), "{args:?} wrote {}", path.display());

        // The human dry run shows the same path and content.
        let (code, stdout, stderr) = sb.output(&args);
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.contains(&path.display().to_string()), "{stdout}");
        assert!(stdout.contains(content), "{stdout}");
        assert!(!path.exists());
    }
    // No client wrote anything anywhere in the home or project.
    assert_eq!(fs::read_dir(sb.home()).unwrap().count(), 0);
    assert_eq!(fs::read_dir(sb.cwd()).unwrap().count(), 0);
}

fn backups_of(path: &Path) -> Vec<PathBuf> {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let mut found: Vec<PathBuf> = fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{name}.appduct-backup-"))
        })
        .collect();
    found.sort();
    found
}

#[test]
fn install_merges_reinstall_is_idempotent_and_uninstall_restores_the_file() {
    let sb = sandbox();
    let path = sb.home().join(".claude.json");
    // Claude Code's own file: unrelated settings, a per-project block and another server.
    let original = r#"{
  "numStartups": 12,
  "projects": {
    "/src/app": {
      "mcpServers": {
        "local-one": {
          "command": "node",
          "args": [
            "x.js"
          ]
        }
      }
    }
  },
  "mcpServers": {
    "github": {
      "type": "stdio",
      "command": "npx",
      "args": [
        "-y",
        "@modelcontextprotocol/server-github"
      ],
      "env": {
        "TOKEN": "t"
      }
    }
  },
  "theme": "dark"
}
"#;
    fs::write(&path, original).unwrap();
    fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();

    let args = ["mcp", "install", "--client", "claude-code", "--user"];
    let data = ok(&sb, &args);
    assert_eq!(data["result"], "updated");
    assert_eq!(data["changed"], true);
    let written = fs::read_to_string(&path).unwrap();
    assert_eq!(data["content"], written.as_str());
    let doc: Value = serde_json::from_str(&written).unwrap();
    let before: Value = serde_json::from_str(original).unwrap();
    // Everything else is exactly as it was, in the same order.
    for key in ["numStartups", "projects", "theme"] {
        assert_eq!(doc[key], before[key], "{key}");
    }
    let keys: Vec<_> = doc.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["numStartups", "projects", "mcpServers", "theme"]);
    assert_eq!(doc["mcpServers"]["github"], before["mcpServers"]["github"]);
    assert_eq!(
        doc["mcpServers"]["appduct"],
        json!({"type": "stdio", "command": exe(), "args": ["mcp"]})
    );
    // The layout is the file's own: a one-line diff plus our entry.
    assert!(written.starts_with("{\n  \"numStartups\": 12,\n  \"projects\": {\n"));
    // A backup of the original, with its permissions.
    let backups = backups_of(&path);
    assert_eq!(backups.len(), 1, "{backups:?}");
    assert_eq!(data["backup"], backups[0].display().to_string());
    assert_eq!(fs::read_to_string(&backups[0]).unwrap(), original);
    let mode = |p: &Path| {
        std::os::unix::fs::PermissionsExt::mode(&fs::metadata(p).unwrap().permissions()) & 0o777
    };
    assert_eq!(mode(&backups[0]), 0o600);
    assert_eq!(mode(&path), 0o600);

    // Re-install: nothing changes, no new backup.
    let again = ok(&sb, &args);
    assert_eq!(again["result"], "unchanged");
    assert_eq!(again["changed"], false);
    assert_eq!(again["backup"], Value::Null);
    assert_eq!(fs::read_to_string(&path).unwrap(), written);
    assert_eq!(backups_of(&path).len(), 1);

    // Uninstall gives back the original bytes.
    let removed = ok(
        &sb,
        &["mcp", "uninstall", "--client", "claude-code", "--user"],
    );
    assert_eq!(removed["result"], "removed");
    assert_eq!(fs::read_to_string(&path).unwrap(), original);
    assert_eq!(backups_of(&path).len(), 2);
    // A second uninstall finds nothing to remove.
    let absent = ok(
        &sb,
        &["mcp", "uninstall", "--client", "claude-code", "--user"],
    );
    assert_eq!(absent["result"], "absent");
    assert_eq!(absent["changed"], false);
    assert_eq!(fs::read_to_string(&path).unwrap(), original);
}

#[test]
fn codex_toml_keeps_comments_and_other_servers() {
    let sb = sandbox();
    let path = sb.home().join(".codex/config.toml");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let original = "# Codex settings\nmodel = \"gpt-5\"  # keep me\n\n[mcp_servers.docs]\ncommand = \"npx\"\nargs = [\"-y\", \"docs-mcp\"]\n\n[profiles.fast]\nmodel = \"mini\"\n";
    fs::write(&path, original).unwrap();

    let data = ok(&sb, &["mcp", "install", "--client", "codex"]);
    assert_eq!(data["scope"], "user");
    assert_eq!(data["result"], "updated");
    let written = fs::read_to_string(&path).unwrap();
    // Our table sits with the other servers; everything else is byte for byte the same.
    let ours = format!(
        "\n[mcp_servers.appduct]\ncommand = \"{}\"\nargs = [\"mcp\"]\n",
        exe()
    );
    assert!(
        written.contains(&format!("docs-mcp\"]\n{ours}\n[profiles.fast]")),
        "{written}"
    );
    assert_eq!(written.replacen(&ours, "", 1), original);
    assert_eq!(
        entry_in("codex", &written),
        json!({"command": exe(), "args": ["mcp"]})
    );
    assert_eq!(
        ok(&sb, &["mcp", "install", "--client", "codex"])["result"],
        "unchanged"
    );
    ok(&sb, &["mcp", "uninstall", "--client", "codex"]);
    assert_eq!(fs::read_to_string(&path).unwrap(), original);
}

#[test]
fn project_file_created_by_install_is_deleted_by_uninstall() {
    let sb = sandbox();
    let path = sb.cwd().join(".vscode/mcp.json");
    let data = ok(&sb, &["mcp", "install", "--client", "vscode", "--project"]);
    assert_eq!(data["result"], "created");
    assert_eq!(data["backup"], Value::Null);
    let doc: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        doc,
        json!({"servers": {"appduct": {"type": "stdio", "command": exe(), "args": ["mcp"]}}})
    );
    let data = ok(
        &sb,
        &["mcp", "uninstall", "--client", "vscode", "--project"],
    );
    assert_eq!(data["result"], "deleted");
    assert_eq!(data["content"], Value::Null);
    assert!(!path.exists());
    // The backup of what was deleted stays.
    assert_eq!(backups_of(&path).len(), 1);
}

#[test]
fn malformed_config_is_refused_and_left_untouched() {
    let sb = sandbox();
    let path = sb.home().join(".cursor/mcp.json");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    for bad in ["{ \"mcpServers\": { ", "{\"mcpServers\": [1]}", "[1, 2]"] {
        fs::write(&path, bad).unwrap();
        for verb in ["install", "uninstall"] {
            for dry in [false, true] {
                let mut args = vec!["mcp", verb, "--client", "cursor"];
                if dry {
                    args.push("--dry-run");
                }
                let (code, doc) = sb.json(&args);
                assert_eq!(code, 65, "{args:?} {bad}: {doc}");
                assert_eq!(doc["ok"], false);
                assert_eq!(doc["error"]["type"], "validation_error");
                assert_eq!(doc["error"]["details"]["path"], path.display().to_string());
                assert_eq!(fs::read_to_string(&path).unwrap(), bad);
                assert!(backups_of(&path).is_empty());
            }
        }
    }
}

#[test]
fn user_only_clients_refuse_project_scope() {
    let sb = sandbox();
    for client in ["claude-desktop", "windsurf"] {
        let (code, doc) = sb.json(&["mcp", "install", "--client", client, "--project"]);
        assert_eq!(code, 64, "{doc}");
        assert_eq!(doc["error"]["type"], "usage_error");
        assert_eq!(doc["error"]["details"]["client"], client);
    }
    let (code, doc) = sb.json(&["mcp", "install", "--client", "emacs"]);
    assert_eq!(code, 64, "{doc}");
    assert_eq!(fs::read_dir(sb.home()).unwrap().count(), 0);
}

/// The backticked names in one table cell (`` `a`, `b` `` → a, b).
fn backticked(cell: &str) -> std::collections::BTreeSet<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn skill_names_only_real_builtins_with_their_real_arguments() {
    use appduct_cli::commands::mcp_setup::SKILL;
    use appduct_mcp::catalog::{BUILTIN_NAMES, builtins};

    // Every appduct_* word is a built-in.
    let mut named = std::collections::BTreeSet::new();
    for (i, _) in SKILL.match_indices("appduct_") {
        let word: String = SKILL[i..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        assert!(
            BUILTIN_NAMES.contains(&word.as_str()),
            "SKILL.md names {word}, which is no built-in"
        );
        named.insert(word);
    }
    assert_eq!(named.len(), 10, "{named:?}");
    assert_eq!(BUILTIN_NAMES.len(), 10);

    // Its table has one row per built-in, listing exactly that built-in's input arguments.
    let mut rows = 0;
    for line in SKILL.lines().filter(|l| l.starts_with("| `appduct_")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`');
        let builtin = builtins()
            .iter()
            .find(|b| b.name == name)
            .unwrap_or_else(|| panic!("{name}"));
        let real: std::collections::BTreeSet<String> = builtin.input_schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            backticked(cells[2]),
            real,
            "arguments of {name} in SKILL.md"
        );
        rows += 1;
    }
    assert_eq!(rows, 10);
    // Agent skills need a name and description in their front matter.
    assert!(
        SKILL.starts_with("---\nname: appduct\ndescription: "),
        "front matter"
    );
}

#[test]
fn skill_is_installed_beside_the_config_and_removed_with_it() {
    let sb = sandbox();
    let skill = sb.home().join(".claude/skills/appduct/SKILL.md");
    let data = ok(
        &sb,
        &[
            "mcp",
            "install",
            "--client",
            "claude-code",
            "--skill",
            "--dry-run",
        ],
    );
    assert_eq!(data["skill"]["path"], skill.display().to_string());
    assert_eq!(data["skill"]["result"], "created");
    assert!(!skill.exists());

    let data = ok(
        &sb,
        &["mcp", "install", "--client", "claude-code", "--skill"],
    );
    assert_eq!(data["skill"]["result"], "created");
    assert_eq!(
        fs::read_to_string(&skill).unwrap(),
        appduct_cli::commands::mcp_setup::SKILL
    );
    assert!(sb.home().join(".claude.json").exists());
    let again = ok(
        &sb,
        &["mcp", "install", "--client", "claude-code", "--skill"],
    );
    assert_eq!(again["skill"]["result"], "unchanged");

    let project = ok(
        &sb,
        &[
            "mcp",
            "install",
            "--client",
            "codex",
            "--project",
            "--skill",
        ],
    );
    assert_eq!(
        project["skill"]["path"],
        sb.cwd()
            .join(".agents/skills/appduct/SKILL.md")
            .display()
            .to_string()
    );

    let gone = ok(
        &sb,
        &["mcp", "uninstall", "--client", "claude-code", "--skill"],
    );
    assert_eq!(gone["skill"]["result"], "deleted");
    assert!(!skill.exists());
    assert!(!sb.home().join(".claude.json").exists());

    let (code, doc) = sb.json(&["mcp", "install", "--client", "cursor", "--skill"]);
    assert_eq!(code, 64, "{doc}");
    assert!(!sb.home().join(".cursor").exists());
}

#[test]
fn init_with_mcp_json_writes_the_projects_claude_code_config() {
    let sb = sandbox();
    let data = ok(&sb, &["init", "--scheme", "myapp", "--mcp-json"]);
    assert_eq!(data["scheme"], "myapp");
    let path = sb.cwd().join(".mcp.json");
    assert_eq!(data["mcpJson"]["path"], path.display().to_string());
    assert_eq!(data["mcpJson"]["result"], "created");
    let doc: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(doc["mcpServers"]["appduct"]["command"], exe());
    // Without the flag, init leaves .mcp.json alone and says how to get one.
    fs::remove_file(&path).unwrap();
    let data = ok(&sb, &["init", "--scheme", "myapp"]);
    assert!(data.get("mcpJson").is_none());
    assert!(!path.exists());
    assert!(
        data["nextSteps"]
            .to_string()
            .contains("appduct init --mcp-json")
    );
}

/// `mcp install --url` (§L20.5): the URL form of `/mcp` with the bearer token, in the user
/// file only, readable by its owner only; switching back to the command form leaves no URL
/// key; refused while the HTTP API is off or on a port chosen at each start.
#[test]
fn url_form_points_at_mcp_with_the_token_and_switches_back_cleanly() {
    use std::os::unix::fs::PermissionsExt as _;
    let sb = crate::support::sandbox_with_config(r#"{"wssPort": 0, "http": {"port": 4711}}"#);
    let token = "A".repeat(43);
    fs::write(sb.state_dir().join("http.token"), format!("{token}\n")).unwrap();
    fs::set_permissions(
        sb.state_dir().join("http.token"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let url = "http://127.0.0.1:4711/mcp";
    let file = sb.home().join(".cursor/mcp.json");

    let (code, doc) = sb.json(&["mcp", "install", "--client", "cursor", "--url"]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(
        doc["data"]["server"],
        json!({"name": "appduct", "url": url})
    );
    let written: Value = serde_json::from_str(&fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(
        written["mcpServers"]["appduct"],
        json!({"url": url, "headers": {"Authorization": format!("Bearer {token}")}})
    );
    assert_eq!(
        fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Each client's spelling: Windsurf names the key serverUrl; VS Code types it "http".
    let (_, doc) = sb.json(&[
        "mcp",
        "install",
        "--client",
        "windsurf",
        "--url",
        "--dry-run",
    ]);
    let content: Value = serde_json::from_str(doc["data"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["mcpServers"]["appduct"]["serverUrl"], url);
    let (_, doc) = sb.json(&["mcp", "install", "--client", "vscode", "--url", "--dry-run"]);
    let content: Value = serde_json::from_str(doc["data"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["servers"]["appduct"]["type"], "http");

    // Back to the command form: no URL key is left behind.
    let (code, _) = sb.json(&["mcp", "install", "--client", "cursor"]);
    assert_eq!(code, 0);
    let written: Value = serde_json::from_str(&fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(
        written["mcpServers"]["appduct"],
        json!({"command": exe(), "args": ["mcp"]})
    );

    // Human output names the URL, never the token.
    let ran = sb
        .run(&[
            "--no-color",
            "mcp",
            "install",
            "--client",
            "claude-code",
            "--url",
        ])
        .unwrap();
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(!ran.stdout.contains(&token), "{}", ran.stdout);
    let home = sb.home().display().to_string();
    insta::assert_snapshot!("mcp_install_url_human", ran.stdout.replace(&home, "<home>"));

    // Refusals: where a URL cannot be written.
    for (args, needle) in [
        (
            vec!["--client", "claude-desktop", "--url"],
            "configured with a command",
        ),
        (
            vec!["--client", "cursor", "--project", "--url"],
            "often committed",
        ),
    ] {
        let mut all = vec!["mcp", "install"];
        all.extend(args);
        let (code, doc) = sb.json(&all);
        assert_eq!(code, 64, "{doc}");
        assert!(
            doc["error"]["message"].as_str().unwrap().contains(needle),
            "{doc}"
        );
    }
    let off = crate::support::sandbox();
    let (code, doc) = off.json(&["mcp", "install", "--client", "cursor", "--url"]);
    assert_eq!(code, 64, "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("HTTP API is off"),
        "{doc}"
    );
}
