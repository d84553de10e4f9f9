//! Executing one planned op against the strategy: each attempt bounded by the op
//! timeout, conflicts (and, by policy, unknown outcomes) retried with backoff, the pool
//! kept in step with what succeeded, and every call kept for the history.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use counterlab_core::{ErrorClass, OpError, OpKind, Outcome, Strategy};
use futures_util::future::join_all;
use smallvec::SmallVec;
use tokio::task::coop;
use tokio::time::Sleep;

use super::DriverConfig;
use crate::metrics::Tries;
use crate::pool::IdPool;
use crate::workload::PlannedOp;

/// A worker's op timer: one `Sleep` kept across its ops. It is left as it is while it
/// has not fired: it then fires at an earlier op's deadline, no later than this one's,
/// and `bounded` moves it to this op's deadline when it does (once an op timeout, not
/// once an op). A fresh `tokio::time::timeout` per op took the timer driver's lock
/// twice an op (to register, and to deregister when dropped).
#[derive(Default)]
pub(super) struct OpTimer(Option<Pin<Box<Sleep>>>);

impl OpTimer {
    /// The timer, firing no later than `deadline`.
    fn by(&mut self, deadline: Instant) -> Pin<&mut Sleep> {
        let sleep = self.0.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline.into())));
        // A worker's deadlines only grow (its ops and their attempts run one at a time).
        debug_assert!(sleep.deadline() <= deadline.into(), "an op timer set past the op's deadline");
        sleep.as_mut()
    }
}

/// One attempt, bounded by the op timeout (`deadline`, watched by `timer`): no reply in
/// time is an unknown outcome, since the call may still apply.
async fn bounded<T>(
    timer: &mut OpTimer,
    deadline: Instant,
    timeout: Duration,
    fut: impl Future<Output = Result<T, OpError>>,
) -> Result<T, OpError> {
    let mut fut = pin!(fut);
    let mut sleep = timer.by(deadline);
    let deadline = tokio::time::Instant::from_std(deadline);
    poll_fn(|cx| {
        if let Poll::Ready(r) = fut.as_mut().poll(cx) {
            return Poll::Ready(r);
        }
        // As in tokio's `timeout`: a call that used up the task's budget does not keep
        // the timer from being polled.
        let unconstrained = !coop::has_budget_remaining();
        // At most twice: set to this op's deadline, the timer fires only past it.
        while poll_timer(sleep.as_mut(), unconstrained, cx).is_ready() {
            if sleep.deadline() >= deadline {
                let why = format!("no reply within {} ms", timeout.as_millis());
                return Poll::Ready(Err(OpError::new(ErrorClass::Timeout, Outcome::Unknown, why)));
            }
            // It fired at an earlier op's deadline.
            sleep.as_mut().reset(deadline);
        }
        Poll::Pending
    })
    .await
}

fn poll_timer(sleep: Pin<&mut Sleep>, unconstrained: bool, cx: &mut Context<'_>) -> Poll<()> {
    if unconstrained { Pin::new(&mut coop::unconstrained(sleep)).poll(cx) } else { sleep.poll(cx) }
}

/// Runs `call` (each attempt bounded by the op timeout, the first from `start`) until it
/// succeeds, fails on something other than a conflict, or runs out of attempts.
async fn attempt<T, F, Fut>(
    cfg: &DriverConfig,
    jitter_seed: u64,
    tries: &mut Tries,
    (timer, start): (&mut OpTimer, Instant),
    call: F,
) -> Result<T, OpError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, OpError>>,
{
    let mut n = 1;
    let mut from = start;
    loop {
        match bounded(timer, from + cfg.op_timeout, cfg.op_timeout, call()).await {
            Err(e) if e.retryable() || (cfg.retry.on_unknown && e.outcome == Outcome::Unknown) => {
                // Ctrl-C ends retrying too, so a stop is bounded by one attempt.
                if cfg.cancel.load(Ordering::Relaxed) {
                    return Err(e);
                }
                if n >= cfg.retry.max_attempts {
                    tries.gave_up = cfg.retry.max_attempts > 1;
                    return Err(e);
                }
                tries.retries += 1;
                tries.retried_errors[e.class.index()] += 1;
                tries.unknown_retried += (e.outcome == Outcome::Unknown) as u32;
                tokio::time::sleep(cfg.retry.backoff(n, jitter_seed)).await;
                n += 1;
                from = Instant::now();
            }
            other => return other,
        }
    }
}

/// One call as the history records it (a `mark_read_dup` op makes K of them).
pub(super) struct Call {
    pub(super) invoke: Instant,
    pub(super) complete: Instant,
    pub(super) id: i64,
    pub(super) outcome: Outcome,
    pub(super) observed: i64,
    pub(super) attempts: u32,
    pub(super) unknown_attempts: u32,
}

impl Call {
    fn of<T>(invoke: Instant, id: i64, r: &Result<T, OpError>, observed: impl Fn(&T) -> i64, t: &Tries) -> Call {
        Call {
            invoke,
            complete: Instant::now(),
            id,
            outcome: r.as_ref().map_or_else(|e| e.outcome, |_| Outcome::Ok),
            observed: r.as_ref().map_or(0, observed),
            attempts: t.retries as u32 + 1,
            unknown_attempts: t.unknown_retried,
        }
    }
}

/// The calls of one op: one, or K for a `mark_read_dup` group (kept inline for one, so
/// an op allocates nothing for its history).
pub(super) type Calls = SmallVec<[Call; 1]>;

/// Runs one planned op that started at `start`, its attempts bounded by the worker's
/// `timer`. Returns None when the op had no target (skipped), else whether it changed
/// something, or its error, and its calls for the history.
pub(super) async fn execute(
    strategy: &dyn Strategy,
    pool: &IdPool,
    op: PlannedOp,
    cfg: &DriverConfig,
    tries: &mut Tries,
    (timer, start): (&mut OpTimer, Instant),
) -> Option<(Result<bool, OpError>, Calls)> {
    let user = op.user;
    let js = cfg.seed ^ op.pick;
    let (t, bound) = (start, (timer, start));
    let one = |call| SmallVec::from_buf([call]);
    Some(match op.kind {
        OpKind::Create => {
            let r = attempt(cfg, js, tries, bound, || strategy.create(user)).await;
            let call = Call::of(t, *r.as_ref().unwrap_or(&0), &r, |_| 1, tries);
            let r = r.map(|id| {
                pool.add_unread(user, id);
                true
            });
            (r, one(call))
        }
        OpKind::MarkRead => {
            let id = pool.pick_any(user, op.pick)?;
            let r = attempt(cfg, js, tries, bound, || strategy.mark_read(user, id)).await;
            if r.is_ok() {
                pool.mark_read(user, id);
            }
            let call = Call::of(t, id, &r, |b| *b as i64, tries);
            (r, one(call))
        }
        OpKind::MarkReadDup => {
            let id = pool.pick_unread_first(user, op.pick)?;
            mark_read_dup(strategy, pool, op, id, cfg, tries).await
        }
        OpKind::Delete => {
            let id = pool.pick_any(user, op.pick)?;
            let r = attempt(cfg, js, tries, bound, || strategy.delete(user, id)).await;
            if r.is_ok() {
                pool.remove(user, id);
            }
            let call = Call::of(t, id, &r, |b| *b as i64, tries);
            (r, one(call))
        }
        OpKind::MarkAllRead => {
            let r = attempt(cfg, js, tries, bound, || strategy.mark_all_read(user)).await;
            let call = Call::of(t, 0, &r, |n| *n as i64, tries);
            let r = r.map(|n| {
                pool.mark_all_read(user);
                n > 0
            });
            (r, one(call))
        }
        OpKind::ReadCount => {
            let r = attempt(cfg, js, tries, bound, || strategy.read_count(user)).await;
            let call = Call::of(t, 0, &r, |v| *v, tries);
            (r.map(|_| false), one(call))
        }
    })
}

/// A `mark_read_dup` op: K concurrent mark_reads of notification `id`, as a client that
/// sends duplicates would. Returns the group's result and one call per duplicate.
async fn mark_read_dup(
    strategy: &dyn Strategy,
    pool: &IdPool,
    op: PlannedOp,
    id: i64,
    cfg: &DriverConfig,
    tries: &mut Tries,
) -> (Result<bool, OpError>, Calls) {
    let user = op.user;
    let js = cfg.seed ^ op.pick;
    let calls = (0..cfg.dup_k as u64).map(|k| async move {
        let mut t = Tries::default();
        let invoke = Instant::now();
        // The group's calls run at once: each has a timer of its own.
        let mut timer = OpTimer::default();
        let r = attempt(cfg, js ^ k, &mut t, (&mut timer, invoke), || strategy.mark_read(user, id)).await;
        let call = Call::of(invoke, id, &r, |b| *b as i64, &t);
        (r, t, call)
    });
    let mut results = Vec::new();
    let mut group = Calls::new();
    for (r, t, call) in join_all(calls).await {
        tries.absorb(&t);
        results.push(r);
        group.push(call);
    }
    let r = group_result(&results);
    if r.is_ok() {
        pool.mark_read(user, id);
    }
    (r, group)
}

/// The group is ok when every call replied (true when any made the transition);
/// otherwise one of its errors, an unknown one when there is any, because it may have
/// applied.
fn group_result(results: &[Result<bool, OpError>]) -> Result<bool, OpError> {
    let worst =
        results.iter().filter_map(|r| r.as_ref().err()).max_by_key(|e| (e.outcome == Outcome::Unknown) as u8).cloned();
    match worst {
        Some(e) => Err(e),
        None => Ok(results.iter().any(|r| matches!(r, Ok(true)))),
    }
}
