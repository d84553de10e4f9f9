//! The live status of a run, for a progress display or a metrics endpoint: which cell
//! (i of N), its phase, how far the load is, and the last sampled interval's figures.

use std::sync::Arc;

use counterlab_plan::RunPlan;
use counterlab_sim::Sample;

/// Where the run is, sent at each phase change and each sampled interval.
#[derive(Clone, Debug)]
pub struct Status {
    /// 1-based index of the cell (strategy x backend x isolation level) running.
    pub cell: usize,
    /// Cells the plan runs (skipped ones not counted).
    pub cells: usize,
    pub strategy: String,
    /// `postgres`, or `postgres+redis` when the strategy also uses Redis.
    pub backend: String,
    pub isolation: String,
    /// `seed`, `load` (or the stage's name, `warmup`), `settle`, `check`, `teardown`.
    pub phase: String,
    /// Seconds since the load began (0 before it).
    pub elapsed_s: f64,
    /// The load's planned length, when its stages are timed.
    pub planned_s: Option<f64>,
    /// The load's planned operations, when its stages count them.
    pub planned_ops: Option<u64>,
    /// Ops and errors completed so far in this cell's measured load (warm-up left
    /// out), and per op kind (`OpKind::ALL` order).
    pub ops: u64,
    pub errors: u64,
    pub ops_by_kind: Vec<u64>,
    /// The last closed interval (None before the first).
    pub sample: Option<Sample>,
}

/// A sink for the live status.
pub type Progress = Arc<dyn Fn(&Status) + Send + Sync>;

/// The planned length (seconds) and operations of the plan's load: Some when every
/// stage is bounded that way.
pub(super) fn planned(plan: &RunPlan) -> (Option<f64>, Option<u64>) {
    let stages = &plan.workload.stages;
    let secs: Option<f64> = stages.iter().map(|s| s.duration_s()).sum();
    let ops: Option<u64> = stages
        .iter()
        .map(|s| match s.end {
            counterlab_plan::StageEnd::Ops(n) => Some(n),
            counterlab_plan::StageEnd::Duration(_) => None,
        })
        .sum();
    (secs, ops)
}

impl Status {
    /// Adds a closed interval: its counts to the totals (not a warm-up's: the report
    /// does not count those either), and it as the latest.
    pub(super) fn add(&mut self, s: &Sample) {
        self.phase = s.phase.clone();
        self.elapsed_s = s.t_s;
        self.sample = Some(s.clone());
        if s.phase == counterlab_sim::WARMUP {
            return;
        }
        self.ops += s.ops;
        self.errors += s.errors;
        if self.ops_by_kind.len() < s.ops_by_kind.len() {
            self.ops_by_kind.resize(s.ops_by_kind.len(), 0);
        }
        for (a, b) in self.ops_by_kind.iter_mut().zip(&s.ops_by_kind) {
            *a += b;
        }
    }
}
