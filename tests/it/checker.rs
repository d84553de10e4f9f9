//! The checker against tampering: counters changed behind a correct strategy's back,
//! after a real load, are found, classified and named; the recorded history of that
//! load passes the read check, and a read of the tampered counter does not.

use std::sync::Arc;
use std::time::Duration;

use counterlab_core::{
    CounterVerdict as Verdict, Event, Guarantee, OpKind, Outcome, UserDrift, check_counters, check_reads,
};
use counterlab_sim::{DriverConfig, IdPool, Mix, Monitor, Stop, run_load};
use counterlab_strategies::{Isolation, PoolSpec, SeedSpec, Server, build};
use sqlx::AssertSqlSafe;

use crate::util;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_changed_behind_its_back_is_caught() {
    crate::require!(Postgres);
    let server = Server::connect_postgres(&util::pg_url(), Duration::from_secs(5)).await.unwrap();
    let schema = counterlab::run::namespace_name(&counterlab::run::new_run_id(), "tamper");
    let ns = server
        .create_namespace(
            &schema,
            PoolSpec {
                max_connections: 8,
                acquire_timeout: Duration::from_secs(5),
                isolation: Isolation::ReadCommitted,
            },
        )
        .await
        .unwrap();
    let spec = SeedSpec { n_users: 20, notifications_per_user: 10, initial_read_per_user: 0 };
    ns.seed(spec).await.unwrap();
    let strategy = build("conditional-update", ns.db().clone()).unwrap();
    let cfg = DriverConfig {
        dup_k: 2,
        history_limit: 100_000,
        segment: counterlab_sim::Segment::WHOLE,
        ..DriverConfig::plain(3, DriverConfig::closed_stage(4, Stop::Ops(400)), Mix { weights: [2, 3, 1, 1, 1, 1] })
    };
    let load = run_load(strategy.clone(), Arc::new(IdPool::seeded(20, 10, 0)), &cfg, Monitor::new()).await;
    assert_eq!(load.total_ops() + load.ops.iter().map(|s| s.skipped).sum::<u64>(), 400);
    // Every call is in the history (a mark_read_dup op is dup_k calls), and a correct
    // strategy's reads all fit the bounds the history allows.
    let dups = load.ops[OpKind::MarkReadDup.index()].count;
    assert_eq!(load.history.len() as u64, load.total_ops() + dups * (cfg.dup_k as u64 - 1));
    assert_eq!(load.history_dropped, 0);
    let reads = check_reads(&load.history, &|_| 10);
    assert!(reads.reads_checked > 20, "{reads:?}");
    assert_eq!(reads.violations_total, 0, "{reads:?}");
    let before = check_counters(&ns.check_rows(20).await.unwrap(), Guarantee::Exact);
    assert_eq!(before.verdict, Verdict::Pass, "{before:?}");

    let admin = util::admin().await;
    let tamper = [
        format!("UPDATE \"{schema}\".unread_counts SET unread = unread + 3 WHERE user_id = 5"),
        format!("UPDATE \"{schema}\".unread_counts SET unread = -1 WHERE user_id = 9"),
        format!("DELETE FROM \"{schema}\".unread_counts WHERE user_id = 12"),
        format!("INSERT INTO \"{schema}\".notifications (user_id) VALUES (12)"),
    ];
    for sql in tamper {
        sqlx::query(AssertSqlSafe(sql)).execute(&admin).await.unwrap();
    }
    let rows = ns.check_rows(20).await.unwrap();
    let truth = |u: i64| rows.iter().find(|r| r.user == u).unwrap().truth;
    let after = check_counters(&rows, Guarantee::Exact);
    // A read of a counter tampered by more than any op of the load could explain, after
    // the load, through the strategy itself.
    let sql = format!("UPDATE \"{schema}\".unread_counts SET unread = unread + 500 WHERE user_id = 7");
    sqlx::query(AssertSqlSafe(sql)).execute(&admin).await.unwrap();
    let shown = strategy.read_count(7).await.unwrap();
    let end = load.history.last().unwrap().complete_us;
    let read = Event {
        worker: 0,
        op: OpKind::ReadCount,
        user: 7,
        id: 0,
        invoke_us: end + 1,
        complete_us: end + 2,
        outcome: Outcome::Ok,
        observed: shown,
        attempts: 1,
        unknown_attempts: 0,
    };
    let planted = check_reads(&[load.history.clone(), vec![read]].concat(), &|_| 10);
    ns.drop_namespace().await.unwrap();
    assert_eq!(planted.violations_total, 1, "{planted:?}");
    // The bounds hold the truth (deletes of rows that may have been read loosen them).
    let v = &planted.violations[0];
    assert!(v.lo <= truth(7) && truth(7) <= v.hi && v.hi < v.read.observed, "{v:?}");
    assert_eq!(v.read.observed, truth(7) + 500);

    assert_eq!(after.verdict, Verdict::Fail);
    assert_eq!(after.users_mismatched, 3);
    assert_eq!(after.over_counted, 1);
    assert_eq!(after.under_counted, 2);
    assert_eq!(after.negative_counters, 1);
    assert_eq!(after.missing_counters, 1);
    assert!(after.worst.contains(&UserDrift { user: 12, counter: None, truth: truth(12) }));
    assert!(after.worst.iter().any(|w| w.user == 5 && w.drift() == 3));
    let expected_abs = 3 + (truth(9) + 1) as u64 + truth(12) as u64;
    assert_eq!(after.drift_abs_total, expected_abs);
}

/// The streamed check (`check_stream`, a fold over the rows as they arrive: the truth
/// beside the counters read apart in its snapshot on PostgreSQL, two merged ordered
/// streams on MariaDB and SQLite) gives what the whole list gives, keeps the tampered
/// users as witnesses and an even sample, and refuses a row for a user outside the
/// seeded range; on a one-connection pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_check_agrees_with_the_stored_rows() {
    crate::require!(Postgres, Mariadb);
    let t = Duration::from_secs(5);
    let pg = Server::connect_postgres(&util::pg_url(), t).await.unwrap();
    let my = Server::connect_mysql(&util::mysql_url(), t).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lite = Server::open_sqlite(dir.path()).await.unwrap();
    for (server, isolation) in
        [(pg, Isolation::ReadCommitted), (my, Isolation::ReadCommitted), (lite, Isolation::Serializable)]
    {
        let name = counterlab::run::namespace_name(&counterlab::run::new_run_id(), "stream");
        let spec = PoolSpec { max_connections: 1, acquire_timeout: t, isolation };
        let ns = server.create_namespace(&name, spec).await.unwrap();
        ns.seed(SeedSpec { n_users: 50, notifications_per_user: 4, initial_read_per_user: 0 }).await.unwrap();
        let tamper = [
            "UPDATE unread_counts SET unread = unread + 2 WHERE user_id = 3",
            "UPDATE unread_counts SET unread = -1 WHERE user_id = 7",
            "DELETE FROM unread_counts WHERE user_id = 11",
            "DELETE FROM unread_counts WHERE user_id = 40",
            "UPDATE notifications SET is_read = TRUE WHERE user_id = 40",
            "DELETE FROM notifications WHERE user_id = 45",
        ];
        for sql in tamper {
            exec(ns.db(), sql).await;
        }
        let got = ns.check_stream(50, Guarantee::Exact, None, 10).await.unwrap();
        let rows = ns.check_rows(50).await.unwrap();
        assert_eq!(got.result, check_counters(&rows, Guarantee::Exact), "{name}");
        let witnesses: Vec<(i64, Option<i64>, i64)> =
            got.witnesses.iter().map(|r| (r.user, r.counter, r.truth)).collect();
        assert_eq!(witnesses, [(3, Some(6), 4), (7, Some(-1), 4), (11, None, 4), (45, Some(4), 0)], "{name}");
        let sample: Vec<i64> = got.sample.iter().map(|r| r.user).collect();
        assert_eq!(sample, (0..10).map(|k| k * 5 + 1).collect::<Vec<_>>());
        assert_eq!((got.sample[2].counter, got.sample[2].truth), (None, 4), "{name}: user 11");
        exec(ns.db(), "INSERT INTO notifications (user_id) VALUES (51)").await;
        let err = ns.check_stream(50, Guarantee::Exact, None, 10).await.unwrap_err();
        assert!(err.to_string().contains("a row for user 51, outside 1..=50"), "{name}: {err}");
        // A counter outside the range is an error too (PostgreSQL reads the counters apart).
        exec(ns.db(), "DELETE FROM notifications WHERE user_id = 51").await;
        exec(ns.db(), "INSERT INTO unread_counts (user_id, unread) VALUES (52, 0)").await;
        let err = ns.check_stream(50, Guarantee::Exact, None, 10).await.unwrap_err();
        assert!(err.to_string().contains("row for user 52, outside 1..=50"), "{name}: {err}");
        ns.drop_namespace().await.unwrap();
    }
}

async fn exec(db: &counterlab_strategies::Db, sql: &'static str) {
    use counterlab_strategies::Db;
    match db {
        Db::Pg(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
        Db::My(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
        Db::Lite(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
    }
    .unwrap_or_else(|e| panic!("{sql}: {e}"));
}
