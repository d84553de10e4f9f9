//! Counter strategies and the backends they run on. The SQL strategies are written once
//! over `db::Db` and run on PostgreSQL, MySQL/MariaDB and SQLite; their statements live
//! in `sql/<dialect>/*.sql`, not in Rust strings.

mod backend;
mod db;
mod error;
mod sqlfile;
mod strategies;

use std::sync::Arc;

use counterlab_core::{Guarantee, Strategy, StrategyInfo};

pub use backend::{DEFAULT_MYSQL_URL, DEFAULT_POSTGRES_URL, Namespace, PoolSpec, SeedSpec, Server};
pub use db::{Db, Dialect, Isolation, classify};
pub use error::{BackendError, redact_url};

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
];

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
            for s in CATALOG {
                let built = build(s.name, db.clone()).expect("in catalog");
                assert_eq!(built.info().name, s.name);
            }
        }
    }
}
