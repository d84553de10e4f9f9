//! The strategy x backend x isolation matrix on the real servers (small): which designs
//! lose updates where, which turn races into retried errors, and which stay exact.

use std::path::Path;

use counterlab::Recipe;
use counterlab::scenario::{Overrides, load};

use crate::util;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolation_matrix_findings() {
    crate::require!(Postgres, Mariadb);
    let _heavy = util::heavy().await;
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/isolation-matrix.toml");
    let overrides = Overrides { ops: Some(1000), workers: Some(6), ..Overrides::default() };
    let plan = load(&f, &overrides, &util::known(), 1).unwrap();
    let dir = util::sqlite_dir("matrix");
    let report = util::run_kept(&plan, Some(dir.to_path_buf())).await;
    // 4 strategies x (3 PostgreSQL + 3 MariaDB levels + SQLite's one).
    assert_eq!(report.strategies.len(), 28);
    assert_eq!(report.skipped.len(), 8, "two levels x four strategies skipped on SQLite");
    for s in &report.strategies {
        let stored = util::stored_drift_and_drop(&s.backend.name(), &s.namespace, Some(&dir.to_path_buf())).await;
        let mismatched = stored.iter().filter(|(_, c, t)| c != t).count() as u64;
        let at = format!("{} on {} at {} (server: {})", s.strategy, s.backend, s.isolation, s.isolation_in_effect);
        assert_eq!(mismatched, s.check.users_mismatched, "{at}: report agrees with the rows");
        assert!(
            s.isolation_in_effect.to_lowercase().replace([' ', '-'], "") == s.isolation.name().replace('-', ""),
            "{at}: the level was applied for real"
        );
        match (s.strategy.as_str(), s.backend.name().as_str(), s.isolation.name()) {
            ("select-for-update" | "conditional-update", _, _) => {
                assert_eq!(mismatched, 0, "{at} drifted: {:?}", s.check.worst_users);
            }
            ("direct-update", "mysql", "read-committed" | "repeatable-read") => {
                assert!(mismatched > 0, "{at} lost no update");
                assert_eq!(s.errors_by_class["serialization"], 0, "{at}: InnoDB raised nothing");
            }
            ("direct-update", "postgres", "repeatable-read" | "serializable") => {
                assert_eq!(mismatched, 0, "{at}: races became errors, not drift");
                assert!(s.retries > 0, "{at}: serialization failures were retried");
                assert!(s.errors_by_class["serialization"] > 0, "{at}");
            }
            ("direct-update", "postgres", "read-committed") => {
                assert!(mismatched > 0, "{at} lost no update");
            }
            ("conditional-update-unguarded", "mysql" | "postgres", "read-committed") => {
                assert!(mismatched > 0, "{at}: the unguarded update did not drift");
            }
            _ => {}
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_falls_back_to_sqlite_when_no_postgres_answers() {
    crate::require!(Redis, Rabbitmq);
    let plan = util::plan(
        "[data]\nusers = 20\nnotifications_per_user = 5\n[workload]\nworkers = 2\nops = 100\n[workload.mix]\nmark_read = 1\ncreate = 1\n",
    );
    assert_eq!(plan.backends, vec![counterlab::scenario::Backend::Auto]);
    let mut opts = util::options(false, None);
    opts.postgres_url = None;
    opts.postgres_default = "postgres://nobody@127.0.0.1:1/none".into();
    let mut lines = Vec::new();
    let report = counterlab::run::run_plan(&plan, &opts, &mut |l| lines.push(l.to_string())).await.unwrap();
    let backends: Vec<&str> = report.servers.iter().map(|s| s.backend.as_str()).collect();
    assert_eq!(backends, vec!["sqlite", "redis", "rabbitmq"], "no PostgreSQL was used");
    assert!(lines.iter().any(|l| l.contains("running on embedded SQLite")), "{lines:?}");
    assert!(
        report
            .strategies
            .iter()
            .all(|s| s.backend.name().starts_with("sqlite") && s.isolation.name() == "serializable")
    );
    // Every built-in ran but the PostgreSQL-only ones, which are listed as skipped.
    let only_pg: Vec<&str> = counterlab::BUILTINS
        .iter()
        .filter(|b| b.unsupported_on(counterlab_strategies::Dialect::Sqlite).is_some())
        .map(|b| b.info.name)
        .collect();
    assert_eq!(only_pg, ["writable-cte", "writable-cte-snapshot"]);
    assert_eq!(
        report.strategies.len() + only_pg.len(),
        counterlab::BUILTINS.len(),
        "SQL, Redis and broker strategies ran on SQLite"
    );
    let refused = report.skipped.iter().filter(|k| k.reason.contains("needs PostgreSQL"));
    assert_eq!(refused.map(|k| k.strategy.as_str()).collect::<Vec<_>>(), only_pg, "{:?}", report.skipped);
    assert!(report.all_guarantees_held);
    // The temporary directory it chose is gone after the run.
    assert!(!Path::new(&report.servers[0].url).exists());
}
