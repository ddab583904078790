//! Event name globs (§C13.5): whole-name, case-sensitive, `*` is the only wildcard and every
//! other character (`?`, `[`, `\` included) is literal. Matching uses no regular expression and
//! runs in time linear in `len(glob) + len(name)`, so a hostile glob cannot stall the daemon.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::limits::MAX_GLOB_LEN;

/// Why a string is not a valid glob.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum GlobError {
    #[error("glob must not be empty")]
    Empty,
    /// Length is counted in characters (Unicode scalar values), the control plane's rule for
    /// strings (§C5), so `Glob::new` and params validation agree.
    #[error("glob is {len} characters long; at most {max} are allowed", max = MAX_GLOB_LEN)]
    TooLong { len: usize },
}

/// A validated name glob. Serialises as its source string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Glob {
    source: String,
    /// The glob split on `*`; one piece when the glob has no `*`.
    pieces: Vec<String>,
}

impl Glob {
    /// Validates `source` (1–4096 characters) and prepares it for matching.
    pub fn new(source: &str) -> Result<Self, GlobError> {
        if source.is_empty() {
            return Err(GlobError::Empty);
        }
        let len = source.chars().count();
        if len > MAX_GLOB_LEN {
            return Err(GlobError::TooLong { len });
        }
        Ok(Self {
            source: source.to_owned(),
            pieces: source.split('*').map(str::to_owned).collect(),
        })
    }

    /// The glob as given.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// True when the glob contains a `*`; a glob without one matches exactly one name
    /// (the CLI and the MCP bridge then show that event's payload schema).
    pub fn has_wildcard(&self) -> bool {
        self.pieces.len() > 1
    }

    /// True when `name` as a whole matches the glob.
    pub fn matches(&self, name: &str) -> bool {
        let (first, rest) = match self.pieces.split_first() {
            Some(split) => split,
            None => return false,
        };
        let (last, middle) = match rest.split_last() {
            Some(split) => split,
            // No `*`: the glob is a literal name.
            None => return name == first,
        };
        // Prefix and suffix must fit without overlapping.
        if name.len() < first.len() + last.len()
            || !name.starts_with(first.as_str())
            || !name.ends_with(last.as_str())
        {
            return false;
        }
        // Both ends matched whole pieces, so these byte offsets are char boundaries.
        let mut window = &name[first.len()..name.len() - last.len()];
        for piece in middle {
            // Taking the leftmost occurrence is always safe: any later occurrence leaves less
            // room for the pieces after it. `str::find` with a `&str` needle is std's Two-Way
            // search, linear in haystack + needle; each search resumes after the previous match,
            // so the whole loop stays linear in the name plus the glob.
            match window.find(piece.as_str()) {
                Some(at) => window = &window[at + piece.len()..],
                None => return false,
            }
        }
        true
    }
}

impl TryFrom<String> for Glob {
    type Error = GlobError;

    fn try_from(source: String) -> Result<Self, Self::Error> {
        Self::new(&source)
    }
}

impl From<Glob> for String {
    fn from(glob: Glob) -> Self {
        glob.source
    }
}

impl std::fmt::Display for Glob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(s: &str) -> Glob {
        Glob::new(s).unwrap_or_else(|e| panic!("{s:?} should be a valid glob: {e}"))
    }

    #[test]
    fn star_matches_everything_including_the_empty_name() {
        let g = glob("*");
        assert!(g.matches("payment_failed"));
        assert!(g.matches("with spaces.and.dots"));
        assert!(g.matches(""));
        assert!(g.has_wildcard());
    }

    #[test]
    fn suffix_glob_is_case_sensitive() {
        let g = glob("*_failed");
        assert!(g.matches("payment_failed"));
        assert!(g.matches("_failed"));
        assert!(!g.matches("Payment_Failed"));
        assert!(!g.matches("payment_failed_twice"));
    }

    #[test]
    fn middle_pieces_must_occur_in_order() {
        let g = glob("a*b*c");
        assert!(g.matches("abc"));
        assert!(g.matches("aXbYc"));
        assert!(!g.matches("acb"));
        assert!(!g.matches("ab"));
    }

    #[test]
    fn question_mark_brackets_and_backslash_are_literal() {
        let g = glob("item?");
        assert!(g.matches("item?"));
        assert!(!g.matches("items"));
        assert!(!g.matches("item"));
        assert!(!g.has_wildcard());
        assert!(glob("[ab]").matches("[ab]"));
        assert!(!glob("[ab]").matches("a"));
        assert!(glob(r"a\*").matches(r"a\anything"));
        assert!(!glob(r"a\*").matches("a*"));
    }

    #[test]
    fn prefix_and_suffix_must_not_overlap() {
        let g = glob("aba*aba");
        assert!(!g.matches("aba"));
        assert!(!g.matches("ababa"));
        assert!(g.matches("abaaba"));
        assert!(g.matches("aba--aba"));
    }

    #[test]
    fn consecutive_stars_behave_like_one() {
        let g = glob("a**b");
        assert!(g.matches("ab"));
        assert!(g.matches("axxb"));
        assert!(!g.matches("ba"));
    }

    #[test]
    fn multibyte_names_match_on_character_boundaries() {
        assert!(glob("é*ü").matches("éxü"));
        assert!(glob("*😀*").matches("a😀b"));
        assert!(!glob("é*é").matches("é"));
    }

    #[test]
    fn length_is_bounded_in_characters() {
        assert_eq!(Glob::new(""), Err(GlobError::Empty));
        assert!(Glob::new(&"a".repeat(MAX_GLOB_LEN)).is_ok());
        assert_eq!(
            Glob::new(&"a".repeat(MAX_GLOB_LEN + 1)),
            Err(GlobError::TooLong {
                len: MAX_GLOB_LEN + 1
            })
        );
        // 2,049 characters (4,097 UTF-16 units): within the 4,096-character bound of §C13.5,
        // as params validation counts it.
        let astral = format!("{}*", "😀".repeat(2_048));
        let g = Glob::new(&astral).unwrap_or_else(|e| panic!("{e}"));
        assert!(g.matches(&"😀".repeat(2_048)));
        assert!(Glob::new(&"😀".repeat(MAX_GLOB_LEN)).is_ok());
        assert_eq!(
            Glob::new(&"😀".repeat(MAX_GLOB_LEN + 1)),
            Err(GlobError::TooLong {
                len: MAX_GLOB_LEN + 1
            })
        );
    }

    #[test]
    fn serde_round_trips_and_rejects_invalid_globs() {
        let g: Glob = serde_json::from_str(r#""*_failed""#).unwrap_or_else(|e| panic!("{e}"));
        assert!(g.matches("x_failed"));
        assert_eq!(
            serde_json::to_string(&g).unwrap_or_default(),
            r#""*_failed""#
        );
        assert!(serde_json::from_str::<Glob>(r#""""#).is_err());
        assert_eq!(g.to_string(), "*_failed");
        assert_eq!(String::from(g), "*_failed");
    }
}
