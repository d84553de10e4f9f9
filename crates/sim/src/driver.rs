//! The closed-loop driver: N tokio workers, each with its own seeded op stream, issue
//! operations back to back against one strategy until the op budget or the deadline.
//! Errors are classified and counted; they never stop the run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use counterlab_core::{ErrorClass, OpError, OpKind, Outcome, Strategy};
use futures_util::future::join_all;

use crate::metrics::OpStats;
use crate::pool::IdPool;
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
        if secs > 0.0 {
            self.total_ops() as f64 / secs
        } else {
            0.0
        }
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

/// Runs one planned op. Returns None when the op had no target (skipped), else whether
/// it changed something, or its error.
async fn execute(
    strategy: &dyn Strategy,
    pool: &IdPool,
    op: PlannedOp,
    cfg: &DriverConfig,
) -> Option<Result<bool, OpError>> {
    let t = cfg.op_timeout;
    let user = op.user;
    Some(match op.kind {
        OpKind::Create => bounded(t, strategy.create(user)).await.map(|id| {
            pool.add_unread(user, id);
            true
        }),
        OpKind::MarkRead => {
            let id = pool.pick_any(user, op.pick)?;
            let r = bounded(t, strategy.mark_read(user, id)).await;
            if r.is_ok() {
                pool.mark_read(user, id);
            }
            r
        }
        OpKind::MarkReadDup => {
            let id = pool.pick_unread_first(user, op.pick)?;
            let calls = (0..cfg.dup_k).map(|_| bounded(t, strategy.mark_read(user, id)));
            let results = join_all(calls).await;
            let transitions = results.iter().filter(|r| matches!(r, Ok(true))).count();
            // The group is ok when every call replied; the first error otherwise, with
            // unknown taking precedence because it may have applied.
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
            let r = bounded(t, strategy.delete(user, id)).await;
            if r.is_ok() {
                pool.remove(user, id);
            }
            r
        }
        OpKind::MarkAllRead => bounded(t, strategy.mark_all_read(user)).await.map(|n| {
            pool.mark_all_read(user);
            n > 0
        }),
        OpKind::ReadCount => bounded(t, strategy.read_count(user)).await.map(|_| false),
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
    let mut w = Worker {
        stats: OpKind::ALL.iter().map(|_| OpStats::new(max_us)).collect(),
        error_samples: Vec::new(),
    };
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
        match execute(strategy.as_ref(), &pool, op, &cfg).await {
            None => w.stats[op.kind.index()].skipped += 1,
            Some(result) => {
                let us = start.elapsed().as_micros() as u64;
                w.note_error(&result);
                w.stats[op.kind.index()].record(us, &result);
            }
        }
    }
    w
}

/// Drives `strategy` with the configured closed-loop workload. The pool must describe
/// the data the strategy's namespace was seeded with.
pub async fn run_load(
    strategy: Arc<dyn Strategy>,
    pool: Arc<IdPool>,
    cfg: &DriverConfig,
) -> LoadResult {
    assert!(cfg.n_workers > 0, "no workers");
    assert!(cfg.dup_k > 0, "dup_k is 0");
    let cfg = Arc::new(cfg.clone());
    let users = Arc::new(UserPicker::new(pool.n_users(), cfg.skew));
    // A group of K calls can take up to K timeouts' worth of queueing in the worst case;
    // the histogram range covers it so nothing saturates silently.
    let max_us = (cfg.op_timeout.as_micros() as u64).saturating_mul(cfg.dup_k as u64 + 1);
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
            tokio::spawn(worker_loop(
                strategy.clone(),
                pool.clone(),
                cfg.clone(),
                ops,
                budget,
                deadline,
                max_us,
            ))
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
    LoadResult {
        ops,
        elapsed: start.elapsed(),
        error_samples,
    }
}
