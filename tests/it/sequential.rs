//! One strategy at a time, one op at a time: each op's answer and the stored state.

use std::time::Duration;

use counterlab_strategies::build_postgres;
use counterlab_strategies::postgres::{PgServer, SeedSpec};

use crate::util;

async fn sequential_ops(name: &str) {
    let server = PgServer::connect(&util::pg_url(), Duration::from_secs(5))
        .await
        .unwrap();
    let schema =
        counterlab::run::namespace_name(&counterlab::run::new_run_id(), &format!("seq-{name}"));
    let ns = server
        .create_namespace(&schema, 4, Duration::from_secs(5))
        .await
        .unwrap();
    ns.seed(SeedSpec {
        n_users: 3,
        notifications_per_user: 4,
        initial_read_per_user: 1,
    })
    .await
    .unwrap();
    let s = build_postgres(name, ns.pool().clone()).unwrap();
    let admin = util::admin().await;

    // User 2 owns ids 5..=8, id 5 read: 3 unread.
    assert_eq!(s.read_count(2).await.unwrap(), 3, "{name}");
    assert!(
        s.mark_read(2, 6).await.unwrap(),
        "{name}: first mark_read transitions"
    );
    assert!(
        !s.mark_read(2, 6).await.unwrap(),
        "{name}: second mark_read is a no-op"
    );
    assert!(
        !s.mark_read(2, 5).await.unwrap(),
        "{name}: already-read row"
    );
    assert!(
        !s.mark_read(1, 6).await.unwrap(),
        "{name}: another user's notification is not touched"
    );
    assert_eq!(s.read_count(2).await.unwrap(), 2, "{name}");
    let new_id = s.create(2).await.unwrap();
    assert!(
        new_id > 12,
        "{name}: new ids follow the seeded ones, got {new_id}"
    );
    assert_eq!(s.read_count(2).await.unwrap(), 3, "{name}");
    assert!(s.delete(2, 7).await.unwrap(), "{name}: delete unread");
    assert!(!s.delete(2, 7).await.unwrap(), "{name}: delete again");
    assert!(s.delete(2, 5).await.unwrap(), "{name}: delete read");
    assert_eq!(s.read_count(2).await.unwrap(), 2, "{name}");
    assert_eq!(
        s.mark_all_read(2).await.unwrap(),
        2,
        "{name}: ids 8 and the new one"
    );
    assert_eq!(s.mark_all_read(2).await.unwrap(), 0, "{name}");
    assert_eq!(s.read_count(2).await.unwrap(), 0, "{name}");
    assert_eq!(
        s.read_count(3).await.unwrap(),
        3,
        "{name}: other users untouched"
    );

    let stored = util::stored_drift(&admin, ns.name()).await;
    assert_eq!(
        stored,
        vec![(1, 3, 3), (2, 0, 0), (3, 3, 3)],
        "{name}: counters and rows"
    );
    let rows: Vec<(i64, bool)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT id, is_read FROM \"{}\".notifications WHERE user_id = 2 ORDER BY id",
        ns.name()
    )))
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(rows, vec![(6, true), (8, true), (new_id, true)], "{name}");
    ns.drop_schema().await.unwrap();
    assert!(!util::schema_exists(&admin, &schema).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_update_sequential() {
    sequential_ops("direct-update").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_for_update_sequential() {
    sequential_ops("select-for-update").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_update_sequential() {
    sequential_ops("conditional-update").await;
}

#[test]
fn every_catalog_strategy_has_a_sequential_test() {
    let here = include_str!("sequential.rs");
    for s in counterlab::CATALOG {
        assert!(
            here.contains(&format!("sequential_ops(\"{}\")", s.name)),
            "{} lacks a sequential test",
            s.name
        );
    }
}
