//! Content results (issue #17; ours, not part of appduct v2; §D17): the blocks a `tool_result`
//! may carry in `content` besides (or instead of) its JSON `result`, as MCP spells them.
//!
//! [`validate_content`] checks a received `content` array: block shapes, mime types, the
//! base64 of image data and the image's signature (its first bytes). A block that breaks a
//! rule fails the one call (`tool_serialization_error`, `details.reason: "invalid_content"`),
//! never the connection. I/O-free.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::limits::{
    MAX_CONTENT_BLOCKS, MAX_CONTENT_TEXT_BYTES, MAX_DEVICE_FIELD_LEN, MAX_FREE_TEXT_LEN,
};
use crate::text::utf16_len_within;

/// The image formats a block may carry, by `mimeType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
pub enum ImageMimeType {
    #[serde(rename = "image/png")]
    Png,
    #[serde(rename = "image/jpeg")]
    Jpeg,
    #[serde(rename = "image/webp")]
    Webp,
}

impl ImageMimeType {
    pub const ALL: [Self; 3] = [Self::Png, Self::Jpeg, Self::Webp];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Png => "image/png",
            Self::Jpeg => "image/jpeg",
            Self::Webp => "image/webp",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// The usual file extension (`png`, `jpg`, `webp`).
    pub fn extension(self) -> &'static str {
        match self {
            Self::Png => "png",
            Self::Jpeg => "jpg",
            Self::Webp => "webp",
        }
    }

    /// Whether `bytes` (the start of the decoded image, at least 12 bytes when there are) begin
    /// with this format's signature: PNG `89 50 4E 47 0D 0A 1A 0A`, JPEG `FF D8 FF`, WebP
    /// `RIFF` then any four bytes then `WEBP`.
    pub fn matches_signature(self, bytes: &[u8]) -> bool {
        match self {
            Self::Png => bytes.starts_with(&[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A]),
            Self::Jpeg => bytes.starts_with(&[0xFF, 0xD8, 0xFF]),
            Self::Webp => bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP",
        }
    }
}

impl fmt::Display for ImageMimeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One block of a content result (§D17.1). Keys inside blocks are camelCase, as MCP spells
/// them; optional `width`/`height` of an image are accepted and dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Text, at most 1,048,576 UTF-8 bytes.
    Text { text: String },
    /// An image: standard padded base64 of the file's bytes, which start with the format's
    /// signature.
    Image {
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: ImageMimeType,
    },
    /// A link to a resource the app names.
    ResourceLink {
        /// 1..=4096 UTF-16 code units, starting with a URI scheme and `:`.
        uri: String,
        /// 1..=256 UTF-16 code units.
        name: String,
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// An image block of `bytes`, base64-encoded here. Whether the bytes match `mime_type` is
    /// checked by [`validate_content`] on the receiving side.
    pub fn image(bytes: &[u8], mime_type: ImageMimeType) -> Self {
        Self::Image {
            data: STANDARD.encode(bytes),
            mime_type,
        }
    }

    /// A resource link without `mimeType` or `description`.
    pub fn resource_link(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Self::ResourceLink {
            uri: uri.into(),
            name: name.into(),
            mime_type: None,
            description: None,
        }
    }

    /// The wire `type`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Text { .. } => "text",
            Self::Image { .. } => "image",
            Self::ResourceLink { .. } => "resource_link",
        }
    }

    /// The block as its wire JSON object.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), self.type_name().into());
        match self {
            Self::Text { text } => {
                m.insert("text".into(), text.as_str().into());
            }
            Self::Image { data, mime_type } => {
                m.insert("data".into(), data.as_str().into());
                m.insert("mimeType".into(), mime_type.as_str().into());
            }
            Self::ResourceLink {
                uri,
                name,
                mime_type,
                description,
            } => {
                m.insert("uri".into(), uri.as_str().into());
                m.insert("name".into(), name.as_str().into());
                if let Some(mt) = mime_type {
                    m.insert("mimeType".into(), mt.as_str().into());
                }
                if let Some(d) = description {
                    m.insert("description".into(), d.as_str().into());
                }
            }
        }
        Value::Object(m)
    }

    /// What events and audit records may say about this block: its type, an image's mime type,
    /// and its size in bytes (decoded image bytes, text bytes, link URI bytes), never its data.
    pub fn summary(&self) -> ContentSummary {
        match self {
            Self::Text { text } => ContentSummary {
                kind: "text".into(),
                mime_type: None,
                bytes: text.len() as u64,
            },
            Self::Image { data, mime_type } => ContentSummary {
                kind: "image".into(),
                mime_type: Some(mime_type.as_str().into()),
                bytes: decoded_len(data) as u64,
            },
            Self::ResourceLink { uri, mime_type, .. } => ContentSummary {
                kind: "resource_link".into(),
                mime_type: mime_type.clone(),
                bytes: uri.len() as u64,
            },
        }
    }
}

/// One entry of `contentSummary` in events and audit records (§C12.1, §D17.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ContentSummary {
    /// The block's `type`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    pub bytes: u64,
}

/// The summaries of `blocks`, in order.
pub fn summarize(blocks: &[ContentBlock]) -> Vec<ContentSummary> {
    blocks.iter().map(ContentBlock::summary).collect()
}

/// Decoded length of valid padded base64 text.
fn decoded_len(data: &str) -> usize {
    let pad = data.bytes().rev().take_while(|&b| b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(pad)
}

/// Why a `content` array was refused, as the machine word of `details.problem`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContentProblem {
    /// A block whose `type` is missing, not a string, or not one of the three.
    UnknownType,
    /// An image whose `mimeType` is missing or not PNG, JPEG or WebP.
    MimeType,
    /// Image `data` that is not standard padded base64, or decodes to nothing.
    Base64,
    /// Image bytes that do not start with the signature of the declared format.
    Signature,
    /// More than 64 blocks (`index` is 64).
    TooMany,
    /// Any other field out of its bounds (`content` empty or not an array, a block not an
    /// object, a missing or ill-typed field, a string too long, a URI without a scheme).
    Field,
}

impl ContentProblem {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownType => "unknown_type",
            Self::MimeType => "mime_type",
            Self::Base64 => "base64",
            Self::Signature => "signature",
            Self::TooMany => "too_many",
            Self::Field => "field",
        }
    }
}

impl fmt::Display for ContentProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused `content` array: the block at `index` (0-based) broke a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("content block {index} is invalid ({problem})")]
pub struct ContentError {
    pub index: usize,
    pub problem: ContentProblem,
}

fn fail<T>(index: usize, problem: ContentProblem) -> Result<T, ContentError> {
    Err(ContentError { index, problem })
}

/// Validates a received `content` value (§D17.1) and returns its typed blocks, in order.
pub fn validate_content(value: &Value) -> Result<Vec<ContentBlock>, ContentError> {
    let Value::Array(items) = value else {
        return fail(0, ContentProblem::Field);
    };
    if items.is_empty() {
        return fail(0, ContentProblem::Field);
    }
    if items.len() > MAX_CONTENT_BLOCKS {
        return fail(MAX_CONTENT_BLOCKS, ContentProblem::TooMany);
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| validate_block(item).map_err(|problem| ContentError { index: i, problem }))
        .collect()
}

fn validate_block(item: &Value) -> Result<ContentBlock, ContentProblem> {
    let Value::Object(m) = item else {
        return Err(ContentProblem::Field);
    };
    match m.get("type").and_then(Value::as_str) {
        Some("text") => {
            let text = string(m, "text")?;
            if text.len() > MAX_CONTENT_TEXT_BYTES {
                return Err(ContentProblem::Field);
            }
            Ok(ContentBlock::Text { text: text.into() })
        }
        Some("image") => {
            let mime_type = m
                .get("mimeType")
                .and_then(Value::as_str)
                .and_then(ImageMimeType::parse)
                .ok_or(ContentProblem::MimeType)?;
            let data = string(m, "data")?;
            check_image_data(data, mime_type)?;
            Ok(ContentBlock::Image {
                data: data.into(),
                mime_type,
            })
        }
        Some("resource_link") => {
            let uri = string(m, "uri")?;
            if !utf16_len_within(uri, 1, MAX_FREE_TEXT_LEN) || !has_scheme(uri) {
                return Err(ContentProblem::Field);
            }
            let name = string(m, "name")?;
            if !utf16_len_within(name, 1, MAX_DEVICE_FIELD_LEN) {
                return Err(ContentProblem::Field);
            }
            let mime_type = optional_string(m, "mimeType", MAX_DEVICE_FIELD_LEN)?;
            let description = optional_string(m, "description", MAX_FREE_TEXT_LEN)?;
            Ok(ContentBlock::ResourceLink {
                uri: uri.into(),
                name: name.into(),
                mime_type,
                description,
            })
        }
        _ => Err(ContentProblem::UnknownType),
    }
}

fn string<'a>(m: &'a Map<String, Value>, key: &str) -> Result<&'a str, ContentProblem> {
    m.get(key)
        .and_then(Value::as_str)
        .ok_or(ContentProblem::Field)
}

fn optional_string(
    m: &Map<String, Value>,
    key: &str,
    max: usize,
) -> Result<Option<String>, ContentProblem> {
    match m.get(key) {
        None => Ok(None),
        Some(Value::String(s)) if utf16_len_within(s, 0, max) => Ok(Some(s.clone())),
        Some(_) => Err(ContentProblem::Field),
    }
}

/// `scheme ":"` with scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) (RFC 3986).
fn has_scheme(uri: &str) -> bool {
    let Some((scheme, _)) = uri.split_once(':') else {
        return false;
    };
    let mut bytes = scheme.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// Base64 characters decoded at a time: a multiple of 4, so only the last chunk can hold
/// padding, and the scratch buffer stays small however large the image.
const DECODE_CHUNK_CHARS: usize = 64 * 1024;

/// Checks that `data` is standard padded base64 (canonical: no stray bits, padding only at
/// the end) of at least one byte, and that the bytes start with `mime_type`'s signature.
/// Decodes in chunks: a 16 MiB image costs 48 KiB of scratch, not a copy.
fn check_image_data(data: &str, mime_type: ImageMimeType) -> Result<(), ContentProblem> {
    let text = data.as_bytes();
    if text.is_empty() || !text.len().is_multiple_of(4) {
        return Err(ContentProblem::Base64);
    }
    let mut scratch = vec![0u8; DECODE_CHUNK_CHARS / 4 * 3];
    let mut head = [0u8; 12];
    let mut head_len = 0;
    for chunk in text.chunks(DECODE_CHUNK_CHARS) {
        let n = STANDARD
            .decode_slice(chunk, &mut scratch)
            .map_err(|_| ContentProblem::Base64)?;
        let take = (head.len() - head_len).min(n);
        head[head_len..head_len + take].copy_from_slice(&scratch[..take]);
        head_len += take;
    }
    if head_len == 0 {
        return Err(ContentProblem::Base64);
    }
    if !mime_type.matches_signature(&head[..head_len]) {
        return Err(ContentProblem::Signature);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13];

    fn problem(v: Value) -> (usize, ContentProblem) {
        let e = validate_content(&v).unwrap_err();
        (e.index, e.problem)
    }

    #[test]
    fn valid_blocks_round_trip() {
        let webp = b"RIFF\x10\0\0\0WEBPVP8 ";
        let blocks = vec![
            ContentBlock::text("hi"),
            ContentBlock::image(PNG, ImageMimeType::Png),
            ContentBlock::image(&[0xFF, 0xD8, 0xFF, 0xE0], ImageMimeType::Jpeg),
            ContentBlock::image(webp, ImageMimeType::Webp),
            ContentBlock::resource_link("file:///tmp/a.txt", "a.txt"),
        ];
        let wire = Value::Array(blocks.iter().map(ContentBlock::to_value).collect());
        assert_eq!(validate_content(&wire).unwrap(), blocks);
        // serde agrees with the hand-written encoder.
        assert_eq!(serde_json::to_value(&blocks).unwrap(), wire);
        let back: Vec<ContentBlock> = serde_json::from_value(wire).unwrap();
        assert_eq!(back, blocks);
        assert_eq!(blocks[1].summary().bytes, PNG.len() as u64);
    }

    #[test]
    fn each_rule_names_its_problem_and_index() {
        let png = STANDARD.encode(PNG);
        let ok = json!({"type": "text", "text": "x"});
        assert_eq!(problem(json!([])), (0, ContentProblem::Field));
        assert_eq!(problem(json!("x")), (0, ContentProblem::Field));
        assert_eq!(
            problem(json!([ok, {"type": "audio", "data": png}])),
            (1, ContentProblem::UnknownType)
        );
        assert_eq!(
            problem(json!([{"type": "image", "data": png}])),
            (0, ContentProblem::MimeType)
        );
        assert_eq!(
            problem(json!([{"type": "image", "data": png, "mimeType": "image/gif"}])),
            (0, ContentProblem::MimeType)
        );
        assert_eq!(
            problem(json!([{"type": "image", "data": "iVBO!!==", "mimeType": "image/png"}])),
            (0, ContentProblem::Base64)
        );
        // Unpadded base64 is refused: the wire form is standard padded base64.
        let padded = STANDARD.encode(&PNG[..11]);
        assert!(padded.ends_with('='));
        let unpadded = padded.trim_end_matches('=');
        assert_eq!(
            problem(json!([{"type": "image", "data": unpadded, "mimeType": "image/png"}])),
            (0, ContentProblem::Base64)
        );
        assert_eq!(
            problem(json!([{"type": "image", "data": png, "mimeType": "image/jpeg"}])),
            (0, ContentProblem::Signature)
        );
        let many = vec![ok.clone(); 65];
        assert_eq!(problem(json!(many)), (64, ContentProblem::TooMany));
        assert_eq!(validate_content(&json!(vec![ok; 64])).unwrap().len(), 64);
        assert_eq!(
            problem(json!([{"type": "resource_link", "uri": "no-scheme", "name": "n"}])),
            (0, ContentProblem::Field)
        );
        assert_eq!(
            problem(json!([{"type": "text", "text": "x".repeat(MAX_CONTENT_TEXT_BYTES + 1)}])),
            (0, ContentProblem::Field)
        );
    }

    #[test]
    fn large_images_are_checked_across_decode_chunks() {
        let mut bytes = PNG.to_vec();
        bytes.resize(200_000, 7);
        let data = STANDARD.encode(&bytes);
        assert!(check_image_data(&data, ImageMimeType::Png).is_ok());
        // A bad character in a later chunk is still found.
        let mut bad = data.into_bytes();
        bad[150_000] = b'!';
        let bad = String::from_utf8(bad).unwrap();
        assert_eq!(
            check_image_data(&bad, ImageMimeType::Png),
            Err(ContentProblem::Base64)
        );
    }
}
