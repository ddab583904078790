//! Target `doctor_zip`: the bounded ZIP reader of `appduct doctor` (`appduct_doctor::zip`).
//!
//! Input: the archive bytes, opened from an unlinked temporary file with small caps (so a bomb
//! hits them quickly). Invariants:
//! - opening either fails with a typed error or lists at most `max_entries` entries, each name
//!   found again by [`ZipArchive::find`] (names that are not UTF-8 are replaced, so two raw
//!   names may share one);
//! - an entry read whole is never longer than the cap asked for or its declared size, and the
//!   total read from one archive stays within `max_total_inflated`;
//! - streaming an entry in chunks yields exactly the bytes of reading it whole.

use std::io::{Seek as _, SeekFrom, Write as _};

use appduct_doctor::zip::{Limits, ZipArchive};

const LIMITS: Limits = Limits {
    max_entries: 64,
    max_central_directory: 64 << 10,
    max_total_inflated: 4 << 20,
};
/// Per-entry cap asked of the reader.
const ENTRY_CAP: u64 = 1 << 20;

fn open(data: &[u8]) -> Option<std::fs::File> {
    let mut file = tempfile::tempfile().ok()?;
    file.write_all(data).ok()?;
    file.seek(SeekFrom::Start(0)).ok()?;
    Some(file)
}

pub fn run(data: &[u8]) {
    let Some(file) = open(data) else { return };
    let Ok(mut zip) = ZipArchive::from_file(file, LIMITS) else {
        return;
    };
    let entries = zip.entries().to_vec();
    assert!(entries.len() as u64 <= LIMITS.max_entries);
    let mut total = 0u64;
    for (i, entry) in entries.iter().enumerate() {
        let Some(found) = zip.find(&entry.name) else {
            panic!("listed name {:?} is not found", entry.name);
        };
        assert_eq!(entries[found].name, entry.name);
        let Ok(whole) = zip.read_to_vec(i, ENTRY_CAP) else {
            continue;
        };
        let len = whole.len() as u64;
        assert!(
            len <= ENTRY_CAP && len <= entry.size,
            "{len} > {}",
            entry.size
        );
        total += len;
        assert!(total <= LIMITS.max_total_inflated);
        // A second read through the chunk API, on a fresh budget, gives the same bytes.
        let Some(file) = open(data) else { return };
        let Ok(mut again) = ZipArchive::from_file(file, LIMITS) else {
            panic!("an archive that opened once did not open again");
        };
        let mut streamed = Vec::new();
        again
            .for_each_chunk(i, ENTRY_CAP, |chunk| streamed.extend_from_slice(chunk))
            .unwrap_or_else(|e| panic!("read whole but not streamed: {e}"));
        assert_eq!(streamed, whole);
    }
}
