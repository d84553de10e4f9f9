//! A latency-against-offered-rate page (`counterlab capacity`'s capacity.html): one chart,
//! every design's p50 (dotted) and p99 (solid) per probed rate on a log latency axis,
//! the SLO's p99 as a line across, and a short preamble; self-contained like report.html.

use std::fmt::Write as _;

use super::svg::{Axis, Chart, Line, Style, clean, esc, log_y, secondary, style};
use super::{CSS, SELF_CHECK};

/// One design's probes: (offered rate ops/s, p50 µs, p99 µs), in any order.
#[derive(Clone, Debug, Default)]
pub struct CurveSeries {
    pub label: String,
    pub points: Vec<(f64, f64, f64)>,
}

/// The page: `title`, the `preamble` lines, then the chart of every series against
/// offered rate with the SLO's p99 (`slo_p99_us`) drawn across.
pub fn render_curve_html(title: &str, preamble: &[String], series: &[CurveSeries], slo_p99_us: f64) -> String {
    let mut out = String::new();
    let w = &mut out;
    writeln!(w, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">").unwrap();
    writeln!(w, "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">").unwrap();
    writeln!(w, "<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>", esc(title)).unwrap();
    writeln!(w, "<h1>{}</h1>", esc(title)).unwrap();
    for p in preamble {
        writeln!(w, "<p>{}</p>", esc(p)).unwrap();
    }
    curve_chart(series, slo_p99_us).render(w);
    writeln!(w, "{SELF_CHECK}\n</body>\n</html>").unwrap();
    out
}

/// The chart: x the offered rate, y latency (log), p99 solid and p50 dotted per design.
fn curve_chart(series: &[CurveSeries], slo_p99_us: f64) -> Chart {
    let mut sorted: Vec<Vec<(f64, f64, f64)>> = series.iter().map(|s| s.points.clone()).collect();
    sorted.iter_mut().for_each(|p| p.sort_by(|a, b| a.0.total_cmp(&b.0)));
    let all = sorted.iter().flatten();
    let (x_hi, lo, hi) =
        all.fold((0.0f64, slo_p99_us, slo_p99_us), |(x, lo, hi), p| (x.max(p.0), lo.min(p.1.max(1.0)), hi.max(p.2)));
    let mut lines = Vec::new();
    for (i, (s, pts)) in series.iter().zip(&sorted).enumerate() {
        let at = |f: fn(&(f64, f64, f64)) -> f64| pts.iter().map(|p| (clean(p.0), log_y(f(p)))).collect();
        lines.push(Line { label: format!("{} p99", s.label), style: style(i), points: at(|p| p.2) });
        lines.push(Line { label: format!("{} p50", s.label), style: secondary(i), points: at(|p| p.1) });
    }
    let slo = Style { color: "#b91c1c", dash: "6 4" };
    lines.push(Line {
        label: "SLO p99".into(),
        style: slo,
        points: vec![(0.0, log_y(slo_p99_us)), (x_hi, log_y(slo_p99_us))],
    });
    Chart {
        id: "capacity-curve".into(),
        title: "Latency against offered rate, every probe (p99 solid, p50 dotted)".into(),
        x: Axis::linear(0.0, x_hi.max(1.0), "offered rate (ops/s)"),
        y: Axis::log_us(lo, hi, "latency (log scale), from the intended start"),
        lines,
        bands: Vec::new(),
        markers: Vec::new(),
        empty_note: "no probe",
    }
}
