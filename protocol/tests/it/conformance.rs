//! Conformance: every appduct v2 vector in `protocol/tests/vectors/appduct-v2/`, read at test time
//! (§D15). A missing folder, an empty folder, or a `*.json` file that no test below consumes
//! fails the run; each failing case is reported by its `name`.

pub(crate) mod common;

mod bootstrap_links;
mod bootstrap_payloads;
mod close_codes;
mod descriptors;
mod event_registry_frames;
mod frame_limits;
mod session_scenarios;
mod spki_pin;

/// The files the modules above consume. A new upstream category must get a test before it can
/// be added here, and `every_vector_file_is_consumed` fails until it is.
const CONSUMED: &[&str] = &[
    "bootstrap-links.json",
    "bootstrap-payloads.json",
    "close-codes.json",
    "event-descriptors.json",
    "event-registry-frames.json",
    "frame-limits.json",
    "session-scenarios-background.json",
    "session-scenarios.json",
    "spki-pin.json",
    "tool-descriptors.json",
];

#[test]
fn every_vector_file_is_consumed() {
    let files = common::vector_files();
    assert!(
        !files.is_empty(),
        "no *.json vectors in {}",
        common::dir().display()
    );
    let unconsumed: Vec<_> = files
        .iter()
        .filter(|f| !CONSUMED.contains(&f.as_str()))
        .collect();
    assert!(
        unconsumed.is_empty(),
        "vector files no test consumes: {unconsumed:?}"
    );
    for f in CONSUMED {
        assert!(
            files.iter().any(|x| x == f),
            "expected vector file {f} is missing"
        );
    }
}
