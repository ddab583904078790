//! The spawner seam (§S3.4 step 6): what connect-or-spawn starts for `daemon run`, the
//! detached re-exec that does it, and a recording double for tests.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::state_dir;

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the guarded values
/// here are plain tables that stay consistent across a panic).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Variable a spawned daemon must never inherit (§S1.3).
pub const VERSION_OVERRIDE_ENV: &str = "APPDUCT_DAEMON_VERSION_OVERRIDE";

/// What to start for `daemon run` (§S3.4 step 6). Build it with [`SpawnRequest::daemon_run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnRequest {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Absolute state directory: the child's working directory and `APPDUCT_STATE_DIR`.
    pub state_dir: PathBuf,
    /// The child's complete environment.
    pub env: Vec<(OsString, OsString)>,
}

impl SpawnRequest {
    /// `current_exe() daemon run --state-dir <dir>` with this process's environment, adjusted.
    pub fn daemon_run(state_dir: &Path) -> io::Result<Self> {
        Ok(SpawnRequest::daemon_run_with(
            std::env::current_exe()?,
            state_dir,
            std::env::vars_os(),
        ))
    }

    /// Like [`SpawnRequest::daemon_run`] with an explicit program and base environment: the
    /// environment loses `APPDUCT_DAEMON_VERSION_OVERRIDE` and gains
    /// `APPDUCT_STATE_DIR=<state_dir>`.
    pub fn daemon_run_with(
        program: PathBuf,
        state_dir: &Path,
        base_env: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Self {
        let state_env = OsStr::new(state_dir::STATE_DIR_ENV);
        let mut env: Vec<(OsString, OsString)> = base_env
            .into_iter()
            .filter(|(k, _)| k != OsStr::new(VERSION_OVERRIDE_ENV) && k != state_env)
            .collect();
        env.push((state_env.to_owned(), state_dir.as_os_str().to_owned()));
        SpawnRequest {
            program,
            args: vec![
                "daemon".into(),
                "run".into(),
                "--state-dir".into(),
                state_dir.as_os_str().to_owned(),
            ],
            state_dir: state_dir.to_path_buf(),
            env,
        }
    }

    /// Where the child's stdout and stderr go.
    pub fn log_path(&self) -> PathBuf {
        self.state_dir.join(state_dir::DAEMON_LOG_FILE)
    }
}

/// Shared exit slot between a spawned child and whoever reaps it.
#[derive(Debug, Default)]
struct ExitSlot {
    status: Mutex<Option<ExitStatus>>,
    changed: Condvar,
}

/// A spawned daemon process. Someone else (a background thread, or a test) reaps it; this
/// handle only observes the outcome.
#[derive(Debug, Clone)]
pub struct SpawnedChild {
    pid: u32,
    slot: Arc<ExitSlot>,
}

/// Reports the exit of a [`SpawnedChild`] (used by the reaper thread and by test doubles).
#[derive(Debug, Clone)]
pub struct ExitReporter {
    slot: Arc<ExitSlot>,
}

impl ExitReporter {
    pub fn report(&self, status: ExitStatus) {
        *lock(&self.slot.status) = Some(status);
        self.slot.changed.notify_all();
    }
}

impl SpawnedChild {
    /// A handle for `pid` whose exit is reported through the returned [`ExitReporter`].
    pub fn new(pid: u32) -> (SpawnedChild, ExitReporter) {
        let slot = Arc::new(ExitSlot::default());
        (
            SpawnedChild {
                pid,
                slot: slot.clone(),
            },
            ExitReporter { slot },
        )
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The exit status once the child has exited; never blocks.
    pub fn try_wait(&self) -> Option<ExitStatus> {
        *lock(&self.slot.status)
    }

    /// Blocks up to `timeout` for the exit status.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<ExitStatus> {
        let guard = lock(&self.slot.status);
        let (guard, _) = self
            .slot
            .changed
            .wait_timeout_while(guard, timeout, |status| status.is_none())
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *guard
    }
}

/// Starts a detached daemon (§S3.4 step 6).
pub trait Spawner: Send + Sync + fmt::Debug {
    fn spawn_daemon(&self, req: SpawnRequest) -> io::Result<SpawnedChild>;
}

/// Production spawner: runs the request with stdin from `/dev/null`, stdout and stderr appended
/// to `daemon.log` (`O_APPEND`, 0600, no symlink following), the state directory as working
/// directory, exactly the request's environment, in a new process group, and reaps the child on
/// a background thread so it never lingers as a zombie.
///
/// A new process group (not `setsid`) keeps terminal-generated signals (`SIGINT`, `SIGQUIT`,
/// `SIGTSTP`, and `SIGHUP` sent to the foreground group) away from the daemon: `setsid` on
/// `Command` is not stable Rust and calling it from `pre_exec` needs `unsafe`, which this crate
/// forbids. The daemon's stdio never refers to the terminal, so the controlling terminal it
/// still nominally shares is never read or written.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReexecSpawner;

impl Spawner for ReexecSpawner {
    fn spawn_daemon(&self, req: SpawnRequest) -> io::Result<SpawnedChild> {
        let log_path = req.log_path();
        let log = state_dir::open_append(&log_path)?;
        let log_err = log.try_clone()?;
        let mut cmd = std::process::Command::new(&req.program);
        cmd.args(&req.args)
            .env_clear()
            .envs(req.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&req.state_dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        crate::platform::detach(&mut cmd);
        let mut child = cmd.spawn()?;
        let (handle, reporter) = SpawnedChild::new(child.id());
        std::thread::Builder::new()
            .name("appduct-daemon-reaper".into())
            .spawn(move || {
                if let Ok(status) = child.wait() {
                    reporter.report(status);
                }
            })?;
        Ok(handle)
    }
}

/// How a [`RecordingSpawner`] answers.
type SpawnBehaviour = dyn Fn(&SpawnRequest) -> io::Result<SpawnedChild> + Send + Sync;

/// A test double that records every request and answers through a closure, which can start an
/// in-process daemon, return a child that has already exited, or fail.
pub struct RecordingSpawner {
    requests: Mutex<Vec<SpawnRequest>>,
    behaviour: Box<SpawnBehaviour>,
}

impl fmt::Debug for RecordingSpawner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingSpawner")
            .field("requests", &*lock(&self.requests))
            .finish_non_exhaustive()
    }
}

impl RecordingSpawner {
    pub fn new(
        behaviour: impl Fn(&SpawnRequest) -> io::Result<SpawnedChild> + Send + Sync + 'static,
    ) -> Self {
        RecordingSpawner {
            requests: Mutex::new(Vec::new()),
            behaviour: Box::new(behaviour),
        }
    }

    /// Every spawn yields a child that has already exited with `code` (an early exit).
    pub fn exiting(code: i32) -> Self {
        RecordingSpawner::new(move |_| {
            let (child, reporter) = SpawnedChild::new(0);
            reporter.report(crate::platform::exit_status(code));
            Ok(child)
        })
    }

    pub fn requests(&self) -> Vec<SpawnRequest> {
        lock(&self.requests).clone()
    }
}

impl Spawner for RecordingSpawner {
    fn spawn_daemon(&self, req: SpawnRequest) -> io::Result<SpawnedChild> {
        let answer = (self.behaviour)(&req);
        lock(&self.requests).push(req);
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("ad")
            .tempdir_in("/tmp")
            .unwrap()
    }

    #[test]
    fn spawn_request_scrubs_the_version_override() {
        let base = vec![
            (OsString::from("PATH"), OsString::from("/bin")),
            (
                OsString::from(VERSION_OVERRIDE_ENV),
                OsString::from("9.9.9"),
            ),
            (OsString::from("APPDUCT_STATE_DIR"), OsString::from("/old")),
        ];
        let req =
            SpawnRequest::daemon_run_with(PathBuf::from("/bin/appduct"), Path::new("/s"), base);
        assert_eq!(req.program, Path::new("/bin/appduct"));
        assert_eq!(req.args, ["daemon", "run", "--state-dir", "/s"]);
        assert_eq!(
            req.env,
            [
                (OsString::from("PATH"), OsString::from("/bin")),
                (OsString::from("APPDUCT_STATE_DIR"), OsString::from("/s")),
            ]
        );
        assert_eq!(req.log_path(), Path::new("/s/daemon.log"));
        assert!(SpawnRequest::daemon_run(Path::new("/s")).is_ok());
    }

    #[test]
    fn reexec_spawner_detaches_logs_and_reaps() {
        let tmp = temp();
        let state = tmp.path().to_path_buf();
        std::fs::write(state.join("daemon.log"), b"earlier\n").unwrap();
        std::fs::set_permissions(
            state.join("daemon.log"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let script = r#"echo "cwd=$(pwd)"; echo "env=$APPDUCT_STATE_DIR ${APPDUCT_DAEMON_VERSION_OVERRIDE-unset}"; read -r line || echo "stdin=eof"; set -- $(cat /proc/$$/stat 2>/dev/null | cut -d' ' -f1,5); echo "pgrp=$1:$2"; echo err >&2; exit 7"#;
        let mut req = SpawnRequest::daemon_run_with(
            PathBuf::from("/bin/sh"),
            &state,
            vec![
                (OsString::from("PATH"), OsString::from("/usr/bin:/bin")),
                (
                    OsString::from(VERSION_OVERRIDE_ENV),
                    OsString::from("9.9.9"),
                ),
            ],
        );
        req.args = vec!["-c".into(), script.into()];
        let child = ReexecSpawner.spawn_daemon(req).unwrap();
        let status = child
            .wait_timeout(Duration::from_secs(10))
            .expect("child exits");
        assert_eq!(status.code(), Some(7));
        assert_eq!(child.try_wait().and_then(|s| s.code()), Some(7));

        let log = std::fs::read_to_string(state.join("daemon.log")).unwrap();
        assert!(log.starts_with("earlier\n"), "appended: {log}");
        let real = std::fs::canonicalize(&state).unwrap();
        assert!(log.contains(&format!("cwd={}", real.display())), "{log}");
        assert!(
            log.contains(&format!("env={} unset", state.display())),
            "{log}"
        );
        assert!(log.contains("stdin=eof"), "{log}");
        assert!(log.contains("err\n"), "{log}");
        if cfg!(target_os = "linux") {
            let pid = child.pid();
            assert!(log.contains(&format!("pgrp={pid}:{pid}")), "{log}");
        }
        let mode = std::fs::metadata(state.join("daemon.log"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn reexec_spawner_creates_the_log_0600() {
        let tmp = temp();
        let mut req =
            SpawnRequest::daemon_run_with(PathBuf::from("/bin/sh"), tmp.path(), Vec::new());
        req.args = vec!["-c".into(), "exit 0".into()];
        let child = ReexecSpawner.spawn_daemon(req).unwrap();
        assert!(child.wait_timeout(Duration::from_secs(10)).is_some());
        let mode = std::fs::metadata(tmp.path().join("daemon.log"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn recording_spawner_records_and_can_exit_early() {
        let spawner = RecordingSpawner::exiting(2);
        let req = SpawnRequest::daemon_run_with(PathBuf::from("/x"), Path::new("/s"), Vec::new());
        let child = spawner.spawn_daemon(req.clone()).unwrap();
        assert_eq!(child.try_wait().and_then(|s| s.code()), Some(2));
        assert_eq!(spawner.requests(), [req]);

        let failing = RecordingSpawner::new(|_| Err(io::Error::other("boom")));
        let req = SpawnRequest::daemon_run_with(PathBuf::from("/x"), Path::new("/s"), Vec::new());
        assert!(failing.spawn_daemon(req).is_err());
        assert_eq!(failing.requests().len(), 1);
    }

    #[test]
    fn spawned_child_reports_exit_once_reported() {
        use std::os::unix::process::ExitStatusExt;
        let (child, reporter) = SpawnedChild::new(42);
        assert_eq!(child.pid(), 42);
        assert_eq!(child.try_wait(), None);
        assert_eq!(child.wait_timeout(Duration::ZERO), None);
        reporter.report(ExitStatus::from_raw(0));
        assert!(child.try_wait().unwrap().success());
    }
}
