//! The type descriptors of a `.dex` file (the `type_ids` table), so `doctor` finds a class by
//! its type and not by a string that merely spells its name.
//!
//! Layout (Dalvik executable format): a 0x70-byte little-endian header with `string_ids` at
//! 0x38/0x3C and `type_ids` at 0x40/0x44; each `type_id` is an index into `string_ids`, each
//! `string_id` the offset of a `string_data_item` (ULEB128 UTF-16 length, then MUTF-8 bytes
//! ending in NUL). Versions 035 to 040 are read; the multi-dex containers of 041 are refused
//! rather than half read.

/// Why a dex cannot be read (it is then never reported as lacking the marker).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DexError {
    #[error("not a dex file (bad magic)")]
    BadMagic,
    #[error("dex version {0} is not supported (035 to 040 are)")]
    UnsupportedVersion(String),
    #[error("the dex header is cut short")]
    ShortHeader,
    #[error("big-endian dex files are not supported")]
    BigEndian,
    #[error("the dex {table} table lies outside the file")]
    TableOutOfBounds { table: &'static str },
    #[error("type #{index} points outside the string table")]
    BadTypeIndex { index: u32 },
    #[error("string #{index} lies outside the file or is not terminated")]
    BadString { index: u32 },
}

const HEADER_LEN: usize = 0x70;
const ENDIAN_CONSTANT: u32 = 0x1234_5678;
const REVERSE_ENDIAN_CONSTANT: u32 = 0x7856_3412;

/// Calls `each` with every type descriptor of `dex`, in `type_ids` order, as raw MUTF-8 bytes
/// (without the length prefix or NUL).
pub fn for_each_type_descriptor(dex: &[u8], mut each: impl FnMut(&[u8])) -> Result<(), DexError> {
    if dex.len() < 8 || &dex[..4] != b"dex\n" || dex[7] != 0 {
        return Err(DexError::BadMagic);
    }
    let version: [u8; 3] = [dex[4], dex[5], dex[6]];
    if !version.iter().all(u8::is_ascii_digit) {
        return Err(DexError::BadMagic);
    }
    if !(*b"035"..=*b"040").contains(&version) {
        return Err(DexError::UnsupportedVersion(
            String::from_utf8_lossy(&version).into_owned(),
        ));
    }
    if dex.len() < HEADER_LEN {
        return Err(DexError::ShortHeader);
    }
    let header = |at| le_u32(dex, at).ok_or(DexError::ShortHeader);
    match header(0x28)? {
        ENDIAN_CONSTANT => {}
        REVERSE_ENDIAN_CONSTANT => return Err(DexError::BigEndian),
        _ => return Err(DexError::BadMagic),
    }
    let (string_count, string_off) = (header(0x38)?, header(0x3C)?);
    let (type_count, type_off) = (header(0x40)?, header(0x44)?);
    let string_ids = table(dex, string_off, string_count, "string_ids")?;
    let type_ids = table(dex, type_off, type_count, "type_ids")?;
    for index in 0..type_count as usize {
        let string_index = le_u32(type_ids, index * 4).unwrap_or(u32::MAX);
        if string_index >= string_count {
            return Err(DexError::BadTypeIndex {
                index: index as u32,
            });
        }
        let bad_string = DexError::BadString {
            index: string_index,
        };
        let data_off = le_u32(string_ids, string_index as usize * 4).ok_or(bad_string.clone())?;
        let data = dex.get(data_off as usize..).ok_or(bad_string.clone())?;
        let chars = skip_uleb128(data).ok_or(bad_string.clone())?;
        let end = chars.iter().position(|&b| b == 0).ok_or(bad_string)?;
        each(&chars[..end]);
    }
    Ok(())
}

fn table<'a>(
    dex: &'a [u8],
    offset: u32,
    count: u32,
    name: &'static str,
) -> Result<&'a [u8], DexError> {
    let start = offset as usize;
    let len = (count as usize)
        .checked_mul(4)
        .ok_or(DexError::TableOutOfBounds { table: name })?;
    if count == 0 {
        return Ok(&[]);
    }
    dex.get(start..start.saturating_add(len))
        .filter(|t| t.len() == len)
        .ok_or(DexError::TableOutOfBounds { table: name })
}

/// The bytes after a ULEB128 value of at most 5 bytes (a 32-bit value, as dex uses).
fn skip_uleb128(data: &[u8]) -> Option<&[u8]> {
    let len = data.iter().take(5).position(|b| b & 0x80 == 0)? + 1;
    data.get(len..)
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// A minimal dex with the given type descriptors (the header fields this reader uses, then
/// `string_ids`, `type_ids` and the string data), for tests.
#[cfg(test)]
pub(crate) fn build_dex(descriptors: &[&str]) -> Vec<u8> {
    let n = descriptors.len() as u32;
    let string_ids_off = HEADER_LEN as u32;
    let type_ids_off = string_ids_off + 4 * n;
    let mut data_off = type_ids_off + 4 * n;
    let mut dex = vec![0u8; HEADER_LEN];
    dex[..8].copy_from_slice(b"dex\n035\0");
    dex[0x28..0x2C].copy_from_slice(&ENDIAN_CONSTANT.to_le_bytes());
    dex[0x38..0x3C].copy_from_slice(&n.to_le_bytes());
    dex[0x3C..0x40].copy_from_slice(&string_ids_off.to_le_bytes());
    dex[0x40..0x44].copy_from_slice(&n.to_le_bytes());
    dex[0x44..0x48].copy_from_slice(&type_ids_off.to_le_bytes());
    let mut data = Vec::new();
    for d in descriptors {
        dex.extend_from_slice(&data_off.to_le_bytes());
        let mut item = vec![d.len() as u8];
        item.extend_from_slice(d.as_bytes());
        item.push(0);
        data_off += item.len() as u32;
        data.extend(item);
    }
    for i in 0..n {
        dex.extend_from_slice(&i.to_le_bytes());
    }
    dex.extend(data);
    dex
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptors(dex: &[u8]) -> Result<Vec<String>, DexError> {
        let mut out = Vec::new();
        for_each_type_descriptor(dex, |d| out.push(String::from_utf8_lossy(d).into_owned()))?;
        Ok(out)
    }

    #[test]
    fn reads_every_type_descriptor() {
        let dex = build_dex(&["La/B;", "Lcom/callstack/appduct/AppductNativeMarker;", "I"]);
        assert_eq!(
            descriptors(&dex).unwrap(),
            ["La/B;", "Lcom/callstack/appduct/AppductNativeMarker;", "I"]
        );
        assert_eq!(descriptors(&build_dex(&[])).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn a_string_that_is_not_a_type_is_not_reported() {
        // Three strings, one type: only the type's descriptor counts.
        let mut dex = build_dex(&["LOnly;", "Lcom/callstack/appduct/AppductNativeMarker;"]);
        dex[0x40..0x44].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(descriptors(&dex).unwrap(), ["LOnly;"]);
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert_eq!(descriptors(b"PK\x03\x04"), Err(DexError::BadMagic));
        let mut v41 = build_dex(&["LA;"]);
        v41[4..7].copy_from_slice(b"041");
        assert_eq!(
            descriptors(&v41),
            Err(DexError::UnsupportedVersion("041".into()))
        );
        let dex = build_dex(&["LA;"]);
        assert_eq!(descriptors(&dex[..0x40]), Err(DexError::ShortHeader));
        let mut big = dex.clone();
        big[0x28..0x2C].copy_from_slice(&ENDIAN_CONSTANT.to_be_bytes());
        assert_eq!(descriptors(&big), Err(DexError::BigEndian));

        let mut far = dex.clone();
        far[0x44..0x48].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            descriptors(&far),
            Err(DexError::TableOutOfBounds { table: "type_ids" })
        );
        let mut huge = dex.clone();
        huge[0x38..0x3C].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            descriptors(&huge),
            Err(DexError::TableOutOfBounds { .. })
        ));
        let mut bad_index = dex.clone();
        let type_off = 0x70 + 4;
        bad_index[type_off..type_off + 4].copy_from_slice(&9u32.to_le_bytes());
        assert_eq!(
            descriptors(&bad_index),
            Err(DexError::BadTypeIndex { index: 0 })
        );
        // Any single corrupted byte or cut: a typed error or a reading, never a panic.
        for i in 0..dex.len() {
            for v in [0x00, 0x7F, 0x80, 0xFF] {
                let mut bad = dex.clone();
                bad[i] = v;
                let _ = descriptors(&bad);
            }
            let _ = descriptors(&dex[..i]);
        }
        // A string that runs off the end without its NUL.
        let truncated = &dex[..dex.len() - 1];
        assert_eq!(
            descriptors(truncated),
            Err(DexError::BadString { index: 0 })
        );
    }
}
