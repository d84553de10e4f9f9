//! The plan's workload as the load driver's configuration: stages, mix, skew, retries
//! and bounds.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use counterlab_plan::{Arrival, RunPlan, SkewKind, StageEnd, StageLoad};
use counterlab_sim::{DriverConfig, LoadModel, Mix, RetryPolicy, Skew, Stage, Stop};

pub(super) fn driver_config(plan: &RunPlan, cancel: Arc<AtomicBool>, history_limit: u64) -> DriverConfig {
    let w = &plan.workload;
    let stages = w
        .stages
        .iter()
        .map(|st| Stage {
            name: st.name.clone(),
            measured: st.measured,
            stop: match st.end {
                StageEnd::Duration(d) => Stop::Duration(Duration::from_secs_f64(d)),
                StageEnd::Ops(n) => Stop::Ops(n),
            },
            model: match st.load {
                StageLoad::Open { rate, target } => LoadModel::Open {
                    rate_from: rate,
                    rate_to: target,
                    poisson: w.arrival == Arrival::Poisson,
                    max_in_flight: w.n_workers,
                },
                StageLoad::Closed { workers } => LoadModel::Closed { workers },
            },
        })
        .collect();
    DriverConfig {
        seed: plan.seed,
        stages,
        mix: Mix { weights: w.mix_weights() },
        skew: match (w.skew, w.zipf_exponent) {
            (SkewKind::Zipf, Some(exponent)) => Skew::Zipf { exponent },
            _ => Skew::Uniform,
        },
        dup_k: w.dup_k,
        op_timeout: Duration::from_millis(w.op_timeout_ms),
        cancel,
        retry: RetryPolicy {
            max_attempts: plan.retry.max_attempts,
            backoff_base: Duration::from_millis(plan.retry.backoff_base_ms),
            backoff_max: Duration::from_millis(plan.retry.backoff_max_ms),
            on_unknown: plan.retry.on_unknown,
        },
        max_wait: Duration::from_millis(w.max_wait_ms),
        history_limit,
        history_sink: None,
        segment: counterlab_sim::Segment::WHOLE,
        batch: w.redis_batch,
    }
}
