//! Target `sealed_handshake`: the daemon reading Noise message 1 of the sealed transport, and the
//! app reading message 2 (issue #23, `sealed::Responder`, `sealed::Initiator`).
//!
//! Input: byte 0 picks the mode, the rest is its data.
//! - mode 0 (`byte % 3 == 0`): the data is message 1 as the daemon receives it, and message 2 as
//!   an app receives it;
//! - mode 1: the data (cut to 256 bytes) is the payload of a real message 1, so the payload
//!   parser is reached through the cipher;
//! - mode 2: the data is XORed into (and appended to) a valid message 1.
//!
//! Invariants:
//! - an accepted message 1 or 2 is 48–304 bytes; an accepted message 1 answers a message 2 of
//!   50 bytes (payload `{}`) and yields a channel;
//! - a payload is accepted exactly when it is a JSON object whose `rng` is `"csprng"` or
//!   `"drbg"`, and the source reported is that one;
//! - a changed, truncated or extended valid message 1 is always `sealed_handshake_failed`,
//!   and the unchanged one is accepted;
//! - every refusal closes `1008 sealed_handshake_failed` without a close record.

use std::sync::OnceLock;

use appduct_protocol::close::CloseReason;
use appduct_protocol::sealed::{
    Initiator, MAX_HANDSHAKE_MESSAGE_BYTES, MAX_HANDSHAKE_PAYLOAD_BYTES,
    MIN_HANDSHAKE_MESSAGE_BYTES, Responder, RngSource, SealedError, StaticKeypair,
};
use serde_json::Value;

const APP_EPHEMERAL: [u8; 32] = [0x11; 32];
const DAEMON_EPHEMERAL: [u8; 32] = [0x44; 32];

fn keys() -> &'static StaticKeypair {
    static KEYS: OnceLock<StaticKeypair> = OnceLock::new();
    KEYS.get_or_init(|| StaticKeypair::from_private_bytes([0x2a; 32]))
}

fn responder() -> Responder {
    Responder::new(keys(), DAEMON_EPHEMERAL).unwrap_or_else(|e| panic!("responder: {e}"))
}

fn initiator(payload: Vec<u8>) -> Initiator {
    Initiator::with_hello_payload(*keys().public_key(), APP_EPHEMERAL, payload)
        .unwrap_or_else(|e| panic!("initiator: {e}"))
}

fn in_bounds(message: &[u8]) -> bool {
    (MIN_HANDSHAKE_MESSAGE_BYTES..=MAX_HANDSHAKE_MESSAGE_BYTES).contains(&message.len())
}

fn check_refusal(e: SealedError) {
    assert_eq!(e, SealedError::HandshakeFailed, "{e:?}");
    assert_eq!(e.close_reason(), CloseReason::SealedHandshakeFailed);
    assert!(!e.sends_close_record());
}

/// The daemon's whole side for one message 1; the source it reports when accepted.
fn daemon_side(message1: &[u8]) -> Option<RngSource> {
    let mut daemon = responder();
    match daemon.read_message1(message1) {
        Ok(hello) => {
            assert!(in_bounds(message1), "accepted {} bytes", message1.len());
            let m2 = daemon
                .write_message2()
                .unwrap_or_else(|e| panic!("message 2: {e}"));
            assert_eq!(m2.len(), 32 + 2 + 16);
            daemon
                .into_transport()
                .unwrap_or_else(|e| panic!("transport: {e}"));
            Some(hello.rng)
        }
        Err(e) => {
            check_refusal(e);
            None
        }
    }
}

/// What the payload rules accept: a JSON object with a known `rng` string.
fn expected_rng(payload: &[u8]) -> Option<RngSource> {
    match serde_json::from_slice::<Value>(payload).ok()? {
        Value::Object(map) => RngSource::parse(map.get("rng")?.as_str()?),
        _ => None,
    }
}

pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            daemon_side(rest);
            let mut app = initiator(RngSource::Csprng.hello_payload().into_bytes());
            app.write_message1()
                .unwrap_or_else(|e| panic!("message 1: {e}"));
            match app.read_message2(rest) {
                Ok(()) => assert!(in_bounds(rest), "accepted {} bytes", rest.len()),
                Err(e) => check_refusal(e),
            }
        }
        1 => {
            let payload = &rest[..rest.len().min(MAX_HANDSHAKE_PAYLOAD_BYTES)];
            let m1 = initiator(payload.to_vec())
                .write_message1()
                .unwrap_or_else(|e| panic!("message 1: {e}"));
            assert_eq!(m1.len(), 48 + payload.len());
            assert_eq!(daemon_side(&m1), expected_rng(payload), "{payload:?}");
        }
        _ => {
            let good = initiator(RngSource::Drbg.hello_payload().into_bytes())
                .write_message1()
                .unwrap_or_else(|e| panic!("message 1: {e}"));
            let mut m1 = good.clone();
            for (i, b) in rest.iter().enumerate() {
                match m1.get_mut(i) {
                    Some(slot) => *slot ^= b,
                    None => m1.push(*b),
                }
            }
            // The first data byte also truncates: `n % 8` bytes come off the end.
            if let Some(&cut) = rest.first() {
                m1.truncate(m1.len().saturating_sub(usize::from(cut % 8)));
            }
            let verdict = daemon_side(&m1);
            if m1 == good {
                assert_eq!(verdict, Some(RngSource::Drbg));
            } else {
                assert_eq!(verdict, None, "a changed message 1 was accepted");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_passes_its_seeds() {
        run(b"\x01{\"rng\":\"csprng\"}");
        run(b"\x01{\"rng\":\"nope\"}");
        run(b"\x02");
        run(b"\x02\x00\x01");
        run(&[&[0u8][..], &[7; 48]].concat());
    }

    #[test]
    fn the_payload_reference_follows_the_rules() {
        assert_eq!(
            expected_rng(b"{\"rng\":\"drbg\",\"x\":1}"),
            Some(RngSource::Drbg)
        );
        assert_eq!(expected_rng(b"{\"rng\":\"Drbg\"}"), None);
        assert_eq!(expected_rng(b"[\"csprng\"]"), None);
        assert_eq!(expected_rng(b""), None);
    }

    /// A stable stand-in for the fuzzer: pseudo-random inputs of every mode (xorshift).
    #[test]
    fn pseudo_random_inputs_pass() {
        let mut s: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for _ in 0..300 {
            let len = (next() % 320) as usize;
            let data: Vec<u8> = (0..len).map(|_| (next() % 256) as u8).collect();
            run(&data);
        }
    }
}
