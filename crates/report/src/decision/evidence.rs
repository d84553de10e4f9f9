//! When one design's figures beat another's: throughput and p99 samples compared run
//! by run, and whether the order is settled (3 or more runs a side and a one-sided
//! Mann-Whitney U at `settle_p`: at 3 against 3, ranges apart) or only suggested by
//! fewer runs.

use crate::StrategyReport;
use crate::stats::{mann_whitney_greater_p, spread};

/// With one run per row the noise is not measured: a faster throughput less than this
/// fraction above a slower one (ratio below 1.15×) is called a tie. docs/report.md says
/// why 15% and what run-to-run spread was measured here.
pub const TIE_BAND: f64 = 0.15;

/// Runs a side an order needs before it counts as settled.
pub const SETTLE_RUNS: usize = 3;

/// The one-sided p-value under which separated samples are a settled order (3 runs a
/// side whose ranges are apart give exactly 1/20).
pub const SETTLE_P: f64 = 0.05;

/// With one run each, a p99 at least this many times lower is a difference, not noise.
pub const P99_FACTOR: f64 = 2.0;

/// How a first row's samples stand against a second's on one figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sep {
    /// Better, over at least `SETTLE_RUNS` runs a side, by the Mann-Whitney U test at
    /// `settle_p`: a settled order.
    Settled,
    /// Better beyond the noise rule, but on fewer than `SETTLE_RUNS` runs a side.
    Suggested,
    /// Not told apart (or not better).
    Tie,
}

impl Sep {
    /// Told apart, settled or not.
    pub fn apart(self) -> bool {
        self != Sep::Tie
    }
}

/// The throughput figures of one row: one per run (`--repeat N` gives N).
pub fn throughput_samples(row: &StrategyReport) -> Vec<f64> {
    if row.repeats.is_empty() {
        vec![row.throughput_ops_per_s]
    } else {
        row.repeats.iter().map(|r| r.throughput_ops_per_s).collect()
    }
}

/// The worst op's p99 of one row, in microseconds: one per run.
pub fn p99_samples(row: &StrategyReport) -> Vec<f64> {
    if row.repeats.is_empty() {
        return vec![row.p99_all() as f64];
    }
    row.repeats
        .iter()
        .map(|r| {
            let ran = |op: &String| r.op_counts.get(op).is_none_or(|n| *n > 0);
            r.p99_us.iter().filter(|(op, _)| ran(op)).map(|(_, us)| *us).max().unwrap_or(0) as f64
        })
        .collect()
}

fn finite(s: &[f64]) -> Vec<f64> {
    s.iter().copied().filter(|v| v.is_finite()).collect()
}

/// The p-value an order must reach with `n` runs on the smaller side: `SETTLE_P` at
/// `SETTLE_RUNS`, then `SETTLE_P / (n - 2)`: each round a sequential run adds is a
/// further look, held to a stricter bound. Not a full correction (the looks' bounds sum
/// above `SETTLE_P`, and the direction is the one the medians favour): by simulation two
/// equal designs settle in about 10% of runs at a fixed 3 runs a side (either way) and
/// 11.5% when repeated until settled up to 6 (docs/report.md).
pub fn settle_p(n: usize) -> f64 {
    SETTLE_P / (n.saturating_sub(SETTLE_RUNS) + 1) as f64
}

/// Whether `hi`'s samples are above `lo`'s. With `SETTLE_RUNS` a side: the one-sided
/// Mann-Whitney U at `settle_p` (settled; at 3 against 3 that is ranges apart); with
/// fewer, ranges apart suggest it; with one run each, `single` decides (the figures' own
/// noise rule).
fn above(hi: &[f64], lo: &[f64], single: &dyn Fn(f64, f64) -> bool) -> Sep {
    let (hi, lo) = (finite(hi), finite(lo));
    let (Some((hi_min, _)), Some((_, lo_max))) = (spread(&hi), spread(&lo)) else { return Sep::Tie };
    if hi.len() == 1 && lo.len() == 1 {
        return if single(hi[0], lo[0]) { Sep::Suggested } else { Sep::Tie };
    }
    let n = hi.len().min(lo.len());
    if n < SETTLE_RUNS {
        return if hi_min > lo_max { Sep::Suggested } else { Sep::Tie };
    }
    match mann_whitney_greater_p(&hi, &lo) {
        Some(p) if p <= settle_p(n) + 1e-9 => Sep::Settled,
        _ => Sep::Tie,
    }
}

/// Whether throughput samples `a` beat `b` (higher is better; one run each: more than
/// `TIE_BAND` above).
pub fn faster(a: &[f64], b: &[f64]) -> Sep {
    above(a, b, &|x, y| x > 0.0 && x >= y * (1.0 + TIE_BAND))
}

/// Whether p99 samples `a` beat `b` (lower is better; one run each: `P99_FACTOR` lower).
pub fn lower_p99(a: &[f64], b: &[f64]) -> Sep {
    let neg = |s: &[f64]| s.iter().map(|v| -v).collect::<Vec<f64>>();
    above(&neg(a), &neg(b), &|x, y| -y > 0.0 && -y >= -x * P99_FACTOR)
}

/// Whether two rows' throughputs are indistinguishable, whichever is faster.
pub fn tied(a: &[f64], b: &[f64]) -> bool {
    let (a, b) = (finite(a), finite(b));
    if a.is_empty() || b.is_empty() {
        return false;
    }
    !faster(&a, &b).apart() && !faster(&b, &a).apart()
}

/// Whether every sample set has at least `SETTLE_RUNS` runs.
pub fn enough_runs(samples: &[&[f64]]) -> bool {
    samples.iter().all(|s| finite(s).len() >= SETTLE_RUNS)
}

/// How a tie on throughput was told, for the sentence: `within the noise band` (one
/// run each), `ranges overlap over 3 runs a side`, or with more runs `not apart over 5
/// runs a side`.
pub fn tie_words(a: &[f64], b: &[f64]) -> String {
    let n = a.len().min(b.len());
    match n {
        0 | 1 => "within the noise band".into(),
        _ if n <= SETTLE_RUNS => format!("ranges overlap over {n} runs a side"),
        _ => format!("not apart over {n} runs a side (Mann-Whitney, p > {:.3})", settle_p(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_runs_a_side_with_ranges_apart_settle_an_order() {
        assert_eq!(faster(&[1200.0, 1300.0, 1250.0], &[1000.0, 1100.0, 1050.0]), Sep::Settled);
        assert_eq!(faster(&[1000.0, 1100.0, 1050.0], &[1200.0, 1300.0, 1250.0]), Sep::Tie, "not better");
        // One overlap: 3 against 3 is no longer p <= 0.05.
        assert_eq!(faster(&[1200.0, 1300.0, 1090.0], &[1000.0, 1100.0, 1050.0]), Sep::Tie);
        // Ranges apart on 2 runs a side: a suggestion, not a settled order.
        assert_eq!(faster(&[1200.0, 1300.0], &[1000.0, 1100.0]), Sep::Suggested);
        assert_eq!(faster(&[1200.0, 1300.0, 1400.0], &[1000.0, 1100.0]), Sep::Suggested);
    }

    #[test]
    fn one_run_each_uses_the_noise_band_and_the_p99_factor() {
        assert_eq!(faster(&[1160.0], &[1000.0]), Sep::Suggested);
        assert_eq!(faster(&[1140.0], &[1000.0]), Sep::Tie);
        assert!(tied(&[1140.0], &[1000.0]) && tied(&[1000.0], &[1140.0]) && !tied(&[1000.0], &[1160.0]));
        assert!(!tied(&[f64::NAN], &[1.0]));
        assert_eq!(lower_p99(&[10_000.0], &[20_000.0]), Sep::Suggested);
        assert_eq!(lower_p99(&[10_000.0], &[19_000.0]), Sep::Tie);
        assert_eq!(lower_p99(&[20_000.0], &[10_000.0]), Sep::Tie, "higher is not lower");
        assert_eq!(lower_p99(&[1.0, 2.0, 3.0], &[5.0, 6.0, 7.0]), Sep::Settled);
        assert_eq!(lower_p99(&[1.0, 2.0, 6.0], &[5.0, 6.0, 7.0]), Sep::Tie);
    }

    #[test]
    fn more_runs_settle_an_order_with_overlap_at_a_stricter_p() {
        assert!((settle_p(3) - 0.05).abs() < 1e-12 && (settle_p(5) - 0.05 / 3.0).abs() < 1e-12);
        // 5 against 5 with one pair inverted: U = 24, p = 2/252 < 0.05/3.
        let (a, b) = ([11.0, 12.0, 13.0, 14.0, 9.5], [9.0, 9.1, 9.2, 9.3, 9.8]);
        assert_eq!(faster(&a, &b), Sep::Settled);
        // 4 against 4 with one inversion: p = 2/70 > 0.05/2.
        assert_eq!(faster(&[11.0, 12.0, 13.0, 9.5], &[9.0, 9.1, 9.2, 9.8]), Sep::Tie);
        // Interleaved samples never settle, however many.
        let (x, y): (Vec<f64>, Vec<f64>) = (0..10).map(|i| (i as f64 * 2.0, i as f64 * 2.0 + 1.0)).unzip();
        assert_eq!(faster(&y, &x), Sep::Tie);
        assert!(tie_words(&x, &y).starts_with("not apart over 10 runs a side"));
    }

    #[test]
    fn tie_words_name_the_rule() {
        assert_eq!(tie_words(&[1.0], &[1.0]), "within the noise band");
        assert_eq!(tie_words(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]), "ranges overlap over 3 runs a side");
        assert!(enough_runs(&[&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]]) && !enough_runs(&[&[1.0, 2.0], &[1.0, 2.0, 3.0]]));
    }
}
