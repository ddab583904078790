//! The control socket on Windows (docs/state.md §S4.1): a named pipe, through `interprocess`'s
//! local sockets, whose name is derived from the socket path
//! (`appduct_client::platform::pipe_name`).
//!
//! - Its security descriptor has a protected DACL with one entry: full access for the current
//!   user's SID (read from `whoami /user`; when that fails, for the pipe's owner, `OW`). No
//!   other account, not even `SYSTEM` or `Administrators`, may open it.
//! - The first instance is created with `FILE_FLAG_FIRST_PIPE_INSTANCE` (interprocess does so
//!   for a listener's first instance), so the daemon fails to start instead of serving behind a
//!   pipe somebody else created first; remote clients are refused (`PIPE_REJECT_REMOTE_CLIENTS`,
//!   interprocess's default).

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use interprocess::local_socket::tokio::Listener;
use interprocess::local_socket::traits::StreamCommon as _;
use interprocess::local_socket::traits::tokio::Listener as _;
use interprocess::local_socket::{GenericFilePath, ListenerOptions, ToFsName as _};
use interprocess::os::windows::local_socket::ListenerOptionsExt as _;
use interprocess::os::windows::security_descriptor::SecurityDescriptor;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{ControlHandler, PeerCheck, PeerInfo, ServerOptions, Via, run_connection};

/// The control pipe's listener.
#[derive(Debug)]
pub struct ControlListener {
    listener: Listener,
}

/// The SDDL of the pipe: a protected DACL (`P`: nothing inherited) granting `GA` (generic all)
/// to `sid` alone.
pub fn owner_only_sddl(sid: &str) -> String {
    format!("D:P(A;;GA;;;{sid})")
}

/// The current user's SID (`S-1-5-21-…`), from `whoami /user /fo csv /nh`, whose one line is
/// `"<domain>\<user>","<sid>"`. Reading the process token needs Win32 calls this `unsafe`-free
/// workspace cannot make.
fn current_user_sid() -> Option<String> {
    let out = std::process::Command::new("whoami")
        .args(["/user", "/fo", "csv", "/nh"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let sid = text.trim().rsplit(',').next()?.trim_matches('"').to_owned();
    (sid.starts_with("S-1-") && sid[4..].chars().all(|c| c.is_ascii_digit() || c == '-'))
        .then_some(sid)
}

/// Creates the first instance of the control pipe for the socket path `path`; fails when a
/// pipe of that name exists already.
pub fn bind_control(path: &Path) -> io::Result<ControlListener> {
    let name = appduct_client::platform::pipe_name(path);
    let sid = current_user_sid().unwrap_or_else(|| {
        tracing::warn!(
            "cannot read the current user's SID (whoami); the control pipe admits its owner (OW)"
        );
        "OW".to_owned()
    });
    let sddl = widestring::U16CString::from_str(owner_only_sddl(&sid)).map_err(io::Error::other)?;
    let descriptor = SecurityDescriptor::deserialize(&sddl)?;
    let listener = ListenerOptions::new()
        .name(Path::new(&name).to_fs_name::<GenericFilePath>()?)
        .security_descriptor(descriptor)
        .create_tokio()?;
    Ok(ControlListener { listener })
}

/// Accepts control connections until `shutdown` turns true, like `serve_unix` on Unix.
///
/// The peer check sees the daemon's own stand-in uid: a pipe client's account cannot be read
/// in safe Rust; the pipe's DACL admits the current user only (§S4.1).
pub async fn serve_control(
    listener: ControlListener,
    handler: Arc<dyn ControlHandler>,
    opts: ServerOptions,
    peer_check: Arc<dyn PeerCheck>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            r = listener.listener.accept() => r,
            r = shutdown.wait_for(|s| *s) => {
                if r.is_err() {
                    tracing::warn!("control shutdown signal dropped; stopping the accept loop");
                }
                break;
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let stream = match accepted {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!("control pipe accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let pid = stream.peer_creds().ok().and_then(|c| c.pid());
        if !peer_check.allow(Some(appduct_client::platform::euid())) {
            drop(stream);
            continue;
        }
        connections.spawn(run_connection(
            stream,
            handler.clone(),
            opts,
            PeerInfo {
                pid,
                via: Via::Local,
            },
            Some(shutdown.clone()),
        ));
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use interprocess::os::windows::security_descriptor::AsSecurityDescriptorExt as _;

    /// `DACL_SECURITY_INFORMATION`: serialize the DACL only.
    const DACL_SECURITY_INFORMATION: u32 = 0x4;

    /// The descriptor the daemon gives the pipe, read back through Windows' own parser and
    /// printer, grants exactly one account: the current user (Windows-only; run under wine by
    /// `scripts/windows` when wine supports the calls).
    #[test]
    fn the_pipe_dacl_names_only_the_current_user() {
        let sid = current_user_sid().unwrap_or_else(|| "OW".to_owned());
        let sddl = widestring::U16CString::from_str(owner_only_sddl(&sid)).unwrap();
        let descriptor = SecurityDescriptor::deserialize(&sddl).unwrap();
        let dacl = descriptor
            .serialize(DACL_SECURITY_INFORMATION, |s| s.to_string_lossy())
            .unwrap();
        assert!(
            dacl.starts_with("D:P("),
            "protected, no inherited entries: {dacl}"
        );
        assert!(dacl.ends_with(&format!(";;;{sid})")), "{dacl}");
        assert_eq!(dacl.matches("(A;").count(), 1, "{dacl}");
        assert!(
            !dacl.contains("WD") && !dacl.contains("AN") && !dacl.contains("SY"),
            "{dacl}"
        );
    }
}
