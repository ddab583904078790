//! `frame-limits.json` (§D15): the limit constant equals `limitBytes`, and for each
//! vector the `event` frame of exactly `frameBytes` bytes (payload string filled with `filler`,
//! topped up with `a`) passes the sender's size check and the daemon's decoder iff `sent`.
//! The in-memory daemon case runs in `appduct-daemon` tests (§D15).

use appduct_protocol::close::CloseReason;
use appduct_protocol::frames::{
    AppFrame, EventFrame, Phase, check_outgoing_size, decode_app_message,
};
use appduct_protocol::limits;
use serde_json::Value;

use super::common::{Report, load};

const SESSION_ID: &str = "Qm9vdHN0cmFwSWQx";

fn event_frame(payload: String) -> String {
    AppFrame::Event(
        EventFrame::new(
            SESSION_ID.to_owned(),
            "frame_limit".to_owned(),
            1_764_494_412_345_u64.into(),
        )
        .with_payload(Some(Value::String(payload))),
    )
    .encode()
}

/// The frame of exactly `frame_bytes` bytes the README describes, or `None` if it cannot be built.
fn materialise(frame_bytes: usize, filler: &str) -> Option<String> {
    let empty = event_frame(String::new()).len();
    let gap = frame_bytes.checked_sub(empty)?;
    let count = gap.checked_div(filler.len())?;
    let mut payload = filler.repeat(count);
    payload.push_str(&"a".repeat(gap - count * filler.len()));
    Some(event_frame(payload))
}

#[test]
fn frame_limits() {
    let file = load("frame-limits.json");
    let mut report = Report::new("frame-limits.json");
    let limit = file["limitBytes"].as_u64();
    report.check(
        "limitBytes",
        limit == Some(limits::MAX_MESSAGE_BYTES as u64),
        || {
            format!(
                "limitBytes {limit:?} != MAX_MESSAGE_BYTES {}",
                limits::MAX_MESSAGE_BYTES
            )
        },
    );
    let vectors = file["vectors"].as_array().cloned().unwrap_or_default();
    report.check("vectors", !vectors.is_empty(), || "no vectors".to_owned());
    for v in vectors {
        let name = v["name"].as_str().unwrap_or("<unnamed>").to_owned();
        let frame_bytes = v["frameBytes"].as_u64().unwrap_or(0) as usize;
        let filler = v["filler"].as_str().unwrap_or_default();
        let sent = v["sent"].as_bool();
        let Some(frame) = materialise(frame_bytes, filler) else {
            report.check(&name, false, || "cannot build the frame".to_owned());
            continue;
        };
        report.check(&name, frame.len() == frame_bytes, || {
            format!("built {} bytes, wanted {frame_bytes}", frame.len())
        });
        let checked = check_outgoing_size(&frame);
        report.check(&name, sent == Some(checked.is_ok()), || {
            format!("expected sent={sent:?}, size check said {checked:?}")
        });
        if let Err(e) = checked {
            let msg = e.to_string();
            report.check(
                &name,
                msg.contains(&frame_bytes.to_string()) && msg.contains("262144"),
                || format!("refusal {msg:?} must name the size and 262144"),
            );
        }
        let decoded = decode_app_message(
            &frame,
            Phase::Acked {
                session_id: SESSION_ID,
            },
        );
        let accepted = match &decoded {
            Ok(_) => Some(true),
            Err(r) if r.reason == CloseReason::MessageTooBig => Some(false),
            Err(_) => None,
        };
        report.check(&name, accepted == sent, || {
            format!("expected sent={sent:?}, the daemon decoder said {decoded:?}")
        });
    }
    report.finish();
}
