//! docs/state.md against the `config.json` loader (§S2.2, §S2.3): every key the loader accepts
//! is a row of the §S2.2 table and every row is a key the loader validates, so the reference
//! cannot drift from the code; the §S2.3 example loads without a warning.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use appduct_client::config::{Config, ConfigError, KEYS};
use serde_json::{Value, json};

fn state_md() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/state.md");
    std::fs::read_to_string(path).expect("docs/state.md")
}

/// The text of the section whose heading starts with `number` (`S2.2`), up to the next heading.
fn section(doc: &str, number: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in doc.lines() {
        if line.starts_with('#') {
            let title = line.trim_start_matches('#').trim_start();
            inside = title.starts_with(&format!("{number} "))
                || title.starts_with(&format!("{number}."));
            continue;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(!out.is_empty(), "docs/state.md has no section {number}");
    out
}

/// The first-column keys of the table in §S2.2: `` | `wssPort` | … ``.
fn documented_keys(doc: &str) -> Vec<String> {
    section(doc, "S2.2")
        .lines()
        .filter_map(|line| {
            let cell = line.strip_prefix("| `")?;
            Some(cell.split('`').next()?.to_owned())
        })
        .collect()
}

#[test]
fn every_config_key_is_documented_and_every_documented_key_is_loaded() {
    let documented = documented_keys(&state_md());
    assert_eq!(
        documented,
        KEYS.to_vec(),
        "docs/state.md §S2.2 must list exactly the loader's keys, in order"
    );
    // Each key is the loader's own: `null` is refused naming it (never an unknown-key warning).
    for key in KEYS {
        let mut value = serde_json::Map::new();
        value.insert(key.to_owned(), Value::Null);
        match Config::from_value(&Value::Object(value), Path::new("/st")) {
            Err(ConfigError::InvalidValue { key: named, .. }) => assert_eq!(named, key),
            other => panic!("{key}: null must be refused naming the key, got {other:?}"),
        }
    }
    // A key outside the list is only a warning.
    let loaded = Config::from_value(&json!({"wsPort": 1}), Path::new("/st")).unwrap();
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
}

#[test]
fn the_documented_example_loads_without_warnings() {
    let example = section(&state_md(), "S2.3");
    let json = example
        .split("```json")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a ```json block in §S2.3");
    let loaded = Config::from_slice(json.as_bytes(), Path::new("/st")).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.config.wss_port, 0);
    assert_eq!(loaded.config.grace_seconds, 120);
}
