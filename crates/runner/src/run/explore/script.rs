//! What the explorer reports: one result per op pair (SAFE, UNSAFE with its shortest
//! failing schedule, NOT EXPLORED with what was left), the failing schedule as a
//! two-column step-by-step script, and the replay file `counterlab explore --replay` runs.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::ops::{Op, STATE_WORDS};
use super::session::{Ended, Step};

/// The explorer's report format version.
pub const EXPLORE_SCHEMA_VERSION: u32 = 1;

/// A schedule whose final counter was not the truth.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failing {
    /// The sessions in the order their steps were granted (0-based): the schedule.
    pub choices: Vec<usize>,
    pub user: i64,
    pub steps: Vec<Step>,
    pub ended: Vec<Ended>,
    pub counter: Option<i64>,
    pub truth: i64,
    /// The anomalies the checker named for it.
    pub anomalies: Vec<String>,
}

/// One op pair's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PairResult {
    /// Every schedule was run and every one ended exact; in `retried` of them an op was
    /// refused by the server (deadlock, serialization failure) and retried by the design;
    /// in `faulted` the design's own fault (the scenario's `flusher_crash` or
    /// `consumer_crash_after_apply`) fired in its background session.
    Safe {
        explored: u64,
        retried: u64,
        #[serde(default)]
        faulted: u64,
    },
    /// `failing` of `explored` schedules ended with a wrong counter; the shortest first.
    Unsafe { explored: u64, failing: u64, first: Box<Failing> },
    /// The search stopped short (budget or preemption bound) with every schedule run exact.
    NotExplored { explored: u64, left: String },
    /// The explorer itself could not go on (say why); not a verdict on the design.
    Error { explored: u64, why: String },
}

impl PairResult {
    pub fn label(&self) -> &'static str {
        match self {
            PairResult::Safe { .. } => "SAFE",
            PairResult::Unsafe { .. } => "UNSAFE",
            PairResult::NotExplored { .. } => "NOT EXPLORED",
            PairResult::Error { .. } => "ERROR",
        }
    }

    pub fn explored(&self) -> u64 {
        match self {
            PairResult::Safe { explored, .. }
            | PairResult::Unsafe { explored, .. }
            | PairResult::NotExplored { explored, .. }
            | PairResult::Error { explored, .. } => *explored,
        }
    }
}

/// One cell of the matrix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    pub ops: Vec<Op>,
    #[serde(flatten)]
    pub result: PairResult,
    pub seconds: f64,
}

/// Everything explored for one strategy on one backend at one level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Explored {
    pub strategy: String,
    pub guarantee: String,
    /// Whether it declares the exact guarantee (an UNSAFE pair then fails the exit code).
    pub declares_exact: bool,
    pub backend: String,
    /// The SQL dialect of `backend` (`postgres`, `mysql`, `sqlite`).
    pub dialect: String,
    pub isolation: String,
    pub state: String,
    /// The most preemptions a schedule had (None: any number).
    pub preemption_bound: Option<u32>,
    pub budget: u64,
    /// Whether a plain `BEGIN` was granted without branching (see `ExploreConfig::reduce`).
    #[serde(default)]
    pub reduced: bool,
    pub pairs: Vec<Pair>,
    /// Why the cell was not explored at all (skipped), or its setup error.
    pub skipped: Option<String>,
}

/// A failing schedule written for `counterlab explore --replay FILE`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayFile {
    pub version: u32,
    pub scenario: String,
    pub strategy: String,
    pub backend: String,
    pub dialect: String,
    pub isolation: String,
    pub ops: Vec<Op>,
    pub failing: Failing,
    /// Whether the schedule was found with the reduction (its choices assume it; files
    /// written before it existed have none).
    #[serde(default)]
    pub reduced: bool,
    /// The script a reader replays by hand, one line per step in session order.
    pub script: Vec<String>,
}

/// The schedule as two (or three) columns: each step in its session's column (what was
/// sent, wrapped at words, then what it saw), then how each op ended and the counter
/// against the truth.
pub fn columns(ops: &[Op], f: &Failing) -> String {
    // Two sessions fit 80 columns.
    let w = if ops.len() > 2 { 24 } else { 36 };
    let mut out = String::new();
    let heads: Vec<String> = ops.iter().enumerate().map(|(i, o)| format!("session {}: {}", i + 1, o.name())).collect();
    row(&mut out, "step", &heads.iter().map(|h| vec![h.clone()]).collect::<Vec<_>>(), w);
    for (n, s) in f.steps.iter().enumerate() {
        let mut cols = vec![Vec::new(); ops.len()];
        let saw = s.saw.as_deref().unwrap_or("(no reply)");
        let waited = if s.blocked { " (waited on a lock)" } else { "" };
        let mut cell = wrap(&s.sent, w);
        cell.extend(wrap(&format!("  -> {saw}{waited}"), w));
        cols[s.session - 1] = cell;
        row(&mut out, &(n + 1).to_string(), &cols, w);
    }
    for (i, e) in f.ended.iter().enumerate() {
        let how = match &e.result {
            Ok((_, v)) => format!("ok, replied {v}"),
            Err(why) => format!("{} ({why})", e.outcome),
        };
        let _ = writeln!(out, "session {}: {} {how} after {} attempt(s)", i + 1, e.op.name(), e.attempts);
    }
    let counter = f.counter.map_or("none".to_string(), |c| c.to_string());
    let _ = writeln!(out, "counter {counter}, truth {}: {}", f.truth, f.anomalies.join(", "));
    out
}

/// `text` in lines of at most `w` characters, broken between words (a longer word alone).
fn wrap(text: &str, w: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let last = lines.last_mut().expect("one line at least");
        if !last.is_empty() && last.chars().count() + 1 + word.chars().count() > w {
            lines.push(String::new());
        }
        let last = lines.last_mut().expect("one line at least");
        if !last.is_empty() || word.is_empty() {
            last.push(' ');
        }
        last.push_str(word);
    }
    lines
}

/// One step's row: the columns side by side, as many lines as the tallest.
fn row(out: &mut String, step: &str, cols: &[Vec<String>], w: usize) {
    let height = cols.iter().map(Vec::len).max().unwrap_or(0).max(1);
    for i in 0..height {
        let mut l = format!("{:>4}  ", if i == 0 { step } else { "" });
        for c in cols {
            let text = c.get(i).map_or("", String::as_str);
            let _ = write!(l, "{text:<w$}  ");
        }
        let _ = writeln!(out, "{}", l.trim_end());
    }
}

/// The replayable lines: the isolation level each session sets, then every step in
/// order, prefixed by its session, as a reader types them into two psql / mariadb /
/// sqlite3 sessions.
pub fn script_lines(dialect: &str, isolation: &str, ops: &[Op], f: &Failing) -> Vec<String> {
    let mut out = vec![format!("-- {STATE_WORDS}: user {} (rows as seeded)", f.user)];
    let level = isolation.replace('_', " ").to_uppercase();
    for (i, o) in ops.iter().enumerate() {
        let set = match dialect {
            "postgres" => format!("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL {level};"),
            "mysql" => format!("SET SESSION TRANSACTION ISOLATION LEVEL {level};"),
            _ => "-- (SQLite: one isolation level)".to_string(),
        };
        out.push(format!("-- session {}: {}", i + 1, o.name()));
        out.push(format!("[{}] {set}", i + 1));
    }
    for s in &f.steps {
        let saw = s.saw.as_deref().unwrap_or("(no reply)");
        let waited = if s.blocked { ", waited on a lock" } else { "" };
        out.push(format!("[{}] {};  -- saw: {saw}{waited}", s.session, s.sent));
    }
    out
}

/// What a SAFE pair's schedules survived: the design's retries, its own fault.
pub fn safe_detail(retried: u64, faulted: u64) -> String {
    let mut parts = Vec::new();
    if retried > 0 {
        parts.push(format!("kept by retries in {retried}"));
    }
    if faulted > 0 {
        parts.push(format!("the design's crash fired in {faulted}"));
    }
    parts.join("; ")
}

/// The explored cells in Markdown: per strategy x backend x level the pairs' table, then
/// each UNSAFE pair's shortest failing schedule as its two-column script.
pub fn markdown(explored: &[Explored]) -> String {
    let mut out = format!("# counterlab explore\n\nState of each schedule: {STATE_WORDS}.\n");
    for e in explored {
        let _ = writeln!(out, "\n## {} on {} at {}\n", e.strategy, e.backend, e.isolation);
        if let Some(why) = &e.skipped {
            let _ = writeln!(out, "Not explored: {why}");
            continue;
        }
        let bound = e
            .preemption_bound
            .map_or("any number of preemptions".to_string(), |b| format!("at most {b} preemption(s)"));
        let _ = writeln!(out, "Guarantee {}; {bound}; budget {} schedules per pair.\n", e.guarantee, e.budget);
        out.push_str("| pair | result | schedules | seconds | detail |\n|---|---|---:|---:|---|\n");
        for p in &e.pairs {
            let detail = match &p.result {
                PairResult::Safe { retried, faulted, .. } => safe_detail(*retried, *faulted),
                PairResult::Unsafe { failing, first, .. } => format!("{failing} drift: {}", first.anomalies.join(", ")),
                PairResult::NotExplored { left, .. } => left.clone(),
                PairResult::Error { why, .. } => why.replace('|', "/"),
            };
            let names: Vec<&str> = p.ops.iter().map(|o| o.name()).collect();
            let (label, n) = (p.result.label(), p.result.explored());
            let _ = writeln!(out, "| {} | {label} | {n} | {:.1} | {detail} |", names.join(" ‖ "), p.seconds);
        }
        for p in &e.pairs {
            if let PairResult::Unsafe { first, .. } = &p.result {
                let names: Vec<&str> = p.ops.iter().map(|o| o.name()).collect();
                let _ = writeln!(
                    out,
                    "\n### {}: the shortest failing schedule\n\n```\n{}```",
                    names.join(" ‖ "),
                    columns(&p.ops, first)
                );
            }
        }
    }
    out
}
