//! Result parts (issue #17; ours, not part of appduct v2; §D17.2): a `tool_result` body too
//! large for one frame, sent as `tool_result_part` frames and reassembled here.
//!
//! The **body** is the UTF-8 JSON text of the object a `tool_result` would have carried,
//! `{"result":…,"content":[…]}` (either key may be absent, `result` only when `content` is
//! there). [`split_body`] cuts it into frames for SDKs; [`ResultAssembler`] takes them back in
//! order, checks the SHA-256 and parses the body with the rules of `tool_result`. The daemon
//! decides memory bounds: [`ResultAssembler::check`] says how many bytes a part would add before
//! anything is kept, so the caller can reserve them first, and
//! [`ResultAssembler::parsed_estimate`] what parsing the complete body will take (§D17.3).
//! I/O-free.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::content::{ContentBlock, ContentError, validate_content};
use crate::frames::{ToolResultPart, sanitize_lone_surrogates, text_depth};
use crate::limits::{MAX_JSON_DEPTH, MAX_PART_DATA_BYTES};
use crate::text::json_depth;

/// Why a call's answer could not be passed on although the app may stay connected: every
/// `details.reason` of `-32000 tool_serialization_error` the daemon gives for an answer
/// (§D17.3). The daemon frees the call's buffer and fails that one call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartError {
    /// A part would take the body past `max_bytes` (or a buffered-bytes bound of the daemon:
    /// `max_bytes` is then that bound).
    #[error("the result is larger than {max_bytes} bytes")]
    TooLarge { max_bytes: u64 },
    /// A part's `offset` is not the number of bytes received so far.
    #[error("a part starts at byte {offset}, not at byte {expected_offset}")]
    OutOfOrder { expected_offset: u64, offset: u64 },
    /// `total` or `sha256` differ from the first part's.
    #[error("a part's total or sha256 differs from the first part's")]
    Mismatch,
    /// `data` is not standard padded base64, is empty or longer than 131,072 bytes, or ends
    /// past `total`.
    #[error("a part's data is invalid: {0}")]
    InvalidPart(&'static str),
    /// The body's SHA-256 is not the declared one.
    #[error("the result's SHA-256 does not match")]
    ChecksumMismatch,
    /// The body is not UTF-8 JSON text of an object with `result` and/or `content`.
    #[error("the result body is not a valid result object")]
    InvalidBody,
    /// A value nests deeper than 64 levels.
    #[error("a value nests more than {max} levels of arrays and objects", max = MAX_JSON_DEPTH)]
    TooDeep,
    /// A content block broke a rule of §D17.1.
    #[error(transparent)]
    InvalidContent(#[from] ContentError),
}

impl PartError {
    /// The `details.reason` word.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::OutOfOrder { .. } => "part_out_of_order",
            Self::Mismatch => "part_mismatch",
            Self::InvalidPart(_) => "invalid_part",
            Self::ChecksumMismatch => "checksum_mismatch",
            Self::InvalidBody => "invalid_body",
            Self::TooDeep => "too_deep",
            Self::InvalidContent(_) => "invalid_content",
        }
    }

    /// The `details` object of the call's `tool_serialization_error`.
    pub fn details(&self) -> Value {
        let reason = self.reason();
        match self {
            Self::TooLarge { max_bytes } => json!({"reason": reason, "maxBytes": max_bytes}),
            Self::OutOfOrder {
                expected_offset, ..
            } => json!({"reason": reason, "expectedOffset": expected_offset}),
            Self::TooDeep => json!({"reason": reason, "maxDepth": MAX_JSON_DEPTH}),
            Self::InvalidContent(e) => {
                json!({"reason": reason, "index": e.index, "problem": e.problem.as_str()})
            }
            _ => json!({"reason": reason}),
        }
    }
}

/// A parsed body: what a `tool_result` would have carried.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultBody {
    /// `None` when the app sent content without a JSON result.
    pub result: Option<Value>,
    pub content: Option<Vec<ContentBlock>>,
}

/// The body text of a result: `{"result":…,"content":[…]}` with absent keys left out.
pub fn encode_body(result: Option<&Value>, content: Option<&[ContentBlock]>) -> String {
    let mut m = Map::new();
    if let Some(r) = result {
        m.insert("result".into(), r.clone());
    }
    if let Some(c) = content {
        m.insert(
            "content".into(),
            Value::Array(c.iter().map(ContentBlock::to_value).collect()),
        );
    }
    Value::Object(m).to_string()
}

/// The `tool_result_part` frames of `body` for call `id`, in sending order: parts of
/// [`MAX_PART_DATA_BYTES`] decoded bytes (the last one shorter), each with `total` and the
/// body's `sha256`. An empty body gives no frames (a body is never empty: it is a JSON object).
pub fn split_body(session_id: &str, id: &str, body: &[u8]) -> Vec<ToolResultPart> {
    let sha256 = sha256_hex(body);
    let total = body.len() as u64;
    body.chunks(MAX_PART_DATA_BYTES)
        .scan(0u64, |offset, chunk| {
            let part = ToolResultPart::new(
                session_id,
                id,
                *offset,
                total,
                sha256.clone(),
                STANDARD.encode(chunk),
            );
            *offset += chunk.len() as u64;
            Some(part)
        })
        .collect()
}

/// Lowercase hex of the SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Bytes one parsed JSON value is counted as, beyond the body text that holds it (§D17.3):
/// a `serde_json::Value` (72 bytes with the workspace's `preserve_order`) plus, for an object
/// member, its key `String` (24) and its index-map bucket and index slot (16), rounded up.
/// The heap bytes of strings and numbers are not counted again: they are never more than the
/// body text they come from, which is counted as it is.
pub const PARSED_BYTES_PER_VALUE: u64 = 128;

/// An upper bound on the number of JSON values in `body` (§D17.3), by a scan of its text
/// without parsing: one for the top value, plus one per `[`, `{` and `,` outside strings (a
/// value is the first of its array or object, or follows a comma). Any text works; for text
/// that is not JSON the number is only an estimate.
pub fn count_values(body: &[u8]) -> u64 {
    let mut values = 1u64;
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'[' | b'{' | b',' => values += 1,
                _ => {}
            }
        }
    }
    values
}

/// Reassembles one call's body from its parts, in order (§D17.2). The buffer grows only as
/// bytes arrive (never reserved from `total`), exactly by each part's length.
pub struct ResultAssembler {
    total: u64,
    sha256: String,
    buf: Vec<u8>,
    hasher: Sha256,
}

impl fmt::Debug for ResultAssembler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResultAssembler")
            .field("total", &self.total)
            .field("received", &self.buf.len())
            .finish()
    }
}

/// A part that passed [`ResultAssembler::check`]: its decoded bytes, ready to
/// [`ResultAssembler::append`].
#[derive(Debug)]
pub struct CheckedPart(Vec<u8>);

impl CheckedPart {
    /// Decoded bytes the part adds to the buffer.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true: empty parts are refused.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl ResultAssembler {
    /// The assembler of a transfer whose first part is `first` (not yet checked or appended:
    /// pass it to [`Self::check`] next). Fails `too_large` when `total` passes `max_bytes`,
    /// `invalid_part` when `total` is 0.
    pub fn start(first: &ToolResultPart, max_bytes: u64) -> Result<Self, PartError> {
        if first.total == 0 {
            return Err(PartError::InvalidPart("total is 0"));
        }
        if first.total > max_bytes {
            return Err(PartError::TooLarge { max_bytes });
        }
        Ok(Self {
            total: first.total,
            sha256: first.sha256.clone(),
            buf: Vec::new(),
            hasher: Sha256::new(),
        })
    }

    /// Body bytes received so far (what the buffer holds).
    pub fn received(&self) -> u64 {
        self.buf.len() as u64
    }

    /// Bytes the parsed body is counted as beyond its text (§D17.3): [`count_values`] of the
    /// bytes received × [`PARSED_BYTES_PER_VALUE`]. Call it once the body is complete, before
    /// [`Self::finish`], to reserve the parse first.
    pub fn parsed_estimate(&self) -> u64 {
        count_values(&self.buf).saturating_mul(PARSED_BYTES_PER_VALUE)
    }

    /// The declared `total`.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Checks `part` against the transfer (same `total` and `sha256`, `offset` at the bytes
    /// received so far, `data` valid base64 of 1..=131,072 bytes ending at most at `total`)
    /// and decodes it. Nothing is kept: reserve [`CheckedPart::len`] bytes, then
    /// [`Self::append`].
    pub fn check(&self, part: &ToolResultPart) -> Result<CheckedPart, PartError> {
        if part.total != self.total || part.sha256 != self.sha256 {
            return Err(PartError::Mismatch);
        }
        if part.offset != self.received() {
            return Err(PartError::OutOfOrder {
                expected_offset: self.received(),
                offset: part.offset,
            });
        }
        // 131,072 bytes are 174,764 base64 characters; anything longer is refused unread.
        if part.data.len() > MAX_PART_DATA_BYTES.div_ceil(3) * 4 {
            return Err(PartError::InvalidPart("data is over 131072 bytes"));
        }
        let bytes = STANDARD
            .decode(part.data.as_bytes())
            .map_err(|_| PartError::InvalidPart("data is not standard padded base64"))?;
        if bytes.is_empty() {
            return Err(PartError::InvalidPart("data is empty"));
        }
        if bytes.len() > MAX_PART_DATA_BYTES {
            return Err(PartError::InvalidPart("data is over 131072 bytes"));
        }
        if part.offset + bytes.len() as u64 > self.total {
            return Err(PartError::InvalidPart("data ends past total"));
        }
        Ok(CheckedPart(bytes))
    }

    /// Appends a checked part; `true` when the body is complete (then call [`Self::finish`]).
    pub fn append(&mut self, part: CheckedPart) -> bool {
        self.hasher.update(&part.0);
        self.buf.reserve_exact(part.0.len());
        self.buf.extend_from_slice(&part.0);
        self.received() == self.total
    }

    /// [`Self::check`] then [`Self::append`], for callers without a memory budget of their own.
    pub fn push(&mut self, part: &ToolResultPart) -> Result<bool, PartError> {
        let checked = self.check(part)?;
        Ok(self.append(checked))
    }

    /// The complete body, checked (SHA-256) and parsed with the rules of `tool_result`:
    /// a JSON object, every value at most 64 levels deep, `result` required unless `content`
    /// is there, `content` valid per §D17.1. Other keys are ignored.
    pub fn finish(self) -> Result<ResultBody, PartError> {
        if self.received() != self.total {
            return Err(PartError::InvalidPart("the body is incomplete"));
        }
        let digest = self.hasher.finalize();
        let expected = decode_hex32(&self.sha256).ok_or(PartError::ChecksumMismatch)?;
        if digest.as_slice() != expected {
            return Err(PartError::ChecksumMismatch);
        }
        parse_body(self.buf)
    }
}

fn decode_hex32(s: &str) -> Option<[u8; 32]> {
    let bytes = s.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let hi = char::from(pair[0]).to_digit(16)?;
        let lo = char::from(pair[1]).to_digit(16)?;
        out[i] = u8::try_from(hi * 16 + lo).ok()?;
    }
    Some(out)
}

/// Parses a complete body (§D17.2).
pub fn parse_body(body: Vec<u8>) -> Result<ResultBody, PartError> {
    let text = String::from_utf8(body).map_err(|_| PartError::InvalidBody)?;
    let text = sanitize_lone_surrogates(&text);
    // The body object plus 64 levels inside it; measured before parsing so no depth reaches
    // the parser's own limit.
    if text_depth(&text) > MAX_JSON_DEPTH + 1 {
        // Only a JSON object can be too deep for the rules; anything else is not a body.
        return match serde_json::from_str::<serde::de::IgnoredAny>(&text) {
            Ok(_) if text.trim_start().starts_with('{') => Err(PartError::TooDeep),
            _ => Err(PartError::InvalidBody),
        };
    }
    let Ok(Value::Object(mut m)) = serde_json::from_str::<Value>(&text) else {
        return Err(PartError::InvalidBody);
    };
    drop(text);
    if m.values().any(|v| json_depth(v) > MAX_JSON_DEPTH) {
        return Err(PartError::TooDeep);
    }
    let content = m
        .remove("content")
        .map(|c| validate_content(&c))
        .transpose()?;
    let result = m.remove("result");
    if result.is_none() && content.is_none() {
        return Err(PartError::InvalidBody);
    }
    Ok(ResultBody { result, content })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::content::ImageMimeType;

    fn body_of(len: usize) -> Vec<u8> {
        let text = "a".repeat(len.saturating_sub(13));
        encode_body(Some(&Value::String(text)), None).into_bytes()
    }

    #[test]
    fn split_then_assemble_gives_the_body_back() {
        let png = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 1, 2, 3];
        let content = vec![ContentBlock::image(&png, ImageMimeType::Png)];
        let big = Value::String("x".repeat(400_000));
        let body = encode_body(Some(&big), Some(&content));
        let parts = split_body("S", "id", body.as_bytes());
        assert_eq!(parts.len(), body.len().div_ceil(MAX_PART_DATA_BYTES));
        let mut asm = ResultAssembler::start(&parts[0], 1 << 24).unwrap();
        let mut done = false;
        for p in &parts {
            assert!(!done);
            done = asm.push(p).unwrap();
            // Every part frame stays well under the frame cap.
            assert!(
                crate::frames::AppFrame::ToolResultPart(p.clone())
                    .encode()
                    .len()
                    < 200_000
            );
        }
        assert!(done);
        let parsed = asm.finish().unwrap();
        assert_eq!(parsed.result, Some(big));
        assert_eq!(parsed.content, Some(content));
    }

    #[test]
    fn values_are_counted_from_the_text_and_their_cost_covers_a_value_and_a_member() {
        assert_eq!(count_values(b"0"), 1);
        assert_eq!(count_values(br#"{"result":[0,0,0]}"#), 5);
        assert_eq!(count_values(br#"{"result":[]}"#), 3);
        // Structure inside strings (escaped quotes included) is text, not values.
        assert_eq!(count_values(br#"{"result":"[,{\",[,"}"#), 2);
        let tiny = format!(r#"{{"result":[{}0]}}"#, "0,".repeat(1000));
        let body = tiny.as_bytes();
        let n = count_values(body);
        assert!((1001..=1003).contains(&n), "{n}");
        let parts = split_body("S", "id", body);
        let mut asm = ResultAssembler::start(&parts[0], 1 << 24).unwrap();
        assert!(asm.push(&parts[0]).unwrap());
        assert_eq!(asm.parsed_estimate(), n * PARSED_BYTES_PER_VALUE);
        let member = std::mem::size_of::<Value>()
            + std::mem::size_of::<String>()
            + 2 * std::mem::size_of::<u64>();
        assert!(member as u64 <= PARSED_BYTES_PER_VALUE, "{member}");
    }

    #[test]
    fn hostile_parts_fail_with_their_reason() {
        let body = body_of(300_000);
        let parts = split_body("S", "id", &body);
        assert_eq!(
            ResultAssembler::start(&parts[0], 100_000).unwrap_err(),
            PartError::TooLarge { max_bytes: 100_000 }
        );
        let asm = ResultAssembler::start(&parts[0], 1 << 24).unwrap();
        // Out of order.
        assert_eq!(
            asm.check(&parts[1]).unwrap_err().reason(),
            "part_out_of_order"
        );
        // Changed total / sha256.
        let mut p = parts[0].clone();
        p.total += 1;
        assert_eq!(asm.check(&p).unwrap_err(), PartError::Mismatch);
        let mut p = parts[0].clone();
        p.sha256 = "0".repeat(64);
        assert_eq!(asm.check(&p).unwrap_err(), PartError::Mismatch);
        // Bad base64, empty data.
        let mut p = parts[0].clone();
        p.data = "!!!!".into();
        assert_eq!(asm.check(&p).unwrap_err().reason(), "invalid_part");
        let mut p = parts[0].clone();
        p.data = String::new();
        assert_eq!(asm.check(&p).unwrap_err().reason(), "invalid_part");
        // Data past total.
        let small = body_of(100);
        let mut p = split_body("S", "id", &small).remove(0);
        p.total = 50;
        let asm = ResultAssembler::start(&p, 1 << 24).unwrap();
        assert_eq!(asm.check(&p).unwrap_err().reason(), "invalid_part");
    }

    #[test]
    fn checksum_and_body_rules_are_checked_at_the_end() {
        let body = body_of(1_000);
        let mut parts = split_body("S", "id", &body);
        for p in &mut parts {
            p.sha256 = sha256_hex(b"something else");
        }
        let mut asm = ResultAssembler::start(&parts[0], 1 << 24).unwrap();
        assert!(asm.push(&parts[0]).unwrap());
        assert_eq!(asm.finish().unwrap_err(), PartError::ChecksumMismatch);

        let cases: [(&[u8], &str); 5] = [
            (b"[1]", "invalid_body"),
            (b"{}", "invalid_body"),
            (b"\xff\xfe", "invalid_body"),
            (br#"{"content":[{"type":"video"}]}"#, "invalid_content"),
            (br#"{"content":"x"}"#, "invalid_content"),
        ];
        for (body, reason) in cases {
            assert_eq!(parse_body(body.to_vec()).unwrap_err().reason(), reason);
        }
        let deep = format!(r#"{{"result":{}{}}}"#, "[".repeat(65), "]".repeat(65));
        assert_eq!(
            parse_body(deep.into_bytes()).unwrap_err(),
            PartError::TooDeep
        );
        let ok = format!(r#"{{"result":{}{}}}"#, "[".repeat(64), "]".repeat(64));
        assert!(parse_body(ok.into_bytes()).is_ok());
        let null = parse_body(br#"{"result":null}"#.to_vec()).unwrap();
        assert_eq!(null.result, Some(Value::Null));
        assert_eq!(
            PartError::InvalidContent(ContentError {
                index: 2,
                problem: crate::content::ContentProblem::Signature
            })
            .details(),
            json!({"reason": "invalid_content", "index": 2, "problem": "signature"})
        );
    }
}
