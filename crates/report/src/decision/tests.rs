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
         1.17× select-for-update, p99 12 ms vs 18 ms. direct-update lost 426/1000 counters (no guarantee)."
    );
    // Relative to the fastest that kept its guarantee, not to the faster wrong design.
    assert_eq!(relative_text(&g.rows[0]), "1.00×");
    assert_eq!(relative_text(&g.rows[2]), "1.28×");
    assert_eq!(g.rows[1].p99, "18 ms");
}

#[test]
fn differences_within_the_band_are_ties_not_wins() {
    let r = report(vec![
        row("select-for-update", "postgres", "exact", "pass", 1000.0, 18_000),
        row("conditional-update", "postgres", "exact", "pass", 1100.0, 12_000),
    ]);
    let g = &decide(&r)[0];
    assert!(g.rows[1].tie && !g.rows[0].tie, "{:?}", g.rows);
    assert!(g.sentence.contains("tied on throughput"), "{}", g.sentence);
    assert!(!g.sentence.contains("fastest"), "a tie is not a win: {}", g.sentence);
    assert_eq!(relative_text(&g.rows[1]), "0.91× (tie)");
    assert!(noise_note(&r).contains("15%"));
    // Just outside the band (1.16×): a win; just inside (1.14×): a tie.
    assert!(!tied(&[1000.0], &[1160.0]) && tied(&[1000.0], &[1140.0]) && tied(&[1140.0], &[1000.0]));
    // Several samples: overlapping ranges tie, disjoint ones do not.
    assert!(tied(&[900.0, 1100.0], &[1050.0, 1200.0]) && !tied(&[900.0, 1000.0], &[1050.0, 1200.0]));
    assert!(!tied(&[f64::NAN], &[1.0]));
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
    assert_eq!(order, ["cache-aside", "conditional-update", "redis-counter"]);
    assert_eq!(g.rows[2].standing, Standing::Failed);
    assert!(g.rows[2].verdict.starts_with("FAILED its exact guarantee (counters; 426/1000"), "{}", g.rows[2].verdict);
    assert_eq!(g.rows[0].cost, "Redis, eventual reads (read lag), stalest read 40 ms of 100 ms allowed");
    assert_eq!(g.rows[1].cost, "none");
    assert!(
        g.sentence.starts_with(
            "On postgres at read-committed, cache-aside (carries: Redis, eventual reads (read lag), stalest read 40 ms \
             of 100 ms allowed) and conditional-update both kept exact counts and tied on throughput (within the \
             noise band): p99 1.5 ms vs 2 ms."
        ),
        "{}",
        g.sentence
    );
    let s = &groups[1];
    assert_eq!(
        s.sentence,
        "On sqlite at serializable, no design kept its guarantee. direct-update showed no drift (no guarantee; \
         the race was not hit)."
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

#[test]
fn repeated_rows_tie_by_their_measured_ranges() {
    let with = |tputs: &[f64]| {
        let mut r = row("a", "postgres", "exact", "pass", tputs[tputs.len() / 2], 1000);
        r.repeats = tputs
            .iter()
            .enumerate()
            .map(|(i, t)| crate::RepeatRun { repeat: i as u32 + 1, throughput_ops_per_s: *t, ..Default::default() })
            .collect();
        r
    };
    let (a, b, c) = (with(&[900.0, 1000.0, 1100.0]), with(&[1050.0, 1200.0, 1300.0]), with(&[1200.0, 1300.0, 1400.0]));
    assert_eq!(throughput_samples(&a), vec![900.0, 1000.0, 1100.0]);
    // 1.2x apart in medians but overlapping ranges: a tie; ranges apart: a win.
    assert!(tied(&throughput_samples(&a), &throughput_samples(&b)));
    assert!(!tied(&throughput_samples(&a), &throughput_samples(&c)));
    assert!(noise_note(&report(vec![a, c])).contains("min-max ranges overlap"));
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
    let back: Report = serde_json::from_value(json).unwrap();
    assert_eq!(back.strategies.len(), 2, "a report with its decision still loads");
}
