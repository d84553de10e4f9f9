//! The one bounded-value helper: a scenario number inside its limits, or an error at the
//! number saying the range and what was given.

use std::fmt::Display;
use std::ops::RangeInclusive;

use toml::Spanned;

use crate::error::{ScenarioError, Src};

/// `v` within `range` (or `default` when absent); the error says
/// "`what` must be in lo..=hi, got v".
pub(crate) fn within<T: PartialOrd + Copy + Display>(
    src: &Src<'_>,
    v: &Option<Spanned<T>>,
    what: &str,
    range: RangeInclusive<T>,
    default: T,
) -> Result<T, ScenarioError> {
    match v {
        Some(x) => within_at(src, x, what, range),
        None => Ok(default),
    }
}

/// A given value within `range`.
pub(crate) fn within_at<T: PartialOrd + Copy + Display>(
    src: &Src<'_>,
    x: &Spanned<T>,
    what: &str,
    range: RangeInclusive<T>,
) -> Result<T, ScenarioError> {
    let v = *x.get_ref();
    if range.contains(&v) {
        return Ok(v);
    }
    Err(src.at(x.span(), format!("{what} must be in {}..={}, got {v}", range.start(), range.end())))
}

/// A duration, rate or similar: finite, above 0 and at most `max`; the error says
/// "`what` must be in (0, max]`unit`, got v".
pub(crate) fn positive(v: f64, max: f64) -> bool {
    v.is_finite() && v > 0.0 && v <= max
}

pub(crate) fn positive_at(
    src: &Src<'_>,
    x: &Spanned<f64>,
    what: &str,
    max: f64,
    unit: &str,
) -> Result<f64, ScenarioError> {
    let v = *x.get_ref();
    if positive(v, max) {
        return Ok(v);
    }
    Err(src.at(x.span(), format!("{what} must be in (0, {max}]{unit}, got {v}")))
}

/// Harness memory a run holds per seeded row: the live-id pool's 2 bits, rounded up to a
/// byte for what else scales with rows (measured: reports/2026-12-02-memory-and-check).
pub const ROW_BYTES: u64 = 1;
/// Per user: the check's bit and a Redis strategy's counter (16 B), the zipf table (8 B)
/// and headroom.
pub const USER_BYTES: u64 = 48;
/// The rest of a run whatever its size: runtime, pools, histograms, the history's start.
pub const BASE_BYTES: u64 = 96 << 20;
/// Where memory cannot be read (not Linux): the limits measured on a 2-core, 24 GB machine.
pub const FALLBACK_MAX_ROWS: u64 = 100_000_000;

/// The harness memory a run over `users` x `per_user` seeded rows needs.
pub fn memory_needed(users: u64, per_user: u64) -> u64 {
    users
        .saturating_mul(per_user)
        .saturating_mul(ROW_BYTES)
        .saturating_add(users.saturating_mul(USER_BYTES))
        .saturating_add(BASE_BYTES)
}

/// The memory available to a new process now (`MemAvailable` in /proc/meminfo), or None
/// where it cannot be read.
pub fn memory_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

/// The seeded data fits the machine: `available` (None: the fallback row limit) against
/// what `users` x `per_user` needs; the error says both.
pub(crate) fn fits_memory(users: u64, per_user: u64, available: Option<u64>) -> Result<(), String> {
    let rows = users.saturating_mul(per_user);
    let Some(available) = available else {
        return match rows <= FALLBACK_MAX_ROWS {
            true => Ok(()),
            false => Err(format!(
                "users x notifications_per_user = {rows} exceeds {FALLBACK_MAX_ROWS} seeded rows \
                 (the available memory cannot be read here)"
            )),
        };
    };
    let needed = memory_needed(users, per_user);
    if needed <= available {
        return Ok(());
    }
    Err(format!(
        "users x notifications_per_user = {rows} rows need about {} of harness memory \
         ({ROW_BYTES} B a row + {USER_BYTES} B a user + {}), and {} is available",
        bytes(needed),
        bytes(BASE_BYTES),
        bytes(available)
    ))
}

/// Bytes in binary units, one decimal.
fn bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let i = ((64 - b.max(1).leading_zeros() as usize).saturating_sub(1) / 10).min(units.len() - 1);
    format!("{:.1} {}", b as f64 / (1u64 << (10 * i)) as f64, units[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_decides_the_size() {
        let gib = 1u64 << 30;
        // 10M users x 10 rows: 100M B + 480M B + 96 MiB, about 0.6 GiB.
        assert!(fits_memory(10_000_000, 10, Some(gib)).is_ok());
        let err = fits_memory(10_000_000, 100, Some(gib)).unwrap_err();
        assert_eq!(
            err,
            "users x notifications_per_user = 1000000000 rows need about 1.5 GiB of harness memory \
             (1 B a row + 48 B a user + 96.0 MiB), and 1.0 GiB is available"
        );
        assert!(fits_memory(10_000_000, 10, None).is_ok());
        assert!(fits_memory(10_000_000, 11, None).unwrap_err().contains("exceeds 100000000 seeded rows"));
        assert_eq!(memory_needed(u64::MAX, 2), u64::MAX);
        assert_eq!((bytes(0), bytes(1023), bytes(1536)), ("0.0 B".into(), "1023.0 B".into(), "1.5 KiB".into()));
    }

    #[test]
    fn reads_this_machine() {
        if cfg!(target_os = "linux") {
            assert!(memory_available().is_some_and(|b| b > 0));
        }
    }
}
