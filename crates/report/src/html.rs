//! The HTML rendering of a report: one self-contained page (inline CSS, inline SVG charts
//! drawn here, no external resources) with the run's header, the strategy comparison,
//! thresholds, anomalies and skipped combinations, and charts of throughput, p99 latency,
//! percentile curves and drift/pending, fault periods shaded and phases marked. A tiny
//! inline script records each chart's laid-out size in `body[data-charts]` for tests.

use std::fmt::Write as _;

use crate::render::history_line;
use crate::{Report, StrategyReport};

/// Series colors, one per strategy report (or per op in a percentile chart).
const PALETTE: [&str; 10] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];

/// Chart geometry (SVG user units): the plot area and the space around it.
const W: f64 = 960.0;
const LEFT: f64 = 76.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 40.0;
const PLOT_H: f64 = 260.0;
const LEGEND_ROW: f64 = 18.0;

/// Where q = 1.0 (the max) sits on the percentile axis: treated as the 99.999th.
const Q_CAP: f64 = 0.99999;

/// Data values are clamped to this before scaling, so spans stay finite.
const BIG: f64 = 1e300;

/// Text made safe for HTML content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A coordinate for an SVG attribute: always finite, clamped to what any viewer draws.
fn n(v: f64) -> String {
    let v = if v.is_finite() { v.clamp(-1e6, 1e6) } else { 0.0 };
    format!("{:.1}", v + 0.0).replace("-0.0", "0.0")
}

/// A figure for a table cell; `-` when not finite.
fn fig(v: f64, decimals: usize) -> String {
    if v.is_finite() { format!("{v:.decimals$}") } else { "-".into() }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// The strategy report's name on charts: `strategy backend isolation`.
fn series_label(s: &StrategyReport) -> String {
    format!("{} {} {}", s.strategy, s.backend, s.isolation)
}

/// The same in prose, as the terminal and Markdown renderings say it.
fn label(s: &StrategyReport) -> String {
    format!("{} on {} at {}", s.strategy, s.backend, s.isolation)
}

/// The worst p99 over the ops that ran: the comparison's one latency figure per row.
fn p99_all(s: &StrategyReport) -> u64 {
    s.ops.values().filter(|o| o.count > 0).map(|o| o.latency_us.p99).max().unwrap_or(0)
}

fn verdict_class(v: &str) -> &'static str {
    match v {
        "pass" => "v-pass",
        v if v.starts_with("FAIL") || v.starts_with("INCOMPLETE") => "v-fail",
        "NO EVIDENCE" => "v-fail",
        _ => "v-other",
    }
}

/// A duration given in microseconds, in the largest unit that keeps it readable.
fn duration_us(us: f64) -> String {
    let (v, unit) = if us >= 1e6 {
        (us / 1e6, "s")
    } else if us >= 1e3 {
        (us / 1e3, "ms")
    } else {
        (us, "us")
    };
    format!("{}{unit}", short(v))
}

/// A number in at most a few characters: 3, 2.5, 12k, 1.5M, 1.8e19.
fn short(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    if a >= 1e15 {
        return format!("{v:.1e}");
    }
    let (v, suffix) = match a {
        a if a >= 1e12 => (v / 1e12, "T"),
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e4 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let s = format!("{:.2}", v + 0.0);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{}{suffix}", if s == "-0" { "0" } else { s })
}

/// One axis in plot space (data already transformed, e.g. to log10), with its ticks.
struct Axis {
    lo: f64,
    hi: f64,
    ticks: Vec<(f64, String)>,
    label: String,
}

impl Axis {
    /// 0..1 across the axis; values outside stay near the plot (clamped just past it).
    fn frac(&self, v: f64) -> f64 {
        let span = self.hi - self.lo;
        if !(span.is_finite() && span > 0.0 && v.is_finite()) {
            return 0.0;
        }
        ((v - self.lo) / span).clamp(-0.02, 1.02)
    }

    /// A linear axis over [lo, hi] with about five ticks at 1, 2 or 5 times a power of ten.
    fn linear(lo: f64, hi: f64, label: &str) -> Axis {
        let (mut lo, mut hi) = (clean(lo), clean(hi));
        if lo > hi {
            std::mem::swap(&mut lo, &mut hi);
        }
        let scale = lo.abs().max(hi.abs());
        if hi - lo <= scale * 1e-9 {
            let pad = if scale > 0.0 { scale * 0.1 } else { 1.0 };
            lo = if lo == 0.0 { 0.0 } else { lo - pad };
            hi += pad;
        }
        let raw = (hi - lo) / 5.0;
        let exp = raw.log10().floor();
        let mag = 10f64.powf(exp);
        let m = match raw / mag {
            r if r <= 1.0 => 1.0,
            r if r <= 2.0 => 2.0,
            r if r <= 5.0 => 5.0,
            _ => 10.0,
        };
        let step = m * mag;
        let lo = (lo / step).floor() * step;
        let hi = ((hi / step).ceil() * step).max(lo + step);
        let decimals = if m == 10.0 { (-(exp + 1.0)).max(0.0) } else { (-exp).max(0.0) }.min(9.0) as usize;
        let mut ticks = Vec::new();
        for k in 0..=20 {
            let v = lo + k as f64 * step;
            if v > hi + step * 1e-6 {
                break;
            }
            let text = if v.abs() >= 1e4 { short(v) } else { format!("{:.decimals$}", v + 0.0) };
            ticks.push((v, text));
        }
        Axis { lo, hi, ticks, label: label.into() }
    }

    /// A log10 axis for latencies in microseconds (values below 1 us are drawn at 1 us),
    /// ticks at powers of ten labelled as durations.
    fn log_us(min_us: f64, max_us: f64, label: &str) -> Axis {
        let lo = clean(min_us).max(1.0).log10().floor().clamp(0.0, 300.0);
        let mut hi = clean(max_us).max(1.0).log10().ceil().clamp(0.0, 300.0);
        if hi <= lo {
            hi = lo + 1.0;
        }
        let every = ((hi - lo) / 8.0).ceil().max(1.0);
        // Over one or two decades, 2x and 5x ticks too, so the axis is still readable.
        let steps: &[f64] = if hi - lo <= 2.0 { &[1.0, 2.0, 5.0] } else { &[1.0] };
        let mut ticks = Vec::new();
        let mut e = lo;
        while e <= hi && ticks.len() < 40 {
            for m in steps.iter().filter(|m| **m == 1.0 || e < hi) {
                ticks.push((e + m.log10(), duration_us(m * 10f64.powf(e))));
            }
            e += every;
        }
        Axis { lo, hi, ticks, label: label.into() }
    }

    /// The HdrHistogram percentile axis: x = -log10(1 - q), 0 to the cap.
    fn percentile() -> Axis {
        let ticks = [(0.5, "50%"), (0.9, "90%"), (0.99, "99%"), (0.999, "99.9%"), (0.9999, "99.99%"), (Q_CAP, "max")]
            .iter()
            .map(|(q, t)| (hdr_x(*q), t.to_string()))
            .collect();
        Axis { lo: 0.0, hi: hdr_x(Q_CAP), ticks, label: "percentile (log scale; max at the right edge)".into() }
    }
}

/// A data value made finite and bounded (non-finite becomes 0).
fn clean(v: f64) -> f64 {
    if v.is_finite() { v.clamp(-BIG, BIG) } else { 0.0 }
}

/// Position of quantile q on the percentile axis (1.0 is drawn at the cap).
fn hdr_x(q: f64) -> f64 {
    -(1.0 - q.clamp(0.0, Q_CAP)).log10()
}

/// Latency in microseconds to log10 plot space (below 1 us drawn at 1 us).
fn log_y(us: f64) -> f64 {
    clean(us).max(1.0).log10()
}

struct Line {
    label: String,
    color: &'static str,
    dashed: bool,
    /// In plot space; non-finite points are dropped when drawn.
    points: Vec<(f64, f64)>,
}

/// A shaded x range (a fault's duration), with a tooltip.
struct Band {
    x0: f64,
    x1: f64,
    title: String,
}

/// A vertical marker (a phase boundary) with its name.
struct Marker {
    x: f64,
    label: String,
}

struct Chart {
    id: String,
    title: String,
    x: Axis,
    y: Axis,
    lines: Vec<Line>,
    bands: Vec<Band>,
    markers: Vec<Marker>,
    /// Shown in the plot when no line has a point (`no data`, `not sampled`).
    empty_note: &'static str,
}

impl Chart {
    fn render(&self, out: &mut String) {
        let plot_w = W - LEFT - RIGHT;
        let lines: Vec<(&Line, Vec<(f64, f64)>)> = self
            .lines
            .iter()
            .map(|l| (l, l.points.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect::<Vec<_>>()))
            .filter(|(_, p)| !p.is_empty())
            .collect();
        // Legend layout: entries flow left to right, wrapping at the plot's width.
        let mut legend = Vec::new();
        let (mut lx, mut row) = (0.0, 0usize);
        for (l, _) in &lines {
            let w = 34.0 + 6.6 * l.label.chars().count() as f64 + 14.0;
            if lx > 0.0 && lx + w > plot_w {
                lx = 0.0;
                row += 1;
            }
            legend.push((LEFT + lx, row, *l));
            lx += w;
        }
        let rows = if legend.is_empty() { 0 } else { row + 1 };
        let legend_top = TOP + PLOT_H + 52.0;
        let h = legend_top + rows as f64 * LEGEND_ROW + 8.0;
        let px = |x: f64| LEFT + self.x.frac(x) * plot_w;
        let py = |y: f64| TOP + PLOT_H - self.y.frac(y) * PLOT_H;
        let w = &mut *out;
        let id = esc(&self.id);
        writeln!(
            w,
            r#"<svg class="chart" id="{id}" viewBox="0 0 {} {}" preserveAspectRatio="xMinYMin meet" role="img" aria-label="{}">"#,
            n(W),
            n(h),
            esc(&self.title)
        )
        .unwrap();
        writeln!(w, "<title>{}</title>", esc(&self.title)).unwrap();
        writeln!(w, r#"<text class="title" x="{}" y="22">{}</text>"#, n(LEFT), esc(&self.title)).unwrap();
        writeln!(
            w,
            r#"<rect class="frame" x="{}" y="{}" width="{}" height="{}"/>"#,
            n(LEFT),
            n(TOP),
            n(plot_w),
            n(PLOT_H)
        )
        .unwrap();
        for b in &self.bands {
            let (x0, x1) = (px(b.x0), px(b.x1));
            writeln!(
                w,
                r#"<rect class="fault" x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>"#,
                n(x0.min(x1)),
                n(TOP),
                n((x1 - x0).abs().max(1.0)),
                n(PLOT_H),
                esc(&b.title)
            )
            .unwrap();
        }
        for (v, t) in &self.y.ticks {
            let y = py(*v);
            writeln!(
                w,
                r#"<line class="grid" x1="{}" y1="{}" x2="{}" y2="{}"/>"#,
                n(LEFT),
                n(y),
                n(LEFT + plot_w),
                n(y)
            )
            .unwrap();
            writeln!(
                w,
                r#"<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>"#,
                n(LEFT - 6.0),
                n(y + 4.0),
                esc(t)
            )
            .unwrap();
        }
        for (v, t) in &self.x.ticks {
            let x = px(*v);
            writeln!(w, r#"<line class="grid" x1="{}" y1="{}" x2="{}" y2="{}"/>"#, n(x), n(TOP), n(x), n(TOP + PLOT_H))
                .unwrap();
            writeln!(
                w,
                r#"<text class="tick" x="{}" y="{}" text-anchor="middle">{}</text>"#,
                n(x),
                n(TOP + PLOT_H + 16.0),
                esc(t)
            )
            .unwrap();
        }
        writeln!(
            w,
            r#"<line class="axis" x1="{l}" y1="{b}" x2="{r}" y2="{b}"/><line class="axis" x1="{l}" y1="{t}" x2="{l}" y2="{b}"/>"#,
            l = n(LEFT),
            r = n(LEFT + plot_w),
            t = n(TOP),
            b = n(TOP + PLOT_H)
        )
        .unwrap();
        writeln!(
            w,
            r#"<text class="axis-label" x="{}" y="{}" text-anchor="middle">{}</text>"#,
            n(LEFT + plot_w / 2.0),
            n(TOP + PLOT_H + 36.0),
            esc(&self.x.label)
        )
        .unwrap();
        writeln!(
            w,
            r#"<text class="axis-label" x="16" y="{y}" text-anchor="middle" transform="rotate(-90 16 {y})">{}</text>"#,
            esc(&self.y.label),
            y = n(TOP + PLOT_H / 2.0)
        )
        .unwrap();
        for m in &self.markers {
            let x = px(m.x);
            writeln!(
                w,
                r#"<line class="phase" x1="{x}" y1="{}" x2="{x}" y2="{}"/><text class="phase" x="{}" y="{}">{}</text>"#,
                n(TOP),
                n(TOP + PLOT_H),
                n(x + 3.0),
                n(TOP + 11.0),
                esc(&m.label),
                x = n(x)
            )
            .unwrap();
        }
        for (l, pts) in &lines {
            let coords: Vec<(f64, f64)> = pts.iter().map(|(x, y)| (px(*x), py(*y))).collect();
            // A single sample is drawn as a short level stroke so it stays visible.
            let drawn = if coords.len() == 1 {
                let (x, y) = coords[0];
                vec![(x - 4.0, y), (x + 4.0, y)]
            } else {
                coords.clone()
            };
            let points: Vec<String> = drawn.iter().map(|(x, y)| format!("{},{}", n(*x), n(*y))).collect();
            let dash = if l.dashed { r#" stroke-dasharray="6 4""# } else { "" };
            writeln!(
                w,
                r#"<polyline class="series" points="{}" stroke="{}"{dash}><title>{}</title></polyline>"#,
                points.join(" "),
                l.color,
                esc(&l.label)
            )
            .unwrap();
            if coords.len() <= 60 && !l.dashed {
                for (x, y) in &coords {
                    writeln!(w, r#"<circle class="dot" cx="{}" cy="{}" r="2.5" fill="{}"/>"#, n(*x), n(*y), l.color)
                        .unwrap();
                }
            }
        }
        if lines.is_empty() {
            writeln!(
                w,
                r#"<text class="note" x="{}" y="{}" text-anchor="middle">{}</text>"#,
                n(LEFT + plot_w / 2.0),
                n(TOP + PLOT_H / 2.0),
                self.empty_note
            )
            .unwrap();
        }
        for (x, row, l) in &legend {
            let y = legend_top + *row as f64 * LEGEND_ROW;
            let dash = if l.dashed { r#" stroke-dasharray="6 4""# } else { "" };
            writeln!(
                w,
                r#"<g class="legend"><line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text></g>"#,
                n(*x),
                n(x + 26.0),
                l.color,
                n(x + 32.0),
                n(y + 4.0),
                esc(&l.label),
                y = n(y)
            )
            .unwrap();
        }
        writeln!(w, "</svg>").unwrap();
    }
}

/// The time axis shared by the time charts: 0 to the last sample or fault end.
fn time_axis(r: &Report) -> Axis {
    let last_sample = r.strategies.iter().flat_map(|s| &s.series).map(|p| clean(p.t_s)).fold(0.0, f64::max);
    let last_fault = r
        .strategies
        .iter()
        .flat_map(|s| &s.faults)
        .filter_map(|f| f.fired_at_ms.map(|t| (t as f64 + f.duration_ms.unwrap_or(0) as f64) / 1000.0))
        .fold(0.0, f64::max);
    Axis::linear(0.0, last_sample.max(last_fault), "seconds since the load started")
}

/// Fault periods of every strategy report, at least 1% of the time axis wide.
fn fault_bands(r: &Report, x: &Axis) -> Vec<Band> {
    let min_w = (x.hi - x.lo) * 0.01;
    let mut out = Vec::new();
    for s in &r.strategies {
        for f in &s.faults {
            let Some(t) = f.fired_at_ms else { continue };
            let x0 = t as f64 / 1000.0;
            let d = f.duration_ms.map_or("instant".to_string(), |d| format!("{d} ms"));
            out.push(Band {
                x0,
                x1: x0 + (f.duration_ms.unwrap_or(0) as f64 / 1000.0).max(min_w),
                title: format!("fault {} ({}): fired at {t} ms, {d}: {}", f.kind, label(s), f.outcome),
            });
        }
    }
    out
}

/// Where the phase changes (and where the first one starts), once per distinct place.
fn phase_markers(r: &Report, x: &Axis) -> Vec<Marker> {
    let near = (x.hi - x.lo) * 0.005;
    let mut out: Vec<Marker> = Vec::new();
    let mut add = |x: f64, name: &str| {
        let x = clean(x).max(0.0);
        if !out.iter().any(|m| m.label == name && (m.x - x).abs() <= near) {
            out.push(Marker { x, label: name.to_string() });
        }
    };
    for s in &r.strategies {
        if let Some(first) = s.series.first() {
            add(first.t_s - first.dt_s, &first.phase);
        }
        for pair in s.series.windows(2) {
            if pair[0].phase != pair[1].phase {
                add(pair[0].t_s, &pair[1].phase);
            }
        }
    }
    out
}

fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

fn throughput_chart(r: &Report) -> Chart {
    let x = time_axis(r);
    let mut lines = Vec::new();
    for (i, s) in r.strategies.iter().enumerate() {
        lines.push(Line {
            label: series_label(s),
            color: color(i),
            dashed: false,
            points: s.series.iter().map(|p| (clean(p.t_s), clean(p.ops_per_s))).collect(),
        });
    }
    for (i, s) in r.strategies.iter().enumerate() {
        if s.series.iter().any(|p| p.scheduled > 0) {
            lines.push(Line {
                label: format!("target: {}", series_label(s)),
                color: color(i),
                dashed: true,
                points: s
                    .series
                    .iter()
                    .filter(|p| p.dt_s > 0.0 && p.dt_s.is_finite())
                    .map(|p| (clean(p.t_s), clean(p.scheduled as f64 / p.dt_s)))
                    .collect(),
            });
        }
    }
    let hi = lines.iter().flat_map(|l| &l.points).map(|p| p.1).fold(0.0, f64::max);
    Chart {
        id: "throughput".into(),
        title: "Throughput over time (dashed: open-loop target)".into(),
        y: Axis::linear(0.0, hi, "ops/s"),
        bands: fault_bands(r, &x),
        markers: phase_markers(r, &x),
        x,
        lines,
        empty_note: "no data",
    }
}

fn p99_chart(r: &Report) -> Chart {
    let x = time_axis(r);
    let lines: Vec<Line> = r
        .strategies
        .iter()
        .enumerate()
        .map(|(i, s)| Line {
            label: series_label(s),
            color: color(i),
            dashed: false,
            // An interval without ops has no latency to draw.
            points: s.series.iter().filter(|p| p.ops > 0).map(|p| (clean(p.t_s), p.p99_us as f64)).collect(),
        })
        .collect();
    let all = lines.iter().flat_map(|l| &l.points).map(|p| p.1);
    let (lo, hi) = all.fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let lines = lines
        .into_iter()
        .map(|l| Line { points: l.points.into_iter().map(|(t, us)| (t, log_y(us))).collect(), ..l })
        .collect();
    Chart {
        id: "latency-p99".into(),
        title: "Latency p99 over time, all ops, from the intended start".into(),
        y: Axis::log_us(lo, hi, "p99 latency (log scale)"),
        bands: fault_bands(r, &x),
        markers: phase_markers(r, &x),
        x,
        lines,
        empty_note: "no data",
    }
}

fn percentile_chart(i: usize, s: &StrategyReport) -> Chart {
    let mut lines = Vec::new();
    let (mut lo, mut hi) = (f64::MAX, 0.0f64);
    for (k, (op, o)) in s.ops.iter().filter(|(_, o)| o.count > 0).enumerate() {
        for (curve, dashed, what) in
            [(&o.latency_us.curve, false, ""), (&o.uncorrected_latency_us.curve, true, " (uncorrected)")]
        {
            let points: Vec<(f64, f64)> = curve
                .iter()
                .filter(|[q, us]| q.is_finite() && us.is_finite())
                .map(|[q, us]| {
                    lo = lo.min(*us);
                    hi = hi.max(*us);
                    (hdr_x(*q), log_y(*us))
                })
                .collect();
            lines.push(Line { label: format!("{op}{what}"), color: color(k), dashed, points });
        }
    }
    Chart {
        id: format!("percentiles-{i}"),
        title: format!("Latency by percentile: {}", series_label(s)),
        x: Axis::percentile(),
        y: Axis::log_us(lo, hi, "latency (log scale)"),
        lines,
        bands: Vec::new(),
        markers: Vec::new(),
        empty_note: "no data",
    }
}

fn drift_chart(r: &Report) -> Chart {
    let x = time_axis(r);
    let mut lines = Vec::new();
    for (i, s) in r.strategies.iter().enumerate() {
        let pick = |f: fn(&crate::SeriesPoint) -> Option<i64>| -> Vec<(f64, f64)> {
            s.series.iter().filter_map(|p| f(p).map(|v| (clean(p.t_s), v as f64))).collect()
        };
        let drift = pick(|p| p.drift);
        if !drift.is_empty() {
            lines.push(Line {
                label: format!("drift: {}", series_label(s)),
                color: color(i),
                dashed: false,
                points: drift,
            });
        }
        let pending = pick(|p| p.pending);
        if !pending.is_empty() {
            lines.push(Line {
                label: format!("pending: {}", series_label(s)),
                color: color(i),
                dashed: true,
                points: pending,
            });
        }
    }
    let (lo, hi) =
        lines.iter().flat_map(|l| &l.points).fold((0.0f64, 0.0f64), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
    Chart {
        id: "drift-pending".into(),
        title: "Drift (SUM(counters) - unread rows) and pending (dashed) over time".into(),
        y: Axis::linear(lo, hi, "count"),
        bands: fault_bands(r, &x),
        markers: phase_markers(r, &x),
        x,
        lines,
        empty_note: "not sampled",
    }
}

const CSS: &str = r#"
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px auto; max-width: 1240px;
  padding: 0 16px; color: #1d232a; background: #fff; }
h1 { font-size: 1.5em; margin-bottom: 8px; }
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
    header(w, r);
    comparison(w, r);
    charts(w, r);
    latency_table(w, r);
    stages_table(w, r);
    thresholds(w, r);
    anomalies_and_faults(w, r);
    details(w, r);
    skipped(w, r);
    writeln!(w, "{SELF_CHECK}\n</body>\n</html>").unwrap();
    out
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
            esc(&s.check.verdict),
            esc(&s.backend),
            esc(&s.isolation),
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

fn comparison(w: &mut String, r: &Report) {
    writeln!(w, "<h2>Strategy x backend x isolation</h2>").unwrap();
    let rows: Vec<Vec<Cell>> = r
        .strategies
        .iter()
        .map(|s| {
            vec![
                cell(esc(&s.strategy)),
                cell(esc(&s.backend)),
                cell(esc(&s.isolation)),
                cell(esc(&s.guarantee)),
                classed("wide", esc(&s.load_model)),
                num(s.ops_total),
                num(fig(s.throughput_ops_per_s, 1)),
                num(p99_all(s)),
                num(s.errors_total),
                num(s.retries),
                num(s.open_loop.as_ref().map_or(0, |o| o.dropped)),
                num(format!("{}/{}", s.check.users_mismatched, s.check.users_checked)),
                num(s.check.drift_abs_total),
                classed(verdict_class(&s.check.verdict), esc(&s.check.verdict)),
                classed(if s.check.matches_guarantee { "good" } else { "bad" }, yes_no(s.check.matches_guarantee)),
            ]
        })
        .collect();
    table(
        w,
        &[
            "strategy",
            "backend",
            "isolation",
            "guarantee",
            "load model",
            "ops",
            "ops/s",
            "p99 us (worst op)",
            "errors",
            "retries",
            "dropped",
            "mismatched",
            "drift",
            "verdict",
            "matches guarantee",
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
         dashed from the moment a worker started the op (service time); in a closed loop they coincide.</p>"
    )
    .unwrap();
    for (i, s) in r.strategies.iter().enumerate() {
        percentile_chart(i, s).render(w);
    }
    drift_chart(r).render(w);
}

fn latency_table(w: &mut String, r: &Report) {
    writeln!(w, "<h2>Latency per operation (microseconds)</h2>").unwrap();
    let mut rows = Vec::new();
    for s in &r.strategies {
        for (op, o) in s.ops.iter().filter(|(_, o)| o.count + o.skipped > 0) {
            let (l, u) = (&o.latency_us, &o.uncorrected_latency_us);
            rows.push(vec![
                cell(esc(&s.strategy)),
                cell(esc(&s.backend)),
                cell(esc(&s.isolation)),
                cell(esc(op)),
                num(o.count),
                num(o.errors),
                num(o.retries),
                num(o.skipped),
                num(l.p50),
                num(l.p90),
                num(l.p99),
                num(l.p999),
                num(l.max),
                num(u.p99),
                num(u.max),
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

fn stages_table(w: &mut String, r: &Report) {
    writeln!(w, "<h2>Stages</h2>").unwrap();
    let mut rows = Vec::new();
    for s in &r.strategies {
        for st in &s.stages {
            let rate = match (st.rate_from, st.rate_to) {
                (Some(a), Some(b)) if a == b => fig(a, 1),
                (Some(a), Some(b)) => format!("{} -> {}", fig(a, 1), fig(b, 1)),
                (Some(a), None) | (None, Some(a)) => fig(a, 1),
                (None, None) => "-".into(),
            };
            rows.push(vec![
                cell(esc(&label(s))),
                cell(esc(&st.name)),
                cell(yes_no(st.measured)),
                cell(esc(&st.model)),
                num(st.workers),
                num(rate),
                cell(esc(st.arrival.as_deref().unwrap_or("-"))),
                num(fig(st.duration_s, 1)),
                num(st.scheduled),
                num(st.ops),
                num(st.dropped),
                num(fig(st.achieved_ops_per_s, 1)),
                num(st.p99_us),
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
            "p99 us",
        ],
        &rows,
    );
    let open: Vec<Vec<Cell>> = r
        .strategies
        .iter()
        .filter_map(|s| s.open_loop.as_ref().map(|o| (s, o)))
        .map(|(s, o)| {
            vec![
                cell(esc(&label(s))),
                num(o.scheduled),
                num(o.issued),
                num(o.dropped),
                num(o.late),
                num(o.schedule_lag_us.p99),
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
                "schedule lag p99 us",
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
                cell(esc(&label(s))),
                cell(esc(&t.metric)),
                cell(esc(t.op.as_deref().unwrap_or("-"))),
                if t.passed { classed("v-pass", "passed") } else { classed("v-fail", "BREACHED") },
                classed("wide", esc(&t.detail)),
            ]
        })
        .collect();
    table(w, &["strategy", "metric", "op", "result", "detail"], &rows);
}

fn anomalies_and_faults(w: &mut String, r: &Report) {
    writeln!(w, "<h2>Anomalies</h2>").unwrap();
    let rows: Vec<Vec<Cell>> = r
        .strategies
        .iter()
        .flat_map(|s| s.anomalies.iter().map(move |a| (s, a)))
        .map(|(s, a)| {
            vec![
                cell(esc(&label(s))),
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
        .map(|s| vec![cell(esc(&label(s))), classed("wide", esc(&history_line(&s.history)))])
        .collect();
    table(w, &["strategy", "history"], &rows);
    writeln!(w, "<h2>Faults</h2>").unwrap();
    let rows: Vec<Vec<Cell>> = r
        .strategies
        .iter()
        .flat_map(|s| s.faults.iter().map(move |f| (s, f)))
        .map(|(s, f)| {
            vec![
                cell(esc(&label(s))),
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
        writeln!(w, "<h3>{}</h3>\n<ul>", esc(&label(s))).unwrap();
        let kept = if s.namespace_kept { ", kept" } else { "" };
        writeln!(
            w,
            "<li>namespace <code>{}</code>{kept}; server isolation <code>{}</code>; ran as {}</li>",
            esc(&s.namespace),
            esc(&s.isolation_in_effect),
            esc(&s.identity)
        )
        .unwrap();
        writeln!(
            w,
            "<li>seed {} s, load {} s, settle {} s; give-ups {}</li>",
            fig(s.seed_s, 2),
            fig(s.load_s, 2),
            fig(s.settle_s, 2),
            s.give_ups
        )
        .unwrap();
        if let Some(e) = &s.settle_error {
            writeln!(w, "<li class=\"bad\">settle: {}</li>", esc(e)).unwrap();
        }
        let c = &s.check;
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

fn skipped(w: &mut String, r: &Report) {
    writeln!(w, "<h2>Skipped combinations</h2>").unwrap();
    let rows: Vec<Vec<Cell>> = r
        .skipped
        .iter()
        .map(|k| {
            vec![
                cell(esc(&k.strategy)),
                cell(esc(&k.backend)),
                cell(esc(&k.isolation)),
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
        StageReport, ThresholdResult,
    };

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
            backend: "postgres".into(),
            isolation: "read-committed".into(),
            isolation_in_effect: "read committed".into(),
            guarantee: "exact".into(),
            namespace: "cl_test".into(),
            namespace_kept: false,
            identity: "role cl_test (this namespace only)".into(),
            cleanup_error: None,
            permission_denied: 0,
            seed_s: 0.5,
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
            settle_error: None,
            faults,
            figures: BTreeMap::from([("flushes".to_string(), 12.0)]),
            anomalies: vec![Anomaly {
                name: "lost_flush".into(),
                count: 1,
                detail: "1 flush claim lost".into(),
                ..Default::default()
            }],
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
                verdict: verdict.into(),
                matches_guarantee: !verdict.starts_with("FAIL"),
                evidence: true,
                summary: format!("{name}: {verdict}"),
            },
            load_model: "open loop, 200 -> 400 ops/s".into(),
            stages: vec![StageReport {
                name: "steady".into(),
                measured: true,
                model: "open".into(),
                workers: 8,
                rate_from: Some(200.0),
                rate_to: Some(400.0),
                arrival: Some("poisson".into()),
                duration_s: 3.0,
                scheduled: 900,
                ops: 890,
                dropped: 10,
                achieved_ops_per_s: 296.7,
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
        }
    }

    fn report(strategies: Vec<StrategyReport>) -> Report {
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
                backend: "sqlite".into(),
                isolation: "serializable".into(),
                reason: "SQLite has no row locks".into(),
            }],
            all_guarantees_held: false,
            thresholds_breached: 1,
            interrupted: false,
            replay_command: "counterlab run scenarios/html-test.toml --seed 42".into(),
            trusted_strategy_files: false,
            side_files: Vec::new(),
        }
    }

    fn two_strategies() -> Report {
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
            strategy("<script>alert('x&y')</script>", "FAIL", Vec::new(), Vec::new()),
        ])
    }

    /// The `<svg>` element with this id, through its closing tag.
    fn svg<'a>(html: &'a str, id: &str) -> &'a str {
        let start = html.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no chart {id}"));
        let start = html[..start].rfind("<svg").unwrap();
        let end = start + html[start..].find("</svg>").unwrap();
        &html[start..end]
    }

    /// Every `points="..."` value in a fragment.
    fn polylines(fragment: &str) -> Vec<&str> {
        fragment.split("points=\"").skip(1).map(|p| &p[..p.find('"').unwrap()]).collect()
    }

    fn assert_finite(html: &str) {
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
    fn every_chart_is_there_with_drawn_series() {
        let html = render_html(&two_strategies());
        for id in ["throughput", "latency-p99", "percentiles-0", "percentiles-1", "drift-pending"] {
            let chart = svg(&html, id);
            assert!(chart.starts_with("<svg class=\"chart\""), "{id}");
            assert!(chart.contains("<text class=\"title\""), "{id} has no title");
            assert!(chart.contains("class=\"tick\""), "{id} has no tick labels");
            assert!(chart.contains("class=\"legend\""), "{id} has no legend");
            let lines = polylines(chart);
            assert!(!lines.is_empty(), "{id} draws nothing");
            assert!(lines.iter().all(|p| p.split(' ').count() >= 2), "{id}: {lines:?}");
        }
        // One strategy line plus its open-loop target (the other report has no series).
        let throughput = svg(&html, "throughput");
        assert_eq!(polylines(throughput).len(), 2);
        assert!(throughput.contains("stroke-dasharray") && throughput.contains("target: conditional-update"));
        // Percentiles: two ops that ran (delete did not), corrected and uncorrected each.
        let p = svg(&html, "percentiles-0");
        assert_eq!(polylines(p).len(), 4, "{p}");
        assert!(p.contains("mark_read (uncorrected)") && !p.contains(">delete<"));
        for tick in [">50%<", ">90%<", ">99%<", ">99.9%<", ">99.99%<"] {
            assert!(p.contains(tick), "{tick} missing");
        }
        // Drift and pending of the one sampled strategy.
        assert_eq!(polylines(svg(&html, "drift-pending")).len(), 2);
        assert_finite(&html);
    }

    #[test]
    fn faults_are_shaded_and_phases_marked_on_time_charts() {
        let html = render_html(&two_strategies());
        for id in ["throughput", "latency-p99", "drift-pending"] {
            let chart = svg(&html, id);
            assert_eq!(chart.matches("<rect class=\"fault\"").count(), 2, "{id}: the unfired fault is not drawn");
            assert!(chart.contains("<title>fault pause-flusher (conditional-update on postgres at read-committed)"));
            assert!(chart.contains("<title>fault kill-connections"));
            // The instant fault still gets at least 1% of the plot's width.
            let instant = &chart[chart.find("<title>fault kill-connections").unwrap() - 200..];
            let width = instant.split("width=\"").nth(1).unwrap();
            let width: f64 = width[..width.find('"').unwrap()].parse().unwrap();
            assert!(width >= (W - LEFT - RIGHT) * 0.01 - 0.5, "{width}");
            for phase in [">warmup<", ">steady<", ">settle<"] {
                assert!(chart.contains(phase), "{id}: phase {phase} not marked");
            }
            assert_eq!(chart.matches("<line class=\"phase\"").count(), 3, "{id}");
        }
        assert!(!svg(&html, "percentiles-0").contains("class=\"fault\""));
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
        assert!(html.contains("<td class=\"v-fail\">FAIL</td>"));
        // Dropped comes from the open-loop report.
        assert!(html.contains("<td class=\"num\">10</td>"));
        let mut r = two_strategies();
        r.strategies[1].check.verdict = "drift-expected".into();
        assert!(render_html(&r).contains("<td class=\"v-other\">drift-expected</td>"));
    }

    #[test]
    fn empty_charts_say_so() {
        let mut r = two_strategies();
        r.strategies[0].series.clear();
        r.strategies[0].faults.clear();
        for s in &mut r.strategies {
            s.ops.clear();
        }
        let html = render_html(&r);
        for id in ["throughput", "latency-p99", "percentiles-0", "percentiles-1"] {
            let chart = svg(&html, id);
            assert!(polylines(chart).is_empty(), "{id}");
            assert!(chart.contains(">no data<") && chart.contains("class=\"tick\""), "{id}");
        }
        assert!(svg(&html, "drift-pending").contains(">not sampled<"));
        assert_finite(&html);

        let html = render_html(&report(Vec::new()));
        for id in ["throughput", "latency-p99", "drift-pending"] {
            assert!(polylines(svg(&html, id)).is_empty());
        }
        assert!(!html.contains("percentiles-"));
        assert_finite(&html);
    }

    #[test]
    fn series_without_drift_say_not_sampled() {
        let mut r = two_strategies();
        for p in &mut r.strategies[0].series {
            p.drift = None;
            p.pending = None;
        }
        let chart = render_html(&r);
        let chart = svg(&chart, "drift-pending");
        assert!(chart.contains(">not sampled<") && polylines(chart).is_empty());
    }

    #[test]
    fn a_single_point_is_drawn_as_a_visible_stroke() {
        let mut r = two_strategies();
        r.strategies[0].series.truncate(1);
        let html = render_html(&r);
        let lines = polylines(svg(&html, "throughput"));
        assert!(!lines.is_empty());
        for p in lines {
            let xs: Vec<f64> = p.split(' ').map(|xy| xy.split_once(',').unwrap().0.parse().unwrap()).collect();
            assert_eq!(xs.len(), 2);
            assert!(xs[1] - xs[0] >= 4.0, "{p}");
        }
        assert_finite(&html);
    }

    #[test]
    fn hostile_numbers_never_reach_the_svg() {
        let mut r = two_strategies();
        let s = &mut r.strategies[0];
        s.throughput_ops_per_s = f64::NAN;
        s.seed_s = f64::INFINITY;
        s.figures.insert("heal_ms".into(), f64::NEG_INFINITY);
        s.series[0].ops_per_s = f64::NAN;
        s.series[1].ops_per_s = f64::INFINITY;
        s.series[1].t_s = f64::NAN;
        s.series[2].ops_per_s = 1e308;
        s.series[2].dt_s = 0.0;
        s.series[3].p99_us = u64::MAX;
        s.series[3].drift = Some(i64::MIN);
        s.series[2].drift = Some(i64::MAX);
        s.series[0].pending = Some(i64::MAX);
        s.faults[0].fired_at_ms = Some(u64::MAX);
        s.faults[0].duration_ms = Some(u64::MAX);
        let lat = &mut s.ops.get_mut("mark_read").unwrap().latency_us;
        lat.curve[0] = [f64::NAN, 5.0];
        lat.curve[1] = [0.5, f64::INFINITY];
        lat.curve[2] = [1.0, 1e300];
        lat.curve[3] = [-3.0, -7.0];
        s.stages[0].rate_to = Some(f64::NAN);
        s.open_loop.as_mut().unwrap().achieved_over_target = f64::INFINITY;
        let html = render_html(&r);
        assert_finite(&html);
        assert!(!polylines(svg(&html, "throughput")).is_empty());
        assert!(!polylines(svg(&html, "percentiles-0")).is_empty());
    }

    #[test]
    fn linear_axes_cover_their_range_with_round_ticks() {
        for (lo, hi) in
            [(0.0, 1.0), (0.0, 0.0), (5.0, 5.0), (-3.0, 1234.5), (0.0, 1e19), (1e18, 1e18 + 1.0), (-1e300, 1e300)]
        {
            let a = Axis::linear(lo, hi, "v");
            assert!(a.lo <= lo.min(hi) && a.hi >= hi.max(lo) && a.hi > a.lo, "{lo}..{hi}: {}..{}", a.lo, a.hi);
            assert!((2..=21).contains(&a.ticks.len()), "{lo}..{hi}: {:?}", a.ticks);
            assert!(a.ticks.iter().all(|(v, t)| v.is_finite() && !t.is_empty() && !t.contains("NaN")));
        }
        let a = Axis::linear(0.0, 380.0, "ops/s");
        let labels: Vec<&str> = a.ticks.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(labels, ["0", "100", "200", "300", "400"]);
        let a = Axis::linear(0.0, 2.2, "s");
        assert_eq!(a.ticks[1].1, "0.5");
        let a = Axis::log_us(300.0, 25_000.0, "latency");
        let labels: Vec<&str> = a.ticks.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(labels, ["100us", "1ms", "10ms", "100ms"]);
        let a = Axis::log_us(1500.0, 9000.0, "latency");
        let labels: Vec<&str> = a.ticks.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(labels, ["1ms", "2ms", "5ms", "10ms"]);
    }
}
