//! The `appduct` binary; everything lives in the `appduct_cli` library.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(appduct_cli::main_with_args(std::env::args_os().collect()))
}
