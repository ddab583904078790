//! The control methods of the composed daemon (§C8.1–§C8.7, §C8.11–§C8.13, §C8.16, §C14), over
//! the real socket and over in-memory connections, with in-memory devices claimed through the
//! real engine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;

use appduct_client::config::{Config, Decision};
use appduct_daemon::daemon::{Daemon, DaemonOptions};
use appduct_protocol::control::{
    self, DaemonHello, DaemonStatus, EventData, EventKind, EventsSince, EventsSinceParams,
    HelloParams, LinkCreate, LinkCreateParams, NoParams, RevokedKind, SelectorParams, SessionState,
    SessionsDescribe, SessionsList, SessionsRevoke, SubscribeParams, Transport,
};
use appduct_protocol::errors::ErrorType;
use daemon_support::*;
use serde_json::json;

#[tokio::test]
async fn hello_and_status_over_the_real_socket() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let client = uds_client(dir.path()).await;

    let hello = client
        .call::<DaemonHello>(HelloParams::default())
        .await
        .unwrap();
    assert_eq!(hello.version, env!("CARGO_PKG_VERSION"));
    assert_eq!((hello.control_protocol, hello.min_control_protocol), (1, 1));
    assert_eq!(hello.pid, std::process::id());
    assert_eq!(hello.state_dir, dir.path().display().to_string());
    // The calls module is installed by default: every feature of §C8.1.
    assert_eq!(hello.features, control::features::ALL);
    assert!(hello.is_idle());
    assert_eq!(hello.started_at.len(), "2026-11-30T09:12:03.120Z".len());
    assert!(hello.started_at.ends_with('Z'));

    let status = client.call::<DaemonStatus>(NoParams {}).await.unwrap();
    assert_eq!(status.wss_port, daemon.wss_addr().port());
    assert_eq!(status.web_port, daemon.web_addr().port());
    assert_ne!(status.wss_port, 0);
    assert_ne!(status.web_port, 0);
    assert_eq!(status.advertised_address.address, "127.0.0.1");
    assert_eq!(status.advertised_address.family, 4);
    assert_eq!(
        status.advertised_address.source,
        control::AddressSource::Config
    );
    assert_eq!(status.pinned_keys, vec![daemon.pin().to_string()]);
    assert!(status.sessions.is_empty());
    assert_eq!((status.pending_links, status.pending_calls), (0, 0));
    assert_eq!(status.policy.default, Decision::Allow);
    assert!(status.policy.tools.is_empty());
    assert_eq!(
        status.audit.path,
        dir.path().join("audit").display().to_string()
    );
    assert_eq!(status.audit.retention_days, 30);
    assert_eq!(
        (status.audit.failed_writes, status.audit.failed_prunes),
        (0, 0)
    );
    // The directory is readable and holds no day file yet.
    assert_eq!((status.audit.files, status.audit.bytes), (Some(0), Some(0)));
    assert_eq!(
        status.events_log.path,
        dir.path().join("events.log").display().to_string()
    );
    daemon.shutdown().await;
}

#[tokio::test]
async fn exact_wire_shapes_over_an_in_memory_connection() {
    let dir = state_dir();
    let mut config = Config::defaults(dir.path());
    config.policy.destructive = Decision::Prompt;
    config.audit_retention_days = 7;
    config
        .policy
        .tools
        .insert("pixel-8/reset_counter".to_owned(), Decision::Deny);
    let daemon = Daemon::start(DaemonOptions::for_tests(dir.path()).config(config))
        .await
        .unwrap();
    let mut raw = RawControl::new(&daemon);

    let hello = raw
        .request(
            1,
            "daemon.hello",
            json!({"client": {"name": "appduct-cli", "version": "0.1.0"}, "controlProtocol": 1}),
        )
        .await;
    let keys: Vec<&str> = hello["result"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "version",
            "controlProtocol",
            "minControlProtocol",
            "pid",
            "startedAt",
            "stateDir",
            "features",
            "sessionCount",
            "pendingLinks",
            "pendingCalls"
        ]
    );

    let status = raw.request(2, "daemon.status", json!({})).await;
    let status = &status["result"];
    assert_eq!(
        status["policy"],
        json!({"default": "allow", "destructive": "prompt",
               "tools": {"pixel-8/reset_counter": "deny"}})
    );
    assert_eq!(
        status["audit"],
        json!({"path": dir.path().join("audit").display().to_string(),
               "failedWrites": 0, "failedPrunes": 0, "retentionDays": 7,
               "files": 0, "bytes": 0})
    );
    assert_eq!(status["eventsLog"]["failedWrites"], 0);
    assert_eq!(
        status["advertisedAddress"],
        json!({"address": "127.0.0.1", "family": 4, "source": "config"})
    );

    // Params are validated (§C5): unknown keys and a bad hello.
    let bad = raw
        .request(3, "daemon.status", json!({"verbose": true}))
        .await;
    assert_eq!(bad["error"]["code"], -32602);
    assert_eq!(
        bad["error"]["data"]["details"]["unknownKeys"],
        json!(["verbose"])
    );
    let bad = raw
        .request(4, "daemon.hello", json!({"controlProtocol": 0}))
        .await;
    assert_eq!(bad["error"]["code"], -32602);
    daemon.shutdown().await;
}

#[tokio::test]
async fn reserved_and_unknown_methods_are_not_found() {
    let dir = state_dir();
    let daemon = Daemon::start(DaemonOptions::for_tests(dir.path()))
        .await
        .unwrap();
    let mut raw = RawControl::new(&daemon);
    let mut id = 0;
    for method in [
        "web.attach",
        "approvals.frobnicate",
        "tasks.get",
        "leases.renew",
        "sessions.frobnicate",
    ] {
        id += 1;
        let reply = raw.request(id, method, json!({})).await;
        assert_eq!(reply["error"]["code"], -32601, "{method}: {reply}");
        assert_eq!(reply["error"]["data"]["type"], "invalid_request");
    }
    daemon.shutdown().await;
}

#[tokio::test]
async fn link_claim_list_subscribe_and_revoke() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let client = uds_client(dir.path()).await;
    let watcher = memory_client(&daemon);
    let mut events = watcher.subscribe(SubscribeParams::default()).await.unwrap();
    assert_eq!(events.result().session_id, None);
    assert_eq!(events.result().replay, None);

    // A native link points at the advertised address and the bound wss port.
    let link = client
        .call::<LinkCreate>(LinkCreateParams::default())
        .await
        .unwrap();
    assert_eq!(link.endpoint.address, "127.0.0.1");
    assert_eq!(link.endpoint.port, daemon.wss_addr().port());
    assert_eq!(link.pin, daemon.pin().to_string());
    let created = events.next().await.unwrap();
    assert_eq!(created.kind(), EventKind::LinkCreated);
    assert_eq!(
        created.session_id.as_deref(),
        Some(link.session_id.as_str())
    );
    let hello = client
        .call::<DaemonHello>(HelloParams::default())
        .await
        .unwrap();
    assert_eq!(hello.pending_links, 1);
    // A pending link is not a session.
    let err = client
        .call::<SessionsDescribe>(
            SelectorParams::default().with_selector(Some(link.session_id.clone())),
        )
        .await
        .unwrap_err();
    assert_eq!(err.error_type(), ErrorType::UnknownSession);

    // The web link points at the loopback web listener.
    let web = client
        .call::<LinkCreate>(LinkCreateParams::default().with_transport(Some(Transport::Web)))
        .await
        .unwrap();
    assert_eq!(
        (web.endpoint.address.as_str(), web.endpoint.port),
        ("127.0.0.1", daemon.web_addr().port())
    );
    events.next().await.unwrap();

    // Claim the native link through the real engine, then register tools.
    let app = claim_link(&daemon, &link, "Pixel 8").await;
    assert_eq!(app.alias, "pixel-8");
    let claimed = events.next().await.unwrap();
    assert_eq!(claimed.kind(), EventKind::SessionClaimed);
    assert_eq!(claimed.alias.as_deref(), Some("pixel-8"));
    app.send(
        json!({"type": "tool_registry_snapshot", "session_id": app.session_id,
                    "tools": [{"name": "reset_counter", "description": "Reset."}]}),
    )
    .await;
    let changed = events.next().await.unwrap();
    match changed.data {
        EventData::ToolsChanged(d) => assert_eq!(d.tool_count, 1),
        other => panic!("{other:?}"),
    }

    let list = client.call::<SessionsList>(NoParams {}).await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].session_id, app.session_id);
    assert_eq!(list[0].state, SessionState::Active);
    assert_eq!(list[0].transport, Transport::Native);
    assert_eq!(list[0].tool_count, 1);
    assert_eq!(list[0].device.model.as_deref(), Some("Pixel 8"));
    let described = client
        .call::<SessionsDescribe>(SelectorParams::default())
        .await
        .unwrap();
    assert_eq!(described, list[0]);
    let status = client.call::<DaemonStatus>(NoParams {}).await.unwrap();
    assert_eq!(status.sessions, list);
    assert_eq!(status.pending_links, 1, "the web link is still pending");

    // Revoke by alias: the app gets 1000 revoked, subscribers session_revoked.
    let revoked = client
        .call::<SessionsRevoke>(SelectorParams::default().with_selector(Some("pixel-8".to_owned())))
        .await
        .unwrap();
    assert_eq!(revoked.session_id, app.session_id);
    assert_eq!(revoked.alias.as_deref(), Some("pixel-8"));
    assert_eq!(revoked.revoked, RevokedKind::Session);
    let mut app = app;
    assert_eq!(
        next_app_event(&mut app.app).await,
        appduct_daemon::device_socket::AppEvent::Close {
            code: 1000,
            reason: "revoked".to_owned()
        }
    );
    app.app.close(Some(1000), "").await.unwrap();
    let gone = events.next().await.unwrap();
    assert_eq!(gone.kind(), EventKind::SessionRevoked);
    assert!(
        client
            .call::<SessionsList>(NoParams {})
            .await
            .unwrap()
            .is_empty()
    );

    // A pending link is revoked only by its exact id.
    let revoked = client
        .call::<SessionsRevoke>(
            SelectorParams::default().with_selector(Some(web.session_id.clone())),
        )
        .await
        .unwrap();
    assert_eq!(revoked.revoked, RevokedKind::Link);
    assert_eq!(revoked.alias, None);
    daemon.shutdown().await;
}

/// Posts app events `first..=last` named `e<n>` and waits until the last is on the bus.
async fn post_events(
    app: &App,
    bus: &mut tokio::sync::mpsc::UnboundedReceiver<control::EventNotification>,
    range: std::ops::RangeInclusive<u64>,
) {
    let last = *range.end();
    for n in range {
        app.send(
            json!({"type": "event", "session_id": app.session_id, "name": format!("e{n}"),
                        "payload": {"n": n}, "ts": n}),
        )
        .await;
    }
    loop {
        let e = event_of(bus, EventKind::AppEvent).await;
        if e.seq == last {
            return;
        }
    }
}

#[tokio::test]
async fn subscribe_with_since_replays_then_streams_without_loss() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut bus = daemon.events().subscribe_all();
    let client = memory_client(&daemon);
    let app = claim(&daemon, &client, "Pixel 8").await;
    post_events(&app, &mut bus, 1..=5).await;

    let subscriber = memory_client(&daemon);
    let mut stream = subscriber
        .subscribe(
            SubscribeParams::default()
                .with_session_selector(Some("pixel-8".to_owned()))
                .with_since(Some(2)),
        )
        .await
        .unwrap();
    let result = stream.result().clone();
    assert_eq!(result.session_id.as_deref(), Some(app.session_id.as_str()));
    let replay = result.replay.unwrap();
    assert_eq!((replay.count, replay.dropped, replay.cursor), (3, 0, 5));
    // Live events posted right away interleave with nothing: 3, 4, 5 then 6, 7, 8.
    post_events(&app, &mut bus, 6..=8).await;
    let mut seqs = Vec::new();
    while seqs.len() < 6 {
        let e = stream.next().await.unwrap();
        assert_eq!(e.kind(), EventKind::AppEvent);
        seqs.push(e.seq);
    }
    assert_eq!(seqs, [3, 4, 5, 6, 7, 8]);

    // A new filter replaces the old one entirely: only `e9`'s name matches now.
    let mut narrowed = subscriber
        .subscribe(
            SubscribeParams::default()
                .with_kinds(Some(vec![EventKind::AppEvent]))
                .with_name(Some("e1*".to_owned())),
        )
        .await
        .unwrap();
    post_events(&app, &mut bus, 9..=10).await;
    let e = narrowed.next().await.unwrap();
    assert_eq!(e.seq, 10);
    assert_eq!(daemon.handler().subscription_count(), 1);

    // since beyond the high-water mark, or without a session, is a parameter error.
    let err = subscriber
        .subscribe(
            SubscribeParams::default()
                .with_session_selector(Some(app.session_id.clone()))
                .with_since(Some(11)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.error_type(), ErrorType::InvalidRequest);

    // Closing the connection ends its subscription.
    drop(narrowed);
    drop(stream);
    drop(subscriber);
    until(|| daemon.handler().subscription_count() == 0).await;
    let closed = app.answer_close();
    daemon.shutdown().await;
    assert_eq!(closed.await.unwrap().0, 1001);
}

#[tokio::test]
async fn subscribe_response_precedes_the_replay_on_the_wire() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut bus = daemon.events().subscribe_all();
    let client = memory_client(&daemon);
    let app = claim(&daemon, &client, "Pixel 8").await;
    post_events(&app, &mut bus, 1..=2).await;

    let mut raw = RawControl::new(&daemon);
    let response = raw
        .request(
            7,
            "events.subscribe",
            json!({"sessionSelector": app.session_id, "since": 0, "payloadMaxBytes": 3}),
        )
        .await;
    assert_eq!(
        response["result"],
        json!({"ok": true, "sessionId": app.session_id,
               "replay": {"count": 2, "dropped": 0, "cursor": 2}})
    );
    let first = raw.next().await.unwrap();
    assert_eq!(first["method"], "event");
    assert_eq!(first["params"]["seq"], 1);
    assert_eq!(
        first["params"]["data"],
        json!({"name": "e1", "payloadPreview": "{\"n", "truncated": true,
               "payloadBytes": 7, "ts": 1})
    );
    assert_eq!(raw.next().await.unwrap()["params"]["seq"], 2);
    let closed = app.answer_close();
    daemon.shutdown().await;
    assert_eq!(closed.await.unwrap().0, 1001);
}

#[tokio::test]
async fn events_since_pages_with_cursor_and_remaining() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut bus = daemon.events().subscribe_all();
    let client = memory_client(&daemon);
    let app = claim(&daemon, &client, "Pixel 8").await;
    post_events(&app, &mut bus, 1..=5).await;

    let page = client
        .call::<EventsSince>(EventsSinceParams::default().with_limit(Some(2)))
        .await
        .unwrap();
    let seqs: Vec<u64> = page.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2]);
    assert_eq!((page.cursor, page.dropped, page.remaining), (2, 0, 3));
    let page = client
        .call::<EventsSince>(
            EventsSinceParams::default()
                .with_selector(Some("pixel-8".to_owned()))
                .with_since(Some(page.cursor)),
        )
        .await
        .unwrap();
    let seqs: Vec<u64> = page.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [3, 4, 5]);
    assert_eq!((page.cursor, page.remaining), (5, 0));
    // Filtered by name; the cursor skips the non-matching tail.
    let page = client
        .call::<EventsSince>(EventsSinceParams::default().with_name(Some("e2".to_owned())))
        .await
        .unwrap();
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.cursor, 5);
    // Beyond the high-water mark.
    let err = client
        .call::<EventsSince>(EventsSinceParams::default().with_since(Some(6)))
        .await
        .unwrap_err();
    assert_eq!(err.error_type(), ErrorType::InvalidRequest);
    assert_eq!(err.details().unwrap()["highWaterMark"], 5);
    let closed = app.answer_close();
    daemon.shutdown().await;
    assert_eq!(closed.await.unwrap().0, 1001);
}

#[tokio::test]
async fn events_list_filters_sorts_and_pages_declared_events() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut bus = daemon.events().subscribe_all();
    let client = memory_client(&daemon);
    // No session yet.
    let err = client
        .call::<control::EventsList>(control::EventsListParams::default())
        .await
        .unwrap_err();
    assert_eq!(err.error_type(), ErrorType::NoSession);

    let app = claim(&daemon, &client, "Pixel 8").await;
    app.send(
        json!({"type": "event_registry_snapshot", "session_id": app.session_id,
                    "events": [{"name": "payment_failed", "description": "p"},
                               {"name": "checkout_completed", "description": "c",
                                "payload_schema": {"type": "object"}},
                               {"name": "cart_failed", "description": "f"}]}),
    )
    .await;
    event_of(&mut bus, EventKind::EventsChanged).await;

    let all = client
        .call::<control::EventsList>(control::EventsListParams::default())
        .await
        .unwrap();
    let names: Vec<&str> = all.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        ["cart_failed", "checkout_completed", "payment_failed"]
    );
    assert_eq!(
        all.events[1].payload_schema,
        Some(json!({"type": "object"}))
    );
    assert_eq!((all.total, all.has_more, all.offset), (3, false, 0));

    let page = client
        .call::<control::EventsList>(
            control::EventsListParams::default()
                .with_name(Some("*_failed".to_owned()))
                .with_limit(Some(1))
                .with_offset(Some(1)),
        )
        .await
        .unwrap();
    let names: Vec<&str> = page.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["payment_failed"]);
    assert_eq!((page.total, page.has_more, page.offset), (2, false, 1));
    let page = client
        .call::<control::EventsList>(control::EventsListParams::default().with_limit(Some(1)))
        .await
        .unwrap();
    assert!(page.has_more);
    let closed = app.answer_close();
    daemon.shutdown().await;
    assert_eq!(closed.await.unwrap().0, 1001);
}

#[tokio::test]
async fn an_over_cap_subscriber_is_disconnected_and_its_subscription_ends() {
    // SEC-39 (in process, small cap).
    let dir = state_dir();
    let daemon = Daemon::start(DaemonOptions::for_tests(dir.path()).subscriber_buffer_cap(2048))
        .await
        .unwrap();
    let mut bus = daemon.events().subscribe_all();
    let client = memory_client(&daemon);
    let app = claim(&daemon, &client, "Pixel 8").await;

    // A subscriber that never reads.
    let mut raw = RawControl::new(&daemon);
    raw.send(json!({"jsonrpc": "2.0", "id": 1, "method": "events.subscribe", "params": {}}))
        .await;
    until(|| daemon.handler().subscription_count() == 1).await;
    // Well over 2048 bytes plus the 64 KiB duplex buffer.
    let big = "x".repeat(16 * 1024);
    for n in 1..=8u64 {
        app.send(
            json!({"type": "event", "session_id": app.session_id, "name": "big",
                        "payload": {"blob": big}, "ts": n}),
        )
        .await;
    }
    loop {
        if event_of(&mut bus, EventKind::AppEvent).await.seq == 8 {
            break;
        }
    }
    until(|| daemon.handler().subscription_count() == 0).await;
    // Its connection was closed; the daemon and the other connection are unaffected.
    until(|| daemon.handler().connection_count() == 1).await;
    let list = client.call::<SessionsList>(NoParams {}).await.unwrap();
    assert_eq!(list.len(), 1);
    drop(raw);
    let closed = app.answer_close();
    daemon.shutdown().await;
    assert_eq!(closed.await.unwrap().0, 1001);
}

/// Notes, at each step of shutdown the calls module reports, how many calls were pending and
/// how many device connections were open.
#[derive(Debug, Default)]
struct ShutdownSteps {
    daemon: std::sync::OnceLock<appduct_daemon::daemon::DaemonHandle>,
    log: std::sync::Mutex<Vec<String>>,
}

impl ShutdownSteps {
    fn note(&self, step: &str) {
        let daemon = self.daemon.get().unwrap();
        self.log.lock().unwrap().push(format!(
            "{step} (pending calls: {}, device connections open: {})",
            daemon.calls().pending(),
            daemon.sessions().connection_count()
        ));
    }
}

impl appduct_daemon::calls::PipelineProbe for ShutdownSteps {
    fn reached(&self, _: &str, _: appduct_daemon::calls::Checkpoint) {}

    fn timers_stopped(&self) {
        self.note("timers stopped");
    }

    fn pending_rejected(&self) {
        self.note("pending calls rejected");
    }
}

/// The calls module, a fixed part of the daemon: its features in `daemon.hello`, its pending
/// calls in `daemon.hello` and `daemon.status`, and its shutdown steps (§S3.6 steps 1–2):
/// timers stop, then pending calls are rejected while the device connection is still open.
#[tokio::test]
async fn the_calls_module_reports_features_and_pending_calls_and_shuts_down_in_order() {
    let dir = state_dir();
    let steps = std::sync::Arc::new(ShutdownSteps::default());
    let daemon = Daemon::start(DaemonOptions::for_tests(dir.path()).pipeline_probe(steps.clone()))
        .await
        .unwrap();
    steps.daemon.set(daemon.clone()).unwrap();
    let mut raw = RawControl::new(&daemon);
    let hello = raw.request(1, "daemon.hello", json!({})).await;
    // In the order of §C8.1, the daemon's and the calls module's.
    assert_eq!(
        hello["result"]["features"],
        json!([
            "calls.callId",
            "calls.progress",
            "consent.records",
            "events.subscribe.since",
            "events.list",
            "tools.groups",
            "approvals",
            "sessions.lease",
            "calls.results"
        ])
    );
    assert_eq!(hello["result"]["pendingCalls"], 0);

    let client = memory_client(&daemon);
    let mut app = claim(&daemon, &client, "Pixel 8").await;
    app.send(
        json!({"type": "tool_registry_snapshot", "session_id": app.session_id,
                    "tools": [{"name": "slow_task", "description": "Blocks until answered."}]}),
    )
    .await;
    let sessions = daemon.sessions().clone();
    let session_id = app.session_id.clone();
    until(move || sessions.tools_of(&session_id).is_some_and(|t| t.len() == 1)).await;

    // One call in flight: the device holds it unanswered.
    raw.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools.call",
                    "params": {"name": "slow_task"}}))
        .await;
    let frame = expect_text(&mut app.app).await;
    assert_eq!(frame["type"], "tool_call", "{frame}");
    let hello = raw.request(3, "daemon.hello", json!({})).await;
    assert_eq!(hello["result"]["pendingCalls"], 1);
    let status = raw.request(4, "daemon.status", json!({})).await;
    assert_eq!(status["result"]["pendingCalls"], 1);

    // Settled: none pending.
    app.send(
        json!({"type": "tool_result", "session_id": app.session_id, "id": frame["id"],
                    "result": {"done": true}}),
    )
    .await;
    let settled = raw.next().await.unwrap();
    assert_eq!(
        (&settled["id"], &settled["result"]["result"]),
        (&json!(2), &json!({"done": true}))
    );
    let hello = raw.request(5, "daemon.hello", json!({})).await;
    assert_eq!(hello["result"]["pendingCalls"], 0);
    let status = raw.request(6, "daemon.status", json!({})).await;
    assert_eq!(status["result"]["pendingCalls"], 0);

    // Another call in flight, then shutdown.
    raw.send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools.call",
                    "params": {"name": "slow_task"}}))
        .await;
    assert_eq!(expect_text(&mut app.app).await["type"], "tool_call");
    let closed = app.answer_close();
    daemon.shutdown().await;
    assert_eq!(closed.await.unwrap().0, 1001);
    let rejected = raw.next().await.unwrap();
    assert_eq!(rejected["id"], 7);
    assert_eq!(
        rejected["error"]["data"]["details"],
        json!({"reason": "daemon_shutdown"})
    );
    assert_eq!(
        *steps.log.lock().unwrap(),
        [
            "timers stopped (pending calls: 1, device connections open: 1)",
            "pending calls rejected (pending calls: 0, device connections open: 1)"
        ]
    );
}
