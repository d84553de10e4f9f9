//! Tests of the row-narrowed read bounds (`check_reads_seeded`): hand-made histories
//! where the history proves a deleted row read (or unread), a delete-always-decrements
//! counter caught by reads while it never goes below zero, and a proptest against a
//! brute-force model of every linearization of small histories.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

use OpKind::*;
use Outcome::{Fail, Ok as Okay, Unknown};

/// User 1's seeded rows: id 1 read, ids 2 and 3 unread; the count starts at 2.
const SEED: SeedSpec = SeedSpec { n_users: 1, notifications_per_user: 3, initial_read_per_user: 1 };

fn ev(op: OpKind, id: i64, t: (u64, u64), outcome: Outcome, observed: i64) -> Event {
    Event {
        worker: 0,
        op,
        user: 1,
        id,
        invoke_us: t.0,
        complete_us: t.1,
        outcome,
        observed,
        attempts: 1,
        unknown_attempts: 0,
    }
}

/// Each Ok read's bounds, in history order: with the row facts (`seed`) or without.
fn bounds_of(h: &[Event], seed: Option<SeedSpec>) -> Vec<(i64, i64)> {
    let evs: Vec<&Event> = h.iter().collect();
    let b = UserBounds::new(&evs, SEED.unread_at_start() as i64, seed);
    let reads = h.iter().filter(|e| e.op == ReadCount && e.outcome == Okay);
    reads.map(|r| b.bounds(r, b.by_complete.below(r.invoke_us))).collect()
}

fn flagged(h: &[Event], seeded: bool) -> u64 {
    match seeded {
        true => check_reads_seeded(h, SEED, ReadSource::Counter).violations_total,
        false => check_reads_from(h, &|_| SEED.unread_at_start() as i64, ReadSource::Counter).violations_total,
    }
}

#[test]
fn a_delete_of_a_row_the_history_shows_read_changes_nothing() {
    let read_after = |h: &[Event]| bounds_of(h, Some(SEED)).last().copied();
    // Seeded read.
    let h = [ev(Delete, 1, (0, 10), Okay, 1), ev(ReadCount, 0, (20, 21), Okay, 2)];
    assert_eq!((read_after(&h), bounds_of(&h, None).last().copied()), (Some((2, 2)), Some((1, 2))));
    // Marked read by a mark_read that completed before the delete began.
    let h = [ev(MarkRead, 2, (0, 5), Okay, 1), ev(Delete, 2, (6, 10), Okay, 1), ev(ReadCount, 0, (20, 21), Okay, 1)];
    assert_eq!(read_after(&h), Some((1, 1)));
    // An unknown delete after it changed nothing either; a tie (the mark_read completed
    // in the microsecond the delete began) proves nothing.
    let h = [ev(MarkRead, 2, (0, 5), Okay, 1), ev(Delete, 2, (6, 10), Unknown, 0), ev(ReadCount, 0, (20, 21), Okay, 1)];
    assert_eq!(read_after(&h), Some((1, 1)));
    let h = [ev(MarkRead, 2, (0, 6), Okay, 1), ev(Delete, 2, (6, 10), Unknown, 0), ev(ReadCount, 0, (20, 21), Okay, 1)];
    assert_eq!(read_after(&h), Some((0, 1)));
    // By a mark_all_read invoked after the row's create completed.
    let h = [
        ev(Create, 10, (0, 5), Okay, 1),
        ev(MarkAllRead, 0, (6, 8), Okay, 3),
        ev(Delete, 10, (9, 10), Okay, 1),
        ev(ReadCount, 0, (20, 21), Okay, 0),
    ];
    assert_eq!(read_after(&h), Some((0, 0)));
    // A create overlapping the mark_all_read, which changed only the seeded rows: the
    // row came after it and was unread when deleted, but the history cannot tell.
    let mut h = h;
    (h[0].complete_us, h[1].observed) = (7, 2);
    assert_eq!(read_after(&h), Some((0, 1)));
}

#[test]
fn only_ok_replies_prove_a_row_read() {
    let read_after = |mark: Event| {
        let h = [mark, ev(Delete, 2, (6, 10), Okay, 1), ev(ReadCount, 0, (20, 21), Okay, 1)];
        bounds_of(&h, Some(SEED)).last().copied()
    };
    // Unknown: each call alone may be -1 or 0 (the truth is 1 either way, but the bounds
    // sum each call's effect on its own).
    assert_eq!(read_after(ev(MarkRead, 2, (0, 5), Unknown, 0)), Some((0, 2)));
    assert_eq!(read_after(ev(MarkRead, 2, (0, 5), Fail, 0)), Some((1, 1)), "a fail left it unread");
    // (An unknown mark_all_read may have cleared everything: the read's lower bound is 0.)
    assert_eq!(read_after(ev(MarkAllRead, 0, (0, 5), Unknown, 0)), Some((0, 2)));
    assert_eq!(read_after(ev(MarkAllRead, 0, (0, 5), Okay, 2)), Some((0, 0)));
    // A mark_read that changed nothing on a row that existed: it was read already.
    assert_eq!(read_after(ev(MarkReadDup, 2, (0, 5), Okay, 0)), Some((2, 2)));
    // ... on a row not known to exist yet, nothing is proven.
    let h = [
        ev(MarkRead, 10, (0, 5), Okay, 0),
        ev(Create, 10, (3, 8), Okay, 1),
        ev(Delete, 10, (9, 10), Okay, 1),
        ev(ReadCount, 0, (20, 21), Okay, 2),
    ];
    assert_eq!(bounds_of(&h, Some(SEED)).last().copied(), Some((2, 2)), "unread when deleted: -1");
}

#[test]
fn unknown_calls_on_a_row_known_read_change_nothing_either() {
    let h =
        [ev(Delete, 1, (0, 10), Unknown, 0), ev(MarkRead, 1, (0, 10), Unknown, 0), ev(ReadCount, 0, (20, 21), Okay, 2)];
    assert_eq!(bounds_of(&h, Some(SEED)), [(2, 2)]);
    assert_eq!(bounds_of(&h, None), [(0, 2)]);
}

#[test]
fn a_delete_of_a_row_still_unread_removes_one() {
    // Id 2 starts unread and nothing may have marked it before the delete ended: a
    // counter that forgot the delete shows 2 and is caught, which -1..0 allowed.
    let h = [ev(Delete, 2, (0, 10), Okay, 1), ev(ReadCount, 0, (20, 21), Okay, 2)];
    assert_eq!(bounds_of(&h, Some(SEED)), [(1, 1)]);
    assert_eq!((flagged(&h, true), flagged(&h, false)), (1, 0));
    // A mark_all_read overlapping the delete may have read it first.
    let h =
        [ev(MarkAllRead, 0, (5, 15), Okay, 2), ev(Delete, 2, (0, 10), Okay, 1), ev(ReadCount, 0, (20, 21), Okay, 0)];
    assert_eq!(bounds_of(&h, Some(SEED)), [(0, 0)], "-2 or -1 then 0 (read) or -1: 0 either way here");
    // A mark_all_read that completed before the row was created cannot have.
    let h = [
        ev(MarkAllRead, 0, (0, 4), Okay, 2),
        ev(Create, 10, (5, 8), Okay, 1),
        ev(Delete, 10, (9, 12), Okay, 1),
        ev(ReadCount, 0, (20, 21), Okay, 0),
    ];
    assert_eq!(bounds_of(&h, Some(SEED)), [(0, 0)]);
    assert_eq!(bounds_of(&h, None), [(0, 1)]);
}

/// A design whose delete always decrements (the held-out mutant of issue 34): each
/// round marks an unread seeded row read, deletes it, then reads. Every value the
/// counter shows stays >= 0, so only bounds that know the row was read catch it.
#[test]
fn a_delete_always_decrements_counter_is_caught_by_reads_at_counts_above_zero() {
    let seed = SeedSpec { n_users: 1, notifications_per_user: 12, initial_read_per_user: 2 };
    let (mut truth, mut counter) = (10i64, 10i64);
    let mut h = Vec::new();
    for (k, id) in (3..=7).enumerate() {
        let t = 100 * k as u64;
        h.push(ev(MarkRead, id, (t, t + 20), Okay, 1));
        (truth, counter) = (truth - 1, counter - 1);
        // A read overlapping the delete: either value is fine.
        h.push(ev(Delete, id, (t + 30, t + 50), Okay, 1));
        h.push(ev(ReadCount, 0, (t + 40, t + 45), Okay, counter));
        counter -= 1;
        h.push(ev(ReadCount, 0, (t + 60, t + 61), Okay, counter));
    }
    assert!(h.iter().filter(|e| e.op == ReadCount).all(|e| e.observed >= 0));
    assert_eq!((truth, counter), (5, 0));
    let new = check_reads_seeded(&h, seed, ReadSource::Counter);
    let old = check_reads(&h, &|_| 10);
    // Every read from the first delete's end on: the counter stays one low per delete.
    assert_eq!((old.violations_total, new.violations_total), (0, 9), "{:?}", new.violations);
    assert!(new.violations.iter().all(|v| v.read.observed >= 0 && v.read.observed < v.lo));
    // The same calls with a correct counter (the delete of a read row leaves it): none.
    let mut right = h.clone();
    for e in right.iter_mut().filter(|e| e.op == ReadCount) {
        e.observed = 9 - (e.invoke_us / 100) as i64;
    }
    assert_eq!(check_reads_seeded(&right, seed, ReadSource::Counter).violations_total, 0);
}

/// What the brute force knows of one call: its kind, row, interval and reply.
#[derive(Clone, Copy, Debug)]
struct Step {
    op: OpKind,
    id: i64,
    inv: u64,
    comp: u64,
    /// Ok(reply), or None for an unknown outcome (applied or not).
    reply: Option<i64>,
    /// Index of the Ok read this step is (its values are collected).
    read: Option<usize>,
    /// A step that must come before this one (an earlier attempt of the same call).
    after: Option<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Row {
    Absent,
    Unread,
    Read,
    Gone,
}

/// Rows 1..=3 (seeded) and 10.. (created), one slot each.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct State([Row; 16]);

impl State {
    fn start() -> State {
        let mut rows = [Row::Absent; 16];
        for (id, read) in SEED.rows_of(1) {
            rows[slot(id)] = if read { Row::Read } else { Row::Unread };
        }
        State(rows)
    }

    fn unread(&self) -> i64 {
        self.0.iter().filter(|r| **r == Row::Unread).count() as i64
    }

    /// Applies one call at its instant and returns its reply.
    fn apply(&mut self, op: OpKind, id: i64) -> i64 {
        if matches!(op, MarkAllRead | ReadCount) {
            let n = self.unread();
            if op == MarkAllRead {
                self.0.iter_mut().filter(|r| **r == Row::Unread).for_each(|r| *r = Row::Read);
            }
            return n;
        }
        let r = &mut self.0[slot(id)];
        match (op, *r) {
            (Create, Row::Absent) => *r = Row::Unread,
            (MarkRead | MarkReadDup, Row::Unread) => *r = Row::Read,
            (Delete, Row::Unread | Row::Read) => *r = Row::Gone,
            _ => return 0,
        }
        1
    }
}

fn slot(id: i64) -> usize {
    if id < 10 { (id - 1) as usize } else { (id - 10 + 3) as usize }
}

/// Every value each read can show over every linearization that explains the
/// replies: a depth-first search over the orders real time allows (a step may go
/// next when every step that completed before it began is placed) and over whether
/// each unknown step applied, remembering which (placed, state) nodes can still be
/// completed. `seen[i]`: a bit per value of read `i` in some complete linearization.
fn linearizable_values(steps: &[Step], n_reads: usize) -> Vec<u32> {
    type Memo = HashMap<(u32, State), bool>;
    fn go(steps: &[Step], placed: u32, st: State, memo: &mut Memo, seen: &mut [u32]) -> bool {
        if placed.count_ones() as usize == steps.len() {
            return true;
        }
        if let Some(done) = memo.get(&(placed, st)) {
            return *done;
        }
        let mut any = false;
        for (i, s) in steps.iter().enumerate() {
            let ready = |j: usize, o: &Step| placed & (1 << j) != 0 || !(o.comp < s.inv || s.after == Some(j));
            if placed & (1 << i) != 0 || !steps.iter().enumerate().all(|(j, o)| ready(j, o)) {
                continue;
            }
            let mut next = st;
            let reply = next.apply(s.op, s.id);
            let with = placed | 1 << i;
            match (s.read, s.reply) {
                (Some(r), _) => {
                    if go(steps, with, next, memo, seen) {
                        seen[r] |= 1 << reply;
                        any = true;
                    }
                }
                (None, Some(want)) => any |= want == reply && go(steps, with, next, memo, seen),
                (None, None) => {
                    let applied = go(steps, with, next, memo, seen);
                    any |= go(steps, with, st, memo, seen) || applied;
                }
            }
        }
        memo.insert((placed, st), any);
        any
    }
    let mut seen = vec![0u32; n_reads];
    go(steps, 0, State::start(), &mut HashMap::new(), &mut seen);
    seen
}

/// One generated call: (kind, row choice, start, length, instant within, outcome,
/// retried after an unknown attempt).
type Raw = (u8, u8, u64, u64, u64, u8, bool);

/// A history of one user made by a correct counter: each call takes effect at its
/// chosen instant (unknown ones applied or not), so every reply and read is real;
/// `buggy` makes the counter decrement on every delete that removed a row (the
/// delete-always-decrements mutant) while the replies stay the truth's.
fn run(raw: &[Raw], buggy: bool) -> (Vec<Event>, Vec<Step>) {
    let mut creates = 0;
    // (instant, call, final attempt, applied: None for a known outcome).
    let mut calls: Vec<(u64, usize, bool, Option<bool>)> = Vec::new();
    let mut out = Vec::with_capacity(raw.len());
    for (i, &(k, row, start, len, at, o, retried)) in raw.iter().enumerate() {
        let op = [Create, MarkRead, MarkReadDup, Delete, MarkAllRead, ReadCount][k as usize % 6];
        let id = match op {
            Create => {
                creates += 1;
                9 + creates
            }
            MarkRead | MarkReadDup | Delete => [1, 2, 2, 10, 10, 11][row as usize % 6],
            _ => 0,
        };
        let outcome = match (op, o) {
            (ReadCount, _) => Okay,
            (_, 0) => Fail,
            (_, 1 | 2) => Unknown,
            _ => Okay,
        };
        let mut e = ev(op, id, (start, start + len), outcome, 0);
        e.unknown_attempts = u32::from(retried && outcome == Okay && matches!(op, MarkRead | Delete));
        calls.push((start + at % (len + 1), i, true, (outcome == Unknown).then_some(o == 1)));
        if e.unknown_attempts > 0 {
            // An earlier attempt at the call's start, applied or not.
            calls.push((start, i, false, Some(at % 2 == 0)));
        }
        out.push(e);
    }
    calls.sort_unstable();
    let (mut st, mut counter) = (State::start(), SEED.unread_at_start() as i64);
    for (_, i, last, applied) in calls {
        let e = &mut out[i];
        let before = st;
        let reply = if e.outcome == Fail || applied == Some(false) { 0 } else { st.apply(e.op, e.id) };
        counter += st.unread() - before.unread();
        if buggy && e.op == Delete && reply > 0 && before.0[slot(e.id)] == Row::Read {
            counter -= 1;
        }
        if last && e.outcome != Unknown {
            e.observed = if e.op == ReadCount { counter } else { reply };
        }
    }
    let steps = steps_of(&out);
    (out, steps)
}

/// The brute force's steps of a history: fails dropped (they did nothing), a call
/// retried after an unknown attempt split into that attempt and itself.
fn steps_of(h: &[Event]) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut reads = 0;
    for e in h.iter().filter(|e| e.outcome != Fail) {
        let base =
            Step { op: e.op, id: e.id, inv: e.invoke_us, comp: e.complete_us, reply: None, read: None, after: None };
        if e.op == ReadCount {
            steps.push(Step { read: Some(reads), ..base });
            reads += 1;
            continue;
        }
        if e.unknown_attempts > 0 {
            steps.push(base);
            steps.push(Step { reply: Some(e.observed), after: Some(steps.len() - 1), ..base });
        } else {
            steps.push(Step { reply: (e.outcome == Okay).then_some(e.observed), ..base });
        }
    }
    steps
}

fn raw_calls() -> impl proptest::strategy::Strategy<Value = Vec<Raw>> {
    prop::collection::vec((0u8..6, 0u8..6, 0u64..16, 0u64..8, 0u64..100, 0u8..12, prop::bool::weighted(0.15)), 3..=8)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20000, ..ProptestConfig::default() })]

    /// Every value some linearization gives a read is inside the read's bounds (no
    /// false positive), and the row facts only ever narrow the bounds.
    #[test]
    fn row_bounds_hold_every_linearizable_value_and_never_widen(raw in raw_calls()) {
        let (h, steps) = run(&raw, false);
        let new = bounds_of(&h, Some(SEED));
        let old = bounds_of(&h, None);
        let seen = linearizable_values(&steps, new.len());
        prop_assert_eq!(flagged(&h, true), 0, "{:?}", h);
        for (i, ((lo, hi), (old_lo, old_hi))) in new.iter().zip(&old).enumerate() {
            prop_assert!(seen[i] != 0, "read {} has no linearization: {:?}", i, h);
            for v in (0..32).filter(|v| seen[i] & (1 << v) != 0) {
                prop_assert!((*lo..=*hi).contains(&v), "read {} may show {} outside {}..={}: {:?}", i, v, lo, hi, h);
            }
            prop_assert!(old_lo <= lo && hi <= old_hi, "read {}: {}..={} wider than {}..={}", i, lo, hi, old_lo, old_hi);
        }
    }

    /// With the delete-always-decrements counter, every read the old bounds flag is
    /// flagged, and a built case (a row marked read, then deleted, then a read) always
    /// is, at a count that is not negative.
    #[test]
    fn a_delete_always_decrements_counter_is_flagged_at_least_as_often(raw in raw_calls()) {
        let (h, _) = run(&raw, true);
        prop_assert!(flagged(&h, true) >= flagged(&h, false));
        let built: Vec<Raw> =
            [(1, 1, 0, 5, 50, 11, false), (3, 1, 10, 5, 50, 11, false), (5, 0, 20, 1, 0, 11, false)]
                .into_iter()
                .chain(raw.iter().map(|r| (r.0, r.1, r.2 + 30, r.3, r.4, r.5, r.6)))
                .collect();
        let (h, _) = run(&built, true);
        prop_assert_eq!(h[2].observed, 0);
        let new = check_reads_seeded(&h, SEED, ReadSource::Counter);
        prop_assert!(new.violations.iter().any(|v| v.read == h[2]), "{:?}", h);
        prop_assert!(!check_reads(&h, &|_| 2).violations.iter().any(|v| v.read == h[2]));
    }
}

#[test]
fn a_delete_racing_a_mark_read_that_changed_the_row_removed_a_read_row() {
    // Both replied 1: the mark_read came first in any order that explains the replies,
    // so a counter that went down twice (the delete race) is caught.
    let h = [ev(MarkRead, 2, (0, 10), Okay, 1), ev(Delete, 2, (5, 12), Okay, 1), ev(ReadCount, 0, (20, 21), Okay, 0)];
    assert_eq!((bounds_of(&h, Some(SEED)), bounds_of(&h, None)), (vec![(1, 1)], vec![(0, 1)]));
}
