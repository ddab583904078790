//! How the bridge reaches the daemon: an injected connector (§M1), so tests run the bridge
//! against an in-memory fake daemon, and production uses the shared typed client's
//! connect-or-spawn.

use std::fmt;

use appduct_client::BoxFuture;
use appduct_client::client::{ClientError, ClientOptions, ControlClient, VersionCheck};

/// Opens control connections.
pub trait DaemonConnector: Send + Sync + fmt::Debug + 'static {
    /// A new connection. `spawn: true` is connect-or-spawn with the version check of §C7
    /// (run once per process). `spawn: false` has no side effects at all: the daemon is not
    /// started, and no version check runs, so an older daemon is never replaced (used by
    /// `appduct_status`, §M8.9, §M14).
    fn connect(&self, spawn: bool) -> BoxFuture<'_, Result<ControlClient, ClientError>>;
}

/// Connect-or-spawn on `<state-dir>/daemon.sock` with the typed client (§C16).
#[derive(Debug, Clone)]
pub struct SocketConnector {
    pub options: ClientOptions,
}

impl SocketConnector {
    pub fn new(options: ClientOptions) -> Self {
        Self { options }
    }
}

impl DaemonConnector for SocketConnector {
    fn connect(&self, spawn: bool) -> BoxFuture<'_, Result<ControlClient, ClientError>> {
        let mut options = self.options.clone();
        if !spawn {
            options.auto_spawn = false;
            // The check could replace an older idle daemon, which means spawning one.
            options.version_policy.check = VersionCheck::Skip;
        }
        Box::pin(ControlClient::connect(options))
    }
}
