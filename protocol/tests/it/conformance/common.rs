//! Locating and loading the vectors. Panics (test failures) rather than skipping when anything
//! is missing.

use std::path::PathBuf;

use serde_json::Value;

/// The vector directory: `APPDUCT_CONFORMANCE_DIR` when set, else the in-repository copy
/// `protocol/tests/vectors/appduct-v2` (see its README).
pub fn dir() -> PathBuf {
    match std::env::var_os("APPDUCT_CONFORMANCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/appduct-v2"
        )),
    }
}

/// Names of the `*.json` files in the vector directory, sorted.
pub fn vector_files() -> Vec<String> {
    let dir = dir();
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
        panic!(
            "the conformance vectors must exist at {} ({e}); they are never optional",
            dir.display()
        )
    });
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

/// Parses one vector file.
pub fn load(file: &str) -> Value {
    let path = dir().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read vector file {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("vector file {} is not JSON: {e}", path.display()))
}

/// The entries of a file whose top level is an array; panics on an empty array.
pub fn load_array(file: &str) -> Vec<Value> {
    match load(file) {
        Value::Array(items) if !items.is_empty() => items,
        other => panic!("{file}: expected a non-empty array, got {other}"),
    }
}

/// A case's `name`, for failure messages.
pub fn name_of(case: &Value) -> String {
    case.get("name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>")
        .to_owned()
}

/// Collects per-case failures and reports them all at once, each by name, with the count of
/// cases checked (so the test output states how many vectors ran).
#[derive(Debug, Default)]
pub struct Report {
    file: &'static str,
    checked: usize,
    failures: Vec<String>,
}

impl Report {
    pub fn new(file: &'static str) -> Self {
        Self {
            file,
            ..Self::default()
        }
    }

    pub fn check(&mut self, name: &str, ok: bool, detail: impl FnOnce() -> String) {
        self.checked += 1;
        if !ok {
            self.failures.push(format!("{name}: {}", detail()));
        }
    }

    pub fn finish(self) {
        eprintln!(
            "conformance {}: {} vectors checked",
            self.file, self.checked
        );
        println!(
            "conformance {}: {} vectors checked",
            self.file, self.checked
        );
        assert!(self.checked > 0, "{}: no vectors checked", self.file);
        assert!(
            self.failures.is_empty(),
            "{}: {} of {} vectors failed:\n{}",
            self.file,
            self.failures.len(),
            self.checked,
            self.failures.join("\n")
        );
    }
}
