//! What a run shows while it runs: on a terminal a live line (indicatif) that fits the
//! terminal's width; elsewhere (CI logs, pipes) a plain line every `--progress-interval`
//! seconds and at each phase of each cell; nothing with `--quiet`; each phase with `--verbose`.

use std::io::{IsTerminal, Write as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use counterlab::run::{Progress, Status};

/// How the run's output is shown (the flags).
#[derive(clap::Args, Clone)]
pub struct OutputArgs {
    /// Print only the decision, the verdict table, what went wrong and the report's path
    /// (no progress, no log).
    #[arg(long, short = 'q', conflicts_with = "verbose")]
    pub quiet: bool,
    /// Also log each phase of each strategy run (seed, load, settle, check, teardown)
    /// and print the per-op latency table.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Print the run's summary as JSON on stdout (and nothing else there: the table,
    /// progress and log go to stderr).
    #[arg(long)]
    pub json: bool,
    /// Off a terminal (CI logs, pipes): seconds between plain progress lines.
    #[arg(long, value_name = "S", default_value_t = 5.0, value_parser = positive_seconds)]
    pub progress_interval: f64,
}

impl OutputArgs {
    /// How much of the report the terminal shows under these flags.
    pub fn detail(&self) -> counterlab_report::Detail {
        match (self.quiet, self.verbose) {
            (true, _) => counterlab_report::Detail::Quiet,
            (false, true) => counterlab_report::Detail::Verbose,
            (false, false) => counterlab_report::Detail::Normal,
        }
    }
}

fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!("expected seconds in (0, 86400], got `{s}`")),
    }
}

/// Where the progress goes.
enum Sink {
    Live(indicatif::ProgressBar),
    /// The last line's time, cell and phase.
    Plain {
        every: Duration,
        last: Mutex<Option<(Instant, usize, String)>>,
    },
    Silent,
}

/// The run's progress display and log.
pub struct Ui {
    sink: Sink,
    verbose: bool,
    quiet: bool,
    /// The last phase logged per cell (for `--verbose`).
    last_phase: Mutex<(usize, String)>,
}

impl Ui {
    pub fn new(args: &OutputArgs) -> Arc<Ui> {
        let sink = match (args.quiet, std::io::stderr().is_terminal()) {
            (true, _) => Sink::Silent,
            (false, true) => {
                let bar = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
                bar.set_style(indicatif::ProgressStyle::with_template("{msg}").expect("a valid template"));
                Sink::Live(bar)
            }
            (false, false) => {
                Sink::Plain { every: Duration::from_secs_f64(args.progress_interval), last: Mutex::new(None) }
            }
        };
        Arc::new(Ui { sink, verbose: args.verbose, quiet: args.quiet, last_phase: Mutex::new((0, String::new())) })
    }

    /// A line of the run's log (above the live line on a terminal); none with --quiet.
    pub fn log(&self, line: &str) {
        if self.quiet {
            return;
        }
        match &self.sink {
            Sink::Live(bar) => bar.suspend(|| writeln!(std::io::stderr(), "{line}").ok()),
            _ => writeln!(std::io::stderr(), "{line}").ok(),
        };
    }

    /// The status sink the runner calls (None with --quiet).
    pub fn progress(self: &Arc<Ui>) -> Option<Progress> {
        if matches!(self.sink, Sink::Silent) {
            return None;
        }
        let ui = self.clone();
        Some(Arc::new(move |s: &Status| ui.show(s)))
    }

    fn show(&self, s: &Status) {
        if self.verbose {
            let mut last = self.last_phase.lock().expect("phase lock");
            if (last.0, last.1.as_str()) != (s.cell, s.phase.as_str()) {
                *last = (s.cell, s.phase.clone());
                drop(last);
                self.log(&phase_line(s));
            }
        }
        match &self.sink {
            Sink::Live(bar) => {
                let width = console::Term::stderr().size_checked().map_or(80, |(_, w)| usize::from(w));
                bar.set_message(fit(s, width.saturating_sub(1).max(20)));
            }
            Sink::Plain { every, last } => {
                let mut last = last.lock().expect("progress lock");
                // A line at each new cell and phase, and every `every` in between.
                let due = match &*last {
                    None => true,
                    Some((at, cell, phase)) => *cell != s.cell || *phase != s.phase || at.elapsed() >= *every,
                };
                if due {
                    *last = Some((Instant::now(), s.cell, s.phase.clone()));
                    drop(last);
                    writeln!(std::io::stderr(), "{}", fit(s, usize::MAX)).ok();
                }
            }
            Sink::Silent => {}
        }
    }

    /// Clears the live line (before the final table).
    pub fn finish(&self) {
        if let Sink::Live(bar) = &self.sink {
            bar.finish_and_clear();
        }
    }
}

/// `[2/6] conditional-update on postgres at read-committed: settle (10.0 s of load, 12345 ops, 0 errors)`
fn phase_line(s: &Status) -> String {
    format!(
        "[{}/{}] {} on {} at {}: {} ({:.1} s of load, {} ops, {} errors)",
        s.cell, s.cells, s.strategy, s.backend, s.isolation, s.phase, s.elapsed_s, s.ops, s.errors
    )
}

/// `12s/30s ETA 18s`, `12s` (no planned length), or `1200/5000 ops` for a counted load.
fn elapsed(s: &Status) -> String {
    let secs = |v: f64| format!("{:.0}s", v.max(0.0));
    match (s.planned_s, s.planned_ops) {
        (Some(total), _) => {
            format!("{}/{} ETA {}", secs(s.elapsed_s), secs(total), secs(total - s.elapsed_s))
        }
        (None, Some(ops)) => format!("{}/{ops} ops", s.ops),
        _ => secs(s.elapsed_s),
    }
}

/// The status as one line of at most `width` characters: `[i/N] phase time ops/s
/// errors drift p99 label`, dropping the least useful parts first and then shortening
/// the strategy's label.
pub fn fit(s: &Status, width: usize) -> String {
    let head = format!("[{}/{}]", s.cell, s.cells);
    let mut parts = vec![s.phase.clone()];
    let loading = !matches!(s.phase.as_str(), "seed" | "settle" | "check" | "teardown");
    if let Some(x) = &s.sample {
        match loading {
            true => parts.extend([elapsed(s), format!("{:.0} ops/s", x.ops_per_s())]),
            false => parts.extend([format!("{:.0}s", s.elapsed_s), format!("{} ops", s.ops)]),
        }
        parts.push(format!("{} err", s.errors));
        if let Some(d) = x.drift {
            parts.push(format!("drift {d}"));
        }
        parts.push(format!("p99 {}", human_us(x.p99_us)));
    }
    let label = format!("{} {}@{}", s.strategy, s.backend, s.isolation);
    let len = |parts: &[String]| head.len() + parts.iter().map(|p| p.chars().count() + 3).sum::<usize>();
    // p99, then the elapsed time are dropped before the label shrinks under 12 chars.
    while parts.len() > 2 && len(&parts) + 12 > width {
        let drop = if parts.last().is_some_and(|p| p.starts_with("p99")) { parts.len() - 1 } else { 1 };
        parts.remove(drop);
    }
    let room = width.saturating_sub(len(&parts) + 1);
    let label: String = match label.chars().count() <= room {
        true => label,
        false => label.chars().take(room.saturating_sub(1)).chain(std::iter::once('…')).collect(),
    };
    let line = format!("{head} {label} | {}", parts.join(" | "));
    line.chars().take(width).collect()
}

/// `850us`, `12.3ms`, `1.20s`
fn human_us(us: u64) -> String {
    match us {
        0..1_000 => format!("{us}us"),
        1_000..1_000_000 => format!("{:.1}ms", us as f64 / 1e3),
        _ => format!("{:.2}s", us as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(drift: Option<i64>) -> Status {
        let sample = counterlab_sim_sample(drift);
        Status {
            cell: 2,
            cells: 12,
            strategy: "zset-buffer-durable-with-a-long-name".into(),
            backend: "postgres+redis".into(),
            isolation: "repeatable-read".into(),
            phase: "load".into(),
            elapsed_s: 12.4,
            planned_s: Some(30.0),
            planned_ops: None,
            ops: 123_456,
            errors: 3,
            ops_by_kind: vec![],
            sample: Some(sample),
        }
    }

    fn counterlab_sim_sample(drift: Option<i64>) -> counterlab_sim::Sample {
        counterlab_sim::Sample {
            t_s: 12.4,
            dt_s: 1.0,
            phase: "load".into(),
            ops: 10_234,
            errors: 0,
            scheduled: 0,
            dropped: 0,
            p50_us: 400,
            p99_us: 12_345,
            p999_us: 20_000,
            max_us: 30_000,
            ops_by_kind: vec![],
            pending: None,
            drift,
        }
    }

    #[test]
    fn the_line_fits_every_width_and_keeps_the_essentials() {
        for width in [20, 40, 60, 79, 80, 120, 200] {
            for drift in [None, Some(-17)] {
                let line = fit(&status(drift), width);
                assert!(line.chars().count() <= width, "{width}: {line}");
                assert!(line.starts_with("[2/12] "), "{line}");
                if width >= 60 {
                    assert!(
                        line.contains("| load |") && line.contains("10234 ops/s") && line.contains("3 err"),
                        "{line}"
                    );
                }
                if width >= 79 {
                    assert!(line.contains("12s/30s ETA 18s"), "{line}");
                    assert_eq!(line.contains("drift -17"), drift.is_some(), "{line}");
                }
            }
        }
        let wide = fit(&status(Some(1)), 200);
        assert!(wide.contains("zset-buffer-durable-with-a-long-name postgres+redis@repeatable-read"), "{wide}");
        assert!(wide.ends_with("| p99 12.3ms"), "{wide}");
    }
}
