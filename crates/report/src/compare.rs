//! `counterlab compare`: two report.json files side by side. Rows are matched by
//! (strategy, backend, isolation); per row the throughput change, per op the latency
//! percentile changes, and verdict changes. A regression is a verdict that stopped
//! matching its guarantee (or lost its evidence), B interrupted before rows A has, or a
//! slowdown: with `--repeat` runs on both sides (n >= 3 each) throughput down or an op's
//! p99 up significantly by a one-sided Mann-Whitney U test on the repeats (p <= 0.05),
//! by more than either side's spread, *and* by more than the limit (`--fail-if-slower`,
//! else `DEFAULT_MIN_EFFECT_PCT`); with
//! single runs the noise is unmeasured and only the limit judges (said on the line).

use std::fmt::Write as _;

use counterlab_core::{Backend, Isolation, Verdict};
use serde::Serialize;

use crate::cost_compare::{CostDelta, DEFAULT_COST_LIMIT_PCT, cost_deltas, cost_regressions, moved};
use crate::stats::{mann_whitney_greater_p, median, spread};
use crate::{Report, StrategyReport};

/// Ops with fewer samples than this in either run are shown but not judged: their p99 is noise.
pub const MIN_OPS_FOR_P99: u64 = 100;

/// Repeats each side needs before its noise counts as measured.
pub const MIN_REPEATS_FOR_NOISE: usize = 3;

/// One-sided significance level of the Mann-Whitney U test. With 3 repeats against 3 the
/// smallest exact p is 1/20 = 0.05 (every repeat of B slower than every one of A), so
/// 0.05 is the level at which 3 vs 3 can find anything; more repeats give smaller p's.
pub const ALPHA: f64 = 0.05;

/// With measured noise and no `--fail-if-slower`, the least change (percent) that counts:
/// a significant but small change is not flagged (and a same-build pair is fully
/// separated by chance one time in 20 at 3 vs 3, so significance alone would flake).
pub const DEFAULT_MIN_EFFECT_PCT: f64 = 20.0;

/// The test named in every conclusion.
pub const METHOD: &str = "one-sided Mann-Whitney U on the repeats (exact), p <= 0.05, medians apart by more than \
     either side's min-max spread, and the change beyond the limit";

#[derive(Clone, Debug, Serialize)]
pub struct OpDelta {
    pub op: String,
    pub count: (u64, u64),
    pub p50: (u64, u64),
    /// Medians over the repeats when a report has them.
    pub p99: (u64, u64),
    pub p999: (u64, u64),
    /// p99 change in percent (positive: slower).
    pub p99_change_pct: f64,
    /// One-sided p that B's p99s are above A's (None: noise not measured).
    pub p99_p_value: Option<f64>,
    /// The medians differ by more than either side's min–max spread (None: not measured).
    pub p99_beyond_spread: Option<bool>,
}

/// The smallest and the largest of a side's repeats.
pub type Range = (f64, f64);

#[derive(Clone, Debug, Serialize)]
pub struct RowDelta {
    pub strategy: String,
    pub backend: String,
    pub isolation: String,
    /// Medians over the repeats when a report has them.
    pub throughput: (f64, f64),
    /// min–max of the repeats' throughput (None: a single run).
    pub throughput_spread: (Option<Range>, Option<Range>),
    /// Repeats on each side (1 for a report without them).
    pub repeats: (usize, usize),
    /// Both sides have at least `MIN_REPEATS_FOR_NOISE` repeats.
    pub noise_measured: bool,
    /// Throughput change in percent (negative: slower).
    pub throughput_change_pct: f64,
    /// One-sided p that A's throughputs are above B's (None: noise not measured).
    pub throughput_p_value: Option<f64>,
    /// The medians differ by more than either side's min–max spread (None: not measured).
    pub throughput_beyond_spread: Option<bool>,
    pub verdict: (String, String),
    pub mismatched: (u64, u64),
    pub ops: Vec<OpDelta>,
    /// Server-side cost per op, A and B (`cost_compare`; empty unless both were measured).
    pub cost: Vec<CostDelta>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    /// `no regression`, `N regression(s)` or `nothing to compare`: the one conclusion,
    /// the same in every output and in the exit code (0, 1, 4).
    pub conclusion: String,
    /// How slowdowns were judged.
    pub method: String,
    /// The limit in percent: `--fail-if-slower`, or (noise measured) the default least effect.
    pub limit_pct: Option<f64>,
    /// The cost limit in percent: `--fail-if-costlier`, else `DEFAULT_COST_LIMIT_PCT`.
    pub cost_limit_pct: f64,
    pub rows: Vec<RowDelta>,
    /// Rows present in one report only, as `strategy on backend at isolation`.
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    /// Caveats (load models that differ, noise not measured), in words.
    pub notes: Vec<String>,
    /// Every regression found, in words.
    pub regressions: Vec<String>,
}

impl Comparison {
    /// The two reports share no row: there is nothing to judge (exit 4, never "no regression").
    pub fn nothing_in_common(&self) -> bool {
        self.rows.is_empty()
    }
}

fn pct(a: f64, b: f64) -> f64 {
    if a > 0.0 { (b - a) / a * 100.0 } else { 0.0 }
}

type Key = (String, Backend, Isolation);

fn key(s: &StrategyReport) -> Key {
    (s.strategy.clone(), s.backend, s.isolation)
}

fn label(k: &Key) -> String {
    format!("{} on {} at {}", k.0, k.1, k.2)
}

/// A side's per-repeat values (the row's own figure for a single run).
fn samples(s: &StrategyReport, f: impl Fn(&crate::RepeatRun) -> Option<f64>, single: f64) -> Vec<f64> {
    if s.repeats.is_empty() { vec![single] } else { s.repeats.iter().filter_map(f).collect() }
}

/// How slowdowns are judged: the limit, and whether this pair of rows measured its noise.
#[derive(Clone, Copy)]
struct Rule {
    limit: Option<f64>,
    measured: bool,
}

impl Rule {
    fn limit(self) -> Option<f64> {
        if self.measured { Some(self.limit.unwrap_or(DEFAULT_MIN_EFFECT_PCT)) } else { self.limit }
    }

    /// `worse_pct` (positive: slower) with `p` (that the worse side really is worse) and
    /// whether the medians are further apart than either side's spread: the reason it is
    /// a regression, or None.
    fn judge(self, worse_pct: f64, p: Option<f64>, clear: Option<bool>) -> Option<String> {
        let limit = self.limit()?;
        if worse_pct <= limit {
            return None;
        }
        match (self.measured, p, clear) {
            (true, Some(p), Some(true)) if p <= ALPHA => Some(format!(
                "limit {limit}%; Mann-Whitney U p = {p:.3} <= {ALPHA}; medians apart by more than either side's spread"
            )),
            (true, _, _) => None,
            (false, _, _) => Some(format!("limit {limit}%; unmeasured noise: single runs")),
        }
    }
}

/// The limits `compare` judges by, in percent: `--fail-if-slower` (throughput and p99)
/// and `--fail-if-costlier` (server-side cost per op; None: `DEFAULT_COST_LIMIT_PCT`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    pub slower_pct: Option<f64>,
    pub costlier_pct: Option<f64>,
}

/// Compares run `a` (the baseline) with run `b` by `limits`: the slowdown beyond which
/// throughput or an op's p99 counts as a regression, the growth beyond which a cost does.
pub fn compare(a: &Report, a_name: &str, b: &Report, b_name: &str, limits: Limits) -> Comparison {
    let (fail_if_slower_pct, cost_limit_pct) =
        (limits.slower_pct, limits.costlier_pct.unwrap_or(DEFAULT_COST_LIMIT_PCT));
    let mut rows = Vec::new();
    let mut regressions = Vec::new();
    let mut only_in_a = Vec::new();
    let mut notes = Vec::new();
    let mut unmeasured = Vec::new();
    for sa in &a.strategies {
        let k = key(sa);
        let Some(sb) = b.strategies.iter().find(|s| key(s) == k) else {
            only_in_a.push(label(&k));
            continue;
        };
        let n = (sa.repeats.len().max(1), sb.repeats.len().max(1));
        let rule =
            Rule { limit: fail_if_slower_pct, measured: n.0 >= MIN_REPEATS_FOR_NOISE && n.1 >= MIN_REPEATS_FOR_NOISE };
        if !rule.measured {
            unmeasured.push(label(&k));
        }
        let ops = op_deltas(&k, sa, sb, rule, &mut regressions);
        if sa.load_model != sb.load_model {
            notes.push(format!(
                "{}: load models differ (A: {}; B: {}): an open loop's throughput is set by its schedule",
                label(&k),
                sa.load_model,
                sb.load_model
            ));
        }
        let mut row = row_delta(&k, sa, sb, rule, ops);
        row_regressions(&row, sa, sb, rule, &mut regressions);
        row.cost = cost_deltas(sa, sb);
        cost_regressions(&label(&k), &row.cost, cost_limit_pct, &mut regressions);
        rows.push(row);
    }
    if !unmeasured.is_empty() && !rows.is_empty() {
        notes.push(format!(
            "noise not measured for {} (fewer than {MIN_REPEATS_FOR_NOISE} repeats on a side; run with --repeat 3 or more): \
             only --fail-if-slower judges their speed, and a rerun on a shared machine can move it by tens of percent",
            unmeasured.join(", ")
        ));
    }
    if b.interrupted && !only_in_a.is_empty() {
        regressions.push(format!("B was interrupted: {} did not run", only_in_a.join(", ")));
    }
    let only_in_b = only_in(b, a);
    let conclusion = match (rows.is_empty(), regressions.len()) {
        (true, _) => "nothing to compare".to_string(),
        (false, 0) => "no regression".to_string(),
        (false, n) => format!("{n} regression(s)"),
    };
    let any_measured = rows.iter().any(|r: &RowDelta| r.noise_measured);
    let limit_pct = if any_measured { fail_if_slower_pct.or(Some(DEFAULT_MIN_EFFECT_PCT)) } else { fail_if_slower_pct };
    let method = if any_measured { METHOD.to_string() } else { "the limit alone (noise not measured)".to_string() };
    Comparison {
        a: a_name.into(),
        b: b_name.into(),
        conclusion,
        method,
        limit_pct,
        cost_limit_pct,
        rows,
        only_in_a,
        only_in_b,
        notes,
        regressions,
    }
}

/// The rows of `x` that `y` does not have, as `strategy on backend at isolation`.
fn only_in(x: &Report, y: &Report) -> Vec<String> {
    let keys = x.strategies.iter().map(key);
    keys.filter(|k| !y.strategies.iter().any(|s| key(s) == *k)).map(|k| label(&k)).collect()
}

/// The effect is larger than the noise measured: the medians of `a` and `b` are further
/// apart than the widest min–max spread of either side.
fn beyond_spread(a: &[f64], b: &[f64]) -> bool {
    let width = |xs: &[f64]| spread(xs).map_or(f64::INFINITY, |(lo, hi)| hi - lo);
    match (median(a), median(b)) {
        (Some(ma), Some(mb)) => (mb - ma).abs() > width(a).max(width(b)),
        _ => false,
    }
}

/// The row's figures side by side (medians over repeats) and the throughput test's p.
fn row_delta(k: &Key, sa: &StrategyReport, sb: &StrategyReport, rule: Rule, ops: Vec<OpDelta>) -> RowDelta {
    let ta = samples(sa, |r| Some(r.throughput_ops_per_s), sa.throughput_ops_per_s);
    let tb = samples(sb, |r| Some(r.throughput_ops_per_s), sb.throughput_ops_per_s);
    let sp = |s: &StrategyReport, xs: &[f64]| if s.repeats.is_empty() { None } else { spread(xs) };
    RowDelta {
        strategy: k.0.clone(),
        backend: k.1.name(),
        isolation: k.2.name().into(),
        throughput: (sa.throughput_ops_per_s, sb.throughput_ops_per_s),
        throughput_spread: (sp(sa, &ta), sp(sb, &tb)),
        repeats: (ta.len(), tb.len()),
        noise_measured: rule.measured,
        throughput_change_pct: pct(sa.throughput_ops_per_s, sb.throughput_ops_per_s),
        throughput_p_value: if rule.measured { mann_whitney_greater_p(&ta, &tb) } else { None },
        throughput_beyond_spread: rule.measured.then(|| beyond_spread(&ta, &tb)),
        verdict: (sa.check.label(), sb.check.label()),
        mismatched: (sa.check.users_mismatched, sb.check.users_mismatched),
        ops,
        cost: Vec::new(),
    }
}

/// The latency changes of each op either run did, for the row `k`; an op whose p99 grew
/// past the rule (with enough samples on both sides to trust it) adds a regression.
fn op_deltas(
    k: &Key,
    sa: &StrategyReport,
    sb: &StrategyReport,
    rule: Rule,
    regressions: &mut Vec<String>,
) -> Vec<OpDelta> {
    let mut ops = Vec::new();
    for (name, oa) in &sa.ops {
        let Some(ob) = sb.ops.get(name) else { continue };
        if oa.count == 0 && ob.count == 0 {
            continue;
        }
        let (la, lb) = (&oa.latency_us, &ob.latency_us);
        let p99s = |s: &StrategyReport, single: u64| {
            samples(
                s,
                |r| r.p99_us.get(name).filter(|_| r.op_counts.get(name).is_some_and(|n| *n > 0)).map(|v| *v as f64),
                single as f64,
            )
        };
        let (pa, pb) = (p99s(sa, la.p99), p99s(sb, lb.p99));
        let d = OpDelta {
            op: name.clone(),
            count: (oa.count, ob.count),
            p50: (la.p50, lb.p50),
            p99: (la.p99, lb.p99),
            p999: (la.p999, lb.p999),
            p99_change_pct: pct(median(&pa).unwrap_or(0.0), median(&pb).unwrap_or(0.0)),
            p99_p_value: if rule.measured { mann_whitney_greater_p(&pb, &pa) } else { None },
            p99_beyond_spread: rule.measured.then(|| beyond_spread(&pa, &pb)),
        };
        if oa.count >= MIN_OPS_FOR_P99
            && ob.count >= MIN_OPS_FOR_P99
            && let Some(why) = rule.judge(d.p99_change_pct, d.p99_p_value, d.p99_beyond_spread)
        {
            regressions.push(format!(
                "{} {}: p99 {} -> {} us (+{:.1}%; {why})",
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

/// The row-wide regressions, in this order: open-loop drops up past the limit (in
/// percentage points; noise not measured for them), throughput down past the rule, a
/// verdict that stopped matching its guarantee or lost its evidence (whatever the limit).
fn row_regressions(r: &RowDelta, sa: &StrategyReport, sb: &StrategyReport, rule: Rule, regressions: &mut Vec<String>) {
    let k = key(sa);
    let drop_rate = |s: &StrategyReport| {
        s.open_loop.as_ref().map_or(0.0, |o| if o.scheduled > 0 { o.dropped as f64 / o.scheduled as f64 } else { 0.0 })
    };
    if let Some(limit) = rule.limit
        && (drop_rate(sb) - drop_rate(sa)) * 100.0 > limit
    {
        regressions.push(format!(
            "{}: open-loop drops {:.1}% -> {:.1}% of scheduled ops (limit +{limit} points)",
            label(&k),
            drop_rate(sa) * 100.0,
            drop_rate(sb) * 100.0
        ));
    }
    if let Some(why) = rule.judge(-r.throughput_change_pct, r.throughput_p_value, r.throughput_beyond_spread) {
        regressions.push(format!(
            "{}: throughput {} -> {} ({:.1}%; {why})",
            label(&k),
            crate::throughput_with_spread(sa),
            crate::throughput_with_spread(sb),
            r.throughput_change_pct
        ));
    }
    let no_evidence = |s: &StrategyReport| matches!(s.check.verdict, Verdict::NoEvidence | Verdict::Incomplete(_));
    if sa.check.matches_guarantee && !sb.check.matches_guarantee {
        regressions.push(format!(
            "{}: verdict {} -> {} ({} of {} users mismatched; guarantee {})",
            label(&k),
            sa.check.label(),
            sb.check.label(),
            sb.check.users_mismatched,
            sb.check.users_checked,
            sb.guarantee
        ));
    } else if !no_evidence(sa) && no_evidence(sb) {
        regressions.push(format!(
            "{}: verdict {} -> {} (B could not be judged)",
            label(&k),
            sa.check.label(),
            sb.check.label()
        ));
    }
}

/// The comparison as terminal text.
pub fn render_comparison(c: &Comparison) -> String {
    let mut out = String::new();
    let w = &mut out;
    writeln!(w, "A: {}\nB: {}\n", c.a, c.b).unwrap();
    if c.nothing_in_common() {
        nothing_to_compare(w, c);
        return out;
    }
    rows_table(w, c);
    writeln!(w).unwrap();
    ops_table(w, c);
    cost_lines(w, c, "\ncost per op that moved 10% or more (net of idle where measured), A -> B:", "  ");
    for (which, list) in [("A", &c.only_in_a), ("B", &c.only_in_b)] {
        if !list.is_empty() {
            writeln!(w, "\nonly in {which}: {}", list.join(", ")).unwrap();
        }
    }
    for n in &c.notes {
        writeln!(w, "\nnote: {n}").unwrap();
    }
    writeln!(w, "\njudged by: {}{}; cost: {}", c.method, limit_words(c), cost_limit_words(c)).unwrap();
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

/// Per row, its cost figures that moved (`cost_compare::moved`), under `title`.
fn cost_lines(w: &mut String, c: &Comparison, title: &str, bullet: &str) {
    let moved: Vec<(String, Vec<String>)> = c
        .rows
        .iter()
        .map(|r| (format!("{} on {} at {}", r.strategy, r.backend, r.isolation), moved(&r.cost)))
        .filter(|(_, m)| !m.is_empty())
        .collect();
    if moved.is_empty() {
        return;
    }
    writeln!(w, "{title}").unwrap();
    for (row, m) in moved {
        writeln!(w, "{bullet}{row}: {}", m.join("; ")).unwrap();
    }
}

fn cost_limit_words(c: &Comparison) -> String {
    format!("a figure per op up by more than {}% (and its floor), one reading a side", c.cost_limit_pct)
}

fn limit_words(c: &Comparison) -> String {
    match c.limit_pct {
        Some(l) => format!(" (limit {l}%)"),
        None => " (no limit given: speed not judged)".to_string(),
    }
}

/// What each report has, when they share no row: never "no regression".
fn nothing_to_compare(w: &mut String, c: &Comparison) {
    let list = |l: &[String]| if l.is_empty() { "no rows".to_string() } else { l.join(", ") };
    writeln!(w, "nothing to compare: the two reports share no strategy x backend x isolation row").unwrap();
    writeln!(w, "  A has: {}\n  B has: {}", list(&c.only_in_a), list(&c.only_in_b)).unwrap();
}

/// The comparison as Markdown: the same rows, notes and conclusion as the terminal.
pub fn render_comparison_markdown(c: &Comparison) -> String {
    let mut out = String::new();
    let w = &mut out;
    writeln!(w, "# compare\n\n- A: `{}`\n- B: `{}`\n\n**{}**\n", c.a, c.b, c.conclusion).unwrap();
    if c.nothing_in_common() {
        let list = |l: &[String]| if l.is_empty() { "no rows".to_string() } else { l.join(", ") };
        writeln!(w, "The two reports share no strategy x backend x isolation row.\n").unwrap();
        writeln!(w, "- A has: {}\n- B has: {}", list(&c.only_in_a), list(&c.only_in_b)).unwrap();
        return out;
    }
    writeln!(w, "Judged by: {}{}; cost: {}.\n", c.method, limit_words(c), cost_limit_words(c)).unwrap();
    writeln!(w, "| row | A ops/s | B ops/s | change | p (A > B) | n | verdict A -> B |\n|---|---|---|---|---|---|---|")
        .unwrap();
    for r in &c.rows {
        writeln!(
            w,
            "| {} on {} at {} | {} | {} | {:.1}% | {} | {} vs {} | {} -> {} |",
            r.strategy,
            r.backend,
            r.isolation,
            with_spread(r.throughput.0, r.throughput_spread.0),
            with_spread(r.throughput.1, r.throughput_spread.1),
            r.throughput_change_pct,
            p_words(r.throughput_p_value),
            r.repeats.0,
            r.repeats.1,
            r.verdict.0,
            r.verdict.1
        )
        .unwrap();
    }
    writeln!(w, "\n| row | op | p99 A -> B (us) | change | p (B > A) |\n|---|---|---|---|---|").unwrap();
    for r in &c.rows {
        for o in &r.ops {
            let row = format!("{} on {} at {}", r.strategy, r.backend, r.isolation);
            let (a, b, chg) = (o.p99.0, o.p99.1, o.p99_change_pct);
            writeln!(w, "| {row} | {} | {a} -> {b} | {chg:.1}% | {} |", o.op, p_words(o.p99_p_value)).unwrap();
        }
    }
    for (which, list) in [("A", &c.only_in_a), ("B", &c.only_in_b)] {
        if !list.is_empty() {
            writeln!(w, "\nOnly in {which}: {}", list.join(", ")).unwrap();
        }
    }
    cost_lines(w, c, "\nCost per op that moved 10% or more (net of idle where measured), A -> B:\n", "- ");
    for n in &c.notes {
        writeln!(w, "\nNote: {n}").unwrap();
    }
    if !c.regressions.is_empty() {
        writeln!(w, "\n## Regressions\n").unwrap();
        for r in &c.regressions {
            writeln!(w, "- {r}").unwrap();
        }
    }
    out
}

fn with_spread(v: f64, s: Option<Range>) -> String {
    match s {
        Some((lo, hi)) => format!("{v:.0} ({lo:.0}–{hi:.0})"),
        None => format!("{v:.0}"),
    }
}

fn p_words(p: Option<f64>) -> String {
    p.map_or("unmeasured".to_string(), |p| format!("{p:.3}"))
}

/// One line per matched row: throughput A and B, its change, the verdicts and mismatches.
fn rows_table(w: &mut String, c: &Comparison) {
    writeln!(
        w,
        "{:<29} {:<14} {:<15} {:>17} {:>17} {:>8} {:>10}  {:<30} {:>11}",
        "strategy", "backend", "isolation", "A ops/s", "B ops/s", "change", "p(A>B)", "verdict A -> B", "mismatched"
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
            "{:<29} {:<14} {:<15} {:>17} {:>17} {:>7.1}% {:>10}  {:<30} {:>5} -> {:<5}",
            r.strategy,
            r.backend,
            r.isolation,
            with_spread(r.throughput.0, r.throughput_spread.0),
            with_spread(r.throughput.1, r.throughput_spread.1),
            r.throughput_change_pct,
            p_words(r.throughput_p_value),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RepeatRun, StrategyReport};
    use counterlab_core::Dialect;

    fn row(tputs: &[f64]) -> StrategyReport {
        let mut s = StrategyReport {
            strategy: "s".into(),
            backend: Backend::sql(Dialect::Sqlite),
            isolation: Isolation::Serializable,
            ..Default::default()
        };
        s.check.verdict = Verdict::Pass;
        s.check.matches_guarantee = true;
        s.repeats = tputs
            .iter()
            .enumerate()
            .map(|(i, t)| RepeatRun { repeat: i as u32 + 1, throughput_ops_per_s: *t, ..Default::default() })
            .collect();
        if tputs.len() == 1 {
            s.repeats.clear();
        }
        s.throughput_ops_per_s = median(tputs).unwrap();
        s
    }

    fn report(rows: Vec<StrategyReport>) -> Report {
        Report {
            report_schema_version: 2,
            counterlab_version: String::new(),
            git_commit: String::new(),
            scenario: String::new(),
            scenario_path: String::new(),
            seed: 1,
            run_id: String::new(),
            started_at_utc: String::new(),
            plan: serde_json::Value::Null,
            servers: Vec::new(),
            strategies: rows,
            skipped: Vec::new(),
            all_guarantees_held: true,
            thresholds_breached: 0,
            expectations_unmet: 0,
            expectations_not_judged: Vec::new(),
            interrupted: false,
            replay_command: String::new(),
            trusted_strategy_files: false,
            side_files: Vec::new(),
        }
    }

    fn cmp(a: &[f64], b: &[f64], limit: Option<f64>) -> Comparison {
        compare(
            &report(vec![row(a)]),
            "a",
            &report(vec![row(b)]),
            "b",
            Limits { slower_pct: limit, costlier_pct: None },
        )
    }

    #[test]
    fn a_slowdown_counts_only_beyond_the_measured_noise_and_the_limit() {
        // A big drop, but the repeats overlap: p = 0.35 > 0.05, not a regression.
        let c = cmp(&[1000.0, 600.0, 1100.0], &[700.0, 900.0, 650.0], Some(10.0));
        assert_eq!((c.conclusion.as_str(), c.rows[0].throughput_p_value), ("no regression", Some(0.35)));
        // Fully separated but small (-5%, under the default least effect of 20%).
        assert_eq!(cmp(&[1000.0, 1010.0, 1020.0], &[950.0, 960.0, 970.0], None).conclusion, "no regression");
        // Fully separated and past the limit, but the gap is within A's own spread.
        assert_eq!(cmp(&[1000.0, 2000.0, 3000.0], &[500.0, 600.0, 900.0], Some(10.0)).conclusion, "no regression");
        // Fully separated and large: found, with the test named.
        let c = cmp(&[1000.0, 1010.0, 1020.0], &[100.0, 110.0, 120.0], None);
        assert_eq!(c.conclusion, "1 regression(s)");
        assert!(c.regressions[0].contains("Mann-Whitney U p = 0.050 <= 0.05"), "{:?}", c.regressions);
        // Single runs: the limit alone, labelled.
        let c = cmp(&[1000.0], &[850.0], Some(10.0));
        assert!(c.regressions[0].contains("unmeasured noise"), "{:?}", c.regressions);
        assert!(c.notes.iter().any(|n| n.contains("noise not measured")), "{:?}", c.notes);
        assert_eq!(cmp(&[1000.0], &[850.0], None).conclusion, "no regression");
    }

    #[test]
    fn reports_with_no_row_in_common_are_nothing_to_compare() {
        let mut other = row(&[1.0]);
        other.strategy = "t".into();
        let c = compare(&report(vec![row(&[1.0])]), "a", &report(vec![other]), "b", Limits::default());
        assert!(c.nothing_in_common());
        assert_eq!(c.conclusion, "nothing to compare");
        let text = render_comparison(&c);
        assert!(text.contains("nothing to compare") && !text.contains("no regression"), "{text}");
        assert!(render_comparison_markdown(&c).contains("share no strategy"));
    }

    fn costed(upd: i64, wal: i64, idle_wal: Option<i64>) -> StrategyReport {
        use crate::cost::{Baseline, CostReport, CostSource, Counters};
        let counters = |kv: &[(&str, i64)]| kv.iter().map(|(k, v)| (k.to_string(), *v)).collect::<Counters>();
        let mut s = row(&[1000.0]);
        let baseline = idle_wal.map(|w| Baseline { seconds: 1.0, delta: counters(&[("lsn_bytes", w)]) });
        s.cost = Some(CostReport {
            ops: 1000,
            users: 10,
            interval_s: 2.0,
            sources: vec![
                CostSource { name: "pg_tables".into(), delta: counters(&[("n_tup_upd", upd)]), ..Default::default() },
                CostSource {
                    name: "pg_wal".into(),
                    scope: crate::Scope::Server,
                    delta: counters(&[("lsn_bytes", wal)]),
                    baseline,
                    ..Default::default()
                },
            ],
        });
        s
    }

    #[test]
    fn a_cost_that_grew_past_the_limit_is_a_regression_net_of_its_idle_share() {
        let cmp = |a: StrategyReport, b: StrategyReport, costlier_pct| {
            compare(&report(vec![a]), "a", &report(vec![b]), "b", Limits { slower_pct: None, costlier_pct })
        };
        // Updates per op 1.0 -> 2.0 (+100%, past the default 50%); WAL 300 -> 330 B/op (+10%).
        let c = cmp(costed(1000, 300_000, None), costed(2000, 330_000, None), None);
        assert_eq!(c.conclusion, "1 regression(s)", "{:?}", c.regressions);
        assert!(c.regressions[0].contains("cost updated/op 1.00 -> 2.00 (+100.0%"), "{:?}", c.regressions);
        assert_eq!(c.cost_limit_pct, DEFAULT_COST_LIMIT_PCT);
        let upd = c.rows[0].cost.iter().find(|d| d.key == "pg_tables.n_tup_upd").unwrap();
        assert_eq!((upd.net, upd.change_pct), ((1.0, 2.0), Some(100.0)));
        // A tighter limit catches the WAL too.
        assert_eq!(cmp(costed(1000, 300_000, None), costed(1000, 330_000, None), Some(5.0)).regressions.len(), 1);
        // WAL 300 -> 600 B/op, but B's idle interval accounts for it: net 200 -> 200.
        let c = cmp(costed(1000, 300_000, Some(50_000)), costed(1000, 600_000, Some(200_000)), None);
        assert_eq!(c.conclusion, "no regression", "{:?}", c.regressions);
        let text = render_comparison(&c);
        assert!(text.contains("cost: a figure per op up by more than 50%"), "{text}");
        // Moved in the gross figure only: the net did not, so nothing is listed.
        assert!(!text.contains("WAL B/op*"), "{text}");
        let c = cmp(costed(1000, 300_000, None), costed(2000, 300_000, None), None);
        assert!(render_comparison(&c).contains("updated/op 1.00 -> 2.00 (+100.0%)"));
        let md = render_comparison_markdown(&c);
        assert!(md.contains("- s on sqlite at serializable: updated/op 1.00 -> 2.00 (+100.0%)"), "{md}");
    }
}
