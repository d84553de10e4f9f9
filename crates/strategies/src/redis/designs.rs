//! The Redis designs: what a `RedisStrategy` holds (the design, its scripts, statements
//! and figures) and the per-op steps the designs share (guards, the Lua calls, the
//! counter or buffer move). The ops themselves are in `ops.rs`, the background loops in
//! `flusher.rs` and `reconciler.rs`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use counterlab_core::{ErrorClass, OpError, Outcome, SeedSpec, StrategyInfo, UserId};
use redis::{AsyncCommands, Script};

use super::{RedisConfig, RedisSpace, classify_redis};
use crate::db::Db;
use crate::sqlfile::{common, statement};

/// The Lua scripts of every design, loaded once per strategy.
pub(super) struct Scripts {
    pub(super) guard_begin: Script,
    pub(super) guard_end: Script,
    pub(super) counter_apply: Script,
    pub(super) lua_create: Script,
    pub(super) lua_mark_read: Script,
    pub(super) lua_delete: Script,
    pub(super) lua_mark_all_read: Script,
    pub(super) repair: Script,
    pub(super) zset_claim: Script,
}

impl Scripts {
    fn load() -> Scripts {
        Scripts {
            guard_begin: Script::new(include_str!("../../lua/guard_begin.lua")),
            guard_end: Script::new(include_str!("../../lua/guard_end.lua")),
            counter_apply: Script::new(include_str!("../../lua/counter_apply.lua")),
            lua_create: Script::new(include_str!("../../lua/lua_create.lua")),
            lua_mark_read: Script::new(include_str!("../../lua/lua_mark_read.lua")),
            lua_delete: Script::new(include_str!("../../lua/lua_delete.lua")),
            lua_mark_all_read: Script::new(include_str!("../../lua/lua_mark_all_read.lua")),
            repair: Script::new(include_str!("../../lua/repair.lua")),
            zset_claim: Script::new(include_str!("../../lua/zset_claim.lua")),
        }
    }
}

/// The Redis designs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisDesign {
    /// Deltas buffered in a sorted set; the flusher takes them (ZSCORE + ZREM) and then
    /// adds them to the SQL counter: a crash in between loses the delta.
    ZsetBuffer,
    /// Same buffer; the claim moves the delta to a processing hash under a claim id that
    /// the SQL transaction records, so a crash loses nothing and a replay is harmless.
    ZsetBufferDurable,
    /// The mutant of the durable buffer: the same claim, but the SQL add records no claim
    /// id, so replaying a claim whose add had committed (a crash after the commit,
    /// before the processing entry is deleted) applies its delta twice.
    ZsetBufferReplay,
    /// Unread state and counter in Redis, every check-and-change one Lua script.
    LuaScript,
    /// SQL conditional UPDATE decides; `counter_apply.lua` (EVALSHA) then INCRBYs the
    /// user's key by the signed delta, ending the reconciler's guard in the same script.
    RedisCounter,
    /// SQL conditional UPDATE decides; the user's counter key moves by an optimistic
    /// read-modify-write on a dedicated connection (WATCH, GET, MULTI, SET, EXEC), run
    /// again when EXEC reports a conflict, up to `MAX_WATCH_ATTEMPTS` tries.
    WatchMulti,
    /// The mutant of watch-multi without the WATCH: GET, then MULTI/SET/EXEC, so two
    /// overlapping updates read one value and the later SET overwrites the other.
    WatchMultiUnwatched,
    /// SQL conditional UPDATE decides; HINCRBY on the user's field of a shard hash.
    RedisHash,
    /// The mutant of redis-hash: HGET, then HSET of the field (read-modify-write).
    RedisHashReadThenSet,
    /// The user's unread ids as a Redis set: SADD on create, SREM decides mark_read and
    /// delete, SMEMBERS + DEL (one MULTI) mark_all_read; SCARD is the count; SQL follows.
    RedisSet,
    /// The mutant of redis-set: SISMEMBER, then SREM, then DECR of a separate counter
    /// key when the check said member; two racing mark_reads both decrement.
    RedisSetCheckThenRemove,
}

/// Where a design keeps the number `read_count` and the check read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Served {
    /// The user's `{u:<id>}:unread` key.
    UserKey,
    /// The user's field in its shard hash `{h:<shard>}:unread`.
    ShardField,
    /// SCARD of the user's `{u:<id>}:unread_ids` set.
    SetCard,
    /// The SQL counter plus the buffered and claimed deltas.
    Buffer,
}

impl RedisDesign {
    /// Designs that buffer deltas and flush them to SQL.
    pub fn buffered(self) -> bool {
        matches!(self, RedisDesign::ZsetBuffer | RedisDesign::ZsetBufferDurable | RedisDesign::ZsetBufferReplay)
    }

    /// Designs whose ops are decided by the id set (SQL follows).
    pub(super) fn set_based(self) -> bool {
        matches!(self, RedisDesign::RedisSet | RedisDesign::RedisSetCheckThenRemove)
    }

    /// Designs with a `redis_timeout` fault point (a lost reply after their Redis write).
    pub(super) fn loses_replies(self) -> bool {
        !matches!(self, RedisDesign::LuaScript) && !self.set_based()
    }

    pub(super) fn served(self) -> Served {
        match self {
            RedisDesign::LuaScript
            | RedisDesign::RedisCounter
            | RedisDesign::WatchMulti
            | RedisDesign::WatchMultiUnwatched
            | RedisDesign::RedisSetCheckThenRemove => Served::UserKey,
            RedisDesign::RedisHash | RedisDesign::RedisHashReadThenSet => Served::ShardField,
            RedisDesign::RedisSet => Served::SetCard,
            RedisDesign::ZsetBuffer | RedisDesign::ZsetBufferDurable | RedisDesign::ZsetBufferReplay => Served::Buffer,
        }
    }
}

/// What the run reports about the flusher, the reconciler and injected faults.
#[derive(Default)]
pub(super) struct Figures {
    pub(super) flushes: AtomicU64,
    pub(super) deltas_flushed_abs: AtomicU64,
    pub(super) flusher_crashes: AtomicU64,
    /// Claims the replay mutant applied before a crash and will apply again.
    pub(super) double_claims: AtomicU64,
    pub(super) lost_replies: AtomicU64,
    pub(super) lost_claims: AtomicU64,
    pub(super) lost_delta_abs: AtomicU64,
    pub(super) recovered_claims: AtomicU64,
    pub(super) replayed_claims_skipped: AtomicU64,
    pub(super) reconcile_passes: AtomicU64,
    pub(super) repairs: AtomicU64,
    pub(super) repair_standdowns: AtomicU64,
    /// Milliseconds from the last data loss to the first reconcile pass that found every
    /// user consistent; -1 until then.
    pub(super) heal_ms: AtomicI64,
    /// watch-multi: EXECs that found the watched key changed (each one more try).
    pub(super) watch_conflicts: AtomicU64,
    /// watch-multi: ops that gave up after `MAX_WATCH_ATTEMPTS` conflicts.
    pub(super) watch_give_ups: AtomicU64,
}

/// Everything the ops and the background loops (flusher, reconciler) share.
pub(super) struct Shared {
    pub(super) info: StrategyInfo,
    pub(super) design: RedisDesign,
    pub(super) db: Db,
    pub(super) space: RedisSpace,
    pub(super) scripts: Scripts,
    pub(super) cfg: RedisConfig,
    pub(super) sql: Sql,
    pub(super) stop: AtomicBool,
    pub(super) crashes_armed: AtomicU32,
    /// Replies still to lose (`redis_timeout`): the command runs, the reply is dropped.
    pub(super) replies_to_lose: AtomicU32,
    /// Claim ids come from here, not from a Redis counter that a data loss would reset
    /// (and reissue ids that `flush_claims` already holds).
    pub(super) next_claim: AtomicI64,
    /// Wakes the background loops when settle stops them.
    pub(super) stop_notify: tokio::sync::Notify,
    pub(super) data_loss_at: Mutex<Option<Instant>>,
    pub(super) figures: Figures,
}

/// The SQL statements of the Redis designs, from `sql/<dialect>/common.sql`.
#[derive(Clone, Copy)]
pub(super) struct Sql {
    pub(super) insert: &'static str,
    pub(super) set_read: &'static str,
    pub(super) set_read_if_unread: &'static str,
    pub(super) delete_unread: &'static str,
    pub(super) delete_any: &'static str,
    pub(super) mark_all_rows: &'static str,
    pub(super) counter_read: &'static str,
    pub(super) counter_add: &'static str,
    pub(super) claim_record: &'static str,
    pub(super) counters_all: &'static str,
    pub(super) truth_all: &'static str,
    pub(super) user_rows: &'static str,
}

/// A Redis design over a namespace's SQL pool and the run's Redis key space.
pub struct RedisStrategy {
    pub(super) shared: Arc<Shared>,
    pub(super) tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// An error after the op's SQL write committed: half applied, so unknown (a retry of
/// the whole op would find the row already changed and never move the counter).
pub(super) fn after_sql(e: OpError) -> OpError {
    OpError::new(e.class, Outcome::Unknown, format!("after the SQL write committed: {}", e.message))
}

/// An error after the op already changed Redis (the designs where Redis decides): half
/// applied, so unknown, never a retryable fail: a retry would see Redis already changed
/// and report no transition, leaving the counter off for good.
pub(super) fn half_applied(e: OpError) -> OpError {
    OpError::new(e.class, Outcome::Unknown, format!("after Redis changed: {}", e.message))
}

/// A Redis number (an integer, or a sorted-set score such as `3` or `-1.0`) as an
/// integer; anything unreadable counts as 0.
pub(super) fn parse_delta(v: &str) -> i64 {
    v.parse::<f64>().map(|f| f.round() as i64).unwrap_or(0)
}

impl RedisStrategy {
    pub fn new(info: StrategyInfo, design: RedisDesign, db: Db, space: RedisSpace, cfg: RedisConfig) -> RedisStrategy {
        let f = common(db.dialect());
        let s = |n| statement(f, n);
        let sql = Sql {
            insert: s("insert_notification"),
            set_read: s("set_read"),
            set_read_if_unread: s("set_read_if_unread"),
            delete_unread: s("delete_unread"),
            delete_any: s("delete_any"),
            mark_all_rows: s("mark_all_rows"),
            counter_read: s("counter_read"),
            counter_add: s("counter_add"),
            claim_record: s("claim_record"),
            counters_all: s("counters_all"),
            truth_all: s("truth_all"),
            user_rows: s("user_rows"),
        };
        let shared = Shared {
            info,
            design,
            db,
            space,
            scripts: Scripts::load(),
            cfg,
            sql,
            stop: AtomicBool::new(false),
            crashes_armed: AtomicU32::new(0),
            replies_to_lose: AtomicU32::new(0),
            next_claim: AtomicI64::new(1),
            stop_notify: tokio::sync::Notify::new(),
            data_loss_at: Mutex::new(None),
            figures: Figures { heal_ms: AtomicI64::new(-1), ..Figures::default() },
        };
        RedisStrategy { shared: Arc::new(shared), tasks: Mutex::new(Vec::new()) }
    }

    /// Loads the Redis side of the seeded data (see `SeedSpec`): what each design serves
    /// (a counter key, a shard hash field, an id set) and the state it decides with
    /// (lua-script's hash, the check-then-remove mutant's id set). Buffered designs start
    /// with empty buffers.
    pub(crate) async fn seed_redis(&self, spec: SeedSpec) -> Result<(), OpError> {
        let sh = &self.shared;
        if sh.design.buffered() {
            return Ok(());
        }
        let mut conn = sh.space.conn();
        let mut pipe = redis::pipe();
        let mut queued = 0;
        for user in 1..=spec.n_users as i64 {
            sh.seed_user(&mut pipe, user, spec);
            queued += 1;
            if queued == 500 {
                pipe.query_async::<()>(&mut conn).await.map_err(classify_redis)?;
                pipe = redis::pipe();
                queued = 0;
            }
        }
        if queued > 0 {
            pipe.query_async::<()>(&mut conn).await.map_err(classify_redis)?;
        }
        Ok(())
    }

    /// The buffered designs' hot path alone (`ZINCRBY pending delta user`), exposed for
    /// the redis-benchmark comparison in `benches/redis_zincrby.rs`.
    pub async fn buffer_delta(&self, user: UserId, delta: i64) -> Result<(), OpError> {
        self.shared.buffer(user, delta).await
    }

    pub(super) fn guarded(&self) -> bool {
        self.shared.cfg.reconcile_interval.is_some()
            && matches!(self.shared.design, RedisDesign::LuaScript | RedisDesign::RedisCounter)
    }
}

impl Shared {
    pub(super) fn k(&self, user: UserId, what: &str) -> String {
        self.space.user_key(user, what)
    }

    /// Queues one user's seeded Redis state (see `seed_redis`).
    fn seed_user(&self, pipe: &mut redis::Pipeline, user: UserId, spec: SeedSpec) {
        let unread = spec.unread_at_start() as i64;
        let ids: Vec<i64> = spec.rows_of(user).filter(|(_, read)| !read).map(|(id, _)| id).collect();
        match self.design.served() {
            Served::UserKey => {
                pipe.set(self.k(user, "unread"), unread).ignore();
            }
            Served::ShardField => {
                pipe.hset(self.shard_key(user), user, unread).ignore();
            }
            Served::SetCard | Served::Buffer => {}
        }
        if self.design.set_based() && !ids.is_empty() {
            pipe.sadd(self.k(user, "unread_ids"), &ids).ignore();
        }
        if self.design == RedisDesign::LuaScript && spec.notifications_per_user > 0 {
            let items: Vec<(i64, &str)> =
                spec.rows_of(user).map(|(id, read)| (id, if read { "1" } else { "0" })).collect();
            pipe.hset_multiple(self.k(user, "state"), &items).ignore();
        }
    }

    pub(super) async fn guard_begin(&self, user: UserId, on: bool) -> Result<(), OpError> {
        if on {
            let mut c = self.space.conn();
            self.scripts
                .guard_begin
                .key(self.k(user, "inflight"))
                .key(self.k(user, "seq"))
                .invoke_async::<i64>(&mut c)
                .await
                .map_err(classify_redis)?;
        }
        Ok(())
    }

    pub(super) async fn guard_end(&self, user: UserId, on: bool) {
        if on {
            let mut c = self.space.conn();
            // Best effort: a lost DECR leaves the user "in flight", which only makes the
            // reconciler stand down for that user, never repair it wrongly.
            let _ = self.scripts.guard_end.key(self.k(user, "inflight")).invoke_async::<i64>(&mut c).await;
        }
    }

    /// Runs one of lua-script's per-user scripts (keys: unread, state, inflight).
    pub(super) async fn user_script<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        user: UserId,
        args: &[String],
    ) -> Result<T, OpError> {
        let mut c = self.space.conn();
        let mut inv = script.prepare_invoke();
        inv.key(self.k(user, "unread")).key(self.k(user, "state")).key(self.k(user, "inflight"));
        for a in args {
            inv.arg(a);
        }
        inv.invoke_async(&mut c).await.map_err(classify_redis)
    }

    /// An op's SQL step; on failure the reconciler guard is released before returning.
    pub(super) async fn sql_step<T>(
        &self,
        user: UserId,
        guarded: bool,
        step: impl Future<Output = Result<T, OpError>>,
    ) -> Result<T, OpError> {
        let r = step.await;
        if r.is_err() {
            self.guard_end(user, guarded).await;
        }
        r
    }

    /// The Redis step of the SQL-decided designs, after their SQL write committed: counter
    /// or buffer moves by `delta`. An error here leaves the op half applied (its rows
    /// changed, the counter did not, or did unseen): unknown, never a fail.
    pub(super) async fn apply_delta(&self, user: UserId, delta: i64, guarded: bool) -> Result<(), OpError> {
        let r = match self.design {
            RedisDesign::RedisCounter => self.counter_apply(user, delta, guarded).await,
            RedisDesign::WatchMulti => self.watch_apply(user, delta, true).await,
            RedisDesign::WatchMultiUnwatched => self.watch_apply(user, delta, false).await,
            RedisDesign::RedisHash => self.hash_apply(user, delta, false).await,
            RedisDesign::RedisHashReadThenSet => self.hash_apply(user, delta, true).await,
            _ => self.buffer(user, delta).await,
        };
        r.map_err(|e| OpError::new(e.class, Outcome::Unknown, format!("after the SQL write committed: {}", e.message)))
    }

    /// Fault point "after the Redis command ran, before its reply arrived": when a
    /// `redis_timeout` is armed, the command has run and the caller gets an unknown.
    pub(super) fn lose_reply(&self) -> Result<(), OpError> {
        if self.replies_to_lose.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
            self.figures.lost_replies.fetch_add(1, Ordering::Relaxed);
            return Err(OpError::new(
                ErrorClass::Timeout,
                Outcome::Unknown,
                "redis: reply lost after the command ran (injected)",
            ));
        }
        Ok(())
    }

    /// redis-counter's Redis step: counter += delta, leaving the guard in the same script.
    async fn counter_apply(&self, user: UserId, delta: i64, guarded: bool) -> Result<(), OpError> {
        if delta == 0 {
            self.guard_end(user, guarded).await;
            return Ok(());
        }
        let mut c = self.space.conn();
        self.scripts
            .counter_apply
            .key(self.k(user, "unread"))
            .key(self.k(user, "inflight"))
            .arg(delta)
            .arg(if guarded { "1" } else { "0" })
            .invoke_async::<i64>(&mut c)
            .await
            .map_err(classify_redis)?;
        self.lose_reply()
    }

    async fn buffer(&self, user: UserId, delta: i64) -> Result<(), OpError> {
        if delta != 0 {
            let mut c = self.space.conn();
            c.zincr::<_, _, _, f64>(self.space.buf_key("pending"), user, delta).await.map_err(classify_redis)?;
            return self.lose_reply();
        }
        Ok(())
    }

    pub(super) async fn get_i64(&self, key: String) -> Result<Option<i64>, OpError> {
        let mut c = self.space.conn();
        let v: Option<String> = c.get(key).await.map_err(classify_redis)?;
        Ok(v.map(|s| parse_delta(&s)))
    }
}
