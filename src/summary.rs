//! The JSON printed on stdout by `run --json` (the run's summary: one verdict per
//! strategy run, the exit code, where the report is) and `list --json`.

use std::path::Path;

use counterlab_report::Report;
use serde_json::{Value, json};

/// The run's summary. `exit_code` is the one the process exits with, `verdict` and
/// `matches_guarantee` per row are the report's own.
pub fn json(report: &Report, report_json: &Path, exit_code: u8, strict: bool) -> Value {
    let rows: Vec<Value> = report
        .strategies
        .iter()
        .map(|s| {
            let p99 = s.ops.values().map(|o| o.latency_us.p99).max().unwrap_or(0);
            json!({
                "strategy": s.strategy,
                "backend": s.backend.name(),
                "isolation": s.isolation.name(),
                "guarantee": s.guarantee.name(),
                "verdict": s.check.label(),
                "matches_guarantee": s.check.matches_guarantee,
                "evidence": s.check.evidence,
                "summary": s.check.summary,
                "ops": s.ops_total,
                "ops_per_s": s.throughput_ops_per_s,
                "errors": s.errors_total,
                "p99_us_worst_op": p99,
                "anomalies": s.anomalies.iter().map(|a| a.name.clone()).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "scenario": report.scenario,
        "run_id": report.run_id,
        "seed": report.seed,
        "report": report_json.display().to_string(),
        "exit_code": exit_code,
        "strict": strict,
        "all_guarantees_held": report.all_guarantees_held,
        "thresholds_breached": report.thresholds_breached,
        "expectations_unmet": report.expectations_unmet,
        "interrupted": report.interrupted,
        "strategies": rows,
        "skipped": report.skipped.iter().map(|k| json!({
            "strategy": k.strategy, "backend": k.backend.name(), "isolation": k.isolation.name(), "reason": k.reason,
        })).collect::<Vec<_>>(),
        "replay_command": report.replay_command,
        "decision": counterlab_report::decision::decision_json(report),
    })
}

/// The built-in strategies: name, declared guarantee, what they need, whether it is a
/// bug zoo mutant, summary.
pub fn list_json() -> Value {
    let rows: Vec<Value> = counterlab_strategies::BUILTINS
        .iter()
        .map(|row| {
            let s = row.info;
            let (name, needs, mutant) = (s.name, row.family(), row.is_mutant());
            json!({"name": name, "guarantee": s.guarantee.name(), "needs": needs, "mutant": mutant, "summary": s.summary})
        })
        .collect();
    Value::Array(rows)
}
