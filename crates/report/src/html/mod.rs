//! The HTML rendering of a report: one self-contained page (inline CSS, inline SVG charts
//! drawn here, no external resources) with the run's header, the strategy comparison,
//! thresholds, anomalies and skipped combinations, and charts of throughput, p99 latency,
//! percentile curves and drift/pending, fault periods shaded and phases marked. A tiny
//! inline script records each chart's laid-out size in `body[data-charts]` for tests.
//! This file is the page and its sections; `svg` is the chart kit, `charts` the charts.

mod charts;
mod curve;
mod svg;
mod top;

use std::fmt::Write as _;

use self::charts::{drift_chart, p99_chart, percentile_chart, throughput_chart};
use self::svg::esc;
use crate::render::history_line;
use crate::units::latency;
use crate::{Report, StageReport};
pub use curve::{CurveSeries, render_curve_html};

/// A figure for a table cell; `-` when not finite.
fn fig(v: f64, decimals: usize) -> String {
    if v.is_finite() { format!("{v:.decimals$}") } else { "-".into() }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

pub(super) fn verdict_class(v: &counterlab_core::Verdict) -> &'static str {
    use counterlab_core::Verdict as V;
    match v {
        V::Pass => "v-pass",
        V::Fail(_) | V::Incomplete(_) | V::NoEvidence => "v-fail",
        V::DriftExpected | V::NoDriftObserved => "v-other",
    }
}

const CSS: &str = r#"
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 12px auto; max-width: 1240px;
  padding: 0 16px; color: #1d232a; background: #fff; font-size: 15px; }
h1 { font-size: 1.3em; margin: 0 0 4px; }
#decision p.overall { margin: 0 0 4px; font-size: 0.9em; }
#decision ul.sentences { margin: 4px 0 8px; padding-left: 18px; }
#decision li.decision-sentence { margin: 2px 0; line-height: 1.3; }
table.grid td, table.grid th { white-space: normal; }
table.grid .rel { color: #59636e; font-size: 0.92em; }
span.verdict { padding: 0 4px; border-radius: 3px; }
h2 { font-size: 1.2em; margin-top: 32px; border-bottom: 1px solid #d6dbe1; padding-bottom: 4px; }
h3 { font-size: 1em; margin: 16px 0 4px; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
dl.meta dt { color: #59636e; }
dl.meta dd { margin: 0; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.92em;
  background: #f3f5f7; padding: 1px 4px; border-radius: 3px; word-break: break-all; }
table { border-collapse: collapse; font-size: 0.88em; margin: 8px 0; }
th, td { border: 1px solid #d6dbe1; padding: 3px 7px; text-align: left; vertical-align: top; white-space: nowrap; }
td.wide { white-space: normal; min-width: 12em; }
th { background: #f3f5f7; white-space: normal; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; }
.v-pass { background: #d8f3dc; color: #14532d; font-weight: 600; }
.v-fail { background: #fdd8d8; color: #7f1d1d; font-weight: 600; }
.v-other { background: #fdecc8; color: #78350f; font-weight: 600; }
.good { color: #14532d; font-weight: 600; }
.bad { color: #b91c1c; font-weight: 600; }
.muted { color: #59636e; }
svg.chart { display: block; width: 100%; max-width: 960px; height: auto; margin: 12px 0 20px; }
svg.chart .title { font-size: 14px; font-weight: 600; fill: #1d232a; }
svg.chart .frame { fill: #fcfcfd; stroke: #c4cbd3; }
svg.chart .grid { stroke: #e6e9ed; }
svg.chart .axis { stroke: #59636e; }
svg.chart .tick, svg.chart .axis-label, svg.chart .legend text { font-size: 11px; fill: #3b444d; }
svg.chart .series { fill: none; stroke-width: 1.8; stroke-linejoin: round; }
svg.chart .fault { fill: #e11d48; fill-opacity: 0.16; }
svg.chart .phase { stroke: #6b7280; stroke-dasharray: 2 3; font-size: 10px; fill: #4b5563; }
svg.chart text.phase { stroke: none; }
svg.chart .note { font-size: 16px; fill: #8a939c; font-style: italic; }
"#;

/// Records, per chart, how many series the browser drew and their union bounding box.
const SELF_CHECK: &str = r#"<script>
window.addEventListener("load", function () {
  var out = [];
  document.querySelectorAll("svg.chart").forEach(function (svg) {
    var els = svg.querySelectorAll("polyline.series, path.series, rect.series");
    var box = null;
    els.forEach(function (e) {
      var b = e.getBBox();
      if (box === null) { box = { x0: b.x, y0: b.y, x1: b.x + b.width, y1: b.y + b.height }; return; }
      box.x0 = Math.min(box.x0, b.x); box.y0 = Math.min(box.y0, b.y);
      box.x1 = Math.max(box.x1, b.x + b.width); box.y1 = Math.max(box.y1, b.y + b.height);
    });
    out.push({ id: svg.id, series: els.length, w: box ? box.x1 - box.x0 : 0, h: box ? box.y1 - box.y0 : 0 });
  });
  document.body.dataset.charts = JSON.stringify(out);
});
</script>"#;

/// The whole report as one self-contained HTML page.
pub fn render_html(r: &Report) -> String {
    let mut out = String::new();
    let w = &mut out;
    let title = format!("counterlab run: {}", r.scenario);
    writeln!(w, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">").unwrap();
    writeln!(w, "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">").unwrap();
    writeln!(w, "<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>", esc(&title)).unwrap();
    writeln!(w, "<h1>{}</h1>", esc(&title)).unwrap();
    top::decision(w, r);
    writeln!(w, "<h2>Run</h2>").unwrap();
    header(w, r);
    top::ranked_tables(w, r);
    comparison(w, r);
    charts(w, r);
    latency_table(w, r);
    cost_tables(w, r);
    stages_table(w, r);
    open_loop_table(w, r);
    thresholds(w, r);
    explored(w, r);
    anomalies_and_faults(w, r);
    details(w, r);
    skipped(w, r);
    writeln!(w, "{SELF_CHECK}\n</body>\n</html>").unwrap();
    out
}

/// How many `[[expect]]` entries were not met, and which were not judged.
fn expectations_cell(r: &Report) -> String {
    let not_judged = match r.expectations_not_judged.is_empty() {
        true => String::new(),
        false => format!("; not judged: {}", esc(&r.expectations_not_judged.join("; "))),
    };
    let class = if r.expectations_unmet > 0 { "bad" } else { "good" };
    format!("<span class=\"{class}\">{}</span>{not_judged}", r.expectations_unmet)
}
fn header(w: &mut String, r: &Report) {
    let servers: Vec<String> = r
        .servers
        .iter()
        .map(|s| format!("{} {} at <code>{}</code>", esc(&s.backend), esc(&s.version), esc(&s.url)))
        .collect();
    let rows = [
        (
            "scenario",
            format!("{} <span class=\"muted\">(<code>{}</code>)</span>", esc(&r.scenario), esc(&r.scenario_path)),
        ),
        ("seed", r.seed.to_string()),
        ("run id", format!("<code>{}</code>", esc(&r.run_id))),
        ("counterlab", format!("{} at commit <code>{}</code>", esc(&r.counterlab_version), esc(&r.git_commit))),
        ("servers", if servers.is_empty() { "none".into() } else { servers.join("<br>") }),
        ("started (UTC)", esc(&r.started_at_utc)),
        (
            "interrupted",
            if r.interrupted {
                "<span class=\"bad\">yes: Ctrl-C stopped the run; later runs did not start</span>".into()
            } else {
                "no".into()
            },
        ),
        ("replay", format!("<code>{}</code>", esc(&r.replay_command))),
        (
            "thresholds breached",
            format!(
                "<span class=\"{}\">{}</span>",
                if r.thresholds_breached > 0 { "bad" } else { "good" },
                r.thresholds_breached
            ),
        ),
        ("expectations not met", expectations_cell(r)),
        (
            "every declared guarantee held",
            format!(
                "<span class=\"{}\">{}</span>",
                if r.all_guarantees_held { "good" } else { "bad" },
                yes_no(r.all_guarantees_held)
            ),
        ),
    ];
    writeln!(w, "<dl class=\"meta\">").unwrap();
    for (k, v) in rows {
        writeln!(w, "<dt>{k}</dt><dd>{v}</dd>").unwrap();
    }
    writeln!(w, "</dl>").unwrap();
    writeln!(w, "<ul class=\"verdicts\">").unwrap();
    for s in &r.strategies {
        writeln!(
            w,
            "<li><span class=\"{}\">{}</span> {} at {}: {}</li>",
            verdict_class(&s.check.verdict),
            esc(&s.check.label()),
            esc(&s.backend.to_string()),
            esc(s.isolation.name()),
            esc(&s.check.summary)
        )
        .unwrap();
    }
    writeln!(w, "</ul>").unwrap();
}

/// One table cell: HTML (already escaped) and its CSS class, if any.
struct Cell {
    class: &'static str,
    html: String,
}

/// A left-aligned text cell from already-escaped HTML.
fn cell(html: impl Into<String>) -> Cell {
    Cell { class: "", html: html.into() }
}

/// A right-aligned figure.
fn num(v: impl std::fmt::Display) -> Cell {
    Cell { class: "num", html: esc(&v.to_string()) }
}

fn classed(class: &'static str, html: impl Into<String>) -> Cell {
    Cell { class, html: html.into() }
}

/// A table with a header row; writes `none` instead when there is no row.
fn table(w: &mut String, head: &[&str], rows: &[Vec<Cell>]) {
    if rows.is_empty() {
        writeln!(w, "<p class=\"muted\">none</p>").unwrap();
        return;
    }
    writeln!(w, "<div class=\"scroll\"><table>\n<thead><tr>").unwrap();
    for h in head {
        write!(w, "<th>{}</th>", esc(h)).unwrap();
    }
    writeln!(w, "</tr></thead>\n<tbody>").unwrap();
    for row in rows {
        write!(w, "<tr>").unwrap();
        for c in row {
            match c.class {
                "" => write!(w, "<td>{}</td>", c.html).unwrap(),
                class => write!(w, "<td class=\"{class}\">{}</td>", c.html).unwrap(),
            }
        }
        writeln!(w, "</tr>").unwrap();
    }
    writeln!(w, "</tbody></table></div>").unwrap();
}

/// Every row's figures, the verdict second so a 1280 px window shows it without
/// scrolling the table sideways (tests/it/html.rs).
fn comparison(w: &mut String, r: &Report) {
    writeln!(w, "<h2>All figures per strategy x backend x isolation</h2>").unwrap();
    let rows: Vec<Vec<Cell>> = r
        .strategies
        .iter()
        .map(|s| {
            vec![
                cell(esc(&s.strategy)),
                classed(verdict_class(&s.check.verdict), esc(&s.check.label())),
                cell(esc(&s.backend.to_string())),
                cell(esc(s.isolation.name())),
                cell(esc(s.guarantee.name())),
                classed("wide", esc(&s.load_model)),
                num(s.ops_total),
                num(format!("{}{}", fig(s.throughput_ops_per_s, 1), crate::decision::stalled_mark(s))),
                num(latency(s.p99_all())),
                num(s.errors_total),
                num(s.retries),
                num(s.open_loop.as_ref().map_or(0, |o| o.dropped)),
                num(format!("{}/{}", s.check.users_mismatched, s.check.users_checked)),
                num(s.check.drift_abs_total),
            ]
        })
        .collect();
    table(
        w,
        &[
            "strategy",
            "verdict",
            "backend",
            "isolation",
            "guarantee",
            "load model",
            "ops",
            "ops/s",
            "p99 (worst op)",
            "errors",
            "retries",
            "dropped",
            "mismatched",
            "drift",
        ],
        &rows,
    );
}

fn charts(w: &mut String, r: &Report) {
    writeln!(w, "<h2>Charts</h2>").unwrap();
    writeln!(
        w,
        "<p class=\"muted\">Shaded: fault periods (hover for the fault). Dotted verticals: where a phase starts.</p>"
    )
    .unwrap();
    throughput_chart(r).render(w);
    p99_chart(r).render(w);
    writeln!(
        w,
        "<p class=\"muted\">Percentile curves: solid from the intended start (free of coordinated omission), \
         dotted from the moment a worker started the op (service time); in a closed loop they coincide.</p>"
    )
    .unwrap();
    for (i, s) in r.strategies.iter().enumerate() {
        percentile_chart(i, s).render(w);
    }
    drift_chart(r).render(w);
}

fn latency_table(w: &mut String, r: &Report) {
    writeln!(w, "<h2>Latency per operation</h2>").unwrap();
    let mut rows = Vec::new();
    for s in &r.strategies {
        for (op, o) in s.ops.iter().filter(|(_, o)| o.count + o.skipped > 0) {
            let (l, u) = (&o.latency_us, &o.uncorrected_latency_us);
            rows.push(vec![
                cell(esc(&s.strategy)),
                cell(esc(&s.backend.to_string())),
                cell(esc(s.isolation.name())),
                cell(esc(op)),
                num(o.count),
                num(o.errors),
                num(o.retries),
                num(o.skipped),
                num(latency(l.p50)),
                num(latency(l.p90)),
                num(latency(l.p99)),
                num(latency(l.p999)),
                num(latency(l.max)),
                num(latency(u.p99)),
                num(latency(u.max)),
            ]);
        }
    }
    table(
        w,
        &[
            "strategy",
            "backend",
            "isolation",
            "op",
            "count",
            "errors",
            "retries",
            "skipped",
            "p50",
            "p90",
            "p99",
            "p99.9",
            "max",
            "uncorrected p99",
            "uncorrected max",
        ],
        &rows,
    );
}

/// A stage's arrival rate: one figure when steady, `from -> to` when ramping, `-` for a
/// closed loop.
/// The server-side cost tables (`crate::cost`), when any row was measured.
fn cost_tables(w: &mut String, r: &Report) {
    let tables = crate::cost::cost_tables(r);
    if tables.is_empty() {
        return;
    }
    writeln!(w, "<h2>Server-side cost</h2>").unwrap();
    for t in tables {
        writeln!(w, "<h3>{}</h3>", esc(t.title)).unwrap();
        let rows: Vec<Vec<Cell>> = t
            .rows
            .iter()
            .map(|row| row.iter().enumerate().map(|(i, x)| if i < 2 { cell(esc(x)) } else { num(x) }).collect())
            .collect();
        table(w, &t.head, &rows);
        writeln!(w, "<p class=\"muted\">{}</p>", esc(&t.note)).unwrap();
    }
    for e in crate::cost::cost_errors(r) {
        writeln!(w, "<p class=\"muted\">not read: {}</p>", esc(&e)).unwrap();
    }
    for a in crate::cost::cost_absent(r) {
        writeln!(w, "<p class=\"muted\">not on this server: {}</p>", esc(&a)).unwrap();
    }
}

fn stage_rate(st: &StageReport) -> String {
    match (st.rate_from, st.rate_to) {
        (Some(a), Some(b)) if a == b => fig(a, 1),
        (Some(a), Some(b)) => format!("{} -> {}", fig(a, 1), fig(b, 1)),
        (Some(a), None) | (None, Some(a)) => fig(a, 1),
        (None, None) => "-".into(),
    }
}

/// Every phase of every strategy run's load, warm-up included.
fn stages_table(w: &mut String, r: &Report) {
    writeln!(w, "<h2>Stages</h2>").unwrap();
    let mut rows = Vec::new();
    for s in &r.strategies {
        for st in &s.stages {
            rows.push(vec![
                cell(esc(&s.label())),
                cell(esc(&st.name)),
                cell(yes_no(st.measured)),
                cell(esc(&st.model)),
                num(st.workers),
                num(stage_rate(st)),
                cell(esc(st.arrival.as_deref().unwrap_or("-"))),
                num(fig(st.duration_s, 1)),
                num(st.scheduled),
                num(st.ops),
                num(st.dropped),
                num(fig(st.achieved_ops_per_s, 1)),
                num(latency(st.p99_us)),
            ]);
        }
    }
    table(
        w,
        &[
            "strategy",
            "stage",
            "measured",
            "model",
            "workers",
            "rate ops/s",
            "arrival",
            "seconds",
            "scheduled",
            "ops",
            "dropped",
            "achieved ops/s",
            "p99",
        ],
        &rows,
    );
}

/// How well each open-loop run kept its schedule; nothing at all when no run was open loop.
fn open_loop_table(w: &mut String, r: &Report) {
    let open: Vec<Vec<Cell>> = r
        .strategies
        .iter()
        .filter_map(|s| s.open_loop.as_ref().map(|o| (s, o)))
        .map(|(s, o)| {
            vec![
                cell(esc(&s.label())),
                num(o.scheduled),
                num(o.issued),
                num(o.dropped),
                num(o.late),
                num(latency(o.schedule_lag_us.p99)),
                num(fig(o.target_ops_per_s, 1)),
                num(fig(o.achieved_ops_per_s, 1)),
                num(fig(o.achieved_over_target, 3)),
            ]
        })
        .collect();
    if !open.is_empty() {
        writeln!(w, "<h3>Open-loop schedule adherence (measured stages)</h3>").unwrap();
        table(
            w,
            &[
                "strategy",
                "scheduled",
                "issued",
                "dropped",
                "late",
                "schedule lag p99",
                "target ops/s",
                "achieved ops/s",
                "achieved / target",
            ],
            &open,
        );
    }
}

fn thresholds(w: &mut String, r: &Report) {
    writeln!(w, "<h2>Thresholds</h2>").unwrap();
    let rows: Vec<Vec<Cell>> = r
        .strategies
        .iter()
        .flat_map(|s| s.thresholds.iter().map(move |t| (s, t)))
        .map(|(s, t)| {
            vec![
                cell(esc(&s.label())),
                cell(esc(&t.metric)),
                cell(esc(t.op.as_deref().unwrap_or("-"))),
                if t.passed { classed("v-pass", "passed") } else { classed("v-fail", "BREACHED") },
                classed("wide", esc(&t.detail)),
            ]
        })
        .collect();
    table(w, &["strategy", "metric", "op", "result", "detail"], &rows);
    let expected: Vec<Vec<Cell>> = r
        .strategies
        .iter()
        .flat_map(|s| s.expectations.iter().map(move |e| (s, e)))
        .map(|(s, e)| {
            vec![
                cell(esc(&s.label())),
                match (e.judged, e.met) {
                    (false, _) => classed("v-other", "not judged"),
                    (true, true) => classed("v-pass", "met"),
                    (true, false) => classed("v-fail", "NOT MET"),
                },
                classed("wide", esc(&e.detail)),
            ]
        })
        .collect();
    if !expected.is_empty() {
        writeln!(w, "<h2>Expectations</h2>").unwrap();
        table(w, &["strategy", "result", "detail"], &expected);
    }
}

/// Each explored row's result (`run --explore`): SAFE, UNSAFE (failing the row when it
/// is judged exact), NOT EXPLORED or SKIPPED, with the sentence.
fn explored(w: &mut String, r: &Report) {
    let rows: Vec<Vec<Cell>> = r
        .strategies
        .iter()
        .filter_map(|s| Some((s, s.explored.as_ref()?)))
        .map(|(s, e)| {
            let class = match (e.outcome(), e.breaks_guarantee()) {
                (_, true) => "v-fail",
                ("SAFE", _) => "v-pass",
                _ => "v-other",
            };
            vec![cell(esc(&s.label())), classed(class, e.outcome()), classed("wide", esc(&e.words()))]
        })
        .collect();
    if !rows.is_empty() {
        writeln!(w, "<h2>Explored interleavings</h2>").unwrap();
        table(w, &["strategy", "result", "detail"], &rows);
    }
}

fn anomalies_and_faults(w: &mut String, r: &Report) {
    writeln!(w, "<h2>Anomalies</h2>").unwrap();
    let rows: Vec<Vec<Cell>> = r
        .strategies
        .iter()
        .flat_map(|s| s.anomalies.iter().map(move |a| (s, a)))
        .map(|(s, a)| {
            vec![
                cell(esc(&s.label())),
                cell(esc(&a.name)),
                num(a.count),
                num(a.ops_to_detect),
                classed("wide", esc(&a.detail)),
            ]
        })
        .collect();
    table(w, &["strategy", "anomaly", "count", "visible after calls", "detail"], &rows);
    let rows: Vec<Vec<Cell>> = r
        .strategies
        .iter()
        .map(|s| vec![cell(esc(&s.label())), classed("wide", esc(&history_line(&s.history)))])
        .collect();
    table(w, &["strategy", "history"], &rows);
    writeln!(w, "<h2>Faults</h2>").unwrap();
    let rows: Vec<Vec<Cell>> = r
        .strategies
        .iter()
        .flat_map(|s| s.faults.iter().map(move |f| (s, f)))
        .map(|(s, f)| {
            vec![
                cell(esc(&s.label())),
                cell(esc(&f.kind)),
                num(f.at_ms),
                num(f.fired_at_ms.map_or("not fired".into(), |t| t.to_string())),
                num(f.duration_ms.map_or("instant".into(), |d| d.to_string())),
                classed("wide", esc(&f.outcome)),
            ]
        })
        .collect();
    table(w, &["strategy", "fault", "planned ms", "fired at ms", "duration ms", "outcome"], &rows);
}

fn details(w: &mut String, r: &Report) {
    writeln!(w, "<h2>Details</h2>").unwrap();
    for s in &r.strategies {
        writeln!(w, "<h3>{}</h3>\n<ul>", esc(&s.label())).unwrap();
        let kept = if s.namespace_kept { ", kept" } else { "" };
        writeln!(
            w,
            "<li>namespace <code>{}</code>{kept}; server isolation <code>{}</code>; ran as {}</li>",
            esc(&s.namespace),
            esc(&s.isolation_in_effect),
            esc(&s.identity)
        )
        .unwrap();
        if let Some(a) = &s.agents {
            writeln!(w, "<li>distributed: {}</li>", esc(&a.line())).unwrap();
        }
        if let Some(st) = &s.staleness {
            writeln!(w, "<li>staleness of replica reads: {}</li>", esc(&st.line())).unwrap();
        }
        writeln!(
            w,
            "<li>seed {} s, load {} s, settle {} s, check {} s; give-ups {}</li>",
            fig(s.seed_s, 2),
            fig(s.load_s, 2),
            fig(s.settle_s, 2),
            fig(s.check_s, 2),
            s.give_ups
        )
        .unwrap();
        if let Some(settled) = &s.settled {
            let bad = if settled.starts_with("not settled") { " class=\"bad\"" } else { "" };
            writeln!(w, "<li{bad}>before the load: {}</li>", esc(settled)).unwrap();
        }
        if let Some(line) = s.client_cpu_line() {
            writeln!(w, "<li>{}</li>", esc(&line)).unwrap();
        }
        if let Some(e) = &s.settle_error {
            writeln!(w, "<li class=\"bad\">settle: {}</li>", esc(e)).unwrap();
        }
        if let Some(n) = &s.drift_note {
            writeln!(w, "<li>{}</li>", esc(n)).unwrap();
        }
        check_items(w, &s.check);
        let classes: Vec<String> =
            s.errors_by_class.iter().filter(|(_, n)| **n > 0).map(|(k, n)| format!("{k}={n}")).collect();
        if !classes.is_empty() {
            writeln!(w, "<li>failed attempts by class: {}</li>", esc(&classes.join(" "))).unwrap();
        }
        if !s.figures.is_empty() {
            let figs: Vec<String> = s.figures.iter().map(|(k, v)| format!("{k}={}", fig(*v, 3))).collect();
            writeln!(w, "<li>figures: {}</li>", esc(&figs.join(" "))).unwrap();
        }
        if let Some(h) = &s.hdr_log {
            writeln!(w, "<li>HDR interval log: <code>{}</code></li>", esc(h)).unwrap();
        }
        for e in &s.error_samples {
            writeln!(w, "<li>error: <code>{}</code></li>", esc(e)).unwrap();
        }
        writeln!(w, "</ul>").unwrap();
    }
}

/// The check's line and its worst users.
fn check_items(w: &mut String, c: &crate::CheckReport) {
    writeln!(
        w,
        "<li>check: {}/{} users mismatched, over {}, under {}, negative {}, missing {}, drift |{}| net {}</li>",
        c.users_mismatched,
        c.users_checked,
        c.over_counted,
        c.under_counted,
        c.negative_counters,
        c.missing_counters,
        c.drift_abs_total,
        c.drift_net
    )
    .unwrap();
    if !c.worst_users.is_empty() {
        let worst: Vec<String> = c
            .worst_users
            .iter()
            .map(|u| match u.counter {
                Some(v) => format!("u{}: {} vs {}", u.user, v, u.truth),
                None => format!("u{}: missing vs {}", u.user, u.truth),
            })
            .collect();
        writeln!(w, "<li>worst users (counter vs truth): {}</li>", esc(&worst.join(", "))).unwrap();
    }
}

fn skipped(w: &mut String, r: &Report) {
    writeln!(w, "<h2>Skipped combinations</h2>").unwrap();
    let rows: Vec<Vec<Cell>> = r
        .skipped
        .iter()
        .map(|k| {
            vec![
                cell(esc(&k.strategy)),
                cell(esc(&k.backend.to_string())),
                cell(esc(k.isolation.name())),
                classed("wide", esc(&k.reason)),
            ]
        })
        .collect();
    table(w, &["strategy", "backend", "isolation", "reason"], &rows);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{
        Anomaly, CheckReport, FaultEvent, Latency, OpReport, OpenLoopReport, SeriesPoint, ServerInfo, Skipped,
        StageReport, StrategyReport, ThresholdResult,
    };
    use counterlab_core::{Backend, Dialect, Guarantee, Isolation, ReadFrom, Verdict};

    const QS: [f64; 12] = [0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 1.0];

    fn latency(base: f64) -> Latency {
        let curve: Vec<[f64; 2]> = QS.iter().enumerate().map(|(i, q)| [*q, base * (1.0 + i as f64).powi(2)]).collect();
        Latency { p50: base as u64, p90: 0, p99: (base * 49.0) as u64, p999: 0, max: 0, mean: base, curve }
    }

    fn op(count: u64, base: f64) -> OpReport {
        OpReport {
            count,
            ok: count,
            fail: 0,
            unknown: 0,
            errors: 0,
            skipped: 0,
            transitioned: 0,
            retries: 0,
            give_ups: 0,
            latency_us: latency(base),
            uncorrected_latency_us: latency(base / 2.0),
        }
    }

    fn point(t_s: f64, phase: &str, ops_per_s: f64, scheduled: u64, drift: Option<i64>) -> SeriesPoint {
        SeriesPoint {
            t_s,
            dt_s: 1.0,
            phase: phase.into(),
            ops: ops_per_s as u64,
            errors: 0,
            ops_per_s,
            scheduled,
            dropped: 0,
            p50_us: 400,
            p99_us: 2500 + (t_s * 100.0) as u64,
            max_us: 9000,
            pending: drift.map(|d| d * 2),
            drift,
        }
    }

    fn strategy(name: &str, verdict: &str, series: Vec<SeriesPoint>, faults: Vec<FaultEvent>) -> StrategyReport {
        let mut ops = BTreeMap::new();
        ops.insert("mark_read".to_string(), op(900, 300.0));
        ops.insert("create".to_string(), op(400, 500.0));
        ops.insert("delete".to_string(), op(0, 0.0));
        StrategyReport {
            strategy: name.into(),
            backend: Backend::sql(Dialect::Postgres),
            isolation: Isolation::ReadCommitted,
            isolation_in_effect: "read committed".into(),
            guarantee: Guarantee::Exact,
            moving_parts: Vec::new(),
            namespace: "cl_test".into(),
            namespace_kept: false,
            identity: "role cl_test (this namespace only)".into(),
            cleanup_error: None,
            permission_denied: 0,
            seed_s: 0.5,
            settled: None,
            client_cpu_us_per_op: None,
            load_s: 3.0,
            ops_total: 1300,
            throughput_ops_per_s: 433.3,
            errors_total: 2,
            retries: 5,
            give_ups: 0,
            errors_by_class: BTreeMap::from([("conflict".to_string(), 5)]),
            error_samples: vec!["mark_read: deadlock detected".into()],
            ops,
            settle_s: 0.1,
            check_s: 0.2,
            settle_error: None,
            drift_note: None,
            faults,
            figures: BTreeMap::from([("flushes".to_string(), 12.0)]),
            anomalies: vec![Anomaly {
                name: "lost_flush".into(),
                count: 1,
                detail: "1 flush claim lost".into(),
                ..Default::default()
            }],
            expectations: Vec::new(),
            explored: None,
            thresholds: vec![ThresholdResult {
                metric: "p99_us".into(),
                op: Some("mark_read".into()),
                limit: 1000.0,
                value: 14700.0,
                passed: false,
                detail: "p99_us of mark_read = 14700 breaches maximum 1000 (+1370.0%)".into(),
            }],
            check: CheckReport {
                users_checked: 100,
                users_mismatched: if verdict == "pass" { 0 } else { 3 },
                over_counted: 0,
                under_counted: 0,
                negative_counters: 0,
                missing_counters: 0,
                drift_abs_total: 0,
                drift_net: 0,
                worst_users: Vec::new(),
                verdict: crate::wire::parse_label(verdict),
                matches_guarantee: !verdict.starts_with("FAIL"),
                evidence: true,
                summary: format!("{name}: {verdict}"),
                limits: Vec::new(),
            },
            load_model: "open loop, 200 -> 400 ops/s".into(),
            read_from: ReadFrom::Primary,
            staleness: None,
            agents: None,
            stall: None,
            cost: None,
            stages: vec![StageReport {
                name: "steady".into(),
                measured: true,
                model: "open".into(),
                workers: 8,
                rate_from: Some(200.0),
                rate_to: Some(400.0),
                arrival: Some("poisson".into()),
                duration_s: 3.0,
                planned_s: Some(3.0),
                scheduled: 900,
                ops: 890,
                dropped: 10,
                achieved_ops_per_s: 296.7,
                p50_us: 2100,
                p99_us: 14700,
            }],
            open_loop: Some(OpenLoopReport {
                scheduled: 900,
                issued: 890,
                dropped: 10,
                late: 4,
                schedule_lag_us: latency(20.0),
                target_ops_per_s: 300.0,
                achieved_ops_per_s: 296.7,
                achieved_over_target: 0.989,
            }),
            series,
            hdr_log: None,
            history: Default::default(),
            repeats: Vec::new(),
        }
    }

    pub(super) fn report(strategies: Vec<StrategyReport>) -> Report {
        Report {
            report_schema_version: crate::REPORT_SCHEMA_VERSION,
            counterlab_version: "0.1.0".into(),
            git_commit: "0c6a774".into(),
            scenario: "html-test".into(),
            scenario_path: "scenarios/html-test.toml".into(),
            seed: 42,
            run_id: "20261130-120000-abcd".into(),
            started_at_utc: "2026-11-30T12:00:00Z".into(),
            plan: serde_json::json!({"workload": {"ops": 10}}),
            servers: vec![ServerInfo {
                backend: "postgres".into(),
                url: "postgres://counterlab:***@127.0.0.1:5432/counterlab".into(),
                version: "17.2".into(),
            }],
            strategies,
            skipped: vec![Skipped {
                strategy: "select-for-update".into(),
                backend: Backend::sql(Dialect::Sqlite),
                isolation: Isolation::Serializable,
                reason: "SQLite has no row locks".into(),
            }],
            all_guarantees_held: false,
            thresholds_breached: 1,
            expectations_unmet: 0,
            expectations_not_judged: Vec::new(),
            interrupted: false,
            replay_command: "counterlab run scenarios/html-test.toml --seed 42".into(),
            trusted_strategy_files: false,
            side_files: Vec::new(),
        }
    }

    pub(super) fn two_strategies() -> Report {
        let series = vec![
            point(1.0, "warmup", 180.0, 200, None),
            point(2.0, "steady", 310.0, 300, Some(0)),
            point(3.0, "steady", 395.0, 400, Some(4)),
            point(4.0, "settle", 20.0, 0, Some(1)),
        ];
        let faults = vec![
            FaultEvent {
                kind: "pause-flusher".into(),
                at_ms: 1500,
                fired_at_ms: Some(1510),
                duration_ms: Some(800),
                outcome: "paused".into(),
            },
            FaultEvent {
                kind: "kill-connections".into(),
                at_ms: 2500,
                fired_at_ms: Some(2502),
                duration_ms: None,
                outcome: "3 killed".into(),
            },
            FaultEvent {
                kind: "never-fired".into(),
                at_ms: 9000,
                fired_at_ms: None,
                duration_ms: None,
                outcome: "".into(),
            },
        ];
        report(vec![
            strategy("conditional-update", "pass", series, faults),
            strategy("<script>alert('x&y')</script>", "FAIL: counters", Vec::new(), Vec::new()),
        ])
    }

    /// The `<svg>` element with this id, through its closing tag.
    pub(super) fn svg<'a>(html: &'a str, id: &str) -> &'a str {
        let start = html.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no chart {id}"));
        let start = html[..start].rfind("<svg").unwrap();
        let end = start + html[start..].find("</svg>").unwrap();
        &html[start..end]
    }

    /// Every `points="..."` value in a fragment.
    pub(super) fn polylines(fragment: &str) -> Vec<&str> {
        fragment.split("points=\"").skip(1).map(|p| &p[..p.find('"').unwrap()]).collect()
    }

    pub(super) fn assert_finite(html: &str) {
        assert!(!html.contains("NaN"), "NaN in output");
        assert!(!html.to_lowercase().contains("inf"), "inf in output");
        // Every numeric SVG attribute parses as a finite number.
        for attr in ["x", "y", "x1", "x2", "y1", "y2", "width", "height", "cx", "cy"] {
            for part in html.split(&format!(" {attr}=\"")).skip(1) {
                let v = &part[..part.find('"').unwrap()];
                let f: f64 = v.parse().unwrap_or_else(|_| panic!("{attr}={v:?} is not a number"));
                assert!(f.is_finite() && f.abs() <= 1e6, "{attr}={v}");
            }
        }
        for p in polylines(html) {
            for xy in p.split(' ') {
                let (x, y) = xy.split_once(',').unwrap();
                assert!(x.parse::<f64>().unwrap().is_finite() && y.parse::<f64>().unwrap().is_finite(), "{xy}");
            }
        }
    }

    #[test]
    fn text_is_escaped_and_the_page_is_self_contained() {
        let html = render_html(&two_strategies());
        assert!(html.contains("&lt;script&gt;alert(&#39;x&amp;y&#39;)&lt;/script&gt;"));
        assert!(!html.contains("<script>alert"));
        assert_eq!(html.matches("<script").count(), 1, "only the self-check script");
        for external in ["http://", "https://", "src=", "href=", "url(", "@import", "xlink"] {
            assert!(!html.contains(external), "external reference {external}");
        }
        assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
        assert!(html.contains("document.body.dataset.charts"));
    }

    #[test]
    fn the_decision_view_opens_the_page_with_every_rows_verdict() {
        let html = render_html(&two_strategies());
        let decision = html.find("<section id=\"decision\">").unwrap();
        let sentence = html.find("<li class=\"decision-sentence\">On postgres at read-committed, ").unwrap();
        assert!(decision < sentence && sentence < html.find("<dl class=\"meta\">").unwrap());
        let top = &html[decision..html.find("</section>").unwrap()];
        for s in &two_strategies().strategies {
            assert!(top.contains(&format!("data-row=\"{}\"", esc(&s.label()))), "{} missing", s.label());
        }
        // One group: the ranked table, with at most 7 columns and the latency in ms.
        assert_eq!(top.matches("<th>").count(), 7, "{top}");
        let p99 = crate::units::latency(two_strategies().strategies[0].p99_all());
        assert!(p99.ends_with(" ms") && top.contains(&format!(">{p99}<")), "{top}");
        // Several groups: the grid, one verdict per row.
        let mut r = two_strategies();
        r.strategies[1].backend = Backend::sql(Dialect::Mysql);
        let html = render_html(&r);
        let top = &html[html.find("<section id=\"decision\">").unwrap()..html.find("</section>").unwrap()];
        assert!(top.contains("<table class=\"grid\">") && top.matches("data-row=").count() == 2, "{top}");
        assert_eq!(top.matches("class=\"decision-sentence\"").count(), 2);
        assert!(html.contains("<h2>Ranked per backend and level</h2>"));
    }

    #[test]
    fn header_and_tables_carry_the_run() {
        let html = render_html(&two_strategies());
        for text in [
            "html-test",
            "42",
            "20261130-120000-abcd",
            "0c6a774",
            "postgres 17.2 at <code>postgres://counterlab:***@127.0.0.1:5432/counterlab</code>",
            "2026-11-30T12:00:00Z",
            "counterlab run scenarios/html-test.toml --seed 42",
            "open loop, 200 -&gt; 400 ops/s",
            "p99_us of mark_read = 14700 breaches maximum 1000",
            "BREACHED",
            "lost_flush",
            "SQLite has no row locks",
            "<td class=\"num\">3/100</td>",
            "<dt>every declared guarantee held</dt><dd><span class=\"bad\">no</span>",
            "<dt>thresholds breached</dt><dd><span class=\"bad\">1</span>",
            "<dt>interrupted</dt><dd>no</dd>",
        ] {
            assert!(html.contains(text), "{text} missing");
        }
        assert!(html.contains("<td class=\"v-pass\">pass</td>"));
        assert!(html.contains("<td class=\"v-fail\">FAIL: counters</td>"));
        // Dropped comes from the open-loop report.
        assert!(html.contains("<td class=\"num\">10</td>"));
        let mut r = two_strategies();
        r.strategies[1].check.verdict = Verdict::DriftExpected;
        assert!(render_html(&r).contains("<td class=\"v-other\">drift-expected</td>"));
    }
}
