//! The `appduct` binary.

use clap::Parser;

/// Call functions inside running apps from agents, terminals and test runners.
#[derive(Debug, Parser)]
#[command(name = "appduct", version, about)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    Ok(())
}
