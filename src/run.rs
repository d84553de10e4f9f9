//! Executes a resolved plan: for each strategy, a fresh namespace, bulk seed, the
//! closed-loop load, the ground-truth check, then teardown (or `--keep`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use counterlab_core::check_counters;
use counterlab_report::{REPORT_SCHEMA_VERSION, Report, ServerInfo, StrategyReport, StrategyRun};
use counterlab_sim::{DriverConfig, IdPool, Mix, Skew, Stop, run_load};
use counterlab_strategies::postgres::{PgServer, SeedSpec};
use counterlab_strategies::{BackendError, build_postgres, find};

use crate::clock;
use crate::scenario::RunPlan;

/// Where the backend came from and how the run treats its namespaces.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub postgres_url: String,
    /// Leave each strategy's namespace in place after the run.
    pub keep: bool,
    pub connect_timeout: Duration,
    /// Set by Ctrl-C: the load stops, the strategy in flight is still checked and torn
    /// down, later strategies do not start, and the report says `interrupted`.
    pub cancel: Arc<AtomicBool>,
}

pub const COMMIT: &str = env!("COUNTERLAB_GIT_COMMIT");

/// A run id: UTC time plus 16 random-enough bits, a valid identifier fragment.
pub fn new_run_id() -> String {
    let (s, nanos) = clock::now_unix();
    let salt = (nanos ^ std::process::id().wrapping_mul(2_654_435_761)) & 0xffff;
    format!("{}_{salt:04x}", clock::compact(s))
}

/// The schema a strategy's run lives in: `cl_<run id>_<strategy>`.
pub fn namespace_name(run_id: &str, strategy: &str) -> String {
    format!("cl_{run_id}_{}", strategy.replace('-', "_"))
}

fn driver_config(plan: &RunPlan, cancel: Arc<AtomicBool>) -> DriverConfig {
    let w = &plan.workload;
    DriverConfig {
        seed: plan.seed,
        n_workers: w.n_workers,
        stop: match (w.duration_s, w.ops) {
            (Some(d), _) => Stop::Duration(Duration::from_secs_f64(d)),
            (None, Some(n)) => Stop::Ops(n),
            (None, None) => unreachable!("the plan always has a stop condition"),
        },
        mix: Mix {
            weights: w.mix_weights(),
        },
        skew: match w.zipf_exponent {
            Some(exponent) => Skew::Zipf { exponent },
            None => Skew::Uniform,
        },
        dup_k: w.dup_k,
        op_timeout: Duration::from_millis(w.op_timeout_ms),
        cancel,
    }
}

/// The command that replays this plan with the same seed and sizes.
pub fn replay_command(plan: &RunPlan) -> String {
    let mut cmd = format!(
        "counterlab run {} --seed {} --workers {}",
        plan.scenario_path, plan.seed, plan.workload.n_workers
    );
    match (plan.workload.duration_s, plan.workload.ops) {
        (Some(d), _) => cmd += &format!(" --duration-s {d}"),
        (None, Some(n)) => cmd += &format!(" --ops {n}"),
        (None, None) => {}
    }
    for s in &plan.strategies {
        cmd += &format!(" --strategy {s}");
    }
    cmd
}

/// Runs every strategy of the plan against PostgreSQL. Progress lines go to `log`.
pub async fn run_plan(
    plan: &RunPlan,
    opts: &RunOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Report, BackendError> {
    let server = PgServer::connect(&opts.postgres_url, opts.connect_timeout).await?;
    let run_id = new_run_id();
    let started = clock::iso8601(clock::now_unix().0);
    log(&format!(
        "run {run_id}: postgres {} at {}",
        server.version(),
        server.url_redacted()
    ));
    let cfg = driver_config(plan, opts.cancel.clone());
    let seed_spec = SeedSpec {
        n_users: plan.data.n_users,
        notifications_per_user: plan.data.notifications_per_user,
        initial_read_per_user: plan.data.initial_read_per_user,
    };
    let mut reports = Vec::new();
    for name in &plan.strategies {
        if opts.cancel.load(Ordering::Relaxed) {
            log(&format!("interrupted: {name} and later strategies not run"));
            break;
        }
        let info = *find(name).expect("plan strategies were validated");
        let ns_name = namespace_name(&run_id, name);
        // The acquire timeout bounds the wait for a pooled connection; ops time out anyway.
        let ns = server
            .create_namespace(
                &ns_name,
                plan.workload.connections,
                Duration::from_millis(plan.workload.op_timeout_ms),
            )
            .await?;
        let result = async {
            let t = Instant::now();
            ns.seed(seed_spec).await?;
            let seed_s = t.elapsed().as_secs_f64();
            log(&format!(
                "{name}: seeded {} notifications in {seed_s:.2}s into {ns_name}",
                seed_spec.n_users * seed_spec.notifications_per_user
            ));
            let strategy =
                build_postgres(name, ns.pool().clone()).expect("catalog strategies build");
            let pool = Arc::new(IdPool::seeded(
                seed_spec.n_users,
                seed_spec.notifications_per_user,
                seed_spec.initial_read_per_user,
            ));
            let load = run_load(strategy, pool, &cfg).await;
            let rows = ns.check_rows(seed_spec.n_users).await?;
            let check = check_counters(&rows, info.guarantee);
            log(&format!(
                "{name}: {} ops at {:.0} ops/s, {} of {} users mismatched: {}",
                load.total_ops(),
                load.throughput_ops_per_s(),
                check.users_mismatched,
                check.users_checked,
                check.verdict.name()
            ));
            Ok::<_, BackendError>(StrategyReport::new(StrategyRun {
                info,
                backend: "postgres",
                namespace: &ns_name,
                namespace_kept: opts.keep,
                seed_s,
                load: &load,
                check: &check,
            }))
        }
        .await;
        if opts.keep {
            ns.keep().await;
        } else {
            let dropped = ns.drop_schema().await;
            // A failed run reports its own error; a failed drop after a good run is one.
            if result.is_ok() {
                dropped?;
            }
        }
        reports.push(result?);
    }
    let all_held = reports.iter().all(|r| r.check.matches_guarantee);
    Ok(Report {
        report_schema_version: REPORT_SCHEMA_VERSION,
        counterlab_version: env!("CARGO_PKG_VERSION").to_string(),
        git_commit: COMMIT.to_string(),
        scenario: plan.scenario.clone(),
        scenario_path: plan.scenario_path.clone(),
        seed: plan.seed,
        run_id,
        started_at_utc: started,
        plan: serde_json::to_value(plan).expect("plan serializes"),
        servers: vec![ServerInfo {
            backend: "postgres".into(),
            url: server.url_redacted().to_string(),
            version: server.version().to_string(),
        }],
        strategies: reports,
        all_guarantees_held: all_held,
        interrupted: opts.cancel.load(Ordering::Relaxed),
        replay_command: replay_command(plan),
    })
}
