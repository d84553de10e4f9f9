//! The simulator: a seeded workload generator, the pool of live notification ids the
//! workload draws from, and the tokio driver (closed and open loop, in stages) that times every operation.
//! No file I/O and no serde: the CLI turns results into reports.

mod driver;
mod metrics;
mod monitor;
mod null;
mod pool;
mod workload;

pub use counterlab_core::Rng;
pub use driver::{
    DriverConfig, HISTORY_CHUNK, HistorySink, LATE_AFTER, LoadModel, LoadResult, RetryPolicy, Stage, StageResult, Stop,
    run_load,
};
pub use metrics::{OpStats, Tries, new_latency_histogram};
pub use monitor::{Monitor, SETTLE, Sample, Sampler, SamplerConfig, Series, WARMUP};
pub use null::NullStrategy;
pub use pool::IdPool;
pub use workload::{Mix, OpGen, PlannedOp, Segment, Skew, UserPicker};
