//! Unix: the standard library's traits and `rustix`.

use std::fs::{File, Permissions};
use std::io;
use std::path::Path;

/// The file-system traits the state-file checks use.
pub mod fs {
    pub use std::os::unix::fs::{
        DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt,
    };
}

/// The effective uid: the owner every state file must have.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// `O_NOFOLLOW`, for `OpenOptionsExt::custom_flags`.
pub fn o_nofollow() -> i32 {
    i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0)
}

/// `O_NONBLOCK`, for `OpenOptionsExt::custom_flags`.
pub fn o_nonblock() -> i32 {
    i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0)
}

/// Whether an open failed because `O_NOFOLLOW` met a symlink (`ELOOP`).
pub fn is_symlink_refusal(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

/// `chmod(path, mode)`.
pub fn chmod(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, Permissions::from_mode(mode))
}

/// `fchmod(file, mode)`.
pub fn fchmod(file: &File, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    file.set_permissions(Permissions::from_mode(mode))
}

/// The control socket's client end (§C1.1): a Unix domain socket at `daemon.sock`.
pub type ControlStream = tokio::net::UnixStream;

/// Connects to the control socket at `path`.
pub async fn connect_control(path: &Path) -> io::Result<ControlStream> {
    tokio::net::UnixStream::connect(path).await
}

/// Detaches the daemon's `Command` from the terminal: a new process group, so terminal
/// signals (`SIGINT`, `SIGQUIT`, `SIGTSTP`, `SIGHUP`) never reach it.
pub fn detach(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    cmd.process_group(0);
}

/// An exit status carrying exit code `code` (wait-status encoding: bits 8..16).
pub fn exit_status(code: i32) -> std::process::ExitStatus {
    use std::os::unix::process::ExitStatusExt as _;
    std::process::ExitStatus::from_raw((code & 0xff) << 8)
}

/// `kill(pid, 0)` succeeds or fails with `EPERM`.
pub fn pid_alive(pid: u32) -> bool {
    let Some(pid) = to_pid(pid) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

/// Sends `SIGTERM`.
pub fn terminate(pid: u32) -> io::Result<()> {
    let pid = to_pid(pid)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("invalid pid {pid}")))?;
    rustix::process::kill_process(pid, rustix::process::Signal::TERM)?;
    Ok(())
}

fn to_pid(pid: u32) -> Option<rustix::process::Pid> {
    // Pid 0 and values beyond i32 would address process groups or nothing at all.
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
}

/// `O_NOCTTY`, for `OpenOptionsExt::custom_flags`.
pub fn o_noctty() -> i32 {
    i32::try_from(rustix::fs::OFlags::NOCTTY.bits()).unwrap_or(0)
}

/// No platform default: the state directory falls back to `~/.appduct` (§S1.1).
pub fn default_state_dir() -> Option<std::ffi::OsString> {
    None
}

/// Nothing: on Unix the state directory's mode 0700 is what makes it private (§S1.1); the
/// Windows form sets an owner-only DACL (§S4.2).
pub fn owner_only_dir(_dir: &Path) -> io::Result<Option<String>> {
    Ok(None)
}

/// `fsync` of a directory, so a rename or link in it is durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
