//! The open loop: a pacer thread produces the stage's intended start times (constant or
//! Poisson, flat or ramping) into a bounded queue, and at most N workers serve it,
//! dropping ops that waited longer than `max_wait`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Ctx, LATE_AFTER, Stop, Worker, join_workers, worker_stream};
use crate::metrics::record_us;
use crate::monitor::Monitor;
use crate::rng::Rng;
use crate::workload::{OpGen, PlannedOp, UserPicker};

/// Runs open-loop stage `idx` from `start` at `rate` (`rate_from`, `rate_to`, poisson),
/// served by `max_in_flight` workers. Returns the workers, how many ops the pacer
/// scheduled and how many it dropped because the queue was full.
pub(super) async fn run(
    ctx: &Arc<Ctx>,
    idx: usize,
    stop: Stop,
    start: Instant,
    users: &Arc<UserPicker>,
    rate: (f64, f64, bool),
    max_in_flight: u32,
) -> (Vec<Worker>, u64, u64) {
    let cfg = &ctx.cfg;
    let peak = rate.0.max(rate.1);
    let bound = ((peak * cfg.max_wait.as_secs_f64()).ceil() as usize + max_in_flight as usize).min(1 << 20);
    let schedule = Arc::new(Schedule {
        items: Mutex::new(VecDeque::new()),
        ready: tokio::sync::Semaphore::new(0),
        bound: bound.max(1),
    });
    let handles: Vec<_> = (0..max_in_flight).map(|i| tokio::spawn(worker(ctx.clone(), i, schedule.clone()))).collect();
    let ops = OpGen::new(cfg.seed, worker_stream(idx, 1 << 19), cfg.mix, users.clone());
    let gaps = Rng::derive(cfg.seed, worker_stream(idx, (1 << 19) + 1));
    let (s, m, cancel, max_wait) = (schedule.clone(), ctx.monitor.clone(), cfg.cancel.clone(), cfg.max_wait);
    let pacer = std::thread::Builder::new()
        .name("counterlab-pacer".into())
        .spawn(move || {
            let r = pace(&s, &m, &cancel, ops, gaps, start, stop, max_wait, rate);
            s.ready.close();
            r
        })
        .expect("spawn the pacer thread");
    let (scheduled, queue_dropped) =
        tokio::task::spawn_blocking(move || pacer.join().expect("pacer panicked")).await.expect("join pacer");
    let ws = join_workers(handles).await;
    (ws, scheduled, queue_dropped)
}

/// The open loop's hand-off between the pacer thread and the workers: a bounded FIFO of
/// (op, intended start) and a semaphore counting its items.
struct Schedule {
    items: Mutex<VecDeque<(PlannedOp, Instant)>>,
    ready: tokio::sync::Semaphore,
    bound: usize,
}

impl Schedule {
    fn pop(&self) -> Option<(PlannedOp, Instant)> {
        self.items.lock().expect("schedule lock").pop_front()
    }

    /// Queues `op` for `intended` and wakes a worker; false (nothing queued) when full.
    fn offer(&self, op: PlannedOp, intended: Instant) -> bool {
        let mut q = self.items.lock().expect("schedule lock");
        if q.len() >= self.bound {
            return false;
        }
        q.push_back((op, intended));
        drop(q);
        self.ready.add_permits(1);
        true
    }
}

async fn worker(ctx: Arc<Ctx>, id: u32, schedule: Arc<Schedule>) -> Worker {
    let mut w = Worker::new(ctx.max_us, id);
    let max_wait = ctx.cfg.max_wait;
    loop {
        if ctx.cfg.cancel.load(Ordering::Relaxed) {
            break;
        }
        // Closed (the schedule ended): drain what is left, then stop.
        let item = match schedule.ready.acquire().await {
            Ok(permit) => {
                permit.forget();
                schedule.pop()
            }
            Err(_) => match schedule.pop() {
                Some(item) => Some(item),
                None => break,
            },
        };
        let Some((op, intended)) = item else { continue };
        let lag = Instant::now().saturating_duration_since(intended);
        if lag > max_wait {
            w.dropped += 1;
            ctx.monitor.dropped(1);
            continue;
        }
        record_us(&mut w.lag_us, (lag.as_micros() as u64).min(ctx.max_us));
        if lag > LATE_AFTER {
            w.late += 1;
        }
        ctx.run_op(&mut w, op, intended).await;
    }
    w
}

/// Sleeps until `t` on a plain thread: the OS sleep for most of the gap (in slices of at
/// most 50 ms, so a cancel is seen), then yields for the last stretch (a timer wheel's
/// 1 ms ticks would be the schedule's error). False when cancelled first.
fn sleep_until_precise(t: Instant, cancel: &AtomicBool) -> bool {
    const SPIN: Duration = Duration::from_micros(80);
    const SLICE: Duration = Duration::from_millis(50);
    loop {
        let now = Instant::now();
        if now >= t {
            return true;
        }
        if cancel.load(Ordering::Relaxed) {
            return false;
        }
        let left = t - now;
        if left > SPIN {
            std::thread::sleep((left - SPIN).min(SLICE));
        } else {
            std::thread::yield_now();
        }
    }
}

/// An open-loop stage's arrivals: the rate is linear in t, the seconds from the stage's
/// start: rate(t) = rate_from + slope * t.
struct Arrivals {
    rate_from: f64,
    slope: f64,
    poisson: bool,
}

impl Arrivals {
    /// Going from `rate_from` to `rate_to` over `length` seconds (flat when the stage
    /// ends on an op count instead).
    fn new((rate_from, rate_to, poisson): (f64, f64, bool), length: Option<f64>) -> Arrivals {
        let slope = match length {
            Some(len) if len > 0.0 => (rate_to - rate_from) / len,
            _ => 0.0,
        };
        Arrivals { rate_from, slope, poisson }
    }

    /// The gap from an arrival at `t` to the next: the next is due when the integral of
    /// the rate since `t` reaches E (1, or an Exp(1) draw for Poisson arrivals), so solve
    /// r0 * g + slope / 2 * g^2 = E for the gap g, r0 the rate at t.
    fn gap(&self, t: f64, gaps: &mut Rng) -> f64 {
        let e = if self.poisson { -(1.0 - gaps.unit_f64()).ln() } else { 1.0 };
        let r0 = self.rate_from + self.slope * t;
        if self.slope.abs() < 1e-12 {
            e / r0
        } else {
            let disc = r0 * r0 + 2.0 * self.slope * e;
            if disc < 0.0 {
                f64::INFINITY // a falling rate reaches 0 before the next arrival
            } else {
                2.0 * e / (r0 + disc.sqrt())
            }
        }
    }
}

/// The pacer: produces the stage's intended start times and ops, on its own thread.
/// Returns how many ops it scheduled and how many it dropped because the queue was full.
#[allow(clippy::too_many_arguments)]
fn pace(
    schedule: &Schedule,
    monitor: &Monitor,
    cancel: &AtomicBool,
    mut ops: OpGen,
    mut gaps: Rng,
    start: Instant,
    stop: Stop,
    max_wait: Duration,
    rate: (f64, f64, bool),
) -> (u64, u64) {
    let (mut scheduled, mut dropped) = (0u64, 0u64);
    let length = match stop {
        Stop::Duration(d) => Some(d.as_secs_f64()),
        Stop::Ops(_) => None,
    };
    let arrivals = Arrivals::new(rate, length);
    let mut t = 0.0f64; // seconds from the stage's start
    loop {
        // The first op is due at t = 0.
        if scheduled > 0 {
            t += arrivals.gap(t, &mut gaps);
        }
        let done = match stop {
            Stop::Duration(_) => length.is_some_and(|len| t >= len),
            Stop::Ops(n) => scheduled >= n,
        };
        // Also on the clock: a pacer that has fallen more than `max_wait` behind by the
        // stage's end stops (what it would still produce would only be dropped). Within
        // that slack the schedule, and so its op count, depends on the seed alone.
        let late = length.is_some_and(|len| start.elapsed().as_secs_f64() >= len + max_wait.as_secs_f64());
        if done || late || cancel.load(Ordering::Relaxed) {
            break;
        }
        let intended = start + Duration::from_secs_f64(t);
        if !sleep_until_precise(intended, cancel) {
            break;
        }
        scheduled += 1;
        monitor.scheduled(1);
        if !schedule.offer(ops.next_op(), intended) {
            dropped += 1;
            monitor.dropped(1);
        }
    }
    (scheduled, dropped)
}
