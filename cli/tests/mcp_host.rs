//! The built `appduct mcp` host at the process level (06 §6.14, §6.15, 05 §12): signals during
//! startup, early errors kept off stdout, and the startup diagnostics on stderr.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::net::UnixListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::{Sandbox, signal, wait_child};

/// A "daemon" socket that accepts connections and never answers, so the bridge's startup
/// handshake hangs (for 10 s, its request timeout).
fn silent_daemon(sb: &Sandbox) -> UnixListener {
    let listener = UnixListener::bind(sb.socket()).unwrap();
    listener.set_nonblocking(true).unwrap();
    listener
}

/// Accepts the bridge's startup connection (bounded wait) and keeps it open.
fn accept_within(listener: &UnixListener, limit: Duration) -> std::os::unix::net::UnixStream {
    let deadline = Instant::now() + limit;
    loop {
        match listener.accept() {
            Ok((stream, _)) => return stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "the bridge never connected");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

#[test]
fn sigterm_and_sigint_during_the_startup_connection_exit_0() {
    for sig in [rustix::process::Signal::TERM, rustix::process::Signal::INT] {
        let sb = Sandbox::new();
        let listener = silent_daemon(&sb);
        let mut child = sb
            .command(&["mcp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The bridge is now waiting for `daemon.hello` to be answered.
        let _held = accept_within(&listener, Duration::from_secs(10));
        signal(child.id() as i32, sig);
        let code = wait_child(&mut child, Duration::from_secs(5));
        assert_eq!(code, 0, "{sig:?} during startup must exit 0");
        let mut out = String::new();
        std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
        assert_eq!(out, "", "nothing on stdout before the first response");
    }
}
