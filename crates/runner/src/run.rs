//! Executes a resolved plan: resolve the backends, then for each backend x strategy x
//! isolation level a fresh namespace, bulk seed, the closed-loop load, the ground-truth
//! check, and teardown (or `--keep`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use counterlab_core::{
    CheckInput, Context, ErrorClass, ErrorFigures, Fault, Findings, Guarantee, Judgement, OpError, OpKind, SettledRead,
    Strategy, StrategyInfo, check_counters, check_reads, classify, judge,
};
use counterlab_report::{
    FaultEvent, HistoryReport, REPORT_SCHEMA_VERSION, Report, ServerInfo, Skipped, StrategyReport, StrategyRun,
    evaluate,
};
use counterlab_sim::{
    DriverConfig, IdPool, LoadModel, Mix, Monitor, RetryPolicy, Sample, Sampler, SamplerConfig, Skew, Stage, Stop,
    run_load,
};
use counterlab_strategies::{
    BackendError, CustomStrategy, DEFAULT_MYSQL_URL, DEFAULT_REDIS_URL, Dialect, Isolation, Pausable, PoolSpec,
    RedisConfig, RedisServer, RedisSpace, SeedSpec, Server, build, build_redis, find, needs_redis, redact_url,
};
use futures_util::StreamExt as _;

use crate::clock;
use counterlab_plan::{Arrival, Backend, RunPlan, SkewKind, StageEnd, StageLoad};

/// Where the backends are and how the run treats its namespaces.
#[derive(Clone)]
pub struct RunOptions {
    /// A configured PostgreSQL URL (flag or environment); None means `postgres_default`,
    /// which `auto` replaces with SQLite when it does not answer.
    pub postgres_url: Option<String>,
    /// Where a local PostgreSQL is looked for when none is configured.
    pub postgres_default: String,
    pub mysql_url: Option<String>,
    /// A configured Redis URL; None: the local default, and Redis strategies are skipped
    /// (with the reason) when it does not answer.
    pub redis_url: Option<String>,
    /// Directory for SQLite namespace files; None: a fresh temporary directory, removed
    /// after the run unless `keep`.
    pub sqlite_dir: Option<PathBuf>,
    /// Leave each namespace in place after the run.
    pub keep: bool,
    /// Write each strategy run's history (JSON Lines) into this directory as soon as the
    /// run is checked (`history/` beside the report).
    pub history_dir: Option<PathBuf>,
    pub connect_timeout: Duration,
    /// Set by Ctrl-C: the load stops, the run in flight is still checked and torn down,
    /// later runs do not start, and the report says `interrupted`.
    pub cancel: Arc<AtomicBool>,
    /// Receives a live status line about once a second while a strategy runs.
    pub progress: Option<Progress>,
    /// `--trust-strategy-files`: run file-defined strategies as the configured account
    /// where a server cannot give their namespace an identity of its own.
    pub trust_strategy_files: bool,
}

/// A sink for the live status line.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

/// Calls recorded per strategy run (about 64 bytes each); beyond it the read check is
/// skipped and the report says how many calls were left out.
pub const HISTORY_LIMIT: u64 = 4_000_000;

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
    fit_name(format!("cl_{run_id}_{}", strategy.replace('-', "_")))
}

/// Names must stay within 64 once every `_` is escaped (MariaDB's limit on the database
/// name of a GRANT, where `_` is written `\_`); a longer one keeps its start and gets
/// a hash of the whole name, so names stay unique.
fn fit_name(name: String) -> String {
    let cost = |s: &str| s.len() + s.matches('_').count();
    if cost(&name) <= 64 {
        return name;
    }
    let h = counterlab_strategies::stable_hash(&name);
    let mut head = name;
    while cost(&head) + 10 > 64 {
        head.pop();
    }
    format!("{}_{h:08x}", head.trim_end_matches('_'))
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
    let stages = w
        .stages
        .iter()
        .map(|st| Stage {
            name: st.name.clone(),
            measured: st.measured,
            stop: match st.end {
                StageEnd::Duration(d) => Stop::Duration(Duration::from_secs_f64(d)),
                StageEnd::Ops(n) => Stop::Ops(n),
            },
            model: match st.load {
                StageLoad::Open { rate, target } => LoadModel::Open {
                    rate_from: rate,
                    rate_to: target,
                    poisson: w.arrival == Arrival::Poisson,
                    max_in_flight: w.n_workers,
                },
                StageLoad::Closed { workers } => LoadModel::Closed { workers },
            },
        })
        .collect();
    DriverConfig {
        seed: plan.seed,
        stages,
        mix: Mix { weights: w.mix_weights() },
        skew: match (w.skew, w.zipf_exponent) {
            (SkewKind::Zipf, Some(exponent)) => Skew::Zipf { exponent },
            _ => Skew::Uniform,
        },
        dup_k: w.dup_k,
        op_timeout: Duration::from_millis(w.op_timeout_ms),
        cancel,
        retry: RetryPolicy {
            max_attempts: plan.retry.max_attempts,
            backoff_base: Duration::from_millis(plan.retry.backoff_base_ms),
            backoff_max: Duration::from_millis(plan.retry.backoff_max_ms),
            on_unknown: plan.retry.on_unknown,
        },
        max_wait: Duration::from_millis(w.max_wait_ms),
        history_limit: HISTORY_LIMIT,
    }
}

/// The command that replays this plan with the same seed and sizes.
/// The server options of a run that differ from the defaults, for the replay command:
/// URLs with passwords redacted (and a note to supply them), the SQLite folder, trust.
pub fn server_flags(opts: &RunOptions) -> String {
    let mut out = String::new();
    let urls = [
        ("--postgres", opts.postgres_url.as_deref(), opts.postgres_default.as_str()),
        ("--mysql", opts.mysql_url.as_deref(), DEFAULT_MYSQL_URL),
        ("--redis", opts.redis_url.as_deref(), DEFAULT_REDIS_URL),
    ];
    for (flag, url, default) in urls {
        if let Some(u) = url.filter(|u| *u != default) {
            out += &format!(" {flag} '{}'", redact_url(u).replace('\'', "%27"));
        }
    }
    if let Some(d) = &opts.sqlite_dir {
        out += &format!(" --sqlite '{}'", d.display());
    }
    if opts.trust_strategy_files {
        out += " --trust-strategy-files";
    }
    if out.contains("***") {
        out += "  # passwords are redacted: put yours in place of ***";
    }
    out
}

pub fn replay_command(plan: &RunPlan) -> String {
    let mut cmd = format!("counterlab run {} --seed {}", plan.scenario_path, plan.seed);
    // `--workers` also replaces every closed stage's own count: leave it out when the
    // file's stages carry their own.
    let w = &plan.workload;
    if w.stages.iter().all(|s| s.workers().is_none_or(|n| n == w.n_workers)) {
        cmd += &format!(" --workers {}", w.n_workers);
    }
    if let Some(r) = plan.workload.rate {
        cmd += &format!(" --rate {r}");
    }
    match (plan.workload.duration_s, plan.workload.ops) {
        (Some(d), _) => cmd += &format!(" --duration-s {d}"),
        (None, Some(n)) => cmd += &format!(" --ops {n}"),
        // Stages from the file, possibly stretched by --duration-s: say the total.
        (None, None) => {
            let total: f64 = plan.workload.stages.iter().filter(|s| s.measured).filter_map(|s| s.duration_s()).sum();
            cmd += &format!(" --duration-s {total}");
        }
    }
    for s in &plan.strategies {
        cmd += &format!(" --strategy {s}");
    }
    for b in &plan.backends {
        cmd += &format!(" --backend {}", b.name());
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
    let resolved = async {
        for name in &plan.backends {
            let server = match name {
                Backend::Postgres => {
                    Server::connect_postgres(
                        opts.postgres_url.as_deref().unwrap_or(&opts.postgres_default),
                        opts.connect_timeout,
                    )
                    .await?
                }
                Backend::Mysql => {
                    Server::connect_mysql(opts.mysql_url.as_deref().unwrap_or(DEFAULT_MYSQL_URL), opts.connect_timeout)
                        .await?
                }
                Backend::Sqlite => Server::open_sqlite(&sqlite_dir(&mut temp_dir)).await?,
                Backend::Auto => match &opts.postgres_url {
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
            };
            if !servers.iter().any(|s| s.dialect() == server.dialect()) {
                log(&format!("backend {}: {} at {}", server.dialect().name(), server.version(), server.location()));
                servers.push(server);
            }
        }
        Ok::<_, BackendError>(())
    }
    .await;
    if let Err(e) = resolved {
        // A temporary SQLite directory made before the failure is removed with it.
        if let Some(dir) = &temp_dir {
            std::fs::remove_dir_all(dir).ok();
        }
        return Err(e);
    }
    Ok((servers, temp_dir))
}

/// Whether the plan's strategy `name` (built-in or file-defined) needs Redis.
fn uses_redis(plan: &RunPlan, name: &str) -> bool {
    plan.custom.get(name).map_or_else(|| needs_redis(name), |spec| spec.needs_redis())
}

/// Connects Redis when a strategy of the plan needs it. A configured URL must answer;
/// the default may be absent, and then Redis strategies are skipped with the reason.
async fn resolve_redis(
    plan: &RunPlan,
    opts: &RunOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Result<RedisServer, String>, BackendError> {
    if !plan.strategies.iter().any(|s| uses_redis(plan, s)) {
        return Ok(Err("not needed".into()));
    }
    match &opts.redis_url {
        Some(url) => Ok(Ok(RedisServer::connect(url, opts.connect_timeout).await?)),
        None => match RedisServer::connect(DEFAULT_REDIS_URL, opts.connect_timeout).await {
            Ok(r) => {
                log(&format!("redis {} at {}", r.version(), r.location()));
                Ok(Ok(r))
            }
            Err(e) => {
                let why =
                    format!("no Redis configured and none answering ({e}); use --redis URL or COUNTERLAB_REDIS_URL");
                log(&why);
                Ok(Err(why))
            }
        },
    }
}

/// File-defined strategies run only where the server gives their namespace its own
/// least-privilege identity, unless the user trusts them explicitly: checked before any
/// load starts, so a refused run leaves nothing half done.
fn sandbox_preflight(
    plan: &RunPlan,
    opts: &RunOptions,
    servers: &[Server],
    redis: &Result<RedisServer, String>,
) -> Result<(), BackendError> {
    let Some(file) = plan.strategies.iter().find(|s| plan.custom.contains_key(*s)) else { return Ok(()) };
    if opts.trust_strategy_files {
        return Ok(());
    }
    let refuse = |backend: &str, why: &str| {
        Err(BackendError::Refused(format!(
            "file-defined strategy {file} refused on {backend}: {why}; grant that right, or pass \
             --trust-strategy-files to run it with the configured account's rights"
        )))
    };
    for server in servers {
        if let Err(why) = server.sandbox() {
            return refuse(server.dialect().name(), why);
        }
    }
    let file_uses_redis = plan.strategies.iter().any(|s| plan.custom.get(s).is_some_and(|c| c.needs_redis()));
    if let (true, Ok(r)) = (file_uses_redis, redis)
        && let Err(why) = r.sandbox()
    {
        return refuse("redis", why);
    }
    Ok(())
}

/// Runs every backend x strategy x isolation level of the plan. Progress goes to `log`.
pub async fn run_plan(plan: &RunPlan, opts: &RunOptions, log: &mut dyn FnMut(&str)) -> Result<Report, BackendError> {
    let run_id = new_run_id();
    let started = clock::iso8601(clock::now_unix().0);
    let (servers, temp_dir) = resolve_backends(plan, opts, &run_id, log).await?;
    let redis = match resolve_redis(plan, opts, log).await {
        Ok(r) => r,
        Err(e) => {
            if let Some(dir) = &temp_dir {
                std::fs::remove_dir_all(dir).ok();
            }
            return Err(e);
        }
    };
    if let Err(e) = sandbox_preflight(plan, opts, &servers, &redis) {
        if let Some(dir) = &temp_dir {
            std::fs::remove_dir_all(dir).ok();
        }
        return Err(e);
    }
    log(&format!("run {run_id}"));
    let cfg = driver_config(plan, opts.cancel.clone());
    let seed_spec = SeedSpec {
        n_users: plan.data.n_users,
        notifications_per_user: plan.data.notifications_per_user,
        initial_read_per_user: plan.data.initial_read_per_user,
    };
    let mut reports = Vec::new();
    let mut skipped = Vec::new();
    let mut side_files = Vec::new();
    let result = async {
        for server in &servers {
            for name in &plan.strategies {
                let custom = plan.custom.get(name);
                let info = match custom {
                    Some(spec) => spec.info(),
                    None => *find(name).expect("plan strategies were validated"),
                };
                let mut levels: Vec<Isolation> = plan.isolation_for(name).to_vec();
                let redis = if uses_redis(plan, name) {
                    match &redis {
                        Ok(r) => Some(r),
                        Err(why) => {
                            for l in &levels {
                                skipped.push(Skipped {
                                    strategy: name.clone(),
                                    backend: format!("{}+redis", server.dialect().name()),
                                    isolation: l.name().into(),
                                    reason: why.clone(),
                                });
                            }
                            continue;
                        }
                    }
                } else {
                    None
                };
                if let Some(spec) = custom.filter(|c| !c.dialects().contains(&server.dialect())) {
                    for l in &levels {
                        skipped.push(Skipped {
                            strategy: name.clone(),
                            backend: server.dialect().name().into(),
                            isolation: l.name().into(),
                            reason: format!("{} has no {} statements", spec.name, server.dialect().name()),
                        });
                    }
                    continue;
                }
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
                    let target = Target { server, redis, run_id: &run_id, name, info, isolation, seed: seed_spec };
                    let (report, files) = run_one(plan, opts, &cfg, target, log).await?;
                    reports.push(report);
                    side_files.extend(files);
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
    let breached = reports.iter().flat_map(|r| &r.thresholds).filter(|t| !t.passed).count() as u64;
    let mut server_infos: Vec<ServerInfo> = servers
        .iter()
        .map(|s| ServerInfo {
            backend: s.dialect().name().into(),
            url: s.location().into(),
            version: s.version().into(),
        })
        .collect();
    if let Ok(r) = &redis {
        server_infos.push(ServerInfo {
            backend: "redis".into(),
            url: r.location().into(),
            version: r.version().into(),
        });
    }
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
        servers: server_infos,
        strategies: reports,
        skipped,
        all_guarantees_held: all_held,
        thresholds_breached: breached,
        interrupted: opts.cancel.load(Ordering::Relaxed),
        replay_command: replay_command(plan) + &server_flags(opts),
        trusted_strategy_files: opts.trust_strategy_files,
        side_files,
    })
}

/// One cell of the run: a strategy on a backend (and Redis) at an isolation level.
struct Target<'a> {
    server: &'a Server,
    redis: Option<&'a RedisServer>,
    run_id: &'a str,
    name: &'a str,
    info: counterlab_core::StrategyInfo,
    isolation: Isolation,
    seed: SeedSpec,
}

/// A scheduled fault: its report entry and the task that fires it (when, what it did).
type ScheduledFault = (FaultEvent, tokio::task::JoinHandle<(Option<u64>, String)>);

/// Fires the plan's faults at their offsets from `start`, in the background.
fn schedule_faults(plan: &RunPlan, strategy: &Arc<dyn Strategy>, start: Instant) -> Vec<ScheduledFault> {
    plan.faults_for(strategy.info().name)
        .map(|f| {
            let s = strategy.clone();
            let (fault, at_ms, times) = (f.fault, f.at_ms, f.times);
            let h = tokio::spawn(async move {
                tokio::time::sleep_until((start + Duration::from_millis(at_ms)).into()).await;
                let fired = start.elapsed().as_millis() as u64;
                let mut outcomes = Vec::new();
                for _ in 0..times {
                    outcomes.push(match s.inject(fault).await {
                        Ok(what) => what,
                        Err(e) => format!("failed: {e}"),
                    });
                }
                outcomes.dedup();
                let outcome =
                    if times > 1 { format!("{times} x {}", outcomes.join("; ")) } else { outcomes.join("; ") };
                (Some(fired), outcome)
            });
            let ev = FaultEvent {
                kind: fault.name().into(),
                at_ms,
                fired_at_ms: None,
                duration_ms: fault.duration_ms(),
                outcome: String::new(),
            };
            (ev, h)
        })
        .collect()
}

async fn run_one(
    plan: &RunPlan,
    opts: &RunOptions,
    cfg: &DriverConfig,
    t: Target<'_>,
    log: &mut dyn FnMut(&str),
) -> Result<(StrategyReport, Vec<(String, String)>), BackendError> {
    let (name, isolation, seed_spec) = (t.name, t.isolation, t.seed);
    let sql_backend = t.server.dialect().name();
    let backend = if t.redis.is_some() { format!("{sql_backend}+redis") } else { sql_backend.to_string() };
    let ns_name = scoped_namespace(t.run_id, t.server.dialect(), isolation, name);
    let op_timeout = Duration::from_millis(plan.workload.op_timeout_ms);
    let spec = PoolSpec {
        max_connections: plan.workload.connections,
        // Bounds the wait for a pooled connection (and SQLite's write lock).
        acquire_timeout: op_timeout,
        isolation,
    };
    let ns = t.server.create_namespace(&ns_name, spec).await?;
    // The audit of the new role may find rights it has through PUBLIC grants: a file
    // strategy then does not run unless trusted (built-ins run, and the report says so).
    if plan.custom.contains_key(name) && !ns.identity().isolated() && !opts.trust_strategy_files {
        let why = ns.identity().describe();
        ns.drop_namespace().await.ok();
        return Err(BackendError::Refused(format!(
            "file-defined strategy {name} refused on {sql_backend}: it would run as {why}; pass \
             --trust-strategy-files to run it anyway"
        )));
    }
    let mut strategy_for_teardown: Option<Arc<dyn Strategy>> = None;
    let mut space_to_release: Option<RedisSpace> = None;
    let result = async {
        let in_effect = ns.isolation_in_effect().await?;
        let started = Instant::now();
        ns.seed(seed_spec).await?;
        let redis_seed_failed = |e: OpError| BackendError::Step {
            backend: "redis",
            step: "seed",
            namespace: ns_name.clone(),
            detail: e.to_string(),
        };
        let strategy: Arc<dyn Strategy> = match (plan.custom.get(name), t.redis) {
            (Some(spec), redis) => {
                let space = match redis {
                    Some(r) => Some(r.space(&ns_name, op_timeout, plan.workload.n_workers).await?),
                    None => None,
                };
                space_to_release = space.clone();
                let s = Arc::new(CustomStrategy::build(spec, ns.db().clone(), space).await.map_err(|e| {
                    BackendError::Step {
                        backend: t.server.dialect().name(),
                        step: "set up a file-defined strategy",
                        namespace: ns_name.clone(),
                        detail: e.to_string(),
                    }
                })?);
                if redis.is_some() {
                    strategy_for_teardown = Some(s.clone());
                    s.seed_redis(seed_spec.n_users, seed_spec.notifications_per_user, seed_spec.initial_read_per_user)
                        .await
                        .map_err(redis_seed_failed)?;
                }
                s
            }
            (None, None) => build(name, ns.db().clone()).expect("catalog strategies build"),
            (None, Some(r)) => {
                let space = r.space(&ns_name, op_timeout, plan.workload.n_workers).await?;
                space_to_release = Some(space.clone());
                let rcfg = RedisConfig {
                    n_users: seed_spec.n_users,
                    flush_interval: Duration::from_millis(plan.redis.flush_interval_ms),
                    flush_batch: plan.redis.flush_batch,
                    reconcile_interval: plan.redis.reconcile_interval_ms.map(Duration::from_millis),
                };
                let s = build_redis(name, ns.db().clone(), space, rcfg).expect("catalog strategies build");
                let seeded =
                    s.seed(seed_spec.n_users, seed_spec.notifications_per_user, seed_spec.initial_read_per_user).await;
                strategy_for_teardown = Some(s.clone());
                seeded.map_err(redis_seed_failed)?;
                s
            }
        };
        let seed_s = started.elapsed().as_secs_f64();
        let identity = match &space_to_release {
            Some(space) => format!("{}; Redis: {}", ns.identity().describe(), space.identity().describe()),
            None => ns.identity().describe(),
        };
        log(&format!("{name} on {backend} at {} runs as {identity}", isolation.name()));
        log(&format!(
            "{name} on {backend} at {} (server says {in_effect}): seeded {} notifications in {seed_s:.2}s into {ns_name}",
            isolation.name(),
            seed_spec.n_users * seed_spec.notifications_per_user
        ));
        let pool = Arc::new(IdPool::seeded(
            seed_spec.n_users,
            seed_spec.notifications_per_user,
            seed_spec.initial_read_per_user,
        ));
        // A scheduled pause needs the wrapper that stalls every op.
        let strategy: Arc<dyn Strategy> = match plan.faults_for(name).any(|f| f.fault.takes_duration()) {
            true => Arc::new(Pausable::new(strategy)),
            false => strategy,
        };
        strategy.start().await;
        let monitor = Monitor::new();
        let label = format!("{name} on {backend} at {}", isolation.name());
        let on_sample: Box<dyn FnMut(&Sample) + Send> = match opts.progress.clone() {
            Some(progress) => {
                let label = label.clone();
                Box::new(move |s: &Sample| {
                    progress(&format!(
                        "{label} | {} | {:.0} s | {:.0} ops/s | {} errors | {} dropped | p99 {} us",
                        s.phase,
                        s.t_s,
                        s.ops_per_s(),
                        s.errors,
                        s.dropped,
                        s.p99_us
                    ))
                })
            }
            None => Box::new(|_: &Sample| {}),
        };
        let sampler = Sampler::start(
            monitor.clone(),
            strategy.clone(),
            SamplerConfig {
                interval: Duration::from_millis(plan.workload.sample_interval_ms),
                sample_drift: plan.workload.sample_drift,
                label: format!("{label}, seed {}, namespace {ns_name}", plan.seed),
            },
            on_sample,
        );
        let load_start = Instant::now();
        let scheduled = schedule_faults(plan, &strategy, load_start);
        let load = run_load(strategy.clone(), pool, cfg, monitor.clone()).await;
        let mut faults = Vec::new();
        for (mut ev, h) in scheduled {
            if h.is_finished() {
                if let Ok((fired, outcome)) = h.await {
                    ev.fired_at_ms = fired;
                    ev.outcome = outcome;
                }
            } else {
                h.abort();
                ev.outcome = "the load ended first".into();
            }
            faults.push(ev);
        }
        let settle_start = Instant::now();
        monitor.set_phase(counterlab_sim::SETTLE);
        let settle_error =
            strategy.settle(Duration::from_millis(plan.redis.settle_timeout_ms)).await.err().map(|e| e.to_string());
        let settle_s = settle_start.elapsed().as_secs_f64();
        let series = sampler.finish().await;
        let hdr_name = format!("hdr/{}.hlog", ns_name.strip_prefix(&format!("cl_{}_", t.run_id)).unwrap_or(&ns_name));
        // The truth and the counters, each retried while the connection is what failed;
        // a check that still cannot complete makes this row INCOMPLETE, not the run.
        let n_users = seed_spec.n_users;
        let checked = match retry_lost("read the truth", log, || ns.check_rows(n_users)).await {
            Ok(rows) => retry_lost("read the counters", log, || strategy.counters(n_users)).await.map(|c| (rows, c)),
            Err(e) => Err(e),
        };
        let (mut rows, counters) = match checked {
            Ok(found) => found,
            Err(why) => {
                log(&format!("{name} on {backend} at {}: INCOMPLETE: {why}", isolation.name()));
                let run = Incomplete { info: t.info, backend: &backend, isolation, ns: &ns_name, load: &load };
                return Ok((incomplete_report(run, opts, &why, seed_s, faults), Vec::new()));
            }
        };
        if let Some(counters) = counters {
            rows = rows.iter().zip(counters).map(|(r, c)| CheckInput { counter: c, ..*r }).collect();
        }
        let guarantee = if plan.expect_drift.iter().any(|s| s == name) { Guarantee::None } else { t.info.guarantee };
        let check = check_counters(&rows, guarantee);
        // The history's verdicts: reads against their bounds, what read_count shows once
        // settled, and the named anomalies that explain any mismatch.
        let settled = settled_reads(strategy.as_ref(), &rows).await;
        let unread_at_start = (seed_spec.notifications_per_user - seed_spec.initial_read_per_user) as i64;
        let reads = (load.history_dropped == 0).then(|| check_reads(&load.history, &|_| unread_at_start));
        let figures = strategy.figures();
        let figure = |k: &str| figures.iter().find(|(n, _)| *n == k).map(|(_, v)| *v as u64);
        // Reads are judged unless the strategy is eventual as declared (stale reads are
        // its design) or a scheduled data loss wiped what it reads from (it heals later;
        // the final check and settled reads judge that).
        let data_loss = plan.faults_for(name).any(|f| f.fault == Fault::RedisDataLoss);
        let judge_reads = t.info.guarantee != Guarantee::Eventual && !data_loss;
        let cx = Context {
            guarantee,
            lost_flushes: figure("lost_flush_claims").unwrap_or(0),
            double_flushes: figure("double_flush_claims").unwrap_or(0),
            reconciler: figure("reconcile_passes").is_some(),
            seed: seed_spec,
        };
        let anomalies = classify(&load.history, &rows, reads.as_ref().filter(|_| judge_reads), &settled, cx);
        for a in &anomalies {
            log(&format!("{name} on {backend} at {}: anomaly {} x{}", isolation.name(), a.name, a.count));
        }
        let permission_denied = load.ops.iter().map(|o| o.errors_by_class[ErrorClass::Permission.index()]).sum();
        let lone_writer = (t.server.dialect() == Dialect::Sqlite && t.redis.is_none())
            .then_some("SQLite runs one writer at a time (every transaction is serializable), so its race cannot happen");
        let judgement = judge(
            &Findings {
                strategy: name,
                guarantee,
                check: &check,
                anomalies: &anomalies,
                permission_denied,
                errors: judged_errors(plan, name, &load),
                executed: executed(plan, &load),
                serialises_writers: lone_writer,
            },
            plan.verdict.rules(),
        );
        let short = ns_name.strip_prefix(&format!("cl_{}_", t.run_id)).unwrap_or(&ns_name).to_string();
        let history_file = match &opts.history_dir {
            None => None,
            Some(dir) => {
                let path = dir.join(format!("{short}.jsonl"));
                let written = std::fs::File::create(&path).and_then(|f| {
                    let mut w = std::io::BufWriter::new(f);
                    counterlab_report::write_history_to(&load.history, &mut w)?;
                    std::io::Write::flush(&mut w)
                });
                written.map_err(|e| BackendError::Step {
                    backend: "report",
                    step: "write the history",
                    namespace: ns_name.clone(),
                    detail: format!("{}: {e}", path.display()),
                })?;
                Some(format!("history/{short}.jsonl"))
            }
        };
        let history = HistoryReport {
            events: load.history.len() as u64,
            dropped: load.history_dropped,
            reads_checked: reads.as_ref().map_or(0, |r| r.reads_checked),
            read_violations: reads.as_ref().map_or(0, |r| r.violations_total),
            reads_judged: judge_reads,
            settled_reads: settled.len() as u64,
            file: history_file.clone(),
        };
        log(&format!(
            "{name} on {backend} at {}: {} ops at {:.0} ops/s, {} of {} users mismatched: {}",
            isolation.name(),
            load.total_ops(),
            load.throughput_ops_per_s(),
            check.users_mismatched,
            check.users_checked,
            judgement.label
        ));
        let mut report = StrategyReport::new(StrategyRun {
            info: t.info,
            backend: &backend,
            isolation: isolation.name(),
            isolation_in_effect: &in_effect,
            namespace: &ns_name,
            namespace_kept: opts.keep,
            identity,
            judgement,
            seed_s,
            load: &load,
            settle_s,
            settle_error,
            faults,
            figures,
            check: &check,
            series: &series.samples,
            hdr_log: Some(hdr_name.clone()),
            anomalies: &anomalies,
            history,
        });
        report.thresholds = plan.thresholds.iter().filter_map(|t| evaluate(t, &report)).collect();
        for b in report.thresholds.iter().filter(|t| !t.passed) {
            log(&format!("{name} on {backend} at {}: threshold breached: {}", isolation.name(), b.detail));
        }
        Ok::<_, BackendError>((report, vec![(hdr_name, series.hdr_log)]))
    }
    .await;
    let mut failed = Vec::new();
    if let Some(space) = &space_to_release
        && let Err(e) = retry_lost("drop the ACL user", log, || space.release()).await
    {
        failed.push(e);
    }
    if opts.keep {
        failed.extend(ns.keep().await.err().map(|e| e.to_string()));
        if let Some(space) = &space_to_release {
            failed.extend(space.mark_kept().await.err().map(|e| e.to_string()));
        }
    } else {
        if let Some(s) = &strategy_for_teardown
            && let Err(e) = retry_lost("delete the run's Redis keys", log, || s.teardown()).await
        {
            failed.push(e);
        }
        // A strategy that never got built still had its space (the marker key at least).
        if strategy_for_teardown.is_none()
            && let Some(space) = &space_to_release
            && let Err(e) = retry_lost("delete the run's Redis keys", log, || space.delete_all()).await
        {
            failed.push(e);
        }
        failed.extend(ns.drop_namespace().await.err().map(|e| e.to_string()));
    }
    // A cleanup that failed is said, in the log and on the row; the results stand, and
    // the namespace's marker lets `counterlab clean` remove what is left.
    if !failed.is_empty() {
        let e = format!("{} (`counterlab clean --yes` removes what is left)", failed.join("; "));
        log(&format!("{name}: cleanup failed: {e}"));
        let mut result = result;
        if let Ok((report, _)) = &mut result {
            report.cleanup_error = Some(e);
        }
        return result;
    }
    result
}

/// Non-conflict, non-permission errors of a run (permission errors are judged on their
/// own), or None while the scenario schedules faults for the strategy: then errors are
/// what the faults cause, and the checks judge their effect.
fn judged_errors(plan: &RunPlan, name: &str, load: &counterlab_sim::LoadResult) -> Option<ErrorFigures> {
    if plan.faults.iter().any(|f| f.applies_to(name)) {
        return None;
    }
    let judged = ErrorClass::ALL.into_iter().filter(|c| !c.is_conflict() && *c != ErrorClass::Permission);
    let by_class: Vec<(ErrorClass, u64)> =
        judged.map(|c| (c, load.ops.iter().map(|o| o.errors_by_class[c.index()]).sum())).collect();
    let failed = by_class.iter().map(|(_, n)| n).sum();
    let top = by_class.iter().filter(|(_, n)| *n > 0).max_by_key(|(_, n)| *n).map(|(c, n)| {
        let sample = load.error_samples.iter().find(|m| m.starts_with(c.name()));
        format!("{} x{n}{}", c.name(), sample.map(|m| format!(" ({m})")).unwrap_or_default())
    });
    Some(ErrorFigures { failed, ops: load.total_ops(), top })
}

/// The op kinds the mix gives weight, with how many of each ran.
fn executed(plan: &RunPlan, load: &counterlab_sim::LoadResult) -> Vec<(OpKind, u64)> {
    OpKind::ALL
        .into_iter()
        .zip(plan.workload.mix_weights())
        .filter(|(_, w)| *w > 0)
        .map(|(k, _)| (k, load.op(k).count))
        .collect()
}

/// Attempts of a post-load read (the truth, the counters) when the connection is lost,
/// and the first backoff, doubled each time: 6 attempts over about 8 s, long enough for a
/// restarted server or a failover, short enough that a dead one ends the row.
pub const POST_LOAD_ATTEMPTS: u32 = 6;
pub const POST_LOAD_BACKOFF: Duration = Duration::from_millis(250);

/// Runs `f` until it succeeds, fails for another reason than a lost connection or a
/// timeout, or `POST_LOAD_ATTEMPTS` are spent; the error says what and how often.
async fn retry_lost<T, F, Fut>(what: &str, log: &mut dyn FnMut(&str), mut f: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, OpError>>,
{
    let mut wait = POST_LOAD_BACKOFF;
    for attempt in 1..=POST_LOAD_ATTEMPTS {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e)
                if matches!(e.class, ErrorClass::Connection | ErrorClass::Timeout) && attempt < POST_LOAD_ATTEMPTS =>
            {
                log(&format!("{what}: {e}; retrying in {} ms ({attempt}/{POST_LOAD_ATTEMPTS})", wait.as_millis()));
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            Err(e) => return Err(format!("{what} failed after {attempt} attempt(s): {e}")),
        }
    }
    unreachable!("the last attempt returns")
}

/// What an incomplete row reports: the load ran, its check did not complete.
struct Incomplete<'a> {
    info: StrategyInfo,
    backend: &'a str,
    isolation: Isolation,
    ns: &'a str,
    load: &'a counterlab_sim::LoadResult,
}

fn incomplete_report(
    r: Incomplete<'_>,
    opts: &RunOptions,
    why: &str,
    seed_s: f64,
    faults: Vec<FaultEvent>,
) -> StrategyReport {
    let check = check_counters(&[], r.info.guarantee);
    let judgement = Judgement {
        label: format!("INCOMPLETE: {}", why.split(':').next().unwrap_or(why)),
        held: false,
        evidence: false,
        sentence: format!("{}: the check could not complete: {why}", r.info.name),
    };
    StrategyReport::new(StrategyRun {
        info: r.info,
        backend: r.backend,
        isolation: r.isolation.name(),
        isolation_in_effect: "",
        namespace: r.ns,
        namespace_kept: opts.keep,
        identity: String::new(),
        judgement,
        seed_s,
        load: r.load,
        settle_s: 0.0,
        settle_error: None,
        faults,
        figures: Vec::new(),
        check: &check,
        series: &[],
        hdr_log: None,
        anomalies: &[],
        history: HistoryReport::default(),
    })
}

/// Users whose `read_count` is compared with the truth after settle (evenly spread).
pub const SETTLED_READS: usize = 2000;

/// After settle, what `read_count` shows for up to `SETTLED_READS` users beside their
/// truth, 8 reads at a time. A read that errors is left out.
async fn settled_reads(strategy: &dyn Strategy, rows: &[CheckInput]) -> Vec<SettledRead> {
    let step = rows.len().div_ceil(SETTLED_READS).max(1);
    futures_util::stream::iter(rows.iter().step_by(step))
        .map(|r| async move {
            strategy.read_count(r.user).await.ok().map(|shown| SettledRead { user: r.user, shown, truth: r.truth })
        })
        .buffer_unordered(8)
        .filter_map(|x| async move { x })
        .collect()
        .await
}

#[cfg(test)]
mod tests {
    #[test]
    fn namespace_names_fit_an_escaped_grant_and_stay_unique() {
        let run = "20261201t132049_0c24";
        let a = super::scoped_namespace(
            run,
            super::Dialect::Mysql,
            super::Isolation::ReadCommitted,
            "conditional-update-unguarded",
        );
        let b = super::scoped_namespace(
            run,
            super::Dialect::Mysql,
            super::Isolation::ReadCommitted,
            "conditional-update-unguardee",
        );
        for n in [&a, &b] {
            assert!(n.len() + n.matches('_').count() <= 64 && n.len() <= 63, "{n}");
        }
        assert_ne!(a, b);
        assert_eq!(super::namespace_name(run, "x"), "cl_20261201t132049_0c24_x");
    }
}
