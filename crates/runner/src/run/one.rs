//! One cell of a run: a fresh namespace, the strategy built (from the registry or a
//! strategy file) and seeded, the load with its faults, the checks and the verdict, then
//! teardown whatever happened.

use counterlab_core::Figure;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use counterlab_core::{
    Backend, CheckFold, CheckResult, Checked, Companion, Context, ErrorClass, Fault, Findings, Guarantee, Limit,
    OpKind, Outcome, ReadFrom, ReadSource, Strategy, check_reads_parts_seeded, classify_parts, judge,
};
use counterlab_plan::{Expected, RunPlan};
use counterlab_report::{ExpectationResult, FaultEvent, HistoryReport, StrategyReport, StrategyRun, evaluate};
use counterlab_sim::{DriverConfig, IdPool, LoadResult, Monitor, Sample, Sampler, SamplerConfig, Series, run_load};
use counterlab_strategies::{
    BackendError, BuildError, CATCH_UP_BOUND, CatchUp, Db, Dialect, Ingredients, MqConfig, MqSpace, Namespace,
    Pausable, PoolSpec, Recipe, RedisConfig, RedisSpace, ReplicaRead, ReplicaReader, ReplicaReads, Server, SpaceLogin,
    namespace_cap, sql_replica_supported,
};

use super::deadline::{self, PhaseBounds, op_bounded, within};
use super::names::scoped_namespace;
use super::post::{
    Incomplete, SETTLED_READS, executed, incomplete_report, judged_errors, permission_denied, retry_lost,
    schedule_faults, settled_reads, shown_counts,
};
use super::status::{self, Progress, Status};
use super::{Phase, RunOptions, Target};
use crate::spill::{History, HistoryStore, SPILL_AFTER};

/// A cell's row and the files beside the report (its HDR interval log).
pub(super) type Row = (StrategyReport, Vec<(String, String)>);

/// Names and labels of one cell.
pub(super) struct Cell<'a> {
    pub(super) plan: &'a RunPlan,
    pub(super) opts: &'a RunOptions,
    pub(super) t: Target<'a>,
    /// `postgres`, or `postgres+redis` / `postgres+rabbitmq` when the strategy also uses
    /// Redis or the broker.
    pub(super) backend: Backend,
    pub(super) ns_name: String,
    /// The namespace without the run's prefix: the HDR log's and history's file name.
    pub(super) short: String,
    /// The live status, when the caller wants it.
    live: Option<(Progress, Arc<Mutex<Status>>)>,
    /// The distributed phases: the Redis ACL user's password, and whether it exists
    /// already (None: one process, a random password).
    pub(super) redis_login: Option<(String, bool)>,
}

impl Cell<'_> {
    /// The run (its namespace prefix) and the backend: the cells that share an idle reading.
    fn idle_key(&self) -> String {
        let run = self.ns_name.strip_suffix(self.short.as_str()).unwrap_or(&self.ns_name);
        format!("{run}|{}", self.backend.name())
    }

    fn enter(&self, phase: Phase) {
        if let Some(hook) = &self.opts.on_phase {
            hook(phase, &self.ns_name);
        }
        self.report(phase.name());
    }

    /// Sends the live status with the cell in `phase`.
    fn report(&self, phase: &str) {
        if let Some((progress, status)) = &self.live {
            let mut s = status.lock().expect("status lock");
            s.phase = phase.to_string();
            progress(&s);
        }
    }

    pub(super) fn label(&self) -> String {
        let reads = match self.t.read_from {
            ReadFrom::Primary => String::new(),
            r => format!(", reads from {}", r.name()),
        };
        format!("{} on {} at {}{reads}", self.t.name, self.backend, self.t.isolation.name())
    }

    pub(super) fn op_timeout(&self) -> Duration {
        Duration::from_millis(self.plan.workload.op_timeout_ms)
    }

    /// The bounds of the phases around the load, from the scenario.
    pub(super) fn bounds(&self) -> PhaseBounds {
        let seed = self.t.seed;
        let rows = seed.n_users.saturating_mul(seed.notifications_per_user);
        PhaseBounds::of(self.op_timeout(), seed.n_users, rows, Duration::from_millis(self.plan.redis.settle_timeout_ms))
    }
}

/// What has to be undone after the cell, whatever happened.
#[derive(Default)]
pub(super) struct Made {
    pub(super) strategy: Option<Arc<dyn Strategy>>,
    pub(super) space: Option<RedisSpace>,
    /// The run's broker queue and connection (deleted at teardown, even with `--keep`:
    /// settle drained it).
    mq: Option<MqSpace>,
    /// Replica reads: the standby pool or the replica's ACL user, released at teardown.
    replica: Option<Arc<ReplicaReads>>,
}

/// Why strategy `name` cannot read from `read_from` here (None: it can).
pub(super) fn no_replica(
    opts: &RunOptions,
    server: &Server,
    recipe: &dyn Recipe,
    name: &str,
    read_from: ReadFrom,
) -> Option<String> {
    if read_from == ReadFrom::Primary {
        return None;
    }
    match (recipe.replica_read(), recipe.needs_redis()) {
        (ReplicaRead::Redis(_), _) => {
            return opts
                .redis_replica_url
                .is_none()
                .then(|| "no Redis replica configured (--redis-replica, COUNTERLAB_REDIS_REPLICA_URL)".into());
        }
        (ReplicaRead::No, true) => return Some(format!("{name}'s read is not one Redis key a replica can serve")),
        (ReplicaRead::No, false) => {
            return Some(format!("{name} is not a built-in SQL design (only those read from a standby)"));
        }
        (ReplicaRead::Standby, _) => {}
    }
    if !sql_replica_supported(server.dialect()) {
        return Some(format!("no standby reads on {}", server.dialect().name()));
    }
    opts.postgres_replica_url
        .is_none()
        .then(|| "no PostgreSQL standby configured (--postgres-replica, COUNTERLAB_POSTGRES_REPLICA_URL)".into())
}

/// Short tag of a read source in namespace names.
fn read_tag(r: ReadFrom) -> &'static str {
    match r {
        ReadFrom::Primary => "",
        ReadFrom::Replica => "-rep",
        ReadFrom::ReplicaFallback => "-rfb",
    }
}

/// Deliveries the broker consumer may hold unacked (basic.qos prefetch).
const MQ_PREFETCH: u16 = 32;

pub(super) async fn run_one(
    plan: &RunPlan,
    opts: &RunOptions,
    cfg: &DriverConfig,
    t: Target<'_>,
    log: &mut dyn FnMut(&str),
) -> Result<Row, BackendError> {
    let cell = Cell::new(plan, opts, t);
    cell.report("seed");
    let spec = cell.pool_spec();
    let ns = cell.t.server.create_namespace(&cell.ns_name, spec).await?;
    if let Err(e) = refuse_unconfined(&cell, &ns) {
        ns.drop_namespace().await.ok();
        return Err(e);
    }
    let mut made = Made::default();
    let result = measure(&cell, &ns, cfg, &mut made, log).await;
    teardown(&cell, ns, made, result, log).await
}

impl<'a> Cell<'a> {
    /// This cell's recipe (the cell was planned from it, so it is there).
    pub(super) fn recipe(&self) -> &'a dyn Recipe {
        super::servers::recipe(self.plan, self.opts, self.t.name).expect("a planned cell's strategy has a recipe")
    }

    /// The cell's names: its backend label and namespace (from the run id, the backend,
    /// the level, the strategy and the repeat).
    pub(super) fn new(plan: &'a RunPlan, opts: &'a RunOptions, t: Target<'a>) -> Cell<'a> {
        let companion = match (t.redis, t.amqp) {
            (Some(_), _) => Some(Companion::Redis),
            (None, Some(_)) => Some(Companion::Rabbitmq),
            (None, None) => None,
        };
        let backend = Backend::new(t.server.dialect(), companion);
        let tagged = format!("{}{}", t.name, read_tag(t.read_from));
        let ns_name = match plan.repeat_max {
            1 => scoped_namespace(t.run_id, t.server.dialect(), t.isolation, &tagged),
            _ => scoped_namespace(t.run_id, t.server.dialect(), t.isolation, &format!("{tagged}_r{}", t.repeat + 1)),
        };
        let short = ns_name.strip_prefix(&format!("cl_{}_", t.run_id)).unwrap_or(&ns_name).to_string();
        let live = opts.progress.clone().map(|p| {
            let (planned_s, planned_ops) = status::planned(plan);
            let s = Status {
                cell: t.index.0,
                cells: t.index.1,
                strategy: t.name.to_string(),
                backend: backend.name(),
                isolation: t.isolation.name().to_string(),
                phase: "seed".into(),
                elapsed_s: 0.0,
                planned_s,
                planned_ops,
                ops: 0,
                errors: 0,
                ops_by_kind: Vec::new(),
                sample: None,
            };
            (p, Arc::new(Mutex::new(s)))
        });
        Cell { plan, opts, t, backend, ns_name, short, live, redis_login: None }
    }

    /// The namespace pool's settings.
    pub(super) fn pool_spec(&self) -> PoolSpec {
        PoolSpec {
            max_connections: self.plan.workload.connections,
            // Bounds the wait for a pooled connection (and SQLite's write lock).
            acquire_timeout: self.op_timeout(),
            isolation: self.t.isolation,
        }
    }
}

/// The audit of the new role may find rights it has through PUBLIC grants: a file
/// strategy then does not run unless trusted (built-ins run, and the report says so).
pub(super) fn refuse_unconfined(cell: &Cell<'_>, ns: &Namespace) -> Result<(), BackendError> {
    let (name, opts) = (cell.t.name, cell.opts);
    if cell.recipe().trusted() || ns.identity().isolated() || opts.trust_strategy_files {
        return Ok(());
    }
    let why = ns.identity().describe();
    Err(BackendError::Refused(format!(
        "file-defined strategy {name} refused on {}: it would run as {why}; pass \
         --trust-strategy-files to run it anyway",
        cell.t.server.dialect().name()
    )))
}

/// Seeds, builds, loads and checks the cell; `made` records what teardown must undo.
async fn measure(
    cell: &Cell<'_>,
    ns: &Namespace,
    cfg: &DriverConfig,
    made: &mut Made,
    log: &mut dyn FnMut(&str),
) -> Result<Row, BackendError> {
    let in_effect = ns.isolation_in_effect().await?;
    let started = Instant::now();
    let bound = cell.bounds().setup;
    let strategy = match tokio::time::timeout(bound, set_up(cell, ns, made)).await {
        Ok(built) => built?,
        Err(_) => {
            let load = LoadResult::empty(cfg.max_latency_us());
            let seed_s = started.elapsed().as_secs_f64();
            return Ok(incomplete_row(cell, &load, Vec::new(), &deadline::over("setup", bound), seed_s, log));
        }
    };
    refuse_untaken_faults(cell, strategy.as_ref())?;
    refuse_unbatched_ops(cell, strategy.as_ref())?;
    let seed_s = started.elapsed().as_secs_f64();
    let settled = settle_after_seed(cell, ns, log).await;
    // The keys' expiry (not timed as seeding) only cleans up after a killed run: the run
    // goes on without it.
    if let Some(space) = &made.space
        && let Err(e) = space.keep_alive().await
    {
        log(&format!("{}: the run's Redis keys got no expiry yet ({e}); the refresher retries", cell.label()));
    }
    let mut identity = identity(ns, made);
    if let Some(r) = &made.replica {
        identity = format!("{identity}; replica reads as {}", r.describe());
    }
    log(&format!("{} runs as {identity}", cell.label()));
    log(&format!(
        "{} (server says {in_effect}): seeded {} notifications in {seed_s:.2}s into {}",
        cell.label(),
        cell.t.seed.n_users * cell.t.seed.notifications_per_user,
        cell.ns_name
    ));
    let watched = watch_memory(cell, made);
    let (loaded, history) = drive(cell, ns, strategy, cfg, Some(made), log).await;
    let over_cap = match &watched {
        Some((space, cap)) => space.stop_memory_watch(*cap).await,
        None => None,
    };
    cell.enter(Phase::Check);
    let checked = match history {
        Ok(mut history) => check(cell, ns, &loaded, &mut history, log).await.map(|found| (found, history)),
        Err(e) => Err(format!("the history: {e}")),
    };
    let (mut found, mut history) = match checked {
        Ok(found) => found,
        Err(why) => return Ok(incomplete_row(cell, &loaded.load, loaded.faults, &why, seed_s, log)),
    };
    if let Some(why) = over_cap {
        log(&format!("{}: {why}", cell.label()));
        found.judgement = counterlab_core::with_refusal(found.judgement, &why);
    }
    let history_file = write_history(cell, &mut history)?;
    let context = RowContext { identity, in_effect, seed_s, settled, history_file };
    Ok(row(cell, loaded, found, context, log))
}

/// Settles the server after the seed when the scenario asks (`settle_after_seed`, the
/// default): the report's `settled` line; a server that refuses is logged, and the load
/// runs unsettled.
pub(super) async fn settle_after_seed(cell: &Cell<'_>, ns: &Namespace, log: &mut dyn FnMut(&str)) -> Option<String> {
    if !cell.plan.workload.settle_after_seed {
        return None;
    }
    let said = ns.settle_after_seed(cell.bounds().setup).await.unwrap_or_else(|why| why);
    log(&format!("{}: {said}", cell.label()));
    Some(said)
}

/// The row of a cell whose setup or check could not complete (`why`), judged on what the
/// load shows (`judge_incomplete`: refusals and errors fail it, else INCOMPLETE).
pub(super) fn incomplete_row(
    cell: &Cell<'_>,
    load: &LoadResult,
    faults: Vec<FaultEvent>,
    why: &str,
    seed_s: f64,
    log: &mut dyn FnMut(&str),
) -> Row {
    let run =
        Incomplete { info: cell.t.info, backend: cell.backend, isolation: cell.t.isolation, ns: &cell.ns_name, load };
    let errors = judged_errors(cell.plan, cell.t.name, load);
    let rules = cell.plan.verdict.rules();
    let judgement =
        counterlab_core::judge_incomplete(cell.t.info.name, permission_denied(load), errors.as_ref(), rules, why);
    log(&format!("{}: {} ({why})", cell.label(), judgement.label));
    (incomplete_report(run, cell.opts, judgement, seed_s, faults), Vec::new())
}

/// A file-defined strategy's Redis keys are measured during the load against their cap
/// (`namespace_cap`): the space watched and its cap (None: a built-in, or no Redis).
fn watch_memory(cell: &Cell<'_>, made: &Made) -> Option<(RedisSpace, u64)> {
    let space = made.space.clone().filter(|_| !cell.recipe().trusted())?;
    let cap = namespace_cap(cell.t.seed);
    space.watch_memory(cap);
    Some((space, cap))
}

/// Seeds the namespace and the strategy (`seed`), wrapped for replica reads when the
/// cell reads from a replica.
async fn set_up(cell: &Cell<'_>, ns: &Namespace, made: &mut Made) -> Result<Arc<dyn Strategy>, BackendError> {
    let strategy = seed(cell, ns, made).await?;
    match cell.t.read_from {
        ReadFrom::Primary => Ok(strategy),
        mode => {
            let wrapped = replica_reads(cell, ns, made, strategy, mode).await?;
            made.strategy = Some(wrapped.clone());
            Ok(wrapped)
        }
    }
}

/// Seeds the namespace, builds the strategy over it and seeds the strategy's own state
/// (its Redis keys); `made` records what teardown must undo.
pub(super) async fn seed(cell: &Cell<'_>, ns: &Namespace, made: &mut Made) -> Result<Arc<dyn Strategy>, BackendError> {
    ns.seed(cell.t.seed).await?;
    let strategy = build(cell, ns, made).await?;
    made.strategy = Some(strategy.clone());
    strategy.seed(cell.t.seed).await.map_err(|e| BackendError::Step {
        backend: "redis",
        step: "seed",
        namespace: cell.ns_name.clone(),
        source: e.into(),
    })?;
    Ok(strategy)
}

/// A fault the scenario schedules for a strategy that cannot take it is refused before
/// the load, in one line naming what it can take (it would fail at every injection and
/// leave the run untested for it).
fn refuse_untaken_faults(cell: &Cell<'_>, strategy: &dyn Strategy) -> Result<(), BackendError> {
    // Every strategy takes a pause: `drive` wraps it in `Pausable`.
    let takes = |k: Fault| matches!(k, Fault::Pause { .. }) || strategy.takes(k);
    let Some(f) = cell.plan.faults_for(cell.t.name).find(|f| !takes(f.fault)) else { return Ok(()) };
    let takes: Vec<&str> = Fault::ALL.into_iter().filter(|&k| takes(k)).map(Fault::name).collect();
    let takes = if takes.is_empty() { "none".to_string() } else { takes.join(", ") };
    Err(BackendError::Refused(format!(
        "{}: the scenario schedules {} for {}, which cannot take it (it takes: {takes})",
        cell.label(),
        f.fault.name(),
        cell.t.name
    )))
}

/// `redis_batch` above 1: every op kind in the mix must be one the design can batch,
/// else the run is refused before the load, saying which op and why (a silent fall back
/// to one op at a time would report a batch depth that was not run).
pub(super) fn refuse_unbatched_ops(cell: &Cell<'_>, strategy: &dyn Strategy) -> Result<(), BackendError> {
    let w = &cell.plan.workload;
    if w.redis_batch <= 1 {
        return Ok(());
    }
    let mut kinds = OpKind::ALL.into_iter().filter(|k| w.mix.weight(*k) > 0);
    match kinds.find_map(|k| strategy.batches(k).err()) {
        None => Ok(()),
        Some(why) => Err(BackendError::Refused(format!(
            "{}: redis_batch = {} needs every op in the mix sent as one Redis command: {why}",
            cell.label(),
            w.redis_batch
        ))),
    }
}

/// Who the cell runs as: the namespace's identity, and Redis's or the broker's.
fn identity(ns: &Namespace, made: &Made) -> String {
    match (&made.space, &made.mq) {
        (Some(space), _) => format!("{}; Redis: {}", ns.identity().describe(), space.identity().describe()),
        (None, Some(mq)) => {
            format!("{}; RabbitMQ: the configured account, queue {}", ns.identity().describe(), mq.queue())
        }
        (None, None) => ns.identity().describe(),
    }
}

/// The strategy: a file-defined one compiled for this namespace, or the registry's row
/// built over the namespace's pool (and its Redis key space).
pub(super) async fn build(cell: &Cell<'_>, ns: &Namespace, made: &mut Made) -> Result<Arc<dyn Strategy>, BackendError> {
    let (plan, t) = (cell.plan, &cell.t);
    let login = cell.redis_login.as_ref().map(|(password, attach)| SpaceLogin { password, attach: *attach });
    let space = match t.redis {
        Some(r) => Some(
            r.space_with(&cell.ns_name, cell.op_timeout(), plan.workload.ops_in_flight(), login)
                .await?
                .pipelined(plan.workload.redis_pipeline, plan.workload.ops_in_flight()),
        ),
        None => None,
    };
    made.space = space.clone();
    if let Some(a) = t.amqp {
        made.mq = Some(a.space(&cell.ns_name, plan.workload.ops_in_flight()).await?);
    }
    let redis_cfg = RedisConfig {
        n_users: t.seed.n_users,
        flush_interval: Duration::from_millis(plan.redis.flush_interval_ms),
        flush_batch: plan.redis.flush_batch,
        reconcile_interval: plan.redis.reconcile_interval_ms.map(Duration::from_millis),
        cache_delay: Duration::from_millis(plan.redis.cache_delay_ms),
        cache_ttl: Duration::from_millis(plan.redis.cache_ttl_ms),
    };
    let with = Ingredients {
        db: ns.db().clone(),
        redis: space,
        mq: made.mq.clone(),
        redis_cfg,
        mq_cfg: MqConfig { prefetch: MQ_PREFETCH },
    };
    match cell.recipe().build(with).await {
        Ok(strategy) => Ok(strategy),
        Err(BuildError::Missing(what)) => Err(BackendError::Refused(format!("{}: {what}", t.name))),
        Err(BuildError::Setup(e)) => Err(BackendError::Step {
            backend: t.server.dialect().name(),
            step: "set up a file-defined strategy",
            namespace: cell.ns_name.clone(),
            source: e.into(),
        }),
    }
}

/// Wraps the strategy so its reads go to the replica, once the replica holds the seed
/// (a bounded wait: 10 s).
async fn replica_reads(
    cell: &Cell<'_>,
    ns: &Namespace,
    made: &mut Made,
    strategy: Arc<dyn Strategy>,
    mode: ReadFrom,
) -> Result<Arc<dyn Strategy>, BackendError> {
    let (opts, t) = (cell.opts, &cell.t);
    let refused = |why: String| BackendError::Refused(format!("{}: replica reads: {why}", cell.label()));
    let (reader, primary) = match (&made.space, t.redis) {
        (Some(space), Some(r)) => {
            let url = opts.redis_replica_url.as_deref().ok_or_else(|| refused("no Redis replica".into()))?;
            let ReplicaRead::Redis(layout) = cell.recipe().replica_read() else {
                return Err(refused("no replica layout".into()));
            };
            (
                ReplicaReader::redis(url, space, layout, cell.op_timeout()).await?,
                CatchUp::Redis(Box::new(
                    r.client()
                        .ok_or_else(|| refused("replica reads on a Redis Cluster are not offered".into()))?
                        .clone(),
                )),
            )
        }
        _ => {
            let url = opts.postgres_replica_url.as_deref().ok_or_else(|| refused("no standby".into()))?;
            let spec = PoolSpec {
                max_connections: cell.plan.workload.connections,
                acquire_timeout: cell.op_timeout(),
                isolation: t.isolation,
            };
            (ReplicaReader::sql(ns.replica_db(url, spec)?, url), CatchUp::Pg(ns.db().clone()))
        }
    };
    let wrapped = Arc::new(ReplicaReads::new(strategy, reader, primary, mode));
    made.replica = Some(wrapped.clone());
    wrapped.catch_up(CATCH_UP_BOUND).await.map_err(refused)?;
    Ok(wrapped)
}

/// What the load phase leaves: its result, the faults it fired, settle and the series.
pub(super) struct Loaded {
    pub(super) strategy: Arc<dyn Strategy>,
    pub(super) load: LoadResult,
    pub(super) faults: Vec<FaultEvent>,
    pub(super) settle_s: f64,
    pub(super) settle_error: Option<String>,
    pub(super) series: Series,
    /// When the scheduled failovers ran (µs from the load's start), for the classifier.
    pub(super) failover_us: Option<(u64, u64)>,
    /// The distributed check: the agents' strategy figures, summed (None: the
    /// strategy's own, read at the check).
    pub(super) figures: Option<Vec<(String, f64)>>,
    /// What the load cost the servers (`cost.rs`; None: not read).
    pub(super) cost: Option<counterlab_report::CostReport>,
}

/// Runs the load with the sampler and the scheduled faults, then settles (retried, like
/// the check's reads, while a lost connection is what failed: a buffered design's settle
/// drains Redis into SQL, and its claims make a replay harmless). With `cost_of` (what
/// the cell made: its Redis space) the servers' statistics are read just before the load
/// (the pool warmed, the strategy started) and after settle, the server-wide ones also
/// over an idle interval before the strategy starts (`cost.rs`).
pub(super) async fn drive(
    cell: &Cell<'_>,
    ns: &Namespace,
    strategy: Arc<dyn Strategy>,
    cfg: &DriverConfig,
    cost_of: Option<&Made>,
    log: &mut dyn FnMut(&str),
) -> (Loaded, Result<History, String>) {
    let (plan, seed) = (cell.plan, cell.t.seed);
    // A scheduled pause needs the wrapper that stalls every op.
    let strategy: Arc<dyn Strategy> = match plan.faults_for(cell.t.name).any(|f| matches!(f.fault, Fault::Pause { .. }))
    {
        true => Arc::new(Pausable::new(strategy)),
        false => strategy,
    };
    let w = &plan.workload;
    ns.db().warm(w.max_workers()).await;
    let space = cost_of.map(|m| m.space.as_ref());
    let baseline = Duration::from_millis(w.cost_baseline_ms);
    let idle = match space {
        Some(space) => super::cost::idle_once(cell.idle_key(), ns, space, baseline).await,
        None => Default::default(),
    };
    strategy.start().await;
    let before = match space {
        Some(space) => Some(super::cost::before(ns, space, idle).await),
        None => None,
    };
    let monitor = Monitor::new();
    let sampler = Sampler::start(
        monitor.clone(),
        strategy.clone(),
        SamplerConfig {
            interval: Duration::from_millis(plan.workload.sample_interval_ms),
            sample_drift: plan.workload.sample_drift,
            label: format!("{}, seed {}, namespace {}", cell.label(), plan.seed, cell.ns_name),
        },
        progress_line(cell),
    );
    let pool = Arc::new(IdPool::seeded(seed.n_users, seed.notifications_per_user, seed.initial_read_per_user));
    cell.enter(Phase::Load);
    let scheduled = schedule_faults(plan, &strategy, Instant::now());
    // The calls go to a store that spills them to files past SPILL_AFTER (crate::spill).
    let store = Arc::new(HistoryStore::new(SPILL_AFTER));
    let cfg = DriverConfig { history_sink: Some(store.clone()), ..cfg.clone() };
    let load = run_load(strategy.clone(), pool, &cfg, monitor.clone()).await;
    let history = store.finish();
    let (faults, failover_us) = fired_faults(scheduled).await;
    cell.enter(Phase::Settle);
    let settle_start = Instant::now();
    monitor.set_phase(counterlab_sim::SETTLE);
    // Each attempt bounded by the phase's bound too (a strategy's settle honours its
    // timeout; this holds where one does not): over it is not retried.
    let (bound, phase) = (Duration::from_millis(plan.redis.settle_timeout_ms), cell.bounds().settle);
    let settle = || async {
        tokio::time::timeout(phase, strategy.settle(bound)).await.unwrap_or_else(|_| {
            let why = format!("over its bound of {:.1} s", phase.as_secs_f64());
            Err(counterlab_core::OpError::new(ErrorClass::Other, Outcome::Fail, why))
        })
    };
    let settle_error = retry_lost("settle", Some(ns.db()), log, settle).await.err();
    let settle_s = settle_start.elapsed().as_secs_f64();
    let series = sampler.finish().await;
    let cost = match (before, space) {
        (Some(before), Some(space)) => super::cost::after(ns, space, before, &load, seed.n_users).await,
        _ => None,
    };
    super::cost::log_errors(cost.as_ref(), &cell.label(), log);
    (Loaded { strategy, load, faults, settle_s, settle_error, series, failover_us, figures: None, cost }, history)
}

/// The scheduled faults as they went: when each fired and its outcome (one the load
/// outlasted is aborted), and the span the failovers took (µs from the load's start).
async fn fired_faults(scheduled: Vec<super::post::ScheduledFault>) -> (Vec<FaultEvent>, Option<(u64, u64)>) {
    let (mut faults, mut failover_us) = (Vec::new(), None);
    for (mut ev, h) in scheduled {
        if h.is_finished() {
            if let Ok((fired, done, outcome)) = h.await {
                ev.fired_at_ms = Some(fired / 1000);
                if matches!(Fault::from_name(&ev.kind), Some(Fault::Failover { .. })) {
                    failover_us = Some(span(failover_us, (fired, done)));
                }
                ev.outcome = outcome;
            }
        } else {
            h.abort();
            ev.outcome = "the load ended first".into();
        }
        faults.push(ev);
    }
    (faults, failover_us)
}

/// The span covering `a` (if any) and `b`.
fn span(a: Option<(u64, u64)>, b: (u64, u64)) -> (u64, u64) {
    a.map_or(b, |a| (a.0.min(b.0), a.1.max(b.1)))
}

/// The live status at each sampled interval, when the caller wants it.
fn progress_line(cell: &Cell<'_>) -> Box<dyn FnMut(&Sample) + Send> {
    let Some((progress, status)) = cell.live.clone() else { return Box::new(|_: &Sample| {}) };
    Box::new(move |s: &Sample| {
        let mut st = status.lock().expect("status lock");
        st.add(s);
        progress(&st);
    })
}

/// What the checks found.
pub(super) struct Found {
    /// The strategy's figures, read once: the same ones the anomalies were explained by.
    figures: Vec<(Figure, f64)>,
    check: CheckResult,
    anomalies: Vec<counterlab_core::Anomaly>,
    judgement: counterlab_core::Judgement,
    history: HistoryReport,
    /// Replica reads: how stale they were.
    staleness: Option<counterlab_core::Staleness>,
    /// Seconds from reading the counters to the verdict.
    check_s: f64,
}

/// The truth and the counters (each retried while the connection is what failed; a
/// check that still cannot complete makes this row INCOMPLETE, not the run), then the
/// counters, the reads, the anomalies and the verdict.
pub(super) async fn check(
    cell: &Cell<'_>,
    ns: &Namespace,
    l: &Loaded,
    history: &mut History,
    log: &mut dyn FnMut(&str),
) -> Result<Found, String> {
    let started = std::time::Instant::now();
    let (plan, name, info) = (cell.plan, cell.t.name, cell.t.info);
    let guarantee = if plan.expect_drift.iter().any(|s| s == name) { Guarantee::None } else { info.guarantee };
    // Built-in designs' read_count writes nothing the check reads; a strategy file's
    // read steps might (a read repair), so its reads wait for the truth as before.
    let overlap = matches!(ns.db(), Db::Pg(_)) && cell.recipe().trusted();
    let stop = super::stop::Stop::new(cell.opts.cancel.clone(), cell.op_timeout());
    let (Checked { result: check, witnesses: rows, .. }, settled, truth_s, left_out) =
        truth_and_settled(ns, l, cell, guarantee, overlap, &stop, log).await?;
    let settled_s = started.elapsed().as_secs_f64() - truth_s;
    // The history's verdicts: reads against their bounds, what read_count showed once
    // settled, and the named anomalies that explain any mismatch.
    let lag_us = l.strategy.read_lag().map(|d| d.as_micros() as u64);
    let source = match (cell.t.read_from, lag_us) {
        (ReadFrom::Primary, None) => ReadSource::Counter,
        (ReadFrom::Primary, Some(lag_us)) => ReadSource::Cache { lag_us },
        _ => ReadSource::Replica { bound_us: plan.replica.stale_read_bound_ms.map(|ms| ms * 1000) },
    };
    // A capped history cannot bound the reads (calls are missing): not checked, and the
    // verdict says so (`limits`).
    let reads = match l.load.history_dropped {
        0 => Some(check_reads_parts_seeded(history, cell.t.seed, source)?),
        _ => None,
    };
    // Reads are judged unless the strategy is eventual as declared (stale reads are
    // its design; replica reads are judged all the same, against their staleness bound)
    // or a scheduled data loss or failover wiped what it reads from (it heals later; the
    // final check and settled reads judge that).
    let data_loss = plan.faults_for(name).any(|f| matches!(f.fault, Fault::RedisDataLoss | Fault::Failover { .. }));
    let replica = matches!(source, ReadSource::Replica { .. });
    let judge_reads = (info.guarantee != Guarantee::Eventual || replica) && !data_loss;
    let figures = strategy_figures(l, reads.as_ref(), lag_us);
    let cx = classifier_context(cell, l, guarantee, &figures);
    let anomalies = classify_parts(history, &rows, reads.as_ref().filter(|_| judge_reads), &settled, cx)?;
    for a in &anomalies {
        log(&format!("{}: anomaly {} x{}", cell.label(), a.name, a.count));
    }
    let check_s = started.elapsed().as_secs_f64();
    log(&format!(
        "{}: checked in {check_s:.2} s (counters and truth {truth_s:.2} s, then {settled_s:.2} s to end {} settled reads)",
        cell.label(),
        settled.len()
    ));
    let mut limits: Vec<Limit> = history_limit(history.len(), l.load.history_dropped).into_iter().collect();
    limits.extend(settled_limit(left_out, settled.len() + left_out));
    let lag_ms = lag_us.map(|us| us as f64 / 1e3);
    let judgement = verdict(cell, &l.load, guarantee, &check, &anomalies, lag_ms, limits);
    let judgement = unsettled(cell, &l.load, judgement, l.settle_error.as_deref());
    let staleness = reads.as_ref().and_then(|r| r.staleness());
    let history = HistoryReport {
        events: history.len(),
        dropped: l.load.history_dropped,
        reads_checked: reads.as_ref().map_or(0, |r| r.reads_checked),
        read_violations: reads.as_ref().map_or(0, |r| r.violations_total),
        reads_judged: judge_reads,
        settled_reads: settled.len() as u64,
        file: None,
    };
    Ok(Found { figures, check, anomalies, judgement, history, staleness, check_s })
}

/// The strategy's own figures (summed over the agents of a distributed run), with the
/// replica reads' staleness and a cache's allowed lag beside them.
fn strategy_figures(l: &Loaded, reads: Option<&counterlab_core::ReadCheck>, lag_us: Option<u64>) -> Vec<(Figure, f64)> {
    let mut figures = l.strategy.figures();
    if let Some(agents) = &l.figures {
        for (name, v) in figures.iter_mut() {
            *v = agents.iter().filter(|(n, _)| n == name.name()).map(|(_, x)| x).sum();
        }
    }
    if let Some(st) = reads.and_then(|r| r.staleness()) {
        figures.extend(staleness_figures(&st));
    }
    if let (Some(lag), Some(rc)) = (lag_us, reads) {
        let worst = rc.violations.iter().filter_map(|v| v.stale_for_us).max().unwrap_or(0);
        figures.extend([(Figure::ReadLagAllowedMs, lag as f64 / 1e3), (Figure::StaleReadMaxMs, worst as f64 / 1e3)]);
    }
    figures
}

/// What the classifier knows beside the history: the guarantee judged, the strategy's
/// own counts of lost and doubled applies, whether a reconciler ran, the seed, a failover.
fn classifier_context(cell: &Cell<'_>, l: &Loaded, guarantee: Guarantee, figures: &[(Figure, f64)]) -> Context {
    let figure = |k: Figure| figures.iter().find(|(n, _)| *n == k).map(|(_, v)| *v as u64);
    let applies = (figure(Figure::DoubleAppliesRaising), figure(Figure::DoubleAppliesLowering));
    Context {
        guarantee,
        lost_flushes: figure(Figure::LostFlushClaims).unwrap_or(0),
        double_flushes: figure(Figure::DoubleFlushClaims).unwrap_or(0),
        double_applies: (applies.0.unwrap_or(0), applies.1.unwrap_or(0)),
        reconciler: figure(Figure::ReconcilePasses).is_some(),
        seed: cell.t.seed,
        failover_us: l.failover_us,
    }
}

/// The truth streamed beside the counters (`witnesses`: mismatched or negative users, all
/// the classifier reads; `sample`: the settled reads' users), and what `read_count` shows
/// for the sample once settled. With `overlap` (PostgreSQL: the truth has a connection of
/// its own) the reads run while the truth streams (the state is quiescent;
/// reports/2026-12-02-check-overlap); otherwise after it. Also the seconds until the
/// truth was in.
async fn truth_and_settled(
    ns: &Namespace,
    l: &Loaded,
    cell: &Cell<'_>,
    guarantee: Guarantee,
    overlap: bool,
    stop: &super::stop::Stop,
    log: &mut dyn FnMut(&str),
) -> Result<(Checked, Vec<counterlab_core::SettledRead>, f64, usize), String> {
    let (started, n_users, bounds) = (Instant::now(), cell.t.seed.n_users, cell.bounds());
    let read = |u| op_bounded(cell.op_timeout(), l.strategy.read_count(u));
    let counters = within("check", bounds.check, async {
        let counters = retry_lost("read the counters", Some(ns.db()), log, || l.strategy.counters(n_users)).await?;
        let users: Vec<i64> = CheckFold::sample_users(n_users, SETTLED_READS).collect();
        let truth = retry_lost("read the truth", Some(ns.db()), log, || {
            ns.check_stream(n_users, guarantee, counters.as_ref(), SETTLED_READS)
        });
        let reads =
            within("settled reads", bounds.settled_reads, async { Ok(shown_counts(&read, &users, stop).await) });
        if overlap {
            let ((checked, truth_s), shown) = tokio::join!(async { (truth.await, started.elapsed()) }, reads);
            Ok((checked?, shown, truth_s))
        } else {
            let checked = truth.await?;
            let truth_s = started.elapsed();
            Ok((checked, reads.await, truth_s))
        }
    });
    let (checked, shown, truth_s) = counters.await?;
    let settled = within("settled reads", bounds.settled_reads, settled_reads(&read, &checked.sample, shown?, stop));
    let (settled, left_out) = settled.await?;
    Ok((checked, settled, truth_s.as_secs_f64(), left_out))
}

/// The staleness of replica reads as figures (ms and counts).
fn staleness_figures(st: &counterlab_core::Staleness) -> Vec<(Figure, f64)> {
    let ms = |us: u64| us as f64 / 1e3;
    let share = if st.reads_checked == 0 { 0.0 } else { st.stale_reads as f64 / st.reads_checked as f64 };
    let mut f = vec![
        (Figure::StaleReads, st.stale_reads as f64),
        (Figure::StaleReadShare, share),
        (Figure::StaleReadP50Ms, ms(st.p50_us)),
        (Figure::StaleReadP99Ms, ms(st.p99_us)),
        (Figure::StaleReadMaxMs, ms(st.max_us)),
        (Figure::StaleReadMaxCounts, st.max_counts as f64),
        (Figure::StaleReadsOverBound, st.over_bound as f64),
    ];
    if let Some(b) = st.bound_us {
        f.push((Figure::StaleReadBoundMs, ms(b)));
    }
    f
}

fn verdict(
    cell: &Cell<'_>,
    load: &LoadResult,
    guarantee: Guarantee,
    check: &CheckResult,
    anomalies: &[counterlab_core::Anomaly],
    load_lag_ms: Option<f64>,
    limits: Vec<Limit>,
) -> counterlab_core::Judgement {
    let permission_denied = permission_denied(load);
    let lone_writer = (cell.t.server.dialect() == Dialect::Sqlite && cell.t.redis.is_none())
        .then_some("SQLite runs one writer at a time (every transaction is serializable), so its race cannot happen");
    let findings = Findings {
        strategy: cell.t.name,
        guarantee,
        check,
        anomalies,
        permission_denied,
        errors: judged_errors(cell.plan, cell.t.name, load),
        executed: executed(cell.plan, load),
        serialises_writers: lone_writer,
        conflicts_retried: load.ops.iter().map(|s| s.retries).sum(),
        read_lag_ms: load_lag_ms,
        limits,
    };
    judge(&findings, cell.plan.verdict.rules())
}

/// A design that did not settle (its buffers not drained, say) does not pass: a verdict
/// that did not fail becomes what the load alone shows (`judge_incomplete`: refusals and
/// errors fail it) or INCOMPLETE naming settle.
fn unsettled(
    cell: &Cell<'_>,
    load: &LoadResult,
    judgement: counterlab_core::Judgement,
    settle_error: Option<&str>,
) -> counterlab_core::Judgement {
    let Some(e) = settle_error.filter(|_| !judgement.verdict.is_fail()) else { return judgement };
    let errors = judged_errors(cell.plan, cell.t.name, load);
    let why = format!("settle: {e}");
    counterlab_core::judge_incomplete(
        cell.t.name,
        permission_denied(load),
        errors.as_ref(),
        cell.plan.verdict.rules(),
        &why,
    )
}

/// What a capped history leaves unchecked, for the verdict's label (None: nothing).
fn history_limit(recorded: u64, dropped: u64) -> Option<Limit> {
    (dropped > 0).then_some(Limit::HistoryCapped { recorded, dropped })
}

/// Settled reads left out (they errored twice) for the verdict's label: fewer users were
/// compared after settle than the sample holds (empty: none left out).
fn settled_limit(left_out: usize, sampled: usize) -> Option<Limit> {
    (left_out > 0).then_some(Limit::SettledReadsLeftOut { left_out: left_out as u64, sampled: sampled as u64 })
}

/// Writes the cell's history (JSON Lines) when asked; returns its path in the report.
fn write_history(cell: &Cell<'_>, history: &mut History) -> Result<Option<String>, BackendError> {
    let Some(dir) = &cell.opts.history_dir else { return Ok(None) };
    let path = dir.join(format!("{}.jsonl", cell.short));
    let written = std::fs::File::create(&path).map_err(|e| e.to_string()).and_then(|f| {
        let mut w = std::io::BufWriter::new(f);
        history.write_jsonl(&mut w)?;
        std::io::Write::flush(&mut w).map_err(|e| e.to_string())
    });
    written.map_err(|e| BackendError::Step {
        backend: "report",
        step: "write the history",
        namespace: cell.ns_name.clone(),
        source: format!("{}: {e}", path.display()).into(),
    })?;
    Ok(Some(format!("history/{}.jsonl", cell.short)))
}

/// The rest of a row: who ran it, the level the server reports, seed time, history file.
pub(super) struct RowContext {
    pub(super) identity: String,
    pub(super) in_effect: String,
    pub(super) seed_s: f64,
    /// What settled the server after the seed (`StrategyReport::settled`).
    pub(super) settled: Option<String>,
    pub(super) history_file: Option<String>,
}

pub(super) fn row(cell: &Cell<'_>, l: Loaded, mut f: Found, cx: RowContext, log: &mut dyn FnMut(&str)) -> Row {
    log(&format!(
        "{}: {} ops at {:.0} ops/s, {} of {} users mismatched: {}",
        cell.label(),
        l.load.total_ops(),
        l.load.throughput_ops_per_s(),
        f.check.users_mismatched,
        f.check.users_checked,
        f.judgement.label
    ));
    f.history.file = cx.history_file;
    let hdr_name = format!("hdr/{}.hlog", cell.short);
    let mut report = StrategyReport::new(StrategyRun {
        info: cell.t.info,
        backend: cell.backend,
        isolation: cell.t.isolation,
        isolation_in_effect: &cx.in_effect,
        namespace: &cell.ns_name,
        namespace_kept: cell.opts.keep,
        identity: cx.identity,
        judgement: f.judgement,
        seed_s: cx.seed_s,
        load: &l.load,
        settle_s: l.settle_s,
        settle_error: l.settle_error,
        check_s: f.check_s,
        faults: l.faults,
        figures: f.figures,
        check: &f.check,
        series: &l.series.samples,
        hdr_log: Some(hdr_name.clone()),
        anomalies: &f.anomalies,
        history: f.history,
    });
    report.drift_note = l.series.drift_note;
    report.settled = cx.settled;
    report.cost = l.cost;
    super::cost::broker(&mut report);
    report.moving_parts = moving_parts(cell, &report);
    report.read_from = cell.t.read_from;
    report.staleness = f.staleness.as_ref().map(counterlab_report::StalenessReport::from_core);
    report.thresholds = cell.plan.thresholds.iter().filter_map(|t| evaluate(t, &report)).collect();
    report.expectations = expectations(cell, &report);
    for e in report.expectations.iter().filter(|e| e.judged && !e.met) {
        log(&format!("{}: expectation not met: {}", cell.label(), e.detail));
    }
    for b in report.thresholds.iter().filter(|t| !t.passed) {
        log(&format!("{}: threshold breached: {}", cell.label(), b.detail));
    }
    (report, vec![(hdr_name, l.series.hdr_log)])
}

/// What the design needs beyond the SQL database (the registry row's declaration; a
/// file-defined strategy: Redis when it uses it), plus the reconciler when one ran.
fn moving_parts(cell: &Cell<'_>, report: &StrategyReport) -> Vec<String> {
    let mut parts = cell.recipe().moving_parts();
    if report.figures.contains_key(Figure::ReconcilePasses.name()) && !parts.iter().any(|p| p == "reconciler") {
        parts.push("reconciler".into());
    }
    parts
}

/// The scenario's `[[expect]]` entries for this strategy on this backend, judged on its
/// row: the verdict's label, or the anomaly among the row's findings. A row without
/// evidence (`NO EVIDENCE`) judges none: they are listed as not judged instead.
fn expectations(cell: &Cell<'_>, report: &StrategyReport) -> Vec<ExpectationResult> {
    let (dialect, isolation) = (cell.t.server.dialect(), cell.t.isolation);
    let judged = report.check.evidence;
    let entries = cell.plan.expect.iter().filter(|e| e.applies_to(cell.t.name, dialect, isolation));
    entries
        .map(|e| {
            let found: Vec<String> = report.anomalies.iter().map(|a| format!("{} x{}", a.name, a.count)).collect();
            let found = if found.is_empty() { "none".to_string() } else { found.join(", ") };
            let (met, showed) = match e.expected {
                Expected::Verdict(v) => {
                    (report.check.verdict.label() == v.name(), format!("verdict {}", report.check.label()))
                }
                Expected::Anomaly(k) => {
                    (report.anomalies.iter().any(|a| a.name == k.name()), format!("anomalies: {found}"))
                }
            };
            let why = if met { String::new() } else { format!(" ({})", report.check.summary) };
            let on = format!("{} at {}", dialect.name(), isolation.name());
            let detail = match judged {
                true => format!("expected {}; {on}: {showed}{why}", e.describe()),
                false => format!("not judged: {}; {on}: {}", e.describe(), report.check.summary),
            };
            ExpectationResult { expected: e.describe(), judged, met: met && judged, detail }
        })
        .collect()
}

/// Releases the Redis identity, then keeps (`--keep`) or removes the cell's data. A
/// cleanup that failed is said, in the log and on the row; the results stand, and the
/// namespace's marker lets `counterlab clean` remove what is left.
async fn teardown(
    cell: &Cell<'_>,
    ns: Namespace,
    made: Made,
    result: Result<Row, BackendError>,
    log: &mut dyn FnMut(&str),
) -> Result<Row, BackendError> {
    cell.enter(Phase::Teardown);
    let failed = cleanup(cell, ns, made, log).await;
    if failed.is_empty() {
        return result;
    }
    let e = format!("{} (`counterlab clean --yes` removes what is left)", failed.join("; "));
    log(&format!("{}: cleanup failed: {e}", cell.t.name));
    let mut result = result;
    if let Ok((report, _)) = &mut result {
        report.cleanup_error = Some(e);
    }
    result
}

/// Undoes what `made` records and removes (or keeps) the namespace; returns what failed.
pub(super) async fn cleanup(cell: &Cell<'_>, ns: Namespace, made: Made, log: &mut dyn FnMut(&str)) -> Vec<String> {
    if let Some(space) = &made.space {
        space.stop_refresher();
    }
    let mut failed = Vec::new();
    if let Some(r) = &made.replica
        && let Err(e) = retry_lost("release the replica reads", None, log, || r.release()).await
    {
        failed.push(e);
    }
    if let Some(space) = &made.space
        && let Err(e) = retry_lost("drop the ACL user", None, log, || space.release()).await
    {
        failed.push(e);
    }
    if cell.opts.keep {
        failed.extend(ns.keep().await.err().map(|e| e.to_string()));
        if let Some(space) = &made.space {
            log(&format!("{}: its Redis keys are kept under {}*", space.namespace(), space.prefix()));
            failed.extend(space.mark_kept().await.err().map(|e| e.to_string()));
        }
    } else {
        failed.extend(delete_redis_keys(&made, log).await);
        failed.extend(ns.drop_namespace().await.err().map(|e| e.to_string()));
    }
    failed.extend(delete_queue(&made, log).await);
    failed
}

/// The run's broker queue (whether or not the strategy got built): the consumer stopped
/// first, then the queue deleted and the connection closed.
async fn delete_queue(made: &Made, log: &mut dyn FnMut(&str)) -> Option<String> {
    let mq = made.mq.as_ref()?;
    if let Some(s) = &made.strategy {
        s.teardown().await.ok();
    }
    retry_lost("delete the run's queue", None, log, || mq.delete()).await.err()
}

/// The run's Redis keys: through the strategy, or (when it never got built) the space,
/// which holds the marker key at least.
async fn delete_redis_keys(made: &Made, log: &mut dyn FnMut(&str)) -> Option<String> {
    let outcome: Result<(), String> = match (&made.strategy, &made.space) {
        (Some(s), Some(_)) => retry_lost("delete the run's Redis keys", None, log, || s.teardown()).await,
        (None, Some(space)) => {
            retry_lost("delete the run's Redis keys", None, log, || space.delete_all()).await.map(|_| ())
        }
        (_, None) => Ok(()),
    };
    outcome.err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_left_out_after_settle_qualify_the_verdict_and_none_left_out_do_not() {
        assert_eq!(settled_limit(0, 2000), None);
        assert_eq!(
            settled_limit(3, 2000).map(|l| l.text()).as_deref(),
            Some("3 of 2000 settled reads errored twice and were not compared")
        );
    }
}
