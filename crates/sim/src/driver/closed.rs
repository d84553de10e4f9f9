//! The closed loop: N workers, each issuing its next op as soon as the previous one
//! completes, until the stage's op budget or duration runs out.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Ctx, Stop, Worker, join_workers, worker_stream};
use crate::workload::{OpGen, UserPicker};

/// Runs closed-loop stage `idx` with `workers` workers from `start`. Returns the workers
/// and how many ops they issued.
pub(super) async fn run(
    ctx: &Arc<Ctx>,
    idx: usize,
    stop: Stop,
    workers: u32,
    start: Instant,
    users: &Arc<UserPicker>,
) -> (Vec<Worker>, u64) {
    let cfg = &ctx.cfg;
    let n = workers as u64;
    let deadline = match stop {
        Stop::Duration(d) => Some(start + d),
        Stop::Ops(_) => None,
    };
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let budget = match stop {
                Stop::Ops(total) => Some(total / n + u64::from(i < total % n)),
                Stop::Duration(_) => None,
            };
            let ops = OpGen::new(cfg.seed, worker_stream(idx, i), cfg.mix, users.clone());
            tokio::spawn(worker(ctx.clone(), i as u32, ops, budget, deadline, workers))
        })
        .collect();
    let ws = join_workers(handles).await;
    let issued = ws.iter().map(|w| w.issued_or_skipped).sum();
    (ws, issued)
}

async fn worker(ctx: Arc<Ctx>, id: u32, ops: OpGen, budget: Option<u64>, deadline: Option<Instant>, n: u32) -> Worker {
    let mut w = Worker::new(id);
    // The strategy wraps the loop (a SQL design holds one connection for it).
    let strategy = ctx.strategy.clone();
    strategy.worker_scope(n, Box::pin(op_loop(&ctx, &mut w, ops, budget, deadline))).await;
    w
}

async fn op_loop(ctx: &Ctx, w: &mut Worker, mut ops: OpGen, budget: Option<u64>, deadline: Option<Instant>) {
    // When the last op completed: a closed loop starts the next at once.
    let mut now = Instant::now();
    loop {
        if budget.is_some_and(|b| w.issued_or_skipped >= b)
            || deadline.is_some_and(|d| now >= d)
            || ctx.cfg.cancel.load(Ordering::Relaxed)
        {
            break;
        }
        if ctx.cfg.batch > 1 {
            let batch = budget.map_or(ctx.cfg.batch as u64, |b| (b - w.issued_or_skipped).min(ctx.cfg.batch as u64));
            let planned = (0..batch).map(|_| ops.next_op()).collect();
            ctx.run_batch(w, planned).await;
            now = Instant::now();
            continue;
        }
        let op = ops.next_op();
        now = ctx.run_op(w, op, None).await;
    }
}
