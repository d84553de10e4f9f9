//! Test helpers: server URLs, plans from inline TOML, and direct SQL on a namespace,
//! independent of counterlab's own check query.

use std::path::PathBuf;
use std::time::Duration;

use counterlab::run::{RunOptions, run_plan};
use counterlab::scenario::{Overrides, RunPlan, parse};
use counterlab_report::Report;
use counterlab_strategies::{DEFAULT_MYSQL_URL, DEFAULT_POSTGRES_URL};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::{AssertSqlSafe, MySqlPool, PgPool};

pub fn pg_url() -> String {
    url(Server::Postgres, DEFAULT_POSTGRES_URL)
}

pub fn mysql_url() -> String {
    url(Server::Mariadb, DEFAULT_MYSQL_URL)
}

pub async fn admin() -> PgPool {
    PgPoolOptions::new().max_connections(2).connect(&pg_url()).await.expect("test PostgreSQL is up (see .ci/run)")
}

pub async fn mysql_admin() -> MySqlPool {
    MySqlPoolOptions::new().max_connections(2).connect(&mysql_url()).await.expect("test MariaDB is up (see .ci/run)")
}

pub fn known() -> Vec<&'static str> {
    counterlab::Registry::builtin().names()
}

pub fn plan(toml: &str) -> RunPlan {
    parse("inline.toml", toml, "inline", &Overrides::default(), &known(), 1).expect("valid test scenario")
}

/// A test's temporary directory, removed when dropped (also when the test fails).
pub struct Tmp(tempfile::TempDir);

impl AsRef<std::path::Path> for Tmp {
    fn as_ref(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl std::ops::Deref for Tmp {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        self.0.path()
    }
}

/// A fresh temporary directory `counterlab-test-<tag>-*`, removed with its guard.
pub fn tempdir(tag: &str) -> Tmp {
    Tmp(tempfile::Builder::new().prefix(&format!("counterlab-test-{tag}-")).tempdir().expect("a temporary directory"))
}

/// Every file under `dir`, in sub-folders too (none when `dir` does not exist).
pub fn files_under(dir: &std::path::Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files = Vec::new();
    for e in entries.map(|e| e.unwrap().path()) {
        if e.is_dir() { files.extend(files_under(&e)) } else { files.push(e) }
    }
    files.sort();
    files
}

/// A directory for SQLite namespaces that outlives the run (not the test), so tests can
/// inspect files.
pub fn sqlite_dir(tag: &str) -> Tmp {
    tempdir(tag)
}

pub fn options(keep: bool, sqlite: Option<PathBuf>) -> RunOptions {
    RunOptions {
        postgres_url: Some(pg_url()),
        postgres_default: DEFAULT_POSTGRES_URL.to_string(),
        mysql_url: Some(mysql_url()),
        redis_url: Some(crate::redis::redis_url()),
        amqp_url: Some(crate::mq::amqp_url()),
        postgres_replica_url: None,
        redis_replica_url: None,
        sqlite_dir: sqlite,
        keep,
        history_dir: None,
        history_limit: counterlab::run::HISTORY_LIMIT,
        connect_timeout: Duration::from_secs(5),
        cancel: Default::default(),
        progress: None,
        trust_strategy_files: false,
        registry: counterlab::Registry::builtin(),
        on_phase: None,
    }
}

/// Runs a plan with `--keep` so the test can inspect what is stored.
pub async fn run_kept(plan: &RunPlan, sqlite: Option<PathBuf>) -> Report {
    run_plan(plan, &options(true, sqlite), &mut |_| {}).await.expect("run succeeds")
}

const DRIFT_SQL: &str = "SELECT c.user_id, c.unread, (SELECT COUNT(*) FROM {ns}notifications n \
     WHERE n.user_id = c.user_id AND n.is_read = FALSE) FROM {ns}unread_counts c ORDER BY c.user_id";

/// (user, counter, truth) for every counter row of a kept namespace, computed here with
/// our own SQL; then the namespace is removed.
/// For `<sql>+redis` backends the run's Redis keys are deleted too (the SQL counter
/// column is then not the strategy's counter; see `redis.rs` for those checks).
pub async fn stored_drift_and_drop(backend: &str, namespace: &str, sqlite: Option<&PathBuf>) -> Vec<(i64, i64, i64)> {
    let backend = match backend.strip_suffix("+redis") {
        Some(sql) => {
            use redis::AsyncCommands;
            let mut c = redis::Client::open(crate::redis::redis_url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let keys: Vec<String> =
                c.keys(format!("{}*", counterlab_strategies::redis_prefix(namespace))).await.unwrap();
            if !keys.is_empty() {
                c.del::<_, ()>(keys).await.unwrap();
            }
            sql
        }
        // The broker's queue goes with the run (also a kept one): only SQL is left.
        None => backend.strip_suffix("+rabbitmq").unwrap_or(backend),
    };
    match backend {
        "postgres" => {
            let a = admin().await;
            let rows = sqlx::query_as(AssertSqlSafe(DRIFT_SQL.replace("{ns}", &format!("\"{namespace}\"."))))
                .fetch_all(&a)
                .await
                .expect("inspect schema");
            drop_schema(&a, namespace).await;
            rows
        }
        "mysql" => {
            let a = mysql_admin().await;
            let rows = sqlx::query_as(AssertSqlSafe(DRIFT_SQL.replace("{ns}", &format!("`{namespace}`."))))
                .fetch_all(&a)
                .await
                .expect("inspect database");
            sqlx::query(AssertSqlSafe(format!("DROP DATABASE `{namespace}`"))).execute(&a).await.unwrap();
            rows
        }
        "sqlite" => {
            let path = sqlite.expect("sqlite dir").join(format!("{namespace}.sqlite3"));
            let p = SqlitePoolOptions::new()
                .max_connections(1)
                .connect(&format!("sqlite://{}", path.display()))
                .await
                .unwrap();
            let rows =
                sqlx::query_as(AssertSqlSafe(DRIFT_SQL.replace("{ns}", ""))).fetch_all(&p).await.expect("inspect file");
            p.close().await;
            rows
        }
        other => panic!("unknown backend {other}"),
    }
}

/// Drops a schema and, when a kept namespace left it, the role that owns it.
pub async fn drop_schema(admin: &PgPool, schema: &str) {
    let sql = format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE; DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = \
         '{schema}') THEN EXECUTE 'DROP OWNED BY \"{schema}\"; DROP ROLE \"{schema}\"'; END IF; END $$"
    );
    sqlx::raw_sql(AssertSqlSafe(sql)).execute(admin).await.expect("drop test schema");
}

pub async fn schema_exists(admin: &PgPool, schema: &str) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
        .bind(schema)
        .fetch_one(admin)
        .await
        .expect("query pg_namespace")
}

/// The tests that time the driver (open loop) take it alone (write); the CPU-heavy tests
/// (property tests, the isolation matrix, every shipped scenario, the zoo, Chromium)
/// share it (read). So on a 2-core machine a timing assertion measures the driver, not
/// its neighbours, while the heavy tests still run beside each other and the light ones.
pub static LOAD: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// For a test that times the driver: no heavy test runs meanwhile.
pub async fn alone() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    LOAD.write().await
}

/// For a CPU-heavy async test: never beside a timing test.
pub async fn heavy() -> tokio::sync::RwLockReadGuard<'static, ()> {
    LOAD.read().await
}

/// For a CPU-heavy test outside the runtime (a plain `#[test]`).
pub fn heavy_blocking() -> tokio::sync::RwLockReadGuard<'static, ()> {
    LOAD.blocking_read()
}

/// A Redis of the test's own on a free loopback port (never the shared one), killed on
/// drop; `tls`: TLS only (Debian's snakeoil certificate), no plain-text port at all. With
/// a folder (`start_persistent`) it keeps its data there (AOF, fsync on every write) and
/// its ACL users in an ACL file, so a restart finds both again.
pub struct PrivateRedis(pub std::process::Child, pub u16, Option<PathBuf>);

impl PrivateRedis {
    pub fn start(tls: bool) -> PrivateRedis {
        PrivateRedis::start_on(free_port(), tls)
    }

    /// A Redis whose data (AOF) and ACL file live in `dir`.
    pub fn start_persistent(dir: &std::path::Path) -> PrivateRedis {
        std::fs::write(dir.join("users.acl"), "").expect("an empty ACL file");
        PrivateRedis::spawn(free_port(), false, Some(dir.to_path_buf()), &[])
    }

    /// Stops this server and starts a fresh one on the same port: a restart without
    /// persistence (every key and ACL user gone), or with it when started persistent.
    pub fn restart(&mut self) {
        self.stop();
        *self = PrivateRedis::spawn(self.1, false, self.2.take(), &[]);
    }

    /// Kills the server (SIGKILL) and reaps it; `restart` starts it again.
    pub fn stop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }

    pub fn start_on(port: u16, tls: bool) -> PrivateRedis {
        PrivateRedis::spawn(port, tls, None, &[])
    }

    /// A plain Redis started with `config` added to its command line.
    pub fn start_with(config: &[&str]) -> PrivateRedis {
        PrivateRedis::spawn(free_port(), false, None, config)
    }

    fn spawn(port: u16, tls: bool, dir: Option<PathBuf>, config: &[&str]) -> PrivateRedis {
        let mut cmd = std::process::Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--save", ""]).args(config);
        match &dir {
            Some(d) => cmd
                .args(["--dir", d.to_str().unwrap(), "--appendonly", "yes", "--appendfsync", "always"])
                .args(["--aclfile", d.join("users.acl").to_str().unwrap()]),
            None => cmd.args(["--appendonly", "no"]),
        };
        if tls {
            cmd.args(["--port", "0", "--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
                .args(["--tls-cert-file", "/etc/ssl/certs/ssl-cert-snakeoil.pem"])
                .args(["--tls-key-file", "/etc/ssl/private/ssl-cert-snakeoil.key"]);
        } else {
            cmd.args(["--port", &port.to_string()]);
        }
        let child = cmd.stdout(std::process::Stdio::null()).spawn().expect("redis-server (Debian's package) starts");
        let mut redis = PrivateRedis(child, port, dir);
        // Bounded: the port accepts within 5 s or the test fails.
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return redis;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        redis.stop();
        panic!("the private Redis did not listen within 5 s");
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads a child's stderr until a line satisfies `found` (returned with everything seen
/// so far); the stream ending first fails the test with what the run printed.
pub fn wait_for_line(stderr: &mut impl std::io::BufRead, what: &str, found: impl Fn(&str) -> bool) -> (String, String) {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            panic!("run ended before {what}:\n{seen}");
        }
        seen += &line;
        if found(&line) {
            return (line, seen);
        }
    }
}

pub use counterlab::containers::Service as Server;

/// The variable that names each server's URL for the tests (and for counterlab).
fn env_var(s: Server) -> &'static str {
    match s {
        Server::Postgres => "COUNTERLAB_POSTGRES_URL",
        Server::Mariadb => "COUNTERLAB_MYSQL_URL",
        Server::Redis => "COUNTERLAB_REDIS_URL",
        Server::Rabbitmq => "COUNTERLAB_AMQP_URL",
    }
}

/// Each server's resolution, once per test process: its URL, or what was tried.
static RESOLVED: [std::sync::OnceLock<Result<String, String>>; 4] = [const { std::sync::OnceLock::new() }; 4];

fn slot(s: Server) -> &'static std::sync::OnceLock<Result<String, String>> {
    &RESOLVED[s as usize]
}

/// The URL the tests use for `s`: the one `server` resolved, else the variable, else the
/// local default (never probes: a test that needs the server gates on it first).
pub fn url(s: Server, default: &str) -> String {
    if let Some(Ok(u)) = slot(s).get() {
        return u.clone();
    }
    std::env::var(env_var(s)).ok().filter(|u| !u.is_empty()).unwrap_or_else(|| default.to_string())
}

/// `host:port` of a URL (no credentials), for probing and messages.
fn host_port(url: &str, default_port: u16) -> (String, u16) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let hostport = rest.split(['/', '?']).next().unwrap_or(rest);
    match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
            (h.trim_matches(['[', ']']).to_string(), p.parse().unwrap_or(default_port))
        }
        _ => (hostport.trim_matches(['[', ']']).to_string(), default_port),
    }
}

/// Where `s` is for the tests, resolved once: the variable's URL when set (it must
/// answer: no fallback from an explicit choice), else the local default when it
/// accepts a TCP connection within 300 ms, else a container when a Docker engine
/// answers (built with the `containers` feature), else what was tried.
pub fn server(s: Server) -> Result<String, String> {
    slot(s).get_or_init(|| resolve(s)).clone()
}

fn resolve(s: Server) -> Result<String, String> {
    use counterlab::containers::{docker_engine, spec, tcp_answers};
    let probe = Duration::from_millis(300);
    let spec = spec(s);
    let var = env_var(s);
    if let Some(u) = std::env::var(var).ok().filter(|u| !u.is_empty()) {
        let (h, p) = host_port(&u, spec.port);
        return if tcp_answers(&h, p, probe) { Ok(u) } else { Err(format!("tried {var} ({h}:{p}): no answer")) };
    }
    if tcp_answers("127.0.0.1", spec.port, probe) {
        return Ok(spec.default_url());
    }
    let engine = docker_engine(probe);
    let tried = format!("tried {var} (unset), 127.0.0.1:{} (no answer), {}", spec.port, engine.describe());
    if !engine.answers() {
        return Err(tried);
    }
    container(s).map_err(|e| format!("{tried}: {e}"))
}

/// Starts `s` in a container for the rest of the test process (labelled
/// `org.counterlab.run=tests`: scripts/test.sh removes them when the run ends).
#[cfg(feature = "containers")]
fn container(s: Server) -> Result<String, String> {
    static KEPT: std::sync::Mutex<Vec<counterlab::containers::Started>> = std::sync::Mutex::new(Vec::new());
    // A thread of its own: the caller may be inside a test's runtime.
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        let started = rt.block_on(counterlab::containers::start(counterlab::containers::spec(s), "tests"))?;
        let url = started.url.clone();
        KEPT.lock().unwrap_or_else(|p| p.into_inner()).push(started);
        // The runtime goes, the container stays (never dropped: removed by its label).
        std::mem::forget(rt);
        Ok(url)
    })
    .join()
    .unwrap_or_else(|_| Err("the container thread panicked".into()))
}

#[cfg(not(feature = "containers"))]
fn container(_: Server) -> Result<String, String> {
    Err("this build has no `containers` feature".into())
}

/// The file the skipped tests are listed in (one line each), in the target directory:
/// scripts/test.sh empties it first and prints it last.
pub fn skip_list() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/it-<hash>
    let target = exe.ancestors().nth(3).map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    target.join("counterlab-skipped.txt")
}

/// Lists a skipped test: a loud line on stderr and one in `skip_list()`.
pub fn skip(line: &str) {
    eprintln!("{line}");
    use std::io::Write as _;
    let file = std::fs::OpenOptions::new().create(true).append(true).open(skip_list());
    if let Err(e) = file.and_then(|mut f| f.write_all(format!("{line}\n").as_bytes())) {
        eprintln!("warning: cannot append to {}: {e}", skip_list().display());
    }
}

/// Whether a Docker engine answers and this build can start containers; else the test
/// is skipped and listed. Never a failure, also with COUNTERLAB_REQUIRE_SERVERS=1: the
/// servers the suite needs can come without Docker (CI here has none).
pub fn docker_available(test: &str) -> bool {
    let engine = counterlab::containers::docker_engine(Duration::from_millis(300));
    let why = match (engine.answers(), counterlab::containers::CAN_START) {
        (true, true) => return true,
        (true, false) => "a Docker engine answers, but this build has no `containers` feature".to_string(),
        (false, _) => engine.describe(),
    };
    skip(&format!("SKIPPED {test}: {why}"));
    false
}

/// Whether the servers a test needs are all there. When one is missing the test is
/// skipped: a loud `SKIPPED <test>: no <server> (tried ...)` on stderr and a line in
/// `skip_list()`; with COUNTERLAB_REQUIRE_SERVERS=1 it fails instead.
pub fn available(test: &str, needs: &[Server]) -> bool {
    let missing: Vec<String> = needs
        .iter()
        .filter_map(|s| server(*s).err().map(|why| format!("no {} ({why})", counterlab::containers::spec(*s).label)))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let why = missing.join("; ");
    if std::env::var("COUNTERLAB_REQUIRE_SERVERS").is_ok_and(|v| v == "1") {
        panic!("MISSING SERVER for {test}: {why}\nCOUNTERLAB_REQUIRE_SERVERS=1: a missing server fails the test");
    }
    skip(&format!("SKIPPED {test}: {why}"));
    false
}

/// The calling test's path (`redis::flusher_crash_...`), from an item declared in it.
pub fn test_name(item_path: &'static str) -> String {
    let path = item_path.strip_prefix("it::").unwrap_or(item_path);
    path.split("::").filter(|p| *p != "{{closure}}" && *p != "here").collect::<Vec<_>>().join("::")
}

/// The first line of a server-backed test: `require!(Postgres, Redis);` returns from the
/// test (skipped, listed) when one of them is missing; see `available`.
#[macro_export]
macro_rules! require {
    ($($s:ident),+ $(,)?) => {
        fn here() {}
        if !$crate::util::available(
            &$crate::util::test_name(std::any::type_name_of_val(&here)),
            &[$($crate::util::Server::$s),+],
        ) {
            return;
        }
    };
}
