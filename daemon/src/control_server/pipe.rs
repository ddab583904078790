//! The control socket on Windows (docs/state.md §S4.1): a named pipe whose name is derived from
//! the socket path (`appduct_client::platform::pipe_name`).
//!
//! The first instance is created with `FILE_FLAG_FIRST_PIPE_INSTANCE`, so the daemon fails to
//! start instead of serving behind a pipe somebody else created first (squatting), and every
//! instance refuses remote clients (`PIPE_REJECT_REMOTE_CLIENTS`). A new instance is created
//! before a connected one is handed to its task, so a client never finds the name missing
//! between two connections.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::windows::named_pipe::{NamedPipeServer, ServerOptions};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{ControlHandler, PeerCheck, ServerOptions as ControlServerOptions, run_connection};

/// The control pipe's listener: its name and the instance waiting for the next client.
#[derive(Debug)]
pub struct ControlListener {
    name: String,
    next: NamedPipeServer,
}

fn instance(name: &str, first: bool) -> io::Result<NamedPipeServer> {
    ServerOptions::new()
        .first_pipe_instance(first)
        .reject_remote_clients(true)
        .create(name)
}

/// Creates the first instance of the control pipe for the socket path `path`; fails when a
/// pipe of that name exists already.
pub fn bind_control(path: &Path) -> io::Result<ControlListener> {
    let name = appduct_client::platform::pipe_name(path);
    let next = instance(&name, true)?;
    Ok(ControlListener { name, next })
}

/// Accepts control connections until `shutdown` turns true, like `serve_unix` on Unix.
///
/// The peer check sees the daemon's own stand-in uid: a pipe client's account cannot be read
/// in safe Rust, so who may connect is decided by the pipe's security descriptor (§S4.1).
pub async fn serve_control(
    mut listener: ControlListener,
    handler: Arc<dyn ControlHandler>,
    opts: ControlServerOptions,
    peer_check: Arc<dyn PeerCheck>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        let connected = tokio::select! {
            r = listener.next.connect() => r,
            r = shutdown.wait_for(|s| *s) => {
                if r.is_err() {
                    tracing::warn!("control shutdown signal dropped; stopping the accept loop");
                }
                break;
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let fresh = match instance(&listener.name, false) {
            Ok(fresh) => fresh,
            Err(e) => {
                tracing::warn!("cannot create a control pipe instance: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let stream = std::mem::replace(&mut listener.next, fresh);
        if let Err(e) = connected {
            tracing::warn!("control pipe connect failed: {e}");
            continue;
        }
        if !peer_check.allow(Some(appduct_client::platform::euid())) {
            drop(stream);
            continue;
        }
        connections.spawn(run_connection(
            stream,
            handler.clone(),
            opts,
            None,
            Some(shutdown.clone()),
        ));
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}
