//! One agent's output (`agent-K-of-N/`): `partial.json` (its share, counts, clock
//! samples), and per cell `<cell>/history.jsonl` and `<cell>/latency.hlog` (an HDR
//! interval log, one tagged histogram per stage x op kind); and its segment's driver
//! configuration and clock measurements.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use serde::{Deserialize, Serialize};

use counterlab_core::{ErrorClass, OpKind};
use counterlab_sim::{DriverConfig, LoadModel, LoadResult, OpStats, Rng, Segment, Stop, new_latency_histogram};
use counterlab_strategies::Namespace;

/// The partial report's format.
pub const AGENT_FORMAT: &str = "counterlab-agent/2";

/// Test-only: milliseconds added to this agent's clock (a known skew to measure).
pub const TEST_SKEW_ENV: &str = "COUNTERLAB_TEST_CLOCK_SKEW_MS";

/// Clock samples against the database server taken per measurement.
const CLOCK_SAMPLES: u32 = 9;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Partial {
    pub format: String,
    pub run_id: String,
    pub k: u32,
    pub n: u32,
    pub host: String,
    pub clock: Clock,
    pub cells: Vec<CellPartial>,
}

/// The agent's clock against the server's: the best sample at start and at end.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Clock {
    pub start: ClockSample,
    pub end: ClockSample,
    /// Server minus agent, µs (the start measurement).
    pub offset_us: i64,
    /// Half the worse best round trip, plus the offset's drift from start to end.
    pub uncertainty_us: u64,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct ClockSample {
    /// The agent's clock at the round trip's midpoint, µs since the Unix epoch.
    pub local_us: i64,
    pub server_us: i64,
    pub rtt_us: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CellPartial {
    pub namespace: String,
    /// The folder of its history and HDR log, inside the agent's.
    pub dir: String,
    /// The agent's clock when the load started, µs since the Unix epoch.
    pub t0_local_us: i64,
    pub users: u64,
    pub workers: u64,
    pub ops_total: u64,
    pub throughput_ops_per_s: f64,
    pub stages: Vec<StagePartial>,
    pub error_samples: Vec<String>,
    pub history_events: u64,
    pub history_dropped: u64,
    pub settle_s: f64,
    pub settle_error: Option<String>,
    pub figures: Vec<(String, f64)>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StagePartial {
    pub elapsed_s: f64,
    pub started: u64,
    pub scheduled: u64,
    pub dropped: u64,
    pub late: u64,
    /// Counts per op kind (in `OpKind::ALL` order); the histograms are in the HDR log.
    pub ops: Vec<OpCounts>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OpCounts {
    pub count: u64,
    pub ok: u64,
    pub fail: u64,
    pub unknown: u64,
    pub skipped: u64,
    pub transitioned: u64,
    pub errors_by_class: Vec<u64>,
    pub retries: u64,
    pub give_ups: u64,
}

impl OpCounts {
    pub fn of(s: &OpStats) -> OpCounts {
        OpCounts {
            count: s.count,
            ok: s.ok,
            fail: s.fail,
            unknown: s.unknown,
            skipped: s.skipped,
            transitioned: s.transitioned,
            errors_by_class: s.errors_by_class.to_vec(),
            retries: s.retries,
            give_ups: s.give_ups,
        }
    }

    /// Adds these counts into `s` (histograms come separately).
    pub fn add_to(&self, s: &mut OpStats) {
        s.count += self.count;
        s.ok += self.ok;
        s.fail += self.fail;
        s.unknown += self.unknown;
        s.skipped += self.skipped;
        s.transitioned += self.transitioned;
        s.retries += self.retries;
        s.give_ups += self.give_ups;
        for (a, b) in s.errors_by_class.iter_mut().zip(&self.errors_by_class) {
            *a += b;
        }
    }
}

/// The folder of agent `k` of `n` inside `out`.
pub fn agent_dir(out: &Path, k: u32, n: u32) -> PathBuf {
    out.join(format!("agent-{k}-of-{n}"))
}

/// The driver configuration of segment `seg`: its users, its share of every stage's
/// workers (closed loop) or rate (open loop) and of an op budget, and its own streams
/// (seeded from the run's seed and the segment; 1/1 keeps the run's seed).
pub fn segment_config(mut cfg: DriverConfig, seg: Segment, n_users: u64) -> Result<DriverConfig, String> {
    let at = format!("segment {}/{}", seg.k, seg.n);
    if seg.users(n_users) == 0 {
        return Err(format!("{at} has no users: the plan has {n_users} (use at most {n_users} agents)"));
    }
    if seg.n > 1 {
        cfg.seed = Rng::derive(cfg.seed, (u64::from(seg.n) << 32) | u64::from(seg.k)).next_u64();
    }
    cfg.segment = seg;
    let share = |total: u64| seg.share(total);
    for st in &mut cfg.stages {
        st.model = match st.model {
            LoadModel::Closed { workers } => {
                let w = share(u64::from(workers)) as u32;
                if w == 0 {
                    return Err(format!(
                        "{at} gets none of stage {:?}'s {workers} workers: give at least {} workers",
                        st.name, seg.n
                    ));
                }
                LoadModel::Closed { workers: w }
            }
            LoadModel::Open { rate_from, rate_to, poisson, max_in_flight } => {
                let n = f64::from(seg.n);
                let in_flight = (share(u64::from(max_in_flight)) as u32).max(1);
                LoadModel::Open { rate_from: rate_from / n, rate_to: rate_to / n, poisson, max_in_flight: in_flight }
            }
        };
        if let Stop::Ops(total) = st.stop {
            st.stop = Stop::Ops(share(total).max(1));
        }
    }
    Ok(cfg)
}

/// This agent's clock: the system clock plus the test-only skew, µs since the epoch.
pub fn local_us(skew_us: i64) -> i64 {
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    now.as_micros() as i64 + skew_us
}

/// The test-only skew from the environment, µs (0 when unset).
pub fn test_skew_us() -> Result<i64, String> {
    match std::env::var(TEST_SKEW_ENV) {
        Err(_) => Ok(0),
        Ok(v) => v
            .trim()
            .parse::<i64>()
            .map(|ms| ms.clamp(-86_400_000, 86_400_000) * 1000)
            .map_err(|_| format!("{TEST_SKEW_ENV}={v:?}: expected whole milliseconds")),
    }
}

/// The sample with the smallest round trip among `CLOCK_SAMPLES`.
pub async fn clock_sample(ns: &Namespace, skew_us: i64) -> Result<ClockSample, String> {
    let mut best: Option<ClockSample> = None;
    for _ in 0..CLOCK_SAMPLES {
        let before = local_us(skew_us);
        let server = ns.server_time_us().await.map_err(|e| format!("read the server's clock: {e}"))?;
        let after = local_us(skew_us);
        let s =
            ClockSample { local_us: before + (after - before) / 2, server_us: server, rtt_us: (after - before) as u64 };
        if best.is_none_or(|b| s.rtt_us < b.rtt_us) {
            best = Some(s);
        }
    }
    Ok(best.expect("at least one sample"))
}

impl Clock {
    pub fn of(start: ClockSample, end: ClockSample) -> Clock {
        let offset = |s: ClockSample| s.server_us - s.local_us;
        let drift = (offset(end) - offset(start)).unsigned_abs();
        let uncertainty_us = start.rtt_us.max(end.rtt_us).div_ceil(2) + drift;
        Clock { start, end, offset_us: offset(start), uncertainty_us }
    }
}

/// The tag of stage `i`'s op kind histogram: `s0.create.lat` (from the intended start)
/// or `.svc` (service time); `s0.lag` for its schedule lag.
pub fn tag(stage: usize, kind: Option<OpKind>, what: &str) -> String {
    match kind {
        Some(k) => format!("s{stage}.{}.{what}", k.name()),
        None => format!("s{stage}.{what}"),
    }
}

/// The cell's HDR interval log: every stage's histograms, exact (the totals, not a time
/// series), starting at the load's start.
pub fn hdr_log(load: &LoadResult, t0: SystemTime, label: &str) -> String {
    let mut buf = Vec::new();
    let mut ser = V2DeflateSerializer::new();
    {
        let mut log = IntervalLogWriterBuilder::new()
            .add_comment(&format!("counterlab agent: {label}"))
            .add_comment("values are microseconds; tags are s<stage>.<op kind>.lat|svc and s<stage>.lag")
            .with_start_time(t0)
            .with_base_time(t0)
            .begin_log_with(&mut buf, &mut ser)
            .expect("writing to memory");
        let mut start = Duration::ZERO;
        for (i, st) in load.stages.iter().enumerate() {
            let mut put = |h: &Histogram<u64>, name: String| {
                log.write_histogram(h, start, st.elapsed, Tag::new(&name)).expect("writing to memory");
            };
            for (k, s) in OpKind::ALL.iter().zip(&st.ops) {
                put(&s.latency_us, tag(i, Some(*k), "lat"));
                put(&s.service_us, tag(i, Some(*k), "svc"));
            }
            put(&st.lag_us, tag(i, None, "lag"));
            start += st.elapsed;
        }
    }
    String::from_utf8(buf).expect("the log is ASCII")
}

/// The merged totals as an HDR interval log: one histogram per op kind (tagged with its
/// name) over the measured stages, from each op's intended start, as `run` writes.
pub fn totals_log(load: &LoadResult, label: &str) -> String {
    let mut buf = Vec::new();
    let mut ser = V2DeflateSerializer::new();
    let t0 = SystemTime::now();
    {
        let mut log = IntervalLogWriterBuilder::new()
            .add_comment(&format!("counterlab check (merged over the agents): {label}"))
            .add_comment("values are microseconds from each op's intended start; tags are op kinds")
            .with_start_time(t0)
            .with_base_time(t0)
            .begin_log_with(&mut buf, &mut ser)
            .expect("writing to memory");
        for (k, s) in OpKind::ALL.iter().zip(&load.ops) {
            log.write_histogram(&s.latency_us, Duration::ZERO, load.elapsed, Tag::new(k.name()))
                .expect("writing to memory");
        }
    }
    String::from_utf8(buf).expect("the log is ASCII")
}

/// An empty op stats set for merging into.
pub fn empty_ops() -> Vec<OpStats> {
    OpKind::ALL.iter().map(|_| OpStats::new()).collect()
}

/// An empty lag histogram.
pub fn empty_lag() -> Histogram<u64> {
    new_latency_histogram()
}

/// Error classes are indexed by `ErrorClass::index()`: a partial from another build
/// with another count is refused.
pub fn classes_match(c: &OpCounts) -> bool {
    c.errors_by_class.len() == ErrorClass::COUNT
}

#[cfg(test)]
mod tests {
    use counterlab_sim::{Mix, Stage};

    use super::*;

    #[test]
    fn one_segment_is_the_whole_run_and_the_shares_add_up() {
        let stop = Stop::Ops(10);
        let stages = vec![Stage { name: "load".into(), stop, model: LoadModel::Closed { workers: 7 }, measured: true }];
        let cfg = DriverConfig::plain(5, stages.clone(), Mix { weights: [1; 6] });
        let whole = segment_config(cfg.clone(), Segment::WHOLE, 10).unwrap();
        assert_eq!((whole.seed, &whole.stages, whole.segment), (5, &stages, Segment::WHOLE));
        let parts: Vec<DriverConfig> =
            (1..=3).map(|k| segment_config(cfg.clone(), Segment { k, n: 3 }, 10).unwrap()).collect();
        let workers: u32 = parts.iter().map(|p| p.stages[0].model.workers()).sum();
        let ops: u64 = parts.iter().map(|p| if let Stop::Ops(n) = p.stages[0].stop { n } else { 0 }).sum();
        assert_eq!((workers, ops), (7, 10));
        assert!(parts[0].seed != parts[1].seed && parts[1].seed != parts[2].seed);
        let e = segment_config(cfg.clone(), Segment { k: 8, n: 8 }, 10).unwrap_err();
        assert!(e.contains("none of stage \"load\"'s 7 workers"), "{e}");
        assert!(segment_config(cfg, Segment { k: 11, n: 11 }, 10).unwrap_err().contains("no users"));
    }

    #[test]
    fn the_clock_offset_is_the_best_sample_and_its_uncertainty_covers_drift() {
        let start = ClockSample { local_us: 1_000_000, server_us: 1_005_000, rtt_us: 300 };
        let end = ClockSample { local_us: 9_000_000, server_us: 9_005_100, rtt_us: 500 };
        let c = Clock::of(start, end);
        assert_eq!(c.offset_us, 5_000);
        assert_eq!(c.uncertainty_us, 250 + 100);
    }
}
