//! `appduct_call_tool` (§M8.5): resolve once, look up, check the deadline, ask for consent
//! (elicitation or MRTR, §M10), call with a bridge-chosen callId, forward progress by that
//! callId (§M11) and cancel exactly that call (§M12).

use appduct_client::client::{CallProgress, ClientError, ControlClient, ToolCallError};
use appduct_client::random::random_bytes;
use appduct_protocol::canonical::args_sha256;
use appduct_protocol::control::{
    Caller, Consent, ConsentCreate, ConsentCreateParams, ConsentRecord, ConsentTake,
    ConsentTakeParams, MAX_LEASE_TTL_MS, PolicyDecision, SessionState, SessionSummary,
    SessionsLease, SessionsLeaseParams, ToolsCallParams, ToolsCallResult, ToolsCancel,
    ToolsCancelParams, ToolsListEntry,
};
use appduct_protocol::errors::ErrorType;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientResult, ElicitRequest, ElicitRequestParams,
    ElicitResult, ElicitationAction, ErrorCode, InputRequest, InputRequests, InputRequiredResult,
    ServerRequest,
};
use rmcp::service::{PeerRequestOptions, RequestContext, ServiceError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::time::Instant;

use super::builtin::{Call, Definition, Entry, Hints, Reply, selector_prop, tool_name_prop};
use crate::app_tools::{deadline_ms, lookup};
use crate::context::{BridgeContext, ConsentChannel, cancelled_failure, is_2026, unless_cancelled};
use crate::error::ToolFailure;
use crate::progress::{Progress, until};
use crate::tool_cache::{Cached, ToolCache};

pub const NAME: &str = "appduct_call_tool";

pub const BUILTIN: Entry = Entry {
    name: NAME,
    definition,
    handler,
};

fn definition() -> Definition {
    Definition {
        title: "Call app tool",
        description: "Run a tool the app registered with args matching its input schema and return the tool's result. timeoutMs may only shorten the tool's deadline. Tools whose policy is prompt ask the user first.",
        hints: Hints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        },
        input: json!({
            "type": "object",
            "properties": {
                "selector": selector_prop(),
                "name": tool_name_prop(),
                "args": {"type": "object", "description": "Arguments for the tool; default {}."},
                "timeoutMs": {"type": "integer", "minimum": 1000, "maximum": 600000, "description": "Shorter deadline in ms, at most the tool's deadlineMs."},
                "lease": {"type": "boolean", "description": "Reserve the session for this agent: other clients' calls are refused until 60 s past this call's deadline."}
            },
            "required": ["name"],
            "additionalProperties": false
        }),
        output: None,
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    selector: Option<String>,
    name: String,
    args: Option<Map<String, Value>>,
    timeout_ms: Option<u64>,
    lease: Option<bool>,
}

/// `_meta["appduct/call"]` (§M5): the call handle.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CallMeta<'a> {
    call_id: &'a str,
    session_id: &'a str,
    alias: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_ms: Option<u64>,
}

/// The `inputRequests` key of the MRTR consent request (§M10.4).
pub const CONSENT_INPUT_KEY: &str = "appduct_consent";
/// `tools.cancel` reason for an MCP client's cancel (§C10.6).
pub const CANCEL_REASON: &str = "mcp_client_cancelled";
/// Longest argument text in a consent message, in characters (§M10.2).
pub const MAX_PROMPT_ARGS_CHARS: usize = 2_048;

/// A fresh callId: `mcp_` + base64url of 16 CSPRNG bytes (§M8.5 step 6).
pub fn new_call_id() -> Result<String, ToolFailure> {
    let bytes = random_bytes::<16>()
        .map_err(|e| ToolFailure::new(ErrorType::InternalError, e.to_string()))?;
    Ok(format!("mcp_{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// The consent prompt (§M10.2).
pub fn prompt_message(
    name: &str,
    session: &SessionSummary,
    args: &Map<String, Value>,
    destructive: bool,
) -> String {
    let compact = serde_json::to_string(args).unwrap_or_else(|_| "{}".to_owned());
    let shown = match compact.char_indices().nth(MAX_PROMPT_ARGS_CHARS) {
        Some((cut, _)) => format!("{}…", &compact[..cut]),
        None => compact,
    };
    let mut text = format!(
        "appduct wants to run \"{name}\" on {} (session {}).\nArguments: {shown}\n",
        session.alias, session.session_id
    );
    if destructive {
        text.push_str("The app marks this tool as destructive.\n");
    }
    text.push_str("Allow this call?");
    text
}

/// The consent form; for a task-run call it names the task in `_meta` (the related-task
/// metadata of §M19.2).
fn elicit_params(message: String, task: Option<&str>) -> Result<ElicitRequestParams, ToolFailure> {
    let mut params = json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {"type": "object", "properties": {}},
    });
    if let Some(task) = task {
        params["_meta"] = json!({ crate::tasks::RELATED_TASK: {"taskId": task} });
    }
    serde_json::from_value(params).map_err(|e| {
        ToolFailure::new(
            ErrorType::InternalError,
            format!("cannot build the consent request: {e}"),
        )
    })
}

/// The call as validated, before routing.
struct Planned<'a> {
    name: &'a str,
    args: Map<String, Value>,
    /// The caller's raw `timeoutMs`.
    timeout_ms: Option<u64>,
    /// The caller's raw `selector`.
    selector: Option<&'a str>,
    /// `--max-image-bytes` of the bridge.
    max_image_bytes: u64,
    /// `lease: true`: take or renew the session's lease first (§M17).
    lease: bool,
    /// Heartbeats while the app is silent (§M17).
    heartbeat: std::time::Duration,
    /// The task id when this call runs as an MCP task: also its callId (§M19).
    task_call_id: Option<String>,
}

/// Handles a cancel step by step: a sent call is cancelled (§M12).
fn handler(call: Call<'_>) -> Reply<'_> {
    Box::pin(async move {
        let args: Args = call.args.parse()?;
        run(call.bridge, call.context, call.request, args).await
    })
}

async fn run(
    bridge: &BridgeContext,
    context: &RequestContext<RoleServer>,
    request: &CallToolRequestParams,
    args: Args,
) -> Result<CallToolResponse, ToolFailure> {
    let planned = Planned {
        name: &args.name,
        args: args.args.unwrap_or_default(),
        timeout_ms: args.timeout_ms,
        selector: args.selector.as_deref(),
        max_image_bytes: bridge.options.max_image_bytes,
        lease: args.lease.unwrap_or(false),
        heartbeat: bridge.options.call_heartbeat_interval,
        task_call_id: bridge.tasks.call_id_of(&context.id),
    };
    if is_2026(context) && request.request_state.is_some() {
        mrtr_retry(bridge, context, request, &planned).await
    } else {
        first_round(bridge, context, &planned).await
    }
}

/// Steps 2–5 of §M8.5 for a request without a valid `requestState`.
async fn first_round(
    bridge: &BridgeContext,
    context: &RequestContext<RoleServer>,
    planned: &Planned<'_>,
) -> Result<CallToolResponse, ToolFailure> {
    // Until the consent step, a cancel stops the call and nothing more is sent (§M12).
    let (client, cache) = unless_cancelled(context, bridge.control_with_cache()).await?;
    let (session, cache) = unless_cancelled(
        context,
        resolve(bridge, &client, cache.as_deref(), planned.selector),
    )
    .await?;
    let (effective, entry) =
        unless_cancelled(context, checked_tool(&client, cache, &session, planned)).await?;
    let destructive = is_destructive(&entry);
    let mut progress = Progress::for_request(context);
    let mut consent = None;
    if entry.policy == PolicyDecision::Prompt && session.state == SessionState::Active {
        let channel =
            unless_cancelled(context, async { Ok(bridge.consent_channel(context).await) }).await?;
        // Checked again right before asking: no prompt, no record for a cancelled call.
        if context.ct.is_cancelled() {
            return Err(cancelled_failure());
        }
        match channel {
            ConsentChannel::None => {}
            ConsentChannel::InputRequired => {
                return input_required(bridge, &client, &session, planned, destructive).await;
            }
            ConsentChannel::Elicitation => {
                let message = prompt_message(planned.name, &session, &planned.args, destructive);
                // `None`: the request failed, which counts as no channel (§M10.3).
                if let Some(()) =
                    elicit(bridge, context, message, planned, progress.as_mut()).await?
                {
                    consent = Some(Consent::Elicitation);
                }
            }
        }
    }
    call(
        context, &client, &session, planned, effective, consent, progress,
    )
    .await
}

/// `annotations.destructiveHint` is `true` (the consent prompt says so, §M10.2).
fn is_destructive(entry: &ToolsListEntry) -> bool {
    entry
        .descriptor
        .get("annotations")
        .and_then(|a| a.get("destructiveHint"))
        .and_then(Value::as_bool)
        == Some(true)
}

/// Step 2 (§M7): `sessions.describe` on the persistent connection; through the tool cache
/// when it is subscribed, so the cache then reflects what the describe saw. Returns the cache
/// when it answered: only then may it be read for this call.
async fn resolve<'c>(
    bridge: &BridgeContext,
    client: &ControlClient,
    cache: Option<&'c ToolCache>,
    selector: Option<&str>,
) -> Result<(SessionSummary, Option<&'c ToolCache>), ToolFailure> {
    match cache {
        Some(cache) => cache
            .resolve(selector)
            .await
            .map(|session| (session, Some(cache)))
            .map_err(|e| ToolFailure::from_client(&e)),
        None => Ok((bridge.resolve(client, selector).await?, None)),
    }
}

/// Step 3: the tool's registry entry, from the cache when the resolve went through it.
async fn find_tool(
    client: &ControlClient,
    cache: Option<&ToolCache>,
    session: &SessionSummary,
    name: &str,
) -> Result<Arc<ToolsListEntry>, ToolFailure> {
    let cached = match cache {
        Some(cache) => cache.get(&session.session_id, name).await,
        None => None,
    };
    match (cache, cached) {
        (_, Some(Cached::Hit(entry))) => Ok(entry),
        (Some(cache), Some(Cached::Miss(since))) => {
            let entry = Arc::new(lookup(client, session, name).await?);
            cache.store(since, &session.session_id, entry.clone()).await;
            Ok(entry)
        }
        _ => lookup(client, session, name).await.map(Arc::new),
    }
}

/// Steps 3 and 4: the tool is registered, and `timeoutMs` fits its deadline. Returns the
/// effective deadline.
async fn checked_tool(
    client: &ControlClient,
    cache: Option<&ToolCache>,
    session: &SessionSummary,
    planned: &Planned<'_>,
) -> Result<(u64, Arc<ToolsListEntry>), ToolFailure> {
    let entry = find_tool(client, cache, session, planned.name).await?;
    let deadline = deadline_ms(&entry);
    if let Some(t) = planned.timeout_ms
        && t > deadline
    {
        return Err(ToolFailure::invalid_request(format!(
            "\"timeoutMs\" {t} is larger than the tool's deadlineMs {deadline}; the app stops \"{}\" at its own deadline, so pass at most {deadline}",
            planned.name
        ))
        .with_details(json!({"param": "timeoutMs", "deadlineMs": deadline})));
    }
    Ok((planned.timeout_ms.unwrap_or(deadline), entry))
}

/// Elicitation (§M10.3). `Ok(Some(()))` = accepted, `Ok(None)` = no channel after all.
async fn elicit(
    bridge: &BridgeContext,
    context: &RequestContext<RoleServer>,
    message: String,
    planned: &Planned<'_>,
    mut progress: Option<&mut Progress>,
) -> Result<Option<()>, ToolFailure> {
    let name = planned.name;
    let params = elicit_params(message, planned.task_call_id.as_deref())?;
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    let handle = match context
        .peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
    {
        Ok(h) => h,
        Err(e) => {
            tracing::info!("elicitation/create could not be sent: {e}");
            return Ok(None);
        }
    };
    let peer = handle.peer.clone();
    let id = handle.id.clone();
    let cancel_elicitation = |reason: &'static str| {
        let peer = peer.clone();
        let id = id.clone();
        async move {
            let param =
                rmcp::model::CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
            let _ = peer.notify_cancelled(param).await;
        }
    };
    let mut rx = handle.rx;
    let started = Instant::now();
    let deadline = started + bridge.options.consent_timeout;
    let beat = bridge.options.heartbeat_interval;
    let mut next_beat = started + beat;
    loop {
        tokio::select! {
            answer = &mut rx => {
                let answer = match answer {
                    Ok(Ok(ClientResult::ElicitResult(r))) => r,
                    // A failed request means no channel for this call (§M10.3).
                    Ok(Ok(other)) => {
                        tracing::info!("elicitation/create got a malformed answer: {other:?}");
                        return Ok(None);
                    }
                    Ok(Err(e)) => {
                        tracing::info!("elicitation/create failed: {e}");
                        // Invalid params: the client rejects the form request itself (the
                        // `mode` tag of older revisions), so it never gets one again (§M2.2).
                        if matches!(&e, ServiceError::McpError(d) if d.code == ErrorCode::INVALID_PARAMS) {
                            bridge.elicitation_broken.store(true, Ordering::Relaxed);
                        }
                        return Ok(None);
                    }
                    Err(_) => return Ok(None),
                };
                return decide(answer, name).map(Some);
            }
            () = tokio::time::sleep_until(deadline) => {
                cancel_elicitation("timed out").await;
                return Err(declined(
                    "timed_out",
                    format!("the user did not answer the consent request for \"{name}\" within {} s; call again to ask again", seconds_text(bridge.options.consent_timeout)),
                ));
            }
            () = context.ct.cancelled() => {
                cancel_elicitation("the tool call was cancelled").await;
                return Err(ToolFailure::new(ErrorType::ToolCancelled, format!("the call of \"{name}\" was cancelled while asking for consent")));
            }
            () = tokio::time::sleep_until(next_beat), if progress.is_some() => {
                next_beat += beat;
                if let Some(p) = progress.as_deref_mut() {
                    let elapsed = started.elapsed().as_secs();
                    p.report(None, Some(format!("waiting for the user to allow \"{name}\" ({elapsed} s)"))).await;
                }
            }
        }
    }
}

/// Seconds for a message: whole seconds as an integer, shorter waits (tests shorten the
/// consent timeout) with the tenths, so 300 ms never reads "0 s".
fn seconds_text(d: std::time::Duration) -> String {
    if d.subsec_millis() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{:.1}", d.as_secs_f64())
    }
}

fn declined(reason: &str, message: String) -> ToolFailure {
    ToolFailure::new(ErrorType::ConsentDeclined, message).with_details(json!({"reason": reason}))
}

fn decide(answer: ElicitResult, name: &str) -> Result<(), ToolFailure> {
    match answer.action {
        ElicitationAction::Accept => Ok(()),
        ElicitationAction::Decline => Err(declined(
            "declined",
            format!("the user declined the call of \"{name}\""),
        )),
        _ => Err(declined(
            "cancelled",
            format!("the user dismissed the consent request for \"{name}\""),
        )),
    }
}

/// MRTR first round (§M10.4): record the call in the daemon, return `input_required`.
async fn input_required(
    bridge: &BridgeContext,
    client: &ControlClient,
    session: &SessionSummary,
    planned: &Planned<'_>,
    destructive: bool,
) -> Result<CallToolResponse, ToolFailure> {
    let created = client
        .call::<ConsentCreate>(
            ConsentCreateParams::new(
                session.session_id.clone(),
                planned.name.to_owned(),
                args_sha256(&Value::Object(planned.args.clone())),
            )
            .with_selector(planned.selector.map(str::to_owned))
            .with_timeout_ms(planned.timeout_ms)
            .with_ttl_ms(Some(bridge.options.mrtr_ttl_ms())),
        )
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    let message = prompt_message(planned.name, session, &planned.args, destructive);
    let mut requests = InputRequests::new();
    requests.insert(
        CONSENT_INPUT_KEY.to_owned(),
        InputRequest::Elicitation(ElicitRequest::new(elicit_params(message, None)?)),
    );
    Ok(InputRequiredResult::new(Some(requests), Some(created.handle)).into())
}

/// An MRTR retry (§M10.4): take the record, compare, route to its session id.
async fn mrtr_retry(
    bridge: &BridgeContext,
    context: &RequestContext<RoleServer>,
    request: &CallToolRequestParams,
    planned: &Planned<'_>,
) -> Result<CallToolResponse, ToolFailure> {
    let handle = request.request_state.clone().unwrap_or_default();
    let (client, cache) = unless_cancelled(context, bridge.control_with_cache()).await?;
    if context.ct.is_cancelled() {
        return Err(cancelled_failure());
    }
    let record = match client
        .call::<ConsentTake>(ConsentTakeParams::new(handle))
        .await
    {
        Ok(r) => r,
        Err(ClientError::Rpc {
            error_type: ErrorType::InvalidRequest,
            ..
        }) => {
            return Err(declined(
                "expired",
                format!(
                    "the consent request for \"{}\" expired or was already answered; call appduct_call_tool again",
                    planned.name
                ),
            ));
        }
        Err(e) => return Err(ToolFailure::from_client(&e)),
    };
    if !record_matches(&record, planned) {
        return Err(declined(
            "mismatch",
            format!(
                "the retry of \"{}\" does not match the call the user was asked about; call appduct_call_tool again",
                planned.name
            ),
        ));
    }
    // Routed to the record's session id; the selector is not resolved again.
    let (session, cache) = unless_cancelled(
        context,
        resolve(
            bridge,
            &client,
            cache.as_deref(),
            Some(record.session_id.as_str()),
        ),
    )
    .await?;
    if session.session_id != record.session_id {
        return Err(ToolFailure::new(
            ErrorType::UnknownSession,
            format!("session {} is gone", record.session_id),
        )
        .with_details(json!({"selector": record.session_id})));
    }
    let (effective, entry) =
        unless_cancelled(context, checked_tool(&client, cache, &session, planned)).await?;
    let destructive = is_destructive(&entry);
    if context.ct.is_cancelled() {
        return Err(cancelled_failure());
    }
    let response = request
        .input_responses
        .as_ref()
        .and_then(|r| r.get(CONSENT_INPUT_KEY));
    let Some(response) = response else {
        // No answer to our request: ask again with a new handle (the old one was consumed),
        // if this request still has the channel; a retry that no longer declares form-mode
        // elicitation (or a daemon without consent records) gets the no-channel row, never
        // `input_required` (§M10.1, §M10.4).
        let channel =
            unless_cancelled(context, async { Ok(bridge.consent_channel(context).await) }).await?;
        if context.ct.is_cancelled() {
            return Err(cancelled_failure());
        }
        if channel == ConsentChannel::InputRequired {
            return input_required(bridge, &client, &session, planned, destructive).await;
        }
        let progress = Progress::for_request(context);
        return call(
            context, &client, &session, planned, effective, None, progress,
        )
        .await;
    };
    let action = response.get("action").and_then(Value::as_str);
    match action {
        Some("accept") => {}
        Some("decline") => {
            return Err(declined(
                "declined",
                format!("the user declined the call of \"{}\"", planned.name),
            ));
        }
        _ => {
            return Err(declined(
                "cancelled",
                format!(
                    "the user dismissed the consent request for \"{}\"",
                    planned.name
                ),
            ));
        }
    }
    let progress = Progress::for_request(context);
    call(
        context,
        &client,
        &session,
        planned,
        effective,
        Some(Consent::Elicitation),
        progress,
    )
    .await
}

fn record_matches(record: &ConsentRecord, planned: &Planned<'_>) -> bool {
    record.name == planned.name
        && record.args_sha256 == args_sha256(&Value::Object(planned.args.clone()))
        && record.timeout_ms == planned.timeout_ms
        && record.selector.as_deref() == planned.selector
}

fn call_meta(call_id: &str, session: &SessionSummary, duration_ms: Option<u64>) -> Value {
    let meta = CallMeta {
        call_id,
        session_id: &session.session_id,
        alias: &session.alias,
        duration_ms,
    };
    serde_json::to_value(meta).unwrap_or(Value::Null)
}

fn is_call_id_in_use(e: &ToolCallError) -> bool {
    matches!(&e.error, ClientError::Rpc { error_type: ErrorType::InvalidRequest, details: Some(d), .. }
        if d.get("reason").and_then(Value::as_str) == Some("call_id_in_use"))
}

/// Step 6–7: `tools.call` with an explicit timeout and our callId, then the mapping.
async fn call(
    context: &RequestContext<RoleServer>,
    client: &ControlClient,
    session: &SessionSummary,
    planned: &Planned<'_>,
    effective: u64,
    consent: Option<Consent>,
    mut progress: Option<Progress>,
) -> Result<CallToolResponse, ToolFailure> {
    if context.ct.is_cancelled() {
        return Err(ToolFailure::new(
            ErrorType::ToolCancelled,
            "cancelled before the call was sent",
        ));
    }
    if planned.lease {
        // The lease belongs to this bridge's persistent connection; it ends when the bridge
        // exits. Never `steal`: an agent cannot take a lease from another client (§M17).
        let ttl_ms = effective
            .saturating_add(LEASE_MARGIN_MS)
            .min(MAX_LEASE_TTL_MS);
        client
            .call::<SessionsLease>(
                SessionsLeaseParams::default()
                    .with_selector(Some(session.session_id.clone()))
                    .with_ttl_ms(Some(ttl_ms)),
            )
            .await
            .map_err(|e| ToolFailure::from_client(&e))?;
    }
    let mut retried = false;
    // A task's call carries the task id as its callId (§M19).
    let mut task_call_id = planned.task_call_id.clone();
    loop {
        let call_id = match task_call_id.take() {
            Some(id) => id,
            None => new_call_id()?,
        };
        let params = ToolsCallParams::new(planned.name.to_owned())
            .with_selector(Some(session.session_id.clone()))
            .with_args(planned.args.clone())
            .with_timeout_ms(Some(effective))
            .with_caller(Some(Caller::Mcp))
            .with_consent(consent)
            .with_call_id(Some(call_id.clone()))
            // Always: a call parked for an operator says so (and until when) only in a
            // progress notification, which extends the client's watchdog (§C11.1, §M12).
            .with_progress(true)
            // The call outlives this bridge: restarted, it (or anyone) can still fetch the
            // outcome with `tools.result` (§M17, control.md §C10.10).
            .with_detach(true);
        let beat = Heartbeat {
            every: planned.heartbeat,
            label: format!("\"{}\" on {}", planned.name, session.alias),
        };
        let outcome = run_call(context, client, params, &call_id, progress.as_mut(), &beat).await;
        if let Some(p) = progress.as_mut() {
            p.flush().await;
        }
        match outcome {
            CallOutcome::Done(Ok(r)) => {
                return Ok(settled_result(&r, planned.max_image_bytes).into());
            }
            CallOutcome::Done(Err(e)) if !retried && is_call_id_in_use(&e) => {
                retried = true;
            }
            CallOutcome::Done(Err(e)) => {
                let id = e.call_id.clone().unwrap_or(call_id);
                return Err(
                    ToolFailure::from_tool_call(&e).with_call(call_meta(&id, session, None))
                );
            }
            CallOutcome::Cancelled => {
                let cancel = client
                    .call::<ToolsCancel>(
                        ToolsCancelParams::new(call_id.clone())
                            .with_selector(Some(session.session_id.clone()))
                            .with_reason(Some(CANCEL_REASON.to_owned())),
                    )
                    .await;
                if let Err(e) = cancel {
                    tracing::debug!("tools.cancel for {call_id} failed: {e}");
                }
                // Never written: rmcp drops the response of a cancelled request.
                return Err(ToolFailure::new(
                    ErrorType::ToolCancelled,
                    format!(
                        "the call of \"{}\" was cancelled by the client",
                        planned.name
                    ),
                )
                .with_call(call_meta(&call_id, session, None)));
            }
        }
    }
}

/// The MCP result of a settled call, with its `_meta["appduct/call"]` handle (§M8.5): what
/// `appduct_call_tool` returns, and `appduct_call_result` for a kept outcome (§M8.10).
pub(super) fn settled_result(
    r: &ToolsCallResult,
    max_image_bytes: u64,
) -> rmcp::model::CallToolResult {
    let meta = serde_json::to_value(CallMeta {
        call_id: &r.call_id,
        session_id: &r.session_id,
        alias: &r.alias,
        duration_ms: Some(r.duration_ms),
    })
    .unwrap_or(Value::Null);
    mapped(r, meta, max_image_bytes)
}

/// The MCP result of a settled call: the JSON result and the app's content blocks (§M8.5).
fn mapped(r: &ToolsCallResult, meta: Value, max_image_bytes: u64) -> rmcp::model::CallToolResult {
    let content: Vec<Value> = r
        .content
        .iter()
        .flatten()
        .map(|b| serde_json::to_value(b).unwrap_or(Value::Null))
        .collect();
    crate::content::call_result(
        &r.call_id,
        r.result.as_ref(),
        &content,
        meta,
        max_image_bytes,
    )
}

/// How far past the call's deadline a `lease: true` lease lasts (§M17).
pub const LEASE_MARGIN_MS: u64 = 60_000;

/// Heartbeats while an app tool is silent (§M17).
struct Heartbeat {
    every: std::time::Duration,
    /// `"<tool>" on <alias>`.
    label: String,
}

enum CallOutcome {
    Done(Result<ToolsCallResult, ToolCallError>),
    Cancelled,
}

async fn run_call(
    context: &RequestContext<RoleServer>,
    client: &ControlClient,
    params: ToolsCallParams,
    call_id: &str,
    progress: Option<&mut Progress>,
    beat: &Heartbeat,
) -> CallOutcome {
    let mut progress = progress;
    let (mut stream, pending) = client.call_tool_with_progress(params);
    let result = pending.result();
    tokio::pin!(result);
    let mut stream_open = true;
    let started = Instant::now();
    // A heartbeat is due one interval after the last progress forwarded (or the start).
    let mut next_beat = started + beat.every;
    loop {
        let flush_at = progress.as_ref().and_then(|p| p.flush_at());
        tokio::select! {
            biased;
            () = context.ct.cancelled() => return CallOutcome::Cancelled,
            item = stream.next(), if stream_open => match item {
                // Routed by request id in the client; checked again by our callId. Without a
                // progress token nothing is forwarded (the client still reads a parking
                // notice to extend its watchdog).
                Some(CallProgress::Progress(p)) if p.call_id == call_id => {
                    if let Some(progress) = progress.as_deref_mut() {
                        let value = p.progress.as_ref().and_then(serde_json::Number::as_f64);
                        progress.report(value, p.message.clone()).await;
                        next_beat = Instant::now() + beat.every;
                    }
                }
                Some(_) => {}
                None => stream_open = false,
            },
            () = until(flush_at) => {
                if let Some(progress) = progress.as_deref_mut() {
                    progress.flush().await;
                }
            }
            () = tokio::time::sleep_until(next_beat), if progress.is_some() => {
                next_beat += beat.every;
                if let Some(progress) = progress.as_deref_mut() {
                    let elapsed = started.elapsed().as_secs();
                    progress
                        .report(None, Some(format!("{} is running ({elapsed} s; callId {call_id})", beat.label)))
                        .await;
                }
            }
            r = &mut result => return CallOutcome::Done(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_typed_arguments_read_every_schema_property() {
        super::super::builtin::assert_reads_every_property::<Args>(&definition());
    }

    /// Review19 M4: the consent request of a task-run call names its task.
    #[test]
    fn a_task_runs_consent_names_the_task() {
        let with =
            serde_json::to_value(elicit_params("ok?".into(), Some("mcp_t")).unwrap()).unwrap();
        assert_eq!(
            with["_meta"][crate::tasks::RELATED_TASK],
            json!({"taskId": "mcp_t"})
        );
        let without = serde_json::to_value(elicit_params("ok?".into(), None).unwrap()).unwrap();
        assert!(without.get("_meta").is_none(), "{without}");
    }

    #[test]
    fn waits_are_named_in_seconds_without_rounding_to_zero() {
        assert_eq!(seconds_text(Duration::from_secs(600)), "600");
        assert_eq!(seconds_text(Duration::from_millis(300)), "0.3");
        assert_eq!(seconds_text(Duration::from_millis(1_500)), "1.5");
    }
}
