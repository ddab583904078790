//! Deep links and web links (§D5): the one composer the CLI and the MCP bridge share, so their
//! links are byte-identical, and the parser the SDKs use.
//!
//! Links are handled as plain strings with a small, strict percent codec of their own: the
//! rules of §D5.3 (a `+` stays a `+`, duplicates are errors, reading stops at `&`) differ
//! from `application/x-www-form-urlencoded`, so a general URL crate would need overriding anyway.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Mac as _;

use crate::bootstrap::{self, AnyPayload, BootstrapPayload, DecodeError, SealedBootstrapPayload};
use crate::ids::ClaimToken;
use crate::pin::SpkiPin;

/// Query (or fragment) parameter carrying the bootstrap payload.
pub const PAYLOAD_PARAM: &str = "appduct";
/// Query parameter carrying the SPKI pin of a native link.
pub const PIN_PARAM: &str = "pin";
/// Longest deep-link scheme, in characters.
pub const MAX_SCHEME_LEN: usize = 64;
/// Schemes that would hand the link to a browser or a socket instead of the app (§L5.1).
const RESERVED_SCHEMES: [&str; 5] = ["http", "https", "file", "ws", "wss"];

/// Why a deep-link scheme was refused (§L5.1). Both messages start with the CLI's wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemeError {
    #[error(
        "Invalid deep-link scheme: it must match ^[A-Za-z][A-Za-z0-9+.-]{{0,63}}$ (give `myapp`, not `myapp://`)"
    )]
    Pattern,
    #[error("Invalid deep-link scheme: http, https, file, ws and wss are not app schemes")]
    Reserved,
}

/// Checks a deep-link scheme: `^[A-Za-z][A-Za-z0-9+.-]{0,63}$` and not `http`, `https`, `file`,
/// `ws` or `wss` in any case.
pub fn validate_scheme(scheme: &str) -> Result<(), SchemeError> {
    if !is_scheme_syntax(scheme) || scheme.len() > MAX_SCHEME_LEN {
        return Err(SchemeError::Pattern);
    }
    if RESERVED_SCHEMES
        .iter()
        .any(|r| r.eq_ignore_ascii_case(scheme))
    {
        return Err(SchemeError::Reserved);
    }
    Ok(())
}

/// The RFC 3986 scheme syntax, without a length bound.
fn is_scheme_syntax(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-'))
}

/// Why the composer refused its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ComposeError {
    #[error(transparent)]
    Scheme(#[from] SchemeError),
    #[error("the bootstrap payload is invalid: {0}")]
    Payload(#[from] DecodeError),
    #[error("the page URL must be an http or https URL with a host")]
    PageUrl,
}

/// Composes a deep link (§D5.1): `<scheme>:///?appduct=<payload>&pin=<pin>` for a native
/// link, `<scheme>:///?appduct=<payload>` (no pin) for a web-transport link.
///
/// `payload` is the base64url text (`deepLinkPayload`); it is checked to decode, which also
/// guarantees it needs no escaping.
pub fn compose_deep_link(
    scheme: &str,
    payload: &str,
    pin: Option<&SpkiPin>,
) -> Result<String, ComposeError> {
    validate_scheme(scheme)?;
    bootstrap::decode(payload)?;
    let mut link = format!("{scheme}:///?{PAYLOAD_PARAM}={payload}");
    if let Some(pin) = pin {
        link.push_str(&format!(
            "&{PIN_PARAM}={}",
            encode_uri_component(pin.as_str())
        ));
    }
    Ok(link)
}

/// Composes a sealed deep link (issue #23): `<scheme>:///?appduct=<payload>`, never a pin (the
/// daemon's static key is inside the payload). `payload` must decode as a sealed payload
/// (version `0x03`).
pub fn compose_sealed_deep_link(scheme: &str, payload: &str) -> Result<String, ComposeError> {
    validate_scheme(scheme)?;
    bootstrap::decode_sealed(payload)?;
    Ok(format!("{scheme}:///?{PAYLOAD_PARAM}={payload}"))
}

/// Composes a web link (§D5.2): the page URL without its fragment, then `#appduct=<payload>`.
pub fn compose_web_link(page_url: &str, payload: &str) -> Result<String, ComposeError> {
    if !is_http_url(page_url) {
        return Err(ComposeError::PageUrl);
    }
    bootstrap::decode(payload)?;
    let page = page_url.split_once('#').map_or(page_url, |(page, _)| page);
    Ok(format!("{page}#{PAYLOAD_PARAM}={payload}"))
}

/// The script that connects an already loaded page (§D5.2, §L6.3):
/// `window.__APPDUCT__.connect("<payload>")`. Base64url needs no escaping inside the quotes.
pub fn web_script(payload: &str) -> Result<String, ComposeError> {
    bootstrap::decode(payload)?;
    Ok(format!("window.__APPDUCT__.connect(\"{payload}\")"))
}

/// `http://` or `https://` (any case) followed by a non-empty authority, with no whitespace or
/// control characters anywhere: the page URL of a web link. The one home of this rule; the CLI
/// and the MCP bridge check their `url` argument with it before minting.
pub fn is_http_url(url: &str) -> bool {
    if !is_url_shaped(url) {
        return false;
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        && !authority.is_empty()
}

/// A parse failure, with the wire codes of §D5.3 (also the SDKs' connect error codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("invalid_url: not a link (bad percent escape, repeated parameter, or not a URL)")]
    InvalidUrl,
    #[error("missing_payload: the link has no appduct parameter")]
    MissingPayload,
    #[error("invalid_payload: {0}")]
    InvalidPayload(DecodeError),
}

impl LinkError {
    /// The wire code: `invalid_url`, `missing_payload` or `invalid_payload`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidUrl => "invalid_url",
            Self::MissingPayload => "missing_payload",
            Self::InvalidPayload(_) => "invalid_payload",
        }
    }
}

impl serde::Serialize for LinkError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code())
    }
}

/// A parsed link. Expiry is not checked (§D5.3); callers use `decoded.is_expired(now)`.
#[derive(Clone)]
#[non_exhaustive]
pub struct ParsedLink {
    /// The raw `appduct` value, after percent-decoding: the base64url payload.
    pub payload: String,
    pub decoded: BootstrapPayload,
    /// The decoded `pin` value when it matches `^sha256/[A-Za-z0-9+/]{43}=$`; anything else is
    /// treated as absent (§D5.3).
    pub pin: Option<SpkiPin>,
}

impl std::fmt::Debug for ParsedLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The payload text contains the claim token.
        f.debug_struct("ParsedLink")
            .field("payload", &"<redacted>")
            .field("decoded", &self.decoded)
            .field("pin", &self.pin)
            .finish()
    }
}

/// Parses a deep link (§D5.3): the `appduct` and `pin` parameters of its query.
///
/// Project decisions shared with the TypeScript SDK's parser: ASCII whitespace around the link
/// is trimmed first ([`trim_link`]); a query or fragment with a bad percent escape or a repeated
/// `appduct` or `pin` is `invalid_url` wherever the payload is; and a link whose query and
/// fragment both carry `appduct` is ambiguous, so `invalid_url`.
pub fn parse(url: &str) -> Result<ParsedLink, LinkError> {
    let link = LinkParams::read(url)?;
    finish(link.query)
}

/// Parses a web link (§D5.2): the `appduct` parameter of the URL's fragment
/// (`…#appduct=<payload>`, possibly among other fragment parameters). Same rules as [`parse`].
pub fn parse_web_link(url: &str) -> Result<ParsedLink, LinkError> {
    let link = LinkParams::read(url)?;
    finish(link.fragment)
}

/// Parses what an SDK's `connect` accepts (§T2): a bare base64url payload, a deep link, or
/// a page URL carrying `#appduct=`, under the rules of [`parse`]. The TypeScript SDK's
/// `parseLink` gives the same answer for every input.
///
/// Text without a scheme is a bare payload when it is base64url-shaped (else `invalid_url`, it
/// is neither a URL nor a payload); a URL takes the payload from whichever of its query and
/// fragment carries one.
pub fn parse_connect_input(input: &str) -> Result<ParsedLink, LinkError> {
    let input = trim_link(input);
    // Base64url has no ':', so text without a scheme can only be meant as a bare payload.
    if scheme_end(input).is_none() {
        if input.is_empty() || !input.bytes().all(is_base64url_byte) {
            return Err(LinkError::InvalidUrl);
        }
        let decoded = bootstrap::decode(input).map_err(LinkError::InvalidPayload)?;
        return Ok(ParsedLink {
            payload: input.to_owned(),
            decoded,
            pin: None,
        });
    }
    let link = LinkParams::read(input)?;
    if link.fragment.payload.is_some() {
        finish(link.fragment)
    } else {
        finish(link.query)
    }
}

/// A parsed link of either payload version. Expiry is not checked.
#[derive(Debug, Clone)]
pub enum AnyParsedLink {
    /// A v2 payload: exactly what [`parse_connect_input`] returns.
    V2(ParsedLink),
    /// A sealed payload (version `0x03`).
    Sealed(ParsedSealedLink),
}

/// A parsed sealed link. A `pin` parameter, if any, is ignored: the static key in the payload
/// authenticates the daemon.
#[derive(Clone)]
#[non_exhaustive]
pub struct ParsedSealedLink {
    /// The raw `appduct` value, after percent-decoding: the base64url payload.
    pub payload: String,
    pub decoded: SealedBootstrapPayload,
}

impl std::fmt::Debug for ParsedSealedLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The payload text contains the claim token.
        f.debug_struct("ParsedSealedLink")
            .field("payload", &"<redacted>")
            .field("decoded", &self.decoded)
            .finish()
    }
}

/// [`parse_connect_input`] for SDKs that speak the sealed transport: the same input forms and
/// the same rules, but the payload may be v2 or sealed (the version byte decides, through
/// [`bootstrap::decode_any`]). For every input whose payload is v2, the answer is
/// [`parse_connect_input`]'s.
pub fn parse_any_connect_input(input: &str) -> Result<AnyParsedLink, LinkError> {
    let input = trim_link(input);
    if scheme_end(input).is_none() {
        if input.is_empty() || !input.bytes().all(is_base64url_byte) {
            return Err(LinkError::InvalidUrl);
        }
        return finish_any(input.to_owned(), None);
    }
    let link = LinkParams::read(input)?;
    let params = if link.fragment.payload.is_some() {
        link.fragment
    } else {
        link.query
    };
    let payload = params.payload.ok_or(LinkError::MissingPayload)?;
    finish_any(payload, params.pin)
}

fn finish_any(payload: String, pin: Option<String>) -> Result<AnyParsedLink, LinkError> {
    match bootstrap::decode_any(&payload).map_err(LinkError::InvalidPayload)? {
        AnyPayload::V2(decoded) => Ok(AnyParsedLink::V2(ParsedLink {
            payload,
            decoded,
            pin: pin.and_then(|p| SpkiPin::parse(&p).ok()),
        })),
        AnyPayload::Sealed(decoded) => {
            Ok(AnyParsedLink::Sealed(ParsedSealedLink { payload, decoded }))
        }
    }
}

/// True iff `url` is a URL whose query or fragment carries an `appduct` parameter (§D5.3),
/// i.e. [`parse_connect_input`] will not answer `missing_payload`. Other defects of the link
/// are left for the parse to report. Surrounding ASCII whitespace is trimmed, as in [`parse`].
pub fn handle_url(url: &str) -> bool {
    let Ok(parts) = UrlParts::split(trim_link(url)) else {
        return false;
    };
    [parts.query, parts.fragment]
        .into_iter()
        .flatten()
        .flat_map(|component| component.split('&'))
        .any(|pair| {
            let name = pair.split_once('=').map_or(pair, |(name, _)| name);
            crate::text::percent_decode(name).as_deref() == Some(PAYLOAD_PARAM)
        })
}

/// `input` without the ASCII whitespace (tab, line feed, form feed, carriage return, space)
/// around it: links pasted from terminals and chat often carry a trailing newline. Whitespace
/// inside a link still makes it `invalid_url`.
pub fn trim_link(input: &str) -> &str {
    input.trim_matches(|c: char| c.is_ascii_whitespace())
}

fn is_base64url_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// The parameters of both components of a link, read under the same rules.
struct LinkParams {
    query: Params,
    fragment: Params,
}

impl LinkParams {
    fn read(url: &str) -> Result<Self, LinkError> {
        let parts = UrlParts::split(trim_link(url))?;
        let query = read_params(parts.query.unwrap_or_default())?;
        let fragment = read_params(parts.fragment.unwrap_or_default())?;
        if query.payload.is_some() && fragment.payload.is_some() {
            return Err(LinkError::InvalidUrl);
        }
        Ok(Self { query, fragment })
    }
}

/// The query and fragment of a URL-shaped string.
struct UrlParts<'a> {
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> UrlParts<'a> {
    /// Query: after the first `?` up to the first `#`. Fragment: after the first `#`. A `?`
    /// inside the fragment starts no query.
    fn split(url: &'a str) -> Result<Self, LinkError> {
        if !is_url_shaped(url) {
            return Err(LinkError::InvalidUrl);
        }
        let (before_fragment, fragment) = match url.split_once('#') {
            Some((head, fragment)) => (head, Some(fragment)),
            None => (url, None),
        };
        let query = before_fragment.split_once('?').map(|(_, q)| q);
        Ok(Self { query, fragment })
    }
}

/// Byte index of the `:` ending a leading RFC 3986 scheme, if there is one.
fn scheme_end(s: &str) -> Option<usize> {
    let colon = s.find(':')?;
    is_scheme_syntax(&s[..colon]).then_some(colon)
}

/// A scheme followed by `:`, and no whitespace or control characters (which no link contains
/// and which would survive into delivery commands).
fn is_url_shaped(s: &str) -> bool {
    scheme_end(s).is_some() && !s.chars().any(|c| c.is_control() || c.is_whitespace())
}

/// The parameters of §D5.3 found in one query or fragment component, percent-decoded.
struct Params {
    payload: Option<String>,
    pin: Option<String>,
}

/// Splits on `&`, then each pair at its first `=`, and percent-decodes both halves. An empty
/// pair is skipped; a pair without `=` has an empty value. A bad escape anywhere, or a second
/// `appduct` or `pin`, is `invalid_url`.
fn read_params(component: &str) -> Result<Params, LinkError> {
    let mut params = Params {
        payload: None,
        pin: None,
    };
    for pair in component.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = crate::text::percent_decode(name).ok_or(LinkError::InvalidUrl)?;
        let value = crate::text::percent_decode(value).ok_or(LinkError::InvalidUrl)?;
        let slot = match name.as_str() {
            PAYLOAD_PARAM => &mut params.payload,
            PIN_PARAM => &mut params.pin,
            _ => continue,
        };
        if slot.replace(value).is_some() {
            return Err(LinkError::InvalidUrl);
        }
    }
    Ok(params)
}

fn finish(params: Params) -> Result<ParsedLink, LinkError> {
    let payload = params.payload.ok_or(LinkError::MissingPayload)?;
    let decoded = bootstrap::decode(&payload).map_err(LinkError::InvalidPayload)?;
    let pin = params.pin.and_then(|p| SpkiPin::parse(&p).ok());
    Ok(ParsedLink {
        payload,
        decoded,
        pin,
    })
}

/// `encodeURIComponent`: every UTF-8 byte outside `A-Za-z0-9-_.!~*'()` becomes `%XX`
/// (upper-case hex).
fn encode_uri_component(s: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
    out
}

/// Strict percent-decoding: `%` must be followed by two hex digits, the result must be UTF-8,
/// and `+` is left alone.
/// Why an app refused a link (`link_refused`, PROTOCOL.md "Refusals").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    /// A link of a kind this SDK cannot use (a native link given to a JS-only app, …).
    UnsupportedLink,
    /// The link's `expires_at` has passed on the app's clock.
    LinkExpired,
    /// The sealed handshake failed (a link minted for another static key).
    HandshakeFailed,
    /// The wss certificate did not match the link's pin.
    PinMismatch,
}

impl RefusalReason {
    pub const ALL: [RefusalReason; 4] = [
        Self::UnsupportedLink,
        Self::LinkExpired,
        Self::HandshakeFailed,
        Self::PinMismatch,
    ];

    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::UnsupportedLink => "unsupported_link",
            Self::LinkExpired => "link_expired",
            Self::HandshakeFailed => "handshake_failed",
            Self::PinMismatch => "pin_mismatch",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The message a refusal proof authenticates: `appduct link_refused v1\n<session_id>\n<reason>`.
fn refusal_message(session_id: &str, reason: RefusalReason) -> String {
    format!("appduct link_refused v1\n{session_id}\n{}", reason.as_str())
}

fn refusal_mac(
    token: &ClaimToken,
    session_id: &str,
    reason: RefusalReason,
) -> hmac::Hmac<sha2::Sha256> {
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes()) else {
        unreachable!("HMAC takes keys of any length");
    };
    mac.update(refusal_message(session_id, reason).as_bytes());
    mac
}

/// The `proof` of a `link_refused` frame: unpadded base64url of HMAC-SHA256(key = the 32 claim
/// token bytes, message = `appduct link_refused v1\n<session_id>\n<reason>`). The app proves it
/// holds the link without sending the token.
pub fn refusal_proof(token: &ClaimToken, session_id: &str, reason: RefusalReason) -> String {
    URL_SAFE_NO_PAD.encode(
        refusal_mac(token, session_id, reason)
            .finalize()
            .into_bytes(),
    )
}

/// Checks a presented proof in constant time. Anything but the canonical 43-character text of
/// the right MAC is `false`.
pub fn verify_refusal_proof(
    token: &ClaimToken,
    session_id: &str,
    reason: RefusalReason,
    proof: &str,
) -> bool {
    if proof.len() != 43 {
        return false;
    }
    let Ok(presented) = URL_SAFE_NO_PAD.decode(proof) else {
        return false;
    };
    refusal_mac(token, session_id, reason)
        .verify_slice(&presented)
        .is_ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const PAYLOAD: &str =
        "AgTAqDIMIPsQUW05dmRITjBjbUZ3U1dReAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fAAAAAGksDEA";
    const WEB_PAYLOAD: &str =
        "AgR_AAAByCIQUW05dmRITjBjbUZ3U1dReAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fAAAAAGksDEA";
    const PIN: &str = "sha256/+RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw=";
    const EXAMPLE_LINK: &str = "shopdemo:///?appduct=AgTAqDIMIPsQUW05dmRITjBjbUZ3U1dReAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fAAAAAGksDEA&pin=sha256%2F%2BRAVLIC%2BEO4igKBMsBHOkTG5k0CK2xnPR%2FFJXDMbzbw%3D";

    fn pin() -> SpkiPin {
        SpkiPin::parse(PIN).unwrap()
    }

    fn pin_text() -> Option<SpkiPin> {
        Some(pin())
    }

    #[test]
    fn schemes() {
        for good in [
            "myapp",
            "shopdemo",
            "a",
            "com.example.app",
            "x+y-z.1",
            &"a".repeat(64),
        ] {
            assert_eq!(validate_scheme(good), Ok(()), "{good:?}");
        }
        for bad in [
            "",
            "myapp://",
            "myapp:",
            "1app",
            "-app",
            "my app",
            "my_app",
            "é",
            &"a".repeat(65),
        ] {
            assert_eq!(validate_scheme(bad), Err(SchemeError::Pattern), "{bad:?}");
        }
        for reserved in ["http", "HTTPS", "File", "ws", "wSs"] {
            assert_eq!(validate_scheme(reserved), Err(SchemeError::Reserved));
        }
        assert!(
            SchemeError::Pattern
                .to_string()
                .starts_with("Invalid deep-link scheme")
        );
    }

    #[test]
    fn native_deep_link_matches_the_spec_example() {
        let link = compose_deep_link("shopdemo", PAYLOAD, Some(&pin())).unwrap();
        assert_eq!(link, EXAMPLE_LINK);
    }

    #[test]
    fn web_transport_deep_link_has_no_pin() {
        let link = compose_deep_link("shopdemo", WEB_PAYLOAD, None).unwrap();
        assert_eq!(link, format!("shopdemo:///?appduct={WEB_PAYLOAD}"));
    }

    #[test]
    fn deep_link_composer_refusals() {
        assert_eq!(
            compose_deep_link("myapp://", PAYLOAD, None),
            Err(ComposeError::Scheme(SchemeError::Pattern))
        );
        assert_eq!(
            compose_deep_link("https", PAYLOAD, None),
            Err(ComposeError::Scheme(SchemeError::Reserved))
        );
        assert_eq!(
            compose_deep_link("myapp", &format!("{PAYLOAD}&x=1"), None),
            Err(ComposeError::Payload(DecodeError::NotBase64url))
        );
        assert_eq!(
            compose_deep_link("myapp", "", None),
            Err(ComposeError::Payload(DecodeError::Empty))
        );
    }

    #[test]
    fn web_link_matches_the_spec_example() {
        let link = compose_web_link("http://localhost:5173/cart", WEB_PAYLOAD).unwrap();
        assert_eq!(
            link,
            "http://localhost:5173/cart#appduct=AgR_AAAByCIQUW05dmRITjBjbUZ3U1dReAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fAAAAAGksDEA"
        );
    }

    #[test]
    fn web_link_drops_an_existing_fragment() {
        let link = compose_web_link("HTTPS://example.test/a?b=1#old=2&x", WEB_PAYLOAD).unwrap();
        assert_eq!(
            link,
            format!("HTTPS://example.test/a?b=1#appduct={WEB_PAYLOAD}")
        );
    }

    #[test]
    fn web_link_refuses_non_http_pages() {
        for bad in [
            "",
            "localhost:5173/cart",
            "file:///tmp/index.html",
            "ws://localhost:1/",
            "javascript:alert(1)",
            "http://",
            "http:///path",
            "http://exa mple.test/",
            "http://example.test/\n",
            "httpx://example.test/",
        ] {
            assert_eq!(
                compose_web_link(bad, WEB_PAYLOAD),
                Err(ComposeError::PageUrl),
                "{bad:?}"
            );
        }
        assert_eq!(
            compose_web_link("http://localhost/", "AgQ"),
            Err(ComposeError::Payload(DecodeError::Length))
        );
    }

    #[test]
    fn web_script_form() {
        assert_eq!(
            web_script(WEB_PAYLOAD).unwrap(),
            format!("window.__APPDUCT__.connect(\"{WEB_PAYLOAD}\")")
        );
        assert!(web_script("\");alert(1);(\"").is_err());
    }

    #[test]
    fn parses_the_spec_example() {
        let parsed = parse(EXAMPLE_LINK).unwrap();
        assert_eq!(parsed.payload, PAYLOAD);
        assert_eq!(parsed.pin, Some(pin()));
        assert_eq!(parsed.decoded.port, 8443);
        assert_eq!(parsed.decoded.session_id, "Qm9vdHN0cmFwSWQx");
    }

    #[test]
    fn parse_ignores_order_and_unrelated_parameters() {
        let url = format!("myapp://host/path?x&utm=a%20b&pin={PIN}&&appduct={PAYLOAD}#frag");
        let parsed = parse(&url).unwrap();
        assert_eq!(parsed.payload, PAYLOAD);
        // A raw '+' is kept, never turned into a space, so this pin survives unescaped.
        assert_eq!(parsed.pin, pin_text());
    }

    #[test]
    fn percent_encoded_parameter_names_are_decoded() {
        let url = format!("myapp:///?%61ppduct={PAYLOAD}");
        assert_eq!(parse(&url).unwrap().payload, PAYLOAD);
    }

    #[test]
    fn malformed_or_missing_pin_is_absent() {
        for pin in [
            "",
            "not-a-real-pin",
            "sha256%2F",
            "sha256/-RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw=",
            "sha256/+RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw",
            "sha256/+RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw==",
            "SHA256/+RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw=",
        ] {
            let url = format!("myapp:///?appduct={PAYLOAD}&pin={pin}");
            let parsed = parse(&url);
            assert!(
                parsed.as_ref().is_ok_and(|p| p.pin.is_none()),
                "{pin:?}: {parsed:?}"
            );
        }
        // '+' turned into a space would break this pin; a '%20' is a real space and does.
        let url = format!(
            "myapp:///?appduct={PAYLOAD}&pin={}",
            PIN.replace('+', "%20")
        );
        assert_eq!(parse(&url).unwrap().pin, None);
    }

    #[test]
    fn pin_shape_is_checked_by_pattern_only() {
        // The last 'B' has non-zero unused bits: kept, as the pattern and the vectors require.
        let odd = format!("sha256/{}=", "B".repeat(43));
        let parsed = parse(&format!("myapp:///?appduct={PAYLOAD}&pin={odd}")).unwrap();
        assert_eq!(parsed.pin.as_ref().map(SpkiPin::as_str), Some(odd.as_str()));
    }

    #[test]
    fn parse_errors() {
        let cases = [
            ("", LinkError::InvalidUrl),
            ("not a url", LinkError::InvalidUrl),
            (PAYLOAD, LinkError::InvalidUrl),
            ("://?appduct=x", LinkError::InvalidUrl),
            ("myapp:///?appduct=%zz", LinkError::InvalidUrl),
            ("myapp:///?appduct=%4", LinkError::InvalidUrl),
            ("myapp:///?appduct=%ff", LinkError::InvalidUrl),
            ("myapp:///?x=%", LinkError::InvalidUrl),
            ("myapp:///", LinkError::MissingPayload),
            ("myapp:///?pin=x", LinkError::MissingPayload),
            ("myapp:///?appductx=1", LinkError::MissingPayload),
            ("myapp:///#appduct=x", LinkError::MissingPayload),
            ("myapp:///#x?appduct=x", LinkError::MissingPayload),
            (
                "myapp:///?appduct",
                LinkError::InvalidPayload(DecodeError::Empty),
            ),
            (
                "myapp:///?appduct=AgQ",
                LinkError::InvalidPayload(DecodeError::Length),
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(parse(url).map(|p| p.payload), Err(expected), "{url:?}");
        }
        let dup = format!("myapp:///?appduct={PAYLOAD}&appduct={PAYLOAD}");
        assert_eq!(parse(&dup).map(|p| p.payload), Err(LinkError::InvalidUrl));
        let dup_pin = format!("myapp:///?appduct={PAYLOAD}&pin={PIN}&pin={PIN}");
        assert_eq!(
            parse(&dup_pin).map(|p| p.payload),
            Err(LinkError::InvalidUrl)
        );
        // A '+' inside the payload is not base64url and must not become a space either.
        let plus = format!("myapp:///?appduct={}", PAYLOAD.replacen('A', "+", 1));
        assert_eq!(
            parse(&plus).map(|p| p.payload),
            Err(LinkError::InvalidPayload(DecodeError::NotBase64url))
        );
    }

    #[test]
    fn parse_does_not_check_expiry() {
        // Expires at 1 (1970).
        let old = "AgQKAAABAAEBYQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAAAAAAAAAAE";
        let parsed = parse(&format!("myapp:///?appduct={old}")).unwrap();
        assert!(parsed.decoded.is_expired(1));
    }

    #[test]
    fn error_codes_are_the_wire_strings() {
        assert_eq!(LinkError::InvalidUrl.code(), "invalid_url");
        assert_eq!(LinkError::MissingPayload.code(), "missing_payload");
        assert_eq!(
            LinkError::InvalidPayload(DecodeError::Empty).code(),
            "invalid_payload"
        );
        assert_eq!(
            serde_json::to_string(&LinkError::MissingPayload).unwrap(),
            "\"missing_payload\""
        );
    }

    #[test]
    fn web_link_fragment_parses() {
        let link = compose_web_link("http://localhost:5173/cart?x=1", WEB_PAYLOAD).unwrap();
        let parsed = parse_web_link(&link).unwrap();
        assert_eq!(parsed.payload, WEB_PAYLOAD);
        assert_eq!(parsed.decoded.address.to_string(), "127.0.0.1");
        assert_eq!(parsed.pin, None);
        // Among other fragment parameters.
        let other = format!("http://localhost/#tab=2&appduct={WEB_PAYLOAD}&z");
        assert_eq!(parse_web_link(&other).unwrap().payload, WEB_PAYLOAD);
        assert_eq!(
            parse_web_link("http://localhost/?appduct=x").map(|p| p.payload),
            Err(LinkError::MissingPayload)
        );
        assert_eq!(
            parse_web_link("http://localhost/#appduct=a&appduct=b").map(|p| p.payload),
            Err(LinkError::InvalidUrl)
        );
    }

    #[test]
    fn connect_input_accepts_all_three_forms() {
        let deep = parse_connect_input(EXAMPLE_LINK).unwrap();
        assert_eq!((deep.payload.as_str(), deep.pin), (PAYLOAD, pin_text()));
        let web = format!("http://localhost:5173/#appduct={WEB_PAYLOAD}");
        assert_eq!(parse_connect_input(&web).unwrap().payload, WEB_PAYLOAD);
        assert_eq!(parse_connect_input(PAYLOAD).unwrap().payload, PAYLOAD);
        assert_eq!(
            parse_connect_input("http://localhost/").map(|p| p.payload),
            Err(LinkError::MissingPayload)
        );
    }

    #[test]
    fn connect_input_without_a_scheme_is_a_bare_payload_or_not_a_link() {
        // Base64url-shaped text is a payload, good or bad.
        assert!(matches!(
            parse_connect_input("AAAA").map(|p| p.payload),
            Err(LinkError::InvalidPayload(_))
        ));
        // Anything else is neither a URL nor a payload.
        for input in ["not a payload", "", "   ", "AgT+AA", "a/b", "%41"] {
            assert_eq!(
                parse_connect_input(input).map(|p| p.payload),
                Err(LinkError::InvalidUrl),
                "{input:?}"
            );
        }
    }

    #[test]
    fn a_payload_in_both_query_and_fragment_is_ambiguous() {
        let both = format!("myapp:///?appduct={PAYLOAD}#appduct={WEB_PAYLOAD}");
        assert_eq!(
            parse_connect_input(&both).map(|p| p.payload),
            Err(LinkError::InvalidUrl)
        );
        assert_eq!(parse(&both).map(|p| p.payload), Err(LinkError::InvalidUrl));
        assert_eq!(
            parse_web_link(&both).map(|p| p.payload),
            Err(LinkError::InvalidUrl)
        );
        // Even when one of them is not a valid payload.
        let both = format!("http://localhost/?appduct=x#appduct={WEB_PAYLOAD}");
        assert_eq!(
            parse_connect_input(&both).map(|p| p.payload),
            Err(LinkError::InvalidUrl)
        );
        // A payload in one and other parameters in the other is fine.
        let page = format!("http://localhost/?tab=2&pin=x#appduct={WEB_PAYLOAD}");
        let parsed = parse_connect_input(&page).unwrap();
        assert_eq!((parsed.payload.as_str(), parsed.pin), (WEB_PAYLOAD, None));
    }

    #[test]
    fn both_components_follow_the_same_rules_wherever_the_payload_is() {
        for url in [
            format!("myapp:///?appduct={PAYLOAD}#x=%zz"),
            format!("myapp:///?appduct={PAYLOAD}#pin=a&pin=b"),
            format!("http://localhost/?x=%zz#appduct={WEB_PAYLOAD}"),
            format!("http://localhost/?pin=a&pin=b#appduct={WEB_PAYLOAD}"),
        ] {
            assert_eq!(
                parse_connect_input(&url).map(|p| p.payload),
                Err(LinkError::InvalidUrl),
                "{url}"
            );
        }
        // The pin comes from the component that carries the payload.
        let url = format!("myapp:///?appduct={PAYLOAD}#pin={PIN}");
        assert_eq!(parse_connect_input(&url).unwrap().pin, None);
    }

    #[test]
    fn surrounding_ascii_whitespace_is_trimmed() {
        let padded = format!(" \t{EXAMPLE_LINK}\r\n\x0c ");
        assert_eq!(parse(&padded).unwrap().payload, PAYLOAD);
        assert_eq!(parse_connect_input(&padded).unwrap().pin, pin_text());
        assert!(handle_url(&padded));
        let web = format!("\nhttp://localhost:5173/#appduct={WEB_PAYLOAD}\n");
        assert_eq!(parse_web_link(&web).unwrap().payload, WEB_PAYLOAD);
        assert_eq!(parse_connect_input(&web).unwrap().payload, WEB_PAYLOAD);
        let bare = format!("  {PAYLOAD}\n");
        assert_eq!(parse_connect_input(&bare).unwrap().payload, PAYLOAD);
        assert_eq!(trim_link("\t a b \n"), "a b");
    }

    #[test]
    fn other_whitespace_still_makes_a_link_invalid() {
        // Inside the link.
        let inner = format!("myapp:///?appduct={PAYLOAD}&x=a b");
        assert_eq!(parse(&inner).map(|p| p.payload), Err(LinkError::InvalidUrl));
        assert_eq!(
            parse_connect_input(&inner).map(|p| p.payload),
            Err(LinkError::InvalidUrl)
        );
        // Non-ASCII whitespace and vertical tab around it are not trimmed.
        for padded in [
            format!("\u{a0}{EXAMPLE_LINK}"),
            format!("{EXAMPLE_LINK}\u{2028}"),
            format!("{EXAMPLE_LINK}\u{b}"),
            format!("\u{feff}{PAYLOAD}"),
        ] {
            assert_eq!(
                parse_connect_input(&padded).map(|p| p.payload),
                Err(LinkError::InvalidUrl),
                "{padded:?}"
            );
            assert!(!handle_url(&padded), "{padded:?}");
        }
    }

    #[test]
    fn handle_url_detects_the_payload_parameter() {
        assert!(handle_url(EXAMPLE_LINK));
        assert!(handle_url("myapp:///?appduct=garbage"));
        assert!(handle_url("myapp:///?appduct"));
        assert!(handle_url("http://localhost/#appduct=x"));
        assert!(handle_url("myapp:///?%61ppduct=x&bad=%zz"));
        assert!(!handle_url("myapp:///?pin=x"));
        assert!(!handle_url("myapp:///?appductx=1"));
        assert!(!handle_url(PAYLOAD));
        assert!(!handle_url(""));
        assert!(!handle_url("myapp:///?appduct=x y"));
    }

    #[test]
    fn parsed_link_debug_hides_the_payload() {
        let text = format!("{:?}", parse(EXAMPLE_LINK).unwrap());
        assert!(!text.contains("AgTAqDIM"), "{text}");
    }

    #[test]
    fn percent_codec() {
        assert_eq!(
            encode_uri_component("sha256/+a=b c-_.!~*'()é"),
            "sha256%2F%2Ba%3Db%20c-_.!~*'()%C3%A9"
        );
        assert_eq!(
            crate::text::percent_decode("a%2Fb%2fc+d").as_deref(),
            Some("a/b/c+d")
        );
        assert_eq!(crate::text::percent_decode("%C3%A9").as_deref(), Some("é"));
        for bad in ["%", "%2", "%g0", "%C3", "%%20"] {
            assert_eq!(crate::text::percent_decode(bad), None, "{bad:?}");
        }
    }

    /// Independent vectors (Python's `hmac`): token bytes 0..=31, session id
    /// `AAECAwQFBgcICQoL`. The TypeScript SDK checks the same strings.
    #[test]
    fn refusal_proofs_match_independent_hmac_vectors() {
        let token = ClaimToken::from_bytes(std::array::from_fn(|i| i as u8));
        let mut wrong = *token.as_bytes();
        wrong[0] ^= 1;
        let wrong = ClaimToken::from_bytes(wrong);
        let expected = [
            (
                RefusalReason::UnsupportedLink,
                "GvLn3Yn_TEoAXwElEcb5enelqhMdUbuR2KnaLd8KuWk",
            ),
            (
                RefusalReason::LinkExpired,
                "gEJtBXvTIiFGAEFcnZBzvxIKY-iTASrqyPQO5Hbpkc0",
            ),
            (
                RefusalReason::HandshakeFailed,
                "tFpZyHAQhmZovMZQij_mPVzRYC7zCRVzNs0dKxvafJM",
            ),
            (
                RefusalReason::PinMismatch,
                "kJzTV3QJqI1Ac4E65KBYwVfIPQt9TZ7_b-BzeFTSst8",
            ),
        ];
        for (reason, b64) in expected {
            let proof = refusal_proof(&token, "AAECAwQFBgcICQoL", reason);
            assert_eq!(proof, b64, "{reason}");
            assert!(verify_refusal_proof(
                &token,
                "AAECAwQFBgcICQoL",
                reason,
                &proof
            ));
            // Another reason, session or token does not verify.
            for other in RefusalReason::ALL.into_iter().filter(|r| *r != reason) {
                assert!(!verify_refusal_proof(
                    &token,
                    "AAECAwQFBgcICQoL",
                    other,
                    &proof
                ));
            }
            assert!(!verify_refusal_proof(
                &token,
                "AAECAwQFBgcICQoM",
                reason,
                &proof
            ));
            assert!(!verify_refusal_proof(
                &wrong,
                "AAECAwQFBgcICQoL",
                reason,
                &proof
            ));
            assert_eq!(RefusalReason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(RefusalReason::parse("Unsupported_link"), None);
        assert_eq!(RefusalReason::parse(""), None);
    }
}
