//! `counterlab explore <scenario>`: every interleaving of two (or three) concurrent ops'
//! server calls for each strategy x backend x level of the scenario, each from a fresh
//! state on the real server (`counterlab_runner::run::explore`); the op-pair matrix
//! (SAFE / UNSAFE / NOT EXPLORED), the shortest failing schedule of each UNSAFE pair as
//! a two-column script, and `--replay FILE` to run one failing schedule again.
//! Exit 1 when a design that declares the exact guarantee is UNSAFE, or the explorer
//! could not go on (ERROR); 0 otherwise; 2 on bad input.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use counterlab::run::explore::{
    EXPLORE_SCHEMA_VERSION, ExploreConfig, Explored, PairResult, ReplayFile, columns, explore_plan, markdown,
    parse_pair, safe_detail, script_lines,
};
use counterlab::scenario::Overrides;
use counterlab_strategies::Registry;

use super::{Failure, ServerArgs, backend_failure};
use crate::exit::Exit;

#[derive(clap::Args)]
pub struct ExploreArgs {
    /// Scenario TOML file (its strategies, backends and levels are explored).
    #[arg(required_unless_present = "replay")]
    scenario: Option<PathBuf>,
    /// Explore only these strategies (repeatable); replaces the scenario's list.
    #[arg(long = "strategy", value_name = "NAME")]
    strategies: Vec<String>,
    /// On these backends (repeatable: auto, postgres, mysql, sqlite).
    #[arg(long = "backend", value_name = "NAME")]
    backends: Vec<String>,
    /// At these isolation levels (repeatable); replaces the scenario's.
    #[arg(long = "isolation", value_name = "LEVEL")]
    isolation: Vec<String>,
    /// Only these op pairs (repeatable), e.g. `mark_read,mark_read`; default: the
    /// scenario's `[explore] pairs`, else the whole matrix.
    #[arg(long = "pair", value_name = "A,B")]
    pairs: Vec<String>,
    /// Concurrent sessions per schedule: 2, or 3 (the third repeats the second op);
    /// default: the scenario's `[explore] sessions`, else 2.
    #[arg(long, value_parser = clap::value_parser!(u8).range(2..=3))]
    sessions: Option<u8>,
    /// The most schedules run per op pair (more: NOT EXPLORED, with what was left);
    /// default: the scenario's `[explore] budget`, else 1000.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=5000))]
    budget: Option<u64>,
    /// The most preemptions a schedule may have (CHESS); default: any number. A pair
    /// whose search the bound cut short is NOT EXPLORED, never SAFE.
    #[arg(long, value_name = "N")]
    preemptions: Option<u32>,
    /// Branch at every step, a plain BEGIN too (by default a BEGIN, which takes no
    /// snapshot and no lock, is glued to its session's next statement: fewer
    /// schedules, the same outcomes).
    #[arg(long)]
    no_reduction: bool,
    /// Override any scenario field by its dotted path (repeatable), as `run --set`.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    sets: Vec<String>,
    /// Write explore.json, explore.md and one replay file per UNSAFE pair into this folder.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print the result as JSON on stdout (the lines go to stderr).
    #[arg(long)]
    json: bool,
    /// Run the failing schedule of a replay file (written by --out) again.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
    /// With --replay: how many times (each on a fresh namespace).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    times: u32,
    #[command(flatten)]
    servers: ServerArgs,
}

pub fn explore(args: ExploreArgs) -> ExitCode {
    let Some(rt) = super::runtime() else { return Exit::BadInput.into() };
    let r = match args.replay.clone() {
        Some(file) => rt.block_on(replay(args, &file)),
        None => rt.block_on(explore_all(args)),
    };
    super::exit_with(r)
}

/// The plan, the options and the config from the flags.
async fn explore_all(args: ExploreArgs) -> Result<u8, Failure> {
    let scenario = args.scenario.clone().expect("clap requires the scenario without --replay");
    let explored = run(&args, &scenario, |plan| config(&args, plan)).await?;
    let Some(explored) = explored else { return Ok(super::interrupted().code()) };
    if let Some(dir) = &args.out {
        write_out(dir, &scenario, &explored).map_err(Failure::input)?;
    }
    if args.json {
        let v = serde_json::json!({ "version": EXPLORE_SCHEMA_VERSION, "explored": explored });
        println!("{}", serde_json::to_string_pretty(&v).expect("JSON of plain data"));
    } else {
        print!("{}", render(&explored));
    }
    Ok(exit_of(&explored))
}

/// The scenario's `[explore]` with the flags over it.
fn config(args: &ExploreArgs, plan: &counterlab::scenario::RunPlan) -> Result<ExploreConfig, Failure> {
    let mut cfg = ExploreConfig::of_plan(&plan.explore).map_err(Failure::input)?;
    let flags: Result<Vec<_>, Failure> =
        args.pairs.iter().map(|p| parse_pair(p).map_err(|e| Failure::input(format!("--pair: {e}")))).collect();
    let flags = flags?;
    if !flags.is_empty() {
        cfg.pairs = Some(flags);
    }
    cfg.sessions = args.sessions.map_or(cfg.sessions, usize::from);
    cfg.budget = args.budget.unwrap_or(cfg.budget);
    cfg.preemptions = args.preemptions.or(cfg.preemptions);
    cfg.reduce = !args.no_reduction;
    Ok(cfg)
}

/// Loads the plan and explores it with the config `cfg` makes of it; None when
/// interrupted.
async fn run(
    args: &ExploreArgs,
    scenario: &Path,
    cfg: impl FnOnce(&counterlab::scenario::RunPlan) -> Result<ExploreConfig, Failure>,
) -> Result<Option<Vec<Explored>>, Failure> {
    let overrides = Overrides {
        strategies: args.strategies.clone(),
        backends: args.backends.clone(),
        isolation: args.isolation.clone(),
        sets: args.sets.clone(),
        ..Overrides::default()
    };
    let known = Registry::builtin().names();
    let plan = counterlab::scenario::load(scenario, &overrides, &known, 0).map_err(|e| Failure::Input(e.into()))?;
    let cfg = cfg(&plan)?;
    let (opts, sources) = args.servers.clone().options(false).map_err(Failure::input)?;
    let mut log = |l: &str| eprintln!("{l}");
    log(&sources);
    super::watch_ctrl_c(opts.cancel.clone(), "the namespace being explored (cl_*)");
    let explored = explore_plan(&plan, &opts, &cfg, &mut log).await.map_err(backend_failure)?;
    Ok((!opts.cancel.load(Ordering::Relaxed)).then_some(explored))
}

/// 1 when a design declaring the exact guarantee is UNSAFE somewhere, or a pair ERRORed.
fn exit_of(explored: &[Explored]) -> u8 {
    let bad = explored.iter().any(|e| {
        e.pairs.iter().any(|p| match &p.result {
            PairResult::Unsafe { .. } => e.declares_exact,
            PairResult::Error { .. } => true,
            _ => false,
        })
    });
    if bad { Exit::Failed.code() } else { Exit::Ok.code() }
}

/// The matrix per cell, then each UNSAFE pair's shortest failing schedule.
pub fn render(explored: &[Explored]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for e in explored {
        let head = format!("{} on {} at {}", e.strategy, e.backend, e.isolation);
        if let Some(why) = &e.skipped {
            let _ = writeln!(out, "{head}: not explored: {why}");
            continue;
        }
        let unsafe_n = e.pairs.iter().filter(|p| matches!(p.result, PairResult::Unsafe { .. })).count();
        let _ = writeln!(out, "{head} (guarantee {}): {} pairs, {unsafe_n} UNSAFE", e.guarantee, e.pairs.len());
        for p in &e.pairs {
            let names: Vec<&str> = p.ops.iter().map(|o| o.name()).collect();
            let _ = writeln!(out, "  {:<40} {}", names.join(" ‖ "), detail(&p.result));
        }
        for p in &e.pairs {
            if let PairResult::Unsafe { first, .. } = &p.result {
                let names: Vec<&str> = p.ops.iter().map(|o| o.name()).collect();
                let _ = writeln!(out, "\n  {head}: {}: the shortest failing schedule", names.join(" ‖ "));
                for l in columns(&p.ops, first).lines() {
                    let _ = writeln!(out, "  {l}");
                }
            }
        }
        out.push('\n');
    }
    out
}

fn detail(r: &PairResult) -> String {
    match r {
        PairResult::Safe { explored, retried: 0, faulted: 0 } => format!("SAFE ({explored} schedules, all exact)"),
        PairResult::Safe { explored, retried, faulted } => {
            format!("SAFE ({explored} schedules, all exact; {})", safe_detail(*retried, *faulted))
        }
        PairResult::Unsafe { explored, failing, first } => {
            format!("UNSAFE ({failing} of {explored} schedules drift: {})", first.anomalies.join(", "))
        }
        PairResult::NotExplored { explored, left } => format!("NOT EXPLORED ({explored} schedules exact; {left})"),
        PairResult::Error { explored, why } => format!("ERROR after {explored} schedules: {why}"),
    }
}

/// explore.json, explore.md and one replay file per UNSAFE pair.
fn write_out(dir: &Path, scenario: &Path, explored: &[Explored]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let v = serde_json::json!({ "version": EXPLORE_SCHEMA_VERSION, "explored": explored });
    crate::atomic::write(&dir.join("explore.json"), serde_json::to_string_pretty(&v)?.as_bytes())?;
    crate::atomic::write(&dir.join("explore.md"), markdown(explored).as_bytes())?;
    let scenario = std::fs::canonicalize(scenario)?.display().to_string();
    for e in explored {
        for p in &e.pairs {
            let PairResult::Unsafe { first, .. } = &p.result else { continue };
            let ops: Vec<String> = p.ops.iter().map(|o| format!("{o:?}").to_lowercase()).collect();
            let name = format!("{}-{}-{}-{}.replay.json", e.strategy, e.backend, e.isolation, ops.join("-"));
            let file = ReplayFile {
                version: EXPLORE_SCHEMA_VERSION,
                scenario: scenario.clone(),
                strategy: e.strategy.clone(),
                backend: e.backend.clone(),
                dialect: e.dialect.clone(),
                isolation: e.isolation.clone(),
                ops: p.ops.clone(),
                script: script_lines(&e.dialect, &e.isolation, &p.ops, first),
                failing: (**first).clone(),
                reduced: e.reduced,
            };
            crate::atomic::write(&dir.join(name), serde_json::to_string_pretty(&file)?.as_bytes())?;
        }
    }
    eprintln!("explore: wrote {}", dir.join("explore.json").display());
    Ok(())
}

/// Runs a replay file's schedule `--times` times; 0 when each run ends with the same
/// counter, truth and anomalies as recorded, else 1.
async fn replay(mut args: ExploreArgs, file: &Path) -> Result<u8, Failure> {
    let text = std::fs::read_to_string(file).map_err(|e| Failure::input(format!("{}: {e}", file.display())))?;
    let r: ReplayFile = serde_json::from_str(&text).map_err(|e| Failure::input(format!("{}: {e}", file.display())))?;
    args.strategies = vec![r.strategy.clone()];
    args.backends = vec![r.dialect.clone()];
    args.isolation = vec![r.isolation.clone()];
    let cfg = ExploreConfig {
        sessions: r.ops.iter().filter(|o| !o.background()).count(),
        budget: 1,
        preemptions: None,
        pairs: Some(vec![(r.ops[0], r.ops[1])]),
        replay: Some(r.failing.choices.clone()),
        reduce: r.reduced,
    };
    for l in &r.script {
        println!("{l}");
    }
    let mut same = 0;
    for i in 1..=args.times {
        let Some(explored) = run(&args, Path::new(&r.scenario), |_| Ok(cfg.clone())).await? else {
            return Ok(super::interrupted().code());
        };
        let got = explored.iter().flat_map(|e| &e.pairs).next().map(|p| &p.result);
        let verdict = match got {
            Some(PairResult::Unsafe { first, .. })
                if first.anomalies == r.failing.anomalies
                    && first.counter == r.failing.counter
                    && first.truth == r.failing.truth =>
            {
                same += 1;
                format!("same: counter {:?}, truth {}, {}", first.counter, first.truth, first.anomalies.join(", "))
            }
            Some(other) => format!("DIFFERENT: {}", detail(other)),
            None => "DIFFERENT: nothing ran".to_string(),
        };
        println!("replay {i}/{}: {verdict}", args.times);
    }
    println!("replayed {same} of {} times with the recorded outcome", args.times);
    Ok(if same == args.times { Exit::Ok.code() } else { Exit::Failed.code() })
}
