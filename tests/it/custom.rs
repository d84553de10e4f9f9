//! File-defined strategies on the real backends: the conditional-update, select-for-update,
//! lua-script, watch-multi and redis-set twins give their built-ins' verdicts on the same
//! seed, the racy files (SQL and Redis, an unwatched read-modify-write) are caught, the
//! slotted counter is exact by its own table, Redis faults reach file strategies, and
//! each load-time validation error is located.

use std::path::Path;

use counterlab::scenario::{Overrides, load, parse};
use counterlab_core::Verdict;

use crate::util;

fn byo(strategies: &[&str], ops: u64) -> counterlab::scenario::RunPlan {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/bring-your-own.toml");
    let overrides = Overrides {
        strategies: strategies.iter().map(|s| s.to_string()).collect(),
        backends: vec!["postgres".into()],
        ops: Some(ops),
        ..Overrides::default()
    };
    load(&f, &overrides, &util::known(), 21).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_twin_gives_the_built_in_verdict_and_the_racy_file_is_caught() {
    crate::require!(Postgres);
    let plan = byo(
        &[
            "conditional-update",
            "conditional-update-file",
            "select-for-update",
            "select-for-update-file",
            "direct-update-file",
        ],
        3000,
    );
    let report = util::run_kept(&plan, None).await;
    let mut stored = Vec::new();
    for s in &report.strategies {
        let rows = util::stored_drift_and_drop(&s.backend.name(), &s.namespace, None).await;
        let mismatched = rows.iter().filter(|(_, c, t)| c != t).count() as u64;
        assert_eq!(mismatched, s.check.users_mismatched, "{}: the checker and our own SQL disagree", s.strategy);
        stored.push((s.strategy.as_str(), mismatched, &s.check.verdict, s.ops_total));
    }
    let [builtin, twin, lock, lock_twin, racy] = stored[..] else { panic!("{stored:?}") };
    for (b, t) in [(builtin, twin), (lock, lock_twin)] {
        assert_eq!((b.1, b.2), (0, &Verdict::Pass), "{stored:?}");
        assert_eq!((t.1, t.2), (b.1, b.2), "the twin's verdict differs: {stored:?}");
    }
    assert!(
        racy.1 > 0 && racy.2 == &Verdict::DriftExpected,
        "duplicate mark_reads did not catch the racy file: {stored:?}"
    );
    // Same seed, same op plan: the same number of ops reached each strategy.
    let planned = |name: &str| {
        let s = report.strategies.iter().find(|s| s.strategy == name).unwrap();
        s.ops_total + s.ops.values().map(|o| o.skipped).sum::<u64>()
    };
    assert_eq!(planned("conditional-update"), planned("conditional-update-file"));
    assert_eq!(planned("select-for-update"), planned("select-for-update-file"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slotted_counter_is_exact_by_its_own_table() {
    crate::require!(Postgres);
    let plan = byo(&["slotted-counter"], 2000);
    let report = util::run_kept(&plan, None).await;
    let s = &report.strategies[0];
    assert_eq!(s.check.label(), "pass", "{:?}", s.check);
    assert_eq!(s.check.users_checked, 1000);
    // Our own SQL: the sum of each user's slots against the unread rows.
    let admin = util::admin().await;
    let ns = &s.namespace;
    let wrong: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM (SELECT user_id, SUM(n) AS c FROM \"{ns}\".counter_slots GROUP BY user_id) s \
         WHERE s.c <> (SELECT COUNT(*) FROM \"{ns}\".notifications n WHERE n.user_id = s.user_id AND NOT n.is_read)"
    )))
    .fetch_one(&admin)
    .await
    .unwrap();
    let slots_used: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(DISTINCT slot) FROM \"{ns}\".counter_slots WHERE n <> 0"
    )))
    .fetch_one(&admin)
    .await
    .unwrap();
    util::drop_schema(&admin, ns).await;
    assert_eq!(wrong, 0);
    assert!(slots_used > 1, "writes did not spread over the slots");
}

pub(crate) const BASE: &str = "[data]\nusers = 10\nnotifications_per_user = 2\n[workload]\nworkers = 2\nops = 10\n\
    [workload.mix]\nmark_read = 1\n";

/// A valid strategy with `mark_read`'s first step replaced by `step` (lines 2..).
fn with_step(step: &str) -> String {
    format!(
        "{BASE}[strategy.mine]\nguarantee = \"exact\"\n\
         [[strategy.mine.create]]\nsql = \"INSERT INTO notifications (user_id) VALUES (:user) RETURNING id\"\n\
         [[strategy.mine.mark_read]]\n{step}\n\
         [[strategy.mine.delete]]\nsql = \"DELETE FROM notifications WHERE id = :id\"\n\
         [[strategy.mine.mark_all_read]]\nsql = \"UPDATE notifications SET is_read = TRUE WHERE user_id = :user\"\n\
         [[strategy.mine.read_count]]\nsql = \"SELECT unread FROM unread_counts WHERE user_id = :user\"\nreturns = [\"unread\"]\n\
         [strategy.mine.result]\ncreate = \"s1.last_id\"\nmark_read = \"s1.rows\"\ndelete = \"s1.rows\"\n\
         mark_all_read = \"s1.rows\"\nread_count = \"s1.unread\"\n"
    )
}

fn err(src: &str) -> String {
    parse("byo.toml", src, "byo", &Overrides::default(), &util::known(), 1).unwrap_err().to_string()
}

#[test]
fn a_valid_file_strategy_joins_the_plan() {
    let plan = parse(
        "byo.toml",
        &with_step("sql = \"UPDATE notifications SET is_read = TRUE WHERE id = :id AND user_id = :user\""),
        "byo",
        &Overrides::default(),
        &util::known(),
        1,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(plan.strategies.contains(&"mine".to_string()));
    assert_eq!(plan.custom["mine"].steps[1][0].name, "s1");
}

#[test]
fn bad_strategy_definitions_are_located() {
    // BASE is 8 lines; the strategy table starts on line 9, mark_read's step on line 14.
    let cases: Vec<(String, &str, &str)> = vec![
        (
            with_step("sql = \"UPDATE notifications SET is_read = TRUE WHERE id = :nid\""),
            "byo.toml:14:7:",
            "unknown parameter `nid`",
        ),
        (
            with_step(
                "sql = \"UPDATE unread_counts SET unread = unread - 1 WHERE user_id = :user\"\nwhen = \"check.rows == 1\"",
            ),
            "byo.toml:15:8:",
            "refers to no step named `check`",
        ),
        (
            with_step("sql = \"UPDATE public.notifications SET is_read = TRUE WHERE id = :id\""),
            "byo.toml:14:7:",
            "qualified names are not allowed",
        ),
        (
            with_step("sql = \"UPDATE notifications SET is_read = TRUE; DROP TABLE unread_counts\""),
            "byo.toml:14:7:",
            "one statement per step",
        ),
        (with_step("sql = \"DROP TABLE notifications\""), "byo.toml:14:7:", "must start with select"),
        (
            with_step(
                "sql = \"SELECT is_read FROM notifications WHERE id = :id\"\nreturns = [\"is_read\"]\nwhen = \"s1.is_read = 0\"",
            ),
            "byo.toml:16:8:",
            "cannot read `s1.is_read = 0`",
        ),
        (
            with_step("sql = \"UPDATE notifications SET is_read = TRUE\"")
                .replace("[[strategy.mine.mark_read]]", "[[strategy.mine.mark_raed]]"),
            "byo.toml:13:17:",
            "unknown field `mark_raed`",
        ),
        (
            with_step("sql = \"UPDATE notifications SET is_read = TRUE\"")
                .replace("strategy.mine", "strategy.conditional-update"),
            "byo.toml:",
            "a built-in strategy's",
        ),
        (
            with_step("sql = \"UPDATE notifications SET is_read = TRUE\"")
                .replace("mark_read = \"s1.rows\"", "mark_read = \"s2.rows\""),
            "byo.toml:",
            "result.mark_read: `s2.rows` refers to no step named `s2`",
        ),
        (
            format!("strategy_files = [\"no/such/file.toml\"]\n{BASE}"),
            "byo.toml:1:19:",
            "cannot read strategy file no/such/file.toml",
        ),
        (
            with_step("sql = \"UPDATE notifications SET is_read = TRUE WHERE id = :id -- ' ; ATTACH x\""),
            "byo.toml:14:7:",
            "string literals are not allowed",
        ),
        (
            with_step("sql = \"UPDATE ONLY public.accounts SET balance = 0 WHERE id = :id\""),
            "byo.toml:14:7:",
            "qualified names are not allowed",
        ),
        (
            with_step("sql = \"UPDATE notifications SET is_read = TRUE\"").replace(" RETURNING id", ""),
            "byo.toml:",
            "`last_id` on PostgreSQL needs the step to be an INSERT ... RETURNING id",
        ),
        (
            with_step("lua_file = \"no/such.lua\"\nkeys = [\"k:{user}\"]"),
            "byo.toml:14:12:",
            "cannot read Lua file no/such.lua",
        ),
        (
            with_step("lua = \"return redis.call('GET', 'other:key')\""),
            "byo.toml:14:7:",
            "must name its key as KEYS[...], so it stays under the run's prefix",
        ),
        (
            with_step("lua = \"return redis.call('GET', KEYS[2])\"\nkeys = [\"k:{user}\"]"),
            "byo.toml:14:7:",
            "KEYS[2], but the step passes 1 key",
        ),
        (with_step("redis = \"FLUSHALL\"\nkeys = [\"k\"]"), "byo.toml:14:9:", "`FLUSHALL` is not allowed"),
        (with_step("redis = \"GET\"\nkeys = [\"k:{nid}\"]"), "byo.toml:14:9:", "unknown parameter `nid`"),
        (
            with_step("redis = \"GET\"\nkeys = [\"k:{user}\"]\neach = \"nope\""),
            "byo.toml:16:8:",
            "each: no earlier step named `nope`",
        ),
        (
            with_step("sql = \"UPDATE notifications SET is_read = TRUE\"\nredis = \"GET\""),
            "byo.toml:13:1:",
            "give exactly one of sql, redis, lua, lua_file",
        ),
    ];
    for (src, at, words) in cases.into_iter().chain(new_syntax_cases()) {
        let e = err(&src);
        assert!(e.starts_with(at), "expected {at:?}, got {e:?}\n--- input:\n{src}");
        assert!(e.contains(words), "expected {words:?} in {e:?}");
    }
}

/// The shipped lua-script twin reads its scripts from `lua/` beside it; each step's
/// origin is the path as written (relative to the file), not one showing the checkout.
#[test]
fn the_shipped_lua_file_strategy_loads_its_scripts_by_relative_path() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let plan = load(&dir.join("bring-your-own-redis.toml"), &Overrides::default(), &util::known(), 1)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut scripts = Vec::new();
    for step in plan.custom["lua-script-file"].steps.iter().flatten() {
        if let counterlab_strategies::Action::Lua { origin, script, .. } = &step.action
            && !origin.starts_with("inline")
        {
            assert_eq!(*script, std::fs::read_to_string(dir.join("strategies").join(origin)).unwrap(), "{origin}");
            scripts.push(origin.as_str());
        }
    }
    assert_eq!(scripts, ["lua/create.lua", "lua/mark_read.lua", "lua/delete.lua", "lua/mark_all_read.lua"]);
}

/// Files a scenario names are read from its folder and below only: an absolute path, a
/// `..` out of it and a symbolic link out of it are refused at load (exit 2) with one
/// located line, and the file's content (a canary) is in no output and no file written.
#[test]
fn a_file_outside_the_scenario_folder_is_refused_and_never_shown() {
    let root = util::tempdir("confined");
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let canary = format!("CANARY-{}-{nanos}", std::process::id());
    std::fs::write(root.join("secret.lua"), format!("return '{canary}'\n")).unwrap();
    let scen = root.join("scen");
    std::fs::create_dir(&scen).unwrap();
    std::os::unix::fs::symlink("../secret.lua", scen.join("link.lua")).unwrap();
    let secret = root.join("secret.lua").display().to_string();
    let lua = |given: &str| with_step(&format!("lua_file = \"{given}\"\nkeys = [\"k:{{user}}\"]"));
    let cases = [
        ("abs", lua(&secret), format!("abs.toml:14:12: cannot read Lua file {secret}: an absolute path")),
        ("up", lua("../secret.lua"), "up.toml:14:12: cannot read Lua file ../secret.lua: `..` leaves".into()),
        ("link", lua("link.lua"), "link.toml:14:12: cannot read Lua file link.lua: it resolves".into()),
    ];
    for (name, text, expected) in cases {
        let file = scen.join(format!("{name}.toml"));
        std::fs::write(&file, text).unwrap();
        let out = root.join(format!("out-{name}"));
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_counterlab"))
            .args(["run", file.to_str().unwrap(), "--backend", "sqlite", "--out", out.to_str().unwrap()])
            .env_remove("DATABASE_URL")
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.status.code(), Some(2), "{name}: {text}");
        assert_eq!(text.lines().count(), 1, "{name}: one line: {text}");
        assert!(text.contains(&expected), "{name}: expected {expected:?} in {text:?}");
        assert!(!text.contains(&canary), "{name}: the file's content leaked: {text}");
        for written in util::files_under(&out) {
            let bytes = std::fs::read(&written).unwrap();
            assert!(!String::from_utf8_lossy(&bytes).contains(&canary), "{name}: in {}", written.display());
        }
    }
}

/// Expressions, retry groups and Redis counter reads (issue 19), located.
fn new_syntax_cases() -> Vec<(String, &'static str, &'static str)> {
    let retry = |step: &str, table: &str| format!("{}{table}", with_step(step));
    let update = "sql = \"UPDATE notifications SET is_read = TRUE WHERE id = :id\"";
    vec![
        (with_step(&format!("{update}\nwhen = \"(user % 2 == 0\"")), "byo.toml:15:8:", "`(` without `)`"),
        (with_step(&format!("{update}\nwhen = \"user and or id\"")), "byo.toml:15:8:", "expected a value, found `or`"),
        (
            with_step("redis = \"GET\"\nkeys = [\"k:{user % nope}\"]"),
            "byo.toml:14:9:",
            "unknown parameter `nope`",
        ),
        (with_step(&format!("{update}\ngroup = \"g\"")), "byo.toml:15:9:", "group: no [retry.g] table"),
        (with_step(&format!("{update}\nafter_ms = 0")), "byo.toml:15:12:", "after_ms must be in 1..=10000, got 0"),
        (
            with_step(update).replace("guarantee = \"exact\"\n", "guarantee = \"exact\"\nread_lag_ms = 20000\n"),
            "byo.toml:11:15:",
            "read_lag_ms must be in 1..=10000, got 20000",
        ),
        (
            retry(&format!("{update}\ngroup = \"g\""), "[strategy.mine.retry.g]\nuntil = \"s1.rows = 1\"\n"),
            "byo.toml:30:9:",
            "mark_read step 1: until: cannot read `s1.rows = 1`",
        ),
        (
            retry(update, "[strategy.mine.retry.g]\nuntil = \"s1.rows == 1\"\n"),
            "byo.toml:28:1:",
            "retry.g: no step has group = \"g\"",
        ),
        (
            retry(
                &format!("{update}\ngroup = \"g\""),
                "[strategy.mine.retry.g]\nuntil = \"s1.rows == 1\"\nmax_attempts = 0\n",
            ),
            "byo.toml:31:16:",
            "retry.g.max_attempts: 1..=1000",
        ),
        (
            with_step(update).replace(
                "guarantee = \"exact\"\n",
                "guarantee = \"exact\"\nredis_counters = { command = \"SADD\", key = \"s:{user}\" }\n",
            ),
            "byo.toml:11:30:",
            "redis_counters.command: `SADD` is not a read-only command; a counter is read with GET",
        ),
        (
            with_step(update).replace(
                "guarantee = \"exact\"\n",
                "guarantee = \"exact\"\nredis_counters = { lua = \"return redis.call('INCR', KEYS[1])\", key = \"c\" }\n",
            ),
            "byo.toml:11:26:",
            "redis_counters.lua: line 1: `INCR` is not a read-only command",
        ),
        (with_step("redis = \"EXEC\""), "byo.toml:14:9:", "EXEC without an earlier MULTI"),
        (
            with_step("redis = \"MULTI\"\n[[strategy.mine.mark_read]]\nredis = \"WATCH\"\nkeys = [\"c\"]"),
            "byo.toml:14:9:",
            "MULTI without a later EXEC or DISCARD",
        ),
    ]
}

fn byo_redis(strategies: &[&str], ops: u64, extra: &str) -> counterlab::scenario::RunPlan {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/bring-your-own-redis.toml");
    let text = std::fs::read_to_string(&f).unwrap() + extra;
    let overrides = Overrides {
        strategies: strategies.iter().map(|s| s.to_string()).collect(),
        backends: vec!["postgres".into()],
        ops: Some(ops),
        ..Overrides::default()
    };
    parse(&f.display().to_string(), &text, "bring-your-own-redis", &overrides, &util::known(), 22)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Each user's counter as Redis holds it under the run's prefix (`key` with `%` for the
/// user), read here with our own key names; None where the key is missing.
async fn redis_counters(namespace: &str, key: &str, n_users: i64) -> Vec<Option<i64>> {
    use redis::AsyncCommands;
    let mut c =
        redis::Client::open(crate::redis::redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let mut out = Vec::new();
    for u in 1..=n_users {
        out.push(
            c.get(format!("{}{}", counterlab_strategies::redis_prefix(namespace), key.replace('%', &u.to_string())))
                .await
                .unwrap(),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lua_twin_gives_the_built_in_verdict_and_redis_holds_what_the_check_read() {
    crate::require!(Postgres, Redis);
    let plan = byo_redis(&["lua-script", "lua-script-file", "redis-counter-file", "redis-unguarded-file"], 3000, "");
    let report = util::run_kept(&plan, None).await;
    let mut seen = Vec::new();
    for s in &report.strategies {
        let key = match s.strategy.as_str() {
            // The file's keys carry the built-in's hash tag (`{{u:{user}}}:unread`).
            "lua-script" | "lua-script-file" => "{u:%}:unread",
            _ => "c:%",
        };
        let counters = redis_counters(&s.namespace, key, 1000).await;
        assert!(counters.iter().all(|c| c.is_some()), "{}: a user's counter key is missing", s.strategy);
        // The truth from our own SQL (this also deletes the run's keys and drops the schema).
        let stored = util::stored_drift_and_drop(&s.backend.name(), &s.namespace, None).await;
        assert_eq!(stored.len(), 1000);
        let mismatched = stored.iter().zip(&counters).filter(|((_, _, truth), c)| Some(*truth) != **c).count() as u64;
        assert_eq!(mismatched, s.check.users_mismatched, "{}: the checker and Redis disagree", s.strategy);
        seen.push((s.strategy.as_str(), mismatched, &s.check.verdict));
    }
    let [builtin, twin, counter, unguarded] = seen[..] else { panic!("{seen:?}") };
    assert_eq!((builtin.1, builtin.2), (0, &Verdict::Pass), "{seen:?}");
    assert_eq!((twin.1, twin.2), (builtin.1, builtin.2), "the twin's verdict differs: {seen:?}");
    assert_eq!((counter.1, counter.2), (0, &Verdict::Pass), "{seen:?}");
    assert!(unguarded.1 > 0 && unguarded.2 == &Verdict::DriftExpected, "duplicate mark_reads missed: {seen:?}");
    let twin_report = report.strategies.iter().find(|s| s.strategy == "lua-script-file").unwrap();
    assert!(twin_report.ops["mark_all_read"].transitioned > 0, "no mark_all_read changed anything: `each` unexercised");
    let planned = |name: &str| {
        let s = report.strategies.iter().find(|s| s.strategy == name).unwrap();
        s.ops_total + s.ops.values().map(|o| o.skipped).sum::<u64>()
    };
    assert_eq!(planned("lua-script"), planned("lua-script-file"));
}

/// The designs re-expressed as files (`bring-your-own-redis-designs.toml`) beside their
/// built-ins, plus watch-multi-file with its WATCH replaced by a plain read (so EXEC never
/// aborts and racing updates overwrite each other) and its counter read by a Lua script:
/// the twins pass with exactly the built-ins' counters, the retry group ran, and the
/// unwatched copy drifts, as the script read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_multi_and_redis_set_files_give_their_built_ins_verdicts() {
    crate::require!(Postgres, Redis);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let f = dir.join("bring-your-own-redis-designs.toml");
    let unwatched = std::fs::read_to_string(dir.join("strategies/watch-multi.toml"))
        .unwrap()
        .replace("watch-multi-file", "watch-multi-unwatched-file")
        .replace("guarantee = \"exact\"", "guarantee = \"none\"")
        .replace("redis = \"WATCH\"", "redis = \"EXISTS\"")
        // Its counter read by a script, which the check's count must match.
        .replace(
            "redis_counters = { key = \"c:{user}\" }",
            "redis_counters = { lua = \"return redis.call('GET', KEYS[1])\", key = \"c:{user}\" }",
        );
    assert!(unwatched.contains("redis_counters = { lua"), "the script read was not put in");
    let text = std::fs::read_to_string(&f)
        .unwrap()
        .replace("\"redis-set-file\"]", "\"redis-set-file\", \"watch-multi-unwatched-file\"]")
        + &unwatched;
    let plan = parse(&f.display().to_string(), &text, "byo-designs", &Overrides::default(), &util::known(), 91)
        .unwrap_or_else(|e| panic!("{e}"));
    let report = util::run_kept(&plan, None).await;
    let mut seen = Vec::new();
    for s in &report.strategies {
        let key = match s.strategy.as_str() {
            "watch-multi" => Some("{u:%}:unread"),
            "watch-multi-file" | "watch-multi-unwatched-file" => Some("c:%"),
            _ => None,
        };
        let counters = match key {
            Some(k) => redis_counters(&s.namespace, k, 10).await,
            None => redis_cards(&s.namespace, if s.strategy == "redis-set" { "{u:%}:unread_ids" } else { "s:%" }).await,
        };
        let stored = util::stored_drift_and_drop(&s.backend.name(), &s.namespace, None).await;
        let mismatched = stored.iter().zip(&counters).filter(|((_, _, truth), c)| Some(*truth) != **c).count() as u64;
        assert_eq!(mismatched, s.check.users_mismatched, "{}: the checker and Redis disagree", s.strategy);
        seen.push((s.strategy.as_str(), mismatched, &s.check.verdict, s.ops_total));
    }
    let [watch, watch_file, set, set_file, unwatched] = seen[..] else { panic!("{seen:?}") };
    for (b, t) in [(watch, watch_file), (set, set_file)] {
        assert_eq!((b.1, b.2), (0, &Verdict::Pass), "{seen:?}");
        assert_eq!((t.1, t.2, t.3), (b.1, b.2, b.3), "the twin's verdict differs: {seen:?}");
    }
    assert!(unwatched.1 > 0 && unwatched.2 == &Verdict::DriftExpected, "lost updates missed without WATCH: {seen:?}");
    let file = report.strategies.iter().find(|s| s.strategy == "watch-multi-file").unwrap();
    assert_eq!(file.figures["group_give_ups"], 0.0, "{:?}", file.figures);
    assert!(file.figures["group_retries"] > 0.0, "no nil EXEC was retried: {:?}", file.figures);
}

/// A retry group whose `until` never holds: every mark_read runs its group 3 times, is
/// counted as 2 retries and a give-up, and fails with a conflict-class error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_group_that_never_succeeds_gives_up_after_its_bound() {
    crate::require!(Postgres, Redis);
    let src = with_step("redis = \"GET\"\nkeys = [\"k:{user % 4}\"]\ngroup = \"g\"")
        .replace("mark_read = \"s1.rows\"", "mark_read = \"s1.value\"")
        + "[strategy.mine.retry.g]\nuntil = \"s1.value == 1 and 1 / (user - user) == 0\"\nmax_attempts = 3\n";
    let overrides =
        Overrides { strategies: vec!["mine".into()], backends: vec!["postgres".into()], ..Overrides::default() };
    let plan = parse("byo.toml", &src, "byo", &overrides, &util::known(), 3).unwrap_or_else(|e| panic!("{e}"));
    let report = counterlab::run::run_plan(&plan, &util::options(false, None), &mut |_| {}).await.unwrap();
    let s = &report.strategies[0];
    let ops = &s.ops["mark_read"];
    // `and` reads no further than its false left side: no division by zero.
    assert!(ops.fail > 0 && ops.fail == ops.errors && ops.ok == 0, "{:?}", s.ops);
    let give_ups = s.figures["group_give_ups"];
    assert_eq!(give_ups, (ops.fail + ops.retries) as f64, "each attempt the driver made gave up once: {:?}", s.figures);
    assert_eq!(s.figures["group_retries"], 2.0 * give_ups, "{:?}", s.figures);
}

/// SCARD of each of the 10 users' sets (`key` with `%` for the user), under the run's prefix.
async fn redis_cards(namespace: &str, key: &str) -> Vec<Option<i64>> {
    use redis::AsyncCommands;
    let mut c = crate::redis::redis_conn().await;
    let mut out = Vec::new();
    for u in 1..=10 {
        out.push(Some(
            c.scard(format!("{}{}", counterlab_strategies::redis_prefix(namespace), key.replace('%', &u.to_string())))
                .await
                .unwrap(),
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_reach_file_defined_redis_strategies_and_their_keys_are_removed() {
    crate::require!(Postgres, Redis);
    // Three lost replies: the writes ran, the ops are unknown and not retried, and the
    // counter stays exact. A data loss then wipes the run's keys: the counters are gone.
    let extra = "\n[[faults]]\nkind = \"redis_timeout\"\nat_ms = 0\ntimes = 3\nstrategies = [\"redis-counter-file\"]\n";
    let plan = byo_redis(&["redis-counter-file"], 1500, extra);
    let report = counterlab::run::run_plan(&plan, &util::options(false, None), &mut |_| {}).await.unwrap();
    let s = &report.strategies[0];
    let unknown: u64 = s.ops.values().map(|o| o.unknown).sum();
    assert_eq!(unknown, 3, "{:?}", s.ops);
    assert_eq!(s.figures["lost_replies"], 3.0);
    assert_eq!(s.check.label(), "pass", "{:?}", s.check);
    assert_eq!(redis_counters(&s.namespace, "c:%", 1000).await.iter().flatten().count(), 0, "keys left behind");

    let extra = "\n[[faults]]\nkind = \"redis_data_loss\"\nat_ms = 0\nstrategies = [\"redis-counter-file\"]\n";
    let plan = byo_redis(&["redis-counter-file"], 300, extra);
    let report = counterlab::run::run_plan(&plan, &util::options(false, None), &mut |_| {}).await.unwrap();
    let s = &report.strategies[0];
    assert!(s.faults[0].outcome.starts_with("deleted "), "{:?}", s.faults);
    assert!(
        s.check.label().starts_with("FAIL: counters"),
        "a data loss without a reconciler must break an exact claim: {:?}",
        s.check
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lua_script_redis_refuses_fails_the_run_naming_the_script() {
    crate::require!(Postgres, Redis);
    let dir = util::tempdir("lua");
    std::fs::write(dir.join("bad.lua"), "return redis.call('GET', KEYS[1]) +* 1\n").unwrap();
    let src =
        with_step("lua_file = \"bad.lua\"\nkeys = [\"k:{user}\"]").replace("s1.rows\"\ndelete", "s1.value\"\ndelete");
    let path = dir.join("byo.toml");
    let plan = parse(&path.display().to_string(), &src, "byo", &Overrides::default(), &util::known(), 1)
        .unwrap_or_else(|e| panic!("{e}"));
    let e = counterlab::run::run_plan(&plan, &util::options(false, None), &mut |_| {}).await.unwrap_err().to_string();
    assert!(e.contains("bad.lua") && e.contains("refused by Redis"), "{e}");
    // The failed run removed its Redis space too (the marker key included).
    let server =
        counterlab_strategies::RedisServer::connect(&crate::redis::redis_url(), std::time::Duration::from_secs(5))
            .await
            .unwrap();
    let mine: Vec<_> = server
        .leftovers()
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.namespace.ends_with("_mine") && l.marker.pid == std::process::id() && l.sessions == 0)
        .collect();
    assert!(mine.is_empty(), "{mine:?}");
}

/// cache-aside and its delete-first mutant as files (`bring-your-own-cache.toml`) beside
/// their built-ins: the double delete passes in both forms, with its reads judged against
/// the lag it declares and the SQL counters exact; the delete-first designs fail on reads
/// only (their counters are exact too), and what they show is stale, never out of bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_aside_files_give_their_built_ins_verdicts() {
    crate::require!(Postgres, Redis);
    let _heavy = util::heavy().await;
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/bring-your-own-cache.toml");
    let text = std::fs::read_to_string(&f).unwrap();
    let plan = parse(&f.display().to_string(), &text, "byo-cache", &Overrides::default(), &util::known(), 23)
        .unwrap_or_else(|e| panic!("{e}"));
    let report = util::run_kept(&plan, None).await;
    for s in &report.strategies {
        let stored = util::stored_drift_and_drop(&s.backend.name(), &s.namespace, None).await;
        let mismatched = stored.iter().filter(|(_, c, t)| c != t).count() as u64;
        assert_eq!((mismatched, s.check.users_mismatched), (0, 0), "{}: the SQL counter is exact", s.strategy);
        let names: Vec<&str> = s.anomalies.iter().map(|a| a.name.as_str()).collect();
        let lag = s.figures.get("read_lag_allowed_ms").copied().unwrap_or(0.0);
        assert!(lag >= 100.0, "{}: reads judged with the declared lag: {:?}", s.strategy, s.figures);
        if s.strategy.starts_with("cache-aside") && !s.strategy.contains("delete-first") {
            assert_eq!((s.check.label().as_str(), names.len()), ("pass", 0), "{}: {names:?}", s.strategy);
        } else {
            assert!(names.iter().all(|n| n.starts_with("stale_")), "{}: {names:?}", s.strategy);
            if !names.is_empty() {
                assert_eq!(s.check.label(), "FAIL: reads", "{}", s.strategy);
            }
        }
    }
    let order: Vec<&str> = report.strategies.iter().map(|s| s.strategy.as_str()).collect();
    assert_eq!(order, ["cache-aside", "cache-aside-file", "cache-aside-delete-first", "cache-delete-first-file"]);
}

/// A file whose step's keys may hash to different Redis Cluster slots (`a:{user}` and
/// `b:{user}`, no shared hash tag): the scenario loads, since on one Redis server any
/// keys do; the run on a cluster refuses it (tests/it/cluster.rs).
pub(crate) fn cross_slot_file() -> String {
    format!(
        "{BASE}[strategy.mine]\nguarantee = \"none\"\n\
         [[strategy.mine.create]]\nsql = \"INSERT INTO notifications (user_id) VALUES (:user) RETURNING id\"\n\
         [[strategy.mine.mark_read]]\nsql = \"UPDATE notifications SET is_read = TRUE WHERE id = :id AND NOT is_read\"\n\
         [[strategy.mine.mark_read]]\nname = \"both\"\nredis = \"MGET\"\nkeys = [\"a:{{user}}\", \"b:{{user}}\"]\n\
         [[strategy.mine.delete]]\nsql = \"DELETE FROM notifications WHERE id = :id\"\n\
         [[strategy.mine.mark_all_read]]\nsql = \"UPDATE notifications SET is_read = TRUE WHERE user_id = :user\"\n\
         [[strategy.mine.read_count]]\nsql = \"SELECT unread FROM unread_counts WHERE user_id = :user\"\nreturns = [\"unread\"]\n\
         [strategy.mine.result]\ncreate = \"s1.last_id\"\nmark_read = \"s1.rows\"\ndelete = \"s1.rows\"\n\
         mark_all_read = \"s1.rows\"\nread_count = \"s1.unread\"\n"
    )
}

#[test]
fn keys_in_different_cluster_slots_load_for_one_server() {
    let plan = parse("byo.toml", &cross_slot_file(), "byo", &Overrides::default(), &util::known(), 1)
        .unwrap_or_else(|e| panic!("{e}"));
    let why = plan.custom["mine"].cross_slot().expect("the MGET's keys are in two slots");
    assert!(why.starts_with("byo.toml:17:"), "{why}");
    assert!(why.contains("mark_read step both") && why.contains("may hash to different Redis Cluster slots"), "{why}");
}
