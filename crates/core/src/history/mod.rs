//! The recorded history of a run (one event per call) and the checks that read it:
//! every `read_count` judged against bounds the history allows, and the named anomalies
//! (with witnesses) that explain a counter the final check found wrong.

mod classify;
mod drift;
mod evidence;
mod found;
mod parts;
mod rows;

use std::collections::BTreeMap;

pub use classify::{classify, classify_parts};
pub use found::{Anomaly, Context, MAX_WITNESSES, SettledRead, Witness};
pub use parts::{HistoryParts, OnePart, check_reads_parts, check_reads_parts_seeded, sort_history};

use crate::model::{NotificationId, OpKind, Outcome, UserId};
use crate::seed::SeedSpec;
use rows::RowFacts;

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
    /// For reads served from a cache or a replica: how far back the read's value fits,
    /// in microseconds before the read began; None when no earlier moment fits.
    pub stale_for_us: Option<u64>,
    /// How many counts the read is outside its bounds (below `lo` or above `hi`).
    pub distance: i64,
}

/// Where the reads came from, which says how a read outside its bounds is judged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadSource {
    /// The counter itself: every read outside its bounds is `read_out_of_bounds`.
    #[default]
    Counter,
    /// A cache that may lag by up to `lag_us` by design; staler reads are `stale_cache_read`.
    Cache { lag_us: u64 },
    /// A replica: a read whose value the counter had earlier is stale, measured (how far
    /// back, how many counts); one staler than `bound_us` (None: any) is `stale_read`.
    Replica { bound_us: Option<u64> },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadCheck {
    pub reads_checked: u64,
    pub violations_total: u64,
    /// The lag reads were allowed (a cache's, by design), in microseconds.
    pub allowed_lag_us: Option<u64>,
    /// Violations whose value the counter had earlier (`stale_for_us` is Some).
    pub stale_total: u64,
    /// Where the reads came from (how violations are named).
    pub source: ReadSource,
    /// Replica reads staler than the source's bound (the `stale_read` anomaly's count).
    pub stale_over_bound: u64,
    /// The first `MAX_KEPT_VIOLATIONS` violations by read completion time.
    pub violations: Vec<ReadViolation>,
    /// Every stale read (`stale_for_us` is Some), kept or not: how far back, in counts.
    pub stale_dist: StaleDist,
}

/// How far back every stale read fits: exact counts per `STALENESS_BUCKETS_US` bucket,
/// the exact maximums, and a log-scale histogram (16 sub-buckets per power of two: each
/// value within 6.25%) for the percentiles when not every stale read was kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StaleDist {
    pub fixed: [u64; STALENESS_BUCKETS_US.len()],
    pub max_us: u64,
    pub max_counts: i64,
    log: Vec<u64>,
}

impl StaleDist {
    /// Values under 16 each have a bucket; above, each power of two has 16.
    fn index(us: u64) -> usize {
        if us < 16 {
            return us as usize;
        }
        let exp = 63 - us.leading_zeros();
        (16 + (exp - 4) * 16 + ((us >> (exp - 4)) & 0xF) as u32) as usize
    }

    /// The largest value of log bucket `i`.
    fn upper(i: usize) -> u64 {
        if i < 16 {
            return i as u64;
        }
        let (shift, sub) = ((i - 16) / 16, (i - 16) % 16);
        ((17 + sub as u64) << shift) - 1
    }

    fn add(&mut self, back_us: u64, counts: i64) {
        let b = STALENESS_BUCKETS_US.iter().position(|&hi| back_us <= hi).unwrap_or(STALENESS_BUCKETS_US.len() - 1);
        self.fixed[b] += 1;
        self.max_us = self.max_us.max(back_us);
        self.max_counts = self.max_counts.max(counts);
        let i = Self::index(back_us);
        if self.log.len() <= i {
            self.log.resize(i + 1, 0);
        }
        self.log[i] += 1;
    }

    fn merge(&mut self, other: &StaleDist) {
        for (a, b) in self.fixed.iter_mut().zip(other.fixed) {
            *a += b;
        }
        self.max_us = self.max_us.max(other.max_us);
        self.max_counts = self.max_counts.max(other.max_counts);
        if self.log.len() < other.log.len() {
            self.log.resize(other.log.len(), 0);
        }
        for (a, b) in self.log.iter_mut().zip(&other.log) {
            *a += b;
        }
    }

    /// The value at quantile `p` (its log bucket's upper end, at most the maximum).
    fn quantile(&self, p: f64) -> u64 {
        let n: u64 = self.log.iter().sum();
        let rank = ((n as f64 * p).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.log.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::upper(i).min(self.max_us);
            }
        }
        0
    }
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
    check_reads_lagging(events, initial, None)
}

/// `check_reads` for reads served from a cache that may lag the counter by up to
/// `lag_us` by design (None: no lag): ops completed less than `lag_us` before a read
/// began may or may not be seen. With a lag, each violation also says how far back its
/// value fits (`stale_for_us`). O(n log n) (a binary search per violation).
pub fn check_reads_lagging(events: &[Event], initial: &dyn Fn(UserId) -> i64, lag_us: Option<u64>) -> ReadCheck {
    let source = lag_us.map_or(ReadSource::Counter, |lag_us| ReadSource::Cache { lag_us });
    check_reads_from(events, initial, source)
}

/// `check_reads` for reads from `source`: a cache's allowed lag widens the bounds; a
/// replica's reads are judged against the history as it is (no widening) and each one
/// outside its bounds says how far back its value fits, so staleness is measured rather
/// than allowed. O(n log n) (a binary search per violation).
pub fn check_reads_from(events: &[Event], initial: &dyn Fn(UserId) -> i64, source: ReadSource) -> ReadCheck {
    check_reads_with(events, initial, None, source)
}

/// `check_reads_from` for a load that began from `seed` (every user's count starts at
/// `seed.unread_at_start()`), with the bounds narrowed by what the history proves about
/// single rows: a delete or mark_read of a row known read (seeded read, or marked read
/// by an Ok call that completed before it began) changes nothing, and an Ok delete of a
/// row known still unread removes one (the proof is in `rows`). Never wider than
/// `check_reads_from`'s bounds. O(n log n).
pub fn check_reads_seeded(events: &[Event], seed: SeedSpec, source: ReadSource) -> ReadCheck {
    let unread = seed.unread_at_start() as i64;
    check_reads_with(events, &|_| unread, Some(seed), source)
}

/// `check_reads_from`, with row facts when the seed's layout is known.
fn check_reads_with(
    events: &[Event],
    initial: &dyn Fn(UserId) -> i64,
    seed: Option<SeedSpec>,
    source: ReadSource,
) -> ReadCheck {
    let mut by_user: BTreeMap<UserId, Vec<&Event>> = BTreeMap::new();
    for e in events {
        by_user.entry(e.user).or_default().push(e);
    }
    let (lag_us, measure) = match source {
        ReadSource::Counter => (None, false),
        ReadSource::Cache { lag_us } => (Some(lag_us), true),
        ReadSource::Replica { .. } => (None, true),
    };
    let bound_us = match source {
        ReadSource::Replica { bound_us } => Some(bound_us.unwrap_or(0)),
        _ => None,
    };
    let mut out = ReadCheck { allowed_lag_us: lag_us, source, ..ReadCheck::default() };
    let mut all: Vec<ReadViolation> = Vec::new();
    for (user, evs) in by_user {
        let reads: Vec<&Event> =
            evs.iter().copied().filter(|e| e.op == OpKind::ReadCount && e.outcome == Outcome::Ok).collect();
        if reads.is_empty() {
            continue;
        }
        let b = UserBounds::new(&evs, initial(user), seed);
        for r in reads {
            out.reads_checked += 1;
            let certain = b.by_complete.below(r.invoke_us.saturating_sub(lag_us.unwrap_or(0)));
            let (lo, hi) = b.bounds(r, certain);
            if r.observed < lo || r.observed > hi {
                let stale_for_us = if measure { b.fits_back_to(r, certain) } else { None };
                out.violations_total += 1;
                out.stale_total += u64::from(stale_for_us.is_some());
                out.stale_over_bound += u64::from(bound_us.zip(stale_for_us).is_some_and(|(b, s)| s > b));
                let distance = if r.observed < lo { lo - r.observed } else { (r.observed - hi).max(0) };
                if let Some(back) = stale_for_us {
                    out.stale_dist.add(back, distance);
                }
                all.push(ReadViolation { read: *r, lo, hi, stale_for_us, distance });
            }
        }
    }
    all.sort_by_key(|v| (v.read.complete_us, v.read.user));
    all.truncate(MAX_KEPT_VIOLATIONS);
    out.violations = all;
    out
}

impl ReadCheck {
    /// Adds the check of another part of the history (other users): the counts add up,
    /// the violations kept stay the first `MAX_KEPT_VIOLATIONS` by read completion time,
    /// as one check over the whole history would have kept them.
    pub fn merge(&mut self, other: ReadCheck) {
        self.reads_checked += other.reads_checked;
        self.violations_total += other.violations_total;
        self.stale_total += other.stale_total;
        self.stale_over_bound += other.stale_over_bound;
        self.stale_dist.merge(&other.stale_dist);
        self.violations.extend(other.violations);
        // Stable: one user's violations (all in one part) keep their order.
        self.violations.sort_by_key(|v| (v.read.complete_us, v.read.user));
        self.violations.truncate(MAX_KEPT_VIOLATIONS);
    }
}

/// How stale a replica's reads were, over every stale read (kept or not), in
/// microseconds back and in counts off.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Staleness {
    pub reads_checked: u64,
    pub stale_reads: u64,
    pub over_bound: u64,
    pub bound_us: Option<u64>,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub max_counts: i64,
    /// Stale reads per bucket: (upper bound in microseconds, count); the last bucket's
    /// bound is `u64::MAX` (everything above the one before).
    pub buckets: Vec<(u64, u64)>,
}

/// Bucket upper bounds of `Staleness::buckets`, microseconds.
pub const STALENESS_BUCKETS_US: [u64; 9] =
    [1_000, 5_000, 10_000, 50_000, 100_000, 500_000, 1_000_000, 5_000_000, u64::MAX];

impl ReadCheck {
    /// The staleness distribution of a replica's reads; None for other sources.
    pub fn staleness(&self) -> Option<Staleness> {
        let ReadSource::Replica { bound_us } = self.source else { return None };
        let mut back: Vec<u64> = self.violations.iter().filter_map(|v| v.stale_for_us).collect();
        back.sort_unstable();
        // Exact from the kept reads when every stale read was kept; else from the
        // histogram of all of them (within 6.25%).
        let all_kept = back.len() as u64 == self.stale_total;
        let pct = |p: f64| match all_kept {
            true => back.get(((back.len() as f64 * p).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0),
            false => self.stale_dist.quantile(p),
        };
        let d = &self.stale_dist;
        Some(Staleness {
            reads_checked: self.reads_checked,
            stale_reads: self.stale_total,
            over_bound: self.stale_over_bound,
            bound_us,
            p50_us: pct(0.5),
            p99_us: pct(0.99),
            max_us: d.max_us,
            max_counts: d.max_counts,
            buckets: STALENESS_BUCKETS_US.iter().copied().zip(d.fixed).collect(),
        })
    }
}

/// One user's writes as prefix sums: known ops by completion and by invocation, unknown
/// ops by invocation, and the count at the load's start.
struct UserBounds {
    by_complete: Prefix,
    by_invoke: Prefix,
    unk: Prefix,
    init: i64,
}

impl UserBounds {
    /// One user's calls `evs`; with `seed`, each call's effect is narrowed by its row's
    /// facts (`RowFacts::effect`), else it is `effect_range`.
    fn new(evs: &[&Event], init: i64, seed: Option<SeedSpec>) -> UserBounds {
        let facts = seed.map(|s| RowFacts::new(evs, s));
        let effect = |e: &Event| facts.as_ref().map_or_else(|| effect_range(e), |f| f.effect(e));
        let writes = evs.iter().filter(|e| e.op != OpKind::ReadCount);
        let (known, unknown): (Vec<&&Event>, Vec<&&Event>) = writes.partition(|e| e.outcome != Outcome::Unknown);
        UserBounds {
            by_complete: Prefix::new(known.iter().map(|e| (e.complete_us, effect(e))).collect()),
            by_invoke: Prefix::new(known.iter().map(|e| (e.invoke_us, effect(e))).collect()),
            unk: Prefix::new(unknown.iter().map(|e| (e.invoke_us, effect(e))).collect()),
            init,
        }
    }

    /// The values read `r` may show when the first `d` ops by completion count for sure.
    /// Known ops invoked up to the read's end, minus the certain ones, may or may not be
    /// seen. Ties (whole microseconds) fall on the uncertain side, and every certain op
    /// is also among the candidates, so the difference is never negative.
    fn bounds(&self, r: &Event, d: usize) -> (i64, i64) {
        let (c, i, u) = (&self.by_complete, &self.by_invoke, &self.unk);
        let v = i.upto(r.complete_us);
        let k = u.upto(r.complete_us);
        let lo =
            self.init.saturating_add(c.lo[d]).saturating_add(i.lo_opt[v] - c.lo_opt[d]).saturating_add(u.lo_opt[k]);
        let hi = self.init + c.hi[d] + (i.hi_opt[v] - c.hi_opt[d]) + u.hi_opt[k];
        (lo.max(0), hi)
    }

    /// How far back read `r`'s value fits: the fewest certain ops (of the first `d`)
    /// to treat as maybe unseen, as the time from the first of them to the read's start.
    /// Fewer certain ops only widen the bounds, so a binary search finds it.
    fn fits_back_to(&self, r: &Event, d: usize) -> Option<u64> {
        let fits = |j: usize| {
            let (lo, hi) = self.bounds(r, j);
            (lo..=hi).contains(&r.observed)
        };
        if !fits(0) {
            return None;
        }
        // The largest j in 0..d that fits (j = d does not: the read is a violation).
        let (mut ok, mut bad) = (0usize, d);
        while bad - ok > 1 {
            let mid = (ok + bad) / 2;
            if fits(mid) { ok = mid } else { bad = mid }
        }
        Some(r.invoke_us.saturating_sub(self.by_complete.keys[ok]))
    }
}

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod tests;
