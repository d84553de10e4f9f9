//! The server settled after the seed, before the load (`settle_after_seed`): PostgreSQL's
//! requested-checkpoint count grows across a run, an SQLite namespace's WAL is empty when
//! the load starts, MariaDB's `FLUSH TABLES ... FOR EXPORT` leaves no lock behind (the
//! load runs with no error), and `settle_after_seed = false` does none of it.

use std::sync::{Arc, Mutex};

use counterlab::run::{Phase, run_plan};

use crate::util;

fn scenario(backend: &str, settle: bool) -> String {
    format!(
        "backends = [\"{backend}\"]\nstrategies = [\"conditional-update\"]\n\
         [data]\nusers = 200\nnotifications_per_user = 50\n\
         [workload]\nworkers = 4\nduration_s = 1.0\nsettle_after_seed = {settle}\n"
    )
}

/// Checkpoints requested of the server so far (PostgreSQL 17 moved them to
/// `pg_stat_checkpointer`).
async fn checkpoints_requested() -> i64 {
    let admin = util::admin().await;
    let version: i32 =
        sqlx::query_scalar("SELECT current_setting('server_version_num')::int").fetch_one(&admin).await.unwrap();
    let q = match version >= 170000 {
        true => "SELECT num_requested FROM pg_stat_checkpointer",
        false => "SELECT checkpoints_req FROM pg_stat_bgwriter",
    };
    sqlx::query_scalar(q).fetch_one(&admin).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_checkpoints_after_the_seed_and_says_so() {
    crate::require!(Postgres);
    let before = checkpoints_requested().await;
    let r = run_plan(&util::plan(&scenario("postgres", true)), &util::options(false, None), &mut |_| {})
        .await
        .expect("the run completes");
    let after = checkpoints_requested().await;
    let s = &r.strategies[0];
    let settled = s.settled.as_deref().expect("settled");
    assert!(settled.starts_with("CHECKPOINT after the seed ("), "{settled}");
    assert!(after > before, "no checkpoint was requested during the run ({before} -> {after})");
    assert!(
        counterlab_report::render_markdown(&r).contains(&format!("before the load: {settled}")),
        "the Markdown says it"
    );
    // The tool's own CPU over the load is in the row and the Markdown.
    let cpu = s.client_cpu_us_per_op.expect("a process clock on Linux");
    assert!(cpu > 0.0 && cpu.is_finite(), "{cpu}");
    assert!(counterlab_report::render_markdown(&r).contains(&format!("client CPU {cpu:.1} us per op over the load")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_flushes_the_namespace_tables_and_leaves_no_lock() {
    crate::require!(Mariadb);
    let r = run_plan(&util::plan(&scenario("mysql", true)), &util::options(false, None), &mut |_| {})
        .await
        .expect("the run completes");
    let s = &r.strategies[0];
    assert_eq!(
        s.settled.as_deref().map(|t| t.split(" (").next().unwrap()),
        Some("FLUSH TABLES ... FOR EXPORT after the seed")
    );
    // A read lock left on the tables would fail every write of the load.
    assert!(
        s.ops_total > 0 && s.errors_total == 0,
        "{} ops, {} errors: {:?}",
        s.ops_total,
        s.errors_total,
        s.error_samples
    );
    assert_eq!(s.check.users_mismatched, 0);
}

/// The size of the namespace's WAL file when the load starts, and the report.
async fn sqlite_wal_at_load(settle: bool) -> (u64, Option<String>) {
    let dir = util::sqlite_dir("settle");
    let path = dir.to_path_buf();
    let seen = Arc::new(Mutex::new(None));
    let mut opts = util::options(false, Some(path.clone()));
    let s = seen.clone();
    opts.on_phase = Some(Arc::new(move |p: Phase, ns: &str| {
        if matches!(p, Phase::Load) {
            let wal = path.join(format!("{ns}.sqlite3-wal"));
            *s.lock().unwrap() = Some(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
        }
    }));
    let r = run_plan(&util::plan(&scenario("sqlite", settle)), &opts, &mut |_| {}).await.expect("the run completes");
    let wal = seen.lock().unwrap().expect("the load started");
    (wal, r.strategies[0].settled.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_starts_the_load_on_an_empty_wal_unless_told_not_to() {
    let (wal, settled) = sqlite_wal_at_load(true).await;
    assert_eq!(wal, 0, "the WAL when the load started: {settled:?}");
    assert!(
        settled.as_deref().is_some_and(|t| t.starts_with("WAL checkpoint (TRUNCATE) after the seed")),
        "{settled:?}"
    );
    let (wal, settled) = sqlite_wal_at_load(false).await;
    assert!(wal > 0, "unsettled, the seed's writes are still in the WAL");
    assert_eq!(settled, None);
}
