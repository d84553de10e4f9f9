//! One schedule on the real server: K sessions, each one op (with the design's retries),
//! every server call held at the step gate until the schedule grants it. A granted step
//! that does not come back while the server shows one more of the namespace's sessions
//! waiting on a lock is blocked: another session goes on. The server decides locks,
//! conflicts and snapshots; the schedule decides only the order of the calls.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use counterlab_core::explore::Schedule;
use counterlab_core::{NotificationId, OpError, SeedSpec, Strategy, UserId};
use counterlab_strategies::gate::{self, Gate, GateEvent};
use counterlab_strategies::{Db, Namespace, hold_session};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use super::ops::Op;

/// How often a step that has not come back is looked at on the server.
const PROBE_EVERY: Duration = Duration::from_millis(5);
/// One server call of a schedule, in the order granted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// 1-based session number.
    pub session: usize,
    /// What was sent (SQL with its arguments in place).
    pub sent: String,
    /// What came back (None: it never did, e.g. cut off by the end of the schedule).
    pub saw: Option<String>,
    /// Whether it waited on a lock another session held before it came back.
    pub blocked: bool,
}

/// How one session's op ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    pub op: Op,
    /// The id acted on and the reply (1: changed; mark_all_read: how many), or the error.
    pub result: Result<(NotificationId, i64), String>,
    /// Attempts made (the design's retries after a conflict the server rolled back).
    pub attempts: u32,
    /// The outcome of a failed op: "fail" (did not apply) or "unknown".
    pub outcome: String,
    /// Logical times (step counts) of its first step and its end.
    pub invoked: u64,
    pub completed: u64,
}

/// A schedule that ran to its end.
#[derive(Clone, Debug)]
pub struct Ran {
    pub steps: Vec<Step>,
    pub ended: Vec<Ended>,
}

/// Sessions of any work that ran to their end under a schedule (`run_gated`): the steps
/// in the order granted, and each session's logical span (its first step, its end).
#[derive(Clone, Debug)]
pub struct Gated {
    pub steps: Vec<Step>,
    pub spans: Vec<(u64, u64)>,
}

/// How a schedule is driven: the namespace whose lock waiters tell a blocked step, the
/// bound of every wait, and whether a local step is glued to the next (`local`).
#[derive(Clone, Copy)]
pub struct Driving<'a> {
    pub ns: &'a Namespace,
    pub op_timeout: Duration,
    pub reduce: bool,
}

/// Where a session is, as the scheduler sees it.
enum At {
    /// Running its own code (between calls).
    Running,
    /// At the gate with `sent` ready (and whether the design declared it independent).
    Gate(String, oneshot::Sender<()>, bool),
    /// Its granted call (step index) is on the server.
    Flight(usize),
    /// Its granted call waits on a lock.
    Blocked(usize),
    Done,
}

/// What a schedule runs with.
pub struct Setup<'a> {
    pub strategy: Arc<dyn Strategy>,
    pub db: Db,
    pub ns: &'a Namespace,
    pub seed: SeedSpec,
    pub user: UserId,
    pub max_attempts: u32,
    /// Bounds every wait: a step, a blocked session freed, the whole schedule's end.
    pub op_timeout: Duration,
    /// Whether a ready local step is granted without branching (`local`).
    pub reduce: bool,
}

/// Whether a step is local: a plain `BEGIN`. On PostgreSQL and MariaDB/MySQL it takes
/// no snapshot (that comes with the transaction's first statement) and no lock, and
/// SQLite's deferred `BEGIN` takes no lock either (its locking `BEGIN IMMEDIATE` is not
/// local). Such a step is independent of every other session's step, so moving it later,
/// next to its session's following step, changes nothing any session sees: every order
/// is equivalent to one where each `BEGIN` is glued to that step, and only those run.
/// Gluing keeps the preemption count of the orders that remain: the two serial orders
/// still have none. A step the design declares independent (`gate::independent`: a
/// broker consumer's apply and ack, which no op's step reads or writes) is glued the
/// same way.
pub fn local(sent: &str) -> bool {
    sent == "BEGIN"
}

impl Setup<'_> {
    fn driving(&self) -> Driving<'_> {
        Driving { ns: self.ns, op_timeout: self.op_timeout, reduce: self.reduce }
    }
}

/// The scheduler's view of one schedule in progress.
struct Run<'s> {
    at: Vec<At>,
    steps: Vec<Step>,
    spans: Vec<Option<(u64, u64)>>,
    first_step: Vec<Option<u64>>,
    clock: u64,
    schedule: &'s mut Schedule,
    /// The session whose local step was just granted: its next step goes on unchosen.
    glued: Option<usize>,
}

/// Runs `ops` (one per session) under `schedule`. Err: the explorer could not go on
/// (a step neither came back nor waited on a lock within the op timeout, or a replayed
/// prefix met other sessions able to go on than the first time).
pub async fn run_schedule(setup: &Setup<'_>, ops: &[Op], schedule: &mut Schedule) -> Result<Ran, String> {
    let slots: Slots = Arc::new(Mutex::new(vec![None; ops.len()]));
    let bodies = ops.iter().enumerate().map(|(i, &op)| session(setup, i, op, slots.clone())).collect();
    let gated = run_gated(setup.driving(), bodies, schedule).await?;
    let mut slots = slots.lock().expect("slots lock");
    let ended = (slots.iter_mut().zip(gated.spans))
        .map(|(e, (invoked, completed))| Ended { invoked, completed, ..e.take().expect("every session ended") })
        .collect();
    Ok(Ran { steps: gated.steps, ended })
}

/// Runs `bodies` (one per session: its whole work, each on a connection of its own with
/// every server call gated) under `schedule`. Err as `run_schedule`'s.
pub async fn run_gated(
    driving: Driving<'_>,
    bodies: Vec<futures_util::future::BoxFuture<'static, ()>>,
    schedule: &mut Schedule,
) -> Result<Gated, String> {
    let (gtx, mut grx) = mpsc::unbounded_channel::<GateEvent>();
    let n = bodies.len();
    let mut tasks = Vec::new();
    for (i, body) in bodies.into_iter().enumerate() {
        let ended_tx = gtx.clone();
        // `Ended` goes on the gate's channel, after the session's last `Done`.
        let body = async move {
            body.await;
            let _ = ended_tx.send(GateEvent::Ended { session: i });
        };
        tasks.push(tokio::spawn(hold_session(gate::scope(Gate { session: i, tx: gtx.clone() }, body))));
    }
    drop(gtx);
    let mut run = Run {
        at: (0..n).map(|_| At::Running).collect(),
        steps: Vec::new(),
        spans: vec![None; n],
        first_step: vec![None; n],
        clock: 0,
        schedule,
        glued: None,
    };
    let r = drive(&mut run, driving, &mut grx).await;
    for t in &tasks {
        t.abort();
    }
    r?;
    let spans = run.spans.into_iter().map(|e| e.expect("every session ended")).collect();
    Ok(Gated { steps: run.steps, spans })
}

/// Where each session leaves how its op ended.
type Slots = Arc<Mutex<Vec<Option<Ended>>>>;

/// One session's work: its op with the design's retries.
fn session(setup: &Setup<'_>, i: usize, op: Op, slots: Slots) -> futures_util::future::BoxFuture<'static, ()> {
    let (strategy, db, seed, user, max) =
        (setup.strategy.clone(), setup.db.clone(), setup.seed, setup.user, setup.max_attempts.max(1));
    Box::pin(async move {
        let mut attempts = 0;
        let r = loop {
            attempts += 1;
            let r = op.run(strategy.as_ref(), seed, user).await;
            if let Err(e) = &r {
                // The failed transaction's rollback goes out as a step of its own.
                let _ = db.flush_rollback().await;
                if e.retryable() && attempts < max {
                    continue;
                }
            }
            break r;
        };
        let outcome = match &r {
            Err(e) if e.outcome == counterlab_core::Outcome::Unknown => "unknown",
            _ => "fail",
        }
        .to_string();
        let ended = Ended {
            op,
            result: r.map_err(|e: OpError| format!("{}: {}", e.class.name(), e.message)),
            attempts,
            outcome,
            invoked: 0,
            completed: 0,
        };
        slots.lock().expect("slots lock")[i] = Some(ended);
    })
}

/// The scheduler's loop: settle, then grant one enabled session's step, until every
/// session has ended.
async fn drive(
    run: &mut Run<'_>,
    setup: Driving<'_>,
    grx: &mut mpsc::UnboundedReceiver<GateEvent>,
) -> Result<(), String> {
    let started = Instant::now();
    let bound = setup.op_timeout * 4;
    loop {
        settle(run, setup, grx).await?;
        let enabled: Vec<usize> = (0..run.at.len()).filter(|&i| matches!(run.at[i], At::Gate(..))).collect();
        if enabled.is_empty() {
            if run.at.iter().all(|a| matches!(a, At::Done)) {
                return Ok(());
            }
            // Every session left waits on a lock: the server breaks the deadlock (or
            // its lock wait times out) and one of them comes back.
            if started.elapsed() > bound {
                return Err(format!("sessions {} stayed blocked for {bound:?}", blocked_list(run)));
            }
            let ev = next(grx, setup.op_timeout).await.ok_or_else(|| {
                format!("sessions {} blocked and nothing came back within {:?}", blocked_list(run), setup.op_timeout)
            })?;
            apply(run, ev);
            continue;
        }
        // The step after a local one follows it with no choice between them.
        let enabled = match run.glued.take() {
            Some(g) if enabled.contains(&g) => vec![g],
            _ => enabled,
        };
        let s = run.schedule.choose(&enabled)?;
        let At::Gate(sent, grant, independent) = std::mem::replace(&mut run.at[s], At::Running) else { unreachable!() };
        if setup.reduce && (independent || local(&sent)) {
            run.glued = Some(s);
        }
        run.clock += 1;
        run.first_step[s].get_or_insert(run.clock);
        run.steps.push(Step { session: s + 1, sent, saw: None, blocked: false });
        run.at[s] = At::Flight(run.steps.len() - 1);
        let _ = grant.send(());
    }
}

fn blocked_list(run: &Run<'_>) -> String {
    let b: Vec<String> =
        (0..run.at.len()).filter(|&i| matches!(run.at[i], At::Blocked(_))).map(|i| (i + 1).to_string()).collect();
    b.join(", ")
}

/// Waits until no session runs its own code or has a call on the server that neither
/// came back nor waits on a lock, and every session marked blocked still waits.
async fn settle(
    run: &mut Run<'_>,
    setup: Driving<'_>,
    grx: &mut mpsc::UnboundedReceiver<GateEvent>,
) -> Result<(), String> {
    let started = Instant::now();
    loop {
        while let Ok(ev) = grx.try_recv() {
            apply(run, ev);
        }
        let moving = run.at.iter().any(|a| matches!(a, At::Running | At::Flight(..)));
        let blocked = run.at.iter().filter(|a| matches!(a, At::Blocked(_))).count() as u64;
        if !moving {
            // Done when every session known to wait still waits.
            if blocked == 0 || setup.ns.lock_waiters_still().await.map_err(|e| format!("lock probe: {e}"))? >= blocked {
                return Ok(());
            }
        } else if let Some(i) = flight(run) {
            mark_if_blocked(run, setup, i, blocked).await?;
        }
        if started.elapsed() > setup.op_timeout {
            return Err(stuck(run, setup));
        }
        if let Ok(Some(ev)) = tokio::time::timeout(PROBE_EVERY, grx.recv()).await {
            apply(run, ev);
        }
    }
}

/// Why a schedule could not go on: which session's call neither came back nor waited on
/// a lock, after which steps.
fn stuck(run: &Run<'_>, setup: Driving<'_>) -> String {
    let done: Vec<String> = run.steps.iter().map(|s| format!("[{}] {}", s.session, s.sent)).collect();
    let at: Vec<String> = run
        .at
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let what = match a {
                At::Running => "running its own code".to_string(),
                At::Gate(sent, ..) => format!("ready to send {sent}"),
                At::Flight(step) => format!("sent {} (no reply, no lock wait)", run.steps[*step].sent),
                At::Blocked(step) => format!("waits on a lock in {}", run.steps[*step].sent),
                At::Done => "done".to_string(),
            };
            format!("session {}: {what}", i + 1)
        })
        .collect();
    format!("stuck for {:?}: {}; after steps {}", setup.op_timeout, at.join("; "), done.join(" / "))
}

/// The session whose granted call is on the server and not known to wait.
fn flight(run: &Run<'_>) -> Option<usize> {
    (0..run.at.len()).find(|&i| matches!(run.at[i], At::Flight(..)))
}

/// Marks session `i`'s call blocked when the server shows one more lock waiter than the
/// sessions already known to wait (SQLite: sleeping in its busy handler, `busy.rs`).
async fn mark_if_blocked(run: &mut Run<'_>, setup: Driving<'_>, i: usize, blocked: u64) -> Result<(), String> {
    let At::Flight(step) = run.at[i] else { return Ok(()) };
    if setup.ns.lock_waiters().await.map_err(|e| format!("lock probe: {e}"))? > blocked {
        run.steps[step].blocked = true;
        run.at[i] = At::Blocked(step);
    }
    Ok(())
}

fn apply(run: &mut Run<'_>, ev: GateEvent) {
    match ev {
        GateEvent::Ready { session, step, grant, independent } => run.at[session] = At::Gate(step, grant, independent),
        GateEvent::Done { session, shown } => {
            if let At::Flight(step) | At::Blocked(step) = run.at[session] {
                run.steps[step].saw = Some(shown);
            }
            run.clock += 1;
            run.at[session] = At::Running;
        }
        GateEvent::Ended { session } => {
            run.clock += 1;
            run.spans[session] = Some((run.first_step[session].unwrap_or(run.clock), run.clock));
            run.at[session] = At::Done;
        }
    }
}

async fn next(grx: &mut mpsc::UnboundedReceiver<GateEvent>, bound: Duration) -> Option<GateEvent> {
    tokio::time::timeout(bound, grx.recv()).await.ok().flatten()
}
