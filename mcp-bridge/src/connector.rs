//! How the bridge reaches the daemon: an injected connector (06 §6.1), so tests run the bridge
//! against an in-memory fake daemon, and production uses the shared typed client's
//! connect-or-spawn.

use std::fmt;

use appduct_daemon::client::{ClientError, ClientOptions, ControlClient};
use appduct_daemon::seams::BoxFuture;

/// Opens control connections.
pub trait DaemonConnector: Send + Sync + fmt::Debug + 'static {
    /// A new connection. `spawn` allows starting the daemon when it is not running
    /// (`appduct_status` passes `false`: a status check has no side effects, 06 §6.8.9).
    fn connect(&self, spawn: bool) -> BoxFuture<'_, Result<ControlClient, ClientError>>;
}

/// Connect-or-spawn on `<state-dir>/daemon.sock` with the typed client (03 §13).
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
        options.auto_spawn = options.auto_spawn && spawn;
        Box::pin(ControlClient::connect(options))
    }
}
