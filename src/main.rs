//! The `counterlab` binary: parses flags, resolves the backend URL, runs a scenario,
//! writes the report files and maps the result to an exit code
//! (0 guarantees held, 1 a verdict FAIL, a threshold breached or, with --strict, NO
//! EVIDENCE, 2 bad input or unreachable backend, 3 a check that could not complete
//! (INCOMPLETE) and nothing failed, 128 + the signal when Ctrl-C, SIGTERM or SIGHUP
//! interrupted it: 130, 143, 129).

mod annotations;
mod atomic;
mod capacity_cmd;
mod docs_cmd;
mod exit;
mod explore_cmd;
mod init_cmd;
mod list_cmd;
mod phases_cmd;
mod render_cmd;
mod validate_cmd;

use std::io::Write as _;

use exit::Exit;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use counterlab::clock;
use counterlab::run::{RunOptions, run_plan};
use counterlab::scenario::{self, Overrides};
use counterlab_report::{RowOutcome, render_html, render_json, render_markdown, render_terminal_as, row_outcome};
use counterlab_strategies::BackendError;
use counterlab_strategies::Registry;

mod metrics;
mod progress;
mod summary;
mod urls;

#[derive(Parser)]
#[command(
    name = "counterlab",
    version,
    about = "Load-test and correctness-check unread-counter strategies on real databases"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a commented starter scenario (counterlab.toml) and the strategy file it runs
    /// (strategies/my-counter.toml) into DIR; never over an existing file (exit 2).
    Init(init_cmd::InitArgs),
    /// Check a scenario without load: parse it, then on the servers set up every strategy
    /// x backend (namespace, seed, setup, every step prepared) and drop it again. One line
    /// each; exit 0 all ok, 1 one failed, 2 bad input or unreachable server.
    Validate(Box<validate_cmd::ValidateArgs>),
    /// Every interleaving of two (or three) concurrent ops' server calls, each from a
    /// fresh state on the real server: per op pair SAFE, UNSAFE (the shortest failing
    /// schedule as a script; --out writes replay files) or NOT EXPLORED. Exit 1 when an
    /// exact design is UNSAFE; `--replay FILE` runs a failing schedule again.
    Explore(Box<explore_cmd::ExploreArgs>),
    /// Run a scenario file: every strategy in its own namespace, checked against the truth.
    Run(Box<RunArgs>),
    /// Per design, the highest open-loop arrival rate that holds an SLO (p99, dropped
    /// ops, the verdict): a bounded ramp and bisection of short probes, then verified at
    /// 0.8x (must hold) and 1.25x (must fail). Exit 1 when a verification failed.
    Capacity(Box<capacity_cmd::CapacityArgs>),
    /// List the strategies and their declared guarantees: the designs, then the bug zoo's
    /// mutants (deliberately wrong).
    List(ListArgs),
    /// Compare two runs' report.json: throughput and latency changes, verdict changes.
    /// Exit 1 when a verdict stopped matching its guarantee or, with --fail-if-slower, on
    /// a slowdown beyond the limit.
    Compare(CompareArgs),
    /// List the namespaces killed runs left on the configured servers (their markers
    /// say so); with --yes, remove them and their roles, users and ACL users.
    Clean(CleanArgs),
    /// Re-render a saved report.json: write report.md and report.html (beside it, or in
    /// --out) and print the terminal view.
    Report(render_cmd::ReportArgs),
    /// Run the bug zoo: every scenario in DIR declaring `expect_anomaly` over several
    /// seeds. Exit 1 when a mutant's anomaly is missed or a correct strategy shows one.
    Zoo(ZooArgs),
    /// A distributed run, step 1: create and seed every cell's namespace; write the run
    /// handle (needs COUNTERLAB_RUN_SECRET, as every phase does).
    Prepare(Box<phases_cmd::PrepareArgs>),
    /// A distributed run, step 2: one agent (--segment K/N) drives its share and writes
    /// agent-K-of-N/ (history.jsonl, latency.hlog, partial.json) into --out.
    Load(phases_cmd::LoadArgs),
    /// A distributed run, step 3: merge every agent's output, check once, write the
    /// report; exit code as `run`.
    Check(phases_cmd::CheckArgs),
    /// A distributed run, step 4: drop the handle's namespaces and identities.
    Teardown(phases_cmd::TeardownArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell) on stdout.
    Completions(docs_cmd::CompletionsArgs),
    /// Print the man page (roff) on stdout: `counterlab man > counterlab.1`.
    Man,
}

#[derive(clap::Args)]
struct ListArgs {
    /// As a JSON array (name, guarantee, needs, summary) on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct CleanArgs {
    /// Only namespaces whose run started at least this long ago (e.g. 30m, 2h, 1d).
    #[arg(long, value_name = "AGE", default_value = "0")]
    older_than: String,
    /// Remove them (without it, only list what would be removed).
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    servers: ServerArgs,
}

async fn clean_cmd(args: CleanArgs) -> ExitCode {
    let age = match counterlab::clean::parse_age(&args.older_than) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::BadInput.into();
        }
    };
    let opts = match args.servers.options(false) {
        Ok((opts, _)) => opts,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::BadInput.into();
        }
    };
    match counterlab::clean::clean(&opts, age, args.yes, &mut |l| eprintln!("{l}")).await {
        Ok(found) => {
            for c in &found {
                let l = &c.leftover;
                let age = l.marker.age_s();
                println!(
                    "{} {} ({}; {age} s old, host {}): {}",
                    l.backend, l.namespace, l.what, l.marker.host, c.action
                );
            }
            println!("{} leftover namespace(s)", found.len());
            let failed = found.iter().any(|c| c.action.starts_with("failed"));
            Exit::failed_if(failed).into()
        }
        Err(e) => {
            eprintln!("error: {e}");
            Exit::BadInput.into()
        }
    }
}

#[derive(clap::Args)]
struct ZooArgs {
    /// Directory of zoo scenarios.
    #[arg(long, value_name = "DIR", default_value = "scenarios/zoo")]
    dir: PathBuf,
    /// Seeds per file: the file's seed, then seed+1, ...
    #[arg(long, default_value_t = 2)]
    seeds: u64,
    /// Load duration per strategy in seconds; replaces every file's.
    #[arg(long = "duration-s", value_name = "S")]
    duration_s: Option<f64>,
    /// Only these files (by name without .toml; repeatable).
    #[arg(long = "only", value_name = "NAME")]
    only: Vec<String>,
    /// Also fail (exit 1) when a strategy was skipped (e.g. no Redis answering).
    #[arg(long)]
    strict: bool,
    /// Output folder for zoo.json and zoo.md [default: reports/runs/<time>-zoo/].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    #[command(flatten)]
    servers: ServerArgs,
}

/// Where the servers are (the same flags as `run`).
#[derive(Clone, clap::Args)]
struct ServerArgs {
    #[command(flatten)]
    urls: urls::Flags,
    /// Run file-defined strategies with the configured account's rights where a server
    /// cannot give their namespace a role, user or ACL user of its own (the report says so).
    #[arg(long)]
    trust_strategy_files: bool,
}

impl ServerArgs {
    /// Run options for these servers, and where each URL came from (for the log); an
    /// error for a configured SQLite folder that does not exist (exit 2).
    fn options(self, keep: bool) -> Result<(RunOptions, String), String> {
        let r = urls::resolve(self.urls, &|v| std::env::var(v).ok());
        r.check_sqlite()?;
        let sources = r.sources();
        let opts = RunOptions {
            postgres_url: r.postgres.map(|c| c.0),
            postgres_default: counterlab_strategies::DEFAULT_POSTGRES_URL.to_string(),
            mysql_url: r.mysql.map(|c| c.0),
            redis_url: r.redis.map(|c| c.0),
            amqp_url: r.amqp.map(|c| c.0),
            postgres_replica_url: r.postgres_replica.map(|c| c.0),
            redis_replica_url: r.redis_replica.map(|c| c.0),
            sqlite_dir: r.sqlite.map(|c| c.0),
            keep,
            history_dir: None,
            history_limit: counterlab::run::HISTORY_LIMIT,
            connect_timeout: Duration::from_secs(5),
            cancel: Arc::new(AtomicBool::new(false)),
            progress: None,
            trust_strategy_files: self.trust_strategy_files,
            registry: Registry::builtin(),
            on_phase: None,
        };
        Ok((opts, sources))
    }
}

async fn zoo_cmd(args: ZooArgs) -> ExitCode {
    let plan =
        counterlab::zoo::ZooPlan { dir: args.dir, seeds: args.seeds, duration_s: args.duration_s, only: args.only };
    let (opts, sources) = match args.servers.options(false) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::BadInput.into();
        }
    };
    eprintln!("{sources}");
    watch_ctrl_c(opts.cancel.clone(), "the zoo's namespaces");
    let known = opts.registry.names();
    let rows = match counterlab::zoo::run_zoo(&plan, &opts, &known, &mut |l| eprintln!("{l}")).await {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::BadInput.into();
        }
    };
    let table = counterlab::zoo::render(&rows);
    print!("{table}");
    let (now_s, _) = clock::now_unix();
    let out = args.out.unwrap_or_else(|| PathBuf::from("reports/runs").join(format!("{}-zoo", clock::compact(now_s))));
    let written =
        std::fs::create_dir_all(&out).and_then(|_| atomic::write(&out.join("zoo.md"), &table)).and_then(|_| {
            atomic::write(
                &out.join("zoo.json"),
                serde_json::to_string_pretty(&serde_json::json!({
                    "summary": counterlab::zoo::summary(&rows),
                    "runs": rows,
                }))
                .expect("rows serialize"),
            )
        });
    match written {
        Ok(()) => println!("zoo: {}", out.join("zoo.json").display()),
        Err(e) => {
            eprintln!("error: cannot write {}: {e}", out.display());
            return Exit::BadInput.into();
        }
    }
    if opts.cancel.load(Ordering::Relaxed) {
        println!("interrupted: the table covers the runs that finished");
        return interrupted().into();
    }
    let failed = rows.iter().any(|r| r.failed()) || (args.strict && rows.iter().any(|r| r.result == "skipped"));
    Exit::failed_if(failed).into()
}

#[derive(clap::Args)]
struct CompareArgs {
    /// The baseline report.json.
    a: PathBuf,
    /// The report.json to judge against it.
    b: PathBuf,
    /// Fail (exit 1) when a strategy's throughput drops, or an op's p99 rises, by more than PCT percent.
    /// With repeats on both sides (--repeat 3 or more) a slowdown must also be significant
    /// (one-sided Mann-Whitney U, p <= 0.05); without this flag it must then be over 20%.
    #[arg(long = "fail-if-slower", value_name = "PCT")]
    fail_if_slower: Option<f64>,
    /// Fail (exit 1) when a server-side cost figure per op (docs/report.md, "cost") grows by more
    /// than PCT percent, net of its idle share where measured; default 50.
    #[arg(long = "fail-if-costlier", value_name = "PCT")]
    fail_if_costlier: Option<f64>,
    /// Also write the comparison as Markdown to FILE.
    #[arg(long, value_name = "FILE")]
    md: Option<PathBuf>,
    /// Also write the comparison as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn read_report(path: &std::path::Path) -> anyhow::Result<counterlab_report::Report> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let version = v.get("report_schema_version").and_then(|v| v.as_u64());
    match version {
        None => anyhow::bail!("{}: not a counterlab report (no report_schema_version)", path.display()),
        Some(n) if n > counterlab_report::REPORT_SCHEMA_VERSION as u64 => anyhow::bail!(
            "{}: report schema version {n} is newer than this counterlab understands ({})",
            path.display(),
            counterlab_report::REPORT_SCHEMA_VERSION
        ),
        Some(_) => {}
    }
    serde_json::from_value(v).map_err(|e| anyhow::anyhow!("{}: not a counterlab report: {e}", path.display()))
}

fn compare_cmd(args: CompareArgs) -> ExitCode {
    for (flag, value) in [("--fail-if-slower", args.fail_if_slower), ("--fail-if-costlier", args.fail_if_costlier)] {
        if let Some(p) = value.filter(|p| !(p.is_finite() && *p >= 0.0)) {
            eprintln!("error: {flag} must be a percentage >= 0, got {p}");
            return Exit::BadInput.into();
        }
    }
    let (a, b) = match (read_report(&args.a), read_report(&args.b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e:#}");
            return Exit::BadInput.into();
        }
    };
    let c = counterlab_report::compare(
        &a,
        &args.a.display().to_string(),
        &b,
        &args.b.display().to_string(),
        counterlab_report::Limits { slower_pct: args.fail_if_slower, costlier_pct: args.fail_if_costlier },
    );
    print!("{}", counterlab_report::render_comparison(&c));
    let json = serde_json::to_string_pretty(&c).expect("the comparison serializes");
    let files = [(&args.md, counterlab_report::render_comparison_markdown(&c)), (&args.json, json)];
    for (path, text) in files {
        if let Some(path) = path
            && let Err(e) = atomic::write(path, text)
        {
            eprintln!("error: cannot write {}: {e}", path.display());
            return Exit::BadInput.into();
        }
    }
    if c.nothing_in_common() {
        eprintln!("error: nothing to compare: the two reports share no strategy x backend x isolation row");
        return Exit::NothingToCompare.into();
    }
    Exit::failed_if(!c.regressions.is_empty()).into()
}

/// The flags that shape a scenario's plan, shared by `run` and `prepare` (where the
/// workers, ops and rate are totals over every agent).
#[derive(clap::Args)]
pub(crate) struct PlanArgs {
    /// Run only these strategies (repeatable); replaces the scenario's list.
    #[arg(long = "strategy", value_name = "NAME")]
    pub(crate) strategies: Vec<String>,
    /// Run on these backends (repeatable: auto, postgres, mysql, sqlite; prepare: postgres,
    /// mysql); replaces the scenario's.
    #[arg(long = "backend", value_name = "NAME")]
    pub(crate) backends: Vec<String>,
    /// Run at these isolation levels (repeatable); replaces the scenario's.
    #[arg(long = "isolation", value_name = "LEVEL")]
    pub(crate) isolation: Vec<String>,
    /// Seed for every random choice; replaces the scenario's.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Number of closed-loop workers; replaces the scenario's.
    #[arg(long)]
    pub(crate) workers: Option<u32>,
    /// Load duration per strategy in seconds; replaces the scenario's duration or op count.
    #[arg(long = "duration-s", value_name = "S")]
    pub(crate) duration_s: Option<f64>,
    /// Total operations per strategy; replaces the scenario's duration or op count.
    #[arg(long)]
    pub(crate) ops: Option<u64>,
    /// Open loop at this many ops/s (with --workers as the most in flight); replaces the
    /// scenario's load (give --duration-s when the scenario has stages).
    #[arg(long, value_name = "OPS_PER_S")]
    pub(crate) rate: Option<f64>,
    /// Override any scenario field by its dotted path (repeatable), e.g. `--set
    /// workload.workers=8`, `--set workload.stages.1.rate=500`, `--set name=nightly`; checked
    /// like the file's own value (errors at `--set:N:COL`).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub(crate) sets: Vec<String>,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Scenario TOML file (see scenarios/).
    scenario: PathBuf,
    #[command(flatten)]
    plan: PlanArgs,
    #[command(flatten)]
    servers: ServerArgs,
    /// Where the servers come from: local (the configured or local ones), containers
    /// (throwaway ones, removed after the run; needs a Docker engine), auto (local when
    /// answering, else containers when Docker answers, else SQLite) [default: the
    /// scenario's `servers`, else auto].
    #[arg(long = "servers", value_name = "MODE")]
    servers_mode: Option<String>,
    /// Run every strategy N times, interleaved (all once, then again: A B C A B C); the
    /// report shows medians and the spread, and `compare` judges against the noise (1..=20);
    /// replaces the scenario's `repeat`.
    #[arg(long, value_name = "N")]
    repeat: Option<u32>,
    /// After the repeats, run the designs of a backend x level whose order is not settled
    /// again, one round at a time, until it settles or M rounds ran in all (1..=20);
    /// replaces the scenario's `repeat_until_settled` [default: with --repeat, the repeat].
    #[arg(long, value_name = "M")]
    repeat_until_settled: Option<u32>,
    /// Output folder for report.json, report.md, report.html and hdr/*.hlog [default: reports/runs/<time>-<scenario>/].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Keep each strategy's schema after the run (the report names it).
    #[arg(long)]
    keep: bool,
    /// After the load, also explore every row's op pairs step by step (as `counterlab
    /// explore`, with the scenario's `[explore]`): each row says whether it is safe in
    /// every explored interleaving, and an UNSAFE design that declares exact fails.
    #[arg(long)]
    explore: bool,
    /// Serve the live metrics as OpenMetrics (Prometheus text format) on HOST:PORT
    /// while the run lasts (GET /metrics).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
    #[command(flatten)]
    output: progress::OutputArgs,
    /// Also write each strategy run's recorded history as JSON Lines (history/<run>.jsonl
    /// beside the report; format in docs/history.md).
    #[arg(long)]
    history: bool,
    /// Calls recorded per strategy run (past 1M they spill to temporary files, 54 bytes
    /// each); beyond it reads are not checked and the verdict's label says so.
    #[arg(long, value_name = "CALLS", default_value_t = counterlab::run::HISTORY_LIMIT,
          value_parser = clap::value_parser!(u64).range(1..))]
    history_limit: u64,
    /// Also fail (exit 1) when a strategy run had too few operations to judge (NO EVIDENCE)
    /// or was not checked in full (a capped history: the label's brackets).
    #[arg(long)]
    strict: bool,
    /// Also write the verdicts as JUnit XML to FILE: one testcase per strategy x backend
    /// x level, failed exactly when it makes the exit code non-zero.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Also write the figures as CSV to FILE: one record per strategy x backend x level x
    /// op kind (verdict, ops/s, count, errors, retries, latency quantiles in µs).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// The async runtime's worker threads (1..=64) [default: 1 when every stage is a
    /// closed loop of at most 16 workers, else one per core; TOKIO_WORKER_THREADS, when
    /// set, replaces the default].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: Option<u16>,
}

/// Creates `dir` if needed and proves it writable (a probe file, removed again).
fn writable_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!("--out {} is a file, not a directory", dir.display());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create the output folder {}", dir.display()))?;
    let probe = dir.join(".counterlab-write-probe");
    std::fs::write(&probe, b"").with_context(|| format!("cannot write into the output folder {}", dir.display()))?;
    std::fs::remove_file(&probe).ok();
    Ok(())
}

/// A scenario name as one directory name: anything but letters, digits, `-`, `_` and
/// `.` becomes `_`, and dots cannot lead, so a name never moves the output elsewhere.
fn dir_name(name: &str) -> String {
    let safe: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect();
    let safe = safe.trim_start_matches('.');
    if safe.is_empty() { "scenario".into() } else { safe.chars().take(64).collect() }
}

pub(crate) enum Failure {
    /// Bad input or unreachable backend.
    Input(anyhow::Error),
}

impl Failure {
    /// Bad input, from anything that says what was wrong.
    pub(crate) fn input(e: impl std::fmt::Display) -> Failure {
        Failure::Input(anyhow::anyhow!("{e}"))
    }
}

/// The exit code of a subcommand that returns its own code, or says its bad input (exit 2).
pub(crate) fn exit_with(r: Result<u8, Failure>) -> ExitCode {
    match r {
        Ok(code) => ExitCode::from(code),
        Err(Failure::Input(e)) => {
            eprintln!("error: {e:#}");
            Exit::BadInput.into()
        }
    }
}

/// With `--json`, stdout holds the summary only: the human-readable lines go to stderr.
static JSON_STDOUT: AtomicBool = AtomicBool::new(false);

/// `println!`, or `eprintln!` when stdout is reserved for `--json`.
macro_rules! say {
    ($($t:tt)*) => {
        if JSON_STDOUT.load(Ordering::Relaxed) { eprintln!($($t)*) } else { println!($($t)*) }
    };
}

/// How a run that produced a report ended.
enum Ending {
    Held,
    Broken,
    /// No verdict failed, but a strategy's check could not complete (exit 3).
    Incomplete,
    Interrupted,
}

impl Ending {
    /// The exit code (see the file's opening comment).
    fn code(&self) -> u8 {
        match self {
            Ending::Held => Exit::Ok,
            Ending::Broken => Exit::Failed,
            Ending::Incomplete => Exit::Incomplete,
            Ending::Interrupted => interrupted(),
        }
        .code()
    }
}

/// The scenario read and resolved once, before the runtime (whose size depends on it),
/// and the time the run's default seed and folder name come from.
fn plan_run(args: &RunArgs) -> Result<(scenario::RunPlan, u64), Failure> {
    let (now_s, nanos) = clock::now_unix();
    let mut plan = load_plan(args, now_s ^ (u64::from(nanos) << 20))?;
    plan.explore.with_run |= args.explore;
    Ok((plan, now_s))
}

async fn run(args: RunArgs, plan: scenario::RunPlan, now_s: u64) -> Result<Ending, Failure> {
    let strict = args.strict;
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("reports/runs").join(format!("{}-{}", clock::compact(now_s), dir_name(&plan.scenario)))
    });
    // The servers' flags and the output folder are checked before any load: a report
    // that cannot be written is an error in seconds, not after the whole run.
    let (mut opts, sources) =
        args.servers.clone().options(args.keep).map_err(|e| Failure::Input(anyhow::anyhow!(e)))?;
    writable_outputs(&args, &out)?;
    opts.history_dir = history_dir(&args, &out)?;
    opts.history_limit = args.history_limit;
    watch_ctrl_c(opts.cancel.clone(), "this run's namespaces (schemas cl_*)");
    let mut served = args.metrics_addr.as_deref().map(metrics::serve).transpose().map_err(Failure::Input)?;
    // A live line on a terminal, plain lines in CI logs and pipes, nothing with --quiet.
    let ui = progress::Ui::new(&args.output);
    opts.progress = metrics::both(ui.progress(), served.as_ref().map(|m| m.sink()));
    // Writes that fail (a terminal closed under SIGHUP) are dropped, never a panic.
    let mut log = |line: &str| ui.log(line);
    log(&sources);
    log(&runtime_line());
    if let Some(m) = &served {
        log(&format!("metrics: http://{}/metrics", m.addr));
    }
    let containers = counterlab::containers::provide(plan.servers, &plan, &mut opts, &run_id(), &mut log)
        .await
        .map_err(|e| Failure::Input(anyhow::anyhow!(e)))?;
    let report = run_plan(&plan, &opts, &mut log).await;
    containers.remove(&mut log).await;
    served.as_mut().map(metrics::MetricsServer::stop);
    ui.finish();
    let report = report.map_err(backend_failure)?;
    let written = write_report(&out, &report);
    JSON_STDOUT.store(args.output.json, Ordering::Relaxed);
    let shown = render_terminal_as(&report, counterlab_report::terminal_width(), args.output.detail());
    say!("{}", shown.trim_end_matches('\n'));
    let path = out.join("report.json");
    match written {
        // --quiet: no blank line, every line counts.
        Ok(()) => say!("{}report: {}", if args.output.quiet { "" } else { "\n" }, path.display()),
        Err(e) => return Err(Failure::Input(e)),
    }
    write_ci_formats(&args, &report)?;
    if annotations::enabled() {
        annotations::lines(&report, strict).iter().for_each(|l| say!("{l}"));
    }
    let end = ending(&report, strict);
    if args.output.json {
        println!("{}", summary::json(&report, &path, end.code(), strict));
    }
    Ok(end)
}

/// The output folder and the folders of `--junit` and `--csv` can be written to.
fn writable_outputs(args: &RunArgs, out: &Path) -> Result<(), Failure> {
    writable_dir(out).map_err(Failure::Input)?;
    for (flag, file) in [("--junit", &args.junit), ("--csv", &args.csv)] {
        if let Some(dir) = file.as_deref().and_then(|f| f.parent()).filter(|d| !d.as_os_str().is_empty()) {
            writable_dir(dir).map_err(|e| Failure::Input(e.context(flag)))?;
        }
    }
    Ok(())
}

/// `--history`'s folder, made first: histories are written as each strategy run ends.
fn history_dir(args: &RunArgs, out: &Path) -> Result<Option<PathBuf>, Failure> {
    if !args.history {
        return Ok(None);
    }
    let dir = out.join("history");
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))
        .map_err(Failure::Input)?;
    Ok(Some(dir))
}

/// `--junit` and `--csv`, each rendered only when asked for.
fn write_ci_formats(args: &RunArgs, report: &counterlab_report::Report) -> Result<(), Failure> {
    if let Some(file) = &args.junit {
        write_format(file, "junit", counterlab_report::render_junit(report, args.strict))?;
    }
    if let Some(file) = &args.csv {
        write_format(file, "csv", counterlab_report::render_csv(report))?;
    }
    Ok(())
}

fn write_format(file: &Path, what: &str, text: String) -> Result<(), Failure> {
    atomic::write(file, text).with_context(|| format!("cannot write {}", file.display())).map_err(Failure::Input)?;
    say!("{what}: {}", file.display());
    Ok(())
}

/// The label of the containers a run starts.
fn run_id() -> String {
    counterlab::run::new_run_id()
}

/// The scenario with the flags' overrides, resolved against the built-in strategies.
fn load_plan(args: &RunArgs, default_seed: u64) -> Result<scenario::RunPlan, Failure> {
    let mut overrides = args.plan.overrides(args.servers_mode.clone(), args.repeat);
    overrides.repeat_until_settled = args.repeat_until_settled;
    let known = Registry::builtin().names();
    scenario::load(&args.scenario, &overrides, &known, default_seed).map_err(|e| Failure::Input(e.into()))
}

impl PlanArgs {
    /// These flags as the plan's overrides, with `--servers` and `--repeat`.
    pub(crate) fn overrides(&self, servers: Option<String>, repeat: Option<u32>) -> Overrides {
        Overrides {
            strategies: self.strategies.clone(),
            backends: self.backends.clone(),
            servers,
            isolation: self.isolation.clone(),
            seed: self.seed,
            workers: self.workers,
            duration_s: self.duration_s,
            ops: self.ops,
            rate: self.rate,
            repeat,
            repeat_until_settled: None,
            sets: self.sets.clone(),
        }
    }
}

fn backend_failure(e: BackendError) -> Failure {
    match e {
        BackendError::Connect { backend, .. } => {
            let point = match backend {
                "redis" => "--redis URL / COUNTERLAB_REDIS_URL",
                "rabbitmq" => "--amqp URL / COUNTERLAB_AMQP_URL",
                _ => {
                    "--postgres URL / COUNTERLAB_POSTGRES_URL, --mysql URL / COUNTERLAB_MYSQL_URL; `--backend sqlite` needs no server"
                }
            };
            let hint = format!(
                "start the servers with `docker compose up -d` from the repository, or point counterlab at yours with {point}"
            );
            Failure::Input(anyhow::anyhow!("{e}\nhint: {hint}"))
        }
        // Its message already ends with its cause: printed once, not again as a chain.
        other => Failure::Input(anyhow::anyhow!("{other}")),
    }
}

/// report.json, report.md, report.html and the side files (HDR logs) into `out`, each
/// whole or not at all (`atomic::write`).
fn write_report(out: &std::path::Path, report: &counterlab_report::Report) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    for (name, text) in [
        ("report.json", render_json(report)),
        ("report.md", render_markdown(report)),
        ("report.html", render_html(report)),
    ] {
        let path = out.join(name);
        atomic::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    for (name, log) in &report.side_files {
        let path = out.join(name);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        atomic::write(&path, log).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// How the run ended, from the verdicts (the same ones every output shows), with the
/// lines that explain a non-zero exit.
fn ending(report: &counterlab_report::Report, strict: bool) -> Ending {
    if report.thresholds_breached > 0 {
        say!("{} threshold(s) breached:", report.thresholds_breached);
        for s in &report.strategies {
            for t in s.thresholds.iter().filter(|t| !t.passed) {
                say!("  {} on {} at {}: {}", s.strategy, s.backend, s.isolation, t.detail);
            }
        }
    }
    if report.expectations_unmet > 0 {
        say!("{} expectation(s) of the scenario not met:", report.expectations_unmet);
        for s in &report.strategies {
            for e in s.expectations.iter().filter(|e| e.judged && !e.met) {
                say!("  {} on {} at {}: {}", s.strategy, s.backend, s.isolation, e.detail);
            }
        }
    }
    let refuted =
        report.strategies.iter().filter_map(|s| Some((s, s.explored.as_ref().filter(|e| e.breaks_guarantee())?)));
    for (s, e) in refuted {
        say!("the explorer refuted {} on {} at {} (declares exact): {}", s.strategy, s.backend, s.isolation, e.words());
    }
    if report.interrupted {
        say!("interrupted: the report covers the strategies that ran");
        return Ending::Interrupted;
    }
    // An INCOMPLETE row holds no guarantee but broke none: it is said below, not here.
    if report.strategies.iter().any(|s| !s.check.matches_guarantee && !s.check.verdict.is_incomplete()) {
        say!("a strategy broke its declared guarantee; replay with: {}", report.replay_command);
    }
    let no_evidence = report.strategies.iter().filter(|s| !s.check.evidence).count();
    if no_evidence > 0 {
        let then = if strict { "--strict: exit 1" } else { "pass --strict to fail on it" };
        say!("{no_evidence} strategy run(s) had too few operations to judge (NO EVIDENCE; {then})");
    }
    let limited = report.strategies.iter().filter(|s| !s.check.limits.is_empty()).count();
    if limited > 0 {
        let then = if strict { "--strict: exit 1" } else { "pass --strict to fail on it" };
        say!("{limited} strategy run(s) not checked in full (see the verdict's brackets; {then})");
    }
    let incomplete = report.strategies.iter().filter(|s| s.check.verdict.is_incomplete()).count();
    if incomplete > 0 {
        say!("{incomplete} strategy run(s) INCOMPLETE: their check could not complete (exit 3 unless one FAILed)");
    }
    let outcomes: Vec<RowOutcome> = report.strategies.iter().map(|s| row_outcome(s, strict)).collect();
    if outcomes.iter().any(|o| matches!(o, RowOutcome::Failed(_))) {
        Ending::Broken
    } else if outcomes.iter().any(|o| matches!(o, RowOutcome::Incomplete(_))) {
        Ending::Incomplete
    } else {
        Ending::Held
    }
}

/// The signal that interrupted the run (2 SIGINT, 15 SIGTERM, 1 SIGHUP); 0: none.
static INTERRUPTED_BY: AtomicI32 = AtomicI32::new(0);

/// How an interrupted run exits: 128 + the signal, as shells report it.
fn interrupted() -> Exit {
    Exit::Signal(INTERRUPTED_BY.load(Ordering::Relaxed).clamp(1, 31) as u8)
}

/// The first Ctrl-C, SIGTERM (what `timeout`, `docker stop` and CI cancellation send) or
/// SIGHUP sets `cancel` (the load stops, what ran is checked, reported and cleaned up);
/// a second signal exits at once, leaving `what` behind. The signals are watched on a
/// thread and runtime of their own, registered before this returns: a closed-loop run's
/// one thread may be busy for seconds (the check), and a second signal still acts at once.
fn watch_ctrl_c(cancel: Arc<AtomicBool>, what: &'static str) {
    use tokio::signal::unix::{SignalKind, signal};
    let cannot = |e: std::io::Error| say(format!("warning: cannot watch signals ({e}); Ctrl-C ends the run at once"));
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return cannot(e),
    };
    let signals = {
        let _in = rt.enter();
        [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup()].map(|k| signal(k).ok())
    };
    if signals.iter().any(Option::is_none) {
        say("warning: cannot watch every one of SIGINT/SIGTERM/SIGHUP; those unwatched end the run at once".into());
    }
    let watching = std::thread::Builder::new()
        .name("counterlab-signals".into())
        .spawn(move || rt.block_on(watch_signals(signals, cancel, what)));
    if let Err(e) = watching {
        cannot(e);
    }
}

/// A message on stderr; a closed terminal (SIGHUP) makes writes to it fail: never panic.
fn say(m: String) {
    writeln!(std::io::stderr(), "{m}").ok();
}

/// `watch_ctrl_c`'s loop: [SIGINT, SIGTERM, SIGHUP], each None when it is not watched.
async fn watch_signals(mut signals: [Option<tokio::signal::unix::Signal>; 3], cancel: Arc<AtomicBool>, what: &str) {
    async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
    let [int, term, hup] = &mut signals;
    for round in 0..2 {
        let signo = tokio::select! {
            _ = next(int) => 2,
            _ = next(term) => 15,
            _ = next(hup) => 1,
        };
        if round == 0 {
            // The flag first: whatever happens to the message, the run stops cleanly.
            INTERRUPTED_BY.store(signo, Ordering::Relaxed);
            cancel.store(true, Ordering::Relaxed);
            say(format!(
                "interrupted (signal {signo}): stopping the load, then checking and cleaning up (again to abort)"
            ));
        } else {
            say(format!("aborted: {what} may be left behind"));
            std::process::exit(128 + signo);
        }
    }
}

fn runtime() -> Option<tokio::runtime::Runtime> {
    match runtime_with(None) {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("error: {e:#}");
            None
        }
    }
}

/// Above this many closed-loop workers one thread lags behind the replies. PostgreSQL's
/// conditional-update, one thread against `--threads 2`, 4 alternating rounds: at 32
/// workers two threads won every round (median +29% ops/s), at 24 +7%; at 16 one thread had the
/// higher median (+14%, 2 of 4 rounds) on 20% less client CPU per op (4 of 4);
/// at 64 clients one thread ran 0.92 of pgbench's rate, two 0.97-0.99
/// (reports/2026-12-06-client-cost, `recheck/ab-bound`).
const ONE_THREAD_MAX_WORKERS: u32 = 16;

/// `run`'s runtime: `--threads`, else one thread (the current-thread scheduler,
/// `runtime_with`) for a scenario whose every stage is a closed loop of at most
/// `ONE_THREAD_MAX_WORKERS` workers: on two cores an
/// op's wake-up then never crosses to another thread. One worker against two: client
/// CPU per op 5-12% lower at 16 workers (reports/2026-12-05-parity/ab-threads.log); the
/// current-thread scheduler against one worker: Redis 3.5-9% more ops/s at 16 workers
/// (reports/2026-12-06-client-cost, docs/running.md). An open loop keeps one thread per core
/// (its pacer and workers run beside each other), as does an explicit TOKIO_WORKER_THREADS.
fn run_threads(args: &RunArgs, plan: &scenario::RunPlan) -> Option<usize> {
    if let Some(n) = args.threads {
        return Some(usize::from(n));
    }
    if std::env::var_os("TOKIO_WORKER_THREADS").is_some() {
        return None;
    }
    let closed = |s: &scenario::StagePlan| matches!(s.load, scenario::StageLoad::Closed { workers } if workers <= ONE_THREAD_MAX_WORKERS);
    plan.workload.stages.iter().all(closed).then_some(1)
}

/// What the run's runtime is, for the log: its worker threads.
fn runtime_line() -> String {
    let handle = tokio::runtime::Handle::current();
    match handle.runtime_flavor() {
        tokio::runtime::RuntimeFlavor::CurrentThread => "runtime: 1 thread (current-thread)".to_string(),
        _ => {
            let n = handle.metrics().num_workers();
            format!("runtime: {n} worker thread{}", if n == 1 { "" } else { "s" })
        }
    }
}

/// One thread: the current-thread scheduler (the run's own thread polls every task and
/// the I/O driver, so no wake-up crosses threads); more: a worker thread each.
fn runtime_with(threads: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    if let Some(n) = threads.filter(|n| *n > 1) {
        builder.worker_threads(n);
    }
    builder.enable_all().build().context("cannot start the async runtime")
}

/// glibc gives each thread that allocates an arena of its own, up to 8 per core: a run on
/// SQLite has a thread per connection, and their arenas held 34 MB more at 1M users / 10M
/// rows than two arenas do (reports/2026-12-05-parity). `MALLOC_ARENA_MAX`, when set, wins.
fn cap_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: called first thing in main, before any other thread exists.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    }
}

fn main() -> ExitCode {
    cap_malloc_arenas();
    let cli = Cli::parse();
    match cli.command {
        Command::List(args) => {
            match args.json {
                true => println!("{}", summary::list_json()),
                false => print!("{}", list_cmd::render()),
            }
            Exit::Ok.into()
        }
        Command::Init(args) => init_cmd::init(args),
        Command::Validate(args) => validate_cmd::validate(*args),
        Command::Explore(args) => explore_cmd::explore(*args),
        Command::Capacity(args) => capacity_cmd::capacity(*args),
        Command::Compare(args) => compare_cmd(args),
        Command::Report(args) => render_cmd::report_cmd(args),
        Command::Clean(args) => match runtime() {
            Some(rt) => rt.block_on(clean_cmd(args)),
            None => Exit::BadInput.into(),
        },
        Command::Zoo(args) => match runtime() {
            Some(rt) => rt.block_on(zoo_cmd(args)),
            None => Exit::BadInput.into(),
        },
        Command::Prepare(args) => phases_cmd::prepare(*args),
        Command::Load(args) => phases_cmd::load(args),
        Command::Check(args) => phases_cmd::check(args),
        Command::Teardown(args) => phases_cmd::teardown(args),
        Command::Completions(args) => docs_cmd::completions::<Cli>(args),
        Command::Man => docs_cmd::man::<Cli>(),
        Command::Run(args) => {
            let json = args.output.json;
            let ran = plan_run(&args).and_then(|(plan, now_s)| {
                let rt = runtime_with(run_threads(&args, &plan)).map_err(Failure::Input)?;
                rt.block_on(run(*args, plan, now_s))
            });
            match ran {
                Ok(end) => ExitCode::from(end.code()),
                Err(Failure::Input(e)) => {
                    eprintln!("error: {e:#}");
                    if json {
                        println!("{}", serde_json::json!({"exit_code": 2, "error": format!("{e:#}")}));
                    }
                    Exit::BadInput.into()
                }
            }
        }
    }
}
