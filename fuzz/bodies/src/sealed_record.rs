//! Target `sealed_record`: the record layer of the sealed transport (issue #23,
//! `sealed::SealedReceiver`): opening records, assembling fragments into frames, close records.
//!
//! Random bytes never authenticate, so the input is a script the body plays through a real
//! channel (a fixed handshake): a sequence of operations `[op][len: u16 BE][len data bytes]`
//! (at most 64), where `op % 6` is
//! - 0: seal the data as a record plaintext (kind byte first) and open it;
//! - 1: seal the data (as lossy UTF-8) as a frame with `seal_frame` and open its records;
//! - 2: a filler fragment: kind `data[0] & 1`, then `len` bytes of `x` (bounds without long
//!   inputs);
//! - 3: open the data itself as a record (forged: never authentic);
//! - 4: seal the data as a plaintext, flip one bit of the record (`data[0]` picks it), open it;
//! - 5: seal a close record, code = the first two data bytes, reason = the rest (lossy UTF-8).
//!
//! Invariant: every result of the receiver equals that of an independent model of the record
//! rules of PROTOCOL.md (frame bound 262,144 bytes checked as fragments arrive, UTF-8 on the
//! whole frame, close codes and reasons, nothing after a close, a failed receiver stays failed
//! with its first error, forged and altered records are `sealed_record_invalid`); the sender
//! refuses exactly the close records the model refuses; every error maps to its close.

use std::sync::OnceLock;

use appduct_protocol::close::CloseReason;
use appduct_protocol::limits::MAX_MESSAGE_BYTES;
use appduct_protocol::sealed::{
    Initiator, KIND_CLOSE, KIND_FRAGMENT, KIND_LAST_FRAGMENT, MAX_CLOSE_REASON_BYTES,
    MAX_FRAGMENT_DATA_BYTES, MAX_RECORD_BYTES, MAX_RECORD_PLAINTEXT_BYTES, Malformed, Opened,
    Responder, RngSource, SealedChannel, SealedError, StaticKeypair,
};

const MAX_OPS: usize = 64;

fn keys() -> &'static StaticKeypair {
    static KEYS: OnceLock<StaticKeypair> = OnceLock::new();
    KEYS.get_or_init(|| StaticKeypair::from_private_bytes([0x2a; 32]))
}

/// (app, daemon) channels of one fixed handshake.
fn channels() -> (SealedChannel, SealedChannel) {
    let fail = |e: SealedError| -> ! { panic!("handshake: {e}") };
    let mut app = Initiator::new(*keys().public_key(), [0x11; 32], RngSource::Csprng)
        .unwrap_or_else(|e| fail(e));
    let mut daemon = Responder::new(keys(), [0x44; 32]).unwrap_or_else(|e| fail(e));
    let m1 = app.write_message1().unwrap_or_else(|e| fail(e));
    daemon.read_message1(&m1).unwrap_or_else(|e| fail(e));
    let m2 = daemon.write_message2().unwrap_or_else(|e| fail(e));
    app.read_message2(&m2).unwrap_or_else(|e| fail(e));
    (
        app.into_transport().unwrap_or_else(|e| fail(e)),
        daemon.into_transport().unwrap_or_else(|e| fail(e)),
    )
}

type Outcome = Result<Option<Opened>, SealedError>;

/// The record rules, written independently of `sealed`.
#[derive(Default)]
struct Model {
    frame: Vec<u8>,
    failed: Option<SealedError>,
    closed: bool,
}

impl Model {
    fn fail(&mut self, e: SealedError) -> Outcome {
        self.failed = Some(e);
        self.frame.clear();
        Err(e)
    }

    fn authentic(&mut self, plaintext: &[u8]) -> Outcome {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if self.closed {
            return self.fail(SealedError::Malformed(Malformed::AfterClose));
        }
        match plaintext {
            [] => self.fail(SealedError::Malformed(Malformed::EmptyPlaintext)),
            [kind @ (KIND_FRAGMENT | KIND_LAST_FRAGMENT), data @ ..] => {
                if self.frame.len() + data.len() > MAX_MESSAGE_BYTES {
                    return self.fail(SealedError::FrameTooBig);
                }
                self.frame.extend_from_slice(data);
                if *kind == KIND_FRAGMENT {
                    return Ok(None);
                }
                match String::from_utf8(std::mem::take(&mut self.frame)) {
                    Ok(text) => Ok(Some(Opened::Frame(text))),
                    Err(_) => self.fail(SealedError::InvalidUtf8),
                }
            }
            [KIND_CLOSE, hi, lo, reason @ ..] => {
                let code = u16::from_be_bytes([*hi, *lo]);
                if !close_code_ok(code) || reason.len() > MAX_CLOSE_REASON_BYTES {
                    return self.fail(SealedError::Malformed(Malformed::CloseRecord));
                }
                match std::str::from_utf8(reason) {
                    Ok(reason) => {
                        self.closed = true;
                        self.frame.clear();
                        Ok(Some(Opened::Close {
                            code,
                            reason: reason.to_owned(),
                        }))
                    }
                    Err(_) => self.fail(SealedError::InvalidUtf8),
                }
            }
            [KIND_CLOSE, ..] => self.fail(SealedError::Malformed(Malformed::CloseRecord)),
            [kind, ..] => self.fail(SealedError::Malformed(Malformed::UnknownKind(*kind))),
        }
    }

    fn forged(&mut self, len: usize) -> Outcome {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if len > MAX_RECORD_BYTES {
            return self.fail(SealedError::RecordTooBig(len));
        }
        self.fail(SealedError::RecordInvalid)
    }
}

/// RFC 6455 §7.4 codes an endpoint may send (with the IANA-registered 1012–1014).
fn close_code_ok(code: u16) -> bool {
    (1000..=1003).contains(&code) || (1007..=1014).contains(&code) || (3000..=4999).contains(&code)
}

fn check_close_mapping(e: SealedError) {
    let expected = match e {
        SealedError::RecordInvalid => CloseReason::SealedRecordInvalid,
        SealedError::RecordTooBig(_) | SealedError::FrameTooBig => CloseReason::MessageTooBig,
        SealedError::InvalidUtf8 => CloseReason::InvalidPayload,
        SealedError::Malformed(_) => CloseReason::ProtocolError,
        other => panic!("the record layer gave {other:?}"),
    };
    assert_eq!(e.close_reason(), expected);
    assert_eq!(e.sends_close_record(), e != SealedError::RecordInvalid);
}

pub fn run(data: &[u8]) {
    let (mut app, mut daemon) = channels();
    let mut model = Model::default();
    let mut rest = data;
    for _ in 0..MAX_OPS {
        let [op, hi, lo, tail @ ..] = rest else {
            break;
        };
        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
        let (arg, next) = tail.split_at(len.min(tail.len()));
        rest = next;
        let mut step = |record: &[u8], expected: Outcome| {
            let got = daemon.open_record(record);
            assert_eq!(got, expected, "op {op}");
            if let Err(e) = got {
                check_close_mapping(e);
            }
        };
        match op % 6 {
            0 => {
                let plaintext = &arg[..arg.len().min(MAX_RECORD_PLAINTEXT_BYTES)];
                let record = app
                    .seal_plaintext(plaintext)
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(record.len(), plaintext.len() + 16);
                step(&record, model.authentic(plaintext));
            }
            1 => {
                let text = String::from_utf8_lossy(arg);
                let records = app.seal_frame(&text).unwrap_or_else(|e| panic!("{e}"));
                let chunks: Vec<&[u8]> = if text.is_empty() {
                    vec![&[]]
                } else {
                    text.as_bytes().chunks(MAX_FRAGMENT_DATA_BYTES).collect()
                };
                assert_eq!(records.len(), chunks.len());
                for (i, (record, chunk)) in records.iter().zip(&chunks).enumerate() {
                    assert!(record.len() <= MAX_RECORD_BYTES);
                    let kind = if i + 1 == chunks.len() {
                        KIND_LAST_FRAGMENT
                    } else {
                        KIND_FRAGMENT
                    };
                    let mut plaintext = vec![kind];
                    plaintext.extend_from_slice(chunk);
                    step(record, model.authentic(&plaintext));
                }
            }
            2 => {
                let kind = arg.first().map_or(KIND_FRAGMENT, |b| b & 1);
                let mut plaintext = vec![kind];
                plaintext.resize(1 + len.min(MAX_FRAGMENT_DATA_BYTES), b'x');
                let record = app
                    .seal_plaintext(&plaintext)
                    .unwrap_or_else(|e| panic!("{e}"));
                step(&record, model.authentic(&plaintext));
            }
            3 => step(arg, model.forged(arg.len())),
            4 => {
                let plaintext = &arg[..arg.len().min(MAX_RECORD_PLAINTEXT_BYTES)];
                let mut record = app
                    .seal_plaintext(plaintext)
                    .unwrap_or_else(|e| panic!("{e}"));
                let bit = usize::from(arg.first().copied().unwrap_or(0));
                let at = bit / 8 % record.len();
                record[at] ^= 1 << (bit % 8);
                step(&record, model.forged(record.len()));
            }
            _ => {
                let code = match arg {
                    [a, b, ..] => u16::from_be_bytes([*a, *b]),
                    _ => 1000,
                };
                let reason = String::from_utf8_lossy(arg.get(2..).unwrap_or_default());
                match app.seal_close(code, &reason) {
                    Ok(record) => {
                        assert!(close_code_ok(code) && reason.len() <= MAX_CLOSE_REASON_BYTES);
                        let mut plaintext = vec![KIND_CLOSE];
                        plaintext.extend_from_slice(&code.to_be_bytes());
                        plaintext.extend_from_slice(reason.as_bytes());
                        step(&record, model.authentic(&plaintext));
                    }
                    Err(e) => {
                        assert_eq!(e, SealedError::Malformed(Malformed::CloseRecord));
                        assert!(!close_code_ok(code) || reason.len() > MAX_CLOSE_REASON_BYTES);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(o: u8, data: &[u8], len: u16) -> Vec<u8> {
        let mut v = vec![o];
        v.extend_from_slice(&len.to_be_bytes());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn the_model_gives_the_documented_verdicts() {
        let mut m = Model::default();
        assert_eq!(m.authentic(b"\x00{\"a\""), Ok(None));
        assert_eq!(
            m.authentic(b"\x01:1}"),
            Ok(Some(Opened::Frame("{\"a\":1}".into())))
        );
        assert_eq!(
            m.authentic(b"\x02\x03\xe8bye"),
            Ok(Some(Opened::Close {
                code: 1000,
                reason: "bye".into()
            }))
        );
        assert_eq!(
            m.authentic(b"\x01{}"),
            Err(SealedError::Malformed(Malformed::AfterClose))
        );
        assert_eq!(
            m.forged(20),
            Err(SealedError::Malformed(Malformed::AfterClose))
        );
        let mut m = Model::default();
        assert_eq!(m.forged(70_000), Err(SealedError::RecordTooBig(70_000)));
        let mut m = Model::default();
        let big = [&[0u8][..], &[b'x'; 65_536]].concat();
        for _ in 0..4 {
            assert_eq!(m.authentic(&big), Ok(None));
        }
        assert_eq!(m.authentic(b"\x01x"), Err(SealedError::FrameTooBig));
    }

    #[test]
    fn hand_scripts_pass() {
        run(&[
            op(1, b"{}", 2),
            op(2, b"\x00", 65_518),
            op(2, b"\x01", 3),
            op(5, b"\x03\xf0x", 3),
        ]
        .concat());
        run(&[op(0, b"\x01\xff", 2), op(1, b"{}", 2)].concat());
        run(&[op(4, b"\x07\x01{}", 4), op(1, b"{}", 2)].concat());
    }

    /// A stable stand-in for the fuzzer: pseudo-random scripts (xorshift), biased to small
    /// lengths so several operations fit.
    #[test]
    fn pseudo_random_scripts_pass() {
        let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for _ in 0..300 {
            let mut script = Vec::new();
            for _ in 0..(next() % 12) {
                let o = (next() % 6) as u8;
                let len = (next() % 40) as u16;
                let data: Vec<u8> = (0..len).map(|_| (next() % 256) as u8).collect();
                script.extend(op(o, &data, len));
            }
            run(&script);
        }
    }
}
