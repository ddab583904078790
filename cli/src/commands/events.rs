//! `appduct events ls | tail | since` (§L8).

use std::ffi::OsString;

use appduct_protocol::control::{
    AppEventData, DeviceRefusedData, EventData, EventKind, EventNotification, EventsList,
    EventsListParams, EventsListResult, EventsSince, EventsSinceParams, EventsSinceResult,
    SubscribeParams,
};
use appduct_protocol::signature::{render_event_signature, summarize_description};
use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::Command;
use super::args::{
    SelectorArgs, SelectorValueArgs, effective_limit, glob, non_negative_int, opt,
    optional_selector, positive_int, selector_and_value,
};
use super::parse::{missing_verb, unknown_verb};
use super::tools::describe_session;
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{self, Output, Reply, Success};
use crate::render::{self, pretty_json, to_value};
use crate::signals::Interrupts;

#[derive(Debug, Args)]
pub struct EventsNoun {
    #[command(subcommand)]
    pub verb: Option<EventsVerb>,
}

#[derive(Debug, Subcommand)]
pub enum EventsVerb {
    /// List the events a session's app declares
    Ls(EventsLsArgs),
    /// Print app events as they happen (Ctrl-C to stop)
    Tail(EventsTailArgs),
    /// Print retained app events after a cursor
    #[command(override_usage = "appduct events since [OPTIONS] [SELECTOR] <CURSOR>")]
    Since(EventsSinceArgs),
    #[command(external_subcommand)]
    Unknown(Vec<OsString>),
}

#[derive(Debug, Args)]
pub struct EventsLsArgs {
    #[command(flatten)]
    pub selector: SelectorArgs,
    /// Name glob ("*" matches any run of characters)
    #[arg(long, value_name = "GLOB")]
    pub name: Option<String>,
    /// At most this many events (human default 50)
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<String>,
    /// Skip this many events
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub offset: Option<String>,
}

#[derive(Debug, Args)]
pub struct EventsTailArgs {
    #[command(flatten)]
    pub selector: SelectorArgs,
    /// Only app events whose name matches this glob
    #[arg(long, value_name = "GLOB")]
    pub name: Option<String>,
    /// Truncate payloads larger than N bytes
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub payload_max_bytes: Option<String>,
    /// Accepted and ignored (tail always follows)
    #[arg(long, hide = true)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct EventsSinceArgs {
    #[command(flatten)]
    pub positionals: SelectorValueArgs,
    /// Name glob
    #[arg(long, value_name = "GLOB")]
    pub name: Option<String>,
    /// Truncate payloads larger than N bytes
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub payload_max_bytes: Option<String>,
    /// At most this many events
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<String>,
}

pub fn validate(noun: EventsNoun) -> Result<Command, CliError> {
    match noun.verb {
        None => Err(missing_verb("events")),
        Some(EventsVerb::Unknown(words)) => Err(unknown_verb("events", &words)),
        Some(EventsVerb::Ls(a)) => Ok(Command::EventsLs(
            EventsListParams::default()
                .with_selector(optional_selector("events ls", a.selector.positionals)?)
                .with_name(glob(a.name)?)
                .with_limit(opt(a.limit, |v| positive_int("--limit", v))?)
                .with_offset(opt(a.offset, |v| non_negative_int("--offset", v))?),
        )),
        Some(EventsVerb::Tail(a)) => Ok(Command::EventsTail(
            SubscribeParams::default()
                .with_session_selector(optional_selector("events tail", a.selector.positionals)?)
                .with_kinds(Some(vec![EventKind::AppEvent]))
                .with_name(glob(a.name)?)
                .with_payload_max_bytes(opt(a.payload_max_bytes, |v| {
                    positive_int("--payload-max-bytes", v)
                })?),
        )),
        Some(EventsVerb::Since(a)) => {
            let (selector, cursor) =
                selector_and_value("events since", "CURSOR", a.positionals.positionals)?;
            let since = non_negative_int("<cursor>", &cursor)?;
            Ok(Command::EventsSince(
                EventsSinceParams::default()
                    .with_selector(selector)
                    .with_since(Some(since))
                    .with_limit(opt(a.limit, |v| positive_int("--limit", v))?)
                    .with_name(glob(a.name)?)
                    .with_payload_max_bytes(opt(a.payload_max_bytes, |v| {
                        positive_int("--payload-max-bytes", v)
                    })?),
            ))
        }
    }
}

/// `events ls`: the human default page is 50, JSON has none; `data` echoes what the user gave.
pub async fn run_ls(
    globals: &Globals,
    out: &Output,
    p: &EventsListParams,
) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let session = describe_session(&client, &dir, p.selector.as_deref()).await?;
    let params = EventsListParams::default()
        .with_selector(Some(session.session_id.clone()))
        .with_name(p.name.clone())
        .with_limit(effective_limit(p.limit, out.flags.json))
        .with_offset(p.offset);
    let result = client
        .call::<EventsList>(params)
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    Ok(events_ls(
        &result,
        &session.alias,
        p.name.as_deref(),
        p.limit,
        p.offset,
    ))
}

/// `events since`.
pub async fn run_since(
    globals: &Globals,
    out: &Output,
    p: &EventsSinceParams,
) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let result = client
        .call::<EventsSince>(p.clone())
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    Ok(events_since(&result, p.selector.as_deref(), out))
}

/// `events tail`: NDJSON or one human line per app event on stdout until SIGINT or SIGTERM
/// (exit 0) or the daemon closes the stream (a stderr note, exit 0). Failures before the
/// subscription is confirmed are rendered as usual.
pub async fn run_tail(
    globals: &Globals,
    out: &Output,
    p: &SubscribeParams,
) -> Result<Reply, CliError> {
    let mut signals = Interrupts::new(false)
        .map_err(|e| CliError::internal(format!("cannot install signal handlers: {e}")))?;
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let alias = match &p.session_selector {
        Some(sel) => Some(describe_session(&client, &dir, Some(sel)).await?.alias),
        None => None,
    };
    // Human output also shows why the daemon refused a device (§D6.3), unless a name filter
    // asks for app events only; `--json` keeps its stream of `app_event` items.
    let mut kinds = vec![EventKind::AppEvent];
    if !out.flags.json && p.name.is_none() {
        kinds.push(EventKind::DeviceRefused);
    }
    let params = p.clone().with_kinds(Some(kinds));
    let mut stream = client
        .subscribe(params)
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    out.notice(&events_tail_notice(alias.as_deref()));
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
                    } else if let Some(line) = event_line(&n, out) {
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

/// `events ls` (§L8.1). `name`, `limit` and `offset` are what the user gave.
pub fn events_ls(
    result: &EventsListResult,
    alias: &str,
    name: Option<&str>,
    limit: Option<u64>,
    offset: Option<u64>,
) -> Success {
    let mut data = Map::new();
    data.insert("events".into(), to_value(&result.events));
    data.insert("total".into(), json!(result.total));
    data.insert("hasMore".into(), json!(result.has_more));
    if let Some(n) = name {
        data.insert("name".into(), json!(n));
    }
    if let Some(l) = limit {
        data.insert("limit".into(), json!(l));
    }
    if let Some(o) = offset {
        data.insert("offset".into(), json!(o));
    }

    let alias = render::clean_line(alias);
    let human = if result.events.is_empty() {
        if result.total > 0 {
            format!(
                "No events at offset {}; {} matching events in total.\n",
                result.offset, result.total
            )
        } else if let Some(n) = name {
            format!("No events match \"{n}\" on {alias}.\n")
        } else {
            format!("No events declared on {alias}.\n")
        }
    } else {
        let mut out = format!("Events on {alias}\n");
        for e in &result.events {
            out.push_str(&format!(
                "  {}\n",
                render::clean_line(&render_event_signature(&e.name, e.payload_schema.as_ref()))
            ));
            let summary = summarize_description(&e.description);
            if !summary.is_empty() {
                out.push_str(&format!("    {summary}\n"));
            }
        }
        if let Some(exact) = name.filter(|n| !n.contains('*'))
            && let Some(e) = result.events.iter().find(|e| e.name == exact)
        {
            let text = e
                .payload_schema
                .as_ref()
                .map_or_else(|| "(none)".to_owned(), pretty_json);
            out.push_str("  Payload schema:\n");
            out.push_str(&render::indent(&text, 4));
        }
        let shown = result.events.len() as u64;
        if shown < result.total {
            out.push_str(&format!(
                "\nShowing {shown} of {} events (offset {}). Narrow with --name <glob>",
                result.total, result.offset
            ));
            if result.has_more {
                out.push_str(&format!(
                    ", or page with --offset {}",
                    result.offset + shown
                ));
            }
            out.push_str(".\n");
        }
        out
    };
    Success::new(Value::Object(data), human)
}

/// The stderr notice of `events tail` before the first event (§L8.2).
pub fn events_tail_notice(alias: Option<&str>) -> String {
    match alias {
        Some(alias) => format!(
            "Listening for app events on {} (Ctrl-C to stop)…",
            render::clean_line(alias)
        ),
        None => "Listening for app events on all sessions (Ctrl-C to stop)…".to_owned(),
    }
}

/// One human line for an `app_event` (§L8.2) or a `device_refused` (§D6.3); `None` for other
/// kinds.
/// `2026-11-30T09:12:03Z  pixel-8  checkout_completed  {"orderId":"A-17"}`.
pub fn event_line(n: &EventNotification, out: &Output) -> Option<String> {
    let at = render::iso_seconds_from_unix_ms(i64::try_from(n.ts).unwrap_or(i64::MAX))
        .unwrap_or_else(|| n.ts.to_string());
    if let EventData::DeviceRefused(r) = &n.data {
        return Some(refusal_line(&at, n, r));
    }
    let EventData::AppEvent(data) = &n.data else {
        return None;
    };
    // Alias, event name and payload are app-supplied (SECURITY.md §4.13).
    let who = render::clean_line(
        n.alias
            .as_deref()
            .or(n.session_id.as_deref())
            .unwrap_or("-"),
    );
    let payload = match data {
        AppEventData::Full { payload, .. } => out.inline_json(payload),
        AppEventData::Truncated {
            payload_preview,
            payload_bytes,
            ..
        } => format!(
            "{}… ({payload_bytes} bytes, truncated)",
            render::escape_controls(payload_preview)
        ),
    };
    Some(format!(
        "{at}  {who}  {}  {payload}\n",
        render::clean_line(data.name())
    ))
}

/// `2026-11-30T09:12:03Z  -  refused  1008 expected_claim_or_resume  session_claim: field
/// `protocol_version`: is missing` (the session is `-` before the ack). Every part but the code
/// is daemon text that may quote a peer's escaped `type`; control characters are dropped.
fn refusal_line(at: &str, n: &EventNotification, r: &DeviceRefusedData) -> String {
    let who = render::clean_line(
        n.alias
            .as_deref()
            .or(n.session_id.as_deref())
            .unwrap_or("-"),
    );
    let why = refusal_text(r.frame_type.as_deref(), r.field.as_deref(), &r.problem);
    let mut line = format!(
        "{at}  {who}  refused  {} {}  {}",
        r.code,
        render::clean_line(&r.reason),
        render::clean_line(&why)
    );
    if r.suppressed > 0 {
        line.push_str(&format!(" ({} more not reported)", r.suppressed));
    }
    line.push('\n');
    line
}

/// `frame_type: field `f`: problem`, as the daemon's log says it.
fn refusal_text(frame_type: Option<&str>, field: Option<&str>, problem: &str) -> String {
    let mut text = String::new();
    if let Some(t) = frame_type {
        text.push_str(t);
        text.push_str(": ");
    }
    if let Some(f) = field {
        text.push_str("field `");
        text.push_str(f);
        text.push_str("`: ");
    }
    text.push_str(problem);
    text
}

/// `events since` (§L8.3): one envelope with `{events, cursor, dropped, remaining}`; human
/// event lines and a dim continuation note. `selector` is the one the user gave.
pub fn events_since(r: &EventsSinceResult, selector: Option<&str>, out: &Output) -> Success {
    let mut human = String::new();
    for n in &r.events {
        if let Some(line) = event_line(n, out) {
            human.push_str(&line);
        }
    }
    let next = match selector {
        Some(sel) => format!("appduct events since {sel} {}", r.cursor),
        None => format!("appduct events since {}", r.cursor),
    };
    let paint = out.stdout_paint;
    human.push_str(&paint.dim(&format!(
        "cursor {} · dropped {} · remaining {} — next: {next}",
        r.cursor, r.dropped, r.remaining
    )));
    human.push('\n');
    if r.dropped > 0 {
        human.push_str(&paint.dim(&format!(
            "{} events were evicted before they were read.",
            r.dropped
        )));
        human.push('\n');
    }
    if r.remaining > 0 {
        human.push_str(&paint.dim(&format!(
            "{} more; run the next command to continue.",
            r.remaining
        )));
        human.push('\n');
    }
    Success::new(to_value(r), human)
}
