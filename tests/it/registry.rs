//! Adding a built-in is its implementation plus one registry row: a toy strategy defined
//! here, registered in one line, is listed, planned, run, checked and judged by the
//! runner like any built-in, without touching a match anywhere else.

use std::sync::Arc;

use async_trait::async_trait;
use counterlab::run::run_plan;
use counterlab::scenario::{Overrides, parse};
use counterlab_core::{Guarantee, NotificationId, OpError, Strategy, StrategyInfo, UserId};
use counterlab_strategies::{Build, Builtin, Db, Registry, build};

use crate::util;

/// The toy: conditional-update's statements under a new name (a new design would put its
/// own SQL here; the point is that nothing else changes).
struct Toy {
    inner: Arc<dyn Strategy>,
    info: StrategyInfo,
}

fn toy(info: StrategyInfo, db: Db) -> Arc<dyn Strategy> {
    let inner = build("conditional-update", db).expect("a built-in to delegate to");
    Arc::new(Toy { inner, info })
}

/// A racy toy that claims an exact guarantee: its row's guarantee, not the design it
/// delegates to, is what the verdict holds it to.
fn racy_toy(info: StrategyInfo, db: Db) -> Arc<dyn Strategy> {
    let inner = build("direct-update", db).expect("a built-in to delegate to");
    Arc::new(Toy { inner, info })
}

#[async_trait]
impl Strategy for Toy {
    fn info(&self) -> StrategyInfo {
        self.info
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
        self.inner.read_count(user).await
    }
}

const TOY: StrategyInfo = StrategyInfo { name: "toy-exact", guarantee: Guarantee::Exact, summary: "test-only" };

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strategy_registered_in_one_row_runs_and_is_judged_like_a_built_in() {
    let registry = Registry::builtin().with(Builtin::new(TOY, Build::Sql(toy)));
    assert!(registry.names().contains(&"toy-exact") && !Registry::builtin().names().contains(&"toy-exact"));
    let dir = util::tempdir("registry");
    let toml = "strategies = [\"toy-exact\", \"conditional-update\"]\nbackends = [\"sqlite\"]\n\
                [data]\nusers = 20\nnotifications_per_user = 4\n\
                [workload]\nworkers = 4\nops = 400\n\
                [workload.mix]\ncreate = 1\nmark_read = 3\nmark_read_dup = 1\ndelete = 1\nmark_all_read = 1\nread_count = 1\n";
    // Unknown to a plan resolved against the built-ins alone; known with the row.
    let builtin = Registry::builtin();
    assert!(parse("toy.toml", toml, "toy", &Overrides::default(), &builtin.names(), 7).is_err());
    let plan = parse("toy.toml", toml, "toy", &Overrides::default(), &registry.names(), 7).expect("a valid plan");
    let mut opts = util::options(false, Some(dir.as_ref().to_path_buf()));
    opts.registry = registry;
    let report = run_plan(&plan, &opts, &mut |_| {}).await.expect("the run completes");
    let row = report.strategies.iter().find(|s| s.strategy == "toy-exact").expect("the toy's row");
    assert_eq!(row.check.label(), "pass", "{:?}", row.check);
    assert!(row.check_s > 0.0, "the check's time is recorded: {}", row.check_s);
    assert!(
        row.ops_total > 300 && row.check.users_checked == 20,
        "{} ops, {} users",
        row.ops_total,
        row.check.users_checked
    );
    let twin = report.strategies.iter().find(|s| s.strategy == "conditional-update").unwrap();
    assert_eq!(twin.check.label(), row.check.label());
}

const RACY: StrategyInfo =
    StrategyInfo { name: "toy-racy", guarantee: Guarantee::Exact, summary: "test-only, read-check-write" };

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_row_s_guarantee_is_what_its_verdict_holds_it_to() {
    crate::require!(Postgres);
    let _heavy = util::heavy().await;
    let registry = Registry::builtin().with(Builtin::new(RACY, Build::Sql(racy_toy)));
    // The zoo's duplicate-mark_read race on PostgreSQL, where two writers do race.
    let toml = "strategies = [\"toy-racy\"]\nbackends = [\"postgres\"]\n\
                [data]\nusers = 10\nnotifications_per_user = 5\n\
                [workload]\nworkers = 4\nduration_s = 1\ndup_k = 4\n\
                [workload.mix]\ncreate = 1\nmark_read_dup = 3\nread_count = 1\n";
    let plan = parse("racy.toml", toml, "racy", &Overrides::default(), &registry.names(), 9).expect("a valid plan");
    let mut opts = util::options(false, None);
    opts.registry = registry;
    let report = run_plan(&plan, &opts, &mut |_| {}).await.expect("the run completes");
    let row = &report.strategies[0];
    assert_eq!(row.guarantee, Guarantee::Exact);
    assert!(row.check.label().starts_with("FAIL: counters"), "{:?}", row.check);
    assert!(row.anomalies.iter().any(|a| a.name == "double_decrement"), "{:?}", row.anomalies);
}
