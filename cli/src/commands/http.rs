//! `appduct http enable | disable | status | token` (§L24): the daemon's loopback HTTP API
//! (docs/http.md). `enable` and `disable` write `http.port` in `config.json` (§S2.2) and ask a
//! running daemon to reload it, which starts or stops the server at once (§H1); `token` prints
//! (and with `--rotate` replaces) `<state>/http.token`.

use std::ffi::OsString;

use appduct_client::client::ControlClient;
use appduct_client::config::{Config, write_http_port};
use appduct_client::http_token;
use appduct_protocol::control::{DaemonReload, DaemonStatus, NoParams};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::Command;
use super::parse::{missing_verb, unknown_verb};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Success};

#[derive(Debug, Args)]
pub struct HttpNoun {
    #[command(subcommand)]
    pub verb: Option<HttpVerb>,
}

#[derive(Debug, Subcommand)]
pub enum HttpVerb {
    /// Turn the loopback HTTP API on (writes http.port to config.json and applies it)
    Enable {
        /// TCP port on 127.0.0.1; 0 lets the OS choose [default: the configured one, else 0]
        #[arg(long, value_name = "N")]
        port: Option<u16>,
    },
    /// Turn the loopback HTTP API off (removes http.port and applies it)
    Disable,
    /// Whether the HTTP API is configured and on which port it listens
    Status,
    /// Print the bearer token (creating it when missing)
    Token {
        /// Replace the token first; the old one stops working at once
        #[arg(long)]
        rotate: bool,
    },
    #[command(external_subcommand)]
    Unknown(Vec<OsString>),
}

/// A validated `appduct http` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Http {
    Enable { port: Option<u16> },
    Disable,
    Status,
    Token { rotate: bool },
}

impl Http {
    pub fn label(&self) -> &'static str {
        match self {
            Http::Enable { .. } => "http enable",
            Http::Disable => "http disable",
            Http::Status => "http status",
            Http::Token { .. } => "http token",
        }
    }
}

pub fn validate(noun: HttpNoun) -> Result<Command, CliError> {
    let http = match noun.verb {
        None => return Err(missing_verb("http")),
        Some(HttpVerb::Unknown(words)) => return Err(unknown_verb("http", &words)),
        Some(HttpVerb::Enable { port }) => Http::Enable { port },
        Some(HttpVerb::Disable) => Http::Disable,
        Some(HttpVerb::Status) => Http::Status,
        Some(HttpVerb::Token { rotate }) => Http::Token { rotate },
    };
    Ok(Command::Http(http))
}

fn io_error(what: &str, e: &std::io::Error) -> CliError {
    CliError::internal(format!("cannot {what}: {e}"))
}

/// The configured port, when `http.port` is set (an invalid file is a validation error).
fn configured_port(dir: &std::path::Path) -> Result<Option<u16>, CliError> {
    let loaded = Config::load(dir).map_err(|e| CliError::validation(e.to_string()))?;
    Ok(loaded.config.http.map(|h| h.port))
}

fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

async fn running_port(client: &ControlClient) -> Result<Option<u16>, CliError> {
    client
        .call::<DaemonStatus>(NoParams {})
        .await
        .map(|s| s.http_port)
        .map_err(|e| CliError::connection(e.to_string()))
}

pub async fn run(globals: &Globals, out: &Output, http: &Http) -> Result<Success, CliError> {
    let dir = globals.state_dir()?;
    match http {
        Http::Token { rotate } => {
            let token = if *rotate {
                http_token::rotate_token(dir.path())
            } else {
                http_token::read_or_create_token(dir.path())
            }
            .map_err(|e| io_error("write the HTTP token", &e))?;
            let path = http_token::token_path(dir.path());
            Ok(Success::new(
                json!({ "token": token, "path": path.display().to_string(), "rotated": rotate }),
                format!("{token}\n"),
            ))
        }
        Http::Enable { port } => {
            let port = match port {
                Some(port) => *port,
                None => configured_port(dir.path())?.unwrap_or(0),
            };
            write_http_port(dir.path(), Some(port))
                .map_err(|e| io_error("update config.json", &e))?;
            http_token::read_or_create_token(dir.path())
                .map_err(|e| io_error("write the HTTP token", &e))?;
            // A daemon started here reads the new file; a running one reloads it.
            let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
            client
                .call::<DaemonReload>(NoParams {})
                .await
                .map_err(|e| connect::client_error(&e, &dir))?;
            let bound = running_port(&client).await?.ok_or_else(|| {
                CliError::internal("the daemon reloaded config.json but the HTTP API is not on")
            })?;
            Ok(Success::new(
                json!({ "enabled": true, "port": bound, "url": url(bound),
                        "tokenPath": http_token::token_path(dir.path()).display().to_string() }),
                format!(
                    "HTTP API on {}\nToken: appduct http token (sent as Authorization: Bearer <token>)\n",
                    url(bound)
                ),
            ))
        }
        Http::Disable => {
            write_http_port(dir.path(), None).map_err(|e| io_error("update config.json", &e))?;
            let opts = connect::options(globals, &dir, Contact::Existing);
            // No running daemon: nothing to stop; the next one starts without the API.
            if let Ok(client) = ControlClient::connect(opts).await {
                client
                    .call::<DaemonReload>(NoParams {})
                    .await
                    .map_err(|e| connect::client_error(&e, &dir))?;
            }
            Ok(Success::new(
                json!({ "enabled": false }),
                "HTTP API off\n".to_owned(),
            ))
        }
        Http::Status => {
            let configured = configured_port(dir.path())?;
            let opts = connect::options(globals, &dir, Contact::Existing);
            let listening = match ControlClient::connect(opts).await {
                Ok(client) => running_port(&client).await?,
                Err(_) => None,
            };
            let mut data = json!({
                "enabled": configured.is_some(),
                "configuredPort": configured,
                "port": listening,
                "url": listening.map(url),
            });
            if let Value::Object(m) = &mut data {
                m.insert(
                    "tokenPath".into(),
                    json!(http_token::token_path(dir.path()).display().to_string()),
                );
            }
            let human = match (configured, listening) {
                (_, Some(port)) => format!("HTTP API on {}\n", url(port)),
                (Some(_), None) => {
                    "HTTP API enabled in config.json; the daemon is not running\n".to_owned()
                }
                (None, None) => "HTTP API off (appduct http enable)\n".to_owned(),
            };
            Ok(Success::new(data, human))
        }
    }
}
