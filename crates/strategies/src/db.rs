//! One small interface over the three sqlx drivers, so each strategy is written once and
//! runs on PostgreSQL, MySQL/MariaDB and SQLite; only the SQL files differ per dialect.
//! Every argument is an `i64` (user ids, notification ids, counts), bound, never spliced.

use counterlab_core::{ErrorClass, OpError, Outcome};
use sqlx::{Database, MySql, MySqlPool, PgPool, Postgres, Sqlite, SqlitePool};
use sqlx_core::transaction::TransactionManager as _;

use crate::gate::{self, spliced};
use crate::held::{self, Conn, Lease, Take};

pub use counterlab_core::{Dialect, Isolation};

/// A namespace's connection pool, whichever the driver.
#[derive(Clone, Debug)]
pub enum Db {
    Pg(PgPool),
    My(MySqlPool),
    Lite(SqlitePool),
}

/// An open transaction on one connection (the worker's own, or the pool's), begun and
/// ended through sqlx's `TransactionManager` as `sqlx::Transaction` does, so that the
/// connection can go back to the worker's slot after the commit. Dropped open, it queues
/// a ROLLBACK (sent with whatever the connection does next) and goes to the pool.
pub struct Tx {
    lease: Lease,
    open: bool,
}

/// How a transaction starts. `Locking` matters only on SQLite, which has no row locks:
/// there it is `BEGIN IMMEDIATE`, taking the write lock up front.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Begin {
    Plain,
    Locking,
}

fn bind_all<'q, DB>(
    mut q: sqlx::query::Query<'q, DB, <DB as Database>::Arguments>,
    args: &[i64],
) -> sqlx::query::Query<'q, DB, <DB as Database>::Arguments>
where
    DB: Database,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for a in args {
        q = q.bind(*a);
    }
    q
}

fn bind_scalar<'q, DB, O>(
    mut q: sqlx::query::QueryScalar<'q, DB, O, <DB as Database>::Arguments>,
    args: &[i64],
) -> sqlx::query::QueryScalar<'q, DB, O, <DB as Database>::Arguments>
where
    DB: Database,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for a in args {
        q = q.bind(*a);
    }
    q
}

fn bind_as<'q, DB, O>(
    mut q: sqlx::query::QueryAs<'q, DB, O, <DB as Database>::Arguments>,
    args: &[i64],
) -> sqlx::query::QueryAs<'q, DB, O, <DB as Database>::Arguments>
where
    DB: Database,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for a in args {
        q = q.bind(*a);
    }
    q
}

/// Runs the same expression for whichever driver `$self` holds, with `$c` the inner value.
macro_rules! each {
    ($self:expr, $c:ident => $body:expr) => {
        match $self {
            Self::Pg($c) => $body.map_err(|e| classify(Dialect::Postgres, e)),
            Self::My($c) => $body.map_err(|e| classify(Dialect::Mysql, e)),
            Self::Lite($c) => $body.map_err(|e| classify(Dialect::Sqlite, e)),
        }
    };
}

/// `each!` over a lease's connection: `$c` is `&mut PoolConnection<_>`.
macro_rules! each_conn {
    ($conn:expr, $c:ident => $body:expr) => {
        match $conn {
            Conn::Pg($c) => $body.map_err(|e| classify(Dialect::Postgres, e)),
            Conn::My($c) => $body.map_err(|e| classify(Dialect::Mysql, e)),
            Conn::Lite($c) => $body.map_err(|e| classify(Dialect::Sqlite, e)),
        }
    };
}

/// The driver's transaction manager, as `sqlx::Transaction` drives it.
async fn tm_begin<DB: Database>(c: &mut DB::Connection, sql: Option<sqlx::SqlStr>) -> Result<(), sqlx::Error> {
    DB::TransactionManager::begin(c, sql).await
}

async fn tm_commit<DB: Database>(c: &mut DB::Connection) -> Result<(), sqlx::Error> {
    DB::TransactionManager::commit(c).await
}

fn tm_start_rollback<DB: Database>(c: &mut DB::Connection) {
    DB::TransactionManager::start_rollback(c)
}

impl Db {
    pub fn dialect(&self) -> Dialect {
        match self {
            Db::Pg(_) => Dialect::Postgres,
            Db::My(_) => Dialect::Mysql,
            Db::Lite(_) => Dialect::Sqlite,
        }
    }

    /// Closes the pool's idle connections, so the next op opens fresh ones: after a lost
    /// connection (a server restart, a terminated backend) every idle one is likely dead
    /// too, and the pool does not test them on acquire. At most the pool's size.
    pub async fn drop_idle(&self) {
        async fn drain<D: Database>(p: &sqlx::Pool<D>) {
            for _ in 0..p.options().get_max_connections() {
                let Some(c) = p.try_acquire() else { return };
                c.close().await.ok();
            }
        }
        match self {
            Db::Pg(p) => drain(p).await,
            Db::My(p) => drain(p).await,
            Db::Lite(p) => drain(p).await,
        }
    }

    /// This pool's identity: the address of its options, inside the pool's shared state.
    fn key(&self) -> usize {
        match self {
            Db::Pg(p) => p.options() as *const _ as usize,
            Db::My(p) => p.options() as *const _ as usize,
            Db::Lite(p) => p.options() as *const _ as usize,
        }
    }

    /// The most connections the pool opens.
    pub fn max_connections(&self) -> u32 {
        match self {
            Db::Pg(p) => p.options().get_max_connections(),
            Db::My(p) => p.options().get_max_connections(),
            Db::Lite(p) => p.options().get_max_connections(),
        }
    }

    /// Opens up to `n` of the pool's connections (no more than it may hold) and leaves
    /// them idle in it, as pgbench connects its clients before its clock starts: the
    /// load's first ops then pay no connection set-up (TCP, TLS, login). Best effort: a
    /// connection that fails here is the load's to meet.
    pub async fn warm(&self, n: u32) {
        let n = n.min(self.max_connections());
        let conns = futures_util::future::join_all((0..n).map(|_| self.acquire())).await;
        drop(conns);
    }

    async fn acquire(&self) -> Result<Conn, OpError> {
        match self {
            Db::Pg(p) => p.acquire().await.map(Conn::Pg).map_err(|e| classify(Dialect::Postgres, e)),
            Db::My(p) => p.acquire().await.map(Conn::My).map_err(|e| classify(Dialect::Mysql, e)),
            Db::Lite(p) => p.acquire().await.map(Conn::Lite).map_err(|e| classify(Dialect::Sqlite, e)),
        }
    }

    /// A connection for one op: inside a worker's scope (`held::hold`) the worker's own,
    /// else the pool's.
    async fn lease(&self) -> Result<Lease, OpError> {
        let key = self.key();
        match held::take(key) {
            Take::Held(c) => Ok(Lease::held(key, c)),
            // sqlx's acquire is a 4 KB future: boxed where it is taken, so a worker's op
            // on its held connection does not carry it.
            Take::Claim => {
                let mut lease = Lease::claim(key);
                lease.fill(Box::pin(self.acquire()).await?);
                Ok(lease)
            }
            Take::Pool => Ok(Lease::pooled(Box::pin(self.acquire()).await?)),
        }
    }

    pub async fn begin(&self, how: Begin) -> Result<Tx, OpError> {
        let label =
            || if how == Begin::Locking && self.dialect() == Dialect::Sqlite { "BEGIN IMMEDIATE" } else { "BEGIN" };
        gate::step(|| label().to_string(), |_| "ok".to_string(), self.begin_ungated(how)).await
    }

    async fn begin_ungated(&self, how: Begin) -> Result<Tx, OpError> {
        // Open from the start, as in `sqlx::Transaction::begin`: a BEGIN cut off still
        // gets its rollback queued.
        let mut tx = Tx { lease: self.lease().await?, open: true };
        match tx.lease.conn() {
            Conn::Pg(c) => tm_begin::<Postgres>(&mut **c, None).await.map_err(|e| classify(Dialect::Postgres, e))?,
            Conn::My(c) => tm_begin::<MySql>(&mut **c, None).await.map_err(|e| classify(Dialect::Mysql, e))?,
            Conn::Lite(c) => {
                let sql = (how == Begin::Locking).then(|| sqlx::SqlStr::from_static("BEGIN IMMEDIATE"));
                tm_begin::<Sqlite>(&mut **c, sql).await.map_err(|e| classify(Dialect::Sqlite, e))?
            }
        }
        Ok(tx)
    }

    /// One statement outside a transaction (autocommit), returning an optional integer:
    /// a single-statement op (no BEGIN, no COMMIT) or a read.
    pub async fn opt_i64(&self, sql: &'static str, args: &[i64]) -> Result<Option<i64>, OpError> {
        gate::step(|| spliced(sql, args), show_opt, async {
            let mut lease = self.lease().await?;
            let r = each_conn!(lease.conn(), c => bind_scalar(sqlx::query_scalar(sql), args).fetch_optional(&mut **c).await);
            lease.clean = r.is_ok();
            r
        })
        .await
    }

    /// All rows of a query as tuples (or any `FromRow` type), outside a transaction.
    pub async fn rows<O>(&self, sql: &'static str, args: &[i64]) -> Result<Vec<O>, OpError>
    where
        O: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
            + for<'r> sqlx::FromRow<'r, sqlx::mysql::MySqlRow>
            + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
            + Send
            + Unpin,
    {
        gate::step(|| spliced(sql, args), |v: &Vec<O>| format!("{} rows", v.len()), async {
            each!(self, p => bind_as(sqlx::query_as(sql), args).fetch_all(p).await)
        })
        .await
    }

    /// Streams `sql`'s (i64, i64) rows (no arguments) into `f` as they arrive, so a
    /// result of one row per user is never held whole.
    pub async fn each_row(&self, sql: &'static str, mut f: impl FnMut(i64, i64)) -> Result<(), OpError> {
        use futures_util::TryStreamExt;
        each!(self, p => async {
            let mut rows = sqlx::query_as::<_, (i64, i64)>(sql).fetch(p);
            while let Some((a, b)) = rows.try_next().await? {
                f(a, b);
            }
            Ok::<(), sqlx::Error>(())
        }
        .await)
    }

    /// Has the server prepare `sql` with `n_args` integer parameters (as ops bind them)
    /// without running it: a missing table or column, a syntax error or a missing right is
    /// an error now, not a run whose every op fails.
    pub async fn prepare(&self, sql: &'static str, n_args: usize) -> Result<(), OpError> {
        use sqlx::{Executor as _, SqlStr};
        let sql = SqlStr::from_static(sql);
        match self {
            Db::Pg(p) => {
                let types = vec![<i64 as sqlx::Type<Postgres>>::type_info(); n_args];
                p.prepare_with(sql, &types).await.map(|_| ()).map_err(|e| classify(Dialect::Postgres, e))
            }
            Db::My(p) => p.prepare(sql).await.map(|_| ()).map_err(|e| classify(Dialect::Mysql, e)),
            Db::Lite(p) => p.prepare(sql).await.map(|_| ()).map_err(|e| classify(Dialect::Sqlite, e)),
        }
    }

    /// In an explorer's session, after an op that failed: sends the rollback its
    /// transaction left queued on the session's connection (with a no-op statement) as a
    /// step of its own, so the locks it held go when the schedule says.
    pub async fn flush_rollback(&self) -> Result<(), OpError> {
        gate::step(|| "ROLLBACK".to_string(), |_| "ok".to_string(), async {
            let mut lease = self.lease().await?;
            let r = each_conn!(lease.conn(), c => sqlx::query("SELECT 1").execute(&mut **c).await.map(|_| ()));
            lease.clean = r.is_ok();
            r
        })
        .await
    }

    pub async fn close(&self) {
        match self {
            Db::Pg(p) => p.close().await,
            Db::My(p) => p.close().await,
            Db::Lite(p) => p.close().await,
        }
    }
}

impl Tx {
    /// Executes a statement; returns rows affected as the driver reports them.
    pub async fn exec(&mut self, sql: &'static str, args: &[i64]) -> Result<u64, OpError> {
        gate::step(|| spliced(sql, args), |n| format!("{n} rows"), async {
            each_conn!(self.lease.conn(), t => bind_all(sqlx::query(sql), args).execute(&mut **t).await.map(|r| r.rows_affected()))
        })
        .await
    }

    /// Runs an INSERT and returns the new row's id (RETURNING on PostgreSQL and SQLite,
    /// last_insert_id on MySQL, which has no INSERT ... RETURNING).
    pub async fn insert_id(&mut self, sql: &'static str, args: &[i64]) -> Result<i64, OpError> {
        gate::step(|| spliced(sql, args), |id| format!("id {id}"), self.insert_id_ungated(sql, args)).await
    }

    async fn insert_id_ungated(&mut self, sql: &'static str, args: &[i64]) -> Result<i64, OpError> {
        match self.lease.conn() {
            Conn::Pg(t) => bind_scalar(sqlx::query_scalar(sql), args)
                .fetch_one(&mut **t)
                .await
                .map_err(|e| classify(Dialect::Postgres, e)),
            Conn::My(t) => bind_all(sqlx::query(sql), args)
                .execute(&mut **t)
                .await
                .map(|r| r.last_insert_id() as i64)
                .map_err(|e| classify(Dialect::Mysql, e)),
            Conn::Lite(t) => bind_scalar(sqlx::query_scalar(sql), args)
                .fetch_one(&mut **t)
                .await
                .map_err(|e| classify(Dialect::Sqlite, e)),
        }
    }

    /// Executes a statement; returns (rows affected, the last inserted id where the
    /// driver reports one: MySQL and SQLite; 0 on PostgreSQL, which uses RETURNING).
    pub async fn exec_full(&mut self, sql: &'static str, args: &[i64]) -> Result<(u64, i64), OpError> {
        gate::step(|| spliced(sql, args), |(n, _)| format!("{n} rows"), self.exec_full_ungated(sql, args)).await
    }

    async fn exec_full_ungated(&mut self, sql: &'static str, args: &[i64]) -> Result<(u64, i64), OpError> {
        match self.lease.conn() {
            Conn::Pg(t) => bind_all(sqlx::query(sql), args)
                .execute(&mut **t)
                .await
                .map(|r| (r.rows_affected(), 0))
                .map_err(|e| classify(Dialect::Postgres, e)),
            Conn::My(t) => bind_all(sqlx::query(sql), args)
                .execute(&mut **t)
                .await
                .map(|r| (r.rows_affected(), r.last_insert_id() as i64))
                .map_err(|e| classify(Dialect::Mysql, e)),
            Conn::Lite(t) => bind_all(sqlx::query(sql), args)
                .execute(&mut **t)
                .await
                .map(|r| (r.rows_affected(), r.last_insert_rowid()))
                .map_err(|e| classify(Dialect::Sqlite, e)),
        }
    }

    /// The first row of a query, its first `n` columns read as integers (booleans as
    /// 0/1, NULL as 0); None when there is no row.
    pub async fn row_i64(&mut self, sql: &'static str, args: &[i64], n: usize) -> Result<Option<Vec<i64>>, OpError> {
        let show = |r: &Option<Vec<i64>>| match r {
            Some(v) => format!("{v:?}"),
            None => "no row".to_string(),
        };
        gate::step(|| spliced(sql, args), show, self.row_i64_ungated(sql, args, n)).await
    }

    async fn row_i64_ungated(
        &mut self,
        sql: &'static str,
        args: &[i64],
        n: usize,
    ) -> Result<Option<Vec<i64>>, OpError> {
        macro_rules! decode {
            ($row:expr, $d:expr) => {{
                use sqlx::Row as _;
                let mut v = Vec::with_capacity(n);
                for i in 0..n {
                    let x = match $row.try_get::<Option<i64>, _>(i) {
                        Ok(x) => x.unwrap_or(0),
                        Err(_) => match $row.try_get::<Option<bool>, _>(i) {
                            Ok(b) => b.unwrap_or(false) as i64,
                            Err(_) => {
                                $row.try_get::<Option<i32>, _>(i)
                                    .map_err(|e| {
                                        // The statement ran; the transaction rolls back.
                                        OpError::new(
                                            ErrorClass::Other,
                                            Outcome::Fail,
                                            format!("{}: column {i} is not an integer ({e}); CAST it", $d.name()),
                                        )
                                    })?
                                    .unwrap_or(0) as i64
                            }
                        },
                    };
                    v.push(x);
                }
                v
            }};
        }
        Ok(match self.lease.conn() {
            Conn::Pg(t) => {
                let row = bind_all(sqlx::query(sql), args)
                    .fetch_optional(&mut **t)
                    .await
                    .map_err(|e| classify(Dialect::Postgres, e))?;
                match row {
                    Some(r) => Some(decode!(r, Dialect::Postgres)),
                    None => None,
                }
            }
            Conn::My(t) => {
                let row = bind_all(sqlx::query(sql), args)
                    .fetch_optional(&mut **t)
                    .await
                    .map_err(|e| classify(Dialect::Mysql, e))?;
                match row {
                    Some(r) => Some(decode!(r, Dialect::Mysql)),
                    None => None,
                }
            }
            Conn::Lite(t) => {
                let row = bind_all(sqlx::query(sql), args)
                    .fetch_optional(&mut **t)
                    .await
                    .map_err(|e| classify(Dialect::Sqlite, e))?;
                match row {
                    Some(r) => Some(decode!(r, Dialect::Sqlite)),
                    None => None,
                }
            }
        })
    }

    pub async fn opt_bool(&mut self, sql: &'static str, args: &[i64]) -> Result<Option<bool>, OpError> {
        let show = |b: &Option<bool>| b.map_or("no row".to_string(), |b| b.to_string());
        gate::step(|| spliced(sql, args), show, async {
            each_conn!(self.lease.conn(), t => bind_scalar(sqlx::query_scalar(sql), args).fetch_optional(&mut **t).await)
        })
        .await
    }

    pub async fn all_i64(&mut self, sql: &'static str, args: &[i64]) -> Result<Vec<i64>, OpError> {
        gate::step(|| spliced(sql, args), |v: &Vec<i64>| format!("{v:?}"), async {
            each_conn!(self.lease.conn(), t => bind_scalar(sqlx::query_scalar(sql), args).fetch_all(&mut **t).await)
        })
        .await
    }

    pub async fn commit(self) -> Result<(), OpError> {
        gate::step(|| "COMMIT".to_string(), |_| "ok".to_string(), self.commit_ungated()).await
    }

    async fn commit_ungated(mut self) -> Result<(), OpError> {
        match self.lease.conn() {
            Conn::Pg(c) => tm_commit::<Postgres>(&mut **c).await.map_err(|e| classify(Dialect::Postgres, e))?,
            Conn::My(c) => tm_commit::<MySql>(&mut **c).await.map_err(|e| classify(Dialect::Mysql, e))?,
            Conn::Lite(c) => tm_commit::<Sqlite>(&mut **c).await.map_err(|e| classify(Dialect::Sqlite, e))?,
        }
        self.open = false;
        self.lease.clean = true;
        Ok(())
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        if self.open {
            match self.lease.conn() {
                Conn::Pg(c) => tm_start_rollback::<Postgres>(&mut **c),
                Conn::My(c) => tm_start_rollback::<MySql>(&mut **c),
                Conn::Lite(c) => tm_start_rollback::<Sqlite>(&mut **c),
            }
        }
    }
}

/// What an optional scalar came back as, for the explorer's script.
fn show_opt(v: &Option<i64>) -> String {
    v.map_or("no row".to_string(), |v| v.to_string())
}

/// Classifies a driver error. Errors the server reported mean the statement (and, for
/// the retryable classes, the transaction) did not take effect: `fail`. Errors on the
/// wire may have struck after the commit: `unknown`.
pub fn classify(dialect: Dialect, e: sqlx::Error) -> OpError {
    use sqlx::Error as E;
    let (class, outcome) = match &e {
        E::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            match dialect {
                Dialect::Postgres => match code.as_str() {
                    "40001" => (ErrorClass::Serialization, Outcome::Fail),
                    "40P01" => (ErrorClass::Deadlock, Outcome::Fail),
                    "55P03" => (ErrorClass::LockTimeout, Outcome::Fail),
                    "57014" => (ErrorClass::Timeout, Outcome::Fail),
                    "42501" => (ErrorClass::Permission, Outcome::Fail),
                    // No connection slot (for the server or the role): nothing ran, and
                    // a slot may free up, so it is retried like a lost connection.
                    "53300" => (ErrorClass::Connection, Outcome::Fail),
                    c if c.starts_with("08") || c.starts_with("57P") => (ErrorClass::Connection, Outcome::Unknown),
                    _ => (ErrorClass::Other, Outcome::Fail),
                },
                Dialect::Mysql => {
                    let number = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>().map(|m| m.number());
                    match number {
                        Some(1213) => (ErrorClass::Deadlock, Outcome::Fail),
                        Some(1205) => (ErrorClass::LockTimeout, Outcome::Fail),
                        Some(1020) => (ErrorClass::Serialization, Outcome::Fail),
                        Some(2006) | Some(2013) => (ErrorClass::Connection, Outcome::Unknown),
                        // Too many connections (server, user): nothing ran.
                        Some(1040 | 1203) => (ErrorClass::Connection, Outcome::Fail),
                        // Access denied: database, table, column, a global privilege, a routine.
                        Some(1044 | 1045 | 1142 | 1143 | 1227 | 1370) => (ErrorClass::Permission, Outcome::Fail),
                        _ => (ErrorClass::Other, Outcome::Fail),
                    }
                }
                Dialect::Sqlite => match code.parse::<u32>().map(|c| c & 0xff) {
                    // SQLITE_BUSY (and BUSY_SNAPSHOT etc.), SQLITE_LOCKED
                    Ok(5) | Ok(6) => (ErrorClass::Busy, Outcome::Fail),
                    // SQLITE_AUTH, or a statement the authorizer refused while it was
                    // prepared (SQLite reports that as SQLITE_ERROR "not authorized").
                    Ok(23) => (ErrorClass::Permission, Outcome::Fail),
                    Ok(1) if db.message().contains("not authorized") => (ErrorClass::Permission, Outcome::Fail),
                    _ => (ErrorClass::Other, Outcome::Fail),
                },
            }
        }
        E::PoolTimedOut => (ErrorClass::Timeout, Outcome::Fail),
        E::PoolClosed => (ErrorClass::Connection, Outcome::Fail),
        E::Io(_) | E::Tls(_) | E::Protocol(_) | E::WorkerCrashed => (ErrorClass::Connection, Outcome::Unknown),
        _ => (ErrorClass::Other, Outcome::Unknown),
    };
    OpError::new(class, outcome, format!("{}: {e}", dialect.name()))
}

#[cfg(test)]
mod future_size {
    use super::*;

    /// Every op's future is boxed once per op (the Strategy trait is object safe), and the
    /// box copies the whole future: a transaction's BEGIN, statement and COMMIT made a
    /// 15 960 B future (the step gate carried each call twice, and sqlx's 4 KB acquire was
    /// inlined though a worker's held connection never acquires), 5% of a PostgreSQL run's
    /// CPU in memmove. Now 624 B.
    #[tokio::test]
    async fn a_transaction_future_stays_small() {
        let db = Db::Pg(sqlx::postgres::PgPoolOptions::new().connect_lazy("postgres://x@127.0.0.1:1/x").unwrap());
        let op = async {
            let mut tx = db.begin(Begin::Plain).await?;
            let n = tx.exec("SELECT 1", &[1, 2]).await?;
            tx.commit().await?;
            Ok::<u64, OpError>(n)
        };
        let size = std::mem::size_of_val(&op);
        assert!(size <= 2048, "a BEGIN, a statement and a COMMIT take a {size} B future");
    }
}
