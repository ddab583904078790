//! Node.js processes of the suite.
//!
//! - The TypeScript SDK as a device process: `appduct-playground-node` (§T14.3), built from
//!   `sdk-ts/` by `scripts/test` (`npm ci`, `npm run build`; tests never run npm). One JSON line on
//!   its stdout per `stateChange`, `sessionChange` and `error`; a `ping` line on stdin posts
//!   `playground_ping`; end of stdin disconnects and exits 0.
//! - The official MCP TypeScript client (`e2e/mcp-client/`, installed by `scripts/test`),
//!   driving `appduct mcp`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{HarnessError, Proc, Sandbox};

/// The `sdk-ts` workspace of this repository.
pub fn sdk_ts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("sdk-ts")
}

/// The error of a Node part the tests need but `scripts/test` has not prepared: tests never
/// install or build Node code themselves.
fn unprepared(what: &Path, prepare: &str) -> HarnessError {
    HarnessError::Unprepared(format!(
        "{} is missing: run `scripts/test`, or prepare it with `{prepare}`",
        what.display()
    ))
}

/// `playground/dist/node/main.js` of the built TypeScript workspace (`scripts/test` runs
/// `npm ci` and `npm run build` in `sdk-ts/`). An existing build is used as is, even if older
/// than the sources.
pub fn node_playground() -> Result<PathBuf, HarnessError> {
    node_playground_in(&sdk_ts_dir())
}

fn node_playground_in(dir: &Path) -> Result<PathBuf, HarnessError> {
    let prepare = "(cd sdk-ts && npm ci && npm run build)";
    for needed in [
        dir.join("node_modules"),
        dir.join("packages/sdk/dist/node/index.js"),
    ] {
        if !needed.exists() {
            return Err(unprepared(&needed, prepare));
        }
    }
    let main = dir.join("playground/dist/node/main.js");
    if main.is_file() {
        Ok(main)
    } else {
        Err(unprepared(&main, prepare))
    }
}

/// `e2e/mcp-client/client.mjs`, the official MCP TypeScript client driver, whose dependencies
/// `scripts/test` installs.
pub fn official_mcp_client() -> Result<PathBuf, HarnessError> {
    official_mcp_client_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp-client"))
}

fn official_mcp_client_in(dir: &Path) -> Result<PathBuf, HarnessError> {
    let modules = dir.join("node_modules");
    if !modules.is_dir() {
        return Err(unprepared(&modules, "(cd e2e/mcp-client && npm ci)"));
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

    /// Starts the official MCP client's task driver (`e2e/mcp-client/tasks-client.mjs`, §M19)
    /// against the sandbox's `appduct mcp`.
    pub fn official_mcp_tasks_client(sb: &Sandbox) -> Result<Self, HarnessError> {
        let script = official_mcp_client()?.with_file_name("tasks-client.mjs");
        let mut cmd = node_command(sb);
        cmd.arg(script)
            .arg(sb.bin())
            .arg(sb.state_dir())
            .arg(sb.home());
        Ok(Self {
            proc: Proc::spawn(cmd)?,
        })
    }

    /// Starts the official MCP client connected by URL to `/mcp` (docs/http.md §H7) with
    /// `token` as its bearer token (`e2e/mcp-client/http-client.mjs`).
    pub fn official_mcp_http_client(
        sb: &Sandbox,
        url: &str,
        token: &str,
    ) -> Result<Self, HarnessError> {
        let script = official_mcp_client()?.with_file_name("http-client.mjs");
        let mut cmd = node_command(sb);
        cmd.arg(script).arg(url).arg(token);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unprepared_node_part_names_the_command_that_prepares_it() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let err = node_playground_in(tmp.path()).err().map(|e| e.to_string());
        let err = err.unwrap_or_default();
        assert!(err.contains("node_modules is missing"), "{err}");
        assert!(
            err.contains("(cd sdk-ts && npm ci && npm run build)"),
            "{err}"
        );

        let err = official_mcp_client_in(tmp.path())
            .err()
            .map(|e| e.to_string());
        let err = err.unwrap_or_default();
        assert!(err.contains("(cd e2e/mcp-client && npm ci)"), "{err}");
        assert!(err.contains("scripts/test"), "{err}");
    }
}
