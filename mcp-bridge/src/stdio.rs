//! The `appduct mcp` host minus logging setup (06 §6.14, §6.15): startup connection and version
//! check (exit 70 with one stderr line), the stdio transport, and exit 0 soon after stdin EOF or
//! SIGINT/SIGTERM, at any point of the startup included.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use appduct_daemon::client::{ClientError, ClientOptions};
use appduct_protocol::link::validate_scheme;
use rmcp::serve_server;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;

use crate::connector::SocketConnector;
use crate::framing::LineTransport;
use crate::options::BridgeOptions;
use crate::server::Bridge;

/// Exit code of a failed startup (version drift that cannot be resolved, 06 §6.14).
pub const EXIT_STARTUP_FAILED: u8 = 70;

/// Part of [`BridgeOptions::exit_grace`] kept for the runtime and process teardown after the
/// in-flight work was given up, so the whole exit stays within the grace.
pub const EXIT_MARGIN: Duration = Duration::from_millis(500);

/// What the host passes in.
#[derive(Debug, Clone)]
pub struct StdioOptions {
    /// Connection settings: state dir, version policy (`--daemon-restart`), `client_name`
    /// `appduct-mcp`.
    pub client: ClientOptions,
    pub bridge: BridgeOptions,
}

/// SIGINT and SIGTERM, registered when this value is created (so a signal that arrives during
/// startup is caught, not fatal).
struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let get = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!("cannot handle {name}: {e}");
                    None
                }
            };
            Self {
                interrupt: get(SignalKind::interrupt(), "SIGINT"),
                terminate: get(SignalKind::terminate(), "SIGTERM"),
            }
        }
        #[cfg(not(unix))]
        {
            Self {}
        }
    }

    /// Resolves at the first SIGINT or SIGTERM; never when neither could be registered.
    async fn recv(mut self) {
        #[cfg(unix)]
        {
            async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                () = next(&mut self.interrupt) => {}
                () = next(&mut self.terminate) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Runs `appduct mcp` on this process's stdin and stdout; returns the exit code. Call inside a
/// tokio runtime after installing the stderr logger.
pub async fn run_stdio(opts: StdioOptions) -> u8 {
    // First of all, so SIGINT/SIGTERM during the startup connection also exit 0 (06 §6.15).
    let signals = Signals::install();
    let connector = Arc::new(SocketConnector::new(opts.client.clone()));
    let bridge = Bridge::new(connector, opts.bridge);
    serve_stdio(
        bridge,
        tokio::io::stdin(),
        tokio::io::stdout(),
        signals.recv(),
    )
    .await
}

/// The host over any reader and writer, ending when `stop` resolves (a signal) or the input
/// ends; returns the exit code. [`run_stdio`] passes stdin, stdout and SIGINT/SIGTERM.
pub async fn serve_stdio<R, W>(
    bridge: Bridge,
    read: R,
    write: W,
    stop: impl Future<Output = ()>,
) -> u8
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    tokio::pin!(stop);
    let options = bridge.inner.options.clone();
    if let Some(s) = &options.scheme
        && let Err(e) = validate_scheme(s)
    {
        tracing::warn!("{e}; --scheme {s:?} is ignored where a scheme is needed");
    }
    let startup = tokio::select! {
        r = bridge.inner.connector.connect(true) => r,
        () = &mut stop => return 0,
    };
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
    if let Some(n) = control.as_ref().and_then(|c| c.version_notice()) {
        tracing::info!("{}", n.message);
    }
    if let Some(c) = control {
        bridge.set_control(c).await;
    }
    let eof = Arc::new(Notify::new());
    let transport = LineTransport::new(read, write).with_eof_signal(eof.clone());
    let running = tokio::select! {
        r = serve_server(bridge, transport) => match r {
            Ok(r) => r,
            Err(e) => {
                tracing::info!("the MCP client left before initializing: {e}");
                return 0;
            }
        },
        () = &mut stop => return 0,
    };
    let service = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        _ = &mut waiting => return 0,
        () = eof.notified() => {}
        // Stops reading and cancels the handlers in flight (06 §6.15: same as EOF).
        () = &mut stop => service.cancel(),
    }
    // In-flight work gets what is left of the grace; then the process exits and the daemon
    // cancels the calls of its closed connections (06 §6.15).
    let _ =
        tokio::time::timeout(options.exit_grace.saturating_sub(EXIT_MARGIN), &mut waiting).await;
    0
}
