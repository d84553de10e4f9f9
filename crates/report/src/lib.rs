//! The report: a serializable summary of a run (what was run, on what, with which
//! results), built from simulator and checker output, rendered as JSON, Markdown and a
//! terminal table. Rendering returns strings; the CLI alone writes files.

mod check;
mod compare;
pub mod cost;
mod cost_compare;
pub mod cost_figures;
mod csv_out;
pub mod decision;
mod explored;
mod html;
mod junit;
mod markdown;
mod render;
mod repeats;
pub mod stats;
mod thresholds;
pub mod units;
mod wire;

use counterlab_core::Figure;
use std::collections::BTreeMap;

use counterlab_core::{Backend, CheckResult, ErrorClass, Event, Guarantee, Isolation, OpKind, ReadFrom, StrategyInfo};
use counterlab_sim::{LoadModel, LoadResult, Sample, StageResult, Stop};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

pub use check::{CheckReport, WorstUser};
pub use compare::{Comparison, Limits, MIN_OPS_FOR_P99, compare, render_comparison, render_comparison_markdown};
pub use cost::{Baseline, CostReport, CostSource, Counters, Scope};
pub use cost_compare::{CostDelta, DEFAULT_COST_LIMIT_PCT};
pub use csv_out::{CSV_HEADER, render_csv};
pub use decision::stall::Stall;
pub use explored::{ExploreSummary, UnsafePair};
pub use html::{CurveSeries, render_curve_html, render_html};
pub use junit::{RowOutcome, case_name, render_junit, row_outcome};
pub use markdown::render_markdown;
pub use render::{Detail, FIXED_WIDTH, render_terminal, render_terminal_as, render_terminal_width, terminal_width};
pub use repeats::{RepeatRun, merge_repeats, throughput_with_spread};
pub use thresholds::{Metric, Threshold, ThresholdResult, evaluate};

/// Version of the report.json layout; bumped on any incompatible change.
pub const REPORT_SCHEMA_VERSION: u32 = 2;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub report_schema_version: u32,
    pub counterlab_version: String,
    pub git_commit: String,
    pub scenario: String,
    pub scenario_path: String,
    pub seed: u64,
    pub run_id: String,
    pub started_at_utc: String,
    /// The fully resolved plan: every value the run used, defaults included.
    pub plan: serde_json::Value,
    pub servers: Vec<ServerInfo>,
    pub strategies: Vec<StrategyReport>,
    /// Combinations the plan asked for that were not run, with the reason.
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    /// True when every strategy's verdict matches its declared guarantee.
    pub all_guarantees_held: bool,
    /// Thresholds breached over all strategies (any makes the exit code 1).
    #[serde(default)]
    pub thresholds_breached: u64,
    /// `[[expect]]` entries not met over all strategies (any makes the exit code 1).
    #[serde(default)]
    pub expectations_unmet: u64,
    /// `[[expect]]` entries no row judged (their strategy, backend or level did not run,
    /// or the row is INCOMPLETE): said, so a report never reads as checked when it was not.
    #[serde(default)]
    pub expectations_not_judged: Vec<String>,
    /// Ctrl-C stopped the run early: the strategies listed were checked and torn down,
    /// later ones did not run.
    #[serde(default)]
    pub interrupted: bool,
    /// The command that replays this run.
    pub replay_command: String,
    /// `--trust-strategy-files`: file-defined strategies were allowed to run as the
    /// configured account where a server gave no identity of their own.
    #[serde(default)]
    pub trusted_strategy_files: bool,
    /// Files to write beside the report (HDR interval logs, histories): (relative name, content).
    #[serde(skip)]
    pub side_files: Vec<(String, String)>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServerInfo {
    pub backend: String,
    /// Connection URL with any password replaced by `***`.
    pub url: String,
    pub version: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Skipped {
    pub strategy: String,
    #[serde(with = "wire::backend")]
    pub backend: Backend,
    #[serde(with = "wire::named")]
    pub isolation: Isolation,
    pub reason: String,
}

/// Fields missing from older reports (schema 1) read as their defaults.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StrategyReport {
    pub strategy: String,
    #[serde(with = "wire::backend")]
    pub backend: Backend,
    /// The level the namespace's connections were set to.
    #[serde(with = "wire::named")]
    pub isolation: Isolation,
    /// The level the server reported for those connections.
    pub isolation_in_effect: String,
    #[serde(with = "wire::named")]
    pub guarantee: Guarantee,
    /// What the design needs beyond the SQL database (`Redis`, `flusher`, `reconciler`,
    /// `RabbitMQ`, `consumer`, `eventual reads`...): the operational cost the decision
    /// view shows. Declared next to the strategy's registry row; empty for plain SQL.
    #[serde(default)]
    pub moving_parts: Vec<String>,
    pub namespace: String,
    /// True when `--keep` left the namespace in place.
    pub namespace_kept: bool,
    /// Who the strategy's operations ran as: the namespace's own role/user/ACL user, the
    /// SQLite authorizer, or the configured account (and why).
    pub identity: String,
    /// Set when removing the namespace (or its keys, or its identity) failed after the
    /// run; `counterlab clean --yes` removes what is left.
    pub cleanup_error: Option<String>,
    /// Operations the server refused for lack of a privilege (the namespace's identity
    /// hit its boundary); any makes the verdict `FAIL: denied`.
    pub permission_denied: u64,
    pub seed_s: f64,
    /// What settled the server after the seed, before the load, and how long it took
    /// (`CHECKPOINT after the seed (0.42 s)`), or why it was not settled; None when the
    /// scenario says `settle_after_seed = false`, in a distributed run (`prepare` settles
    /// each cell and logs it) or when the report predates it.
    #[serde(default)]
    pub settled: Option<String>,
    /// The tool's own CPU per op over the measured load (every thread of the process, in
    /// µs; with SQLite the database's work too, as it runs in the process): whether the
    /// harness, not the design, is what the throughput measures. None in a distributed
    /// run (each agent's is its own) and where the OS gives no process clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cpu_us_per_op: Option<f64>,
    pub load_s: f64,
    pub ops_total: u64,
    pub throughput_ops_per_s: f64,
    pub errors_total: u64,
    /// Conflict retries over all ops, and ops that still failed after the last attempt.
    pub retries: u64,
    pub give_ups: u64,
    /// Failed attempts by class, retried ones included.
    pub errors_by_class: BTreeMap<String, u64>,
    pub error_samples: Vec<String>,
    pub ops: BTreeMap<String, OpReport>,
    /// Seconds settle took (stopping background tasks, draining buffers).
    pub settle_s: f64,
    /// Why settle did not finish within its bound, if it did not.
    pub settle_error: Option<String>,
    /// Seconds the checks took after settle: the counters against the truth, the reads,
    /// the settled reads and the anomalies (0 when the check did not run).
    #[serde(default)]
    pub check_s: f64,
    /// Set when the time series stopped sampling drift during the load: when and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_note: Option<String>,
    /// Faults fired during the load, in order.
    pub faults: Vec<FaultEvent>,
    /// Strategy-specific figures: flushes, lost flush claims, repairs, heal time...
    pub figures: BTreeMap<String, f64>,
    /// Named anomalies the strategy's own accounting explains (e.g. `lost_flush`).
    pub anomalies: Vec<Anomaly>,
    /// The scenario's thresholds that apply to this strategy, evaluated.
    pub thresholds: Vec<ThresholdResult>,
    /// The scenario's `[[expect]]` entries for this strategy on this backend, judged.
    #[serde(default)]
    pub expectations: Vec<ExpectationResult>,
    /// The explorer's result for this row (`[explore] with_run`, `run --explore`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explored: Option<ExploreSummary>,
    pub check: CheckReport,
    /// The load model in words (`closed loop, 8 workers` / `open loop, 200 -> 2000 ops/s`).
    #[serde(default)]
    pub load_model: String,
    /// Each phase of the load in order: warm-up (not measured) then the measured stages.
    #[serde(default)]
    pub stages: Vec<StageReport>,
    /// Present when any stage was open loop: schedule adherence over the measured stages.
    #[serde(default)]
    pub open_loop: Option<OpenLoopReport>,
    /// One point per sampling interval (about 1 s) from the load's start through settle.
    #[serde(default)]
    pub series: Vec<SeriesPoint>,
    /// File (beside report.json) holding this strategy's HDR interval log, if written.
    #[serde(default)]
    pub hdr_log: Option<String>,
    /// The recorded history and the read check.
    #[serde(default)]
    pub history: HistoryReport,
    /// `--repeat N`: one entry per repeat in run order; the row's throughput and latency
    /// percentiles are then the medians over them, its verdict the worst (`repeats.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<RepeatRun>,
    /// Where `read_count` read: `primary`, `replica` or `replica-fallback`.
    #[serde(with = "wire::named")]
    pub read_from: ReadFrom,
    /// Replica reads: how stale they were (None when reads went to the primary).
    #[serde(default)]
    pub staleness: Option<StalenessReport>,
    /// A distributed run (`counterlab check`): the agents that ran this row's load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<AgentsReport>,
    /// Set when the load stalled (`decision::stall`): the decision and the row name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall: Option<Stall>,
    /// What the load cost the servers, from their own statistics read before the load
    /// and after settle (`cost.rs`); None where nothing was read (SQLite alone, a
    /// distributed run, a row whose setup or check did not complete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostReport>,
}

/// The agents of a distributed run's row and the clock uncertainty its read check used.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentsReport {
    pub agents: Vec<AgentShare>,
    /// The widest agent's uncertainty: each op's real-time interval was widened by its
    /// own agent's before the read bounds.
    pub clock_uncertainty_ms: f64,
}

/// One agent (`load --segment K/N`): its share and what it measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentShare {
    /// `K/N`.
    pub segment: String,
    pub host: String,
    pub users: u64,
    /// Its closed-loop workers (or most in flight) in the first measured stage.
    pub workers: u64,
    pub ops: u64,
    pub throughput_ops_per_s: f64,
    /// Database server clock minus the agent's, and its uncertainty (half the best
    /// round trip plus the drift between the start and end measurements).
    pub clock_offset_ms: f64,
    pub clock_uncertainty_ms: f64,
}

impl AgentsReport {
    /// One line for the Markdown and HTML reports.
    pub fn line(&self) -> String {
        let shares: Vec<String> = self
            .agents
            .iter()
            .map(|a| {
                format!(
                    "{} on {}: {} users, {} ops at {:.0} ops/s, clock {:+.3} ms +/- {:.3} ms",
                    a.segment,
                    a.host,
                    a.users,
                    a.ops,
                    a.throughput_ops_per_s,
                    a.clock_offset_ms,
                    a.clock_uncertainty_ms
                )
            })
            .collect();
        format!(
            "{} agents, reads judged with +/- {:.3} ms of clock uncertainty: {}",
            self.agents.len(),
            self.clock_uncertainty_ms,
            shares.join("; ")
        )
    }
}

/// How stale a row's replica reads were: a read outside the history's bounds whose value
/// the counter had earlier is stale by the time from then to the read's start.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StalenessReport {
    pub reads_checked: u64,
    pub stale_reads: u64,
    /// Stale reads beyond the scenario's `stale_read_bound_ms` (the `stale_read` anomaly).
    pub over_bound: u64,
    pub bound_ms: Option<f64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The most counts a stale read was off.
    pub max_counts: i64,
    /// Stale reads per bucket: `le_ms` (None: the rest) and how many.
    pub buckets: Vec<StalenessBucket>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StalenessBucket {
    pub le_ms: Option<f64>,
    pub count: u64,
}

impl StalenessReport {
    pub fn from_core(s: &counterlab_core::Staleness) -> StalenessReport {
        let ms = |us: u64| us as f64 / 1e3;
        StalenessReport {
            reads_checked: s.reads_checked,
            stale_reads: s.stale_reads,
            over_bound: s.over_bound,
            bound_ms: s.bound_us.map(ms),
            p50_ms: ms(s.p50_us),
            p99_ms: ms(s.p99_us),
            max_ms: ms(s.max_us),
            max_counts: s.max_counts,
            buckets: s
                .buckets
                .iter()
                .map(|&(le, count)| StalenessBucket { le_ms: (le != u64::MAX).then(|| ms(le)), count })
                .collect(),
        }
    }

    /// One line for the Markdown and terminal reports.
    pub fn line(&self) -> String {
        let bound = self.bound_ms.map_or("no bound".to_string(), |b| format!("bound {b:.0} ms"));
        format!(
            "{} of {} reads stale (p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, up to {} counts off); {} over the {bound}",
            self.stale_reads,
            self.reads_checked,
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.max_counts,
            self.over_bound
        )
    }
}

/// One phase of the load.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StageReport {
    pub name: String,
    /// False for warm-up: its ops are not in the totals, percentiles or thresholds.
    pub measured: bool,
    /// `closed` or `open`.
    pub model: String,
    /// Closed loop: workers; open loop: the most ops in flight at once.
    pub workers: u32,
    /// Open loop: the arrival rate at the stage's start and end (ops/s; equal unless ramping).
    pub rate_from: Option<f64>,
    pub rate_to: Option<f64>,
    /// `constant` or `poisson` (open loop only).
    pub arrival: Option<String>,
    pub duration_s: f64,
    /// The stage's planned length (None for an op budget): a stage that ran well past
    /// it stalled (`decision::stall`).
    #[serde(default)]
    pub planned_s: Option<f64>,
    /// Open loop: ops the schedule called for; closed loop: ops issued.
    pub scheduled: u64,
    /// Ops issued (completed, ok or not).
    pub ops: u64,
    /// Open loop: scheduled ops that no worker could start within `max_wait_ms`.
    pub dropped: u64,
    pub achieved_ops_per_s: f64,
    /// Latency p50 over the stage, all ops, from the intended start (0 in a report
    /// from before it was recorded).
    #[serde(default)]
    pub p50_us: u64,
    /// Latency p99 over the stage, all ops, from the intended start.
    pub p99_us: u64,
}

/// How well the open-loop schedule was kept (measured stages only).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OpenLoopReport {
    pub scheduled: u64,
    /// Ops workers started (scheduled - dropped, less any still queued at a Ctrl-C).
    pub issued: u64,
    pub dropped: u64,
    /// Issued ops that started more than 1 ms after their intended time.
    pub late: u64,
    /// Intended start to actual start, over issued ops.
    pub schedule_lag_us: Latency,
    /// Mean target rate and the rate achieved (issued ops over the stages' planned
    /// length), and their ratio.
    pub target_ops_per_s: f64,
    pub achieved_ops_per_s: f64,
    pub achieved_over_target: f64,
}

/// One sampling interval of one strategy's run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SeriesPoint {
    /// End of the interval, seconds from the load's start.
    pub t_s: f64,
    /// Length of the interval in seconds.
    pub dt_s: f64,
    /// `warmup`, a stage name, or `settle`.
    pub phase: String,
    /// Ops completed in the interval, and of them errors (fail or unknown).
    pub ops: u64,
    pub errors: u64,
    pub ops_per_s: f64,
    /// Open loop: ops the schedule called for in the interval, and ops dropped.
    pub scheduled: u64,
    pub dropped: u64,
    /// Latency of the interval's ops over every op kind, from the intended start.
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// Eventual strategies: the buffered amount not yet applied to SQL.
    pub pending: Option<i64>,
    /// SUM(counters) - COUNT(unread rows), sampled when the plan asks for it.
    pub drift: Option<i64>,
}

/// A named anomaly with its witnesses (see `docs/history.md`). Fields missing from
/// older reports read as their defaults.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Anomaly {
    pub name: String,
    /// What the name means (the legend line, `AnomalyKind::meaning`).
    pub meaning: String,
    pub count: u64,
    pub detail: String,
    /// Calls completed up to the first witness (all calls when only the final state shows it).
    pub ops_to_detect: u64,
    pub witnesses: Vec<WitnessReport>,
}

/// One piece of evidence: the user and notification, the counter expected against the
/// one observed, and the conflicting calls with their times.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct WitnessReport {
    pub user: i64,
    pub notification: i64,
    pub expected: i64,
    pub observed: i64,
    pub note: String,
    pub ops: Vec<HistoryEvent>,
}

/// One line of `history.jsonl` (and a witness's op): a call as the driver saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEvent {
    pub worker: u32,
    pub op: String,
    pub user: i64,
    /// The notification acted on; 0 when none.
    pub id: i64,
    /// Microseconds from the start of the load.
    pub invoke_us: u64,
    pub complete_us: u64,
    /// ok, fail or unknown.
    pub outcome: String,
    /// The reply: 1/0 changed or not, mark_all_read's count, read_count's value.
    pub observed: i64,
    pub attempts: u32,
    /// Earlier attempts with an unknown outcome that were run again.
    pub unknown_attempts: u32,
}

impl From<&Event> for HistoryEvent {
    fn from(e: &Event) -> HistoryEvent {
        HistoryEvent {
            worker: e.worker,
            op: e.op.name().into(),
            user: e.user,
            id: e.id,
            invoke_us: e.invoke_us,
            complete_us: e.complete_us,
            outcome: e.outcome.name().into(),
            observed: e.observed,
            attempts: e.attempts,
            unknown_attempts: e.unknown_attempts,
        }
    }
}

/// The history as JSON Lines, one call per line, by completion time.
pub fn write_history(events: &[Event]) -> String {
    let mut out = Vec::with_capacity(events.len() * 160);
    write_history_to(events, &mut out).expect("writing to memory");
    String::from_utf8(out).expect("JSON is UTF-8")
}

/// Streams the history as JSON Lines into `w` (buffer it).
pub fn write_history_to(events: &[Event], w: &mut impl std::io::Write) -> std::io::Result<()> {
    for e in events {
        serde_json::to_writer(&mut *w, &HistoryEvent::from(e))?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// Reads `history.jsonl` back; an error names the line.
pub fn read_history(text: &str) -> Result<Vec<HistoryEvent>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// What the history recorded and what the read check found.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HistoryReport {
    pub events: u64,
    /// Calls left out because the history was full (then reads are not checked).
    pub dropped: u64,
    pub reads_checked: u64,
    pub read_violations: u64,
    /// Whether read violations count against the guarantee (exact strategies only).
    pub reads_judged: bool,
    /// Users whose read_count was compared with the truth after settle.
    pub settled_reads: u64,
    /// File beside report.json holding the history, when `--history` wrote one.
    pub file: Option<String>,
}

fn anomaly_report(a: &counterlab_core::Anomaly, figures: &BTreeMap<String, f64>, check: &CheckResult) -> Anomaly {
    let mut detail = match a.witnesses.first() {
        Some(w) => {
            let ops: Vec<String> = w
                .ops
                .iter()
                .map(|e| {
                    format!(
                        "{} w{} {}..{}us {} -> {}",
                        e.op,
                        e.worker,
                        e.invoke_us,
                        e.complete_us,
                        e.outcome.name(),
                        e.observed
                    )
                })
                .collect();
            let on = if w.id != 0 { format!(" notification {}", w.id) } else { String::new() };
            format!(
                "e.g. user {}{on}: expected {}, observed {}; {}{}{}",
                w.user,
                w.expected,
                w.observed,
                w.note,
                if ops.is_empty() { "" } else { "; " },
                ops.join(", ")
            )
        }
        None => String::new(),
    };
    if a.kind == counterlab_core::AnomalyKind::LostFlush
        && let Some(&n) = figures.get(Figure::LostFlushClaims.name()).filter(|n| **n > 0.0)
    {
        let lost = figures.get(Figure::LostFlushDeltaAbs.name()).copied().unwrap_or(0.0);
        detail = format!(
            "{n} flush claims left Redis and never reached SQL, |delta| {lost}; the check found drift_abs_total {} ({}); {detail}",
            check.drift_abs_total,
            if lost as u64 == check.drift_abs_total { "all of it explained" } else { "not all of it explained" }
        );
    }
    Anomaly {
        name: a.name.into(),
        meaning: a.kind.meaning().into(),
        count: a.count,
        detail,
        ops_to_detect: a.ops_to_detect,
        witnesses: a
            .witnesses
            .iter()
            .map(|w| WitnessReport {
                user: w.user,
                notification: w.id,
                expected: w.expected,
                observed: w.observed,
                note: w.note.clone(),
                ops: w.ops.iter().map(HistoryEvent::from).collect(),
            })
            .collect(),
    }
}

/// Fields missing from older reports (schema 1) read as their defaults.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FaultEvent {
    pub kind: String,
    /// Planned offset from the start of the load.
    pub at_ms: u64,
    /// Measured offset when it fired; None when the load ended first.
    pub fired_at_ms: Option<u64>,
    /// How long the fault lasts (a pause); None for instant faults.
    #[serde(default)]
    pub duration_ms: Option<u64>,
    pub outcome: String,
}

/// Fields missing from older reports (schema 1) read as their defaults.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct OpReport {
    pub count: u64,
    pub ok: u64,
    pub fail: u64,
    pub unknown: u64,
    pub errors: u64,
    pub skipped: u64,
    pub transitioned: u64,
    pub retries: u64,
    pub give_ups: u64,
    /// From the intended start (open loop) or the actual start (closed loop, where they
    /// coincide): the honest latency, free of coordinated omission.
    pub latency_us: Latency,
    /// From the moment a worker actually started the op (service time).
    #[serde(default)]
    pub uncorrected_latency_us: Latency,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
    /// The percentile curve: `[quantile, us]` at 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99,
    /// 0.995, 0.999, 0.9995, 0.9999 and 1.0 (the max); empty when nothing was recorded.
    #[serde(default)]
    pub curve: Vec<[f64; 2]>,
}

/// One `[[expect]]` entry judged on one strategy row.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExpectationResult {
    /// What was expected, e.g. `direct-update: verdict drift-expected on postgres, mysql`.
    pub expected: String,
    /// False when the row had no evidence to judge it by (`NO EVIDENCE`): then it is
    /// neither met nor unmet, and the report lists it as not judged.
    #[serde(default = "judged_by_default")]
    pub judged: bool,
    pub met: bool,
    /// What the row showed instead, or how it met it.
    pub detail: String,
}

fn judged_by_default() -> bool {
    true
}

/// The quantiles of a latency curve (1.0 is the max).
pub const CURVE_QUANTILES: [f64; 12] = [0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 1.0];

/// Percentiles of a microsecond histogram.
fn latency(h: &Histogram<u64>) -> Latency {
    if h.is_empty() {
        return Latency { p50: 0, p90: 0, p99: 0, p999: 0, max: 0, mean: 0.0, curve: Vec::new() };
    }
    Latency {
        p50: h.value_at_quantile(0.50),
        p90: h.value_at_quantile(0.90),
        p99: h.value_at_quantile(0.99),
        p999: h.value_at_quantile(0.999),
        max: h.max(),
        mean: h.mean(),
        curve: CURVE_QUANTILES.iter().map(|q| [*q, h.value_at_quantile(*q) as f64]).collect(),
    }
}

fn stage_report(r: &StageResult) -> StageReport {
    let (model, rate_from, rate_to, arrival) = match r.stage.model {
        LoadModel::Closed { .. } => ("closed", None, None, None),
        LoadModel::Open { rate_from, rate_to, poisson, .. } => {
            ("open", Some(rate_from), Some(rate_to), Some(if poisson { "poisson" } else { "constant" }.to_string()))
        }
    };
    let secs = r.elapsed.as_secs_f64();
    let rate_secs = rate_window(r);
    let all = r.all_latency();
    StageReport {
        name: r.stage.name.clone(),
        measured: r.stage.measured,
        model: model.into(),
        workers: r.stage.model.workers(),
        rate_from,
        rate_to,
        arrival,
        duration_s: secs,
        planned_s: match r.stage.stop {
            Stop::Duration(d) => Some(d.as_secs_f64()),
            Stop::Ops(_) => None,
        },
        scheduled: r.scheduled,
        ops: r.issued(),
        dropped: r.dropped,
        achieved_ops_per_s: if rate_secs > 0.0 { r.issued() as f64 / rate_secs } else { 0.0 },
        p50_us: if all.is_empty() { 0 } else { all.value_at_quantile(0.5) },
        p99_us: if all.is_empty() { 0 } else { all.value_at_quantile(0.99) },
    }
}

/// The load model in words, from the measured stages.
fn load_model(load: &LoadResult) -> String {
    let measured: Vec<&StageResult> = load.stages.iter().filter(|s| s.stage.measured).collect();
    let parts: Vec<String> = measured
        .iter()
        .map(|s| match s.stage.model {
            LoadModel::Closed { workers } => format!("closed loop, {workers} workers"),
            LoadModel::Open { rate_from, rate_to, poisson, max_in_flight } => {
                let arrival = if poisson { "poisson" } else { "constant" };
                if rate_from == rate_to {
                    format!("open loop, {rate_from} ops/s {arrival}, <= {max_in_flight} in flight")
                } else {
                    format!("open loop, {rate_from} -> {rate_to} ops/s {arrival}, <= {max_in_flight} in flight")
                }
            }
        })
        .collect();
    let mut out: Vec<String> = Vec::new();
    for p in parts {
        if out.last() != Some(&p) {
            out.push(p);
        }
    }
    let warm = load.stages.iter().filter(|s| !s.stage.measured).map(|s| s.elapsed.as_secs_f64()).sum::<f64>();
    let mut text = out.join("; then ");
    if measured.len() > 1 {
        text = format!("{} stages: {text}", measured.len());
    }
    if warm > 0.0 {
        text += &format!(" (after {warm:.1} s warm-up)");
    }
    text
}

/// The time an achieved rate is over: an open stage's planned length (its schedule's
/// window; the drain of its last ops after it is not the schedule's), else the elapsed time.
fn rate_window(r: &StageResult) -> f64 {
    match (r.stage.model, r.stage.stop) {
        (LoadModel::Open { .. }, Stop::Duration(d)) => d.as_secs_f64(),
        _ => r.elapsed.as_secs_f64(),
    }
}

fn open_loop_report(load: &LoadResult) -> Option<OpenLoopReport> {
    if !load.is_open_loop() {
        return None;
    }
    let (scheduled, issued, dropped, late, lag) = load.open_loop_totals();
    let secs: f64 = load
        .stages
        .iter()
        .filter(|s| s.stage.measured && matches!(s.stage.model, LoadModel::Open { .. }))
        .map(rate_window)
        .sum();
    let achieved = if secs > 0.0 { issued as f64 / secs } else { 0.0 };
    let target = load.target_rate();
    Some(OpenLoopReport {
        scheduled,
        issued,
        dropped,
        late,
        schedule_lag_us: latency(&lag),
        target_ops_per_s: target,
        achieved_ops_per_s: achieved,
        achieved_over_target: if target > 0.0 { achieved / target } else { 0.0 },
    })
}

/// A sampler point as the report shows it.
fn series_point(s: &Sample) -> SeriesPoint {
    SeriesPoint {
        t_s: s.t_s,
        dt_s: s.dt_s,
        phase: s.phase.clone(),
        ops: s.ops,
        errors: s.errors,
        ops_per_s: s.ops_per_s(),
        scheduled: s.scheduled,
        dropped: s.dropped,
        p50_us: s.p50_us,
        p99_us: s.p99_us,
        max_us: s.max_us,
        pending: s.pending,
        drift: s.drift,
    }
}

/// Each operation kind's counts and latencies, by name (every kind, run or not).
fn op_reports(load: &LoadResult) -> BTreeMap<String, OpReport> {
    OpKind::ALL
        .iter()
        .map(|k| {
            let s = load.op(*k);
            let r = OpReport {
                count: s.count,
                ok: s.ok,
                fail: s.fail,
                unknown: s.unknown,
                errors: s.errors(),
                skipped: s.skipped,
                transitioned: s.transitioned,
                retries: s.retries,
                give_ups: s.give_ups,
                latency_us: latency(&s.latency_us),
                uncorrected_latency_us: latency(&s.service_us),
            };
            (k.name().to_string(), r)
        })
        .collect()
}

/// Failed attempts over all operation kinds, by error class (every class, zero or not).
fn errors_by_class(load: &LoadResult) -> BTreeMap<String, u64> {
    ErrorClass::ALL
        .iter()
        .map(|c| (c.name().to_string(), load.ops.iter().map(|s| s.errors_by_class[c.index()]).sum()))
        .collect()
}

/// What the CLI knows about one strategy run beyond the load and the check.
pub struct StrategyRun<'a> {
    pub info: StrategyInfo,
    pub backend: Backend,
    pub isolation: Isolation,
    pub isolation_in_effect: &'a str,
    pub namespace: &'a str,
    pub namespace_kept: bool,
    pub identity: String,
    /// The verdict, judged once from everything above.
    pub judgement: counterlab_core::Judgement,
    pub seed_s: f64,
    pub load: &'a LoadResult,
    pub settle_s: f64,
    pub settle_error: Option<String>,
    pub check_s: f64,
    pub faults: Vec<FaultEvent>,
    pub figures: Vec<(Figure, f64)>,
    pub check: &'a CheckResult,
    pub series: &'a [Sample],
    pub hdr_log: Option<String>,
    /// The named anomalies the history checks found (see `core::classify`).
    pub anomalies: &'a [counterlab_core::Anomaly],
    pub history: HistoryReport,
}

impl StrategyReport {
    /// `client CPU 52.3 us per op over the load (this process; with SQLite, the database's
    /// work too)`, for the Markdown and HTML reports.
    pub fn client_cpu_line(&self) -> Option<String> {
        let us = self.client_cpu_us_per_op?;
        let whose = match self.backend.sql {
            counterlab_core::Dialect::Sqlite => "this process, SQLite's work included",
            _ => "this process",
        };
        Some(format!("client CPU {us:.1} us per op over the load ({whose})"))
    }

    /// `<strategy> on <backend> at <isolation>`: how every renderer names a row.
    pub fn label(&self) -> String {
        let reads = if self.read_from == ReadFrom::Primary {
            String::new()
        } else {
            format!(", reads from {}", self.read_from)
        };
        format!("{} on {} at {}{reads}", self.strategy, self.backend, self.isolation)
    }

    /// The strategy's name as the decision view shows it: `<strategy>` or, when its reads
    /// went to a replica, `<strategy> (reads: replica)`.
    pub fn display_name(&self) -> String {
        match self.read_from {
            ReadFrom::Primary => self.strategy.clone(),
            from => format!("{} (reads: {from})", self.strategy),
        }
    }

    /// The worst p99 over the ops that ran: a row's one latency figure.
    pub fn p99_all(&self) -> u64 {
        self.ops.values().filter(|o| o.count > 0).map(|o| o.latency_us.p99).max().unwrap_or(0)
    }

    pub fn new(run: StrategyRun<'_>) -> StrategyReport {
        let load = run.load;
        let permission_denied: u64 = load.ops.iter().map(|s| s.errors_by_class[ErrorClass::Permission.index()]).sum();
        let c = run.check;
        let figures: BTreeMap<String, f64> = run.figures.iter().map(|(k, v)| (k.name().to_string(), *v)).collect();
        let stages: Vec<StageReport> = load.stages.iter().map(stage_report).collect();
        let series: Vec<SeriesPoint> = run.series.iter().map(series_point).collect();
        StrategyReport {
            strategy: run.info.name.to_string(),
            backend: run.backend,
            isolation: run.isolation,
            isolation_in_effect: run.isolation_in_effect.to_string(),
            guarantee: run.info.guarantee,
            moving_parts: Vec::new(),
            namespace: run.namespace.to_string(),
            namespace_kept: run.namespace_kept,
            identity: run.identity,
            cleanup_error: None,
            permission_denied,
            seed_s: run.seed_s,
            settled: None,
            client_cpu_us_per_op: load.client_cpu_us_per_op(),
            load_s: load.elapsed.as_secs_f64(),
            ops_total: load.total_ops(),
            throughput_ops_per_s: load.throughput_ops_per_s(),
            errors_total: load.ops.iter().map(|s| s.errors()).sum(),
            retries: load.ops.iter().map(|s| s.retries).sum(),
            give_ups: load.ops.iter().map(|s| s.give_ups).sum(),
            errors_by_class: errors_by_class(load),
            error_samples: load.error_samples.clone(),
            ops: op_reports(load),
            settle_s: run.settle_s,
            settle_error: run.settle_error,
            check_s: run.check_s,
            drift_note: None,
            faults: run.faults,
            anomalies: run.anomalies.iter().map(|a| anomaly_report(a, &figures, c)).collect(),
            history: run.history,
            thresholds: Vec::new(),
            expectations: Vec::new(),
            explored: None,
            figures,
            load_model: load_model(load),
            stall: decision::stall::detect(&series, &stages),
            stages,
            open_loop: open_loop_report(load),
            series,
            hdr_log: run.hdr_log,
            repeats: Vec::new(),
            read_from: ReadFrom::Primary,
            staleness: None,
            agents: None,
            cost: None,
            check: CheckReport::of(c, &run.judgement),
        }
    }
}

/// report.json: the report, and the decision every view opens with (`decision`,
/// derived: it is not read back).
pub fn render_json(report: &Report) -> String {
    let mut v = serde_json::to_value(report).expect("report serializes");
    v["decision"] = decision::decision_json(report);
    serde_json::to_string_pretty(&v).expect("report serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use counterlab_core::Outcome;

    #[test]
    fn a_history_round_trips_through_json_lines_and_bad_lines_are_named() {
        let e = |op, outcome, observed| Event {
            worker: 3,
            op,
            user: 7,
            id: 70,
            invoke_us: 10,
            complete_us: 25,
            outcome,
            observed,
            attempts: 2,
            unknown_attempts: 1,
        };
        let events = [e(OpKind::MarkRead, Outcome::Ok, 1), e(OpKind::ReadCount, Outcome::Unknown, 0)];
        let text = write_history(&events);
        assert_eq!(text.lines().count(), 2);
        assert!(text.starts_with(r#"{"worker":3,"op":"mark_read","user":7,"id":70,"invoke_us":10,"complete_us":25,"outcome":"ok","observed":1,"attempts":2,"unknown_attempts":1}"#));
        let back = read_history(&text).unwrap();
        assert_eq!(back, events.iter().map(HistoryEvent::from).collect::<Vec<_>>());
        let bad = format!("{text}{{\"worker\":1}}\n");
        assert!(read_history(&bad).unwrap_err().starts_with("line 3: missing field"));
    }
}
