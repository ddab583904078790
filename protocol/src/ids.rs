//! Identifiers and tokens (§D9.5).
//!
//! The crate is I/O-free, so every constructor takes the CSPRNG bytes from the caller (the
//! daemon reads them from the OS). Session ids and call wire ids are not secret and behave like
//! ordinary strings. Tokens are secret: they implement neither `PartialEq` (a derived `==`
//! short-circuits, which leaks timing) nor a revealing `Debug`, and have no serde impls, so a
//! token only leaves memory through an explicit [`ClaimToken::to_base64url`].

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use subtle::ConstantTimeEq as _;

use crate::limits::{CALL_WIRE_ID_BYTES, SESSION_ID_BYTES, TOKEN_BYTES};

/// Text length of a session id: base64url of 12 bytes.
pub const SESSION_ID_LEN: usize = 16;
/// Text length of a token: base64url of 32 bytes, unpadded.
pub const TOKEN_TEXT_LEN: usize = 43;
/// Prefix of every call wire id.
pub const CALL_ID_PREFIX: &str = "call_";
/// Text length of a call wire id: `call_` + base64url of 16 bytes.
pub const CALL_ID_LEN: usize = 27;

/// Why a string is not a well-formed identifier of the kind asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    #[error("a session id is 16 base64url characters (12 bytes) not starting with '-'")]
    SessionId,
    #[error("a call wire id is 'call_' followed by 22 base64url characters (16 bytes)")]
    CallId,
}

/// Strict unpadded base64url decode into exactly `N` bytes (canonical trailing bits only).
pub(crate) fn decode_exact<const N: usize>(s: &str) -> Option<[u8; N]> {
    // Bound the work before decoding: N bytes need exactly ceil(4N/3) characters.
    if s.len() != (N * 4).div_ceil(3) {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(s).ok()?;
    bytes.try_into().ok()
}

/// A daemon-minted session id: base64url of 12 CSPRNG bytes, 16 characters (§D9.5).
///
/// Ids starting with `-` are never minted (they read as options on a command line), so
/// [`SessionId::from_random_bytes`] returns `None` for them and the caller re-rolls. Collision
/// checks against pending, tombstoned and live ids are the daemon's job.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(String);

impl SessionId {
    /// The id for these random bytes, or `None` when the bytes must be re-rolled.
    pub fn from_random_bytes(bytes: [u8; SESSION_ID_BYTES]) -> Option<Self> {
        let text = URL_SAFE_NO_PAD.encode(bytes);
        (!Self::needs_reroll(&text)).then_some(Self(text))
    }

    /// The re-roll rule of §D9.5: an id text starting with `-` is never handed out.
    pub fn needs_reroll(text: &str) -> bool {
        text.starts_with('-')
    }

    /// Parses the minted form; anything else (including ids of other daemons) is refused.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        if s.len() == SESSION_ID_LEN
            && !Self::needs_reroll(s)
            && decode_exact::<SESSION_ID_BYTES>(s).is_some()
        {
            Ok(Self(s.to_owned()))
        } else {
            Err(IdError::SessionId)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for SessionId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl serde::Serialize for SessionId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for SessionId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A call wire id: `call_` + base64url of 16 CSPRNG bytes, 27 characters (§D9.5). Always
/// minted by the daemon; a caller-chosen control-plane `callId` is a different, free string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(String);

impl CallId {
    pub fn from_random_bytes(bytes: [u8; CALL_WIRE_ID_BYTES]) -> Self {
        Self(format!("{CALL_ID_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// Parses the minted form.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        match s.strip_prefix(CALL_ID_PREFIX) {
            Some(rest) if decode_exact::<CALL_WIRE_ID_BYTES>(rest).is_some() => {
                Ok(Self(s.to_owned()))
            }
            _ => Err(IdError::CallId),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for CallId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for CallId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl serde::Serialize for CallId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for CallId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Defines a 32-byte secret token type; claim and resume tokens share every rule but must not
/// be interchangeable, hence two types.
macro_rules! secret_token {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name([u8; TOKEN_BYTES]);

        impl $name {
            /// Wraps 32 CSPRNG bytes (or the raw token of a decoded payload).
            pub fn from_bytes(bytes: [u8; TOKEN_BYTES]) -> Self {
                Self(bytes)
            }

            /// Strictly decodes the 43-character base64url text form; `None` for anything else.
            pub fn from_base64url(s: &str) -> Option<Self> {
                decode_exact::<TOKEN_BYTES>(s).map(Self)
            }

            /// The raw bytes, for the bootstrap payload.
            pub fn as_bytes(&self) -> &[u8; TOKEN_BYTES] {
                &self.0
            }

            /// The 43-character base64url text form sent on the wire.
            pub fn to_base64url(&self) -> String {
                URL_SAFE_NO_PAD.encode(self.0)
            }

            /// Compares a presented base64url string with this token in constant time
            /// (§D9.5). A string that does not decode to exactly 32 bytes is a mismatch.
            pub fn matches(&self, presented: &str) -> bool {
                match decode_exact::<TOKEN_BYTES>(presented) {
                    Some(bytes) => self.matches_bytes(&bytes),
                    None => false,
                }
            }

            /// Constant-time comparison with raw token bytes.
            pub fn matches_bytes(&self, presented: &[u8; TOKEN_BYTES]) -> bool {
                self.0.ct_eq(presented).into()
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(concat!(stringify!($name), "(<redacted>)"))
            }
        }
    };
}

secret_token!(
    /// A link's single-use claim token: raw in the bootstrap payload, base64url in
    /// `session_claim.token`.
    ClaimToken
);

secret_token!(
    /// A session's resume token, rotated on every ack.
    ResumeToken
);

#[cfg(test)]
mod tests {
    use super::*;

    fn seq<const N: usize>() -> [u8; N] {
        std::array::from_fn(|i| i as u8)
    }

    #[test]
    fn session_id_is_16_base64url_characters() {
        let id = SessionId::from_random_bytes(seq());
        assert_eq!(id.as_ref().map(SessionId::as_str), Some("AAECAwQFBgcICQoL"));
        assert_eq!(
            SessionId::parse("AAECAwQFBgcICQoL").map(|i| i.to_string()),
            Ok("AAECAwQFBgcICQoL".to_owned())
        );
    }

    #[test]
    fn session_id_starting_with_dash_is_rerolled() {
        // 0xf8 encodes to a leading '-' in base64url (62 << 2).
        let mut bytes = [0u8; SESSION_ID_BYTES];
        bytes[0] = 0xf8;
        assert_eq!(SessionId::from_random_bytes(bytes), None);
        assert!(SessionId::needs_reroll("-AECAwQFBgcICQoL"));
        assert!(!SessionId::needs_reroll("_AECAwQFBgcICQoL"));
        assert_eq!(
            SessionId::parse("-AECAwQFBgcICQoL"),
            Err(IdError::SessionId)
        );
    }

    #[test]
    fn malformed_session_ids_are_refused() {
        for bad in [
            "",
            "AAECAwQFBgcICQo",
            "AAECAwQFBgcICQoLx",
            "AAECAwQFBgcICQo+",
            "AAECAwQFBgcICQo=",
            "session-1",
        ] {
            assert_eq!(SessionId::parse(bad), Err(IdError::SessionId), "{bad:?}");
        }
    }

    #[test]
    fn session_id_serde_is_a_plain_string_and_strict() {
        let id = SessionId::parse("AAECAwQFBgcICQoL");
        let json = id.as_ref().ok().and_then(|i| serde_json::to_string(i).ok());
        assert_eq!(json.as_deref(), Some("\"AAECAwQFBgcICQoL\""));
        assert!(serde_json::from_str::<SessionId>("\"AAECAwQFBgcICQoL\"").is_ok());
        assert!(serde_json::from_str::<SessionId>("\"nope\"").is_err());
    }

    #[test]
    fn call_id_is_27_characters_with_prefix() {
        let id = CallId::from_random_bytes(seq());
        assert_eq!(id.as_str(), "call_AAECAwQFBgcICQoLDA0ODw");
        assert_eq!(id.as_str().len(), CALL_ID_LEN);
        assert_eq!(CallId::parse(id.as_str()), Ok(id.clone()));
        assert_eq!(id.as_str().parse::<CallId>(), Ok(id));
    }

    #[test]
    fn malformed_call_ids_are_refused() {
        for bad in [
            "",
            "call_",
            "AAECAwQFBgcICQoLDA0ODw",
            "Call_AAECAwQFBgcICQoLDA0ODw",
            "call_AAECAwQFBgcICQoLDA0OD",
            "call_AAECAwQFBgcICQoLDA0ODx",
            "call_AAECAwQFBgcICQoLDA0OD/",
        ] {
            assert_eq!(CallId::parse(bad), Err(IdError::CallId), "{bad:?}");
        }
        assert!(serde_json::from_str::<CallId>("\"call_x\"").is_err());
    }

    #[test]
    fn token_text_form_is_43_characters() {
        // The worked example of §D4.4.
        let token = ClaimToken::from_bytes(seq());
        let text = token.to_base64url();
        assert_eq!(text, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8");
        assert_eq!(text.len(), TOKEN_TEXT_LEN);
        let back = ClaimToken::from_base64url(&text);
        assert_eq!(back.map(|t| *t.as_bytes()), Some(seq()));
    }

    #[test]
    fn token_debug_is_redacted() {
        let claim = ClaimToken::from_bytes(seq());
        let resume = ResumeToken::from_bytes(seq());
        assert_eq!(format!("{claim:?}"), "ClaimToken(<redacted>)");
        assert_eq!(format!("{resume:#?}"), "ResumeToken(<redacted>)");
    }

    #[test]
    fn token_matches_only_its_own_text_form() {
        let token = ResumeToken::from_bytes(seq());
        assert!(token.matches("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"));
        assert!(token.matches_bytes(&seq()));
        for bad in [
            "",
            // one bit different
            "AQECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
            // padded
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
            // standard alphabet is not base64url
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+",
            // non-canonical trailing bits of the same bytes
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9",
            // 31 bytes
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHg",
            // 33 bytes
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8g",
        ] {
            assert!(!token.matches(bad), "{bad:?}");
        }
        assert!(
            ClaimToken::from_base64url("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9").is_none()
        );
    }
}
