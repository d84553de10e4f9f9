//! One verdict per strategy run, computed once from everything the run found (the final
//! counters, the reads against the history, errors, refusals and whether the mix really
//! ran), and used by every output: terminal, Markdown, HTML, JSON and the exit code.

use crate::check::{CheckResult, CounterVerdict};
use crate::history::Anomaly;
use crate::limit::Limit;
use crate::model::{Guarantee, OpKind};

/// What the scenario allows before the verdict fails or lacks evidence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VerdictRules {
    /// Largest share of operations that may fail with a non-conflict error (conflicts the
    /// server rolled back are retried and never count).
    pub max_error_rate: f64,
    /// Fewest executed (not skipped) operations of each kind the mix asks for.
    pub min_ops_per_kind: u64,
}

impl Default for VerdictRules {
    fn default() -> VerdictRules {
        VerdictRules { max_error_rate: 0.001, min_ops_per_kind: 1 }
    }
}

/// Non-conflict errors of a run, when they are judged (not while faults are scheduled:
/// then errors are what the faults cause).
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorFigures {
    pub failed: u64,
    pub ops: u64,
    /// The most frequent error class and one message of it.
    pub top: Option<String>,
}

/// Everything a run found, as the verdict needs it.
#[derive(Clone, Debug)]
pub struct Findings<'a> {
    pub strategy: &'a str,
    pub guarantee: Guarantee,
    pub check: &'a CheckResult,
    pub anomalies: &'a [Anomaly],
    /// Operations the server refused for lack of a privilege.
    pub permission_denied: u64,
    /// None: errors are not judged (faults scheduled).
    pub errors: Option<ErrorFigures>,
    /// Kinds the mix asks for, with how many of each were executed.
    pub executed: Vec<(OpKind, u64)>,
    /// Why this backend cannot show drift, when it cannot (SQLite: one writer at a time).
    pub serialises_writers: Option<&'a str>,
    /// Conflicts the server raised and the design retried: a design with no guarantee
    /// that shows no drift after them hit its race and was kept by retries.
    pub conflicts_retried: u64,
    /// The lag a cache's reads were allowed, in milliseconds (None: reads see the counter).
    pub read_lag_ms: Option<f64>,
    /// What the check did not cover: shown in brackets after the label.
    pub limits: Vec<Limit>,
}

crate::named_enum! {
    /// Why a verdict failed, in the order the label lists them.
    pub enum FailPart {
        Denied = "denied",
        Counters = "counters",
        Reads = "reads",
        Errors = "errors",
    }
}

/// The verdict of one strategy run. Its text (`label()`) is what every output prints;
/// `parse` reads it back from a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    DriftExpected,
    NoDriftObserved,
    NoEvidence,
    Fail(Vec<FailPart>),
    /// The check could not complete (the first words of why).
    Incomplete(String),
}

impl Default for Verdict {
    /// A report row with no verdict never passes.
    fn default() -> Verdict {
        Verdict::Fail(Vec::new())
    }
}

impl Verdict {
    pub fn label(&self) -> String {
        match self {
            Verdict::Pass => "pass".into(),
            Verdict::DriftExpected => "drift-expected".into(),
            Verdict::NoDriftObserved => "no-drift-observed".into(),
            Verdict::NoEvidence => "NO EVIDENCE".into(),
            Verdict::Fail(parts) => {
                format!("FAIL: {}", parts.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "))
            }
            Verdict::Incomplete(why) => format!("INCOMPLETE: {why}"),
        }
    }

    /// A label as `label()` writes it, or as a `Judgement` qualified it (`pass [history
    /// capped ...]`); None for text no verdict prints.
    pub fn parse(label: &str) -> Option<Verdict> {
        let label = label.strip_suffix(']').and_then(|l| l.rsplit_once(" [")).map_or(label, |(base, _)| base);
        if let Some(parts) = label.strip_prefix("FAIL: ") {
            let parts: Option<Vec<FailPart>> = parts.split(", ").map(FailPart::from_name).collect();
            return parts.map(Verdict::Fail);
        }
        if let Some(why) = label.strip_prefix("INCOMPLETE: ") {
            return Some(Verdict::Incomplete(why.to_string()));
        }
        [Verdict::Pass, Verdict::DriftExpected, Verdict::NoDriftObserved, Verdict::NoEvidence]
            .into_iter()
            .find(|v| v.label() == label)
    }

    pub fn is_fail(&self) -> bool {
        matches!(self, Verdict::Fail(_))
    }

    pub fn is_incomplete(&self) -> bool {
        matches!(self, Verdict::Incomplete(_))
    }
}

/// The verdict, whether the guarantee held, whether there was evidence, and one
/// sentence in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    pub verdict: Verdict,
    /// `verdict.label()`, as every output prints it.
    /// `verdict.label()`, then what the check did not cover in brackets, if anything:
    /// `pass [history capped at 4000000 calls (12 not recorded): reads not checked]`.
    pub label: String,
    pub held: bool,
    pub evidence: bool,
    pub sentence: String,
    /// `Findings::limits`: never silent, in the label, the sentence and the JSON.
    pub limits: Vec<Limit>,
}

impl Judgement {
    pub fn new(verdict: Verdict, held: bool, evidence: bool, sentence: String) -> Judgement {
        Judgement { label: verdict.label(), verdict, held, evidence, sentence, limits: Vec::new() }
    }

    /// The judgement with what the check did not cover said in its label and sentence.
    fn limited(mut self, limits: &[Limit]) -> Judgement {
        if !limits.is_empty() {
            let all = Limit::joined(limits);
            self.label = format!("{} [{all}]", self.label);
            self.sentence = format!("{}; not checked in full: {all}", self.sentence);
            self.limits = limits.to_vec();
        }
        self
    }
}

/// Judges one strategy run: first what failed (each part with its reason), then whether
/// there was evidence, then how the counters came out; what the check did not cover
/// (`Findings::limits`) qualifies the label whatever the verdict.
pub fn judge(f: &Findings<'_>, rules: VerdictRules) -> Judgement {
    judge_all(f, rules).limited(&f.limits)
}

fn judge_all(f: &Findings<'_>, rules: VerdictRules) -> Judgement {
    let failed = failures(f, rules);
    let missing: Vec<String> = f
        .executed
        .iter()
        .filter(|(_, n)| *n < rules.min_ops_per_kind)
        .map(|(k, n)| format!("{} ({n})", k.name()))
        .collect();
    let evidence = missing.is_empty();
    if !failed.is_empty() {
        let parts: Vec<FailPart> = failed.iter().map(|(p, _)| *p).collect();
        let why: Vec<String> = failed.into_iter().map(|(_, w)| w).collect();
        return Judgement::new(Verdict::Fail(parts), false, evidence, format!("{}: {}", f.strategy, why.join("; ")));
    }
    if !evidence {
        let sentence = format!(
            "{}: too few operations ran to judge it: {} (at least {} of each kind the mix asks for)",
            f.strategy,
            missing.join(", "),
            rules.min_ops_per_kind
        );
        return Judgement::new(Verdict::NoEvidence, true, evidence, sentence);
    }
    let c = f.check;
    let wrong = format!("{}/{} counters wrong", c.users_mismatched, c.users_checked);
    let (verdict, sentence) = match c.verdict {
        CounterVerdict::DriftExpected => (Verdict::DriftExpected, format!("{wrong} — expected, it makes no guarantee")),
        CounterVerdict::NoDriftObserved => match f.serialises_writers {
            Some(why) => (Verdict::NoDriftObserved, format!("no counter drifted, and none can here: {why}")),
            None if f.conflicts_retried > 0 => (
                Verdict::NoDriftObserved,
                format!(
                    "no counter drifted: its race was hit and kept by retries ({} conflicts retried); \
                     it makes no guarantee",
                    f.conflicts_retried
                ),
            ),
            None => (
                Verdict::NoDriftObserved,
                "no counter drifted, but it makes no guarantee: this run did not hit its race".to_string(),
            ),
        },
        _ => {
            let lag =
                f.read_lag_ms.map(|ms| format!(" (a cached read may lag {ms:.0} ms by design)")).unwrap_or_default();
            // Reads not checked (`limits`) are not claimed.
            let unchecked = f.limits.iter().any(Limit::leaves_reads_unchecked);
            let reads = if unchecked { "" } else { " and every read within its bounds" };
            (Verdict::Pass, format!("all {} counters {}{reads}{lag}", c.users_checked, exact(f)))
        }
    };
    Judgement::new(verdict, true, evidence, format!("{}: {sentence}", f.strategy))
}

/// Each failed part with its reason, in label order.
fn failures(f: &Findings<'_>, rules: VerdictRules) -> Vec<(FailPart, String)> {
    let c = f.check;
    let mut failed = Vec::new();
    failed.extend(denied_part(f.permission_denied));
    let named = |keep: &dyn Fn(&Anomaly) -> bool| -> Vec<String> {
        f.anomalies.iter().filter(|a| keep(a)).map(|a| format!("{} x{}", a.name, a.count)).collect()
    };
    if c.verdict == CounterVerdict::Fail {
        let names = named(&|a| !a.kind.from_reads());
        let names = if names.is_empty() { String::new() } else { format!(" ({})", names.join(", ")) };
        let wrong = format!("{}/{} counters wrong", c.users_mismatched, c.users_checked);
        failed.push((FailPart::Counters, format!("{wrong}, but it promises {} counters{names}", f.guarantee.name())));
    }
    // With the counters right, any anomaly was seen by reading (e.g. a lost increment a
    // later mark_all_read hid from the final state).
    let counters_right = c.users_mismatched == 0;
    let promises = f.guarantee != Guarantee::None;
    if promises && (f.anomalies.iter().any(|a| a.kind.from_reads()) || (!f.anomalies.is_empty() && counters_right)) {
        let names = named(&|a| counters_right || a.kind.from_reads());
        failed.push((FailPart::Reads, format!("reads outside what the history allows ({})", names.join(", "))));
    }
    failed.extend(errors_part(f.errors.as_ref(), rules));
    failed
}

fn denied_part(permission_denied: u64) -> Option<(FailPart, String)> {
    (permission_denied > 0)
        .then(|| (FailPart::Denied, format!("{permission_denied} operations refused for lack of a privilege")))
}

fn errors_part(errors: Option<&ErrorFigures>, rules: VerdictRules) -> Option<(FailPart, String)> {
    let e = errors.filter(|e| e.ops > 0 && e.failed as f64 > rules.max_error_rate * e.ops as f64)?;
    let rate = 100.0 * e.failed as f64 / e.ops as f64;
    let top = e.top.as_deref().map(|t| format!("; top: {t}")).unwrap_or_default();
    let max = 100.0 * rules.max_error_rate;
    Some((FailPart::Errors, format!("{rate:.2}% of operations failed (max {max}%){top}")))
}

/// The verdict of a run whose check could not complete (`why`): what the load alone
/// shows failed still fails it (refusals are `FAIL: denied`, an error rate over the
/// budget `FAIL: errors`, whatever else happened), with the incomplete check said in the
/// sentence; otherwise INCOMPLETE with the first words of why.
pub fn judge_incomplete(
    strategy: &str,
    permission_denied: u64,
    errors: Option<&ErrorFigures>,
    rules: VerdictRules,
    why: &str,
) -> Judgement {
    let failed: Vec<(FailPart, String)> =
        denied_part(permission_denied).into_iter().chain(errors_part(errors, rules)).collect();
    if failed.is_empty() {
        let verdict = Verdict::Incomplete(why.split(':').next().unwrap_or(why).to_string());
        return Judgement::new(verdict, false, false, format!("{strategy}: the check could not complete: {why}"));
    }
    let parts = failed.iter().map(|(p, _)| *p).collect();
    let reasons: Vec<String> = failed.into_iter().map(|(_, w)| w).collect();
    let sentence = format!("{strategy}: {}; and the check could not complete: {why}", reasons.join("; "));
    Judgement::new(Verdict::Fail(parts), false, false, sentence)
}

/// The judgement of a run the sandbox also refused outside any op (`why`: a Redis
/// namespace over its memory cap): `FAIL` with `denied` first, whatever it was before.
pub fn with_refusal(j: Judgement, why: &str) -> Judgement {
    let mut parts = match j.verdict {
        Verdict::Fail(parts) => parts,
        _ => Vec::new(),
    };
    if !parts.contains(&FailPart::Denied) {
        parts.insert(0, FailPart::Denied);
    }
    let limits = j.limits;
    let suffix = format!("; not checked in full: {}", Limit::joined(&limits));
    let said = j.sentence.strip_suffix(suffix.as_str()).filter(|_| !limits.is_empty()).unwrap_or(&j.sentence);
    let sentence = format!("{said}; refused: {why}");
    Judgement::new(Verdict::Fail(parts), false, j.evidence, sentence).limited(&limits)
}

fn exact(f: &Findings<'_>) -> &'static str {
    if f.guarantee == Guarantee::Eventual { "converged after settle" } else { "exact" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{CheckInput, check_counters};

    fn findings<'a>(g: Guarantee, check: &'a CheckResult, anomalies: &'a [Anomaly]) -> Findings<'a> {
        Findings {
            strategy: "s",
            guarantee: g,
            check,
            anomalies,
            permission_denied: 0,
            errors: Some(ErrorFigures { failed: 0, ops: 1000, top: None }),
            executed: vec![(OpKind::MarkRead, 500), (OpKind::ReadCount, 500)],
            serialises_writers: None,
            conflicts_retried: 0,
            read_lag_ms: None,
            limits: Vec::new(),
        }
    }

    fn rows(wrong: bool) -> Vec<CheckInput> {
        vec![CheckInput { user: 1, counter: Some(if wrong { 3 } else { 2 }), truth: 2 }]
    }

    fn anomaly(name: &'static str) -> Anomaly {
        let kind = crate::AnomalyKind::from_name(name).unwrap();
        Anomaly { kind, name, count: 2, witnesses: Vec::new(), ops_to_detect: 1 }
    }

    #[test]
    fn each_failing_part_is_named_and_none_passes() {
        let ok = check_counters(&rows(false), Guarantee::Exact);
        let bad = check_counters(&rows(true), Guarantee::Exact);
        let reads = [anomaly("read_out_of_bounds")];
        let j = |f: &Findings<'_>| judge(f, VerdictRules::default());
        assert_eq!(j(&findings(Guarantee::Exact, &ok, &[])).label, "pass");
        assert_eq!(j(&findings(Guarantee::Exact, &bad, &[])).label, "FAIL: counters");
        let r = j(&findings(Guarantee::Exact, &ok, &reads));
        assert_eq!((r.label.as_str(), r.held), ("FAIL: reads", false));
        let mut f = findings(Guarantee::Exact, &ok, &[]);
        f.errors = Some(ErrorFigures { failed: 2, ops: 1000, top: Some("other: no such table".into()) });
        let e = j(&f);
        assert!(e.label == "FAIL: errors" && e.sentence.contains("no such table"), "{e:?}");
        f.errors = None;
        assert_eq!(j(&f).label, "pass", "errors are not judged under faults");
        f.permission_denied = 1;
        assert_eq!(j(&f).label, "FAIL: denied");
    }

    #[test]
    fn a_check_that_did_not_complete_still_fails_on_refusals_and_errors() {
        let rules = VerdictRules::default();
        let few = ErrorFigures { failed: 0, ops: 1000, top: None };
        let many = ErrorFigures { failed: 580, ops: 1000, top: Some("timeout x580".into()) };
        let inc = judge_incomplete("s", 0, Some(&few), rules, "settled reads: pool timed out");
        assert_eq!(inc.label, "INCOMPLETE: settled reads");
        assert_eq!(judge_incomplete("s", 22, Some(&few), rules, "x").label, "FAIL: denied");
        let both = judge_incomplete("s", 22, Some(&many), rules, "the check: pool timed out");
        assert_eq!(both.label, "FAIL: denied, errors");
        assert!(both.sentence.contains("58.00% of operations failed") && both.sentence.contains("could not complete"));
        assert_eq!(
            judge_incomplete("s", 0, None, rules, "x: y").label,
            "INCOMPLETE: x",
            "faults scheduled: errors not judged"
        );
    }

    #[test]
    fn a_check_not_in_full_says_so_in_the_label_and_the_label_reads_back() {
        let ok = check_counters(&rows(false), Guarantee::Exact);
        let mut f = findings(Guarantee::Exact, &ok, &[]);
        f.limits = vec![Limit::HistoryCapped { recorded: 10, dropped: 3 }];
        let j = judge(&f, VerdictRules::default());
        assert_eq!(j.label, "pass [history capped at 10 calls (3 not recorded): reads not checked]");
        assert!(
            j.sentence.ends_with("not checked in full: history capped at 10 calls (3 not recorded): reads not checked")
        );
        assert!(!j.sentence.contains("every read"), "reads not checked are not claimed: {}", j.sentence);
        assert_eq!((Verdict::parse(&j.label), j.limits.len()), (Some(Verdict::Pass), 1));
        let bad = check_counters(&rows(true), Guarantee::Exact);
        let mut f = findings(Guarantee::Exact, &bad, &[]);
        f.limits = vec![Limit::Other("x".into())];
        let j = judge(&f, VerdictRules::default());
        assert_eq!(
            (j.label.as_str(), Verdict::parse(&j.label)),
            ("FAIL: counters [x]", Some(Verdict::Fail(vec![FailPart::Counters])))
        );
    }

    #[test]
    fn no_evidence_is_not_a_pass_and_drift_is_explained() {
        let ok = check_counters(&rows(false), Guarantee::Exact);
        let mut f = findings(Guarantee::Exact, &ok, &[]);
        f.executed = vec![(OpKind::Delete, 0)];
        let n = judge(&f, VerdictRules::default());
        assert!(n.label == "NO EVIDENCE" && !n.evidence && n.sentence.contains("delete (0)"), "{n:?}");
        let none_bad = check_counters(&rows(true), Guarantee::None);
        let d = judge(&findings(Guarantee::None, &none_bad, &[anomaly("double_decrement")]), VerdictRules::default());
        assert!(d.label == "drift-expected" && d.held && d.sentence.contains("1/1 counters wrong"), "{d:?}");
        let bad = check_counters(&rows(true), Guarantee::Exact);
        let failed = judge(&findings(Guarantee::Exact, &bad, &[]), VerdictRules::default());
        for v in [failed, n, d] {
            assert_eq!(Verdict::parse(&v.label), Some(v.verdict.clone()), "labels read back");
        }
        assert_eq!(Verdict::parse("INCOMPLETE: read the truth").map(|v| v.is_incomplete()), Some(true));
        assert_eq!(Verdict::parse("FAIL: nonsense"), None);
        let none_ok = check_counters(&rows(false), Guarantee::None);
        let mut f = findings(Guarantee::None, &none_ok, &[]);
        f.serialises_writers = Some("SQLite runs one writer at a time");
        assert!(judge(&f, VerdictRules::default()).sentence.contains("none can here: SQLite"));
        // Retried conflicts on a serialised backend do not change why no drift is seen.
        f.conflicts_retried = 3;
        assert!(judge(&f, VerdictRules::default()).sentence.contains("none can here: SQLite"));
        f.serialises_writers = None;
        let retried = judge(&f, VerdictRules::default());
        assert_eq!(retried.label, "no-drift-observed");
        assert_eq!(
            retried.sentence,
            "s: no counter drifted: its race was hit and kept by retries (3 conflicts retried); it makes no guarantee"
        );
        f.conflicts_retried = 0;
        assert!(judge(&f, VerdictRules::default()).sentence.ends_with("this run did not hit its race"));
    }

    #[test]
    fn a_refusal_outside_the_ops_fails_any_verdict_as_denied() {
        let pass = Judgement::new(Verdict::Pass, true, true, "s: exact".into());
        let j = with_refusal(pass, "over its cap");
        assert_eq!((j.label.as_str(), j.held), ("FAIL: denied", false));
        assert_eq!(j.sentence, "s: exact; refused: over its cap");
        let failed = Judgement::new(Verdict::Fail(vec![FailPart::Counters]), false, true, "s: drift".into());
        assert_eq!(with_refusal(failed, "x").label, "FAIL: denied, counters");
        let limited = Judgement::new(Verdict::Pass, true, true, "s".into()).limited(&[Limit::Other("capped".into())]);
        let j = with_refusal(limited, "x");
        assert_eq!(
            (j.label.as_str(), j.sentence.as_str()),
            ("FAIL: denied [capped]", "s; refused: x; not checked in full: capped")
        );
    }
}
