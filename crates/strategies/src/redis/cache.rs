//! cache-aside: the counter lives in SQL (the conditional design), reads go through a
//! Redis cache filled on a miss, and writes invalidate it with a "delayed double delete"
//! (delete after the commit, wait, delete again), or, in the mutant, once before the
//! write, so a read that misses while the write runs caches the old count until the
//! next write or the entry's TTL.

use counterlab_core::Figure;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use counterlab_core::{ErrorClass, Fault, NotificationId, OpError, Outcome, Strategy, StrategyInfo, UserId};
use redis::AsyncCommands;
use tokio::task::JoinSet;

use super::{RedisConfig, RedisSpace, classify_redis};
use crate::db::Db;
use crate::strategies::{Design, SqlStrategy};

/// Second deletes waiting at once, at most; past it a write waits for them.
const MAX_PENDING_DELETES: usize = 100_000;

/// What the cache did, for the report.
#[derive(Default)]
struct Figures {
    hits: AtomicU64,
    misses: AtomicU64,
    second_deletes: AtomicU64,
    second_delete_errors: AtomicU64,
    /// The latest a second delete ran past its schedule, in microseconds.
    late_max_us: AtomicU64,
}

/// The SQL conditional design behind a Redis read cache.
pub struct CacheAside {
    sql: SqlStrategy,
    space: RedisSpace,
    delay: Duration,
    ttl: Duration,
    /// The mutant: one delete, before the write.
    delete_first: bool,
    later: Mutex<JoinSet<()>>,
    figures: std::sync::Arc<Figures>,
}

impl CacheAside {
    pub fn new(info: StrategyInfo, db: Db, space: RedisSpace, cfg: RedisConfig, delete_first: bool) -> CacheAside {
        CacheAside {
            sql: SqlStrategy::new(info, Design::ConditionalUpdate, db),
            space,
            delay: cfg.cache_delay,
            ttl: cfg.cache_ttl,
            delete_first,
            later: Mutex::new(JoinSet::new()),
            figures: Default::default(),
        }
    }

    fn key(&self, user: UserId) -> String {
        self.space.user_key(user, "cache")
    }

    async fn delete(&self, user: UserId) -> Result<(), OpError> {
        let mut c = self.space.conn();
        c.del::<_, ()>(self.key(user)).await.map_err(classify_redis)
    }

    /// Runs one write with the design's invalidation around it.
    async fn write<T>(&self, user: UserId, op: impl Future<Output = Result<T, OpError>>) -> Result<T, OpError> {
        if self.delete_first {
            self.delete(user).await?;
            return op.await;
        }
        let r = op.await?;
        // Committed: a delete that fails now leaves the cache stale, and the op's
        // outcome, as the caller sees it, unknown.
        self.delete(user)
            .await
            .map_err(|e| OpError::new(e.class, Outcome::Unknown, format!("after the commit: {}", e.message)))?;
        self.delete_later(user).await;
        Ok(r)
    }

    /// Schedules the second delete `delay` from now (bounded: past `MAX_PENDING_DELETES`
    /// waiting, this write waits until every one of them has run).
    async fn delete_later(&self, user: UserId) {
        let (space, key, delay, f) = (self.space.clone(), self.key(user), self.delay, self.figures.clone());
        let due = Instant::now() + delay;
        let full = {
            let mut later = self.later.lock().unwrap_or_else(|e| e.into_inner());
            while later.try_join_next().is_some() {}
            later.spawn(async move {
                tokio::time::sleep_until(due.into()).await;
                let done = second_delete(&space, &key).await;
                // Late by the time the DEL is done: until then a stale entry may be read.
                f.late_max_us.fetch_max(due.elapsed().as_micros() as u64, Ordering::Relaxed);
                let counter = if done { &f.second_deletes } else { &f.second_delete_errors };
                counter.fetch_add(1, Ordering::Relaxed);
            });
            later.len() > MAX_PENDING_DELETES
        };
        if full {
            let oldest = std::mem::take(&mut *self.later.lock().unwrap_or_else(|e| e.into_inner()));
            oldest.join_all().await;
        }
    }
}

/// Attempts at a second delete that fails on the connection (a reconnect in between).
const SECOND_DELETE_ATTEMPTS: u32 = 3;

/// The second delete, retried (bounded) when the connection failed; whether it ran.
async fn second_delete(space: &RedisSpace, key: &str) -> bool {
    for attempt in 1..=SECOND_DELETE_ATTEMPTS {
        let mut c = space.conn();
        match c.del::<_, ()>(key).await {
            Ok(()) => return true,
            Err(e) if attempt < SECOND_DELETE_ATTEMPTS && (e.is_io_error() || e.is_connection_dropped()) => {
                tokio::time::sleep(Duration::from_millis(10 * u64::from(attempt))).await;
            }
            Err(_) => return false,
        }
    }
    false
}

fn other(msg: String) -> OpError {
    OpError::new(ErrorClass::Other, Outcome::Fail, msg)
}

#[async_trait]
impl Strategy for CacheAside {
    fn info(&self) -> StrategyInfo {
        self.sql.info()
    }

    async fn worker_scope<'a>(&'a self, workers: u32, run: counterlab_core::WorkerLoop<'a>) {
        self.sql.worker_scope(workers, run).await
    }

    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        self.write(user, self.sql.create(user)).await
    }

    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        self.write(user, self.sql.mark_read(user, id)).await
    }

    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        self.write(user, self.sql.delete(user, id)).await
    }

    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        self.write(user, self.sql.mark_all_read(user)).await
    }

    /// A hit shows the cached count; a miss reads SQL and caches what it read.
    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        let mut c = self.space.conn();
        let cached: Option<i64> = c.get(self.key(user)).await.map_err(classify_redis)?;
        if let Some(v) = cached {
            self.figures.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(v);
        }
        self.figures.misses.fetch_add(1, Ordering::Relaxed);
        let v = self.sql.read_count(user).await?;
        let ttl_ms = self.ttl.as_millis() as u64;
        c.pset_ex::<_, _, ()>(self.key(user), v, ttl_ms).await.map_err(classify_redis)?;
        Ok(v)
    }

    /// Waits (within `bound`) until every scheduled second delete has run.
    async fn settle(&self, bound: Duration) -> Result<(), OpError> {
        let pending = std::mem::take(&mut *self.later.lock().unwrap_or_else(|e| e.into_inner()));
        let n = pending.len();
        tokio::time::timeout(bound, pending.join_all())
            .await
            .map(|_| ())
            .map_err(|_| other(format!("{n} second deletes not done within {} ms", bound.as_millis())))
    }

    /// Reads may show the count as it was before a write, until its second delete:
    /// `delay` after the write replied, plus how late the latest second delete ran. The
    /// mutant is allowed the same `delay`: only its mechanism differs.
    fn read_lag(&self) -> Option<Duration> {
        Some(self.delay + Duration::from_micros(self.figures.late_max_us.load(Ordering::Relaxed)))
    }

    fn takes(&self, fault: Fault) -> bool {
        matches!(fault, Fault::RedisDataLoss | Fault::Failover { .. } | Fault::RedisDisconnect) || self.sql.takes(fault)
    }

    async fn inject(&self, fault: Fault) -> Result<String, OpError> {
        match fault {
            Fault::RedisDataLoss => {
                let n = self.space.delete_all().await?;
                Ok(format!("deleted {n} keys under {} (the cache refills on misses)", self.space.prefix()))
            }
            Fault::Failover { cut_ms } => self.space.failover(std::time::Duration::from_millis(cut_ms)).await,
            Fault::RedisDisconnect => {
                let n = self.space.kill_connections().await?;
                Ok(format!("killed {n} of the run's Redis connections (CLIENT KILL ID); they reconnect"))
            }
            _ => self.sql.inject(fault).await,
        }
    }

    fn figures(&self) -> Vec<(Figure, f64)> {
        let f = &self.figures;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let mut v = self.sql.figures();
        v.extend([
            (Figure::CacheHits, g(&f.hits)),
            (Figure::CacheMisses, g(&f.misses)),
            (Figure::SecondDeletes, g(&f.second_deletes)),
            (Figure::SecondDeleteErrors, g(&f.second_delete_errors)),
            (Figure::SecondDeleteLateMaxMs, g(&f.late_max_us) / 1e3),
        ]);
        v
    }

    async fn net_drift(&self) -> Option<i64> {
        self.sql.net_drift().await
    }

    async fn teardown(&self) -> Result<(), OpError> {
        self.later.lock().unwrap_or_else(|e| e.into_inner()).abort_all();
        self.space.delete_all().await?;
        self.space.release().await
    }
}
