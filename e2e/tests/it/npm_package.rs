//! The npm package (ARCHITECTURE.md "Packaging"): `scripts/npm-pack` packs the launcher `appduct`
//! and `@appduct/cli-linux-x64` around the binary cargo built for these tests (a debug build;
//! the release workflow packs release builds), npm installs both tarballs offline into an empty
//! project, and `npx appduct` runs the binary through the launcher: `--version` prints the
//! workspace version and an MCP `initialize` through `npx appduct mcp` succeeds. Without npm, or
//! on a machine other than Linux x64, the test says on stderr why it skips.
//!
//! The templates of `npm/` are checked without npm: every platform package the launcher lists
//! exists, and its `os` / `cpu` / `libc` fields match the name the launcher derives.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use appduct_e2e::OrFail as _;
use appduct_e2e::harness::Sandbox;
use appduct_e2e::mcp::Mcp;
use serde_json::Value;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Printed straight to the process's stderr, past the test harness's capture: a skip is never
/// silent.
fn skip(reason: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "skipping npm_package: {reason} (the npm package is not tested on this machine)"
    );
}

/// `program args…` in `dir` with a private HOME and npm cache, `APPDUCT_*` and inherited
/// `npm_*` settings removed, npm kept offline and quiet.
fn npm_tool(program: &str, sb: &Sandbox, dir: &Path) -> Command {
    let mut cmd = Command::new(program);
    for (key, _) in std::env::vars_os() {
        let key_text = key.to_string_lossy();
        if key_text.starts_with("APPDUCT_") || key_text.to_ascii_lowercase().starts_with("npm_") {
            cmd.env_remove(&key);
        }
    }
    cmd.current_dir(dir)
        .env("HOME", sb.home())
        .env("npm_config_cache", sb.root().join("npm-cache"))
        .env("npm_config_offline", "true")
        .env("npm_config_update_notifier", "false")
        .env("npm_config_audit", "false")
        .env("npm_config_fund", "false");
    cmd
}

#[track_caller]
fn succeeded(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn npx_appduct_installed_offline_from_the_packed_tarballs_runs_the_binary() {
    if !(cfg!(target_os = "linux") && cfg!(target_arch = "x86_64")) {
        skip("this machine is not Linux x64, the one platform package built here");
        return;
    }
    if Command::new("npm").arg("--version").output().is_err() {
        skip("npm is not installed");
        return;
    }
    let sb = Sandbox::new().or_fail();

    // Pack: the script stamps the workspace version on both packages.
    let tarballs = sb.root().join("tarballs");
    let out = npm_tool("bash", &sb, &repo_root())
        .arg(repo_root().join("scripts/npm-pack"))
        .arg("--binary")
        .arg(sb.bin())
        .args(["--platform", "linux-x64", "--out"])
        .arg(&tarballs)
        .output()
        .or_fail();
    let packed: Vec<PathBuf> = succeeded("scripts/npm-pack", &out)
        .lines()
        .map(PathBuf::from)
        .collect();
    assert_eq!(
        packed,
        [
            tarballs.join(format!("appduct-{VERSION}.tgz")),
            tarballs.join(format!("appduct-cli-linux-x64-{VERSION}.tgz")),
        ]
    );

    // Install offline from the tarballs alone; npm skips the other platforms' optional
    // packages (wrong os/cpu, and not in the empty cache).
    let project = sb.root().join("project");
    std::fs::create_dir_all(&project).or_fail();
    std::fs::write(project.join("package.json"), r#"{"private": true}"#).or_fail();
    let out = npm_tool("npm", &sb, &project)
        .args(["install", "--offline", "--no-audit", "--no-fund"])
        .args(&packed)
        .output()
        .or_fail();
    succeeded("npm install of the tarballs", &out);
    let modules = project.join("node_modules");
    let launcher: Value =
        serde_json::from_slice(&std::fs::read(modules.join("appduct/package.json")).or_fail())
            .or_fail();
    assert_eq!(launcher["version"], VERSION);
    assert_eq!(
        launcher["optionalDependencies"]["@appduct/cli-linux-x64"],
        VERSION
    );
    let platform = modules.join("@appduct/cli-linux-x64");
    for file in ["LICENSE-MIT", "LICENSE-APACHE", "bin/appduct"] {
        assert!(platform.join(file).is_file(), "{file} was not shipped");
    }
    for file in ["LICENSE-MIT", "LICENSE-APACHE", "README.md"] {
        assert!(
            modules.join("appduct").join(file).is_file(),
            "{file} was not shipped"
        );
    }

    let out = npm_tool("npx", &sb, &project)
        .args(["--offline", "appduct", "--version"])
        .output()
        .or_fail();
    assert_eq!(
        succeeded("npx appduct --version", &out).trim(),
        format!("appduct {VERSION}")
    );

    // An MCP session through the launcher: `npx` → launcher → binary, stdio passed through.
    let mut cmd = npm_tool("npx", &sb, &project);
    cmd.args(["--offline", "appduct", "mcp"])
        .env("APPDUCT_STATE_DIR", sb.state_dir());
    let mut mcp = Mcp::spawn_command(cmd).or_fail();
    let init = mcp.initialize("2025-11-25").or_fail();
    assert_eq!(init["protocolVersion"], "2025-11-25", "{init}");
    assert_eq!(init["serverInfo"]["name"], "appduct", "{init}");
    assert_eq!(init["serverInfo"]["version"], VERSION, "{init}");
    let status = mcp
        .call_tool("appduct_status", serde_json::json!({}))
        .or_fail();
    assert_ne!(status["isError"], true, "{status}");
    assert_eq!(
        status["structuredContent"]["daemon"]["running"], true,
        "{status}"
    );
    assert_eq!(
        status["structuredContent"]["daemon"]["version"], VERSION,
        "{status}"
    );
    // EOF ends the binary, the launcher and npx with exit 0, stdout holding only MCP messages.
    mcp.finish().or_fail();
}

/// What the launcher (`npm/appduct/bin/appduct.js`) derives for a platform package name:
/// `@appduct/cli-<process.platform>-<process.arch>[-musl]`.
fn expected_fields(name: &str) -> Option<(String, String, Option<String>)> {
    let rest = name.strip_prefix("@appduct/cli-")?;
    let (rest, libc) = match rest.strip_suffix("-musl") {
        Some(rest) => (rest, Some("musl")),
        None => (rest, None),
    };
    let (os, cpu) = rest.split_once('-')?;
    let libc = match (os, libc) {
        ("linux", None) => Some("glibc".to_owned()),
        (_, libc) => libc.map(str::to_owned),
    };
    Some((os.to_owned(), cpu.to_owned(), libc))
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).or_fail()).or_fail()
}

#[test]
fn every_platform_package_of_the_launcher_has_a_template_whose_fields_match_its_name() {
    let npm = repo_root().join("npm");
    let launcher = read_json(&npm.join("appduct/package.json"));
    assert_eq!(launcher["bin"]["appduct"], "bin/appduct.js");
    assert!(
        launcher.get("scripts").is_none(),
        "no install scripts: {launcher}"
    );
    let platforms = launcher["optionalDependencies"]
        .as_object()
        .or_fail_with("optionalDependencies");
    assert!(platforms.contains_key("@appduct/cli-linux-x64"));
    let mut templates: Vec<String> = std::fs::read_dir(&npm)
        .or_fail()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("cli-"))
        .collect();
    templates.sort();
    let mut listed: Vec<String> = platforms
        .keys()
        .map(|k| k.trim_start_matches("@appduct/").to_owned())
        .collect();
    listed.sort();
    // A template may wait for its platform's first release build; the launcher lists it then.
    let waiting: Vec<&String> = templates.iter().filter(|t| !listed.contains(t)).collect();
    assert_eq!(waiting, ["cli-win32-x64"], "unlisted templates");
    for name in &listed {
        assert!(
            templates.contains(name),
            "the launcher lists {name}, which has no template"
        );
    }
    for dir_name in &templates {
        let name = format!("@appduct/{dir_name}");
        let name = &name;
        let (os, cpu, libc) = expected_fields(name).or_fail_with(name);
        let dir = npm.join(dir_name);
        let pkg = read_json(&dir.join("package.json"));
        assert_eq!(pkg["name"], name.as_str());
        assert_eq!(pkg["os"], serde_json::json!([os]), "{name}");
        assert_eq!(pkg["cpu"], serde_json::json!([cpu]), "{name}");
        assert_eq!(
            pkg.get("libc").cloned(),
            libc.map(|l| serde_json::json!([l])),
            "{name}"
        );
        let exe = if os == "win32" {
            "bin/appduct.exe"
        } else {
            "bin/appduct"
        };
        assert!(
            pkg["files"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == exe)),
            "{name} does not ship {exe}"
        );
        assert_eq!(pkg["license"], launcher["license"], "{name}");
    }
}

#[test]
fn the_template_check_derives_the_launchers_names() {
    let own = |s: &str| s.to_owned();
    assert_eq!(
        expected_fields("@appduct/cli-linux-x64"),
        Some((own("linux"), own("x64"), Some(own("glibc"))))
    );
    assert_eq!(
        expected_fields("@appduct/cli-linux-arm64-musl"),
        Some((own("linux"), own("arm64"), Some(own("musl"))))
    );
    assert_eq!(
        expected_fields("@appduct/cli-darwin-arm64"),
        Some((own("darwin"), own("arm64"), None))
    );
    assert_eq!(expected_fields("appduct"), None);
}

trait OrFailWith<T> {
    fn or_fail_with(self, what: &str) -> T;
}

impl<T> OrFailWith<T> for Option<T> {
    #[track_caller]
    fn or_fail_with(self, what: &str) -> T {
        self.unwrap_or_else(|| panic!("missing: {what}"))
    }
}
