//! The report as JUnit XML (`run --junit FILE`), for CI systems: one testcase per
//! strategy x backend x level, failed exactly when the row makes the exit code non-zero
//! (`row_outcome`, the same rule `ending` applies), with the verdict and the first
//! witnesses in the failure's text.

use counterlab_core::ReadFrom;
use quick_junit::{NonSuccessKind, Property, Report as Junit, TestCase, TestCaseStatus, TestSuite};

use crate::{Report, StrategyReport};

/// What a row means for the run's exit code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RowOutcome {
    Passed,
    /// Fails the run (exit 1): its verdict, a broken guarantee, a breached threshold, an
    /// unmet expectation, or (`strict`) no evidence or a limited check.
    Failed(String),
    /// INCOMPLETE (exit 3 unless another row failed).
    Incomplete(String),
}

/// The row's outcome: the rule the exit code follows (`counterlab run` fails when any row
/// fails, else exits 3 when any is incomplete). A breached threshold or an unmet
/// expectation fails a row whatever its verdict; an INCOMPLETE verdict alone does not.
pub fn row_outcome(s: &StrategyReport, strict: bool) -> RowOutcome {
    let (verdict, label) = (&s.check.verdict, s.check.label());
    let breached = s.thresholds.iter().filter(|t| !t.passed).map(|t| t.detail.clone());
    let unmet = s.expectations.iter().filter(|e| e.judged && !e.met).map(|e| e.detail.clone());
    let explored = s.explored.as_ref().filter(|e| e.breaks_guarantee()).map(|e| format!("explore: {}", e.words()));
    let mut why: Vec<String> = breached.chain(unmet).chain(explored).collect();
    if !verdict.is_incomplete() {
        if verdict.is_fail() || !s.check.matches_guarantee {
            why.insert(0, format!("verdict {label}"));
        } else if strict && (!s.check.evidence || !s.check.limits.is_empty()) {
            why.insert(0, format!("verdict {label} (--strict)"));
        }
    }
    match (why.is_empty(), verdict.is_incomplete()) {
        (false, _) => RowOutcome::Failed(why.join("; ")),
        (true, true) => RowOutcome::Incomplete(label),
        (true, false) => RowOutcome::Passed,
    }
}

/// The testcase's name: the row's strategy, backend, level and read source.
pub fn case_name(s: &StrategyReport) -> String {
    let reads = if s.read_from == ReadFrom::Primary { String::new() } else { format!(", reads from {}", s.read_from) };
    format!("{} on {} at {}{reads}", s.strategy, s.backend, s.isolation)
}

/// The failure's text: the verdict in words, then the first anomalies (each with its
/// first witness), then the worst users.
fn evidence(s: &StrategyReport) -> String {
    let mut lines = vec![s.check.summary.clone()];
    for a in s.anomalies.iter().take(3) {
        lines.push(format!("anomaly {} x{}: {}", a.name, a.count, a.detail));
    }
    for u in s.check.worst_users.iter().take(3) {
        let counter = u.counter.map_or("none".to_string(), |c| c.to_string());
        lines.push(format!("user {}: counter {counter}, truth {}", u.user, u.truth));
    }
    lines.join("\n")
}

fn case(s: &StrategyReport, strict: bool) -> TestCase {
    let status = match row_outcome(s, strict) {
        RowOutcome::Passed => TestCaseStatus::success(),
        RowOutcome::Failed(why) => non_success(NonSuccessKind::Failure, why, s),
        RowOutcome::Incomplete(why) => non_success(NonSuccessKind::Error, why, s),
    };
    let mut c = TestCase::new(case_name(s), status);
    c.set_classname(format!("counterlab.{}", s.backend));
    c.set_time(std::time::Duration::from_secs_f64((s.seed_s + s.load_s + s.settle_s + s.check_s).max(0.0)));
    c.add_property(Property::new("verdict", s.check.label()));
    c.add_property(Property::new("guarantee", s.guarantee.name()));
    c.add_property(Property::new("namespace", s.namespace.as_str()));
    c.add_property(Property::new("ops", s.ops_total.to_string()));
    c
}

fn non_success(kind: NonSuccessKind, why: String, s: &StrategyReport) -> TestCaseStatus {
    let mut status = TestCaseStatus::non_success(kind);
    status.set_message(why);
    status.set_type(s.check.label());
    status.set_description(evidence(s));
    status
}

/// The report as JUnit XML: one suite (the scenario), its rows as testcases, the
/// combinations not run as skipped cases.
pub fn render_junit(r: &Report, strict: bool) -> String {
    let mut suite = TestSuite::new(r.scenario.as_str());
    suite.add_property(Property::new("run_id", r.run_id.as_str()));
    suite.add_property(Property::new("seed", r.seed.to_string()));
    suite.add_property(Property::new("replay", r.replay_command.as_str()));
    suite.add_test_cases(r.strategies.iter().map(|s| case(s, strict)));
    for k in &r.skipped {
        let mut status = TestCaseStatus::skipped();
        status.set_message(k.reason.as_str());
        suite.add_test_case(TestCase::new(format!("{} on {} at {}", k.strategy, k.backend, k.isolation), status));
    }
    let mut report = Junit::new("counterlab");
    report.add_test_suite(suite);
    report.to_string().expect("a JUnit report serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ThresholdResult;
    use counterlab_core::{Backend, Dialect, Verdict};

    fn row(verdict: &str, held: bool) -> StrategyReport {
        let mut s =
            StrategyReport { strategy: "s".into(), backend: Backend::sql(Dialect::Sqlite), ..Default::default() };
        (s.check.verdict, s.check.matches_guarantee, s.check.evidence) = (Verdict::parse(verdict).unwrap(), held, true);
        s
    }

    #[test]
    fn a_row_fails_as_the_exit_code_does() {
        assert_eq!(row_outcome(&row("pass", true), false), RowOutcome::Passed);
        let fail = row("FAIL: counters", false);
        assert_eq!(row_outcome(&fail, false), RowOutcome::Failed("verdict FAIL: counters".into()));
        let inc = row("INCOMPLETE: setup", false);
        assert_eq!(row_outcome(&inc, true), RowOutcome::Incomplete("INCOMPLETE: setup".into()));
        let mut breached = row("pass", true);
        breached.thresholds.push(ThresholdResult {
            metric: "p99_ms".into(),
            op: None,
            limit: 1.0,
            value: 2.0,
            passed: false,
            detail: "p99 over".into(),
        });
        assert_eq!(row_outcome(&breached, false), RowOutcome::Failed("p99 over".into()));
        let mut inc_breached = row("INCOMPLETE: settle", false);
        inc_breached.thresholds = breached.thresholds.clone();
        assert_eq!(row_outcome(&inc_breached, false), RowOutcome::Failed("p99 over".into()), "a breach fails it");
        let mut thin = row("NO EVIDENCE", true);
        thin.check.evidence = false;
        assert_eq!(row_outcome(&thin, false), RowOutcome::Passed);
        assert_eq!(row_outcome(&thin, true), RowOutcome::Failed("verdict NO EVIDENCE (--strict)".into()));
    }
}
