//! Timing options of the bridge (§M1), one value injected by the host or a test.

use std::time::Duration;

use appduct_protocol::limits;

/// `APPDUCT_TEST_CONSENT_TIMEOUT_MS`: shortens the consent timeout in subprocess tests.
pub const CONSENT_TIMEOUT_ENV: &str = "APPDUCT_TEST_CONSENT_TIMEOUT_MS";
/// `APPDUCT_TEST_MRTR_TTL_MS`: shortens the MRTR handle lifetime in subprocess tests.
pub const MRTR_TTL_ENV: &str = "APPDUCT_TEST_MRTR_TTL_MS";

/// Default of [`BridgeOptions::call_heartbeat_interval`] (`appduct mcp --heartbeat-ms`).
pub const DEFAULT_CALL_HEARTBEAT_MS: u64 = 3_000;

/// Timing options, defaults in brackets (§M1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeOptions {
    /// How long an `elicitation/create` may stay unanswered [600 s].
    pub consent_timeout: Duration,
    /// `ttlMs` of every `consent.create`, within 1,000–600,000 ms [600 s].
    pub mrtr_ttl: Duration,
    /// Progress heartbeats while waiting on consent or in a wait built-in [15 s].
    pub heartbeat_interval: Duration,
    /// Progress heartbeats while an app tool called by `appduct_call_tool` is silent (§M17)
    /// [3 s, `--heartbeat-ms`].
    pub call_heartbeat_interval: Duration,
    /// Bound of a `roots/list` request [2 s].
    pub roots_timeout: Duration,
    /// The bound from stdin EOF (or SIGINT/SIGTERM) to the exit [2 s]: in-flight work gets
    /// this minus [`EXIT_MARGIN`](crate::stdio::EXIT_MARGIN), which is kept for teardown.
    pub exit_grace: Duration,
    /// `--scheme` of `appduct mcp`, first in the scheme order (§L5.1).
    pub scheme: Option<String>,
    /// The active state dir (its `config.json` is a scheme source, and it is skipped when
    /// walking up for project configs).
    pub state_dir: Option<std::path::PathBuf>,
    /// `--max-image-bytes`: the largest decoded image `appduct_call_tool` passes on
    /// [`DEFAULT_MAX_IMAGE_BYTES`](crate::content::DEFAULT_MAX_IMAGE_BYTES) (§M8.5).
    pub max_image_bytes: u64,
}

impl Default for BridgeOptions {
    fn default() -> Self {
        Self {
            consent_timeout: Duration::from_secs(600),
            mrtr_ttl: Duration::from_millis(limits::DEFAULT_CONSENT_TTL_MS),
            heartbeat_interval: Duration::from_secs(15),
            call_heartbeat_interval: Duration::from_millis(DEFAULT_CALL_HEARTBEAT_MS),
            roots_timeout: Duration::from_secs(2),
            exit_grace: Duration::from_secs(2),
            scheme: None,
            state_dir: None,
            max_image_bytes: crate::content::DEFAULT_MAX_IMAGE_BYTES,
        }
    }
}

impl BridgeOptions {
    /// Applies the two hidden test variables when set (§M1). An unparsable value is
    /// ignored; the MRTR lifetime is kept within `consent.create`'s `ttlMs` range.
    pub fn with_test_env(mut self, get: impl Fn(&str) -> Option<String>) -> Self {
        let ms = |name: &str| get(name).and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(ms) = ms(CONSENT_TIMEOUT_ENV) {
            self.consent_timeout = Duration::from_millis(ms.max(1));
        }
        if let Some(ms) = ms(MRTR_TTL_ENV) {
            self.mrtr_ttl = Duration::from_millis(
                ms.clamp(limits::MIN_CALL_TIMEOUT_MS, limits::MAX_CALL_TIMEOUT_MS),
            );
        }
        self
    }

    /// `ttlMs` for `consent.create`, always within 1,000–600,000.
    pub fn mrtr_ttl_ms(&self) -> u64 {
        (self.mrtr_ttl.as_millis() as u64)
            .clamp(limits::MIN_CALL_TIMEOUT_MS, limits::MAX_CALL_TIMEOUT_MS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_env_overrides_apply_only_when_set_and_stay_in_range() {
        let o = BridgeOptions::default().with_test_env(|_| None);
        assert_eq!(o, BridgeOptions::default());
        let o = BridgeOptions::default().with_test_env(|k| match k {
            CONSENT_TIMEOUT_ENV => Some("250".into()),
            MRTR_TTL_ENV => Some("5".into()),
            _ => None,
        });
        assert_eq!(o.consent_timeout, Duration::from_millis(250));
        assert_eq!(
            o.mrtr_ttl_ms(),
            1_000,
            "clamped into consent.create's ttlMs range"
        );
        let o = BridgeOptions::default().with_test_env(|_| Some("nope".into()));
        assert_eq!(o, BridgeOptions::default());
    }
}
