//! A stalled load, found in what a run recorded: whole sampling intervals with no
//! completed op inside the measured load, or a measured stage that ran more than 20%
//! (and 1 s) past its planned duration. The decision and the row name it.

use serde::{Deserialize, Serialize};

use crate::{SeriesPoint, StageReport};

/// Shortest window with no completed op that is a stall. A stall is a whole sampling
/// interval (about 1 s) with no completion; the sampler may close one a little early.
pub const STALL_S: f64 = 0.9;

/// A stage overran when it ran more than this fraction past its plan...
pub const OVERRUN_FRACTION: f64 = 0.2;
/// ...and at least this many seconds past it.
pub const OVERRUN_S: f64 = 1.0;

/// A measured stage that ran past its plan.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Overrun {
    pub stage: String,
    pub planned_s: f64,
    pub ran_s: f64,
}

/// How a row's load stalled (report.json's `stall` on the row).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stall {
    /// The longest run of sampling intervals with no completed op, in seconds from the
    /// load's start: `[from, to]`.
    pub idle: Option<[f64; 2]>,
    /// The measured stage that ran furthest past its plan.
    pub overrun: Option<Overrun>,
    /// `--repeat`: the repeat it happened in (1-based).
    pub repeat: Option<u32>,
}

impl Stall {
    /// `no op completed for 2.5 s (1.0-3.5 s)`, `stage main ran 7.2 s of 5.0 s
    /// planned`, or both; `in repeat 2` added for a repeat.
    pub fn words(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some([from, to]) = self.idle {
            parts.push(format!("no op completed for {:.1} s ({from:.1}-{to:.1} s)", to - from));
        }
        if let Some(o) = &self.overrun {
            parts.push(format!("stage {} ran {:.1} s of {:.1} s planned", o.stage, o.ran_s, o.planned_s));
        }
        let mut w = parts.join("; ");
        if let Some(n) = self.repeat {
            w.push_str(&format!(" in repeat {n}"));
        }
        w
    }

    /// How long the load stood still or ran over, to keep the worst of several repeats.
    pub fn seconds(&self) -> f64 {
        let idle = self.idle.map_or(0.0, |[from, to]| to - from);
        let over = self.overrun.as_ref().map_or(0.0, |o| o.ran_s - o.planned_s);
        idle.max(over)
    }
}

/// The stall of one run, if it stalled: from its series and its stages.
pub fn detect(series: &[SeriesPoint], stages: &[StageReport]) -> Option<Stall> {
    let (idle, overrun) = (idle_window(series, stages), overrun(stages));
    (idle.is_some() || overrun.is_some()).then_some(Stall { idle, overrun, repeat: None })
}

/// The longest run of consecutive measured intervals that completed no op (an open
/// loop's interval counts only when its schedule called for ops), if it is a stall.
fn idle_window(series: &[SeriesPoint], stages: &[StageReport]) -> Option<[f64; 2]> {
    let idle = |p: &SeriesPoint| {
        let stage = stages.iter().find(|s| s.measured && s.name == p.phase);
        stage.is_some_and(|s| p.ops == 0 && (s.model != "open" || p.scheduled > 0))
    };
    let mut best: Option<[f64; 2]> = None;
    let mut open: Option<[f64; 2]> = None;
    for p in series {
        if !idle(p) {
            open = None;
            continue;
        }
        let w = match open {
            Some([from, _]) => [from, p.t_s],
            None => [p.t_s - p.dt_s, p.t_s],
        };
        open = Some(w);
        if best.is_none_or(|[f, t]| w[1] - w[0] > t - f) {
            best = Some(w);
        }
    }
    best.filter(|[f, t]| t - f >= STALL_S)
}

/// The measured stage that ran furthest past its plan, if any ran more than
/// `OVERRUN_FRACTION` and `OVERRUN_S` past it.
fn overrun(stages: &[StageReport]) -> Option<Overrun> {
    stages
        .iter()
        .filter(|s| s.measured)
        .filter_map(|s| {
            let planned = s.planned_s?;
            let over = s.duration_s - planned;
            (over > planned * OVERRUN_FRACTION && over >= OVERRUN_S).then(|| Overrun {
                stage: s.name.clone(),
                planned_s: planned,
                ran_s: s.duration_s,
            })
        })
        .max_by(|a, b| (a.ran_s - a.planned_s).total_cmp(&(b.ran_s - b.planned_s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(name: &str, model: &str, planned: Option<f64>, ran: f64) -> StageReport {
        StageReport {
            name: name.into(),
            measured: name != "warmup",
            model: model.into(),
            workers: 8,
            rate_from: None,
            rate_to: None,
            arrival: None,
            duration_s: ran,
            planned_s: planned,
            scheduled: 0,
            ops: 0,
            dropped: 0,
            achieved_ops_per_s: 0.0,
            p50_us: 0,
            p99_us: 0,
        }
    }

    fn point(t_s: f64, dt_s: f64, phase: &str, ops: u64, scheduled: u64) -> SeriesPoint {
        SeriesPoint {
            t_s,
            dt_s,
            phase: phase.into(),
            ops,
            errors: 0,
            ops_per_s: ops as f64 / dt_s,
            scheduled,
            dropped: 0,
            p50_us: 0,
            p99_us: 0,
            max_us: 0,
            pending: None,
            drift: None,
        }
    }

    #[test]
    fn whole_intervals_without_a_completion_are_a_stall_and_the_longest_is_named() {
        let stages = [stage("warmup", "closed", Some(1.0), 1.0), stage("load", "closed", Some(5.0), 5.1)];
        let ops = [900, 0, 500, 0, 0, 700, 800];
        let mut series: Vec<SeriesPoint> =
            ops.iter().enumerate().map(|(i, n)| point(1.0 + i as f64, 1.0, "load", *n, 0)).collect();
        // Idle warm-up and settle are not the measured load.
        series.insert(0, point(1.0, 1.0, "warmup", 0, 0));
        series.push(point(8.5, 0.5, "settle", 0, 0));
        let s = detect(&series, &stages).expect("a stall");
        assert_eq!(s.idle, Some([3.0, 5.0]));
        assert_eq!(s.overrun, None);
        assert_eq!(s.words(), "no op completed for 2.0 s (3.0-5.0 s)");
        // A short empty interval (the sampler closed it at a phase change) is not one.
        let short = [point(1.0, 1.0, "load", 10, 0), point(1.5, 0.5, "load", 0, 0), point(2.5, 1.0, "load", 9, 0)];
        assert_eq!(detect(&short, &stages), None);
        assert!(
            detect(&[point(1.0, 0.95, "load", 0, 0)], &stages).is_some(),
            "0.95 s is a whole interval closed early"
        );
    }

    #[test]
    fn an_open_loop_interval_with_nothing_scheduled_is_not_a_stall() {
        let stages = [stage("slow", "open", Some(5.0), 5.0)];
        assert_eq!(detect(&[point(2.0, 1.0, "slow", 0, 0)], &stages), None);
        assert!(detect(&[point(2.0, 1.0, "slow", 0, 3)], &stages).is_some());
    }

    #[test]
    fn a_stage_past_its_plan_by_20_percent_and_1_s_is_a_stall() {
        let over = |planned: f64, ran: f64| overrun(&[stage("load", "closed", Some(planned), ran)]);
        let o = over(5.0, 7.2).expect("7.2 s of 5 s");
        assert_eq!(
            Stall { overrun: Some(o), repeat: Some(2), ..Default::default() }.words(),
            "stage load ran 7.2 s of 5.0 s planned in repeat 2"
        );
        assert_eq!(over(5.0, 5.9), None, "under 1 s over");
        assert_eq!(over(10.0, 11.5), None, "under 20% over");
        assert_eq!(overrun(&[stage("load", "closed", None, 60.0)]), None, "an op budget has no planned length");
        assert_eq!(overrun(&[stage("warmup", "closed", Some(1.0), 5.0)]), None, "warm-up is not measured");
    }
}
