//! The servers' own bounds on a namespace's identity (issue 31), run for real: a runaway
//! statement sent over the namespace's connections ends on the server at the op timeout
//! (PostgreSQL `statement_timeout`, MariaDB `MAX_STATEMENT_TIME`, SQLite's progress
//! handler), nothing of it still runs a second later, and the role's caps cannot be lifted;
//! what reaches other sessions is refused at load while sentinels see nothing.

use std::time::{Duration, Instant};

use counterlab_strategies::{Db, Isolation, Namespace, PoolSpec, Server};

use crate::util;

/// The op timeout the namespaces here run with.
const OP: Duration = Duration::from_millis(1000);
/// How long a runaway statement may take to fail (the client's own give-up is OP + 5 s).
const GIVE_UP: Duration = Duration::from_secs(6);

fn spec(isolation: Isolation) -> PoolSpec {
    PoolSpec { max_connections: 2, acquire_timeout: OP, isolation }
}

async fn namespace(server: &Server, tag: &str, isolation: Isolation) -> Namespace {
    let name = counterlab::run::namespace_name(&counterlab::run::new_run_id(), tag);
    server.create_namespace(&name, spec(isolation)).await.unwrap()
}

/// Runs `sql` as the namespace's identity with a client bound far past the op timeout:
/// the server (or SQLite's handler) must end it first, with an error.
async fn runaway(db: &Db, sql: &'static str) -> String {
    let started = Instant::now();
    let r = tokio::time::timeout(GIVE_UP, db.opt_i64(sql, &[])).await;
    let e = match r {
        Ok(Err(e)) => e.to_string(),
        Ok(Ok(v)) => panic!("the runaway statement finished with {v:?}"),
        Err(_) => panic!("the runaway statement still ran after {GIVE_UP:?}: the server did not end it"),
    };
    assert!(started.elapsed() >= OP / 2, "ended before the bound: {e}");
    e
}

/// An admin connection to the server whose sessions `nothing_left_running` counts.
enum Admin {
    Pg(sqlx::PgPool),
    My(sqlx::MySqlPool),
}

/// PostgreSQL: the role's statements still running.
const PG_ACTIVE: &str = "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND state = 'active'";
/// MariaDB: the user's statements still running.
const MY_ACTIVE: &str = "SELECT COUNT(*) FROM information_schema.processlist WHERE user = ? AND command = 'Query'";

/// Runs `query` (one count, bound to `identity`) on `admin`.
async fn count_of(admin: &Admin, query: &'static str, identity: &str) -> i64 {
    match admin {
        Admin::Pg(p) => sqlx::query_scalar(query).bind(identity).fetch_one(p).await.unwrap(),
        Admin::My(p) => sqlx::query_scalar(query).bind(identity).fetch_one(p).await.unwrap(),
    }
}

/// Polls `query` (the statements of `identity` still running) for up to 1 s after the
/// op; every poll must find none once the first has.
async fn nothing_left_running(admin: &Admin, query: &'static str, identity: &str) {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut n = count_of(admin, query, identity).await;
    while n > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        n = count_of(admin, query, identity).await;
    }
    assert_eq!(n, 0, "a statement of {identity} still runs 1 s after its op ended");
}

#[tokio::test]
async fn postgres_ends_a_runaway_statement_and_its_caps_hold() {
    crate::require!(Postgres);
    let server = Server::connect_postgres(&util::pg_url(), Duration::from_secs(5)).await.unwrap();
    let ns = namespace(&server, "bounds-pg", Isolation::ReadCommitted).await;
    let e = runaway(ns.db(), "SELECT count(*) FROM unread_counts, generate_series(1, 100000000000)").await;
    assert!(e.contains("statement timeout"), "{e}");
    let admin = util::admin().await;
    let role = ns.name().to_string();
    nothing_left_running(&Admin::Pg(admin.clone()), PG_ACTIVE, &role).await;
    let Db::Pg(pool) = ns.db() else { unreachable!() };
    let shown: (String, String, String) =
        sqlx::query_as("SELECT current_setting('statement_timeout'), current_setting('temp_file_limit'), current_setting('lock_timeout')")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(shown, ("1s".into(), "2GB".into(), "1s".into()));
    let lift = sqlx::raw_sql("SET temp_file_limit = -1").execute(pool).await.unwrap_err().to_string();
    assert!(lift.contains("permission denied"), "{lift}");
    ns.drop_namespace().await.unwrap();
    assert!(!util::schema_exists(&admin, &role).await);
}

#[tokio::test]
async fn postgres_teardown_ends_the_identitys_sessions() {
    crate::require!(Postgres);
    let server = Server::connect_postgres(&util::pg_url(), Duration::from_secs(5)).await.unwrap();
    let ns = namespace(&server, "bounds-pg-td", Isolation::ReadCommitted).await;
    let Db::Pg(pool) = ns.db() else { unreachable!() };
    // A connection of the role outside the pool, holding a lock the DROP needs.
    let mut held = sqlx::ConnectOptions::connect(pool.connect_options().as_ref()).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE notifications IN ACCESS EXCLUSIVE MODE").execute(&mut held).await.unwrap();
    let role = ns.name().to_string();
    let started = Instant::now();
    ns.drop_namespace().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "teardown took {:?}", started.elapsed());
    assert!(!util::schema_exists(&util::admin().await, &role).await);
    drop(held);
}

#[tokio::test]
async fn mariadb_ends_a_runaway_statement() {
    crate::require!(Mariadb);
    let server = Server::connect_mysql(&util::mysql_url(), Duration::from_secs(5)).await.unwrap();
    let ns = namespace(&server, "bounds-my", Isolation::ReadCommitted).await;
    let e = runaway(ns.db(), "SELECT SLEEP(100)").await;
    assert!(e.contains("max_statement_time"), "{e}");
    let user = counterlab_strategies::mysql_user(ns.name());
    nothing_left_running(&Admin::My(util::mysql_admin().await), MY_ACTIVE, &user).await;
    ns.drop_namespace().await.unwrap();
}

#[tokio::test]
async fn sqlite_interrupts_an_endless_recursive_query() {
    let dir = util::sqlite_dir("bounds");
    let server = Server::open_sqlite(&dir).await.unwrap();
    let ns = namespace(&server, "bounds-lite", Isolation::Serializable).await;
    let e = runaway(ns.db(), "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c")
        .await;
    assert!(e.contains("interrupted"), "{e}");
    // The connection still serves the next statement.
    assert_eq!(ns.db().opt_i64("SELECT count(*) FROM unread_counts", &[]).await.unwrap(), Some(0));
    ns.drop_namespace().await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A strategy file whose count read is a Lua loop that never ends (and never writes).
const LOOPING_SCRIPT: &str = r#"
name = "bounds-lua"
seed = 5
strategies = ["looping-read"]
backends = ["postgres"]

[data]
users = 2
notifications_per_user = 2

[workload]
workers = 1
duration_s = 2
op_timeout_ms = 1500

[workload.mix]
create = 1
read_count = 1

[strategy.looping-read]
guarantee = "exact"
summary = "the count read loops forever"
transaction = false
redis_counters = { key = "c:{user}" }

[[strategy.looping-read.redis_seed]]
redis = "SET"
keys = ["c:{user}"]
args = ["{unread}"]

[[strategy.looping-read.create]]
name = "ins"
sql = { postgres = "INSERT INTO notifications (user_id) VALUES (:user) RETURNING id", mysql = "INSERT INTO notifications (user_id) VALUES (:user)", sqlite = "INSERT INTO notifications (user_id) VALUES (:user)" }
[[strategy.looping-read.create]]
redis = "INCR"
keys = ["c:{user}"]

[[strategy.looping-read.mark_read]]
name = "set"
sql = "UPDATE notifications SET is_read = TRUE WHERE id = :id AND user_id = :user AND NOT is_read"
[[strategy.looping-read.delete]]
name = "del"
sql = "DELETE FROM notifications WHERE id = :id AND user_id = :user"
[[strategy.looping-read.mark_all_read]]
name = "all"
sql = "UPDATE notifications SET is_read = TRUE WHERE user_id = :user AND NOT is_read"

[[strategy.looping-read.read_count]]
name = "n"
lua = """
local i = 0
while i >= 0 do i = i + 1 end
return redis.call('GET', KEYS[1])
"""
keys = ["c:{user}"]

[strategy.looping-read.result]
create = "ins.last_id"
mark_read = "set.rows == 1"
delete = "del.rows"
mark_all_read = "all.rows"
read_count = "n.value"
"#;

#[tokio::test]
async fn a_lua_loop_is_killed_and_redis_answers_after_the_run() {
    crate::require!(Postgres);
    // A Redis of the test's own: the loop would block the shared one for every test.
    let redis = util::PrivateRedis::start_with(&["--busy-reply-threshold", "1000"]);
    let url = format!("redis://127.0.0.1:{}", redis.1);
    let plan = util::plan(LOOPING_SCRIPT);
    let mut options = util::options(false, None);
    options.redis_url = Some(url.clone());
    let started = Instant::now();
    let mut progress = |_: &str| {};
    let run = counterlab::run::run_plan(&plan, &options, &mut progress);
    let report = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the run ends within 120 s")
        .expect("the run gives a report");
    let row = &report.strategies[0];
    assert!(!row.check.label().starts_with("pass"), "a count read that never returns passed: {}", row.check.label());
    let mut c = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    let ping = redis::cmd("PING");
    let ping = tokio::time::timeout(Duration::from_millis(2500), ping.query_async::<String>(&mut c));
    assert_eq!(ping.await.expect("Redis answers within the op timeout + 1 s").unwrap(), "PONG");
    let users: Vec<String> = redis::cmd("ACL").arg("USERS").query_async(&mut c).await.unwrap();
    assert_eq!(users, vec!["default".to_string()], "the run's ACL user is gone");
    let keys: Vec<String> = redis::cmd("KEYS").arg("cl:*").query_async(&mut c).await.unwrap();
    assert!(keys.is_empty(), "keys left: {keys:?}");
    eprintln!("looping run: {} in {:?}", row.check.label(), started.elapsed());
}

#[tokio::test]
async fn a_fault_the_strategy_cannot_take_is_refused_before_the_load() {
    let plan = util::plan(
        "strategies = [\"conditional-update\"]\nbackends = [\"sqlite\"]\n[data]\nusers = 5\nnotifications_per_user = 2\n\
         [workload]\nworkers = 1\nops = 50\n[workload.mix]\nmark_read = 1\n\
         [[faults]]\nkind = \"flusher_crash\"\nat_ms = 10\ntimes = 3\n",
    );
    let mut progress = |_: &str| {};
    let e = counterlab::run::run_plan(&plan, &util::options(false, None), &mut progress).await.err();
    let e = format!("{:#}", e.expect("a fault conditional-update cannot take is refused"));
    assert!(
        e.contains("schedules flusher_crash for conditional-update, which cannot take it")
            && e.contains("it takes: crash_after_commit, error_before_commit, pause"),
        "{e}"
    );
}

/// A strategy file whose count read is a runaway statement on each SQL backend: a
/// product of 10^11 rows (PostgreSQL), a five-way cross join of the notifications
/// (MariaDB: its recursive CTEs stop at `max_recursive_iterations`, 1000 by default;
/// `SLEEP` is refused in strategy files), an endless recursive CTE (SQLite).
const RUNAWAY_FILE: &str = r#"
[strategy.runaway-read]
guarantee = "exact"
summary = "the count read never ends on its own"

[[strategy.runaway-read.create]]
name = "ins"
sql = { postgres = "INSERT INTO notifications (user_id) VALUES (:user) RETURNING id", mysql = "INSERT INTO notifications (user_id) VALUES (:user)", sqlite = "INSERT INTO notifications (user_id) VALUES (:user)" }
[[strategy.runaway-read.create]]
sql = "UPDATE unread_counts SET unread = unread + 1 WHERE user_id = :user"

[[strategy.runaway-read.mark_read]]
name = "set"
sql = "UPDATE notifications SET is_read = TRUE WHERE id = :id AND user_id = :user AND NOT is_read"
[[strategy.runaway-read.mark_read]]
when = "set.rows == 1"
sql = "UPDATE unread_counts SET unread = unread - 1 WHERE user_id = :user"

[[strategy.runaway-read.delete]]
name = "del"
sql = "DELETE FROM notifications WHERE id = :id AND user_id = :user AND NOT is_read"
[[strategy.runaway-read.delete]]
when = "del.rows == 1"
sql = "UPDATE unread_counts SET unread = unread - 1 WHERE user_id = :user"

[[strategy.runaway-read.mark_all_read]]
name = "all"
sql = "UPDATE notifications SET is_read = TRUE WHERE user_id = :user AND NOT is_read"
[[strategy.runaway-read.mark_all_read]]
sql = "UPDATE unread_counts SET unread = unread - :all.rows WHERE user_id = :user"

[[strategy.runaway-read.read_count]]
name = "c"
sql = { postgres = "SELECT count(*) FROM unread_counts, generate_series(1, 100000000000)", mysql = "SELECT count(*) FROM notifications a, notifications b, notifications c, notifications d, notifications e", sqlite = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r" }
returns = ["n"]

[strategy.runaway-read.result]
create = "ins.last_id"
mark_read = "set.rows == 1"
delete = "del.rows"
mark_all_read = "all.rows"
read_count = "c.n"
"#;

/// The scenario around `RUNAWAY_FILE` on `backend`: a long load, an op timeout short
/// of the 10 s the signal is given, 200 notifications (the MariaDB join's rows).
fn runaway_scenario(backend: &str) -> String {
    format!(
        "name = \"bounds-sigterm\"\nseed = 3\nstrategies = [\"runaway-read\"]\nbackends = [\"{backend}\"]\n\
         strategy_files = [\"runaway.toml\"]\n\
         [data]\nusers = 10\nnotifications_per_user = 20\n\
         [workload]\nworkers = 2\nduration_s = 600\nop_timeout_ms = 2500\n\
         [workload.mix]\nmark_read = 1\nread_count = 3\n"
    )
}

/// The signal's budget: load stopped, the runaway ended, checked, reported, torn down.
const SIGTERM_BUDGET: Duration = Duration::from_secs(10);

/// Runs the runaway scenario on `backend` (`args` added to `run`), sends SIGTERM once
/// its load started and waits at most `SIGTERM_BUDGET` for the exit (killed and failed
/// past it): exit 143, `interrupted: true`; the report's namespace is returned.
fn sigterm_mid_runaway(backend: &str, args: &[&str]) -> String {
    use std::io::{BufReader, Read};
    use std::process::{Command, Stdio};
    let dir = util::tempdir("bounds-sigterm");
    std::fs::write(dir.join("runaway.toml"), RUNAWAY_FILE).unwrap();
    std::fs::write(dir.join("scenario.toml"), runaway_scenario(backend)).unwrap();
    let out = dir.join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", dir.join("scenario.toml").to_str().unwrap(), "--out", out.to_str().unwrap()])
        .args(args)
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .env("COUNTERLAB_MYSQL_URL", util::mysql_url())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let (_, seen) = util::wait_for_line(&mut stderr, "its load started", |l| l.contains("seeded"));
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).ok();
        s
    });
    let sent = Instant::now();
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if sent.elapsed() > SIGTERM_BUDGET {
            child.kill().ok();
            child.wait().ok();
            panic!("{backend}: counterlab still ran {SIGTERM_BUDGET:?} after SIGTERM:\n{seen}{}", rest.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = format!("{seen}{}", rest.join().unwrap());
    eprintln!("{backend}: exited {:?} after SIGTERM", sent.elapsed());
    assert_eq!(status.code(), Some(143), "{backend}: {log}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).expect("report.json")).unwrap();
    assert_eq!(json["interrupted"], true, "{backend}: {log}");
    json["strategies"][0]["namespace"].as_str().expect("the row names its namespace").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_a_postgres_run_mid_runaway_within_10s() {
    crate::require!(Postgres);
    let ns = tokio::task::spawn_blocking(|| sigterm_mid_runaway("postgres", &[])).await.unwrap();
    let admin = util::admin().await;
    assert!(!util::schema_exists(&admin, &ns).await, "schema {ns} left");
    let roles: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_roles WHERE rolname = $1")
        .bind(&ns)
        .fetch_one(&admin)
        .await
        .unwrap();
    assert_eq!(roles, 0, "role {ns} left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_a_mariadb_run_mid_runaway_within_10s() {
    crate::require!(Mariadb);
    let ns = tokio::task::spawn_blocking(|| sigterm_mid_runaway("mysql", &[])).await.unwrap();
    let admin = util::mysql_admin().await;
    let dbs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?")
        .bind(&ns)
        .fetch_one(&admin)
        .await
        .unwrap();
    assert_eq!(dbs, 0, "database {ns} left");
    let users: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM mysql.user WHERE user = ?")
        .bind(counterlab_strategies::mysql_user(&ns))
        .fetch_one(&admin)
        .await
        .unwrap();
    assert_eq!(users, 0, "user of {ns} left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_an_sqlite_run_mid_runaway_within_10s() {
    let dir = util::sqlite_dir("bounds-sigterm-lite");
    let ns = tokio::task::spawn_blocking({
        let d = dir.to_str().unwrap().to_string();
        move || sigterm_mid_runaway("sqlite", &["--sqlite", &d])
    })
    .await
    .unwrap();
    assert!(ns.starts_with("cl_"), "{ns}");
    assert_eq!(util::files_under(&dir), Vec::<std::path::PathBuf>::new(), "files of {ns} left");
}

/// A strategy file whose count read is `read`, on `backend`.
fn reaching(backend: &str, read: &str) -> String {
    format!(
        r#"
strategies = ["reaching"]
backends = ["{backend}"]
[data]
users = 2
notifications_per_user = 2
[workload]
workers = 1
ops = 20
[workload.mix]
read_count = 1
[strategy.reaching]
guarantee = "exact"
summary = "the count read reaches other sessions"
transaction = false
[[strategy.reaching.create]]
name = "ins"
sql = {{ postgres = "INSERT INTO notifications (user_id) VALUES (:user) RETURNING id", mysql = "INSERT INTO notifications (user_id) VALUES (:user)", sqlite = "INSERT INTO notifications (user_id) VALUES (:user)" }}
[[strategy.reaching.mark_read]]
name = "set"
sql = "UPDATE notifications SET is_read = TRUE WHERE id = :id AND user_id = :user AND NOT is_read"
[[strategy.reaching.delete]]
name = "del"
sql = "DELETE FROM notifications WHERE id = :id AND user_id = :user"
[[strategy.reaching.mark_all_read]]
name = "all"
sql = "UPDATE notifications SET is_read = TRUE WHERE user_id = :user AND NOT is_read"
[[strategy.reaching.read_count]]
name = "n"
sql = "{read}"
[strategy.reaching.result]
create = "ins.last_id"
mark_read = "set.rows == 1"
delete = "del.rows"
mark_all_read = "all.rows"
read_count = "n.value"
"#
    )
}

/// NOTIFY, advisory locks and GET_LOCK from a strategy file are refused at load, at the
/// step's line; sentinel sessions see nothing of them: a LISTEN gets only the test's own
/// control notification, and the locks stay free.
#[tokio::test]
async fn what_reaches_other_sessions_is_refused_at_load_and_a_sentinel_sees_nothing() {
    crate::require!(Postgres, Mariadb);
    let mut listener = sqlx::postgres::PgListener::connect(&util::pg_url()).await.unwrap();
    listener.listen_all(["1", "cl_sentinel"]).await.unwrap();
    let cases = [
        // (No string literals: a step may not have any; the channel and lock are "1".)
        ("postgres", "SELECT pg_notify(CAST(1 AS text), CAST(2 AS text))"),
        ("postgres", "SELECT pg_advisory_lock(4242)"),
        ("mysql", "SELECT GET_LOCK(1, 10)"),
    ];
    for (backend, read) in cases {
        let toml = reaching(backend, read);
        let known = util::known();
        let e = counterlab::scenario::parse("reach.toml", &toml, "reach", &Default::default(), &known, 1)
            .expect_err(read)
            .to_string();
        assert!(e.contains("reach.toml:") && e.contains("reaches outside"), "{read}: {e}");
    }
    let admin = util::admin().await;
    sqlx::query("SELECT pg_notify('cl_sentinel', 'control')").execute(&admin).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), listener.recv()).await.unwrap().unwrap();
    assert_eq!(first.payload(), "control", "the sentinel heard the strategy");
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242")
        .fetch_one(&admin)
        .await
        .unwrap();
    assert_eq!(held, 0);
    let free: Option<i64> =
        sqlx::query_scalar("SELECT IS_FREE_LOCK('1')").fetch_one(&util::mysql_admin().await).await.unwrap();
    assert_eq!(free, Some(1));
}
