//! `appduct-e2e`: cross-process tests of the built `appduct` binary (01 §10.4).
//!
//! - [`harness`]: locates the binary and runs it in a sandbox (short temporary state dir with
//!   `wssPort: 0`, scrubbed `APPDUCT_*` environment, every daemon stopped on drop).

pub mod harness;
