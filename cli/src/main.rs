//! The `appduct` binary; everything lives in the `appduct_cli` library.

use std::process::ExitCode;

fn main() -> ExitCode {
    // `APPDUCT_COMPLETE=<shell>`: answer the shell's completion request and exit (§L14.1).
    appduct_cli::commands::complete::complete_if_asked();
    ExitCode::from(appduct_cli::main_with_args(std::env::args_os().collect()))
}
