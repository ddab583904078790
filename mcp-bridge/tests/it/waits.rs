//! The wait built-ins, status and project resolution (§M8.2, §M8.8, §M8.9, §M13).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use appduct_mcp::catalog;
use appduct_protocol::control::PolicyDecision;
use rmcp::model::{CallToolRequestParams, ElicitationAction, ProtocolVersion};
use serde_json::{Value, json};
use support::*;
use tokio::sync::mpsc;

const ID: &str = "q3VfZ0xkR2ptTnB4";

fn v2025() -> TestClient {
    TestClient::new(ProtocolVersion::V_2025_11_25, None)
}

fn spawn_call(
    h: &Harness,
    name: &str,
    args: Value,
) -> tokio::task::JoinHandle<rmcp::model::CallToolResult> {
    let peer = h.client.peer().clone();
    let params = CallToolRequestParams::new(name.to_owned()).with_arguments(obj(args));
    tokio::spawn(async move { peer.call_tool(params).await.unwrap() })
}

#[tokio::test]
async fn wait_for_session_resolves_on_claim_and_fails_on_expiry_or_close() {
    let fake = FakeDaemon::new(&["sessions.describe", "events.subscribe"]);
    fake.state.lock().unwrap().pending_links.push(ID.to_owned());
    let h = start(fake.clone(), v2025()).await;
    let pending = spawn_call(&h, catalog::WAIT_FOR_SESSION, json!({"sessionId": ID}));
    fake.wait_for("sessions.describe", 1).await;
    let sub = &fake.requests("events.subscribe")[0];
    assert_eq!(
        sub["kinds"],
        json!([
            "session_claimed",
            "link_expired",
            "link_refused",
            "session_revoked",
            "tools_changed"
        ])
    );
    fake.emit(
        json!({"kind": "session_claimed", "sessionId": "other", "alias": "x", "ts": 1, "seq": 0,
                     "data": {"device": {}, "transport": "native"}}),
    );
    // The claim, with the registry already there (as a daemon shows it after tools_changed).
    fake.add_session(session(ID, "pixel-8"), vec![]);
    fake.emit(
        json!({"kind": "session_claimed", "sessionId": ID, "alias": "pixel-8", "ts": 1, "seq": 0,
                     "data": {"device": {}, "transport": "native"}}),
    );
    let r = pending.await.unwrap();
    assert_eq!(
        structured(&r),
        json!({"sessionId": ID, "claimed": true, "alias": "pixel-8", "registry": "received", "toolCount": 0})
    );
    fake.remove_session(ID);

    // The first wait described twice: before the claim, and after it for the registry.
    let pending = spawn_call(&h, catalog::WAIT_FOR_SESSION, json!({"sessionId": ID}));
    fake.wait_for("sessions.describe", 3).await;
    fake.emit(json!({"kind": "link_expired", "sessionId": ID, "ts": 1, "seq": 0, "data": {}}));
    let r = pending.await.unwrap();
    assert_eq!(error_type(&r), "unknown_session");
    assert!(error_message(&r).contains("appduct_connect"));

    let pending = spawn_call(&h, catalog::WAIT_FOR_SESSION, json!({"sessionId": ID}));
    fake.wait_for("sessions.describe", 4).await;
    fake.close_subscribers();
    let r = pending.await.unwrap();
    assert_eq!(error_type(&r), "tool_execution_error");
    let m = error_message(&r);
    assert!(m.contains("daemon") && m.contains(ID), "{m}");
}

#[tokio::test(start_paused = true)]
async fn waits_time_out_with_tool_timeout_and_heartbeat() {
    let fake = FakeDaemon::new(&["sessions.describe", "events.subscribe"]);
    fake.state.lock().unwrap().pending_links.push(ID.to_owned());
    let client = v2025();
    let h = start(fake.clone(), client.clone()).await;
    let r = h
        .call(
            catalog::WAIT_FOR_SESSION,
            json!({"sessionId": ID, "timeoutMs": 40000}),
        )
        .await;
    assert_eq!(error_type(&r), "tool_timeout");
    // Heartbeats every 15 s: progress = elapsed ms, total = timeoutMs.
    let beats = client.progress.lock().unwrap().clone();
    assert_eq!(beats.len(), 2);
    assert_eq!(beats[0].total, Some(40000.0));
    assert_eq!(beats[0].progress, 15000.0);
    assert_eq!(beats[1].progress, 30000.0);
    assert_eq!(
        beats[0].message.as_deref(),
        Some(format!("waiting for session {ID}").as_str())
    );
}

#[tokio::test]
async fn wait_for_event_replays_and_reports_dropped() {
    let fake = FakeDaemon::new(&["sessions.describe", "events.subscribe"]);
    fake.add_session(session(ID, "pixel-8"), vec![]);
    let h = start(fake.clone(), v2025()).await;
    let pending = spawn_call(
        &h,
        catalog::WAIT_FOR_EVENT,
        json!({"name": "checkout_*", "since": 4}),
    );
    fake.wait_for("events.subscribe", 1).await;
    while fake.subscribers.lock().unwrap().is_empty() {
        fake.logged.notified().await;
    }
    let sub = &fake.requests("events.subscribe")[0];
    assert_eq!(sub["sessionSelector"], ID);
    assert_eq!(sub["since"], 4);
    assert_eq!(sub["payloadMaxBytes"], 4096);
    assert_eq!(
        sub["kinds"],
        json!(["app_event", "session_revoked", "session_expired"])
    );
    fake.emit(json!({"kind": "app_event", "sessionId": ID, "alias": "pixel-8", "ts": 9, "seq": 5,
                     "data": {"name": "checkout_completed", "payload": {"orderId": "A-17"}, "ts": 7}}));
    let r = structured(&pending.await.unwrap());
    assert_eq!(
        r,
        json!({"name": "checkout_completed", "payload": {"orderId": "A-17"}, "ts": 7, "seq": 5,
               "sessionId": ID, "alias": "pixel-8", "dropped": 2})
    );
}

#[tokio::test]
async fn cancel_while_a_prompt_is_open_never_reaches_the_app() {
    let fake = FakeDaemon::new(&["sessions.describe", "tools.list", "events.subscribe"]);
    fake.add_session(
        session(ID, "pixel-8"),
        vec![tool(
            json!({"name": "reset", "description": ""}),
            PolicyDecision::Prompt,
        )],
    );
    let (tx, mut prompts) = mpsc::unbounded_channel();
    let h = start(
        fake.clone(),
        TestClient::new(ProtocolVersion::V_2025_11_25, Some(Elicit::Manual(tx))),
    )
    .await;
    let params = CallToolRequestParams::new(catalog::CALL_TOOL)
        .with_arguments(obj(json!({"name": "reset"})));
    let handle = h
        .client
        .peer()
        .send_request_with_option(
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params)),
            rmcp::service::PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let (_, answer) = prompts.recv().await.unwrap();
    handle.cancel(Some("changed my mind".into())).await.unwrap();
    // A late accept must not start the call (tools.call is not even registered: the fake
    // would fail the test loudly).
    let _ = answer.send(ElicitationAction::Accept);
    // A later call proves the bridge is still serving and nothing was sent meanwhile.
    let r = h
        .call(catalog::DESCRIBE_TOOL, json!({"name": "reset"}))
        .await;
    assert_eq!(structured(&r)["policy"], "prompt");
    assert!(fake.requests("tools.call").is_empty());
}

#[tokio::test]
async fn status_reports_project_resolution_without_spawning() {
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.path().join(".appduct")).unwrap();
    std::fs::write(
        project.path().join(".appduct/config.json"),
        r#"{"scheme":"shopapp","appId":{"android":"com.example.shop"}}"#,
    )
    .unwrap();
    let nested = project.path().join("src/app");
    std::fs::create_dir_all(&nested).unwrap();
    let h = start(FakeDaemon::new(&[]), v2025()).await;
    let r = structured(
        &h.call(
            catalog::STATUS,
            json!({"cwd": nested.display().to_string()}),
        )
        .await,
    );
    assert_eq!(r["daemon"]["running"], false);
    assert_eq!(r["daemon"]["error"]["type"], "connection_error");
    assert_eq!(r["sessions"], json!([]));
    assert_eq!(r["consent"], "none");
    assert_eq!(r["server"]["protocolVersion"], "2025-11-25");
    let p = &r["project"];
    assert_eq!(p["cwdSource"], "argument");
    assert_eq!(p["scheme"], "shopapp");
    assert_eq!(p["schemeSource"], "project-config");
    assert_eq!(p["appId"], json!({"android": "com.example.shop"}));
    assert!(p.get("note").is_none());
    // No cwd: the server's own directory, with the note asking for cwd.
    let r = structured(&h.call(catalog::STATUS, json!({})).await);
    assert_eq!(r["project"]["cwdSource"], "server");
    assert!(r["project"]["note"].as_str().unwrap().contains("pass cwd"));
    assert_eq!(r["project"]["scheme"], Value::Null);
}

#[tokio::test]
async fn connect_without_a_scheme_names_every_place_tried() {
    // Without a scheme anywhere, connect names every place tried.
    let h = start(FakeDaemon::new(&[]), v2025()).await;
    let dir = tempfile::tempdir().unwrap();
    let r = h
        .call(
            catalog::CONNECT,
            json!({"target": "none", "cwd": dir.path().display().to_string()}),
        )
        .await;
    assert_eq!(error_type(&r), "invalid_request");
    let m = error_message(&r);
    for place in [
        "--scheme",
        "APPDUCT_SCHEME",
        ".appduct/config.json",
        "config.json",
        "app.json",
        "appduct init",
    ] {
        assert!(m.contains(place), "{place} in {m}");
    }
}

#[tokio::test]
async fn connect_mints_and_composes_links() {
    use appduct_protocol::link::{compose_deep_link, compose_web_link, web_script};
    use appduct_protocol::pin::SpkiPin;
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("app.json"),
        r#"{"expo":{"scheme":["shopapp","x"]}}"#,
    )
    .unwrap();
    let fake = FakeDaemon::new(&["link.create"]);
    let h = start(fake.clone(), v2025()).await;
    let cwd = project.path().display().to_string();
    let r = structured(
        &h.call(
            catalog::CONNECT,
            json!({"target": "none", "cwd": cwd, "ttlSeconds": 60}),
        )
        .await,
    );
    let minted = &fake.requests("link.create")[0];
    assert_eq!(minted["ttlSeconds"], 60);
    assert_eq!(minted["transport"], "native");
    assert!(
        minted.get("addressOverride").is_none(),
        "QR links keep the advertised address"
    );
    let payload = appduct_protocol::bootstrap::decode(
        r["deepLink"]
            .as_str()
            .unwrap()
            .split("appduct=")
            .nth(1)
            .unwrap()
            .split('&')
            .next()
            .unwrap(),
    )
    .unwrap()
    .encode()
    .unwrap();
    // The one shared composer: byte-identical to what the CLI composes for the same inputs.
    let expected =
        compose_deep_link("shopapp", &payload, Some(&SpkiPin::parse(PIN).unwrap())).unwrap();
    assert_eq!(r["deepLink"], expected);
    assert_eq!(r["sessionId"], "Zk3pQ0mX8sL1vB2n");
    assert_eq!(r["expiresAt"], 1_764_494_223u64);
    assert_eq!(r["delivered"], false);
    assert_eq!(r["transport"], "native");
    assert_eq!(r["cwdSource"], "argument");
    assert!(
        r["instructions"]
            .as_str()
            .unwrap()
            .contains("appduct_wait_for_session")
    );
    // A web-transport deep link has no pin.
    let r = structured(
        &h.call(
            catalog::CONNECT,
            json!({"target": "none", "cwd": cwd, "transport": "web"}),
        )
        .await,
    );
    assert!(!r["deepLink"].as_str().unwrap().contains("pin="));
    assert_eq!(fake.requests("link.create")[1]["transport"], "web");
    // target web: page URL with #appduct= and the connect script; no scheme needed.
    let r = structured(
        &h.call(
            catalog::CONNECT,
            json!({"target": "web", "url": "http://localhost:3000/#x"}),
        )
        .await,
    );
    let web_payload = r["url"]
        .as_str()
        .unwrap()
        .split("#appduct=")
        .nth(1)
        .unwrap()
        .to_owned();
    assert_eq!(
        r["url"],
        compose_web_link("http://localhost:3000/#x", &web_payload).unwrap()
    );
    assert_eq!(r["script"], web_script(&web_payload).unwrap());
    assert!(r.get("cwdSource").is_none());
}

#[tokio::test]
async fn roots_pick_the_project_and_are_read_once() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let uri = |p: &std::path::Path| format!("file://{}", p.display());
    // Undeclared roots: never asked.
    let plain = v2025();
    let h = start(FakeDaemon::new(&[]), plain.clone()).await;
    let r = structured(&h.call(catalog::STATUS, json!({})).await);
    assert_eq!(r["project"]["cwdSource"], "server");
    assert_eq!(
        plain.roots_reads.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    // One root (plus a non-file root that is ignored) → client-root, cached.
    let mut client = v2025();
    client.roots = Some(vec![uri(a.path()), "https://example.com/x".into()]);
    let h = start(FakeDaemon::new(&[]), client.clone()).await;
    for _ in 0..2 {
        let r = structured(&h.call(catalog::STATUS, json!({})).await);
        assert_eq!(r["project"]["cwdSource"], "client-root");
        assert_eq!(
            r["project"]["dir"],
            std::fs::canonicalize(a.path())
                .unwrap()
                .display()
                .to_string()
        );
        // The only note is the unresolved scheme; no "pass cwd" for a client root.
        assert!(!r["project"]["note"].as_str().unwrap().contains("pass cwd"));
    }
    assert_eq!(
        client.roots_reads.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    // The argument beats roots.
    let r = structured(
        &h.call(
            catalog::STATUS,
            json!({"cwd": b.path().display().to_string()}),
        )
        .await,
    );
    assert_eq!(r["project"]["cwdSource"], "argument");
    // Several roots with different project records → invalid_request asking for cwd.
    for d in [a.path(), b.path()] {
        std::fs::create_dir_all(d.join(".appduct")).unwrap();
        std::fs::write(d.join(".appduct/config.json"), "{}").unwrap();
    }
    let mut client = v2025();
    client.roots = Some(vec![uri(a.path()), uri(b.path())]);
    let h = start(FakeDaemon::new(&[]), client).await;
    let r = h.call(catalog::STATUS, json!({})).await;
    assert_eq!(error_type(&r), "invalid_request");
    assert!(error_message(&r).contains("cwd"));
    // Several roots, only one with a record → that one.
    std::fs::remove_dir_all(b.path().join(".appduct")).unwrap();
    let mut client = v2025();
    client.roots = Some(vec![uri(b.path()), uri(a.path())]);
    let h = start(FakeDaemon::new(&[]), client).await;
    let r = structured(&h.call(catalog::STATUS, json!({})).await);
    assert_eq!(
        r["project"]["dir"],
        std::fs::canonicalize(a.path())
            .unwrap()
            .display()
            .to_string()
    );
}

#[tokio::test]
async fn no_progress_without_a_token() {
    let fake = FakeDaemon::new(&[
        "sessions.describe",
        "tools.list",
        "tools.call",
        "events.subscribe",
    ]);
    fake.add_session(
        session(ID, "pixel-8"),
        vec![tool(
            json!({"name": "t", "description": ""}),
            PolicyDecision::Allow,
        )],
    );
    let mut raw = RawClient::start(fake.clone());
    raw.initialize("2025-11-25", json!({})).await;
    let (r, notes) = raw
        .request(
            1,
            "tools/call",
            json!({"name": "appduct_call_tool", "arguments": {"name": "t"}}),
        )
        .await;
    assert_eq!(r["result"]["structuredContent"], json!({"ok": true}));
    assert!(notes.is_empty(), "{notes:?}");
    // The daemon is always asked for progress: a parking notice extends the client's
    // watchdog (§C11.1); nothing is forwarded to an MCP client that gave no token.
    assert_eq!(
        fake.requests("tools.call")[0].get("progress"),
        Some(&json!(true)),
    );
}

/// A session claimed with its registry still pending.
fn pending_registry(id: &str) -> appduct_protocol::control::SessionSummary {
    let mut s = session(id, "pixel-8");
    s.registry = appduct_protocol::control::RegistryState::Pending;
    s
}

#[tokio::test]
async fn wait_for_session_resolves_once_the_registry_arrives_not_at_the_claim() {
    let fake = FakeDaemon::new(&["sessions.describe", "events.subscribe"]);
    fake.state.lock().unwrap().pending_links.push(ID.to_owned());
    let h = start(fake.clone(), v2025()).await;
    let pending = spawn_call(&h, catalog::WAIT_FOR_SESSION, json!({"sessionId": ID}));
    fake.wait_for("sessions.describe", 1).await;
    fake.state.lock().unwrap().pending_links.clear();
    fake.add_session(pending_registry(ID), vec![]);
    fake.emit(
        json!({"kind": "session_claimed", "sessionId": ID, "alias": "pixel-8", "ts": 1, "seq": 0,
                     "data": {"device": {}, "transport": "native"}}),
    );
    // The bridge looks at the claimed session, sees no registry, and keeps waiting.
    fake.wait_for("sessions.describe", 2).await;
    // Another session's tools do not end it.
    fake.emit(
        json!({"kind": "tools_changed", "sessionId": "other", "alias": "x", "ts": 1, "seq": 0,
                     "data": {"toolCount": 3}}),
    );
    assert!(
        !pending.is_finished(),
        "resolved before the registry arrived"
    );
    fake.remove_session(ID);
    let mut ready = session(ID, "pixel-8");
    ready.tool_count = 2;
    fake.add_session(ready, vec![]);
    fake.emit(
        json!({"kind": "tools_changed", "sessionId": ID, "alias": "pixel-8", "ts": 1, "seq": 0,
                     "data": {"toolCount": 2}}),
    );
    let r = pending.await.unwrap();
    assert_eq!(
        structured(&r),
        json!({"sessionId": ID, "claimed": true, "alias": "pixel-8", "registry": "received", "toolCount": 2})
    );
}

#[tokio::test(start_paused = true)]
async fn wait_for_session_reports_a_registry_still_pending_after_the_grace() {
    let fake = FakeDaemon::new(&["sessions.describe", "events.subscribe"]);
    // Claimed already, tools never sent: the wait ends with the state, not a failure, once
    // the deadline and the grace after the claim have passed.
    fake.add_session(pending_registry(ID), vec![]);
    let h = start(fake.clone(), v2025()).await;
    let r = h
        .call(
            catalog::WAIT_FOR_SESSION,
            json!({"sessionId": ID, "timeoutMs": 1000}),
        )
        .await;
    assert_eq!(
        structured(&r),
        json!({"sessionId": ID, "claimed": true, "alias": "pixel-8", "registry": "pending", "toolCount": 0})
    );
}

#[tokio::test]
async fn wait_for_session_reports_a_refusal_at_once_with_its_reason_and_a_hint() {
    let fake = FakeDaemon::new(&["sessions.describe", "events.subscribe"]);
    fake.state.lock().unwrap().pending_links.push(ID.to_owned());
    let h = start(fake.clone(), v2025()).await;
    // Refused while waiting.
    let pending = spawn_call(&h, catalog::WAIT_FOR_SESSION, json!({"sessionId": ID}));
    fake.wait_for("sessions.describe", 1).await;
    fake.emit(
        json!({"kind": "link_refused", "sessionId": ID, "ts": 1, "seq": 0,
                     "data": {"reason": "unsupported_link"}}),
    );
    let r = pending.await.unwrap();
    assert_eq!(error_type(&r), "unknown_session");
    let d = error_details(&r);
    assert_eq!(d["refused"], "unsupported_link");
    assert_eq!(d["selector"], ID);
    let hint = d["hint"].as_str().unwrap();
    assert!(hint.contains("only the JavaScript SDK"), "{hint}");
    assert!(hint.contains("\"for\": \"react-native\""), "{hint}");

    // Refused before the wait started: the describe says so, and the wait ends at once.
    fake.state.lock().unwrap().pending_details.insert(
        ID.to_owned(),
        json!({"transport": "native", "refused": "pin_mismatch",
                                      "endpoint": {"address": "192.168.1.20", "port": 8443}}),
    );
    let r = h
        .call(catalog::WAIT_FOR_SESSION, json!({"sessionId": ID}))
        .await;
    assert_eq!(error_type(&r), "unknown_session");
    let d = error_details(&r);
    assert_eq!(d["refused"], "pin_mismatch");
    assert!(
        d["hint"].as_str().unwrap().contains("192.168.1.20:8443"),
        "{d}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_times_out_names_the_likely_cause_by_link_kind() {
    for (transport, expected) in [
        ("native", "only the JavaScript SDK cannot use a native link"),
        ("web", "127.0.0.1 is reachable only from this machine"),
        ("sealed", "must reach 192.168.1.20:8443 on the LAN"),
    ] {
        let fake = FakeDaemon::new(&["sessions.describe", "events.subscribe"]);
        {
            let mut st = fake.state.lock().unwrap();
            st.pending_links.push(ID.to_owned());
            st.pending_details.insert(
                ID.to_owned(),
                json!({"transport": transport, "endpoint": {"address": "192.168.1.20", "port": 8443}}),
            );
        }
        let h = start(fake.clone(), v2025()).await;
        let r = h
            .call(
                catalog::WAIT_FOR_SESSION,
                json!({"sessionId": ID, "timeoutMs": 1000}),
            )
            .await;
        assert_eq!(error_type(&r), "tool_timeout", "{transport}");
        let d = error_details(&r);
        assert_eq!(d["timeoutMs"], 1000);
        let hint = d["hint"].as_str().unwrap();
        assert!(hint.contains(expected), "{transport}: {hint}");
    }
}
