//! The bridge exits 0 within the grace after end of input or a signal, with work in flight and
//! also during the startup connection (§M15).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use appduct_client::command_runner::ScriptedCommandRunner;
use appduct_mcp::{Bridge, DaemonConnector, serve_stdio};
use serde_json::json;
use support::*;

// ---------------------------------------------------------------------------------------------
// Exit within the grace after EOF or a signal, also during startup
// ---------------------------------------------------------------------------------------------

/// The host over a duplex, stopped by `stop`; returns the client and the host's exit code.
fn host(
    fake: &Arc<FakeDaemon>,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> (LineClient, tokio::task::JoinHandle<u8>) {
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let (r, w) = tokio::io::split(server_io);
    let stop = async move {
        let _ = stop.await;
    };
    let task = tokio::spawn(serve_stdio(fake_bridge(fake), r, w, stop));
    (LineClient::over(client_io, fake.clone()), task)
}

/// A fake with a pending link, so `appduct_wait_for_session` stays in flight.
fn fake_with_pending_link() -> Arc<FakeDaemon> {
    let fake = FakeDaemon::new(&["sessions.describe", "events.subscribe"]);
    fake.state
        .lock()
        .unwrap()
        .pending_links
        .push("Zk3pQ0mX8sL1vB2n".into());
    fake
}

async fn start_long_wait(c: &mut LineClient) {
    c.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "appduct_wait_for_session",
        "arguments": {"sessionId": "Zk3pQ0mX8sL1vB2n", "timeoutMs": 600000}}});
    c.send_line(&call.to_string()).await;
    c.fake.wait_for("sessions.describe", 1).await;
}

#[tokio::test(start_paused = true)]
async fn end_of_input_with_work_in_flight_exits_0_within_the_grace() {
    let fake = fake_with_pending_link();
    let (_keep, stop) = tokio::sync::oneshot::channel();
    let (mut c, task) = host(&fake, stop);
    start_long_wait(&mut c).await;
    let eof_at = tokio::time::Instant::now();
    c.close_input().await;
    assert_eq!(task.await.unwrap(), 0);
    let took = eof_at.elapsed();
    assert!(
        took < test_options().exit_grace,
        "exit {took:?} after EOF, not within {:?}",
        test_options().exit_grace
    );
}

#[tokio::test(start_paused = true)]
async fn a_signal_with_work_in_flight_exits_0_within_the_grace() {
    let fake = fake_with_pending_link();
    let (signal, stop) = tokio::sync::oneshot::channel();
    let (mut c, task) = host(&fake, stop);
    start_long_wait(&mut c).await;
    let signal_at = tokio::time::Instant::now();
    signal.send(()).unwrap();
    assert_eq!(task.await.unwrap(), 0);
    let took = signal_at.elapsed();
    assert!(
        took < test_options().exit_grace,
        "exit {took:?} after the signal"
    );
}

/// A daemon connection that never completes (a daemon that hangs during startup).
#[derive(Debug)]
struct HangingConnector;

impl DaemonConnector for HangingConnector {
    fn connect(
        &self,
        _spawn: bool,
    ) -> appduct_client::BoxFuture<
        '_,
        Result<appduct_client::client::ControlClient, appduct_client::client::ClientError>,
    > {
        Box::pin(std::future::pending())
    }
}

#[tokio::test]
async fn a_signal_during_the_startup_connection_exits_0() {
    let bridge = Bridge::with_runner(
        Arc::new(HangingConnector),
        test_options(),
        test_env(),
        Arc::new(ScriptedCommandRunner::new()),
    );
    let (_client_io, server_io) = tokio::io::duplex(1024);
    let (r, w) = tokio::io::split(server_io);
    let (signal, stop) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve_stdio(bridge, r, w, async move {
        let _ = stop.await;
    }));
    signal.send(()).unwrap();
    let code = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the host ends on the signal although the daemon never answered")
        .unwrap();
    assert_eq!(code, 0);
}
