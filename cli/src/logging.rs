//! Diagnostics on stderr (§L2.2, §S1.3).
//!
//! - `APPDUCT_LOG` set: a tracing `EnvFilter` with that value, full log lines, in every mode.
//! - Unset, human mode: warnings (and errors) only, as `warning: …` / `error: …` lines.
//! - Unset, `--json`: nothing.
//! - The hosts (`daemon run`, `mcp`) always log; unset `APPDUCT_LOG` means `info` for the daemon
//!   and `info,rmcp=warn` for the bridge.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The variable holding the diagnostic filter.
pub const LOG_ENV: &str = "APPDUCT_LOG";

/// How this process logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogSetup {
    /// No subscriber at all.
    Silent,
    /// `warning: …` lines for warnings and errors.
    WarningLines,
    /// Full log lines filtered by an `EnvFilter` directive string.
    Filter(String),
}

/// What kind of command runs, as far as logging is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogRole {
    /// An ordinary command.
    Client,
    /// `appduct daemon run`.
    DaemonHost,
    /// `appduct mcp`.
    McpHost,
}

impl LogSetup {
    /// Picks the setup from the role, `--json` and the value of `APPDUCT_LOG` (empty counts as
    /// unset).
    pub fn choose(role: LogRole, json: bool, env: Option<&str>) -> Self {
        if let Some(filter) = env.filter(|v| !v.trim().is_empty()) {
            return LogSetup::Filter(filter.to_owned());
        }
        match role {
            LogRole::DaemonHost => LogSetup::Filter("info".to_owned()),
            LogRole::McpHost => LogSetup::Filter("info,rmcp=warn".to_owned()),
            LogRole::Client if json => LogSetup::Silent,
            LogRole::Client => LogSetup::WarningLines,
        }
    }

    /// Installs the global subscriber; `ansi` when stderr may be coloured. Installing twice is
    /// harmless (the second attempt is ignored).
    pub fn install(&self, ansi: bool) {
        match self {
            LogSetup::Silent => {}
            LogSetup::WarningLines => {
                let _ = tracing_subscriber::fmt()
                    .with_writer(std::io::stderr)
                    .with_max_level(LevelFilter::WARN)
                    .with_ansi(false)
                    .event_format(WarningLine)
                    .try_init();
            }
            LogSetup::Filter(directives) => {
                let filter = EnvFilter::builder()
                    .with_default_directive(LevelFilter::INFO.into())
                    .parse_lossy(directives);
                let _ = tracing_subscriber::fmt()
                    .with_writer(std::io::stderr)
                    .with_env_filter(filter)
                    .with_ansi(ansi)
                    .try_init();
            }
        }
    }
}

/// `warning: <message and fields>`; `error: …` for errors.
#[derive(Debug, Clone, Copy)]
struct WarningLine;

impl<S, N> FormatEvent<S, N> for WarningLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let word = if *event.metadata().level() == Level::ERROR {
            "error"
        } else {
            "warning"
        };
        write!(writer, "{word}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appduct_log_wins_in_every_mode() {
        for role in [LogRole::Client, LogRole::DaemonHost, LogRole::McpHost] {
            for json in [false, true] {
                assert_eq!(
                    LogSetup::choose(role, json, Some("debug")),
                    LogSetup::Filter("debug".into())
                );
            }
        }
    }

    #[test]
    fn defaults_per_role_and_mode() {
        assert_eq!(
            LogSetup::choose(LogRole::Client, false, None),
            LogSetup::WarningLines
        );
        assert_eq!(
            LogSetup::choose(LogRole::Client, true, None),
            LogSetup::Silent
        );
        // An empty variable counts as unset.
        assert_eq!(
            LogSetup::choose(LogRole::Client, true, Some(" ")),
            LogSetup::Silent
        );
        assert_eq!(
            LogSetup::choose(LogRole::DaemonHost, true, None),
            LogSetup::Filter("info".into())
        );
        assert_eq!(
            LogSetup::choose(LogRole::McpHost, false, None),
            LogSetup::Filter("info,rmcp=warn".into())
        );
    }
}
