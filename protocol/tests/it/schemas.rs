//! `docs/schemas/` holds exactly what `appduct_protocol::schema` renders (issue #25), so the
//! committed schemas cannot drift from the code. `UPDATE_SCHEMAS=1` rewrites them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use appduct_protocol::schema;

fn schemas_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/schemas"))
}

/// Every `.json` file under `dir`, relative to it.
fn json_files(dir: &Path, base: &Path, out: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            json_files(&path, base, out);
        } else if path.extension().is_some_and(|x| x == "json") {
            let rel = path.strip_prefix(base).unwrap_or(&path);
            out.insert(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

#[test]
fn committed_schemas_match_the_protocol_crate() {
    let dir = schemas_dir();
    let rendered = schema::all();
    let update = std::env::var_os("UPDATE_SCHEMAS").is_some_and(|v| v == "1");
    let mut on_disk = BTreeSet::new();
    json_files(&dir, &dir, &mut on_disk);
    let mut problems = Vec::new();
    let mut wanted = BTreeSet::new();
    for (rel, value) in &rendered {
        assert!(wanted.insert(rel.clone()), "{rel} is rendered twice");
        let text = schema::render(value);
        let path = dir.join(rel);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() == Some(text.as_str()) {
            continue;
        }
        if update {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{rel}: {e}"));
            }
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("{rel}: {e}"));
        } else if current.is_none() {
            problems.push(format!("docs/schemas/{rel} is missing"));
        } else {
            problems.push(format!("docs/schemas/{rel} differs from the code"));
        }
    }
    for stale in on_disk.difference(&wanted) {
        if update {
            std::fs::remove_file(dir.join(stale)).unwrap_or_else(|e| panic!("{stale}: {e}"));
        } else {
            problems.push(format!(
                "docs/schemas/{stale} is not rendered by the code (stale)"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the committed schemas drifted from appduct_protocol::schema:\n  {}\n\
         Regenerate them with\n  UPDATE_SCHEMAS=1 cargo test -p appduct-protocol --test it schemas::\n\
         and commit docs/schemas/.",
        problems.join("\n  ")
    );
}

#[test]
fn every_schema_is_a_valid_draft_2020_12_schema() {
    for (rel, value) in schema::all() {
        assert_eq!(value["$schema"], schema::DRAFT, "{rel}");
        assert!(
            jsonschema::draft202012::meta::is_valid(&value),
            "{rel} is not a valid 2020-12 schema"
        );
        jsonschema::draft202012::new(&value).unwrap_or_else(|e| panic!("{rel}: {e}"));
    }
}
