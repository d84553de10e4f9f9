//! A history too large for memory, checked part by part: the read bounds and the
//! drift explanations are per user, so a history split by user into parts (each loaded
//! alone) gives the same results as the whole one. The storage (memory, spill files, an
//! agent's files) is the caller's: core only asks for part `i`'s events.

use std::borrow::Cow;

use super::{Event, ReadCheck, ReadSource, check_reads_from, check_reads_seeded};
use crate::model::{OpKind, Outcome, UserId};
use crate::seed::SeedSpec;

/// A history split by user: every call of a user is in the part `part_of(user)` names.
/// `load` may fail (a file that cannot be read): the check then cannot complete.
pub trait HistoryParts {
    /// How many parts (at least 1).
    fn parts(&self) -> usize;
    /// The part holding `user`'s calls.
    fn part_of(&self, user: UserId) -> usize;
    /// Part `i`'s calls, in `sort_history` order.
    fn load(&mut self, i: usize) -> Result<Cow<'_, [Event]>, String>;
}

/// A whole history in memory, sorted with `sort_history`: one part.
pub struct OnePart<'a>(pub &'a [Event]);

impl HistoryParts for OnePart<'_> {
    fn parts(&self) -> usize {
        1
    }

    fn part_of(&self, _: UserId) -> usize {
        0
    }

    fn load(&mut self, _: usize) -> Result<Cow<'_, [Event]>, String> {
        Ok(Cow::Borrowed(self.0))
    }
}

/// Sorts calls into the order a history is kept in: by completion, then invocation and
/// worker, then every other field, so any arrangement of the same calls (one Vec, or
/// parts written as they came) sorts the same way and every check sees the same order.
pub fn sort_history(events: &mut [Event]) {
    events.sort_unstable_by_key(|e| {
        let outcome = match e.outcome {
            Outcome::Ok => 0u8,
            Outcome::Fail => 1,
            Outcome::Unknown => 2,
        };
        let op = OpKind::ALL.iter().position(|k| *k == e.op).unwrap_or(0);
        (e.complete_us, e.invoke_us, e.worker, e.user, e.id, op, outcome, e.observed, e.attempts, e.unknown_attempts)
    });
}

/// `check_reads_from` over a history in parts: each part checked alone, the results
/// merged (`ReadCheck::merge`). Holds one part at a time.
pub fn check_reads_parts(
    parts: &mut dyn HistoryParts,
    initial: &dyn Fn(UserId) -> i64,
    source: ReadSource,
) -> Result<ReadCheck, String> {
    merge_parts(parts, &|evs| check_reads_from(evs, initial, source))
}

/// `check_reads_seeded` over a history in parts, as `check_reads_parts` does it: the
/// row facts are per user, so each part holds all of its users' evidence.
pub fn check_reads_parts_seeded(
    parts: &mut dyn HistoryParts,
    seed: SeedSpec,
    source: ReadSource,
) -> Result<ReadCheck, String> {
    merge_parts(parts, &|evs| check_reads_seeded(evs, seed, source))
}

/// `check` of each part, merged (`ReadCheck::merge`); `check(&[])` when there are none.
fn merge_parts(parts: &mut dyn HistoryParts, check: &dyn Fn(&[Event]) -> ReadCheck) -> Result<ReadCheck, String> {
    let mut out: Option<ReadCheck> = None;
    for i in 0..parts.parts() {
        let evs = parts.load(i)?;
        let rc = check(&evs);
        match &mut out {
            Some(o) => o.merge(rc),
            None => out = Some(rc),
        }
    }
    Ok(out.unwrap_or_else(|| check(&[])))
}

/// How many calls completed at or before each of `times` (sorted or not), over every
/// part: one pass.
pub(super) fn completed_upto(parts: &mut dyn HistoryParts, times: &[u64]) -> Result<(Vec<u64>, u64), String> {
    let mut sorted: Vec<u64> = times.to_vec();
    sorted.sort_unstable();
    // at[j]: calls completing in (sorted[j-1], sorted[j]]; prefix sums give the counts.
    let mut at = vec![0u64; sorted.len() + 1];
    let mut total = 0u64;
    for i in 0..parts.parts() {
        let evs = parts.load(i)?;
        total += evs.len() as u64;
        for e in evs.iter() {
            at[sorted.partition_point(|t| *t < e.complete_us)] += 1;
        }
    }
    let mut upto = Vec::with_capacity(sorted.len());
    let mut sum = 0;
    for c in &at[..sorted.len()] {
        sum += c;
        upto.push(sum);
    }
    let counts = times.iter().map(|t| upto[sorted.partition_point(|s| s < t)]).collect();
    Ok((counts, total))
}
