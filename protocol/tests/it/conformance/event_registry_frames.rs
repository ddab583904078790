//! `event-registry-frames.json` (§D15): every frame in `frames` passes the daemon's guard
//! for its type, decoded after the ack of the case's `sessionId`, and encodes back to itself.

use appduct_protocol::descriptor::validate_event_descriptor;
use appduct_protocol::frames::{Phase, decode_app_message};

use super::common::{Report, load_array, name_of};

#[test]
fn event_registry_frames_pass_the_daemon_guard() {
    let mut report = Report::new("event-registry-frames.json");
    for case in load_array("event-registry-frames.json") {
        let name = name_of(&case);
        let session_id = case["sessionId"].as_str().unwrap_or_default();
        let frames = case["frames"].as_array().cloned().unwrap_or_default();
        report.check(&name, !frames.is_empty(), || "no frames".to_owned());
        for (i, frame) in frames.iter().enumerate() {
            let label = format!("{name} frames[{i}]");
            let decoded = decode_app_message(&frame.to_string(), Phase::Acked { session_id });
            match decoded {
                Ok(f) => {
                    report.check(
                        &label,
                        Some(f.type_name()) == frame["type"].as_str(),
                        || format!("decoded as {}", f.type_name()),
                    );
                    report.check(&label, f.to_value() == *frame, || {
                        format!("re-encoded as {}", f.encode())
                    });
                }
                Err(r) => report.check(&label, false, || format!("rejected: {r}")),
            }
        }
        // The declarations the SDK is driven with are valid descriptors too.
        let declared = case["declaredBeforeAck"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let registered = case["afterAck"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|step| step["op"] == "register")
            .map(|step| step["event"].clone());
        for event in declared.into_iter().chain(registered) {
            let verdict = validate_event_descriptor(&event);
            report.check(&name, verdict.is_ok(), || {
                format!("declared event {event} is invalid: {verdict:?}")
            });
        }
    }
    report.finish();
}
