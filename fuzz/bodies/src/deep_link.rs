//! Target `deep_link`: the link parser and composer of §D5 (`appduct_protocol::link`).
//!
//! Input: one link as pasted or opened (inputs that are not UTF-8 are skipped). Invariants:
//! - a link [`parse`] accepts carries a payload that decodes, is accepted by
//!   [`parse_connect_input`] with the same result, makes [`handle_url`] true, and survives a
//!   compose → parse round trip with the same payload and pin;
//! - the same for web links ([`parse_web_link`], [`compose_web_link`], [`web_script`]);
//! - [`handle_url`] is true exactly when the connect parse does not answer `missing_payload`
//!   (for input with a scheme), and a bare payload is accepted only when base64url-shaped;
//! - trimming is idempotent and does not change the verdict;
//! - any scheme [`validate_scheme`] accepts composes a link that parses back;
//! - `Debug` of a parsed link does not depend on the payload text (it holds the token).

use appduct_protocol::bootstrap;
use appduct_protocol::link::{
    self, AnyParsedLink, LinkError, MAX_SCHEME_LEN, ParsedLink, compose_deep_link,
    compose_web_link, handle_url, parse, parse_connect_input, parse_web_link, trim_link,
    validate_scheme, web_script,
};

/// A valid payload (§D4.4) for composing links around fuzzed schemes.
const PAYLOAD: &str =
    "AgTAqDIMIPsQUW05dmRITjBjbUZ3U1dReAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fAAAAAGksDEA";
/// Scheme used to re-compose a parsed link whose own scheme is not a valid app scheme.
const FALLBACK_SCHEME: &str = "fuzzapp";
/// Page used to re-compose a parsed web link.
const PAGE: &str = "https://app.example/cart?x=1";

pub fn run(data: &[u8]) {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };

    let trimmed = trim_link(input);
    assert_eq!(trim_link(trimmed), trimmed, "trim_link is not idempotent");

    let deep = parse(input);
    let web = parse_web_link(input);
    let connect = parse_connect_input(input);
    assert_eq!(
        summary(&parse(trimmed)),
        summary(&deep),
        "trimming changed the verdict"
    );

    if let Ok(parsed) = &deep {
        check_parsed(parsed);
        assert_eq!(summary(&connect), summary(&deep), "connect input disagrees");
        assert!(handle_url(input), "handle_url is false for a parsed link");
        let scheme = scheme_of(trimmed)
            .filter(|s| validate_scheme(s).is_ok())
            .unwrap_or(FALLBACK_SCHEME);
        let composed = compose_deep_link(scheme, &parsed.payload, parsed.pin.as_ref())
            .unwrap_or_else(|e| panic!("re-composing a parsed link failed: {e}"));
        assert_eq!(
            summary(&parse(&composed)),
            summary(&deep),
            "compose -> parse changed the link"
        );
    }

    if let Ok(parsed) = &web {
        check_parsed(parsed);
        assert_eq!(summary(&connect), summary(&web), "connect input disagrees");
        let composed = compose_web_link(PAGE, &parsed.payload)
            .unwrap_or_else(|e| panic!("re-composing a parsed web link failed: {e}"));
        let again = parse_web_link(&composed)
            .unwrap_or_else(|e| panic!("a composed web link does not parse: {e}"));
        assert_eq!(again.payload, parsed.payload);
        let script = web_script(&parsed.payload)
            .unwrap_or_else(|e| panic!("web_script refused a parsed payload: {e}"));
        assert!(script.contains(parsed.payload.as_str()));
    }

    match &connect {
        Ok(parsed) => {
            check_parsed(parsed);
            if scheme_of(trimmed).is_some() {
                assert!(handle_url(input), "handle_url is false for a parsed link");
            } else {
                assert_eq!(parsed.payload, trimmed, "a bare payload must be the input");
                assert!(parsed.pin.is_none(), "a bare payload has no pin");
            }
        }
        Err(LinkError::MissingPayload) => {
            assert!(!handle_url(input), "handle_url is true without a payload");
        }
        Err(_) => {}
    }
    if handle_url(input) {
        assert!(
            !matches!(connect, Err(LinkError::MissingPayload)),
            "handle_url is true but the parse found no payload"
        );
    }

    check_scheme(scheme_of(trimmed).unwrap_or(trimmed));
    check_any(input, &connect);
}

/// The sealed-aware parser (issue #23) agrees with `parse_connect_input` on every v2 answer, and
/// a sealed link it accepts composes back to itself.
fn check_any(input: &str, connect: &Result<ParsedLink, LinkError>) {
    match (link::parse_any_connect_input(input), connect) {
        (Ok(AnyParsedLink::V2(any)), Ok(v2)) => {
            assert_eq!(
                summary(&Ok(any)),
                summary(&Ok(v2.clone())),
                "v2 answers differ"
            );
        }
        (Ok(AnyParsedLink::Sealed(sealed)), Err(LinkError::InvalidPayload(_))) => {
            let again = bootstrap::decode_sealed(&sealed.payload)
                .unwrap_or_else(|e| panic!("a parsed sealed payload does not decode: {e}"));
            assert_eq!(again.static_key, sealed.decoded.static_key);
            let composed = link::compose_sealed_deep_link(FALLBACK_SCHEME, &sealed.payload)
                .unwrap_or_else(|e| panic!("a parsed sealed payload does not compose: {e}"));
            match link::parse_any_connect_input(&composed) {
                Ok(AnyParsedLink::Sealed(back)) => assert_eq!(back.payload, sealed.payload),
                other => panic!("a composed sealed link parses as {other:?}"),
            }
            let mut other = sealed.clone();
            other.payload = String::new();
            assert_eq!(
                format!("{sealed:?}"),
                format!("{other:?}"),
                "Debug of a sealed link shows the payload"
            );
        }
        (Err(a), Err(b)) if !matches!(b, LinkError::InvalidPayload(_)) => {
            assert_eq!(
                a.code(),
                b.code(),
                "the parsers disagree on a non-payload error"
            );
        }
        (Err(LinkError::InvalidPayload(_)), Err(LinkError::InvalidPayload(_))) => {}
        (any, v2) => panic!("parse_any_connect_input {any:?} vs parse_connect_input {v2:?}"),
    }
}

/// Invariants of every parsed link.
fn check_parsed(parsed: &ParsedLink) {
    let decoded = bootstrap::decode(&parsed.payload)
        .unwrap_or_else(|e| panic!("a parsed link's payload does not decode: {e}"));
    assert_eq!(decoded.decoded(), parsed.decoded.decoded());

    let mut other = parsed.clone();
    other.payload = String::new();
    assert_eq!(
        format!("{parsed:?}"),
        format!("{other:?}"),
        "Debug of a parsed link shows the payload"
    );
}

/// A scheme the validator accepts composes a link that parses back to the same payload.
fn check_scheme(candidate: &str) {
    if validate_scheme(candidate).is_err() {
        return;
    }
    assert!(candidate.len() <= MAX_SCHEME_LEN);
    assert!(candidate.starts_with(|c: char| c.is_ascii_alphabetic()));
    let composed = compose_deep_link(candidate, PAYLOAD, None)
        .unwrap_or_else(|e| panic!("a valid scheme does not compose: {e}"));
    assert!(composed.starts_with(&format!("{candidate}:///?{}=", link::PAYLOAD_PARAM)));
    let parsed = parse(&composed)
        .unwrap_or_else(|e| panic!("a composed link does not parse: {e} ({composed:?})"));
    assert_eq!(parsed.payload, PAYLOAD);
}

/// The leading RFC 3986 scheme of `s` (`[A-Za-z][A-Za-z0-9+.-]*` before a `:`), if any.
fn scheme_of(s: &str) -> Option<&str> {
    let (scheme, _) = s.split_once(':')?;
    let mut bytes = scheme.bytes();
    let valid = bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-'));
    valid.then_some(scheme)
}

/// What a parse result means, comparable: the error code, or the payload, its view and pin.
fn summary(
    result: &Result<ParsedLink, LinkError>,
) -> Result<(String, String, Option<String>), LinkError> {
    result.as_ref().map_err(Clone::clone).map(|p| {
        (
            p.payload.clone(),
            serde_json::to_string(&p.decoded.decoded()).unwrap_or_default(),
            p.pin.as_ref().map(|pin| pin.as_str().to_owned()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINK: &str = "shopdemo:///?appduct=AgTAqDIMIPsQUW05dmRITjBjbUZ3U1dReAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fAAAAAGksDEA&pin=sha256%2F%2BRAVLIC%2BEO4igKBMsBHOkTG5k0CK2xnPR%2FFJXDMbzbw%3D";

    #[test]
    fn the_example_link_passes_every_check() {
        run(LINK.as_bytes());
        assert!(parse(LINK).is_ok_and(|l| l.pin.is_some()));
    }

    #[test]
    #[should_panic]
    fn a_payload_that_does_not_match_its_view_is_caught() {
        let mut parsed = parse(LINK).unwrap_or_else(|e| panic!("{e}"));
        parsed.decoded.port += 1;
        check_parsed(&parsed);
    }

    #[test]
    fn scheme_of_reads_only_rfc_3986_schemes() {
        assert_eq!(scheme_of("my.app+x-1:///?a"), Some("my.app+x-1"));
        assert_eq!(scheme_of("1app:x"), None);
        assert_eq!(scheme_of("no-colon"), None);
    }
}
