//! The searches over one user's calls that find the evidence `classify` names: races
//! between overlapping calls, double claims of one row, deletes of rows already read.
//! Each is a sweep over the calls sorted by time, so classifying stays O(n log n).

use std::collections::HashMap;

use super::Event;
use crate::model::{NotificationId, OpKind, Outcome};
use crate::seed::SeedSpec;

/// A create overlapping a mark_all_read (both ok, both completed by `until`), found by a
/// sweep: creates sorted by invocation with a running maximum of their completion.
/// O((M + C) log C) for M mark_all_reads and C creates.
pub(super) fn zeroing_race<'a>(evs: &[&'a Event], until: u64) -> Option<(&'a Event, &'a Event)> {
    let done = |e: &&&'a Event| e.outcome == Outcome::Ok && e.complete_us <= until;
    let mut creates: Vec<&'a Event> = evs.iter().filter(done).filter(|e| e.op == OpKind::Create).copied().collect();
    if creates.is_empty() {
        return None;
    }
    creates.sort_by_key(|c| c.invoke_us);
    // best[i]: the create completing last among creates[..=i].
    let mut best: Vec<usize> = Vec::with_capacity(creates.len());
    for i in 0..creates.len() {
        let keep = i > 0 && creates[best[i - 1]].complete_us >= creates[i].complete_us;
        best.push(if keep { best[i - 1] } else { i });
    }
    evs.iter().filter(done).filter(|e| e.op == OpKind::MarkAllRead).find_map(|m| {
        // Creates invoked before m completed; the one completing last overlaps m if any does.
        let n = creates.partition_point(|c| c.invoke_us < m.complete_us);
        let c = creates[best.get(n.checked_sub(1)?)?.to_owned()];
        overlap(c, m).then_some((*m, c))
    })
}

/// An ok mark_all_read that changed rows overlapping another ok call of the same user
/// that lowered the counter (a mark_read or delete that changed its row, or another
/// mark_all_read that changed rows), found by a sweep as in `zeroing_race`. A
/// mark_all_read that reads the counter and writes back the value less its rows (HGET,
/// then HSET) loses such a decrement: the counter ends too high, which neither a zeroing
/// mark_all_read nor one subtracting a stale count can leave without a racing create.
/// O(n log n).
pub(super) fn lowering_race<'a>(evs: &[&'a Event]) -> Option<(&'a Event, &'a Event)> {
    let lowered = |e: &&&'a Event| e.outcome == Outcome::Ok && e.observed > 0;
    let alls: Vec<&'a Event> = evs.iter().filter(lowered).filter(|e| e.op == OpKind::MarkAllRead).copied().collect();
    if alls.is_empty() {
        return None;
    }
    let one_row = |e: &&&'a Event| matches!(e.op, OpKind::MarkRead | OpKind::MarkReadDup | OpKind::Delete);
    let mut rows: Vec<&'a Event> = evs.iter().filter(lowered).filter(one_row).copied().collect();
    rows.sort_by_key(|e| e.invoke_us);
    // latest[i]: the one completing last among rows[..=i].
    let mut latest: Vec<usize> = Vec::with_capacity(rows.len());
    for i in 0..rows.len() {
        let keep = i > 0 && rows[latest[i - 1]].complete_us >= rows[i].complete_us;
        latest.push(if keep { latest[i - 1] } else { i });
    }
    let by_row = alls.iter().find_map(|m| {
        let n = rows.partition_point(|w| w.invoke_us < m.complete_us);
        let w = rows[*latest.get(n.checked_sub(1)?)?];
        overlap(m, w).then_some((*m, w))
    });
    by_row.or_else(|| first_overlap(alls))
}

/// A create in flight at `read` (invoked before the read completed, completed after it
/// began, not failed) and a decrement that counted the create's row before the read
/// completed: an ok mark_all_read that changed rows, or an ok mark_read or delete of
/// that row, invoked before the create completed. In a design whose SQL decides and
/// whose counter follows in a later step, the decrement can land between the create's
/// commit and its increment; the read in between sees one too few. Each such create
/// explains one count short, so a read further below its lower bound (`short`) than
/// there are of them has another cause, and none is returned. The create that invoked
/// last is taken (the one most likely still pending). O(C x D) over one user.
pub(super) fn late_increment<'a>(evs: &[&'a Event], read: &Event, short: i64) -> Option<(&'a Event, &'a Event)> {
    let in_flight = |c: &&&'a Event| {
        c.op == OpKind::Create
            && c.outcome != Outcome::Fail
            && c.invoke_us < read.complete_us
            && c.complete_us > read.invoke_us
    };
    let counted = |c: &Event, d: &Event| {
        d.outcome == Outcome::Ok
            && d.observed > 0
            && d.invoke_us < read.complete_us
            && d.invoke_us < c.complete_us
            && match d.op {
                OpKind::MarkAllRead => d.complete_us > c.invoke_us,
                OpKind::MarkRead | OpKind::MarkReadDup | OpKind::Delete => d.id == c.id,
                _ => false,
            }
    };
    let mut creates: Vec<&'a Event> = evs.iter().filter(in_flight).copied().collect();
    creates.sort_by_key(|c| std::cmp::Reverse(c.invoke_us));
    let pairs: Vec<(&'a Event, &'a Event)> =
        creates.into_iter().filter_map(|c| evs.iter().find(|d| counted(c, d)).map(|d| (c, *d))).collect();
    (short <= pairs.len() as i64).then(|| pairs.first().copied()).flatten()
}

/// Ok deletes that removed a notification the history shows was read when the delete
/// began: seeded read, or marked read (mark_read, mark_all_read) by a call that completed
/// before the delete was invoked. A correct delete leaves the counter alone for them.
/// Returns the first and how many. O(n log n).
pub(super) fn deletes_of_read_rows<'a>(evs: &[&'a Event], seed: SeedSpec) -> (Option<&'a Event>, u64) {
    let ok: Vec<&'a Event> = evs.iter().filter(|e| e.outcome == Outcome::Ok).copied().collect();
    let seeded_read = |e: &Event| seed.seeded_state(e.user, e.id) == Some(true);
    let seeded = |e: &Event| seed.seeded_state(e.user, e.id).is_some();
    let mut created: HashMap<NotificationId, u64> = HashMap::new();
    let mut marked: HashMap<NotificationId, u64> = HashMap::new();
    for e in &ok {
        match e.op {
            OpKind::Create => {
                created.insert(e.id, e.complete_us);
            }
            OpKind::MarkRead | OpKind::MarkReadDup if e.observed > 0 => {
                let t = marked.entry(e.id).or_insert(u64::MAX);
                *t = (*t).min(e.complete_us);
            }
            _ => {}
        }
    }
    // Mark_all_reads by completion, with the latest invocation among those completed so
    // far: a row existing before that invocation was read once it completed.
    let mut all: Vec<(u64, u64)> =
        ok.iter().filter(|e| e.op == OpKind::MarkAllRead).map(|m| (m.complete_us, m.invoke_us)).collect();
    all.sort_unstable();
    let latest_invoke: Vec<u64> = all
        .iter()
        .scan(0u64, |mx, (_, inv)| {
            *mx = (*mx).max(*inv);
            Some(*mx)
        })
        .collect();
    let read_when_deleted = |d: &Event| {
        let by_mark = marked.get(&d.id).is_some_and(|t| *t < d.invoke_us);
        let n = all.partition_point(|(c, _)| *c < d.invoke_us);
        let existed = if seeded(d) { Some(0) } else { created.get(&d.id).copied() };
        let by_all = n > 0 && existed.is_some_and(|t| t < latest_invoke[n - 1]);
        seeded_read(d) || by_mark || by_all
    };
    let mut found = ok.iter().filter(|e| e.op == OpKind::Delete && e.observed > 0).filter(|d| read_when_deleted(d));
    let first = found.next().copied();
    (first, first.map_or(0, |_| 1 + found.count() as u64))
}

/// Two ok calls on one user that both moved its counter and overlapped in time: the
/// lost update's precondition (a read-modify-write of the counter by each). O(n log n).
/// A pair with a mark_all_read in it is preferred (it names the more specific cause).
pub(super) fn overlapping_writes<'a>(evs: &[&'a Event]) -> Option<(&'a Event, &'a Event)> {
    let moved = |e: &&&'a Event| {
        e.outcome == Outcome::Ok && (e.op == OpKind::Create || (e.op != OpKind::ReadCount && e.observed > 0))
    };
    let writes: Vec<&'a Event> = evs.iter().filter(moved).copied().collect();
    let (alls, mut others): (Vec<&'a Event>, Vec<&'a Event>) = writes.iter().partition(|e| e.op == OpKind::MarkAllRead);
    // Others by invocation, with the one completing latest so far: it overlaps a
    // mark_all_read m if any of those invoked before m completed does.
    others.sort_by_key(|e| e.invoke_us);
    let mut latest: Vec<usize> = Vec::with_capacity(others.len());
    for i in 0..others.len() {
        let keep = i > 0 && others[latest[i - 1]].complete_us >= others[i].complete_us;
        latest.push(if keep { latest[i - 1] } else { i });
    }
    let with_mark_all = alls.iter().find_map(|m| {
        let n = others.partition_point(|w| w.invoke_us < m.complete_us);
        let w = others[*latest.get(n.checked_sub(1)?)?];
        overlap(m, w).then_some((*m, w))
    });
    with_mark_all.or_else(|| first_overlap(writes))
}

/// How many of one user's counter-moving ok calls overlapped an earlier-invoked one: a
/// lost update needs such a pair, and loses one call's delta (1) at most, so this bounds
/// how much drift lost updates can explain. O(n log n).
pub(super) fn overlapped_writes(evs: &[&Event]) -> u64 {
    let mut writes: Vec<&Event> = evs
        .iter()
        .filter(|e| e.outcome == Outcome::Ok && e.op != OpKind::MarkAllRead)
        .filter(|e| e.op == OpKind::Create || (e.op != OpKind::ReadCount && e.observed > 0))
        .copied()
        .collect();
    writes.sort_by_key(|e| e.invoke_us);
    let mut latest_complete = 0u64;
    let mut n = 0;
    for (i, w) in writes.iter().enumerate() {
        if i > 0 && latest_complete > w.invoke_us {
            n += 1;
        }
        latest_complete = latest_complete.max(w.complete_us);
    }
    n
}

/// The first two of `writes` that overlap in time (a sweep by invocation time).
fn first_overlap<'a>(mut writes: Vec<&'a Event>) -> Option<(&'a Event, &'a Event)> {
    writes.sort_by_key(|e| e.invoke_us);
    let mut latest: Option<&'a Event> = None;
    for w in writes {
        if let Some(l) = latest
            && overlap(l, w)
        {
            return Some((l, w));
        }
        if latest.is_none_or(|l| w.complete_us > l.complete_us) {
            latest = Some(w);
        }
    }
    None
}

/// Ok creates that overlap some ok mark_all_read of the same user. O(n log n).
pub(super) fn racing_creates(evs: &[&Event]) -> u64 {
    let ok = |e: &&&Event| e.outcome == Outcome::Ok;
    let mut marks: Vec<&Event> = evs.iter().filter(ok).filter(|e| e.op == OpKind::MarkAllRead).copied().collect();
    marks.sort_by_key(|m| m.invoke_us);
    // latest[i]: the latest completion among marks[..=i].
    let latest: Vec<u64> = marks
        .iter()
        .scan(0u64, |mx, m| {
            *mx = (*mx).max(m.complete_us);
            Some(*mx)
        })
        .collect();
    let racing = |c: &&&Event| {
        let n = marks.partition_point(|m| m.invoke_us < c.complete_us);
        n > 0 && latest[n - 1] > c.invoke_us
    };
    evs.iter().filter(ok).filter(|e| e.op == OpKind::Create).filter(racing).count() as u64
}

/// Whether two calls overlapped in time (a shared endpoint is not an overlap).
pub(super) fn overlap(a: &Event, b: &Event) -> bool {
    a.invoke_us < b.complete_us && b.invoke_us < a.complete_us
}

/// An ok call that claimed its notification's transition: a mark_read that changed it,
/// a delete that removed it. Two such claims on one row cannot both be right.
pub(super) fn transitions(e: &Event) -> bool {
    e.outcome == Outcome::Ok
        && e.observed > 0
        && matches!(e.op, OpKind::MarkRead | OpKind::MarkReadDup | OpKind::Delete)
}
