//! What several commands share: the selector positionals (clap) and the argument rules every
//! command checks the same way (integers, selectors, globs, schemes, app ids, URLs), each
//! producing the CLI's own `usage_error` (§L2.3).

use std::path::{Path, PathBuf};

use appduct_client::project::{APP_ID_PATTERN, is_valid_app_id};
use appduct_protocol::control::MAX_SELECTOR_LEN;
use appduct_protocol::limits::{MAX_GLOB_LEN, MAX_SAFE_INTEGER};
use appduct_protocol::link::validate_scheme;
use clap::Args;

use crate::error::CliError;

/// An optional session selector (session id or alias).
#[derive(Debug, Args)]
pub struct SelectorArgs {
    /// Session id or alias; optional when exactly one live session exists
    #[arg(value_name = "SELECTOR", add = super::complete::positional_completer())]
    pub positionals: Vec<String>,
}

/// `[selector] <value>`: one positional is the value, two are selector and value (§L2.3).
#[derive(Debug, Args)]
pub struct SelectorValueArgs {
    /// Optional session id or alias, then the required value (tool name or cursor)
    #[arg(
        value_name = "ARGS",
        allow_negative_numbers = true,
        add = super::complete::positional_completer()
    )]
    pub positionals: Vec<String>,
}

/// The human default page size of `tools ls` and `events ls`.
pub const HUMAN_DEFAULT_LIMIT: u64 = 50;

/// The page size a `tools ls` / `events ls` request used: the user's `--limit`, else 50 in
/// human mode and none under `--json` (§L7.1).
pub fn effective_limit(given: Option<u64>, json: bool) -> Option<u64> {
    given.or((!json).then_some(HUMAN_DEFAULT_LIMIT))
}

/// A path made absolute against the current directory.
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

pub fn opt<T>(
    raw: Option<String>,
    check: impl FnOnce(&str) -> Result<T, CliError>,
) -> Result<Option<T>, CliError> {
    raw.as_deref().map(check).transpose()
}

/// Decimal digits only: no sign, no spaces, no exponent.
pub fn parse_digits(raw: &str) -> Option<u64> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

/// An integer flag in `min..=max`; `rule` completes "`flag` must be …".
pub fn int_in(flag: &str, raw: &str, min: u64, max: u64, rule: &str) -> Result<u64, CliError> {
    parse_digits(raw)
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| {
            CliError::usage(format!("{flag} must be {rule} (got \"{raw}\")"))
                .with_detail("argument", flag)
        })
}

/// `1..=2^53-1` (§L2.3 "must be a positive integer").
pub fn positive_int(flag: &str, raw: &str) -> Result<u64, CliError> {
    int_in(flag, raw, 1, MAX_SAFE_INTEGER, "a positive integer")
}

/// `0..=2^53-1`.
pub fn non_negative_int(flag: &str, raw: &str) -> Result<u64, CliError> {
    int_in(flag, raw, 0, MAX_SAFE_INTEGER, "an integer ≥ 0")
}

pub fn too_many(command: &str, takes: &str, got: &[String]) -> CliError {
    CliError::usage(format!(
        "too many arguments: {command} takes {takes} (got {}: {})",
        got.len(),
        got.iter()
            .map(|g| format!("\"{g}\""))
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .with_hint(format!("Run \"appduct {command} --help\" for usage."))
}

pub fn selector(raw: String) -> Result<String, CliError> {
    let len = raw.chars().count();
    if (1..=MAX_SELECTOR_LEN).contains(&len) {
        Ok(raw)
    } else {
        Err(CliError::usage(format!(
            "a session selector must be 1 to {MAX_SELECTOR_LEN} characters (a session id or alias)"
        )))
    }
}

/// The optional selector of a session-scoped command (§L2.3).
pub fn optional_selector(
    command: &str,
    positionals: Vec<String>,
) -> Result<Option<String>, CliError> {
    if positionals.len() > 1 {
        return Err(too_many(command, "at most one selector", &positionals));
    }
    positionals.into_iter().next().map(selector).transpose()
}

/// `[selector] <value>`: one positional is the value, two are selector and value (§L2.3).
pub fn selector_and_value(
    command: &str,
    value_name: &str,
    positionals: Vec<String>,
) -> Result<(Option<String>, String), CliError> {
    let mut it = positionals.clone().into_iter();
    match (it.next(), it.next(), it.next()) {
        (None, _, _) => Err(CliError::usage(format!(
            "{command} needs <{}>: appduct {command} [SELECTOR] <{value_name}>",
            value_name.to_lowercase()
        ))
        .with_hint(format!("Run \"appduct {command} --help\" for usage."))),
        (Some(value), None, _) => Ok((None, value)),
        (Some(sel), Some(value), None) => Ok((Some(selector(sel)?), value)),
        (Some(_), Some(_), Some(_)) => Err(too_many(
            command,
            &format!("[SELECTOR] <{value_name}>"),
            &positionals,
        )),
    }
}

/// A name glob: 1–4096 characters.
pub fn glob(raw: Option<String>) -> Result<Option<String>, CliError> {
    match raw {
        None => Ok(None),
        Some(g) if g.is_empty() => Err(CliError::usage("--name requires a value")),
        Some(g) if g.chars().count() > MAX_GLOB_LEN => Err(CliError::usage(format!(
            "--name must be at most {MAX_GLOB_LEN} characters"
        ))),
        Some(g) => Ok(Some(g)),
    }
}

pub fn scheme(raw: String) -> Result<String, CliError> {
    validate_scheme(&raw)
        .map(|()| raw.clone())
        .map_err(|e| CliError::usage(e.to_string()).with_detail("scheme", raw.as_str()))
}

pub fn app_id(flag: &str, raw: String) -> Result<String, CliError> {
    if is_valid_app_id(&raw) {
        Ok(raw)
    } else {
        Err(CliError::usage(format!(
            "{flag} must match {APP_ID_PATTERN} (got \"{raw}\")"
        )))
    }
}
