//! Test helpers: the server URL, plans from inline TOML, and direct SQL on a namespace.

use std::time::Duration;

use counterlab::run::{RunOptions, run_plan};
use counterlab::scenario::{Overrides, RunPlan, parse};
use counterlab_report::Report;
use counterlab_strategies::postgres::DEFAULT_URL;
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool};

pub fn pg_url() -> String {
    std::env::var("COUNTERLAB_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_string())
}

pub async fn admin() -> PgPool {
    PgPoolOptions::new()
        .max_connections(2)
        .connect(&pg_url())
        .await
        .expect("test PostgreSQL is up (see .ci/run)")
}

pub fn known() -> Vec<&'static str> {
    counterlab::CATALOG.iter().map(|s| s.name).collect()
}

pub fn plan(toml: &str) -> RunPlan {
    parse(
        "inline.toml",
        toml,
        "inline",
        &Overrides::default(),
        &known(),
        1,
    )
    .expect("valid test scenario")
}

/// Runs a plan with `--keep` so the test can inspect what is stored.
pub async fn run_kept(plan: &RunPlan) -> Report {
    let opts = RunOptions {
        postgres_url: pg_url(),
        keep: true,
        connect_timeout: Duration::from_secs(5),
        cancel: Default::default(),
    };
    run_plan(plan, &opts, &mut |_| {})
        .await
        .expect("run succeeds")
}

/// Counter and truth per user computed here, independently of counterlab's check query.
pub async fn stored_drift(admin: &PgPool, schema: &str) -> Vec<(i64, i64, i64)> {
    let sql = format!(
        "SELECT c.user_id, c.unread, (SELECT count(*) FROM \"{schema}\".notifications n \
         WHERE n.user_id = c.user_id AND n.is_read = false) \
         FROM \"{schema}\".unread_counts c ORDER BY c.user_id"
    );
    sqlx::query_as(AssertSqlSafe(sql))
        .fetch_all(admin)
        .await
        .expect("inspect namespace")
}

pub async fn drop_schema(admin: &PgPool, schema: &str) {
    sqlx::query(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(admin)
    .await
    .expect("drop test schema");
}

pub async fn schema_exists(admin: &PgPool, schema: &str) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
        .bind(schema)
        .fetch_one(admin)
        .await
        .expect("query pg_namespace")
}
