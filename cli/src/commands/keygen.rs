//! `appduct keygen [--out <path>] [--force]` (§L11): creates the daemon's host key without
//! contacting the daemon. Generation and the pin come from the daemon's `tls` module, so the
//! file is written exactly as the daemon would write it (§D3.1).

use std::path::{Path, PathBuf};

use appduct_client::config::Config;
use appduct_client::pidfile;
use appduct_daemon::tls::{self, HostKey, KeyError, Overwrite};
use clap::Args;
use serde_json::json;

use super::Command;
use super::args::absolute;
use crate::error::CliError;
use crate::globals::{Globals, state_dir_error};
use crate::output::{Output, Success};
use crate::render::{self, Row, Section};

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Key file (default: keyPath of <state-dir>/config.json, else <state-dir>/key.pem)
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Replace an existing key (apps embedding the old pin will refuse the new key; pending
    /// sealed links fail their handshake)
    #[arg(long)]
    pub force: bool,
}

/// `keygen` (§L11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeygenRequest {
    /// `--out`, made absolute.
    pub out: Option<PathBuf>,
    pub force: bool,
}

pub fn validate(a: KeygenArgs) -> Result<Command, CliError> {
    Ok(Command::Keygen(KeygenRequest {
        out: a.out.as_deref().map(absolute),
        force: a.force,
    }))
}

/// `algorithm` of the JSON result: the only kind `keygen` creates.
pub const ALGORITHM: &str = "ec-p256";

pub fn run(req: &KeygenRequest, globals: &Globals, out: &Output) -> Result<Success, CliError> {
    let path = match &req.out {
        Some(path) => {
            require_parent(path, "--out")?;
            path.clone()
        }
        None => default_key_path(globals)?,
    };
    let overwrite = if req.force {
        Overwrite::Replace
    } else {
        Overwrite::Never
    };
    let replaced = tls::generate_key_file(&path, overwrite).map_err(|e| key_error(e, &path))?;
    let key = HostKey::load(&path)
        .map_err(|e| CliError::internal(format!("the new key could not be loaded back: {e}")))?;
    let pin = key.pin().as_str().to_owned();
    // The sealed transport's static key is derived from this key (issue #23).
    let sealed_key = key.sealed_public_key();

    if replaced
        && let Ok(state_dir) = globals.state_dir()
        && pidfile::owner_alive(state_dir.path())
    {
        out.notice(&format!(
            "Note: the daemon running on {} keeps its old key until it restarts (appduct daemon stop), \
             apps embedding the old pin will refuse the new key, and sealed links minted \
             before the restart will fail their handshake.",
            state_dir.path().display()
        ));
    }

    let path_text = path.display().to_string();
    let data = json!({
        "path": path_text,
        "pin": pin,
        "sealedKey": sealed_key,
        "algorithm": ALGORITHM,
        "replaced": replaced,
    });
    let human = render::sections(&[Section::new(
        "Key ready",
        vec![
            Row::field("Path", path_text.as_str()),
            Row::field("Algorithm", "EC P-256"),
            Row::field("Pin", pin.as_str()),
            Row::field("Sealed key", sealed_key.as_str()),
        ],
    )]);
    Ok(Success::new(data, human))
}

/// `keyPath` of `<state-dir>/config.json` when set, else `<state-dir>/key.pem`; the state dir
/// is created (0700) if needed.
fn default_key_path(globals: &Globals) -> Result<PathBuf, CliError> {
    let state_dir = globals.state_dir()?;
    state_dir.prepare().map_err(state_dir_error)?;
    let loaded = Config::load(state_dir.path()).map_err(|e| CliError::validation(e.to_string()))?;
    let path = loaded.config.key_path;
    if path != state_dir.key_path() {
        require_parent(&path, "keyPath")?;
    }
    Ok(path)
}

/// A key path whose directory does not exist is an argument error (§L11).
fn require_parent(path: &Path, source: &str) -> Result<(), CliError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if parent.is_dir() {
        Ok(())
    } else {
        Err(CliError::usage(format!(
            "cannot create the key {}: directory {} does not exist",
            path.display(),
            parent.display()
        ))
        .with_detail("path", path.display().to_string())
        .with_detail("source", source))
    }
}

fn key_error(e: KeyError, path: &Path) -> CliError {
    match e {
        KeyError::AlreadyExists { .. } => CliError::usage(format!(
            "{} already exists; pass --force to replace it (apps embedding its pin will refuse the new key)",
            path.display()
        ))
        .with_detail("path", path.display().to_string()),
        KeyError::Io { .. } => {
            CliError::usage(e.to_string()).with_detail("path", path.display().to_string())
        }
        other => CliError::internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::globals::RestartFlag;
    use crate::output::OutputFlags;
    use std::os::unix::fs::PermissionsExt as _;

    fn globals(state_dir: &Path) -> Globals {
        Globals {
            output: OutputFlags::default(),
            state_dir_flag: Some(state_dir.to_path_buf()),
            restart: RestartFlag::Unset,
        }
    }

    fn out() -> Output {
        Output::plain(OutputFlags::default())
    }

    #[test]
    fn creates_a_private_key_in_a_new_state_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        let req = KeygenRequest {
            out: None,
            force: false,
        };
        let s = run(&req, &globals(&state), &out()).unwrap();
        let key = state.join("key.pem");
        assert_eq!(s.data["path"], key.display().to_string());
        assert_eq!(s.data["algorithm"], "ec-p256");
        assert_eq!(s.data["replaced"], false);
        let pin = s.data["pin"].as_str().unwrap();
        assert!(pin.starts_with("sha256/"));
        assert_eq!(HostKey::load(&key).unwrap().pin().as_str(), pin);
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        assert!(s.human.starts_with("Key ready\n  Path:        "));
        assert!(s.human.contains("\n  Algorithm:   EC P-256\n"));
        // The sealed transport's static key, derived from this key (issue #23).
        let sealed = HostKey::load(&key).unwrap().sealed_public_key();
        assert_eq!(s.data["sealedKey"], sealed.as_str());
        assert_eq!(sealed.len(), 43, "unpadded base64url of 32 bytes");
        assert!(s.human.contains(&format!("\n  Sealed key:  {sealed}\n")));
    }

    #[test]
    fn existing_key_needs_force() {
        let tmp = tempfile::tempdir().unwrap();
        let key = tmp.path().join("k.pem");
        let req = KeygenRequest {
            out: Some(key.clone()),
            force: false,
        };
        let first = run(&req, &globals(tmp.path()), &out()).unwrap();
        let before = std::fs::read(&key).unwrap();
        let e = run(&req, &globals(tmp.path()), &out()).unwrap_err();
        assert_eq!(e.exit_code(), 64);
        assert!(e.message.contains("--force"));
        assert_eq!(
            std::fs::read(&key).unwrap(),
            before,
            "untouched without --force"
        );

        let forced = KeygenRequest {
            out: Some(key.clone()),
            force: true,
        };
        let second = run(&forced, &globals(tmp.path()), &out()).unwrap();
        assert_eq!(second.data["replaced"], true);
        assert_ne!(second.data["pin"], first.data["pin"]);
    }

    #[test]
    fn missing_out_directory_is_a_usage_error() {
        let tmp = tempfile::tempdir().unwrap();
        let req = KeygenRequest {
            out: Some(tmp.path().join("nope/k.pem")),
            force: false,
        };
        let e = run(&req, &globals(tmp.path()), &out()).unwrap_err();
        assert_eq!(e.exit_code(), 64);
        assert!(!tmp.path().join("nope").exists());
    }

    #[test]
    fn key_path_from_config_is_used() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::write(state.join("config.json"), r#"{"keyPath": "host.pem"}"#).unwrap();
        let req = KeygenRequest {
            out: None,
            force: false,
        };
        let s = run(&req, &globals(&state), &out()).unwrap();
        assert_eq!(s.data["path"], state.join("host.pem").display().to_string());
        assert!(state.join("host.pem").is_file());
        assert!(!state.join("key.pem").exists());
    }

    #[test]
    fn invalid_config_is_a_validation_error() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("config.json"), "{not json").unwrap();
        let req = KeygenRequest {
            out: None,
            force: false,
        };
        let e = run(&req, &globals(tmp.path()), &out()).unwrap_err();
        assert_eq!(e.exit_code(), 65);
        assert!(e.message.contains("config.json"));
    }
}
