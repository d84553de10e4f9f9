//! The distributed phases (issue 20): `prepare` makes and seeds every cell's namespace
//! and writes the run handle; `load` is one agent (`--segment K/N`) driving its share of
//! every cell and writing its outputs; `check` merges the agents' outputs and checks
//! each cell once; `teardown` drops the namespaces. They are the one-process run's own
//! phases (`one.rs`: seed, build, drive, check, row, cleanup) split across processes.

pub mod agent;
pub mod handle;
pub mod merge;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use counterlab_core::ReadFrom;
use counterlab_plan::RunPlan;
use counterlab_report::Report;
use counterlab_sim::{LoadResult, Segment, Series};
use counterlab_strategies::{BackendError, Dialect, Isolation, Marker, Namespace};

use self::agent::{CellPartial, Clock, OpCounts, Partial, StagePartial};
use self::handle::{Handle, HandleCell, Source};
use super::one::{self, Cell, Loaded, Made, RowContext};
use super::servers::Servers;
use super::{Rows, RunOptions, Target, config};
use crate::clock;
use crate::spill::History;

/// A phase's failure: one line saying what and where.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PhaseError(pub String);

impl From<String> for PhaseError {
    fn from(s: String) -> PhaseError {
        PhaseError(s)
    }
}

impl From<BackendError> for PhaseError {
    fn from(e: BackendError) -> PhaseError {
        PhaseError(e.to_string())
    }
}

type Log<'a> = &'a mut dyn FnMut(&str);

/// What a distributed run cannot split yet: refused before anything is made.
fn refuse_unsplittable(plan: &RunPlan) -> Result<(), PhaseError> {
    let why = if plan.repeat_max != 1 {
        Some("repeat or repeat_until_settled > 1")
    } else if plan.replica.read_from.iter().any(|r| *r != ReadFrom::Primary) {
        Some("replica reads")
    } else if !plan.faults.is_empty() {
        Some("scheduled faults (each agent would fire its own)")
    } else {
        None
    };
    match why {
        Some(w) => Err(PhaseError(format!("a distributed run does not support {w} yet: use `counterlab run`"))),
        None => Ok(()),
    }
}

/// One cell's target from the handle, on the connected servers.
fn target<'a>(
    plan: &'a RunPlan,
    opts: &RunOptions,
    servers: &'a Servers,
    h: &'a Handle,
    c: &'a HandleCell,
    index: (usize, usize),
) -> Result<Target<'a>, PhaseError> {
    let dialect =
        Dialect::from_name(&c.backend).ok_or_else(|| PhaseError(format!("unknown backend {:?}", c.backend)))?;
    let server = servers.sql.iter().find(|s| s.dialect() == dialect).ok_or_else(|| {
        PhaseError(format!("cell {} runs on {}, which this plan's servers do not include", c.namespace, c.backend))
    })?;
    let redis = match (c.redis, &servers.redis) {
        (false, _) => None,
        (true, Ok(r)) => Some(r),
        (true, Err(why)) => return Err(PhaseError(format!("cell {} needs Redis: {why}", c.namespace))),
    };
    let isolation =
        Isolation::from_name(&c.isolation).ok_or_else(|| PhaseError(format!("unknown level {:?}", c.isolation)))?;
    let info = super::servers::recipe(plan, opts, &c.strategy)
        .map_err(|_| PhaseError(format!("strategy {} is not in this counterlab's registry", c.strategy)))?
        .info();
    Ok(Target {
        server,
        redis,
        amqp: None,
        run_id: &h.run_id,
        name: &c.strategy,
        info,
        isolation,
        seed: plan.data.seed_spec(),
        repeat: 0,
        index,
        read_from: ReadFrom::Primary,
    })
}

/// The cell of `t`, logging in with the run secret's password; its namespace must be
/// the handle's.
fn cell<'a>(
    plan: &'a RunPlan,
    opts: &'a RunOptions,
    t: Target<'a>,
    hc: &HandleCell,
    pw: &str,
    attach: bool,
) -> Result<Cell<'a>, PhaseError> {
    let mut cell = Cell::new(plan, opts, t);
    if cell.ns_name != hc.namespace {
        return Err(PhaseError(format!("the handle names {}, its plan gives {}", hc.namespace, cell.ns_name)));
    }
    cell.redis_login = Some((pw.to_string(), attach));
    Ok(cell)
}

/// Connects the servers for `plan`; no broker (refused at prepare).
async fn connect(plan: &RunPlan, opts: &RunOptions, run_id: &str, log: Log<'_>) -> Result<Servers, PhaseError> {
    let servers = Servers::connect(plan, opts, run_id, log).await?;
    if servers.sql.iter().any(|s| s.dialect() == Dialect::Sqlite) {
        return Err(PhaseError(
            "a distributed run needs a database every agent reaches (PostgreSQL, MySQL), not SQLite files".into(),
        ));
    }
    Ok(servers)
}

/// `counterlab prepare`: every cell's namespace made (with its identity, whose password
/// comes from `secret`) and seeded; the handle returned for the caller to write. On a
/// failure the cells made so far are dropped again.
pub async fn prepare(
    plan: &RunPlan,
    source: Source,
    opts: &RunOptions,
    secret: &str,
    log: Log<'_>,
) -> Result<Handle, PhaseError> {
    refuse_unsplittable(plan)?;
    let run_id = super::new_run_id();
    let servers = connect(plan, opts, &run_id, log).await?;
    let mut printed = serde_json::to_value(plan).map_err(|e| PhaseError(format!("the plan cannot be printed: {e}")))?;
    super::redact_urls(&mut printed);
    let mut h = Handle {
        format: handle::HANDLE_FORMAT.into(),
        run_id: run_id.clone(),
        prepared_at_utc: clock::iso8601(clock::now_unix().0),
        seed: plan.seed,
        scenario: source,
        plan: printed,
        cells: Vec::new(),
    };
    let cells = plan_cells(plan, opts, &servers, &run_id, log)?;
    for c in cells {
        h.cells.push(c.clone());
        if let Err(e) = prepare_cell(plan, opts, &servers, &h, &c, secret, log).await {
            h.cells.pop();
            log(&format!("prepare failed at {}: {e}; dropping what was made", c.namespace));
            teardown_cells(plan, opts, &servers, &h, secret, log).await.ok();
            return Err(e);
        }
    }
    Ok(h)
}

/// The plan's cells on these servers (each strategy x level; skipped ones are logged).
fn plan_cells(
    plan: &RunPlan,
    opts: &RunOptions,
    servers: &Servers,
    run_id: &str,
    log: Log<'_>,
) -> Result<Vec<HandleCell>, PhaseError> {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for server in &servers.sql {
        for name in &plan.strategies {
            let Some((_, (redis, amqp), levels)) = super::cells_of(plan, opts, server, servers, name, &mut skipped)?
            else {
                continue;
            };
            if amqp.is_some() {
                return Err(PhaseError(format!("{name} uses the broker: a distributed run does not split it yet")));
            }
            for level in levels {
                let ns = super::names::scoped_namespace(run_id, server.dialect(), level, name);
                out.push(HandleCell {
                    strategy: name.clone(),
                    backend: server.dialect().name().into(),
                    isolation: level.name().into(),
                    namespace: ns,
                    redis: redis.is_some(),
                });
            }
        }
    }
    for s in skipped {
        log(&format!("skipped: {} on {} at {}: {}", s.strategy, s.backend, s.isolation, s.reason));
    }
    if out.is_empty() {
        return Err(PhaseError("the plan has no cell to run on these servers".into()));
    }
    Ok(out)
}

async fn prepare_cell(
    plan: &RunPlan,
    opts: &RunOptions,
    servers: &Servers,
    h: &Handle,
    hc: &HandleCell,
    secret: &str,
    log: Log<'_>,
) -> Result<(), PhaseError> {
    let pw = handle::password(secret, &hc.namespace);
    let t = target(plan, opts, servers, h, hc, (h.cells.len(), h.cells.len()))?;
    let cell = cell(plan, opts, t, hc, &pw, false)?;
    let started = Instant::now();
    let ns = cell.t.server.create_namespace_with(&cell.ns_name, cell.pool_spec(), Some(&pw)).await?;
    if let Err(e) = one::refuse_unconfined(&cell, &ns) {
        ns.drop_namespace().await.ok();
        return Err(e.into());
    }
    let mut made = Made::default();
    let bound = cell.bounds().setup;
    let seeded = match tokio::time::timeout(bound, one::seed(&cell, &ns, &mut made)).await {
        Ok(seeded) => seeded.map_err(|e| e.to_string()),
        Err(_) => Err(super::deadline::over("setup", bound)),
    };
    if let (Ok(_), Some(space)) = (&seeded, &made.space) {
        // The keys expire (KEY_TTL) unless the run is torn down first.
        space.keep_alive().await.map_err(|e| PhaseError(format!("{}: {e}", cell.label())))?;
        space.stop_refresher();
    }
    if let Err(e) = seeded {
        let failed = one::cleanup(&cell, ns, made, log).await;
        return Err(PhaseError(format!("{}: {e}{}", cell.label(), cleanup_note(&failed))));
    }
    one::settle_after_seed(&cell, &ns, log).await;
    log(&format!(
        "{}: prepared {} as {} in {:.2}s",
        cell.label(),
        cell.ns_name,
        ns.identity().describe(),
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

fn cleanup_note(failed: &[String]) -> String {
    match failed.is_empty() {
        true => String::new(),
        false => format!(" (and cleanup failed: {})", failed.join("; ")),
    }
}

/// What one agent did: the partial report it wrote.
pub struct AgentRun {
    pub dir: std::path::PathBuf,
    pub partial: Partial,
}

/// `counterlab load --segment K/N`: this agent's share of every cell, outputs written
/// into `<out>/agent-K-of-N/`.
pub async fn load(
    h: &Handle,
    plan: &RunPlan,
    seg: Segment,
    out: &Path,
    opts: &RunOptions,
    secret: &str,
    log: Log<'_>,
) -> Result<AgentRun, PhaseError> {
    let dir = fresh_agent_dir(out, seg)?;
    let skew = agent::test_skew_us()?;
    let servers = connect(plan, opts, &h.run_id, log).await?;
    let cfg = config::driver_config(plan, opts.cancel.clone(), opts.history_limit);
    let cfg = agent::segment_config(cfg, seg, plan.data.seed_spec().n_users)?;
    let mut cells = Vec::new();
    let mut clock_start = None;
    let mut last_ns = None;
    for (i, hc) in h.cells.iter().enumerate() {
        if opts.cancel.load(Ordering::Relaxed) {
            return Err(PhaseError("interrupted: this agent's output is incomplete".into()));
        }
        let pw = handle::password(secret, &hc.namespace);
        let t = target(plan, opts, &servers, h, hc, (i + 1, h.cells.len()))?;
        let cell = cell(plan, opts, t, hc, &pw, true)?;
        let ns = cell.t.server.attach_namespace(&cell.ns_name, segment_pool(&cell, plan, seg)?, &pw, false)?;
        let login = |e: String| {
            PhaseError(format!("{}: {e} (is {} the one prepare had?)", cell.ns_name, handle::RUN_SECRET_ENV))
        };
        if clock_start.is_none() {
            clock_start = Some(agent::clock_sample(&ns, skew).await.map_err(login)?);
        }
        let c = load_cell(&cell, &ns, &cfg, seg, skew, &dir, log).await?;
        cells.push(c);
        last_ns = Some(ns);
    }
    let ns = last_ns.expect("a handle has cells");
    let end = agent::clock_sample(&ns, skew).await?;
    ns.drop_namespace().await.ok();
    let clock = Clock::of(clock_start.expect("sampled at the first cell"), end);
    let partial = Partial {
        format: agent::AGENT_FORMAT.into(),
        run_id: h.run_id.clone(),
        k: seg.k,
        n: seg.n,
        host: Marker::now().host,
        clock,
        cells,
    };
    write_partial(&dir, &partial)?;
    Ok(AgentRun { dir, partial })
}

/// This agent's output folder, made; an error when an earlier agent's output is there.
fn fresh_agent_dir(out: &Path, seg: Segment) -> Result<std::path::PathBuf, PhaseError> {
    let dir = agent::agent_dir(out, seg.k, seg.n);
    if dir.join("partial.json").exists() {
        return Err(PhaseError(format!(
            "{} already holds an agent's output: give each run its own --out",
            dir.display()
        )));
    }
    std::fs::create_dir_all(&dir).map_err(|e| PhaseError(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

/// The cell's pool as this segment's share: the agents share the role's connection
/// limit (the plan's pool plus 2).
fn segment_pool(cell: &Cell<'_>, plan: &RunPlan, seg: Segment) -> Result<counterlab_strategies::PoolSpec, PhaseError> {
    let mut spec = cell.pool_spec();
    spec.max_connections = seg.share(u64::from(spec.max_connections)) as u32;
    if spec.max_connections == 0 {
        return Err(PhaseError(format!(
            "segment {}/{} gets none of the plan's {} connections: give at least {} (workload.connections)",
            seg.k, seg.n, plan.workload.connections, seg.n
        )));
    }
    Ok(spec)
}

/// partial.json last, and whole: its presence tells `check` the agent is done.
fn write_partial(dir: &Path, partial: &Partial) -> Result<(), PhaseError> {
    let tmp = dir.join("partial.json.tmp");
    let text = serde_json::to_string_pretty(partial).expect("a partial report serializes");
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, dir.join("partial.json")))
        .map_err(|e| PhaseError(format!("cannot write {}: {e}", dir.join("partial.json").display())))
}

/// Drives one cell's share and writes its history and HDR log.
async fn load_cell(
    cell: &Cell<'_>,
    ns: &Namespace,
    cfg: &counterlab_sim::DriverConfig,
    seg: Segment,
    skew: i64,
    dir: &Path,
    log: Log<'_>,
) -> Result<CellPartial, PhaseError> {
    let mut made = Made::default();
    let strategy = one::build(cell, ns, &mut made).await?;
    one::refuse_unbatched_ops(cell, strategy.as_ref())?;
    let t0_local_us = agent::local_us(skew);
    let t0 = SystemTime::now();
    let (l, history) = one::drive(cell, ns, strategy, cfg, None, log).await;
    let mut history = history.map_err(|e| PhaseError(format!("{}: the history: {e}", cell.label())))?;
    let sub = dir.join(&cell.short);
    std::fs::create_dir_all(&sub).map_err(|e| PhaseError(format!("cannot create {}: {e}", sub.display())))?;
    let write = |name: &str, text: &[u8]| {
        std::fs::write(sub.join(name), text)
            .map_err(|e| PhaseError(format!("cannot write {}: {e}", sub.join(name).display())))
    };
    write_history_file(&sub.join("history.jsonl"), &mut history)?;
    write("latency.hlog", agent::hdr_log(&l.load, t0, &cell.label()).as_bytes())?;
    let n_users = cell.t.seed.n_users;
    let workers = cfg.stages.iter().find(|s| s.measured).map_or(0, |s| u64::from(s.model.workers()));
    log(&format!(
        "{}: segment {}/{}: {} ops at {:.0} ops/s over {} users",
        cell.label(),
        seg.k,
        seg.n,
        l.load.total_ops(),
        l.load.throughput_ops_per_s(),
        seg.users(n_users)
    ));
    Ok(CellPartial {
        namespace: cell.ns_name.clone(),
        dir: cell.short.clone(),
        t0_local_us,
        users: seg.users(n_users),
        workers,
        ops_total: l.load.total_ops(),
        throughput_ops_per_s: l.load.throughput_ops_per_s(),
        stages: stages(&l.load),
        error_samples: l.load.error_samples.clone(),
        history_events: history.len(),
        history_dropped: l.load.history_dropped,
        settle_s: l.settle_s,
        settle_error: l.settle_error.clone(),
        figures: l.strategy.figures().into_iter().map(|(n, v)| (n.name().to_string(), v)).collect(),
    })
}

/// Writes an agent's history (JSON Lines) to `path` without holding it as text.
fn write_history_file(path: &Path, history: &mut History) -> Result<(), PhaseError> {
    let fail = |e: String| PhaseError(format!("cannot write {}: {e}", path.display()));
    let f = std::fs::File::create(path).map_err(|e| fail(e.to_string()))?;
    let mut w = std::io::BufWriter::new(f);
    history.write_jsonl(&mut w).map_err(fail)?;
    std::io::Write::flush(&mut w).map_err(|e| fail(e.to_string()))
}

fn stages(load: &LoadResult) -> Vec<StagePartial> {
    load.stages
        .iter()
        .map(|s| StagePartial {
            elapsed_s: s.elapsed.as_secs_f64(),
            started: s.started,
            scheduled: s.scheduled,
            dropped: s.dropped,
            late: s.late,
            ops: s.ops.iter().map(OpCounts::of).collect(),
        })
        .collect()
}

/// `counterlab check`: waits (up to `wait`) for all agents' outputs in `from`, merges
/// them per cell and checks each cell once; the one report.
pub async fn check(
    h: &Handle,
    plan: &RunPlan,
    from: &Path,
    wait: Duration,
    opts: &RunOptions,
    secret: &str,
    log: Log<'_>,
) -> Result<Report, PhaseError> {
    let agents = merge::collect(from, &h.run_id, wait)?;
    log(&format!("{} agent(s) found in {}", agents.len(), from.display()));
    let servers = connect(plan, opts, &h.run_id, log).await?;
    let cfg = config::driver_config(plan, opts.cancel.clone(), opts.history_limit);
    let mut rows = Rows::default();
    for (i, hc) in h.cells.iter().enumerate() {
        let pw = handle::password(secret, &hc.namespace);
        let t = target(plan, opts, &servers, h, hc, (i + 1, h.cells.len()))?;
        let cell = cell(plan, opts, t, hc, &pw, true)?;
        let merged = merge::merge_cell(&agents, &hc.namespace, &cfg.stages)?;
        let (report, files) = check_cell(&cell, merged, log).await?;
        rows.reports.push(report);
        rows.side_files.extend(files);
    }
    let started = h.prepared_at_utc.clone();
    Ok(super::assemble(plan, opts, h.run_id.clone(), started, &servers, rows)?)
}

async fn check_cell(cell: &Cell<'_>, m: merge::MergedCell, log: Log<'_>) -> Result<one::Row, PhaseError> {
    let ns = cell.t.server.attach_namespace(
        &cell.ns_name,
        cell.pool_spec(),
        &cell.redis_login.as_ref().expect("set").0,
        false,
    )?;
    let mut made = Made::default();
    let strategy = one::build(cell, &ns, &mut made).await?;
    let in_effect = ns.isolation_in_effect().await?;
    let identity = ns.identity().describe();
    let series = Series { samples: Vec::new(), hdr_log: String::new(), drift_note: None };
    let (load, mut history) = (m.load, m.history);
    let loaded = Loaded {
        strategy,
        load,
        faults: Vec::new(),
        settle_s: m.settle_s,
        settle_error: m.settle_error,
        series,
        failover_us: None,
        figures: Some(m.figures),
        cost: None,
    };
    let totals = agent::totals_log(&loaded.load, &cell.label());
    let found = one::check(cell, &ns, &loaded, &mut history, log).await;
    let mut row = match found {
        Ok(found) => {
            let cx = RowContext { identity, in_effect, seed_s: 0.0, settled: None, history_file: None };
            one::row(cell, loaded, found, cx, log)
        }
        Err(why) => one::incomplete_row(cell, &loaded.load, loaded.faults, &why, 0.0, log),
    };
    row.0.agents = Some(m.agents);
    let name = format!("hdr/{}.hlog", cell.short);
    row.0.hdr_log = Some(name.clone());
    row.1 = vec![(name, totals)];
    ns.drop_namespace().await.ok();
    Ok(row)
}

/// `counterlab teardown`: drops every cell's namespace, identity and Redis keys.
pub async fn teardown(
    h: &Handle,
    plan: &RunPlan,
    opts: &RunOptions,
    secret: &str,
    log: Log<'_>,
) -> Result<(), PhaseError> {
    let servers = connect(plan, opts, &h.run_id, log).await?;
    teardown_cells(plan, opts, &servers, h, secret, log).await
}

/// What of a cell is still there: on its SQL server (what, or None) and on Redis.
async fn left_of(cell: &Cell<'_>) -> Result<(Option<&'static str>, bool), PhaseError> {
    let sql = cell.t.server.namespace_left(&cell.ns_name).await?;
    let redis = match cell.t.redis {
        Some(r) => r.space_left(&cell.ns_name).await?,
        None => false,
    };
    Ok((sql, redis))
}

async fn teardown_cells(
    plan: &RunPlan,
    opts: &RunOptions,
    servers: &Servers,
    h: &Handle,
    secret: &str,
    log: Log<'_>,
) -> Result<(), PhaseError> {
    let mut failed = Vec::new();
    for (i, hc) in h.cells.iter().enumerate() {
        let pw = handle::password(secret, &hc.namespace);
        let t = target(plan, opts, servers, h, hc, (i + 1, h.cells.len()))?;
        let cell = cell(plan, opts, t, hc, &pw, true)?;
        let (sql_left, redis_left) = left_of(&cell).await?;
        if sql_left.is_none() && !redis_left {
            log(&format!("{}: nothing left to remove: {} already gone", cell.label(), cell.ns_name));
            continue;
        }
        // Only what is there is dropped (a role already gone cannot be dropped again).
        let ns = cell.t.server.attach_namespace(&cell.ns_name, cell.pool_spec(), &pw, sql_left.is_some())?;
        let mut made = Made::default();
        if let Some(r) = cell.t.redis.filter(|_| redis_left) {
            let login = counterlab_strategies::SpaceLogin { password: &pw, attach: true };
            match r.space_with(&cell.ns_name, cell.op_timeout(), 1, Some(login)).await {
                Ok(space) => made.space = Some(space),
                Err(e) => failed.push(format!("{}: Redis: {e}", cell.ns_name)),
            }
        }
        let f = one::cleanup(&cell, ns, made, log).await;
        match f.is_empty() {
            true => log(&format!("{}: dropped {}", cell.label(), cell.ns_name)),
            false => failed.extend(f.into_iter().map(|e| format!("{}: {e}", cell.ns_name))),
        }
    }
    match failed.is_empty() {
        true => Ok(()),
        false => Err(PhaseError(format!(
            "teardown left some behind: {} (`counterlab clean --yes` removes them)",
            failed.join("; ")
        ))),
    }
}
