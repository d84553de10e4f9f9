//! Which strategies run (built-in names plus those the scenario or its strategy files
//! define), on which backends and at which isolation levels.

use std::collections::{BTreeMap, HashSet};

use counterlab_core::Named;

use counterlab_core::Isolation;
use counterlab_spec::CustomSpec;
use toml::Spanned;

use super::named_list;
use crate::custom::{self, RawStrategy};
use crate::error::{ScenarioError, Src};
use crate::overrides::Overrides;
use crate::raw::RawScenario;
use crate::types::{Backend, DEFAULT_ISOLATION, ServersMode};

/// The strategies a scenario can name, and those it runs.
pub(crate) struct Strategies {
    /// Built-in names, then file-defined ones.
    pub known: Vec<String>,
    /// The ones this run runs, in order.
    pub run: Vec<String>,
    pub custom: BTreeMap<String, CustomSpec>,
    /// Levels a file-defined strategy asks for itself.
    pub custom_isolation: BTreeMap<String, Vec<Isolation>>,
}

impl Strategies {
    pub fn resolve(
        src: &Src<'_>,
        raw: &RawScenario,
        overrides: &Overrides,
        builtin: &[&str],
    ) -> Result<Strategies, ScenarioError> {
        let mut s = Strategies {
            known: builtin.iter().map(|s| s.to_string()).collect(),
            run: Vec::new(),
            custom: BTreeMap::new(),
            custom_isolation: BTreeMap::new(),
        };
        for (name, r) in raw.strategy.iter().flatten() {
            s.add(name, r, src, builtin)?;
        }
        for listed in raw.strategy_files.iter().flatten() {
            let (file, text) = custom::load_file(src.path, listed, src)?;
            let there = Src { path: &file, text: &text, edits: None };
            for (name, r) in custom::parse_file(&there)? {
                s.add(&name, &r, &there, builtin)?;
            }
        }
        s.known.extend(s.custom.keys().cloned());
        s.run = s.chosen(src, raw, overrides)?;
        Ok(s)
    }

    /// A file-defined strategy joins the known names.
    fn add(
        &mut self,
        name: &str,
        r: &Spanned<RawStrategy>,
        at: &Src<'_>,
        builtin: &[&str],
    ) -> Result<(), ScenarioError> {
        if self.custom.contains_key(name) {
            return Err(at.at(r.span(), format!("strategy {name:?} is defined twice")));
        }
        let spec = custom::check(name, r, builtin, at)?;
        if let Some(levels) = &r.get_ref().isolation {
            if levels.is_empty() {
                return Err(at.at(
                    r.span(),
                    format!("strategy {name:?}: `isolation` is empty; leave it out for the run's levels"),
                ));
            }
            self.custom_isolation.insert(name.to_string(), named_list(at, "isolation", &[], Some(levels), &[])?);
        }
        self.custom.insert(name.to_string(), spec);
        Ok(())
    }

    fn valid(&self) -> String {
        self.known.join(", ")
    }

    fn is_known(&self, name: &str) -> bool {
        self.known.iter().any(|k| k == name)
    }

    /// The flags' list, else the file's, else every known strategy.
    fn chosen(&self, src: &Src<'_>, raw: &RawScenario, overrides: &Overrides) -> Result<Vec<String>, ScenarioError> {
        let run: Vec<String> = if !overrides.strategies.is_empty() {
            if let Some(s) = overrides.strategies.iter().find(|s| !self.is_known(s)) {
                return Err(src.flag(format!("--strategy {s}: unknown strategy; valid: {}", self.valid())));
            }
            overrides.strategies.clone()
        } else if let Some(list) = &raw.strategies {
            if let Some(s) = list.iter().find(|s| !self.is_known(s.get_ref())) {
                return Err(src.at(s.span(), format!("unknown strategy {:?}; valid: {}", s.get_ref(), self.valid())));
            }
            if list.is_empty() {
                return Err(src.flag("`strategies` is empty; list at least one or leave it out to run all"));
            }
            list.iter().map(|s| s.get_ref().clone()).collect()
        } else {
            self.known.clone()
        };
        let mut seen = HashSet::new();
        if let Some(dup) = run.iter().find(|s| !seen.insert(*s)) {
            return Err(src.flag(format!("strategy {dup} is listed twice")));
        }
        Ok(run)
    }

    /// A list of strategy names from the file (`expect_drift`, a fault's or threshold's
    /// `strategies`), each known, none twice; absent is empty.
    pub fn pick(&self, src: &Src<'_>, file: Option<&[Spanned<String>]>) -> Result<Vec<String>, ScenarioError> {
        let items = file.unwrap_or_default();
        if let Some(i) = items.iter().find(|i| !self.is_known(i.get_ref())) {
            return Err(src.at(i.span(), format!("unknown strategy {:?}; valid: {}", i.get_ref(), self.valid())));
        }
        let out: Vec<String> = items.iter().map(|i| i.get_ref().clone()).collect();
        let mut seen = HashSet::new();
        if let Some(dup) = out.iter().find(|s| !seen.insert(*s)) {
            return Err(src.flag(format!("strategy {dup} is listed twice")));
        }
        Ok(out)
    }
}

pub(crate) fn backends(src: &Src<'_>, raw: &RawScenario, overrides: &Overrides) -> Result<Vec<Backend>, ScenarioError> {
    named_list(src, "backend", &overrides.backends, raw.backends.as_deref(), &[Backend::Auto])
}

/// Where the servers come from: the flag (wins), the file's `servers`, else `auto`.
pub(crate) fn servers(
    src: &Src<'_>,
    file: Option<&Spanned<String>>,
    flag: Option<&str>,
) -> Result<ServersMode, ScenarioError> {
    match (flag, file) {
        (Some(f), _) => ServersMode::from_name(f)
            .ok_or_else(|| src.flag(format!("--servers {f}: unknown servers mode; valid: {}", ServersMode::valid()))),
        (None, Some(item)) => super::named(src, "servers mode", item),
        (None, None) => Ok(ServersMode::Auto),
    }
}

/// Isolation levels by strategy name.
type PerStrategy = BTreeMap<String, Vec<Isolation>>;

/// The run's levels, and the levels of strategies that name their own (the scenario's
/// `strategy_isolation` first, then a strategy file's `isolation`).
pub(crate) fn isolation(
    src: &Src<'_>,
    raw: &RawScenario,
    overrides: &Overrides,
    s: &Strategies,
) -> Result<(Vec<Isolation>, PerStrategy), ScenarioError> {
    let levels = named_list(src, "isolation", &overrides.isolation, raw.isolation.as_deref(), &[DEFAULT_ISOLATION])?;
    let mut per_strategy = BTreeMap::new();
    for (name, listed) in raw.strategy_isolation.iter().flatten() {
        if !s.is_known(name) {
            return Err(
                src.at(listed.span(), format!("strategy_isolation: unknown strategy {name:?}; valid: {}", s.valid()))
            );
        }
        let v = named_list(src, "isolation", &[], Some(listed.get_ref()), &[])?;
        if v.is_empty() {
            return Err(src.at(listed.span(), format!("strategy_isolation.{name} is empty")));
        }
        per_strategy.insert(name.clone(), v);
    }
    for (name, levels) in &s.custom_isolation {
        per_strategy.entry(name.clone()).or_insert_with(|| levels.clone());
    }
    Ok((levels, per_strategy))
}
