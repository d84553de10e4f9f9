//! zset-replica-reads, the seed's Flask design: counters in one Redis sorted set
//! (`{z}:unread`, member = user, score = count) moved by ZINCRBY after each SQL commit
//! (the conditional design decides), read from a Redis replica with the primary as
//! fallback (`[replica] read_from = "replica-fallback"`), and a reconciler that resets a
//! user's score from the database whenever the two disagree. Declared eventual: the
//! reset races the ops (it can write a count read before an op's commit), so only a
//! quiet pass (settle) makes it exact; reads are held to the scenario's staleness bound.

use counterlab_core::Figure;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use counterlab_core::{ErrorClass, Fault, NotificationId, OpError, Outcome, SeedSpec, Strategy, StrategyInfo, UserId};
use redis::AsyncCommands;
use tokio::sync::Notify;

use super::{RedisConfig, RedisSpace, classify_redis};
use crate::db::Db;
use crate::sqlfile::{common, statement};
use crate::strategies::{Design, SqlStrategy};

/// The reconciler's interval when the scenario sets none (`redis.reconcile_interval_ms`).
const DEFAULT_RECONCILE: Duration = Duration::from_millis(500);
/// Users per ZMSCORE / ZADD round.
const BATCH: usize = 1000;

/// What the reconciler did, for the report.
#[derive(Default)]
struct Figures {
    passes: AtomicU64,
    resets: AtomicU64,
    redis_failures: AtomicU64,
}

struct Shared {
    db: Db,
    space: RedisSpace,
    counters_all: &'static str,
    stop: AtomicBool,
    wake: Notify,
    figures: Figures,
}

/// The seed 002 design (see the module comment); `reconcile = false` is the mutant that
/// never resets from the database.
pub struct ZsetReplicaReads {
    sql: SqlStrategy,
    sh: Arc<Shared>,
    interval: Duration,
    reconcile: bool,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl ZsetReplicaReads {
    pub fn new(info: StrategyInfo, db: Db, space: RedisSpace, cfg: RedisConfig, reconcile: bool) -> ZsetReplicaReads {
        let counters_all = statement(common(db.dialect()), "counters_all");
        ZsetReplicaReads {
            sql: SqlStrategy::new(info, Design::ConditionalUpdate, db.clone()),
            sh: Arc::new(Shared {
                db,
                space,
                counters_all,
                stop: AtomicBool::new(false),
                wake: Notify::new(),
                figures: Figures::default(),
            }),
            interval: cfg.reconcile_interval.unwrap_or(DEFAULT_RECONCILE),
            reconcile,
            task: Mutex::new(None),
        }
    }

    /// After the SQL commit: the score moves by `delta`. A failure leaves the op half
    /// applied (SQL committed), so its outcome is unknown.
    async fn bump(&self, user: UserId, delta: i64) -> Result<(), OpError> {
        if delta == 0 {
            return Ok(());
        }
        let mut c = self.sh.space.conn();
        let r: Result<f64, _> = c.zincr(self.sh.key(), user, delta).await;
        r.map(|_| ()).map_err(|e| {
            self.sh.figures.redis_failures.fetch_add(1, Ordering::Relaxed);
            let e = classify_redis(e);
            OpError::new(e.class, Outcome::Unknown, format!("after the SQL commit: {}", e.message))
        })
    }
}

impl Shared {
    fn key(&self) -> String {
        format!("{}{{z}}:unread", self.space.prefix())
    }

    /// One pass: every user's SQL counter against its score; a differing score is reset
    /// to the database's count (ZADD). Returns how many were reset.
    async fn reconcile(&self) -> Result<u64, OpError> {
        let truth: Vec<(i64, i64)> = self.db.rows(self.counters_all, &[]).await?;
        let mut c = self.space.conn();
        let mut reset = 0u64;
        for chunk in truth.chunks(BATCH) {
            let users: Vec<i64> = chunk.iter().map(|t| t.0).collect();
            let scores: Vec<Option<f64>> =
                redis::cmd("ZMSCORE").arg(self.key()).arg(&users).query_async(&mut c).await.map_err(classify_redis)?;
            let fix: Vec<(i64, i64)> = chunk
                .iter()
                .zip(scores)
                .filter(|((_, unread), s)| s.map(|s| s.round() as i64) != Some(*unread))
                .map(|((user, unread), _)| (*unread, *user))
                .collect();
            if !fix.is_empty() {
                let _: i64 = c.zadd_multiple(self.key(), &fix).await.map_err(classify_redis)?;
                reset += fix.len() as u64;
            }
        }
        self.figures.passes.fetch_add(1, Ordering::Relaxed);
        self.figures.resets.fetch_add(reset, Ordering::Relaxed);
        Ok(reset)
    }
}

#[async_trait]
impl Strategy for ZsetReplicaReads {
    fn info(&self) -> StrategyInfo {
        self.sql.info()
    }

    async fn worker_scope<'a>(&'a self, workers: u32, run: counterlab_core::WorkerLoop<'a>) {
        self.sql.worker_scope(workers, run).await
    }
    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        let id = self.sql.create(user).await?;
        self.bump(user, 1).await?;
        Ok(id)
    }
    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let changed = self.sql.mark_read(user, id).await?;
        self.bump(user, -i64::from(changed)).await?;
        Ok(changed)
    }
    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let (deleted, lowered) = self.sql.delete_lowering(user, id).await?;
        self.bump(user, -i64::from(lowered)).await?;
        Ok(deleted)
    }
    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        let n = self.sql.mark_all_read(user).await?;
        self.bump(user, -(n as i64)).await?;
        Ok(n)
    }
    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        let mut c = self.sh.space.conn();
        let s: Option<f64> = c.zscore(self.sh.key(), user).await.map_err(classify_redis)?;
        Ok(s.map_or(0, |s| s.round() as i64))
    }
    async fn seed(&self, spec: SeedSpec) -> Result<(), OpError> {
        let unread = spec.unread_at_start() as i64;
        let mut c = self.sh.space.conn();
        let users: Vec<i64> = (1..=spec.n_users as i64).collect();
        for chunk in users.chunks(BATCH) {
            let items: Vec<(i64, i64)> = chunk.iter().map(|u| (unread, *u)).collect();
            let _: i64 = c.zadd_multiple(self.sh.key(), &items).await.map_err(classify_redis)?;
        }
        Ok(())
    }
    async fn start(&self) {
        if !self.reconcile {
            return;
        }
        let (sh, every) = (self.sh.clone(), self.interval);
        let task = tokio::spawn(async move {
            while !sh.stop.load(Ordering::Relaxed) {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = sh.wake.notified() => break,
                }
                // An error ends this pass only; the next tick tries again.
                let _ = sh.reconcile().await;
            }
        });
        *self.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }
    /// Stops the reconciler, then (with nothing in flight) one pass makes every score
    /// the database's, and a second confirms none differs.
    async fn settle(&self, bound: Duration) -> Result<(), OpError> {
        self.sh.stop.store(true, Ordering::Relaxed);
        self.sh.wake.notify_one();
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = task {
            let _ = tokio::time::timeout(bound, t).await;
        }
        if !self.reconcile {
            return Ok(());
        }
        let passes = async {
            self.sh.reconcile().await?;
            self.sh.reconcile().await
        };
        match tokio::time::timeout(bound, passes).await {
            Ok(Ok(0)) => Ok(()),
            Ok(Ok(n)) => Err(OpError::new(ErrorClass::Other, Outcome::Fail, format!("{n} scores still differ"))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(OpError::new(ErrorClass::Timeout, Outcome::Fail, "reconcile did not finish in time")),
        }
    }
    async fn counters(&self, n_users: u64) -> Result<Option<counterlab_core::UserCounters>, OpError> {
        let mut c = self.sh.space.conn();
        let mut out = counterlab_core::UserCounters::new(n_users);
        for chunk in counterlab_core::user_chunks(n_users, BATCH) {
            let chunk: Vec<i64> = chunk.collect();
            let scores: Vec<Option<f64>> = redis::cmd("ZMSCORE")
                .arg(self.sh.key())
                .arg(&chunk)
                .query_async(&mut c)
                .await
                .map_err(classify_redis)?;
            for (u, s) in chunk.into_iter().zip(scores) {
                out.set(u, s.map(|s| s.round() as i64));
            }
        }
        Ok(Some(out))
    }
    fn takes(&self, fault: Fault) -> bool {
        fault == Fault::RedisDataLoss || self.sql.takes(fault)
    }

    async fn inject(&self, fault: Fault) -> Result<String, OpError> {
        match fault {
            Fault::RedisDataLoss => {
                let n = self.sh.space.delete_all().await?;
                Ok(format!("deleted {n} keys of the run"))
            }
            other => self.sql.inject(other).await,
        }
    }
    fn figures(&self) -> Vec<(Figure, f64)> {
        let f = &self.sh.figures;
        let mut out = vec![(Figure::RedisFailuresAfterCommit, f.redis_failures.load(Ordering::Relaxed) as f64)];
        // The reconciler's figures only where it runs (the checker reads `reconcile_passes`
        // as "a reconciler ran": unrepaired drift is then `unhealed_drift`).
        if self.reconcile {
            out.push((Figure::ReconcilePasses, f.passes.load(Ordering::Relaxed) as f64));
            out.push((Figure::ReconcileResets, f.resets.load(Ordering::Relaxed) as f64));
        }
        out
    }
    async fn teardown(&self) -> Result<(), OpError> {
        self.sh.stop.store(true, Ordering::Relaxed);
        self.sh.wake.notify_one();
        self.sh.space.delete_all().await?;
        // The run's ACL user goes with its keys (as in every other Redis design).
        self.sh.space.release().await
    }
}
