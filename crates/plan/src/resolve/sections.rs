//! The small sections: `[retry]`, `[redis]`, `[verdict]`, `[data]` and
//! `expect_anomaly`, each a handful of bounded values.

use counterlab_core::{AnomalyKind, Named, VerdictRules};
use toml::Spanned;

use super::named;
use crate::bounds::{within, within_at};
use crate::error::{ScenarioError, Src};
use crate::raw::{RawData, RawExplore, RawRedis, RawReplica, RawRetry, RawVerdict};
use crate::types::limits::*;
use crate::types::{
    DEFAULT_REDIS, DEFAULT_RETRY, DataPlan, Expectation, ExplorePlan, RedisPlan, ReplicaPlan, RetryPlan, VerdictPlan,
};

pub(crate) fn retry(src: &Src<'_>, raw: Option<&Spanned<RawRetry>>) -> Result<RetryPlan, ScenarioError> {
    let Some(r) = raw.map(|r| r.get_ref()) else { return Ok(DEFAULT_RETRY) };
    let d = DEFAULT_RETRY;
    let max_attempts = within(src, &r.max_attempts, "max_attempts", 1..=MAX_ATTEMPTS, d.max_attempts)?;
    let base = within(src, &r.backoff_base_ms, "backoff_base_ms", 0..=MAX_BACKOFF_MS, d.backoff_base_ms)?;
    let max = within(src, &r.backoff_max_ms, "backoff_max_ms", 0..=MAX_BACKOFF_MS, d.backoff_max_ms)?;
    if base > max {
        return Err(src.at(
            r.backoff_base_ms.as_ref().map_or(0..0, |x| x.span()),
            format!("backoff_base_ms ({base}) exceeds backoff_max_ms ({max})"),
        ));
    }
    Ok(RetryPlan {
        max_attempts,
        backoff_base_ms: base,
        backoff_max_ms: max,
        on_unknown: r.on_unknown.unwrap_or(false),
    })
}

/// `expect_anomaly`: an anomaly name, or `none`.
pub(crate) fn expectation(src: &Src<'_>, raw: Option<&Spanned<String>>) -> Result<Option<Expectation>, ScenarioError> {
    match raw {
        None => Ok(None),
        Some(a) if a.get_ref() == "none" => Ok(Some(Expectation::None)),
        Some(a) => named::<AnomalyKind>(src, "anomaly", a).map(|k| Some(Expectation::Anomaly(k))).map_err(|mut e| {
            e.message = format!("unknown anomaly {:?}; valid: none, {}", a.get_ref(), AnomalyKind::valid());
            e
        }),
    }
}

pub(crate) fn redis(src: &Src<'_>, raw: Option<&Spanned<RawRedis>>) -> Result<RedisPlan, ScenarioError> {
    let Some(r) = raw.map(|r| r.get_ref()) else { return Ok(DEFAULT_REDIS) };
    let d = DEFAULT_REDIS;
    let ms = 1..=MAX_INTERVAL_MS;
    let settle_timeout_ms = within(src, &r.settle_timeout_ms, "settle_timeout_ms", ms.clone(), d.settle_timeout_ms)?;
    // Settle waits for cache-aside's second deletes: the delay must fit inside it.
    let delay_what = "cache_delay_ms (below settle_timeout_ms)";
    let delays = 1..=settle_timeout_ms.saturating_sub(1).max(1);
    let cache_delay_ms =
        within(src, &r.cache_delay_ms, delay_what, delays, d.cache_delay_ms.min(settle_timeout_ms / 2))?;
    Ok(RedisPlan {
        flush_interval_ms: within(src, &r.flush_interval_ms, "flush_interval_ms", ms.clone(), d.flush_interval_ms)?,
        flush_batch: within(src, &r.flush_batch, "flush_batch", 1..=MAX_FLUSH_BATCH, d.flush_batch)?,
        reconcile_interval_ms: match &r.reconcile_interval_ms {
            None => None,
            Some(v) => Some(within_at(src, v, "reconcile_interval_ms", ms.clone())?),
        },
        settle_timeout_ms,
        cache_delay_ms,
        cache_ttl_ms: within(src, &r.cache_ttl_ms, "cache_ttl_ms", ms, d.cache_ttl_ms)?,
    })
}

/// `[replica]`: `read_from` (a list of primary, replica, replica-fallback; default
/// primary) and `stale_read_bound_ms`.
pub(crate) fn replica(src: &Src<'_>, raw: Option<&Spanned<RawReplica>>) -> Result<ReplicaPlan, ScenarioError> {
    use counterlab_core::ReadFrom;
    let r = raw.map(|r| r.get_ref());
    let file = r.and_then(|r| r.read_from.as_deref());
    let read_from = super::named_list(src, "read_from", &[], file, &[ReadFrom::Primary])?;
    let stale_read_bound_ms = match r.and_then(|r| r.stale_read_bound_ms.as_ref()) {
        None => None,
        Some(v) => Some(within_at(src, v, "stale_read_bound_ms", 0..=MAX_INTERVAL_MS)?),
    };
    Ok(ReplicaPlan { read_from, stale_read_bound_ms })
}

/// `[explore]`: `sessions` (2 or 3, default 2), `budget` (schedules per op pair, default
/// 1000), `preemptions` (default: any number) and `pairs` (`"a,b"` of the explorer's op
/// names; default: the whole matrix).
pub(crate) fn explore(src: &Src<'_>, raw: Option<&Spanned<RawExplore>>) -> Result<ExplorePlan, ScenarioError> {
    use counterlab_core::explore::{MAX_BUDGET, OPS};
    let r = raw.map(|r| r.get_ref());
    let sessions = within(src, &r.and_then(|r| r.sessions.clone()), "sessions", 2..=3, 2)?;
    let budget = within(src, &r.and_then(|r| r.budget.clone()), "budget", 1..=MAX_BUDGET, 1000)?;
    let preemptions = match r.and_then(|r| r.preemptions.as_ref()) {
        None => None,
        Some(v) => Some(within_at(src, v, "preemptions", 0..=64)?),
    };
    let mut pairs = Vec::new();
    for p in r.and_then(|r| r.pairs.as_deref()).unwrap_or(&[]) {
        let known = |n: &str| OPS.contains(&n.trim());
        match p.get_ref().split_once(',') {
            Some((a, b)) if known(a) && known(b) => pairs.push((a.trim().to_string(), b.trim().to_string())),
            _ => {
                let why = format!("an op pair is two of {} joined by a comma, not {:?}", OPS.join(", "), p.get_ref());
                return Err(src.at(p.span(), why));
            }
        }
    }
    let with_run = r.and_then(|r| r.with_run).unwrap_or(false);
    Ok(ExplorePlan { sessions, budget, preemptions, pairs, with_run })
}

pub(crate) fn verdict(src: &Src<'_>, raw: Option<&Spanned<RawVerdict>>) -> Result<VerdictPlan, ScenarioError> {
    let d = VerdictRules::default();
    let Some(raw) = raw.map(|r| r.get_ref()) else {
        return Ok(VerdictPlan { max_error_rate: d.max_error_rate, min_ops_per_kind: d.min_ops_per_kind });
    };
    let max_error_rate = match &raw.max_error_rate {
        Some(v) if !(0.0..=1.0).contains(v.get_ref()) => {
            return Err(src.at(v.span(), "max_error_rate is a share of operations: 0.0 ..= 1.0 (0.001 is 0.1%)"));
        }
        Some(v) => *v.get_ref(),
        None => d.max_error_rate,
    };
    let min_ops_per_kind =
        within(src, &raw.min_ops_per_kind, "min_ops_per_kind", 0..=1_000_000_000, d.min_ops_per_kind)?;
    Ok(VerdictPlan { max_error_rate, min_ops_per_kind })
}

pub(crate) fn data(src: &Src<'_>, d: &RawData) -> Result<DataPlan, ScenarioError> {
    let n_users = within_at(src, &d.users, "users", 1..=MAX_USERS)?;
    let per_user = within_at(src, &d.notifications_per_user, "notifications_per_user", 0..=MAX_NOTIFICATIONS_PER_USER)?;
    if let Err(why) = crate::bounds::fits_memory(n_users, per_user, crate::bounds::memory_available()) {
        return Err(src.at(d.notifications_per_user.span(), why));
    }
    let initial_read = match &d.initial_read_per_user {
        Some(v) if *v.get_ref() > per_user => {
            return Err(src.at(
                v.span(),
                format!("initial_read_per_user ({}) exceeds notifications_per_user ({per_user})", v.get_ref()),
            ));
        }
        Some(v) => *v.get_ref(),
        None => 0,
    };
    Ok(DataPlan { n_users, notifications_per_user: per_user, initial_read_per_user: initial_read })
}

#[cfg(test)]
mod tests {
    use crate::{Overrides, parse};

    const BASE: &str = "strategies = [\"direct-update\"]\n[data]\nusers = 10\nnotifications_per_user = 2\n\
                        [workload]\nworkers = 1\nops = 10\n";

    fn explore(section: &str) -> Result<crate::ExplorePlan, String> {
        let text = format!("{BASE}[explore]\n{section}");
        parse("t.toml", &text, "t", &Overrides::default(), &["direct-update"], 1)
            .map(|p| p.explore)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_explore_section_has_defaults_and_is_checked_where_it_is_wrong() {
        let none = parse("t.toml", BASE, "t", &Overrides::default(), &["direct-update"], 1).unwrap().explore;
        assert_eq!((none.sessions, none.budget, none.preemptions, none.pairs.len()), (2, 1000, None, 0));
        assert!(!none.with_run);
        assert!(explore("with_run = true\n").unwrap().with_run);
        let set =
            explore("sessions = 3\nbudget = 50\npreemptions = 2\npairs = [\"mark_read, mark_read_other\"]\n").unwrap();
        assert_eq!((set.sessions, set.budget, set.preemptions), (3, 50, Some(2)));
        assert_eq!(set.pairs, vec![("mark_read".to_string(), "mark_read_other".to_string())]);
        let bad = explore("pairs = [\"create,create\", \"mark_read,unmark\"]\n").unwrap_err();
        assert!(bad.starts_with("t.toml:9:27: an op pair is two of create, mark_read"), "{bad}");
        let bad = explore("sessions = 4\n").unwrap_err();
        assert!(bad.starts_with("t.toml:9:12:") && bad.contains("sessions"), "{bad}");
        assert!(explore("sessionz = 2\n").unwrap_err().contains("unknown field"));
    }
}
