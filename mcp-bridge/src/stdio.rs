//! The `appduct mcp` host minus logging setup (06 §6.14, §6.15): startup connection and version
//! check (exit 70 with one stderr line), the stdio transport, and exit within the grace period
//! after stdin EOF or SIGINT/SIGTERM.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use appduct_daemon::client::{ClientError, ClientOptions, ControlClient};
use appduct_protocol::link::validate_scheme;
use rmcp::serve_server;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::Notify;

use crate::connector::SocketConnector;
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

/// Wraps stdin and signals when it reaches end of file.
struct EofSignal<R> {
    inner: R,
    eof: Arc<Notify>,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofSignal<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &r
            && buf.filled().len() == before
            && buf.remaining() > 0
        {
            self.eof.notify_one();
        }
        r
    }
}

/// SIGINT and SIGTERM, listened for from the moment the host starts (06 §6.15): a signal
/// before the client initializes, or while the startup connection is still being made, ends
/// the process with exit 0 like one after it, instead of the default action.
struct StopSignals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    /// Installs the handlers now (a tokio signal listener is registered when created, so no
    /// signal between this call and the first wait is lost).
    fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listen = |kind| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!("cannot listen for a stop signal: {e}");
                    None
                }
            };
            Self {
                term: listen(SignalKind::terminate()),
                int: listen(SignalKind::interrupt()),
            }
        }
        #[cfg(not(unix))]
        {
            Self {}
        }
    }

    /// Resolves on the next SIGINT or SIGTERM; never when neither could be listened for.
    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            async fn next(s: Option<&mut tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                () = next(self.term.as_mut()) => {}
                () = next(self.int.as_mut()) => {}
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
    let mut stop = StopSignals::install();
    if let Some(s) = &opts.bridge.scheme
        && let Err(e) = validate_scheme(s)
    {
        tracing::warn!("{e}; --scheme {s:?} is ignored where a scheme is needed");
    }
    let connector = Arc::new(SocketConnector::new(opts.client.clone()));
    let startup = tokio::select! {
        r = ControlClient::connect(opts.client.clone()) => r,
        () = stop.recv() => return 0,
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
    if let Some(n) = control.as_ref().and_then(ControlClient::version_notice) {
        tracing::info!("{}", n.message);
    }
    let bridge = Bridge::new(connector, opts.bridge.clone());
    if let Some(c) = control {
        bridge.set_control(c).await;
    }
    let eof = Arc::new(Notify::new());
    let stdin = EofSignal {
        inner: tokio::io::stdin(),
        eof: eof.clone(),
    };
    let served = tokio::select! {
        r = serve_server(bridge, (stdin, tokio::io::stdout())) => r,
        () = stop.recv() => return 0,
    };
    let running = match served {
        Ok(r) => r,
        Err(e) => {
            tracing::info!("the MCP client left before initializing: {e}");
            return 0;
        }
    };
    let grace = opts.bridge.exit_grace;
    let service = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        _ = &mut waiting => return 0,
        () = eof.notified() => {}
        // A signal ends the service loop as end of stdin does (stdin may stay open).
        () = stop.recv() => service.cancel(),
    }
    // In-flight work gets the grace period; then the process exits and the daemon cancels
    // the calls of its closed connections (06 §6.15).
    let _ = tokio::time::timeout(grace, &mut waiting).await;
    0
}
