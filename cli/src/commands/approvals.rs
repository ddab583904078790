//! `appduct approvals ls | approve | deny | revoke` (§C8.17–§C8.21, §C11.1): the operator's
//! side of parked `prompt` calls.
//!
//! `approve` is the one command that insists on a person: it refuses unless stdin and stdout
//! are terminals, asks the daemon to write a one-time code to this process's controlling
//! terminal (`approvals.challenge`), reads the code back from `/dev/tty` and sends it with the
//! decision. The daemon's terminal check is the boundary (SECURITY.md §4.18); the local check
//! only gives the usual mistake (an agent or a script piping the CLI) a clear message.

use std::ffi::OsString;
use std::io::IsTerminal as _;

use appduct_client::client::{ClientError, ControlClient};
use appduct_protocol::control::{
    ApprovalDecision, ApprovalIdParams, ApprovalSummary, ApprovalsChallenge, ApprovalsDecide,
    ApprovalsDecideParams, ApprovalsDecideResult, ApprovalsList, GrantRequest, GrantSummary,
    GrantsList, GrantsRevoke, GrantsRevokeParams, MAX_GRANT_MINUTES, NoParams,
};
use appduct_protocol::errors::ErrorType;
use clap::{Args, Subcommand};
use serde_json::json;

use super::Command;
use super::args::positive_int;
use super::parse::{missing_verb, unknown_verb};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Success};
use crate::render;

#[derive(Debug, Args)]
pub struct ApprovalsNoun {
    #[command(subcommand)]
    pub verb: Option<ApprovalsVerb>,
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsVerb {
    /// List calls waiting for an operator, and grants
    Ls,
    /// Approve a waiting call (interactive terminal only: you type a one-time code)
    Approve(ApproveArgs),
    /// Deny a waiting call
    Deny(IdArgs),
    /// Revoke a grant
    Revoke(GrantArgs),
    #[command(external_subcommand)]
    Unknown(Vec<OsString>),
}

#[derive(Debug, Args)]
pub struct IdArgs {
    /// The approval id (apr_…), from `appduct approvals ls`
    #[arg(value_name = "APPROVAL_ID")]
    pub id: String,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The approval id (apr_…), from `appduct approvals ls`
    #[arg(value_name = "APPROVAL_ID")]
    pub id: String,
    /// Also let later calls of this tool on this session run without asking, for MINUTES
    /// (1 to 1440)
    #[arg(long = "for", value_name = "MINUTES", allow_negative_numbers = true)]
    pub for_minutes: Option<String>,
}

#[derive(Debug, Args)]
pub struct GrantArgs {
    /// The grant id (grt_…), from `appduct approvals ls`
    #[arg(value_name = "GRANT_ID")]
    pub id: String,
}

/// A validated `approvals` command.
#[derive(Debug, Clone, PartialEq)]
pub enum Approvals {
    Ls,
    Approve { id: String, minutes: Option<u64> },
    Deny { id: String },
    Revoke { grant_id: String },
}

pub fn validate(noun: ApprovalsNoun) -> Result<Command, CliError> {
    Ok(Command::Approvals(match noun.verb {
        None => return Err(missing_verb("approvals")),
        Some(ApprovalsVerb::Unknown(words)) => return Err(unknown_verb("approvals", &words)),
        Some(ApprovalsVerb::Ls) => Approvals::Ls,
        Some(ApprovalsVerb::Approve(a)) => {
            let minutes = match a.for_minutes {
                None => None,
                Some(v) => {
                    let m = positive_int("--for", &v)?;
                    if m > MAX_GRANT_MINUTES {
                        return Err(CliError::usage(format!(
                            "--for must be at most {MAX_GRANT_MINUTES} minutes (24 h)"
                        )));
                    }
                    Some(m)
                }
            };
            Approvals::Approve { id: a.id, minutes }
        }
        Some(ApprovalsVerb::Deny(a)) => Approvals::Deny { id: a.id },
        Some(ApprovalsVerb::Revoke(a)) => Approvals::Revoke { grant_id: a.id },
    }))
}

impl Approvals {
    pub fn label(&self) -> &'static str {
        match self {
            Approvals::Ls => "approvals ls",
            Approvals::Approve { .. } => "approvals approve",
            Approvals::Deny { .. } => "approvals deny",
            Approvals::Revoke { .. } => "approvals revoke",
        }
    }
}

/// The error of `approve` run without a person at a terminal.
pub fn not_interactive(id: &str) -> CliError {
    CliError::new(
        ErrorType::ApprovalRefused,
        "appduct approvals approve needs an interactive terminal: a person types a one-time code shown there",
    )
    .with_detail("reason", "not_interactive")
    .with_detail("approvalId", id)
    .with_hint(format!(
        "A person runs appduct approvals approve {id} in their own terminal; an agent must ask the person instead (appduct approvals deny {id} works anywhere)."
    ))
}

pub async fn run(globals: &Globals, out: &Output, cmd: &Approvals) -> Result<Success, CliError> {
    if let Approvals::Approve { id, .. } = cmd
        && !interactive()
    {
        return Err(not_interactive(id));
    }
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let fail = |e: appduct_client::client::ClientError| connect::client_error(&e, &dir);
    match cmd {
        Approvals::Ls => {
            let approvals = client
                .call::<ApprovalsList>(NoParams {})
                .await
                .map_err(fail)?;
            let grants = client.call::<GrantsList>(NoParams {}).await.map_err(fail)?;
            Ok(approvals_ls(&approvals.approvals, &grants.grants))
        }
        Approvals::Deny { id } => {
            let r = client
                .call::<ApprovalsDecide>(ApprovalsDecideParams::new(
                    id.clone(),
                    ApprovalDecision::Deny,
                ))
                .await
                .map_err(fail)?;
            Ok(decided(&r))
        }
        Approvals::Revoke { grant_id } => {
            let r = client
                .call::<GrantsRevoke>(GrantsRevokeParams::new(grant_id.clone()))
                .await
                .map_err(fail)?;
            let human = if r.revoked {
                format!("Revoked {grant_id}.\n")
            } else {
                format!("No grant {grant_id} (it expired, was revoked, or never existed).\n")
            };
            Ok(Success::new(
                json!({"grantId": grant_id, "revoked": r.revoked}),
                human,
            ))
        }
        Approvals::Approve { id, minutes } => approve_interactively(&client, id, *minutes, fail)
            .await
            .map(|r| decided(&r)),
    }
}

/// Whether a person can type a code here: stdin and stdout are terminals.
pub fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// The approving half of `approvals approve`, also run by `appduct watch` (§L23) and by policy
/// changes held for an operator: `approvals.challenge` asks the daemon to write a one-time code
/// to this process's controlling terminal, the code is read from `/dev/tty` and sent with the
/// decision on the same connection `client` (the daemon accepts a code only there, §C8.19).
/// `fail` maps client failures.
pub async fn approve_interactively(
    client: &ControlClient,
    id: &str,
    minutes: Option<u64>,
    fail: impl Fn(ClientError) -> CliError,
) -> Result<ApprovalsDecideResult, CliError> {
    let mut params = ApprovalsDecideParams::new(id.to_owned(), ApprovalDecision::Approve)
        .with_grant(minutes.map(|m| GrantRequest::tool(Some(m))));
    match client
        .call::<ApprovalsChallenge>(ApprovalIdParams::new(id.to_owned()))
        .await
    {
        Ok(challenge) => {
            let prompt = format!(
                "A one-time code for {id} was written to {}. Type it to approve (Enter alone gives up): ",
                challenge.terminal
            );
            let code = tokio::task::spawn_blocking(move || read_code(&prompt))
                .await
                .map_err(|e| CliError::internal(e.to_string()))??;
            params = params.with_code(Some(code));
        }
        // A daemon that needs no code (`consent.operatorRequiresTerminal: false`) still
        // approves; any other daemon answers `code_required` and the terminal error below is
        // the one worth showing.
        Err(e) => {
            let first = fail(e);
            return client
                .call::<ApprovalsDecide>(params)
                .await
                .map_err(|_| first);
        }
    }
    client.call::<ApprovalsDecide>(params).await.map_err(fail)
}

/// [`approve_interactively`] with the CLI's usual reading of client failures.
pub async fn approve_with_code(
    client: &ControlClient,
    dir: &appduct_client::state_dir::StateDir,
    id: &str,
    minutes: Option<u64>,
) -> Result<ApprovalsDecideResult, CliError> {
    approve_interactively(client, id, minutes, |e| connect::client_error(&e, dir)).await
}

/// Prompts on `/dev/tty` and reads one line from it; an empty line gives up.
fn read_code(prompt: &str) -> Result<String, CliError> {
    use std::io::{BufRead as _, Write as _};
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(|e| {
            CliError::new(
                ErrorType::ApprovalRefused,
                format!("Cannot open the terminal to read the code: {e}"),
            )
            .with_detail("reason", "not_interactive")
        })?;
    let mut writer = &tty;
    let _ = writer.write_all(prompt.as_bytes());
    let _ = writer.flush();
    let mut line = String::new();
    std::io::BufReader::new(&tty)
        .read_line(&mut line)
        .map_err(|e| CliError::internal(format!("Reading the code failed: {e}")))?;
    let code = line.trim().to_owned();
    if code.is_empty() {
        return Err(CliError::new(
            ErrorType::ApprovalRefused,
            "No code typed; nothing was approved",
        )
        .with_detail("reason", "no_code"));
    }
    Ok(code)
}

pub fn decided(r: &ApprovalsDecideResult) -> Success {
    let mut human = format!("{} {}.\n", capitalised(r.decision.as_str()), r.approval_id);
    if let Some(g) = &r.grant {
        human.push_str(&format!(
            "Grant {}: {} on {} runs without asking until {}.\n",
            g.grant_id,
            render::clean_line(&g.tool),
            render::clean_line(&g.alias),
            until(g.expires_at)
        ));
    }
    Success::new(render::to_value(r), human)
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn until(unix_s: u64) -> String {
    i64::try_from(unix_s)
        .ok()
        .and_then(appduct_client::timestamp::iso_seconds_from_unix_s)
        .unwrap_or_else(|| unix_s.to_string())
}

/// `approvals ls`: pending approvals, then grants.
pub fn approvals_ls(approvals: &[ApprovalSummary], grants: &[GrantSummary]) -> Success {
    let data =
        json!({"approvals": render::to_value(&approvals), "grants": render::to_value(&grants)});
    let mut human = String::new();
    if approvals.is_empty() {
        human.push_str("No calls are waiting for an operator.\n");
    } else {
        human.push_str("Waiting for an operator\n");
        for a in approvals {
            human.push_str(&format!(
                "  {}  {} on {}  (caller {}, call {}, expires {})\n",
                a.approval_id,
                render::clean_line(&a.tool),
                render::clean_line(&a.alias),
                a.caller,
                render::clean_line(&a.call_id),
                until(a.expires_at)
            ));
            // Escaped by the daemon already; again here, since the text comes off the socket.
            if !a.args_preview.is_empty() {
                human.push_str(&format!(
                    "    arguments: {}\n",
                    appduct_protocol::preview::escape_hidden(&a.args_preview)
                ));
            }
        }
        human.push_str("Approve in a terminal with appduct approvals approve <APPROVAL_ID>.\n");
    }
    if !grants.is_empty() {
        human.push_str("Grants\n");
        for g in grants {
            human.push_str(&format!(
                "  {}  {} on {}  until {}\n",
                g.grant_id,
                render::clean_line(&g.tool),
                render::clean_line(&g.alias),
                until(g.expires_at)
            ));
        }
    }
    Success::new(data, human)
}
