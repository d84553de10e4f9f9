//! Property tests against the real servers: a generated sequential prefix of ops, then two
//! or three branches run concurrently, then settle and check: every counter equals the
//! rows (and every read fits the bounds its history allows) for each strategy that
//! declares a guarantee (SQL + Redis on PostgreSQL, the SQL designs on MariaDB too). The
//! racy design's cases run in seeded orders at the explorer's step gate, so it fails
//! whatever the machine's load, shrinks to a small case, that case fails again (a pair
//! of single ops: under every order of its calls the explorer tries) and the printed
//! seed replays the same cases.

use std::sync::Arc;
use std::time::{Duration, Instant};

use counterlab_core::{
    CheckInput, CounterVerdict, Event, Guarantee, OpError, OpKind, Outcome, Strategy, check_counters,
    check_reads_lagging,
};
use counterlab_strategies::{
    Isolation, Namespace, PoolSpec, RedisConfig, RedisServer, SeedSpec, Server, build, build_redis, needs_redis,
};
use proptest::prelude::{prop, prop_oneof};
use proptest::strategy::Strategy as _;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use crate::util;

const USERS: u64 = 2;
const PER_USER: u64 = 3;

/// One op of a case; ids are slots into the user's seeded notifications.
#[derive(Clone, Copy, Debug)]
enum Step {
    Create(i64),
    MarkRead(i64, i64),
    Delete(i64, i64),
    MarkAllRead(i64),
    ReadCount(i64),
}

#[derive(Clone, Debug)]
struct Case {
    prefix: Vec<Step>,
    branches: Vec<Vec<Step>>,
}

impl Case {
    fn size(&self) -> usize {
        self.prefix.len() + self.branches.iter().map(Vec::len).sum::<usize>()
    }
}

/// Ops over users `1..=users` and their first `slots` rows (a smaller space makes the
/// branches collide more often).
fn step(users: i64, slots: i64) -> impl proptest::strategy::Strategy<Value = Step> {
    let user = 1..=users;
    let slot = 0..slots;
    prop_oneof![
        2 => user.clone().prop_map(Step::Create),
        4 => (user.clone(), slot.clone()).prop_map(|(u, s)| Step::MarkRead(u, s)),
        2 => (user.clone(), slot).prop_map(|(u, s)| Step::Delete(u, s)),
        2 => user.clone().prop_map(Step::MarkAllRead),
        2 => user.prop_map(Step::ReadCount),
    ]
}

fn case(space: (i64, i64)) -> impl proptest::strategy::Strategy<Value = Case> {
    let (users, slots) = space;
    (
        prop::collection::vec(step(users, slots), 0..4),
        prop::collection::vec(prop::collection::vec(step(users, slots), 1..4), 2..=3),
    )
        .prop_map(|(prefix, branches)| Case { prefix, branches })
}

/// Every seeded user and row.
const FULL: (i64, i64) = (USERS as i64, PER_USER as i64);

/// The designs that declare a guarantee: 24 cases over every user and row, on the
/// machine's timing (a race they hold against shows under any order).
const REAL: Search = Search { cases: 24, repeat: 1, space: FULL, gated: false };

/// A fresh namespace (and Redis key space) seeded for one case.
struct Fixture {
    ns: Namespace,
    strategy: Arc<dyn Strategy>,
    redis: bool,
}

async fn fixture(server: &Server, redis: Option<&RedisServer>, name: &str) -> Fixture {
    let ns_name = counterlab::run::namespace_name(&counterlab::run::new_run_id(), &format!("prop_{name}"));
    let spec =
        PoolSpec { max_connections: 4, acquire_timeout: Duration::from_secs(5), isolation: Isolation::ReadCommitted };
    let ns = server.create_namespace(&ns_name, spec).await.unwrap();
    ns.seed(SeedSpec { n_users: USERS, notifications_per_user: PER_USER, initial_read_per_user: 0 }).await.unwrap();
    let strategy: Arc<dyn Strategy> = match redis {
        None => build(name, ns.db().clone()).unwrap(),
        Some(r) => {
            let space = r.space(&ns_name, Duration::from_secs(5), 4).await.unwrap();
            let cfg = RedisConfig {
                n_users: USERS,
                flush_interval: Duration::from_millis(5),
                flush_batch: 100,
                reconcile_interval: None,
                cache_delay: Duration::from_millis(50),
                cache_ttl: Duration::from_secs(10),
            };
            let s = build_redis(name, ns.db().clone(), space, cfg).unwrap();
            s.seed(SeedSpec { n_users: USERS, notifications_per_user: PER_USER, initial_read_per_user: 0 })
                .await
                .unwrap();
            s
        }
    };
    strategy.start().await;
    Fixture { ns, strategy, redis: redis.is_some() }
}

async fn apply(s: &dyn Strategy, step: Step, worker: u32, t0: Instant) -> Event {
    let id = |u: i64, slot: i64| (u - 1) * PER_USER as i64 + slot + 1;
    let invoke = t0.elapsed().as_micros() as u64;
    let (op, user, nid, r): (OpKind, i64, i64, Result<i64, OpError>) = match step {
        Step::Create(u) => (OpKind::Create, u, 0, s.create(u).await.map(|_| 1)),
        Step::MarkRead(u, k) => (OpKind::MarkRead, u, id(u, k), s.mark_read(u, id(u, k)).await.map(i64::from)),
        Step::Delete(u, k) => (OpKind::Delete, u, id(u, k), s.delete(u, id(u, k)).await.map(i64::from)),
        Step::MarkAllRead(u) => (OpKind::MarkAllRead, u, 0, s.mark_all_read(u).await.map(|n| n as i64)),
        Step::ReadCount(u) => (OpKind::ReadCount, u, 0, s.read_count(u).await),
    };
    Event {
        worker,
        op,
        user,
        id: nid,
        invoke_us: invoke,
        complete_us: t0.elapsed().as_micros() as u64,
        outcome: r.as_ref().map_or_else(|e| e.outcome, |_| Outcome::Ok),
        observed: r.unwrap_or(0),
        attempts: 1,
        unknown_attempts: 0,
    }
}

/// How a case's branches interleave: as the machine's timing has them, or in the order
/// a seeded schedule grants their server calls at the explorer's step gate (the order
/// then comes from the seed, not from the load on the machine).
#[derive(Clone, Copy, Debug)]
enum Timing {
    Real,
    Gated(u64),
}

/// Runs one case on a fresh namespace; Err names the first broken property.
async fn run_case(
    server: &Server,
    redis: Option<&RedisServer>,
    name: &str,
    case: &Case,
    timing: Timing,
) -> Result<(), String> {
    let f = fixture(server, redis, name).await;
    let t0 = Instant::now();
    let mut history = Vec::new();
    for st in &case.prefix {
        history.push(apply(f.strategy.as_ref(), *st, 0, t0).await);
    }
    let branches = match timing {
        Timing::Real => real_branches(&f, case, t0).await,
        Timing::Gated(order) => gated_branches(&f, case, t0, order).await,
    };
    let ran = branches.map(|b| history.extend(b));
    let settled = f.strategy.settle(Duration::from_secs(5)).await;
    let mut rows = f.ns.check_rows(USERS).await.unwrap();
    if let Some(counters) = f.strategy.counters(USERS).await.unwrap() {
        rows = rows.iter().zip(counters.iter()).map(|(r, c)| CheckInput { counter: c, ..*r }).collect();
    }
    if f.redis {
        f.strategy.teardown().await.unwrap();
    }
    f.ns.drop_namespace().await.unwrap();
    ran?;
    settled.map_err(|e| format!("settle: {e}"))?;
    // A conflict the server rolled back (a deadlock, say) is a certain no-op and the
    // checks account for it; an unknown outcome without a fault is not expected.
    let unknown: Vec<&Event> = history.iter().filter(|e| e.outcome == Outcome::Unknown).collect();
    if !unknown.is_empty() {
        return Err(format!("ops with an unknown outcome: {unknown:?}"));
    }
    let check = check_counters(&rows, Guarantee::Exact);
    if check.verdict != CounterVerdict::Pass {
        return Err(format!("counters {:?} against the rows", check.worst));
    }
    if f.strategy.info().guarantee == Guarantee::Exact {
        // A cache's reads may lag by design (cache-aside: until the second delete).
        let lag = f.strategy.read_lag().map(|d| d.as_micros() as u64);
        let reads = check_reads_lagging(&history, &|_| PER_USER as i64, lag);
        if reads.violations_total > 0 {
            return Err(format!("reads out of bounds: {:?}", reads.violations));
        }
    }
    Ok(())
}

/// The branches run concurrently, the interleaving the machine's.
async fn real_branches(f: &Fixture, case: &Case, t0: Instant) -> Result<Vec<Event>, String> {
    let branches = case.branches.iter().enumerate().map(|(w, steps)| {
        let s = f.strategy.clone();
        async move {
            let mut h = Vec::new();
            for st in steps {
                h.push(apply(s.as_ref(), *st, w as u32 + 1, t0).await);
            }
            h
        }
    });
    Ok(futures_util::future::join_all(branches).await.into_iter().flatten().collect())
}

/// The branches as sessions of the explorer, each server call granted in the order a
/// schedule seeded with `order` picks (`counterlab explore`'s scheduler: a step waiting
/// on another session's lock is seen on the server and the others go on). Err: the
/// schedule could not go on (no step came back within its bound).
async fn gated_branches(f: &Fixture, case: &Case, t0: Instant, order: u64) -> Result<Vec<Event>, String> {
    use counterlab::run::explore::{Driving, run_gated};
    let histories: Vec<Arc<std::sync::Mutex<Vec<Event>>>> = case.branches.iter().map(|_| Arc::default()).collect();
    let bodies = case.branches.iter().zip(&histories).enumerate().map(|(w, (steps, h))| {
        let (s, db, steps, h) = (f.strategy.clone(), f.ns.db().clone(), steps.clone(), h.clone());
        let body = async move {
            for st in steps {
                let e = apply(s.as_ref(), st, w as u32 + 1, t0).await;
                if e.outcome != Outcome::Ok {
                    // A failed transaction's rollback goes out as the session's own step.
                    let _ = db.flush_rollback().await;
                }
                h.lock().unwrap().push(e);
            }
        };
        Box::pin(body) as futures_util::future::BoxFuture<'static, ()>
    });
    let driving = Driving { ns: &f.ns, op_timeout: Duration::from_secs(10), reduce: true };
    let mut schedule = counterlab_core::explore::Schedule::random(order);
    run_gated(driving, bodies.collect(), &mut schedule).await.map_err(|e| {
        STUCK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("gated schedule {order}: {e}")
    })?;
    Ok(histories.iter().flat_map(|h| std::mem::take(&mut *h.lock().unwrap())).collect())
}

/// The seed of the order in which run `k` of `case` grants its branches' server calls
/// (from the property's seed and the case itself, so a shrinking candidate's runs are
/// the same on every replay).
fn order_of(seed: u64, case: &Case, k: u32) -> u64 {
    // FNV-1a of the case's text: stable across toolchains, as the seed's promise needs
    // (std's `DefaultHasher` may change between releases).
    let text = format!("{case:?}");
    let fnv = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    counterlab_core::Rng::derive(seed ^ fnv, k as u64).next_u64()
}

/// Gated schedules that could not go on (a step neither came back nor waited on a lock
/// in its bound): such a run fails its case but is no race, so the racy test requires
/// none.
static STUCK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The seed a property run explores from: `COUNTERLAB_PROPTEST_SEED` or a fixed one.
fn seed() -> u64 {
    std::env::var("COUNTERLAB_PROPTEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20261201)
}

fn runner(seed: u64, cases: u32) -> TestRunner {
    let config = Config { cases, max_shrink_iters: 100, failure_persistence: None, ..Config::default() };
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

/// Runs the property for `name` from `seed`; the minimal failing case when it fails.
/// Once a case has failed, each shrinking candidate runs up to `repeat` times and fails
/// when any run does: one interleaving (the machine's, or one seeded order) may miss a
/// race the candidate still has, and repeating keeps the shrinking from stopping early.
fn explore(server: &Server, redis: Option<&RedisServer>, name: &str, seed: u64, params: Search) -> Result<(), Case> {
    explore_recording(server, redis, name, seed, params, &Default::default())
}

/// A property run's bounds: cases generated, runs of each shrinking candidate, the users
/// and rows ops pick from, and whether the branches run gated (`Timing`).
#[derive(Clone, Copy)]
struct Search {
    cases: u32,
    repeat: u32,
    space: (i64, i64),
    gated: bool,
}

impl Search {
    /// Run `k` of `case` from the property's `seed`.
    fn timing(&self, seed: u64, case: &Case, k: u32) -> Timing {
        if self.gated { Timing::Gated(order_of(seed, case, k)) } else { Timing::Real }
    }
}

/// `explore`, keeping in `ran` each case it tried up to and including the first that
/// failed (before shrinking).
fn explore_recording(
    server: &Server,
    redis: Option<&RedisServer>,
    name: &str,
    seed: u64,
    search: Search,
    ran: &std::cell::RefCell<Vec<Case>>,
) -> Result<(), Case> {
    let rt = tokio::runtime::Handle::current();
    let failed = std::cell::Cell::new(false);
    let result = tokio::task::block_in_place(|| {
        runner(seed, search.cases).run(&case(search.space), |c| {
            if !failed.get() {
                ran.borrow_mut().push(c.clone());
            }
            let runs = if failed.get() { search.repeat } else { 1 };
            rt.block_on(async {
                for k in 0..runs {
                    run_case(server, redis, name, &c, search.timing(seed, &c, k)).await?;
                }
                Ok::<(), String>(())
            })
            .map_err(|e| {
                failed.set(true);
                TestCaseError::fail(e)
            })
        })
    });
    match result {
        Ok(()) => Ok(()),
        Err(TestError::Fail(why, shrunk)) => {
            let minimal =
                tokio::task::block_in_place(|| rt.block_on(minimize(server, redis, name, shrunk, (seed, search))));
            eprintln!(
                "{name}: property failed from seed {seed} (COUNTERLAB_PROPTEST_SEED={seed}); minimal case {minimal:?}: {why}"
            );
            Err(minimal)
        }
        Err(e) => panic!("{name}: {e}"),
    }
}

/// Every case with one step fewer (a branch left empty goes): prefix steps first.
fn removals(case: &Case) -> Vec<Case> {
    let mut out = Vec::new();
    for i in 0..case.prefix.len() {
        let mut c = case.clone();
        c.prefix.remove(i);
        out.push(c);
    }
    for (b, steps) in case.branches.iter().enumerate() {
        for i in 0..steps.len() {
            let mut c = case.clone();
            c.branches[b].remove(i);
            if c.branches[b].is_empty() {
                c.branches.remove(b);
            }
            out.push(c);
        }
    }
    out
}

/// Greedy removal after proptest's shrinking, which takes a candidate that passed its
/// `repeat` runs as passing for good: under a loaded machine a racy candidate can pass
/// that often and the shrinking stops early (a CI run stopped at 8 steps). Here each
/// candidate with one step fewer runs up to `repeat` times again and the first that fails
/// becomes the case, until none does. A pass in which none failed is tried once more at
/// `ESCALATE` times the runs before the case counts as minimal: a loaded machine lowers
/// each racy candidate's odds (a CI run under the whole suite stopped at 11 steps with 12
/// runs a candidate). At most `size` passes of `size` candidates, each bounded.
async fn minimize(
    server: &Server,
    redis: Option<&RedisServer>,
    name: &str,
    mut case: Case,
    (seed, search): (u64, Search),
) -> Case {
    const ESCALATE: u32 = 4;
    let repeat = search.repeat;
    let mut runs = repeat.max(1);
    for _ in 0..2 * case.size() {
        match first_failing(server, redis, name, &case, (runs, seed, search)).await {
            Some(smaller) => {
                case = smaller;
                runs = repeat.max(1);
            }
            None if runs == repeat.max(1) => runs *= ESCALATE,
            None => break,
        }
    }
    case
}

/// The first candidate with one step fewer that fails within `runs` runs.
async fn first_failing(
    server: &Server,
    redis: Option<&RedisServer>,
    name: &str,
    case: &Case,
    (runs, seed, search): (u32, u64, Search),
) -> Option<Case> {
    for candidate in removals(case) {
        for k in 0..runs {
            if run_case(server, redis, name, &candidate, search.timing(seed, &candidate, k)).await.is_err() {
                return Some(candidate);
            }
        }
    }
    None
}

async fn servers() -> (Server, RedisServer) {
    let pg = Server::connect_postgres(&util::pg_url(), Duration::from_secs(5)).await.unwrap();
    let redis = RedisServer::connect(&crate::redis::redis_url(), Duration::from_secs(5)).await.unwrap();
    (pg, redis)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_designs_hold_on_mariadb_too() {
    crate::require!(Mariadb);
    let _heavy = util::heavy().await;
    let my = Server::connect_mysql(&util::mysql_url(), Duration::from_secs(5)).await.unwrap();
    for name in ["conditional-update", "select-for-update"] {
        if let Err(minimal) = explore(&my, None, name, seed(), REAL) {
            panic!("{name} on MariaDB broke its guarantee; minimal case {minimal:?}, seed {}", seed());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_strategy_with_a_guarantee_holds_under_generated_concurrent_cases() {
    crate::require!(Postgres, Redis);
    let _heavy = util::heavy().await;
    let (pg, redis) = servers().await;
    let names: Vec<&str> = counterlab::BUILTINS
        .iter()
        .map(|r| r.info)
        .filter(|s| s.guarantee != Guarantee::None && !s.summary.starts_with("mutant"))
        // The broker designs are tested in `mq.rs` (their consumer needs RabbitMQ).
        .filter(|s| !counterlab_strategies::needs_amqp(s.name))
        .map(|s| s.name)
        .collect();
    assert!(names.len() >= 6, "{names:?}");
    for name in names {
        let r = needs_redis(name).then_some(&redis);
        if let Err(minimal) = explore(&pg, r, name, seed(), REAL) {
            panic!("{name} broke its guarantee; minimal case {minimal:?}, seed {}", seed());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_racy_design_fails_shrinks_and_replays_from_its_seed() {
    crate::require!(Postgres, Redis);
    let _heavy = util::heavy().await;
    let (pg, _) = servers().await;
    let s = seed();
    // One user's two rows, so the branches collide; each case's branches run in the
    // order of a schedule seeded from the case at the step gate (an earlier version ran
    // them on the machine's timing: under two CPU hogs 64 cases never hit the race),
    // each shrinking candidate under up to 4 seeded orders.
    let racy = Search { cases: 64, repeat: 4, space: (1, 2), gated: true };
    let ran = std::cell::RefCell::new(Vec::new());
    let minimal = explore_recording(&pg, None, "direct-update", s, racy, &ran)
        .expect_err("direct-update must break on some case");
    // Shrunk: a handful of ops, at least two of them concurrent.
    assert!(minimal.size() <= 6, "{minimal:?}");
    assert!(minimal.branches.len() >= 2);
    // The minimal case reproduces. Two single ops: every interleaving of their server
    // calls, ordered at the step gate (`counterlab explore --pair`). Longer cases: 30
    // more seeded orders. Either way the order is the gate's, not the machine's load.
    match as_pair(&minimal) {
        Some(pair) => {
            let result = tokio::task::block_in_place(|| explored_pair("direct-update", &pair));
            assert_eq!(result, "UNSAFE", "the minimal case {minimal:?}, explored as --pair {pair}");
        }
        None => {
            let mut reproduced = false;
            for k in 0..30 {
                if run_case(&pg, None, "direct-update", &minimal, racy.timing(s, &minimal, k)).await.is_err() {
                    reproduced = true;
                    break;
                }
            }
            assert!(reproduced, "the minimal case {minimal:?} did not fail again in 30 runs");
        }
    }
    // The printed seed replays the exploration: a run from it, with no server, tries the
    // same cases in the same order up to the one that failed, and that case fails again
    // in the order its seed gives.
    let ran = ran.into_inner();
    let text: Vec<String> = ran.iter().map(|c| format!("{c:?}")).collect();
    assert_eq!(generated(s, racy, ran.len()), text, "seed {s} replayed other cases");
    let first = ran.last().expect("a failing case");
    let again = run_case(&pg, None, "direct-update", first, racy.timing(s, first, 0)).await;
    assert!(again.is_err(), "{first:?} in the order of seed {s} passed on replay");
    // Every failure above was the design's (a counter or a read), none a schedule that
    // could not go on.
    assert_eq!(STUCK.load(std::sync::atomic::Ordering::Relaxed), 0, "gated schedules got stuck");
}

/// The first `n` cases a property run from `seed` tries, as text (each passes here).
fn generated(seed: u64, search: Search, n: usize) -> Vec<String> {
    let seen = std::cell::RefCell::new(Vec::new());
    let _ = runner(seed, search.cases).run(&case(search.space), |c| {
        seen.borrow_mut().push(format!("{c:?}"));
        Ok(())
    });
    seen.into_inner().into_iter().take(n).collect()
}

/// A case of two single-op branches on one user and no prefix as `counterlab explore`'s
/// pair (its rows: b for the first op, b again or c for the second); None otherwise.
fn as_pair(case: &Case) -> Option<String> {
    let ([a], [b]) = (case.branches.first()?.as_slice(), case.branches.get(1)?.as_slice()) else { return None };
    if !case.prefix.is_empty() || case.branches.len() != 2 {
        return None;
    }
    let user = |s: &Step| match *s {
        Step::Create(u) | Step::MarkRead(u, _) | Step::Delete(u, _) | Step::MarkAllRead(u) | Step::ReadCount(u) => u,
    };
    let slot = |s: &Step| match *s {
        Step::MarkRead(_, k) | Step::Delete(_, k) => Some(k),
        _ => None,
    };
    let same_row = slot(a).zip(slot(b)).is_none_or(|(x, y)| x == y);
    let name = |s: &Step, first_row: bool| match (s, first_row) {
        (Step::Create(_), _) => Some("create"),
        (Step::MarkRead(..), true) => Some("mark_read"),
        (Step::MarkRead(..), false) => Some("mark_read_other"),
        (Step::Delete(..), true) => Some("delete_unread"),
        (Step::MarkAllRead(_), _) => Some("mark_all_read"),
        _ => None,
    };
    (user(a) == user(b)).then_some(())?;
    Some(format!("{},{}", name(a, true)?, name(b, same_row)?))
}

/// `counterlab explore --pair pair` of `strategy` on PostgreSQL at read committed (the
/// level the cases run at): the pair's result (`UNSAFE`, `SAFE`, ...).
fn explored_pair(strategy: &str, pair: &str) -> String {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["explore", "scenarios/quickstart.toml", "--json", "--strategy", strategy, "--backend", "postgres"])
        .args(["--isolation", "read-committed", "--pair", pair])
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .env_remove("DATABASE_URL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn counterlab");
    // Bounded: a pair's dozen schedules take seconds; past 5 minutes it is killed.
    let deadline = Instant::now() + Duration::from_secs(300);
    while child.try_wait().expect("wait for counterlab").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("counterlab explore --pair {pair} ran over 5 minutes");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = child.wait_with_output().expect("counterlab's output");
    let shown = || format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", shown()));
    v["explored"][0]["pairs"][0]["result"].as_str().unwrap_or_else(|| panic!("no result: {}", shown())).to_string()
}
