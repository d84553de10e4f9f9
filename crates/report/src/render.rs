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
    let servers: Vec<String> = r.servers.iter().map(|s| format!("{} {} at {}", s.backend, s.version, s.url)).collect();
    writeln!(w, "scenario {}  seed {}  run {}  on {}", r.scenario, r.seed, r.run_id, servers.join(", ")).unwrap();
    writeln!(w).unwrap();
    terminal_summary(w, r);
    writeln!(w).unwrap();
    terminal_latency(w, r);
    terminal_strategy_notes(w, r);
    terminal_figures(w, r);
    terminal_problems(w, r);
    // The verdicts last, in words: what a reader of a terminal sees first when it scrolls.
    writeln!(w, "\nverdicts:").unwrap();
    for s in &r.strategies {
        let at = s.label().split_once(" on ").map_or(String::new(), |x| x.1.to_string());
        writeln!(w, "  {:<20} {at}: {}", s.check.verdict, s.check.summary).unwrap();
    }
    out
}

/// The terminal's summary table: one row per strategy run with its totals and verdict.
fn terminal_summary(w: &mut String, r: &Report) {
    writeln!(
        w,
        "{:<29} {:<14} {:<15} {:<9} {:>8} {:>8} {:>7} {:>7} {:>7} {:>6} {:>11} {:>6}  verdict",
        "strategy",
        "backend",
        "isolation",
        "guarantee",
        "ops",
        "ops/s",
        "p99_us",
        "errors",
        "retries",
        "giveup",
        "mismatched",
        "drift"
    )
    .unwrap();
    for s in &r.strategies {
        writeln!(
            w,
            "{:<29} {:<14} {:<15} {:<9} {:>8} {:>8.0} {:>7} {:>7} {:>7} {:>6} {:>11} {:>6}  {}",
            s.strategy,
            s.backend,
            s.isolation,
            s.guarantee,
            s.ops_total,
            s.throughput_ops_per_s,
            s.p99_all(),
            s.errors_total,
            s.retries,
            s.give_ups,
            mismatched(s),
            s.check.drift_abs_total,
            s.check.verdict
        )
        .unwrap();
    }
}

/// The terminal's latency table: one row per op that ran, per strategy run.
fn terminal_latency(w: &mut String, r: &Report) {
    writeln!(
        w,
        "{:<29} {:<14} {:<15} {:<14} {:>8} {:>6} {:>7} {:>8} {:>8} {:>8} {:>8}",
        "latency (us)", "backend", "isolation", "op", "count", "errors", "retries", "p50", "p99", "p999", "max"
    )
    .unwrap();
    for s in &r.strategies {
        for (op, o) in &s.ops {
            if o.count == 0 {
                continue;
            }
            writeln!(
                w,
                "{:<29} {:<14} {:<15} {:<14} {:>8} {:>6} {:>7} {:>8} {:>8} {:>8} {:>8}",
                s.strategy,
                s.backend,
                s.isolation,
                op,
                o.count,
                o.errors,
                o.retries,
                o.latency_us.p50,
                o.latency_us.p99,
                o.latency_us.p999,
                o.latency_us.max
            )
            .unwrap();
        }
    }
}

/// Per strategy run, where there is any: its worst users, first errors and kept namespace.
fn terminal_strategy_notes(w: &mut String, r: &Report) {
    for s in r.strategies.iter().filter(|s| s.check.users_mismatched > 0) {
        writeln!(w, "\n{} worst users (counter vs truth): {}", s.label(), worst(s)).unwrap();
    }
    for s in r.strategies.iter().filter(|s| !s.error_samples.is_empty()) {
        writeln!(w, "\n{} first errors:", s.label()).unwrap();
        for e in &s.error_samples {
            writeln!(w, "  {e}").unwrap();
        }
    }
    for s in r.strategies.iter().filter(|s| s.namespace_kept) {
        writeln!(w, "\n{}: namespace {} kept", s.label(), s.namespace).unwrap();
    }
}

/// Per strategy run that has any: its figures, faults, settle error and anomalies.
fn terminal_figures(w: &mut String, r: &Report) {
    for s in r.strategies.iter().filter(|s| {
        !s.figures.is_empty() || !s.faults.is_empty() || s.settle_error.is_some() || !s.anomalies.is_empty()
    }) {
        let figs: Vec<String> = s.figures.iter().map(|(k, v)| format!("{k}={v}")).collect();
        writeln!(w, "\n{}: {}", s.label(), figs.join(" ")).unwrap();
        for f in &s.faults {
            let when = f.fired_at_ms.map_or("not fired".to_string(), |t| format!("fired at {t} ms"));
            writeln!(w, "  fault {} (planned {} ms, {when}): {}", f.kind, f.at_ms, f.outcome).unwrap();
        }
        if let Some(e) = &s.settle_error {
            writeln!(w, "  settle: {e}").unwrap();
        }
        for a in &s.anomalies {
            writeln!(w, "  anomaly {} x{} (visible after {} calls): {}", a.name, a.count, a.ops_to_detect, a.detail)
                .unwrap();
        }
    }
}

/// What went wrong around the runs: breached thresholds, skipped combinations, failed cleanups.
fn terminal_problems(w: &mut String, r: &Report) {
    let breaches: Vec<String> = r
        .strategies
        .iter()
        .flat_map(|s| s.thresholds.iter().filter(|t| !t.passed).map(move |t| format!("{}: {}", s.label(), t.detail)))
        .collect();
    if !breaches.is_empty() {
        writeln!(w, "\nthresholds breached:\n  {}", breaches.join("\n  ")).unwrap();
    }
    let unmet: Vec<String> = r
        .strategies
        .iter()
        .flat_map(|s| {
            s.expectations.iter().filter(|e| e.judged && !e.met).map(move |e| format!("{}: {}", s.label(), e.detail))
        })
        .collect();
    if !unmet.is_empty() {
        writeln!(w, "\nexpectations not met:\n  {}", unmet.join("\n  ")).unwrap();
    }
    if !r.expectations_not_judged.is_empty() {
        writeln!(w, "\nexpectations not judged (no row ran them):\n  {}", r.expectations_not_judged.join("\n  "))
            .unwrap();
    }
    for k in &r.skipped {
        writeln!(w, "\nskipped {} on {} at {}: {}", k.strategy, k.backend, k.isolation, k.reason).unwrap();
    }
    for s in r.strategies.iter().filter(|s| s.cleanup_error.is_some()) {
        writeln!(w, "\n{}: cleanup failed: {}", s.label(), s.cleanup_error.as_deref().unwrap_or_default()).unwrap();
    }
}

/// Appends `text` and a newline: one line of the Markdown document.
fn line(w: &mut String, text: impl AsRef<str>) {
    w.push_str(text.as_ref());
    w.push('\n');
}

/// A Markdown document: summary, latencies, worst users, and the resolved plan.
pub fn render_markdown(r: &Report) -> String {
    let mut out = String::new();
    let w = &mut out;
    markdown_header(w, r);
    line(w, "\n## Verdicts\n");
    for s in &r.strategies {
        line(
            w,
            format!(
                "- `{}` {}: {}",
                s.check.verdict,
                s.label().split_once(" on ").map_or("", |x| x.1),
                s.check.summary
            ),
        );
    }
    if r.interrupted {
        line(w, "- **interrupted** by Ctrl-C: later runs did not start");
    }
    markdown_summary(w, r);
    markdown_latency(w, r);
    line(w, "\n## Drift\n");
    for s in &r.strategies {
        markdown_strategy(w, s);
    }
    for k in &r.skipped {
        line(w, format!("- skipped {} on {} at {}: {}", k.strategy, k.backend, k.isolation, k.reason));
    }
    line(
        w,
        format!(
            "\n## Resolved plan\n\n```json\n{}\n```",
            serde_json::to_string_pretty(&r.plan).expect("plan serializes")
        ),
    );
    out
}

/// The title and the run's facts: where the scenario came from, seed, build, servers, replay.
fn markdown_header(w: &mut String, r: &Report) {
    line(w, format!("# counterlab run: {}\n", r.scenario));
    line(w, format!("- scenario file: `{}`", r.scenario_path));
    line(w, format!("- seed: {}; run id: `{}`; started {}", r.seed, r.run_id, r.started_at_utc));
    line(w, format!("- counterlab {} at commit `{}`", r.counterlab_version, r.git_commit));
    for s in &r.servers {
        line(w, format!("- {} {} at `{}`", s.backend, s.version, s.url));
    }
    line(w, format!("- replay: `{}`", r.replay_command));
    line(w, format!("- every declared guarantee held: {}", if r.all_guarantees_held { "yes" } else { "**no**" }));
    if r.expectations_unmet > 0 {
        line(w, format!("- **{} expectation(s) of the scenario not met**", r.expectations_unmet));
    }
    for e in &r.expectations_not_judged {
        line(w, format!("- expectation not judged (no row ran it): {e}"));
    }
}

/// The strategy x backend x isolation table: one row per strategy run.
fn markdown_summary(w: &mut String, r: &Report) {
    line(w, "\n## Strategy x backend x isolation\n");
    line(
        w,
        "| strategy | backend | isolation | guarantee | ops | ops/s | p99 us | errors | retries | give-ups | mismatched | over | under | negative | drift | verdict |",
    );
    line(w, "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for s in &r.strategies {
        line(
            w,
            format!(
                "| {} | {} | {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                s.strategy,
                s.backend,
                s.isolation,
                s.guarantee,
                s.ops_total,
                s.throughput_ops_per_s,
                s.p99_all(),
                s.errors_total,
                s.retries,
                s.give_ups,
                mismatched(s),
                s.check.over_counted,
                s.check.under_counted,
                s.check.negative_counters,
                s.check.drift_abs_total,
                s.check.verdict
            ),
        );
    }
}

/// The latency table: one row per op that ran or was skipped, per strategy run.
fn markdown_latency(w: &mut String, r: &Report) {
    line(w, "\n## Latency per operation (microseconds)\n");
    line(
        w,
        "| strategy | backend | isolation | op | count | errors | retries | skipped | p50 | p90 | p99 | p99.9 | max |",
    );
    line(w, "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for s in &r.strategies {
        for (op, o) in s.ops.iter().filter(|(_, o)| o.count + o.skipped > 0) {
            let l = &o.latency_us;
            line(
                w,
                format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    s.strategy,
                    s.backend,
                    s.isolation,
                    op,
                    o.count,
                    o.errors,
                    o.retries,
                    o.skipped,
                    l.p50,
                    l.p90,
                    l.p99,
                    l.p999,
                    l.max
                ),
            );
        }
    }
}

/// One strategy run's entry under Drift: where it ran and its worst users, then one
/// sub-item per error, figure, fault, anomaly and threshold.
fn markdown_strategy(w: &mut String, s: &StrategyReport) {
    let detail = if s.check.users_mismatched == 0 { "no mismatched user".to_string() } else { worst(s) };
    let kept = if s.namespace_kept { ", kept" } else { "" };
    line(
        w,
        format!(
            "- **{}** (namespace `{}`{kept}, server isolation `{}`, ran as {}): {detail}",
            s.label(),
            s.namespace,
            s.isolation_in_effect,
            s.identity
        ),
    );
    if let Some(e) = &s.cleanup_error {
        line(w, format!("  - **cleanup failed**: {e}"));
    }
    if let Some(st) = &s.staleness {
        line(w, format!("  - staleness of replica reads: {}", st.line()));
    }
    if s.permission_denied > 0 {
        line(
            w,
            format!(
                "  - {} operations were refused for lack of a privilege: verdict `{}`",
                s.permission_denied, s.check.verdict
            ),
        );
    }
    for e in &s.error_samples {
        line(w, format!("  - error: `{e}`"));
    }
    for (k, v) in &s.figures {
        line(w, format!("  - {k}: {v}"));
    }
    for f in &s.faults {
        let when = f.fired_at_ms.map_or("not fired".to_string(), |t| format!("fired at {t} ms"));
        line(w, format!("  - fault `{}` (planned {} ms, {when}): {}", f.kind, f.at_ms, f.outcome));
    }
    if let Some(e) = &s.settle_error {
        line(w, format!("  - settle: {e}"));
    }
    line(w, format!("  - history: {}", history_line(&s.history)));
    for a in &s.anomalies {
        line(
            w,
            format!(
                "  - anomaly **{}** x{} ({}; visible after {} calls): {}",
                a.name, a.count, a.meaning, a.ops_to_detect, a.detail
            ),
        );
    }
    for e in &s.expectations {
        let result = match (e.judged, e.met) {
            (false, _) => "not judged",
            (true, true) => "met",
            (true, false) => "**NOT MET**",
        };
        line(w, format!("  - expected {result}: {}", e.detail));
    }
    for t in &s.thresholds {
        line(w, format!("  - threshold {}: {}", if t.passed { "ok" } else { "**BREACHED**" }, t.detail));
    }
}

/// The history and read check in one line.
pub(crate) fn history_line(h: &crate::HistoryReport) -> String {
    let reads = if h.dropped > 0 {
        format!("{} calls not recorded (history full), reads not checked", h.dropped)
    } else {
        format!(
            "{} reads checked against the history, {} out of bounds{}",
            h.reads_checked,
            h.read_violations,
            if h.reads_judged { "" } else { " (not judged: an eventual strategy, or a data loss was scheduled)" }
        )
    };
    let file = h.file.as_ref().map_or(String::new(), |f| format!(", written to {f}"));
    format!("{} calls recorded{file}; {reads}; {} users read after settle", h.events, h.settled_reads)
}
