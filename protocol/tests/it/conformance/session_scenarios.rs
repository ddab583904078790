//! `session-scenarios.json` and `session-scenarios-background.json` (§D15): the scripts are
//! legal protocol. Every `receive` frame parses as a daemon → app frame under the bounds of
//! §D7.1, and every frame the app is expected to send passes the daemon's app → daemon guard:
//! `send` frames after the ack, and the claim or resume a wire `connect` expectation stands for
//! before it. Descriptors of `registerTool` drives are valid tool descriptors.

use appduct_protocol::descriptor::validate_tool_descriptor;
use appduct_protocol::frames::{
    AppFrame, DeviceInfo, Phase, SessionClaim, SessionResume, decode_app_message,
    decode_daemon_message,
};
use serde_json::Value;

use super::common::{Report, load_array, name_of};

fn check_file(file: &'static str) {
    let mut report = Report::new(file);
    for case in load_array(file) {
        let name = name_of(&case);
        let steps = case["steps"].as_array().cloned().unwrap_or_default();
        report.check(&name, !steps.is_empty(), || "no steps".to_owned());
        // The session the script connected with; `send` frames are checked after its ack.
        let mut session_id = String::new();
        for (i, step) in steps.iter().enumerate() {
            let label = format!("{name} step {i}");
            let text = |k: &str| step[k].as_str().unwrap_or_default().to_owned();
            match (step["drive"].as_str(), step["expect"].as_str()) {
                (Some("connect"), _) => session_id = text("sessionId"),
                (Some("receive"), _) => check_receive(&mut report, &label, &step["frame"]),
                (Some("registerTool"), _) => {
                    let verdict = validate_tool_descriptor(&step["descriptor"]);
                    report.check(&label, verdict.is_ok(), || {
                        format!("registerTool descriptor is invalid: {verdict:?}")
                    });
                }
                (_, Some("connect")) => {
                    let frame = match step["mode"].as_str() {
                        Some("claim") => Some(AppFrame::SessionClaim(
                            SessionClaim::new(text("sessionId"), text("token"))
                                .with_device(DeviceInfo::default()),
                        )),
                        Some("resume") => Some(AppFrame::SessionResume(SessionResume::new(
                            text("sessionId"),
                            text("resumeToken"),
                        ))),
                        _ => None,
                    };
                    let verdict = frame
                        .as_ref()
                        .map(|f| decode_app_message(&f.encode(), Phase::PreAck));
                    report.check(&label, matches!(verdict, Some(Ok(_))), || {
                        format!("the connect expectation is not a valid first frame: {verdict:?}")
                    });
                }
                (_, Some("send")) => {
                    let frame = &step["frame"];
                    let verdict = decode_app_message(
                        &frame.to_string(),
                        Phase::Acked {
                            session_id: &session_id,
                        },
                    );
                    report.check(&label, verdict.is_ok(), || {
                        format!("expected send {frame} fails the daemon guard: {verdict:?}")
                    });
                    if let Ok(f) = verdict {
                        report.check(&label, f.to_value() == *frame, || {
                            format!("re-encoded as {}", f.encode())
                        });
                    }
                }
                _ => {}
            }
        }
    }
    report.finish();
}

fn check_receive(report: &mut Report, label: &str, frame: &Value) {
    let decoded = decode_daemon_message(&frame.to_string());
    match decoded {
        Ok(Some(f)) => {
            report.check(label, Some(f.type_name()) == frame["type"].as_str(), || {
                format!("decoded as {}", f.type_name())
            });
            report.check(label, f.to_value() == *frame, || {
                format!("re-encoded as {}", f.encode())
            });
        }
        other => report.check(label, false, || {
            format!("received frame {frame} is not a daemon → app frame: {other:?}")
        }),
    }
}

#[test]
fn session_scenarios_are_legal_protocol() {
    check_file("session-scenarios.json");
}

#[test]
fn background_session_scenarios_are_legal_protocol() {
    check_file("session-scenarios-background.json");
}
