//! `appduct_status` (§M8.9): versions, sessions, the consent channel and project
//! resolution. Uses `daemon.status` only, on a connection opened without auto-spawn.

use appduct_protocol::control::{DaemonStatus, PolicySummary, SessionSummary};
use rmcp::RoleServer;
use rmcp::model::ProtocolVersion;
use rmcp::service::RequestContext;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::builtin::{Call, Definition, Entry, READ_ONLY, Reply, cwd_prop, output};
use crate::context::{
    BridgeContext, ConsentChannel, declares_form_elicitation, is_2026, unless_cancelled,
};
use crate::error::ToolFailure;
use crate::identity;
use crate::project::{self, resolve_dir};

pub const NAME: &str = "appduct_status";

pub const BUILTIN: Entry = Entry {
    name: NAME,
    definition,
    handler,
};

fn definition() -> Definition {
    Definition {
        title: "Appduct status",
        description: "Report server and daemon versions, live sessions, the consent channel, and how the project directory, scheme and app ids resolve. Never contacts a device.",
        hints: READ_ONLY,
        input: json!({
            "type": "object",
            "properties": {
                "cwd": cwd_prop()
            },
            "additionalProperties": false
        }),
        output: Some(json!({
            "type": "object",
            "properties": {
                "server": {"type": "object", "properties": {"version": {"type": "string"}, "protocolVersion": {"type": "string"}}},
                "daemon": {"type": "object", "properties": {"running": {"type": "boolean"}, "version": {"type": "string"}}, "required": ["running"]},
                "sessions": {"type": "array", "items": {"type": "object", "properties": {"sessionId": {"type": "string"}, "alias": {"type": "string"}, "state": {"type": "string"}}}},
                "consent": {"type": "string", "description": "elicitation, input_required or none; none denies prompt-policy tools."},
                "project": {"type": "object", "properties": {"dir": {"type": "string"}, "cwdSource": {"type": "string", "description": "argument, client-root, claude-project-dir or server; for the last two pass cwd."}}}
            },
            "required": ["server", "daemon", "sessions", "consent", "project"]
        })),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    cwd: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Output {
    server: Server,
    daemon: Daemon,
    sessions: Vec<SessionSummary>,
    /// Only when `daemon.status` answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pending_links: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<PolicySummary>,
    consent: &'static str,
    project: Project,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Server {
    name: &'static str,
    version: &'static str,
    protocol_version: String,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Daemon {
    #[serde(rename_all = "camelCase")]
    Running {
        /// Always `true`.
        running: bool,
        version: String,
        pid: u32,
        started_at: String,
        wss_port: u16,
        web_port: u16,
        version_match: bool,
    },
    Unreachable {
        /// Always `false`.
        running: bool,
        error: DaemonError,
    },
}

#[derive(Debug, Serialize)]
struct DaemonError {
    #[serde(rename = "type")]
    error_type: &'static str,
    message: String,
}

impl Daemon {
    fn unreachable(message: String) -> Self {
        Self::Unreachable {
            running: false,
            error: DaemonError {
                error_type: "connection_error",
                message,
            },
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Project {
    dir: String,
    cwd_source: &'static str,
    /// `null` (with a note) when the scheme does not resolve.
    scheme: Option<String>,
    scheme_source: Option<&'static str>,
    app_id: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    roots: Option<Vec<String>>,
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
    let state_dir = bridge.options.state_dir.as_deref();
    let dir = resolve_dir(
        args.cwd.as_deref(),
        context,
        &bridge.roots,
        &bridge.env,
        state_dir,
        bridge.options.roots_timeout,
    )
    .await?;
    let protocol = context
        .protocol_version()
        .unwrap_or(ProtocolVersion::V_2025_11_25);
    let status_client = bridge.connector.connect(false).await;
    let (daemon, sessions, pending_links, policy) = match &status_client {
        Ok(client) => match client.call::<DaemonStatus>(Default::default()).await {
            Ok(s) => (
                Daemon::Running {
                    running: true,
                    version_match: s.version == identity::SERVER_VERSION,
                    version: s.version,
                    pid: s.pid,
                    started_at: s.started_at,
                    wss_port: s.wss_port,
                    web_port: s.web_port,
                },
                s.sessions,
                Some(s.pending_links),
                Some(s.policy),
            ),
            Err(e) => (Daemon::unreachable(e.to_string()), Vec::new(), None, None),
        },
        Err(e) => (Daemon::unreachable(e.to_string()), Vec::new(), None, None),
    };
    // The channel a call would use: on 2026-07-28 that needs the daemon's `consent.records`
    // (§M8.9, §M10.4), learnt without spawning.
    let consent = if !declares_form_elicitation(context) {
        ConsentChannel::None
    } else if is_2026(context) {
        if bridge
            .consent_records_without_spawn(status_client.as_ref().ok())
            .await
        {
            ConsentChannel::InputRequired
        } else {
            ConsentChannel::None
        }
    } else {
        bridge.consent_channel(context).await
    };
    let mut notes = Vec::new();
    let (scheme, scheme_source) = match project::resolve_scheme(
        &dir.dir,
        bridge.options.scheme.as_deref(),
        &bridge.env,
        state_dir,
    ) {
        Ok(s) => (Some(s.scheme), Some(s.source.as_str())),
        Err(f) => {
            notes.push(f.message);
            (None, None)
        }
    };
    let app_id = project::project_app_ids(&dir.dir, &bridge.env, state_dir);
    if dir.source.needs_cwd_note() {
        notes.push(format!(
            "The project directory came from {}; pass cwd (the absolute project directory) on later appduct_connect and appduct_status calls.",
            dir.source.as_str()
        ));
    }
    let project = Project {
        dir: dir.dir.display().to_string(),
        cwd_source: dir.source.as_str(),
        scheme,
        scheme_source,
        app_id,
        note: (!notes.is_empty()).then(|| notes.join(" ")),
        roots: dir
            .roots
            .map(|roots| roots.iter().map(|r| r.display().to_string()).collect()),
    };
    Ok(Output {
        server: Server {
            name: identity::SERVER_NAME,
            version: identity::SERVER_VERSION,
            protocol_version: protocol.as_str().to_owned(),
        },
        daemon,
        sessions,
        pending_links,
        policy,
        consent: consent.as_str(),
        project,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_arguments_read_every_schema_property() {
        super::super::builtin::assert_reads_every_property::<Args>(&definition());
    }
}
