//! Connecting what a plan needs: each SQL backend (`auto` falls back to embedded SQLite),
//! Redis and the broker (RabbitMQ) when a strategy uses them, and the sandbox preflight that refuses file-defined
//! strategies a server cannot confine.

use std::path::PathBuf;

use tempfile::TempDir;

use counterlab_plan::{Backend, RunPlan};
use counterlab_report::ServerInfo;
use counterlab_strategies::{
    AmqpServer, BackendError, DEFAULT_AMQP_URL, DEFAULT_MYSQL_URL, DEFAULT_REDIS_URL, Marker, Recipe, RedisServer,
    Server,
};

use super::RunOptions;

/// Where SQLite namespaces go: the configured folder, else a temporary one made on first
/// use (a guard: removed when dropped, unless the run keeps it).
struct SqliteHome<'a> {
    configured: Option<&'a PathBuf>,
    temp: Option<TempDir>,
    /// The marker file, locked while the run lives: `clean` leaves a locked folder alone,
    /// whichever host or container the run is on.
    lock: Option<std::fs::File>,
    run_id: &'a str,
}

impl SqliteHome<'_> {
    fn dir(&mut self) -> Result<PathBuf, BackendError> {
        if let Some(d) = self.configured {
            return Ok(d.clone());
        }
        if self.temp.is_none() {
            let made = tempfile::Builder::new().prefix(&format!("counterlab-{}-", self.run_id)).tempdir();
            let failed = |e: std::io::Error| BackendError::Connect {
                backend: "sqlite",
                url: std::env::temp_dir().display().to_string(),
                source: e.into(),
            };
            let dir = made.map_err(failed)?;
            // The folder's marker: a killed run's folder is found and removed by `clean`.
            let path = dir.path().join(super::names::SQLITE_MARKER);
            std::fs::write(&path, Marker::now().text()).map_err(failed)?;
            let lock = std::fs::File::open(&path).map_err(failed)?;
            lock.lock_shared().map_err(failed)?;
            self.lock = Some(lock);
            self.temp = Some(dir);
        }
        Ok(self.temp.as_ref().map(|t| t.path().to_path_buf()).unwrap_or_default())
    }
}

/// Connects every backend the plan names (each dialect once). A temporary SQLite folder
/// made before a failure is removed with its guard.
async fn resolve_backends(
    plan: &RunPlan,
    opts: &RunOptions,
    run_id: &str,
    log: &mut dyn FnMut(&str),
) -> Result<(Vec<Server>, Option<TempDir>, Option<std::fs::File>), BackendError> {
    let mut servers: Vec<Server> = Vec::new();
    let mut home = SqliteHome { configured: opts.sqlite_dir.as_ref(), temp: None, lock: None, run_id };
    for backend in &plan.backends {
        let server = connect(*backend, opts, &mut home, log).await?;
        if !servers.iter().any(|s| s.dialect() == server.dialect()) {
            log(&format!("backend {}: {} at {}", server.dialect().name(), server.version(), server.location()));
            servers.push(server);
        }
    }
    Ok((servers, home.temp, home.lock))
}

/// One backend. `auto` is PostgreSQL when a URL is configured (then it must answer) or
/// the default answers; otherwise embedded SQLite.
async fn connect(
    backend: Backend,
    opts: &RunOptions,
    home: &mut SqliteHome<'_>,
    log: &mut dyn FnMut(&str),
) -> Result<Server, BackendError> {
    let timeout = opts.connect_timeout;
    match backend {
        Backend::Postgres => {
            Server::connect_postgres(opts.postgres_url.as_deref().unwrap_or(&opts.postgres_default), timeout).await
        }
        Backend::Mysql => Server::connect_mysql(opts.mysql_url.as_deref().unwrap_or(DEFAULT_MYSQL_URL), timeout).await,
        Backend::Sqlite => Server::open_sqlite(&home.dir()?).await,
        Backend::Auto => match &opts.postgres_url {
            Some(url) => Server::connect_postgres(url, timeout).await,
            None => match async {
                answering(&opts.postgres_default, 5432)?;
                Server::connect_postgres(&opts.postgres_default, timeout).await
            }
            .await
            {
                Ok(s) => Ok(s),
                Err(e) => {
                    let dir = home.dir()?;
                    log(&format!(
                        "no PostgreSQL configured and none answering ({e}); running on embedded SQLite in {}. \
                         For a server: --postgres URL or COUNTERLAB_POSTGRES_URL (docker compose up -d starts one)",
                        dir.display()
                    ));
                    Server::open_sqlite(&dir).await
                }
            },
        },
    }
}

/// How long an unconfigured default server gets to accept a TCP connection before the
/// run goes on without it: a missing server is told in well under a second, not after
/// the connect timeout a configured one gets.
const PROBE: std::time::Duration = std::time::Duration::from_millis(300);

/// Ok when something accepts TCP at the default URL's host and port within `PROBE`.
fn answering(default_url: &str, default_port: u16) -> Result<(), BackendError> {
    let parsed = url::Url::parse(default_url).ok();
    let host = parsed.as_ref().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_else(|| "127.0.0.1".into());
    let port = parsed.as_ref().and_then(|u| u.port()).unwrap_or(default_port);
    match crate::containers::probe::tcp_answers(&host, port, PROBE) {
        true => Ok(()),
        false => Err(BackendError::Refused(format!("nothing accepts connections at {host}:{port} within {PROBE:?}"))),
    }
}

/// The recipe of the plan's strategy `name` (a strategy file of the plan, else a
/// built-in); a name neither holds is an error: the plan was resolved against other names
/// than the run's registry (a caller's bug, never a row that could pass unseen).
pub(crate) fn recipe<'a>(plan: &'a RunPlan, opts: &'a RunOptions, name: &str) -> Result<&'a dyn Recipe, BackendError> {
    let missing = || BackendError::Refused(format!("strategy {name} is not in this run's registry"));
    opts.registry.recipe(&plan.custom, name).ok_or_else(missing)
}

/// Whether the plan's strategy `name` needs Redis.
pub(crate) fn uses_redis(plan: &RunPlan, opts: &RunOptions, name: &str) -> bool {
    recipe(plan, opts, name).is_ok_and(|r| r.needs_redis())
}

/// Whether the plan's strategy `name` needs the broker.
pub(crate) fn uses_amqp(plan: &RunPlan, opts: &RunOptions, name: &str) -> bool {
    recipe(plan, opts, name).is_ok_and(|r| r.needs_amqp())
}

/// Connects the broker when a strategy of the plan needs it. A configured URL must
/// answer; the default may be absent, and then the broker strategies are skipped with
/// the reason.
async fn resolve_amqp(
    plan: &RunPlan,
    opts: &RunOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Result<AmqpServer, String>, BackendError> {
    if !plan.strategies.iter().any(|s| uses_amqp(plan, opts, s)) {
        return Ok(Err("not needed".into()));
    }
    match &opts.amqp_url {
        Some(url) => Ok(Ok(AmqpServer::connect(url, opts.connect_timeout).await?)),
        None => match async {
            answering(DEFAULT_AMQP_URL, 5672)?;
            AmqpServer::connect(DEFAULT_AMQP_URL, opts.connect_timeout).await
        }
        .await
        {
            Ok(r) => {
                log(&format!("rabbitmq ({}) at {}", r.version(), r.location()));
                Ok(Ok(r))
            }
            Err(e) => {
                let why =
                    format!("no RabbitMQ configured and none answering ({e}); use --amqp URL or COUNTERLAB_AMQP_URL");
                log(&why);
                Ok(Err(why))
            }
        },
    }
}

/// Connects Redis when a strategy of the plan needs it. A configured URL must answer;
/// the default may be absent, and then Redis strategies are skipped with the reason.
async fn resolve_redis(
    plan: &RunPlan,
    opts: &RunOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Result<RedisServer, String>, BackendError> {
    if !plan.strategies.iter().any(|s| uses_redis(plan, opts, s)) {
        return Ok(Err("not needed".into()));
    }
    match &opts.redis_url {
        Some(url) => Ok(Ok(RedisServer::connect(url, opts.connect_timeout).await?)),
        None => match async {
            answering(DEFAULT_REDIS_URL, 6379)?;
            RedisServer::connect(DEFAULT_REDIS_URL, opts.connect_timeout).await
        }
        .await
        {
            Ok(r) => {
                log(&format!("redis {} at {}", r.version(), r.location()));
                Ok(Ok(r))
            }
            Err(e) => {
                let why =
                    format!("no Redis configured and none answering ({e}); use --redis URL or COUNTERLAB_REDIS_URL");
                log(&why);
                Ok(Err(why))
            }
        },
    }
}

/// On a Redis Cluster, a strategy that needs Redis and has a step whose keys may hash to
/// different slots is refused before anything is created, located in its file.
fn cluster_preflight(
    plan: &RunPlan,
    opts: &RunOptions,
    redis: &Result<RedisServer, String>,
) -> Result<(), BackendError> {
    if !redis.as_ref().is_ok_and(|r| r.is_cluster()) {
        return Ok(());
    }
    let recipes = plan.strategies.iter().filter_map(|s| recipe(plan, opts, s).ok()).filter(|r| r.needs_redis());
    match recipes.filter_map(|r| r.cluster_refusal()).next() {
        None => Ok(()),
        Some(why) => Err(BackendError::Refused(format!("{why}; on one Redis server these keys are fine"))),
    }
}

/// File-defined strategies run only where the server gives their namespace its own
/// least-privilege identity, unless the user trusts them explicitly: checked before any
/// load starts, so a refused run leaves nothing half done.
fn sandbox_preflight(
    plan: &RunPlan,
    opts: &RunOptions,
    servers: &[Server],
    redis: &Result<RedisServer, String>,
) -> Result<(), BackendError> {
    let untrusted = |s: &&String| recipe(plan, opts, s).is_ok_and(|r| !r.trusted());
    let Some(file) = plan.strategies.iter().find(untrusted) else { return Ok(()) };
    if opts.trust_strategy_files {
        return Ok(());
    }
    let refuse = |backend: &str, why: &str| {
        Err(BackendError::Refused(format!(
            "file-defined strategy {file} refused on {backend}: {why}; grant that right, or pass \
             --trust-strategy-files to run it with the configured account's rights"
        )))
    };
    for server in servers {
        if let Err(why) = server.sandbox() {
            return refuse(server.dialect().name(), why);
        }
    }
    let file_uses_redis =
        plan.strategies.iter().any(|s| recipe(plan, opts, s).is_ok_and(|r| !r.trusted() && r.needs_redis()));
    if let (true, Ok(r)) = (file_uses_redis, redis)
        && let Err(why) = r.sandbox()
    {
        return refuse("redis", why);
    }
    Ok(())
}

/// The servers a run uses, and the temporary SQLite folder it made (if any).
pub(super) struct Servers {
    pub sql: Vec<Server>,
    /// Redis, or why there is none (then Redis strategies are skipped).
    pub redis: Result<RedisServer, String>,
    /// The broker, or why there is none (then the broker strategies are skipped).
    pub amqp: Result<AmqpServer, String>,
    /// The temporary SQLite folder, removed when this is dropped unless kept.
    pub temp_dir: Option<TempDir>,
    /// Its marker file, locked for the run's life (held, never read: dropping it unlocks).
    pub _temp_lock: Option<std::fs::File>,
}

impl Servers {
    /// Connects everything the plan needs and runs the sandbox preflight; on an error,
    /// nothing is left behind (a temporary folder made so far goes with its guard).
    pub async fn connect(
        plan: &RunPlan,
        opts: &RunOptions,
        run_id: &str,
        log: &mut dyn FnMut(&str),
    ) -> Result<Servers, BackendError> {
        let (sql, temp_dir, temp_lock) = resolve_backends(plan, opts, run_id, log).await?;
        let mut servers =
            Servers { sql, redis: Err(String::new()), amqp: Err(String::new()), temp_dir, _temp_lock: temp_lock };
        let checked = match resolve_redis(plan, opts, log).await {
            Ok(redis) => {
                servers.redis = redis;
                cluster_preflight(plan, opts, &servers.redis)
                    .and_then(|()| sandbox_preflight(plan, opts, &servers.sql, &servers.redis))
            }
            Err(e) => Err(e),
        };
        let checked = match checked {
            Ok(()) => resolve_amqp(plan, opts, log).await.map(|amqp| servers.amqp = amqp),
            Err(e) => Err(e),
        };
        checked.map(|_| servers)
    }

    /// `--keep`: the temporary SQLite folder stays (with the kept namespaces in it).
    /// Its marker becomes a note, so `clean` never removes what the user kept.
    pub fn keep_temp_dir(&mut self) {
        if let Some(dir) = self.temp_dir.take() {
            let kept: PathBuf = dir.keep();
            let note = "kept by counterlab run --keep: remove this folder when done with it\n";
            std::fs::write(kept.join(super::names::SQLITE_MARKER), note).ok();
        }
    }

    /// What the report says about each server.
    pub fn infos(&self) -> Vec<ServerInfo> {
        let mut out: Vec<ServerInfo> = self
            .sql
            .iter()
            .map(|s| ServerInfo {
                backend: s.dialect().name().into(),
                url: s.location().into(),
                version: s.version().into(),
            })
            .collect();
        if let Ok(r) = &self.redis {
            out.push(ServerInfo { backend: "redis".into(), url: r.location().into(), version: r.version().into() });
        }
        if let Ok(r) = &self.amqp {
            out.push(ServerInfo { backend: "rabbitmq".into(), url: r.location().into(), version: r.version().into() });
        }
        out
    }
}
