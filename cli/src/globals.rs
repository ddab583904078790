//! The global flags of a run (§L2.1) once parsed: output flags, `--state-dir`, the restart
//! choice. Every command and the control-client helpers read them; the clap side is
//! [`crate::commands::GlobalArgs`].

use std::path::PathBuf;

use appduct_client::envflag;
use appduct_client::state_dir::{StateDir, StateDirError};

use crate::error::CliError;
use crate::output::OutputFlags;

/// The boolean variable that acts as `--daemon-restart` (§L2.2).
pub const DAEMON_RESTART_ENV: &str = "APPDUCT_DAEMON_RESTART";

/// The global flags (§L2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Globals {
    pub output: OutputFlags,
    /// `--state-dir`, made absolute against the current directory.
    pub state_dir_flag: Option<PathBuf>,
    pub restart: RestartFlag,
}

/// `--daemon-restart` / `--no-daemon-restart`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartFlag {
    Unset,
    Force,
    Forbid,
}

/// Whether an older, busy daemon may be replaced on version drift (§C7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartChoice {
    /// `--daemon-restart` or `APPDUCT_DAEMON_RESTART` true.
    Force,
    /// `--no-daemon-restart`: overrides the variable and the config key.
    Forbid,
    /// Neither: the daemon config's `restartDaemonOnVersionMismatch` decides.
    FromConfig,
}

impl Globals {
    /// The state directory: `--state-dir` > `APPDUCT_STATE_DIR` > `~/.appduct`, absolute
    /// (§S1.1). Failing to find one is a `connection_error` naming `APPDUCT_STATE_DIR`.
    pub fn state_dir(&self) -> Result<StateDir, CliError> {
        StateDir::resolve(self.state_dir_flag.as_deref()).map_err(state_dir_error)
    }

    /// The restart choice of this run. Reads `APPDUCT_DAEMON_RESTART` only when no flag was
    /// given; an unrecognised value logs a warning (human mode only) and counts as false.
    pub fn restart_choice(&self) -> RestartChoice {
        match self.restart {
            RestartFlag::Force => RestartChoice::Force,
            RestartFlag::Forbid => RestartChoice::Forbid,
            RestartFlag::Unset if envflag::env_bool(DAEMON_RESTART_ENV) => RestartChoice::Force,
            RestartFlag::Unset => RestartChoice::FromConfig,
        }
    }
}

/// Every state-directory problem is a `connection_error` for clients (§S1.1).
pub fn state_dir_error(e: StateDirError) -> CliError {
    CliError::connection(e.to_string())
}
