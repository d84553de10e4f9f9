//! Backends: connecting to a server (or opening an SQLite directory), one isolated
//! namespace per strategy run (a PostgreSQL schema, a MySQL database, an SQLite file),
//! bulk seeding, the ground-truth check, and teardown.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use counterlab_core::CheckInput;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, Executor, MySqlPool, PgPool};

use crate::db::{Db, Dialect, Isolation};
use crate::error::{BackendError, redact_url};
use crate::sqlfile::{after_seed, common, schema, statement};

/// The local PostgreSQL used when nothing else is configured.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// The local MariaDB/MySQL used when nothing else is configured.
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// The data every namespace is seeded with. User `u` (1-based) owns ids
/// `(u-1)*notifications_per_user + 1 ..= u*notifications_per_user`, the first
/// `initial_read_per_user` of them read; counters start equal to the truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeedSpec {
    pub n_users: u64,
    pub notifications_per_user: u64,
    pub initial_read_per_user: u64,
}

enum Conn {
    Pg { options: PgConnectOptions, admin: PgPool },
    My { options: MySqlConnectOptions, admin: MySqlPool },
    Lite { dir: PathBuf },
}

/// A reachable server (or an SQLite directory) that namespaces are created on.
pub struct Server {
    conn: Conn,
    location: String,
    version: String,
}

/// Per-namespace pool settings.
#[derive(Clone, Copy, Debug)]
pub struct PoolSpec {
    pub max_connections: u32,
    /// Bounds the wait for a pooled connection and, on SQLite, for the write lock.
    pub acquire_timeout: Duration,
    pub isolation: Isolation,
}

impl Server {
    pub async fn connect_postgres(url: &str, timeout: Duration) -> Result<Server, BackendError> {
        let location = redact_url(url);
        let err = |detail: String| BackendError::Connect { backend: "postgres", url: location.clone(), detail };
        let options: PgConnectOptions = url.parse().map_err(|e: sqlx::Error| err(format!("invalid URL: {e}")))?;
        let options = options.application_name("counterlab");
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(timeout)
            .connect_with(options.clone())
            .await
            .map_err(|e| err(e.to_string()))?;
        let version: String =
            sqlx::query_scalar("SHOW server_version").fetch_one(&admin).await.map_err(|e| err(e.to_string()))?;
        Ok(Server { conn: Conn::Pg { options, admin }, location, version })
    }

    pub async fn connect_mysql(url: &str, timeout: Duration) -> Result<Server, BackendError> {
        let location = redact_url(url);
        let err = |detail: String| BackendError::Connect { backend: "mysql", url: location.clone(), detail };
        let options: MySqlConnectOptions = url.parse().map_err(|e: sqlx::Error| err(format!("invalid URL: {e}")))?;
        let admin = MySqlPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(timeout)
            .connect_with(options.clone())
            .await
            .map_err(|e| err(e.to_string()))?;
        let version: String =
            sqlx::query_scalar("SELECT VERSION()").fetch_one(&admin).await.map_err(|e| err(e.to_string()))?;
        Ok(Server { conn: Conn::My { options, admin }, location, version })
    }

    /// SQLite needs no server: namespaces are files in `dir` (created if missing).
    pub async fn open_sqlite(dir: &Path) -> Result<Server, BackendError> {
        let location = dir.display().to_string();
        let err = |detail: String| BackendError::Connect { backend: "sqlite", url: location.clone(), detail };
        std::fs::create_dir_all(dir).map_err(|e| err(format!("cannot create directory: {e}")))?;
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(SqliteConnectOptions::new().in_memory(true))
            .await
            .map_err(|e| err(e.to_string()))?;
        let version: String =
            sqlx::query_scalar("SELECT sqlite_version()").fetch_one(&pool).await.map_err(|e| err(e.to_string()))?;
        pool.close().await;
        Ok(Server { conn: Conn::Lite { dir: dir.to_path_buf() }, location, version })
    }

    pub fn dialect(&self) -> Dialect {
        match self.conn {
            Conn::Pg { .. } => Dialect::Postgres,
            Conn::My { .. } => Dialect::Mysql,
            Conn::Lite { .. } => Dialect::Sqlite,
        }
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    /// The URL with its password redacted, or the SQLite directory.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Isolation levels this backend really has. SQLite transactions are always
    /// serializable (one writer at a time).
    pub fn supports(&self, isolation: Isolation) -> bool {
        self.dialect() != Dialect::Sqlite || isolation == Isolation::Serializable
    }

    /// Creates namespace `name` (which must not exist) with its tables, and a pool that
    /// sees only it at `spec.isolation`. On failure nothing is left behind.
    pub async fn create_namespace(&self, name: &str, spec: PoolSpec) -> Result<Namespace, BackendError> {
        assert!(
            !name.is_empty()
                && name.len() <= 63
                && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "namespace names are generated, not user input: {name:?}"
        );
        assert!(self.supports(spec.isolation), "{} cannot run at {}", self.dialect().name(), spec.isolation.name());
        let ns = match &self.conn {
            Conn::Pg { options, admin } => {
                let ns = Namespace { name: name.into(), home: Home::Pg(admin.clone()), db: None };
                ns.admin_exec("create schema", format!("CREATE SCHEMA \"{name}\"")).await?;
                let options = options.clone().options([
                    ("search_path", name),
                    ("default_transaction_isolation", &spec.isolation.sql().to_lowercase()),
                ]);
                // No ping before each acquire: one more round trip per operation that a
                // tuned production pool does not pay; a dead connection shows as an error.
                let pool = PgPoolOptions::new()
                    .max_connections(spec.max_connections)
                    .acquire_timeout(spec.acquire_timeout)
                    .test_before_acquire(false)
                    .connect_lazy_with(options);
                Namespace { db: Some(Db::Pg(pool)), ..ns }
            }
            Conn::My { options, admin } => {
                let ns = Namespace { name: name.into(), home: Home::My(admin.clone()), db: None };
                ns.admin_exec("create database", format!("CREATE DATABASE `{name}`")).await?;
                let set_isolation: &'static str = match spec.isolation {
                    Isolation::ReadCommitted => "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                    Isolation::RepeatableRead => "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                    Isolation::Serializable => "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE",
                };
                let pool = MySqlPoolOptions::new()
                    .max_connections(spec.max_connections)
                    .acquire_timeout(spec.acquire_timeout)
                    .test_before_acquire(false)
                    .after_connect(move |conn, _| {
                        Box::pin(async move {
                            conn.execute(set_isolation).await?;
                            Ok(())
                        })
                    })
                    .connect_lazy_with(options.clone().database(name));
                Namespace { db: Some(Db::My(pool)), ..ns }
            }
            Conn::Lite { dir } => {
                let path = dir.join(format!("{name}.sqlite3"));
                if path.exists() {
                    return Err(BackendError::Step {
                        backend: "sqlite",
                        step: "create file",
                        namespace: name.into(),
                        detail: format!("{} exists", path.display()),
                    });
                }
                let options = SqliteConnectOptions::new()
                    .filename(&path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    // Below the op timeout, so a long wait for the write lock ends as a
                    // retryable SQLITE_BUSY rather than as an op timeout (unknown outcome).
                    .busy_timeout(spec.acquire_timeout / 2);
                let pool = SqlitePoolOptions::new()
                    .max_connections(spec.max_connections)
                    .acquire_timeout(spec.acquire_timeout)
                    .test_before_acquire(false)
                    .connect_lazy_with(options);
                Namespace { name: name.into(), home: Home::Lite(path), db: Some(Db::Lite(pool)) }
            }
        };
        if let Err(e) = ns.install().await {
            ns.drop_namespace().await.ok();
            return Err(e);
        }
        Ok(ns)
    }
}

enum Home {
    Pg(PgPool),
    My(MySqlPool),
    Lite(PathBuf),
}

/// One strategy run's isolated storage and the pool scoped to it.
pub struct Namespace {
    name: String,
    home: Home,
    db: Option<Db>,
}

impl Namespace {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn db(&self) -> &Db {
        self.db.as_ref().expect("namespace pool exists until drop")
    }

    fn dialect(&self) -> Dialect {
        match self.home {
            Home::Pg(_) => Dialect::Postgres,
            Home::My(_) => Dialect::Mysql,
            Home::Lite(_) => Dialect::Sqlite,
        }
    }

    fn step_err(&self, step: &'static str, e: impl std::fmt::Display) -> BackendError {
        BackendError::Step { backend: self.dialect().name(), step, namespace: self.name.clone(), detail: e.to_string() }
    }

    async fn admin_exec(&self, step: &'static str, sql: String) -> Result<(), BackendError> {
        let r = match &self.home {
            Home::Pg(a) => sqlx::raw_sql(AssertSqlSafe(sql)).execute(a).await.map(|_| ()),
            Home::My(a) => sqlx::raw_sql(AssertSqlSafe(sql)).execute(a).await.map(|_| ()),
            Home::Lite(_) => Ok(()),
        };
        r.map_err(|e| self.step_err(step, e))
    }

    /// Runs a multi-statement script inside the namespace.
    async fn script(&self, step: &'static str, sql: &'static str) -> Result<(), BackendError> {
        let r = match self.db() {
            Db::Pg(p) => sqlx::raw_sql(sql).execute(p).await.map(|_| ()),
            Db::My(p) => sqlx::raw_sql(sql).execute(p).await.map(|_| ()),
            Db::Lite(p) => sqlx::raw_sql(sql).execute(p).await.map(|_| ()),
        };
        r.map_err(|e| self.step_err(step, e))
    }

    async fn install(&self) -> Result<(), BackendError> {
        self.script("create tables", schema(self.dialect())).await
    }

    /// The isolation level the namespace's connections really run at, as the server
    /// reports it (SQLite: always serializable).
    pub async fn isolation_in_effect(&self) -> Result<String, BackendError> {
        let err = |e: sqlx::Error| self.step_err("read isolation", e);
        match self.db() {
            Db::Pg(p) => sqlx::query_scalar("SHOW transaction_isolation").fetch_one(p).await.map_err(err),
            Db::My(p) => {
                let v: Result<String, _> =
                    sqlx::query_scalar("SELECT @@SESSION.transaction_isolation").fetch_one(p).await;
                match v {
                    Ok(v) => Ok(v),
                    Err(_) => sqlx::query_scalar("SELECT @@SESSION.tx_isolation").fetch_one(p).await.map_err(err),
                }
            }
            Db::Lite(_) => Ok("serializable".into()),
        }
    }

    /// Bulk-loads notifications and counters (COPY on PostgreSQL, multi-row INSERTs in
    /// one transaction elsewhere), then builds indexes and statistics.
    pub async fn seed(&self, spec: SeedSpec) -> Result<(), BackendError> {
        assert!(spec.initial_read_per_user <= spec.notifications_per_user);
        let unread = spec.notifications_per_user - spec.initial_read_per_user;
        let rows = (1..=spec.n_users).flat_map(move |u| {
            (0..spec.notifications_per_user)
                .map(move |j| ((u - 1) * spec.notifications_per_user + j + 1, u, j < spec.initial_read_per_user))
        });
        match self.db() {
            Db::Pg(p) => self.copy_pg(p, spec, rows, unread).await?,
            Db::My(p) => {
                let mut tx = p.begin().await.map_err(|e| self.step_err("seed", e))?;
                for sql in insert_batches(spec, rows, unread, "TRUE", "FALSE") {
                    sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut *tx).await.map_err(|e| self.step_err("seed", e))?;
                }
                tx.commit().await.map_err(|e| self.step_err("seed", e))?;
            }
            Db::Lite(p) => {
                let mut tx = p.begin().await.map_err(|e| self.step_err("seed", e))?;
                for sql in insert_batches(spec, rows, unread, "1", "0") {
                    sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut *tx).await.map_err(|e| self.step_err("seed", e))?;
                }
                tx.commit().await.map_err(|e| self.step_err("seed", e))?;
            }
        }
        self.script("index after seed", after_seed(self.dialect())).await
    }

    async fn copy_pg(
        &self,
        pool: &PgPool,
        spec: SeedSpec,
        rows: impl Iterator<Item = (u64, u64, bool)>,
        unread: u64,
    ) -> Result<(), BackendError> {
        const CHUNK_BYTES: usize = 1 << 20;
        let e = |step| move |e: sqlx::Error| self.step_err(step, e);
        let mut conn = pool.acquire().await.map_err(e("seed"))?;
        let mut copy = conn
            .copy_in_raw("COPY notifications (id, user_id, is_read) FROM STDIN")
            .await
            .map_err(e("seed notifications"))?;
        let mut buf = String::with_capacity(CHUNK_BYTES + 64);
        for (id, user, read) in rows {
            writeln!(buf, "{id}\t{user}\t{}", if read { 't' } else { 'f' }).expect("write to String");
            if buf.len() >= CHUNK_BYTES {
                copy.send(std::mem::take(&mut buf).into_bytes()).await.map_err(e("seed notifications"))?;
            }
        }
        if !buf.is_empty() {
            copy.send(std::mem::take(&mut buf).into_bytes()).await.map_err(e("seed notifications"))?;
        }
        copy.finish().await.map_err(e("seed notifications"))?;
        let mut copy =
            conn.copy_in_raw("COPY unread_counts (user_id, unread) FROM STDIN").await.map_err(e("seed counters"))?;
        for user in 1..=spec.n_users {
            writeln!(buf, "{user}\t{unread}").expect("write to String");
            if buf.len() >= CHUNK_BYTES {
                copy.send(std::mem::take(&mut buf).into_bytes()).await.map_err(e("seed counters"))?;
            }
        }
        if !buf.is_empty() {
            copy.send(buf.into_bytes()).await.map_err(e("seed counters"))?;
        }
        copy.finish().await.map_err(e("seed counters"))?;
        Ok(())
    }

    /// Every user's counter beside the truth from the rows, users 1..=n_users. Run after
    /// the load has stopped, so one statement sees a quiescent state.
    pub async fn check_rows(&self, n_users: u64) -> Result<Vec<CheckInput>, BackendError> {
        let sql = statement(common(self.dialect()), "check_rows");
        let raw: Vec<(i64, Option<i64>, i64)> =
            self.db().rows(sql, &[]).await.map_err(|e| self.step_err("check", e))?;
        if let Some((u, _, _)) = raw.iter().find(|(u, _, _)| *u < 1 || *u as u64 > n_users) {
            return Err(self.step_err("check", format!("rows for user {u}, outside 1..={n_users}")));
        }
        let mut out: Vec<CheckInput> =
            (1..=n_users as i64).map(|user| CheckInput { user, counter: None, truth: 0 }).collect();
        for (user, counter, truth) in raw {
            out[(user - 1) as usize] = CheckInput { user, counter, truth };
        }
        Ok(out)
    }

    async fn close_pool(&mut self) {
        if let Some(db) = self.db.take() {
            db.close().await;
        }
    }

    /// Closes the pool and removes the namespace with everything in it.
    pub async fn drop_namespace(mut self) -> Result<(), BackendError> {
        self.close_pool().await;
        match &self.home {
            Home::Pg(_) => {
                self.admin_exec("drop schema", format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name)).await
            }
            Home::My(_) => self.admin_exec("drop database", format!("DROP DATABASE IF EXISTS `{}`", self.name)).await,
            Home::Lite(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let mut p = path.clone().into_os_string();
                    p.push(suffix);
                    match std::fs::remove_file(&p) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(self.step_err("remove file", e)),
                    }
                }
                Ok(())
            }
        }
    }

    /// Closes the pool and leaves the namespace in place (`--keep`).
    pub async fn keep(mut self) {
        self.close_pool().await;
    }
}

/// Multi-row INSERT statements of at most 1000 rows each; every value is a number the
/// seeder generated, so the text is safe to build.
fn insert_batches(
    spec: SeedSpec,
    rows: impl Iterator<Item = (u64, u64, bool)>,
    unread: u64,
    t: &str,
    f: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    batch_into(
        &mut out,
        "INSERT INTO notifications (id, user_id, is_read) VALUES ",
        rows.map(|(id, user, read)| format!("({id},{user},{})", if read { t } else { f })),
    );
    batch_into(
        &mut out,
        "INSERT INTO unread_counts (user_id, unread) VALUES ",
        (1..=spec.n_users).map(|u| format!("({u},{unread})")),
    );
    out
}

fn batch_into(out: &mut Vec<String>, head: &str, values: impl Iterator<Item = String>) {
    const BATCH: usize = 1000;
    let mut sql = String::new();
    let mut n = 0;
    for v in values {
        sql += if n == 0 { head } else { "," };
        sql += &v;
        n += 1;
        if n == BATCH {
            out.push(std::mem::take(&mut sql));
            n = 0;
        }
    }
    if n > 0 {
        out.push(sql);
    }
}
