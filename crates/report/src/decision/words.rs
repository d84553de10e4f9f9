//! The decision in words: each row's verdict as a verb phrase, the moving parts it
//! carries, and the group's sentence (what to pick and on what basis, whether the order
//! is settled, what the others did, and which loads stalled).

use counterlab_core::{Companion, Dialect, Figure, Guarantee, Isolation, Limit, Verdict as V};

use super::choice::{Basis, Choice};
use super::evidence::{SETTLE_RUNS, throughput_samples, tie_words};
use super::{Ranked, Standing};
use crate::StrategyReport;
use crate::units::latency;

/// `426/1000 counters`: how many users' counters ended wrong.
fn wrong(s: &StrategyReport) -> String {
    format!("{}/{} counters", s.check.users_mismatched, s.check.users_checked)
}

/// Whether the row ran where writers are serialised (SQLite alone: one writer at a
/// time), as the verdict line says.
fn lone_writer(s: &StrategyReport) -> bool {
    s.backend.sql == Dialect::Sqlite && s.backend.with != Some(Companion::Redis)
}

/// A design with no guarantee that showed no drift, in words that match what happened:
/// none can here (SQLite), the race was hit and retried, or it was not hit.
fn no_drift(s: &StrategyReport) -> String {
    if lone_writer(s) {
        "showed no drift (no guarantee; none can here: SQLite runs one writer at a time)".into()
    } else if s.retries > 0 {
        format!(
            "showed no drift (no guarantee): its race was hit and kept by retries ({} conflicts retried)",
            s.retries
        )
    } else {
        "showed no drift (no guarantee; the race was not hit)".into()
    }
}

/// The verdict in words, as a verb phrase that reads in a table and in the sentence,
/// with what the explorer found when the row was explored (`run --explore`).
pub fn verdict_words(s: &StrategyReport) -> String {
    format!("{}{}", load_words(s), explored_clause(s))
}

/// What exploring the row added: safe in every explored interleaving, or the op pairs
/// whose interleavings break it (a lucky load and a safe design read apart).
fn explored_clause(s: &StrategyReport) -> String {
    let Some(e) = &s.explored else { return String::new() };
    match e.outcome() {
        "SAFE" => " and is safe in every explored interleaving".into(),
        "UNSAFE" => {
            let pairs: Vec<String> =
                e.unsafe_pairs.iter().take(2).map(|p| format!("{}: {}", p.pair, p.anomalies.join(", "))).collect();
            let more = e.unsafe_pairs.len().saturating_sub(2);
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            format!(", but explored it is UNSAFE ({}{more})", pairs.join("; "))
        }
        "NOT EXPLORED" => "; no explored interleaving broke it, not every order was run".into(),
        _ => String::new(),
    }
}

/// The load's verdict in words.
fn load_words(s: &StrategyReport) -> String {
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
        V::NoDriftObserved => no_drift(s),
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
    let f = |k: Figure| s.figures.get(k.name()).copied().filter(|v| v.is_finite());
    if let Some(ms) = f(Figure::StaleReadMaxMs) {
        let allowed = f(Figure::ReadLagAllowedMs).map_or(String::new(), |a| format!(" of {a:.0} ms allowed"));
        parts.push(format!("stalest read {}{allowed}", latency((ms * 1000.0) as u64)));
    }
    if let Some(st) = &s.staleness {
        parts.push(format!("reads from {}: stale p99 {}", s.read_from, latency((st.p99_ms * 1000.0) as u64)));
    }
    if let Some(ms) = f(Figure::ApplyLagP99Ms) {
        parts.push(format!("apply lag p99 {}", latency((ms * 1000.0) as u64)));
    }
    if parts.is_empty() { "none".into() } else { parts.join(", ") }
}

/// The group's outcome in a few words (report.json's `outcome`; what the five-runs
/// measurement compares): `conditional-update (faster, settled)`, `not settled`...
pub fn outcome(choice: &Choice<'_>) -> String {
    let settled = if choice.settled { "settled" } else { "not settled" };
    let name = choice.pick.map(StrategyReport::display_name).unwrap_or_default();
    match choice.basis {
        Basis::Throughput => format!("{name} (faster, {settled})"),
        Basis::P99 => format!("{name} (lower p99, {settled})"),
        Basis::MovingParts => format!("{name} (fewer moving parts, {settled})"),
        Basis::OnlyOneHeld => format!("{name} (the only design that kept its guarantee)"),
        Basis::NoneHeld => "no design kept its guarantee".into(),
        Basis::NotSettled => "not settled".into(),
    }
}

/// What settles or does not settle the order, as the end of a clause.
fn settle_clause(settled: bool, runs: usize) -> String {
    if settled {
        format!("; settled over {runs} runs a side")
    } else if runs < SETTLE_RUNS {
        format!("; fewer than {SETTLE_RUNS} runs a side do not settle this order (--repeat {SETTLE_RUNS} does)")
    } else {
        "; not settled".into()
    }
}

/// The group's sentence: which design that kept its guarantee to pick and on what
/// basis (or that the order is not settled), what the others did, then any stall.
pub fn sentence(backend: Dialect, isolation: Isolation, rows: &[Ranked<'_>], choice: &Choice<'_>) -> String {
    let mut out = format!("On {backend} at {isolation}, ");
    let held: Vec<&Ranked<'_>> = rows.iter().filter(|r| r.standing == Standing::Held).collect();
    match held.as_slice() {
        [] => out.push_str("no design kept its guarantee."),
        [only] => {
            out.push_str(&format!("{} {}", only.row.display_name(), only.verdict));
            out.push_str(if rows.len() > 1 { ", the only design that did." } else { "." });
        }
        _ => out.push_str(&held_words(&held, choice)),
    }
    for r in rows.iter().filter(|r| r.standing != Standing::Held) {
        out.push_str(&format!(" {} {}.", r.row.display_name(), r.verdict));
    }
    for r in rows {
        if let Some(stall) = &r.row.stall {
            out.push_str(&format!(" {}'s load stalled: {}.", r.row.display_name(), stall.words()));
        }
    }
    out
}

/// A row's name, with the moving parts it carries when it carries any.
fn named(r: &Ranked<'_>) -> String {
    match r.cost.as_str() {
        "none" => r.row.display_name(),
        cost => format!("{} (carries: {cost})", r.row.display_name()),
    }
}

/// The fewest runs of any of `rows`.
fn runs(rows: &[&Ranked<'_>]) -> usize {
    rows.iter().map(|r| throughput_samples(r.row).len()).min().unwrap_or(0)
}

/// Two or more designs kept their guarantee: the pick and its basis, or why none.
fn held_words(held: &[&Ranked<'_>], choice: &Choice<'_>) -> String {
    if choice.basis == Basis::Throughput {
        return fastest(held, choice.settled);
    }
    let contenders: Vec<&Ranked<'_>> =
        held.iter().copied().filter(|r| choice.contenders.iter().any(|c| std::ptr::eq(*c, r.row))).collect();
    let names: Vec<String> = contenders.iter().map(|r| named(r)).collect();
    let both = if contenders.len() == 2 { "both" } else { "all" };
    let first = contenders[0].row;
    let kept = if contenders.iter().all(|r| r.verdict == contenders[0].verdict) {
        contenders[0].verdict.clone()
    } else {
        "kept their guarantee".into()
    };
    let tie = tie_words(&throughput_samples(first), &throughput_samples(contenders[1].row));
    let p99s: Vec<String> = contenders.iter().map(|r| r.p99.clone()).collect();
    let n = runs(&contenders);
    let head = format!("{} {both} {kept}", names.join(" and "));
    match (choice.basis, choice.pick) {
        (Basis::P99, Some(pick)) => format!(
            "{head} and tied on throughput ({tie}); {} is picked for its lower p99: {}{}.",
            pick.display_name(),
            p99s.join(" vs "),
            settle_clause(choice.settled, n)
        ),
        (Basis::MovingParts, Some(pick)) => {
            let parts: Vec<&str> = contenders.iter().map(|r| r.cost.as_str()).collect();
            format!(
                "{head} and tied on throughput ({tie}) and p99 ({}); {} is picked for fewer moving parts ({}){}.",
                p99s.join(" vs "),
                pick.display_name(),
                parts.join(" vs "),
                settle_clause(choice.settled, n)
            )
        }
        _ => {
            let why = if n < SETTLE_RUNS {
                format!("; fewer than {SETTLE_RUNS} runs a side cannot settle it (--repeat {SETTLE_RUNS} may)")
            } else {
                String::new()
            };
            format!(
                "{head}, and the order between them is not settled: throughput {tie}, p99 {} (not apart), \
                 the same number of moving parts{why}.",
                p99s.join(" vs ")
            )
        }
    }
}

/// The pick is the fastest: by how much over the runner-up, and whether that is settled.
fn fastest(held: &[&Ranked<'_>], settled: bool) -> String {
    let (best, rest) = (held[0], &held[1..]);
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
        "{} {kept} and was fastest of {of}: {ratio} {}, p99 {} vs {}{}.",
        named(best),
        next.row.display_name(),
        best.p99,
        next.p99,
        settle_clause(settled, runs(held))
    )
}
