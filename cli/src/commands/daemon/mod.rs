//! `appduct daemon run | start | stop | status` (§L9): [`run`] hosts the daemon in the
//! foreground, [`lifecycle`] starts, stops and queries it.

pub mod lifecycle;
pub mod run;

use std::ffi::OsString;

use clap::{Args, Subcommand};

use super::Command;
use super::parse::{missing_verb, unknown_verb};
use crate::error::CliError;

#[derive(Debug, Args)]
pub struct DaemonNoun {
    #[command(subcommand)]
    pub verb: Option<DaemonVerb>,
}

#[derive(Debug, Subcommand)]
pub enum DaemonVerb {
    /// Host the daemon in the foreground
    Run,
    /// Start the daemon if it is not running
    Start,
    /// Stop the running daemon
    Stop,
    /// Show the daemon's status, policy, audit and events log
    Status,
    /// Re-read config.json and apply the policy without dropping sessions (also: SIGHUP)
    Reload,
    #[command(external_subcommand)]
    Unknown(Vec<OsString>),
}

pub fn validate(noun: DaemonNoun) -> Result<Command, CliError> {
    match noun.verb {
        None => Err(missing_verb("daemon")),
        Some(DaemonVerb::Unknown(words)) => Err(unknown_verb("daemon", &words)),
        Some(DaemonVerb::Run) => Ok(Command::DaemonRun),
        Some(DaemonVerb::Start) => Ok(Command::DaemonStart),
        Some(DaemonVerb::Stop) => Ok(Command::DaemonStop),
        Some(DaemonVerb::Status) => Ok(Command::DaemonStatus),
        Some(DaemonVerb::Reload) => Ok(Command::DaemonReload),
    }
}
