//! The servers' own bounds on a namespace's identity (issue 31), run for real: a runaway
//! statement sent over the namespace's connections ends on the server at the op timeout
//! (PostgreSQL `statement_timeout`, MariaDB `MAX_STATEMENT_TIME`, SQLite's progress
//! handler), nothing of it still runs a second later, and the role's caps cannot be lifted.

use std::time::{Duration, Instant};

use counterlab_strategies::{Db, Isolation, Namespace, PoolSpec, Server};

use crate::util;

/// The op timeout the namespaces here run with.
const OP: Duration = Duration::from_millis(1000);
/// How long a runaway statement may take to fail (the client's own give-up is OP + 5 s).
const GIVE_UP: Duration = Duration::from_secs(6);

fn spec(isolation: Isolation) -> PoolSpec {
    PoolSpec { max_connections: 2, acquire_timeout: OP, isolation }
}

async fn namespace(server: &Server, tag: &str, isolation: Isolation) -> Namespace {
    let name = counterlab::run::namespace_name(&counterlab::run::new_run_id(), tag);
    server.create_namespace(&name, spec(isolation)).await.unwrap()
}

/// Runs `sql` as the namespace's identity with a client bound far past the op timeout:
/// the server (or SQLite's handler) must end it first, with an error.
async fn runaway(db: &Db, sql: &'static str) -> String {
    let started = Instant::now();
    let r = tokio::time::timeout(GIVE_UP, db.opt_i64(sql, &[])).await;
    let e = match r {
        Ok(Err(e)) => e.to_string(),
        Ok(Ok(v)) => panic!("the runaway statement finished with {v:?}"),
        Err(_) => panic!("the runaway statement still ran after {GIVE_UP:?}: the server did not end it"),
    };
    assert!(started.elapsed() >= OP / 2, "ended before the bound: {e}");
    e
}

/// Polls `active` (the identity's statements still running) for up to 1 s after the op;
/// every poll must find none once the first has.
async fn nothing_left_running<F, Fut>(active: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = i64>,
{
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut n = active().await;
    while n > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        n = active().await;
    }
    assert_eq!(n, 0, "a statement of the identity still runs 1 s after its op ended");
}

#[tokio::test]
async fn postgres_ends_a_runaway_statement_and_its_caps_hold() {
    crate::require!(Postgres);
    let server = Server::connect_postgres(&util::pg_url(), Duration::from_secs(5)).await.unwrap();
    let ns = namespace(&server, "bounds-pg", Isolation::ReadCommitted).await;
    let e = runaway(ns.db(), "SELECT count(*) FROM unread_counts, generate_series(1, 100000000000)").await;
    assert!(e.contains("statement timeout"), "{e}");
    let admin = util::admin().await;
    let role = ns.name().to_string();
    nothing_left_running(|| {
        let (admin, role) = (admin.clone(), role.clone());
        async move {
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND state = 'active'")
                .bind(role)
                .fetch_one(&admin)
                .await
                .unwrap()
        }
    })
    .await;
    let Db::Pg(pool) = ns.db() else { unreachable!() };
    let shown: (String, String, String) =
        sqlx::query_as("SELECT current_setting('statement_timeout'), current_setting('temp_file_limit'), current_setting('lock_timeout')")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(shown, ("1s".into(), "2GB".into(), "1s".into()));
    let lift = sqlx::raw_sql("SET temp_file_limit = -1").execute(pool).await.unwrap_err().to_string();
    assert!(lift.contains("permission denied"), "{lift}");
    ns.drop_namespace().await.unwrap();
    assert!(!util::schema_exists(&admin, &role).await);
}

#[tokio::test]
async fn postgres_teardown_ends_the_identitys_sessions() {
    crate::require!(Postgres);
    let server = Server::connect_postgres(&util::pg_url(), Duration::from_secs(5)).await.unwrap();
    let ns = namespace(&server, "bounds-pg-td", Isolation::ReadCommitted).await;
    let Db::Pg(pool) = ns.db() else { unreachable!() };
    // A connection of the role outside the pool, holding a lock the DROP needs.
    let mut held = sqlx::ConnectOptions::connect(pool.connect_options().as_ref()).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE notifications IN ACCESS EXCLUSIVE MODE").execute(&mut held).await.unwrap();
    let role = ns.name().to_string();
    let started = Instant::now();
    ns.drop_namespace().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "teardown took {:?}", started.elapsed());
    assert!(!util::schema_exists(&util::admin().await, &role).await);
    drop(held);
}

#[tokio::test]
async fn mariadb_ends_a_runaway_statement() {
    crate::require!(Mariadb);
    let server = Server::connect_mysql(&util::mysql_url(), Duration::from_secs(5)).await.unwrap();
    let ns = namespace(&server, "bounds-my", Isolation::ReadCommitted).await;
    let e = runaway(ns.db(), "SELECT SLEEP(100)").await;
    assert!(e.contains("max_statement_time"), "{e}");
    let admin = util::mysql_admin().await;
    let user = counterlab_strategies::mysql_user(ns.name());
    nothing_left_running(|| {
        let (admin, user) = (admin.clone(), user.clone());
        async move {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.processlist WHERE user = ? AND command = 'Query'",
            )
            .bind(user)
            .fetch_one(&admin)
            .await
            .unwrap()
        }
    })
    .await;
    ns.drop_namespace().await.unwrap();
}

#[tokio::test]
async fn sqlite_interrupts_an_endless_recursive_query() {
    let dir = util::sqlite_dir("bounds");
    let server = Server::open_sqlite(&dir).await.unwrap();
    let ns = namespace(&server, "bounds-lite", Isolation::Serializable).await;
    let e = runaway(ns.db(), "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c")
        .await;
    assert!(e.contains("interrupted"), "{e}");
    // The connection still serves the next statement.
    assert_eq!(ns.db().opt_i64("SELECT count(*) FROM unread_counts", &[]).await.unwrap(), Some(0));
    ns.drop_namespace().await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
