//! Property tests of the bootstrap codec and the link composer/parser (§D4, §D5).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use appduct_protocol::bootstrap::{self, BootstrapPayload};
use appduct_protocol::ids::ClaimToken;
use appduct_protocol::limits::MAX_SAFE_INTEGER;
use appduct_protocol::link;
use appduct_protocol::pin::SpkiPin;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use proptest::prelude::*;

/// Any address that encodes with its own family (IPv4-mapped IPv6 is the one exception, §D4.3).
fn address() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|b| IpAddr::V4(Ipv4Addr::from(b))),
        any::<[u8; 16]>()
            .prop_map(Ipv6Addr::from)
            .prop_filter("mapped addresses re-encode as IPv4", |a| a
                .to_ipv4_mapped()
                .is_none())
            .prop_map(IpAddr::V6),
    ]
}

/// Session ids of 1..=255 UTF-8 bytes, multi-byte characters included.
fn session_id() -> impl Strategy<Value = String> {
    "\\PC{1,100}".prop_filter("1..=255 bytes", |s| (1..=255).contains(&s.len()))
}

fn payload() -> impl Strategy<Value = BootstrapPayload> {
    (
        address(),
        1u16..,
        session_id(),
        any::<[u8; 32]>(),
        0..=MAX_SAFE_INTEGER,
    )
        .prop_map(|(address, port, session_id, token, expires_at)| {
            BootstrapPayload::new(
                address,
                port,
                session_id,
                ClaimToken::from_bytes(token),
                expires_at,
            )
        })
}

fn pin() -> impl Strategy<Value = SpkiPin> {
    any::<Vec<u8>>().prop_map(|der| SpkiPin::from_spki_der(&der))
}

proptest! {
    #[test]
    fn payload_round_trips(p in payload()) {
        let text = p.encode().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back = bootstrap::decode(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.decoded(), p.decoded());
        prop_assert_eq!(back.encode(), Ok(text));
    }

    #[test]
    fn ipv4_mapped_addresses_round_trip_as_ipv4(v4 in any::<[u8; 4]>(), p in payload()) {
        let v4 = Ipv4Addr::from(v4);
        let mut mapped = p;
        mapped.address = IpAddr::V6(v4.to_ipv6_mapped());
        let back = mapped.encode().ok().and_then(|t| bootstrap::decode(&t).ok());
        prop_assert_eq!(back.map(|b| b.address), Some(IpAddr::V4(v4)));
    }

    #[test]
    fn decode_never_panics_on_strings(s in "\\PC*") {
        let _ = bootstrap::decode(&s);
    }

    #[test]
    fn decode_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = URL_SAFE_NO_PAD.encode(&bytes);
        // Both paths agree on what decodes (the error may differ: overlong text fails early).
        let by_text = bootstrap::decode(&text).ok().map(|p| p.decoded());
        let by_bytes = bootstrap::decode_bytes(&bytes).ok().map(|p| p.decoded());
        prop_assert_eq!(by_text, by_bytes);
    }

    #[test]
    fn mutated_payloads_decode_whole_or_not_at_all(p in payload(), index in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<bool>()) {
        let mut bytes = p.encode_bytes().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let i = index.index(bytes.len());
        if cut {
            bytes.truncate(i);
        } else {
            bytes[i] = byte;
        }
        // Anything accepted is a complete payload: it re-encodes to exactly the input, except
        // a family-6 IPv4-mapped address, which re-encodes as family 4 (§D4.3).
        if let Ok(decoded) = bootstrap::decode_bytes(&bytes) {
            let mapped = matches!(decoded.address, IpAddr::V6(a) if a.to_ipv4_mapped().is_some());
            if !mapped {
                prop_assert_eq!(decoded.encode_bytes(), Ok(bytes));
            }
        }
    }

    #[test]
    fn deep_link_round_trips(p in payload(), scheme in "[A-Za-z][A-Za-z0-9+.-]{0,63}", pin in proptest::option::of(pin())) {
        prop_assume!(link::validate_scheme(&scheme).is_ok());
        let text = p.encode().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let url = link::compose_deep_link(&scheme, &text, pin.as_ref())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(link::handle_url(&url));
        let parsed = link::parse(&url).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&parsed.payload, &text);
        prop_assert_eq!(parsed.decoded.decoded(), p.decoded());
        prop_assert_eq!(parsed.pin, pin);
    }

    #[test]
    fn web_link_round_trips(p in payload(), path in "[a-z/]{0,20}", old_fragment in proptest::option::of("[a-z=&#?]{0,20}")) {
        let text = p.encode().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let page = match old_fragment {
            Some(f) => format!("http://localhost:5173/{path}#{f}"),
            None => format!("http://localhost:5173/{path}"),
        };
        let url = link::compose_web_link(&page, &text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let parsed = link::parse_connect_input(&url).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(parsed.payload, text);
        prop_assert_eq!(parsed.pin, None);
    }

    #[test]
    fn link_parse_never_panics(s in "\\PC*") {
        let _ = link::parse(&s);
        let _ = link::parse_web_link(&s);
        let _ = link::parse_connect_input(&s);
        let _ = link::handle_url(&s);
    }

    #[test]
    fn link_parse_never_panics_on_query_like_strings(s in "[a-z]{1,5}:///?[a-z%0-9A-F=&#+/_-]{0,200}") {
        let _ = link::parse(&s);
        let _ = link::parse_connect_input(&s);
        let _ = link::handle_url(&s);
    }
}
