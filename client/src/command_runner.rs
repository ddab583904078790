//! The external-command seam (ARCHITECTURE.md#test-layers): `adb`, `xcrun simctl` and `xcrun devicectl` run through
//! [`CommandRunner`], so delivery tests script the output instead of running tools.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::process::Stdio;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::BoxFuture;

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the guarded values
/// here are plain tables that stay consistent across a panic).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Longest stderr text kept in a [`CommandOutput`], in characters.
pub const MAX_STDERR_CHARS: usize = 4096;
/// Default time limit of one external command (project decision, ARCHITECTURE.md#test-layers).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// What an external command produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandOutput {
    /// Exit code; `None` when a signal ended the process.
    pub code: Option<i32>,
    /// Standard output, lossily decoded as UTF-8.
    pub stdout: String,
    /// Standard error, lossily decoded, whitespace-trimmed and cut to 4096 characters.
    pub stderr: String,
}

impl CommandOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs `adb`, `xcrun simctl`, `xcrun devicectl` and the like for delivery (§L6.4).
pub trait CommandRunner: Send + Sync + fmt::Debug {
    /// Runs `program` with `args` (argv only, never through a shell) and `env` added to the
    /// inherited environment.
    fn run<'a>(
        &'a self,
        program: &'a str,
        args: &'a [String],
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, io::Result<CommandOutput>>;
}

/// Production runner on `tokio::process`, killing the command after its timeout.
#[derive(Debug, Clone, Copy)]
pub struct TokioCommandRunner {
    timeout: Duration,
}

impl TokioCommandRunner {
    pub fn new() -> Self {
        TokioCommandRunner {
            timeout: COMMAND_TIMEOUT,
        }
    }

    pub fn with_timeout(timeout: Duration) -> Self {
        TokioCommandRunner { timeout }
    }
}

impl Default for TokioCommandRunner {
    fn default() -> Self {
        TokioCommandRunner::new()
    }
}

impl CommandRunner for TokioCommandRunner {
    fn run<'a>(
        &'a self,
        program: &'a str,
        args: &'a [String],
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, io::Result<CommandOutput>> {
        Box::pin(async move {
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(args)
                .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                // Dropping the future on timeout kills the command.
                .kill_on_drop(true);
            let output = tokio::time::timeout(self.timeout, cmd.output())
                .await
                .map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "`{program}` did not finish within {} s",
                            self.timeout.as_secs()
                        ),
                    )
                })??;
            Ok(CommandOutput {
                code: output.status.code(),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: trim_stderr(&String::from_utf8_lossy(&output.stderr)),
            })
        })
    }
}

/// Trims whitespace and keeps at most [`MAX_STDERR_CHARS`] characters.
pub fn trim_stderr(raw: &str) -> String {
    let trimmed = raw.trim();
    match trimmed.char_indices().nth(MAX_STDERR_CHARS) {
        Some((cut, _)) => trimmed[..cut].to_owned(),
        None => trimmed.to_owned(),
    }
}

/// One call a [`ScriptedCommandRunner`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandInvocation {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// A test double: answers calls in order from a script and logs every argv. A call beyond the
/// script fails with `NotFound`, so an unexpected command never passes silently.
#[derive(Debug, Default)]
pub struct ScriptedCommandRunner {
    script: Mutex<VecDeque<Result<CommandOutput, (io::ErrorKind, String)>>>,
    log: Mutex<Vec<CommandInvocation>>,
}

impl ScriptedCommandRunner {
    pub fn new() -> Self {
        ScriptedCommandRunner::default()
    }

    pub fn push_output(&self, output: CommandOutput) {
        lock(&self.script).push_back(Ok(output));
    }

    pub fn push_error(&self, kind: io::ErrorKind, message: impl Into<String>) {
        lock(&self.script).push_back(Err((kind, message.into())));
    }

    pub fn invocations(&self) -> Vec<CommandInvocation> {
        lock(&self.log).clone()
    }
}

impl CommandRunner for ScriptedCommandRunner {
    fn run<'a>(
        &'a self,
        program: &'a str,
        args: &'a [String],
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, io::Result<CommandOutput>> {
        lock(&self.log).push(CommandInvocation {
            program: program.to_owned(),
            args: args.to_vec(),
            env: env.to_vec(),
        });
        let next = lock(&self.script).pop_front();
        Box::pin(async move {
            match next {
                Some(Ok(output)) => Ok(output),
                Some(Err((kind, message))) => Err(io::Error::new(kind, message)),
                None => Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no scripted output left for `{program}`"),
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_is_trimmed_and_capped() {
        assert_eq!(trim_stderr("  oops\n"), "oops");
        let long = "é".repeat(5000);
        let cut = trim_stderr(&long);
        assert_eq!(cut.chars().count(), MAX_STDERR_CHARS);
    }

    #[tokio::test]
    async fn tokio_runner_passes_argv_and_env_without_a_shell() {
        let runner = TokioCommandRunner::new();
        let args = vec![
            "-c".to_owned(),
            r#"printf '%s|%s' "$1" "$APPDUCT_TEST_X"; echo '  err  ' >&2; exit 3"#.to_owned(),
            "sh".to_owned(),
            "a b; $(not expanded)".to_owned(),
        ];
        let env = vec![("APPDUCT_TEST_X".to_owned(), "y".to_owned())];
        let out = runner.run("sh", &args, &env).await.unwrap();
        assert_eq!(out.stdout, "a b; $(not expanded)|y");
        assert_eq!(out.stderr, "err");
        assert_eq!(out.code, Some(3));
        assert!(!out.success());
    }

    #[tokio::test]
    async fn tokio_runner_times_out() {
        let runner = TokioCommandRunner::with_timeout(Duration::from_millis(100));
        let err = runner
            .run("sleep", &["30".to_owned()], &[])
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("sleep"), "{err}");
    }

    #[tokio::test]
    async fn tokio_runner_reports_a_missing_program() {
        let err = TokioCommandRunner::new()
            .run("/nonexistent/appduct-nothing", &[], &[])
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn scripted_runner_answers_in_order_and_logs_argv() {
        let runner = ScriptedCommandRunner::new();
        runner.push_output(CommandOutput {
            code: Some(0),
            stdout: "ok".into(),
            stderr: String::new(),
        });
        runner.push_error(io::ErrorKind::PermissionDenied, "nope");
        let dynamic: &dyn CommandRunner = &runner;
        let args = vec!["devices".to_owned()];
        assert!(dynamic.run("adb", &args, &[]).await.unwrap().success());
        assert_eq!(
            dynamic.run("adb", &args, &[]).await.unwrap_err().kind(),
            io::ErrorKind::PermissionDenied
        );
        assert_eq!(
            dynamic.run("xcrun", &[], &[]).await.unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        let log = runner.invocations();
        assert_eq!(log.len(), 3);
        assert_eq!(log[0].program, "adb");
        assert_eq!(log[0].args, ["devices"]);
        assert_eq!(log[2].program, "xcrun");
    }
}
