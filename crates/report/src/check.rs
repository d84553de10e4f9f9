//! A row's check: the counters against the truth and the one verdict, typed, written
//! to report.json as it always was (the verdict's label carries its limits in brackets).

use counterlab_core::{Limit, Verdict};
use serde::{Deserialize, Serialize};

use crate::wire;

/// Fields missing from older reports (schema 1) read as their defaults.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct WorstUser {
    pub user: i64,
    /// None when the user had no counter at all.
    pub counter: Option<i64>,
    pub truth: i64,
}

/// Fields missing from older reports (schema 1) read as their defaults (`CheckWire`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(from = "CheckWire", into = "CheckWire")]
pub struct CheckReport {
    pub users_checked: u64,
    pub users_mismatched: u64,
    pub over_counted: u64,
    pub under_counted: u64,
    pub negative_counters: u64,
    pub missing_counters: u64,
    pub drift_abs_total: u64,
    pub drift_net: i64,
    pub worst_users: Vec<WorstUser>,
    /// The one verdict (`counterlab_core::judge`); written as its label (`pass`,
    /// `drift-expected`, `no-drift-observed`, `NO EVIDENCE`, `FAIL: <parts>`,
    /// `INCOMPLETE: <phase>`) with the limits after it in brackets.
    pub verdict: Verdict,
    pub matches_guarantee: bool,
    /// False when an operation kind the mix asks for ran fewer times than required.
    pub evidence: bool,
    /// The verdict in words, one sentence.
    pub summary: String,
    /// What the check did not cover (the history capped, reads not checked): also in
    /// brackets after the verdict's label. `--strict` fails a run with any.
    pub limits: Vec<Limit>,
}

impl CheckReport {
    /// The label every output prints: the verdict's, then its limits in brackets.
    pub fn label(&self) -> String {
        wire::label(&self.verdict, &self.limits)
    }
}

/// `CheckReport` as report.json holds it.
#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
struct CheckWire {
    users_checked: u64,
    users_mismatched: u64,
    over_counted: u64,
    under_counted: u64,
    negative_counters: u64,
    missing_counters: u64,
    drift_abs_total: u64,
    drift_net: i64,
    worst_users: Vec<WorstUser>,
    verdict: String,
    matches_guarantee: bool,
    evidence: bool,
    summary: String,
    #[serde(with = "wire::limits", skip_serializing_if = "Vec::is_empty")]
    limits: Vec<Limit>,
}

impl From<CheckWire> for CheckReport {
    fn from(w: CheckWire) -> CheckReport {
        CheckReport {
            users_checked: w.users_checked,
            users_mismatched: w.users_mismatched,
            over_counted: w.over_counted,
            under_counted: w.under_counted,
            negative_counters: w.negative_counters,
            missing_counters: w.missing_counters,
            drift_abs_total: w.drift_abs_total,
            drift_net: w.drift_net,
            worst_users: w.worst_users,
            verdict: wire::parse_label(&w.verdict),
            matches_guarantee: w.matches_guarantee,
            evidence: w.evidence,
            summary: w.summary,
            limits: w.limits,
        }
    }
}

impl From<CheckReport> for CheckWire {
    fn from(c: CheckReport) -> CheckWire {
        CheckWire {
            verdict: c.label(),
            users_checked: c.users_checked,
            users_mismatched: c.users_mismatched,
            over_counted: c.over_counted,
            under_counted: c.under_counted,
            negative_counters: c.negative_counters,
            missing_counters: c.missing_counters,
            drift_abs_total: c.drift_abs_total,
            drift_net: c.drift_net,
            worst_users: c.worst_users,
            matches_guarantee: c.matches_guarantee,
            evidence: c.evidence,
            summary: c.summary,
            limits: c.limits,
        }
    }
}

impl CheckReport {
    /// The report's check of a run: its counters against the truth and its judgement.
    pub fn of(c: &counterlab_core::CheckResult, judgement: &counterlab_core::Judgement) -> CheckReport {
        CheckReport {
            users_checked: c.users_checked,
            users_mismatched: c.users_mismatched,
            over_counted: c.over_counted,
            under_counted: c.under_counted,
            negative_counters: c.negative_counters,
            missing_counters: c.missing_counters,
            drift_abs_total: c.drift_abs_total,
            drift_net: c.drift_net,
            worst_users: c
                .worst
                .iter()
                .map(|w| WorstUser { user: w.user, counter: w.counter, truth: w.truth })
                .collect(),
            verdict: judgement.verdict.clone(),
            matches_guarantee: judgement.held,
            evidence: judgement.evidence,
            summary: judgement.sentence.clone(),
            limits: judgement.limits.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use counterlab_core::FailPart;

    #[test]
    fn the_verdict_and_its_limits_are_written_as_one_label_and_read_back() {
        let c = CheckReport {
            verdict: Verdict::Fail(vec![FailPart::Counters]),
            limits: vec![Limit::HistoryCapped { recorded: 10, dropped: 3 }],
            ..CheckReport::default()
        };
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["verdict"], "FAIL: counters [history capped at 10 calls (3 not recorded): reads not checked]");
        let back: CheckReport = serde_json::from_value(json).unwrap();
        assert_eq!((back.verdict, back.limits), (c.verdict, c.limits));
        let edited: CheckReport = serde_json::from_str(r#"{"verdict": "passed!"}"#).unwrap();
        assert!(edited.verdict.is_fail(), "a label no verdict prints never passes");
    }
}
