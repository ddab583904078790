//! `appduct tools call [selector] <name>` (§L7.3): the call with its progress display and
//! interrupt handling.

use std::io::IsTerminal as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use appduct_client::client::{CallProgress, ProgressStream, ToolCallError};
use appduct_protocol::control::{
    Caller, DEFAULT_CANCEL_REASON, ToolsCallParams, ToolsCallResult, ToolsCancel, ToolsCancelParams,
};
use appduct_protocol::errors::ErrorType;
use clap::Args;
use serde_json::{Map, Value, json};

use super::content::{Pictures, detect_inline, show};
use crate::commands::args::{SelectorValueArgs, opt, positive_int, selector_and_value};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Success};
use crate::progress::{Display, REDRAW_EVERY, Terminal};
use crate::render::{self, pretty_json};
use crate::signals::{Interrupt, Interrupts};

#[derive(Debug, Args)]
pub struct ToolsCallArgs {
    #[command(flatten)]
    pub positionals: SelectorValueArgs,
    /// Arguments as a JSON object (default {})
    #[arg(long, value_name = "JSON", conflicts_with = "input_file")]
    pub input: Option<String>,
    /// Read the JSON object from a file ("-" reads stdin)
    #[arg(long, value_name = "PATH")]
    pub input_file: Option<PathBuf>,
    /// Call timeout in milliseconds (the daemon clamps it to 1000-600000)
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    pub timeout: Option<String>,
    /// Never show the progress display
    #[arg(long)]
    pub no_progress: bool,
    /// Write each image of the result to DIR/<callId>-<index>.<png|jpg|webp> and print the paths
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// Show images inline (kitty or iTerm2 only; refused elsewhere)
    #[arg(long)]
    pub inline: bool,
}

/// `tools call` (§L7.3). `callId` and `progress` are decided when the call is made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolsCall {
    pub selector: Option<String>,
    pub name: String,
    /// The parsed `--input` / `--input-file` object; `{}` by default.
    pub args: Map<String, Value>,
    pub timeout_ms: Option<u64>,
    pub no_progress: bool,
    /// `--out-dir` (§L7.3.1).
    pub out_dir: Option<PathBuf>,
    /// `--inline` (§L7.3.1).
    pub inline: bool,
}

pub fn validate(a: ToolsCallArgs) -> Result<ToolsCall, CliError> {
    let (selector, name) = selector_and_value("tools call", "NAME", a.positionals.positionals)?;
    let timeout_ms = opt(a.timeout, |v| positive_int("--timeout", v))?;
    let args = match (a.input, a.input_file) {
        (Some(text), _) => input_object("--input", &text)?,
        (None, Some(path)) => input_object("--input-file", &read_input_file(&path)?)?,
        (None, None) => Map::new(),
    };
    Ok(ToolsCall {
        selector,
        name,
        args,
        timeout_ms,
        no_progress: a.no_progress,
        out_dir: a.out_dir,
        inline: a.inline,
    })
}

/// `--input-file <path>`; `-` reads stdin.
fn read_input_file(path: &Path) -> Result<String, CliError> {
    let mut text = String::new();
    let result = if path.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    result.map(|()| text).map_err(|e| {
        CliError::usage(format!("cannot read --input-file {}: {e}", path.display()))
            .with_detail("path", path.display().to_string())
    })
}

/// The tool arguments: a JSON object, else `validation_error` (exit 65) with
/// `details: {param, error}` (§L7.3).
pub fn input_object(param: &str, text: &str) -> Result<Map<String, Value>, CliError> {
    let invalid = |error: String| {
        CliError::new(
            ErrorType::ValidationError,
            format!("{param} must be a JSON object: {error}"),
        )
        .with_detail("param", param)
        .with_detail("error", error)
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(invalid(format!(
            "got {}",
            match other {
                Value::Null => "null",
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                Value::Array(_) => "an array",
                Value::Object(_) => "an object",
            }
        ))),
        Err(e) => Err(invalid(format!("not valid JSON ({e})"))),
    }
}

/// After a cancel, the CLI gives the daemon this long to settle the call (2000 ms cancel grace
/// + 1000 ms, §L7.3).
pub const CANCEL_CONFIRM_WAIT: Duration = Duration::from_millis(3000);

/// `cli-` and 32 random hex digits (§L7.3).
pub fn new_call_id() -> Result<String, CliError> {
    let bytes = appduct_client::random::random_bytes::<16>()
        .map_err(|e| CliError::internal(format!("no randomness for a call id: {e}")))?;
    Ok(format!(
        "cli-{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ))
}

/// The `tools.call` params of a `tools call` command.
pub fn call_params(c: &ToolsCall, call_id: &str, progress: bool) -> ToolsCallParams {
    ToolsCallParams::new(c.name.clone())
        .with_selector(c.selector.clone())
        .with_args(c.args.clone())
        .with_timeout_ms(c.timeout_ms)
        .with_caller(Some(Caller::Cli))
        .with_call_id(Some(call_id.to_owned()))
        .with_progress(progress)
}

/// The stderr notice of a call parked for an operator (§C11.1).
pub fn waiting_for_operator(approval_id: &str) -> String {
    let id = render::clean_line(approval_id);
    format!(
        "Waiting for an operator to approve this call ({id}). In a terminal, run:\n  appduct approvals approve {id}\n(or appduct approvals deny {id}). Ctrl-C cancels the call."
    )
}

/// The failure reported when the CLI gave up waiting after an interrupt (§L7.3 step 3).
pub fn cancelled_by_cli(call_id: &str) -> CliError {
    CliError::new(
        ErrorType::ToolCancelled,
        "Call cancelled; the daemon did not confirm in time",
    )
    .with_detail("callId", call_id)
    .with_detail("reason", DEFAULT_CANCEL_REASON)
    .with_detail("settledBy", "cli")
}

async fn next_progress(stream: &mut Option<ProgressStream>) -> Option<CallProgress> {
    match stream {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

/// `tools call`: the call with its progress display and interrupt handling (§L7.3).
pub async fn run(globals: &Globals, out: &Output, c: &ToolsCall) -> Result<Success, CliError> {
    let pictures = pictures(out, c)?;
    let mut signals = Interrupts::new(false)
        .map_err(|e| CliError::internal(format!("cannot install signal handlers: {e}")))?;
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let call_id = new_call_id()?;
    let active = std::io::stderr().is_terminal() && !out.flags.json && !c.no_progress;
    // Progress is always asked for: a call parked for an operator (§C11.1) names its approval
    // only in a progress notification, and the CLI says where to approve even without the
    // display.
    let params = call_params(c, &call_id, true);
    type CallFuture<'a> =
        std::pin::Pin<Box<dyn Future<Output = Result<ToolsCallResult, ToolCallError>> + Send + 'a>>;
    let (stream, pending) = client.call_tool_with_progress(params);
    let (mut stream, mut result): (Option<ProgressStream>, CallFuture<'_>) =
        (Some(stream), Box::pin(pending.result()));
    let mut announced_approval = false;
    let mut terminal = Terminal::new(active, Display::new(&c.name, c.selector.as_deref()));
    let mut redraw = tokio::time::interval(REDRAW_EVERY);
    let mut cancel: Option<(tokio::task::JoinHandle<()>, tokio::time::Instant)> = None;
    let confirm_deadline =
        |cancel: &Option<(tokio::task::JoinHandle<()>, tokio::time::Instant)>| {
            cancel.as_ref().map(|(_, at)| *at + CANCEL_CONFIRM_WAIT)
        };
    let outcome = loop {
        let deadline = confirm_deadline(&cancel);
        tokio::select! {
            r = &mut result => break Ok(r),
            Some(item) = next_progress(&mut stream) => {
                if let CallProgress::Progress(p) = &item
                    && let Some(approval_id) = &p.approval_id
                    && !announced_approval
                {
                    announced_approval = true;
                    terminal.clear();
                    out.notice(&waiting_for_operator(approval_id));
                }
                if active {
                    terminal.display.update(&item);
                }
            }
            _ = redraw.tick(), if terminal.is_active() => terminal.tick(),
            () = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => break Err(cancelled_by_cli(&call_id)),
            signal = signals.recv() => {
                if signal == Interrupt::Int && cancel.is_none() {
                    let client = client.clone();
                    let params = ToolsCancelParams::new(call_id.clone()).with_reason(Some(DEFAULT_CANCEL_REASON.to_owned()));
                    let task = tokio::spawn(async move {
                        if let Err(e) = client.call::<ToolsCancel>(params).await {
                            tracing::debug!("tools.cancel failed: {e}");
                        }
                    });
                    cancel = Some((task, tokio::time::Instant::now()));
                    terminal.display.set_cancelling();
                    terminal.tick();
                } else {
                    // A second Ctrl-C or a SIGTERM: close the connection; the daemon cancels
                    // the call with `connection_closed`.
                    break Err(cancelled_by_cli(&call_id));
                }
            }
        }
    };
    terminal.clear();
    if let Some((task, _)) = cancel {
        task.abort();
    }
    // Dropping every handle on the connection closes it (after an interrupt, the daemon then
    // cancels the call with `connection_closed`).
    drop(result);
    drop(stream);
    drop(client);
    match outcome {
        Ok(Ok(r)) => tools_call_showing(&c.name, &r, &pictures),
        Ok(Err(e)) => Err(connect::tool_call_error(&e, &dir)),
        Err(e) => Err(e),
    }
}

/// `--out-dir` and `--inline` (§L7.3.1), checked before the daemon is contacted: `--inline`
/// needs kitty or iTerm2 and human output.
fn pictures(out: &Output, c: &ToolsCall) -> Result<Pictures, CliError> {
    let inline = if c.inline {
        if out.flags.json {
            return Err(CliError::usage("--inline cannot be combined with --json"));
        }
        Some(detect_inline(&|k| std::env::var(k).ok())?)
    } else {
        None
    };
    Ok(Pictures {
        out_dir: c.out_dir.clone(),
        inline,
    })
}

/// The content blocks of a result, as JSON values (§D17.1).
fn content_of(r: &ToolsCallResult) -> Option<Vec<Value>> {
    let blocks = r.content.as_ref().filter(|c| !c.is_empty())?;
    Some(blocks.iter().map(render::to_value).collect())
}

/// `tools call` with content (§L7.3.1): without content exactly [`tools_call`]; with content
/// `data` is `{result?, content}` (each image's `data` replaced by `path` and `bytes` when
/// saved) and the human output lists the blocks after the result.
pub fn tools_call_showing(
    name: &str,
    r: &ToolsCallResult,
    pictures: &Pictures,
) -> Result<Success, CliError> {
    let Some(content) = content_of(r) else {
        return Ok(tools_call(name, r));
    };
    let shown = show(&r.call_id, &content, pictures)?;
    let mut success = tools_call(name, r);
    let mut data = Map::new();
    if r.result.is_some() {
        data.insert("result".into(), success.data.take());
    } else {
        // "Result (…)" heading only: no JSON result to show.
        success.human = success.human.lines().next().unwrap_or("").to_owned() + "\n";
    }
    data.insert("content".into(), Value::Array(shown.blocks));
    success.data = Value::Object(data);
    success.human.push_str("Content\n");
    success.human.push_str(&render::indent(&shown.human, 2));
    Ok(success)
}

/// `tools call` (§L7.3): `data` is the tool's result verbatim; `meta.call` describes the call.
pub fn tools_call(name: &str, r: &ToolsCallResult) -> Success {
    let mut human = format!(
        "Result ({name} on {}, {} ms)\n",
        render::clean_line(&r.alias),
        r.duration_ms
    );
    let result = r.result.clone().unwrap_or(Value::Null);
    human.push_str(&render::indent(&pretty_json(&result), 2));
    let mut success = Success::new(result, human);
    success.meta.insert(
        "call".into(),
        json!({"callId": r.call_id, "sessionId": r.session_id, "alias": r.alias, "durationMs": r.duration_ms}),
    );
    success
}
