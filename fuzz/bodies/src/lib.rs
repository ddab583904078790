//! Bodies of the appduct fuzz targets (SECURITY.md §4.8, SEC-56).
//!
//! Each module holds one target as a plain `run(&[u8])` that feeds the input to a decoder or
//! validator and panics when an invariant breaks: no panic inside the code under test, and,
//! where cheap, round trips, bounded outputs and consistency between related functions. The
//! cargo-fuzz crate in `fuzz/` wraps each `run` in a `fuzz_target!`, and this crate's tests
//! replay every committed corpus file in `fuzz/corpus/<target>/` through the same `run` on
//! stable, so CI replays the corpora without building libFuzzer.

pub mod bootstrap_payload;
pub mod control_line;
pub mod deep_link;
pub mod descriptor;
pub mod device_frame;
pub mod doctor_dex;
pub mod doctor_plist;
pub mod doctor_zip;
pub mod mcp_args;
pub mod sealed_handshake;
pub mod sealed_record;

/// A target's body: feeds one input through the code under test, panicking on a broken
/// invariant.
pub type Body = fn(&[u8]);

/// Every target: its name (the `fuzz_targets/<name>.rs` binary and the `corpus/<name>/`
/// directory) and its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("device_frame", device_frame::run),
    ("bootstrap_payload", bootstrap_payload::run),
    ("deep_link", deep_link::run),
    ("control_line", control_line::run),
    ("descriptor", descriptor::run),
    ("mcp_args", mcp_args::run),
    ("doctor_zip", doctor_zip::run),
    ("doctor_plist", doctor_plist::run),
    ("doctor_dex", doctor_dex::run),
    ("sealed_handshake", sealed_handshake::run),
    ("sealed_record", sealed_record::run),
];
