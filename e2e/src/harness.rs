//! The binary harness (01 §3.5, §10.4): finds the built `appduct` (from `APPDUCT_BIN`, else
//! `target/<profile>/appduct`, two directories above the test executable) and runs it against
//! a private state directory. A [`Sandbox`] stops every daemon of its state dir when dropped:
//! `daemon stop`, then SIGKILL to the pid left in the pidfile.

use std::ffi::OsStr;
use std::fmt;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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
/// a Unix socket path.
#[derive(Debug)]
pub struct Sandbox {
    bin: PathBuf,
    dir: TempDir,
}

impl Sandbox {
    pub fn new() -> Result<Self, HarnessError> {
        Self::with_config(r#"{"wssPort": 0}"#)
    }

    /// A sandbox whose `config.json` is `config`.
    pub fn with_config(config: &str) -> Result<Self, HarnessError> {
        let bin = appduct_bin()?;
        let dir = tempfile::Builder::new()
            .prefix("ade")
            .tempdir_in("/tmp")
            .map_err(io)?;
        let sb = Self { bin, dir };
        for d in [sb.state_dir(), sb.home(), sb.cwd()] {
            std::fs::create_dir_all(d).map_err(io)?;
        }
        std::fs::write(sb.state_dir().join("config.json"), config).map_err(io)?;
        Ok(sb)
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("s")
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("h")
    }

    pub fn cwd(&self) -> PathBuf {
        self.dir.path().join("w")
    }

    pub fn pidfile(&self) -> PathBuf {
        self.state_dir().join("daemon.pid")
    }

    /// `appduct --state-dir <s> <args…>`, environment scrubbed of `APPDUCT_*`, stdin null.
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut cmd = Command::new(&self.bin);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("APPDUCT_") || key == "NO_COLOR" {
                cmd.env_remove(&key);
            }
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
    /// drained in the background.
    pub fn spawn_ready<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<(Child, Value), HarnessError> {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io)?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| HarnessError::Io("no stdout".into()))?;
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        reader.read_line(&mut line).map_err(io)?;
        std::thread::spawn(move || {
            let mut sink = String::new();
            while reader.read_line(&mut sink).is_ok_and(|n| n > 0) {
                sink.clear();
            }
        });
        let doc = serde_json::from_str(line.trim_end())
            .map_err(|e| HarnessError::Output(format!("{e}: {line:?}")))?;
        Ok((child, doc))
    }

    /// The pid in the pidfile, if any.
    pub fn daemon_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.pidfile()).ok()?;
        text.lines().next()?.trim().parse().ok()
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
        let _ = self.command(&["daemon", "stop"]).output();
        if let Some(pid) = self.daemon_pid() {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(pid.to_string())
                .output();
        }
    }
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
