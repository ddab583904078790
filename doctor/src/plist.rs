//! `CFBundleExecutable` from a bundle's `Info.plist`, binary (`bplist00`, what Xcode ships) or
//! XML. Only the top-level dictionary is read; nesting and sizes are bounded, and anything the
//! reader does not understand is an error, so `doctor` never guesses the main executable.

/// Why the executable name could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlistError {
    #[error("not a property list (neither binary bplist00 nor XML)")]
    NotAPlist,
    #[error("malformed property list: {0}")]
    Malformed(String),
    #[error("the top level is not a dictionary")]
    NotADictionary,
    #[error("no CFBundleExecutable key")]
    MissingKey,
    #[error("CFBundleExecutable is not a non-empty string")]
    NotAString,
}

const KEY: &str = "CFBundleExecutable";
/// Nesting allowed in an XML plist (hostile input must not exhaust the stack).
const MAX_DEPTH: usize = 32;

/// The value of the top-level `CFBundleExecutable` key.
pub fn bundle_executable(bytes: &[u8]) -> Result<String, PlistError> {
    let value = if bytes.starts_with(b"bplist00") {
        binary::lookup(bytes, KEY)?
    } else {
        let text = std::str::from_utf8(bytes).map_err(|_| PlistError::NotAPlist)?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        if !text.trim_start().starts_with('<') {
            return Err(PlistError::NotAPlist);
        }
        xml::lookup(text, KEY)?
    };
    match value {
        Found::Missing => Err(PlistError::MissingKey),
        Found::String(s) if !s.is_empty() => Ok(s),
        Found::String(_) | Found::Other => Err(PlistError::NotAString),
    }
}

/// What the top-level dictionary holds under the key.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    Missing,
    String(String),
    Other,
}

fn malformed(what: impl Into<String>) -> PlistError {
    PlistError::Malformed(what.into())
}

mod binary {
    use super::{Found, PlistError, malformed};

    const TRAILER_LEN: usize = 32;
    const HEADER_LEN: usize = 8;

    struct Doc<'a> {
        b: &'a [u8],
        offset_size: usize,
        ref_size: usize,
        objects: u64,
        table: usize,
    }

    pub(super) fn lookup(b: &[u8], key: &str) -> Result<Found, PlistError> {
        if b.len() < HEADER_LEN + TRAILER_LEN {
            return Err(malformed("binary plist cut short"));
        }
        let trailer = &b[b.len() - TRAILER_LEN..];
        let offset_size = usize::from(trailer[6]);
        let ref_size = usize::from(trailer[7]);
        if !(1..=8).contains(&offset_size) || !(1..=8).contains(&ref_size) {
            return Err(malformed("bad binary plist trailer"));
        }
        let objects = be_uint(&trailer[8..16]);
        let top = be_uint(&trailer[16..24]);
        let table = usize::try_from(be_uint(&trailer[24..32]))
            .map_err(|_| malformed("bad offset table"))?;
        let table_len = usize::try_from(objects)
            .ok()
            .and_then(|n| n.checked_mul(offset_size))
            .ok_or_else(|| malformed("bad object count"))?;
        if table < HEADER_LEN
            || table
                .checked_add(table_len)
                .is_none_or(|end| end > b.len() - TRAILER_LEN)
            || top >= objects
        {
            return Err(malformed("bad offset table"));
        }
        let doc = Doc {
            b,
            offset_size,
            ref_size,
            objects,
            table,
        };
        doc.dict_lookup(top, key)
    }

    impl Doc<'_> {
        /// Where object `index` starts (before the offset table, after the header).
        fn offset(&self, index: u64) -> Result<usize, PlistError> {
            if index >= self.objects {
                return Err(malformed("object reference out of range"));
            }
            let at = self.table + usize::try_from(index).unwrap_or(usize::MAX) * self.offset_size;
            let off = self
                .b
                .get(at..at + self.offset_size)
                .map(be_uint)
                .and_then(|o| usize::try_from(o).ok())
                .ok_or_else(|| malformed("bad object offset"))?;
            if off < HEADER_LEN || off >= self.table {
                return Err(malformed("object offset out of range"));
            }
            Ok(off)
        }

        /// An object's marker and its length (count or bytes), and where its body starts.
        fn head(&self, index: u64) -> Result<(u8, usize, usize), PlistError> {
            let off = self.offset(index)?;
            let marker = self.b[off];
            let low = usize::from(marker & 0x0F);
            if low != 0x0F {
                return Ok((marker >> 4, low, off + 1));
            }
            // Longer lengths follow as an integer object: 0x1n, then 2^n big-endian bytes.
            let int_marker = *self
                .b
                .get(off + 1)
                .ok_or_else(|| malformed("length cut short"))?;
            if int_marker >> 4 != 0x1 || int_marker & 0x0F > 3 {
                return Err(malformed("bad length"));
            }
            let n = 1usize << (int_marker & 0x0F);
            let len = self
                .b
                .get(off + 2..off + 2 + n)
                .map(be_uint)
                .and_then(|l| usize::try_from(l).ok())
                .ok_or_else(|| malformed("length cut short"))?;
            Ok((marker >> 4, len, off + 2 + n))
        }

        fn body(&self, start: usize, len: Option<usize>) -> Result<&[u8], PlistError> {
            len.and_then(|l| start.checked_add(l))
                .filter(|&end| end <= self.table)
                .and_then(|end| self.b.get(start..end))
                .ok_or_else(|| malformed("object runs past its table"))
        }

        /// The object as a string, `None` when it is another kind.
        fn string(&self, index: u64) -> Result<Option<String>, PlistError> {
            let (kind, len, start) = self.head(index)?;
            match kind {
                0x5 => {
                    let bytes = self.body(start, Some(len))?;
                    if !bytes.is_ascii() {
                        return Err(malformed("non-ASCII byte in an ASCII string"));
                    }
                    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
                }
                0x6 => {
                    let bytes = self.body(start, len.checked_mul(2))?;
                    let units: Vec<u16> = bytes
                        .chunks_exact(2)
                        .map(|c| u16::from_be_bytes([c[0], c[1]]))
                        .collect();
                    String::from_utf16(&units)
                        .map(Some)
                        .map_err(|_| malformed("invalid UTF-16 string"))
                }
                _ => Ok(None),
            }
        }

        fn dict_lookup(&self, index: u64, key: &str) -> Result<Found, PlistError> {
            let (kind, count, start) = self.head(index)?;
            if kind != 0xD {
                return Err(PlistError::NotADictionary);
            }
            let refs = self.body(start, count.checked_mul(2 * self.ref_size))?;
            let reference = |i: usize| be_uint(&refs[i * self.ref_size..(i + 1) * self.ref_size]);
            for i in 0..count {
                let Some(k) = self.string(reference(i))? else {
                    return Err(malformed("a dictionary key is not a string"));
                };
                if k == key {
                    return Ok(match self.string(reference(count + i))? {
                        Some(v) => Found::String(v),
                        None => Found::Other,
                    });
                }
            }
            Ok(Found::Missing)
        }
    }

    fn be_uint(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
    }
}

mod xml {
    use super::{Found, MAX_DEPTH, PlistError, malformed};

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Tok {
        Open(String),
        Close(String),
        Empty(String),
        Text(String),
    }

    pub(super) fn lookup(text: &str, key: &str) -> Result<Found, PlistError> {
        let mut p = Parser {
            toks: tokenize(text)?,
            i: 0,
        };
        let top = match p.peek() {
            Some(Tok::Open(name)) if name == "plist" => {
                p.i += 1;
                let v = p.value(0)?;
                p.expect_close("plist")?;
                v
            }
            _ => p.value(0)?,
        };
        if p.peek().is_some() {
            return Err(malformed("content after the top-level value"));
        }
        let Value::Dict(entries) = top else {
            return Err(PlistError::NotADictionary);
        };
        Ok(entries
            .into_iter()
            .find(|(k, _)| k == key)
            .map_or(Found::Missing, |(_, v)| match v {
                Value::String(s) => Found::String(s),
                _ => Found::Other,
            }))
    }

    #[derive(Debug)]
    enum Value {
        String(String),
        Dict(Vec<(String, Value)>),
        Other,
    }

    struct Parser {
        toks: Vec<Tok>,
        i: usize,
    }

    impl Parser {
        /// The next token, skipping whitespace between elements.
        fn peek(&mut self) -> Option<&Tok> {
            while let Some(Tok::Text(t)) = self.toks.get(self.i) {
                if !t.trim().is_empty() {
                    break;
                }
                self.i += 1;
            }
            self.toks.get(self.i)
        }

        fn next(&mut self) -> Result<Tok, PlistError> {
            self.peek();
            let tok = self
                .toks
                .get(self.i)
                .cloned()
                .ok_or_else(|| malformed("unexpected end"))?;
            self.i += 1;
            Ok(tok)
        }

        fn expect_close(&mut self, name: &str) -> Result<(), PlistError> {
            match self.next()? {
                Tok::Close(n) if n == name => Ok(()),
                other => Err(malformed(format!("expected </{name}>, found {other:?}"))),
            }
        }

        /// The text of a scalar element up to its closing tag.
        fn text_until_close(&mut self, name: &str) -> Result<String, PlistError> {
            let mut text = String::new();
            loop {
                match self.toks.get(self.i).cloned() {
                    Some(Tok::Text(t)) => text.push_str(&t),
                    Some(Tok::Close(n)) if n == name => {
                        self.i += 1;
                        return Ok(text);
                    }
                    other => {
                        return Err(malformed(format!("expected </{name}>, found {other:?}")));
                    }
                }
                self.i += 1;
            }
        }

        fn value(&mut self, depth: usize) -> Result<Value, PlistError> {
            if depth > MAX_DEPTH {
                return Err(malformed("nested too deeply"));
            }
            match self.next()? {
                Tok::Empty(name) if name == "string" => Ok(Value::String(String::new())),
                Tok::Empty(name) if name == "dict" => Ok(Value::Dict(Vec::new())),
                Tok::Empty(_) => Ok(Value::Other),
                Tok::Open(name) if name == "dict" => {
                    let mut entries = Vec::new();
                    loop {
                        match self.next()? {
                            Tok::Close(n) if n == "dict" => return Ok(Value::Dict(entries)),
                            Tok::Open(n) if n == "key" => {
                                let k = self.text_until_close("key")?;
                                let v = self.value(depth + 1)?;
                                entries.push((k, v));
                            }
                            other => {
                                return Err(malformed(format!(
                                    "expected <key> in <dict>, found {other:?}"
                                )));
                            }
                        }
                    }
                }
                Tok::Open(name) if name == "array" => loop {
                    if matches!(self.peek(), Some(Tok::Close(n)) if n == "array") {
                        self.i += 1;
                        return Ok(Value::Other);
                    }
                    self.value(depth + 1)?;
                },
                Tok::Open(name) if name == "string" => {
                    Ok(Value::String(self.text_until_close("string")?))
                }
                Tok::Open(name) => {
                    self.text_until_close(&name)?;
                    Ok(Value::Other)
                }
                other => Err(malformed(format!("expected a value, found {other:?}"))),
            }
        }
    }

    fn tokenize(s: &str) -> Result<Vec<Tok>, PlistError> {
        let mut toks = Vec::new();
        let mut rest = s;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("<!--") {
                rest = skip_past(after, "-->")?;
            } else if let Some(after) = rest.strip_prefix("<![CDATA[") {
                let end = after.find("]]>").ok_or_else(|| malformed("open CDATA"))?;
                toks.push(Tok::Text(after[..end].to_owned()));
                rest = &after[end + 3..];
            } else if let Some(after) = rest.strip_prefix("<?") {
                rest = skip_past(after, "?>")?;
            } else if let Some(after) = rest.strip_prefix("<!") {
                rest = skip_past(after, ">")?;
            } else if let Some(after) = rest.strip_prefix("</") {
                let end = after.find('>').ok_or_else(|| malformed("open tag"))?;
                toks.push(Tok::Close(after[..end].trim().to_owned()));
                rest = &after[end + 1..];
            } else if let Some(after) = rest.strip_prefix('<') {
                let end = tag_end(after)?;
                let inner = &after[..end];
                let (inner, empty) = match inner.strip_suffix('/') {
                    Some(i) => (i, true),
                    None => (inner, false),
                };
                let name = inner
                    .split(|c: char| c.is_ascii_whitespace())
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                if name.is_empty() {
                    return Err(malformed("a tag without a name"));
                }
                toks.push(if empty {
                    Tok::Empty(name)
                } else {
                    Tok::Open(name)
                });
                rest = &after[end + 1..];
            } else {
                let end = rest.find('<').unwrap_or(rest.len());
                toks.push(Tok::Text(decode_entities(&rest[..end])?));
                rest = &rest[end..];
            }
        }
        Ok(toks)
    }

    fn skip_past<'a>(s: &'a str, end: &str) -> Result<&'a str, PlistError> {
        s.find(end)
            .map(|i| &s[i + end.len()..])
            .ok_or_else(|| malformed(format!("unterminated markup (no {end:?})")))
    }

    /// The index of the `>` closing a start tag, skipping quoted attribute values.
    fn tag_end(s: &str) -> Result<usize, PlistError> {
        let mut quote = None;
        for (i, c) in s.char_indices() {
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '>') => return Ok(i),
                _ => {}
            }
        }
        Err(malformed("open tag"))
    }

    fn decode_entities(s: &str) -> Result<String, PlistError> {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(amp) = rest.find('&') {
            out.push_str(&rest[..amp]);
            let after = &rest[amp + 1..];
            let semi = after
                .find(';')
                .filter(|&i| i <= 10)
                .ok_or_else(|| malformed("a bare '&'"))?;
            let entity = &after[..semi];
            let c = match entity {
                "lt" => '<',
                "gt" => '>',
                "amp" => '&',
                "quot" => '"',
                "apos" => '\'',
                _ => {
                    let code = if let Some(hex) = entity.strip_prefix("#x") {
                        u32::from_str_radix(hex, 16).ok()
                    } else if let Some(dec) = entity.strip_prefix('#') {
                        dec.parse().ok()
                    } else {
                        None
                    };
                    code.and_then(char::from_u32)
                        .ok_or_else(|| malformed(format!("unknown entity &{entity};")))?
                }
            };
            out.push(c);
            rest = &after[semi + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// A binary plist holding one flat dictionary of ASCII strings, for tests.
#[cfg(test)]
pub(crate) fn build_binary_plist(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = b"bplist00".to_vec();
    let mut offsets = Vec::new();
    let strings: Vec<&str> = pairs
        .iter()
        .map(|(k, _)| *k)
        .chain(pairs.iter().map(|(_, v)| *v))
        .collect();
    // Object 0 is the dictionary; keys then values follow as ASCII strings.
    offsets.push(out.len());
    out.push(0xD0 | pairs.len() as u8);
    for i in 0..strings.len() {
        out.push((i + 1) as u8);
    }
    for s in &strings {
        offsets.push(out.len());
        if s.len() < 15 {
            out.push(0x50 | s.len() as u8);
        } else {
            out.extend_from_slice(&[0x5F, 0x10, s.len() as u8]);
        }
        out.extend_from_slice(s.as_bytes());
    }
    let table = out.len();
    for o in &offsets {
        out.push(*o as u8);
    }
    let mut trailer = [0u8; 32];
    trailer[6] = 1;
    trailer[7] = 1;
    trailer[8..16].copy_from_slice(&(offsets.len() as u64).to_be_bytes());
    trailer[24..32].copy_from_slice(&(table as u64).to_be_bytes());
    out.extend_from_slice(&trailer);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const XML: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <!-- a nested dict with the same key must not win -->
  <key>Nested</key>
  <dict><key>CFBundleExecutable</key><string>Wrong</string></dict>
  <key>CFBundleURLTypes</key>
  <array><dict><key>CFBundleURLSchemes</key><array><string>myapp</string></array></dict></array>
  <key>UIRequiredDeviceCapabilities</key><array/>
  <key>LSRequiresIPhoneOS</key><true/>
  <key>CFBundleExecutable</key>
  <string>Shop &amp; Go</string>
</dict>
</plist>
"#;

    #[test]
    fn xml_top_level_key() {
        assert_eq!(bundle_executable(XML.as_bytes()).unwrap(), "Shop & Go");
        let bom = format!("\u{feff}{XML}");
        assert_eq!(bundle_executable(bom.as_bytes()).unwrap(), "Shop & Go");
        let cdata = "<plist><dict><key>CFBundleExecutable</key><string><![CDATA[A<B]]></string></dict></plist>";
        assert_eq!(bundle_executable(cdata.as_bytes()).unwrap(), "A<B");
        let numeric = "<dict><key>CFBundleExecutable</key><string>&#65;&#x42;</string></dict>";
        assert_eq!(bundle_executable(numeric.as_bytes()).unwrap(), "AB");
    }

    #[test]
    fn xml_failures() {
        let missing = "<plist><dict><key>Other</key><string>x</string></dict></plist>";
        assert_eq!(
            bundle_executable(missing.as_bytes()),
            Err(PlistError::MissingKey)
        );
        let nested_only = "<plist><dict><key>N</key><dict><key>CFBundleExecutable</key><string>x</string></dict></dict></plist>";
        assert_eq!(
            bundle_executable(nested_only.as_bytes()),
            Err(PlistError::MissingKey)
        );
        let not_string = "<dict><key>CFBundleExecutable</key><integer>3</integer></dict>";
        assert_eq!(
            bundle_executable(not_string.as_bytes()),
            Err(PlistError::NotAString)
        );
        let empty = "<dict><key>CFBundleExecutable</key><string/></dict>";
        assert_eq!(
            bundle_executable(empty.as_bytes()),
            Err(PlistError::NotAString)
        );
        assert_eq!(
            bundle_executable(b"<array><string>x</string></array>"),
            Err(PlistError::NotADictionary)
        );
        assert_eq!(
            bundle_executable(b"\x00\x01binary junk"),
            Err(PlistError::NotAPlist)
        );
        assert_eq!(
            bundle_executable(b"{ CFBundleExecutable = x; }"),
            Err(PlistError::NotAPlist)
        );
        for bad in [
            "<dict><key>CFBundleExecutable</key><string>x</dict>",
            "<dict><key>CFBundleExecutable</key>",
            "<dict><key>CFBundleExecutable</key><string>a &bogus; b</string></dict>",
            "<dict><string>x</string></dict>",
            "<dict></dict><dict></dict>",
            "<dict><!-- open",
        ] {
            assert!(
                matches!(
                    bundle_executable(bad.as_bytes()),
                    Err(PlistError::Malformed(_))
                ),
                "{bad}"
            );
        }
        let deep = format!(
            "<dict><key>k</key>{}{}</dict>",
            "<array>".repeat(100),
            "</array>".repeat(100)
        );
        assert!(matches!(
            bundle_executable(deep.as_bytes()),
            Err(PlistError::Malformed(m)) if m.contains("deeply")
        ));
    }

    #[test]
    fn binary_top_level_key() {
        let plist = build_binary_plist(&[
            ("CFBundleIdentifier", "com.example.shop"),
            ("CFBundleExecutable", "Shop"),
        ]);
        assert_eq!(bundle_executable(&plist).unwrap(), "Shop");
        let missing = build_binary_plist(&[("CFBundleName", "Shop")]);
        assert_eq!(bundle_executable(&missing), Err(PlistError::MissingKey));
    }

    #[test]
    fn binary_utf16_value() {
        // dict {CFBundleExecutable: "Café"} with the value as UTF-16.
        let mut out = b"bplist00".to_vec();
        let dict = out.len();
        out.extend_from_slice(&[0xD1, 1, 2]);
        let key = out.len();
        out.extend_from_slice(&[0x5F, 0x10, 18]);
        out.extend_from_slice(b"CFBundleExecutable");
        let value = out.len();
        out.push(0x64);
        for u in "Café".encode_utf16() {
            out.extend_from_slice(&u.to_be_bytes());
        }
        let table = out.len();
        out.extend_from_slice(&[dict as u8, key as u8, value as u8]);
        let mut trailer = [0u8; 32];
        trailer[6] = 1;
        trailer[7] = 1;
        trailer[8..16].copy_from_slice(&3u64.to_be_bytes());
        trailer[24..32].copy_from_slice(&(table as u64).to_be_bytes());
        out.extend_from_slice(&trailer);
        assert_eq!(bundle_executable(&out).unwrap(), "Café");
    }

    #[test]
    fn hostile_binary_plists_are_errors() {
        let good = build_binary_plist(&[("CFBundleExecutable", "Shop")]);
        assert!(matches!(
            bundle_executable(&good[..20]),
            Err(PlistError::Malformed(_))
        ));
        // Every single-byte corruption either still reads or is a typed error: never a panic.
        for i in 8..good.len() {
            for v in [0x00, 0x0F, 0x7F, 0xFF] {
                let mut bad = good.clone();
                bad[i] = v;
                let _ = bundle_executable(&bad);
            }
        }
        let mut huge_count = good.clone();
        let n = huge_count.len();
        huge_count[n - 24..n - 16].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(
            bundle_executable(&huge_count),
            Err(PlistError::Malformed(_))
        ));
        let mut top_array = good.clone();
        top_array[8] = 0xA0;
        assert_eq!(
            bundle_executable(&top_array),
            Err(PlistError::NotADictionary)
        );
    }
}
