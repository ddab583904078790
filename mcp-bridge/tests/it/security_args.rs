//! Argument hygiene of the built-ins where it differs from the control plane on purpose
//! (PROTOCOL.md, "Null values and unknown keys"): §M4 checks unknown keys before anything
//! else, so a key outside the schema is refused even when its value is `null`, while §C5 reads
//! a `null` value as absent first.

#![allow(clippy::unwrap_used)]

use appduct_mcp::args;
use appduct_mcp::catalog;
use appduct_protocol::control::SelectorParams;
use appduct_protocol::errors::ErrorType;
use serde_json::{Value, json};

fn validate(builtin: &str, arguments: Value) -> Result<args::Args, appduct_mcp::ToolFailure> {
    let schema = &catalog::builtin(builtin).unwrap().input_schema;
    args::validate(schema, arguments.as_object())
}

#[test]
fn an_unknown_argument_is_refused_even_when_its_value_is_null() {
    let failure = validate(
        catalog::DESCRIBE_TOOL,
        json!({"name": "sum", "selectr": null}),
    )
    .unwrap_err();
    assert_eq!(failure.error_type, ErrorType::InvalidRequest);
    let details = failure.details.as_deref().unwrap();
    assert_eq!(details["param"], "arguments");
    assert_eq!(details["unknownKeys"], json!(["selectr"]));
    assert!(
        failure.message.contains("\"selectr\""),
        "{}",
        failure.message
    );

    // Unknown keys come first: a missing required argument is not what is reported.
    let failure = validate(catalog::DESCRIBE_TOOL, json!({"selectr": null})).unwrap_err();
    assert_eq!(
        failure.details.as_deref().unwrap()["unknownKeys"],
        json!(["selectr"])
    );
}

#[test]
fn a_known_argument_set_to_null_is_absent() {
    let args = validate(
        catalog::DESCRIBE_TOOL,
        json!({"name": "sum", "selector": null}),
    )
    .unwrap();
    assert_eq!(args.str("name"), Some("sum"));
    assert!(!args.has("selector"));
}

#[test]
fn the_control_plane_reads_the_same_null_unknown_key_as_absent() {
    // The other side of the documented difference (§C5).
    assert_eq!(
        SelectorParams::validate(Some(&json!({"selectr": null}))),
        Ok(SelectorParams::default())
    );
    assert!(SelectorParams::validate(Some(&json!({"selectr": "x"}))).is_err());
}
