//! The state directory (§S1): where it is, how it is created and checked, the names of the
//! files in it, and the safe ways to open and remove them.
//!
//! Everything here is synchronous `std::fs`: it runs once at startup or on a client's connect
//! path, before any socket exists.

use crate::platform::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::ffi::OsString;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use appduct_protocol::limits::MAX_SOCKET_PATH_BYTES;

/// Environment variable naming the state directory when no flag is given.
pub const STATE_DIR_ENV: &str = "APPDUCT_STATE_DIR";
/// Directory name under the home directory used when neither flag nor variable is set.
pub const DEFAULT_DIR_NAME: &str = ".appduct";

pub const CONFIG_FILE: &str = "config.json";
pub const KEY_FILE: &str = "key.pem";
pub const SOCKET_FILE: &str = "daemon.sock";
pub const PID_FILE: &str = "daemon.pid";
pub const SPAWN_LOCK_FILE: &str = "daemon.spawn.lock";
pub const DAEMON_LOG_FILE: &str = "daemon.log";
pub const DAEMON_LOG_ROTATED_FILE: &str = "daemon.log.1";
pub const EVENTS_LOG_FILE: &str = "events.log";
pub const EVENTS_LOG_ROTATED_FILE: &str = "events.log.1";
pub const AUDIT_DIR: &str = "audit";

/// Mode of the state directory and `audit/`.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file the daemon or a client creates in the state directory.
pub const FILE_MODE: u32 = 0o600;

/// Why the state directory or one of its files cannot be used. Clients render every variant as
/// `connection_error` (§S1.1).
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error(
        "cannot determine the home directory for the default state directory ~/{DEFAULT_DIR_NAME}; set {STATE_DIR_ENV} or pass --state-dir"
    )]
    NoHome,
    #[error("cannot resolve the relative state directory {path}: {source}")]
    CurrentDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{path} is owned by uid {owner}, not by the current user (uid {euid}); refusing to use it"
    )]
    ForeignOwner {
        path: PathBuf,
        owner: u32,
        euid: u32,
    },
    #[error(
        "{path} is owned by uid {owner}, not by the current user (uid {euid}), and {dir} was \
         writable by others (mode {mode:04o}) when it was found; refusing to use the state \
         directory until that entry is checked and removed"
    )]
    ForeignEntry {
        path: PathBuf,
        owner: u32,
        euid: u32,
        /// The directory others could write to: the state directory or one of its
        /// subdirectories (`audit/`), the entry itself or one of its ancestors.
        dir: PathBuf,
        /// That directory's mode when it was found (before any tightening).
        mode: u32,
    },
    #[error("{path} is not a directory")]
    NotADirectory { path: PathBuf },
    #[error(
        "socket path {path} is {len} bytes, longer than the {MAX_SOCKET_PATH_BYTES}-byte limit; set {STATE_DIR_ENV} to a shorter directory"
    )]
    SocketPathTooLong { path: PathBuf, len: usize },
    #[error("{path} exists but is not a socket ({kind}); refusing to remove it")]
    NotASocket { path: PathBuf, kind: &'static str },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl StateDirError {
    fn io(path: &Path, source: io::Error) -> Self {
        StateDirError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Resolves the state directory from its three sources (§S1.1): `flag` > `env` > `home`/.appduct.
/// An empty flag or variable counts as absent. A relative result is made absolute against `cwd`.
/// Pure, so tests can exercise every precedence case without touching the process environment.
pub fn resolve(
    flag: Option<&Path>,
    env: Option<&std::ffi::OsStr>,
    home: Option<&Path>,
    cwd: impl FnOnce() -> io::Result<PathBuf>,
) -> Result<PathBuf, StateDirError> {
    let chosen: PathBuf = if let Some(flag) = flag.filter(|p| !p.as_os_str().is_empty()) {
        flag.to_path_buf()
    } else if let Some(env) = env.filter(|v| !v.is_empty()) {
        PathBuf::from(env)
    } else {
        match home.filter(|h| !h.as_os_str().is_empty()) {
            Some(home) => home.join(DEFAULT_DIR_NAME),
            None => return Err(StateDirError::NoHome),
        }
    };
    if chosen.is_absolute() {
        return Ok(chosen);
    }
    let base = cwd().map_err(|source| StateDirError::CurrentDir {
        path: chosen.clone(),
        source,
    })?;
    Ok(base.join(chosen))
}

/// What [`StateDir::prepare`] did, so callers and tests can see it beyond the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prepared {
    /// The directory did not exist and was created.
    pub created: bool,
    /// The directory had group or other bits; this was its previous mode (permission bits).
    pub tightened_from: Option<u32>,
}

/// An absolute state directory and its path table (§S1.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// Wraps `root`, making it absolute against the current directory if needed.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, StateDirError> {
        let root = root.into();
        let root = resolve(Some(&root), None, None, std::env::current_dir)?;
        Ok(StateDir { root })
    }

    /// Resolves the directory of this process: `flag` > `APPDUCT_STATE_DIR` > `~/.appduct`
    /// (Windows: `%LOCALAPPDATA%\appduct`, §S4.2).
    pub fn resolve(flag: Option<&Path>) -> Result<Self, StateDirError> {
        // Windows: an unset variable falls back to `%LOCALAPPDATA%\appduct` (§S4.2).
        let env: Option<OsString> = std::env::var_os(STATE_DIR_ENV)
            .filter(|v| !v.is_empty())
            .or_else(crate::platform::default_state_dir);
        let home = std::env::home_dir();
        let root = resolve(flag, env.as_deref(), home.as_deref(), std::env::current_dir)?;
        Ok(StateDir { root })
    }

    /// The absolute directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    pub fn config_path(&self) -> PathBuf {
        self.root.join(CONFIG_FILE)
    }
    /// The default key path; `config.json`'s `keyPath` may point elsewhere.
    pub fn key_path(&self) -> PathBuf {
        self.root.join(KEY_FILE)
    }
    /// The control socket path, without the length check (see [`StateDir::checked_socket_path`]).
    pub fn socket_path(&self) -> PathBuf {
        self.root.join(SOCKET_FILE)
    }
    pub fn pid_path(&self) -> PathBuf {
        self.root.join(PID_FILE)
    }
    pub fn spawn_lock_path(&self) -> PathBuf {
        self.root.join(SPAWN_LOCK_FILE)
    }
    pub fn daemon_log_path(&self) -> PathBuf {
        self.root.join(DAEMON_LOG_FILE)
    }
    pub fn daemon_log_rotated_path(&self) -> PathBuf {
        self.root.join(DAEMON_LOG_ROTATED_FILE)
    }
    pub fn events_log_path(&self) -> PathBuf {
        self.root.join(EVENTS_LOG_FILE)
    }
    pub fn events_log_rotated_path(&self) -> PathBuf {
        self.root.join(EVENTS_LOG_ROTATED_FILE)
    }
    pub fn audit_dir(&self) -> PathBuf {
        self.root.join(AUDIT_DIR)
    }

    /// The socket path, refused when longer than 100 bytes (§S1.1, §C1.1). Call before
    /// every bind and connect.
    pub fn checked_socket_path(&self) -> Result<PathBuf, StateDirError> {
        let path = self.socket_path();
        check_socket_path_len(&path)?;
        Ok(path)
    }

    /// Creates the directory (0700) if missing, refuses one owned by another uid, and tightens
    /// group/other bits to 0700 with a warning (§S1.1); on Windows, gives it an owner-only ACL
    /// instead, with a warning when an existing one was replaced (§S4.2). When the directory was writable by
    /// group or others, an entry owned by another uid is refused (it may have been planted).
    /// Must run before any lock or socket in the directory is used.
    pub fn prepare(&self) -> Result<Prepared, StateDirError> {
        prepare_dir(&self.root, crate::platform::euid())
    }

    /// Creates `audit/` with 0700 and chmods it explicitly (creation honours the umask).
    pub fn ensure_audit_dir(&self) -> Result<PathBuf, StateDirError> {
        let dir = self.audit_dir();
        match DirBuilder::new().mode(DIR_MODE).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StateDirError::io(&dir, e)),
        }
        // lstat: a symlink named `audit` is refused, never followed.
        let meta = std::fs::symlink_metadata(&dir).map_err(|e| StateDirError::io(&dir, e))?;
        if !meta.is_dir() {
            return Err(StateDirError::NotADirectory { path: dir });
        }
        let euid = crate::platform::euid();
        if meta.uid() != euid {
            return Err(StateDirError::ForeignOwner {
                path: dir,
                owner: meta.uid(),
                euid,
            });
        }
        crate::platform::chmod(&dir, DIR_MODE).map_err(|e| StateDirError::io(&dir, e))?;
        // Tightened first, then checked: nothing can be added after the walk. `prepare` walked
        // it already; this catches an entry planted since, through a descriptor of the
        // directory opened while it was writable.
        let mode = meta.mode() & 0o7777;
        let exposed = (mode & 0o022 != 0).then(|| (dir.clone(), mode));
        refuse_foreign_entries(&dir, euid, exposed)?;
        Ok(dir)
    }

    /// Unlinks `daemon.sock` when it is a socket (§S1.2). Returns whether a socket was
    /// removed; an absent path is `Ok(false)`; anything else at the path is an error naming it.
    /// Callers must hold the pidfile lock or the spawn lock and have seen the socket refuse a
    /// connection (§C1.1).
    pub fn remove_stale_socket(&self) -> Result<bool, StateDirError> {
        remove_socket_file(&self.socket_path())
    }

    /// Rotates `daemon.log` to `daemon.log.1` when it is larger than `max_bytes` (§S3.7, run by
    /// the spawner only while no daemon owns the directory). Returns whether it rotated.
    pub fn rotate_daemon_log(&self, max_bytes: u64) -> Result<bool, StateDirError> {
        rotate_if_larger(
            &self.daemon_log_path(),
            &self.daemon_log_rotated_path(),
            max_bytes,
        )
    }
}

/// Refuses a socket path longer than 100 bytes, naming it and suggesting a shorter
/// `APPDUCT_STATE_DIR`.
pub fn check_socket_path_len(path: &Path) -> Result<(), StateDirError> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH_BYTES {
        return Err(StateDirError::SocketPathTooLong {
            path: path.to_path_buf(),
            len,
        });
    }
    Ok(())
}

fn prepare_dir(root: &Path, euid: u32) -> Result<Prepared, StateDirError> {
    let mut created = false;
    if std::fs::symlink_metadata(root).is_err() {
        // Intermediate directories get 0700 too; the user asked for this location.
        match DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(root)
        {
            Ok(()) => created = true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StateDirError::io(root, e)),
        }
    }
    // Follows a symlinked state directory: the user may keep it elsewhere; the checks below
    // apply to the real directory.
    let meta = std::fs::metadata(root).map_err(|e| StateDirError::io(root, e))?;
    if !meta.is_dir() {
        return Err(StateDirError::NotADirectory {
            path: root.to_path_buf(),
        });
    }
    if meta.uid() != euid {
        return Err(StateDirError::ForeignOwner {
            path: root.to_path_buf(),
            owner: meta.uid(),
            euid,
        });
    }
    // Windows (§S4.2): the owner-only DACL stands for 0700 (mode bits do not exist there, so
    // the checks below pass). A no-op on Unix.
    match crate::platform::owner_only_dir(root) {
        Ok(None) => {}
        Ok(Some(before)) if !created => tracing::warn!(
            "state directory {} had the ACL {before}; made it owner-only",
            root.display()
        ),
        Ok(Some(_)) => {}
        Err(e) => {
            return Err(StateDirError::io(
                root,
                io::Error::new(e.kind(), format!("cannot make its ACL owner-only: {e}")),
            ));
        }
    }
    let mode = meta.mode() & 0o7777;
    let mut tightened_from = None;
    if created {
        // The umask may have removed owner bits; 0700 exactly.
        if mode != DIR_MODE {
            set_mode(root, DIR_MODE)?;
        }
        return Ok(Prepared {
            created,
            tightened_from,
        });
    }
    if mode & 0o077 != 0 {
        set_mode(root, DIR_MODE)?;
        tracing::warn!(
            "state directory {} had mode {mode:04o}; tightened it to 0700",
            root.display()
        );
        tightened_from = Some(mode);
    }
    // Others could create entries in a directory with group/other write bits until now: a
    // planted `config.json` would set the policy and `webOrigins`, a planted audit day file
    // would receive the audit log (project decision, beyond §S1.1's tightening). The whole
    // tree is walked, `audit/` included, after the chmod above.
    let exposed = (mode & 0o022 != 0).then(|| (root.to_path_buf(), mode));
    refuse_foreign_entries(root, euid, exposed)?;
    Ok(Prepared {
        created,
        tightened_from,
    })
}

/// Walks `root` (symlinks are never followed) and refuses an entry of another uid found in a
/// directory that others could write to: `root` itself when `exposed` names it, or any of its
/// own subdirectories whose mode has group/other write bits, and everything below such a
/// directory. A directory of another uid is not entered. Entries of a directory nobody else
/// could write to are only typed from the directory listing, so the common case (0700
/// throughout) costs one listing per directory.
fn refuse_foreign_entries(
    root: &Path,
    euid: u32,
    exposed: Option<(PathBuf, u32)>,
) -> Result<(), StateDirError> {
    let mut pending = vec![(root.to_path_buf(), exposed)];
    while let Some((dir, exposed)) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            // A subdirectory of the user's that nobody else could write to and that the user
            // made unreadable (mode 0000) holds nothing appduct writes: left alone.
            Err(_) if exposed.is_none() && dir != root => continue,
            Err(e) => return Err(StateDirError::io(&dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| StateDirError::io(&dir, e))?;
            let is_dir = entry
                .file_type()
                .map_err(|e| StateDirError::io(&entry.path(), e))?
                .is_dir();
            if exposed.is_none() && !is_dir {
                continue;
            }
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).map_err(|e| StateDirError::io(&path, e))?;
            if meta.uid() != euid {
                if let Some((exposed_dir, mode)) = &exposed {
                    return Err(StateDirError::ForeignEntry {
                        path,
                        owner: meta.uid(),
                        euid,
                        dir: exposed_dir.clone(),
                        mode: *mode,
                    });
                }
                continue;
            }
            if meta.is_dir() {
                let mode = meta.mode() & 0o7777;
                let below = exposed
                    .clone()
                    .or_else(|| (mode & 0o022 != 0).then(|| (path.clone(), mode)));
                pending.push((path, below));
            }
        }
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<(), StateDirError> {
    crate::platform::chmod(path, mode).map_err(|e| StateDirError::io(path, e))
}

/// `OpenOptions` for a state file: mode 0600 when created, and `O_NOFOLLOW` so a symlink at the
/// name fails instead of being followed (§S1.2). Callers add read/write/append/create.
pub fn private_open_options() -> OpenOptions {
    let mut opts = OpenOptions::new();
    opts.mode(FILE_MODE)
        .custom_flags(crate::platform::o_nofollow());
    opts
}

/// Opens `path` with `opts` (normally from [`private_open_options`]), turning the `ELOOP` of
/// `O_NOFOLLOW` into an error that says a symlink was refused. For reading only: every open
/// for writing goes through [`open_for_writing`].
pub fn open_with(opts: &OpenOptions, path: &Path) -> io::Result<File> {
    opts.open(path).map_err(|e| refine_open_error(path, e))
}

/// The one way the daemon and its clients open a file they write (SECURITY.md §4.5, project decision):
/// `opts` (from [`private_open_options`], plus the access and creation flags) with `O_NOFOLLOW`
/// and `O_NONBLOCK` (a FIFO planted at the name fails at once instead of hanging the writer;
/// regular files ignore the flag), then `fstat` of the opened file: it must be a regular file
/// owned by the effective uid with a single link. Anything else is closed unwritten and
/// refused with an [`UnsafeFileError`] (kind `PermissionDenied`) naming the file.
pub fn open_for_writing(opts: &mut OpenOptions, path: &Path) -> io::Result<File> {
    opts.custom_flags(crate::platform::o_nofollow() | crate::platform::o_nonblock());
    let file = open_with(opts, path)?;
    check_writable_file(&file, path, crate::platform::euid())?;
    Ok(file)
}

/// The `fstat` half of [`open_for_writing`], on the descriptor so no path race.
fn check_writable_file(file: &File, path: &Path, euid: u32) -> io::Result<()> {
    let meta = file.metadata()?;
    let refused = if !meta.file_type().is_file() {
        Some(UnsafeFileError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
        })
    } else if meta.uid() != euid {
        Some(UnsafeFileError::ForeignOwner {
            path: path.to_path_buf(),
            owner: meta.uid(),
            euid,
        })
    } else if meta.nlink() > 1 {
        Some(UnsafeFileError::HardLinked {
            path: path.to_path_buf(),
            links: meta.nlink(),
        })
    } else {
        None
    };
    match refused {
        Some(e) => Err(io::Error::new(io::ErrorKind::PermissionDenied, e)),
        None => Ok(()),
    }
}

/// Why [`open_for_writing`] refused a file it opened: what is written there could reach
/// someone else. Carried inside the `io::Error` (see [`UnsafeFileError::of`]); each message
/// names the file and what the operator should do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnsafeFileError {
    #[error(
        "{path} is owned by uid {owner}, not by the current user (uid {euid}); refusing to \
         write to it, because its owner could read what is written. Find out who created it, \
         then remove it"
    )]
    ForeignOwner {
        path: PathBuf,
        owner: u32,
        euid: u32,
    },
    #[error(
        "{path} has {links} hard links; refusing to write to it, because another name of the \
         file could expose what is written. Find the other names (find / -xdev -samefile \
         {path}), then remove the file"
    )]
    HardLinked { path: PathBuf, links: u64 },
    #[error("{path} is {kind}, not a regular file; refusing to write to it. Remove it")]
    NotRegular { path: PathBuf, kind: &'static str },
}

impl UnsafeFileError {
    /// The refusal inside an error of [`open_for_writing`], if that is what it is.
    pub fn of(e: &io::Error) -> Option<&UnsafeFileError> {
        e.get_ref()?.downcast_ref()
    }
}

fn kind_of(file_type: std::fs::FileType) -> &'static str {
    if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_file() {
        "a regular file"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

/// Opens (creating if needed) `path` for appending, mode 0600, through [`open_for_writing`].
pub fn open_append(path: &Path) -> io::Result<File> {
    open_for_writing(private_open_options().create(true).append(true), path)
}

/// Creates `path` exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, 0600) for writing, through
/// [`open_for_writing`].
pub fn create_new(path: &Path) -> io::Result<File> {
    open_for_writing(private_open_options().write(true).create_new(true), path)
}

/// Opens an existing `path` read-only without following symlinks.
pub fn open_read(path: &Path) -> io::Result<File> {
    open_with(private_open_options().read(true), path)
}

fn refine_open_error(path: &Path, e: io::Error) -> io::Error {
    if crate::platform::is_symlink_refusal(&e) {
        io::Error::new(
            e.kind(),
            format!(
                "{} is a symbolic link; refusing to follow it",
                path.display()
            ),
        )
    } else {
        e
    }
}

/// Unlinks `path` only when it is a socket (`S_IFSOCK`), never following a symlink. `Ok(false)`
/// when nothing is there.
pub fn remove_socket_file(path: &Path) -> Result<bool, StateDirError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(StateDirError::io(path, e)),
    };
    let file_type = meta.file_type();
    if !file_type.is_socket() {
        return Err(StateDirError::NotASocket {
            path: path.to_path_buf(),
            kind: kind_of(file_type),
        });
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StateDirError::io(path, e)),
    }
}

/// Renames `path` to `rotated` (replacing it, mode 0600) when `path` is a regular file larger than
/// `max_bytes`. A symlink at `path` is an error. Returns whether it rotated.
pub fn rotate_if_larger(
    path: &Path,
    rotated: &Path,
    max_bytes: u64,
) -> Result<bool, StateDirError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(StateDirError::io(path, e)),
    };
    if !meta.file_type().is_file() {
        return Err(StateDirError::Io {
            path: path.to_path_buf(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file; refusing to rotate it",
            ),
        });
    }
    if meta.len() <= max_bytes {
        return Ok(false);
    }
    std::fs::rename(path, rotated).map_err(|e| StateDirError::io(rotated, e))?;
    set_mode(rotated, FILE_MODE)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::Permissions;
    use std::os::unix::fs::{PermissionsExt as _, symlink};

    fn temp() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("ad")
            .tempdir_in("/tmp")
            .unwrap()
    }

    fn mode_of(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    fn no_cwd() -> io::Result<PathBuf> {
        Err(io::Error::other("cwd must not be needed"))
    }

    #[test]
    fn flag_beats_env_beats_home() {
        let flag = Path::new("/flag");
        let env = std::ffi::OsStr::new("/env");
        let home = Path::new("/home/ana");
        assert_eq!(
            resolve(Some(flag), Some(env), Some(home), no_cwd).unwrap(),
            PathBuf::from("/flag")
        );
        assert_eq!(
            resolve(None, Some(env), Some(home), no_cwd).unwrap(),
            PathBuf::from("/env")
        );
        assert_eq!(
            resolve(None, None, Some(home), no_cwd).unwrap(),
            PathBuf::from("/home/ana/.appduct")
        );
        // Empty values count as absent.
        assert_eq!(
            resolve(
                Some(Path::new("")),
                Some(std::ffi::OsStr::new("")),
                Some(home),
                no_cwd
            )
            .unwrap(),
            PathBuf::from("/home/ana/.appduct")
        );
    }

    #[test]
    fn relative_paths_are_made_absolute_against_cwd() {
        let got = resolve(Some(Path::new("rel/state")), None, None, || {
            Ok(PathBuf::from("/work/here"))
        })
        .unwrap();
        assert_eq!(got, PathBuf::from("/work/here/rel/state"));
        let got = resolve(None, Some(std::ffi::OsStr::new("st")), None, || {
            Ok(PathBuf::from("/cwd"))
        })
        .unwrap();
        assert_eq!(got, PathBuf::from("/cwd/st"));
    }

    #[test]
    fn missing_home_names_the_variable() {
        let err = resolve(None, None, None, no_cwd).unwrap_err();
        assert!(matches!(err, StateDirError::NoHome));
        assert!(err.to_string().contains("APPDUCT_STATE_DIR"), "{err}");
    }

    #[test]
    fn path_table_names() {
        let dir = StateDir::new("/s").unwrap();
        assert_eq!(dir.config_path(), Path::new("/s/config.json"));
        assert_eq!(dir.key_path(), Path::new("/s/key.pem"));
        assert_eq!(dir.socket_path(), Path::new("/s/daemon.sock"));
        assert_eq!(dir.pid_path(), Path::new("/s/daemon.pid"));
        assert_eq!(dir.spawn_lock_path(), Path::new("/s/daemon.spawn.lock"));
        assert_eq!(dir.daemon_log_path(), Path::new("/s/daemon.log"));
        assert_eq!(dir.daemon_log_rotated_path(), Path::new("/s/daemon.log.1"));
        assert_eq!(dir.events_log_path(), Path::new("/s/events.log"));
        assert_eq!(dir.events_log_rotated_path(), Path::new("/s/events.log.1"));
        assert_eq!(dir.audit_dir(), Path::new("/s/audit"));
    }

    #[test]
    fn new_makes_relative_roots_absolute() {
        let dir = StateDir::new("x/y").unwrap();
        assert!(dir.path().is_absolute());
        assert!(dir.path().ends_with("x/y"));
    }

    #[test]
    fn socket_path_length_limit_is_100_bytes() {
        // "/" + 88 chars + "/daemon.sock" (12) = 101 bytes.
        let long = format!("/{}", "a".repeat(88));
        let err = StateDir::new(&long)
            .unwrap()
            .checked_socket_path()
            .unwrap_err();
        match &err {
            StateDirError::SocketPathTooLong { path, len } => {
                assert_eq!(*len, 101);
                assert_eq!(path, &PathBuf::from(format!("{long}/daemon.sock")));
            }
            other => panic!("unexpected {other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.contains(&long) && text.contains("APPDUCT_STATE_DIR"),
            "{text}"
        );

        let ok = format!("/{}", "a".repeat(87));
        let path = StateDir::new(&ok).unwrap().checked_socket_path().unwrap();
        assert_eq!(path.as_os_str().len(), 100);
    }

    #[test]
    fn prepare_creates_missing_directory_with_0700() {
        let tmp = temp();
        let dir = StateDir::new(tmp.path().join("a/b")).unwrap();
        let report = dir.prepare().unwrap();
        assert_eq!(
            report,
            Prepared {
                created: true,
                tightened_from: None
            }
        );
        assert_eq!(mode_of(dir.path()), 0o700);
        // Idempotent.
        let again = dir.prepare().unwrap();
        assert!(!again.created);
        assert_eq!(again.tightened_from, None);
    }

    #[test]
    fn prepare_tightens_loose_modes() {
        let tmp = temp();
        let root = tmp.path().join("s");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, Permissions::from_mode(0o755)).unwrap();
        let report = StateDir::new(&root).unwrap().prepare().unwrap();
        assert_eq!(report.tightened_from, Some(0o755));
        assert_eq!(mode_of(&root), 0o700);
    }

    #[test]
    fn prepare_refuses_a_directory_owned_by_another_uid() {
        let tmp = temp();
        let root = tmp.path().join("s");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, Permissions::from_mode(0o755)).unwrap();
        let me = crate::platform::euid();
        let err = prepare_dir(&root, me.wrapping_add(1)).unwrap_err();
        match &err {
            StateDirError::ForeignOwner { path, owner, .. } => {
                assert_eq!(path, &root);
                assert_eq!(*owner, me);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains(&*root.to_string_lossy()));
        // Refused, so not tightened either.
        assert_eq!(mode_of(&root), 0o755);
    }

    fn is_root() -> bool {
        rustix::process::geteuid().is_root()
    }

    #[test]
    fn prepare_refuses_entries_another_user_planted_while_the_directory_was_writable() {
        // chown needs root; elsewhere the branch is covered by the uid comparison alone.
        if !is_root() {
            eprintln!("skipping: planting a file owned by another uid needs root");
            return;
        }
        let tmp = temp();
        let root = tmp.path().join("s");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, Permissions::from_mode(0o777)).unwrap();
        let planted = root.join(CONFIG_FILE);
        std::fs::write(&planted, br#"{"webOrigins": ["http://evil.example"]}"#).unwrap();
        std::os::unix::fs::lchown(&planted, Some(4242), Some(4242)).unwrap();

        let err = StateDir::new(&root).unwrap().prepare().unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&*planted.to_string_lossy()), "{text}");
        assert!(text.contains("4242"), "{text}");
        // The door is closed even though the start is refused.
        assert_eq!(mode_of(&root), 0o700);

        // Without group/other write bits nobody else could have created it: accepted.
        std::fs::set_permissions(&root, Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            StateDir::new(&root)
                .unwrap()
                .prepare()
                .unwrap()
                .tightened_from,
            Some(0o755)
        );
    }

    #[test]
    fn prepare_refuses_a_file() {
        let tmp = temp();
        let root = tmp.path().join("f");
        std::fs::write(&root, b"x").unwrap();
        let err = StateDir::new(&root).unwrap().prepare().unwrap_err();
        assert!(
            matches!(err, StateDirError::NotADirectory { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn audit_dir_is_0700_even_if_precreated_loosely() {
        let tmp = temp();
        let dir = StateDir::new(tmp.path()).unwrap();
        std::fs::create_dir(dir.audit_dir()).unwrap();
        std::fs::set_permissions(dir.audit_dir(), Permissions::from_mode(0o777)).unwrap();
        let audit = dir.ensure_audit_dir().unwrap();
        assert_eq!(mode_of(&audit), 0o700);

        let tmp2 = temp();
        let fresh = StateDir::new(tmp2.path()).unwrap();
        assert_eq!(mode_of(&fresh.ensure_audit_dir().unwrap()), 0o700);
    }

    #[test]
    fn audit_dir_symlink_is_refused() {
        let tmp = temp();
        let dir = StateDir::new(tmp.path()).unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        symlink(&elsewhere, dir.audit_dir()).unwrap();
        assert!(matches!(
            dir.ensure_audit_dir(),
            Err(StateDirError::NotADirectory { .. })
        ));
    }

    #[test]
    fn private_files_are_0600_and_symlinks_are_not_followed() {
        let tmp = temp();
        let path = tmp.path().join("events.log");
        let mut f = open_append(&path).unwrap();
        std::io::Write::write_all(&mut f, b"line\n").unwrap();
        assert_eq!(mode_of(&path), 0o600);

        let target = tmp.path().join("target");
        let link = tmp.path().join("daemon.log");
        symlink(&target, &link).unwrap();
        let err = open_append(&link).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(!target.exists(), "the symlink target must not be created");

        assert!(
            create_new(&path).is_err(),
            "exclusive create must fail on an existing file"
        );
        assert!(open_read(&link).is_err());
    }

    #[test]
    fn stale_socket_is_removed_only_when_it_is_a_socket() {
        let tmp = temp();
        let dir = StateDir::new(tmp.path()).unwrap();
        let sock = dir.socket_path();

        assert!(!dir.remove_stale_socket().unwrap(), "absent path");

        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        drop(listener);
        assert!(sock.exists());
        assert!(dir.remove_stale_socket().unwrap());
        assert!(std::fs::symlink_metadata(&sock).is_err());

        std::fs::write(&sock, b"not a socket").unwrap();
        let err = dir.remove_stale_socket().unwrap_err();
        assert!(matches!(
            err,
            StateDirError::NotASocket {
                kind: "a regular file",
                ..
            }
        ));
        assert!(err.to_string().contains(&*sock.to_string_lossy()), "{err}");
        assert!(sock.exists(), "a regular file is never unlinked");
        std::fs::remove_file(&sock).unwrap();

        std::fs::create_dir(&sock).unwrap();
        assert!(matches!(
            dir.remove_stale_socket(),
            Err(StateDirError::NotASocket {
                kind: "a directory",
                ..
            })
        ));
        std::fs::remove_dir(&sock).unwrap();

        symlink("/nonexistent", &sock).unwrap();
        assert!(matches!(
            dir.remove_stale_socket(),
            Err(StateDirError::NotASocket {
                kind: "a symbolic link",
                ..
            })
        ));
        assert!(std::fs::symlink_metadata(&sock).is_ok());
    }

    #[test]
    fn daemon_log_rotates_only_above_the_threshold() {
        let tmp = temp();
        let dir = StateDir::new(tmp.path()).unwrap();
        assert!(!dir.rotate_daemon_log(10).unwrap(), "absent log");

        std::fs::write(dir.daemon_log_path(), b"0123456789").unwrap();
        assert!(!dir.rotate_daemon_log(10).unwrap(), "at the threshold");

        std::fs::write(dir.daemon_log_rotated_path(), b"old").unwrap();
        std::fs::set_permissions(dir.daemon_log_rotated_path(), Permissions::from_mode(0o644))
            .unwrap();
        std::fs::write(dir.daemon_log_path(), b"0123456789A").unwrap();
        assert!(dir.rotate_daemon_log(10).unwrap());
        assert!(!dir.daemon_log_path().exists());
        assert_eq!(
            std::fs::read(dir.daemon_log_rotated_path()).unwrap(),
            b"0123456789A"
        );
        assert_eq!(mode_of(&dir.daemon_log_rotated_path()), 0o600);
    }
}
