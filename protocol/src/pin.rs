//! SPKI pins: `sha256/` + standard base64 (with padding) of the SHA-256 of a certificate's
//! DER SubjectPublicKeyInfo (§D3.3).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};

const PREFIX: &str = "sha256/";
/// Decodes pins whose last character carries non-zero unused bits, which the pattern allows.
const LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);
/// A pin is always this many characters: `sha256/` + 43 base64 characters + `=`.
pub const PIN_LEN: usize = 51;

/// A well-formed SPKI pin. Construction validates the text form, so holding one means the
/// string matches `^sha256/[A-Za-z0-9+/]{43}=$`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpkiPin(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PinError {
    #[error("a pin must look like sha256/ followed by 43 base64 characters and '='")]
    Malformed,
    #[error("the certificate is not valid DER X.509: {0}")]
    Certificate(String),
}

impl SpkiPin {
    /// Pin of a DER-encoded SubjectPublicKeyInfo.
    pub fn from_spki_der(spki_der: &[u8]) -> Self {
        let digest = Sha256::digest(spki_der);
        Self(format!("{PREFIX}{}", STANDARD.encode(digest)))
    }

    /// Pin of the SubjectPublicKeyInfo inside a DER-encoded X.509 certificate.
    pub fn from_certificate_der(cert_der: &[u8]) -> Result<Self, PinError> {
        let (rest, cert) = x509_parser::parse_x509_certificate(cert_der)
            .map_err(|e| PinError::Certificate(e.to_string()))?;
        if !rest.is_empty() {
            return Err(PinError::Certificate(
                "trailing bytes after the certificate".into(),
            ));
        }
        Ok(Self::from_spki_der(cert.tbs_certificate.subject_pki.raw))
    }

    /// Parses the text form; anything but `^sha256/[A-Za-z0-9+/]{43}=$` is refused.
    pub fn parse(s: &str) -> Result<Self, PinError> {
        if Self::is_well_formed(s) {
            Ok(Self(s.to_owned()))
        } else {
            Err(PinError::Malformed)
        }
    }

    /// Whether `s` matches `^sha256/[A-Za-z0-9+/]{43}=$` (and so decodes to 32 bytes).
    pub fn is_well_formed(s: &str) -> bool {
        let Some(b64) = s.strip_prefix(PREFIX) else {
            return false;
        };
        let bytes = b64.as_bytes();
        if bytes.len() != 44 || bytes[43] != b'=' {
            return false;
        }
        if !bytes[..43]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/')
        {
            return false;
        }
        // The pattern is the whole rule (§D5.3): a pin whose last character has non-zero
        // unused bits is well-formed; it simply never equals a computed pin.
        true
    }

    /// The 32 digest bytes.
    pub fn digest(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        if let Ok(d) = LENIENT.decode(&self.0[PREFIX.len()..])
            && d.len() == 32
        {
            out.copy_from_slice(&d);
        }
        out
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SpkiPin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for SpkiPin {
    type Err = PinError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl serde::Serialize for SpkiPin {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for SpkiPin {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example_pin_is_well_formed() {
        let pin = SpkiPin::parse("sha256/+RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw=");
        assert!(pin.is_ok());
    }

    #[test]
    fn malformed_pins_are_refused() {
        for bad in [
            "",
            "sha256/",
            "sha1/+RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw=",
            "sha256/+RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw",
            "sha256/+RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw==",
            "sha256/-RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw=",
        ] {
            assert!(SpkiPin::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pin_of_spki_is_51_characters() {
        let pin = SpkiPin::from_spki_der(b"not really der, but hashing does not care");
        assert_eq!(pin.as_str().len(), PIN_LEN);
        assert!(SpkiPin::is_well_formed(pin.as_str()));
        assert_eq!(
            SpkiPin::parse(pin.as_str()).map(|p| p.digest()),
            Ok(pin.digest())
        );
    }

    #[test]
    fn garbage_certificate_is_an_error() {
        assert!(SpkiPin::from_certificate_der(b"\x30\x03\x02\x01").is_err());
        assert!(SpkiPin::from_certificate_der(&[]).is_err());
    }
}
