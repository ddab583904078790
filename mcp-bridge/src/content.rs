//! The MCP result of a successful app tool call (§M8.5 step 7, §M5.1): the JSON result as a
//! text block (an embedded `application/json` resource above [`EMBED_RESULT_OVER_BYTES`]) plus
//! `structuredContent` for objects, then the app's content blocks in order as MCP `image`,
//! `text` and `resource_link` blocks. An image larger than `--max-image-bytes` is replaced by
//! a text block naming its size, the limit and what to do (the call is not an error).

use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::{Map, Value, json};

use crate::error::CALL_META_KEY;

/// Default of `--max-image-bytes` / `APPDUCT_MCP_MAX_IMAGE_BYTES`: decoded bytes of one image.
pub const DEFAULT_MAX_IMAGE_BYTES: u64 = 5_242_880;
/// `APPDUCT_MCP_MAX_IMAGE_BYTES`: the environment form of `--max-image-bytes`.
pub const MAX_IMAGE_BYTES_ENV: &str = "APPDUCT_MCP_MAX_IMAGE_BYTES";
/// A JSON result whose compact text is longer than this goes as an embedded resource.
pub const EMBED_RESULT_OVER_BYTES: usize = 1_048_576;

/// Decoded length of standard padded base64 text, without decoding it.
pub fn decoded_len(data: &str) -> u64 {
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count().min(2);
    ((data.len() / 4) * 3).saturating_sub(padding) as u64
}

/// `N B`, or KiB / MiB with one decimal.
fn size_text(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
    }
}

/// The text that replaces an image over the limit.
pub fn image_too_large(index: usize, mime_type: &str, bytes: u64, limit: u64) -> String {
    format!(
        "Image {index} ({mime_type}, {} = {bytes} bytes) was left out: it is larger than this bridge's image limit of {} ({limit} bytes). Ask the app for a smaller or downscaled capture, or, if your MCP client accepts larger images, raise the limit with `appduct mcp --max-image-bytes N` or {MAX_IMAGE_BYTES_ENV}.",
        size_text(bytes),
        size_text(limit)
    )
}

/// The `uri` of an embedded JSON result.
pub fn result_uri(call_id: &str) -> String {
    format!("appduct://calls/{call_id}/result")
}

/// One app content block as an MCP block.
fn block(index: usize, value: &Value, max_image_bytes: u64) -> ContentBlock {
    let field = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or("");
    match field("type") {
        "text" => ContentBlock::text(field("text")),
        "image" => {
            let bytes = decoded_len(field("data"));
            if bytes > max_image_bytes {
                ContentBlock::text(image_too_large(
                    index,
                    field("mimeType"),
                    bytes,
                    max_image_bytes,
                ))
            } else {
                ContentBlock::image(field("data"), field("mimeType"))
            }
        }
        "resource_link" => {
            let mut link = Map::new();
            link.insert("type".into(), json!("resource_link"));
            for key in ["uri", "name", "mimeType", "description"] {
                if let Some(v) = value.get(key) {
                    link.insert(key.into(), v.clone());
                }
            }
            serde_json::from_value(Value::Object(link)).unwrap_or_else(|e| {
                ContentBlock::text(format!("Resource link {index} could not be mapped: {e}"))
            })
        }
        other => ContentBlock::text(format!(
            "Content block {index} has a type this bridge does not know ({other:?})."
        )),
    }
}

/// The MCP result: `result` (`None`: the app sent content without a JSON result), `content`
/// (the app's blocks, validated by the daemon), `call` the `_meta["appduct/call"]` handle.
pub fn call_result(
    call_id: &str,
    result: Option<&Value>,
    content: &[Value],
    call: Value,
    max_image_bytes: u64,
) -> CallToolResult {
    let mut blocks = Vec::with_capacity(content.len() + 1);
    let mut structured = None;
    if let Some(result) = result {
        let text = serde_json::to_string(result).unwrap_or_else(|_| "null".to_owned());
        if text.len() > EMBED_RESULT_OVER_BYTES {
            // Large: an embedded resource, and no second copy in structuredContent.
            let embedded = json!({"type": "resource", "resource": {
                "uri": result_uri(call_id), "mimeType": "application/json", "text": text}});
            blocks.push(
                serde_json::from_value(embedded).unwrap_or_else(|_| {
                    ContentBlock::text("the JSON result could not be embedded")
                }),
            );
        } else {
            blocks.push(ContentBlock::text(text));
            structured = result.is_object().then(|| result.clone());
        }
    }
    blocks.extend(
        content
            .iter()
            .enumerate()
            .map(|(i, b)| block(i, b, max_image_bytes)),
    );
    let mut out = CallToolResult::success(blocks);
    out.is_error = None;
    out.structured_content = structured;
    let mut meta = Map::new();
    meta.insert(CALL_META_KEY.into(), call);
    out.meta = Some(MetaObject(meta));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    fn json_of(r: &CallToolResult) -> Value {
        serde_json::to_value(r).unwrap()
    }

    #[test]
    fn decoded_len_counts_padding() {
        for n in 0..10usize {
            let data = STANDARD.encode(vec![7u8; n]);
            assert_eq!(decoded_len(&data), n as u64, "{data}");
        }
    }

    #[test]
    fn without_content_the_result_is_mapped_as_before() {
        let r = call_result(
            "c1",
            Some(&json!({"total": 3})),
            &[],
            json!({"callId": "c1"}),
            10,
        );
        let v = json_of(&r);
        assert_eq!(
            v["content"],
            json!([{"type": "text", "text": "{\"total\":3}"}])
        );
        assert_eq!(v["structuredContent"], json!({"total": 3}));
        assert_eq!(v["_meta"][CALL_META_KEY], json!({"callId": "c1"}));
        assert!(v.get("isError").is_none());
    }

    #[test]
    fn content_blocks_follow_the_result_in_order() {
        let png = STANDARD.encode(b"\x89PNG\r\n\x1a\nxx");
        let content = [
            json!({"type": "image", "data": png, "mimeType": "image/png", "width": 3}),
            json!({"type": "text", "text": "hello"}),
            json!({"type": "resource_link", "uri": "https://x.test/a", "name": "a", "mimeType": "text/html"}),
        ];
        let v = json_of(&call_result("c1", None, &content, json!({}), 1_000));
        assert_eq!(
            v["content"],
            json!([
                {"type": "image", "data": png, "mimeType": "image/png"},
                {"type": "text", "text": "hello"},
                {"type": "resource_link", "uri": "https://x.test/a", "name": "a", "mimeType": "text/html"},
            ])
        );
        assert!(v.get("structuredContent").is_none());
    }

    #[test]
    fn an_image_over_the_limit_becomes_a_text_block_saying_what_to_do() {
        let data = STANDARD.encode(vec![0u8; 2_000]);
        let content = [json!({"type": "image", "data": data, "mimeType": "image/jpeg"})];
        let v = json_of(&call_result(
            "c1",
            Some(&Value::Null),
            &content,
            json!({}),
            1_999,
        ));
        assert_eq!(v["content"][0], json!({"type": "text", "text": "null"}));
        let text = v["content"][1]["text"].as_str().unwrap();
        assert_eq!(v["content"][1]["type"], "text");
        assert!(text.contains("image/jpeg, 2.0 KiB = 2000 bytes"), "{text}");
        assert!(text.contains("limit of 2.0 KiB (1999 bytes)"), "{text}");
        assert!(text.contains("--max-image-bytes") && text.contains(MAX_IMAGE_BYTES_ENV));
        assert!(text.contains("downscaled"));
        // At the limit it is sent.
        let v = json_of(&call_result("c1", None, &content, json!({}), 2_000));
        assert_eq!(v["content"][0]["type"], "image");
    }

    #[test]
    fn a_json_result_over_one_mib_is_an_embedded_resource() {
        let big = json!({"s": "x".repeat(EMBED_RESULT_OVER_BYTES)});
        let v = json_of(&call_result("mcp_abc", Some(&big), &[], json!({}), 10));
        let block = &v["content"][0];
        assert_eq!(block["type"], "resource");
        assert_eq!(block["resource"]["uri"], "appduct://calls/mcp_abc/result");
        assert_eq!(block["resource"]["mimeType"], "application/json");
        let text = block["resource"]["text"].as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(text).unwrap(), big);
        assert!(v.get("structuredContent").is_none());
        // Exactly 1 MiB of JSON text stays a text block.
        let edge = Value::String("x".repeat(EMBED_RESULT_OVER_BYTES - 2));
        let v = json_of(&call_result("c", Some(&edge), &[], json!({}), 10));
        assert_eq!(v["content"][0]["type"], "text");
    }
}
