//! The spawn lock (§S3.4 step 4): at most one client spawns a daemon for a state directory at
//! a time. It is a file created exclusively; a file older than 30 s belongs to a spawner that
//! died and may be reclaimed.

use crate::platform::fs::MetadataExt;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::state_dir;

/// Age (by mtime) after which a spawn lock is stale.
pub const STALE_AFTER: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct SpawnLockError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// A held spawn lock; dropping it removes the file (if it is still ours).
#[derive(Debug)]
pub struct SpawnLock {
    path: PathBuf,
    /// The file we created, kept open so its inode cannot be reused: release compares it with
    /// the file at the path and never removes a reclaimer's lock.
    file: File,
}

impl SpawnLock {
    /// Tries to take the lock at `path` for the process `pid`. `Ok(None)` means another process
    /// is spawning: do not spawn, only poll for readiness.
    pub fn try_acquire(path: &Path, pid: u32) -> Result<Option<SpawnLock>, SpawnLockError> {
        SpawnLock::try_acquire_at(path, pid, SystemTime::now())
    }

    /// [`SpawnLock::try_acquire`] with an explicit "now" for the staleness test.
    pub fn try_acquire_at(
        path: &Path,
        pid: u32,
        now: SystemTime,
    ) -> Result<Option<SpawnLock>, SpawnLockError> {
        let err = |source| SpawnLockError {
            path: path.to_path_buf(),
            source,
        };
        if let Some(lock) = create(path, pid).map_err(err)? {
            return Ok(Some(lock));
        }
        if !is_stale(path, now).map_err(err)? {
            return Ok(None);
        }
        tracing::info!(
            "removing stale spawn lock {} (older than {} s)",
            path.display(),
            STALE_AFTER.as_secs()
        );
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        // Once more only: a racer that reclaimed it first wins.
        create(path, pid).map_err(err)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the lock file now (also done on drop).
    pub fn release(self) {}
}

impl Drop for SpawnLock {
    fn drop(&mut self) {
        let ours = match (self.file.metadata(), std::fs::symlink_metadata(&self.path)) {
            (Ok(mine), Ok(now)) => (mine.dev(), mine.ino()) == (now.dev(), now.ino()),
            _ => false,
        };
        if ours && let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!("cannot remove {}: {e}", self.path.display());
        }
    }
}

/// `O_CREAT|O_EXCL|O_NOFOLLOW`, 0600, holding `pid`. `Ok(None)` when something is already there
/// (including a symlink, which `O_EXCL` never follows).
fn create(path: &Path, pid: u32) -> io::Result<Option<SpawnLock>> {
    let file: File = match state_dir::create_new(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(None),
        Err(e) => return Err(e),
    };
    // Build the guard first so a failed write still removes the file.
    let mut lock = SpawnLock {
        path: path.to_path_buf(),
        file,
    };
    lock.file.write_all(format!("{pid}\n").as_bytes())?;
    Ok(Some(lock))
}

/// Whether the entry at `path` was last modified more than [`STALE_AFTER`] before `now`. A
/// vanished entry counts as stale (the next create decides).
fn is_stale(path: &Path, now: SystemTime) -> io::Result<bool> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(e),
    };
    let modified = meta.modified()?;
    // An mtime in the future (clock step) is not stale.
    Ok(now
        .duration_since(modified)
        .is_ok_and(|age| age > STALE_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn temp() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("ad")
            .tempdir_in("/tmp")
            .unwrap()
    }

    fn age(path: &Path, by: Duration) {
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - by).unwrap();
    }

    #[test]
    fn acquire_writes_pid_0600_and_drop_removes_it() {
        let tmp = temp();
        let path = tmp.path().join("daemon.spawn.lock");
        let lock = SpawnLock::try_acquire(&path, 31337).unwrap().unwrap();
        assert_eq!(lock.path(), path);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "31337\n");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
        drop(lock);
        assert!(!path.exists());
    }

    #[test]
    fn a_fresh_lock_is_not_taken() {
        let tmp = temp();
        let path = tmp.path().join("daemon.spawn.lock");
        let held = SpawnLock::try_acquire(&path, 1).unwrap().unwrap();
        assert!(SpawnLock::try_acquire(&path, 2).unwrap().is_none());
        // 29 s old: still held.
        age(&path, Duration::from_secs(29));
        assert!(SpawnLock::try_acquire(&path, 2).unwrap().is_none());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n");
        held.release();
        assert!(!path.exists());
        assert!(SpawnLock::try_acquire(&path, 2).unwrap().is_some());
    }

    #[test]
    fn a_stale_lock_is_reclaimed() {
        let tmp = temp();
        let path = tmp.path().join("daemon.spawn.lock");
        std::fs::write(&path, "999\n").unwrap();
        age(&path, Duration::from_secs(31));
        let lock = SpawnLock::try_acquire(&path, 2).unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "2\n");
        drop(lock);
    }

    #[test]
    fn staleness_uses_the_given_now() {
        let tmp = temp();
        let path = tmp.path().join("daemon.spawn.lock");
        std::fs::write(&path, "999\n").unwrap();
        let later = SystemTime::now() + Duration::from_secs(60);
        assert!(
            SpawnLock::try_acquire_at(&path, 3, later)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn the_old_holder_does_not_remove_a_reclaimers_lock() {
        let tmp = temp();
        let path = tmp.path().join("daemon.spawn.lock");
        let old = SpawnLock::try_acquire(&path, 1).unwrap().unwrap();
        age(&path, Duration::from_secs(31));
        let new = SpawnLock::try_acquire(&path, 2).unwrap().unwrap();
        drop(old);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "2\n");
        drop(new);
        assert!(!path.exists());
    }

    #[test]
    fn a_symlink_is_never_followed() {
        let tmp = temp();
        let path = tmp.path().join("daemon.spawn.lock");
        let target = tmp.path().join("target");
        symlink(&target, &path).unwrap();
        assert!(SpawnLock::try_acquire(&path, 1).unwrap().is_none());
        assert!(!target.exists());
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_path() {
        let tmp = temp();
        let path = tmp.path().join("missing/daemon.spawn.lock");
        let err = SpawnLock::try_acquire(&path, 1).unwrap_err();
        assert_eq!(err.source.kind(), io::ErrorKind::NotFound);
        assert!(
            err.to_string().contains("missing/daemon.spawn.lock"),
            "{err}"
        );
    }
}
