//! Windows (docs/state.md §S4): stand-ins for the Unix file traits, and the control socket as a
//! named pipe.
//!
//! The owner and mode checks of the state files have no Windows counterpart: the stand-ins
//! report the current user as owner, mode 0600 (0400 when read-only) for files and 0700 for
//! directories, one link, and no sockets or FIFOs. What stands for 0700 is the state
//! directory's DACL: [`owner_only_dir`] makes it protected, with one inheritable entry for the
//! current user, and files and subdirectories created there inherit it (§S4.2).

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Duration;

mod identity;
pub use identity::{current_user_sid, dacl_sddl, process_user_sid, same_user};

/// Stand-ins for `std::os::unix::fs`'s traits (same method names, so call sites only change
/// their `use` line).
pub mod fs {
    use std::fs::{DirBuilder, FileType, Metadata, OpenOptions, Permissions};

    /// Owner, mode, identity and link count of a file.
    pub trait MetadataExt {
        /// Always the current user's stand-in uid ([`super::euid`]).
        fn uid(&self) -> u32;
        /// 0700 for a directory, 0400 for a read-only file, 0600 otherwise.
        fn mode(&self) -> u32;
        /// 0: Windows has no device number through safe std APIs.
        fn dev(&self) -> u64;
        /// 0: the file index is unstable in std.
        fn ino(&self) -> u64;
        /// 1.
        fn nlink(&self) -> u64;
    }

    impl MetadataExt for Metadata {
        fn uid(&self) -> u32 {
            super::euid()
        }
        fn mode(&self) -> u32 {
            if self.is_dir() {
                0o700
            } else {
                self.permissions().mode()
            }
        }
        fn dev(&self) -> u64 {
            0
        }
        fn ino(&self) -> u64 {
            0
        }
        fn nlink(&self) -> u64 {
            1
        }
    }

    /// The mode bits of a permission set.
    pub trait PermissionsExt {
        /// 0400 when read-only, 0600 otherwise.
        fn mode(&self) -> u32;
    }

    impl PermissionsExt for Permissions {
        fn mode(&self) -> u32 {
            if self.readonly() { 0o400 } else { 0o600 }
        }
    }

    /// Special file types: none exist on Windows.
    pub trait FileTypeExt {
        fn is_socket(&self) -> bool;
        fn is_fifo(&self) -> bool;
        fn is_char_device(&self) -> bool;
    }

    impl FileTypeExt for FileType {
        fn is_socket(&self) -> bool {
            false
        }
        fn is_fifo(&self) -> bool {
            false
        }
        fn is_char_device(&self) -> bool {
            false
        }
    }

    /// The creation mode of a directory: ignored (the ACL is inherited).
    pub trait DirBuilderExt {
        fn mode(&mut self, mode: u32) -> &mut Self;
    }

    impl DirBuilderExt for DirBuilder {
        fn mode(&mut self, _mode: u32) -> &mut Self {
            self
        }
    }

    /// The creation mode and open flags of a file: ignored (the ACL is inherited; a symlink
    /// needs a privilege to create and is followed).
    pub trait OpenOptionsExt {
        fn mode(&mut self, mode: u32) -> &mut Self;
        fn custom_flags(&mut self, flags: i32) -> &mut Self;
    }

    impl OpenOptionsExt for OpenOptions {
        fn mode(&mut self, _mode: u32) -> &mut Self {
            self
        }
        fn custom_flags(&mut self, _flags: i32) -> &mut Self {
            self
        }
    }
}

/// The stand-in uid of the current user (every file reports it as owner).
pub fn euid() -> u32 {
    0
}

/// No `O_NOFOLLOW` on Windows.
pub fn o_nofollow() -> i32 {
    0
}

/// No `O_NONBLOCK` on Windows.
pub fn o_nonblock() -> i32 {
    0
}

/// Never: no open flag refuses symlinks here.
pub fn is_symlink_refusal(_e: &io::Error) -> bool {
    false
}

/// No mode bits: the ACL inherited from the state directory applies (§S4.2).
pub fn chmod(_path: &Path, _mode: u32) -> io::Result<()> {
    Ok(())
}

/// No mode bits: the ACL inherited from the state directory applies (§S4.2).
pub fn fchmod(_file: &File, _mode: u32) -> io::Result<()> {
    Ok(())
}

/// The owner-only DACL of a state directory (§S4.2) for the user `sid`: protected (nothing
/// inherited from the parent), one entry granting full access, inherited by files (`OI`) and
/// subdirectories (`CI`).
pub fn owner_only_dacl(sid: &str) -> String {
    format!("D:P(A;OICI;FA;;;{sid})")
}

/// Whether the SDDL `dacl` (as [`dacl_sddl`] reads it) is protected and has exactly one entry,
/// an allow entry for `sid` with full access inherited by files and subdirectories. The flags
/// Windows adds when it stores a DACL (`AI`, auto-inherited) are accepted.
pub fn is_owner_only(dacl: &str, sid: &str) -> bool {
    let Some(rest) = dacl.strip_prefix("D:") else {
        return false;
    };
    let (flags, entries) = rest.split_at(rest.find('(').unwrap_or(rest.len()));
    let Some(entries) = entries.strip_prefix('(').and_then(|e| e.strip_suffix(')')) else {
        return false;
    };
    flags.contains('P') && entries == format!("A;OICI;FA;;;{sid}")
}

/// Makes the state directory `dir` owner-only (§S4.2), the Windows form of its 0700: unless its
/// DACL is already [`is_owner_only`] for the current user, it is replaced by
/// [`owner_only_dacl`] (Windows passes the entry on to the existing files and subdirectories
/// that inherit). Returns the DACL it replaced, `None` when it was already owner-only. Fails
/// when the user's SID cannot be read or the DACL cannot be read or set (for example a
/// directory of another account that does not let this user change its permissions).
pub fn owner_only_dir(dir: &Path) -> io::Result<Option<String>> {
    let sid = current_user_sid()?;
    let before = dacl_sddl(dir)?;
    if is_owner_only(&before, &sid) {
        return Ok(None);
    }
    identity::set_dacl(dir, &owner_only_dacl(&sid))?;
    Ok(Some(before))
}

/// The control socket's client end (§S4.1): a named pipe, through `interprocess`.
pub type ControlStream = interprocess::local_socket::tokio::Stream;

/// The named pipe that stands for the control socket path `socket` (§S4.1):
/// `\\.\pipe\appduct-` followed by the path with `\` written as `/` (a pipe name may hold any
/// character but a backslash), lower-cased as Windows paths compare.
pub fn pipe_name(socket: &Path) -> String {
    let path = socket.to_string_lossy().replace('\\', "/").to_lowercase();
    format!(r"\\.\pipe\appduct-{path}")
}

/// Connects to the control pipe of the socket path `path`, waiting up to 2 s while every
/// instance is busy, and checks the server's identity (§S4.1): the process serving the pipe
/// must run as this process's account, or the connection is dropped with a `PermissionDenied`
/// error naming both (a pipe squatted by another account before the daemon started).
pub async fn connect_control(path: &Path) -> io::Result<ControlStream> {
    use interprocess::local_socket::traits::StreamCommon as _;
    use interprocess::local_socket::{ConnectOptions, GenericFilePath, ToFsName as _};
    let name = pipe_name(path);
    let stream = ConnectOptions::new()
        .name(Path::new(&name).to_fs_name::<GenericFilePath>()?)
        .wait_mode(interprocess::ConnectWaitMode::Timeout(Duration::from_secs(
            2,
        )))
        .connect_tokio()
        .await?;
    let server = stream.peer_creds()?.pid();
    check_pipe_server(&name, server)?;
    Ok(stream)
}

/// The client's half of §S4.1: `server_pid` (from `GetNamedPipeServerProcessId`) of the pipe
/// `name` must run as the current user; otherwise a `PermissionDenied` error naming the pipe.
/// (Tested under wine with the daemon's pipe tests, whose test executable builds for Windows.)
pub fn check_pipe_server(name: &str, server_pid: Option<u32>) -> io::Result<()> {
    let refuse = |why: String| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refusing the control pipe {name}: {why}"),
        ))
    };
    let Some(pid) = server_pid else {
        return refuse("the pipe does not report its server process".to_owned());
    };
    match (
        identity::process_user_sid(pid),
        identity::current_user_sid(),
    ) {
        (Ok(theirs), Ok(ours)) if theirs == ours => Ok(()),
        (Ok(theirs), Ok(ours)) => refuse(format!(
            "its server, process {pid}, runs as {theirs}, not as this user ({ours})"
        )),
        (Err(e), _) => refuse(format!(
            "cannot read the account of its server, process {pid}: {e}"
        )),
        (_, Err(e)) => refuse(format!("cannot read this process's account: {e}")),
    }
}

/// `DETACHED_PROCESS`: the child gets no console, so no window opens (`CREATE_NO_WINDOW` is
/// ignored together with it, so it is not passed).
const DETACHED_PROCESS: u32 = 0x0000_0008;
/// `CREATE_NEW_PROCESS_GROUP`: Ctrl-C and Ctrl-Break of the spawning console never reach it.
const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;

/// Detaches the daemon's `Command`: no console (hence no window) and a new process group, so
/// the console's Ctrl-C and Ctrl-Break stay with the CLI (§S4.3).
pub fn detach(cmd: &mut std::process::Command) {
    use std::os::windows::process::CommandExt as _;
    cmd.creation_flags(DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP);
}

/// An exit status carrying exit code `code`.
pub fn exit_status(code: i32) -> std::process::ExitStatus {
    use std::os::windows::process::ExitStatusExt as _;
    std::process::ExitStatus::from_raw(code.cast_unsigned())
}

/// Whether process `pid` exists, asked of `tasklist` (no safe std API opens another process;
/// the pidfile's lock, which Windows does have, answers first: §S3.3).
pub fn pid_alive(pid: u32) -> bool {
    std::process::Command::new("tasklist")
        .args(["/NH", "/FO", "CSV", "/FI", &format!("PID eq {pid}")])
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(&format!("\"{pid}\"")))
}

/// Ends process `pid` with `taskkill /F` (Windows has no SIGTERM; `appduct daemon stop` asks
/// over the control pipe first, §S4.3).
pub fn terminate(pid: u32) -> io::Result<()> {
    let status = std::process::Command::new("taskkill")
        .args(["/F", "/PID", &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "taskkill /PID {pid} failed ({status})"
        )))
    }
}

/// No `O_NOCTTY` on Windows.
pub fn o_noctty() -> i32 {
    0
}

/// `%LOCALAPPDATA%\appduct`, used when neither `--state-dir` nor `APPDUCT_STATE_DIR` is set
/// (§S4.2); `None` when `LOCALAPPDATA` is unset (then `%USERPROFILE%\.appduct`).
pub fn default_state_dir() -> Option<std::ffi::OsString> {
    let base = std::env::var_os("LOCALAPPDATA").filter(|v| !v.is_empty())?;
    Some(Path::new(&base).join("appduct").into_os_string())
}

/// Nothing: a directory cannot be opened as a file without Win32 flags std does not expose,
/// and NTFS journals the rename or link that precedes this call.
pub fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}
