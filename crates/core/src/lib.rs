//! Domain vocabulary of counterlab: operations, outcomes, guarantees, the `Strategy`
//! contract every counter design implements, and the checker that judges counters
//! against the ground truth. This crate does no I/O; backends live in `strategies`.

mod anomaly;
mod check;
mod counters;
pub mod explore;
mod figure;
mod history;
mod limit;
mod model;
mod names;
mod rng;
mod seed;
mod strategy;
mod threshold;
mod urls;
mod verdict;

pub use anomaly::AnomalyKind;
pub use check::{CheckFold, CheckInput, CheckResult, Checked, CounterVerdict, UserDrift, check_counters};
pub use counters::{UserCounters, user_chunks};
pub use figure::Figure;
pub use history::{
    Anomaly, Context, Event, HistoryParts, MAX_WITNESSES, OnePart, ReadCheck, ReadSource, ReadViolation,
    STALENESS_BUCKETS_US, SettledRead, Staleness, Witness, check_reads, check_reads_from, check_reads_lagging,
    check_reads_parts, check_reads_parts_seeded, check_reads_seeded, classify, classify_parts, sort_history,
};
pub use limit::Limit;
pub use model::{
    Backend, Companion, Dialect, ErrorClass, Guarantee, Isolation, NotificationId, OpError, OpKind, Outcome, ReadFrom,
    SETTLE, UserId, WARMUP,
};
pub use names::Named;
pub use rng::Rng;
pub use seed::SeedSpec;
pub use strategy::{BatchOp, CrashPoints, Fault, Strategy, StrategyInfo, WorkerLoop};
pub use threshold::{Metric, Threshold};
pub use urls::{check_url, redact_url};
pub use verdict::{
    ErrorFigures, FailPart, Findings, Judgement, Verdict, VerdictRules, judge, judge_incomplete, with_refusal,
};
