//! The Markdown rendering of a report, short enough for a pull-request comment: the
//! decision view (one sentence and one ranked table per backend x isolation), a compact
//! summary and the run's facts; the verdicts in full, per-op latencies, drift, anomalies
//! with their witnesses and the resolved plan inside `<details>` blocks.

use crate::decision::{cost_column, decide, noise_note, relative_text};
use crate::render::{history_line, mismatched, worst};
use crate::units::latency;
use crate::{Report, StrategyReport};

/// Appends `text` and a newline: one line of the Markdown document.
fn line(w: &mut String, text: impl AsRef<str>) {
    w.push_str(text.as_ref());
    w.push('\n');
}

/// A table cell: pipes escaped, so a name cannot break the table.
fn c(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The Markdown document: what to pick first, the details folded away.
pub fn render_markdown(r: &Report) -> String {
    let mut out = String::new();
    let w = &mut out;
    line(w, format!("# counterlab run: {}\n", r.scenario));
    markdown_decision(w, r);
    markdown_summary(w, r);
    markdown_facts(w, r);
    details(w, "Every verdict in words", |w| {
        for s in &r.strategies {
            let at = s.label().split_once(" on ").map_or(String::new(), |x| x.1.to_string());
            line(w, format!("- `{}` {at}: {}", s.check.label(), s.check.summary));
        }
    });
    let repeats = crate::repeats::repeats_block(r, "Repeats (", "- ");
    if !repeats.is_empty() {
        details(w, "Repeats: each run's throughput and verdict", |w| w.push_str(&repeats));
    }
    details(w, "Latency per operation", |w| markdown_latency(w, r));
    let tables = crate::cost::cost_tables(r);
    if !tables.is_empty() {
        details(w, "Server-side cost per op (the servers' own statistics)", |w| markdown_cost(w, r, &tables));
    }
    details(w, "Per strategy: drift, errors, figures, faults, anomalies and witnesses", |w| {
        for s in &r.strategies {
            markdown_strategy(w, s);
        }
    });
    details(w, "Resolved plan", |w| {
        line(w, format!("```json\n{}\n```", serde_json::to_string_pretty(&r.plan).expect("plan serializes")));
    });
    out
}

/// A folded block: `<details>` with its summary, a blank line (so GitHub renders the
/// Markdown inside), the body, `</details>`.
fn details(w: &mut String, summary: &str, body: impl FnOnce(&mut String)) {
    line(w, format!("<details><summary>{summary}</summary>\n"));
    body(w);
    line(w, "\n</details>");
}

/// The decision view: per backend x isolation, its sentence, then its ranked rows.
fn markdown_decision(w: &mut String, r: &Report) {
    line(w, "## Decision\n");
    for g in decide(r) {
        line(w, format!("**{}**\n", g.sentence));
        let heads: String = g.cost_figures.iter().map(|f| format!(" {} |", f.heading())).collect();
        line(
            w,
            format!("| # | strategy | verdict | throughput vs best | p99 | retries / give-ups | moving parts |{heads}"),
        );
        line(w, format!("|---:|---|---|---:|---:|---:|---|{}", "---:|".repeat(g.cost_figures.len())));
        for (i, x) in g.rows.iter().enumerate() {
            let costs: String = g.cost_figures.iter().map(|f| format!(" {} |", cost_column::cell(f, x))).collect();
            line(
                w,
                format!(
                    "| {} | {} | {} | {} | {} | {} / {} | {} |{costs}",
                    i + 1,
                    c(&x.row.display_name()),
                    c(&x.verdict),
                    relative_text(x),
                    x.p99,
                    x.row.retries,
                    x.row.give_ups,
                    c(&x.cost)
                ),
            );
        }
        line(w, "");
    }
    // The cost columns' legend joins the noise note: one paragraph under every group.
    let figures: Vec<_> = decide(r).into_iter().flat_map(|g| g.cost_figures).collect();
    let legend = cost_column::legend(&figures).map_or(String::new(), |l| format!(" {l}"));
    line(w, format!("_{}{legend}_\n", noise_note(r)));
}

/// The cost tables (`cost.rs`), each with its note on what is server-wide.
fn markdown_cost(w: &mut String, r: &Report, tables: &[crate::cost::CostTable]) {
    for t in tables {
        line(w, format!("**{}**\n", t.title));
        line(w, format!("| {} |", t.head.join(" | ")));
        line(w, format!("|---|---|{}", "---:|".repeat(t.head.len() - 2)));
        for row in &t.rows {
            line(w, format!("| {} |", row.iter().map(|x| c(x)).collect::<Vec<_>>().join(" | ")));
        }
        line(w, format!("\n_{}_\n", t.note));
    }
    for e in crate::cost::cost_errors(r) {
        line(w, format!("- not read: {}", c(&e)));
    }
    for a in crate::cost::cost_absent(r) {
        line(w, format!("- not on this server: {}", c(&a)));
    }
}

/// The compact summary: one row per strategy run, its verdict label last.
fn markdown_summary(w: &mut String, r: &Report) {
    line(w, "| strategy | backend | isolation | ops/s | errors | mismatched | verdict |");
    line(w, "|---|---|---|---:|---:|---:|---|");
    for s in &r.strategies {
        line(
            w,
            format!(
                "| {} | {} | {} | {:.0}{} | {} | {} | {} |",
                c(&s.strategy),
                s.backend,
                s.isolation,
                s.throughput_ops_per_s,
                crate::decision::stalled_mark(s),
                s.errors_total,
                mismatched(s),
                s.check.label()
            ),
        );
    }
}

/// The run's facts in a few lines: the overall result, what ran where, how to replay.
fn markdown_facts(w: &mut String, r: &Report) {
    line(w, "");
    let held = if r.all_guarantees_held { "yes" } else { "**no**" };
    line(w, format!("Every declared guarantee held: {held}."));
    if r.interrupted {
        line(w, "**Interrupted** by Ctrl-C: later runs did not start.");
    }
    if r.expectations_unmet > 0 {
        line(w, format!("**{} expectation(s) of the scenario not met.**", r.expectations_unmet));
    }
    for e in &r.expectations_not_judged {
        line(w, format!("Expectation not judged (no row ran it): {e}."));
    }
    for k in &r.skipped {
        line(w, format!("Skipped {} on {} at {}: {}.", k.strategy, k.backend, k.isolation, k.reason));
    }
    let servers: Vec<String> =
        r.servers.iter().map(|s| format!("{} {} at `{}`", s.backend, s.version, s.url)).collect();
    line(
        w,
        format!(
            "Scenario `{}`, seed {}, run `{}` started {}; counterlab {} at `{}`; {}.",
            r.scenario_path,
            r.seed,
            r.run_id,
            r.started_at_utc,
            r.counterlab_version,
            r.git_commit,
            servers.join(", ")
        ),
    );
    line(w, format!("Replay: `{}`\n", r.replay_command));
}

/// The latency table: one row per op that ran or was skipped, per strategy run.
fn markdown_latency(w: &mut String, r: &Report) {
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
                    c(&s.strategy),
                    s.backend,
                    s.isolation,
                    op,
                    o.count,
                    o.errors,
                    o.retries,
                    o.skipped,
                    latency(l.p50),
                    latency(l.p90),
                    latency(l.p99),
                    latency(l.p999),
                    latency(l.max)
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
    let notes = [
        s.cleanup_error.as_ref().map(|e| format!("**cleanup failed**: {e}")),
        s.agents.as_ref().map(|a| format!("distributed: {}", a.line())),
        s.staleness.as_ref().map(|st| format!("staleness of replica reads: {}", st.line())),
        s.settled.as_ref().map(|settled| format!("before the load: {settled}")),
        s.client_cpu_line(),
    ];
    for note in notes.into_iter().flatten() {
        line(w, format!("  - {note}"));
    }
    if s.permission_denied > 0 {
        line(
            w,
            format!(
                "  - {} operations were refused for lack of a privilege: verdict `{}`",
                s.permission_denied,
                s.check.label()
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
    if let Some(n) = &s.drift_note {
        line(w, format!("  - {n}"));
    }
    line(w, format!("  - history: {}", history_line(&s.history)));
    markdown_anomalies(w, s);
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
    if let Some(e) = &s.explored {
        let mark = if e.breaks_guarantee() { " (**breaks its declared guarantee**)" } else { "" };
        line(w, format!("  - explored: {}{mark}", e.words()));
    }
}

/// Each anomaly of a row with its witnesses.
fn markdown_anomalies(w: &mut String, s: &StrategyReport) {
    for a in &s.anomalies {
        line(
            w,
            format!(
                "  - anomaly **{}** x{} ({}; visible after {} calls): {}",
                a.name, a.count, a.meaning, a.ops_to_detect, a.detail
            ),
        );
        for x in &a.witnesses {
            let on = if x.notification != 0 { format!(" notification {}", x.notification) } else { String::new() };
            line(
                w,
                format!(
                    "    - witness user {}{on}: expected {}, observed {}; {}",
                    x.user, x.expected, x.observed, x.note
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::tests::{report, row};

    /// Lines outside `<details>` blocks (their opening and closing lines show).
    fn visible(md: &str) -> usize {
        let mut depth = 0usize;
        md.lines()
            .filter(|l| {
                if l.starts_with("<details>") {
                    depth += 1;
                    true
                } else if l.starts_with("</details>") {
                    depth = depth.saturating_sub(1);
                    true
                } else {
                    depth == 0
                }
            })
            .count()
    }

    #[test]
    fn a_quickstart_report_shows_the_decision_first_in_under_40_lines() {
        let mut r = report(vec![
            row("direct-update", "postgres", "none", "drift-expected", 1500.0, 9_000),
            row("select-for-update", "postgres", "exact", "pass", 1000.0, 18_000),
            row("conditional-update", "postgres", "exact", "pass", 1250.0, 12_000),
        ]);
        r.plan = serde_json::json!({"workload": {"lines": (0..400).collect::<Vec<u32>>()}});
        let md = render_markdown(&r);
        assert!(visible(&md) <= 40, "{} visible lines:\n{md}", visible(&md));
        assert!(md.lines().count() > 400, "the plan is still there, folded");
        let decision = md.find("## Decision").unwrap();
        let sentence = md.find("**On postgres at read-committed, conditional-update kept exact counts").unwrap();
        assert!(
            decision < sentence
                && sentence < md.find("| 1 | conditional-update | kept exact counts | 1.00× | 12 ms").unwrap()
        );
        assert!(md.contains("| drift-expected |") && md.contains("- `pass` postgres at read-committed"));
        let plan = md.find("<details><summary>Resolved plan</summary>").unwrap();
        assert!(md[plan..].contains("```json"), "the plan is inside its block");
        assert!(!md.contains(" us |") && !md.contains("p99 us"), "one unit: ms");
    }

    #[test]
    fn the_cost_table_shows_measured_rows_per_op_marks_server_wide_figures_and_names_failed_readings() {
        use crate::cost::{CostReport, CostSource, Counters, Scope};
        let counters = |kv: &[(&str, i64)]| kv.iter().map(|(k, v)| (k.to_string(), *v)).collect::<Counters>();
        let mut measured = row("conditional-update", "postgres", "exact", "pass", 1250.0, 12_000);
        measured.cost = Some(CostReport {
            ops: 1000,
            users: 100,
            interval_s: 0.0,
            sources: vec![
                CostSource {
                    name: "pg_tables".into(),
                    delta: counters(&[("n_tup_upd", 1500), ("n_tup_hot_upd", 600), ("n_tup_ins", 200)]),
                    ..Default::default()
                },
                CostSource {
                    name: "pg_wal".into(),
                    scope: Scope::Server,
                    delta: counters(&[("lsn_bytes", 240_000), ("wal_bytes", 1), ("wal_records", 3000)]),
                    ..Default::default()
                },
                CostSource {
                    name: "redis_memory".into(),
                    error: Some("after settle: gone".into()),
                    ..Default::default()
                },
            ],
        });
        let r = report(vec![measured, row("direct-update", "postgres", "none", "drift-expected", 1500.0, 9_000)]);
        let md = render_markdown(&r);
        let table = &md[md.find("**PostgreSQL, per op**").unwrap()..];
        assert!(table.contains("| strategy | level | ops | WAL B* |"), "{md}");
        assert!(
            table.contains("| conditional-update | read-committed | 1000 | 240 | 3.00 | 0.00 | 0.20 | 1.50 | 40% |"),
            "{md}"
        );
        assert!(!table.contains("| direct-update |"), "a row without a cost has no line");
        assert!(md.contains("_* server-wide"), "{md}");
        assert!(md.contains(
            "- not read: conditional-update on postgres at read-committed: redis_memory: after settle: gone"
        ));
        let html = crate::render_html(&r);
        assert!(html.contains("<h3>PostgreSQL, per op</h3>") && html.contains("<td class=\"num\">40%</td>"));
        let none = report(vec![row("direct-update", "postgres", "none", "drift-expected", 1500.0, 9_000)]);
        assert!(!render_markdown(&none).contains("Server-side cost"));
    }
}
