//! The repository explains itself: every section a comment or document cites (`§D7.3`, `§L7.3`,
//! …) is a heading of one of our references, no number heads two sections, and nothing points
//! at documents outside the repository.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The references and the letter their section numbers carry.
const REFERENCES: [(char, &str); 7] = [
    ('D', "docs/protocol/device.md"),
    ('C', "docs/protocol/control.md"),
    ('L', "docs/cli.md"),
    ('M', "docs/mcp.md"),
    ('T', "docs/sdk-ts.md"),
    ('S', "docs/state.md"),
    ('H', "docs/http.md"),
];

/// Directories that hold no text of ours.
const SKIPPED_DIRS: [&str; 6] = [
    ".git",
    "target",
    "node_modules",
    "dist",
    // Copied verbatim from outside; its README says where from.
    "vectors",
    "corpus",
];

fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Every UTF-8 text file of the repository, with its path relative to the root.
fn text_files() -> Vec<(String, String)> {
    let root = repo_root();
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if !SKIPPED_DIRS.contains(&name.as_str()) && !name.starts_with("target") {
                    stack.push(path);
                }
            } else if kind.is_file() && !name.ends_with(".lock") && name != "package-lock.json" {
                if entry.metadata().map(|m| m.len() > 2 << 20).unwrap_or(true) {
                    continue;
                }
                if let Ok(text) = std::fs::read_to_string(&path) {
                    out.push((relative(&root, &path), text));
                }
            }
        }
    }
    out.sort();
    out
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// `D7.3` from the text after a `§`, or `None` when it is no reference number.
fn section_number(tail: &str) -> Option<String> {
    let mut chars = tail.chars();
    let letter = chars.next()?;
    if !REFERENCES.iter().any(|(l, _)| *l == letter) {
        return None;
    }
    let digits: String = chars
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let digits = digits.trim_end_matches('.');
    if digits.is_empty() || !digits.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some(format!("{letter}{digits}"))
}

#[test]
fn every_cited_section_is_a_heading_of_exactly_one_reference() {
    let root = repo_root();
    let mut headings: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (letter, doc) in REFERENCES {
        let text = std::fs::read_to_string(root.join(doc))
            .unwrap_or_else(|e| panic!("{doc} must exist: {e}"));
        for line in text.lines() {
            let Some(rest) = line.strip_prefix('#') else {
                continue;
            };
            let rest = rest.trim_start_matches('#').trim_start();
            let first = rest.split_whitespace().next().unwrap_or_default();
            let number = first.trim_end_matches('.');
            if number.starts_with(letter) && section_number(number).is_some() {
                headings
                    .entry(number.to_owned())
                    .or_default()
                    .push(doc.to_owned());
            }
        }
    }
    let twice: Vec<_> = headings.iter().filter(|(_, d)| d.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "a section number heads two sections: {twice:?}"
    );

    let mut cited: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, text) in text_files() {
        for (n, line) in text.lines().enumerate() {
            for (i, _) in line.match_indices('§') {
                if let Some(number) = section_number(&line[i + '§'.len_utf8()..]) {
                    cited
                        .entry(number)
                        .or_default()
                        .insert(format!("{path}:{}", n + 1));
                }
            }
        }
    }
    assert!(
        cited.len() > 100,
        "only {} section numbers cited",
        cited.len()
    );
    let missing: Vec<_> = cited
        .iter()
        .filter(|(number, _)| !headings.contains_key(*number))
        .map(|(number, at)| format!("§{number} (cited at {})", at.iter().next().unwrap()))
        .collect();
    assert!(missing.is_empty(), "cited but no heading: {missing:#?}");
}

#[test]
fn nothing_points_outside_the_repository() {
    // Spelled in pieces so this file does not match itself.
    let outside = [concat!("shared", "/spec"), concat!("../", "shared")];
    let mut found = Vec::new();
    for (path, text) in text_files() {
        for (n, line) in text.lines().enumerate() {
            if outside.iter().any(|o| line.contains(o)) {
                found.push(format!("{path}:{}: {}", n + 1, line.trim()));
            }
            // A chapter citation of the old kind: two digits (01 to 08), a space, then a section sign.
            let bytes = line.as_bytes();
            for (i, _) in line.match_indices("§") {
                if i >= 3
                    && bytes[i - 1] == b' '
                    && bytes[i - 3] == b'0'
                    && (b'1'..=b'8').contains(&bytes[i - 2])
                    && line[i + '§'.len_utf8()..].starts_with(|c: char| c.is_ascii_digit())
                    && (i == 3 || !bytes[i - 4].is_ascii_alphanumeric())
                {
                    found.push(format!("{path}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "references outside the repository: {found:#?}"
    );
}
