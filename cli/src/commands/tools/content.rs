//! The content blocks of a `tools call` result (§L7.3.1): images saved with `--out-dir`, shown
//! inline with `--inline` on kitty or iTerm2, named otherwise; text and resource links shown
//! as text. Blocks arrive validated by the daemon (§D17.1).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use crate::error::CliError;
use crate::render;

/// The terminal image protocols `--inline` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inline {
    /// kitty's graphics protocol (PNG only).
    Kitty,
    /// iTerm2's inline images (`OSC 1337 File=`).
    Iterm2,
}

/// The terminal `--inline` can draw on, from the environment: kitty (`TERM=xterm-kitty` or
/// `KITTY_WINDOW_ID` set) or iTerm2 (`TERM_PROGRAM=iTerm.app` or `LC_TERMINAL=iTerm2`);
/// anything else is refused (exit 64).
pub fn detect_inline(env: &dyn Fn(&str) -> Option<String>) -> Result<Inline, CliError> {
    let is = |key: &str, value: &str| env(key).as_deref() == Some(value);
    if is("TERM", "xterm-kitty") || env("KITTY_WINDOW_ID").is_some_and(|v| !v.is_empty()) {
        return Ok(Inline::Kitty);
    }
    if is("TERM_PROGRAM", "iTerm.app") || is("LC_TERMINAL", "iTerm2") {
        return Ok(Inline::Iterm2);
    }
    Err(CliError::usage(
        "--inline needs a terminal that shows images (kitty or iTerm2); this one is not (checked TERM, KITTY_WINDOW_ID, TERM_PROGRAM, LC_TERMINAL)",
    )
    .with_hint("Save the images with --out-dir DIR instead."))
}

/// What to do with image blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pictures {
    /// `--out-dir`: write each image to `DIR/<callId>-<index>.<ext>`.
    pub out_dir: Option<PathBuf>,
    /// `--inline`: draw each image on the terminal.
    pub inline: Option<Inline>,
}

/// The blocks for `--json` and the human lines.
#[derive(Debug, Default, PartialEq)]
pub struct Shown {
    pub blocks: Vec<Value>,
    pub human: String,
}

/// The file extension of an image mime type.
pub fn extension(mime_type: &str) -> &'static str {
    match mime_type {
        "image/jpeg" => "jpg",
        "image/webp" => "webp",
        _ => "png",
    }
}

/// Creates `dir` (and its parents) with mode 0700 when missing.
fn ensure_dir(dir: &Path) -> Result<(), CliError> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|e| {
        CliError::usage(format!("cannot create --out-dir {}: {e}", dir.display()))
            .with_detail("path", dir.display().to_string())
    })
}

/// Writes a new file with mode 0600; never replaces an existing file.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| {
            CliError::usage(format!("cannot write {}: {e}", path.display()))
                .with_detail("path", path.display().to_string())
        })
}

/// The kitty graphics escape for a PNG, in 4096-byte base64 chunks.
fn kitty(png_base64: &str) -> String {
    let chunks: Vec<&[u8]> = png_base64.as_bytes().chunks(4096).collect();
    let mut out = String::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let more = u8::from(i + 1 < chunks.len());
        let head = if i == 0 { "a=T,f=100," } else { "" };
        out.push_str(&format!(
            "\x1b_G{head}m={more};{}\x1b\\",
            String::from_utf8_lossy(chunk)
        ));
    }
    out.push('\n');
    out
}

/// The iTerm2 inline image escape.
fn iterm2(data_base64: &str, bytes: usize) -> String {
    format!("\x1b]1337;File=inline=1;size={bytes};preserveAspectRatio=1:{data_base64}\x07\n")
}

/// Renders `content` of call `call_id`: image files written, inline escapes drawn, each
/// block named in human text; `--json` blocks with each saved image's `data` replaced by
/// `path` and `bytes`.
pub fn show(call_id: &str, content: &[Value], pictures: &Pictures) -> Result<Shown, CliError> {
    let mut shown = Shown::default();
    if pictures.out_dir.is_some() && content.iter().any(is_image) {
        ensure_dir(pictures.out_dir.as_deref().unwrap_or(Path::new(".")))?;
    }
    for (index, block) in content.iter().enumerate() {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "image" => {
                let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or("");
                let data = block.get("data").and_then(Value::as_str).unwrap_or("");
                let bytes = STANDARD.decode(data).map_err(|e| {
                    CliError::internal(format!("image block {index} has invalid base64: {e}"))
                })?;
                let size = render::byte_size(bytes.len() as u64);
                let mime_shown = render::clean_line(mime);
                match &pictures.out_dir {
                    Some(dir) => {
                        let path = dir.join(format!("{call_id}-{index}.{}", extension(mime)));
                        write_new(&path, &bytes)?;
                        let mut saved = Map::new();
                        saved.insert("type".into(), json!("image"));
                        saved.insert("mimeType".into(), json!(mime));
                        saved.insert("path".into(), json!(path.display().to_string()));
                        saved.insert("bytes".into(), json!(bytes.len()));
                        shown.blocks.push(Value::Object(saved));
                        shown.human.push_str(&format!(
                            "[{index}] {mime_shown}, {size} → {}\n",
                            path.display()
                        ));
                    }
                    None => {
                        shown.blocks.push(block.clone());
                        shown.human.push_str(&format!(
                            "[{index}] {mime_shown}, {size} — use --out-dir DIR to save\n"
                        ));
                    }
                }
                match pictures.inline {
                    Some(Inline::Kitty) if mime == "image/png" => {
                        shown.human.push_str(&kitty(data))
                    }
                    Some(Inline::Kitty) => shown
                        .human
                        .push_str("    (kitty shows PNG images only; save it with --out-dir)\n"),
                    Some(Inline::Iterm2) => shown.human.push_str(&iterm2(data, bytes.len())),
                    None => {}
                }
            }
            "text" => {
                shown.blocks.push(block.clone());
                let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                shown.human.push_str(&format!("[{index}] text\n"));
                shown
                    .human
                    .push_str(&render::indent(&render::clean_text(text), 4));
                if !shown.human.ends_with('\n') {
                    shown.human.push('\n');
                }
            }
            "resource_link" => {
                shown.blocks.push(block.clone());
                let field = |k: &str| {
                    render::clean_line(block.get(k).and_then(Value::as_str).unwrap_or(""))
                };
                let mime = block
                    .get("mimeType")
                    .and_then(Value::as_str)
                    .map(|m| format!(" ({})", render::clean_line(m)))
                    .unwrap_or_default();
                shown.human.push_str(&format!(
                    "[{index}] link {} <{}>{mime}\n",
                    field("name"),
                    field("uri")
                ));
            }
            other => {
                shown.blocks.push(block.clone());
                shown
                    .human
                    .push_str(&format!("[{index}] {} block\n", render::clean_line(other)));
            }
        }
    }
    Ok(shown)
}

fn is_image(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("image")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\nrest";

    fn image_block(bytes: &[u8], mime: &str) -> Value {
        json!({"type": "image", "data": STANDARD.encode(bytes), "mimeType": mime})
    }

    #[test]
    fn without_out_dir_images_are_named_and_json_keeps_data() {
        let content = vec![
            image_block(PNG, "image/png"),
            json!({"type":"text","text":"a\x1b[2Jb"}),
        ];
        let shown = show("cli-1", &content, &Pictures::default()).unwrap();
        assert_eq!(shown.blocks, content);
        assert_eq!(
            shown.human,
            "[0] image/png, 12 B — use --out-dir DIR to save\n[1] text\n    a[2Jb\n"
        );
    }

    #[test]
    fn out_dir_writes_private_files_and_json_gives_path_and_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("new/pics");
        let pictures = Pictures {
            out_dir: Some(dir.clone()),
            inline: None,
        };
        let content = vec![
            json!({"type":"resource_link","uri":"https://x.test/a","name":"a"}),
            image_block(PNG, "image/png"),
            image_block(b"\xff\xd8\xffjpeg", "image/jpeg"),
        ];
        let shown = show("cli-abc", &content, &pictures).unwrap();
        let png_path = dir.join("cli-abc-1.png");
        let jpg_path = dir.join("cli-abc-2.jpg");
        assert_eq!(std::fs::read(&png_path).unwrap(), PNG);
        assert_eq!(std::fs::read(&jpg_path).unwrap(), b"\xff\xd8\xffjpeg");
        assert_eq!(
            shown.blocks[1],
            json!({"type":"image","mimeType":"image/png","path":png_path.display().to_string(),"bytes":12})
        );
        assert_eq!(shown.blocks[0], content[0]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&png_path), 0o600);
            assert_eq!(mode(&dir), 0o700);
        }
        assert!(
            shown
                .human
                .contains(&format!("[1] image/png, 12 B → {}", png_path.display()))
        );
        assert!(shown.human.starts_with("[0] link a <https://x.test/a>\n"));
        // A second call never replaces a file.
        assert!(show("cli-abc", &content, &pictures).is_err());
    }

    #[test]
    fn inline_is_detected_from_the_environment_and_refused_elsewhere() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(
            detect_inline(&env(&[("TERM", "xterm-kitty")])).unwrap(),
            Inline::Kitty
        );
        assert_eq!(
            detect_inline(&env(&[("KITTY_WINDOW_ID", "3")])).unwrap(),
            Inline::Kitty
        );
        assert_eq!(
            detect_inline(&env(&[("TERM_PROGRAM", "iTerm.app")])).unwrap(),
            Inline::Iterm2
        );
        assert_eq!(
            detect_inline(&env(&[("LC_TERMINAL", "iTerm2")])).unwrap(),
            Inline::Iterm2
        );
        let refused = detect_inline(&env(&[("TERM", "xterm-256color")])).unwrap_err();
        assert!(
            refused.message.contains("kitty or iTerm2"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn inline_escapes_carry_the_image() {
        let data = STANDARD.encode(PNG);
        let pictures = Pictures {
            out_dir: None,
            inline: Some(Inline::Kitty),
        };
        let shown = show("c", &[image_block(PNG, "image/png")], &pictures).unwrap();
        assert!(
            shown
                .human
                .contains(&format!("\x1b_Ga=T,f=100,m=0;{data}\x1b\\"))
        );
        let pictures = Pictures {
            out_dir: None,
            inline: Some(Inline::Iterm2),
        };
        let shown = show("c", &[image_block(PNG, "image/png")], &pictures).unwrap();
        assert!(shown.human.contains(&format!(
            "\x1b]1337;File=inline=1;size=12;preserveAspectRatio=1:{data}\x07"
        )));
    }
}
