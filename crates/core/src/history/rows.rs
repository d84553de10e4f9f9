//! What one user's history proves about single rows, which tightens the effect a
//! delete or mark_read may have had on the true unread count (`RowFacts::effect`).
//!
//! The model (a correct design): every call takes effect atomically at one instant
//! `p` inside `[invoke_us, complete_us]` (ties in microseconds: either order); a Fail
//! call has no effect; an Ok call's reply (`observed`) is what it did at `p`; an Unknown
//! call took effect or not. Row ids are never reused: a row exists from its create (or
//! the seed) until one delete removes it, and it is created unread. No call sets a row
//! back to unread. Hence, for a row `x`:
//!
//! * Read or gone from some time on. If at an instant `t` the row is read or gone, it
//!   is read or gone at every later instant. It is so at the start when seeded read;
//!   after `p_m <= m.complete` when `m` is an Ok mark_read of `x` that changed it
//!   (`observed > 0`); also when `m` changed nothing (`observed == 0`) but `x` existed at
//!   `m.invoke` (seeded, or an Ok create completed before it): at `p_m` the row was read
//!   already or gone; and after an Ok mark_all_read `m` of the user invoked after `x`
//!   existed: at `p_m` it marked `x` read unless `x` was gone. A call `o` on `x`
//!   invoked after that completion (`m.complete < o.invoke`) takes effect at
//!   `p_o >= o.invoke > p_m`, so a delete or mark_read of `x` changes the unread count
//!   by 0, whatever its outcome and however often it was attempted. Only Ok replies
//!   prove anything: a Fail call did nothing; an Unknown one may not have applied.
//! * Marked by its own reply. An Ok delete that removed `x` and an Ok mark_read that
//!   changed `x` (replied > 0): had the delete come first, the mark_read would have
//!   found no row and replied 0. So in every linearization the mark_read came first
//!   and the delete removed a read row: its effect is 0, however the two overlapped.
//! * Unread when deleted. Take an Ok delete `d` that removed `x` (`observed > 0`, one
//!   attempt), so `x` existed at `p_d`. If `x` started unread (seeded unread, or
//!   created: it is unread from `p_c >= c.invoke`), only a call that marked `x` read
//!   could make the delete's effect 0: a mark_read of `x` that may have applied (not
//!   Fail, not an Ok reply of 0) or a mark_all_read of the user that may have marked a
//!   row (not Fail, not an Ok reply of 0) with `p_o < p_d` and, for a created row,
//!   `p_o > p_c`. That needs `o.invoke <= p_o <= p_d <= d.complete` and
//!   `o.complete >= p_o >= p_c >= c.invoke`. When every such call has
//!   `o.invoke > d.complete` (or, for mark_all_read, `o.complete < c.invoke`), none can
//!   come before the delete: it removed an unread row and its effect is exactly -1.
//!   Only when `d` is the one Ok delete of `x` that replied so: a design whose two
//!   deletes of one row may both reply that they removed it (redis-set's: one took the
//!   id from the set, the other deleted the row) is outside the model, and its deletes
//!   keep `effect_range`.
//!
//! Both are per call and hold in every linearization, so summing them as `effect_range`
//! is summed keeps the read bounds sound; they only narrow `effect_range` (0 and -1 lie
//! in its -1..0 for a delete).

use std::collections::{HashMap, HashSet};

use super::{Event, effect_range};
use crate::model::{NotificationId, OpKind, Outcome, UserId};
use crate::seed::SeedSpec;

/// One user's row facts: when each row acted on is known read, and until when it is
/// known unread.
pub(super) struct RowFacts {
    /// Calls on the row invoked at or after this time find it read or gone.
    read_from: HashMap<NotificationId, u64>,
    /// For a row that started unread: the earliest invocation of a call that may have
    /// marked it read (u64::MAX: none). An Ok delete completing strictly before it
    /// removed an unread row.
    unread_until: HashMap<NotificationId, u64>,
    /// Rows an Ok mark_read changed (replied > 0): an Ok delete that removed one came
    /// after that mark_read in every linearization, whatever their times.
    claimed: HashSet<NotificationId>,
    /// Rows more than one Ok delete replied to have removed.
    removed_twice: HashSet<NotificationId>,
}

/// A delete or mark_read: a call that acts on one row.
fn on_one_row(e: &Event) -> bool {
    e.id != 0 && matches!(e.op, OpKind::Delete | OpKind::MarkRead | OpKind::MarkReadDup)
}

/// An Ok reply of 0 from a mark_read or mark_all_read: it marked nothing.
fn marked_nothing(e: &Event) -> bool {
    e.outcome == Outcome::Ok && e.observed == 0
}

impl RowFacts {
    /// The facts of `evs`, one user's calls, with the seed's layout. O(n log n).
    pub(super) fn new(evs: &[&Event], seed: SeedSpec) -> RowFacts {
        let user: UserId = evs.first().map_or(0, |e| e.user);
        let seeded = |id: NotificationId| if user >= 1 { seed.seeded_state(user, id) } else { None };
        let mut exists_from: HashMap<NotificationId, u64> = HashMap::new();
        let mut origin: HashMap<NotificationId, u64> = HashMap::new();
        for e in evs.iter().filter(|e| e.op == OpKind::Create && e.id != 0) {
            let o = origin.entry(e.id).or_insert(u64::MAX);
            *o = (*o).min(e.invoke_us);
            if e.outcome == Outcome::Ok {
                let t = exists_from.entry(e.id).or_insert(u64::MAX);
                *t = (*t).min(e.complete_us.saturating_add(1));
            }
        }
        let exists = |id: NotificationId| if seeded(id).is_some() { Some(0) } else { exists_from.get(&id).copied() };
        let alls = MarkAlls::new(evs);
        let mut marks: HashMap<NotificationId, Vec<&Event>> = HashMap::new();
        for e in evs.iter().filter(|e| matches!(e.op, OpKind::MarkRead | OpKind::MarkReadDup)) {
            marks.entry(e.id).or_default().push(*e);
        }
        let claimed =
            evs.iter().filter(|e| on_one_row(e) && e.op != OpKind::Delete).filter(|e| e.outcome == Outcome::Ok);
        let claimed = claimed.filter(|e| e.observed > 0).map(|e| e.id).collect();
        let mut removals: HashMap<NotificationId, u32> = HashMap::new();
        for e in evs.iter().filter(|e| e.op == OpKind::Delete && e.outcome == Outcome::Ok && e.observed > 0) {
            *removals.entry(e.id).or_default() += 1;
        }
        let removed_twice = removals.into_iter().filter(|(_, n)| *n > 1).map(|(id, _)| id).collect();
        let mut facts = RowFacts { read_from: HashMap::new(), unread_until: HashMap::new(), claimed, removed_twice };
        let mut done: HashSet<NotificationId> = HashSet::new();
        for e in evs.iter().filter(|e| on_one_row(e)) {
            // Once per row.
            if !done.insert(e.id) {
                continue;
            }
            let from = match seeded(e.id) {
                Some(true) => Some(0),
                _ => read_after_marks(marks.get(&e.id).map_or(&[], Vec::as_slice), exists(e.id), &alls),
            };
            if let Some(t) = from {
                facts.read_from.insert(e.id, t);
            }
            let start = match seeded(e.id) {
                Some(s) => (!s).then_some(0),
                None => origin.get(&e.id).copied(),
            };
            if let Some(start) = start {
                let own = marks.get(&e.id).map_or(&[][..], Vec::as_slice);
                facts.unread_until.insert(e.id, first_possible_mark(own, start, &alls));
            }
        }
        facts
    }

    /// The effect `e` may have had on its user's true unread count: `effect_range`,
    /// narrowed by what the history proves about its row (see the module's proof).
    pub(super) fn effect(&self, e: &Event) -> (i64, i64) {
        if !on_one_row(e) {
            return effect_range(e);
        }
        if self.read_from.get(&e.id).is_some_and(|t| *t <= e.invoke_us) {
            // An Ok mark_read's own reply stays exact (a correct design replies 0 here).
            let own = if e.outcome == Outcome::Ok && e.op != OpKind::Delete { -e.observed.min(1) } else { 0 };
            return (own, own);
        }
        let removed = e.op == OpKind::Delete && e.outcome == Outcome::Ok && e.observed > 0;
        if removed && self.claimed.contains(&e.id) {
            return (0, 0);
        }
        let unread = self.unread_until.get(&e.id).is_some_and(|t| e.complete_us < *t);
        if unread && removed && e.unknown_attempts == 0 && !self.removed_twice.contains(&e.id) {
            return (-1, -1);
        }
        effect_range(e)
    }
}

/// Every mark_all_read of one user, sorted two ways for the two questions asked.
struct MarkAlls {
    /// Ok ones by invocation, with the least completion from each on (suffix minimum).
    ok_by_invoke: Vec<(u64, u64)>,
    /// Those that may have marked a row (not Fail, not an Ok reply of 0) by completion,
    /// with the least invocation from each on.
    marking_by_complete: Vec<(u64, u64)>,
}

impl MarkAlls {
    fn new(evs: &[&Event]) -> MarkAlls {
        let alls = || evs.iter().filter(|e| e.op == OpKind::MarkAllRead);
        let ok = alls().filter(|e| e.outcome == Outcome::Ok).map(|e| (e.invoke_us, e.complete_us)).collect();
        let marking = alls()
            .filter(|e| e.outcome != Outcome::Fail && !marked_nothing(e))
            .map(|e| (e.complete_us, e.invoke_us))
            .collect();
        MarkAlls { ok_by_invoke: suffix_min(ok), marking_by_complete: suffix_min(marking) }
    }
}

/// Sorts pairs by the first and replaces each second by the least second from it on.
fn suffix_min(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut least = u64::MAX;
    for p in v.iter_mut().rev() {
        least = least.min(p.1);
        p.1 = least;
    }
    v
}

/// The earliest time from which calls on a row find it read or gone, proven by an Ok
/// mark_read of it (`marks`: the row's mark_reads) or an Ok mark_all_read invoked once
/// it existed (`exists`: calls invoked at or after it find the row created). None when
/// nothing proves it.
fn read_after_marks(marks: &[&Event], exists: Option<u64>, alls: &MarkAlls) -> Option<u64> {
    let by_mark = marks
        .iter()
        .filter(|e| e.outcome == Outcome::Ok)
        .filter(|e| e.observed > 0 || exists.is_some_and(|t| t <= e.invoke_us))
        .map(|e| e.complete_us.saturating_add(1))
        .min();
    let by_all = exists.and_then(|t| {
        let i = alls.ok_by_invoke.partition_point(|(inv, _)| *inv < t);
        alls.ok_by_invoke.get(i).map(|(_, c)| c.saturating_add(1))
    });
    by_mark.into_iter().chain(by_all).min()
}

/// The earliest invocation of a call that may have marked a row read after it began
/// unread at `start` (one of `marks`, the row's mark_reads, or a mark_all_read
/// completing at or after `start`); u64::MAX when there is none.
fn first_possible_mark(marks: &[&Event], start: u64, alls: &MarkAlls) -> u64 {
    let by_mark = marks
        .iter()
        .filter(|e| e.outcome != Outcome::Fail && !marked_nothing(e))
        .map(|e| e.invoke_us)
        .min()
        .unwrap_or(u64::MAX);
    let i = alls.marking_by_complete.partition_point(|(c, _)| *c < start);
    let by_all = alls.marking_by_complete.get(i).map_or(u64::MAX, |(_, inv)| *inv);
    by_mark.min(by_all)
}
