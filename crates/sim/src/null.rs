//! A strategy that answers at once and keeps nothing: what is left to measure is the
//! driver itself (its unit tests and `benches/open_loop_driver.rs`).

use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use counterlab_core::{BatchOp, Guarantee, NotificationId, OpError, OpKind, Strategy, StrategyInfo, UserId};

/// Every op succeeds after one yield to the runtime (so ops interleave as real ones do).
#[derive(Default)]
pub struct NullStrategy {
    next_id: AtomicI64,
}

#[async_trait]
impl Strategy for NullStrategy {
    fn info(&self) -> StrategyInfo {
        StrategyInfo { name: "null", guarantee: Guarantee::None, summary: "answers at once; keeps nothing" }
    }
    async fn create(&self, _: UserId) -> Result<NotificationId, OpError> {
        tokio::task::yield_now().await;
        // Ids above any seeded one.
        Ok(1 << 40 | self.next_id.fetch_add(1, Ordering::Relaxed))
    }
    async fn mark_read(&self, _: UserId, _: NotificationId) -> Result<bool, OpError> {
        tokio::task::yield_now().await;
        Ok(true)
    }
    async fn delete(&self, _: UserId, _: NotificationId) -> Result<bool, OpError> {
        tokio::task::yield_now().await;
        Ok(true)
    }
    async fn mark_all_read(&self, _: UserId) -> Result<u64, OpError> {
        tokio::task::yield_now().await;
        Ok(1)
    }
    async fn read_count(&self, _: UserId) -> Result<i64, OpError> {
        tokio::task::yield_now().await;
        Ok(0)
    }
    fn batches(&self, _: OpKind) -> Result<(), String> {
        Ok(())
    }
    /// Every op of the batch answers as its method would, after one yield for all.
    async fn batch(&self, ops: &[BatchOp]) -> Vec<Result<i64, OpError>> {
        tokio::task::yield_now().await;
        let one = |op: &BatchOp| match op.kind {
            OpKind::Create => 1 << 40 | self.next_id.fetch_add(1, Ordering::Relaxed),
            OpKind::ReadCount => 0,
            _ => 1,
        };
        ops.iter().map(|op| Ok(one(op))).collect()
    }
}
