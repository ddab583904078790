//! Node.js processes of the suite.
//!
//! - The TypeScript SDK as a device process: `appduct-playground-node` (07 §7.14.3), built from
//!   `sdk-ts/` with `npm ci && npm run build` the first time a test needs it. One JSON line on
//!   its stdout per `stateChange`, `sessionChange` and `error`; a `ping` line on stdin posts
//!   `playground_ping`; end of stdin disconnects and exits 0.
//! - The official MCP TypeScript client (`e2e/mcp-client/`), driving `appduct mcp`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{HarnessError, Proc, Sandbox};

/// Serialises the one-time build across the tests of a binary.
static BUILD: Mutex<()> = Mutex::new(());

/// The `sdk-ts` workspace of this repository.
pub fn sdk_ts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("sdk-ts")
}

fn npm(dir: &Path, args: &[&str]) -> Result<(), HarnessError> {
    let out = Command::new("npm")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| HarnessError::Io(format!("npm {args:?}: {e} (is Node.js installed?)")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(HarnessError::Io(format!(
            "npm {args:?} failed in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// `playground/dist/node/main.js`, building the TypeScript workspace first when it or the SDK's
/// Node entry is missing (`npm ci` only when `node_modules` is absent). An existing build is
/// used as is, even if older than the sources.
pub fn node_playground() -> Result<PathBuf, HarnessError> {
    let dir = sdk_ts_dir();
    let main = dir.join("playground/dist/node/main.js");
    let entry = dir.join("packages/sdk/dist/node/index.js");
    let _guard = BUILD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !main.is_file() || !entry.is_file() {
        if !dir.join("node_modules").is_dir() {
            npm(&dir, &["ci", "--no-audit", "--no-fund"])?;
        }
        npm(&dir, &["run", "build"])?;
    }
    if main.is_file() {
        Ok(main)
    } else {
        Err(HarnessError::MissingBinary(main))
    }
}

/// `e2e/mcp-client/client.mjs`, the official MCP TypeScript client driver, with its
/// dependencies installed (`npm ci` when `node_modules` is absent).
pub fn official_mcp_client() -> Result<PathBuf, HarnessError> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp-client");
    let _guard = BUILD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !dir.join("node_modules").is_dir() {
        npm(&dir, &["ci", "--no-audit", "--no-fund"])?;
    }
    Ok(dir.join("client.mjs"))
}

/// `node <args…>` with `APPDUCT_*` scrubbed, in the sandbox's working directory and home,
/// stdin piped.
pub fn node_command(sb: &Sandbox) -> Command {
    let mut cmd = Command::new("node");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("APPDUCT_") {
            cmd.env_remove(&key);
        }
    }
    cmd.current_dir(sb.cwd())
        .env("HOME", sb.home())
        .stdin(Stdio::piped());
    cmd
}

/// A running Node process that talks in JSON lines on stdout.
#[derive(Debug)]
pub struct NodeProc {
    proc: Proc,
}

impl NodeProc {
    /// Starts `appduct-playground-node` on `link` with extra arguments (`--pins …`,
    /// `--transport web`), in the sandbox's working directory with `APPDUCT_*` scrubbed.
    pub fn playground(sb: &Sandbox, link: &str, extra: &[&str]) -> Result<Self, HarnessError> {
        let main = node_playground()?;
        let mut cmd = node_command(sb);
        cmd.arg(main).arg(link).args(extra);
        Ok(Self {
            proc: Proc::spawn(cmd)?,
        })
    }

    /// Starts the official MCP client driver against the sandbox's `appduct mcp`.
    pub fn official_mcp_client(sb: &Sandbox) -> Result<Self, HarnessError> {
        let script = official_mcp_client()?;
        let mut cmd = node_command(sb);
        cmd.arg(script)
            .arg(sb.bin())
            .arg(sb.state_dir())
            .arg(sb.home());
        Ok(Self {
            proc: Proc::spawn(cmd)?,
        })
    }

    /// Reads stdout lines until one satisfies `check` (at most `limit`); returns it.
    pub fn wait_line(
        &self,
        limit: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Result<Value, HarnessError> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.proc.next_stdout_line(left).ok_or_else(|| {
                HarnessError::Output(format!(
                    "no matching line within {limit:?}; stdout: {} stderr: {}",
                    self.proc.stdout(),
                    self.proc.stderr()
                ))
            })?;
            let doc: Value = serde_json::from_str(&line)
                .map_err(|e| HarnessError::Output(format!("{e}: {line:?}")))?;
            if check(&doc) {
                return Ok(doc);
            }
        }
    }

    /// Writes one line on its stdin.
    pub fn send_line(&mut self, line: &str) -> Result<(), HarnessError> {
        use std::io::Write as _;
        let stdin = self
            .proc
            .child_mut()
            .stdin
            .as_mut()
            .ok_or_else(|| HarnessError::Io("stdin closed".into()))?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| HarnessError::Io(e.to_string()))
    }

    /// Closes stdin; the device disconnects and exits.
    pub fn close_stdin(&mut self) {
        drop(self.proc.child_mut().stdin.take());
    }

    pub fn proc(&mut self) -> &mut Proc {
        &mut self.proc
    }
}
