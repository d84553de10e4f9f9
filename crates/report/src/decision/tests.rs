//! Unit tests of the decision view: ranking, the reference row, ties, the sentence.

use std::collections::BTreeMap;

use super::*;
use crate::{CheckReport, Latency, OpReport};
use counterlab_core::{Backend, Named};

pub(crate) fn row(
    strategy: &str,
    backend: &str,
    guarantee: &str,
    verdict: &str,
    ops_s: f64,
    p99_us: u64,
) -> StrategyReport {
    let ops = BTreeMap::from([(
        "mark_read".to_string(),
        OpReport { count: 100, latency_us: Latency { p99: p99_us, ..Default::default() }, ..Default::default() },
    )]);
    let mismatched = if verdict == "pass" || verdict == "no-drift-observed" { 0 } else { 426 };
    StrategyReport {
        strategy: strategy.into(),
        backend: Backend::parse(backend).unwrap(),
        isolation: Isolation::ReadCommitted,
        guarantee: Named::parse(guarantee).unwrap(),
        throughput_ops_per_s: ops_s,
        ops,
        check: CheckReport {
            users_checked: 1000,
            users_mismatched: mismatched,
            verdict: counterlab_core::Verdict::parse(verdict).unwrap(),
            matches_guarantee: !verdict.starts_with("FAIL"),
            evidence: verdict != "NO EVIDENCE",
            ..Default::default()
        },
        ..Default::default()
    }
}

pub(crate) fn report(rows: Vec<StrategyReport>) -> Report {
    Report {
        report_schema_version: crate::REPORT_SCHEMA_VERSION,
        counterlab_version: "0.1.0".into(),
        git_commit: "0c6a774".into(),
        scenario: "decision".into(),
        scenario_path: "scenarios/decision.toml".into(),
        seed: 42,
        run_id: "20261201-120000-abcd".into(),
        started_at_utc: "2026-12-01T12:00:00Z".into(),
        plan: serde_json::json!({}),
        servers: Vec::new(),
        all_guarantees_held: rows.iter().all(|s| s.check.matches_guarantee),
        strategies: rows,
        skipped: Vec::new(),
        thresholds_breached: 0,
        expectations_unmet: 0,
        expectations_not_judged: Vec::new(),
        interrupted: false,
        replay_command: "counterlab run scenarios/decision.toml --seed 42".into(),
        trusted_strategy_files: false,
        side_files: Vec::new(),
    }
}

#[test]
fn the_issue_example_reads_as_one_sentence() {
    let r = report(vec![
        row("direct-update", "postgres", "none", "drift-expected", 1500.0, 9_000),
        row("select-for-update", "postgres", "exact", "pass", 1000.0, 18_000),
        row("conditional-update", "postgres", "exact", "pass", 1170.0, 12_000),
    ]);
    let groups = decide(&r);
    assert_eq!(groups.len(), 1);
    let g = &groups[0];
    let order: Vec<&str> = g.rows.iter().map(|r| r.row.strategy.as_str()).collect();
    assert_eq!(order, ["conditional-update", "select-for-update", "direct-update"], "held first, then by throughput");
    assert_eq!(
        g.sentence,
        "On postgres at read-committed, conditional-update kept exact counts and was fastest of the exact designs: \
         1.17× select-for-update, p99 12 ms vs 18 ms; fewer than 3 runs a side do not settle this order \
         (--repeat 3 does). direct-update lost 426/1000 counters (no guarantee)."
    );
    assert_eq!((g.choice.basis, g.choice.settled), (Basis::Throughput, false));
    assert_eq!(outcome(&g.choice), "conditional-update (faster, not settled)");
    // Relative to the fastest that kept its guarantee, not to the faster wrong design.
    assert_eq!(relative_text(&g.rows[0]), "1.00×");
    assert_eq!(relative_text(&g.rows[2]), "1.28×");
    assert_eq!(g.rows[1].p99, "18 ms");
}

#[test]
fn differences_within_the_band_are_ties_not_wins_and_with_nothing_else_apart_the_order_is_not_settled() {
    let r = report(vec![
        row("select-for-update", "postgres", "exact", "pass", 1000.0, 18_000),
        row("conditional-update", "postgres", "exact", "pass", 1100.0, 12_000),
    ]);
    let g = &decide(&r)[0];
    assert!(g.rows[1].tie && !g.rows[0].tie, "{:?}", g.rows);
    assert_eq!((g.choice.pick.is_none(), g.choice.basis, g.choice.settled), (true, Basis::NotSettled, false));
    assert_eq!(outcome(&g.choice), "not settled");
    assert_eq!(
        g.sentence,
        "On postgres at read-committed, conditional-update and select-for-update both kept exact counts, and the \
         order between them is not settled: throughput within the noise band, p99 12 ms vs 18 ms (not apart), the \
         same number of moving parts; fewer than 3 runs a side cannot settle it (--repeat 3 may)."
    );
    assert!(!g.sentence.contains("fastest"), "a tie is not a win: {}", g.sentence);
    assert_eq!(relative_text(&g.rows[1]), "0.91× (tie)");
    assert!(noise_note(&r).contains("15%"));
}

#[test]
fn a_throughput_tie_with_one_run_each_falls_through_to_a_p99_twice_as_low() {
    let r = report(vec![
        row("select-for-update", "postgres", "exact", "pass", 1100.0, 60_000),
        row("conditional-update", "postgres", "exact", "pass", 1000.0, 12_000),
    ]);
    let g = &decide(&r)[0];
    assert_eq!(g.choice.basis, Basis::P99);
    let order: Vec<&str> = g.rows.iter().map(|r| r.row.strategy.as_str()).collect();
    assert_eq!(order, ["conditional-update", "select-for-update"], "the pick heads the table, though slower");
    assert_eq!(relative_text(&g.rows[1]), "1.10× (tie)", "relative to the pick");
    assert_eq!(outcome(&g.choice), "conditional-update (lower p99, not settled)");
    assert!(
        g.sentence.ends_with(
            "and tied on throughput (within the noise band); conditional-update is picked for its lower p99: \
             12 ms vs 60 ms; fewer than 3 runs a side do not settle this order (--repeat 3 does)."
        ),
        "{}",
        g.sentence
    );
}
#[test]
fn groups_are_per_sql_backend_and_level_and_failures_rank_last() {
    let mut redis = row("redis-counter", "postgres+redis", "exact", "FAIL: counters", 3000.0, 900);
    redis.moving_parts = vec!["Redis".into()];
    let mut cache = row("cache-aside", "postgres+redis", "exact", "pass", 900.0, 1500);
    cache.moving_parts = vec!["Redis".into(), "eventual reads (read lag)".into()];
    cache.figures.insert("stale_read_max_ms".into(), 40.0);
    cache.figures.insert("read_lag_allowed_ms".into(), 100.0);
    let mut sqlite = row("direct-update", "sqlite", "none", "no-drift-observed", 500.0, 400);
    sqlite.isolation = Isolation::Serializable;
    let r = report(vec![redis, cache, row("conditional-update", "postgres", "exact", "pass", 800.0, 2000), sqlite]);
    let groups = decide(&r);
    assert_eq!(groups.len(), 2);
    let g = &groups[0];
    let order: Vec<&str> = g.rows.iter().map(|r| r.row.strategy.as_str()).collect();
    assert_eq!(order, ["conditional-update", "cache-aside", "redis-counter"], "the pick heads the table");
    assert_eq!(g.rows[2].standing, Standing::Failed);
    assert!(g.rows[2].verdict.starts_with("FAILED its exact guarantee (counters; 426/1000"), "{}", g.rows[2].verdict);
    assert_eq!(g.rows[1].cost, "Redis, eventual reads (read lag), stalest read 40 ms of 100 ms allowed");
    assert_eq!(g.rows[0].cost, "none");
    // Tied on throughput (900 vs 800) and p99 (1.5 ms vs 2 ms): fewer moving parts decide.
    assert_eq!(
        (g.choice.basis, outcome(&g.choice).as_str()),
        (Basis::MovingParts, "conditional-update (fewer moving parts, not settled)")
    );
    assert!(
        g.sentence.starts_with(
            "On postgres at read-committed, conditional-update and cache-aside (carries: Redis, eventual reads (read \
             lag), stalest read 40 ms of 100 ms allowed) both kept exact counts and tied on throughput (within the \
             noise band) and p99 (2 ms vs 1.5 ms); conditional-update is picked for fewer moving parts (none vs \
             Redis, eventual reads (read lag), stalest read 40 ms of 100 ms allowed); fewer than 3 runs"
        ),
        "{}",
        g.sentence
    );
    let s = &groups[1];
    assert_eq!(
        s.sentence,
        "On sqlite at serializable, no design kept its guarantee. direct-update showed no drift (no guarantee; \
         none can here: SQLite runs one writer at a time)."
    );
    assert_eq!(s.rows[0].p99, "400 µs");
}

#[test]
fn a_lone_design_and_an_empty_report() {
    let r = report(vec![row("conditional-update", "mysql", "exact", "pass", 10.0, 1000)]);
    assert_eq!(decide(&r)[0].sentence, "On mysql at read-committed, conditional-update kept exact counts.");
    assert!(decide(&report(Vec::new())).is_empty());
    let r = report(vec![row("a", "mysql", "exact", "pass", 0.0, 0), row("b", "mysql", "exact", "pass", 0.0, 0)]);
    assert_eq!(relative_text(&decide(&r)[0].rows[0]), "-", "no work, no ratio");
}

/// A row run `tputs.len()` times: each repeat's throughput and worst p99 (us).
pub(crate) fn repeated(strategy: &str, tputs: &[f64], p99s: &[u64]) -> StrategyReport {
    let mut sorted = tputs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut p = p99s.to_vec();
    p.sort();
    let mut r = row(strategy, "postgres", "exact", "pass", sorted[sorted.len() / 2], p[p.len() / 2]);
    r.repeats = tputs
        .iter()
        .zip(p99s)
        .enumerate()
        .map(|(i, (t, us))| crate::RepeatRun {
            repeat: i as u32 + 1,
            throughput_ops_per_s: *t,
            p99_us: BTreeMap::from([("mark_read".to_string(), *us), ("delete".to_string(), 1)]),
            op_counts: BTreeMap::from([("mark_read".to_string(), 100), ("delete".to_string(), 0)]),
            ..Default::default()
        })
        .collect();
    r
}

#[test]
fn three_runs_a_side_with_ranges_apart_settle_the_order() {
    let a = repeated("conditional-update", &[1200.0, 1300.0, 1250.0], &[9_000, 9_500, 9_200]);
    let b = repeated("select-for-update", &[1000.0, 1100.0, 1050.0], &[9_100, 9_400, 9_300]);
    assert_eq!(evidence::p99_samples(&a), vec![9_000.0, 9_500.0, 9_200.0], "the worst op that ran, per repeat");
    let r = report(vec![b, a]);
    let g = &decide(&r)[0];
    assert_eq!((g.choice.basis, g.choice.settled), (Basis::Throughput, true));
    assert_eq!(outcome(&g.choice), "conditional-update (faster, settled)");
    assert!(
        g.sentence.contains(": 1.19× select-for-update, p99 9.2 ms vs 9.3 ms; settled over 3 runs a side."),
        "{}",
        g.sentence
    );
    assert!(noise_note(&r).contains("Mann-Whitney"));
    // Two runs a side, ranges apart: the faster is named, the order not settled.
    let r = report(vec![
        repeated("conditional-update", &[1200.0, 1300.0], &[9_000, 9_500]),
        repeated("select-for-update", &[1000.0, 1100.0], &[9_100, 9_400]),
    ]);
    let g = &decide(&r)[0];
    assert_eq!(outcome(&g.choice), "conditional-update (faster, not settled)");
    assert!(
        g.sentence.contains("fewer than 3 runs a side do not settle this order (--repeat 3 does)"),
        "{}",
        g.sentence
    );
}

#[test]
fn overlapping_ranges_fall_through_to_p99_then_moving_parts_then_no_pick() {
    // Faster by median, but the ranges overlap: p99 apart over 3 runs decides, settled.
    let fast = repeated("select-for-update", &[1050.0, 1150.0, 1250.0], &[40_000, 45_000, 50_000]);
    let low = repeated("conditional-update", &[1000.0, 1100.0, 1200.0], &[9_000, 9_500, 9_200]);
    let r = report(vec![fast.clone(), low.clone()]);
    let g = &decide(&r)[0];
    assert_eq!((g.choice.basis, g.choice.settled), (Basis::P99, true));
    assert_eq!(g.rows[0].row.strategy, "conditional-update");
    assert!(g.sentence.contains("(ranges overlap over 3 runs a side); conditional-update is picked for its lower p99: 9.2 ms vs 45 ms; settled over 3 runs a side."), "{}", g.sentence);
    // p99 overlapping too: the design with fewer moving parts.
    let mut redis = repeated("redis-counter", &[1050.0, 1150.0, 1250.0], &[9_100, 9_400, 9_300]);
    redis.moving_parts = vec!["Redis".into()];
    let r = report(vec![redis.clone(), low.clone()]);
    let g = &decide(&r)[0];
    assert_eq!(
        (outcome(&g.choice).as_str(), g.choice.settled),
        ("conditional-update (fewer moving parts, settled)", true)
    );
    // Same parts: no pick, and the sentence says the order is not settled.
    redis.moving_parts.clear();
    let r = report(vec![redis, low]);
    let g = &decide(&r)[0];
    assert_eq!((g.choice.pick.map(|p| p.strategy.as_str()), g.choice.basis), (None, Basis::NotSettled));
    assert!(
        g.sentence.contains("the order between them is not settled: throughput ranges overlap over 3 runs a side"),
        "{}",
        g.sentence
    );
    assert!(!g.sentence.contains("--repeat"), "3 runs a side were run: {}", g.sentence);
    let json: serde_json::Value = serde_json::from_str(&crate::render_json(&r)).unwrap();
    let j = &json["decision"]["groups"][0];
    assert_eq!(
        (j["pick"].is_null(), j["basis"].as_str(), j["settled"].as_bool()),
        (true, Some("not-settled"), Some(false))
    );
    assert_eq!(j["outcome"], "not settled");
}

#[test]
fn a_stalled_load_is_named_beside_its_throughput_in_the_sentence_and_in_json() {
    let mut stalled = row("conditional-update", "postgres", "exact", "pass", 1300.0, 1_600_000);
    stalled.stall = Some(crate::Stall { idle: Some([1.0, 3.5]), ..Default::default() });
    let r = report(vec![stalled, row("select-for-update", "postgres", "exact", "pass", 1000.0, 18_000)]);
    let g = &decide(&r)[0];
    assert_eq!(relative_text(&g.rows[0]), "1.00× stalled");
    assert_eq!(relative_text(&g.rows[1]), "0.77×");
    assert!(
        g.sentence.ends_with(" conditional-update's load stalled: no op completed for 2.5 s (1.0-3.5 s)."),
        "{}",
        g.sentence
    );
    let json: serde_json::Value = serde_json::from_str(&crate::render_json(&r)).unwrap();
    let rows = &json["decision"]["groups"][0]["rows"];
    assert_eq!(rows[0]["stall"], "no op completed for 2.5 s (1.0-3.5 s)");
    assert!(rows[1]["stall"].is_null());
    assert_eq!(json["strategies"][0]["stall"]["idle"][1], 3.5);
}

#[test]
fn a_race_kept_by_retries_is_not_called_not_hit() {
    let mut retried = row("direct-update", "postgres", "none", "no-drift-observed", 900.0, 9_000);
    retried.isolation = Isolation::RepeatableRead;
    retried.retries = 825;
    let quiet = row("direct-update", "mysql", "none", "no-drift-observed", 900.0, 9_000);
    let mut sqlite = row("direct-update", "sqlite", "none", "no-drift-observed", 900.0, 9_000);
    sqlite.retries = 4;
    assert_eq!(
        verdict_words(&retried),
        "showed no drift (no guarantee): its race was hit and kept by retries (825 conflicts retried)"
    );
    assert_eq!(verdict_words(&quiet), "showed no drift (no guarantee; the race was not hit)");
    assert_eq!(
        verdict_words(&sqlite),
        "showed no drift (no guarantee; none can here: SQLite runs one writer at a time)"
    );
    let r = report(vec![retried, row("conditional-update", "postgres", "exact", "pass", 800.0, 9_000)]);
    let mut r = r;
    r.strategies[1].isolation = Isolation::RepeatableRead;
    let g = &decide(&r)[0];
    assert!(g.sentence.contains("direct-update showed no drift (no guarantee): its race was hit and kept by retries (825 conflicts retried)."), "{}", g.sentence);
    assert!(!g.sentence.contains("not hit"));
}

#[test]
fn each_limit_is_named_in_the_words_and_only_a_capped_history_says_reads_were_not_checked() {
    let mut left_out = row("conditional-update", "postgres", "exact", "pass", 1000.0, 900);
    left_out.check.limits = vec![counterlab_core::Limit::SettledReadsLeftOut { left_out: 3, sampled: 2000 }];
    let words = verdict_words(&left_out);
    assert_eq!(words, "kept exact counts (3 of 2000 settled reads not compared)");
    let mut capped = left_out.clone();
    capped.check.limits = vec![counterlab_core::Limit::HistoryCapped { recorded: 10, dropped: 3 }];
    assert_eq!(verdict_words(&capped), "kept exact counts (reads not checked: history capped)");
}

#[test]
fn the_decision_is_in_report_json_as_every_view_shows_it() {
    let r = report(vec![
        row("conditional-update", "postgres", "exact", "pass", 1000.0, 900),
        row("direct-update", "postgres", "none", "drift-expected", 1500.0, 700),
    ]);
    let json: serde_json::Value = serde_json::from_str(&crate::render_json(&r)).unwrap();
    let g = &json["decision"]["groups"][0];
    assert_eq!(g["sentence"], decide(&r)[0].sentence.as_str());
    assert_eq!((g["backend"].as_str(), g["isolation"].as_str()), (Some("postgres"), Some("read-committed")));
    let names: Vec<&str> = g["rows"].as_array().unwrap().iter().map(|x| x["strategy"].as_str().unwrap()).collect();
    assert_eq!(names, ["conditional-update", "direct-update"], "rank order");
    assert_eq!((g["rows"][0]["standing"].as_str(), g["rows"][1]["standing"].as_str()), (Some("held"), Some("drifted")));
    let basis = (g["pick"].as_str(), g["basis"].as_str(), g["settled"].as_bool());
    assert_eq!(basis, (Some("conditional-update"), Some("only-one-held"), Some(true)));
    assert_eq!(g["outcome"], "conditional-update (the only design that kept its guarantee)");
    let back: Report = serde_json::from_value(json).unwrap();
    assert_eq!(back.strategies.len(), 2, "a report with its decision still loads");
}

#[test]
fn an_explored_row_says_what_the_explorer_found_and_a_refuted_design_is_not_picked() {
    use crate::{ExploreSummary, UnsafePair};
    let safe = ExploreSummary { pairs: 16, schedules: 200, declares_exact: true, ..Default::default() };
    let refuted = ExploreSummary {
        unsafe_pairs: vec![UnsafePair {
            pair: "create ‖ create".into(),
            failing: 40,
            explored: 50,
            anomalies: vec!["lost_update".into()],
        }],
        ..safe.clone()
    };
    let lucky = ExploreSummary { declares_exact: false, ..refuted.clone() };
    let mut fast = row("read-then-write", "postgres", "exact", "pass", 3000.0, 5_000);
    fast.explored = Some(refuted);
    let mut sfu = row("select-for-update", "postgres", "exact", "pass", 1000.0, 18_000);
    sfu.explored = Some(safe);
    let mut direct = row("direct-update", "postgres", "none", "no-drift-observed", 1500.0, 9_000);
    direct.explored = Some(lucky);
    let r = report(vec![fast, sfu, direct]);
    let g = &decide(&r)[0];
    assert_eq!(g.choice.pick.map(|p| p.strategy.as_str()), Some("select-for-update"), "{}", g.sentence);
    assert!(
        g.sentence.contains(
            "select-for-update kept exact counts and is safe in every explored interleaving, the only design that did."
        ),
        "{}",
        g.sentence
    );
    assert!(
        g.sentence
            .contains("read-then-write kept exact counts, but explored it is UNSAFE (create ‖ create: lost_update)."),
        "{}",
        g.sentence
    );
    assert!(
        g.sentence
            .contains("direct-update showed no drift (no guarantee; the race was not hit), but explored it is UNSAFE"),
        "the lucky load and the race read apart: {}",
        g.sentence
    );
}

#[test]
fn a_sequential_run_repeats_only_the_designs_whose_order_with_the_fastest_is_open() {
    let p99 = [50_000, 50_000, 50_000];
    // A and B overlap (and tie on p99); C is settled behind A; D drifted.
    let a = repeated("a", &[1000.0, 1100.0, 1050.0], &p99);
    let b = repeated("b", &[1020.0, 1080.0, 990.0], &p99);
    let c = repeated("c", &[500.0, 520.0, 510.0], &p99);
    let mut d = repeated("d", &[900.0, 950.0, 920.0], &p99);
    d.check.verdict = counterlab_core::Verdict::DriftExpected;
    let rows = vec![a, b, c, d];
    assert_eq!(unsettled(&rows), [0, 1], "C settled behind, D not held");
    // Settled: nothing runs again.
    let a = repeated("a", &[1000.0, 1100.0, 1050.0], &p99);
    let c = repeated("c", &[500.0, 520.0, 510.0], &p99);
    assert!(unsettled(&[a, c]).is_empty());
}
