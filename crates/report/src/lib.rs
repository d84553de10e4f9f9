//! The report: a serializable summary of a run (what was run, on what, with which
//! results), built from simulator and checker output, rendered as JSON, Markdown and a
//! terminal table. Rendering returns strings; the CLI alone writes files.

mod render;
mod thresholds;

use std::collections::BTreeMap;

use counterlab_core::{CheckResult, ErrorClass, OpKind, StrategyInfo};
use counterlab_sim::{LoadResult, OpStats};
use serde::{Deserialize, Serialize};

pub use render::{render_markdown, render_terminal};
pub use thresholds::{METRICS, Threshold, ThresholdResult, evaluate};

/// Version of the report.json layout; bumped on any incompatible change.
pub const REPORT_SCHEMA_VERSION: u32 = 1;

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
    pub skipped: Vec<Skipped>,
    /// True when every strategy's verdict matches its declared guarantee.
    pub all_guarantees_held: bool,
    /// Thresholds breached over all strategies (any makes the exit code 1).
    pub thresholds_breached: u64,
    /// Ctrl-C stopped the run early: the strategies listed were checked and torn down,
    /// later ones did not run.
    pub interrupted: bool,
    /// The command that replays this run.
    pub replay_command: String,
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
    pub backend: String,
    pub isolation: String,
    pub reason: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StrategyReport {
    pub strategy: String,
    pub backend: String,
    /// The level the namespace's connections were set to.
    pub isolation: String,
    /// The level the server reported for those connections.
    pub isolation_in_effect: String,
    pub guarantee: String,
    pub namespace: String,
    /// True when `--keep` left the namespace in place.
    pub namespace_kept: bool,
    pub seed_s: f64,
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
    /// Faults fired during the load, in order.
    pub faults: Vec<FaultEvent>,
    /// Strategy-specific figures: flushes, lost flush claims, repairs, heal time...
    pub figures: BTreeMap<String, f64>,
    /// Named anomalies the strategy's own accounting explains (e.g. `lost_flush`).
    pub anomalies: Vec<Anomaly>,
    /// The scenario's thresholds that apply to this strategy, evaluated.
    pub thresholds: Vec<ThresholdResult>,
    pub check: CheckReport,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Anomaly {
    pub name: String,
    pub count: u64,
    pub detail: String,
}

/// Anomalies named from a strategy's figures and its check.
fn anomalies(figures: &BTreeMap<String, f64>, check: &CheckResult) -> Vec<Anomaly> {
    let mut out = Vec::new();
    if let Some(&n) = figures.get("lost_flush_claims").filter(|n| **n > 0.0) {
        let lost = figures.get("lost_flush_delta_abs").copied().unwrap_or(0.0);
        out.push(Anomaly {
            name: "lost_flush".into(),
            count: n as u64,
            detail: format!(
                "{n} flush claims left Redis and never reached SQL, |delta| {lost}; the check found drift_abs_total {} ({})",
                check.drift_abs_total,
                if lost as u64 == check.drift_abs_total { "all of it explained" } else { "not all of it explained" }
            ),
        });
    }
    out
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultEvent {
    pub kind: String,
    /// Planned offset from the start of the load.
    pub at_ms: u64,
    /// Measured offset when it fired; None when the load ended first.
    pub fired_at_ms: Option<u64>,
    pub outcome: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
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
    pub latency_us: Latency,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Latency {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckReport {
    pub users_checked: u64,
    pub users_mismatched: u64,
    pub over_counted: u64,
    pub under_counted: u64,
    pub negative_counters: u64,
    pub missing_counters: u64,
    pub drift_abs_total: u64,
    pub drift_net: i64,
    pub worst_users: Vec<WorstUser>,
    pub verdict: String,
    pub matches_guarantee: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorstUser {
    pub user: i64,
    /// None when the user had no counter at all.
    pub counter: Option<i64>,
    pub truth: i64,
}

fn latency(s: &OpStats) -> Latency {
    let h = &s.latency_us;
    if h.is_empty() {
        return Latency { p50: 0, p90: 0, p99: 0, p999: 0, max: 0, mean: 0.0 };
    }
    Latency {
        p50: h.value_at_quantile(0.50),
        p90: h.value_at_quantile(0.90),
        p99: h.value_at_quantile(0.99),
        p999: h.value_at_quantile(0.999),
        max: h.max(),
        mean: h.mean(),
    }
}

/// What the CLI knows about one strategy run beyond the load and the check.
pub struct StrategyRun<'a> {
    pub info: StrategyInfo,
    pub backend: &'a str,
    pub isolation: &'a str,
    pub isolation_in_effect: &'a str,
    pub namespace: &'a str,
    pub namespace_kept: bool,
    pub seed_s: f64,
    pub load: &'a LoadResult,
    pub settle_s: f64,
    pub settle_error: Option<String>,
    pub faults: Vec<FaultEvent>,
    pub figures: Vec<(&'static str, f64)>,
    pub check: &'a CheckResult,
}

impl StrategyReport {
    pub fn new(run: StrategyRun<'_>) -> StrategyReport {
        let load = run.load;
        let ops = OpKind::ALL
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
                    latency_us: latency(s),
                };
                (k.name().to_string(), r)
            })
            .collect();
        let errors_by_class = ErrorClass::ALL
            .iter()
            .map(|c| (c.name().to_string(), load.ops.iter().map(|s| s.errors_by_class[c.index()]).sum()))
            .collect();
        let c = run.check;
        let figures: BTreeMap<String, f64> = run.figures.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        StrategyReport {
            strategy: run.info.name.to_string(),
            backend: run.backend.to_string(),
            isolation: run.isolation.to_string(),
            isolation_in_effect: run.isolation_in_effect.to_string(),
            guarantee: run.info.guarantee.name().to_string(),
            namespace: run.namespace.to_string(),
            namespace_kept: run.namespace_kept,
            seed_s: run.seed_s,
            load_s: load.elapsed.as_secs_f64(),
            ops_total: load.total_ops(),
            throughput_ops_per_s: load.throughput_ops_per_s(),
            errors_total: load.ops.iter().map(|s| s.errors()).sum(),
            retries: load.ops.iter().map(|s| s.retries).sum(),
            give_ups: load.ops.iter().map(|s| s.give_ups).sum(),
            errors_by_class,
            error_samples: load.error_samples.clone(),
            ops,
            settle_s: run.settle_s,
            settle_error: run.settle_error,
            faults: run.faults,
            anomalies: anomalies(&figures, c),
            thresholds: Vec::new(),
            figures,
            check: CheckReport {
                users_checked: c.users_checked,
                users_mismatched: c.users_mismatched,
                over_counted: c.over_counted,
                under_counted: c.under_counted,
                negative_counters: c.negative_counters,
                missing_counters: c.missing_counters,
                drift_abs_total: c.drift_abs_total,
                drift_net: c.drift_net,
                worst_users: c
                    .worst
                    .iter()
                    .map(|w| WorstUser { user: w.user, counter: w.counter, truth: w.truth })
                    .collect(),
                verdict: c.verdict.name().to_string(),
                matches_guarantee: c.verdict.matches_guarantee(),
            },
        }
    }
}

pub fn render_json(report: &Report) -> String {
    serde_json::to_string_pretty(report).expect("report serializes")
}
