//! `appduct daemon start | stop | status` (§L9.2–§L9.4, §S3.1, §S3.3).

use std::io;
use std::path::Path;
use std::time::Duration;

use appduct_client::client::ControlClient;
use appduct_client::pidfile::{owner_alive, read_pid};
use appduct_client::process::{OsProcessProbe, ProcessProbe as _};
use appduct_client::state_dir::StateDir;
use appduct_protocol::control::{
    DaemonHello, DaemonShutdown, DaemonStatus, NoParams, StatusResult,
};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Success};
use crate::render::{self, Row, Section, plural, to_value};

/// `daemon stop` polls this often for the socket and the pidfile to disappear (§S3.1).
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
    Ok(daemon_start(&status, before != Some(status.pid)))
}

/// `daemon status`: `daemon.status` with auto-spawn; drift becomes `warning`, never a restart.
pub async fn status(globals: &Globals, out: &Output) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::WarnOnly, false).await?;
    let status = client
        .call::<DaemonStatus>(NoParams {})
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    let warning = client.version_notice().map(|n| n.message.clone());
    Ok(daemon_status(
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
/// held, SIGTERM the pid in the file; never signal a pid that does not hold the lock (§S3.3).
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
    Ok(daemon_stop(pid.unwrap_or(0), method))
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

/// `daemon start` (§L9.2); `spawned` when this invocation started it.
pub fn daemon_start(s: &StatusResult, spawned: bool) -> Success {
    let data = json!({"daemon": {
        "pid": s.pid, "version": s.version, "wssPort": s.wss_port, "webPort": s.web_port,
        "startedAt": s.started_at, "spawned": spawned,
    }});
    let verb = if spawned {
        "Daemon started"
    } else {
        "Daemon already running"
    };
    Success::new(
        data,
        format!("{verb} (pid {}, wss port {}).\n", s.pid, s.wss_port),
    )
}

/// How `daemon stop` stopped the daemon (§L9.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMethod {
    Rpc,
    Sigterm,
}

/// `daemon stop` (§L9.3).
pub fn daemon_stop(pid: u32, method: StopMethod) -> Success {
    let method = match method {
        StopMethod::Rpc => "rpc",
        StopMethod::Sigterm => "sigterm",
    };
    Success::new(
        json!({"daemon": {"ok": true, "method": method, "pid": pid}}),
        format!("Daemon stopped (pid {pid}).\n"),
    )
}

/// How many times each name occurs, by name.
fn count_by<'a>(names: impl Iterator<Item = &'a str>) -> std::collections::BTreeMap<&'a str, u64> {
    let mut counts = std::collections::BTreeMap::new();
    for name in names {
        *counts.entry(name).or_insert(0) += 1;
    }
    counts
}

/// `daemon status` (§L9.4): `sessions` reduced to `sessionCount`; `warning` (version drift)
/// when present.
pub fn daemon_status(s: &StatusResult, warning: Option<&str>, now: OffsetDateTime) -> Success {
    let mut daemon = Map::new();
    daemon.insert("version".into(), json!(s.version));
    daemon.insert("controlProtocol".into(), json!(s.control_protocol));
    daemon.insert("pid".into(), json!(s.pid));
    daemon.insert("startedAt".into(), json!(s.started_at));
    daemon.insert("stateDir".into(), json!(s.state_dir));
    daemon.insert("wssPort".into(), json!(s.wss_port));
    daemon.insert("webPort".into(), json!(s.web_port));
    daemon.insert("advertisedAddress".into(), to_value(&s.advertised_address));
    daemon.insert("pinnedKeys".into(), json!(s.pinned_keys));
    if let Some(key) = &s.sealed_key {
        daemon.insert("sealedKey".into(), json!(key));
    }
    daemon.insert("sessionCount".into(), json!(s.sessions.len()));
    // Issue #23: how many live sessions each transport carries (and which randomness sealed
    // apps used), so a sealed app without a CSPRNG shows up here.
    let by_transport = count_by(s.sessions.iter().map(|x| x.transport.as_str()));
    daemon.insert("sessionsByTransport".into(), json!(by_transport));
    let by_rng = count_by(s.sessions.iter().filter_map(|x| x.rng.map(|r| r.as_str())));
    if !by_rng.is_empty() {
        daemon.insert("sealedRng".into(), json!(by_rng));
    }
    daemon.insert("pendingLinks".into(), json!(s.pending_links));
    daemon.insert("pendingCalls".into(), json!(s.pending_calls));
    let mut data = Map::new();
    data.insert("daemon".into(), Value::Object(daemon));
    data.insert("policy".into(), to_value(&s.policy));
    data.insert("audit".into(), to_value(&s.audit));
    data.insert("eventsLog".into(), to_value(&s.events_log));
    if !s.grants.is_empty() {
        data.insert("grants".into(), to_value(&s.grants));
    }
    // Issue #19: the leases held (control.md §C10.9), one per leased session.
    let leases: Vec<Value> = s
        .sessions
        .iter()
        .filter_map(|x| {
            x.lease.as_ref().map(|l| {
                json!({"sessionId": x.session_id, "alias": x.alias, "holder": l.holder,
                       "expiresAt": l.expires_at})
            })
        })
        .collect();
    if !leases.is_empty() {
        data.insert("leases".into(), Value::Array(leases));
    }
    if let Some(w) = warning {
        data.insert("warning".into(), json!(w));
    }

    let started = match render::parse_instant(&s.started_at) {
        Some(at) => format!("{} ({})", render::iso_seconds(at), render::ago(at, now)),
        None => s.started_at.clone(),
    };
    let mut daemon_rows = vec![
        Row::field("Version", s.version.as_str()),
        Row::field("PID", s.pid.to_string()),
        Row::field("Started", started),
        Row::field("State dir", s.state_dir.as_str()),
        Row::field("WSS port", s.wss_port.to_string()),
        Row::field("Web port", s.web_port.to_string()),
        Row::field(
            "Address",
            format!(
                "{} ({})",
                s.advertised_address.address, s.advertised_address.source
            ),
        ),
    ];
    for pin in &s.pinned_keys {
        daemon_rows.push(Row::field("Pin", pin.as_str()));
    }
    if let Some(key) = &s.sealed_key {
        daemon_rows.push(Row::field("Sealed key", key.as_str()));
    }
    let sessions = if s.sessions.is_empty() {
        "0".to_owned()
    } else {
        let parts: Vec<String> = by_transport
            .iter()
            .map(|(transport, n)| format!("{transport} {n}"))
            .chain(by_rng.iter().map(|(rng, n)| format!("rng {rng} {n}")))
            .collect();
        format!("{} ({})", s.sessions.len(), parts.join(", "))
    };
    daemon_rows.extend([
        Row::field("Sessions", sessions),
        Row::field("Pending links", s.pending_links.to_string()),
        Row::field("Pending calls", s.pending_calls.to_string()),
    ]);
    for x in &s.sessions {
        if let Some(l) = &x.lease {
            let who = match (l.holder.client.as_deref(), l.holder.pid) {
                (Some(c), Some(pid)) => format!("{} (pid {pid})", render::clean_line(c)),
                (Some(c), None) => render::clean_line(c),
                (None, Some(pid)) => format!("pid {pid}"),
                (None, None) => "a client".to_owned(),
            };
            let until = i64::try_from(l.expires_at)
                .ok()
                .and_then(appduct_client::timestamp::iso_seconds_from_unix_s)
                .unwrap_or_else(|| l.expires_at.to_string());
            daemon_rows.push(Row::field(
                "Lease",
                format!(
                    "{} held by {who} until {until}",
                    render::clean_line(&x.alias)
                ),
            ));
        }
    }
    let mut policy_rows = vec![
        Row::field("Default", s.policy.default.as_str()),
        Row::field("Destructive", s.policy.destructive.as_str()),
    ];
    for (key, decision) in &s.policy.tools {
        policy_rows.push(Row::field("Override", format!("{key} = {decision}")));
    }
    // Operator grants (§C8.20): this tool on this session runs without asking until then.
    for g in &s.grants {
        policy_rows.push(Row::field(
            "Grant",
            format!(
                "{} {} on {} until {}",
                g.grant_id,
                render::clean_line(&g.tool),
                render::clean_line(&g.alias),
                i64::try_from(g.expires_at)
                    .ok()
                    .and_then(appduct_client::timestamp::iso_seconds_from_unix_s)
                    .unwrap_or_else(|| g.expires_at.to_string())
            ),
        ));
    }
    let mut audit_rows = vec![
        Row::field("Path", s.audit.path.as_str()),
        Row::field(
            "Retention",
            plural(u64::from(s.audit.retention_days), "day", "days"),
        ),
    ];
    match (s.audit.files, s.audit.bytes) {
        (Some(files), Some(bytes)) => {
            audit_rows.push(Row::field(
                "Files",
                format!("{files} ({})", render::byte_size(bytes)),
            ));
        }
        (Some(files), None) => audit_rows.push(Row::field("Files", files.to_string())),
        (None, _) => {}
    }
    audit_rows.extend([
        Row::field("Failed writes", s.audit.failed_writes.to_string()),
        Row::field("Failed prunes", s.audit.failed_prunes.to_string()),
    ]);
    let events_rows = vec![
        Row::field("Path", s.events_log.path.as_str()),
        Row::field("Failed writes", s.events_log.failed_writes.to_string()),
    ];
    let mut human = render::sections(&[
        Section::new("Daemon", daemon_rows),
        Section::new("Policy", policy_rows),
        Section::new("Audit", audit_rows),
        Section::new("Events log", events_rows),
    ]);
    if let Some(w) = warning {
        human.push_str(&format!("Warning: {w}\n"));
    }
    Success::new(Value::Object(data), human)
}
