//! `appduct completions <shell>` (§L14): static completion scripts generated from the clap
//! definition, so they always match the command tree.

use clap::{Args, CommandFactory as _};
use clap_complete::Shell;
use serde_json::json;

use super::{Cli, Command};
use crate::error::CliError;
use crate::output::Success;

#[derive(Debug, Args)]
#[command(after_help = COMPLETIONS_INSTALL)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, powershell or elvish
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: Option<Shell>,
}

const COMPLETIONS_INSTALL: &str = "\
Where to install the script:
  bash        appduct completions bash > ~/.local/share/bash-completion/completions/appduct
  zsh         appduct completions zsh > \"${fpath[1]}/_appduct\"   (a directory in $fpath)
  fish        appduct completions fish > ~/.config/fish/completions/appduct.fish
  powershell  appduct completions powershell >> $PROFILE
  elvish      appduct completions elvish >> ~/.config/elvish/rc.elv

These scripts are static: commands, flags and enum values. To also complete session aliases,
session ids and tool names (asked of a running daemon), load the dynamic completer instead:
  bash        echo 'source <(APPDUCT_COMPLETE=bash appduct)' >> ~/.bashrc
  zsh         echo 'source <(APPDUCT_COMPLETE=zsh appduct)' >> ~/.zshrc
  fish        echo 'APPDUCT_COMPLETE=fish appduct | source' > ~/.config/fish/completions/appduct.fish

Examples:
  appduct completions bash > ~/.local/share/bash-completion/completions/appduct
  appduct completions zsh --json";

pub fn validate(a: CompletionsArgs) -> Result<Command, CliError> {
    match a.shell {
        Some(shell) => Ok(Command::Completions { shell }),
        None => Err(CliError::usage(
            "completions needs a shell: bash, zsh, fish, powershell or elvish",
        )),
    }
}

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
