//! The closed-loop driver: N tokio workers, each with its own seeded op stream, issue
//! operations back to back against one strategy until the op budget or the deadline.
//! Errors are classified and counted; they never stop the run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use counterlab_core::{ErrorClass, OpError, OpKind, Outcome, Strategy};
use futures_util::future::join_all;

use crate::metrics::{OpStats, Tries};
use crate::pool::IdPool;
use crate::rng::Rng;
use crate::workload::{Mix, OpGen, PlannedOp, Skew, UserPicker};

/// When the load ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Each worker stops issuing new ops once this much time has passed.
    Duration(Duration),
    /// A total op budget split evenly over workers (the first `total % n` take one more),
    /// so each worker's sequence, and so the whole plan, depends only on the seed.
    Ops(u64),
}

#[derive(Clone, Debug)]
pub struct DriverConfig {
    pub seed: u64,
    pub n_workers: u32,
    pub stop: Stop,
    pub mix: Mix,
    pub skew: Skew,
    /// K for `mark_read_dup`.
    pub dup_k: u32,
    /// Bound on each call; a call that exceeds it is abandoned with outcome unknown.
    pub op_timeout: Duration,
    /// Set (by Ctrl-C) to stop issuing ops; ops in flight finish or time out.
    pub cancel: Arc<AtomicBool>,
    pub retry: RetryPolicy,
}

/// How conflicts (serialization, deadlock, lock wait timeout, busy) are retried: the
/// whole operation again, after an exponential backoff with seeded jitter. Unknown
/// outcomes are never retried: they may have applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; 1 disables retries.
    pub max_attempts: u32,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl RetryPolicy {
    fn backoff(&self, attempt: u32, jitter_seed: u64) -> Duration {
        let exp = self.backoff_base.saturating_mul(1u32 << (attempt - 1).min(16)).min(self.backoff_max);
        // Half fixed, half jitter, so colliding transactions spread out.
        exp.mul_f64(0.5 + 0.5 * Rng::derive(jitter_seed, attempt as u64).unit_f64())
    }
}

/// Everything the load produced, merged over workers.
#[derive(Debug)]
pub struct LoadResult {
    /// Indexed by `OpKind::index()`.
    pub ops: Vec<OpStats>,
    pub elapsed: Duration,
    /// The first few distinct error messages, for the report.
    pub error_samples: Vec<String>,
}

pub const MAX_ERROR_SAMPLES: usize = 5;

impl LoadResult {
    pub fn op(&self, kind: OpKind) -> &OpStats {
        &self.ops[kind.index()]
    }

    /// Issued ops (not skipped), over all kinds.
    pub fn total_ops(&self) -> u64 {
        self.ops.iter().map(|s| s.count).sum()
    }

    pub fn throughput_ops_per_s(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 { self.total_ops() as f64 / secs } else { 0.0 }
    }
}

struct Worker {
    stats: Vec<OpStats>,
    error_samples: Vec<String>,
}

impl Worker {
    fn note_error(&mut self, result: &Result<bool, OpError>) {
        if let Err(e) = result
            && self.error_samples.len() < MAX_ERROR_SAMPLES
        {
            let msg = e.to_string();
            if !self.error_samples.contains(&msg) {
                self.error_samples.push(msg);
            }
        }
    }
}

async fn bounded<T>(
    timeout: Duration,
    fut: impl std::future::Future<Output = Result<T, OpError>>,
) -> Result<T, OpError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(OpError::new(
            ErrorClass::Timeout,
            Outcome::Unknown,
            format!("no reply within {} ms", timeout.as_millis()),
        )),
    }
}

/// Runs `call` (each attempt bounded by the op timeout) until it succeeds, fails on
/// something other than a conflict, or runs out of attempts.
async fn attempt<T, F, Fut>(cfg: &DriverConfig, jitter_seed: u64, tries: &mut Tries, call: F) -> Result<T, OpError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, OpError>>,
{
    let mut n = 1;
    loop {
        match bounded(cfg.op_timeout, call()).await {
            Err(e) if e.retryable() => {
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
                tokio::time::sleep(cfg.retry.backoff(n, jitter_seed)).await;
                n += 1;
            }
            other => return other,
        }
    }
}

/// Runs one planned op. Returns None when the op had no target (skipped), else whether
/// it changed something, or its error.
async fn execute(
    strategy: &dyn Strategy,
    pool: &IdPool,
    op: PlannedOp,
    cfg: &DriverConfig,
    tries: &mut Tries,
) -> Option<Result<bool, OpError>> {
    let user = op.user;
    let js = cfg.seed ^ op.pick;
    Some(match op.kind {
        OpKind::Create => attempt(cfg, js, tries, || strategy.create(user)).await.map(|id| {
            pool.add_unread(user, id);
            true
        }),
        OpKind::MarkRead => {
            let id = pool.pick_any(user, op.pick)?;
            let r = attempt(cfg, js, tries, || strategy.mark_read(user, id)).await;
            if r.is_ok() {
                pool.mark_read(user, id);
            }
            r
        }
        OpKind::MarkReadDup => {
            let id = pool.pick_unread_first(user, op.pick)?;
            let calls = (0..cfg.dup_k as u64).map(|k| async move {
                let mut t = Tries::default();
                let r = attempt(cfg, js ^ k, &mut t, || strategy.mark_read(user, id)).await;
                (r, t)
            });
            let (results, group_tries): (Vec<_>, Vec<_>) = join_all(calls).await.into_iter().unzip();
            group_tries.iter().for_each(|t| tries.absorb(t));
            let transitions = results.iter().filter(|r| matches!(r, Ok(true))).count();
            // The group is ok when every call replied; otherwise one of its errors, an
            // unknown one when there is any, because it may have applied.
            let worst = results
                .iter()
                .filter_map(|r| r.as_ref().err())
                .max_by_key(|e| (e.outcome == Outcome::Unknown) as u8)
                .cloned();
            match worst {
                Some(e) => Err(e),
                None => {
                    pool.mark_read(user, id);
                    Ok(transitions > 0)
                }
            }
        }
        OpKind::Delete => {
            let id = pool.pick_any(user, op.pick)?;
            let r = attempt(cfg, js, tries, || strategy.delete(user, id)).await;
            if r.is_ok() {
                pool.remove(user, id);
            }
            r
        }
        OpKind::MarkAllRead => attempt(cfg, js, tries, || strategy.mark_all_read(user)).await.map(|n| {
            pool.mark_all_read(user);
            n > 0
        }),
        OpKind::ReadCount => attempt(cfg, js, tries, || strategy.read_count(user)).await.map(|_| false),
    })
}

async fn worker_loop(
    strategy: Arc<dyn Strategy>,
    pool: Arc<IdPool>,
    cfg: Arc<DriverConfig>,
    mut ops: OpGen,
    budget: Option<u64>,
    deadline: Option<Instant>,
    max_us: u64,
) -> Worker {
    let mut w = Worker { stats: OpKind::ALL.iter().map(|_| OpStats::new(max_us)).collect(), error_samples: Vec::new() };
    let mut issued = 0u64;
    loop {
        if budget.is_some_and(|b| issued >= b)
            || deadline.is_some_and(|d| Instant::now() >= d)
            || cfg.cancel.load(Ordering::Relaxed)
        {
            break;
        }
        issued += 1;
        let op = ops.next_op();
        let start = Instant::now();
        let mut tries = Tries::default();
        match execute(strategy.as_ref(), &pool, op, &cfg, &mut tries).await {
            None => w.stats[op.kind.index()].skipped += 1,
            Some(result) => {
                let us = start.elapsed().as_micros() as u64;
                w.note_error(&result);
                w.stats[op.kind.index()].record(us, &result, &tries);
            }
        }
    }
    w
}

/// Drives `strategy` with the configured closed-loop workload. The pool must describe
/// the data the strategy's namespace was seeded with.
pub async fn run_load(strategy: Arc<dyn Strategy>, pool: Arc<IdPool>, cfg: &DriverConfig) -> LoadResult {
    assert!(cfg.n_workers > 0, "no workers");
    assert!(cfg.dup_k > 0, "dup_k is 0");
    let cfg = Arc::new(cfg.clone());
    let users = Arc::new(UserPicker::new(pool.n_users(), cfg.skew));
    // A group of K calls, each retried, can queue for K times every attempt's timeout and
    // backoff in the worst case; the histogram range covers it so nothing saturates.
    let per_attempt = cfg.op_timeout + cfg.retry.backoff_max;
    let max_us =
        (per_attempt.as_micros() as u64).saturating_mul(cfg.retry.max_attempts as u64 * (cfg.dup_k as u64 + 1));
    let start = Instant::now();
    let deadline = match cfg.stop {
        Stop::Duration(d) => Some(start + d),
        Stop::Ops(_) => None,
    };
    let n = cfg.n_workers as u64;
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let budget = match cfg.stop {
                Stop::Ops(total) => Some(total / n + u64::from(i < total % n)),
                Stop::Duration(_) => None,
            };
            let ops = OpGen::new(cfg.seed, i, cfg.mix, users.clone());
            tokio::spawn(worker_loop(strategy.clone(), pool.clone(), cfg.clone(), ops, budget, deadline, max_us))
        })
        .collect();
    let mut ops: Vec<OpStats> = OpKind::ALL.iter().map(|_| OpStats::new(max_us)).collect();
    let mut error_samples = Vec::new();
    for h in handles {
        // A worker panic is a bug in counterlab or a strategy, not a load result.
        let w = h.await.expect("worker task panicked");
        for (total, part) in ops.iter_mut().zip(&w.stats) {
            total.merge(part);
        }
        for m in w.error_samples {
            if error_samples.len() < MAX_ERROR_SAMPLES && !error_samples.contains(&m) {
                error_samples.push(m);
            }
        }
    }
    LoadResult { ops, elapsed: start.elapsed(), error_samples }
}
