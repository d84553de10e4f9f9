//! The SVG chart kit of the HTML page: geometry, axes (linear, log latency, percentile),
//! the plot-space transforms, lines, fault bands, phase markers and `Chart::render`, which
//! draws one self-contained `<svg>`. Nothing here knows what a report is.

use std::fmt::Write as _;

/// Series colors, one per strategy report (or per op in a percentile chart).
const PALETTE: [&str; 10] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];

/// Dash patterns (`stroke-dasharray`; "" is solid), one per round through the palette,
/// so series 0..40 all differ in (color, dash).
const DASHES: [&str; 4] = ["", "9 3", "3 3", "12 3 3 3"];

/// The secondary measure of a series (its open-loop target, its pending count, its
/// uncorrected curve): the same color, dotted and thinner, one dotted pattern per round
/// through the palette; none is a primary pattern.
const SECONDARY: [&str; 4] = ["1 3", "1 3 7 3", "1 7", "1 2 1 7"];

/// How series `i` is drawn: a palette color and, past the first ten, a dash pattern.
pub(super) fn style(i: usize) -> Style {
    Style { color: PALETTE[i % PALETTE.len()], dash: DASHES[(i / PALETTE.len()) % DASHES.len()] }
}

/// A series' color and dash pattern (`stroke-dasharray`, "" for solid).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Style {
    pub(super) color: &'static str,
    pub(super) dash: &'static str,
}

/// How the secondary measure of series `i` is drawn (see `SECONDARY`).
pub(super) fn secondary(i: usize) -> Style {
    Style { color: PALETTE[i % PALETTE.len()], dash: SECONDARY[(i / PALETTE.len()) % SECONDARY.len()] }
}

/// Chart geometry (SVG user units): the plot area and the space around it.
pub(super) const W: f64 = 960.0;
pub(super) const LEFT: f64 = 76.0;
pub(super) const RIGHT: f64 = 24.0;
const TOP: f64 = 40.0;
const PLOT_H: f64 = 260.0;
const LEGEND_ROW: f64 = 18.0;

/// Where q = 1.0 (the max) sits on the percentile axis: treated as the 99.999th.
const Q_CAP: f64 = 0.99999;

/// Data values are clamped to this before scaling, so spans stay finite.
const BIG: f64 = 1e300;

/// Text made safe for HTML content and attribute values.
pub(super) fn esc(s: &str) -> String {
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
pub(super) struct Axis {
    pub(super) lo: f64,
    pub(super) hi: f64,
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
    pub(super) fn linear(lo: f64, hi: f64, label: &str) -> Axis {
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
    pub(super) fn log_us(min_us: f64, max_us: f64, label: &str) -> Axis {
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
                ticks.push((e + m.log10(), crate::units::latency_us(m * 10f64.powf(e))));
            }
            e += every;
        }
        Axis { lo, hi, ticks, label: label.into() }
    }

    /// The HdrHistogram percentile axis: x = -log10(1 - q), 0 to the cap.
    pub(super) fn percentile() -> Axis {
        let ticks = [(0.5, "50%"), (0.9, "90%"), (0.99, "99%"), (0.999, "99.9%"), (0.9999, "99.99%"), (Q_CAP, "max")]
            .iter()
            .map(|(q, t)| (hdr_x(*q), t.to_string()))
            .collect();
        Axis { lo: 0.0, hi: hdr_x(Q_CAP), ticks, label: "percentile (log scale; max at the right edge)".into() }
    }
}

/// A data value made finite and bounded (non-finite becomes 0).
pub(super) fn clean(v: f64) -> f64 {
    if v.is_finite() { v.clamp(-BIG, BIG) } else { 0.0 }
}

/// Position of quantile q on the percentile axis (1.0 is drawn at the cap).
pub(super) fn hdr_x(q: f64) -> f64 {
    -(1.0 - q.clamp(0.0, Q_CAP)).log10()
}

/// Latency in microseconds to log10 plot space (below 1 us drawn at 1 us).
pub(super) fn log_y(us: f64) -> f64 {
    clean(us).max(1.0).log10()
}

/// One series: a polyline in the chart, named in the legend.
pub(super) struct Line {
    pub(super) label: String,
    pub(super) style: Style,
    /// In plot space; non-finite points are dropped when drawn.
    pub(super) points: Vec<(f64, f64)>,
}

/// A shaded x range (a fault's duration), with a tooltip.
pub(super) struct Band {
    pub(super) x0: f64,
    pub(super) x1: f64,
    pub(super) title: String,
}

/// A vertical marker (a phase boundary) with its name.
pub(super) struct Marker {
    pub(super) x: f64,
    pub(super) label: String,
}

/// One chart: its axes, the series on them, fault bands and phase markers.
pub(super) struct Chart {
    pub(super) id: String,
    pub(super) title: String,
    pub(super) x: Axis,
    pub(super) y: Axis,
    pub(super) lines: Vec<Line>,
    pub(super) bands: Vec<Band>,
    pub(super) markers: Vec<Marker>,
    /// Shown in the plot when no line has a point (`no data`, `not sampled`).
    pub(super) empty_note: &'static str,
}

/// The plot area's width: the chart's width less the margins.
const PLOT_W: f64 = W - LEFT - RIGHT;

/// Where the legend starts: below the plot, its tick labels and the x axis label.
const LEGEND_TOP: f64 = TOP + PLOT_H + 52.0;

/// A legend entry as laid out: its left edge, its row, and the line it names.
type LegendEntry<'a> = (f64, usize, &'a Line);

/// A line to draw, with only its finite points.
type Drawable<'a> = (&'a Line, Vec<(f64, f64)>);

impl Chart {
    /// Writes the chart as one `<svg>`: the frame, fault bands, grid, axes, phase markers,
    /// the series (or the empty note), then the legend, which sets the height.
    pub(super) fn render(&self, out: &mut String) {
        let lines = self.drawable_lines();
        let (legend, rows) = legend_layout(&lines);
        let h = LEGEND_TOP + rows as f64 * LEGEND_ROW + 8.0;
        self.write_frame(out, h);
        self.write_bands(out);
        self.write_grid(out);
        self.write_axes(out);
        self.write_markers(out);
        for (l, pts) in &lines {
            self.write_series(out, l, pts);
        }
        if lines.is_empty() {
            self.write_empty_note(out);
        }
        write_legend(out, &legend);
        writeln!(out, "</svg>").unwrap();
    }

    /// The lines that have a finite point, each with those points only.
    fn drawable_lines(&self) -> Vec<Drawable<'_>> {
        self.lines
            .iter()
            .map(|l| (l, l.points.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect::<Vec<_>>()))
            .filter(|(_, p)| !p.is_empty())
            .collect()
    }

    /// An x in plot space as an SVG coordinate.
    fn px(&self, x: f64) -> f64 {
        LEFT + self.x.frac(x) * PLOT_W
    }

    /// A y in plot space as an SVG coordinate (SVG's y grows downwards).
    fn py(&self, y: f64) -> f64 {
        TOP + PLOT_H - self.y.frac(y) * PLOT_H
    }

    /// The opening `<svg>` tag (`h` high), its title and the plot's frame.
    fn write_frame(&self, w: &mut String, h: f64) {
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
            n(PLOT_W),
            n(PLOT_H)
        )
        .unwrap();
    }

    /// The shaded fault periods, at least one unit wide so an instant one shows.
    fn write_bands(&self, w: &mut String) {
        for b in &self.bands {
            let (x0, x1) = (self.px(b.x0), self.px(b.x1));
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
    }

    /// A grid line and a tick label at every tick, y axis first.
    fn write_grid(&self, w: &mut String) {
        for (v, t) in &self.y.ticks {
            let y = self.py(*v);
            writeln!(
                w,
                r#"<line class="grid" x1="{}" y1="{}" x2="{}" y2="{}"/>"#,
                n(LEFT),
                n(y),
                n(LEFT + PLOT_W),
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
            let x = self.px(*v);
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
    }

    /// The two axis lines and their labels (the y label turned upright).
    fn write_axes(&self, w: &mut String) {
        writeln!(
            w,
            r#"<line class="axis" x1="{l}" y1="{b}" x2="{r}" y2="{b}"/><line class="axis" x1="{l}" y1="{t}" x2="{l}" y2="{b}"/>"#,
            l = n(LEFT),
            r = n(LEFT + PLOT_W),
            t = n(TOP),
            b = n(TOP + PLOT_H)
        )
        .unwrap();
        writeln!(
            w,
            r#"<text class="axis-label" x="{}" y="{}" text-anchor="middle">{}</text>"#,
            n(LEFT + PLOT_W / 2.0),
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
    }

    /// A dotted vertical with its name at each phase marker.
    fn write_markers(&self, w: &mut String) {
        for m in &self.markers {
            let x = self.px(m.x);
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
    }

    /// One line's polyline and, when it has few enough points and is solid, a dot on each.
    fn write_series(&self, w: &mut String, l: &Line, pts: &[(f64, f64)]) {
        let coords: Vec<(f64, f64)> = pts.iter().map(|(x, y)| (self.px(*x), self.py(*y))).collect();
        // A single sample is drawn as a short level stroke so it stays visible.
        let drawn = if coords.len() == 1 {
            let (x, y) = coords[0];
            vec![(x - 4.0, y), (x + 4.0, y)]
        } else {
            coords.clone()
        };
        let points: Vec<String> = drawn.iter().map(|(x, y)| format!("{},{}", n(*x), n(*y))).collect();
        writeln!(
            w,
            r#"<polyline class="series" points="{}" stroke="{}"{}><title>{}</title></polyline>"#,
            points.join(" "),
            l.style.color,
            dash_attr(l.style),
            esc(&l.label)
        )
        .unwrap();
        if coords.len() <= 60 && l.style.dash.is_empty() {
            for (x, y) in &coords {
                writeln!(w, r#"<circle class="dot" cx="{}" cy="{}" r="2.5" fill="{}"/>"#, n(*x), n(*y), l.style.color)
                    .unwrap();
            }
        }
    }

    /// The note in the middle of a plot with nothing to draw.
    fn write_empty_note(&self, w: &mut String) {
        writeln!(
            w,
            r#"<text class="note" x="{}" y="{}" text-anchor="middle">{}</text>"#,
            n(LEFT + PLOT_W / 2.0),
            n(TOP + PLOT_H / 2.0),
            self.empty_note
        )
        .unwrap();
    }
}

/// The `stroke-dasharray` attribute of a style (with the secondary measure thinner), or
/// nothing for a solid line.
fn dash_attr(s: Style) -> String {
    match s.dash {
        "" => String::new(),
        d if SECONDARY.contains(&d) => format!(r#" stroke-dasharray="{d}" stroke-width="1.4""#),
        d => format!(r#" stroke-dasharray="{d}""#),
    }
}

/// Places the legend: entries flow left to right, wrapping at the plot's width. Returns
/// the entries and the number of rows they take.
fn legend_layout<'a>(lines: &[Drawable<'a>]) -> (Vec<LegendEntry<'a>>, usize) {
    let mut legend = Vec::new();
    let (mut lx, mut row) = (0.0, 0usize);
    for (l, _) in lines {
        let w = 34.0 + 6.6 * l.label.chars().count() as f64 + 14.0;
        if lx > 0.0 && lx + w > PLOT_W {
            lx = 0.0;
            row += 1;
        }
        legend.push((LEFT + lx, row, *l));
        lx += w;
    }
    let rows = if legend.is_empty() { 0 } else { row + 1 };
    (legend, rows)
}

/// Each legend entry: a stroke in the line's color and dash, then its label.
fn write_legend(w: &mut String, legend: &[LegendEntry<'_>]) {
    for (x, row, l) in legend {
        let y = LEGEND_TOP + *row as f64 * LEGEND_ROW;
        writeln!(
            w,
            r#"<g class="legend"><line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="2"{}/><text x="{}" y="{}">{}</text></g>"#,
            n(*x),
            n(x + 26.0),
            l.style.color,
            dash_attr(l.style),
            n(x + 32.0),
            n(y + 4.0),
            esc(&l.label),
            y = n(y)
        )
        .unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forty_series_and_their_secondaries_all_look_different() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..40 {
            assert!(seen.insert(style(i)), "series {i} repeats {:?}", style(i));
            assert!(seen.insert(secondary(i)), "secondary of {i} repeats {:?}", secondary(i));
        }
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
        assert_eq!(labels, ["100 µs", "1 ms", "10 ms", "100 ms"]);
        let a = Axis::log_us(1500.0, 9000.0, "latency");
        let labels: Vec<&str> = a.ticks.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(labels, ["1 ms", "2 ms", "5 ms", "10 ms"]);
    }
}
