//! Session leases and settled results (issue #19; §C8.41–§C8.43, §C10.9, §C10.10): contention
//! between two connections, renewal, expiry on a paused clock, release on disconnect, steal, and
//! `tools.result` for settled, running and detached calls.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::calls_support;

use appduct_protocol::control::{EventData, EventKind, LeaseEndReason};
use calls_support::*;
use serde_json::{Value, json};

async fn hello(wire: &mut Wire, id: i64, name: &str) {
    let r = wire
        .request(
            id,
            "daemon.hello",
            json!({"client": {"name": name, "version": "1.0.0"}}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
}

fn error_type(response: &Value) -> &str {
    response["error"]["data"]["type"].as_str().unwrap_or("")
}

async fn released(
    events: &mut tokio::sync::mpsc::UnboundedReceiver<appduct_protocol::control::EventNotification>,
) -> LeaseEndReason {
    match next_of(events, EventKind::LeaseReleased).await.data {
        EventData::LeaseReleased(d) => d.reason,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn two_connections_contend_for_one_lease() {
    let mut f = Fixture::new().await;
    let mut b = Wire::new(&f.daemon);
    hello(&mut f.wire, 1, "agent-a").await;
    hello(&mut b, 1, "agent-b").await;

    let taken = f
        .wire
        .request(2, "sessions.lease", json!({"ttlMs": 30000}))
        .await;
    let lease = &taken["result"];
    assert_eq!(lease["alias"], "pixel-8");
    assert_eq!(lease["holder"]["client"], "agent-a");
    assert_eq!(lease["renewed"], false);
    assert_eq!(lease["ttlMs"], 30000);
    let expires_at = lease["expiresAt"].as_u64().unwrap();
    let event = next_of(&mut f.events, EventKind::LeaseTaken).await;
    assert_eq!(event.alias.as_deref(), Some("pixel-8"));

    // The other connection can neither take it nor call a tool; the error names the holder.
    let refused = b.request(2, "sessions.lease", json!({})).await;
    assert_eq!(error_type(&refused), "session_leased");
    let details = &refused["error"]["data"]["details"];
    assert_eq!(details["holder"]["client"], "agent-a");
    assert_eq!(details["expiresAt"], expires_at);
    assert_eq!(details["alias"], "pixel-8");
    let call = b
        .request(3, "tools.call", json!({"name": "echo", "callId": "b1"}))
        .await;
    assert_eq!(error_type(&call), "session_leased", "{call}");
    assert_eq!(call["error"]["data"]["callId"], "b1");
    f.device.assert_no_frame();

    // The holder calls as usual; listings show the lease.
    f.wire
        .send(
            4,
            "tools.call",
            json!({"name": "echo", "args": {"text": "hi"}}),
        )
        .await;
    let (wire_id, _) = f.device.tool_call().await;
    f.device.result(&wire_id, json!("hi")).await;
    assert_eq!(f.wire.response(4).await["result"]["result"], "hi");
    let listed = b.request(5, "sessions.list", json!({})).await;
    assert_eq!(listed["result"][0]["lease"]["holder"]["client"], "agent-a");
    let status = b.request(6, "daemon.status", json!({})).await;
    assert_eq!(
        status["result"]["sessions"][0]["lease"]["expiresAt"],
        expires_at
    );

    // Renewing keeps the holder; releasing by a non-holder does nothing.
    let renewed = f
        .wire
        .request(7, "sessions.lease", json!({"ttlMs": 60000}))
        .await;
    assert_eq!(renewed["result"]["renewed"], true);
    let not_mine = b.request(7, "sessions.release", json!({})).await;
    assert_eq!(not_mine["result"]["released"], false);

    // Released: the other connection's call goes through.
    let done = f.wire.request(8, "sessions.release", json!({})).await;
    assert_eq!(done["result"]["released"], true);
    assert_eq!(released(&mut f.events).await, LeaseEndReason::Released);
    b.send(9, "tools.call", json!({"name": "echo"})).await;
    let (wire_id, _) = f.device.tool_call().await;
    f.device.result(&wire_id, json!("ok")).await;
    assert_eq!(b.response(9).await["result"]["result"], "ok");

    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit[0]["errorType"], "session_leased");
    f.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_expires_without_renewal() {
    let mut f = Fixture::new().await;
    let mut b = Wire::new(&f.daemon);
    let taken = f
        .wire
        .request(1, "sessions.lease", json!({"ttlMs": 2000}))
        .await;
    assert_eq!(taken["result"]["ttlMs"], 2000);
    let call = b.request(1, "tools.call", json!({"name": "echo"})).await;
    assert_eq!(error_type(&call), "session_leased");

    // The paused clock runs forward to the lease's timer.
    assert_eq!(released(&mut f.events).await, LeaseEndReason::Expired);
    b.send(2, "tools.call", json!({"name": "echo"})).await;
    let (wire_id, _) = f.device.tool_call().await;
    f.device.result(&wire_id, json!(1)).await;
    assert_eq!(b.response(2).await["result"]["result"], 1);
    let listed = b.request(3, "sessions.list", json!({})).await;
    assert!(listed["result"][0].get("lease").is_none(), "{listed}");
    f.stop().await;
}

/// §C8.41 (review19 M2): the holder renewing with a shorter ttl keeps the later expiry, so a
/// short call of the holder never ends the lease its long call still needs.
#[tokio::test(start_paused = true)]
async fn a_shorter_renewal_never_shortens_the_lease() {
    let mut f = Fixture::new().await;
    let mut b = Wire::new(&f.daemon);
    let taken = f
        .wire
        .request(1, "sessions.lease", json!({"ttlMs": 600000}))
        .await;
    let expires_at = taken["result"]["expiresAt"].as_u64().unwrap();
    let renewed = f
        .wire
        .request(2, "sessions.lease", json!({"ttlMs": 2000}))
        .await;
    assert_eq!(renewed["result"]["renewed"], true);
    assert_eq!(renewed["result"]["expiresAt"], expires_at, "{renewed}");
    let applied = renewed["result"]["ttlMs"].as_u64().unwrap();
    assert!((590_000..=600_000).contains(&applied), "{applied}");
    // Past the short ttl the lease still holds.
    tokio::time::advance(std::time::Duration::from_secs(5)).await;
    let call = b.request(1, "tools.call", json!({"name": "echo"})).await;
    assert_eq!(error_type(&call), "session_leased", "{call}");
    // A longer renewal moves the expiry on.
    let longer = f
        .wire
        .request(3, "sessions.lease", json!({"ttlMs": 3600000}))
        .await;
    assert!(longer["result"]["expiresAt"].as_u64().unwrap() > expires_at);
    assert_eq!(longer["result"]["ttlMs"], 3600000);
    f.stop().await;
}

#[tokio::test]
async fn the_holder_disconnecting_releases_its_lease() {
    let mut f = Fixture::new().await;
    let mut b = Wire::new(&f.daemon);
    let mut a = Wire::new(&f.daemon);
    hello(&mut a, 1, "agent-a").await;
    a.request(2, "sessions.lease", json!({})).await;
    let call = b.request(1, "tools.call", json!({"name": "echo"})).await;
    assert_eq!(error_type(&call), "session_leased");

    a.close();
    assert_eq!(released(&mut f.events).await, LeaseEndReason::Disconnected);
    let taken = b.request(2, "sessions.lease", json!({})).await;
    assert_eq!(taken["result"]["renewed"], false, "{taken}");
    f.stop().await;
}

#[tokio::test]
async fn steal_takes_the_lease_over() {
    let mut f = Fixture::new().await;
    let mut b = Wire::new(&f.daemon);
    hello(&mut f.wire, 1, "agent-a").await;
    hello(&mut b, 1, "operator").await;
    f.wire.request(2, "sessions.lease", json!({})).await;
    next_of(&mut f.events, EventKind::LeaseTaken).await;

    let stolen = b.request(2, "sessions.lease", json!({"steal": true})).await;
    assert_eq!(stolen["result"]["holder"]["client"], "operator");
    assert_eq!(stolen["result"]["stolenFrom"]["client"], "agent-a");
    assert_eq!(released(&mut f.events).await, LeaseEndReason::Stolen);
    match next_of(&mut f.events, EventKind::LeaseTaken).await.data {
        EventData::LeaseTaken(d) => {
            assert_eq!(
                d.stolen_from.and_then(|h| h.client).as_deref(),
                Some("agent-a")
            );
        }
        other => panic!("{other:?}"),
    }
    let call = f
        .wire
        .request(3, "tools.call", json!({"name": "echo"}))
        .await;
    assert_eq!(error_type(&call), "session_leased");
    assert_eq!(
        call["error"]["data"]["details"]["holder"]["client"],
        "operator"
    );
    f.stop().await;
}

#[tokio::test]
async fn a_settled_result_is_fetched_by_call_id_from_another_connection() {
    let mut f = Fixture::new().await;
    let mut b = Wire::new(&f.daemon);
    f.wire
        .send(1, "tools.call", json!({"name": "echo", "callId": "r1"}))
        .await;
    let (wire_id, _) = f.device.tool_call().await;

    let running = b.request(1, "tools.result", json!({"callId": "r1"})).await;
    assert_eq!(
        running["result"],
        json!({"callId": "r1", "state": "running"})
    );

    // A waiting fetch resolves when the call settles.
    b.send(2, "tools.result", json!({"callId": "r1", "waitMs": 60000}))
        .await;
    f.device.result(&wire_id, json!({"n": 7})).await;
    let direct = f.wire.response(1).await;
    let fetched = b.response(2).await;
    assert_eq!(fetched["result"]["state"], "ok", "{fetched}");
    assert_eq!(fetched["result"]["response"], direct["result"]);
    assert!(fetched["result"]["settledAt"].as_u64().is_some());

    // An error outcome is kept too; an unknown callId is a typed error.
    f.wire
        .send(2, "tools.call", json!({"name": "nope", "callId": "r2"}))
        .await;
    f.wire.response(2).await;
    let failed = b.request(3, "tools.result", json!({"callId": "r2"})).await;
    assert_eq!(failed["result"]["state"], "error");
    assert_eq!(failed["result"]["error"]["data"]["type"], "tool_not_found");
    let unknown = b
        .request(4, "tools.result", json!({"callId": "never"}))
        .await;
    assert_eq!(error_type(&unknown), "invalid_request");
    assert_eq!(
        unknown["error"]["data"]["details"]["reason"],
        "call_not_retained"
    );
    f.stop().await;
}

#[tokio::test]
async fn a_detached_call_survives_its_connection_and_its_result_is_fetched() {
    let mut f = Fixture::new().await;
    let mut a = Wire::new(&f.daemon);
    a.send(
        1,
        "tools.call",
        json!({"name": "slow_task", "callId": "d1", "detach": true}),
    )
    .await;
    let (wire_id, _) = f.device.tool_call().await;
    // The connection goes away mid-call (a bridge killed): no tool_cancel follows.
    a.close();
    let probe = f
        .wire
        .request(1, "tools.result", json!({"callId": "d1"}))
        .await;
    assert_eq!(probe["result"]["state"], "running");
    f.device.result(&wire_id, json!("done")).await;
    let fetched = f
        .wire
        .request(2, "tools.result", json!({"callId": "d1", "waitMs": 60000}))
        .await;
    assert_eq!(fetched["result"]["state"], "ok", "{fetched}");
    assert_eq!(fetched["result"]["response"]["result"], "done");
    f.device.assert_no_frame();
    f.stop().await;
}

#[tokio::test]
async fn the_retention_window_is_bounded_in_count() {
    let mut f = Fixture::with_config(
        |c| {
            c.results.retain_count = 2;
        },
        standard_tools(),
    )
    .await;
    for (i, id) in ["k1", "k2", "k3"].iter().enumerate() {
        let n = i as i64 + 1;
        f.wire
            .send(n, "tools.call", json!({"name": "echo", "callId": id}))
            .await;
        let (wire_id, _) = f.device.tool_call().await;
        f.device.result(&wire_id, json!(n)).await;
        f.wire.response(n).await;
    }
    let oldest = f
        .wire
        .request(10, "tools.result", json!({"callId": "k1"}))
        .await;
    assert_eq!(
        oldest["error"]["data"]["details"]["reason"],
        "call_not_retained"
    );
    let newest = f
        .wire
        .request(11, "tools.result", json!({"callId": "k3"}))
        .await;
    assert_eq!(newest["result"]["response"]["result"], 3);
    f.stop().await;
}

/// §C8.43 (review19 L5): one connection has at most `MAX_RESULT_WAITS` waiting `tools.result`
/// requests; one more is refused at once with a typed error, a fetch without `waitMs` and
/// other connections still answer, and the waits end with the call.
/// Sends `slow_task` as callId `w1` on the fixture's connection; returns its wire id once the
/// app has it (the call then runs until the test answers it).
async fn start_w1(f: &mut Fixture) -> String {
    f.wire
        .send(
            1,
            "tools.call",
            json!({"name": "slow_task", "callId": "w1"}),
        )
        .await;
    f.device.tool_call().await.0
}

/// Waits (bounded) until the daemon counts `n` waiting `tools.result` requests.
async fn until_waiting(calls: &appduct_daemon::calls::Calls, n: usize) {
    tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while calls.result_waits() < n {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("every fetch is waiting");
}

/// §C8.43: the waiting fetches of all connections together are bounded too (the s10 attack's
/// F3b: 2,000 connections × 256 waits took 2.7 GB): once the daemon holds
/// MAX_RESULT_WAITS_TOTAL, a fresh connection's wait is refused with `scope: "daemon"`, and a
/// fetch without `waitMs` still answers.
#[tokio::test]
async fn waiting_fetches_are_bounded_daemon_wide() {
    use appduct_protocol::limits::{MAX_RESULT_WAITS, MAX_RESULT_WAITS_TOTAL};
    let mut f = Fixture::new().await;
    let wire_id = start_w1(&mut f).await;
    let per = i64::try_from(MAX_RESULT_WAITS).unwrap();
    let mut waiters = Vec::new();
    for _ in 0..MAX_RESULT_WAITS_TOTAL / MAX_RESULT_WAITS {
        let mut w = Wire::new(&f.daemon);
        for id in 1..=per {
            w.send(id, "tools.result", json!({"callId": "w1", "waitMs": 60000}))
                .await;
        }
        waiters.push(w);
    }
    let calls = f.daemon.calls().clone();
    until_waiting(&calls, MAX_RESULT_WAITS_TOTAL).await;
    let mut late = Wire::new(&f.daemon);
    let refused = late
        .request(1, "tools.result", json!({"callId": "w1", "waitMs": 60000}))
        .await;
    assert_eq!(error_type(&refused), "invalid_request", "{refused}");
    assert_eq!(
        refused["error"]["data"]["details"],
        json!({"reason": "too_many_result_waits", "limit": MAX_RESULT_WAITS_TOTAL, "scope": "daemon"})
    );
    let quick = late
        .request(2, "tools.result", json!({"callId": "w1"}))
        .await;
    assert_eq!(quick["result"]["state"], "running", "{quick}");
    f.device.result(&wire_id, json!("done")).await;
    assert_eq!(f.wire.response(1).await["result"]["result"], "done");
    for w in &mut waiters {
        for id in 1..=per {
            assert_eq!(w.response(id).await["result"]["state"], "ok");
        }
    }
    assert_eq!(calls.result_waits(), 0);
    f.stop().await;
}

#[tokio::test]
async fn waiting_fetches_are_bounded_per_connection() {
    use appduct_protocol::limits::MAX_RESULT_WAITS;
    let mut f = Fixture::new().await;
    let mut b = Wire::new(&f.daemon);
    let mut c = Wire::new(&f.daemon);
    let wire_id = start_w1(&mut f).await;
    let waits = i64::try_from(MAX_RESULT_WAITS).unwrap();
    for id in 1..=waits {
        b.send(id, "tools.result", json!({"callId": "w1", "waitMs": 60000}))
            .await;
    }
    let calls = f.daemon.calls().clone();
    until_waiting(&calls, MAX_RESULT_WAITS).await;
    let refused = b
        .request(
            waits + 1,
            "tools.result",
            json!({"callId": "w1", "waitMs": 60000}),
        )
        .await;
    assert_eq!(error_type(&refused), "invalid_request", "{refused}");
    assert_eq!(
        refused["error"]["data"]["details"],
        json!({"reason": "too_many_result_waits", "limit": MAX_RESULT_WAITS})
    );
    let quick = b
        .request(waits + 2, "tools.result", json!({"callId": "w1"}))
        .await;
    assert_eq!(quick["result"]["state"], "running", "{quick}");
    c.send(1, "tools.result", json!({"callId": "w1", "waitMs": 60000}))
        .await;
    f.device.result(&wire_id, json!("done")).await;
    assert_eq!(f.wire.response(1).await["result"]["result"], "done");
    assert_eq!(c.response(1).await["result"]["state"], "ok");
    for id in 1..=waits {
        assert_eq!(b.response(id).await["result"]["state"], "ok");
    }
    assert_eq!(calls.result_waits(), 0);
    f.stop().await;
}
