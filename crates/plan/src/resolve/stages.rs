//! The load's phases: the single-stage shorthand (`duration_s` or `ops`, with `rate` for
//! an open loop) or `[[workload.stages]]`, flags that replace or stretch them, and the
//! warm-up stage in front.

use toml::Spanned;

use crate::bounds::{positive, positive_at, within_at};
use crate::error::{ScenarioError, Src};
use crate::overrides::Overrides;
use crate::raw::{RawStage, RawWorkload};
use crate::types::limits::*;
use crate::types::{StageEnd, StageLoad, StagePlan};

/// The stages, and the single-stage shorthand they came from (None with stages).
pub(crate) struct Load {
    pub duration_s: Option<f64>,
    pub ops: Option<u64>,
    pub rate: Option<f64>,
    pub stages: Vec<StagePlan>,
}

pub(crate) fn resolve(
    src: &Src<'_>,
    raw: &Spanned<RawWorkload>,
    overrides: &Overrides,
    workers: u32,
) -> Result<Load, ScenarioError> {
    let w = raw.get_ref();
    if let Some(r) = overrides.rate.filter(|r| !positive(*r, MAX_RATE)) {
        return Err(src.flag(format!("--rate must be in (0, {MAX_RATE}] ops/s, got {r}")));
    }
    let file_rate = w.rate.as_ref().map(|r| positive_at(src, r, "rate", MAX_RATE, " ops/s")).transpose()?;
    // The flags' single stage replaces the file's load; `--duration-s` alone stretches or
    // shrinks the file's stages to that total instead.
    let load_from_flags = overrides.rate.is_some() || overrides.ops.is_some();
    let mut load = match w.stages.as_ref().filter(|_| !load_from_flags) {
        None => single(src, raw, overrides, workers, overrides.rate.or(file_rate))?,
        Some(list) => Load { duration_s: None, ops: None, rate: None, stages: listed(src, w, list, overrides)? },
    };
    if let Some(wu) = &w.warmup_s {
        let d = positive_at(src, wu, "warmup_s", MAX_DURATION_S, "")?;
        let first = &load.stages[0];
        let load_of_first = match first.load {
            StageLoad::Open { rate, .. } => StageLoad::Open { rate, target: rate },
            closed => closed,
        };
        let warm = StagePlan {
            name: counterlab_core::WARMUP.into(),
            measured: false,
            end: StageEnd::Duration(d),
            load: load_of_first,
        };
        load.stages.insert(0, warm);
    }
    Ok(load)
}

/// The single-stage shorthand: how long (flags first, then the file) and how.
fn single(
    src: &Src<'_>,
    raw: &Spanned<RawWorkload>,
    overrides: &Overrides,
    workers: u32,
    rate: Option<f64>,
) -> Result<Load, ScenarioError> {
    let w = raw.get_ref();
    let end = match (overrides.duration_s, overrides.ops) {
        (Some(_), Some(_)) => return Err(src.flag("give --duration-s or --ops, not both")),
        (Some(d), None) if !positive(d, MAX_DURATION_S) => {
            return Err(src.flag(format!("--duration-s must be in (0, {MAX_DURATION_S}], got {d}")));
        }
        (Some(d), None) => StageEnd::Duration(d),
        (None, Some(n)) if !(1..=MAX_OPS).contains(&n) => {
            return Err(src.flag(format!("--ops must be in 1..={MAX_OPS}, got {n}")));
        }
        (None, Some(n)) => StageEnd::Ops(n),
        (None, None) => end_from_file(src, raw)?,
    };
    if let (Some(_), StageEnd::Ops(_)) = (rate, end) {
        let msg = "an open-loop rate runs for a duration: give duration_s, not ops";
        return Err(match (&w.ops, overrides.ops) {
            (Some(o), None) => src.at(o.span(), msg),
            _ => src.flag(msg),
        });
    }
    let load = match rate {
        Some(rate) => StageLoad::Open { rate, target: rate },
        None => StageLoad::Closed { workers },
    };
    let stage = StagePlan { name: "load".into(), measured: true, end, load };
    let (duration_s, ops) = (stage.duration_s(), if let StageEnd::Ops(n) = end { Some(n) } else { None });
    Ok(Load { duration_s, ops, rate, stages: vec![stage] })
}

fn end_from_file(src: &Src<'_>, raw: &Spanned<RawWorkload>) -> Result<StageEnd, ScenarioError> {
    let w = raw.get_ref();
    match (&w.duration_s, &w.ops) {
        (Some(_), Some(o)) => Err(src.at(o.span(), "give duration_s or ops, not both")),
        (None, None) if w.stages.is_some() => {
            Err(src.flag("--rate replaces the scenario's stages: give --duration-s too"))
        }
        (None, None) => Err(src.at(raw.span(), "[workload] needs duration_s, ops or [[workload.stages]]")),
        (Some(d), None) => Ok(StageEnd::Duration(positive_at(src, d, "duration_s", MAX_DURATION_S, "")?)),
        (None, Some(o)) => Ok(StageEnd::Ops(within_at(src, o, "ops", 1..=MAX_OPS)?)),
    }
}

/// `[[workload.stages]]`, stretched to `--duration-s` when given.
fn listed(
    src: &Src<'_>,
    w: &RawWorkload,
    list: &Spanned<Vec<Spanned<RawStage>>>,
    overrides: &Overrides,
) -> Result<Vec<StagePlan>, ScenarioError> {
    let given = [
        (w.duration_s.as_ref().map(|d| d.span()), "duration_s"),
        (w.ops.as_ref().map(|o| o.span()), "ops"),
        (w.rate.as_ref().map(|r| r.span()), "rate"),
    ]
    .into_iter()
    .find_map(|(span, what)| Some((span?, what)));
    if let Some((span, what)) = given {
        return Err(src.at(span, format!("{what} and [[workload.stages]] both describe the load: keep one")));
    }
    if list.get_ref().is_empty() || list.get_ref().len() > MAX_STAGES {
        return Err(src.at(list.span(), format!("give 1..={MAX_STAGES} stages")));
    }
    let mut stages: Vec<StagePlan> = Vec::new();
    for (i, st) in list.get_ref().iter().enumerate() {
        let stage = stage(src, st.get_ref(), i, overrides)?;
        if stages.iter().any(|s| s.name == stage.name) {
            return Err(src.at(
                st.get_ref().duration_s.span(),
                format!("stage name {:?} is taken; give each stage its own name", stage.name),
            ));
        }
        stages.push(stage);
    }
    let total: f64 = stages.iter().filter_map(|s| s.duration_s()).sum();
    if total > MAX_DURATION_S {
        return Err(src.at(list.span(), format!("the stages last {total} s, more than {MAX_DURATION_S}")));
    }
    if let Some(d) = overrides.duration_s {
        if !positive(d, MAX_DURATION_S) {
            return Err(src.flag(format!("--duration-s must be in (0, {MAX_DURATION_S}], got {d}")));
        }
        for s in &mut stages {
            if let StageEnd::Duration(x) = &mut s.end {
                *x = *x * d / total;
            }
        }
    }
    Ok(stages)
}

/// One listed stage: closed (`workers`, which `--workers` replaces) or open (`rate`,
/// ramping to `target`).
fn stage(src: &Src<'_>, st: &RawStage, i: usize, overrides: &Overrides) -> Result<StagePlan, ScenarioError> {
    let d = positive_at(src, &st.duration_s, "duration_s", MAX_DURATION_S, "")?;
    let load = match (&st.workers, &st.rate) {
        (Some(wk), Some(_)) => {
            return Err(src.at(wk.span(), "a stage is closed loop (workers) or open loop (rate), not both"));
        }
        (None, None) => {
            return Err(src.at(st.duration_s.span(), "a stage needs workers (closed loop) or rate (open loop)"));
        }
        (Some(wk), None) => {
            if let Some(t) = &st.target {
                return Err(src.at(t.span(), "target (a ramp's final rate) needs rate"));
            }
            let n = within_at(src, wk, "workers", 1..=MAX_WORKERS)?;
            StageLoad::Closed { workers: overrides.workers.unwrap_or(n) }
        }
        (None, Some(r)) => {
            let rate = positive_at(src, r, "rate", MAX_RATE, " ops/s")?;
            let target = st.target.as_ref().map(|t| positive_at(src, t, "target", MAX_RATE, " ops/s")).transpose()?;
            StageLoad::Open { rate, target: target.unwrap_or(rate) }
        }
    };
    let name = st.name.clone().unwrap_or_else(|| format!("stage {}", i + 1));
    if name.trim().is_empty() || name == counterlab_core::WARMUP || name == counterlab_core::SETTLE {
        return Err(src.at(st.duration_s.span(), format!("stage name {name:?} is taken; give each stage its own name")));
    }
    Ok(StagePlan { name, measured: true, end: StageEnd::Duration(d), load })
}
