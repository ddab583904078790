//! The sealed transport (issue #23) against wss, on one daemon in the same run.
//!
//! - Calls: one `appduct-sdk` device claimed over wss and one over the sealed route (a link
//!   minted with `transport: "sealed"`, as `appduct sessions link --for react-native` does),
//!   the same echo tool, the same callers, measured back to back.
//! - Handshakes: sequential connects of fresh devices, each from its own link, timed from the
//!   start of `Client::connect` to its return (the `session_ack`): TCP + TLS + upgrade for wss,
//!   TCP + plain upgrade + Noise NK for sealed, then the claim. Blocks of each transport
//!   alternate so a change in the machine's load falls on both. Devices stay connected until the
//!   end, so no disconnect work falls into a later block.
//!
//! Daemon CPU time comes from `/proc/<pid>/task/*/schedstat` (nanoseconds, per thread): a
//! connect costs well under a millisecond of daemon CPU, below the 10 ms ticks of
//! `/proc/<pid>/stat`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use appduct_sdk::SpkiPin;
use serde_json::json;

use crate::devices::{self, Connected, Ctl};
use crate::load::{BenchResult, uds_load};
use crate::stats::Sample;
use crate::{Counts, Daemon, WINDOW, call_args, call_line};

/// One transport's link kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Wss,
    Sealed,
}

impl Kind {
    fn params(self) -> serde_json::Value {
        match self {
            Kind::Wss => json!({}),
            Kind::Sealed => json!({"transport": "sealed"}),
        }
    }
}

/// One transport's figures.
#[derive(Debug, Default)]
pub struct Side {
    pub single: Sample,
    pub windowed: Sample,
    /// Daemon CPU time per call over the windowed run.
    pub cpu_per_call: Duration,
    /// Connect-to-`session_ack` latencies.
    pub connects: Sample,
    /// Daemon CPU time per connect.
    pub cpu_per_connect: Duration,
}

#[derive(Debug, Default)]
pub struct Figures {
    pub wss: Side,
    pub sealed: Side,
}

/// CPU time (user + system) of each live thread of a process, by thread id.
struct Threads(HashMap<u64, u64>);

impl Threads {
    fn read(pid: u32) -> BenchResult<Self> {
        let dir = format!("/proc/{pid}/task");
        let mut threads = HashMap::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))? {
            let entry = entry.map_err(|e| e.to_string())?;
            let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            // A thread may end between the listing and the read.
            let Ok(text) = std::fs::read_to_string(entry.path().join("schedstat")) else {
                continue;
            };
            if let Some(ns) = text.split_whitespace().next().and_then(|n| n.parse().ok()) {
                threads.insert(tid, ns);
            }
        }
        Ok(Self(threads))
    }

    /// CPU time used since `before` by the threads alive now. A blocking-pool thread that
    /// ended in between had been idle for 10 s, so what it used in the interval is lost only
    /// for intervals that long.
    fn since(&self, before: &Threads) -> Duration {
        let ns = self
            .0
            .iter()
            .map(|(tid, ns)| ns.saturating_sub(before.0.get(tid).copied().unwrap_or(0)))
            .sum();
        Duration::from_nanos(ns)
    }
}

/// Mints one link of `kind`: the payload and, for wss, its pin.
async fn mint(ctl: &mut Ctl, kind: Kind) -> BenchResult<(String, Option<SpkiPin>)> {
    let link = ctl.result("link.create", kind.params()).await?;
    let payload = link["deepLinkPayload"]
        .as_str()
        .ok_or_else(|| format!("no payload in {link}"))?
        .to_owned();
    let pin = match kind {
        Kind::Wss => Some(
            SpkiPin::parse(link["pin"].as_str().unwrap_or_default())
                .map_err(|e| format!("pin: {e}"))?,
        ),
        Kind::Sealed => {
            if link["transport"] != "sealed" {
                return Err(format!("not a sealed link: {link}"));
            }
            None
        }
    };
    Ok((payload, pin))
}

/// Connects one device (`tools` tools) to a fresh link of `kind`; the connect's latency is
/// from the start of `Client::connect` to its return.
async fn connect(ctl: &mut Ctl, kind: Kind, tools: usize) -> BenchResult<(Connected, Duration)> {
    let (payload, pin) = mint(ctl, kind).await?;
    let client = devices::device(pin.as_ref(), tools)?;
    let t0 = Instant::now();
    let info = client
        .connect(&payload)
        .await
        .map_err(|e| format!("{kind:?} connect: {e}"))?;
    let took = t0.elapsed();
    Ok((
        Connected {
            client,
            session_id: info.session_id,
        },
        took,
    ))
}

/// Both transports on one fresh daemon: calls, then handshakes.
pub async fn measure(counts: &Counts) -> BenchResult<Figures> {
    let args = call_args().to_string();
    let daemon = Daemon::start()?;
    let socket = daemon.socket();
    let pid = daemon.proc.pid();
    let mut ctl = Ctl::connect(&socket).await?;
    let mut figures = Figures::default();

    // -- Calls ----------------------------------------------------------------------------
    let (wss, _) = connect(&mut ctl, Kind::Wss, 1).await?;
    let (sealed, _) = connect(&mut ctl, Kind::Sealed, 1).await?;
    let pair = [wss, sealed];
    devices::wait_registries(&mut ctl, &pair, 1).await?;
    for device in &pair {
        let line = |id| call_line(id, &device.session_id, &args);
        uds_load(&socket, counts.warmup, WINDOW, line).await?;
    }
    // Each figure in two halves, wss, sealed, sealed, wss: a drift in the machine's load
    // during the run, or warming, falls on both sides alike.
    let abba = [0, 1, 1, 0];
    let mut single: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
    let mut single_wall = [Duration::ZERO; 2];
    for i in abba {
        let line = |id| call_line(id, &pair[i].session_id, &args);
        let started = Instant::now();
        single[i].push(uds_load(&socket, counts.single / 2, 1, line).await?);
        single_wall[i] += started.elapsed();
    }
    let mut windowed: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
    let mut windowed_wall = [Duration::ZERO; 2];
    let mut used = [Duration::ZERO; 2];
    for i in abba {
        let line = |id| call_line(id, &pair[i].session_id, &args);
        let before = Threads::read(pid)?;
        let started = Instant::now();
        windowed[i].push(uds_load(&socket, counts.windowed / 2, WINDOW, line).await?);
        windowed_wall[i] += started.elapsed();
        used[i] += Threads::read(pid)?.since(&before);
    }
    let [single_wss, single_sealed] = single;
    let [windowed_wss, windowed_sealed] = windowed;
    for (i, side, single, windowed) in [
        (0, &mut figures.wss, single_wss, windowed_wss),
        (1, &mut figures.sealed, single_sealed, windowed_sealed),
    ] {
        side.single = Sample::merge(single, single_wall[i]);
        side.windowed = Sample::merge(windowed, windowed_wall[i]);
        side.cpu_per_call = crate::per_call(used[i], &side.windowed);
    }

    // -- Handshakes -----------------------------------------------------------------------
    let block = counts.handshake_block;
    let mut held = Vec::new();
    let mut lat: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut cpu = [Duration::ZERO; 2];
    let mut wall = [Duration::ZERO; 2];
    for round in 0..counts.handshake_blocks {
        // Alternate which transport goes first in a round.
        let order = if round % 2 == 0 {
            [Kind::Wss, Kind::Sealed]
        } else {
            [Kind::Sealed, Kind::Wss]
        };
        for kind in order {
            let i = usize::from(kind == Kind::Sealed);
            // Links are minted before the block, so the block's CPU is connects only.
            let mut links = Vec::with_capacity(block);
            for _ in 0..block {
                let (payload, pin) = mint(&mut ctl, kind).await?;
                links.push((payload, devices::device(pin.as_ref(), 1)?));
            }
            let started = Instant::now();
            let before = Threads::read(pid)?;
            for (payload, client) in links {
                let t0 = Instant::now();
                let info = client
                    .connect(&payload)
                    .await
                    .map_err(|e| format!("{kind:?} connect: {e}"))?;
                lat[i].push(t0.elapsed());
                held.push(Connected {
                    client,
                    session_id: info.session_id,
                });
            }
            // The last device's registry follows its ack: let the daemon take it in this block.
            devices::wait_registries(&mut ctl, &held[held.len() - 1..], 1).await?;
            cpu[i] += Threads::read(pid)?.since(&before);
            wall[i] += started.elapsed();
        }
    }
    let connects = (counts.handshake_blocks * block).max(1);
    let [lat_wss, lat_sealed] = lat;
    figures.wss.connects = Sample::new(lat_wss, wall[0]);
    figures.sealed.connects = Sample::new(lat_sealed, wall[1]);
    let per = |d: Duration| d / u32::try_from(connects).unwrap_or(u32::MAX);
    figures.wss.cpu_per_connect = per(cpu[0]);
    figures.sealed.cpu_per_connect = per(cpu[1]);

    crate::disconnect(held);
    crate::disconnect(Vec::from(pair));
    drop(ctl);
    drop(daemon);
    Ok(figures)
}

/// One line of JSON on stderr per run, for aggregating several runs (BENCHMARKS.md).
pub fn summary(f: &Figures) -> String {
    let side = |s: &Side| {
        json!({
            "single_p50_us": crate::stats::us(s.single.p50()),
            "single_p99_us": crate::stats::us(s.single.p99()),
            "windowed_rate": s.windowed.rate(),
            "windowed_p50_us": crate::stats::us(s.windowed.p50()),
            "cpu_per_call_us": crate::stats::us(s.cpu_per_call),
            "connect_p50_us": crate::stats::us(s.connects.p50()),
            "connect_p99_us": crate::stats::us(s.connects.p99()),
            "connects": s.connects.count(),
            "cpu_per_connect_us": crate::stats::us(s.cpu_per_connect),
        })
    };
    json!({"wss": side(&f.wss), "sealed": side(&f.sealed)}).to_string()
}
