//! `tool-descriptors.json` and `event-descriptors.json` (§D15): the validator's verdict
//! equals `valid`, and valid descriptors survive decode → encode with every known field.

use appduct_protocol::descriptor::{validate_event_descriptor, validate_tool_descriptor};
use serde_json::{Map, Value};

use super::common::{Report, load_array, name_of};

const TOOL_FIELDS: &[&str] = &[
    "name",
    "description",
    "input_schema",
    "output_schema",
    "annotations",
    "timeout_ms",
    "group",
];
const EVENT_FIELDS: &[&str] = &["name", "description", "payload_schema"];

/// The descriptor with only the known fields, which is what encoding must give back.
fn known_fields(descriptor: &Value, fields: &[&str]) -> Value {
    let kept: Map<String, Value> = descriptor
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| fields.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Value::Object(kept)
}

/// Schemas must come back in the order received, so they are compared as text.
fn schemas_as_text(v: &Value, fields: &[&str]) -> Vec<Option<String>> {
    fields
        .iter()
        .filter(|f| f.ends_with("_schema"))
        .map(|f| v.get(*f).map(Value::to_string))
        .collect()
}

#[test]
fn tool_descriptors() {
    let mut report = Report::new("tool-descriptors.json");
    for case in load_array("tool-descriptors.json") {
        let name = name_of(&case);
        let descriptor = &case["descriptor"];
        let valid = case["valid"].as_bool();
        let verdict = validate_tool_descriptor(descriptor);
        report.check(&name, valid == Some(verdict.is_ok()), || {
            format!("expected valid={valid:?}, validator said {verdict:?}")
        });
        if let Ok(tool) = verdict {
            let encoded = tool.to_value();
            let want = known_fields(descriptor, TOOL_FIELDS);
            report.check(&name, encoded == want, || {
                format!("decode → encode gave {encoded}, expected {want}")
            });
            report.check(
                &name,
                schemas_as_text(&encoded, TOOL_FIELDS) == schemas_as_text(&want, TOOL_FIELDS),
                || "schemas were not kept in received key order".to_owned(),
            );
            let again = validate_tool_descriptor(&encoded);
            report.check(&name, again.as_ref() == Ok(&tool), || {
                format!("the encoded descriptor does not validate to itself: {again:?}")
            });
        }
    }
    report.finish();
}

#[test]
fn event_descriptors() {
    let mut report = Report::new("event-descriptors.json");
    for case in load_array("event-descriptors.json") {
        let name = name_of(&case);
        let descriptor = &case["descriptor"];
        let valid = case["valid"].as_bool();
        let verdict = validate_event_descriptor(descriptor);
        report.check(&name, valid == Some(verdict.is_ok()), || {
            format!("expected valid={valid:?}, validator said {verdict:?}")
        });
        if let Ok(event) = verdict {
            let encoded = event.to_value();
            let want = known_fields(descriptor, EVENT_FIELDS);
            report.check(&name, encoded == want, || {
                format!("decode → encode gave {encoded}, expected {want}")
            });
            report.check(
                &name,
                schemas_as_text(&encoded, EVENT_FIELDS) == schemas_as_text(&want, EVENT_FIELDS),
                || "payload_schema was not kept in received key order".to_owned(),
            );
        }
    }
    report.finish();
}
