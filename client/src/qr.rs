//! Client side: the terminal QR code of a deep link (§L6.3, §D5.4), shared by
//! `appduct sessions link --qr` and the `qr` field of `appduct_connect` (§M8.1) so both draw
//! the same text: exactly the deep link, byte mode, error correction level M, a 2-module quiet
//! zone, drawn with Unicode half blocks (two module rows per text line) with light modules drawn
//! as ink, so the code reads on a dark terminal.

use qrcode::bits::Bits;
use qrcode::{Color, EcLevel, QrCode, Version};

/// Modules of light border around the code.
pub const QUIET_ZONE: usize = 2;

/// Why no QR code could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the link is too long for a QR code ({0} bytes)")]
pub struct TooLong(pub usize);

/// The smallest version holding `data` as one byte-mode segment at level M.
pub fn encode(data: &str) -> Result<QrCode, TooLong> {
    (1..=40)
        .find_map(|v| {
            let mut bits = Bits::new(Version::Normal(v));
            bits.push_byte_data(data.as_bytes()).ok()?;
            bits.push_terminator(EcLevel::M).ok()?;
            QrCode::with_bits(bits, EcLevel::M).ok()
        })
        .ok_or(TooLong(data.len()))
}

/// `code` as text lines (each ending in `\n`).
pub fn render(code: &QrCode) -> String {
    let width = code.width();
    let colors = code.to_colors();
    let size = width + 2 * QUIET_ZONE;
    // Light (quiet zone included) is ink; dark is the terminal background.
    let light = |x: usize, y: usize| -> bool {
        if x < QUIET_ZONE || y < QUIET_ZONE || x >= width + QUIET_ZONE || y >= width + QUIET_ZONE {
            return true;
        }
        colors[(y - QUIET_ZONE) * width + (x - QUIET_ZONE)] == Color::Light
    };
    let mut out = String::new();
    for y in (0..size).step_by(2) {
        for x in 0..size {
            let top = light(x, y);
            let bottom = y + 1 < size && light(x, y + 1);
            out.push(match (top, bottom) {
                (true, true) => '█',
                (true, false) => '▀',
                (false, true) => '▄',
                (false, false) => ' ',
            });
        }
        out.push('\n');
    }
    out
}

/// The QR text of `data`.
pub fn terminal_qr(data: &str) -> Result<String, TooLong> {
    encode(data).map(|code| render(&code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_level_m_and_the_smallest_byte_mode_version() {
        let code = encode("myapp:///?appduct=abc").unwrap();
        assert_eq!(code.error_correction_level(), EcLevel::M);
        // 21 bytes fit version 2 at M in byte mode (capacity 26), not version 1 (14).
        assert_eq!(code.version(), Version::Normal(2));
    }

    #[test]
    fn renders_two_module_rows_per_line_with_a_light_quiet_zone() {
        let code = encode("x").unwrap();
        let text = render(&code);
        let size = code.width() + 2 * QUIET_ZONE;
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), size.div_ceil(2));
        assert!(lines.iter().all(|l| l.chars().count() == size));
        // The first line holds quiet-zone rows only: all ink.
        assert!(lines[0].chars().all(|c| c == '█'));
        // The finder pattern's dark corner shows as background inside the zone.
        assert!(lines[1].contains(' ') || lines[1].contains('▄') || lines[1].contains('▀'));
    }

    #[test]
    fn too_much_data_is_an_error() {
        let long = "a".repeat(3000);
        assert_eq!(encode(&long).err(), Some(TooLong(3000)));
    }
}
