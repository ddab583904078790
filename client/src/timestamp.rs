//! Wall-clock instants as text, one home for the daemon and its clients: ISO 8601 UTC with
//! milliseconds on the control plane and in audit records (`2026-11-30T09:12:03.120Z`,
//! §C8) and in the CLI's `meta.timestamp` (§L3.4), with seconds in human output.

use time::{OffsetDateTime, UtcOffset};

/// Formats unix milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn format_iso_ms(unix_ms: u64) -> String {
    let nanos = i128::from(unix_ms) * 1_000_000;
    // Past year 9999 (a broken clock) the latest representable instant is used.
    let t = OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .unwrap_or_else(|_| time::PrimitiveDateTime::MAX.assume_utc());
    iso_millis(t)
}

/// `2026-11-30T09:12:03Z`: ISO 8601 UTC with seconds precision.
pub fn iso_seconds(at: OffsetDateTime) -> String {
    let at = at.to_offset(UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// `2026-11-30T09:12:03.120Z`: ISO 8601 UTC with milliseconds.
pub fn iso_millis(at: OffsetDateTime) -> String {
    let at = at.to_offset(UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.millisecond()
    )
}

/// [`iso_seconds`] of a Unix time in seconds; `None` outside the representable range.
pub fn iso_seconds_from_unix_s(unix_s: i64) -> Option<String> {
    OffsetDateTime::from_unix_timestamp(unix_s)
        .ok()
        .map(iso_seconds)
}

/// [`iso_seconds`] of a Unix time in milliseconds (sub-second part dropped).
pub fn iso_seconds_from_unix_ms(unix_ms: i64) -> Option<String> {
    iso_seconds_from_unix_s(unix_ms.div_euclid(1000))
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn formats_with_milliseconds_in_utc() {
        assert_eq!(format_iso_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_iso_ms(1_764_493_923_120), "2025-11-30T09:12:03.120Z");
        assert_eq!(format_iso_ms(u64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn instants_are_utc_with_seconds_precision() {
        assert_eq!(
            iso_seconds(datetime!(2026-11-30 09:12:03.120 UTC)),
            "2026-11-30T09:12:03Z"
        );
        // Another offset is converted to UTC.
        assert_eq!(
            iso_seconds(datetime!(2026-11-30 10:12:03 +01:00)),
            "2026-11-30T09:12:03Z"
        );
        assert_eq!(
            iso_millis(datetime!(2026-11-30 09:12:03.120 UTC)),
            "2026-11-30T09:12:03.120Z"
        );
        assert_eq!(
            iso_millis(datetime!(2026-01-02 03:04:05 UTC)),
            "2026-01-02T03:04:05.000Z"
        );
    }

    #[test]
    fn unix_times_render_and_out_of_range_is_none() {
        assert_eq!(
            iso_seconds_from_unix_s(1_764_494_223).as_deref(),
            Some("2025-11-30T09:17:03Z")
        );
        assert_eq!(
            iso_seconds_from_unix_ms(1_764_494_223_999).as_deref(),
            Some("2025-11-30T09:17:03Z")
        );
        assert_eq!(iso_seconds_from_unix_s(i64::MAX), None);
    }
}
