//! counterlab's library facade for the binary and the tests: the plan (scenario files
//! and flags) and the runner (orchestration, the zoo, the cleaner) under the paths the
//! command line uses.

pub use counterlab_plan as scenario;
pub use counterlab_runner::{capacity, clean, clock, containers, run, zoo};
pub use counterlab_strategies::{BUILTINS, Recipe, Registry, find as find_strategy};
