//! The process probe seam (§S3.2, §S3.3): liveness, zombie state, lock state and signalling
//! of other processes, used by the pidfile checks and `appduct daemon stop`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::state_dir;

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the guarded values
/// here are plain tables that stay consistent across a panic).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Liveness and signalling of other processes (§S3.2, §S3.3).
pub trait ProcessProbe: Send + Sync + fmt::Debug {
    /// Whether another open file description holds a lock on `path`: `Some(true)` held,
    /// `Some(false)` free or absent, `None` when advisory locks are unavailable there (callers
    /// then fall back to the pid test).
    fn lock_held(&self, path: &Path) -> Option<bool>;
    /// `kill(pid, 0)` succeeds or fails with `EPERM`.
    fn pid_alive(&self, pid: u32) -> bool;
    /// The process is a zombie (Linux: `State: Z` in `/proc/<pid>/status`; elsewhere false).
    fn is_zombie(&self, pid: u32) -> bool;
    /// Sends `SIGTERM`.
    fn terminate(&self, pid: u32) -> io::Result<()>;
}

/// The OS process probe.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsProcessProbe;

impl ProcessProbe for OsProcessProbe {
    fn lock_held(&self, path: &Path) -> Option<bool> {
        let file = match state_dir::open_read(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(false),
            // Unreadable or a symlink: nobody can hold a lock we could see.
            Err(_) => return Some(false),
        };
        // A shared probe conflicts with the daemon's exclusive lock but not with other probes.
        match file.try_lock_shared() {
            Ok(()) => Some(false),
            Err(std::fs::TryLockError::WouldBlock) => Some(true),
            Err(std::fs::TryLockError::Error(_)) => None,
        }
    }

    fn pid_alive(&self, pid: u32) -> bool {
        crate::platform::pid_alive(pid)
    }

    fn is_zombie(&self, pid: u32) -> bool {
        if cfg!(target_os = "linux") {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .is_ok_and(|status| status_is_zombie(&status))
        } else {
            false
        }
    }

    fn terminate(&self, pid: u32) -> io::Result<()> {
        crate::platform::terminate(pid)
    }
}

/// Whether a `/proc/<pid>/status` text says the process is a zombie.
pub fn status_is_zombie(status: &str) -> bool {
    status
        .lines()
        .find_map(|line| line.strip_prefix("State:"))
        .is_some_and(|state| state.trim_start().starts_with('Z'))
}

/// A table-driven process probe for tests.
#[derive(Debug, Default)]
pub struct FakeProcessProbe {
    table: Mutex<FakeProcessTable>,
}

#[derive(Debug, Default)]
struct FakeProcessTable {
    locks: HashMap<PathBuf, Option<bool>>,
    alive: HashSet<u32>,
    zombies: HashSet<u32>,
    terminated: Vec<u32>,
}

impl FakeProcessProbe {
    pub fn new() -> Self {
        FakeProcessProbe::default()
    }

    /// What `lock_held(path)` answers (unlisted paths: `Some(false)`).
    pub fn set_lock(&self, path: impl Into<PathBuf>, held: Option<bool>) {
        lock(&self.table).locks.insert(path.into(), held);
    }

    /// A live process.
    pub fn add_alive(&self, pid: u32) {
        lock(&self.table).alive.insert(pid);
    }

    /// A zombie: `pid_alive` is true (as with `kill(pid, 0)`) and `is_zombie` too.
    pub fn add_zombie(&self, pid: u32) {
        let mut t = lock(&self.table);
        t.alive.insert(pid);
        t.zombies.insert(pid);
    }

    /// Pids `terminate` was called for, in order.
    pub fn terminated(&self) -> Vec<u32> {
        lock(&self.table).terminated.clone()
    }
}

impl ProcessProbe for FakeProcessProbe {
    fn lock_held(&self, path: &Path) -> Option<bool> {
        lock(&self.table)
            .locks
            .get(path)
            .copied()
            .unwrap_or(Some(false))
    }

    fn pid_alive(&self, pid: u32) -> bool {
        lock(&self.table).alive.contains(&pid)
    }

    fn is_zombie(&self, pid: u32) -> bool {
        lock(&self.table).zombies.contains(&pid)
    }

    fn terminate(&self, pid: u32) -> io::Result<()> {
        let mut t = lock(&self.table);
        t.terminated.push(pid);
        if t.alive.remove(&pid) {
            t.zombies.remove(&pid);
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no process {pid}"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn temp() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("ad")
            .tempdir_in("/tmp")
            .unwrap()
    }

    /// Bounded polling for asynchronous OS state (never a fixed sleep).
    fn poll_until(mut cond: impl FnMut() -> bool) -> bool {
        for _ in 0..500 {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn zombie_state_line_is_recognised() {
        assert!(status_is_zombie(
            "Name:\tx\nUmask:\t0022\nState:\tZ (zombie)\n"
        ));
        assert!(!status_is_zombie("Name:\tx\nState:\tS (sleeping)\n"));
        assert!(!status_is_zombie("Name:\tZ\n"));
    }

    #[test]
    fn os_probe_sees_this_process_and_rejects_bad_pids() {
        let probe = OsProcessProbe;
        assert!(probe.pid_alive(std::process::id()));
        assert!(!probe.is_zombie(std::process::id()));
        assert!(!probe.pid_alive(0));
        assert!(!probe.pid_alive(u32::MAX));
        assert!(probe.terminate(0).is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn os_probe_detects_a_zombie_child() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        assert!(
            poll_until(|| OsProcessProbe.is_zombie(pid)),
            "child never became a zombie"
        );
        // kill(pid, 0) still succeeds on a zombie: that is why the zombie rule exists.
        assert!(OsProcessProbe.pid_alive(pid));
        child.wait().unwrap();
        assert!(!OsProcessProbe.is_zombie(pid));
    }

    #[test]
    fn os_probe_terminates_with_sigterm() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        OsProcessProbe.terminate(child.id()).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(15));
    }

    #[test]
    fn os_probe_reports_lock_state() {
        let tmp = temp();
        let path = tmp.path().join("daemon.pid");
        assert_eq!(OsProcessProbe.lock_held(&path), Some(false), "absent");
        let holder = std::fs::File::create(&path).unwrap();
        assert_eq!(OsProcessProbe.lock_held(&path), Some(false), "unlocked");
        holder.try_lock().unwrap();
        assert_eq!(OsProcessProbe.lock_held(&path), Some(true), "locked");
        // The probe must not have stolen or released the holder's lock.
        assert_eq!(OsProcessProbe.lock_held(&path), Some(true));
        holder.unlock().unwrap();
        assert_eq!(OsProcessProbe.lock_held(&path), Some(false));
    }

    #[test]
    fn fake_probe_is_table_driven() {
        let probe = FakeProcessProbe::new();
        probe.add_alive(10);
        probe.add_zombie(11);
        probe.set_lock("/s/daemon.pid", None);
        assert!(probe.pid_alive(10) && !probe.is_zombie(10));
        assert!(probe.pid_alive(11) && probe.is_zombie(11));
        assert!(!probe.pid_alive(12));
        assert_eq!(probe.lock_held(Path::new("/s/daemon.pid")), None);
        assert_eq!(probe.lock_held(Path::new("/other")), Some(false));
        probe.terminate(10).unwrap();
        assert!(probe.terminate(12).is_err());
        assert!(!probe.pid_alive(10));
        assert_eq!(probe.terminated(), [10, 12]);
    }
}
