//! Domain vocabulary of counterlab: operations, outcomes, guarantees, the `Strategy`
//! contract every counter design implements, and the checker that judges counters
//! against the ground truth. This crate does no I/O; backends live in `strategies`.

mod anomaly;
mod check;
mod counters;
mod history;
mod model;
mod names;
mod seed;
mod strategy;
mod verdict;

pub use anomaly::AnomalyKind;
pub use check::{CheckFold, CheckInput, CheckResult, Checked, UserDrift, Verdict, check_counters};
pub use counters::{UserCounters, user_chunks};
pub use history::{
    Anomaly, Context, Event, HistoryParts, MAX_WITNESSES, OnePart, ReadCheck, ReadSource, ReadViolation,
    STALENESS_BUCKETS_US, SettledRead, Staleness, Witness, check_reads, check_reads_from, check_reads_lagging,
    check_reads_parts, classify, classify_parts, sort_history,
};
pub use model::{ErrorClass, Guarantee, NotificationId, OpError, OpKind, Outcome, ReadFrom, UserId};
pub use names::Named;
pub use seed::SeedSpec;
pub use strategy::{CrashPoints, Fault, Strategy, StrategyInfo, WorkerLoop};
pub use verdict::{
    ErrorFigures, FailPart, Findings, Judgement, Verdict as VerdictLabel, VerdictRules, judge, judge_incomplete,
    with_refusal,
};
