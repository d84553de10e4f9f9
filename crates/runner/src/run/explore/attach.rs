//! `[explore] with_run` / `run --explore`: after the load, every row of the report is
//! explored too (the same strategies, backends and levels) and carries the explorer's
//! result, so a reader sees "safe in every explored interleaving" beside "no drift under
//! load", and a design declaring exact that the explorer refutes fails its row.

use counterlab_core::{Guarantee, ReadFrom};
use counterlab_plan::RunPlan;
use counterlab_report::{ExploreSummary, Report, UnsafePair};

use super::{ExploreConfig, Explored, PairResult, explore_plan};
use crate::run::RunOptions;

/// Explores the plan's cells and puts each result on its row (rows read from a replica
/// get none: the explorer runs on the primary). An explorer that cannot start is logged
/// and noted on every row as skipped; the load's report stands.
pub async fn attach(plan: &RunPlan, opts: &RunOptions, report: &mut Report, log: &mut dyn FnMut(&str)) {
    let explored = match ExploreConfig::of_plan(&plan.explore) {
        Err(why) => Err(why),
        Ok(cfg) => explore_plan(plan, opts, &cfg, log).await.map_err(|e| e.to_string()),
    };
    for row in report.strategies.iter_mut().filter(|r| r.read_from == ReadFrom::Primary) {
        row.explored = match &explored {
            Err(why) => {
                Some(ExploreSummary { skipped: Some(format!("the explorer did not run: {why}")), ..Default::default() })
            }
            Ok(all) => all
                .iter()
                .find(|e| {
                    e.strategy == row.strategy && e.backend == row.backend.name() && e.isolation == row.isolation.name()
                })
                .map(summary)
                // Judged by the row's guarantee: a scenario's `expect_drift` judges a
                // design as if it had none, here as under load.
                .map(|s| ExploreSummary { declares_exact: judged_exact(plan, row), ..s }),
        };
    }
}

/// Whether the row is judged as exact: it declares it and the scenario does not expect
/// its drift (as `one::check` judges the load).
fn judged_exact(plan: &RunPlan, row: &counterlab_report::StrategyReport) -> bool {
    row.guarantee == Guarantee::Exact && !plan.expect_drift.contains(&row.strategy)
}

/// One explored cell in the report's terms.
pub fn summary(e: &Explored) -> ExploreSummary {
    let mut s = ExploreSummary {
        pairs: e.pairs.len() as u32,
        schedules: e.pairs.iter().map(|p| p.result.explored()).sum(),
        declares_exact: e.declares_exact,
        skipped: e.skipped.clone(),
        ..Default::default()
    };
    for p in &e.pairs {
        let name = p.ops.iter().map(|o| o.name()).collect::<Vec<_>>().join(" ‖ ");
        match &p.result {
            PairResult::Safe { .. } => {}
            PairResult::Unsafe { explored, failing, first } => s.unsafe_pairs.push(UnsafePair {
                pair: name,
                failing: *failing,
                explored: *explored,
                anomalies: first.anomalies.clone(),
            }),
            PairResult::NotExplored { left, .. } => s.not_explored.push(format!("{name}: {left}")),
            PairResult::Error { why, .. } => s.errors.push(format!("{name}: {why}")),
        }
    }
    s
}
