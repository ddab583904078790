//! The soak run of issue #20 (`scripts/soak`, `appduct-soak`; a short form runs as the e2e
//! test `soak::a_short_soak_settles_every_call_once_and_misroutes_none`).
//!
//! One `appduct daemon run` in a sandbox (loopback only) under mixed load for a bounded time:
//! callers keeping one call in flight each across the long-lived devices (echo, failing tool,
//! unknown tool, timeouts, cancels), clients leaving with a call in flight, short control
//! visits, one subscriber, devices dropping their socket or going to the background and
//! resuming, short-lived devices claimed from new links and revoked, event posts.
//!
//! Measured:
//! - every call's answer against the audit files, call by call (settled == audited);
//! - calls that reached another device than the one named in their arguments (the device
//!   checks; the caller checks the answer's origin);
//! - the daemon's RSS and open descriptors from `/proc/<pid>` over time, and at rest (load
//!   paused, every call settled, every device active) after the warm-up and at the end.

mod check;
mod fleet;
mod load;
mod rpc;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::watch;

pub use check::AuditCheck;

use crate::harness::Sandbox;
use fleet::{Device, Pool};
use load::Ledger;
use rpc::Rpc;

pub type SoakResult<T> = Result<T, String>;

/// Loopback advertised so the SDK's private-LAN rule accepts the links; port 0 for wss.
const CONFIG: &str = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// How big and how long.
#[derive(Debug, Clone)]
pub struct Options {
    /// Time under load, warm-up included (the two pauses at rest come on top).
    pub duration: Duration,
    /// Load before the first measurement at rest; the RSS windows start after it.
    pub warmup: Duration,
    /// Long-lived devices.
    pub devices: usize,
    /// Callers, one call in flight each.
    pub callers: usize,
    /// Short-lived devices alive at once.
    pub churn: usize,
    /// Events posted per second, all devices together.
    pub events_per_s: u64,
    pub sample_every: Duration,
    /// Largest allowed RSS growth under load, last window against the first, in percent.
    pub rss_limit_pct: f64,
    /// Largest allowed growth of open descriptors at rest, end against after warm-up.
    pub fd_slack: usize,
    pub seed: u64,
    /// A line on stderr per sample.
    pub progress: bool,
}

impl Options {
    /// The full soak of issue #20 for `duration`: 50 devices, 8 callers, a fifth of the time
    /// (at most 2 minutes) of warm-up.
    pub fn full(duration: Duration) -> Self {
        Self {
            duration,
            warmup: (duration / 5).clamp(Duration::from_secs(2), Duration::from_secs(120)),
            devices: 50,
            callers: 8,
            churn: 4,
            events_per_s: 200,
            sample_every: (duration / 120).clamp(Duration::from_secs(1), Duration::from_secs(5)),
            rss_limit_pct: 5.0,
            fd_slack: 2,
            seed: 20,
            progress: false,
        }
    }
}

/// A tiny xorshift generator: the soak needs variety, not quality, and no new crate.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi.saturating_sub(lo) + 1))
    }

    /// An independent generator for another task.
    fn fork(&mut self) -> Self {
        Self::new(self.next())
    }
}

/// What the load tasks are told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Run,
    /// Finish what is under way and wait.
    Pause,
    Stop,
}

/// The phase, and how many units of work are under way (a pause waits for none).
#[derive(Debug)]
struct Gate {
    phase: watch::Sender<Phase>,
    busy: AtomicUsize,
}

/// One unit of work under way.
#[derive(Debug)]
struct Busy(Arc<Gate>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Gate {
    fn new() -> Self {
        Self {
            phase: watch::Sender::new(Phase::Run),
            busy: AtomicUsize::new(0),
        }
    }

    fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// Waits while paused; a unit of work while running, `None` once stopped.
    async fn enter(self: &Arc<Self>) -> Option<Busy> {
        let mut phases = self.phase.subscribe();
        loop {
            let phase = *phases.borrow_and_update();
            match phase {
                Phase::Stop => return None,
                Phase::Run => {
                    self.busy.fetch_add(1, Ordering::SeqCst);
                    // A pause that began meanwhile may already have counted zero.
                    if self.phase() == Phase::Run {
                        return Some(Busy(self.clone()));
                    }
                    self.busy.fetch_sub(1, Ordering::SeqCst);
                }
                Phase::Pause => {}
            }
            if phases.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Sleeps `d` or until the phase changes; whether the load is still running.
    async fn sleep(&self, d: Duration) -> bool {
        let mut phases = self.phase.subscribe();
        tokio::select! {
            () = tokio::time::sleep(d) => {}
            _ = phases.changed() => {}
        }
        self.phase() == Phase::Run
    }

    fn set(&self, phase: Phase) {
        self.phase.send_replace(phase);
    }

    /// Pauses and waits (at most `limit`) until no work is under way.
    async fn pause(&self, limit: Duration) -> SoakResult<()> {
        self.set(Phase::Pause);
        let deadline = Instant::now() + limit;
        while self.busy.load(Ordering::SeqCst) > 0 {
            if Instant::now() > deadline {
                return Err(format!(
                    "the load did not drain within {limit:?} ({} busy)",
                    self.busy.load(Ordering::SeqCst)
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
}

/// Everything the load tasks count.
#[derive(Debug, Default)]
struct Counters {
    misrouted_at_device: AtomicU64,
    misrouted_at_caller: AtomicU64,
    unexpected: AtomicU64,
    cancels_sent: AtomicU64,
    cancels_accepted: AtomicU64,
    abandoned: AtomicU64,
    drops_socket: AtomicU64,
    drops_background: AtomicU64,
    drops_unseen: AtomicU64,
    resumes: AtomicU64,
    resume_failures: AtomicU64,
    claims: AtomicU64,
    revokes: AtomicU64,
    churn_failures: AtomicU64,
    visitors: AtomicU64,
    visitor_failures: AtomicU64,
    events_posted: AtomicU64,
    events_seen: AtomicU64,
    finished_seen: AtomicU64,
    notes: Mutex<Vec<String>>,
}

impl Counters {
    /// Keeps the first 20 problems for the report.
    fn note(&self, text: impl Into<String>) {
        let mut notes = lock(&self.notes);
        if notes.len() < 20 {
            notes.push(text.into());
        }
    }

    /// An answer or failure the soak did not allow for.
    fn unexpected(&self, text: impl Into<String>) {
        bump(&self.unexpected);
        self.note(text);
    }

    fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        BTreeMap::from([
            ("misrouted_at_device", get(&self.misrouted_at_device)),
            ("misrouted_at_caller", get(&self.misrouted_at_caller)),
            ("unexpected", get(&self.unexpected)),
            ("cancels_sent", get(&self.cancels_sent)),
            ("cancels_accepted", get(&self.cancels_accepted)),
            ("abandoned", get(&self.abandoned)),
            ("drops_socket", get(&self.drops_socket)),
            ("drops_background", get(&self.drops_background)),
            ("drops_unseen", get(&self.drops_unseen)),
            ("resumes", get(&self.resumes)),
            ("resume_failures", get(&self.resume_failures)),
            ("claims", get(&self.claims)),
            ("revokes", get(&self.revokes)),
            ("churn_failures", get(&self.churn_failures)),
            ("visitors", get(&self.visitors)),
            ("visitor_failures", get(&self.visitor_failures)),
            ("events_posted", get(&self.events_posted)),
            ("events_seen", get(&self.events_seen)),
            ("finished_seen", get(&self.finished_seen)),
        ])
    }
}

/// What the load tasks share.
#[derive(Debug)]
struct Soak {
    options: Options,
    socket: PathBuf,
    gate: Arc<Gate>,
    counters: Arc<Counters>,
    ledger: Ledger,
    pool: Pool,
    /// The long-lived devices (never revoked).
    stable: Vec<Arc<Device>>,
}

/// One reading of the daemon's process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Since the load started.
    pub at: Duration,
    pub rss_kib: u64,
    pub fds: usize,
    /// Calls booked so far.
    pub calls: usize,
}

/// The daemon at rest: load paused, every call settled, every long-lived device active.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rest {
    pub at: Duration,
    pub rss_kib: u64,
    pub fds: usize,
}

/// The outcome of a soak.
#[derive(Debug, Clone)]
pub struct Report {
    pub options: Options,
    /// Seconds under load (the pauses excluded).
    pub load_secs: f64,
    /// Calls booked (answered, or left in flight by a leaving client).
    pub calls: usize,
    /// Calls that must have exactly one audit record.
    pub settled: usize,
    /// Answers by outcome and error type.
    pub tally: BTreeMap<String, u64>,
    pub audit: AuditCheck,
    pub counters: BTreeMap<&'static str, u64>,
    pub notes: Vec<String>,
    pub samples: Vec<Sample>,
    /// The samples between the two rests (under load, after the warm-up).
    pub main: std::ops::Range<Duration>,
    pub rest_after_warmup: Rest,
    pub rest_at_end: Rest,
}

impl Report {
    pub fn misrouted(&self) -> u64 {
        self.counters["misrouted_at_device"] + self.counters["misrouted_at_caller"]
    }

    fn main_samples(&self) -> Vec<Sample> {
        self.samples
            .iter()
            .filter(|s| self.main.contains(&s.at))
            .copied()
            .collect()
    }

    /// Median RSS (KiB) of the first and last tenth of the samples under load after the
    /// warm-up (at least 3 samples each), and the largest.
    pub fn rss_windows(&self) -> (u64, u64, u64) {
        let main = self.main_samples();
        let width = (main.len() / 10).max(3).min(main.len());
        let mut first: Vec<u64> = main.iter().take(width).map(|s| s.rss_kib).collect();
        let mut last: Vec<u64> = main.iter().rev().take(width).map(|s| s.rss_kib).collect();
        let max = main.iter().map(|s| s.rss_kib).max().unwrap_or(0);
        (check::median(&mut first), check::median(&mut last), max)
    }

    pub fn rss_growth_pct(&self) -> f64 {
        let (first, last, _) = self.rss_windows();
        if first == 0 {
            return 0.0;
        }
        (last as f64 - first as f64) * 100.0 / first as f64
    }

    /// Broken invariants: every settled call audited exactly once with its outcome, no call
    /// misrouted, no answer outside the expected ones, every drop resumed, every claim, revoke
    /// and control visit served.
    pub fn invariant_failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        if !self.audit.is_exact() {
            failures.push(format!(
                "settled {} calls but the audit holds {} records ({} matched, {} missing, {} \
                 extra, {} duplicates, {} mismatched, {} unreadable)",
                self.settled,
                self.audit.records,
                self.audit.matched,
                self.audit.missing,
                self.audit.extra,
                self.audit.duplicates,
                self.audit.mismatched,
                self.audit.unreadable
            ));
        }
        if self.misrouted() > 0 {
            failures.push(format!("{} calls misrouted", self.misrouted()));
        }
        for (key, what) in [
            ("unexpected", "unexpected answers or lost calls"),
            ("resume_failures", "drops not resumed within 30 s"),
            ("churn_failures", "failed claims or revokes"),
            ("visitor_failures", "failed control visits"),
        ] {
            if self.counters[key] > 0 {
                failures.push(format!("{} {what}", self.counters[key]));
            }
        }
        if self.settled == 0 {
            failures.push("no call settled".to_owned());
        }
        failures
    }

    /// Growth beyond the thresholds: RSS under load, descriptors at rest.
    pub fn resource_failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        let growth = self.rss_growth_pct();
        if growth > self.options.rss_limit_pct {
            failures.push(format!(
                "RSS grew {growth:.1}% under load (limit {}%)",
                self.options.rss_limit_pct
            ));
        }
        if self.rest_at_end.fds > self.rest_after_warmup.fds + self.options.fd_slack {
            failures.push(format!(
                "open descriptors at rest grew from {} to {} (slack {})",
                self.rest_after_warmup.fds, self.rest_at_end.fds, self.options.fd_slack
            ));
        }
        failures
    }

    /// The report as Markdown.
    pub fn render(&self) -> String {
        let o = &self.options;
        let c = &self.counters;
        let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
        let (first, last, max) = self.rss_windows();
        let main = self.main_samples();
        let mut fds: Vec<u64> = main.iter().map(|s| s.fds as u64).collect();
        let fd_median = check::median(&mut fds);
        let (fd_min, fd_max) = (
            fds.first().copied().unwrap_or(0),
            fds.last().copied().unwrap_or(0),
        );
        let tally = self
            .tally
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let a = &self.audit;
        let mut out = String::new();
        let mut row = |figure: &str, value: String| {
            out.push_str(&format!("| {figure} | {value} |\n"));
        };
        row(
            "Load",
            format!(
                "{:.0} s ({} s warm-up), {} long-lived devices, {} callers with one call in \
                 flight each, up to {} short-lived devices, ~{} events/s, seed {}",
                self.load_secs,
                o.warmup.as_secs(),
                o.devices,
                o.callers,
                o.churn,
                o.events_per_s,
                o.seed
            ),
        );
        row(
            "Calls settled (answered, or left in flight by a client that left)",
            format!(
                "{} ({:.0}/s); {} booked in all",
                self.settled,
                self.settled as f64 / self.load_secs.max(1.0),
                self.calls
            ),
        );
        row(
            "Audit records",
            format!(
                "{} ({} matched call by call with the answer's outcome; {} missing, {} extra, \
                 {} duplicates, {} mismatched)",
                a.records, a.matched, a.missing, a.extra, a.duplicates, a.mismatched
            ),
        );
        row(
            "Calls misrouted",
            format!(
                "{} (checked by the device: {}; by the caller: {})",
                self.misrouted(),
                c["misrouted_at_device"],
                c["misrouted_at_caller"]
            ),
        );
        row("Answers", tally);
        row(
            "Cancels sent / accepted",
            format!("{} / {}", c["cancels_sent"], c["cancels_accepted"]),
        );
        row(
            "Calls in flight when their client left",
            c["abandoned"].to_string(),
        );
        row(
            "Device drops: socket closed / background; resumed",
            format!(
                "{} / {}; {} resumed ({} failed; {} drops the device never saw)",
                c["drops_socket"],
                c["drops_background"],
                c["resumes"],
                c["resume_failures"],
                c["drops_unseen"]
            ),
        );
        row(
            "Short-lived devices claimed / revoked",
            format!("{} / {}", c["claims"], c["revokes"]),
        );
        row(
            "Control clients that connected, read and left",
            format!("{} ({} failed)", c["visitors"], c["visitor_failures"]),
        );
        row(
            "Events posted / seen by the subscriber",
            format!("{} / {}", c["events_posted"], c["events_seen"]),
        );
        row(
            "`tool_call_finished` seen by the subscriber",
            c["finished_seen"].to_string(),
        );
        row(
            "Daemon RSS under load: first → last window median (max)",
            format!(
                "{} → {} ({:+.1}%; max {}; limit +{}%)",
                mib(first),
                mib(last),
                self.rss_growth_pct(),
                mib(max),
                o.rss_limit_pct
            ),
        );
        row(
            "Daemon RSS at rest: after warm-up → end",
            format!(
                "{} → {}",
                mib(self.rest_after_warmup.rss_kib),
                mib(self.rest_at_end.rss_kib)
            ),
        );
        row(
            "Daemon open descriptors at rest: after warm-up → end",
            format!(
                "{} → {} (slack {})",
                self.rest_after_warmup.fds, self.rest_at_end.fds, o.fd_slack
            ),
        );
        row(
            "Daemon open descriptors under load: min / median / max",
            format!("{fd_min} / {fd_median} / {fd_max}"),
        );
        out.insert_str(0, "| Figure | Value |\n| --- | --- |\n");
        out.push_str("\nOver time (samples every ");
        out.push_str(&format!("{} s):\n\n", o.sample_every.as_secs_f64()));
        out.push_str(
            "| t (s) | RSS (MiB) | Open descriptors | Calls booked |\n| --- | --- | --- | --- |\n",
        );
        let step = (self.samples.len() / 12).max(1);
        for (i, s) in self.samples.iter().enumerate() {
            if i % step == 0 || i + 1 == self.samples.len() {
                out.push_str(&format!(
                    "| {:.0} | {:.1} | {} | {} |\n",
                    s.at.as_secs_f64(),
                    s.rss_kib as f64 / 1024.0,
                    s.fds,
                    s.calls
                ));
            }
        }
        let failures: Vec<String> = self
            .invariant_failures()
            .into_iter()
            .chain(self.resource_failures())
            .collect();
        if failures.is_empty() {
            out.push_str("\nVerdict: pass\n");
        } else {
            out.push_str(&format!("\nVerdict: FAIL — {}\n", failures.join("; ")));
        }
        for note in self.notes.iter().chain(&self.audit.notes) {
            out.push_str(&format!("- {note}\n"));
        }
        out
    }
}

/// Pauses the load and waits for rest: nothing under way, every long-lived device active, no
/// call pending in the daemon, only the long-lived sessions left, and the descriptor count
/// unchanged for a second.
async fn rest(soak: &Soak, rpc: &Rpc, pid: u32, start: Instant) -> SoakResult<Rest> {
    soak.gate.pause(Duration::from_secs(60)).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !soak.stable.iter().all(|d| d.is_active()) {
        if Instant::now() > deadline {
            return Err("long-lived devices still inactive 30 s into a pause".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    loop {
        let hello = rpc.result("daemon.hello", json!({})).await?;
        if hello["pendingCalls"] == 0 && hello["sessionCount"] == soak.stable.len() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the daemon is not at rest 30 s into a pause: {hello}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let read_fds = || check::fds(pid).ok_or("the daemon is gone");
    let mut fds = read_fds()?;
    let mut same = 0;
    let deadline = Instant::now() + Duration::from_secs(15);
    while same < 10 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = read_fds()?;
        same = if now == fds { same + 1 } else { 0 };
        fds = now;
    }
    Ok(Rest {
        at: start.elapsed(),
        rss_kib: check::rss_kib(pid).ok_or("the daemon is gone")?,
        fds,
    })
}

/// Runs a soak against the `appduct` binary the harness finds (`APPDUCT_BIN`).
pub async fn run(options: Options) -> SoakResult<Report> {
    let say = |text: String| {
        if options.progress {
            eprintln!("appduct-soak: {text}");
        }
    };
    let sandbox = Sandbox::with_config(CONFIG).map_err(|e| e.to_string())?;
    let (daemon, _) = sandbox
        .spawn_ready(&["--json", "daemon", "run"])
        .map_err(|e| e.to_string())?;
    sandbox.track_pid(daemon.pid());
    let pid = daemon.pid();
    let socket = sandbox.socket();
    let counters = Arc::new(Counters::default());
    let stable = fleet::claim_many(&socket, &counters, options.devices, 16).await?;
    say(format!("{} devices connected; load starts", stable.len()));
    let soak = Arc::new(Soak {
        options: options.clone(),
        socket: socket.clone(),
        gate: Arc::new(Gate::new()),
        counters,
        ledger: Ledger::default(),
        pool: Pool::default(),
        stable,
    });
    for device in &soak.stable {
        soak.pool.add(device.clone());
    }
    let setup = Rpc::connect(&socket, None).await?;
    let subscription = load::subscriber(soak.clone()).await?;

    let start = Instant::now();
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let sampler = {
        let (soak, samples, every) = (soak.clone(), samples.clone(), options.sample_every);
        let progress = options.progress;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            while soak.gate.phase() != Phase::Stop {
                tick.tick().await;
                let (Some(rss_kib), Some(fds)) = (check::rss_kib(pid), check::fds(pid)) else {
                    break;
                };
                let sample = Sample {
                    at: start.elapsed(),
                    rss_kib,
                    fds,
                    calls: soak.ledger.count(),
                };
                if progress {
                    eprintln!(
                        "appduct-soak: {:>5.0} s  RSS {:>7.1} MiB  fds {:>4}  calls {}",
                        sample.at.as_secs_f64(),
                        rss_kib as f64 / 1024.0,
                        fds,
                        sample.calls
                    );
                }
                lock(&samples).push(sample);
            }
        })
    };

    let mut seeds = Rng::new(options.seed);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..options.callers {
        tasks.spawn(load::caller(soak.clone(), seeds.fork()));
    }
    tasks.spawn(load::leavers(soak.clone(), seeds.fork()));
    tasks.spawn(load::visitors(soak.clone(), seeds.fork()));
    tasks.spawn(fleet::dropper(soak.clone(), seeds.fork()));
    tasks.spawn(fleet::churn(soak.clone(), seeds.fork()));
    tasks.spawn(fleet::post_events(soak.clone(), options.events_per_s));

    tokio::time::sleep(options.warmup).await;
    let paused_at = start.elapsed();
    let rest_after_warmup = rest(&soak, &setup, pid, start).await?;
    say(format!("at rest after the warm-up: {rest_after_warmup:?}"));
    let main_start = start.elapsed();
    soak.gate.set(Phase::Run);
    tokio::time::sleep(options.duration.saturating_sub(options.warmup)).await;
    let main_end = start.elapsed();
    let rest_at_end = rest(&soak, &setup, pid, start).await?;
    say(format!("at rest at the end: {rest_at_end:?}"));
    soak.gate.set(Phase::Stop);
    let stopped = tokio::time::timeout(Duration::from_secs(30), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if stopped.is_err() {
        tasks.abort_all();
        soak.counters
            .unexpected("load tasks did not stop within 30 s");
    }
    let _ = sampler.await;
    let load_secs = (paused_at + (main_end - main_start)).as_secs_f64();

    // The audit writer gathers a few ms of records before writing: read until it matches.
    let tally = soak.ledger.tally();
    let settled = soak.ledger.audited();
    let ledger = soak.ledger.take();
    let deadline = Instant::now() + Duration::from_secs(10);
    let audit = loop {
        let audit = check::audit(&sandbox.state_dir(), &ledger).map_err(|e| e.to_string())?;
        if audit.is_exact() || Instant::now() > deadline {
            break audit;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    drop(subscription);
    for device in &soak.stable {
        device.client.disconnect();
    }
    let report = Report {
        options,
        load_secs,
        calls: ledger.len(),
        settled,
        tally,
        audit,
        counters: soak.counters.snapshot(),
        notes: lock(&soak.counters.notes).clone(),
        samples: lock(&samples).clone(),
        main: main_start..main_end,
        rest_after_warmup,
        rest_at_end,
    };
    drop(daemon);
    drop(sandbox);
    Ok(report)
}
