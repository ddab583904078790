//! Canonical JSON (§C12.2) is a faithful, idempotent text form: it parses back to an equal
//! value, re-canonicalising it changes nothing, and key order never changes the hash.

use appduct_protocol::canonical::{args_sha256, to_canonical_pretty, to_canonical_string};
use proptest::prelude::*;
use serde_json::{Map, Value};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,12}|[\\x00-\\x{a0}\"\\\\]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 128, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec(("\\PC{0,6}", inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Equality under the JSON-as-double model. serde_json's default float parser may land one
/// ulp off on long mantissas (exactness is checked with `str::parse` below), so parsed-back
/// numbers compare within a relative 1e-15.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-15 * x.abs().max(y.abs()),
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_value(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

/// Rebuilds every object with its keys in reverse order.
fn reverse_keys(v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(reverse_keys).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .rev()
                .map(|(k, v)| (k.clone(), reverse_keys(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn canonical_text_parses_back_to_the_same_value(v in json_value()) {
        let text = to_canonical_string(&v);
        let back: Value = serde_json::from_str(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert!(same_value(&v, &back), "{} vs {}", v, back);
        // Idempotent up to that parser imprecision: exact whenever no fraction is involved.
        if !text.contains(['.', 'e']) {
            prop_assert_eq!(to_canonical_string(&back), text.clone());
        }
        prop_assert!(!text.contains(['\n', '\r', '\t']));
        let pretty: Value = serde_json::from_str(&to_canonical_pretty(&v)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(same_value(&v, &pretty));
    }

    #[test]
    fn key_order_does_not_change_the_hash(v in json_value()) {
        prop_assert_eq!(args_sha256(&v), args_sha256(&reverse_keys(&v)));
        let hash = args_sha256(&v);
        prop_assert_eq!(hash.len(), 64);
        prop_assert!(hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    }

    #[test]
    fn floats_round_trip_through_the_shortest_form(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
        let text = to_canonical_string(&Value::from(f));
        let back: f64 = text.parse().map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(back, f);
    }
}
