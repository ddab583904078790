//! Event bus: seq, retention, cursor/dropped/remaining (§C13.4), truncation (§C13.6),
//! subscriptions with replay (§C8.12) and the `events.log` writer (§C12.3).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use appduct_daemon::clock::ManualClock;
use appduct_daemon::events::{
    EventBus, EventFilter, EventsLog, SinceQuery, SubscribeRequest, truncate_app_event,
};
use appduct_protocol::control::{
    AppEventData, EventData, EventKind, EventNotification, Replay, SessionSuspendedData,
    SubscribeParams, SuspendReason, ToolsChangedData,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::glob::Glob;
use serde_json::{Number, Value, json};

const SID: &str = "AAECAwQFBgcICQoL";
const OTHER: &str = "BBECAwQFBgcICQoL";

fn bus(size: usize) -> (EventBus, ManualClock) {
    let clock = ManualClock::new(1_764_493_923_120);
    (EventBus::new(Arc::new(clock.clone()), size), clock)
}

fn app_event(bus: &EventBus, session: &str, name: &str, payload: Value) -> Option<u64> {
    bus.emit_app_event(
        session,
        Some("pixel-8"),
        name.to_owned(),
        payload,
        Number::from(1_764_493_923_101_u64),
    )
}

fn seqs(events: &[EventNotification]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

fn glob(s: &str) -> Glob {
    Glob::new(s).unwrap()
}

fn tools_changed(n: u64) -> EventData {
    EventData::ToolsChanged(ToolsChangedData::new(n))
}

#[test]
fn seq_starts_at_one_without_gaps_and_other_kinds_carry_zero() {
    let (bus, clock) = bus(256);
    let mut tap = bus.subscribe_all();
    bus.open_session(SID);
    assert_eq!(bus.high_water_mark(SID), Some(0));
    assert_eq!(app_event(&bus, SID, "a", json!(1)), Some(1));
    clock.advance(Duration::from_millis(5));
    let other = bus.emit(Some(SID), Some("pixel-8"), tools_changed(2));
    assert_eq!(other.seq, 0);
    assert_eq!(other.ts, 1_764_493_923_125, "ts comes from the clock");
    assert_eq!(app_event(&bus, SID, "b", json!(2)), Some(2));
    assert_eq!(bus.high_water_mark(SID), Some(2));

    let first = tap.try_recv().unwrap();
    assert_eq!(
        serde_json::to_value(&first).unwrap(),
        json!({"kind": "app_event", "sessionId": SID, "alias": "pixel-8", "ts": 1_764_493_923_120_u64,
               "seq": 1, "data": {"name": "a", "payload": 1, "ts": 1_764_493_923_101_u64}})
    );
    assert_eq!(tap.try_recv().unwrap().kind(), EventKind::ToolsChanged);
    assert_eq!(tap.try_recv().unwrap().seq, 2);
    assert!(tap.try_recv().is_err());
}

#[test]
fn counters_are_per_session_and_need_a_buffer() {
    let (bus, _) = bus(256);
    assert_eq!(
        app_event(&bus, SID, "a", Value::Null),
        None,
        "no buffer yet"
    );
    bus.open_session(SID);
    bus.open_session(OTHER);
    assert_eq!(app_event(&bus, SID, "a", Value::Null), Some(1));
    assert_eq!(app_event(&bus, OTHER, "a", Value::Null), Some(1));
    assert_eq!(app_event(&bus, SID, "a", Value::Null), Some(2));
    // Re-opening (a resume) keeps the buffer and the counter.
    bus.open_session(SID);
    assert_eq!(app_event(&bus, SID, "a", Value::Null), Some(3));
    bus.close_session(SID);
    assert!(!bus.has_session(SID));
    let err = bus.events_since(SID, &SinceQuery::default()).unwrap_err();
    assert_eq!(err.error_type(), ErrorType::UnknownSession);
    assert_eq!(app_event(&bus, SID, "a", Value::Null), None);
}

#[test]
fn the_ring_keeps_the_last_buffer_size_events() {
    let (bus, _) = bus(3);
    bus.open_session(SID);
    for i in 0..5 {
        app_event(&bus, SID, "e", json!(i));
    }
    let r = bus.events_since(SID, &SinceQuery::default()).unwrap();
    assert_eq!(seqs(&r.events), [3, 4, 5]);
    assert_eq!(r.dropped, 2);
    assert_eq!(r.cursor, 5);
    assert_eq!(r.remaining, 0);
}

#[test]
fn worked_example_of_03_11_4() {
    // Buffer holds seq 5–9, high-water mark 9.
    let (bus, _) = bus(5);
    bus.open_session(SID);
    for _ in 0..9 {
        app_event(&bus, SID, "e", Value::Null);
    }
    let q = |since, limit| SinceQuery {
        since,
        limit,
        ..SinceQuery::default()
    };
    let r = bus.events_since(SID, &q(2, Some(2))).unwrap();
    assert_eq!(
        (seqs(&r.events), r.cursor, r.dropped, r.remaining),
        (vec![5, 6], 6, 2, 3)
    );
    let r = bus.events_since(SID, &q(6, None)).unwrap();
    assert_eq!(
        (seqs(&r.events), r.cursor, r.dropped, r.remaining),
        (vec![7, 8, 9], 9, 0, 0)
    );
    let r = bus.events_since(SID, &q(9, None)).unwrap();
    assert_eq!((seqs(&r.events), r.cursor), (vec![], 9));
}

#[test]
fn glob_pull_skips_the_non_matching_tail_and_dropped_ignores_the_glob() {
    let (bus, _) = bus(4);
    bus.open_session(SID);
    for name in ["x", "a", "b", "a", "b", "b"] {
        app_event(&bus, SID, name, Value::Null);
    }
    // Retained: 3 b, 4 a, 5 b, 6 b.
    let q = SinceQuery {
        since: 0,
        name: Some(glob("a")),
        ..SinceQuery::default()
    };
    let r = bus.events_since(SID, &q).unwrap();
    assert_eq!(seqs(&r.events), [4]);
    assert_eq!(
        r.cursor, 6,
        "a pull that saw everything skips to the high-water mark"
    );
    assert_eq!(r.dropped, 2, "1 and 2 were evicted, whatever their names");
    // Paging with a limit never repeats and never skips a match.
    let q = SinceQuery {
        since: 0,
        limit: Some(1),
        name: Some(glob("b")),
        ..SinceQuery::default()
    };
    let r = bus.events_since(SID, &q).unwrap();
    assert_eq!((seqs(&r.events), r.cursor, r.remaining), (vec![3], 3, 2));
    let r = bus
        .events_since(
            SID,
            &SinceQuery {
                since: r.cursor,
                ..q.clone()
            },
        )
        .unwrap();
    assert_eq!((seqs(&r.events), r.cursor, r.remaining), (vec![5], 5, 1));
}

#[test]
fn since_beyond_the_high_water_mark_is_a_param_error() {
    let (bus, _) = bus(8);
    bus.open_session(SID);
    app_event(&bus, SID, "e", Value::Null);
    let err = bus
        .events_since(
            SID,
            &SinceQuery {
                since: 2,
                ..SinceQuery::default()
            },
        )
        .unwrap_err();
    assert_eq!(err.code, -32602);
    assert_eq!(err.error_type(), ErrorType::InvalidRequest);
    let details = err.details().unwrap();
    assert_eq!(details["highWaterMark"], 1);
    assert_eq!(details["param"], "since");
    let ok = SinceQuery {
        since: 1,
        ..SinceQuery::default()
    };
    assert!(bus.events_since(SID, &ok).is_ok());
}

#[test]
fn truncation_example_of_03_11_6() {
    let payload: Value = serde_json::from_str(r#"{"text":"héllo wörld"}"#).unwrap();
    let data = AppEventData::Full {
        name: "n".into(),
        payload: payload.clone(),
        ts: Number::from(7),
    };
    let cut = truncate_app_event(&data, Some(11));
    assert_eq!(
        serde_json::to_value(&cut).unwrap(),
        json!({"name": "n", "payloadPreview": "{\"text\":\"h", "truncated": true, "payloadBytes": 24, "ts": 7})
    );
    assert_eq!(
        truncate_app_event(&data, Some(24)),
        data,
        "B ≤ max keeps it whole"
    );
    assert_eq!(truncate_app_event(&data, None), data);

    // Per delivery: the retained event stays whole.
    let (bus, _) = bus(8);
    bus.open_session(SID);
    app_event(&bus, SID, "n", payload.clone());
    let q = SinceQuery {
        payload_max_bytes: Some(11),
        ..SinceQuery::default()
    };
    let cut = bus.events_since(SID, &q).unwrap();
    assert!(matches!(
        &cut.events[0].data,
        EventData::AppEvent(AppEventData::Truncated {
            payload_bytes: 24,
            ..
        })
    ));
    let whole = bus.events_since(SID, &SinceQuery::default()).unwrap();
    assert!(matches!(
        &whole.events[0].data,
        EventData::AppEvent(AppEventData::Full { payload: p, .. }) if *p == payload
    ));
}

#[test]
fn truncation_keeps_key_order_as_received() {
    let payload: Value = serde_json::from_str(r#"{"z":1,"a":2}"#).unwrap();
    let data = AppEventData::Full {
        name: "n".into(),
        payload,
        ts: Number::from(0),
    };
    let AppEventData::Truncated {
        payload_preview, ..
    } = truncate_app_event(&data, Some(6))
    else {
        panic!("not truncated")
    };
    assert_eq!(payload_preview, r#"{"z":1"#);
}

type Log = Arc<Mutex<Vec<String>>>;

fn recording_sink(log: &Log) -> impl FnMut(&EventNotification) -> bool + Send + 'static {
    let log = Arc::clone(log);
    move |n: &EventNotification| {
        let label = match &n.data {
            EventData::AppEvent(d) => format!(
                "{}:{}:{}",
                n.seq,
                d.name(),
                n.session_id.as_deref().unwrap_or("")
            ),
            other => format!("{}", other.kind()),
        };
        log.lock().unwrap().push(label);
        true
    }
}

fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

#[test]
fn filters_bind_sessions_kinds_and_names() {
    let (bus, _) = bus(8);
    bus.open_session(SID);
    bus.open_session(OTHER);
    let all: Log = Log::default();
    let bound: Log = Log::default();
    bus.subscribe(SubscribeRequest::default(), recording_sink(&all), |_| {})
        .unwrap();
    let filter = EventFilter {
        session_id: Some(SID.to_owned()),
        kinds: Some(vec![EventKind::AppEvent, EventKind::ToolsChanged]),
        name: Some(glob("cart.*")),
        payload_max_bytes: None,
    };
    bus.subscribe(
        SubscribeRequest {
            filter,
            ..SubscribeRequest::default()
        },
        recording_sink(&bound),
        |_| {},
    )
    .unwrap();
    app_event(&bus, SID, "cart.add", Value::Null);
    app_event(&bus, SID, "other", Value::Null);
    app_event(&bus, OTHER, "cart.add", Value::Null);
    bus.emit(Some(SID), None, tools_changed(1));
    bus.emit(
        Some(SID),
        None,
        EventData::SessionSuspended(SessionSuspendedData::new(SuspendReason::ConnectionLost)),
    );
    bus.emit(
        None,
        None,
        EventData::DaemonStarted(appduct_protocol::control::DaemonStartedData::new("0", 1)),
    );
    assert_eq!(
        entries(&bound),
        [format!("1:cart.add:{SID}"), "tools_changed".to_owned()]
    );
    assert_eq!(
        entries(&all).len(),
        6,
        "unbound: every session and session-less events"
    );
}

#[test]
fn filter_from_params_validates_the_glob_and_copies_fields() {
    let params = SubscribeParams::validate(Some(&json!({
        "sessionSelector": "pixel-8", "kinds": ["app_event"], "name": "a*", "payloadMaxBytes": 5
    })))
    .unwrap();
    let f = EventFilter::from_params(&params, Some(SID.into())).unwrap();
    assert_eq!(f.session_id.as_deref(), Some(SID));
    assert_eq!(f.kinds, Some(vec![EventKind::AppEvent]));
    assert_eq!(f.payload_max_bytes, Some(5));
    assert!(f.name.unwrap().matches("abc"));
    let bad = SubscribeParams::default().with_name(Some(String::new()));
    assert!(EventFilter::from_params(&bad, None).is_err());
}

#[test]
fn deliveries_are_truncated_per_subscriber() {
    let (bus, _) = bus(8);
    bus.open_session(SID);
    let got: Arc<Mutex<Vec<EventNotification>>> = Arc::default();
    for max in [Some(11), None] {
        let got = Arc::clone(&got);
        let filter = EventFilter {
            payload_max_bytes: max,
            ..EventFilter::default()
        };
        bus.subscribe(
            SubscribeRequest {
                filter,
                ..SubscribeRequest::default()
            },
            move |n: &EventNotification| {
                got.lock().unwrap().push(n.clone());
                true
            },
            |_| {},
        )
        .unwrap();
    }
    app_event(&bus, SID, "n", json!({"text": "héllo wörld"}));
    let got = got.lock().unwrap();
    assert!(matches!(
        &got[0].data,
        EventData::AppEvent(AppEventData::Truncated { .. })
    ));
    assert!(matches!(
        &got[1].data,
        EventData::AppEvent(AppEventData::Full { .. })
    ));
}

#[test]
fn a_sink_returning_false_ends_its_subscription_and_replaces_swaps_atomically() {
    let (bus, _) = bus(8);
    let first = bus
        .subscribe(
            SubscribeRequest::default(),
            |_: &EventNotification| false,
            |_| {},
        )
        .unwrap();
    assert_eq!(bus.subscriber_count(), 1);
    bus.emit(None, None, tools_changed(0));
    assert_eq!(bus.subscriber_count(), 0);
    assert!(!bus.unsubscribe(first));

    let log: Log = Log::default();
    let a = bus
        .subscribe(SubscribeRequest::default(), recording_sink(&log), |_| {})
        .unwrap();
    let b = bus
        .subscribe(
            SubscribeRequest {
                replaces: Some(a),
                ..SubscribeRequest::default()
            },
            recording_sink(&log),
            |_| {},
        )
        .unwrap();
    assert_eq!(bus.subscriber_count(), 1);
    bus.emit(None, None, tools_changed(0));
    assert_eq!(
        entries(&log).len(),
        1,
        "the replaced filter no longer delivers"
    );
    assert!(bus.unsubscribe(b));
}

#[test]
fn replay_comes_after_the_response_and_before_live_events() {
    let (bus, _) = bus(4);
    bus.open_session(SID);
    for name in ["a", "b", "a", "b", "a", "b"] {
        app_event(&bus, SID, name, Value::Null);
    }
    // Retained 3..=6.
    let log: Log = Log::default();
    let response = Arc::clone(&log);
    let filter = EventFilter {
        session_id: Some(SID.into()),
        name: Some(glob("a")),
        ..EventFilter::default()
    };
    bus.subscribe(
        SubscribeRequest {
            filter,
            since: Some(1),
            replaces: None,
        },
        recording_sink(&log),
        move |replay| {
            response
                .lock()
                .unwrap()
                .push(format!("response {replay:?}"));
        },
    )
    .unwrap();
    app_event(&bus, SID, "a", Value::Null);
    assert_eq!(
        entries(&log),
        [
            format!("response {:?}", Some(Replay::new(2, 1, 6))),
            format!("3:a:{SID}"),
            format!("5:a:{SID}"),
            format!("7:a:{SID}"),
        ]
    );
}

#[test]
fn replay_errors_leave_nothing_registered() {
    let (bus, _) = bus(4);
    let bound = |since| SubscribeRequest {
        filter: EventFilter {
            session_id: Some(SID.into()),
            ..EventFilter::default()
        },
        since: Some(since),
        replaces: None,
    };
    let err = bus
        .subscribe(bound(0), |_: &EventNotification| true, |_| {})
        .unwrap_err();
    assert_eq!(err.error_type(), ErrorType::UnknownSession);
    bus.open_session(SID);
    let err = bus
        .subscribe(bound(1), |_: &EventNotification| true, |_| {})
        .unwrap_err();
    assert_eq!(err.code, -32602);
    let unbound = SubscribeRequest {
        since: Some(0),
        ..SubscribeRequest::default()
    };
    assert!(
        bus.subscribe(unbound, |_: &EventNotification| true, |_| {})
            .is_err()
    );
    assert_eq!(bus.subscriber_count(), 0);
    // Without `since` nothing is replayed and the callback sees `None`.
    let seen = Arc::new(Mutex::new(None));
    let s = Arc::clone(&seen);
    bus.subscribe(
        SubscribeRequest::default(),
        |_: &EventNotification| true,
        move |r| *s.lock().unwrap() = Some(r),
    )
    .unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(None));
}

#[test]
fn subscribe_with_replay_racing_emitters_loses_and_repeats_nothing() {
    for round in 0..20 {
        let (bus, _) = bus(32_768);
        bus.open_session(SID);
        let total = 20_000_u64;
        let emitter = {
            let bus = bus.clone();
            std::thread::spawn(move || {
                for _ in 0..total {
                    app_event(&bus, SID, "e", Value::Null);
                }
            })
        };
        // Subscribe somewhere in the middle of the stream.
        while bus.high_water_mark(SID).unwrap_or(0) < (round * 500) as u64 {
            std::thread::yield_now();
        }
        let got: Arc<Mutex<Vec<u64>>> = Arc::default();
        let sink_got = Arc::clone(&got);
        let filter = EventFilter {
            session_id: Some(SID.into()),
            ..EventFilter::default()
        };
        let replay = Arc::new(Mutex::new(None));
        let r = Arc::clone(&replay);
        let since = 0;
        bus.subscribe(
            SubscribeRequest {
                filter,
                since: Some(since),
                replaces: None,
            },
            move |n: &EventNotification| {
                sink_got.lock().unwrap().push(n.seq);
                true
            },
            move |info| *r.lock().unwrap() = info,
        )
        .unwrap();
        emitter.join().unwrap();
        let got = got.lock().unwrap();
        let expected: Vec<u64> = (1..=total).collect();
        assert_eq!(*got, expected, "round {round}");
        let info = replay.lock().unwrap().unwrap();
        assert_eq!(info.dropped, 0);
        assert_eq!(info.cursor, info.count);
    }
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ev")
        .tempdir_in("/tmp")
        .unwrap()
}

fn read_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn events_log_excludes_app_events_and_writes_one_json_line_each() {
    let dir = temp_dir();
    let path = dir.path().join("events.log");
    let log = EventsLog::start(path.clone(), dir.path().join("events.log.1"), 1 << 20).unwrap();
    let clock = ManualClock::new(1000);
    let bus = EventBus::with_events_log(Arc::new(clock), 8, log);
    bus.open_session(SID);
    bus.emit(Some(SID), Some("pixel-8"), tools_changed(3));
    app_event(&bus, SID, "secret_payload_event", json!({"card": "4242"}));
    bus.emit(
        Some(SID),
        Some("pixel-8"),
        EventData::SessionSuspended(SessionSuspendedData::new(SuspendReason::AppBackgrounded)),
    );
    assert!(
        bus.events_log()
            .unwrap()
            .flush_blocking(Duration::from_secs(5))
    );
    let lines = read_lines(&path);
    assert_eq!(
        lines,
        [
            json!({"kind": "tools_changed", "sessionId": SID, "alias": "pixel-8", "ts": 1000, "seq": 0, "data": {"toolCount": 3}}),
            json!({"kind": "session_suspended", "sessionId": SID, "alias": "pixel-8", "ts": 1000, "seq": 0, "data": {"reason": "app_backgrounded"}}),
        ]
    );
    let raw = std::fs::read_to_string(&path).unwrap();
    assert!(!raw.contains("4242") && !raw.contains("secret_payload_event"));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let status = bus.events_log_status().unwrap();
    assert_eq!(status.failed_writes, 0);
    assert_eq!(status.path, path.display().to_string());
}

#[test]
fn events_log_rotates_past_the_cap_and_keeps_mode_0600() {
    let dir = temp_dir();
    let path = dir.path().join("events.log");
    let rotated = dir.path().join("events.log.1");
    let log = EventsLog::start(path.clone(), rotated.clone(), 150).unwrap();
    let bus = EventBus::with_events_log(Arc::new(ManualClock::new(0)), 8, log);
    // Each line is about 90 bytes: the second append crosses 150 and rotates.
    for n in 0..3 {
        bus.emit(Some(SID), None, tools_changed(n));
    }
    assert!(
        bus.events_log()
            .unwrap()
            .flush_blocking(Duration::from_secs(5))
    );
    let old = read_lines(&rotated);
    let new = read_lines(&path);
    assert_eq!(old.len(), 2);
    assert_eq!(old[1]["data"]["toolCount"], 1);
    assert_eq!(new.len(), 1);
    assert_eq!(new[0]["data"]["toolCount"], 2);
    for p in [&path, &rotated] {
        assert_eq!(
            std::fs::metadata(p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}

#[test]
fn events_log_failures_only_count() {
    let dir = temp_dir();
    // A directory where the file should be: every open fails.
    let path = dir.path().join("events.log");
    std::fs::create_dir(&path).unwrap();
    let log = EventsLog::start(path, dir.path().join("events.log.1"), 1 << 20).unwrap();
    let bus = EventBus::with_events_log(Arc::new(ManualClock::new(0)), 8, log);
    bus.emit(None, None, tools_changed(0));
    bus.emit(None, None, tools_changed(1));
    assert!(
        bus.events_log()
            .unwrap()
            .flush_blocking(Duration::from_secs(5))
    );
    assert_eq!(bus.events_log_status().unwrap().failed_writes, 2);
}

#[test]
fn events_log_refuses_to_follow_a_symlink() {
    let dir = temp_dir();
    let target = dir.path().join("target");
    std::fs::write(&target, "").unwrap();
    let path = dir.path().join("events.log");
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let log = EventsLog::start(path, dir.path().join("events.log.1"), 1 << 20).unwrap();
    log.enqueue(&EventNotification::new(0, 0, tools_changed(0)));
    assert!(log.flush_blocking(Duration::from_secs(5)));
    assert_eq!(log.failed_writes(), 1);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
}

#[tokio::test(start_paused = true)]
async fn async_flush_works_under_a_paused_clock() {
    let dir = temp_dir();
    let path = dir.path().join("events.log");
    let log = EventsLog::start(path.clone(), dir.path().join("events.log.1"), 1 << 20).unwrap();
    let bus = EventBus::with_events_log(Arc::new(ManualClock::new(0)), 8, log);
    for n in 0..100 {
        bus.emit(None, None, tools_changed(n));
    }
    assert!(bus.flush(Duration::from_secs(5)).await);
    assert_eq!(read_lines(&path).len(), 100);
    // Without a log, flushing is trivially complete.
    assert!(
        EventBus::new(Arc::new(ManualClock::new(0)), 1)
            .flush(Duration::ZERO)
            .await
    );
}
