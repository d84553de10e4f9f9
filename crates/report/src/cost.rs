//! What a cell's load cost the servers, from their own statistics read before the load and
//! after settle (`StrategyReport.cost`): one `Counters` type (a reading by the servers' own
//! counter names) with its `delta`, the sources read and their scope, and the compact
//! per-op table the Markdown and HTML reports show (docs/report.md, "cost").

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Report, StrategyReport};

/// One reading of a source's counters, by the server's own names (`n_tup_upd`, `wal_bytes`,
/// `Handler_update`, `evalsha.calls`). A reading before, one after, and their delta are
/// all this type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Counters(pub BTreeMap<String, i64>);

impl Counters {
    /// `self - before`, counter by counter: a counter missing before counts from 0, one
    /// missing now is left out (a Redis command first called during the load has no
    /// line before it).
    pub fn delta(&self, before: &Counters) -> Counters {
        Counters(self.0.iter().map(|(k, v)| (k.clone(), v - before.get(k))).collect())
    }

    /// A counter's value (0 when absent).
    pub fn get(&self, name: &str) -> i64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// The sum of the counters whose name ends with `suffix` (`.calls`: every command's).
    pub fn sum_ending(&self, suffix: &str) -> i64 {
        self.0.iter().filter(|(k, _)| k.ends_with(suffix)).map(|(_, v)| v).sum()
    }
}

impl<K: Into<String>> FromIterator<(K, i64)> for Counters {
    fn from_iter<I: IntoIterator<Item = (K, i64)>>(iter: I) -> Counters {
        Counters(iter.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
}

/// Whose work a source's figures cover.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The cell's namespace alone (its schema's tables, its Redis keys).
    #[default]
    Namespace,
    /// The whole server: other sessions' work in the same interval is included.
    Server,
}

/// One source, read before the load and after settle.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CostSource {
    /// `pg_tables`, `pg_wal`, `mariadb_status`, `redis_commands` or `redis_memory`.
    pub name: String,
    pub scope: Scope,
    /// What was read, and how the reading was made exact.
    pub source: String,
    /// MariaDB/MySQL: which counters the row figures come from (`Innodb_rows_*` where the
    /// server has them, else `Handler_*`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows_from: Option<String>,
    /// After minus before (empty for a gauge).
    pub delta: Counters,
    /// The reading after settle, for a gauge (`redis_memory`: bytes, keys); empty otherwise.
    #[serde(skip_serializing_if = "is_empty")]
    pub after: Counters,
    /// Why a reading failed (then `delta` is empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A server-wide source's idle interval: the same counters over a short interval with
    /// none of the cell's work, read just before the load (None: not measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    /// Why a source gives no figures on this server, when that is the server's
    /// configuration rather than a failed reading (`pg_statements`: the extension is not
    /// loaded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub absent: Option<String>,
    /// `pg_statements`: each statement's text by its queryid (the counters are
    /// `<queryid>.<counter>`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub texts: BTreeMap<String, String>,
}

/// What a server-wide source counted over an idle interval (the cell's pool warm and
/// idle, its strategy not started): other sessions' work and the server's own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Baseline {
    /// The idle interval's length.
    pub seconds: f64,
    /// After minus before, over the idle interval.
    pub delta: Counters,
}

fn is_empty(c: &Counters) -> bool {
    c.0.is_empty()
}

/// A row's server-side cost: its sources' deltas and what they divide by.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CostReport {
    /// Ops the per-op figures divide by: every op the load issued, warm-up included (the
    /// readings bracket the whole load and settle).
    pub ops: u64,
    /// Seeded users (memory per user divides by them).
    pub users: u64,
    /// Seconds between the reading before the load and the one after settle: what an
    /// idle baseline is scaled to (0 in a report from before it was recorded).
    pub interval_s: f64,
    pub sources: Vec<CostSource>,
}

impl CostReport {
    pub fn source(&self, name: &str) -> Option<&CostSource> {
        self.sources.iter().find(|s| s.name == name && s.error.is_none())
    }

    /// `counter`'s delta in `source` per op (None: no such reading, or no ops).
    pub fn per_op(&self, source: &str, counter: &str) -> Option<f64> {
        let s = self.source(source)?;
        (self.ops > 0).then(|| s.delta.get(counter) as f64 / self.ops as f64)
    }

    /// What `count` of `source`'s idle baseline comes to per op once scaled from the idle
    /// interval to this cost's interval (None: no baseline, or nothing to scale to).
    pub fn idle_per_op(&self, source: &str, count: impl Fn(&Counters) -> i64) -> Option<f64> {
        let b = self.source(source)?.baseline.as_ref()?;
        let ok = b.seconds > 0.0 && self.interval_s > 0.0 && self.ops > 0;
        ok.then(|| count(&b.delta) as f64 * (self.interval_s / b.seconds) / self.ops as f64)
    }
}

/// One compact cost table: the rows of one kind of server.
#[derive(Clone, Debug, PartialEq)]
pub struct CostTable {
    pub title: &'static str,
    pub head: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
    /// Which figures are server-wide, and where they come from.
    pub note: String,
}

/// A figure per op in two or three significant digits; `-` when there is none.
pub(crate) fn fig(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

fn total(c: &CostReport, source: &str, counter: &str) -> String {
    c.source(source).map_or("-".into(), |s| s.delta.get(counter).to_string())
}

/// The share `part / whole` in percent (`-` when the whole is 0).
fn share(c: &CostReport, source: &str, part: &str, whole: &str) -> String {
    let Some(s) = c.source(source) else { return "-".into() };
    match s.delta.get(whole) {
        0 => "-".into(),
        w => format!("{:.0}%", 100.0 * s.delta.get(part) as f64 / w as f64),
    }
}

fn per_op_sum(c: &CostReport, source: &str, counters: &[&str]) -> Option<f64> {
    counters.iter().map(|k| c.per_op(source, k)).sum()
}

/// A server-wide counter per op with its idle share beside it: `420 (idle 3.10)`.
fn with_idle(c: &CostReport, source: &str, counter: &str) -> String {
    match c.idle_per_op(source, |d| d.get(counter)) {
        Some(i) => format!("{} (idle {})", fig(c.per_op(source, counter)), fig(Some(i))),
        None => fig(c.per_op(source, counter)),
    }
}

/// Lock wait per op from the samples: waiting backends summed over the samples, times the
/// sampling interval, over ops (an estimate: each sample stands for one interval).
fn lock_wait_ms(c: &CostReport) -> Option<f64> {
    let s = c.source("pg_lock_waits")?;
    (c.ops > 0).then(|| (s.delta.get("waiting") * s.delta.get("interval_ms")) as f64 / c.ops as f64)
}

fn pg_row(c: &CostReport) -> Vec<String> {
    vec![
        with_idle(c, "pg_wal", "lsn_bytes"),
        with_idle(c, "pg_wal", "wal_records"),
        with_idle(c, "pg_wal", "wal_fpi"),
        fig(c.per_op("pg_tables", "n_tup_ins")),
        fig(c.per_op("pg_tables", "n_tup_upd")),
        share(c, "pg_tables", "n_tup_hot_upd", "n_tup_upd"),
        fig(c.per_op("pg_tables", "n_tup_del")),
        fig(c.per_op("pg_tables", "n_dead_tup")),
        fig(per_op_sum(c, "pg_tables", &["heap_blks_read", "idx_blks_read"])),
        fig(per_op_sum(c, "pg_tables", &["heap_blks_hit", "idx_blks_hit"])),
        fig(lock_wait_ms(c)),
    ]
}

fn mariadb_row(c: &CostReport) -> Vec<String> {
    let idle_total = |counter: &str| match c.idle_per_op("mariadb_status", |d| d.get(counter)) {
        Some(i) => format!("{} (idle {})", total(c, "mariadb_status", counter), fig(Some(i * c.ops as f64))),
        None => total(c, "mariadb_status", counter),
    };
    let idle_rows = |handler: &str, innodb: &str| {
        let innodb_has = c.source("mariadb_status").is_some_and(|s| s.delta.0.contains_key(innodb));
        with_idle(c, "mariadb_status", if innodb_has { innodb } else { handler })
    };
    vec![
        idle_rows("Handler_write", "Innodb_rows_inserted"),
        idle_rows("Handler_update", "Innodb_rows_updated"),
        idle_rows("Handler_delete", "Innodb_rows_deleted"),
        idle_total("Innodb_row_lock_waits"),
        idle_total("Innodb_row_lock_time"),
        with_idle(c, "mariadb_status", "Innodb_os_log_written"),
    ]
}

fn redis_row(c: &CostReport) -> Vec<String> {
    let s = c.source("redis_commands");
    let per_op = |n: i64| (c.ops > 0).then(|| n as f64 / c.ops as f64);
    let top = s.and_then(|s| {
        let (k, n) = s.delta.0.iter().filter(|(k, _)| k.ends_with(".calls")).max_by_key(|(_, n)| **n)?;
        let cmd = k.trim_end_matches(".calls");
        let per_call = s.delta.get(&format!("{cmd}.usec")) as f64 / (*n).max(1) as f64;
        Some(format!("{cmd} {}/op, {per_call:.1} µs/call", fig(per_op(*n))))
    });
    let failed = s.map(|s| s.delta.sum_ending(".failed_calls") + s.delta.sum_ending(".rejected_calls"));
    let memory = c.source("redis_memory").filter(|_| c.users > 0);
    let idle = |suffix: &'static str, v: Option<f64>| match c.idle_per_op("redis_commands", |d| d.sum_ending(suffix)) {
        Some(i) => format!("{} (idle {})", fig(v), fig(Some(i))),
        None => fig(v),
    };
    vec![
        idle(".calls", s.and_then(|s| per_op(s.delta.sum_ending(".calls")))),
        idle(".usec", s.and_then(|s| per_op(s.delta.sum_ending(".usec")))),
        top.unwrap_or_else(|| "-".into()),
        failed.map_or("-".into(), |n| n.to_string()),
        fig(memory.map(|m| m.after.get("bytes") as f64 / c.users as f64)),
        memory.map_or("-".into(), |m| m.after.get("keys").to_string()),
    ]
}

fn rabbitmq_row(c: &CostReport) -> Vec<String> {
    ["published", "deliveries", "redelivered", "acked"].iter().map(|k| fig(c.per_op("rabbitmq", k))).collect()
}

/// The tables: one per kind of server some row was measured on, a row per strategy run.
pub fn cost_tables(r: &Report) -> Vec<CostTable> {
    type RowFn = fn(&CostReport) -> Vec<String>;
    let kinds: [(&'static str, &'static str, Vec<&'static str>, RowFn, &'static str); 4] = [
        (
            "PostgreSQL, per op",
            "pg_",
            vec![
                "WAL B*",
                "WAL records*",
                "full-page images*",
                "inserted",
                "updated",
                "HOT",
                "deleted",
                "dead tuples",
                "blocks read",
                "blocks hit",
                "lock wait ms",
            ],
            pg_row,
            "* server-wide, other sessions' WAL in the same interval included: WAL B is the distance between the WAL insert positions read before the load and after settle; records and full-page images are pg_stat_wal's. (idle N): what an idle interval measured just before the load came to per op, scaled to the load's interval. The rest are the namespace's own: its tables (pg_stat_user_tables, pg_statio_user_tables; HOT: share of updates that were heap-only) and its backends' lock waits (pg_stat_activity sampled every 50 ms: waiting backends x 50 ms, per op, an estimate).",
        ),
        (
            "MariaDB/MySQL, server-wide",
            "mariadb_status",
            vec![
                "rows written/op",
                "rows updated/op",
                "rows deleted/op",
                "row lock waits",
                "lock wait ms",
                "redo log B/op",
            ],
            mariadb_row,
            "Every figure is server-wide (SHOW GLOBAL STATUS): other sessions' work in the same interval is included; (idle N) is what an idle interval measured just before the load came to, scaled to the load's interval (per op, or a total for the lock waits). Rows come from `rows_from` (Handler_* on MariaDB, which has no Innodb_rows_*); row lock waits and their time are totals over the load.",
        ),
        (
            "Redis",
            "redis_",
            vec!["commands/op*", "µs/op*", "most called*", "failed calls*", "memory B/user", "keys"],
            redis_row,
            "* server-wide (INFO commandstats: other clients' commands are included; (idle N): an idle interval's share, scaled to the load's interval); memory and keys are the namespace's own (MEMORY USAGE of its keys after settle).",
        ),
        (
            "RabbitMQ, per op",
            "rabbitmq",
            vec!["published", "delivered", "redelivered", "acked"],
            rabbitmq_row,
            "The cell's own queue, from the design's own counts (publishes the broker confirmed, deliveries and the redelivered flag the consumer saw, acks), over the load and settle; not the broker's management API.",
        ),
    ];
    let mut out = Vec::new();
    for (title, key, cols, row, note) in kinds {
        let rows: Vec<Vec<String>> = r
            .strategies
            .iter()
            .filter_map(|s| Some((s, s.cost.as_ref().filter(|c| c.sources.iter().any(|x| x.name.starts_with(key)))?)))
            .map(|(s, c)| [row_name(s), vec![c.ops.to_string()], row(c)].concat())
            .collect();
        if rows.is_empty() {
            continue;
        }
        let head = [vec!["strategy", "level", "ops"], cols].concat();
        out.push(CostTable { title, head, rows, note: note.to_string() });
    }
    out.extend(statements_table(r));
    out
}

/// How many statements per row the statements table shows (those that took the most time).
const TOP_STATEMENTS: usize = 5;

/// `pg_statements` as a table: per row, its `TOP_STATEMENTS` statements by execution time,
/// each's calls per op and per call its µs, rows, blocks hit and WAL bytes (None: no row
/// had any).
fn statements_table(r: &Report) -> Option<CostTable> {
    let mut rows = Vec::new();
    for s in &r.strategies {
        let Some((c, x)) = s.cost.as_ref().and_then(|c| Some((c, c.source("pg_statements")?))) else { continue };
        let mut ids: Vec<&str> = x.delta.0.keys().filter_map(|k| k.strip_suffix(".calls")).collect();
        ids.sort_by_key(|id| std::cmp::Reverse(x.delta.get(&format!("{id}.exec_us"))));
        for id in ids.into_iter().take(TOP_STATEMENTS) {
            let v = |k: &str| x.delta.get(&format!("{id}.{k}")) as f64;
            let per_call = |k: &str| fig(Some(v(k) / v("calls").max(1.0)));
            let text = x.texts.get(id).cloned().unwrap_or_else(|| id.to_string());
            let calls = fig((c.ops > 0).then(|| v("calls") / c.ops as f64));
            let figures = ["exec_us", "rows", "blks_hit", "wal_bytes"].map(per_call);
            rows.push([row_name(s), vec![text, calls], figures.to_vec()].concat());
        }
    }
    (!rows.is_empty()).then(|| CostTable {
        title: "PostgreSQL statements (pg_stat_statements)",
        head: vec![
            "strategy",
            "level",
            "statement",
            "calls/op",
            "µs/call",
            "rows/call",
            "blocks hit/call",
            "WAL B/call",
        ],
        rows,
        note: format!(
            "The namespace's own statements (its identity's, in pg_stat_statements), per row the {TOP_STATEMENTS} \
             that took the most time over the load and settle."
        ),
    })
}

fn row_name(s: &StrategyReport) -> Vec<String> {
    vec![s.display_name(), s.isolation.to_string()]
}

/// The sources a server does not offer, in words (`<source>: <why>`), once each.
pub fn cost_absent(r: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for x in r.strategies.iter().flat_map(|s| s.cost.iter().flat_map(|c| &c.sources)) {
        if let Some(why) = &x.absent {
            let line = format!("{}: {why}", x.name);
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    out
}

/// The readings that failed, in words (`<row>: <source>: <why>`).
pub fn cost_errors(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for s in &r.strategies {
        for x in s.cost.iter().flat_map(|c| &c.sources) {
            if let Some(e) = &x.error {
                out.push(format!("{}: {}: {e}", s.label(), x.name));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delta_subtracts_counter_by_counter_and_a_new_counter_counts_from_zero() {
        let before: Counters = [("a", 10), ("b", 5)].into_iter().collect();
        let after: Counters = [("a", 25), ("b", 5), ("c", 3)].into_iter().collect();
        let d = after.delta(&before);
        assert_eq!(d, [("a", 15), ("b", 0), ("c", 3)].into_iter().collect());
        assert_eq!(d.get("missing"), 0);
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, r#"{"a":15,"b":0,"c":3}"#);
    }

    #[test]
    fn per_op_figures_divide_by_ops_and_a_failed_reading_shows_none() {
        let c = CostReport {
            ops: 200,
            users: 10,
            interval_s: 0.0,
            sources: vec![
                CostSource {
                    name: "pg_tables".into(),
                    delta: [("n_tup_upd", 300), ("n_tup_hot_upd", 150)].into_iter().collect(),
                    ..Default::default()
                },
                CostSource {
                    name: "pg_wal".into(),
                    scope: Scope::Server,
                    error: Some("gone".into()),
                    ..Default::default()
                },
            ],
        };
        assert_eq!(c.per_op("pg_tables", "n_tup_upd"), Some(1.5));
        assert_eq!(c.per_op("pg_wal", "wal_bytes"), None);
        let row = pg_row(&c);
        assert_eq!(row[0], "-");
        assert_eq!(row[4], "1.50");
        assert_eq!(row[5], "50%");
    }
}
