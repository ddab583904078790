//! A bounded, read-only ZIP reader for `appduct doctor` (§L13): just enough of the format to
//! list an `.apk`, `.aab` or `.ipa` and stream chosen entries, built for hostile input.
//!
//! - Only the central directory is trusted for names and sizes; each local header is checked
//!   against it before its data is read.
//! - Stored (0) and deflate (8) entries are read; other methods and encrypted entries are typed
//!   errors, raised only when such an entry is actually needed.
//! - Zip bombs: the entry count, the central directory size, each entry's declared size and the
//!   total inflated by one archive are capped, and an entry is cut off as corrupt the moment it
//!   inflates past its declared size. Entries are streamed through a fixed buffer, so memory
//!   stays bounded whatever an entry declares; only callers that ask for a `Vec` hold one entry.
//! - Every entry read to its end is checked against its declared size and CRC-32, so a
//!   truncated or damaged archive is an error, never silently short data.
//! - ZIP64 (archives over 4 GiB, common for `.ipa`) is supported; multi-disk archives are not.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use miniz_oxide::inflate::stream::{InflateState, inflate};
use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};

/// Caps applied while reading one archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Entries listed in the central directory.
    pub max_entries: u64,
    /// Bytes of the central directory (read into memory at open).
    pub max_central_directory: u64,
    /// Declared uncompressed bytes of all entries read from this archive, together.
    pub max_total_inflated: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            // Large iOS apps carry tens of thousands of files; ten times that is still cheap.
            max_entries: 250_000,
            max_central_directory: 64 << 20,
            max_total_inflated: 16 << 30,
        }
    }
}

/// Why an archive or one of its entries cannot be read. Every variant means "cannot inspect",
/// never "absent".
#[derive(Debug, thiserror::Error)]
pub enum ZipError {
    #[error("cannot read the archive: {0}")]
    Io(#[from] io::Error),
    #[error("not a zip archive, or truncated: no end-of-central-directory record")]
    NoEndRecord,
    #[error("multi-disk (split) archives are not supported")]
    MultiDisk,
    #[error("the archive is corrupt: {0}")]
    Corrupt(String),
    #[error("the archive is truncated: {0}")]
    Truncated(String),
    #[error("the archive lists {count} entries; at most {max} are inspected")]
    TooManyEntries { count: u64, max: u64 },
    #[error("the central directory is {size} bytes; at most {max} are read")]
    CentralDirectoryTooLarge { size: u64, max: u64 },
    #[error("entry {name:?} appears more than once")]
    DuplicateEntry { name: String },
    #[error(
        "entry {name:?} uses compression method {method}; only stored (0) and deflate (8) are supported"
    )]
    UnsupportedMethod { name: String, method: u16 },
    #[error("entry {name:?} is encrypted")]
    Encrypted { name: String },
    #[error("entry {name:?} declares {size} uncompressed bytes; at most {max} are read")]
    EntryTooLarge { name: String, size: u64, max: u64 },
    #[error("reading entry {name:?} would inflate more than {max} bytes from this archive")]
    TotalTooLarge { name: String, max: u64 },
    #[error("entry {name:?} is corrupt: {reason}")]
    CorruptEntry { name: String, reason: String },
}

/// One central directory record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The stored name; bytes that are not UTF-8 are replaced (such names match nothing).
    pub name: String,
    /// Declared uncompressed size.
    pub size: u64,
    method: u16,
    flags: u16,
    crc32: u32,
    compressed_size: u64,
    local_header_offset: u64,
    raw_name: Vec<u8>,
}

impl Entry {
    pub fn is_dir(&self) -> bool {
        self.name.ends_with('/')
    }
}

const EOCD_SIG: u32 = 0x0605_4b50;
const EOCD_LEN: usize = 22;
const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
const ZIP64_LOCATOR_LEN: u64 = 20;
const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
const ZIP64_EOCD_LEN: usize = 56;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const CENTRAL_LEN: usize = 46;
const LOCAL_SIG: u32 = 0x0403_4b50;
const LOCAL_LEN: usize = 30;
const ZIP64_EXTRA_ID: u16 = 0x0001;
const FLAG_ENCRYPTED: u16 = 0x0001;
const METHOD_STORED: u16 = 0;
const METHOD_DEFLATE: u16 = 8;
/// Read and inflate buffers.
const CHUNK: usize = 64 * 1024;

/// An open archive: its entries, and the file to stream them from.
#[derive(Debug)]
pub struct ZipArchive {
    file: File,
    len: u64,
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
    limits: Limits,
    inflated: u64,
}

impl ZipArchive {
    pub fn open(path: &Path, limits: Limits) -> Result<Self, ZipError> {
        Self::from_file(File::open(path)?, limits)
    }

    pub fn from_file(mut file: File, limits: Limits) -> Result<Self, ZipError> {
        let len = file.metadata()?.len();
        let end = find_end_record(&mut file, len)?;
        let cd = read_central_directory(&mut file, len, &end, limits)?;
        let entries = parse_central_directory(&cd, &end)?;
        let mut by_name = HashMap::with_capacity(entries.len());
        let mut raw_names = std::collections::HashSet::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            // Two records with one name let different readers see different files; refuse.
            if !raw_names.insert(e.raw_name.as_slice()) {
                return Err(ZipError::DuplicateEntry {
                    name: e.name.clone(),
                });
            }
            by_name.insert(e.name.clone(), i);
        }
        Ok(Self {
            file,
            len,
            entries,
            by_name,
            limits,
            inflated: 0,
        })
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The index of the entry named exactly `name`.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// Reads entry `index` whole; its declared size must be at most `cap`.
    pub fn read_to_vec(&mut self, index: usize, cap: u64) -> Result<Vec<u8>, ZipError> {
        let mut reader = self.reader(index, cap)?;
        // The declared size is only a claim: start small and grow with what really inflates.
        let mut out =
            Vec::with_capacity(usize::try_from(reader.expected.min(1 << 20)).unwrap_or(0));
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = reader.read_chunk(&mut buf)?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    /// Streams entry `index` through `each` in chunks; its declared size must be at most `cap`.
    pub fn for_each_chunk(
        &mut self,
        index: usize,
        cap: u64,
        mut each: impl FnMut(&[u8]),
    ) -> Result<(), ZipError> {
        let mut reader = self.reader(index, cap)?;
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = reader.read_chunk(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            each(&buf[..n]);
        }
    }

    fn reader(&mut self, index: usize, cap: u64) -> Result<EntryReader<'_>, ZipError> {
        let entry = self
            .entries
            .get(index)
            .cloned()
            .ok_or_else(|| ZipError::Corrupt(format!("no entry #{index}")))?;
        let name = entry.name.clone();
        if entry.flags & FLAG_ENCRYPTED != 0 {
            return Err(ZipError::Encrypted { name });
        }
        if entry.method != METHOD_STORED && entry.method != METHOD_DEFLATE {
            return Err(ZipError::UnsupportedMethod {
                name,
                method: entry.method,
            });
        }
        if entry.size > cap {
            return Err(ZipError::EntryTooLarge {
                name,
                size: entry.size,
                max: cap,
            });
        }
        let total = self.inflated.saturating_add(entry.size);
        if total > self.limits.max_total_inflated {
            return Err(ZipError::TotalTooLarge {
                name,
                max: self.limits.max_total_inflated,
            });
        }
        if entry.method == METHOD_STORED && entry.compressed_size != entry.size {
            return Err(ZipError::CorruptEntry {
                name,
                reason: "a stored entry's compressed and uncompressed sizes differ".into(),
            });
        }
        let data_start = self.check_local_header(&entry)?;
        self.inflated = total;
        self.file.seek(SeekFrom::Start(data_start))?;
        let source = Read::take(&mut self.file, entry.compressed_size);
        let inflater = (entry.method == METHOD_DEFLATE).then(|| Inflater {
            state: InflateState::new_boxed(DataFormat::Raw),
            input: vec![0u8; CHUNK],
            start: 0,
            end: 0,
            source_done: false,
            stream_done: false,
        });
        Ok(EntryReader {
            source,
            inflater,
            name,
            expected: entry.size,
            expected_crc: entry.crc32,
            produced: 0,
            crc: Crc32::new(),
            done: false,
        })
    }

    /// Checks the local header of `entry` against the central record; returns where its data
    /// starts.
    fn check_local_header(&mut self, entry: &Entry) -> Result<u64, ZipError> {
        let at = entry.local_header_offset;
        if at.saturating_add(LOCAL_LEN as u64) > self.len {
            return Err(ZipError::Truncated(format!(
                "the local header of {:?} is past the end of the file",
                entry.name
            )));
        }
        let mut header = [0u8; LOCAL_LEN];
        self.file.seek(SeekFrom::Start(at))?;
        self.file.read_exact(&mut header)?;
        if le_u32(&header, 0) != Some(LOCAL_SIG) {
            return Err(ZipError::Corrupt(format!(
                "no local header where the central directory puts {:?}",
                entry.name
            )));
        }
        let name_len = u64::from(le_u16(&header, 26).unwrap_or(0));
        let extra_len = u64::from(le_u16(&header, 28).unwrap_or(0));
        let mut name = vec![0u8; usize::from(le_u16(&header, 26).unwrap_or(0))];
        self.file
            .read_exact(&mut name)
            .map_err(|e| truncated_io(e, &entry.name))?;
        if name != entry.raw_name {
            return Err(ZipError::Corrupt(format!(
                "the local header of {:?} names another file",
                entry.name
            )));
        }
        let data_start = at + LOCAL_LEN as u64 + name_len + extra_len;
        if data_start.saturating_add(entry.compressed_size) > self.len {
            return Err(ZipError::Truncated(format!(
                "the data of {:?} runs past the end of the file",
                entry.name
            )));
        }
        Ok(data_start)
    }
}

fn truncated_io(e: io::Error, name: &str) -> ZipError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        ZipError::Truncated(format!("{name:?} ends early"))
    } else {
        ZipError::Io(e)
    }
}

/// The end-of-central-directory facts, ZIP64 values already applied.
#[derive(Debug)]
struct EndRecord {
    entries: u64,
    cd_size: u64,
    cd_offset: u64,
    /// Where the central directory must end (the start of the ZIP64 or classic end record).
    cd_limit: u64,
}

fn find_end_record(file: &mut File, len: u64) -> Result<EndRecord, ZipError> {
    if len < EOCD_LEN as u64 {
        return Err(ZipError::NoEndRecord);
    }
    // The record is 22 bytes plus a comment of at most 65,535 bytes, at the end of the file.
    let tail_len = len.min(EOCD_LEN as u64 + u64::from(u16::MAX));
    let tail_start = len - tail_len;
    let tail = read_at(file, tail_start, usize::try_from(tail_len).unwrap_or(0))?;
    let pos = (0..=tail.len() - EOCD_LEN)
        .rev()
        .find(|&p| {
            le_u32(&tail, p) == Some(EOCD_SIG)
                && le_u16(&tail, p + 20)
                    .is_some_and(|c| p + EOCD_LEN + usize::from(c) <= tail.len())
        })
        .ok_or(ZipError::NoEndRecord)?;
    let field16 = |at| le_u16(&tail, pos + at).unwrap_or(0);
    let field32 = |at| le_u32(&tail, pos + at).unwrap_or(0);
    let eocd_abs = tail_start + pos as u64;
    let (disk, cd_disk) = (field16(4), field16(6));
    let (entries, cd_size, cd_offset) = (field16(10), field32(12), field32(16));
    let needs_zip64 = entries == u16::MAX || cd_size == u32::MAX || cd_offset == u32::MAX;
    if !needs_zip64 {
        if disk != 0 || cd_disk != 0 || field16(8) != entries {
            return Err(ZipError::MultiDisk);
        }
        return Ok(EndRecord {
            entries: u64::from(entries),
            cd_size: u64::from(cd_size),
            cd_offset: u64::from(cd_offset),
            cd_limit: eocd_abs,
        });
    }
    let Some(locator_at) = eocd_abs.checked_sub(ZIP64_LOCATOR_LEN) else {
        return Err(ZipError::Corrupt(
            "the ZIP64 end record locator is missing".into(),
        ));
    };
    let locator = read_at(file, locator_at, ZIP64_LOCATOR_LEN as usize)?;
    if le_u32(&locator, 0) != Some(ZIP64_LOCATOR_SIG) {
        return Err(ZipError::Corrupt(
            "the ZIP64 end record locator is missing".into(),
        ));
    }
    let z64_at = le_u64(&locator, 8).unwrap_or(u64::MAX);
    // Total disks: 1, though some writers leave 0.
    if !matches!(le_u32(&locator, 16), Some(0 | 1)) {
        return Err(ZipError::MultiDisk);
    }
    if z64_at.saturating_add(ZIP64_EOCD_LEN as u64) > locator_at {
        return Err(ZipError::Corrupt(
            "the ZIP64 end record is out of place".into(),
        ));
    }
    let z64 = read_at(file, z64_at, ZIP64_EOCD_LEN)?;
    if le_u32(&z64, 0) != Some(ZIP64_EOCD_SIG) {
        return Err(ZipError::Corrupt("the ZIP64 end record is missing".into()));
    }
    let field = |at| le_u64(&z64, at).unwrap_or(u64::MAX);
    if le_u32(&z64, 16) != Some(0) || le_u32(&z64, 20) != Some(0) || field(24) != field(32) {
        return Err(ZipError::MultiDisk);
    }
    Ok(EndRecord {
        entries: field(32),
        cd_size: field(40),
        cd_offset: field(48),
        cd_limit: z64_at,
    })
}

fn read_central_directory(
    file: &mut File,
    len: u64,
    end: &EndRecord,
    limits: Limits,
) -> Result<Vec<u8>, ZipError> {
    if end.entries > limits.max_entries {
        return Err(ZipError::TooManyEntries {
            count: end.entries,
            max: limits.max_entries,
        });
    }
    if end.cd_size > limits.max_central_directory {
        return Err(ZipError::CentralDirectoryTooLarge {
            size: end.cd_size,
            max: limits.max_central_directory,
        });
    }
    let cd_end = end.cd_offset.saturating_add(end.cd_size);
    if cd_end > len {
        return Err(ZipError::Truncated(
            "the central directory runs past the end of the file".into(),
        ));
    }
    if cd_end > end.cd_limit {
        return Err(ZipError::Corrupt(
            "the central directory overlaps the end record".into(),
        ));
    }
    if end.entries.saturating_mul(CENTRAL_LEN as u64) > end.cd_size {
        return Err(ZipError::Corrupt(format!(
            "{} entries cannot fit in a central directory of {} bytes",
            end.entries, end.cd_size
        )));
    }
    // Bounded by `max_central_directory` above.
    read_at(
        file,
        end.cd_offset,
        usize::try_from(end.cd_size).unwrap_or(0),
    )
}

fn parse_central_directory(cd: &[u8], end: &EndRecord) -> Result<Vec<Entry>, ZipError> {
    let corrupt = |i: u64, what: &str| ZipError::Corrupt(format!("central record #{i}: {what}"));
    let mut entries = Vec::with_capacity(usize::try_from(end.entries).unwrap_or(0));
    let mut p = 0usize;
    for i in 0..end.entries {
        let Some(fixed) = cd.get(p..p + CENTRAL_LEN) else {
            return Err(corrupt(i, "cut short"));
        };
        if le_u32(fixed, 0) != Some(CENTRAL_SIG) {
            return Err(corrupt(i, "bad signature"));
        }
        let f16 = |at| le_u16(fixed, at).unwrap_or(0);
        let f32 = |at| le_u32(fixed, at).unwrap_or(0);
        let (name_len, extra_len, comment_len) = (
            usize::from(f16(28)),
            usize::from(f16(30)),
            usize::from(f16(32)),
        );
        let name_at = p + CENTRAL_LEN;
        let extra_at = name_at + name_len;
        let next = extra_at + extra_len + comment_len;
        let (Some(raw_name), Some(extra)) = (
            cd.get(name_at..extra_at),
            cd.get(extra_at..extra_at + extra_len),
        ) else {
            return Err(corrupt(i, "cut short"));
        };
        if next > cd.len() {
            return Err(corrupt(i, "cut short"));
        }
        let mut size = u64::from(f32(24));
        let mut compressed_size = u64::from(f32(20));
        let mut local_header_offset = u64::from(f32(42));
        if size == u64::from(u32::MAX)
            || compressed_size == u64::from(u32::MAX)
            || local_header_offset == u64::from(u32::MAX)
        {
            let z = zip64_extra(extra).ok_or_else(|| corrupt(i, "ZIP64 sizes missing"))?;
            let mut k = 0;
            let mut next_value = || {
                let v = le_u64(z, k);
                k += 8;
                v
            };
            if size == u64::from(u32::MAX) {
                size = next_value().ok_or_else(|| corrupt(i, "ZIP64 size missing"))?;
            }
            if compressed_size == u64::from(u32::MAX) {
                compressed_size =
                    next_value().ok_or_else(|| corrupt(i, "ZIP64 compressed size missing"))?;
            }
            if local_header_offset == u64::from(u32::MAX) {
                local_header_offset =
                    next_value().ok_or_else(|| corrupt(i, "ZIP64 offset missing"))?;
            }
        }
        if local_header_offset >= end.cd_offset {
            return Err(corrupt(i, "data placed after the central directory"));
        }
        entries.push(Entry {
            name: String::from_utf8_lossy(raw_name).into_owned(),
            size,
            method: f16(10),
            flags: f16(8),
            crc32: f32(16),
            compressed_size,
            local_header_offset,
            raw_name: raw_name.to_vec(),
        });
        p = next;
    }
    Ok(entries)
}

/// The data of the ZIP64 extended information extra field.
fn zip64_extra(mut extra: &[u8]) -> Option<&[u8]> {
    while extra.len() >= 4 {
        let id = le_u16(extra, 0)?;
        let size = usize::from(le_u16(extra, 2)?);
        let data = extra.get(4..4 + size)?;
        if id == ZIP64_EXTRA_ID {
            return Some(data);
        }
        extra = &extra[4 + size..];
    }
    None
}

fn read_at(file: &mut File, at: u64, len: usize) -> Result<Vec<u8>, ZipError> {
    let mut buf = vec![0u8; len];
    file.seek(SeekFrom::Start(at))?;
    file.read_exact(&mut buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ZipError::Truncated("a record runs past the end of the file".into())
        } else {
            ZipError::Io(e)
        }
    })?;
    Ok(buf)
}

/// One entry's data, inflated on the fly and checked at its end.
struct EntryReader<'a> {
    source: io::Take<&'a mut File>,
    inflater: Option<Inflater>,
    name: String,
    expected: u64,
    expected_crc: u32,
    produced: u64,
    crc: Crc32,
    done: bool,
}

struct Inflater {
    state: Box<InflateState>,
    input: Vec<u8>,
    start: usize,
    end: usize,
    source_done: bool,
    stream_done: bool,
}

impl EntryReader<'_> {
    /// Fills `out` with the next bytes; `Ok(0)` once the entry ended and was verified.
    fn read_chunk(&mut self, out: &mut [u8]) -> Result<usize, ZipError> {
        if self.done || out.is_empty() {
            return Ok(0);
        }
        let n = match self.inflater.as_mut() {
            None => self
                .source
                .read(out)
                .map_err(|e| truncated_io(e, &self.name))?,
            Some(inf) => inflate_some(inf, &mut self.source, out, &self.name)?,
        };
        if n == 0 {
            self.finish()?;
            return Ok(0);
        }
        self.produced += n as u64;
        if self.produced > self.expected {
            return Err(self.corrupt(format!(
                "inflates past its declared size of {} bytes",
                self.expected
            )));
        }
        self.crc.update(&out[..n]);
        Ok(n)
    }

    fn finish(&mut self) -> Result<(), ZipError> {
        self.done = true;
        if self.produced != self.expected {
            return Err(self.corrupt(format!(
                "holds {} bytes, declared {}",
                self.produced, self.expected
            )));
        }
        if self.crc.value() != self.expected_crc {
            return Err(self.corrupt("CRC-32 mismatch".into()));
        }
        Ok(())
    }

    fn corrupt(&self, reason: String) -> ZipError {
        ZipError::CorruptEntry {
            name: self.name.clone(),
            reason,
        }
    }
}

/// Inflates into `out`; `Ok(0)` only at the end of the deflate stream.
fn inflate_some(
    inf: &mut Inflater,
    source: &mut impl Read,
    out: &mut [u8],
    name: &str,
) -> Result<usize, ZipError> {
    let corrupt = |reason: &str| ZipError::CorruptEntry {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    loop {
        if inf.stream_done {
            return Ok(0);
        }
        if inf.start == inf.end && !inf.source_done {
            let n = source
                .read(&mut inf.input)
                .map_err(|e| truncated_io(e, name))?;
            inf.start = 0;
            inf.end = n;
            inf.source_done = n == 0;
        }
        let r = inflate(
            &mut inf.state,
            &inf.input[inf.start..inf.end],
            out,
            MZFlush::None,
        );
        inf.start += r.bytes_consumed;
        let input_left = inf.start < inf.end || !inf.source_done;
        match r.status {
            Ok(MZStatus::StreamEnd) => inf.stream_done = true,
            Ok(_) => {}
            // No progress possible: the compressed data ended before the deflate stream did.
            Err(MZError::Buf) if !input_left => {
                return Err(ZipError::Truncated(format!("{name:?} ends early")));
            }
            Err(MZError::Buf) => {}
            Err(_) => return Err(corrupt("invalid deflate data")),
        }
        if r.bytes_written > 0 {
            return Ok(r.bytes_written);
        }
        if r.bytes_consumed == 0 && !inf.stream_done {
            if !input_left {
                return Err(ZipError::Truncated(format!("{name:?} ends early")));
            }
            if inf.start < inf.end {
                // Input available, room to write, and still no progress.
                return Err(corrupt("invalid deflate data"));
            }
        }
    }
}

/// CRC-32 (IEEE 802.3, reflected, as ZIP uses it).
#[derive(Debug, Clone, Copy)]
pub struct Crc32(u32);

const CRC_TABLE: [u32; 256] = crc_table();

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

impl Crc32 {
    pub fn new() -> Self {
        Self(0xFFFF_FFFF)
    }

    pub fn update(&mut self, data: &[u8]) {
        let mut c = self.0;
        for &b in data {
            c = CRC_TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
        }
        self.0 = c;
    }

    pub fn value(&self) -> u32 {
        !self.0
    }

    /// The CRC-32 of `data`.
    pub fn of(data: &[u8]) -> u32 {
        let mut c = Self::new();
        c.update(data);
        c.value()
    }
}

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}
