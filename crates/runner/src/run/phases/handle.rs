//! The run handle (`counterlab-handle/2`): what `prepare` made (run id, seed, scenario,
//! resolved plan, cells and their namespaces), read back by every later phase and
//! checked; and the namespace identities' passwords, derived from the run secret.

use std::path::Path;

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};

use counterlab_plan::{Overrides, RunPlan};
use counterlab_strategies::is_namespace_name;

/// The handle format this counterlab writes and reads.
pub const HANDLE_FORMAT: &str = "counterlab-handle/2";

/// The environment variable holding the run secret.
pub const RUN_SECRET_ENV: &str = "COUNTERLAB_RUN_SECRET";

/// A prepared distributed run. Holds no secret (it may go in a ConfigMap).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Handle {
    pub format: String,
    pub run_id: String,
    pub prepared_at_utc: String,
    pub seed: u64,
    pub scenario: Source,
    /// The resolved plan as the report prints it (URLs redacted); every phase resolves
    /// the scenario again and must get this same plan.
    pub plan: serde_json::Value,
    pub cells: Vec<HandleCell>,
}

/// The scenario text and the flags that shaped it, to resolve it again.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Source {
    /// As given to prepare (strategy files are found relative to it).
    pub path: String,
    pub name: String,
    pub text: String,
    pub strategies: Vec<String>,
    pub backends: Vec<String>,
    pub isolation: Vec<String>,
    pub workers: Option<u32>,
    pub duration_s: Option<f64>,
    pub ops: Option<u64>,
    pub rate: Option<f64>,
    pub sets: Vec<String>,
}

/// One cell: a strategy on a backend at a level, in its namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandleCell {
    pub strategy: String,
    /// The SQL dialect (`postgres`, `mysql`).
    pub backend: String,
    pub isolation: String,
    pub namespace: String,
    /// Whether the strategy also uses Redis.
    pub redis: bool,
}

impl Source {
    pub fn overrides(&self, seed: u64) -> Overrides {
        Overrides {
            strategies: self.strategies.clone(),
            backends: self.backends.clone(),
            servers: Some("local".into()),
            isolation: self.isolation.clone(),
            seed: Some(seed),
            workers: self.workers,
            duration_s: self.duration_s,
            ops: self.ops,
            rate: self.rate,
            repeat: None,
            repeat_until_settled: None,
            sets: self.sets.clone(),
        }
    }
}

impl Handle {
    /// Reads and checks a handle file: its format, its namespaces' names.
    pub fn read(path: &Path) -> Result<Handle, String> {
        let shown = path.display();
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read the handle {shown}: {e}"))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("{shown}: not a counterlab handle (not JSON: {e})"))?;
        match v.get("format").and_then(|f| f.as_str()) {
            Some(HANDLE_FORMAT) => {}
            Some(other) => {
                return Err(format!("{shown}: handle format {other:?}; this counterlab reads {HANDLE_FORMAT:?}"));
            }
            None => return Err(format!("{shown}: not a counterlab handle (no \"format\")")),
        }
        let h: Handle = serde_json::from_value(v).map_err(|e| format!("{shown}: a damaged handle: {e}"))?;
        let prefix = format!("cl_{}_", h.run_id);
        if let Some(c) = h.cells.iter().find(|c| !is_namespace_name(&c.namespace) || !c.namespace.starts_with(&prefix))
        {
            return Err(format!("{shown}: namespace {:?} is not one of run {}", c.namespace, h.run_id));
        }
        if h.cells.is_empty() {
            return Err(format!("{shown}: the handle has no cells"));
        }
        Ok(h)
    }

    /// Writes the handle (pretty JSON), replacing `path` only once it is complete.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).expect("a handle serializes");
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, path))
            .map_err(|e| format!("cannot write the handle {}: {e}", path.display()))
    }

    /// The plan, resolved again from the handle's scenario; an error when it differs from
    /// the one prepare resolved (a `${VAR}` or a strategy file that changed since).
    pub fn plan(&self, known: &[&str]) -> Result<RunPlan, String> {
        let s = &self.scenario;
        let plan = counterlab_plan::parse(&s.path, &s.text, &s.name, &s.overrides(self.seed), known, self.seed)
            .map_err(|e| format!("the handle's scenario: {e}"))?;
        let mut printed = serde_json::to_value(&plan).map_err(|e| format!("the plan cannot be printed: {e}"))?;
        super::super::redact_urls(&mut printed);
        if printed != self.plan {
            return Err(format!(
                "the handle's scenario {} resolves to another plan here than at prepare (a ${{VAR}} or a \
                 strategy file differs): give every phase the same environment and files",
                s.path
            ));
        }
        Ok(plan)
    }
}

/// The password of namespace `ns`'s identity: HMAC-SHA256 of the name under the run
/// secret, as 48 hex digits (never written anywhere).
pub fn password(secret: &str, ns: &str) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(ns.as_bytes());
    mac.finalize().into_bytes()[..24].iter().map(|b| format!("{b:02x}")).collect()
}

/// The run secret from the environment; an error that says why it is needed.
pub fn secret() -> Result<String, String> {
    match std::env::var(RUN_SECRET_ENV) {
        Ok(s) if s.len() >= 16 => Ok(s),
        Ok(_) => Err(format!("{RUN_SECRET_ENV} is shorter than 16 characters")),
        Err(_) => Err(format!(
            "{RUN_SECRET_ENV} is not set: every phase needs the same run secret (the namespaces' \
             identities log in with passwords derived from it; it is never written)"
        )),
    }
}

/// `K/N` with 1 <= K <= N.
pub fn parse_segment(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("--segment {s:?}: expected K/N with 1 <= K <= N, e.g. 2/4");
    let (k, n) = s.split_once('/').ok_or_else(bad)?;
    let (k, n): (u32, u32) = (k.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if n == 0 || k == 0 || k > n {
        return Err(format!("--segment {s}: segment {k} is outside 1..={n}"));
    }
    if n > 4096 {
        return Err(format!("--segment {s}: at most 4096 agents"));
    }
    Ok((k, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_parse_and_out_of_range_is_an_error() {
        assert_eq!(parse_segment("2/4"), Ok((2, 4)));
        for bad in ["5/4", "0/4", "1/0", "x/4", "4", ""] {
            assert!(parse_segment(bad).is_err(), "{bad}");
        }
        assert!(parse_segment("5/4").unwrap_err().contains("outside 1..=4"));
    }

    #[test]
    fn passwords_depend_on_secret_and_namespace() {
        let a = password("0123456789abcdef", "cl_x_a");
        assert_eq!(a.len(), 48);
        assert_eq!(a, password("0123456789abcdef", "cl_x_a"));
        assert_ne!(a, password("0123456789abcdef", "cl_x_b"));
        assert_ne!(a, password("0123456789abcdeF", "cl_x_a"));
    }
}
