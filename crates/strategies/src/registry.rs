//! The built-in strategies, one row each: what it is (name, guarantee, summary) and how
//! it is built (which tells whether it needs Redis or a broker beside the SQL namespace). Adding a
//! strategy is its implementation plus one row here; `counterlab list`, scenarios, the
//! runner and the tests all read this table.

use std::sync::Arc;

use counterlab_core::{Guarantee, Strategy, StrategyInfo};

use crate::db::{Db, Dialect};
use crate::mq::{MqConfig, MqDesign, MqSpace, MqStrategy};
use crate::redis::{CacheAside, RedisConfig, RedisDesign, RedisSpace, RedisStrategy, ZsetReplicaReads};
use crate::replica::RedisLayout;
use crate::single::{NO_WRITABLE_CTE, SingleStatement};
use crate::strategies::{Design, SqlStrategy};

/// How a built-in strategy is made, and so what it runs on.
#[derive(Clone, Copy)]
pub enum Build {
    /// The SQL namespace alone.
    Sql(fn(StrategyInfo, Db) -> Arc<dyn Strategy>),
    /// The SQL namespace and a Redis key space of its own.
    Redis(fn(StrategyInfo, Db, RedisSpace, RedisConfig) -> Arc<dyn Strategy>),
    /// The SQL namespace and a broker queue of its own (RabbitMQ).
    Mq(fn(StrategyInfo, Db, MqSpace, MqConfig) -> Arc<dyn Strategy>),
}

/// One row of the registry: what the design is, how it is built, and the facts its build
/// does not imply (its `Recipe` answers from them).
#[derive(Clone, Copy)]
pub struct Builtin {
    pub info: StrategyInfo,
    pub build: Build,
    /// What it needs beyond the SQL database when its build does not say it all (empty:
    /// its build's: none for SQL, `Redis`, or the broker and its consumer).
    pub parts: &'static [&'static str],
    /// The dialects it cannot run on, and why.
    pub unsupported: (&'static [Dialect], &'static str),
    /// The key its read is, when a Redis replica can serve that read as it is.
    pub layout: Option<RedisLayout>,
}

impl Builtin {
    /// A row with what its build implies and nothing more (`parts`, `not_on`, `layout` add).
    pub const fn new(info: StrategyInfo, build: Build) -> Builtin {
        Builtin { info, build, parts: &[], unsupported: (&[], ""), layout: None }
    }

    /// This row, needing `parts` beyond the SQL database.
    const fn parts(self, parts: &'static [&'static str]) -> Builtin {
        Builtin { parts, ..self }
    }

    /// This row, not run on `dialects` for `why`.
    const fn not_on(self, dialects: &'static [Dialect], why: &'static str) -> Builtin {
        Builtin { unsupported: (dialects, why), ..self }
    }

    /// This row, whose read a Redis replica serves from `layout`.
    const fn layout(self, layout: RedisLayout) -> Builtin {
        Builtin { layout: Some(layout), ..self }
    }

    /// A deliberately wrong variant of a design, kept for the bug zoo (`scenarios/zoo/`)
    /// to prove the checker: its summary opens with `mutant:`.
    pub fn is_mutant(&self) -> bool {
        self.info.summary.starts_with(MUTANT)
    }

    /// `SQL`, `SQL + Redis` or `SQL + RabbitMQ`, for listings.
    pub fn family(&self) -> &'static str {
        match self.build {
            Build::Sql(_) => "SQL",
            Build::Redis(_) => "SQL + Redis",
            Build::Mq(_) => "SQL + RabbitMQ",
        }
    }
}

/// How a mutant's summary opens (`Builtin::is_mutant`).
pub const MUTANT: &str = "mutant:";

/// A row whose build says everything about it (chain `parts`, `not_on`, `layout` for more).
pub const fn row(name: &'static str, guarantee: Guarantee, summary: &'static str, build: Build) -> Builtin {
    Builtin::new(StrategyInfo { name, guarantee, summary }, build)
}

fn sql(info: StrategyInfo, db: Db, design: Design) -> Arc<dyn Strategy> {
    Arc::new(SqlStrategy::new(info, design, db))
}

fn redis(info: StrategyInfo, db: Db, space: RedisSpace, cfg: RedisConfig, design: RedisDesign) -> Arc<dyn Strategy> {
    Arc::new(RedisStrategy::new(info, design, db, space, cfg))
}

fn cache(info: StrategyInfo, db: Db, space: RedisSpace, cfg: RedisConfig, delete_first: bool) -> Arc<dyn Strategy> {
    Arc::new(CacheAside::new(info, db, space, cfg, delete_first))
}

fn mq(info: StrategyInfo, db: Db, space: MqSpace, cfg: MqConfig, design: MqDesign) -> Arc<dyn Strategy> {
    Arc::new(MqStrategy::new(info, design, db, space, cfg))
}

/// Every strategy counterlab ships, in the order `counterlab list` shows them.
pub const BUILTINS: &[Builtin] = &[
    row(
        "direct-update",
        Guarantee::None,
        "reads is_read, decides in the app, writes, unread = unread - 1; no lock: concurrent mark_reads double-decrement unless the isolation level turns the race into an error",
        Build::Sql(|i, db| sql(i, db, Design::DirectUpdate)),
    ),
    row(
        "select-for-update",
        Guarantee::Exact,
        "locks the notification row(s) with SELECT ... FOR UPDATE before deciding, same transaction (SQLite: BEGIN IMMEDIATE, the database write lock, since it has no row locks)",
        Build::Sql(|i, db| sql(i, db, Design::SelectForUpdate)),
    ),
    row(
        "conditional-update",
        Guarantee::Exact,
        "UPDATE ... WHERE id = ? AND NOT is_read; the counter moves by the rows really changed, same transaction",
        Build::Sql(|i, db| sql(i, db, Design::ConditionalUpdate)),
    ),
    row(
        "conditional-update-unguarded",
        Guarantee::None,
        "mutant: UPDATE ... WHERE id = ? without AND NOT is_read, trusting rows_affected, which counts an already-read row (MySQL reports matched rows): double decrements",
        Build::Sql(|i, db| sql(i, db, Design::ConditionalUpdateUnguarded)),
    ),
    row(
        "writable-cte",
        Guarantee::Exact,
        "one statement per op: WITH r AS (UPDATE ... AND NOT is_read RETURNING 1) UPDATE the counter by what r returned, in autocommit (no BEGIN/COMMIT, one round trip); PostgreSQL only",
        Build::Sql(|i, db| Arc::new(SingleStatement::new(i, db, false))),
    )
    .not_on(&[Dialect::Mysql, Dialect::Sqlite], NO_WRITABLE_CTE),
    row(
        "writable-cte-snapshot",
        Guarantee::None,
        "mutant: writable-cte whose counter guard and reply ask the table (EXISTS ... AND NOT is_read) instead of the UPDATE's RETURNING: the statement's snapshot predates a concurrent mark_read's commit, so both claim the row and both decrement",
        Build::Sql(|i, db| Arc::new(SingleStatement::new(i, db, true))),
    )
    .not_on(&[Dialect::Mysql, Dialect::Sqlite], NO_WRITABLE_CTE),
    row(
        "zset-buffer",
        Guarantee::Eventual,
        "SQL conditional UPDATE, counter delta ZINCRBY'd into a Redis sorted set; a flusher takes it (ZSCORE + ZREM) then adds it to the SQL counter: a crash in between loses it",
        Build::Redis(|i, db, s, c| redis(i, db, s, c, RedisDesign::ZsetBuffer)),
    )
    .parts(&["Redis", "flusher", "eventual reads (pending deltas)"]),
    row(
        "zset-buffer-durable",
        Guarantee::Eventual,
        "the same buffer; the claim moves the delta to a processing hash under a claim id recorded in the SQL transaction: a flusher crash loses nothing, a replay applies nothing twice",
        Build::Redis(|i, db, s, c| redis(i, db, s, c, RedisDesign::ZsetBufferDurable)),
    )
    .parts(&["Redis", "flusher", "eventual reads (pending deltas)"]),
    row(
        "zset-buffer-replay",
        Guarantee::Eventual,
        "mutant: the durable buffer's claim without the claim id in SQL; a flusher crash after the add commits and before the claim is cleared makes the replay add the delta twice",
        Build::Redis(|i, db, s, c| redis(i, db, s, c, RedisDesign::ZsetBufferReplay)),
    )
    .parts(&["Redis", "flusher", "eventual reads (pending deltas)"]),
    row(
        "lua-script",
        Guarantee::Exact,
        "unread state and counter in Redis, every check-and-change one Lua script, SQL rows written after; exact while Redis keeps its data",
        Build::Redis(|i, db, s, c| redis(i, db, s, c, RedisDesign::LuaScript)),
    )
    .parts(&["Redis (holds the truth)"])
    .layout(RedisLayout::UserKey),
    row(
        "redis-counter",
        Guarantee::Exact,
        "SQL conditional UPDATE decides, then one Lua script (counter_apply.lua, by EVALSHA) INCRBYs the user's Redis key by the signed delta and, with a reconciler, ends the op's in-flight guard in the same step; exact while Redis keeps its data and every reply arrives",
        Build::Redis(|i, db, s, c| redis(i, db, s, c, RedisDesign::RedisCounter)),
    )
    .layout(RedisLayout::UserKey),
    row(
        "watch-multi",
        Guarantee::Exact,
        "SQL conditional UPDATE decides; the user's Redis counter moves optimistically (WATCH, GET, MULTI, SET, EXEC on a dedicated connection), retried on a conflict up to 16 tries; exact while Redis keeps its data",
        Build::Redis(|i, db, s, c| redis(i, db, s, c, RedisDesign::WatchMulti)),
    )
    .layout(RedisLayout::UserKey),
    row(
        "watch-multi-unwatched",
        Guarantee::None,
        "mutant: watch-multi without the WATCH (GET, then MULTI/SET/EXEC): two overlapping updates read one value and the later SET overwrites the other, a lost update",
        Build::Redis(|i, db, s, c| redis(i, db, s, c, RedisDesign::WatchMultiUnwatched)),
    )
    .layout(RedisLayout::UserKey),
    row(
        "redis-hash",
        Guarantee::Exact,
        "SQL conditional UPDATE decides, HINCRBY on the user's field of one of 16 shard hashes follows; exact while Redis keeps its data and every reply arrives",
        Build::Redis(|i, db, s, c| redis(i, db, s, c, RedisDesign::RedisHash)),
    ),
    row(
        "redis-hash-read-then-set",
        Guarantee::None,
        "mutant: redis-hash reading the field and writing it back (HGET, then HSET) instead of HINCRBY: overlapping updates overwrite each other, a lost update",
        Build::Redis(|i, db, s, c| redis(i, db, s, c, RedisDesign::RedisHashReadThenSet)),
    ),
    row(
        "redis-set",
        Guarantee::Exact,
        "the user's unread ids as a Redis set decide (SADD, SREM whose reply moves the count, SMEMBERS + DEL in one MULTI), SQL rows written after; the count is SCARD; exact while Redis keeps its data",
        Build::Redis(|i, db, s, c| redis(i, db, s, c, RedisDesign::RedisSet)),
    )
    .parts(&["Redis (holds the truth)"])
    .layout(RedisLayout::SetCard),
    row(
        "redis-set-check-then-remove",
        Guarantee::None,
        "mutant: redis-set serving a separate counter key, SISMEMBER then SREM then DECR when the check said member: two racing mark_reads both see the id and both decrement",
        Build::Redis(|i, db, s, c| redis(i, db, s, c, RedisDesign::RedisSetCheckThenRemove)),
    )
    .parts(&["Redis (holds the truth)"])
    .layout(RedisLayout::UserKey),
    row(
        "cache-aside",
        Guarantee::Exact,
        "the conditional design in SQL; reads through a Redis cache filled on a miss (TTL `redis.cache_ttl_ms`); a write deletes the entry after its commit and again `redis.cache_delay_ms` later (delayed double delete): reads may lag that long, no longer",
        Build::Redis(|i, db, s, c| cache(i, db, s, c, false)),
    )
    .parts(&["Redis cache", "eventual reads (read lag)"]),
    row(
        "cache-aside-delete-first",
        Guarantee::Exact,
        "mutant: the same cache, deleted once, before the write: a read that misses while the write runs caches the old count until the next write or the TTL",
        Build::Redis(|i, db, s, c| cache(i, db, s, c, true)),
    )
    .parts(&["Redis cache", "eventual reads (read lag)"]),
    row(
        "zset-replica-reads",
        Guarantee::Eventual,
        "the seed's Flask design: SQL conditional update, then ZINCRBY of one Redis sorted set (member user, score count); reads meant for a replica with the primary as fallback (`[replica] read_from = \"replica-fallback\"`, held to `stale_read_bound_ms`); a reconciler resets any score that disagrees with the SQL counter (racy while ops run, exact once quiet)",
        Build::Redis(|i, db, s, c| Arc::new(ZsetReplicaReads::new(i, db, s, c, true))),
    )
    .parts(&["Redis", "Redis replica", "reconciler", "eventual reads (replica)"])
    .layout(RedisLayout::ZsetScore),
    row(
        "zset-replica-reads-no-reconcile",
        Guarantee::Eventual,
        "mutant: zset-replica-reads without its reconciler: a score lost or wrong in Redis (a restart without persistence) is never reset from the database",
        Build::Redis(|i, db, s, c| Arc::new(ZsetReplicaReads::new(i, db, s, c, false))),
    )
    .parts(&["Redis", "Redis replica", "eventual reads (replica)"])
    .layout(RedisLayout::ZsetScore),
    row(
        "mq-consumer",
        Guarantee::Eventual,
        "SQL conditional UPDATE, counter delta published to a RabbitMQ queue; a consumer adds it to the SQL counter and acks after the commit: a crash between the commit and the ack makes the redelivery apply it twice",
        Build::Mq(|i, db, s, c| mq(i, db, s, c, MqDesign::Naive)),
    ),
    row(
        "mq-consumer-idempotent",
        Guarantee::Eventual,
        "the same queue; the consumer records each message id in the apply's transaction and skips ids already recorded: a redelivery after a lost ack applies nothing",
        Build::Mq(|i, db, s, c| mq(i, db, s, c, MqDesign::Idempotent)),
    ),
];

/// The strategies a run can build: the built-ins, plus any a test registers.
#[derive(Clone)]
pub struct Registry {
    rows: Vec<Builtin>,
}

impl Registry {
    pub fn builtin() -> Registry {
        Registry { rows: BUILTINS.to_vec() }
    }

    /// This registry and one more row (a name already present is replaced).
    pub fn with(mut self, row: Builtin) -> Registry {
        self.rows.retain(|r| r.info.name != row.info.name);
        self.rows.push(row);
        self
    }

    pub fn find(&self, name: &str) -> Option<&Builtin> {
        self.rows.iter().find(|r| r.info.name == name)
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.rows.iter().map(|r| r.info.name).collect()
    }

    pub fn rows(&self) -> &[Builtin] {
        &self.rows
    }
}
