//! Which of the designs that kept their guarantee to pick, and on what: throughput when
//! it tells them apart, else p99, else fewer moving parts, else none (the order is not
//! settled). Settled means 3 runs a side told them apart (`evidence`).

use std::iter::once;

use super::evidence::{Sep, enough_runs, faster, lower_p99, p99_samples, throughput_samples};
use crate::StrategyReport;

/// What the pick stands on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// Faster than every other design that kept its guarantee.
    Throughput,
    /// Tied on throughput, and a lower p99 than every design it tied with.
    P99,
    /// Tied on throughput and p99, and fewer moving parts than the others.
    MovingParts,
    /// The only design that kept its guarantee.
    OnlyOneHeld,
    /// No design kept its guarantee: nothing to pick.
    NoneHeld,
    /// Nothing told the designs apart: no pick.
    NotSettled,
}

impl Basis {
    /// The name report.json's `decision.groups[].basis` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Basis::Throughput => "throughput",
            Basis::P99 => "p99",
            Basis::MovingParts => "moving-parts",
            Basis::OnlyOneHeld => "only-one-held",
            Basis::NoneHeld => "none-held",
            Basis::NotSettled => "not-settled",
        }
    }
}

/// The pick among the designs that kept their guarantee.
#[derive(Clone, Debug)]
pub struct Choice<'a> {
    pub pick: Option<&'a StrategyReport>,
    pub basis: Basis,
    /// True when the order stands on at least 3 runs a side (or on the verdicts alone).
    pub settled: bool,
    /// The fastest held design and those tied with it on throughput, fastest first.
    pub contenders: Vec<&'a StrategyReport>,
    /// The designs whose order with the fastest is not settled (it among them): what a
    /// sequential run repeats. Empty when the order is settled.
    pub open: Vec<&'a StrategyReport>,
}

/// Picks among `held` (the designs that kept their guarantee, fastest first).
pub fn choose<'a>(held: &[&'a StrategyReport]) -> Choice<'a> {
    let Some((&top, rest)) = held.split_first() else {
        return Choice { pick: None, basis: Basis::NoneHeld, settled: true, contenders: Vec::new(), open: Vec::new() };
    };
    if rest.is_empty() {
        let only = Choice {
            pick: Some(top),
            basis: Basis::OnlyOneHeld,
            settled: true,
            contenders: vec![top],
            open: Vec::new(),
        };
        return only;
    }
    let t = throughput_samples(top);
    let seps: Vec<Sep> = rest.iter().map(|r| faster(&t, &throughput_samples(r))).collect();
    let tied = rest.iter().zip(&seps).filter(|(_, s)| **s == Sep::Tie).map(|(r, _)| *r);
    let contenders: Vec<&StrategyReport> = once(top).chain(tied).collect();
    // Those the fastest beat: settled unless a suggestion on fewer runs.
    let behind_settled = !seps.contains(&Sep::Suggested);
    let not_apart = rest.iter().zip(&seps).filter(|(_, s)| **s != Sep::Settled).map(|(r, _)| *r);
    let open: Vec<&StrategyReport> = once(top).chain(not_apart).collect();
    let choice = |pick, basis, settled: bool| Choice {
        pick,
        basis,
        settled,
        contenders: contenders.clone(),
        open: if settled { Vec::new() } else { open.clone() },
    };
    if contenders.len() == 1 {
        return choice(Some(top), Basis::Throughput, seps.iter().all(|s| *s == Sep::Settled));
    }
    if let Some((pick, settled)) = by_p99(&contenders) {
        return choice(Some(pick), Basis::P99, settled && behind_settled);
    }
    let samples: Vec<Vec<f64>> = contenders.iter().map(|r| throughput_samples(r)).collect();
    let runs: Vec<&[f64]> = samples.iter().map(Vec::as_slice).collect();
    match by_parts(&contenders) {
        Some(pick) => choice(Some(pick), Basis::MovingParts, behind_settled && enough_runs(&runs)),
        None => choice(None, Basis::NotSettled, false),
    }
}

/// The contender whose p99 is lower than every other's by the p99 rule, and whether
/// each of those orders is settled.
fn by_p99<'a>(contenders: &[&'a StrategyReport]) -> Option<(&'a StrategyReport, bool)> {
    let best = *contenders.iter().min_by_key(|r| r.p99_all())?;
    let low = p99_samples(best);
    let seps: Vec<Sep> =
        contenders.iter().filter(|r| !std::ptr::eq(**r, best)).map(|r| lower_p99(&low, &p99_samples(r))).collect();
    seps.iter().all(|s| s.apart()).then(|| (best, seps.iter().all(|s| *s == Sep::Settled)))
}

/// The one contender with the fewest moving parts, if only one has that few.
fn by_parts<'a>(contenders: &[&'a StrategyReport]) -> Option<&'a StrategyReport> {
    let fewest = contenders.iter().map(|r| r.moving_parts.len()).min()?;
    let mut at = contenders.iter().filter(|r| r.moving_parts.len() == fewest);
    match (at.next(), at.next()) {
        (Some(one), None) => Some(*one),
        _ => None,
    }
}
