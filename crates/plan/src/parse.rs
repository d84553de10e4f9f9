//! Entry points: a scenario file (or its text) plus command-line overrides in, a
//! `RunPlan` or a located error out. Each section has its own resolver in `resolve/`.

use std::path::Path;

use crate::error::{ScenarioError, Src};
use crate::overrides::Overrides;
use crate::raw::RawScenario;
use crate::resolve::{self, Strategies};
use crate::types::{DataPlan, RunPlan};

/// Reads and validates a scenario file, applying command-line overrides.
/// `known` lists the valid built-in strategy names; `default_seed` is used when neither
/// the file nor the flags give one.
pub fn load(path: &Path, overrides: &Overrides, known: &[&str], default_seed: u64) -> Result<RunPlan, ScenarioError> {
    let shown = path.display().to_string();
    let src = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        path: shown.clone(),
        line_col: None,
        message: format!("cannot read scenario: {e}"),
    })?;
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "scenario".into());
    parse(&shown, &src, &name, overrides, known, default_seed)
}

/// Validates scenario text; `path` is only used in messages.
pub fn parse(
    path: &str,
    text: &str,
    default_name: &str,
    overrides: &Overrides,
    known: &[&str],
    default_seed: u64,
) -> Result<RunPlan, ScenarioError> {
    let src = Src { path, text };
    let raw: RawScenario = toml::from_str(text).map_err(|e| src.toml(e))?;
    let s = Strategies::resolve(&src, &raw, overrides, known)?;
    let backends = resolve::backends(&src, &raw, overrides)?;
    let servers = resolve::servers(&src, raw.servers.as_ref(), overrides.servers.as_deref())?;
    let (isolation, strategy_isolation) = resolve::isolation(&src, &raw, overrides, &s)?;
    let retry = resolve::retry(&src, raw.retry.as_ref())?;
    let expect_drift = s.pick(&src, raw.expect_drift.as_deref())?;
    let expect_anomaly = resolve::expectation(&src, raw.expect_anomaly.as_ref())?;
    let redis = resolve::redis(&src, raw.redis.as_ref())?;
    let faults = resolve::faults(&src, raw.faults.as_deref(), &s)?;
    let thresholds = resolve::thresholds(&src, raw.thresholds.as_deref(), &s)?;
    let expect = resolve::expectations(&src, raw.expect.as_deref(), &s)?;
    let data: DataPlan = resolve::data(&src, &raw.data)?;
    let workload = resolve::workload(&src, &raw.workload, overrides, raw.faults.as_deref())?;
    Ok(RunPlan {
        scenario: raw.name.clone().unwrap_or_else(|| default_name.to_string()),
        scenario_path: path.to_string(),
        seed: overrides.seed.or(raw.seed).unwrap_or(default_seed),
        backends,
        servers,
        isolation,
        strategy_isolation,
        retry,
        expect_drift,
        expect_anomaly,
        redis,
        faults,
        thresholds,
        verdict: resolve::verdict(&src, raw.verdict.as_ref())?,
        expect,
        data,
        workload,
        strategies: s.run,
        custom: s.custom,
    })
}
