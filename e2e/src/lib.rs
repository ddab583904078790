//! `appduct-e2e`: cross-process tests of the built `appduct` binary (ARCHITECTURE.md#test-layers).
//!
//! - [`harness`]: locates the binary and runs it in a sandbox (short temporary state dir with
//!   `wssPort: 0`, scrubbed `APPDUCT_*` environment, every daemon and child process killed on
//!   drop, bounded polling instead of sleeps).
//! - [`control`]: a raw JSON-RPC line client for the daemon's control socket.
//! - [`mcp`]: `appduct mcp` as a child spoken to over stdio.
//! - [`device`]: decoded links, SDK devices and a raw-frame fake device (the SDK's `testing`
//!   feature).
//! - [`node`]: the TypeScript SDK's Node playground as a device process.
//! - [`soak`]: the bounded soak run of issue #20 (`scripts/soak`).

pub mod control;
pub mod device;
pub mod harness;
pub mod mcp;
pub mod node;
pub mod soak;

/// Runs blocking work (a CLI command, a bounded poll) from a multi-thread tokio test without
/// stalling the tasks of in-process SDK devices.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Fails the test with a displayable error (the suite never unwraps).
#[track_caller]
pub fn fail(e: impl std::fmt::Display) -> ! {
    panic!("{e}")
}

/// `Result::unwrap` spelled for tests: panics with the error's text.
pub trait OrFail<T> {
    fn or_fail(self) -> T;
}

impl<T, E: std::fmt::Display> OrFail<T> for Result<T, E> {
    #[track_caller]
    fn or_fail(self) -> T {
        self.unwrap_or_else(|e| fail(e))
    }
}
