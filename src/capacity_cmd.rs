//! `counterlab capacity <scenario>`: per design of the scenario the highest open-loop
//! arrival rate that holds an SLO (p99 and dropped ops bounded, the verdict not
//! failing), by a bounded ramp and bisection of short probes, then verified at 0.8x
//! (must hold) and 1.25x (must fail) (`counterlab_runner::capacity`). Writes
//! capacity.json, capacity.md and capacity.html; exit 0 when every design's verification held, 1 when
//! one did not (or no design ran), 2 on bad input, 128 + the signal when interrupted.

use std::path::PathBuf;
use std::process::ExitCode;

use counterlab::capacity::{
    Capacity, CapacityConfig, Design, SearchConfig, Slo, capacity_plan, html, markdown, terminal,
};
use counterlab::scenario::{Overrides, limits};
use counterlab_strategies::Registry;

use super::{Failure, ServerArgs, backend_failure};
use crate::exit::Exit;

#[derive(clap::Args)]
pub struct CapacityArgs {
    /// Scenario TOML file: its designs (strategies x backends x levels), data, workers
    /// (the most ops in flight), mix, arrival and max_wait_ms; its load is replaced by
    /// the probes.
    scenario: PathBuf,
    /// Search only these strategies (repeatable); replaces the scenario's list.
    #[arg(long = "strategy", value_name = "NAME")]
    strategies: Vec<String>,
    /// On these backends (repeatable: auto, postgres, mysql, sqlite); replaces the scenario's.
    #[arg(long = "backend", value_name = "NAME")]
    backends: Vec<String>,
    /// At these isolation levels (repeatable); replaces the scenario's.
    #[arg(long = "isolation", value_name = "LEVEL")]
    isolation: Vec<String>,
    /// Override any scenario field by its dotted path (repeatable), as `run --set`.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    sets: Vec<String>,
    /// The SLO: the measured stage's p99 latency (all ops, from the intended start) at most this.
    #[arg(long, value_name = "MS", default_value_t = 50.0)]
    slo_p99_ms: f64,
    /// The SLO: dropped ops (not started within max_wait_ms) at most this percentage of those scheduled.
    #[arg(long, value_name = "PCT", default_value_t = 0.0)]
    max_dropped_pct: f64,
    /// The first probe's rate.
    #[arg(long, value_name = "OPS_PER_S", default_value_t = 100.0)]
    start_rate: f64,
    /// The ramp's factor: after a held probe the next is this many times faster (after a
    /// failed first probe, slower).
    #[arg(long, default_value_t = 2.0)]
    factor: f64,
    /// Bisection stops when the lowest failed rate is within this percentage above the highest held one.
    #[arg(long, value_name = "PCT", default_value_t = 10.0)]
    resolution_pct: f64,
    /// The lowest rate the ramp goes down to.
    #[arg(long, value_name = "OPS_PER_S", default_value_t = 1.0)]
    min_rate: f64,
    /// The highest rate the ramp goes up to.
    #[arg(long, value_name = "OPS_PER_S", default_value_t = 100_000.0)]
    max_rate: f64,
    /// The most search probes per design (verification adds two).
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=100))]
    max_probes: u32,
    /// The most seconds a design's search takes (verification adds two probes).
    #[arg(long, value_name = "S", default_value_t = 300.0)]
    max_time_s: f64,
    /// Each probe's warm-up at its rate, not measured (0: none).
    #[arg(long, value_name = "S", default_value_t = 1.0)]
    warmup_s: f64,
    /// Each probe's measured stage.
    #[arg(long, value_name = "S", default_value_t = 2.0)]
    probe_s: f64,
    /// Runs per probe, each on a fresh namespace: a rate holds when more than half of
    /// them held the SLO and no verdict failed; the table shows their p99 spread.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=9))]
    repeats: u32,
    /// Output folder for capacity.json, capacity.md and capacity.html [default: reports/runs/<time>-<scenario>-capacity/].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print capacity.json on stdout (the lines go to stderr).
    #[arg(long)]
    json: bool,
    /// Also print each probe run's own log.
    #[arg(long, short = 'v')]
    verbose: bool,
    #[command(flatten)]
    servers: ServerArgs,
    /// Where the servers come from: local, containers or auto, as `run --servers`.
    #[arg(long = "servers", value_name = "MODE")]
    servers_mode: Option<String>,
}

pub fn capacity(args: CapacityArgs) -> ExitCode {
    let Some(rt) = super::runtime() else { return Exit::BadInput.into() };
    super::exit_with(rt.block_on(capacity_all(args)))
}

/// The flags as the search's config; an error naming the flag for a value out of range.
fn config(a: &CapacityArgs) -> Result<CapacityConfig, String> {
    let rate = |flag: &str, v: f64| match v.is_finite() && v > 0.0 && v <= limits::MAX_RATE {
        true => Ok(v),
        false => Err(format!("{flag} must be in (0, {}] ops/s, got {v}", limits::MAX_RATE)),
    };
    let within = |flag: &str, v: f64, lo: f64, hi: f64| match v.is_finite() && v > lo && v <= hi {
        true => Ok(v),
        false => Err(format!("{flag} must be in ({lo}, {hi}], got {v}")),
    };
    let (min_rate, max_rate) = (rate("--min-rate", a.min_rate)?, rate("--max-rate", a.max_rate)?);
    if min_rate > max_rate {
        return Err(format!("--min-rate {min_rate} is above --max-rate {max_rate}"));
    }
    if !(a.max_dropped_pct.is_finite() && (0.0..=100.0).contains(&a.max_dropped_pct)) {
        return Err(format!("--max-dropped-pct must be in [0, 100], got {}", a.max_dropped_pct));
    }
    if !(a.warmup_s.is_finite() && (0.0..=limits::MAX_DURATION_S).contains(&a.warmup_s)) {
        return Err(format!("--warmup-s must be in [0, {}], got {}", limits::MAX_DURATION_S, a.warmup_s));
    }
    Ok(CapacityConfig {
        slo: Slo {
            p99_ms: within("--slo-p99-ms", a.slo_p99_ms, 0.0, 3_600_000.0)?,
            max_dropped_pct: a.max_dropped_pct,
        },
        search: SearchConfig {
            start_rate: rate("--start-rate", a.start_rate)?,
            factor: within("--factor", a.factor, 1.0, 100.0)?,
            resolution: within("--resolution-pct", a.resolution_pct, 0.0, 100.0)? / 100.0,
            min_rate,
            max_rate,
            max_probes: a.max_probes,
        },
        warmup_s: a.warmup_s,
        repeats: a.repeats,
        probe_s: within("--probe-s", a.probe_s, 0.0, limits::MAX_DURATION_S)?,
        max_time_s: within("--max-time-s", a.max_time_s, 0.0, limits::MAX_DURATION_S)?,
    })
}

/// Loads the plan, provides the servers, searches, writes and prints; the exit code.
async fn capacity_all(args: CapacityArgs) -> Result<u8, Failure> {
    let cfg = config(&args).map_err(Failure::input)?;
    let overrides = Overrides {
        strategies: args.strategies.clone(),
        backends: args.backends.clone(),
        isolation: args.isolation.clone(),
        servers: args.servers_mode.clone(),
        sets: args.sets.clone(),
        ..Overrides::default()
    };
    let (now_s, nanos) = counterlab::clock::now_unix();
    let known = Registry::builtin().names();
    let plan = counterlab::scenario::load(&args.scenario, &overrides, &known, now_s ^ (u64::from(nanos) << 20))
        .map_err(|e| Failure::Input(e.into()))?;
    let out = args.out.clone().unwrap_or_else(|| {
        let name = format!("{}-{}-capacity", counterlab::clock::compact(now_s), super::dir_name(&plan.scenario));
        PathBuf::from("reports/runs").join(name)
    });
    super::writable_dir(&out).map_err(Failure::Input)?;
    let (mut opts, sources) = args.servers.clone().options(false).map_err(Failure::input)?;
    let mut log = |l: &str| eprintln!("{l}");
    log(&sources);
    super::watch_ctrl_c(opts.cancel.clone(), "the namespace of the probe in flight (cl_*)");
    let containers = counterlab::containers::provide(plan.servers, &plan, &mut opts, &super::run_id(), &mut log)
        .await
        .map_err(Failure::input)?;
    let verbose = args.verbose;
    let mut detail = |l: &str| {
        if verbose {
            eprintln!("  | {l}");
        }
    };
    let found = capacity_plan(&plan, &opts, &cfg, &mut log, &mut detail).await;
    containers.remove(&mut log).await;
    let found = found.map_err(backend_failure)?;
    let json = serde_json::to_string_pretty(&found).expect("JSON of plain data");
    crate::atomic::write(&out.join("capacity.json"), &json).map_err(Failure::input)?;
    crate::atomic::write(&out.join("capacity.md"), markdown(&found)).map_err(Failure::input)?;
    crate::atomic::write(&out.join("capacity.html"), html(&found)).map_err(Failure::input)?;
    if args.json {
        println!("{json}");
    } else {
        print!("{}", terminal(&found));
        println!("\ncapacity: {}", out.join("capacity.json").display());
    }
    Ok(exit_of(&found))
}

/// 128 + the signal when interrupted; 1 when a design's verification did not hold or no
/// design was searched; else 0.
fn exit_of(c: &Capacity) -> u8 {
    if c.interrupted {
        return super::interrupted().code();
    }
    let searched = c.designs.iter().filter(|d| d.skipped.is_none()).count();
    Exit::failed_if(searched == 0 || !c.designs.iter().all(Design::held)).code()
}
