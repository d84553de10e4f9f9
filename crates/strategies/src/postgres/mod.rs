//! PostgreSQL backend: connecting, one schema per strategy run (the namespace), bulk
//! seeding with COPY, the ground-truth check query, and teardown.

mod errors;
pub mod strategies;

use std::fmt::Write as _;
use std::time::Duration;

use counterlab_core::CheckInput;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool, Row};

use crate::error::{BackendError, redact_url};
use crate::sqlfile::statement;

pub use errors::classify;

const SCHEMA_SQL: &str = include_str!("../../sql/postgres/schema.sql");
const AFTER_SEED_SQL: &str = include_str!("../../sql/postgres/after_seed.sql");
pub(crate) const COMMON_SQL: &str = include_str!("../../sql/postgres/common.sql");

/// Where the local default server is when nothing else is configured.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const BACKEND: &str = "postgres";

/// A reachable PostgreSQL server: connection options and a small admin pool used for
/// namespace DDL and checks, never for the load.
pub struct PgServer {
    options: PgConnectOptions,
    admin: PgPool,
    url_redacted: String,
    version: String,
}

/// The data every strategy's namespace is seeded with. User `u` (1-based) owns ids
/// `(u-1)*notifications_per_user + 1 ..= u*notifications_per_user`, the first
/// `initial_read_per_user` of them read; counters start equal to the truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeedSpec {
    pub n_users: u64,
    pub notifications_per_user: u64,
    pub initial_read_per_user: u64,
}

impl PgServer {
    /// Connects within `timeout`; the error names the URL with its password redacted.
    pub async fn connect(url: &str, timeout: Duration) -> Result<PgServer, BackendError> {
        let url_redacted = redact_url(url);
        let connect_err = |detail: String| BackendError::Connect {
            backend: BACKEND,
            url: url_redacted.clone(),
            detail,
        };
        let options: PgConnectOptions = url
            .parse()
            .map_err(|e: sqlx::Error| connect_err(format!("invalid URL: {e}")))?;
        let options = options.application_name("counterlab");
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(timeout)
            .connect_with(options.clone())
            .await
            .map_err(|e| connect_err(e.to_string()))?;
        let version: String = sqlx::query_scalar("SHOW server_version")
            .fetch_one(&admin)
            .await
            .map_err(|e| connect_err(e.to_string()))?;
        Ok(PgServer {
            options,
            admin,
            url_redacted,
            version,
        })
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    pub fn url_redacted(&self) -> &str {
        &self.url_redacted
    }

    /// Creates schema `name` (which must not exist) and a pool whose connections see only
    /// it. On any failure the schema is dropped again: no half-made namespace is left.
    pub async fn create_namespace(
        &self,
        name: &str,
        max_connections: u32,
        acquire_timeout: Duration,
    ) -> Result<Namespace, BackendError> {
        assert!(
            !name.is_empty()
                && name.len() <= 63
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "namespace names are generated, not user input: {name:?}"
        );
        let ns = Namespace {
            schema: name.to_string(),
            admin: self.admin.clone(),
            pool: None,
        };
        ns.admin_exec("create schema", format!("CREATE SCHEMA \"{name}\""))
            .await?;
        let options = self.options.clone().options([("search_path", name)]);
        // No ping before each acquire: it is one more round trip per operation, which a
        // production pool would not pay either; a dead connection surfaces as an error.
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .test_before_acquire(false)
            .acquire_timeout(acquire_timeout)
            .connect_lazy_with(options);
        let ns = Namespace {
            pool: Some(pool),
            ..ns
        };
        if let Err(e) = ns.install().await {
            ns.drop_schema().await.ok();
            return Err(e);
        }
        Ok(ns)
    }
}

/// One strategy run's schema and the pool scoped to it.
pub struct Namespace {
    schema: String,
    admin: PgPool,
    pool: Option<PgPool>,
}

impl Namespace {
    pub fn name(&self) -> &str {
        &self.schema
    }

    pub fn pool(&self) -> &PgPool {
        self.pool
            .as_ref()
            .expect("namespace pool exists until drop")
    }

    fn step_err(&self, step: &'static str, e: impl std::fmt::Display) -> BackendError {
        BackendError::Step {
            backend: BACKEND,
            step,
            namespace: self.schema.clone(),
            detail: e.to_string(),
        }
    }

    async fn admin_exec(&self, step: &'static str, sql: String) -> Result<(), BackendError> {
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&self.admin)
            .await
            .map_err(|e| self.step_err(step, e))?;
        Ok(())
    }

    async fn install(&self) -> Result<(), BackendError> {
        sqlx::raw_sql(SCHEMA_SQL)
            .execute(self.pool())
            .await
            .map_err(|e| self.step_err("create tables", e))?;
        Ok(())
    }

    /// Bulk-loads notifications and counters with COPY, then indexes and analyzes.
    pub async fn seed(&self, spec: SeedSpec) -> Result<(), BackendError> {
        assert!(spec.initial_read_per_user <= spec.notifications_per_user);
        let mut conn = self
            .pool()
            .acquire()
            .await
            .map_err(|e| self.step_err("seed", e))?;
        const CHUNK_BYTES: usize = 1 << 20;
        let mut copy = conn
            .copy_in_raw("COPY notifications (id, user_id, is_read) FROM STDIN")
            .await
            .map_err(|e| self.step_err("seed notifications", e))?;
        let mut buf = String::with_capacity(CHUNK_BYTES + 64);
        let mut id = 0u64;
        for user in 1..=spec.n_users {
            for j in 0..spec.notifications_per_user {
                id += 1;
                let read = if j < spec.initial_read_per_user {
                    't'
                } else {
                    'f'
                };
                writeln!(buf, "{id}\t{user}\t{read}").expect("write to String");
                if buf.len() >= CHUNK_BYTES {
                    copy.send(std::mem::take(&mut buf).into_bytes())
                        .await
                        .map_err(|e| self.step_err("seed notifications", e))?;
                }
            }
        }
        if !buf.is_empty() {
            copy.send(std::mem::take(&mut buf).into_bytes())
                .await
                .map_err(|e| self.step_err("seed notifications", e))?;
        }
        copy.finish()
            .await
            .map_err(|e| self.step_err("seed notifications", e))?;

        let unread = spec.notifications_per_user - spec.initial_read_per_user;
        let mut copy = conn
            .copy_in_raw("COPY unread_counts (user_id, unread) FROM STDIN")
            .await
            .map_err(|e| self.step_err("seed counters", e))?;
        for user in 1..=spec.n_users {
            writeln!(buf, "{user}\t{unread}").expect("write to String");
            if buf.len() >= CHUNK_BYTES {
                copy.send(std::mem::take(&mut buf).into_bytes())
                    .await
                    .map_err(|e| self.step_err("seed counters", e))?;
            }
        }
        if !buf.is_empty() {
            copy.send(buf.into_bytes())
                .await
                .map_err(|e| self.step_err("seed counters", e))?;
        }
        copy.finish()
            .await
            .map_err(|e| self.step_err("seed counters", e))?;
        sqlx::raw_sql(AFTER_SEED_SQL)
            .execute(&mut *conn)
            .await
            .map_err(|e| self.step_err("index after seed", e))?;
        conn.close().await.ok();
        Ok(())
    }

    /// Every user's counter beside the truth from the rows, read in one snapshot
    /// (REPEATABLE READ, read only) so counters and rows agree with each other.
    pub async fn check_rows(&self, n_users: u64) -> Result<Vec<CheckInput>, BackendError> {
        let err = |e: sqlx::Error| self.step_err("check", e);
        let mut tx = self.pool().begin().await.map_err(err)?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(err)?;
        let stray: i64 = sqlx::query_scalar(statement(COMMON_SQL, "stray_rows"))
            .bind(n_users as i64)
            .fetch_one(&mut *tx)
            .await
            .map_err(err)?;
        if stray != 0 {
            return Err(self.step_err(
                "check",
                format!("{stray} rows belong to users outside 1..={n_users}"),
            ));
        }
        let rows = sqlx::query(statement(COMMON_SQL, "check_rows"))
            .bind(n_users as i64)
            .fetch_all(&mut *tx)
            .await
            .map_err(err)?;
        tx.commit().await.map_err(err)?;
        rows.iter()
            .map(|r| {
                Ok(CheckInput {
                    user: r.try_get(0).map_err(err)?,
                    counter: r.try_get(1).map_err(err)?,
                    truth: r.try_get(2).map_err(err)?,
                })
            })
            .collect()
    }

    /// Closes the pool and drops the schema with everything in it.
    pub async fn drop_schema(mut self) -> Result<(), BackendError> {
        if let Some(pool) = self.pool.take() {
            pool.close().await;
        }
        let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema);
        self.admin_exec("drop schema", sql).await
    }

    /// Closes the pool and leaves the schema in place (`--keep`).
    pub async fn keep(mut self) {
        if let Some(pool) = self.pool.take() {
            pool.close().await;
        }
    }
}
