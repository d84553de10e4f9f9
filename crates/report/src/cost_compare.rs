//! `compare`'s cost side: per matched row, every cost figure (`cost_figures`) both
//! reports measured, net of its idle share where the row had a baseline, A against B;
//! a figure that grew past the limit (`--fail-if-costlier`, else
//! `DEFAULT_COST_LIMIT_PCT`) and by at least its floor is a regression. A row's cost is
//! one reading a side (its representative repeat's): the noise is not measured, so the
//! limit alone judges, as for throughput from single runs.

use serde::Serialize;

use crate::StrategyReport;
use crate::cost::Scope;
use crate::cost_figures::figures;

/// The cost growth (percent) beyond which a figure is a regression without
/// `--fail-if-costlier`: wide, because a cost is one reading a side and the server-wide
/// figures move with the server's other work.
pub const DEFAULT_COST_LIMIT_PCT: f64 = 50.0;

/// One cost figure of a matched row, A and B.
#[derive(Clone, Debug, Serialize)]
pub struct CostDelta {
    /// `cost_figures::Figure::key` (`pg_wal.lsn_bytes`).
    pub key: String,
    pub label: String,
    pub scope: Scope,
    /// Net of the idle share where that side had a baseline, per op (per user for memory).
    pub net: (f64, f64),
    /// The idle share subtracted, per side (None: no baseline).
    pub idle: (Option<f64>, Option<f64>),
    /// Change in percent (None: A was 0 net of its idle share).
    pub change_pct: Option<f64>,
    /// A read 0 before any idle share came off: growth from it is growth from nothing. A
    /// figure that only the idle share took to 0 is not (the server's other work, not the
    /// design's: it says nothing of B's growth).
    pub from_zero: bool,
}

/// Every figure both rows measured, in `figures()` order.
pub(crate) fn cost_deltas(sa: &StrategyReport, sb: &StrategyReport) -> Vec<CostDelta> {
    let (Some(ca), Some(cb)) = (sa.cost.as_ref(), sb.cost.as_ref()) else { return Vec::new() };
    figures()
        .into_iter()
        .filter_map(|f| {
            let (va, vb) = (f.of(ca)?, f.of(cb)?);
            let (a, b) = (va.net(), vb.net());
            Some(CostDelta {
                key: f.key.into(),
                label: f.heading(),
                scope: f.scope,
                net: (a, b),
                idle: (va.idle, vb.idle),
                change_pct: (a > 0.0).then(|| (b - a) / a * 100.0),
                from_zero: va.value <= 0.0,
            })
        })
        .collect()
}

/// The figures of `deltas` that grew past `limit` percent (or from a reading of 0) by at
/// least the figure's floor, in words, for the row `label`.
pub(crate) fn cost_regressions(label: &str, deltas: &[CostDelta], limit: f64, out: &mut Vec<String>) {
    let floors = figures();
    for d in deltas {
        let floor = floors.iter().find(|f| f.key == d.key).map_or(0.0, |f| f.floor);
        let (a, b) = d.net;
        let past = d.change_pct.map_or(d.from_zero, |p| p > limit);
        if b - a >= floor && past {
            let change = d.change_pct.map_or("from 0".to_string(), |p| format!("+{p:.1}%"));
            let net = if d.idle.0.is_some() || d.idle.1.is_some() { ", net of idle" } else { "" };
            out.push(format!(
                "{label}: cost {} {} -> {} ({change}{net}; limit {limit}%; one reading a side, noise not measured)",
                d.label,
                crate::cost::fig(Some(a)),
                crate::cost::fig(Some(b))
            ));
        }
    }
}

/// The figures that moved by 10% or more (either way), as `label a -> b (change)`.
/// Figures below their floor on both sides are left out.
pub(crate) fn moved(deltas: &[CostDelta]) -> Vec<String> {
    let floors = figures();
    let floor = |key: &str| floors.iter().find(|f| f.key == key).map_or(0.0, |f| f.floor);
    deltas
        .iter()
        .filter(|d| d.change_pct.is_none_or(|p| p.abs() >= 10.0) && d.net.0.max(d.net.1) >= floor(&d.key))
        .map(|d| {
            let change = d.change_pct.map_or("from 0".to_string(), |p| format!("{p:+.1}%"));
            let (a, b) = d.net;
            format!("{} {} -> {} ({change})", d.label, crate::cost::fig(Some(a)), crate::cost::fig(Some(b)))
        })
        .collect()
}
