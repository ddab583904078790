//! Small PNG pictures drawn without an image library: the pairing QR code as an image
//! (`appduct_connect`, §M8.1) and the playground's counter chart (`counter_chart`, §T14.1).
//! Everything is 8-bit grayscale, encoded with the `png` crate; pure and I/O-free.

use qrcode::{Color, QrCode};

/// Why a picture could not be encoded (the `png` encoder refused the buffer).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the PNG: {0}")]
pub struct EncodeError(String);

/// Black.
pub const INK: u8 = 0x00;
/// White.
pub const PAPER: u8 = 0xFF;

/// A grayscale raster, one byte a pixel, row by row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gray {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

impl Gray {
    /// A `width` × `height` raster filled with `fill`.
    pub fn new(width: u32, height: u32, fill: u8) -> Self {
        Self {
            width,
            height,
            pixels: vec![fill; width as usize * height as usize],
        }
    }

    /// Paints the rectangle `[x, x+w) × [y, y+h)`, clipped to the raster.
    pub fn fill_rect(&mut self, x: u32, y: u32, w: u32, h: u32, value: u8) {
        let x_end = x.saturating_add(w).min(self.width);
        let y_end = y.saturating_add(h).min(self.height);
        for row in y.min(self.height)..y_end {
            let start = (row * self.width) as usize;
            self.pixels[start + x.min(x_end) as usize..start + x_end as usize].fill(value);
        }
    }

    /// The PNG file of this raster (8-bit grayscale, default compression).
    pub fn to_png(&self) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, self.width, self.height);
        encoder.set_color(png::ColorType::Grayscale);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder
            .write_header()
            .map_err(|e| EncodeError(e.to_string()))?;
        writer
            .write_image_data(&self.pixels)
            .map_err(|e| EncodeError(e.to_string()))?;
        writer.finish().map_err(|e| EncodeError(e.to_string()))?;
        Ok(out)
    }
}

/// Pixels per QR module in [`qr_png`].
pub const QR_MODULE_PX: u32 = 8;
/// Modules of white border around the QR image (the quiet zone scanners expect).
pub const QR_QUIET_ZONE: u32 = 4;

/// The QR code as a PNG: dark modules black on white, [`QR_MODULE_PX`] pixels a module and a
/// [`QR_QUIET_ZONE`]-module border, so a phone camera reads it off a screen.
pub fn qr_png(code: &QrCode) -> Result<Vec<u8>, EncodeError> {
    let modules = code.width() as u32;
    let side = (modules + 2 * QR_QUIET_ZONE) * QR_MODULE_PX;
    let mut image = Gray::new(side, side, PAPER);
    for (i, color) in code.to_colors().iter().enumerate() {
        if *color == Color::Dark {
            let (mx, my) = (i as u32 % modules, i as u32 / modules);
            image.fill_rect(
                (mx + QR_QUIET_ZONE) * QR_MODULE_PX,
                (my + QR_QUIET_ZONE) * QR_MODULE_PX,
                QR_MODULE_PX,
                QR_MODULE_PX,
                INK,
            );
        }
    }
    image.to_png()
}

/// Size of a [`bar_chart`].
pub const CHART_WIDTH: u32 = 320;
pub const CHART_HEIGHT: u32 = 160;
/// Most bars a chart draws (the last ones of `values`).
pub const CHART_MAX_BARS: usize = 16;

/// A bar chart of `values` (the last [`CHART_MAX_BARS`]), [`CHART_WIDTH`] × [`CHART_HEIGHT`]:
/// black bars on white over a gray base line, scaled so the largest value fills the height
/// (a chart of zeros or of nothing shows the base line only).
pub fn bar_chart(values: &[u64]) -> Result<Vec<u8>, EncodeError> {
    const MARGIN: u32 = 8;
    const GRAY: u8 = 0x88;
    let mut image = Gray::new(CHART_WIDTH, CHART_HEIGHT, PAPER);
    let base = CHART_HEIGHT - MARGIN;
    image.fill_rect(MARGIN, base, CHART_WIDTH - 2 * MARGIN, 2, GRAY);
    let shown = &values[values.len().saturating_sub(CHART_MAX_BARS)..];
    let max = shown.iter().copied().max().unwrap_or(0);
    if max > 0 {
        let slot = (CHART_WIDTH - 2 * MARGIN) / CHART_MAX_BARS as u32;
        let room = u64::from(base - MARGIN);
        for (i, v) in shown.iter().enumerate() {
            // At least one pixel for a non-zero value.
            let h = ((v * room).div_ceil(max)) as u32;
            let x = MARGIN + i as u32 * slot + slot / 4;
            image.fill_rect(x, base - h, slot / 2, h, INK);
        }
    }
    image.to_png()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> (png::OutputInfo, Vec<u8>) {
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        (info, buf)
    }

    #[test]
    fn the_qr_png_draws_every_module_at_its_place() {
        let code = crate::qr::encode("myapp:///?appduct=abc").unwrap();
        let png = qr_png(&code).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let (info, pixels) = decode(&png);
        let modules = code.width() as u32;
        let side = (modules + 2 * QR_QUIET_ZONE) * QR_MODULE_PX;
        assert_eq!((info.width, info.height), (side, side));
        assert_eq!(info.color_type, png::ColorType::Grayscale);
        let colors = code.to_colors();
        for my in 0..modules {
            for mx in 0..modules {
                // The centre pixel of each module.
                let px = (mx + QR_QUIET_ZONE) * QR_MODULE_PX + QR_MODULE_PX / 2;
                let py = (my + QR_QUIET_ZONE) * QR_MODULE_PX + QR_MODULE_PX / 2;
                let want = match colors[(my * modules + mx) as usize] {
                    Color::Dark => INK,
                    Color::Light => PAPER,
                };
                assert_eq!(pixels[(py * side + px) as usize], want, "module {mx},{my}");
            }
        }
        // The quiet zone is white.
        assert!(
            pixels[..(side * QR_QUIET_ZONE * QR_MODULE_PX) as usize]
                .iter()
                .all(|p| *p == PAPER)
        );
    }

    /// Height in pixels of the ink in column `x`.
    fn ink_height(pixels: &[u8], x: u32) -> usize {
        (0..CHART_HEIGHT)
            .filter(|y| pixels[(y * CHART_WIDTH + x) as usize] == INK)
            .count()
    }

    #[test]
    fn the_chart_scales_bars_to_the_largest_value() {
        let (info, pixels) = decode(&bar_chart(&[1, 2, 4]).unwrap());
        assert_eq!((info.width, info.height), (CHART_WIDTH, CHART_HEIGHT));
        let slot = (CHART_WIDTH - 16) / CHART_MAX_BARS as u32;
        let centre = |i: u32| 8 + i * slot + slot / 2;
        let h: Vec<usize> = (0..4).map(|i| ink_height(&pixels, centre(i))).collect();
        assert_eq!(h[2], (CHART_HEIGHT - 16) as usize);
        assert_eq!(h[1] * 2, h[2]);
        assert_eq!(h[0] * 4, h[2]);
        assert_eq!(h[3], 0, "no fourth bar");
    }

    #[test]
    fn a_chart_of_zeros_or_nothing_has_no_bars() {
        for values in [&[][..], &[0, 0][..]] {
            let (_, pixels) = decode(&bar_chart(values).unwrap());
            assert!(!pixels.contains(&INK));
        }
    }

    #[test]
    fn the_chart_keeps_the_last_bars() {
        let values: Vec<u64> = (1..=40).collect();
        let (_, pixels) = decode(&bar_chart(&values).unwrap());
        let slot = (CHART_WIDTH - 16) / CHART_MAX_BARS as u32;
        let first = ink_height(&pixels, 8 + slot / 2);
        let last = ink_height(&pixels, 8 + 15 * slot + slot / 2);
        // 25 of 40 and 40 of 40.
        assert_eq!(last, (CHART_HEIGHT - 16) as usize);
        assert_eq!(first, (25 * last).div_ceil(40));
    }
}
