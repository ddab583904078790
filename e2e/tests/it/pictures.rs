//! Pictures across processes (issue #17; §D17, §L7.3.1, §M5.1), from a raw device through the
//! real daemon: `tools call --out-dir` saves an image too big for one frame (sent as
//! `tool_result_part` frames) as a PNG that decodes; the official MCP TypeScript client gets a
//! valid PNG image block from `appduct mcp`, and the documented note over the image limit.

use std::time::Duration;

use appduct_e2e::device::{RawDevice, mint};
use appduct_e2e::harness::{Proc, Sandbox};
use appduct_e2e::node::{node_command, official_mcp_client};
use appduct_e2e::{OrFail as _, blocking};
use appduct_protocol::parts::split_body;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

/// A `width` × `height` grayscale PNG of pseudo-random pixels (it does not compress).
fn noise_png(width: u32, height: u32) -> Vec<u8> {
    let mut x: u32 = 0x2545_f491;
    let pixels: Vec<u8> = (0..width * height)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Grayscale);
    let mut writer = encoder.write_header().or_fail();
    writer.write_image_data(&pixels).or_fail();
    writer.finish().or_fail();
    out
}

fn png_size(bytes: &[u8]) -> (u32, u32) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .or_fail();
    let mut buf = vec![0; reader.output_buffer_size().unwrap_or_default()];
    let info = reader.next_frame(&mut buf).or_fail();
    (info.width, info.height)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_call_out_dir_saves_an_image_sent_in_parts_as_a_png_that_decodes() {
    let sb = Sandbox::with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let (mut device, ack) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    assert_eq!(ack["result_content"], true, "{ack}");
    assert!(
        ack["result_parts_max_bytes"].as_u64().unwrap_or(0) >= 1 << 20,
        "{ack}"
    );
    device
        .register(json!([{"name": "shot", "description": "A screenshot."}]))
        .await
        .or_fail();
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 1)
    ));

    let dir = sb.root().join("shots/new");
    let dir_arg = dir.display().to_string();
    let cli = sb
        .spawn(&["--json", "tools", "call", "shot", "--out-dir", &dir_arg])
        .or_fail();
    let call = device.expect_frame("tool_call").await.or_fail();
    // About 300 KB of PNG: its base64 alone is over the 262,144-byte frame cap.
    let png = noise_png(600, 500);
    let body = json!({"content": [
        {"type": "image", "data": STANDARD.encode(&png), "mimeType": "image/png"},
        {"type": "text", "text": "the whole screen"},
    ]})
    .to_string();
    let id = call["id"].as_str().unwrap_or_default();
    let parts = split_body(&device.session_id, id, body.as_bytes());
    assert!(parts.len() > 2, "{} parts", parts.len());
    for part in parts {
        device
            .send_frame(
                json!({"type": "tool_result_part", "id": part.id, "offset": part.offset,
                               "total": part.total, "sha256": part.sha256, "data": part.data}),
            )
            .await
            .or_fail();
    }
    let ran = blocking(|| cli.finish(WAIT)).or_fail();
    assert_eq!(ran.code, 0, "{ran:?}");
    let out = ran.json().or_fail();
    let data = &out["data"];
    assert!(data.get("result").is_none(), "content only: {data}");
    // One file, DIR/<callId>-0.png with the CLI's `cli-` call id.
    let files: Vec<_> = std::fs::read_dir(&dir)
        .or_fail()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let path = files[0].clone();
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    assert!(
        name.starts_with("cli-") && name.ends_with("-0.png"),
        "{name}"
    );
    assert_eq!(
        data["content"],
        json!([
            {"type": "image", "mimeType": "image/png", "path": path.display().to_string(), "bytes": png.len()},
            {"type": "text", "text": "the whole screen"},
        ]),
        "{out}"
    );
    let saved = std::fs::read(&path).or_fail();
    assert_eq!(saved, png);
    assert_eq!(png_size(&saved), (600, 500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_mcp_client_receives_a_png_image_block_and_the_limit_note() {
    let sb = Sandbox::with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let (mut device, _ack) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    device
        .register(json!([{"name": "chart", "description": "A chart."}]))
        .await
        .or_fail();
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 1)
    ));
    let script = official_mcp_client().or_fail().with_file_name("image.mjs");
    let mut cmd = node_command(&sb);
    cmd.arg(script)
        .arg(sb.bin())
        .arg(sb.state_dir())
        .arg(sb.home())
        .arg("chart");
    let client = Proc::spawn(cmd).or_fail();
    // 320 × 160 like the playground's chart; both calls get the same picture.
    let png = noise_png(320, 160);
    for _ in 0..2 {
        let call = device.expect_frame("tool_call").await.or_fail();
        device
            .send_frame(json!({"type": "tool_result", "id": call["id"], "content": [
                {"type": "image", "data": STANDARD.encode(&png), "mimeType": "image/png", "width": 320}]}))
            .await
            .or_fail();
    }
    let ran = blocking(|| client.finish(WAIT)).or_fail();
    let report: Value = serde_json::from_str(ran.stdout.trim_end()).or_fail();
    assert!(report.get("failure").is_none(), "{report} {}", ran.stderr);

    let image = &report["image"];
    assert_eq!(image["isError"], false, "{image}");
    assert_eq!(image["hasStructured"], false, "no JSON result: {image}");
    assert_eq!(
        image["content"].as_array().map(Vec::len),
        Some(1),
        "{image}"
    );
    let block = &image["content"][0];
    assert_eq!(block["type"], "image");
    assert_eq!(block["mimeType"], "image/png");
    assert!(block.get("width").is_none(), "{block}");
    let data = STANDARD
        .decode(block["data"].as_str().unwrap_or_default())
        .or_fail();
    assert_eq!(data, png);
    assert_eq!(png_size(&data), (320, 160));

    let note = &report["tooLarge"];
    assert_eq!(note["isError"], false, "{note}");
    assert_eq!(note["content"][0]["type"], "text", "{note}");
    let text = note["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("Image 0 (image/png, "), "{text}");
    assert!(
        text.contains(&format!("= {} bytes) was left out", png.len()))
            && text.contains("image limit of 100 B (100 bytes)")
            && text.contains("APPDUCT_MCP_MAX_IMAGE_BYTES"),
        "{text}"
    );
}
