//! The one bounded-value helper: a scenario number inside its limits, or an error at the
//! number saying the range and what was given.

use std::fmt::Display;
use std::ops::RangeInclusive;

use toml::Spanned;

use crate::error::{ScenarioError, Src};

/// `v` within `range` (or `default` when absent); the error says
/// "`what` must be in lo..=hi, got v".
pub(crate) fn within<T: PartialOrd + Copy + Display>(
    src: &Src<'_>,
    v: &Option<Spanned<T>>,
    what: &str,
    range: RangeInclusive<T>,
    default: T,
) -> Result<T, ScenarioError> {
    match v {
        Some(x) => within_at(src, x, what, range),
        None => Ok(default),
    }
}

/// A given value within `range`.
pub(crate) fn within_at<T: PartialOrd + Copy + Display>(
    src: &Src<'_>,
    x: &Spanned<T>,
    what: &str,
    range: RangeInclusive<T>,
) -> Result<T, ScenarioError> {
    let v = *x.get_ref();
    if range.contains(&v) {
        return Ok(v);
    }
    Err(src.at(x.span(), format!("{what} must be in {}..={}, got {v}", range.start(), range.end())))
}

/// A duration, rate or similar: finite, above 0 and at most `max`; the error says
/// "`what` must be in (0, max]`unit`, got v".
pub(crate) fn positive(v: f64, max: f64) -> bool {
    v.is_finite() && v > 0.0 && v <= max
}

pub(crate) fn positive_at(
    src: &Src<'_>,
    x: &Spanned<f64>,
    what: &str,
    max: f64,
    unit: &str,
) -> Result<f64, ScenarioError> {
    let v = *x.get_ref();
    if positive(v, max) {
        return Ok(v);
    }
    Err(src.at(x.span(), format!("{what} must be in (0, {max}]{unit}, got {v}")))
}
