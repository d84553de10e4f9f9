//! counterlab's command-line side: scenario loading, the run orchestration (namespace
//! per strategy, seed, load, check, teardown) and report assembly. The only crate that
//! reads scenario files and writes reports.

pub mod clean;
pub mod clock;
mod custom;
pub mod run;
pub mod scenario;
pub mod zoo;

pub use counterlab_strategies::{CATALOG, find as find_strategy};
