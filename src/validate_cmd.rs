//! `counterlab validate <scenario>`: the scenario parsed and resolved as `run` does
//! (exit 2 at the first mistake, located), then every strategy x backend set up on the
//! servers without load and dropped again (`counterlab_runner::run::validate`); one
//! line each, exit 0 when all are ok, 1 when one failed, 2 on bad input or a server
//! that does not answer.

use crate::exit::Exit;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use counterlab::run::validate::{Outcome, Validated, validate_plan};
use counterlab::scenario::Overrides;
use counterlab_strategies::Registry;

use super::{Failure, ServerArgs, backend_failure};

#[derive(clap::Args)]
pub struct ValidateArgs {
    /// Scenario TOML file (see scenarios/, or `counterlab init`).
    scenario: PathBuf,
    /// Validate only these strategies (repeatable); replaces the scenario's list.
    #[arg(long = "strategy", value_name = "NAME")]
    strategies: Vec<String>,
    /// On these backends (repeatable: auto, postgres, mysql, sqlite); replaces the scenario's.
    #[arg(long = "backend", value_name = "NAME")]
    backends: Vec<String>,
    /// Override any scenario field by its dotted path (repeatable), as `run --set`.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    sets: Vec<String>,
    #[command(flatten)]
    servers: ServerArgs,
    /// Where the servers come from: local, containers or auto, as `run --servers`.
    #[arg(long = "servers", value_name = "MODE")]
    servers_mode: Option<String>,
    /// Also fail (exit 1) when a strategy would be skipped (no Redis answering, say).
    #[arg(long)]
    strict: bool,
}

pub fn validate(args: ValidateArgs) -> ExitCode {
    let Some(rt) = super::runtime() else { return Exit::BadInput.into() };
    super::exit_with(rt.block_on(validate_all(args)))
}

/// Loads the plan, provides the servers (containers when asked), validates and prints;
/// the exit code.
async fn validate_all(args: ValidateArgs) -> Result<u8, Failure> {
    let overrides = Overrides {
        strategies: args.strategies,
        backends: args.backends,
        servers: args.servers_mode,
        sets: args.sets,
        ..Overrides::default()
    };
    let known = Registry::builtin().names();
    let plan =
        counterlab::scenario::load(&args.scenario, &overrides, &known, 0).map_err(|e| Failure::Input(e.into()))?;
    let (mut opts, sources) = args.servers.options(false).map_err(|e| Failure::Input(anyhow::anyhow!(e)))?;
    let mut log = |l: &str| eprintln!("{l}");
    log(&sources);
    super::watch_ctrl_c(opts.cancel.clone(), "the namespace being validated (cl_*)");
    let containers = counterlab::containers::provide(plan.servers, &plan, &mut opts, &super::run_id(), &mut log)
        .await
        .map_err(|e| Failure::Input(anyhow::anyhow!(e)))?;
    let validated = validate_plan(&plan, &opts, &mut log).await;
    containers.remove(&mut log).await;
    let validated = validated.map_err(backend_failure)?;
    validated.iter().for_each(|v| println!("{}", line(v)));
    let code = summary(&validated, args.strict);
    Ok(if opts.cancel.load(Ordering::Relaxed) { super::interrupted().code() } else { code })
}

/// `<strategy> on <backend>: ok`, `...: FAILED: <why>` or `...: skipped: <why>`, and a
/// cleanup that failed.
fn line(v: &Validated) -> String {
    let head = format!("{} on {}", v.strategy, v.backend);
    let mut out = match &v.outcome {
        Outcome::Ok => format!("{head}: ok"),
        Outcome::Failed(why) => format!("{head}: FAILED: {why}"),
        Outcome::Skipped(why) => format!("{head}: skipped: {why}"),
    };
    if let Some(e) = &v.cleanup_error {
        out += &format!(" (cleanup failed: {e}; `counterlab clean --yes` removes what is left)");
    }
    out
}

/// Prints the tally; 1 when a pair failed or its cleanup did (or, with `strict`, one
/// was skipped), else 0.
fn summary(validated: &[Validated], strict: bool) -> u8 {
    let count = |f: fn(&Outcome) -> bool| validated.iter().filter(|v| f(&v.outcome)).count();
    let (ok, failed) = (count(|o| *o == Outcome::Ok), count(|o| matches!(o, Outcome::Failed(_))));
    let skipped = count(|o| matches!(o, Outcome::Skipped(_)));
    let unclean = validated.iter().filter(|v| v.cleanup_error.is_some()).count();
    println!("{ok} ok, {failed} failed, {skipped} skipped");
    let bad = failed > 0 || unclean > 0 || (strict && skipped > 0);
    if bad { 1 } else { 0 }
}
