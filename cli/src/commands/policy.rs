//! `appduct policy ls | set | reset` and `appduct daemon reload` (§C8.30–§C8.33): the policy
//! at runtime. Changes go through the daemon, which writes `config.json` and applies them
//! without dropping sessions or pending calls.

use std::ffi::OsString;

use appduct_protocol::control::{
    DaemonReload, NoParams, PolicyChangeResult, PolicyDecision, PolicyList, PolicyListResult,
    PolicyReset, PolicyResetParams, PolicySet, PolicySetParams, PolicySummary, ReloadResult,
};
use clap::{Args, Subcommand};

use super::Command;
use super::approvals;
use super::parse::{missing_verb, unknown_verb};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Success};
use crate::render::{self, to_value};
use appduct_client::client::{ClientError, ControlClient};
use appduct_client::state_dir::StateDir;
use appduct_protocol::errors::ErrorType;

#[derive(Debug, Args)]
pub struct PolicyNoun {
    #[command(subcommand)]
    pub verb: Option<PolicyVerb>,
}

#[derive(Debug, Subcommand)]
pub enum PolicyVerb {
    /// Show the policy and the rule that decides each tool of each live session
    Ls,
    /// Set a decision: TARGET is default, destructive or <alias>/<tool> (globs allowed: */reset, pixel-*/wipe)
    Set {
        #[arg(value_name = "TARGET")]
        target: String,
        /// allow, deny or prompt
        #[arg(value_name = "DECISION")]
        decision: String,
    },
    /// Remove a rule (or put default/destructive back to allow); no TARGET resets everything
    Reset {
        #[arg(value_name = "TARGET")]
        target: Option<String>,
    },
    #[command(external_subcommand)]
    Unknown(Vec<OsString>),
}

pub fn validate(noun: PolicyNoun) -> Result<Command, CliError> {
    match noun.verb {
        None => Err(missing_verb("policy")),
        Some(PolicyVerb::Unknown(words)) => Err(unknown_verb("policy", &words)),
        Some(PolicyVerb::Ls) => Ok(Command::PolicyLs),
        Some(PolicyVerb::Set { target, decision }) => {
            let decision: PolicyDecision = decision.parse().map_err(|_| {
                CliError::usage(format!(
                    "DECISION must be allow, deny or prompt, got \"{decision}\""
                ))
            })?;
            Ok(Command::PolicySet(PolicySetParams::new(target, decision)))
        }
        Some(PolicyVerb::Reset { target }) => Ok(Command::PolicyReset(
            PolicyResetParams::default().with_target(target),
        )),
    }
}

pub async fn ls(globals: &Globals, out: &Output) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let r = client
        .call::<PolicyList>(NoParams {})
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    Ok(policy_ls(&r))
}

/// The approval id of a change the daemon holds for an operator because it loosens policy
/// (`approval_refused`, `details.reason: "operator_approval_required"`, §C11.2).
fn held_approval(e: &ClientError) -> Option<String> {
    match e {
        ClientError::Rpc {
            error_type: ErrorType::ApprovalRefused,
            details: Some(d),
            ..
        } if d.get("reason").and_then(|r| r.as_str()) == Some("operator_approval_required") => d
            .get("approvalId")
            .and_then(|i| i.as_str())
            .map(str::to_owned),
        _ => None,
    }
}

/// Runs `call`; a change held for an operator is approved here when a person is at this
/// terminal (the one-time code of §C8.18, on this connection), then `call` runs again (now a
/// no-op: the approval applied it). `Ok((result, approved))`.
async fn with_operator<T, F, Fut>(
    client: &ControlClient,
    dir: &StateDir,
    out: &Output,
    call: F,
) -> Result<(T, bool), CliError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let fail = |e: ClientError| connect::client_error(&e, dir);
    match call().await {
        Ok(r) => Ok((r, false)),
        Err(e) => match held_approval(&e) {
            Some(id) if approvals::interactive() => {
                out.notice(&format!(
                    "This change loosens policy, so it needs an operator's approval ({}).",
                    render::clean_line(&id)
                ));
                approvals::approve_with_code(client, dir, &id, None).await?;
                Ok((call().await.map_err(fail)?, true))
            }
            _ => Err(fail(e)),
        },
    }
}

pub async fn set(
    globals: &Globals,
    out: &Output,
    p: &PolicySetParams,
) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let (mut r, approved) =
        with_operator(&client, &dir, out, || client.call::<PolicySet>(p.clone())).await?;
    r.changed |= approved;
    Ok(policy_changed(&r))
}

pub async fn reset(
    globals: &Globals,
    out: &Output,
    p: &PolicyResetParams,
) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let (mut r, approved) =
        with_operator(&client, &dir, out, || client.call::<PolicyReset>(p.clone())).await?;
    r.changed |= approved;
    Ok(policy_changed(&r))
}

/// `daemon reload`: only a running daemon (a fresh one has nothing to reload).
pub async fn reload(globals: &Globals, out: &Output) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Existing, true).await?;
    let (mut r, approved) = with_operator(&client, &dir, out, || {
        client.call::<DaemonReload>(NoParams {})
    })
    .await?;
    if approved && !r.applied.iter().any(|k| k == "policy") {
        r.applied.insert(0, "policy".to_owned());
    }
    Ok(reloaded(&r))
}

fn summary_lines(p: &PolicySummary) -> String {
    let mut text = format!(
        "default      {}\ndestructive  {}\n",
        p.default, p.destructive
    );
    if p.tools.is_empty() {
        text.push_str("rules        (none)\n");
    } else {
        let mut rows = vec![vec!["RULE".to_owned(), "DECISION".to_owned()]];
        rows.extend(
            p.tools
                .iter()
                .map(|(k, d)| vec![render::clean_line(k), d.to_string()]),
        );
        text.push('\n');
        text.push_str(&render::table(&rows));
    }
    text
}

pub fn policy_ls(r: &PolicyListResult) -> Success {
    let mut human = format!("Policy ({})\n", render::clean_line(&r.config_path));
    human.push_str(&summary_lines(&r.policy));
    if !r.effective.is_empty() {
        let mut rows = vec![
            ["ALIAS", "TOOL", "DECISION", "DECIDED BY"]
                .map(str::to_owned)
                .to_vec(),
        ];
        rows.extend(r.effective.iter().map(|e| {
            vec![
                render::clean_line(&e.alias),
                render::clean_line(&e.tool),
                e.decision.to_string(),
                render::clean_line(&e.source),
            ]
        }));
        human.push('\n');
        human.push_str(&render::table(&rows));
    }
    Success::new(to_value(r), human)
}

pub fn policy_changed(r: &PolicyChangeResult) -> Success {
    let head = if r.changed {
        format!(
            "Policy updated and saved to {}; it applies from the next call.\n",
            render::clean_line(&r.config_path)
        )
    } else {
        "Policy unchanged.\n".to_owned()
    };
    Success::new(to_value(r), head + &summary_lines(&r.policy))
}

pub fn reloaded(r: &ReloadResult) -> Success {
    let mut human = format!(
        "Reloaded {}: {}.\n",
        render::clean_line(&r.config_path),
        if r.applied.is_empty() {
            "nothing changed that applies at runtime".to_owned()
        } else {
            format!("applied {}", r.applied.join(", "))
        }
    );
    if !r.restart_required.is_empty() {
        human.push_str(&format!(
            "Changed, effective after a restart (appduct daemon stop): {}.\n",
            r.restart_required.join(", ")
        ));
    }
    Success::new(to_value(r), human)
}
