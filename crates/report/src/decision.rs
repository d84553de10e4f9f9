//! The decision view every output opens with: per backend x isolation, the strategies
//! ranked (the verdict in words first, then throughput relative to the picked design,
//! p99, retries/give-ups and the moving parts the design carries), the pick and what it
//! stands on, one plain sentence per group, and the rule that keeps it from flipping
//! between reruns: an order is settled only on 3 runs a side whose ranges are apart;
//! a throughput tie falls through to p99, then to fewer moving parts, else no pick.
//! A stalled load is named. Pure functions over `Report`.

pub mod choice;
pub mod cost_column;
pub mod evidence;
pub mod stall;
mod words;

use counterlab_core::{Dialect, Isolation, Verdict as V};

pub use choice::{Basis, Choice, choose};
pub use evidence::{TIE_BAND, throughput_samples, tied};
pub use words::{cost, outcome, verdict_words};

use crate::units::latency;
use crate::{Report, StrategyReport};

/// How a row stands, best first: the order of the ranking before throughput.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Standing {
    /// An exact or eventual strategy whose verdict is `pass`.
    Held,
    /// No guarantee, and no drift seen (not hit, kept by retries, or none can here).
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
    /// Throughput over the reference's (the pick; else the fastest row that kept its
    /// guarantee; the fastest row when none did). None when the reference did no work.
    pub relative: Option<f64>,
    /// Not told apart from the reference's throughput (and not the reference).
    pub tie: bool,
    /// The worst op's p99, formatted (`12 ms`, `850 µs`).
    pub p99: String,
    /// Extra moving parts, with the measured staleness where the design reads stale.
    pub cost: String,
}

/// One backend x isolation: its rows ranked (the pick first), the pick and its basis,
/// and the sentence that says what to pick.
#[derive(Clone, Debug)]
pub struct Group<'a> {
    /// The SQL backend (`postgres`, `mysql`, `sqlite`), without `+redis`/`+rabbitmq`.
    pub backend: Dialect,
    pub isolation: Isolation,
    pub rows: Vec<Ranked<'a>>,
    pub choice: Choice<'a>,
    pub sentence: String,
    /// The server-side cost figures that differ most between the rows (`cost_column`).
    pub cost_figures: Vec<crate::cost_figures::Figure>,
}

/// What the noise rule was, in one line (every output prints it under the view).
pub fn noise_note(r: &Report) -> String {
    let single = r.strategies.iter().all(|s| throughput_samples(s).len() <= 1);
    if single {
        format!(
            "One run per row: the noise is not measured, so a throughput less than {:.0}% above another is called \
             a tie, and no order is settled (--repeat 3 settles one when the runs' ranges are apart).",
            TIE_BAND * 100.0
        )
    } else {
        "Several runs per row (--repeat): an order is settled on 3 or more runs a side by a one-sided \
         Mann-Whitney U at p <= 0.05/(n-2) for n runs on the smaller side (at 3 against 3: ranges apart); \
         otherwise a tie, decided by p99, then by fewer moving parts."
            .into()
    }
}

/// The SQL backend a row ran on (`postgres+redis` is `postgres`).
pub fn sql_backend(s: &StrategyReport) -> Dialect {
    s.backend.sql
}

fn standing(s: &StrategyReport) -> Standing {
    // A design the explorer refuted did not keep its guarantee, whatever the load showed.
    if s.explored.as_ref().is_some_and(|e| e.breaks_guarantee()) {
        return Standing::Failed;
    }
    match s.check.verdict {
        V::Pass if s.check.matches_guarantee => Standing::Held,
        V::Pass | V::Fail(_) => Standing::Failed,
        V::NoDriftObserved => Standing::NoDriftSeen,
        V::DriftExpected => Standing::Drifted,
        V::NoEvidence | V::Incomplete(_) => Standing::NotJudged,
    }
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

/// One group as report.json's `decision.groups[]` holds it.
fn group_json(g: &Group<'_>) -> serde_json::Value {
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
                "stall": x.row.stall.as_ref().map(|s| s.words()),
                "cost": cost_column::row_json(&g.cost_figures, x),
            })
        })
        .collect();
    serde_json::json!({
        "backend": g.backend.name(),
        "isolation": g.isolation.name(),
        "pick": g.choice.pick.map(StrategyReport::display_name),
        "basis": g.choice.basis.name(),
        "settled": g.choice.settled,
        "outcome": outcome(&g.choice),
        "sentence": g.sentence,
        "cost_figures": cost_column::figures_json(&g.cost_figures),
        "rows": rows,
    })
}

/// The decision as data (report.json's and `run --json`'s `decision`): per backend x
/// level its pick, basis, whether settled, outcome, sentence and its rows in rank order,
/// as the terminal and HTML show them.
pub fn decision_json(r: &Report) -> serde_json::Value {
    let groups: Vec<serde_json::Value> = decide(r).iter().map(group_json).collect();
    serde_json::json!({ "groups": groups, "noise": noise_note(r) })
}

/// The groups of a report, in the order their first row ran, each ranked.
pub fn decide(r: &Report) -> Vec<Group<'_>> {
    decide_rows(&r.strategies)
}

/// The groups of these rows, in the order their first row ran, each ranked.
pub fn decide_rows(strategies: &[StrategyReport]) -> Vec<Group<'_>> {
    let mut keys: Vec<(Dialect, Isolation)> = Vec::new();
    for s in strategies {
        let k = (sql_backend(s), s.isolation);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|(backend, isolation)| {
            let rows: Vec<&StrategyReport> =
                strategies.iter().filter(|s| sql_backend(s) == backend && s.isolation == isolation).collect();
            let (rows, choice) = rank(&rows);
            let sentence = words::sentence(backend, isolation, &rows, &choice);
            let cost_figures = cost_column::figures_of(&rows);
            Group { backend, isolation, rows, choice, sentence, cost_figures }
        })
        .collect()
}

/// The rows of one group ranked: standing first, the pick heading the designs that kept
/// their guarantee, then throughput (ties keep run order).
fn rank<'a>(rows: &[&'a StrategyReport]) -> (Vec<Ranked<'a>>, Choice<'a>) {
    let mut order: Vec<&'a StrategyReport> = rows.to_vec();
    order.sort_by(|a, b| standing(a).cmp(&standing(b)).then(b.throughput_ops_per_s.total_cmp(&a.throughput_ops_per_s)));
    let held: Vec<&'a StrategyReport> = order.iter().copied().filter(|s| standing(s) == Standing::Held).collect();
    let choice = choose(&held);
    if let Some(at) = choice.pick.and_then(|p| order.iter().position(|s| std::ptr::eq(*s, p))) {
        let pick = order.remove(at);
        order.insert(0, pick);
    }
    let reference = choice.pick.or(held.first().copied()).or(order.first().copied());
    let ranked = order
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
    (ranked, choice)
}

/// ` stalled` for a row whose load stalled (beside its throughput in every table), else
/// nothing.
pub fn stalled_mark(s: &StrategyReport) -> &'static str {
    if s.stall.is_some() { " stalled" } else { "" }
}

/// `1.17×`, or `tie` with the ratio when not told apart; `stalled` after it when the
/// row's load stalled.
pub fn relative_text(r: &Ranked<'_>) -> String {
    let stalled = stalled_mark(r.row);
    match r.relative {
        None => format!("-{stalled}"),
        Some(x) if r.tie => format!("{x:.2}× (tie){stalled}"),
        Some(x) => format!("{x:.2}×{stalled}"),
    }
}

#[cfg(test)]
pub(crate) mod tests;

/// The rows (indices into `strategies`) a sequential run repeats: in every backend x level
/// whose order is not settled yet, the fastest design that kept its guarantee and those
/// whose order with it is not settled (`Choice::open`); a design already settled behind
/// does not run again. Empty when every order is settled (or nothing kept its guarantee).
pub fn unsettled(strategies: &[StrategyReport]) -> Vec<usize> {
    let mut out = Vec::new();
    for g in decide_rows(strategies) {
        for row in g.choice.open {
            if let Some(i) = strategies.iter().position(|s| std::ptr::eq(s, row)) {
                out.push(i);
            }
        }
    }
    out.sort_unstable();
    out
}
