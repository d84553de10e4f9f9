//! The resolved plan and its parts: every field typed (enums for the closed sets) and
//! decided, printed into the report as the scenario spelt it, and enough to replay a run.

use std::collections::BTreeMap;

use counterlab_core::{AnomalyKind, Fault, OpKind, named_enum};
use counterlab_core::{Dialect, Isolation};
use counterlab_spec::CustomSpec;
use serde::{Serialize, Serializer};

use crate::named;

/// Bounds checked when a scenario is loaded (every loop and pool has a limit).
pub mod limits {
    /// Users are numbered in an i64 and a user's bit range in a u64; the memory
    /// available decides the real limit (`bounds::fits_memory`).
    pub const MAX_USERS: u64 = 1 << 40;
    pub const MAX_NOTIFICATIONS_PER_USER: u64 = 100_000;
    pub const MAX_WORKERS: u32 = 1024;
    pub const MAX_DUP_K: u32 = 64;
    /// `repeat` / `--repeat`: runs of each cell (interleaved); `compare`'s exact test goes to 20.
    pub const MAX_REPEAT: u32 = 20;
    pub const MAX_CONNECTIONS: u32 = 1000;
    /// `redis_pipeline`: ops sharing one Redis connection at most.
    pub const MAX_REDIS_PIPELINE: u32 = 256;
    /// `redis_batch`: ops a worker sends as one pipeline at most.
    pub const MAX_REDIS_BATCH: u32 = 256;
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
    pub const MAX_COST_BASELINE_MS: u64 = 60_000;
}

named_enum! {
    /// Where the SQL side runs; `auto` is PostgreSQL when one is configured or answers at
    /// the default address, else embedded SQLite.
    pub enum Backend {
        Auto = "auto",
        Postgres = "postgres",
        Mysql = "mysql",
        Sqlite = "sqlite",
    }
}

named_enum! {
    /// Where the servers a run needs come from (`--servers`, `servers = ...`): the
    /// configured or local ones; throwaway containers; or `auto`: configured or local
    /// when they answer, else containers when a Docker engine answers, else (SQL)
    /// embedded SQLite.
    pub enum ServersMode {
        Local = "local",
        Containers = "containers",
        Auto = "auto",
    }
}

named_enum! {
    /// Open loop: even gaps between arrivals, or exponential ones.
    pub enum Arrival {
        Constant = "constant",
        Poisson = "poisson",
    }
}

named_enum! {
    /// How ops pick their user.
    pub enum SkewKind {
        Uniform = "uniform",
        Zipf = "zipf",
    }
}

pub const DEFAULT_MAX_WAIT_MS: u64 = 1_000;
pub const DEFAULT_SAMPLE_INTERVAL_MS: u64 = 1_000;
/// The idle interval measured before each cell's load for its server-wide cost figures
/// (docs/report.md, "Server-side cost"); 0 measures none.
pub const DEFAULT_COST_BASELINE_MS: u64 = 1_000;
/// Drift is sampled unless a scenario says `sample_drift = false`: one aggregate query
/// per interval, whose measured cost docs/running.md states.
pub const DEFAULT_SAMPLE_DRIFT: bool = true;
/// The server is settled after the seed, before the load, unless a scenario says
/// `settle_after_seed = false`: PostgreSQL `CHECKPOINT`, MariaDB/MySQL `FLUSH TABLES ...
/// FOR EXPORT` of the namespace's two tables, SQLite a WAL checkpoint, so the measured load
/// does not pay for writing the seed's dirty pages.
pub const DEFAULT_SETTLE_AFTER_SEED: bool = true;
pub const DEFAULT_DUP_K: u32 = 4;
/// The mix of a scenario without `[workload.mix]` (the quickstart's): create 20,
/// mark_read 35, mark_read_dup 10, delete 10, mark_all_read 5, read_count 20, so every
/// op kind is exercised and duplicate mark_reads race.
pub const DEFAULT_MIX: MixPlan = MixPlan { weights: [20, 35, 10, 10, 5, 20] };
pub const DEFAULT_ISOLATION: Isolation = Isolation::ReadCommitted;
pub const DEFAULT_REDIS: RedisPlan = RedisPlan {
    flush_interval_ms: 100,
    flush_batch: 1000,
    reconcile_interval_ms: None,
    settle_timeout_ms: 10_000,
    cache_delay_ms: 100,
    cache_ttl_ms: 10_000,
};
pub const DEFAULT_RETRY: RetryPlan =
    RetryPlan { max_attempts: 5, backoff_base_ms: 2, backoff_max_ms: 100, on_unknown: false };
pub const DEFAULT_OP_TIMEOUT_MS: u64 = 5_000;

/// The resolved plan. No `Default`: every value is decided here, printed into the
/// report, and enough to replay the run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RunPlan {
    pub scenario: String,
    pub scenario_path: String,
    pub seed: u64,
    /// Runs of each cell, interleaved (all cells once, then again): `repeat` or `--repeat`.
    pub repeat: u32,
    /// Rounds in all while a backend x level's order is not settled (`repeat_until_settled`;
    /// equal to `repeat`: no more rounds): the unsettled designs run again, one round at a
    /// time, until their order settles or this many rounds ran.
    pub repeat_max: u32,
    pub strategies: Vec<String>,
    /// Backends in run order.
    #[serde(serialize_with = "named::list")]
    pub backends: Vec<Backend>,
    /// Where the servers come from (the environment, not the experiment: not in the report).
    #[serde(skip)]
    pub servers: ServersMode,
    /// Isolation levels every strategy runs at, unless `strategy_isolation` names it.
    #[serde(serialize_with = "named::list")]
    pub isolation: Vec<Isolation>,
    #[serde(serialize_with = "named::map_of_lists")]
    pub strategy_isolation: BTreeMap<String, Vec<Isolation>>,
    pub retry: RetryPlan,
    /// Strategies whose drift this scenario expects (a fault it schedules breaks them):
    /// judged as if they had no guarantee.
    pub expect_drift: Vec<String>,
    /// For `counterlab zoo`: the anomaly every strategy of this file must show (a
    /// mutant), or none (correct strategies must show none).
    pub expect_anomaly: Option<Expectation>,
    pub redis: RedisPlan,
    /// `[replica]`: where `read_count` reads (each a cell of its own) and the staleness
    /// bound replica reads are judged by.
    pub replica: ReplicaPlan,
    /// `[explore]`: what `counterlab explore` runs by default.
    pub explore: ExplorePlan,
    pub faults: Vec<FaultPlan>,
    /// Limits that fail the run (exit code 1) when breached.
    #[serde(serialize_with = "named::thresholds")]
    pub thresholds: Vec<counterlab_core::Threshold>,
    /// What the verdict allows: errors, and the operations that must run (`[verdict]`).
    pub verdict: VerdictPlan,
    /// `[[expect]]`: what the scenario says each strategy shows on which backends; an
    /// expectation not met fails the run (exit 1), as a breached threshold does.
    pub expect: Vec<ExpectPlan>,
    pub data: DataPlan,
    pub workload: WorkloadPlan,
    /// Strategies defined in the scenario (or its strategy files), by name.
    pub custom: BTreeMap<String, CustomSpec>,
}

impl RunPlan {
    /// The isolation levels `strategy` runs at.
    pub fn isolation_for(&self, strategy: &str) -> &[Isolation] {
        self.strategy_isolation.get(strategy).unwrap_or(&self.isolation)
    }

    /// The faults scheduled in `strategy`'s runs.
    pub fn faults_for<'a>(&'a self, strategy: &'a str) -> impl Iterator<Item = &'a FaultPlan> + 'a {
        self.faults.iter().filter(move |f| f.applies_to(strategy))
    }
}

/// A zoo file's expectation: a named anomaly (a mutant), or none (a correct control).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expectation {
    None,
    Anomaly(AnomalyKind),
}

impl Expectation {
    pub fn name(self) -> &'static str {
        match self {
            Expectation::None => "none",
            Expectation::Anomaly(k) => k.name(),
        }
    }
}

impl Serialize for Expectation {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

named_enum! {
    /// The verdicts an `[[expect]]` entry can ask for (a failure is never expected: a
    /// strategy expected to break has no guarantee and drifts).
    pub enum ExpectedVerdict {
        Pass = "pass",
        DriftExpected = "drift-expected",
        NoDriftObserved = "no-drift-observed",
    }
}

/// What a strategy is expected to show: a verdict, or a named anomaly among its findings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    Verdict(ExpectedVerdict),
    Anomaly(AnomalyKind),
}

/// One `[[expect]]` entry: on `backends` at `isolation` levels (empty: any), `strategy`
/// shows `expected`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectPlan {
    pub strategy: String,
    pub backends: Vec<Dialect>,
    pub isolation: Vec<Isolation>,
    pub expected: Expected,
}

impl ExpectPlan {
    pub fn applies_to(&self, strategy: &str, dialect: Dialect, isolation: Isolation) -> bool {
        self.strategy == strategy
            && (self.backends.is_empty() || self.backends.contains(&dialect))
            && (self.isolation.is_empty() || self.isolation.contains(&isolation))
    }

    /// `verdict drift-expected` or `anomaly double_decrement`, with the backends.
    pub fn describe(&self) -> String {
        let what = match self.expected {
            Expected::Verdict(v) => format!("verdict {}", v.name()),
            Expected::Anomaly(k) => format!("anomaly {}", k.name()),
        };
        let on = |names: Vec<&str>, word: &str| match names.is_empty() {
            true => String::new(),
            false => format!(" {word} {}", names.join(", ")),
        };
        let backends = on(self.backends.iter().map(|d| d.name()).collect(), "on");
        let levels = on(self.isolation.iter().map(|i| i.name()).collect(), "at");
        format!("{}: {what}{backends}{levels}", self.strategy)
    }
}

/// The report's shape of an expectation.
#[derive(Serialize)]
struct ExpectFields<'a> {
    strategy: &'a str,
    #[serde(serialize_with = "named::list")]
    backends: &'a [Dialect],
    #[serde(serialize_with = "named::list")]
    isolation: &'a [Isolation],
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "named::opt")]
    verdict: Option<ExpectedVerdict>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "named::opt")]
    anomaly: Option<AnomalyKind>,
}

impl Serialize for ExpectPlan {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (verdict, anomaly) = match self.expected {
            Expected::Verdict(v) => (Some(v), None),
            Expected::Anomaly(k) => (None, Some(k)),
        };
        let (strategy, backends, isolation) = (&self.strategy, &self.backends, &self.isolation);
        ExpectFields { strategy, backends, isolation, verdict, anomaly }.serialize(s)
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
    /// cache-aside: the wait before a write's second delete of the cached count (the
    /// lag its reads are allowed).
    pub cache_delay_ms: u64,
    /// cache-aside: how long a cached count lives.
    pub cache_ttl_ms: u64,
}

/// `counterlab explore`'s defaults from the scenario.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ExplorePlan {
    /// Sessions per schedule: 2 or 3.
    pub sessions: u8,
    /// Most schedules per op pair.
    pub budget: u64,
    /// Most preemptions per schedule (None: any number).
    pub preemptions: Option<u32>,
    /// Op pairs by name (`counterlab_core::explore::OPS`); empty: the whole matrix.
    pub pairs: Vec<(String, String)>,
    /// `counterlab run` explores every row too, after the load (`run --explore`).
    pub with_run: bool,
}

/// Where reads go, and how stale a replica read may be.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ReplicaPlan {
    /// Each strategy runs once per entry (default: `primary` only).
    #[serde(serialize_with = "named::list")]
    pub read_from: Vec<counterlab_core::ReadFrom>,
    /// Replica reads staler than this are `stale_read` (None: any stale read is).
    pub stale_read_bound_ms: Option<u64>,
}

/// A fault fired `at_ms` after the load starts, `times` times in a row, in the runs of
/// `strategies` (empty: every strategy of the plan). `fault` carries its placement (the
/// op kind of a commit fault, the length of a pause).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultPlan {
    pub fault: Fault,
    pub at_ms: u64,
    pub times: u32,
    pub strategies: Vec<String>,
}

impl FaultPlan {
    /// Whether the fault is scheduled in `strategy`'s runs.
    pub fn applies_to(&self, strategy: &str) -> bool {
        self.strategies.is_empty() || self.strategies.iter().any(|s| s == strategy)
    }
}

/// The report's shape of a fault: its name and placement as separate fields.
#[derive(Serialize)]
struct FaultFields<'a> {
    kind: &'static str,
    at_ms: u64,
    times: u32,
    duration_ms: Option<u64>,
    #[serde(serialize_with = "named::opt")]
    op: Option<OpKind>,
    strategies: &'a [String],
}

impl Serialize for FaultPlan {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        FaultFields {
            kind: self.fault.name(),
            at_ms: self.at_ms,
            times: self.times,
            duration_ms: self.fault.duration_ms(),
            op: self.fault.op(),
            strategies: &self.strategies,
        }
        .serialize(s)
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

impl DataPlan {
    pub fn seed_spec(self) -> counterlab_core::SeedSpec {
        counterlab_core::SeedSpec {
            n_users: self.n_users,
            notifications_per_user: self.notifications_per_user,
            initial_read_per_user: self.initial_read_per_user,
        }
    }
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
    #[serde(serialize_with = "named::one")]
    pub arrival: Arrival,
    /// Open loop: an op not started this long after its intended time is dropped.
    pub max_wait_ms: u64,
    /// Time-series interval.
    pub sample_interval_ms: u64,
    /// Sample SUM(counters) - COUNT(unread) every interval (a SQL aggregate per interval).
    pub sample_drift: bool,
    /// Settle the server after the seed, before the load (`DEFAULT_SETTLE_AFTER_SEED`).
    pub settle_after_seed: bool,
    /// The idle interval before each cell's load whose server-wide figures stand beside
    /// the cost's (0: none).
    pub cost_baseline_ms: u64,
    pub dup_k: u32,
    pub op_timeout_ms: u64,
    pub connections: u32,
    /// Ops in flight that share one Redis connection (1: each op has one to itself), so
    /// the multiplexed connection pipelines their commands; ops that WATCH or MULTI still
    /// get a dedicated one.
    pub redis_pipeline: u32,
    /// Ops each closed-loop worker draws and sends at once as one Redis pipeline (1: one
    /// op at a time); every op of the design must be one Redis command (`batches`).
    pub redis_batch: u32,
    #[serde(serialize_with = "named::one")]
    pub skew: SkewKind,
    /// With `skew = zipf` only.
    pub zipf_exponent: Option<f64>,
    pub mix: MixPlan,
}

/// Mix weights by op kind (0: not in the mix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MixPlan {
    pub weights: [u32; 6],
}

impl MixPlan {
    pub fn weight(self, k: OpKind) -> u32 {
        self.weights[k.index()]
    }
}

impl Serialize for MixPlan {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(OpKind::ALL.iter().map(|k| (k.name(), self.weight(*k))))
    }
}

impl WorkloadPlan {
    /// The most workers any stage runs at once (an open-loop stage: `n_workers`, its cap
    /// on ops in flight): the connections workers hold for the run.
    pub fn max_workers(&self) -> u32 {
        self.stages.iter().map(|s| s.workers().unwrap_or(self.n_workers)).max().unwrap_or(self.n_workers)
    }

    /// The most ops in flight at once: `max_workers`, times `dup_k` when duplicate
    /// mark_reads (K calls at once) are in the mix. The one answer every SQL pool, Redis
    /// connection set and broker channel set is sized from.
    pub fn ops_in_flight(&self) -> u32 {
        let per_worker = if self.mix.weight(OpKind::MarkReadDup) > 0 { self.dup_k } else { 1 };
        self.max_workers().saturating_mul(per_worker)
    }

    pub fn mix_weights(&self) -> [u32; 6] {
        self.mix.weights
    }
}

/// When a stage ends: after a duration, or after a number of ops (a single closed-loop
/// stage only).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StageEnd {
    Duration(f64),
    Ops(u64),
}

/// How a stage makes load: closed loop with `workers`, or open loop at `rate` ops/s
/// ramping to `target`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StageLoad {
    Closed { workers: u32 },
    Open { rate: f64, target: f64 },
}

/// One phase of the load.
#[derive(Clone, Debug, PartialEq)]
pub struct StagePlan {
    pub name: String,
    pub measured: bool,
    pub end: StageEnd,
    pub load: StageLoad,
}

impl StagePlan {
    pub fn duration_s(&self) -> Option<f64> {
        match self.end {
            StageEnd::Duration(d) => Some(d),
            StageEnd::Ops(_) => None,
        }
    }

    pub fn workers(&self) -> Option<u32> {
        match self.load {
            StageLoad::Closed { workers } => Some(workers),
            StageLoad::Open { .. } => None,
        }
    }

    pub fn rate(&self) -> Option<f64> {
        match self.load {
            StageLoad::Open { rate, .. } => Some(rate),
            StageLoad::Closed { .. } => None,
        }
    }
}

/// The report's shape of a stage: every field, unused ones null.
#[derive(Serialize)]
struct StageFields<'a> {
    name: &'a str,
    measured: bool,
    duration_s: Option<f64>,
    ops: Option<u64>,
    workers: Option<u32>,
    rate: Option<f64>,
    target: Option<f64>,
}

impl Serialize for StagePlan {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ops = match self.end {
            StageEnd::Ops(n) => Some(n),
            StageEnd::Duration(_) => None,
        };
        let target = match self.load {
            StageLoad::Open { target, .. } => Some(target),
            StageLoad::Closed { .. } => None,
        };
        StageFields {
            name: &self.name,
            measured: self.measured,
            duration_s: self.duration_s(),
            ops,
            workers: self.workers(),
            rate: self.rate(),
            target,
        }
        .serialize(s)
    }
}
