//! Wall-clock instants on the control plane and in audit records: ISO 8601 UTC with
//! milliseconds, e.g. `2026-11-30T09:12:03.120Z` (03 §8.1).

/// Formats unix milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn format_iso_ms(unix_ms: u64) -> String {
    let nanos = i128::from(unix_ms) * 1_000_000;
    // Past year 9999 (a broken clock) the latest representable instant is used.
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .unwrap_or_else(|_| time::PrimitiveDateTime::MAX.assume_utc());
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_milliseconds_in_utc() {
        assert_eq!(format_iso_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_iso_ms(1_764_493_923_120), "2025-11-30T09:12:03.120Z");
        assert_eq!(format_iso_ms(u64::MAX), "9999-12-31T23:59:59.999Z");
    }
}
