//! The Redis strategies' side of the `Strategy` trait: the five ops of each design, the
//! background loops' start and settle, the counters the check reads, and fault injection.

use counterlab_core::Figure;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use counterlab_core::{ErrorClass, Fault, NotificationId, OpError, Outcome, SeedSpec, Strategy, StrategyInfo, UserId};
use redis::AsyncCommands;

use super::classify_redis;
use super::designs::{RedisDesign, RedisStrategy, Served, half_applied, parse_delta};
use crate::db::Begin;

fn other(msg: String) -> OpError {
    OpError::new(ErrorClass::Other, Outcome::Fail, msg)
}

#[async_trait]
impl Strategy for RedisStrategy {
    fn info(&self) -> StrategyInfo {
        self.shared.info
    }

    /// The SQL steps of a worker's ops use its own connection, as the SQL designs' do;
    /// the flusher and the reconciler keep the pool's spare.
    async fn worker_scope<'a>(&'a self, workers: u32, run: counterlab_core::WorkerLoop<'a>) {
        crate::strategies::hold_if_room(&self.shared.db, workers, run).await
    }

    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        let sh = &self.shared;
        if sh.design.set_based() {
            return sh.set_create(user).await;
        }
        let g = self.guarded();
        sh.guard_begin(user, g).await?;
        let id = sh
            .sql_step(user, g, async {
                let mut tx = sh.db.begin(Begin::Plain).await?;
                let id = tx.insert_id(sh.sql.insert, &[user]).await?;
                tx.commit().await?;
                Ok(id)
            })
            .await?;
        if sh.design == RedisDesign::LuaScript {
            let flag = if g { "1" } else { "0" };
            sh.user_script::<i64>(&sh.scripts.lua_create, user, &[id.to_string(), flag.into()]).await?;
        } else {
            sh.apply_delta(user, 1, g).await?;
        }
        Ok(id)
    }

    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let sh = &self.shared;
        if sh.design.set_based() {
            return sh.set_mark_read(user, id).await;
        }
        let g = self.guarded();
        sh.guard_begin(user, g).await?;
        if sh.design == RedisDesign::LuaScript {
            // Redis decides; the SQL row follows; the guard ends only after the SQL write
            // so the reconciler never reads a truth this op is about to change.
            let r = async {
                let changed: i64 =
                    sh.user_script(&sh.scripts.lua_mark_read, user, &[id.to_string(), "0".into()]).await?;
                if changed == 1 {
                    let mut tx = sh.db.begin(Begin::Plain).await.map_err(half_applied)?;
                    tx.exec(sh.sql.set_read, &[id, user]).await.map_err(half_applied)?;
                    tx.commit().await.map_err(half_applied)?;
                }
                Ok(changed == 1)
            }
            .await;
            sh.guard_end(user, g).await;
            return r;
        }
        let changed = sh
            .sql_step(user, g, async {
                let mut tx = sh.db.begin(Begin::Plain).await?;
                let n = tx.exec(sh.sql.set_read_if_unread, &[id, user]).await?;
                tx.commit().await?;
                Ok(n == 1)
            })
            .await?;
        sh.apply_delta(user, if changed { -1 } else { 0 }, g).await?;
        Ok(changed)
    }

    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let sh = &self.shared;
        if sh.design.set_based() {
            return sh.set_delete(user, id).await;
        }
        let g = self.guarded();
        sh.guard_begin(user, g).await?;
        if sh.design == RedisDesign::LuaScript {
            let r = async {
                let was: i64 = sh.user_script(&sh.scripts.lua_delete, user, &[id.to_string(), "0".into()]).await?;
                if was >= 0 {
                    let mut tx = sh.db.begin(Begin::Plain).await.map_err(half_applied)?;
                    tx.exec(sh.sql.delete_any, &[id, user]).await.map_err(half_applied)?;
                    tx.commit().await.map_err(half_applied)?;
                }
                Ok(was >= 0)
            }
            .await;
            sh.guard_end(user, g).await;
            return r;
        }
        let (deleted, was_unread) = sh
            .sql_step(user, g, async {
                let mut tx = sh.db.begin(Begin::Plain).await?;
                let r = if tx.exec(sh.sql.delete_unread, &[id, user]).await? == 1 {
                    (true, true)
                } else {
                    (tx.exec(sh.sql.delete_any, &[id, user]).await? == 1, false)
                };
                tx.commit().await?;
                Ok(r)
            })
            .await?;
        sh.apply_delta(user, if was_unread { -1 } else { 0 }, g).await?;
        Ok(deleted)
    }

    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        let sh = &self.shared;
        if sh.design.set_based() {
            return sh.set_mark_all_read(user).await;
        }
        let g = self.guarded();
        sh.guard_begin(user, g).await?;
        if sh.design == RedisDesign::LuaScript {
            let r = async {
                let ids: Vec<i64> = sh.user_script(&sh.scripts.lua_mark_all_read, user, &["0".into()]).await?;
                if !ids.is_empty() {
                    let mut tx = sh.db.begin(Begin::Plain).await.map_err(half_applied)?;
                    for id in &ids {
                        tx.exec(sh.sql.set_read, &[*id, user]).await.map_err(half_applied)?;
                    }
                    tx.commit().await.map_err(half_applied)?;
                }
                Ok(ids.len() as u64)
            }
            .await;
            sh.guard_end(user, g).await;
            return r;
        }
        let n = sh
            .sql_step(user, g, async {
                let mut tx = sh.db.begin(Begin::Plain).await?;
                let n = tx.exec(sh.sql.mark_all_rows, &[user]).await?;
                tx.commit().await?;
                Ok(n)
            })
            .await?;
        sh.apply_delta(user, -(n as i64), g).await?;
        Ok(n)
    }

    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        let sh = &self.shared;
        match sh.design.served() {
            Served::UserKey => Ok(sh.get_i64(sh.k(user, "unread")).await?.unwrap_or(0)),
            Served::ShardField => {
                let mut c = sh.space.conn();
                let v: Option<String> = c.hget(sh.shard_key(user), user).await.map_err(classify_redis)?;
                Ok(v.as_deref().map_or(0, parse_delta))
            }
            Served::SetCard => {
                let mut c = sh.space.conn();
                c.scard(sh.k(user, "unread_ids")).await.map_err(classify_redis)
            }
            Served::Buffer => {
                let base = sh.db.opt_i64(sh.sql.counter_read, &[user]).await?.unwrap_or(0);
                let mut c = sh.space.conn();
                let pending: Option<f64> = c.zscore(sh.space.buf_key("pending"), user).await.map_err(classify_redis)?;
                let claimed: Option<String> =
                    c.hget(sh.space.buf_key("processing"), user).await.map_err(classify_redis)?;
                let claimed = claimed.as_deref().and_then(|e| e.split_once(':')).map_or(0, |(_, d)| parse_delta(d));
                Ok(base + pending.map_or(0, |p| p.round() as i64) + claimed)
            }
        }
    }

    async fn seed(&self, spec: SeedSpec) -> Result<(), OpError> {
        self.seed_redis(spec).await
    }
    async fn start(&self) {
        let sh = self.shared.clone();
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        if sh.design.buffered() {
            let s = sh.clone();
            tasks.push(tokio::spawn(async move {
                while !s.stop.load(Ordering::Relaxed) {
                    tokio::select! {
                        _ = tokio::time::sleep(s.cfg.flush_interval) => {}
                        _ = s.stop_notify.notified() => break,
                    }
                    // An error ends this pass only; the next tick tries again.
                    let _ = s.flush_pass(true).await;
                }
            }));
        }
        if let (Some(every), true) = (sh.cfg.reconcile_interval, self.guarded()) {
            let s = sh.clone();
            tasks.push(tokio::spawn(async move {
                while !s.stop.load(Ordering::Relaxed) {
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {}
                        _ = s.stop_notify.notified() => break,
                    }
                    let _ = s.reconcile_pass(false).await;
                }
            }));
        }
    }

    /// A buffered design's flush (with the durable designs' recovery first), as the
    /// flusher task runs it each tick: a `flusher_crash` armed by `inject` fires in it.
    /// A guarded design (a reconciler configured): one reconcile pass, as its task runs
    /// it each tick (repairs stand down where an op is in flight).
    async fn background_pass(&self) -> Result<bool, OpError> {
        if self.guarded() {
            self.shared.reconcile_pass(false).await?;
            return Ok(true);
        }
        if !self.shared.design.buffered() {
            return Ok(false);
        }
        self.shared.flush_pass(true).await?;
        Ok(true)
    }

    async fn settle(&self, bound: Duration) -> Result<(), OpError> {
        let sh = &self.shared;
        let deadline = Instant::now() + bound;
        sh.stop.store(true, Ordering::Relaxed);
        sh.stop_notify.notify_waiters();
        let mut tasks: Vec<_> = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        while let Some(mut t) = tasks.pop() {
            // Each loop ends after its current pass; past the bound it is cut off, and so
            // is every task not yet waited for (none keeps writing into the check).
            if tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), &mut t).await.is_err() {
                t.abort();
                tasks.iter().for_each(|t| t.abort());
                return Err(other(format!("background tasks still running after {} ms", bound.as_millis())));
            }
        }
        if sh.design.buffered() {
            loop {
                sh.flush_pass(false).await?;
                if sh.buffers_empty().await? {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(other(format!("buffers not drained within {} ms", bound.as_millis())));
                }
            }
        }
        if self.guarded() {
            // Quiescent now: one pass repairs whatever stood down during the load (guards
            // knocked off by a data loss included), a second confirms and times the heal.
            sh.reconcile_pass(true).await?;
            sh.reconcile_pass(true).await?;
        }
        Ok(())
    }

    async fn counters(&self, n_users: u64) -> Result<Option<counterlab_core::UserCounters>, OpError> {
        let sh = &self.shared;
        let served = sh.design.served();
        match served {
            Served::UserKey | Served::ShardField | Served::SetCard => {
                let mut c = sh.space.conn();
                let mut out = counterlab_core::UserCounters::new(n_users);
                for chunk in counterlab_core::user_chunks(n_users, 1000) {
                    let mut pipe = redis::pipe();
                    for u in chunk.clone() {
                        match served {
                            Served::UserKey => pipe.get(sh.k(u, "unread")),
                            Served::ShardField => pipe.hget(sh.shard_key(u), u),
                            _ => pipe.scard(sh.k(u, "unread_ids")),
                        };
                    }
                    let vals: Vec<Option<String>> = pipe.query_async(&mut c).await.map_err(classify_redis)?;
                    for (u, v) in chunk.zip(vals) {
                        out.set(u, v.map(|s| parse_delta(&s)));
                    }
                }
                Ok(Some(out))
            }
            Served::Buffer => {
                // Conservation: SQL counter + pending + claimed-but-unapplied, per user.
                let mut out = counterlab_core::UserCounters::new(n_users);
                sh.db.each_row(sh.sql.counters_all, |u, v| out.set(u, Some(v))).await?;
                let mut c = sh.space.conn();
                let pending: Vec<(i64, f64)> =
                    c.zrange_withscores(sh.space.buf_key("pending"), 0, -1).await.map_err(classify_redis)?;
                let claimed: HashMap<i64, String> =
                    c.hgetall(sh.space.buf_key("processing")).await.map_err(classify_redis)?;
                let extra = pending.into_iter().map(|(u, d)| (u, d.round() as i64)).chain(
                    claimed.into_iter().filter_map(|(u, e)| e.split_once(':').map(|(_, d)| (u, parse_delta(d)))),
                );
                for (u, d) in extra {
                    out.add(u, d);
                }
                Ok(Some(out))
            }
        }
    }

    fn takes(&self, fault: Fault) -> bool {
        let d = self.shared.design;
        match fault {
            Fault::RedisDataLoss | Fault::Failover { .. } | Fault::RedisDisconnect => true,
            Fault::RedisTimeout => d.loses_replies(),
            Fault::FlusherCrash => d.buffered(),
            _ => false,
        }
    }

    async fn inject(&self, fault: Fault) -> Result<String, OpError> {
        let sh = &self.shared;
        match fault {
            Fault::RedisDataLoss => {
                let n = sh.space.delete_all().await?;
                *sh.data_loss_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                Ok(format!("deleted {n} keys under {}", sh.space.prefix()))
            }
            Fault::Failover { cut_ms } => {
                let what = sh.space.failover(std::time::Duration::from_millis(cut_ms)).await?;
                // The reconciler's heal_ms counts from here, as after a data loss.
                *sh.data_loss_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                Ok(what)
            }
            Fault::RedisDisconnect => {
                let n = sh.space.kill_connections().await?;
                Ok(format!("killed {n} of the run's Redis connections (CLIENT KILL ID); they reconnect"))
            }
            Fault::RedisTimeout if sh.design.loses_replies() => {
                sh.replies_to_lose.fetch_add(1, Ordering::Relaxed);
                Ok("the next Redis write runs but its reply is lost: outcome unknown".into())
            }
            Fault::FlusherCrash if sh.design.buffered() => {
                sh.crashes_armed.fetch_add(1, Ordering::Relaxed);
                Ok(if sh.design == RedisDesign::ZsetBufferReplay {
                    "the flusher will die after its next SQL commit, before clearing the claim, and restart".into()
                } else {
                    "the flusher will die after its next claim, before the SQL commit, and restart".into()
                })
            }
            _ => Err(other(format!("{} has no {} fault point", sh.info.name, fault.name()))),
        }
    }

    /// Buffered designs: users with a pending delta plus claims not yet applied.
    async fn pending(&self) -> Option<i64> {
        let sh = &self.shared;
        if !sh.design.buffered() {
            return None;
        }
        let mut c = sh.space.conn();
        let pending: u64 = c.zcard(sh.space.buf_key("pending")).await.ok()?;
        let processing: u64 = c.hlen(sh.space.buf_key("processing")).await.ok()?;
        Some((pending + processing) as i64)
    }

    fn figures(&self) -> Vec<(Figure, f64)> {
        let f = &self.shared.figures;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let mut v = Vec::new();
        if self.shared.design.buffered() {
            v.extend([
                (Figure::Flushes, g(&f.flushes)),
                (Figure::DeltasFlushedAbs, g(&f.deltas_flushed_abs)),
                (Figure::FlusherCrashes, g(&f.flusher_crashes)),
                (Figure::LostReplies, g(&f.lost_replies)),
                (Figure::LostFlushClaims, g(&f.lost_claims)),
                (Figure::LostFlushDeltaAbs, g(&f.lost_delta_abs)),
                (Figure::DoubleFlushClaims, g(&f.double_claims)),
                (Figure::RecoveredClaims, g(&f.recovered_claims)),
                (Figure::ReplayedClaimsSkipped, g(&f.replayed_claims_skipped)),
            ]);
        }
        let design = self.shared.design;
        if design.loses_replies() && !design.buffered() {
            v.push((Figure::LostReplies, g(&f.lost_replies)));
        }
        if matches!(design, RedisDesign::WatchMulti | RedisDesign::WatchMultiUnwatched) {
            v.extend([(Figure::WatchConflicts, g(&f.watch_conflicts)), (Figure::WatchGiveUps, g(&f.watch_give_ups))]);
        }
        if self.guarded() {
            v.extend([
                (Figure::ReconcilePasses, g(&f.reconcile_passes)),
                (Figure::Repairs, g(&f.repairs)),
                (Figure::RepairStanddowns, g(&f.repair_standdowns)),
                (Figure::HealMs, f.heal_ms.load(Ordering::Relaxed) as f64),
            ]);
        }
        v
    }

    async fn teardown(&self) -> Result<(), OpError> {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner())) {
            t.abort();
        }
        self.shared.space.delete_all().await?;
        self.shared.space.release().await
    }
}
