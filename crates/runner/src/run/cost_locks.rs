//! PostgreSQL's side of a cell's cost that is not a counter delta: the lock waits of the
//! namespace's backends, sampled from `pg_stat_activity` every `LOCK_SAMPLE` through the
//! load and settle (`pg_lock_waits`), and the identity's statements in
//! `pg_stat_statements` where it is loaded (`pg_statements`: where it is not, the report
//! says so instead of per-statement figures).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use counterlab_report::{CostSource, Counters, Scope};
use counterlab_strategies::{LockProbe, Namespace};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How often the lock waits are sampled.
pub(super) const LOCK_SAMPLE: Duration = Duration::from_millis(50);

/// At most this many samples are taken (a day at `LOCK_SAMPLE`): the loop's bound.
const MAX_SAMPLES: u64 = 24 * 3600 * 20;

/// One sample's bound, and the bound on the sampling's end after it is told to stop (a
/// stalled server fails the source instead of holding the cell).
const READ_BOUND: Duration = Duration::from_secs(5);

/// A sampling task under way, and how to stop it; dropped (a cell given up), the task is
/// aborted rather than left sampling.
pub(super) struct LockSampling {
    stop: Arc<Notify>,
    task: JoinHandle<Result<Counters, String>>,
    _abort: AbortOnDrop,
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl LockSampling {
    fn of(stop: Arc<Notify>, task: JoinHandle<Result<Counters, String>>) -> LockSampling {
        let abort = AbortOnDrop(task.abort_handle());
        LockSampling { stop, task, _abort: abort }
    }
}

impl LockSampling {
    /// Starts sampling the namespace's lock waits (None: not PostgreSQL; a namespace
    /// without an identity of its own is sampled as an error saying why).
    pub(super) fn start(ns: &Namespace) -> Option<LockSampling> {
        let probe = match ns.lock_probe() {
            Ok(p) => p,
            Err(_) if !matches!(ns.db(), counterlab_strategies::Db::Pg(_)) => return None,
            Err(e) => {
                let stop = Arc::new(Notify::new());
                return Some(LockSampling::of(stop, tokio::spawn(async move { Err(e) })));
            }
        };
        let stop = Arc::new(Notify::new());
        let task = tokio::spawn(sample(probe, stop.clone()));
        Some(LockSampling::of(stop, task))
    }

    /// Stops the sampling: the source `pg_lock_waits` (its error when a sample failed).
    pub(super) async fn finish(self) -> CostSource {
        self.stop.notify_one();
        let mut s = CostSource {
            name: "pg_lock_waits".into(),
            scope: Scope::Namespace,
            source: format!(
                "pg_stat_activity sampled every {} ms through the load and settle: backends of the namespace's \
                 identity with wait_event_type 'Lock', summed over the samples (waiting); each stands for about one \
                 interval of waiting",
                LOCK_SAMPLE.as_millis()
            ),
            ..Default::default()
        };
        match tokio::time::timeout(READ_BOUND * 2, self.task).await {
            Ok(Ok(Ok(c))) => s.delta = c,
            Ok(Ok(Err(e))) => s.error = Some(e),
            Ok(Err(e)) => s.error = Some(format!("the sampling task ended: {e}")),
            Err(_) => s.error = Some(format!("the sampling did not stop within {:?}", READ_BOUND * 2)),
        }
        s
    }
}

/// Samples until stopped: `samples`, `waiting` and `active` (sums over the samples),
/// `max_waiting`, `interval_ms`. Fails when this account cannot see other users' wait
/// events (they would read as none).
async fn sample(probe: LockProbe, stop: Arc<Notify>) -> Result<Counters, String> {
    let (mut samples, mut waiting, mut active, mut max_waiting) = (0i64, 0i64, 0i64, 0i64);
    let mut next = Instant::now();
    for _ in 0..MAX_SAMPLES {
        let read = tokio::time::timeout(READ_BOUND, probe.read()).await;
        let read = read.map_err(|_| format!("a sample did not come back within {READ_BOUND:?}"))?;
        let r: Counters = read.map_err(|e| e.to_string())?.into_iter().collect();
        if r.get("visible") == 0 {
            return Err("this account cannot see other users' wait events (not a superuser, not in \
                        pg_read_all_stats): lock waits not sampled"
                .into());
        }
        samples += 1;
        waiting += r.get("waiting");
        active += r.get("active");
        max_waiting = max_waiting.max(r.get("waiting"));
        next += LOCK_SAMPLE;
        tokio::select! {
            _ = stop.notified() => break,
            _ = tokio::time::sleep_until(next.into()) => {}
        }
    }
    let interval_ms = LOCK_SAMPLE.as_millis() as i64;
    let kv = [("samples", samples), ("waiting", waiting), ("active", active), ("max_waiting", max_waiting)];
    Ok(kv.into_iter().chain([("interval_ms", interval_ms)]).collect())
}

/// `pg_stat_statements` as read before the load.
pub(super) enum Statements {
    /// Not PostgreSQL: no source.
    NotPg,
    /// Not loaded on this server: the source says so.
    Absent(String),
    Failed(String),
    /// The identity's statements: counters by `<queryid>.<counter>`, texts by queryid.
    Read(Counters, BTreeMap<String, String>),
}

const NOT_LOADED: &str = "pg_stat_statements is not loaded on this server (shared_preload_libraries does not \
                          name it): no per-statement figures";

/// The identity's statements now: counters by `<queryid>.<counter>`, texts by queryid.
async fn read_statements(ns: &Namespace) -> Result<(Counters, BTreeMap<String, String>), String> {
    let rows = ns.statements().await.map_err(|e| format!("reading pg_stat_statements: {e}"))?;
    let mut texts = BTreeMap::new();
    let mut counters = Counters::default();
    for (id, text, counter, value) in rows {
        *counters.0.entry(format!("{id}.{counter}")).or_insert(0) += value;
        texts.insert(id, text);
    }
    Ok((counters, texts))
}

impl Statements {
    /// Before the load: whether `pg_stat_statements` is loaded and, where it is, the
    /// identity's statements.
    pub(super) async fn before(ns: &Namespace) -> Statements {
        match ns.statements_loaded().await {
            None => Statements::NotPg,
            Some(Err(e)) => Statements::Failed(format!("whether pg_stat_statements is loaded: {e}")),
            Some(Ok(false)) => Statements::Absent(NOT_LOADED.into()),
            Some(Ok(true)) => match read_statements(ns).await {
                Ok((c, t)) => Statements::Read(c, t),
                Err(e) => Statements::Failed(e),
            },
        }
    }

    /// After settle: `pg_statements`, each statement the identity ran in between (its
    /// `calls` grew) with its counters' deltas and its text (None: not PostgreSQL).
    pub(super) async fn after(self, ns: &Namespace) -> Option<CostSource> {
        let mut s = CostSource {
            name: "pg_statements".into(),
            scope: Scope::Namespace,
            source: "pg_stat_statements, the statements of the namespace's identity (userid), read before the \
                     load and after settle"
                .into(),
            ..Default::default()
        };
        match self {
            Statements::NotPg => return None,
            Statements::Absent(why) => s.absent = Some(why),
            Statements::Failed(e) => s.error = Some(e),
            Statements::Read(before, texts) => match read_statements(ns).await {
                Err(e) => s.error = Some(format!("after settle: {e}")),
                Ok((now, more)) => {
                    let delta = now.delta(&before);
                    let ran = |k: &str| delta.get(&format!("{}.calls", k.split_once('.').map_or(k, |x| x.0))) > 0;
                    s.delta = Counters(delta.0.iter().filter(|(k, _)| ran(k)).map(|(k, v)| (k.clone(), *v)).collect());
                    let ids: Vec<&str> = s.delta.0.keys().filter_map(|k| k.strip_suffix(".calls")).collect();
                    let all = texts.into_iter().chain(more);
                    s.texts = all.filter(|(id, _)| ids.contains(&id.as_str())).collect();
                }
            },
        }
        Some(s)
    }
}
