//! The floor: a raw line echo on a Unix socket and a raw wss echo on loopback, served by a
//! child process (`appduct-bench --echo-server <dir>`) so they sit across a process boundary
//! like the daemon does. Nothing is parsed: every line and text frame goes back as it came.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use appduct_protocol::pin::SpkiPin;
use futures_util::{SinkExt as _, StreamExt as _};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, UnixListener};
use tokio_rustls::TlsAcceptor;

use crate::load::BenchResult;

/// A self-signed P-256 certificate for 127.0.0.1 (the daemon's key type), in PEM and DER.
pub struct Cert {
    pub cert_pem: String,
    pub key_pem: String,
    cert_der: Vec<u8>,
    key_der: Vec<u8>,
}

impl Cert {
    pub fn generate() -> BenchResult<Self> {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| format!("key: {e}"))?;
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .and_then(|p| p.self_signed(&key))
            .map_err(|e| format!("certificate: {e}"))?;
        Ok(Self {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        })
    }

    pub fn pin(&self) -> BenchResult<SpkiPin> {
        SpkiPin::from_certificate_der(&self.cert_der).map_err(|e| format!("pin: {e}"))
    }

    fn acceptor(&self) -> BenchResult<TlsAcceptor> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| {
                b.with_no_client_auth().with_single_cert(
                    vec![CertificateDer::from(self.cert_der.clone())],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone())),
                )
            })
            .map_err(|e| format!("tls config: {e}"))?;
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// The Unix socket of the line echo under `dir`.
pub fn uds_path(dir: &Path) -> PathBuf {
    dir.join("echo.sock")
}

/// The child's main: serves both echoes until killed; prints `{"wss": <port>}` once ready.
pub async fn serve(dir: &Path) -> BenchResult<()> {
    let uds = UnixListener::bind(uds_path(dir)).map_err(|e| format!("echo bind: {e}"))?;
    let tcp = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("echo tcp: {e}"))?;
    let port = tcp.local_addr().map_err(|e| e.to_string())?.port();
    let acceptor = Cert::generate()?.acceptor()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = uds.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut read = BufReader::new(read);
                let mut line = Vec::new();
                while read.read_until(b'\n', &mut line).await.is_ok_and(|n| n > 0) {
                    if write.write_all(&line).await.is_err() {
                        break;
                    }
                    line.clear();
                }
            });
        }
    });
    println!("{{\"wss\": {port}}}");
    while let Ok((stream, _)) = tcp.accept().await {
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let Ok(ws) = tokio_tungstenite::accept_async_with_config(
                tls,
                Some(appduct_sdk::transport::websocket_config()),
            )
            .await
            else {
                return;
            };
            let (mut sink, mut stream) = ws.split();
            while let Some(Ok(message)) = stream.next().await {
                if message.is_text() && sink.send(message).await.is_err() {
                    break;
                }
            }
        });
    }
    Ok(())
}
