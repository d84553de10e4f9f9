//! `[workload]`: workers, the stages (in `stages.rs`), arrival, timeouts, skew, the mix
//! and the connection pool's size.

use toml::Spanned;

use super::stages;
use crate::bounds::{positive_at, within, within_at};
use crate::error::{ScenarioError, Src};
use crate::overrides::Overrides;
use crate::raw::{RawFault, RawWorkload};
use crate::types::limits::*;
use crate::types::{
    Arrival, DEFAULT_COST_BASELINE_MS, DEFAULT_DUP_K, DEFAULT_MAX_WAIT_MS, DEFAULT_MIX, DEFAULT_OP_TIMEOUT_MS,
    DEFAULT_SAMPLE_DRIFT, DEFAULT_SAMPLE_INTERVAL_MS, DEFAULT_SETTLE_AFTER_SEED, MixPlan, SkewKind, StagePlan,
    WorkloadPlan,
};
use counterlab_core::OpKind;

pub(crate) fn workload(
    src: &Src<'_>,
    raw: &Spanned<RawWorkload>,
    overrides: &Overrides,
    faults: Option<&[Spanned<RawFault>]>,
) -> Result<WorkloadPlan, ScenarioError> {
    let w = raw.get_ref();
    let workers = workers(src, w, overrides)?;
    let load = stages::resolve(src, raw, overrides, workers)?;
    let arrival = match &w.arrival {
        None => Arrival::Constant,
        Some(a) => super::named(src, "arrival", a)?,
    };
    let max_wait_ms = within(src, &w.max_wait_ms, "max_wait_ms", 1..=MAX_OP_TIMEOUT_MS, DEFAULT_MAX_WAIT_MS)?;
    let sample_interval_ms = within(
        src,
        &w.sample_interval_ms,
        "sample_interval_ms",
        MIN_SAMPLE_INTERVAL_MS..=MAX_OP_TIMEOUT_MS,
        DEFAULT_SAMPLE_INTERVAL_MS,
    )?;
    let cost_baseline_ms =
        within(src, &w.cost_baseline_ms, "cost_baseline_ms", 0..=MAX_COST_BASELINE_MS, DEFAULT_COST_BASELINE_MS)?;
    let dup_k = within(src, &w.dup_k, "dup_k", 1..=MAX_DUP_K, DEFAULT_DUP_K)?;
    let op_timeout_ms = within(src, &w.op_timeout_ms, "op_timeout_ms", 1..=MAX_OP_TIMEOUT_MS, DEFAULT_OP_TIMEOUT_MS)?;
    pauses_fit(src, faults, op_timeout_ms)?;
    let (skew, zipf_exponent) = skew(src, w)?;
    let mix = mix(src, w)?;
    let redis_batch = batch(src, w, &load.stages, mix)?;
    let mut plan = WorkloadPlan {
        n_workers: workers,
        duration_s: load.duration_s,
        ops: load.ops,
        rate: load.rate,
        stages: load.stages,
        arrival,
        max_wait_ms,
        sample_interval_ms,
        sample_drift: w.sample_drift.unwrap_or(DEFAULT_SAMPLE_DRIFT),
        settle_after_seed: w.settle_after_seed.unwrap_or(DEFAULT_SETTLE_AFTER_SEED),
        cost_baseline_ms,
        dup_k,
        op_timeout_ms,
        connections: 0,
        redis_pipeline: within(src, &w.redis_pipeline, "redis_pipeline", 1..=MAX_REDIS_PIPELINE, 1)?,
        redis_batch,
        skew,
        zipf_exponent,
        mix,
    };
    // A connection per op in flight, so that a duplicate mark_read's K calls really run at
    // the same time; and one spare, so that SQL workers can each hold theirs for the run
    // while the sampler's probes still get one.
    let default_connections = (plan.ops_in_flight() + 1).min(MAX_CONNECTIONS);
    plan.connections = within(src, &w.connections, "connections", 1..=MAX_CONNECTIONS, default_connections)?;
    Ok(plan)
}

fn workers(src: &Src<'_>, w: &RawWorkload, overrides: &Overrides) -> Result<u32, ScenarioError> {
    match overrides.workers {
        Some(0) => Err(src.flag("--workers must be at least 1")),
        Some(n) if n > MAX_WORKERS => Err(src.flag(format!("--workers must be at most {MAX_WORKERS}"))),
        Some(n) => Ok(n),
        None => within_at(src, &w.workers, "workers", 1..=MAX_WORKERS),
    }
}

/// `redis_batch`: bounded, and only where a worker has ops of its own to gather: a
/// closed loop (an open loop starts each op at its scheduled time) with no duplicate
/// mark_reads (each is K calls, not one command).
fn batch(src: &Src<'_>, w: &RawWorkload, stages: &[StagePlan], mix: MixPlan) -> Result<u32, ScenarioError> {
    let n = within(src, &w.redis_batch, "redis_batch", 1..=MAX_REDIS_BATCH, 1)?;
    let Some(at) = w.redis_batch.as_ref().filter(|_| n > 1) else { return Ok(n) };
    if stages.iter().any(|s| s.workers().is_none()) {
        return Err(src.at(
            at.span(),
            "redis_batch needs a closed loop (workers): an open loop starts each op on its own schedule",
        ));
    }
    if mix.weight(OpKind::MarkReadDup) > 0 {
        return Err(
            src.at(at.span(), "redis_batch cannot batch mark_read_dup (K calls of one op); take it out of the mix")
        );
    }
    Ok(n)
}

/// A pause waits inside the op's time bound: longer, and every stalled op would end as
/// a timeout (outcome unknown) without having reached the database. (A replica pause stalls no op,
/// and a failover's duration is how long its replica is cut off: neither is bounded here.)
fn pauses_fit(src: &Src<'_>, faults: Option<&[Spanned<RawFault>]>, op_timeout_ms: u64) -> Result<(), ScenarioError> {
    let op_pauses = faults.unwrap_or_default().iter().filter(|f| f.get_ref().kind.get_ref() == "pause");
    let durations = op_pauses.filter_map(|f| f.get_ref().duration_ms.as_ref());
    match durations.into_iter().find(|d| *d.get_ref() >= op_timeout_ms) {
        None => Ok(()),
        Some(d) => Err(src.at(
            d.span(),
            format!("a pause of {} ms must be shorter than op_timeout_ms ({op_timeout_ms})", d.get_ref()),
        )),
    }
}

fn skew(src: &Src<'_>, w: &RawWorkload) -> Result<(SkewKind, Option<f64>), ScenarioError> {
    let kind = match &w.skew {
        None => SkewKind::Uniform,
        Some(s) => super::named(src, "skew", s)?,
    };
    match (kind, &w.zipf_exponent) {
        (SkewKind::Uniform, None) => Ok((kind, None)),
        (SkewKind::Uniform, Some(z)) => Err(src.at(z.span(), "zipf_exponent needs skew = \"zipf\"")),
        (SkewKind::Zipf, None) => Err(
            src.at(w.skew.as_ref().map_or(0..0, |s| s.span()), "skew = \"zipf\" needs zipf_exponent (for example 1.1)")
        ),
        (SkewKind::Zipf, Some(z)) => Ok((kind, Some(positive_at(src, z, "zipf_exponent", MAX_ZIPF_EXPONENT, "")?))),
    }
}

/// The file's `[workload.mix]` (a weight it leaves out is 0), or `DEFAULT_MIX` when the
/// table is absent.
fn mix(src: &Src<'_>, w: &RawWorkload) -> Result<MixPlan, ScenarioError> {
    let Some(mix) = &w.mix else { return Ok(DEFAULT_MIX) };
    let m = mix.get_ref();
    let weights =
        [m.create, m.mark_read, m.mark_read_dup, m.delete, m.mark_all_read, m.read_count].map(|w| w.unwrap_or(0));
    if weights.iter().all(|w| *w == 0) {
        return Err(src.at(mix.span(), "every mix weight is 0: give at least one operation a positive weight"));
    }
    Ok(MixPlan { weights })
}

#[cfg(test)]
mod tests {
    use crate::{DEFAULT_MIX, Overrides, RunPlan, parse};

    const KNOWN: [&str; 3] = ["direct-update", "select-for-update", "conditional-update"];

    fn plan(text: &str) -> RunPlan {
        parse("t.toml", text, "t", &Overrides::default(), &KNOWN, 1).expect("a valid scenario")
    }

    #[test]
    fn a_scenario_without_a_mix_gets_the_quickstarts() {
        let minimal = "strategies = [\"direct-update\"]\n[data]\nusers = 10\nnotifications_per_user = 2\n\
                       [workload]\nworkers = 1\nops = 10\n";
        assert_eq!(plan(minimal).workload.mix, DEFAULT_MIX);
        // At its own path: the strategy file it lists is read beside it.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/quickstart.toml");
        let quickstart = include_str!("../../../../scenarios/quickstart.toml");
        let qs = parse(path, quickstart, "q", &Overrides::default(), &KNOWN, 1).expect("the quickstart");
        assert_eq!(qs.workload.mix, DEFAULT_MIX, "the default is the quickstart's mix");
        // A table that is there is taken as written: what it leaves out is 0.
        let partial = plan(&format!("{minimal}[workload.mix]\nmark_read = 1\n"));
        assert_eq!(partial.workload.mix.weights, [0, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn pools_are_sized_from_the_most_ops_in_flight() {
        let base = "strategies = [\"direct-update\"]\n[data]\nusers = 10\nnotifications_per_user = 2\n\
                    [workload]\nworkers = 2\n";
        let stages =
            "[[workload.stages]]\nduration_s = 1\nworkers = 3\n[[workload.stages]]\nduration_s = 1\nworkers = 7\n";
        let w = plan(&format!("{base}{stages}[workload.mix]\nmark_read = 1\n")).workload;
        assert_eq!((w.max_workers(), w.ops_in_flight(), w.connections), (7, 7, 8), "the largest stage, not workers");
        let dup = plan(&format!("{base}dup_k = 3\n{stages}[workload.mix]\nmark_read_dup = 1\n")).workload;
        assert_eq!((dup.max_workers(), dup.ops_in_flight(), dup.connections), (7, 21, 22), "K calls at once each");
        let single = plan(&format!("{base}ops = 10\n[workload.mix]\ncreate = 1\n")).workload;
        assert_eq!((single.max_workers(), single.ops_in_flight(), single.connections), (2, 2, 3));
    }

    #[test]
    fn redis_pipeline_shares_connections_and_is_bounded_where_written() {
        let base = "strategies = [\"direct-update\"]\n[data]\nusers = 10\nnotifications_per_user = 2\n\
                    [workload]\nworkers = 16\nops = 10\n";
        let one = plan(base).workload;
        assert_eq!(one.redis_pipeline, 1, "default: a connection per op in flight");
        let set = Overrides { sets: vec!["workload.redis_pipeline=16".into()], ..Overrides::default() };
        let w = parse("t.toml", base, "t", &set, &KNOWN, 1).expect("--set takes it").workload;
        assert_eq!(w.redis_pipeline, 16);
        for bad in ["0", "257"] {
            let text = format!("{base}redis_pipeline = {bad}\n");
            let Err(e) = parse("t.toml", &text, "t", &Overrides::default(), &KNOWN, 1) else {
                panic!("redis_pipeline = {bad} is out of bounds")
            };
            let shown = e.to_string();
            assert!(shown.contains("t.toml:8:18") && shown.contains("redis_pipeline"), "{shown}");
        }
    }

    #[test]
    fn redis_batch_is_bounded_and_refused_where_a_worker_cannot_gather_ops() {
        let base = "strategies = [\"direct-update\"]\n[data]\nusers = 10\nnotifications_per_user = 2\n\
                    [workload]\nworkers = 16\n";
        let refused = |text: String| {
            let Err(e) = parse("t.toml", &text, "t", &Overrides::default(), &KNOWN, 1) else { panic!("taken: {text}") };
            e.to_string()
        };
        let mix = "[workload.mix]\nread_count = 1\n";
        assert_eq!(plan(&format!("{base}ops = 10\n")).workload.redis_batch, 1, "default: one op at a time");
        assert_eq!(plan(&format!("{base}ops = 10\nredis_batch = 16\n{mix}")).workload.redis_batch, 16);
        let shown = refused(format!("{base}ops = 10\nredis_batch = 257\n"));
        assert!(shown.contains("t.toml:8:15") && shown.contains("redis_batch"), "{shown}");
        let open = refused(format!("{base}redis_batch = 4\nduration_s = 1\nrate = 100\n{mix}"));
        assert!(open.contains("t.toml:7:15") && open.contains("closed loop"), "{open}");
        let dup = refused(format!("{base}ops = 10\nredis_batch = 4\n[workload.mix]\nmark_read_dup = 1\n"));
        assert!(dup.contains("t.toml:8:15") && dup.contains("mark_read_dup"), "{dup}");
    }
}
