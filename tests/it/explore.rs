//! `counterlab explore` end to end on the real servers: the racy designs UNSAFE with a
//! failing schedule whose steps waited on the server's real row locks (PostgreSQL and
//! MariaDB), the locking and guarded designs SAFE over every op pair, a failing schedule
//! replayed 10 times with the same anomaly, a preemption bound that cuts the search
//! short reported NOT EXPLORED (never SAFE), a strategy file explored as it is, and the
//! background sessions (a flush, a broker consumer) with their designs' crashes.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::util;

fn counterlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(args)
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .env("COUNTERLAB_MYSQL_URL", util::mysql_url())
        .env_remove("DATABASE_URL")
        .output()
        .expect("spawn counterlab")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `explore --json` of `scenario` with `args`; the exit code and the explored cells.
fn explore(scenario: &str, args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let mut all = vec!["explore", scenario, "--json"];
    all.extend_from_slice(args);
    let o = counterlab(&all);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    (o.status.code(), v["explored"].as_array().expect("explored").clone(), text(&o))
}

/// The one pair of the one cell whose strategy is `name`.
fn pair<'a>(cells: &'a [Value], name: &str) -> &'a Value {
    let cell = cells.iter().find(|c| c["strategy"] == name).unwrap_or_else(|| panic!("no {name}: {cells:?}"));
    assert!(cell["skipped"].is_null(), "{cell}");
    &cell["pairs"][0]
}

/// direct-update's duplicate mark_read on `backend` at read committed: UNSAFE, named
/// double_decrement, and its shortest failing schedule has a step that waited on the
/// other session's row lock (seen in the server's lock view, not guessed from time).
fn racy_mark_read_is_unsafe_with_a_blocked_step(backend: &str) {
    let (code, cells, out) = explore(
        "scenarios/quickstart.toml",
        &[
            "--strategy",
            "direct-update",
            "--backend",
            backend,
            "--isolation",
            "read-committed",
            "--pair",
            "mark_read,mark_read",
        ],
    );
    assert_eq!(code, Some(0), "direct-update declares no guarantee: UNSAFE is its finding, not a failure\n{out}");
    let p = pair(&cells, "direct-update");
    assert_eq!(p["result"], "UNSAFE", "{p}");
    let first = &p["first"];
    assert_eq!(first["anomalies"], serde_json::json!(["double_decrement"]), "{p}");
    assert_eq!(first["counter"].as_i64(), Some(0), "both decremented: {first}");
    assert_eq!(first["truth"].as_i64(), Some(1), "{first}");
    let steps = first["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["blocked"] == true), "a step waited on the row lock: {first}");
    assert!(p["failing"].as_u64().unwrap() < p["explored"].as_u64().unwrap(), "some orders are serial: {p}");
}

#[test]
fn direct_update_double_decrements_on_postgres_with_a_step_blocked_on_a_row_lock() {
    crate::require!(Postgres);
    let _heavy = crate::util::heavy_blocking();
    racy_mark_read_is_unsafe_with_a_blocked_step("postgres");
}

#[test]
fn direct_update_double_decrements_on_mariadb_with_a_step_blocked_on_a_row_lock() {
    crate::require!(Mariadb);
    let _heavy = crate::util::heavy_blocking();
    racy_mark_read_is_unsafe_with_a_blocked_step("mysql");
}

#[test]
fn guarded_and_locking_designs_are_safe_over_every_op_pair_on_postgres() {
    crate::require!(Postgres);
    let _heavy = crate::util::heavy_blocking();
    let args = [
        "--strategy",
        "conditional-update",
        "--strategy",
        "select-for-update",
        "--backend",
        "postgres",
        "--isolation",
        "read-committed",
    ];
    let (code, cells, out) = explore("scenarios/quickstart.toml", &args);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(cells.len(), 2, "{out}");
    for c in &cells {
        let pairs = c["pairs"].as_array().unwrap();
        assert_eq!(pairs.len(), 16, "the whole matrix: {c}");
        for p in pairs {
            assert_eq!(p["result"], "SAFE", "{} {p}", c["strategy"]);
            assert!(p["explored"].as_u64().unwrap() >= 2, "{p}");
        }
    }
    // Locking makes a session wait: fewer orders exist than for independent steps, and
    // select-for-update (one more statement per op) has more than conditional-update.
    let total = |name: &str| -> u64 {
        let c = cells.iter().find(|c| c["strategy"] == name).unwrap();
        c["pairs"].as_array().unwrap().iter().map(|p| p["explored"].as_u64().unwrap()).sum()
    };
    assert!(total("select-for-update") > total("conditional-update"), "{out}");
}

/// SQLite shows no lock waits of its own; the busy handler counterlab installs does
/// (`busy.rs`). stale-count-mark-all-read's count-then-subtract on SQLite: UNSAFE, its
/// failing schedule has a step that waited on the write lock, and it replays 10 of 10
/// (a waiter is taken as still waiting only when it tried the lock again and failed, so
/// the replay does not diverge); the locking and guarded designs are SAFE on every pair.
#[test]
fn sqlite_write_lock_waits_are_seen_and_its_failing_schedule_replays() {
    let _heavy = crate::util::heavy_blocking();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().to_str().unwrap();
    let args = [
        "--strategy",
        "stale-count-mark-all-read",
        "--backend",
        "sqlite",
        "--pair",
        "mark_read,mark_all_read",
        "--out",
        out_dir,
    ];
    let (_, cells, out) = explore("scenarios/explore.toml", &args);
    let p = pair(&cells, "stale-count-mark-all-read");
    assert_eq!(p["result"], "UNSAFE", "{out}");
    let steps = p["first"]["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["blocked"] == true), "a step waited on the write lock: {p}");
    let file = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".replay.json"))
        .unwrap_or_else(|| panic!("no replay file: {out}"));
    let o = counterlab(&["explore", "--replay", file.to_str().unwrap(), "--times", "10"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("replayed 10 of 10 times with the recorded outcome"), "{stdout}");
    let args = ["--strategy", "conditional-update", "--strategy", "select-for-update", "--backend", "sqlite"];
    let (code, cells, out) = explore("scenarios/quickstart.toml", &args);
    assert_eq!(code, Some(0), "{out}");
    for c in &cells {
        let pairs = c["pairs"].as_array().unwrap();
        assert_eq!(pairs.len(), 16, "the whole matrix: {c}");
        assert!(pairs.iter().all(|p| p["result"] == "SAFE"), "{c}");
    }
}

#[test]
fn a_failing_schedule_replays_ten_times_out_of_ten() {
    crate::require!(Postgres);
    let _heavy = crate::util::heavy_blocking();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().to_str().unwrap();
    let args =
        ["--strategy", "direct-update", "--backend", "postgres", "--pair", "mark_read,mark_read", "--out", out_dir];
    let (_, cells, out) = explore("scenarios/quickstart.toml", &args);
    assert_eq!(pair(&cells, "direct-update")["result"], "UNSAFE", "{out}");
    let file = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".replay.json"))
        .unwrap_or_else(|| panic!("no replay file: {out}"));
    let md = std::fs::read_to_string(dir.path().join("explore.md")).unwrap();
    assert!(md.contains("| mark_read(b) ‖ mark_read(b) | UNSAFE |") && md.contains("double_decrement"), "{md}");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let script = saved["script"].as_array().unwrap();
    assert!(script.iter().any(|l| l.as_str().unwrap().starts_with("[2] UPDATE")), "{saved}");
    let o = counterlab(&["explore", "--replay", file.to_str().unwrap(), "--times", "10"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("replayed 10 of 10 times with the recorded outcome"), "{stdout}");
    assert_eq!(stdout.matches(": same: counter Some(0), truth 1, double_decrement").count(), 10, "{stdout}");
    assert!(Path::new(&file).exists());
}

#[test]
fn a_race_beyond_the_preemption_bound_is_not_explored_never_safe() {
    crate::require!(Postgres);
    let _heavy = crate::util::heavy_blocking();
    // With no preemption only the two serial orders run, and both are exact: the race
    // needs one switch in the middle of an op.
    let args = [
        "--strategy",
        "direct-update",
        "--backend",
        "postgres",
        "--isolation",
        "read-committed",
        "--pair",
        "mark_read,mark_read",
        "--preemptions",
        "0",
    ];
    let (code, cells, out) = explore("scenarios/quickstart.toml", &args);
    assert_eq!(code, Some(0), "{out}");
    let p = pair(&cells, "direct-update");
    assert_eq!(p["result"], "NOT_EXPLORED", "{p}");
    assert_eq!(p["explored"].as_u64(), Some(2), "{p}");
    assert!(p["left"].as_str().unwrap().contains("beyond the bound of 0 preemption"), "{p}");
    let (_, cells, _) = explore("scenarios/quickstart.toml", &[&args[..8], &["--preemptions", "1"]].concat());
    assert_eq!(pair(&cells, "direct-update")["result"], "UNSAFE", "one preemption is enough");
}

#[test]
fn a_strategy_file_is_explored_as_it_is_and_an_exact_design_unsafe_fails_the_exit_code() {
    crate::require!(Postgres);
    let _heavy = crate::util::heavy_blocking();
    // read-then-write declares exact but writes the counter back as an absolute value.
    let args = ["--backend", "postgres", "--isolation", "read-committed", "--pair", "mark_read,mark_read_other"];
    let (code, cells, out) = explore("scenarios/zoo/lost-update.toml", &args);
    let p = pair(&cells, "read-then-write");
    assert_eq!(p["result"], "UNSAFE", "{out}");
    assert!(p["first"]["anomalies"].as_array().unwrap().iter().any(|a| a == "lost_update"), "{p}");
    assert_eq!(code, Some(1), "an exact design found UNSAFE fails the exit code: {out}");
}

#[test]
fn redis_calls_are_steps_the_unwatched_read_then_set_loses_an_update_and_lua_is_safe() {
    crate::require!(Postgres, Redis);
    let _heavy = crate::util::heavy_blocking();
    let args = [
        "--strategy",
        "watch-multi-unwatched",
        "--strategy",
        "lua-script",
        "--backend",
        "postgres",
        "--isolation",
        "read-committed",
        "--pair",
        "mark_read,mark_read_other",
    ];
    let (code, cells, out) = explore("scenarios/zoo/redis-unwatched-counter.toml", &args);
    assert_eq!(code, Some(0), "{out}");
    let p = pair(&cells, "watch-multi-unwatched");
    assert_eq!(p["result"], "UNSAFE", "{p}");
    assert_eq!(p["first"]["anomalies"], serde_json::json!(["lost_update"]), "{p}");
    let sent: Vec<&str> = p["first"]["steps"].as_array().unwrap().iter().map(|s| s["sent"].as_str().unwrap()).collect();
    assert!(sent.iter().filter(|s| s.starts_with("GET {u:")).count() == 2, "both read the counter first: {sent:?}");
    assert!(sent.iter().any(|s| s.starts_with("MULTI; SET {u:")), "{sent:?}");
    let lua = pair(&cells, "lua-script");
    assert_eq!(lua["result"], "SAFE", "{lua}");
}

/// A buffered design's flush is a session of its own: with the scenario's
/// `flusher_crash`, zset-buffer's flush dies after taking a delta from Redis (lost_flush)
/// and zset-buffer-replay's after its SQL commit, before clearing its claim, so its
/// recovery applies the claim again (double_flush): both UNSAFE with the flush's steps
/// in the script. zset-buffer-durable, under the same crash, loses nothing in any
/// schedule run.
#[test]
fn a_flush_is_a_session_and_the_flushers_that_lose_or_double_a_claim_are_unsafe() {
    crate::require!(Postgres, Redis);
    let _heavy = crate::util::heavy_blocking();
    let args = ["--pair", "create,mark_read", "--preemptions", "1", "--backend", "postgres"];
    let more = ["--strategy", "zset-buffer", "--strategy", "zset-buffer-durable"];
    let (code, cells, out) = explore("scenarios/zoo/flush-crash-after-zrem.toml", &[&args[..], &more].concat());
    assert_eq!(code, Some(0), "eventual designs declare no exact guarantee: {out}");
    let lost = pair(&cells, "zset-buffer");
    assert_eq!(lost["ops"], serde_json::json!(["create", "mark_read", "flush"]), "{lost}");
    assert_eq!(lost["result"], "UNSAFE", "{lost}");
    assert_eq!(lost["first"]["anomalies"], serde_json::json!(["lost_flush"]), "{lost}");
    let steps = lost["first"]["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["session"] == 3), "the flush took steps: {lost}");
    let durable = pair(&cells, "zset-buffer-durable");
    assert!(["SAFE", "NOT_EXPLORED"].contains(&durable["result"].as_str().unwrap()), "{durable}");
    assert!(durable["explored"].as_u64().unwrap() > 10, "{durable}");
    let (_, cells, out) = explore("scenarios/zoo/flush-replayed-twice.toml", &args);
    let twice = pair(&cells, "zset-buffer-replay");
    assert_eq!(twice["result"], "UNSAFE", "{out}");
    assert_eq!(twice["first"]["anomalies"], serde_json::json!(["double_flush"]), "{twice}");
}

/// A broker design's consumer is a session of its own (each get, apply statement, ack
/// and the crash's channel close a step), with the scenario's
/// `consumer_crash_after_apply` armed in every schedule: mq-consumer applies the
/// redelivered message again inside the schedule (double_apply_after_redelivery, a
/// replay file that replays to it), mq-consumer-idempotent skips it (SAFE, with the crash
/// fired in some of its schedules).
#[test]
fn a_consumer_is_a_session_the_naive_one_applies_a_redelivery_twice_and_the_idempotent_one_is_safe() {
    crate::require!(Postgres, Rabbitmq);
    let _heavy = crate::util::heavy_blocking();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().to_str().unwrap();
    let args = ["--strategy", "mq-consumer", "--strategy", "mq-consumer-idempotent", "--backend", "postgres"];
    let more = ["--isolation", "read-committed", "--pair", "mark_read,mark_read", "--out", out_dir];
    let (code, cells, out) = explore("scenarios/zoo/redelivered-twice.toml", &[&args[..], &more].concat());
    assert_eq!(code, Some(0), "eventual designs declare no exact guarantee: {out}");
    let naive = pair(&cells, "mq-consumer");
    assert_eq!(naive["ops"], serde_json::json!(["mark_read", "mark_read", "consume"]), "{naive}");
    assert_eq!(naive["result"], "UNSAFE", "{naive}");
    let first = &naive["first"];
    assert_eq!(first["anomalies"], serde_json::json!(["double_apply_after_redelivery"]), "{naive}");
    assert_eq!(first["counter"].as_i64().unwrap(), first["truth"].as_i64().unwrap() - 1, "{naive}");
    let consumer: Vec<(&str, &str)> = first["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["session"] == 3)
        .map(|s| (s["sent"].as_str().unwrap(), s["saw"].as_str().unwrap_or("")))
        .collect();
    let crash = consumer.iter().position(|(s, _)| s.starts_with("channel.close")).expect("the consumer crashed");
    let again = consumer.iter().position(|(s, saw)| s.starts_with("basic.get") && saw.contains("(redelivered)"));
    assert!(again.is_some_and(|a| a > crash), "redelivered after the crash: {consumer:?}");
    let applies = consumer.iter().filter(|(s, _)| s.starts_with("UPDATE unread_counts")).count();
    assert_eq!(applies, 2, "the one message applied twice: {consumer:?}");
    let idem = pair(&cells, "mq-consumer-idempotent");
    assert_eq!(idem["result"], "SAFE", "{idem}");
    assert!(idem["explored"].as_u64().unwrap() > 10, "{idem}");
    assert!(idem["faulted"].as_u64().unwrap() > 0, "the crash fired in its schedules too: {idem}");
    let file = dir.path().join("mq-consumer-postgres+rabbitmq-read-committed-markread-markread-consume.replay.json");
    let o = counterlab(&["explore", "--replay", file.to_str().unwrap(), "--times", "3"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(stdout.matches(": same: counter Some(").count(), 3, "{stdout}");
    assert!(stdout.contains("replayed 3 of 3 times with the recorded outcome"), "{stdout}");
}

/// An exact design's reconciler (lua-script's, with `redis.reconcile_interval_ms` set) is
/// a session of its own, and the counter is judged as the schedule leaves it (no settle
/// first: the design claims exactness while its reconciler runs). Its guard makes a
/// repair that races an op stand down, so no schedule run ends wrong; two preemptions
/// cut the search short, which is NOT EXPLORED, never SAFE. Without the setting the same
/// pair has no third session.
#[test]
fn an_exact_designs_reconciler_is_a_session_judged_as_the_schedule_leaves_it() {
    crate::require!(Postgres, Redis);
    let _heavy = crate::util::heavy_blocking();
    let args = ["--strategy", "lua-script", "--backend", "postgres", "--pair", "mark_read,mark_read"];
    let more = ["--preemptions", "2", "--set", "redis.reconcile_interval_ms=100"];
    let (code, cells, out) = explore("scenarios/explore-redis.toml", &[&args[..], &more].concat());
    assert_eq!(code, Some(0), "{out}");
    let p = pair(&cells, "lua-script");
    assert_eq!(p["ops"], serde_json::json!(["mark_read", "mark_read", "reconcile"]), "{p}");
    assert!(["SAFE", "NOT_EXPLORED"].contains(&p["result"].as_str().unwrap()), "{p}");
    assert!(p["explored"].as_u64().unwrap() > 50, "the pass's steps interleave with the ops': {p}");
    let (_, cells, out) = explore("scenarios/explore-redis.toml", &args);
    let plain = pair(&cells, "lua-script");
    assert_eq!(plain["ops"], serde_json::json!(["mark_read", "mark_read"]), "{out}");
    assert_eq!(plain["result"], "SAFE", "{plain}");
    assert!(plain["explored"].as_u64().unwrap() < p["explored"].as_u64().unwrap(), "{plain}");
}

/// On a Redis that has never seen the design's script, the first EVALSHA of a search is
/// answered NOSCRIPT and reloaded: a step the first schedule would have and the others
/// not. Every op runs once on a spare user before the search, so create ‖ create of the
/// Lua designs is SAFE over every schedule, not "ERROR: not repeatable after 1".
#[test]
fn a_script_loaded_on_first_use_is_loaded_before_the_search_not_in_its_first_schedule() {
    crate::require!(Postgres);
    let _heavy = crate::util::heavy_blocking();
    // A Redis of the test's own: on the shared one another test may have loaded the script.
    let redis = util::PrivateRedis::start_with(&[]);
    let url = format!("redis://127.0.0.1:{}", redis.1);
    let args = ["explore", "scenarios/quickstart.toml", "--json"];
    let more = ["--strategy", "lua-script", "--strategy", "redis-counter", "--backend", "postgres"];
    let more2 = ["--isolation", "read-committed", "--pair", "create,create"];
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(args)
        .args(more)
        .args(more2)
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .env("COUNTERLAB_REDIS_URL", &url)
        .env_remove("DATABASE_URL")
        .output()
        .expect("spawn counterlab");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    let cells = v["explored"].as_array().expect("explored").clone();
    for name in ["lua-script", "redis-counter"] {
        let p = pair(&cells, name);
        assert_eq!(p["result"], "SAFE", "{name}: {p}\n{}", text(&o));
        assert!(p["explored"].as_u64().unwrap() > 1, "{name}: {p}");
    }
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// A plain BEGIN takes no snapshot and no lock, so the explorer glues it to its
/// session's next statement: fewer schedules than branching at every step, and the same
/// result and anomaly on every pair (direct-update's races, conditional-update's safety).
#[test]
fn gluing_begin_to_the_next_statement_runs_fewer_schedules_with_the_same_results() {
    crate::require!(Postgres);
    let _heavy = crate::util::heavy_blocking();
    let base = [
        "--strategy",
        "direct-update",
        "--strategy",
        "conditional-update",
        "--backend",
        "postgres",
        "--isolation",
        "read-committed",
        "--pair",
        "mark_read,mark_read",
        "--pair",
        "create,mark_all_read",
        "--pair",
        "mark_read,delete_unread",
    ];
    let (_, reduced, out) = explore("scenarios/quickstart.toml", &base);
    let (_, full, out_full) = explore("scenarios/quickstart.toml", &[&base[..], &["--no-reduction"]].concat());
    let (mut fewer, mut n) = (0, 0);
    for (r, f) in reduced.iter().zip(&full) {
        assert_eq!(r["strategy"], f["strategy"]);
        assert_eq!((r["reduced"].as_bool(), f["reduced"].as_bool()), (Some(true), Some(false)));
        for (a, b) in r["pairs"].as_array().unwrap().iter().zip(f["pairs"].as_array().unwrap()) {
            assert_eq!(a["result"], b["result"], "{}: {a}\n{b}\n{out}\n{out_full}", r["strategy"]);
            assert_eq!(a["first"]["anomalies"], b["first"]["anomalies"], "{a}\n{b}");
            let (x, y) = (a["explored"].as_u64().unwrap(), b["explored"].as_u64().unwrap());
            assert!(x <= y, "{a}\n{b}");
            fewer += (x < y) as u32;
            n += 1;
        }
    }
    assert_eq!(n, 6, "{out}");
    assert_eq!(fewer, 6, "every pair ran fewer schedules: {out}\n{out_full}");
}

/// Three sessions: the third repeats the second op. direct-update's mark_read of one row
/// by three sessions at once is UNSAFE, and its failing schedule has steps of all three;
/// conditional-update's is SAFE or, where the budget ran out, NOT EXPLORED, never UNSAFE.
#[test]
fn three_sessions_interleave_and_each_takes_steps_in_the_failing_schedule() {
    crate::require!(Postgres);
    let _heavy = crate::util::heavy_blocking();
    let args = [
        "--strategy",
        "direct-update",
        "--strategy",
        "conditional-update",
        "--backend",
        "postgres",
        "--isolation",
        "read-committed",
        "--pair",
        "mark_read,mark_read",
        "--sessions",
        "3",
        "--budget",
        "300",
    ];
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().to_str().unwrap();
    let (code, cells, out) = explore("scenarios/quickstart.toml", &[&args[..], &["--out", out_dir]].concat());
    assert_eq!(code, Some(0), "{out}");
    let p = pair(&cells, "direct-update");
    assert_eq!(p["ops"].as_array().unwrap().len(), 3, "{p}");
    assert_eq!(p["result"], "UNSAFE", "{p}");
    let steps = p["first"]["steps"].as_array().unwrap();
    for s in 1..=3 {
        assert!(steps.iter().any(|x| x["session"] == s), "session {s} took no step: {p}");
    }
    let truth = p["first"]["truth"].as_i64().unwrap();
    assert!(p["first"]["counter"].as_i64().unwrap() < truth, "decremented more than once: {p}");
    let md = std::fs::read_to_string(dir.path().join("explore.md")).unwrap();
    assert!(md.contains("session 3: mark_read(b)"), "the script has a third column: {md}");
    let safe = pair(&cells, "conditional-update");
    assert!(["SAFE", "NOT_EXPLORED"].contains(&safe["result"].as_str().unwrap()), "{safe}");
}

/// `run --explore`: one worker cannot race, so the load shows no drift for read-then-write
/// (a design declaring exact); the explorer finds create ‖ create UNSAFE, which fails
/// the row and the exit code, while select-for-update reads "safe in every explored
/// interleaving". The report, the terminal and the exit code say the same. In a
/// scenario that expects its drift (`expect_drift`), the same finding fails nothing.
#[test]
fn a_run_with_explore_fails_an_exact_design_the_load_could_not_catch() {
    crate::require!(Postgres);
    let _heavy = crate::util::heavy_blocking();
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "run",
        "scenarios/zoo/lost-update.toml",
        "--strategy",
        "read-then-write",
        "--strategy",
        "select-for-update",
        "--backend",
        "postgres",
        "--isolation",
        "read-committed",
        "--workers",
        "1",
        "--ops",
        "200",
        "--explore",
        "--set",
        r#"explore.pairs=["create,create", "mark_read,mark_read"]"#,
        "--out",
        dir.path().to_str().unwrap(),
    ];
    let o = counterlab(&args);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap()).unwrap();
    let rows = report["strategies"].as_array().unwrap();
    let row = |name: &str| rows.iter().find(|r| r["strategy"] == name).unwrap_or_else(|| panic!("{name}: {out}"));
    let rtw = row("read-then-write");
    assert_eq!(rtw["check"]["users_mismatched"].as_u64(), Some(0), "one worker cannot race: {rtw}");
    let e = &rtw["explored"];
    assert_eq!((e["pairs"].as_u64(), e["declares_exact"].as_bool()), (Some(2), Some(true)), "{e}");
    let unsafe_pairs = e["unsafe_pairs"].as_array().unwrap();
    assert_eq!(unsafe_pairs.len(), 1, "{e}");
    assert_eq!(unsafe_pairs[0]["pair"], "create ‖ create", "{e}");
    assert_eq!(unsafe_pairs[0]["anomalies"], serde_json::json!(["lost_update"]), "{e}");
    let sfu = &row("select-for-update")["explored"];
    assert!(sfu["unsafe_pairs"].as_array().unwrap().is_empty() && sfu["schedules"].as_u64().unwrap() > 2, "{sfu}");
    assert!(out.contains("explored interleavings"), "{out}");
    assert!(
        out.contains("select-for-update") && out.contains("safe in every explored interleaving (2 op pairs"),
        "{out}"
    );
    assert!(out.contains("UNSAFE in 1 of 2 explored op pairs"), "{out}");
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(md.contains("breaks its declared guarantee"), "{md}");
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("<h2>Explored interleavings</h2>") && html.contains(">UNSAFE<"), "report.html has it");
    assert!(out.contains("but explored, it fails: UNSAFE"), "the verdict line says it: {out}");
    assert!(out.contains("the explorer refuted read-then-write on postgres at read-committed"), "{out}");
    let expected = [&args[..1], &["scenarios/explore.toml"], &args[2..]].concat();
    let o = counterlab(&expected);
    assert_eq!(o.status.code(), Some(0), "read-then-write's drift is expected there: {}", text(&o));
}
