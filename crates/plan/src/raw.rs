//! The raw TOML shape of a scenario, as serde reads it (with spans for errors): only
//! validated into a `RunPlan` by the resolvers, never used past parsing.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawScenario {
    pub(crate) name: Option<String>,
    pub(crate) seed: Option<u64>,
    pub(crate) repeat: Option<Spanned<u32>>,
    pub(crate) repeat_until_settled: Option<Spanned<u32>>,
    pub(crate) strategies: Option<Vec<Spanned<String>>>,
    pub(crate) backends: Option<Vec<Spanned<String>>>,
    pub(crate) servers: Option<Spanned<String>>,
    pub(crate) isolation: Option<Vec<Spanned<String>>>,
    pub(crate) strategy_isolation: Option<BTreeMap<String, Spanned<Vec<Spanned<String>>>>>,
    pub(crate) retry: Option<Spanned<RawRetry>>,
    pub(crate) expect_drift: Option<Vec<Spanned<String>>>,
    pub(crate) expect_anomaly: Option<Spanned<String>>,
    pub(crate) redis: Option<Spanned<RawRedis>>,
    pub(crate) replica: Option<Spanned<RawReplica>>,
    pub(crate) faults: Option<Vec<Spanned<RawFault>>>,
    pub(crate) thresholds: Option<Vec<Spanned<RawThreshold>>>,
    pub(crate) verdict: Option<Spanned<RawVerdict>>,
    pub(crate) expect: Option<Vec<Spanned<RawExpect>>>,
    pub(crate) data: RawData,
    pub(crate) workload: Spanned<RawWorkload>,
    pub(crate) strategy: Option<BTreeMap<String, Spanned<crate::custom::RawStrategy>>>,
    pub(crate) strategy_files: Option<Vec<Spanned<String>>>,
    pub(crate) explore: Option<Spanned<RawExplore>>,
}

/// `[explore]`: what `counterlab explore` runs (its flags override each).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawExplore {
    pub(crate) sessions: Option<Spanned<u8>>,
    pub(crate) budget: Option<Spanned<u64>>,
    pub(crate) preemptions: Option<Spanned<u32>>,
    pub(crate) pairs: Option<Vec<Spanned<String>>>,
    pub(crate) with_run: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRedis {
    pub(crate) flush_interval_ms: Option<Spanned<u64>>,
    pub(crate) flush_batch: Option<Spanned<u32>>,
    pub(crate) reconcile_interval_ms: Option<Spanned<u64>>,
    pub(crate) settle_timeout_ms: Option<Spanned<u64>>,
    pub(crate) cache_delay_ms: Option<Spanned<u64>>,
    pub(crate) cache_ttl_ms: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReplica {
    pub(crate) read_from: Option<Vec<Spanned<String>>>,
    pub(crate) stale_read_bound_ms: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFault {
    pub(crate) kind: Spanned<String>,
    pub(crate) at_ms: Spanned<u64>,
    pub(crate) times: Option<Spanned<u32>>,
    pub(crate) duration_ms: Option<Spanned<u64>>,
    pub(crate) op: Option<Spanned<String>>,
    pub(crate) strategies: Option<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawVerdict {
    pub(crate) max_error_rate: Option<Spanned<f64>>,
    pub(crate) min_ops_per_kind: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawThreshold {
    pub(crate) metric: Spanned<String>,
    pub(crate) op: Option<Spanned<String>>,
    pub(crate) strategies: Option<Vec<Spanned<String>>>,
    pub(crate) limit: Spanned<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetry {
    pub(crate) max_attempts: Option<Spanned<u32>>,
    pub(crate) backoff_base_ms: Option<Spanned<u64>>,
    pub(crate) backoff_max_ms: Option<Spanned<u64>>,
    pub(crate) on_unknown: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawData {
    pub(crate) users: Spanned<u64>,
    pub(crate) notifications_per_user: Spanned<u64>,
    #[serde(default)]
    pub(crate) initial_read_per_user: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWorkload {
    pub(crate) workers: Spanned<u32>,
    pub(crate) duration_s: Option<Spanned<f64>>,
    pub(crate) ops: Option<Spanned<u64>>,
    pub(crate) dup_k: Option<Spanned<u32>>,
    pub(crate) op_timeout_ms: Option<Spanned<u64>>,
    pub(crate) connections: Option<Spanned<u32>>,
    /// Ops that share one Redis connection (pipelined by the multiplexed connection).
    pub(crate) redis_pipeline: Option<Spanned<u32>>,
    /// Ops a worker sends at once as one Redis pipeline.
    pub(crate) redis_batch: Option<Spanned<u32>>,
    pub(crate) skew: Option<Spanned<String>>,
    pub(crate) zipf_exponent: Option<Spanned<f64>>,
    /// None: `DEFAULT_MIX`.
    pub(crate) mix: Option<Spanned<RawMix>>,
    pub(crate) rate: Option<Spanned<f64>>,
    pub(crate) warmup_s: Option<Spanned<f64>>,
    pub(crate) arrival: Option<Spanned<String>>,
    pub(crate) max_wait_ms: Option<Spanned<u64>>,
    pub(crate) sample_interval_ms: Option<Spanned<u64>>,
    pub(crate) sample_drift: Option<bool>,
    pub(crate) settle_after_seed: Option<bool>,
    pub(crate) cost_baseline_ms: Option<Spanned<u64>>,
    pub(crate) stages: Option<Spanned<Vec<Spanned<RawStage>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStage {
    pub(crate) name: Option<String>,
    pub(crate) duration_s: Spanned<f64>,
    pub(crate) rate: Option<Spanned<f64>>,
    pub(crate) target: Option<Spanned<f64>>,
    pub(crate) workers: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMix {
    pub(crate) create: Option<u32>,
    pub(crate) mark_read: Option<u32>,
    pub(crate) mark_read_dup: Option<u32>,
    pub(crate) delete: Option<u32>,
    pub(crate) mark_all_read: Option<u32>,
    pub(crate) read_count: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawExpect {
    pub(crate) strategy: Spanned<String>,
    pub(crate) backends: Option<Vec<Spanned<String>>>,
    pub(crate) isolation: Option<Vec<Spanned<String>>>,
    pub(crate) verdict: Option<Spanned<String>>,
    pub(crate) anomaly: Option<Spanned<String>>,
}
