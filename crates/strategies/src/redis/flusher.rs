//! The write-back flusher of the buffered designs: one pass takes a batch of users'
//! pending deltas and adds them to the SQL counters, replaying claims a crashed flusher
//! left behind, with the `flusher_crash` fault points of each design.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;

use counterlab_core::{OpError, UserId};
use redis::AsyncCommands;

use super::designs::{RedisDesign, Shared, parse_delta};
use super::{Lease, classify_redis};
use crate::db::Begin;

impl Shared {
    /// One write-back of one user's claimed delta, idempotent through the claim id.
    /// The replay mutant records nothing and always applies.
    async fn apply_claim(&self, user: UserId, claim: i64, delta: i64) -> Result<bool, OpError> {
        let mut tx = self.db.begin(Begin::Plain).await?;
        let fresh =
            self.design == RedisDesign::ZsetBufferReplay || tx.exec(self.sql.claim_record, &[claim]).await? == 1;
        if fresh {
            tx.exec(self.sql.counter_add, &[delta, user]).await?;
        }
        tx.commit().await?;
        let mut c = self.space.conn();
        c.hdel::<_, _, ()>(self.space.buf_key("processing"), user).await.map_err(classify_redis)?;
        Ok(fresh)
    }

    /// Replays claims left in the processing hash by a crashed flusher.
    async fn recover(&self) -> Result<(), OpError> {
        let mut c = self.space.conn();
        let open: HashMap<i64, String> = c.hgetall(self.space.buf_key("processing")).await.map_err(classify_redis)?;
        for (user, entry) in open {
            let Some((claim, delta)) = entry.split_once(':') else { continue };
            let fresh = self.apply_claim(user, claim.parse().unwrap_or(0), parse_delta(delta)).await?;
            if fresh {
                self.figures.recovered_claims.fetch_add(1, Ordering::Relaxed);
            } else {
                self.figures.replayed_claims_skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// One flush pass over at most `flush_batch` users. `may_crash`: honour armed crashes.
    pub(super) async fn flush_pass(&self, may_crash: bool) -> Result<(), OpError> {
        if matches!(self.design, RedisDesign::ZsetBufferDurable | RedisDesign::ZsetBufferReplay) {
            self.recover().await?;
        }
        let mut c = self.space.conn();
        let users: Vec<i64> = c
            .zrange(self.space.buf_key("pending"), 0, self.cfg.flush_batch as isize - 1)
            .await
            .map_err(classify_redis)?;
        for user in users {
            let crash = may_crash
                && self.crashes_armed.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok();
            let flow = match self.design {
                RedisDesign::ZsetBuffer => self.flush_taken(&mut c, user, crash).await?,
                RedisDesign::ZsetBufferDurable | RedisDesign::ZsetBufferReplay => {
                    self.flush_claimed(&mut c, user, crash).await?
                }
                _ => unreachable!("only buffered designs flush"),
            };
            if flow.is_break() {
                // The flusher died at its fault point: the rest of the batch waits for
                // the restarted flusher's next pass.
                return Ok(());
            }
        }
        Ok(())
    }

    /// zset-buffer's flush of one user: the seed design takes the delta (ZSCORE + ZREM
    /// in MULTI/EXEC) and then adds it to the SQL counter. Break: the flusher crashed.
    async fn flush_taken(&self, c: &mut Lease, user: UserId, crash: bool) -> Result<ControlFlow<()>, OpError> {
        let pending = self.space.buf_key("pending");
        let (d, _): (Option<String>, i64) = redis::pipe()
            .atomic()
            .zscore(&pending, user)
            .zrem(&pending, user)
            .query_async(c)
            .await
            .map_err(classify_redis)?;
        let Some(d) = d.map(|d| parse_delta(&d)) else { return Ok(ControlFlow::Continue(())) };
        if crash {
            // Fault point "flusher after claim, before DB write": the delta
            // has left Redis and dies with the flusher.
            self.figures.flusher_crashes.fetch_add(1, Ordering::Relaxed);
            self.figures.lost_claims.fetch_add(1, Ordering::Relaxed);
            self.figures.lost_delta_abs.fetch_add(d.unsigned_abs(), Ordering::Relaxed);
            return Ok(ControlFlow::Break(()));
        }
        let mut tx = self.db.begin(Begin::Plain).await?;
        let applied = async {
            tx.exec(self.sql.counter_add, &[d, user]).await?;
            tx.commit().await
        }
        .await;
        if let Err(e) = applied {
            // The seed design has nowhere to put it back: the delta is lost.
            self.figures.lost_claims.fetch_add(1, Ordering::Relaxed);
            self.figures.lost_delta_abs.fetch_add(d.unsigned_abs(), Ordering::Relaxed);
            return Err(e);
        }
        self.figures.flushes.fetch_add(1, Ordering::Relaxed);
        self.figures.deltas_flushed_abs.fetch_add(d.unsigned_abs(), Ordering::Relaxed);
        Ok(ControlFlow::Continue(()))
    }

    /// The durable buffer's (and its replay mutant's) flush of one user: the claim moves
    /// the delta to the processing hash under a claim id, then `apply_claim` writes it
    /// back. Break: the flusher crashed.
    async fn flush_claimed(&self, c: &mut Lease, user: UserId, crash: bool) -> Result<ControlFlow<()>, OpError> {
        let claimed: Option<String> = self
            .scripts
            .zset_claim
            .key(self.space.buf_key("pending"))
            .key(self.space.buf_key("processing"))
            .arg(user)
            .arg(self.next_claim.fetch_add(1, Ordering::Relaxed))
            .invoke_async(c)
            .await
            .map_err(classify_redis)?;
        let Some((claim, d)) = claimed.as_deref().and_then(|e| e.split_once(':')) else {
            return Ok(ControlFlow::Continue(()));
        };
        let (claim, d) = (claim.parse().unwrap_or(0), parse_delta(d));
        if crash && self.design == RedisDesign::ZsetBufferReplay {
            // The mutant's fault point is later: after the SQL add committed,
            // before the processing entry is deleted. The restarted flusher
            // replays the entry and, recording no claim id, adds it again.
            let mut tx = self.db.begin(Begin::Plain).await?;
            tx.exec(self.sql.counter_add, &[d, user]).await?;
            tx.commit().await?;
            self.figures.flusher_crashes.fetch_add(1, Ordering::Relaxed);
            self.figures.double_claims.fetch_add(1, Ordering::Relaxed);
            return Ok(ControlFlow::Break(()));
        }
        if crash {
            // Same fault point: the claim stays in the processing hash and the
            // restarted flusher replays it.
            self.figures.flusher_crashes.fetch_add(1, Ordering::Relaxed);
            return Ok(ControlFlow::Break(()));
        }
        self.apply_claim(user, claim, d).await?;
        self.figures.flushes.fetch_add(1, Ordering::Relaxed);
        self.figures.deltas_flushed_abs.fetch_add(d.unsigned_abs(), Ordering::Relaxed);
        Ok(ControlFlow::Continue(()))
    }

    /// Whether nothing is left to flush: no pending delta, no open claim.
    pub(super) async fn buffers_empty(&self) -> Result<bool, OpError> {
        let mut c = self.space.conn();
        let pending: u64 = c.zcard(self.space.buf_key("pending")).await.map_err(classify_redis)?;
        let processing: u64 = c.hlen(self.space.buf_key("processing")).await.map_err(classify_redis)?;
        Ok(pending == 0 && processing == 0)
    }
}
