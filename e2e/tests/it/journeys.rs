//! Whole user journeys across processes (issue 7): a cold start from `keygen` to `daemon stop`,
//! session churn through grace expiry, a daemon killed under a live app, and app events through
//! `events tail` and `events since`.

use std::time::Duration;

use appduct_e2e::device::{RawDevice, mint, sdk_device};
use appduct_e2e::harness::{Sandbox, is_alive, signal};
use appduct_e2e::{OrFail as _, blocking};
use appduct_sdk::ClientState;
use serde_json::{Value, json};

const CONFIG: &str = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#;
const WAIT: Duration = Duration::from_secs(10);

async fn wait_state(client: &appduct_sdk::Client, check: impl Fn(&ClientState) -> bool) -> bool {
    let mut states = client.watch_state();
    tokio::time::timeout(WAIT, states.wait_for(|s| check(s)))
        .await
        .is_ok_and(|r| r.is_ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_start_from_keygen_to_stop() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let key = blocking(|| sb.data(&["keygen"])).or_fail();
    assert_eq!(key["algorithm"], "ec-p256");
    let pin = key["pin"].clone();
    let key_path = sb.state_dir().join("key.pem");
    let key_bytes = std::fs::read(&key_path).or_fail();

    // The daemon (spawned by `sessions link`) serves that key: link, status and the device's
    // TLS handshake all carry its pin.
    let link_data = blocking(|| sb.data(&["sessions", "link", "--scheme", "e2e"])).or_fail();
    assert_eq!(link_data["pin"], pin);
    let status = blocking(|| sb.status()).or_fail();
    assert_eq!(status["daemon"]["pinnedKeys"], json!([pin]));
    assert_eq!(status["daemon"]["pendingLinks"], 1);
    let link = appduct_e2e::device::Link::from_data(&link_data).or_fail();
    let device = sdk_device(&link, "Pixel 8", "cold").or_fail();
    let session = device.connect(&link.deep_link).await.or_fail();

    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 2)
    ));
    let listed = blocking(|| sb.data(&["tools", "ls"])).or_fail();
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["echo", "whoami"]);
    assert_eq!(listed["total"], 2);
    assert_eq!(listed["tools"][0]["policy"], "allow");
    let described = blocking(|| sb.data(&["tools", "describe", "echo"])).or_fail();
    assert_eq!(described["name"], "echo");
    assert!(described["signature"].as_str().is_some(), "{described}");
    let human = blocking(|| sb.run(&["tools", "call", "whoami"])).or_fail();
    assert_eq!(human.code, 0, "{human:?}");
    assert!(
        human.stdout.starts_with("Result (whoami on pixel-8, "),
        "{}",
        human.stdout
    );
    assert!(
        human.stdout.contains("\"device\": \"cold\""),
        "{}",
        human.stdout
    );

    let revoked = blocking(|| sb.run(&["sessions", "revoke"])).or_fail();
    assert_eq!(
        revoked.stdout,
        format!("Revoked pixel-8 ({}).\n", session.session_id)
    );
    assert!(wait_state(&device, |s| s.reason() == Some("revoked")).await);
    let stopped = blocking(|| sb.data(&["daemon", "stop"])).or_fail();
    assert_eq!(stopped["daemon"]["method"], "rpc");

    // SEC-02: the next start keeps the key file and the pin.
    let status = blocking(|| sb.status()).or_fail();
    assert_eq!(status["daemon"]["pinnedKeys"], json!([pin]));
    assert_eq!(std::fs::read(&key_path).or_fail(), key_bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_app_expires_after_grace_and_frees_its_alias() {
    let config = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1", "graceSeconds": 1}"#;
    let sb = Sandbox::with_config(config).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let (device, ack) = RawDevice::claim(&link, "Galaxy S24").await.or_fail();
    assert_eq!(ack["grace_s"], 1);
    let token = ack["resume_token"].as_str().unwrap_or_default().to_owned();
    drop(device);
    let expired = blocking(|| sb.wait_sessions(WAIT, <[Value]>::is_empty));
    assert!(expired, "{:?}", blocking(|| sb.sessions()));
    // The bus events of the churn, as events.log recorded them.
    // events.log is written asynchronously: poll it.
    let kinds = || -> Vec<String> {
        let log = std::fs::read_to_string(sb.state_dir().join("events.log")).unwrap_or_default();
        log.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["sessionId"] == json!(link.session_id))
            .filter_map(|e| e["kind"].as_str().map(str::to_owned))
            .collect()
    };
    let mut logged = Vec::new();
    blocking(|| {
        Sandbox::wait_until(WAIT, || {
            logged = kinds();
            logged.len() >= 4
        })
    });
    assert_eq!(
        logged,
        [
            "link_created",
            "session_claimed",
            "session_suspended",
            "session_expired"
        ]
    );

    // The expired session cannot be resumed; its alias goes to the next device.
    let (_gone, refused) = RawDevice::resume(&link.endpoint(), &link.session_id, &token)
        .await
        .or_fail();
    assert_eq!(
        refused.err().map(|c| (c.code, c.reason)),
        Some((Some(1008), "unknown_session".to_owned()))
    );
    let next = blocking(|| mint(&sb, &[])).or_fail();
    let (_device, ack) = RawDevice::claim(&next, "Galaxy S24").await.or_fail();
    assert_eq!(ack["alias"], "galaxy-s24");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_daemon_is_replaced_by_the_next_command_and_the_app_pairs_again() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let (mut device, _ack) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    let old = blocking(|| sb.daemon_pid()).unwrap_or_else(|| panic!("no daemon"));
    sb.track_pid(old);

    assert!(signal(old, "KILL"));
    // The app's socket ends without a close frame.
    let ended = device.expect_close().await.or_fail();
    assert_eq!(ended.code, None, "{ended:?}");
    assert!(blocking(|| Sandbox::wait_until(WAIT, || !is_alive(old))));

    // The next command spawns a fresh daemon with no sessions but the same key.
    assert_eq!(blocking(|| sb.sessions()).or_fail(), Vec::<Value>::new());
    let new = blocking(|| sb.daemon_pid()).unwrap_or_else(|| panic!("no new daemon"));
    sb.track_pid(new);
    assert_ne!(new, old);
    let relink = blocking(|| mint(&sb, &[])).or_fail();
    assert_eq!(
        relink.pin.as_ref().map(ToString::to_string),
        link.pin.as_ref().map(ToString::to_string)
    );
    // The old link died with the old daemon; the new one claims.
    let (_stale, refused) = RawDevice::resume(&relink.endpoint(), &link.session_id, "x")
        .await
        .or_fail();
    assert_eq!(
        refused.err().map(|c| (c.code, c.reason)),
        Some((Some(1008), "unknown_session".to_owned()))
    );
    let (_device, ack) = RawDevice::claim(&relink, "Pixel 8").await.or_fail();
    assert_eq!(ack["alias"], "pixel-8");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_events_reach_events_tail_and_events_since() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let device = sdk_device(&link, "Pixel 8", "events").or_fail();
    device
        .declare_event(&json!({"name": "checkout_completed",
                               "description": "An order was placed."}))
        .or_fail();
    device.connect(&link.deep_link).await.or_fail();
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["eventCount"] == 1)
    ));

    let tail = sb.spawn(&["--json", "events", "tail"]).or_fail();
    // The subscription's readiness is not observable under --json: post until one arrives.
    let mut posted = 0u64;
    let mut first = None;
    while posted < 100 && first.is_none() {
        posted += 1;
        device
            .post_event("checkout_completed", Some(json!({"order": posted})))
            .or_fail();
        first = blocking(|| tail.next_stdout_line(Duration::from_millis(100)));
    }
    let line = first.unwrap_or_else(|| panic!("events tail printed nothing"));
    let event: Value = serde_json::from_str(&line).or_fail();
    assert_eq!(event["kind"], "app_event", "{line}");
    assert_eq!(event["alias"], "pixel-8");
    assert_eq!(event["sessionId"], json!(link.session_id));
    assert_eq!(event["data"]["name"], "checkout_completed");
    let seen = event["data"]["payload"]["order"].as_u64().unwrap_or(0);
    assert!(seen >= 1 && seen <= posted, "{line}");
    assert_eq!(event["seq"], seen, "seq counts the session's app events");
    assert!(tail.signal("INT"));
    let ran = blocking(|| tail.finish(WAIT)).or_fail();
    assert_eq!(ran.code, 0, "{ran:?}");
    for line in ran.stdout.lines() {
        let doc: Value = serde_json::from_str(line).or_fail();
        assert_eq!(doc["kind"], "app_event", "NDJSON items only: {line}");
    }

    let since = blocking(|| sb.data(&["events", "since", "pixel-8", "0"])).or_fail();
    let orders: Vec<u64> = since["events"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter_map(|e| e["data"]["payload"]["order"].as_u64())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(orders, (1..=posted).collect::<Vec<_>>());
    assert_eq!(since["cursor"], posted);
    assert_eq!(
        (since["dropped"].clone(), since["remaining"].clone()),
        (json!(0), json!(0))
    );
    let rest = blocking(|| sb.data(&["events", "since", "pixel-8", &posted.to_string()])).or_fail();
    assert_eq!(rest["events"], json!([]));
    device.disconnect();
}
