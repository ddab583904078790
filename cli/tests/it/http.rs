//! `appduct http enable | status | token | disable` (§L24) against the built binary: enable
//! persists `http.port` and starts the server at once; the printed token opens it; a rotation
//! refuses the old token from the next request; disable stops it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use crate::support::sandbox;

/// `GET /v1/sessions` with `token`; the status code.
fn get_sessions(port: u16, token: &str) -> u16 {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text.split(' ').nth(1).unwrap().parse().unwrap()
}

#[test]
fn enable_token_rotate_status_and_disable() {
    let sb = sandbox();
    let off = sb.ok(&["http", "status"]);
    assert_eq!(off["enabled"], false, "{off}");

    let on = sb.ok(&["http", "enable"]);
    let port = u16::try_from(on["port"].as_u64().unwrap()).unwrap();
    assert_eq!(on["url"], format!("http://127.0.0.1:{port}"));
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(sb.state_dir().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(config["http"]["port"], 0, "{config}");
    assert_eq!(config["wssPort"], 0, "{config}");

    let status = sb.ok(&["http", "status"]);
    assert_eq!(status["port"], port, "{status}");
    let token = sb.ok(&["http", "token"])["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(get_sessions(port, &token), 200);

    let rotated = sb.ok(&["http", "token", "--rotate"]);
    let fresh = rotated["token"].as_str().unwrap();
    assert_ne!(fresh, token);
    assert_eq!(get_sessions(port, &token), 401);
    assert_eq!(get_sessions(port, fresh), 200);

    assert_eq!(sb.ok(&["http", "disable"])["enabled"], false);
    let status = sb.ok(&["http", "status"]);
    assert_eq!(
        (status["enabled"].clone(), status["port"].clone()),
        (Value::Bool(false), Value::Null)
    );
    // The listener closes as the server task sees the stop: bounded wait on the condition.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "still listening on {port}"
        );
        std::thread::yield_now();
    }
}
