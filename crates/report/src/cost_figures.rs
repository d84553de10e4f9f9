//! The cost figures the decision view and `compare` weigh designs by: a closed list of
//! per-op (or per-user) figures drawn from `StrategyReport.cost`, each with its idle
//! share where the source is server-wide and had an idle baseline, and the pick of the
//! two or three that differ most between the rows compared (docs/report.md, "cost").

use crate::cost::{CostReport, Counters, Scope, fig};

/// The least spread, `(max - min) / max` of the rows' figures net of their idle share,
/// for a figure to count as differing between designs (0.2: the largest is at least
/// 1.25 times the smallest).
pub const MIN_SPREAD: f64 = 0.2;

/// How many differing figures the decision view shows.
pub const MAX_FIGURES: usize = 3;

/// One figure: what it counts, from which source, and below what size it is not weighed.
#[derive(Clone, Copy, Debug)]
pub struct Figure {
    /// `<source>.<what>`: report.json's name for it (`pg_wal.lsn_bytes`).
    pub key: &'static str,
    /// Its column heading (`WAL B/op`).
    pub label: &'static str,
    /// The `CostSource.name` it is read from.
    pub source: &'static str,
    pub scope: Scope,
    /// Below this on every row the figure is not weighed (noise-sized, in its unit).
    pub floor: f64,
    count: fn(&Counters) -> i64,
    /// A gauge read after settle (`after`), divided by seeded users, not ops.
    gauge: bool,
}

/// A row's value of a figure, and its idle share (server-wide figures with a baseline).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Value {
    pub value: f64,
    /// The idle baseline scaled to the row's interval, per op (None: no baseline).
    pub idle: Option<f64>,
}

impl Value {
    /// The figure less its idle share, not below 0: what the design did, as near as the
    /// baseline tells (the figure itself without a baseline).
    pub fn net(&self) -> f64 {
        (self.value - self.idle.unwrap_or(0.0)).max(0.0)
    }

    /// `420`, or `420 (idle 3.10)` with a baseline.
    pub fn text(&self) -> String {
        match self.idle {
            Some(i) => format!("{} (idle {})", fig(Some(self.value)), fig(Some(i))),
            None => fig(Some(self.value)),
        }
    }
}

impl Figure {
    /// The heading with `*` after a server-wide figure's.
    pub fn heading(&self) -> String {
        match self.scope {
            Scope::Server => format!("{}*", self.label),
            Scope::Namespace => self.label.to_string(),
        }
    }

    /// This figure of one row's cost (None: its source was not read, or nothing to
    /// divide by).
    pub fn of(&self, c: &CostReport) -> Option<Value> {
        let s = c.source(self.source)?;
        if self.gauge {
            return (c.users > 0).then(|| Value { value: (self.count)(&s.after) as f64 / c.users as f64, idle: None });
        }
        let value = (self.count)(&s.delta) as f64 / c.ops.max(1) as f64;
        (c.ops > 0).then(|| Value { value, idle: c.idle_per_op(self.source, self.count) })
    }
}

fn sum(c: &Counters, names: &[&str]) -> i64 {
    names.iter().map(|n| c.get(n)).sum()
}

/// MariaDB/MySQL rows: `Innodb_rows_<kind>` where the server has them, else `Handler_*`.
fn rows(c: &Counters, innodb: &str, handler: &str) -> i64 {
    if c.0.contains_key(innodb) { c.get(innodb) } else { c.get(handler) }
}

fn figure(key: &'static str, label: &'static str, floor: f64, count: fn(&Counters) -> i64) -> Figure {
    let source = key.split_once('.').map_or(key, |(s, _)| s);
    let scope = match source {
        "pg_wal" | "mariadb_status" | "redis_commands" => Scope::Server,
        _ => Scope::Namespace,
    };
    Figure { key, label, source, scope, floor, count, gauge: false }
}

/// Every figure weighed, in the order a tie keeps.
pub fn figures() -> Vec<Figure> {
    let memory = Figure { gauge: true, ..figure("redis_memory.bytes_per_user", "B/user", 16.0, |c| c.get("bytes")) };
    vec![
        figure("pg_wal.lsn_bytes", "WAL B/op", 16.0, |c| c.get("lsn_bytes")),
        figure("pg_wal.wal_fpi", "full-page images/op", 0.01, |c| c.get("wal_fpi")),
        figure("pg_tables.n_tup_upd", "updated/op", 0.05, |c| c.get("n_tup_upd")),
        figure("pg_tables.n_tup_ins", "inserted/op", 0.05, |c| c.get("n_tup_ins")),
        figure("pg_tables.n_tup_del", "deleted/op", 0.05, |c| c.get("n_tup_del")),
        figure("pg_tables.n_dead_tup", "dead tuples/op", 0.05, |c| c.get("n_dead_tup")),
        figure("pg_tables.blks_hit", "blocks hit/op", 0.5, |c| sum(c, &["heap_blks_hit", "idx_blks_hit"])),
        figure("pg_tables.blks_read", "blocks read/op", 0.05, |c| sum(c, &["heap_blks_read", "idx_blks_read"])),
        figure("pg_lock_waits.wait_ms", "lock wait ms/op", 0.5, |c| c.get("waiting") * c.get("interval_ms")),
        figure("mariadb_status.rows_written", "rows written/op", 0.05, |c| {
            rows(c, "Innodb_rows_inserted", "Handler_write")
        }),
        figure("mariadb_status.rows_updated", "rows updated/op", 0.05, |c| {
            rows(c, "Innodb_rows_updated", "Handler_update")
        }),
        figure("mariadb_status.rows_deleted", "rows deleted/op", 0.05, |c| {
            rows(c, "Innodb_rows_deleted", "Handler_delete")
        }),
        figure("mariadb_status.row_lock_waits", "row lock waits/op", 0.001, |c| c.get("Innodb_row_lock_waits")),
        figure("mariadb_status.redo_bytes", "redo B/op", 16.0, |c| c.get("Innodb_os_log_written")),
        figure("redis_commands.calls", "commands/op", 0.05, |c| c.sum_ending(".calls")),
        figure("redis_commands.usec", "µs/op", 0.5, |c| c.sum_ending(".usec")),
        figure("rabbitmq.published", "published/op", 0.05, |c| c.get("published")),
        figure("rabbitmq.redelivered", "redelivered/op", 0.001, |c| c.get("redelivered")),
        memory,
    ]
}

/// The figures that differ most between `costs` (one per row compared; None: a row
/// without a cost), most first: those read on at least two rows, at or above their
/// floor on one, whose spread net of idle shares is at least `MIN_SPREAD`; at most
/// `MAX_FIGURES`.
pub fn differing(costs: &[Option<&CostReport>]) -> Vec<Figure> {
    let mut scored: Vec<(f64, Figure)> = Vec::new();
    for f in figures() {
        let nets: Vec<f64> = costs.iter().flatten().filter_map(|c| f.of(c)).map(|v| v.net()).collect();
        let (lo, hi) = nets.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
        if nets.len() < 2 || hi < f.floor {
            continue;
        }
        let spread = (hi - lo) / hi;
        if spread >= MIN_SPREAD {
            scored.push((spread, f));
        }
    }
    // Stable: equal spreads keep the list's order.
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().take(MAX_FIGURES).map(|(_, f)| f).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{Baseline, CostSource};

    fn cost(ops: u64, wal: i64, upd: i64, idle_wal: Option<i64>) -> CostReport {
        let counters = |kv: &[(&str, i64)]| kv.iter().map(|(k, v)| (k.to_string(), *v)).collect::<Counters>();
        let baseline = idle_wal.map(|w| Baseline { seconds: 1.0, delta: counters(&[("lsn_bytes", w)]) });
        CostReport {
            ops,
            users: 10,
            interval_s: 4.0,
            sources: vec![
                CostSource {
                    name: "pg_wal".into(),
                    scope: Scope::Server,
                    delta: counters(&[("lsn_bytes", wal)]),
                    baseline,
                    ..Default::default()
                },
                CostSource {
                    name: "pg_tables".into(),
                    delta: counters(&[("n_tup_upd", upd), ("n_tup_ins", 100)]),
                    ..Default::default()
                },
            ],
        }
    }

    #[test]
    fn the_figures_that_differ_most_come_first_and_equal_ones_are_left_out() {
        let (a, b) = (cost(1000, 300_000, 1000, None), cost(1000, 100_000, 2500, None));
        let picked: Vec<&str> = differing(&[Some(&a), None, Some(&b)]).iter().map(|f| f.key).collect();
        // updated: 1.0 vs 2.5 (spread 0.6); WAL 300 vs 100 (0.67); inserted equal: left out.
        assert_eq!(picked, ["pg_wal.lsn_bytes", "pg_tables.n_tup_upd"]);
        assert!(differing(&[Some(&a)]).is_empty(), "one row: nothing to differ from");
        assert!(differing(&[Some(&a), Some(&a.clone())]).is_empty());
    }

    #[test]
    fn an_idle_baseline_is_scaled_to_the_interval_and_weighed_net() {
        // 4 s interval, 1 s idle of 50 000 B: 200 000 B idle over the load, 200 B/op.
        let (a, b) = (cost(1000, 300_000, 1000, Some(50_000)), cost(1000, 250_000, 1000, Some(37_500)));
        let wal = figures().into_iter().find(|f| f.key == "pg_wal.lsn_bytes").unwrap();
        let v = wal.of(&a).unwrap();
        assert_eq!((v.value, v.idle, v.net()), (300.0, Some(200.0), 100.0));
        assert_eq!(v.text(), "300 (idle 200)");
        // Gross 300 vs 250 is 17% apart; net 100 vs 100 is not apart at all.
        assert!(differing(&[Some(&a), Some(&b)]).is_empty());
        assert_eq!(wal.heading(), "WAL B/op*");
    }
}
