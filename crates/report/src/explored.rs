//! What `[explore] with_run` (or `run --explore`) adds to a row: the explorer's
//! result for the row's strategy, backend and level, in a few figures and one sentence,
//! and whether it breaks the design's declared guarantee (which fails the row).

use serde::{Deserialize, Serialize};

/// The explorer's result for one row (see docs/explore.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExploreSummary {
    /// Op pairs explored (each in every order of their server calls).
    pub pairs: u32,
    /// Schedules run over all pairs, each from a fresh state.
    pub schedules: u64,
    /// Whether the design declares the exact guarantee (then an UNSAFE pair fails the row).
    pub declares_exact: bool,
    /// The pairs with a schedule that left the counter wrong.
    pub unsafe_pairs: Vec<UnsafePair>,
    /// Pairs whose search stopped short (budget, preemption bound), with why.
    pub not_explored: Vec<String>,
    /// Pairs the explorer could not finish (not a finding on the design), with why.
    pub errors: Vec<String>,
    /// Why the row was not explored at all (an eventual design, a setup error).
    pub skipped: Option<String>,
}

/// One op pair with failing schedules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UnsafePair {
    /// `create ‖ mark_all_read`.
    pub pair: String,
    pub failing: u64,
    pub explored: u64,
    /// What the checker named in the shortest failing schedule.
    pub anomalies: Vec<String>,
}

impl ExploreSummary {
    /// SAFE, UNSAFE, NOT EXPLORED (a search stopped short or errored, none unsafe) or
    /// SKIPPED.
    pub fn outcome(&self) -> &'static str {
        if self.skipped.is_some() {
            "SKIPPED"
        } else if !self.unsafe_pairs.is_empty() {
            "UNSAFE"
        } else if !self.not_explored.is_empty() || !self.errors.is_empty() || self.pairs == 0 {
            "NOT EXPLORED"
        } else {
            "SAFE"
        }
    }

    /// An UNSAFE pair of a design that declares exact: the row fails.
    pub fn breaks_guarantee(&self) -> bool {
        self.declares_exact && !self.unsafe_pairs.is_empty()
    }

    /// The result in one sentence (no trailing period).
    pub fn words(&self) -> String {
        if let Some(why) = &self.skipped {
            return format!("not explored: {why}");
        }
        let (n, schedules) = (self.pairs, self.schedules);
        let mut s = match self.outcome() {
            "SAFE" => format!("safe in every explored interleaving ({n} op pairs, {schedules} schedules)"),
            "UNSAFE" => {
                let named: Vec<String> = self
                    .unsafe_pairs
                    .iter()
                    .map(|p| format!("{} ({}; {} of {} orders)", p.pair, p.anomalies.join(", "), p.failing, p.explored))
                    .collect();
                let k = self.unsafe_pairs.len();
                format!("UNSAFE in {k} of {n} explored op pairs ({schedules} schedules): {}", named.join(", "))
            }
            _ => format!("no failing interleaving in {schedules} schedules, but not every order was run"),
        };
        let short = self.not_explored.len() + self.errors.len();
        if short > 0 {
            s.push_str(&format!("; {short} pair(s) not explored to the end: {}", self.left().join("; ")));
        }
        s
    }

    fn left(&self) -> Vec<String> {
        self.not_explored.iter().chain(&self.errors).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsafe_pair() -> UnsafePair {
        UnsafePair {
            pair: "create ‖ mark_all_read".into(),
            failing: 20,
            explored: 50,
            anomalies: vec!["lost_increment".into()],
        }
    }

    #[test]
    fn each_outcome_has_its_words_and_only_an_exact_design_unsafe_breaks_its_guarantee() {
        let safe = ExploreSummary { pairs: 16, schedules: 1234, declares_exact: true, ..Default::default() };
        assert_eq!(safe.outcome(), "SAFE");
        assert_eq!(safe.words(), "safe in every explored interleaving (16 op pairs, 1234 schedules)");
        assert!(!safe.breaks_guarantee());
        let bad = ExploreSummary { unsafe_pairs: vec![unsafe_pair()], ..safe.clone() };
        assert_eq!(bad.outcome(), "UNSAFE");
        assert!(bad.breaks_guarantee());
        assert_eq!(
            bad.words(),
            "UNSAFE in 1 of 16 explored op pairs (1234 schedules): create ‖ mark_all_read (lost_increment; 20 of 50 orders)"
        );
        let racy = ExploreSummary { declares_exact: false, ..bad };
        assert!(!racy.breaks_guarantee(), "no guarantee declared: UNSAFE is the finding, not a failure");
        let short =
            ExploreSummary { not_explored: vec!["mark_all_read ‖ mark_all_read: the budget ran out".into()], ..safe };
        assert_eq!(short.outcome(), "NOT EXPLORED");
        assert!(
            short
                .words()
                .starts_with("no failing interleaving in 1234 schedules, but not every order was run; 1 pair(s)")
        );
        let skipped = ExploreSummary { skipped: Some("an eventual design".into()), ..Default::default() };
        assert_eq!((skipped.outcome(), skipped.words().as_str()), ("SKIPPED", "not explored: an eventual design"));
    }
}
