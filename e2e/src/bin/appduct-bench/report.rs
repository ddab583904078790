//! The markdown table of one run, and writing it into BENCHMARKS.md between markers so the
//! hand-written notes around it survive a new run.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::load::BenchResult;
use crate::stats::{Sample, us};
use crate::{Floor, Sessions, allocs, sealed};

pub const BEGIN: &str = "<!-- appduct-bench:begin -->";
pub const END: &str = "<!-- appduct-bench:end -->";

const MIB: f64 = 1024.0 * 1024.0;

/// Whether a ratio meets its target: at most (`Max`) or at least (`Min`).
#[derive(Debug, Clone, Copy)]
enum Target {
    Max(f64),
    Min(f64),
    /// A count (not a ratio) of at most this much.
    CountMax(f64),
    /// Reported, no target.
    Info,
}

struct Row {
    figure: String,
    appduct: String,
    baseline: String,
    ratio: Option<f64>,
    target: Target,
}

pub struct Report {
    command: String,
    smoke: bool,
    rows: Vec<Row>,
    floor_single: (Duration, Duration),
    floor_windowed: (Duration, Duration),
    floor_rate: f64,
    daemon_windowed: Option<Sample>,
    daemon_single: Option<Sample>,
    daemon_many: Option<Sample>,
    notes: Vec<String>,
}

fn fmt_us(d: Duration) -> String {
    format!("{:.0} µs", us(d))
}

/// Tenths of a µs: CPU time per call is the figure compared between runs, where 1 µs is ~3 %.
fn fmt_us_tenths(d: Duration) -> String {
    format!("{:.1} µs", us(d))
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

impl Report {
    pub fn new(command: String, smoke: bool) -> Self {
        Self {
            command,
            smoke,
            rows: Vec::new(),
            floor_single: (Duration::ZERO, Duration::ZERO),
            floor_windowed: (Duration::ZERO, Duration::ZERO),
            floor_rate: 0.0,
            daemon_windowed: None,
            daemon_single: None,
            daemon_many: None,
            notes: Vec::new(),
        }
    }

    fn row(
        &mut self,
        figure: &str,
        appduct: String,
        baseline: String,
        ratio: Option<f64>,
        target: Target,
    ) {
        self.rows.push(Row {
            figure: figure.to_owned(),
            appduct,
            baseline,
            ratio,
            target,
        });
    }

    pub fn floor(&mut self, f: &Floor) {
        self.floor_single = (
            f.uds_single.p50() + f.ws_single.p50(),
            f.uds_single.p99() + f.ws_single.p99(),
        );
        self.floor_windowed = (
            f.uds_windowed.p50() + f.ws_windowed.p50(),
            f.uds_windowed.p99() + f.ws_windowed.p99(),
        );
        self.floor_rate = f.ws_windowed.rate();
        self.notes.push(format!(
            "Floor parts (p50 / p99): single caller UDS echo {} / {}, wss echo {} / {}; \
             8 in flight UDS echo {} / {} at {:.0}/s, wss echo {} / {} at {:.0}/s.",
            fmt_us(f.uds_single.p50()),
            fmt_us(f.uds_single.p99()),
            fmt_us(f.ws_single.p50()),
            fmt_us(f.ws_single.p99()),
            fmt_us(f.uds_windowed.p50()),
            fmt_us(f.uds_windowed.p99()),
            f.uds_windowed.rate(),
            fmt_us(f.ws_windowed.p50()),
            fmt_us(f.ws_windowed.p99()),
            f.ws_windowed.rate(),
        ));
    }

    pub fn daemon(&mut self, single: &Sample, windowed: &Sample) {
        let (fp50, fp99) = self.floor_single;
        self.row(
            "Call p50, single caller",
            fmt_us(single.p50()),
            format!("floor {}", fmt_us(fp50)),
            ratio(us(single.p50()), us(fp50)),
            Target::Max(1.5),
        );
        self.row(
            "Call p99, single caller",
            fmt_us(single.p99()),
            format!("floor {}", fmt_us(fp99)),
            ratio(us(single.p99()), us(fp99)),
            Target::Max(3.0),
        );
        self.row(
            "Calls/s, single caller",
            format!("{:.0}/s", single.rate()),
            "—".to_owned(),
            None,
            Target::Info,
        );
        self.row(
            "Calls/s, 8 in flight",
            format!("{:.0}/s", windowed.rate()),
            format!("wss echo {:.0}/s", self.floor_rate),
            ratio(windowed.rate(), self.floor_rate),
            Target::Min(0.8),
        );
        let (wp50, wp99) = self.floor_windowed;
        self.row(
            "Call p50, 8 in flight",
            fmt_us(windowed.p50()),
            format!("floor {}", fmt_us(wp50)),
            ratio(us(windowed.p50()), us(wp50)),
            Target::Info,
        );
        self.row(
            "Call p99, 8 in flight",
            fmt_us(windowed.p99()),
            format!("floor {}", fmt_us(wp99)),
            ratio(us(windowed.p99()), us(wp99)),
            Target::Info,
        );
        self.daemon_single = Some(single.clone());
        self.daemon_windowed = Some(windowed.clone());
    }

    pub fn many(&mut self, many: &Sample) {
        self.row(
            "Calls/s, 100 devices × 8 callers",
            format!("{:.0}/s", many.rate()),
            format!("wss echo (8 in flight) {:.0}/s", self.floor_rate),
            ratio(many.rate(), self.floor_rate),
            Target::Info,
        );
        self.row(
            "Call p50 / p99, 100 devices × 8 callers",
            format!("{} / {}", fmt_us(many.p50()), fmt_us(many.p99())),
            format!(
                "floor (8 in flight) {} / {}",
                fmt_us(self.floor_windowed.0),
                fmt_us(self.floor_windowed.1)
            ),
            ratio(us(many.p99()), us(self.floor_windowed.1)),
            Target::Info,
        );
        self.daemon_many = Some(many.clone());
    }

    pub fn relay(&mut self, single: &Sample, windowed: &Sample, many: &Sample) {
        let (Some(ds), Some(dw), Some(dm)) = (
            self.daemon_single.clone(),
            self.daemon_windowed.clone(),
            self.daemon_many.clone(),
        ) else {
            return;
        };
        self.row(
            "vs Node relay: calls/s, 8 in flight",
            format!("{:.0}/s", dw.rate()),
            format!("relay {:.0}/s", windowed.rate()),
            ratio(dw.rate(), windowed.rate()),
            Target::Min(2.5),
        );
        self.row(
            "vs Node relay: p99, 8 in flight",
            fmt_us(dw.p99()),
            format!("relay {}", fmt_us(windowed.p99())),
            ratio(us(dw.p99()), us(windowed.p99())),
            Target::Max(0.2),
        );
        self.row(
            "vs Node relay: p50 / p99, single caller",
            format!("{} / {}", fmt_us(ds.p50()), fmt_us(ds.p99())),
            format!("relay {} / {}", fmt_us(single.p50()), fmt_us(single.p99())),
            ratio(us(ds.p99()), us(single.p99())),
            Target::Info,
        );
        self.row(
            "vs Node relay: calls/s, 100 devices × 8 callers",
            format!("{:.0}/s", dm.rate()),
            format!("relay {:.0}/s", many.rate()),
            ratio(dm.rate(), many.rate()),
            Target::Info,
        );
    }

    /// Process CPU time per call at 8 in flight: the daemon against the Node relay and against
    /// the floor's echo process (one UDS line plus one wss frame per call).
    pub fn cpu_per_call(&mut self, daemon: Duration, relay: Duration, floor: Duration) {
        self.row(
            "Daemon CPU time per call, 8 in flight",
            fmt_us_tenths(daemon),
            format!("relay {}", fmt_us_tenths(relay)),
            ratio(us(daemon), us(relay)),
            Target::Max(0.4),
        );
        self.row(
            "Daemon CPU time per call / floor's, 8 in flight",
            fmt_us_tenths(daemon),
            format!("echo (UDS + wss) {}", fmt_us_tenths(floor)),
            ratio(us(daemon), us(floor)),
            Target::Max(2.5),
        );
    }

    /// The daemon's allocations per call, from its counting build (issue #24). The count sits
    /// in the ratio column against an absolute target: counts do not move with the load.
    pub fn allocs(&mut self, f: &allocs::Figures) {
        for (figure, per_call) in [
            ("Daemon allocations per call, 8 in flight", f.windowed),
            ("Daemon allocations per call, single caller", f.single),
        ] {
            self.row(
                figure,
                format!(
                    "{:.1} ({:.1} alloc + {:.1} realloc)",
                    per_call.total(),
                    per_call.allocations,
                    per_call.reallocations
                ),
                "—".to_owned(),
                Some(per_call.total()),
                Target::CountMax(20.0),
            );
        }
    }

    /// The sealed transport against wss, one daemon (issue #23).
    pub fn sealed(&mut self, f: &sealed::Figures) {
        let (s, w) = (&f.sealed, &f.wss);
        let pair = |a: Duration, b: Duration| (fmt_us(a), format!("wss {}", fmt_us(b)));
        let (a, b) = pair(s.single.p50(), w.single.p50());
        let r = ratio(us(s.single.p50()), us(w.single.p50()));
        self.row("Sealed: call p50, single caller", a, b, r, Target::Info);
        let (a, b) = pair(s.single.p99(), w.single.p99());
        let r = ratio(us(s.single.p99()), us(w.single.p99()));
        self.row("Sealed: call p99, single caller", a, b, r, Target::Info);
        self.row(
            "Sealed: calls/s, 8 in flight",
            format!("{:.0}/s", s.windowed.rate()),
            format!("wss {:.0}/s", w.windowed.rate()),
            ratio(s.windowed.rate(), w.windowed.rate()),
            Target::Info,
        );
        self.row(
            "Sealed: daemon CPU time per call, 8 in flight",
            fmt_us_tenths(s.cpu_per_call),
            format!("wss {}", fmt_us_tenths(w.cpu_per_call)),
            ratio(us(s.cpu_per_call), us(w.cpu_per_call)),
            Target::Info,
        );
        let (a, b) = pair(s.connects.p50(), w.connects.p50());
        let r = ratio(us(s.connects.p50()), us(w.connects.p50()));
        let connects = s.connects.count();
        let figure = format!("Sealed: connect to `session_ack` p50 ({connects} connects)");
        self.row(&figure, a, b, r, Target::Info);
        let (a, b) = pair(s.connects.p99(), w.connects.p99());
        let r = ratio(us(s.connects.p99()), us(w.connects.p99()));
        self.row(
            "Sealed: connect to `session_ack` p99",
            a,
            b,
            r,
            Target::Info,
        );
        self.row(
            "Sealed: daemon CPU time per connect",
            fmt_us_tenths(s.cpu_per_connect),
            format!("wss {}", fmt_us_tenths(w.cpu_per_connect)),
            ratio(us(s.cpu_per_connect), us(w.cpu_per_connect)),
            Target::Info,
        );
    }

    pub fn sessions(&mut self, s: &Sessions) {
        for step in &s.steps {
            let grown = step.rss.saturating_sub(s.baseline_rss) as f64;
            let per = grown / step.sessions.max(1) as f64;
            self.row(
                &format!(
                    "Daemon RSS, {} idle sessions (20 tools each)",
                    step.sessions
                ),
                format!(
                    "{:.1} MiB ({:.1} KiB/session)",
                    step.rss as f64 / MIB,
                    per / 1024.0
                ),
                format!("idle daemon {:.1} MiB", s.baseline_rss as f64 / MIB),
                None,
                Target::Info,
            );
            let rate = step.connected as f64 / step.connect_time.as_secs_f64().max(1e-9);
            self.row(
                &format!("Connect rate, up to {} sessions", step.sessions),
                format!("{rate:.0} devices/s"),
                "—".to_owned(),
                None,
                Target::Info,
            );
        }
        if let Some(last) = s.steps.last() {
            let projected = s.baseline_rss as f64
                + (last.rss.saturating_sub(s.baseline_rss) as f64 / last.sessions.max(1) as f64)
                    * 10_000.0;
            self.row(
                "Daemon RSS at 10,000 sessions",
                format!("{:.1} MiB", projected / MIB),
                "400 MiB".to_owned(),
                ratio(projected, 400.0 * MIB),
                Target::Max(1.0),
            );
        }
        if let Some(note) = &s.note {
            self.notes.push(note.clone());
        }
    }

    pub fn cli(&mut self, cli: &Sample, node: &Sample) {
        self.row(
            "CLI `appduct tools call` (whole process), p50",
            fmt_us(cli.p50()),
            format!("`node -e ''` {}", fmt_us(node.p50())),
            ratio(us(cli.p50()), us(node.p50())),
            Target::Max(0.05),
        );
    }

    pub fn mcp(&mut self, via_mcp: &Sample, raw: &Sample, list_chars: usize) {
        let overhead = via_mcp.p50().saturating_sub(raw.p50());
        self.row(
            "MCP `appduct_call_tool` overhead, p50",
            fmt_us(overhead),
            format!(
                "MCP {} − raw control call {}",
                fmt_us(via_mcp.p50()),
                fmt_us(raw.p50())
            ),
            ratio(us(overhead), 200.0),
            Target::Max(1.0),
        );
        self.row(
            "MCP `tools/list` size",
            format!("{list_chars} characters"),
            "—".to_owned(),
            None,
            Target::Info,
        );
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{BEGIN}");
        let _ = writeln!(out, "Run: {}", run_stamp());
        let _ = writeln!(out, "Machine: {}", machine());
        let _ = writeln!(out, "Command: `{}`", command_line(&self.command));
        if self.smoke {
            let _ = writeln!(
                out,
                "\n**Smoke run: small counts, figures not meaningful.**"
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "| Figure | appduct | Baseline (same run) | Ratio | Target | Met |"
        );
        let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- |");
        for row in &self.rows {
            let ratio = match row.target {
                Target::CountMax(_) => "—".to_owned(),
                _ => row.ratio.map_or("—".to_owned(), |r| format!("{r:.2}×")),
            };
            let (target, met) = match (row.target, row.ratio) {
                (Target::CountMax(t), Some(r)) => (format!("≤ {t}"), yes_no(r <= t)),
                (Target::CountMax(t), None) => (format!("≤ {t}"), "—"),
                (Target::Max(t), Some(r)) => (format!("≤ {t}×"), yes_no(r <= t)),
                (Target::Min(t), Some(r)) => (format!("≥ {t}×"), yes_no(r >= t)),
                (Target::Max(t), None) => (format!("≤ {t}×"), "—"),
                (Target::Min(t), None) => (format!("≥ {t}×"), "—"),
                (Target::Info, _) => ("—".to_owned(), "—"),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                row.figure, row.appduct, row.baseline, ratio, target, met
            );
        }
        let _ = writeln!(out);
        for note in &self.notes {
            let _ = writeln!(out, "{note}");
            let _ = writeln!(out);
        }
        let _ = write!(out, "{END}");
        out
    }
}

fn yes_no(met: bool) -> &'static str {
    if met { "yes" } else { "**no**" }
}

/// The command to reproduce: `scripts/bench` adds `--out BENCHMARKS.md` itself.
fn command_line(args: &str) -> String {
    let mut shown = vec!["scripts/bench"];
    let mut words = args.split_whitespace();
    while let Some(word) = words.next() {
        if word == "--out" {
            words.next();
        } else {
            shown.push(word);
        }
    }
    shown.join(" ")
}

fn capture(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn run_stamp() -> String {
    let date = capture("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
    let commit = capture("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_default();
    let dirty = capture("git", &["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|s| !s.is_empty());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default();
    format!(
        "{date}, commit {commit}{}, load average {load} at the end",
        if dirty { " (with local changes)" } else { "" }
    )
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(String::new(), |kb| format!(", {} GiB", kb / (1024 * 1024)));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| format!(", Linux {}", k.trim()))
        .unwrap_or_default();
    format!("{cpu}, {cores} cores{mem}{kernel}")
}

/// Writes `table` into `path` between the markers, keeping everything around them; a file
/// without markers gets the table appended.
pub fn write_into(path: &Path, table: &str) -> BenchResult<()> {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if b < e => {
            format!("{}{table}{}", &old[..b], &old[e + END.len()..])
        }
        _ => format!("{old}{}{table}\n", if old.is_empty() { "" } else { "\n" }),
    };
    std::fs::write(path, new).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_table_replaces_the_old_one_and_keeps_the_notes() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("B.md");
        std::fs::write(&path, format!("# Head\n{BEGIN}\nold\n{END}\nnotes\n"))
            .unwrap_or_else(|e| panic!("{e}"));
        write_into(&path, &format!("{BEGIN}\nnew\n{END}")).unwrap_or_else(|e| panic!("{e}"));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(text, format!("# Head\n{BEGIN}\nnew\n{END}\nnotes\n"));
    }

    #[test]
    fn the_command_shown_drops_the_output_file() {
        assert_eq!(command_line("--out BENCHMARKS.md"), "scripts/bench");
        assert_eq!(
            command_line("--only calls --out x.md"),
            "scripts/bench --only calls"
        );
        assert_eq!(command_line(""), "scripts/bench");
    }
}
