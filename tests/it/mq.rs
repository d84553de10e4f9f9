//! The broker strategies on PostgreSQL, MariaDB and SQLite with the shared RabbitMQ: the
//! consumer crash after an apply doubles deltas only in mq-consumer (exactly as many as
//! the consumer counted), mq-consumer-idempotent skips every redelivery, and a run
//! leaves neither its queue nor its namespace behind.

use std::time::Duration;

use counterlab::run::run_plan;
use counterlab_report::StrategyReport;
use counterlab_strategies::AmqpServer;

use crate::util;

pub fn amqp_url() -> String {
    util::url(util::Server::Rabbitmq, counterlab_strategies::DEFAULT_AMQP_URL)
}

/// Creates only (every delta +1), so doubled deltas never cancel within a user: the
/// drift is exactly the consumer's count of double applies.
const TOML: &str = "strategies = [\"mq-consumer\", \"mq-consumer-idempotent\"]\n\
    backends = [\"postgres\", \"mysql\", \"sqlite\"]\n\
    [[faults]]\nkind = \"consumer_crash_after_apply\"\nat_ms = 0\ntimes = 3\n\
    [data]\nusers = 30\nnotifications_per_user = 5\n\
    [workload]\nworkers = 3\nops = 300\n[workload.mix]\ncreate = 3\nread_count = 1\n";

const CRASHES: f64 = 3.0;

fn check_naive(s: &StrategyReport) {
    let f = &s.figures;
    let on = &s.backend.name();
    assert_eq!(f["consumer_crashes"], CRASHES, "{on}: {f:?}");
    assert_eq!(f["double_applies_after_redelivery"], CRASHES, "{on}: every crash's message applied again: {f:?}");
    assert_eq!(s.check.drift_abs_total as f64, CRASHES, "{on}: drift is the doubled deltas: {:?}", s.check);
    assert!(s.check.label().starts_with("FAIL: counters"), "{on}: {}", s.check.label());
    let named = s.anomalies.iter().find(|a| a.name == "double_apply_after_redelivery").expect("named");
    assert_eq!(named.count, s.check.users_mismatched, "{on}: every drifted user named: {:?}", s.anomalies);
    assert!(s.settle_error.is_none(), "{on}: {:?}", s.settle_error);
    assert_eq!(f["applied"], f["published"], "{on}: every published delta applied: {f:?}");
}

fn check_idempotent(s: &StrategyReport) {
    let f = &s.figures;
    let on = &s.backend.name();
    assert_eq!(f["consumer_crashes"], CRASHES, "{on}: {f:?}");
    assert_eq!(f["double_applies_after_redelivery"], 0.0, "{on}: {f:?}");
    assert_eq!(f["duplicates_skipped"], CRASHES, "{on}: each crash's redelivery skipped: {f:?}");
    assert_eq!(s.check.label(), "pass", "{on}: {:?}", s.check);
    assert!(s.anomalies.is_empty(), "{on}: {:?}", s.anomalies);
    assert_eq!(f["applied"], f["published"], "{on}: every published delta applied: {f:?}");
    assert!(f["apply_lag_p99_ms"] >= f["apply_lag_p50_ms"] && f["apply_lag_p50_ms"] > 0.0, "{on}: {f:?}");
}

/// Whether the run's SQL namespace is still there.
async fn namespace_left(s: &StrategyReport, sqlite: &std::path::Path) -> bool {
    let ns = s.namespace.as_str();
    match s.backend.name().split('+').next().unwrap() {
        "postgres" => util::schema_exists(&util::admin().await, ns).await,
        "mysql" => {
            let q = sqlx::query_scalar::<_, String>(
                "SELECT schema_name FROM information_schema.schemata WHERE schema_name = ?",
            );
            q.bind(ns).fetch_optional(&util::mysql_admin().await).await.unwrap().is_some()
        }
        "sqlite" => sqlite.join(format!("{ns}.sqlite3")).exists(),
        other => panic!("unexpected backend {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_ack_doubles_deltas_only_without_the_idempotence_record() {
    crate::require!(Postgres, Mariadb, Rabbitmq);
    let _heavy = util::heavy().await;
    let dir = util::sqlite_dir("mq");
    let report = run_plan(&util::plan(TOML), &util::options(false, Some(dir.to_path_buf())), &mut |_| {})
        .await
        .expect("run succeeds");
    // Only SQLite's note that it runs at serializable alone.
    assert!(report.skipped.iter().all(|k| k.backend.name() == "sqlite"), "{:?}", report.skipped);
    assert_eq!(report.strategies.len(), 6, "two strategies on three backends");
    let broker = AmqpServer::connect(&amqp_url(), Duration::from_secs(5)).await.expect("test RabbitMQ is up");
    for s in &report.strategies {
        assert!(s.backend.name().ends_with("+rabbitmq"), "{}", s.backend);
        match s.strategy.as_str() {
            "mq-consumer" => check_naive(s),
            _ => check_idempotent(s),
        }
        assert!(!broker.queue_exists(&s.namespace).await.unwrap(), "{}: the queue is deleted", s.namespace);
        assert!(!namespace_left(s, &dir).await, "{}: the namespace is dropped", s.namespace);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_broker_that_does_not_answer_stops_the_run_with_its_redacted_url() {
    let mut plan = util::plan(TOML);
    plan.backends = vec![counterlab::scenario::Backend::Sqlite];
    let mut opts = util::options(false, None);
    // Nothing listens on port 1. (An unconfigured default that does not answer skips the
    // broker strategies instead, as Redis's do; the shared broker here cannot be stopped.)
    opts.amqp_url = Some("amqp://guest:secret@127.0.0.1:1/%2f".into());
    let Err(refused) = run_plan(&plan, &opts, &mut |_| {}).await else { panic!("a configured broker must answer") };
    let msg = refused.to_string();
    assert!(msg.contains("rabbitmq") && msg.contains("127.0.0.1:1"), "{msg}");
    assert!(!msg.contains("secret"), "the password is redacted: {msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_space_declares_its_queue_and_clean_deletes_it() {
    crate::require!(Rabbitmq);
    let broker = AmqpServer::connect(&amqp_url(), Duration::from_secs(5)).await.expect("test RabbitMQ is up");
    let ns = format!("cl_mqtest_{}", std::process::id());
    let space = broker.space(&ns, 2).await.unwrap();
    assert_eq!(space.queue(), format!("{ns}.deltas"));
    assert!(broker.queue_exists(&ns).await.unwrap(), "declared");
    // What `counterlab clean` does for a removed leftover namespace.
    assert_eq!(broker.remove(&ns).await.unwrap(), 0, "an empty queue");
    assert!(!broker.queue_exists(&ns).await.unwrap(), "deleted");
    space.delete().await.expect("the run's own delete after it is harmless");
}
