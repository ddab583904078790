//! `appduct_wait_for_session` (06 §6.8.2): waits, on its own connection, until the app given a
//! link claims its session.

use appduct_client::client::ClientError;
use appduct_protocol::control::{
    EventData, EventKind, SelectorParams, SessionsDescribe, SubscribeParams,
};
use appduct_protocol::errors::ErrorType;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::builtin::{
    Call, DEFAULT_WAIT_MS, Definition, Entry, READ_ONLY, Reply, output, wait_timeout_prop,
};
use crate::context::{BridgeContext, unless_cancelled};
use crate::error::ToolFailure;
use crate::wait::{Step, timeout_failure, wait_loop};

pub const NAME: &str = "appduct_wait_for_session";

pub const BUILTIN: Entry = Entry {
    name: NAME,
    definition,
    handler,
};

fn definition() -> Definition {
    Definition {
        title: "Wait for session",
        description: "Wait until the app given a link by appduct_connect claims its session; returns the session's alias. Fails with tool_timeout if nothing claims it in time.",
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
            json!({"type":"object","properties":{"sessionId":{"type":"string"},"alias":{"type":"string"},"claimed":{"type":"boolean"}},"required":["sessionId","alias","claimed"]}),
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
}

fn handler(call: Call<'_>) -> Reply<'_> {
    Box::pin(async move {
        let args: Args = call.args.parse()?;
        let out = unless_cancelled(call.context, run(call.bridge, call.context, args)).await?;
        output(&out)
    })
}

async fn run(
    bridge: &BridgeContext,
    context: &RequestContext<RoleServer>,
    args: Args,
) -> Result<Output, ToolFailure> {
    let id = args.session_id;
    let timeout_ms = args.timeout_ms.unwrap_or(DEFAULT_WAIT_MS);
    let extra = bridge
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
            return Ok(Output {
                session_id: s.session_id,
                alias: s.alias,
                claimed: true,
            });
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
        bridge,
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
                EventData::SessionClaimed(_) => Step::Done(Ok(Output {
                    session_id: id.clone(),
                    alias: e.alias.clone().unwrap_or_default(),
                    claimed: true,
                })),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_arguments_read_every_schema_property() {
        let args = super::super::builtin::every_property(&definition());
        if let Err(f) = args.parse::<Args>() {
            panic!("{}", f.text());
        }
    }
}
