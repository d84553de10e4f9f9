//! PostgreSQL's side of a cell's cost that is not a counter delta: the lock waits of the
//! namespace's backends, sampled from `pg_stat_activity` every `LOCK_SAMPLE` through the
//! load and settle (`pg_lock_waits`), and whether `pg_stat_statements` is loaded
//! (`pg_statements`: when it is not, the report says so instead of per-statement figures).

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

/// A sampling task under way, and how to stop it.
pub(super) struct LockSampling {
    stop: Arc<Notify>,
    task: JoinHandle<Result<Counters, String>>,
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
                return Some(LockSampling { stop, task: tokio::spawn(async move { Err(e) }) });
            }
        };
        let stop = Arc::new(Notify::new());
        let task = tokio::spawn(sample(probe, stop.clone()));
        Some(LockSampling { stop, task })
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
        match self.task.await {
            Ok(Ok(c)) => s.delta = c,
            Ok(Err(e)) => s.error = Some(e),
            Err(e) => s.error = Some(format!("the sampling task ended: {e}")),
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
        let r: Counters = probe.read().await.map_err(|e| e.to_string())?.into_iter().collect();
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

/// PostgreSQL: `pg_statements`, saying whether `pg_stat_statements` is loaded. It is read
/// per statement only where it is; on a server where it is not, the source has no
/// figures and `absent` says so (None: not PostgreSQL).
pub(super) async fn statements_note(ns: &Namespace) -> Option<CostSource> {
    let loaded = ns.statements_loaded().await?;
    let mut s = CostSource {
        name: "pg_statements".into(),
        scope: Scope::Namespace,
        source: "pg_stat_statements, per statement of the namespace's identity".into(),
        ..Default::default()
    };
    match loaded {
        Ok(true) => s.absent = Some("loaded, but per-statement figures are not read yet".into()),
        Ok(false) => {
            s.absent = Some(
                "pg_stat_statements is not loaded on this server (shared_preload_libraries does not name it): \
                 no per-statement figures"
                    .into(),
            )
        }
        Err(e) => s.error = Some(format!("whether pg_stat_statements is loaded: {e}")),
    }
    Some(s)
}
