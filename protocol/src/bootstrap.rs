//! The bootstrap payload v2 (§D4): what a link carries so an app can find the daemon and claim
//! its session. Binary layout, strict unpadded base64url text form, all-or-nothing decoding.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::ids::ClaimToken;
use crate::limits::{MAX_SAFE_INTEGER, TOKEN_BYTES};

/// First byte of every v2 payload.
pub const VERSION: u8 = 0x02;
/// Family byte of an IPv4 payload.
pub const FAMILY_V4: u8 = 4;
/// Family byte of an IPv6 payload.
pub const FAMILY_V6: u8 = 6;
/// Longest session id a payload can carry, in UTF-8 bytes.
pub const MAX_SESSION_ID_BYTES: usize = 255;
/// Bytes of an IPv4 payload besides the session id (`49 + n`).
const FIXED_V4: usize = 49;
/// Bytes of an IPv6 payload besides the session id (`61 + n`).
const FIXED_V6: usize = 61;
/// Longest payload, in bytes and in base64url characters.
pub const MAX_PAYLOAD_BYTES: usize = FIXED_V6 + MAX_SESSION_ID_BYTES;
pub const MAX_PAYLOAD_TEXT_LEN: usize = (MAX_PAYLOAD_BYTES * 4).div_ceil(3);

/// A decoded bootstrap payload. Debug output never shows the token (it is a [`ClaimToken`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BootstrapPayload {
    /// Where the app connects. An IPv4-mapped IPv6 address encodes as IPv4 (§D4.3).
    pub address: IpAddr,
    /// 1..=65535.
    pub port: u16,
    /// 1..=255 UTF-8 bytes.
    pub session_id: String,
    pub token: ClaimToken,
    /// Unix seconds, at most 2^53 − 1.
    pub expires_at: u64,
}

/// Why the encoder refused a payload (§D4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    #[error("the port must be 1..=65535, not 0")]
    PortZero,
    #[error("the session id must not be empty")]
    EmptySessionId,
    #[error("the session id is {0} bytes; at most 255 UTF-8 bytes fit")]
    SessionIdTooLong(usize),
    #[error("expires_at {0} is above 2^53 - 1")]
    ExpiresAtTooLarge(u64),
}

/// Why a payload was rejected (§D4.2, §D4.3). Decoding is all-or-nothing, so every failure is
/// one of these and never a partial payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("the payload is empty")]
    Empty,
    #[error("the payload is not canonical unpadded base64url")]
    NotBase64url,
    #[error("unsupported payload version {0:#04x}; only 0x02 is accepted")]
    Version(u8),
    #[error("unknown address family {0}")]
    Family(u8),
    #[error("the payload has the wrong length for its family and session id")]
    Length,
    #[error("the session id is empty")]
    EmptySessionId,
    #[error("the session id is not valid UTF-8")]
    SessionIdUtf8,
    #[error("the port is 0")]
    PortZero,
    #[error("expires_at is above 2^53 - 1")]
    ExpiresAtTooLarge,
}

impl BootstrapPayload {
    pub fn new(
        address: IpAddr,
        port: u16,
        session_id: impl Into<String>,
        token: ClaimToken,
        expires_at: u64,
    ) -> Self {
        Self {
            address,
            port,
            session_id: session_id.into(),
            token,
            expires_at,
        }
    }

    /// The family byte this payload encodes with: IPv4 and IPv4-mapped IPv6 are 4.
    pub fn family(&self) -> u8 {
        match wire_address(self.address) {
            IpAddr::V4(_) => FAMILY_V4,
            IpAddr::V6(_) => FAMILY_V6,
        }
    }

    /// The binary layout of §D4.1.
    pub fn encode_bytes(&self) -> Result<Vec<u8>, EncodeError> {
        if self.port == 0 {
            return Err(EncodeError::PortZero);
        }
        let id = self.session_id.as_bytes();
        if id.is_empty() {
            return Err(EncodeError::EmptySessionId);
        }
        let id_len = u8::try_from(id.len()).map_err(|_| EncodeError::SessionIdTooLong(id.len()))?;
        if self.expires_at > MAX_SAFE_INTEGER {
            return Err(EncodeError::ExpiresAtTooLarge(self.expires_at));
        }
        let mut out = Vec::with_capacity(FIXED_V6 + id.len());
        out.push(VERSION);
        match wire_address(self.address) {
            IpAddr::V4(v4) => {
                out.push(FAMILY_V4);
                out.extend_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                out.push(FAMILY_V6);
                out.extend_from_slice(&v6.octets());
            }
        }
        out.extend_from_slice(&self.port.to_be_bytes());
        out.push(id_len);
        out.extend_from_slice(id);
        out.extend_from_slice(self.token.as_bytes());
        out.extend_from_slice(&self.expires_at.to_be_bytes());
        Ok(out)
    }

    /// The unpadded base64url text form of §D4.2.
    pub fn encode(&self) -> Result<String, EncodeError> {
        self.encode_bytes().map(|b| URL_SAFE_NO_PAD.encode(b))
    }

    /// Expiry check, separate from decoding (§D4.3): expired when `now_seconds >= expires_at`.
    pub fn is_expired(&self, now_seconds: u64) -> bool {
        now_seconds >= self.expires_at
    }

    /// The language-neutral decoded form used by the vectors and SDKs. It reflects the address
    /// as held: an IPv4-mapped IPv6 address stays family 6 here (it encodes as 4).
    pub fn decoded(&self) -> Decoded {
        let (family, address) = match self.address {
            IpAddr::V4(v4) => (FAMILY_V4, v4.to_string()),
            // Rust's Ipv6Addr Display is the RFC 5952 canonical form.
            IpAddr::V6(v6) => (FAMILY_V6, v6.to_string()),
        };
        Decoded {
            family,
            address,
            port: self.port,
            session_id: self.session_id.clone(),
            token_base64url: self.token.to_base64url(),
            expires_at: self.expires_at,
        }
    }
}

/// IPv4-mapped IPv6 travels as IPv4 (§D4.3). IPv4-compatible (`::a.b.c.d`) stays IPv6.
fn wire_address(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

/// Decodes the text form (§D4.2, §D4.3). Expiry is not checked.
pub fn decode(text: &str) -> Result<BootstrapPayload, DecodeError> {
    decode_bytes(&decode_text(text, MAX_PAYLOAD_TEXT_LEN)?)
}

/// Decodes the binary layout of §D4.1.
pub fn decode_bytes(bytes: &[u8]) -> Result<BootstrapPayload, DecodeError> {
    decode_layout(bytes, VERSION, 0).map(|(payload, _)| payload)
}

/// The v2 layout with `version` as its first byte and `tail` more bytes after `expires_at`
/// (0 for v2, the static key for a sealed payload), which are returned unread. The checks and
/// their order are those of v2 for both versions.
fn decode_layout(
    bytes: &[u8],
    version: u8,
    tail: usize,
) -> Result<(BootstrapPayload, &[u8]), DecodeError> {
    let mut r = Reader(bytes);
    let found = r.u8().ok_or(DecodeError::Empty)?;
    if found != version {
        return Err(DecodeError::Version(found));
    }
    let family = r.u8().ok_or(DecodeError::Length)?;
    let address = match family {
        FAMILY_V4 => IpAddr::V4(Ipv4Addr::from(r.array::<4>().ok_or(DecodeError::Length)?)),
        FAMILY_V6 => IpAddr::V6(Ipv6Addr::from(r.array::<16>().ok_or(DecodeError::Length)?)),
        other => return Err(DecodeError::Family(other)),
    };
    let port = u16::from_be_bytes(r.array().ok_or(DecodeError::Length)?);
    let id_len = usize::from(r.u8().ok_or(DecodeError::Length)?);
    // Check the total before reading the variable part, so truncation and excess both fail
    // with the same error.
    let fixed = if family == FAMILY_V4 {
        FIXED_V4
    } else {
        FIXED_V6
    };
    if bytes.len() != fixed + id_len + tail {
        return Err(DecodeError::Length);
    }
    if port == 0 {
        return Err(DecodeError::PortZero);
    }
    if id_len == 0 {
        return Err(DecodeError::EmptySessionId);
    }
    let id = r.take(id_len).ok_or(DecodeError::Length)?;
    let session_id = std::str::from_utf8(id)
        .map_err(|_| DecodeError::SessionIdUtf8)?
        .to_owned();
    let token = ClaimToken::from_bytes(r.array::<TOKEN_BYTES>().ok_or(DecodeError::Length)?);
    let expires_at = u64::from_be_bytes(r.array().ok_or(DecodeError::Length)?);
    if expires_at > MAX_SAFE_INTEGER {
        return Err(DecodeError::ExpiresAtTooLarge);
    }
    let payload = BootstrapPayload {
        address,
        port,
        session_id,
        token,
        expires_at,
    };
    Ok((payload, r.0))
}

/// Sequential reads over the payload bytes; `None` when the input runs out.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|[b]| b)
    }
}

/// First byte of a sealed payload (issue #23, PROTOCOL.md "Sealed transport"). appduct v2 SDKs
/// refuse it as an unsupported version, so they never act on a sealed link.
pub const SEALED_VERSION: u8 = 0x03;
/// Bytes of the daemon's X25519 static public key at the end of a sealed payload.
pub const STATIC_KEY_BYTES: usize = 32;
/// Longest sealed payload, in bytes and in base64url characters.
pub const MAX_SEALED_PAYLOAD_BYTES: usize = MAX_PAYLOAD_BYTES + STATIC_KEY_BYTES;
pub const MAX_SEALED_PAYLOAD_TEXT_LEN: usize = (MAX_SEALED_PAYLOAD_BYTES * 4).div_ceil(3);

/// A sealed bootstrap payload (version `0x03`): the v2 fields, then the daemon's 32-byte X25519
/// static public key, which the app authenticates the daemon by (as a native link's pin).
/// Debug output never shows the token.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SealedBootstrapPayload {
    /// The v2 fields, encoded exactly as in v2 apart from the version byte.
    pub payload: BootstrapPayload,
    /// The daemon's X25519 static public key (not secret).
    pub static_key: [u8; STATIC_KEY_BYTES],
}

impl SealedBootstrapPayload {
    pub fn new(payload: BootstrapPayload, static_key: [u8; STATIC_KEY_BYTES]) -> Self {
        Self {
            payload,
            static_key,
        }
    }

    /// The v2 layout with version `0x03`, then the static key: `81 + n` bytes for IPv4, `93 + n`
    /// for IPv6.
    pub fn encode_bytes(&self) -> Result<Vec<u8>, EncodeError> {
        let mut out = self.payload.encode_bytes()?;
        out[0] = SEALED_VERSION;
        out.extend_from_slice(&self.static_key);
        Ok(out)
    }

    /// The unpadded base64url text form.
    pub fn encode(&self) -> Result<String, EncodeError> {
        self.encode_bytes().map(|b| URL_SAFE_NO_PAD.encode(b))
    }
}

/// Decodes the text form of a sealed payload, as strictly as [`decode`] reads v2: canonical
/// unpadded base64url, version `0x03`, every v2 field rule, exact length. Expiry is not checked.
pub fn decode_sealed(text: &str) -> Result<SealedBootstrapPayload, DecodeError> {
    decode_sealed_bytes(&decode_text(text, MAX_SEALED_PAYLOAD_TEXT_LEN)?)
}

/// Decodes the binary layout of a sealed payload.
pub fn decode_sealed_bytes(bytes: &[u8]) -> Result<SealedBootstrapPayload, DecodeError> {
    let (payload, rest) = decode_layout(bytes, SEALED_VERSION, STATIC_KEY_BYTES)?;
    let static_key = rest.try_into().map_err(|_| DecodeError::Length)?;
    Ok(SealedBootstrapPayload {
        payload,
        static_key,
    })
}

/// A payload of either version, as a link may carry.
#[derive(Debug, Clone)]
pub enum AnyPayload {
    /// Version `0x02`: a native or web link.
    V2(BootstrapPayload),
    /// Version `0x03`: a sealed link.
    Sealed(SealedBootstrapPayload),
}

impl AnyPayload {
    /// The v2 fields, whichever the version.
    pub fn fields(&self) -> &BootstrapPayload {
        match self {
            Self::V2(p) => p,
            Self::Sealed(s) => &s.payload,
        }
    }
}

/// Decodes a payload of version `0x02` or `0x03` (the version byte decides); any other version
/// is [`DecodeError::Version`]. [`decode`] stays v2-only.
pub fn decode_any(text: &str) -> Result<AnyPayload, DecodeError> {
    decode_any_bytes(&decode_text(text, MAX_SEALED_PAYLOAD_TEXT_LEN)?)
}

/// [`decode_any`] on the binary layout.
pub fn decode_any_bytes(bytes: &[u8]) -> Result<AnyPayload, DecodeError> {
    match bytes.first() {
        Some(&SEALED_VERSION) => decode_sealed_bytes(bytes).map(AnyPayload::Sealed),
        _ => decode_bytes(bytes).map(AnyPayload::V2),
    }
}

/// The base64url step of every decoder, with the length cap of its versions.
fn decode_text(text: &str, max_len: usize) -> Result<Vec<u8>, DecodeError> {
    if text.is_empty() {
        return Err(DecodeError::Empty);
    }
    // Longer text cannot be a valid payload; refuse before allocating for it.
    if text.len() > max_len {
        return Err(DecodeError::Length);
    }
    // The URL_SAFE_NO_PAD engine rejects characters outside [A-Za-z0-9_-], any '=', a length of
    // 1 mod 4 and non-zero trailing bits, which is exactly the canonical form of §D4.2.
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| DecodeError::NotBase64url)
}

/// The decoded form of §D4.3: `{family, address, port, sessionId, tokenBase64url, expiresAt}`.
/// It carries the token in clear, so its `Debug` redacts it.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Decoded {
    pub family: u8,
    pub address: String,
    pub port: u16,
    pub session_id: String,
    pub token_base64url: String,
    pub expires_at: u64,
}

impl Decoded {
    pub fn new(
        family: u8,
        address: impl Into<String>,
        port: u16,
        session_id: impl Into<String>,
        token_base64url: impl Into<String>,
        expires_at: u64,
    ) -> Self {
        Self {
            family,
            address: address.into(),
            port,
            session_id: session_id.into(),
            token_base64url: token_base64url.into(),
            expires_at,
        }
    }
}

impl std::fmt::Debug for Decoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoded")
            .field("family", &self.family)
            .field("address", &self.address)
            .field("port", &self.port)
            .field("session_id", &self.session_id)
            .field("token_base64url", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// Why a [`Decoded`] view does not describe a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ViewError {
    #[error("family must be 4 or 6 and match the address")]
    Family,
    #[error("address is not an IP address of the stated family")]
    Address,
    #[error("tokenBase64url is not 43 base64url characters")]
    Token,
}

impl TryFrom<&Decoded> for BootstrapPayload {
    type Error = ViewError;

    /// Rebuilds the payload a decoded view describes (the vectors' `expected` objects). Field
    /// bounds are left to the encoder.
    fn try_from(view: &Decoded) -> Result<Self, ViewError> {
        let address = match view.family {
            FAMILY_V4 => IpAddr::V4(view.address.parse().map_err(|_| ViewError::Address)?),
            FAMILY_V6 => IpAddr::V6(view.address.parse().map_err(|_| ViewError::Address)?),
            _ => return Err(ViewError::Family),
        };
        let token = ClaimToken::from_base64url(&view.token_base64url).ok_or(ViewError::Token)?;
        Ok(Self {
            address,
            port: view.port,
            session_id: view.session_id.clone(),
            token,
            expires_at: view.expires_at,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const EXAMPLE: &str =
        "AgTAqDIMIPsQUW05dmRITjBjbUZ3U1dReAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fAAAAAGksDEA";

    fn seq_token() -> ClaimToken {
        ClaimToken::from_bytes(std::array::from_fn(|i| i as u8))
    }

    fn example() -> BootstrapPayload {
        BootstrapPayload {
            address: "192.168.50.12".parse().unwrap(),
            port: 8443,
            session_id: "Qm9vdHN0cmFwSWQx".into(),
            token: seq_token(),
            expires_at: 1_764_494_400,
        }
    }

    fn v6(addr: &str) -> BootstrapPayload {
        BootstrapPayload {
            address: addr.parse().unwrap(),
            ..example()
        }
    }

    #[test]
    fn worked_example_encodes_byte_for_byte() {
        let bytes = example().encode_bytes().unwrap();
        assert_eq!(bytes.len(), 65);
        assert_eq!(
            &bytes[..10],
            &[2, 4, 0xc0, 0xa8, 0x32, 0x0c, 0x20, 0xfb, 0x10, 0x51]
        );
        assert_eq!(&bytes[57..], &[0, 0, 0, 0, 0x69, 0x2c, 0x0c, 0x40]);
        assert_eq!(example().encode().unwrap(), EXAMPLE);
    }

    #[test]
    fn worked_example_decodes() {
        let p = decode(EXAMPLE).unwrap();
        assert_eq!(p.address, "192.168.50.12".parse::<IpAddr>().unwrap());
        assert_eq!(p.port, 8443);
        assert_eq!(p.session_id, "Qm9vdHN0cmFwSWQx");
        assert_eq!(
            p.token.to_base64url(),
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
        );
        assert_eq!(p.expires_at, 1_764_494_400);
        assert_eq!(p.family(), FAMILY_V4);
    }

    #[test]
    fn decoded_view_is_camel_case_json() {
        let json = serde_json::to_value(example().decoded()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "family": 4,
                "address": "192.168.50.12",
                "port": 8443,
                "sessionId": "Qm9vdHN0cmFwSWQx",
                "tokenBase64url": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
                "expiresAt": 1764494400u64,
            })
        );
        let back: Decoded = serde_json::from_value(json).unwrap();
        let rebuilt = BootstrapPayload::try_from(&back).unwrap();
        assert_eq!(rebuilt.encode().unwrap(), EXAMPLE);
    }

    #[test]
    fn decoded_view_debug_redacts_the_token() {
        let text = format!("{:?}", example().decoded());
        assert!(!text.contains("AAECAwQF"), "{text}");
        assert!(text.contains("<redacted>"));
        assert!(!format!("{:?}", example()).contains("AAECAwQF"));
    }

    #[test]
    fn ipv6_addresses_use_rfc5952_canonical_form() {
        for (input, canonical) in [
            ("fd00:0:0:0:0:0:0:1", "fd00::1"),
            ("0:0:0:0:0:0:0:1", "::1"),
            ("::", "::"),
            ("2001:DB8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),
            ("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"),
            ("2001:0db8::0001", "2001:db8::1"),
            ("fe80:0:0:1::", "fe80:0:0:1::"),
        ] {
            let d = decode(&v6(input).encode().unwrap()).unwrap().decoded();
            assert_eq!(d.family, FAMILY_V6);
            assert_eq!(d.address, canonical, "{input}");
        }
    }

    #[test]
    fn ipv4_mapped_ipv6_encodes_as_family_4() {
        let mapped = v6("::ffff:192.168.50.12");
        assert_eq!(mapped.family(), FAMILY_V4);
        assert_eq!(mapped.encode().unwrap(), EXAMPLE);
        // IPv4-compatible addresses are ordinary IPv6.
        let compat = v6("::c0a8:320c");
        assert_eq!(compat.family(), FAMILY_V6);
        assert_eq!(compat.encode_bytes().unwrap()[1], FAMILY_V6);
    }

    #[test]
    fn family_6_mapped_payload_decodes_and_reencodes_as_4() {
        let mut bytes = vec![2, 6];
        bytes.extend_from_slice(&Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0xc0a8, 0x320c]).octets());
        bytes.extend_from_slice(&example().encode_bytes().unwrap()[6..]);
        let p = decode_bytes(&bytes).unwrap();
        assert_eq!(p.decoded().family, FAMILY_V6);
        assert_eq!(p.decoded().address, "::ffff:192.168.50.12");
        assert_eq!(p.encode().unwrap(), EXAMPLE);
    }

    #[test]
    fn encoder_refusals() {
        let p = BootstrapPayload {
            port: 0,
            ..example()
        };
        assert_eq!(p.encode(), Err(EncodeError::PortZero));
        let p = BootstrapPayload {
            session_id: String::new(),
            ..example()
        };
        assert_eq!(p.encode(), Err(EncodeError::EmptySessionId));
        let p = BootstrapPayload {
            session_id: "é".repeat(128),
            ..example()
        };
        assert_eq!(p.encode(), Err(EncodeError::SessionIdTooLong(256)));
        let p = BootstrapPayload {
            expires_at: MAX_SAFE_INTEGER + 1,
            ..example()
        };
        assert_eq!(
            p.encode(),
            Err(EncodeError::ExpiresAtTooLarge(MAX_SAFE_INTEGER + 1))
        );
    }

    #[test]
    fn encoder_bounds_are_inclusive() {
        let p = BootstrapPayload {
            session_id: "s".repeat(255),
            expires_at: MAX_SAFE_INTEGER,
            port: 65535,
            ..example()
        };
        let text = p.encode().unwrap();
        let back = decode(&text).unwrap();
        assert_eq!(back.session_id.len(), 255);
        assert_eq!(back.expires_at, MAX_SAFE_INTEGER);
        assert_eq!(back.port, 65535);
        let big = v6("fd00::1").encode().unwrap();
        assert!(big.len() <= MAX_PAYLOAD_TEXT_LEN);
    }

    #[test]
    fn text_form_is_strict() {
        assert_eq!(decode("").unwrap_err(), DecodeError::Empty);
        // Standard-alphabet characters, whitespace and padding.
        for bad in [
            format!("{EXAMPLE}="),
            format!("{EXAMPLE} "),
            EXAMPLE.replacen('A', "/", 1),
            EXAMPLE.replacen('A', "+", 1),
            format!("{EXAMPLE}A"), // 88 characters: fine length, but 66 bytes with junk
        ] {
            assert!(decode(&bad).is_err(), "{bad:?}");
        }
        // 87 + 1 = 88 ≡ 0 mod 4 decodes to 66 bytes: wrong length for the family.
        assert_eq!(
            decode(&format!("{EXAMPLE}A")).unwrap_err(),
            DecodeError::Length
        );
        // Length ≡ 1 mod 4 can never be base64.
        assert_eq!(decode("AgTAq").unwrap_err(), DecodeError::NotBase64url);
        // The last character carries unused bits; 'A' → 'B' sets one.
        let non_canonical = format!("{}B", &EXAMPLE[..EXAMPLE.len() - 1]);
        let last = EXAMPLE.as_bytes()[EXAMPLE.len() - 1];
        assert_eq!(last, b'A');
        assert_eq!(
            decode(&non_canonical).unwrap_err(),
            DecodeError::NotBase64url
        );
        assert_eq!(
            decode(&"A".repeat(MAX_PAYLOAD_TEXT_LEN + 1)).unwrap_err(),
            DecodeError::Length
        );
    }

    #[test]
    fn binary_rejections() {
        let good = example().encode_bytes().unwrap();
        let with = |i: usize, b: u8| {
            let mut v = good.clone();
            v[i] = b;
            v
        };
        assert_eq!(decode_bytes(&[]).unwrap_err(), DecodeError::Empty);
        assert_eq!(decode_bytes(&[2]).unwrap_err(), DecodeError::Length);
        assert_eq!(
            decode_bytes(&with(0, 1)).unwrap_err(),
            DecodeError::Version(1)
        );
        assert_eq!(
            decode_bytes(&with(1, 5)).unwrap_err(),
            DecodeError::Family(5)
        );
        assert_eq!(decode_bytes(&with(1, 6)).unwrap_err(), DecodeError::Length);
        assert_eq!(decode_bytes(&good[..64]).unwrap_err(), DecodeError::Length);
        let mut long = good.clone();
        long.push(0);
        assert_eq!(decode_bytes(&long).unwrap_err(), DecodeError::Length);
        let mut port_zero = with(6, 0);
        port_zero[7] = 0;
        assert_eq!(decode_bytes(&port_zero).unwrap_err(), DecodeError::PortZero);
        // Only the whole big-endian u16 matters: 0x00fb is port 251.
        assert_eq!(decode_bytes(&with(6, 0)).map(|p| p.port), Ok(251));
        // Session id of 16 bytes with a lone continuation byte in it.
        assert_eq!(
            decode_bytes(&with(9, 0x80)).unwrap_err(),
            DecodeError::SessionIdUtf8
        );
        // Zero-length id: the total must shrink by the 16 id bytes too.
        let mut empty_id = good[..8].to_vec();
        empty_id.push(0);
        empty_id.extend_from_slice(&good[25..]);
        assert_eq!(
            decode_bytes(&empty_id).unwrap_err(),
            DecodeError::EmptySessionId
        );
        // expires_at = 2^53.
        let mut late = good.clone();
        late[57..].copy_from_slice(&(MAX_SAFE_INTEGER + 1).to_be_bytes());
        assert_eq!(
            decode_bytes(&late).unwrap_err(),
            DecodeError::ExpiresAtTooLarge
        );
    }

    #[test]
    fn expiry_is_inclusive_of_expires_at() {
        let p = example();
        assert!(!p.is_expired(1_764_494_399));
        assert!(p.is_expired(1_764_494_400));
        assert!(p.is_expired(u64::MAX));
    }

    #[test]
    fn view_conversion_rejects_inconsistent_views() {
        let good = example().decoded();
        let mut v = good.clone();
        v.family = 6;
        assert_eq!(
            BootstrapPayload::try_from(&v).unwrap_err(),
            ViewError::Address
        );
        v.family = 5;
        assert_eq!(
            BootstrapPayload::try_from(&v).unwrap_err(),
            ViewError::Family
        );
        let mut v = good.clone();
        v.address = "fd00::1".into();
        assert_eq!(
            BootstrapPayload::try_from(&v).unwrap_err(),
            ViewError::Address
        );
        let mut v = good;
        v.token_base64url.push('A');
        assert_eq!(
            BootstrapPayload::try_from(&v).unwrap_err(),
            ViewError::Token
        );
    }
}
