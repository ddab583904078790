//! App-side trust (§D3.4): which pins a connection accepts, the private-LAN address rule,
//! and the rustls verifier that accepts a server only by its leaf's SPKI pin.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use appduct_protocol::pin::SpkiPin;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

/// How the app decides which daemon key to trust (§D3.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// The build embeds a non-empty pin set; a link's `pin` is ignored.
    Pin(Vec<SpkiPin>),
    /// No embedded pins: trust the link's `pin` for that one session, with a warning each time.
    Link,
}

/// `allowPrivateLanOnly` (§D3.4): `10/8`, `172.16/12`, `192.168/16` or exactly `127.0.0.1`.
/// An IPv4-mapped IPv6 address is judged as the IPv4 address it maps.
pub fn is_private_lan_address(address: IpAddr) -> bool {
    let v4 = match address {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4,
            None => return false,
        },
    };
    let [a, b, c, d] = v4.octets();
    a == 10
        || (a == 172 && (16..=31).contains(&b))
        || (a == 192 && b == 168)
        || [a, b, c, d] == [127, 0, 0, 1]
}

/// Accepts a server certificate only when the SPKI pin of the presented leaf is in the trusted
/// set. Hostname, issuer, chain and validity dates are deliberately not consulted (§D3.4);
/// handshake signatures are still verified, so the peer must hold the pinned key.
#[derive(Debug)]
pub(crate) struct PinVerifier {
    pins: Vec<SpkiPin>,
    provider: Arc<CryptoProvider>,
    /// Set when the leaf's pin was refused, so the caller can tell a pin mismatch apart from
    /// other handshake failures.
    mismatch: AtomicBool,
    /// Testing only: accept any certificate.
    skip_pin_check: bool,
}

impl PinVerifier {
    pub(crate) fn new(pins: Vec<SpkiPin>, provider: Arc<CryptoProvider>, skip: bool) -> Self {
        Self {
            pins,
            provider,
            mismatch: AtomicBool::new(false),
            skip_pin_check: skip,
        }
    }

    pub(crate) fn saw_mismatch(&self) -> bool {
        self.mismatch.load(Ordering::SeqCst)
    }
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.skip_pin_check {
            return Ok(ServerCertVerified::assertion());
        }
        // A leaf that does not even parse cannot be the pinned daemon's.
        let trusted = SpkiPin::from_certificate_der(end_entity.as_ref())
            .is_ok_and(|pin| self.pins.contains(&pin));
        if trusted {
            Ok(ServerCertVerified::assertion())
        } else {
            self.mismatch.store(true, Ordering::SeqCst);
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_private_lan_and_exact_loopback_are_allowed() {
        for ok in [
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.254",
            "192.168.50.12",
            "127.0.0.1",
            "::ffff:192.168.1.2",
        ] {
            assert!(is_private_lan_address(ok.parse().unwrap()), "{ok}");
        }
        for bad in [
            "172.15.0.1",
            "172.32.0.1",
            "192.169.0.1",
            "127.0.0.2",
            "8.8.8.8",
            "100.64.0.1",
            "::1",
            "fd00::1",
        ] {
            assert!(!is_private_lan_address(bad.parse().unwrap()), "{bad}");
        }
    }

    #[test]
    fn the_verifier_refuses_an_unparsable_or_untrusted_leaf() {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let pin = SpkiPin::parse("sha256/+RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw=").unwrap();
        let v = PinVerifier::new(vec![pin], provider.clone(), false);
        let name =
            ServerName::IpAddress(rustls_pki_types::IpAddr::from(IpAddr::from([127, 0, 0, 1])));
        let r = v.verify_server_cert(
            &CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00]),
            &[],
            &name,
            &[],
            UnixTime::now(),
        );
        assert!(r.is_err());
        assert!(v.saw_mismatch());
        let skipping = PinVerifier::new(Vec::new(), provider, true);
        let r = skipping.verify_server_cert(
            &CertificateDer::from(vec![0x30]),
            &[],
            &name,
            &[],
            UnixTime::now(),
        );
        assert!(r.is_ok());
        assert!(!skipping.saw_mismatch());
    }
}
