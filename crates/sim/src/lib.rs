//! The simulator: a seeded workload generator, the pool of live notification ids the
//! workload draws from, and the closed-loop tokio driver that times every operation.
//! No file I/O and no serde: the CLI turns results into reports.

mod driver;
mod metrics;
mod pool;
mod rng;
mod workload;

pub use driver::{DriverConfig, LoadResult, RetryPolicy, Stop, run_load};
pub use metrics::{OpStats, Tries, new_latency_histogram};
pub use pool::IdPool;
pub use rng::Rng;
pub use workload::{Mix, OpGen, PlannedOp, Skew, UserPicker};
