//! Control server behaviour over an in-memory stream (§C2–§C3, ARCHITECTURE.md#test-layers), seen as raw lines.
#![allow(clippy::unwrap_used)]

use crate::control_support;

use std::sync::atomic::Ordering;

use appduct_daemon::control_server::ServerOptions;
use control_support::{Raw, TestHandler, app_event, request, serve};
use serde_json::{Value, json};

fn small(line_cap: usize, subscriber_buffer_cap: usize) -> ServerOptions {
    ServerOptions {
        line_cap,
        subscriber_buffer_cap,
        ..ServerOptions::default()
    }
}

#[tokio::test]
async fn line_at_the_cap_is_served_and_one_byte_more_closes_with_32600() {
    // SEC-38 (small cap).
    let h = TestHandler::new(Some("0.1.0"));
    let (stream, task) = serve(h, small(64, 4096), 64 * 1024);
    let mut raw = Raw::new(stream);

    // 64 bytes exactly (cap excludes the terminator; a \r before \n is stripped too).
    let line = br#"{"jsonrpc":"2.0","id":1,"method":"sessions.list","params":{}}   "#;
    assert_eq!(line.len(), 64);
    raw.send(line).await;
    raw.send(b"\r\n").await;
    assert_eq!(
        raw.recv().await,
        Some(json!({"jsonrpc":"2.0","id":1,"result":[]}))
    );

    // 65 unterminated bytes: answered without waiting for a newline, then closed.
    raw.send(&[b' '; 65]).await;
    let err = raw.recv().await.unwrap();
    assert_eq!(err["id"], Value::Null);
    assert_eq!(err["error"]["code"], -32600);
    assert_eq!(err["error"]["data"]["type"], "invalid_request");
    assert_eq!(err["error"]["data"]["details"], json!({"maxLineBytes": 64}));
    assert_eq!(
        raw.recv().await,
        None,
        "connection must close after the error"
    );
    task.await.unwrap();
}

#[tokio::test]
async fn malformed_lines_get_32700_and_the_connection_keeps_working() {
    let h = TestHandler::new(Some("0.1.0"));
    let (stream, _task) = serve(h, ServerOptions::default(), 64 * 1024);
    let mut raw = Raw::new(stream);
    for bad in [&b"nope\n"[..], b"\xff\xfe{}\n", b"{\"jsonrpc\":\n"] {
        raw.send(bad).await;
        let err = raw.recv().await.unwrap();
        assert_eq!(err["id"], Value::Null);
        assert_eq!(err["error"]["code"], -32700);
        assert_eq!(err["error"]["data"]["type"], "invalid_request");
    }
    // Empty lines are ignored; a batch is -32600; later lines are still served.
    raw.send(b"\n\r\n[]\n").await;
    let err = raw.recv().await.unwrap();
    assert_eq!(err["error"]["code"], -32600);
    raw.send_line(&request(2, "sessions.list", json!({}))).await;
    assert_eq!(
        raw.recv().await,
        Some(json!({"jsonrpc":"2.0","id":2,"result":[]}))
    );
}

#[tokio::test]
async fn unknown_methods_and_bad_params_are_rejected_before_the_handler() {
    let h = TestHandler::new(Some("0.1.0"));
    let (stream, _task) = serve(h.clone(), ServerOptions::default(), 64 * 1024);
    let mut raw = Raw::new(stream);
    raw.send_line(&request("w", "web.attach", json!({}))).await;
    let err = raw.recv().await.unwrap();
    assert_eq!(err["id"], "w");
    assert_eq!(err["error"]["code"], -32601);
    assert_eq!(
        err["error"]["data"]["details"],
        json!({"method": "web.attach"})
    );

    raw.send_line(&request(3, "daemon.shutdown", json!({"force": true})))
        .await;
    let err = raw.recv().await.unwrap();
    assert_eq!(err["id"], 3);
    assert_eq!(err["error"]["code"], -32602);
    assert_eq!(
        h.shutdowns.load(Ordering::SeqCst),
        0,
        "handler must not run"
    );

    // The id of a rejected request is free again.
    raw.send_line(&request(3, "sessions.list", json!({}))).await;
    assert_eq!(raw.recv().await.unwrap()["result"], json!([]));
}

#[tokio::test]
async fn notifications_are_neither_executed_nor_answered() {
    let h = TestHandler::new(Some("0.1.0"));
    let (stream, _task) = serve(h.clone(), ServerOptions::default(), 64 * 1024);
    let mut raw = Raw::new(stream);
    raw.send_line(&json!({"jsonrpc": "2.0", "method": "daemon.shutdown"}))
        .await;
    raw.send_line(&request(2, "sessions.list", json!({}))).await;
    // The first thing back is the answer to id 2: nothing answered the notification.
    assert_eq!(raw.recv().await.unwrap()["id"], 2);
    assert_eq!(h.shutdowns.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn duplicate_in_flight_id_is_rejected_and_the_first_request_is_unaffected() {
    let h = TestHandler::new(Some("0.1.0"));
    let gate = h.gate("slow");
    let (stream, _task) = serve(h, ServerOptions::default(), 64 * 1024);
    let mut raw = Raw::new(stream);
    raw.send_line(&request(7, "tools.cancel", json!({"callId": "slow"})))
        .await;
    raw.send_line(&request(7, "sessions.list", json!({}))).await;
    let dup = raw.recv().await.unwrap();
    assert_eq!(dup["id"], 7);
    assert_eq!(dup["error"]["code"], -32600);
    assert_eq!(dup["error"]["data"]["details"]["reason"], "duplicate_id");

    gate.send(true).unwrap();
    let first = raw.recv().await.unwrap();
    assert_eq!(first["id"], 7);
    assert_eq!(first["result"]["cancelled"], true);

    // Settled: the id may be used again.
    raw.send_line(&request(7, "sessions.list", json!({}))).await;
    assert_eq!(raw.recv().await.unwrap()["result"], json!([]));
}

#[tokio::test]
async fn slow_request_does_not_delay_a_later_one() {
    let h = TestHandler::new(Some("0.1.0"));
    let gate = h.gate("slow");
    let (stream, _task) = serve(h, ServerOptions::default(), 64 * 1024);
    let mut raw = Raw::new(stream);
    raw.send_line(&request(1, "tools.cancel", json!({"callId": "slow"})))
        .await;
    raw.send_line(&request(2, "sessions.list", json!({}))).await;
    assert_eq!(raw.recv().await.unwrap()["id"], 2);
    gate.send(false).unwrap();
    let slow = raw.recv().await.unwrap();
    assert_eq!(slow["id"], 1);
    assert_eq!(slow["result"]["cancelled"], false);
}

#[tokio::test]
async fn early_response_precedes_the_events_of_the_new_filter() {
    let h = TestHandler::new(Some("0.1.0"));
    h.queue_subscribe_events(vec![app_event(1, "a"), app_event(2, "b")]);
    let (stream, _task) = serve(h, ServerOptions::default(), 64 * 1024);
    let mut raw = Raw::new(stream);
    raw.send_line(&request(5, "events.subscribe", json!({})))
        .await;
    let first = raw.recv().await.unwrap();
    assert_eq!(
        first,
        json!({"jsonrpc": "2.0", "id": 5, "result": {"ok": true}})
    );
    for seq in [1, 2] {
        let n = raw.recv().await.unwrap();
        assert_eq!(n["method"], "event");
        assert_eq!(n["params"]["seq"], seq);
    }
}

#[tokio::test]
async fn subscriber_over_the_buffer_cap_is_closed_and_close_hooks_run() {
    let h = TestHandler::new(Some("0.1.0"));
    let mut hooks = h.watch_hooks();
    let mut closed = h.watch_closed();
    let mut conns = h.watch_connections();
    // A 64-byte pipe and a peer that never reads: the writer blocks almost at once.
    let (stream, task) = serve(h.clone(), small(1024, 512), 64);
    let mut raw = Raw::new(stream);
    // A pending tools.call registers a close hook (auto-cancel in the daemon).
    let _gate = h.gate("pending");
    raw.send_line(&request(
        1,
        "tools.call",
        json!({"name": "t", "callId": "pending"}),
    ))
    .await;
    raw.send_line(&request(2, "events.subscribe", json!({})))
        .await;
    let conn = conns.recv().await.unwrap();
    let line = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "method": "event", "params": app_event(1, "x")}),
    )
    .unwrap();
    let mut accepted = 0;
    while conn.send_notification(line.clone()) {
        accepted += 1;
        assert!(accepted < 100, "never closed");
    }
    assert!(!conn.is_open());
    assert_eq!(hooks.recv().await, Some(conn.id()));
    assert_eq!(closed.recv().await, Some(conn.id()));
    task.await.unwrap();
    assert_eq!(h.hooks_ran.load(Ordering::SeqCst), 1);
    // A hook registered after the close still runs, but on a task of its own: never inline on
    // the caller's thread, which may hold a lock the hook takes.
    let (tx, rx) = std::sync::mpsc::channel();
    let caller = std::thread::current().id();
    conn.on_close(move || tx.send(std::thread::current().id()).unwrap());
    assert!(rx.try_recv().is_err(), "the hook ran inline");
    let ran_on = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            if let Ok(thread) = rx.try_recv() {
                return thread;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    // A current-thread runtime: same thread, later task.
    assert_eq!(ran_on, caller);
    // The removable form hands the hook back instead.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let back = conn.add_close_hook(move || tx.send(()).unwrap());
    let Err(hook) = back else {
        panic!("registered on a closed connection")
    };
    assert!(rx.try_recv().is_err());
    hook();
    assert!(rx.try_recv().is_ok());
    drop(raw);
}

#[tokio::test]
async fn per_call_notifications_are_skipped_over_the_cap_without_a_subscription() {
    let h = TestHandler::new(Some("0.1.0"));
    let mut conns = h.watch_connections();
    let (stream, _task) = serve(h.clone(), small(1024, 512), 64);
    let mut raw = Raw::new(stream);
    raw.send_line(&request(1, "sessions.describe", json!({})))
        .await;
    let conn = conns.recv().await.unwrap();
    let note = |i: usize| {
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": "tool_call_progress",
            "params": {"requestId": 1, "callId": "c", "sessionId": "s", "message": format!("m{i:04}"), "ts": 1}}))
        .unwrap()
    };
    let mut accepted = 0;
    let mut skipped = 0;
    for i in 0..40 {
        if conn.send_notification(note(i)) {
            accepted += 1;
        } else {
            skipped += 1;
        }
    }
    assert!(
        accepted > 0 && skipped > 0,
        "accepted {accepted}, skipped {skipped}"
    );
    assert!(
        conn.is_open(),
        "a connection without a subscription is never closed"
    );
    // Responses are always queued, even over the cap.
    raw.send_line(&request(2, "sessions.list", json!({}))).await;
    let mut notes = 0;
    let mut ids = Vec::new();
    while ids.len() < 2 {
        let v = raw.recv().await.unwrap();
        if v["method"] == "tool_call_progress" {
            notes += 1;
        } else {
            ids.push(v["id"].clone());
        }
    }
    assert_eq!(notes, accepted);
    assert_eq!(ids, vec![json!(1), json!(2)]);
}

#[tokio::test]
async fn eof_closes_the_connection_and_runs_hooks_once() {
    let h = TestHandler::new(Some("0.1.0"));
    let mut hooks = h.watch_hooks();
    let _gate = h.gate("c1");
    let (stream, task) = serve(h.clone(), ServerOptions::default(), 64 * 1024);
    let mut raw = Raw::new(stream);
    raw.send_line(&request(
        1,
        "tools.call",
        json!({"name": "t", "callId": "c1"}),
    ))
    .await;
    raw.send_line(&request(2, "sessions.list", json!({}))).await;
    assert_eq!(raw.recv().await.unwrap()["id"], 2);
    drop(raw);
    assert!(hooks.recv().await.is_some());
    task.await.unwrap();
    assert_eq!(h.hooks_ran.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn removed_close_hooks_do_not_run_and_the_others_run_in_order() {
    let h = TestHandler::new(Some("0.1.0"));
    let mut conns = h.watch_connections();
    let (stream, task) = serve(h.clone(), ServerOptions::default(), 64 * 1024);
    let mut raw = Raw::new(stream);
    raw.send_line(&request(1, "sessions.describe", json!({})))
        .await;
    let conn = conns.recv().await.unwrap();
    assert_eq!(raw.recv().await.unwrap()["id"], 1);
    let ran = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let hook = |n: u32| {
        let ran = ran.clone();
        move || ran.lock().unwrap().push(n)
    };
    let first = conn.add_close_hook(hook(1)).ok().unwrap();
    // Per-call hooks come and go on a long-lived connection without accumulating.
    for n in 100..200 {
        let id = conn.add_close_hook(hook(n)).ok().unwrap();
        assert!(conn.remove_close_hook(id));
        assert!(!conn.remove_close_hook(id), "removed twice");
    }
    let third = conn.add_close_hook(hook(3)).ok().unwrap();
    conn.add_close_hook(hook(2)).ok().unwrap();
    assert_ne!(first, third);
    assert!(conn.remove_close_hook(third));
    drop(raw);
    task.await.unwrap();
    assert_eq!(*ran.lock().unwrap(), [1, 2]);
    assert!(!conn.remove_close_hook(first), "already ran");
}

/// §C15: responses are always queued, so a client that sends requests but never reads its
/// responses must not make the daemon buffer without bound: reading stops while the unwritten
/// bytes exceed the cap, and resumes once the client reads.
#[tokio::test(start_paused = true)]
async fn a_client_that_never_reads_is_not_read_from_while_over_the_cap() {
    let h = TestHandler::new(Some("0.1.0"));
    let (stream, _task) = serve(h.clone(), small(1024 * 1024, 1024), 256);
    use tokio::io::AsyncBufReadExt;
    let Raw {
        mut reader,
        mut writer,
    } = Raw::new(stream);
    let total = 2000;
    let mut requests = Vec::new();
    for id in 1..=total {
        let mut line = serde_json::to_vec(&request(id, "daemon.hello", json!({}))).unwrap();
        line.push(b'\n');
        requests.extend_from_slice(&line);
    }
    let sending = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        writer.write_all(&requests).await.unwrap();
        writer
    });
    // Nothing is read from the client any more: its writes stall.
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    assert!(!sending.is_finished(), "the daemon read every request");
    let answered = h.hellos.load(Ordering::SeqCst);
    assert!(
        answered < 1000,
        "{answered} requests were read while nothing was written"
    );
    // Reading the responses lets the rest in.
    let mut ids = std::collections::BTreeSet::new();
    let mut line = String::new();
    while ids.len() < total as usize {
        line.clear();
        assert_ne!(reader.read_line(&mut line).await.unwrap(), 0, "EOF");
        let response: Value = serde_json::from_str(&line).unwrap();
        assert!(response["result"].is_object(), "{response}");
        ids.insert(response["id"].as_i64().unwrap());
    }
    sending.await.unwrap();
}

/// §S3.6 step 5: a draining connection stops reading but still writes the responses owed to
/// requests in flight, then closes.
#[tokio::test]
async fn draining_writes_the_responses_still_in_flight_then_closes() {
    let h = TestHandler::new(Some("0.1.0"));
    let mut conns = h.watch_connections();
    let gate = h.gate("slow");
    let (stream, task) = serve(h.clone(), ServerOptions::default(), 64 * 1024);
    let mut raw = Raw::new(stream);
    raw.send_line(&request(
        1,
        "tools.call",
        json!({"name": "t", "callId": "slow"}),
    ))
    .await;
    raw.send_line(&request(2, "sessions.describe", json!({})))
        .await;
    let conn = conns.recv().await.unwrap();
    assert_eq!(raw.recv().await.unwrap()["id"], 2);
    let draining = tokio::spawn({
        let conn = conn.clone();
        async move {
            conn.drain_and_close(std::time::Duration::from_secs(30))
                .await
        }
    });
    // The drain has begun once the connection no longer counts as open.
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while conn.is_open() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    // Requests sent while draining are not read.
    raw.send_line(&request(3, "sessions.list", json!({}))).await;
    tokio::task::yield_now().await;
    gate.send(true).unwrap();
    let response = raw.recv().await.unwrap();
    assert_eq!(response["id"], 1, "{response}");
    assert_eq!(response["result"]["callId"], "slow");
    assert_eq!(raw.recv().await, None, "closed after the owed response");
    draining.await.unwrap();
    task.await.unwrap();
    assert!(!conn.is_open());
}
