//! The `pause` fault point: a wrapper that makes any strategy stall. While a pause is
//! on, every operation waits at its entry until the pause ends (as if the server froze),
//! then runs; background work and the check are untouched.

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
    async fn start(&self) {
        self.inner.start().await
    }
    async fn settle(&self, bound: Duration) -> Result<(), OpError> {
        self.inner.settle(bound).await
    }
    async fn counters(&self, n_users: u64) -> Result<Option<Vec<Option<i64>>>, OpError> {
        self.inner.counters(n_users).await
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
    fn figures(&self) -> Vec<(&'static str, f64)> {
        self.inner.figures()
    }
    async fn teardown(&self) -> Result<(), OpError> {
        self.inner.teardown().await
    }
}
