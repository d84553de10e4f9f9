//! Every phase around the load has a time bound (issue 31): a strategy whose setup,
//! settle, counters or settled reads never end makes its row INCOMPLETE naming the
//! phase, within the bound, and the run goes on to the next strategy and cleans up.
//! The strategies here are conditional-update with one call made to hang, registered
//! like any built-in and run on embedded SQLite.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use counterlab::run::run_plan;
use counterlab::scenario::{Overrides, parse};
use counterlab_core::{Guarantee, NotificationId, OpError, SeedSpec, Strategy, StrategyInfo, UserCounters, UserId};
use counterlab_strategies::{Build, Builtin, Db, Registry, build};

use crate::util;

/// Which call never returns (the settled reads: each takes most of an op timeout).
#[derive(Clone, Copy, PartialEq)]
enum Hang {
    Setup,
    Settle,
    Counters,
    SettledReads,
}

struct Stuck {
    inner: Arc<dyn Strategy>,
    hang: Hang,
    settled: AtomicBool,
}

/// The op timeout of the scenarios here: the bounds are 10 s plus ten of these (plus
/// the seed's small share).
const OP_MS: u64 = 200;

impl Stuck {
    async fn hang_if(&self, at: Hang) {
        if self.hang == at {
            std::future::pending::<()>().await;
        }
    }
}

#[async_trait]
impl Strategy for Stuck {
    fn info(&self) -> StrategyInfo {
        info(self.hang)
    }
    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        self.inner.create(user).await
    }
    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        self.inner.mark_read(user, id).await
    }
    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        self.inner.delete(user, id).await
    }
    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        self.inner.mark_all_read(user).await
    }
    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        if self.hang == Hang::SettledReads && self.settled.load(Ordering::Relaxed) {
            // Inside the op bound, so only the phase's bound can end the reads.
            tokio::time::sleep(Duration::from_millis(OP_MS * 9 / 10)).await;
        }
        self.inner.read_count(user).await
    }
    async fn seed(&self, spec: SeedSpec) -> Result<(), OpError> {
        self.hang_if(Hang::Setup).await;
        self.inner.seed(spec).await
    }
    async fn settle(&self, bound: Duration) -> Result<(), OpError> {
        self.settled.store(true, Ordering::Relaxed);
        self.hang_if(Hang::Settle).await;
        self.inner.settle(bound).await
    }
    async fn counters(&self, n_users: u64) -> Result<Option<UserCounters>, OpError> {
        self.hang_if(Hang::Counters).await;
        self.inner.counters(n_users).await
    }
}

fn info(hang: Hang) -> StrategyInfo {
    let name = match hang {
        Hang::Setup => "stuck-setup",
        Hang::Settle => "stuck-settle",
        Hang::Counters => "stuck-counters",
        Hang::SettledReads => "stuck-settled-reads",
    };
    StrategyInfo { name, guarantee: Guarantee::Exact, summary: "test-only: one call never ends" }
}

fn stuck(hang: Hang) -> fn(StrategyInfo, Db) -> Arc<dyn Strategy> {
    fn make(hang: Hang, db: Db) -> Arc<dyn Strategy> {
        let inner = build("conditional-update", db).expect("a built-in to delegate to");
        Arc::new(Stuck { inner, hang, settled: AtomicBool::new(false) })
    }
    match hang {
        Hang::Setup => |_, db| make(Hang::Setup, db),
        Hang::Settle => |_, db| make(Hang::Settle, db),
        Hang::Counters => |_, db| make(Hang::Counters, db),
        Hang::SettledReads => |_, db| make(Hang::SettledReads, db),
    }
}

/// Runs the stuck strategy, then conditional-update, on SQLite with `users`; returns the
/// stuck row's verdict label and sentence and the seconds the run took, after checking that the second
/// strategy ran and passed and that nothing is left in the folder.
async fn run_stuck(hang: Hang, users: u64) -> (String, String, f64) {
    let name = info(hang).name;
    let registry = Registry::builtin().with(Builtin::new(info(hang), Build::Sql(stuck(hang))));
    let toml = format!(
        "strategies = [\"{name}\", \"conditional-update\"]\nbackends = [\"sqlite\"]\n\
         [data]\nusers = {users}\nnotifications_per_user = 1\n\
         [workload]\nworkers = 2\nops = 200\nop_timeout_ms = {OP_MS}\n\
         [workload.mix]\ncreate = 1\nmark_read = 2\nread_count = 1\n\
         [redis]\nsettle_timeout_ms = 100\n"
    );
    let plan = parse("stuck.toml", &toml, "stuck", &Overrides::default(), &registry.names(), 3).expect("a valid plan");
    let dir = util::sqlite_dir("deadlines");
    let mut opts = util::options(false, Some(dir.as_ref().to_path_buf()));
    opts.registry = registry;
    let started = Instant::now();
    let mut log = |l: &str| eprintln!("{l}");
    let run = run_plan(&plan, &opts, &mut log);
    let report = tokio::time::timeout(Duration::from_secs(90), run).await.expect("the run ends").expect("a report");
    let took = started.elapsed().as_secs_f64();
    let [row, next] = &report.strategies[..] else { panic!("two rows: {:?}", report.strategies) };
    assert_eq!((next.strategy.as_str(), next.check.label().as_str()), ("conditional-update", "pass"));
    let left = util::files_under(dir.as_ref());
    assert!(left.is_empty(), "{name} left {left:?}");
    (row.check.label(), row.check.summary.clone(), took)
}

/// The phases' bound here: 10 s + 10 op timeouts, plus the seed's share.
fn bound_s(users: u64) -> f64 {
    10.0 + 10.0 * OP_MS as f64 / 1e3 + users as f64 * 220e-6
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_that_never_ends_is_incomplete_naming_setup() {
    let (verdict, why, took) = run_stuck(Hang::Setup, 20).await;
    assert_eq!(verdict, "INCOMPLETE: setup");
    let want = format!("stuck-setup: the check could not complete: setup: over its bound of {:.1} s", bound_s(20));
    assert_eq!(why, want);
    assert!(took >= bound_s(20), "ended before its bound: {took:.1} s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_that_never_ends_does_not_pass() {
    let (verdict, why, _) = run_stuck(Hang::Settle, 20).await;
    assert_eq!(verdict, "INCOMPLETE: settle");
    assert!(why.ends_with("settle failed after 1 attempt(s): other (fail): over its bound of 0.3 s"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_that_never_come_are_incomplete_naming_the_check() {
    let (verdict, why, _) = run_stuck(Hang::Counters, 20).await;
    assert_eq!(verdict, "INCOMPLETE: check");
    assert!(why.ends_with(&format!("check: over its bound of {:.1} s", bound_s(20))), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_reads_past_their_bound_are_incomplete_naming_them() {
    // 2 000 reads, 8 at a time, 0.18 s each: 45 s, over the bound of 12 s.
    let (verdict, why, took) = run_stuck(Hang::SettledReads, 2000).await;
    assert_eq!(verdict, "INCOMPLETE: settled reads");
    assert!(why.ends_with("settled reads: over its bound of 12.0 s"), "{why}");
    assert!(took < 40.0, "the reads ran past their bound: {took:.1} s");
}
