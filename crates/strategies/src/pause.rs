//! The `pause` fault point: a wrapper that makes any strategy stall. While a pause is
//! on, every operation waits at its entry until the pause ends (as if the server froze),
//! then runs; background work and the check are untouched.

use counterlab_core::Figure;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use counterlab_core::{Fault, NotificationId, OpError, Strategy, StrategyInfo, UserId};

/// Wraps a strategy; `pause(d)` stalls every op that starts within the next `d`.
pub struct Pausable {
    inner: Arc<dyn Strategy>,
    base: Instant,
    /// End of the current pause, in microseconds since `base` (0: none yet).
    until_us: AtomicU64,
}

impl Pausable {
    pub fn new(inner: Arc<dyn Strategy>) -> Pausable {
        Pausable { inner, base: Instant::now(), until_us: AtomicU64::new(0) }
    }

    /// Starts a pause of `d` from now (extends one in progress).
    pub fn pause(&self, d: Duration) -> String {
        let end = (self.base.elapsed() + d).as_micros() as u64;
        self.until_us.fetch_max(end, Ordering::Relaxed);
        format!("every op stalls for {} ms", d.as_millis())
    }

    async fn gate(&self) {
        let until = self.until_us.load(Ordering::Relaxed);
        if until > 0 {
            let end = self.base + Duration::from_micros(until);
            if Instant::now() < end {
                tokio::time::sleep_until(end.into()).await;
            }
        }
    }
}

#[async_trait]
impl Strategy for Pausable {
    fn info(&self) -> StrategyInfo {
        self.inner.info()
    }
    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        self.gate().await;
        self.inner.create(user).await
    }
    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        self.gate().await;
        self.inner.mark_read(user, id).await
    }
    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        self.gate().await;
        self.inner.delete(user, id).await
    }
    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        self.gate().await;
        self.inner.mark_all_read(user).await
    }
    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        self.gate().await;
        self.inner.read_count(user).await
    }
    async fn seed(&self, spec: counterlab_core::SeedSpec) -> Result<(), OpError> {
        self.inner.seed(spec).await
    }
    async fn worker_scope<'a>(&'a self, workers: u32, run: counterlab_core::WorkerLoop<'a>) {
        self.inner.worker_scope(workers, run).await
    }
    fn batches(&self, kind: counterlab_core::OpKind) -> Result<(), String> {
        self.inner.batches(kind)
    }
    async fn batch(&self, ops: &[counterlab_core::BatchOp]) -> Vec<Result<i64, OpError>> {
        self.gate().await;
        self.inner.batch(ops).await
    }
    async fn start(&self) {
        self.inner.start().await
    }
    async fn background_pass(&self) -> Result<bool, OpError> {
        self.inner.background_pass().await
    }
    async fn settle(&self, bound: Duration) -> Result<(), OpError> {
        self.inner.settle(bound).await
    }
    async fn counters(&self, n_users: u64) -> Result<Option<counterlab_core::UserCounters>, OpError> {
        self.inner.counters(n_users).await
    }
    fn takes(&self, fault: Fault) -> bool {
        matches!(fault, Fault::Pause { .. }) || self.inner.takes(fault)
    }

    async fn inject(&self, fault: Fault) -> Result<String, OpError> {
        match fault {
            Fault::Pause { duration_ms } => Ok(self.pause(Duration::from_millis(duration_ms))),
            other => self.inner.inject(other).await,
        }
    }
    async fn pending(&self) -> Option<i64> {
        self.inner.pending().await
    }
    async fn net_drift(&self) -> Option<i64> {
        self.inner.net_drift().await
    }
    fn figures(&self) -> Vec<(Figure, f64)> {
        self.inner.figures()
    }
    fn read_lag(&self) -> Option<Duration> {
        self.inner.read_lag()
    }
    async fn teardown(&self) -> Result<(), OpError> {
        self.inner.teardown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use counterlab_core::{ErrorClass, Guarantee, Outcome};

    /// A strategy that only declares a read lag and figures (its ops are never called).
    struct Lagging;

    #[async_trait]
    impl Strategy for Lagging {
        fn info(&self) -> StrategyInfo {
            StrategyInfo { name: "lagging", guarantee: Guarantee::Exact, summary: "" }
        }
        async fn create(&self, _: UserId) -> Result<NotificationId, OpError> {
            Err(OpError::new(ErrorClass::Other, Outcome::Fail, "unused"))
        }
        async fn mark_read(&self, _: UserId, _: NotificationId) -> Result<bool, OpError> {
            Ok(false)
        }
        async fn delete(&self, _: UserId, _: NotificationId) -> Result<bool, OpError> {
            Ok(false)
        }
        async fn mark_all_read(&self, _: UserId) -> Result<u64, OpError> {
            Ok(0)
        }
        async fn read_count(&self, _: UserId) -> Result<i64, OpError> {
            Ok(0)
        }
        fn read_lag(&self) -> Option<Duration> {
            Some(Duration::from_millis(150))
        }
        fn figures(&self) -> Vec<(Figure, f64)> {
            vec![(Figure::Flushes, 1.0)]
        }
    }

    #[test]
    fn the_wrapper_keeps_what_the_strategy_declares() {
        let p = Pausable::new(Arc::new(Lagging));
        assert_eq!(p.read_lag(), Some(Duration::from_millis(150)), "a pause must not change how reads are judged");
        assert_eq!(p.figures(), vec![(Figure::Flushes, 1.0)]);
        assert_eq!(p.info().name, "lagging");
    }
}
