//! A sandbox for running the built `appduct` binary against real daemons: a short state dir
//! under /tmp with `wssPort: 0`, a private home, no inherited `APPDUCT_*` variables, and a
//! guard that stops every daemon of the state dir when the test ends (`daemon stop`, then
//! SIGKILL to the pid in the pidfile).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod archive;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

pub struct Sandbox {
    pub dir: TempDir,
    /// Extra directories put first on PATH (fake `adb` / `xcrun`).
    pub path_prefix: Option<PathBuf>,
    extra_env: Vec<(String, String)>,
}

impl Sandbox {
    /// A sandbox whose state dir holds `{"wssPort": 0}`.
    pub fn new() -> Self {
        Self::with_config(r#"{"wssPort": 0}"#)
    }

    pub fn with_config(config: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("adw")
            .tempdir_in("/tmp")
            .unwrap();
        let sb = Self {
            dir,
            path_prefix: None,
            extra_env: Vec::new(),
        };
        std::fs::create_dir_all(sb.state_dir()).unwrap();
        std::fs::create_dir_all(sb.home()).unwrap();
        std::fs::create_dir_all(sb.cwd()).unwrap();
        std::fs::write(sb.state_dir().join("config.json"), config).unwrap();
        sb
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("s")
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("h")
    }

    /// The working directory of every command: empty, so no project file is probed.
    pub fn cwd(&self) -> PathBuf {
        self.dir.path().join("w")
    }

    pub fn socket(&self) -> PathBuf {
        self.state_dir().join("daemon.sock")
    }

    pub fn pidfile(&self) -> PathBuf {
        self.state_dir().join("daemon.pid")
    }

    pub fn set_env(&mut self, key: &str, value: &str) {
        self.extra_env.push((key.to_owned(), value.to_owned()));
    }

    /// `appduct --state-dir <s> <args…>` with a scrubbed environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_appduct"));
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if k.starts_with("APPDUCT_") || k == "NO_COLOR" || k == "ANDROID_SERIAL" {
                cmd.env_remove(&key);
            }
        }
        cmd.env("HOME", self.home());
        if let Some(prefix) = &self.path_prefix {
            let path = std::env::var("PATH").unwrap_or_default();
            cmd.env("PATH", format!("{}:{path}", prefix.display()));
        }
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
        cmd.current_dir(self.cwd());
        cmd.arg("--state-dir").arg(self.state_dir());
        cmd.args(args);
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Runs to completion: (exit code, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.command(args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    }

    /// Runs with `--json` and parses the one stdout document.
    pub fn json(&self, args: &[&str]) -> (i32, Value) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let (code, stdout, stderr) = self.run(&all);
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

    /// Runs with `--json` and returns `data` of a success.
    pub fn ok(&self, args: &[&str]) -> Value {
        let (code, doc) = self.json(args);
        assert_eq!(code, 0, "{args:?}: {doc}");
        assert_eq!(doc["ok"], true, "{args:?}: {doc}");
        doc["data"].clone()
    }

    /// Starts `appduct <args>` with stdout piped and reads its first line (the ready line of
    /// `daemon run --json` or `playground --json`).
    pub fn spawn_until_line(&self, args: &[&str]) -> (Child, Value) {
        self.spawn_until_line_with(args, Stdio::null())
    }

    /// [`Sandbox::spawn_until_line`] with the given stdin (piped for the playground's pings).
    pub fn spawn_until_line_with(&self, args: &[&str], stdin: Stdio) -> (Child, Value) {
        let mut cmd = self.command(args);
        cmd.stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while reader.read_line(&mut sink).is_ok_and(|n| n > 0) {
                sink.clear();
            }
        });
        let doc = serde_json::from_str(line.trim_end())
            .unwrap_or_else(|e| panic!("{args:?}: first line is not JSON ({e}): {line:?}"));
        (child, doc)
    }

    pub fn daemon_pid(&self) -> Option<i32> {
        let text = std::fs::read_to_string(self.pidfile()).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// Polls (bounded) until `check` holds.
    pub fn wait_for(&self, what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !check() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A running `appduct --json playground`: `stop` sends SIGINT and waits for its exit status; a
/// playground still running when dropped (a failed test) is killed.
pub struct Playground {
    pub child: Child,
    /// The `--json` ready line.
    pub ready: Value,
}

impl Playground {
    pub fn start(sb: &Sandbox) -> Self {
        let (child, ready) = sb.spawn_until_line_with(&["--json", "playground"], Stdio::piped());
        assert_eq!(ready["ok"], true, "{ready}");
        Self { child, ready }
    }

    pub fn alias(&self) -> String {
        self.ready["data"]["alias"].as_str().unwrap().to_owned()
    }

    pub fn stop(mut self) -> i32 {
        signal(self.child.id() as i32, rustix::process::Signal::INT);
        wait_child(&mut self.child, Duration::from_secs(15))
    }
}

impl Drop for Playground {
    /// A failed test still ends its playground.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = self.command(&["daemon", "stop"]).output();
        if let Some(pid) = self.daemon_pid() {
            signal(pid, rustix::process::Signal::KILL);
        }
    }
}

/// Sends `sig` to `pid` (ignoring a process that is already gone).
pub fn signal(pid: i32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// Waits for a child with a bound; kills it and panics on timeout.
pub fn wait_child(child: &mut Child, limit: Duration) -> i32 {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("the child did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Writes an executable shell script.
pub fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Whether `pid` is stopped (job control), from `/proc/<pid>/stat`.
pub fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The state follows the parenthesised command name.
            let after = &stat[stat.rfind(')')? + 1..];
            after
                .split_whitespace()
                .next()
                .map(|s| s == "T" || s == "t")
        })
        .unwrap_or(false)
}

/// A pseudo-terminal whose slave side a child gets as a stream (so that stream "is a
/// terminal"), and everything written to it, collected by a reader thread.
pub struct Pty {
    slave: Option<std::fs::File>,
    chunks: std::sync::mpsc::Receiver<Vec<u8>>,
    /// Everything read so far, lossily decoded.
    pub text: String,
}

impl Pty {
    pub fn open() -> Self {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        use std::os::unix::ffi::OsStrExt as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32)
            .open(std::ffi::OsStr::from_bytes(name.as_bytes()))
            .unwrap();
        let mut master = std::fs::File::from(master);
        let (tx, chunks) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with EIO once every slave descriptor is closed.
            while let Ok(n) = std::io::Read::read(&mut master, &mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Self {
            slave: Some(slave),
            chunks,
            text: String::new(),
        }
    }

    /// The slave side for one child (the test keeps no copy, so the reader ends with it).
    pub fn take_slave(&mut self) -> Stdio {
        Stdio::from(self.slave.take().unwrap())
    }

    /// Reads until the text contains `needle` (bounded); panics with the text so far.
    pub fn wait_for(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !self.text.contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(chunk) => self.text.push_str(&String::from_utf8_lossy(&chunk)),
                Err(_) => panic!("{needle:?} never reached the terminal: {:?}", self.text),
            }
        }
    }

    /// Everything until the child closed the terminal.
    pub fn read_to_end(&mut self) -> &str {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(chunk) => self.text.push_str(&String::from_utf8_lossy(&chunk)),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return &self.text,
                Err(e) => panic!("the terminal stayed open ({e}): {:?}", self.text),
            }
        }
    }
}
