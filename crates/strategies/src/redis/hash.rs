//! redis-hash: each user's counter is a field (the user id) of one of `HASH_SHARDS`
//! shard hashes (`cl:<tag>:{h:<user % HASH_SHARDS>}:unread`), moved by HINCRBY
//! after the SQL conditional UPDATE has decided; fewer, larger keys than one per user.
//! Its mutant reads the field and writes it back (HGET, then HSET): a lost update.

use counterlab_core::{OpError, UserId};
use redis::AsyncCommands;

use super::classify_redis;
use super::designs::{Shared, after_sql, parse_delta};

/// Shard hashes per run; a user's shard is `user % HASH_SHARDS`.
pub(super) const HASH_SHARDS: u64 = 16;

impl Shared {
    /// The shard hash holding `user`'s counter field.
    pub(super) fn shard_key(&self, user: UserId) -> String {
        self.space.shard_key(user.rem_euclid(HASH_SHARDS as i64) as u64, "unread")
    }

    /// The user's field += delta: HINCRBY, or HGET then HSET (`read_then_set`, the mutant).
    pub(super) async fn hash_apply(&self, user: UserId, delta: i64, read_then_set: bool) -> Result<(), OpError> {
        if delta == 0 {
            return Ok(());
        }
        let key = self.shard_key(user);
        let mut c = self.space.conn();
        if read_then_set {
            let v: Option<String> = c.hget(&key, user).await.map_err(|e| after_sql(classify_redis(e)))?;
            let next = v.as_deref().map_or(0, parse_delta) + delta;
            c.hset::<_, _, _, i64>(&key, user, next).await.map_err(|e| after_sql(classify_redis(e)))?;
        } else {
            c.hincr::<_, _, _, i64>(&key, user, delta).await.map_err(|e| after_sql(classify_redis(e)))?;
        }
        self.lose_reply()
    }
}
