//! `counterlab compare`: two report.json files side by side. Rows are matched by
//! (strategy, backend, isolation); per row the throughput change, per op the latency
//! percentile changes, and verdict changes. A regression is a verdict that stopped
//! matching its guarantee, or (with a limit) throughput down or an op's p99 up by more
//! than the limit (or open-loop drops up by more than the limit in percentage points),
//! or B was interrupted before rows A has.

use std::fmt::Write as _;

use crate::{Report, StrategyReport};

/// Ops with fewer samples than this in either run are shown but not judged: their p99 is noise.
pub const MIN_OPS_FOR_P99: u64 = 100;

#[derive(Clone, Debug)]
pub struct OpDelta {
    pub op: String,
    pub count: (u64, u64),
    pub p50: (u64, u64),
    pub p99: (u64, u64),
    pub p999: (u64, u64),
    /// p99 change in percent (positive: slower).
    pub p99_change_pct: f64,
}

#[derive(Clone, Debug)]
pub struct RowDelta {
    pub strategy: String,
    pub backend: String,
    pub isolation: String,
    pub throughput: (f64, f64),
    /// Throughput change in percent (negative: slower).
    pub throughput_change_pct: f64,
    pub verdict: (String, String),
    pub mismatched: (u64, u64),
    pub ops: Vec<OpDelta>,
}

#[derive(Clone, Debug)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    pub rows: Vec<RowDelta>,
    /// Rows present in one report only, as `strategy on backend at isolation`.
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    /// Caveats (load models that differ), in words.
    pub notes: Vec<String>,
    /// Every regression found, in words.
    pub regressions: Vec<String>,
}

fn pct(a: f64, b: f64) -> f64 {
    if a > 0.0 { (b - a) / a * 100.0 } else { 0.0 }
}

fn key(s: &StrategyReport) -> (String, String, String) {
    (s.strategy.clone(), s.backend.clone(), s.isolation.clone())
}

fn label(k: &(String, String, String)) -> String {
    format!("{} on {} at {}", k.0, k.1, k.2)
}

/// Compares run `a` (the baseline) with run `b`. `fail_if_slower_pct`: the slowdown, in
/// percent, beyond which throughput or an op's p99 counts as a regression.
pub fn compare(a: &Report, a_name: &str, b: &Report, b_name: &str, fail_if_slower_pct: Option<f64>) -> Comparison {
    let mut rows = Vec::new();
    let mut regressions = Vec::new();
    let mut only_in_a = Vec::new();
    let mut notes = Vec::new();
    for sa in &a.strategies {
        let k = key(sa);
        let Some(sb) = b.strategies.iter().find(|s| key(s) == k) else {
            only_in_a.push(label(&k));
            continue;
        };
        let ops = op_deltas(&k, sa, sb, fail_if_slower_pct, &mut regressions);
        if sa.load_model != sb.load_model {
            notes.push(format!(
                "{}: load models differ (A: {}; B: {}): an open loop's throughput is set by its schedule",
                label(&k),
                sa.load_model,
                sb.load_model
            ));
        }
        row_regressions(&k, sa, sb, fail_if_slower_pct, &mut regressions);
        rows.push(RowDelta {
            strategy: k.0,
            backend: k.1,
            isolation: k.2,
            throughput: (sa.throughput_ops_per_s, sb.throughput_ops_per_s),
            throughput_change_pct: pct(sa.throughput_ops_per_s, sb.throughput_ops_per_s),
            verdict: (sa.check.verdict.clone(), sb.check.verdict.clone()),
            mismatched: (sa.check.users_mismatched, sb.check.users_mismatched),
            ops,
        });
    }
    if b.interrupted && !only_in_a.is_empty() {
        regressions.push(format!("B was interrupted: {} did not run", only_in_a.join(", ")));
    }
    let only_in_b = b
        .strategies
        .iter()
        .map(key)
        .filter(|k| !a.strategies.iter().any(|s| key(s) == *k))
        .map(|k| label(&k))
        .collect();
    Comparison { a: a_name.into(), b: b_name.into(), rows, only_in_a, only_in_b, notes, regressions }
}

/// The latency changes of each op either run did, for the row `k`; an op whose p99 grew
/// past the limit (with enough samples on both sides to trust it) adds a regression.
fn op_deltas(
    k: &(String, String, String),
    sa: &StrategyReport,
    sb: &StrategyReport,
    fail_if_slower_pct: Option<f64>,
    regressions: &mut Vec<String>,
) -> Vec<OpDelta> {
    let mut ops = Vec::new();
    for (name, oa) in &sa.ops {
        let Some(ob) = sb.ops.get(name) else { continue };
        if oa.count == 0 && ob.count == 0 {
            continue;
        }
        let (la, lb) = (&oa.latency_us, &ob.latency_us);
        let d = OpDelta {
            op: name.clone(),
            count: (oa.count, ob.count),
            p50: (la.p50, lb.p50),
            p99: (la.p99, lb.p99),
            p999: (la.p999, lb.p999),
            p99_change_pct: pct(la.p99 as f64, lb.p99 as f64),
        };
        if let Some(limit) = fail_if_slower_pct
            && oa.count >= MIN_OPS_FOR_P99
            && ob.count >= MIN_OPS_FOR_P99
            && d.p99_change_pct > limit
        {
            regressions.push(format!(
                "{} {}: p99 {} -> {} us (+{:.1}%, limit {limit}%)",
                label(k),
                name,
                la.p99,
                lb.p99,
                d.p99_change_pct
            ));
        }
        ops.push(d);
    }
    ops
}

/// The row-wide regressions of row `k`, in this order: open-loop drops up past the limit
/// (in percentage points), throughput down past it, and a verdict that stopped matching
/// its guarantee (whatever the limit).
fn row_regressions(
    k: &(String, String, String),
    sa: &StrategyReport,
    sb: &StrategyReport,
    fail_if_slower_pct: Option<f64>,
    regressions: &mut Vec<String>,
) {
    let drop_rate = |s: &StrategyReport| {
        s.open_loop.as_ref().map_or(0.0, |o| if o.scheduled > 0 { o.dropped as f64 / o.scheduled as f64 } else { 0.0 })
    };
    if let Some(limit) = fail_if_slower_pct
        && (drop_rate(sb) - drop_rate(sa)) * 100.0 > limit
    {
        regressions.push(format!(
            "{}: open-loop drops {:.1}% -> {:.1}% of scheduled ops (limit +{limit} points)",
            label(k),
            drop_rate(sa) * 100.0,
            drop_rate(sb) * 100.0
        ));
    }
    let change = pct(sa.throughput_ops_per_s, sb.throughput_ops_per_s);
    if let Some(limit) = fail_if_slower_pct
        && -change > limit
    {
        regressions.push(format!(
            "{}: throughput {:.0} -> {:.0} ops/s ({change:.1}%, limit -{limit}%)",
            label(k),
            sa.throughput_ops_per_s,
            sb.throughput_ops_per_s
        ));
    }
    if sa.check.matches_guarantee && !sb.check.matches_guarantee {
        regressions.push(format!(
            "{}: verdict {} -> {} ({} of {} users mismatched; guarantee {})",
            label(k),
            sa.check.verdict,
            sb.check.verdict,
            sb.check.users_mismatched,
            sb.check.users_checked,
            sb.guarantee
        ));
    }
}

/// The comparison as terminal text.
pub fn render_comparison(c: &Comparison) -> String {
    let mut out = String::new();
    let w = &mut out;
    writeln!(w, "A: {}\nB: {}\n", c.a, c.b).unwrap();
    rows_table(w, c);
    writeln!(w).unwrap();
    ops_table(w, c);
    for (which, list) in [("A", &c.only_in_a), ("B", &c.only_in_b)] {
        if !list.is_empty() {
            writeln!(w, "\nonly in {which}: {}", list.join(", ")).unwrap();
        }
    }
    for n in &c.notes {
        writeln!(w, "\nnote: {n}").unwrap();
    }
    if c.regressions.is_empty() {
        writeln!(w, "\nno regression").unwrap();
    } else {
        writeln!(w, "\n{} regression(s):", c.regressions.len()).unwrap();
        for r in &c.regressions {
            writeln!(w, "  {r}").unwrap();
        }
    }
    out
}

/// One line per matched row: throughput A and B, its change, the verdicts and mismatches.
fn rows_table(w: &mut String, c: &Comparison) {
    writeln!(
        w,
        "{:<29} {:<14} {:<15} {:>9} {:>9} {:>8}  {:<30} {:>11}",
        "strategy", "backend", "isolation", "A ops/s", "B ops/s", "change", "verdict A -> B", "mismatched"
    )
    .unwrap();
    for r in &c.rows {
        let verdict = if r.verdict.0 == r.verdict.1 {
            r.verdict.0.clone()
        } else {
            format!("{} -> {} (changed)", r.verdict.0, r.verdict.1)
        };
        writeln!(
            w,
            "{:<29} {:<14} {:<15} {:>9.0} {:>9.0} {:>7.1}%  {:<30} {:>5} -> {:<5}",
            r.strategy,
            r.backend,
            r.isolation,
            r.throughput.0,
            r.throughput.1,
            r.throughput_change_pct,
            verdict,
            r.mismatched.0,
            r.mismatched.1
        )
        .unwrap();
    }
}

/// One line per op of each matched row: its percentiles A and B and the p99 change.
fn ops_table(w: &mut String, c: &Comparison) {
    writeln!(
        w,
        "{:<29} {:<14} {:<15} {:<14} {:>17} {:>17} {:>17} {:>8}",
        "latency (us)", "backend", "isolation", "op", "p50 A -> B", "p99 A -> B", "p999 A -> B", "p99 chg"
    )
    .unwrap();
    for r in &c.rows {
        for o in &r.ops {
            writeln!(
                w,
                "{:<29} {:<14} {:<15} {:<14} {:>17} {:>17} {:>17} {:>7.1}%",
                r.strategy,
                r.backend,
                r.isolation,
                o.op,
                format!("{} -> {}", o.p50.0, o.p50.1),
                format!("{} -> {}", o.p99.0, o.p99.1),
                format!("{} -> {}", o.p999.0, o.p999.1),
                o.p99_change_pct
            )
            .unwrap();
        }
    }
}
