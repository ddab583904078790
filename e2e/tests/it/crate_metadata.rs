//! What `cargo publish` needs of every publishable crate (ARCHITECTURE.md "Packaging"), read
//! from `cargo metadata`: description, the licence expression `MIT OR Apache-2.0` with both
//! licence texts in the crate directory (they ship in the `.crate`), repository, a readme that
//! exists, keywords, categories and `rust-version`; and every path dependency a published crate
//! builds with carries a version and names a publishable crate. Crates with `publish = false`
//! (tests, fuzz bodies) are exempt. `scripts/test` then runs `cargo package` over the
//! publishable crates, which builds each one from its packaged sources.
//!
//! The checker is a pure function of one package's metadata, so the tests at the bottom prove
//! it catches each omission on fake packages.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

const LICENSE: &str = "MIT OR Apache-2.0";
const LICENSE_FILES: [&str; 2] = ["LICENSE-MIT", "LICENSE-APACHE"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether `cargo publish` may publish the package (`publish = false` reads as `[]`).
fn publishable(pkg: &Value) -> bool {
    pkg["publish"] != json!([])
}

/// What keeps one package from being published with complete metadata. `publishable` holds
/// the names of the workspace's publishable crates; `root` is the workspace root, whose
/// licence files every crate must ship unchanged.
fn problems(pkg: &Value, publishable: &HashSet<String>, root: &Path) -> Vec<String> {
    let name = pkg["name"].as_str().unwrap_or("?");
    let mut found = Vec::new();
    let text = |key: &str| pkg[key].as_str().filter(|s| !s.trim().is_empty());
    for key in ["description", "repository", "rust_version"] {
        if text(key).is_none() {
            found.push(format!("{name}: no {key}"));
        }
    }
    if text("license") != Some(LICENSE) {
        found.push(format!(
            "{name}: license is {}, not {LICENSE}",
            pkg["license"]
        ));
    }
    for key in ["keywords", "categories"] {
        if pkg[key].as_array().is_none_or(Vec::is_empty) {
            found.push(format!("{name}: no {key}"));
        }
    }
    if pkg["keywords"].as_array().is_some_and(|k| k.len() > 5) {
        found.push(format!(
            "{name}: more than the 5 keywords crates.io accepts"
        ));
    }
    let dir = Path::new(pkg["manifest_path"].as_str().unwrap_or_default())
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    match text("readme") {
        Some(readme) if dir.join(readme).is_file() => {}
        Some(readme) => found.push(format!("{name}: readme {readme} does not exist")),
        None => found.push(format!("{name}: no readme")),
    }
    for file in LICENSE_FILES {
        let shipped = std::fs::read(dir.join(file)).ok();
        if shipped.is_none() || shipped != std::fs::read(root.join(file)).ok() {
            found.push(format!(
                "{name}: {file} is missing or differs from the root's"
            ));
        }
    }
    for dep in pkg["dependencies"].as_array().into_iter().flatten() {
        let dep_name = dep["name"].as_str().unwrap_or("?");
        // A path-only dev-dependency is dropped from the published manifest; any other kind
        // is resolved from crates.io once published.
        if dep["path"].is_null() || (dep["kind"] == "dev" && dep["req"] == "*") {
            continue;
        }
        if dep["req"] == "*" {
            found.push(format!("{name}: path dependency {dep_name} has no version"));
        }
        if !publishable.contains(dep_name) {
            found.push(format!(
                "{name}: depends on {dep_name}, which is not published"
            ));
        }
    }
    found
}

fn cargo_metadata() -> Value {
    let cargo = std::env::var_os("CARGO")
        .or_else(|| option_env!("CARGO").map(Into::into))
        .unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--locked",
            "--manifest-path",
        ])
        .arg(workspace_root().join("Cargo.toml"))
        .output()
        .unwrap_or_else(|e| panic!("running {cargo:?} metadata: {e}"));
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("cargo metadata printed invalid JSON: {e}"))
}

#[test]
fn every_publishable_crate_carries_the_metadata_and_licences_crates_io_needs() {
    let metadata = cargo_metadata();
    let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
    let names: HashSet<String> = packages
        .iter()
        .filter(|p| publishable(p))
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    // `cargo install --locked appduct` needs the binary crate and everything below it.
    for needed in [
        "appduct",
        "appduct-protocol",
        "appduct-client",
        "appduct-daemon",
        "appduct-mcp",
        "appduct-doctor",
        "appduct-sdk",
    ] {
        assert!(names.contains(needed), "{needed} is not publishable");
    }
    let root = workspace_root();
    let found: Vec<String> = packages
        .iter()
        .filter(|p| publishable(p))
        .flat_map(|p| problems(p, &names, &root))
        .collect();
    assert!(
        found.is_empty(),
        "not publishable:\n  {}",
        found.join("\n  ")
    );
}

fn complete(dir: &Path) -> Value {
    json!({
        "name": "appduct-fake",
        "publish": null,
        "description": "A fake crate",
        "license": LICENSE,
        "repository": "https://example.invalid/appduct",
        "rust_version": "1.89",
        "readme": "README.md",
        "keywords": ["mcp"],
        "categories": ["development-tools"],
        "manifest_path": dir.join("Cargo.toml"),
        "dependencies": [
            {"name": "appduct-protocol", "req": "^0.1.0", "kind": null, "path": "/p"},
            {"name": "appduct-e2e", "req": "*", "kind": "dev", "path": "/e"},
            {"name": "serde", "req": "^1", "kind": null},
        ],
    })
}

#[test]
fn the_checker_catches_each_omission() {
    let root = workspace_root();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let write = |file: &str, bytes: &[u8]| {
        std::fs::write(dir.path().join(file), bytes).unwrap_or_else(|e| panic!("{e}"));
    };
    write("README.md", b"# fake\n");
    for file in LICENSE_FILES {
        write(
            file,
            &std::fs::read(root.join(file)).unwrap_or_else(|e| panic!("{e}")),
        );
    }
    let published: HashSet<String> = HashSet::from(["appduct-protocol".to_owned()]);
    assert_eq!(
        problems(&complete(dir.path()), &published, &root),
        Vec::<String>::new()
    );

    let broken = |edit: &dyn Fn(&mut Value), expected: &str| {
        let mut pkg = complete(dir.path());
        edit(&mut pkg);
        let found = problems(&pkg, &published, &root);
        assert!(
            found.iter().any(|f| f.contains(expected)),
            "{expected:?} not reported: {found:?}"
        );
    };
    for key in ["description", "repository", "rust_version", "readme"] {
        broken(&|p| p[key] = Value::Null, &format!("no {key}"));
    }
    broken(&|p| p["license"] = json!("MIT"), "license is");
    broken(&|p| p["keywords"] = json!([]), "no keywords");
    broken(&|p| p["categories"] = Value::Null, "no categories");
    broken(
        &|p| p["keywords"] = json!(["a", "b", "c", "d", "e", "f"]),
        "5 keywords",
    );
    broken(&|p| p["readme"] = json!("GONE.md"), "does not exist");
    broken(
        &|p| p["dependencies"][0]["req"] = json!("*"),
        "appduct-protocol has no version",
    );
    broken(
        &|p| p["dependencies"][1]["kind"] = Value::Null,
        "appduct-e2e, which is not published",
    );
    write("LICENSE-MIT", b"changed");
    broken(&|_| {}, "LICENSE-MIT is missing or differs");
    std::fs::remove_file(dir.path().join("LICENSE-APACHE")).unwrap_or_else(|e| panic!("{e}"));
    broken(&|_| {}, "LICENSE-APACHE is missing or differs");
}
