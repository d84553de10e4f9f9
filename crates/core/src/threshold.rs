//! Thresholds (k6-like): the metrics a scenario may limit and one limit as the plan holds
//! it; `counterlab-report` evaluates them on a row.

crate::named_enum! {
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

/// One threshold as the plan holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    pub metric: Metric,
    /// For the latency metrics: the operation; None means the worst operation.
    pub op: Option<String>,
    /// Strategies it applies to; empty means all.
    pub strategies: Vec<String>,
    pub limit: f64,
}
