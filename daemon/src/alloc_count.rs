//! Bench builds only (`count-allocs` feature): a counting global allocator and, on SIGUSR2, its
//! totals written to `<state dir>/alloc-count.json` (BENCHMARKS.md "Allocations per call").
//! `appduct-bench --only allocs` reads the file before and after a run of calls; the difference
//! divided by the calls is the daemon's allocations per call. Never compiled into a release.

use std::alloc::System;
use std::path::{Path, PathBuf};

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The file the totals are written to, in the state directory.
pub const FILE: &str = "alloc-count.json";

fn write_totals(dir: &Path, report: u64) -> std::io::Result<()> {
    let stats = GLOBAL.stats();
    let text = format!(
        "{{\"report\":{report},\"allocations\":{},\"reallocations\":{},\"deallocations\":{},\"bytesAllocated\":{}}}\n",
        stats.allocations, stats.reallocations, stats.deallocations, stats.bytes_allocated
    );
    // Whole or not at all for the reader: a temporary file renamed over the old one.
    let tmp: PathBuf = dir.join(format!("{FILE}.tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, dir.join(FILE))
}

/// Writes the totals once now and again on every SIGUSR2, for the daemon's lifetime.
pub fn spawn_reporter(dir: PathBuf) {
    let mut signals =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("count-allocs: no SIGUSR2 handler: {e}");
                return;
            }
        };
    tokio::spawn(async move {
        // Numbered, so a reader that sent the signal knows when its totals are there.
        let mut report = 0u64;
        loop {
            if let Err(e) = write_totals(&dir, report) {
                tracing::warn!("count-allocs: {FILE}: {e}");
            }
            if signals.recv().await.is_none() {
                break;
            }
            report += 1;
        }
    });
}
