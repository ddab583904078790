//! Host key hygiene and the pinned leaf at daemon start (SECURITY.md §4.1, SECURITY.md §4.10; §D3): the generated
//! key (SEC-02), a configured key that is missing (SEC-04), refused key kinds (SEC-05), a key of
//! another user, the pin of the presented leaf (SEC-11) and the leaf's fields and re-mint
//! (SEC-12). Every key is generated or fabricated at runtime; none is committed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;
use crate::tls_support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use appduct_daemon::address::StaticAddresses;
use appduct_daemon::daemon::{Daemon, DaemonHandle, DaemonOptions, StartError};
use appduct_daemon::tls::{HostKey, KeyError, KeyKind, SUPPORTED_KEYS};
use appduct_protocol::control::{DaemonStatus, LinkCreate, LinkCreateParams, NoParams};
use appduct_protocol::pin::SpkiPin;
use base64::Engine as _;
use daemon_support::*;
use rustls::pki_types::CertificateDer;
use sha2::Digest as _;
use tls_support::PinnedLeaf;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

// ---- DER and PEM fabrication ----------------------------------------------------------------

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
/// 1.2.840.10045.2.1 (id-ecPublicKey).
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// 1.3.132.0.35 (secp521r1).
const OID_P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];
/// 1.2.840.113549.1.5.13 (PBES2).
const OID_PBES2: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x05, 0x0d];

fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else if len < 0x100 {
        out.extend([0x81, len as u8]);
    } else {
        out.extend([0x82, (len >> 8) as u8, len as u8]);
    }
    out.extend_from_slice(content);
    out
}

/// The content of the DER element at the start of `input` with `tag`, and what follows it.
fn der_take(input: &[u8], tag: u8) -> (&[u8], &[u8]) {
    assert_eq!(input[0], tag);
    let (len, header) = match input[1] {
        n if n < 0x80 => (usize::from(n), 2),
        0x81 => (usize::from(input[2]), 3),
        0x82 => ((usize::from(input[2]) << 8) | usize::from(input[3]), 4),
        other => panic!("unexpected DER length byte {other:#x}"),
    };
    (&input[header..header + len], &input[header + len..])
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn generated(alg: &'static rcgen::SignatureAlgorithm) -> rcgen::KeyPair {
    rcgen::KeyPair::generate_for(alg).unwrap()
}

/// A PKCS#8 EC key on P-521: the shape `openssl genpkey` writes; `ring` cannot sign with it.
fn p521_pkcs8_pem() -> String {
    let mut algorithm = der(OID, OID_EC_PUBLIC_KEY);
    algorithm.extend(der(OID, OID_P521));
    let mut ec_private_key = der(INTEGER, &[1]);
    ec_private_key.extend(der(OCTET_STRING, &[7; 66]));
    let mut info = der(INTEGER, &[0]);
    info.extend(der(SEQUENCE, &algorithm));
    info.extend(der(OCTET_STRING, &der(SEQUENCE, &ec_private_key)));
    pem("PRIVATE KEY", &der(SEQUENCE, &info))
}

/// An `EncryptedPrivateKeyInfo` (PBES2 with an opaque ciphertext).
fn encrypted_pkcs8_pem() -> String {
    let mut body = der(SEQUENCE, &der(OID, OID_PBES2));
    body.extend(der(OCTET_STRING, &[9; 64]));
    pem("ENCRYPTED PRIVATE KEY", &der(SEQUENCE, &body))
}

/// The SEC1 `ECPrivateKey` of a real P-256 key, as `openssl ec` writes it.
fn sec1_p256_pem() -> String {
    let key = generated(&rcgen::PKCS_ECDSA_P256_SHA256);
    let (info, _) = der_take(key.serialized_der(), SEQUENCE);
    let (_, rest) = der_take(info, INTEGER);
    let (_, rest) = der_take(rest, SEQUENCE);
    let (ec_private_key, _) = der_take(rest, OCTET_STRING);
    pem("EC PRIVATE KEY", ec_private_key)
}

fn write_key(path: &Path, contents: &str) {
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

// ---- TLS --------------------------------------------------------------------------------------

/// The leaf the wss listener presents to a client pinning `pin` (the handshake must succeed).
async fn presented_leaf(daemon: &DaemonHandle, pin: SpkiPin) -> CertificateDer<'static> {
    let verifier = PinnedLeaf::new(pin);
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, daemon.wss_addr().port()));
    tls_support::connect_with(addr, "127.0.0.1", verifier.clone())
        .await
        .unwrap();
    let seen = verifier.seen();
    assert_eq!(seen.len(), 1);
    seen[0].clone()
}

/// `sha256/` + base64 of SHA-256 over the leaf's SubjectPublicKeyInfo, computed from the
/// certificate's own bytes, independently of `SpkiPin`.
fn pin_of_leaf(leaf: &[u8]) -> String {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).unwrap();
    let spki = cert.tbs_certificate.subject_pki.raw;
    let digest = sha2::Sha256::digest(spki);
    format!(
        "sha256/{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

// ---- tests ------------------------------------------------------------------------------------

/// SEC-02: a first start creates `key.pem` as 0600 EC P-256 PKCS#8; a second start keeps the
/// file's bytes and the pin.
#[tokio::test]
async fn sec_02_the_first_start_generates_a_private_p256_key_and_later_starts_keep_it() {
    let dir = state_dir();
    let key = dir.path().join("key.pem");
    assert!(!key.exists());
    let daemon = start(dir.path()).await;
    assert_eq!(mode(&key), 0o600);
    let bytes = std::fs::read(&key).unwrap();
    let text = std::str::from_utf8(&bytes).unwrap();
    assert!(text.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{text}");
    assert_eq!(text.matches("-----BEGIN").count(), 1);
    let loaded = HostKey::load(&key).unwrap();
    assert_eq!(loaded.kind(), KeyKind::EcP256);
    let pin = daemon.pin();
    assert_eq!(loaded.pin(), &pin);
    daemon.shutdown().await;

    let again = start(dir.path()).await;
    assert_eq!(std::fs::read(&key).unwrap(), bytes, "the key file changed");
    assert_eq!(again.pin(), pin);
    assert_eq!(mode(&key), 0o600);
    again.shutdown().await;
}

/// SEC-04: a configured `keyPath` that does not exist stops the daemon, naming the path, and
/// no key is generated there or at the default path.
#[tokio::test]
async fn sec_04_a_missing_configured_key_stops_the_start_and_creates_nothing() {
    let dir = state_dir();
    let elsewhere = state_dir();
    let configured = elsewhere.path().join("host.pem");
    std::fs::write(
        dir.path().join("config.json"),
        serde_json::json!({ "keyPath": configured }).to_string(),
    )
    .unwrap();

    let err = Daemon::start(DaemonOptions::for_tests(dir.path()))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StartError::Key(KeyError::Missing { path }) if *path == configured),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 65);
    assert!(
        err.to_string().contains(&*configured.to_string_lossy()),
        "{err}"
    );
    assert!(!configured.exists(), "the configured key was generated");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    for file in ["key.pem", "daemon.sock", "daemon.pid"] {
        assert!(!dir.path().join(file).exists(), "{file} was created");
    }
}

/// SEC-05: an encrypted PEM, an Ed25519 key, an EC P-521 key and a SEC1 P-256 key are each
/// refused at start with a message naming the problem and the supported kinds; a PKCS#8
/// EC P-384 key is accepted and pinned.
#[tokio::test]
async fn sec_05_unsupported_key_kinds_are_refused_at_start_and_p384_is_accepted() {
    let cases = [
        (
            "encrypted",
            encrypted_pkcs8_pem(),
            "an encrypted PKCS#8 key",
        ),
        (
            "ed25519",
            generated(&rcgen::PKCS_ED25519).serialize_pem(),
            "an Ed25519 key",
        ),
        ("p521", p521_pkcs8_pem(), "an EC P-521 key"),
        ("sec1", sec1_p256_pem(), "a SEC1 EC PRIVATE KEY block"),
    ];
    for (what, contents, found) in cases {
        let dir = state_dir();
        let key = dir.path().join("key.pem");
        write_key(&key, &contents);
        let err = Daemon::start(DaemonOptions::for_tests(dir.path()))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StartError::Key(KeyError::Unsupported { .. })),
            "{what}: {err:?}"
        );
        assert_eq!(err.exit_code(), 65, "{what}");
        let message = err.to_string();
        for needle in [found, SUPPORTED_KEYS, &*key.to_string_lossy()] {
            assert!(
                message.contains(needle),
                "{what}: {needle:?} not in {message}"
            );
        }
        assert_eq!(std::fs::read_to_string(&key).unwrap(), contents, "{what}");
        assert!(!dir.path().join("daemon.sock").exists(), "{what}");
    }

    let dir = state_dir();
    let key = dir.path().join("key.pem");
    write_key(
        &key,
        &generated(&rcgen::PKCS_ECDSA_P384_SHA384).serialize_pem(),
    );
    let daemon = start(dir.path()).await;
    let loaded = HostKey::load(&key).unwrap();
    assert_eq!(loaded.kind(), KeyKind::EcP384);
    assert_eq!(daemon.pin(), *loaded.pin());
    let leaf = presented_leaf(&daemon, daemon.pin()).await;
    assert_eq!(pin_of_leaf(leaf.as_ref()), loaded.pin().to_string());
    daemon.shutdown().await;
}

/// §D3.1, SECURITY.md §4.5: a key file owned by another uid is refused even with mode 0600.
#[tokio::test]
async fn a_key_owned_by_another_user_is_refused() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipping: handing a key to another uid needs root");
        return;
    }
    let dir = state_dir();
    let key = dir.path().join("key.pem");
    write_key(
        &key,
        &generated(&rcgen::PKCS_ECDSA_P256_SHA256).serialize_pem(),
    );
    std::os::unix::fs::chown(&key, Some(4242), Some(4242)).unwrap();
    let err = Daemon::start(DaemonOptions::for_tests(dir.path()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            StartError::Key(KeyError::WrongOwner { owner: 4242, .. })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("chmod 600"), "{err}");
}

/// SEC-11: the pin of the SPKI inside the leaf the wss listener presents equals
/// `daemon.status.pinnedKeys[0]` and the pin of the key file (the `spki-pin` conformance
/// vector is `protocol/tests/conformance.rs`).
#[tokio::test]
async fn sec_11_the_presented_leaf_the_status_and_the_key_share_one_pin() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let status = memory_client(&daemon)
        .call::<DaemonStatus>(NoParams {})
        .await
        .unwrap();
    assert_eq!(status.pinned_keys.len(), 1);
    let key_pin = HostKey::load(&dir.path().join("key.pem"))
        .unwrap()
        .pin()
        .to_string();
    let leaf = presented_leaf(&daemon, SpkiPin::parse(&status.pinned_keys[0]).unwrap()).await;
    assert_eq!(pin_of_leaf(leaf.as_ref()), status.pinned_keys[0]);
    assert_eq!(status.pinned_keys[0], key_pin);
    assert_eq!(leaf, daemon.leaf_der());
    daemon.shutdown().await;
}

/// SEC-12: the presented leaf is `CA:false` with EKU `serverAuth`, valid for at most
/// 7 days + 5 minutes, and the re-mint after an address change keeps the pin.
#[tokio::test]
async fn sec_12_the_leaf_is_a_short_lived_server_certificate_and_a_re_mint_keeps_the_pin() {
    let dir = state_dir();
    let lan = |s: &str| s.parse::<IpAddr>().unwrap();
    let addresses = StaticAddresses::new([lan("192.168.1.20")]);
    let daemon = Daemon::start(
        DaemonOptions::for_tests(dir.path())
            .addresses(addresses.clone())
            .detect_address(),
    )
    .await
    .unwrap();
    let pin = daemon.pin();
    let first = presented_leaf(&daemon, pin.clone()).await;
    {
        let (_, cert) = x509_parser::parse_x509_certificate(first.as_ref()).unwrap();
        let basic = cert.basic_constraints().unwrap().unwrap();
        assert!(!basic.value.ca, "the leaf must not be a CA");
        let eku = cert.extended_key_usage().unwrap().unwrap();
        assert!(eku.value.server_auth);
        assert!(!eku.value.any && !eku.value.client_auth);
        let validity = cert.validity();
        let lifetime = validity.not_after.timestamp() - validity.not_before.timestamp();
        assert!(lifetime <= 7 * 86_400 + 300, "valid for {lifetime} s");
    }

    addresses.set([lan("192.168.1.30")]);
    let link = memory_client(&daemon)
        .call::<LinkCreate>(LinkCreateParams::default())
        .await
        .unwrap();
    assert_eq!(link.endpoint.address, "192.168.1.30");
    let second = presented_leaf(&daemon, pin.clone()).await;
    assert_ne!(second, first, "no re-mint after the address change");
    assert_eq!(pin_of_leaf(second.as_ref()), pin.to_string());
    assert_eq!(link.pin, pin.to_string());
    daemon.shutdown().await;
}
