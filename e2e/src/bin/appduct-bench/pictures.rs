//! Issue #17: a 5 MiB image result crossing the daemon in `tool_result_part` frames, and what
//! it costs the daemon in memory (device.md §D17.3).
//!
//! One daemon, one `appduct-sdk` device over wss whose content tool returns a 5 MiB image (a
//! PNG signature and varied bytes) through `tools.call` on the control socket. Before each
//! transfer the daemon's peak RSS is reset (`5` written to `/proc/<pid>/clear_refs`), so
//! `VmHWM` after the call is the peak of that transfer alone; `VmRSS` is read before and after.
//! Reported as peak growth ÷ payload (decoded image bytes).

use std::time::Instant;

use appduct_sdk::{CallContext, Client, ContentBlock, ImageMimeType, SpkiPin, ToolOutput};
use serde_json::{Value, json};

use crate::Daemon;
use crate::devices::{Connected, Ctl, wait_registries};
use crate::load::BenchResult;

/// Decoded bytes of the image.
pub const PAYLOAD: usize = 5 * 1_048_576;

/// One transfer's figures, bytes.
#[derive(Debug, Clone, Copy)]
pub struct Transfer {
    pub rss_before: u64,
    pub peak: u64,
    pub rss_after: u64,
    pub millis: u128,
}

impl Transfer {
    /// (peak − RSS before) ÷ payload.
    pub fn peak_ratio(&self) -> f64 {
        self.peak.saturating_sub(self.rss_before) as f64 / PAYLOAD as f64
    }
}

fn status_kib(pid: u32, key: &str) -> BenchResult<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or_else(|| format!("no {key}"))
}

fn image() -> Vec<u8> {
    let mut png = vec![0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
    png.extend((8..PAYLOAD as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    png
}

/// `runs` transfers on one fresh daemon.
pub async fn measure(runs: usize) -> BenchResult<Vec<Transfer>> {
    let daemon = Daemon::start()?;
    let pid = daemon.proc.pid();
    let mut ctl = Ctl::connect(&daemon.socket()).await?;
    let link = ctl.result("link.create", json!({})).await?;
    let payload = link["deepLinkPayload"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let pin = SpkiPin::parse(link["pin"].as_str().unwrap_or_default())
        .map_err(|e| format!("pin: {e}"))?;
    let client = Client::builder()
        .pins([pin])
        .build()
        .map_err(|e| e.to_string())?;
    let png = image();
    client
        .register_content_tool(
            &json!({"name": "screenshot", "description": "A 5 MiB capture.",
                    "output_schema": {"type": "object"}, "timeout_ms": 120_000}),
            move |_args: Value, _ctx: CallContext| {
                let block = ContentBlock::image(&png, ImageMimeType::Png);
                async move { Ok(ToolOutput::content(vec![block])) }
            },
        )
        .map_err(|e| e.to_string())?;
    let info = client
        .connect(&payload)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let device = Connected {
        client,
        session_id: info.session_id.clone(),
    };
    wait_registries(&mut ctl, std::slice::from_ref(&device), 1).await?;
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
            .map_err(|e| format!("clear_refs: {e}"))?;
        let rss_before = status_kib(pid, "VmRSS:")? * 1024;
        let t0 = Instant::now();
        let result = ctl
            .result(
                "tools.call",
                json!({"selector": info.session_id, "name": "screenshot"}),
            )
            .await?;
        let millis = t0.elapsed().as_millis();
        let data = result["content"][0]["data"].as_str().unwrap_or_default();
        if data.len() != PAYLOAD.div_ceil(3) * 4 {
            return Err(format!(
                "the image arrived with {} base64 characters",
                data.len()
            ));
        }
        let peak = status_kib(pid, "VmHWM:")? * 1024;
        let rss_after = status_kib(pid, "VmRSS:")? * 1024;
        out.push(Transfer {
            rss_before,
            peak,
            rss_after,
            millis,
        });
    }
    drop(device);
    Ok(out)
}

/// One line per transfer, for stderr and BENCHMARKS.md.
pub fn summary(runs: &[Transfer]) -> String {
    let mib = |b: u64| b as f64 / 1_048_576.0;
    runs.iter()
        .map(|t| {
            format!(
                "RSS before {:.1} MiB, peak {:.1} MiB, after {:.1} MiB; peak growth {:.2}× payload; {} ms",
                mib(t.rss_before),
                mib(t.peak),
                mib(t.rss_after),
                t.peak_ratio(),
                t.millis
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
