//! cache-aside on real servers: reads really go through the Redis entry (a hit shows
//! whatever the entry holds), a write deletes it at once and again after the delay, and
//! the design holds on PostgreSQL, MariaDB and SQLite with nothing left behind; its
//! delete-first mutant shows `stale_cache_read` with how far back its reads were.

use counterlab_core::Figure;
use std::time::Duration;

use counterlab_strategies::{Isolation, PoolSpec, RedisConfig, RedisServer, SeedSpec, Server, build_redis};
use redis::AsyncCommands;

use crate::util;

const SCENARIO: &str = "strategies = [\"cache-aside\", \"cache-aside-delete-first\"]\n\
     [redis]\ncache_delay_ms = 400\ncache_ttl_ms = 10000\n\
     [data]\nusers = 60\nnotifications_per_user = 10\n\
     [workload]\nworkers = 6\nduration_s = 1.5\n\
     [workload.mix]\ncreate = 8\nmark_read = 10\ndelete = 2\nmark_all_read = 2\nread_count = 78\n";

async fn redis_conn() -> redis::aio::MultiplexedConnection {
    let url = crate::redis::redis_url();
    redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.expect("test Redis is up")
}

/// A cache-aside namespace (second deletes 3 s after a write: the steps below run well
/// within it, and settle waits for it) of two users with 3 unread rows each; the strategy named
/// `name`, and its user 1's cache key.
async fn one_namespace(
    name: &str,
) -> (counterlab_strategies::Namespace, std::sync::Arc<dyn counterlab_core::Strategy>, String) {
    let pg = Server::connect_postgres(&util::pg_url(), Duration::from_secs(5)).await.unwrap();
    let rs = RedisServer::connect(&crate::redis::redis_url(), Duration::from_secs(5)).await.unwrap();
    let ns_name = counterlab::run::namespace_name(&counterlab::run::new_run_id(), "cache_steps");
    let spec =
        PoolSpec { max_connections: 4, acquire_timeout: Duration::from_secs(5), isolation: Isolation::ReadCommitted };
    let ns = pg.create_namespace(&ns_name, spec).await.unwrap();
    ns.seed(SeedSpec { n_users: 2, notifications_per_user: 3, initial_read_per_user: 0 }).await.unwrap();
    let space = rs.space(&ns_name, Duration::from_secs(5), 2).await.unwrap();
    let cfg = RedisConfig {
        n_users: 2,
        flush_interval: Duration::from_millis(100),
        flush_batch: 100,
        reconcile_interval: None,
        cache_delay: Duration::from_secs(3),
        cache_ttl: Duration::from_secs(20),
    };
    let s = build_redis(name, ns.db().clone(), space, cfg).unwrap();
    (ns, s, format!("{}{{u:1}}:cache", counterlab_strategies::redis_prefix(&ns_name)))
}

/// Step by step on both designs: the entry a miss fills, a hit that shows what the entry
/// holds, the delete right after a write; then an old count cached as a read racing the
/// write would (after the first delete): the double delete's second delete, which settle
/// waits for, removes it; the delete-first mutant has none, so its reads stay stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_through_the_entry_and_only_the_second_delete_clears_a_racing_refill() {
    crate::require!(Postgres, Redis);
    for (name, cleared) in [("cache-aside", true), ("cache-aside-delete-first", false)] {
        let (ns, s, key) = one_namespace(name).await;
        let mut c = redis_conn().await;
        assert_eq!(s.read_count(1).await.unwrap(), 3, "{name}: a miss reads SQL");
        let ttl: i64 = c.pttl(&key).await.unwrap();
        assert!((1..=20_000).contains(&ttl), "{name}: the entry is filled with the TTL: {ttl} ms");
        let _: () = c.set(&key, 42).await.unwrap();
        assert_eq!(s.read_count(1).await.unwrap(), 42, "{name}: a hit shows the entry, not SQL");

        assert!(s.mark_read(1, 1).await.unwrap());
        assert!(!c.exists::<_, bool>(&key).await.unwrap(), "{name}: no entry right after the write");
        let _: () = c.set(&key, 3).await.unwrap();
        assert_eq!(s.read_count(1).await.unwrap(), 3);
        s.settle(Duration::from_secs(5)).await.unwrap();
        assert_eq!(!c.exists::<_, bool>(&key).await.unwrap(), cleared, "{name}: second delete");
        assert_eq!(s.read_count(1).await.unwrap(), if cleared { 2 } else { 3 }, "{name}");
        let figures: std::collections::HashMap<Figure, f64> = s.figures().into_iter().collect();
        let seconds = if cleared { 1.0 } else { 0.0 };
        assert_eq!(
            (figures[&Figure::CacheHits], figures[&Figure::SecondDeletes]),
            (3.0 - seconds, seconds),
            "{name}: {figures:?}"
        );
        assert!(s.read_lag().unwrap() >= Duration::from_secs(3));

        s.teardown().await.unwrap();
        let prefix = key.split("{u:").next().unwrap().to_string();
        ns.drop_namespace().await.unwrap();
        let left: Vec<String> = c.keys(format!("{prefix}*")).await.unwrap();
        assert!(left.is_empty(), "{left:?}");
    }
}

/// The pair on every SQL backend: the double delete passes with its reads within the
/// allowed lag, the mutant fails on reads named stale_cache_read (staler than allowed);
/// the counters are exact in both (they live in SQL), and the run leaves no key or user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pair_on_every_sql_backend() {
    crate::require!(Postgres, Mariadb, Redis);
    let _heavy = util::heavy().await;
    let sqlite = util::sqlite_dir("cache");
    let plan = util::plan(&format!("backends = [\"postgres\", \"mysql\", \"sqlite\"]\n{SCENARIO}"));
    let opts = util::options(false, Some(sqlite.as_ref().to_path_buf()));
    let r = counterlab::run::run_plan(&plan, &opts, &mut |l| eprintln!("{l}")).await.expect("the run completes");
    assert_eq!(r.strategies.len(), 6);
    for s in &r.strategies {
        let at = format!("{} on {}", s.strategy, s.backend);
        let fig = |k: &str| s.figures.get(k).copied().unwrap_or(-1.0);
        assert_eq!(s.check.users_mismatched, 0, "{at}: the SQL counter is exact");
        assert!(fig("cache_hits") > 0.0 && fig("cache_misses") > 0.0, "{at}: {:?}", s.figures);
        let names: Vec<&str> = s.anomalies.iter().map(|a| a.name.as_str()).collect();
        if s.strategy == "cache-aside" {
            assert_eq!(s.check.label(), "pass", "{at}: {:?} {names:?}", s.check);
            assert!(fig("second_deletes") > 0.0 && fig("stale_read_max_ms") == 0.0, "{at}: {:?}", s.figures);
        } else if s.backend.name().starts_with("postgres") || s.backend.name().starts_with("mysql") {
            // Whether the race lands in 1.5 s is the machine's (the zoo measures how often,
            // over seeds; the step test above shows the mechanism): what it shows is a
            // stale read, staler than allowed, and the verdict fails on reads.
            assert!(names.iter().all(|n| n.starts_with("stale_")), "{at}: {names:?}");
            if !names.is_empty() {
                assert_eq!(s.check.label(), "FAIL: reads", "{at}: {names:?}");
            }
            if names.contains(&"stale_cache_read") {
                assert!(fig("stale_read_max_ms") > fig("read_lag_allowed_ms"), "{at}: {:?}", s.figures);
            }
        }
    }
    let mut c = redis_conn().await;
    let keys: Vec<String> = c.keys(counterlab_strategies::redis_run_pattern(&r.run_id)).await.unwrap();
    let users: Vec<String> = redis::cmd("ACL").arg("USERS").query_async(&mut c).await.unwrap();
    assert!(keys.is_empty() && !users.iter().any(|u| u.contains(&r.run_id)), "{keys:?} {users:?}");
}
