//! The readers `appduct doctor` (§L13) runs on untrusted build artifacts, kept apart from the
//! CLI so the fuzz targets (`fuzz/bodies`) can reach them without the frontend stack:
//!
//! - [`zip`]: a bounded, read-only ZIP reader (`.apk`, `.aab`, `.ipa`): capped entry count,
//!   central directory, per-entry and total inflated sizes, CRC and size checks, ZIP64; raw
//!   DEFLATE from `miniz_oxide` (pure Rust);
//! - [`dex`]: the type descriptors of a `classes*.dex`;
//! - [`plist`]: `CFBundleExecutable` from an `Info.plist`, binary or XML.
//!
//! Every failure is a typed error; the CLI reports any of them as `inspection_error` (66),
//! never as "absent". No I/O beyond the archive file itself.

pub mod dex;
pub mod plist;
pub mod zip;
