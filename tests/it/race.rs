//! The duplicate mark_read race, small, on PostgreSQL: direct-update must drift, the
//! exact two must not, judged on the stored rows as well as on the report.

use crate::util;

const SMALL_DUPLICATES: &str = r#"
seed = 11
strategies = ["direct-update", "select-for-update", "conditional-update"]
backends = ["postgres"]
[data]
users = 40
notifications_per_user = 30
[workload]
workers = 4
ops = 1200
dup_k = 4
[workload.mix]
create = 10
mark_read_dup = 80
read_count = 10
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_mark_read_drifts_only_direct_update() {
    crate::require!(Postgres);
    let plan = util::plan(SMALL_DUPLICATES);
    let report = util::run_kept(&plan, None).await;
    assert_eq!(report.strategies.len(), 3);
    for s in &report.strategies {
        let stored = util::stored_drift_and_drop(&s.backend.name(), &s.namespace, None).await;
        assert_eq!(stored.len(), 40, "{}: one counter row per user", s.strategy);
        let mismatched = stored.iter().filter(|(_, c, t)| c != t).count() as u64;
        let drift: u64 = stored.iter().map(|(_, c, t)| (c - t).unsigned_abs()).sum();
        assert_eq!(mismatched, s.check.users_mismatched, "{}: report agrees with the rows", s.strategy);
        assert_eq!(drift, s.check.drift_abs_total, "{}", s.strategy);
        assert!(s.ops["mark_read_dup"].count > 500, "{}: the race was exercised", s.strategy);
        match s.strategy.as_str() {
            "direct-update" => {
                assert!(
                    mismatched > 0,
                    "direct-update lost no update in {} duplicate groups",
                    s.ops["mark_read_dup"].count
                );
                // Each lost race decrements once too often: only under-counts.
                assert!(stored.iter().all(|(_, c, t)| c <= t), "direct-update over-counted: {stored:?}");
                assert_eq!(s.check.label(), "drift-expected");
            }
            _ => {
                assert_eq!(mismatched, 0, "{} drifted: {stored:?}", s.strategy);
                assert_eq!(s.check.label(), "pass");
            }
        }
    }
    assert!(report.all_guarantees_held);
}
