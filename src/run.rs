//! Executes a resolved plan: resolve the backends, then for each backend x strategy x
//! isolation level a fresh namespace, bulk seed, the closed-loop load, the ground-truth
//! check, and teardown (or `--keep`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use counterlab_core::check_counters;
use counterlab_report::{REPORT_SCHEMA_VERSION, Report, ServerInfo, Skipped, StrategyReport, StrategyRun};
use counterlab_sim::{DriverConfig, IdPool, Mix, RetryPolicy, Skew, Stop, run_load};
use counterlab_strategies::{
    BackendError, DEFAULT_MYSQL_URL, Dialect, Isolation, PoolSpec, SeedSpec, Server, build, find,
};

use crate::clock;
use crate::scenario::RunPlan;

/// Where the backends are and how the run treats its namespaces.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// A configured PostgreSQL URL (flag or environment); None means `postgres_default`,
    /// which `auto` replaces with SQLite when it does not answer.
    pub postgres_url: Option<String>,
    /// Where a local PostgreSQL is looked for when none is configured.
    pub postgres_default: String,
    pub mysql_url: Option<String>,
    /// Directory for SQLite namespace files; None: a fresh temporary directory, removed
    /// after the run unless `keep`.
    pub sqlite_dir: Option<PathBuf>,
    /// Leave each namespace in place after the run.
    pub keep: bool,
    pub connect_timeout: Duration,
    /// Set by Ctrl-C: the load stops, the run in flight is still checked and torn down,
    /// later runs do not start, and the report says `interrupted`.
    pub cancel: Arc<AtomicBool>,
}

pub const COMMIT: &str = env!("COUNTERLAB_GIT_COMMIT");

/// A run id: UTC time plus 16 random-enough bits, a valid identifier fragment.
pub fn new_run_id() -> String {
    let (s, nanos) = clock::now_unix();
    let salt = (nanos ^ std::process::id().wrapping_mul(2_654_435_761)) & 0xffff;
    format!("{}_{salt:04x}", clock::compact(s))
}

/// The namespace one strategy run lives in: `cl_<run id>_<strategy>`, with the backend
/// and isolation level in between when given.
pub fn namespace_name(run_id: &str, strategy: &str) -> String {
    format!("cl_{run_id}_{}", strategy.replace('-', "_"))
}

fn scoped_namespace(run_id: &str, dialect: Dialect, isolation: Isolation, strategy: &str) -> String {
    let b = match dialect {
        Dialect::Postgres => "pg",
        Dialect::Mysql => "my",
        Dialect::Sqlite => "lt",
    };
    let i = match isolation {
        Isolation::ReadCommitted => "rc",
        Isolation::RepeatableRead => "rr",
        Isolation::Serializable => "sr",
    };
    namespace_name(run_id, &format!("{b}_{i}_{strategy}"))
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
        mix: Mix { weights: w.mix_weights() },
        skew: match w.zipf_exponent {
            Some(exponent) => Skew::Zipf { exponent },
            None => Skew::Uniform,
        },
        dup_k: w.dup_k,
        op_timeout: Duration::from_millis(w.op_timeout_ms),
        cancel,
        retry: RetryPolicy {
            max_attempts: plan.retry.max_attempts,
            backoff_base: Duration::from_millis(plan.retry.backoff_base_ms),
            backoff_max: Duration::from_millis(plan.retry.backoff_max_ms),
        },
    }
}

/// The command that replays this plan with the same seed and sizes.
pub fn replay_command(plan: &RunPlan) -> String {
    let mut cmd =
        format!("counterlab run {} --seed {} --workers {}", plan.scenario_path, plan.seed, plan.workload.n_workers);
    match (plan.workload.duration_s, plan.workload.ops) {
        (Some(d), _) => cmd += &format!(" --duration-s {d}"),
        (None, Some(n)) => cmd += &format!(" --ops {n}"),
        (None, None) => {}
    }
    for s in &plan.strategies {
        cmd += &format!(" --strategy {s}");
    }
    for b in &plan.backends {
        cmd += &format!(" --backend {b}");
    }
    cmd
}

/// Connects every backend the plan names. `auto` is PostgreSQL when a URL is configured
/// (then it must answer) or the default answers; otherwise embedded SQLite.
async fn resolve_backends(
    plan: &RunPlan,
    opts: &RunOptions,
    run_id: &str,
    log: &mut dyn FnMut(&str),
) -> Result<(Vec<Server>, Option<PathBuf>), BackendError> {
    let mut servers: Vec<Server> = Vec::new();
    let mut temp_dir = None;
    let sqlite_dir = |temp_dir: &mut Option<PathBuf>| match &opts.sqlite_dir {
        Some(d) => d.clone(),
        None => temp_dir.get_or_insert_with(|| std::env::temp_dir().join(format!("counterlab-{run_id}"))).clone(),
    };
    for name in &plan.backends {
        let server = match name.as_str() {
            "postgres" => {
                Server::connect_postgres(
                    opts.postgres_url.as_deref().unwrap_or(&opts.postgres_default),
                    opts.connect_timeout,
                )
                .await?
            }
            "mysql" => {
                Server::connect_mysql(opts.mysql_url.as_deref().unwrap_or(DEFAULT_MYSQL_URL), opts.connect_timeout)
                    .await?
            }
            "sqlite" => Server::open_sqlite(&sqlite_dir(&mut temp_dir)).await?,
            "auto" => match &opts.postgres_url {
                Some(url) => Server::connect_postgres(url, opts.connect_timeout).await?,
                None => match Server::connect_postgres(&opts.postgres_default, opts.connect_timeout).await {
                    Ok(s) => s,
                    Err(e) => {
                        let dir = sqlite_dir(&mut temp_dir);
                        log(&format!(
                            "no PostgreSQL configured and none answering ({e}); running on embedded SQLite in {}. \
                             For a server: --postgres URL or COUNTERLAB_POSTGRES_URL (docker compose up -d starts one)",
                            dir.display()
                        ));
                        Server::open_sqlite(&dir).await?
                    }
                },
            },
            other => unreachable!("backend {other} was validated"),
        };
        if !servers.iter().any(|s| s.dialect() == server.dialect()) {
            log(&format!("backend {}: {} at {}", server.dialect().name(), server.version(), server.location()));
            servers.push(server);
        }
    }
    Ok((servers, temp_dir))
}

/// Runs every backend x strategy x isolation level of the plan. Progress goes to `log`.
pub async fn run_plan(plan: &RunPlan, opts: &RunOptions, log: &mut dyn FnMut(&str)) -> Result<Report, BackendError> {
    let run_id = new_run_id();
    let started = clock::iso8601(clock::now_unix().0);
    let (servers, temp_dir) = resolve_backends(plan, opts, &run_id, log).await?;
    log(&format!("run {run_id}"));
    let cfg = driver_config(plan, opts.cancel.clone());
    let seed_spec = SeedSpec {
        n_users: plan.data.n_users,
        notifications_per_user: plan.data.notifications_per_user,
        initial_read_per_user: plan.data.initial_read_per_user,
    };
    let mut reports = Vec::new();
    let mut skipped = Vec::new();
    let result = async {
        for server in &servers {
            for name in &plan.strategies {
                let info = *find(name).expect("plan strategies were validated");
                let mut levels: Vec<Isolation> = plan
                    .isolation_for(name)
                    .iter()
                    .map(|l| Isolation::from_name(l).expect("validated level"))
                    .collect();
                if server.dialect() == Dialect::Sqlite {
                    for l in levels.iter().filter(|l| !server.supports(**l)) {
                        skipped.push(Skipped {
                            strategy: name.clone(),
                            backend: "sqlite".into(),
                            isolation: l.name().into(),
                            reason: "SQLite transactions are always serializable; run once at serializable instead"
                                .into(),
                        });
                    }
                    levels = vec![Isolation::Serializable];
                }
                for isolation in levels {
                    if opts.cancel.load(Ordering::Relaxed) {
                        log(&format!(
                            "interrupted: {name} on {} at {} not run",
                            server.dialect().name(),
                            isolation.name()
                        ));
                        continue;
                    }
                    reports
                        .push(run_one(plan, opts, &cfg, server, &run_id, name, info, isolation, seed_spec, log).await?);
                }
            }
        }
        Ok::<_, BackendError>(())
    }
    .await;
    if let Some(dir) = temp_dir.filter(|_| !opts.keep) {
        std::fs::remove_dir_all(&dir).ok();
    }
    result?;
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
        servers: servers
            .iter()
            .map(|s| ServerInfo {
                backend: s.dialect().name().into(),
                url: s.location().into(),
                version: s.version().into(),
            })
            .collect(),
        strategies: reports,
        skipped,
        all_guarantees_held: all_held,
        interrupted: opts.cancel.load(Ordering::Relaxed),
        replay_command: replay_command(plan),
    })
}

#[allow(clippy::too_many_arguments)]
async fn run_one(
    plan: &RunPlan,
    opts: &RunOptions,
    cfg: &DriverConfig,
    server: &Server,
    run_id: &str,
    name: &str,
    info: counterlab_core::StrategyInfo,
    isolation: Isolation,
    seed_spec: SeedSpec,
    log: &mut dyn FnMut(&str),
) -> Result<StrategyReport, BackendError> {
    let backend = server.dialect().name();
    let ns_name = scoped_namespace(run_id, server.dialect(), isolation, name);
    let spec = PoolSpec {
        max_connections: plan.workload.connections,
        // Bounds the wait for a pooled connection (and SQLite's write lock).
        acquire_timeout: Duration::from_millis(plan.workload.op_timeout_ms),
        isolation,
    };
    let ns = server.create_namespace(&ns_name, spec).await?;
    let result = async {
        let in_effect = ns.isolation_in_effect().await?;
        let t = Instant::now();
        ns.seed(seed_spec).await?;
        let seed_s = t.elapsed().as_secs_f64();
        log(&format!(
            "{name} on {backend} at {} (server says {in_effect}): seeded {} notifications in {seed_s:.2}s into {ns_name}",
            isolation.name(),
            seed_spec.n_users * seed_spec.notifications_per_user
        ));
        let strategy = build(name, ns.db().clone()).expect("catalog strategies build");
        let pool = Arc::new(IdPool::seeded(seed_spec.n_users, seed_spec.notifications_per_user, seed_spec.initial_read_per_user));
        let load = run_load(strategy, pool, cfg).await;
        let rows = ns.check_rows(seed_spec.n_users).await?;
        let check = check_counters(&rows, info.guarantee);
        log(&format!(
            "{name} on {backend} at {}: {} ops at {:.0} ops/s, {} of {} users mismatched: {}",
            isolation.name(),
            load.total_ops(),
            load.throughput_ops_per_s(),
            check.users_mismatched,
            check.users_checked,
            check.verdict.name()
        ));
        Ok::<_, BackendError>(StrategyReport::new(StrategyRun {
            info,
            backend,
            isolation: isolation.name(),
            isolation_in_effect: &in_effect,
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
        let dropped = ns.drop_namespace().await;
        // A failed run reports its own error; a failed drop after a good run is one.
        if result.is_ok() {
            dropped?;
        }
    }
    result
}
