//! Target `device_frame`: the daemon's app → daemon decoder (§D6.2) in both connection
//! phases, and the SDKs' lenient daemon → app decoder (§D7.5).
//!
//! Input: one WebSocket text message (inputs that are not UTF-8 are skipped: a text frame
//! always is). Invariants:
//! - an accepted frame fits its phase (claim, resume or link refusal before the ack, the acked
//!   session's other frames after it), re-encodes to a message that decodes to the same frame, and that
//!   encoding is a fixed point;
//! - the decoder agrees with [`decode_app_value`] on the parsed message;
//! - a rejection carries a close reason the decoder may give in that phase and a bounded
//!   detail that never quotes the claim or resume token;
//! - the `Debug` of a frame does not depend on its token;
//! - a daemon frame accepted by the SDK decoder re-encodes and decodes to the same frame.

use appduct_protocol::close::CloseReason;
use appduct_protocol::frames::{
    AppFrame, DaemonFrame, DaemonMessageError, Phase, Rejection, check_outgoing_size,
    decode_app_message, decode_app_value, decode_daemon_message, sanitize_lone_surrogates,
};
use appduct_protocol::limits::{MAX_IDENTIFIER_LEN, MAX_MESSAGE_BYTES};
use serde_json::Value;

/// The session a connection is acked for when the message's own id is not used.
const ACKED_SESSION: &str = "fuzz-session-0";
/// Longest rejection or frame-error detail: fixed wording plus at most two values quoted after
/// cutting to 64 UTF-16 units (each char escaped as at most 10 bytes by `{:?}`).
const MAX_DETAIL_BYTES: usize = 2048;
/// Tokens at least this long must not reach a detail. Shorter ones could coincide with the
/// fixed wording of a detail.
const MIN_CHECKED_TOKEN_LEN: usize = 32;

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = serde_json::from_str::<Value>(&sanitize_lone_surrogates(text)).ok();
    check_app(text, parsed.as_ref(), Phase::PreAck);
    check_app(
        text,
        parsed.as_ref(),
        Phase::Acked {
            session_id: ACKED_SESSION,
        },
    );
    // Acked for the id the message names, so frames of any session reach their field guards.
    if let Some(own) = parsed
        .as_ref()
        .and_then(|v| v.get("session_id"))
        .and_then(Value::as_str)
        .filter(|id| *id != ACKED_SESSION && (1..=MAX_IDENTIFIER_LEN).contains(&id.len()))
    {
        check_app(text, parsed.as_ref(), Phase::Acked { session_id: own });
    }
    check_daemon(text, parsed.as_ref());
}

fn check_app(text: &str, parsed: Option<&Value>, phase: Phase<'_>) {
    let decoded = decode_app_message(text, phase);
    // The size check belongs to the text path only.
    if let Some(value) = parsed.filter(|_| text.len() <= MAX_MESSAGE_BYTES) {
        // Same frame, or the same close; details are log wording and may differ.
        let from_value = decode_app_value(value, phase);
        assert_eq!(
            from_value.as_ref().map_err(|r| r.reason),
            decoded.as_ref().map_err(|r| r.reason),
            "decode_app_message and decode_app_value disagree in {phase:?}"
        );
    }
    match decoded {
        Ok(frame) => check_app_frame(&frame, phase),
        Err(rejection) => check_rejection(parsed, &rejection, phase),
    }
}

fn check_app_frame(frame: &AppFrame, phase: Phase<'_>) {
    // A first frame: a claim, a resume, or a refusal of a link (issue #23).
    let handshake = matches!(
        frame,
        AppFrame::SessionClaim(_) | AppFrame::SessionResume(_) | AppFrame::LinkRefused(_)
    );
    match phase {
        Phase::PreAck => assert!(handshake, "{} accepted before the ack", frame.type_name()),
        Phase::Acked { session_id } => {
            assert!(!handshake, "{} accepted after the ack", frame.type_name());
            assert_eq!(
                frame.session_id(),
                session_id,
                "session_id mismatch accepted"
            );
        }
    }

    let encoded = frame.encode();
    // A frame within the limit as received can re-encode longer (escapes of control
    // characters); the round trip only holds for what a sender may send.
    if check_outgoing_size(&encoded).is_ok() {
        let again = decode_app_message(&encoded, phase)
            .unwrap_or_else(|r| panic!("re-encoded {} is rejected: {r}", frame.type_name()));
        assert_eq!(&again, frame, "re-encoded frame decodes differently");
        assert_eq!(again.encode(), encoded, "the encoding is not a fixed point");
    }

    // The Debug rendering must not depend on the secret at all.
    let without_secret = match frame {
        AppFrame::SessionClaim(claim) => {
            let mut c = claim.clone();
            c.token = String::new();
            Some(AppFrame::SessionClaim(c))
        }
        AppFrame::SessionResume(resume) => {
            let mut r = resume.clone();
            r.resume_token = String::new();
            Some(AppFrame::SessionResume(r))
        }
        _ => None,
    };
    if let Some(redacted) = without_secret {
        assert_eq!(
            format!("{frame:?}"),
            format!("{redacted:?}"),
            "Debug of {} shows its token",
            frame.type_name()
        );
    }
}

fn check_rejection(parsed: Option<&Value>, rejection: &Rejection, phase: Phase<'_>) {
    use CloseReason::*;
    let allowed: &[CloseReason] = match phase {
        Phase::PreAck => &[
            MessageTooBig,
            InvalidJson,
            ExpectedClaimOrResume,
            InvalidRefusal,
        ],
        Phase::Acked { .. } => &[
            MessageTooBig,
            InvalidJson,
            UnknownMessageType,
            SessionMismatch,
            InvalidRegistry,
            InvalidMessage,
        ],
    };
    assert!(
        allowed.contains(&rejection.reason),
        "{:?} is not a decoder rejection in {phase:?}",
        rejection.reason
    );
    assert!(
        rejection.detail.len() <= MAX_DETAIL_BYTES,
        "rejection detail of {} bytes",
        rejection.detail.len()
    );
    for secret in secrets(parsed) {
        assert!(
            !rejection.detail.contains(&secret),
            "rejection detail quotes a token: {}",
            rejection.detail
        );
    }
}

/// The claim, resume and ack tokens of a message that can be recognised in a detail: long,
/// base64url like real tokens (so no escaping changes them), and found nowhere else in the
/// message (a detail may quote other fields).
fn secrets(parsed: Option<&Value>) -> Vec<String> {
    const KEYS: [&str; 2] = ["token", "resume_token"];
    let Some(map) = parsed.and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut rest = map.clone();
    rest.retain(|key, _| !KEYS.contains(&key.as_str()));
    let rest = Value::Object(rest).to_string();
    KEYS.iter()
        .filter_map(|key| map.get(*key).and_then(Value::as_str))
        .filter(|s| {
            s.len() >= MIN_CHECKED_TOKEN_LEN
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !rest.contains(*s)
        })
        .map(str::to_owned)
        .collect()
}

fn check_daemon(text: &str, parsed: Option<&Value>) {
    match decode_daemon_message(text) {
        Ok(None) => {}
        Ok(Some(frame)) => check_daemon_frame(&frame),
        Err(DaemonMessageError::InvalidFrame { detail, .. }) => {
            assert!(
                detail.len() <= MAX_DETAIL_BYTES,
                "frame error of {} bytes",
                detail.len()
            );
            for secret in secrets(parsed) {
                assert!(
                    !detail.contains(&secret),
                    "frame error quotes a token: {detail}"
                );
            }
        }
        Err(DaemonMessageError::TooLarge(_) | DaemonMessageError::InvalidJson(_)) => {}
    }
}

fn check_daemon_frame(frame: &DaemonFrame) {
    let encoded = frame.encode();
    if check_outgoing_size(&encoded).is_ok() {
        let again = decode_daemon_message(&encoded)
            .unwrap_or_else(|e| panic!("re-encoded {} is rejected: {e}", frame.type_name()));
        assert_eq!(
            again.as_ref(),
            Some(frame),
            "re-encoded frame decodes differently"
        );
    }
    if let DaemonFrame::SessionAck(ack) = frame {
        let mut redacted = ack.clone();
        redacted.resume_token = String::new();
        assert_eq!(
            format!("{ack:?}"),
            format!("{redacted:?}"),
            "Debug of session_ack shows its resume token"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLAIM: &str = r#"{"type":"session_claim","protocol_version":2,"session_id":"Qm9vdHN0cmFwSWQx","token":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"}"#;

    fn claim() -> AppFrame {
        decode_app_message(CLAIM, Phase::PreAck).unwrap_or_else(|r| panic!("{r}"))
    }

    #[test]
    fn a_valid_claim_passes_every_check() {
        run(CLAIM.as_bytes());
    }

    #[test]
    #[should_panic(expected = "accepted after the ack")]
    fn a_claim_accepted_after_the_ack_is_caught() {
        check_app_frame(
            &claim(),
            Phase::Acked {
                session_id: "Qm9vdHN0cmFwSWQx",
            },
        );
    }

    #[test]
    #[should_panic(expected = "quotes a token")]
    fn a_detail_quoting_the_token_is_caught() {
        let parsed: Value = serde_json::from_str(CLAIM).unwrap_or_default();
        let leak = Rejection::new(
            CloseReason::ExpectedClaimOrResume,
            "token AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8 is wrong",
        );
        check_rejection(Some(&parsed), &leak, Phase::PreAck);
    }

    #[test]
    #[should_panic(expected = "not a decoder rejection")]
    fn a_reason_outside_the_phase_is_caught() {
        let wrong = Rejection::new(CloseReason::InvalidRegistry, "x");
        check_rejection(None, &wrong, Phase::PreAck);
    }
}
