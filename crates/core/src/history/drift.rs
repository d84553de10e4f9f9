//! Explaining one drifted user: the causes a final counter can differ from the truth
//! for, tried most specific first, each a function that finds its evidence or declines.

use std::collections::BTreeMap;

use super::Event;
use super::evidence::{
    deletes_of_read_rows, lowering_race, overlap, overlapped_writes, overlapping_writes, racing_creates, transitions,
    zeroing_race,
};
use super::found::{Acc, Context, Witness};
use crate::anomaly::AnomalyKind;
use crate::check::CheckInput;
use crate::model::{NotificationId, OpKind, Outcome, UserId};
use crate::seed::SeedSpec;

/// The cause named for one drifted user: the anomaly, its ops and notification, and why.
struct Cause {
    kind: AnomalyKind,
    ops: Vec<Event>,
    id: NotificationId,
    note: String,
}

impl Cause {
    fn new(kind: AnomalyKind, ops: Vec<Event>, id: NotificationId, note: impl Into<String>) -> Cause {
        Cause { kind, ops, id, note: note.into() }
    }
}

/// What one drifted user's own calls say, before the budgets shared by every user are
/// spent: the causes found ahead of the budgets in `explain`'s order, the first one
/// after them, (when that is the zeroing race) the stale-count cause instead, and (when
/// it is the zeroing race or a stale count that either mechanism could leave) the
/// read-modify-write one.
pub(super) struct Prelim {
    user: UserId,
    row: CheckInput,
    drift: i64,
    ahead: Option<Cause>,
    after: Cause,
    stale_alt: Option<Cause>,
    rmw_alt: Option<Cause>,
    /// A counter too high with only creates racing its mark_all_reads: a stale count
    /// that a read-modify-write mark_all_read cannot leave.
    stale_only: bool,
}

/// The `Prelim` of each user in `mismatched` (its counter differs from the truth) from
/// `events`, which must hold every call of those users (others may be there too).
pub(super) fn prelims(events: &[Event], mismatched: &BTreeMap<UserId, &CheckInput>, cx: Context) -> Vec<Prelim> {
    let mut by_user: BTreeMap<UserId, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| mismatched.contains_key(&e.user)) {
        by_user.entry(e.user).or_default().push(e);
    }
    let mut out = Vec::with_capacity(mismatched.len());
    for (user, row) in mismatched {
        let evs = by_user.get(user).map(Vec::as_slice).unwrap_or_default();
        let drift = row.counter.unwrap_or(0) - row.truth;
        // Unknown outcomes before the double claim: a call retried after one, a
        // scheduled failover's lost acknowledged writes, a call that may have applied
        // in part; two claims of one row can be what such a call left behind.
        let ahead = retried_apply(evs)
            .or_else(|| lost_on_failover(evs, drift, cx.failover_us))
            .or_else(|| half_applied(evs, drift))
            .or_else(|| double_claim(evs, drift));
        let after = explain_after_budgets(evs, drift, cx);
        let zeroing = after.kind == AnomalyKind::LostIncrement && after.ops.iter().any(|e| e.op == OpKind::MarkAllRead);
        let stale_alt = if zeroing { stale_instead_of_zeroing(evs, drift) } else { None };
        let stale_high = drift > 0 && after.kind == AnomalyKind::StaleMarkAllRead;
        let lowering = if stale_high { lowering_race(evs) } else { None };
        let rmw_alt = match lowering {
            Some((m, d)) => Some(rmw_instead(&[*m, *d], 0)),
            None if zeroing || after.kind == AnomalyKind::StaleMarkAllRead => Some(rmw_instead(&after.ops, after.id)),
            None => None,
        };
        let stale_only = stale_high && lowering.is_none();
        out.push(Prelim { user: *user, row: **row, drift, ahead, after, stale_alt, rmw_alt, stale_only });
    }
    out
}

/// One witness per user whose final counter differs from the truth, from the users'
/// `Prelim`s (any order; every drifted user's).
/// The flusher's own counts of lost and doubled claims, and the broker consumer's count
/// of redelivered messages it applied again, are budgets shared by the users, spent in
/// user order. A zeroing mark_all_read can only lose increments; one that
/// subtracts a stale count also leaves counters too high. Once a counter too high at a
/// mark_all_read's overlap shows the latter in this run, a user whose history shows both
/// mechanisms (a racing create and an overlapping mark_all_read) is named by it. Likewise
/// a counter too high where only decrements raced a mark_all_read shows one that reads
/// the counter and writes it back (`lost_update`): unless the run also showed a stale
/// count beyond doubt (`Prelim::stale_only`), the users either could explain are named by it.
pub(super) fn explain_mismatches(acc: &mut Acc, mut prelims: Vec<Prelim>, cx: Context) {
    prelims.sort_by_key(|p| p.user);
    let mut budget =
        Budget { lost_flushes: cx.lost_flushes, double_flushes: cx.double_flushes, double_applies: cx.double_applies };
    let mut causes = Vec::with_capacity(prelims.len());
    let mut stale_only = false;
    for p in prelims {
        let c = match p.ahead {
            Some(c) => c,
            None => flush_claim(&mut budget).or_else(|| redelivered_apply(&mut budget, p.drift)).unwrap_or(p.after),
        };
        causes.push((p.user, p.row, p.drift, c, p.stale_alt, p.rmw_alt));
        stale_only |= p.stale_only;
    }
    let with_all = |c: &Cause| c.ops.iter().any(|e| e.op == OpKind::MarkAllRead);
    let stale_shown = causes.iter().any(|(_, _, d, c, _, _)| *d > 0 && c.kind == AnomalyKind::StaleMarkAllRead);
    // Shown only by a witness whose ops all had a known outcome at the first attempt: a
    // retried or unknown op that applied twice can also leave a counter too high.
    let certain = |c: &Cause| c.ops.iter().all(|e| e.outcome != Outcome::Unknown && e.unknown_attempts == 0);
    let rmw_shown = !stale_only
        && causes.iter().any(|(.., c, _, _)| c.kind == AnomalyKind::LostUpdate && with_all(c) && certain(c));
    for (user, row, _, mut c, alt, rmw) in causes {
        let either = matches!(c.kind, AnomalyKind::LostIncrement | AnomalyKind::StaleMarkAllRead) && with_all(&c);
        if rmw_shown && either {
            c = rmw.unwrap_or(c);
        } else if stale_shown && c.kind == AnomalyKind::LostIncrement && with_all(&c) {
            c = alt.unwrap_or(c);
        }
        let observed = row.counter.unwrap_or(0);
        let w = Witness { user, id: c.id, ops: c.ops, expected: row.truth, observed, note: c.note };
        acc.add(c.kind, w);
    }
}

/// The stale-count cause for a user first explained by the zeroing race, when the run
/// has shown that this strategy's mark_all_read subtracts a stale count.
fn stale_instead_of_zeroing(evs: &[&Event], drift: i64) -> Option<Cause> {
    let mut c = overlapping_pair(evs, drift).filter(|c| c.kind == AnomalyKind::StaleMarkAllRead)?;
    c.note.push_str(
        "; a create raced it too, but this run's mark_all_read also left a counter too high, which zeroing cannot",
    );
    Some(c)
}

/// The read-modify-write cause for a user first named by the zeroing race or a stale
/// count (`ops`: the mark_all_read and the call it raced), once the run has shown a
/// mark_all_read that writes back a counter it read.
fn rmw_instead(ops: &[Event], id: NotificationId) -> Cause {
    let note =
        "a mark_all_read wrote back the counter it had read, less its rows; this call's change in between was lost";
    Cause::new(AnomalyKind::LostUpdate, ops.to_vec(), id, note)
}

/// The first cause, in `classify`'s order, that `evs` (one user's calls) show for a
/// counter `drift` away from the truth (positive: too high), among those tried after
/// the budgets (`explain_mismatches` tries the ones ahead of them, then the budgets).
fn explain_after_budgets(evs: &[&Event], drift: i64, cx: Context) -> Cause {
    create_racing_mark_all_read(evs, drift)
        .or_else(|| delete_of_read_row(evs, drift, cx.seed))
        .or_else(|| overlapping_pair(evs, drift))
        .unwrap_or_else(|| unexplained(cx.reconciler))
}

/// Two overlapping-or-not ok calls that each claimed the same row's transition: the
/// counter went down twice for one row.
fn double_claim(evs: &[&Event], drift: i64) -> Option<Cause> {
    if drift >= 0 {
        return None;
    }
    let mut claims: BTreeMap<NotificationId, Vec<&Event>> = BTreeMap::new();
    for e in evs.iter().filter(|e| transitions(e)) {
        claims.entry(e.id).or_default().push(e);
    }
    // A delete overlapping a mark_read of the same row is preferred as the witness:
    // it names the rarer race; two mark_reads otherwise.
    let delete_race = claims.iter().find_map(|(id, cs)| {
        let del = cs.iter().find(|e| e.op == OpKind::Delete)?;
        let m = cs.iter().find(|m| m.op != OpKind::Delete && overlap(m, del))?;
        Some((*id, vec![**m, **del]))
    });
    let same_kind = |deletes: bool| {
        claims.iter().find_map(|(id, cs)| {
            let v: Vec<&&Event> = cs.iter().filter(|e| (e.op == OpKind::Delete) == deletes).collect();
            (v.len() >= 2).then(|| (*id, vec![**v[0], **v[1]]))
        })
    };
    if let Some((id, ops)) = delete_race.or_else(|| same_kind(false)) {
        return Some(Cause::new(
            AnomalyKind::DoubleDecrement,
            ops,
            id,
            "two calls each claimed this notification's transition",
        ));
    }
    // Two deletes of one unread row, each answered as the one that removed it.
    let (id, ops) = same_kind(true)?;
    Some(Cause::new(
        AnomalyKind::DoubleDecrement,
        ops,
        id,
        "two deletes of this unread notification each lowered the counter",
    ))
}

/// An op that changed something after being run again on an unknown outcome.
fn retried_apply(evs: &[&Event]) -> Option<Cause> {
    let e = evs
        .iter()
        .find(|e| e.unknown_attempts > 0 && e.outcome == Outcome::Ok && e.op != OpKind::ReadCount && e.observed > 0)?;
    let note = format!("retried after {} unknown attempt(s)", e.unknown_attempts);
    Some(Cause::new(AnomalyKind::DoubleApplyAfterRetry, vec![**e], e.id, note))
}

/// Ok calls that changed the counter while a failover ran, each lost one moving the
/// counter the drift's way (a lost create leaves it too low; a lost mark_read, delete
/// or mark_all_read too high): acknowledged, then dropped with the old primary.
fn lost_on_failover(evs: &[&Event], drift: i64, window: Option<(u64, u64)>) -> Option<Cause> {
    let (from, to) = window?;
    let lost: Vec<Event> = evs
        .iter()
        .filter(|e| e.outcome == Outcome::Ok && e.op != OpKind::ReadCount && e.observed > 0)
        .filter(|e| e.complete_us >= from && e.invoke_us <= to)
        .filter(|e| (e.op == OpKind::Create) == (drift < 0))
        .map(|e| **e)
        .collect();
    let first = lost.first()?;
    let note = format!(
        "{} acknowledged change(s) between {} and {} ms, while the shard failed over",
        lost.len(),
        from / 1000,
        to / 1000
    );
    Some(Cause::new(AnomalyKind::LostOnFailover, lost.iter().take(4).copied().collect(), first.id, note))
}

/// What the strategy itself counted, left to charge drifted users to.
struct Budget {
    lost_flushes: u64,
    double_flushes: u64,
    /// (raised, lowered): doubled deltas by sign.
    double_applies: (u64, u64),
}

/// A buffered delta of either sign: lost, or applied twice. Each drifted user is charged
/// to the flusher's own count of such claims, lost ones first.
fn flush_claim(budget: &mut Budget) -> Option<Cause> {
    if budget.lost_flushes + budget.double_flushes == 0 {
        return None;
    }
    Some(if budget.lost_flushes == 0 {
        budget.double_flushes -= 1;
        Cause::new(AnomalyKind::DoubleFlush, Vec::new(), 0, "the flusher applied a claimed delta twice")
    } else {
        budget.lost_flushes -= 1;
        Cause::new(AnomalyKind::LostFlush, Vec::new(), 0, "the flusher lost a claimed delta")
    })
}

/// A broker message applied again after redelivery, of the drift's sign: charged to the
/// consumer's own count of such applies (never inferred from the drift alone).
fn redelivered_apply(budget: &mut Budget, drift: i64) -> Option<Cause> {
    let left = if drift > 0 { &mut budget.double_applies.0 } else { &mut budget.double_applies.1 };
    *left = left.checked_sub(1)?;
    let note = "the consumer applied a redelivered message whose first apply had committed";
    Some(Cause::new(AnomalyKind::DoubleApplyAfterRedelivery, Vec::new(), 0, note))
}

/// A create overlapping a mark_all_read that zeroed the counter without it.
fn create_racing_mark_all_read(evs: &[&Event], drift: i64) -> Option<Cause> {
    if drift >= 0 {
        return None;
    }
    let (m, c) = zeroing_race(evs, u64::MAX)?;
    // Each racing create loses at most one increment: more drift than racing creates is
    // something else (a stale count subtracted, say).
    (-drift <= racing_creates(evs) as i64)
        .then(|| Cause::new(AnomalyKind::LostIncrement, vec![*c, *m], c.id, "a create raced mark_all_read"))
}

/// An op with an unknown outcome that applied only in part. Each such op moves the
/// counter one away from the truth at most (a mark_all_read any amount), so there must
/// be enough of them to account for the drift.
fn half_applied(evs: &[&Event], drift: i64) -> Option<Cause> {
    let unknown: Vec<&&Event> =
        evs.iter().filter(|e| e.outcome == Outcome::Unknown && e.op != OpKind::ReadCount).collect();
    let e = unknown.first()?;
    let any_amount = unknown.iter().any(|e| e.op == OpKind::MarkAllRead);
    if !any_amount && (unknown.len() as u64) < drift.unsigned_abs() {
        return None;
    }
    // The half lost is the counter's when an unknown op could have moved it the drift's
    // way by losing its counter step (a create lost +1: too low; a decrement lost -1: too
    // high); else the counter step landed and the row's was lost (a design where Redis
    // decides and SQL follows: a mark_read whose UPDATE failed leaves it too low).
    let raises = |e: &&&Event| e.op == OpKind::Create;
    let lost_counter = unknown.iter().find(|e| raises(e) == (drift < 0));
    let (kind, e, note) = match (lost_counter, drift > 0) {
        (Some(c), true) => {
            (AnomalyKind::LostDecrement, c, "an op with an unknown outcome half applied: its decrement was lost")
        }
        (Some(c), false) => {
            (AnomalyKind::LostIncrement, c, "an op with an unknown outcome half applied: its increment was lost")
        }
        (None, _) => (
            AnomalyKind::LostRowChange,
            e,
            "an op with an unknown outcome moved the counter, but its row change was lost",
        ),
    };
    Some(Cause::new(kind, vec![***e], e.id, note))
}

/// Deletes of rows already read that lowered the counter anyway.
fn delete_of_read_row(evs: &[&Event], drift: i64, seed: SeedSpec) -> Option<Cause> {
    if drift >= 0 {
        return None;
    }
    let (d, n) = deletes_of_read_rows(evs, seed);
    let d = d?;
    // Each such delete lowers the counter by one at most: it must be able to account
    // for the drift.
    let note = "a delete of a notification already read; the counter went down anyway";
    (n >= drift.unsigned_abs()).then(|| Cause::new(AnomalyKind::WrongDeleteAdjustment, vec![*d], d.id, note))
}

/// Two overlapping calls that both moved the counter: a read-modify-write lost. A
/// mark_all_read's stale count can be off by any amount; plain lost updates lose one
/// call's delta each, so there must be at least as many overlapping calls as drift.
fn overlapping_pair(evs: &[&Event], drift: i64) -> Option<Cause> {
    let (a, b) = overlapping_writes(evs)?;
    if [a, b].iter().any(|e| e.op == OpKind::MarkAllRead) {
        // Too high with no create racing a mark_all_read: a decrement it raced was
        // overwritten, which only a read-modify-write of the counter does.
        if drift > 0
            && zeroing_race(evs, u64::MAX).is_none()
            && let Some((m, d)) = lowering_race(evs)
        {
            return Some(rmw_instead(&[*m, *d], 0));
        }
        let note = "a mark_all_read overlapped another call that moved the counter";
        return Some(Cause::new(AnomalyKind::StaleMarkAllRead, vec![*a, *b], 0, note));
    }
    let note = "two overlapping writes to this user's counter: one overwrote the other";
    (overlapped_writes(evs) >= drift.unsigned_abs()).then(|| Cause::new(AnomalyKind::LostUpdate, vec![*a, *b], 0, note))
}

/// Nothing in the history explains the drift; with a reconciler, it also never healed.
fn unexplained(reconciler: bool) -> Cause {
    if reconciler {
        Cause::new(AnomalyKind::UnhealedDrift, Vec::new(), 0, "the reconciler never repaired it")
    } else {
        Cause::new(AnomalyKind::UnexplainedDrift, Vec::new(), 0, "no op in the history explains it")
    }
}
