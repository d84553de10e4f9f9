//! Thresholds (k6-like): limits on a strategy's latency, throughput, errors, drift and
//! retries, evaluated on its report; a breach names the metric and by how much.

use serde::{Deserialize, Serialize};

use crate::StrategyReport;

counterlab_core::named_enum! {
    /// The metrics a threshold may limit.
    pub enum Metric {
        P99Us = "p99_us",
        P999Us = "p999_us",
        MinOpsPerS = "min_ops_per_s",
        MaxErrorRate = "max_error_rate",
        MaxDrift = "max_drift",
        MaxRetries = "max_retries",
        MaxGiveUps = "max_give_ups",
        MaxDropRate = "max_drop_rate",
    }
}

impl Metric {
    /// Whether the limit is an upper bound (all but the throughput floor).
    pub fn upper(self) -> bool {
        self != Metric::MinOpsPerS
    }

    /// A latency percentile, which may name one op.
    pub fn is_latency(self) -> bool {
        matches!(self, Metric::P99Us | Metric::P999Us)
    }
}

impl Serialize for Metric {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Metric {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Metric, D::Error> {
        let name = String::deserialize(d)?;
        Metric::from_name(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown metric {name:?}")))
    }
}

/// One threshold as the plan holds it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Threshold {
    pub metric: Metric,
    /// For the latency metrics: the operation; None means the worst operation.
    pub op: Option<String>,
    /// Strategies it applies to; empty means all.
    pub strategies: Vec<String>,
    pub limit: f64,
}

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
