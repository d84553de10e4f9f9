//! The command a report prints to replay its run: the same scenario, seed, sizes,
//! strategies and backends, and the server options that differed (passwords redacted).

use counterlab_plan::RunPlan;
use counterlab_strategies::{DEFAULT_AMQP_URL, DEFAULT_MYSQL_URL, DEFAULT_REDIS_URL, redact_url};

use super::RunOptions;

/// The server options of a run that differ from the defaults, for the replay command:
/// URLs with passwords redacted (and a note to supply them), the SQLite folder, trust.
pub fn server_flags(opts: &RunOptions) -> String {
    let mut out = String::new();
    let urls = [
        ("--postgres", opts.postgres_url.as_deref(), opts.postgres_default.as_str()),
        ("--mysql", opts.mysql_url.as_deref(), DEFAULT_MYSQL_URL),
        ("--redis", opts.redis_url.as_deref(), DEFAULT_REDIS_URL),
        ("--amqp", opts.amqp_url.as_deref(), DEFAULT_AMQP_URL),
        ("--postgres-replica", opts.postgres_replica_url.as_deref(), ""),
        ("--redis-replica", opts.redis_replica_url.as_deref(), ""),
    ];
    for (flag, url, default) in urls {
        if let Some(u) = url.filter(|u| *u != default) {
            out += &format!(" {flag} '{}'", redact_url(u).replace('\'', "%27"));
        }
    }
    if let Some(d) = &opts.sqlite_dir {
        out += &format!(" --sqlite '{}'", d.display());
    }
    if opts.trust_strategy_files {
        out += " --trust-strategy-files";
    }
    if out.contains("***") {
        out += "  # passwords are redacted: put yours in place of ***";
    }
    out
}

/// The command that replays this plan with the same seed and sizes.
pub fn replay_command(plan: &RunPlan) -> String {
    let mut cmd = format!("counterlab run {} --seed {}", plan.scenario_path, plan.seed);
    if plan.repeat > 1 {
        cmd += &format!(" --repeat {}", plan.repeat);
    }
    if plan.repeat_max > plan.repeat {
        cmd += &format!(" --repeat-until-settled {}", plan.repeat_max);
    }
    // `--workers` also replaces every closed stage's own count: leave it out when the
    // file's stages carry their own.
    let w = &plan.workload;
    if w.stages.iter().all(|s| s.workers().is_none_or(|n| n == w.n_workers)) {
        cmd += &format!(" --workers {}", w.n_workers);
    }
    if let Some(r) = plan.workload.rate {
        cmd += &format!(" --rate {r}");
    }
    match (plan.workload.duration_s, plan.workload.ops) {
        (Some(d), _) => cmd += &format!(" --duration-s {d}"),
        (None, Some(n)) => cmd += &format!(" --ops {n}"),
        // Stages from the file, possibly stretched by --duration-s: say the total.
        (None, None) => {
            let total: f64 = plan.workload.stages.iter().filter(|s| s.measured).filter_map(|s| s.duration_s()).sum();
            cmd += &format!(" --duration-s {total}");
        }
    }
    for s in &plan.strategies {
        cmd += &format!(" --strategy {s}");
    }
    for b in &plan.backends {
        cmd += &format!(" --backend {}", b.name());
    }
    cmd
}
