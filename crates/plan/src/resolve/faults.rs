//! `[[faults]]`, `[[thresholds]]` and `[[expect]]`: each fault a `Fault` placed by its own
//! rule (the op kind of a commit fault, the length of a pause), each threshold a known
//! metric, each expectation a verdict or an anomaly of a known strategy on named backends.

use counterlab_core::{Fault, OpKind};
use counterlab_core::{Metric, Threshold};
use toml::Spanned;

use super::{Strategies, named};
use crate::bounds::{within, within_at};
use crate::error::{ScenarioError, Src};
use crate::raw::{RawExpect, RawFault, RawThreshold};
use crate::types::limits::*;
use crate::types::{ExpectPlan, Expected, FaultPlan};

pub(crate) fn faults(
    src: &Src<'_>,
    raw: Option<&[Spanned<RawFault>]>,
    s: &Strategies,
) -> Result<Vec<FaultPlan>, ScenarioError> {
    let raw = raw.unwrap_or_default();
    if raw.len() > MAX_FAULTS {
        return Err(src.flag(format!("at most {MAX_FAULTS} faults and {MAX_FAULTS} thresholds")));
    }
    raw.iter().map(|f| fault(src, f.get_ref(), s)).collect()
}

fn fault(src: &Src<'_>, f: &RawFault, s: &Strategies) -> Result<FaultPlan, ScenarioError> {
    let kind: Fault = named(src, "fault", &f.kind)?;
    let at_ms = within_at(src, &f.at_ms, "at_ms", 0..=MAX_INTERVAL_MS)?;
    let times = within(src, &f.times, "times", 1..=MAX_FAULT_TIMES, 1)?;
    let placed = match (&f.duration_ms, kind.takes_duration()) {
        (None, true) if kind.needs_duration() => {
            return Err(src.at(f.kind.span(), format!("a {} needs duration_ms", kind.name())));
        }
        (None, true) => kind,
        (Some(d), true) => kind.lasting(within_at(src, d, "duration_ms", 1..=MAX_INTERVAL_MS)?),
        (Some(d), false) => {
            return Err(src.at(
                d.span(),
                format!("duration_ms applies to pause, replica_pause and failover only, not {}", kind.name()),
            ));
        }
        (None, false) => kind,
    };
    let placed = match (&f.op, kind.takes_op()) {
        (None, _) => placed,
        (Some(o), true) => placed.placed(Some(committing_op(src, o)?)),
        (Some(o), false) => {
            return Err(src.at(
                o.span(),
                format!("op applies to crash_after_commit and error_before_commit only, not {}", kind.name()),
            ));
        }
    };
    Ok(FaultPlan { fault: placed, at_ms, times, strategies: s.pick(src, f.strategies.as_deref())? })
}

/// An op kind a commit fault can be placed in.
fn committing_op(src: &Src<'_>, o: &Spanned<String>) -> Result<OpKind, ScenarioError> {
    match Fault::COMMITTING_OPS.into_iter().find(|k| k.name() == o.get_ref()) {
        Some(k) => Ok(k),
        None => {
            let valid: Vec<&str> = Fault::COMMITTING_OPS.iter().map(|k| k.name()).collect();
            Err(src.at(o.span(), format!("op {:?} never commits a write; valid: {}", o.get_ref(), valid.join(", "))))
        }
    }
}

pub(crate) fn thresholds(
    src: &Src<'_>,
    raw: Option<&[Spanned<RawThreshold>]>,
    s: &Strategies,
) -> Result<Vec<Threshold>, ScenarioError> {
    let raw = raw.unwrap_or_default();
    if raw.len() > MAX_FAULTS {
        return Err(src.flag(format!("at most {MAX_FAULTS} faults and {MAX_FAULTS} thresholds")));
    }
    raw.iter().map(|t| threshold(src, t.get_ref(), s)).collect()
}

fn threshold(src: &Src<'_>, t: &RawThreshold, s: &Strategies) -> Result<Threshold, ScenarioError> {
    let metric: Metric = named(src, "metric", &t.metric)?;
    if let Some(op) = &t.op {
        if !metric.is_latency() {
            return Err(src.at(op.span(), format!("`op` applies to latency metrics only, not {}", metric.name())));
        }
        named::<OpKind>(src, "op", op)?;
    }
    let limit = *t.limit.get_ref();
    if !(limit.is_finite() && limit >= 0.0) {
        return Err(src.at(t.limit.span(), format!("limit must be a finite number >= 0, got {limit}")));
    }
    Ok(Threshold {
        metric,
        op: t.op.as_ref().map(|o| o.get_ref().clone()),
        strategies: s.pick(src, t.strategies.as_deref())?,
        limit,
    })
}

pub(crate) fn expectations(
    src: &Src<'_>,
    raw: Option<&[Spanned<RawExpect>]>,
    s: &Strategies,
) -> Result<Vec<ExpectPlan>, ScenarioError> {
    let raw = raw.unwrap_or_default();
    if raw.len() > MAX_FAULTS {
        return Err(src.flag(format!("at most {MAX_FAULTS} [[expect]] entries")));
    }
    raw.iter().map(|e| expectation(src, e, s)).collect()
}

fn expectation(src: &Src<'_>, e: &Spanned<RawExpect>, s: &Strategies) -> Result<ExpectPlan, ScenarioError> {
    let r = e.get_ref();
    let strategy = s.pick(src, Some(std::slice::from_ref(&r.strategy)))?.remove(0);
    let backends = super::named_list(src, "backend", &[], r.backends.as_deref(), &[])?;
    let isolation = super::named_list(src, "isolation", &[], r.isolation.as_deref(), &[])?;
    let expected = match (&r.verdict, &r.anomaly) {
        (Some(v), None) => Expected::Verdict(named(src, "expected verdict", v)?),
        (None, Some(a)) => Expected::Anomaly(named(src, "anomaly", a)?),
        _ => return Err(src.at(e.span(), "an [[expect]] entry gives one of verdict and anomaly")),
    };
    Ok(ExpectPlan { strategy, backends, isolation, expected })
}
