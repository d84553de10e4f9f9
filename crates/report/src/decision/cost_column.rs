//! The decision view's cost columns: per group, the two or three server-side cost
//! figures that differ most between its rows (`cost_figures::differing`), each row's
//! value with its idle share where the figure is server-wide and had a baseline.

use super::Ranked;
use crate::cost_figures::{Figure, differing};

/// The figures a group's rows differ on most (empty: fewer than two rows were measured,
/// or no figure differs by `cost_figures::MIN_SPREAD`).
pub fn figures_of(rows: &[Ranked<'_>]) -> Vec<Figure> {
    let costs: Vec<_> = rows.iter().map(|x| x.row.cost.as_ref()).collect();
    differing(&costs)
}

/// A row's cell for `f`: `420`, `420 (idle 3.10)`, or `-` where the row has no such figure.
pub fn cell(f: &Figure, x: &Ranked<'_>) -> String {
    x.row.cost.as_ref().and_then(|c| f.of(c)).map_or("-".into(), |v| v.text())
}

/// The line under a group's cost columns: what `*` and `idle` mean, when they appear.
pub fn legend(figures: &[Figure]) -> Option<String> {
    let server = figures.iter().any(|f| f.scope == crate::Scope::Server);
    server.then(|| {
        "Cost per op, the figures that differ most between these designs; * server-wide (other sessions' \
         work in the interval included), idle: an idle interval's share, scaled to the row's interval."
            .to_string()
    })
}

/// The figures as report.json's `decision.groups[].cost_figures`.
pub fn figures_json(figures: &[Figure]) -> serde_json::Value {
    let list: Vec<serde_json::Value> = figures
        .iter()
        .map(|f| serde_json::json!({ "key": f.key, "label": f.label, "scope": f.scope, "source": f.source }))
        .collect();
    serde_json::Value::Array(list)
}

/// A row's figures as report.json's `decision.groups[].rows[].cost`: by key, the value
/// and its idle share (null where not measured).
pub fn row_json(figures: &[Figure], x: &Ranked<'_>) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for f in figures {
        let v = x.row.cost.as_ref().and_then(|c| f.of(c));
        m.insert(f.key.into(), serde_json::json!({ "value": v.map(|v| v.value), "idle": v.and_then(|v| v.idle) }));
    }
    serde_json::Value::Object(m)
}
