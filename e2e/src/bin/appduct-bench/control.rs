//! `--only control` (issue #22): the control socket's share of a call, for comparing two builds
//! of the daemon's control plane (quiet_unix against interprocess's local sockets, BENCHMARKS.md
//! "Control socket: quiet_unix against interprocess"). One daemon, one device; a single caller
//! and 8 calls in flight, each with the daemon's CPU time per call, calls/s, p50 and p99. With
//! `APPDUCT_BENCH_STRACE=1` two more phases (single caller, 8 in flight) run with `strace -f -c`
//! attached to the daemon and report its `epoll_wait` returns and system calls per call. The
//! figures go to stderr as one line each.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::devices::{self, Ctl};
use crate::load::{BenchResult, uds_load};
use crate::stats::Sample;
use crate::{Counts, Daemon, WINDOW, call_args, call_line, cpu_time, per_call};

/// Calls of each strace phase (strace slows the daemon down several times).
const STRACE_CALLS: usize = 5_000;
/// How long strace may take to attach to every thread of the daemon.
const ATTACH_WAIT: Duration = Duration::from_secs(10);

/// One measured phase.
pub struct Phase {
    pub name: &'static str,
    pub sample: Sample,
    pub cpu_per_call: Duration,
}

/// What strace counted during one phase, per call.
pub struct Traced {
    pub name: &'static str,
    pub epoll_waits: f64,
    pub syscalls: f64,
}

pub async fn measure(counts: &Counts) -> BenchResult<(Vec<Phase>, Vec<Traced>)> {
    let daemon = Daemon::start()?;
    let socket = daemon.socket();
    let mut ctl = Ctl::connect(&socket).await?;
    let (devices, _) = devices::connect_to_daemon(&mut ctl, 1, 1, 1).await?;
    devices::wait_registries(&mut ctl, &devices, 1).await?;
    let sid = devices[0].session_id.clone();
    let args = call_args().to_string();
    let line = |id| call_line(id, &sid, &args);
    let pid = daemon.proc.pid();
    uds_load(&socket, counts.warmup, WINDOW, line).await?;
    let mut phases = Vec::new();
    for (name, total, window) in [
        ("single", counts.single, 1),
        ("8 in flight", counts.windowed, WINDOW),
    ] {
        let before = cpu_time(pid)?;
        let sample = uds_load(&socket, total, window, line).await?;
        let cpu_per_call = per_call(cpu_time(pid)? - before, &sample);
        phases.push(Phase {
            name,
            sample,
            cpu_per_call,
        });
    }
    let mut traced = Vec::new();
    if std::env::var_os("APPDUCT_BENCH_STRACE").is_some_and(|v| v == "1") {
        let calls = if counts.smoke { 200 } else { STRACE_CALLS };
        for (name, window) in [("single", 1), ("8 in flight", WINDOW)] {
            let out = daemon.sandbox.state_dir().join("strace.txt");
            let strace = Strace::attach(pid, &out)?;
            let result = uds_load(&socket, calls, window, line).await;
            let counted = strace.finish(&out)?;
            result?;
            traced.push(Traced {
                name,
                epoll_waits: counted.epoll_waits as f64 / calls as f64,
                syscalls: counted.total as f64 / calls as f64,
            });
        }
    }
    drop(devices);
    drop(ctl);
    drop(daemon);
    Ok((phases, traced))
}

/// `strace -f -c -p <pid>`, detached again by `SIGINT`.
struct Strace {
    child: Child,
}

/// Counts from strace's summary table.
struct Counted {
    epoll_waits: u64,
    total: u64,
}

impl Strace {
    fn attach(pid: u32, out: &Path) -> BenchResult<Self> {
        let child = Command::new("strace")
            .args(["-f", "-c", "-o"])
            .arg(out)
            .args(["-p", &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("strace: {e}"))?;
        // Attached once every thread of the daemon names a tracer (bounded wait).
        let started = Instant::now();
        while !all_traced(pid) {
            if started.elapsed() > ATTACH_WAIT {
                return Err(format!("strace did not attach within {ATTACH_WAIT:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Self { child })
    }

    fn finish(mut self, out: &Path) -> BenchResult<Counted> {
        use rustix::process::{Pid, Signal, kill_process};
        let pid = Pid::from_raw(i32::try_from(self.child.id()).map_err(|e| e.to_string())?)
            .ok_or("strace has no pid")?;
        kill_process(pid, Signal::INT).map_err(|e| format!("SIGINT to strace: {e}"))?;
        self.child.wait().map_err(|e| format!("strace: {e}"))?;
        let text = std::fs::read_to_string(out).map_err(|e| format!("strace output: {e}"))?;
        parse_summary(&text).ok_or_else(|| format!("cannot read strace's summary:\n{text}"))
    }
}

/// Whether every thread of `pid` has a tracer.
fn all_traced(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("TracerPid:"))
                    .map(|v| v.trim() != "0")
            })
            .unwrap_or(false)
    })
}

/// The `calls` column of `epoll_wait`/`epoll_pwait` and the `total` row of `strace -c`.
fn parse_summary(text: &str) -> Option<Counted> {
    let mut epoll_waits = 0;
    let mut total = None;
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(name) = fields.last() else { continue };
        // % time, seconds, usecs/call, calls, [errors,] syscall
        let calls = fields.get(3).and_then(|c| c.parse::<u64>().ok());
        match *name {
            "epoll_wait" | "epoll_pwait" | "epoll_pwait2" => epoll_waits += calls?,
            "total" => total = calls,
            _ => {}
        }
    }
    Some(Counted {
        epoll_waits,
        total: total?,
    })
}

/// One line per phase.
pub fn summary(phases: &[Phase], traced: &[Traced]) -> String {
    let mut lines: Vec<String> = phases
        .iter()
        .map(|p| {
            format!(
                "control {}: {:.0} calls/s, cpu {:.1} µs/call, p50 {:.0} µs, p99 {:.0} µs",
                p.name,
                p.sample.rate(),
                p.cpu_per_call.as_secs_f64() * 1e6,
                p.sample.p50().as_secs_f64() * 1e6,
                p.sample.p99().as_secs_f64() * 1e6,
            )
        })
        .collect();
    lines.extend(traced.iter().map(|t| {
        format!(
            "control {} under strace: epoll_wait {:.2}/call, system calls {:.2}/call",
            t.name, t.epoll_waits, t.syscalls
        )
    }));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_summary_counts_epoll_waits_and_the_total() {
        let text = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 40.00    0.004000           2      2000           epoll_wait
 30.00    0.003000           1      3000       120 recvfrom
 30.00    0.003000           1      1000           sendto
------ ----------- ----------- --------- --------- ----------------
100.00    0.010000           1      6000       120 total
";
        let counted = parse_summary(text).expect("parsed");
        assert_eq!(counted.epoll_waits, 2000);
        assert_eq!(counted.total, 6000);
    }
}
