//! Allocations per call in the daemon (issue #24): a bench build of `appduct`
//! (`--features count-allocs`, a counting global allocator) named by `APPDUCT_COUNT_ALLOCS_BIN`
//! writes its allocator totals to `<state dir>/alloc-count.json` on SIGUSR2. The same echo
//! calls as the "Calls" part run against it, and the totals read before and after a run of
//! calls give the daemon's allocations per call. Counts, unlike times, do not move with the
//! machine's load.

use std::path::{Path, PathBuf};
use std::time::Duration;

use appduct_e2e::harness::Sandbox;
use serde_json::Value;

use crate::devices::{self, Ctl};
use crate::load::{BenchResult, uds_load};
use crate::{CONFIG, Counts, WINDOW, call_args, call_line, disconnect};

/// The environment variable naming the counting build of `appduct`.
pub const BIN_ENV: &str = "APPDUCT_COUNT_ALLOCS_BIN";

/// The allocator's totals at one moment.
#[derive(Debug, Clone, Copy)]
struct Totals {
    report: u64,
    allocations: u64,
    reallocations: u64,
}

/// Allocations per call, over one workload.
#[derive(Debug, Clone, Copy)]
pub struct PerCall {
    /// `alloc` calls (fresh blocks) per call.
    pub allocations: f64,
    /// `realloc` calls (grown blocks) per call.
    pub reallocations: f64,
}

impl PerCall {
    pub fn total(&self) -> f64 {
        self.allocations + self.reallocations
    }
}

/// Allocations per call: one caller, and [`WINDOW`] in flight.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    pub single: PerCall,
    pub windowed: PerCall,
}

fn read_totals(file: &Path) -> Option<Totals> {
    let text = std::fs::read_to_string(file).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    Some(Totals {
        report: v["report"].as_u64()?,
        allocations: v["allocations"].as_u64()?,
        reallocations: v["reallocations"].as_u64()?,
    })
}

/// Asks the daemon `pid` for fresh totals (SIGUSR2) and waits for the report after `last`.
async fn totals(pid: u32, file: &Path, last: &mut u64) -> BenchResult<Totals> {
    use rustix::process::{Pid, Signal, kill_process};
    let pid =
        Pid::from_raw(i32::try_from(pid).map_err(|e| e.to_string())?).ok_or("no daemon pid")?;
    kill_process(pid, Signal::USR2).map_err(|e| format!("SIGUSR2: {e}"))?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(t) = read_totals(file)
            && t.report > *last
        {
            *last = t.report;
            return Ok(t);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "{}: no report after SIGUSR2 (is {BIN_ENV} a `count-allocs` build?)",
                file.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn per_call(before: Totals, after: Totals, calls: usize) -> PerCall {
    let n = calls.max(1) as f64;
    PerCall {
        allocations: after.allocations.saturating_sub(before.allocations) as f64 / n,
        reallocations: after.reallocations.saturating_sub(before.reallocations) as f64 / n,
    }
}

/// Runs the echo calls against the counting build `bin`.
pub async fn measure(bin: PathBuf, counts: &Counts) -> BenchResult<Figures> {
    let sandbox = Sandbox::with_binary(bin, CONFIG).map_err(|e| e.to_string())?;
    let (proc, _ready) = sandbox
        .spawn_ready(&["--json", "daemon", "run"])
        .map_err(|e| e.to_string())?;
    sandbox.track_pid(proc.pid());
    let pid = proc.pid();
    let file = sandbox.state_dir().join("alloc-count.json");
    let socket = sandbox.state_dir().join("daemon.sock");
    let mut ctl = Ctl::connect(&socket).await?;
    let (devices, _) = devices::connect_to_daemon(&mut ctl, 1, 1, 1).await?;
    devices::wait_registries(&mut ctl, &devices, 1).await?;
    let sid = devices[0].session_id.clone();
    let args = call_args().to_string();
    let line = |id| call_line(id, &sid, &args);
    // Warm up (first-use allocations: maps growing, buffers, the audit day file).
    uds_load(&socket, counts.warmup, WINDOW, line).await?;
    let mut last = 0;
    let t0 = totals(pid, &file, &mut last).await?;
    let windowed = uds_load(&socket, counts.windowed, WINDOW, line).await?;
    let t1 = totals(pid, &file, &mut last).await?;
    let single = uds_load(&socket, counts.single, 1, line).await?;
    let t2 = totals(pid, &file, &mut last).await?;
    disconnect(devices);
    drop(ctl);
    Ok(Figures {
        windowed: per_call(t0, t1, windowed.count()),
        single: per_call(t1, t2, single.count()),
    })
}
