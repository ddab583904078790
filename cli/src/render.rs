//! Human rendering helpers (§L3.3): instants, relative ages, byte sizes, the borderless table
//! of `sessions ls`, label/value blocks, ANSI styling and the cleaning of app-supplied text
//! (SECURITY.md §4.13). Pure functions; nothing here prints.

use time::OffsetDateTime;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

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

/// Columns `text` takes on a terminal (§L3.3): wide characters (CJK, most emoji) count 2,
/// combining marks and zero-width characters 0. Control characters count 0; app-supplied text
/// is cleaned of them before it is measured.
pub fn display_width(text: &str) -> usize {
    UnicodeWidthStr::width(text)
}

/// `text` cut to at most `width` columns: unchanged when it fits, else the longest prefix
/// that leaves room for `…` (trailing spaces dropped), then `…`. A wide character that would straddle the limit is
/// left out whole, so the result may be one column short. Width 0 gives the empty string.
pub fn cut_to_width(text: &str, width: usize) -> String {
    if display_width(text) <= width {
        return text.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let room = width - 1;
    let mut used = 0;
    let mut out = String::new();
    for c in text.chars() {
        let w = UnicodeWidthChar::width(c).unwrap_or(0);
        if used + w > room {
            break;
        }
        used += w;
        out.push(c);
    }
    // `Google Pixel…`, not `Google Pixel …`.
    out.truncate(out.trim_end().len());
    out.push('…');
    out
}

/// A borderless table (§L6.1): each column as wide as its widest cell, columns separated by
/// two spaces, trailing spaces trimmed. The first row is the header. Widths are display
/// widths ([`display_width`]), so CJK and emoji cells stay aligned.
pub fn table(rows: &[Vec<String>]) -> String {
    table_within(rows, None)
}

/// [`table`] cut to `max_width` columns when given (the terminal's width): while the table
/// is too wide, the widest column loses one column, and cells of a narrowed column are cut
/// with `…` ([`cut_to_width`]). No column goes below 4 columns (or its header's width, if
/// smaller), so a very narrow terminal still wraps rather than losing whole columns.
pub fn table_within(rows: &[Vec<String>], max_width: Option<usize>) -> String {
    const MIN_COLUMN: usize = 4;
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; columns];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(display_width(cell));
        }
    }
    if let Some(max) = max_width {
        let floor: Vec<usize> = widths.iter().map(|w| (*w).min(MIN_COLUMN)).collect();
        let total = |widths: &[usize]| widths.iter().sum::<usize>() + 2 * columns.saturating_sub(1);
        while total(&widths) > max {
            let Some((i, _)) = widths
                .iter()
                .enumerate()
                .filter(|(i, w)| **w > floor[*i])
                .max_by_key(|(i, w)| (**w, std::cmp::Reverse(*i)))
            else {
                break;
            };
            widths[i] -= 1;
        }
    }
    let mut out = String::new();
    for row in rows {
        out.push_str(&table_row(row, &widths));
    }
    out
}

/// One line of [`table`] with the given column widths (a table printed row by row, its widths
/// measured beforehand).
pub fn table_row(row: &[String], widths: &[usize]) -> String {
    let mut line = String::new();
    for (i, cell) in row.iter().enumerate() {
        if i > 0 {
            line.push_str("  ");
        }
        let width = widths.get(i).copied().unwrap_or(0);
        let cell = cut_to_width(cell, width);
        let pad = width.saturating_sub(display_width(&cell));
        line.push_str(&cell);
        line.extend(std::iter::repeat_n(' ', pad));
    }
    let mut line = line.trim_end().to_owned();
    line.push('\n');
    line
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

/// `--color` (§L3.3): `auto` decides from the environment and the stream, `always` and
/// `never` override everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorMode {
    #[default]
    Auto,
    Always,
    Never,
}

/// The colour variables of the environment (§L2.2), read once per run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColourEnv {
    pub no_color: Option<std::ffi::OsString>,
    pub clicolor_force: Option<std::ffi::OsString>,
    pub clicolor: Option<std::ffi::OsString>,
}

impl ColourEnv {
    pub fn from_process() -> Self {
        Self {
            no_color: std::env::var_os("NO_COLOR"),
            clicolor_force: std::env::var_os("CLICOLOR_FORCE"),
            clicolor: std::env::var_os("CLICOLOR"),
        }
    }
}

/// Whether colour is used on a stream (§L3.3). First match wins: `--color always|never`
/// (`--no-color` is `never`); a non-empty `NO_COLOR` turns it off; `CLICOLOR_FORCE` set to
/// anything but empty or `0` turns it on; `CLICOLOR=0` turns it off; else only on a terminal.
/// Callers turn it off first under `--json` and in `appduct mcp`.
pub fn colour_enabled(mode: ColorMode, env: &ColourEnv, is_terminal: bool) -> bool {
    let set = |v: &Option<std::ffi::OsString>| v.as_ref().is_some_and(|v| !v.is_empty());
    match mode {
        ColorMode::Always => true,
        ColorMode::Never => false,
        ColorMode::Auto if set(&env.no_color) => false,
        ColorMode::Auto
            if set(&env.clicolor_force) && env.clicolor_force.as_deref() != Some("0".as_ref()) =>
        {
            true
        }
        ColorMode::Auto if env.clicolor.as_deref() == Some("0".as_ref()) => false,
        ColorMode::Auto => is_terminal,
    }
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

    fn env(no_color: Option<&str>, force: Option<&str>, clicolor: Option<&str>) -> ColourEnv {
        ColourEnv {
            no_color: no_color.map(Into::into),
            clicolor_force: force.map(Into::into),
            clicolor: clicolor.map(Into::into),
        }
    }

    #[test]
    fn colour_precedence_flag_then_no_color_then_force_then_clicolor_then_terminal() {
        use ColorMode::{Always, Auto, Never};
        let none = env(None, None, None);
        // Auto with nothing set: the terminal decides.
        assert!(colour_enabled(Auto, &none, true));
        assert!(!colour_enabled(Auto, &none, false));
        // The flag beats every variable, both ways.
        let all_off = env(Some("1"), None, Some("0"));
        assert!(colour_enabled(Always, &all_off, false));
        assert!(!colour_enabled(Never, &env(None, Some("1"), None), true));
        // NO_COLOR beats CLICOLOR_FORCE; an empty NO_COLOR is unset.
        assert!(!colour_enabled(
            Auto,
            &env(Some("1"), Some("1"), None),
            true
        ));
        assert!(colour_enabled(Auto, &env(Some(""), Some("1"), None), false));
        // CLICOLOR_FORCE beats CLICOLOR=0 and a pipe; empty or 0 does not force.
        assert!(colour_enabled(
            Auto,
            &env(None, Some("1"), Some("0")),
            false
        ));
        assert!(!colour_enabled(Auto, &env(None, Some("0"), None), false));
        assert!(!colour_enabled(Auto, &env(None, Some(""), None), false));
        // CLICOLOR=0 beats the terminal; another value leaves it to the terminal.
        assert!(!colour_enabled(Auto, &env(None, None, Some("0")), true));
        assert!(colour_enabled(Auto, &env(None, None, Some("1")), true));
        assert!(!colour_enabled(Auto, &env(None, None, Some("1")), false));
    }

    #[test]
    fn display_width_counts_columns_not_bytes_or_chars() {
        assert_eq!(display_width("pixel-8"), 7);
        // CJK: 2 columns each.
        assert_eq!(display_width("日本語"), 6);
        // Emoji: 2 columns.
        assert_eq!(display_width("📱"), 2);
        // e + combining acute accent: 1 column, 2 chars.
        assert_eq!(display_width("e\u{301}"), 1);
    }

    #[test]
    fn cut_to_width_cuts_by_columns_with_an_ellipsis() {
        assert_eq!(cut_to_width("pixel-8", 7), "pixel-8");
        assert_eq!(cut_to_width("pixel-8", 6), "pixel…");
        assert_eq!(cut_to_width("pixel-8", 1), "…");
        assert_eq!(cut_to_width("pixel-8", 0), "");
        // A wide character never straddles the limit: "日本" is 4 columns, "…" 1.
        assert_eq!(cut_to_width("日本語テキスト", 6), "日本…");
        assert_eq!(display_width(&cut_to_width("日本語テキスト", 6)), 5);
        assert_eq!(cut_to_width("日本語テキスト", 7), "日本語…");
        // Combining marks stay with their base character and take no room.
        assert_eq!(
            cut_to_width("e\u{301}e\u{301}e\u{301}xyz", 4),
            "e\u{301}e\u{301}e\u{301}…"
        );
        for w in 0..20 {
            assert!(display_width(&cut_to_width("📱 Pixel 8 日本 e\u{301}", w)) <= w);
        }
    }

    #[test]
    fn table_aligns_wide_and_combining_cells_by_display_width() {
        let rows: Vec<Vec<String>> = [
            ["ALIAS", "DEVICE"],
            ["手机", "x"],
            ["e\u{301}", "y"],
            ["📱-1", "z"],
        ]
        .iter()
        .map(|r| r.iter().map(|c| (*c).to_owned()).collect())
        .collect();
        let text = table(&rows);
        // The widest first cell is 5 columns, so every second cell starts at column 7.
        for (line, second) in text.lines().zip(["DEVICE", "x", "y", "z"]) {
            let first = line.strip_suffix(second).unwrap();
            assert_eq!(display_width(first), 7, "{line}");
        }
    }

    #[test]
    fn table_within_cuts_the_widest_column_with_an_ellipsis() {
        let rows: Vec<Vec<String>> = [
            vec!["ALIAS", "DEVICE", "TOOLS"],
            vec!["pixel-8", "Google Pixel 8 (Android 15)", "5"],
            vec!["中文-1", "华为 Mate 60 Pro（HarmonyOS）", "3"],
        ]
        .iter()
        .map(|r| r.iter().map(|c| (*c).to_owned()).collect())
        .collect();
        let text = table_within(&rows, Some(30));
        for line in text.lines() {
            assert!(display_width(line) <= 30, "{line}");
        }
        assert!(text.contains("Google Pixel…"), "{text}");
        assert!(text.lines().nth(2).unwrap().contains('…'), "{text}");
        // Wide enough: the same as the uncut table.
        assert_eq!(table_within(&rows, Some(200)), table(&rows));
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
