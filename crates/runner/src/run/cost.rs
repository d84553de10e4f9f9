//! `StrategyReport.cost`: the servers' own statistics read before a cell's load and after
//! its settle, one source (`Probe`) at a time, kept as deltas per source with the scope
//! they cover; the server-wide ones beside an idle interval's (`idle`), and PostgreSQL's
//! lock waits sampled through the load (`locks.rs`) (docs/report.md, "cost").

use std::time::{Duration, Instant};

use counterlab_report::{Baseline, CostReport, CostSource, Counters, Scope};
use counterlab_sim::LoadResult;
use counterlab_strategies::{Db, Namespace, RedisSpace, StatsOf};

use super::cost_locks::{LockSampling, Statements};

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
            Probe::RedisMemory => format!(
                "SCAN and MEMORY USAGE of the keys {}* after settle (bytes, keys)",
                counterlab_strategies::redis_prefix(ns)
            ),
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

/// What the reading before the load holds: the readings, when they were made, the idle
/// interval's deltas of the server-wide sources, and the lock-wait sampling under way.
pub(super) struct Before {
    readings: Readings,
    at: Instant,
    idle: Idle,
    locks: Option<LockSampling>,
    statements: Statements,
}

/// The server-wide sources' deltas over an idle interval (empty: none measured).
#[derive(Clone, Default)]
pub(super) struct Idle(Vec<(Probe, Result<Baseline, String>)>);

/// The server-wide sources over `len` with none of the cell's work (its pool warm and
/// idle, its strategy not started): read, wait `len`, read again. Nothing when `len` is
/// zero or the cell has no server-wide source (SQLite alone).
pub(super) async fn idle(ns: &Namespace, space: Option<&RedisSpace>, len: Duration) -> Idle {
    let server = |p: &Probe| p.scope() == Scope::Server;
    if len.is_zero() || !probes(ns, space, true).iter().any(server) {
        return Idle::default();
    }
    let first = read(ns, space, true).await;
    let started = Instant::now();
    tokio::time::sleep(len).await;
    let second = read(ns, space, true).await;
    let seconds = started.elapsed().as_secs_f64();
    let pairs = first.0.into_iter().zip(second.0).filter(|((p, _), _)| server(p));
    Idle(
        pairs
            .map(|((p, a), (_, b))| match (a, b) {
                (Ok(a), Ok(b)) => (p, Ok(Baseline { seconds, delta: b.delta(&a) })),
                (Err(e), _) | (_, Err(e)) => (p, Err(e)),
            })
            .collect(),
    )
}

/// The idle readings a run took, by run and servers: the cells of a run share the first
/// one's (the same servers' idle rate; each cell scales it to its own interval), so a run
/// waits the interval once per server, not once per cell (12 s more for the quickstart's
/// 12 cells otherwise). Bounded: the last `TAKEN_KEPT` readings (a process runs one run,
/// or a test binary many in turn).
static TAKEN: std::sync::Mutex<Vec<(String, Idle)>> = std::sync::Mutex::new(Vec::new());

/// `idle`, once per `key` (the run's namespace prefix and its backend).
pub(super) async fn idle_once(key: String, ns: &Namespace, space: Option<&RedisSpace>, len: Duration) -> Idle {
    let taken = |k: &str| {
        let t = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
        t.iter().find(|(have, _)| have == k).map(|(_, i)| i.clone())
    };
    if len.is_zero() {
        return Idle::default();
    }
    if let Some(hit) = taken(&key) {
        return hit;
    }
    let fresh = idle(ns, space, len).await;
    let mut t = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    if t.len() >= TAKEN_KEPT {
        t.remove(0);
    }
    t.push((key, fresh.clone()));
    fresh
}

const TAKEN_KEPT: usize = 64;

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

/// The readings before the load (after the seed), with the idle interval measured before
/// it; starts the lock-wait sampling (PostgreSQL).
pub(super) async fn before(ns: &Namespace, space: Option<&RedisSpace>, idle: Idle) -> Before {
    let statements = Statements::before(ns).await;
    let readings = read(ns, space, true).await;
    Before { readings, at: Instant::now(), idle, locks: LockSampling::start(ns), statements }
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

/// The cost of the load, read after settle: each source's `after - before` with its idle
/// baseline, then the lock waits sampled and whether `pg_stat_statements` is loaded (None
/// when nothing was read, as on SQLite alone). Per op divides by every op issued, warm-up
/// included.
pub(super) async fn after(
    ns: &Namespace,
    space: Option<&RedisSpace>,
    before: Before,
    load: &LoadResult,
    users: u64,
) -> Option<CostReport> {
    let locks = match before.locks {
        Some(l) => Some(l.finish().await),
        None => None,
    };
    let after = read(ns, space, false).await;
    let interval_s = before.at.elapsed().as_secs_f64();
    let statements = before.statements.after(ns).await;
    if after.0.is_empty() {
        return None;
    }
    let name = ns.name();
    let mut sources: Vec<CostSource> = after
        .0
        .into_iter()
        .map(|(p, now)| {
            let then = before.readings.0.iter().find(|(q, _)| *q == p).map(|(_, r)| r.clone());
            let then = then.unwrap_or_else(|| Err("not read before the load".into()));
            let mut s = source(p, name, then, now);
            s.baseline = before.idle.0.iter().find(|(q, _)| *q == p).and_then(|(_, b)| b.clone().ok());
            s
        })
        .collect();
    sources.extend(locks);
    sources.extend(statements);
    let ops = load.stages.iter().map(|s| s.issued()).sum();
    Some(CostReport { ops, users, interval_s, sources })
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

/// A broker design's messages (`rabbitmq`), added to its cost from the design's own
/// counts of its queue (the cell's alone): published (confirmed by the broker),
/// deliveries, redelivered (deliveries the broker flagged so) and acked, over the strategy's
/// life (started just before the load, read at the check, after settle). The broker's
/// management API is not used (the plugin is not enabled on the broker this was built
/// on, and a passive declare gives only the queue's depth).
pub(super) fn broker(report: &mut counterlab_report::StrategyReport) {
    use counterlab_core::Figure;
    let (Some(cost), Some(_)) = (report.cost.as_mut(), report.figures.get(Figure::Published.name())) else { return };
    let of = |f: Figure| (f.name(), report.figures.get(f.name()).copied().unwrap_or(0.0) as i64);
    let delta: Counters =
        [Figure::Published, Figure::Deliveries, Figure::Redelivered, Figure::Acked].map(of).into_iter().collect();
    cost.sources.push(CostSource {
        name: "rabbitmq".into(),
        scope: Scope::Namespace,
        source: "the design's own counts of its queue: publishes the broker confirmed, deliveries and the \
                 redelivered flag the consumer saw, acks (not the management API)"
            .into(),
        delta,
        ..Default::default()
    });
}
