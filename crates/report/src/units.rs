//! The one latency formatter every renderer and chart axis uses: milliseconds, with
//! microseconds only below 1 ms (`850 µs`, `2.5 ms`, `35 ms`, `35039 ms`).

/// A latency given in microseconds, as text: `µs` below 1 ms, else `ms` (one decimal
/// below 10 ms, trailing zeros dropped; whole milliseconds above).
pub fn latency_us(us: f64) -> String {
    if !us.is_finite() || us < 0.0 {
        return "-".into();
    }
    if us < 1000.0 {
        return format!("{} µs", trim(us, if us < 10.0 { 1 } else { 0 }));
    }
    let ms = us / 1000.0;
    if ms < 10.0 { format!("{} ms", trim(ms, 1)) } else { format!("{ms:.0} ms") }
}

/// A latency in microseconds (an integer figure of the report), as text.
pub fn latency(us: u64) -> String {
    latency_us(us as f64)
}

/// `v` with at most `decimals` decimals, trailing zeros (and a bare point) dropped.
fn trim(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_with_microseconds_only_below_one() {
        assert_eq!(latency(0), "0 µs");
        assert_eq!(latency(5), "5 µs");
        assert_eq!(latency(850), "850 µs");
        assert_eq!(latency(999), "999 µs");
        assert_eq!(latency(1000), "1 ms");
        assert_eq!(latency(2500), "2.5 ms");
        assert_eq!(latency(12_345), "12 ms");
        assert_eq!(latency(35_039_000), "35039 ms");
        assert_eq!(latency_us(f64::NAN), "-");
        assert_eq!(latency_us(2.3), "2.3 µs");
    }
}
