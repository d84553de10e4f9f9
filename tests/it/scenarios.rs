//! Scenario files: every shipped one runs (small) and holds its guarantees; malformed
//! input is rejected with the file, line and column of the mistake.

use std::path::Path;

use counterlab::scenario::{Overrides, load, parse};
use counterlab_core::Guarantee;

use crate::util;

fn shipped() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shipped_scenario_runs_small() {
    crate::require!(Postgres, Mariadb, Redis, Rabbitmq);
    let _heavy = util::heavy().await;
    let files = shipped();
    assert!(files.len() >= 3, "{files:?}");
    for f in files {
        if f.ends_with("isolation-matrix.toml") {
            continue; // run by matrix::isolation_matrix_findings, with enough ops to race
        }
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(text.starts_with('#'), "{} is not documented at its top", f.display());
        let overrides = Overrides { ops: Some(300), workers: Some(3), ..Overrides::default() };
        let plan = load(&f, &overrides, &util::known(), 5).unwrap_or_else(|e| panic!("{e}"));
        if plan.replica.read_from.iter().any(|r| *r != counterlab_core::ReadFrom::Primary) {
            crate::replica::run_shipped(&f, &plan).await;
            continue;
        }
        let dir = util::sqlite_dir("shipped");
        let report = util::run_kept(&plan, Some(dir.to_path_buf())).await;
        assert!(!report.strategies.is_empty());
        for s in &report.strategies {
            let stored = util::stored_drift_and_drop(&s.backend.name(), &s.namespace, Some(&dir.to_path_buf())).await;
            // The stored `unread_counts` is the strategy's counter unless it keeps its own
            // (Redis, or a file-defined `counters` query such as slotted-counter's).
            let own_counter = plan.custom.get(&s.strategy).is_some_and(|c| c.counters.is_some());
            if !s.backend.name().ends_with("+redis") && !own_counter {
                let mismatched = stored.iter().filter(|(_, c, t)| c != t).count() as u64;
                assert_eq!(mismatched, s.check.users_mismatched, "{}: {}", f.display(), s.strategy);
            }
            if s.guarantee != Guarantee::None && !plan.expect_drift.contains(&s.strategy) {
                assert_eq!(s.check.users_mismatched, 0, "{}: {} broke its guarantee", f.display(), s.strategy);
            }
            assert_eq!(s.ops_total + s.ops.values().map(|o| o.skipped).sum::<u64>(), 300);
            // A repeated cell kept every repeat's namespace: the others go too.
            for r in s.repeats.iter().filter(|r| r.namespace != s.namespace) {
                util::stored_drift_and_drop(&s.backend.name(), &r.namespace, Some(&dir.to_path_buf())).await;
            }
        }
        let admin = util::admin().await;
        for r in report.strategies.iter().filter(|s| s.backend.name().starts_with("postgres")) {
            for ns in r.repeats.iter().map(|r| &r.namespace).chain([&r.namespace]) {
                assert!(!util::schema_exists(&admin, ns).await, "{}: {ns} left behind", f.display());
            }
        }
    }
}

/// Parses `src` and returns the error's text.
fn err(src: &str) -> String {
    parse("bad.toml", src, "bad", &Overrides::default(), &util::known(), 1).unwrap_err().to_string()
}

const GOOD: &str = "[data]\nusers = 10\nnotifications_per_user = 2\n[workload]\nworkers = 2\nops = 10\n[workload.mix]\nmark_read = 1\n";

#[test]
fn the_base_case_is_valid() {
    let plan = parse("ok.toml", GOOD, "ok", &Overrides::default(), &util::known(), 9).unwrap();
    assert_eq!(plan.seed, 9);
    assert_eq!(plan.strategies, util::known());
    assert_eq!(plan.workload.connections, 3);
}

#[test]
fn malformed_input_is_located() {
    // (mutation of GOOD, expected file:line:col prefix, words the message must contain)
    let cases: &[(&str, &str, &str)] = &[
        (&GOOD.replace("users = 10", "users = -10"), "bad.toml:2:9:", "u64"),
        (&format!("expect_anomaly = \"double\"\n{GOOD}"), "bad.toml:1:18:", "unknown anomaly \"double\"; valid: none,"),
        (&format!("{GOOD}[retry]\non_unknown = 1\n"), "bad.toml:10:14:", "expected a boolean"),
        (
            &format!("{GOOD}[[faults]]\nkind = \"crash_after_commit\"\nat_ms = 1\nop = \"read_count\"\n"),
            "bad.toml:12:6:",
            "op \"read_count\" never commits a write; valid: create, mark_read, delete, mark_all_read",
        ),
        (
            &format!("{GOOD}[[faults]]\nkind = \"flusher_crash\"\nat_ms = 1\nop = \"create\"\n"),
            "bad.toml:12:6:",
            "op applies to crash_after_commit and error_before_commit only, not flusher_crash",
        ),
        (
            &format!("{GOOD}[redis]\nsettle_timeout_ms = 500\ncache_delay_ms = 500\n"),
            "bad.toml:11:18:",
            "cache_delay_ms (below settle_timeout_ms) must be in 1..=499, got 500",
        ),
        (&GOOD.replace("users = 10", "users = 0"), "bad.toml:2:9:", "users must be in 1..="),
        (
            // The machine's memory is the limit: 10^17 rows fit none.
            &GOOD.replace("users = 10\n", "users = 1000000000000\n").replace("user = 2", "user = 100000"),
            "bad.toml:3:26:",
            "users x notifications_per_user = 100000000000000000 ",
        ),
        (&GOOD.replace("workers = 2", "workers = 0"), "bad.toml:5:11:", "workers must be in 1..="),
        (&GOOD.replace("mark_read = 1", "mark_read = 0"), "bad.toml:7:1:", "every mix weight is 0"),
        (&GOOD.replace("mark_read = 1", "mark_red = 1"), "bad.toml:8:1:", "unknown field `mark_red`"),
        (&GOOD.replace("ops = 10", "ops = 10\nduration_s = 2"), "bad.toml:", "not both"),
        (&GOOD.replace("ops = 10\n", ""), "bad.toml:4:1:", "needs duration_s, ops or [[workload.stages]]"),
        (&GOOD.replace("ops = 10\n", "rate = 0.0\nduration_s = 1\n"), "bad.toml:6:8:", "rate must be in (0,"),
        (&GOOD.replace("ops = 10\n", "ops = 10\nrate = 50.0\n"), "bad.toml:6:7:", "runs for a duration"),
        (
            &format!("{}[[workload.stages]]\nduration_s = 1\nrate = 5\nworkers = 2\n", GOOD.replace("ops = 10\n", "")),
            "bad.toml:11:11:",
            "closed loop (workers) or open loop (rate), not both",
        ),
        (
            &format!(
                "{}[[workload.stages]]\nduration_s = 1\nworkers = 2\ntarget = 5\n",
                GOOD.replace("ops = 10\n", "")
            ),
            "bad.toml:11:10:",
            "target (a ramp's final rate) needs rate",
        ),
        (&format!("{GOOD}[[workload.stages]]\nduration_s = 1\nrate = 5\n"), "bad.toml:6:7:", "both describe the load"),
        (&GOOD.replace("ops = 10\n", "ops = 10\narrival = \"bursty\"\n"), "bad.toml:7:11:", "unknown arrival"),
        (
            &format!("{}[[workload.stages]]\nname = \"\"\nduration_s = 1\nrate = 5\n", GOOD.replace("ops = 10\n", "")),
            "bad.toml:10:14:",
            "is taken",
        ),
        (
            &format!("{GOOD}[[faults]]\nkind = \"pause\"\nat_ms = 5\nduration_ms = 5000\n"),
            "bad.toml:12:15:",
            "must be shorter than op_timeout_ms (5000)",
        ),
        (&format!("{GOOD}[[faults]]\nkind = \"pause\"\nat_ms = 5\n"), "bad.toml:10:8:", "a pause needs duration_ms"),
        (
            &format!("{GOOD}[[faults]]\nkind = \"flusher_crash\"\nat_ms = 5\nduration_ms = 3\n"),
            "bad.toml:12:15:",
            "applies to pause, replica_pause and failover only",
        ),
        (
            &format!("strategies = [\"direct-update\", \"nope\"]\n{GOOD}"),
            "bad.toml:1:32:",
            "valid: direct-update, select-for-update, conditional-update",
        ),
        (
            &format!("backends = [\"oracle\"]\n{GOOD}"),
            "bad.toml:1:13:",
            "unknown backend \"oracle\"; valid: auto, postgres, mysql, sqlite",
        ),
        (
            &format!("isolation = [\"snapshot\"]\n{GOOD}"),
            "bad.toml:1:14:",
            "unknown isolation \"snapshot\"; valid: read-committed",
        ),
        (&format!("[retry]\nmax_attempts = 0\n{GOOD}"), "bad.toml:2:16:", "max_attempts must be in 1..="),
        (
            &format!("[strategy_isolation]\nnaive = [\"serializable\"]\n{GOOD}"),
            "bad.toml:2:9:",
            "unknown strategy \"naive\"",
        ),
        (&GOOD.replace("users = 10", "users = \"ten\""), "bad.toml:2:9:", "invalid type"),
        (
            &format!("[[thresholds]]\nmetric = \"p95\"\nlimit = 1\n{GOOD}"),
            "bad.toml:2:10:",
            "unknown metric \"p95\"; valid: p99_us",
        ),
        (
            &format!("[[thresholds]]\nmetric = \"max_drift\"\nop = \"create\"\nlimit = 0\n{GOOD}"),
            "bad.toml:3:6:",
            "latency metrics only",
        ),
        (&GOOD.replace("[workload]\n", "[workload\n"), "bad.toml:4:", ""),
        (&format!("{GOOD}[workload.extra]\n"), "bad.toml:", "unknown field"),
        (
            &format!("{GOOD}[[expect]]\nstrategy = \"direct-update\"\nverdict = \"fail\"\n"),
            "bad.toml:11:11:",
            "unknown expected verdict \"fail\"; valid: pass, drift-expected, no-drift-observed",
        ),
        (&format!("{GOOD}[[expect]]\nstrategy = \"direct-update\"\n"), "bad.toml:", "gives one of verdict and anomaly"),
        (
            &format!(
                "{GOOD}[[expect]]\nstrategy = \"direct-update\"\nbackends = [\"auto\"]\nanomaly = \"lost_update\"\n"
            ),
            "bad.toml:11:13:",
            "unknown backend \"auto\"; valid: postgres, mysql, sqlite",
        ),
        (&GOOD.replace("ops = 10", "ops = 10\nskew = \"zipf\""), "bad.toml:7:8:", "needs zipf_exponent"),
        (
            &GOOD.replace("ops = 10", "ops = 10\nskew = \"zipf\"\nzipf_exponent = -1.0"),
            "bad.toml:8:17:",
            "zipf_exponent must be in",
        ),
        (&GOOD.replace("ops = 10", "ops = 10\ndup_k = 0"), "bad.toml:7:9:", "dup_k must be in"),
        (
            &GOOD.replace("notifications_per_user = 2", "notifications_per_user = 2\ninitial_read_per_user = 3"),
            "bad.toml:4:25:",
            "exceeds notifications_per_user",
        ),
    ];
    for (src, at, words) in cases {
        let e = err(src);
        assert!(e.starts_with(at), "expected {at:?}, got {e:?}\n--- input:\n{src}");
        assert!(e.contains(words), "expected {words:?} in {e:?}");
    }
}

#[test]
fn bad_overrides_are_rejected() {
    let known = util::known();
    let over = |o: Overrides| parse("f.toml", GOOD, "f", &o, &known, 1).unwrap_err().to_string();
    assert!(over(Overrides { workers: Some(0), ..Default::default() }).contains("--workers must be at least 1"));
    assert!(
        over(Overrides { strategies: vec!["naive".into()], ..Default::default() })
            .contains("--strategy naive: unknown strategy; valid: direct-update")
    );
    assert!(over(Overrides { duration_s: Some(-1.0), ..Default::default() }).contains("--duration-s must be in"));
    assert!(over(Overrides { ops: Some(1), duration_s: Some(1.0), ..Default::default() }).contains("not both"));
}
