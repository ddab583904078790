//! The `appduct mcp` host minus logging setup (06 §6.14, §6.15): startup connection and version
//! check (exit 70 with one stderr line), the stdio transport, and exit within the grace period
//! after stdin EOF or SIGINT/SIGTERM.

use std::sync::Arc;

use appduct_daemon::client::{ClientError, ClientOptions, ControlClient};
use appduct_protocol::link::validate_scheme;
use rmcp::serve_server;
use tokio::sync::Notify;

use crate::connector::SocketConnector;
use crate::framing::LineTransport;
use crate::options::BridgeOptions;
use crate::server::Bridge;

/// Exit code of a failed startup (version drift that cannot be resolved, 06 §6.14).
pub const EXIT_STARTUP_FAILED: u8 = 70;

/// What the host passes in.
#[derive(Debug, Clone)]
pub struct StdioOptions {
    /// Connection settings: state dir, version policy (`--daemon-restart`), `client_name`
    /// `appduct-mcp`.
    pub client: ClientOptions,
    pub bridge: BridgeOptions,
}

async fn terminate_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs `appduct mcp` on this process's stdin and stdout; returns the exit code. Call inside a
/// tokio runtime after installing the stderr logger.
pub async fn run_stdio(opts: StdioOptions) -> u8 {
    if let Some(s) = &opts.bridge.scheme
        && let Err(e) = validate_scheme(s)
    {
        tracing::warn!("{e}; --scheme {s:?} is ignored where a scheme is needed");
    }
    let connector = Arc::new(SocketConnector::new(opts.client.clone()));
    let startup = ControlClient::connect(opts.client.clone()).await;
    let control = match startup {
        Ok(c) => Some(c),
        Err(e @ ClientError::VersionMismatch { .. }) => {
            // Exactly one line naming both versions and the remedies (06 §6.14).
            eprintln!("{}", e.to_string().replace('\n', " "));
            return EXIT_STARTUP_FAILED;
        }
        Err(e) => {
            tracing::warn!("starting without a daemon connection: {e}");
            None
        }
    };
    if let Some(n) = control.as_ref().and_then(ControlClient::version_notice) {
        tracing::info!("{}", n.message);
    }
    let bridge = Bridge::new(connector, opts.bridge.clone());
    if let Some(c) = control {
        bridge.set_control(c).await;
    }
    let eof = Arc::new(Notify::new());
    let transport =
        LineTransport::new(tokio::io::stdin(), tokio::io::stdout()).with_eof_signal(eof.clone());
    let running = match serve_server(bridge, transport).await {
        Ok(r) => r,
        Err(e) => {
            tracing::info!("the MCP client left before initializing: {e}");
            return 0;
        }
    };
    let grace = opts.bridge.exit_grace;
    let waiting = running.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        _ = &mut waiting => return 0,
        () = eof.notified() => {}
        () = terminate_signal() => {}
    }
    // In-flight work gets the grace period; then the process exits and the daemon cancels
    // the calls of its closed connections (06 §6.15).
    let _ = tokio::time::timeout(grace, &mut waiting).await;
    0
}
