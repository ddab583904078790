//! Crate dependency rules of ARCHITECTURE.md#crates, read from `cargo metadata`, and the SEC-55 lockfile check
//! (SECURITY.md §4.15): no crate may pull in what its "MUST NOT depend on" cell forbids, the protocol
//! crate stays free of runtime, socket, TLS and filesystem crates all the way down, and
//! `Cargo.lock` holds no aws-lc or OpenSSL crate.
//!
//! The evaluators are pure functions over the metadata JSON and the lockfile text, so the tests
//! at the bottom prove on fake inputs that each rule actually catches a violation.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// One row of the ARCHITECTURE.md#crates table: `krate` MUST NOT depend directly on any of `forbidden` as a
/// dependency of one of `kinds` (cargo's `normal`, `build`, `dev`).
struct Rule {
    krate: &'static str,
    forbidden: &'static [&'static str],
    kinds: &'static [&'static str],
}

/// Every dependency kind: the ARCHITECTURE.md#crates table does not exempt test code.
const EVERY_KIND: &[&str] = &["normal", "build", "dev"];
/// What the crate ships with; its tests (dev dependencies) are exempt.
const NOT_DEV: &[&str] = &["normal", "build"];

/// The "MUST NOT depend on" column, applied to every dependency kind unless a row says
/// otherwise. "Any socket/TLS/FS crate" of the protocol row is checked by [`is_io_crate`],
/// directly and transitively.
const RULES: &[Rule] = &[
    Rule {
        krate: "appduct-protocol",
        forbidden: &["tokio", "rmcp", "clap"],
        kinds: EVERY_KIND,
    },
    // Project decision (issue #15): the client crate is what the frontends run in their own
    // process; the daemon depends on it for the shared local files, never the reverse.
    Rule {
        krate: "appduct-client",
        forbidden: &["appduct-daemon", "rmcp", "clap", "indicatif", "comfy-table"],
        kinds: EVERY_KIND,
    },
    Rule {
        krate: "appduct-daemon",
        forbidden: &["rmcp", "clap", "indicatif", "comfy-table"],
        kinds: EVERY_KIND,
    },
    Rule {
        krate: "appduct-mcp",
        forbidden: &["clap", "indicatif"],
        kinds: EVERY_KIND,
    },
    // Project decision (issue #15): the bridge reaches the daemon over the control socket
    // through appduct-client; only its tests may run a real daemon in process.
    Rule {
        krate: "appduct-mcp",
        forbidden: &["appduct-daemon"],
        kinds: NOT_DEV,
    },
    Rule {
        krate: "appduct",
        forbidden: &[],
        kinds: EVERY_KIND,
    },
    Rule {
        krate: "appduct-sdk",
        forbidden: &["appduct-daemon", "rmcp", "clap"],
        kinds: EVERY_KIND,
    },
    // "appduct-daemon internals (it drives the built binary)".
    Rule {
        krate: "appduct-e2e",
        forbidden: &["appduct-daemon"],
        kinds: EVERY_KIND,
    },
    // Project decision (not in ARCHITECTURE.md#crates): doctor's artifact readers are pure (the fuzz targets
    // reach them), with no runtime, frontend or daemon below them.
    Rule {
        krate: "appduct-doctor",
        forbidden: &["appduct-daemon", "tokio", "clap", "anyhow", "rmcp"],
        kinds: EVERY_KIND,
    },
    // Project decision (not in ARCHITECTURE.md#crates): the fuzz target bodies exercise the decoders and
    // validators only, never the daemon or a frontend's CLI stack.
    Rule {
        krate: "appduct-fuzz",
        forbidden: &["appduct-daemon", "clap", "anyhow", "tokio-rustls"],
        kinds: EVERY_KIND,
    },
];

/// The I/O-free crate (ARCHITECTURE.md#crates, ARCHITECTURE.md#the-protocol-crate).
const PROTOCOL: &str = "appduct-protocol";
/// The only crate that may use `anyhow` (ARCHITECTURE.md#crates).
const BINARY: &str = "appduct";
/// SEC-55: never in `Cargo.lock`.
const LOCK_FORBIDDEN: &[&str] = &["aws-lc-rs", "aws-lc-sys", "openssl-sys"];

/// Async runtimes, sockets, TLS and filesystem crates: what the protocol crate must never
/// reach, even through another crate.
fn is_io_crate(name: &str) -> bool {
    const EXACT: &[&str] = &[
        // Async runtimes and event loops.
        "tokio",
        "mio",
        "async-std",
        "async-io",
        "async-net",
        "async-fs",
        "smol",
        "polling",
        // Sockets, HTTP and WebSockets.
        "socket2",
        "hyper",
        "reqwest",
        "ureq",
        "tungstenite",
        "interprocess",
        // TLS.
        "rustls",
        "native-tls",
        "openssl",
        "schannel",
        "security-framework",
        "webpki",
        "webpki-roots",
        "aws-lc-rs",
        "aws-lc-sys",
        "boring",
        "boring-sys",
        "rcgen",
        // OS calls and the filesystem.
        "nix",
        "rustix",
        "tempfile",
        "walkdir",
        "notify",
        "fs2",
        "fs4",
        "fs-err",
        "fs_extra",
        "directories",
        "dirs",
        "dirs-sys",
        "memmap2",
        // Frontends.
        "rmcp",
        "clap",
    ];
    const PREFIXES: &[&str] = &["tokio-", "rustls-", "openssl-", "tokio_"];
    EXACT.contains(&name) || PREFIXES.iter().any(|prefix| name.starts_with(prefix))
}

/// Every violation of the ARCHITECTURE.md#crates rules found in `cargo metadata --format-version 1` output.
fn violations(metadata: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let packages: HashMap<&str, &Value> = metadata["packages"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|p| Some((p["id"].as_str()?, p)))
                .collect()
        })
        .unwrap_or_default();
    let members: HashMap<&str, &str> = metadata["workspace_members"]
        .as_array()
        .map(|ids| {
            ids.iter()
                .filter_map(Value::as_str)
                .filter_map(|id| Some((packages.get(id)?["name"].as_str()?, id)))
                .collect()
        })
        .unwrap_or_default();

    for rule in RULES {
        let Some(id) = members.get(rule.krate) else {
            // A renamed or missing crate would otherwise pass every rule silently.
            found.push(format!(
                "workspace member {} not found in metadata",
                rule.krate
            ));
            continue;
        };
        for dep in declared_dependencies(packages[id]) {
            let forbidden = rule.kinds.contains(&dep.kind)
                && (rule.forbidden.contains(&dep.name)
                    || (rule.krate == PROTOCOL && is_io_crate(dep.name)));
            if forbidden {
                found.push(format!(
                    "{} MUST NOT depend on {} (declared as a {} dependency)",
                    rule.krate, dep.name, dep.kind
                ));
            }
        }
    }

    // anyhow: only the binary; libraries use thiserror.
    for (name, id) in &members {
        if *name == BINARY {
            continue;
        }
        for dep in declared_dependencies(packages[id]) {
            if dep.name == "anyhow" && dep.kind != "dev" {
                found.push(format!("{name} MUST NOT depend on anyhow (binary only)"));
            }
        }
    }

    // jsonschema, if used, without default features.
    for (name, id) in &members {
        for dep in declared_dependencies(packages[id]) {
            if dep.name == "jsonschema" && dep.uses_default_features {
                found.push(format!(
                    "{name} declares jsonschema without default-features = false"
                ));
            }
        }
    }

    if let Some(id) = members.get(PROTOCOL) {
        found.extend(transitive_io_violations(metadata, &packages, id));
    }
    found
}

struct Declared<'a> {
    name: &'a str,
    kind: &'a str,
    uses_default_features: bool,
}

/// A package's dependencies as declared in its manifest (package names, so renames count).
fn declared_dependencies(package: &Value) -> Vec<Declared<'_>> {
    package["dependencies"]
        .as_array()
        .map(|deps| {
            deps.iter()
                .filter_map(|dep| {
                    Some(Declared {
                        name: dep["name"].as_str()?,
                        kind: dep["kind"].as_str().unwrap_or("normal"),
                        uses_default_features: dep["uses_default_features"]
                            .as_bool()
                            .unwrap_or(true),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// I/O crates reachable from the protocol crate through normal dependencies, each reported
/// with the chain that pulls it in.
fn transitive_io_violations(
    metadata: &Value,
    packages: &HashMap<&str, &Value>,
    root: &str,
) -> Vec<String> {
    let Some(nodes) = metadata["resolve"]["nodes"].as_array() else {
        return vec!["cargo metadata has no resolve graph".to_owned()];
    };
    let edges: HashMap<&str, Vec<&str>> = nodes
        .iter()
        .filter_map(|node| {
            let deps = node["deps"]
                .as_array()?
                .iter()
                .filter(|dep| is_normal_edge(dep))
                .filter_map(|dep| dep["pkg"].as_str())
                .collect();
            Some((node["id"].as_str()?, deps))
        })
        .collect();
    let name_of = |id: &str| -> String {
        packages
            .get(id)
            .and_then(|p| p["name"].as_str())
            .unwrap_or(id)
            .to_owned()
    };

    let mut found = Vec::new();
    let mut parent: HashMap<&str, &str> = HashMap::new();
    let mut seen: HashSet<&str> = HashSet::from([root]);
    let mut queue = VecDeque::from([root]);
    while let Some(id) = queue.pop_front() {
        for &dep in edges.get(id).map(Vec::as_slice).unwrap_or_default() {
            if !seen.insert(dep) {
                continue;
            }
            parent.insert(dep, id);
            if is_io_crate(&name_of(dep)) {
                let mut chain = vec![name_of(dep)];
                let mut at = dep;
                while let Some(&up) = parent.get(at) {
                    chain.push(name_of(up));
                    at = up;
                }
                chain.reverse();
                found.push(format!(
                    "{PROTOCOL} MUST NOT reach an I/O crate: {}",
                    chain.join(" -> ")
                ));
            }
            queue.push_back(dep);
        }
    }
    found
}

/// True when the edge is a normal (non-dev, non-build) dependency on some platform.
fn is_normal_edge(dep: &Value) -> bool {
    dep["dep_kinds"]
        .as_array()
        .is_some_and(|kinds| kinds.iter().any(|k| k["kind"].is_null()))
}

/// Names of the packages listed in a `Cargo.lock`.
fn lock_package_names(lock: &str) -> Vec<&str> {
    lock.lines()
        .filter_map(|line| line.trim().strip_prefix("name = "))
        .map(|quoted| quoted.trim().trim_matches('"'))
        .collect()
}

/// SEC-55: forbidden crates present in the lockfile.
fn lock_violations(lock: &str) -> Vec<String> {
    lock_package_names(lock)
        .into_iter()
        .filter(|name| LOCK_FORBIDDEN.contains(name))
        .map(|name| format!("Cargo.lock contains {name} (SEC-55)"))
        .collect()
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

fn cargo_metadata() -> Value {
    // Cargo sets CARGO for the tests it runs; fall back to the cargo that built this test.
    let cargo = std::env::var_os("CARGO")
        .or_else(|| option_env!("CARGO").map(Into::into))
        .unwrap_or_else(|| "cargo".into());
    let manifest = workspace_root().join("Cargo.toml");
    let output = Command::new(&cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--manifest-path",
        ])
        .arg(&manifest)
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
fn workspace_follows_the_crate_dependency_rules() {
    let found = violations(&cargo_metadata());
    assert!(
        found.is_empty(),
        "ARCHITECTURE.md#crates dependency rules violated:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn cargo_lock_has_no_aws_lc_or_openssl() {
    let path = workspace_root().join("Cargo.lock");
    let lock = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert!(
        lock_package_names(&lock).contains(&"appduct-protocol"),
        "{} does not look like this workspace's lockfile",
        path.display()
    );
    let found = lock_violations(&lock);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

// --- The evaluators catch violations (fake inputs) ---

mod fake {
    use serde_json::{Value, json};

    /// One fake package: name, declared deps as (name, kind, uses_default_features).
    pub struct Pkg {
        pub name: &'static str,
        pub deps: Vec<(&'static str, Option<&'static str>, bool)>,
    }

    pub fn pkg(name: &'static str, deps: &[(&'static str, Option<&'static str>)]) -> Pkg {
        Pkg {
            name,
            deps: deps.iter().map(|&(n, k)| (n, k, true)).collect(),
        }
    }

    fn id(name: &str) -> String {
        format!("fake#{name}@0.1.0")
    }

    /// Metadata where every crate of the table is a workspace member plus `extra` packages;
    /// resolve edges follow the declared dependencies.
    pub fn metadata(members: Vec<Pkg>, extra: Vec<Pkg>) -> Value {
        let member_ids: Vec<String> = members.iter().map(|p| id(p.name)).collect();
        let all: Vec<&Pkg> = members.iter().chain(extra.iter()).collect();
        let packages: Vec<Value> = all
            .iter()
            .map(|p| {
                json!({
                    "name": p.name,
                    "id": id(p.name),
                    "dependencies": p.deps.iter().map(|(n, k, default)| json!({
                        "name": n, "kind": k, "uses_default_features": default
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let nodes: Vec<Value> = all
            .iter()
            .map(|p| {
                json!({
                    "id": id(p.name),
                    "deps": p.deps.iter().map(|(n, k, _)| json!({
                        "name": n.replace('-', "_"),
                        "pkg": id(n),
                        "dep_kinds": [{"kind": k, "target": null}],
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "packages": packages,
            "workspace_members": member_ids,
            "resolve": {"nodes": nodes, "root": null},
        })
    }

    /// The workspace as the table allows it.
    pub fn clean_members() -> Vec<Pkg> {
        vec![
            pkg(
                "appduct-protocol",
                &[
                    ("serde_json", None),
                    ("x509-parser", None),
                    ("proptest", Some("dev")),
                ],
            ),
            pkg(
                "appduct-daemon",
                &[
                    ("appduct-protocol", None),
                    ("appduct-client", None),
                    ("tokio", None),
                    ("rustls", None),
                ],
            ),
            pkg(
                "appduct-client",
                &[("appduct-protocol", None), ("tokio", None)],
            ),
            pkg(
                "appduct-mcp",
                &[
                    ("appduct-protocol", None),
                    ("appduct-client", None),
                    ("appduct-daemon", Some("dev")),
                ],
            ),
            pkg(
                "appduct",
                &[("clap", None), ("anyhow", None), ("appduct-daemon", None)],
            ),
            pkg(
                "appduct-sdk",
                &[("appduct-protocol", None), ("tokio", None)],
            ),
            pkg(
                "appduct-e2e",
                &[("appduct-sdk", None), ("tempfile", Some("dev"))],
            ),
            pkg(
                "appduct-doctor",
                &[("thiserror", None), ("miniz_oxide", None)],
            ),
            pkg(
                "appduct-fuzz",
                &[
                    ("appduct-protocol", None),
                    ("appduct-mcp", None),
                    ("appduct-doctor", None),
                ],
            ),
        ]
    }

    pub fn clean_extra() -> Vec<Pkg> {
        vec![
            pkg("serde_json", &[]),
            pkg("x509-parser", &[("nom", None)]),
            pkg("nom", &[]),
            pkg("proptest", &[("tempfile", None)]),
            pkg("tempfile", &[]),
            pkg("tokio", &[("mio", None)]),
            pkg("mio", &[]),
            pkg("rustls", &[]),
            pkg("clap", &[]),
            pkg("anyhow", &[]),
        ]
    }

    /// The clean workspace with `dep` added to `krate`'s declared dependencies.
    pub fn with_dep(krate: &str, dep: &'static str, kind: Option<&'static str>) -> Value {
        let mut members = clean_members();
        for member in &mut members {
            if member.name == krate {
                member.deps.push((dep, kind, true));
            }
        }
        let mut extra = clean_extra();
        if !extra.iter().any(|p| p.name == dep) && !members.iter().any(|p| p.name == dep) {
            extra.push(pkg(dep, &[]));
        }
        metadata(members, extra)
    }
}

#[test]
fn clean_fake_workspace_has_no_violations() {
    let meta = fake::metadata(fake::clean_members(), fake::clean_extra());
    assert_eq!(violations(&meta), Vec::<String>::new());
}

#[test]
fn the_client_crate_may_not_depend_on_the_daemon_even_in_tests() {
    let found = violations(&fake::with_dep(
        "appduct-client",
        "appduct-daemon",
        Some("dev"),
    ));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("appduct-client"), "{found:?}");
    assert!(found[0].contains("appduct-daemon"), "{found:?}");
}

#[test]
fn every_forbidden_cell_is_caught_as_a_direct_dependency() {
    for rule in RULES {
        for &dep in rule.forbidden {
            for kind in [None, Some("dev"), Some("build")] {
                if !rule.kinds.contains(&kind.unwrap_or("normal")) {
                    continue;
                }
                let found = violations(&fake::with_dep(rule.krate, dep, kind));
                assert!(
                    found
                        .iter()
                        .any(|v| v.starts_with(&format!("{} MUST NOT depend on {dep}", rule.krate))),
                    "{} -> {dep} ({kind:?}) not caught: {found:?}",
                    rule.krate
                );
            }
        }
    }
}

#[test]
fn the_bridge_may_use_the_daemon_in_its_tests_only() {
    // The clean fixture already has appduct-mcp dev-depending on appduct-daemon.
    assert!(violations(&fake::metadata(fake::clean_members(), fake::clean_extra())).is_empty());
    for (kind, label) in [(None, "normal"), (Some("build"), "build")] {
        let found = violations(&fake::with_dep("appduct-mcp", "appduct-daemon", kind));
        assert_eq!(
            found,
            vec![format!(
                "appduct-mcp MUST NOT depend on appduct-daemon (declared as a {label} dependency)"
            )]
        );
    }
    // A row limited to some kinds still applies to those kinds only: clap stays forbidden in
    // the bridge's tests too.
    assert_eq!(
        violations(&fake::with_dep("appduct-mcp", "clap", Some("dev"))),
        vec!["appduct-mcp MUST NOT depend on clap (declared as a dev dependency)".to_owned()]
    );
}

#[test]
fn protocol_may_not_declare_socket_tls_or_fs_crates() {
    for dep in [
        "socket2",
        "rustls",
        "tokio-rustls",
        "tempfile",
        "rustix",
        "mio",
    ] {
        let found = violations(&fake::with_dep(PROTOCOL, dep, None));
        assert!(
            found
                .iter()
                .any(|v| v.starts_with(&format!("appduct-protocol MUST NOT depend on {dep}"))),
            "{dep} not caught: {found:?}"
        );
    }
    // The same crates are fine elsewhere.
    assert!(violations(&fake::with_dep("appduct-sdk", "socket2", None)).is_empty());
}

#[test]
fn protocol_may_not_reach_io_crates_transitively() {
    let mut extra = fake::clean_extra();
    // x509-parser -> nom -> some-helper -> tokio -> mio
    extra.retain(|p| p.name != "nom");
    extra.push(fake::pkg("nom", &[("some-helper", None)]));
    extra.push(fake::pkg("some-helper", &[("tokio", None)]));
    let found = violations(&fake::metadata(fake::clean_members(), extra));
    assert!(
        found.iter().any(|v| v
            == "appduct-protocol MUST NOT reach an I/O crate: appduct-protocol -> x509-parser -> nom -> some-helper -> tokio"),
        "{found:?}"
    );
    assert!(
        found.iter().any(|v| v.ends_with("-> tokio -> mio")),
        "{found:?}"
    );
}

#[test]
fn dev_and_build_only_paths_do_not_count_transitively() {
    // proptest -> tempfile is a dev-only path of the protocol crate: allowed.
    let meta = fake::metadata(fake::clean_members(), fake::clean_extra());
    assert!(
        transitive_io_violations(&meta, &packages_by_id(&meta), "fake#appduct-protocol@0.1.0")
            .is_empty()
    );
    // The same crate behind a build dependency of a normal dependency is also not "normal".
    let mut extra = fake::clean_extra();
    extra.retain(|p| p.name != "nom");
    extra.push(fake::pkg("nom", &[("tokio", Some("build"))]));
    let meta = fake::metadata(fake::clean_members(), extra);
    assert!(violations(&meta).is_empty(), "{:?}", violations(&meta));
}

fn packages_by_id(meta: &Value) -> HashMap<&str, &Value> {
    meta["packages"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|p| Some((p["id"].as_str()?, p)))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn anyhow_is_for_the_binary_only() {
    let found = violations(&fake::with_dep("appduct-daemon", "anyhow", None));
    assert_eq!(
        found,
        vec!["appduct-daemon MUST NOT depend on anyhow (binary only)".to_owned()]
    );
    assert!(violations(&fake::with_dep("appduct-e2e", "anyhow", Some("dev"))).is_empty());
}

#[test]
fn jsonschema_must_drop_default_features() {
    let mut members = fake::clean_members();
    members[1].deps.push(("jsonschema", None, true));
    let mut extra = fake::clean_extra();
    extra.push(fake::pkg("jsonschema", &[]));
    let found = violations(&fake::metadata(members, extra));
    assert_eq!(
        found,
        vec!["appduct-daemon declares jsonschema without default-features = false".to_owned()]
    );

    let mut members = fake::clean_members();
    members[1].deps.push(("jsonschema", None, false));
    let mut extra = fake::clean_extra();
    extra.push(fake::pkg("jsonschema", &[]));
    assert!(violations(&fake::metadata(members, extra)).is_empty());
}

#[test]
fn a_missing_workspace_member_is_reported() {
    let mut members = fake::clean_members();
    members.retain(|p| p.name != "appduct-sdk");
    let found = violations(&fake::metadata(members, fake::clean_extra()));
    assert_eq!(
        found,
        vec!["workspace member appduct-sdk not found in metadata".to_owned()]
    );
    assert!(!violations(&Value::Null).is_empty());
}

#[test]
fn lockfile_check_finds_forbidden_crates() {
    let clean = r#"
version = 4

[[package]]
name = "appduct-protocol"
version = "0.1.0"

[[package]]
name = "ring"
version = "0.17.14"
"#;
    assert_eq!(lock_package_names(clean), vec!["appduct-protocol", "ring"]);
    assert!(lock_violations(clean).is_empty());

    for bad in LOCK_FORBIDDEN {
        let lock = format!("{clean}\n[[package]]\nname = \"{bad}\"\nversion = \"1.0.0\"\n");
        assert_eq!(
            lock_violations(&lock),
            vec![format!("Cargo.lock contains {bad} (SEC-55)")]
        );
    }
    // Only exact package names count.
    let near = format!("{clean}\n[[package]]\nname = \"aws-lc-rs-shim\"\nversion = \"1.0.0\"\n");
    assert!(lock_violations(&near).is_empty());
}
