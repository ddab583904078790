//! `appduct daemon start | stop | status` (05 §9.2–§9.4, 01 §6.1, §6.3).

use std::io;
use std::path::Path;
use std::time::Duration;

use appduct_daemon::client::ControlClient;
use appduct_daemon::pidfile::{owner_alive, read_pid};
use appduct_daemon::seams::{OsProcessProbe, ProcessProbe as _};
use appduct_daemon::state_dir::StateDir;
use appduct_protocol::control::{DaemonHello, DaemonShutdown, DaemonStatus, NoParams};
use time::OffsetDateTime;

use crate::command::Globals;
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::output::{Output, Success};
use crate::views::{self, StopMethod};

/// `daemon stop` polls this often for the socket and the pidfile to disappear (01 §6.1).
pub const STOP_POLL: Duration = Duration::from_millis(100);
/// … for at most this long.
pub const STOP_WAIT: Duration = Duration::from_secs(5);

/// The pid of the daemon holding the pidfile lock, when one does.
fn live_pid(dir: &StateDir) -> Option<u32> {
    if owner_alive(dir.path()) {
        read_pid(&dir.pid_path()).ok().flatten()
    } else {
        None
    }
}

/// `daemon start`: `daemon.status` with auto-spawn. `spawned` is true when the daemon that
/// answers is not the one that held the state dir before (none, or one this run replaced).
pub async fn start(globals: &Globals, out: &Output) -> Result<Success, CliError> {
    let dir = globals.state_dir()?;
    let before = live_pid(&dir);
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let status = client
        .call::<DaemonStatus>(NoParams {})
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    Ok(views::daemon_start(&status, before != Some(status.pid)))
}

/// `daemon status`: `daemon.status` with auto-spawn; drift becomes `warning`, never a restart.
pub async fn status(globals: &Globals, out: &Output) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::WarnOnly, false).await?;
    let status = client
        .call::<DaemonStatus>(NoParams {})
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    let warning = client.version_notice().map(|n| n.message.clone());
    Ok(views::daemon_status(
        &status,
        warning.as_deref(),
        OffsetDateTime::now_utc(),
    ))
}

fn not_running() -> CliError {
    CliError::connection("No appduct daemon is running").with_hint(
        "Nothing to stop. Any other appduct command starts the daemon when it is needed.",
    )
}

/// `daemon stop`: `daemon.shutdown` without spawning or version check, then wait until the
/// socket and the pidfile are gone. If the request cannot be delivered and the pidfile lock is
/// held, SIGTERM the pid in the file; never signal a pid that does not hold the lock (01 §6.3).
pub async fn stop(globals: &Globals) -> Result<Success, CliError> {
    let dir = globals.state_dir()?;
    let opts = connect::options(globals, &dir, Contact::Existing);
    let delivered = match ControlClient::connect(opts).await {
        Ok(client) => {
            let pid = match read_pid(&dir.pid_path()).ok().flatten() {
                Some(pid) => Some(pid),
                None => hello_pid(&client).await,
            };
            match client.call::<DaemonShutdown>(NoParams {}).await {
                Ok(_) => Some(pid),
                Err(e) => {
                    tracing::debug!("daemon.shutdown failed: {e}");
                    None
                }
            }
        }
        Err(e) => {
            tracing::debug!("cannot reach the daemon: {e}");
            None
        }
    };
    let (pid, method) = match delivered {
        Some(pid) => (pid, StopMethod::Rpc),
        None => {
            let Some(pid) = live_pid(&dir) else {
                return Err(not_running());
            };
            OsProcessProbe.terminate(pid).map_err(|e| {
                CliError::connection(format!(
                    "cannot send SIGTERM to the daemon (pid {pid}): {e}"
                ))
                .with_detail("pid", pid)
            })?;
            (Some(pid), StopMethod::Sigterm)
        }
    };
    if !wait_gone(&dir, STOP_WAIT).await {
        let mut err = CliError::connection("The appduct daemon did not exit within 5 s");
        if let Some(pid) = pid {
            err = err.with_detail("pid", pid);
        }
        return Err(err);
    }
    Ok(views::daemon_stop(pid.unwrap_or(0), method))
}

async fn hello_pid(client: &ControlClient) -> Option<u32> {
    let params = appduct_protocol::control::HelloParams::default();
    client.call::<DaemonHello>(params).await.ok().map(|h| h.pid)
}

fn exists(path: &Path) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(_) => true,
        Err(e) => e.kind() != io::ErrorKind::NotFound,
    }
}

/// Polls every [`STOP_POLL`] until both the socket and the pidfile are gone; false after
/// `limit`.
pub async fn wait_gone(dir: &StateDir, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if !exists(&dir.socket_path()) && !exists(&dir.pid_path()) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(STOP_POLL).await;
    }
}
