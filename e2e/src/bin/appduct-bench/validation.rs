//! `--only validation` (issue #18 item 5, §C10.8): the cost of the daemon's argument validation
//! per call. One daemon, one device whose `echo` declares a realistic input schema (the one the
//! TypeScript SDK exports for a four-field zod object: types, a length bound, an enum, a
//! required list, no other keys) that every measured call's arguments satisfy. Phases with
//! `validation.arguments` `"off"` and `"enforce"` alternate on the same daemon (switched by
//! `daemon.reload`), so both see the same session, the same warm caches and the same load of
//! the machine; each phase reports its throughput with 8 calls in flight and the daemon's CPU
//! time per call. The figures go to stderr; BENCHMARKS.md quotes them.

use std::time::Duration;

use appduct_sdk::{CallContext, Client, SpkiPin, ToolError};
use serde_json::{Value, json};

use crate::devices::Ctl;
use crate::load::{BenchResult, uds_load};
use crate::stats::Sample;
use crate::{Counts, Daemon, WINDOW, call_args, call_line, cpu_time, per_call};

/// Off/enforce pairs; the order alternates so neither mode always runs first.
const PAIRS: usize = 3;

/// The input schema of the measured `echo`: what zod 4 exports for
/// `z.object({text: z.string().max(200), count: z.number().int(), flag: z.boolean(),
/// mode: z.enum(["fast", "safe"]).optional()}).strict()`.
fn schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "text": {"type": "string", "maxLength": 200},
            "count": {"type": "integer", "minimum": -9007199254740991_i64,
                      "maximum": 9007199254740991_i64},
            "flag": {"type": "boolean"},
            "mode": {"type": "string", "enum": ["fast", "safe"]}
        },
        "required": ["text", "count", "flag"],
        "additionalProperties": false
    })
}

/// One phase: the mode, its windowed sample and the daemon's CPU time per call.
pub struct Phase {
    pub enforce: bool,
    pub sample: Sample,
    pub cpu_per_call: Duration,
}

pub async fn measure(counts: &Counts) -> BenchResult<Vec<Phase>> {
    let daemon = Daemon::start()?;
    let socket = daemon.socket();
    let config = daemon.sandbox.state_dir().join("config.json");
    let mut ctl = Ctl::connect(&socket).await?;
    let link = ctl.result("link.create", json!({})).await?;
    let payload = link["deepLinkPayload"]
        .as_str()
        .ok_or_else(|| format!("no payload in {link}"))?;
    let pin = SpkiPin::parse(link["pin"].as_str().unwrap_or_default())
        .map_err(|e| format!("pin: {e}"))?;
    let client = Client::builder()
        .pins([pin])
        .device(Some("Bench"), Some("Bench device"), Some("Linux"))
        .build()
        .map_err(|e| e.to_string())?;
    client
        .register_tool(
            &json!({"name": "echo", "description": "Returns its arguments.",
                    "input_schema": schema(), "output_schema": {"type": "object"}}),
            |args: Value, _ctx: CallContext| async move { Ok::<_, ToolError>(args) },
        )
        .map_err(|e| e.to_string())?;
    let sid = client
        .connect(payload)
        .await
        .map_err(|e| format!("connect: {e}"))?
        .session_id;
    crate::devices::wait_registries(
        &mut ctl,
        &[crate::devices::Connected {
            client: client.clone(),
            session_id: sid.clone(),
        }],
        1,
    )
    .await?;
    let args = call_args().to_string();
    let line = |id| call_line(id, &sid, &args);
    let mut phases = Vec::with_capacity(2 * PAIRS);
    for pair in 0..PAIRS {
        let order = if pair % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for enforce in order {
            let mode = if enforce { "enforce" } else { "off" };
            let text = format!(
                r#"{{"wssPort": 0, "advertisedIp": "127.0.0.1", "validation": {{"arguments": "{mode}"}}}}"#
            );
            std::fs::write(&config, text).map_err(|e| e.to_string())?;
            ctl.result("daemon.reload", json!({})).await?;
            uds_load(&socket, counts.warmup, WINDOW, line).await?;
            let before = cpu_time(daemon.proc.pid())?;
            let sample = uds_load(&socket, counts.windowed, WINDOW, line).await?;
            let cpu_per_call = per_call(cpu_time(daemon.proc.pid())? - before, &sample);
            phases.push(Phase {
                enforce,
                sample,
                cpu_per_call,
            });
        }
    }
    client.disconnect();
    drop(ctl);
    drop(daemon);
    Ok(phases)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// One line: each phase, then the medians and the enforce/off ratios.
pub fn summary(phases: &[Phase]) -> String {
    let pick = |enforce: bool, f: &dyn Fn(&Phase) -> f64| {
        median(
            phases
                .iter()
                .filter(|p| p.enforce == enforce)
                .map(f)
                .collect(),
        )
    };
    let rate = |p: &Phase| p.sample.rate();
    let cpu = |p: &Phase| p.cpu_per_call.as_secs_f64() * 1e6;
    let p50 = |p: &Phase| p.sample.p50().as_secs_f64() * 1e6;
    let each: Vec<String> = phases
        .iter()
        .map(|p| {
            format!(
                "{} {:.0}/s cpu {:.1} µs p50 {:.0} µs",
                if p.enforce { "enforce" } else { "off" },
                rate(p),
                cpu(p),
                p50(p)
            )
        })
        .collect();
    let (rate_on, rate_off) = (pick(true, &rate), pick(false, &rate));
    let (cpu_on, cpu_off) = (pick(true, &cpu), pick(false, &cpu));
    let (p50_on, p50_off) = (pick(true, &p50), pick(false, &p50));
    format!(
        "{}; medians: off {rate_off:.0}/s cpu {cpu_off:.1} µs p50 {p50_off:.0} µs, enforce {rate_on:.0}/s cpu {cpu_on:.1} µs p50 {p50_on:.0} µs; enforce/off: throughput {:.3}, cpu per call {:.3}, p50 {:.3}",
        each.join(", "),
        rate_on / rate_off.max(f64::MIN_POSITIVE),
        cpu_on / cpu_off.max(f64::MIN_POSITIVE),
        p50_on / p50_off.max(f64::MIN_POSITIVE),
    )
}
