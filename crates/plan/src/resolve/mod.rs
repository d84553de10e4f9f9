//! One resolver per scenario section: raw TOML (and the flags that override it) in,
//! typed plan parts out, every problem located.

mod faults;
mod sections;
mod stages;
mod strategies;
mod workload;

use std::collections::HashSet;

use counterlab_core::Named;
use toml::Spanned;

use crate::error::{ScenarioError, Src};

pub(crate) use faults::{expectations, faults, thresholds};
pub(crate) use sections::{data, expectation, explore, redis, replica, retry, verdict};
pub(crate) use strategies::{Strategies, backends, isolation, servers};
pub(crate) use workload::workload;

/// A name of the closed set `T`, or an error at it listing the valid ones.
pub(crate) fn named<T: Named>(src: &Src<'_>, what: &str, item: &Spanned<String>) -> Result<T, ScenarioError> {
    T::parse(item.get_ref())
        .ok_or_else(|| src.at(item.span(), format!("unknown {what} {:?}; valid: {}", item.get_ref(), T::valid())))
}

/// A list of names of `T` from the flags (which win) or the file; neither gives
/// `default`. Unknown names and duplicates are errors.
pub(crate) fn named_list<T: Named>(
    src: &Src<'_>,
    what: &str,
    flags: &[String],
    file: Option<&[Spanned<String>]>,
    default: &[T],
) -> Result<Vec<T>, ScenarioError> {
    let out: Vec<T> = if !flags.is_empty() {
        let parsed = flags.iter().map(|f| {
            T::parse(f).ok_or_else(|| src.flag(format!("--{what} {f}: unknown {what}; valid: {}", T::valid())))
        });
        parsed.collect::<Result<_, _>>()?
    } else if let Some(items) = file {
        if items.is_empty() && !default.is_empty() {
            let names: Vec<&str> = default.iter().map(|d| d.name()).collect();
            return Err(
                src.flag(format!("the {what} list is empty; leave it out for the default ({})", names.join(", ")))
            );
        }
        items.iter().map(|i| named(src, what, i)).collect::<Result<_, _>>()?
    } else {
        default.to_vec()
    };
    let mut seen = HashSet::new();
    if let Some(i) = out.iter().position(|v| !seen.insert(v.name())) {
        let msg = format!("{what} {} is listed twice", out[i].name());
        return Err(match (flags.is_empty(), file) {
            (true, Some(items)) => src.at(items[i].span(), msg),
            _ => src.flag(msg),
        });
    }
    Ok(out)
}
