//! Shared value rules of the wire: string lengths in UTF-16 code units, JSON integers (§D1)
//! and JSON nesting depth (`limits::MAX_JSON_DEPTH`). Every bound in frames and descriptors goes through these helpers so the Rust and
//! TypeScript implementations count identically.

use serde_json::Value;

use crate::limits::MAX_SAFE_INTEGER;

/// Length of a wire string: its number of UTF-16 code units (§D1).
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// True when `s` has between `min` and `max` UTF-16 code units, inclusive.
pub fn utf16_len_within(s: &str, min: usize, max: usize) -> bool {
    // Cheap exits first: every char is 1 or 2 units and 1..=4 bytes.
    if s.len() < min || s.len() / 4 > max {
        return false;
    }
    let len = utf16_len(s);
    (min..=max).contains(&len)
}

/// Reads a JSON number as a wire "integer": integral and within ±(2^53 − 1), however it is
/// spelled (`5000`, `5000.0` and `5e3` are the same integer). Anything else is `None`.
pub fn as_integer(v: &Value) -> Option<i64> {
    let n = match v {
        Value::Number(n) => n,
        _ => return None,
    };
    if let Some(i) = n.as_i64() {
        return (i.unsigned_abs() <= MAX_SAFE_INTEGER).then_some(i);
    }
    if n.as_u64().is_some() {
        // Above i64::MAX, so above 2^53 − 1.
        return None;
    }
    let f = n.as_f64()?;
    if !f.is_finite() || f.fract() != 0.0 || f.abs() > MAX_SAFE_INTEGER as f64 {
        return None;
    }
    // In range and integral, so the conversion is exact.
    Some(f as i64)
}

/// Reads a JSON number as a finite `f64` (every serde_json number is finite, but a number
/// decoded from text with `arbitrary_precision` off may still overflow to infinity).
pub fn as_finite(v: &Value) -> Option<f64> {
    v.as_f64().filter(|f| f.is_finite())
}

/// Cuts `s` to at most `max` UTF-16 code units, never inside a surrogate pair (§D13.6).
pub fn truncate_utf16(s: &str, max: usize) -> &str {
    let mut units = 0;
    for (idx, ch) in s.char_indices() {
        let w = ch.len_utf16();
        if units + w > max {
            return &s[..idx];
        }
        units += w;
    }
    s
}

/// Nesting depth of a JSON value: 0 for a scalar, 1 for an array or object holding only
/// scalars, one more per level of arrays and objects inside. No value is too deep to measure:
/// up to [`RECURSION_DEPTH`] levels it recurses (no allocation, issue #24: every call's
/// arguments and result are measured), deeper values are measured with an explicit stack.
pub fn json_depth(value: &Value) -> usize {
    depth_within(value, RECURSION_DEPTH).unwrap_or_else(|| json_depth_on_heap(value))
}

/// Levels [`json_depth`] measures by recursion.
const RECURSION_DEPTH: usize = 128;

/// The depth of `value`, or `None` when it nests more than `budget` levels.
fn depth_within(value: &Value, budget: usize) -> Option<usize> {
    match value {
        Value::Array(items) => deepest_of(items.iter(), budget),
        Value::Object(map) => deepest_of(map.values(), budget),
        _ => Some(0),
    }
}

/// The depth of an array or object holding `children`, as [`depth_within`].
fn deepest_of<'a>(children: impl Iterator<Item = &'a Value>, budget: usize) -> Option<usize> {
    let budget = budget.checked_sub(1)?;
    let mut deepest = 0;
    for child in children {
        deepest = deepest.max(depth_within(child, budget)?);
    }
    Some(deepest + 1)
}

fn json_depth_on_heap(value: &Value) -> usize {
    let mut deepest = 0;
    // Each entry: a value and the depth it has if it is an array or an object.
    let mut stack = vec![(value, 1)];
    while let Some((value, depth)) = stack.pop() {
        match value {
            Value::Array(items) => {
                deepest = deepest.max(depth);
                stack.extend(items.iter().map(|item| (item, depth + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(depth);
                stack.extend(map.values().map(|item| (item, depth + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// `%XX` escapes decoded (two hex digits each, either case; nothing else is special, `+` stays
/// `+`). `None` when an escape is broken or the bytes are not UTF-8. The one decoder for links
/// (§D5.3), HTTP paths and queries (§H) and `file:` roots (§M).
pub fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_owned());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hi = hex_value(*bytes.get(i + 1)?)?;
            let lo = hex_value(*bytes.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn hex_value(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_depth_is_the_same_below_and_beyond_the_recursion_bound() {
        for levels in [
            0,
            1,
            2,
            64,
            RECURSION_DEPTH - 1,
            RECURSION_DEPTH,
            RECURSION_DEPTH + 1,
            300,
        ] {
            let nested = (0..levels).fold(json!(1), |v, i| {
                if i % 2 == 0 {
                    json!([0, v, "s"])
                } else {
                    json!({"a": v, "b": null})
                }
            });
            assert_eq!(json_depth(&nested), levels, "{levels} levels");
            assert_eq!(json_depth_on_heap(&nested), levels, "{levels} levels");
        }
        assert_eq!(json_depth(&json!([])), 1);
        assert_eq!(json_depth(&json!({"a": [[]], "b": [1]})), 3);
        assert_eq!(json_depth(&json!("s")), 0);
    }

    #[test]
    fn utf16_counts_astral_characters_as_two_units() {
        assert_eq!(utf16_len("abc"), 3);
        assert_eq!(utf16_len("é"), 1);
        assert_eq!(utf16_len("😀"), 2);
        assert!(utf16_len_within("😀", 1, 2));
        assert!(!utf16_len_within("😀😀", 1, 3));
        assert!(!utf16_len_within("", 1, 3));
    }

    #[test]
    fn integers_accept_every_spelling_of_an_integral_value() {
        let parse = |s: &str| as_integer(&serde_json::from_str::<Value>(s).unwrap_or(Value::Null));
        assert_eq!(parse("5000"), Some(5000));
        assert_eq!(parse("5000.0"), Some(5000));
        assert_eq!(parse("5e3"), Some(5000));
        assert_eq!(parse("-7"), Some(-7));
        assert_eq!(parse("1.5"), None);
        assert_eq!(parse("9007199254740991"), Some(9_007_199_254_740_991));
        assert_eq!(parse("9007199254740992"), None);
        assert_eq!(parse("18446744073709551615"), None);
        assert_eq!(as_integer(&json!("5")), None);
        assert_eq!(as_integer(&Value::Null), None);
    }

    #[test]
    fn truncation_never_splits_a_surrogate_pair() {
        assert_eq!(truncate_utf16("ab😀c", 3), "ab");
        assert_eq!(truncate_utf16("ab😀c", 4), "ab😀");
        assert_eq!(truncate_utf16("abc", 10), "abc");
    }

    #[test]
    fn json_depth_counts_levels_of_arrays_and_objects() {
        assert_eq!(json_depth(&json!(1)), 0);
        assert_eq!(json_depth(&json!("[[[")), 0);
        assert_eq!(json_depth(&json!([])), 1);
        assert_eq!(json_depth(&json!({"a": 1, "b": "x"})), 1);
        assert_eq!(json_depth(&json!({"a": [1, {"b": []}], "c": {}})), 4);
        assert_eq!(json_depth(&json!({"a": [1, {"b": 2}], "c": {}})), 3);
        assert_eq!(json_depth(&json!([[], [[[]]], {}])), 4);
    }

    #[test]
    fn json_depth_measures_values_deeper_than_the_stack() {
        let mut value = json!(null);
        for _ in 0..100_000 {
            value = Value::Array(vec![value]);
        }
        assert_eq!(json_depth(&value), 100_000);
        // serde_json's Drop recurses; take the value apart iteratively.
        let mut stack = vec![value];
        while let Some(v) = stack.pop() {
            if let Value::Array(items) = v {
                stack.extend(items);
            }
        }
    }
}
