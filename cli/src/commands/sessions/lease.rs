//! `appduct sessions lease [selector] [--ttl] [--steal] [--release]` (§L6.5): hold a session's
//! lease while the command runs (control.md §C10.9), or end whoever's lease it is.

use std::time::Duration;

use appduct_client::client::ControlClient;
use appduct_protocol::control::{
    MAX_LEASE_TTL_MS, MIN_LEASE_TTL_MS, SelectorParams, SessionsLease, SessionsLeaseParams,
    SessionsLeaseResult, SessionsRelease, SessionsReleaseResult,
};
use clap::Args;

use super::super::args::{int_in, opt, optional_selector};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Reply, Success};
use crate::render::{self, to_value};
use crate::signals::Interrupts;

/// Default `--ttl`, seconds.
pub const DEFAULT_TTL_S: u64 = 60;

#[derive(Debug, Args)]
pub struct LeaseArgs {
    /// Session id or alias; optional when exactly one live session exists
    #[arg(value_name = "SELECTOR", add = super::super::complete::positional_completer())]
    pub positionals: Vec<String>,
    /// Lease TTL in seconds (1 to 3600, default 60); renewed every half TTL while the command runs
    #[arg(long, value_name = "SECONDS")]
    pub ttl: Option<String>,
    /// Take the lease even though another client holds it
    #[arg(long)]
    pub steal: bool,
    /// End the session's lease, whoever holds it, and exit
    #[arg(long)]
    pub release: bool,
}

/// A validated `sessions lease`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    pub selector: Option<String>,
    pub ttl_s: u64,
    pub steal: bool,
    pub release: bool,
}

pub fn validate(a: LeaseArgs) -> Result<LeaseRequest, CliError> {
    let (min, max) = (MIN_LEASE_TTL_MS / 1000, MAX_LEASE_TTL_MS / 1000);
    let ttl_s = opt(a.ttl, |raw| {
        int_in("--ttl", raw, min, max, "an integer from 1 to 3600")
    })?;
    if a.release && ttl_s.is_some() {
        return Err(CliError::usage("--ttl cannot be used with --release"));
    }
    Ok(LeaseRequest {
        selector: optional_selector("sessions lease", a.positionals)?,
        ttl_s: ttl_s.unwrap_or(DEFAULT_TTL_S),
        steal: a.steal,
        release: a.release,
    })
}

fn holder_text(client: Option<&str>, pid: Option<u32>) -> String {
    match (client.map(render::clean_line), pid) {
        (Some(c), Some(p)) => format!("{c} (pid {p})"),
        (Some(c), None) => c,
        (None, Some(p)) => format!("pid {p}"),
        (None, None) => "an unnamed client".to_owned(),
    }
}

/// The success of taking the lease, printed before the command starts holding it.
pub fn lease_taken(r: &SessionsLeaseResult) -> Success {
    let mut human = format!(
        "Leased {} for {} s; renewing until Ctrl-C, which releases it.\n",
        render::clean_line(&r.alias),
        r.ttl_ms / 1000
    );
    if let Some(from) = &r.stolen_from {
        human = format!(
            "Took the lease from {}. {human}",
            holder_text(from.client.as_deref(), from.pid)
        );
    }
    Success::new(to_value(r), human)
}

/// `--release`: the lease was taken over (if there was one) and ended.
pub fn lease_released(taken: &SessionsLeaseResult, released: &SessionsReleaseResult) -> Success {
    let alias = render::clean_line(&released.alias);
    let human = match &taken.stolen_from {
        Some(h) => format!(
            "Released the lease {} held on {alias}.\n",
            holder_text(h.client.as_deref(), h.pid)
        ),
        None => format!("{alias} had no lease; none is held now.\n"),
    };
    let mut data = to_value(released);
    if let (Some(map), Some(h)) = (data.as_object_mut(), &taken.stolen_from) {
        map.insert("previousHolder".into(), to_value(h));
    }
    Success::new(data, human)
}

async fn take(
    client: &ControlClient,
    req: &LeaseRequest,
    steal: bool,
) -> Result<SessionsLeaseResult, appduct_client::client::ClientError> {
    let params = SessionsLeaseParams::default()
        .with_selector(req.selector.clone())
        .with_ttl_ms(Some(req.ttl_s * 1000))
        .with_steal(steal);
    client.call::<SessionsLease>(params).await
}

/// Runs `sessions lease`.
pub async fn run(globals: &Globals, out: &Output, req: &LeaseRequest) -> Result<Reply, CliError> {
    let mut signals = Interrupts::new(false)
        .map_err(|e| CliError::internal(format!("cannot install signal handlers: {e}")))?;
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let failed = |e| connect::client_error(&e, &dir);
    let taken = take(&client, req, req.steal || req.release)
        .await
        .map_err(failed)?;
    let release = || {
        client.call::<SessionsRelease>(
            SelectorParams::default().with_selector(Some(taken.session_id.clone())),
        )
    };
    if req.release {
        let released = release().await.map_err(failed)?;
        return Ok(Reply::Success(lease_released(&taken, &released)));
    }
    out.print_success(&lease_taken(&taken));
    // Renew at half the TTL; the lease also ends if this process dies (its connection closes).
    let every = Duration::from_millis(taken.ttl_ms / 2);
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            _ = signals.recv() => {
                let _ = release().await;
                return Ok(Reply::Done(0));
            }
            _ = renew.tick() => {
                let again = SessionsLeaseParams::default()
                    .with_selector(Some(taken.session_id.clone()))
                    .with_ttl_ms(Some(taken.ttl_ms));
                if let Err(e) = client.call::<SessionsLease>(again).await {
                    // Stolen or the session ended: say so and stop holding.
                    return Ok(Reply::Done(out.print_failure_after_start(&failed(e))));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use appduct_protocol::control::{LeaseHolder, SessionLease};

    fn args(ttl: Option<&str>, steal: bool, release: bool) -> LeaseArgs {
        LeaseArgs {
            positionals: vec!["pixel-8".into()],
            ttl: ttl.map(str::to_owned),
            steal,
            release,
        }
    }

    #[test]
    fn ttl_is_checked_and_excludes_release() {
        let ok = validate(args(None, false, false)).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(ok.ttl_s, DEFAULT_TTL_S);
        assert_eq!(ok.selector.as_deref(), Some("pixel-8"));
        for bad in ["0", "3601", "-1", "1.5"] {
            assert!(validate(args(Some(bad), false, false)).is_err(), "{bad}");
        }
        assert!(validate(args(Some("30"), false, true)).is_err());
        assert!(validate(args(None, true, true)).is_ok());
    }

    #[test]
    fn human_lines_name_the_holder_taken_from() {
        let holder = |c: &str, pid| LeaseHolder::new(Some(c.to_owned()), Some(pid));
        let taken = SessionsLeaseResult::new(
            "S",
            "pixel-8",
            SessionLease::new(holder("appduct", 2), 1_796_083_332),
            60_000,
            false,
            Some(holder("appduct-mcp", 48_990)),
        );
        let s = lease_taken(&taken);
        assert_eq!(
            s.human,
            "Took the lease from appduct-mcp (pid 48990). Leased pixel-8 for 60 s; renewing until Ctrl-C, which releases it.\n"
        );
        let released = lease_released(&taken, &SessionsReleaseResult::new("S", "pixel-8", true));
        assert_eq!(
            released.human,
            "Released the lease appduct-mcp (pid 48990) held on pixel-8.\n"
        );
        assert_eq!(released.data["previousHolder"]["pid"], 48_990);
    }
}
