//! The concrete charts of the HTML page, built from a report with the kit in `svg`:
//! throughput and p99 latency over time, percentile curves per strategy report, and
//! drift/pending over time, the time charts with fault periods shaded and phases marked.

use super::svg::{Axis, Band, Chart, Line, Marker, clean, hdr_x, log_y, secondary, style};
use crate::{Report, StrategyReport};

/// The strategy report's name on charts: `strategy backend isolation`.
fn series_label(s: &StrategyReport) -> String {
    format!("{} {} {}", s.strategy, s.backend, s.isolation)
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
                title: format!("fault {} ({}): fired at {t} ms, {d}: {}", f.kind, s.label(), f.outcome),
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

pub(super) fn throughput_chart(r: &Report) -> Chart {
    let x = time_axis(r);
    let mut lines = Vec::new();
    for (i, s) in r.strategies.iter().enumerate() {
        lines.push(Line {
            label: series_label(s),
            style: style(i),
            points: s.series.iter().map(|p| (clean(p.t_s), clean(p.ops_per_s))).collect(),
        });
    }
    for (i, s) in r.strategies.iter().enumerate() {
        if s.series.iter().any(|p| p.scheduled > 0) {
            lines.push(Line {
                label: format!("target: {}", series_label(s)),
                style: secondary(i),
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
        title: "Throughput over time (dotted: open-loop target)".into(),
        y: Axis::linear(0.0, hi, "ops/s"),
        bands: fault_bands(r, &x),
        markers: phase_markers(r, &x),
        x,
        lines,
        empty_note: "no data",
    }
}

pub(super) fn p99_chart(r: &Report) -> Chart {
    let x = time_axis(r);
    let lines: Vec<Line> = r
        .strategies
        .iter()
        .enumerate()
        .map(|(i, s)| Line {
            label: series_label(s),
            style: style(i),
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

pub(super) fn percentile_chart(i: usize, s: &StrategyReport) -> Chart {
    let mut lines = Vec::new();
    let (mut lo, mut hi) = (f64::MAX, 0.0f64);
    for (k, (op, o)) in s.ops.iter().filter(|(_, o)| o.count > 0).enumerate() {
        for (curve, line_style, what) in
            [(&o.latency_us.curve, style(k), ""), (&o.uncorrected_latency_us.curve, secondary(k), " (uncorrected)")]
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
            lines.push(Line { label: format!("{op}{what}"), style: line_style, points });
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

pub(super) fn drift_chart(r: &Report) -> Chart {
    let x = time_axis(r);
    let mut lines = Vec::new();
    for (i, s) in r.strategies.iter().enumerate() {
        let pick = |f: fn(&crate::SeriesPoint) -> Option<i64>| -> Vec<(f64, f64)> {
            s.series.iter().filter_map(|p| f(p).map(|v| (clean(p.t_s), v as f64))).collect()
        };
        let drift = pick(|p| p.drift);
        if !drift.is_empty() {
            lines.push(Line { label: format!("drift: {}", series_label(s)), style: style(i), points: drift });
        }
        let pending = pick(|p| p.pending);
        if !pending.is_empty() {
            lines.push(Line { label: format!("pending: {}", series_label(s)), style: secondary(i), points: pending });
        }
    }
    let (lo, hi) =
        lines.iter().flat_map(|l| &l.points).fold((0.0f64, 0.0f64), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
    Chart {
        id: "drift-pending".into(),
        title: "Drift (SUM(counters) - unread rows) and pending (dotted) over time".into(),
        y: Axis::linear(lo, hi, "count"),
        bands: fault_bands(r, &x),
        markers: phase_markers(r, &x),
        x,
        lines,
        empty_note: "not sampled",
    }
}

#[cfg(test)]
mod tests {
    use super::super::render_html;
    use super::super::svg::{LEFT, RIGHT, W};
    use super::super::tests::{assert_finite, polylines, report, svg, two_strategies};

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
        assert!(throughput.contains("stroke-dasharray=\"1 3\"") && throughput.contains("target: conditional-update"));
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

    /// The (stroke, dash) pair of every series in a chart.
    fn styles(chart: &str) -> Vec<(String, String)> {
        let attr = |tag: &str, name: &str| {
            tag.split(&format!(" {name}=\"")).nth(1).map_or(String::new(), |v| v[..v.find('"').unwrap()].to_string())
        };
        chart
            .split("<polyline class=\"series\"")
            .skip(1)
            .map(|t| {
                let tag = &t[..t.find('>').unwrap()];
                (attr(tag, "stroke"), attr(tag, "stroke-dasharray"))
            })
            .collect()
    }

    #[test]
    fn every_series_of_a_27_row_matrix_is_drawn_differently() {
        let base = two_strategies().strategies[0].clone();
        let rows = (0..27)
            .map(|i| {
                let mut s = base.clone();
                s.strategy = format!("s{i}");
                s
            })
            .collect();
        let html = render_html(&report(rows));
        for id in ["throughput", "latency-p99", "drift-pending"] {
            let seen = styles(svg(&html, id));
            assert!(seen.len() >= 27, "{id}: {} series", seen.len());
            let distinct: std::collections::HashSet<_> = seen.iter().collect();
            assert_eq!(distinct.len(), seen.len(), "{id}: two series share a color and dash: {seen:?}");
        }
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
}
