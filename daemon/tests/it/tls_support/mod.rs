//! The one pinned TLS client of the daemon's tests: a rustls verifier that accepts a server only
//! when the SPKI pin of its leaf is the expected one, as an appduct app does (§D3.4), and the
//! client configurations and connections built on it. Handshake signatures are still verified
//! with the `ring` provider, so the server must hold the pinned key.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use appduct_protocol::pin::SpkiPin;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme, SupportedProtocolVersion};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The message of the error a refused leaf produces.
pub const PIN_MISMATCH: &str = "pin mismatch";

pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Accepts exactly the leaves whose SPKI pin is `pin`, and remembers every leaf it was shown.
#[derive(Debug)]
pub struct PinnedLeaf {
    pin: SpkiPin,
    provider: Arc<CryptoProvider>,
    seen: Mutex<Vec<CertificateDer<'static>>>,
}

impl PinnedLeaf {
    pub fn new(pin: SpkiPin) -> Arc<Self> {
        Arc::new(Self {
            pin,
            provider: provider(),
            seen: Mutex::new(Vec::new()),
        })
    }

    /// The leaves presented to this verifier, in order (accepted or not).
    pub fn seen(&self) -> Vec<CertificateDer<'static>> {
        self.seen.lock().unwrap().clone()
    }
}

impl ServerCertVerifier for PinnedLeaf {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.seen
            .lock()
            .unwrap()
            .push(end_entity.clone().into_owned());
        match SpkiPin::from_certificate_der(end_entity.as_ref()) {
            Ok(pin) if pin == self.pin => Ok(ServerCertVerified::assertion()),
            _ => Err(rustls::Error::General(PIN_MISMATCH.to_owned())),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
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
        rustls::crypto::verify_tls13_signature(
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

/// A client configuration trusting only `verifier`'s pin, on the given TLS versions.
pub fn client_config_with(
    verifier: Arc<PinnedLeaf>,
    versions: &[&'static SupportedProtocolVersion],
) -> ClientConfig {
    ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth()
}

/// A client configuration trusting only `pin`, on rustls' default TLS versions.
pub fn client_config(pin: SpkiPin) -> ClientConfig {
    client_config_with(PinnedLeaf::new(pin), rustls::DEFAULT_VERSIONS)
}

/// TLS to `addr` trusting only `verifier`'s pin; the TLS error when the handshake fails.
pub async fn connect_with(
    addr: SocketAddr,
    server_name: &str,
    verifier: Arc<PinnedLeaf>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let config = client_config_with(verifier, rustls::DEFAULT_VERSIONS);
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(server_name.to_owned()).unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .expect("the TLS handshake neither finished nor failed")
}

/// TLS to `addr` trusting only `pin`.
pub async fn connect(
    addr: SocketAddr,
    server_name: &str,
    pin: SpkiPin,
) -> std::io::Result<TlsStream<TcpStream>> {
    connect_with(addr, server_name, PinnedLeaf::new(pin)).await
}
