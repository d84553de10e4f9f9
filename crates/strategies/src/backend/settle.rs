//! Settling the server after the seed, before the measured load, so the load does not pay
//! for writing the seed's dirty pages: PostgreSQL `CHECKPOINT`, MariaDB/MySQL `FLUSH
//! TABLES ... FOR EXPORT` of the namespace's tables (InnoDB writes their dirty pages and
//! purges their history), SQLite `PRAGMA wal_checkpoint(TRUNCATE)`.

use std::time::{Duration, Instant};

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AssertSqlSafe, Connection, Executor};

use super::{Home, Namespace};

/// MariaDB/MySQL: how long the flush waits for another session's lock on the tables.
const SETTLE_LOCK_WAIT_S: u64 = 10;

impl Namespace {
    /// Settles the server (see the module), within `bound`. Ok: what was done and how long
    /// it took, for the report; Err: why it was not (the load runs anyway).
    pub async fn settle_after_seed(&self, bound: Duration) -> Result<String, String> {
        let started = Instant::now();
        let what = match tokio::time::timeout(bound, self.settle_statement()).await {
            Ok(r) => r.map_err(|e| format!("not settled after the seed: {e}"))?,
            Err(_) => {
                return Err(format!("not settled after the seed: over its bound of {:.0} s", bound.as_secs_f64()));
            }
        };
        Ok(format!("{what} after the seed ({:.2} s)", started.elapsed().as_secs_f64()))
    }

    async fn settle_statement(&self) -> Result<&'static str, sqlx::Error> {
        match &self.home {
            Home::Pg(admin) => {
                admin.execute("CHECKPOINT").await?;
                Ok("CHECKPOINT")
            }
            Home::My(admin) => {
                // FOR EXPORT holds a read lock until UNLOCK TABLES: on a connection of its
                // own, closed afterwards, so no lock can outlive this call; and it waits
                // for others' locks at most as long as the server allows this session
                // (else up to a year, holding back the load's writes after a timeout).
                let mut conn = admin.acquire().await?.detach();
                let ns = &self.name;
                let wait = format!("SET SESSION lock_wait_timeout = {}", SETTLE_LOCK_WAIT_S);
                let flush = format!("FLUSH TABLES `{ns}`.`notifications`, `{ns}`.`unread_counts` FOR EXPORT");
                let flushed = match conn.execute(AssertSqlSafe(wait)).await {
                    Ok(_) => conn.execute(AssertSqlSafe(flush)).await,
                    Err(e) => Err(e),
                };
                let unlocked = conn.execute("UNLOCK TABLES").await;
                conn.close().await.ok();
                flushed?;
                unlocked?;
                Ok("FLUSH TABLES ... FOR EXPORT")
            }
            Home::Lite(path) => {
                // The tool's own connection: the namespace's refuses every PRAGMA. A
                // checkpoint a reader blocks answers busy = 1 rather than an error.
                let mut conn =
                    sqlx::SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(path)).await?;
                let done: Result<(i64, i64, i64), _> =
                    sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)").fetch_one(&mut conn).await;
                conn.close().await.ok();
                match done? {
                    (0, log, copied) if log == copied => Ok("WAL checkpoint (TRUNCATE)"),
                    (busy, log, copied) => Err(sqlx::Error::Protocol(format!(
                        "the WAL checkpoint was blocked (busy {busy}, {copied} of {log} frames copied)"
                    ))),
                }
            }
        }
    }
}
