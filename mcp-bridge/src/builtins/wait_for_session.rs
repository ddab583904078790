//! `appduct_wait_for_session` (§M8.2): waits, on its own connection, until the app given a
//! link claims its session and its tool registry has arrived (issue #23: "wait means ready"),
//! or the app refuses the link (typed, at once), or the wait times out (with a hint naming the
//! likely cause by link kind).

use appduct_client::client::{ClientError, ControlClient};
use appduct_client::session_wait::{
    Frontend, PendingLink, WaitFailure, refusal_failure, registry_deadline, unclaimed_hint,
};
use appduct_protocol::control::{
    EventData, EventKind, RegistryState, SelectorParams, SessionSummary, SessionsDescribe,
    SubscribeParams,
};
use appduct_protocol::errors::ErrorType;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::time::Instant;

use super::builtin::{
    Call, DEFAULT_WAIT_MS, Definition, Entry, READ_ONLY, Reply, output, wait_timeout_prop,
};
use crate::context::{BridgeContext, unless_cancelled};
use crate::error::ToolFailure;
use crate::wait::{Step, Waiter, timeout_failure};

pub const NAME: &str = "appduct_wait_for_session";

pub const BUILTIN: Entry = Entry {
    name: NAME,
    definition,
    handler,
};

fn definition() -> Definition {
    Definition {
        title: "Wait for session",
        description: "Wait until the app given a link by appduct_connect claims its session and sends its tools; returns alias, registry (received, or pending if no tools came in time) and toolCount. A refused link fails at once (unknown_session, details.refused, hint); no claim in time: tool_timeout with a hint.",
        hints: READ_ONLY,
        input: json!({
            "type": "object",
            "properties": {
                "sessionId": {"type": "string", "minLength": 1, "description": "sessionId returned by appduct_connect."},
                "timeoutMs": wait_timeout_prop()
            },
            "required": ["sessionId"],
            "additionalProperties": false
        }),
        output: Some(
            json!({"type":"object","properties":{"sessionId":{"type":"string"},"alias":{"type":"string"},"claimed":{"type":"boolean"},"registry":{"type":"string","enum":["received","pending"]},"toolCount":{"type":"integer"}},"required":["sessionId","alias","claimed","registry","toolCount"]}),
        ),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    session_id: String,
    timeout_ms: Option<u64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Output {
    session_id: String,
    alias: String,
    claimed: bool,
    /// Issue #23: `received` once the app's first tool snapshot arrived; `pending` when the
    /// wait ended first (then `appduct_list_tools` may still be empty).
    registry: RegistryState,
    tool_count: u64,
}

impl Output {
    fn of(s: SessionSummary) -> Self {
        Self {
            session_id: s.session_id,
            alias: s.alias,
            claimed: true,
            registry: s.registry,
            tool_count: s.tool_count,
        }
    }
}

fn handler(call: Call<'_>) -> Reply<'_> {
    Box::pin(async move {
        let args: Args = call.args.parse()?;
        let out = unless_cancelled(call.context, run(call.bridge, call.context, args)).await?;
        output(&out)
    })
}

fn wait_failure(f: WaitFailure) -> ToolFailure {
    ToolFailure::new(f.error_type, f.message).with_details(f.details)
}

/// Where a session stands, by `sessions.describe`.
enum Described {
    Live(SessionSummary),
    Pending(PendingLink),
}

async fn describe(client: &ControlClient, id: &str) -> Result<Described, ToolFailure> {
    match client
        .call::<SessionsDescribe>(SelectorParams::default().with_selector(Some(id.to_owned())))
        .await
    {
        Ok(s) => Ok(Described::Live(s)),
        Err(e) => {
            if let ClientError::Rpc {
                error_type: ErrorType::UnknownSession,
                details,
                ..
            } = &e
                && let Some(link) = PendingLink::from_details(details.as_deref())
            {
                return Ok(Described::Pending(link));
            }
            Err(ToolFailure::from_client(&e))
        }
    }
}

async fn run(
    bridge: &BridgeContext,
    context: &RequestContext<RoleServer>,
    args: Args,
) -> Result<Output, ToolFailure> {
    let id = args.session_id;
    let timeout_ms = args.timeout_ms.unwrap_or(DEFAULT_WAIT_MS);
    let mut waiter = Waiter::new(bridge, context, timeout_ms);
    let extra = bridge
        .connector
        .connect(true)
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    // Listener first, then describe, so a claim, a refusal or the registry between the two is
    // not missed (a reply that reflects a change follows the change's event).
    let mut stream = extra
        .subscribe(SubscribeParams::default().with_kinds(Some(vec![
            EventKind::SessionClaimed,
            EventKind::LinkExpired,
            EventKind::LinkRefused,
            EventKind::SessionRevoked,
            EventKind::ToolsChanged,
        ])))
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    let closed = || {
        ToolFailure::execution(format!(
            "the connection to the appduct daemon closed while waiting for session {id}"
        ))
        .with_details(json!({"sessionId": id}))
    };
    let deadline = waiter.deadline();
    match describe(&extra, &id).await? {
        Described::Live(s) if s.registry == RegistryState::Received => return Ok(Output::of(s)),
        Described::Live(_) => {}
        Described::Pending(link) => {
            if let Some(reason) = link.refused {
                return Err(wait_failure(refusal_failure(
                    &id,
                    reason,
                    Some(&link),
                    Frontend::Mcp,
                )));
            }
            let what = format!("session {id}");
            waiter
                .run(
                    &mut stream,
                    deadline,
                    &what,
                    closed,
                    || {
                        timeout_failure(&format!("a claim of session {id}"), timeout_ms)
                            .with_details(json!({
                                "sessionId": id,
                                "hint": unclaimed_hint(Some(&link), Frontend::Mcp),
                            }))
                    },
                    |e| {
                        if e.session_id.as_deref() != Some(id.as_str()) {
                            return Step::Continue;
                        }
                        match &e.data {
                            EventData::SessionClaimed(_) => Step::Done(Ok(())),
                            EventData::LinkRefused(r) => Step::Done(Err(wait_failure(
                                refusal_failure(&id, r.reason, Some(&link), Frontend::Mcp),
                            ))),
                            EventData::LinkExpired(_) | EventData::SessionRevoked(_) => {
                                Step::Done(Err(ended_before_claim(&id, &e.data)))
                            }
                            _ => Step::Continue,
                        }
                    },
                )
                .await?;
        }
    }
    // Claimed: wait for the registry until the deadline, and at least a short grace after the
    // claim; then answer with the registry's state either way.
    let until = registry_deadline(Instant::now(), deadline);
    let what = format!("the tools of session {id}");
    loop {
        let summary = match describe(&extra, &id).await? {
            Described::Live(s) => s,
            // Claimed, then revoked or expired meanwhile.
            Described::Pending(_) => {
                return Err(ToolFailure::new(
                    ErrorType::UnknownSession,
                    format!("session {id} ended before its tools arrived"),
                )
                .with_details(json!({"selector": id})));
            }
        };
        if summary.registry == RegistryState::Received {
            return Ok(Output::of(summary));
        }
        let pending = summary.clone();
        let outcome = waiter
            .run(
                &mut stream,
                until,
                &what,
                closed,
                || ToolFailure::new(ErrorType::ToolTimeout, String::new()),
                |e| {
                    if e.session_id.as_deref() != Some(id.as_str()) {
                        return Step::Continue;
                    }
                    match &e.data {
                        EventData::ToolsChanged(_) | EventData::SessionRevoked(_) => {
                            Step::Done(Ok(()))
                        }
                        _ => Step::Continue,
                    }
                },
            )
            .await;
        match outcome {
            // Something changed: describe again.
            Ok(()) => {}
            Err(f) if f.error_type == ErrorType::ToolTimeout => return Ok(Output::of(pending)),
            Err(f) => return Err(f),
        }
    }
}

fn ended_before_claim(id: &str, data: &EventData) -> ToolFailure {
    let how = if matches!(data, EventData::LinkExpired(_)) {
        "expired"
    } else {
        "was revoked"
    };
    ToolFailure::new(
        ErrorType::UnknownSession,
        format!(
            "the link for session {id} {how} before it was claimed; call appduct_connect again"
        ),
    )
    .with_details(json!({"selector": id}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_arguments_read_every_schema_property() {
        super::super::builtin::assert_reads_every_property::<Args>(&definition());
    }
}
