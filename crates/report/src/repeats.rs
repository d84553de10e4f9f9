//! `--repeat N`: the rows of one cell's repeats folded into one row. The row is the
//! worst repeat's (its verdict, check and anomalies: a guarantee broken in any repeat is
//! broken), with the anomalies of every failing repeat kept, and its throughput and
//! latency percentiles replaced by the medians over the repeats; each repeat's own
//! figures stay in `repeats[]` for the spread and for `compare`'s test.

use std::collections::BTreeMap;

use counterlab_core::Verdict;
use serde::{Deserialize, Serialize};

use crate::stats::{median, spread};
use crate::{Latency, StrategyReport};

/// One repeat of a row, in run order.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RepeatRun {
    /// 1-based, in run order.
    pub repeat: u32,
    /// The seed its namespace and workload were built from (the run's seed: every repeat
    /// replays the same plan).
    pub seed: u64,
    pub namespace: String,
    pub throughput_ops_per_s: f64,
    pub ops_total: u64,
    pub errors_total: u64,
    /// Its verdict's label and whether that matched the guarantee.
    pub verdict: String,
    pub matches_guarantee: bool,
    /// Per op: p99 latency (us, from the intended start) and how many ops it is over.
    pub p99_us: BTreeMap<String, u64>,
    pub op_counts: BTreeMap<String, u64>,
    /// How this repeat's load stalled, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall: Option<crate::Stall>,
}

impl RepeatRun {
    pub fn of(repeat: u32, seed: u64, r: &StrategyReport) -> RepeatRun {
        RepeatRun {
            repeat,
            seed,
            namespace: r.namespace.clone(),
            throughput_ops_per_s: r.throughput_ops_per_s,
            ops_total: r.ops_total,
            errors_total: r.errors_total,
            verdict: r.check.label(),
            matches_guarantee: r.check.matches_guarantee,
            p99_us: r.ops.iter().map(|(k, o)| (k.clone(), o.latency_us.p99)).collect(),
            op_counts: r.ops.iter().map(|(k, o)| (k.clone(), o.count)).collect(),
            stall: r.stall.clone(),
        }
    }
}

/// A broken guarantee: the top of `severity`.
const BROKEN: u8 = 4;

/// How bad a row's verdict is, for picking the worst repeat: a broken guarantee, then an
/// incomplete check, then no evidence, then drift where none was promised (the race was
/// hit), then the rest.
fn severity(r: &StrategyReport) -> u8 {
    match r.check.verdict {
        _ if !r.check.matches_guarantee => BROKEN,
        Verdict::Fail(_) => BROKEN,
        Verdict::Incomplete(_) => 3,
        Verdict::NoEvidence => 2,
        Verdict::DriftExpected => 1,
        _ => 0,
    }
}

/// Folds the rows of one cell's repeats (in run order, seeded with `seed`) into one row.
/// A single row comes back as it was (no `repeats`). The representative repeat is the
/// first of the worst verdict; when every repeat is as good, the one of median
/// throughput. Its row is kept, with throughput and each op's latency percentiles
/// (p50, p90, p99, p999, max, mean) replaced by their medians over the repeats; counts,
/// errors, series and stages stay the representative's.
pub fn merge_repeats(runs: Vec<StrategyReport>, seed: u64) -> Option<StrategyReport> {
    if runs.len() <= 1 {
        return runs.into_iter().next();
    }
    let repeats: Vec<RepeatRun> = runs.iter().enumerate().map(|(i, r)| RepeatRun::of(i as u32 + 1, seed, r)).collect();
    let worst = runs.iter().map(severity).max().unwrap_or(0);
    let pick =
        if worst > 0 { runs.iter().position(|r| severity(r) == worst).unwrap_or(0) } else { median_index(&repeats) };
    let failing: Vec<usize> = (0..runs.len()).filter(|i| severity(&runs[*i]) == BROKEN).collect();
    let mut row = runs[pick].clone();
    let anomalies_from: Vec<usize> = if failing.is_empty() { vec![pick] } else { failing };
    row.anomalies = anomalies_from
        .iter()
        .flat_map(|i| {
            runs[*i].anomalies.iter().cloned().map(move |mut a| {
                a.detail = format!("repeat {}: {}", i + 1, a.detail);
                a
            })
        })
        .collect();
    let tputs: Vec<f64> = repeats.iter().map(|r| r.throughput_ops_per_s).collect();
    row.throughput_ops_per_s = median(&tputs).unwrap_or(row.throughput_ops_per_s);
    for (name, op) in row.ops.iter_mut() {
        let lats: Vec<&Latency> = runs.iter().filter_map(|r| r.ops.get(name)).map(|o| &o.latency_us).collect();
        let med = |f: &dyn Fn(&Latency) -> f64| median(&lats.iter().map(|l| f(l)).collect::<Vec<_>>()).unwrap_or(0.0);
        let l = &mut op.latency_us;
        l.p50 = med(&|l| l.p50 as f64).round() as u64;
        l.p90 = med(&|l| l.p90 as f64).round() as u64;
        l.p99 = med(&|l| l.p99 as f64).round() as u64;
        l.p999 = med(&|l| l.p999 as f64).round() as u64;
        l.max = med(&|l| l.max as f64).round() as u64;
        l.mean = med(&|l| l.mean);
    }
    row.stall = worst_stall(&repeats);
    row.repeats = repeats;
    Some(row)
}

/// The longest stall over the repeats, naming its repeat (None when none stalled).
fn worst_stall(repeats: &[RepeatRun]) -> Option<crate::Stall> {
    let worst = repeats
        .iter()
        .filter_map(|r| r.stall.as_ref().map(|s| (r.repeat, s)))
        .max_by(|a, b| a.1.seconds().total_cmp(&b.1.seconds()))?;
    Some(crate::Stall { repeat: Some(worst.0), ..worst.1.clone() })
}

/// The repeat of median throughput (the lower middle one for an even count).
fn median_index(repeats: &[RepeatRun]) -> usize {
    let mut order: Vec<usize> = (0..repeats.len()).collect();
    order.sort_by(|a, b| repeats[*a].throughput_ops_per_s.total_cmp(&repeats[*b].throughput_ops_per_s));
    order[(order.len() - 1) / 2]
}

/// A row's throughput with its spread over the repeats: `1234 ops/s (1180–1290, n=3)`,
/// or `1234 ops/s` for a single run.
pub fn throughput_with_spread(s: &StrategyReport) -> String {
    let xs: Vec<f64> = s.repeats.iter().map(|r| r.throughput_ops_per_s).collect();
    match spread(&xs) {
        Some((lo, hi)) if xs.len() > 1 => {
            format!("{:.0} ops/s ({lo:.0}–{hi:.0}, n={})", s.throughput_ops_per_s, xs.len())
        }
        _ => format!("{:.0} ops/s", s.throughput_ops_per_s),
    }
}

/// The repeats in words, for the terminal and Markdown (empty when no row has any):
/// `heading` opens the block, each row's line starts with `bullet`.
pub(crate) fn repeats_block(r: &crate::Report, heading: &str, bullet: &str) -> String {
    use std::fmt::Write as _;
    let rows: Vec<&StrategyReport> = r.strategies.iter().filter(|s| !s.repeats.is_empty()).collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut w = format!(
        "{heading}interleaved; ops/s and latency percentiles are medians over the repeats, the verdict the worst)\n\n"
    );
    for s in rows {
        let verdicts: Vec<String> = s.repeats.iter().map(|x| format!("{}: {}", x.repeat, x.verdict)).collect();
        let p99 = s.p99_all();
        writeln!(
            w,
            "{bullet}{}: {}, p99 {p99} us; by repeat: {}",
            s.label(),
            throughput_with_spread(s),
            verdicts.join(", ")
        )
        .unwrap();
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Anomaly, OpReport};

    fn run(tput: f64, p99: u64, verdict: &str, held: bool) -> StrategyReport {
        let mut r = StrategyReport { throughput_ops_per_s: tput, ..Default::default() };
        let mut op = OpReport { count: 500, ..Default::default() };
        op.latency_us.p99 = p99;
        r.ops.insert("create".into(), op);
        r.check.verdict = Verdict::parse(verdict).unwrap();
        r.check.matches_guarantee = held;
        r
    }

    #[test]
    fn medians_and_the_representative_repeat() {
        let row = merge_repeats(
            vec![run(100.0, 9, "pass", true), run(300.0, 1, "pass", true), run(200.0, 5, "pass", true)],
            7,
        )
        .unwrap();
        assert_eq!(row.throughput_ops_per_s, 200.0);
        assert_eq!(row.ops["create"].latency_us.p99, 5);
        assert_eq!(row.repeats.len(), 3);
        assert_eq!(row.repeats[1].repeat, 2);
        assert_eq!(row.repeats[2].p99_us["create"], 5);
        assert_eq!(row.repeats[0].seed, 7);
        assert_eq!(throughput_with_spread(&row), "200 ops/s (100–300, n=3)");
    }

    #[test]
    fn a_guarantee_broken_in_any_repeat_is_broken_with_every_failing_repeats_anomalies() {
        let mut bad2 = run(150.0, 5, "FAIL: counters", false);
        bad2.anomalies.push(Anomaly { name: "lost_update".into(), detail: "u1".into(), ..Default::default() });
        let mut bad3 = run(160.0, 5, "FAIL: counters", false);
        bad3.anomalies.push(Anomaly { name: "lost_update".into(), detail: "u2".into(), ..Default::default() });
        let row = merge_repeats(vec![run(100.0, 5, "pass", true), bad2, bad3], 1).unwrap();
        assert_eq!(row.check.label(), "FAIL: counters");
        assert!(!row.check.matches_guarantee);
        let details: Vec<&str> = row.anomalies.iter().map(|a| a.detail.as_str()).collect();
        assert_eq!(details, ["repeat 2: u1", "repeat 3: u2"]);
        assert_eq!(row.throughput_ops_per_s, 150.0);
    }

    #[test]
    fn a_race_hit_in_any_repeat_is_the_row_s_verdict() {
        let runs = vec![
            run(100.0, 5, "no-drift-observed", true),
            run(90.0, 5, "drift-expected", true),
            run(95.0, 5, "no-drift-observed", true),
        ];
        let row = merge_repeats(runs, 1).unwrap();
        assert_eq!((row.check.label().as_str(), row.throughput_ops_per_s), ("drift-expected", 95.0));
    }

    #[test]
    fn the_longest_stall_of_any_repeat_is_the_row_s_naming_its_repeat() {
        let stalled = |idle: [f64; 2]| {
            let mut r = run(100.0, 5, "pass", true);
            r.stall = Some(crate::Stall { idle: Some(idle), ..Default::default() });
            r
        };
        let runs = vec![stalled([1.0, 2.0]), run(100.0, 5, "pass", true), stalled([1.0, 3.5])];
        let row = merge_repeats(runs, 1).unwrap();
        assert_eq!(
            row.stall.as_ref().map(|s| s.words()).as_deref(),
            Some("no op completed for 2.5 s (1.0-3.5 s) in repeat 3")
        );
        assert!(row.repeats[1].stall.is_none() && row.repeats[0].stall.is_some());
        let calm = merge_repeats(vec![run(100.0, 5, "pass", true), run(90.0, 5, "pass", true)], 1).unwrap();
        assert!(calm.stall.is_none());
    }

    #[test]
    fn a_single_run_is_left_as_it_was() {
        let row = merge_repeats(vec![run(100.0, 5, "pass", true)], 1).unwrap();
        assert!(row.repeats.is_empty());
        assert_eq!(throughput_with_spread(&row), "100 ops/s");
        assert!(merge_repeats(Vec::new(), 1).is_none());
    }
}
