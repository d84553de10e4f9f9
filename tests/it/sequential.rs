//! One strategy at a time, one op at a time, on every backend: each op's answer and the
//! stored state afterwards. Sequential runs are deterministic, so exact values are
//! asserted, including the mutant's double decrement.

use counterlab_core::Figure;
use std::time::Duration;

use counterlab_strategies::{Isolation, PoolSpec, Recipe, SeedSpec, Server, build};

use crate::util;

async fn server(backend: &str) -> (Server, Option<util::Tmp>) {
    let t = Duration::from_secs(5);
    match backend {
        "postgres" => (Server::connect_postgres(&util::pg_url(), t).await.unwrap(), None),
        "mysql" => (Server::connect_mysql(&util::mysql_url(), t).await.unwrap(), None),
        _ => {
            let dir = util::sqlite_dir("seq");
            (Server::open_sqlite(&dir).await.unwrap(), Some(dir))
        }
    }
}

async fn sequential_ops(backend: &str, name: &str) {
    let (server, dir) = server(backend).await;
    let ns_name = counterlab::run::namespace_name(&counterlab::run::new_run_id(), &format!("seq-{name}"));
    let isolation = if backend == "sqlite" { Isolation::Serializable } else { Isolation::ReadCommitted };
    let spec = PoolSpec { max_connections: 4, acquire_timeout: Duration::from_secs(5), isolation };
    let ns = server.create_namespace(&ns_name, spec).await.unwrap();
    ns.seed(SeedSpec { n_users: 3, notifications_per_user: 4, initial_read_per_user: 1 }).await.unwrap();
    let s = build(name, ns.db().clone()).unwrap();
    let at = format!("{name} on {backend}");
    let unguarded = name == "conditional-update-unguarded";

    // User 2 owns ids 5..=8, id 5 read: 3 unread.
    assert_eq!(s.read_count(2).await.unwrap(), 3, "{at}");
    assert!(s.mark_read(2, 6).await.unwrap(), "{at}: first mark_read transitions");
    assert_eq!(s.mark_read(2, 6).await.unwrap(), unguarded, "{at}: second mark_read");
    assert_eq!(s.read_count(2).await.unwrap(), if unguarded { 1 } else { 2 }, "{at}");
    if unguarded {
        // The mutant's bug, deterministically: rows_affected counted an already-read row.
        ns.keep().await.unwrap();
        let stored =
            util::stored_drift_and_drop(backend, &ns_name, dir.as_ref().map(|d| d.to_path_buf()).as_ref()).await;
        assert_eq!(stored[1], (2, 1, 2), "{at}: counter 1, truth 2");
        return;
    }
    assert!(!s.mark_read(2, 5).await.unwrap(), "{at}: already-read row");
    assert!(!s.mark_read(1, 6).await.unwrap(), "{at}: another user's notification is not touched");
    let new_id = s.create(2).await.unwrap();
    assert!(new_id > 12, "{at}: new ids follow the seeded ones, got {new_id}");
    assert_eq!(s.read_count(2).await.unwrap(), 3, "{at}");
    assert!(s.delete(2, 7).await.unwrap(), "{at}: delete unread");
    assert!(!s.delete(2, 7).await.unwrap(), "{at}: delete again");
    assert!(s.delete(2, 5).await.unwrap(), "{at}: delete read");
    assert_eq!(s.read_count(2).await.unwrap(), 2, "{at}");
    assert_eq!(s.mark_all_read(2).await.unwrap(), 2, "{at}: id 8 and the new one");
    assert_eq!(s.mark_all_read(2).await.unwrap(), 0, "{at}");
    assert_eq!(s.read_count(2).await.unwrap(), 0, "{at}");
    assert_eq!(s.read_count(3).await.unwrap(), 3, "{at}: other users untouched");
    let checked = ns.check_rows(3).await.unwrap();
    assert_eq!(
        checked.iter().map(|c| (c.user, c.counter, c.truth)).collect::<Vec<_>>(),
        vec![(1, Some(3), 3), (2, Some(0), 0), (3, Some(3), 3)]
    );
    ns.keep().await.unwrap();
    let stored = util::stored_drift_and_drop(backend, &ns_name, dir.as_ref().map(|d| d.to_path_buf()).as_ref()).await;
    assert_eq!(stored, vec![(1, 3, 3), (2, 0, 0), (3, 3, 3)], "{at}: counters and rows");
}

async fn every_strategy(backend: &str) {
    let dialect = counterlab_strategies::Dialect::from_name(backend).unwrap();
    let sql = counterlab::BUILTINS.iter().filter(|s| !s.needs_redis() && !s.needs_amqp());
    for s in sql.filter(|s| s.unsupported_on(dialect).is_none()) {
        sequential_ops(backend, s.info.name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sequential() {
    crate::require!(Postgres);
    every_strategy("postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_sequential() {
    crate::require!(Mariadb);
    every_strategy("mysql").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sequential() {
    every_strategy("sqlite").await;
}

/// The commit fault points, on the stored rows: an error before the commit leaves
/// nothing, a crash after it leaves everything and an unknown outcome, each only in the
/// op kind it was placed in; for the two-statement transaction and the single statement
/// sent in autocommit alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_faults_roll_back_or_lose_the_reply_in_the_op_they_name() {
    crate::require!(Postgres);
    for name in ["conditional-update", "writable-cte"] {
        commit_faults(name).await;
    }
}

async fn commit_faults(name: &str) {
    use counterlab_core::{Fault, OpKind, Outcome};
    let (server, _) = server("postgres").await;
    let ns_name = counterlab::run::namespace_name(&counterlab::run::new_run_id(), "seq-faults");
    let spec =
        PoolSpec { max_connections: 4, acquire_timeout: Duration::from_secs(5), isolation: Isolation::ReadCommitted };
    let ns = server.create_namespace(&ns_name, spec).await.unwrap();
    ns.seed(SeedSpec { n_users: 2, notifications_per_user: 4, initial_read_per_user: 0 }).await.unwrap();
    let s = build(name, ns.db().clone()).unwrap();
    let stored = |rows: Vec<counterlab_core::CheckInput>, u: i64| {
        let r = rows.iter().find(|r| r.user == u).unwrap();
        (r.counter, r.truth)
    };

    s.inject(Fault::ErrorBeforeCommit { op: Some(OpKind::MarkRead) }).await.unwrap();
    // A create passes by: the fault waits for a mark_read.
    s.create(1).await.unwrap();
    let e = s.mark_read(1, 2).await.unwrap_err();
    assert_eq!(e.outcome, Outcome::Fail, "{name}: {e}");
    assert_eq!(stored(ns.check_rows(2).await.unwrap(), 1), (Some(5), 5), "{name}: rolled back: still unread, counted");
    assert!(s.mark_read(1, 2).await.unwrap(), "{name}: disarmed: the next one applies");

    s.inject(Fault::CrashAfterCommit { op: Some(OpKind::MarkAllRead) }).await.unwrap();
    assert!(s.mark_read(1, 3).await.unwrap());
    let e = s.mark_all_read(1).await.unwrap_err();
    assert_eq!(e.outcome, Outcome::Unknown, "{name}: {e}");
    assert_eq!(stored(ns.check_rows(2).await.unwrap(), 1), (Some(0), 0), "{name}: committed whole: reply lost only");
    let figures = s.figures();
    assert!(
        figures.contains(&(Figure::CrashesAfterCommit, 1.0)) && figures.contains(&(Figure::ErrorsBeforeCommit, 1.0))
    );
    ns.drop_namespace().await.unwrap();
}
