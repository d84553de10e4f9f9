//! Executes a resolved plan: resolve the backends, then for each backend x strategy x
//! isolation level a fresh namespace, bulk seed, the load, the ground-truth check, and
//! teardown (or `--keep`), assembled into one `Report`.

mod config;
mod cost;
mod cost_locks;
mod deadline;
pub mod explore;
mod names;
mod one;
pub mod phases;
mod post;
mod replay;
pub(crate) mod servers;
mod status;
mod stop;
pub mod validate;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use counterlab_core::{Backend, Companion, ReadFrom, StrategyInfo};
use counterlab_plan::RunPlan;
use counterlab_report::{REPORT_SCHEMA_VERSION, Report, Skipped, StrategyReport};
use counterlab_sim::DriverConfig;
use counterlab_strategies::{AmqpServer, BackendError, Dialect, Isolation, RedisServer, Registry, SeedSpec, Server};

use crate::clock;
pub use names::{SQLITE_MARKER, namespace_name, new_run_id};
pub use post::{POST_LOAD_ATTEMPTS, POST_LOAD_BACKOFF, SETTLED_READS};
pub use replay::{replay_command, server_flags};
use servers::Servers;
pub use status::{Progress, Status};

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
    /// Replica reads (`[replica] read_from`): a hot standby of the PostgreSQL server and a
    /// replica of the Redis server (`--postgres-replica`, `--redis-replica`); a cell that
    /// reads from a replica it has none of is skipped with the reason.
    pub postgres_replica_url: Option<String>,
    pub redis_replica_url: Option<String>,
    /// A configured AMQP URL (RabbitMQ); None: the local default, and the broker
    /// strategies are skipped (with the reason) when it does not answer.
    pub amqp_url: Option<String>,
    /// Directory for SQLite namespace files; None: a fresh temporary directory, removed
    /// after the run unless `keep`.
    pub sqlite_dir: Option<PathBuf>,
    /// Leave each namespace in place after the run.
    pub keep: bool,
    /// Write each strategy run's history (JSON Lines) into this directory as soon as the
    /// run is checked (`history/` beside the report).
    pub history_dir: Option<PathBuf>,
    /// Calls recorded per strategy run (`HISTORY_LIMIT`; tests lower it): past it the
    /// reads are not checked and the verdict's label says so.
    pub history_limit: u64,
    pub connect_timeout: Duration,
    /// Set by Ctrl-C: the load stops, the run in flight is still checked and torn down,
    /// later runs do not start, and the report says `interrupted`.
    pub cancel: Arc<AtomicBool>,
    /// Receives the live status at each phase and about once a second while a strategy
    /// runs (a progress display, a metrics endpoint).
    pub progress: Option<Progress>,
    /// `--trust-strategy-files`: run file-defined strategies as the configured account
    /// where a server cannot give their namespace an identity of its own.
    pub trust_strategy_files: bool,
    /// The built-in strategies a plan can name (tests may register more).
    pub registry: Registry,
    /// Called as each cell enters a phase, with the cell's namespace (tests use it to
    /// break a server at a chosen moment; a caller could drive a progress display).
    pub on_phase: Option<PhaseHook>,
}

counterlab_core::named_enum! {
    /// The phases of one cell after its seed, in order.
    pub enum Phase {
        Load = "load",
        Settle = "settle",
        Check = "check",
        Teardown = "teardown",
    }
}

/// See `RunOptions::on_phase`.
pub type PhaseHook = Arc<dyn Fn(Phase, &str) + Send + Sync>;

/// Calls recorded per strategy run: past `spill::SPILL_AFTER` they go to temporary files
/// (54 bytes each: 5.4 GB of disk at the limit, about 28 minutes at 60k ops/s); beyond it
/// the read check is skipped and the verdict's label says so (`[history capped ...]`).
pub const HISTORY_LIMIT: u64 = 100_000_000;

pub const COMMIT: &str = env!("COUNTERLAB_GIT_COMMIT");

/// One cell of the run: a strategy on a backend (and Redis) at an isolation level.
struct Target<'a> {
    server: &'a Server,
    redis: Option<&'a RedisServer>,
    amqp: Option<&'a AmqpServer>,
    run_id: &'a str,
    name: &'a str,
    info: StrategyInfo,
    isolation: Isolation,
    seed: SeedSpec,
    /// Which repeat this is (0-based); with `repeat` > 1 the namespace ends `_r<n>`.
    repeat: u32,
    /// 1-based index of this cell run (repeats counted), and the number the run has.
    index: (usize, usize),
    /// Where its `read_count` reads.
    read_from: ReadFrom,
}

/// What the cells produced so far: their rows, the cells skipped (and why), and the
/// files beside the report (HDR logs).
#[derive(Default)]
struct Rows {
    reports: Vec<StrategyReport>,
    skipped: Vec<Skipped>,
    side_files: Vec<(String, String)>,
}

/// Runs every backend x strategy x isolation level of the plan. Progress goes to `log`.
pub async fn run_plan(plan: &RunPlan, opts: &RunOptions, log: &mut dyn FnMut(&str)) -> Result<Report, BackendError> {
    let run_id = new_run_id();
    let started = clock::iso8601(clock::now_unix().0);
    let mut servers = Servers::connect(plan, opts, &run_id, log).await?;
    log(&format!("run {run_id}"));
    let cfg = config::driver_config(plan, opts.cancel.clone(), opts.history_limit);
    let mut rows = Rows::default();
    let result = run_cells(plan, opts, &cfg, &servers, &run_id, &mut rows, log).await;
    if opts.keep {
        servers.keep_temp_dir();
    }
    result?;
    let mut report = assemble(plan, opts, run_id, started, &servers, rows)?;
    if plan.explore.with_run && !opts.cancel.load(Ordering::Relaxed) {
        explore::attach(plan, opts, &mut report, log).await;
    }
    Ok(report)
}

async fn run_cells(
    plan: &RunPlan,
    opts: &RunOptions,
    cfg: &DriverConfig,
    servers: &Servers,
    run_id: &str,
    rows: &mut Rows,
    log: &mut dyn FnMut(&str),
) -> Result<(), BackendError> {
    let (cells, skipped, replica_skipped) = plan_cells(plan, opts, servers)?;
    for k in &replica_skipped {
        log(&format!("skipped: {} on {}: {}", k.strategy, k.backend, k.reason));
    }
    rows.skipped = skipped.into_iter().chain(replica_skipped).collect();
    // With `repeat` > 1 the cells run interleaved (A B C A B C): each round runs every cell
    // once, so a slow spell of the machine lands on every cell alike. Then, up to
    // `repeat_max` rounds in all, the designs whose order is not settled run again.
    let mut runs: Vec<Vec<StrategyReport>> = vec![Vec::new(); cells.len()];
    let all: Vec<usize> = (0..cells.len()).collect();
    let mut r = Rounds { plan, opts, cfg, run_id, cells: &cells, index: 0, total: cells.len() * plan.repeat as usize };
    for round in 0..plan.repeat {
        if plan.repeat > 1 {
            log(&format!("repeat {}/{}", round + 1, plan.repeat));
        }
        r.round(round, &all, &mut runs, rows, log).await?;
    }
    for round in plan.repeat..plan.repeat_max {
        let again = not_settled(&runs, plan.seed);
        if again.is_empty() || opts.cancel.load(Ordering::Relaxed) {
            break;
        }
        let names: Vec<&str> = again.iter().map(|i| cells[*i].name).collect();
        log(&format!("repeat {}/{}: the order of {} is not settled yet", round + 1, plan.repeat_max, names.join(", ")));
        r.round(round, &again, &mut runs, rows, log).await?;
    }
    for runs in runs {
        let merged = runs.len() > 1;
        if let Some(mut row) = counterlab_report::merge_repeats(runs, plan.seed) {
            if merged {
                // Thresholds judge the medians (the row's own figures after the merge).
                row.thresholds = plan.thresholds.iter().filter_map(|t| counterlab_report::evaluate(t, &row)).collect();
            }
            rows.reports.push(row);
        }
    }
    Ok(())
}

/// One cell to run: a strategy on a SQL server (with its Redis or broker) at a level,
/// reading from one source.
struct Planned<'a> {
    server: &'a Server,
    redis: Option<&'a RedisServer>,
    amqp: Option<&'a AmqpServer>,
    name: &'a str,
    info: StrategyInfo,
    isolation: Isolation,
    read_from: ReadFrom,
}

impl<'a> Planned<'a> {
    fn target(&self, run_id: &'a str, seed: SeedSpec, repeat: u32, index: (usize, usize)) -> Target<'a> {
        let (server, redis, amqp, name, info) = (self.server, self.redis, self.amqp, self.name, self.info);
        let (isolation, read_from) = (self.isolation, self.read_from);
        Target { server, redis, amqp, run_id, name, info, isolation, seed, read_from, repeat, index }
    }
}

/// What a round of cells runs with, and how many cell runs have started.
struct Rounds<'a> {
    plan: &'a RunPlan,
    opts: &'a RunOptions,
    cfg: &'a DriverConfig,
    run_id: &'a str,
    cells: &'a [Planned<'a>],
    index: usize,
    /// The cell runs planned (the sequential rounds add to it as they start).
    total: usize,
}

impl Rounds<'_> {
    /// Runs the cells `which` once each (round `round`, 0-based), adding their rows to `runs`.
    async fn round(
        &mut self,
        round: u32,
        which: &[usize],
        runs: &mut [Vec<StrategyReport>],
        rows: &mut Rows,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), BackendError> {
        let (plan, opts) = (self.plan, self.opts);
        for &i in which {
            let c = &self.cells[i];
            if opts.cancel.load(Ordering::Relaxed) {
                let b = c.server.dialect().name();
                log(&format!("interrupted: {} on {b} at {} not run", c.name, c.isolation.name()));
                continue;
            }
            self.index += 1;
            self.total = self.total.max(self.index);
            let target = c.target(self.run_id, plan.data.seed_spec(), round, (self.index, self.total));
            let (report, files) = one::run_one(plan, opts, self.cfg, target, log).await?;
            runs[i].push(report);
            rows.side_files.extend(files);
        }
        Ok(())
    }
}

/// The cells (indices) whose backend x level order is not settled on the runs so far.
fn not_settled(runs: &[Vec<StrategyReport>], seed: u64) -> Vec<usize> {
    let merged: Vec<(usize, StrategyReport)> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| counterlab_report::merge_repeats(r.clone(), seed).map(|row| (i, row)))
        .collect();
    let (cells, rows): (Vec<usize>, Vec<StrategyReport>) = merged.into_iter().unzip();
    counterlab_report::decision::unsettled(&rows).into_iter().map(|k| cells[k]).collect()
}

/// The cells to run, the combinations left out, and those a missing replica left out.
type PlannedCells<'a> = (Vec<Planned<'a>>, Vec<Skipped>, Vec<Skipped>);

/// Every cell of the plan in run order, listed once before anything runs, with the
/// combinations left out and why (those a missing replica left out apart, to be said).
fn plan_cells<'a>(
    plan: &'a RunPlan,
    opts: &RunOptions,
    servers: &'a Servers,
) -> Result<PlannedCells<'a>, BackendError> {
    let (mut cells, mut skipped, mut replica_skipped) = (Vec::new(), Vec::new(), Vec::new());
    for server in &servers.sql {
        for name in &plan.strategies {
            let Some((info, (redis, amqp), levels)) = cells_of(plan, opts, server, servers, name, &mut skipped)? else {
                continue;
            };
            for (isolation, read_from) in levels.iter().flat_map(|l| plan.replica.read_from.iter().map(|r| (*l, *r))) {
                match replica_skip((plan, opts), server, redis.is_some(), name, isolation, read_from) {
                    Some(skip) => replica_skipped.push(skip),
                    None => cells.push(Planned { server, redis, amqp, name, info, isolation, read_from }),
                }
            }
        }
    }
    Ok((cells, skipped, replica_skipped))
}

/// The skipped row when `read_from` needs a replica this cell's server has not got.
fn replica_skip(
    (plan, opts): (&RunPlan, &RunOptions),
    server: &Server,
    redis: bool,
    name: &str,
    isolation: Isolation,
    read_from: ReadFrom,
) -> Option<Skipped> {
    let recipe = servers::recipe(plan, opts, name).ok()?;
    let why = one::no_replica(opts, server, recipe, name, read_from)?;
    Some(Skipped {
        strategy: name.to_string(),
        backend: Backend::new(server.dialect(), redis.then_some(Companion::Redis)),
        isolation,
        reason: format!("read_from = {}: {why}", read_from.name()),
    })
}

/// The levels strategy `name` runs at on `server` (with its info and Redis), or None
/// when it cannot run there; each cell left out is recorded in `skipped` with the reason.
/// A name the registry does not hold is an error: the plan was resolved against other
/// names than the run's (a caller's bug, never a skipped row that could pass unseen).
fn cells_of<'a>(
    plan: &RunPlan,
    opts: &RunOptions,
    server: &Server,
    servers: &'a Servers,
    name: &str,
    skipped: &mut Vec<Skipped>,
) -> Result<Option<Cell<'a>>, BackendError> {
    let levels: Vec<Isolation> = plan.isolation_for(name).to_vec();
    let mut skip = |with: Option<Companion>, levels: &[Isolation], reason: &str| {
        skipped.extend(levels.iter().map(|&isolation| Skipped {
            strategy: name.to_string(),
            backend: Backend::new(server.dialect(), with),
            isolation,
            reason: reason.to_string(),
        }))
    };
    let recipe = servers::recipe(plan, opts, name)?;
    let info = recipe.info();
    let redis = match (recipe.needs_redis(), &servers.redis) {
        (false, _) => None,
        (true, Ok(r)) => Some(r),
        (true, Err(why)) => {
            skip(Some(Companion::Redis), &levels, why);
            return Ok(None);
        }
    };
    let amqp = match (recipe.needs_amqp(), &servers.amqp) {
        (false, _) => None,
        (true, Ok(r)) => Some(r),
        (true, Err(why)) => {
            skip(Some(Companion::Rabbitmq), &levels, why);
            return Ok(None);
        }
    };
    if let Some(why) = recipe.unsupported_on(server.dialect()) {
        skip(None, &levels, &why);
        return Ok(None);
    }
    if server.dialect() != Dialect::Sqlite {
        return Ok(Some((info, (redis, amqp), levels)));
    }
    let unsupported: Vec<Isolation> = levels.iter().copied().filter(|l| !server.supports(*l)).collect();
    skip(None, &unsupported, "SQLite transactions are always serializable; run once at serializable instead");
    Ok(Some((info, (redis, amqp), vec![Isolation::Serializable])))
}

/// The `[[expect]]` entries some row should have judged and did not (it had no evidence,
/// or its check was INCOMPLETE), each with that row; and entries no row ran at all.
fn not_judged(plan: &RunPlan, reports: &[StrategyReport]) -> Vec<String> {
    let mut out = Vec::new();
    for e in &plan.expect {
        let d = e.describe();
        let mut applied = false;
        for r in reports {
            if !e.applies_to(&r.strategy, r.backend.sql, r.isolation) {
                continue;
            }
            applied = true;
            if !r.expectations.iter().any(|x| x.expected == d && x.judged) {
                out.push(format!("{d} ({} on {} at {}: {})", r.strategy, r.backend, r.isolation, r.check.label()));
            }
        }
        if !applied {
            out.push(format!("{d} (no row ran it)"));
        }
    }
    out
}

/// A strategy's info, its Redis and broker (if it uses them) and the levels it runs at.
type Cell<'a> = (StrategyInfo, (Option<&'a RedisServer>, Option<&'a AmqpServer>), Vec<Isolation>);

/// Every URL in the plan (a value a scenario took from `${VAR}`, say) with its password
/// replaced by `***`: the plan is printed into the report.
fn redact_urls(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::String(s) if s.contains("://") && !s.contains(char::is_whitespace) => {
            *s = counterlab_strategies::redact_url(s);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(redact_urls),
        serde_json::Value::Object(o) => o.values_mut().for_each(redact_urls),
        _ => {}
    }
}

/// The report of the whole run.
fn assemble(
    plan: &RunPlan,
    opts: &RunOptions,
    run_id: String,
    started: String,
    servers: &Servers,
    rows: Rows,
) -> Result<Report, BackendError> {
    let all_held = rows.reports.iter().all(|r| r.check.matches_guarantee);
    let breached = rows.reports.iter().flat_map(|r| &r.thresholds).filter(|t| !t.passed).count() as u64;
    let unmet = rows.reports.iter().flat_map(|r| &r.expectations).filter(|e| e.judged && !e.met).count() as u64;
    let not_judged = not_judged(plan, &rows.reports);
    let mut plan_json = serde_json::to_value(plan)
        .map_err(|e| BackendError::Refused(format!("the plan cannot be written into the report: {e}")))?;
    redact_urls(&mut plan_json);
    Ok(Report {
        report_schema_version: REPORT_SCHEMA_VERSION,
        counterlab_version: env!("CARGO_PKG_VERSION").to_string(),
        git_commit: COMMIT.to_string(),
        scenario: plan.scenario.clone(),
        scenario_path: plan.scenario_path.clone(),
        seed: plan.seed,
        run_id,
        started_at_utc: started,
        plan: plan_json,
        servers: servers.infos(),
        strategies: rows.reports,
        skipped: rows.skipped,
        all_guarantees_held: all_held,
        thresholds_breached: breached,
        expectations_unmet: unmet,
        expectations_not_judged: not_judged,
        interrupted: opts.cancel.load(Ordering::Relaxed),
        replay_command: replay_command(plan) + &server_flags(opts),
        trusted_strategy_files: opts.trust_strategy_files,
        side_files: rows.side_files,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls_in_the_printed_plan_lose_their_passwords() {
        let mut plan = serde_json::json!({
            "scenario": "postgres://bob:hunter2@db/x",
            "custom": {"a": ["redis://:s3cret@h:6379", "select 1 -- not a URL: a@b:c"]},
            "n": 3,
        });
        super::redact_urls(&mut plan);
        let shown = plan.to_string();
        assert!(!shown.contains("hunter2") && !shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("postgres://bob:***@db/x") && shown.contains("redis://:***@h:6379"), "{shown}");
        assert!(shown.contains("select 1 -- not a URL: a@b:c"), "text with spaces is left alone: {shown}");
    }
}
