//! Target `descriptor`: the tool and event descriptor validators (§D8.1, §D8.2) and the
//! signature and summary renderer that reads what they accept (§L7.5).
//!
//! Input: one JSON value (inputs that do not parse are skipped), validated both as a tool and
//! as an event descriptor. Invariants:
//! - an accepted descriptor satisfies the field rules, validates again to itself from its wire
//!   form and through serde, and renders a signature of at most 4096 characters and a one-line
//!   summary without control characters;
//! - a refusal names a descriptor field and has a bounded message;
//! - the same value inside a registry snapshot or delta frame is accepted by the frame decoder
//!   exactly when the validator accepts it, and refused as `invalid_registry` otherwise.

use appduct_protocol::close::CloseReason;
use appduct_protocol::descriptor::{
    DescriptorError, EventDescriptor, Schema, ToolDescriptor, is_valid_group, is_valid_tool_name,
    validate_event_descriptor, validate_tool_descriptor,
};
use appduct_protocol::frames::{AppFrame, Phase, decode_app_message};
use appduct_protocol::limits::{
    MAX_CALL_TIMEOUT_MS, MAX_FREE_TEXT_LEN, MAX_JSON_DEPTH, MAX_MESSAGE_BYTES, MIN_CALL_TIMEOUT_MS,
};
use appduct_protocol::signature::{
    MAX_SIGNATURE_CHARS, render_event_signature, render_tool_signature, summarize_description,
};
use appduct_protocol::text::{json_depth, utf16_len_within};
use serde_json::{Value, json};

const TOOL_FIELDS: &[&str] = &[
    "name",
    "description",
    "input_schema",
    "output_schema",
    "annotations",
    "timeout_ms",
    "group",
    // §D18: the registry declarations (an extension).
    "riskLevel",
    "requiredPermissions",
    "testCases",
];
const EVENT_FIELDS: &[&str] = &["name", "description", "payload_schema"];
/// Longest error message: fixed wording plus an annotation key cut to 64 UTF-16 units and
/// escaped by `{:?}` (at most 10 bytes a character).
const MAX_ERROR_BYTES: usize = 1024;
/// Longest one-line summary, in characters: 120 and the `…`.
const MAX_SUMMARY_CHARS: usize = 121;
const SESSION: &str = "fuzz-session-0";

pub fn run(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let tool = validate_tool_descriptor(&value);
    match &tool {
        Ok(d) => check_tool(d),
        Err(e) => check_error(e, TOOL_FIELDS),
    }
    let event = validate_event_descriptor(&value);
    match &event {
        Ok(d) => check_event(d),
        Err(e) => check_error(e, EVENT_FIELDS),
    }

    // Frames add one level (the snapshot array) around the value and must stay under the
    // frame limits for the verdicts to be comparable.
    if json_depth(&value) < MAX_JSON_DEPTH && value.to_string().len() < MAX_MESSAGE_BYTES / 2 {
        check_frames(&value, tool.is_ok(), event.is_ok());
    }
}

fn check_tool(d: &ToolDescriptor) {
    assert!(
        is_valid_tool_name(&d.name),
        "accepted tool name {:?}",
        d.name
    );
    assert!(utf16_len_within(&d.description, 1, MAX_FREE_TEXT_LEN));
    if let Some(group) = &d.group {
        assert!(is_valid_group(group), "accepted group {group:?}");
    }
    assert!(d.timeout_ms.is_none_or(|t| t >= 1));
    // §D18: accepted declarations stay within their bounds.
    if let Some(p) = &d.required_permissions {
        assert!(p.len() <= appduct_protocol::declarations::MAX_PERMISSIONS);
    }
    if let Some(t) = &d.test_cases {
        let cases = t.cases();
        assert!((1..=appduct_protocol::declarations::MAX_TEST_CASES).contains(&cases.len()));
        assert!(t.as_str().len() <= appduct_protocol::declarations::MAX_TEST_CASES_BYTES);
    }
    let deadline = d.effective_timeout_ms();
    assert!((MIN_CALL_TIMEOUT_MS..=MAX_CALL_TIMEOUT_MS).contains(&deadline));

    let wire = d.to_value();
    assert!(
        wire.as_object()
            .is_some_and(|m| m.keys().all(|k| TOOL_FIELDS.contains(&k.as_str())))
    );
    assert_eq!(
        validate_tool_descriptor(&wire).as_ref(),
        Ok(d),
        "wire form validates differently"
    );
    let text = serde_json::to_string(d).unwrap_or_else(|e| panic!("serialising: {e}"));
    let back: ToolDescriptor =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("deserialising: {e}"));
    assert_eq!(&back, d, "serde round trip differs");

    let input = d.input_schema.as_ref().map(Schema::to_value);
    let output = d.output_schema.as_ref().map(Schema::to_value);
    let signature = render_tool_signature(&d.name, input.as_ref(), output.as_ref());
    assert!(signature.chars().count() <= MAX_SIGNATURE_CHARS);
    assert!(
        signature.starts_with(&format!("{}(", d.name)),
        "{signature:?}"
    );
    check_summary(&d.description);
}

fn check_event(d: &EventDescriptor) {
    assert!(utf16_len_within(&d.name, 1, MAX_FREE_TEXT_LEN));
    assert!(utf16_len_within(&d.description, 1, MAX_FREE_TEXT_LEN));

    let wire = d.to_value();
    assert!(
        wire.as_object()
            .is_some_and(|m| m.keys().all(|k| EVENT_FIELDS.contains(&k.as_str())))
    );
    assert_eq!(
        validate_event_descriptor(&wire).as_ref(),
        Ok(d),
        "wire form validates differently"
    );
    let text = serde_json::to_string(d).unwrap_or_else(|e| panic!("serialising: {e}"));
    let back: EventDescriptor =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("deserialising: {e}"));
    assert_eq!(&back, d, "serde round trip differs");

    let payload = d.payload_schema.as_ref().map(Schema::to_value);
    let signature = render_event_signature(&d.name, payload.as_ref());
    assert!(signature.chars().count() <= MAX_SIGNATURE_CHARS);
    check_summary(&d.description);
}

fn check_summary(description: &str) {
    let summary = summarize_description(description);
    assert!(summary.chars().count() <= MAX_SUMMARY_CHARS, "{summary:?}");
    assert!(!summary.chars().any(char::is_control), "{summary:?}");
}

fn check_error(e: &DescriptorError, fields: &[&str]) {
    let field = e.field();
    assert!(
        field.is_empty() || fields.contains(&field),
        "error names {field:?}"
    );
    assert!(
        field.is_empty() == matches!(e, DescriptorError::NotAnObject { .. }),
        "only a non-object has no field"
    );
    let message = e.to_string();
    assert!(
        !message.is_empty() && message.len() <= MAX_ERROR_BYTES,
        "{message:?}"
    );
}

/// The value inside registry frames gets the validator's verdict.
fn check_frames(value: &Value, tool_ok: bool, event_ok: bool) {
    let frames = [
        (
            json!({"type": "tool_registry_snapshot", "session_id": SESSION, "tools": [value]}),
            tool_ok,
        ),
        (
            json!({"type": "tool_registry_delta", "session_id": SESSION, "operation": "upsert", "tool": value}),
            tool_ok,
        ),
        (
            json!({"type": "event_registry_snapshot", "session_id": SESSION, "events": [value]}),
            event_ok,
        ),
        (
            json!({"type": "event_registry_delta", "session_id": SESSION, "operation": "upsert", "event": value}),
            event_ok,
        ),
    ];
    for (frame, valid) in frames {
        let decoded = decode_app_message(
            &frame.to_string(),
            Phase::Acked {
                session_id: SESSION,
            },
        );
        match decoded {
            Ok(AppFrame::ToolRegistrySnapshot(_))
            | Ok(AppFrame::ToolRegistryDelta(_))
            | Ok(AppFrame::EventRegistrySnapshot(_))
            | Ok(AppFrame::EventRegistryDelta(_)) => {
                assert!(
                    valid,
                    "the frame accepts a descriptor the validator refuses: {frame}"
                )
            }
            Ok(other) => panic!("a registry frame decoded as {}", other.type_name()),
            Err(rejection) => {
                assert!(!valid, "the frame refuses a valid descriptor: {rejection}");
                assert_eq!(
                    rejection.reason,
                    CloseReason::InvalidRegistry,
                    "{rejection}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_tool_passes_every_check() {
        run(br#"{"name":"cart_total","description":"Total.","timeout_ms":1500.0,"group":"cart"}"#);
    }

    #[test]
    #[should_panic(expected = "refuses a valid descriptor")]
    fn a_frame_verdict_that_differs_from_the_validator_is_caught() {
        check_frames(&json!({"name": "bad name", "description": "d"}), true, true);
    }

    #[test]
    #[should_panic(expected = "error names")]
    fn an_error_naming_a_foreign_field_is_caught() {
        check_error(&DescriptorError::Missing { field: "group" }, EVENT_FIELDS);
    }
}
