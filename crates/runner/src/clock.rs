//! Wall-clock helpers: UTC timestamps for run ids and report folders, formatted by
//! `jiff` (no hand-written calendar arithmetic).

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// The Unix time as a `jiff` timestamp (saturating at jiff's range, which ends in 9999).
fn timestamp(unix_s: u64) -> Timestamp {
    let s = i64::try_from(unix_s).unwrap_or(i64::MAX).min(Timestamp::MAX.as_second());
    Timestamp::from_second(s).unwrap_or(Timestamp::MAX)
}

/// (year, month, day, hour, minute, second) in UTC for a Unix time.
pub fn utc_parts(unix_s: u64) -> (i64, u32, u32, u32, u32, u32) {
    let dt = TimeZone::UTC.to_datetime(timestamp(unix_s));
    let u = |v: i8| v as u32;
    (i64::from(dt.year()), u(dt.month()), u(dt.day()), u(dt.hour()), u(dt.minute()), u(dt.second()))
}

/// Seconds and nanoseconds since the Unix epoch (0 if the clock is before it).
pub fn now_unix() -> (u64, u32) {
    let now = Timestamp::now();
    (u64::try_from(now.as_second()).unwrap_or(0), u32::try_from(now.subsec_nanosecond()).unwrap_or(0))
}

/// `2026-11-30T17:04:05Z`
pub fn iso8601(unix_s: u64) -> String {
    timestamp(unix_s).strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `20261130t170405`: sortable, and a valid lowercase SQL identifier fragment.
pub fn compact(unix_s: u64) -> String {
    timestamp(unix_s).strftime("%Y%m%dt%H%M%S").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso8601(1_795_996_800 + 3_661), "2026-11-30T01:01:01Z");
        assert_eq!(compact(1_795_996_800), "20261130t000000");
        assert_eq!(utc_parts(951_782_400 + 86_399), (2000, 2, 29, 23, 59, 59));
    }
}
