//! The single-statement design and the worker-held connection, on PostgreSQL (each
//! writable-cte op alone is in `sequential.rs`): one interleaving forced with a row lock
//! shows the snapshot mutant double-decrementing where the design does not; a worker's
//! held connection serves its ops, rolls back a transaction dropped open and is not
//! reused after a query cut off mid-reply.

use std::sync::Arc;
use std::time::Duration;

use counterlab_core::Strategy;
use counterlab_strategies::{Begin, Db, Isolation, Namespace, PoolSpec, SeedSpec, Server, build, hold_connection};
use sqlx::{AssertSqlSafe, PgPool};

use crate::util;

async fn namespace(tag: &str, users: u64, per_user: u64) -> (Namespace, String) {
    let server = Server::connect_postgres(&util::pg_url(), Duration::from_secs(5)).await.unwrap();
    let schema = counterlab::run::namespace_name(&counterlab::run::new_run_id(), tag);
    let spec =
        PoolSpec { max_connections: 4, acquire_timeout: Duration::from_secs(5), isolation: Isolation::ReadCommitted };
    let ns = server.create_namespace(&schema, spec).await.unwrap();
    ns.seed(SeedSpec { n_users: users, notifications_per_user: per_user, initial_read_per_user: 0 }).await.unwrap();
    (ns, schema)
}

async fn scalar(admin: &PgPool, sql: String) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(admin).await.unwrap()
}

/// (stored counter, unread rows) of `user`.
async fn stored(admin: &PgPool, schema: &str, user: i64) -> (i64, i64) {
    let c =
        scalar(admin, format!("SELECT unread::bigint FROM \"{schema}\".unread_counts WHERE user_id = {user}")).await;
    let t = format!("SELECT count(*) FROM \"{schema}\".notifications WHERE user_id = {user} AND NOT is_read");
    (c, scalar(admin, t).await)
}

/// Holds user 1's row 1 with a concurrent mark_read's transaction (marked read, counter
/// lowered, not committed), starts `name`'s mark_read of it, waits until that statement
/// is blocked on the row lock (its snapshot taken), then commits. Returns what the
/// blocked call replied and the stored (counter, truth) of user 1.
async fn mark_read_behind_a_lock(name: &str) -> (bool, (i64, i64)) {
    let admin = util::admin().await;
    let (ns, schema) = namespace("ctelock", 1, 2).await;
    let s: Arc<dyn Strategy> = build(name, ns.db().clone()).unwrap();
    let mut other = admin.begin().await.unwrap();
    for sql in [
        format!("UPDATE \"{schema}\".notifications SET is_read = true WHERE id = 1 AND NOT is_read"),
        format!("UPDATE \"{schema}\".unread_counts SET unread = unread - 1 WHERE user_id = 1"),
    ] {
        sqlx::query(AssertSqlSafe(sql)).execute(&mut *other).await.unwrap();
    }
    let call = tokio::spawn({
        let s = s.clone();
        async move { s.mark_read(1, 1).await }
    });
    // Bounded: 500 polls of 10 ms for the call's backend to wait on `other`'s lock.
    let holder: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *other).await.unwrap();
    let blocked = format!("SELECT count(*) FROM pg_stat_activity WHERE {holder} = ANY(pg_blocking_pids(pid))");
    let mut waited = false;
    for _ in 0..500 {
        if scalar(&admin, blocked.clone()).await > 0 {
            waited = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(waited, "{name}: the call never waited on the row lock");
    other.commit().await.unwrap();
    let changed = tokio::time::timeout(Duration::from_secs(10), call).await.unwrap().unwrap().unwrap();
    let after = stored(&admin, &schema, 1).await;
    ns.drop_namespace().await.unwrap();
    (changed, after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_read_racing_a_committed_one_decrements_once_but_the_snapshot_mutant_twice() {
    crate::require!(Postgres);
    let (changed, after) = mark_read_behind_a_lock("writable-cte").await;
    assert!(!changed, "the row was read by the time the UPDATE got its lock");
    assert_eq!(after, (1, 1), "writable-cte: one transition, one decrement");
    let (changed, after) = mark_read_behind_a_lock("writable-cte-snapshot").await;
    assert!(changed, "the mutant's reply comes from the snapshot too: it claims the transition");
    assert_eq!(after, (0, 1), "the mutant's guard saw the snapshot and decremented again");
}

async fn pid(db: &Db) -> i64 {
    db.opt_i64("SELECT pg_backend_pid()::bigint", &[]).await.unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_s_held_connection_serves_its_ops_and_is_given_up_when_unsafe() {
    crate::require!(Postgres);
    let admin = util::admin().await;
    let (ns, schema) = namespace("held", 1, 2).await;
    let db = ns.db().clone();
    hold_connection(async {
        let first = pid(&db).await;
        // Its connection serves statements and transactions alike, and no other caller.
        let other = tokio::spawn({
            let db = db.clone();
            async move { pid(&db).await }
        });
        assert_ne!(other.await.unwrap(), first, "another task got the pool's connection");
        let mut tx = db.begin(Begin::Plain).await.unwrap();
        assert_eq!(tx.row_i64("SELECT pg_backend_pid()::bigint", &[], 1).await.unwrap(), Some(vec![first]));
        tx.commit().await.unwrap();
        assert_eq!(pid(&db).await, first);
        // A transaction dropped open is rolled back before anything else runs on it.
        let mut tx = db.begin(Begin::Plain).await.unwrap();
        assert_eq!(tx.exec("UPDATE notifications SET is_read = true WHERE id = 1", &[]).await.unwrap(), 1);
        drop(tx);
        assert_eq!(db.opt_i64("SELECT count(*) FROM notifications WHERE is_read", &[]).await.unwrap(), Some(0));
        // A query cut off mid-reply: its connection is not reused; the next op is right.
        let cut = tokio::time::timeout(Duration::from_millis(50), db.opt_i64("SELECT 7 FROM pg_sleep(0.5)", &[])).await;
        assert!(cut.is_err(), "the sleep was cut off");
        assert_eq!(db.opt_i64("SELECT 8::bigint", &[]).await.unwrap(), Some(8));
    })
    .await;
    let read = scalar(&admin, format!("SELECT count(*) FROM \"{schema}\".notifications WHERE is_read")).await;
    assert_eq!(read, 0, "the dropped transaction left nothing");
    ns.drop_namespace().await.unwrap();
}
