//! Canonical JSON (§C12.2): the one text form of a JSON value that audit records and consent
//! records hash (`argsSha256`), and that `tools snapshot` writes (§L7.4, indented variant).
//!
//! Rules: object keys sorted by Unicode code point at every depth, array order kept, no
//! whitespace; strings escape only `"`, `\` and U+0000–U+001F (`\b \f \n \r \t` short, the rest
//! as lower-case `\u00xx`), everything else raw UTF-8; numbers with an integral value within
//! ±(2^53 − 1) as integers, every other number in shortest round-trip form.
//!
//! Numbers follow the JSON-as-double model of the wire (§D1), so equal values hash equally
//! however they were spelled (`1`, `1.0`, `1e0`). appduct v2 does not pin the spelling of the
//! "shortest round-trip form"; this module uses the ECMAScript `Number::toString` layout (the
//! form `JSON.stringify` and RFC 8785 produce: `0.1`, `1e+21`, `1.5e-7`), so any JavaScript
//! implementation reproduces it byte for byte.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::text::as_integer;

/// The canonical compact text of `value`.
pub fn to_canonical_string(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value, Layout::CANONICAL);
    out
}

/// The canonical text of `value` indented by two spaces per level (§L7.4), without a final
/// newline. Keys, strings and numbers are exactly as in [`to_canonical_string`].
pub fn to_canonical_pretty(value: &Value) -> String {
    let mut out = String::new();
    write_value(
        &mut out,
        value,
        Layout {
            indent: Some(2),
            ..Layout::CANONICAL
        },
    );
    out
}

/// `argsSha256` (§C12.2): lower-case hex SHA-256 of the canonical JSON of `args`. Callers pass
/// the arguments after defaulting (an omitted `args` is `{}`).
pub fn args_sha256(args: &Value) -> String {
    // One text buffer per thread, reused: hashing a call's arguments allocates nothing but the
    // hex (issue #24, BENCHMARKS.md "Optimisation log"). A buffer grown by a huge value is
    // dropped rather than kept.
    thread_local! {
        static TEXT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    const KEEP_BYTES: usize = 64 * 1024;
    let digest = TEXT.with(|cell| match cell.try_borrow_mut() {
        Ok(mut text) => {
            text.clear();
            if !write_canonical_shallow(&mut text, args, 0) {
                text.clear();
                write_value(&mut text, args, Layout::CANONICAL);
            }
            let digest = Sha256::digest(text.as_bytes());
            if text.capacity() > KEEP_BYTES {
                *text = String::new();
            }
            digest
        }
        // Not reentrant in practice; a nested call still gets the right hash.
        Err(_) => Sha256::digest(to_canonical_string(args).as_bytes()),
    });
    let mut hex = String::with_capacity(64);
    for byte in digest {
        push_hex_byte(&mut hex, byte);
    }
    hex
}

/// Compact JSON of `value` in its own key order (for showing literals to people, §L7.5), cut
/// after `max_chars` code points. Returns the text and whether it is complete. Work stops soon
/// after the cut, so a huge value costs little.
pub(crate) fn compact_json_prefix(value: &Value, max_chars: usize) -> (String, bool) {
    let mut out = String::new();
    // Every char is at most 4 bytes, so past this many bytes there are more than `max_chars`.
    let budget = max_chars.saturating_add(1).saturating_mul(4);
    write_value(
        &mut out,
        value,
        Layout {
            sort_keys: false,
            indent: None,
            byte_budget: Some(budget),
        },
    );
    match out.char_indices().nth(max_chars) {
        Some((cut, _)) => {
            out.truncate(cut);
            (out, false)
        }
        None => (out, true),
    }
}

/// Nesting [`write_canonical_shallow`] recurses through before it gives up.
const SHALLOW_DEPTH: usize = 128;
/// Keys of one object [`write_canonical_shallow`] sorts on the stack.
const SHALLOW_KEYS: usize = 16;

/// The canonical compact text of `value`, exactly as [`write_value`] writes it, by recursion
/// and without allocating (issue #24: no step stack, and the keys of an object of up to
/// [`SHALLOW_KEYS`] members sorted on the stack). `false` when `value` nests deeper than
/// [`SHALLOW_DEPTH`]: `out` then holds a partial text the caller discards.
fn write_canonical_shallow(out: &mut String, value: &Value, depth: usize) -> bool {
    if depth > SHALLOW_DEPTH {
        return false;
    }
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(_) => write_number(out, value),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if !write_canonical_shallow(out, item, depth + 1) {
                    return false;
                }
            }
            out.push(']');
        }
        Value::Object(map) => {
            let member = |out: &mut String, i: usize, key: &str, item: &Value| {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_canonical_shallow(out, item, depth + 1)
            };
            out.push('{');
            // `str` orders by UTF-8 bytes, which is code-point order.
            if map.keys().is_sorted() {
                for (i, (key, item)) in map.iter().enumerate() {
                    if !member(out, i, key, item) {
                        return false;
                    }
                }
            } else if map.len() <= SHALLOW_KEYS {
                let mut entries: [(&str, &Value); SHALLOW_KEYS] =
                    [("", &Value::Null); SHALLOW_KEYS];
                for (slot, (key, item)) in entries.iter_mut().zip(map) {
                    *slot = (key.as_str(), item);
                }
                let entries = &mut entries[..map.len()];
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                for (i, (key, item)) in entries.iter().enumerate() {
                    if !member(out, i, key, item) {
                        return false;
                    }
                }
            } else {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    if !member(out, i, key, item) {
                        return false;
                    }
                }
            }
            out.push('}');
        }
    }
    true
}

#[derive(Clone, Copy)]
struct Layout {
    sort_keys: bool,
    /// Spaces per level; `None` writes no whitespace at all.
    indent: Option<usize>,
    /// Stop once the output is longer than this many bytes.
    byte_budget: Option<usize>,
}

impl Layout {
    const CANONICAL: Self = Self {
        sort_keys: true,
        indent: None,
        byte_budget: None,
    };
}

/// One pending piece of output. An explicit stack instead of recursion, so a value nested
/// deeper than the call stack allows still serialises.
enum Step<'a> {
    Value(&'a Value, usize),
    Text(&'static str),
    Key(&'a str),
    /// Line break followed by indentation for the given depth (pretty form only).
    Break(usize),
}

fn write_value<'a>(out: &mut String, root: &'a Value, layout: Layout) {
    // Room for a flat object of a dozen keys without growing.
    let mut stack = Vec::with_capacity(64);
    stack.push(Step::Value(root, 0));
    while let Some(step) = stack.pop() {
        if layout.byte_budget.is_some_and(|budget| out.len() > budget) {
            return;
        }
        match step {
            Step::Text(text) => out.push_str(text),
            Step::Key(key) => {
                write_string(out, key);
                out.push_str(if layout.indent.is_some() { ": " } else { ":" });
            }
            Step::Break(depth) => {
                if let Some(width) = layout.indent {
                    out.push('\n');
                    out.extend(std::iter::repeat_n(' ', width * depth));
                }
            }
            Step::Value(value, depth) => match value {
                Value::Null => out.push_str("null"),
                Value::Bool(true) => out.push_str("true"),
                Value::Bool(false) => out.push_str("false"),
                Value::Number(_) => write_number(out, value),
                Value::String(s) => write_string(out, s),
                Value::Array(items) if items.is_empty() => out.push_str("[]"),
                Value::Object(map) if map.is_empty() => out.push_str("{}"),
                Value::Array(items) => {
                    out.push('[');
                    // Pushed in reverse so they pop in order.
                    stack.push(Step::Text("]"));
                    stack.push(Step::Break(depth));
                    for (i, item) in items.iter().enumerate().rev() {
                        stack.push(Step::Value(item, depth + 1));
                        stack.push(Step::Break(depth + 1));
                        if i > 0 {
                            stack.push(Step::Text(","));
                        }
                    }
                }
                Value::Object(map) => {
                    out.push('{');
                    stack.push(Step::Text("}"));
                    stack.push(Step::Break(depth));
                    let mut push = |i: usize, key: &'a String, item: &'a Value| {
                        stack.push(Step::Value(item, depth + 1));
                        stack.push(Step::Key(key));
                        stack.push(Step::Break(depth + 1));
                        if i > 0 {
                            stack.push(Step::Text(","));
                        }
                    };
                    // `str` orders by UTF-8 bytes, which is code-point order. Keys already in
                    // order (what canonical senders write) need no sorted copy.
                    if !layout.sort_keys || map.keys().is_sorted() {
                        for (i, (key, item)) in map.iter().enumerate().rev() {
                            push(i, key, item);
                        }
                    } else {
                        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                        for (i, (key, item)) in entries.into_iter().enumerate().rev() {
                            push(i, key, item);
                        }
                    }
                }
            },
        }
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                out.push_str("\\u00");
                // Below 0x20, so the code point fits in one byte.
                push_hex_byte(out, u32::from(c) as u8);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn push_hex_byte(out: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(char::from(HEX[usize::from(byte >> 4)]));
    out.push(char::from(HEX[usize::from(byte & 0x0f)]));
}

fn write_number(out: &mut String, value: &Value) {
    if let Some(i) = as_integer(value) {
        use std::fmt::Write as _;
        // Writing into a `String` cannot fail.
        let _ = write!(out, "{i}");
        return;
    }
    match value.as_f64() {
        Some(f) if f.is_finite() => write_shortest_f64(out, f),
        // serde_json numbers are finite; this keeps the writer total regardless.
        _ => out.push_str("null"),
    }
}

/// ECMAScript `Number::toString(f)` for a finite `f`. Rust's `{:e}` already yields the shortest
/// digits that round-trip (`d.ddde±n`); only the layout differs.
fn write_shortest_f64(out: &mut String, f: f64) {
    let sci = format!("{:e}", f.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let Ok(exp) = exponent.parse::<i64>() else {
        out.push_str(&sci);
        return;
    };
    if f.is_sign_negative() && f != 0.0 {
        out.push('-');
    }
    let k = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    // Value = 0.d1…dk × 10^n.
    let n = exp + 1;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n(
            '0',
            usize::try_from(n - k).unwrap_or(0),
        ));
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(usize::try_from(n).unwrap_or(0));
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', usize::try_from(-n).unwrap_or(0)));
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push('e');
        out.push(if n - 1 < 0 { '-' } else { '+' });
        out.push_str(&(n - 1).unsigned_abs().to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// Issue #24: the recursive writer of `args_sha256` writes exactly what the general one
    /// does (sorted and unsorted objects, more keys than it sorts on the stack, numbers,
    /// escapes), and gives up beyond its depth, where the general writer takes over.
    #[test]
    fn the_shallow_writer_matches_the_general_one() {
        let many: serde_json::Map<String, Value> =
            (0..40).rev().map(|i| (format!("k{i}"), json!(i))).collect();
        let mut values = vec![
            json!({}),
            json!([]),
            json!({"text": "The quick \"fox\"\n\u{1}", "count": 42, "flag": true, "z": null}),
            json!({"a": [1, 2.5, -0.0, 1e21, 1.5e-7, 9007199254740993u64, -3], "b": {"y": 1, "x": [{}]}}),
            json!([{"b": 1, "a": 2}, "é😀", false]),
            Value::Object(many),
        ];
        let mut deep = json!(1);
        for i in 0..SHALLOW_DEPTH + 5 {
            deep = if i % 2 == 0 {
                json!([deep])
            } else {
                json!({"b": 0, "a": deep})
            };
        }
        values.push(deep.clone());
        for value in &values {
            let mut shallow = String::new();
            let whole = write_canonical_shallow(&mut shallow, value, 0);
            let general = to_canonical_string(value);
            if whole {
                assert_eq!(shallow, general, "{value}");
            } else {
                assert!(
                    std::ptr::eq(value, values.last().unwrap()),
                    "only the deep one gives up"
                );
            }
            let digest = Sha256::digest(general.as_bytes());
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(args_sha256(value), hex, "{value}");
        }
        let mut out = String::new();
        assert!(!write_canonical_shallow(&mut out, &deep, 0));
    }

    #[test]
    fn spec_vector_empty_object() {
        let args = json!({});
        assert_eq!(to_canonical_string(&args), "{}");
        assert_eq!(
            args_sha256(&args),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }

    #[test]
    fn spec_vector_nested_keys_are_sorted_at_every_depth() {
        let args = parse(r#"{"b":1,"a":{"d":[3,{"z":true,"y":null}],"c":"é"}}"#);
        assert_eq!(
            to_canonical_string(&args),
            r#"{"a":{"c":"é","d":[3,{"y":null,"z":true}]},"b":1}"#
        );
        assert_eq!(
            args_sha256(&args),
            "02172be57d57ea7b7494626b319ee00bdef9f61503b51b3c24bacb0032a3898e"
        );
    }

    #[test]
    fn spec_vector_integral_floats_hash_like_integers() {
        let a = parse(r#"{"a":1.0,"b":2}"#);
        let b = parse(r#"{"b":2,"a":1}"#);
        assert_eq!(to_canonical_string(&a), r#"{"a":1,"b":2}"#);
        assert_eq!(to_canonical_string(&b), r#"{"a":1,"b":2}"#);
        let expected = "43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777";
        assert_eq!(args_sha256(&a), expected);
        assert_eq!(args_sha256(&b), expected);
    }

    #[test]
    fn keys_sort_by_code_point_not_utf16() {
        // U+FF5E sorts before U+1F600 by code point but after it by UTF-16 code unit.
        let v = json!({"😀": 1, "～": 2, "Z": 3, "a": 4});
        assert_eq!(to_canonical_string(&v), r#"{"Z":3,"a":4,"～":2,"😀":1}"#);
    }

    #[test]
    fn strings_escape_exactly_what_json_requires() {
        let v = json!("q\" b\\ \u{8}\u{c}\n\r\t \u{0}\u{1f}\u{b} \u{7f} é \u{2028} / 😀");
        assert_eq!(
            to_canonical_string(&v),
            "\"q\\\" b\\\\ \\b\\f\\n\\r\\t \\u0000\\u001f\\u000b \u{7f} é \u{2028} / 😀\""
        );
        // Keys follow the same rules.
        assert_eq!(
            to_canonical_string(&json!({"a\u{1}": 0})),
            r#"{"a\u0001":0}"#
        );
    }

    #[test]
    fn integral_numbers_within_the_safe_range_are_integers() {
        for (text, expected) in [
            ("5e3", "5000"),
            ("-0.0", "0"),
            ("-7.0", "-7"),
            ("9007199254740991", "9007199254740991"),
            ("-9007199254740991", "-9007199254740991"),
        ] {
            assert_eq!(to_canonical_string(&parse(text)), expected, "{text}");
        }
        // Built from an f64: serde_json's default float parser is not exact for 16+ digits.
        assert_eq!(
            to_canonical_string(&json!(9_007_199_254_740_991.0_f64)),
            "9007199254740991"
        );
        assert_eq!(
            to_canonical_string(&json!(-4.0e15_f64)),
            "-4000000000000000"
        );
    }

    #[test]
    fn other_numbers_use_the_shortest_round_trip_form() {
        for (text, expected) in [
            ("0.1", "0.1"),
            ("1.5", "1.5"),
            ("-2.25", "-2.25"),
            ("1e-7", "1e-7"),
            ("1.5e-7", "1.5e-7"),
            ("0.000001", "0.000001"),
            ("123.456e1", "1234.56"),
            ("9007199254740992", "9007199254740992"),
            ("9007199254740993", "9007199254740992"),
            ("18446744073709551615", "18446744073709552000"),
            ("-9223372036854775808", "-9223372036854776000"),
            ("1e21", "1e+21"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("5e-324", "5e-324"),
        ] {
            assert_eq!(to_canonical_string(&parse(text)), expected, "{text}");
        }
        // Equal values hash equally however they are spelled.
        assert_eq!(
            args_sha256(&parse("[1e19]")),
            args_sha256(&parse("[10000000000000000000]"))
        );
        assert_ne!(args_sha256(&parse("[0.1]")), args_sha256(&parse("[0.2]")));
    }

    #[test]
    fn shortest_form_round_trips() {
        for f in [
            0.1,
            1.0 / 3.0,
            2.5e-300,
            6.02e23,
            123_456_789.123,
            -1e-6,
            1e-7,
        ] {
            let text = to_canonical_string(&json!(f));
            let back: f64 = text.parse().unwrap_or(f64::NAN);
            assert_eq!(back, f, "{text}");
        }
    }

    #[test]
    fn compact_prefix_keeps_key_order_and_reports_cuts() {
        let v = json!({"b": 1.0, "a": "é"});
        assert_eq!(
            compact_json_prefix(&v, 40),
            (r#"{"b":1,"a":"é"}"#.to_owned(), true)
        );
        assert_eq!(
            compact_json_prefix(&v, 15),
            (r#"{"b":1,"a":"é"}"#.to_owned(), true)
        );
        assert_eq!(
            compact_json_prefix(&v, 14),
            (r#"{"b":1,"a":"é""#.to_owned(), false)
        );
        assert_eq!(compact_json_prefix(&json!(""), 0), (String::new(), false));
        let long = json!(vec![1; 1_000_000]);
        assert_eq!(compact_json_prefix(&long, 5), ("[1,1,".to_owned(), false));
    }

    #[test]
    fn arrays_keep_their_order() {
        assert_eq!(to_canonical_string(&json!([3, 1, 2])), "[3,1,2]");
        assert_eq!(
            to_canonical_string(&json!([[], {}, [null]])),
            "[[],{},[null]]"
        );
    }

    #[test]
    fn pretty_form_indents_two_spaces_with_sorted_keys() {
        let v = json!({"b": [1, {"y": true, "x": []}], "a": {}, "c": "é\n"});
        assert_eq!(
            to_canonical_pretty(&v),
            "{\n  \"a\": {},\n  \"b\": [\n    1,\n    {\n      \"x\": [],\n      \"y\": true\n    }\n  ],\n  \"c\": \"é\\n\"\n}"
        );
        assert_eq!(to_canonical_pretty(&json!(1.0)), "1");
    }

    #[test]
    fn deep_nesting_does_not_overflow_the_stack() {
        let mut v = json!(0);
        for _ in 0..100_000 {
            v = Value::Array(vec![v]);
        }
        let text = to_canonical_string(&v);
        let expected = format!("{}0{}", "[".repeat(100_000), "]".repeat(100_000));
        let prefix = compact_json_prefix(&v, 40);
        // serde_json's Drop is recursive; unwind the value by hand so the test itself is safe.
        let mut current = v;
        while let Value::Array(mut items) = current {
            current = items.pop().unwrap_or(Value::Null);
        }
        // Compared only now: a failing assertion would unwind through the recursive Drop.
        assert!(text == expected, "deep value serialised wrongly");
        assert_eq!(prefix, ("[".repeat(40), false));
    }
}
