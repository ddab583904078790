//! The control socket on Windows (docs/state.md §S4.1): a named pipe, through `interprocess`'s
//! local sockets, whose name is derived from the socket path
//! (`appduct_client::platform::pipe_name`).
//!
//! - Its security descriptor has a protected DACL with one entry: full access for the current
//!   user's SID (read from the process token). No other account, not even `SYSTEM` or
//!   `Administrators`, may open it.
//! - The first instance is created with `FILE_FLAG_FIRST_PIPE_INSTANCE` (interprocess does so
//!   for a listener's first instance), so the daemon fails to start instead of serving behind a
//!   pipe somebody else created first; remote clients are refused (`PIPE_REJECT_REMOTE_CLIENTS`,
//!   interprocess's default).
//! - Each client's process (`GetNamedPipeClientProcessId`) must run as the daemon's account,
//!   like the peer-uid check on Unix; the client checks the server the same way
//!   (`appduct_client::platform::connect_control`).

use std::io;
use std::path::Path;

use interprocess::local_socket::tokio::{Listener, Stream};
use interprocess::local_socket::traits::StreamCommon as _;
use interprocess::local_socket::traits::tokio::Listener as _;
use interprocess::local_socket::{GenericFilePath, ListenerOptions, ToFsName as _};
use interprocess::os::windows::local_socket::ListenerOptionsExt as _;
use interprocess::os::windows::security_descriptor::SecurityDescriptor;

use super::{AcceptControl, Peer};

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

/// Creates the first instance of the control pipe for the socket path `path`; fails when a
/// pipe of that name exists already.
pub fn bind_control(path: &Path) -> io::Result<ControlListener> {
    let name = appduct_client::platform::pipe_name(path);
    let sid = appduct_client::platform::current_user_sid().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot read the current user's SID for the control pipe's DACL: {e}"),
        )
    })?;
    let sddl = widestring::U16CString::from_str(owner_only_sddl(&sid)).map_err(io::Error::other)?;
    let descriptor = SecurityDescriptor::deserialize(&sddl)?;
    let listener = ListenerOptions::new()
        .name(Path::new(&name).to_fs_name::<GenericFilePath>()?)
        .security_descriptor(descriptor)
        .create_tokio()?;
    Ok(ControlListener { listener })
}

impl AcceptControl for ControlListener {
    type Accepted = Stream;
    type Stream = Stream;
    const WHAT: &'static str = "pipe";

    async fn accept_next(&self) -> io::Result<Stream> {
        self.listener.accept().await
    }

    /// The client process's account, compared with ours by SID; `None` (refused) when it
    /// differs or cannot be read.
    fn peer(stream: &Stream) -> Peer {
        let pid = stream.peer_creds().ok().and_then(|c| c.pid());
        let same = pid.map(appduct_client::platform::same_user);
        if let Some(Err(e)) = &same {
            tracing::warn!(peer_pid = ?pid, "cannot read a control client's account: {e}");
        }
        Peer {
            euid: matches!(same, Some(Ok(true))).then(appduct_client::platform::euid),
            pid,
        }
    }

    fn into_stream(stream: Stream) -> io::Result<Stream> {
        Ok(stream)
    }
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
        let sid = appduct_client::platform::current_user_sid().unwrap();
        assert!(sid.starts_with("S-1-5-"), "{sid}");
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

    /// Both identity checks on a real pipe: the client's check of the server passes (same
    /// account) and the daemon reads the client's pid and admits it as the same account.
    /// Windows-only; run under wine by `scripts/windows`. (Wine 8 does not enforce
    /// `FILE_FLAG_FIRST_PIPE_INSTANCE`: a second listener on the name is created there, so the
    /// first-instance refusal is not asserted.)
    #[tokio::test]
    async fn both_ends_identify_each_other_on_a_real_pipe() {
        let socket = std::env::temp_dir()
            .join(format!("appduct-pipe-test-{}", std::process::id()))
            .join("daemon.sock");
        let listener = bind_control(&socket).unwrap();
        let (client, server) = tokio::join!(
            appduct_client::platform::connect_control(&socket),
            listener.accept_next()
        );
        let _client = client.unwrap();
        let peer = ControlListener::peer(&server.unwrap());
        assert_eq!(peer.pid, Some(std::process::id()));
        assert_eq!(peer.euid, Some(appduct_client::platform::euid()));
    }

    /// Our own process runs as the current user, a user SID; a pid that names no process is
    /// an error (callers refuse), never a match.
    #[test]
    fn process_accounts_are_read_from_their_tokens() {
        use appduct_client::platform::{current_user_sid, process_user_sid, same_user};
        let me = current_user_sid().unwrap();
        assert!(me.starts_with("S-1-5-"), "{me}");
        assert_eq!(process_user_sid(std::process::id()).unwrap(), me);
        assert!(same_user(std::process::id()).unwrap());
        // Pids are multiples of 4 on Windows; 0xFFFF_FFFB is never one.
        assert!(process_user_sid(0xFFFF_FFFB).is_err());
        assert!(same_user(0xFFFF_FFFB).is_err());
    }

    /// The client's check of the pipe's server (§S4.1): a server that runs as us passes; one
    /// whose process is unknown or unreadable is refused with `PermissionDenied`.
    #[test]
    fn the_client_refuses_a_server_it_cannot_identify() {
        use appduct_client::platform::check_pipe_server;
        let name = r"\\.\pipe\appduct-test";
        check_pipe_server(name, Some(std::process::id())).unwrap();
        for pid in [None, Some(0xFFFF_FFFB)] {
            let e = check_pipe_server(name, pid).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
            assert!(e.to_string().contains(name), "{e}");
        }
    }
}
