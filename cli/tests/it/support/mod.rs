//! The CLI's tests of its built binary: the suite's one sandbox (`appduct_e2e::harness`:
//! a short state dir under /tmp with `wssPort: 0`, a private home, no inherited `APPDUCT_*`
//! variables, every daemon of the state dir stopped when the test ends) for this crate's
//! binary, plus what only these tests need: raw children (the playground, `daemon run`) with
//! bounded waits, fake tools on PATH and a pseudo-terminal.

#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

pub mod archive;

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use appduct_e2e::harness::{Sandbox, exists, is_stopped, signal};

/// A sandbox (`appduct_e2e::harness`) for this crate's binary, whose state dir holds
/// `{"wssPort": 0}`.
pub fn sandbox() -> Sandbox {
    sandbox_with_config(r#"{"wssPort": 0}"#)
}

/// [`sandbox`] with the given `config.json`.
pub fn sandbox_with_config(config: &str) -> Sandbox {
    Sandbox::with_binary(env!("CARGO_BIN_EXE_appduct"), config).unwrap_or_else(|e| panic!("{e}"))
}

/// Starts `appduct <args>` with stdout piped and reads its first line (the ready line of
/// `daemon run --json` or `playground --json`).
pub fn spawn_until_line(sb: &Sandbox, args: &[&str]) -> (Child, Value) {
    spawn_until_line_with(sb, args, Stdio::null())
}

/// [`spawn_until_line`] with the given stdin (piped for the playground's pings).
pub fn spawn_until_line_with(sb: &Sandbox, args: &[&str], stdin: Stdio) -> (Child, Value) {
    let mut cmd = sb.command(args);
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

/// A running `appduct --json playground`: `stop` sends SIGINT and waits for its exit status; a
/// playground still running when dropped (a failed test) is killed.
pub struct Playground {
    pub child: Child,
    /// The `--json` ready line.
    pub ready: Value,
}

impl Playground {
    pub fn start(sb: &Sandbox) -> Self {
        let (child, ready) = spawn_until_line_with(sb, &["--json", "playground"], Stdio::piped());
        assert_eq!(ready["ok"], true, "{ready}");
        Self { child, ready }
    }

    pub fn alias(&self) -> String {
        self.ready["data"]["alias"].as_str().unwrap().to_owned()
    }

    pub fn stop(mut self) -> i32 {
        signal(self.child.id(), "INT");
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

/// Writes an executable shell script.
pub fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A pseudo-terminal whose slave side a child gets as a stream (so that stream "is a
/// terminal"), and everything written to it, collected by a reader thread.
pub struct Pty {
    slave: Option<std::fs::File>,
    /// The master side, for typing into the terminal.
    master: std::fs::File,
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
        let typing = master.try_clone().unwrap();
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
            master: typing,
            chunks,
            text: String::new(),
        }
    }

    /// Sets the terminal's size, as a resized window does (the child sees it at its next
    /// width query).
    pub fn set_size(&self, columns: u16, rows: u16) {
        let size = rustix::termios::Winsize {
            ws_row: rows,
            ws_col: columns,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(&self.master, size).unwrap();
    }

    /// The slave side for one child (the test keeps no copy, so the reader ends with it).
    pub fn take_slave(&mut self) -> Stdio {
        Stdio::from(self.slave.take().unwrap())
    }

    /// The slave side as a file (for a child that gets it as stdin, stdout and stderr).
    pub fn take_slave_file(&mut self) -> std::fs::File {
        self.slave.take().unwrap()
    }

    /// Types `text` into the terminal, as a person at the keyboard would.
    pub fn type_text(&mut self, text: &str) {
        std::io::Write::write_all(&mut self.master, text.as_bytes()).unwrap();
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
