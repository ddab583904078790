//! `appduct daemon run` (§L9.1, §S3.5–§S3.6): hosts the daemon in the foreground.
//!
//! The ready line is printed once `Daemon::start` returned, which is after the control socket
//! accepts connections (startup step 9). SIGHUP reloads `config.json` (`daemon.reload`,
//! §C8.33: policy applied, sessions and pending calls kept; the outcome is logged). SIGINT,
//! SIGTERM or `daemon.shutdown` start the teardown and the process exits 0 when it finished; a
//! second SIGINT or SIGTERM during the teardown exits 130 at once.

use std::io::IsTerminal as _;
use std::path::Path;

use std::sync::Arc;

use appduct_daemon::daemon::{Daemon, DaemonOptions, StartError};
use appduct_daemon::http_api::{
    BoxFuture, McpEndpoint, McpEndpointFactory, McpRequest, McpResponse,
};
use appduct_mcp::BridgeOptions;
use appduct_mcp::http::{HttpEndpoint, HttpOptions};

use serde_json::json;

use crate::error::CliError;
use crate::output::{Output, Success};
use crate::signals::{INTERRUPTED, Interrupt, Interrupts};

/// The options `daemon run` starts the daemon with: `/mcp` of the HTTP API is the MCP bridge
/// (docs/http.md §H7).
pub fn daemon_options(state_dir: &Path) -> DaemonOptions {
    let bridge = BridgeOptions {
        state_dir: Some(state_dir.to_owned()),
        ..BridgeOptions::default()
    }
    .with_test_env(|name| std::env::var(name).ok());
    DaemonOptions::new(state_dir).mcp_http(mcp_endpoint_factory(HttpOptions {
        bridge,
        ..HttpOptions::default()
    }))
}

/// The bridge's streamable-HTTP endpoint as the daemon's `/mcp` handler.
pub fn mcp_endpoint_factory(options: HttpOptions) -> McpEndpointFactory {
    McpEndpointFactory::new(move |streams| {
        let endpoint = HttpEndpoint::new(streams, options.clone());
        Arc::new(McpOverHttp(Arc::new(endpoint)))
    })
}

#[derive(Debug)]
struct McpOverHttp(Arc<HttpEndpoint>);

impl McpEndpoint for McpOverHttp {
    fn handle(&self, request: McpRequest, peer_pid: Option<u32>) -> BoxFuture<McpResponse> {
        let endpoint = Arc::clone(&self.0);
        Box::pin(async move { endpoint.handle(request, peer_pid).await })
    }

    fn shutdown(&self) {
        self.0.shutdown();
    }
}

/// A start failure as `daemon run` reports it: the daemon's classification (already running
/// → 70 with `details.pid`, configuration and key → 65, anything else → 1).
pub fn start_error(e: &StartError) -> CliError {
    let err = CliError::new(e.error_type(), e.to_string());
    match e.running_pid() {
        Some(pid) => err.with_detail("pid", pid),
        None => err,
    }
}

/// A daemon spawned by a client runs with stdin from `/dev/null` in its own process group;
/// a new session also drops the controlling terminal it still nominally shares. Fails with
/// `EPERM` for a group or session leader, which is fine: such a process is already detached
/// from the caller's terminal signals.
fn detach_if_spawned() {
    if !std::io::stdin().is_terminal() {
        #[cfg(unix)]
        let _ = rustix::process::setsid();
    }
}

/// Runs `daemon run` on `runtime`; returns the exit status.
pub fn run(runtime: &tokio::runtime::Runtime, state_dir: &Path, out: &Output) -> u8 {
    detach_if_spawned();
    runtime.block_on(host(state_dir, out))
}

async fn host(state_dir: &Path, out: &Output) -> u8 {
    // Listening before the start means a signal during startup is handled once it is done.
    let mut signals = match Interrupts::new(true) {
        Ok(s) => s,
        Err(e) => {
            return out.print_failure(&CliError::internal(format!(
                "cannot install signal handlers: {e}"
            )));
        }
    };
    let handle = match Daemon::start(daemon_options(state_dir)).await {
        Ok(handle) => handle,
        Err(e) => return out.print_failure(&start_error(&e)),
    };
    out.print_success(&daemon_running(
        handle.pid(),
        handle.version(),
        &handle.state_dir().path().display().to_string(),
        &handle.socket_path().display().to_string(),
    ));
    loop {
        tokio::select! {
            () = handle.wait() => return 0,
            signal = signals.recv() => {
                if signal == Interrupt::Hup {
                    match handle.reload().await {
                        Ok(r) => tracing::info!(
                            applied = ?r.applied,
                            restart_required = ?r.restart_required,
                            "SIGHUP: configuration reloaded"
                        ),
                        Err(e) => tracing::warn!("SIGHUP: reload failed: {}", e.message),
                    }
                    continue;
                }
                tracing::info!(?signal, "stopping the daemon");
                handle.request_shutdown();
                break;
            }
        }
    }
    loop {
        tokio::select! {
            () = handle.wait() => return 0,
            signal = signals.recv() => {
                if signal != Interrupt::Hup {
                    tracing::warn!("second interrupt during shutdown; exiting at once");
                    return INTERRUPTED;
                }
            }
        }
    }
}

/// `daemon run` once the control socket accepts connections (§L9.1).
pub fn daemon_running(pid: u32, version: &str, state_dir: &str, socket_path: &str) -> Success {
    Success::new(
        json!({"daemon": {"pid": pid, "version": version, "stateDir": state_dir, "socketPath": socket_path}}),
        format!("Daemon running (pid {pid}, state dir {state_dir}). Press Ctrl-C to stop.\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use appduct_client::pidfile::PidfileError;
    use std::path::PathBuf;

    #[test]
    fn start_errors_keep_the_daemon_classification() {
        let running = start_error(&StartError::from(PidfileError::DaemonAlreadyRunning {
            pid: Some(4242),
        }));
        assert_eq!(running.exit_code(), 70);
        assert_eq!(running.details.clone().unwrap()["pid"], 4242);
        assert!(running.message.contains("already running"));

        let unknown_pid = start_error(&StartError::AlreadyRunning { pid: None });
        assert_eq!(unknown_pid.exit_code(), 70);
        assert_eq!(unknown_pid.details, None);

        let config = start_error(&StartError::Config(
            appduct_client::config::ConfigError::NotObject {
                path: PathBuf::from("/s/config.json"),
            },
        ));
        assert_eq!(config.exit_code(), 65);
        assert!(
            config.message.contains("/s/config.json"),
            "{}",
            config.message
        );
    }
}
