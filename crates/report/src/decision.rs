//! The decision view every output opens with: per backend x isolation, the strategies
//! ranked (the verdict in words first, then throughput relative to the fastest strategy
//! that kept its guarantee, p99, retries/give-ups and the moving parts the design
//! carries), one plain sentence per group, and the tie rule: throughput differences
//! within the noise band are ties, not wins. Pure functions over `Report`.

use counterlab_core::{Dialect, Guarantee, Isolation, Limit, Verdict as V};

use crate::units::latency;
use crate::{Report, StrategyReport};

/// With one run per row the noise is not measured: a faster throughput less than this
/// fraction above a slower one (ratio below 1.15×) is called a tie. docs/report.md says
/// why 15% and what run-to-run spread was measured here.
pub const TIE_BAND: f64 = 0.15;

/// How a row stands, best first: the order of the ranking before throughput.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Standing {
    /// An exact or eventual strategy whose verdict is `pass`.
    Held,
    /// No guarantee, and no drift seen (the race was not hit).
    NoDriftSeen,
    /// No guarantee, and it drifted, as expected.
    Drifted,
    /// Not judged: too few operations, or the check could not complete.
    NotJudged,
    /// It broke the guarantee it declares.
    Failed,
}

/// One row of a decision group, as every renderer shows it.
#[derive(Clone, Debug)]
pub struct Ranked<'a> {
    pub row: &'a StrategyReport,
    pub standing: Standing,
    /// The verdict in words (`exact counts kept`, `lost 426/1000 counters`...).
    pub verdict: String,
    /// Throughput over the reference's (the fastest row that kept its guarantee; the
    /// fastest row when none did). None when the reference did no work.
    pub relative: Option<f64>,
    /// Within the noise band of the reference's throughput (and not the reference).
    pub tie: bool,
    /// The worst op's p99, formatted (`12 ms`, `850 µs`).
    pub p99: String,
    /// Extra moving parts, with the measured staleness where the design reads stale.
    pub cost: String,
}

/// One backend x isolation: its rows ranked and the sentence that says what to pick.
#[derive(Clone, Debug)]
pub struct Group<'a> {
    /// The SQL backend (`postgres`, `mysql`, `sqlite`), without `+redis`/`+rabbitmq`.
    pub backend: Dialect,
    pub isolation: Isolation,
    pub rows: Vec<Ranked<'a>>,
    pub sentence: String,
}

/// The throughput figures of one row: one per run (`--repeat N` gives N).
pub fn throughput_samples(row: &StrategyReport) -> Vec<f64> {
    if row.repeats.is_empty() {
        vec![row.throughput_ops_per_s]
    } else {
        row.repeats.iter().map(|r| r.throughput_ops_per_s).collect()
    }
}

/// Whether two rows' throughputs are indistinguishable: with one sample each, the faster
/// less than `TIE_BAND` above the slower; with several, overlapping ranges (min..max).
pub fn tied(a: &[f64], b: &[f64]) -> bool {
    let finite = |s: &[f64]| s.iter().copied().filter(|v| v.is_finite()).collect::<Vec<f64>>();
    let (a, b) = (finite(a), finite(b));
    if a.is_empty() || b.is_empty() {
        return false;
    }
    if a.len() == 1 && b.len() == 1 {
        let (hi, lo) = (a[0].max(b[0]), a[0].min(b[0]));
        return hi <= 0.0 || hi < lo * (1.0 + TIE_BAND);
    }
    let range = |s: &[f64]| s.iter().fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    let ((alo, ahi), (blo, bhi)) = (range(&a), range(&b));
    alo <= bhi && blo <= ahi
}

/// What the noise rule was, in one line (every output prints it under the view).
pub fn noise_note(r: &Report) -> String {
    let single = r.strategies.iter().all(|s| throughput_samples(s).len() <= 1);
    if single {
        format!(
            "One run per row: the noise is not measured, so a throughput less than {:.0}% above another is called a tie.",
            TIE_BAND * 100.0
        )
    } else {
        "Several runs per row (--repeat): throughputs whose min-max ranges overlap are called a tie \
         (ranges apart with 3 runs a side is also a one-sided Mann-Whitney U p = 0.05)."
            .into()
    }
}

/// The SQL backend a row ran on (`postgres+redis` is `postgres`).
pub fn sql_backend(s: &StrategyReport) -> Dialect {
    s.backend.sql
}

fn standing(s: &StrategyReport) -> Standing {
    match s.check.verdict {
        V::Pass if s.check.matches_guarantee => Standing::Held,
        V::Pass | V::Fail(_) => Standing::Failed,
        V::NoDriftObserved => Standing::NoDriftSeen,
        V::DriftExpected => Standing::Drifted,
        V::NoEvidence | V::Incomplete(_) => Standing::NotJudged,
    }
}

/// `426/1000 counters`: how many users' counters ended wrong.
fn wrong(s: &StrategyReport) -> String {
    format!("{}/{} counters", s.check.users_mismatched, s.check.users_checked)
}

/// The verdict in words, as a verb phrase that reads in a table and in the sentence.
pub fn verdict_words(s: &StrategyReport) -> String {
    let held = match s.guarantee {
        Guarantee::Eventual => "converged to exact counts",
        _ => "kept exact counts",
    };
    // A check not in full says so here too (never a silent pass), each limit in its words.
    let limits: Vec<String> = s.check.limits.iter().map(Limit::short).collect();
    let limited = if limits.is_empty() { String::new() } else { format!(" ({})", limits.join("; ")) };
    match &s.check.verdict {
        V::Pass if s.check.matches_guarantee => format!("{held}{limited}"),
        V::Pass => format!("broke its {} guarantee", s.guarantee),
        V::DriftExpected => format!("lost {} (no guarantee)", wrong(s)),
        V::NoDriftObserved => "showed no drift (no guarantee; the race was not hit)".into(),
        V::NoEvidence => "was not judged: too few operations".into(),
        V::Incomplete(why) => format!("could not be checked: {why}"),
        V::Fail(parts) => {
            let parts: Vec<&str> = parts.iter().map(|p| p.name()).collect();
            let counters = if s.check.users_mismatched > 0 { format!("; {} wrong", wrong(s)) } else { String::new() };
            format!("FAILED its {} guarantee ({}{counters})", s.guarantee, parts.join(", "))
        }
    }
}

/// The moving parts a row's design carries beyond the SQL database, with the measured
/// staleness of designs whose reads lag.
pub fn cost(s: &StrategyReport) -> String {
    let mut parts = s.moving_parts.clone();
    let f = |k: &str| s.figures.get(k).copied().filter(|v| v.is_finite());
    if let Some(ms) = f("stale_read_max_ms") {
        let allowed = f("read_lag_allowed_ms").map_or(String::new(), |a| format!(" of {a:.0} ms allowed"));
        parts.push(format!("stalest read {}{allowed}", latency((ms * 1000.0) as u64)));
    }
    if let Some(st) = &s.staleness {
        parts.push(format!("reads from {}: stale p99 {}", s.read_from, latency((st.p99_ms * 1000.0) as u64)));
    }
    if let Some(ms) = f("apply_lag_p99_ms") {
        parts.push(format!("apply lag p99 {}", latency((ms * 1000.0) as u64)));
    }
    if parts.is_empty() { "none".into() } else { parts.join(", ") }
}

impl Standing {
    /// The name report.json's `decision` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Standing::Held => "held",
            Standing::NoDriftSeen => "no-drift-seen",
            Standing::Drifted => "drifted",
            Standing::NotJudged => "not-judged",
            Standing::Failed => "failed",
        }
    }
}

/// The decision as data (report.json's and `run --json`'s `decision`): per backend x
/// level its sentence and its rows in rank order, as the terminal and HTML show them.
pub fn decision_json(r: &Report) -> serde_json::Value {
    let groups: Vec<serde_json::Value> = decide(r)
        .iter()
        .map(|g| {
            let rows: Vec<serde_json::Value> = g
                .rows
                .iter()
                .map(|x| {
                    serde_json::json!({
                        "strategy": x.row.display_name(),
                        "standing": x.standing.name(),
                        "verdict": x.row.check.label(),
                        "in_words": x.verdict,
                        "throughput_vs_best": x.relative,
                        "tie": x.tie,
                        "p99": x.p99,
                        "moving_parts": x.cost,
                    })
                })
                .collect();
            serde_json::json!({
                "backend": g.backend.name(), "isolation": g.isolation.name(), "sentence": g.sentence, "rows": rows,
            })
        })
        .collect();
    serde_json::json!({ "groups": groups, "noise": noise_note(r) })
}

/// The groups of a report, in the order their first row ran, each ranked.
pub fn decide(r: &Report) -> Vec<Group<'_>> {
    let mut keys: Vec<(Dialect, Isolation)> = Vec::new();
    for s in &r.strategies {
        let k = (sql_backend(s), s.isolation);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|(backend, isolation)| {
            let rows: Vec<&StrategyReport> =
                r.strategies.iter().filter(|s| sql_backend(s) == backend && s.isolation == isolation).collect();
            let rows = rank(&rows);
            let sentence = sentence(backend, isolation, &rows);
            Group { backend, isolation, rows, sentence }
        })
        .collect()
}

/// The rows of one group ranked: standing first, then throughput (ties keep run order).
fn rank<'a>(rows: &[&'a StrategyReport]) -> Vec<Ranked<'a>> {
    let fastest = |pred: &dyn Fn(&StrategyReport) -> bool| {
        rows.iter()
            .copied()
            .filter(|s| pred(s))
            .max_by(|a, b| a.throughput_ops_per_s.total_cmp(&b.throughput_ops_per_s))
    };
    let reference = fastest(&|s| standing(s) == Standing::Held).or_else(|| fastest(&|_| true));
    let mut out: Vec<Ranked<'a>> = rows
        .iter()
        .map(|s| {
            let (relative, tie) = match reference {
                Some(best) if best.throughput_ops_per_s > 0.0 && best.throughput_ops_per_s.is_finite() => {
                    let tie = !std::ptr::eq(*s, best) && tied(&throughput_samples(s), &throughput_samples(best));
                    (Some(s.throughput_ops_per_s / best.throughput_ops_per_s), tie)
                }
                _ => (None, false),
            };
            Ranked {
                row: s,
                standing: standing(s),
                verdict: verdict_words(s),
                relative,
                tie,
                p99: latency(s.p99_all()),
                cost: cost(s),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        a.standing.cmp(&b.standing).then(b.row.throughput_ops_per_s.total_cmp(&a.row.throughput_ops_per_s))
    });
    out
}

/// `1.17×`, or `tie` with the ratio when within the noise.
pub fn relative_text(r: &Ranked<'_>) -> String {
    match r.relative {
        None => "-".into(),
        Some(x) if r.tie => format!("{x:.2}× (tie)"),
        Some(x) => format!("{x:.2}×"),
    }
}

/// The group's sentence: which design that kept its guarantee to pick and by how much
/// (or the tie), then what the others did.
fn sentence(backend: Dialect, isolation: Isolation, rows: &[Ranked<'_>]) -> String {
    let mut out = format!("On {backend} at {isolation}, ");
    let held: Vec<&Ranked<'_>> = rows.iter().filter(|r| r.standing == Standing::Held).collect();
    match held.as_slice() {
        [] => out.push_str("no design kept its guarantee."),
        [only] => {
            out.push_str(&format!("{} {}", only.row.display_name(), only.verdict));
            out.push_str(if rows.len() > 1 { ", the only design that did." } else { "." });
        }
        [best, rest @ ..] => out.push_str(&winner(best, rest)),
    }
    for r in rows.iter().filter(|r| r.standing != Standing::Held) {
        out.push_str(&format!(" {} {}.", r.row.display_name(), r.verdict));
    }
    out
}

/// The fastest design that kept its guarantee against the runner-up, or the designs
/// tied with it.
fn winner(best: &Ranked<'_>, rest: &[&Ranked<'_>]) -> String {
    let named = |r: &Ranked<'_>| match r.cost.as_str() {
        "none" => r.row.display_name(),
        cost => format!("{} (carries: {cost})", r.row.display_name()),
    };
    let tied: Vec<&&Ranked<'_>> = rest.iter().filter(|r| r.tie).collect();
    if !tied.is_empty() {
        let same = tied.iter().all(|r| r.verdict == best.verdict);
        let names: Vec<String> = tied.iter().map(|r| named(r)).collect();
        let p99: Vec<String> = tied.iter().map(|r| r.p99.clone()).collect();
        let both = if tied.len() == 1 { "both" } else { "all" };
        let kept = if same { best.verdict.clone() } else { "kept their guarantee".into() };
        return format!(
            "{} and {} {both} {kept} and tied on throughput (within the noise band): p99 {} vs {}.",
            named(best),
            names.join(", "),
            best.p99,
            p99.join(", ")
        );
    }
    let same = rest.iter().all(|r| r.verdict == best.verdict);
    let kept = if same { best.verdict.clone() } else { "kept its guarantee".into() };
    let next = rest[0];
    let ratio = next.relative.filter(|x| *x > 0.0).map_or("-".to_string(), |x| format!("{:.2}×", 1.0 / x));
    let of = if same && best.row.guarantee == Guarantee::Exact {
        "the exact designs"
    } else {
        "the designs that kept theirs"
    };
    format!(
        "{} {kept} and was fastest of {of}: {ratio} {}, p99 {} vs {}.",
        named(best),
        next.row.display_name(),
        best.p99,
        next.p99
    )
}

#[cfg(test)]
pub(crate) mod tests;
