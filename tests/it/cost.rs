//! `StrategyReport.cost` against the servers' statistics read independently, here: WAL
//! bytes against a `pg_current_wal_lsn()` difference taken around the load, updated and
//! HOT counts against `pg_stat_user_tables` of the kept namespace, MariaDB row lock waits
//! with contention and without, and Redis EVALSHA calls against an `INFO commandstats`
//! delta on a Redis of the test's own; the idle interval beside the server-wide figures
//! (a writer of the test's own writing WAL through it), PostgreSQL lock waits sampled
//! with contention and without, `pg_stat_statements` said absent where it is not loaded,
//! the decision view's cost columns in every output, and `compare` flagging a cost that
//! grew.

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

/// The PostgreSQL the WAL test runs on and reads: the private one of pg-statements.sh,
/// where no other test writes WAL while it holds `alone` (on the shared server, other
/// tests' namespaces written between the tool's reading and the test's made the two
/// differ under load).
static WAL_URL: Mutex<String> = Mutex::new(String::new());

/// The WAL position (bytes) on `WAL_URL`'s server, and how many other sessions of
/// counterlab namespaces did anything in the last second or are doing something now.
fn wal_position(ns: &str) -> (i64, i64) {
    let (ns, url) = (ns.to_string(), WAL_URL.lock().unwrap().clone());
    blocking(async move {
        let q = "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, (SELECT count(*) FROM pg_stat_activity \
                 WHERE usename LIKE 'cl\\_%' AND usename <> $1 \
                 AND (state <> 'idle' OR state_change > now() - interval '1 second'))";
        let admin = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&url).await.unwrap();
        sqlx::query_as(q).bind(ns).fetch_one(&admin).await.unwrap()
    })
}

/// The private PostgreSQL of scripts/topologies/pg-statements.sh (started if it is not
/// running; a shared server is never reconfigured), or why not.
fn private_pg() -> Result<String, String> {
    let script = format!("{}/scripts/topologies/pg-statements.sh", env!("CARGO_MANIFEST_DIR"));
    match std::process::Command::new(&script).arg("start").output() {
        Ok(o) if o.status.success() => {
            let line = String::from_utf8_lossy(&o.stdout);
            let url = line.lines().find_map(|l| l.strip_prefix("COUNTERLAB_POSTGRES_URL="));
            url.map(str::to_string).ok_or_else(|| format!("pg-statements.sh printed no URL: {line}"))
        }
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).into_owned()),
        Err(e) => Err(e.to_string()),
    }
}

/// The private PostgreSQL's URL, or None after failing (with every server required) or
/// recording `test` as skipped.
fn private_pg_or_skip(test: &str) -> Option<String> {
    match private_pg() {
        Ok(url) => Some(url),
        Err(why) => {
            let required = std::env::var("COUNTERLAB_REQUIRE_SERVERS").as_deref() == Ok("1");
            assert!(!required, "pg-statements.sh did not start: {why}");
            util::skip(&format!("SKIPPED cost::{test}: pg-statements.sh did not start: {why}"));
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_is_within_ten_percent_of_an_lsn_difference_taken_around_the_load() {
    crate::require!(Postgres);
    // Alone: no heavy test of this suite (the statements test among them) runs meanwhile.
    let _alone = util::alone().await;
    let Some(url) = private_pg_or_skip("wal_is_within_*") else { return };
    *WAL_URL.lock().unwrap() = url.clone();
    let mut opts = util::options(false, None);
    opts.postgres_url = Some(url);
    let plan = util::plan(&scenario("postgres", "conditional-update", 50, 4));
    let (r, seen) = run_reading(&plan, opts, wal_position).await;
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

/// `scenario` with only `mix` (TOML lines under `[workload.mix]`).
fn with_mix(backend: &str, strategy: &str, users: u32, workers: u32, mix: &str) -> String {
    let s = scenario(backend, strategy, users, workers);
    let head = s.split("[workload.mix]").next().unwrap();
    format!("{head}[workload.mix]\n{mix}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_wide_figures_stand_beside_an_idle_interval_and_namespace_ones_have_none() {
    crate::require!(Postgres);
    let _heavy = util::heavy().await;
    // A writer of the test's own writes WAL all through the run, idle interval included:
    // the WAL nobody in the cell wrote, which the baseline is there to show.
    let admin = util::admin().await;
    sqlx::query("CREATE TABLE IF NOT EXISTS public.cost_idle_writer (x bigint)").execute(&admin).await.unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (a, s) = (admin.clone(), stop.clone());
    let writer = tokio::spawn(async move {
        // Bounded: stopped by the test, at most 10 minutes.
        for _ in 0..60_000 {
            if s.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            sqlx::query("INSERT INTO public.cost_idle_writer SELECT generate_series(1, 20)").execute(&a).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    let plan = util::plan(&scenario("postgres", "conditional-update", 40, 4));
    assert_eq!(plan.workload.cost_baseline_ms, 1000, "the default idle interval");
    let r = run_plan(&plan, &util::options(false, None), &mut |_| {}).await.expect("the run completes");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
    sqlx::query("DROP TABLE public.cost_idle_writer").execute(&admin).await.unwrap();
    let cost = r.strategies[0].cost.as_ref().unwrap();
    let wal = source(&r, "pg_wal");
    let idle = wal.baseline.as_ref().expect("pg_wal is server-wide: it has an idle interval");
    assert!(idle.seconds >= 1.0, "{idle:?}");
    assert!(idle.delta.get("lsn_bytes") > 0, "the test's writer wrote WAL in the idle interval: {idle:?}");
    assert!(cost.interval_s > 1.5, "the readings bracket the 1.5 s load: {}", cost.interval_s);
    let per_op = cost.idle_per_op("pg_wal", |d| d.get("lsn_bytes")).unwrap();
    let expect = idle.delta.get("lsn_bytes") as f64 * cost.interval_s / idle.seconds / cost.ops as f64;
    assert!((per_op - expect).abs() < 1e-9, "scaled to the load's interval: {per_op} vs {expect}");
    assert!(source(&r, "pg_tables").baseline.is_none(), "a namespace's own figures need none");
    let md = counterlab_report::render_markdown(&r);
    assert!(md.contains(" (idle "), "the idle share beside the server-wide figure: {md}");
    // Without an idle interval: none, and the figures are as before.
    let mut off = plan.clone();
    off.workload.cost_baseline_ms = 0;
    let r = run_plan(&off, &util::options(false, None), &mut |_| {}).await.expect("the run completes");
    assert!(source(&r, "pg_wal").baseline.is_none());
}

/// The sampled lock waits of `strategy` on PostgreSQL: (waiting, samples).
async fn pg_lock_waits(strategy: &str, users: u32, workers: u32) -> (i64, i64) {
    let plan = util::plan(&with_mix("postgres", strategy, users, workers, "mark_read = 1\ncreate = 1"));
    let r = run_plan(&plan, &util::options(false, None), &mut |_| {}).await.expect("the run completes");
    let locks = source(&r, "pg_lock_waits");
    assert_eq!(locks.scope, Scope::Namespace);
    assert_eq!(locks.delta.get("interval_ms"), 50);
    (locks.delta.get("waiting"), locks.delta.get("samples"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lock_waits_are_sampled_under_contention_and_none_with_one_worker() {
    crate::require!(Postgres);
    let _heavy = util::heavy().await;
    let (contended, samples) = pg_lock_waits("select-for-update", 2, 8).await;
    eprintln!("select-for-update, 8 workers on 2 users: {contended} waiting backends over {samples} samples");
    assert!(samples >= 20, "1.5 s at 50 ms: {samples}");
    assert!(contended > 0, "8 workers on 2 users' rows were never seen waiting on a lock");
    // The namespace's own backends only: one worker has nobody to wait for.
    let (single, samples) = pg_lock_waits("select-for-update", 20, 1).await;
    assert!(samples >= 20, "{samples}");
    assert_eq!(single, 0, "one worker waited on a lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_stat_statements_is_said_to_be_absent_where_it_is_not_loaded() {
    crate::require!(Postgres);
    let _heavy = util::heavy().await;
    let libs: String =
        sqlx::query_scalar("SHOW shared_preload_libraries").fetch_one(&util::admin().await).await.unwrap();
    let plan = util::plan(&scenario("postgres", "conditional-update", 20, 2));
    let r = run_plan(&plan, &util::options(false, None), &mut |_| {}).await.expect("the run completes");
    let s = source(&r, "pg_statements");
    let absent = s.absent.as_deref().unwrap_or_default();
    let md = counterlab_report::render_markdown(&r);
    match libs.contains("pg_stat_statements") {
        false => {
            assert!(absent.contains("not loaded"), "{s:?}");
            assert!(md.contains("- not on this server: pg_statements: "), "{md}");
        }
        true => assert!(!absent.contains("not loaded"), "{s:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decision_view_carries_the_cost_figures_that_differ_in_every_output() {
    crate::require!(Postgres);
    let _heavy = util::heavy().await;
    let toml = with_mix("postgres", "conditional-update", 2, 8, "mark_read = 1\ncreate = 1").replace(
        "strategies = [\"conditional-update\"]",
        "strategies = [\"conditional-update\", \"select-for-update\"]",
    );
    let r = run_plan(&util::plan(&toml), &util::options(false, None), &mut |_| {}).await.expect("the run completes");
    let json = counterlab_report::decision::decision_json(&r);
    let group = &json["groups"][0];
    let figures = group["cost_figures"].as_array().expect("cost_figures");
    let groups = counterlab_report::decision::decide(&r);
    let keys: Vec<&str> = groups[0].cost_figures.iter().map(|f| f.key).collect();
    eprintln!("figures that differ: {keys:?}");
    assert_eq!(figures.iter().map(|f| f["key"].as_str().unwrap()).collect::<Vec<_>>(), keys);
    assert!(keys.len() <= 3);
    for row in group["rows"].as_array().unwrap() {
        let cost = row["cost"].as_object().unwrap();
        assert_eq!(cost.keys().map(String::as_str).collect::<Vec<_>>().len(), keys.len(), "{row}");
        for k in &keys {
            assert!(cost[*k]["value"].as_f64().is_some(), "{row}");
        }
    }
    let md = counterlab_report::render_markdown(&r);
    let html = counterlab_report::render_html(&r);
    for f in &groups[0].cost_figures {
        assert!(md.contains(&format!(" {} |", f.heading())), "{md}");
        assert!(html.contains(&format!("<th>{}</th>", f.heading())), "the HTML's ranked table");
    }
    for l in counterlab_report::render_terminal_width(&r, 80).lines() {
        assert!(l.chars().count() <= 80, "{l}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_flags_a_cost_that_grew_past_the_limit() {
    crate::require!(Postgres);
    let _heavy = util::heavy().await;
    let dir = util::tempdir("cost-compare");
    // The same design, two loads: A mostly reads (few rows updated per op), B marks read
    // (a notification and a counter updated per op).
    let mut paths = Vec::new();
    for (name, mix) in [("a", "read_count = 9\nmark_read = 1"), ("b", "mark_read = 1")] {
        // A fixed op budget: per-op figures that do not move with the machine's speed (in a
        // fixed time a fast machine marks every notification read early, and later
        // mark_reads change nothing).
        let toml = with_mix("postgres", "conditional-update", 40, 4, mix).replace("duration_s = 1.5", "ops = 1000");
        let plan = util::plan(&toml);
        let r = run_plan(&plan, &util::options(false, None), &mut |_| {}).await.expect("the run completes");
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_string(&r).unwrap()).unwrap();
        paths.push(path);
    }
    let json = dir.join("cmp.json");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["compare", paths[0].to_str().unwrap(), paths[1].to_str().unwrap(), "--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    eprintln!("{out}");
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("conditional-update on postgres at read-committed: cost updated/op "), "{out}");
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["cost_limit_pct"], 50.0);
    let upd = j["rows"][0]["cost"].as_array().unwrap().iter().find(|d| d["key"] == "pg_tables.n_tup_upd").unwrap();
    assert!(upd["change_pct"].as_f64().unwrap() > 50.0, "{upd}");
    // Past a limit above the growth, no cost regression.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["compare", paths[0].to_str().unwrap(), paths[1].to_str().unwrap(), "--fail-if-costlier", "100000"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    // (A server-wide figure that was 0 in A, full-page images after a checkpoint, say,
    // still counts: growth from 0 passes any limit.)
    assert!(!out.contains(": cost updated/op"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_design_reports_its_messages_per_op() {
    crate::require!(Postgres, Rabbitmq);
    let _heavy = util::heavy().await;
    let plan = util::plan(&scenario("postgres", "mq-consumer-idempotent", 40, 4));
    let r = run_plan(&plan, &util::options(false, None), &mut |_| {}).await.expect("the run completes");
    let row = &r.strategies[0];
    let mq = source(&r, "rabbitmq");
    assert_eq!(mq.scope, Scope::Namespace);
    let figure = |k: &str| row.figures.get(k).copied().unwrap_or(-1.0) as i64;
    let d = &mq.delta;
    assert!(d.get("published") > 50, "{d:?}");
    assert_eq!(d.get("published"), figure("published"), "{d:?}");
    assert_eq!(d.get("deliveries"), figure("deliveries"), "{d:?}");
    // No fault: every confirmed message delivered once and acked, none redelivered.
    assert_eq!((d.get("acked"), d.get("redelivered")), (d.get("published"), 0), "{d:?}");
    assert_eq!(d.get("deliveries"), d.get("published"), "{d:?}");
    let md = counterlab_report::render_markdown(&r);
    assert!(
        md.contains("**RabbitMQ, per op**") && md.contains("| published | delivered | redelivered | acked |"),
        "{md}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_stat_statements_gives_the_namespaces_statements_where_it_is_loaded() {
    crate::require!(Postgres);
    let _heavy = util::heavy().await;
    // A private cluster with the extension loaded: the shared one is not reconfigured.
    let Some(url) = private_pg_or_skip("pg_stat_statements_gives_*") else { return };
    let mut opts = util::options(false, None);
    opts.postgres_url = Some(url);
    let plan = util::plan(&scenario("postgres", "conditional-update", 20, 2));
    let r = run_plan(&plan, &opts, &mut |_| {}).await.expect("the run completes");
    let s = source(&r, "pg_statements");
    assert!(s.absent.is_none(), "{s:?}");
    let cost = r.strategies[0].cost.as_ref().unwrap();
    let calls: i64 = s.delta.0.iter().filter(|(k, _)| k.ends_with(".calls")).map(|(_, v)| v).sum();
    // Every op ran at least one statement as the namespace's identity.
    assert!(calls >= cost.ops as i64 && cost.ops > 100, "{calls} calls for {} ops", cost.ops);
    assert!(
        s.texts.values().any(|t| t.contains("unread_counts") && t.to_lowercase().contains("update")),
        "{:?}",
        s.texts
    );
    for id in s.delta.0.keys().filter_map(|k| k.strip_suffix(".calls")) {
        assert!(s.texts.contains_key(id), "{id} has its text");
    }
    let md = counterlab_report::render_markdown(&r);
    assert!(md.contains("**PostgreSQL statements (pg_stat_statements)**"), "{md}");
}
