//! Small artifacts built on the fly for `appduct doctor`: a minimal ZIP writer (stored or
//! deflated entries, optional ZIP64 end records, raw entries that lie about themselves), dex
//! files with chosen type descriptors, Info.plists and Mach-O-looking executables.

use appduct_doctor::zip::Crc32;

pub const MARKER_CLASS: &str = "Lcom/callstack/appduct/AppductNativeMarker;";
pub const MARKER_CLASS_INCUBATOR: &str = "Lcom/callstackincubator/appduct/AppductNativeMarker;";
pub const APPDUCT_MODULE_CLASS: &str = "Lcom/callstack/appduct/AppductModule;";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Stored,
    Deflated,
}

/// One entry exactly as written: `declared_size` and `crc` may lie.
#[derive(Debug, Clone)]
pub struct RawEntry {
    pub name: String,
    pub data: Vec<u8>,
    pub method: u16,
    pub flags: u16,
    pub crc: u32,
    pub declared_size: u32,
}

/// A ZIP archive under construction.
#[derive(Debug, Default)]
pub struct ZipWriter {
    out: Vec<u8>,
    central: Vec<u8>,
    count: u64,
}

impl ZipWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn file(self, name: &str, data: &[u8], method: Method) -> Self {
        let (stored, code) = match method {
            Method::Stored => (data.to_vec(), 0),
            Method::Deflated => (miniz_oxide::deflate::compress_to_vec(data, 6), 8),
        };
        self.raw(RawEntry {
            name: name.to_owned(),
            data: stored,
            method: code,
            flags: 0,
            crc: Crc32::of(data),
            declared_size: data.len() as u32,
        })
    }

    pub fn deflated(self, name: &str, data: &[u8]) -> Self {
        self.file(name, data, Method::Deflated)
    }

    pub fn dir(self, name: &str) -> Self {
        self.file(name, b"", Method::Stored)
    }

    pub fn raw_entry(self, entry: RawEntry) -> Self {
        self.raw(entry)
    }

    fn raw(mut self, e: RawEntry) -> Self {
        let offset = self.out.len() as u32;
        let name = e.name.as_bytes();
        let header = |sig: u32, central: bool| {
            let mut h = Vec::new();
            h.extend_from_slice(&sig.to_le_bytes());
            if central {
                h.extend_from_slice(&20u16.to_le_bytes()); // version made by
            }
            h.extend_from_slice(&20u16.to_le_bytes()); // version needed
            h.extend_from_slice(&e.flags.to_le_bytes());
            h.extend_from_slice(&e.method.to_le_bytes());
            h.extend_from_slice(&[0, 0, 0x21, 0]); // time, date
            h.extend_from_slice(&e.crc.to_le_bytes());
            h.extend_from_slice(&(e.data.len() as u32).to_le_bytes());
            h.extend_from_slice(&e.declared_size.to_le_bytes());
            h.extend_from_slice(&(name.len() as u16).to_le_bytes());
            h.extend_from_slice(&0u16.to_le_bytes()); // extra
            if central {
                h.extend_from_slice(&[0; 6]); // comment, disk, internal attributes
                h.extend_from_slice(&0u32.to_le_bytes()); // external attributes
                h.extend_from_slice(&offset.to_le_bytes());
            }
            h.extend_from_slice(name);
            h
        };
        let local = header(0x0403_4b50, false);
        let central = header(0x0201_4b50, true);
        self.out.extend(local);
        self.out.extend_from_slice(&e.data);
        self.central.extend(central);
        self.count += 1;
        self
    }

    /// The archive with a classic end record.
    pub fn finish(self) -> Vec<u8> {
        self.finish_with(false, None)
    }

    /// The archive with ZIP64 end records (the classic one says "see ZIP64").
    pub fn finish_zip64(self) -> Vec<u8> {
        self.finish_with(true, None)
    }

    /// The archive whose end record claims `entries` entries.
    pub fn finish_claiming(self, entries: u16) -> Vec<u8> {
        self.finish_with(false, Some(entries))
    }

    fn finish_with(mut self, zip64: bool, claim: Option<u16>) -> Vec<u8> {
        let cd_offset = self.out.len() as u64;
        let cd_size = self.central.len() as u64;
        self.out.extend_from_slice(&self.central);
        if zip64 {
            let z64_at = self.out.len() as u64;
            self.out.extend_from_slice(&0x0606_4b50u32.to_le_bytes());
            self.out.extend_from_slice(&44u64.to_le_bytes());
            self.out.extend_from_slice(&45u16.to_le_bytes());
            self.out.extend_from_slice(&45u16.to_le_bytes());
            self.out.extend_from_slice(&0u32.to_le_bytes());
            self.out.extend_from_slice(&0u32.to_le_bytes());
            self.out.extend_from_slice(&self.count.to_le_bytes());
            self.out.extend_from_slice(&self.count.to_le_bytes());
            self.out.extend_from_slice(&cd_size.to_le_bytes());
            self.out.extend_from_slice(&cd_offset.to_le_bytes());
            self.out.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
            self.out.extend_from_slice(&0u32.to_le_bytes());
            self.out.extend_from_slice(&z64_at.to_le_bytes());
            self.out.extend_from_slice(&1u32.to_le_bytes());
        }
        let entries = if zip64 {
            u16::MAX
        } else {
            claim.unwrap_or(self.count as u16)
        };
        let (size32, offset32) = if zip64 {
            (u32::MAX, u32::MAX)
        } else {
            (cd_size as u32, cd_offset as u32)
        };
        self.out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        self.out.extend_from_slice(&[0; 4]); // disks
        self.out.extend_from_slice(&entries.to_le_bytes());
        self.out.extend_from_slice(&entries.to_le_bytes());
        self.out.extend_from_slice(&size32.to_le_bytes());
        self.out.extend_from_slice(&offset32.to_le_bytes());
        self.out.extend_from_slice(&0u16.to_le_bytes());
        self.out
    }
}

/// A minimal dex whose `type_ids` are `types`, plus `strings` that are no type.
pub fn dex(types: &[&str], strings: &[&str]) -> Vec<u8> {
    let all: Vec<&str> = types.iter().chain(strings).copied().collect();
    let n = all.len() as u32;
    let header_len = 0x70u32;
    let string_ids_off = header_len;
    let type_ids_off = string_ids_off + 4 * n;
    let mut data_off = type_ids_off + 4 * types.len() as u32;
    let mut out = vec![0u8; header_len as usize];
    out[..8].copy_from_slice(b"dex\n039\0");
    out[0x28..0x2C].copy_from_slice(&0x1234_5678u32.to_le_bytes());
    out[0x38..0x3C].copy_from_slice(&n.to_le_bytes());
    out[0x3C..0x40].copy_from_slice(&string_ids_off.to_le_bytes());
    out[0x40..0x44].copy_from_slice(&(types.len() as u32).to_le_bytes());
    out[0x44..0x48].copy_from_slice(&type_ids_off.to_le_bytes());
    let mut data = Vec::new();
    for s in &all {
        out.extend_from_slice(&data_off.to_le_bytes());
        let mut item = vec![s.len() as u8];
        item.extend_from_slice(s.as_bytes());
        item.push(0);
        data_off += item.len() as u32;
        data.extend(item);
    }
    for i in 0..types.len() as u32 {
        out.extend_from_slice(&i.to_le_bytes());
    }
    out.extend(data);
    out
}

/// An XML Info.plist naming `executable`.
pub fn info_plist(executable: &str) -> Vec<u8> {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>CFBundleIdentifier</key>
	<string>com.example.shop</string>
	<key>CFBundleExecutable</key>
	<string>{executable}</string>
</dict>
</plist>
"#
    )
    .into_bytes()
}

/// A binary (bplist00) Info.plist naming `executable`.
pub fn binary_info_plist(executable: &str) -> Vec<u8> {
    let key = "CFBundleExecutable";
    let mut out = b"bplist00".to_vec();
    let dict = out.len();
    out.extend_from_slice(&[0xD1, 1, 2]);
    let key_at = out.len();
    out.extend_from_slice(&[0x5F, 0x10, key.len() as u8]);
    out.extend_from_slice(key.as_bytes());
    let value_at = out.len();
    out.extend_from_slice(&[0x5F, 0x10, executable.len() as u8]);
    out.extend_from_slice(executable.as_bytes());
    let table = out.len();
    out.extend_from_slice(&[dict as u8, key_at as u8, value_at as u8]);
    let mut trailer = [0u8; 32];
    trailer[6] = 1;
    trailer[7] = 1;
    trailer[8..16].copy_from_slice(&3u64.to_be_bytes());
    trailer[24..32].copy_from_slice(&(table as u64).to_be_bytes());
    out.extend_from_slice(&trailer);
    out
}

/// A 64-bit Mach-O-looking binary: the magic, filler, and `body`.
pub fn mach_o(body: &[u8]) -> Vec<u8> {
    let mut out = vec![0xCF, 0xFA, 0xED, 0xFE];
    out.extend(std::iter::repeat_n(0x11u8, 4096));
    out.extend_from_slice(body);
    out.extend(std::iter::repeat_n(0x22u8, 4096));
    out
}
