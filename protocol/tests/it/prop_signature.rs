//! The signature renderer (§L7.5) is total: arbitrary JSON in any schema position renders
//! without panicking and within the signature budget, and the summary always honours its
//! length cap.

use appduct_protocol::signature::{
    MAX_SIGNATURE_CHARS, render_event_signature, render_tool_signature, summarize_description,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Keys that steer the renderer, so random objects hit its branches often.
const KEYS: &[&str] = &[
    "type",
    "properties",
    "required",
    "items",
    "enum",
    "const",
    "default",
    "additionalProperties",
    "anyOf",
    "$ref",
    "a",
    "x-id",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        prop_oneof![
            Just("object"),
            Just("array"),
            Just("string"),
            Just("integer"),
            Just("number"),
            Just("boolean"),
            Just("null"),
            Just("a"),
        ]
        .prop_map(|s| Value::String(s.to_owned())),
        "\\PC{0,50}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(8, 256, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::vec(
                (
                    prop_oneof![
                        proptest::sample::select(KEYS).prop_map(str::to_owned),
                        "\\PC{0,8}"
                    ],
                    inner
                ),
                0..8
            )
            .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Schema-shaped values: an object root with type "object" and random properties.
fn object_schema() -> impl Strategy<Value = Value> {
    (
        proptest::collection::vec(("\\PC{0,8}", json_value()), 0..6),
        json_value(),
    )
        .prop_map(|(props, required)| {
            json!({
                "type": "object",
                "properties": props.into_iter().collect::<Map<_, _>>(),
                "required": required,
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_panics_on_arbitrary_json(input in proptest::option::of(json_value()), output in proptest::option::of(json_value()), name in "\\PC{0,20}") {
        let rendered = render_tool_signature(&name, input.as_ref(), output.as_ref());
        prop_assert!(rendered.chars().count() <= MAX_SIGNATURE_CHARS);
        let head = format!("{name}(");
        prop_assert!(rendered.starts_with(&head), "{}", rendered);
        // A signature cut by the budget ends with `…` instead.
        if !rendered.ends_with('…') {
            if output.is_none() {
                prop_assert!(rendered.ends_with(')'));
            } else {
                prop_assert!(rendered.contains(") -> "));
            }
        }
        let event = render_event_signature(&name, output.as_ref());
        prop_assert!(event.chars().count() <= MAX_SIGNATURE_CHARS);
        prop_assert!(event.starts_with(&name));
    }

    #[test]
    fn never_panics_on_object_schemas(input in object_schema(), output in object_schema()) {
        let rendered = render_tool_signature("t", Some(&input), Some(&output));
        prop_assert!(rendered.chars().count() <= MAX_SIGNATURE_CHARS);
        prop_assert!(rendered.starts_with("t("));
        prop_assert!(rendered.contains(") -> {") || rendered.ends_with('…'), "{}", rendered);
    }

    #[test]
    fn summary_is_one_line_without_controls_and_capped(description in "\\PC{0,300}|[\\x00-\\x{a0}a ]{0,300}") {
        let summary = summarize_description(&description);
        prop_assert!(summary.chars().count() <= 121);
        prop_assert!(!summary.chars().any(char::is_control));
        if summary.chars().count() == 121 {
            prop_assert!(summary.ends_with('…'));
        }
        prop_assert!(!summary.contains(['\n', '\r']));
        prop_assert_eq!(summary.trim_start(), summary.as_str());
        if summary.chars().count() <= 120 {
            prop_assert_eq!(summary.trim(), summary.as_str());
        }
    }
}
