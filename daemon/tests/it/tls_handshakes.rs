//! TLS handshakes against the daemon's server configuration (§D3), in memory: a client that
//! checks the leaf's SPKI pin gets the current leaf, a leaf swap only affects new connections,
//! TLS 1.2 clients connect too, and a client pinning another key refuses the leaf.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::tls_support;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use appduct_daemon::tls::{self, HostKey, Overwrite, TlsState};
use appduct_protocol::pin::SpkiPin;
use rustls::ProtocolVersion;
use rustls::pki_types::ServerName;
use tls_support::PinnedLeaf;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};
use tokio_rustls::{TlsAcceptor, TlsConnector, client, server};

/// 2025-06-15T15:06:40.123Z: a fixed mint time with a sub-second part.
const NOW_MS: u64 = 1_750_000_000_123;
const LAN_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 20));

/// A fresh EC P-256 host key, generated at runtime (keys are never committed).
fn p256_key() -> HostKey {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key.pem");
    tls::generate_key_file(&path, Overwrite::Never).unwrap();
    HostKey::load(&path).unwrap()
}

type Pair = (
    client::TlsStream<DuplexStream>,
    server::TlsStream<DuplexStream>,
);

/// One in-memory handshake against the state's server configuration.
async fn handshake(
    state: &TlsState,
    pin: &SpkiPin,
    version: &'static rustls::SupportedProtocolVersion,
) -> Result<Pair, String> {
    let mut config = tls_support::client_config_with(PinnedLeaf::new(pin.clone()), &[version]);
    // A client offering ALPN still connects; the server selects none.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let acceptor = TlsAcceptor::from(state.server_config());
    let connector = TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from("192.168.1.20").unwrap();
    let (client, server) = tokio::join!(
        connector.connect(name, client_io),
        acceptor.accept(server_io)
    );
    match (client, server) {
        (Ok(client), Ok(server)) => Ok((client, server)),
        (client, server) => Err(format!(
            "client: {:?}, server: {:?}",
            client.err(),
            server.err()
        )),
    }
}

fn peer_leaf(client: &client::TlsStream<DuplexStream>) -> Vec<u8> {
    let certs = client.get_ref().1.peer_certificates().unwrap();
    assert_eq!(certs.len(), 1, "the leaf alone, no chain");
    certs[0].to_vec()
}

async fn round_trip(pair: &mut Pair, message: &[u8]) {
    let (client, server) = pair;
    client.write_all(message).await.unwrap();
    client.flush().await.unwrap();
    let mut buf = vec![0u8; message.len()];
    server.read_exact(&mut buf).await.unwrap();
    assert_eq!(buf, message);
}

#[tokio::test]
async fn handshakes_get_the_current_leaf_and_a_swap_only_affects_new_ones() {
    let state = TlsState::new(p256_key(), LAN_IP, NOW_MS).unwrap();
    let pin = state.pin().clone();
    let first_leaf = state.leaf();

    let mut first = handshake(&state, &pin, &rustls::version::TLS13)
        .await
        .unwrap();
    assert_eq!(peer_leaf(&first.0), first_leaf.der().to_vec());
    assert_eq!(
        first.0.get_ref().1.protocol_version(),
        Some(ProtocolVersion::TLSv1_3)
    );
    assert_eq!(first.0.get_ref().1.alpn_protocol(), None);

    let second_leaf = state
        .remint("10.0.0.7".parse().unwrap(), NOW_MS + 60_000)
        .unwrap();
    let mut second = handshake(&state, &pin, &rustls::version::TLS13)
        .await
        .unwrap();
    assert_eq!(peer_leaf(&second.0), second_leaf.der().to_vec());
    assert_ne!(peer_leaf(&second.0), peer_leaf(&first.0));

    // The connection made before the swap is untouched.
    round_trip(&mut first, b"still here").await;
    round_trip(&mut second, b"new leaf").await;
}

#[tokio::test]
async fn tls12_clients_connect_too() {
    let state = TlsState::new(p256_key(), LAN_IP, NOW_MS).unwrap();
    let pin = state.pin().clone();
    let mut pair = handshake(&state, &pin, &rustls::version::TLS12)
        .await
        .unwrap();
    assert_eq!(
        pair.0.get_ref().1.protocol_version(),
        Some(ProtocolVersion::TLSv1_2)
    );
    round_trip(&mut pair, b"tls12").await;
}

#[tokio::test]
async fn a_client_pinning_another_key_refuses_the_leaf() {
    let state = TlsState::new(p256_key(), LAN_IP, NOW_MS).unwrap();
    let other_pin = p256_key().pin().clone();
    let err = handshake(&state, &other_pin, &rustls::version::TLS13)
        .await
        .unwrap_err();
    assert!(err.contains(tls_support::PIN_MISMATCH), "{err}");
}

#[tokio::test]
async fn an_rsa_2048_key_signs_handshakes() {
    // rcgen cannot generate RSA keys with `ring`; the system's openssl can, when present.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rsa.pem");
    let made = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ])
        .arg("-out")
        .arg(&path)
        .output();
    if !made.is_ok_and(|out| out.status.success()) {
        eprintln!("skipping RSA-2048 handshakes: `openssl genpkey` is not available");
        return;
    }
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let key = HostKey::load(&path).unwrap();
    let pin = key.pin().clone();
    let state = TlsState::new(key, LAN_IP, NOW_MS).unwrap();
    let (client, _server) = handshake(&state, &pin, &rustls::version::TLS13)
        .await
        .unwrap();
    assert_eq!(peer_leaf(&client), state.leaf().der().to_vec());
}
