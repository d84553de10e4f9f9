//! The open loop as a constant-arrival-rate executor (k6's model): a pacer task inside the
//! runtime produces the stage's intended start times (constant or Poisson, flat or
//! ramping) on a precise timer and hands each op at once to an idle worker, starting a
//! new one while fewer than `max_in_flight` exist; when all are busy the op waits in a
//! bounded backlog, and an op no worker starts within `max_wait` is dropped.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::timer::Timer;
use super::{Ctx, LATE_AFTER, Stop, Worker, join_workers, worker_stream};
use crate::workload::{OpGen, PlannedOp, UserPicker};
use counterlab_core::Rng;

/// An op and its intended start.
type Item = (PlannedOp, Instant);

/// Runs open-loop stage `idx` from `start` at `rate` (`rate_from`, `rate_to`, poisson),
/// served by at most `max_in_flight` workers. Returns the workers, how many ops the pacer
/// scheduled and how many it dropped because the backlog was full.
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
    let plan = Plan::new(stage_plan(cfg.seed, idx, cfg.mix, users), rate, stop);
    // The pacer runs as a task on a runtime thread, so the ops it hands out start there
    // without waking another thread.
    let pool = Pool::new(ctx.clone(), max_in_flight, backlog_bound(rate, cfg.max_wait, max_in_flight));
    let pacer = tokio::spawn(pace(pool, plan, start, stop));
    let (handles, scheduled, backlog_dropped) = pacer.await.expect("pacer panicked");
    let ws = join_workers(handles).await;
    (ws, scheduled, backlog_dropped)
}

/// The seeded op and gap streams of stage `idx`'s schedule.
fn stage_plan(seed: u64, idx: usize, mix: crate::workload::Mix, users: &Arc<UserPicker>) -> (OpGen, Rng) {
    let ops = OpGen::new(seed, worker_stream(idx, 1 << 19), mix, users.clone());
    let gaps = Rng::derive(seed, worker_stream(idx, (1 << 19) + 1));
    (ops, gaps)
}

/// Ops that may wait for a worker: what arrives within `max_wait` at the peak rate, plus
/// one per worker; at most 2^20.
fn backlog_bound(rate: (f64, f64, bool), max_wait: Duration, max_in_flight: u32) -> usize {
    let peak = rate.0.max(rate.1);
    ((peak * max_wait.as_secs_f64()).ceil() as usize + max_in_flight as usize).clamp(1, 1 << 20)
}

/// The pacer: waits for each intended start and hands the op out. Returns the workers'
/// handles, how many ops it scheduled and how many it dropped for a full backlog.
async fn pace(mut pool: Pool, plan: Plan, start: Instant, stop: Stop) -> (Vec<JoinHandle<Worker>>, u64, u64) {
    let (mut scheduled, mut dropped) = (0u64, 0u64);
    let (ctx, mut timer) = (pool.ctx.clone(), Timer::new());
    let (cancel, max_wait) = (&ctx.cfg.cancel, ctx.cfg.max_wait);
    let length = match stop {
        Stop::Duration(d) => Some(d),
        Stop::Ops(_) => None,
    };
    for (t, op) in plan {
        // A pacer that has fallen more than `max_wait` behind by the stage's end stops
        // (what it would still produce would only be dropped). Within that slack the
        // schedule, and so its op count, depends on the seed alone.
        let late = length.is_some_and(|len| start.elapsed() >= len + max_wait);
        if late || cancel.load(Ordering::Relaxed) {
            break;
        }
        let intended = start + Duration::from_secs_f64(t);
        if !timer.sleep_until(intended, cancel).await {
            break;
        }
        scheduled += 1;
        ctx.monitor.scheduled(1);
        if !pool.offer((op, intended)) {
            dropped += 1;
            ctx.monitor.dropped(1);
        }
        // A pacer running behind hands out ops without waiting: let the workers run.
        tokio::task::consume_budget().await;
    }
    // Dropping the hand-off channels ends each worker once the backlog is drained.
    (pool.finish(), scheduled, dropped)
}

/// The workers of a stage, started on demand up to a maximum, and their backlog.
struct Pool {
    ctx: Arc<Ctx>,
    shared: Arc<Shared>,
    /// One hand-off channel per worker started (capacity 1: an idle worker's is empty).
    slots: Vec<mpsc::Sender<Item>>,
    handles: Vec<JoinHandle<Worker>>,
    max: u32,
}

/// What the pacer and the workers share.
struct Shared {
    state: Mutex<State>,
    /// The backlog's capacity.
    bound: usize,
}

struct State {
    /// Workers waiting on their channel, the last one to finish on top.
    idle: Vec<u32>,
    /// Ops that found every worker busy, oldest first.
    backlog: VecDeque<Item>,
}

impl Pool {
    fn new(ctx: Arc<Ctx>, max: u32, bound: usize) -> Pool {
        let state = Mutex::new(State { idle: Vec::new(), backlog: VecDeque::new() });
        Pool { ctx, shared: Arc::new(Shared { state, bound }), slots: Vec::new(), handles: Vec::new(), max }
    }

    /// Hands `item` to an idle worker, else to a new one while fewer than `max` exist,
    /// else to the backlog. False (nothing taken) when the backlog is full.
    fn offer(&mut self, item: Item) -> bool {
        let mut s = self.shared.state.lock().expect("pool lock");
        if let Some(i) = s.idle.pop() {
            drop(s);
            // An idle worker waits on its empty channel; it left the idle list only now.
            return self.slots[i as usize].try_send(item).is_ok();
        }
        if self.slots.len() < self.max as usize {
            drop(s);
            let id = self.slots.len() as u32;
            let (tx, rx) = mpsc::channel(1);
            self.slots.push(tx);
            let w = worker(self.ctx.clone(), (id, self.max), self.shared.clone(), rx, item);
            self.handles.push(tokio::spawn(w));
            return true;
        }
        if s.backlog.len() >= self.shared.bound {
            return false;
        }
        s.backlog.push_back(item);
        true
    }

    /// Closes the hand-off channels: each worker stops when it finds nothing left.
    fn finish(self) -> Vec<JoinHandle<Worker>> {
        self.handles
    }

    /// How many workers were started.
    #[cfg(test)]
    fn started(&self) -> usize {
        self.slots.len()
    }
}

impl Shared {
    /// The oldest backlogged op, or (none left) `id` joins the idle list.
    fn next_or_idle(&self, id: u32) -> Option<Item> {
        let mut s = self.state.lock().expect("pool lock");
        let item = s.backlog.pop_front();
        if item.is_none() {
            s.idle.push(id);
        }
        item
    }
}

/// One worker (`id` of at most `max`), inside the strategy's worker scope as a
/// closed-loop worker is (a SQL design holds it a connection of its own: no pool wait,
/// no release ping per op).
async fn worker(
    ctx: Arc<Ctx>,
    (id, max): (u32, u32),
    shared: Arc<Shared>,
    rx: mpsc::Receiver<Item>,
    first: Item,
) -> Worker {
    let mut w = Worker::new(id);
    let strategy = ctx.strategy.clone();
    strategy.worker_scope(max, Box::pin(serve_loop(&ctx, &mut w, &shared, rx, first))).await;
    w
}

/// Serves the op the worker was started with, then backlogged ops, then waits idle for
/// the pacer's next hand-off; ends when the pacer has finished and nothing is left.
async fn serve_loop(ctx: &Ctx, w: &mut Worker, shared: &Shared, mut rx: mpsc::Receiver<Item>, first: Item) {
    let id = w.id;
    let mut next = Some(first);
    loop {
        let item = match next.take().or_else(|| shared.next_or_idle(id)) {
            Some(item) => item,
            None => match rx.recv().await {
                Some(item) => item,
                None => break,
            },
        };
        if ctx.cfg.cancel.load(Ordering::Relaxed) {
            break;
        }
        serve(ctx, w, item).await;
    }
}

/// Runs `op` unless it already waited longer than `max_wait` (then it is dropped).
async fn serve(ctx: &Ctx, w: &mut Worker, (op, intended): Item) {
    let lag = Instant::now().saturating_duration_since(intended);
    if lag > ctx.cfg.max_wait {
        w.dropped += 1;
        ctx.monitor.dropped(1);
        return;
    }
    w.record_lag((lag.as_micros() as u64).min(ctx.max_us));
    if lag > LATE_AFTER {
        w.late += 1;
    }
    ctx.run_op(w, op, Some(intended)).await;
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

/// A stage's schedule: intended starts (seconds from the stage's start) with their ops,
/// from the stage's seeded streams alone. The first op is due at 0.
struct Plan {
    arrivals: Arrivals,
    ops: OpGen,
    gaps: Rng,
    stop: Stop,
    length: Option<f64>,
    t: f64,
    n: u64,
}

impl Plan {
    fn new((ops, gaps): (OpGen, Rng), rate: (f64, f64, bool), stop: Stop) -> Plan {
        let length = match stop {
            Stop::Duration(d) => Some(d.as_secs_f64()),
            Stop::Ops(_) => None,
        };
        Plan { arrivals: Arrivals::new(rate, length), ops, gaps, stop, length, t: 0.0, n: 0 }
    }
}

impl Iterator for Plan {
    type Item = (f64, PlannedOp);

    /// Ends after the stage's length (a gap of infinity ends it too) or its op count.
    fn next(&mut self) -> Option<(f64, PlannedOp)> {
        if self.n > 0 {
            self.t += self.arrivals.gap(self.t, &mut self.gaps);
        }
        let done = match self.stop {
            Stop::Duration(_) => self.length.is_some_and(|len| self.t >= len),
            Stop::Ops(n) => self.n >= n,
        };
        if done {
            return None;
        }
        self.n += 1;
        Some((self.t, self.ops.next_op()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use counterlab_core::{NotificationId, OpError, Strategy, StrategyInfo, UserId};

    use super::super::{DriverConfig, LoadModel, Stage, run_load};
    use super::*;
    use crate::monitor::Monitor;
    use crate::null::NullStrategy;
    use crate::pool::IdPool;
    use crate::workload::{Mix, Skew};

    const MIX: Mix = Mix { weights: [1, 1, 0, 0, 0, 1] };

    fn plan(seed: u64, rate: (f64, f64, bool), stop: Stop) -> Vec<(f64, PlannedOp)> {
        let users = Arc::new(UserPicker::new(100, Skew::Uniform));
        Plan::new(stage_plan(seed, 0, MIX, &users), rate, stop).collect()
    }

    fn secs(s: f64) -> Stop {
        Stop::Duration(Duration::from_secs_f64(s))
    }

    #[test]
    fn a_stage_plans_its_rate_times_its_length_or_its_op_count() {
        // Constant: the first op at 0, then every 1/rate: exactly rate x length.
        let flat = plan(1, (2000.0, 2000.0, false), secs(0.5));
        assert_eq!(flat.len(), 1000);
        assert!(flat.windows(2).all(|w| (w[1].0 - w[0].0 - 0.0005).abs() < 1e-9));
        // A ramp schedules its integral: 1000 -> 3000 over 0.5 s is 1000 ops.
        assert!((999..=1001).contains(&plan(1, (1000.0, 3000.0, false), secs(0.5)).len()));
        // An op count ends the schedule whatever the rate; Poisson too.
        assert_eq!(plan(1, (50.0, 50.0, false), Stop::Ops(37)).len(), 37);
        assert_eq!(plan(1, (50.0, 50.0, true), Stop::Ops(37)).len(), 37);
        // Every intended start lies within the stage, in order.
        let p = plan(3, (2000.0, 500.0, true), secs(0.5));
        assert!(p.iter().all(|&(t, _)| (0.0..0.5).contains(&t)));
        assert!(p.windows(2).all(|w| w[0].0 <= w[1].0));
        // 625 expected, standard deviation 25.
        assert!((500..=750).contains(&p.len()), "{}", p.len());
    }

    #[test]
    fn a_seed_replays_the_intended_schedule_and_its_ops() {
        let rate = (1500.0, 2500.0, true);
        let (a, b, c) = (plan(7, rate, secs(0.4)), plan(7, rate, secs(0.4)), plan(8, rate, secs(0.4)));
        assert_eq!(a, b, "same seed, same times and ops");
        assert_ne!(a, c, "another seed, another schedule");
        // Another stage of the same seed has its own streams.
        let users = Arc::new(UserPicker::new(100, Skew::Uniform));
        let other: Vec<_> = Plan::new(stage_plan(7, 1, MIX, &users), rate, secs(0.4)).collect();
        assert_ne!(a, other);
    }

    /// Every op holds its worker for 200 ms and counts how many are in flight at once.
    #[derive(Default)]
    struct Slow {
        in_flight: AtomicU64,
        most: AtomicU64,
    }

    impl Slow {
        async fn hold(&self) {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(200)).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }

    #[async_trait::async_trait]
    impl Strategy for Slow {
        fn info(&self) -> StrategyInfo {
            NullStrategy::default().info()
        }
        async fn create(&self, _: UserId) -> Result<NotificationId, OpError> {
            self.hold().await;
            Ok(1 << 40)
        }
        async fn mark_read(&self, _: UserId, _: NotificationId) -> Result<bool, OpError> {
            self.hold().await;
            Ok(true)
        }
        async fn delete(&self, _: UserId, _: NotificationId) -> Result<bool, OpError> {
            self.hold().await;
            Ok(true)
        }
        async fn mark_all_read(&self, _: UserId) -> Result<u64, OpError> {
            self.hold().await;
            Ok(0)
        }
        async fn read_count(&self, _: UserId) -> Result<i64, OpError> {
            self.hold().await;
            Ok(0)
        }
    }

    fn open_stage(name: &str, rate: f64, stop: Stop, max_in_flight: u32) -> Stage {
        let model = LoadModel::Open { rate_from: rate, rate_to: rate, poisson: false, max_in_flight };
        Stage { name: name.into(), stop, model, measured: true }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pool_stays_within_its_bound_and_drops_what_waited_past_max_wait() {
        // 1000 ops/s for 0.3 s served by at most 2 workers whose ops take 200 ms: an op
        // starts at most max_wait (100 ms) after its intended time, so before 0.4 s, and a
        // worker fits at most 2 such starts; everything else is dropped, and counted.
        let mut cfg = DriverConfig::plain(5, vec![open_stage("s", 1000.0, secs(0.3), 2)], MIX);
        cfg.max_wait = Duration::from_millis(100);
        cfg.history_limit = 10_000;
        let slow = Arc::new(Slow::default());
        let s: Arc<dyn Strategy> = slow.clone();
        let load = run_load(s, Arc::new(IdPool::seeded(100, 5, 0)), &cfg, Monitor::new()).await;
        let (scheduled, started, dropped, _, _) = load.open_loop_totals();
        assert_eq!(scheduled, 300, "the schedule is the seed's, whatever the workers do");
        assert!((1..=4).contains(&started), "{started} started");
        assert_eq!(scheduled, started + dropped);
        assert!((1..=2).contains(&slow.most.load(Ordering::SeqCst)), "never more than max_in_flight at once");
        let workers: std::collections::BTreeSet<u32> = load.history.iter().map(|e| e.worker).collect();
        assert!(workers.iter().all(|&w| w < 2), "{workers:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_stage_counts_its_own_schedule_and_issues_all_of_it() {
        let stages = vec![
            open_stage("a", 2000.0, secs(0.25), 8),
            open_stage("b", 800.0, Stop::Ops(120), 8),
            open_stage("c", 4000.0, secs(0.25), 8),
        ];
        let cfg = DriverConfig::plain(3, stages, MIX);
        let s: Arc<dyn Strategy> = Arc::new(NullStrategy::default());
        let load = run_load(s, Arc::new(IdPool::seeded(100, 5, 0)), &cfg, Monitor::new()).await;
        let got: Vec<(u64, u64, u64)> = load.stages.iter().map(|r| (r.scheduled, r.started, r.dropped)).collect();
        assert_eq!(got, [(500, 500, 0), (120, 120, 0), (1000, 1000, 0)]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pool_starts_workers_on_demand_up_to_its_maximum_and_backlogs_the_rest() {
        let cfg = DriverConfig::plain(1, vec![open_stage("s", 1.0, secs(1.0), 3)], MIX);
        let slow: Arc<dyn Strategy> = Arc::new(Slow::default());
        let idp = Arc::new(IdPool::seeded(10, 5, 0));
        let strategy = slow;
        let ctx = Arc::new(Ctx {
            strategy,
            pool: idp,
            cfg: Arc::new(cfg),
            monitor: Monitor::new(),
            max_us: 10_000_000,
            t0: Instant::now(),
            recorded: AtomicU64::new(0),
            history_dropped: AtomicU64::new(0),
        });
        let op = PlannedOp { kind: counterlab_core::OpKind::ReadCount, user: 1, pick: 0 };
        let mut pool = Pool::new(ctx, 3, 2);
        let now = Instant::now();
        // Three ops start three workers; the next two wait in the backlog; the sixth
        // finds it full.
        let taken: Vec<bool> = (0..6).map(|_| pool.offer((op, now))).collect();
        assert_eq!(taken, [true, true, true, true, true, false]);
        assert_eq!(pool.started(), 3);
        let ws = join_workers(pool.finish()).await;
        // Each worker ran its own op and the backlog was drained: five served in all.
        assert_eq!(ws.iter().map(|w| w.issued_or_skipped + w.dropped).sum::<u64>(), 5);
    }

    /// Counts the worker scopes it is asked to run and the ops that run outside one (as
    /// a SQL design would borrow from its pool for them).
    #[derive(Default)]
    struct Scoped {
        scopes: AtomicU64,
        largest: AtomicU64,
        outside: AtomicU64,
    }

    tokio::task_local! {
        static IN_SCOPE: ();
    }

    impl Scoped {
        fn op(&self) {
            if IN_SCOPE.try_with(|_| ()).is_err() {
                self.outside.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    #[async_trait::async_trait]
    impl Strategy for Scoped {
        fn info(&self) -> StrategyInfo {
            NullStrategy::default().info()
        }
        async fn worker_scope<'a>(&'a self, workers: u32, run: counterlab_core::WorkerLoop<'a>) {
            self.scopes.fetch_add(1, Ordering::SeqCst);
            self.largest.fetch_max(u64::from(workers), Ordering::SeqCst);
            IN_SCOPE.scope((), run).await
        }
        async fn create(&self, _: UserId) -> Result<NotificationId, OpError> {
            self.op();
            tokio::task::yield_now().await;
            Ok(1 << 40)
        }
        async fn mark_read(&self, _: UserId, _: NotificationId) -> Result<bool, OpError> {
            self.op();
            Ok(true)
        }
        async fn delete(&self, _: UserId, _: NotificationId) -> Result<bool, OpError> {
            self.op();
            Ok(true)
        }
        async fn mark_all_read(&self, _: UserId) -> Result<u64, OpError> {
            self.op();
            Ok(0)
        }
        async fn read_count(&self, _: UserId) -> Result<i64, OpError> {
            self.op();
            tokio::task::yield_now().await;
            Ok(0)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn open_loop_workers_run_their_ops_inside_the_strategy_s_worker_scope() {
        // As closed-loop workers do: a SQL design then holds each one a connection, so
        // no op pays the pool's release ping.
        let cfg = DriverConfig::plain(9, vec![open_stage("s", 2000.0, secs(0.25), 4)], MIX);
        let scoped = Arc::new(Scoped::default());
        let s: Arc<dyn Strategy> = scoped.clone();
        let load = run_load(s, Arc::new(IdPool::seeded(100, 5, 0)), &cfg, Monitor::new()).await;
        let (_, started, _, _, _) = load.open_loop_totals();
        assert_eq!(started, 500);
        assert_eq!(scoped.outside.load(Ordering::SeqCst), 0, "every op ran inside a scope");
        assert!((1..=4).contains(&scoped.scopes.load(Ordering::SeqCst)), "one scope per worker started");
        assert_eq!(scoped.largest.load(Ordering::SeqCst), 4, "each told the most workers there may be");
    }
}
