//! `appduct sessions ls | revoke | link` (§L6); `link` lives in [`link`].

pub mod lease;
pub mod link;
pub mod wait;

use appduct_protocol::control::{
    NoParams, RevokeResult, RevokedKind, SelectorParams, SessionState, SessionSummary,
    SessionsList, SessionsRevoke,
};
use clap::{Args, Subcommand};
use serde_json::json;
use std::ffi::OsString;
use time::OffsetDateTime;

use super::Command;
use super::args::{SelectorArgs, optional_selector};
use super::parse::{missing_verb, unknown_verb};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Success};
use crate::render::{self, to_value};

#[derive(Debug, Args)]
pub struct SessionsNoun {
    #[command(subcommand)]
    pub verb: Option<SessionsVerb>,
}

#[derive(Debug, Subcommand)]
pub enum SessionsVerb {
    /// List live sessions
    Ls,
    /// Revoke a session, or discard a pending link named by its id
    Revoke(SelectorArgs),
    /// Mint a link (deep link, QR code or web link) and optionally deliver it
    Link(link::LinkArgs),
    /// Hold a session's lease while this runs (other clients' tool calls are refused), or end it
    Lease(lease::LeaseArgs),
    #[command(external_subcommand)]
    Unknown(Vec<OsString>),
}

pub fn validate(noun: SessionsNoun) -> Result<Command, CliError> {
    match noun.verb {
        None => Err(missing_verb("sessions")),
        Some(SessionsVerb::Unknown(words)) => Err(unknown_verb("sessions", &words)),
        Some(SessionsVerb::Ls) => Ok(Command::SessionsLs),
        Some(SessionsVerb::Revoke(a)) => Ok(Command::SessionsRevoke {
            selector: optional_selector("sessions revoke", a.positionals)?,
        }),
        Some(SessionsVerb::Link(a)) => Ok(Command::SessionsLink(link::validate(a)?)),
        Some(SessionsVerb::Lease(a)) => Ok(Command::SessionsLease(lease::validate(a)?)),
    }
}

/// `sessions ls`.
pub async fn ls(globals: &Globals, out: &Output) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let sessions = client
        .call::<SessionsList>(NoParams {})
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    Ok(sessions_ls_within(
        &sessions,
        OffsetDateTime::now_utc(),
        out.stdout_columns,
    ))
}

/// `sessions revoke [selector]`.
pub async fn revoke(
    globals: &Globals,
    out: &Output,
    selector: Option<&str>,
) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let result = client
        .call::<SessionsRevoke>(
            SelectorParams::default().with_selector(selector.map(str::to_owned)),
        )
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    Ok(sessions_revoke(&result))
}

/// `sessions ls` (§L6.1): `data` is the array; human is the borderless table.
pub fn sessions_ls(sessions: &[SessionSummary], now: OffsetDateTime) -> Success {
    sessions_ls_within(sessions, now, None)
}

/// [`sessions_ls`] with the table cut to `columns` when stdout is a terminal (§L3.3).
pub fn sessions_ls_within(
    sessions: &[SessionSummary],
    now: OffsetDateTime,
    columns: Option<usize>,
) -> Success {
    if sessions.is_empty() {
        return Success::new(
            json!([]),
            "No sessions. Run \"appduct sessions link\" to connect an app.\n",
        );
    }
    let mut rows = vec![
        ["ALIAS", "STATE", "TRANSPORT", "DEVICE", "TOOLS", "AGE"]
            .map(String::from)
            .to_vec(),
    ];
    for s in sessions {
        let state = match (s.state, s.suspend_reason) {
            (SessionState::Active, _) => "active".to_owned(),
            (SessionState::Suspended, Some(reason)) => format!("suspended ({reason})"),
            (SessionState::Suspended, None) => "suspended".to_owned(),
        };
        // A held lease (control.md §C10.9) shows beside the state; `--json` has `lease`.
        let state = match &s.lease {
            Some(l) => format!(
                "{state}, leased by {}",
                l.holder
                    .client
                    .as_deref()
                    .map_or_else(|| "a client".to_owned(), render::clean_line)
            ),
            None => state,
        };
        let age = render::parse_instant(&s.claimed_at).map_or_else(
            || "-".to_owned(),
            |at| render::age(render::seconds_between(at, now)),
        );
        rows.push(vec![
            render::clean_line(&s.alias),
            state,
            transport_text(s),
            device_text(s),
            s.tool_count.to_string(),
            age,
        ]);
    }
    Success::new(to_value(&sessions), render::table_within(&rows, columns))
}

/// The listener the session is on, with the randomness source a sealed app named
/// (`sealed (drbg)`, SECURITY.md §4.17): the same `transport` and `rng` as `--json`.
fn transport_text(s: &SessionSummary) -> String {
    match s.rng {
        Some(rng) => format!("{} ({})", s.transport, rng.as_str()),
        None => s.transport.to_string(),
    }
}

/// `manufacturer model (os)` with the parts that are known; `-` when none is. The parts come
/// from the app's claim, so they are cleaned (SECURITY.md §4.13).
fn device_text(s: &SessionSummary) -> String {
    let d = &s.device;
    let part = |p: Option<&str>| p.map(render::clean_line).filter(|p| !p.is_empty());
    let name = [part(d.manufacturer.as_deref()), part(d.model.as_deref())]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    match (name.is_empty(), part(d.os.as_deref())) {
        (true, None) => "-".to_owned(),
        (true, Some(os)) => os,
        (false, None) => name,
        (false, Some(os)) => format!("{name} ({os})"),
    }
}

/// `sessions revoke` (§L6.2).
pub fn sessions_revoke(r: &RevokeResult) -> Success {
    let human = match (r.revoked, r.alias.as_deref()) {
        (RevokedKind::Link, _) => format!("Discarded pending link {}.\n", r.session_id),
        (RevokedKind::Session, Some(alias)) => format!(
            "Revoked {} ({}).\n",
            render::clean_line(alias),
            r.session_id
        ),
        (RevokedKind::Session, None) => format!("Revoked {}.\n", r.session_id),
    };
    Success::new(to_value(r), human)
}
