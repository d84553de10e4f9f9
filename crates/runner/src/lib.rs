//! Runs a resolved `RunPlan`: for each backend x strategy x isolation level a fresh
//! namespace, the seed, the load, the checks and the teardown, assembled into a
//! `Report`; also the capacity search (many short open-loop runs per design), the bug
//! zoo (many plans over many seeds) and the cleaner of what killed runs left behind. Writes no report files: the binary does.

pub mod capacity;
pub mod clean;
pub mod clock;
pub mod containers;
pub mod run;
pub mod spill;
pub mod zoo;
