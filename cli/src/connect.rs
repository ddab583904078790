//! Reaching the daemon (§L2.4, §S3.4, §C7): the typed control client with the contact mode
//! of each command, the version policy of this run, and the mapping of client failures onto
//! CLI errors.

use std::path::Path;

use appduct_client::client::{
    ClientError, ClientOptions, ControlClient, ToolCallError, VersionCheck, VersionPolicy, classify,
};
use appduct_client::config::Config;
use appduct_client::state_dir::StateDir;
use serde_json::Value;

use crate::error::CliError;
use crate::globals::{Globals, RestartChoice};
use crate::output::Output;

/// `daemon.hello` `client.name` of the command line.
pub const CLIENT_NAME: &str = "appduct-cli";

/// How a command contacts the daemon (the table of §L2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contact {
    /// Auto-spawn and the full version check (`sessions *`, `tools *`, `events *`,
    /// `daemon start`, `playground`).
    Full,
    /// Auto-spawn; drift only becomes a warning (`daemon status`).
    WarnOnly,
    /// No spawn, no version check (`daemon stop`).
    Existing,
}

/// Whether an older, busy daemon may be replaced in this run (§C7): the flags and
/// `APPDUCT_DAEMON_RESTART` first, else `restartDaemonOnVersionMismatch` from the state dir's
/// `config.json` (an unreadable or invalid file counts as false).
pub fn force_restart(globals: &Globals, state_dir: &Path) -> bool {
    match globals.restart_choice() {
        RestartChoice::Force => true,
        RestartChoice::Forbid => false,
        RestartChoice::FromConfig => Config::load(state_dir)
            .map(|loaded| loaded.config.restart_daemon_on_version_mismatch)
            .unwrap_or(false),
    }
}

/// The client options of `contact` for `dir`.
pub fn options(globals: &Globals, dir: &StateDir, contact: Contact) -> ClientOptions {
    let mut opts = ClientOptions::new(dir.path(), CLIENT_NAME);
    let check = match contact {
        Contact::Full => VersionCheck::Enforce,
        Contact::WarnOnly => VersionCheck::WarnOnly,
        Contact::Existing => VersionCheck::Skip,
    };
    opts.auto_spawn = contact != Contact::Existing;
    opts.version_policy = VersionPolicy {
        check,
        // Only consulted on drift; reading config.json for a warn-only check is pointless.
        force_restart: check == VersionCheck::Enforce && force_restart(globals, dir.path()),
        required_features: Vec::new(),
    };
    opts
}

/// Connects as `contact` says. A version notice (the daemon is newer) goes to stderr in human
/// mode only; `daemon status` reads it from the client instead and passes `print_notice` false.
pub async fn connect(
    globals: &Globals,
    out: &Output,
    contact: Contact,
    print_notice: bool,
) -> Result<(StateDir, ControlClient), CliError> {
    let dir = globals.state_dir()?;
    let client = ControlClient::connect(options(globals, &dir, contact))
        .await
        .map_err(|e| client_error(&e, &dir))?;
    if print_notice && let Some(notice) = client.version_notice() {
        out.notice(&notice.message);
    }
    Ok((dir, client))
}

/// A client failure as the CLI reports it: the type and exit code of [`classify`], the
/// client's message, its details; a failed spawn also names `daemon.log` and the socket.
pub fn client_error(e: &ClientError, dir: &StateDir) -> CliError {
    let (error_type, _) = classify(e);
    let mut err = CliError::new(error_type, e.to_string());
    err.details = e.details();
    if let ClientError::SpawnFailed { .. } = e {
        // The message names the socket and the log (§L2.4); the tail stays last.
        let (first, rest) = err.message.split_once('\n').unwrap_or((&err.message, ""));
        let mut message = format!(
            "{first} (socket {}; log {})",
            dir.socket_path().display(),
            dir.daemon_log_path().display()
        );
        if !rest.is_empty() {
            message.push('\n');
            message.push_str(rest);
        }
        err.message = message;
        err = err
            .with_detail(
                "socketPath",
                Value::String(dir.socket_path().display().to_string()),
            )
            .with_detail(
                "daemonLog",
                Value::String(dir.daemon_log_path().display().to_string()),
            );
    }
    err
}

/// A `tools.call` failure: as [`client_error`], with `callId` in the details of a
/// connection-class error (the watchdog of §C10.3).
pub fn tool_call_error(e: &ToolCallError, dir: &StateDir) -> CliError {
    let mut err = client_error(&e.error, dir);
    if let Some(details) = e.details() {
        err.details = Some(details);
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::globals::RestartFlag;
    use crate::output::OutputFlags;
    use std::io;
    use std::time::Duration;

    fn globals(restart: RestartFlag) -> Globals {
        Globals {
            output: OutputFlags::default(),
            state_dir_flag: None,
            restart,
        }
    }

    #[test]
    fn contact_modes_set_spawn_and_check() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path()).unwrap();
        let g = globals(RestartFlag::Force);
        let full = options(&g, &dir, Contact::Full);
        assert!(full.auto_spawn);
        assert_eq!(full.version_policy.check, VersionCheck::Enforce);
        assert!(full.version_policy.force_restart);
        assert_eq!(full.client_name, CLIENT_NAME);
        let warn = options(&g, &dir, Contact::WarnOnly);
        assert!(warn.auto_spawn);
        assert_eq!(warn.version_policy.check, VersionCheck::WarnOnly);
        assert!(!warn.version_policy.force_restart);
        let stop = options(&g, &dir, Contact::Existing);
        assert!(!stop.auto_spawn);
        assert_eq!(stop.version_policy.check, VersionCheck::Skip);
    }

    #[test]
    fn the_config_key_forces_a_restart_unless_forbidden() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("config.json"),
            r#"{"restartDaemonOnVersionMismatch": true}"#,
        )
        .unwrap();
        // `Unset` reads APPDUCT_DAEMON_RESTART, which the test environment does not set.
        if std::env::var_os(crate::globals::DAEMON_RESTART_ENV).is_none() {
            assert!(force_restart(&globals(RestartFlag::Unset), tmp.path()));
        }
        assert!(!force_restart(&globals(RestartFlag::Forbid), tmp.path()));
        std::fs::write(tmp.path().join("config.json"), "not json").unwrap();
        assert!(!force_restart(&globals(RestartFlag::Forbid), tmp.path()));
        assert!(force_restart(&globals(RestartFlag::Force), tmp.path()));
    }

    #[test]
    fn client_errors_keep_their_class_and_name_the_daemon_log_on_spawn_failure() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path()).unwrap();
        let unreachable = ClientError::Unreachable {
            socket: dir.socket_path(),
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        let e = client_error(&unreachable, &dir);
        assert_eq!(e.exit_code(), 70);
        assert!(e.message.contains("daemon.sock"), "{}", e.message);

        let spawn = ClientError::SpawnFailed {
            reason: "exited".into(),
            log_tail: "boom\n".into(),
        };
        let e = client_error(&spawn, &dir);
        assert_eq!(e.error_type, "connection_error");
        let details = e.details.clone().unwrap();
        assert!(
            details["daemonLog"]
                .as_str()
                .unwrap()
                .ends_with("daemon.log")
        );
        assert!(e.message.contains("boom"));

        let rpc = ClientError::Rpc {
            code: -32000,
            error_type: appduct_protocol::errors::ErrorType::NoSession,
            message: "No live session".into(),
            details: None,
            call_id: None,
        };
        let e = client_error(&rpc, &dir);
        assert_eq!((e.error_type.as_str(), e.exit_code()), ("no_session", 71));

        let timeout = ToolCallError {
            error: ClientError::Timeout {
                method: "tools.call",
                after: Duration::from_secs(1),
            },
            call_id: Some("cli-1".into()),
        };
        let e = tool_call_error(&timeout, &dir);
        assert_eq!(e.exit_code(), 70);
        assert_eq!(e.details.clone().unwrap()["callId"], "cli-1");
    }
}
