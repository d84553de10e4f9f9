//! The anomaly taxonomy: `classify` names what went wrong in a run, from the final
//! counters, the read check and the post-settle reads, with witnesses from the history.
//! Explaining one drifted user is `drift`'s job; the independent families live here.

use std::collections::{BTreeMap, BTreeSet};

use super::evidence::{late_increment, zeroing_race};
use super::found::{Acc, Anomaly, Context, SettledRead, Witness};
use super::parts::{HistoryParts, OnePart};
use super::{Event, ReadCheck};
use crate::anomaly::AnomalyKind;
use crate::check::CheckInput;
use crate::model::{Guarantee, UserId};

/// Names what went wrong. Final-state mismatches (`rows`, counter against truth after
/// settle) are explained per user from the history, most specific cause first, unknown
/// outcomes before double claims: an op retried after an unknown outcome (double
/// apply); ok writes lost in a scheduled failover's window; an unknown op that half
/// applied, when there are enough of them for the drift (lost increment/decrement when
/// one could have lost its counter step the drift's way, else lost row change);
/// two ok calls that both claimed the same notification's transition (double
/// decrement); the strategy's own count of lost or doubled flush claims (either sign of
/// delta); a create racing a mark_all_read (lost increment); a delete of a row already
/// read (wrong delete adjustment, counter too low); two overlapping calls that
/// both moved the counter (stale mark_all_read when one of them is a mark_all_read, else
/// lost update; either sign; lost update too for a mark_all_read that wrote back what it
/// read, shown by a counter too high with only decrements racing it); else unexplained drift, or
/// unhealed drift when a reconciler ran. Independently: negative counters, reads out of
/// bounds (`reads`; not judged for eventual strategies), and post-settle reads that
/// differ from the truth (`settled`, exact and eventual strategies).
pub fn classify(
    events: &[Event],
    rows: &[CheckInput],
    reads: Option<&ReadCheck>,
    settled: &[SettledRead],
    cx: Context,
) -> Vec<Anomaly> {
    classify_parts(&mut OnePart(events), rows, reads, settled, cx).expect("a history in memory loads")
}

/// `classify` over a history in parts (`HistoryParts`): each part loaded alone, twice
/// (the users it holds explained, then the calls counted up to each first witness).
/// Gives what `classify` gives on the whole history: every cause is found within one
/// user's calls, and what is shared (the flusher's budgets, spent in user order; whether
/// the run showed a stale mark_all_read) is settled after every part was read.
pub fn classify_parts(
    parts: &mut dyn HistoryParts,
    rows: &[CheckInput],
    reads: Option<&ReadCheck>,
    settled: &[SettledRead],
    cx: Context,
) -> Result<Vec<Anomaly>, String> {
    let mut acc = Acc { found: BTreeMap::new() };
    let mismatched: BTreeMap<UserId, &CheckInput> =
        rows.iter().filter(|r| r.counter.unwrap_or(0) != r.truth).map(|r| (r.user, r)).collect();
    negative_counters(&mut acc, rows);
    // Eventual strategies may show stale values while the load runs; the others may not.
    // Replica reads are judged whatever the guarantee: their staleness has its own bound.
    let reads = reads
        .filter(|rc| cx.guarantee != Guarantee::Eventual || matches!(rc.source, super::ReadSource::Replica { .. }));
    let mut prelims = Vec::with_capacity(mismatched.len());
    for i in 0..parts.parts() {
        let owned: BTreeMap<UserId, &CheckInput> =
            mismatched.iter().filter(|(u, _)| parts.part_of(**u) == i).map(|(u, r)| (*u, *r)).collect();
        let evs = parts.load(i)?;
        prelims.extend(super::drift::prelims(&evs, &owned, cx));
        if let Some(rc) = reads {
            races_seen_by_reads(&mut acc, &evs, rc, mismatched.keys().copied().collect());
        }
    }
    super::drift::explain_mismatches(&mut acc, prelims, cx);
    if let Some(rc) = reads {
        reads_out_of_bounds(&mut acc, rc);
    }
    if cx.guarantee != Guarantee::None {
        stale_after_settle(&mut acc, settled);
    }
    acc.finish(parts)
}

fn negative_counters(acc: &mut Acc, rows: &[CheckInput]) {
    for r in rows.iter().filter(|r| r.counter.is_some_and(|c| c < 0)) {
        acc.add(
            AnomalyKind::NegativeCounter,
            Witness {
                user: r.user,
                id: 0,
                ops: Vec::new(),
                expected: r.truth,
                observed: r.counter.unwrap_or(0),
                note: "a counter below zero".into(),
            },
        );
    }
}

/// One witness per kept read violation; the count is every violation, kept or not. A
/// read from a cache whose value the counter had earlier, further back than the cache
/// may lag by design, is a stale cache read; the rest are out of bounds.
fn reads_out_of_bounds(acc: &mut Acc, rc: &ReadCheck) {
    for v in &rc.violations {
        let (kind, note) = match (v.stale_for_us, rc.source) {
            // Within the replica's bound: a figure (the staleness distribution), not an anomaly.
            (Some(back), super::ReadSource::Replica { bound_us }) if back <= bound_us.unwrap_or(0) => continue,
            (Some(back), super::ReadSource::Replica { bound_us }) => {
                (AnomalyKind::StaleRead, replica_note(back, v.distance, bound_us))
            }
            (Some(back), _) => (AnomalyKind::StaleCacheRead, stale_note(back, rc.allowed_lag_us.unwrap_or(0))),
            (None, _) => (AnomalyKind::ReadOutOfBounds, bounds_note(v.lo, v.hi)),
        };
        let w =
            Witness { user: v.read.user, id: 0, ops: vec![v.read], expected: v.lo, observed: v.read.observed, note };
        acc.add(kind, w);
    }
    if let Some(e) = acc.found.get_mut(&AnomalyKind::ReadOutOfBounds) {
        e.0 = rc.violations_total - rc.stale_total;
    }
    if let Some(e) = acc.found.get_mut(&AnomalyKind::StaleCacheRead) {
        e.0 = rc.stale_total;
    }
    if let Some(e) = acc.found.get_mut(&AnomalyKind::StaleRead) {
        e.0 = rc.stale_over_bound;
    }
}

fn replica_note(back_us: u64, counts: i64, bound_us: Option<u64>) -> String {
    let bound =
        bound_us.map_or("no staleness allowed".to_string(), |b| format!("the bound is {:.1} ms", b as f64 / 1e3));
    format!("the count as it stood {:.1} ms before the read began ({counts} off); {bound}", back_us as f64 / 1000.0)
}

fn bounds_note(lo: i64, hi: i64) -> String {
    if hi < lo {
        // Replies claimed more transitions than there were unread rows (e.g. two calls
        // each claimed one row): no value fits.
        format!("the replies before it claim the count fell to {hi}: no value fits")
    } else {
        format!("the history allows {lo}..={hi}")
    }
}

fn stale_note(back_us: u64, allowed_us: u64) -> String {
    format!(
        "the count as it stood {:.1} ms before the read began; the cache may lag {:.1} ms by design",
        back_us as f64 / 1000.0,
        allowed_us as f64 / 1000.0
    )
}

/// A read below its bounds, named from the calls that overlapped it: a create still in
/// flight at the read whose row an overlapping decrement had already counted
/// (`late_increment`), else a create that raced a mark_all_read of the same user: the
/// zeroing race, seen while it lasted even if a later mark_all_read hid it from the
/// final state. Once per user not already explained (`seen`: the drifted users).
fn races_seen_by_reads(acc: &mut Acc, events: &[Event], rc: &ReadCheck, mut seen: BTreeSet<UserId>) {
    let below = |v: &&super::ReadViolation| v.read.observed < v.lo && v.stale_for_us.is_none();
    let suspects: BTreeSet<UserId> = rc.violations.iter().filter(below).map(|v| v.read.user).collect();
    let mut user_events: BTreeMap<UserId, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| suspects.contains(&e.user) && !seen.contains(&e.user)) {
        user_events.entry(e.user).or_default().push(e);
    }
    for v in rc.violations.iter().filter(below) {
        let Some(evs) = user_events.get(&v.read.user) else { continue };
        if seen.contains(&v.read.user) {
            continue;
        }
        // One search per user: the earliest violation decides.
        seen.insert(v.read.user);
        if let Some((c, d)) = late_increment(evs, &v.read, v.lo - v.read.observed) {
            let note = "the create was still in flight at the read: its row was counted down before its +1 landed";
            let w = Witness {
                user: v.read.user,
                id: c.id,
                ops: vec![*c, *d, v.read],
                expected: v.lo,
                observed: v.read.observed,
                note: note.into(),
            };
            acc.add(AnomalyKind::LateIncrementVisible, w);
        } else if let Some((m, c)) = zeroing_race(evs, v.read.invoke_us) {
            acc.add(
                AnomalyKind::LostIncrement,
                Witness {
                    user: v.read.user,
                    id: c.id,
                    ops: vec![*c, *m, v.read],
                    expected: v.lo,
                    observed: v.read.observed,
                    note: "a create raced mark_all_read; a later read saw the count without it".into(),
                },
            );
        }
    }
}

fn stale_after_settle(acc: &mut Acc, settled: &[SettledRead]) {
    for s in settled.iter().filter(|s| s.shown != s.truth) {
        acc.add(
            AnomalyKind::StaleAfterSettle,
            Witness {
                user: s.user,
                id: 0,
                ops: Vec::new(),
                expected: s.truth,
                observed: s.shown,
                note: "read_count after settle".into(),
            },
        );
    }
}
