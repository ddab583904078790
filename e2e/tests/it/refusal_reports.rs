//! Refusals that teach, across processes (issue #25, §D6.3, §C13.1): a claim refused for a
//! field keeps its close (`1008 expected_claim_or_resume`, `1008 invalid_token`), and the user
//! running the daemon sees which field was at fault in `appduct events tail` and in
//! `daemon.log`, with the peer's address and never the token.

use std::time::Duration;

use appduct_e2e::device::{Link, RawDevice, mint};
use appduct_e2e::harness::Sandbox;
use appduct_e2e::{OrFail as _, blocking};
use serde_json::Value;

const CONFIG: &str = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#;
const WAIT: Duration = Duration::from_secs(10);

/// Sends `frame` as the first message on `link`'s listener; returns the close.
async fn refused(link: &Link, frame: &str) -> (Option<u16>, String) {
    let mut device = RawDevice::open(&link.endpoint()).await.or_fail();
    device.send_text(frame.to_owned()).await.or_fail();
    let closed = device.expect_close().await.or_fail();
    (closed.code, closed.reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_claim_names_its_field_in_events_tail_and_the_daemon_log() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let tail = sb.spawn(&["events", "tail"]).or_fail();

    // The frame of issue #25's report: no protocol_version.
    let mut frame: Value = serde_json::from_str(&link.claim_frame(&link.token, "Pixel")).or_fail();
    if let Some(fields) = frame.as_object_mut() {
        fields.remove("protocol_version");
    }
    let frame = frame.to_string();
    let want = "refused  1008 expected_claim_or_resume  session_claim: field `protocol_version`: \
                is missing";
    // The subscription's readiness is not observable: refuse until a line arrives (each
    // attempt is refused the same way and counts as no failed claim).
    let mut line = None;
    for _ in 0..10 {
        let close = refused(&link, &frame).await;
        assert_eq!(close, (Some(1008), "expected_claim_or_resume".to_owned()));
        line = blocking(|| tail.next_stdout_line(Duration::from_millis(300)));
        if line.is_some() {
            break;
        }
    }
    let line = line.unwrap_or_else(|| panic!("events tail printed nothing"));
    assert!(line.ends_with(want), "{line}");

    // A padded token: still `invalid_token`, reported as an encoding problem.
    let padded = format!("{}=", link.token);
    let close = refused(&link, &link.claim_frame(&padded, "Pixel")).await;
    assert_eq!(close, (Some(1008), "invalid_token".to_owned()));
    let line = blocking(|| tail.next_stdout_line(WAIT))
        .unwrap_or_else(|| panic!("no line for the padded token"));
    assert!(
        line.contains(
            "refused  1008 invalid_token  session_claim: field `token`: must be the \
                       unpadded base64url"
        ),
        "{line}"
    );
    assert!(tail.signal("INT"));
    let ran = blocking(|| tail.finish(WAIT)).or_fail();
    assert_eq!(ran.code, 0, "{ran:?}");

    let log = std::fs::read_to_string(sb.state_dir().join("daemon.log")).unwrap_or_default();
    let entry = log
        .lines()
        .find(|l| l.contains("field `protocol_version`: is missing"))
        .unwrap_or_else(|| panic!("no refusal in daemon.log: {log}"));
    assert!(entry.contains("peer=127.0.0.1:"), "{entry}");
    assert!(entry.contains("listener=native"), "{entry}");
    for text in [log.as_str(), ran.stdout.as_str()] {
        assert!(!text.contains(&link.token), "the token leaked");
    }
}
