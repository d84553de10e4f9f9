//! `counterlab validate`: every strategy x backend of a plan set up for real with no
//! load: the namespace and its identity created, a small seed, the strategy built (a
//! strategy file's `setup` run, every SQL step prepared and its Lua scripts loaded, as
//! `run` does before its load), then the namespace dropped again. One line per pair.

use std::time::Instant;

use counterlab_core::{OpError, ReadFrom};
use counterlab_plan::RunPlan;
use counterlab_strategies::{BackendError, SeedSpec};

use super::one::{self, Cell, Made};
use super::servers::Servers;
use super::{RunOptions, Target};

/// Users seeded for a validation: enough for every statement to meet rows, few enough
/// to take no time whatever the scenario's `[data]` says.
pub const VALIDATE_USERS: u64 = 16;

/// What validating one strategy on one backend found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Set up, prepared and torn down without an error.
    Ok,
    /// It would fail before the load: why (a strategy file's step at its file:line:col).
    Failed(String),
    /// The run would skip it (no Redis answering, a dialect it has no statements for).
    Skipped(String),
}

/// One strategy x backend: the names and the outcome; `namespace` the one it used.
#[derive(Clone, Debug)]
pub struct Validated {
    pub strategy: String,
    pub backend: String,
    pub namespace: Option<String>,
    pub outcome: Outcome,
    /// A cleanup that failed (what `counterlab clean --yes` would remove).
    pub cleanup_error: Option<String>,
}

/// Validates every strategy of `plan` on every backend it names (at the first level it
/// runs at there: statements do not depend on the level). Connecting the servers is the
/// only error; each pair's own problem is its line. Once `opts.cancel` is set (Ctrl-C)
/// the pair in flight is still cleaned up and the rest are skipped.
pub async fn validate_plan(
    plan: &RunPlan,
    opts: &RunOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<Validated>, BackendError> {
    let run_id = super::new_run_id();
    let servers = Servers::connect(plan, opts, &run_id, log).await?;
    log(&format!("validate {run_id}"));
    let mut out = Vec::new();
    for server in &servers.sql {
        for name in &plan.strategies {
            if opts.cancel.load(std::sync::atomic::Ordering::Relaxed) {
                out.push(skip(name, server.dialect().name().to_string(), "interrupted: not validated".into()));
                continue;
            }
            let mut skipped = Vec::new();
            let found = super::cells_of(plan, opts, server, &servers, name, &mut skipped)?;
            let Some((info, (redis, amqp), levels)) = found else {
                let why = skipped.first().map_or_else(|| "not run here".to_string(), |s| s.reason.clone());
                let backend = skipped.first().map_or_else(|| server.dialect().name().to_string(), |s| s.backend.name());
                out.push(skip(name, backend, why));
                continue;
            };
            let t = Target {
                server,
                redis,
                amqp,
                run_id: &run_id,
                name,
                info,
                isolation: levels[0],
                seed: small_seed(plan),
                repeat: 0,
                index: (out.len() + 1, out.len() + 1),
                read_from: ReadFrom::Primary,
            };
            out.push(validate_one(plan, opts, t, log).await);
        }
    }
    Ok(out)
}

fn skip(name: &str, backend: String, why: String) -> Validated {
    Validated {
        strategy: name.to_string(),
        backend,
        namespace: None,
        outcome: Outcome::Skipped(why),
        cleanup_error: None,
    }
}

/// The plan's seed with at most `VALIDATE_USERS` users.
fn small_seed(plan: &RunPlan) -> SeedSpec {
    let s = plan.data.seed_spec();
    SeedSpec { n_users: s.n_users.min(VALIDATE_USERS), ..s }
}

/// One pair: create, refuse an unconfined identity, seed and build (bounded as `run`
/// bounds its setup), then clean up whatever happened.
async fn validate_one(plan: &RunPlan, opts: &RunOptions, t: Target<'_>, log: &mut dyn FnMut(&str)) -> Validated {
    let cell = Cell::new(plan, opts, t);
    let mut v = Validated {
        strategy: cell.t.name.to_string(),
        backend: cell.backend.name(),
        namespace: Some(cell.ns_name.clone()),
        outcome: Outcome::Ok,
        cleanup_error: None,
    };
    let started = Instant::now();
    let ns = match cell.t.server.create_namespace(&cell.ns_name, cell.pool_spec()).await {
        Ok(ns) => ns,
        Err(e) => {
            v.outcome = Outcome::Failed(reason(&e));
            return v;
        }
    };
    let mut made = Made::default();
    let bound = cell.bounds().setup;
    let built = match one::refuse_unconfined(&cell, &ns) {
        Err(e) => Err(reason(&e)),
        Ok(()) => match tokio::time::timeout(bound, one::seed(&cell, &ns, &mut made)).await {
            Ok(seeded) => seeded.map(|_| ()).map_err(|e| reason(&e)),
            Err(_) => Err(super::deadline::over("setup", bound)),
        },
    };
    let failed = one::cleanup(&cell, ns, made, log).await;
    if let Err(why) = built {
        v.outcome = Outcome::Failed(why);
    }
    if !failed.is_empty() {
        v.cleanup_error = Some(failed.join("; "));
    }
    log(&format!("{}: validated in {:.2}s", cell.label(), started.elapsed().as_secs_f64()));
    v
}

/// What went wrong, without the namespace (it is gone) and, for a strategy's own error,
/// without its class: a strategy file's message starts at its step's file:line:col.
pub fn reason(e: &BackendError) -> String {
    match e {
        BackendError::Step { step, source, .. } => match source.downcast_ref::<OpError>() {
            Some(op) => format!("{step}: {}", op.message),
            None => format!("{step}: {source}"),
        },
        other => other.to_string(),
    }
}
