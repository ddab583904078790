//! SEC-23 (SECURITY.md §4.11, §D9.5): the token types have no `PartialEq` (so they cannot be compared
//! with a short-circuiting `==`), no `Display` and no serde impls, and print `<redacted>`; the
//! types that carry a token as text (frames, decoded payloads, parsed links) redact it in
//! their `Debug` output too. Comparison is constant time over the decoded bytes.

use appduct_protocol::bootstrap;
use appduct_protocol::frames::{
    AppFrame, DaemonFrame, Phase, decode_app_message, decode_daemon_message,
};
use appduct_protocol::ids::{ClaimToken, ResumeToken};
use appduct_protocol::link;
use serde_json::json;

// ---- compile-time assertions ------------------------------------------------------------------
//
// Each trait below has a blanket impl for every type and a second impl for types with the
// capability. For a type without it only the blanket impl applies and `<T as Probe<_>>::probe`
// resolves; for a type with it both apply, inference fails, and this file does not compile.

trait LacksPartialEq<Marker> {
    fn probe() {}
}
impl<T: ?Sized> LacksPartialEq<()> for T {}
struct WithPartialEq;
impl<T: ?Sized + PartialEq> LacksPartialEq<WithPartialEq> for T {}

trait LacksDisplay<Marker> {
    fn probe() {}
}
impl<T: ?Sized> LacksDisplay<()> for T {}
struct WithDisplay;
impl<T: ?Sized + std::fmt::Display> LacksDisplay<WithDisplay> for T {}

trait LacksSerialize<Marker> {
    fn probe() {}
}
impl<T: ?Sized> LacksSerialize<()> for T {}
struct WithSerialize;
impl<T: ?Sized + serde::Serialize> LacksSerialize<WithSerialize> for T {}

trait LacksDeserialize<Marker> {
    fn probe() {}
}
impl<T: ?Sized> LacksDeserialize<()> for T {}
struct WithDeserialize;
impl<T: serde::de::DeserializeOwned> LacksDeserialize<WithDeserialize> for T {}

#[test]
fn sec_23_token_types_have_no_equality_display_or_serde() {
    <ClaimToken as LacksPartialEq<_>>::probe();
    <ResumeToken as LacksPartialEq<_>>::probe();
    <ClaimToken as LacksDisplay<_>>::probe();
    <ResumeToken as LacksDisplay<_>>::probe();
    <ClaimToken as LacksSerialize<_>>::probe();
    <ResumeToken as LacksSerialize<_>>::probe();
    <ClaimToken as LacksDeserialize<_>>::probe();
    <ResumeToken as LacksDeserialize<_>>::probe();
}

// ---- unit assertions --------------------------------------------------------------------------

/// 32 distinctive bytes and their base64url text.
fn secret_bytes() -> [u8; 32] {
    std::array::from_fn(|i| 0xA0 ^ (i as u8 * 7))
}

#[test]
fn sec_23_tokens_print_redacted_and_compare_by_value() {
    let claim = ClaimToken::from_bytes(secret_bytes());
    let resume = ResumeToken::from_bytes(secret_bytes());
    let text = claim.to_base64url();
    assert_eq!(format!("{claim:?}"), "ClaimToken(<redacted>)");
    assert_eq!(format!("{resume:#?}"), "ResumeToken(<redacted>)");

    assert!(claim.matches(&text));
    assert!(resume.matches(&text));
    // Every single-bit difference is a mismatch, as are wrong lengths and non-canonical forms.
    for byte in 0..32 {
        for bit in 0..8 {
            let mut other = secret_bytes();
            other[byte] ^= 1 << bit;
            assert!(!claim.matches_bytes(&other));
        }
    }
    for bad in ["", &text[..42], &format!("{text}A"), &format!("{text}=")] {
        assert!(!claim.matches(bad), "{bad:?}");
    }
}

#[test]
fn sec_23_types_that_carry_a_token_as_text_redact_it() {
    let token = ClaimToken::from_bytes(secret_bytes());
    let token_text = token.to_base64url();
    let payload = bootstrap::BootstrapPayload::new(
        "192.168.1.20".parse().unwrap(),
        8443,
        "Zk3pQ0mX8sL1vB2n",
        token,
        1_764_494_223,
    );
    let encoded = payload.encode().unwrap();
    let decoded = bootstrap::decode(&encoded).unwrap();
    let parsed = link::parse(&format!("myapp:///?appduct={encoded}")).unwrap();

    let claim = decode_app_message(
        &json!({"type": "session_claim", "protocol_version": 2,
                "session_id": "Zk3pQ0mX8sL1vB2n", "token": token_text})
        .to_string(),
        Phase::PreAck,
    )
    .unwrap();
    assert!(matches!(claim, AppFrame::SessionClaim(_)));
    let resume = decode_app_message(
        &json!({"type": "session_resume", "protocol_version": 2,
                "session_id": "Zk3pQ0mX8sL1vB2n", "resume_token": token_text})
        .to_string(),
        Phase::PreAck,
    )
    .unwrap();
    assert!(matches!(resume, AppFrame::SessionResume(_)));
    let ack = decode_daemon_message(
        &json!({"type": "session_ack", "session_id": "Zk3pQ0mX8sL1vB2n", "status": "ok", "alias": "pixel-8",
                "resume_token": token_text, "keepalive_interval_s": 15, "grace_s": 600})
        .to_string(),
    )
    .unwrap()
    .unwrap();
    assert!(matches!(ack, DaemonFrame::SessionAck(_)));

    for printed in [
        format!("{decoded:?}"),
        format!("{:?}", decoded.decoded()),
        format!("{:?}", parsed.decoded),
        format!("{claim:?}"),
        format!("{resume:?}"),
        format!("{ack:#?}"),
    ] {
        assert!(!printed.contains(&token_text), "{printed}");
        assert!(printed.contains("<redacted>"), "{printed}");
    }
}
