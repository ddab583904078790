//! `appduct completions <shell>` (05 §14): static completion scripts generated from the clap
//! definition, so they always match the command tree.

use clap::CommandFactory as _;
use clap_complete::Shell;
use serde_json::json;

use crate::args::Cli;
use crate::error::CliError;
use crate::output::Success;

/// The script for `shell`.
pub fn script(shell: Shell) -> Result<String, CliError> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "appduct", &mut buf);
    String::from_utf8(buf)
        .map_err(|_| CliError::internal("the generated completion script is not UTF-8"))
}

/// Human mode prints the script itself; `--json` wraps it as `{shell, script}`.
pub fn run(shell: Shell) -> Result<Success, CliError> {
    let script = script(shell)?;
    Ok(Success::new(
        json!({"shell": shell.to_string(), "script": script}),
        script,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_gets_a_script_naming_the_commands() {
        for shell in [
            Shell::Bash,
            Shell::Zsh,
            Shell::Fish,
            Shell::PowerShell,
            Shell::Elvish,
        ] {
            let text = script(shell).unwrap();
            assert!(text.contains("appduct"), "{shell}");
            assert!(text.contains("sessions"), "{shell}");
            assert!(text.contains("ios-device"), "{shell}: --open targets");
        }
    }

    #[test]
    fn json_data_names_the_shell() {
        let s = run(Shell::Fish).unwrap();
        assert_eq!(s.data["shell"], "fish");
        assert_eq!(s.data["script"].as_str(), Some(s.human.as_str()));
    }
}
