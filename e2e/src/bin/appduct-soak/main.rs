//! `appduct-soak`: the soak run of issue #20 (`scripts/soak`; what it does and measures is in
//! `appduct_e2e::soak`). Prints the report as Markdown on stdout and exits 1 when an invariant
//! broke (settled ≠ audited, a misrouted call, an unexpected answer) or the daemon's RSS or
//! open descriptors grew past the thresholds.
//!
//! Usage: `appduct-soak [--minutes N | --seconds N] [--warmup-seconds N] [--devices N]
//! [--callers N] [--rss-limit PCT] [--fd-slack N] [--seed N] [--quiet]`, with `APPDUCT_BIN`
//! naming the `appduct` binary under test.

use std::time::Duration;

use appduct_e2e::soak::{self, Options};

fn usage() -> String {
    "usage: appduct-soak [--minutes N | --seconds N] [--warmup-seconds N] [--devices N] \
     [--callers N] [--rss-limit PCT] [--fd-slack N] [--seed N] [--quiet]   (APPDUCT_BIN names \
     the appduct binary)"
        .to_owned()
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut duration = Duration::from_secs(600);
    let mut warmup = None;
    let mut rest: Vec<(&str, &str)> = Vec::new();
    let mut quiet = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--quiet" {
            quiet = true;
            continue;
        }
        let value = it.next().ok_or_else(usage)?;
        let number = || value.parse::<f64>().map_err(|_| usage());
        match arg.as_str() {
            "--minutes" => duration = Duration::from_secs_f64(number()? * 60.0),
            "--seconds" => duration = Duration::from_secs_f64(number()?),
            "--warmup-seconds" => warmup = Some(Duration::from_secs_f64(number()?)),
            "--devices" | "--callers" | "--rss-limit" | "--fd-slack" | "--seed" => {
                rest.push((arg.as_str(), value.as_str()));
            }
            _ => return Err(usage()),
        }
    }
    let mut options = Options::full(duration);
    if let Some(warmup) = warmup {
        options.warmup = warmup.min(duration);
    }
    options.progress = !quiet;
    for (key, value) in rest {
        let int = || value.parse::<usize>().map_err(|_| usage());
        match key {
            "--devices" => options.devices = int()?.max(1),
            "--callers" => options.callers = int()?.max(1),
            "--fd-slack" => options.fd_slack = int()?,
            "--seed" => options.seed = int()? as u64,
            _ => options.rss_limit_pct = value.parse().map_err(|_| usage())?,
        }
    }
    Ok(options)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = parse(&args).and_then(|options| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?
            .block_on(soak::run(options))
    });
    match outcome {
        Ok(report) => {
            println!("{}", report.render());
            let failed =
                !report.invariant_failures().is_empty() || !report.resource_failures().is_empty();
            std::process::exit(i32::from(failed));
        }
        Err(e) => {
            eprintln!("appduct-soak: {e}");
            std::process::exit(2);
        }
    }
}
