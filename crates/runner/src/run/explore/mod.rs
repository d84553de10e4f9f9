//! `counterlab explore`: every order of two (or three) concurrent ops' server calls, run
//! on the real server from a fresh state each, judged by the checker. For each strategy x
//! backend x level of a plan, one namespace seeded with as many identical fresh users as
//! schedules may run (each schedule takes the next user, so its state is fresh and
//! nothing is reset), then per op pair a depth-first search over the schedules
//! (`core::explore`), each run by `session::run_schedule`.

mod attach;
mod ops;
mod script;
mod session;

use counterlab_core::Figure;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use counterlab_core::explore::{Explorer, Left, Schedule};
use counterlab_core::{
    CheckInput, Context, Event, Fault, Guarantee, Outcome, ReadFrom, SeedSpec, Strategy, UserId, classify,
};
use counterlab_plan::RunPlan;
use counterlab_strategies::{BackendError, Db, Namespace, statement_for};

pub use attach::{attach, summary};
pub use ops::{Op, STATE_WORDS, pairs, parse_pair};
pub use script::{
    EXPLORE_SCHEMA_VERSION, Explored, Failing, Pair, PairResult, ReplayFile, columns, markdown, safe_detail,
    script_lines,
};
pub use session::{Driving, Ended, Gated, Step, run_gated};

use super::one::{self, Cell, Made};
use super::servers::Servers;
use super::{RunOptions, Target};

/// What to explore.
#[derive(Clone, Debug)]
pub struct ExploreConfig {
    /// Sessions per schedule (2 or 3): the first ops of each pair (a third session
    /// repeats the second op).
    pub sessions: usize,
    /// The most schedules run per op pair.
    pub budget: u64,
    /// The most preemptions a schedule may have (None: any number).
    pub preemptions: Option<u32>,
    /// The op pairs (None: the whole matrix, `pairs()`).
    pub pairs: Option<Vec<(Op, Op)>>,
    /// Replay exactly this schedule (one pair, one schedule, from `--replay`).
    pub replay: Option<Vec<usize>>,
    /// Glue a plain `BEGIN` to its session's next step, with no choice between them
    /// (`session::local`): it takes no snapshot and no lock, so no order of it against
    /// another session's step can change what either sees. False: `--no-reduction`,
    /// and replays of files written without it.
    pub reduce: bool,
}

impl ExploreConfig {
    /// The scenario's `[explore]` as a config (the flags of `counterlab explore` may then
    /// override it). Err: a pair the plan names that is not an op pair.
    pub fn of_plan(e: &counterlab_plan::ExplorePlan) -> Result<ExploreConfig, String> {
        let pairs: Result<Vec<_>, String> = e.pairs.iter().map(|(a, b)| parse_pair(&format!("{a},{b}"))).collect();
        Ok(ExploreConfig {
            sessions: e.sessions as usize,
            budget: e.budget,
            preemptions: e.preemptions,
            pairs: Some(pairs?).filter(|p| !p.is_empty()),
            replay: None,
            reduce: true,
        })
    }

    fn pairs(&self) -> Vec<(Op, Op)> {
        self.pairs.clone().unwrap_or_else(pairs)
    }

    /// The sessions' ops for a pair: a third session repeats the second op, and a design
    /// with background work adds one pass of it (`Op::Flush`, `Op::Consume`) as a
    /// session of its own.
    fn ops(&self, (a, b): (Op, Op), background: Option<Op>) -> Vec<Op> {
        let mut v = vec![a, b];
        v.extend(std::iter::repeat_n(b, self.sessions.saturating_sub(2)));
        v.extend(background);
        v
    }
}

/// Explores every strategy x backend x level of `plan`.
pub async fn explore_plan(
    plan: &RunPlan,
    opts: &RunOptions,
    cfg: &ExploreConfig,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<Explored>, BackendError> {
    assert!((2..=3).contains(&cfg.sessions), "2 or 3 sessions");
    let mut plan = plan.clone();
    // One more for a design's background pass (`Op::Flush`, `Op::Consume`), two spare.
    plan.workload.connections = cfg.sessions as u32 + 3;
    plan.workload.n_workers = cfg.sessions as u32;
    let run_id = super::new_run_id();
    let servers = Servers::connect(&plan, opts, &run_id, log).await?;
    log(&format!("explore {run_id}"));
    let mut out = Vec::new();
    for server in &servers.sql {
        for name in &plan.strategies {
            let mut skipped = Vec::new();
            let Some((info, (redis, amqp), levels)) =
                super::cells_of(&plan, opts, server, &servers, name, &mut skipped)?
            else {
                for s in skipped {
                    out.push(skipped_row(name, s.backend.name(), s.isolation.name(), s.reason, cfg));
                }
                continue;
            };
            for isolation in levels {
                if opts.cancel.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let n = cfg.pairs().len() as u64 * cfg.budget.min(MAX_USERS_PER_PAIR) + 1;
                let t = Target {
                    server,
                    redis,
                    amqp,
                    run_id: &run_id,
                    name,
                    info,
                    isolation,
                    seed: ops::seed(cfg.replay_user().unwrap_or(n)),
                    repeat: 0,
                    index: (out.len() + 1, out.len() + 1),
                    read_from: ReadFrom::Primary,
                };
                out.push(explore_cell(&plan, opts, cfg, t, log).await);
            }
        }
    }
    Ok(out)
}

/// Users seeded per op pair at most: the budget beyond it reuses none (the search stops).
const MAX_USERS_PER_PAIR: u64 = 5_000;

impl ExploreConfig {
    /// A replay runs on user 1 of a namespace with two users (the second is the spare
    /// user `warm_up` runs on).
    fn replay_user(&self) -> Option<u64> {
        self.replay.as_ref().map(|_| 2)
    }
}

fn skipped_row(name: &str, backend: String, isolation: &str, why: String, cfg: &ExploreConfig) -> Explored {
    Explored {
        strategy: name.to_string(),
        guarantee: String::new(),
        declares_exact: false,
        dialect: String::new(),
        backend,
        isolation: isolation.to_string(),
        state: STATE_WORDS.to_string(),
        preemption_bound: cfg.preemptions,
        budget: cfg.budget,
        reduced: cfg.reduce,
        pairs: Vec::new(),
        skipped: Some(why),
    }
}

/// One strategy on one backend at one level: set up, every pair explored, cleaned up.
async fn explore_cell(
    plan: &RunPlan,
    opts: &RunOptions,
    cfg: &ExploreConfig,
    t: Target<'_>,
    log: &mut dyn FnMut(&str),
) -> Explored {
    let cell = Cell::new(plan, opts, t);
    let mut row = skipped_row(cell.t.name, cell.backend.name(), cell.t.isolation.name(), String::new(), cfg);
    row.guarantee = cell.t.info.guarantee.name().to_string();
    row.declares_exact = cell.t.info.guarantee == Guarantee::Exact;
    row.dialect = cell.t.server.dialect().name().to_string();
    row.skipped = None;
    let ns = match cell.t.server.create_namespace(&cell.ns_name, cell.pool_spec()).await {
        Ok(ns) => ns,
        Err(e) => {
            row.skipped = Some(super::validate::reason(&e));
            return row;
        }
    };
    ns.quick_lock_waits();
    let mut made = Made::default();
    let bound = cell.bounds().setup;
    let built = match one::refuse_unconfined(&cell, &ns) {
        Err(e) => Err(super::validate::reason(&e)),
        Ok(()) => match tokio::time::timeout(bound, one::seed(&cell, &ns, &mut made)).await {
            Ok(r) => r.map_err(|e| super::validate::reason(&e)),
            Err(_) => Err(super::deadline::over("setup", bound)),
        },
    };
    match built {
        Ok(strategy) => {
            let background = warm_up(strategy.as_ref(), cell.t.seed, cell.op_timeout()).await;
            if cell.t.info.guarantee == Guarantee::Eventual && !background {
                row.skipped = Some(NOT_GATED.into());
            }
            let background = background.then(|| background_op(&cell));
            let mut users = 0;
            for pair in cfg.pairs().into_iter().filter(|_| row.skipped.is_none()) {
                let started = Instant::now();
                let ops = cfg.ops(pair, background);
                let result = explore_pair(&cell, &ns, strategy.clone(), cfg, &ops, &mut users).await;
                let p = Pair { ops, result, seconds: started.elapsed().as_secs_f64() };
                log(&format!(
                    "{}: {} ‖ {}: {} ({} schedules, {:.1}s)",
                    cell.label(),
                    pair.0.name(),
                    pair.1.name(),
                    p.result.label(),
                    p.result.explored(),
                    p.seconds
                ));
                row.pairs.push(p);
                if opts.cancel.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
            }
        }
        Err(why) => row.skipped = Some(why),
    }
    let failed = one::cleanup(&cell, ns, made, log).await;
    if !failed.is_empty() {
        log(&format!("{}: cleanup failed: {}", cell.label(), failed.join("; ")));
    }
    row
}

/// The session a design's background pass runs as: the broker designs' consumer; an
/// exact design's reconciler (a design that stays exact while it runs: judged as the
/// schedule leaves it); an eventual design's flush (judged after settle drains it).
fn background_op(cell: &Cell<'_>) -> Op {
    match (cell.t.amqp.is_some(), cell.t.info.guarantee) {
        (true, _) => Op::Consume,
        (false, Guarantee::Exact) => Op::Reconcile,
        (false, _) => Op::Flush,
    }
}

/// Why an eventual design without a background pass is not explored.
const NOT_GATED: &str = "an eventual design with no background pass the explorer can run as a session (a \
     reconciler that is not one yet, or background tasks the explorer cannot see are absent): its schedules are \
     not explored";

/// Runs every op once, outside any schedule, on the namespace's last user (a spare no
/// schedule takes), so that what a design does only the first time (a script's NOSCRIPT
/// reload, a lazily prepared statement) is not a step of the first schedule alone: a
/// step the first schedule has and the second has not makes the search not repeatable.
/// What the ops answer is not looked at; each is bounded by the op timeout. Then one
/// background pass: whether the design has one (its schedules then add it as a session).
async fn warm_up(strategy: &dyn Strategy, seed: SeedSpec, bound: std::time::Duration) -> bool {
    let spare = seed.n_users as UserId;
    for op in ops::Op::ALL {
        let _ = tokio::time::timeout(bound, op.run(strategy, seed, spare)).await;
    }
    matches!(tokio::time::timeout(bound, strategy.background_pass()).await, Ok(Ok(true)))
}

/// Every schedule of one op pair (within the budget and bound), each on a fresh user.
async fn explore_pair(
    cell: &Cell<'_>,
    ns: &Namespace,
    strategy: Arc<dyn Strategy>,
    cfg: &ExploreConfig,
    ops: &[Op],
    users: &mut u64,
) -> PairResult {
    let mut ex = Explorer::new(cfg.preemptions, cfg.budget.min(MAX_USERS_PER_PAIR));
    let mut tally = Tally::default();
    let setup = |user| session::Setup {
        strategy: strategy.clone(),
        db: ns.db().clone(),
        ns,
        seed: cell.t.seed,
        user,
        max_attempts: cell.plan.retry.max_attempts,
        op_timeout: cell.op_timeout(),
        reduce: cfg.reduce,
    };
    loop {
        if cell.opts.cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return interrupted(ex.explored, tally.failing, tally.first);
        }
        let mut schedule = match (&cfg.replay, ex.explored) {
            (Some(choices), 0) => Schedule::following(choices.clone()),
            (Some(_), _) => break,
            (None, _) => match ex.next_schedule() {
                Some(s) => s,
                None => break,
            },
        };
        *users += 1;
        let user = if cfg.replay.is_some() { 1 } else { *users as UserId };
        let claims = arm_background_fault(cell, strategy.as_ref(), ops).await;
        let ran = match session::run_schedule(&setup(user), ops, &mut schedule).await {
            Ok(r) => r,
            Err(why) => return PairResult::Error { explored: ex.explored, why },
        };
        tally.retried += ran.ended.iter().any(|e| e.attempts > 1) as u64;
        match judged(ns, strategy.as_ref(), (cell, claims), user, ran, &schedule).await {
            Ok(f) => tally.add(f, Claims::of(strategy.as_ref()).since(claims).crashes > 0),
            Err(why) => return PairResult::Error { explored: ex.explored, why },
        }
        if cfg.replay.is_some() {
            ex.explored += 1;
            continue;
        }
        if let Err(why) = ex.finished(&schedule) {
            let why = format!(
                "not repeatable: {why} (the server or the design answered otherwise on the same \
                 order of steps; a design that chooses at random, a random counter slot say, cannot \
                 be explored step by step)"
            );
            return PairResult::Error { explored: ex.explored, why };
        }
    }
    outcome(ex.explored, tally, ex.left(), cfg)
}

/// What a pair's schedules found so far.
#[derive(Default)]
struct Tally {
    failing: u64,
    retried: u64,
    /// Schedules in which the design's own fault (a flusher's or consumer's crash) fired.
    faulted: u64,
    /// The shortest failing schedule.
    first: Option<Failing>,
}

impl Tally {
    fn add(&mut self, failing: Option<Failing>, faulted: bool) {
        self.faulted += faulted as u64;
        if let Some(f) = failing {
            self.failing += 1;
            if self.first.as_ref().is_none_or(|g| f.steps.len() < g.steps.len()) {
                self.first = Some(f);
            }
        }
    }
}

/// A pair whose search Ctrl-C or SIGTERM stopped: what it found so far.
fn interrupted(explored: u64, failing: u64, first: Option<Failing>) -> PairResult {
    match first {
        Some(f) => PairResult::Unsafe { explored, failing, first: Box::new(f) },
        None => PairResult::NotExplored { explored, left: format!("interrupted after {explored} schedules") },
    }
}

/// The pair's result from what its search found.
fn outcome(explored: u64, tally: Tally, left: Option<Left>, cfg: &ExploreConfig) -> PairResult {
    let Tally { failing, retried, faulted, first } = tally;
    match (first, left) {
        (Some(f), _) => PairResult::Unsafe { explored, failing, first: Box::new(f) },
        (None, _) if cfg.replay.is_some() => PairResult::Safe { explored, retried, faulted },
        (None, None) => PairResult::Safe { explored, retried, faulted },
        (None, Some(Left::Budget)) => {
            PairResult::NotExplored { explored, left: format!("the budget of {} schedules ran out", cfg.budget) }
        }
        (None, Some(Left::Bound { pruned })) => PairResult::NotExplored {
            explored,
            left: format!(
                "{pruned} alternative(s) beyond the bound of {} preemption(s) not run",
                cfg.preemptions.unwrap_or(0)
            ),
        },
    }
}

/// The background work's own counts (its figures): the flusher's lost and doubled
/// claims, the consumer's applies of a redelivered message (raising, lowering), and the
/// crashes at the design's fault point (flusher's and consumer's).
#[derive(Clone, Copy, Debug, Default)]
struct Claims {
    lost_flushes: u64,
    double_flushes: u64,
    double_applies: (u64, u64),
    crashes: u64,
}

impl Claims {
    fn of(strategy: &dyn Strategy) -> Claims {
        let figures = strategy.figures();
        let f = |k: Figure| figures.iter().find(|(n, _)| *n == k).map_or(0, |(_, v)| *v as u64);
        Claims {
            lost_flushes: f(Figure::LostFlushClaims),
            double_flushes: f(Figure::DoubleFlushClaims),
            double_applies: (f(Figure::DoubleAppliesRaising), f(Figure::DoubleAppliesLowering)),
            crashes: f(Figure::FlusherCrashes) + f(Figure::ConsumerCrashes),
        }
    }

    /// What was counted since `before`.
    fn since(self, before: Claims) -> Claims {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        Claims {
            lost_flushes: d(self.lost_flushes, before.lost_flushes),
            double_flushes: d(self.double_flushes, before.double_flushes),
            double_applies: (
                d(self.double_applies.0, before.double_applies.0),
                d(self.double_applies.1, before.double_applies.1),
            ),
            crashes: d(self.crashes, before.crashes),
        }
    }
}

/// The faults that fire in a background session, at the design's own fault point.
const BACKGROUND_FAULTS: [Fault; 2] = [Fault::FlusherCrash, Fault::ConsumerCrashAfterApply];

/// With a background session and a fault of it (`flusher_crash`,
/// `consumer_crash_after_apply`) scheduled for the strategy, the pass of this schedule
/// dies at the design's fault point (as under load). Returns the background work's
/// counts before the schedule, so its own lost, doubled and re-applied deltas of this
/// schedule name the drift.
async fn arm_background_fault(cell: &Cell<'_>, strategy: &dyn Strategy, ops: &[Op]) -> Claims {
    let scheduled = |k: Fault| cell.plan.faults.iter().any(|f| f.fault == k && f.applies_to(cell.t.name));
    if ops.iter().any(|o| o.background()) {
        for k in BACKGROUND_FAULTS.into_iter().filter(|&k| scheduled(k) && strategy.takes(k)) {
            let _ = strategy.inject(k).await;
        }
    }
    Claims::of(strategy)
}

/// The schedule as a failing one when its counter is not the truth (None: exact).
async fn judged(
    ns: &Namespace,
    strategy: &dyn Strategy,
    (cell, claims): (&Cell<'_>, Claims),
    user: UserId,
    ran: session::Ran,
    schedule: &Schedule,
) -> Result<Option<Failing>, String> {
    let (counter, truth, anomalies) = judge(ns, strategy, (cell, claims), user, &ran).await?;
    if ran.ended.iter().any(|x| x.op == Op::Reconcile) {
        // Judged; now the reconciler's quiet passes repair whatever the schedule left
        // wrong, so the next schedule's passes find every other user exact (and take the
        // same steps).
        let e = |e: counterlab_core::OpError| format!("settling after the schedule: {}", e.message);
        strategy.settle(cell.op_timeout()).await.map_err(e)?;
    }
    // Keys read without the namespace's prefix.
    let prefix = counterlab_strategies::redis_prefix(&cell.ns_name);
    let steps = ran.steps.into_iter().map(|s| Step { sent: s.sent.replace(&prefix, ""), ..s }).collect();
    Ok((counter != Some(truth)).then(|| Failing {
        choices: schedule.order(),
        user,
        steps,
        ended: ran.ended,
        counter,
        truth,
        anomalies,
    }))
}

/// The user's counter and truth after the schedule, and what the checker names.
async fn judge(
    ns: &Namespace,
    strategy: &dyn Strategy,
    (cell, claims): (&Cell<'_>, Claims),
    user: UserId,
    ran: &session::Ran,
) -> Result<(Option<i64>, i64, Vec<String>), String> {
    let db: &Db = ns.db();
    let d = db.dialect();
    let e = |e: counterlab_core::OpError| format!("reading the counter back: {}", e.message);
    if ran.ended.iter().any(|x| x.op.background() && x.op != Op::Reconcile) {
        // What the schedule left buffered is applied, outside any schedule, as the
        // run's settle would: judged is the state the design converges to. (A design
        // with a reconciler claims exactness while it runs: judged as left.)
        let settle = |e: counterlab_core::OpError| format!("draining after the schedule: {}", e.message);
        strategy.settle(cell.op_timeout()).await.map_err(settle)?;
    }
    // A Redis counter read by the design itself (one key), unless reads come from a cache
    // that may lag; else every user's counters as the final check reads them.
    let counter = if cell.t.redis.is_some() && strategy.read_lag().is_none() {
        Some(strategy.read_count(user).await.map_err(e)?)
    } else {
        match strategy.counters(cell.t.seed.n_users).await.map_err(e)? {
            Some(c) => c.get(user),
            None => db.opt_i64(statement_for(d, "counter_read"), &[user]).await.map_err(e)?,
        }
    };
    let rows: Vec<(i64, bool)> = db.rows(statement_for(d, "user_rows"), &[user]).await.map_err(e)?;
    let truth = rows.iter().filter(|(_, read)| !read).count() as i64;
    if counter == Some(truth) {
        return Ok((counter, truth, Vec::new()));
    }
    let events = events_of(cell.t.seed, user, ran);
    let counted = Claims::of(strategy).since(claims);
    let cx = Context {
        guarantee: cell.t.info.guarantee,
        lost_flushes: counted.lost_flushes,
        double_flushes: counted.double_flushes,
        double_applies: counted.double_applies,
        reconciler: false,
        seed: cell.t.seed,
        failover_us: None,
    };
    let found = classify(&events, &[CheckInput { user, counter, truth }], None, &[], cx);
    let mut names: BTreeMap<&str, ()> = BTreeMap::new();
    for a in &found {
        names.insert(a.name, ());
    }
    Ok((counter, truth, names.into_keys().map(String::from).collect()))
}

/// The schedule's ops as the history records them, on the logical clock.
fn events_of(seed: SeedSpec, user: UserId, ran: &session::Ran) -> Vec<Event> {
    ran.ended
        .iter()
        .enumerate()
        .filter_map(|(i, e)| Some((i, e, e.op.kind()?)))
        .map(|(i, e, op)| {
            let (id, observed, outcome) = match &e.result {
                Ok((id, v)) => (*id, *v, Outcome::Ok),
                Err(_) if e.outcome == "unknown" => (e.op.target(seed, user).unwrap_or(0), 0, Outcome::Unknown),
                Err(_) => (0, 0, Outcome::Fail),
            };
            Event {
                worker: i as u32,
                op,
                user,
                id,
                invoke_us: e.invoked * 1000,
                complete_us: e.completed * 1000,
                outcome,
                observed,
                attempts: e.attempts,
                unknown_attempts: 0,
            }
        })
        .collect()
}

/// The seed of `n` users (for the replay command's namespace).
pub fn seed_of(n: u64) -> SeedSpec {
    ops::seed(n)
}
