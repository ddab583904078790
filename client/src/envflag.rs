//! The one boolean environment-variable parser (§S1.3, §L2.2).
//!
//! Every boolean variable (`APPDUCT_DAEMON_RESTART`, …) goes through [`parse_bool`], so the CLI,
//! the MCP bridge and the daemon agree on what "true" means: after trimming, `1` or `true` in any
//! ASCII case is true; `0`, `false` (any case) or unset is false; anything else is false and
//! worth a warning.

use std::ffi::OsStr;

/// What a raw boolean variable value means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvBool {
    /// `1` or `true` (trimmed, any ASCII case).
    True,
    /// `0`, `false` (trimmed, any ASCII case), or the variable is unset.
    False,
    /// Any other value, including non-UTF-8 bytes and the empty string; counts as false.
    /// Carries the value as received (lossily decoded) for the warning.
    Invalid(String),
}

impl EnvBool {
    /// The boolean this value stands for: only [`EnvBool::True`] is true.
    pub fn value(&self) -> bool {
        matches!(self, EnvBool::True)
    }
}

/// Classifies a raw value without logging. `None` means the variable is unset.
pub fn classify(raw: Option<&OsStr>) -> EnvBool {
    let Some(raw) = raw else {
        return EnvBool::False;
    };
    let Some(text) = raw.to_str() else {
        return EnvBool::Invalid(raw.to_string_lossy().into_owned());
    };
    let trimmed = text.trim();
    if trimmed == "1" || trimmed.eq_ignore_ascii_case("true") {
        EnvBool::True
    } else if trimmed == "0" || trimmed.eq_ignore_ascii_case("false") {
        EnvBool::False
    } else {
        EnvBool::Invalid(text.to_owned())
    }
}

/// Parses the value `raw` of the variable `name`; an unrecognised value logs one warning naming
/// the variable and counts as false.
pub fn parse_bool(name: &str, raw: Option<&OsStr>) -> bool {
    match classify(raw) {
        EnvBool::True => true,
        EnvBool::False => false,
        EnvBool::Invalid(value) => {
            tracing::warn!(
                "{name}={value:?} is not a boolean (use 1, true, 0 or false); treating it as false"
            );
            false
        }
    }
}

/// Reads the boolean environment variable `name` of this process (see [`parse_bool`]).
pub fn env_bool(name: &str) -> bool {
    let raw = std::env::var_os(name);
    parse_bool(name, raw.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    #[test]
    fn true_spellings_are_true() {
        for raw in ["1", "true", "TRUE", "True", "  tRuE\n", " 1 "] {
            assert_eq!(classify(os(raw)), EnvBool::True, "{raw:?}");
            assert!(parse_bool("APPDUCT_X", os(raw)), "{raw:?}");
        }
    }

    #[test]
    fn false_spellings_and_unset_are_false() {
        assert_eq!(classify(None), EnvBool::False);
        for raw in ["0", "false", "FALSE", " False\t"] {
            assert_eq!(classify(os(raw)), EnvBool::False, "{raw:?}");
            assert!(!parse_bool("APPDUCT_X", os(raw)), "{raw:?}");
        }
    }

    #[test]
    fn other_values_are_invalid_and_false() {
        for raw in ["", "yes", "on", "2", "true1", "t", "01"] {
            assert_eq!(
                classify(os(raw)),
                EnvBool::Invalid(raw.to_owned()),
                "{raw:?}"
            );
            assert!(!parse_bool("APPDUCT_X", os(raw)), "{raw:?}");
        }
    }

    #[test]
    fn non_utf8_value_is_invalid() {
        use std::os::unix::ffi::OsStrExt;
        let raw = OsStr::from_bytes(b"tru\xffe");
        assert!(matches!(classify(Some(raw)), EnvBool::Invalid(_)));
        assert!(!parse_bool("APPDUCT_X", Some(raw)));
    }

    #[test]
    fn unset_process_variable_is_false() {
        // A name no test or environment sets.
        assert!(!env_bool("APPDUCT_TEST_ENVFLAG_NEVER_SET_7f3a"));
    }
}
