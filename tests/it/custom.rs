//! File-defined strategies on the real backends: the conditional-update and
//! select-for-update twins give their built-ins' verdicts on the same seed, the racy direct-update file is caught, the
//! slotted counter is exact by its own table; each load-time validation error is located.

use std::path::Path;

use counterlab::scenario::{Overrides, load, parse};

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
        let rows = util::stored_drift_and_drop(&s.backend, &s.namespace, None).await;
        let mismatched = rows.iter().filter(|(_, c, t)| c != t).count() as u64;
        assert_eq!(mismatched, s.check.users_mismatched, "{}: the checker and our own SQL disagree", s.strategy);
        stored.push((s.strategy.as_str(), mismatched, s.check.verdict.as_str(), s.ops_total));
    }
    let [builtin, twin, lock, lock_twin, racy] = stored[..] else { panic!("{stored:?}") };
    for (b, t) in [(builtin, twin), (lock, lock_twin)] {
        assert_eq!((b.1, b.2), (0, "pass"), "{stored:?}");
        assert_eq!((t.1, t.2), (b.1, b.2), "the twin's verdict differs: {stored:?}");
    }
    assert!(racy.1 > 0 && racy.2 == "drift-expected", "duplicate mark_reads did not catch the racy file: {stored:?}");
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
    let plan = byo(&["slotted-counter"], 2000);
    let report = util::run_kept(&plan, None).await;
    let s = &report.strategies[0];
    assert_eq!(s.check.verdict, "pass", "{:?}", s.check);
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

const BASE: &str = "[data]\nusers = 10\nnotifications_per_user = 2\n[workload]\nworkers = 2\nops = 10\n\
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
    ];
    for (src, at, words) in cases {
        let e = err(&src);
        assert!(e.starts_with(at), "expected {at:?}, got {e:?}\n--- input:\n{src}");
        assert!(e.contains(words), "expected {words:?} in {e:?}");
    }
}
