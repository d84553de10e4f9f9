//! The Redis strategies on real PostgreSQL and Redis: convergence without faults, the
//! flusher crash that only the durable write-back survives, data loss healed by the
//! reconciler; every assertion also reads the real Redis keys and SQL rows.

use std::collections::HashMap;
use std::time::Duration;

use counterlab_report::StrategyReport;
use redis::AsyncCommands;

use crate::util;

const REDIS_STRATEGIES: [&str; 4] = ["zset-buffer", "zset-buffer-durable", "lua-script", "redis-counter"];

pub fn redis_url() -> String {
    util::url(util::Server::Redis, "redis://127.0.0.1:6379")
}

pub async fn redis_conn() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.expect("test Redis is up")
}

/// What Redis holds for a kept run: per-user counters (Redis-held designs) or the
/// pending buffer size (buffered designs). Deletes the keys afterwards.
async fn redis_state_and_clean(s: &StrategyReport, n_users: i64) -> (Vec<Option<i64>>, u64) {
    let mut c = redis_conn().await;
    let prefix = counterlab_strategies::redis_prefix(&s.namespace);
    let mut counters = Vec::new();
    for u in 1..=n_users {
        let v: Option<i64> = c.get(format!("{prefix}{{u:{u}}}:unread")).await.unwrap();
        counters.push(v);
    }
    let pending: u64 = c.zcard(format!("{prefix}{{buf}}:pending")).await.unwrap();
    let keys: Vec<String> = c.keys(format!("{prefix}*")).await.unwrap();
    if !keys.is_empty() {
        c.del::<_, ()>(keys).await.unwrap();
    }
    (counters, pending)
}

/// Runs the plan kept, then checks each Redis strategy against the stored truth.
async fn run_and_verify(toml: &str, n_users: i64) -> Vec<StrategyReport> {
    let plan = util::plan(toml);
    let report = util::run_kept(&plan, None).await;
    verify(&report.strategies, n_users).await;
    report.strategies
}

/// Each kept Redis strategy's counters (Redis or SQL) against the SQL truth, read here:
/// the report's mismatch count agrees; the run's keys and namespace are removed.
async fn verify(strategies: &[StrategyReport], n_users: i64) {
    for s in strategies {
        let (redis_counters, pending) = redis_state_and_clean(s, n_users).await;
        let stored = util::stored_drift_and_drop("postgres", &s.namespace, None).await;
        let truth: HashMap<i64, i64> = stored.iter().map(|(u, _, t)| (*u, *t)).collect();
        let shown: Vec<(i64, i64)> = match s.strategy.as_str() {
            "lua-script" | "redis-counter" | "watch-multi" => {
                redis_counters.iter().enumerate().map(|(i, c)| (i as i64 + 1, c.unwrap_or(0))).collect()
            }
            _ => {
                assert_eq!(pending, 0, "{}: buffer drained by settle", s.strategy);
                stored.iter().map(|(u, c, _)| (*u, *c)).collect()
            }
        };
        let mismatched = shown.iter().filter(|(u, c)| truth.get(u).copied().unwrap_or(0) != *c).count() as u64;
        assert_eq!(mismatched, s.check.users_mismatched, "{}: report agrees with Redis and SQL", s.strategy);
    }
}

fn find<'a>(r: &'a [StrategyReport], name: &str) -> &'a StrategyReport {
    r.iter().find(|s| s.strategy == name).unwrap_or_else(|| panic!("{name} did not run"))
}

const DATA: &str = "[data]\nusers = 60\nnotifications_per_user = 10\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_faults_every_redis_strategy_is_exact_after_settle() {
    crate::require!(Postgres, Redis);
    let strategies = REDIS_STRATEGIES.map(|s| format!("\"{s}\"")).join(", ");
    for (mix, skew) in [
        ("create = 10\nmark_read_dup = 70\nread_count = 20\n", ""),
        (
            "create = 30\nmark_read = 30\nmark_read_dup = 5\ndelete = 10\nmark_all_read = 10\nread_count = 15\n",
            "skew = \"zipf\"\nzipf_exponent = 1.2\n",
        ),
    ] {
        let toml = format!(
            "strategies = [{strategies}]\nbackends = [\"postgres\"]\n[redis]\nflush_interval_ms = 20\n{DATA}[workload]\nworkers = 4\nops = 800\n{skew}[workload.mix]\n{mix}"
        );
        let r = run_and_verify(&toml, 60).await;
        for s in &r {
            assert_eq!(s.check.users_mismatched, 0, "{}: {:?}", s.strategy, s.check.worst_users);
            assert!(s.settle_error.is_none(), "{}: {:?}", s.strategy, s.settle_error);
        }
        assert!(find(&r, "zset-buffer").figures["flushes"] > 0.0, "the flusher ran during the load");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flusher_crash_loses_deltas_only_in_the_seed_design() {
    crate::require!(Postgres, Redis);
    let toml = format!(
        "strategies = [\"zset-buffer\", \"zset-buffer-durable\"]\nbackends = [\"postgres\"]\nexpect_drift = [\"zset-buffer\"]\n\
         [redis]\nflush_interval_ms = 20\n[[faults]]\nkind = \"flusher_crash\"\nat_ms = 0\ntimes = 8\n\
         {DATA}[workload]\nworkers = 4\nduration_s = 1.5\n[workload.mix]\nmark_all_read = 1\ncreate = 3\n"
    );
    let r = run_and_verify(&toml, 60).await;
    let seed = find(&r, "zset-buffer");
    assert_eq!(seed.figures["flusher_crashes"], 8.0, "{:?}", seed.figures);
    // Each armed crash loses its claim (a failed SQL write in the flusher would add more).
    assert!(seed.figures["lost_flush_claims"] >= 8.0, "{:?}", seed.figures);
    assert!(seed.check.users_mismatched > 0, "lost deltas show as drift");
    // Conservation: all the drift comes from lost deltas (per user they may cancel).
    assert!(seed.check.drift_abs_total > 0);
    assert!(seed.check.drift_abs_total as f64 <= seed.figures["lost_flush_delta_abs"], "{:?}", seed.figures);
    assert_eq!(seed.check.label(), "drift-expected");
    assert_eq!(seed.anomalies.len(), 1);
    assert_eq!(seed.anomalies[0].name, "lost_flush");
    assert_eq!(seed.anomalies[0].count as f64, seed.figures["lost_flush_claims"]);
    let durable = find(&r, "zset-buffer-durable");
    assert_eq!(durable.figures["flusher_crashes"], 8.0);
    assert!(durable.figures["recovered_claims"] >= 8.0, "{:?}", durable.figures);
    assert_eq!(durable.figures["lost_flush_claims"], 0.0);
    assert_eq!(durable.check.users_mismatched, 0, "{:?}", durable.check.worst_users);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_data_loss_drifts_until_the_reconciler_heals_it() {
    crate::require!(Postgres, Redis);
    for reconcile in [false, true] {
        let toml = format!(
            "strategies = [\"lua-script\", \"redis-counter\"]\nbackends = [\"postgres\"]\n{}\
             [redis]\n{}[[faults]]\nkind = \"redis_data_loss\"\nat_ms = 300\n\
             {DATA}[workload]\nworkers = 4\nduration_s = 1.5\n[workload.mix]\ncreate = 2\nmark_read = 3\nmark_all_read = 1\nread_count = 1\n",
            if reconcile { "" } else { "expect_drift = [\"lua-script\", \"redis-counter\"]\n" },
            if reconcile { "reconcile_interval_ms = 100\n" } else { "" },
        );
        let r = run_and_verify(&toml, 60).await;
        for s in &r {
            assert!(s.faults[0].fired_at_ms.is_some() && s.faults[0].outcome.starts_with("deleted"), "{:?}", s.faults);
            if reconcile {
                assert_eq!(s.check.users_mismatched, 0, "{} not healed: {:?}", s.strategy, s.check.worst_users);
                assert!(s.figures["repairs"] > 0.0);
                assert!(s.figures["heal_ms"] >= 0.0, "{:?}", s.figures);
            } else {
                assert!(s.check.users_mismatched > 0, "{}: data loss left no drift", s.strategy);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_removes_its_keys_and_touches_no_other() {
    crate::require!(Postgres, Redis);
    let mut c = redis_conn().await;
    c.set::<_, _, ()>("counterlab-test-sentinel", 42).await.unwrap();
    let plan = util::plan(&format!(
        "strategies = [\"lua-script\", \"zset-buffer\"]\nbackends = [\"postgres\"]\n{DATA}[workload]\nworkers = 2\nops = 200\n[workload.mix]\ncreate = 1\nmark_read = 1\n"
    ));
    let report = counterlab::run::run_plan(&plan, &util::options(false, None), &mut |_| {}).await.unwrap();
    let users: Vec<String> = redis::cmd("ACL").arg("USERS").query_async(&mut c).await.unwrap();
    let admin = util::admin().await;
    for s in &report.strategies {
        let left: Vec<String> =
            c.keys(format!("{}*", counterlab_strategies::redis_prefix(&s.namespace))).await.unwrap();
        assert!(left.is_empty(), "{}: {left:?}", s.strategy);
        assert!(s.identity.contains("Redis: ACL user"), "{}", s.identity);
        assert!(!users.contains(&s.namespace), "{}: its ACL user is left", s.strategy);
        let roles: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_roles WHERE rolname = $1")
            .bind(&s.namespace)
            .fetch_one(&admin)
            .await
            .unwrap();
        assert_eq!(roles, 0, "{}: its role is left", s.strategy);
    }
    let v: i64 = c.get("counterlab-test-sentinel").await.unwrap();
    c.del::<_, ()>("counterlab-test-sentinel").await.unwrap();
    assert_eq!(v, 42);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_replies_are_unknown_outcomes_that_still_applied() {
    crate::require!(Postgres, Redis);
    let toml = format!(
        "strategies = [\"redis-counter\", \"zset-buffer-durable\", \"watch-multi\"]\nbackends = [\"postgres\"]\n\
         [redis]\nflush_interval_ms = 20\n[[faults]]\nkind = \"redis_timeout\"\nat_ms = 100\ntimes = 5\n\
         {DATA}[workload]\nworkers = 4\nduration_s = 1\n[workload.mix]\ncreate = 1\nmark_read = 1\n"
    );
    let r = run_and_verify(&toml, 60).await;
    for s in &r {
        assert_eq!(s.figures["lost_replies"], 5.0, "{}: {:?}", s.strategy, s.figures);
        let unknown: u64 = s.ops.values().map(|o| o.unknown).sum();
        assert!(unknown >= 5, "{}: each lost reply is an unknown outcome", s.strategy);
        assert!(s.errors_by_class["timeout"] >= 5);
        // Nothing retried an unknown outcome, and each lost command had run: exact.
        assert_eq!(s.check.users_mismatched, 0, "{}: {:?}", s.strategy, s.check.worst_users);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_kills_only_the_runs_connections_and_the_load_goes_on() {
    crate::require!(Postgres, Redis);
    let mut c = redis_conn().await;
    let id_before: i64 = redis::cmd("CLIENT").arg("ID").query_async(&mut c).await.unwrap();
    let toml = format!(
        "strategies = [\"redis-counter\", \"lua-script\", \"watch-multi\"]\nbackends = [\"postgres\"]\n\
         [[faults]]\nkind = \"redis_disconnect\"\nat_ms = 300\n\
         {DATA}[workload]\nworkers = 4\nduration_s = 1\n[workload.mix]\ncreate = 1\nmark_read = 1\nread_count = 1\n"
    );
    let r = run_and_verify(&toml, 60).await;
    for s in &r {
        let f = &s.faults[0];
        assert!(f.fired_at_ms.is_some(), "{f:?}");
        let killed: u64 = f.outcome.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
        assert!(killed >= 1, "{}: {}", s.strategy, f.outcome);
        if s.strategy == "watch-multi" {
            // Its 4 lent connections and the dedicated ones its WATCHes ran on.
            assert!(killed > 4, "the dedicated connections were killed too: {}", f.outcome);
        }
        assert!(s.ops_total > 100, "{}: the load went on after the kill", s.strategy);
        // Ops cut by the kill may have run: each such op must be an unknown outcome of the
        // connection or timeout class, never silently counted as failed or ok.
        let unknown: u64 = s.ops.values().map(|o| o.unknown).sum();
        let wire = s.errors_by_class["connection"] + s.errors_by_class["timeout"];
        assert!(unknown <= wire, "{}: {unknown} unknown vs {:?}", s.strategy, s.errors_by_class);
    }
    // Our own test connection was not among the killed.
    let id_after: i64 = redis::cmd("CLIENT").arg("ID").query_async(&mut c).await.unwrap();
    assert_eq!(id_before, id_after);
}

/// The remaining time to live (ms) of each key under the prefix of `ns`: (data keys, marker).
async fn pttls(ns: &str) -> (Vec<(String, i64)>, i64) {
    let mut c = redis_conn().await;
    let keys: Vec<String> = c.keys(format!("{}*", counterlab_strategies::redis_prefix(ns))).await.unwrap();
    let mut data = Vec::new();
    let mut marker = -2;
    for k in keys {
        let t: i64 = c.pttl(&k).await.unwrap();
        if k == format!("{}meta", counterlab_strategies::redis_prefix(ns)) {
            marker = t;
        } else {
            data.push((k, t));
        }
    }
    (data, marker)
}

/// As the load starts (right after the seed) every key of a run's namespace expires
/// within `KEY_TTL`, so a killed run's keys go by themselves; the marker keeps its own,
/// longer expiry; the run still removes everything at its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_of_a_seeded_run_expires_within_the_ttl() {
    crate::require!(Postgres, Redis);
    let plan = util::plan(&format!(
        "strategies = [\"redis-counter\", \"lua-script\"]\nbackends = [\"postgres\"]\n{DATA}[workload]\nworkers = 2\nops = 100\n[workload.mix]\ncreate = 1\nmark_read = 1\n"
    ));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut opts = util::options(false, None);
    let s2 = seen.clone();
    opts.on_phase = Some(std::sync::Arc::new(move |p: counterlab::run::Phase, ns: &str| {
        if p != counterlab::run::Phase::Load {
            return;
        }
        // The hook runs on the run's thread: read Redis from a thread of our own.
        let ns = ns.to_string();
        let got = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(pttls(&ns))
        })
        .join()
        .unwrap();
        s2.lock().unwrap().push(got);
    }));
    let report = counterlab::run::run_plan(&plan, &opts, &mut |_| {}).await.unwrap();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(seen.len(), 2);
    let ttl = counterlab_strategies::KEY_TTL.as_millis() as i64;
    for ((data, marker), s) in seen.iter().zip(&report.strategies) {
        assert!(data.len() >= 60, "{}: one key per user at least: {}", s.strategy, data.len());
        let bad: Vec<_> = data.iter().filter(|(_, t)| *t <= 0 || *t > ttl).collect();
        let some: Vec<_> = bad.iter().take(3).collect();
        assert!(bad.is_empty(), "{}: {} keys without an expiry within {ttl} ms: {some:?}", s.strategy, bad.len());
        assert!(*marker > ttl, "{}: the marker keeps its own expiry: {marker}", s.strategy);
        let (left, _) = pttls(&s.namespace).await;
        assert!(left.is_empty(), "{}: {left:?}", s.strategy);
    }
}

/// One refresher pass gives a key made after the seed its deadline and moves the run's
/// own deadlines on; a key with an expiry of its own (a design's EXPIRE) and the marker
/// are left alone; `--keep` takes the run's deadlines off again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_refresher_moves_only_the_runs_own_deadlines() {
    crate::require!(Postgres, Redis);
    let server = counterlab_strategies::RedisServer::connect(&redis_url(), Duration::from_secs(5)).await.unwrap();
    let ns = format!("cl_test_ttl_{}", counterlab::run::new_run_id());
    let space = server.space(&ns, Duration::from_secs(5), 1).await.unwrap();
    let mut c = redis_conn().await;
    let key = |w: &str| format!("{}{w}", counterlab_strategies::redis_prefix(&ns));
    let expiry = |k: String| redis::cmd("PEXPIRETIME").arg(k).to_owned();
    c.set::<_, _, ()>(key("a"), 1).await.unwrap();
    c.set_ex::<_, _, ()>(key("own"), 1, 300).await.unwrap();
    let own_at: i64 = expiry(key("own")).query_async(&mut c).await.unwrap();
    let marker_at: i64 = expiry(key("meta")).query_async(&mut c).await.unwrap();
    assert_eq!(space.keep_alive().await.unwrap(), 1, "only the key without an expiry");
    let ttl = counterlab_strategies::KEY_TTL.as_millis() as i64;
    let a_ttl: i64 = c.pttl(key("a")).await.unwrap();
    assert!(a_ttl > 0 && a_ttl <= ttl, "{a_ttl}");
    let a_at: i64 = expiry(key("a")).query_async(&mut c).await.unwrap();
    // A key the load makes, and the deadline a millisecond later (PEXPIREAT is in ms).
    c.set::<_, _, ()>(key("b"), 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(space.refresh_expiry().await.unwrap(), 2, "a moved on, b given one");
    let (a_now, b_ttl): (i64, i64) =
        (expiry(key("a")).query_async(&mut c).await.unwrap(), c.pttl(key("b")).await.unwrap());
    assert!(a_now > a_at && b_ttl > 0 && b_ttl <= ttl, "{a_at} -> {a_now}, b {b_ttl}");
    for (k, at) in [("own", own_at), ("meta", marker_at)] {
        let now: i64 = expiry(key(k)).query_async(&mut c).await.unwrap();
        assert_eq!(now, at, "{k}'s expiry is not the run's to move");
    }
    space.mark_kept().await.unwrap();
    for (k, persistent) in [("a", true), ("b", true), ("own", false), ("meta", true)] {
        let t: i64 = c.pttl(key(k)).await.unwrap();
        assert_eq!(t == -1, persistent, "{k}: {t}");
    }
    space.delete_all().await.unwrap();
    space.release().await.unwrap();
}

/// `redis_pipeline = 4`: 8 workers' ops share 2 connections (their commands pipelined),
/// WATCH's ops keep dedicated ones; every design stays exact, what Redis and SQL hold
/// agrees with the check, and the report states the depth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_ops_share_connections_and_every_design_stays_exact() {
    crate::require!(Postgres, Redis);
    let toml = format!(
        "strategies = [\"lua-script\", \"redis-counter\", \"watch-multi\"]\nbackends = [\"postgres\"]\n\
         {DATA}[workload]\nworkers = 8\nops = 2400\nredis_pipeline = 4\n[workload.mix]\ncreate = 20\nmark_read = 35\n\
         mark_read_dup = 10\ndelete = 10\nmark_all_read = 5\nread_count = 20\n"
    );
    let plan = util::plan(&toml);
    let report = util::run_kept(&plan, None).await;
    assert_eq!(report.plan["workload"]["redis_pipeline"], 4, "report.json's plan says the depth");
    let terminal = counterlab_report::render_terminal_width(&report, 100);
    assert!(terminal.contains("Redis pipeline depth 4"), "{terminal}");
    for s in &report.strategies {
        assert!(s.ops_total >= 2400, "{}: {} ops", s.strategy, s.ops_total);
        assert_eq!(s.check.label(), "pass", "{}: {:?}", s.strategy, s.check);
        assert_eq!(s.check.users_mismatched, 0, "{}", s.strategy);
    }
    verify(&report.strategies, 60).await;
}

/// `redis_batch = 16`: each worker sends 16 ops at once as one pipeline (the parity
/// bench's one-command designs: GET, INCR and an EVALSHA of INCR). Every INCR ran
/// exactly once (what Redis holds adds up to the ops that replied), GET's reads fit the
/// history, each op is recorded with its batch's times, and the report says the batch;
/// a design whose ops are not one command is refused before the load, naming the op.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_ops_go_out_together_and_each_runs_once() {
    crate::require!(Redis);
    let bench = std::fs::read_to_string("benches/redis/parity.toml").unwrap();
    let toml = bench
        .replace(
            "strategies = [\"parity-get\", \"parity-incr\", \"parity-zincrby\", \"parity-evalsha\"]",
            "strategies = [\"parity-get\", \"parity-incr\", \"parity-evalsha\"]",
        )
        .replace("users = 10000", "users = 10")
        .replace("workers = 16\nops = 200000", "workers = 4\nops = 2000\nredis_batch = 16");
    assert!(toml.contains("redis_batch = 16") && toml.contains("users = 10\n"), "the bench file changed: {toml}");
    let dir = util::tempdir("batch");
    let o = util::options(false, Some(dir.to_path_buf()));
    let report = counterlab::run::run_plan(&util::plan(&toml), &o, &mut |_| {}).await.expect("run succeeds");
    assert_eq!(report.plan["workload"]["redis_batch"], 16, "report.json's plan says the batch");
    let terminal = counterlab_report::render_terminal_width(&report, 100);
    assert!(terminal.contains("Redis batches of 16"), "{terminal}");
    for s in &report.strategies {
        assert_eq!((s.ops_total, s.errors_total), (2000, 0), "{}: {:?}", s.strategy, s.error_samples);
        // 10 users seeded with one unread row each: every counter is there, and what
        // the INCR designs hold past the truth is one per op that replied.
        assert_eq!((s.check.users_checked, s.check.missing_counters), (10, 0), "{}", s.strategy);
        let expected = if s.strategy == "parity-get" { 0 } else { 2000 - 10 };
        assert_eq!(s.check.drift_net, expected, "{}: {:?}", s.strategy, s.check);
    }
    let get = find(&report.strategies, "parity-get");
    assert_eq!(get.check.label(), "pass", "{:?}", get.check);
    let refused = {
        let toml = format!(
            "strategies = [\"redis-counter\"]\nbackends = [\"sqlite\"]\n{DATA}[workload]\nworkers = 2\nops = 20\n\
             redis_batch = 4\n[workload.mix]\nread_count = 1\n"
        );
        let o = util::options(false, Some(dir.to_path_buf()));
        let e = counterlab::run::run_plan(&util::plan(&toml), &o, &mut |_| {}).await.err();
        format!("{:#}", e.expect("a design with no batched ops is refused"))
    };
    assert!(refused.contains("redis_batch = 4") && refused.contains("read_count"), "{refused}");
}

/// A batch's own lane (`redis_batch` on one server over TCP, `lane.rs`): three batches
/// at once take up to three plain connections beside the space's two pooled ones (one
/// each while they overlap; a fast server may answer one before the next asks, and its
/// lane is reused), the kill counts every lane and the two, and each INCR ran once, in
/// its batch's order; after the kill each killed lane fails one batch as a dropped
/// connection (a write's fate unknown; none of them ran), and the batch after that
/// opens a new lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_on_a_lane_of_its_own() {
    crate::require!(Redis);
    let server = counterlab_strategies::RedisServer::connect(&redis_url(), Duration::from_secs(5)).await.unwrap();
    let ns = counterlab::run::namespace_name(&counterlab::run::new_run_id(), "lanes");
    let space = server.space(&ns, Duration::from_secs(5), 2).await.unwrap();
    if space.batch_lanes().is_none() {
        space.release().await.unwrap();
        return util::skip(
            "SKIPPED redis::a_batch_runs_on_a_lane_of_its_own: no lanes (the Redis URL is not plain TCP)",
        );
    }
    let key = format!("{}{{u:1}}:n", space.prefix());
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for _ in 0..16 {
        pipe.cmd("INCR").arg(&key);
    }
    let ints = |r: redis::RedisResult<Vec<redis::Value>>| -> Vec<i64> {
        r.unwrap().into_iter().map(|v| redis::from_redis_value(v).unwrap()).collect()
    };
    let (a, b, c) = tokio::join!(space.query_batch(&pipe), space.query_batch(&pipe), space.query_batch(&pipe));
    let mut all = Vec::new();
    for batch in [ints(a), ints(b), ints(c)] {
        assert!(batch.windows(2).all(|w| w[1] == w[0] + 1), "one batch's INCRs in order: {batch:?}");
        all.extend(batch);
    }
    all.sort();
    assert_eq!(all, (1..=48).collect::<Vec<_>>(), "each INCR ran once");
    let lanes = space.batch_lanes().expect("lanes here");
    assert!((1..=3).contains(&lanes), "{lanes} lanes for 3 batches");
    assert_eq!(space.kill_connections().await.unwrap(), lanes as u64 + 2, "{lanes} lanes and 2 pooled connections");
    for _ in 0..lanes {
        let e = space.query_batch(&pipe).await.expect_err("a killed lane");
        let op = counterlab_strategies::classify_redis(e);
        assert_eq!(op.outcome, counterlab_core::Outcome::Unknown, "{op:?}");
    }
    assert_eq!(ints(space.query_batch(&pipe).await), (49..=64).collect::<Vec<_>>(), "a new lane; the failed ran none");
    space.stop_refresher();
    space.delete_all().await.unwrap();
    space.release().await.unwrap();
}

/// The space a pipelined run gets: 8 ops in flight at depth 4 lend 2 connections (the
/// kill counts exactly those: no dedicated one was opened), at depth 1 all 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_space_lends_one_connection_per_depth_of_ops() {
    crate::require!(Redis);
    let server = counterlab_strategies::RedisServer::connect(&redis_url(), Duration::from_secs(5)).await.unwrap();
    for (depth, conns) in [(4, 2), (1, 8)] {
        let ns = counterlab::run::namespace_name(&counterlab::run::new_run_id(), "pipelined");
        let space = server.space(&ns, Duration::from_secs(5), 8).await.unwrap().pipelined(depth, 8);
        let leases: Vec<_> = (0..8).map(|_| space.conn()).collect();
        assert_eq!(space.kill_connections().await.unwrap(), conns, "depth {depth}");
        drop(leases);
        space.stop_refresher();
        space.delete_all().await.unwrap();
        space.release().await.unwrap();
    }
}
