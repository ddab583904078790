//! The output contract of §L3: the `{ok, data}` / `{ok: false, error}` envelope, `--json`
//! and `--pretty`, `--verbose` meta, the human error block, and which stream gets what.
//!
//! Rendering is pure (`render_*` return text); the `print_*` methods only write it out.

use std::io::{IsTerminal as _, Write as _};
use std::time::Instant;

use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::error::CliError;
use crate::render::{self, Paint, Row, Section};

/// `meta.command` of errors raised while parsing arguments (§L3.4).
pub const PARSE_COMMAND: &str = "cli";

/// The output flags of §L2.1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputFlags {
    pub json: bool,
    pub pretty: bool,
    pub verbose: bool,
    /// `--color` (`--no-color` is `never`), §L3.3.
    pub color: render::ColorMode,
}

/// A successful result, rendered by [`Output::print_success`].
#[derive(Debug, Clone, PartialEq)]
pub struct Success {
    /// The envelope's `data`.
    pub data: Value,
    /// The complete human rendering for stdout (normally ending in a newline).
    pub human: String,
    /// Extra `meta` keys after `command`, `timestamp` and `durationMs` (`tools call` adds
    /// `call`, §L3.4).
    pub meta: Map<String, Value>,
}

impl Success {
    pub fn new(data: Value, human: impl Into<String>) -> Self {
        Self {
            data,
            human: human.into(),
            meta: Map::new(),
        }
    }
}

/// What a command produced, for [`crate::commands::run`] to print.
#[derive(Debug)]
pub enum Reply {
    /// A result for [`Output::print_success`] (envelope or human text per the flags).
    Success(Success),
    /// The command printed its own output (streams, hosts, raw documents); its exit status.
    Done(u8),
}

/// Renders and prints everything a command shows, per the flags of this run.
#[derive(Debug, Clone)]
pub struct Output {
    pub flags: OutputFlags,
    /// Styling for stdout and stderr; plain unless that stream is a terminal and colour is
    /// allowed (§L3.3).
    pub stdout_paint: Paint,
    pub stderr_paint: Paint,
    /// The width of the terminal on stdout, when stdout is one (human tables are cut to it,
    /// §L3.3); `None` for pipes, files and under `--json`.
    pub stdout_columns: Option<usize>,
    command: String,
    started: Instant,
    started_at: OffsetDateTime,
}

impl Output {
    /// Output for this process: colour is decided per stream by [`render::colour_enabled`]
    /// (`--color`, `NO_COLOR`, `CLICOLOR_FORCE`, `CLICOLOR`, the terminal), and is always off
    /// under `--json` (§L3.3).
    pub fn for_process(flags: OutputFlags) -> Self {
        let env = render::ColourEnv::from_process();
        let paint = |is_terminal| Paint {
            enabled: !flags.json && render::colour_enabled(flags.color, &env, is_terminal),
        };
        let mut out = Self::plain(flags);
        out.stdout_paint = paint(std::io::stdout().is_terminal());
        out.stderr_paint = paint(std::io::stderr().is_terminal());
        if !flags.json && std::io::stdout().is_terminal() {
            out.stdout_columns = terminal_columns(std::io::stdout());
        }
        out
    }

    /// Output without colour, started now; the command is [`PARSE_COMMAND`] until set.
    pub fn plain(flags: OutputFlags) -> Self {
        Self {
            flags,
            stdout_paint: Paint::PLAIN,
            stderr_paint: Paint::PLAIN,
            stdout_columns: None,
            command: PARSE_COMMAND.to_owned(),
            started: Instant::now(),
            started_at: OffsetDateTime::now_utc(),
        }
    }

    /// Sets `meta.command` (the noun and verb) once arguments parsed.
    pub fn set_command(&mut self, command: &str) {
        command.clone_into(&mut self.command);
    }

    pub fn command(&self) -> &str {
        &self.command
    }

    /// A JSON document: compact, or indented by 2 spaces with `--pretty`.
    pub fn json_document(&self, value: &Value) -> String {
        if self.flags.pretty {
            serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
        } else {
            value.to_string()
        }
    }

    /// App-supplied JSON embedded in a human field (error details, event payloads): compact,
    /// or pretty with `--pretty` (§L2.1), control characters escaped (SECURITY.md §4.13).
    pub fn inline_json(&self, value: &Value) -> String {
        render::human_json(value, self.flags.pretty)
    }

    /// JSON `meta` (§L3.4): `command`, `timestamp`, `durationMs`, then `extra`.
    pub fn meta_json(&self, extra: &Map<String, Value>) -> Value {
        let mut meta = Map::new();
        meta.insert("command".into(), Value::String(self.command.clone()));
        meta.insert(
            "timestamp".into(),
            Value::String(render::iso_millis(self.started_at)),
        );
        meta.insert("durationMs".into(), Value::from(self.duration_ms()));
        for (k, v) in extra {
            meta.insert(k.clone(), v.clone());
        }
        Value::Object(meta)
    }

    fn duration_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The human `Meta` block (§L3.4).
    pub fn meta_human(&self) -> String {
        render::sections(&[Section::new(
            "Meta",
            vec![
                Row::field("Command", self.command.as_str()),
                Row::field("Timestamp", render::iso_seconds(self.started_at)),
                Row::field("Duration", format!("{} ms", self.duration_ms())),
            ],
        )])
    }

    /// The success envelope `{ok: true, data, meta?}`.
    pub fn success_envelope(&self, success: &Success) -> Value {
        let mut env = Map::new();
        env.insert("ok".into(), Value::Bool(true));
        env.insert("data".into(), success.data.clone());
        if self.flags.verbose {
            env.insert("meta".into(), self.meta_json(&success.meta));
        }
        Value::Object(env)
    }

    /// The failure envelope `{ok: false, error: {type, message, details?}, meta?}`.
    pub fn failure_envelope(&self, err: &CliError) -> Value {
        let mut error = Map::new();
        error.insert("type".into(), Value::String(err.error_type.clone()));
        error.insert("message".into(), Value::String(err.message.clone()));
        if let Some(details) = &err.details {
            error.insert("details".into(), details.clone());
        }
        let mut env = Map::new();
        env.insert("ok".into(), Value::Bool(false));
        env.insert("error".into(), Value::Object(error));
        if self.flags.verbose {
            env.insert("meta".into(), self.meta_json(&Map::new()));
        }
        Value::Object(env)
    }

    /// What a success prints on stdout.
    pub fn render_success(&self, success: &Success) -> String {
        if self.flags.json {
            let mut text = self.json_document(&self.success_envelope(success));
            text.push('\n');
            text
        } else {
            let mut text = success.human.clone();
            if self.flags.verbose {
                text.push_str(&self.meta_human());
            }
            text
        }
    }

    /// The human error block (§L3.3), plus the meta block and the error's tail.
    pub fn render_error_block(&self, err: &CliError, paint: Paint) -> String {
        // A tool's error (type, message, details) comes from the app: cleaned (SECURITY.md §4.13).
        let mut rows = vec![
            Row::field("Type", render::clean_line(&err.error_type)),
            Row::field("Message", render::clean_text(&err.message)),
        ];
        if !err.hide_human_details
            && let Some(details) = err.details_without_hint()
        {
            if self.flags.pretty {
                rows.push(Row::block("Details", self.inline_json(&details)));
            } else {
                rows.push(Row::field("Details", self.inline_json(&details)));
            }
        }
        if let Some(hint) = err.hint() {
            rows.push(Row::field("Hint", render::clean_text(hint)));
        }
        let mut text = render::sections(&[Section::new(paint.bold_red("Command failed"), rows)]);
        if let Some(tail) = &err.human_tail {
            text.push_str(tail);
            if !tail.ends_with('\n') {
                text.push('\n');
            }
        }
        if self.flags.verbose {
            text.push_str(&self.meta_human());
        }
        text
    }

    /// A failure as printed before any output started: `(stdout, stderr)` text. Under `--json`
    /// the envelope goes to stdout; in human mode the error block goes to stderr (§L3.2).
    pub fn render_failure(&self, err: &CliError) -> (String, String) {
        if self.flags.json {
            let mut text = self.json_document(&self.failure_envelope(err));
            text.push('\n');
            (text, String::new())
        } else {
            (
                String::new(),
                self.render_error_block(err, self.stderr_paint),
            )
        }
    }

    /// A failure after a stream or host started (`events tail`, `daemon run`, `mcp`): always on
    /// stderr, as the envelope under `--json` (§L3.2).
    pub fn render_failure_after_start(&self, err: &CliError) -> String {
        if self.flags.json {
            let mut text = self.json_document(&self.failure_envelope(err));
            text.push('\n');
            text
        } else {
            self.render_error_block(err, self.stderr_paint)
        }
    }

    /// Prints a success; returns exit status 0.
    pub fn print_success(&self, success: &Success) -> u8 {
        write_stdout(&self.render_success(success));
        0
    }

    /// Prints a failure; returns its exit status.
    pub fn print_failure(&self, err: &CliError) -> u8 {
        let (out, errs) = self.render_failure(err);
        write_stdout(&out);
        write_stderr(&errs);
        err.exit_code()
    }

    /// Prints a failure that happened after a stream or host started; returns its exit status.
    pub fn print_failure_after_start(&self, err: &CliError) -> u8 {
        write_stderr(&self.render_failure_after_start(err));
        err.exit_code()
    }

    /// A human notice on stderr (version drift, informational notes); nothing under `--json`
    /// (§L3.2).
    pub fn notice(&self, text: &str) {
        if !self.flags.json {
            let mut line = text.to_owned();
            if !line.ends_with('\n') {
                line.push('\n');
            }
            write_stderr(&line);
        }
    }
}

/// The width in columns of the terminal `fd` is, read at each call (so a resize counts);
/// `None` when it is not a terminal or reports a width of 0.
#[cfg(unix)]
pub fn terminal_columns(fd: impl std::os::fd::AsFd) -> Option<usize> {
    rustix::termios::tcgetwinsize(fd)
        .ok()
        .map(|w| usize::from(w.ws_col))
        .filter(|c| *c > 0)
}

/// Windows: no console size query in safe std; `None`, so the fallback width applies.
#[cfg(windows)]
pub fn terminal_columns<T>(_stream: T) -> Option<usize> {
    None
}

/// Writes to stdout, ignoring a closed pipe (`appduct … | head`).
pub fn write_stdout(text: &str) {
    if !text.is_empty() {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
}

/// Writes to stderr, ignoring failures.
pub fn write_stderr(text: &str) {
    if !text.is_empty() {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(text.as_bytes());
        let _ = err.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn out(json: bool, pretty: bool, verbose: bool) -> Output {
        Output::plain(OutputFlags {
            json,
            pretty,
            verbose,
            color: render::ColorMode::Auto,
        })
    }

    fn policy_error() -> CliError {
        CliError::from_wire(
            "policy_denied",
            "Policy denies \"reset_counter\" on pixel-8 (policy.destructive is \"deny\")",
            Some(json!({
                "reason": "policy",
                "decision": "deny",
                "hint": "To allow it, restart the daemon (appduct daemon stop)."
            })),
        )
    }

    #[test]
    fn json_success_is_one_compact_line() {
        let o = out(true, false, false);
        let text = o.render_success(&Success::new(json!({"a": 1}), "human"));
        assert_eq!(text, "{\"ok\":true,\"data\":{\"a\":1}}\n");
    }

    #[test]
    fn pretty_json_is_indented_by_two_spaces() {
        let o = out(true, true, false);
        let text = o.render_success(&Success::new(json!({"a": 1}), ""));
        assert_eq!(
            text,
            "{\n  \"ok\": true,\n  \"data\": {\n    \"a\": 1\n  }\n}\n"
        );
    }

    #[test]
    fn json_failure_goes_to_stdout_with_type_message_details() {
        let o = out(true, false, false);
        let (stdout, stderr) = o.render_failure(&CliError::usage("bad").with_detail("x", 1));
        assert_eq!(
            stdout,
            "{\"ok\":false,\"error\":{\"type\":\"usage_error\",\"message\":\"bad\",\"details\":{\"x\":1}}}\n"
        );
        assert_eq!(stderr, "");
        // No details key when there are none.
        let (stdout, _) = o.render_failure(&CliError::usage("bad"));
        assert!(!stdout.contains("details"));
    }

    #[test]
    fn verbose_adds_meta_after_data_or_error() {
        let mut o = out(true, false, true);
        let (stdout, _) = o.render_failure(&CliError::usage("bad"));
        let v: Value = serde_json::from_str(&stdout).unwrap_or_default();
        assert_eq!(v["meta"]["command"], "cli");
        assert!(
            v["meta"]["timestamp"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z'))
        );
        assert!(v["meta"]["durationMs"].is_u64());
        let keys: Vec<&String> = v
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["ok", "error", "meta"]);

        o.set_command("tools call");
        let mut s = Success::new(json!(null), "");
        s.meta.insert("call".into(), json!({"callId": "cli-1"}));
        let v: Value = serde_json::from_str(&o.render_success(&s)).unwrap_or_default();
        assert_eq!(v["meta"]["command"], "tools call");
        assert_eq!(v["meta"]["call"]["callId"], "cli-1");
        assert_eq!(v["data"], Value::Null);
    }

    #[test]
    fn no_meta_without_verbose() {
        let o = out(true, false, false);
        let (stdout, _) = o.render_failure(&CliError::usage("bad"));
        assert!(!stdout.contains("meta"));
        let o = out(false, false, false);
        assert_eq!(o.render_success(&Success::new(json!(1), "one\n")), "one\n");
    }

    #[test]
    fn human_error_block_matches_the_spec_layout() {
        let o = out(false, false, false);
        let (stdout, stderr) = o.render_failure(&policy_error());
        assert_eq!(stdout, "");
        let expected = "\
Command failed
  Type:     policy_denied
  Message:  Policy denies \"reset_counter\" on pixel-8 (policy.destructive is \"deny\")
  Details:  {\"reason\":\"policy\",\"decision\":\"deny\"}
  Hint:     To allow it, restart the daemon (appduct daemon stop).
";
        assert_eq!(stderr, expected);
    }

    #[test]
    fn human_error_block_omits_empty_details_and_hint() {
        let o = out(false, false, false);
        let (_, stderr) = o.render_failure(&CliError::usage("bad").with_hint("h"));
        assert_eq!(
            stderr,
            "Command failed\n  Type:     usage_error\n  Message:  bad\n  Hint:     h\n"
        );
        let (_, stderr) = o.render_failure(&CliError::usage("bad"));
        assert_eq!(
            stderr,
            "Command failed\n  Type:     usage_error\n  Message:  bad\n"
        );
    }

    #[test]
    fn pretty_details_are_an_indented_block() {
        let o = out(false, true, false);
        let (_, stderr) = o.render_failure(&CliError::usage("bad").with_detail("x", 1));
        assert_eq!(
            stderr,
            "Command failed\n  Type:     usage_error\n  Message:  bad\n  Details:\n    {\n      \"x\": 1\n    }\n"
        );
    }

    #[test]
    fn hidden_details_and_tail() {
        let o = out(false, false, false);
        let mut e = CliError::new(
            appduct_protocol::errors::ErrorType::AssertionError,
            "differs",
        )
        .with_detail("diff", "…");
        e.hide_human_details = true;
        e.human_tail = Some("+ tool sum_v2".into());
        let (_, stderr) = o.render_failure(&e);
        assert_eq!(
            stderr,
            "Command failed\n  Type:     assertion_error\n  Message:  differs\n+ tool sum_v2\n"
        );
    }

    #[test]
    fn human_verbose_meta_block_follows_on_the_same_stream() {
        let o = out(false, false, true);
        let (_, stderr) = o.render_failure(&CliError::usage("bad"));
        assert!(stderr.contains("Meta\n  Command:    cli\n  Timestamp:  "));
        assert!(stderr.contains("\n  Duration:   "));
        let text = o.render_success(&Success::new(json!(1), "one\n"));
        assert!(text.starts_with("one\nMeta\n  Command:    cli\n"));
    }

    #[test]
    fn failure_after_start_uses_stderr_even_with_json() {
        let o = out(true, false, false);
        assert!(
            o.render_failure_after_start(&CliError::connection("lost"))
                .starts_with("{\"ok\":false")
        );
        let o = out(false, false, false);
        assert!(
            o.render_failure_after_start(&CliError::connection("lost"))
                .starts_with("Command failed\n")
        );
    }

    #[test]
    fn human_error_block_removes_app_control_characters() {
        let hostile = "x\u{1b}]0;t\u{7} \u{1b}[2J \u{9b}2J\u{7f}";
        let e = CliError::from_wire(
            "tool_execution_error",
            format!("{hostile}\nsecond line"),
            Some(json!({"detail": hostile, "hint": hostile})),
        );
        for pretty in [false, true] {
            let (_, stderr) = out(false, pretty, false).render_failure(&e);
            assert!(
                !stderr.chars().any(|c| c.is_control() && c != '\n'),
                "{stderr:?}"
            );
            assert!(
                stderr.contains("  Message:  x]0;t [2J 2J\n            second line\n"),
                "{stderr}"
            );
            assert!(stderr.contains("  Hint:     x]0;t [2J 2J\n"), "{stderr}");
            assert!(
                stderr.contains(r"\u001b]0;t\u0007 \u001b[2J \u009b2J\u007f"),
                "{stderr}"
            );
        }
        // `--json` stays exact: the envelope carries the message as the app sent it.
        let (stdout, _) = out(true, false, false).render_failure(&e);
        let v: Value = serde_json::from_str(&stdout).unwrap_or_default();
        assert_eq!(v["error"]["message"], format!("{hostile}\nsecond line"));
        assert_eq!(v["error"]["details"]["detail"], hostile);
    }
}
