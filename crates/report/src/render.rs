//! The terminal rendering of a report: the decision view first (one sentence and one
//! ranked table per backend x isolation), the verdict table and every verdict in words
//! last, the per-op latencies only at `Detail::Verbose` and just the sentences, the
//! verdict table and problems at `Detail::Quiet`; comfy-table tables laid out to the
//! terminal's width (a fixed width off a terminal), their words and numbers kept whole.

use std::fmt::Write as _;
use std::io::IsTerminal as _;

use comfy_table::{CellAlignment, ColumnConstraint, ContentArrangement, Table, presets};

use crate::decision::{self, decide, relative_text};
use crate::units::latency;
use crate::{Report, StrategyReport};

/// The width tables are laid out to when stdout is not a terminal (CI logs, pipes).
pub const FIXED_WIDTH: u16 = 100;

pub(crate) fn mismatched(s: &StrategyReport) -> String {
    format!("{}/{}", s.check.users_mismatched, s.check.users_checked)
}

pub(crate) fn worst(s: &StrategyReport) -> String {
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

/// The terminal's width when stdout is one (at least 40 columns), else `FIXED_WIDTH`.
pub fn terminal_width() -> u16 {
    if !std::io::stdout().is_terminal() {
        return FIXED_WIDTH;
    }
    Table::new().width().filter(|w| *w >= 40).unwrap_or(FIXED_WIDTH)
}

/// How much of the report the terminal shows: `-q`, the default, `-v`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Detail {
    /// The decision's sentences, the verdict table and what went wrong (`--quiet`).
    Quiet,
    /// Everything but the per-op latency table.
    #[default]
    Normal,
    /// Also the per-op latency table (`--verbose`).
    Verbose,
}

/// The report for a terminal of the width stdout has (see `terminal_width`).
pub fn render_terminal(r: &Report) -> String {
    render_terminal_as(r, terminal_width(), Detail::Normal)
}

/// The report for a terminal `width` columns wide, at the default detail.
pub fn render_terminal_width(r: &Report, width: u16) -> String {
    render_terminal_as(r, width, Detail::Normal)
}

/// The report for a terminal `width` columns wide. It opens with the decision (its
/// sentences and ranked tables), then the run's header, the per-op latencies (`Verbose`
/// only), the repeats, notes, figures and problems, and ends with the verdict table and
/// every verdict in words, so the last screen holds the verdicts. `Quiet`: the
/// decision's sentences, the verdict table and what went wrong, nothing else.
pub fn render_terminal_as(r: &Report, width: u16, detail: Detail) -> String {
    let mut out = String::new();
    let w = &mut out;
    if detail == Detail::Quiet {
        let groups = decide(r);
        for g in &groups {
            writeln!(w, "{}\n", wrap(&g.sentence, width)).unwrap();
        }
        // One group's sentence already names its backend and level.
        terminal_summary(w, r, width, groups.len() > 1);
        let mut notes = String::new();
        terminal_problems(&mut notes, r);
        write_wrapped(w, &notes, width);
        return out;
    }
    terminal_decision(w, r, width);
    let servers: Vec<String> = r.servers.iter().map(|s| format!("{} {} at {}", s.backend, s.version, s.url)).collect();
    let head = format!("scenario {}  seed {}  run {}  on {}", r.scenario, r.seed, r.run_id, servers.join(", "));
    writeln!(w, "{}{}", wrap(&head, width), pipeline_words(r)).unwrap();
    if detail == Detail::Verbose {
        writeln!(w).unwrap();
        terminal_latency(w, r, width);
    }
    let mut notes = crate::repeats::repeats_block(r, "\nrepeats (", "  ");
    terminal_strategy_notes(&mut notes, r);
    terminal_figures(&mut notes, r);
    terminal_problems(&mut notes, r);
    terminal_context(&mut notes, r);
    write_wrapped(w, &notes, width);
    writeln!(w).unwrap();
    terminal_summary(w, r, width, true);
    let mut notes = String::from("verdicts:\n");
    for s in &r.strategies {
        let at = s.label().split_once(" on ").map_or(String::new(), |x| x.1.to_string());
        let refuted = s.explored.as_ref().filter(|e| e.breaks_guarantee());
        let refuted = refuted.map_or(String::new(), |e| format!("; but explored, it fails: {}", e.words()));
        writeln!(notes, "  {:<20} {at}: {}{refuted}", s.check.label(), s.check.summary).unwrap();
    }
    write_wrapped(w, &notes, width);
    out
}

/// `notes` written to `w`, each line wrapped to `width` at spaces, keeping its indent.
fn write_wrapped(w: &mut String, notes: &str, width: u16) {
    for l in notes.lines() {
        let text = l.trim_start();
        let indent = &l[..l.len() - text.len()];
        let inner = width.saturating_sub(indent.len() as u16).max(20);
        for part in wrap(text, inner).lines() {
            writeln!(w, "{indent}{part}").unwrap();
        }
    }
}

/// Keeps column `i` as wide as its content (a name or a label that must not break).
fn keep_whole(t: &mut Table, i: usize) {
    if let Some(c) = t.column_mut(i) {
        c.set_constraint(ColumnConstraint::ContentWidth);
    }
}

/// A table laid out to `width` columns, wrapping cells as needed, no colours.
fn table(width: u16, header: &[&str], right: &[usize]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::UTF8_FULL_CONDENSED)
        .force_no_tty()
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(width)
        .set_header(header.to_vec());
    for i in right {
        if let Some(c) = t.column_mut(*i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// Units a number keeps on its line (`89 ms`, `2.5 s`, `40 MiB`).
const UNITS: [&str; 10] = ["ms", "s", "us", "µs", "ops/s", "B", "KiB", "MiB", "GiB", "%"];

/// `text` split at spaces, a number and the unit after it kept as one piece.
fn pieces(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in text.split(' ') {
        let unit = UNITS.contains(&word.trim_end_matches([',', '.', ')', ';', ':']));
        match out.last_mut() {
            Some(prev) if unit && prev.ends_with(|c: char| c.is_ascii_digit()) => {
                prev.push(' ');
                prev.push_str(word);
            }
            _ => out.push(word.to_string()),
        }
    }
    out
}

/// `text` broken into lines of at most `width` columns, at spaces (never between a
/// number and its unit).
pub fn wrap(text: &str, width: u16) -> String {
    let mut lines: Vec<String> = vec![String::new()];
    for word in pieces(text) {
        let word = word.as_str();
        let last = lines.last_mut().expect("one line");
        if !last.is_empty() && last.chars().count() + 1 + word.chars().count() > width as usize {
            lines.push(word.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    lines.join("\n")
}

/// The decision view: per backend x isolation, its sentence and its ranked rows.
fn terminal_decision(w: &mut String, r: &Report, width: u16) {
    writeln!(w, "DECISION").unwrap();
    for g in decide(r) {
        writeln!(w, "\n{}", wrap(&g.sentence, width)).unwrap();
        writeln!(w, "{}", ranked_table(&g, width)).unwrap();
        if !g.cost_figures.is_empty() {
            writeln!(w, "{}", cost_table(&g, width)).unwrap();
        }
    }
    writeln!(w, "{}\n", wrap(&decision::noise_note(r), width)).unwrap();
}

/// One group's ranked rows as a table `width` columns wide (wider only when a single
/// word or number could not fit). Every column is as wide as its content; the verdict
/// words and the moving parts are wrapped here at spaces, so nothing is split inside a
/// word. When a verdict column as wide as its longest word does not fit, the verdict
/// words go under the strategy's name instead.
fn ranked_table(g: &decision::Group<'_>, width: u16) -> Table {
    let mut cells: Vec<Vec<String>> = g
        .rows
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let retries = format!("{}/{}", x.row.retries, x.row.give_ups);
            let name = x.row.display_name().to_string();
            vec![(i + 1).to_string(), name, x.verdict.clone(), relative_text(x), x.p99.clone(), retries, x.cost.clone()]
        })
        .collect();
    let mut head = vec!["#", "strategy", "verdict", "vs best", "p99", "retries/\ngive-ups", "moving\nparts"];
    let col = |i: usize| cells.iter().map(|c| c[i].clone()).chain([head[i].to_string()]).collect::<Vec<_>>();
    let widest = |i: usize| widest_piece(&col(i), false);
    let word = |i: usize| widest_piece(&col(i), true);
    let fixed: usize = [0, 1, 3, 4, 5].iter().map(|&i| widest(i)).sum();
    let mut parts = widest(6).min(word(6).max(14));
    let room = (width as usize).saturating_sub(fixed + parts + 3 * 7 + 1);
    if room >= word(2) {
        let verdict = widest(2).min(room);
        cells.iter_mut().for_each(|c| c[2] = wrap(&c[2], verdict as u16));
    } else {
        let name = widest(1).max(word(2));
        let rest = (width as usize).saturating_sub(fixed - widest(1) + name + 3 * 6 + 1);
        parts = widest(6).min(word(6).max(rest));
        for c in &mut cells {
            let words = c.remove(2);
            c[1] = format!("{}\n{}", c[1], wrap(&words, name as u16));
        }
        head.remove(2);
    }
    let last = head.len() - 1;
    cells.iter_mut().for_each(|c| c[last] = wrap(&c[last], parts as u16));
    // #, vs best, p99 and retries read right-aligned.
    let right: Vec<usize> = (0..last).filter(|&i| i == 0 || i >= last - 3).collect();
    let mut t = table(width, &head, &right);
    cells.into_iter().for_each(|c| {
        t.add_row(c);
    });
    (0..=last).for_each(|i| keep_whole(&mut t, i));
    t
}

/// The decision's cost columns for a terminal: under the ranked table (which keeps its
/// width), a table numbered as it is, one column per figure that differs most, the idle
/// share on a line of its own, and the legend above it.
fn cost_table(g: &decision::Group<'_>, width: u16) -> String {
    let mut head: Vec<String> = vec!["#".into(), "strategy".into()];
    head.extend(g.cost_figures.iter().map(|f| f.heading().replace(' ', "\n")));
    let heads: Vec<&str> = head.iter().map(String::as_str).collect();
    let right: Vec<usize> = (0..heads.len()).filter(|i| *i != 1).collect();
    let mut t = table(width, &heads, &right);
    for (i, x) in g.rows.iter().enumerate() {
        let mut row = vec![(i + 1).to_string(), x.row.display_name()];
        row.extend(g.cost_figures.iter().map(|f| decision::cost_column::cell(f, x).replacen(" (", "\n(", 1)));
        t.add_row(row);
    }
    (0..heads.len()).for_each(|i| keep_whole(&mut t, i));
    let legend = decision::cost_column::legend(&g.cost_figures)
        .unwrap_or_else(|| "Cost per op, the figures that differ most between these designs.".into());
    format!("{}\n{t}", wrap(&legend, width))
}

/// The widest line (or, with `words`, the longest word) of `cells`, in characters.
fn widest_piece(cells: &[String], words: bool) -> usize {
    let pieces = |c: &String| -> Vec<usize> {
        let count = |p: &str| p.chars().count();
        if words { c.split_whitespace().map(count).collect() } else { c.lines().map(count).collect() }
    };
    cells.iter().flat_map(pieces).max().unwrap_or(0)
}

/// The verdict table: one row per strategy run with its totals and verdict label. When
/// every row ran on one backend at one level, they are named once above the table (if
/// `name_shared`); otherwise under each strategy's name (so neither is split inside a
/// narrow column).
fn terminal_summary(w: &mut String, r: &Report, width: u16, name_shared: bool) {
    let at = |s: &StrategyReport| format!("{} at {}", s.backend, s.isolation);
    let shared = r.strategies.first().map(at).filter(|a| r.strategies.iter().all(|s| at(s) == *a));
    if let Some(a) = shared.as_ref().filter(|_| name_shared) {
        writeln!(w, "on {a}:").unwrap();
    }
    let head = ["strategy", "ops/s", "errors", "wrong", "verdict"];
    let mut t = table(width, &head, &[1, 2, 3]);
    for s in &r.strategies {
        let name = match &shared {
            Some(_) => s.strategy.clone(),
            None => format!("{}\n  {}", s.strategy, at(s)),
        };
        t.add_row(vec![
            name,
            format!("{:.0}{}", s.throughput_ops_per_s, decision::stalled_mark(s)),
            s.errors_total.to_string(),
            mismatched(s),
            s.check.label(),
        ]);
    }
    for i in 0..head.len() {
        keep_whole(&mut t, i);
    }
    writeln!(w, "{t}").unwrap();
}

/// The latency tables: per strategy run, a line naming it, then one row per op that ran
/// (ms; µs below 1 ms); narrow enough for 80 columns with every column whole.
fn terminal_latency(w: &mut String, r: &Report, width: u16) {
    let head = ["op", "count", "errors", "p50", "p99", "p99.9", "max"];
    for s in &r.strategies {
        let mut t = table(width, &head, &[1, 2, 3, 4, 5, 6]);
        for (op, o) in s.ops.iter().filter(|(_, o)| o.count > 0) {
            let l = &o.latency_us;
            t.add_row(vec![
                op.clone(),
                o.count.to_string(),
                o.errors.to_string(),
                latency(l.p50),
                latency(l.p99),
                latency(l.p999),
                latency(l.max),
            ]);
        }
        (0..head.len()).for_each(|i| keep_whole(&mut t, i));
        writeln!(w, "{}\n{t}", wrap(&format!("latency, {}:", s.label()), width)).unwrap();
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
        !s.figures.is_empty()
            || !s.faults.is_empty()
            || s.settle_error.is_some()
            || s.drift_note.is_some()
            || !s.anomalies.is_empty()
    }) {
        let figs: Vec<String> = s.figures.iter().map(|(k, v)| format!("{k}={v}")).collect();
        writeln!(w, "\n{}:{}", s.label(), figs.iter().map(|f| format!(" {f}")).collect::<String>()).unwrap();
        for f in &s.faults {
            let when = f.fired_at_ms.map_or("not fired".to_string(), |t| format!("fired at {t} ms"));
            writeln!(w, "  fault {} (planned {} ms, {when}): {}", f.kind, f.at_ms, f.outcome).unwrap();
        }
        if let Some(e) = &s.settle_error {
            writeln!(w, "  settle: {e}").unwrap();
        }
        if let Some(n) = &s.drift_note {
            writeln!(w, "  {n}").unwrap();
        }
        for a in &s.anomalies {
            writeln!(w, "  anomaly {} x{} (visible after {} calls): {}", a.name, a.count, a.ops_to_detect, a.detail)
                .unwrap();
        }
    }
}

/// What went wrong around the runs: breached thresholds, unmet expectations, failed cleanups.
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
    for s in r.strategies.iter().filter(|s| s.cleanup_error.is_some()) {
        writeln!(w, "\n{}: cleanup failed: {}", s.label(), s.cleanup_error.as_deref().unwrap_or_default()).unwrap();
    }
}

/// Around the runs, not wrong: the expectations no row judged, the explored results and
/// the skipped combinations, one line per backend, level and reason.
fn terminal_context(w: &mut String, r: &Report) {
    if !r.expectations_not_judged.is_empty() {
        writeln!(w, "\nexpectations not judged (no row ran them):\n  {}", r.expectations_not_judged.join("\n  "))
            .unwrap();
    }
    let explored: Vec<String> = r
        .strategies
        .iter()
        .filter_map(|s| s.explored.as_ref().map(|e| format!("{}: {}", s.label(), e.words())))
        .collect();
    if !explored.is_empty() {
        writeln!(w, "\nexplored interleavings (counterlab explore):\n  {}", explored.join("\n  ")).unwrap();
    }
    let mut skipped: Vec<(String, Vec<&str>)> = Vec::new();
    for k in &r.skipped {
        let why = format!("on {} at {}: {}", k.backend, k.isolation, k.reason);
        match skipped.iter_mut().find(|(w, _)| *w == why) {
            Some((_, names)) => names.push(&k.strategy),
            None => skipped.push((why, vec![&k.strategy])),
        }
    }
    for (why, names) in skipped {
        writeln!(w, "\nskipped {} {why}", names.join(", ")).unwrap();
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

/// `[workload] redis_pipeline` and `redis_batch` above 1, as the head line says them:
/// ops share a Redis connection, so their commands go out pipelined; a worker sends its
/// ops in batches, each one pipeline.
pub(crate) fn pipeline_words(r: &Report) -> String {
    let at = |key: &str| r.plan.pointer(&format!("/workload/{key}")).and_then(serde_json::Value::as_u64);
    let mut words = String::new();
    if let Some(depth) = at("redis_pipeline").filter(|d| *d > 1) {
        words += &format!(
            "\nRedis pipeline depth {depth}: every {depth} ops in flight share one connection (more share one past \
             the space's 64 connections)"
        );
    }
    if let Some(n) = at("redis_batch").filter(|n| *n > 1) {
        words += &format!(
            "\nRedis batches of {n}: each worker sends {n} ops at once as one pipeline; each op is timed from the \
             batch's send to its reply, and not retried"
        );
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::tests::{report, row};
    use counterlab_core::Isolation;

    /// The decision view, the summary and the latency table of `r` at `width` columns.
    fn tables(r: &Report, width: u16) -> String {
        let mut w = String::new();
        terminal_decision(&mut w, r, width);
        terminal_summary(&mut w, r, width, true);
        terminal_latency(&mut w, r, width);
        w
    }

    #[test]
    fn the_decision_view_and_tables_fit_80_columns_and_come_first() {
        let mut rows = Vec::new();
        for backend in ["postgres", "mysql", "sqlite"] {
            for (name, g, v) in [
                ("direct-update", "none", "drift-expected"),
                ("select-for-update", "exact", "pass"),
                ("conditional-update", "exact", "pass"),
                ("conditional-update-unguarded", "none", "drift-expected"),
            ] {
                let mut s = row(name, backend, g, v, 1000.0 + rows.len() as f64 * 97.0, 12_345);
                s.isolation = Isolation::RepeatableRead;
                rows.push(s);
            }
        }
        rows[5].moving_parts = vec!["Redis".into(), "flusher".into(), "eventual reads (pending deltas)".into()];
        let r = report(rows);
        for width in [80u16, 100, 200] {
            let text = tables(&r, width);
            for l in text.lines() {
                assert!(l.chars().count() <= width as usize, "{} > {width}: {l}", l.chars().count());
            }
            let mut wide = r.clone();
            wide.strategies[0].check.summary = "word ".repeat(60);
            for l in render_terminal_width(&wide, width).lines() {
                assert!(l.chars().count() <= width as usize, "{} > {width}: {l}", l.chars().count());
            }
            assert!(text.contains("conditional-update-unguarded"), "names are not broken:\n{text}");
            // No word of a verdict or a moving part, and no header word, is split.
            for g in decide(&r) {
                for x in &g.rows {
                    for word in x.verdict.split_whitespace().chain(x.cost.split_whitespace()) {
                        assert!(text.contains(word), "{word} split at {width}:\n{text}");
                    }
                }
            }
            assert!(text.contains("retries/") && text.contains("give-ups"), "{text}");
        }
        let all = render_terminal_width(&r, 80);
        assert!(all.find("DECISION").unwrap() < all.find("verdicts:").unwrap());
        assert!(all.contains("On sqlite at repeatable-read, "), "{all}");
        assert!(all.contains("12 ms"), "p99 in ms: {all}");
    }

    /// The default opens with the decision and ends with the verdicts, the latency table
    /// only at `Verbose`; `Quiet` is the sentences, the verdict table and the problems.
    #[test]
    fn each_detail_shows_its_parts_in_order() {
        let mut rows = Vec::new();
        for (name, g, v) in [("direct-update", "none", "drift-expected"), ("conditional-update", "exact", "pass")] {
            rows.push(row(name, "sqlite", g, v, 1000.0 + rows.len() as f64 * 300.0, 12_345));
        }
        let mut r = report(rows);
        let normal = render_terminal_as(&r, 80, Detail::Normal);
        assert!(normal.starts_with("DECISION\n"), "{normal}");
        let last = normal.lines().last().unwrap();
        assert!(last.contains("conditional-update") || last.starts_with("  "), "ends with the verdicts: {normal}");
        let (before, verdicts) = normal.split_once("\nverdicts:\n").unwrap();
        assert_eq!(verdicts.lines().filter(|l| !l.starts_with("   ")).count(), 2, "{normal}");
        assert!(before.rfind("│ conditional-update").unwrap() > before.find("scenario ").unwrap(), "{normal}");
        assert!(!normal.contains("p99.9"), "no latency table by default: {normal}");
        let verbose = render_terminal_as(&r, 80, Detail::Verbose);
        assert!(verbose.contains("p99.9") && verbose.contains("mark_read"), "{verbose}");
        r.strategies[1].expectations.push(crate::ExpectationResult {
            expected: "conditional-update: verdict pass".into(),
            judged: true,
            met: false,
            detail: "it drifted".into(),
        });
        let quiet = render_terminal_as(&r, 80, Detail::Quiet);
        assert!(quiet.starts_with("On sqlite at "), "{quiet}");
        assert!(quiet.contains("│ direct-update") && quiet.contains("expectations not met:"), "{quiet}");
        assert!(!quiet.contains("DECISION") && !quiet.contains("verdicts:") && !quiet.contains("p99.9"), "{quiet}");
        assert!(quiet.lines().count() <= 12, "{quiet}");
        for l in quiet.lines().chain(normal.lines()).chain(verbose.lines()) {
            assert!(l.chars().count() <= 80, "{l}");
        }
    }

    /// Three cost figures, idle shares and long names still fit 80 columns, under the
    /// ranked table, each row numbered as it is ranked.
    #[test]
    fn the_cost_columns_fit_80_columns_under_the_ranked_table() {
        use crate::cost::{Baseline, CostReport, CostSource, Counters, Scope};
        let counters = |kv: &[(&str, i64)]| kv.iter().map(|(k, v)| (k.to_string(), *v)).collect::<Counters>();
        let cost = |wal: i64, upd: i64, dead: i64| CostReport {
            ops: 1000,
            users: 100,
            interval_s: 6.0,
            sources: vec![
                CostSource {
                    name: "pg_wal".into(),
                    scope: Scope::Server,
                    delta: counters(&[("lsn_bytes", wal), ("wal_fpi", wal / 1000)]),
                    baseline: Some(Baseline { seconds: 1.0, delta: counters(&[("lsn_bytes", 123_456)]) }),
                    ..Default::default()
                },
                CostSource {
                    name: "pg_tables".into(),
                    delta: counters(&[("n_tup_upd", upd), ("n_dead_tup", dead)]),
                    ..Default::default()
                },
            ],
        };
        let mut rows = Vec::new();
        for (i, name) in ["conditional-update-unguarded", "select-for-update", "conditional-update"].iter().enumerate()
        {
            let mut s = row(name, "postgres", "exact", "pass", 1000.0 + i as f64 * 300.0, 12_345);
            let k = i as i64 + 1;
            s.cost = Some(cost(5_000_000 * k, 1000 * k * k, 900 * k));
            rows.push(s);
        }
        let r = report(rows);
        let g = &decide(&r)[0];
        assert_eq!(g.cost_figures.len(), 3, "{:?}", g.cost_figures);
        for width in [80u16, 100] {
            let text = tables(&r, width);
            for l in text.lines() {
                assert!(l.chars().count() <= width as usize, "{} > {width}: {l}", l.chars().count());
            }
            eprintln!("{text}");
            assert!(text.contains("(idle 741)") && text.contains("conditional-update-unguarded"), "{text}");
            assert!(text.contains("* server-wide"), "{text}");
        }
    }

    #[test]
    fn wrap_breaks_at_spaces_within_the_width() {
        assert_eq!(wrap("aaa bbb ccc", 7), "aaa bbb\nccc");
        assert_eq!(wrap("a-very-long-word x", 4), "a-very-long-word\nx");
        assert_eq!(wrap("p99 43 ms vs 89 ms (not apart)", 16), "p99 43 ms vs\n89 ms (not\napart)");
        assert_eq!(wrap("at 2.5 s, then", 6), "at\n2.5 s,\nthen");
    }
}
