//! `appduct_status` (06 §6.8.9): versions, sessions, the consent channel and project
//! resolution. Uses `daemon.status` only, on a connection opened without auto-spawn.

use appduct_protocol::control::DaemonStatus;
use rmcp::RoleServer;
use rmcp::model::ProtocolVersion;
use rmcp::service::RequestContext;
use serde_json::{Map, Value, json};

use crate::args::Args;
use crate::catalog;
use crate::error::ToolFailure;
use crate::project::{self, resolve_dir};
use crate::server::{ConsentChannel, Inner, declares_form_elicitation, is_2026};

pub async fn run(
    inner: &Inner,
    context: &RequestContext<RoleServer>,
    args: &Args,
) -> Result<Value, ToolFailure> {
    let state_dir = inner.options.state_dir.as_deref();
    let dir = resolve_dir(
        args.str("cwd"),
        context,
        &inner.roots,
        &inner.env,
        state_dir,
        inner.options.roots_timeout,
    )
    .await?;
    let protocol = context
        .protocol_version()
        .unwrap_or(ProtocolVersion::V_2025_11_25);
    let status_client = inner.connector.connect(false).await;
    let (daemon, sessions, extra) = match &status_client {
        Ok(client) => match client.call::<DaemonStatus>(Default::default()).await {
            Ok(s) => (
                json!({
                    "running": true,
                    "version": s.version,
                    "pid": s.pid,
                    "startedAt": s.started_at,
                    "wssPort": s.wss_port,
                    "webPort": s.web_port,
                    "versionMatch": s.version == catalog::SERVER_VERSION,
                }),
                serde_json::to_value(&s.sessions).unwrap_or(Value::Array(Vec::new())),
                Some((s.pending_links, serde_json::to_value(&s.policy).ok())),
            ),
            Err(e) => (unreachable(&e.to_string()), json!([]), None),
        },
        Err(e) => (unreachable(&e.to_string()), json!([]), None),
    };
    // The channel a call would use: on 2026-07-28 that needs the daemon's `consent.records`
    // (06 §6.8.9, §6.10.4), learnt without spawning.
    let consent = if !declares_form_elicitation(context) {
        ConsentChannel::None
    } else if is_2026(context) {
        if inner
            .consent_records_without_spawn(status_client.as_ref().ok())
            .await
        {
            ConsentChannel::InputRequired
        } else {
            ConsentChannel::None
        }
    } else {
        inner.consent_channel(context).await
    };
    let mut project = Map::new();
    project.insert("dir".into(), json!(dir.dir.display().to_string()));
    project.insert("cwdSource".into(), json!(dir.source.as_str()));
    let mut notes = Vec::new();
    match project::resolve_scheme(
        &dir.dir,
        inner.options.scheme.as_deref(),
        &inner.env,
        state_dir,
    ) {
        Ok(s) => {
            project.insert("scheme".into(), json!(s.scheme));
            project.insert("schemeSource".into(), json!(s.source.as_str()));
        }
        Err(f) => {
            project.insert("scheme".into(), Value::Null);
            project.insert("schemeSource".into(), Value::Null);
            notes.push(f.message);
        }
    }
    project.insert(
        "appId".into(),
        project::project_app_ids(&dir.dir, &inner.env, state_dir),
    );
    if dir.source.needs_cwd_note() {
        notes.push(format!(
            "The project directory came from {}; pass cwd (the absolute project directory) on later appduct_connect and appduct_status calls.",
            dir.source.as_str()
        ));
    }
    if !notes.is_empty() {
        project.insert("note".into(), json!(notes.join(" ")));
    }
    if let Some(roots) = &dir.roots {
        let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        project.insert("roots".into(), json!(list));
    }
    let mut out = Map::new();
    out.insert(
        "server".into(),
        json!({
            "name": catalog::SERVER_NAME,
            "version": catalog::SERVER_VERSION,
            "protocolVersion": protocol.as_str(),
        }),
    );
    out.insert("daemon".into(), daemon);
    out.insert("sessions".into(), sessions);
    if let Some((pending_links, policy)) = extra {
        out.insert("pendingLinks".into(), json!(pending_links));
        if let Some(p) = policy {
            out.insert("policy".into(), p);
        }
    }
    out.insert("consent".into(), json!(consent.as_str()));
    out.insert("project".into(), Value::Object(project));
    Ok(Value::Object(out))
}

fn unreachable(message: &str) -> Value {
    json!({"running": false, "error": {"type": "connection_error", "message": message}})
}
