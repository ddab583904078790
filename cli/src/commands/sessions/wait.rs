//! `appduct sessions link --wait[=MS]` (issue #23): after the link is minted (and delivered),
//! wait until the app claims its session and its tool registry arrives, as the MCP bridge's
//! `appduct_wait_for_session` does, with the same facts and words
//! (`appduct_client::session_wait`):
//!
//! - the app refused the link: `unknown_session` (exit 71) at once, `details: {selector, refused,
//!   hint}`;
//! - the link expired or was revoked before a claim: `unknown_session`;
//! - nothing claimed it in time: `tool_timeout` (exit 72), the type the wait built-ins use,
//!   `details: {sessionId, timeoutMs, hint}` with the hint naming the likely cause by link kind;
//! - claimed: success, with `session: {sessionId, alias, registry, toolCount}`; `registry` is
//!   `pending` when the app sent no tools by the deadline (at least
//!   [`REGISTRY_GRACE`](appduct_client::session_wait::REGISTRY_GRACE) after the claim).

use std::time::Duration;

use appduct_client::client::{ClientError, ControlClient, EventStream};
use appduct_client::session_wait::{
    Frontend, PendingLink, WaitFailure, refusal_failure, registry_deadline, unclaimed_hint,
};
use appduct_client::state_dir::StateDir;
use appduct_protocol::control::{
    EventData, EventKind, RegistryState, SelectorParams, SessionSummary, SessionsDescribe,
    SubscribeParams,
};
use appduct_protocol::errors::ErrorType;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::connect;
use crate::error::CliError;
use crate::output::Success;
use crate::render::{Row, Section, sections};

/// `--wait` without a value: as long as `appduct_wait_for_session` waits by default.
pub const DEFAULT_WAIT_MS: u64 = 120_000;
/// The largest `--wait=MS`, as the bridge's `timeoutMs`.
pub const MAX_WAIT_MS: u64 = 1_500_000;

fn failure(f: WaitFailure) -> CliError {
    CliError::from_wire(f.error_type.as_str(), f.message, Some(f.details))
}

enum Described {
    Live(SessionSummary),
    Pending(PendingLink),
}

async fn describe(client: &ControlClient, dir: &StateDir, id: &str) -> Result<Described, CliError> {
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
            Err(connect::client_error(&e, dir))
        }
    }
}

/// What ended one phase of the wait.
enum Outcome {
    Claimed,
    Changed,
    TimedOut,
}

/// The next event for `id` that `decide` acts on, or the deadline.
async fn next_for(
    stream: &mut EventStream,
    id: &str,
    until: Instant,
    mut decide: impl FnMut(&EventData) -> Option<Result<Outcome, CliError>>,
) -> Result<Outcome, CliError> {
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            () = tokio::time::sleep_until(until) => return Ok(Outcome::TimedOut),
        };
        let Some(e) = event else {
            return Err(CliError::connection(format!(
                "The connection to the appduct daemon closed while waiting for session {id}"
            )));
        };
        if e.session_id.as_deref() != Some(id) {
            continue;
        }
        if let Some(r) = decide(&e.data) {
            return r;
        }
    }
}

/// Waits for session `id` to be claimed and ready; `link` is the success of minting it, to
/// which the session is added.
pub async fn wait_ready(
    client: &ControlClient,
    dir: &StateDir,
    id: &str,
    timeout_ms: u64,
    mut link: Success,
) -> Result<Success, CliError> {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    // Listen first, then look, so a claim or a refusal in between is not missed.
    let mut stream = client
        .subscribe(SubscribeParams::default().with_kinds(Some(vec![
            EventKind::SessionClaimed,
            EventKind::LinkExpired,
            EventKind::LinkRefused,
            EventKind::SessionRevoked,
            EventKind::ToolsChanged,
        ])))
        .await
        .map_err(|e| connect::client_error(&e, dir))?;
    if let Described::Pending(pending) = describe(client, dir, id).await? {
        if let Some(reason) = pending.refused {
            return Err(failure(refusal_failure(
                id,
                reason,
                Some(&pending),
                Frontend::Cli,
            )));
        }
        let outcome = next_for(&mut stream, id, deadline, |data| match data {
            EventData::SessionClaimed(_) => Some(Ok(Outcome::Claimed)),
            EventData::LinkRefused(r) => Some(Err(failure(refusal_failure(
                id,
                r.reason,
                Some(&pending),
                Frontend::Cli,
            )))),
            EventData::LinkExpired(_) | EventData::SessionRevoked(_) => {
                let how = if matches!(data, EventData::LinkExpired(_)) {
                    "expired"
                } else {
                    "was revoked"
                };
                Some(Err(CliError::from_wire(
                    ErrorType::UnknownSession.as_str(),
                    format!("The link for session {id} {how} before an app claimed it"),
                    Some(json!({"selector": id})),
                )))
            }
            _ => None,
        })
        .await?;
        if let Outcome::TimedOut = outcome {
            return Err(CliError::from_wire(
                ErrorType::ToolTimeout.as_str(),
                format!("No app claimed session {id} within {timeout_ms} ms"),
                Some(json!({
                    "sessionId": id,
                    "timeoutMs": timeout_ms,
                    "hint": unclaimed_hint(Some(&pending), Frontend::Cli),
                })),
            ));
        }
    }
    let until = registry_deadline(Instant::now(), deadline);
    loop {
        let summary = match describe(client, dir, id).await? {
            Described::Live(s) => s,
            Described::Pending(_) => {
                return Err(CliError::from_wire(
                    ErrorType::UnknownSession.as_str(),
                    format!("Session {id} ended before its tools arrived"),
                    Some(json!({"selector": id})),
                ));
            }
        };
        if summary.registry == RegistryState::Received {
            return Ok(ready(link, &summary));
        }
        let outcome = next_for(&mut stream, id, until, |data| match data {
            EventData::ToolsChanged(_) | EventData::SessionRevoked(_) => Some(Ok(Outcome::Changed)),
            _ => None,
        })
        .await?;
        if let Outcome::TimedOut = outcome {
            link = ready(link, &summary);
            return Ok(link);
        }
    }
}

/// The link's success with the claimed session added: `data.session` and a human block.
fn ready(mut link: Success, s: &SessionSummary) -> Success {
    if let Value::Object(map) = &mut link.data {
        map.insert(
            "session".into(),
            json!({
                "sessionId": s.session_id,
                "alias": s.alias,
                "registry": s.registry,
                "toolCount": s.tool_count,
            }),
        );
    }
    let tools = match s.registry {
        RegistryState::Received => format!("{} registered", s.tool_count),
        RegistryState::Pending => "not sent yet (registry pending)".to_owned(),
    };
    link.human = sections(&[Section::new(
        "Session ready",
        vec![
            Row::field("Session", s.session_id.as_str()),
            Row::field("Alias", s.alias.as_str()),
            Row::field("Tools", tools),
        ],
    )]);
    link
}
