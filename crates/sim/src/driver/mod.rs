//! The load driver: a run is a sequence of stages (warm-up first, not measured), each a
//! closed loop (N workers issuing ops back to back) or an open loop (a paced schedule of
//! intended start times, constant or Poisson, flat or ramping, served by at most N ops in
//! flight). Open-loop latency is measured from the intended start (no coordinated
//! omission); the service time from the actual start is kept too. Errors are classified
//! and counted; they never stop the run.

mod batch;
mod closed;
mod op;
mod open;
mod timer;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use counterlab_core::{Event, OpError, OpKind, Strategy};
use futures_util::future::join_all;
use hdrhistogram::Histogram;
use tokio::task::JoinHandle;

use crate::metrics::{OpStats, Tries, new_latency_histogram, record_us};
use crate::monitor::Monitor;
use crate::pool::IdPool;
use crate::workload::{Mix, PlannedOp, Segment, Skew, UserPicker};
use counterlab_core::Rng;
use op::{Call, OpTimer, execute};

/// When a stage ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// No new ops are started (closed loop) or scheduled (open loop) after this long.
    Duration(Duration),
    /// A total op budget. Closed loop: split evenly over workers (the first `total % n`
    /// take one more), so each worker's sequence depends only on the seed. Open loop:
    /// the schedule ends after this many intended starts.
    Ops(u64),
}

/// How ops arrive during a stage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LoadModel {
    /// `workers` tasks, each issuing its next op when the previous one completes.
    Closed { workers: u32 },
    /// Ops are scheduled at a rate going linearly from `rate_from` to `rate_to` ops/s
    /// over the stage (equal: constant), evenly spaced or with exponential gaps
    /// (`poisson`), and served by at most `max_in_flight` ops at once.
    Open { rate_from: f64, rate_to: f64, poisson: bool, max_in_flight: u32 },
}

impl LoadModel {
    pub fn workers(&self) -> u32 {
        match *self {
            LoadModel::Closed { workers } => workers,
            LoadModel::Open { max_in_flight, .. } => max_in_flight,
        }
    }
}

/// One phase of the load.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    pub name: String,
    pub stop: Stop,
    pub model: LoadModel,
    /// False for warm-up: its ops change the data but are left out of every figure.
    pub measured: bool,
}

#[derive(Clone, Debug)]
pub struct DriverConfig {
    pub seed: u64,
    pub stages: Vec<Stage>,
    pub mix: Mix,
    pub skew: Skew,
    /// K for `mark_read_dup`.
    pub dup_k: u32,
    /// Bound on each call; a call that exceeds it is abandoned with outcome unknown.
    pub op_timeout: Duration,
    /// Set (by Ctrl-C) to stop issuing ops; ops in flight finish or time out.
    pub cancel: Arc<AtomicBool>,
    pub retry: RetryPolicy,
    /// Open loop: an op no worker has started this long after its intended time is
    /// dropped (counted, not run). Also bounds the schedule's queue.
    pub max_wait: Duration,
    /// Record at most this many calls in the history (0: record none). Calls beyond it
    /// are counted in `LoadResult::history_dropped`, and a read check is then skipped.
    pub history_limit: u64,
    /// Whose users this driver draws (`Segment::WHOLE` in one process).
    pub segment: Segment,
    /// Where recorded calls go as the load runs, in chunks (None: `LoadResult::history`).
    pub history_sink: Option<Arc<dyn HistorySink>>,
    /// Closed loop: ops each worker draws and sends at once (`Strategy::batch`; 1: one
    /// op at a time). Each op of a batch is invoked at the batch's send and completes at
    /// its reply.
    pub batch: u32,
}

/// Takes the recorded calls off the workers while the load runs (the runner's spill to
/// disk), so a history need not fit in memory. Chunks come in any order; `accept` is
/// called from the workers and must not block for long.
pub trait HistorySink: Send + Sync + std::fmt::Debug {
    fn accept(&self, calls: Vec<Event>);
}

/// Calls a worker holds before handing them to the sink: 64 KiB of events a worker (at
/// 4096, 16 workers held 4 MB between them).
pub const HISTORY_CHUNK: usize = 1024;

impl DriverConfig {
    /// `stages` with `mix`, uniform users, K = 1, a 5 s op timeout, no retries, 1 s
    /// max_wait and no history: the shape of the tests, benches and examples.
    pub fn plain(seed: u64, stages: Vec<Stage>, mix: Mix) -> DriverConfig {
        DriverConfig {
            seed,
            stages,
            mix,
            skew: Skew::Uniform,
            dup_k: 1,
            op_timeout: Duration::from_secs(5),
            cancel: Default::default(),
            retry: RetryPolicy::NONE,
            max_wait: Duration::from_secs(1),
            history_limit: 0,
            segment: Segment::WHOLE,
            history_sink: None,
            batch: 1,
        }
    }

    /// A single measured closed-loop stage: the common case and the tests' shape.
    pub fn closed_stage(workers: u32, stop: Stop) -> Vec<Stage> {
        vec![Stage { name: "load".into(), stop, model: LoadModel::Closed { workers }, measured: true }]
    }

    /// The largest latency a histogram must hold: a group of K calls, each retried, can
    /// take K times every attempt's timeout and backoff, plus an open-loop queue wait.
    pub fn max_latency_us(&self) -> u64 {
        let per_attempt = self.op_timeout + self.retry.backoff_max;
        (per_attempt.as_micros() as u64)
            .saturating_mul(self.retry.max_attempts as u64 * (self.dup_k as u64 + 1))
            .saturating_add(self.max_wait.as_micros() as u64)
    }
}

/// How conflicts (serialization, deadlock, lock wait timeout, busy) are retried: the
/// whole operation again, after an exponential backoff with seeded jitter. Unknown
/// outcomes may have applied, so they are retried only with `on_unknown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; 1 disables retries.
    pub max_attempts: u32,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// Also re-run an op whose outcome was unknown (a lost reply, a timeout): the blind
    /// retry applications write, which may apply the op twice. Off by default.
    pub on_unknown: bool,
}

impl RetryPolicy {
    /// One attempt, nothing retried.
    pub const NONE: RetryPolicy =
        RetryPolicy { max_attempts: 1, backoff_base: Duration::ZERO, backoff_max: Duration::ZERO, on_unknown: false };

    fn backoff(&self, attempt: u32, jitter_seed: u64) -> Duration {
        let exp = self.backoff_base.saturating_mul(1u32 << (attempt - 1).min(16)).min(self.backoff_max);
        // Half fixed, half jitter, so colliding transactions spread out.
        exp.mul_f64(0.5 + 0.5 * Rng::derive(jitter_seed, attempt as u64).unit_f64())
    }
}

/// What one stage produced, merged over workers.
#[derive(Debug)]
pub struct StageResult {
    pub stage: Stage,
    /// From the stage's planned start until its last op completed (drain included).
    pub elapsed: Duration,
    /// Ops workers started (issued or skipped for want of a target).
    pub started: u64,
    /// Open loop: intended starts the schedule produced; closed loop: ops issued.
    pub scheduled: u64,
    /// Open loop: scheduled ops dropped because no worker started them within `max_wait`.
    pub dropped: u64,
    /// Issued ops that started more than 1 ms after their intended time (open loop).
    pub late: u64,
    /// Indexed by `OpKind::index()`.
    pub ops: Vec<OpStats>,
    /// Open loop: intended start to actual start of each issued op.
    pub lag_us: Histogram<u64>,
}

impl StageResult {
    pub fn issued(&self) -> u64 {
        self.ops.iter().map(|s| s.count).sum()
    }

    /// Latency (from the intended start) over every op kind.
    pub fn all_latency(&self) -> Histogram<u64> {
        let mut h = new_latency_histogram();
        for s in &self.ops {
            h.add(&s.latency_us).expect("auto-resizing histograms merge");
        }
        h
    }
}

/// Everything the load produced. Totals cover the measured stages only.
#[derive(Debug)]
pub struct LoadResult {
    /// Indexed by `OpKind::index()`.
    pub ops: Vec<OpStats>,
    /// Measured stages' time.
    pub elapsed: Duration,
    /// The first few distinct error messages, for the report.
    pub error_samples: Vec<String>,
    /// Every stage run, warm-up included, in order.
    pub stages: Vec<StageResult>,
    /// Every call of every stage (warm-up included), up to the limit, in `sort_history`
    /// order (by completion time); empty when a `history_sink` took them.
    pub history: Vec<Event>,
    /// Calls left out of `history` because it was full.
    pub history_dropped: u64,
    /// This process's CPU time (every thread, user and system) over the measured stages:
    /// what driving the load cost the client (None: the OS gives no process clock, or the
    /// load ran elsewhere, in agents).
    pub client_cpu: Option<Duration>,
}

pub const MAX_ERROR_SAMPLES: usize = 5;
/// An op is late when it starts more than this after its intended time.
pub const LATE_AFTER: Duration = Duration::from_millis(1);

impl LoadResult {
    /// No load ran (its setup did not complete): no ops, no time. `_max_us`, the latency
    /// bound, is no longer needed (the histograms grow) and kept for the callers.
    pub fn empty(_max_us: u64) -> LoadResult {
        LoadResult {
            ops: OpKind::ALL.iter().map(|_| OpStats::new()).collect(),
            elapsed: Duration::ZERO,
            error_samples: Vec::new(),
            stages: Vec::new(),
            history: Vec::new(),
            history_dropped: 0,
            client_cpu: None,
        }
    }

    pub fn op(&self, kind: OpKind) -> &OpStats {
        &self.ops[kind.index()]
    }

    /// Issued ops (not skipped), over all kinds.
    pub fn total_ops(&self) -> u64 {
        self.ops.iter().map(|s| s.count).sum()
    }

    /// The client's CPU per issued op over the measured stages, in µs.
    pub fn client_cpu_us_per_op(&self) -> Option<f64> {
        let ops = self.total_ops();
        self.client_cpu.filter(|_| ops > 0).map(|cpu| cpu.as_secs_f64() * 1e6 / ops as f64)
    }

    pub fn throughput_ops_per_s(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 { self.total_ops() as f64 / secs } else { 0.0 }
    }

    fn measured(&self) -> impl Iterator<Item = &StageResult> {
        self.stages.iter().filter(|s| s.stage.measured)
    }

    pub fn is_open_loop(&self) -> bool {
        self.measured().any(|s| matches!(s.stage.model, LoadModel::Open { .. }))
    }

    /// Over the measured open-loop stages: (scheduled, started, dropped, late, lag).
    /// After Ctrl-C, scheduled ops still queued are neither started nor dropped.
    pub fn open_loop_totals(&self) -> (u64, u64, u64, u64, Histogram<u64>) {
        let mut lag = new_latency_histogram();
        let (mut scheduled, mut started, mut dropped, mut late) = (0, 0, 0, 0);
        for s in self.measured().filter(|s| matches!(s.stage.model, LoadModel::Open { .. })) {
            scheduled += s.scheduled;
            started += s.started;
            dropped += s.dropped;
            late += s.late;
            lag.add(&s.lag_us).expect("auto-resizing histograms merge");
        }
        (scheduled, started, dropped, late, lag)
    }

    /// Mean target rate over the measured open-loop stages (ops/s), weighted by time.
    pub fn target_rate(&self) -> f64 {
        let (mut ops, mut secs) = (0.0, 0.0);
        for s in self.measured() {
            if let (LoadModel::Open { rate_from, rate_to, .. }, Stop::Duration(d)) = (s.stage.model, s.stage.stop) {
                ops += (rate_from + rate_to) / 2.0 * d.as_secs_f64();
                secs += d.as_secs_f64();
            }
        }
        if secs > 0.0 { ops / secs } else { 0.0 }
    }
}

/// One worker's share of a stage. Its stats of a kind and its lag histogram are made when
/// it first records one: a worker holds none for the kinds it never issues (none at all
/// when idle), as the stage's workers are all held until it ends.
struct Worker {
    stats: [Option<OpStats>; OpKind::ALL.len()],
    error_samples: Vec<String>,
    lag_us: Option<Histogram<u64>>,
    late: u64,
    dropped: u64,
    issued_or_skipped: u64,
    history: Vec<Event>,
    /// The worker's index in its stage, as the history names it.
    id: u32,
    timer: OpTimer,
}

impl Worker {
    fn new(id: u32) -> Worker {
        Worker {
            stats: Default::default(),
            error_samples: Vec::new(),
            lag_us: None,
            late: 0,
            dropped: 0,
            issued_or_skipped: 0,
            history: Vec::new(),
            id,
            timer: OpTimer::default(),
        }
    }

    fn stats(&mut self, kind: OpKind) -> &mut OpStats {
        self.stats[kind.index()].get_or_insert_with(OpStats::new)
    }

    /// Records an open-loop op's wait for a worker, bounded by the caller.
    fn record_lag(&mut self, us: u64) {
        record_us(self.lag_us.get_or_insert_with(new_latency_histogram), us);
    }

    fn note_error(&mut self, result: &Result<bool, OpError>) {
        if let Err(e) = result
            && self.error_samples.len() < MAX_ERROR_SAMPLES
        {
            let msg = e.to_string();
            if !self.error_samples.contains(&msg) {
                self.error_samples.push(msg);
            }
        }
    }
}

/// What a stage's workers share.
struct Ctx {
    strategy: Arc<dyn Strategy>,
    pool: Arc<IdPool>,
    cfg: Arc<DriverConfig>,
    monitor: Arc<Monitor>,
    max_us: u64,
    /// The load's start: history times are measured from it.
    t0: Instant,
    /// Calls recorded so far over all workers, and calls left out.
    recorded: AtomicU64,
    history_dropped: AtomicU64,
}

impl Ctx {
    fn record_calls(&self, w: &mut Worker, op: PlannedOp, calls: impl ExactSizeIterator<Item = Call>) {
        let limit = self.cfg.history_limit;
        if limit == 0 {
            return;
        }
        let n = calls.len() as u64;
        if self.recorded.fetch_add(n, Ordering::Relaxed) + n > limit {
            self.history_dropped.fetch_add(n, Ordering::Relaxed);
            return;
        }
        let us = |t: Instant| t.saturating_duration_since(self.t0).as_micros() as u64;
        w.history.extend(calls.map(|c| Event {
            worker: w.id,
            op: op.kind,
            user: op.user,
            id: c.id,
            invoke_us: us(c.invoke),
            complete_us: us(c.complete),
            outcome: c.outcome,
            observed: c.observed,
            attempts: c.attempts,
            unknown_attempts: c.unknown_attempts,
        }));
        if let Some(sink) = &self.cfg.history_sink
            && w.history.len() >= HISTORY_CHUNK
        {
            sink.accept(std::mem::replace(&mut w.history, Vec::with_capacity(HISTORY_CHUNK)));
        }
    }

    /// Runs one op that was meant to start at `intended` (None: a closed loop's, meant
    /// to start now) and records it. Returns when it completed (now, when skipped).
    async fn run_op(&self, w: &mut Worker, op: PlannedOp, intended: Option<Instant>) -> Instant {
        let start = Instant::now();
        let mut tries = Tries::default();
        w.issued_or_skipped += 1;
        let done = execute(self.strategy.as_ref(), &self.pool, op, &self.cfg, &mut tries, (&mut w.timer, start)).await;
        let Some((result, calls)) = done else {
            w.stats(op.kind).skipped += 1;
            return Instant::now();
        };
        // The op ended with its last call (no clock read of its own).
        let end = calls.iter().map(|c| c.complete).max().unwrap_or(start);
        self.record_calls(w, op, calls.into_iter());
        let us = |from: Instant| (end.saturating_duration_since(from).as_micros() as u64).min(self.max_us);
        let (corrected, service) = match intended {
            Some(at) => (us(at), Some(us(start))),
            None => (us(start), None),
        };
        w.note_error(&result);
        w.stats(op.kind).record(corrected, service, &result, &tries);
        self.monitor.record(w.id, op.kind, corrected, result.is_err());
        end
    }
}

fn merge_workers(workers: Vec<Worker>, error_samples: &mut Vec<String>) -> (Vec<OpStats>, Worker) {
    let mut ops: Vec<OpStats> = OpKind::ALL.iter().map(|_| OpStats::new()).collect();
    let mut total = Worker::new(0);
    for mut w in workers {
        total.history.append(&mut w.history);
        for (t, part) in ops.iter_mut().zip(&w.stats) {
            if let Some(part) = part {
                t.merge(part);
            }
        }
        if let Some(l) = &w.lag_us {
            total.lag_us.get_or_insert_with(new_latency_histogram).add(l).expect("auto-resizing histograms merge");
        }
        total.late += w.late;
        total.dropped += w.dropped;
        total.issued_or_skipped += w.issued_or_skipped;
        for m in w.error_samples {
            if error_samples.len() < MAX_ERROR_SAMPLES && !error_samples.contains(&m) {
                error_samples.push(m);
            }
        }
    }
    (ops, total)
}

/// Waits for a stage's workers. A worker panic is a bug in counterlab or a strategy, not
/// a load result.
async fn join_workers(handles: Vec<JoinHandle<Worker>>) -> Vec<Worker> {
    join_all(handles).await.into_iter().map(|r| r.expect("worker panicked")).collect()
}

/// The seed stream of stage `idx`'s worker (or pacer) `i`. Stage 0's worker streams are
/// the seed's first streams, as before stages existed.
fn worker_stream(idx: usize, i: u64) -> u64 {
    (idx as u64) << 20 | i
}

/// Runs one stage from `start`: its planned start, which may already be past when the
/// previous stage's last ops drained late (the schedule then starts behind, and the
/// delay shows as lag instead of vanishing between stages).
async fn run_stage(
    ctx: &Arc<Ctx>,
    idx: usize,
    stage: &Stage,
    start: Instant,
    error_samples: &mut Vec<String>,
    history: &mut Vec<Event>,
) -> StageResult {
    let users = Arc::new(UserPicker::for_segment(ctx.pool.n_users(), ctx.cfg.skew, ctx.cfg.segment));
    let (workers, scheduled, queue_dropped) = match stage.model {
        LoadModel::Closed { workers } => {
            let (ws, issued) = closed::run(ctx, idx, stage.stop, workers, start, &users).await;
            (ws, issued, 0)
        }
        LoadModel::Open { rate_from, rate_to, poisson, max_in_flight } => {
            let rate = (rate_from, rate_to, poisson);
            open::run(ctx, idx, stage.stop, start, &users, rate, max_in_flight).await
        }
    };
    let elapsed = start.elapsed();
    let (mut ops, mut total) = merge_workers(workers, error_samples);
    if let LoadModel::Closed { .. } = stage.model {
        ops.iter_mut().for_each(OpStats::service_is_latency);
    }
    history.append(&mut total.history);
    StageResult {
        stage: stage.clone(),
        elapsed,
        started: total.issued_or_skipped,
        scheduled,
        dropped: total.dropped + queue_dropped,
        late: total.late,
        ops,
        lag_us: total.lag_us.unwrap_or_else(new_latency_histogram),
    }
}

/// Drives `strategy` through the configured stages. The pool must describe the data the
/// strategy's namespace was seeded with; `monitor` receives every op for the time series.
pub async fn run_load(
    strategy: Arc<dyn Strategy>,
    pool: Arc<IdPool>,
    cfg: &DriverConfig,
    monitor: Arc<Monitor>,
) -> LoadResult {
    assert!(!cfg.stages.is_empty(), "no stages");
    assert!(cfg.stages.iter().all(|s| s.model.workers() > 0), "a stage without workers");
    assert!(cfg.dup_k > 0, "dup_k is 0");
    let max_us = cfg.max_latency_us();
    let ctx = Arc::new(Ctx {
        strategy,
        pool,
        cfg: Arc::new(cfg.clone()),
        monitor: monitor.clone(),
        max_us,
        t0: Instant::now(),
        recorded: AtomicU64::new(0),
        history_dropped: AtomicU64::new(0),
    });
    let mut history = Vec::new();
    let mut ops: Vec<OpStats> = OpKind::ALL.iter().map(|_| OpStats::new()).collect();
    let mut error_samples = Vec::new();
    let mut stages = Vec::new();
    let mut elapsed = Duration::ZERO;
    let mut client_cpu = Some(Duration::ZERO);
    let mut planned = Instant::now();
    for (i, stage) in cfg.stages.iter().enumerate() {
        if cfg.cancel.load(Ordering::Relaxed) {
            break;
        }
        monitor.set_phase(&stage.name);
        let mut samples = Vec::new();
        let start = match stage.stop {
            Stop::Duration(_) => planned,
            Stop::Ops(_) => Instant::now(),
        };
        let samples = if stage.measured { &mut error_samples } else { &mut samples };
        let cpu_before = process_cpu();
        let r = run_stage(&ctx, i, stage, start, samples, &mut history).await;
        if stage.measured {
            client_cpu = client_cpu.zip(cpu_before).zip(process_cpu()).map(|((sum, a), b)| sum + b.saturating_sub(a));
        }
        planned = match stage.stop {
            Stop::Duration(d) => start + d,
            Stop::Ops(_) => Instant::now(),
        };
        if stage.measured {
            for (t, part) in ops.iter_mut().zip(&r.ops) {
                t.merge(part);
            }
            elapsed += r.elapsed;
        }
        stages.push(r);
    }
    match &cfg.history_sink {
        Some(sink) => sink.accept(std::mem::take(&mut history)),
        None => counterlab_core::sort_history(&mut history),
    }
    let history_dropped = ctx.history_dropped.load(Ordering::Relaxed);
    LoadResult { ops, elapsed, error_samples, stages, history, history_dropped, client_cpu }
}

/// This process's CPU time so far, every thread, user and system (None where the OS gives
/// no process clock).
pub fn process_cpu() -> Option<Duration> {
    #[cfg(target_os = "linux")]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        Some(Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
    }
    #[cfg(not(target_os = "linux"))]
    None
}

#[cfg(test)]
mod tests {
    use counterlab_core::{ErrorClass, Outcome};

    use super::*;
    use crate::null::NullStrategy;

    fn open(seed: u64, from: f64, to: f64, poisson: bool, secs: f64) -> DriverConfig {
        let stages = vec![Stage {
            name: "s".into(),
            stop: Stop::Duration(Duration::from_secs_f64(secs)),
            model: LoadModel::Open { rate_from: from, rate_to: to, poisson, max_in_flight: 4 },
            measured: true,
        }];
        DriverConfig::plain(seed, stages, Mix { weights: [1, 1, 0, 0, 0, 1] })
    }

    async fn scheduled(cfg: &DriverConfig) -> (u64, u64, u64) {
        let s: Arc<dyn Strategy> = Arc::new(NullStrategy::default());
        let load = run_load(s, Arc::new(IdPool::seeded(100, 5, 0)), cfg, Monitor::new()).await;
        let (scheduled, started, dropped, _, _) = load.open_loop_totals();
        assert_eq!(started, load.total_ops() + load.ops.iter().map(|o| o.skipped).sum::<u64>());
        (scheduled, dropped, started)
    }

    /// Counts (16 KiB per 2048) a worker's histograms hold.
    fn counts_held(w: &Worker) -> usize {
        let stats = w.stats.iter().flatten().map(|s| s.latency_us.distinct_values() + s.service_us.distinct_values());
        stats.sum::<usize>() + w.lag_us.as_ref().map_or(0, |h| h.distinct_values())
    }

    /// A histogram as every worker's were made before they grew: sized for a second.
    fn presized() -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(1, 1 << 20, 3).unwrap();
        h.auto(true);
        h
    }

    #[test]
    fn a_fresh_worker_holds_no_histogram_and_an_active_one_only_what_its_values_need() {
        let mut w = Worker::new(0);
        assert_eq!(counts_held(&w), 0, "idle workers cost no histogram");
        w.stats(OpKind::ReadCount).skipped += 1;
        // One kind's two histograms at their smallest, far below a second's range.
        assert_eq!(counts_held(&w), 2 * 2048);
        // A closed loop's op grows the latency histogram only: the service one stays at
        // its smallest (the stage copies the latencies into it once).
        w.stats(OpKind::ReadCount).record(3_000_000, None, &Ok(false), &Tries::default());
        let s = w.stats(OpKind::ReadCount);
        assert!(s.latency_us.distinct_values() > 2048 && s.service_us.distinct_values() == 2048);
        assert_eq!(s.service_us.len(), 0);
        w.stats[OpKind::ReadCount.index()] = None;
        w.stats(OpKind::ReadCount).skipped += 1;
        assert_eq!(presized().distinct_values(), 12_288);
        w.record_lag(40);
        assert_eq!(counts_held(&w), 3 * 2048);
    }

    #[test]
    fn a_growing_histogram_records_values_near_and_past_the_old_bound_as_a_presized_one() {
        let mix = Mix { weights: [1, 0, 0, 0, 0, 0] };
        let max_us = DriverConfig::plain(1, DriverConfig::closed_stage(1, Stop::Ops(1)), mix).max_latency_us();
        let mut w = Worker::new(0);
        let mut old = presized();
        for us in [1, 999, 2047, 65_537, (1 << 20) - 1, 1 << 20, max_us] {
            w.stats(OpKind::Create).record(us, Some(us), &Ok(true), &Tries::default());
            old.record(us).unwrap();
        }
        let new = &w.stats[OpKind::Create.index()].as_ref().unwrap().latency_us;
        assert_eq!((new.len(), new.min(), new.max(), new.mean()), (old.len(), old.min(), old.max(), old.mean()));
        for v in [(1 << 20) - 1, 1 << 20, max_us] {
            assert_eq!(new.count_at(v), old.count_at(v), "{v}");
        }
        assert!(new.equivalent(new.max(), max_us), "the bound itself is kept");
        let q = |h: &Histogram<u64>| [0.5, 0.9, 0.99, 1.0].map(|q| h.value_at_quantile(q));
        assert_eq!(q(new), q(&old));
    }

    /// Every odd-numbered create call loses its reply (after "applying"); every fourth
    /// read never replies, the others reply after 5 ms (so a worker's timer, armed for
    /// its first op, fires while a later op is still within its own bound).
    #[derive(Default)]
    struct Flaky {
        creates: std::sync::atomic::AtomicU64,
        reads: std::sync::atomic::AtomicU64,
        inner: NullStrategy,
    }

    #[async_trait::async_trait]
    impl Strategy for Flaky {
        fn info(&self) -> counterlab_core::StrategyInfo {
            self.inner.info()
        }
        async fn create(&self, u: i64) -> Result<i64, OpError> {
            if self.creates.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) {
                return Err(OpError::new(ErrorClass::Timeout, Outcome::Unknown, "lost"));
            }
            self.inner.create(u).await
        }
        async fn mark_read(&self, u: i64, id: i64) -> Result<bool, OpError> {
            self.inner.mark_read(u, id).await
        }
        async fn delete(&self, u: i64, id: i64) -> Result<bool, OpError> {
            self.inner.delete(u, id).await
        }
        async fn mark_all_read(&self, u: i64) -> Result<u64, OpError> {
            self.inner.mark_all_read(u).await
        }
        async fn read_count(&self, u: i64) -> Result<i64, OpError> {
            if self.reads.fetch_add(1, Ordering::Relaxed) % 4 == 3 {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            self.inner.read_count(u).await
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_history_records_every_call_and_blind_retries() {
        for on_unknown in [false, true] {
            let mut cfg = open(1, 1.0, 1.0, false, 1.0);
            cfg.stages = DriverConfig::closed_stage(1, Stop::Ops(20));
            cfg.mix = Mix { weights: [1, 0, 0, 0, 0, 0] };
            cfg.retry = RetryPolicy { max_attempts: 3, on_unknown, ..cfg.retry };
            cfg.history_limit = 15;
            let s: Arc<dyn Strategy> = Arc::new(Flaky::default());
            let load = run_load(s, Arc::new(IdPool::seeded(5, 5, 0)), &cfg, Monitor::new()).await;
            // The limit holds and the rest is counted.
            assert_eq!((load.history.len(), load.history_dropped), (15, 5));
            assert!(load.history.windows(2).all(|w| w[0].complete_us <= w[1].complete_us));
            for e in &load.history {
                assert_eq!(e.op, OpKind::Create);
                assert!(e.invoke_us <= e.complete_us);
                if on_unknown {
                    // Every create lost its first reply, was run again and then replied.
                    assert_eq!((e.outcome, e.attempts, e.unknown_attempts), (Outcome::Ok, 2, 1), "{e:?}");
                    assert!(e.id > 0);
                } else {
                    assert_eq!(e.attempts, 1);
                    assert_eq!(e.unknown_attempts, 0);
                }
            }
            if !on_unknown {
                // Without the policy, unknown outcomes stay unknown: calls alternate.
                let unknown = load.history.iter().filter(|e| e.outcome == Outcome::Unknown).count();
                assert_eq!(unknown, 8, "{:?}", load.history);
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_workers_one_timer_bounds_each_op_from_its_own_start_timed_out_or_not() {
        let mut cfg =
            DriverConfig::plain(3, DriverConfig::closed_stage(1, Stop::Ops(24)), Mix { weights: [0, 0, 0, 0, 0, 1] });
        (cfg.op_timeout, cfg.history_limit) = (Duration::from_millis(30), 100);
        let s: Arc<dyn Strategy> = Arc::new(Flaky::default());
        let load = run_load(s, Arc::new(IdPool::seeded(5, 5, 0)), &cfg, Monitor::new()).await;
        let reads = load.op(OpKind::ReadCount);
        // The six hung calls timed out (unknown: they may have applied); the timer, armed
        // again after each, cut no other call short.
        assert_eq!((reads.ok, reads.unknown, reads.errors_by_class[ErrorClass::Timeout.index()]), (18, 6, 6));
        let timed_out: Vec<&Event> = load.history.iter().filter(|e| e.outcome == Outcome::Unknown).collect();
        assert_eq!(timed_out.len(), 6);
        // None fired before the op timeout, counted from the op's own start.
        assert!(timed_out.iter().all(|e| e.complete_us - e.invoke_us >= 30_000), "{timed_out:?}");
        assert_eq!(reads.latency_us.count_between(30_000, u64::MAX), 6);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batched_worker_sends_its_ops_together_and_records_each_with_the_batchs_times() {
        let mut cfg =
            DriverConfig::plain(9, DriverConfig::closed_stage(2, Stop::Ops(50)), Mix { weights: [2, 4, 0, 1, 1, 2] });
        (cfg.batch, cfg.history_limit) = (8, 1_000);
        let s: Arc<dyn Strategy> = Arc::new(crate::NullStrategy::default());
        let load = run_load(s, Arc::new(IdPool::seeded(5, 5, 0)), &cfg, Monitor::new()).await;
        let skipped: u64 = load.ops.iter().map(|s| s.skipped).sum();
        assert_eq!(load.total_ops() + skipped, 50, "each worker's budget of 25 in batches of 8, 8, 8 and 1");
        assert_eq!(load.history.len() as u64, load.total_ops());
        for w in 0..2 {
            let calls: Vec<&Event> = load.history.iter().filter(|e| e.worker == w).collect();
            let mut batches: Vec<(u64, u64)> = calls.iter().map(|e| (e.invoke_us, e.complete_us)).collect();
            batches.dedup();
            // Four batches a worker (fewer calls when a mark_read or delete found no
            // target): each call carries its batch's send and reply.
            assert!(batches.len() <= 4 && calls.len() + 8 > 4 * batches.len(), "{batches:?}");
            assert!(batches.windows(2).all(|b| b[0].1 <= b[1].0), "a worker's batches do not overlap: {batches:?}");
        }
        let creates = load.history.iter().filter(|e| e.op == OpKind::Create);
        assert!(creates.clone().count() > 0 && creates.clone().all(|e| e.id >= 1 << 40 && e.observed == 1));
    }

    /// Collects what the workers hand over, chunk by chunk.
    #[derive(Debug, Default)]
    struct Collect(std::sync::Mutex<Vec<Vec<Event>>>);

    impl HistorySink for Collect {
        fn accept(&self, calls: Vec<Event>) {
            self.0.lock().unwrap().push(calls);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sink_gets_every_call_in_chunks_while_the_load_runs() {
        let run = |sink: Option<Arc<Collect>>| async move {
            let mut cfg = DriverConfig::plain(
                4,
                DriverConfig::closed_stage(3, Stop::Ops(20_000)),
                Mix { weights: [1, 2, 0, 1, 1, 2] },
            );
            cfg.history_limit = 19_000;
            cfg.history_sink = sink.map(|s| s as Arc<dyn HistorySink>);
            let s: Arc<dyn Strategy> = Arc::new(NullStrategy::default());
            run_load(s, Arc::new(IdPool::seeded(50, 5, 0)), &cfg, Monitor::new()).await
        };
        let sink = Arc::new(Collect::default());
        let load = run(Some(sink.clone())).await;
        let chunks = std::mem::take(&mut *sink.0.lock().unwrap());
        assert!(load.history.is_empty(), "the sink took them");
        assert!(load.history_dropped > 0, "the limit holds with a sink too");
        // Handed over while running: full chunks, then what each stage's workers held.
        assert!(chunks.iter().filter(|c| c.len() >= HISTORY_CHUNK).count() >= 3, "{}", chunks.len());
        let mut got: Vec<Event> = chunks.concat();
        assert_eq!((got.len() as u64, got.len() as u64 + load.history_dropped), (19_000, load.total_ops()));
        counterlab_core::sort_history(&mut got);
        assert!(got.windows(2).all(|w| w[0].complete_us <= w[1].complete_us));
        assert!(got.iter().all(|e| e.invoke_us <= e.complete_us && e.attempts == 1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_constant_schedule_has_rate_times_duration_ops_all_issued() {
        let (n, dropped, issued) = scheduled(&open(1, 2000.0, 2000.0, false, 0.5)).await;
        assert_eq!((n, dropped, issued), (1000, 0, 1000));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_ramp_schedules_its_mean_rate() {
        // 1000 -> 3000 ops/s over 0.5 s: the integral is 1000 ops.
        let (n, _, _) = scheduled(&open(1, 1000.0, 3000.0, false, 0.5)).await;
        assert!((995..=1005).contains(&n), "{n}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_ramp_from_almost_nothing_still_schedules_its_integral() {
        // 0.05 -> 2000 ops/s over 0.5 s: about 500 ops. Stepping by the rate at the last
        // arrival would wait 20 s for the second one and schedule a single op.
        let (n, _, _) = scheduled(&open(1, 0.05, 2000.0, false, 0.5)).await;
        assert!((490..=510).contains(&n), "{n}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn poisson_arrivals_replay_from_the_seed() {
        let a = scheduled(&open(7, 2000.0, 2000.0, true, 0.5)).await.0;
        let b = scheduled(&open(7, 2000.0, 2000.0, true, 0.5)).await.0;
        let c = scheduled(&open(8, 2000.0, 2000.0, true, 0.5)).await.0;
        assert_eq!(a, b, "same seed, same schedule");
        // 1000 expected, standard deviation about 32.
        for n in [a, c] {
            assert!((850..=1150).contains(&n), "{n}");
        }
    }

    /// read_count spends `spin` of this process's CPU on each of its first `spun` calls,
    /// then sleeps `sleep` instead (no CPU).
    struct Costly {
        calls: AtomicU64,
        spun: u64,
        spin: Duration,
        sleep: Duration,
        inner: NullStrategy,
    }

    #[async_trait::async_trait]
    impl Strategy for Costly {
        fn info(&self) -> counterlab_core::StrategyInfo {
            self.inner.info()
        }
        async fn create(&self, u: i64) -> Result<i64, OpError> {
            self.inner.create(u).await
        }
        async fn mark_read(&self, u: i64, id: i64) -> Result<bool, OpError> {
            self.inner.mark_read(u, id).await
        }
        async fn delete(&self, u: i64, id: i64) -> Result<bool, OpError> {
            self.inner.delete(u, id).await
        }
        async fn mark_all_read(&self, u: i64) -> Result<u64, OpError> {
            self.inner.mark_all_read(u).await
        }
        async fn read_count(&self, _: i64) -> Result<i64, OpError> {
            if self.calls.fetch_add(1, Ordering::Relaxed) < self.spun {
                let until = process_cpu().unwrap() + self.spin;
                while process_cpu().unwrap() < until {
                    std::hint::spin_loop();
                }
            } else {
                tokio::time::sleep(self.sleep).await;
            }
            Ok(0)
        }
    }

    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "current_thread")]
    async fn the_client_cpu_is_the_process_cpu_over_the_measured_stages_only() {
        let run = |warm_up: u64, spun: u64, spin_ms: u64| async move {
            let mut cfg = open(1, 1.0, 1.0, false, 1.0);
            let stage = |name: &str, ops, measured| Stage {
                name: name.into(),
                stop: Stop::Ops(ops),
                model: LoadModel::Closed { workers: 2 },
                measured,
            };
            cfg.stages = vec![stage("warm-up", warm_up, false), stage("load", 20, true)];
            cfg.mix = Mix { weights: [0, 0, 0, 0, 0, 1] };
            let (spin, sleep) = (Duration::from_millis(spin_ms), Duration::from_millis(2));
            let s = Costly { calls: AtomicU64::new(0), spun, spin, sleep, inner: NullStrategy::default() };
            let load = run_load(Arc::new(s), Arc::new(IdPool::seeded(5, 5, 0)), &cfg, Monitor::new()).await;
            load.client_cpu_us_per_op().expect("Linux has a process clock")
        };
        // Every measured op spends 3 ms of CPU: at least that per op.
        let spinning = run(1, 21, 3).await;
        assert!(spinning >= 3000.0, "{spinning} us per op");
        // Only the warm-up spins (10 ops x 100 ms): counted, it would add 50 000 us to each
        // of the 20 sleeping ops. The process clock also holds another test's thread
        // running meanwhile (cargo runs one a core): under 25 000 us an op unless the
        // ~20 ms stage stretches past half a second.
        let sleeping = run(10, 10, 100).await;
        assert!(sleeping < 25_000.0, "{sleeping} us per op");
    }
}
