//! The servers' own statistics for a namespace's cost (`StrategyReport.cost`): its tables'
//! counters and the server's WAL on PostgreSQL, the server's status counters on
//! MariaDB/MySQL, as (counter, value) pairs under the server's names. The statements are
//! in `sql/<dialect>/stats.sql`.

use std::time::{Duration, Instant};

use counterlab_core::{ErrorClass, OpError, Outcome};
use sqlx::PgPool;

use super::{Home, Namespace};
use crate::db::{Db, Dialect, classify};
use crate::sandbox::Identity;
use crate::sqlfile::{statement, stats};

/// A server's counters: (name, value), in the order the server gave them.
pub type Readings = Vec<(String, i64)>;

/// Which reading of `Namespace::stats`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatsOf {
    /// PostgreSQL: the namespace's tables (`pg_stat_user_tables`, `pg_statio_user_tables`
    /// of its schema, summed).
    PgTables,
    /// PostgreSQL: the whole server's `pg_stat_wal` and WAL insert position.
    PgWal,
    /// MariaDB/MySQL: the whole server's `SHOW GLOBAL STATUS` (a chosen few).
    MysqlStatus,
}

impl Namespace {
    /// Makes the namespace's work visible in PostgreSQL's statistics before they are read.
    /// PostgreSQL 15 keeps a backend's counters (table rows, blocks, WAL) pending and
    /// flushes them to shared memory when the backend goes idle, at most once a second
    /// (a later idle timer or its exit flushes the rest). So each idle connection of the
    /// namespace's pool, then of the configured account's pool, runs
    /// `pg_stat_force_next_flush()`: the backend flushes as that statement ends, before
    /// it reports ready, so once every call has returned the shared statistics hold all
    /// of their work. Nothing is closed: the pool stays as warm as it was, for the load
    /// and for the check. A connection closed during the load flushed as its backend
    /// exited; none is in use after settle (a busy one would not be reached). Returns the
    /// connections flushed; nothing to do elsewhere (MariaDB's and Redis's counters are
    /// current when read).
    pub async fn flush_stats(&self) -> Result<u32, OpError> {
        let (Home::Pg(admin), Db::Pg(pool)) = (&self.home, self.db()) else { return Ok(0) };
        Ok(pg_flush(pool).await? + pg_flush(admin).await?)
    }

    /// One reading: (counter, value) pairs. Call `flush_stats` first on PostgreSQL.
    pub async fn stats(&self, of: StatsOf) -> Result<Readings, OpError> {
        let sql = |d, name| stats(d).map(|file| statement(file, name)).expect("stats.sql of a server dialect");
        match (&self.home, of) {
            (Home::Pg(admin), StatsOf::PgTables) => {
                let q = sqlx::query_as(sql(Dialect::Postgres, "tables")).bind(&self.name);
                q.fetch_all(admin).await.map_err(|e| classify(Dialect::Postgres, e))
            }
            (Home::Pg(admin), StatsOf::PgWal) => {
                let q = sqlx::query_as(sql(Dialect::Postgres, "wal"));
                q.fetch_all(admin).await.map_err(|e| classify(Dialect::Postgres, e))
            }
            (Home::My(admin), StatsOf::MysqlStatus) => {
                let rows: Vec<(String, String)> = sqlx::query_as(sql(Dialect::Mysql, "status"))
                    .fetch_all(admin)
                    .await
                    .map_err(|e| classify(Dialect::Mysql, e))?;
                Ok(rows.into_iter().filter_map(|(k, v)| Some((k, v.trim().parse().ok()?))).collect())
            }
            _ => Err(OpError::new(
                ErrorClass::Other,
                Outcome::Fail,
                format!("{of:?} is not read on {}", self.dialect().name()),
            )),
        }
    }
}

/// PostgreSQL: reads the namespace identity's backends' lock waits at one instant
/// (`stats.sql` `lock_waits`), on the configured account's pool; cloned into a sampling
/// task of its own while the load runs.
#[derive(Clone, Debug)]
pub struct LockProbe {
    admin: PgPool,
    user: String,
}

impl LockProbe {
    /// `waiting` (backends waiting on a heavyweight lock), `active`, `visible` (1 when
    /// this account can see other users' wait events).
    pub async fn read(&self) -> Result<Readings, OpError> {
        let sql = statement(stats(Dialect::Postgres).expect("postgres stats.sql"), "lock_waits");
        let q = sqlx::query_as(sql).bind(&self.user);
        q.fetch_all(&self.admin).await.map_err(|e| classify(Dialect::Postgres, e))
    }
}

impl Namespace {
    /// The lock-wait probe of a PostgreSQL namespace with its own identity (Err: why none:
    /// another server, or the identity is the configured account's, whose other sessions
    /// would count too).
    pub fn lock_probe(&self) -> Result<LockProbe, String> {
        let Home::Pg(admin) = &self.home else { return Err("not PostgreSQL".into()) };
        match &self.identity {
            Identity::Own { name, .. } => Ok(LockProbe { admin: admin.clone(), user: name.clone() }),
            _ => Err("the namespace has no identity of its own: its backends cannot be told apart".into()),
        }
    }

    /// PostgreSQL: the namespace identity's statements in `pg_stat_statements` (`stats.sql`
    /// `statements`): (queryid, the statement's text, counter, value) rows. Err where the
    /// extension is loaded but not created in the database, or the namespace has no
    /// identity of its own.
    pub async fn statements(&self) -> Result<Vec<(String, String, String, i64)>, OpError> {
        let probe = self.lock_probe().map_err(|e| OpError::new(ErrorClass::Other, Outcome::Fail, e))?;
        let sql = statement(stats(Dialect::Postgres).expect("postgres stats.sql"), "statements");
        let q = sqlx::query_as(sql).bind(&probe.user);
        q.fetch_all(&probe.admin).await.map_err(|e| classify(Dialect::Postgres, e))
    }

    /// PostgreSQL: whether `pg_stat_statements` is loaded (`shared_preload_libraries`);
    /// None on another server.
    pub async fn statements_loaded(&self) -> Option<Result<bool, OpError>> {
        let Home::Pg(admin) = &self.home else { return None };
        let sql = statement(stats(Dialect::Postgres).expect("postgres stats.sql"), "statements_loaded");
        let q = sqlx::query_scalar::<_, i64>(sql).fetch_one(admin).await;
        Some(q.map(|n| n == 1).map_err(|e| classify(Dialect::Postgres, e)))
    }
}

/// How long `pg_flush` waits for the pool's connections to come back idle (sqlx returns
/// a connection to the pool from a task of its own, after a ping).
const IDLE_WAIT: Duration = Duration::from_secs(2);

/// Runs the statistics flush on every connection of `pool` once all are idle (bounded by
/// `IDLE_WAIT`), held together, so each is a different one; the number flushed.
async fn pg_flush(pool: &PgPool) -> Result<u32, OpError> {
    let flush = statement(stats(Dialect::Postgres).expect("postgres stats.sql"), "flush");
    let started = Instant::now();
    while pool.num_idle() < pool.size() as usize && started.elapsed() < IDLE_WAIT {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut held = Vec::new();
    while held.len() < pool.options().get_max_connections() as usize {
        let Some(c) = pool.try_acquire() else { break };
        held.push(c);
    }
    for c in held.iter_mut() {
        sqlx::query(flush).execute(&mut **c).await.map_err(|e| classify(Dialect::Postgres, e))?;
    }
    Ok(held.len() as u32)
}
