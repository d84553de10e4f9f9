//! A closed-loop worker's batch (`DriverConfig::batch` above 1): the ops it draws go out
//! at once through `Strategy::batch` (one Redis pipeline), bounded as one call by the op
//! timeout. Each op is recorded as the others are: invoked when the batch is sent,
//! completed when its reply came back (the batch's), its own outcome and reply. A batched
//! op is not retried: its reply came in the batch, and a retry would be an op of its own.

use std::time::Instant;

use counterlab_core::{BatchOp, ErrorClass, OpError, OpKind, Outcome};

use super::op::Call;
use super::{Ctx, Worker};
use crate::metrics::Tries;
use crate::pool::IdPool;
use crate::workload::PlannedOp;

/// An op's target: the notification it acts on (0: none). None: it has none to act on
/// (skipped, as a single op would be).
fn target(pool: &IdPool, op: PlannedOp) -> Option<i64> {
    match op.kind {
        OpKind::MarkRead | OpKind::Delete => pool.pick_any(op.user, op.pick),
        OpKind::MarkReadDup => unreachable!("refused with redis_batch (plan)"),
        _ => Some(0),
    }
}

/// What a reply means for the id pool, as `execute` keeps it: whether the op changed
/// something, and the id the history records.
fn applied(pool: &IdPool, op: &BatchOp, reply: i64) -> (bool, i64) {
    match op.kind {
        OpKind::Create => {
            pool.add_unread(op.user, reply);
            (true, reply)
        }
        OpKind::MarkRead => {
            pool.mark_read(op.user, op.id);
            (reply != 0, op.id)
        }
        OpKind::Delete => {
            pool.remove(op.user, op.id);
            (reply != 0, op.id)
        }
        OpKind::MarkAllRead => {
            pool.mark_all_read(op.user);
            (reply > 0, 0)
        }
        _ => (false, 0),
    }
}

impl Ctx {
    /// Runs `planned` as one batch and records each op.
    pub(super) async fn run_batch(&self, w: &mut Worker, planned: Vec<PlannedOp>) {
        let mut sent = Vec::with_capacity(planned.len());
        for op in planned {
            w.issued_or_skipped += 1;
            match target(&self.pool, op) {
                None => w.stats(op.kind).skipped += 1,
                Some(id) => sent.push((op, BatchOp { kind: op.kind, user: op.user, id })),
            }
        }
        if sent.is_empty() {
            return;
        }
        let ops: Vec<BatchOp> = sent.iter().map(|s| s.1).collect();
        let start = Instant::now();
        let replies = match tokio::time::timeout(self.cfg.op_timeout, self.strategy.batch(&ops)).await {
            Ok(r) if r.len() == ops.len() => r,
            Ok(r) => vec![Err(short(r.len(), ops.len())); ops.len()],
            Err(_) => {
                let why = format!("no reply within {} ms (a batch of {})", self.cfg.op_timeout.as_millis(), ops.len());
                vec![Err(OpError::new(ErrorClass::Timeout, Outcome::Unknown, why)); ops.len()]
            }
        };
        let end = Instant::now();
        let service = (end.saturating_duration_since(start).as_micros() as u64).min(self.max_us);
        // Per kind: how many ops, how many failed (one latency, recorded once per kind).
        let mut by_kind = [(0u64, 0u64); OpKind::ALL.len()];
        for ((op, b), reply) in sent.into_iter().zip(replies) {
            let (result, id, observed) = match reply {
                Ok(v) => {
                    let (changed, id) = applied(&self.pool, &b, v);
                    let observed = if op.kind == OpKind::Create { 1 } else { v };
                    (Ok(changed), id, observed)
                }
                Err(e) => (Err(e), b.id, 0),
            };
            let outcome = result.as_ref().map_or_else(|e| e.outcome, |_| Outcome::Ok);
            let call = Call { invoke: start, complete: end, id, outcome, observed, attempts: 1, unknown_attempts: 0 };
            self.record_calls(w, op, std::iter::once(call));
            w.note_error(&result);
            w.stats(op.kind).count_result(&result, &Tries::default());
            let k = &mut by_kind[op.kind.index()];
            (k.0, k.1) = (k.0 + 1, k.1 + result.is_err() as u64);
        }
        for (kind, (n, errors)) in OpKind::ALL.into_iter().zip(by_kind) {
            if n > 0 {
                w.stats(kind).record_latency_n(service, n);
                self.monitor.record_n(w.id, kind, service, n, errors);
            }
        }
    }
}

/// A strategy that answered for fewer or more ops than it was sent: nothing is known of
/// any of them.
fn short(got: usize, sent: usize) -> OpError {
    OpError::new(ErrorClass::Other, Outcome::Unknown, format!("the batch answered {got} replies for {sent} ops"))
}
