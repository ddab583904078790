//! The binary harness (ARCHITECTURE.md#crates, ARCHITECTURE.md#test-layers): finds the built `appduct` (from `APPDUCT_BIN`, else
//! `target/<profile>/appduct`, two directories above the test executable) and runs it against
//! a private state directory. A [`Sandbox`] stops every daemon of its state dir when dropped:
//! `daemon stop`, then SIGKILL to the pid left in the pidfile.

use std::ffi::OsStr;
use std::fmt;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

/// The variable naming the binary under test.
pub const BIN_ENV: &str = "APPDUCT_BIN";

/// Why the harness cannot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HarnessError {
    /// The binary is not where it was looked for.
    MissingBinary(PathBuf),
    /// Creating the sandbox or running a command failed.
    Io(String),
    /// The binary printed something that is not the expected JSON.
    Output(String),
    /// A Node part `scripts/test` prepares is missing (the message says what to run).
    Unprepared(String),
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingBinary(path) => write!(
                f,
                "the appduct binary is missing at {}: run `cargo build -p appduct` first, or set \
                 {BIN_ENV}",
                path.display()
            ),
            Self::Io(m) => write!(f, "harness I/O failed: {m}"),
            Self::Output(m) => write!(f, "unexpected output: {m}"),
            Self::Unprepared(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for HarnessError {}

fn io(e: impl fmt::Display) -> HarnessError {
    HarnessError::Io(e.to_string())
}

/// The binary from `bin_env` when given, else `appduct` two directories above `test_exe`
/// (`target/<profile>/deps/<test>` → `target/<profile>/appduct`).
pub fn locate_binary(bin_env: Option<&OsStr>, test_exe: &Path) -> Result<PathBuf, HarnessError> {
    let path = match bin_env.filter(|v| !v.is_empty()) {
        Some(v) => PathBuf::from(v),
        None => test_exe
            .parent()
            .and_then(Path::parent)
            .map(|dir| dir.join("appduct"))
            .unwrap_or_else(|| PathBuf::from("appduct")),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::MissingBinary(path))
    }
}

/// [`locate_binary`] for this process.
pub fn appduct_bin() -> Result<PathBuf, HarnessError> {
    let exe = std::env::current_exe().map_err(io)?;
    locate_binary(std::env::var_os(BIN_ENV).as_deref(), &exe)
}

/// What one finished command produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// stdout as the single JSON document of a `--json` run.
    pub fn json(&self) -> Result<Value, HarnessError> {
        serde_json::from_str(self.stdout.trim_end())
            .map_err(|e| HarnessError::Output(format!("{e}: {:?}", self.stdout)))
    }
}

/// A private state dir (`wssPort: 0`), home and working directory under /tmp, short enough for
/// a Unix socket path. The one sandbox of the suite: the cross-process tests here and the CLI's
/// tests of its built binary (`cli/tests`) both run the binary through it.
#[derive(Debug)]
pub struct Sandbox {
    bin: PathBuf,
    dir: TempDir,
    pids: Mutex<Vec<u32>>,
    /// Extra environment of every command.
    env: Vec<(String, String)>,
    /// A directory put first on PATH (fake `adb` / `xcrun`).
    path_prefix: Option<PathBuf>,
}

impl Sandbox {
    pub fn new() -> Result<Self, HarnessError> {
        Self::with_config(r#"{"wssPort": 0}"#)
    }

    /// A sandbox whose `config.json` is `config`.
    pub fn with_config(config: &str) -> Result<Self, HarnessError> {
        Self::with_binary(appduct_bin()?, config)
    }

    /// A sandbox running `bin` (a crate's own `CARGO_BIN_EXE_appduct`) with `config`.
    pub fn with_binary(bin: impl Into<PathBuf>, config: &str) -> Result<Self, HarnessError> {
        let sb = Self::without_state_dir(bin)?;
        std::fs::create_dir_all(sb.state_dir()).map_err(io)?;
        std::fs::write(sb.state_dir().join("config.json"), config).map_err(io)?;
        Ok(sb)
    }

    /// A sandbox with a home and working directory but no state dir yet, for tests proving
    /// that a command never created one.
    pub fn without_state_dir(bin: impl Into<PathBuf>) -> Result<Self, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("ade")
            .tempdir_in("/tmp")
            .map_err(io)?;
        let sb = Self {
            bin: bin.into(),
            dir,
            pids: Mutex::new(Vec::new()),
            env: Vec::new(),
            path_prefix: None,
        };
        for d in [sb.home(), sb.cwd()] {
            std::fs::create_dir_all(d).map_err(io)?;
        }
        Ok(sb)
    }

    /// The binary under test.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// The temporary directory holding the state dir, home and working directory (room for a
    /// test's own files: fake tools, logs, keys).
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("s")
    }

    /// The daemon's control socket.
    pub fn socket(&self) -> PathBuf {
        self.state_dir().join("daemon.sock")
    }

    /// Every audit record written so far, in day-file and line order.
    pub fn audit_records(&self) -> Vec<Value> {
        audit_records_in(&self.state_dir())
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("h")
    }

    /// The working directory of every command: empty, so no project file is probed.
    pub fn cwd(&self) -> PathBuf {
        self.dir.path().join("w")
    }

    pub fn pidfile(&self) -> PathBuf {
        self.state_dir().join("daemon.pid")
    }

    /// Adds `key=value` to the environment of every later command.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.push((key.to_owned(), value.to_owned()));
    }

    /// Puts `dir` first on the PATH of every later command (fake `adb` / `xcrun`).
    pub fn set_path_prefix(&mut self, dir: PathBuf) {
        self.path_prefix = Some(dir);
    }

    /// `appduct --state-dir <s> <args…>`, environment scrubbed of `APPDUCT_*`, the colour
    /// variables (`NO_COLOR`, `CLICOLOR_FORCE`, `CLICOLOR`) and `ANDROID_SERIAL` (plus what
    /// [`Sandbox::set_env`] added), stdin null.
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut cmd = Command::new(&self.bin);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("APPDUCT_")
                || key == "NO_COLOR"
                || key == "CLICOLOR_FORCE"
                || key == "CLICOLOR"
                || key == "ANDROID_SERIAL"
            {
                cmd.env_remove(&key);
            }
        }
        if let Some(prefix) = &self.path_prefix {
            let path = std::env::var("PATH").unwrap_or_default();
            cmd.env("PATH", format!("{}:{path}", prefix.display()));
        }
        for (key, value) in &self.env {
            cmd.env(key, value);
        }
        cmd.env("HOME", self.home())
            .current_dir(self.cwd())
            .arg("--state-dir")
            .arg(self.state_dir())
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs a command to completion.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Ran, HarnessError> {
        let out = self.command(args).output().map_err(io)?;
        Ok(Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Runs a command to completion: (exit code, stdout, stderr); panics if it cannot run or
    /// prints anything but UTF-8.
    #[track_caller]
    pub fn output(&self, args: &[&str]) -> (i32, String, String) {
        let out = self
            .command(args)
            .output()
            .unwrap_or_else(|e| panic!("{} did not run: {e}", self.bin.display()));
        let text = |bytes: Vec<u8>| {
            String::from_utf8(bytes).unwrap_or_else(|e| panic!("output is not UTF-8: {e}"))
        };
        (
            out.status.code().unwrap_or(-1),
            text(out.stdout),
            text(out.stderr),
        )
    }

    /// Runs `--json <args>` and parses stdout, which must be exactly one JSON line; panics
    /// otherwise.
    #[track_caller]
    pub fn json(&self, args: &[&str]) -> (i32, Value) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let (code, stdout, stderr) = self.output(&all);
        let doc = serde_json::from_str(stdout.trim_end()).unwrap_or_else(|e| {
            panic!("{args:?}: stdout is not one JSON document ({e}): {stdout:?} stderr: {stderr}")
        });
        assert_eq!(
            stdout.matches('\n').count(),
            1,
            "{args:?}: one line expected: {stdout:?}"
        );
        (code, doc)
    }

    /// Runs `--json <args>` and returns `data` of a success (exit 0, `ok: true`); panics
    /// otherwise.
    #[track_caller]
    pub fn ok(&self, args: &[&str]) -> Value {
        let (code, doc) = self.json(args);
        assert_eq!(code, 0, "{args:?}: {doc}");
        assert_eq!(doc["ok"], true, "{args:?}: {doc}");
        doc["data"].clone()
    }

    /// Runs `--json <args>` and returns `data` of a success envelope.
    pub fn data<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Value, HarnessError> {
        let mut all: Vec<&OsStr> = vec![OsStr::new("--json")];
        all.extend(args.iter().map(AsRef::as_ref));
        let ran = self.run(&all)?;
        let doc = ran.json()?;
        if ran.code == 0 && doc["ok"] == true {
            Ok(doc["data"].clone())
        } else {
            Err(HarnessError::Output(format!(
                "exit {}: {doc} {}",
                ran.code, ran.stderr
            )))
        }
    }

    /// Starts a long-running command and returns it with its first stdout line parsed as JSON
    /// (the ready line of `daemon run --json` or `playground --json`). The rest of stdout is
    /// collected in the background ([`Proc::stdout`]).
    pub fn spawn_ready<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<(Proc, Value), HarnessError> {
        self.spawn_ready_with(self.command(args))
    }

    /// [`Sandbox::spawn_ready`] for a prepared command (extra environment, for example).
    pub fn spawn_ready_with(&self, cmd: Command) -> Result<(Proc, Value), HarnessError> {
        let proc = Proc::spawn(cmd)?;
        let line = proc
            .next_stdout_line(Duration::from_secs(15))
            .ok_or_else(|| {
                HarnessError::Output(format!("no ready line; stderr: {}", proc.stderr()))
            })?;
        let doc = serde_json::from_str(line.trim_end())
            .map_err(|e| HarnessError::Output(format!("{e}: {line:?}")))?;
        Ok((proc, doc))
    }

    /// Starts a command with stdout and stderr collected; the process is killed when the
    /// returned guard drops.
    pub fn spawn<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Proc, HarnessError> {
        Proc::spawn(self.command(args))
    }

    /// Remembers a pid to kill when the sandbox drops (a daemon this test started or saw),
    /// as long as its command line still names this sandbox's state dir.
    pub fn track_pid(&self, pid: u32) {
        if let Ok(mut pids) = self.pids.lock() {
            pids.push(pid);
        }
    }

    /// `daemon status --json` data; the daemon's pid is tracked.
    pub fn status(&self) -> Result<Value, HarnessError> {
        let data = self.data(&["daemon", "status"])?;
        if let Some(pid) = data["daemon"]["pid"].as_u64() {
            self.track_pid(pid as u32);
        }
        Ok(data)
    }

    /// Pids of live (non-zombie) `appduct daemon run` processes serving this state dir.
    pub fn daemon_processes(&self) -> Vec<u32> {
        let dir = self.state_dir().display().to_string();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                let args = cmdline(*pid);
                args.iter().any(|a| a == "run")
                    && args.iter().any(|a| a == "daemon")
                    && args.contains(&dir)
                    && is_alive(*pid)
            })
            .collect()
    }

    /// `sessions ls --json` data (the `SessionSummary` array).
    pub fn sessions(&self) -> Result<Vec<Value>, HarnessError> {
        match self.data(&["sessions", "ls"])? {
            Value::Array(list) => Ok(list),
            other => Err(HarnessError::Output(format!("not an array: {other}"))),
        }
    }

    /// Polls `sessions ls` (at most `limit`) until `check` holds for the list.
    pub fn wait_sessions(&self, limit: Duration, check: impl Fn(&[Value]) -> bool) -> bool {
        Self::wait_until(limit, || self.sessions().is_ok_and(|list| check(&list)))
    }

    /// The pid in the pidfile, if any.
    pub fn daemon_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.pidfile()).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// Polls every 50 ms, at most 10 s, until `check` holds; panics naming `what` otherwise.
    #[track_caller]
    pub fn wait_for(&self, what: &str, check: impl FnMut() -> bool) {
        assert!(
            Self::wait_until(Duration::from_secs(10), check),
            "timed out waiting for {what}"
        );
    }

    /// Polls every 50 ms, at most `limit`, until `check` holds.
    pub fn wait_until(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if check() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if !self.state_dir().exists() {
            // Nothing ever ran against it (see `without_state_dir`).
            return;
        }
        let _ = self.command(&["daemon", "stop"]).output();
        let dir = self.state_dir().display().to_string();
        let mut pids = self.pids.lock().map(|p| p.clone()).unwrap_or_default();
        pids.extend(self.daemon_pid());
        pids.extend(self.daemon_processes());
        for pid in pids {
            // A recorded pid may have been reused by now: only kill what still serves this dir.
            if cmdline(pid).contains(&dir) {
                signal(pid, "KILL");
            }
        }
    }
}

/// Whether anything (a file, a socket, a dangling symlink) is at `path`.
pub fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// The arguments of a process, empty when it is gone.
pub fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| {
            bytes
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `pid` exists and is not a zombie (an exited daemon whose parent, possibly a
/// container's init, has not reaped it yet counts as gone).
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => !status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z')),
        Err(_) => false,
    }
}

/// Whether `pid` is stopped (job control), from `/proc/<pid>/stat`.
pub fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The state follows the parenthesised command name.
            let after = stat.get(stat.rfind(')')? + 1..)?;
            after
                .split_whitespace()
                .next()
                .map(|s| s == "T" || s == "t")
        })
        .unwrap_or(false)
}

/// Sends a signal by name (`INT`, `TERM`, `KILL`, `STOP`, `CONT`, `HUP`) through kill(1): the
/// suite has no unsafe code.
pub fn signal(pid: u32, name: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A child process of a test, killed and reaped when dropped. stdout is split into lines on a
/// channel (and kept), stderr is kept, both by background threads.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    lines: Mutex<mpsc::Receiver<String>>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Proc {
    /// Spawns `cmd` with piped stdout and stderr (stdin as the command set it).
    pub fn spawn(mut cmd: Command) -> Result<Self, HarnessError> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io)?;
        let out = child
            .stdout
            .take()
            .ok_or_else(|| HarnessError::Io("no stdout".into()))?;
        let err = child
            .stderr
            .take()
            .ok_or_else(|| HarnessError::Io("no stderr".into()))?;
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let keep = stdout.clone();
        let out_reader = std::thread::spawn(move || {
            let mut reader = BufReader::new(out);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if let Ok(mut all) = keep.lock() {
                    all.push_str(&line);
                }
                let _ = tx.send(line.trim_end_matches('\n').to_owned());
                line.clear();
            }
        });
        let keep = stderr.clone();
        let err_reader = std::thread::spawn(move || {
            let mut reader = BufReader::new(err);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if let Ok(mut all) = keep.lock() {
                    all.push_str(&line);
                }
                line.clear();
            }
        });
        Ok(Self {
            child,
            lines: Mutex::new(rx),
            stdout,
            stderr,
            readers: vec![out_reader, err_reader],
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The next stdout line, waiting at most `limit`.
    pub fn next_stdout_line(&self, limit: Duration) -> Option<String> {
        self.lines.lock().ok()?.recv_timeout(limit).ok()
    }

    /// Everything printed on stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Everything printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Sends a signal by name (`INT`, `TERM`, `KILL`).
    pub fn signal(&self, name: &str) -> bool {
        signal(self.pid(), name)
    }

    /// Polls for the exit status for at most `limit`; `None` if still running. The status is
    /// `-1` for a death by signal. Once it has exited, what it wrote is collected too (the
    /// readers get a bounded moment to reach the end of both pipes, which a grandchild that
    /// inherited them could hold open).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let drained = Instant::now() + Duration::from_secs(2);
                while !self
                    .readers
                    .iter()
                    .all(std::thread::JoinHandle::is_finished)
                    && Instant::now() < drained
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                return Some(status.code().unwrap_or(-1));
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the exit (at most `limit`) and for both output streams to end.
    pub fn finish(mut self, limit: Duration) -> Result<Ran, HarnessError> {
        let code = self.wait_exit(limit).ok_or_else(|| {
            HarnessError::Output(format!(
                "still running after {limit:?}; stderr: {}",
                self.stderr()
            ))
        })?;
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        Ok(Ran {
            code,
            stdout: self.stdout(),
            stderr: self.stderr(),
        })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Every audit record under `state_dir/audit` (the `.jsonl` day files), in day-file and line
/// order. Lines that do not parse are skipped: audit files are appended while tests read them.
pub fn audit_records_in(state_dir: &Path) -> Vec<Value> {
    let mut files: Vec<_> = std::fs::read_dir(state_dir.join("audit"))
        .map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect::<Vec<Value>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_wins_and_a_missing_binary_names_the_build_command() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let bin = tmp.path().join("appduct");
        std::fs::write(&bin, "").unwrap_or_else(|e| panic!("{e}"));
        let found = locate_binary(Some(bin.as_os_str()), Path::new("/nowhere/deps/t"));
        assert_eq!(found, Ok(bin.clone()));

        let exe = tmp.path().join("deps").join("e2e-test");
        assert_eq!(locate_binary(None, &exe), Ok(bin));

        let missing = locate_binary(None, Path::new("/nowhere/deps/t"));
        let err = missing.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("cargo build -p appduct"), "{err}");
        assert!(err.contains("/nowhere/appduct"), "{err}");
    }
}
