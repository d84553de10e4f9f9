//! Replica reads (`[replica] read_from`): a wrapper that serves `read_count` from a
//! PostgreSQL hot standby or a Redis replica (and, for `replica-fallback`, from the
//! strategy itself when the replica read fails), counting replica reads and fallbacks.

use counterlab_core::Figure;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use counterlab_core::{ErrorClass, Fault, NotificationId, OpError, Outcome, ReadFrom, Strategy, StrategyInfo, UserId};
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::db::{Db, Dialect};
use crate::error::{BackendError, redact_url};
use crate::redis::{RedisSpace, classify_redis};
use crate::sqlfile::{common, statement};

/// How a Redis design keeps the count a reader sees (the replica reads the same key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisLayout {
    /// `GET {u:<id>}:unread`.
    UserKey,
    /// `SCARD {u:<id>}:unread_ids`.
    SetCard,
    /// `ZSCORE {z}:unread <user>` (zset-replica-reads).
    ZsetScore,
}

/// Where replica reads go.
pub enum ReplicaReader {
    /// The namespace's `unread_counts` on the standby, as the namespace's role; `admin`
    /// the standby's URL as configured (for `replica_pause`).
    Sql { db: Db, read: &'static str, admin: String },
    /// The run's keys on the replica; `acl` the read-only ACL user made there (dropped at
    /// teardown); `admin` the configured account's client of the replica.
    Redis {
        conn: ConnectionManager,
        prefix: String,
        layout: RedisLayout,
        acl: Option<String>,
        admin: Box<redis::Client>,
    },
}

impl ReplicaReader {
    /// The standby's `unread_counts` read, over `db` (the namespace's pool on the
    /// standby: `Namespace::replica_db`).
    pub fn sql(db: Db, admin_url: &str) -> ReplicaReader {
        let read = statement(common(db.dialect()), "counter_read");
        ReplicaReader::Sql { db, read, admin: admin_url.to_string() }
    }

    /// Connects to the Redis replica at `url` as a read-only ACL user limited to the
    /// run's keys (made there: ACL users are per node), or as the configured account
    /// when that account may not make one.
    pub async fn redis(
        url: &str,
        space: &RedisSpace,
        layout: RedisLayout,
        timeout: Duration,
    ) -> Result<ReplicaReader, BackendError> {
        let err = |e: redis::RedisError| BackendError::Connect {
            backend: "redis replica",
            url: redact_url(url),
            source: e.to_string().into(),
        };
        let admin = redis::Client::open(url).map_err(err)?;
        let mut a = tokio::time::timeout(timeout, admin.get_multiplexed_async_connection())
            .await
            .map_err(|_| err(redis::RedisError::from((redis::ErrorKind::Io, "no answer in time"))))?
            .map_err(err)?;
        let prefix = space.prefix().to_string();
        let name = format!("{}r", space.namespace());
        let password = crate::sandbox::random_password();
        let rules = ["reset", "on", &format!(">{password}"), &format!("~{prefix}*"), "resetchannels", "-@all"];
        let made: Result<(), _> = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&name)
            .arg(&rules[..])
            .arg(&["+get", "+scard", "+zscore", "+ping", "+readonly"][..])
            .query_async(&mut a)
            .await;
        let (client, acl) = match made {
            Ok(()) => {
                let info = admin.get_connection_info().clone();
                let settings = info.redis_settings().clone().set_username(name.clone()).set_password(password.clone());
                let info = info.set_redis_settings(settings);
                (redis::Client::open(info).map_err(err)?, Some(name))
            }
            Err(_) => (admin.clone(), None),
        };
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(timeout))
            .set_connection_timeout(Some(timeout))
            .set_number_of_retries(1);
        let conn = ConnectionManager::new_with_config(client, config).await.map_err(err)?;
        Ok(ReplicaReader::Redis { conn, prefix, layout, acl, admin: Box::new(admin) })
    }

    async fn read(&self, user: UserId) -> Result<i64, OpError> {
        match self {
            ReplicaReader::Sql { db, read, .. } => Ok(db.opt_i64(read, &[user]).await?.unwrap_or(0)),
            ReplicaReader::Redis { conn, prefix, layout, .. } => {
                let mut c = conn.clone();
                let r = match layout {
                    RedisLayout::UserKey => c.get::<_, Option<i64>>(format!("{prefix}{{u:{user}}}:unread")).await,
                    RedisLayout::SetCard => {
                        c.scard::<_, i64>(format!("{prefix}{{u:{user}}}:unread_ids")).await.map(Some)
                    }
                    RedisLayout::ZsetScore => c
                        .zscore::<_, _, Option<f64>>(format!("{prefix}{{z}}:unread"), user)
                        .await
                        .map(|s| s.map(|s| s.round() as i64)),
                };
                r.map(|v| v.unwrap_or(0)).map_err(classify_redis)
            }
        }
    }

    /// Waits (within `bound`) until the replica has what the primary has now, so the
    /// load starts from a replica that holds the seed. `primary`: the namespace's pool on
    /// the primary (PostgreSQL) or the primary's admin client (Redis).
    pub async fn catch_up(&self, primary: &CatchUp, bound: Duration) -> Result<(), String> {
        let deadline = Instant::now() + bound;
        match (self, primary) {
            (ReplicaReader::Sql { db: Db::Pg(standby), .. }, CatchUp::Pg(Db::Pg(p))) => {
                let lsn: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
                    .fetch_one(p)
                    .await
                    .map_err(|e| e.to_string())?;
                while Instant::now() < deadline {
                    let done: Result<Option<bool>, _> =
                        sqlx::query_scalar("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn")
                            .bind(&lsn)
                            .fetch_one(standby)
                            .await;
                    if let Ok(Some(true)) = done {
                        return Ok(());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(format!("the standby did not replay up to {lsn} within {} ms", bound.as_millis()))
            }
            (ReplicaReader::Redis { .. }, CatchUp::Redis(client)) => {
                let mut c = client.get_multiplexed_async_connection().await.map_err(|e| e.to_string())?;
                let ms = bound.as_millis() as u64;
                let acked: i64 =
                    redis::cmd("WAIT").arg(1).arg(ms).query_async(&mut c).await.map_err(|e| e.to_string())?;
                if acked >= 1 { Ok(()) } else { Err(format!("no replica acknowledged the seed within {ms} ms")) }
            }
            _ => Err("the replica and the primary are of different kinds".into()),
        }
    }

    /// Closes the standby pool, or drops the replica's ACL user; called again it does
    /// nothing more than close again.
    pub async fn release(&self) -> Result<(), OpError> {
        match self {
            ReplicaReader::Sql { db, .. } => {
                db.close().await;
                Ok(())
            }
            ReplicaReader::Redis { acl: Some(name), admin, .. } => {
                let mut a = admin.get_multiplexed_async_connection().await.map_err(classify_redis)?;
                redis::cmd("ACL").arg("DELUSER").arg(name).query_async::<i64>(&mut a).await.map_err(classify_redis)?;
                Ok(())
            }
            ReplicaReader::Redis { acl: None, .. } => Ok(()),
        }
    }

    /// `replica_pause`: the replica stops applying the primary's changes (reads go on);
    /// `resume` ends it. Run as the configured account of the replica.
    async fn hold(&self, pause: Option<Duration>) -> Result<String, OpError> {
        let fail = |e: String| OpError::new(ErrorClass::Other, Outcome::Fail, format!("replica: {e}"));
        match self {
            ReplicaReader::Sql { admin: url, .. } => {
                let c = sqlx::PgPool::connect(url).await.map_err(|e| fail(e.to_string()))?;
                let sql =
                    if pause.is_some() { "SELECT pg_wal_replay_pause()" } else { "SELECT pg_wal_replay_resume()" };
                let done = sqlx::query(sql).execute(&c).await.map(|_| ()).map_err(|e| fail(e.to_string()));
                c.close().await;
                done.map(|()| "the standby's WAL replay paused".into())
            }
            ReplicaReader::Redis { admin, .. } => {
                let mut a = admin.get_multiplexed_async_connection().await.map_err(classify_redis)?;
                let cmd = match pause {
                    Some(d) => redis::cmd("CLIENT").arg("PAUSE").arg(d.as_millis() as u64).arg("WRITE").clone(),
                    None => redis::cmd("CLIENT").arg("UNPAUSE").clone(),
                };
                cmd.query_async::<()>(&mut a).await.map_err(classify_redis)?;
                Ok("the replica's replication stream held (CLIENT PAUSE WRITE)".into())
            }
        }
    }

    /// Who replica reads run as.
    pub fn describe(&self) -> String {
        match self {
            ReplicaReader::Sql { .. } => "the namespace's role on the standby".into(),
            ReplicaReader::Redis { acl: Some(name), .. } => format!("read-only ACL user {name} on the replica"),
            ReplicaReader::Redis { acl: None, .. } => "the configured account on the replica".into(),
        }
    }
}

/// The primary side of `ReplicaReader::catch_up`: the namespace's pool on the
/// PostgreSQL primary, or the configured account's client of the Redis primary.
pub enum CatchUp {
    Pg(Db),
    Redis(Box<redis::Client>),
}

/// How long settle waits for the replica to catch up, so reads after settle see the
/// primary's final state.
pub const CATCH_UP_BOUND: Duration = Duration::from_secs(10);

/// Whether `dialect`'s standby can serve reads here (PostgreSQL only).
pub fn sql_replica_supported(dialect: Dialect) -> bool {
    dialect == Dialect::Postgres
}

/// A strategy whose `read_count` goes to a replica (`Replica`), or to a replica with the
/// strategy's own read as fallback on error (`ReplicaFallback`); every other op is the
/// strategy's.
pub struct ReplicaReads {
    inner: Arc<dyn Strategy>,
    reader: Arc<ReplicaReader>,
    primary: CatchUp,
    mode: ReadFrom,
    replica_reads: AtomicU64,
    replica_errors: AtomicU64,
    fallbacks: AtomicU64,
}

impl ReplicaReads {
    /// Releases the replica side (see `ReplicaReader::release`).
    pub async fn release(&self) -> Result<(), OpError> {
        self.reader.release().await
    }

    pub fn describe(&self) -> String {
        self.reader.describe()
    }

    /// Waits until the replica holds what the primary holds now (see `ReplicaReader::catch_up`).
    pub async fn catch_up(&self, bound: Duration) -> Result<(), String> {
        self.reader.catch_up(&self.primary, bound).await
    }

    pub fn new(inner: Arc<dyn Strategy>, reader: ReplicaReader, primary: CatchUp, mode: ReadFrom) -> ReplicaReads {
        assert!(mode != ReadFrom::Primary, "primary reads need no wrapper");
        ReplicaReads {
            inner,
            reader: Arc::new(reader),
            primary,
            mode,
            replica_reads: AtomicU64::new(0),
            replica_errors: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
        }
    }
}

#[async_trait]
impl Strategy for ReplicaReads {
    fn info(&self) -> StrategyInfo {
        self.inner.info()
    }
    async fn worker_scope<'a>(&'a self, workers: u32, run: counterlab_core::WorkerLoop<'a>) {
        self.inner.worker_scope(workers, run).await
    }
    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        self.inner.create(user).await
    }
    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        self.inner.mark_read(user, id).await
    }
    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        self.inner.delete(user, id).await
    }
    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        self.inner.mark_all_read(user).await
    }
    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        match self.reader.read(user).await {
            Ok(v) => {
                self.replica_reads.fetch_add(1, Ordering::Relaxed);
                Ok(v)
            }
            Err(e) => {
                self.replica_errors.fetch_add(1, Ordering::Relaxed);
                if self.mode != ReadFrom::ReplicaFallback {
                    // A read changes nothing: its failure is never "maybe applied".
                    return Err(OpError::new(e.class, Outcome::Fail, format!("replica: {}", e.message)));
                }
                self.fallbacks.fetch_add(1, Ordering::Relaxed);
                self.inner.read_count(user).await
            }
        }
    }
    async fn seed(&self, spec: counterlab_core::SeedSpec) -> Result<(), OpError> {
        self.inner.seed(spec).await
    }
    async fn start(&self) {
        self.inner.start().await
    }
    /// The strategy's settle, then the replica catches up (bounded), so the settled reads
    /// judge the final state and not replication.
    async fn settle(&self, bound: Duration) -> Result<(), OpError> {
        self.inner.settle(bound).await?;
        // A replica_pause still on ends now.
        self.reader.hold(None).await?;
        let caught = self.catch_up(CATCH_UP_BOUND).await;
        caught.map_err(|why| OpError::new(ErrorClass::Timeout, Outcome::Fail, format!("replica: {why}")))
    }
    async fn counters(&self, n_users: u64) -> Result<Option<counterlab_core::UserCounters>, OpError> {
        self.inner.counters(n_users).await
    }
    fn takes(&self, fault: Fault) -> bool {
        matches!(fault, Fault::ReplicaPause { .. }) || self.inner.takes(fault)
    }

    async fn inject(&self, fault: Fault) -> Result<String, OpError> {
        let Fault::ReplicaPause { duration_ms } = fault else { return self.inner.inject(fault).await };
        let d = Duration::from_millis(duration_ms);
        let what = self.reader.hold(Some(d)).await?;
        if matches!(*self.reader, ReplicaReader::Sql { .. }) {
            // A standby's replay pause has no timer: a task resumes it (settle does too).
            let reader = self.reader.clone();
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                let _ = reader.hold(None).await;
            });
        }
        Ok(format!("{what} for {duration_ms} ms"))
    }
    async fn pending(&self) -> Option<i64> {
        self.inner.pending().await
    }
    async fn net_drift(&self) -> Option<i64> {
        self.inner.net_drift().await
    }
    fn figures(&self) -> Vec<(Figure, f64)> {
        let mut f = self.inner.figures();
        f.extend([
            (Figure::ReplicaReads, self.replica_reads.load(Ordering::Relaxed) as f64),
            (Figure::ReplicaReadErrors, self.replica_errors.load(Ordering::Relaxed) as f64),
        ]);
        if self.mode == ReadFrom::ReplicaFallback {
            f.push((Figure::ReplicaFallbacks, self.fallbacks.load(Ordering::Relaxed) as f64));
        }
        f
    }
    fn read_lag(&self) -> Option<Duration> {
        self.inner.read_lag()
    }
    /// The strategy's own teardown; the replica side is `release`d by the runner, which
    /// holds this wrapper whatever the strategy (SQL strategies have no teardown call).
    async fn teardown(&self) -> Result<(), OpError> {
        self.inner.teardown().await
    }
}
