//! Thresholds (k6-like): limits on a strategy's latency, throughput, errors, drift and
//! retries, evaluated on its report; a breach names the metric and by how much.

use serde::{Deserialize, Serialize};

use crate::StrategyReport;

pub use counterlab_core::{Metric, Threshold};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ThresholdResult {
    pub metric: String,
    pub op: Option<String>,
    pub limit: f64,
    pub value: f64,
    pub passed: bool,
    /// Human sentence: the metric, value, limit and the excess in percent.
    pub detail: String,
}

/// Evaluates `t` on one strategy's report; None when it does not apply to it.
pub fn evaluate(t: &Threshold, s: &StrategyReport) -> Option<ThresholdResult> {
    if !t.strategies.is_empty() && !t.strategies.contains(&s.strategy) {
        return None;
    }
    let upper = t.metric.upper();
    let latency = |pick: fn(&crate::Latency) -> u64| -> f64 {
        match &t.op {
            Some(op) => s.ops.get(op).map_or(0, |o| pick(&o.latency_us)) as f64,
            None => s.ops.values().filter(|o| o.count > 0).map(|o| pick(&o.latency_us)).max().unwrap_or(0) as f64,
        }
    };
    let value = match t.metric {
        Metric::P99Us => latency(|l| l.p99),
        Metric::P999Us => latency(|l| l.p999),
        Metric::MinOpsPerS => s.throughput_ops_per_s,
        Metric::MaxErrorRate => {
            if s.ops_total == 0 {
                0.0
            } else {
                s.errors_total as f64 / s.ops_total as f64
            }
        }
        Metric::MaxDrift => s.check.drift_abs_total as f64,
        Metric::MaxRetries => s.retries as f64,
        Metric::MaxGiveUps => s.give_ups as f64,
        // Open loop: scheduled ops never started, as a fraction of scheduled (0 closed loop).
        Metric::MaxDropRate => match &s.open_loop {
            Some(o) if o.scheduled > 0 => o.dropped as f64 / o.scheduled as f64,
            _ => 0.0,
        },
    };
    let passed = if upper { value <= t.limit } else { value >= t.limit };
    let what = match &t.op {
        Some(op) => format!("{} of {op}", t.metric),
        None => t.metric.name().to_string(),
    };
    let detail = if passed {
        format!("{what} = {value} within {}", t.limit)
    } else {
        let excess = if t.limit != 0.0 {
            format!(" ({:+.1}%)", (value - t.limit) / t.limit.abs() * 100.0)
        } else {
            String::new()
        };
        format!("{what} = {value} breaches {} {}{excess}", if upper { "maximum" } else { "minimum" }, t.limit)
    };
    Some(ThresholdResult {
        metric: t.metric.name().to_string(),
        op: t.op.clone(),
        limit: t.limit,
        value,
        passed,
        detail,
    })
}
