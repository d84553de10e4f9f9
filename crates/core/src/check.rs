//! The ground-truth check: every user's counter against the count of unread rows,
//! classified rather than summed, and judged against the strategy's guarantee.

use crate::counters::UserCounters;
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
pub enum CounterVerdict {
    /// Guaranteed exact and exact.
    Pass,
    /// Guaranteed exact but drifted: the strategy broke its promise.
    Fail,
    /// No guarantee, and it drifted, as it is known to.
    DriftExpected,
    /// No guarantee, but this run did not hit the race.
    NoDriftObserved,
}

impl CounterVerdict {
    pub fn name(self) -> &'static str {
        match self {
            CounterVerdict::Pass => "pass",
            CounterVerdict::Fail => "FAIL",
            CounterVerdict::DriftExpected => "drift-expected",
            CounterVerdict::NoDriftObserved => "no-drift-observed",
        }
    }

    /// True when the result is consistent with what the strategy declared.
    pub fn matches_guarantee(self) -> bool {
        !matches!(self, CounterVerdict::Fail)
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
    pub verdict: CounterVerdict,
}

pub const WORST_USERS: usize = 5;

/// The running classification: one user at a time, in any order, holding only the
/// worst-users list (and whatever the caller keeps of the rows it passes).
#[derive(Debug)]
struct Tally {
    result: CheckResult,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            result: CheckResult {
                users_checked: 0,
                users_mismatched: 0,
                over_counted: 0,
                under_counted: 0,
                negative_counters: 0,
                missing_counters: 0,
                drift_abs_total: 0,
                drift_net: 0,
                worst: Vec::new(),
                verdict: CounterVerdict::Pass,
            },
        }
    }

    /// Counts one user; true when the row is a witness (mismatched or negative).
    fn add(&mut self, row: &CheckInput) -> bool {
        assert!(row.truth >= 0, "truth for user {} is negative: {}", row.user, row.truth);
        let r = &mut self.result;
        r.users_checked += 1;
        let drift = UserDrift { user: row.user, counter: row.counter, truth: row.truth };
        let negative = row.counter.is_some_and(|c| c < 0);
        r.negative_counters += negative as u64;
        if row.counter.is_none() && row.truth > 0 {
            r.missing_counters += 1;
        }
        let d = drift.drift();
        if d == 0 {
            return negative;
        }
        r.users_mismatched += 1;
        if d > 0 {
            r.over_counted += 1;
        } else {
            r.under_counted += 1;
        }
        r.drift_abs_total += d.unsigned_abs();
        r.drift_net += d;
        if r.worst.len() < WORST_USERS || worse(&drift, r.worst.last().expect("full list")) {
            let at = r.worst.partition_point(|w| worse(w, &drift));
            r.worst.insert(at, drift);
            r.worst.truncate(WORST_USERS);
        }
        true
    }

    fn finish(mut self, guarantee: Guarantee) -> CheckResult {
        let r = &mut self.result;
        let exact = r.users_mismatched == 0 && r.negative_counters == 0;
        r.verdict = match (guarantee, exact) {
            (Guarantee::Exact | Guarantee::Eventual, true) => CounterVerdict::Pass,
            (Guarantee::Exact | Guarantee::Eventual, false) => CounterVerdict::Fail,
            (Guarantee::None, true) => CounterVerdict::NoDriftObserved,
            (Guarantee::None, false) => CounterVerdict::DriftExpected,
        };
        self.result
    }
}

/// Larger |drift| first, ties by user id.
fn worse(a: &UserDrift, b: &UserDrift) -> bool {
    (b.drift().unsigned_abs(), a.user) < (a.drift().unsigned_abs(), b.user)
}

/// Classifies every user's drift. A user without a counter whose truth is 0 is fine
/// (strategies create counter rows lazily); with unread rows it is a missing counter
/// and also an under-count.
pub fn check_counters(rows: &[CheckInput], guarantee: Guarantee) -> CheckResult {
    let mut t = Tally::new();
    for row in rows {
        t.add(row);
    }
    t.finish(guarantee)
}

/// What a streamed check keeps: the result, the witnesses (every mismatched or negative
/// user, which is all the anomaly classifier reads), and an even sample of users
/// (1, 1+step, ...) for the settled reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    pub result: CheckResult,
    pub witnesses: Vec<CheckInput>,
    pub sample: Vec<CheckInput>,
}

/// The final check over users 1..=n_users folded one row at a time, in any order: rows
/// the source leaves out are users with no counter and no unread row. Memory: one bit a
/// user, the sample and the witnesses. `counters`, when given (a strategy that keeps
/// its counters elsewhere, e.g. Redis), replaces each row's counter by user.
#[derive(Debug)]
pub struct CheckFold<'a> {
    n_users: u64,
    seen: Vec<u64>,
    counters: Option<&'a UserCounters>,
    step: u64,
    tally: Tally,
    witnesses: Vec<CheckInput>,
    sample: Vec<CheckInput>,
}

impl<'a> CheckFold<'a> {
    /// A fold for users 1..=n_users keeping at most `sample` evenly spread users.
    pub fn new(n_users: u64, counters: Option<&'a UserCounters>, sample: usize) -> CheckFold<'a> {
        assert!(counters.is_none_or(|c| c.len() == n_users), "one counter per user");
        let step = Self::sample_step(n_users, sample);
        let sample =
            Self::sample_users(n_users, sample).map(|user| CheckInput { user, counter: None, truth: 0 }).collect();
        CheckFold {
            n_users,
            seen: vec![0; n_users.div_ceil(64) as usize],
            counters,
            step,
            tally: Tally::new(),
            witnesses: Vec::new(),
            sample,
        }
    }

    fn sample_step(n_users: u64, sample: usize) -> u64 {
        n_users.div_ceil(sample.max(1) as u64).max(1)
    }

    /// The users a fold of `n_users` keeps for a `sample` of that size, in order: known
    /// before the rows arrive, so what they show can be read while the truth streams.
    pub fn sample_users(n_users: u64, sample: usize) -> impl Iterator<Item = i64> {
        let step = Self::sample_step(n_users, sample);
        (0..n_users.div_ceil(step)).map(move |k| (k * step + 1) as i64)
    }

    /// One user's row; an error names a user outside 1..=n_users or one seen twice.
    pub fn add(&mut self, row: CheckInput) -> Result<(), String> {
        let n = self.n_users;
        if row.user < 1 || row.user as u64 > n {
            return Err(format!("a row for user {}, outside 1..={n}", row.user));
        }
        let i = row.user as u64 - 1;
        let (w, bit) = ((i / 64) as usize, 1u64 << (i % 64));
        if self.seen[w] & bit != 0 {
            return Err(format!("two rows for user {}", row.user));
        }
        self.seen[w] |= bit;
        self.count(row);
        Ok(())
    }

    fn count(&mut self, mut row: CheckInput) {
        let i = row.user as u64 - 1;
        if let Some(c) = self.counters {
            row.counter = c.get(row.user);
        }
        if self.tally.add(&row) {
            self.witnesses.push(row);
        }
        if i.is_multiple_of(self.step) {
            self.sample[(i / self.step) as usize] = row;
        }
    }

    /// Counts the users no row named (no counter, no unread row) and judges.
    pub fn finish(mut self, guarantee: Guarantee) -> Checked {
        let seen = std::mem::take(&mut self.seen);
        for (w, word) in seen.into_iter().enumerate() {
            if word == u64::MAX {
                continue;
            }
            let users = (w as u64 * 64..(w as u64 * 64 + 64).min(self.n_users)).filter(|i| word & 1 << (i % 64) == 0);
            for i in users {
                self.count(CheckInput { user: i as i64 + 1, counter: None, truth: 0 });
            }
        }
        self.witnesses.sort_by_key(|r| r.user);
        Checked { result: self.tally.finish(guarantee), witnesses: self.witnesses, sample: self.sample }
    }
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
            prop_assert_eq!(r.verdict, if exact { CounterVerdict::Pass } else { CounterVerdict::Fail });
            let none = check_counters(&rows, Guarantee::None);
            prop_assert_eq!(none.verdict,
                if exact { CounterVerdict::NoDriftObserved } else { CounterVerdict::DriftExpected });
            prop_assert!(none.verdict.matches_guarantee());
        }
    }

    proptest! {
        // Folding the rows in any order, with the empty users left out, gives what the
        // whole list gives; the witnesses are the mismatched or negative users and the
        // sample is every step-th user.
        #[test]
        fn fold_agrees_with_the_whole_list(rows in input(), order in any::<u64>(), sample in 1usize..9) {
            let n = rows.len() as u64;
            let mut streamed: Vec<CheckInput> =
                rows.iter().copied().filter(|r| r.counter.is_some() || r.truth != 0).collect();
            let len = streamed.len();
            for i in 0..len {
                streamed.swap(i, (order.wrapping_mul(i as u64 + 7) % len as u64) as usize);
            }
            let mut fold = CheckFold::new(n, None, sample);
            for r in streamed {
                prop_assert!(fold.add(r).is_ok());
            }
            let got = fold.finish(Guarantee::Exact);
            prop_assert_eq!(&got.result, &check_counters(&rows, Guarantee::Exact));
            let witnesses: Vec<CheckInput> = rows.iter().copied()
                .filter(|r| r.counter.unwrap_or(0) != r.truth || r.counter.is_some_and(|c| c < 0)).collect();
            prop_assert_eq!(got.witnesses, witnesses);
            let step = rows.len().div_ceil(sample).max(1);
            let every: Vec<CheckInput> = rows.iter().copied().step_by(step).collect();
            prop_assert_eq!(&got.sample, &every);
            let users: Vec<i64> = CheckFold::sample_users(n, sample).collect();
            prop_assert_eq!(users, every.iter().map(|r| r.user).collect::<Vec<_>>());
        }

        // Counters given apart (a Redis strategy's) replace the rows' counters, for the
        // users the rows leave out too.
        #[test]
        fn fold_takes_counters_given_apart(rows in input()) {
            let counters: UserCounters = rows.iter().map(|r| r.counter).collect();
            let truths: Vec<CheckInput> = rows.iter().map(|r| CheckInput { counter: None, ..*r }).collect();
            let mut fold = CheckFold::new(rows.len() as u64, Some(&counters), 3);
            for r in truths.into_iter().filter(|r| r.truth != 0) {
                prop_assert!(fold.add(r).is_ok());
            }
            prop_assert_eq!(fold.finish(Guarantee::None).result, check_counters(&rows, Guarantee::None));
        }
    }

    #[test]
    fn fold_refuses_users_outside_the_range_and_twice() {
        let mut fold = CheckFold::new(3, None, 10);
        let row = |user| CheckInput { user, counter: Some(1), truth: 1 };
        assert_eq!(fold.add(row(4)), Err("a row for user 4, outside 1..=3".to_string()));
        assert_eq!(fold.add(row(0)), Err("a row for user 0, outside 1..=3".to_string()));
        assert_eq!(fold.add(row(2)), Ok(()));
        assert_eq!(fold.add(row(2)), Err("two rows for user 2".to_string()));
        let got = fold.finish(Guarantee::Exact);
        assert_eq!((got.result.users_checked, got.sample.len()), (3, 3));
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
        assert_eq!(r.verdict, CounterVerdict::Fail);
    }
}
