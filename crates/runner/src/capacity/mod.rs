//! `counterlab capacity`: for each design of a scenario (strategy x backend x isolation
//! level x read source) the highest open-loop arrival rate that holds an SLO, found by
//! `search.rs`'s bounded ramp and bisection and then verified at 0.8x and 1.25x. Each
//! probe is a short open-loop run of that design alone (`run::run_plan`: a fresh
//! namespace, seeded, loaded, checked and torn down like any run), so every probe is
//! also checked for correctness. Writes no files: the binary does.

mod render;
mod search;

use std::sync::atomic::Ordering;
use std::time::Instant;

use counterlab_plan::{Backend, RunPlan, StageEnd, StageLoad, StagePlan};
use counterlab_report::{Report, StrategyReport};
use counterlab_strategies::{BackendError, Isolation};
use serde::Serialize;

use crate::clock;
use crate::run::{RunOptions, run_plan};
pub use render::{html, markdown, summary, terminal};
pub use search::{
    Inversion, Measured, Phase, Probe, Search, SearchConfig, Slo, Step, VERIFY_ABOVE, VERIFY_BELOW, combine, fmt_rate,
    inversions, judge,
};

/// capacity.json's format version.
pub const CAPACITY_SCHEMA_VERSION: u32 = 1;
/// The name of a probe's measured stage.
pub const PROBE_STAGE: &str = "probe";

/// The SLO, the search's moves and bounds, and each probe's length.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CapacityConfig {
    pub slo: Slo,
    pub search: SearchConfig,
    /// Each probe's warm-up at its rate (not measured; 0: none) and measured stage, s.
    pub warmup_s: f64,
    pub probe_s: f64,
    /// Runs per probe, each on a fresh namespace: a rate holds when more than half of
    /// them held (`search::combine`).
    pub repeats: u32,
    /// One design's search stops after this many seconds (its verification's two probes
    /// still run).
    pub max_time_s: f64,
}

/// The verification: the SLO must hold at 0.8x the knee and fail at 1.25x.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verification {
    pub below_ops_per_s: f64,
    /// None: not run (interrupted).
    pub below_held: Option<bool>,
    pub above_ops_per_s: f64,
    /// None: not run (above `--max-rate`, or interrupted).
    pub above_held: Option<bool>,
    /// 0.8x held and 1.25x failed.
    pub held: bool,
}

/// One design's search.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Design {
    pub strategy: String,
    pub backend: String,
    pub isolation: String,
    pub read_from: String,
    /// The highest rate that held the SLO in the search (None: none held, or skipped).
    pub knee_ops_per_s: Option<f64>,
    /// Every probe in the order run, the verification's last.
    pub probes: Vec<Probe>,
    /// None when no rate held (nothing to verify) or the design was skipped.
    pub verification: Option<Verification>,
    /// No probe failed below a rate that held (the verification's included).
    pub monotone: bool,
    pub inversions: Vec<Inversion>,
    /// Why the search stopped before its bracket reached the resolution, if it did.
    pub stopped_early: Option<String>,
    /// Why the design was not searched (no Redis answering, say).
    pub skipped: Option<String>,
    /// Seconds its own probes took, verification included (the designs' probes
    /// interleave: the search's wall time is the sum over the designs).
    pub elapsed_s: f64,
}

impl Design {
    /// A design counts as held when skipped (said apart) or when its verification held.
    pub fn held(&self) -> bool {
        self.skipped.is_some() || self.verification.as_ref().is_some_and(|v| v.held)
    }
}

/// The load every probe shares, from the scenario.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeLoad {
    /// The most ops in flight at once (the scenario's workers).
    pub workers: u32,
    pub arrival: String,
    pub max_wait_ms: u64,
    pub users: u64,
    pub notifications_per_user: u64,
}

/// The whole search: capacity.json.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Capacity {
    pub version: u32,
    pub scenario: String,
    pub scenario_path: String,
    pub seed: u64,
    pub started_at_utc: String,
    pub config: CapacityConfig,
    pub load: ProbeLoad,
    /// The machine's 1-minute load average before the first probe and after the last.
    pub load_1m_before: Option<f64>,
    pub load_1m_after: Option<f64>,
    /// Faults the scenario schedules are left out of every probe (how many there were).
    pub faults_left_out: usize,
    pub designs: Vec<Design>,
    /// Ctrl-C or SIGTERM stopped the search: the designs list what finished.
    pub interrupted: bool,
}

/// Searches every design of `plan`, their probes interleaved. `log` gets a line per
/// probe and each design's result; `detail` each probe run's own log.
pub async fn capacity_plan(
    plan: &RunPlan,
    opts: &RunOptions,
    cfg: &CapacityConfig,
    log: &mut dyn FnMut(&str),
    detail: &mut dyn FnMut(&str),
) -> Result<Capacity, BackendError> {
    let started_at_utc = clock::iso8601(clock::now_unix().0);
    let load_1m_before = load_1m();
    let mut live: Vec<Live> = designs_of(plan)
        .into_iter()
        .map(|one| Live { d: design_of_plan(&one), search: Search::new(cfg.search), one, done: false })
        .collect();
    // Interleaved, one probe of each design per round (A B C A B C): a slow spell of the
    // machine falls on every design alike. Each round records a probe of every live
    // design or ends it, and a design records at most `max_probes` + 2: the bound.
    for _round in 0..cfg.search.max_probes + 3 {
        for i in 0..live.len() {
            if live[i].done || opts.cancel.load(Ordering::Relaxed) {
                continue;
            }
            let (before, rest) = live.split_at_mut(i);
            let earlier: Vec<&Design> = before.iter().map(|l| &l.d).collect();
            step(&mut rest[0], &earlier, opts, cfg, log, detail).await?;
        }
    }
    for l in live.iter_mut().filter(|l| !l.done) {
        finish(&mut l.d, &l.search, &cfg.slo);
    }
    let designs: Vec<Design> = live.into_iter().map(|l| l.d).collect();
    let w = &plan.workload;
    Ok(Capacity {
        version: CAPACITY_SCHEMA_VERSION,
        scenario: plan.scenario.clone(),
        scenario_path: plan.scenario_path.clone(),
        seed: plan.seed,
        started_at_utc,
        config: *cfg,
        load: ProbeLoad {
            workers: w.n_workers,
            arrival: w.arrival.name().to_string(),
            max_wait_ms: w.max_wait_ms,
            users: plan.data.n_users,
            notifications_per_user: plan.data.notifications_per_user,
        },
        load_1m_before,
        load_1m_after: load_1m(),
        faults_left_out: plan.faults.len(),
        designs,
        interrupted: opts.cancel.load(Ordering::Relaxed),
    })
}

/// One plan per design, each naming one strategy, backend, level and read source, in
/// run order (backends, then strategies, then levels). SQLite runs at serializable only.
fn designs_of(plan: &RunPlan) -> Vec<RunPlan> {
    let mut out = Vec::new();
    for &backend in &plan.backends {
        for name in &plan.strategies {
            let levels = match backend {
                Backend::Sqlite => vec![Isolation::Serializable],
                _ => plan.isolation_for(name).to_vec(),
            };
            for (level, read_from) in levels.iter().flat_map(|l| plan.replica.read_from.iter().map(move |r| (*l, *r))) {
                let mut one = plan.clone();
                one.backends = vec![backend];
                one.strategies = vec![name.clone()];
                one.isolation = vec![level];
                one.strategy_isolation.clear();
                one.replica.read_from = vec![read_from];
                out.push(one);
            }
        }
    }
    out
}

/// `one` with its load replaced by a probe at `rate`: a warm-up at the rate (unless
/// `warmup_s` is 0), then the measured stage; once, without faults, thresholds,
/// expectations, exploration or the cost's idle interval (the SLO is the probe's judge,
/// and a probe's cost is not reported).
pub fn probe_plan(one: &RunPlan, rate: f64, cfg: &CapacityConfig) -> RunPlan {
    let mut p = one.clone();
    p.repeat = 1;
    p.repeat_max = 1;
    p.faults.clear();
    p.thresholds.clear();
    p.expect.clear();
    p.explore.with_run = false;
    let load = StageLoad::Open { rate, target: rate };
    let stage = |name: &str, measured: bool, d: f64| StagePlan {
        name: name.to_string(),
        measured,
        end: StageEnd::Duration(d),
        load,
    };
    let w = &mut p.workload;
    (w.rate, w.duration_s, w.ops) = (Some(rate), Some(cfg.probe_s), None);
    w.cost_baseline_ms = 0;
    w.stages = vec![stage(PROBE_STAGE, true, cfg.probe_s)];
    if cfg.warmup_s > 0.0 {
        w.stages.insert(0, stage(counterlab_sim::WARMUP, false, cfg.warmup_s));
    }
    p
}

/// What a design is called before its first probe names its row: the plan's words.
fn design_of_plan(one: &RunPlan) -> Design {
    Design {
        strategy: one.strategies[0].clone(),
        backend: one.backends[0].name().to_string(),
        isolation: one.isolation[0].name().to_string(),
        read_from: one.replica.read_from[0].name().to_string(),
        knee_ops_per_s: None,
        probes: Vec::new(),
        verification: None,
        monotone: true,
        inversions: Vec::new(),
        stopped_early: None,
        skipped: None,
        elapsed_s: 0.0,
    }
}

/// One design's search in progress.
struct Live {
    one: RunPlan,
    d: Design,
    search: Search,
    /// Its search ended (the knee verified, skipped, or interrupted).
    done: bool,
}

/// One probe of `l` (its `repeats` runs), or the end of its search: then its knee,
/// verification and curve shape are set and its headline logged.
async fn step(
    l: &mut Live,
    earlier: &[&Design],
    opts: &RunOptions,
    cfg: &CapacityConfig,
    log: &mut dyn FnMut(&str),
    detail: &mut dyn FnMut(&str),
) -> Result<(), BackendError> {
    if l.d.elapsed_s > cfg.max_time_s {
        l.search.stop(format!("the time bound ({} s of its probes) was reached", cfg.max_time_s));
    }
    let t0 = Instant::now();
    let mut probed = false;
    if let Step::Probe { rate, phase } = l.search.next_step() {
        let load_1m = load_1m();
        if let Some(runs) = runs_at(&l.one, rate, opts, cfg, &mut l.d, earlier, detail).await? {
            let probe = combine(&cfg.slo, rate, phase, runs, load_1m);
            l.search.record(rate, phase, probe.held);
            log(&render::probe_line(&l.d, &probe));
            l.d.probes.push(probe);
            probed = true;
        }
    }
    l.d.elapsed_s += t0.elapsed().as_secs_f64();
    if !probed {
        finish(&mut l.d, &l.search, &cfg.slo);
        l.done = true;
        if !opts.cancel.load(Ordering::Relaxed) {
            log(&render::headline(&l.d));
        }
    }
    Ok(())
}

/// `cfg.repeats` runs of the design at `rate`, each a fresh namespace; None when the
/// search must stop: interrupted, or the design skipped (`d.skipped` says why).
async fn runs_at(
    one: &RunPlan,
    rate: f64,
    opts: &RunOptions,
    cfg: &CapacityConfig,
    d: &mut Design,
    earlier: &[&Design],
    detail: &mut dyn FnMut(&str),
) -> Result<Option<Vec<Measured>>, BackendError> {
    let mut runs = Vec::new();
    for _ in 0..cfg.repeats.max(1) {
        let report = run_plan(&probe_plan(one, rate, cfg), opts, detail).await?;
        if report.interrupted || opts.cancel.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let Some(row) = report.strategies.first() else {
            d.skipped = Some(skip_reason(&report));
            return Ok(None);
        };
        if d.probes.is_empty() && runs.is_empty() && !relabel(d, row, earlier) {
            return Ok(None);
        }
        runs.push(measured(row));
    }
    Ok(Some(runs))
}

/// Names the design by its first row (the backend `auto` resolved to, the level in
/// effect); false, with the design marked skipped, when an earlier design was that row.
fn relabel(d: &mut Design, row: &StrategyReport, earlier: &[&Design]) -> bool {
    d.backend = row.backend.to_string();
    d.isolation = row.isolation.name().to_string();
    d.read_from = row.read_from.name().to_string();
    let same = |e: &&Design| {
        e.skipped.is_none()
            && !e.probes.is_empty()
            && (&e.strategy, &e.backend, &e.isolation, &e.read_from)
                == (&d.strategy, &d.backend, &d.isolation, &d.read_from)
    };
    if earlier.iter().any(same) {
        d.skipped = Some("the same cell as an earlier design (searched once)".into());
        return false;
    }
    true
}

/// Why a probe ran no row: the run's skipped entries.
fn skip_reason(report: &Report) -> String {
    let why: Vec<String> =
        report.skipped.iter().map(|k| format!("{} on {}: {}", k.strategy, k.backend, k.reason)).collect();
    if why.is_empty() { "the probe ran no row".into() } else { why.join("; ") }
}

/// A run's figures from its row's measured stage and verdict.
fn measured(row: &StrategyReport) -> Measured {
    let stage = row.stages.iter().find(|s| s.measured);
    let v = &row.check.verdict;
    Measured {
        achieved_ops_per_s: stage.map_or(0.0, |s| s.achieved_ops_per_s),
        p50_ms: stage.map_or(0.0, |s| s.p50_us as f64 / 1e3),
        p99_ms: stage.map_or(0.0, |s| s.p99_us as f64 / 1e3),
        scheduled: stage.map_or(0, |s| s.scheduled),
        dropped: stage.map_or(0, |s| s.dropped),
        verdict_failed: (v.is_fail() || v.is_incomplete()).then(|| row.check.label()),
    }
}

/// The knee, the verification and the curve's shape from the search's end.
fn finish(d: &mut Design, search: &Search, slo: &Slo) {
    d.knee_ops_per_s = search.knee();
    d.stopped_early = search.stopped_early().map(String::from);
    d.inversions = inversions(&d.probes, slo);
    d.monotone = d.inversions.is_empty();
    let (below, above) = search.verification();
    d.verification = d.knee_ops_per_s.filter(|_| d.skipped.is_none()).map(|k| Verification {
        below_ops_per_s: k * VERIFY_BELOW,
        below_held: below,
        above_ops_per_s: k * VERIFY_ABOVE,
        above_held: above,
        held: below == Some(true) && above == Some(false),
    });
}

/// The 1-minute load average (`/proc/loadavg`), None where unreadable.
pub fn load_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}
