//! The reconciler of the Redis-counted designs (lua-script, redis-counter): it compares
//! each user's Redis counter with the SQL truth and repairs the ones no op is changing,
//! which is how they heal after a Redis data loss.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use counterlab_core::OpError;

use super::classify_redis;
use super::designs::{RedisDesign, Shared, parse_delta};

impl Shared {
    /// One reconcile pass: per user, read the guard, then the SQL truth, then repair only
    /// if no op was in flight or started in between (the repair script re-checks).
    /// `quiescent`: the load has stopped, so the guard is not needed (and is reset).
    pub(super) async fn reconcile_pass(&self, quiescent: bool) -> Result<(), OpError> {
        self.figures.reconcile_passes.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let n = self.cfg.n_users as i64;
        let mut c = self.space.conn();
        let mut guards: Vec<(String, i64, Option<i64>)> = Vec::with_capacity(n as usize);
        // In an explorer's session one pipeline reads every user's guard (one step): only
        // the schedule's user changes, so how the others are split changes nothing.
        let chunk = if crate::gate::gated() { (n as usize).max(1) } else { 500 };
        for chunk in (1..=n).collect::<Vec<_>>().chunks(chunk) {
            let mut pipe = redis::pipe();
            for u in chunk {
                pipe.get(self.k(*u, "seq")).get(self.k(*u, "inflight")).get(self.k(*u, "unread"));
            }
            let vals: Vec<Option<String>> = pipe.query_async(&mut c).await.map_err(classify_redis)?;
            for v in vals.chunks(3) {
                guards.push((
                    v[0].clone().unwrap_or_else(|| "0".into()),
                    v[1].as_deref().map_or(0, parse_delta),
                    v[2].as_deref().map(parse_delta),
                ));
            }
        }
        let truth: HashMap<i64, i64> = self.db.rows::<(i64, i64)>(self.sql.truth_all, &[]).await?.into_iter().collect();
        let (mut wrong, mut stood_down) = (0u64, 0u64);
        for (i, (seq, inflight, counter)) in guards.into_iter().enumerate() {
            let user = i as i64 + 1;
            let t = truth.get(&user).copied().unwrap_or(0);
            if counter == Some(t) {
                continue;
            }
            wrong += 1;
            if inflight != 0 && !quiescent {
                stood_down += 1;
                continue;
            }
            let lua = self.design == RedisDesign::LuaScript;
            let mut inv = self.scripts.repair.prepare_invoke();
            inv.key(self.k(user, "unread"))
                .key(self.k(user, "seq"))
                .key(self.k(user, "inflight"))
                .key(self.k(user, "state"));
            inv.arg(&seq).arg(t).arg(if lua { "1" } else { "0" }).arg(if quiescent { "1" } else { "0" });
            if lua {
                for (id, read) in self.db.rows::<(i64, bool)>(self.sql.user_rows, &[user]).await? {
                    inv.arg(id).arg(if read { "1" } else { "0" });
                }
            }
            let done: i64 = inv.invoke_async(&mut c).await.map_err(classify_redis)?;
            if done == 1 {
                self.figures.repairs.fetch_add(1, Ordering::Relaxed);
            } else {
                stood_down += 1;
            }
        }
        self.figures.repair_standdowns.fetch_add(stood_down, Ordering::Relaxed);
        if wrong == 0 {
            let mut at = self.data_loss_at.lock().unwrap_or_else(|e| e.into_inner());
            // Only a pass that began after the loss can say the loss is healed.
            if let Some(t0) = at.filter(|t0| started > *t0) {
                self.figures.heal_ms.store(started.duration_since(t0).as_millis() as i64, Ordering::Relaxed);
                *at = None;
            }
        }
        Ok(())
    }
}
