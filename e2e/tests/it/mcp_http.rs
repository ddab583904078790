//! MCP over Streamable HTTP at `/mcp` (docs/http.md §H7, docs/mcp.md §M18) through the official
//! MCP TypeScript client connected by URL with the bearer token (`e2e/mcp-client/http-client.mjs`)
//! against a playground process: the ten built-ins listed, an app tool called, progress,
//! consent by elicitation, a client cancellation reaching the app, a wrong token refused,
//! DELETE ending the session; and, over raw HTTP, `401` without the token and `403` for a
//! foreign `Host` on `/mcp`.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use appduct_e2e::OrFail as _;
use appduct_e2e::harness::Sandbox;
use appduct_e2e::node::NodeProc;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// One raw HTTP/1.1 request to `/mcp`; returns the status code.
fn raw_status(port: u16, host: &str, auth: Option<&str>) -> u16 {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).or_fail();
    stream.set_read_timeout(Some(WAIT)).or_fail();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let auth = auth
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).or_fail();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).or_fail();
    let text = String::from_utf8_lossy(&head);
    text[9..12].parse().or_fail()
}

#[test]
fn the_official_typescript_client_connects_by_url() {
    let config = r#"{"wssPort": 0, "http": {"port": 0}, "policy": {"tools": {"playground/reset_counter": "prompt"}}}"#;
    let sb = Sandbox::with_config(config).or_fail();
    let (_app, ready) = sb.spawn_ready(&["--json", "playground"]).or_fail();
    assert_eq!(ready["data"]["alias"], "playground");
    let status = sb.data(&["http", "status"]).or_fail();
    let port = status["port"]
        .as_u64()
        .unwrap_or_else(|| panic!("no port: {status}")) as u16;
    let token = std::fs::read_to_string(sb.state_dir().join("http.token")).or_fail();
    let token = token.trim();

    // The checks of §H2 guard /mcp too.
    let host = format!("127.0.0.1:{port}");
    assert_eq!(raw_status(port, &host, None), 401);
    assert_eq!(raw_status(port, &host, Some("not-the-token")), 401);
    assert_eq!(
        raw_status(port, &format!("evil.example:{port}"), Some(token)),
        403
    );

    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut client = NodeProc::official_mcp_http_client(&sb, &url, token).or_fail();
    let done = client.wait_line(WAIT, |l| l["step"] == "report").or_fail();
    let report = &done["report"];
    assert!(report.get("failure").is_none(), "{}", report["failure"]);

    assert!(
        report["sessionId"].as_str().is_some_and(|s| !s.is_empty()),
        "no Mcp-Session-Id: {report}"
    );
    assert_eq!(report["server"]["name"], "appduct");
    assert_eq!(
        report["capabilities"],
        json!({"tools": {}, "resources": {}})
    );
    assert_eq!(
        report["tools"],
        json!([
            "appduct_connect",
            "appduct_wait_for_session",
            "appduct_list_tools",
            "appduct_describe_tool",
            "appduct_call_tool",
            "appduct_list_events",
            "appduct_events",
            "appduct_wait_for_event",
            "appduct_status",
            "appduct_call_result"
        ])
    );
    assert_eq!(report["listed"]["session"], "playground");
    assert_eq!(report["sum"]["structured"], json!({"total": 7}));
    assert_eq!(report["sum"]["call"]["alias"], "playground");
    assert_eq!(report["slow"]["structured"], json!({"done": true}));
    let progress = report["slow"]["progress"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    assert!(progress >= 2, "{}", report["slow"]);
    assert_eq!(report["accepted"], json!({"count": 0}), "{report}");
    assert_eq!(
        report["elicitations"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    let aborted = report["cancelled"]["message"].as_str().unwrap_or_default();
    assert!(aborted.ends_with("enough"), "{}", report["cancelled"]);
    let wrong = report["wrongToken"].as_str().unwrap_or_default();
    assert!(wrong.contains("wrong_token"), "{wrong}");
    assert_eq!(report["afterDelete"], 404, "{report}");
    assert_eq!(client.proc().wait_exit(WAIT), Some(0));

    // The daemon's view: the cancel reached the app (settled cancelled), the accepted prompt
    // carries its consent, and every call is an MCP caller.
    let mut records = Vec::new();
    let settled = Sandbox::wait_until(Duration::from_secs(10), || {
        records = sb.audit_records();
        records
            .iter()
            .any(|r| r["tool"] == "slow_task" && r["outcome"] == "cancelled")
    });
    assert!(settled, "no cancelled slow_task: {records:#?}");
    let cancelled: Vec<&Value> = records
        .iter()
        .filter(|r| r["tool"] == "slow_task" && r["outcome"] == "cancelled")
        .collect();
    assert_eq!(cancelled[0]["errorType"], "tool_cancelled");
    let reset: Vec<&Value> = records
        .iter()
        .filter(|r| r["tool"] == "reset_counter")
        .collect();
    assert_eq!(reset.len(), 1, "{records:#?}");
    assert_eq!(reset[0]["consent"], "elicitation");
    assert!(records.iter().all(|r| r["caller"] == "mcp"), "{records:#?}");
}
