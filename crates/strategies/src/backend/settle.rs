//! Settling the server after the seed, before the measured load, so the load does not pay
//! for writing the seed's dirty pages: PostgreSQL `CHECKPOINT`, MariaDB/MySQL `FLUSH
//! TABLES ... FOR EXPORT` of the namespace's tables (InnoDB writes their dirty pages and
//! purges their history), SQLite `PRAGMA wal_checkpoint(TRUNCATE)`.

use std::time::{Duration, Instant};

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AssertSqlSafe, Connection, Executor};

use super::{Home, Namespace};

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
                // own, closed afterwards, so no lock can outlive this call.
                let mut conn = admin.acquire().await?.detach();
                let ns = &self.name;
                let flush = format!("FLUSH TABLES `{ns}`.`notifications`, `{ns}`.`unread_counts` FOR EXPORT");
                let flushed = conn.execute(AssertSqlSafe(flush)).await;
                let unlocked = conn.execute("UNLOCK TABLES").await;
                conn.close().await.ok();
                flushed?;
                unlocked?;
                Ok("FLUSH TABLES ... FOR EXPORT")
            }
            Home::Lite(path) => {
                // The tool's own connection: the namespace's refuses every PRAGMA.
                let mut conn =
                    sqlx::SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(path)).await?;
                let done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").await;
                conn.close().await.ok();
                done?;
                Ok("WAL checkpoint (TRUNCATE)")
            }
        }
    }
}
