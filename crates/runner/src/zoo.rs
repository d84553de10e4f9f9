//! `counterlab zoo`: runs every scenario of a directory that declares `expect_anomaly`
//! (deliberately broken strategies and their correct controls), over several seeds, and
//! judges the checker: each mutant must show its anomaly, each control none.

use std::path::{Path, PathBuf};

use counterlab_report::Report;
use serde::Serialize;

use crate::run::{RunOptions, run_plan};
use counterlab_plan::{self as scenario, Overrides};

/// Where the zoo lives and how big a run is.
#[derive(Clone, Debug)]
pub struct ZooPlan {
    pub dir: PathBuf,
    /// Seeds per file: the file's own seed, then seed+1, ...
    pub seeds: u64,
    /// Replaces every file's duration.
    pub duration_s: Option<f64>,
    /// Only files whose name (stem) is listed; empty: all.
    pub only: Vec<String>,
}

/// Most seeds a zoo run takes per file.
pub const MAX_SEEDS: u64 = 100;

/// One strategy of one file at one seed.
#[derive(Clone, Debug, Serialize)]
pub struct ZooRow {
    pub file: String,
    pub strategy: String,
    pub backend: String,
    pub seed: u64,
    /// The anomaly the file expects, or `none`.
    pub expected: String,
    /// `detected`, `missed`, `clean`, `false positive`, `environment` (no anomaly named,
    /// and a verdict that says the run itself went wrong: errors or refusals only, NO
    /// EVIDENCE, INCOMPLETE; run once more first) or `skipped`.
    pub result: String,
    /// Whether the run was run once more because it came out `environment`.
    pub rerun: bool,
    /// Every anomaly found, `name xcount`.
    pub found: Vec<String>,
    /// Calls completed when the expected anomaly's first witness completed.
    pub ops_to_detect: Option<u64>,
    /// Calls recorded in the run.
    pub calls: u64,
    /// Users whose counter was wrong, and how many of them the expected name explains
    /// (each drifted user gets one drift-explaining name).
    pub drifted: u64,
    pub explained: u64,
    pub replay: String,
}

impl ZooRow {
    pub fn failed(&self) -> bool {
        matches!(self.result.as_str(), "missed" | "false positive" | "environment")
    }
}

/// A row that came out otherwise than expected with no anomaly named and a verdict about
/// the run, not the counters: the environment (a server refusing, erroring or lost),
/// not the checker, decided it.
fn environment(s: &counterlab_report::StrategyReport) -> bool {
    use counterlab_core::{FailPart, Verdict};
    let about_the_run = match &s.check.verdict {
        Verdict::NoEvidence | Verdict::Incomplete(_) => true,
        Verdict::Fail(parts) => parts.iter().all(|p| matches!(p, FailPart::Errors | FailPart::Denied)),
        _ => false,
    };
    s.anomalies.is_empty() && about_the_run
}

/// Why a zoo run could not judge anything.
#[derive(Debug, thiserror::Error)]
pub enum ZooError {
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Scenario(#[from] scenario::ScenarioError),
    #[error(transparent)]
    Backend(#[from] counterlab_strategies::BackendError),
}

/// The zoo's files, sorted; an error when the directory has none.
pub fn files(plan: &ZooPlan) -> Result<Vec<PathBuf>, ZooError> {
    let entries = std::fs::read_dir(&plan.dir).map_err(|e| {
        ZooError::Input(format!(
            "cannot read the zoo directory {}: {e} (run from the repository root or pass --dir)",
            plan.dir.display()
        ))
    })?;
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter(|p| {
            plan.only.is_empty() || p.file_stem().is_some_and(|s| plan.only.iter().any(|o| *o == s.to_string_lossy()))
        })
        .collect();
    out.sort();
    if out.is_empty() {
        return Err(ZooError::Input(format!("no zoo scenario (*.toml) in {}", plan.dir.display())));
    }
    Ok(out)
}

fn judge(file: &Path, expected: &str, seed: u64, report: &Report) -> Vec<ZooRow> {
    let name = file.display().to_string();
    let mut rows: Vec<ZooRow> = report
        .strategies
        .iter()
        .map(|s| {
            let hit = s.anomalies.iter().find(|a| a.name == expected);
            // A control is clean only with no anomaly and a verdict that held on evidence
            // (not FAIL: errors, FAIL: denied, NO EVIDENCE or INCOMPLETE).
            let held = s.check.matches_guarantee && s.check.evidence;
            let result = match (expected, s.anomalies.is_empty() && held, hit) {
                ("none", true, _) => "clean",
                // (A control's `hit` is always None: no anomaly is named "none".)
                (_, _, Some(_)) => "detected",
                _ if environment(s) => "environment",
                ("none", false, _) => "false positive",
                (_, _, _) => "missed",
            };
            ZooRow {
                file: name.clone(),
                strategy: s.strategy.clone(),
                backend: s.backend.name(),
                seed,
                expected: expected.to_string(),
                result: result.into(),
                found: s
                    .anomalies
                    .iter()
                    .map(|a| format!("{} x{}", a.name, a.count))
                    .chain((!held).then(|| format!("verdict {}", s.check.label())))
                    .collect(),
                ops_to_detect: hit.map(|a| a.ops_to_detect),
                calls: s.history.events,
                drifted: s.check.users_mismatched,
                explained: hit.map_or(0, |a| a.count.min(s.check.users_mismatched)),
                replay: report.replay_command.clone(),
                rerun: false,
            }
        })
        .collect();
    rows.extend(report.skipped.iter().map(|k| ZooRow {
        file: name.clone(),
        strategy: k.strategy.clone(),
        backend: k.backend.name(),
        seed,
        expected: expected.to_string(),
        result: "skipped".into(),
        found: vec![k.reason.clone()],
        ops_to_detect: None,
        calls: 0,
        drifted: 0,
        explained: 0,
        replay: report.replay_command.clone(),
        rerun: false,
    }));
    rows
}

/// Runs the zoo. Every file must declare `expect_anomaly`; all are parsed before any runs.
pub async fn run_zoo(
    plan: &ZooPlan,
    opts: &RunOptions,
    known: &[&str],
    log: &mut dyn FnMut(&str),
) -> Result<Vec<ZooRow>, ZooError> {
    if plan.seeds == 0 || plan.seeds > MAX_SEEDS {
        return Err(ZooError::Input(format!("--seeds must be in 1..={MAX_SEEDS}, got {}", plan.seeds)));
    }
    let mut work = Vec::new();
    for file in files(plan)? {
        let base = scenario::load(&file, &Overrides::default(), known, 1)?;
        let Some(expected) = base.expect_anomaly.map(|e| e.name().to_string()) else {
            return Err(ZooError::Input(format!(
                "{}: not a zoo scenario: it declares no expect_anomaly (an anomaly name, or \"none\")",
                file.display()
            )));
        };
        for k in 0..plan.seeds {
            let overrides = Overrides {
                seed: Some(base.seed.wrapping_add(k)),
                duration_s: plan.duration_s,
                ..Overrides::default()
            };
            work.push((file.clone(), expected.clone(), scenario::load(&file, &overrides, known, 1)?));
        }
    }
    let mut rows = Vec::new();
    for (file, expected, p) in work {
        if opts.cancel.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        log(&format!("zoo: {} seed {} (expects {expected})", file.display(), p.seed));
        let report = run_plan(&p, opts, &mut |_| {}).await?;
        let mut judged = judge(&file, &expected, p.seed, &report);
        if judged.iter().any(|r| r.result == "environment") {
            // Once more: a sick server is rarely sick twice in a row; a checker error is.
            log(&format!("zoo: {} seed {}: the environment decided it; once more", file.display(), p.seed));
            let again = run_plan(&p, opts, &mut |_| {}).await?;
            judged = judge(&file, &expected, p.seed, &again);
            judged.iter_mut().for_each(|r| r.rerun = true);
        }
        for r in &judged {
            log(&format!("zoo: {} {} seed {}: {} [{}]", r.file, r.strategy, r.seed, r.result, r.found.join(", ")));
        }
        rows.extend(judged);
    }
    Ok(rows)
}

/// One file and strategy over its seeds.
#[derive(Clone, Debug, Serialize)]
pub struct ZooSummary {
    pub file: String,
    pub strategy: String,
    pub expected: String,
    /// Runs that came out as expected (detected, or clean for a control).
    pub as_expected: u64,
    pub runs: u64,
    /// Mean calls to detect over the detecting runs.
    pub mean_ops_to_detect: Option<f64>,
    /// Misses and false positives.
    pub failed: u64,
    /// Over all runs: drifted users, and those the expected name explains.
    pub drifted: u64,
    pub explained: u64,
    /// `explained / drifted` (None for a control, or no drifted user).
    pub named_share: Option<f64>,
}

/// The share of a mutant's drifted users it should name as expected (issue 34's goal);
/// the table lists the entries under it.
pub const NAMED_SHARE_GOAL: f64 = 0.9;

pub fn summary(rows: &[ZooRow]) -> Vec<ZooSummary> {
    let mut out: Vec<ZooSummary> = Vec::new();
    for r in rows.iter().filter(|r| r.result != "skipped") {
        let i = match out.iter().position(|o| o.file == r.file && o.strategy == r.strategy) {
            Some(i) => i,
            None => {
                out.push(ZooSummary {
                    file: r.file.clone(),
                    strategy: r.strategy.clone(),
                    expected: r.expected.clone(),
                    as_expected: 0,
                    runs: 0,
                    mean_ops_to_detect: None,
                    failed: 0,
                    drifted: 0,
                    explained: 0,
                    named_share: None,
                });
                out.len() - 1
            }
        };
        let o = &mut out[i];
        o.runs += 1;
        o.as_expected += u64::from(matches!(r.result.as_str(), "detected" | "clean"));
        o.failed += u64::from(r.failed());
        o.drifted += r.drifted;
        o.explained += r.explained;
        if let Some(n) = r.ops_to_detect {
            // Running mean over the detecting runs.
            let k = o.as_expected as f64;
            o.mean_ops_to_detect = Some(o.mean_ops_to_detect.map_or(n as f64, |m| m + (n as f64 - m) / k));
        }
    }
    for o in out.iter_mut().filter(|o| !matches!(o.expected.as_str(), "none") && o.drifted > 0) {
        o.named_share = Some(o.explained as f64 / o.drifted as f64);
    }
    out
}

/// The detection table as Markdown (also what the terminal shows). A run the environment
/// decided twice (`environment`) fails the zoo like a miss, but is counted apart: it says
/// nothing about the checker.
pub fn render(rows: &[ZooRow]) -> String {
    let mut s = String::from(
        "| file | strategy | expected | as expected | runs | mean calls to detect | drifted users explained by it | misses / false positives |\n|---|---|---|---|---|---|---|---|\n",
    );
    for o in summary(rows) {
        let file = Path::new(&o.file).file_name().map_or(o.file.clone(), |f| f.to_string_lossy().into_owned());
        let mean = o.mean_ops_to_detect.map_or("-".to_string(), |m| format!("{m:.0}"));
        let share = match o.named_share {
            None => "-".to_string(),
            Some(f) => format!("{}/{} ({:.0}%)", o.explained, o.drifted, 100.0 * f),
        };
        s += &format!(
            "| {file} | {} | {} | {} | {} | {mean} | {share} | {} |\n",
            o.strategy, o.expected, o.as_expected, o.runs, o.failed
        );
    }
    let fp = rows.iter().filter(|r| r.result == "false positive").count();
    let missed = rows.iter().filter(|r| r.result == "missed").count();
    let skipped = rows.iter().filter(|r| r.result == "skipped").count();
    let env = rows.iter().filter(|r| r.result == "environment").count();
    s += &format!(
        "\n{} runs: {missed} missed, {fp} false positives, {env} environment failures (run twice), {skipped} skipped\n",
        rows.len()
    );
    for o in summary(rows).iter().filter(|o| o.named_share.is_some_and(|f| f < NAMED_SHARE_GOAL)) {
        s += &format!(
            "- {} {}: {} named on {}/{} drifted users, under {:.0}%\n",
            o.file,
            o.strategy,
            o.expected,
            o.explained,
            o.drifted,
            100.0 * NAMED_SHARE_GOAL
        );
    }
    for r in rows.iter().filter(|r| r.failed()) {
        s += &format!(
            "- {} {} seed {}: {} (found: {}); replay: `{}`\n",
            r.file,
            r.strategy,
            r.seed,
            r.result,
            r.found.join(", "),
            r.replay
        );
    }
    for r in rows.iter().filter(|r| r.result == "skipped") {
        s += &format!("- skipped {} {}: {}\n", r.file, r.strategy, r.found.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(expected: &str, result: &str, drifted: u64, explained: u64) -> ZooRow {
        ZooRow {
            file: "z/a.toml".into(),
            strategy: "s".into(),
            backend: "postgres".into(),
            seed: 1,
            expected: expected.into(),
            result: result.into(),
            rerun: false,
            found: Vec::new(),
            ops_to_detect: Some(5),
            calls: 100,
            drifted,
            explained,
            replay: "counterlab run z/a.toml".into(),
        }
    }

    #[test]
    fn the_summary_gives_each_mutant_s_named_share_and_the_table_lists_those_under_the_goal() {
        let rows = [row("lost_update", "detected", 10, 8), row("lost_update", "detected", 10, 9)];
        let s = summary(&rows);
        assert_eq!((s[0].drifted, s[0].explained, s[0].named_share), (20, 17, Some(0.85)));
        let table = render(&rows);
        assert!(table.contains("| 17/20 (85%) |"), "{table}");
        assert!(table.contains("- z/a.toml s: lost_update named on 17/20 drifted users, under 90%"), "{table}");
        // A control has no share; a mutant at the goal is not listed.
        assert_eq!(summary(&[row("none", "clean", 0, 0)])[0].named_share, None);
        assert!(!render(&[row("lost_update", "detected", 10, 9)]).contains("under 90%"));
    }
}
