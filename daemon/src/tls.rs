//! Host key, leaf certificate and the TLS server configuration of the native `wss://` listener
//! (§D2.1, §D3).
//!
//! The key is loaded once at start (generated only at the default path, never overwritten), its
//! pin is computed, and leaves minted from it are served through [`LeafResolver`], which is
//! swapped atomically on re-mint: new handshakes get the new leaf, established connections keep
//! theirs, and the pin never changes because the key never does. Private key bytes are never
//! written anywhere but the key file, and never appear in errors or `Debug` output.

use appduct_client::platform::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use appduct_protocol::limits::{LEAF_BACKDATE_S, LEAF_RENEW_BEFORE_S, LEAF_VALIDITY_S};
use appduct_protocol::pin::SpkiPin;
use appduct_protocol::sealed::StaticKeypair;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber, SignatureAlgorithm,
};
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::{CertifiedKey, SigningKey};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use time::OffsetDateTime;

/// The key kinds the daemon accepts, as named in every refusal (§D3.1).
pub const SUPPORTED_KEYS: &str =
    "EC P-256, EC P-384 or RSA of 2048 bits or more, as unencrypted PKCS#8 PEM";
/// Subject and issuer common name of every leaf (§D3.2).
pub const LEAF_COMMON_NAME: &str = "Appduct Host";

/// A PKCS#8 RSA-4096 key is about 3.3 KB of PEM; anything this large is not a key we accept.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;
const RSA_MIN_BITS: u32 = 2048;
/// `ring` refuses to load RSA private keys with larger moduli.
const RSA_MAX_BITS: u32 = 4096;
const SERIAL_BYTES: usize = 16;

// DER content bytes of the object identifiers that classify a PKCS#8 key.
const OID_RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_RSASSA_PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_DSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x01];
const OID_X25519: &[u8] = &[0x2b, 0x65, 0x6e];
const OID_X448: &[u8] = &[0x2b, 0x65, 0x6f];
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];
const OID_ED448: &[u8] = &[0x2b, 0x65, 0x71];
const OID_CURVE_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_CURVE_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
const OID_CURVE_P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];
const OID_CURVE_P224: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x21];
const OID_CURVE_SECP256K1: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x0a];

const DER_INTEGER: u8 = 0x02;
const DER_OCTET_STRING: u8 = 0x04;
const DER_OID: u8 = 0x06;
const DER_SEQUENCE: u8 = 0x30;

/// A host key the daemon can sign with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    EcP256,
    EcP384,
    Rsa { bits: u32 },
}

impl KeyKind {
    /// Leaf signature algorithm per key kind (§D3.2).
    fn signature_algorithm(self) -> &'static SignatureAlgorithm {
        match self {
            KeyKind::EcP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            KeyKind::EcP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            KeyKind::Rsa { .. } => &rcgen::PKCS_RSA_SHA256,
        }
    }

    /// The key usage that accompanies `digitalSignature` in the leaf.
    fn second_key_usage(self) -> KeyUsagePurpose {
        match self {
            KeyKind::EcP256 | KeyKind::EcP384 => KeyUsagePurpose::KeyAgreement,
            KeyKind::Rsa { .. } => KeyUsagePurpose::KeyEncipherment,
        }
    }
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyKind::EcP256 => f.write_str("EC P-256"),
            KeyKind::EcP384 => f.write_str("EC P-384"),
            KeyKind::Rsa { bits } => write!(f, "RSA {bits}-bit"),
        }
    }
}

/// What a refused key file holds; its `Display` completes "the host key <path> holds …".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoundKey {
    TooLarge,
    NotText,
    NoKeyBlock {
        other_blocks: Vec<String>,
    },
    SeveralKeyBlocks(usize),
    EncryptedPkcs8,
    /// `-----BEGIN EC PRIVATE KEY-----`.
    Sec1,
    /// `-----BEGIN RSA PRIVATE KEY-----`.
    Pkcs1,
    OtherKeyBlock(String),
    /// One PKCS#8 block plus blocks of these labels.
    ExtraBlocks(Vec<String>),
    /// A named curve other than P-256 and P-384, e.g. `P-521`.
    EcCurve(&'static str),
    /// An unnamed curve, by dotted OID.
    EcOtherCurve(String),
    EcExplicitParameters,
    Ed25519,
    Ed448,
    X25519,
    X448,
    Dsa,
    RsaPss,
    RsaTooSmall(u32),
    RsaTooLarge(u32),
    /// Any other PKCS#8 algorithm, by dotted OID.
    OtherAlgorithm(String),
    Malformed(&'static str),
    /// Classified as supported, but `ring` refused the key material.
    Unloadable(KeyKind),
}

impl FoundKey {
    /// SEC1 and PKCS#1 files hold a usable key in the wrong container.
    fn conversion_hint(&self) -> &'static str {
        match self {
            FoundKey::Sec1 | FoundKey::Pkcs1 => {
                "; `openssl pkcs8 -topk8 -nocrypt` converts it to PKCS#8"
            }
            _ => "",
        }
    }
}

impl fmt::Display for FoundKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FoundKey::TooLarge => write!(f, "more than {MAX_KEY_FILE_BYTES} bytes"),
            FoundKey::NotText => f.write_str("binary data, not PEM text"),
            FoundKey::NoKeyBlock { other_blocks } if other_blocks.is_empty() => {
                f.write_str("no key block")
            }
            FoundKey::NoKeyBlock { other_blocks } => {
                write!(f, "no key block (only {})", other_blocks.join(", "))
            }
            FoundKey::SeveralKeyBlocks(n) => write!(f, "several key blocks ({n})"),
            FoundKey::EncryptedPkcs8 => f.write_str("an encrypted PKCS#8 key"),
            FoundKey::Sec1 => f.write_str("a SEC1 EC PRIVATE KEY block"),
            FoundKey::Pkcs1 => f.write_str("a PKCS#1 RSA PRIVATE KEY block"),
            FoundKey::OtherKeyBlock(label) => write!(f, "a PEM block labelled {label}"),
            FoundKey::ExtraBlocks(labels) => write!(
                f,
                "a PKCS#8 key together with other PEM blocks ({})",
                labels.join(", ")
            ),
            FoundKey::EcCurve(name) => write!(f, "an EC {name} key"),
            FoundKey::EcOtherCurve(oid) => write!(f, "an EC key on curve {oid}"),
            FoundKey::EcExplicitParameters => {
                f.write_str("an EC key with explicit curve parameters")
            }
            FoundKey::Ed25519 => f.write_str("an Ed25519 key"),
            FoundKey::Ed448 => f.write_str("an Ed448 key"),
            FoundKey::X25519 => f.write_str("an X25519 key"),
            FoundKey::X448 => f.write_str("an X448 key"),
            FoundKey::Dsa => f.write_str("a DSA key"),
            FoundKey::RsaPss => f.write_str("an RSA-PSS key"),
            FoundKey::RsaTooSmall(bits) => write!(f, "an RSA key of {bits} bits"),
            FoundKey::RsaTooLarge(bits) => write!(
                f,
                "an RSA key of {bits} bits (ring loads RSA keys of at most {RSA_MAX_BITS} bits)"
            ),
            FoundKey::OtherAlgorithm(oid) => write!(f, "a key of algorithm {oid}"),
            FoundKey::Malformed(why) => write!(f, "a malformed key ({why})"),
            FoundKey::Unloadable(kind) => write!(
                f,
                "an {kind} key that ring cannot load (damaged or inconsistent key data)"
            ),
        }
    }
}

/// Why the host key cannot be used. Every variant names the path; none carries key material.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(
        "host key {path} does not exist; a configured keyPath is never generated \
         (create it with `appduct keygen --out {path}` or fix the path)"
    )]
    Missing { path: PathBuf },
    #[error("host key {path} already exists")]
    AlreadyExists { path: PathBuf },
    #[error("host key {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "host key {path} is not a regular file; it must be a regular file owned by the daemon's \
         user with no group or other access (`chmod 600 {path}`)"
    )]
    NotRegularFile { path: PathBuf },
    #[error(
        "host key {path} is owned by uid {owner}, not by the daemon's effective uid {euid}; \
         give it to that user and run `chmod 600 {path}`"
    )]
    WrongOwner {
        path: PathBuf,
        owner: u32,
        euid: u32,
    },
    #[error("host key {path} has mode {mode:04o}, open to group or others; run `chmod 600 {path}`")]
    Permissions { path: PathBuf, mode: u32 },
    #[error("host key {path} holds {found}; supported keys: {SUPPORTED_KEYS}{hint}", hint = found.conversion_hint())]
    Unsupported { path: PathBuf, found: FoundKey },
    #[error("could not generate a host key at {path}: {reason}")]
    Generate { path: PathBuf, reason: String },
}

/// Whether [`HostKey::load_or_generate`] found the key or created it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    Loaded,
    Generated,
}

/// Whether [`generate_key_file`] may replace an existing file (`appduct keygen --force`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overwrite {
    Never,
    Replace,
}

/// The loaded host key: signs leaves (rcgen) and handshakes (rustls), both on `ring`.
pub struct HostKey {
    path: PathBuf,
    kind: KeyKind,
    pin: SpkiPin,
    spki_der: Vec<u8>,
    cert_signer: KeyPair,
    tls_signer: Arc<dyn SigningKey>,
    /// The sealed transport's X25519 static key, derived from the key's PKCS#8 DER (issue #23);
    /// held in memory only.
    sealed: Arc<StaticKeypair>,
}

impl fmt::Debug for HostKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostKey")
            .field("path", &self.path)
            .field("kind", &self.kind)
            .field("pin", &self.pin)
            .finish_non_exhaustive()
    }
}

impl HostKey {
    /// Loads the key at `path` after the file checks of §D3.1 (symlinks resolved, regular
    /// file, owned by the effective uid, `mode & 0o077 == 0`) and the key-kind checks.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let (resolved, bytes) = read_checked(path)?;
        let unsupported = |found| KeyError::Unsupported {
            path: resolved.clone(),
            found,
        };
        let (kind, pkcs8) = classify_key_file(&bytes).map_err(unsupported)?;
        let sealed = Arc::new(StaticKeypair::from_host_key_der(&pkcs8));
        let cert_signer = KeyPair::from_pkcs8_der_and_sign_algo(
            &PrivatePkcs8KeyDer::from(pkcs8.as_slice()),
            kind.signature_algorithm(),
        )
        .map_err(|_| unsupported(FoundKey::Unloadable(kind)))?;
        let tls_signer = provider()
            .key_provider
            .load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8)))
            .map_err(|_| unsupported(FoundKey::Unloadable(kind)))?;
        // The pin comes from rustls' view of the key; every minted leaf is checked against it.
        let spki_der = tls_signer
            .public_key()
            .map(|spki| spki.as_ref().to_vec())
            .ok_or_else(|| unsupported(FoundKey::Unloadable(kind)))?;
        Ok(Self {
            pin: SpkiPin::from_spki_der(&spki_der),
            path: resolved,
            kind,
            spki_der,
            cert_signer,
            tls_signer,
            sealed,
        })
    }

    /// Loads the key at `path`; when there is no file and `generate_if_missing` is set (only for
    /// the default `<state>/key.pem`), first generates an EC P-256 key there atomically. A key
    /// that appears concurrently wins and is loaded instead.
    pub fn load_or_generate(
        path: &Path,
        generate_if_missing: bool,
    ) -> Result<(Self, KeySource), KeyError> {
        match Self::load(path) {
            Err(KeyError::Missing { .. }) if generate_if_missing => {
                let source = match write_generated_key(path, Overwrite::Never)? {
                    WriteOutcome::Existed => KeySource::Loaded,
                    WriteOutcome::Created | WriteOutcome::Replaced => KeySource::Generated,
                };
                Ok((Self::load(path)?, source))
            }
            other => other.map(|key| (key, KeySource::Loaded)),
        }
    }

    /// The key file after symlink resolution.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// The one pin of this key (`daemon.status.pinnedKeys[0]`).
    pub fn pin(&self) -> &SpkiPin {
        &self.pin
    }

    /// DER SubjectPublicKeyInfo of the key.
    pub fn spki_der(&self) -> &[u8] {
        &self.spki_der
    }

    /// The sealed transport's static key pair (PROTOCOL.md "Sealed transport").
    pub fn sealed_keys(&self) -> &Arc<StaticKeypair> {
        &self.sealed
    }

    /// The sealed static public key as carried in `sealedKey`: unpadded base64url.
    pub fn sealed_public_key(&self) -> String {
        sealed_key_text(self.sealed.public_key())
    }

    /// Mints a leaf for `advertised_ip` at `now_unix_ms` per the table of §D3.2.
    pub fn mint_leaf(&self, advertised_ip: IpAddr, now_unix_ms: u64) -> Result<Leaf, TlsError> {
        let out_of_range = || TlsError::TimeOutOfRange { now_unix_ms };
        let now_s = i64::try_from(now_unix_ms / 1000).map_err(|_| out_of_range())?;
        let not_before_s = i64::try_from(LEAF_BACKDATE_S)
            .ok()
            .and_then(|backdate| now_s.checked_sub(backdate))
            .ok_or_else(out_of_range)?;
        let not_after_s = i64::try_from(LEAF_VALIDITY_S)
            .ok()
            .and_then(|validity| now_s.checked_add(validity))
            .ok_or_else(out_of_range)?;

        let mut serial = random_bytes::<SERIAL_BYTES>()?;
        // A positive serial of at most 16 bytes, as RFC 5280 wants.
        serial[0] &= 0x7f;

        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, LEAF_COMMON_NAME);
        let localhost = rcgen::Ia5String::try_from("localhost")?;
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut subject_alt_names = vec![SanType::DnsName(localhost), SanType::IpAddress(loopback)];
        if advertised_ip != loopback {
            subject_alt_names.push(SanType::IpAddress(advertised_ip));
        }

        let mut params = CertificateParams::default();
        params.distinguished_name = name;
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        params.not_before =
            OffsetDateTime::from_unix_timestamp(not_before_s).map_err(|_| out_of_range())?;
        params.not_after =
            OffsetDateTime::from_unix_timestamp(not_after_s).map_err(|_| out_of_range())?;
        // ExplicitNoCa writes basicConstraints CA:false, marked critical.
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            self.kind.second_key_usage(),
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.subject_alt_names = subject_alt_names;

        let der = params.self_signed(&self.cert_signer)?.der().clone();
        let leaf_pin = SpkiPin::from_certificate_der(&der)
            .map_err(|e| TlsError::Certificate(e.to_string()))?;
        if leaf_pin != self.pin {
            return Err(TlsError::PinMismatch {
                key: self.pin.clone(),
                leaf: leaf_pin,
            });
        }
        Ok(Leaf {
            der,
            advertised_ip,
            not_before_unix_s: not_before_s,
            not_after_unix_s: not_after_s,
        })
    }
}

/// Failures after the key is loaded: minting, and building the TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("the operating system's random number generator failed")]
    Random,
    #[error("the clock reads {now_unix_ms} ms, outside what a certificate can carry")]
    TimeOutOfRange { now_unix_ms: u64 },
    #[error("minting the leaf certificate failed: {0}")]
    Mint(#[from] rcgen::Error),
    #[error("the minted leaf is unusable: {0}")]
    Certificate(String),
    #[error("the minted leaf's pin {leaf} differs from the key's pin {key}")]
    PinMismatch { key: SpkiPin, leaf: SpkiPin },
    #[error("building the TLS server configuration failed: {0}")]
    Rustls(#[from] rustls::Error),
}

/// One minted leaf certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaf {
    der: CertificateDer<'static>,
    advertised_ip: IpAddr,
    not_before_unix_s: i64,
    not_after_unix_s: i64,
}

impl Leaf {
    pub fn der(&self) -> &CertificateDer<'static> {
        &self.der
    }

    /// The advertised address the leaf was minted for (in its SANs unless it is 127.0.0.1).
    pub fn advertised_ip(&self) -> IpAddr {
        self.advertised_ip
    }

    pub fn not_before_unix_s(&self) -> i64 {
        self.not_before_unix_s
    }

    pub fn not_after_unix_s(&self) -> i64 {
        self.not_after_unix_s
    }

    /// Re-mint when the advertised address changed or less than 24 h of validity remain
    /// (§D3.2).
    pub fn needs_remint(&self, advertised_ip: IpAddr, now_unix_ms: u64) -> bool {
        if advertised_ip != self.advertised_ip {
            return true;
        }
        let remaining_ms = i128::from(self.not_after_unix_s) * 1000 - i128::from(now_unix_ms);
        remaining_ms < i128::from(LEAF_RENEW_BEFORE_S) * 1000
    }
}

/// Serves the current leaf to every handshake; swapped atomically on re-mint.
#[derive(Debug)]
pub struct LeafResolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl LeafResolver {
    fn new(certified: CertifiedKey) -> Self {
        Self {
            current: RwLock::new(Arc::new(certified)),
        }
    }

    /// The certificate and key the next handshake gets.
    pub fn current(&self) -> Arc<CertifiedKey> {
        // The guarded value is a whole Arc, replaced in one assignment, so a poisoned lock
        // still holds a consistent value.
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn swap(&self, certified: CertifiedKey) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(certified);
    }
}

impl ResolvesServerCert for LeafResolver {
    // SNI is ignored (§D2.1): every client gets the one leaf.
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A sealed static public key as the control plane shows it (`sealedKey`): unpadded base64url.
pub fn sealed_key_text(key: &[u8; 32]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key)
}

/// The daemon's TLS identity: host key, current leaf and the server configuration of the
/// `wss://` listener. Shared behind an `Arc`; re-minting takes `&self`.
pub struct TlsState {
    key: HostKey,
    leaf: Mutex<Arc<Leaf>>,
    resolver: Arc<LeafResolver>,
    server_config: Arc<ServerConfig>,
}

impl fmt::Debug for TlsState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsState")
            .field("key", &self.key)
            .field("leaf", &self.leaf())
            .finish_non_exhaustive()
    }
}

impl TlsState {
    /// Mints the first leaf and builds the server configuration around it.
    pub fn new(key: HostKey, advertised_ip: IpAddr, now_unix_ms: u64) -> Result<Self, TlsError> {
        let leaf = key.mint_leaf(advertised_ip, now_unix_ms)?;
        let resolver = Arc::new(LeafResolver::new(certified_key(&key, &leaf)?));
        let server_config = Arc::new(server_config(Arc::clone(&resolver) as _)?);
        Ok(Self {
            key,
            leaf: Mutex::new(Arc::new(leaf)),
            resolver,
            server_config,
        })
    }

    pub fn key(&self) -> &HostKey {
        &self.key
    }

    pub fn pin(&self) -> &SpkiPin {
        self.key.pin()
    }

    /// The leaf new handshakes get.
    pub fn leaf(&self) -> Arc<Leaf> {
        Arc::clone(&self.leaf.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The configuration for the `wss://` listener's acceptor; it follows every re-mint.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.server_config)
    }

    pub fn resolver(&self) -> Arc<LeafResolver> {
        Arc::clone(&self.resolver)
    }

    pub fn needs_remint(&self, advertised_ip: IpAddr, now_unix_ms: u64) -> bool {
        self.leaf().needs_remint(advertised_ip, now_unix_ms)
    }

    /// Mints a new leaf and makes it the one served, unconditionally.
    pub fn remint(&self, advertised_ip: IpAddr, now_unix_ms: u64) -> Result<Arc<Leaf>, TlsError> {
        let mut current = self.leaf.lock().unwrap_or_else(PoisonError::into_inner);
        self.install(&mut current, advertised_ip, now_unix_ms)
    }

    /// Re-mints only when [`Leaf::needs_remint`] says so, checking and minting under one lock
    /// so concurrent callers mint once. Returns the new leaf when one was minted.
    pub fn renew_if_needed(
        &self,
        advertised_ip: IpAddr,
        now_unix_ms: u64,
    ) -> Result<Option<Arc<Leaf>>, TlsError> {
        let mut current = self.leaf.lock().unwrap_or_else(PoisonError::into_inner);
        if !current.needs_remint(advertised_ip, now_unix_ms) {
            return Ok(None);
        }
        self.install(&mut current, advertised_ip, now_unix_ms)
            .map(Some)
    }

    fn install(
        &self,
        current: &mut Arc<Leaf>,
        advertised_ip: IpAddr,
        now_unix_ms: u64,
    ) -> Result<Arc<Leaf>, TlsError> {
        let leaf = self.key.mint_leaf(advertised_ip, now_unix_ms)?;
        self.resolver.swap(certified_key(&self.key, &leaf)?);
        *current = Arc::new(leaf);
        Ok(Arc::clone(current))
    }
}

fn certified_key(key: &HostKey, leaf: &Leaf) -> Result<CertifiedKey, TlsError> {
    let certified = CertifiedKey::new(vec![leaf.der.clone()], Arc::clone(&key.tls_signer));
    certified.keys_match()?;
    Ok(certified)
}

/// rustls on `ring`, TLS 1.3 and 1.2, no client authentication, no ALPN (§D2.1).
fn server_config(resolver: Arc<dyn ResolvesServerCert>) -> Result<ServerConfig, rustls::Error> {
    Ok(ServerConfig::builder_with_provider(Arc::new(provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(resolver))
}

fn provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

fn random_bytes<const N: usize>() -> Result<[u8; N], TlsError> {
    appduct_client::random::random_bytes().map_err(|_| TlsError::Random)
}

/// Creates a new EC P-256 PKCS#8 key at `path` with mode 0600, atomically (`appduct keygen`).
/// With [`Overwrite::Never`] an existing file is an error and is left untouched; with
/// [`Overwrite::Replace`] the new key is renamed over it. Returns whether a file was replaced.
pub fn generate_key_file(path: &Path, overwrite: Overwrite) -> Result<bool, KeyError> {
    match write_generated_key(path, overwrite)? {
        WriteOutcome::Created => Ok(false),
        WriteOutcome::Replaced => Ok(true),
        WriteOutcome::Existed => Err(KeyError::AlreadyExists {
            path: path.to_owned(),
        }),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteOutcome {
    Created,
    Replaced,
    /// [`Overwrite::Never`] and a file already held the name; it was not touched.
    Existed,
}

/// Temporary file (`O_CREAT|O_EXCL|O_NOFOLLOW`, 0600) in the key's directory, fsync, then a
/// hard link (never overwrites) or a rename (replaces), removal of the temporary name and an
/// fsync of the directory (§D3.1).
fn write_generated_key(path: &Path, overwrite: Overwrite) -> Result<WriteOutcome, KeyError> {
    let io_err = |source| KeyError::Io {
        path: path.to_owned(),
        source,
    };
    let generate_err = |reason: String| KeyError::Generate {
        path: path.to_owned(),
        reason,
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| generate_err("the path has no file name".into()))?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let pem = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| generate_err(e.to_string()))?
        .serialize_pem();
    let suffix = random_bytes::<8>().map_err(|e| generate_err(e.to_string()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        suffix
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ));
    let tmp = dir.join(tmp_name);

    let written = write_private_file(&tmp, pem.as_bytes());
    let placed = written.and_then(|()| match overwrite {
        Overwrite::Never => match fs::hard_link(&tmp, path) {
            Ok(()) => Ok(WriteOutcome::Created),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(WriteOutcome::Existed),
            Err(e) => Err(e),
        },
        Overwrite::Replace => {
            let existed = fs::symlink_metadata(path).is_ok();
            fs::rename(&tmp, path).map(|()| {
                if existed {
                    WriteOutcome::Replaced
                } else {
                    WriteOutcome::Created
                }
            })
        }
    });
    // After a rename the temporary name is already gone; otherwise it must not linger.
    let removed = match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    let outcome = placed.map_err(io_err)?;
    removed.map_err(io_err)?;
    appduct_client::platform::sync_dir(dir).map_err(io_err)?;
    Ok(outcome)
}

fn write_private_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    // The one home for opening a file to write (O_EXCL|O_NOFOLLOW, 0600, fstat checks).
    let mut file = appduct_client::state_dir::create_new(path)?;
    // The umask can only narrow 0600; set it exactly so the key is readable by its owner.
    appduct_client::platform::fchmod(&file, 0o600)?;
    file.write_all(contents)?;
    file.sync_all()
}

fn nofollow_flag() -> i32 {
    appduct_client::platform::o_nofollow()
}

/// Opens the resolved key file and checks the opened file itself, so the checks and the read
/// see the same inode.
fn read_checked(path: &Path) -> Result<(PathBuf, Vec<u8>), KeyError> {
    let resolved = fs::canonicalize(path).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => KeyError::Missing {
            path: path.to_owned(),
        },
        _ => KeyError::Io {
            path: path.to_owned(),
            source,
        },
    })?;
    let io_err = |source| KeyError::Io {
        path: resolved.clone(),
        source,
    };
    // O_NOFOLLOW refuses a symlink swapped in after resolution; O_NONBLOCK keeps a FIFO from
    // blocking the open (it is refused as not regular right after).
    let nonblock = appduct_client::platform::o_nonblock();
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nofollow_flag() | nonblock)
        .open(&resolved)
        .map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    if !meta.file_type().is_file() {
        return Err(KeyError::NotRegularFile { path: resolved });
    }
    let euid = appduct_client::platform::euid();
    if meta.uid() != euid {
        return Err(KeyError::WrongOwner {
            path: resolved,
            owner: meta.uid(),
            euid,
        });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(KeyError::Permissions {
            path: resolved,
            mode: meta.mode() & 0o7777,
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(KeyError::Unsupported {
            path: resolved,
            found: FoundKey::TooLarge,
        });
    }
    Ok((resolved, bytes))
}

struct PemBlock {
    label: String,
    base64: String,
    terminated: bool,
}

/// RFC 7468 blocks; text outside them is ignored.
fn pem_blocks(text: &str) -> Vec<PemBlock> {
    let mut blocks = Vec::new();
    let mut open: Option<PemBlock> = None;
    for line in text.lines().map(str::trim) {
        let begin = line
            .strip_prefix("-----BEGIN ")
            .and_then(|rest| rest.strip_suffix("-----"));
        let end = line
            .strip_prefix("-----END ")
            .and_then(|rest| rest.strip_suffix("-----"));
        match (open.take(), begin, end) {
            (None, Some(label), _) => {
                open = Some(PemBlock {
                    label: label.to_owned(),
                    base64: String::new(),
                    terminated: false,
                });
            }
            (None, None, _) => {}
            (Some(mut block), _, Some(label)) => {
                block.terminated = label == block.label;
                blocks.push(block);
            }
            (Some(mut block), _, None) => {
                block.base64.push_str(line);
                open = Some(block);
            }
        }
    }
    blocks.extend(open);
    blocks
}

/// Finds the one unencrypted PKCS#8 block and classifies the key inside it.
fn classify_key_file(bytes: &[u8]) -> Result<(KeyKind, Vec<u8>), FoundKey> {
    let text = std::str::from_utf8(bytes).map_err(|_| FoundKey::NotText)?;
    let (keys, others): (Vec<PemBlock>, Vec<PemBlock>) = pem_blocks(text)
        .into_iter()
        .partition(|block| block.label.ends_with("PRIVATE KEY"));
    let other_labels = || others.iter().map(|b| b.label.clone()).collect::<Vec<_>>();
    let block = match keys.as_slice() {
        [] => {
            return Err(FoundKey::NoKeyBlock {
                other_blocks: other_labels(),
            });
        }
        [one] => one,
        several => return Err(FoundKey::SeveralKeyBlocks(several.len())),
    };
    match block.label.as_str() {
        "PRIVATE KEY" => {}
        "ENCRYPTED PRIVATE KEY" => return Err(FoundKey::EncryptedPkcs8),
        "EC PRIVATE KEY" => return Err(FoundKey::Sec1),
        "RSA PRIVATE KEY" => return Err(FoundKey::Pkcs1),
        other => return Err(FoundKey::OtherKeyBlock(other.to_owned())),
    }
    if !block.terminated {
        return Err(FoundKey::Malformed(
            "the PRIVATE KEY block has no matching END line",
        ));
    }
    if !others.is_empty() {
        return Err(FoundKey::ExtraBlocks(other_labels()));
    }
    let der = STANDARD
        .decode(&block.base64)
        .map_err(|_| FoundKey::Malformed("the PRIVATE KEY block is not valid base64"))?;
    let kind = classify_pkcs8(&der)?;
    Ok((kind, der))
}

/// Reads one DER element: (tag, content, rest).
fn der_next(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (len_bytes, rest) = rest.split_at(n);
        let len = len_bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, rest)
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

fn der_expect<'a>(
    input: &'a [u8],
    tag: u8,
    what: &'static str,
) -> Result<(&'a [u8], &'a [u8]), FoundKey> {
    match der_next(input) {
        Some((t, content, rest)) if t == tag => Ok((content, rest)),
        _ => Err(FoundKey::Malformed(what)),
    }
}

/// Classifies a PKCS#8 PrivateKeyInfo by its algorithm identifier (and RSA modulus size).
fn classify_pkcs8(der: &[u8]) -> Result<KeyKind, FoundKey> {
    let not_pkcs8 = "not a PKCS#8 PrivateKeyInfo";
    let (info, trailing) = der_expect(der, DER_SEQUENCE, not_pkcs8)?;
    if !trailing.is_empty() {
        return Err(FoundKey::Malformed("trailing bytes after the PKCS#8 key"));
    }
    let (tag, version, rest) = der_next(info).ok_or(FoundKey::Malformed(not_pkcs8))?;
    // EncryptedPrivateKeyInfo starts with an AlgorithmIdentifier where PrivateKeyInfo has its
    // version, so a mislabelled encrypted key is still recognised.
    if tag == DER_SEQUENCE {
        return Err(FoundKey::EncryptedPkcs8);
    }
    if tag != DER_INTEGER || !(version == [0] || version == [1]) {
        return Err(FoundKey::Malformed(not_pkcs8));
    }
    let (algorithm, rest) = der_expect(rest, DER_SEQUENCE, not_pkcs8)?;
    let (oid, parameters) = der_expect(algorithm, DER_OID, not_pkcs8)?;
    let (private_key, _attributes) = der_expect(rest, DER_OCTET_STRING, not_pkcs8)?;
    match oid {
        OID_RSA_ENCRYPTION => {
            let bits = rsa_modulus_bits(private_key)?;
            if bits < RSA_MIN_BITS {
                Err(FoundKey::RsaTooSmall(bits))
            } else if bits > RSA_MAX_BITS {
                Err(FoundKey::RsaTooLarge(bits))
            } else {
                Ok(KeyKind::Rsa { bits })
            }
        }
        OID_EC_PUBLIC_KEY => match der_next(parameters) {
            Some((DER_OID, curve, _)) => match curve {
                OID_CURVE_P256 => Ok(KeyKind::EcP256),
                OID_CURVE_P384 => Ok(KeyKind::EcP384),
                OID_CURVE_P521 => Err(FoundKey::EcCurve("P-521")),
                OID_CURVE_P224 => Err(FoundKey::EcCurve("P-224")),
                OID_CURVE_SECP256K1 => Err(FoundKey::EcCurve("secp256k1")),
                other => Err(FoundKey::EcOtherCurve(dotted_oid(other))),
            },
            _ => Err(FoundKey::EcExplicitParameters),
        },
        OID_ED25519 => Err(FoundKey::Ed25519),
        OID_ED448 => Err(FoundKey::Ed448),
        OID_X25519 => Err(FoundKey::X25519),
        OID_X448 => Err(FoundKey::X448),
        OID_DSA => Err(FoundKey::Dsa),
        OID_RSASSA_PSS => Err(FoundKey::RsaPss),
        other => Err(FoundKey::OtherAlgorithm(dotted_oid(other))),
    }
}

/// Bit length of the modulus of a PKCS#1 RSAPrivateKey.
fn rsa_modulus_bits(rsa_private_key: &[u8]) -> Result<u32, FoundKey> {
    let bad = "the RSA key is not a PKCS#1 RSAPrivateKey";
    let (key, _) = der_expect(rsa_private_key, DER_SEQUENCE, bad)?;
    let (_version, rest) = der_expect(key, DER_INTEGER, bad)?;
    let (modulus, _) = der_expect(rest, DER_INTEGER, bad)?;
    let significant = match modulus.iter().position(|b| *b != 0) {
        Some(first) => &modulus[first..],
        None => return Err(FoundKey::Malformed(bad)),
    };
    let leading = significant.first().map_or(0, |b| b.leading_zeros());
    u32::try_from(significant.len())
        .ok()
        .and_then(|len| len.checked_mul(8))
        .map(|bits| bits - leading)
        .ok_or(FoundKey::Malformed(bad))
}

fn dotted_oid(content: &[u8]) -> String {
    let mut arcs: Vec<u64> = Vec::new();
    let mut acc: u64 = 0;
    for &byte in content {
        if acc > u64::MAX >> 7 {
            return "(an unreadable object identifier)".into();
        }
        acc = (acc << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            arcs.push(acc);
            acc = 0;
        }
    }
    let Some((&first, rest)) = arcs.split_first() else {
        return "(an empty object identifier)".into();
    };
    let (a, b) = match first {
        0..40 => (0, first),
        40..80 => (1, first - 40),
        _ => (2, first - 80),
    };
    std::iter::once(a)
        .chain(std::iter::once(b))
        .chain(rest.iter().copied())
        .map(|arc| arc.to_string())
        .collect::<Vec<_>>()
        .join(".")
}

// Unix-only: file modes, symlinks and uids.
#[cfg(all(test, unix))]
// Tests may panic on unexpected failures; the workspace denies this only in production code.
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;
    use std::os::unix::fs::{PermissionsExt as _, symlink};
    use std::process::Command;

    use x509_parser::extensions::GeneralName;

    /// 2025-06-15T15:06:40.123Z: a fixed mint time with a sub-second part.
    const NOW_MS: u64 = 1_750_000_000_123;
    const NOW_S: i64 = 1_750_000_000;
    const LAN_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 20));
    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn pem(label: &str, der: &[u8]) -> String {
        let b64 = STANDARD.encode(der);
        let mut out = format!("-----BEGIN {label}-----\n");
        for chunk in b64.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(chunk).unwrap());
            out.push('\n');
        }
        out.push_str(&format!("-----END {label}-----\n"));
        out
    }

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

    /// A structurally valid PKCS#8 PrivateKeyInfo around arbitrary key bytes: enough to be
    /// classified, never a usable key.
    fn fake_pkcs8(algorithm_oid: &[u8], parameters: &[u8], private_key: &[u8]) -> Vec<u8> {
        let mut algorithm = der(DER_OID, algorithm_oid);
        algorithm.extend_from_slice(parameters);
        let mut info = der(DER_INTEGER, &[0]);
        info.extend(der(DER_SEQUENCE, &algorithm));
        info.extend(der(DER_OCTET_STRING, private_key));
        der(DER_SEQUENCE, &info)
    }

    /// PKCS#1 RSAPrivateKey prefix holding a modulus of exactly `bits` bits.
    fn fake_rsa_private_key(bits: usize) -> Vec<u8> {
        let mut modulus = vec![0u8; 1 + bits.div_ceil(8)];
        modulus[1] = 1 << ((bits - 1) % 8);
        let mut key = der(DER_INTEGER, &[0]);
        key.extend(der(DER_INTEGER, &modulus));
        key.extend(der(DER_INTEGER, &[1, 0, 1]));
        der(DER_SEQUENCE, &key)
    }

    fn generated_pem(alg: &'static SignatureAlgorithm) -> String {
        KeyPair::generate_for(alg).unwrap().serialize_pem()
    }

    /// The SEC1 ECPrivateKey inside a PKCS#8 P-256 key, as `openssl ec` would write it.
    fn sec1_pem() -> String {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let (info, _) = der_expect(key.serialized_der(), DER_SEQUENCE, "").unwrap();
        let (_, rest) = der_expect(info, DER_INTEGER, "").unwrap();
        let (_, rest) = der_expect(rest, DER_SEQUENCE, "").unwrap();
        let (ec_private_key, _) = der_expect(rest, DER_OCTET_STRING, "").unwrap();
        pem("EC PRIVATE KEY", ec_private_key)
    }

    /// Runs `openssl genpkey` with `args` (PKCS#8 PEM on stdout); `None` when the binary is
    /// missing or refuses the algorithm.
    fn openssl_genpkey(args: &[&str]) -> Option<String> {
        let output = Command::new("openssl")
            .arg("genpkey")
            .args(args)
            .output()
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8(output.stdout).unwrap())
    }

    fn write_key(dir: &Path, name: &str, contents: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, contents).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    fn load_pem(contents: &str) -> Result<HostKey, KeyError> {
        let dir = tempfile::tempdir().unwrap();
        HostKey::load(&write_key(dir.path(), "key.pem", contents, 0o600))
    }

    fn refusal(contents: &str) -> (FoundKey, String) {
        match load_pem(contents) {
            Err(err @ KeyError::Unsupported { .. }) => {
                let message = err.to_string();
                let KeyError::Unsupported { found, .. } = err else {
                    unreachable!()
                };
                (found, message)
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn dir_entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    // ---- key generation -------------------------------------------------------------------

    #[test]
    fn default_key_is_generated_as_p256_pkcs8_mode_0600_and_then_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key.pem");

        let (key, source) = HostKey::load_or_generate(&path, true).unwrap();
        assert_eq!(source, KeySource::Generated);
        assert_eq!(key.kind(), KeyKind::EcP256);
        let meta = fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o600);
        let bytes = fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"-----BEGIN PRIVATE KEY-----\n"));
        assert_eq!(
            classify_key_file(&bytes).map(|(kind, _)| kind),
            Ok(KeyKind::EcP256)
        );
        // The temporary name is gone.
        assert_eq!(dir_entries(dir.path()), ["key.pem"]);

        let (again, source) = HostKey::load_or_generate(&path, true).unwrap();
        assert_eq!(source, KeySource::Loaded);
        assert_eq!(again.pin(), key.pin());
        assert_eq!(fs::read(&path).unwrap(), bytes);
    }

    #[test]
    fn generation_never_overwrites_a_key_that_is_already_there() {
        let dir = tempfile::tempdir().unwrap();
        let existing = generated_pem(&rcgen::PKCS_ECDSA_P384_SHA384);
        let path = write_key(dir.path(), "key.pem", &existing, 0o600);

        // The race of §D3.1: the link fails because the name exists; nothing is replaced.
        assert_eq!(
            write_generated_key(&path, Overwrite::Never).unwrap(),
            WriteOutcome::Existed
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), existing);
        assert_eq!(dir_entries(dir.path()), ["key.pem"]);

        let (key, source) = HostKey::load_or_generate(&path, true).unwrap();
        assert_eq!(source, KeySource::Loaded);
        assert_eq!(key.kind(), KeyKind::EcP384);
    }

    /// SECURITY.md 4.5 (defect 7 of #20): a key is read through a symlink, but generation
    /// never writes through one: `keygen --force` replaces the link itself, and the first start
    /// on a dangling `key.pem` link creates nothing at its target.
    #[test]
    fn generation_never_writes_through_a_symlink_at_the_key_path() {
        let dir = tempfile::tempdir().unwrap();
        let existing = generated_pem(&rcgen::PKCS_ECDSA_P256_SHA256);
        let target = write_key(dir.path(), "dotfiles-key.pem", &existing, 0o600);
        let link = dir.path().join("key.pem");
        symlink(&target, &link).unwrap();

        assert_eq!(
            write_generated_key(&link, Overwrite::Replace).unwrap(),
            WriteOutcome::Replaced
        );
        assert_eq!(
            fs::read_to_string(&target).unwrap(),
            existing,
            "target untouched"
        );
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_file());

        let dangling_target = dir.path().join("absent.pem");
        let dangling = dir.path().join("dangling.pem");
        symlink(&dangling_target, &dangling).unwrap();
        assert!(HostKey::load_or_generate(&dangling, true).is_err());
        assert!(
            !dangling_target.exists(),
            "nothing created through the link"
        );
    }

    #[test]
    fn missing_configured_key_is_an_error_naming_the_path_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("typo.pem");
        let err = HostKey::load_or_generate(&path, false).unwrap_err();
        assert!(matches!(err, KeyError::Missing { .. }), "{err:?}");
        assert!(err.to_string().contains(&path.display().to_string()));
        assert!(dir_entries(dir.path()).is_empty());
    }

    #[test]
    fn keygen_refuses_to_overwrite_without_replace_and_replaces_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key.pem");
        assert!(!generate_key_file(&path, Overwrite::Never).unwrap());
        let first = fs::read(&path).unwrap();
        let first_pin = HostKey::load(&path).unwrap().pin().clone();

        let err = generate_key_file(&path, Overwrite::Never).unwrap_err();
        assert!(matches!(err, KeyError::AlreadyExists { .. }), "{err:?}");
        assert_eq!(fs::read(&path).unwrap(), first);

        assert!(generate_key_file(&path, Overwrite::Replace).unwrap());
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
        assert_ne!(HostKey::load(&path).unwrap().pin(), &first_pin);
        assert_eq!(dir_entries(dir.path()), ["key.pem"]);
    }

    // ---- file checks ----------------------------------------------------------------------

    #[test]
    fn keys_open_to_group_or_others_are_refused_naming_the_path_and_chmod_600() {
        let dir = tempfile::tempdir().unwrap();
        let contents = generated_pem(&rcgen::PKCS_ECDSA_P256_SHA256);
        for mode in [0o640, 0o604, 0o660, 0o610] {
            let path = write_key(dir.path(), "key.pem", &contents, mode);
            let err = HostKey::load(&path).unwrap_err();
            assert!(
                matches!(err, KeyError::Permissions { mode: m, .. } if m == mode),
                "{mode:o}: {err:?}"
            );
            let message = err.to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains("chmod 600"), "{message}");
        }
        // Owner-only modes stricter than 0600 are fine.
        let path = write_key(dir.path(), "key.pem", &contents, 0o400);
        assert!(HostKey::load(&path).is_ok());
    }

    #[test]
    fn symlinks_are_resolved_and_the_target_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let contents = generated_pem(&rcgen::PKCS_ECDSA_P256_SHA256);
        let target = write_key(dir.path(), "real.pem", &contents, 0o600);
        let link = dir.path().join("key.pem");
        symlink(&target, &link).unwrap();
        let key = HostKey::load(&link).unwrap();
        assert_eq!(key.path(), fs::canonicalize(&target).unwrap());

        fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
        let err = HostKey::load(&link).unwrap_err();
        assert!(matches!(err, KeyError::Permissions { .. }), "{err:?}");
        assert!(err.to_string().contains("real.pem"));
    }

    #[test]
    fn a_directory_is_not_a_key_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key.pem");
        fs::create_dir(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
        let err = HostKey::load(&path).unwrap_err();
        assert!(matches!(err, KeyError::NotRegularFile { .. }), "{err:?}");
        assert!(err.to_string().contains("chmod 600"));
    }

    // A key owned by another uid needs root to create (chown needs CAP_CHOWN): the WrongOwner
    // branch is exercised at daemon start by `daemon/tests/security_keys.rs` when run as root.

    #[test]
    fn oversized_files_are_refused_without_being_parsed() {
        let (found, _) = refusal(&"#".repeat(MAX_KEY_FILE_BYTES as usize + 1));
        assert_eq!(found, FoundKey::TooLarge);
    }

    // ---- key kinds ------------------------------------------------------------------------

    #[test]
    fn p256_and_p384_pkcs8_keys_are_accepted() {
        let p256 = load_pem(&generated_pem(&rcgen::PKCS_ECDSA_P256_SHA256)).unwrap();
        assert_eq!(p256.kind(), KeyKind::EcP256);
        let p384 = load_pem(&generated_pem(&rcgen::PKCS_ECDSA_P384_SHA384)).unwrap();
        assert_eq!(p384.kind(), KeyKind::EcP384);
    }

    #[test]
    fn rsa_2048_is_accepted_and_signs_leaves() {
        // ring cannot generate RSA keys; openssl makes one at test time (never committed).
        let Some(contents) =
            openssl_genpkey(&["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
        else {
            eprintln!("skipping RSA-2048 acceptance: `openssl genpkey` is not available");
            return;
        };
        let key = load_pem(&contents).unwrap();
        assert_eq!(key.kind(), KeyKind::Rsa { bits: 2048 });
        let leaf = key.mint_leaf(LAN_IP, NOW_MS).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(leaf.der()).unwrap();
        assert_eq!(
            cert.signature_algorithm.algorithm.to_id_string(),
            "1.2.840.113549.1.1.11"
        );
        let usage = cert.key_usage().unwrap().unwrap();
        assert!(usage.critical);
        assert!(usage.value.digital_signature() && usage.value.key_encipherment());
        assert!(!usage.value.key_agreement());
        // That it also signs handshakes: `tls_handshakes.rs`.
    }

    #[test]
    fn openssl_made_keys_are_classified_like_the_fabricated_ones() {
        let cases: [(&[&str], FoundKey); 4] = [
            (
                &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-521"],
                FoundKey::EcCurve("P-521"),
            ),
            (
                &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024"],
                FoundKey::RsaTooSmall(1024),
            ),
            (&["-algorithm", "ED448"], FoundKey::Ed448),
            (&["-algorithm", "RSA-PSS"], FoundKey::RsaPss),
        ];
        for (args, expected) in cases {
            let Some(contents) = openssl_genpkey(args) else {
                eprintln!("skipping {expected:?}: `openssl genpkey {args:?}` is not available");
                continue;
            };
            assert_eq!(refusal(&contents).0, expected);
        }
    }

    #[test]
    fn unsupported_keys_are_refused_naming_the_path_what_was_found_and_the_supported_kinds() {
        let p256 = generated_pem(&rcgen::PKCS_ECDSA_P256_SHA256);
        let ec_params = |curve: &[u8]| der(DER_OID, curve);
        let cert_block = pem("CERTIFICATE", &[0x30, 0x00]);
        let encrypted_info = {
            // EncryptedPrivateKeyInfo: AlgorithmIdentifier, then the ciphertext.
            let mut body = der(DER_SEQUENCE, &der(DER_OID, &[0x2a, 0x86, 0x48]));
            body.extend(der(DER_OCTET_STRING, &[7; 48]));
            der(DER_SEQUENCE, &body)
        };
        let cases: Vec<(&str, String, FoundKey, &str)> = vec![
            (
                "empty file",
                String::new(),
                FoundKey::NoKeyBlock {
                    other_blocks: vec![],
                },
                "no key block",
            ),
            (
                "certificate only",
                cert_block.clone(),
                FoundKey::NoKeyBlock {
                    other_blocks: vec!["CERTIFICATE".into()],
                },
                "no key block (only CERTIFICATE)",
            ),
            (
                "several",
                format!("{p256}{p256}"),
                FoundKey::SeveralKeyBlocks(2),
                "several key blocks",
            ),
            (
                "extra block",
                format!("{p256}{cert_block}"),
                FoundKey::ExtraBlocks(vec!["CERTIFICATE".into()]),
                "together with other PEM blocks (CERTIFICATE)",
            ),
            (
                "sec1",
                sec1_pem(),
                FoundKey::Sec1,
                "a SEC1 EC PRIVATE KEY block",
            ),
            (
                "pkcs1",
                pem("RSA PRIVATE KEY", &fake_rsa_private_key(2048)),
                FoundKey::Pkcs1,
                "a PKCS#1 RSA PRIVATE KEY block",
            ),
            (
                "encrypted",
                pem("ENCRYPTED PRIVATE KEY", &encrypted_info),
                FoundKey::EncryptedPkcs8,
                "an encrypted PKCS#8 key",
            ),
            (
                "encrypted, mislabelled",
                pem("PRIVATE KEY", &encrypted_info),
                FoundKey::EncryptedPkcs8,
                "an encrypted PKCS#8 key",
            ),
            (
                "ed25519",
                generated_pem(&rcgen::PKCS_ED25519),
                FoundKey::Ed25519,
                "an Ed25519 key",
            ),
            (
                "p521",
                pem(
                    "PRIVATE KEY",
                    &fake_pkcs8(OID_EC_PUBLIC_KEY, &ec_params(OID_CURVE_P521), &[1; 40]),
                ),
                FoundKey::EcCurve("P-521"),
                "an EC P-521 key",
            ),
            (
                "secp256k1",
                pem(
                    "PRIVATE KEY",
                    &fake_pkcs8(OID_EC_PUBLIC_KEY, &ec_params(OID_CURVE_SECP256K1), &[1; 40]),
                ),
                FoundKey::EcCurve("secp256k1"),
                "an EC secp256k1 key",
            ),
            (
                "brainpool",
                pem(
                    "PRIVATE KEY",
                    &fake_pkcs8(
                        OID_EC_PUBLIC_KEY,
                        &ec_params(&[0x2b, 0x24, 0x03, 0x03, 0x02, 0x08, 0x01, 0x01, 0x07]),
                        &[1; 40],
                    ),
                ),
                FoundKey::EcOtherCurve("1.3.36.3.3.2.8.1.1.7".into()),
                "an EC key on curve 1.3.36.3.3.2.8.1.1.7",
            ),
            (
                "ed448",
                pem("PRIVATE KEY", &fake_pkcs8(OID_ED448, &[], &[1; 59])),
                FoundKey::Ed448,
                "an Ed448 key",
            ),
            (
                "dsa",
                pem("PRIVATE KEY", &fake_pkcs8(OID_DSA, &[], &[1; 20])),
                FoundKey::Dsa,
                "a DSA key",
            ),
            (
                "rsa-1024",
                pem(
                    "PRIVATE KEY",
                    &fake_pkcs8(
                        OID_RSA_ENCRYPTION,
                        &[0x05, 0x00],
                        &fake_rsa_private_key(1024),
                    ),
                ),
                FoundKey::RsaTooSmall(1024),
                "an RSA key of 1024 bits",
            ),
            (
                "rsa-2047",
                pem(
                    "PRIVATE KEY",
                    &fake_pkcs8(
                        OID_RSA_ENCRYPTION,
                        &[0x05, 0x00],
                        &fake_rsa_private_key(2047),
                    ),
                ),
                FoundKey::RsaTooSmall(2047),
                "an RSA key of 2047 bits",
            ),
            (
                "rsa-8192",
                pem(
                    "PRIVATE KEY",
                    &fake_pkcs8(
                        OID_RSA_ENCRYPTION,
                        &[0x05, 0x00],
                        &fake_rsa_private_key(8192),
                    ),
                ),
                FoundKey::RsaTooLarge(8192),
                "an RSA key of 8192 bits",
            ),
            (
                "unknown algorithm",
                pem(
                    "PRIVATE KEY",
                    &fake_pkcs8(&[0x2a, 0x03, 0x04], &[], &[1; 8]),
                ),
                FoundKey::OtherAlgorithm("1.2.3.4".into()),
                "a key of algorithm 1.2.3.4",
            ),
            (
                "damaged p256",
                pem(
                    "PRIVATE KEY",
                    &fake_pkcs8(OID_EC_PUBLIC_KEY, &ec_params(OID_CURVE_P256), &[1; 40]),
                ),
                FoundKey::Unloadable(KeyKind::EcP256),
                "an EC P-256 key that ring cannot load",
            ),
            (
                "bad base64",
                "-----BEGIN PRIVATE KEY-----\n!!!!\n-----END PRIVATE KEY-----\n".into(),
                FoundKey::Malformed("the PRIVATE KEY block is not valid base64"),
                "a malformed key",
            ),
            (
                "unterminated",
                p256.replace("-----END PRIVATE KEY-----\n", ""),
                FoundKey::Malformed("the PRIVATE KEY block has no matching END line"),
                "no matching END line",
            ),
            (
                "openssh",
                pem("OPENSSH PRIVATE KEY", b"openssh-key-v1\0"),
                FoundKey::OtherKeyBlock("OPENSSH PRIVATE KEY".into()),
                "a PEM block labelled OPENSSH PRIVATE KEY",
            ),
        ];
        let dir = tempfile::tempdir().unwrap();
        for (name, contents, expected, text) in cases {
            let path = write_key(dir.path(), "key.pem", &contents, 0o600);
            let err = HostKey::load(&path).unwrap_err();
            let message = err.to_string();
            let KeyError::Unsupported { found, .. } = err else {
                panic!("{name}: expected a refusal, got {message}");
            };
            assert_eq!(found, expected, "{name}");
            assert!(message.contains(text), "{name}: {message}");
            assert!(
                message.contains(&path.display().to_string()),
                "{name}: {message}"
            );
            assert!(message.contains(SUPPORTED_KEYS), "{name}: {message}");
            let hinted = matches!(found, FoundKey::Sec1 | FoundKey::Pkcs1);
            assert_eq!(
                message.contains("openssl pkcs8 -topk8 -nocrypt"),
                hinted,
                "{name}: {message}"
            );
        }
    }

    #[test]
    fn binary_files_are_not_pem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key.der");
        fs::write(&path, [0x30, 0x82, 0xff, 0xfe]).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let err = HostKey::load(&path).unwrap_err();
        assert!(
            matches!(
                err,
                KeyError::Unsupported {
                    found: FoundKey::NotText,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn text_around_the_block_and_crlf_line_ends_are_tolerated() {
        let p256 = generated_pem(&rcgen::PKCS_ECDSA_P256_SHA256);
        let contents = format!("comment line\r\n{}", p256.replace('\n', "\r\n"));
        assert_eq!(load_pem(&contents).unwrap().kind(), KeyKind::EcP256);
    }

    #[test]
    fn dotted_oids_decode_multi_byte_arcs() {
        assert_eq!(dotted_oid(OID_EC_PUBLIC_KEY), "1.2.840.10045.2.1");
        assert_eq!(dotted_oid(OID_CURVE_P521), "1.3.132.0.35");
        assert_eq!(dotted_oid(&[0x88, 0x37, 0x03]), "2.999.3");
    }

    #[test]
    fn host_key_debug_shows_no_key_material() {
        let key = load_pem(&generated_pem(&rcgen::PKCS_ECDSA_P256_SHA256)).unwrap();
        let debug = format!("{key:?}");
        assert!(debug.contains(key.pin().as_str()));
        assert!(!debug.contains("cert_signer") && !debug.contains("tls_signer"));
    }

    // ---- leaf ------------------------------------------------------------------------------

    fn p256_key() -> HostKey {
        load_pem(&generated_pem(&rcgen::PKCS_ECDSA_P256_SHA256)).unwrap()
    }

    fn sans(cert: &x509_parser::certificate::X509Certificate<'_>) -> Vec<String> {
        let san = cert.subject_alternative_name().unwrap().unwrap();
        assert!(!san.critical);
        san.value
            .general_names
            .iter()
            .map(|name| match name {
                GeneralName::DNSName(dns) => format!("DNS:{dns}"),
                GeneralName::IPAddress(bytes) => match bytes.len() {
                    4 => format!(
                        "IP:{}",
                        Ipv4Addr::from(<[u8; 4]>::try_from(*bytes).unwrap())
                    ),
                    16 => format!(
                        "IP:{}",
                        Ipv6Addr::from(<[u8; 16]>::try_from(*bytes).unwrap())
                    ),
                    _ => panic!("odd IP SAN {bytes:?}"),
                },
                other => panic!("unexpected SAN {other:?}"),
            })
            .collect()
    }

    #[test]
    fn leaf_carries_the_fields_of_the_spec_table() {
        // SEC-12 (fields); the daemon-level form is daemon/tests/security_keys.rs.
        let key = p256_key();
        let leaf = key.mint_leaf(LAN_IP, NOW_MS).unwrap();
        let (rest, cert) = x509_parser::parse_x509_certificate(leaf.der()).unwrap();
        assert!(rest.is_empty());

        let cn = |name: &x509_parser::x509::X509Name<'_>| {
            let cns: Vec<String> = name
                .iter_common_name()
                .map(|cn| cn.as_str().unwrap().to_owned())
                .collect();
            (cns, name.iter().count())
        };
        assert_eq!(cn(cert.subject()), (vec![LEAF_COMMON_NAME.to_owned()], 1));
        assert_eq!(cert.issuer().as_raw(), cert.subject().as_raw());

        let serial = cert.raw_serial();
        assert!(
            !serial.is_empty() && serial.len() <= SERIAL_BYTES,
            "{serial:?}"
        );
        assert_eq!(
            serial[0] & 0x80,
            0,
            "serial must be positive without padding"
        );

        assert_eq!(cert.validity().not_before.timestamp(), NOW_S - 300);
        assert_eq!(cert.validity().not_after.timestamp(), NOW_S + 604_800);
        assert_eq!(leaf.not_before_unix_s(), NOW_S - 300);
        assert_eq!(leaf.not_after_unix_s(), NOW_S + 604_800);

        let basic = cert.basic_constraints().unwrap().unwrap();
        assert!(basic.critical);
        assert!(!basic.value.ca);

        let usage = cert.key_usage().unwrap().unwrap();
        assert!(usage.critical);
        assert!(usage.value.digital_signature() && usage.value.key_agreement());
        assert!(!usage.value.key_encipherment() && !usage.value.key_cert_sign());

        let eku = cert.extended_key_usage().unwrap().unwrap();
        assert!(eku.value.server_auth);
        assert!(!eku.value.client_auth && !eku.value.any);

        assert_eq!(
            sans(&cert),
            ["DNS:localhost", "IP:127.0.0.1", "IP:192.168.1.20"]
        );
        assert_eq!(
            cert.signature_algorithm.algorithm.to_id_string(),
            "1.2.840.10045.4.3.2"
        );
        // Self-signed by the host key.
        assert!(rustls::server::ParsedCertificate::try_from(leaf.der()).is_ok());
    }

    #[test]
    fn loopback_appears_once_and_ipv6_addresses_are_ip_sans() {
        let key = p256_key();
        let leaf = key.mint_leaf(LOOPBACK, NOW_MS).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(leaf.der()).unwrap();
        assert_eq!(sans(&cert), ["DNS:localhost", "IP:127.0.0.1"]);

        let v6: IpAddr = "fd00::1".parse().unwrap();
        let leaf = key.mint_leaf(v6, NOW_MS).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(leaf.der()).unwrap();
        assert_eq!(sans(&cert), ["DNS:localhost", "IP:127.0.0.1", "IP:fd00::1"]);
    }

    #[test]
    fn p384_leaves_are_signed_with_ecdsa_sha384() {
        let key = load_pem(&generated_pem(&rcgen::PKCS_ECDSA_P384_SHA384)).unwrap();
        let leaf = key.mint_leaf(LAN_IP, NOW_MS).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(leaf.der()).unwrap();
        assert_eq!(
            cert.signature_algorithm.algorithm.to_id_string(),
            "1.2.840.10045.4.3.3"
        );
        assert_eq!(
            &SpkiPin::from_certificate_der(leaf.der()).unwrap(),
            key.pin()
        );
    }

    #[test]
    fn serials_differ_between_mints() {
        let key = p256_key();
        let serial = |leaf: &Leaf| {
            let (_, cert) = x509_parser::parse_x509_certificate(leaf.der()).unwrap();
            cert.raw_serial().to_vec()
        };
        let a = key.mint_leaf(LAN_IP, NOW_MS).unwrap();
        let b = key.mint_leaf(LAN_IP, NOW_MS).unwrap();
        assert_ne!(serial(&a), serial(&b));
    }

    #[test]
    fn pin_of_the_key_equals_pin_of_every_leaf() {
        let key = p256_key();
        assert_eq!(key.pin(), &SpkiPin::from_spki_der(key.spki_der()));
        // rcgen's view of the public key agrees with rustls' view the pin was taken from.
        assert_eq!(key.cert_signer.public_key_der(), key.spki_der());
        for ip in [LAN_IP, LOOPBACK] {
            let leaf = key.mint_leaf(ip, NOW_MS).unwrap();
            assert_eq!(
                &SpkiPin::from_certificate_der(leaf.der()).unwrap(),
                key.pin()
            );
        }
    }

    #[test]
    fn mint_times_outside_the_certificate_range_are_errors() {
        let key = p256_key();
        assert!(matches!(
            key.mint_leaf(LAN_IP, u64::MAX),
            Err(TlsError::TimeOutOfRange { .. })
        ));
    }

    // ---- re-mint ---------------------------------------------------------------------------

    #[test]
    fn remint_is_needed_on_address_change_or_under_24_hours_of_validity() {
        let state = TlsState::new(p256_key(), LAN_IP, NOW_MS).unwrap();
        let not_after_ms = (NOW_S as u64 + 604_800) * 1000;
        let threshold_ms = not_after_ms - 86_400_000;
        assert!(!state.needs_remint(LAN_IP, NOW_MS));
        assert!(!state.needs_remint(LAN_IP, threshold_ms));
        assert!(state.needs_remint(LAN_IP, threshold_ms + 1));
        assert!(state.needs_remint(LAN_IP, not_after_ms + 1));
        assert!(state.needs_remint("192.168.1.21".parse().unwrap(), NOW_MS));
        assert!(state.needs_remint(LOOPBACK, NOW_MS));
    }

    #[test]
    fn remint_replaces_the_leaf_and_keeps_the_pin() {
        let state = TlsState::new(p256_key(), LAN_IP, NOW_MS).unwrap();
        let first = state.leaf();
        assert_eq!(state.renew_if_needed(LAN_IP, NOW_MS + 1000).unwrap(), None);
        assert_eq!(state.leaf(), first);

        let new_ip: IpAddr = "10.0.0.7".parse().unwrap();
        let later = NOW_MS + 3_600_000;
        let second = state.renew_if_needed(new_ip, later).unwrap().unwrap();
        assert_eq!(state.leaf(), second);
        assert_eq!(second.advertised_ip(), new_ip);
        assert_ne!(second.der(), first.der());
        assert_eq!(second.not_after_unix_s(), NOW_S + 3600 + 604_800);
        assert_eq!(
            &SpkiPin::from_certificate_der(second.der()).unwrap(),
            state.pin()
        );
        assert!(!state.needs_remint(new_ip, later));
        assert_eq!(
            state.resolver().current().end_entity_cert().unwrap(),
            second.der()
        );

        let third = state.remint(new_ip, later).unwrap();
        assert_ne!(third.der(), second.der());
        assert_eq!(
            &SpkiPin::from_certificate_der(third.der()).unwrap(),
            state.pin()
        );
    }

    // The handshake tests (pinned client against the server configuration) live in
    // `daemon/tests/tls_handshakes.rs`, next to the one pinned test client.
}
