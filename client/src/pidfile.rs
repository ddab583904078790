//! Single instance per state directory (§S3.2) and the one liveness test, `owner_alive`
//! (§S3.3).
//!
//! The exclusive advisory lock on `daemon.pid`, not the pid inside it, is the authority: the
//! kernel drops it when the daemon exits (zombie or not) and a reused pid cannot hold it. Only
//! where locks are unavailable does the appduct v2 `O_EXCL` + pid test apply.

use crate::platform::fs::MetadataExt;
use std::fs::{File, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::process::{OsProcessProbe, ProcessProbe};
use crate::state_dir::{self, FILE_MODE, PID_FILE};

/// Timing and retry bounds of the acquisition algorithm. Tests shorten the waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidfileOptions {
    /// Pause between lock attempts while another process holds the lock.
    pub retry_interval: Duration,
    /// How long a held lock is retried before giving up (a stopping daemon releases it soon).
    pub held_wait: Duration,
    /// Open-lock-verify rounds before giving up when the file keeps being replaced.
    pub max_attempts: u32,
}

impl Default for PidfileOptions {
    fn default() -> Self {
        PidfileOptions {
            retry_interval: Duration::from_millis(100),
            held_wait: Duration::from_secs(1),
            max_attempts: 5,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PidfileError {
    /// Another daemon owns the state directory (`connection_error` "already running").
    #[error("An appduct daemon is already running for this state directory{}", pid_suffix(*.pid))]
    DaemonAlreadyRunning {
        /// The pid in its pidfile, when it could be read.
        pid: Option<u32>,
    },
    #[error("could not take {} after {attempts} attempts: it kept being replaced", path.display())]
    TooManyAttempts { path: PathBuf, attempts: u32 },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn pid_suffix(pid: Option<u32>) -> String {
    pid.map_or_else(String::new, |p| format!(" (pid {p})"))
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> PidfileError + '_ {
    move |source| PidfileError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How the pidfile is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// Exclusive advisory lock on the open file.
    Advisory,
    /// Fallback where locks are unavailable: the file was created with `O_EXCL`.
    ExclusiveCreate,
}

/// The held pidfile. Dropping it (or [`PidfileLock::release`]) unlinks `daemon.pid` and then
/// releases the lock (shutdown step 6, §S3.6).
#[derive(Debug)]
pub struct PidfileLock {
    path: PathBuf,
    file: Option<File>,
    pid: u32,
    kind: LockKind,
}

impl PidfileLock {
    /// Takes `path` for the daemon `pid` (§S3.2).
    pub fn acquire(path: &Path, pid: u32, opts: &PidfileOptions) -> Result<Self, PidfileError> {
        PidfileLock::acquire_with(path, pid, opts, &OsProcessProbe)
    }

    /// Like [`PidfileLock::acquire`]; `probe` is consulted only by the no-lock fallback.
    pub fn acquire_with(
        path: &Path,
        pid: u32,
        opts: &PidfileOptions,
        probe: &dyn ProcessProbe,
    ) -> Result<Self, PidfileError> {
        acquire_inner(path, pid, opts, probe, &mut |_| {})
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// Unlinks the pidfile (if it is still ours) and releases the lock, reporting an unlink
    /// failure instead of only logging it.
    pub fn release(mut self) -> io::Result<()> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> io::Result<()> {
        let Some(file) = self.file.take() else {
            return Ok(());
        };
        // Unlink before unlocking: a new daemon that opened the old file meanwhile sees a
        // different inode at the path once it gets the lock, and starts over.
        let result = if same_file(&file, &self.path)? {
            match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        } else {
            Ok(())
        };
        drop(file);
        result
    }
}

impl Drop for PidfileLock {
    fn drop(&mut self) {
        if let Err(e) = self.release_inner() {
            tracing::warn!("cannot remove {}: {e}", self.path.display());
        }
    }
}

/// The acquisition algorithm; `after_lock` runs between locking and the inode check (a test
/// hook to simulate the file being replaced).
fn acquire_inner(
    path: &Path,
    pid: u32,
    opts: &PidfileOptions,
    probe: &dyn ProcessProbe,
    after_lock: &mut dyn FnMut(u32),
) -> Result<PidfileLock, PidfileError> {
    for attempt in 1..=opts.max_attempts {
        // 1. Open or create, 0600, O_NOFOLLOW.
        let (mut file, created) = match open_pidfile(path) {
            Ok(opened) => opened,
            // Unlinked between our two open calls: that is a replacement too.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err(path)(e)),
        };
        // 2. Exclusive lock, retried while held.
        match wait_for_lock(|| file.try_lock(), opts) {
            LockOutcome::Locked => {}
            LockOutcome::Held => {
                return Err(PidfileError::DaemonAlreadyRunning {
                    pid: read_first_line_pid(&mut file),
                });
            }
            LockOutcome::Unsupported(e) => {
                tracing::warn!(
                    "advisory locks are unavailable for {} ({e}); using exclusive creation",
                    path.display()
                );
                return acquire_exclusive_create(path, pid, opts, probe, file, created);
            }
        }
        after_lock(attempt);
        // 3. The file we locked must still be the one at the path.
        if !same_file(&file, path).map_err(io_err(path))? {
            continue;
        }
        // 4. Truncate, write the pid, fsync.
        write_pid(&mut file, pid).map_err(io_err(path))?;
        return Ok(PidfileLock {
            path: path.to_path_buf(),
            file: Some(file),
            pid,
            kind: LockKind::Advisory,
        });
    }
    Err(PidfileError::TooManyAttempts {
        path: path.to_path_buf(),
        attempts: opts.max_attempts,
    })
}

#[derive(Debug)]
enum LockOutcome {
    Locked,
    Held,
    Unsupported(io::Error),
}

/// Tries `try_lock` until it succeeds, fails for a reason other than contention, or
/// `opts.held_wait` has passed.
fn wait_for_lock(
    mut try_lock: impl FnMut() -> Result<(), TryLockError>,
    opts: &PidfileOptions,
) -> LockOutcome {
    let start = Instant::now();
    loop {
        match try_lock() {
            Ok(()) => return LockOutcome::Locked,
            Err(TryLockError::Error(e)) => return LockOutcome::Unsupported(e),
            Err(TryLockError::WouldBlock) => {
                let waited = start.elapsed();
                if waited >= opts.held_wait {
                    return LockOutcome::Held;
                }
                std::thread::sleep(opts.retry_interval.min(opts.held_wait - waited));
            }
        }
    }
}

/// Opens `path` read-write, creating it 0600 if needed; reports whether this call created it.
fn open_pidfile(path: &Path) -> io::Result<(File, bool)> {
    let mut create = state_dir::private_open_options();
    create.read(true).write(true).create_new(true);
    match state_dir::open_for_writing(&mut create, path) {
        Ok(file) => Ok((file, true)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let mut existing = state_dir::private_open_options();
            existing.read(true).write(true);
            state_dir::open_for_writing(&mut existing, path).map(|file| (file, false))
        }
        Err(e) => Err(e),
    }
}

/// Whether `file` is the file now at `path` (same device and inode). A missing path is `false`.
fn same_file(file: &File, path: &Path) -> io::Result<bool> {
    let ours = file.metadata()?;
    match std::fs::symlink_metadata(path) {
        Ok(now) => Ok(now.dev() == ours.dev() && now.ino() == ours.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn write_pid(file: &mut File, pid: u32) -> io::Result<()> {
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(format!("{pid}\n").as_bytes())?;
    // A file that existed before may have had a looser mode.
    crate::platform::fchmod(file, FILE_MODE)?;
    file.sync_all()
}

fn read_first_line_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    // The file holds a few bytes; cap the read anyway.
    file.take(64).read_to_string(&mut text).ok()?;
    parse_pid(&text)
}

/// Parses the first line of a pidfile: a decimal pid greater than zero. Later lines are ignored.
pub fn parse_pid(text: &str) -> Option<u32> {
    text.lines()
        .next()?
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|&p| p > 0)
}

/// Reads the pid from the pidfile at `path` (first line only). `Ok(None)` when the file is
/// absent or does not start with a pid.
pub fn read_pid(path: &Path) -> io::Result<Option<u32>> {
    let mut file = match state_dir::open_read(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(read_first_line_pid(&mut file))
}

/// The appduct v2 fallback (§S3.2): `O_EXCL` creation; an existing file whose pid is alive
/// (and, on Linux, not a zombie) means another daemon; otherwise it is stale, removed, and the
/// creation retried.
fn acquire_exclusive_create(
    path: &Path,
    pid: u32,
    opts: &PidfileOptions,
    probe: &dyn ProcessProbe,
    opened: File,
    created: bool,
) -> Result<PidfileLock, PidfileError> {
    let mut first = created.then_some(opened);
    for _ in 0..opts.max_attempts {
        let mut file = match first.take() {
            Some(file) => file,
            None => match state_dir::create_new(path) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let existing = read_pid(path).ok().flatten();
                    if let Some(owner) = existing.filter(|&p| p != pid)
                        && pid_test_alive(probe, owner)
                    {
                        return Err(PidfileError::DaemonAlreadyRunning { pid: Some(owner) });
                    }
                    match std::fs::remove_file(path) {
                        Err(e) if e.kind() != io::ErrorKind::NotFound => {
                            return Err(io_err(path)(e));
                        }
                        _ => continue,
                    }
                }
                Err(e) => return Err(io_err(path)(e)),
            },
        };
        write_pid(&mut file, pid).map_err(io_err(path))?;
        return Ok(PidfileLock {
            path: path.to_path_buf(),
            file: Some(file),
            pid,
            kind: LockKind::ExclusiveCreate,
        });
    }
    Err(PidfileError::TooManyAttempts {
        path: path.to_path_buf(),
        attempts: opts.max_attempts,
    })
}

/// The pid test of the fallback: `kill(pid, 0)` succeeds or says `EPERM`, and the process is
/// not a zombie.
fn pid_test_alive(probe: &dyn ProcessProbe, pid: u32) -> bool {
    probe.pid_alive(pid) && !probe.is_zombie(pid)
}

/// `owner_alive(state_dir)` (§S3.3): true iff another process holds the lock on
/// `<state_dir>/daemon.pid`; where locks are unavailable, the pid test with the zombie rule.
/// The only liveness test: spawning, stale-socket takeover and `daemon stop` all use it.
pub fn owner_alive(state_dir: &Path) -> bool {
    owner_alive_with(&OsProcessProbe, &state_dir.join(PID_FILE))
}

/// [`owner_alive`] for the pidfile at `pid_path`, through `probe`.
pub fn owner_alive_with(probe: &dyn ProcessProbe, pid_path: &Path) -> bool {
    match probe.lock_held(pid_path) {
        Some(held) => held,
        None => read_pid(pid_path)
            .ok()
            .flatten()
            .is_some_and(|pid| pid_test_alive(probe, pid)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::FakeProcessProbe;
    use std::cell::Cell;
    use std::fs::Permissions;
    use std::os::unix::fs::{PermissionsExt as _, symlink};

    fn temp() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("ad")
            .tempdir_in("/tmp")
            .unwrap()
    }

    fn fast() -> PidfileOptions {
        PidfileOptions {
            retry_interval: Duration::from_millis(1),
            held_wait: Duration::ZERO,
            max_attempts: 5,
        }
    }

    fn ino(path: &Path) -> u64 {
        std::fs::symlink_metadata(path).unwrap().ino()
    }

    #[test]
    fn defaults_match_the_spec() {
        let d = PidfileOptions::default();
        assert_eq!(d.retry_interval, Duration::from_millis(100));
        assert_eq!(d.held_wait, Duration::from_secs(1));
        assert_eq!(d.max_attempts, 5);
    }

    #[test]
    fn acquire_writes_pid_with_mode_0600() {
        let tmp = temp();
        let path = tmp.path().join("daemon.pid");
        let lock = PidfileLock::acquire(&path, 4242, &fast()).unwrap();
        assert_eq!(lock.kind(), LockKind::Advisory);
        assert_eq!(lock.pid(), 4242);
        assert_eq!(lock.path(), path);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "4242\n");
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        assert_eq!(read_pid(&path).unwrap(), Some(4242));
    }

    #[test]
    fn second_acquire_fails_with_the_first_pid() {
        let tmp = temp();
        let path = tmp.path().join("daemon.pid");
        let _first = PidfileLock::acquire(&path, 111, &fast()).unwrap();
        let err = PidfileLock::acquire(&path, 222, &fast()).unwrap_err();
        assert!(
            matches!(err, PidfileError::DaemonAlreadyRunning { pid: Some(111) }),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("already running") && text.contains("(pid 111)"),
            "{text}"
        );
        // The loser must not have touched the winner's file.
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "111\n");
    }

    #[test]
    fn drop_unlinks_and_a_new_daemon_can_start() {
        let tmp = temp();
        let path = tmp.path().join("daemon.pid");
        let first = PidfileLock::acquire(&path, 111, &fast()).unwrap();
        drop(first);
        assert!(!path.exists(), "the pidfile is unlinked on release");
        let second = PidfileLock::acquire(&path, 222, &fast()).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "222\n");
        second.release().unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn a_stale_unlocked_pidfile_is_taken_over() {
        // A crashed daemon leaves its file behind without a lock.
        let tmp = temp();
        let path = tmp.path().join("daemon.pid");
        std::fs::write(&path, "999999\nextra\n").unwrap();
        std::fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        let lock = PidfileLock::acquire(&path, 333, &fast()).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "333\n");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
        drop(lock);
    }

    #[test]
    fn inode_change_after_locking_restarts_acquisition() {
        let tmp = temp();
        let path = tmp.path().join("daemon.pid");
        let attempts = Cell::new(0);
        let lock = acquire_inner(&path, 77, &fast(), &OsProcessProbe, &mut |attempt| {
            attempts.set(attempt);
            if attempt == 1 {
                // Someone unlinks and recreates the file while we hold the old one's lock.
                std::fs::remove_file(&path).unwrap();
                std::fs::write(&path, "").unwrap();
            }
        })
        .unwrap();
        assert_eq!(attempts.get(), 2);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "77\n");
        // What we hold is the file now at the path.
        assert!(same_file(lock.file.as_ref().unwrap(), &path).unwrap());
    }

    #[test]
    fn endless_replacement_gives_up_after_max_attempts() {
        let tmp = temp();
        let path = tmp.path().join("daemon.pid");
        let mut seen = 0;
        let err = acquire_inner(&path, 77, &fast(), &OsProcessProbe, &mut |_| {
            seen += 1;
            std::fs::remove_file(&path).unwrap();
        })
        .unwrap_err();
        assert_eq!(seen, 5);
        assert!(matches!(
            err,
            PidfileError::TooManyAttempts { attempts: 5, .. }
        ));
    }

    #[test]
    fn release_leaves_a_successors_file_alone() {
        let tmp = temp();
        let path = tmp.path().join("daemon.pid");
        let lock = PidfileLock::acquire(&path, 1, &fast()).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "2\n").unwrap();
        let successor = ino(&path);
        lock.release().unwrap();
        assert_eq!(ino(&path), successor);
    }

    #[test]
    fn symlinked_pidfile_is_refused() {
        let tmp = temp();
        let path = tmp.path().join("daemon.pid");
        let target = tmp.path().join("target");
        symlink(&target, &path).unwrap();
        let err = PidfileLock::acquire(&path, 1, &fast()).unwrap_err();
        assert!(matches!(err, PidfileError::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(!target.exists());
    }

    #[test]
    fn lock_wait_retries_until_released_or_timeout() {
        let opts = PidfileOptions {
            retry_interval: Duration::from_millis(1),
            held_wait: Duration::from_secs(5),
            max_attempts: 5,
        };
        let mut calls = 0;
        let outcome = wait_for_lock(
            || {
                calls += 1;
                if calls < 4 {
                    Err(TryLockError::WouldBlock)
                } else {
                    Ok(())
                }
            },
            &opts,
        );
        assert!(matches!(outcome, LockOutcome::Locked));
        assert_eq!(calls, 4);

        let mut calls = 0;
        let outcome = wait_for_lock(
            || {
                calls += 1;
                Err(TryLockError::WouldBlock)
            },
            &PidfileOptions {
                held_wait: Duration::from_millis(20),
                ..opts
            },
        );
        assert!(matches!(outcome, LockOutcome::Held));
        assert!(calls > 1, "a held lock is retried");

        let outcome = wait_for_lock(
            || Err(TryLockError::Error(io::Error::from_raw_os_error(95))),
            &opts,
        );
        assert!(matches!(outcome, LockOutcome::Unsupported(_)));
    }

    #[test]
    fn readers_parse_only_the_first_line() {
        assert_eq!(parse_pid("123\n"), Some(123));
        assert_eq!(parse_pid("123\ngarbage"), Some(123));
        assert_eq!(parse_pid(" 77 \n"), Some(77));
        assert_eq!(parse_pid("\n123\n"), None);
        assert_eq!(parse_pid(""), None);
        assert_eq!(parse_pid("0\n"), None);
        assert_eq!(parse_pid("-5\n"), None);
        assert_eq!(parse_pid("12a\n"), None);
        let tmp = temp();
        assert_eq!(read_pid(&tmp.path().join("absent")).unwrap(), None);
    }

    #[test]
    fn owner_alive_follows_the_lock() {
        let tmp = temp();
        assert!(!owner_alive(tmp.path()), "no pidfile");
        let lock = PidfileLock::acquire(&tmp.path().join(PID_FILE), 5, &fast()).unwrap();
        assert!(owner_alive(tmp.path()), "locked by another open file");
        drop(lock);
        // A leftover file naming a live pid but holding no lock is not an owner.
        std::fs::write(
            tmp.path().join(PID_FILE),
            format!("{}\n", std::process::id()),
        )
        .unwrap();
        assert!(!owner_alive(tmp.path()));
    }

    #[test]
    fn owner_alive_falls_back_to_the_pid_test() {
        let tmp = temp();
        let path = tmp.path().join(PID_FILE);
        let probe = FakeProcessProbe::new();
        probe.set_lock(&path, None);
        assert!(!owner_alive_with(&probe, &path), "no file");
        std::fs::write(&path, "40\n").unwrap();
        assert!(!owner_alive_with(&probe, &path), "dead pid");
        probe.add_alive(40);
        assert!(owner_alive_with(&probe, &path), "live pid");
        std::fs::write(&path, "41\n").unwrap();
        probe.add_zombie(41);
        assert!(!owner_alive_with(&probe, &path), "a zombie counts as dead");

        // When the lock answers, the pid does not matter.
        probe.set_lock(&path, Some(false));
        std::fs::write(&path, "40\n").unwrap();
        assert!(!owner_alive_with(&probe, &path));
        probe.set_lock(&path, Some(true));
        assert!(owner_alive_with(&probe, &path));
    }

    fn fallback(
        path: &Path,
        pid: u32,
        probe: &FakeProcessProbe,
    ) -> Result<PidfileLock, PidfileError> {
        let (file, created) = open_pidfile(path).unwrap();
        acquire_exclusive_create(path, pid, &fast(), probe, file, created)
    }

    #[test]
    fn fallback_creates_exclusively_and_unlinks_on_drop() {
        let tmp = temp();
        let path = tmp.path().join(PID_FILE);
        let probe = FakeProcessProbe::new();
        let lock = fallback(&path, 500, &probe).unwrap();
        assert_eq!(lock.kind(), LockKind::ExclusiveCreate);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "500\n");
        drop(lock);
        assert!(!path.exists());
    }

    #[test]
    fn fallback_refuses_a_live_owner() {
        let tmp = temp();
        let path = tmp.path().join(PID_FILE);
        std::fs::write(&path, "600\n").unwrap();
        let probe = FakeProcessProbe::new();
        probe.add_alive(600);
        let err = fallback(&path, 500, &probe).unwrap_err();
        assert!(matches!(
            err,
            PidfileError::DaemonAlreadyRunning { pid: Some(600) }
        ));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "600\n");
    }

    #[test]
    fn fallback_takes_over_dead_zombie_and_garbage_owners() {
        let probe = FakeProcessProbe::new();
        probe.add_zombie(601);
        for content in ["602\n", "601\n", "garbage\n", ""] {
            let tmp = temp();
            let path = tmp.path().join(PID_FILE);
            std::fs::write(&path, content).unwrap();
            let lock = fallback(&path, 500, &probe).unwrap();
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                "500\n",
                "{content:?}"
            );
            drop(lock);
        }
    }
}
