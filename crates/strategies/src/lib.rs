//! Counter strategies and the backends they run on. The SQL strategies are written once
//! over `db::Db` and run on PostgreSQL, MySQL/MariaDB and SQLite; their statements live
//! in `sql/<dialect>/*.sql`, not in Rust strings.

mod backend;
mod custom;
mod db;
mod error;
mod leftover;
mod pause;
mod redis;
mod sandbox;
mod sqlfile;
mod strategies;

use std::sync::Arc;

use counterlab_core::{Guarantee, Strategy, StrategyInfo};

pub use backend::{DEFAULT_MYSQL_URL, DEFAULT_POSTGRES_URL, Namespace, PoolSpec, Server};
pub use counterlab_core::SeedSpec;
pub use custom::{
    Action, CUSTOM_OPS, CompileError, CountersSpec, CustomSpec, CustomStrategy, MAX_EACH, Part as CompilePart,
    PerDialect, StepSpec,
};
pub use db::{Begin, Db, Dialect, Isolation, classify};
pub use error::{BackendError, redact_url};
pub use leftover::{Leftover, Marker, REDIS_MARKER_TTL_S};
pub use pause::Pausable;
pub use redis::{DEFAULT_REDIS_URL, Lease, RedisConfig, RedisServer, RedisSpace, RedisStrategy, classify_redis};
pub use sandbox::{Identity, stable_hash};

use redis::RedisDesign;

use strategies::{Design, SqlStrategy};

/// Every strategy counterlab ships, in the order `counterlab list` shows them.
pub const CATALOG: &[StrategyInfo] = &[
    StrategyInfo {
        name: "direct-update",
        guarantee: Guarantee::None,
        summary: "reads is_read, decides in the app, writes, unread = unread - 1; no lock: concurrent mark_reads double-decrement unless the isolation level turns the race into an error",
    },
    StrategyInfo {
        name: "select-for-update",
        guarantee: Guarantee::Exact,
        summary: "locks the notification row(s) with SELECT ... FOR UPDATE before deciding, same transaction (SQLite: BEGIN IMMEDIATE, the database write lock, since it has no row locks)",
    },
    StrategyInfo {
        name: "conditional-update",
        guarantee: Guarantee::Exact,
        summary: "UPDATE ... WHERE id = ? AND NOT is_read; the counter moves by the rows really changed, same transaction",
    },
    StrategyInfo {
        name: "conditional-update-unguarded",
        guarantee: Guarantee::None,
        summary: "mutant: UPDATE ... WHERE id = ? without AND NOT is_read, trusting rows_affected, which counts an already-read row (MySQL reports matched rows): double decrements",
    },
    StrategyInfo {
        name: "zset-buffer",
        guarantee: Guarantee::Eventual,
        summary: "SQL conditional UPDATE, counter delta ZINCRBY'd into a Redis sorted set; a flusher takes it (ZSCORE + ZREM) then adds it to the SQL counter: a crash in between loses it",
    },
    StrategyInfo {
        name: "zset-buffer-durable",
        guarantee: Guarantee::Eventual,
        summary: "the same buffer; the claim moves the delta to a processing hash under a claim id recorded in the SQL transaction: a flusher crash loses nothing, a replay applies nothing twice",
    },
    StrategyInfo {
        name: "zset-buffer-replay",
        guarantee: Guarantee::Eventual,
        summary: "mutant: the durable buffer's claim without the claim id in SQL; a flusher crash after the add commits and before the claim is cleared makes the replay add the delta twice",
    },
    StrategyInfo {
        name: "lua-script",
        guarantee: Guarantee::Exact,
        summary: "unread state and counter in Redis, every check-and-change one Lua script, SQL rows written after; exact while Redis keeps its data",
    },
    StrategyInfo {
        name: "redis-counter",
        guarantee: Guarantee::Exact,
        summary: "SQL conditional UPDATE decides, INCRBY/DECRBY on the user's Redis key follows; exact while Redis keeps its data and every reply arrives",
    },
];

/// Strategies that need a Redis server beside the SQL backend.
pub fn needs_redis(name: &str) -> bool {
    redis_design(name).is_some()
}

fn redis_design(name: &str) -> Option<RedisDesign> {
    Some(match name {
        "zset-buffer" => RedisDesign::ZsetBuffer,
        "zset-buffer-durable" => RedisDesign::ZsetBufferDurable,
        "zset-buffer-replay" => RedisDesign::ZsetBufferReplay,
        "lua-script" => RedisDesign::LuaScript,
        "redis-counter" => RedisDesign::RedisCounter,
        _ => return None,
    })
}

/// Builds a Redis strategy over a namespace's SQL pool and Redis key space.
pub fn build_redis(name: &str, db: Db, space: RedisSpace, cfg: RedisConfig) -> Option<Arc<RedisStrategy>> {
    Some(Arc::new(RedisStrategy::new(*find(name)?, redis_design(name)?, db, space, cfg)))
}

pub fn find(name: &str) -> Option<&'static StrategyInfo> {
    CATALOG.iter().find(|s| s.name == name)
}

/// Builds a strategy over a namespace's pool. None for an unknown name.
pub fn build(name: &str, db: Db) -> Option<Arc<dyn Strategy>> {
    let design = match name {
        "direct-update" => Design::DirectUpdate,
        "select-for-update" => Design::SelectForUpdate,
        "conditional-update" => Design::ConditionalUpdate,
        "conditional-update-unguarded" => Design::ConditionalUpdateUnguarded,
        _ => return None,
    };
    Some(Arc::new(SqlStrategy::new(*find(name)?, design, db)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_strategy_builds_on_every_dialect() {
        // Building looks up every statement in the dialect's file; a missing one panics.
        // The pools are lazy and never used, so no server is needed.
        let pg = sqlx::postgres::PgPoolOptions::new().connect_lazy("postgres://x@127.0.0.1:1/x").unwrap();
        let my = sqlx::mysql::MySqlPoolOptions::new().connect_lazy("mysql://x@127.0.0.1:1/x").unwrap();
        let lite = sqlx::sqlite::SqlitePoolOptions::new().connect_lazy("sqlite::memory:").unwrap();
        for db in [Db::Pg(pg), Db::My(my), Db::Lite(lite)] {
            for s in CATALOG.iter().filter(|s| !needs_redis(s.name)) {
                let built = build(s.name, db.clone()).expect("in catalog");
                assert_eq!(built.info().name, s.name);
            }
        }
    }
}
