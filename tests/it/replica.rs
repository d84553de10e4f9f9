//! Replica reads on the local topologies (scripts/topologies/): a PostgreSQL standby
//! whose replay is paused and a Redis replica whose replication stream is paused
//! (CLIENT PAUSE WRITE) serve old counts: the run names them `stale_read` with witnesses
//! and a staleness distribution, finds no write-path anomaly, and leaves nothing on the
//! primaries. A topology that cannot be started is SKIPPED loudly (a failure under
//! COUNTERLAB_REQUIRE_SERVERS=1).

use counterlab_core::Figure;
use std::sync::Arc;
use std::time::Duration;

use counterlab::run::{Phase, run_plan};
use counterlab_report::{Report, StrategyReport};
use sqlx::postgres::PgPoolOptions;

use crate::util;

const PG_PRIMARY: &str = "postgres://postgres@127.0.0.1:5433/test";
const PG_STANDBY: &str = "postgres://postgres@127.0.0.1:5434/test";
const REDIS_PRIMARY: &str = "redis://127.0.0.1:6390";
const REDIS_REPLICA: &str = "redis://127.0.0.1:6391";
/// How long the replica is held back during the load (well past the bound below).
const HOLD_MS: u64 = 1500;

/// Starts a topology with its script (idempotent, bounded waits); false (after a loud
/// SKIPPED line) when it cannot be started, a failure when servers are required.
fn topology(script: &str) -> bool {
    let path = format!("{}/scripts/topologies/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(&path).arg("start").output();
    let why = match out {
        Ok(o) if o.status.success() => return true,
        Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
        Err(e) => e.to_string(),
    };
    assert!(std::env::var("COUNTERLAB_REQUIRE_SERVERS").as_deref() != Ok("1"), "{script} did not start: {why}");
    util::skip(&format!("SKIPPED replica::* (a test needing {script}): it did not start: {why}"));
    false
}

fn scenario(strategy: &str) -> String {
    format!(
        "strategies = [\"{strategy}\"]\nbackends = [\"postgres\"]\n\
         [replica]\nread_from = [\"primary\", \"replica\"]\nstale_read_bound_ms = 200\n\
         [data]\nusers = 20\nnotifications_per_user = 10\n\
         [workload]\nworkers = 6\nduration_s = 3\n\
         [workload.mix]\ncreate = 15\nmark_read = 15\ndelete = 5\nread_count = 65\n"
    )
}

/// Run options on the topologies: primaries and their replicas.
fn topology_options() -> counterlab::run::RunOptions {
    let mut opts = util::options(false, None);
    opts.postgres_url = Some(PG_PRIMARY.into());
    opts.postgres_replica_url = Some(PG_STANDBY.into());
    opts.redis_url = Some(REDIS_PRIMARY.into());
    opts.redis_replica_url = Some(REDIS_REPLICA.into());
    opts
}

/// A shipped scenario that reads replicas (`scenarios::every_shipped_scenario_runs_small`):
/// run on the topologies (its namespaces are dropped by the run, on the private primary),
/// every row's counters hold, every planned op ran, nothing is left on the primary.
pub async fn run_shipped(file: &std::path::Path, plan: &counterlab::scenario::RunPlan) {
    if !topology("pg-standby.sh") || !topology("redis-replica.sh") {
        eprintln!("SKIPPED: {} (its topologies did not start)", file.display());
        return;
    }
    let r = run_plan(plan, &topology_options(), &mut |_| {}).await.expect("the run completes");
    assert!(r.skipped.is_empty() && !r.strategies.is_empty(), "{}: {:?}", file.display(), r.skipped);
    for s in &r.strategies {
        assert_eq!(s.check.users_mismatched, 0, "{}: {} broke its counters", file.display(), s.label());
        assert!(s.anomalies.iter().all(|a| a.name == "stale_read"), "{}: {:?}", file.display(), s.anomalies);
        assert_eq!(s.ops_total + s.ops.values().map(|o| o.skipped).sum::<u64>(), 300, "{}", s.label());
        assert_eq!(s.staleness.is_some(), s.read_from.name() != "primary", "{}", s.label());
    }
    assert_eq!(left_on_primary().await, 0, "{}: schemas or roles left on the primary", file.display());
}

/// `cl_` schemas and roles on the private primary.
async fn left_on_primary() -> i64 {
    let primary = PgPoolOptions::new().max_connections(1).connect(PG_PRIMARY).await.unwrap();
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'cl\\_%') \
         + (SELECT count(*) FROM pg_roles WHERE rolname LIKE 'cl\\_%')",
    )
    .fetch_one(&primary)
    .await
    .unwrap()
}

/// The run, with `hold` started as each replica cell's load begins.
async fn run(strategy: &str, hold: Arc<dyn Fn() + Send + Sync>) -> Report {
    let plan = util::plan(&scenario(strategy));
    let mut opts = topology_options();
    opts.on_phase = Some(Arc::new(move |phase: Phase, ns: &str| {
        if phase == Phase::Load && ns.ends_with("_rep") {
            hold();
        }
    }));
    run_plan(&plan, &opts, &mut |l| eprintln!("{l}")).await.expect("the run completes")
}

/// The replica row shows stale reads past the bound as `stale_read` (with witnesses and
/// the distribution), and nothing that would blame the write path; the primary row none.
fn assert_stale_only_on_the_replica(r: &Report) {
    let row = |from: &str| -> &StrategyReport {
        r.strategies
            .iter()
            .find(|s| s.read_from.name() == from)
            .unwrap_or_else(|| panic!("a {from} row: {:?}", r.skipped))
    };
    let (primary, replica) = (row("primary"), row("replica"));
    assert!(primary.anomalies.is_empty() && primary.staleness.is_none(), "{:?}", primary.anomalies);
    let names: Vec<&str> = replica.anomalies.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["stale_read"], "only staleness, no write-path anomaly: {:?}", replica.anomalies);
    assert_eq!(replica.check.users_mismatched, 0, "the counters themselves are exact");
    let a = &replica.anomalies[0];
    assert!(!a.witnesses.is_empty() && a.witnesses.iter().all(|w| w.note.contains("before the read began")), "{a:?}");
    let st = replica.staleness.as_ref().expect("a replica row has a staleness");
    assert!(st.over_bound > 0 && st.over_bound <= st.stale_reads, "{st:?}");
    assert_eq!(st.over_bound, a.count, "{st:?}");
    assert!(st.max_ms > 200.0 && st.max_counts > 0, "{st:?}");
    assert_eq!(st.buckets.iter().map(|b| b.count).sum::<u64>(), st.stale_reads, "{st:?}");
    assert!(replica.figures["replica_reads"] > 0.0, "{:?}", replica.figures);
    assert!(replica.check.label().starts_with("FAIL"), "{}", replica.check.label());
}

/// PostgreSQL: replay paused on the private standby for HOLD_MS while the load runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_standby_serves_stale_reads_named_stale_read_not_write_anomalies() {
    crate::require!(Postgres);
    if !topology("pg-standby.sh") {
        return;
    }
    let standby = PgPoolOptions::new().max_connections(1).connect(PG_STANDBY).await.expect("the standby answers");
    let resume = Resume;
    let s = standby.clone();
    let hold: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        let s = s.clone();
        tokio::spawn(async move {
            sqlx::query("SELECT pg_wal_replay_pause()").execute(&s).await.expect("pause replay");
            tokio::time::sleep(Duration::from_millis(HOLD_MS)).await;
            sqlx::query("SELECT pg_wal_replay_resume()").execute(&s).await.expect("resume replay");
        });
    });
    let r = run("conditional-update", hold).await;
    drop(resume);
    assert_stale_only_on_the_replica(&r);
    // Nothing left on the private primary (the standby follows it).
    assert_eq!(left_on_primary().await, 0, "schemas or roles left on the primary");
}

/// Resumes the standby's replay whatever happened (a failed assertion included), on a
/// runtime of its own (Drop cannot await).
struct Resume;

impl Drop for Resume {
    fn drop(&mut self) {
        let resumed = std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let c = PgPoolOptions::new().max_connections(1).connect(PG_STANDBY).await?;
                sqlx::query("SELECT pg_wal_replay_resume()").execute(&c).await.map(|_| ())
            })
        });
        if let Ok(Err(e)) = resumed.join() {
            eprintln!("could not resume the standby's replay: {e}");
        }
    }
}

/// Redis: the replica's replication stream paused (CLIENT PAUSE WRITE: it keeps
/// answering reads) for HOLD_MS while the load runs; the design is redis-counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_replica_serves_stale_reads_and_its_acl_user_goes() {
    crate::require!(Postgres, Redis);
    if !topology("redis-replica.sh") || !topology("pg-standby.sh") {
        return;
    }
    let hold: Arc<dyn Fn() + Send + Sync> = Arc::new(|| {
        tokio::spawn(async {
            let mut c = redis::Client::open(REDIS_REPLICA).unwrap().get_multiplexed_async_connection().await.unwrap();
            let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(HOLD_MS).arg("WRITE").query_async(&mut c).await.unwrap();
        });
    });
    let r = run("redis-counter", hold).await;
    assert_stale_only_on_the_replica(&r);
    for url in [REDIS_PRIMARY, REDIS_REPLICA] {
        let mut c = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
        let users: Vec<String> = redis::cmd("ACL").arg("USERS").query_async(&mut c).await.unwrap();
        assert!(users.iter().all(|u| !u.starts_with("cl_")), "{url}: ACL users left: {users:?}");
        let keys: Vec<String> = redis::cmd("KEYS").arg("cl:*").query_async(&mut c).await.unwrap();
        assert!(keys.is_empty(), "{url}: keys left: {keys:?}");
    }
}

/// `replica-fallback` on a replica that cannot answer (nothing listens on 5439): every
/// read falls back to the strategy's own read (the primary's value) and is counted;
/// plain `replica` reads fail instead, as failures (a read never half applies). Runs on
/// the shared PostgreSQL, no topology needed; the namespace is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_replica_falls_back_to_the_primary_and_counts_it() {
    crate::require!(Postgres);
    use counterlab_core::{Outcome, ReadFrom, SeedSpec, Strategy};
    use counterlab_strategies::{CatchUp, Isolation, PoolSpec, ReplicaReader, ReplicaReads, Server};
    let pg = Server::connect_postgres(&util::pg_url(), Duration::from_secs(5)).await.unwrap();
    let ns_name = counterlab::run::namespace_name(&counterlab::run::new_run_id(), "replica_fallback");
    let spec =
        PoolSpec { max_connections: 2, acquire_timeout: Duration::from_secs(2), isolation: Isolation::ReadCommitted };
    let ns = pg.create_namespace(&ns_name, spec).await.unwrap();
    ns.seed(SeedSpec { n_users: 2, notifications_per_user: 4, initial_read_per_user: 1 }).await.unwrap();
    let dead = "postgres://postgres@127.0.0.1:5439/test";
    let wrap = |mode| {
        let inner = counterlab_strategies::build("conditional-update", ns.db().clone()).unwrap();
        let reader = ReplicaReader::sql(ns.replica_db(dead, spec).unwrap(), dead);
        ReplicaReads::new(inner, reader, CatchUp::Pg(ns.db().clone()), mode)
    };
    let fallback = wrap(ReadFrom::ReplicaFallback);
    fallback.create(1).await.unwrap();
    assert_eq!(fallback.read_count(1).await.unwrap(), 4, "the primary's count: 3 seeded unread + 1");
    assert_eq!(fallback.read_count(2).await.unwrap(), 3);
    let fig = |s: &ReplicaReads, k: Figure| s.figures().into_iter().find(|f| f.0 == k).map(|f| f.1);
    assert_eq!(fig(&fallback, Figure::ReplicaFallbacks), Some(2.0));
    assert_eq!(
        (fig(&fallback, Figure::ReplicaReads), fig(&fallback, Figure::ReplicaReadErrors)),
        (Some(0.0), Some(2.0))
    );
    let strict = wrap(ReadFrom::Replica);
    let e = strict.read_count(1).await.unwrap_err();
    assert_eq!(e.outcome, Outcome::Fail, "{e:?}");
    assert!(e.message.starts_with("replica:"), "{e:?}");
    assert_eq!(fig(&strict, Figure::ReplicaFallbacks), None, "no fallback figure without fallback");
    fallback.release().await.unwrap();
    strict.release().await.unwrap();
    ns.drop_namespace().await.unwrap();
}
