//! The broker designs' side of the `Strategy` trait: each op's SQL change (a conditional
//! UPDATE decides the transition, as conditional-update does) then the delta's publish;
//! the consumer's start, settle (until every published delta is applied and acked),
//! the fault, the figures and teardown.

use counterlab_core::Figure;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use counterlab_core::{Fault, NotificationId, OpError, Strategy, StrategyInfo, UserId};

use super::shared::{MqStrategy, other};
use crate::db::Begin;

/// How often settle looks at the queue while it drains.
const SETTLE_POLL: Duration = Duration::from_millis(20);

#[async_trait]
impl Strategy for MqStrategy {
    fn info(&self) -> StrategyInfo {
        self.shared.info
    }

    /// A worker's SQL changes use its own connection, as the SQL designs' do; the
    /// consumer and the sampler keep the pool's spare.
    async fn worker_scope<'a>(&'a self, workers: u32, run: counterlab_core::WorkerLoop<'a>) {
        crate::strategies::hold_if_room(&self.shared.db, workers, run).await
    }

    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        let sh = &self.shared;
        let mut tx = sh.db.begin(Begin::Plain).await?;
        let id = tx.insert_id(sh.sql.insert, &[user]).await?;
        tx.commit().await?;
        sh.publish(user, 1).await?;
        Ok(id)
    }

    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let sh = &self.shared;
        let mut tx = sh.db.begin(Begin::Plain).await?;
        let changed = tx.exec(sh.sql.set_read_if_unread, &[id, user]).await? == 1;
        tx.commit().await?;
        sh.publish(user, if changed { -1 } else { 0 }).await?;
        Ok(changed)
    }

    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let sh = &self.shared;
        let mut tx = sh.db.begin(Begin::Plain).await?;
        let (deleted, was_unread) = if tx.exec(sh.sql.delete_unread, &[id, user]).await? == 1 {
            (true, true)
        } else {
            (tx.exec(sh.sql.delete_any, &[id, user]).await? == 1, false)
        };
        tx.commit().await?;
        sh.publish(user, if was_unread { -1 } else { 0 }).await?;
        Ok(deleted)
    }

    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        let sh = &self.shared;
        let mut tx = sh.db.begin(Begin::Plain).await?;
        let n = tx.exec(sh.sql.mark_all_rows, &[user]).await?;
        tx.commit().await?;
        sh.publish(user, -(n as i64)).await?;
        Ok(n)
    }

    /// The SQL counter: stale by the deltas still in the queue (an eventual design).
    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        Ok(self.shared.db.opt_i64(self.shared.sql.counter_read, &[user]).await?.unwrap_or(0))
    }

    async fn start(&self) {
        let sh = self.shared.clone();
        *self.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(tokio::spawn(sh.run_consumer()));
    }

    /// One pass of the consumer, one `basic.get` at a time until the queue has nothing
    /// ready (each get, apply and ack a step of the explorer's gate); an armed
    /// `consumer_crash_after_apply` fires in it, and the redelivery comes in the same pass.
    async fn background_pass(&self) -> Result<bool, OpError> {
        self.shared.pull_pass(true).await?;
        Ok(true)
    }

    /// Waits (within `bound`) until every published delta was applied and acked and no
    /// message waits in the queue, then stops the consumer. With no consumer task (the
    /// explorer runs the consumer's passes itself), drains by pull passes instead.
    async fn settle(&self, bound: Duration) -> Result<(), OpError> {
        let sh = &self.shared;
        if self.task.lock().unwrap_or_else(|e| e.into_inner()).is_none() {
            return sh.drain(bound).await;
        }
        let deadline = Instant::now() + bound;
        let drained = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let depth = tokio::time::timeout(left, sh.sample_depth())
                .await
                .unwrap_or_else(|_| Err(other("amqp: no depth within settle's bound".into())));
            if sh.all_acked() && matches!(depth, Ok(0)) {
                break Ok(());
            }
            if Instant::now() >= deadline {
                let depth = depth.map_or_else(|e| e.message, |d| d.to_string());
                let why = format!(
                    "queue not drained within {} ms: {depth} ready, {} published deltas not applied",
                    bound.as_millis(),
                    sh.unapplied()
                );
                break Err(other(why));
            }
            tokio::time::sleep(SETTLE_POLL).await;
        };
        self.stop_consumer(deadline.saturating_duration_since(Instant::now())).await;
        drained
    }

    fn takes(&self, fault: Fault) -> bool {
        fault == Fault::ConsumerCrashAfterApply
    }

    async fn inject(&self, fault: Fault) -> Result<String, OpError> {
        let sh = &self.shared;
        match fault {
            Fault::ConsumerCrashAfterApply => {
                sh.crashes_armed.fetch_add(1, Ordering::Relaxed);
                Ok(match sh.design {
                    super::MqDesign::Naive => "the consumer will die after its next apply commits, before the ack; \
                                               the broker redelivers and it applies again"
                        .into(),
                    super::MqDesign::Idempotent => "the consumer will die after its next apply commits, before the \
                                                    ack; the broker redelivers and the recorded id skips it"
                        .into(),
                })
            }
            _ => Err(other(format!("{} has no {} fault point", sh.info.name, fault.name()))),
        }
    }

    /// Published deltas not yet applied; the queue's depth is sampled beside it.
    async fn pending(&self) -> Option<i64> {
        self.shared.sample_depth().await.ok()?;
        Some(self.shared.unapplied())
    }

    fn figures(&self) -> Vec<(Figure, f64)> {
        let sh = &self.shared;
        let f = &sh.figures;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let (applied, acked) = {
            let l = sh.ledger.lock().unwrap_or_else(|e| e.into_inner());
            (l.applied.len() as f64, l.acked.len() as f64)
        };
        vec![
            (Figure::Published, g(&f.published)),
            (Figure::Acked, acked),
            (Figure::PublishFailures, g(&f.publish_failures)),
            (Figure::Applied, applied),
            (Figure::Deliveries, g(&f.deliveries)),
            (Figure::Redelivered, g(&f.redelivered)),
            (Figure::ConsumerCrashes, g(&f.consumer_crashes)),
            (Figure::ConsumerRestarts, g(&f.consumer_restarts)),
            (Figure::DoubleAppliesAfterRedelivery, g(&f.double_applies)),
            (Figure::DoubleAppliesRaising, g(&f.double_applies_raising)),
            (Figure::DoubleAppliesLowering, g(&f.double_applies) - g(&f.double_applies_raising)),
            (Figure::DuplicatesSkipped, g(&f.duplicates_skipped)),
            (Figure::ApplyErrors, g(&f.apply_errors)),
            (Figure::ApplyLagP50Ms, sh.lag_ms(0.5)),
            (Figure::ApplyLagP99Ms, sh.lag_ms(0.99)),
            (Figure::QueueDepthMax, g(&f.depth_max)),
        ]
    }

    /// Stops the consumer; the queue itself is deleted by the run's teardown (with the
    /// space), also when the strategy never got built.
    async fn teardown(&self) -> Result<(), OpError> {
        self.stop_consumer(Duration::from_secs(5)).await;
        Ok(())
    }
}

impl MqStrategy {
    /// Tells the consumer to stop and waits for it (at most `wait`, then it is aborted).
    async fn stop_consumer(&self, wait: Duration) {
        self.shared.stop.send_replace(true);
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut t) = task
            && tokio::time::timeout(wait.max(Duration::from_millis(100)), &mut t).await.is_err()
        {
            t.abort();
        }
    }
}
