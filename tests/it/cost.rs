//! `StrategyReport.cost` against the servers' statistics read independently, here: WAL
//! bytes against a `pg_current_wal_lsn()` difference taken around the load, updated and
//! HOT counts against `pg_stat_user_tables` of the kept namespace, MariaDB row lock waits
//! with contention and without, and Redis EVALSHA calls against an `INFO commandstats`
//! delta on a Redis of the test's own.

use std::sync::{Arc, Mutex};

use counterlab::run::{Phase, run_plan};
use counterlab_report::{CostSource, Report, Scope};

use crate::util;

/// A small closed-loop run of `strategy` on `backend` (seconds).
fn scenario(backend: &str, strategy: &str, users: u32, workers: u32) -> String {
    format!(
        "backends = [\"{backend}\"]\nstrategies = [\"{strategy}\"]\n\
         [data]\nusers = {users}\nnotifications_per_user = 20\n\
         [workload]\nworkers = {workers}\nduration_s = 1.5\nsample_drift = false\n\
         [workload.mix]\ncreate = 1\nmark_read = 4\ndelete = 1\nmark_all_read = 1\nread_count = 2\n"
    )
}

/// `f` run on a thread of its own with its own runtime (a phase hook is synchronous and
/// runs on the run's thread).
fn blocking<T: Send + 'static>(f: impl std::future::Future<Output = T> + Send + 'static) -> T {
    std::thread::spawn(move || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f))
        .join()
        .unwrap()
}

/// Runs `plan` with `read` called (with the namespace) as the load starts and as the
/// check starts (after settle); returns the report and the two values.
async fn run_reading<T: Send + 'static>(
    plan: &counterlab::scenario::RunPlan,
    opts: counterlab::run::RunOptions,
    read: fn(&str) -> T,
) -> (Report, Vec<T>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut opts = opts;
    let s = seen.clone();
    opts.on_phase = Some(Arc::new(move |p: Phase, ns: &str| {
        if matches!(p, Phase::Load | Phase::Check) {
            s.lock().unwrap().push(read(ns));
        }
    }));
    let r = run_plan(plan, &opts, &mut |l| eprintln!("{l}")).await.expect("the run completes");
    let values = std::mem::take(&mut *seen.lock().unwrap());
    (r, values)
}

fn source<'a>(r: &'a Report, name: &str) -> &'a CostSource {
    let cost = r.strategies[0].cost.as_ref().expect("a cost");
    let s = cost.sources.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no {name}: {cost:?}"));
    assert!(s.error.is_none(), "{s:?}");
    s
}

/// The WAL position (bytes) and how many other counterlab namespaces' sessions did
/// anything in the last second or are doing something now (they write WAL too).
fn wal_position(ns: &str) -> (i64, i64) {
    let ns = ns.to_string();
    blocking(async move {
        let q = "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, (SELECT count(*) FROM pg_stat_activity \
                 WHERE usename LIKE 'cl\\_%' AND usename <> $1 \
                 AND (state <> 'idle' OR state_change > now() - interval '1 second'))";
        sqlx::query_as(q).bind(ns).fetch_one(&util::admin().await).await.unwrap()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_is_within_ten_percent_of_an_lsn_difference_taken_around_the_load() {
    crate::require!(Postgres);
    // Alone: no heavy test of this suite writes WAL meanwhile.
    let _alone = util::alone().await;
    let plan = util::plan(&scenario("postgres", "conditional-update", 50, 4));
    let (r, seen) = run_reading(&plan, util::options(false, None), wal_position).await;
    let independent = (seen[1].0 - seen[0].0) as f64;
    let wal = source(&r, "pg_wal");
    assert_eq!(wal.scope, Scope::Server);
    assert!(independent > 10_000.0, "the load wrote WAL: {independent}");
    let apart = |reported: i64| (reported as f64 - independent).abs() / independent;
    // The insert position read before the load and after settle brackets the hooks' reads.
    let lsn = wal.delta.get("lsn_bytes");
    assert!(apart(lsn) < 0.10, "lsn_bytes {lsn} vs the LSN difference {independent}");
    // pg_stat_wal has every session's WAL as each flushes its statistics (at most once a
    // second): another run's WAL done before the load can land inside it. So it is held
    // to the LSN difference only when no other namespace's session was busy around it.
    let others = seen[0].1 + seen[1].1;
    let bytes = wal.delta.get("wal_bytes");
    eprintln!("wal_bytes {bytes}, lsn_bytes {lsn}, LSN difference {independent}, other runs' sessions {others}");
    match others {
        0 => assert!(apart(bytes) < 0.10, "wal_bytes {bytes} vs the LSN difference {independent}"),
        n => eprintln!("wal_bytes not compared: {n} sessions of other runs wrote WAL around the load"),
    }
    let cost = r.strategies[0].cost.as_ref().unwrap();
    assert_eq!(cost.ops, r.strategies[0].stages.iter().map(|s| s.ops).sum::<u64>());
    assert!(cost.per_op("pg_wal", "wal_bytes").unwrap() > 0.0);
    let md = counterlab_report::render_markdown(&r);
    assert!(md.contains("Server-side cost per op") && md.contains("| WAL B* |"), "{md}");
    assert!(counterlab_report::render_html(&r).contains("<h2>Server-side cost</h2>"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updated_and_hot_counts_equal_pg_stat_user_tables_of_the_kept_namespace() {
    crate::require!(Postgres);
    let _heavy = util::heavy().await;
    let plan = util::plan(&scenario("postgres", "select-for-update", 40, 4));
    let r = util::run_kept(&plan, None).await;
    let ns = r.strategies[0].namespace.clone();
    let tables = source(&r, "pg_tables");
    assert_eq!(tables.scope, Scope::Namespace);
    let admin = util::admin().await;
    // The kept namespace's sessions ended at teardown (they flushed as they exited); the
    // check after the cost reading wrote no row.
    let q = "SELECT sum(n_tup_ins)::bigint, sum(n_tup_upd)::bigint, sum(n_tup_hot_upd)::bigint, \
             sum(n_tup_del)::bigint FROM pg_stat_user_tables WHERE schemaname = $1";
    let (ins, upd, hot, del): (i64, i64, i64, i64) = sqlx::query_as(q).bind(&ns).fetch_one(&admin).await.unwrap();
    util::drop_schema(&admin, &ns).await;
    let d = &tables.delta;
    assert!(d.get("n_tup_upd") > 100, "{d:?}");
    assert_eq!(d.get("n_tup_upd"), upd, "{d:?}");
    assert_eq!(d.get("n_tup_hot_upd"), hot, "{d:?}");
    assert_eq!(d.get("n_tup_del"), del, "{d:?}");
    // The seed's rows (COPY) came before the first reading: 40 x 20 notifications, 40 counters.
    assert_eq!(ins - d.get("n_tup_ins"), 40 * 20 + 40, "{d:?}");
}

/// The server-wide row lock waits of a select-for-update run on MariaDB.
async fn mariadb_lock_waits(users: u32, workers: u32) -> i64 {
    let plan = util::plan(&scenario("mysql", "select-for-update", users, workers));
    let r = run_plan(&plan, &util::options(false, None), &mut |_| {}).await.expect("the run completes");
    let status = source(&r, "mariadb_status");
    assert_eq!(status.scope, Scope::Server);
    assert!(status.rows_from.as_deref().is_some_and(|f| f.starts_with("Handler_") || f.starts_with("Innodb_")));
    assert!(status.delta.get("Handler_update") > 0, "{status:?}");
    status.delta.get("Innodb_row_lock_waits")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_row_lock_waits_appear_under_contention_and_not_with_one_worker() {
    crate::require!(Mariadb);
    // Alone: the waits are the server's, so no heavy test may contend meanwhile.
    let _alone = util::alone().await;
    let contended = mariadb_lock_waits(2, 8).await;
    eprintln!("row lock waits with 8 workers on 2 users: {contended}");
    assert!(contended > 0, "8 workers on 2 users' rows waited on no row lock");
    // The waits are counted server-wide: another run's sessions on the server (seen just
    // before or after) may wait on their own rows meanwhile.
    let others_before = other_runs_on_mariadb().await;
    let single = mariadb_lock_waits(20, 1).await;
    let others = others_before + other_runs_on_mariadb().await;
    match (single, others) {
        (0, _) => {}
        (n, 0) => panic!("one worker waited on a row lock {n} times, and no other run was on the server"),
        (n, k) => eprintln!("one worker: {n} row lock waits server-wide, with {k} sessions of other runs on it"),
    }
}

/// Sessions of other counterlab runs' namespaces on the MariaDB server now.
async fn other_runs_on_mariadb() -> i64 {
    let q = "SELECT count(*) FROM information_schema.processlist WHERE user LIKE 'cl\\_%'";
    sqlx::query_scalar(q).fetch_one(&util::mysql_admin().await).await.unwrap()
}

/// `evalsha`'s calls and microseconds in `INFO commandstats` of the Redis at `url`.
fn evalsha(url: String) -> (i64, i64) {
    blocking(async move {
        let mut c = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
        let text: String = redis::cmd("INFO").arg("commandstats").query_async(&mut c).await.unwrap();
        let line = text.lines().find(|l| l.starts_with("cmdstat_evalsha:")).unwrap_or("cmdstat_evalsha:");
        let field = |name: &str| {
            line.split([':', ',']).find_map(|f| f.strip_prefix(&format!("{name}="))).map_or(0, |v| v.parse().unwrap())
        };
        (field("calls"), field("usec"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_evalsha_calls_equal_an_independent_commandstats_delta() {
    crate::require!(Postgres, Redis);
    let _heavy = util::heavy().await;
    // A Redis of the test's own: no other client's commands in its statistics.
    let redis = util::PrivateRedis::start(false);
    let url = format!("redis://127.0.0.1:{}", redis.1);
    static URL: Mutex<String> = Mutex::new(String::new());
    *URL.lock().unwrap() = url.clone();
    let mut opts = util::options(false, None);
    opts.redis_url = Some(url);
    let plan = util::plan(&scenario("postgres", "lua-script", 40, 4));
    let (r, seen) = run_reading(&plan, opts, |_| evalsha(URL.lock().unwrap().clone())).await;
    let commands = source(&r, "redis_commands");
    assert_eq!(commands.scope, Scope::Server);
    let (calls, usec) = (seen[1].0 - seen[0].0, seen[1].1 - seen[0].1);
    assert!(calls > 100, "the load ran EVALSHA: {seen:?}");
    eprintln!("evalsha: {calls} calls, {usec} µs around the load");
    assert_eq!(commands.delta.get("evalsha.calls"), calls, "{commands:?}");
    assert_eq!(commands.delta.get("evalsha.usec"), usec, "{commands:?}");
    let memory = source(&r, "redis_memory");
    assert!(memory.after.get("keys") >= 40 && memory.after.get("bytes") > 0, "{memory:?}");
}
