//! The sealed transport's I/O-free pieces (issue #23): handshake, records, sealed payloads and
//! links, refusal proofs; the committed vectors the TypeScript SDK checks itself against
//! (`tests/sealed-vectors.json`, rewritten with `APPDUCT_WRITE_SEALED_VECTORS=1`); and snow
//! against the published cacophony vectors for our Noise protocol.
#![allow(clippy::unwrap_used)]

use appduct_protocol::bootstrap::{
    self, AnyPayload, BootstrapPayload, DecodeError, SEALED_VERSION, SealedBootstrapPayload,
};
use appduct_protocol::close::CloseReason;
use appduct_protocol::ids::ClaimToken;
use appduct_protocol::limits::MAX_MESSAGE_BYTES;
use appduct_protocol::link::{self, AnyParsedLink, LinkError, RefusalReason};
use appduct_protocol::sealed::{
    self, Hello, Initiator, KIND_CLOSE, KIND_FRAGMENT, KIND_LAST_FRAGMENT, MAX_FRAGMENT_DATA_BYTES,
    MAX_RECORD_BYTES, MAX_RECORD_PLAINTEXT_BYTES, Malformed, Opened, Responder, RngSource,
    SealedChannel, SealedError, StaticKeypair, hex,
};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// A P-256 host key in PKCS#8 DER (generated once with openssl for these tests; no daemon uses
/// it).
const HOST_KEY_DER_HEX: &str = "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b02010104204b052011f916caaa1f0053025eb3b2db3e857203ae920e0f59027d20900ba7cda1440342000408abe0bd3b079e3656310a233473dacf55480dbc2793d494da10246fc513c88b525aa24191cd1616c0a299f4fec478b7786dfa5e8fc8fe1daa930c9407518d75";

const VECTORS_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sealed-vectors.json");
const CACOPHONY_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/noise-vectors/cacophony-NK_25519_ChaChaPoly_SHA256.json"
);

const APP_EPHEMERAL: [u8; 32] = seq(0x10);
const DAEMON_EPHEMERAL: [u8; 32] = seq(0x40);

const fn seq(start: u8) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = start + i as u8;
        i += 1;
    }
    out
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn unhex32(s: &str) -> [u8; 32] {
    unhex(s).try_into().unwrap()
}

fn sha256_hex(parts: &[Vec<u8>]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    hex(&h.finalize())
}

fn keys() -> StaticKeypair {
    StaticKeypair::from_host_key_der(&unhex(HOST_KEY_DER_HEX))
}

/// A completed handshake with its messages: the app's channel, the daemon's, and what the daemon
/// learnt.
struct Handshake {
    app: SealedChannel,
    daemon: SealedChannel,
    hello: Hello,
    message1: Vec<u8>,
    message2: Vec<u8>,
    hash: Vec<u8>,
}

fn handshake_with(payload: Vec<u8>, app_eph: [u8; 32], daemon_eph: [u8; 32]) -> Handshake {
    let keys = keys();
    let mut app = Initiator::with_hello_payload(*keys.public_key(), app_eph, payload).unwrap();
    let mut daemon = Responder::new(&keys, daemon_eph).unwrap();
    let message1 = app.write_message1().unwrap();
    let hello = daemon.read_message1(&message1).unwrap();
    let message2 = daemon.write_message2().unwrap();
    app.read_message2(&message2).unwrap();
    let hash = app.handshake_hash();
    assert_eq!(hash, daemon.handshake_hash());
    Handshake {
        app: app.into_transport().unwrap(),
        daemon: daemon.into_transport().unwrap(),
        hello,
        message1,
        message2,
        hash,
    }
}

fn handshake() -> Handshake {
    handshake_with(
        RngSource::Csprng.hello_payload().into_bytes(),
        APP_EPHEMERAL,
        DAEMON_EPHEMERAL,
    )
}

fn frame(opened: Result<Option<Opened>, SealedError>) -> String {
    match opened {
        Ok(Some(Opened::Frame(text))) => text,
        other => panic!("expected a frame, got {other:?}"),
    }
}

/// Opens `records` in order; the result of the last one (every earlier one must be a fragment).
fn open_all(
    channel: &mut SealedChannel,
    records: &[Vec<u8>],
) -> Result<Option<Opened>, SealedError> {
    let (last, init) = records.split_last().unwrap();
    for r in init {
        assert_eq!(channel.open_record(r), Ok(None));
    }
    channel.open_record(last)
}

const CLAIM: &str = r#"{"type":"session_claim","session_id":"Qm9vdHN0cmFwSWQx","token":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8","protocol_version":2,"app":{"name":"shopdemo","platform":"react-native"}}"#;
const ACK: &str = r#"{"type":"session_ack","session_id":"Qm9vdHN0cmFwSWQx","resume_token":"ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8","alias":"shopdemo","keepalive_interval_s":15,"grace_s":600}"#;

// ---------------------------------------------------------------------------------------------
// Static key

#[test]
fn static_key_is_hkdf_of_the_host_key_clamped() {
    let der = unhex(HOST_KEY_DER_HEX);
    let k = StaticKeypair::from_host_key_der(&der);
    // HKDF-SHA256 of RFC 5869 with L = 32 is one HMAC for the PRK and one for T(1).
    use hmac::Mac as _;
    let mut prk = hmac::Hmac::<Sha256>::new_from_slice(sealed::STATIC_KEY_SALT).unwrap();
    prk.update(&der);
    let prk = prk.finalize().into_bytes();
    let mut t1 = hmac::Hmac::<Sha256>::new_from_slice(&prk).unwrap();
    t1.update(sealed::STATIC_KEY_INFO);
    t1.update(&[1]);
    let okm: [u8; 32] = t1.finalize().into_bytes().into();
    assert_eq!(k.private_key(), &sealed::clamp(okm));
    assert_eq!(k.private_key()[0] & 7, 0);
    assert_eq!(k.private_key()[31] & 0xc0, 0x40);
    assert_eq!(k.public_key(), &sealed::public_key_of(*k.private_key()));
    // Another host key, another static key; the same one, the same.
    let mut other = der.clone();
    other[40] ^= 1;
    assert_ne!(
        StaticKeypair::from_host_key_der(&other).public_key(),
        k.public_key()
    );
    assert_eq!(keys().public_key(), k.public_key());
}

#[test]
fn static_key_debug_shows_the_public_half_only() {
    let k = keys();
    let text = format!("{k:?}");
    assert!(text.contains(&hex(k.public_key())), "{text}");
    assert!(!text.contains(&hex(k.private_key())), "{text}");
    assert!(text.contains("<redacted>"));
}

// ---------------------------------------------------------------------------------------------
// Handshake

#[test]
fn handshake_round_trip_carries_frames_both_ways() {
    let mut h = handshake();
    assert_eq!(h.hello.rng, RngSource::Csprng);
    assert_eq!(h.message1.len(), 32 + CLAIM_HELLO_LEN + 16);
    assert_eq!(h.message2.len(), 32 + 2 + 16);
    let records = h.app.seal_frame(CLAIM).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(frame(h.daemon.open_record(&records[0])), CLAIM);
    let records = h.daemon.seal_frame(ACK).unwrap();
    assert_eq!(frame(h.app.open_record(&records[0])), ACK);
    // Nothing of the frame is visible in the record.
    assert!(!contains(&records[0], b"session_ack"));
    assert!(!contains(&h.message1, b"csprng"));
}

const CLAIM_HELLO_LEN: usize = r#"{"rng":"csprng"}"#.len();

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn handshakes_differ_with_the_ephemeral_keys() {
    let a = handshake();
    let b = handshake_with(
        RngSource::Csprng.hello_payload().into_bytes(),
        seq(0x11),
        DAEMON_EPHEMERAL,
    );
    assert_ne!(a.message1, b.message1);
    assert_ne!(a.hash, b.hash);
    // The daemon's ephemeral alone changes message 2 and every record key.
    let mut c = handshake_with(
        RngSource::Csprng.hello_payload().into_bytes(),
        APP_EPHEMERAL,
        seq(0x41),
    );
    assert_eq!(a.message1, c.message1);
    assert_ne!(a.message2, c.message2);
    let mut a = a;
    let record = a.app.seal_frame(CLAIM).unwrap().remove(0);
    assert_eq!(
        c.daemon.open_record(&record),
        Err(SealedError::RecordInvalid)
    );
}

#[test]
fn drbg_and_unknown_hello_keys_are_accepted() {
    let h = handshake_with(
        br#"{"x":[1,2],"rng":"drbg","future":{"a":null}}"#.to_vec(),
        APP_EPHEMERAL,
        DAEMON_EPHEMERAL,
    );
    assert_eq!(h.hello.rng, RngSource::Drbg);
    assert_eq!(
        RngSource::Drbg.hello_payload(),
        r#"{"rng":"drbg"}"#,
        "the payload an app sends"
    );
}

fn daemon_reads(message1: &[u8]) -> Result<Hello, SealedError> {
    Responder::new(&keys(), DAEMON_EPHEMERAL)
        .unwrap()
        .read_message1(message1)
}

fn message1_with(payload: &[u8]) -> Vec<u8> {
    Initiator::with_hello_payload(*keys().public_key(), APP_EPHEMERAL, payload.to_vec())
        .unwrap()
        .write_message1()
        .unwrap()
}

#[test]
fn bad_hello_payloads_fail_the_handshake() {
    for payload in [
        &b""[..],
        b"{}",
        b"[]",
        b"null",
        br#"{"rng":"mathrandom"}"#,
        br#"{"rng":1}"#,
        br#"{"rng":"CSPRNG"}"#,
        b"{\"rng\":\"csprng\"",
        b"\xff\xfe",
    ] {
        let e = daemon_reads(&message1_with(payload)).unwrap_err();
        assert_eq!(e, SealedError::HandshakeFailed, "{payload:?}");
        assert_eq!(e.close_reason(), CloseReason::SealedHandshakeFailed);
        assert!(!e.sends_close_record());
    }
    // 256 bytes of payload is the largest message 1 (304 bytes); an initiator never builds more.
    let mut big = br#"{"rng":"csprng","pad":""#.to_vec();
    big.resize(254, b'a');
    big.extend_from_slice(b"\"}");
    let m = message1_with(&big);
    assert_eq!(m.len(), sealed::MAX_HANDSHAKE_MESSAGE_BYTES);
    assert_eq!(daemon_reads(&m).unwrap().rng, RngSource::Csprng);
    big.insert(1, b' ');
    assert_eq!(
        Initiator::with_hello_payload(*keys().public_key(), APP_EPHEMERAL, big).unwrap_err(),
        SealedError::HandshakeFailed
    );
}

#[test]
fn message1_size_bounds() {
    let good = message1_with(br#"{"rng":"csprng"}"#);
    for n in [0, 1, 31, 32, 47] {
        assert_eq!(
            daemon_reads(&good[..n.min(good.len())]).unwrap_err(),
            SealedError::HandshakeFailed,
            "{n}"
        );
    }
    // 48 bytes is an empty payload: well-formed Noise, but not the agreed JSON.
    assert_eq!(
        daemon_reads(&message1_with(b"")).map(|_| ()),
        Err(SealedError::HandshakeFailed)
    );
    let mut long = good.clone();
    long.resize(305, 0);
    assert_eq!(
        daemon_reads(&long).unwrap_err(),
        SealedError::HandshakeFailed
    );
    assert_eq!(
        daemon_reads(&vec![0u8; 100_000]).unwrap_err(),
        SealedError::HandshakeFailed
    );
    // Garbage of a valid size, and a truncated message, do not decrypt.
    assert_eq!(
        daemon_reads(&[7u8; 64]).unwrap_err(),
        SealedError::HandshakeFailed
    );
    assert_eq!(
        daemon_reads(&good[..good.len() - 1]).unwrap_err(),
        SealedError::HandshakeFailed
    );
    let mut flipped = good.clone();
    flipped[40] ^= 0x80;
    assert_eq!(
        daemon_reads(&flipped).unwrap_err(),
        SealedError::HandshakeFailed
    );
}

#[test]
fn wrong_static_key_fails_the_handshake() {
    // A link minted before `appduct keygen --force`: another host key, another static key.
    let old = StaticKeypair::from_private_bytes([9; 32]);
    let m = Initiator::new(*old.public_key(), APP_EPHEMERAL, RngSource::Csprng)
        .unwrap()
        .write_message1()
        .unwrap();
    let e = daemon_reads(&m).unwrap_err();
    assert_eq!(e, SealedError::HandshakeFailed);
    assert_eq!(e.close_reason().code(), 1008);
    assert_eq!(e.close_reason().reason(), "sealed_handshake_failed");
}

#[test]
fn message2_is_checked_by_the_app() {
    let keys = keys();
    let fresh = || {
        let mut app = Initiator::new(*keys.public_key(), APP_EPHEMERAL, RngSource::Csprng).unwrap();
        let m1 = app.write_message1().unwrap();
        let mut daemon = Responder::new(&keys, DAEMON_EPHEMERAL).unwrap();
        daemon.read_message1(&m1).unwrap();
        (app, daemon.write_message2().unwrap())
    };
    let (mut app, m2) = fresh();
    let mut bad = m2.clone();
    bad[45] ^= 1;
    assert_eq!(app.read_message2(&bad), Err(SealedError::HandshakeFailed));
    let (mut app, _) = fresh();
    assert_eq!(
        app.read_message2(&m2[..47]),
        Err(SealedError::HandshakeFailed)
    );
    // A message 2 from a daemon holding another key does not decrypt either.
    let (mut app, _) = fresh();
    let other = StaticKeypair::from_private_bytes([3; 32]);
    let mut impostor = Responder::new(&other, DAEMON_EPHEMERAL).unwrap();
    let m1 = Initiator::new(*other.public_key(), APP_EPHEMERAL, RngSource::Csprng)
        .unwrap()
        .write_message1()
        .unwrap();
    impostor.read_message1(&m1).unwrap();
    let m2_other = impostor.write_message2().unwrap();
    assert_eq!(
        app.read_message2(&m2_other),
        Err(SealedError::HandshakeFailed)
    );
    // Out of order: the daemon cannot write message 2 before reading message 1.
    let mut daemon = Responder::new(&keys, DAEMON_EPHEMERAL).unwrap();
    assert!(daemon.write_message2().is_err());
}

#[test]
fn sealed_halves_move_between_tasks() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<sealed::SealedSender>();
    send_sync::<sealed::SealedReceiver>();
    send_sync::<SealedChannel>();
    send_sync::<StaticKeypair>();
    fn send<T: Send>() {}
    send::<Responder>();
    send::<Initiator>();
}

#[test]
fn split_halves_work_independently() {
    let h = handshake();
    let (mut app_tx, mut app_rx) = h.app.split();
    let (mut daemon_tx, mut daemon_rx) = h.daemon.split();
    for i in 0..5 {
        let up = format!("{{\"n\":{i}}}");
        let down = format!("{{\"m\":{i}}}");
        let r = app_tx.seal_frame(&up).unwrap();
        let d = daemon_tx.seal_frame(&down).unwrap();
        assert_eq!(frame(daemon_rx.open_record(&r[0])), up);
        assert_eq!(frame(app_rx.open_record(&d[0])), down);
    }
    assert_eq!(app_tx.records_sent(), 5);
    assert_eq!(daemon_rx.records_received(), 5);
}

// ---------------------------------------------------------------------------------------------
// Records

#[test]
fn tampered_replayed_reordered_truncated_records_are_invalid() {
    let records = {
        let mut h = handshake();
        let mut v = h.app.seal_frame("{\"a\":1}").unwrap();
        v.extend(h.app.seal_frame("{\"b\":2}").unwrap());
        v
    };
    let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        (
            "tampered",
            vec![{
                let mut r = records[0].clone();
                r[3] ^= 1;
                r
            }],
        ),
        (
            "tampered tag",
            vec![{
                let mut r = records[0].clone();
                *r.last_mut().unwrap() ^= 0x40;
                r
            }],
        ),
        ("replayed", vec![records[0].clone(), records[0].clone()]),
        // The second record first: reordered, or the first one dropped.
        ("reordered", vec![records[1].clone()]),
        (
            "truncated",
            vec![records[0][..records[0].len() - 1].to_vec()],
        ),
        ("shorter than a tag", vec![records[0][..15].to_vec()]),
        ("empty message", vec![Vec::new()]),
        (
            "extended",
            vec![{
                let mut r = records[0].clone();
                r.push(0);
                r
            }],
        ),
    ];
    for (name, sequence) in cases {
        let mut h = handshake();
        let (last, init) = sequence.split_last().unwrap();
        for r in init {
            assert!(h.daemon.open_record(r).unwrap().is_some(), "{name}");
        }
        let e = h.daemon.open_record(last).unwrap_err();
        assert_eq!(e, SealedError::RecordInvalid, "{name}");
        assert_eq!(e.close_reason(), CloseReason::SealedRecordInvalid);
        assert!(!e.sends_close_record());
        // The receiver stays failed, even for the record it expected.
        assert_eq!(
            h.daemon.open_record(&records[0]),
            Err(SealedError::RecordInvalid),
            "{name}"
        );
    }
}

#[test]
fn records_of_the_other_direction_are_invalid() {
    // The daemon's own records, reflected back to it, use the other key.
    let mut h = handshake();
    let own = h.daemon.seal_frame(ACK).unwrap();
    assert_eq!(
        h.daemon.open_record(&own[0]),
        Err(SealedError::RecordInvalid)
    );
}

#[test]
fn frame_fragment_boundaries() {
    assert_eq!(MAX_RECORD_PLAINTEXT_BYTES, 65_519);
    assert_eq!(MAX_FRAGMENT_DATA_BYTES, 65_518);
    for (len, records) in [
        (0, 1),
        (1, 1),
        (65_518, 1),
        (65_519, 2),
        (65_520, 2),
        (131_036, 2),
        (131_037, 3),
        (MAX_MESSAGE_BYTES, 5),
    ] {
        let mut h = handshake();
        let text = "x".repeat(len);
        let sealed = h.app.seal_frame(&text).unwrap();
        assert_eq!(sealed.len(), records, "{len}");
        for (i, r) in sealed.iter().enumerate() {
            assert!(r.len() <= MAX_RECORD_BYTES);
            let last = i + 1 == sealed.len();
            if !last {
                assert_eq!(r.len(), MAX_RECORD_BYTES, "{len}: full fragments");
            }
        }
        assert_eq!(frame(open_all(&mut h.daemon, &sealed)), text, "{len}");
    }
}

#[test]
fn a_frame_over_262144_bytes_is_message_too_big() {
    let mut h = handshake();
    let sealed = h
        .app
        .seal_frame(&"x".repeat(MAX_MESSAGE_BYTES + 1))
        .unwrap();
    assert_eq!(sealed.len(), 5);
    let e = open_all(&mut h.daemon, &sealed).unwrap_err();
    assert_eq!(e, SealedError::FrameTooBig);
    assert_eq!(e.close_reason(), CloseReason::MessageTooBig);
    assert!(e.sends_close_record());
    // The bound holds before the last fragment: endless `0x00` fragments fail at the fragment
    // that crosses 262,144 bytes, whatever comes next.
    let mut h = handshake();
    let chunk = {
        let mut p = vec![KIND_FRAGMENT];
        p.resize(1 + MAX_FRAGMENT_DATA_BYTES, b'x');
        p
    };
    for _ in 0..4 {
        let r = h.app.seal_plaintext(&chunk).unwrap();
        assert_eq!(h.daemon.open_record(&r), Ok(None));
    }
    let r = h.app.seal_plaintext(&chunk).unwrap();
    assert_eq!(h.daemon.open_record(&r), Err(SealedError::FrameTooBig));
}

#[test]
fn oversized_records() {
    let mut h = handshake();
    // The sender refuses to seal more than 65,519 plaintext bytes.
    assert_eq!(
        h.app
            .seal_plaintext(&vec![KIND_LAST_FRAGMENT; MAX_RECORD_PLAINTEXT_BYTES + 1]),
        Err(SealedError::RecordTooBig(MAX_RECORD_BYTES + 1))
    );
    assert!(
        h.app
            .seal_plaintext(&vec![KIND_FRAGMENT; MAX_RECORD_PLAINTEXT_BYTES])
            .is_ok()
    );
    // The receiver refuses a longer message before decrypting it.
    let e = h
        .daemon
        .open_record(&vec![0; MAX_RECORD_BYTES + 1])
        .unwrap_err();
    assert_eq!(e, SealedError::RecordTooBig(MAX_RECORD_BYTES + 1));
    assert_eq!(e.close_reason(), CloseReason::MessageTooBig);
}

#[test]
fn invalid_utf8_frames_are_invalid_payload() {
    let mut h = handshake();
    let r = h.app.seal_plaintext(b"\x01{\"a\":\"\xff\"}").unwrap();
    let e = h.daemon.open_record(&r).unwrap_err();
    assert_eq!(e, SealedError::InvalidUtf8);
    assert_eq!(e.close_reason(), CloseReason::InvalidPayload);
    // A code point split across two fragments is fine: UTF-8 is checked on the whole frame.
    let mut h = handshake();
    let text = "€".repeat(30_000);
    let sealed = h.app.seal_frame(&text).unwrap();
    assert_eq!(
        MAX_FRAGMENT_DATA_BYTES % 3,
        1,
        "the split lands inside a code point"
    );
    assert_eq!(frame(open_all(&mut h.daemon, &sealed)), text);
    // A frame that ends inside a code point is not.
    let mut h = handshake();
    let a = h.app.seal_plaintext(b"\x00\xe2\x82").unwrap();
    let b = h.app.seal_plaintext(b"\x01").unwrap();
    assert_eq!(h.daemon.open_record(&a), Ok(None));
    assert_eq!(h.daemon.open_record(&b), Err(SealedError::InvalidUtf8));
}

#[test]
fn unknown_kinds_and_empty_plaintexts_are_protocol_errors() {
    for (plaintext, expected) in [
        (&b""[..], Malformed::EmptyPlaintext),
        (b"\x03", Malformed::UnknownKind(3)),
        (b"\x7b\"type\":1}", Malformed::UnknownKind(0x7b)),
        (b"\xff", Malformed::UnknownKind(0xff)),
        (b"\x02", Malformed::CloseRecord),
        (b"\x02\x03", Malformed::CloseRecord),
        (b"\x02\x03\xe7", Malformed::CloseRecord), // 999
        (b"\x02\x03\xee", Malformed::CloseRecord), // 1006: never sent
        (b"\x02\x13\x88", Malformed::CloseRecord), // 5000
    ] {
        let mut h = handshake();
        let r = h.app.seal_plaintext(plaintext).unwrap();
        let e = h.daemon.open_record(&r).unwrap_err();
        assert_eq!(e, SealedError::Malformed(expected), "{plaintext:?}");
        assert_eq!(e.close_reason(), CloseReason::ProtocolError);
        assert!(e.sends_close_record());
    }
    let mut h = handshake();
    let mut long_reason = b"\x02\x03\xe8".to_vec();
    long_reason.extend_from_slice(&[b'r'; 124]);
    let r = h.app.seal_plaintext(&long_reason).unwrap();
    assert_eq!(
        h.daemon.open_record(&r),
        Err(SealedError::Malformed(Malformed::CloseRecord))
    );
    // A text WebSocket message after the handshake.
    let (_, mut rx) = handshake().daemon.split();
    let e = rx.text_message();
    assert_eq!(e.close_reason(), CloseReason::ProtocolError);
    assert_eq!(rx.open_record(&[0; 40]), Err(e));
}

#[test]
fn close_records_round_trip() {
    let mut h = handshake();
    let reason = "r".repeat(123);
    for (code, reason) in [
        (1008, "revoked"),
        (1000, ""),
        (1001, "daemon_shutdown"),
        (4999, reason.as_str()),
    ] {
        let mut h = handshake();
        let r = h.daemon.seal_close(code, reason).unwrap();
        assert_eq!(
            h.app.open_record(&r),
            Ok(Some(Opened::Close {
                code,
                reason: reason.to_owned()
            }))
        );
        // Nothing may follow a close record.
        let after = h.daemon.seal_frame("{}").unwrap();
        assert_eq!(
            h.app.open_record(&after[0]),
            Err(SealedError::Malformed(Malformed::AfterClose))
        );
    }
    // A close record discards a partly received frame.
    let part = h.daemon.seal_plaintext(b"\x00{\"type\"").unwrap();
    assert_eq!(h.app.open_record(&part), Ok(None));
    let close = h.daemon.seal_close(1008, "session_revoked").unwrap();
    assert!(matches!(
        h.app.open_record(&close),
        Ok(Some(Opened::Close { code: 1008, .. }))
    ));
    // The sender refuses what a receiver would refuse, without using a nonce.
    let mut h = handshake();
    for (code, reason) in [
        (1006, ""),
        (999, ""),
        (5000, ""),
        (1000, "r".repeat(124).as_str()),
    ] {
        assert_eq!(
            h.daemon.seal_close(code, reason),
            Err(SealedError::Malformed(Malformed::CloseRecord))
        );
    }
    let r = h.daemon.seal_frame(ACK).unwrap();
    assert_eq!(frame(h.app.open_record(&r[0])), ACK);
    // A close reason that is not UTF-8.
    let mut h = handshake();
    let r = h.daemon.seal_plaintext(b"\x02\x03\xf0\xff").unwrap();
    assert_eq!(h.app.open_record(&r), Err(SealedError::InvalidUtf8));
}

#[test]
fn close_reasons_of_the_sealed_route() {
    for (reason, code, text) in [
        (
            CloseReason::ExpectedSealedHandshake,
            1008,
            "expected_sealed_handshake",
        ),
        (
            CloseReason::SealedHandshakeFailed,
            1008,
            "sealed_handshake_failed",
        ),
        (
            CloseReason::SealedRecordInvalid,
            1008,
            "sealed_record_invalid",
        ),
        (CloseReason::InvalidRefusal, 1008, "invalid_refusal"),
        (CloseReason::RefusalRecorded, 1000, "refusal_recorded"),
    ] {
        assert_eq!((reason.code(), reason.reason()), (code, text));
        assert_eq!(CloseReason::from_parts(code, text), Some(reason));
    }
    assert_eq!(
        SealedError::ExpectedHandshake.close_reason(),
        CloseReason::ExpectedSealedHandshake
    );
    assert_eq!(
        SealedError::Internal.close_reason(),
        CloseReason::InternalError
    );
}

// ---------------------------------------------------------------------------------------------
// Sealed payloads and links

fn v2_example() -> BootstrapPayload {
    BootstrapPayload::new(
        "192.168.50.12".parse().unwrap(),
        8443,
        "Qm9vdHN0cmFwSWQx",
        ClaimToken::from_bytes(std::array::from_fn(|i| i as u8)),
        1_764_494_400,
    )
}

fn sealed_example() -> SealedBootstrapPayload {
    SealedBootstrapPayload::new(v2_example(), *keys().public_key())
}

#[test]
fn sealed_payload_layout() {
    let v2 = v2_example().encode_bytes().unwrap();
    let bytes = sealed_example().encode_bytes().unwrap();
    assert_eq!(bytes.len(), 81 + 16);
    assert_eq!(bytes[0], SEALED_VERSION);
    assert_eq!(&bytes[1..65], &v2[1..]);
    assert_eq!(&bytes[65..], keys().public_key());
    let text = sealed_example().encode().unwrap();
    let back = bootstrap::decode_sealed(&text).unwrap();
    assert_eq!(back.static_key, *keys().public_key());
    assert_eq!(
        back.payload.encode().unwrap(),
        v2_example().encode().unwrap()
    );
    // IPv6: 93 + n.
    let mut p6 = sealed_example();
    p6.payload.address = "fd00::1".parse().unwrap();
    assert_eq!(p6.encode_bytes().unwrap().len(), 93 + 16);
    assert!(
        SealedBootstrapPayload::new(p6.payload.clone(), [0; 32])
            .encode()
            .is_ok()
    );
    // The longest sealed payload fits the text bound.
    p6.payload.session_id = "s".repeat(255);
    assert_eq!(
        p6.encode().unwrap().len(),
        bootstrap::MAX_SEALED_PAYLOAD_TEXT_LEN
    );
}

#[test]
fn v2_decoders_refuse_sealed_payloads_and_vice_versa() {
    let sealed_text = sealed_example().encode().unwrap();
    let v2_text = v2_example().encode().unwrap();
    // What every appduct v2 SDK does with a sealed link.
    assert_eq!(
        bootstrap::decode(&sealed_text).unwrap_err(),
        DecodeError::Version(3)
    );
    assert_eq!(
        bootstrap::decode_bytes(&sealed_example().encode_bytes().unwrap()).unwrap_err(),
        DecodeError::Version(3)
    );
    assert_eq!(
        bootstrap::decode_sealed(&v2_text).unwrap_err(),
        DecodeError::Version(2)
    );
    assert!(matches!(
        bootstrap::decode_any(&v2_text),
        Ok(AnyPayload::V2(_))
    ));
    match bootstrap::decode_any(&sealed_text).unwrap() {
        AnyPayload::Sealed(s) => assert_eq!(s.static_key, *keys().public_key()),
        AnyPayload::V2(_) => panic!("a sealed payload"),
    }
    let mut four = v2_example().encode_bytes().unwrap();
    four[0] = 4;
    assert_eq!(
        bootstrap::decode_any_bytes(&four).unwrap_err(),
        DecodeError::Version(4)
    );
}

#[test]
fn sealed_payload_decoding_is_strict() {
    let good = sealed_example().encode_bytes().unwrap();
    let d = bootstrap::decode_sealed_bytes;
    assert_eq!(d(&[]).unwrap_err(), DecodeError::Empty);
    assert_eq!(d(&[3]).unwrap_err(), DecodeError::Length);
    assert_eq!(d(&good[..good.len() - 1]).unwrap_err(), DecodeError::Length);
    assert_eq!(d(&good[..65]).unwrap_err(), DecodeError::Length);
    let mut long = good.clone();
    long.push(0);
    assert_eq!(d(&long).unwrap_err(), DecodeError::Length);
    let mut port0 = good.clone();
    port0[6] = 0;
    port0[7] = 0;
    assert_eq!(d(&port0).unwrap_err(), DecodeError::PortZero);
    let mut late = good.clone();
    late[57..65].copy_from_slice(&(1u64 << 53).to_be_bytes());
    assert_eq!(d(&late).unwrap_err(), DecodeError::ExpiresAtTooLarge);
    let text = sealed_example().encode().unwrap();
    for bad in [
        format!("{text}="),
        format!("{text} "),
        text.replacen('A', "+", 1),
    ] {
        assert!(bootstrap::decode_sealed(&bad).is_err(), "{bad}");
    }
    assert_eq!(
        bootstrap::decode_sealed(&"A".repeat(bootstrap::MAX_SEALED_PAYLOAD_TEXT_LEN + 1))
            .unwrap_err(),
        DecodeError::Length
    );
    assert_eq!(
        bootstrap::decode_sealed("").unwrap_err(),
        DecodeError::Empty
    );
}

#[test]
fn sealed_links_compose_and_parse() {
    let payload = sealed_example().encode().unwrap();
    let link = link::compose_sealed_deep_link("shopdemo", &payload).unwrap();
    assert_eq!(link, format!("shopdemo:///?appduct={payload}"));
    // A v2 payload is not a sealed link, and a sealed payload is not a v2 one.
    let v2 = v2_example().encode().unwrap();
    assert!(link::compose_sealed_deep_link("shopdemo", &v2).is_err());
    assert!(link::compose_deep_link("shopdemo", &payload, None).is_err());
    assert!(link::compose_sealed_deep_link("https", &payload).is_err());
    for input in [
        link.clone(),
        format!("{link}\n"),
        payload.clone(),
        format!("https://example.test/app#appduct={payload}"),
        format!("{link}&pin=sha256%2Fnot-a-pin"),
    ] {
        match link::parse_any_connect_input(&input).unwrap() {
            AnyParsedLink::Sealed(s) => {
                assert_eq!(s.payload, payload);
                assert_eq!(s.decoded.static_key, *keys().public_key());
                assert!(!format!("{s:?}").contains(&payload));
            }
            AnyParsedLink::V2(_) => panic!("{input}: sealed"),
        }
        // The v2 parser refuses it as a bad payload, as a v2 SDK does.
        assert!(matches!(
            link::parse_connect_input(&input),
            Err(LinkError::InvalidPayload(_))
        ));
    }
    // v2 input: the same answer as parse_connect_input.
    let v2_link = format!(
        "shopdemo:///?appduct={v2}&pin=sha256%2F%2BRAVLIC%2BEO4igKBMsBHOkTG5k0CK2xnPR%2FFJXDMbzbw%3D"
    );
    let AnyParsedLink::V2(a) = link::parse_any_connect_input(&v2_link).unwrap() else {
        panic!("v2");
    };
    let b = link::parse_connect_input(&v2_link).unwrap();
    assert_eq!(a.payload, b.payload);
    assert_eq!(a.pin, b.pin);
    assert!(a.pin.is_some());
    for bad in [
        "",
        "not a link",
        "x:///?pin=a",
        "x:///?appduct=AAAA",
        "x:///?appduct=a&appduct=b",
    ] {
        assert_eq!(
            link::parse_any_connect_input(bad).map(|_| ()).unwrap_err(),
            link::parse_connect_input(bad).map(|_| ()).unwrap_err(),
            "{bad:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Refusal proofs

#[test]
fn refusal_proofs() {
    let token = ClaimToken::from_bytes(std::array::from_fn(|i| i as u8));
    let proof = link::refusal_proof(&token, "Qm9vdHN0cmFwSWQx", RefusalReason::UnsupportedLink);
    assert_eq!(proof.len(), 43);
    // HMAC-SHA256 of the documented message, computed independently.
    use hmac::Mac as _;
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(token.as_bytes()).unwrap();
    mac.update(b"appduct link_refused v1\nQm9vdHN0cmFwSWQx\nunsupported_link");
    use base64::Engine as _;
    let expected =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    assert_eq!(proof, expected);
    assert!(link::verify_refusal_proof(
        &token,
        "Qm9vdHN0cmFwSWQx",
        RefusalReason::UnsupportedLink,
        &proof
    ));
    // Bound to the reason, the session and the token.
    assert!(!link::verify_refusal_proof(
        &token,
        "Qm9vdHN0cmFwSWQx",
        RefusalReason::LinkExpired,
        &proof
    ));
    assert!(!link::verify_refusal_proof(
        &token,
        "Qm9vdHN0cmFwSWQy",
        RefusalReason::UnsupportedLink,
        &proof
    ));
    let other = ClaimToken::from_bytes([7; 32]);
    assert!(!link::verify_refusal_proof(
        &other,
        "Qm9vdHN0cmFwSWQx",
        RefusalReason::UnsupportedLink,
        &proof
    ));
    for bad in [
        "",
        "AAAA",
        &format!("{proof}="),
        &format!("{proof}A"),
        &proof[..42],
    ] {
        assert!(!link::verify_refusal_proof(
            &token,
            "Qm9vdHN0cmFwSWQx",
            RefusalReason::UnsupportedLink,
            bad
        ));
    }
    // Wire strings.
    let names: Vec<_> = RefusalReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        names,
        [
            "unsupported_link",
            "link_expired",
            "handshake_failed",
            "pin_mismatch"
        ]
    );
    for r in RefusalReason::ALL {
        assert_eq!(RefusalReason::parse(r.as_str()), Some(r));
    }
    assert_eq!(RefusalReason::parse("Link_Expired"), None);
}

// ---------------------------------------------------------------------------------------------
// Vectors

fn record_entry(
    direction: &str,
    nonce: u64,
    plaintext: &[u8],
    record: &[u8],
    opened: Value,
) -> Value {
    json!({
        "direction": direction,
        "nonce": nonce,
        "plaintextHex": hex(plaintext),
        "recordHex": hex(record),
        "opened": opened,
    })
}

fn plaintext_of(kind: u8, data: &[u8]) -> Vec<u8> {
    let mut p = vec![kind];
    p.extend_from_slice(data);
    p
}

/// The app→daemon records of a rejection case, and what the daemon answers to the last one.
fn rejection(name: &str, description: &str, records: &[Vec<u8>], expect: SealedError) -> Value {
    let mut h = handshake();
    let got = open_all_lenient(&mut h.daemon, records);
    assert_eq!(got, Err(expect), "{name}");
    let reason = expect.close_reason();
    json!({
        "name": name,
        "description": description,
        "recordsHex": records.iter().map(|r| hex(r)).collect::<Vec<_>>(),
        "expect": {"code": reason.code(), "reason": reason.reason()},
    })
}

/// Like `open_all`, but earlier records may be complete frames too.
fn open_all_lenient(
    channel: &mut SealedChannel,
    records: &[Vec<u8>],
) -> Result<Option<Opened>, SealedError> {
    let (last, init) = records.split_last().unwrap();
    for r in init {
        channel.open_record(r).unwrap();
    }
    channel.open_record(last)
}

fn build_vectors() -> Value {
    let keys = keys();
    let mut h = handshake();

    // Transport records in the order they are sealed on each side.
    let mut records = Vec::new();
    let claim = h.app.seal_frame(CLAIM).unwrap();
    assert_eq!(frame(h.daemon.open_record(&claim[0])), CLAIM);
    records.push(record_entry(
        "app_to_daemon",
        0,
        &plaintext_of(1, CLAIM.as_bytes()),
        &claim[0],
        json!({"frame": CLAIM}),
    ));
    let ack = h.daemon.seal_frame(ACK).unwrap();
    assert_eq!(frame(h.app.open_record(&ack[0])), ACK);
    records.push(record_entry(
        "daemon_to_app",
        0,
        &plaintext_of(1, ACK.as_bytes()),
        &ack[0],
        json!({"frame": ACK}),
    ));
    let empty = h.app.seal_frame("").unwrap();
    assert_eq!(frame(h.daemon.open_record(&empty[0])), "");
    records.push(record_entry(
        "app_to_daemon",
        1,
        &[1],
        &empty[0],
        json!({"frame": ""}),
    ));
    let unicode = "{\"type\":\"event\",\"payload\":\"h\u{e9}llo \u{1f600}\"}";
    let uni = h.app.seal_frame(unicode).unwrap();
    assert_eq!(frame(h.daemon.open_record(&uni[0])), unicode);
    records.push(record_entry(
        "app_to_daemon",
        2,
        &plaintext_of(1, unicode.as_bytes()),
        &uni[0],
        json!({"frame": unicode}),
    ));

    // Fragmented frames: a rule and digests instead of 140 KB of hex.
    let mut fragmented = Vec::new();
    let mut nonce = 3;
    for (ch, repeat) in [("x", 70_000usize), ("\u{20ac}", 30_000)] {
        let text = ch.repeat(repeat);
        let sealed = h.app.seal_frame(&text).unwrap();
        assert_eq!(frame(open_all(&mut h.daemon, &sealed)), text);
        let plaintexts: Vec<Vec<u8>> = text
            .as_bytes()
            .chunks(MAX_FRAGMENT_DATA_BYTES)
            .enumerate()
            .map(|(i, c)| {
                plaintext_of(
                    if i + 1 == sealed.len() {
                        KIND_LAST_FRAGMENT
                    } else {
                        KIND_FRAGMENT
                    },
                    c,
                )
            })
            .collect();
        fragmented.push(json!({
            "direction": "app_to_daemon",
            "firstNonce": nonce,
            "frameRule": {"repeat": ch, "times": repeat},
            "frameBytes": text.len(),
            "recordCount": sealed.len(),
            "recordLengths": sealed.iter().map(Vec::len).collect::<Vec<_>>(),
            "kinds": plaintexts.iter().map(|p| p[0]).collect::<Vec<_>>(),
            "recordSha256Hex": sealed.iter().map(|r| sha256_hex(std::slice::from_ref(r))).collect::<Vec<_>>(),
        }));
        nonce += sealed.len() as u64;
    }

    let close = h.daemon.seal_close(1008, "revoked").unwrap();
    assert!(matches!(
        h.app.open_record(&close),
        Ok(Some(Opened::Close { .. }))
    ));
    records.push(record_entry(
        "daemon_to_app",
        1,
        &plaintext_of(
            KIND_CLOSE,
            &[&1008u16.to_be_bytes()[..], b"revoked"].concat(),
        ),
        &close,
        json!({"close": {"code": 1008, "reason": "revoked"}}),
    ));

    // Rejections, each from a fresh channel of the same handshake (app→daemon nonces from 0).
    let fresh_app = || handshake().app;
    let mut app = fresh_app();
    let r0 = app.seal_frame("{\"a\":1}").unwrap().remove(0);
    let r1 = app.seal_frame("{\"b\":2}").unwrap().remove(0);
    let mut tampered = r0.clone();
    tampered[3] ^= 1;
    let sealed_plain = |p: &[u8]| fresh_app().seal_plaintext(p).unwrap();
    let mut rejections = vec![
        rejection(
            "tampered",
            "one ciphertext bit flipped",
            &[tampered],
            SealedError::RecordInvalid,
        ),
        rejection(
            "replayed",
            "the first record twice",
            &[r0.clone(), r0.clone()],
            SealedError::RecordInvalid,
        ),
        rejection(
            "reordered",
            "the second record first (or the first one dropped)",
            std::slice::from_ref(&r1),
            SealedError::RecordInvalid,
        ),
        rejection(
            "truncated",
            "the first record less its last byte",
            &[r0[..r0.len() - 1].to_vec()],
            SealedError::RecordInvalid,
        ),
        rejection(
            "empty_plaintext",
            "a record of 0 plaintext bytes",
            &[sealed_plain(b"")],
            SealedError::Malformed(Malformed::EmptyPlaintext),
        ),
        rejection(
            "unknown_kind",
            "kind byte 0x03",
            &[sealed_plain(b"\x03{}")],
            SealedError::Malformed(Malformed::UnknownKind(3)),
        ),
        rejection(
            "bad_close_code",
            "a close record with code 1006",
            &[sealed_plain(b"\x02\x03\xee")],
            SealedError::Malformed(Malformed::CloseRecord),
        ),
        rejection(
            "invalid_utf8",
            "a frame with byte 0xff",
            &[sealed_plain(b"\x01{\"a\":\"\xff\"}")],
            SealedError::InvalidUtf8,
        ),
        rejection(
            "after_close",
            "a frame after a close record",
            &{
                let mut a = fresh_app();
                vec![
                    a.seal_close(1000, "").unwrap(),
                    a.seal_frame("{}").unwrap().remove(0),
                ]
            },
            SealedError::Malformed(Malformed::AfterClose),
        ),
    ];
    // Too big: five full `0x00` fragments; the fifth crosses 262,144 bytes.
    let mut a = fresh_app();
    let chunk = {
        let mut p = vec![KIND_FRAGMENT];
        p.resize(1 + MAX_FRAGMENT_DATA_BYTES, b'x');
        p
    };
    let big: Vec<Vec<u8>> = (0..5).map(|_| a.seal_plaintext(&chunk).unwrap()).collect();
    let mut d = handshake().daemon;
    assert_eq!(open_all(&mut d, &big), Err(SealedError::FrameTooBig));
    let too_big = json!({
        "name": "frame_too_big",
        "description": "records of plaintext 0x00 followed by 65518 'x' bytes, nonces 0..4; the fifth takes the frame past 262144 bytes",
        "recordRule": {"kind": KIND_FRAGMENT, "repeat": "x", "times": MAX_FRAGMENT_DATA_BYTES, "count": 5},
        "recordSha256Hex": big.iter().map(|r| sha256_hex(std::slice::from_ref(r))).collect::<Vec<_>>(),
        "expect": {"code": 1009, "reason": "message_too_big"},
    });
    rejections.push(too_big);

    // Handshake failures at the daemon.
    let wrong = StaticKeypair::from_private_bytes([9; 32]);
    let wrong_m1 = Initiator::new(*wrong.public_key(), APP_EPHEMERAL, RngSource::Csprng)
        .unwrap()
        .write_message1()
        .unwrap();
    assert_eq!(daemon_reads(&wrong_m1), Err(SealedError::HandshakeFailed));
    let bad_rng = message1_with(br#"{"rng":"mathrandom"}"#);
    assert_eq!(daemon_reads(&bad_rng), Err(SealedError::HandshakeFailed));
    let drbg = handshake_with(
        br#"{"rng":"drbg","extra":true}"#.to_vec(),
        APP_EPHEMERAL,
        DAEMON_EPHEMERAL,
    );
    let handshake_cases = json!([
        {"name": "wrong_static_key", "description": "message 1 to the static key of private key 09*32",
         "wrongStaticPublicHex": hex(wrong.public_key()), "message1Hex": hex(&wrong_m1),
         "expect": {"code": 1008, "reason": "sealed_handshake_failed"}},
        {"name": "unknown_rng", "description": "payload {\"rng\":\"mathrandom\"}", "message1Hex": hex(&bad_rng),
         "expect": {"code": 1008, "reason": "sealed_handshake_failed"}},
        {"name": "too_short", "description": "the first 47 bytes of the csprng message 1", "message1Hex": hex(&h.message1[..47]),
         "expect": {"code": 1008, "reason": "sealed_handshake_failed"}},
        {"name": "drbg_with_unknown_key", "description": "accepted: unknown keys are ignored",
         "message1PayloadText": r#"{"rng":"drbg","extra":true}"#, "message1Hex": hex(&drbg.message1),
         "expect": {"rng": "drbg"}},
    ]);

    // Payload v3 and its link.
    let sealed_payload = sealed_example();
    let text = sealed_payload.encode().unwrap();
    let v = sealed_payload.payload.decoded();
    let payload = json!({
        "text": text,
        "bytesHex": hex(&sealed_payload.encode_bytes().unwrap()),
        "deepLink": link::compose_sealed_deep_link("shopdemo", &text).unwrap(),
        "fields": {
            "version": SEALED_VERSION,
            "family": v.family,
            "address": v.address,
            "port": v.port,
            "sessionId": v.session_id,
            "tokenBase64url": v.token_base64url,
            "expiresAt": v.expires_at,
            "staticKeyHex": hex(&sealed_payload.static_key),
        },
    });

    let token = ClaimToken::from_bytes(std::array::from_fn(|i| i as u8));
    let proofs: Vec<Value> = RefusalReason::ALL
        .iter()
        .map(|&r| {
            json!({
                "tokenBase64url": token.to_base64url(),
                "sessionId": "Qm9vdHN0cmFwSWQx",
                "reason": r.as_str(),
                "message": format!("appduct link_refused v1\nQm9vdHN0cmFwSWQx\n{}", r.as_str()),
                "proof": link::refusal_proof(&token, "Qm9vdHN0cmFwSWQx", r),
            })
        })
        .collect();

    json!({
        "description": "Vectors of the sealed transport (PROTOCOL.md \"Sealed transport\"), generated by snow through appduct_protocol::sealed. Regenerate with APPDUCT_WRITE_SEALED_VECTORS=1 cargo test -p appduct-protocol --test it sealed::",
        "protocolName": sealed::NOISE_PATTERN,
        "prologueHex": hex(sealed::PROLOGUE),
        "staticKey": {
            "hostKeyPkcs8DerHex": HOST_KEY_DER_HEX,
            "hkdf": {"saltText": "appduct-sealed-v1", "infoText": "x25519 static key", "length": 32},
            "privateClampedHex": hex(keys.private_key()),
            "publicHex": hex(keys.public_key()),
        },
        "handshake": {
            "appEphemeralPrivateHex": hex(&APP_EPHEMERAL),
            "appEphemeralPublicHex": hex(&sealed::public_key_of(APP_EPHEMERAL)),
            "daemonEphemeralPrivateHex": hex(&DAEMON_EPHEMERAL),
            "daemonEphemeralPublicHex": hex(&sealed::public_key_of(DAEMON_EPHEMERAL)),
            "message1PayloadText": RngSource::Csprng.hello_payload(),
            "message1Hex": hex(&h.message1),
            "message2PayloadText": "{}",
            "message2Hex": hex(&h.message2),
            "handshakeHashHex": hex(&h.hash),
        },
        "records": records,
        "fragmented": fragmented,
        "rejections": rejections,
        "handshakeCases": handshake_cases,
        "sealedPayload": payload,
        "refusalProofs": proofs,
    })
}

#[test]
fn sealed_vectors_match_the_committed_file() {
    let mut text = serde_json::to_string_pretty(&build_vectors()).unwrap();
    text.push('\n');
    if std::env::var_os("APPDUCT_WRITE_SEALED_VECTORS").is_some_and(|v| v == "1") {
        std::fs::write(VECTORS_PATH, &text).unwrap();
    }
    let committed = std::fs::read_to_string(VECTORS_PATH).unwrap_or_default();
    assert!(
        committed == text,
        "tests/sealed-vectors.json is stale: rerun with APPDUCT_WRITE_SEALED_VECTORS=1"
    );
}

/// The committed vectors read back through the public API alone (what the TS SDK does).
#[test]
fn committed_vectors_replay() {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(VECTORS_PATH).unwrap()).unwrap();
    let keys = StaticKeypair::from_host_key_der(&unhex(
        v["staticKey"]["hostKeyPkcs8DerHex"].as_str().unwrap(),
    ));
    assert_eq!(hex(keys.public_key()), v["staticKey"]["publicHex"]);
    let hs = &v["handshake"];
    let mut daemon = Responder::new(
        &keys,
        unhex32(hs["daemonEphemeralPrivateHex"].as_str().unwrap()),
    )
    .unwrap();
    let hello = daemon
        .read_message1(&unhex(hs["message1Hex"].as_str().unwrap()))
        .unwrap();
    assert_eq!(hello.rng, RngSource::Csprng);
    assert_eq!(hex(&daemon.write_message2().unwrap()), hs["message2Hex"]);
    let mut daemon = daemon.into_transport().unwrap();
    for r in v["records"].as_array().unwrap() {
        if r["direction"] == "app_to_daemon" {
            let opened = daemon
                .open_record(&unhex(r["recordHex"].as_str().unwrap()))
                .unwrap();
            assert_eq!(
                opened,
                Some(Opened::Frame(
                    r["opened"]["frame"].as_str().unwrap().to_owned()
                ))
            );
        }
    }
    let p = &v["sealedPayload"];
    let decoded = bootstrap::decode_sealed(p["text"].as_str().unwrap()).unwrap();
    assert_eq!(hex(&decoded.static_key), p["fields"]["staticKeyHex"]);
}

// ---------------------------------------------------------------------------------------------
// snow against the published Noise vectors

/// A random source that yields one fixed key: the vectors fix both ephemerals.
struct FixedRng(Option<[u8; 32]>);

impl snow::types::Random for FixedRng {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        let bytes = self.0.take().ok_or(snow::Error::Rng)?;
        dest.copy_from_slice(&bytes);
        Ok(())
    }
}

struct FixedResolver([u8; 32]);

impl snow::resolvers::CryptoResolver for FixedResolver {
    fn resolve_rng(&self) -> Option<Box<dyn snow::types::Random>> {
        Some(Box::new(FixedRng(Some(self.0))))
    }
    fn resolve_dh(&self, c: &snow::params::DHChoice) -> Option<Box<dyn snow::types::Dh>> {
        snow::resolvers::DefaultResolver.resolve_dh(c)
    }
    fn resolve_hash(&self, c: &snow::params::HashChoice) -> Option<Box<dyn snow::types::Hash>> {
        snow::resolvers::DefaultResolver.resolve_hash(c)
    }
    fn resolve_cipher(
        &self,
        c: &snow::params::CipherChoice,
    ) -> Option<Box<dyn snow::types::Cipher>> {
        snow::resolvers::DefaultResolver.resolve_cipher(c)
    }
}

#[test]
fn snow_matches_the_cacophony_vectors() {
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(CACOPHONY_PATH).unwrap()).unwrap();
    let vectors = file["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 1);
    let v = &vectors[0];
    assert_eq!(v["protocol_name"], sealed::NOISE_PATTERN);
    let h = |k: &str| unhex(v[k].as_str().unwrap());
    // Our public-key derivation agrees with the vector's pre-message.
    assert_eq!(
        sealed::public_key_of(h("resp_static").try_into().unwrap()).to_vec(),
        h("init_remote_static")
    );
    let params: snow::params::NoiseParams = sealed::NOISE_PATTERN.parse().unwrap();
    let init_prologue = h("init_prologue");
    let init_remote = h("init_remote_static");
    let mut init = snow::Builder::with_resolver(
        params.clone(),
        Box::new(FixedResolver(h("init_ephemeral").try_into().unwrap())),
    )
    .prologue(&init_prologue)
    .unwrap()
    .remote_public_key(&init_remote)
    .unwrap()
    .build_initiator()
    .unwrap();
    let resp_prologue = h("resp_prologue");
    let resp_static = h("resp_static");
    let mut resp = snow::Builder::with_resolver(
        params,
        Box::new(FixedResolver(h("resp_ephemeral").try_into().unwrap())),
    )
    .prologue(&resp_prologue)
    .unwrap()
    .local_private_key(&resp_static)
    .unwrap()
    .build_responder()
    .unwrap();
    let messages = v["messages"].as_array().unwrap();
    let mut buf = vec![0u8; 65_535];
    let mut out = vec![0u8; 65_535];
    for (i, m) in messages.iter().take(2).enumerate() {
        let payload = unhex(m["payload"].as_str().unwrap());
        let (w, r) = if i % 2 == 0 {
            (&mut init, &mut resp)
        } else {
            (&mut resp, &mut init)
        };
        let n = w.write_message(&payload, &mut buf).unwrap();
        assert_eq!(hex(&buf[..n]), m["ciphertext"], "handshake message {i}");
        let k = r.read_message(&buf[..n], &mut out).unwrap();
        assert_eq!(out[..k], payload[..]);
    }
    assert_eq!(hex(init.get_handshake_hash()), v["handshake_hash"]);
    assert_eq!(hex(resp.get_handshake_hash()), v["handshake_hash"]);
    let mut init = init.into_transport_mode().unwrap();
    let mut resp = resp.into_transport_mode().unwrap();
    for (i, m) in messages.iter().enumerate().skip(2) {
        let payload = unhex(m["payload"].as_str().unwrap());
        let (w, r) = if i % 2 == 0 {
            (&mut init, &mut resp)
        } else {
            (&mut resp, &mut init)
        };
        let n = w.write_message(&payload, &mut buf).unwrap();
        assert_eq!(hex(&buf[..n]), m["ciphertext"], "transport message {i}");
        let k = r.read_message(&buf[..n], &mut out).unwrap();
        assert_eq!(out[..k], payload[..]);
    }
}
