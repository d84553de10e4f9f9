//! After the load: retrying reads a lost connection interrupted, the row of a check that
//! could not complete, the settled reads, and the figures the verdict judges (errors,
//! executed op kinds); also the faults fired during the load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use counterlab_core::{
    Backend, CheckInput, ErrorClass, ErrorFigures, Judgement, OpError, OpKind, SettledRead, Strategy, StrategyInfo,
    check_counters,
};
use counterlab_plan::RunPlan;
use counterlab_report::{FaultEvent, HistoryReport, StrategyReport, StrategyRun};
use counterlab_strategies::{Db, Isolation};
use futures_util::StreamExt as _;

use super::RunOptions;
use super::stop::Stop;

/// A scheduled fault: its report entry and the task that fires it (when it fired and
/// when its injections were done, in µs from the start; what it did).
pub(super) type ScheduledFault = (FaultEvent, tokio::task::JoinHandle<(u64, u64, String)>);

/// Fires the plan's faults at their offsets from `start`, in the background.
pub(super) fn schedule_faults(plan: &RunPlan, strategy: &Arc<dyn Strategy>, start: Instant) -> Vec<ScheduledFault> {
    plan.faults_for(strategy.info().name)
        .map(|f| {
            let s = strategy.clone();
            let (fault, at_ms, times) = (f.fault, f.at_ms, f.times);
            let h = tokio::spawn(async move {
                tokio::time::sleep_until((start + Duration::from_millis(at_ms)).into()).await;
                let fired = start.elapsed().as_micros() as u64;
                let mut outcomes = Vec::new();
                for _ in 0..times {
                    outcomes.push(match s.inject(fault).await {
                        Ok(what) => what,
                        Err(e) => format!("failed: {e}"),
                    });
                }
                outcomes.dedup();
                let outcome =
                    if times > 1 { format!("{times} x {}", outcomes.join("; ")) } else { outcomes.join("; ") };
                (fired, start.elapsed().as_micros() as u64, outcome)
            });
            let ev = FaultEvent {
                kind: fault.name().into(),
                at_ms,
                fired_at_ms: None,
                duration_ms: fault.duration_ms(),
                outcome: String::new(),
            };
            (ev, h)
        })
        .collect()
}

/// Non-conflict, non-permission errors of a run (permission errors are judged on their
/// own), or None while the scenario schedules faults for the strategy: then errors are
/// what the faults cause, and the checks judge their effect.
pub(super) fn judged_errors(plan: &RunPlan, name: &str, load: &counterlab_sim::LoadResult) -> Option<ErrorFigures> {
    if plan.faults.iter().any(|f| f.applies_to(name)) {
        return None;
    }
    let judged = ErrorClass::ALL.into_iter().filter(|c| !c.is_conflict() && *c != ErrorClass::Permission);
    let by_class: Vec<(ErrorClass, u64)> =
        judged.map(|c| (c, load.ops.iter().map(|o| o.errors_by_class[c.index()]).sum())).collect();
    let failed = by_class.iter().map(|(_, n)| n).sum();
    let top = by_class.iter().filter(|(_, n)| *n > 0).max_by_key(|(_, n)| *n).map(|(c, n)| {
        let sample = load.error_samples.iter().find(|m| m.starts_with(c.name()));
        format!("{} x{n}{}", c.name(), sample.map(|m| format!(" ({m})")).unwrap_or_default())
    });
    Some(ErrorFigures { failed, ops: load.total_ops(), top })
}

/// The ops the servers refused for want of a privilege (judged on their own: any is
/// `FAIL: denied`).
pub(super) fn permission_denied(load: &counterlab_sim::LoadResult) -> u64 {
    load.ops.iter().map(|o| o.errors_by_class[ErrorClass::Permission.index()]).sum()
}

/// The op kinds the mix gives weight, with how many of each ran.
pub(super) fn executed(plan: &RunPlan, load: &counterlab_sim::LoadResult) -> Vec<(OpKind, u64)> {
    OpKind::ALL
        .into_iter()
        .zip(plan.workload.mix_weights())
        .filter(|(_, w)| *w > 0)
        .map(|(k, _)| (k, load.op(k).count))
        .collect()
}

/// Attempts of a post-load read (the truth, the counters) when the connection is lost,
/// and the first backoff, doubled each time: 6 attempts over about 8 s, long enough for a
/// restarted server or a failover, short enough that a dead one ends the row.
pub const POST_LOAD_ATTEMPTS: u32 = 6;
pub const POST_LOAD_BACKOFF: Duration = Duration::from_millis(250);

/// Runs `f` until it succeeds, fails for another reason than a lost connection or a
/// timeout, or `POST_LOAD_ATTEMPTS` are spent; the error says what and how often. Before
/// each retry the idle connections of `pool` (when given) are closed: after a lost
/// connection they are likely all dead, and each would fail one attempt.
pub(super) async fn retry_lost<T, F, Fut>(
    what: &str,
    pool: Option<&Db>,
    log: &mut dyn FnMut(&str),
    mut f: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, OpError>>,
{
    let mut wait = POST_LOAD_BACKOFF;
    let mut attempt = 1;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e)
                if matches!(e.class, ErrorClass::Connection | ErrorClass::Timeout) && attempt < POST_LOAD_ATTEMPTS =>
            {
                log(&format!("{what}: {e}; retrying in {} ms ({attempt}/{POST_LOAD_ATTEMPTS})", wait.as_millis()));
                if let Some(db) = pool {
                    db.drop_idle().await;
                }
                tokio::time::sleep(wait).await;
                wait *= 2;
                attempt += 1;
            }
            Err(e) => return Err(format!("{what} failed after {attempt} attempt(s): {e}")),
        }
    }
}

/// What an incomplete row reports: the load ran, its check did not complete.
pub(super) struct Incomplete<'a> {
    pub info: StrategyInfo,
    pub backend: Backend,
    pub isolation: Isolation,
    pub ns: &'a str,
    pub load: &'a counterlab_sim::LoadResult,
}

pub(super) fn incomplete_report(
    r: Incomplete<'_>,
    opts: &RunOptions,
    judgement: Judgement,
    seed_s: f64,
    faults: Vec<FaultEvent>,
) -> StrategyReport {
    let check = check_counters(&[], r.info.guarantee);
    StrategyReport::new(StrategyRun {
        info: r.info,
        backend: r.backend,
        isolation: r.isolation,
        isolation_in_effect: "",
        namespace: r.ns,
        namespace_kept: opts.keep,
        identity: String::new(),
        judgement,
        seed_s,
        load: r.load,
        settle_s: 0.0,
        settle_error: None,
        check_s: 0.0,
        faults,
        figures: Vec::new(),
        check: &check,
        series: &[],
        hdr_log: None,
        anomalies: &[],
        history: HistoryReport::default(),
    })
}

/// Users whose `read_count` is compared with the truth after settle (evenly spread).
pub const SETTLED_READS: usize = 2000;

/// After settle, what `read` (the strategy's `read_count`, bounded by the op timeout)
/// shows for each of `users`, 8 reads at a time, in their order; None where the read
/// errored (`settled_reads` tries those once more) or had not ended when `stop`'s grace
/// ran out (an interrupted run).
pub(super) async fn shown_counts<F, Fut>(read: &F, users: &[i64], stop: &Stop) -> Vec<(i64, Option<i64>)>
where
    F: Fn(i64) -> Fut,
    Fut: std::future::Future<Output = Result<i64, OpError>>,
{
    let reads = futures_util::stream::iter(users.iter().map(|&u| async move { (u, read(u).await.ok()) }))
        .buffered(8)
        .take_until(stop.reached());
    let mut shown: Vec<_> = reads.collect().await;
    shown.extend(users[shown.len()..].iter().map(|&u| (u, None)));
    shown
}

/// The settled reads: what each sampled user showed (`shown`, from `shown_counts` for the
/// sample's users in order) beside their truth. The reads that errored are tried once
/// more, 8 at a time; those that error again are left out and counted (the second value).
/// A `shown` that does not name the sample's users in order is an error.
pub(super) async fn settled_reads<F, Fut>(
    read: &F,
    sample: &[CheckInput],
    mut shown: Vec<(i64, Option<i64>)>,
    stop: &Stop,
) -> Result<(Vec<SettledRead>, usize), String>
where
    F: Fn(i64) -> Fut,
    Fut: std::future::Future<Output = Result<i64, OpError>>,
{
    if shown.len() != sample.len() || sample.iter().zip(&shown).any(|(r, s)| r.user != s.0) {
        return Err(format!(
            "settled reads: {} reads for a sample of {} users, or out of order",
            shown.len(),
            sample.len()
        ));
    }
    let failed: Vec<usize> = (0..shown.len()).filter(|&i| shown[i].1.is_none()).collect();
    let again = shown_counts(read, &failed.iter().map(|&i| shown[i].0).collect::<Vec<_>>(), stop).await;
    for (i, (_, v)) in failed.into_iter().zip(again) {
        shown[i].1 = v;
    }
    let reads: Vec<SettledRead> = sample
        .iter()
        .zip(shown)
        .filter_map(|(r, (_, v))| v.map(|shown| SettledRead { user: r.user, shown, truth: r.truth }))
        .collect();
    let left_out = sample.len() - reads.len();
    Ok((reads, left_out))
}
