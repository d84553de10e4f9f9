//! Scenario files: the raw TOML shape, validated into a resolved `RunPlan` with every
//! value explicit. Errors point at `file:line:column`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use counterlab_core::OpKind;
use counterlab_strategies::CustomSpec;
use serde::{Deserialize, Serialize};
use toml::Spanned;

/// Bounds checked when a scenario is loaded (every loop and pool has a limit).
pub mod limits {
    pub const MAX_USERS: u64 = 10_000_000;
    pub const MAX_NOTIFICATIONS_PER_USER: u64 = 100_000;
    pub const MAX_SEEDED_ROWS: u64 = 100_000_000;
    pub const MAX_WORKERS: u32 = 1024;
    pub const MAX_DUP_K: u32 = 64;
    pub const MAX_CONNECTIONS: u32 = 1000;
    pub const MAX_DURATION_S: f64 = 86_400.0;
    pub const MAX_OPS: u64 = 1_000_000_000;
    pub const MAX_OP_TIMEOUT_MS: u64 = 60_000;
    pub const MAX_ZIPF_EXPONENT: f64 = 10.0;
    pub const MAX_ATTEMPTS: u32 = 100;
    pub const MAX_BACKOFF_MS: u64 = 10_000;
    pub const MAX_INTERVAL_MS: u64 = 3_600_000;
    pub const MAX_FLUSH_BATCH: u32 = 100_000;
    pub const MAX_FAULTS: usize = 100;
    pub const MAX_FAULT_TIMES: u32 = 10_000;
    pub const MAX_RATE: f64 = 1_000_000.0;
    pub const MAX_STAGES: usize = 100;
    pub const MIN_SAMPLE_INTERVAL_MS: u64 = 100;
}

/// Bad input, located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    pub path: String,
    /// 1-based; None when the error is not about one place in the file (a flag, say).
    pub line_col: Option<(usize, usize)>,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line_col {
            Some((l, c)) => write!(f, "{}:{}:{}: {}", self.path, l, c, self.message),
            None => write!(f, "{}: {}", self.path, self.message),
        }
    }
}

impl std::error::Error for ScenarioError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    seed: Option<u64>,
    strategies: Option<Vec<Spanned<String>>>,
    backends: Option<Vec<Spanned<String>>>,
    isolation: Option<Vec<Spanned<String>>>,
    strategy_isolation: Option<BTreeMap<String, Spanned<Vec<Spanned<String>>>>>,
    retry: Option<Spanned<RawRetry>>,
    expect_drift: Option<Vec<Spanned<String>>>,
    expect_anomaly: Option<Spanned<String>>,
    redis: Option<Spanned<RawRedis>>,
    faults: Option<Vec<Spanned<RawFault>>>,
    thresholds: Option<Vec<Spanned<RawThreshold>>>,
    verdict: Option<Spanned<RawVerdict>>,
    data: RawData,
    workload: Spanned<RawWorkload>,
    strategy: Option<BTreeMap<String, Spanned<crate::custom::RawStrategy>>>,
    strategy_files: Option<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRedis {
    flush_interval_ms: Option<Spanned<u64>>,
    flush_batch: Option<Spanned<u32>>,
    reconcile_interval_ms: Option<Spanned<u64>>,
    settle_timeout_ms: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    kind: Spanned<String>,
    at_ms: Spanned<u64>,
    times: Option<Spanned<u32>>,
    duration_ms: Option<Spanned<u64>>,
    op: Option<Spanned<String>>,
    strategies: Option<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVerdict {
    max_error_rate: Option<Spanned<f64>>,
    min_ops_per_kind: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThreshold {
    metric: Spanned<String>,
    op: Option<Spanned<String>>,
    strategies: Option<Vec<Spanned<String>>>,
    limit: Spanned<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    max_attempts: Option<Spanned<u32>>,
    backoff_base_ms: Option<Spanned<u64>>,
    backoff_max_ms: Option<Spanned<u64>>,
    on_unknown: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawData {
    users: Spanned<u64>,
    notifications_per_user: Spanned<u64>,
    #[serde(default)]
    initial_read_per_user: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    workers: Spanned<u32>,
    duration_s: Option<Spanned<f64>>,
    ops: Option<Spanned<u64>>,
    dup_k: Option<Spanned<u32>>,
    op_timeout_ms: Option<Spanned<u64>>,
    connections: Option<Spanned<u32>>,
    skew: Option<Spanned<String>>,
    zipf_exponent: Option<Spanned<f64>>,
    mix: Spanned<RawMix>,
    rate: Option<Spanned<f64>>,
    warmup_s: Option<Spanned<f64>>,
    arrival: Option<Spanned<String>>,
    max_wait_ms: Option<Spanned<u64>>,
    sample_interval_ms: Option<Spanned<u64>>,
    sample_drift: Option<bool>,
    stages: Option<Spanned<Vec<Spanned<RawStage>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStage {
    name: Option<String>,
    duration_s: Spanned<f64>,
    rate: Option<Spanned<f64>>,
    target: Option<Spanned<f64>>,
    workers: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMix {
    create: Option<u32>,
    mark_read: Option<u32>,
    mark_read_dup: Option<u32>,
    delete: Option<u32>,
    mark_all_read: Option<u32>,
    read_count: Option<u32>,
}

/// The resolved plan. No `Default`: every value is decided here, printed into the
/// report, and enough to replay the run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RunPlan {
    pub scenario: String,
    pub scenario_path: String,
    pub seed: u64,
    pub strategies: Vec<String>,
    /// Backends in run order; `auto` is PostgreSQL when one is configured or answers at
    /// the default address, else embedded SQLite.
    pub backends: Vec<String>,
    /// Isolation levels every strategy runs at, unless `strategy_isolation` names it.
    pub isolation: Vec<String>,
    pub strategy_isolation: BTreeMap<String, Vec<String>>,
    pub retry: RetryPlan,
    /// Strategies whose drift this scenario expects (a fault it schedules breaks them):
    /// judged as if they had no guarantee.
    pub expect_drift: Vec<String>,
    /// For `counterlab zoo`: the anomaly every strategy of this file must show (a
    /// mutant), or `none` (correct strategies must show none).
    pub expect_anomaly: Option<String>,
    pub redis: RedisPlan,
    pub faults: Vec<FaultPlan>,
    /// Limits that fail the run (exit code 1) when breached.
    pub thresholds: Vec<counterlab_report::Threshold>,
    /// What the verdict allows: errors, and the operations that must run (`[verdict]`).
    pub verdict: VerdictPlan,
    pub data: DataPlan,
    pub workload: WorkloadPlan,
    /// Strategies defined in the scenario (or its strategy files), by name.
    pub custom: BTreeMap<String, CustomSpec>,
}

impl RunPlan {
    /// The isolation levels `strategy` runs at.
    pub fn isolation_for(&self, strategy: &str) -> &[String] {
        self.strategy_isolation.get(strategy).unwrap_or(&self.isolation)
    }
}

/// `[verdict]`: the largest share of operations that may fail with a non-conflict error
/// (default 0.001) and the fewest operations of each kind the mix asks for (default 1).
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct VerdictPlan {
    pub max_error_rate: f64,
    pub min_ops_per_kind: u64,
}

impl VerdictPlan {
    pub fn rules(self) -> counterlab_core::VerdictRules {
        counterlab_core::VerdictRules { max_error_rate: self.max_error_rate, min_ops_per_kind: self.min_ops_per_kind }
    }
}

fn verdict_plan(cx: &Ctx<'_>, raw: Option<&Spanned<RawVerdict>>) -> Result<VerdictPlan, ScenarioError> {
    let d = counterlab_core::VerdictRules::default();
    let Some(raw) = raw.map(|r| r.get_ref()) else {
        return Ok(VerdictPlan { max_error_rate: d.max_error_rate, min_ops_per_kind: d.min_ops_per_kind });
    };
    let max_error_rate = match &raw.max_error_rate {
        Some(v) if !(0.0..=1.0).contains(v.get_ref()) => {
            return Err(cx.at(v.span(), "max_error_rate is a share of operations: 0.0 ..= 1.0 (0.001 is 0.1%)"));
        }
        Some(v) => *v.get_ref(),
        None => d.max_error_rate,
    };
    let min_ops_per_kind = match &raw.min_ops_per_kind {
        Some(v) if *v.get_ref() > 1_000_000_000 => return Err(cx.at(v.span(), "min_ops_per_kind is at most 1e9")),
        Some(v) => *v.get_ref(),
        None => d.min_ops_per_kind,
    };
    Ok(VerdictPlan { max_error_rate, min_ops_per_kind })
}

/// Tunables of the Redis strategies.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct RedisPlan {
    pub flush_interval_ms: u64,
    /// Users a flush pass takes at most.
    pub flush_batch: u32,
    /// None: no reconciler.
    pub reconcile_interval_ms: Option<u64>,
    /// Bound on settle: stopping background tasks and draining buffers.
    pub settle_timeout_ms: u64,
}

/// A fault fired `at_ms` after the load starts, `times` times in a row, in the runs of
/// `strategies` (empty: every strategy of the plan).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FaultPlan {
    pub kind: String,
    pub at_ms: u64,
    pub times: u32,
    /// `pause` only: how long every op stalls.
    pub duration_ms: Option<u64>,
    /// `crash_after_commit`, `error_before_commit`: the op kind hit (None: whichever
    /// commits first).
    pub op: Option<String>,
    pub strategies: Vec<String>,
}

impl FaultPlan {
    /// Whether the fault is scheduled in `strategy`'s runs.
    pub fn applies_to(&self, strategy: &str) -> bool {
        self.strategies.is_empty() || self.strategies.iter().any(|s| s == strategy)
    }
}

/// Conflict retries: attempts in all (1 = none) and the exponential backoff bounds.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct RetryPlan {
    pub max_attempts: u32,
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
    /// Also re-run ops whose outcome was unknown (blind retries; they may double-apply).
    pub on_unknown: bool,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct DataPlan {
    pub n_users: u64,
    pub notifications_per_user: u64,
    pub initial_read_per_user: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WorkloadPlan {
    /// Closed loop: workers; open loop: the most ops in flight at once.
    pub n_workers: u32,
    /// The single-stage shorthand: one of `duration_s` and `ops` (None with `stages`).
    pub duration_s: Option<f64>,
    pub ops: Option<u64>,
    /// The single-stage open-loop shorthand: a constant rate in ops/s.
    pub rate: Option<f64>,
    /// Every phase in order, warm-up (not measured) first when there is one.
    pub stages: Vec<StagePlan>,
    /// Open loop: `constant` (even gaps) or `poisson` (exponential gaps).
    pub arrival: String,
    /// Open loop: an op not started this long after its intended time is dropped.
    pub max_wait_ms: u64,
    /// Time-series interval.
    pub sample_interval_ms: u64,
    /// Sample SUM(counters) - COUNT(unread) every interval (a SQL aggregate per interval).
    pub sample_drift: bool,
    pub dup_k: u32,
    pub op_timeout_ms: u64,
    pub connections: u32,
    pub skew: String,
    pub zipf_exponent: Option<f64>,
    pub mix: BTreeMap<String, u32>,
}

/// One phase: closed loop (`workers`) or open loop (`rate`, ramping to `target`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StagePlan {
    pub name: String,
    pub measured: bool,
    /// One of `duration_s` and `ops` (ops only for a single closed-loop stage).
    pub duration_s: Option<f64>,
    pub ops: Option<u64>,
    /// Closed loop.
    pub workers: Option<u32>,
    /// Open loop: ops/s at the start and at the end of the stage.
    pub rate: Option<f64>,
    pub target: Option<f64>,
}

impl WorkloadPlan {
    pub fn mix_weights(&self) -> [u32; 6] {
        OpKind::ALL.map(|k| self.mix[k.name()])
    }
}

/// Command-line values that replace the file's.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub strategies: Vec<String>,
    pub backends: Vec<String>,
    pub isolation: Vec<String>,
    pub seed: Option<u64>,
    pub workers: Option<u32>,
    pub duration_s: Option<f64>,
    pub ops: Option<u64>,
    pub rate: Option<f64>,
}

pub const DEFAULT_MAX_WAIT_MS: u64 = 1_000;
pub const DEFAULT_SAMPLE_INTERVAL_MS: u64 = 1_000;
pub const DEFAULT_DUP_K: u32 = 4;
pub const BACKENDS: [&str; 4] = ["auto", "postgres", "mysql", "sqlite"];
pub const ISOLATION_LEVELS: [&str; 3] = ["read-committed", "repeatable-read", "serializable"];
pub const DEFAULT_ISOLATION: &str = "read-committed";
pub const DEFAULT_REDIS: RedisPlan =
    RedisPlan { flush_interval_ms: 100, flush_batch: 1000, reconcile_interval_ms: None, settle_timeout_ms: 10_000 };
pub const FAULT_KINDS: [&str; 7] = [
    "redis_data_loss",
    "flusher_crash",
    "redis_disconnect",
    "redis_timeout",
    "crash_after_commit",
    "error_before_commit",
    "pause",
];
pub const DEFAULT_RETRY: RetryPlan =
    RetryPlan { max_attempts: 5, backoff_base_ms: 2, backoff_max_ms: 100, on_unknown: false };
pub const DEFAULT_OP_TIMEOUT_MS: u64 = 5_000;

struct Ctx<'a> {
    path: &'a str,
    src: &'a str,
}

impl Ctx<'_> {
    fn at(&self, span: std::ops::Range<usize>, message: impl Into<String>) -> ScenarioError {
        let start = span.start.min(self.src.len());
        let before = &self.src[..start];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        ScenarioError { path: self.path.to_string(), line_col: Some((line, col)), message: message.into() }
    }

    fn flag(&self, message: impl Into<String>) -> ScenarioError {
        ScenarioError { path: self.path.to_string(), line_col: None, message: message.into() }
    }
}

/// Reads and validates a scenario file, applying command-line overrides.
/// `known` lists the valid strategy names; `default_seed` is used when neither the file
/// nor the flags give one.
pub fn load(path: &Path, overrides: &Overrides, known: &[&str], default_seed: u64) -> Result<RunPlan, ScenarioError> {
    let shown = path.display().to_string();
    let src = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        path: shown.clone(),
        line_col: None,
        message: format!("cannot read scenario: {e}"),
    })?;
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "scenario".into());
    parse(&shown, &src, &name, overrides, known, default_seed)
}

/// Validates scenario text; `path` is only used in messages.
pub fn parse(
    path: &str,
    src: &str,
    default_name: &str,
    overrides: &Overrides,
    known: &[&str],
    default_seed: u64,
) -> Result<RunPlan, ScenarioError> {
    use limits::*;
    let cx = Ctx { path, src };
    let raw: RawScenario = toml::from_str(src).map_err(|e| {
        let message = e.message().trim().to_string();
        match e.span() {
            Some(span) => cx.at(span, message),
            None => cx.flag(message),
        }
    })?;

    // File-defined strategies join the built-in names.
    let mut custom: BTreeMap<String, CustomSpec> = BTreeMap::new();
    let mut custom_isolation: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut add = |name: &str,
                   r: &Spanned<crate::custom::RawStrategy>,
                   at: &crate::custom::Src<'_>|
     -> Result<(), ScenarioError> {
        if custom.contains_key(name) {
            return Err(at.at(r.span(), format!("strategy {name:?} is defined twice")));
        }
        let spec = crate::custom::check(name, r, known, at)?;
        if let Some(levels) = &r.get_ref().isolation {
            if levels.is_empty() {
                return Err(at.at(
                    r.span(),
                    format!("strategy {name:?}: `isolation` is empty; leave it out for the run's levels"),
                ));
            }
            let mut v = Vec::new();
            for l in levels {
                if !ISOLATION_LEVELS.contains(&l.get_ref().as_str()) {
                    return Err(at.at(
                        l.span(),
                        format!("unknown isolation {:?}; valid: {}", l.get_ref(), ISOLATION_LEVELS.join(", ")),
                    ));
                }
                v.push(l.get_ref().clone());
            }
            custom_isolation.insert(name.to_string(), v);
        }
        custom.insert(name.to_string(), spec);
        Ok(())
    };
    let here = crate::custom::Src { path, text: src };
    for (name, r) in raw.strategy.iter().flatten() {
        add(name, r, &here)?;
    }
    for listed in raw.strategy_files.iter().flatten() {
        let (file, text) = crate::custom::load_file(path, listed, &here)?;
        let there = crate::custom::Src { path: &file, text: &text };
        for (name, r) in crate::custom::parse_file(&there)? {
            add(&name, &r, &there)?;
        }
    }
    let known_all: Vec<&str> = known.iter().copied().chain(custom.keys().map(|k| k.as_str())).collect();
    let known = &known_all[..];
    let valid = || known.join(", ");
    let strategies: Vec<String> = if !overrides.strategies.is_empty() {
        for s in &overrides.strategies {
            if !known.contains(&s.as_str()) {
                return Err(cx.flag(format!("--strategy {s}: unknown strategy; valid: {}", valid())));
            }
        }
        overrides.strategies.clone()
    } else if let Some(list) = &raw.strategies {
        for s in list {
            if !known.contains(&s.get_ref().as_str()) {
                return Err(cx.at(s.span(), format!("unknown strategy {:?}; valid: {}", s.get_ref(), valid())));
            }
        }
        if list.is_empty() {
            return Err(cx.flag("`strategies` is empty; list at least one or leave it out to run all"));
        }
        list.iter().map(|s| s.get_ref().clone()).collect()
    } else {
        known.iter().map(|s| s.to_string()).collect()
    };
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = strategies.iter().find(|s| !seen.insert(*s)) {
        return Err(cx.flag(format!("strategy {dup} is listed twice")));
    }

    let backends = pick_names(&cx, "backend", &overrides.backends, raw.backends.as_deref(), &BACKENDS, &["auto"])?;
    let isolation = pick_names(
        &cx,
        "isolation",
        &overrides.isolation,
        raw.isolation.as_deref(),
        &ISOLATION_LEVELS,
        &[DEFAULT_ISOLATION],
    )?;
    let mut strategy_isolation = BTreeMap::new();
    for (name, levels) in raw.strategy_isolation.iter().flatten() {
        if !known.contains(&name.as_str()) {
            return Err(
                cx.at(levels.span(), format!("strategy_isolation: unknown strategy {name:?}; valid: {}", valid()))
            );
        }
        let v = pick_names(&cx, "isolation", &[], Some(levels.get_ref()), &ISOLATION_LEVELS, &[])?;
        if v.is_empty() {
            return Err(cx.at(levels.span(), format!("strategy_isolation.{name} is empty")));
        }
        strategy_isolation.insert(name.clone(), v);
    }
    for (name, levels) in custom_isolation {
        strategy_isolation.entry(name).or_insert(levels);
    }
    let retry = match &raw.retry {
        None => DEFAULT_RETRY,
        Some(r) => {
            let r = r.get_ref();
            let get = |v: &Option<Spanned<u64>>, d: u64, what: &str| -> Result<u64, ScenarioError> {
                match v {
                    Some(x) if *x.get_ref() > MAX_BACKOFF_MS => {
                        Err(cx.at(x.span(), format!("{what} must be at most {MAX_BACKOFF_MS}, got {}", x.get_ref())))
                    }
                    Some(x) => Ok(*x.get_ref()),
                    None => Ok(d),
                }
            };
            let max_attempts = match &r.max_attempts {
                Some(x) if *x.get_ref() == 0 || *x.get_ref() > MAX_ATTEMPTS => {
                    return Err(
                        cx.at(x.span(), format!("max_attempts must be in 1..={MAX_ATTEMPTS}, got {}", x.get_ref()))
                    );
                }
                Some(x) => *x.get_ref(),
                None => DEFAULT_RETRY.max_attempts,
            };
            let base = get(&r.backoff_base_ms, DEFAULT_RETRY.backoff_base_ms, "backoff_base_ms")?;
            let max = get(&r.backoff_max_ms, DEFAULT_RETRY.backoff_max_ms, "backoff_max_ms")?;
            if base > max {
                return Err(cx.at(
                    r.backoff_base_ms.as_ref().map_or(0..0, |x| x.span()),
                    format!("backoff_base_ms ({base}) exceeds backoff_max_ms ({max})"),
                ));
            }
            RetryPlan {
                max_attempts,
                backoff_base_ms: base,
                backoff_max_ms: max,
                on_unknown: r.on_unknown.unwrap_or(false),
            }
        }
    };

    let expect_drift = pick_names(&cx, "strategy", &[], raw.expect_drift.as_deref(), known, &[])?;
    let expect_anomaly = match &raw.expect_anomaly {
        None => None,
        Some(a) if a.get_ref() == "none" || counterlab_core::AnomalyKind::from_name(a.get_ref()).is_some() => {
            Some(a.get_ref().clone())
        }
        Some(a) => {
            return Err(cx.at(
                a.span(),
                format!(
                    "unknown anomaly {:?}; valid: none, {}",
                    a.get_ref(),
                    counterlab_core::AnomalyKind::ALL.map(|k| k.name()).join(", ")
                ),
            ));
        }
    };
    let bounded_ms = |v: &Option<Spanned<u64>>, what: &str, default: u64| -> Result<u64, ScenarioError> {
        match v {
            Some(x) if *x.get_ref() == 0 || *x.get_ref() > MAX_INTERVAL_MS => {
                Err(cx.at(x.span(), format!("{what} must be in 1..={MAX_INTERVAL_MS}, got {}", x.get_ref())))
            }
            Some(x) => Ok(*x.get_ref()),
            None => Ok(default),
        }
    };
    let redis = match &raw.redis {
        None => DEFAULT_REDIS,
        Some(r) => {
            let r = r.get_ref();
            let flush_batch = match &r.flush_batch {
                Some(b) if *b.get_ref() == 0 || *b.get_ref() > MAX_FLUSH_BATCH => {
                    return Err(
                        cx.at(b.span(), format!("flush_batch must be in 1..={MAX_FLUSH_BATCH}, got {}", b.get_ref()))
                    );
                }
                Some(b) => *b.get_ref(),
                None => DEFAULT_REDIS.flush_batch,
            };
            RedisPlan {
                flush_interval_ms: bounded_ms(
                    &r.flush_interval_ms,
                    "flush_interval_ms",
                    DEFAULT_REDIS.flush_interval_ms,
                )?,
                flush_batch,
                reconcile_interval_ms: match &r.reconcile_interval_ms {
                    None => None,
                    some => Some(bounded_ms(some, "reconcile_interval_ms", 0)?),
                },
                settle_timeout_ms: bounded_ms(
                    &r.settle_timeout_ms,
                    "settle_timeout_ms",
                    DEFAULT_REDIS.settle_timeout_ms,
                )?,
            }
        }
    };
    let mut faults = Vec::new();
    let mut pause_spans = Vec::new();
    for f in raw.faults.iter().flatten() {
        let f = f.get_ref();
        if !FAULT_KINDS.contains(&f.kind.get_ref().as_str()) {
            return Err(cx.at(
                f.kind.span(),
                format!("unknown fault {:?}; valid: {}", f.kind.get_ref(), FAULT_KINDS.join(", ")),
            ));
        }
        if *f.at_ms.get_ref() > MAX_INTERVAL_MS {
            return Err(cx.at(f.at_ms.span(), format!("at_ms must be at most {MAX_INTERVAL_MS}")));
        }
        let times = match &f.times {
            Some(t) if *t.get_ref() == 0 || *t.get_ref() > MAX_FAULT_TIMES => {
                return Err(cx.at(t.span(), format!("times must be in 1..={MAX_FAULT_TIMES}, got {}", t.get_ref())));
            }
            Some(t) => *t.get_ref(),
            None => 1,
        };
        let duration_ms = match (&f.duration_ms, f.kind.get_ref().as_str()) {
            (None, "pause") => return Err(cx.at(f.kind.span(), "a pause needs duration_ms")),
            (Some(d), "pause") if *d.get_ref() == 0 || *d.get_ref() > MAX_INTERVAL_MS => {
                return Err(
                    cx.at(d.span(), format!("duration_ms must be in 1..={MAX_INTERVAL_MS}, got {}", d.get_ref()))
                );
            }
            (Some(d), "pause") => {
                pause_spans.push((*d.get_ref(), d.span()));
                Some(*d.get_ref())
            }
            (Some(d), kind) => return Err(cx.at(d.span(), format!("duration_ms applies to pause only, not {kind}"))),
            (None, _) => None,
        };
        const CRASH_OPS: [&str; 4] = ["create", "mark_read", "delete", "mark_all_read"];
        let op = match (&f.op, f.kind.get_ref().as_str()) {
            (None, _) => None,
            (Some(o), "crash_after_commit" | "error_before_commit") if CRASH_OPS.contains(&o.get_ref().as_str()) => {
                Some(o.get_ref().clone())
            }
            (Some(o), "crash_after_commit" | "error_before_commit") => {
                return Err(cx.at(
                    o.span(),
                    format!("op {:?} never commits a write; valid: {}", o.get_ref(), CRASH_OPS.join(", ")),
                ));
            }
            (Some(o), kind) => {
                return Err(cx.at(
                    o.span(),
                    format!("op applies to crash_after_commit and error_before_commit only, not {kind}"),
                ));
            }
        };
        let strategies = pick_names(&cx, "strategy", &[], f.strategies.as_deref(), known, &[])?;
        faults.push(FaultPlan {
            kind: f.kind.get_ref().clone(),
            at_ms: *f.at_ms.get_ref(),
            times,
            duration_ms,
            op,
            strategies,
        });
    }
    let mut thresholds = Vec::new();
    for t in raw.thresholds.iter().flatten() {
        let t = t.get_ref();
        let metric = t.metric.get_ref();
        let names: Vec<&str> = counterlab_report::METRICS.iter().map(|(m, _)| *m).collect();
        if !names.contains(&metric.as_str()) {
            return Err(cx.at(t.metric.span(), format!("unknown metric {metric:?}; valid: {}", names.join(", "))));
        }
        if let Some(op) = &t.op {
            if !metric.starts_with('p') {
                return Err(cx.at(op.span(), format!("`op` applies to latency metrics only, not {metric}")));
            }
            if OpKind::from_name(op.get_ref()).is_none() {
                let ops: Vec<&str> = OpKind::ALL.iter().map(|k| k.name()).collect();
                return Err(cx.at(op.span(), format!("unknown op {:?}; valid: {}", op.get_ref(), ops.join(", "))));
            }
        }
        let limit = *t.limit.get_ref();
        if !(limit.is_finite() && limit >= 0.0) {
            return Err(cx.at(t.limit.span(), format!("limit must be a finite number >= 0, got {limit}")));
        }
        let strategies = pick_names(&cx, "strategy", &[], t.strategies.as_deref(), known, &[])?;
        thresholds.push(counterlab_report::Threshold {
            metric: metric.clone(),
            op: t.op.as_ref().map(|o| o.get_ref().clone()),
            strategies,
            limit,
        });
    }
    if faults.len() > MAX_FAULTS || thresholds.len() > MAX_FAULTS {
        return Err(cx.flag(format!("at most {MAX_FAULTS} faults and {MAX_FAULTS} thresholds")));
    }

    let d = &raw.data;
    let n_users = *d.users.get_ref();
    if n_users == 0 || n_users > MAX_USERS {
        return Err(cx.at(d.users.span(), format!("users must be in 1..={MAX_USERS}, got {n_users}")));
    }
    let per_user = *d.notifications_per_user.get_ref();
    if per_user > MAX_NOTIFICATIONS_PER_USER {
        return Err(cx.at(
            d.notifications_per_user.span(),
            format!("notifications_per_user must be at most {MAX_NOTIFICATIONS_PER_USER}, got {per_user}"),
        ));
    }
    if n_users.saturating_mul(per_user) > MAX_SEEDED_ROWS {
        return Err(cx.at(
            d.notifications_per_user.span(),
            format!(
                "users x notifications_per_user = {} exceeds {MAX_SEEDED_ROWS} seeded rows",
                n_users.saturating_mul(per_user)
            ),
        ));
    }
    let initial_read = match &d.initial_read_per_user {
        Some(v) if *v.get_ref() > per_user => {
            return Err(cx.at(
                v.span(),
                format!("initial_read_per_user ({}) exceeds notifications_per_user ({per_user})", v.get_ref()),
            ));
        }
        Some(v) => *v.get_ref(),
        None => 0,
    };

    let w = raw.workload.get_ref();
    let workers = match overrides.workers {
        Some(0) => return Err(cx.flag("--workers must be at least 1")),
        Some(n) if n > MAX_WORKERS => {
            return Err(cx.flag(format!("--workers must be at most {MAX_WORKERS}")));
        }
        Some(n) => n,
        None => {
            let n = *w.workers.get_ref();
            if n == 0 || n > MAX_WORKERS {
                return Err(cx.at(w.workers.span(), format!("workers must be in 1..={MAX_WORKERS}, got {n}")));
            }
            n
        }
    };

    let check_duration = |d: f64| d.is_finite() && d > 0.0 && d <= MAX_DURATION_S;
    let check_ops = |n: u64| n > 0 && n <= MAX_OPS;
    let check_rate = |r: f64| r.is_finite() && r > 0.0 && r <= MAX_RATE;
    if let Some(r) = overrides.rate.filter(|r| !check_rate(*r)) {
        return Err(cx.flag(format!("--rate must be in (0, {MAX_RATE}] ops/s, got {r}")));
    }
    let file_rate = match &w.rate {
        Some(r) if !check_rate(*r.get_ref()) => {
            return Err(cx.at(r.span(), format!("rate must be in (0, {MAX_RATE}] ops/s, got {}", r.get_ref())));
        }
        r => r.as_ref().map(|r| *r.get_ref()),
    };
    // The flags' single stage replaces the file's load; `--duration-s` alone stretches or
    // shrinks the file's stages to that total instead.
    let load_from_flags = overrides.rate.is_some() || overrides.ops.is_some();
    let (duration_s, ops, rate, mut stages) = match w.stages.as_ref().filter(|_| !load_from_flags) {
        None => {
            let (duration_s, ops) = match (overrides.duration_s, overrides.ops) {
                (Some(_), Some(_)) => return Err(cx.flag("give --duration-s or --ops, not both")),
                (Some(d), None) if !check_duration(d) => {
                    return Err(cx.flag(format!("--duration-s must be in (0, {MAX_DURATION_S}], got {d}")));
                }
                (Some(d), None) => (Some(d), None),
                (None, Some(n)) if !check_ops(n) => {
                    return Err(cx.flag(format!("--ops must be in 1..={MAX_OPS}, got {n}")));
                }
                (None, Some(n)) => (None, Some(n)),
                (None, None) => match (&w.duration_s, &w.ops) {
                    (Some(_), Some(o)) => return Err(cx.at(o.span(), "give duration_s or ops, not both")),
                    (None, None) if w.stages.is_some() => {
                        return Err(cx.flag("--rate replaces the scenario's stages: give --duration-s too"));
                    }
                    (None, None) => {
                        return Err(
                            cx.at(raw.workload.span(), "[workload] needs duration_s, ops or [[workload.stages]]")
                        );
                    }
                    (Some(d), None) if !check_duration(*d.get_ref()) => {
                        return Err(cx.at(
                            d.span(),
                            format!("duration_s must be in (0, {MAX_DURATION_S}], got {}", d.get_ref()),
                        ));
                    }
                    (Some(d), None) => (Some(*d.get_ref()), None),
                    (None, Some(o)) if !check_ops(*o.get_ref()) => {
                        return Err(cx.at(o.span(), format!("ops must be in 1..={MAX_OPS}, got {}", o.get_ref())));
                    }
                    (None, Some(o)) => (None, Some(*o.get_ref())),
                },
            };
            let rate = overrides.rate.or(file_rate);
            if rate.is_some() && ops.is_some() {
                let msg = "an open-loop rate runs for a duration: give duration_s, not ops";
                return Err(match (&w.ops, overrides.ops) {
                    (Some(o), None) => cx.at(o.span(), msg),
                    _ => cx.flag(msg),
                });
            }
            let stage = StagePlan {
                name: "load".into(),
                measured: true,
                duration_s,
                ops,
                workers: rate.is_none().then_some(workers),
                rate,
                target: rate,
            };
            (duration_s, ops, rate, vec![stage])
        }
        Some(list) => {
            for (given, what) in [
                (w.duration_s.as_ref().map(|d| d.span()), "duration_s"),
                (w.ops.as_ref().map(|o| o.span()), "ops"),
                (w.rate.as_ref().map(|r| r.span()), "rate"),
            ] {
                if let Some(span) = given {
                    return Err(cx.at(span, format!("{what} and [[workload.stages]] both describe the load: keep one")));
                }
            }
            if list.get_ref().is_empty() || list.get_ref().len() > MAX_STAGES {
                return Err(cx.at(list.span(), format!("give 1..={MAX_STAGES} stages")));
            }
            let mut stages = Vec::new();
            for (i, st) in list.get_ref().iter().enumerate() {
                let st = st.get_ref();
                let d = *st.duration_s.get_ref();
                if !check_duration(d) {
                    return Err(
                        cx.at(st.duration_s.span(), format!("duration_s must be in (0, {MAX_DURATION_S}], got {d}"))
                    );
                }
                let (workers, rate, target) = match (&st.workers, &st.rate) {
                    (Some(wk), Some(_)) => {
                        return Err(cx.at(wk.span(), "a stage is closed loop (workers) or open loop (rate), not both"));
                    }
                    (None, None) => {
                        return Err(
                            cx.at(st.duration_s.span(), "a stage needs workers (closed loop) or rate (open loop)")
                        );
                    }
                    (Some(wk), None) => {
                        if let Some(t) = &st.target {
                            return Err(cx.at(t.span(), "target (a ramp's final rate) needs rate"));
                        }
                        let n = *wk.get_ref();
                        if n == 0 || n > MAX_WORKERS {
                            return Err(cx.at(wk.span(), format!("workers must be in 1..={MAX_WORKERS}, got {n}")));
                        }
                        (Some(overrides.workers.unwrap_or(n)), None, None)
                    }
                    (None, Some(r)) => {
                        let from = *r.get_ref();
                        if !check_rate(from) {
                            return Err(cx.at(r.span(), format!("rate must be in (0, {MAX_RATE}] ops/s, got {from}")));
                        }
                        let to = match &st.target {
                            Some(t) if !check_rate(*t.get_ref()) => {
                                return Err(cx.at(
                                    t.span(),
                                    format!("target must be in (0, {MAX_RATE}] ops/s, got {}", t.get_ref()),
                                ));
                            }
                            Some(t) => *t.get_ref(),
                            None => from,
                        };
                        (None, Some(from), Some(to))
                    }
                };
                let name = st.name.clone().unwrap_or_else(|| format!("stage {}", i + 1));
                if name.trim().is_empty()
                    || name == counterlab_sim::WARMUP
                    || name == counterlab_sim::SETTLE
                    || stages.iter().any(|s: &StagePlan| s.name == name)
                {
                    return Err(cx.at(
                        st.duration_s.span(),
                        format!("stage name {name:?} is taken; give each stage its own name"),
                    ));
                }
                stages.push(StagePlan { name, measured: true, duration_s: Some(d), ops: None, workers, rate, target });
            }
            let total: f64 = stages.iter().filter_map(|s| s.duration_s).sum();
            if total > MAX_DURATION_S {
                return Err(cx.at(list.span(), format!("the stages last {total} s, more than {MAX_DURATION_S}")));
            }
            if let Some(d) = overrides.duration_s {
                if !check_duration(d) {
                    return Err(cx.flag(format!("--duration-s must be in (0, {MAX_DURATION_S}], got {d}")));
                }
                for s in &mut stages {
                    s.duration_s = s.duration_s.map(|x| x * d / total);
                }
            }
            (None, None, None, stages)
        }
    };
    if let Some(wu) = &w.warmup_s {
        let d = *wu.get_ref();
        if !check_duration(d) {
            return Err(cx.at(wu.span(), format!("warmup_s must be in (0, {MAX_DURATION_S}], got {d}")));
        }
        let first = &stages[0];
        let warm = StagePlan {
            name: counterlab_sim::WARMUP.into(),
            measured: false,
            duration_s: Some(d),
            ops: None,
            workers: first.workers,
            rate: first.rate,
            target: first.rate,
        };
        stages.insert(0, warm);
    }
    let arrival = match w.arrival.as_ref().map(|a| (a.get_ref().as_str(), a.span())) {
        None | Some(("constant", _)) => "constant",
        Some(("poisson", _)) => "poisson",
        Some((other, span)) => return Err(cx.at(span, format!("unknown arrival {other:?}; valid: constant, poisson"))),
    };
    let max_wait_ms = match &w.max_wait_ms {
        Some(m) if *m.get_ref() == 0 || *m.get_ref() > MAX_OP_TIMEOUT_MS => {
            return Err(cx.at(m.span(), format!("max_wait_ms must be in 1..={MAX_OP_TIMEOUT_MS}, got {}", m.get_ref())));
        }
        Some(m) => *m.get_ref(),
        None => DEFAULT_MAX_WAIT_MS,
    };
    let sample_interval_ms = match &w.sample_interval_ms {
        Some(m) if *m.get_ref() < MIN_SAMPLE_INTERVAL_MS || *m.get_ref() > MAX_OP_TIMEOUT_MS => {
            return Err(cx.at(
                m.span(),
                format!(
                    "sample_interval_ms must be in {MIN_SAMPLE_INTERVAL_MS}..={MAX_OP_TIMEOUT_MS}, got {}",
                    m.get_ref()
                ),
            ));
        }
        Some(m) => *m.get_ref(),
        None => DEFAULT_SAMPLE_INTERVAL_MS,
    };
    let max_in_flight = stages.iter().map(|s| s.workers.unwrap_or(workers)).max().unwrap_or(workers);

    let dup_k = match &w.dup_k {
        Some(k) if *k.get_ref() == 0 || *k.get_ref() > MAX_DUP_K => {
            return Err(cx.at(k.span(), format!("dup_k must be in 1..={MAX_DUP_K}, got {}", k.get_ref())));
        }
        Some(k) => *k.get_ref(),
        None => DEFAULT_DUP_K,
    };
    let op_timeout_ms = match &w.op_timeout_ms {
        Some(t) if *t.get_ref() == 0 || *t.get_ref() > MAX_OP_TIMEOUT_MS => {
            return Err(
                cx.at(t.span(), format!("op_timeout_ms must be in 1..={MAX_OP_TIMEOUT_MS}, got {}", t.get_ref()))
            );
        }
        Some(t) => *t.get_ref(),
        None => DEFAULT_OP_TIMEOUT_MS,
    };
    // A pause waits inside the op's time bound: longer, and every stalled op would end as
    // a timeout (outcome unknown) without having reached the database.
    if let Some((d, span)) = pause_spans.iter().find(|(d, _)| *d >= op_timeout_ms) {
        return Err(
            cx.at(span.clone(), format!("a pause of {d} ms must be shorter than op_timeout_ms ({op_timeout_ms})"))
        );
    }

    let (skew, zipf_exponent) = match w.skew.as_ref().map(|s| (s.get_ref().as_str(), s.span())) {
        None | Some(("uniform", _)) => {
            if let Some(z) = &w.zipf_exponent {
                return Err(cx.at(z.span(), "zipf_exponent needs skew = \"zipf\""));
            }
            ("uniform".to_string(), None)
        }
        Some(("zipf", span)) => {
            let Some(z) = &w.zipf_exponent else {
                return Err(cx.at(span, "skew = \"zipf\" needs zipf_exponent (for example 1.1)"));
            };
            let e = *z.get_ref();
            if !(e.is_finite() && e > 0.0 && e <= MAX_ZIPF_EXPONENT) {
                return Err(cx.at(z.span(), format!("zipf_exponent must be in (0, {MAX_ZIPF_EXPONENT}], got {e}")));
            }
            ("zipf".to_string(), Some(e))
        }
        Some((other, span)) => {
            return Err(cx.at(span, format!("unknown skew {other:?}; valid: uniform, zipf")));
        }
    };

    let m = w.mix.get_ref();
    let weights =
        [m.create, m.mark_read, m.mark_read_dup, m.delete, m.mark_all_read, m.read_count].map(|w| w.unwrap_or(0));
    if weights.iter().all(|w| *w == 0) {
        return Err(cx.at(w.mix.span(), "every mix weight is 0: give at least one operation a positive weight"));
    }
    let mix: BTreeMap<String, u32> = OpKind::ALL.iter().zip(weights).map(|(k, w)| (k.name().to_string(), w)).collect();

    // One connection per worker, K per worker when duplicate mark_reads are in the mix,
    // so that the K calls really run at the same time.
    let per_worker = if mix["mark_read_dup"] > 0 { dup_k } else { 1 };
    let connections = match &w.connections {
        Some(c) if *c.get_ref() == 0 || *c.get_ref() > MAX_CONNECTIONS => {
            return Err(cx.at(c.span(), format!("connections must be in 1..={MAX_CONNECTIONS}, got {}", c.get_ref())));
        }
        Some(c) => *c.get_ref(),
        None => (max_in_flight * per_worker).min(MAX_CONNECTIONS),
    };

    Ok(RunPlan {
        scenario: raw.name.unwrap_or_else(|| default_name.to_string()),
        scenario_path: path.to_string(),
        seed: overrides.seed.or(raw.seed).unwrap_or(default_seed),
        strategies,
        backends,
        isolation,
        strategy_isolation,
        retry,
        expect_drift,
        expect_anomaly,
        redis,
        faults,
        thresholds,
        verdict: verdict_plan(&cx, raw.verdict.as_ref())?,
        data: DataPlan { n_users, notifications_per_user: per_user, initial_read_per_user: initial_read },
        custom,
        workload: WorkloadPlan {
            n_workers: workers,
            duration_s,
            ops,
            rate,
            stages,
            arrival: arrival.into(),
            max_wait_ms,
            sample_interval_ms,
            sample_drift: w.sample_drift.unwrap_or(false),
            dup_k,
            op_timeout_ms,
            connections,
            skew,
            zipf_exponent,
            mix,
        },
    })
}

/// Validates a list of names from the flags (which win) or the file, against `valid`;
/// empty in both gives `default`. Duplicates are errors.
fn pick_names(
    cx: &Ctx<'_>,
    what: &str,
    flags: &[String],
    file: Option<&[Spanned<String>]>,
    valid: &[&str],
    default: &[&str],
) -> Result<Vec<String>, ScenarioError> {
    let list = valid.join(", ");
    let out: Vec<String> = if !flags.is_empty() {
        for f in flags {
            if !valid.contains(&f.as_str()) {
                return Err(cx.flag(format!("--{what} {f}: unknown {what}; valid: {list}")));
            }
        }
        flags.to_vec()
    } else if let Some(items) = file {
        for i in items {
            if !valid.contains(&i.get_ref().as_str()) {
                return Err(cx.at(i.span(), format!("unknown {what} {:?}; valid: {list}", i.get_ref())));
            }
        }
        if items.is_empty() && !default.is_empty() {
            return Err(
                cx.flag(format!("the {what} list is empty; leave it out for the default ({})", default.join(", ")))
            );
        }
        items.iter().map(|i| i.get_ref().clone()).collect()
    } else {
        default.iter().map(|s| s.to_string()).collect()
    };
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = out.iter().find(|s| !seen.insert(*s)) {
        return Err(cx.flag(format!("{what} {dup} is listed twice")));
    }
    Ok(out)
}
