//! The ground-truth check: every user's counter against the count of unread rows,
//! classified rather than summed, and judged against the strategy's guarantee.

use crate::model::{Guarantee, UserId};

/// One user's counter as the strategy keeps it (None: no counter row/key at all) and
/// the truth computed from the notification rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckInput {
    pub user: UserId,
    pub counter: Option<i64>,
    pub truth: i64,
}

/// A mismatched user, for the worst-users list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserDrift {
    pub user: UserId,
    pub counter: Option<i64>,
    pub truth: i64,
}

impl UserDrift {
    /// Counter minus truth; a missing counter counts as 0.
    pub fn drift(&self) -> i64 {
        self.counter.unwrap_or(0) - self.truth
    }
}

/// How the check result relates to the declared guarantee.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Guaranteed exact and exact.
    Pass,
    /// Guaranteed exact but drifted: the strategy broke its promise.
    Fail,
    /// No guarantee, and it drifted, as it is known to.
    DriftExpected,
    /// No guarantee, but this run did not hit the race.
    NoDriftObserved,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::DriftExpected => "drift-expected",
            Verdict::NoDriftObserved => "no-drift-observed",
        }
    }

    /// True when the result is consistent with what the strategy declared.
    pub fn matches_guarantee(self) -> bool {
        !matches!(self, Verdict::Fail)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    pub users_checked: u64,
    pub users_mismatched: u64,
    pub over_counted: u64,
    pub under_counted: u64,
    /// Counters below zero (always wrong: truth is never negative).
    pub negative_counters: u64,
    /// Users with unread rows but no counter at all.
    pub missing_counters: u64,
    /// Sum over users of |counter - truth|.
    pub drift_abs_total: u64,
    /// Sum over users of counter - truth (positive: badges show too many).
    pub drift_net: i64,
    /// Up to five users with the largest |drift|, largest first, ties by user id.
    pub worst: Vec<UserDrift>,
    pub verdict: Verdict,
}

pub const WORST_USERS: usize = 5;

/// Classifies every user's drift. A user without a counter whose truth is 0 is fine
/// (strategies create counter rows lazily); with unread rows it is a missing counter
/// and also an under-count.
pub fn check_counters(rows: &[CheckInput], guarantee: Guarantee) -> CheckResult {
    let mut result = CheckResult {
        users_checked: rows.len() as u64,
        users_mismatched: 0,
        over_counted: 0,
        under_counted: 0,
        negative_counters: 0,
        missing_counters: 0,
        drift_abs_total: 0,
        drift_net: 0,
        worst: Vec::new(),
        verdict: Verdict::Pass,
    };
    let mut mismatched: Vec<UserDrift> = Vec::new();
    for row in rows {
        assert!(row.truth >= 0, "truth for user {} is negative: {}", row.user, row.truth);
        let drift = UserDrift { user: row.user, counter: row.counter, truth: row.truth };
        if row.counter.is_some_and(|c| c < 0) {
            result.negative_counters += 1;
        }
        if row.counter.is_none() && row.truth > 0 {
            result.missing_counters += 1;
        }
        let d = drift.drift();
        if d == 0 {
            continue;
        }
        result.users_mismatched += 1;
        if d > 0 {
            result.over_counted += 1;
        } else {
            result.under_counted += 1;
        }
        result.drift_abs_total += d.unsigned_abs();
        result.drift_net += d;
        mismatched.push(drift);
    }
    mismatched.sort_by(|a, b| b.drift().unsigned_abs().cmp(&a.drift().unsigned_abs()).then(a.user.cmp(&b.user)));
    mismatched.truncate(WORST_USERS);
    result.worst = mismatched;
    let exact = result.users_mismatched == 0 && result.negative_counters == 0;
    result.verdict = match (guarantee, exact) {
        (Guarantee::Exact | Guarantee::Eventual, true) => Verdict::Pass,
        (Guarantee::Exact | Guarantee::Eventual, false) => Verdict::Fail,
        (Guarantee::None, true) => Verdict::NoDriftObserved,
        (Guarantee::None, false) => Verdict::DriftExpected,
    };
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn input() -> impl Strategy<Value = Vec<CheckInput>> {
        prop::collection::vec((prop::option::weighted(0.9, -5i64..50), 0i64..50), 0..60).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (counter, truth))| CheckInput { user: i as i64 + 1, counter, truth })
                .collect()
        })
    }

    proptest! {
        // The classification is a partition of the mismatched users and its totals
        // agree with a direct recomputation from the rows.
        #[test]
        fn classification_agrees_with_model(rows in input()) {
            let r = check_counters(&rows, Guarantee::Exact);
            let drifts: Vec<i64> = rows.iter().map(|r| r.counter.unwrap_or(0) - r.truth).collect();
            prop_assert_eq!(r.users_checked, rows.len() as u64);
            prop_assert_eq!(r.users_mismatched, drifts.iter().filter(|d| **d != 0).count() as u64);
            prop_assert_eq!(r.over_counted, drifts.iter().filter(|d| **d > 0).count() as u64);
            prop_assert_eq!(r.under_counted, drifts.iter().filter(|d| **d < 0).count() as u64);
            prop_assert_eq!(r.drift_abs_total, drifts.iter().map(|d| d.unsigned_abs()).sum::<u64>());
            prop_assert_eq!(r.drift_net, drifts.iter().sum::<i64>());
            prop_assert_eq!(r.negative_counters,
                rows.iter().filter(|r| r.counter.is_some_and(|c| c < 0)).count() as u64);
            prop_assert!(r.worst.len() <= WORST_USERS);
            prop_assert!(r.worst.windows(2).all(|w| w[0].drift().abs() >= w[1].drift().abs()));
            if let Some(top) = r.worst.first() {
                let max = drifts.iter().map(|d| d.abs()).max().unwrap();
                prop_assert_eq!(top.drift().abs(), max);
            }
            let exact = r.users_mismatched == 0 && r.negative_counters == 0;
            prop_assert_eq!(r.verdict, if exact { Verdict::Pass } else { Verdict::Fail });
            let none = check_counters(&rows, Guarantee::None);
            prop_assert_eq!(none.verdict,
                if exact { Verdict::NoDriftObserved } else { Verdict::DriftExpected });
            prop_assert!(none.verdict.matches_guarantee());
        }
    }

    #[test]
    fn missing_counter_with_unread_rows_is_an_under_count() {
        let rows = [
            CheckInput { user: 1, counter: None, truth: 3 },
            CheckInput { user: 2, counter: None, truth: 0 },
            CheckInput { user: 3, counter: Some(-1), truth: 0 },
        ];
        let r = check_counters(&rows, Guarantee::Exact);
        assert_eq!(r.missing_counters, 1);
        assert_eq!(r.under_counted, 2);
        assert_eq!(r.negative_counters, 1);
        assert_eq!(r.users_mismatched, 2);
        assert_eq!(r.worst[0], UserDrift { user: 1, counter: None, truth: 3 });
        assert_eq!(r.verdict, Verdict::Fail);
    }
}
