//! `appduct events ls | tail | since` (05 §8).

use appduct_protocol::control::{
    EventKind, EventsList, EventsListParams, EventsSince, EventsSinceParams, SubscribeParams,
};

use crate::command::Globals;
use crate::connect::{self, Contact};
use crate::dispatch::Reply;
use crate::error::CliError;
use crate::output::{self, Output, Success};
use crate::signals::Interrupts;
use crate::tools::describe_session;
use crate::views;

/// `events ls`: the human default page is 50, JSON has none; `data` echoes what the user gave.
pub async fn ls(
    globals: &Globals,
    out: &Output,
    p: &EventsListParams,
) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let session = describe_session(&client, &dir, p.selector.as_deref()).await?;
    let params = EventsListParams::default()
        .with_selector(Some(session.session_id.clone()))
        .with_name(p.name.clone())
        .with_limit(views::effective_limit(p.limit, out.flags.json))
        .with_offset(p.offset);
    let result = client
        .call::<EventsList>(params)
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    Ok(views::events_ls(
        &result,
        &session.alias,
        p.name.as_deref(),
        p.limit,
        p.offset,
    ))
}

/// `events since`.
pub async fn since(
    globals: &Globals,
    out: &Output,
    p: &EventsSinceParams,
) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let result = client
        .call::<EventsSince>(p.clone())
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    Ok(views::events_since(&result, p.selector.as_deref(), out))
}

/// `events tail`: NDJSON or one human line per app event on stdout until SIGINT or SIGTERM
/// (exit 0) or the daemon closes the stream (a stderr note, exit 0). Failures before the
/// subscription is confirmed are rendered as usual.
pub async fn tail(globals: &Globals, out: &Output, p: &SubscribeParams) -> Result<Reply, CliError> {
    let mut signals = Interrupts::new(false)
        .map_err(|e| CliError::internal(format!("cannot install signal handlers: {e}")))?;
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let alias = match &p.session_selector {
        Some(sel) => Some(describe_session(&client, &dir, Some(sel)).await?.alias),
        None => None,
    };
    let params = p.clone().with_kinds(Some(vec![EventKind::AppEvent]));
    let mut stream = client
        .subscribe(params)
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    out.notice(&views::events_tail_notice(alias.as_deref()));
    loop {
        tokio::select! {
            _ = signals.recv() => return Ok(Reply::Done(0)),
            item = stream.next() => match item {
                Some(n) => {
                    if out.flags.json {
                        if n.kind() == EventKind::AppEvent
                            && let Ok(line) = serde_json::to_string(&n)
                        {
                            output::write_stdout(&format!("{line}\n"));
                        }
                    } else if let Some(line) = views::event_line(&n, out) {
                        output::write_stdout(&line);
                    }
                }
                None => {
                    out.notice("The daemon closed the stream.");
                    return Ok(Reply::Done(0));
                }
            }
        }
    }
}
