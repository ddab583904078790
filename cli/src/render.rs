//! Human rendering helpers (§L3.3): instants, relative ages, byte sizes, the borderless table
//! of `sessions ls`, label/value blocks, ANSI styling and the cleaning of app-supplied text
//! (SECURITY.md §4.13). Pure functions; nothing here prints.

use time::OffsetDateTime;

// The ISO instant formats have one home, shared with the daemon.
pub use appduct_client::timestamp::{
    iso_millis, iso_seconds, iso_seconds_from_unix_ms, iso_seconds_from_unix_s,
};

/// Parses an RFC 3339 instant (as the daemon reports `startedAt`).
pub fn parse_instant(text: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()
}

/// Relative age in the largest whole unit: under 60 s `Ns`, under 60 min `Nm`, under 24 h `Nh`,
/// else `Nd`.
pub fn age(seconds: u64) -> String {
    const MINUTE: u64 = 60;
    const HOUR: u64 = 60 * MINUTE;
    const DAY: u64 = 24 * HOUR;
    if seconds < MINUTE {
        format!("{seconds}s")
    } else if seconds < HOUR {
        format!("{}m", seconds / MINUTE)
    } else if seconds < DAY {
        format!("{}h", seconds / HOUR)
    } else {
        format!("{}d", seconds / DAY)
    }
}

/// Whole seconds from `from` to `to`, `0` when `to` is not later.
pub fn seconds_between(from: OffsetDateTime, to: OffsetDateTime) -> u64 {
    u64::try_from((to - from).whole_seconds()).unwrap_or(0)
}

/// `2h ago`: the age of a past instant.
pub fn ago(then: OffsetDateTime, now: OffsetDateTime) -> String {
    format!("{} ago", age(seconds_between(then, now)))
}

/// `in 5m`: the time left until a future instant.
pub fn until(later: OffsetDateTime, now: OffsetDateTime) -> String {
    format!("in {}", age(seconds_between(now, later)))
}

/// Byte size: under 1024 `N B`; else `KiB`, `MiB` or `GiB` with one decimal (`17.8 KiB`).
pub fn byte_size(bytes: u64) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    // Move up while the value would print as 1024.0 or more in this unit.
    while unit + 1 < UNITS.len() && (value * 10.0).round() >= 10240.0 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A borderless table (§L6.1): each column as wide as its longest cell, columns separated by
/// two spaces, trailing spaces trimmed. The first row is the header. Widths count characters.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; columns];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            let pad = widths[i].saturating_sub(cell.chars().count());
            line.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// One row of a [`Section`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Row {
    /// `Label:  value`; continuation lines of a multi-line value align with the first.
    Field(String, String),
    /// `Label:` then a multi-line block (pretty JSON) indented 2 spaces past the label.
    Block(String, String),
}

impl Row {
    pub fn field(label: impl Into<String>, value: impl Into<String>) -> Self {
        Row::Field(label.into(), value.into())
    }

    pub fn block(label: impl Into<String>, text: impl Into<String>) -> Self {
        Row::Block(label.into(), text.into())
    }

    fn label(&self) -> &str {
        match self {
            Row::Field(label, _) | Row::Block(label, _) => label,
        }
    }
}

/// A titled block of label/value rows, as in `Key ready` or the daemon status blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub title: String,
    pub rows: Vec<Row>,
}

impl Section {
    pub fn new(title: impl Into<String>, rows: Vec<Row>) -> Self {
        Self {
            title: title.into(),
            rows,
        }
    }
}

/// Renders sections with one shared value column: the longest label of any field plus `:` and
/// two spaces, so consecutive blocks line up (§L9.4). Rows sit at 2 spaces.
pub fn sections(sections: &[Section]) -> String {
    let width = sections
        .iter()
        .flat_map(|s| s.rows.iter())
        .filter(|r| matches!(r, Row::Field(..)))
        .map(|r| r.label().chars().count() + 1)
        .max()
        .unwrap_or(0)
        + 2;
    let mut out = String::new();
    for section in sections {
        out.push_str(&section.title);
        out.push('\n');
        for row in &section.rows {
            match row {
                Row::Field(label, value) => {
                    let head = format!("{label}:");
                    let mut lines = value.split('\n');
                    let first = lines.next().unwrap_or_default();
                    let line = format!("  {head:<width$}{first}");
                    out.push_str(line.trim_end());
                    out.push('\n');
                    for more in lines {
                        let line = format!("  {:width$}{more}", "");
                        out.push_str(line.trim_end());
                        out.push('\n');
                    }
                }
                Row::Block(label, text) => {
                    out.push_str(&format!("  {label}:\n"));
                    out.push_str(&indent(text, 4));
                }
            }
        }
    }
    out
}

/// Prefixes every line of `text` with `spaces` spaces; ends with a newline.
pub fn indent(text: &str, spaces: usize) -> String {
    let pad = " ".repeat(spaces);
    let mut out = String::new();
    for line in text.lines() {
        if line.is_empty() {
            out.push('\n');
        } else {
            out.push_str(&pad);
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

// App-supplied text (SECURITY.md §4.13): names, descriptions, error messages and details, results and
// event payloads may hold C0, DEL or C1 characters (ESC, BEL, U+009B CSI) that would drive the
// terminal. Every such string passes through one of these before it reaches human output;
// `--json` output is left exact.

/// App-supplied text for a multi-line human field: `\r\n` and `\r` become `\n`; every other
/// control character (U+0000–U+001F, U+007F–U+009F, tab included) is removed.
pub fn clean_text(text: &str) -> String {
    text.replace("\r\n", "\n")
        .replace('\r', "\n")
        .chars()
        .filter(|c| *c == '\n' || !c.is_control())
        .collect()
}

/// App-supplied text for a single-line place (table cell, heading, event line, progress
/// message): every control character, line breaks included, removed.
pub fn clean_line(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).collect()
}

/// JSON text (or a cut-off piece of it) for a single human line: every control character is
/// written as its `\uXXXX` escape, so the data stays visible and what is valid JSON stays valid
/// JSON with the same meaning. serde_json escapes C0 itself but leaves DEL and C1 raw.
pub fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// An app-supplied JSON value for human output: compact or pretty (2-space indent), with
/// [`escape_controls`] applied. Pretty output keeps its line breaks, which are structural:
/// serde_json escapes every line break inside a string.
pub fn human_json(value: &serde_json::Value, pretty: bool) -> String {
    let text = if pretty {
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    } else {
        value.to_string()
    };
    text.split('\n')
        .map(escape_controls)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether colour may be used on a stream (§L3.3): it is a terminal, `NO_COLOR` is unset or
/// empty, and `--no-color` is absent.
pub fn colour_allowed(
    is_terminal: bool,
    no_color_env: Option<&std::ffi::OsStr>,
    flag: bool,
) -> bool {
    is_terminal && no_color_env.is_none_or(|v| v.is_empty()) && !flag
}

/// ANSI styling that degrades to plain text when colour is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paint {
    pub enabled: bool,
}

impl Paint {
    pub const PLAIN: Paint = Paint { enabled: false };

    fn wrap(self, code: &str, text: &str) -> String {
        if self.enabled {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    pub fn bold(self, text: &str) -> String {
        self.wrap("1", text)
    }
    pub fn dim(self, text: &str) -> String {
        self.wrap("2", text)
    }
    pub fn red(self, text: &str) -> String {
        self.wrap("31", text)
    }
    pub fn green(self, text: &str) -> String {
        self.wrap("32", text)
    }
    pub fn yellow(self, text: &str) -> String {
        self.wrap("33", text)
    }
    pub fn bold_red(self, text: &str) -> String {
        self.wrap("1;31", text)
    }
}

/// A serialisable value as JSON `data` (`null` if it cannot be represented).
pub fn to_value<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// App-supplied JSON (results, schemas) as pretty human text, control characters escaped.
pub fn pretty_json(v: &serde_json::Value) -> String {
    human_json(v, true)
}

/// `1 tool`, `2 tools`.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use time::macros::datetime;

    #[test]
    fn rfc3339_instants_parse() {
        let at = parse_instant("2026-11-30T09:12:03.120Z");
        assert_eq!(at.map(iso_seconds).as_deref(), Some("2026-11-30T09:12:03Z"));
        assert!(parse_instant("yesterday").is_none());
    }

    #[test]
    fn ages_use_the_largest_whole_unit() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (60, "1m"),
            (3599, "59m"),
            (3600, "1h"),
            (86_399, "23h"),
            (86_400, "1d"),
            (10 * 86_400 + 5, "10d"),
        ];
        for (secs, text) in cases {
            assert_eq!(age(secs), text, "{secs}");
        }
    }

    #[test]
    fn ago_and_until_are_relative_to_now() {
        let now = datetime!(2026-11-30 11:12:03 UTC);
        assert_eq!(ago(datetime!(2026-11-30 09:12:03 UTC), now), "2h ago");
        assert_eq!(until(datetime!(2026-11-30 11:17:03 UTC), now), "in 5m");
        // Clock skew never produces a negative age.
        assert_eq!(ago(datetime!(2026-11-30 11:12:09 UTC), now), "0s ago");
    }

    #[test]
    fn byte_sizes() {
        let cases = [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.0 KiB"),
            (18_234, "17.8 KiB"),
            (1_048_575, "1.0 MiB"),
            (1_048_576, "1.0 MiB"),
            (10_485_760, "10.0 MiB"),
            (3 * 1_073_741_824, "3.0 GiB"),
            (5000 * 1_073_741_824, "5000.0 GiB"),
        ];
        for (bytes, text) in cases {
            assert_eq!(byte_size(bytes), text, "{bytes}");
        }
    }

    #[test]
    fn table_matches_the_sessions_example() {
        let rows = vec![
            vec!["ALIAS", "STATE", "DEVICE", "TOOLS", "AGE"],
            vec![
                "pixel-8",
                "active",
                "Google Pixel 8 (Android 15)",
                "5",
                "12m",
            ],
            vec![
                "iphone-15",
                "suspended (app_backgrounded)",
                "Apple iPhone 15 (iOS 18.1)",
                "3",
                "2h",
            ],
        ];
        let rows: Vec<Vec<String>> = rows
            .into_iter()
            .map(|r| r.into_iter().map(String::from).collect())
            .collect();
        let expected = "\
ALIAS      STATE                         DEVICE                       TOOLS  AGE
pixel-8    active                        Google Pixel 8 (Android 15)  5      12m
iphone-15  suspended (app_backgrounded)  Apple iPhone 15 (iOS 18.1)   3      2h
";
        assert_eq!(table(&rows), expected);
    }

    #[test]
    fn table_trims_trailing_spaces_of_short_last_cells() {
        let rows = vec![
            vec!["A".to_owned(), "LONGER".to_owned()],
            vec!["abc".to_owned(), "x".to_owned()],
        ];
        assert_eq!(table(&rows), "A    LONGER\nabc  x\n");
        assert_eq!(table(&[]), "");
    }

    #[test]
    fn sections_share_one_value_column() {
        let out = sections(&[
            Section::new(
                "Daemon",
                vec![
                    Row::field("Version", "0.3.1"),
                    Row::field("Pending links", "0"),
                ],
            ),
            Section::new("Policy", vec![Row::field("Default", "allow")]),
        ]);
        let expected = "\
Daemon
  Version:        0.3.1
  Pending links:  0
Policy
  Default:        allow
";
        assert_eq!(out, expected);
    }

    #[test]
    fn key_ready_block_matches_the_spec() {
        let out = sections(&[Section::new(
            "Key ready",
            vec![
                Row::field("Path", "/home/ana/.appduct/key.pem"),
                Row::field("Algorithm", "EC P-256"),
                Row::field("Pin", "sha256/x="),
            ],
        )]);
        assert_eq!(
            out,
            "Key ready\n  Path:       /home/ana/.appduct/key.pem\n  Algorithm:  EC P-256\n  Pin:        sha256/x=\n"
        );
    }

    #[test]
    fn multi_line_values_and_blocks_are_aligned() {
        let out = sections(&[Section::new(
            "Tool: add_item",
            vec![
                Row::field("Description", "Add an item.\nQuantities above 99 fail."),
                Row::block("Input schema", "{\n  \"type\": \"object\"\n}"),
                Row::field("Timeout (ms)", "5000"),
            ],
        )]);
        let expected = "\
Tool: add_item
  Description:   Add an item.
                 Quantities above 99 fail.
  Input schema:
    {
      \"type\": \"object\"
    }
  Timeout (ms):  5000
";
        assert_eq!(out, expected);
    }

    #[test]
    fn colour_needs_a_terminal_and_no_opt_out() {
        assert!(colour_allowed(true, None, false));
        assert!(colour_allowed(true, Some(OsStr::new("")), false));
        assert!(!colour_allowed(false, None, false));
        assert!(!colour_allowed(true, Some(OsStr::new("1")), false));
        assert!(!colour_allowed(true, None, true));
    }

    #[test]
    fn paint_is_plain_when_disabled() {
        assert_eq!(Paint::PLAIN.red("x"), "x");
        assert_eq!(Paint { enabled: true }.red("x"), "\x1b[31mx\x1b[0m");
    }

    /// OSC title, ESC CSI, C1 CSI and DEL: what an app might send at the terminal.
    const HOSTILE: &str = "x\u{1b}]0;t\u{7} \u{1b}[2J \u{9b}2J \u{7f}";

    #[test]
    fn clean_text_keeps_line_breaks_and_removes_other_controls() {
        assert_eq!(clean_text(HOSTILE), "x]0;t [2J 2J ");
        assert_eq!(clean_text("a\r\nb\rc\td\n"), "a\nb\ncd\n");
        assert_eq!(clean_text("plain ü …"), "plain ü …");
    }

    #[test]
    fn clean_line_removes_line_breaks_too() {
        assert_eq!(clean_line("a\nb\u{85}c"), "abc");
        assert_eq!(clean_line(HOSTILE), "x]0;t [2J 2J ");
        assert_eq!(clean_line("pixel-8"), "pixel-8");
    }

    #[test]
    fn human_json_escapes_what_serde_leaves_raw_and_stays_the_same_json() {
        let v = serde_json::json!({"text": HOSTILE, "n": [1, 2]});
        for pretty in [false, true] {
            let text = human_json(&v, pretty);
            assert!(
                !text.chars().any(|c| c.is_control() && c != '\n'),
                "{text:?}"
            );
            assert!(
                text.contains("\\u009b") && text.contains("\\u007f"),
                "{text}"
            );
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(&text).ok(),
                Some(v.clone())
            );
        }
        assert!(!human_json(&v, false).contains('\n'));
        assert_eq!(
            human_json(&serde_json::json!({"a": 1}), true),
            "{\n  \"a\": 1\n}"
        );
        assert_eq!(
            escape_controls("{\"a\":\"\u{9b}\n"),
            "{\"a\":\"\\u009b\\u000a"
        );
    }
}
