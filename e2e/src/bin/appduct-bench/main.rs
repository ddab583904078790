//! `appduct-bench`: every figure of BENCHMARKS.md, each against its baseline measured in the
//! same run (ratios, never absolute times: the machine is shared and noisy).
//!
//! - Calls through the daemon (control socket → wss → `appduct-sdk` device → back) against the
//!   floor, a raw Unix-socket line echo plus a raw loopback wss echo with the same payload.
//! - The same calls through a minimal Node relay (`e2e/node-relay`, `ws` + `net`).
//! - Idle sessions: daemon RSS per session and connect rate at 1,000 and 10,000 devices.
//! - Whole-process `appduct tools call` against `node -e ''`.
//! - The sealed transport (issue #23) against wss on one daemon: calls, daemon CPU per call,
//!   connect-to-`session_ack` latency and daemon CPU per connect (`sealed.rs`).
//! - `appduct_call_tool` through `appduct mcp` over the raw control call; the size of the
//!   bridge's `tools/list`.
//! - The daemon's allocations per call, from a counting build named by
//!   `APPDUCT_COUNT_ALLOCS_BIN` (`allocs.rs`; skipped when unset, except with `--only allocs`).
//!
//! - `--only control`: the control socket's share of a call (single caller and 8 in flight:
//!   daemon CPU per call, calls/s, p50/p99; with `APPDUCT_BENCH_STRACE=1` also `epoll_wait`
//!   returns and system calls per call under strace), for A/B runs of two daemon builds
//!   (`control.rs`; stderr only, quoted in BENCHMARKS.md).
//! - `--only validation`: the daemon's argument validation (§C10.8) on and off, alternating on
//!   one daemon (`validation.rs`; stderr only, quoted in BENCHMARKS.md).
//!
//! Usage: `appduct-bench [--smoke] [--only calls|control|sessions|mcp|sealed|allocs|validation] [--out BENCHMARKS.md]`,
//! with `APPDUCT_BIN` naming the release `appduct` (see `scripts/bench`). `--smoke` runs small counts in well under a minute
//! and checks nothing but that every workload completes (CI).

mod allocs;
mod control;
mod devices;
mod echo;
mod load;
mod mcp;
mod pictures;
mod report;
mod sealed;
mod stats;
mod validation;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use appduct_e2e::harness::{Proc, Sandbox};
use serde_json::{Value, json};

use crate::devices::{Connected, Ctl};
use crate::load::{BenchResult, uds_load, uds_load_parallel, ws_load};
use crate::report::Report;
use crate::stats::Sample;

/// Loopback advertised so the SDK's private-LAN rule accepts the links; port 0 for wss.
const CONFIG: &str = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#;
/// Calls in flight of the concurrent workloads.
const WINDOW: usize = 8;
/// Concurrent callers of the many-devices workload.
const CALLERS: usize = 8;
/// Tools per device of the sessions workload.
const SESSION_TOOLS: usize = 20;
/// Claims in flight while connecting many devices (the daemon allows 128 before a claim).
const CONNECT_PARALLEL: usize = 64;

/// How much of everything to run.
#[derive(Debug, Clone)]
struct Counts {
    smoke: bool,
    warmup: usize,
    single: usize,
    windowed: usize,
    devices: usize,
    per_caller: usize,
    sessions: Vec<usize>,
    cli_runs: usize,
    mcp_calls: usize,
    /// Sealed against wss: connects per block and blocks per transport.
    handshake_block: usize,
    handshake_blocks: usize,
}

impl Counts {
    fn full() -> Self {
        Self {
            smoke: false,
            warmup: 1_000,
            single: 10_000,
            windowed: 40_000,
            devices: 100,
            per_caller: 5_000,
            sessions: vec![1_000, 10_000],
            cli_runs: 40,
            mcp_calls: 2_000,
            handshake_block: 50,
            handshake_blocks: 4,
        }
    }

    fn smoke() -> Self {
        Self {
            smoke: true,
            warmup: 20,
            single: 200,
            windowed: 400,
            devices: 10,
            per_caller: 50,
            sessions: vec![20, 50],
            cli_runs: 3,
            mcp_calls: 30,
            handshake_block: 3,
            handshake_blocks: 2,
        }
    }
}

struct Options {
    counts: Counts,
    out: Option<PathBuf>,
    /// `--only calls`, `--only sessions`, `--only mcp`, `--only sealed` or `--only allocs`: one
    /// part of the run
    /// (profiling, iterating).
    only: Option<String>,
}

fn usage() -> String {
    "usage: appduct-bench [--smoke] [--only calls|control|sessions|mcp|sealed|pictures|allocs|validation] \
     [--out BENCHMARKS.md]   (APPDUCT_BIN names the appduct binary, APPDUCT_COUNT_ALLOCS_BIN \
     its count-allocs build)"
        .to_owned()
}

fn parse_args(args: &[String]) -> BenchResult<Options> {
    let mut options = Options {
        counts: Counts::full(),
        out: None,
        only: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--smoke" => options.counts = Counts::smoke(),
            "--out" => options.out = Some(PathBuf::from(it.next().ok_or_else(usage)?)),
            "--only" => match it.next().map(String::as_str) {
                Some(
                    part @ ("calls" | "control" | "sessions" | "mcp" | "sealed" | "pictures"
                    | "allocs" | "validation"),
                ) => options.only = Some(part.to_owned()),
                _ => return Err(usage()),
            },
            _ => return Err(usage()),
        }
    }
    Ok(options)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("--echo-server") => match args.get(1) {
            Some(dir) => runtime().and_then(|rt| rt.block_on(echo::serve(Path::new(dir)))),
            None => Err(usage()),
        },
        _ => parse_args(&args)
            .and_then(|options| runtime().and_then(|rt| rt.block_on(run(options, args.join(" "))))),
    };
    if let Err(e) = outcome {
        eprintln!("appduct-bench: {e}");
        std::process::exit(1);
    }
}

fn runtime() -> BenchResult<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))
}

/// Arguments of every measured call: about 100 bytes of JSON.
fn call_args() -> Value {
    json!({"text": "The quick brown fox jumps over the lazy dog, twice over.", "count": 42,
           "flag": true})
}

/// One `tools.call` request line to `selector`.
fn call_line(id: u64, selector: &str, args: &str) -> Vec<u8> {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools.call\",\"params\":{{\"selector\":\"{selector}\",\"name\":\"echo\",\"args\":{args}}}}}\n"
    )
    .into_bytes()
}

/// A `tool_call` frame like the one the daemon writes for [`call_line`].
fn call_frame(id: u64, session_id: &str, args: &str) -> String {
    format!(
        "{{\"type\":\"tool_call\",\"id\":\"{id}\",\"session_id\":\"{session_id}\",\"name\":\"echo\",\"args\":{args}}}"
    )
}

/// Raises the soft descriptor limit to the hard one (the daemon inherits it); returns it.
fn raise_nofile() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        );
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// CPU time (user + system) the process `pid` has used so far. Unlike wall-clock rates this
/// hardly moves with the load of a shared machine, so it compares runs taken minutes apart.
fn cpu_time(pid: u32) -> BenchResult<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or("no ) in stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> BenchResult<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("/proc/{pid}/stat: no field {}", i + 3))
    };
    let total = ticks(11)? + ticks(12)?;
    // USER_HZ: /proc reports ticks of 1/100 s on every Linux architecture we run on.
    Ok(Duration::from_millis(total * 10))
}

/// CPU time spent per call of `sample`.
fn per_call(cpu: Duration, sample: &Sample) -> Duration {
    cpu / u32::try_from(sample.count().max(1)).unwrap_or(u32::MAX)
}

fn rss_bytes(pid: u32) -> BenchResult<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| "no VmRSS".to_owned())
}

fn node_relay_dir() -> PathBuf {
    std::env::var_os("APPDUCT_NODE_RELAY")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("node-relay"))
}

/// A started `appduct daemon run` in a fresh sandbox.
struct Daemon {
    sandbox: Sandbox,
    proc: Proc,
}

impl Daemon {
    fn start() -> BenchResult<Self> {
        let sandbox = Sandbox::with_config(CONFIG).map_err(|e| e.to_string())?;
        let (proc, _ready) = sandbox
            .spawn_ready(&["--json", "daemon", "run"])
            .map_err(|e| e.to_string())?;
        sandbox.track_pid(proc.pid());
        Ok(Self { sandbox, proc })
    }

    fn socket(&self) -> PathBuf {
        self.sandbox.state_dir().join("daemon.sock")
    }
}

async fn run(options: Options, command: String) -> BenchResult<()> {
    let counts = options.counts.clone();
    let nofile = raise_nofile();
    let mut report = Report::new(command, counts.smoke);
    let only = options.only.as_deref();
    if only == Some("mcp") {
        mcp_only(&counts, &mut report).await?;
    } else if only.is_none() || only == Some("calls") {
        calls(&counts, &mut report).await?;
    }
    let count_bin = std::env::var_os(allocs::BIN_ENV).map(PathBuf::from);
    if only == Some("allocs") || (only.is_none() || only == Some("calls")) && count_bin.is_some() {
        let bin = count_bin.ok_or_else(|| format!("--only allocs needs {}", allocs::BIN_ENV))?;
        let figures = allocs::measure(bin, &counts).await?;
        eprintln!(
            "appduct-bench: allocations per call: 8 in flight {:.1} ({:.1} realloc), single caller {:.1} ({:.1} realloc)",
            figures.windowed.total(),
            figures.windowed.reallocations,
            figures.single.total(),
            figures.single.reallocations
        );
        report.allocs(&figures);
    }
    if only.is_none() || only == Some("sealed") {
        let figures = sealed::measure(&counts).await?;
        eprintln!("appduct-bench: sealed {}", sealed::summary(&figures));
        report.sealed(&figures);
    }
    if only == Some("control") {
        let (phases, traced) = control::measure(&counts).await?;
        eprintln!("appduct-bench: {}", control::summary(&phases, &traced));
    }
    if only == Some("validation") {
        let phases = validation::measure(&counts).await?;
        eprintln!("appduct-bench: validation {}", validation::summary(&phases));
    }
    if only == Some("pictures") {
        // Issue #17: a 5 MiB image in parts; figures to stderr (BENCHMARKS.md, "Pictures").
        let runs = pictures::measure(if counts.smoke { 1 } else { 3 }).await?;
        eprintln!("appduct-bench: pictures\n{}", pictures::summary(&runs));
    }
    if only.is_none() || only == Some("sessions") {
        let sessions = sessions(&counts, nofile).await?;
        report.sessions(&sessions);
    }

    let text = report.render();
    println!("{text}");
    if let Some(out) = options.out {
        report::write_into(&out, &text)?;
        eprintln!("appduct-bench: wrote {}", out.display());
    }
    Ok(())
}

/// Every call workload: the floor, the daemon, the CLI, MCP, many devices, the Node relay.
async fn calls(counts: &Counts, report: &mut Report) -> BenchResult<()> {
    let args = call_args().to_string();
    eprintln!("appduct-bench: payload {} bytes of args", args.len());

    // -- The floor -------------------------------------------------------------------------
    let scratch = tempfile::Builder::new()
        .prefix("adb")
        .tempdir_in("/tmp")
        .map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut echo_cmd = Command::new(exe);
    echo_cmd
        .arg("--echo-server")
        .arg(scratch.path())
        .stdin(Stdio::null());
    let echo_proc = Proc::spawn(echo_cmd).map_err(|e| e.to_string())?;
    let ready = echo_proc
        .next_stdout_line(Duration::from_secs(10))
        .ok_or_else(|| format!("the echo server did not start: {}", echo_proc.stderr()))?;
    let ready: Value = serde_json::from_str(&ready).map_err(|e| format!("{e}: {ready}"))?;
    let wss_port = ready["wss"].as_u64().ok_or("no wss port")? as u16;
    let echo_sock = echo::uds_path(scratch.path());
    let floor = Floor::measure(&echo_sock, wss_port, echo_proc.pid(), counts, &args).await?;
    drop(echo_proc);
    report.floor(&floor);

    // -- The daemon, one device --------------------------------------------------------------
    let daemon = Daemon::start()?;
    let socket = daemon.socket();
    let mut ctl = Ctl::connect(&socket).await?;
    let (mut devices, _) = devices::connect_to_daemon(&mut ctl, 1, 1, 1).await?;
    devices::wait_registries(&mut ctl, &devices, 1).await?;
    let sid = devices[0].session_id.clone();
    let line = |id| call_line(id, &sid, &args);
    uds_load(&socket, counts.warmup, WINDOW, line).await?;
    let single = uds_load(&socket, counts.single, 1, line).await?;
    let cpu_before = cpu_time(daemon.proc.pid())?;
    let windowed = uds_load(&socket, counts.windowed, WINDOW, line).await?;
    let daemon_cpu = per_call(cpu_time(daemon.proc.pid())? - cpu_before, &windowed);
    report.daemon(&single, &windowed);

    // -- CLI against the warm daemon ---------------------------------------------------------
    let cli = cli_runs(&daemon.sandbox, counts.cli_runs, &sid, &args).await?;
    let node = node_runs(counts.cli_runs).await?;
    report.cli(&cli, &node);

    mcp_part(counts, report, &daemon, &sid, &args).await?;

    // -- Many devices, concurrent callers ----------------------------------------------------
    let (more, _) =
        devices::connect_to_daemon(&mut ctl, counts.devices - 1, 1, CONNECT_PARALLEL).await?;
    devices.extend(more);
    devices::wait_registries(&mut ctl, &devices, 1).await?;
    let many = many_devices(&socket, &devices, counts, &args).await?;
    report.many(&many);
    disconnect(devices);
    drop(ctl);
    drop(daemon);

    // -- The Node relay -----------------------------------------------------------------------
    let relay = NodeRelay::start(scratch.path()).await?;
    let relay_devices = devices::connect_to_relay(relay.port, &relay.pin, counts.devices).await?;
    let rsid = relay_devices[0].session_id.clone();
    let rline = |id| call_line(id, &rsid, &args);
    uds_load(&relay.socket, counts.warmup, WINDOW, rline).await?;
    let relay_single = uds_load(&relay.socket, counts.single, 1, rline).await?;
    let cpu_before = cpu_time(relay.proc.pid())?;
    let relay_windowed = uds_load(&relay.socket, counts.windowed, WINDOW, rline).await?;
    let relay_cpu = per_call(cpu_time(relay.proc.pid())? - cpu_before, &relay_windowed);
    let relay_many = many_devices(&relay.socket, &relay_devices, counts, &args).await?;
    report.relay(&relay_single, &relay_windowed, &relay_many);
    report.cpu_per_call(daemon_cpu, relay_cpu, floor.cpu_per_call());
    disconnect(relay_devices);
    drop(relay);
    Ok(())
}

/// `--only mcp`: one daemon, one device, the MCP figures alone.
async fn mcp_only(counts: &Counts, report: &mut Report) -> BenchResult<()> {
    let args = call_args().to_string();
    let daemon = Daemon::start()?;
    let mut ctl = Ctl::connect(&daemon.socket()).await?;
    let (devices, _) = devices::connect_to_daemon(&mut ctl, 1, 1, 1).await?;
    devices::wait_registries(&mut ctl, &devices, 1).await?;
    let sid = devices[0].session_id.clone();
    mcp_part(counts, report, &daemon, &sid, &args).await?;
    disconnect(devices);
    Ok(())
}

/// `appduct_call_tool` through `appduct mcp` against the raw control call, back to back.
async fn mcp_part(
    counts: &Counts,
    report: &mut Report,
    daemon: &Daemon,
    sid: &str,
    args: &str,
) -> BenchResult<()> {
    let socket = daemon.socket();
    let line = |id| call_line(id, sid, args);
    let mut mcp = mcp::Mcp::start(daemon.sandbox.command(&["mcp"])).await?;
    let listed = mcp.request("tools/list", json!({})).await?;
    let list_chars = listed.to_string().chars().count();
    mcp.call_tool_load(counts.warmup.min(200), sid, &call_args())
        .await?;
    let via_mcp = mcp
        .call_tool_load(counts.mcp_calls, sid, &call_args())
        .await?;
    let raw = uds_load(&socket, counts.mcp_calls, 1, line).await?;
    drop(mcp);
    report.mcp(&via_mcp, &raw, list_chars);
    Ok(())
}

fn disconnect(devices: Vec<Connected>) {
    for device in devices {
        device.client.disconnect();
    }
}

/// The raw echoes, single and windowed.
#[derive(Debug)]
pub struct Floor {
    pub uds_single: Sample,
    pub ws_single: Sample,
    /// The echo process's CPU time per message at 8 in flight: UDS line, wss frame.
    pub uds_cpu: Duration,
    pub ws_cpu: Duration,
    pub uds_windowed: Sample,
    pub ws_windowed: Sample,
}

impl Floor {
    async fn measure(
        socket: &Path,
        wss_port: u16,
        echo_pid: u32,
        counts: &Counts,
        args: &str,
    ) -> BenchResult<Self> {
        let line = |id| call_line(id, "s_floor", args);
        let frame = |id| call_frame(id, "s_floor", args);
        uds_load(socket, counts.warmup, WINDOW, line).await?;
        let uds_single = uds_load(socket, counts.single, 1, line).await?;
        let cpu_before = cpu_time(echo_pid)?;
        let uds_windowed = uds_load(socket, counts.windowed, WINDOW, line).await?;
        let uds_cpu = per_call(cpu_time(echo_pid)? - cpu_before, &uds_windowed);
        ws_load(wss(wss_port).await?, counts.warmup, WINDOW, frame).await?;
        let ws_single = ws_load(wss(wss_port).await?, counts.single, 1, frame).await?;
        let cpu_before = cpu_time(echo_pid)?;
        let ws_windowed = ws_load(wss(wss_port).await?, counts.windowed, WINDOW, frame).await?;
        let ws_cpu = per_call(cpu_time(echo_pid)? - cpu_before, &ws_windowed);
        Ok(Self {
            uds_single,
            ws_single,
            uds_cpu,
            ws_cpu,
            uds_windowed,
            ws_windowed,
        })
    }
}

impl Floor {
    /// The floor's own CPU time per call: the echo process's for one UDS line plus one wss
    /// frame, the two hops the daemon relays (issue #24: the load-insensitive figure).
    pub fn cpu_per_call(&self) -> Duration {
        self.uds_cpu + self.ws_cpu
    }
}

/// A wss socket to the echo, opened the way the SDK opens its device socket.
async fn wss(port: u16) -> BenchResult<appduct_sdk::transport::DeviceSocket> {
    use appduct_sdk::core::Endpoint;
    use appduct_sdk::transport::{DialOptions, dial};
    let endpoint = Endpoint {
        transport: appduct_sdk::Transport::Native,
        address: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        port,
        pins: Vec::new(),
        sealed_key: None,
    };
    let options = DialOptions {
        skip_pin_check: true,
        ..DialOptions::default()
    };
    dial(&endpoint, &options)
        .await
        .map_err(|e| format!("wss echo: {e}"))
}

/// [`CALLERS`] connections, one call in flight each, spread round-robin over every device.
async fn many_devices(
    socket: &Path,
    devices: &[Connected],
    counts: &Counts,
    args: &str,
) -> BenchResult<Sample> {
    let ids: std::sync::Arc<Vec<String>> =
        std::sync::Arc::new(devices.iter().map(|d| d.session_id.clone()).collect());
    let args = std::sync::Arc::new(args.to_owned());
    let request = move |worker: usize, id: u64| {
        let device = (worker + id as usize * CALLERS) % ids.len();
        call_line(id, &ids[device], &args)
    };
    uds_load_parallel(
        socket,
        CALLERS,
        counts.warmup / CALLERS + 1,
        1,
        request.clone(),
    )
    .await?;
    uds_load_parallel(socket, CALLERS, counts.per_caller, 1, request).await
}

/// Whole-process `appduct tools call` runs.
async fn cli_runs(sb: &Sandbox, runs: usize, sid: &str, args: &str) -> BenchResult<Sample> {
    let mut latencies = Vec::with_capacity(runs);
    let start = Instant::now();
    for _ in 0..runs + 1 {
        let mut cmd = sb.command(&["--json", "tools", "call", sid, "echo", "--input", args]);
        let took = timed(&mut cmd).await?;
        latencies.push(took);
    }
    latencies.remove(0); // the first run warms the page cache
    Ok(Sample::new(latencies, start.elapsed()))
}

async fn node_runs(runs: usize) -> BenchResult<Sample> {
    let mut latencies = Vec::with_capacity(runs);
    let start = Instant::now();
    for _ in 0..runs + 1 {
        let mut cmd = Command::new("node");
        cmd.args(["-e", ""]).stdin(Stdio::null());
        latencies.push(timed(&mut cmd).await?);
    }
    latencies.remove(0);
    Ok(Sample::new(latencies, start.elapsed()))
}

/// Runs `cmd` to completion on the blocking pool; its wall time, from spawn to exit.
async fn timed(cmd: &mut Command) -> BenchResult<Duration> {
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut cmd = std::mem::replace(cmd, Command::new("true"));
    tokio::task::spawn_blocking(move || {
        let t0 = Instant::now();
        let out = cmd.output().map_err(|e| format!("spawn: {e}"))?;
        let took = t0.elapsed();
        if out.status.success() {
            Ok(took)
        } else {
            Err(format!(
                "{:?} failed: {}",
                cmd.get_program(),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    })
    .await
    .map_err(|e| e.to_string())?
}

/// The Node relay child and how to reach it.
struct NodeRelay {
    proc: Proc,
    socket: PathBuf,
    port: u16,
    pin: appduct_sdk::SpkiPin,
}

impl NodeRelay {
    async fn start(scratch: &Path) -> BenchResult<Self> {
        let dir = node_relay_dir();
        if !dir.join("node_modules").join("ws").is_dir() {
            return Err(format!(
                "{}/node_modules is missing: run `npm ci` there first",
                dir.display()
            ));
        }
        let cert = echo::Cert::generate()?;
        let (cert_path, key_path) = (scratch.join("relay.crt"), scratch.join("relay.key"));
        std::fs::write(&cert_path, &cert.cert_pem).map_err(|e| e.to_string())?;
        std::fs::write(&key_path, &cert.key_pem).map_err(|e| e.to_string())?;
        let socket = scratch.join("relay.sock");
        let mut cmd = Command::new("node");
        cmd.arg(dir.join("relay.mjs"))
            .arg(&socket)
            .arg(&cert_path)
            .arg(&key_path)
            .stdin(Stdio::null());
        let proc = Proc::spawn(cmd).map_err(|e| e.to_string())?;
        let ready = proc
            .next_stdout_line(Duration::from_secs(15))
            .ok_or_else(|| format!("the Node relay did not start: {}", proc.stderr()))?;
        let ready: Value = serde_json::from_str(&ready).map_err(|e| format!("{e}: {ready}"))?;
        Ok(Self {
            proc,
            socket,
            port: ready["port"].as_u64().ok_or("no relay port")? as u16,
            pin: cert.pin()?,
        })
    }
}

/// One step of the sessions workload.
#[derive(Debug)]
pub struct SessionStep {
    pub sessions: usize,
    pub rss: u64,
    /// Devices connected in this step and the time their connects took.
    pub connected: usize,
    pub connect_time: Duration,
}

/// Idle sessions on a fresh daemon, growing through `counts.sessions`.
#[derive(Debug)]
pub struct Sessions {
    pub baseline_rss: u64,
    pub steps: Vec<SessionStep>,
    pub note: Option<String>,
}

async fn sessions(counts: &Counts, nofile: u64) -> BenchResult<Sessions> {
    let daemon = Daemon::start()?;
    let socket = daemon.socket();
    let mut ctl = Ctl::connect(&socket).await?;
    // Both ends of every session live on this machine: each side needs one descriptor.
    let fit = (nofile.saturating_sub(200)) as usize;
    let mut note = None;
    let baseline_rss = rss_bytes(daemon.proc.pid())?;
    let mut all: Vec<Connected> = Vec::new();
    let mut steps = Vec::new();
    for &target in &counts.sessions {
        let target = if target > fit {
            note = Some(format!(
                "{target} sessions need {target} descriptors per process; the limit is {nofile}"
            ));
            fit
        } else {
            target
        };
        let add = target.saturating_sub(all.len());
        let (more, took) =
            devices::connect_to_daemon(&mut ctl, add, SESSION_TOOLS, CONNECT_PARALLEL).await?;
        devices::wait_registries(&mut ctl, &more, SESSION_TOOLS).await?;
        all.extend(more);
        let rss = rss_bytes(daemon.proc.pid())?;
        eprintln!(
            "appduct-bench: {} sessions, daemon RSS {} MiB, {add} connects in {took:?}",
            all.len(),
            rss / (1 << 20)
        );
        steps.push(SessionStep {
            sessions: all.len(),
            rss,
            connected: add,
            connect_time: took,
        });
    }
    disconnect(all);
    Ok(Sessions {
        baseline_rss,
        steps,
        note,
    })
}
