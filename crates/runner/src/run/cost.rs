//! `StrategyReport.cost`: the servers' own statistics read before a cell's load and after
//! its settle, one source (`Probe`) at a time, kept as deltas per source with the scope
//! they cover (docs/report.md, "cost").

use counterlab_report::{CostReport, CostSource, Counters, Scope};
use counterlab_sim::LoadResult;
use counterlab_strategies::{Db, Namespace, RedisSpace, StatsOf};

/// One source of figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    PgTables,
    PgWal,
    MysqlStatus,
    RedisCommands,
    RedisMemory,
}

impl Probe {
    fn name(self) -> &'static str {
        match self {
            Probe::PgTables => "pg_tables",
            Probe::PgWal => "pg_wal",
            Probe::MysqlStatus => "mariadb_status",
            Probe::RedisCommands => "redis_commands",
            Probe::RedisMemory => "redis_memory",
        }
    }

    fn scope(self) -> Scope {
        match self {
            Probe::PgTables | Probe::RedisMemory => Scope::Namespace,
            Probe::PgWal | Probe::MysqlStatus | Probe::RedisCommands => Scope::Server,
        }
    }

    /// What is read, in words (`ns`: the namespace).
    fn source(self, ns: &str) -> String {
        match self {
            Probe::PgTables => format!(
                "pg_stat_user_tables and pg_statio_user_tables of schema {ns}, summed over its tables; \
                 pending statistics flushed first (pg_stat_force_next_flush() on every connection of the pool)"
            ),
            Probe::PgWal => "pg_stat_wal (wal_bytes, wal_records, wal_fpi) and pg_current_wal_insert_lsn() as \
                             lsn_bytes: the whole server, other sessions' WAL included"
                .into(),
            Probe::MysqlStatus => "SHOW GLOBAL STATUS: the whole server, other sessions included (the reading \
                                   itself adds about 13 Handler_read_rnd_next)"
                .into(),
            Probe::RedisCommands => "INFO commandstats of every primary: the whole server, other clients \
                                     included (the reading adds one info call)"
                .into(),
            Probe::RedisMemory => format!("SCAN and MEMORY USAGE of the keys cl:{ns}:* after settle (bytes, keys)"),
        }
    }

    async fn read(self, ns: &Namespace, space: Option<&RedisSpace>) -> Result<Counters, String> {
        let of = match self {
            Probe::PgTables => StatsOf::PgTables,
            Probe::PgWal => StatsOf::PgWal,
            Probe::MysqlStatus => StatsOf::MysqlStatus,
            Probe::RedisCommands | Probe::RedisMemory => {
                let space = space.ok_or("no Redis key space")?;
                return match self {
                    Probe::RedisCommands => space.command_stats().await.map(|c| c.into_iter().collect()),
                    _ => space
                        .memory_use()
                        .await
                        .map(|m| [("bytes", m.bytes as i64), ("keys", m.keys as i64)].into_iter().collect()),
                }
                .map_err(|e| e.to_string());
            }
        };
        ns.stats(of).await.map(|c| c.into_iter().collect()).map_err(|e| e.to_string())
    }
}

/// The readings of a cell's sources at one moment.
pub(super) struct Readings(Vec<(Probe, Result<Counters, String>)>);

/// The sources of a cell, in the order they are read: the SQL server's, then Redis's
/// command statistics and, after settle only, the namespace's Redis memory (a gauge; read
/// after the command statistics, so its SCAN and MEMORY USAGE calls stay out of them).
fn probes(ns: &Namespace, space: Option<&RedisSpace>, before: bool) -> Vec<Probe> {
    let mut p = match ns.db() {
        Db::Pg(_) => vec![Probe::PgTables, Probe::PgWal],
        Db::My(_) => vec![Probe::MysqlStatus],
        Db::Lite(_) => Vec::new(),
    };
    if space.is_some() {
        p.push(Probe::RedisCommands);
        if !before {
            p.push(Probe::RedisMemory);
        }
    }
    p
}

/// The readings before the load (after the seed).
pub(super) async fn before(ns: &Namespace, space: Option<&RedisSpace>) -> Readings {
    read(ns, space, true).await
}

/// Reads every source of the cell (PostgreSQL's pending statistics flushed first:
/// `Namespace::flush_stats`). A source that cannot be read is kept with its error.
async fn read(ns: &Namespace, space: Option<&RedisSpace>, before: bool) -> Readings {
    let flushed = ns.flush_stats().await.map_err(|e| format!("flushing the statistics: {e}"));
    let mut out = Vec::new();
    for p in probes(ns, space, before) {
        let r = match (&flushed, p) {
            (Err(e), Probe::PgTables | Probe::PgWal) => Err(e.clone()),
            _ => p.read(ns, space).await,
        };
        out.push((p, r));
    }
    Readings(out)
}

/// The cost of the load, read after settle: each source's `after - before` (None when
/// nothing was read, as on SQLite alone). Per op divides by every op issued, warm-up
/// included.
pub(super) async fn after(
    ns: &Namespace,
    space: Option<&RedisSpace>,
    before: Readings,
    load: &LoadResult,
    users: u64,
) -> Option<CostReport> {
    let after = read(ns, space, false).await;
    if after.0.is_empty() {
        return None;
    }
    let ns = ns.name();
    let sources = after
        .0
        .into_iter()
        .map(|(p, now)| {
            let then = before.0.iter().find(|(q, _)| *q == p).map(|(_, r)| r.clone());
            let then = then.unwrap_or_else(|| Err("not read before the load".into()));
            source(p, ns, then, now)
        })
        .collect();
    let ops = load.stages.iter().map(|s| s.issued()).sum();
    Some(CostReport { ops, users, sources })
}

fn source(p: Probe, ns: &str, before: Result<Counters, String>, after: Result<Counters, String>) -> CostSource {
    let mut s = CostSource { name: p.name().into(), scope: p.scope(), source: p.source(ns), ..Default::default() };
    match (p, before, after) {
        (Probe::RedisMemory, _, Ok(a)) => s.after = a,
        (_, Ok(b), Ok(a)) => {
            s.delta = a.delta(&b);
            if p == Probe::MysqlStatus {
                s.rows_from = Some(rows_from(&a));
            }
        }
        (_, _, Err(e)) => s.error = Some(format!("after settle: {e}")),
        (_, Err(e), _) => s.error = Some(format!("before the load: {e}")),
    }
    s
}

/// Where the MariaDB/MySQL row figures come from.
fn rows_from(status: &Counters) -> String {
    match status.0.contains_key("Innodb_rows_updated") {
        true => "Innodb_rows_* (InnoDB's rows, server-wide)".into(),
        false => "Handler_* (MariaDB 10.11 has no Innodb_rows_*: every engine's row operations, server-wide, \
                  temporary tables excluded)"
            .into(),
    }
}

/// Logs the sources that could not be read (`<label>: cost: <source> not read: <why>`).
pub(super) fn log_errors(cost: Option<&CostReport>, label: &str, log: &mut dyn FnMut(&str)) {
    for s in cost.iter().flat_map(|c| &c.sources) {
        if let Some(e) = &s.error {
            log(&format!("{label}: cost: {} not read: {e}", s.name));
        }
    }
}
