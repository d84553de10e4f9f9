//! `counterlab check`'s side of the agents: waiting (bounded) for every agent's output,
//! refusing outputs of another run or size, and merging them per cell: the HDR logs
//! exactly (`Histogram::add`), the counts by sum, and the histories onto one timeline
//! (the server's clock, through each agent's measured offset), each call's interval
//! widened by its agent's clock uncertainty before the existing read check sees it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

use counterlab_core::{Event, OpKind, Outcome};
use counterlab_report::{AgentShare, AgentsReport, HistoryEvent};
use counterlab_sim::{HistorySink as _, LoadResult, Stage, StageResult};

use crate::spill::{History, HistoryStore, SPILL_AFTER};

/// Error messages kept per cell (as one process keeps).
const MAX_ERROR_SAMPLES: usize = 5;

use super::agent::{AGENT_FORMAT, CellPartial, Partial, agent_dir, classes_match, empty_lag, empty_ops, tag};

/// One agent's output as found.
pub struct Agent {
    pub partial: Partial,
    pub dir: PathBuf,
}

/// Agents' folders found in `from`: (K, N) of each with a complete partial.json.
fn scan(from: &Path) -> Result<Vec<(u32, u32)>, String> {
    let entries = std::fs::read_dir(from).map_err(|e| format!("cannot read --from {}: {e}", from.display()))?;
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("agent-") else { continue };
        let Some((k, n)) = rest.split_once("-of-") else { continue };
        let (Ok(k), Ok(n)) = (k.parse::<u32>(), n.parse::<u32>()) else { continue };
        if entry.path().join("partial.json").is_file() {
            found.push((k, n));
        }
    }
    found.sort();
    Ok(found)
}

/// What is missing from `found` for a complete set (None: complete).
fn missing(from: &Path, found: &[(u32, u32)]) -> Result<Option<String>, String> {
    let Some(&(_, n)) = found.first() else {
        return Ok(Some(format!(
            "no agent output in {} (each `counterlab load --segment K/N --out {}` writes agent-K-of-N/partial.json)",
            from.display(),
            from.display()
        )));
    };
    if let Some(&(k2, n2)) = found.iter().find(|(_, m)| *m != n) {
        let first = found[0];
        return Err(format!(
            "{} mixes runs of different sizes: agent-{}-of-{n} and agent-{k2}-of-{n2}",
            from.display(),
            first.0
        ));
    }
    let absent: Vec<String> = (1..=n).filter(|k| !found.iter().any(|(f, _)| f == k)).map(|k| k.to_string()).collect();
    Ok((!absent.is_empty()).then(|| {
        format!("{} is missing agent(s) {} of {n} (no agent-K-of-{n}/partial.json)", from.display(), absent.join(", "))
    }))
}

/// Waits up to `wait` for all N agents' outputs, then reads them; every one must come
/// from run `run_id`.
pub fn collect(from: &Path, run_id: &str, wait: Duration) -> Result<Vec<Agent>, String> {
    let deadline = Instant::now() + wait;
    let found = loop {
        let found = scan(from)?;
        match missing(from, &found)? {
            None => break found,
            Some(why) if Instant::now() >= deadline => {
                let waited = if wait.is_zero() { String::new() } else { format!(" after waiting {}s", wait.as_secs()) };
                return Err(format!("{why}{waited}"));
            }
            Some(_) => std::thread::sleep(Duration::from_millis(200).min(deadline - Instant::now())),
        }
    };
    found.into_iter().map(|(k, n)| read_agent(from, run_id, k, n)).collect()
}

fn read_agent(from: &Path, run_id: &str, k: u32, n: u32) -> Result<Agent, String> {
    let dir = agent_dir(from, k, n);
    let path = dir.join("partial.json");
    let shown = path.display();
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{shown}: not JSON: {e}"))?;
    match v.get("format").and_then(|f| f.as_str()) {
        Some(AGENT_FORMAT) => {}
        other => return Err(format!("{shown}: format {other:?}; this counterlab reads {AGENT_FORMAT:?}")),
    }
    let partial: Partial = serde_json::from_value(v).map_err(|e| format!("{shown}: a damaged partial report: {e}"))?;
    if partial.run_id != run_id {
        return Err(format!("{shown} is from run {}, not this handle's run {run_id}", partial.run_id));
    }
    if (partial.k, partial.n) != (k, n) {
        return Err(format!("{shown} says segment {}/{}, its folder {k}/{n}", partial.k, partial.n));
    }
    Ok(Agent { partial, dir })
}

/// How one agent's calls of one cell are placed on the merged timeline.
#[derive(Clone, Copy)]
pub struct Placement {
    pub k: u32,
    /// The load's start on the server's clock, µs since the epoch.
    pub t0_server_us: i64,
    /// Each call's interval is widened by this much on both sides.
    pub widen_us: u64,
}

/// The merged timeline's zero: the earliest widened start over the agents.
pub fn timeline_base(agents: &[Placement]) -> i64 {
    agents.iter().map(|p| p.t0_server_us - p.widen_us as i64).min().unwrap_or(0)
}

/// One call of agent `p` on the timeline starting at `base` (µs from it), its interval
/// widened, its worker id made unique (agent K's worker w is (K-1)<<20 | w).
pub fn place(base: i64, p: &Placement, mut e: Event) -> Event {
    let shift = (p.t0_server_us - base) as u64;
    e.invoke_us = e.invoke_us + shift - p.widen_us;
    e.complete_us = e.complete_us + shift + p.widen_us;
    e.worker |= (p.k - 1) << 20;
    e
}

/// A history line back as the checker's event.
pub fn event(h: HistoryEvent) -> Result<Event, String> {
    Ok(Event {
        worker: h.worker,
        op: OpKind::from_name(&h.op).ok_or_else(|| format!("unknown op {:?}", h.op))?,
        user: h.user,
        id: h.id,
        invoke_us: h.invoke_us,
        complete_us: h.complete_us,
        outcome: [Outcome::Ok, Outcome::Fail, Outcome::Unknown]
            .into_iter()
            .find(|o| o.name() == h.outcome)
            .ok_or_else(|| format!("unknown outcome {:?}", h.outcome))?,
        observed: h.observed,
        attempts: h.attempts,
        unknown_attempts: h.unknown_attempts,
    })
}

/// Hands each call of a history file to `f` in file order, a line at a time (memory
/// holds one line); returns how many there were. Errors name the file and the line.
pub fn each_event(path: &Path, mut f: impl FnMut(Event)) -> Result<u64, String> {
    use std::io::BufRead as _;
    let at = |e: String| format!("{}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut n = 0u64;
    for (i, line) in std::io::BufReader::with_capacity(1 << 16, file).lines().enumerate() {
        let line = line.map_err(|e| at(format!("line {}: {e}", i + 1)))?;
        if line.trim().is_empty() {
            continue;
        }
        let h: HistoryEvent = serde_json::from_str(&line).map_err(|e| at(format!("line {}: {e}", i + 1)))?;
        f(event(h).map_err(|e| at(format!("line {}: {e}", i + 1)))?);
        n += 1;
    }
    Ok(n)
}

/// Every histogram of an HDR interval log, summed by tag.
pub fn read_hlog(path: &Path) -> Result<BTreeMap<String, Histogram<u64>>, String> {
    let at = |e: String| format!("{}: {e}", path.display());
    let text = std::fs::read(path).map_err(|e| at(format!("cannot read: {e}")))?;
    let mut d = Deserializer::new();
    let mut out: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    for entry in IntervalLogIterator::new(&text) {
        let entry = entry.map_err(|e| at(format!("not an HDR interval log: {e:?}")))?;
        if let LogEntry::Interval(h) = entry {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(h.encoded_histogram())
                .map_err(|e| at(format!("bad base64: {e}")))?;
            let hist: Histogram<u64> =
                d.deserialize(&mut &bytes[..]).map_err(|e| at(format!("bad histogram: {e:?}")))?;
            let tag = h.tag().map(|t| t.as_str().to_string()).unwrap_or_default();
            match out.get_mut(&tag) {
                Some(sum) => sum.add(&hist).map_err(|e| at(format!("cannot add: {e:?}")))?,
                None => {
                    let mut sum = empty_lag();
                    sum.add(&hist).map_err(|e| at(format!("cannot add: {e:?}")))?;
                    out.insert(tag, sum);
                }
            }
        }
    }
    Ok(out)
}

/// One cell merged over the agents.
pub struct MergedCell {
    /// The counts and histograms; its `history` is empty (the calls are in `history`).
    pub load: LoadResult,
    /// Every agent's calls on one timeline: in memory up to `SPILL_AFTER`, spilled past it.
    pub history: History,
    pub figures: Vec<(String, f64)>,
    pub settle_s: f64,
    pub settle_error: Option<String>,
    pub agents: AgentsReport,
}

/// Merges cell `namespace` over `agents`. `stages` are the plan's (undivided) stages.
pub fn merge_cell(agents: &[Agent], namespace: &str, stages: &[Stage]) -> Result<MergedCell, String> {
    let mut results: Vec<StageResult> = stages
        .iter()
        .map(|s| StageResult {
            stage: s.clone(),
            elapsed: Duration::ZERO,
            started: 0,
            scheduled: 0,
            dropped: 0,
            late: 0,
            ops: empty_ops(),
            lag_us: empty_lag(),
        })
        .collect();
    let (mut histories, mut shares, mut figures) = (Vec::new(), Vec::new(), Vec::new());
    let (mut settle_s, mut settle_error, mut errors, mut dropped) = (0f64, None, Vec::new(), 0);
    for a in agents {
        let p = &a.partial;
        let who = format!("agent {}/{}", p.k, p.n);
        let c = p
            .cells
            .iter()
            .find(|c| c.namespace == namespace)
            .ok_or_else(|| format!("{who} has no output for {namespace}"))?;
        add_stages(&mut results, c, &a.dir.join(&c.dir).join("latency.hlog"), &who)?;
        let placement =
            Placement { k: p.k, t0_server_us: c.t0_local_us + p.clock.offset_us, widen_us: p.clock.uncertainty_us };
        histories.push((who, a.dir.join(&c.dir).join("history.jsonl"), placement, c.history_events));
        shares.push(share(p, c));
        figures.extend(c.figures.iter().cloned());
        settle_s = settle_s.max(c.settle_s);
        settle_error = settle_error.or_else(|| c.settle_error.clone());
        dropped += c.history_dropped;
        for m in &c.error_samples {
            if errors.len() < MAX_ERROR_SAMPLES && !errors.contains(m) {
                errors.push(m.clone());
            }
        }
    }
    let history = merge_histories(&histories, SPILL_AFTER)?;
    let mut ops = empty_ops();
    let mut elapsed = Duration::ZERO;
    for r in results.iter().filter(|r| r.stage.measured) {
        for (t, part) in ops.iter_mut().zip(&r.ops) {
            t.merge(part);
        }
        elapsed += r.elapsed;
    }
    let load = LoadResult {
        ops,
        elapsed,
        error_samples: errors,
        stages: results,
        history: Vec::new(),
        history_dropped: dropped,
        // Each agent's CPU is its own host's: not summed into one figure.
        client_cpu: None,
    };
    let clock_uncertainty_ms = shares.iter().map(|s: &AgentShare| s.clock_uncertainty_ms).fold(0.0, f64::max);
    Ok(MergedCell {
        load,
        history,
        figures,
        settle_s,
        settle_error,
        agents: AgentsReport { agents: shares, clock_uncertainty_ms },
    })
}

/// Every agent's history file (who, path, placement, the calls its partial report
/// counted) streamed onto one timeline through a `HistoryStore`: memory holds at most
/// `spill_after` calls and the spill queue's chunks, never the agents' histories whole.
fn merge_histories(agents: &[(String, PathBuf, Placement, u64)], spill_after: usize) -> Result<History, String> {
    const CHUNK: usize = 4096;
    let base = timeline_base(&agents.iter().map(|a| a.2).collect::<Vec<_>>());
    let store = HistoryStore::new(spill_after);
    for (who, path, placement, expected) in agents {
        let mut chunk = Vec::with_capacity(CHUNK);
        let n = each_event(path, |e| {
            chunk.push(place(base, placement, e));
            if chunk.len() == CHUNK {
                store.accept(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK)));
            }
        })?;
        store.accept(chunk);
        if n != *expected {
            return Err(format!("{who}: {n} calls in its history, {expected} in its partial report"));
        }
    }
    store.finish()
}

/// Adds one agent's stages (counts from its partial report, histograms from its log).
fn add_stages(results: &mut [StageResult], c: &CellPartial, hlog: &Path, who: &str) -> Result<(), String> {
    if c.stages.len() != results.len() {
        return Err(format!("{who} ran {} stages, the plan has {}", c.stages.len(), results.len()));
    }
    let mut hists = read_hlog(hlog)?;
    let mut take = |name: String| hists.remove(&name).ok_or_else(|| format!("{}: no histogram {name}", hlog.display()));
    for (i, (r, s)) in results.iter_mut().zip(&c.stages).enumerate() {
        r.elapsed = r.elapsed.max(Duration::from_secs_f64(s.elapsed_s));
        r.started += s.started;
        r.scheduled += s.scheduled;
        r.dropped += s.dropped;
        r.late += s.late;
        if s.ops.len() != OpKind::ALL.len() || !s.ops.iter().all(classes_match) {
            return Err(format!("{who}: stage {i} has counts of another counterlab version"));
        }
        for ((k, t), counts) in OpKind::ALL.iter().zip(r.ops.iter_mut()).zip(&s.ops) {
            counts.add_to(t);
            add(&mut t.latency_us, &take(tag(i, Some(*k), "lat"))?)?;
            add(&mut t.service_us, &take(tag(i, Some(*k), "svc"))?)?;
        }
        add(&mut r.lag_us, &take(tag(i, None, "lag"))?)?;
    }
    Ok(())
}

fn add(into: &mut Histogram<u64>, h: &Histogram<u64>) -> Result<(), String> {
    into.add(h).map_err(|e| format!("cannot merge histograms: {e:?}"))
}

fn share(p: &Partial, c: &CellPartial) -> AgentShare {
    AgentShare {
        segment: format!("{}/{}", p.k, p.n),
        host: p.host.clone(),
        users: c.users,
        workers: c.workers,
        ops: c.ops_total,
        throughput_ops_per_s: c.throughput_ops_per_s,
        clock_offset_ms: p.clock.offset_us as f64 / 1e3,
        clock_uncertainty_ms: p.clock.uncertainty_us as f64 / 1e3,
    }
}

#[cfg(test)]
mod tests {
    use counterlab_core::{CheckInput, Context, Guarantee, ReadSource, SeedSpec, check_reads_from, classify};

    use super::*;

    fn call(op: OpKind, invoke_us: u64, complete_us: u64, observed: i64) -> Event {
        let outcome = Outcome::Ok;
        let id = if op == OpKind::Create { 99 } else { 0 };
        Event {
            worker: 0,
            op,
            user: 1,
            id,
            invoke_us,
            complete_us,
            outcome,
            observed,
            attempts: 1,
            unknown_attempts: 0,
        }
    }

    /// The named anomalies of a history where user 1 starts with 5 unread and ends with 6.
    fn anomalies(events: &[Event]) -> Vec<&'static str> {
        let reads = check_reads_from(events, &|_| 5, ReadSource::Counter);
        let rows = [CheckInput { user: 1, counter: Some(6), truth: 6 }];
        let seed = SeedSpec { n_users: 1, notifications_per_user: 10, initial_read_per_user: 5 };
        let cx = Context {
            guarantee: Guarantee::Exact,
            lost_flushes: 0,
            double_flushes: 0,
            double_applies: (0, 0),
            reconciler: false,
            seed,
            failover_us: None,
        };
        classify(events, &rows, Some(&reads), &[], cx).into_iter().map(|a| a.name).collect()
    }

    /// Agent 1 creates a notification of user 1 (server time 1000-2000 µs after both
    /// started); agent 2, whose clock runs 5 ms behind, reads 6 at server time 3000.
    fn agents(offset_2_us: i64, widen_us: u64) -> Vec<(Placement, Vec<Event>)> {
        let t0 = 1_000_000_000;
        vec![
            (Placement { k: 1, t0_server_us: t0, widen_us }, vec![call(OpKind::Create, 1000, 2000, 1)]),
            (
                Placement { k: 2, t0_server_us: (t0 - 5000) + offset_2_us, widen_us },
                vec![call(OpKind::ReadCount, 3000, 3100, 6)],
            ),
        ]
    }

    /// The agents' calls placed on one timeline, by completion (as the checker sorts).
    fn one_timeline(parts: Vec<(Placement, Vec<Event>)>) -> Vec<Event> {
        let base = timeline_base(&parts.iter().map(|p| p.0).collect::<Vec<_>>());
        let mut out: Vec<Event> =
            parts.into_iter().flat_map(|(p, events)| events.into_iter().map(move |e| place(base, &p, e))).collect();
        counterlab_core::sort_history(&mut out);
        out
    }

    #[test]
    fn measured_offsets_and_widening_leave_no_false_anomaly_a_wrong_offset_would() {
        assert_eq!(anomalies(&one_timeline(agents(5000, 300))), Vec::<&str>::new());
        // The same read placed with the agent's own clock (offset 0, no widening) comes
        // before the create it saw: the checker names it.
        assert_eq!(anomalies(&one_timeline(agents(0, 0))), vec!["read_out_of_bounds"]);
        // Widening alone covers an offset error within the uncertainty.
        assert_eq!(anomalies(&one_timeline(agents(4000, 600))), Vec::<&str>::new());
    }

    /// Two agents' history files (4000 and 3000 calls over 40 users) in `dir`.
    fn agent_files(dir: &Path) -> Vec<(String, PathBuf, Placement, u64)> {
        (1..=2u32)
            .map(|k| {
                let events: Vec<Event> = (0..(5 - k as u64) * 1000)
                    .map(|i| Event {
                        user: (i % 40) as i64 + 1,
                        worker: (i % 4) as u32,
                        ..call(OpKind::ReadCount, i * 10, i * 10 + 7, 5)
                    })
                    .collect();
                let path = dir.join(format!("h{k}.jsonl"));
                let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
                counterlab_report::write_history_to(&events, &mut f).unwrap();
                let p = Placement { k, t0_server_us: 1_000_000 + k as i64 * 333, widen_us: 50 };
                (format!("agent {k}/2"), path, p, events.len() as u64)
            })
            .collect()
    }

    #[test]
    fn agents_histories_stream_onto_one_timeline_and_spill_past_the_bound() {
        use counterlab_core::HistoryParts as _;
        let dir = tempfile::tempdir().unwrap();
        let files = agent_files(dir.path());
        let History::Memory(whole) = merge_histories(&files, usize::MAX).unwrap() else { panic!("in memory") };
        assert_eq!(whole.len(), 7000);
        // Past a bound of 1000 calls the same merge goes to part files, the same calls in them.
        let mut spilled = merge_histories(&files, 1000).unwrap();
        assert!(matches!(spilled, History::Spilled(_)), "spilled past the bound");
        let mut parts: Vec<Event> = Vec::new();
        for i in 0..spilled.parts() {
            parts.extend(spilled.load(i).unwrap().iter().copied());
        }
        let key = |e: &Event| (e.worker, e.invoke_us, e.complete_us, e.user);
        let (mut a, mut b) = (whole.clone(), parts);
        a.sort_by_key(key);
        b.sort_by_key(key);
        assert_eq!(a, b);
        // A history whose length disagrees with its partial report is refused.
        let mut wrong = files.clone();
        wrong[1].3 += 1;
        let e = merge_histories(&wrong, usize::MAX).map(|_| ()).unwrap_err();
        assert_eq!(e, "agent 2/2: 3000 calls in its history, 3001 in its partial report");
    }

    #[test]
    fn the_timeline_keeps_agents_workers_apart() {
        let merged = one_timeline(agents(5000, 0));
        assert_eq!(merged.iter().map(|e| e.worker).collect::<Vec<_>>(), vec![0, 1 << 20]);
        assert_eq!((merged[0].invoke_us, merged[1].invoke_us), (1000, 3000));
    }
}
