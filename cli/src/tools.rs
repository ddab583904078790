//! `appduct tools ls | describe | call` (05 §7.1–§7.3).

use std::io::IsTerminal as _;
use std::time::Duration;

use appduct_daemon::client::{CallProgress, ControlClient, ProgressStream, ToolCallError};
use appduct_daemon::state_dir::StateDir;
use appduct_protocol::control::{
    Caller, DEFAULT_CANCEL_REASON, SelectorParams, SessionSummary, SessionsDescribe,
    ToolsCallParams, ToolsCallResult, ToolsCancel, ToolsCancelParams, ToolsList, ToolsListParams,
    ToolsListResult,
};
use appduct_protocol::errors::ErrorType;

use crate::command::{Globals, ToolsCall, ToolsLs};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::output::{Output, Success};
use crate::progress::{Display, REDRAW_EVERY, Terminal};
use crate::signals::{Interrupt, Interrupts};
use crate::views;

/// After a cancel, the CLI gives the daemon this long to settle the call (2000 ms cancel grace
/// + 1000 ms, 05 §7.3).
pub const CANCEL_CONFIRM_WAIT: Duration = Duration::from_millis(3000);

/// The session a selector names (`sessions.describe`): its alias titles the renderings.
pub async fn describe_session(
    client: &ControlClient,
    dir: &StateDir,
    selector: Option<&str>,
) -> Result<SessionSummary, CliError> {
    client
        .call::<SessionsDescribe>(
            SelectorParams::default().with_selector(selector.map(str::to_owned)),
        )
        .await
        .map_err(|e| connect::client_error(&e, dir))
}

/// `tools ls`.
pub async fn ls(globals: &Globals, out: &Output, req: &ToolsLs) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let selector = req.params.selector.as_deref();
    let session = match describe_session(&client, &dir, selector).await {
        Err(e) if req.groups_only && e.kind() == ErrorType::UnknownSession => {
            let word = selector.unwrap_or_default();
            return Err(CliError::usage(format!(
                "\"{word}\" is not a session; --groups takes no value"
            ))
            .with_hint(format!(
                "To list the tools of a group, run \"appduct tools ls --group {word}\"."
            )));
        }
        other => other?,
    };
    let mut params = req.params.clone();
    params.selector = Some(session.session_id.clone());
    params.limit = if req.groups_only {
        Some(1)
    } else {
        views::effective_limit(req.params.limit, out.flags.json)
    };
    let result = client
        .call::<ToolsList>(params)
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    Ok(views::tools_ls(req, &result, &session.alias))
}

/// Every tool of a session, unpaged.
pub async fn list_all(
    client: &ControlClient,
    dir: &StateDir,
    session_id: &str,
) -> Result<ToolsListResult, CliError> {
    client
        .call::<ToolsList>(ToolsListParams::default().with_selector(Some(session_id.to_owned())))
        .await
        .map_err(|e| connect::client_error(&e, dir))
}

/// `tool_not_found` as `tools describe` reports it (05 §7.2).
pub fn tool_not_found(name: &str, alias: &str, all: &ToolsListResult) -> CliError {
    let available: Vec<&str> = all.tools.iter().map(|t| t.name()).collect();
    CliError::new(
        ErrorType::ToolNotFound,
        format!("Tool \"{name}\" is not registered on {alias}"),
    )
    .with_detail("name", name)
    .with_detail("alias", alias)
    .with_detail("available", available)
}

/// `tools describe`.
pub async fn describe(
    globals: &Globals,
    out: &Output,
    selector: Option<&str>,
    name: &str,
) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let session = describe_session(&client, &dir, selector).await?;
    let all = list_all(&client, &dir, &session.session_id).await?;
    match all.tools.iter().find(|t| t.name() == name) {
        Some(entry) => Ok(views::tools_describe(entry)),
        None => Err(tool_not_found(name, &session.alias, &all)),
    }
}

/// `cli-` and 32 random hex digits (05 §7.3).
pub fn new_call_id() -> Result<String, CliError> {
    let bytes = appduct_daemon::random::random_bytes::<16>()
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

/// The failure reported when the CLI gave up waiting after an interrupt (05 §7.3 step 3).
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

/// `tools call`: the call with its progress display and interrupt handling (05 §7.3).
pub async fn call(globals: &Globals, out: &Output, c: &ToolsCall) -> Result<Success, CliError> {
    let mut signals = Interrupts::new(false)
        .map_err(|e| CliError::internal(format!("cannot install signal handlers: {e}")))?;
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let call_id = new_call_id()?;
    let active = std::io::stderr().is_terminal() && !out.flags.json && !c.no_progress;
    let params = call_params(c, &call_id, active);
    type CallFuture<'a> =
        std::pin::Pin<Box<dyn Future<Output = Result<ToolsCallResult, ToolCallError>> + Send + 'a>>;
    let (mut stream, mut result): (Option<ProgressStream>, CallFuture<'_>) = if active {
        let (stream, pending) = client.call_tool_with_progress(params);
        (Some(stream), Box::pin(pending.result()))
    } else {
        (None, Box::pin(client.call_tool(params)))
    };
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
            Some(item) = next_progress(&mut stream) => terminal.display.update(&item),
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
        Ok(Ok(r)) => Ok(views::tools_call(&c.name, &r)),
        Ok(Err(e)) => Err(connect::tool_call_error(&e, &dir)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    #[test]
    fn call_ids_are_cli_and_32_hex_digits() {
        let id = new_call_id().unwrap();
        assert_eq!(id.len(), 36);
        assert!(id.starts_with("cli-"));
        assert!(
            id[4..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(id, new_call_id().unwrap());
    }

    #[test]
    fn call_params_always_carry_the_call_id_and_caller() {
        let c = ToolsCall {
            selector: Some("pixel-8".into()),
            name: "sum".into(),
            args: Map::new(),
            timeout_ms: Some(2000),
            no_progress: false,
        };
        let p = call_params(&c, "cli-00", true);
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            json!({"selector": "pixel-8", "name": "sum", "args": {}, "timeoutMs": 2000,
                   "caller": "cli", "callId": "cli-00", "progress": true})
        );
        let v = serde_json::to_value(call_params(&c, "cli-00", false)).unwrap();
        assert!(v.get("progress").is_none());
    }

    #[test]
    fn the_cli_settled_cancel_has_the_spec_details() {
        let e = cancelled_by_cli("cli-1");
        assert_eq!(e.exit_code(), 72);
        assert_eq!(e.error_type, "tool_cancelled");
        assert_eq!(
            e.details.clone().unwrap(),
            json!({"callId": "cli-1", "reason": "client_cancelled", "settledBy": "cli"})
        );
    }

    #[test]
    fn tool_not_found_lists_every_name() {
        let all: ToolsListResult = serde_json::from_value(json!({
            "tools": [{"name": "sum", "description": "", "group": null, "policy": "allow"}],
            "total": 1, "hasMore": false, "offset": 0, "groups": []
        }))
        .unwrap();
        let e = tool_not_found("sum2", "pixel-8", &all);
        assert_eq!(e.exit_code(), 72);
        assert_eq!(
            e.details.clone().unwrap(),
            json!({"name": "sum2", "alias": "pixel-8", "available": ["sum"]})
        );
    }
}
