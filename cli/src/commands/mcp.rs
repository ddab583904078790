//! `appduct mcp [--scheme <scheme>]` (§L12): the MCP bridge on stdio, on its own
//! current-thread runtime. The scheme is not validated here; an invalid one is reported at
//! startup and the server still starts.

use appduct_mcp::{BridgeOptions, StdioOptions};
use clap::Args;

use super::Command;
use crate::connect::{self, Contact};
use crate::globals::Globals;
use crate::output::{Output, OutputFlags};

/// `daemon.hello` `client.name` of `appduct mcp`.
pub const MCP_CLIENT_NAME: &str = "appduct-mcp";

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Deep-link scheme for links the bridge creates
    #[arg(long, value_name = "SCHEME")]
    pub scheme: Option<String>,
}

pub fn validate(a: McpArgs) -> Command {
    Command::Mcp { scheme: a.scheme }
}

/// `appduct mcp`: the bridge on stdio, on its own current-thread runtime.
pub fn run(g: &Globals, scheme: Option<&String>) -> u8 {
    let dir = match g.state_dir() {
        Ok(dir) => dir,
        // stdout stays JSON-RPC only and --json has no effect: stderr (§L12).
        Err(e) => {
            let flags = OutputFlags {
                json: false,
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
        ..BridgeOptions::default()
    }
    .with_test_env(|name| std::env::var(name).ok());
    appduct_mcp::run_stdio(StdioOptions { client, bridge })
}
