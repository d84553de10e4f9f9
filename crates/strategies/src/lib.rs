//! Counter strategies and the backends they run on. The SQL strategies are written once
//! over `db::Db` and run on PostgreSQL, MySQL/MariaDB and SQLite; their statements live
//! in `sql/<dialect>/*.sql`, not in Rust strings.

mod backend;
mod busy;
mod custom;
mod db;
mod error;
pub mod gate;
mod held;
mod leftover;
mod mq;
mod pause;
mod recipe;
mod redis;
mod registry;
mod replica;
mod sandbox;
mod single;
mod sqlfile;
mod strategies;

use std::sync::Arc;

use counterlab_core::Strategy;

pub use backend::{DEFAULT_MYSQL_URL, DEFAULT_POSTGRES_URL, LockProbe, Namespace, PoolSpec, Readings, Server, StatsOf};
pub use counterlab_core::SeedSpec;
pub use counterlab_spec::{
    Action, CUSTOM_OPS, CompileError, CountersSpec, CustomSpec, DEFAULT_RETRY_ATTEMPTS, MAX_AFTER_MS, MAX_EACH,
    MAX_RETRY_ATTEMPTS, Part as CompilePart, PerDialect, RetrySpec, StepSpec,
};
pub use custom::CustomStrategy;
pub use db::{Begin, Db, Dialect, Isolation, classify};
pub use error::{BackendError, Cause, redact_url};
pub use held::{hold as hold_connection, hold_session, holding as holding_connection};
pub use leftover::{Leftover, Marker, REDIS_MARKER_TTL_S, is_namespace_name};
pub use mq::{
    AmqpServer, DEFAULT_AMQP_URL, MqConfig, MqDesign, MqSpace, MqStrategy, QUEUE_EXPIRES_MS, classify_amqp, queue_name,
};
pub use pause::Pausable;
pub use redis::{
    DEFAULT_REDIS_URL, KEY_TTL, Lease, MAX_VALUE_BYTES, MemoryUse, REFRESH_EVERY, RedisConfig, RedisDesign,
    RedisServer, RedisSpace, RedisStrategy, SpaceLogin, classify_redis, namespace_cap,
};
pub use sandbox::{Identity, mysql_user, redis_prefix, redis_run_pattern, stable_hash};

pub use recipe::{BuildError, Ingredients, Recipe, ReplicaRead};
pub use registry::{BUILTINS, Build, Builtin, Registry, row};
pub use replica::{CATCH_UP_BOUND, CatchUp, RedisLayout, ReplicaReader, ReplicaReads, sql_replica_supported};

/// The built-in row named `name`.
pub fn find(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|s| s.info.name == name)
}

/// Whether the built-in `name` needs a broker (RabbitMQ) beside the SQL backend.
pub fn needs_amqp(name: &str) -> bool {
    find(name).is_some_and(|b| b.needs_amqp())
}

/// Whether the built-in `name` needs a Redis server beside the SQL backend.
pub fn needs_redis(name: &str) -> bool {
    find(name).is_some_and(|b| b.needs_redis())
}

/// Builds the SQL-only built-in `name` over a namespace's pool (None: no such row).
pub fn build(name: &str, db: Db) -> Option<Arc<dyn Strategy>> {
    let row = find(name)?;
    match row.build {
        Build::Sql(f) => Some(f(row.info, db)),
        Build::Redis(_) | Build::Mq(_) => None,
    }
}

/// Builds the Redis built-in `name` over a namespace's pool and key space.
pub fn build_redis(name: &str, db: Db, space: RedisSpace, cfg: RedisConfig) -> Option<Arc<dyn Strategy>> {
    let row = find(name)?;
    match row.build {
        Build::Redis(f) => Some(f(row.info, db, space, cfg)),
        Build::Sql(_) | Build::Mq(_) => None,
    }
}

/// The statement `name` of `dialect`'s common file (`sql/<dialect>/common.sql`); panics
/// when it is missing (the files are compiled in).
pub fn statement_for(dialect: Dialect, name: &str) -> &'static str {
    sqlfile::statement(sqlfile::common(dialect), name)
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
            for s in BUILTINS.iter().filter(|s| !s.needs_redis() && !s.needs_amqp()) {
                let built = build(s.info.name, db.clone()).expect("in the registry");
                assert_eq!(built.info().name, s.info.name);
            }
        }
    }
}
