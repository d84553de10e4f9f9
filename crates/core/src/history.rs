//! The recorded history of a run (one event per call) and the checks that read it:
//! every `read_count` judged against bounds the history allows, and the named anomalies
//! (with witnesses) that explain a counter the final check found wrong.

use std::collections::{BTreeMap, HashMap};

use crate::anomaly::AnomalyKind;
use crate::check::CheckInput;
use crate::model::{Guarantee, NotificationId, OpKind, Outcome, UserId};

/// One call as the driver saw it. Times are microseconds from the start of the load.
/// `observed` is what the call replied: mark_read / mark_read_dup / delete 1 when it
/// changed something (0 not), mark_all_read how many it changed, read_count the value
/// shown, create 1. `unknown_attempts` counts earlier attempts of this op whose outcome
/// was unknown and that a retry-on-unknown policy ran again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub worker: u32,
    pub op: OpKind,
    pub user: UserId,
    /// The notification acted on (created, marked, deleted); 0 when none.
    pub id: NotificationId,
    pub invoke_us: u64,
    pub complete_us: u64,
    pub outcome: Outcome,
    pub observed: i64,
    pub attempts: u32,
    pub unknown_attempts: u32,
}

/// Witnesses kept per anomaly.
pub const MAX_WITNESSES: usize = 8;
/// Read violations kept for explaining (the rest are only counted).
pub const MAX_KEPT_VIOLATIONS: usize = 10_000;

/// The effect an op may have had on its user's true unread count: `[lo, hi]`.
/// `UNBOUNDED` stands for "down to whatever there was" (an unknown mark_all_read).
const UNBOUNDED: i64 = i64::MIN / 4;

fn effect_range(e: &Event) -> (i64, i64) {
    let unknown = match e.op {
        OpKind::Create => (0, 1),
        OpKind::MarkRead | OpKind::MarkReadDup | OpKind::Delete => (-1, 0),
        OpKind::MarkAllRead => (UNBOUNDED, 0),
        OpKind::ReadCount => (0, 0),
    };
    let base = match (e.outcome, e.op) {
        (_, OpKind::ReadCount) | (Outcome::Fail, _) => (0, 0),
        (Outcome::Unknown, _) => unknown,
        (Outcome::Ok, OpKind::Create) => (1, 1),
        (Outcome::Ok, OpKind::MarkRead | OpKind::MarkReadDup) => (-e.observed.min(1), -e.observed.min(1)),
        // A deleted row may have been read or unread.
        (Outcome::Ok, OpKind::Delete) => (-e.observed.min(1), 0),
        (Outcome::Ok, OpKind::MarkAllRead) => (-e.observed, -e.observed),
    };
    // Each attempt that was retried after an unknown outcome may have applied too.
    let k = e.unknown_attempts as i64;
    (base.0.saturating_add(unknown.0.saturating_mul(k)).max(UNBOUNDED), base.1 + unknown.1 * k)
}

/// A read the history cannot explain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadViolation {
    pub read: Event,
    /// The values the history allows for that read.
    pub lo: i64,
    pub hi: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadCheck {
    pub reads_checked: u64,
    pub violations_total: u64,
    /// The first `MAX_KEPT_VIOLATIONS` violations by read completion time.
    pub violations: Vec<ReadViolation>,
}

/// Prefix sums of effect bounds over ops sorted by a time key.
struct Prefix {
    keys: Vec<u64>,
    lo: Vec<i64>,
    hi: Vec<i64>,
    lo_opt: Vec<i64>,
    hi_opt: Vec<i64>,
}

impl Prefix {
    fn new(mut items: Vec<(u64, (i64, i64))>) -> Prefix {
        items.sort_by_key(|x| x.0);
        let n = items.len();
        let mut p = Prefix {
            keys: Vec::with_capacity(n),
            lo: vec![0; n + 1],
            hi: vec![0; n + 1],
            lo_opt: vec![0; n + 1],
            hi_opt: vec![0; n + 1],
        };
        for (i, (k, (lo, hi))) in items.into_iter().enumerate() {
            p.keys.push(k);
            p.lo[i + 1] = p.lo[i].saturating_add(lo);
            p.hi[i + 1] = p.hi[i] + hi;
            p.lo_opt[i + 1] = p.lo_opt[i].saturating_add(lo.min(0));
            p.hi_opt[i + 1] = p.hi_opt[i] + hi.max(0);
        }
        p
    }

    /// Items with key strictly below `t`.
    fn below(&self, t: u64) -> usize {
        self.keys.partition_point(|k| *k < t)
    }

    /// Items with key at or below `t`.
    fn upto(&self, t: u64) -> usize {
        self.keys.partition_point(|k| *k <= t)
    }
}

/// Judges every successful `read_count` against the history: ops that completed (ok or
/// fail) before the read was invoked count for sure (a tie in microseconds does not); ops overlapping it may or may not
/// be seen; an op with an unknown outcome may apply at any time after its invocation,
/// so it widens every later read's bounds. Counters move both ways, so the bounds are
/// signed sums, clamped below at 0 (the truth is never negative).
/// `initial(user)` is the user's unread count when the load began. O(n log n).
pub fn check_reads(events: &[Event], initial: &dyn Fn(UserId) -> i64) -> ReadCheck {
    let mut by_user: BTreeMap<UserId, Vec<&Event>> = BTreeMap::new();
    for e in events {
        by_user.entry(e.user).or_default().push(e);
    }
    let mut out = ReadCheck::default();
    let mut all: Vec<ReadViolation> = Vec::new();
    for (user, evs) in by_user {
        let reads: Vec<&Event> =
            evs.iter().copied().filter(|e| e.op == OpKind::ReadCount && e.outcome == Outcome::Ok).collect();
        if reads.is_empty() {
            continue;
        }
        let writes = evs.iter().filter(|e| e.op != OpKind::ReadCount);
        let (known, unknown): (Vec<&&Event>, Vec<&&Event>) = writes.partition(|e| e.outcome != Outcome::Unknown);
        let by_complete = Prefix::new(known.iter().map(|e| (e.complete_us, effect_range(e))).collect());
        let by_invoke = Prefix::new(known.iter().map(|e| (e.invoke_us, effect_range(e))).collect());
        let unk = Prefix::new(unknown.iter().map(|e| (e.invoke_us, effect_range(e))).collect());
        let init = initial(user);
        for r in reads {
            out.reads_checked += 1;
            // Known ops completed strictly before the read began: certain. Known ops
            // invoked up to the read's end, minus the certain ones: overlapping. Ties
            // (whole microseconds) fall on the uncertain side, and every certain op is
            // also among the overlapping candidates, so the difference is never negative.
            let d = by_complete.below(r.invoke_us);
            let v = by_invoke.upto(r.complete_us);
            let u = unk.upto(r.complete_us);
            let lo = init
                .saturating_add(by_complete.lo[d])
                .saturating_add(by_invoke.lo_opt[v] - by_complete.lo_opt[d])
                .saturating_add(unk.lo_opt[u]);
            let hi = init + by_complete.hi[d] + (by_invoke.hi_opt[v] - by_complete.hi_opt[d]) + unk.hi_opt[u];
            let lo = lo.max(0);
            if r.observed < lo || r.observed > hi {
                out.violations_total += 1;
                all.push(ReadViolation { read: *r, lo, hi });
            }
        }
    }
    all.sort_by_key(|v| (v.read.complete_us, v.read.user));
    all.truncate(MAX_KEPT_VIOLATIONS);
    out.violations = all;
    out
}

/// One piece of evidence for an anomaly: the user (and notification), the ops that
/// conflict, and the counter expected against the one observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Witness {
    pub user: UserId,
    pub id: NotificationId,
    pub ops: Vec<Event>,
    pub expected: i64,
    pub observed: i64,
    pub note: String,
}

impl Witness {
    /// When the witness became visible: the latest completion among its ops.
    fn at_us(&self) -> u64 {
        self.ops.iter().map(|e| e.complete_us).max().unwrap_or(u64::MAX)
    }
}

/// A named anomaly, how many times it occurred and up to `MAX_WITNESSES` witnesses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anomaly {
    pub kind: AnomalyKind,
    /// `kind.name()`.
    pub name: &'static str,
    pub count: u64,
    pub witnesses: Vec<Witness>,
    /// Calls completed up to the first witness's last op (all of them when the anomaly
    /// is only visible in the final state).
    pub ops_to_detect: u64,
}

/// What the classifier knows beside the history.
#[derive(Clone, Copy, Debug)]
pub struct Context {
    pub guarantee: Guarantee,
    /// Deltas the strategy itself counted as lost / applied twice by its flusher.
    pub lost_flushes: u64,
    pub double_flushes: u64,
    /// A reconciler ran: drift left after settle is drift it never healed.
    pub reconciler: bool,
    /// The seed's layout, `(notifications_per_user, initial_read_per_user)`: user `u`'s
    /// ids are `(u-1)*per_user+1 ..`, the first `read` of them read (zeros: unknown).
    pub seed_layout: (u64, u64),
}

/// The post-settle read of one user: what `read_count` showed and the truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettledRead {
    pub user: UserId,
    pub shown: i64,
    pub truth: i64,
}

/// A create overlapping a mark_all_read (both ok, both completed by `until`), found by a
/// sweep: creates sorted by invocation with a running maximum of their completion.
/// O((M + C) log C) for M mark_all_reads and C creates.
fn zeroing_race<'a>(evs: &[&'a Event], until: u64) -> Option<(&'a Event, &'a Event)> {
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

/// Ok deletes that removed a notification the history shows was read when the delete
/// began: seeded read, or marked read (mark_read, mark_all_read) by a call that completed
/// before the delete was invoked. A correct delete leaves the counter alone for them.
/// Returns the first and how many. O(n log n).
fn deletes_of_read_rows<'a>(evs: &[&'a Event], (per_user, read): (u64, u64)) -> (Option<&'a Event>, u64) {
    let ok: Vec<&'a Event> = evs.iter().filter(|e| e.outcome == Outcome::Ok).copied().collect();
    let seeded_read = |e: &Event| {
        let first = (e.user as u64).saturating_sub(1) * per_user + 1;
        (e.id as u64) >= first && (e.id as u64) < first + read
    };
    let seeded = |e: &Event| per_user > 0 && (e.id as u64) <= (e.user as u64) * per_user;
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
fn overlapping_writes<'a>(evs: &[&'a Event]) -> Option<(&'a Event, &'a Event)> {
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
fn racing_creates(evs: &[&Event]) -> u64 {
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

fn overlap(a: &Event, b: &Event) -> bool {
    a.invoke_us < b.complete_us && b.invoke_us < a.complete_us
}

fn transitions(e: &Event) -> bool {
    e.outcome == Outcome::Ok
        && e.observed > 0
        && matches!(e.op, OpKind::MarkRead | OpKind::MarkReadDup | OpKind::Delete)
}

struct Acc {
    found: BTreeMap<AnomalyKind, (u64, Vec<Witness>)>,
}

impl Acc {
    fn add(&mut self, kind: AnomalyKind, w: Witness) {
        let e = self.found.entry(kind).or_default();
        e.0 += 1;
        e.1.push(w);
    }
}

/// Names what went wrong. Final-state mismatches (`rows`, counter against truth after
/// settle) are explained per user from the history, most specific cause first:
/// two ok calls that both claimed the same notification's transition (double
/// decrement); an op retried after an unknown outcome (double apply); the strategy's
/// own count of lost or doubled flush claims (either sign of delta); a create racing a
/// mark_all_read (lost increment); an
/// unknown op that half applied (lost increment/decrement); a delete of a row already
/// read (wrong delete adjustment, counter too low); two overlapping calls that
/// both moved the counter (stale mark_all_read when one of them is a mark_all_read, else
/// lost update; either sign); else unexplained drift, or
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
    let mut acc = Acc { found: BTreeMap::new() };
    let mismatched: BTreeMap<UserId, &CheckInput> =
        rows.iter().filter(|r| r.counter.unwrap_or(0) != r.truth).map(|r| (r.user, r)).collect();
    let mut by_user: BTreeMap<UserId, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| mismatched.contains_key(&e.user)) {
        by_user.entry(e.user).or_default().push(e);
    }
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
    let mut flush_budget = (cx.lost_flushes, cx.double_flushes);
    for (user, row) in &mismatched {
        let evs = by_user.remove(user).unwrap_or_default();
        let observed = row.counter.unwrap_or(0);
        let drift = observed - row.truth;
        let base =
            |ops: Vec<Event>, id, note: String| Witness { user: *user, id, ops, expected: row.truth, observed, note };
        // Two overlapping-or-not ok calls that each claimed the same row's transition.
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
        let double = delete_race.or_else(|| {
            claims.iter().find_map(|(id, cs)| {
                let marks: Vec<&&Event> = cs.iter().filter(|e| e.op != OpKind::Delete).collect();
                (marks.len() >= 2).then(|| (*id, vec![**marks[0], **marks[1]]))
            })
        });
        let retried = evs.iter().find(|e| {
            e.unknown_attempts > 0 && e.outcome == Outcome::Ok && e.op != OpKind::ReadCount && e.observed > 0
        });
        let race = zeroing_race(&evs, u64::MAX);
        let half = evs.iter().find(|e| e.outcome == Outcome::Unknown && e.op != OpKind::ReadCount);
        if drift < 0
            && let Some((id, ops)) = double
        {
            acc.add(
                AnomalyKind::DoubleDecrement,
                base(ops, id, "two calls each claimed this notification's transition".into()),
            );
        } else if let Some(e) = retried {
            acc.add(
                AnomalyKind::DoubleApplyAfterRetry,
                base(vec![**e], e.id, format!("retried after {} unknown attempt(s)", e.unknown_attempts)),
            );
        } else if flush_budget.0 + flush_budget.1 > 0 {
            // A buffered delta of either sign: lost, or applied twice. Each drifted user
            // is charged to the flusher's own count of such claims, lost ones first.
            if flush_budget.0 == 0 {
                flush_budget.1 -= 1;
                acc.add(
                    AnomalyKind::DoubleFlush,
                    base(Vec::new(), 0, "the flusher applied a claimed delta twice".into()),
                );
            } else {
                flush_budget.0 -= 1;
                acc.add(AnomalyKind::LostFlush, base(Vec::new(), 0, "the flusher lost a claimed delta".into()));
            }
        } else if drift < 0
            && let Some((m, c)) = race
            // Each racing create loses at most one increment: more drift than racing
            // creates is something else (a stale count subtracted, say).
            && -drift <= racing_creates(&evs) as i64
        {
            acc.add(AnomalyKind::LostIncrement, base(vec![*c, *m], c.id, "a create raced mark_all_read".into()));
        } else if let Some(e) = half {
            let name = if drift > 0 { AnomalyKind::LostDecrement } else { AnomalyKind::LostIncrement };
            acc.add(name, base(vec![**e], e.id, "an op with an unknown outcome half applied".into()));
        } else if drift < 0
            && let (Some(d), n) = deletes_of_read_rows(&evs, cx.seed_layout)
            // Each such delete lowers the counter by one at most: it must be able to
            // account for the drift.
            && n >= drift.unsigned_abs()
        {
            let note = "a delete of a notification already read; the counter went down anyway".into();
            acc.add(AnomalyKind::WrongDeleteAdjustment, base(vec![*d], d.id, note));
        } else if let Some((a, b)) = overlapping_writes(&evs) {
            if [a, b].iter().any(|e| e.op == OpKind::MarkAllRead) {
                let note = "a mark_all_read overlapped another call that moved the counter".into();
                acc.add(AnomalyKind::StaleMarkAllRead, base(vec![*a, *b], 0, note));
            } else {
                let note = "two overlapping writes to this user's counter: one overwrote the other".into();
                acc.add(AnomalyKind::LostUpdate, base(vec![*a, *b], 0, note));
            }
        } else if cx.reconciler {
            acc.add(AnomalyKind::UnhealedDrift, base(Vec::new(), 0, "the reconciler never repaired it".into()));
        } else {
            acc.add(AnomalyKind::UnexplainedDrift, base(Vec::new(), 0, "no op in the history explains it".into()));
        }
    }
    // Eventual strategies may show stale values while the load runs; the others may not.
    if cx.guarantee != Guarantee::Eventual
        && let Some(rc) = reads
    {
        for v in &rc.violations {
            acc.add(
                AnomalyKind::ReadOutOfBounds,
                Witness {
                    user: v.read.user,
                    id: 0,
                    ops: vec![v.read],
                    expected: v.lo,
                    observed: v.read.observed,
                    note: if v.hi < v.lo {
                        // Replies claimed more transitions than there were unread rows
                        // (e.g. two calls each claimed one row): no value fits.
                        format!("the replies before it claim the count fell to {}: no value fits", v.hi)
                    } else {
                        format!("the history allows {}..={}", v.lo, v.hi)
                    },
                },
            );
        }
        if let Some(e) = acc.found.get_mut(&AnomalyKind::ReadOutOfBounds) {
            e.0 = rc.violations_total;
        }
        // A read below its bounds after a create raced a mark_all_read of the same user:
        // the zeroing race, seen while it lasted even if a later mark_all_read hid it
        // from the final state. Once per user not already explained above.
        let mut seen: std::collections::BTreeSet<UserId> = mismatched.keys().copied().collect();
        let suspects: std::collections::BTreeSet<UserId> =
            rc.violations.iter().filter(|v| v.read.observed < v.lo).map(|v| v.read.user).collect();
        let mut user_events: BTreeMap<UserId, Vec<&Event>> = BTreeMap::new();
        for e in events.iter().filter(|e| suspects.contains(&e.user) && !seen.contains(&e.user)) {
            user_events.entry(e.user).or_default().push(e);
        }
        for v in rc.violations.iter().filter(|v| v.read.observed < v.lo) {
            let Some(evs) = user_events.get(&v.read.user) else { continue };
            if seen.contains(&v.read.user) {
                continue;
            }
            // One search per user: the earliest violation decides.
            seen.insert(v.read.user);
            if let Some((m, c)) = zeroing_race(evs, v.read.invoke_us) {
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
    if cx.guarantee != Guarantee::None {
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
    let mut done: Vec<u64> = events.iter().map(|e| e.complete_us).collect();
    done.sort_unstable();
    let total = events.len() as u64;
    // Every kind found is reported (the map is keyed by the enum: nothing can be dropped),
    // in the enum's order.
    acc.found
        .into_iter()
        .map(|(kind, (count, mut ws))| {
            ws.sort_by_key(|w| (w.at_us(), w.user));
            let ops_to_detect = match ws.first().map(|w| w.at_us()) {
                Some(t) if t != u64::MAX => done.partition_point(|c| *c <= t) as u64,
                _ => total,
            };
            ws.truncate(MAX_WITNESSES);
            Anomaly { kind, name: kind.name(), count, witnesses: ws, ops_to_detect }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev(op: OpKind, user: UserId, id: i64, t: (u64, u64), outcome: Outcome, observed: i64) -> Event {
        Event {
            worker: 0,
            op,
            user,
            id,
            invoke_us: t.0,
            complete_us: t.1,
            outcome,
            observed,
            attempts: 1,
            unknown_attempts: 0,
        }
    }
    use OpKind::*;
    use Outcome::{Fail, Ok as Okay, Unknown};

    #[test]
    fn a_valid_history_has_no_read_violations() {
        let h = [
            ev(Create, 1, 10, (0, 10), Okay, 1),
            ev(ReadCount, 1, 0, (11, 12), Okay, 4),
            ev(MarkRead, 1, 10, (13, 20), Okay, 1),
            // Overlapping the mark_read: either value.
            ev(ReadCount, 1, 0, (14, 15), Okay, 4),
            ev(ReadCount, 1, 0, (16, 25), Okay, 3),
            ev(MarkAllRead, 1, 0, (30, 40), Okay, 3),
            ev(ReadCount, 1, 0, (41, 42), Okay, 0),
        ];
        let r = check_reads(&h, &|_| 3);
        assert_eq!((r.reads_checked, r.violations_total), (4, 0), "{r:?}");
    }

    #[test]
    fn a_planted_read_violation_is_found_with_its_bounds() {
        let h = [
            ev(Create, 1, 10, (0, 10), Okay, 1),
            ev(MarkRead, 1, 10, (13, 20), Okay, 1),
            // After both completed, the count must be 3 again: 2 is a lost increment seen.
            ev(ReadCount, 1, 0, (21, 22), Okay, 2),
        ];
        let r = check_reads(&h, &|_| 3);
        assert_eq!(r.violations_total, 1);
        assert_eq!((r.violations[0].lo, r.violations[0].hi), (3, 3));
    }

    #[test]
    fn over_claimed_transitions_leave_no_value_and_the_witness_says_so() {
        // One unread row, two mark_reads that each claimed it (a double decrement): the
        // replies say -1, the truth is 0, and no read can fit.
        let h = [
            ev(MarkRead, 1, 10, (0, 10), Okay, 1),
            ev(MarkRead, 1, 10, (1, 11), Okay, 1),
            ev(ReadCount, 1, 0, (20, 21), Okay, 0),
        ];
        let r = check_reads(&h, &|_| 1);
        assert_eq!((r.violations_total, r.violations[0].lo, r.violations[0].hi), (1, 0, -1));
        let a = classify(&h, &[], Some(&r), &[], cx());
        let w = &a.iter().find(|a| a.name == "read_out_of_bounds").expect("named").witnesses[0];
        assert!(w.note.contains("fell to -1: no value fits"), "{}", w.note);
    }

    #[test]
    fn unknown_ops_widen_every_later_read_and_fails_do_not() {
        let h = [
            ev(Create, 1, 0, (0, 10), Unknown, 0),
            ev(Delete, 1, 5, (0, 10), Fail, 0),
            ev(ReadCount, 1, 0, (100, 101), Okay, 1),
            ev(ReadCount, 1, 0, (100, 101), Okay, 0),
        ];
        let r = check_reads(&h, &|_| 0);
        assert_eq!(r.violations_total, 0);
        let h = [ev(Delete, 1, 5, (0, 10), Fail, 0), ev(ReadCount, 1, 0, (100, 101), Okay, 1)];
        assert_eq!(check_reads(&h, &|_| 2).violations_total, 1);
        // A mark_all_read with an unknown outcome may have cleared everything.
        let h = [ev(MarkAllRead, 1, 0, (0, 10), Unknown, 0), ev(ReadCount, 1, 0, (100, 101), Okay, 0)];
        assert_eq!(check_reads(&h, &|_| 9).violations_total, 0);
    }

    #[test]
    fn ties_in_microseconds_count_as_overlapping() {
        // A create and a read within the same microsecond: either value is allowed.
        for seen in [3, 4] {
            let h = [ev(Create, 1, 9, (5, 5), Okay, 1), ev(ReadCount, 1, 0, (5, 5), Okay, seen)];
            assert_eq!(check_reads(&h, &|_| 3).violations_total, 0, "{seen}");
        }
    }

    #[test]
    fn the_zeroing_race_is_found_among_many_creates_and_a_delete_race_is_preferred() {
        let h = [
            ev(Create, 1, 8, (0, 1), Okay, 1),
            ev(MarkAllRead, 1, 0, (5, 10), Okay, 2),
            ev(Create, 1, 9, (2, 20), Okay, 1),
            ev(Create, 1, 10, (30, 40), Okay, 1),
        ];
        let a = classify(&h, &[row(1, 1, 2)], None, &[], cx());
        assert_eq!(a[0].name, "lost_increment");
        assert_eq!(a[0].witnesses[0].id, 9);
        let h = [
            ev(MarkRead, 1, 7, (0, 10), Okay, 1),
            ev(MarkRead, 1, 7, (20, 30), Okay, 1),
            ev(MarkRead, 1, 8, (0, 10), Okay, 1),
            ev(Delete, 1, 8, (5, 12), Okay, 1),
        ];
        let a = classify(&h, &[row(1, 0, 2)], None, &[], cx());
        assert_eq!(a[0].name, "double_decrement");
        let ops: Vec<OpKind> = a[0].witnesses[0].ops.iter().map(|e| e.op).collect();
        assert_eq!((a[0].witnesses[0].id, ops), (8, vec![MarkRead, Delete]));
    }

    fn row(user: UserId, counter: i64, truth: i64) -> CheckInput {
        CheckInput { user, counter: Some(counter), truth }
    }

    fn cx() -> Context {
        Context {
            guarantee: Guarantee::Exact,
            lost_flushes: 0,
            double_flushes: 0,
            reconciler: false,
            seed_layout: (4, 1),
        }
    }

    #[test]
    fn two_transition_claims_on_one_row_are_a_double_decrement() {
        let h = [
            ev(MarkReadDup, 1, 7, (0, 10), Okay, 1),
            ev(MarkReadDup, 1, 7, (1, 9), Okay, 1),
            ev(Create, 2, 70, (0, 1), Okay, 1),
        ];
        let a = classify(&h, &[row(1, 2, 3), row(2, 1, 1)], None, &[], cx());
        assert_eq!(a.len(), 1);
        assert_eq!((a[0].name, a[0].count, a[0].witnesses[0].id), ("double_decrement", 1, 7));
        assert_eq!(a[0].witnesses[0].ops.len(), 2);
        // Calls completed by the time the second claim completed: 2 (at 1 and 9) + it.
        assert_eq!(a[0].ops_to_detect, 3);
        // The same history with the counters right: nothing.
        assert!(classify(&h, &[row(1, 3, 3), row(2, 1, 1)], None, &[], cx()).is_empty());
    }

    #[test]
    fn a_create_racing_mark_all_read_is_a_lost_increment_and_retries_are_named() {
        let h = [ev(MarkAllRead, 1, 0, (0, 10), Okay, 3), ev(Create, 1, 9, (2, 5), Okay, 1)];
        let a = classify(&h, &[row(1, 0, 1)], None, &[], cx());
        assert_eq!(a[0].name, "lost_increment");
        // The same race seen only by a later read, the final state healed by another
        // mark_all_read: still named, from the read that fell below its bounds.
        let h = [
            ev(MarkAllRead, 1, 0, (0, 10), Okay, 3),
            ev(Create, 1, 9, (2, 5), Okay, 1),
            ev(ReadCount, 1, 0, (20, 21), Okay, 0),
            ev(MarkAllRead, 1, 0, (30, 40), Okay, 1),
        ];
        let reads = check_reads(&h, &|_| 3);
        assert_eq!(reads.violations_total, 1);
        let a = classify(&h, &[row(1, 0, 0)], Some(&reads), &[], cx());
        let names: Vec<&str> = a.iter().map(|a| a.name).collect();
        assert_eq!(names, ["lost_increment", "read_out_of_bounds"]);
        assert_eq!(a[0].witnesses[0].ops.len(), 3);
        let mut retried = ev(Create, 1, 9, (2, 5), Okay, 1);
        retried.unknown_attempts = 1;
        let a = classify(&[retried], &[row(1, 2, 1)], None, &[], cx());
        assert_eq!(a[0].name, "double_apply_after_retry");
        let half = ev(MarkRead, 1, 9, (2, 5), Unknown, 0);
        let a = classify(&[half], &[row(1, 2, 1)], None, &[], cx());
        assert_eq!(a[0].name, "lost_decrement");
        // A flusher's own count of doubled claims names drift of either sign.
        let flushed = Context { guarantee: Guarantee::Eventual, double_flushes: 2, ..cx() };
        let a = classify(&[], &[row(1, 0, 1), row(2, 3, 2)], None, &[], flushed);
        assert_eq!((a[0].name, a[0].count), ("double_flush", 2));
        let lost = Context { lost_flushes: 1, ..flushed };
        let a = classify(&[], &[row(1, 0, 1), row(2, 3, 2)], None, &[], lost);
        let names: Vec<(&str, u64)> = a.iter().map(|a| (a.name, a.count)).collect();
        assert_eq!(names, [("lost_flush", 1), ("double_flush", 1)]);
        // Two overlapping mark_reads of different rows, each claiming a transition, and a
        // counter one too high: one read-modify-write overwrote the other.
        let h = [ev(MarkRead, 1, 3, (2, 6), Okay, 1), ev(MarkRead, 1, 4, (4, 9), Okay, 1)];
        let a = classify(&h, &[row(1, 3, 2)], None, &[], cx());
        assert_eq!((a[0].name, a[0].witnesses[0].ops.len()), ("lost_update", 2));
        // User 2's seeded ids are 5..=8, id 5 read: deleting it must not lower the counter.
        let a = classify(&[ev(Delete, 2, 5, (2, 3), Okay, 1)], &[row(2, 2, 3)], None, &[], cx());
        assert_eq!(a[0].name, "wrong_delete_adjustment");
        // Id 6 was unread until a mark_read completed before the delete began.
        let h = [ev(MarkRead, 2, 6, (1, 2), Okay, 1), ev(Delete, 2, 6, (3, 4), Okay, 1)];
        assert_eq!(classify(&h, &[row(2, 1, 2)], None, &[], cx())[0].name, "wrong_delete_adjustment");
        // Overlapping, the row may have been unread when deleted: not this anomaly.
        let h = [ev(MarkRead, 2, 6, (1, 4), Okay, 1), ev(Delete, 2, 6, (3, 5), Okay, 1)];
        assert_ne!(classify(&h, &[row(2, 1, 2)], None, &[], cx())[0].name, "wrong_delete_adjustment");
        // A create overlapping a mark_all_read that subtracted an earlier count: too high.
        let h = [ev(MarkAllRead, 1, 0, (2, 8), Okay, 3), ev(Create, 1, 30, (3, 5), Okay, 1)];
        assert_eq!(classify(&h, &[row(1, 1, 0)], None, &[], cx())[0].name, "stale_mark_all_read");
        // The same calls one after the other explain nothing.
        let h = [ev(MarkRead, 1, 3, (2, 3), Okay, 1), ev(MarkRead, 1, 4, (4, 9), Okay, 1)];
        assert_eq!(classify(&h, &[row(1, 3, 2)], None, &[], cx())[0].name, "unexplained_drift");
    }

    #[test]
    fn settle_reads_and_negative_counters_are_named() {
        let s = [SettledRead { user: 1, shown: 4, truth: 3 }];
        let a = classify(&[], &[row(1, -1, 0)], None, &s, cx());
        let names: Vec<&str> = a.iter().map(|a| a.name).collect();
        assert_eq!(names, ["negative_counter", "stale_after_settle", "unexplained_drift"]);
        // A racy strategy's stale reads are not judged.
        let none = Context { guarantee: Guarantee::None, ..cx() };
        assert!(classify(&[], &[], None, &s, none).is_empty());
    }

    /// A linearizable single-user counter: ops applied at a random point inside their
    /// interval; reads return the value at their point. No read may be flagged.
    fn linear_history() -> impl proptest::strategy::Strategy<Value = (i64, Vec<Event>)> {
        (0i64..5, prop::collection::vec((0u8..5, 0u64..1000, 1u64..200, 0u64..1000, 0u8..10), 1..40)).prop_map(
            |(init, raw)| {
                // (kind, start, len, point fraction in permille, outcome selector)
                let mut ops: Vec<(u64, u8, u64, u64, u8)> =
                    raw.into_iter().map(|(k, s, l, f, o)| (s + l * f / 1000, k, s, s + l, o)).collect();
                ops.sort();
                let mut value = init;
                let mut out = Vec::new();
                for (_, k, s, c, o) in ops {
                    let unknown = o < 2;
                    let applies = o != 1;
                    let (op, obs) = match k {
                        0 => {
                            if applies {
                                value += 1
                            }
                            (Create, 1)
                        }
                        1 | 2 => {
                            let t = (value > 0 && applies) as i64;
                            value -= t;
                            (if k == 1 { MarkRead } else { Delete }, t)
                        }
                        3 => {
                            let n = if applies { value } else { 0 };
                            value -= n;
                            (MarkAllRead, n)
                        }
                        _ => (ReadCount, value),
                    };
                    let outcome = if unknown && op != ReadCount { Unknown } else { Okay };
                    out.push(ev(op, 1, 1, (s, c), outcome, obs));
                }
                (init, out)
            },
        )
    }

    proptest! {
        #[test]
        fn linearizable_histories_pass_the_read_check((init, h) in linear_history()) {
            let r = check_reads(&h, &|_| init);
            prop_assert_eq!(r.violations_total, 0, "{:?}", r.violations);
        }

        #[test]
        fn a_read_below_what_the_history_allows_is_caught((init, mut h) in linear_history()) {
            // Only the ok writes, then a read after all of them: the count is at least
            // their summed certain effect, so one less is a violation and it is not.
            h.retain(|e| e.outcome == Okay && e.op != ReadCount);
            let least = h.iter().fold(init, |v, e| v + effect_range(e).0);
            prop_assume!(least >= 1);
            let mut wrong = ev(ReadCount, 1, 0, (5000, 5001), Okay, least - 1);
            let r = check_reads(&[h.clone(), vec![wrong]].concat(), &|_| init);
            prop_assert_eq!(r.violations_total, 1);
            wrong.observed = least;
            let r = check_reads(&[h, vec![wrong]].concat(), &|_| init);
            prop_assert_eq!(r.violations_total, 0);
        }
    }
}
