//! The run's time series: workers record each op into the current interval; a sampler
//! task closes an interval about once a second, turning it into a point (ops/s, errors,
//! drops, p50/p99/max, the strategy's pending amount and sampled drift) and into HDR
//! interval-log lines (one tagged histogram per op kind), and reports it for a progress line.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use counterlab_core::{OpKind, Strategy};
use hdrhistogram::Histogram;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriter, IntervalLogWriterBuilder, Tag};

use crate::metrics::{new_latency_histogram, record_us_n};

/// The interval being filled.
struct Interval {
    hist: Vec<Histogram<u64>>,
    ops: u64,
    errors: u64,
    /// The phase the interval began in.
    phase: String,
}

impl Interval {
    fn new(phase: String) -> Interval {
        Interval { hist: OpKind::ALL.iter().map(|_| new_latency_histogram()).collect(), ops: 0, errors: 0, phase }
    }

    /// Adds a part's ops.
    fn absorb(&mut self, part: &Part) {
        for (h, o) in self.hist.iter_mut().zip(&part.hist) {
            if let Some(o) = o {
                h.add(o).expect("auto-resizing histograms merge");
            }
        }
        self.ops += part.ops;
        self.errors += part.errors;
    }
}

/// One part of the interval being filled: a kind's histogram is made when the part
/// first records one (a part no worker records into holds none).
#[derive(Default)]
struct Part {
    hist: [Option<Histogram<u64>>; OpKind::ALL.len()],
    ops: u64,
    errors: u64,
}

/// Workers record into one of this many parts of the interval (by worker index), so
/// workers on different threads do not take turns at one lock for every op.
const SHARDS: usize = 16;

/// One part of the interval, on a cache line of its own.
#[repr(align(128))]
struct Shard(Mutex<Part>);

/// Shared by the workers, the pacer and the sampler of one strategy run.
pub struct Monitor {
    current: Box<[Shard]>,
    scheduled: AtomicU64,
    dropped: AtomicU64,
    phase: Mutex<String>,
    /// The phase the current interval began in.
    began: Mutex<String>,
    /// A phase change closes the current interval at once, so no point mixes phases.
    phase_changed: tokio::sync::Notify,
}

impl Default for Monitor {
    fn default() -> Monitor {
        Monitor {
            current: (0..SHARDS).map(|_| Shard(Mutex::default())).collect(),
            scheduled: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            phase: Mutex::new(String::new()),
            began: Mutex::new(String::new()),
            phase_changed: tokio::sync::Notify::new(),
        }
    }
}

impl Monitor {
    pub fn new() -> Arc<Monitor> {
        Arc::new(Monitor::default())
    }

    /// One completed op of worker `worker`, its latency from the intended start, and
    /// whether it failed.
    pub fn record(&self, worker: u32, kind: OpKind, us: u64, error: bool) {
        self.record_n(worker, kind, us, 1, error as u64);
    }

    /// `n` ops of one kind that took `us` each (a batch's), `errors` of them failed.
    pub fn record_n(&self, worker: u32, kind: OpKind, us: u64, n: u64, errors: u64) {
        let mut c = self.current[worker as usize % SHARDS].0.lock().expect("monitor lock");
        record_us_n(c.hist[kind.index()].get_or_insert_with(new_latency_histogram), us, n);
        c.ops += n;
        c.errors += errors;
    }

    pub fn scheduled(&self, n: u64) {
        self.scheduled.fetch_add(n, Ordering::Relaxed);
    }

    pub fn dropped(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// Names the phase the following points belong to (`warmup`, a stage, `settle`).
    pub fn set_phase(&self, phase: &str) {
        let first = std::mem::replace(&mut *self.phase.lock().expect("monitor lock"), phase.to_string()).is_empty();
        if first {
            // The first phase names the interval already open; nothing to close.
            *self.began.lock().expect("monitor lock") = phase.to_string();
        } else {
            self.phase_changed.notify_one();
        }
    }

    /// Closes the current interval, returning it with the schedule counts since the last.
    fn take(&self) -> (Interval, u64, u64) {
        let phase = self.phase.lock().expect("monitor lock").clone();
        let began = std::mem::replace(&mut *self.began.lock().expect("monitor lock"), phase);
        let mut interval = Interval::new(began);
        for shard in self.current.iter() {
            let part = std::mem::take(&mut *shard.0.lock().expect("monitor lock"));
            interval.absorb(&part);
        }
        let scheduled = self.scheduled.swap(0, Ordering::Relaxed);
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        (interval, scheduled, dropped)
    }
}

/// One closed interval.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// End of the interval, seconds from the sampler's start.
    pub t_s: f64,
    pub dt_s: f64,
    pub phase: String,
    pub ops: u64,
    pub errors: u64,
    pub scheduled: u64,
    pub dropped: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    /// Completed ops per op kind, in `OpKind::ALL` order.
    pub ops_by_kind: Vec<u64>,
    pub pending: Option<i64>,
    pub drift: Option<i64>,
}

impl Sample {
    /// Folds a later, short interval of the same phase into this one (percentiles become
    /// the larger of the two: an upper bound).
    fn merge(&mut self, later: &Sample) {
        self.t_s = later.t_s;
        self.dt_s += later.dt_s;
        self.ops += later.ops;
        self.errors += later.errors;
        self.scheduled += later.scheduled;
        self.dropped += later.dropped;
        self.p50_us = self.p50_us.max(later.p50_us);
        self.p99_us = self.p99_us.max(later.p99_us);
        self.p999_us = self.p999_us.max(later.p999_us);
        for (a, b) in self.ops_by_kind.iter_mut().zip(&later.ops_by_kind) {
            *a += b;
        }
        self.max_us = self.max_us.max(later.max_us);
        self.pending = later.pending.or(self.pending);
        self.drift = later.drift.or(self.drift);
    }

    pub fn ops_per_s(&self) -> f64 {
        if self.dt_s > 0.0 { self.ops as f64 / self.dt_s } else { 0.0 }
    }
}

/// What the sampler collected.
#[derive(Debug, Default)]
pub struct Series {
    pub samples: Vec<Sample>,
    /// The HDR interval log (format 1.3; tags are op kinds; values in microseconds).
    pub hdr_log: String,
    /// Set when drift sampling stood down during the run (its aggregate outran the probe
    /// bound): when, and why. The points after it have no drift.
    pub drift_note: Option<String>,
}

/// How the sampler behaves.
pub struct SamplerConfig {
    pub interval: Duration,
    /// Ask the strategy for its net drift each interval (a SQL aggregate: not free).
    pub sample_drift: bool,
    /// Written into the log's header comment (strategy, backend, seed...).
    pub label: String,
}

/// A running sampler; `finish` closes the last (partial) interval and returns the series.
pub struct Sampler {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Series>,
}

pub use counterlab_core::{SETTLE, WARMUP};

/// Bound on a sample's questions to the strategy (pending, drift).
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

impl Sampler {
    /// Starts sampling now. `on_sample` sees each point as it closes (a progress line).
    pub fn start(
        monitor: Arc<Monitor>,
        strategy: Arc<dyn Strategy>,
        cfg: SamplerConfig,
        on_sample: Box<dyn FnMut(&Sample) + Send>,
    ) -> Sampler {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move { SamplerTask::new(monitor, strategy, cfg, on_sample).run(rx).await });
        Sampler { stop: Some(tx), task }
    }

    pub async fn finish(mut self) -> Series {
        if let Some(tx) = self.stop.take() {
            tx.send(()).ok();
        }
        self.task.await.expect("sampler panicked")
    }
}

/// The HDR interval log being written into memory.
type Log<'a, 'b> = IntervalLogWriter<'a, 'b, Vec<u8>, V2DeflateSerializer>;

/// The sampler task's state from one point to the next.
struct SamplerTask {
    monitor: Arc<Monitor>,
    strategy: Arc<dyn Strategy>,
    cfg: SamplerConfig,
    on_sample: Box<dyn FnMut(&Sample) + Send>,
    start: Instant,
    /// When the previous interval closed.
    last: Instant,
    samples: Vec<Sample>,
    /// Whether drift is still sampled: the first probe that outruns `PROBE_TIMEOUT` ends
    /// it, so abandoned aggregates (which the server may still be running on their
    /// connections) never pile up on a large table.
    sample_drift: bool,
    drift_note: Option<String>,
}

impl SamplerTask {
    fn new(
        monitor: Arc<Monitor>,
        strategy: Arc<dyn Strategy>,
        cfg: SamplerConfig,
        on_sample: Box<dyn FnMut(&Sample) + Send>,
    ) -> SamplerTask {
        let start = Instant::now();
        let sample_drift = cfg.sample_drift;
        SamplerTask {
            monitor,
            strategy,
            cfg,
            on_sample,
            start,
            last: start,
            samples: Vec::new(),
            sample_drift,
            drift_note: None,
        }
    }

    /// Closes an interval on every tick and on every phase change, and a last one when
    /// `stop` fires.
    async fn run(mut self, mut stop: tokio::sync::oneshot::Receiver<()>) -> Series {
        let wall = SystemTime::now();
        let mut buf: Vec<u8> = Vec::new();
        let mut ser = V2DeflateSerializer::new();
        {
            let mut log = begin_log(&mut buf, &mut ser, &self.cfg.label, wall);
            let mut tick = tokio::time::interval_at((self.start + self.cfg.interval).into(), self.cfg.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let last_one = tokio::select! {
                    _ = tick.tick() => false,
                    _ = self.monitor.phase_changed.notified() => {
                        tick.reset();
                        false
                    }
                    _ = &mut stop => true,
                };
                self.close_interval(&mut log).await;
                if last_one {
                    break;
                }
            }
        }
        Series {
            samples: self.samples,
            hdr_log: String::from_utf8(buf).expect("the log is ASCII"),
            drift_note: self.drift_note,
        }
    }

    /// Takes the monitor's current interval, logs it and adds its point.
    async fn close_interval(&mut self, log: &mut Log<'_, '_>) {
        let now = Instant::now();
        let (interval, scheduled, dropped) = self.monitor.take();
        if interval.ops == 0 && scheduled == 0 && dropped == 0 && now.duration_since(self.last) < self.cfg.interval / 10
        {
            // A phase change right at the start (or twice in a row): no point.
            self.last = now;
            return;
        }
        let all = self.log_interval(log, &interval, now);
        let pending = tokio::time::timeout(PROBE_TIMEOUT, self.strategy.pending()).await.ok().flatten();
        let drift = self.probe_drift(now).await;
        let q = |q: f64| if all.is_empty() { 0 } else { all.value_at_quantile(q) };
        let sample = Sample {
            t_s: now.duration_since(self.start).as_secs_f64(),
            dt_s: now.duration_since(self.last).as_secs_f64(),
            phase: interval.phase,
            ops: interval.ops,
            errors: interval.errors,
            scheduled,
            dropped,
            p50_us: q(0.5),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: if all.is_empty() { 0 } else { all.max() },
            ops_by_kind: interval.hist.iter().map(|h| h.len()).collect(),
            pending,
            drift,
        };
        self.push(sample);
        self.last = now;
    }

    /// The strategy's net drift, while drift is sampled; a probe that outruns
    /// `PROBE_TIMEOUT` stands sampling down for the rest of the run, with a note.
    async fn probe_drift(&mut self, now: Instant) -> Option<i64> {
        if !self.sample_drift {
            return None;
        }
        match tokio::time::timeout(PROBE_TIMEOUT, self.strategy.net_drift()).await {
            Ok(d) => d,
            Err(_) => {
                self.sample_drift = false;
                self.drift_note = Some(format!(
                    "drift sampling stood down at {:.1} s: its aggregate took over {} ms \
                     (set sample_drift = false for data this large)",
                    now.duration_since(self.start).as_secs_f64(),
                    PROBE_TIMEOUT.as_millis()
                ));
                None
            }
        }
    }

    /// Logs each op kind's histogram of `interval` and returns them merged.
    fn log_interval(&self, log: &mut Log<'_, '_>, interval: &Interval, now: Instant) -> Histogram<u64> {
        let mut all = new_latency_histogram();
        for (kind, h) in OpKind::ALL.iter().zip(&interval.hist) {
            if h.is_empty() {
                continue;
            }
            all.add(h).expect("auto-resizing histograms merge");
            // Warm-up is charted but, as in the report's totals, not logged.
            if interval.phase != WARMUP {
                let begin = self.last.duration_since(self.start);
                log.write_histogram(h, begin, now - self.last, Tag::new(kind.name())).expect("writing to memory");
            }
        }
        all
    }

    /// A sliver (under half an interval) left by a phase change or a stage's drain joins
    /// the point before it, so rates are not computed over a few milliseconds.
    fn push(&mut self, sample: Sample) {
        match self.samples.last_mut() {
            Some(prev) if sample.dt_s < self.cfg.interval.as_secs_f64() / 2.0 && prev.phase == sample.phase => {
                prev.merge(&sample)
            }
            _ => {
                (self.on_sample)(&sample);
                self.samples.push(sample);
            }
        }
    }
}

/// Begins the interval log: its header comments and the column legend.
fn begin_log<'a, 'b>(
    buf: &'a mut Vec<u8>,
    ser: &'b mut V2DeflateSerializer,
    label: &str,
    wall: SystemTime,
) -> Log<'a, 'b> {
    let mut log = IntervalLogWriterBuilder::new()
        .add_comment(&format!("counterlab: {label}"))
        .add_comment("[Histogram log format version 1.3]")
        .add_comment("values are microseconds from each op's intended start; tags are op kinds")
        .with_start_time(wall)
        .with_base_time(wall)
        .begin_log_with(buf, ser)
        .expect("writing to memory");
    log.write_comment("\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"")
        .expect("writing to memory");
    log
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use counterlab_core::{NotificationId, OpError, StrategyInfo, UserId};

    use super::*;
    use crate::null::NullStrategy;

    /// Answers its first drift probe at once and stalls on every later one (a table grown
    /// too large to aggregate within the probe bound).
    #[derive(Default)]
    struct SlowDrift {
        probes: AtomicU32,
        second: tokio::sync::Notify,
    }

    #[async_trait::async_trait]
    impl Strategy for SlowDrift {
        fn info(&self) -> StrategyInfo {
            NullStrategy::default().info()
        }
        async fn create(&self, _: UserId) -> Result<NotificationId, OpError> {
            Ok(1)
        }
        async fn mark_read(&self, _: UserId, _: NotificationId) -> Result<bool, OpError> {
            Ok(true)
        }
        async fn delete(&self, _: UserId, _: NotificationId) -> Result<bool, OpError> {
            Ok(true)
        }
        async fn mark_all_read(&self, _: UserId) -> Result<u64, OpError> {
            Ok(0)
        }
        async fn read_count(&self, _: UserId) -> Result<i64, OpError> {
            Ok(0)
        }
        async fn net_drift(&self) -> Option<i64> {
            if self.probes.fetch_add(1, Ordering::SeqCst) == 0 {
                return Some(7);
            }
            self.second.notify_one();
            tokio::time::sleep(Duration::from_secs(30)).await;
            Some(0)
        }
    }

    #[tokio::test]
    async fn a_drift_probe_that_outruns_its_bound_stands_sampling_down_with_a_note() {
        let strategy = Arc::new(SlowDrift::default());
        let cfg = SamplerConfig { interval: Duration::from_millis(50), sample_drift: true, label: "t".into() };
        let sampler = Sampler::start(Monitor::new(), strategy.clone(), cfg, Box::new(|_| {}));
        tokio::time::timeout(Duration::from_secs(60), strategy.second.notified()).await.expect("a second probe");
        // Several intervals past the stalled probe's bound: none of them may probe again.
        tokio::time::sleep(PROBE_TIMEOUT * 2).await;
        let series = sampler.finish().await;
        assert_eq!(strategy.probes.load(Ordering::SeqCst), 2, "no probe after the stand-down");
        assert_eq!(series.samples.first().and_then(|s| s.drift), Some(7));
        assert!(series.samples.iter().skip(1).all(|s| s.drift.is_none()));
        let note = series.drift_note.expect("a note");
        assert!(note.starts_with("drift sampling stood down at ") && note.contains("500 ms"), "{note}");
    }
}
