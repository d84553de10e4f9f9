//! Every design's worker loop holds a connection of its own, as pgbench's clients do:
//! each built-in's and each shipped strategy file's `worker_scope` opens the scope whose
//! ops' SQL steps use the worker's connection (when the pool has one to spare), so no op
//! waits on the pool or pays its release ping.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use counterlab::scenario::{Overrides, load};
use counterlab_core::Strategy;
use counterlab_strategies::{
    AmqpServer, BUILTINS, Build, CustomStrategy, Isolation, MqConfig, Namespace, PoolSpec, RedisConfig, RedisServer,
    Server, holding_connection,
};

use crate::util;

/// Whether `s`'s worker loop, given 2 workers, runs inside a held-connection scope.
async fn holds(s: &dyn Strategy) -> bool {
    let inside = AtomicBool::new(false);
    s.worker_scope(2, Box::pin(async { inside.store(holding_connection(), Ordering::SeqCst) })).await;
    inside.load(Ordering::SeqCst)
}

async fn namespace(server: &Server, tag: &str) -> Namespace {
    let name = counterlab::run::namespace_name(&counterlab::run::new_run_id(), tag);
    let spec =
        PoolSpec { max_connections: 4, acquire_timeout: Duration::from_secs(5), isolation: Isolation::ReadCommitted };
    server.create_namespace(&name, spec).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_built_in_s_worker_loop_holds_its_own_connection() {
    crate::require!(Postgres, Redis, Rabbitmq);
    let pg = Server::connect_postgres(&util::pg_url(), Duration::from_secs(5)).await.unwrap();
    let redis = RedisServer::connect(&crate::redis::redis_url(), Duration::from_secs(5)).await.unwrap();
    let broker = AmqpServer::connect(&crate::mq::amqp_url(), Duration::from_secs(5)).await.unwrap();
    let ns = namespace(&pg, "held_all").await;
    let db = ns.db().clone();
    let cfg = RedisConfig {
        n_users: 1,
        flush_interval: Duration::from_millis(5),
        flush_batch: 100,
        reconcile_interval: None,
        cache_delay: Duration::from_millis(50),
        cache_ttl: Duration::from_secs(10),
    };
    let mut missing = Vec::new();
    for row in BUILTINS {
        let s: Arc<dyn Strategy> = match row.build {
            Build::Sql(f) => f(row.info, db.clone()),
            Build::Redis(f) => {
                f(row.info, db.clone(), redis.space(ns.name(), Duration::from_secs(5), 2).await.unwrap(), cfg)
            }
            Build::Mq(f) => {
                f(row.info, db.clone(), broker.space(ns.name(), 1).await.unwrap(), MqConfig { prefetch: 8 })
            }
        };
        if !holds(s.as_ref()).await {
            missing.push(row.info.name);
        }
        if !matches!(row.build, Build::Sql(_)) {
            s.teardown().await.unwrap();
        }
    }
    ns.drop_namespace().await.unwrap();
    assert!(missing.is_empty(), "worker loops outside a held connection: {missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strategy_file_s_worker_loop_holds_its_own_connection() {
    crate::require!(Postgres);
    let pg = Server::connect_postgres(&util::pg_url(), Duration::from_secs(5)).await.unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/bring-your-own.toml");
    let plan =
        load(&path, &Overrides::default(), &counterlab::BUILTINS.iter().map(|b| b.info.name).collect::<Vec<_>>(), 1)
            .expect("the shipped scenario loads");
    let sql_only: Vec<_> = plan.custom.iter().filter(|(_, spec)| !spec.needs_redis()).collect();
    assert!(!sql_only.is_empty(), "the scenario defines SQL strategies: {:?}", plan.custom.keys());
    let mut missing = Vec::new();
    for (name, spec) in sql_only {
        let ns = namespace(&pg, "held_file").await;
        let s = CustomStrategy::build(spec, ns.db().clone(), None).await.unwrap();
        if !holds(&s).await {
            missing.push(name.clone());
        }
        ns.drop_namespace().await.unwrap();
    }
    assert!(missing.is_empty(), "worker loops outside a held connection: {missing:?}");
}
