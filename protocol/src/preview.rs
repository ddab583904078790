//! The argument preview an operator sees before approving a parked call (§C8.17, §C11.1):
//! compact JSON-like text of at most [`PREVIEW_MAX_CHARS`] characters in which every key is
//! kept while room lasts, long strings and deep or long containers are cut with `…`, and every
//! character that could move the cursor, recolour, reorder or hide text (C0/C1 controls, ANSI
//! escapes through their ESC, bidi overrides and isolates, zero-width and other format
//! characters, tags, variation selectors and other default-ignorable code points, line/paragraph
//! separators) is written as its `\uXXXX` escape (a UTF-16 surrogate pair beyond U+FFFF).

use serde_json::{Map, Value};

/// Longest preview, in characters (the last one may be `…`).
pub const PREVIEW_MAX_CHARS: usize = 200;
/// Longest string (value or key) shown whole; longer ones keep this many characters and `…`.
pub const PREVIEW_STRING_CHARS: usize = 40;
/// Array items shown before `…+N`.
pub const PREVIEW_ARRAY_ITEMS: usize = 3;
/// Nesting shown; deeper containers are `{…}` / `[…]`.
pub const PREVIEW_DEPTH: usize = 3;

/// Whether `c` is written escaped in a preview: controls (C0, DEL, C1: this covers ESC, so
/// no ANSI sequence survives), every format character (general category Cf: bidi marks,
/// embeddings, overrides and isolates, zero-width characters, tags, the BOM, …), every
/// default-ignorable code point (variation selectors, the combining grapheme joiner, Hangul
/// and Khmer fillers and vowels shown as nothing, …), and line and paragraph separators
/// (Unicode 15).
pub fn is_hidden_char(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}'
            | '\u{034F}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}')
}

/// `s` for one line of text: [`is_hidden_char`] characters as `\uXXXX` (a surrogate pair
/// beyond U+FFFF), everything else as is.
pub fn escape_hidden(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        push_char(&mut out, c, false);
    }
    out
}

fn push_char(out: &mut String, c: char, quoted: bool) {
    match c {
        '"' if quoted => out.push_str("\\\""),
        '\\' if quoted => out.push_str("\\\\"),
        // Beyond U+FFFF (tags, variation selectors supplement): the UTF-16 surrogate pair, as
        // JSON writes it, so every escape is six characters.
        c if is_hidden_char(c) => {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
        c => out.push(c),
    }
}

fn push_string(out: &mut String, s: &str) {
    out.push('"');
    let mut chars = s.chars();
    for c in chars.by_ref().take(PREVIEW_STRING_CHARS) {
        push_char(out, c, true);
    }
    if chars.next().is_some() {
        out.push('…');
    }
    out.push('"');
}

fn push_value(out: &mut String, v: &Value, depth: usize) {
    match v {
        Value::Object(m) if depth >= PREVIEW_DEPTH && !m.is_empty() => out.push_str("{…}"),
        Value::Array(a) if depth >= PREVIEW_DEPTH && !a.is_empty() => out.push_str("[…]"),
        Value::Object(m) => push_object(out, m, depth),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().take(PREVIEW_ARRAY_ITEMS).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_value(out, item, depth + 1);
            }
            if a.len() > PREVIEW_ARRAY_ITEMS {
                out.push_str(&format!(", …+{}", a.len() - PREVIEW_ARRAY_ITEMS));
            }
            out.push(']');
        }
        Value::String(s) => push_string(out, s),
        other => out.push_str(&other.to_string()),
    }
}

fn push_object(out: &mut String, m: &Map<String, Value>, depth: usize) {
    out.push('{');
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_string(out, k);
        out.push_str(": ");
        push_value(out, v, depth + 1);
        // Far past the cap: stop walking (the text is cut below anyway).
        if out.chars().count() > PREVIEW_MAX_CHARS * 2 {
            break;
        }
    }
    out.push('}');
}

/// The preview of a call's arguments: at most [`PREVIEW_MAX_CHARS`] characters, ending in `…`
/// when cut.
pub fn args_preview(args: &Map<String, Value>) -> String {
    let mut out = String::new();
    push_object(&mut out, args, 0);
    cut(&out, PREVIEW_MAX_CHARS)
}

/// `s` cut to at most `max` characters, the last being `…` when anything was dropped; never
/// inside a `\uXXXX` escape.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut kept: String = s.chars().take(max.saturating_sub(1)).collect();
    // Drop a partial `\uXXXX` at the end so no half escape is shown.
    if let Some(at) = kept.rfind("\\u")
        && kept.len() - at < 6
    {
        kept.truncate(at);
    }
    kept.push('…');
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn preview(v: Value) -> String {
        match v {
            Value::Object(m) => args_preview(&m),
            _ => unreachable!(),
        }
    }

    #[test]
    fn small_arguments_are_shown_whole_as_compact_json() {
        assert_eq!(
            preview(json!({"a": 1, "b": "x", "c": [true, null]})),
            r#"{"a": 1, "b": "x", "c": [true, null]}"#
        );
        assert_eq!(preview(json!({})), "{}");
    }

    #[test]
    fn controls_ansi_and_bidi_are_escaped_everywhere() {
        let p = preview(json!({"k\u{1b}[2J": "ab\u{202e}cd\u{7}\u{9b}31m\u{2028}\u{200b}\"\\"}));
        assert_eq!(
            p,
            r#"{"k\u001b[2J": "ab\u202ecd\u0007\u009b31m\u2028\u200b\"\\"}"#
        );
        assert!(!p.chars().any(is_hidden_char), "{p:?}");
    }

    #[test]
    fn tags_variation_selectors_fillers_and_other_invisibles_are_escaped() {
        let hidden = [
            '\u{E0041}',
            '\u{E007F}',
            '\u{E0001}',
            '\u{FE0F}',
            '\u{FE00}',
            '\u{E0100}',
            '\u{E01EF}',
            '\u{034F}',
            '\u{115F}',
            '\u{1160}',
            '\u{3164}',
            '\u{FFA0}',
            '\u{17B4}',
            '\u{17B5}',
            '\u{180B}',
            '\u{0600}',
            '\u{1D173}',
            '\u{13430}',
            '\u{1BCA0}',
            '\u{FFF0}',
        ];
        for c in hidden {
            assert!(is_hidden_char(c), "{:04x}", u32::from(c));
            let shown = escape_hidden(&format!("a{c}b"));
            assert!(!shown.chars().any(is_hidden_char), "{shown:?}");
            assert!(
                shown.starts_with("a\\u") && shown.ends_with('b'),
                "{shown:?}"
            );
        }
        // Beyond U+FFFF: the surrogate pair, so the quoted preview stays JSON with the same text.
        assert_eq!(escape_hidden("x\u{E0041}"), "x\\udb40\\udc41");
        let p = preview(json!({"k": "ok\u{E0069}\u{E0067}\u{FE0F}"}));
        assert_eq!(p, r#"{"k": "ok\udb40\udc69\udb40\udc67\ufe0f"}"#);
        let back: Value = serde_json::from_str(&p.replace("\"k\": ", "\"k\":")).unwrap();
        assert_eq!(back["k"], "ok\u{E0069}\u{E0067}\u{FE0F}");
        // Visible text stays as is: letters, emoji, combining marks, CJK, Hangul syllables.
        for visible in ["é", "e\u{301}", "😀", "漢字", "한글", "\u{1F44D}\u{1F3FD}"] {
            assert_eq!(escape_hidden(visible), visible);
        }
    }

    #[test]
    fn long_strings_arrays_and_deep_values_are_cut_and_keys_kept() {
        let long = "x".repeat(100);
        let p = preview(json!({"path": long, "items": [1, 2, 3, 4, 5],
                               "deep": {"a": {"b": {"c": 1}}}, "last": 0}));
        assert_eq!(
            p,
            format!(
                r#"{{"path": "{}…", "items": [1, 2, 3, …+2], "deep": {{"a": {{"b": {{…}}}}}}, "last": 0}}"#,
                "x".repeat(40)
            )
        );
    }

    #[test]
    fn the_whole_preview_is_at_most_200_characters_and_never_ends_in_half_an_escape() {
        let mut m = Map::new();
        for i in 0..500 {
            m.insert(format!("key{i}"), json!("\u{202e}".repeat(50)));
        }
        let p = args_preview(&m);
        assert!(
            p.chars().count() <= PREVIEW_MAX_CHARS,
            "{}",
            p.chars().count()
        );
        assert!(p.ends_with('…'));
        assert!(p.starts_with(r#"{"key0": "\u202e"#), "{p}");
        let before = p.trim_end_matches('…');
        let tail = &before[before.rfind('\\').unwrap_or(0)..];
        assert!(!tail.starts_with("\\u") || tail.len() >= 6, "{p}");
        assert!(!p.chars().any(is_hidden_char));
    }
}
