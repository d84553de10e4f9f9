//! redis-set: each user's unread notification ids as a Redis set
//! (`cl:<tag>:{u:<id>}:unread_ids`) that decides every transition, with the SQL
//! rows written after it (the truth the check reads is still SQL): create inserts the
//! row then SADDs its id; mark_read and delete SREM it, and the count moves by SREM's
//! reply; mark_all_read takes the whole set (SMEMBERS + DEL in one MULTI) and marks
//! those rows; read_count is SCARD.
//!
//! Its mutant, redis-set-check-then-remove, serves a separate counter key and asks
//! SISMEMBER first, then SREMs and DECRs whenever the check said member: two racing
//! mark_reads of one id both see it, both decrement and both claim the transition.

use counterlab_core::{NotificationId, OpError, UserId};
use redis::AsyncCommands;

use super::classify_redis;
use super::designs::{RedisDesign, Shared, after_sql, half_applied};
use crate::db::Begin;

impl Shared {
    fn ids_key(&self, user: UserId) -> String {
        self.k(user, "unread_ids")
    }

    fn checks_first(&self) -> bool {
        self.design == RedisDesign::RedisSetCheckThenRemove
    }

    /// Inserts the row, then SADDs its id (and, in the mutant, INCRs its counter in the
    /// same MULTI).
    pub(super) async fn set_create(&self, user: UserId) -> Result<NotificationId, OpError> {
        let mut tx = self.db.begin(Begin::Plain).await?;
        let id = tx.insert_id(self.sql.insert, &[user]).await?;
        tx.commit().await?;
        let mut pipe = redis::pipe();
        pipe.atomic().sadd(self.ids_key(user), id).ignore();
        if self.checks_first() {
            pipe.incr(self.k(user, "unread"), 1).ignore();
        }
        let mut c = self.space.conn();
        pipe.query_async::<()>(&mut c).await.map_err(|e| after_sql(classify_redis(e)))?;
        Ok(id)
    }

    /// Takes `id` out of the user's set: SREM's reply says whether this call did. The
    /// mutant checks SISMEMBER first and trusts that check.
    async fn take_id(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let mut c = self.space.conn();
        let key = self.ids_key(user);
        if !self.checks_first() {
            let n: i64 = c.srem(&key, id).await.map_err(classify_redis)?;
            return Ok(n == 1);
        }
        let member: bool = c.sismember(&key, id).await.map_err(classify_redis)?;
        if member {
            c.srem::<_, _, i64>(&key, id).await.map_err(classify_redis)?;
            c.decr::<_, _, i64>(self.k(user, "unread"), 1).await.map_err(|e| half_applied(classify_redis(e)))?;
        }
        Ok(member)
    }

    /// The set decides; the row is marked read only when this call took the id.
    pub(super) async fn set_mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let took = self.take_id(user, id).await?;
        if took {
            let mut tx = self.db.begin(Begin::Plain).await.map_err(half_applied)?;
            tx.exec(self.sql.set_read, &[id, user]).await.map_err(half_applied)?;
            tx.commit().await.map_err(half_applied)?;
        }
        Ok(took)
    }

    /// The id leaves the set (the count moves if it was there), then the row is deleted,
    /// read or not. The reply says whether this call removed the notification: took it
    /// from the set (the set decides, so a racing delete that reached the row first does
    /// not make this one a no-op: the count moved here) or deleted its row.
    pub(super) async fn set_delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let took = self.take_id(user, id).await?;
        let after = |e: OpError| if took { half_applied(e) } else { e };
        let mut tx = self.db.begin(Begin::Plain).await.map_err(after)?;
        let n = tx.exec(self.sql.delete_any, &[id, user]).await.map_err(after)?;
        tx.commit().await.map_err(after)?;
        Ok(took || n == 1)
    }

    /// Empties the set in one MULTI (SMEMBERS + DEL), then marks exactly those rows read;
    /// the mutant then lowers its counter by how many it took.
    pub(super) async fn set_mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        let key = self.ids_key(user);
        let mut c = self.space.conn();
        let (ids,): (Vec<i64>,) = redis::pipe()
            .atomic()
            .smembers(&key)
            .del(&key)
            .ignore()
            .query_async(&mut c)
            .await
            .map_err(classify_redis)?;
        if ids.is_empty() {
            return Ok(0);
        }
        if self.checks_first() {
            let n = ids.len() as i64;
            c.decr::<_, _, i64>(self.k(user, "unread"), n).await.map_err(|e| half_applied(classify_redis(e)))?;
        }
        let mut tx = self.db.begin(Begin::Plain).await.map_err(half_applied)?;
        for id in &ids {
            tx.exec(self.sql.set_read, &[*id, user]).await.map_err(half_applied)?;
        }
        tx.commit().await.map_err(half_applied)?;
        Ok(ids.len() as u64)
    }
}
