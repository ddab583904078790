//! The wait built-ins (06 §6.8.2, §6.8.8): each opens its own connection for one
//! `events.subscribe` filter, closes it when the wait ends, sends heartbeats (06 §6.11.3) and
//! fails within a second when that connection closes.

use std::time::Duration;

use appduct_daemon::client::{ClientError, EventStream};
use appduct_protocol::control::{
    EventData, EventKind, SelectorParams, SessionsDescribe, SubscribeParams,
};
use appduct_protocol::errors::ErrorType;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::args::Args;
use crate::builtins::{DEFAULT_PAYLOAD_MAX_BYTES, flat_event};
use crate::error::ToolFailure;
use crate::progress::Progress;
use crate::server::Inner;

/// Default `timeoutMs` of both waits (06 §6.4).
pub const DEFAULT_WAIT_MS: u64 = 120_000;

enum Step<T> {
    Done(Result<T, ToolFailure>),
    Continue,
}

/// Runs a wait loop: `on_event` decides per event; timeout, cancel, a closed connection and
/// heartbeats are handled here.
#[allow(clippy::too_many_arguments)]
async fn wait_loop<T>(
    inner: &Inner,
    context: &RequestContext<RoleServer>,
    stream: &mut EventStream,
    timeout_ms: u64,
    what: &str,
    closed: impl Fn() -> ToolFailure,
    timed_out: impl Fn() -> ToolFailure,
    mut on_event: impl FnMut(appduct_protocol::control::EventNotification) -> Step<T>,
) -> Result<T, ToolFailure> {
    let mut progress = Progress::for_request(context);
    let started = Instant::now();
    let deadline = started + Duration::from_millis(timeout_ms);
    let beat = inner.options.heartbeat_interval;
    let mut next_beat = started + beat;
    loop {
        tokio::select! {
            biased;
            () = context.ct.cancelled() => {
                return Err(ToolFailure::new(ErrorType::ToolCancelled, format!("the wait for {what} was cancelled")));
            }
            event = stream.next() => match event {
                Some(e) => match on_event(e) {
                    Step::Done(r) => return r,
                    Step::Continue => {}
                },
                None => return Err(closed()),
            },
            () = tokio::time::sleep_until(deadline) => return Err(timed_out()),
            () = tokio::time::sleep_until(next_beat), if progress.is_some() => {
                next_beat += beat;
                if let Some(p) = progress.as_mut() {
                    let elapsed = started.elapsed().as_millis() as f64;
                    p.report_with_total(elapsed, timeout_ms as f64, format!("waiting for {what}")).await;
                }
            }
        }
    }
}

fn timeout_failure(what: &str, timeout_ms: u64) -> ToolFailure {
    ToolFailure::new(
        ErrorType::ToolTimeout,
        format!("{what} did not happen within {timeout_ms} ms"),
    )
    .with_details(json!({"timeoutMs": timeout_ms}))
}

pub async fn for_session(
    inner: &Inner,
    context: &RequestContext<RoleServer>,
    args: &Args,
) -> Result<Value, ToolFailure> {
    let id = args.str("sessionId").unwrap_or_default().to_owned();
    let timeout_ms = args.u64("timeoutMs").unwrap_or(DEFAULT_WAIT_MS);
    let extra = inner
        .connector
        .connect(true)
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    // Listener first, then describe, so a claim between the two is not missed.
    let mut stream = extra
        .subscribe(SubscribeParams::default().with_kinds(Some(vec![
            EventKind::SessionClaimed,
            EventKind::LinkExpired,
            EventKind::SessionRevoked,
        ])))
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    match extra
        .call::<SessionsDescribe>(SelectorParams::default().with_selector(Some(id.clone())))
        .await
    {
        Ok(s) => {
            return Ok(json!({"sessionId": s.session_id, "alias": s.alias, "claimed": true}));
        }
        Err(ClientError::Rpc {
            error_type: ErrorType::UnknownSession,
            details,
            ..
        }) if details
            .as_deref()
            .and_then(|d| d.get("pending"))
            .and_then(Value::as_bool)
            == Some(true) => {}
        Err(e) => return Err(ToolFailure::from_client(&e)),
    }
    let what = format!("session {id}");
    wait_loop(
        inner,
        context,
        &mut stream,
        timeout_ms,
        &what,
        || {
            ToolFailure::execution(format!(
                "the connection to the appduct daemon closed while waiting for session {id}"
            ))
            .with_details(json!({"sessionId": id}))
        },
        || timeout_failure(&format!("a claim of session {id}"), timeout_ms),
        |e| {
            if e.session_id.as_deref() != Some(id.as_str()) {
                return Step::Continue;
            }
            match &e.data {
                EventData::SessionClaimed(_) => Step::Done(Ok(json!({
                    "sessionId": id,
                    "alias": e.alias.clone().unwrap_or_default(),
                    "claimed": true,
                }))),
                EventData::LinkExpired(_) | EventData::SessionRevoked(_) => {
                    let how = if matches!(e.data, EventData::LinkExpired(_)) {
                        "expired"
                    } else {
                        "was revoked"
                    };
                    Step::Done(Err(ToolFailure::new(
                        ErrorType::UnknownSession,
                        format!("the link for session {id} {how} before it was claimed; call appduct_connect again"),
                    )
                    .with_details(json!({"selector": id}))))
                }
                _ => Step::Continue,
            }
        },
    )
    .await
}

pub async fn for_event(
    inner: &Inner,
    context: &RequestContext<RoleServer>,
    args: &Args,
) -> Result<Value, ToolFailure> {
    let client = inner.control().await?;
    let session = inner.resolve(&client, args.str("selector")).await?;
    let glob = args.str("name").unwrap_or("*").to_owned();
    let timeout_ms = args.u64("timeoutMs").unwrap_or(DEFAULT_WAIT_MS);
    let extra = inner
        .connector
        .connect(true)
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    let mut stream = extra
        .subscribe(
            SubscribeParams::default()
                .with_session_selector(Some(session.session_id.clone()))
                .with_kinds(Some(vec![
                    EventKind::AppEvent,
                    EventKind::SessionRevoked,
                    EventKind::SessionExpired,
                ]))
                .with_name(Some(glob.clone()))
                .with_payload_max_bytes(Some(
                    args.u64("payloadMaxBytes")
                        .unwrap_or(DEFAULT_PAYLOAD_MAX_BYTES),
                ))
                .with_since(Some(args.u64("since").unwrap_or(0))),
        )
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    let dropped = stream.result().replay.as_ref().map_or(0, |r| r.dropped);
    let id = session.session_id.clone();
    let what = format!("event {glob}");
    wait_loop(
        inner,
        context,
        &mut stream,
        timeout_ms,
        &what,
        || {
            ToolFailure::execution(format!(
                "the connection to the appduct daemon closed while waiting for event {glob} on session {id}"
            ))
            .with_details(json!({"sessionId": id}))
        },
        || timeout_failure(&format!("an event matching {glob}"), timeout_ms),
        |e| match &e.data {
            EventData::AppEvent(_) => match flat_event(&e) {
                Some(mut m) => {
                    m.insert("dropped".into(), json!(dropped));
                    Step::Done(Ok(Value::Object(m)))
                }
                None => Step::Continue,
            },
            EventData::SessionRevoked(_) | EventData::SessionExpired(_) => {
                Step::Done(Err(ToolFailure::new(
                    ErrorType::UnknownSession,
                    format!(
                        "session {} ({}) ended while waiting for event {glob}",
                        session.alias, session.session_id
                    ),
                )
                .with_details(json!({"selector": session.session_id}))))
            }
            _ => Step::Continue,
        },
    )
    .await
}
