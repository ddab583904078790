//! The sealed transport (issue #23; PROTOCOL.md "Sealed transport"): an authenticated, encrypted
//! channel inside a plain WebSocket, for apps that cannot pin a certificate.
//!
//! `Noise_NK_25519_ChaChaPoly_SHA256` through `snow`: the app ([`Initiator`]) knows the daemon's
//! static key from the link; the daemon ([`Responder`]) proves it holds the private half. After
//! the two handshake messages each side holds a [`SealedChannel`] that turns v2 frames into
//! records (one binary WebSocket message each) and back.
//!
//! Like the rest of the crate this module does no I/O: every random byte (the ephemeral keys)
//! comes from the caller, who reads it from the OS (or, in tests and vectors, fixes it).

use std::sync::Arc;

use curve25519_dalek::montgomery::MontgomeryPoint;
use serde_json::Value;
use snow::params::{CipherChoice, DHChoice, HashChoice, NoiseParams};
use snow::resolvers::{CryptoResolver, DefaultResolver};
use snow::types::{Cipher, Dh, Hash, Random};
use snow::{HandshakeState, StatelessTransportState};
use zeroize::Zeroize as _;

use crate::close::CloseReason;
use crate::limits::MAX_MESSAGE_BYTES;

/// The Noise protocol name (revision 34).
pub const NOISE_PATTERN: &str = "Noise_NK_25519_ChaChaPoly_SHA256";
/// The prologue both sides mix in before the handshake.
pub const PROLOGUE: &[u8] = b"appduct-sealed/1";
/// X25519 key length (private and public).
pub const KEY_BYTES: usize = 32;
/// ChaCha20-Poly1305 tag length.
pub const TAG_BYTES: usize = 16;
/// Longest handshake payload before encryption, in bytes.
pub const MAX_HANDSHAKE_PAYLOAD_BYTES: usize = 256;
/// Shortest handshake message: an ephemeral key and the tag of an empty payload.
pub const MIN_HANDSHAKE_MESSAGE_BYTES: usize = KEY_BYTES + TAG_BYTES;
/// Longest handshake message: 32 + 256 + 16.
pub const MAX_HANDSHAKE_MESSAGE_BYTES: usize = KEY_BYTES + MAX_HANDSHAKE_PAYLOAD_BYTES + TAG_BYTES;
/// Longest record (a Noise transport message).
pub const MAX_RECORD_BYTES: usize = 65_535;
/// Longest record plaintext: the kind byte and the data.
pub const MAX_RECORD_PLAINTEXT_BYTES: usize = MAX_RECORD_BYTES - TAG_BYTES;
/// Most frame bytes one fragment record carries.
pub const MAX_FRAGMENT_DATA_BYTES: usize = MAX_RECORD_PLAINTEXT_BYTES - 1;
/// Longest close reason of a close record, in UTF-8 bytes (as in a WebSocket close frame).
pub const MAX_CLOSE_REASON_BYTES: usize = 123;
/// Kind byte: a fragment of a frame, more follows.
pub const KIND_FRAGMENT: u8 = 0x00;
/// Kind byte: the last fragment of a frame.
pub const KIND_LAST_FRAGMENT: u8 = 0x01;
/// Kind byte: a close record (2-byte big-endian code, then the UTF-8 reason).
pub const KIND_CLOSE: u8 = 0x02;
/// HKDF salt of the static key derivation.
pub const STATIC_KEY_SALT: &[u8] = b"appduct-sealed-v1";
/// HKDF info of the static key derivation.
pub const STATIC_KEY_INFO: &[u8] = b"x25519 static key";
/// The daemon's message 2 payload today.
pub const REPLY_PAYLOAD: &[u8] = b"{}";

/// Why a sealed handshake or record was refused. Each maps to the close of PROTOCOL.md's
/// table through [`SealedError::close_reason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealedError {
    /// The first message of a plain-route connection was text (and not a `link_refused` frame,
    /// which the caller checks first).
    #[error("expected a sealed handshake, got a text message")]
    ExpectedHandshake,
    /// A handshake message of the wrong size, one that does not decrypt (a link minted for
    /// another static key), out of order, or whose payload is not the agreed JSON object.
    #[error("the sealed handshake failed")]
    HandshakeFailed,
    /// A record that failed authentication: tampered, replayed, reordered, truncated, or sent
    /// under other keys. The channel is broken; no close record can follow.
    #[error("a sealed record failed authentication")]
    RecordInvalid,
    /// A record over 65,535 bytes.
    #[error("a sealed record of {0} bytes is over 65535 bytes")]
    RecordTooBig(usize),
    /// A frame over 262,144 bytes (the v2 limit applies to the assembled plaintext).
    #[error("a sealed frame is over 262144 bytes")]
    FrameTooBig,
    /// A frame, or a close record's reason, that is not UTF-8.
    #[error("a sealed frame or close reason is not valid UTF-8")]
    InvalidUtf8,
    /// A well-authenticated record that breaks the record rules.
    #[error("malformed sealed record: {0}")]
    Malformed(Malformed),
    /// A failure of the Noise machinery that input cannot cause (nonce exhaustion, builder).
    #[error("the sealed channel failed internally")]
    Internal,
}

/// How a record broke the record rules (all `1002 protocol_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("empty plaintext")]
    EmptyPlaintext,
    #[error("unknown kind byte {0:#04x}")]
    UnknownKind(u8),
    #[error("a close record needs a valid close code and a reason of at most 123 bytes")]
    CloseRecord,
    #[error("a text WebSocket message after the handshake")]
    TextMessage,
    #[error("a record after a close record")]
    AfterClose,
}

impl SealedError {
    /// The WebSocket close this failure ends the connection with.
    pub const fn close_reason(&self) -> CloseReason {
        match self {
            Self::ExpectedHandshake => CloseReason::ExpectedSealedHandshake,
            Self::HandshakeFailed => CloseReason::SealedHandshakeFailed,
            Self::RecordInvalid => CloseReason::SealedRecordInvalid,
            Self::RecordTooBig(_) | Self::FrameTooBig => CloseReason::MessageTooBig,
            Self::InvalidUtf8 => CloseReason::InvalidPayload,
            Self::Malformed(_) => CloseReason::ProtocolError,
            Self::Internal => CloseReason::InternalError,
        }
    }

    /// Whether the channel can still seal a close record before the WebSocket close: after the
    /// handshake, for every failure but an unauthenticated record.
    pub const fn sends_close_record(&self) -> bool {
        !matches!(
            self,
            Self::ExpectedHandshake | Self::HandshakeFailed | Self::RecordInvalid
        )
    }
}

/// Where the app's randomness came from (the `rng` of message 1's payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RngSource {
    /// `crypto.getRandomValues` or the OS: `"csprng"`.
    Csprng,
    /// An HMAC-DRBG seeded from link secrets and timing: `"drbg"`.
    Drbg,
}

impl RngSource {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Csprng => "csprng",
            Self::Drbg => "drbg",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "csprng" => Some(Self::Csprng),
            "drbg" => Some(Self::Drbg),
            _ => None,
        }
    }

    /// The message 1 payload an app sends: `{"rng":"<source>"}`.
    pub fn hello_payload(self) -> String {
        format!("{{\"rng\":\"{}\"}}", self.as_str())
    }
}

impl std::fmt::Display for RngSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the daemon learns from message 1.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Hello {
    pub rng: RngSource,
}

/// The daemon's X25519 static key pair. `Debug` shows the public key only; the private key is
/// wiped on drop.
#[derive(Clone)]
pub struct StaticKeypair {
    private: [u8; KEY_BYTES],
    public: [u8; KEY_BYTES],
}

impl StaticKeypair {
    /// The key of PROTOCOL.md: HKDF-SHA256(ikm = the host key's PKCS#8 DER, salt =
    /// `appduct-sealed-v1`, info = `x25519 static key`, 32 bytes), clamped.
    pub fn from_host_key_der(pkcs8_der: &[u8]) -> Self {
        let hk = hkdf::Hkdf::<sha2::Sha256>::new(Some(STATIC_KEY_SALT), pkcs8_der);
        let mut okm = [0u8; KEY_BYTES];
        if hk.expand(STATIC_KEY_INFO, &mut okm).is_err() {
            unreachable!("HKDF-SHA256 can always produce 32 bytes");
        }
        let keys = Self::from_private_bytes(okm);
        okm.zeroize();
        keys
    }

    /// A key pair from private bytes, clamped as X25519 requires.
    pub fn from_private_bytes(bytes: [u8; KEY_BYTES]) -> Self {
        let private = clamp(bytes);
        let public = MontgomeryPoint::mul_base_clamped(private).to_bytes();
        Self { private, public }
    }

    pub fn public_key(&self) -> &[u8; KEY_BYTES] {
        &self.public
    }

    /// The clamped private key (for vectors; never log it).
    pub fn private_key(&self) -> &[u8; KEY_BYTES] {
        &self.private
    }
}

impl Drop for StaticKeypair {
    fn drop(&mut self) {
        self.private.zeroize();
    }
}

impl std::fmt::Debug for StaticKeypair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticKeypair")
            .field("public", &hex(&self.public))
            .field("private", &"<redacted>")
            .finish()
    }
}

/// X25519 clamping (RFC 7748 §5).
pub fn clamp(mut bytes: [u8; KEY_BYTES]) -> [u8; KEY_BYTES] {
    bytes[0] &= 248;
    bytes[31] &= 127;
    bytes[31] |= 64;
    bytes
}

/// The X25519 public key of a private key (clamped first).
pub fn public_key_of(private: [u8; KEY_BYTES]) -> [u8; KEY_BYTES] {
    MontgomeryPoint::mul_base_clamped(private).to_bytes()
}

/// Lower-case hex, for vectors and debug output.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The daemon's side of the handshake: read message 1, write message 2, then
/// [`Responder::into_transport`].
#[derive(Debug)]
pub struct Responder {
    hs: HandshakeState,
}

impl Responder {
    /// `ephemeral` is 32 fresh CSPRNG bytes: the daemon's ephemeral private key.
    pub fn new(keys: &StaticKeypair, ephemeral: [u8; KEY_BYTES]) -> Result<Self, SealedError> {
        let hs = builder(ephemeral)?
            .local_private_key(&keys.private)
            .map_err(|_| SealedError::Internal)?
            .build_responder()
            .map_err(|_| SealedError::Internal)?;
        Ok(Self { hs })
    }

    /// Reads message 1 (`e, es`) and its payload. A message outside 48–304 bytes, one that
    /// does not decrypt, or a payload that is not a JSON object with a known `rng` is
    /// [`SealedError::HandshakeFailed`]. Unknown payload keys are ignored.
    pub fn read_message1(&mut self, message: &[u8]) -> Result<Hello, SealedError> {
        let payload = read_handshake(&mut self.hs, message)?;
        parse_hello(&payload).ok_or(SealedError::HandshakeFailed)
    }

    /// Writes message 2 (`e, ee`) with the payload `{}`.
    pub fn write_message2(&mut self) -> Result<Vec<u8>, SealedError> {
        write_handshake(&mut self.hs, REPLY_PAYLOAD)
    }

    /// The Noise handshake hash `h` (final once message 2 is written): identifies this
    /// handshake, for vectors and channel binding.
    pub fn handshake_hash(&self) -> Vec<u8> {
        self.hs.get_handshake_hash().to_vec()
    }

    /// The channel, once message 2 is written.
    pub fn into_transport(self) -> Result<SealedChannel, SealedError> {
        SealedChannel::from_handshake(self.hs)
    }
}

/// The app's side of the handshake: write message 1, read message 2, then
/// [`Initiator::into_transport`].
#[derive(Debug)]
pub struct Initiator {
    hs: HandshakeState,
    payload: Vec<u8>,
}

impl Initiator {
    /// `remote_static` is the daemon's key from the sealed link; `ephemeral` is 32 fresh bytes
    /// from `rng` (the app's ephemeral private key); message 1 then carries
    /// `{"rng":"<rng>"}`.
    pub fn new(
        remote_static: [u8; KEY_BYTES],
        ephemeral: [u8; KEY_BYTES],
        rng: RngSource,
    ) -> Result<Self, SealedError> {
        Self::with_hello_payload(remote_static, ephemeral, rng.hello_payload().into_bytes())
    }

    /// As [`Initiator::new`] with an arbitrary message 1 payload (vectors and tests: unknown
    /// keys, bad payloads). At most 256 bytes, else [`SealedError::HandshakeFailed`].
    pub fn with_hello_payload(
        remote_static: [u8; KEY_BYTES],
        ephemeral: [u8; KEY_BYTES],
        payload: Vec<u8>,
    ) -> Result<Self, SealedError> {
        if payload.len() > MAX_HANDSHAKE_PAYLOAD_BYTES {
            return Err(SealedError::HandshakeFailed);
        }
        let hs = builder(ephemeral)?
            .remote_public_key(&remote_static)
            .map_err(|_| SealedError::Internal)?
            .build_initiator()
            .map_err(|_| SealedError::Internal)?;
        Ok(Self { hs, payload })
    }

    /// Writes message 1 (`e, es`).
    pub fn write_message1(&mut self) -> Result<Vec<u8>, SealedError> {
        write_handshake(&mut self.hs, &self.payload)
    }

    /// Reads message 2 (`e, ee`): 48–304 bytes that decrypt to a JSON object (keys ignored).
    pub fn read_message2(&mut self, message: &[u8]) -> Result<(), SealedError> {
        let payload = read_handshake(&mut self.hs, message)?;
        match serde_json::from_slice::<Value>(&payload) {
            Ok(Value::Object(_)) => Ok(()),
            _ => Err(SealedError::HandshakeFailed),
        }
    }

    /// The Noise handshake hash `h` (final once message 2 is read).
    pub fn handshake_hash(&self) -> Vec<u8> {
        self.hs.get_handshake_hash().to_vec()
    }

    /// The channel, once message 2 is read.
    pub fn into_transport(self) -> Result<SealedChannel, SealedError> {
        SealedChannel::from_handshake(self.hs)
    }
}

fn builder<'a>(ephemeral: [u8; KEY_BYTES]) -> Result<snow::Builder<'a>, SealedError> {
    let params: NoiseParams = NOISE_PATTERN.parse().map_err(|_| SealedError::Internal)?;
    snow::Builder::with_resolver(params, Box::new(Resolver { ephemeral }))
        .prologue(PROLOGUE)
        .map_err(|_| SealedError::Internal)
}

fn read_handshake(hs: &mut HandshakeState, message: &[u8]) -> Result<Vec<u8>, SealedError> {
    if !(MIN_HANDSHAKE_MESSAGE_BYTES..=MAX_HANDSHAKE_MESSAGE_BYTES).contains(&message.len()) {
        return Err(SealedError::HandshakeFailed);
    }
    let mut payload = vec![0u8; message.len()];
    let n = hs
        .read_message(message, &mut payload)
        .map_err(|_| SealedError::HandshakeFailed)?;
    payload.truncate(n);
    Ok(payload)
}

fn write_handshake(hs: &mut HandshakeState, payload: &[u8]) -> Result<Vec<u8>, SealedError> {
    let mut message = vec![0u8; KEY_BYTES + payload.len() + TAG_BYTES];
    let n = hs
        .write_message(payload, &mut message)
        .map_err(|_| SealedError::Internal)?;
    message.truncate(n);
    Ok(message)
}

fn parse_hello(payload: &[u8]) -> Option<Hello> {
    let Value::Object(map) = serde_json::from_slice::<Value>(payload).ok()? else {
        return None;
    };
    let rng = RngSource::parse(map.get("rng")?.as_str()?)?;
    Some(Hello { rng })
}

/// snow's default primitives, with a random source that yields exactly the caller's 32 bytes
/// once: the only randomness NK needs on either side is one ephemeral key.
struct Resolver {
    ephemeral: [u8; KEY_BYTES],
}

impl Drop for Resolver {
    fn drop(&mut self) {
        self.ephemeral.zeroize();
    }
}

impl CryptoResolver for Resolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(OneShot(Some(self.ephemeral))))
    }

    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        DefaultResolver.resolve_dh(choice)
    }

    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn Hash>> {
        DefaultResolver.resolve_hash(choice)
    }

    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
        DefaultResolver.resolve_cipher(choice)
    }
}

struct OneShot(Option<[u8; KEY_BYTES]>);

impl Random for OneShot {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        match self.0.take() {
            Some(mut bytes) if dest.len() == KEY_BYTES => {
                dest.copy_from_slice(&bytes);
                bytes.zeroize();
                Ok(())
            }
            _ => Err(snow::Error::Rng),
        }
    }
}

impl Drop for OneShot {
    fn drop(&mut self) {
        if let Some(bytes) = self.0.as_mut() {
            bytes.zeroize();
        }
    }
}

/// What one record carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// A complete v2 frame (its last fragment arrived).
    Frame(String),
    /// A close record: the peer closes with this code and reason.
    Close { code: u16, reason: String },
}

/// Both directions of an established channel. [`SealedChannel::split`] gives a reader task and
/// a writer task one half each.
#[derive(Debug)]
pub struct SealedChannel {
    sender: SealedSender,
    receiver: SealedReceiver,
}

impl SealedChannel {
    fn from_handshake(hs: HandshakeState) -> Result<Self, SealedError> {
        let state = Arc::new(
            hs.into_stateless_transport_mode()
                .map_err(|_| SealedError::HandshakeFailed)?,
        );
        Ok(Self {
            sender: SealedSender {
                state: Arc::clone(&state),
                nonce: 0,
            },
            receiver: SealedReceiver {
                state,
                nonce: 0,
                frame: Vec::new(),
                failed: None,
                closed: false,
            },
        })
    }

    /// See [`SealedSender::seal_frame`].
    pub fn seal_frame(&mut self, frame: &str) -> Result<Vec<Vec<u8>>, SealedError> {
        self.sender.seal_frame(frame)
    }

    /// See [`SealedSender::seal_close`].
    pub fn seal_close(&mut self, code: u16, reason: &str) -> Result<Vec<u8>, SealedError> {
        self.sender.seal_close(code, reason)
    }

    /// See [`SealedSender::seal_plaintext`].
    pub fn seal_plaintext(&mut self, plaintext: &[u8]) -> Result<Vec<u8>, SealedError> {
        self.sender.seal_plaintext(plaintext)
    }

    /// See [`SealedReceiver::open_record`].
    pub fn open_record(&mut self, record: &[u8]) -> Result<Option<Opened>, SealedError> {
        self.receiver.open_record(record)
    }

    pub fn split(self) -> (SealedSender, SealedReceiver) {
        (self.sender, self.receiver)
    }
}

/// The sending half: seals frames and close records, in order (each record uses the next
/// nonce, so records must be sent in the order they were sealed).
pub struct SealedSender {
    state: Arc<StatelessTransportState>,
    nonce: u64,
}

impl std::fmt::Debug for SealedSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedSender")
            .field("nonce", &self.nonce)
            .finish_non_exhaustive()
    }
}

impl SealedSender {
    /// One v2 frame as records: fragments of at most 65,518 data bytes, every one kind `0x00`
    /// but the last (`0x01`). An empty frame is one `0x01` record. The frame size is not checked
    /// here (the v2 encoders bound it; the receiver enforces 262,144 bytes).
    pub fn seal_frame(&mut self, frame: &str) -> Result<Vec<Vec<u8>>, SealedError> {
        let bytes = frame.as_bytes();
        let count = bytes.len().div_ceil(MAX_FRAGMENT_DATA_BYTES).max(1);
        let mut records = Vec::with_capacity(count);
        let mut chunks = bytes.chunks(MAX_FRAGMENT_DATA_BYTES).peekable();
        if chunks.peek().is_none() {
            records.push(self.seal_record(KIND_LAST_FRAGMENT, &[])?);
        }
        while let Some(chunk) = chunks.next() {
            let kind = if chunks.peek().is_some() {
                KIND_FRAGMENT
            } else {
                KIND_LAST_FRAGMENT
            };
            records.push(self.seal_record(kind, chunk)?);
        }
        Ok(records)
    }

    /// A close record. The code must be one a WebSocket close frame may carry and the reason at
    /// most 123 bytes, else [`Malformed::CloseRecord`] and no nonce is used.
    pub fn seal_close(&mut self, code: u16, reason: &str) -> Result<Vec<u8>, SealedError> {
        if !is_sendable_close_code(code) || reason.len() > MAX_CLOSE_REASON_BYTES {
            return Err(SealedError::Malformed(Malformed::CloseRecord));
        }
        let mut data = Vec::with_capacity(2 + reason.len());
        data.extend_from_slice(&code.to_be_bytes());
        data.extend_from_slice(reason.as_bytes());
        self.seal_record(KIND_CLOSE, &data)
    }

    /// A record of arbitrary plaintext (at most 65,519 bytes), for tests, vectors and fuzzing;
    /// the protocol's records come from [`seal_frame`](Self::seal_frame) and
    /// [`seal_close`](Self::seal_close).
    pub fn seal_plaintext(&mut self, plaintext: &[u8]) -> Result<Vec<u8>, SealedError> {
        if plaintext.len() > MAX_RECORD_PLAINTEXT_BYTES {
            return Err(SealedError::RecordTooBig(plaintext.len() + TAG_BYTES));
        }
        let mut record = vec![0u8; plaintext.len() + TAG_BYTES];
        let n = self
            .state
            .write_message(self.nonce, plaintext, &mut record)
            .map_err(|_| SealedError::Internal)?;
        record.truncate(n);
        self.nonce += 1;
        Ok(record)
    }

    fn seal_record(&mut self, kind: u8, data: &[u8]) -> Result<Vec<u8>, SealedError> {
        let mut plaintext = Vec::with_capacity(1 + data.len());
        plaintext.push(kind);
        plaintext.extend_from_slice(data);
        self.seal_plaintext(&plaintext)
    }

    /// Records sealed so far.
    pub fn records_sent(&self) -> u64 {
        self.nonce
    }
}

/// Close codes a WebSocket close frame may carry (RFC 6455 §7.4, IANA registry).
pub fn is_sendable_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// The receiving half: opens records in order and assembles frames. After any error it stays
/// failed (every later record gets the same error); after a close record, further records are
/// [`Malformed::AfterClose`].
pub struct SealedReceiver {
    state: Arc<StatelessTransportState>,
    nonce: u64,
    frame: Vec<u8>,
    failed: Option<SealedError>,
    closed: bool,
}

impl std::fmt::Debug for SealedReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedReceiver")
            .field("nonce", &self.nonce)
            .field("pending_frame_bytes", &self.frame.len())
            .field("failed", &self.failed)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl SealedReceiver {
    /// Opens one record (one binary WebSocket message): `Ok(None)` for a fragment with more to
    /// come, `Ok(Some(_))` for a complete frame or a close record.
    pub fn open_record(&mut self, record: &[u8]) -> Result<Option<Opened>, SealedError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let result = self.open_inner(record);
        if let Err(e) = result {
            self.failed = Some(e);
            self.frame = Vec::new();
        }
        result
    }

    /// The caller saw a text WebSocket message after the handshake: `1002 protocol_error`,
    /// and the receiver fails as for a bad record.
    pub fn text_message(&mut self) -> SealedError {
        let e = SealedError::Malformed(Malformed::TextMessage);
        self.failed.get_or_insert(e);
        e
    }

    fn open_inner(&mut self, record: &[u8]) -> Result<Option<Opened>, SealedError> {
        if record.len() > MAX_RECORD_BYTES {
            return Err(SealedError::RecordTooBig(record.len()));
        }
        if record.len() < TAG_BYTES {
            return Err(SealedError::RecordInvalid);
        }
        let mut plaintext = vec![0u8; record.len()];
        let n = self
            .state
            .read_message(self.nonce, record, &mut plaintext)
            .map_err(|_| SealedError::RecordInvalid)?;
        self.nonce += 1;
        plaintext.truncate(n);
        if self.closed {
            return Err(SealedError::Malformed(Malformed::AfterClose));
        }
        let Some((&kind, data)) = plaintext.split_first() else {
            return Err(SealedError::Malformed(Malformed::EmptyPlaintext));
        };
        match kind {
            KIND_FRAGMENT | KIND_LAST_FRAGMENT => {
                if self.frame.len() + data.len() > MAX_MESSAGE_BYTES {
                    return Err(SealedError::FrameTooBig);
                }
                self.frame.extend_from_slice(data);
                if kind == KIND_FRAGMENT {
                    return Ok(None);
                }
                let frame = std::mem::take(&mut self.frame);
                String::from_utf8(frame)
                    .map(|text| Some(Opened::Frame(text)))
                    .map_err(|_| SealedError::InvalidUtf8)
            }
            KIND_CLOSE => {
                let close = parse_close(data)?;
                self.closed = true;
                self.frame = Vec::new();
                Ok(Some(close))
            }
            other => Err(SealedError::Malformed(Malformed::UnknownKind(other))),
        }
    }

    /// Records opened so far (authenticated ones).
    pub fn records_received(&self) -> u64 {
        self.nonce
    }
}

fn parse_close(data: &[u8]) -> Result<Opened, SealedError> {
    let bad = SealedError::Malformed(Malformed::CloseRecord);
    let (code, reason) = data.split_first_chunk::<2>().ok_or(bad)?;
    let code = u16::from_be_bytes(*code);
    if !is_sendable_close_code(code) || reason.len() > MAX_CLOSE_REASON_BYTES {
        return Err(bad);
    }
    let reason = std::str::from_utf8(reason).map_err(|_| SealedError::InvalidUtf8)?;
    Ok(Opened::Close {
        code,
        reason: reason.to_owned(),
    })
}
