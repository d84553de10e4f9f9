//! `counterlab prepare | load | check | teardown`: a run split across processes (issue
//! 20; docs/distributed.md). Flags, the schedulers' environment fallbacks
//! (`COUNTERLAB_HANDLE`, `COUNTERLAB_SEGMENT` or `JOB_COMPLETION_INDEX` +
//! `COUNTERLAB_AGENTS`, `COUNTERLAB_OUT`) and exit codes; the work is in
//! `counterlab_runner::run::phases`.

use crate::exit::Exit;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use counterlab::run::phases::{self, handle::Handle, handle::Source};
use counterlab_report::render_terminal;
use counterlab_sim::Segment;
use counterlab_strategies::Registry;

use super::{PlanArgs, ServerArgs, ending, write_report};

#[derive(clap::Args)]
pub struct PrepareArgs {
    /// Scenario TOML file (see scenarios/).
    scenario: PathBuf,
    /// Where to write the run handle (JSON, no secrets).
    #[arg(long, value_name = "FILE")]
    handle: PathBuf,
    #[command(flatten)]
    plan: PlanArgs,
    #[command(flatten)]
    servers: ServerArgs,
}

#[derive(clap::Args)]
pub struct LoadArgs {
    /// The run handle [else COUNTERLAB_HANDLE].
    #[arg(long, value_name = "FILE")]
    handle: Option<PathBuf>,
    /// This agent's segment K/N [else COUNTERLAB_SEGMENT, else JOB_COMPLETION_INDEX + 1 of COUNTERLAB_AGENTS].
    #[arg(long, value_name = "K/N")]
    segment: Option<String>,
    /// Folder shared by the agents; this one writes agent-K-of-N/ in it [else COUNTERLAB_OUT].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    #[command(flatten)]
    servers: ServerArgs,
}

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The run handle [else COUNTERLAB_HANDLE].
    #[arg(long, value_name = "FILE")]
    handle: Option<PathBuf>,
    /// The agents' shared output folder [else COUNTERLAB_OUT].
    #[arg(long, value_name = "DIR")]
    from: Option<PathBuf>,
    /// Output folder for the report [default: <from>/report].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Wait up to this many seconds for every agent's output (0: they must be there).
    #[arg(long = "wait-agents", value_name = "SECS", default_value_t = 0)]
    wait_agents: u64,
    /// Also fail (exit 1) on NO EVIDENCE.
    #[arg(long)]
    strict: bool,
    #[command(flatten)]
    servers: ServerArgs,
}

#[derive(clap::Args)]
pub struct TeardownArgs {
    /// The run handle [else COUNTERLAB_HANDLE].
    #[arg(long, value_name = "FILE")]
    handle: Option<PathBuf>,
    #[command(flatten)]
    servers: ServerArgs,
}

/// Longest `--wait-agents`: a day.
const MAX_WAIT_S: u64 = 86_400;

fn env_path(flag: Option<PathBuf>, var: &str, what: &str) -> Result<PathBuf, String> {
    flag.or_else(|| std::env::var_os(var).map(PathBuf::from))
        .ok_or_else(|| format!("no {what}: pass --{what} or set {var}"))
}

/// The segment from the flag, `COUNTERLAB_SEGMENT`, or an Indexed Job's 0-based index.
fn segment(flag: Option<String>) -> Result<Segment, String> {
    let given = flag.or_else(|| std::env::var("COUNTERLAB_SEGMENT").ok());
    let text = match (given, std::env::var("JOB_COMPLETION_INDEX"), std::env::var("COUNTERLAB_AGENTS")) {
        (Some(s), _, _) => s,
        (None, Ok(i), Ok(n)) => {
            let i: u32 = i.trim().parse().map_err(|_| format!("JOB_COMPLETION_INDEX={i:?} is not a number"))?;
            format!("{}/{}", i.saturating_add(1), n.trim())
        }
        (None, Ok(_), Err(_)) => return Err("JOB_COMPLETION_INDEX is set but COUNTERLAB_AGENTS is not".into()),
        (None, Err(_), _) => return Err("no segment: pass --segment K/N or set COUNTERLAB_SEGMENT".into()),
    };
    let (k, n) = phases::handle::parse_segment(&text)?;
    Ok(Segment { k, n })
}

/// The handle and its plan, resolved again and checked.
fn open(handle: Option<PathBuf>) -> Result<(Handle, counterlab::scenario::RunPlan), String> {
    let path = env_path(handle, "COUNTERLAB_HANDLE", "handle")?;
    let h = Handle::read(&path)?;
    let plan = h.plan(&Registry::builtin().names())?;
    Ok((h, plan))
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {e}");
    Exit::BadInput.into()
}

fn block_on<F: std::future::Future<Output = ExitCode>>(f: F) -> ExitCode {
    match super::runtime() {
        Some(rt) => rt.block_on(f),
        None => Exit::BadInput.into(),
    }
}

pub fn prepare(args: PrepareArgs) -> ExitCode {
    block_on(async move {
        let secret = match phases::handle::secret() {
            Ok(s) => s,
            Err(e) => return fail(e),
        };
        let path = std::fs::canonicalize(&args.scenario).unwrap_or_else(|_| args.scenario.clone());
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => return fail(format!("cannot read scenario {}: {e}", args.scenario.display())),
        };
        let source = Source {
            path: path.display().to_string(),
            name: path.file_stem().map_or("scenario".into(), |s| s.to_string_lossy().into_owned()),
            text,
            strategies: args.plan.strategies,
            backends: args.plan.backends,
            isolation: args.plan.isolation,
            workers: args.plan.workers,
            duration_s: args.plan.duration_s,
            ops: args.plan.ops,
            rate: args.plan.rate,
            sets: args.plan.sets,
        };
        let mut overrides = source.overrides(0);
        overrides.seed = args.plan.seed;
        let (now_s, nanos) = counterlab::clock::now_unix();
        let known = Registry::builtin().names();
        let plan = counterlab::scenario::parse(
            &source.path,
            &source.text,
            &source.name,
            &overrides,
            &known,
            now_s ^ (u64::from(nanos) << 20),
        );
        let plan = match plan {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let (opts, sources) = match args.servers.options(false) {
            Ok(o) => o,
            Err(e) => return fail(e),
        };
        eprintln!("{sources}");
        match phases::prepare(&plan, source, &opts, &secret, &mut |l| eprintln!("{l}")).await {
            Ok(h) => match h.write(&args.handle) {
                Ok(()) => {
                    println!("{}", args.handle.display());
                    Exit::Ok.into()
                }
                Err(e) => fail(format!("{e} (the namespaces stay: `counterlab clean --yes` removes them)")),
            },
            Err(e) => fail(e),
        }
    })
}

pub fn load(args: LoadArgs) -> ExitCode {
    block_on(async move {
        let prepared = (|| {
            let seg = segment(args.segment)?;
            let out = env_path(args.out, "COUNTERLAB_OUT", "out")?;
            let (h, plan) = open(args.handle)?;
            let secret = phases::handle::secret()?;
            Ok::<_, String>((seg, out, h, plan, secret))
        })();
        let (seg, out, h, plan, secret) = match prepared {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let (opts, sources) = match args.servers.options(false) {
            Ok(o) => o,
            Err(e) => return fail(e),
        };
        eprintln!("{sources}");
        super::watch_ctrl_c(opts.cancel.clone(), "nothing (the namespaces are the handle's)");
        match phases::load(&h, &plan, seg, &out, &opts, &secret, &mut |l| eprintln!("{l}")).await {
            Ok(run) => {
                println!("{}", run.dir.display());
                Exit::Ok.into()
            }
            Err(e) => fail(e),
        }
    })
}

pub fn check(args: CheckArgs) -> ExitCode {
    block_on(async move {
        let prepared = (|| {
            let from = env_path(args.from, "COUNTERLAB_OUT", "from")?;
            let (h, plan) = open(args.handle)?;
            let secret = phases::handle::secret()?;
            Ok::<_, String>((from, h, plan, secret))
        })();
        let (from, h, plan, secret) = match prepared {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let out = args.out.unwrap_or_else(|| from.join("report"));
        if let Err(e) = super::writable_dir(&out) {
            return fail(format!("{e:#}"));
        }
        let (opts, sources) = match args.servers.options(false) {
            Ok(o) => o,
            Err(e) => return fail(e),
        };
        eprintln!("{sources}");
        let wait = Duration::from_secs(args.wait_agents.min(MAX_WAIT_S));
        let report = match phases::check(&h, &plan, &from, wait, &opts, &secret, &mut |l| eprintln!("{l}")).await {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        if let Err(e) = write_report(&out, &report) {
            return fail(format!("{e:#}"));
        }
        println!("{}", render_terminal(&report).trim_end_matches('\n'));
        println!("\nreport: {}", out.join("report.json").display());
        ExitCode::from(ending(&report, args.strict).code())
    })
}

pub fn teardown(args: TeardownArgs) -> ExitCode {
    block_on(async move {
        let prepared = open(args.handle).and_then(|(h, plan)| Ok((h, plan, phases::handle::secret()?)));
        let (h, plan, secret) = match prepared {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let opts = match args.servers.options(false) {
            Ok((opts, _)) => opts,
            Err(e) => return fail(e),
        };
        match phases::teardown(&h, &plan, &opts, &secret, &mut |l| eprintln!("{l}")).await {
            Ok(()) => Exit::Ok.into(),
            Err(e) => fail(e),
        }
    })
}
