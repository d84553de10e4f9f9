//! Backends: connecting to a server (or opening an SQLite directory), one isolated
//! namespace per strategy run (a PostgreSQL schema, a MySQL database, an SQLite file),
//! bulk seeding, the ground-truth check, and teardown.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use counterlab_core::{CheckFold, CheckInput, Checked, ErrorClass, Guarantee, OpError, Outcome, SeedSpec};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, Executor, MySqlPool, PgPool, SqlitePool};

mod merge;
mod settle;
mod stats;

pub use stats::{LockProbe, Readings, StatsOf};

use crate::db::{Db, Dialect, Isolation};
use crate::error::{BackendError, REFUSED, check_url, redact_url};
use crate::leftover::{Leftover, Marker, is_namespace_name};
use crate::sandbox::{self, Identity};
use crate::sqlfile::{after_seed, common, schema, statement};

/// How long teardown waits for the pool to close and for each admin statement that ends
/// the identity's sessions.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// The local PostgreSQL used when nothing else is configured.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// The local MariaDB/MySQL used when nothing else is configured.
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";

enum Conn {
    /// `bounds`: what the configured account may set on a role (see `sandbox::pg_bounds`).
    Pg {
        options: PgConnectOptions,
        admin: PgPool,
        bounds: PgCaps,
    },
    /// `mariadb`: the server has per-user `MAX_STATEMENT_TIME` (MySQL has not).
    My {
        options: MySqlConnectOptions,
        admin: MySqlPool,
        mariadb: bool,
    },
    Lite {
        dir: PathBuf,
    },
}

/// PostgreSQL: which of the role bounds the configured account and the server allow.
#[derive(Clone, Copy, Debug)]
struct PgCaps {
    superuser: bool,
    check_interval: bool,
}

/// A reachable server (or an SQLite directory) that namespaces are created on.
pub struct Server {
    conn: Conn,
    location: String,
    version: String,
    /// Ok when the configured account can create a namespace's own identity (probed at
    /// connect by creating and dropping one); Err says which right is missing.
    sandbox: Result<(), String>,
}

/// Per-namespace pool settings.
#[derive(Clone, Copy, Debug)]
pub struct PoolSpec {
    pub max_connections: u32,
    /// The op timeout: bounds the wait for a pooled connection, on SQLite the write lock,
    /// and on every server one statement of the namespace's identity (`sandbox::pg_bounds`,
    /// MariaDB's `MAX_STATEMENT_TIME`, SQLite's progress handler).
    pub acquire_timeout: Duration,
    pub isolation: Isolation,
}

impl Server {
    pub async fn connect_postgres(url: &str, timeout: Duration) -> Result<Server, BackendError> {
        let location = redact_url(url);
        let err = |detail: String| BackendError::Connect {
            backend: "postgres",
            url: location.clone(),
            source: detail.into(),
        };
        check_url(url, &["postgres", "postgresql"], "postgres://user[:password]@host[:port]/database").map_err(err)?;
        let options: PgConnectOptions = url.parse().map_err(|e: sqlx::Error| err(format!("invalid URL: {e}")))?;
        let options = options.application_name("counterlab");
        let admin =
            PgPoolOptions::new().max_connections(2).acquire_timeout(timeout).connect_with(options.clone()).await;
        let admin = match admin {
            Ok(a) => a,
            Err(e) => return Err(err(connect_cause(e, &options, timeout).await)),
        };
        let version: String =
            sqlx::query_scalar("SHOW server_version").fetch_one(&admin).await.map_err(|e| err(e.to_string()))?;
        let probe = sandbox::probe_name();
        let sandbox = sqlx::raw_sql(AssertSqlSafe(format!("CREATE ROLE \"{probe}\" NOLOGIN; DROP ROLE \"{probe}\"")))
            .execute(&admin)
            .await
            .map(|_| ())
            .map_err(|e| format!("the configured PostgreSQL account cannot create roles (CREATEROLE): {e}"));
        let superuser: bool = sqlx::query_scalar("SELECT current_setting('is_superuser') = 'on'")
            .fetch_one(&admin)
            .await
            .map_err(|e| err(e.to_string()))?;
        let major: u32 = version.split(|c: char| !c.is_ascii_digit()).next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let bounds = PgCaps { superuser, check_interval: major >= 14 };
        Ok(Server { conn: Conn::Pg { options, admin, bounds }, location, version, sandbox })
    }

    pub async fn connect_mysql(url: &str, timeout: Duration) -> Result<Server, BackendError> {
        let location = redact_url(url);
        let err =
            |detail: String| BackendError::Connect { backend: "mysql", url: location.clone(), source: detail.into() };
        check_url(url, &["mysql", "mariadb"], "mysql://user[:password]@host[:port]/database").map_err(err)?;
        let options: MySqlConnectOptions = url.parse().map_err(|e: sqlx::Error| err(format!("invalid URL: {e}")))?;
        let admin =
            MySqlPoolOptions::new().max_connections(2).acquire_timeout(timeout).connect_with(options.clone()).await;
        let admin = match admin {
            Ok(a) => a,
            Err(e) => return Err(err(connect_cause(e, &options, timeout).await)),
        };
        let version: String =
            sqlx::query_scalar("SELECT VERSION()").fetch_one(&admin).await.map_err(|e| err(e.to_string()))?;
        let probe = sandbox::probe_name();
        let sandbox = async {
            sqlx::raw_sql(AssertSqlSafe(format!("CREATE USER '{probe}'@'%' ACCOUNT LOCK"))).execute(&admin).await?;
            let grant = format!("GRANT SELECT ON `{probe}`.* TO '{probe}'@'%'");
            let granted = sqlx::raw_sql(AssertSqlSafe(grant)).execute(&admin).await;
            sqlx::raw_sql(AssertSqlSafe(format!("DROP USER '{probe}'@'%'"))).execute(&admin).await?;
            granted
        }
        .await
        .map(|_| ())
        .map_err(|e| format!("the configured MySQL account cannot create users (CREATE USER, GRANT OPTION): {e}"));
        let mariadb = version.contains("MariaDB");
        Ok(Server { conn: Conn::My { options, admin, mariadb }, location, version, sandbox })
    }

    /// SQLite needs no server: namespaces are files in `dir` (created if missing).
    pub async fn open_sqlite(dir: &Path) -> Result<Server, BackendError> {
        let location = dir.display().to_string();
        let err =
            |detail: String| BackendError::Connect { backend: "sqlite", url: location.clone(), source: detail.into() };
        std::fs::create_dir_all(dir).map_err(|e| err(format!("cannot create directory: {e}")))?;
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(SqliteConnectOptions::new().in_memory(true))
            .await
            .map_err(|e| err(e.to_string()))?;
        let version: String =
            sqlx::query_scalar("SELECT sqlite_version()").fetch_one(&pool).await.map_err(|e| err(e.to_string()))?;
        pool.close().await;
        Ok(Server { conn: Conn::Lite { dir: dir.to_path_buf() }, location, version, sandbox: Ok(()) })
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

    /// Namespaces with a counterlab marker on this server (schemas or databases named
    /// `cl_*`): what killed runs left, and the namespaces of runs still going (see
    /// `Marker::alive_here`). SQLite namespaces live in temporary folders: none here.
    pub async fn leftovers(&self) -> Result<Vec<Leftover>, BackendError> {
        let err = |e: sqlx::Error| BackendError::Step {
            backend: self.dialect().name(),
            step: "list leftovers",
            namespace: "cl_*".into(),
            source: e.into(),
        };
        let mut out = Vec::new();
        match &self.conn {
            Conn::Pg { admin, .. } => {
                let rows: Vec<(String, Option<String>, bool, i64)> = sqlx::query_as(
                    "SELECT n.nspname::text, obj_description(n.oid, 'pg_namespace'), \
                     EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = n.nspname), \
                     (SELECT count(*) FROM pg_stat_activity a WHERE a.usename = n.nspname) \
                     FROM pg_namespace n WHERE n.nspname LIKE 'cl\\_%' ORDER BY 1",
                )
                .fetch_all(admin)
                .await
                .map_err(err)?;
                for (ns, comment, role, sessions) in rows {
                    let Some(marker) = comment.as_deref().and_then(Marker::parse) else { continue };
                    if is_namespace_name(&ns) {
                        let what = if role { "schema and role" } else { "schema" }.into();
                        let sessions = sessions as u64;
                        out.push(Leftover { backend: "postgres", namespace: ns, marker, what, sessions });
                    }
                }
            }
            Conn::My { admin, .. } => {
                // Only a real table is read (the namespace's user could have put a view
                // there, which would run with the reader's rights).
                let dbs: Vec<String> = sqlx::query_scalar(
                    "SELECT TABLE_SCHEMA FROM information_schema.TABLES WHERE TABLE_SCHEMA LIKE 'cl\\_%' \
                     AND TABLE_NAME = 'cl_meta' AND TABLE_TYPE = 'BASE TABLE' ORDER BY 1",
                )
                .fetch_all(admin)
                .await
                .map_err(err)?;
                for ns in dbs.into_iter().filter(|d| is_namespace_name(d)) {
                    let sql = format!("SELECT marker FROM `{ns}`.cl_meta LIMIT 1");
                    let marker: Option<String> =
                        sqlx::query_scalar(AssertSqlSafe(sql)).fetch_optional(admin).await.ok().flatten();
                    let Some(marker) = marker.as_deref().and_then(Marker::parse) else { continue };
                    let sessions: i64 =
                        sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?")
                            .bind(sandbox::mysql_user(&ns))
                            .fetch_one(admin)
                            .await
                            .map_err(err)?;
                    let (what, sessions) = ("database and user".into(), sessions as u64);
                    out.push(Leftover { backend: "mysql", namespace: ns, marker, what, sessions });
                }
            }
            Conn::Lite { .. } => {}
        }
        Ok(out)
    }

    /// Drops a leftover found by `leftovers` (its storage and its identity).
    pub async fn remove(&self, l: &Leftover) -> Result<(), BackendError> {
        assert!(is_namespace_name(&l.namespace), "leftovers come from `leftovers`");
        let err = |e: sqlx::Error| BackendError::Step {
            backend: self.dialect().name(),
            step: "remove a leftover",
            namespace: l.namespace.clone(),
            source: e.into(),
        };
        let ns = &l.namespace;
        match &self.conn {
            Conn::Pg { admin, .. } => {
                // Idempotent: the run may be finishing its own cleanup at the same moment.
                let sql = format!(
                    "DROP SCHEMA IF EXISTS \"{ns}\" CASCADE; DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles \
                     WHERE rolname = '{ns}') THEN EXECUTE 'DROP OWNED BY \"{ns}\"; DROP ROLE \"{ns}\"'; END IF; END $$"
                );
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(admin).await.map_err(err)?;
            }
            Conn::My { admin, .. } => {
                let sql = format!("DROP DATABASE IF EXISTS `{ns}`; {}", sandbox::mysql_drop_user(ns));
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(admin).await.map_err(err)?;
            }
            Conn::Lite { .. } => {}
        }
        Ok(())
    }

    /// What of namespace `name` (its storage, its identity) is on this server, as
    /// "schema and role", "role" ...; None: nothing (a second teardown finds it gone).
    pub async fn namespace_left(&self, name: &str) -> Result<Option<&'static str>, BackendError> {
        let err = |e: sqlx::Error| BackendError::Step {
            backend: self.dialect().name(),
            step: "look for what is left",
            namespace: name.into(),
            source: e.into(),
        };
        let (storage, identity, what) = match &self.conn {
            Conn::Pg { admin, .. } => {
                let sql = "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1), \
                           EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)";
                let (s, r): (bool, bool) = sqlx::query_as(sql).bind(name).fetch_one(admin).await.map_err(err)?;
                (s, r, ["schema and role", "schema", "role"])
            }
            Conn::My { admin, .. } => {
                let sql = "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?";
                let db: i64 = sqlx::query_scalar(sql).bind(name).fetch_one(admin).await.map_err(err)?;
                // An account that cannot read mysql.user: the user counts as left (the
                // teardown's DROP USER IF EXISTS then runs).
                let user: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM mysql.user WHERE user = ?")
                    .bind(sandbox::mysql_user(name))
                    .fetch_one(admin)
                    .await
                    .unwrap_or(1);
                (db > 0, user > 0, ["database and user", "database", "user"])
            }
            Conn::Lite { dir } => (dir.join(format!("{name}.sqlite3")).exists(), false, ["file", "file", "file"]),
        };
        Ok(match (storage, identity) {
            (true, true) => Some(what[0]),
            (true, false) => Some(what[1]),
            (false, true) => Some(what[2]),
            (false, false) => None,
        })
    }

    /// Whether each namespace gets its own least-privilege identity here (Err: why not;
    /// its namespaces then run as the configured account).
    pub fn sandbox(&self) -> Result<(), &str> {
        self.sandbox.as_ref().map(|_| ()).map_err(|e| e.as_str())
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

    /// Creates namespace `name` (which must not exist) with its own identity (see
    /// `sandbox`), its tables, and a pool that connects as that identity, sees only the
    /// namespace, and runs at `spec.isolation`. On failure nothing is left behind.
    pub async fn create_namespace(&self, name: &str, spec: PoolSpec) -> Result<Namespace, BackendError> {
        self.create_namespace_with(name, spec, None).await
    }

    /// `create_namespace` whose identity logs in with `password` (None: a random one);
    /// a distributed run derives it from its run secret so every agent can log in.
    pub async fn create_namespace_with(
        &self,
        name: &str,
        spec: PoolSpec,
        password: Option<&str>,
    ) -> Result<Namespace, BackendError> {
        assert!(
            !name.is_empty()
                && name.len() <= 63
                && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "namespace names are generated, not user input: {name:?}"
        );
        assert!(self.supports(spec.isolation), "{} cannot run at {}", self.dialect().name(), spec.isolation.name());
        let home = match &self.conn {
            Conn::Pg { admin, .. } => Home::Pg(admin.clone()),
            Conn::My { admin, .. } => Home::My(admin.clone()),
            Conn::Lite { dir } => Home::Lite(dir.join(format!("{name}.sqlite3"))),
        };
        let identity = match (&self.conn, &self.sandbox) {
            (Conn::Lite { .. }, _) => Identity::Authorizer,
            (Conn::Pg { .. }, Ok(())) => Identity::Own { kind: "role", name: name.into(), caveat: None },
            (Conn::My { .. }, Ok(())) => Identity::Own { kind: "user", name: sandbox::mysql_user(name), caveat: None },
            (_, Err(why)) => Identity::Shared { why: why.clone() },
        };
        if let Home::Lite(path) = &home
            && path.exists()
        {
            let detail = format!("{} exists", path.display());
            return Err(BackendError::Step {
                backend: "sqlite",
                step: "create file",
                namespace: name.into(),
                source: detail.into(),
            });
        }
        let mut ns = Namespace {
            name: name.into(),
            home,
            db: None,
            identity,
            pg_login: None,
            made_storage: false,
            made_identity: false,
            bound: spec.acquire_timeout,
            mariadb: false,
            lite_limit: Arc::new(AtomicU64::new(spec.acquire_timeout.as_millis() as u64)),
            lite_busy: Arc::default(),
        };
        if let Err(e) = ns.create(&self.conn, spec, password).await {
            ns.drop_namespace().await.ok();
            return Err(e);
        }
        Ok(ns)
    }
}

impl Server {
    /// Namespace `name`, made earlier by another process (`counterlab prepare`) with
    /// `create_namespace_with(.., Some(password))`: a pool that logs in as its identity
    /// (the configured account when the server gives none). `owned`: this handle may
    /// drop it (teardown); otherwise dropping it only closes the pool.
    pub fn attach_namespace(
        &self,
        name: &str,
        spec: PoolSpec,
        password: &str,
        owned: bool,
    ) -> Result<Namespace, BackendError> {
        if !is_namespace_name(name) {
            return Err(BackendError::Refused(format!("{name:?} is not a counterlab namespace name")));
        }
        let (home, identity, db, pg_login) = match (&self.conn, &self.sandbox) {
            (Conn::Pg { admin, options, .. }, sandboxed) => {
                let (identity, options) = match sandboxed {
                    Ok(()) => (
                        Identity::Own { kind: "role", name: name.into(), caveat: None },
                        options.clone().username(name).password(password),
                    ),
                    Err(why) => (Identity::Shared { why: why.clone() }, options.clone()),
                };
                let login = options.clone().options([("search_path", name)]);
                let options = options.options([
                    ("search_path", name),
                    ("default_transaction_isolation", &spec.isolation.sql().to_lowercase()),
                ]);
                let db = Db::Pg(pool_options(spec).connect_lazy_with(options));
                (Home::Pg(admin.clone()), identity, db, Some(login))
            }
            (Conn::My { admin, options, .. }, sandboxed) => {
                let options = options.clone().database(name);
                let (identity, options) = match sandboxed {
                    Ok(()) => {
                        let user = sandbox::mysql_user(name);
                        let options = options.username(&user).password(password);
                        (Identity::Own { kind: "user", name: user, caveat: None }, options)
                    }
                    Err(why) => (Identity::Shared { why: why.clone() }, options),
                };
                (Home::My(admin.clone()), identity, Db::My(mysql_pool(spec).connect_lazy_with(options)), None)
            }
            (Conn::Lite { .. }, _) => {
                return Err(BackendError::Refused(
                    "SQLite namespaces are files of one process: a distributed run needs PostgreSQL or MySQL".into(),
                ));
            }
        };
        let own = matches!(identity, Identity::Own { .. });
        Ok(Namespace {
            name: name.into(),
            home,
            db: Some(db),
            identity,
            pg_login,
            made_storage: owned,
            made_identity: owned && own,
            bound: spec.acquire_timeout,
            mariadb: matches!(self.conn, Conn::My { mariadb: true, .. }) && own,
            lite_limit: Arc::new(AtomicU64::new(spec.acquire_timeout.as_millis() as u64)),
            lite_busy: Arc::default(),
        })
    }
}

/// Each SQLite connection's page cache, in KiB (`PRAGMA cache_size = -N`; SQLite's
/// default is 2000 KiB): on a large namespace every connection's cache filled up, 17
/// connections about 27 MB at 1M users / 10M rows (reports/2026-12-05-parity). The pages
/// beyond it come from the operating system's file cache.
pub const SQLITE_CACHE_KIB: u32 = 512;

/// The pool settings every namespace shares: bounded waits, no ping before each acquire
/// (one more round trip per operation that a tuned production pool does not pay; a dead
/// connection shows as an error).
fn pool_options<DB: sqlx::Database>(spec: PoolSpec) -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(spec.max_connections)
        .acquire_timeout(spec.acquire_timeout)
        .test_before_acquire(false)
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
    identity: Identity,
    /// PostgreSQL: how the namespace's pool logs in and finds its schema (no isolation
    /// option: a standby refuses serializable), for a pool on a standby.
    pg_login: Option<PgConnectOptions>,
    /// What this process created (and so may drop): the storage, the identity.
    made_storage: bool,
    made_identity: bool,
    /// The op timeout, the server's bound on one statement of the identity.
    bound: Duration,
    /// MariaDB with the user's `MAX_STATEMENT_TIME` set: the tool's phases lift it.
    mariadb: bool,
    /// SQLite: the progress handler's bound on one statement, in ms (the op timeout; the
    /// seed and the check raise it to `PHASE_STATEMENT` while they run).
    lite_limit: Arc<AtomicU64>,
    /// SQLite: the connections in the busy wait now (`busy.rs`), the lock probe's answer.
    lite_busy: Arc<crate::busy::Waiters>,
}

/// The transactions `SHOW ENGINE INNODB STATUS` lists as waiting on a lock (`LOCK WAIT`),
/// of `user`'s sessions (None: anyone's). Its transaction list is printed from the lock
/// manager's own state, where `information_schema.INNODB_TRX` showed none of a
/// namespace's transactions on MariaDB 10.11.
fn innodb_lock_waits(status: &str, user: Option<&str>) -> u64 {
    let mut n = 0;
    for trx in status.split("---TRANSACTION ").skip(1) {
        let waits = trx.lines().any(|l| l.starts_with("LOCK WAIT"));
        let thread = trx.lines().find(|l| l.starts_with("MariaDB thread id") || l.starts_with("MySQL thread id"));
        let mine = user.is_none_or(|u| thread.is_some_and(|l| l.split_whitespace().any(|w| w == u)));
        n += (waits && mine) as u64;
    }
    n
}

/// MySQL sessions get the isolation level on connect (a session default every BEGIN uses).
fn mysql_pool(spec: PoolSpec) -> MySqlPoolOptions {
    let set_isolation: &'static str = match spec.isolation {
        Isolation::ReadCommitted => "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        Isolation::RepeatableRead => "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        Isolation::Serializable => "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    };
    pool_options::<sqlx::MySql>(spec).after_connect(move |conn, _| {
        Box::pin(async move {
            conn.execute(set_isolation).await?;
            Ok(())
        })
    })
}

impl Namespace {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn db(&self) -> &Db {
        self.db.as_ref().expect("namespace pool exists until drop")
    }

    /// A pool on a PostgreSQL standby of this namespace's server (`url`: its host, port
    /// and database), logging in as the namespace's role (replicated with it) and seeing
    /// only its schema. Lazy: the first read connects.
    pub fn replica_db(&self, url: &str, spec: PoolSpec) -> Result<Db, BackendError> {
        let location = redact_url(url);
        let err = |detail: String| BackendError::Connect {
            backend: "postgres standby",
            url: location.clone(),
            source: detail.into(),
        };
        let Some(login) = &self.pg_login else {
            return Err(err(format!("replica reads need PostgreSQL, not {}", self.dialect().name())));
        };
        check_url(url, &["postgres", "postgresql"], "postgres://user[:password]@host[:port]/database").map_err(err)?;
        let at: PgConnectOptions = url.parse().map_err(|e: sqlx::Error| err(format!("invalid URL: {e}")))?;
        let mut options = login.clone().host(at.get_host()).port(at.get_port());
        if let Some(d) = at.get_database() {
            options = options.database(d);
        }
        Ok(Db::Pg(pool_options(spec).connect_lazy_with(options)))
    }

    /// Who the namespace's pool connects as.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    fn own(&self) -> bool {
        matches!(self.identity, Identity::Own { .. })
    }

    /// Creates the identity, the storage and the pool, then the tables (as the identity).
    async fn create(&mut self, conn: &Conn, spec: PoolSpec, password: Option<&str>) -> Result<(), BackendError> {
        let name = self.name.clone();
        let password = password.map_or_else(sandbox::random_password, str::to_string);
        let max = spec.max_connections + 2;
        let db = match conn {
            Conn::Pg { options, bounds, .. } => {
                let mut options = options.clone();
                let mark = sandbox::pg_mark(&name, &Marker::now().text());
                if self.own() {
                    // One implicit transaction: the role, its bounds, its schema and the
                    // marker, or none.
                    let limits =
                        sandbox::pg_bounds(&name, spec.acquire_timeout, bounds.superuser, bounds.check_interval);
                    let create = format!("{}\n{limits}\n{mark}", sandbox::pg_create(&name, &password, max));
                    self.admin_exec("create role and schema", create).await?;
                    (self.made_storage, self.made_identity) = (true, true);
                    self.pg_audit().await?;
                    options = options.username(&name).password(&password);
                } else {
                    self.admin_exec("create schema", format!("CREATE SCHEMA \"{name}\";\n{mark}")).await?;
                    self.made_storage = true;
                }
                self.pg_login = Some(options.clone().options([("search_path", name.as_str())]));
                let options = options.options([
                    ("search_path", name.as_str()),
                    ("default_transaction_isolation", &spec.isolation.sql().to_lowercase()),
                ]);
                Db::Pg(pool_options(spec).connect_lazy_with(options))
            }
            Conn::My { options, mariadb, .. } => {
                self.mariadb = *mariadb && self.own();
                self.admin_exec("create database", format!("CREATE DATABASE `{name}`")).await?;
                self.made_storage = true;
                let mark = format!(
                    "CREATE TABLE `{name}`.cl_meta (marker VARCHAR(255) NOT NULL); \
                     INSERT INTO `{name}`.cl_meta VALUES ('{}')",
                    Marker::now().text()
                );
                self.admin_exec("mark the database", mark).await?;
                let mut options = options.clone().database(&name);
                if let Identity::Own { name: user, .. } = &self.identity {
                    let [create, grant] =
                        &sandbox::mysql_create(&name, &password, max, mariadb.then_some(spec.acquire_timeout))[..]
                    else {
                        unreachable!()
                    };
                    self.admin_exec("create user", create.clone()).await?;
                    self.made_identity = true;
                    self.admin_exec("grant", grant.clone()).await?;
                    options = options.username(user).password(&password);
                }
                Db::My(mysql_pool(spec).connect_lazy_with(options))
            }
            Conn::Lite { .. } => {
                self.made_storage = true;
                Db::Lite(self.sqlite_pool(spec))
            }
        };
        self.db = Some(db);
        self.install().await
    }

    /// PostgreSQL: records what the new role could still reach beyond its schema.
    async fn pg_audit(&mut self) -> Result<(), BackendError> {
        let Home::Pg(admin) = &self.home else { return Ok(()) };
        let found: String = sqlx::query_scalar(sandbox::PG_AUDIT)
            .bind(&self.name)
            .fetch_one(admin)
            .await
            .map_err(|e| self.step_err("audit the role", e))?;
        if let Identity::Own { caveat, .. } = &mut self.identity {
            *caveat = (!found.is_empty()).then_some(found);
        }
        Ok(())
    }

    fn sqlite_pool(&self, spec: PoolSpec) -> SqlitePool {
        let Home::Lite(path) = &self.home else { unreachable!("an SQLite namespace") };
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .pragma("cache_size", format!("-{SQLITE_CACHE_KIB}"))
            // Below the op timeout, so a long wait for the write lock ends as a
            // retryable SQLITE_BUSY rather than as an op timeout (unknown outcome).
            .busy_timeout(spec.acquire_timeout / 2);
        let hooks = self.lite_hooks(spec.acquire_timeout / 2);
        pool_options::<sqlx::Sqlite>(spec)
            .after_connect(move |conn, _| {
                let hooks = hooks.clone();
                Box::pin(async move { hooks.install(conn, true).await })
            })
            .connect_lazy_with(options)
    }

    /// What every SQLite connection of the namespace gets once open (`LiteHooks`).
    pub(super) fn lite_hooks(&self, busy_bound: Duration) -> LiteHooks {
        LiteHooks { limit: self.lite_limit.clone(), busy: self.lite_busy.clone(), busy_bound }
    }

    fn dialect(&self) -> Dialect {
        match self.home {
            Home::Pg(_) => Dialect::Postgres,
            Home::My(_) => Dialect::Mysql,
            Home::Lite(_) => Dialect::Sqlite,
        }
    }

    fn step_err(&self, step: &'static str, e: impl Into<crate::Cause>) -> BackendError {
        BackendError::Step { backend: self.dialect().name(), step, namespace: self.name.clone(), source: e.into() }
    }

    async fn admin_exec(&self, step: &'static str, sql: String) -> Result<(), BackendError> {
        let r = match &self.home {
            Home::Pg(a) => sqlx::raw_sql(AssertSqlSafe(sql)).execute(a).await.map(|_| ()),
            Home::My(a) => sqlx::raw_sql(AssertSqlSafe(sql)).execute(a).await.map(|_| ()),
            Home::Lite(_) => Ok(()),
        };
        r.map_err(|e| self.step_err(step, e))
    }

    /// Runs a multi-statement script inside the namespace (one of the tool's phases: the
    /// statements' time bound is `PHASE_STATEMENT`, not the op timeout).
    async fn script(&self, step: &'static str, sql: &'static str) -> Result<(), BackendError> {
        let _phase = self.lite_phase();
        let r = match self.db() {
            Db::Pg(p) => {
                let sql = format!("{};\n{sql}", sandbox::pg_phase_local());
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(p).await.map(|_| ())
            }
            Db::My(p) if self.mariadb => {
                let (lift, back) = sandbox::mysql_phase(self.bound);
                sqlx::raw_sql(AssertSqlSafe(format!("{lift};\n{};\n{back}", sql.trim_end().trim_end_matches(';'))))
                    .execute(p)
                    .await
                    .map(|_| ())
            }
            Db::My(p) => sqlx::raw_sql(sql).execute(p).await.map(|_| ()),
            Db::Lite(p) => sqlx::raw_sql(sql).execute(p).await.map(|_| ()),
        };
        r.map_err(|e| self.step_err(step, e))
    }

    /// SQLite: raises the progress handler's bound to `PHASE_STATEMENT` until the guard
    /// drops (the seed, the check: the load is not running).
    fn lite_phase(&self) -> LitePhase {
        self.lite_limit.store(sandbox::PHASE_STATEMENT.as_millis() as u64, Ordering::Relaxed);
        LitePhase { limit: self.lite_limit.clone(), back: self.bound.as_millis() as u64 }
    }

    /// MariaDB: lifts the user's time bound on `conn` for one of the tool's phases.
    async fn mysql_lift(&self, conn: &mut sqlx::MySqlConnection, lift: bool) -> Result<(), sqlx::Error> {
        if self.mariadb {
            let (up, back) = sandbox::mysql_phase(self.bound);
            conn.execute(AssertSqlSafe(if lift { up } else { back })).await?;
        }
        Ok(())
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
        let rows =
            (1..=spec.n_users).flat_map(move |u| spec.rows_of(u as i64).map(move |(id, read)| (id as u64, u, read)));
        match self.db() {
            Db::Pg(p) => self.copy_pg(p, spec, rows, unread).await?,
            Db::My(p) => {
                let mut tx = p.begin().await.map_err(|e| self.step_err("seed", e))?;
                self.mysql_lift(&mut tx, true).await.map_err(|e| self.step_err("seed", e))?;
                for sql in insert_batches(spec, rows, unread, "TRUE", "FALSE") {
                    sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut *tx).await.map_err(|e| self.step_err("seed", e))?;
                }
                self.mysql_lift(&mut tx, false).await.map_err(|e| self.step_err("seed", e))?;
                tx.commit().await.map_err(|e| self.step_err("seed", e))?;
            }
            Db::Lite(p) => {
                let _phase = self.lite_phase();
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
        // One transaction, so the lifted time bound ends with it.
        let mut conn = pool.begin().await.map_err(e("seed"))?;
        conn.execute(AssertSqlSafe(sandbox::pg_phase_local())).await.map_err(e("seed"))?;
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
        conn.commit().await.map_err(e("seed"))
    }

    /// How many of the namespace's sessions wait on a lock right now, as the server's
    /// lock manager shows it (PostgreSQL `pg_blocking_pids`, InnoDB's `LOCK WAIT`
    /// transactions; SQLite: the connections sleeping in the busy handler, `busy.rs`).
    pub async fn lock_waiters(&self) -> Result<u64, OpError> {
        let sql = |d| statement(common(d), "lock_waiters");
        let n: i64 = match (&self.home, self.db()) {
            (Home::Pg(_), db) => db.opt_i64(sql(Dialect::Postgres), &[]).await?.unwrap_or(0),
            (Home::My(admin), _) => {
                let row: (String, String, String) = sqlx::query_as(sql(Dialect::Mysql))
                    .fetch_one(admin)
                    .await
                    .map_err(|e| crate::db::classify(Dialect::Mysql, e))?;
                let user = match &self.identity {
                    Identity::Own { name, .. } => Some(name.as_str()),
                    _ => None,
                };
                innodb_lock_waits(&row.2, user) as i64
            }
            (Home::Lite(_), _) => self.lite_busy.now() as i64,
        };
        Ok(n.max(0) as u64)
    }

    /// As `lock_waiters`, for a moment when nothing that could release a lock runs: on
    /// SQLite only the connections that tried the lock again after the call began (one
    /// whose lock was released a moment before may still sleep in the busy handler).
    pub async fn lock_waiters_still(&self) -> Result<u64, OpError> {
        match self.home {
            Home::Lite(_) => Ok(self.lite_busy.confirmed().await),
            _ => self.lock_waiters().await,
        }
    }

    /// SQLite: a waiter tries the lock again every millisecond, so a session whose lock
    /// was released goes on at once (the explorer; a load keeps SQLite's own backoff).
    pub fn quick_lock_waits(&self) {
        self.lite_busy.set_quick();
    }

    /// The database server's clock (µs since the Unix epoch), read over the namespace's
    /// pool: the distributed phases measure each agent's clock offset against it.
    pub async fn server_time_us(&self) -> Result<i64, OpError> {
        let sql = statement(common(self.dialect()), "server_time_us");
        let t = self.db().opt_i64(sql, &[]).await?;
        t.ok_or_else(|| OpError::new(ErrorClass::Other, Outcome::Fail, "the server gave no time".to_string()))
    }

    /// Every user's counter beside the truth from the rows, users 1..=n_users, as a list
    /// (small namespaces: tests). Run after the load has stopped.
    /// Errors keep their class, so a caller can retry a lost connection.
    pub async fn check_rows(&self, n_users: u64) -> Result<Vec<CheckInput>, OpError> {
        let mut out: Vec<CheckInput> =
            (1..=n_users as i64).map(|user| CheckInput { user, counter: None, truth: 0 }).collect();
        self.each_check_row(|r| match out.get_mut((r.user - 1) as usize).filter(|_| r.user >= 1) {
            Some(slot) => {
                *slot = r;
                Ok(())
            }
            None => Err(format!("a row for user {}, outside 1..={n_users}", r.user)),
        })
        .await?;
        Ok(out)
    }

    /// The final check, streamed: each user's counter beside the truth from the rows,
    /// folded as the server sends them (`CheckFold`), so memory holds the witnesses and
    /// the sample, not every user. `counters`: a strategy's own, replacing the table's.
    /// Run after the load has stopped (settled), so the state is quiescent.
    pub async fn check_stream(
        &self,
        n_users: u64,
        guarantee: Guarantee,
        counters: Option<&counterlab_core::UserCounters>,
        sample: usize,
    ) -> Result<Checked, OpError> {
        if let Db::Pg(pool) = self.db() {
            return self.check_pg(pool, n_users, guarantee, counters, sample).await;
        }
        let mut fold = CheckFold::new(n_users, counters, sample);
        self.each_check_row(|r| fold.add(r)).await?;
        Ok(fold.finish(guarantee))
    }

    /// PostgreSQL: the bare truth query (`truth_all`) on a connection of its own and,
    /// while the server aggregates, the counters table read into `UserCounters` (8 B and a
    /// bit a user) over the pool, in the truth's snapshot (exported, so both reads see one
    /// state as a single statement would); then the truth rows folded as they arrive. No
    /// join on the server: the check costs the truth query and a scan it overlaps
    /// (reports/2026-12-02-check-overlap). `counters`: a strategy's own, read already.
    async fn check_pg(
        &self,
        pool: &PgPool,
        n_users: u64,
        guarantee: Guarantee,
        counters: Option<&counterlab_core::UserCounters>,
        sample: usize,
    ) -> Result<Checked, OpError> {
        use futures_util::TryStreamExt;
        let err = |e| crate::db::classify(Dialect::Postgres, e);
        let mut own = self.pg_truth_connection(pool).await?;
        own.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await.map_err(err)?;
        own.execute(AssertSqlSafe(sandbox::pg_phase_local())).await.map_err(err)?;
        let snapshot: String =
            sqlx::query_scalar("SELECT pg_export_snapshot()").fetch_one(&mut own).await.map_err(err)?;
        let mut truth =
            sqlx::query_as::<_, (i64, i64)>(statement(common(Dialect::Postgres), "truth_all")).fetch(&mut own);
        let mut table = None;
        let first = match counters {
            Some(_) => truth.try_next().await.map_err(err)?,
            None => {
                let (first, read) = tokio::join!(truth.try_next(), self.pg_table_counters(pool, &snapshot, n_users));
                table = Some(read?);
                first.map_err(err)?
            }
        };
        let mut fold = CheckFold::new(n_users, counters.or(table.as_ref()), sample);
        let fail = |m| OpError::new(ErrorClass::Other, Outcome::Fail, format!("{}: {m}", self.name));
        let mut next = first;
        while let Some((user, truth_n)) = next {
            fold.add(CheckInput { user, counter: None, truth: truth_n }).map_err(fail)?;
            next = truth.try_next().await.map_err(err)?;
        }
        Ok(fold.finish(guarantee))
    }

    /// A connection outside the pool (so a one-connection pool cannot deadlock), opened
    /// within the pool's acquire timeout; a timeout counts as a lost connection (retried).
    async fn pg_truth_connection(&self, pool: &PgPool) -> Result<sqlx::PgConnection, OpError> {
        use sqlx::ConnectOptions;
        let bound = pool.options().get_acquire_timeout();
        match tokio::time::timeout(bound, pool.connect_options().connect()).await {
            Ok(c) => c.map_err(|e| crate::db::classify(Dialect::Postgres, e)),
            Err(_) => Err(OpError::new(
                ErrorClass::Timeout,
                Outcome::Fail,
                format!("{}: no connection for the check within {} ms", self.name, bound.as_millis()),
            )),
        }
    }

    /// The `unread_counts` table as `UserCounters`, read in the exported `snapshot`; a row
    /// for a user outside 1..=n_users is an error naming it, as the joined check's was.
    async fn pg_table_counters(
        &self,
        pool: &PgPool,
        snapshot: &str,
        n_users: u64,
    ) -> Result<counterlab_core::UserCounters, OpError> {
        use futures_util::TryStreamExt;
        let err = |e| crate::db::classify(Dialect::Postgres, e);
        if snapshot.is_empty() || !snapshot.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            let m = format!("{}: the server exported an unexpected snapshot id {snapshot:?}", self.name);
            return Err(OpError::new(ErrorClass::Other, Outcome::Fail, m));
        }
        // A transaction rolls back when dropped: an error leaves no open one in the pool.
        let mut tx = pool.begin().await.map_err(err)?;
        let join = format!(
            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '{snapshot}'; {}",
            sandbox::pg_phase_local()
        );
        sqlx::raw_sql(AssertSqlSafe(join)).execute(&mut *tx).await.map_err(err)?;
        let mut out = counterlab_core::UserCounters::new(n_users);
        let mut outside = None;
        let sql = statement(common(Dialect::Postgres), "counters_all");
        let mut rows = sqlx::query_as::<_, (i64, i64)>(sql).fetch(&mut *tx);
        while let Some((u, v)) = rows.try_next().await.map_err(err)? {
            match u >= 1 && u as u64 <= n_users {
                true => out.set(u, Some(v)),
                false => outside = outside.or(Some(u)),
            }
        }
        drop(rows);
        tx.commit().await.map_err(err)?;
        match outside {
            None => Ok(out),
            Some(u) => Err(OpError::new(
                ErrorClass::Other,
                Outcome::Fail,
                format!("{}: a counter row for user {u}, outside 1..={n_users}", self.name),
            )),
        }
    }

    /// Hands each user's check row to `f` as it arrives: PostgreSQL runs `check_rows` (one
    /// statement), MariaDB/MySQL and SQLite two streams merged (`merge.rs`). An error
    /// from `f` stops the stream and names the namespace.
    async fn each_check_row(&self, mut f: impl FnMut(CheckInput) -> Result<(), String>) -> Result<(), OpError> {
        use futures_util::TryStreamExt;
        let sql = statement(common(self.dialect()), "check_rows");
        macro_rules! drain {
            ($pool:expr, $dialect:expr) => {{
                let mut rows = sqlx::query_as::<_, (i64, Option<i64>, i64)>(sql).fetch($pool);
                loop {
                    match rows.try_next().await {
                        Ok(Some((user, counter, truth))) => f(CheckInput { user, counter, truth }).map_err(|m| {
                            OpError::new(ErrorClass::Other, Outcome::Fail, format!("{}: {m}", self.name))
                        })?,
                        Ok(None) => return Ok(()),
                        Err(e) => return Err(crate::db::classify($dialect, e)),
                    }
                }
            }};
        }
        let _phase = self.lite_phase();
        match self.db() {
            Db::Pg(p) => drain!(p, Dialect::Postgres),
            Db::My(p) => self.merge_mysql(p, f).await,
            Db::Lite(p) => self.merge_sqlite(p, f).await,
        }
    }

    /// Closes the pool, waiting at most `CLOSE_WAIT` for connections still in use (one
    /// in a stuck statement is ended by the server's bound or by `end_sessions`).
    async fn close_pool(&mut self) {
        if let Some(db) = self.db.take() {
            let _ = tokio::time::timeout(CLOSE_WAIT, db.close()).await;
        }
    }

    /// Ends every session of the namespace's own identity (bounded: each statement waits
    /// at most the admin pool's acquire timeout), so a stuck query cannot hold a lock the
    /// DROP waits on. Errors are ignored: the DROP that follows reports what is left.
    async fn end_sessions(&self) {
        if !self.made_identity {
            return;
        }
        match &self.home {
            Home::Pg(admin) => {
                let _ = tokio::time::timeout(
                    CLOSE_WAIT,
                    sqlx::query(sandbox::PG_TERMINATE).bind(&self.name).execute(admin),
                )
                .await;
            }
            Home::My(admin) => {
                let user = sandbox::mysql_user(&self.name);
                let ids: Vec<u64> = match tokio::time::timeout(
                    CLOSE_WAIT,
                    sqlx::query_scalar(sandbox::MYSQL_SESSIONS).bind(&user).fetch_all(admin),
                )
                .await
                {
                    Ok(Ok(ids)) => ids,
                    _ => return,
                };
                for id in ids {
                    let kill = sqlx::raw_sql(AssertSqlSafe(format!("KILL CONNECTION {id}"))).execute(admin);
                    let _ = tokio::time::timeout(CLOSE_WAIT, kill).await;
                }
            }
            Home::Lite(_) => {}
        }
    }

    /// Closes the pool and removes the namespace with everything in it, and its identity.
    pub async fn drop_namespace(mut self) -> Result<(), BackendError> {
        self.close_pool().await;
        let name = &self.name;
        if !self.made_storage {
            return Ok(());
        }
        self.end_sessions().await;
        match &self.home {
            Home::Pg(_) if self.made_identity => self.admin_exec("drop role and schema", sandbox::pg_drop(name)).await,
            Home::Pg(_) => self.admin_exec("drop schema", format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE")).await,
            Home::My(_) => {
                let drop = format!("SET STATEMENT lock_wait_timeout = 10 FOR DROP DATABASE IF EXISTS `{name}`");
                let drop = if self.mariadb { drop } else { format!("DROP DATABASE IF EXISTS `{name}`") };
                let dropped = self.admin_exec("drop database", drop).await;
                if self.made_identity {
                    self.admin_exec("drop user", sandbox::mysql_drop_user(name)).await?;
                }
                dropped
            }
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

    /// Closes the pool and leaves the namespace in place (`--keep`), owned by the
    /// configured account; the namespace's identity is dropped.
    pub async fn keep(mut self) -> Result<(), BackendError> {
        self.close_pool().await;
        self.end_sessions().await;
        let ns = &self.name;
        match &self.home {
            Home::Pg(_) if self.made_identity => self.admin_exec("lock the kept role", sandbox::pg_keep(ns)).await,
            Home::Pg(_) => {
                let note = format!("COMMENT ON SCHEMA \"{ns}\" IS 'kept by counterlab --keep'");
                self.admin_exec("note the kept schema", note).await
            }
            Home::My(_) => {
                // No marker: `counterlab clean` leaves a kept database alone.
                let unmark = format!("DROP TABLE IF EXISTS `{ns}`.cl_meta");
                let unmarked = self.admin_exec("unmark the kept database", unmark).await;
                if self.made_identity {
                    self.admin_exec("drop user", sandbox::mysql_drop_user(ns)).await?;
                }
                unmarked
            }
            Home::Lite(_) => Ok(()),
        }
    }
}

/// Why a pool could not open its first connection. sqlx retries a refused connection
/// until the acquire timeout and then says only "pool timed out", so one direct attempt
/// (bounded by `timeout`) names the cause: refused, a bad password, an unknown database.
async fn connect_cause<O>(e: sqlx::Error, options: &O, timeout: Duration) -> String
where
    O: sqlx::ConnectOptions,
    O::Connection: Sized,
{
    use sqlx::Connection as _;
    if !matches!(e, sqlx::Error::PoolTimedOut) {
        return describe_connect(e);
    }
    match tokio::time::timeout(timeout, options.connect()).await {
        Ok(Err(direct)) => describe_connect(direct),
        Ok(Ok(c)) => {
            let _ = c.close().await;
            format!("{e} (a direct connection then succeeded: the server was slow to accept)")
        }
        Err(_) => format!("no answer within {} ms", timeout.as_millis()),
    }
}

/// A connect error as the message says it: `REFUSED` when nothing listens.
fn describe_connect(e: sqlx::Error) -> String {
    match &e {
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => REFUSED.into(),
        _ => e.to_string(),
    }
}

/// What every SQLite connection of a namespace gets once open: the busy handler (its
/// sleeps on the write lock, bounded like `busy_timeout`), the statement watch (the
/// progress handler holding each statement to the namespace's bound, raised for the tool's
/// phases) and, where a strategy's SQL may run, the authorizer. The pool's connections
/// get all three; the check's own connection, which runs only the tool's statements (a
/// `PRAGMA` among them), the first two.
#[derive(Clone)]
pub(super) struct LiteHooks {
    limit: Arc<AtomicU64>,
    busy: Arc<crate::busy::Waiters>,
    busy_bound: Duration,
}

impl LiteHooks {
    pub(super) async fn install(&self, conn: &mut sqlx::SqliteConnection, authorizer: bool) -> Result<(), sqlx::Error> {
        let mut handle = conn.lock_handle().await?;
        // SAFETY: as below; the handler replaces `busy_timeout`'s, same bound.
        unsafe { crate::busy::install(handle.as_raw_handle(), self.busy.clone(), self.busy_bound) }
            .map_err(|e| sqlx::Error::Configuration(e.into()))?;
        // SAFETY: the locked handle is open and no other thread uses it; the
        // watch reads only this connection, from inside its own steps.
        let mut watch = unsafe { sandbox::StatementWatch::new(handle.as_raw_handle(), self.limit.clone()) };
        handle.set_progress_handler(sandbox::StatementWatch::EVERY, move || watch.tick());
        if !authorizer {
            return Ok(());
        }
        // SAFETY: as above.
        unsafe { sandbox::install_authorizer(handle.as_raw_handle()) }.map_err(|e| sqlx::Error::Configuration(e.into()))
    }
}

/// Puts an SQLite namespace's statement bound back to the op timeout when dropped.
struct LitePhase {
    limit: Arc<AtomicU64>,
    back: u64,
}

impl Drop for LitePhase {
    fn drop(&mut self) {
        self.limit.store(self.back, Ordering::Relaxed);
    }
}

/// Multi-row INSERT statements of at most 1000 rows each, made one at a time as the seed
/// sends them (10M rows made at once held 285 MB); every value is a number the seeder
/// generated, so the text is safe to build.
fn insert_batches(
    spec: SeedSpec,
    rows: impl Iterator<Item = (u64, u64, bool)>,
    unread: u64,
    t: &'static str,
    f: &'static str,
) -> impl Iterator<Item = String> {
    let notifications = batches(
        "INSERT INTO notifications (id, user_id, is_read) VALUES ",
        rows.map(move |(id, user, read)| format!("({id},{user},{})", if read { t } else { f })),
    );
    let counters = batches(
        "INSERT INTO unread_counts (user_id, unread) VALUES ",
        (1..=spec.n_users).map(move |u| format!("({u},{unread})")),
    );
    notifications.chain(counters)
}

/// `head` and up to 1000 of `values`, comma-separated, per statement.
fn batches(head: &'static str, mut values: impl Iterator<Item = String>) -> impl Iterator<Item = String> {
    const BATCH: usize = 1000;
    std::iter::from_fn(move || {
        let mut sql = String::from(head);
        sql += &values.next()?;
        for v in values.by_ref().take(BATCH - 1) {
            sql += ",";
            sql += &v;
        }
        Some(sql)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_statements_hold_at_most_1000_rows_and_every_row_once() {
        let values = (1..=2500).map(|i| format!("({i})"));
        let sql: Vec<String> = batches("INSERT INTO t VALUES ", values).collect();
        let rows: Vec<usize> = sql.iter().map(|s| s.matches('(').count()).collect();
        assert_eq!(rows, [1000, 1000, 500]);
        assert!(sql.iter().all(|s| s.starts_with("INSERT INTO t VALUES (") && !s.ends_with(',')));
        assert!(sql[2].ends_with(",(2500)"), "{}", &sql[2][sql[2].len() - 20..]);
        assert_eq!(batches("X ", std::iter::empty()).count(), 0);
    }

    #[test]
    fn innodb_lock_waits_counts_the_waiting_transactions_of_one_user() {
        let status = "=====\nTRANSACTIONS\n------------\n\
            ---TRANSACTION 3822, ACTIVE 2 sec\n2 lock struct(s)\n\
            MariaDB thread id 130, OS thread handle 1, query id 9 127.0.0.1 cl_u1 \n\
            ---TRANSACTION 3823, ACTIVE 2 sec starting index read\nmysql tables in use 1, locked 1\n\
            LOCK WAIT 2 lock struct(s), heap size 1128, 1 row lock(s)\n\
            MariaDB thread id 131, OS thread handle 2, query id 10 127.0.0.1 cl_u1 Searching rows for update\n\
            ---TRANSACTION 3824, ACTIVE 1 sec\nLOCK WAIT 2 lock struct(s)\n\
            MariaDB thread id 132, OS thread handle 3, query id 11 127.0.0.1 someone_else Updating\n";
        assert_eq!(super::innodb_lock_waits(status, Some("cl_u1")), 1);
        assert_eq!(super::innodb_lock_waits(status, Some("cl_u2")), 0);
        assert_eq!(super::innodb_lock_waits(status, None), 2);
    }
}
