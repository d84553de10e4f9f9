//! The final check on MariaDB/MySQL and SQLite as two streams in user order merged here:
//! the counters by primary key and the truth grouped along the unread rows' index, each a
//! plan with no sort and no temporary table. One statement joining them costs more on
//! both: MariaDB plans every shape 7-12x the bare truth query at 10M rows
//! (reports/2026-12-02-memory-and-check); SQLite's UNION of user ids, materialized truth
//! and ORDER BY build three temporary b-trees over every row (reports/2026-12-06-parity).
//! The truth stream gets a connection of its own, so a one-connection pool cannot
//! deadlock. The two reads see one state only while nothing writes: the load has stopped
//! and settle ended; on SQLite a write between them is detected (`PRAGMA data_version`)
//! and fails the check rather than judge two states as one.

use futures_util::{Stream, TryStreamExt};
use sqlx::{ConnectOptions, MySqlPool, SqlitePool};

use counterlab_core::{CheckInput, ErrorClass, OpError, Outcome};

use super::Namespace;
use crate::db::Dialect;
use crate::sqlfile::{common, statement};

impl Namespace {
    /// MariaDB/MySQL: both connections with the user's time bound lifted for the phase.
    pub(super) async fn merge_mysql(
        &self,
        pool: &MySqlPool,
        f: impl FnMut(CheckInput) -> Result<(), String>,
    ) -> Result<(), OpError> {
        let err = |e| crate::db::classify(Dialect::Mysql, e);
        let file = common(Dialect::Mysql);
        let bound = pool.options().get_acquire_timeout();
        let mut own = self.own_connection(bound, pool.connect_options().connect()).await?;
        self.mysql_lift(&mut own, true).await.map_err(err)?;
        // Its own lease, closed after (not returned with the bound lifted).
        let mut lease = pool.acquire().await.map_err(err)?;
        lease.close_on_drop();
        self.mysql_lift(&mut lease, true).await.map_err(err)?;
        let truth = sqlx::query_as::<_, (i64, i64)>(statement(file, "check_truth")).fetch(&mut own);
        let counts = sqlx::query_as::<_, (i64, i64)>(statement(file, "check_counts")).fetch(&mut *lease);
        self.merge(counts, truth, err, f).await
    }

    /// SQLite: the counters over a pooled connection, the truth over a connection of its
    /// own with the pool's options and hooks (its statements bound like the pool's, raised
    /// for the phase by the caller), closed after. `PRAGMA data_version` on it before and
    /// after: another connection's commit in between fails the check.
    pub(super) async fn merge_sqlite(
        &self,
        pool: &SqlitePool,
        f: impl FnMut(CheckInput) -> Result<(), String>,
    ) -> Result<(), OpError> {
        let err = |e| crate::db::classify(Dialect::Sqlite, e);
        let file = common(Dialect::Sqlite);
        let bound = pool.options().get_acquire_timeout();
        let mut own = self.own_connection(bound, pool.connect_options().connect()).await?;
        self.lite_hooks(bound / 2).install(&mut own, false).await.map_err(err)?;
        let before = data_version(&mut own).await.map_err(err)?;
        let mut lease = pool.acquire().await.map_err(err)?;
        let truth = sqlx::query_as::<_, (i64, i64)>(statement(file, "check_truth")).fetch(&mut own);
        let counts = sqlx::query_as::<_, (i64, i64)>(statement(file, "check_counts")).fetch(&mut *lease);
        self.merge(counts, truth, err, f).await?;
        match data_version(&mut own).await.map_err(err)? {
            after if after == before => Ok(()),
            _ => Err(OpError::new(
                ErrorClass::Other,
                Outcome::Fail,
                format!("{}: the database changed while the check read it (a write after settle)", self.name),
            )),
        }
    }

    /// A connection opened outside the pool, within `bound`.
    async fn own_connection<C>(
        &self,
        bound: std::time::Duration,
        connect: impl Future<Output = Result<C, sqlx::Error>>,
    ) -> Result<C, OpError> {
        match tokio::time::timeout(bound, connect).await {
            Ok(c) => c.map_err(|e| crate::db::classify(self.dialect(), e)),
            Err(_) => {
                let m = format!("{}: no connection for the check within {} ms", self.name, bound.as_millis());
                Err(OpError::new(ErrorClass::Timeout, Outcome::Fail, m))
            }
        }
    }

    /// Merges `(user, unread)` counter rows and `(user, unread rows)` truth rows, both in
    /// user order, into one `CheckInput` a user for `f` (no counter row: None; no unread
    /// row: truth 0). An error from `f` stops the merge and names the namespace.
    async fn merge<E>(
        &self,
        mut counts: impl Stream<Item = Result<(i64, i64), E>> + Unpin,
        mut truth: impl Stream<Item = Result<(i64, i64), E>> + Unpin,
        err: impl Fn(E) -> OpError,
        mut f: impl FnMut(CheckInput) -> Result<(), String>,
    ) -> Result<(), OpError> {
        let (mut c, mut t) = (counts.try_next().await.map_err(&err)?, truth.try_next().await.map_err(&err)?);
        loop {
            let row = match (c, t) {
                (None, None) => return Ok(()),
                (Some((cu, unread)), Some((tu, n))) if cu == tu => {
                    (c, t) = (counts.try_next().await.map_err(&err)?, truth.try_next().await.map_err(&err)?);
                    CheckInput { user: cu, counter: Some(unread), truth: n }
                }
                (Some((cu, unread)), Some((tu, _))) if cu < tu => {
                    c = counts.try_next().await.map_err(&err)?;
                    CheckInput { user: cu, counter: Some(unread), truth: 0 }
                }
                (_, Some((tu, n))) => {
                    t = truth.try_next().await.map_err(&err)?;
                    CheckInput { user: tu, counter: None, truth: n }
                }
                (Some((cu, unread)), None) => {
                    c = counts.try_next().await.map_err(&err)?;
                    CheckInput { user: cu, counter: Some(unread), truth: 0 }
                }
            };
            f(row).map_err(|m| OpError::new(ErrorClass::Other, Outcome::Fail, format!("{}: {m}", self.name)))?;
        }
    }
}

/// SQLite's count of commits by other connections, as this one last saw it (each read of
/// it starts a read of the file: it is current).
async fn data_version(conn: &mut sqlx::SqliteConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("PRAGMA data_version").fetch_one(conn).await
}
