//! Human renderings of a report: a terminal table and a Markdown document.

use std::fmt::Write as _;

use crate::{Report, StrategyReport};

fn mismatched(s: &StrategyReport) -> String {
    format!("{}/{}", s.check.users_mismatched, s.check.users_checked)
}

fn worst(s: &StrategyReport) -> String {
    s.check
        .worst_users
        .iter()
        .map(|w| match w.counter {
            Some(c) => format!("u{}: {} vs {}", w.user, c, w.truth),
            None => format!("u{}: missing vs {}", w.user, w.truth),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The per-strategy summary and per-op latency tables, for a terminal.
pub fn render_terminal(r: &Report) -> String {
    let mut out = String::new();
    let w = &mut out;
    let servers: Vec<String> = r
        .servers
        .iter()
        .map(|s| format!("{} {} at {}", s.backend, s.version, s.url))
        .collect();
    writeln!(
        w,
        "scenario {}  seed {}  run {}  on {}",
        r.scenario,
        r.seed,
        r.run_id,
        servers.join(", ")
    )
    .unwrap();
    writeln!(w).unwrap();
    writeln!(
        w,
        "{:<20} {:<9} {:<9} {:>9} {:>10} {:>7} {:>11} {:>6} {:>6} {:>6}  verdict",
        "strategy",
        "backend",
        "guarantee",
        "ops",
        "ops/s",
        "errors",
        "mismatched",
        "over",
        "under",
        "drift"
    )
    .unwrap();
    for s in &r.strategies {
        writeln!(
            w,
            "{:<20} {:<9} {:<9} {:>9} {:>10.1} {:>7} {:>11} {:>6} {:>6} {:>6}  {}",
            s.strategy,
            s.backend,
            s.guarantee,
            s.ops_total,
            s.throughput_ops_per_s,
            s.errors_total,
            mismatched(s),
            s.check.over_counted,
            s.check.under_counted,
            s.check.drift_abs_total,
            s.check.verdict
        )
        .unwrap();
    }
    writeln!(w).unwrap();
    writeln!(
        w,
        "{:<20} {:<14} {:>8} {:>6} {:>8} {:>8} {:>8} {:>8}",
        "latency (us)", "op", "count", "errors", "p50", "p99", "p999", "max"
    )
    .unwrap();
    for s in &r.strategies {
        for (op, o) in &s.ops {
            if o.count == 0 {
                continue;
            }
            writeln!(
                w,
                "{:<20} {:<14} {:>8} {:>6} {:>8} {:>8} {:>8} {:>8}",
                s.strategy,
                op,
                o.count,
                o.errors,
                o.latency_us.p50,
                o.latency_us.p99,
                o.latency_us.p999,
                o.latency_us.max
            )
            .unwrap();
        }
    }
    for s in r.strategies.iter().filter(|s| s.check.users_mismatched > 0) {
        writeln!(
            w,
            "\n{} worst users (counter vs truth): {}",
            s.strategy,
            worst(s)
        )
        .unwrap();
    }
    for s in r.strategies.iter().filter(|s| !s.error_samples.is_empty()) {
        writeln!(w, "\n{} first errors:", s.strategy).unwrap();
        for e in &s.error_samples {
            writeln!(w, "  {e}").unwrap();
        }
    }
    for s in r.strategies.iter().filter(|s| s.namespace_kept) {
        writeln!(w, "\n{}: namespace {} kept", s.strategy, s.namespace).unwrap();
    }
    out
}

/// A Markdown document: summary, latencies, worst users, and the resolved plan.
pub fn render_markdown(r: &Report) -> String {
    let mut out = String::new();
    let w = &mut out;
    writeln!(w, "# counterlab run: {}\n", r.scenario).unwrap();
    writeln!(w, "- scenario file: `{}`", r.scenario_path).unwrap();
    writeln!(
        w,
        "- seed: {}; run id: `{}`; started {}",
        r.seed, r.run_id, r.started_at_utc
    )
    .unwrap();
    writeln!(
        w,
        "- counterlab {} at commit `{}`",
        r.counterlab_version, r.git_commit
    )
    .unwrap();
    for s in &r.servers {
        writeln!(w, "- {} {} at `{}`", s.backend, s.version, s.url).unwrap();
    }
    writeln!(w, "- replay: `{}`", r.replay_command).unwrap();
    writeln!(
        w,
        "- every guarantee held: {}\n",
        if r.all_guarantees_held {
            "yes"
        } else {
            "**no**"
        }
    )
    .unwrap();
    writeln!(w, "## Strategies\n").unwrap();
    writeln!(w, "| strategy | backend | guarantee | ops | ops/s | errors | mismatched | over | under | negative | drift | verdict |").unwrap();
    writeln!(
        w,
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    .unwrap();
    for s in &r.strategies {
        writeln!(
            w,
            "| {} | {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} |",
            s.strategy,
            s.backend,
            s.guarantee,
            s.ops_total,
            s.throughput_ops_per_s,
            s.errors_total,
            mismatched(s),
            s.check.over_counted,
            s.check.under_counted,
            s.check.negative_counters,
            s.check.drift_abs_total,
            s.check.verdict
        )
        .unwrap();
    }
    writeln!(w, "\n## Latency per operation (microseconds)\n").unwrap();
    writeln!(
        w,
        "| strategy | op | count | errors | skipped | p50 | p90 | p99 | p99.9 | max |"
    )
    .unwrap();
    writeln!(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|").unwrap();
    for s in &r.strategies {
        for (op, o) in s.ops.iter().filter(|(_, o)| o.count + o.skipped > 0) {
            let l = &o.latency_us;
            writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                s.strategy, op, o.count, o.errors, o.skipped, l.p50, l.p90, l.p99, l.p999, l.max
            )
            .unwrap();
        }
    }
    writeln!(w, "\n## Drift\n").unwrap();
    for s in &r.strategies {
        let detail = if s.check.users_mismatched == 0 {
            "no mismatched user".to_string()
        } else {
            worst(s)
        };
        writeln!(
            w,
            "- **{}** (namespace `{}`{}): {}",
            s.strategy,
            s.namespace,
            if s.namespace_kept { ", kept" } else { "" },
            detail
        )
        .unwrap();
        for e in &s.error_samples {
            writeln!(w, "  - error: `{e}`").unwrap();
        }
    }
    writeln!(
        w,
        "\n## Resolved plan\n\n```json\n{}\n```",
        serde_json::to_string_pretty(&r.plan).unwrap()
    )
    .unwrap();
    out
}
