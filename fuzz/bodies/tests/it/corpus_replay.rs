//! SEC-56 (SECURITY.md §4.8, SECURITY.md §8): every committed corpus file of every fuzz target runs through the
//! target's body on stable, so CI replays the corpora without libFuzzer. A file that panics
//! fails the test, which names the file.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use appduct_fuzz::{Body, TARGETS};

/// Fewest files a target's corpus may hold: an emptied or misplaced directory must fail.
const MIN_CORPUS_FILES: usize = 5;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../corpus")
        .join(target)
}

fn body(target: &str) -> Body {
    TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, run)| *run)
        .unwrap_or_else(|| panic!("no target {target}"))
}

/// Runs every file of `corpus/<target>/`; returns how many ran.
fn replay(target: &str) -> usize {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
    files.retain(|path| path.is_file());
    files.sort();
    assert!(
        files.len() >= MIN_CORPUS_FILES,
        "{} holds {} files",
        dir.display(),
        files.len()
    );

    let run = body(target);
    let failed: Vec<String> = files
        .iter()
        .filter(|path| {
            let data =
                std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            catch_unwind(AssertUnwindSafe(|| run(&data))).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{target}: {} corpus files fail:\n  {}",
        failed.len(),
        failed.join("\n  ")
    );
    files.len()
}

#[test]
fn device_frame_corpus_replays() {
    replay("device_frame");
}

#[test]
fn bootstrap_payload_corpus_replays() {
    replay("bootstrap_payload");
}

#[test]
fn deep_link_corpus_replays() {
    replay("deep_link");
}

#[test]
fn control_line_corpus_replays() {
    replay("control_line");
}

#[test]
fn descriptor_corpus_replays() {
    replay("descriptor");
}

#[test]
fn mcp_args_corpus_replays() {
    replay("mcp_args");
}

#[test]
fn every_target_has_a_corpus_and_a_fuzz_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("reading fuzz/Cargo.toml: {e}"));
    for (name, _) in TARGETS {
        assert!(corpus_dir(name).is_dir(), "corpus/{name} is missing");
        let wrapper = root.join("fuzz_targets").join(format!("{name}.rs"));
        let source = std::fs::read_to_string(&wrapper)
            .unwrap_or_else(|e| panic!("reading {}: {e}", wrapper.display()));
        assert!(
            source.contains(&format!("appduct_fuzz::{name}::run")),
            "{} does not call appduct_fuzz::{name}::run",
            wrapper.display()
        );
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "fuzz/Cargo.toml has no [[bin]] {name}"
        );
    }
}

#[test]
fn doctor_zip_corpus_replays() {
    replay("doctor_zip");
}

#[test]
fn doctor_plist_corpus_replays() {
    replay("doctor_plist");
}

#[test]
fn doctor_dex_corpus_replays() {
    replay("doctor_dex");
}

#[test]
fn sealed_handshake_corpus_replays() {
    replay("sealed_handshake");
}

#[test]
fn sealed_record_corpus_replays() {
    replay("sealed_record");
}
