//! The capacity search as a pure state machine (no I/O, no clock): a geometric ramp
//! brackets the knee, bisection narrows the bracket to a resolution, then the
//! verification probes at 0.8x and 1.25x the knee; the SLO's judgement of one probe and
//! the places where the curve is not monotone. `mod.rs` runs each probe on the servers.

use serde::Serialize;

/// The verification probes' rates, as fractions of the knee.
pub const VERIFY_BELOW: f64 = 0.8;
pub const VERIFY_ABOVE: f64 = 1.25;

/// The service-level objective a probe holds or fails.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Slo {
    /// The measured stage's p99 latency (all ops, from each op's intended start) at most this.
    pub p99_ms: f64,
    /// Scheduled ops dropped (no worker could start them within `max_wait_ms`) at most
    /// this share of the scheduled ones, in percent.
    pub max_dropped_pct: f64,
}

/// How the search moves: where it starts, how it ramps, when it stops.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SearchConfig {
    /// The first probe's rate, ops/s.
    pub start_rate: f64,
    /// The ramp's step: each probe after a held one is this many times faster (> 1); after
    /// a failed first probe the ramp goes down by the same factor.
    pub factor: f64,
    /// Bisection stops when the failed rate is within this fraction above the held one.
    pub resolution: f64,
    /// The ramp does not go below this rate (no rate held: no knee) nor above `max_rate`.
    pub min_rate: f64,
    pub max_rate: f64,
    /// The most probes of the search (ramp and bisection); verification adds two.
    pub max_probes: u32,
}

/// What a probe is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    Ramp,
    Bisect,
    VerifyBelow,
    VerifyAbove,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Ramp => "ramp",
            Phase::Bisect => "bisect",
            Phase::VerifyBelow => "verify 0.8x",
            Phase::VerifyAbove => "verify 1.25x",
        }
    }
}

/// The search's next move.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    Probe { rate: f64, phase: Phase },
    Done,
}

/// The search so far: the highest rate that held, the lowest that failed, and the
/// verification's results.
#[derive(Clone, Debug)]
pub struct Search {
    cfg: SearchConfig,
    held: Option<f64>,
    failed: Option<f64>,
    probes: u32,
    /// Set when the search phase ended (bracket narrow enough, or a bound): why, if early.
    ended: Option<Option<String>>,
    below: Option<bool>,
    above: Option<bool>,
}

impl Search {
    pub fn new(cfg: SearchConfig) -> Search {
        Search { cfg, held: None, failed: None, probes: 0, ended: None, below: None, above: None }
    }

    /// The highest rate that held during the search (not the verification): the knee.
    pub fn knee(&self) -> Option<f64> {
        self.held
    }

    /// Why the search stopped before its bracket reached the resolution, if it did.
    pub fn stopped_early(&self) -> Option<&str> {
        self.ended.as_ref().and_then(|e| e.as_deref())
    }

    /// The verification's results: (0.8x held, 1.25x held), each None until run (1.25x
    /// is not run above `max_rate`).
    pub fn verification(&self) -> (Option<bool>, Option<bool>) {
        (self.below, self.above)
    }

    /// Ends the search phase now (the time bound, say); verification follows when a
    /// rate held.
    pub fn stop(&mut self, why: String) {
        if self.ended.is_none() {
            self.ended = Some(Some(why));
        }
    }

    /// The next probe, or Done.
    pub fn next_step(&mut self) -> Step {
        if self.ended.is_none() {
            match self.search_step() {
                Ok(step) => return step,
                Err(why) => self.ended = Some(why),
            }
        }
        let Some(knee) = self.held else { return Step::Done };
        match (self.below, self.above) {
            (None, _) => Step::Probe { rate: knee * VERIFY_BELOW, phase: Phase::VerifyBelow },
            (Some(_), None) if knee * VERIFY_ABOVE <= self.cfg.max_rate => {
                Step::Probe { rate: knee * VERIFY_ABOVE, phase: Phase::VerifyAbove }
            }
            _ => Step::Done,
        }
    }

    /// The next ramp or bisection probe, or why the search phase is over (None: the
    /// bracket is within the resolution).
    fn search_step(&self) -> Result<Step, Option<String>> {
        let c = &self.cfg;
        if self.probes >= c.max_probes {
            return Err(Some(format!("the probe bound ({} probes) was reached", c.max_probes)));
        }
        match (self.held, self.failed) {
            (None, None) => Ok(Step::Probe { rate: c.start_rate.clamp(c.min_rate, c.max_rate), phase: Phase::Ramp }),
            (Some(lo), None) if lo >= c.max_rate => {
                Err(Some(format!("every rate held up to the highest allowed ({} ops/s)", fmt_rate(c.max_rate))))
            }
            (Some(lo), None) => Ok(Step::Probe { rate: (lo * c.factor).min(c.max_rate), phase: Phase::Ramp }),
            (None, Some(hi)) if hi / c.factor < c.min_rate => {
                Err(Some(format!("no rate held down to the lowest allowed ({} ops/s)", fmt_rate(c.min_rate))))
            }
            (None, Some(hi)) => Ok(Step::Probe { rate: hi / c.factor, phase: Phase::Ramp }),
            (Some(lo), Some(hi)) if hi <= lo * (1.0 + c.resolution) => Err(None),
            (Some(lo), Some(hi)) => Ok(Step::Probe { rate: (lo + hi) / 2.0, phase: Phase::Bisect }),
        }
    }

    /// Records a probe's result. A search probe that held raises the bracket's floor (to
    /// the higher of the two), one that failed lowers its ceiling.
    pub fn record(&mut self, rate: f64, phase: Phase, held: bool) {
        match phase {
            Phase::Ramp | Phase::Bisect => {
                self.probes += 1;
                if held {
                    self.held = Some(self.held.map_or(rate, |h| h.max(rate)));
                } else {
                    self.failed = Some(self.failed.map_or(rate, |f| f.min(rate)));
                }
            }
            Phase::VerifyBelow => self.below = Some(held),
            Phase::VerifyAbove => self.above = Some(held),
        }
    }
}

/// What one probe measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Measured {
    /// The measured stage's achieved rate (ops issued over its planned length), ops/s.
    pub achieved_ops_per_s: f64,
    /// The measured stage's median latency (capacity.html draws it beside the p99).
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub scheduled: u64,
    pub dropped: u64,
    /// The verdict's label when it fails or is INCOMPLETE (None: not failing).
    pub verdict_failed: Option<String>,
}

impl Measured {
    pub fn dropped_pct(&self) -> f64 {
        if self.scheduled == 0 { 0.0 } else { self.dropped as f64 * 100.0 / self.scheduled as f64 }
    }
}

/// Why `m` fails the SLO, one reason each (empty: it held). A probe that scheduled
/// nothing fails (no evidence of anything).
pub fn judge(slo: &Slo, m: &Measured) -> Vec<String> {
    let mut why = Vec::new();
    if m.scheduled == 0 {
        why.push("no op was scheduled".to_string());
    }
    if m.p99_ms > slo.p99_ms {
        why.push(format!("p99 {:.1} ms > {} ms", m.p99_ms, slo.p99_ms));
    }
    if m.dropped_pct() > slo.max_dropped_pct {
        why.push(format!("dropped {:.2}% > {}%", m.dropped_pct(), slo.max_dropped_pct));
    }
    if let Some(v) = &m.verdict_failed {
        why.push(format!("verdict {v}"));
    }
    why
}

/// One probe (a rate, run `--repeats` times) as the result lists it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Probe {
    pub rate_ops_per_s: f64,
    pub phase: Phase,
    /// The figures of the run with the median p99 (the only run without repeats).
    #[serde(flatten)]
    pub measured: Measured,
    pub dropped_pct: f64,
    /// More than half of the runs held the SLO, and none had a failing verdict.
    pub held: bool,
    /// Why it failed the SLO (empty when it held); with repeats, each failing run's.
    pub failed_because: Vec<String>,
    /// The machine's 1-minute load average just before the probe (None: unreadable).
    pub load_1m: Option<f64>,
    /// Every run's figures, in the order run (one without repeats).
    pub runs: Vec<Measured>,
    /// How many of them held the SLO.
    pub runs_held: usize,
}

impl Probe {
    /// The lowest and highest p99 over the runs: the noise at this rate.
    pub fn p99_spread_ms(&self) -> (f64, f64) {
        let p99s = self.runs.iter().map(|m| m.p99_ms);
        (p99s.clone().fold(f64::INFINITY, f64::min), p99s.fold(0.0, f64::max))
    }
}

/// A rate's runs as one probe: it holds when more than half the runs held and no run's
/// verdict failed (a correctness failure is never outvoted); its figures are the median
/// p99 run's. `runs` must not be empty.
pub fn combine(slo: &Slo, rate: f64, phase: Phase, runs: Vec<Measured>, load_1m: Option<f64>) -> Probe {
    assert!(!runs.is_empty(), "a probe runs at least once");
    let judged: Vec<Vec<String>> = runs.iter().map(|m| judge(slo, m)).collect();
    let runs_held = judged.iter().filter(|w| w.is_empty()).count();
    let verdict_failed = runs.iter().any(|m| m.verdict_failed.is_some());
    let held = runs_held * 2 > runs.len() && !verdict_failed;
    let failed_because = match (held, runs.len()) {
        (true, _) => Vec::new(),
        (false, 1) => judged[0].clone(),
        (false, n) => judged
            .iter()
            .enumerate()
            .filter(|(_, w)| !w.is_empty())
            .map(|(i, w)| format!("run {} of {n}: {}", i + 1, w.join(", ")))
            .collect(),
    };
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| runs[a].p99_ms.total_cmp(&runs[b].p99_ms));
    let measured = runs[order[runs.len() / 2]].clone();
    let dropped_pct = measured.dropped_pct();
    Probe { rate_ops_per_s: rate, phase, measured, dropped_pct, held, failed_because, load_1m, runs, runs_held }
}

/// A rate that held above one that failed: where the curve is not monotone, and the
/// likely reason.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Inversion {
    pub failed_at_ops_per_s: f64,
    pub held_at_ops_per_s: f64,
    pub likely_reason: String,
}

/// Every failed probe below a rate that held, paired with the highest such held rate,
/// with its likely reason; empty when the curve was monotone.
pub fn inversions(probes: &[Probe], slo: &Slo) -> Vec<Inversion> {
    let mut out = Vec::new();
    for f in probes.iter().filter(|p| !p.held) {
        let above = probes.iter().filter(|h| h.held && h.rate_ops_per_s > f.rate_ops_per_s);
        let Some(h) = above.max_by(|a, b| a.rate_ops_per_s.total_cmp(&b.rate_ops_per_s)) else { continue };
        out.push(Inversion {
            failed_at_ops_per_s: f.rate_ops_per_s,
            held_at_ops_per_s: h.rate_ops_per_s,
            likely_reason: likely_reason(f, h, slo),
        });
    }
    out
}

/// Why `failed` failed though `held`, at a higher rate, held: a failing verdict is a
/// correctness failure (never noise); a load average higher by 1 or more at the failed
/// probe points at the machine's load; anything else is called noise, with the margin.
fn likely_reason(failed: &Probe, held: &Probe, slo: &Slo) -> String {
    if let Some(v) = failed.runs.iter().find_map(|m| m.verdict_failed.as_ref()) {
        return format!("the verdict failed at the lower rate ({v}): a correctness failure, not noise");
    }
    if let (Some(lf), Some(lh)) = (failed.load_1m, held.load_1m)
        && lf >= lh + 1.0
    {
        return format!("the machine's load: load average {lf:.2} at the failed probe, {lh:.2} at the held one");
    }
    let p99_over = (failed.measured.p99_ms / slo.p99_ms - 1.0) * 100.0;
    let load = match (failed.load_1m, held.load_1m) {
        (Some(lf), Some(lh)) => format!("; load average {lf:.2} and {lh:.2}"),
        _ => String::new(),
    };
    if p99_over > 0.0 {
        format!(
            "noise: p99 {:.1} ms was {p99_over:.0}% over the bound at the failed probe{load}",
            failed.measured.p99_ms
        )
    } else {
        format!("noise: {:.2}% dropped at the failed probe{load}", failed.measured.dropped_pct())
    }
}

/// A rate as shown: whole ops/s from 100 up, else two significant decimals.
pub fn fmt_rate(r: f64) -> String {
    if r >= 100.0 { format!("{r:.0}") } else { format!("{r:.2}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: SearchConfig = SearchConfig {
        start_rate: 100.0,
        factor: 2.0,
        resolution: 0.1,
        min_rate: 1.0,
        max_rate: 1_000_000.0,
        max_probes: 14,
    };
    const SLO: Slo = Slo { p99_ms: 50.0, max_dropped_pct: 0.0 };

    /// Runs the search against `curve` (rate -> p99 ms; nothing dropped, the verdict
    /// passing): the probes in order and the search at its end.
    fn drive(cfg: SearchConfig, curve: impl Fn(f64) -> f64) -> (Vec<Probe>, Search) {
        let mut s = Search::new(cfg);
        let mut probes = Vec::new();
        for _ in 0..100 {
            let Step::Probe { rate, phase } = s.next_step() else { return (probes, s) };
            let m = Measured {
                achieved_ops_per_s: rate,
                p50_ms: curve(rate) / 2.0,
                p99_ms: curve(rate),
                scheduled: 100,
                dropped: 0,
                verdict_failed: None,
            };
            let probe = combine(&SLO, rate, phase, vec![m], Some(1.0));
            s.record(rate, phase, probe.held);
            probes.push(probe);
        }
        panic!("the search did not end within 100 probes");
    }

    #[test]
    fn a_monotone_curve_gives_its_knee_within_the_resolution_and_verifies() {
        // p99 crosses 50 ms at 3000 ops/s.
        let (probes, s) = drive(CFG, |r| if r <= 3000.0 { 5.0 } else { 80.0 });
        let rates: Vec<f64> = probes.iter().map(|p| p.rate_ops_per_s).collect();
        // Ramp 100..3200 (3200 fails), then bisection in [1600, 3200].
        assert_eq!(&rates[..7], &[100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0, 2400.0]);
        let knee = s.knee().unwrap();
        assert!(knee <= 3000.0 && knee * 1.1 >= 3000.0, "knee {knee}: {rates:?}");
        assert_eq!(s.stopped_early(), None);
        assert_eq!(s.verification(), (Some(true), Some(false)));
        let n = probes.len();
        assert_eq!((probes[n - 2].phase, probes[n - 1].phase), (Phase::VerifyBelow, Phase::VerifyAbove));
        assert_eq!(probes[n - 2].rate_ops_per_s, knee * 0.8);
        assert_eq!(probes[n - 1].rate_ops_per_s, knee * 1.25);
        assert!(inversions(&probes, &SLO).is_empty(), "{probes:?}");
        assert!(n <= 14, "{n} probes");
    }

    #[test]
    fn a_non_monotone_curve_is_said_where_and_its_verification_fails() {
        // A dip: 400 ops/s fails (a slow spell), everything else up to 1000 holds.
        let (probes, s) = drive(CFG, |r| if r == 400.0 || r > 1000.0 { 90.0 } else { 5.0 });
        let knee = s.knee().unwrap();
        assert!((360.0..400.0).contains(&knee), "bisection stays in [200, 400]: {knee}");
        // 1.25x the knee (above the failed 400) holds: the verification fails.
        assert_eq!(s.verification(), (Some(true), Some(true)));
        let inv = inversions(&probes, &SLO);
        assert_eq!(inv.len(), 1, "{inv:?}");
        assert_eq!(inv[0].failed_at_ops_per_s, 400.0);
        assert_eq!(inv[0].held_at_ops_per_s, knee * 1.25);
        assert!(inv[0].likely_reason.starts_with("noise: p99 90.0 ms was 80% over"), "{}", inv[0].likely_reason);
    }

    #[test]
    fn a_failing_first_probe_ramps_down_and_no_held_rate_means_no_knee() {
        let (probes, s) = drive(CFG, |r| if r <= 30.0 { 5.0 } else { 90.0 });
        let rates: Vec<f64> = probes.iter().take(3).map(|p| p.rate_ops_per_s).collect();
        assert_eq!(rates, [100.0, 50.0, 25.0]);
        assert!(s.knee().unwrap() <= 30.0 && s.verification().1 == Some(false));
        let (probes, s) = drive(CFG, |_| 90.0);
        assert_eq!(s.knee(), None);
        assert!(s.stopped_early().unwrap().contains("no rate held"), "{:?}", s.stopped_early());
        assert!(probes.iter().all(|p| p.phase == Phase::Ramp) && probes.len() == 7, "{probes:?}");
    }

    #[test]
    fn the_bounds_end_the_search_and_verification_still_runs() {
        let cfg = SearchConfig { max_probes: 3, ..CFG };
        let (probes, s) = drive(cfg, |r| if r <= 3000.0 { 5.0 } else { 80.0 });
        assert_eq!(probes.len(), 5, "3 search probes, then 0.8x and 1.25x: {probes:?}");
        assert!(s.stopped_early().unwrap().contains("probe bound"));
        // 400 held and so does 500: no knee was bracketed, and the verification says so.
        assert_eq!(s.verification(), (Some(true), Some(true)));
        let cfg = SearchConfig { max_rate: 300.0, ..CFG };
        let (_, s) = drive(cfg, |_| 5.0);
        assert_eq!(s.knee(), Some(300.0));
        assert!(s.stopped_early().unwrap().contains("held up to the highest"));
        assert_eq!(s.verification(), (Some(true), None), "1.25x is above the highest rate allowed");
        let mut s = Search::new(CFG);
        s.record(100.0, Phase::Ramp, true);
        s.stop("the time bound (1 s) was reached".into());
        assert_eq!(s.next_step(), Step::Probe { rate: 80.0, phase: Phase::VerifyBelow });
    }

    #[test]
    fn the_slo_judges_p99_drops_and_the_verdict() {
        let m = |p99_ms, dropped, v: Option<&str>| Measured {
            achieved_ops_per_s: 1.0,
            p50_ms: 0.5,
            p99_ms,
            scheduled: 1000,
            dropped,
            verdict_failed: v.map(String::from),
        };
        assert!(judge(&SLO, &m(50.0, 0, None)).is_empty());
        assert_eq!(judge(&SLO, &m(50.1, 0, None)), ["p99 50.1 ms > 50 ms"]);
        assert_eq!(judge(&SLO, &m(1.0, 1, None)), ["dropped 0.10% > 0%"]);
        let loose = Slo { max_dropped_pct: 0.1, ..SLO };
        assert!(judge(&loose, &m(1.0, 1, None)).is_empty());
        assert_eq!(judge(&SLO, &m(1.0, 0, Some("FAIL: counters"))), ["verdict FAIL: counters"]);
    }

    #[test]
    fn repeats_hold_by_majority_and_a_failing_verdict_is_never_outvoted() {
        let m = |p99_ms, v: Option<&str>| Measured {
            achieved_ops_per_s: 100.0,
            p50_ms: 0.5,
            p99_ms,
            scheduled: 1000,
            dropped: 0,
            verdict_failed: v.map(String::from),
        };
        let p = combine(&SLO, 100.0, Phase::Bisect, vec![m(70.0, None), m(10.0, None), m(20.0, None)], None);
        assert!(p.held && p.runs_held == 2, "{p:?}");
        assert_eq!((p.measured.p99_ms, p.p99_spread_ms()), (20.0, (10.0, 70.0)), "the median run's figures");
        assert!(p.failed_because.is_empty());
        let p = combine(&SLO, 100.0, Phase::Bisect, vec![m(70.0, None), m(10.0, None), m(60.0, None)], None);
        assert!(!p.held && p.runs_held == 1, "{p:?}");
        assert_eq!(p.failed_because, ["run 1 of 3: p99 70.0 ms > 50 ms", "run 3 of 3: p99 60.0 ms > 50 ms"]);
        let p =
            combine(&SLO, 100.0, Phase::Bisect, vec![m(1.0, Some("FAIL: counters")), m(1.0, None), m(1.0, None)], None);
        assert!(!p.held && p.runs_held == 2, "{p:?}");
        assert_eq!(p.failed_because, ["run 1 of 3: verdict FAIL: counters"]);
        let p = combine(&SLO, 100.0, Phase::Bisect, vec![m(1.0, None), m(60.0, None)], None);
        assert!(!p.held, "one of two is not more than half: {p:?}");
    }
}
