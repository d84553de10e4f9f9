//! Command-line values that replace a scenario's own (`--strategy`, `--seed`,
//! `--workers`, ...), as given: the resolvers check them like the file's values.

/// Command-line values that replace the file's.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub strategies: Vec<String>,
    pub backends: Vec<String>,
    /// `--servers local|containers|auto`.
    pub servers: Option<String>,
    pub isolation: Vec<String>,
    pub seed: Option<u64>,
    pub workers: Option<u32>,
    pub duration_s: Option<f64>,
    pub ops: Option<u64>,
    pub rate: Option<f64>,
    /// `--repeat N`: runs of each cell (and no more, unless `repeat_until_settled` too).
    pub repeat: Option<u32>,
    /// `--repeat-until-settled M`: rounds in all while an order is not settled.
    pub repeat_until_settled: Option<u32>,
    /// `--set path.to.field=value`, in order: applied to the file's text before it is
    /// parsed, so the file's validation and messages apply (`--set:N:COL` locates them).
    pub sets: Vec<String>,
}
