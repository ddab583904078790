//! A short soak (issue #20): the invariants of `scripts/soak` over a few seconds of the same
//! mixed load on the built binary — every settled call audited exactly once with the outcome
//! its caller got, no call reaching another device than the one it named, no answer outside
//! the expected ones, every dropped device resumed. RSS and descriptor growth are judged by
//! the full run only (seconds of load say nothing about growth).

use std::time::Duration;

use appduct_e2e::soak::{Options, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_settles_every_call_once_and_misroutes_none() {
    let mut options = Options::full(Duration::from_secs(8));
    options.warmup = Duration::from_secs(3);
    options.devices = 12;
    options.sample_every = Duration::from_secs(1);
    let report = run(options).await.unwrap_or_else(|e| panic!("{e}"));
    let text = report.render();
    assert_eq!(report.invariant_failures(), Vec::<String>::new(), "{text}");
    assert_eq!(report.audit.records, report.settled, "{text}");
    assert_eq!(report.misrouted(), 0, "{text}");
    // Every part of the load ran, so the invariants covered it.
    for key in [
        "cancels_accepted",
        "abandoned",
        "drops_socket",
        "drops_background",
        "resumes",
        "claims",
        "revokes",
        "visitors",
        "events_posted",
    ] {
        assert!(report.counters[key] > 0, "no {key}: {text}");
    }
    for answer in [
        "ok",
        "error: tool_timeout",
        "cancelled: tool_cancelled",
        "error: tool_not_found",
        "error: tool_execution_error",
    ] {
        assert!(report.tally.contains_key(answer), "no {answer}: {text}");
    }
}
