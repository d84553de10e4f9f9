//! Entry points: a scenario file (or its text) plus command-line overrides in, a
//! `RunPlan` or a located error out. Each section has its own resolver in `resolve/`.

use std::path::Path;

use crate::edit::{Edited, Env};
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

/// Validates scenario text; `path` is only used in messages. `${VAR}` in its string
/// values are read from the process environment.
pub fn parse(
    path: &str,
    text: &str,
    default_name: &str,
    overrides: &Overrides,
    known: &[&str],
    default_seed: u64,
) -> Result<RunPlan, ScenarioError> {
    parse_with_env(path, text, default_name, overrides, known, default_seed, &|v| std::env::var(v).ok())
}

/// `parse` with the variables `${VAR}` reads looked up in `env`.
pub fn parse_with_env(
    path: &str,
    text: &str,
    default_name: &str,
    overrides: &Overrides,
    known: &[&str],
    default_seed: u64,
    env: Env<'_>,
) -> Result<RunPlan, ScenarioError> {
    let edited = Edited::new(path, text, &overrides.sets, env)?;
    let src = Src { path, text: &edited.text, edits: Some(&edited) };
    resolve_all(&src, default_name, overrides, known, default_seed).map_err(|e| edited.scrub(e))
}

fn resolve_all(
    src: &Src<'_>,
    default_name: &str,
    overrides: &Overrides,
    known: &[&str],
    default_seed: u64,
) -> Result<RunPlan, ScenarioError> {
    let (src, path, text) = (*src, src.path, src.text);
    let raw: RawScenario = toml::from_str(text).map_err(|e| src.toml(e))?;
    let s = Strategies::resolve(&src, &raw, overrides, known)?;
    let backends = resolve::backends(&src, &raw, overrides)?;
    let servers = resolve::servers(&src, raw.servers.as_ref(), overrides.servers.as_deref())?;
    let (isolation, strategy_isolation) = resolve::isolation(&src, &raw, overrides, &s)?;
    let retry = resolve::retry(&src, raw.retry.as_ref())?;
    let expect_drift = s.pick(&src, raw.expect_drift.as_deref())?;
    let expect_anomaly = resolve::expectation(&src, raw.expect_anomaly.as_ref())?;
    let redis = resolve::redis(&src, raw.redis.as_ref())?;
    let replica = resolve::replica(&src, raw.replica.as_ref())?;
    let explore = resolve::explore(&src, raw.explore.as_ref())?;
    let faults = resolve::faults(&src, raw.faults.as_deref(), &s)?;
    let thresholds = resolve::thresholds(&src, raw.thresholds.as_deref(), &s)?;
    let expect = resolve::expectations(&src, raw.expect.as_deref(), &s)?;
    let data: DataPlan = resolve::data(&src, &raw.data)?;
    let workload = resolve::workload(&src, &raw.workload, overrides, raw.faults.as_deref())?;
    let repeat = repeat(&src, raw.repeat.as_ref(), overrides.repeat)?;
    let repeat_max = repeat_max(&src, &raw, overrides, repeat)?;
    Ok(RunPlan {
        // A name is shown everywhere: a URL in it (from `${VAR}`, say) loses its password.
        scenario: counterlab_core::redact_url(&raw.name.clone().unwrap_or_else(|| default_name.to_string())),
        scenario_path: path.to_string(),
        seed: overrides.seed.or(raw.seed).unwrap_or(default_seed),
        repeat,
        repeat_max,
        backends,
        servers,
        isolation,
        strategy_isolation,
        retry,
        expect_drift,
        expect_anomaly,
        redis,
        replica,
        explore,
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

/// The most rounds in all (`repeat_until_settled`): after `repeat` rounds, the designs of a
/// backend x level whose order is not settled run more rounds, up to this. The flag wins;
/// `--repeat N` alone means N rounds and no more; else the file's value, else `repeat`.
fn repeat_max(src: &Src<'_>, raw: &RawScenario, o: &Overrides, repeat: u32) -> Result<u32, ScenarioError> {
    let range = 1..=crate::types::limits::MAX_REPEAT;
    let max = match (o.repeat_until_settled, o.repeat, raw.repeat_until_settled.as_ref()) {
        (Some(n), _, _) if range.contains(&n) => n,
        (Some(n), _, _) => {
            return Err(src.flag(format!("--repeat-until-settled must be in 1..={}, got {n}", range.end())));
        }
        (None, Some(_), _) => repeat,
        (None, None, Some(x)) => crate::bounds::within_at(src, x, "repeat_until_settled", range)?,
        (None, None, None) => repeat,
    };
    match (max >= repeat, raw.repeat_until_settled.as_ref()) {
        (true, _) => Ok(max),
        (false, Some(x)) if o.repeat_until_settled.is_none() => {
            Err(src.at(x.span(), format!("repeat_until_settled ({max}) must be at least repeat ({repeat})")))
        }
        (false, _) => Err(src.flag(format!("--repeat-until-settled ({max}) must be at least the repeat ({repeat})"))),
    }
}

/// `--repeat` (which wins) or the file's `repeat`, within 1..=MAX_REPEAT; 1 when neither.
fn repeat(src: &Src<'_>, file: Option<&toml::Spanned<u32>>, flag: Option<u32>) -> Result<u32, ScenarioError> {
    let range = 1..=crate::types::limits::MAX_REPEAT;
    match (flag, file) {
        (Some(n), _) if range.contains(&n) => Ok(n),
        (Some(n), _) => Err(src.flag(format!("--repeat must be in 1..={}, got {n}", range.end()))),
        (None, Some(x)) => crate::bounds::within_at(src, x, "repeat", range),
        (None, None) => Ok(1),
    }
}
