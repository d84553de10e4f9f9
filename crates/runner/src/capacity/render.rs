//! The capacity search in words: a line per probe as it runs, then per design its knee,
//! verification and curve shape with every probe in a table, as terminal text or
//! Markdown (capacity.md).

use std::fmt::Write as _;

use super::search::{Probe, fmt_rate};
use super::{Capacity, Design};

/// `conditional-update on postgres at read-committed`.
fn name(d: &Design) -> String {
    let primary = d.read_from == counterlab_core::ReadFrom::Primary.name();
    let reads = if primary { String::new() } else { format!(", reads from {}", d.read_from) };
    format!("{} on {} at {}{reads}", d.strategy, d.backend, d.isolation)
}

/// One probe as it ends: `<design>: 400 ops/s (ramp): held; achieved 399, p99 3.1 ms, dropped 0.00%`.
pub(super) fn probe_line(d: &Design, p: &Probe) -> String {
    let result = match p.held {
        true => "held".to_string(),
        false => format!("FAILED ({})", p.failed_because.join("; ")),
    };
    let result = match p.runs.len() {
        1 => result,
        n => format!("{result} [{} of {n} runs held; p99 {}]", p.runs_held, spread(p)),
    };
    let load = p.load_1m.map_or(String::new(), |l| format!(", load {l:.2}"));
    format!(
        "{}: {} ops/s ({}): {result}; achieved {}, p99 {:.1} ms, dropped {:.2}%{load}",
        name(d),
        fmt_rate(p.rate_ops_per_s),
        p.phase.name(),
        fmt_rate(p.measured.achieved_ops_per_s),
        p.measured.p99_ms,
        p.dropped_pct,
    )
}

/// The design's result in one sentence.
pub(super) fn headline(d: &Design) -> String {
    if let Some(why) = &d.skipped {
        return format!("{}: skipped: {why}", name(d));
    }
    let Some(knee) = d.knee_ops_per_s else {
        let why = d.stopped_early.as_deref().unwrap_or("no probe ran");
        return format!("{}: no knee: no rate held the SLO ({why})", name(d));
    };
    let mut s = format!("{}: knee {} ops/s", name(d), fmt_rate(knee));
    if let Some(v) = &d.verification {
        let said = |held: Option<bool>| match held {
            Some(true) => "held",
            Some(false) => "failed",
            None => "not run",
        };
        let verdict = if v.held { "verification held" } else { "VERIFICATION FAILED" };
        let _ = write!(
            s,
            "; {verdict} (0.8x = {} ops/s {}, 1.25x = {} ops/s {})",
            fmt_rate(v.below_ops_per_s),
            said(v.below_held),
            fmt_rate(v.above_ops_per_s),
            said(v.above_held)
        );
    }
    if let Some(why) = &d.stopped_early {
        let _ = write!(s, "; the search stopped early: {why}");
    }
    s
}

/// Whether the curve was monotone, and where not with the likely reason.
fn shape(d: &Design) -> Vec<String> {
    if d.monotone {
        return vec!["curve monotone: no rate held above one that failed".into()];
    }
    d.inversions
        .iter()
        .map(|i| {
            format!(
                "NOT MONOTONE: held at {} ops/s after failing at {} ops/s; likely {}",
                fmt_rate(i.held_at_ops_per_s),
                fmt_rate(i.failed_at_ops_per_s),
                i.likely_reason
            )
        })
        .collect()
}

/// `12.0-48.1 ms`: the p99 over a probe's runs.
fn spread(p: &Probe) -> String {
    let (lo, hi) = p.p99_spread_ms();
    format!("{lo:.1}-{hi:.1} ms")
}

const HEAD: [&str; 8] = ["rate ops/s", "phase", "achieved", "p99 ms", "dropped", "load", "result", "why"];

/// A probe's cells under `HEAD`.
fn cells(p: &Probe) -> [String; 8] {
    [
        fmt_rate(p.rate_ops_per_s),
        p.phase.name().to_string(),
        fmt_rate(p.measured.achieved_ops_per_s),
        match p.runs.len() {
            1 => format!("{:.1}", p.measured.p99_ms),
            _ => format!("{:.1} ({})", p.measured.p99_ms, spread(p)),
        },
        format!("{:.2}%", p.dropped_pct),
        p.load_1m.map_or("-".into(), |l| format!("{l:.2}")),
        match (p.held, p.runs.len()) {
            (true, 1) => "held".to_string(),
            (false, 1) => "FAILED".to_string(),
            (true, n) => format!("held {}/{n}", p.runs_held),
            (false, n) => format!("FAILED ({}/{n} held)", p.runs_held),
        },
        p.failed_because.join("; "),
    ]
}

/// The line above the designs: scenario, SLO, probe shape, load average.
fn preamble(c: &Capacity) -> Vec<String> {
    let (slo, cfg, l) = (&c.config.slo, &c.config, &c.load);
    let load = |v: Option<f64>| v.map_or("unknown".to_string(), |v| format!("{v:.2}"));
    let mut out = vec![
        format!(
            "capacity of {}: SLO p99 <= {} ms and dropped <= {}% (and the verdict not failing)",
            c.scenario, slo.p99_ms, slo.max_dropped_pct
        ),
        format!(
            "probes: {} s warm-up + {} s measured, open loop ({} arrivals, at most {} in flight, max wait {} ms), \
             {} users x {} notifications, each on a fresh namespace{}",
            cfg.warmup_s,
            cfg.probe_s,
            l.arrival,
            l.workers,
            l.max_wait_ms,
            l.users,
            l.notifications_per_user,
            match cfg.repeats {
                0 | 1 => String::new(),
                n => format!(
                    "; {n} runs per rate, held when more than half held (p99: the median run's, then the spread)"
                ),
            }
        ),
        format!(
            "search: from {} ops/s x{} to {}% resolution, at most {} probes and {} s per design, then 0.8x and 1.25x",
            fmt_rate(cfg.search.start_rate),
            cfg.search.factor,
            cfg.search.resolution * 100.0,
            cfg.search.max_probes,
            cfg.max_time_s
        ),
        format!("load average (1 min): {} before, {} after", load(c.load_1m_before), load(c.load_1m_after)),
    ];
    if c.faults_left_out > 0 {
        out.push(format!("the scenario's {} fault(s) are left out of the probes", c.faults_left_out));
    }
    out
}

/// One sentence per backend x level: the designs by knee, highest first, and which
/// knees verified (`holds p99 <= 100 ms with no drops up to 2600 ops/s (...)`).
pub fn summary(c: &Capacity) -> Vec<String> {
    let slo = &c.config.slo;
    let drops = match slo.max_dropped_pct {
        0.0 => "no drops".to_string(),
        p => format!("at most {p}% dropped"),
    };
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for d in c.designs.iter().filter(|d| d.skipped.is_none()) {
        if !groups.contains(&(d.backend.as_str(), d.isolation.as_str())) {
            groups.push((&d.backend, &d.isolation));
        }
    }
    let mut out = Vec::new();
    for (backend, level) in groups {
        let mut ds: Vec<&Design> = c
            .designs
            .iter()
            .filter(|d| d.skipped.is_none() && (d.backend.as_str(), d.isolation.as_str()) == (backend, level))
            .collect();
        ds.sort_by(|a, b| b.knee_ops_per_s.unwrap_or(0.0).total_cmp(&a.knee_ops_per_s.unwrap_or(0.0)));
        let knee = |d: &Design| d.knee_ops_per_s.map_or("no rate".to_string(), |k| format!("{} ops/s", fmt_rate(k)));
        let rest: Vec<String> = ds[1..].iter().map(|d| format!("{} {}", d.strategy, knee(d))).collect();
        let rest = if rest.is_empty() { String::new() } else { format!(" ({})", rest.join(", ")) };
        let unverified: Vec<&str> = ds.iter().filter(|d| !d.held()).map(|d| d.strategy.as_str()).collect();
        let verified = match unverified.len() {
            0 => "every knee verified (0.8x held, 1.25x failed)".to_string(),
            _ => format!("NOT verified: {}", unverified.join(", ")),
        };
        out.push(format!(
            "On {backend} at {level}, {} holds p99 <= {} ms with {drops} up to {}{rest}; {verified}.",
            ds[0].strategy,
            slo.p99_ms,
            knee(ds[0])
        ));
    }
    out
}

/// The terminal text: the preamble, the summary, then per design its headline, shape
/// and probes.
pub fn terminal(c: &Capacity) -> String {
    let mut out = preamble(c).join("\n") + "\n";
    summary(c).iter().for_each(|l| {
        let _ = writeln!(out, "\n{l}");
    });
    for d in &c.designs {
        let _ = writeln!(out, "\n{}", headline(d));
        if d.skipped.is_some() {
            continue;
        }
        shape(d).iter().for_each(|l| {
            let _ = writeln!(out, "  {l}");
        });
        let rows: Vec<[String; 8]> = d.probes.iter().map(cells).collect();
        let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).chain([HEAD[i].len()]).max().unwrap_or(0);
        let widths: Vec<usize> = (0..8).map(width).collect();
        let line = |r: &[String]| {
            let padded: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            format!("  {}", padded.join("  ").trim_end())
        };
        let _ = writeln!(out, "{}", line(&HEAD.map(String::from)));
        rows.iter().for_each(|r| {
            let _ = writeln!(out, "{}", line(r));
        });
    }
    if c.interrupted {
        out.push_str("\ninterrupted: the designs above are those that finished\n");
    }
    out
}

/// capacity.md: the same as Markdown.
pub fn markdown(c: &Capacity) -> String {
    let mut out = format!("# Capacity: {}\n\n", c.scenario);
    preamble(c).iter().for_each(|l| {
        let _ = writeln!(out, "- {l}");
    });
    summary(c).iter().for_each(|l| {
        let _ = writeln!(out, "\n{l}");
    });
    for d in &c.designs {
        let _ = writeln!(out, "\n## {}\n\n{}\n", name(d), headline(d));
        if d.skipped.is_some() {
            continue;
        }
        shape(d).iter().for_each(|l| {
            let _ = writeln!(out, "{l}\n");
        });
        let _ = writeln!(out, "| {} |\n|{}", HEAD.join(" | "), " --- |".repeat(HEAD.len()));
        d.probes.iter().for_each(|p| {
            let _ = writeln!(out, "| {} |", cells(p).join(" | "));
        });
    }
    if c.interrupted {
        out.push_str("\nInterrupted: the designs above are those that finished.\n");
    }
    out
}

/// capacity.html: the preamble and summary, then one chart of every design's p50 and p99
/// against the offered rate of each of its probes (verification included), the SLO's
/// p99 drawn across (`counterlab_report::render_curve_html`).
pub fn html(c: &Capacity) -> String {
    let mut lines = preamble(c);
    lines.extend(summary(c));
    let series: Vec<counterlab_report::CurveSeries> = c
        .designs
        .iter()
        .filter(|d| d.skipped.is_none())
        .map(|d| counterlab_report::CurveSeries {
            label: name(d),
            points: d
                .probes
                .iter()
                .map(|p| (p.rate_ops_per_s, p.measured.p50_ms * 1e3, p.measured.p99_ms * 1e3))
                .collect(),
        })
        .collect();
    let title = format!("Capacity: {}", c.scenario);
    counterlab_report::render_curve_html(&title, &lines, &series, c.config.slo.p99_ms * 1e3)
}
