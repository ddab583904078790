//! `appduct mcp [--scheme <scheme>]` (§L12): the MCP bridge on stdio, on its own
//! current-thread runtime. The scheme is not validated here; an invalid one is reported at
//! startup and the server still starts. `mcp install` and `mcp uninstall` (§L20) live in
//! [`super::mcp_setup`].

use appduct_mcp::{BridgeOptions, StdioOptions};
use clap::{Args, Subcommand};

use super::Command;
use super::mcp_setup::{self, SetupAction, SetupArgs};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, OutputFlags};

/// `daemon.hello` `client.name` of `appduct mcp`.
pub const MCP_CLIENT_NAME: &str = "appduct-mcp";

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct McpArgs {
    /// Deep-link scheme for links the bridge creates
    #[arg(long, value_name = "SCHEME")]
    pub scheme: Option<String>,
    /// Largest image (decoded bytes) passed to the client; a bigger one becomes a text block
    #[arg(long, value_name = "BYTES", env = "APPDUCT_MCP_MAX_IMAGE_BYTES",
          default_value_t = appduct_mcp::content::DEFAULT_MAX_IMAGE_BYTES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_image_bytes: u64,
    /// Milliseconds of silence of an app tool after which a call with a progress token gets a heartbeat
    #[arg(long, value_name = "MS", env = "APPDUCT_MCP_HEARTBEAT_MS",
          default_value_t = appduct_mcp::options::DEFAULT_CALL_HEARTBEAT_MS,
          value_parser = clap::value_parser!(u64).range(500..=600_000))]
    pub heartbeat_ms: u64,
    #[command(subcommand)]
    pub setup: Option<McpSetup>,
}

/// The agent-client set-up words under `mcp` (§L20).
#[derive(Debug, Subcommand)]
pub enum McpSetup {
    /// Add appduct to an agent client's MCP configuration (absolute path of this binary)
    Install(SetupArgs),
    /// Remove appduct from an agent client's MCP configuration
    Uninstall(SetupArgs),
}

/// The words after `mcp` that are set-up commands, not the stdio server (their output follows
/// §L3, not §L12).
pub const SETUP_WORDS: [&str; 2] = ["install", "uninstall"];

pub fn validate(a: McpArgs) -> Result<Command, CliError> {
    match a.setup {
        None => Ok(Command::Mcp {
            scheme: a.scheme,
            max_image_bytes: a.max_image_bytes,
            heartbeat_ms: a.heartbeat_ms,
        }),
        Some(McpSetup::Install(s)) => mcp_setup::validate(SetupAction::Install, s),
        Some(McpSetup::Uninstall(s)) => mcp_setup::validate(SetupAction::Uninstall, s),
    }
}

/// `appduct mcp`: the bridge on stdio, on its own current-thread runtime.
pub fn run(g: &Globals, scheme: Option<&String>, max_image_bytes: u64, heartbeat_ms: u64) -> u8 {
    let dir = match g.state_dir() {
        Ok(dir) => dir,
        // stdout stays JSON-RPC only and --json has no effect: stderr (§L12).
        Err(e) => {
            let flags = OutputFlags {
                json: false,
                color: crate::render::ColorMode::Never,
                ..g.output
            };
            return Output::for_process(flags).print_failure(&e);
        }
    };
    let mut client = connect::options(g, &dir, Contact::Full);
    client.client_name = MCP_CLIENT_NAME.to_owned();
    let bridge = BridgeOptions {
        scheme: scheme.cloned(),
        state_dir: Some(dir.path().to_path_buf()),
        max_image_bytes,
        call_heartbeat_interval: std::time::Duration::from_millis(heartbeat_ms),
        ..BridgeOptions::default()
    }
    .with_test_env(|name| std::env::var(name).ok());
    appduct_mcp::run_stdio(StdioOptions { client, bridge })
}
