//! `appduct tools ls | describe | call | snapshot | test` (§L7), one module per verb; the session
//! lookups and the signature and describe block every verb shares live here.

pub mod call;
pub mod content;
pub mod describe;
pub mod ls;
pub mod snapshot;
pub mod test;

use std::ffi::OsString;

use appduct_client::client::ControlClient;
use appduct_client::state_dir::StateDir;
use appduct_protocol::control::{
    SelectorParams, SessionSummary, SessionsDescribe, ToolsListEntry, ToolsListParams,
    ToolsListResult,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::signature::render_tool_signature;
use clap::{Args, Subcommand};
use serde_json::Value;

use super::Command;
use super::args::{SelectorValueArgs, selector_and_value};
use super::parse::{missing_verb, unknown_verb};
use crate::connect;
use crate::error::CliError;
use crate::render::{self, Row, Section, pretty_json};

#[derive(Debug, Args)]
pub struct ToolsNoun {
    #[command(subcommand)]
    pub verb: Option<ToolsVerb>,
}

#[derive(Debug, Subcommand)]
pub enum ToolsVerb {
    /// List a session's tools
    Ls(ls::ToolsLsArgs),
    /// Show one tool's signature, policy and schemas
    #[command(override_usage = "appduct tools describe [OPTIONS] [SELECTOR] <NAME>")]
    Describe(SelectorValueArgs),
    /// Call a tool
    #[command(override_usage = "appduct tools call [OPTIONS] [SELECTOR] <NAME>")]
    Call(call::ToolsCallArgs),
    /// Write or check a reviewable snapshot of the app's tool surface
    Snapshot(snapshot::ToolsSnapshotArgs),
    /// Run the tools' declared test cases and report pass or fail per case
    Test(test::ToolsTestArgs),
    #[command(external_subcommand)]
    Unknown(Vec<OsString>),
}

pub fn validate(noun: ToolsNoun) -> Result<Command, CliError> {
    match noun.verb {
        None => Err(missing_verb("tools")),
        Some(ToolsVerb::Unknown(words)) => Err(unknown_verb("tools", &words)),
        Some(ToolsVerb::Ls(a)) => Ok(Command::ToolsLs(ls::validate(a)?)),
        Some(ToolsVerb::Describe(a)) => {
            let (selector, name) = selector_and_value("tools describe", "NAME", a.positionals)?;
            Ok(Command::ToolsDescribe { selector, name })
        }
        Some(ToolsVerb::Call(a)) => Ok(Command::ToolsCall(call::validate(a)?)),
        Some(ToolsVerb::Snapshot(a)) => snapshot::validate(a),
        Some(ToolsVerb::Test(a)) => test::validate(a),
    }
}

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

/// Every tool of a session, through as many pages as the daemon's reply bound takes.
pub async fn list_all(
    client: &ControlClient,
    dir: &StateDir,
    session_id: &str,
) -> Result<ToolsListResult, CliError> {
    client
        .list_all_tools(ToolsListParams::default().with_selector(Some(session_id.to_owned())))
        .await
        .map_err(|e| connect::client_error(&e, dir))
}

/// `tool_not_found` as `tools describe` reports it (§L7.2).
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

fn entry_schema<'a>(entry: &'a ToolsListEntry, key: &str) -> Option<&'a Value> {
    entry.descriptor.get(key)
}

/// The signature of a listed tool (§L7.5), as data (`--json`).
pub fn tool_signature(entry: &ToolsListEntry) -> String {
    render_tool_signature(
        entry.name(),
        entry_schema(entry, "input_schema"),
        entry_schema(entry, "output_schema"),
    )
}

/// The signature for human output: schema property names are app-supplied (SECURITY.md §4.13).
fn human_signature(entry: &ToolsListEntry) -> String {
    render::clean_line(&tool_signature(entry))
}

fn describe_block(entry: &ToolsListEntry) -> String {
    let mut rows = vec![
        Row::field("Signature", human_signature(entry)),
        Row::field("Description", render::clean_text(entry.description())),
        Row::field("Policy", entry.policy.as_str()),
    ];
    if let Some(group) = &entry.group {
        rows.push(Row::field("Group", render::clean_line(group)));
    }
    if let Some(Value::Object(annotations)) = entry.descriptor.get("annotations") {
        let pairs: Vec<String> = annotations
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect();
        rows.push(Row::field(
            "Annotations",
            render::clean_line(&pairs.join(", ")),
        ));
    }
    if let Some(timeout) = entry.descriptor.get("timeout_ms") {
        rows.push(Row::field("Timeout (ms)", timeout.to_string()));
    }
    // Registry declarations (§D18), when the app declared them.
    if let Some(Value::String(risk)) = entry.descriptor.get("riskLevel") {
        rows.push(Row::field("Risk", render::clean_line(risk)));
    }
    if let Some(Value::Array(perms)) = entry.descriptor.get("requiredPermissions") {
        let perms: Vec<&str> = perms.iter().filter_map(Value::as_str).collect();
        let shown = if perms.is_empty() {
            "(none)".to_owned()
        } else {
            perms.join(", ")
        };
        rows.push(Row::field("Permissions", render::clean_line(&shown)));
    }
    if let Some(Value::Array(cases)) = entry.descriptor.get("testCases") {
        rows.push(Row::field(
            "Test cases",
            format!("{} (appduct tools test)", cases.len()),
        ));
    }
    for (label, key) in [
        ("Input schema", "input_schema"),
        ("Output schema", "output_schema"),
    ] {
        let text = entry_schema(entry, key).map_or_else(|| "(none)".to_owned(), pretty_json);
        rows.push(Row::block(label, text));
    }
    render::sections(&[Section::new(
        format!("Tool: {}", render::clean_line(entry.name())),
        rows,
    )])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::tools::call::{ToolsCall, call_params, cancelled_by_cli, new_call_id};
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
            out_dir: None,
            inline: false,
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
