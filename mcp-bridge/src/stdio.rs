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
use tracing::instrument::WithSubscriber;

use crate::connector::SocketConnector;
use crate::deferred_log::DeferredLog;
use crate::framing::LineTransport;
use crate::options::BridgeOptions;
use crate::project;
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

/// The one stderr line of a failed startup: both versions and the remedies, whatever the
/// reason (06 §6.14).
pub fn startup_failure_line(e: &ClientError) -> String {
    let mut line = e.to_string().replace('\n', " ");
    if !(line.contains("appduct daemon stop") && line.contains("--daemon-restart")) {
        line.push_str(
            " Remedies: stop the daemon with `appduct daemon stop` and start appduct mcp again, \
             or rerun appduct mcp with --daemon-restart to replace it.",
        );
    }
    line
}

/// The scheme as it resolves at startup, in the directory a call without `cwd` or roots would
/// use; either problem is one stderr line and never stops the bridge (06 §6.14, 05 §12).
fn scheme_diagnostics(bridge: &Bridge) {
    let inner = &bridge.inner;
    let options = &inner.options;
    if let Some(s) = &options.scheme
        && let Err(e) = validate_scheme(s)
    {
        eprintln!("{e} (--scheme {s:?}); starting anyway, and appduct_connect reports it");
        return;
    }
    let Some(dir) = project::startup_dir(&inner.env) else {
        return;
    };
    if let Err(f) = project::resolve_scheme(
        &dir,
        options.scheme.as_deref(),
        &inner.env,
        options.state_dir.as_deref(),
    ) {
        eprintln!(
            "could not resolve the deep-link scheme in {}: {}; starting anyway (appduct_connect needs it, or a cwd argument naming the project)",
            dir.display(),
            f.message.replace('\n', " ").trim_end_matches('.')
        );
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
    // What the client logs while connecting waits for the outcome: a failed startup prints
    // exactly one stderr line (06 §6.14).
    let held = DeferredLog::for_current();
    let startup = tokio::select! {
        r = bridge.inner.connector.connect(true).with_subscriber(held.dispatch()) => r,
        () = &mut stop => return 0,
    };
    let control = match startup {
        Ok(c) => Some(c),
        Err(e @ ClientError::VersionMismatch { .. }) => {
            eprintln!("{}", startup_failure_line(&e));
            return EXIT_STARTUP_FAILED;
        }
        Err(e) => {
            held.replay();
            tracing::warn!("starting without a daemon connection: {e}");
            None
        }
    };
    held.replay();
    scheme_diagnostics(&bridge);
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

#[cfg(test)]
mod tests {
    use super::*;
    use appduct_daemon::client::MismatchReason;

    #[test]
    fn the_startup_failure_line_names_both_versions_and_both_remedies_for_every_reason() {
        for reason in [
            MismatchReason::DaemonBusy,
            MismatchReason::StillDifferentAfterRestart,
            MismatchReason::IncompatibleProtocol { min: 2, max: 3 },
            MismatchReason::MissingFeature("consent.records".into()),
        ] {
            let e = ClientError::VersionMismatch {
                daemon: "0.0.1".into(),
                client: "0.9.0".into(),
                sessions: 1,
                pending_links: 0,
                pending_calls: 0,
                reason: reason.clone(),
            };
            let line = startup_failure_line(&e);
            assert!(!line.contains('\n'), "{reason:?}: one line");
            for part in ["0.0.1", "0.9.0", "appduct daemon stop", "--daemon-restart"] {
                assert!(
                    line.contains(part),
                    "{reason:?}: {part} missing from {line:?}"
                );
            }
        }
    }
}
