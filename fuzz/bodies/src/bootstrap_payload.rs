//! Target `bootstrap_payload`: the bootstrap payload decoder (§D4), in its binary and its
//! base64url text form.
//!
//! Input: any bytes, read three ways: as the binary layout, as base64url text (when UTF-8), and
//! as the binary layout wrapped in base64url so the text path sees valid base64 too.
//! Invariants:
//! - `encode(decode(x)) == x` for every accepted payload, text and binary, except a family 6
//!   payload carrying an IPv4-mapped address, which re-encodes as family 4 (§D4.3) and then
//!   decodes to the same IPv4 address;
//! - the text decoder accepts exactly the base64url of what the binary decoder accepts;
//! - the decoded view of §D4.3 rebuilds the same payload and survives a JSON round trip;
//! - `Debug` of the payload and of its view does not depend on the token;
//! - expiry is `now >= expires_at`.

use std::net::IpAddr;

use appduct_protocol::bootstrap::{
    self, AnyPayload, BootstrapPayload, Decoded, FAMILY_V4, MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_TEXT_LEN, MAX_SEALED_PAYLOAD_BYTES, MAX_SEALED_PAYLOAD_TEXT_LEN, SEALED_VERSION,
    STATIC_KEY_BYTES,
};
use appduct_protocol::ids::ClaimToken;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

pub fn run(data: &[u8]) {
    let from_bytes = bootstrap::decode_bytes(data);
    if let Ok(payload) = &from_bytes {
        check_payload(payload);
        check_binary_round_trip(payload, data);
    }

    check_sealed(data, &from_bytes);

    let wrapped = URL_SAFE_NO_PAD.encode(data);
    let from_wrapped = bootstrap::decode(&wrapped);
    assert_eq!(
        from_wrapped.is_ok(),
        from_bytes.is_ok(),
        "text and binary decoders disagree: {:?} vs {:?}",
        from_wrapped.as_ref().err(),
        from_bytes.as_ref().err()
    );
    if let (Ok(a), Ok(b)) = (&from_wrapped, &from_bytes) {
        assert_eq!(
            a.decoded(),
            b.decoded(),
            "text and binary decode differently"
        );
    }

    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(payload) = bootstrap::decode(text)
    {
        check_payload(&payload);
        assert!(
            text.len() <= MAX_PAYLOAD_TEXT_LEN,
            "accepted {} chars",
            text.len()
        );
        let encoded = payload
            .encode()
            .unwrap_or_else(|e| panic!("re-encode failed: {e}"));
        if is_v4_mapped(payload.address) {
            assert_same_after_mapping(&payload, &encoded);
        } else {
            assert_eq!(encoded, text, "the accepted text is not canonical");
        }
    }
}

/// Sealed payloads (issue #23): `decode_any` answers v2 exactly when `decode_bytes` accepts, and
/// sealed exactly when `decode_sealed_bytes` does; a sealed payload is its v2 fields plus the
/// key, and re-encodes to the input (but for an IPv4-mapped address, as in v2).
fn check_sealed(data: &[u8], v2: &Result<BootstrapPayload, bootstrap::DecodeError>) {
    let sealed = bootstrap::decode_sealed_bytes(data);
    match bootstrap::decode_any_bytes(data) {
        Ok(AnyPayload::V2(p)) => {
            assert_eq!(
                v2.as_ref().map(BootstrapPayload::decoded).ok(),
                Some(p.decoded())
            );
        }
        Ok(AnyPayload::Sealed(s)) => {
            assert!(v2.is_err(), "a payload is v2 and sealed at once");
            let direct = sealed
                .as_ref()
                .unwrap_or_else(|e| panic!("decode_any accepted what decode_sealed refused: {e}"));
            assert_eq!(direct.static_key, s.static_key);
            check_payload(&s.payload);
            let bytes = s
                .encode_bytes()
                .unwrap_or_else(|e| panic!("a decoded sealed payload does not encode: {e}"));
            assert!(bytes.len() <= MAX_SEALED_PAYLOAD_BYTES);
            assert_eq!(bytes[0], SEALED_VERSION);
            assert_eq!(bytes[bytes.len() - STATIC_KEY_BYTES..], s.static_key);
            if !is_v4_mapped(s.payload.address) {
                assert_eq!(bytes, data, "encode(decode_sealed(x)) != x");
            }
            let text = URL_SAFE_NO_PAD.encode(data);
            assert!(text.len() <= MAX_SEALED_PAYLOAD_TEXT_LEN);
            assert!(matches!(
                bootstrap::decode_any(&text),
                Ok(AnyPayload::Sealed(_))
            ));
            assert!(
                bootstrap::decode(&text).is_err(),
                "the v2 decoder took a sealed payload"
            );
        }
        Err(_) => {
            assert!(
                v2.is_err() && sealed.is_err(),
                "decode_any refused an accepted payload"
            );
        }
    }
}

/// Invariants of any accepted payload.
fn check_payload(payload: &BootstrapPayload) {
    assert_ne!(payload.port, 0);
    assert!((1..=255).contains(&payload.session_id.len()));

    let bytes = payload
        .encode_bytes()
        .unwrap_or_else(|e| panic!("a decoded payload does not encode: {e}"));
    assert!(bytes.len() <= MAX_PAYLOAD_BYTES);

    let view = payload.decoded();
    let rebuilt = BootstrapPayload::try_from(&view)
        .unwrap_or_else(|e| panic!("the decoded view does not rebuild: {e}"));
    assert_eq!(rebuilt.decoded(), view);
    let json = serde_json::to_value(&view).unwrap_or_else(|e| panic!("view to JSON: {e}"));
    let back: Decoded =
        serde_json::from_value(json).unwrap_or_else(|e| panic!("view from JSON: {e}"));
    assert_eq!(back, view);

    let mut other = payload.clone();
    other.token = ClaimToken::from_bytes(flipped(payload.token.as_bytes()));
    assert_eq!(
        format!("{payload:?}"),
        format!("{other:?}"),
        "Debug shows the token"
    );
    let mut other_view = view.clone();
    other_view.token_base64url = other.token.to_base64url();
    assert_eq!(
        format!("{view:?}"),
        format!("{other_view:?}"),
        "Debug of the view shows the token"
    );

    assert!(payload.is_expired(payload.expires_at));
    if let Some(before) = payload.expires_at.checked_sub(1) {
        assert!(!payload.is_expired(before));
    }
}

fn check_binary_round_trip(payload: &BootstrapPayload, data: &[u8]) {
    let bytes = payload
        .encode_bytes()
        .unwrap_or_else(|e| panic!("a decoded payload does not encode: {e}"));
    if is_v4_mapped(payload.address) {
        assert_eq!(
            bytes[1], FAMILY_V4,
            "a mapped address must encode as family 4"
        );
        assert_same_after_mapping(payload, &URL_SAFE_NO_PAD.encode(&bytes));
    } else {
        assert_eq!(bytes, data, "encode(decode(x)) != x");
    }
}

/// A family 6 payload with an IPv4-mapped address: its re-encoding decodes to the same payload
/// with the plain IPv4 address.
fn assert_same_after_mapping(payload: &BootstrapPayload, encoded: &str) {
    let again = bootstrap::decode(encoded)
        .unwrap_or_else(|e| panic!("a re-encoded mapped payload is rejected: {e}"));
    let mut expected = payload.decoded();
    let IpAddr::V6(v6) = payload.address else {
        panic!("not an IPv6 address");
    };
    let Some(v4) = v6.to_ipv4_mapped() else {
        panic!("not an IPv4-mapped address");
    };
    expected.family = FAMILY_V4;
    expected.address = v4.to_string();
    assert_eq!(again.decoded(), expected);
}

fn is_v4_mapped(address: IpAddr) -> bool {
    matches!(address, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

fn flipped(bytes: &[u8; 32]) -> [u8; 32] {
    let mut out = *bytes;
    for b in &mut out {
        *b = !*b;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §D4.4.
    const EXAMPLE: &str =
        "AgTAqDIMIPsQUW05dmRITjBjbUZ3U1dReAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fAAAAAGksDEA";

    fn example() -> BootstrapPayload {
        bootstrap::decode(EXAMPLE).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_worked_example_passes_every_check_as_text_and_bytes() {
        run(EXAMPLE.as_bytes());
        let bytes = URL_SAFE_NO_PAD.decode(EXAMPLE).unwrap_or_default();
        assert!(bootstrap::decode_bytes(&bytes).is_ok());
        run(&bytes);
    }

    #[test]
    #[should_panic(expected = "encode(decode(x)) != x")]
    fn a_lossy_round_trip_is_caught() {
        let mut other = URL_SAFE_NO_PAD.decode(EXAMPLE).unwrap_or_default();
        other[2] ^= 1;
        check_binary_round_trip(&example(), &other);
    }
}
