//! The process behind an HTTP API connection (SECURITY.md §4.19): on Linux the daemon finds the
//! pid of a loopback TCP peer of its own user, and approvals (§C11.1, SECURITY.md §4.18) treat
//! an HTTP caller like a control socket peer: its controlling terminal is "the caller's" and
//! cannot approve its own parked call. Real loopback sockets and a real child process.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::calls_support;

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::daemon_support::WAIT;
use appduct_client::config::HttpConfig;
use appduct_client::http_token;
use appduct_daemon::approvals::{OperatorTerminal, TerminalDevice, TerminalOf};
use appduct_daemon::tcp_peer::{loopback_peer_pid, loopback_peer_pid_by};
use appduct_protocol::control::EventKind;
use calls_support::*;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::time::timeout;

#[test]
fn the_pid_of_a_loopback_peer_process_is_found() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // A separate process holds the client socket (bash's /dev/tcp), and says when it has.
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected && read -r _"
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "connected");
    let (server_side, peer) = listener.accept().unwrap();
    let local = server_side.local_addr().unwrap();
    assert_eq!(loopback_peer_pid(local, peer), Some(child.id()));

    // The server side of the same connection is not mistaken for the client's.
    let own = TcpStream::connect(local).unwrap();
    let (_own_server_side, own_peer) = listener.accept().unwrap();
    assert_eq!(loopback_peer_pid(local, own_peer), Some(std::process::id()));
    // A lookup past its time budget gives up: unknown, however findable the holder is.
    assert_eq!(loopback_peer_pid_by(local, own_peer, Instant::now()), None);
    drop(own);

    // Once the client is gone, nobody holds its socket: unknown, not a wrong pid.
    child.stdin.take().unwrap().write_all(b"\n").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(loopback_peer_pid(local, peer), None);
    // Not loopback: never looked up.
    assert_eq!(
        loopback_peer_pid(local, "192.0.2.1:5000".parse().unwrap()),
        None
    );
}

/// The caller's terminal is `/dev/pts/5` for the expected pid only; every approver's terminal
/// is `/dev/pts/5` too. Records the pid each parked caller was looked up with.
#[derive(Debug)]
struct SameTerminal {
    caller_pid: u32,
    looked_up: Mutex<Vec<Option<u32>>>,
}

fn pts5() -> TerminalDevice {
    TerminalDevice {
        path: "/dev/pts/5".into(),
        rdev: 5,
        created_unix_ms: Some(0),
    }
}

impl OperatorTerminal for SameTerminal {
    fn locate(&self, pid: Option<u32>, of: TerminalOf) -> Result<TerminalDevice, String> {
        match of {
            TerminalOf::Caller => {
                self.looked_up.lock().unwrap().push(pid);
                (pid == Some(self.caller_pid))
                    .then(pts5)
                    .ok_or_else(|| format!("process {pid:?} has no controlling terminal"))
            }
            TerminalOf::Approver => Ok(pts5()),
        }
    }

    fn write(&self, _device: &TerminalDevice, _text: &str) -> Result<(), String> {
        Ok(())
    }
}

#[tokio::test]
async fn an_http_caller_cannot_approve_its_own_call_from_its_terminal_and_is_audited_as_http() {
    let terminal = Arc::new(SameTerminal {
        caller_pid: std::process::id(),
        looked_up: Mutex::new(Vec::new()),
    });
    let seam = Arc::clone(&terminal);
    let mut f = Fixture::with(
        move |options, dir| {
            let mut config = appduct_client::config::Config::defaults(dir);
            calls_support::slow_task_needs_an_operator(&mut config);
            config.consent.approval_timeout_ms = 60_000;
            config.consent.operator_requires_terminal = true;
            config.http = Some(HttpConfig {
                port: 0,
                cors_origins: Vec::new(),
            });
            options.config(config).operator_terminal(seam)
        },
        standard_tools(),
    )
    .await;
    let addr = f.daemon.http_addr().unwrap();
    let token = http_token::read_token(f.dir.path()).unwrap().unwrap();

    // This process is the HTTP client: the call parks for an operator.
    let body = r#"{"n":1}"#;
    let raw = format!(
        "POST /v1/sessions/pixel-8/tools/slow_task/call HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        addr.port(),
        body.len()
    );
    let mut http = tokio::net::TcpStream::connect(addr).await.unwrap();
    http.write_all(raw.as_bytes()).await.unwrap();
    let pending = next_of(&mut f.events, EventKind::ApprovalPending).await;
    let approval_id = data(&pending)["approvalId"].as_str().unwrap().to_owned();
    assert_eq!(
        *terminal.looked_up.lock().unwrap(),
        vec![Some(std::process::id())],
        "the parked HTTP caller was looked up by its own pid"
    );

    // An approver on the caller's terminal is refused, as for a control socket caller.
    let refused = f
        .wire
        .request(9, "approvals.challenge", json!({"approvalId": approval_id}))
        .await;
    assert_eq!(
        refused["error"]["data"]["details"]["reason"], "caller_terminal",
        "{refused}"
    );

    // Denied by an operator: the HTTP caller gets its answer (403, approval_denied).
    let denied = f
        .wire
        .request(
            10,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "deny"}),
        )
        .await;
    assert!(denied.get("result").is_some(), "{denied}");
    let mut reply = Vec::new();
    timeout(WAIT, http.read_to_end(&mut reply))
        .await
        .unwrap()
        .unwrap();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");

    // The audit record says the call came through the HTTP listener (§C12.1); a control
    // connection's call has no `transport`, even when it names itself `caller: "http"`.
    let local = f
        .wire
        .request(
            11,
            "tools.call",
            json!({"name": "no_such_tool", "caller": "http"}),
        )
        .await;
    assert_eq!(local["error"]["data"]["type"], "tool_not_found", "{local}");
    let audit = audit_lines(&f.daemon).await;
    let denied = audit
        .iter()
        .find(|r| r["tool"] == "slow_task")
        .expect("the HTTP call's record");
    assert_eq!(
        (&denied["caller"], &denied["transport"], &denied["outcome"]),
        (&json!("http"), &json!("http"), &json!("denied")),
        "{denied}"
    );
    let local = audit
        .iter()
        .find(|r| r["tool"] == "no_such_tool")
        .expect("the control connection's record");
    assert_eq!(local["caller"], "http", "{local}");
    assert!(local.get("transport").is_none(), "{local}");
}
