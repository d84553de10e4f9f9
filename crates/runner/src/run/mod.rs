//! Executes a resolved plan: resolve the backends, then for each backend x strategy x
//! isolation level a fresh namespace, bulk seed, the load, the ground-truth check, and
//! teardown (or `--keep`), assembled into one `Report`.

mod config;
mod names;
mod one;
mod post;
mod replay;
pub(crate) mod servers;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use counterlab_core::StrategyInfo;
use counterlab_plan::RunPlan;
use counterlab_report::{REPORT_SCHEMA_VERSION, Report, Skipped, StrategyReport};
use counterlab_sim::DriverConfig;
use counterlab_strategies::{AmqpServer, BackendError, Dialect, Isolation, RedisServer, Registry, SeedSpec, Server};

use crate::clock;
pub use names::{namespace_name, new_run_id};
pub use post::{POST_LOAD_ATTEMPTS, POST_LOAD_BACKOFF, SETTLED_READS};
pub use replay::{replay_command, server_flags};
use servers::{Servers, uses_amqp, uses_redis};

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
    pub connect_timeout: Duration,
    /// Set by Ctrl-C: the load stops, the run in flight is still checked and torn down,
    /// later runs do not start, and the report says `interrupted`.
    pub cancel: Arc<AtomicBool>,
    /// Receives a live status line about once a second while a strategy runs.
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

/// A sink for the live status line.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

/// Calls recorded per strategy run (about 64 bytes each); beyond it the read check is
/// skipped and the report says how many calls were left out.
pub const HISTORY_LIMIT: u64 = 4_000_000;

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
    let cfg = config::driver_config(plan, opts.cancel.clone());
    let mut rows = Rows::default();
    let result = run_cells(plan, opts, &cfg, &servers, &run_id, &mut rows, log).await;
    if opts.keep {
        servers.keep_temp_dir();
    }
    result?;
    assemble(plan, opts, run_id, started, &servers, rows)
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
    for server in &servers.sql {
        for name in &plan.strategies {
            let Some((info, (redis, amqp), levels)) = cells_of(plan, opts, server, servers, name, &mut rows.skipped)?
            else {
                continue;
            };
            for isolation in levels {
                if opts.cancel.load(Ordering::Relaxed) {
                    let b = server.dialect().name();
                    log(&format!("interrupted: {name} on {b} at {} not run", isolation.name()));
                    continue;
                }
                let seed = plan.data.seed_spec();
                let target = Target { server, redis, amqp, run_id, name, info, isolation, seed };
                let (report, files) = one::run_one(plan, opts, cfg, target, log).await?;
                rows.reports.push(report);
                rows.side_files.extend(files);
            }
        }
    }
    Ok(())
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
    let mut skip = |backend: String, levels: &[Isolation], reason: &str| {
        skipped.extend(levels.iter().map(|l| Skipped {
            strategy: name.to_string(),
            backend: backend.clone(),
            isolation: l.name().into(),
            reason: reason.to_string(),
        }))
    };
    let sql = server.dialect().name();
    let custom = plan.custom.get(name);
    let info = match custom {
        Some(spec) => spec.info(),
        None => match opts.registry.find(name) {
            Some(row) => row.info,
            None => return Err(BackendError::Refused(format!("strategy {name} is not in this run's registry"))),
        },
    };
    let redis = match (uses_redis(plan, opts, name), &servers.redis) {
        (false, _) => None,
        (true, Ok(r)) => Some(r),
        (true, Err(why)) => {
            skip(format!("{sql}+redis"), &levels, why);
            return Ok(None);
        }
    };
    let amqp = match (uses_amqp(plan, opts, name), &servers.amqp) {
        (false, _) => None,
        (true, Ok(r)) => Some(r),
        (true, Err(why)) => {
            skip(format!("{sql}+rabbitmq"), &levels, why);
            return Ok(None);
        }
    };
    if let Some(spec) = custom.filter(|c| !c.dialects().contains(&server.dialect())) {
        skip(sql.into(), &levels, &format!("{} has no {sql} statements", spec.name));
        return Ok(None);
    }
    if server.dialect() != Dialect::Sqlite {
        return Ok(Some((info, (redis, amqp), levels)));
    }
    let unsupported: Vec<Isolation> = levels.iter().copied().filter(|l| !server.supports(*l)).collect();
    skip(
        "sqlite".into(),
        &unsupported,
        "SQLite transactions are always serializable; run once at serializable instead",
    );
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
            let dialect = Dialect::from_name(r.backend.split('+').next().unwrap_or_default());
            let level = Isolation::from_name(&r.isolation);
            let (Some(dialect), Some(level)) = (dialect, level) else { continue };
            if !e.applies_to(&r.strategy, dialect, level) {
                continue;
            }
            applied = true;
            if !r.expectations.iter().any(|x| x.expected == d && x.judged) {
                out.push(format!("{d} ({} on {} at {}: {})", r.strategy, r.backend, r.isolation, r.check.verdict));
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
    let plan_json = serde_json::to_value(plan)
        .map_err(|e| BackendError::Refused(format!("the plan cannot be written into the report: {e}")))?;
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
