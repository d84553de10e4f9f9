//! Escape attempts against each namespace's identity, run for real: SQL and Redis
//! commands sent over the namespace's own connections (as a strategy's steps are), one
//! per known escape class, with sentinels outside the namespace that must stay byte for
//! byte; then whole runs of strategy files that try to escape, which must fail visibly.

use std::time::Duration;

use counterlab_core::{ErrorClass, OpError};
use counterlab_strategies::{Db, Dialect, Identity, Isolation, Namespace, PoolSpec, RedisServer, Server};
use redis::AsyncCommands;

use counterlab::run::run_plan;

use crate::util;

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn spec(isolation: Isolation) -> PoolSpec {
    PoolSpec { max_connections: 2, acquire_timeout: Duration::from_secs(5), isolation }
}

/// Runs `stmts` in one transaction on the namespace's pool; the first error, if any.
async fn attempt(db: &Db, stmts: &[&'static str]) -> Result<(), OpError> {
    let mut tx = db.begin(counterlab_strategies::Begin::Plain).await?;
    for s in stmts {
        tx.exec(s, &[]).await?;
    }
    tx.commit().await
}

/// Every attempt must fail; those in `denied` with the permission class.
async fn all_refused(db: &Db, attempts: &[(&str, Vec<&'static str>, bool)]) {
    for (what, stmts, denied) in attempts {
        match attempt(db, stmts).await {
            Ok(()) => panic!("escape attempt succeeded: {what}: {stmts:?}"),
            Err(e) if *denied => assert_eq!(e.class, ErrorClass::Permission, "{what}: {e}"),
            Err(_) => {}
        }
    }
}

async fn namespace(server: &Server, tag: &str, isolation: Isolation) -> Namespace {
    let name = counterlab::run::namespace_name(&counterlab::run::new_run_id(), tag);
    let ns = server.create_namespace(&name, spec(isolation)).await.unwrap();
    assert!(ns.identity().isolated(), "{}", ns.identity().describe());
    ns
}

#[tokio::test]
async fn postgres_role_reaches_nothing_outside_its_schema() {
    crate::require!(Postgres);
    let server = Server::connect_postgres(&util::pg_url(), Duration::from_secs(5)).await.unwrap();
    let ns = namespace(&server, "escape-pg", Isolation::ReadCommitted).await;
    let other = namespace(&server, "escape-pg-other", Isolation::ReadCommitted).await;
    assert!(matches!(ns.identity(), Identity::Own { caveat: None, .. }), "{}", ns.identity().describe());
    let admin = util::admin().await;
    let tag = counterlab::run::new_run_id();
    let t = format!("public.cl_sentinel_{tag}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE TABLE {t} (x int); INSERT INTO {t} VALUES (1), (2)")))
        .execute(&admin)
        .await
        .unwrap();
    let lo: i32 = sqlx::query_scalar("SELECT lo_from_bytea(0, 'keep'::bytea)::int").fetch_one(&admin).await.unwrap();
    let admin_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&admin).await.unwrap();
    let snapshot =
        format!("SELECT string_agg(x::text, ',' ORDER BY x) || '|' || encode(lo_get({lo}), 'escape') FROM {t}");
    let before: String = sqlx::query_scalar(sqlx::AssertSqlSafe(snapshot.clone())).fetch_one(&admin).await.unwrap();
    let ins = leak(format!("INSERT INTO {t} VALUES (666)"));
    let other_t = leak(format!("SELECT count(*) FROM \"{}\".notifications", other.name()));
    // Functions that evaluate SQL text run it as the caller: a read of the sentinel
    // (they refuse writes in any case, being non-volatile).
    let xml = leak(format!("SELECT query_to_xml('SELECT * FROM {t}', true, true, '')"));
    let attempts: Vec<(&str, Vec<&'static str>, bool)> = vec![
        ("write a public table", vec![ins], true),
        (
            "delete through a writable CTE",
            vec![leak(format!("WITH d AS (DELETE FROM {t} RETURNING 1) SELECT count(*) FROM d"))],
            true,
        ),
        (
            "search_path moved to public",
            vec![
                "SELECT set_config('search_path', 'public', true)",
                leak(format!("INSERT INTO cl_sentinel_{tag} VALUES (668)")),
            ],
            true,
        ),
        ("SQL text evaluated by query_to_xml", vec![xml], true),
        (
            "SQL text evaluated by ts_stat",
            vec![leak(format!("SELECT * FROM ts_stat('SELECT to_tsvector(x::text) FROM {t}')"))],
            true,
        ),
        (
            "string built with chr()",
            vec![leak(format!(
                "SELECT query_to_xml({}, true, true, chr(32))",
                chr_concat(&format!("SELECT * FROM {t}"))
            ))],
            true,
        ),
        ("another namespace's schema", vec![other_t], true),
        ("password catalog", vec!["SELECT count(*) FROM pg_authid"], true),
        ("password catalog by OID cast", vec!["SELECT count(*) FROM pg_catalog.pg_shadow"], true),
        ("server file", vec!["SELECT pg_read_file('/etc/hostname')"], true),
        ("server file as bytes", vec!["SELECT pg_read_binary_file('/etc/hostname')"], true),
        ("directory listing", vec!["SELECT pg_ls_dir('/')"], true),
        ("large object import", vec!["SELECT lo_import('/etc/hostname')"], true),
        ("another's large object", vec![leak(format!("SELECT lo_get({lo})"))], true),
        ("overwrite another's large object", vec![leak(format!("SELECT lo_put({lo}, 0, 'x'::bytea)"))], true),
        ("COPY to a server file", vec!["COPY (SELECT 1) TO '/tmp/cl_escape'"], true),
        ("COPY from a program", vec!["COPY notifications (id) FROM PROGRAM 'echo 1'"], true),
        ("SET ROLE", vec!["SET ROLE postgres"], true),
        ("SET SESSION AUTHORIZATION", vec!["SET SESSION AUTHORIZATION postgres"], true),
        ("create in public", vec![leak(format!("CREATE TABLE public.cl_evil_{tag} (x int)"))], true),
        ("create a schema", vec![leak(format!("CREATE SCHEMA cl_evil_{tag}"))], true),
        ("dblink", vec!["CREATE EXTENSION dblink"], false),
        ("become superuser", vec!["ALTER ROLE CURRENT_USER SUPERUSER"], true),
        ("terminate the admin's session", vec![leak(format!("SELECT pg_terminate_backend({admin_pid})"))], true),
        (
            "plpgsql dynamic SQL",
            vec![leak(format!("DO $$ BEGIN EXECUTE 'INSERT INTO {t} VALUES (669)'; END $$"))],
            true,
        ),
    ];
    all_refused(ns.db(), &attempts).await;
    // ALTER SYSTEM refuses a transaction block: sent alone.
    let Db::Pg(pool) = ns.db() else { unreachable!() };
    let e = sqlx::raw_sql("ALTER SYSTEM SET work_mem = '64MB'").execute(pool).await.unwrap_err();
    assert_eq!(counterlab_strategies::classify(Dialect::Postgres, e).class, ErrorClass::Permission);
    let after: String = sqlx::query_scalar(sqlx::AssertSqlSafe(snapshot)).fetch_one(&admin).await.unwrap();
    assert_eq!(before, after, "sentinels unchanged");
    // Its own large objects go with the role.
    attempt(ns.db(), &["SELECT lo_from_bytea(0, 'mine'::bytea)"]).await.unwrap();
    let role = ns.name().to_string();
    ns.drop_namespace().await.unwrap();
    other.drop_namespace().await.unwrap();
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM pg_roles WHERE rolname = $1) + (SELECT count(*) FROM pg_namespace WHERE nspname = $1)",
    )
    .bind(&role)
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(left, 0, "role and schema dropped");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TABLE {t}; SELECT lo_unlink({lo})")))
        .execute(&admin)
        .await
        .unwrap();
}

/// The namespace name with its last `_` replaced by `x`.
fn look_alike(ns: &str) -> String {
    let i = ns.rfind('_').unwrap();
    format!("{}x{}", &ns[..i], &ns[i + 1..])
}

/// `chr(68)||chr(69)||...`: a string written without a quote.
fn chr_concat(s: &str) -> String {
    s.bytes().map(|b| format!("chr({b})")).collect::<Vec<_>>().join("||")
}

#[tokio::test]
async fn mariadb_user_reaches_nothing_outside_its_database() {
    crate::require!(Mariadb);
    let server = Server::connect_mysql(&util::mysql_url(), Duration::from_secs(5)).await.unwrap();
    let ns = namespace(&server, "escape-my", Isolation::ReadCommitted).await;
    let other = namespace(&server, "escape-my-other", Isolation::ReadCommitted).await;
    let admin = util::mysql_admin().await;
    let tag = counterlab::run::new_run_id();
    let t = format!("test.cl_sentinel_{tag}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE TABLE {t} (x int); INSERT INTO {t} VALUES (1), (2)")))
        .execute(&admin)
        .await
        .unwrap();
    let snapshot = format!("SELECT GROUP_CONCAT(x ORDER BY x) FROM {t}");
    let before: String = sqlx::query_scalar(sqlx::AssertSqlSafe(snapshot.clone())).fetch_one(&admin).await.unwrap();
    let outfile = format!("/tmp/cl_escape_{tag}");
    let attempts: Vec<(&str, Vec<&'static str>, bool)> = vec![
        ("write another database", vec![leak(format!("INSERT INTO {t} VALUES (666)"))], true),
        ("read another database", vec![leak(format!("SELECT * FROM {t}"))], true),
        ("another namespace", vec![leak(format!("SELECT count(*) FROM `{}`.notifications", other.name()))], true),
        ("user table", vec!["SELECT * FROM mysql.user"], true),
        ("write a server file", vec![leak(format!("SELECT 1 INTO OUTFILE '{outfile}'"))], true),
        ("create a database", vec![leak(format!("CREATE DATABASE cl_evil_{tag}"))], true),
        // `_` in a GRANT's database name is a wildcard unless escaped: a name that differs
        // from the namespace only where it has a `_` must be out of reach.
        (
            "a database the grant's `_` would match",
            vec![leak(format!("CREATE DATABASE `{}`", look_alike(ns.name())))],
            true,
        ),
        ("create a table elsewhere", vec![leak(format!("CREATE TABLE test.cl_evil_{tag} (x int)"))], true),
        ("a view over another database", vec![leak(format!("CREATE VIEW v AS SELECT * FROM {t}"))], true),
        ("global setting", vec!["SET GLOBAL max_connect_errors = 100"], true),
        ("grant itself more", vec!["GRANT ALL ON *.* TO CURRENT_USER"], false),
        ("create a user", vec![leak(format!("CREATE USER 'cl_evil_{tag}'@'%'"))], true),
    ];
    all_refused(ns.db(), &attempts).await;
    // LOAD_FILE without the FILE right reads nothing (NULL) rather than failing.
    let file: Option<Vec<u8>> = match ns.db() {
        Db::My(p) => sqlx::query_scalar("SELECT LOAD_FILE('/etc/hostname')").fetch_one(p).await.unwrap(),
        _ => unreachable!(),
    };
    assert_eq!(file, None, "LOAD_FILE read a server file");
    assert!(!std::path::Path::new(&outfile).exists());
    let after: String = sqlx::query_scalar(sqlx::AssertSqlSafe(snapshot)).fetch_one(&admin).await.unwrap();
    assert_eq!(before, after, "sentinel unchanged");
    let user = match ns.identity() {
        Identity::Own { name, .. } => name.clone(),
        other => panic!("{other:?}"),
    };
    ns.drop_namespace().await.unwrap();
    other.drop_namespace().await.unwrap();
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM mysql.user WHERE user = ?")
        .bind(&user)
        .fetch_one(&admin)
        .await
        .unwrap();
    assert_eq!(left, 0, "user dropped");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TABLE {t}"))).execute(&admin).await.unwrap();
}

#[tokio::test]
async fn sqlite_authorizer_keeps_a_namespace_in_its_file() {
    let dir = util::sqlite_dir("escape");
    let server = Server::open_sqlite(&dir).await.unwrap();
    let ns = namespace(&server, "escape-lite", Isolation::Serializable).await;
    let outside = dir.join("sentinel.sqlite3");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=rwc", outside.display())).await.unwrap();
    sqlx::raw_sql("CREATE TABLE s (x INTEGER); INSERT INTO s VALUES (1), (2)").execute(&pool).await.unwrap();
    pool.close().await;
    let before = std::fs::read(&outside).unwrap();
    let into = dir.join("escaped.sqlite3");
    let attempts: Vec<(&str, Vec<&'static str>, bool)> = vec![
        ("attach another file", vec![leak(format!("ATTACH '{}' AS o", outside.display()))], true),
        ("writable schema", vec!["PRAGMA writable_schema = ON"], true),
        ("change the journal", vec!["PRAGMA journal_mode = DELETE"], true),
        ("write the schema table", vec!["UPDATE sqlite_master SET sql = 'x' WHERE name = 'notifications'"], false),
        ("drop the schema table", vec!["DROP TABLE sqlite_master"], false),
        ("load an extension", vec!["SELECT load_extension('/tmp/x')"], true),
        ("a virtual table", vec!["CREATE VIRTUAL TABLE v USING fts5(x)"], true),
    ];
    all_refused(ns.db(), &attempts).await;
    // VACUUM cannot run in a transaction: sent alone.
    let vacuum = leak(format!("VACUUM INTO '{}'", into.display()));
    assert!(ns.db().opt_i64(vacuum, &[]).await.is_err(), "VACUUM INTO wrote a file");
    assert!(!into.exists());
    assert_eq!(std::fs::read(&outside).unwrap(), before, "the outside file is unchanged byte for byte");
    // The namespace itself still works under its authorizer.
    attempt(ns.db(), &["UPDATE unread_counts SET unread = unread WHERE user_id = 1"]).await.unwrap();
    ns.drop_namespace().await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn redis_acl_user_reaches_only_its_prefix() {
    crate::require!(Redis);
    let server = RedisServer::connect(&crate::redis::redis_url(), Duration::from_secs(5)).await.unwrap();
    let ns = counterlab::run::namespace_name(&counterlab::run::new_run_id(), "escape-redis");
    let space = server.space(&ns, Duration::from_secs(5), 2).await.unwrap();
    assert!(space.identity().isolated(), "{}", space.identity().describe());
    let mut admin =
        redis::Client::open(crate::redis::redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let sentinel = format!("cl_sentinel:{ns}");
    let escape = format!("cl_escape:{ns}");
    admin.set::<_, _, ()>(&sentinel, "keep").await.unwrap();
    let own = format!("{}k", space.prefix());
    let lua = |code: &str, key: &str| redis::cmd("EVAL").arg(code).arg(1).arg(key).clone();
    let attempts: Vec<(&str, redis::Cmd)> = vec![
        ("SET outside the prefix", redis::cmd("SET").arg(&sentinel).arg("x").clone()),
        ("GET outside the prefix", redis::cmd("GET").arg(&sentinel).clone()),
        ("KEYS", redis::cmd("KEYS").arg("*").clone()),
        ("SCAN", redis::cmd("SCAN").arg(0).clone()),
        ("RANDOMKEY", redis::cmd("RANDOMKEY").clone()),
        ("FLUSHALL", redis::cmd("FLUSHALL").clone()),
        ("CONFIG SET", redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("1").clone()),
        ("ACL SETUSER", redis::cmd("ACL").arg("SETUSER").arg(&ns).arg("~*").clone()),
        ("SCRIPT FLUSH", redis::cmd("SCRIPT").arg("FLUSH").clone()),
        ("FUNCTION FLUSH", redis::cmd("FUNCTION").arg("FLUSH").clone()),
        ("PUBLISH", redis::cmd("PUBLISH").arg("ch").arg("x").clone()),
        ("SELECT another db", redis::cmd("SELECT").arg(1).clone()),
        ("SORT ... GET another key", redis::cmd("SORT").arg(&own).arg("GET").arg(&sentinel).clone()),
        ("RENAME out of the prefix", redis::cmd("RENAME").arg(&own).arg(&escape).clone()),
        ("EVAL declaring a key outside", lua("return redis.call('GET', KEYS[1])", &sentinel)),
        (
            "Lua key rebuilt with string functions",
            lua(&format!("return redis.call('SET', KEYS[1]:sub(1, 0) .. '{escape}', 'x')"), &own),
        ),
        (
            "Lua key rebuilt with gsub",
            lua(&format!("return redis.call('SET', (string.gsub(KEYS[1], '^.*$', '{escape}')), 'x')"), &own),
        ),
        ("Lua reassigning KEYS", lua(&format!("KEYS[1] = '{sentinel}'; return redis.call('SET', KEYS[1], 'x')"), &own)),
        ("Lua computed command name", lua("return redis.call(string.lower('FLUSH' .. 'ALL'))", &own)),
        ("Lua FLUSHDB", lua("return redis.call('FLUSHDB')", &own)),
    ];
    let mut conn = space.conn();
    for (what, cmd) in &attempts {
        let r: Result<redis::Value, _> = cmd.query_async(&mut conn).await;
        let e = r.err().unwrap_or_else(|| panic!("escape attempt succeeded: {what}"));
        let e = counterlab_strategies::classify_redis(e);
        assert_eq!(e.class, ErrorClass::Permission, "{what}: {e}");
    }
    // Its own prefix works, scripts included.
    let _: () = conn.set(&own, 1).await.unwrap();
    let v: i64 = lua("return redis.call('INCR', KEYS[1])", &own).query_async(&mut conn).await.unwrap();
    assert_eq!(v, 2);
    let kept: String = admin.get(&sentinel).await.unwrap();
    assert_eq!(kept, "keep", "sentinel unchanged");
    assert!(!admin.exists::<_, bool>(&escape).await.unwrap(), "no key written outside the prefix");
    drop(conn);
    space.delete_all().await.unwrap();
    space.release().await.unwrap();
    let users: Vec<String> = redis::cmd("ACL").arg("USERS").query_async(&mut admin).await.unwrap();
    assert!(!users.contains(&ns), "ACL user dropped");
    admin.del::<_, ()>(&sentinel).await.unwrap();
}

/// The conditional-update file strategy renamed `escape-file`, with `edit` applied, in a
/// small scenario on `backend`.
fn escaping_scenario(backend: &str, edit: impl Fn(String) -> String) -> String {
    let f = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/strategies/conditional-update.toml");
    let base = std::fs::read_to_string(f).unwrap().replace("conditional-update-file", "escape-file");
    format!(
        "name = \"escape\"\nseed = 5\nstrategies = [\"escape-file\"]\nbackends = [\"{backend}\"]\n\
         [data]\nusers = 20\nnotifications_per_user = 5\n\
         [workload]\nworkers = 2\nops = 200\n[workload.mix]\nmark_read = 50\nread_count = 50\n{}",
        edit(base)
    )
}

const READ_STEP: &str = "sql = \"SELECT unread FROM unread_counts WHERE user_id = :user\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_tries_to_escape_fails_visibly_and_a_misspelt_one_never_loads() {
    crate::require!(Postgres);
    // Passes the lexical rules (no quote, no qualified name in sight), refused by the role.
    let tag = counterlab::run::new_run_id();
    let admin = util::admin().await;
    let t = format!("public.cl_sentinel_{tag}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE TABLE {t} (x int)"))).execute(&admin).await.unwrap();
    let read = format!(
        "sql = \"SELECT count(*) AS unread FROM (SELECT query_to_xml({}, true, true, chr(32))) x\"",
        chr_concat(&format!("SELECT * FROM {t}"))
    );
    let plan = util::plan(&escaping_scenario("postgres", |b| b.replace(READ_STEP, &read)));
    let report = run_plan(&plan, &util::options(false, None), &mut |_| {}).await.unwrap();
    let s = &report.strategies[0];
    // The refused step is read_count's, so no settled read could be compared either, and
    // the label says so rather than dropping them silently.
    let label = "FAIL: denied [20 of 20 settled reads errored twice and were not compared]";
    assert!(s.permission_denied > 0 && s.check.label() == label, "{} {}", s.permission_denied, s.check.label());
    assert_eq!(s.history.settled_reads, 0);
    assert!(!s.check.matches_guarantee && !report.all_guarantees_held);
    assert!(s.identity.starts_with("role cl_"), "{}", s.identity);
    assert!(counterlab_report::render_markdown(&report).contains("FAIL: denied"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TABLE {t}"))).execute(&admin).await.unwrap();

    // A misspelt table is a load error at the step's file:line:col, before any load.
    let plan = util::plan(&escaping_scenario("postgres", |b| b.replace("FROM unread_counts", "FROM unread_countz")));
    let e = run_plan(&plan, &util::options(false, None), &mut |_| {}).await.expect_err("refused at load").to_string();
    assert!(e.contains("inline.toml:") && e.contains("unread_countz") && e.contains("read_count"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lua_step_that_rebuilds_its_key_is_refused_by_redis() {
    crate::require!(Postgres, Redis);
    let tag = counterlab::run::new_run_id();
    let escape = format!("cl_escape:{tag}");
    let step = format!(
        "[[strategy.escape-file.mark_read]]\nwhen = \"set.rows == 1\"\n\
         lua = \"return redis.call('SET', KEYS[1]:sub(1, 0) .. '{escape}', 'x')\"\nkeys = [\"c:{{user}}\"]\n\n\
         [[strategy.escape-file.delete]]"
    );
    let toml = escaping_scenario("postgres", |b| b.replacen("[[strategy.escape-file.delete]]", &step, 1));
    let plan = util::plan(&toml);
    let report = run_plan(&plan, &util::options(false, None), &mut |_| {}).await.unwrap();
    let s = &report.strategies[0];
    assert!(
        s.permission_denied > 0 && s.check.label() == "FAIL: denied",
        "{} {}",
        s.permission_denied,
        s.check.label()
    );
    assert!(s.identity.contains("Redis: ACL user cl_"), "{}", s.identity);
    let mut admin =
        redis::Client::open(crate::redis::redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    assert!(!admin.exists::<_, bool>(&escape).await.unwrap(), "the script wrote outside the prefix");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_right_to_create_roles_files_are_refused_unless_trusted() {
    crate::require!(Postgres);
    let tag = counterlab::run::new_run_id();
    let (user, pw) = (format!("cl_t_limited_{tag}"), "limited-pw-42");
    let admin = util::admin().await;
    let setup = format!(
        "CREATE ROLE \"{user}\" LOGIN PASSWORD '{pw}' NOCREATEROLE; GRANT CREATE ON DATABASE test TO \"{user}\""
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(setup)).execute(&admin).await.unwrap();
    let url = format!("postgres://{user}:{pw}@127.0.0.1:5432/test");
    let mut opts = util::options(false, None);
    opts.postgres_url = Some(url);
    let plan = util::plan(&escaping_scenario("postgres", |b| b));
    let refused = run_plan(&plan, &opts, &mut |_| {}).await.expect_err("refused").to_string();
    let left_behind: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_namespace WHERE nspowner = (SELECT oid FROM pg_roles WHERE rolname = $1)",
    )
    .bind(&user)
    .fetch_one(&admin)
    .await
    .unwrap();
    opts.trust_strategy_files = true;
    let trusted = run_plan(&plan, &opts, &mut |_| {}).await;
    let teardown =
        format!("REVOKE CREATE ON DATABASE test FROM \"{user}\"; DROP OWNED BY \"{user}\"; DROP ROLE \"{user}\"");
    sqlx::raw_sql(sqlx::AssertSqlSafe(teardown)).execute(&admin).await.unwrap();
    assert!(refused.contains("CREATEROLE") && refused.contains("--trust-strategy-files"), "{refused}");
    assert!(!refused.contains(pw), "{refused}");
    assert_eq!(left_behind, 0, "a refused run created nothing");
    let report = trusted.unwrap();
    let s = &report.strategies[0];
    assert!(report.trusted_strategy_files && s.identity.starts_with("the configured account"), "{}", s.identity);
    assert_eq!(s.check.label(), "pass");
}

#[tokio::test]
async fn tls_carries_to_each_namespace_identity() {
    crate::require!(Postgres);
    let url = format!("{}?sslmode=require", util::pg_url());
    let server = Server::connect_postgres(&url, Duration::from_secs(5)).await.unwrap();
    let ns = namespace(&server, "tls-pg", Isolation::ReadCommitted).await;
    let Db::Pg(pool) = ns.db() else { unreachable!() };
    let ssl: bool =
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetch_one(pool).await.unwrap();
    ns.drop_namespace().await.unwrap();
    assert!(ssl, "the namespace role's connection is not TLS (is ssl on in this PostgreSQL?)");

    // A Redis with no plain-text port at all: anything that works went over TLS.
    let redis = util::PrivateRedis::start(true);
    let url = format!("rediss://127.0.0.1:{}/#insecure", redis.1);
    let mut connected = None;
    for _ in 0..50 {
        match RedisServer::connect(&url, Duration::from_secs(1)).await {
            Ok(s) => {
                connected = Some(s);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let server = connected.expect("the TLS Redis answers within 5 s");
    let ns = counterlab::run::namespace_name(&counterlab::run::new_run_id(), "tls-redis");
    let space = server.space(&ns, Duration::from_secs(5), 1).await.unwrap();
    assert!(space.identity().isolated(), "{}", space.identity().describe());
    let key = format!("{}k", space.prefix());
    let mut conn = space.conn();
    let _: () = conn.set(&key, 7).await.unwrap();
    let v: i64 = conn.get(&key).await.unwrap();
    assert_eq!(v, 7);
    drop(conn);
    space.release().await.unwrap();
}
