//! Devices against the built daemon (§D2, §D9, §D9.6, §D11): SDK devices claiming CLI-minted
//! links over wss with the pin, numbered aliases and per-alias routing, a dropped app suspended
//! and resumed with its id and alias, background and foreground, revoke as the device sees it,
//! the web transport, and the web listener's upgrade checks with raw HTTP (SEC-20, 21, 25–27).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use appduct_e2e::device::{RawDevice, mint, sdk_device};
use appduct_e2e::harness::{Ran, Sandbox};
use appduct_e2e::{OrFail as _, blocking};
use appduct_sdk::{ClientState, ConnectOptions, Transport};
use serde_json::{Value, json};

/// Advertise loopback so the SDK's private-LAN rule accepts the links on any machine.
const CONFIG: &str = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#;
const WAIT: Duration = Duration::from_secs(10);

fn find<'a>(list: &'a [Value], alias: &str) -> Option<&'a Value> {
    list.iter().find(|s| s["alias"] == alias)
}

fn aliases(list: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = list
        .iter()
        .filter_map(|s| s["alias"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// `tools call <args…> --json` → (exit code, envelope).
fn call(sb: &Sandbox, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["--json", "tools", "call"];
    all.extend_from_slice(args);
    let ran: Ran = blocking(|| sb.run(&all)).or_fail();
    (ran.code, ran.json().or_fail())
}

async fn wait_state(client: &appduct_sdk::Client, check: impl Fn(&ClientState) -> bool) -> bool {
    let mut states = client.watch_state();
    tokio::time::timeout(WAIT, states.wait_for(|s| check(s)))
        .await
        .is_ok_and(|r| r.is_ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_model_devices_get_numbered_aliases_and_calls_follow_the_alias() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let link_a = blocking(|| mint(&sb, &[])).or_fail();
    assert!(link_a.deep_link.contains("&pin=sha256%2F"), "{link_a:?}");
    let a = sdk_device(&link_a, "Pixel 8", "a").or_fail();
    let session_a = a.connect(&link_a.deep_link).await.or_fail();
    assert_eq!(session_a.alias, "pixel-8");
    assert_eq!(session_a.session_id, link_a.session_id);

    let link_b = blocking(|| mint(&sb, &[])).or_fail();
    let b = sdk_device(&link_b, "Pixel 8", "b").or_fail();
    let session_b = b.connect(&link_b.deep_link).await.or_fail();
    assert_eq!(session_b.alias, "pixel-8-2");

    let both = blocking(|| {
        sb.wait_sessions(WAIT, |l| {
            l.len() == 2 && l.iter().all(|s| s["toolCount"] == 2)
        })
    });
    assert!(both, "{:?}", blocking(|| sb.sessions()));
    let list = blocking(|| sb.sessions()).or_fail();
    assert_eq!(aliases(&list), ["pixel-8", "pixel-8-2"]);
    let entry = find(&list, "pixel-8-2").unwrap_or_else(|| panic!("{list:?}"));
    assert_eq!(entry["sessionId"], json!(link_b.session_id));
    assert_eq!(entry["state"], "active");
    assert_eq!(entry["transport"], "native");
    assert_eq!(
        entry["device"],
        json!({"manufacturer": "E2E", "model": "Pixel 8", "os": "Linux"})
    );

    // Calls follow the selector: alias or id.
    assert_eq!(
        call(&sb, &["pixel-8-2", "whoami"]),
        (0, json!({"ok": true, "data": {"device": "b"}}))
    );
    assert_eq!(call(&sb, &["pixel-8", "whoami"]).1["data"]["device"], "a");
    assert_eq!(
        call(&sb, &[&link_b.session_id, "whoami"]).1["data"]["device"],
        "b"
    );
    let (code, ambiguous) = call(&sb, &["whoami"]);
    assert_eq!(code, 71, "{ambiguous}");
    assert_eq!(ambiguous["error"]["type"], "ambiguous_session");

    // Revoking one device leaves the other untouched; the SDK reports `revoked`.
    let revoked = blocking(|| sb.data(&["sessions", "revoke", "pixel-8"])).or_fail();
    assert_eq!(revoked["revoked"], "session");
    assert_eq!(revoked["sessionId"], json!(link_a.session_id));
    assert!(
        wait_state(&a, |s| s.reason() == Some("revoked")).await,
        "{:?}",
        a.state()
    );
    assert_eq!(b.state(), ClientState::Active);
    assert_eq!(
        call(&sb, &["whoami"]),
        (0, json!({"ok": true, "data": {"device": "b"}}))
    );

    // The freed alias goes to the next device of the same model.
    let link_c = blocking(|| mint(&sb, &[])).or_fail();
    let c = sdk_device(&link_c, "Pixel 8", "c").or_fail();
    assert_eq!(
        c.connect(&link_c.deep_link).await.or_fail().alias,
        "pixel-8"
    );
    for device in [&a, &b, &c] {
        device.disconnect();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_app_is_suspended_and_resumes_with_its_id_and_alias() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let (mut device, ack) = RawDevice::claim(&link, "Galaxy S24").await.or_fail();
    assert_eq!(ack["alias"], "galaxy-s24");
    assert_eq!(ack["session_id"], json!(link.session_id));
    let token = ack["resume_token"].as_str().unwrap_or_default().to_owned();
    assert_eq!(token.len(), 43, "{ack}");
    device
        .register(json!([{"name": "ping", "description": "Answers pong."}]))
        .await
        .or_fail();

    // The app dies: TCP goes away without a close frame.
    drop(device);
    let suspended = blocking(|| {
        sb.wait_sessions(WAIT, |l| {
            l.len() == 1
                && l[0]["state"] == "suspended"
                && l[0]["suspendReason"] == "connection_lost"
        })
    });
    assert!(suspended, "{:?}", blocking(|| sb.sessions()));
    let (code, failed) = call(&sb, &["ping"]);
    assert_eq!(code, 71, "{failed}");
    assert_eq!(failed["error"]["type"], "session_suspended");

    let (mut device, first) = RawDevice::resume(&link.endpoint(), &link.session_id, &token)
        .await
        .or_fail();
    let ack = first.unwrap_or_else(|closed| panic!("resume refused: {closed:?}"));
    assert_eq!(ack["type"], "session_ack");
    assert_eq!(ack["session_id"], json!(link.session_id));
    assert_eq!(ack["alias"], "galaxy-s24");
    assert_ne!(
        ack["resume_token"],
        json!(token),
        "the resume token must rotate"
    );
    let list = blocking(|| sb.sessions()).or_fail();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["state"], "active");
    assert_eq!(list[0]["alias"], "galaxy-s24");
    assert_eq!(list[0]["sessionId"], json!(link.session_id));
    assert!(list[0].get("suspendReason").is_none(), "{list:?}");

    // SEC-20: the previous token no longer resumes, and the live socket is untouched.
    let (_stale, refused) = RawDevice::resume(&link.endpoint(), &link.session_id, &token)
        .await
        .or_fail();
    let closed = refused
        .err()
        .unwrap_or_else(|| panic!("the rotated token resumed"));
    assert_eq!(
        (closed.code, closed.reason.as_str()),
        (Some(1008), "invalid_resume_token")
    );

    // The resumed socket serves calls.
    device
        .register(json!([{"name": "ping", "description": "Answers pong."}]))
        .await
        .or_fail();
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l[0]["toolCount"] == 1)
    ));
    let app = tokio::spawn(async move {
        let frame = device.expect_frame("tool_call").await.or_fail();
        device.reply(&frame, json!("pong")).await.or_fail();
        frame
    });
    let cli = call(&sb, &["ping"]);
    let served = app.await.or_fail();
    assert_eq!(served["name"], "ping");
    assert_eq!(cli, (0, json!({"ok": true, "data": "pong"})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backgrounded_app_fails_calls_until_it_returns_to_the_foreground() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let device = sdk_device(&link, "iPhone 15", "phone").or_fail();
    let session = device.connect(&link.deep_link).await.or_fail();
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 2)
    ));

    device.background();
    let suspended = blocking(|| {
        sb.wait_sessions(WAIT, |l| {
            l.len() == 1
                && l[0]["state"] == "suspended"
                && l[0]["suspendReason"] == "app_backgrounded"
        })
    });
    assert!(suspended, "{:?}", blocking(|| sb.sessions()));
    let (code, failed) = call(&sb, &["whoami"]);
    assert_eq!(code, 71, "{failed}");
    assert_eq!(failed["error"]["type"], "session_suspended");
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("foreground"), "{message}");

    device.foreground();
    assert!(wait_state(&device, |s| *s == ClientState::Active).await);
    let back = blocking(|| {
        sb.wait_sessions(WAIT, |l| {
            l.len() == 1 && l[0]["state"] == "active" && l[0]["toolCount"] == 2
        })
    });
    assert!(back, "{:?}", blocking(|| sb.sessions()));
    assert_eq!(device.session(), Some(session.clone()));
    assert_eq!(
        call(&sb, &[&session.alias, "whoami"]),
        (0, json!({"ok": true, "data": {"device": "phone"}}))
    );
    device.disconnect();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_closes_the_device_socket_with_1000_revoked() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let (code, none) = call(&sb, &["whoami"]);
    assert_eq!((code, &none["error"]["type"]), (71, &json!("no_session")));

    let link = blocking(|| mint(&sb, &[])).or_fail();
    let (mut device, ack) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    let revoked = blocking(|| sb.data(&["sessions", "revoke", "pixel-8"])).or_fail();
    assert_eq!(
        revoked,
        json!({"ok": true, "sessionId": link.session_id, "alias": "pixel-8", "revoked": "session"})
    );
    let closed = device.expect_close().await.or_fail();
    assert_eq!(
        (closed.code, closed.reason.as_str()),
        (Some(1000), "revoked")
    );
    assert_eq!(blocking(|| sb.sessions()).or_fail(), Vec::<Value>::new());

    // The session is gone for good: its resume token opens nothing.
    let token = ack["resume_token"].as_str().unwrap_or_default();
    let (_d, refused) = RawDevice::resume(&link.endpoint(), &link.session_id, token)
        .await
        .or_fail();
    let closed = refused
        .err()
        .unwrap_or_else(|| panic!("a revoked session resumed"));
    assert_eq!(
        (closed.code, closed.reason.as_str()),
        (Some(1008), "unknown_session")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_device_claims_a_web_link_on_the_web_listener_only() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let status = blocking(|| sb.status()).or_fail();
    let web_port = status["daemon"]["webPort"].as_u64().unwrap_or(0) as u16;
    let wss_port = status["daemon"]["wssPort"].as_u64().unwrap_or(0) as u16;

    let web = blocking(|| mint(&sb, &["--transport", "web"])).or_fail();
    assert_eq!(web.transport, Transport::Web);
    assert_eq!(web.port, web_port);
    assert!(!web.deep_link.contains("pin="), "{}", web.deep_link);
    let native = blocking(|| mint(&sb, &[])).or_fail();

    // SEC-21: each link on the other listener closes wrong_transport and stays claimable.
    let mut pinned = native.endpoint_on(Transport::Native, wss_port);
    let mut wrong = RawDevice::open(&pinned).await.or_fail();
    wrong
        .send_text(web.claim_frame(&web.token, "Browser"))
        .await
        .or_fail();
    let closed = wrong.expect_close().await.or_fail();
    assert_eq!(
        (closed.code, closed.reason.as_str()),
        (Some(1008), "wrong_transport")
    );
    pinned.transport = Transport::Web;
    pinned.port = web_port;
    pinned.pins.clear();
    let mut wrong = RawDevice::open(&pinned).await.or_fail();
    wrong
        .send_text(native.claim_frame(&native.token, "Phone"))
        .await
        .or_fail();
    let closed = wrong.expect_close().await.or_fail();
    assert_eq!(
        (closed.code, closed.reason.as_str()),
        (Some(1008), "wrong_transport")
    );

    let browser = sdk_device(&web, "Chrome", "web").or_fail();
    let options = ConnectOptions {
        transport: Some(Transport::Web),
    };
    let session = browser
        .connect_with(&web.deep_link, options)
        .await
        .or_fail();
    assert_eq!(session.session_id, web.session_id);
    let (_phone, ack) = RawDevice::claim(&native, "Phone").await.or_fail();
    assert_eq!(ack["alias"], "phone");

    assert!(blocking(|| sb.wait_sessions(WAIT, |l| {
        find(l, "chrome").is_some_and(|s| s["toolCount"] == 2)
    })));
    let list = blocking(|| sb.sessions()).or_fail();
    let entry = find(&list, "chrome").unwrap_or_else(|| panic!("{list:?}"));
    assert_eq!(entry["transport"], "web");
    assert_eq!(
        find(&list, "phone").map(|s| &s["transport"]),
        Some(&json!("native"))
    );
    assert_eq!(
        call(&sb, &["chrome", "echo", "--input", r#"{"x":[1,"two"]}"#]),
        (
            0,
            json!({"ok": true, "data": {"device": "web", "args": {"x": [1, "two"]}}})
        )
    );
    browser.disconnect();
}

/// Sends one raw HTTP request to the web listener and returns the status code and the head.
fn http(port: u16, host: &str, upgrade: bool, origins: &[&str]) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).or_fail();
    stream.set_read_timeout(Some(WAIT)).or_fail();
    let mut request = format!("GET / HTTP/1.1\r\nHost: {host}\r\n");
    if upgrade {
        request.push_str(
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
        );
    }
    for origin in origins {
        request.push_str(&format!("Origin: {origin}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).or_fail();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head:?}"));
    (code, head)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_listener_checks_upgrade_host_and_origin() {
    let config =
        r#"{"wssPort": 0, "advertisedIp": "127.0.0.1", "webOrigins": ["http://devbox.lan:5173"]}"#;
    let sb = Sandbox::with_config(config).or_fail();
    let web = blocking(|| mint(&sb, &["--transport", "web"])).or_fail();
    let port = web.port;
    let host = format!("127.0.0.1:{port}");

    // SEC-27: not an upgrade → 426 naming websocket; a foreign Host → 403.
    let (code, head) = http(port, &host, false, &[]);
    assert_eq!(code, 426, "{head}");
    assert!(
        head.to_ascii_lowercase().contains("upgrade: websocket"),
        "{head}"
    );
    assert_eq!(
        http(port, &format!("evil.example:{port}"), true, &[]).0,
        403
    );

    // SEC-25: refused origins.
    for origins in [
        &["https://evil.example"][..],
        &["null"],
        &["http://localhost.evil.example"],
        &["http://localhost:3000", "http://localhost:3000"],
    ] {
        assert_eq!(http(port, &host, true, origins).0, 403, "{origins:?}");
    }
    // SEC-26: accepted ones.
    for origins in [
        &[][..],
        &["http://localhost:3000"],
        &["https://127.0.0.1"],
        &["http://devbox.lan:5173"],
        &["HTTP://DEVBOX.LAN:5173"],
    ] {
        assert_eq!(http(port, &host, true, origins).0, 101, "{origins:?}");
    }
    assert_eq!(http(port, &format!("LOCALHOST:{port}"), true, &[]).0, 101);

    // A refused upgrade consumed nothing: the link is still claimable.
    let mut device = RawDevice::open(&web.endpoint()).await.or_fail();
    device
        .send_text(web.claim_frame(&web.token, "Firefox"))
        .await
        .or_fail();
    let ack = device.expect_frame("session_ack").await.or_fail();
    assert_eq!(ack["alias"], "firefox");
}

#[test]
fn the_web_listener_is_not_reachable_on_the_advertised_lan_address() {
    // No advertisedIp: the daemon detects the LAN address it advertises.
    let sb = Sandbox::new().or_fail();
    let status = sb.status().or_fail();
    let daemon = &status["daemon"];
    let web = daemon["webPort"].as_u64().unwrap_or(0) as u16;
    let wss = daemon["wssPort"].as_u64().unwrap_or(0) as u16;
    // SEC-28 on loopback first: the web listener answers there.
    assert!(TcpStream::connect(("127.0.0.1", web)).is_ok());
    let address: std::net::IpAddr = daemon["advertisedAddress"]["address"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no advertised address: {status}"));
    if address.is_loopback() {
        // A machine without a LAN address has nothing more to check.
        eprintln!("note: advertised address is loopback; LAN reachability not checked");
        return;
    }
    // The wss listener is reachable on the LAN address, the web listener is not.
    assert!(
        TcpStream::connect((address, wss)).is_ok(),
        "{address}:{wss}"
    );
    assert!(
        TcpStream::connect((address, web)).is_err(),
        "the web listener answers on {address}:{web}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_on_the_other_listener_is_refused_and_the_token_still_works() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let web_port = blocking(|| sb.status()).or_fail()["daemon"]["webPort"]
        .as_u64()
        .unwrap_or(0) as u16;
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let (device, ack) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    let token = ack["resume_token"].as_str().unwrap_or_default().to_owned();
    drop(device);
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["state"] == "suspended")
    ));

    // SEC-22: the web listener refuses the native session's resume without rotating the token.
    let other = link.endpoint_on(Transport::Web, web_port);
    let (_wrong, refused) = RawDevice::resume(&other, &link.session_id, &token)
        .await
        .or_fail();
    let closed = refused
        .err()
        .unwrap_or_else(|| panic!("resumed on the web listener"));
    assert_eq!(
        (closed.code, closed.reason.as_str()),
        (Some(1008), "wrong_transport")
    );
    let (_device, first) = RawDevice::resume(&link.endpoint(), &link.session_id, &token)
        .await
        .or_fail();
    let ack = first.unwrap_or_else(|closed| panic!("the token stopped working: {closed:?}"));
    let rotated = ack["resume_token"].as_str().unwrap_or_default().to_owned();

    // SEC-24: no token or payload in the logs, the session list or the status.
    let secrets = [link.token.as_str(), token.as_str(), rotated.as_str()];
    let payload = link.deep_link.split("appduct=").nth(1).unwrap_or_default();
    let payload = payload.split('&').next().unwrap_or_default().to_owned();
    let mut texts = vec![
        blocking(|| sb.run(&["--json", "sessions", "ls"]))
            .or_fail()
            .stdout,
        blocking(|| sb.run(&["--json", "daemon", "status"]))
            .or_fail()
            .stdout,
    ];
    for name in ["daemon.log", "events.log"] {
        texts.push(std::fs::read_to_string(sb.state_dir().join(name)).unwrap_or_default());
    }
    for text in &texts {
        for secret in secrets.iter().copied().chain([payload.as_str()]) {
            assert!(!secret.is_empty());
            assert!(!text.contains(secret), "a secret leaked into: {text}");
        }
    }
}
