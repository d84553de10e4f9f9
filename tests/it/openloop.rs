//! Open loop on the real PostgreSQL: a stall shows in latency measured from the intended
//! start and not in service time, with drops and late ops counted; the achieved rate
//! tracks the target below saturation (judged on the recorded series); the HDR interval
//! log holds exactly the ops the report counts; `compare` flags a planted regression; a
//! closed loop stalled by a pause is named as stalled in the decision.

use std::process::Command;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use counterlab::scenario::{Overrides, parse};
use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

use crate::util;

const BASE: &str = "strategies = [\"conditional-update\"]\nbackends = [\"postgres\"]\n\
    [data]\nusers = 300\nnotifications_per_user = 20\n";

/// The text of a strategy run's history file written under `dir`.
fn h_file(dir: &std::path::Path, s: &counterlab_report::StrategyReport) -> String {
    let rel = s.history.file.as_deref().expect("a history file");
    let name = rel.strip_prefix("history/").unwrap_or(rel);
    std::fs::read_to_string(dir.join(name)).unwrap()
}

fn plan(extra: &str) -> counterlab::scenario::RunPlan {
    let src = format!("{BASE}{extra}");
    parse("openloop.toml", &src, "openloop", &Overrides::default(), &util::known(), 11)
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_shows_from_the_intended_start_and_not_in_service_time() {
    crate::require!(Postgres);
    let _alone = util::alone().await;
    // 500 ops/s for 4 s with at most 4 in flight; every op stalls 400 ms at 1.5 s. About
    // 200 ops are scheduled during the stall: those waiting past max_wait (250 ms) are
    // dropped, the rest start late. Only the (at most 4) ops that entered the stall have
    // a long service time: well under 1% of the ~1500 mark_reads.
    let p = plan(
        "[workload]\nworkers = 4\nrate = 500\nduration_s = 4\nmax_wait_ms = 250\n\
         [workload.mix]\nmark_read = 3\ncreate = 1\n\
         [[faults]]\nkind = \"pause\"\nat_ms = 1500\nduration_ms = 400\n\
         [[thresholds]]\nmetric = \"max_drop_rate\"\nlimit = 0.01\n",
    );
    // The history gives each call's actual start and end: its service time, whatever
    // the machine's load did to the percentiles.
    let dir = crate::cli::tempdir("stall");
    let mut opts = util::options(true, None);
    opts.history_dir = Some(dir.to_path_buf());
    let report = counterlab::run::run_plan(&p, &opts, &mut |_| {}).await.expect("run succeeds");
    let s = &report.strategies[0];
    let stored = util::stored_drift_and_drop(&s.backend.name(), &s.namespace, None).await;
    assert!(stored.iter().all(|(_, c, t)| c == t), "conditional-update drifted under a stall");
    assert_eq!(s.faults[0].fired_at_ms.map(|t| t >= 1500), Some(true), "{:?}", s.faults);
    let mr = &s.ops["mark_read"];
    assert!(mr.count > 1000, "{mr:?}");
    // From the intended start, the ~50 mark_reads that waited 100-250 ms for a slot
    // (over 1% of them) put the stall into p99.
    assert!(mr.latency_us.p99 >= 100_000, "corrected p99 {} us does not show the 400 ms stall", mr.latency_us.p99);
    // In service time only the calls that entered the stall are long: each of the 4
    // workers is held by the call it is in, so at most 4 calls around the stall spend
    // 300 ms or more inside the strategy. (No bound on the other calls' service time: on
    // a loaded machine a stalled disk can hold a commit that long too, and a CI run saw
    // 6 long calls in all. The stall's window allows 100 ms each side: the faults' clock
    // starts just before the history's.)
    let file = h_file(&dir, s);
    let events = counterlab_report::read_history(&file).unwrap();
    let calls: Vec<(u64, u64)> =
        events.iter().filter(|e| e.op == "mark_read").map(|e| (e.invoke_us, e.complete_us)).collect();
    let service: Vec<u64> = calls.iter().map(|(i, c)| c - i).collect();
    assert_eq!(service.len() as u64, mr.count, "every mark_read call is in the history");
    let fired = s.faults[0].fired_at_ms.unwrap() * 1000;
    let (from, to) = (fired.saturating_sub(100_000), fired + 500_000);
    let long: Vec<&(u64, u64)> = calls.iter().filter(|(i, c)| c - i >= 300_000).collect();
    let in_stall = long.iter().filter(|(i, c)| *i < to && *c > from).count();
    assert!(
        (1..=4).contains(&in_stall),
        "{in_stall} mark_read calls around the stall spent >= 300 ms in service (the stall holds at most 4); all long calls: {long:?}"
    );
    // The report's service-time figures are those of the recorded calls, not of the
    // time from the intended start: its p99 sits at rank 99% of the recorded service
    // times (within the histogram's 3 significant digits and the microseconds between
    // the two clocks; a recorded call is timed inside the report's measurement).
    let (n, v) = (service.len() as f64, mr.uncorrected_latency_us.p99);
    let at_most = service.iter().filter(|&&us| us <= v).count() as f64;
    let below = service.iter().filter(|&&us| us + 1_000 + v / 500 < v).count() as f64;
    assert!(
        at_most + 1.0 >= 0.99 * n && below < 0.99 * n,
        "uncorrected p99 {v} us: {at_most} <= it, {below} below, of {n}"
    );
    let max = *service.iter().max().unwrap();
    let got = mr.uncorrected_latency_us.max;
    assert!(got.abs_diff(max) <= max / 500 + 1_000, "uncorrected max {got} us vs recorded {max} us");
    assert!(got >= 300_000, "an op that entered the stall: {mr:?}");
    let _ = std::fs::remove_dir_all(&dir);
    let ol = s.open_loop.as_ref().expect("open-loop figures");
    assert!(ol.dropped > 0 && ol.late > 0, "{ol:?}");
    assert_eq!(ol.scheduled, ol.issued + ol.dropped, "{ol:?}");
    assert_eq!(ol.issued, s.ops_total + s.ops.values().map(|o| o.skipped).sum::<u64>());
    // The series carries the drops, and the point covering the stall its p99.
    assert_eq!(s.series.iter().map(|p| p.dropped).sum::<u64>(), ol.dropped);
    assert!(s.series.iter().any(|p| p.p99_us >= 100_000), "{:?}", s.series);
    // ~140 of ~2000 dropped: the 1% drop-rate threshold is breached and says so.
    let t = &s.thresholds[0];
    assert!(!t.passed && t.value > 0.01 && t.detail.contains("max_drop_rate"), "{t:?}");
    assert_eq!(report.thresholds_breached, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_achieved_rate_tracks_the_target_below_saturation() {
    crate::require!(Postgres);
    let _alone = util::alone().await;
    // 300 ops/s is a tenth of what conditional-update sustains here.
    let p = plan(
        "[workload]\nworkers = 8\nwarmup_s = 1\narrival = \"poisson\"\n\
         [[workload.stages]]\nname = \"flat\"\nduration_s = 3\nrate = 300\n\
         [[workload.stages]]\nname = \"up\"\nduration_s = 3\nrate = 300\ntarget = 600\n\
         [workload.mix]\nmark_read = 1\nread_count = 1\n",
    );
    let report = util::run_kept(&p, None).await;
    let s = &report.strategies[0];
    util::stored_drift_and_drop(&s.backend.name(), &s.namespace, None).await;
    let names: Vec<&str> = s.stages.iter().map(|st| st.name.as_str()).collect();
    assert_eq!(names, ["warmup", "flat", "up"]);
    assert!(!s.stages[0].measured && s.stages[1].measured);
    for (stage, target) in [("flat", 300.0), ("up", 450.0)] {
        let points: Vec<_> = s.series.iter().filter(|p| p.phase == stage).collect();
        let ops: u64 = points.iter().map(|p| p.ops).sum();
        let secs: f64 = points.iter().map(|p| p.dt_s).sum();
        assert!(secs > 2.5, "{stage}: {points:?}");
        let rate = ops as f64 / secs;
        // Poisson arrivals over ~3 s vary by about 1/sqrt(900..1350) = 3%: the bound is
        // the schedule's own noise plus a margin, not the driver's.
        assert!((rate / target - 1.0).abs() < 0.10, "{stage}: achieved {rate:.1} ops/s vs {target}");
        assert_eq!(points.iter().map(|p| p.dropped).sum::<u64>(), 0, "{stage}");
    }
    let ol = s.open_loop.as_ref().unwrap();
    // Scheduled vs issued over the whole measured load: what the driver itself controls.
    assert_eq!(ol.dropped, 0, "{ol:?}");
    let issued_over_scheduled = ol.issued as f64 / ol.scheduled as f64;
    assert!(issued_over_scheduled > 0.98, "{ol:?}");
    assert!(ol.schedule_lag_us.p50 < 5_000, "median schedule lag {} us", ol.schedule_lag_us.p50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_closed_loop_is_named_in_the_decision() {
    crate::require!(Postgres);
    let _heavy = util::heavy().await;
    // Every op stalls at its entry for 3 s from 1 s into a 6 s closed loop: at least two
    // whole sampling intervals complete no op, whatever the machine's load.
    let p = plan(
        "[workload]\nworkers = 4\nduration_s = 6\n[workload.mix]\nmark_read = 3\ncreate = 1\n\
         [[faults]]\nkind = \"pause\"\nat_ms = 1000\nduration_ms = 3000\n",
    );
    let report = util::run_kept(&p, None).await;
    let s = &report.strategies[0];
    let stored = util::stored_drift_and_drop(&s.backend.name(), &s.namespace, None).await;
    assert!(stored.iter().all(|(_, c, t)| c == t), "conditional-update drifted under a pause");
    let fired = s.faults[0].fired_at_ms.expect("the pause fired") as f64 / 1e3;
    let stall = s.stall.as_ref().expect("the pause is named as a stall");
    let [from, to] = stall.idle.expect("a window with no completed op");
    // The window is whole sampling intervals that completed nothing, inside the pause
    // (the series' and the faults' clocks start within a sampling interval of each other).
    assert!(to - from >= counterlab_report::decision::stall::STALL_S, "{stall:?}");
    assert!(from < fired + 3.0 && to > fired, "window {from}-{to} s vs a pause from {fired} s for 3 s");
    // A point covers (t_s - dt_s, t_s]; the window's start is a point's t_s - dt_s, which
    // in floating point can land a hair below the previous point's t_s: points are taken
    // by where their interval starts, within a millisecond.
    let inside = |p: &&counterlab_report::SeriesPoint| p.t_s - p.dt_s >= from - 1e-3 && p.t_s <= to + 1e-3;
    let idle: Vec<_> = s.series.iter().filter(inside).collect();
    assert!(!idle.is_empty() && idle.iter().all(|p| p.ops == 0 && p.phase != "settle"), "{idle:?}");
    // Named beside the throughput, at the end of the sentence and in report.json.
    let words = stall.words();
    assert!(words.starts_with("no op completed for "), "{words}");
    let g = &counterlab_report::decision::decide(&report)[0];
    assert!(counterlab_report::decision::relative_text(&g.rows[0]).ends_with(" stalled"));
    assert!(g.sentence.ends_with(&format!("conditional-update's load stalled: {words}.")), "{}", g.sentence);
    let json: serde_json::Value = serde_json::from_str(&counterlab_report::render_json(&report)).unwrap();
    assert_eq!(json["decision"]["groups"][0]["rows"][0]["stall"], words.as_str());
    let back: counterlab_report::Report = serde_json::from_value(json).unwrap();
    assert_eq!(back.strategies[0].stall.as_ref(), Some(stall), "the stall reads back from report.json");
    let terminal = counterlab_report::render_terminal_width(&report, 80);
    assert!(terminal.contains("stalled"), "{terminal}");
}

/// Sums every histogram of an interval log, by tag.
fn read_log(text: &str) -> std::collections::BTreeMap<String, Histogram<u64>> {
    let mut d = Deserializer::new();
    let mut out = std::collections::BTreeMap::new();
    for entry in IntervalLogIterator::new(text.as_bytes()) {
        if let LogEntry::Interval(h) = entry.expect("well-formed log line") {
            let bytes = STANDARD.decode(h.encoded_histogram()).expect("base64");
            let hist: Histogram<u64> = d.deserialize(&mut &bytes[..]).expect("a V2 histogram");
            let tag = h.tag().map(|t| t.as_str().to_string()).unwrap_or_default();
            out.entry(tag).or_insert_with(|| Histogram::new(3).unwrap()).add(&hist).unwrap();
        }
    }
    out
}

#[test]
fn the_hdr_log_holds_exactly_the_ops_of_the_report_and_compare_flags_a_regression() {
    crate::require!(Postgres);
    let dir = crate::cli::tempdir("hdr");
    let f = dir.join("small.toml");
    std::fs::write(
        &f,
        format!(
            "{BASE}[workload]\nworkers = 4\nrate = 400\nduration_s = 2\n\
             [workload.mix]\nmark_read = 2\ncreate = 1\nread_count = 1\n"
        ),
    )
    .unwrap();
    let a = dir.join("a");
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", f.to_str().unwrap(), "--quiet", "--out", a.to_str().unwrap()])
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("report.json")).unwrap()).unwrap();
    let s = &json["strategies"][0];
    let log = std::fs::read_to_string(a.join(s["hdr_log"].as_str().unwrap())).unwrap();
    assert!(log.contains("#[Histogram log format version 1.3]") && log.contains("#[BaseTime: "), "{log}");
    let by_tag = read_log(&log);
    for (op, o) in s["ops"].as_object().unwrap() {
        let count = o["count"].as_u64().unwrap();
        // The log has every measured op (and no warm-up here), each exactly once.
        assert_eq!(by_tag.get(op).map_or(0, |h| h.len()), count, "{op}");
        if count > 0 {
            let max = by_tag[op].max();
            let reported = o["latency_us"]["max"].as_u64().unwrap();
            assert!(by_tag[op].equivalent(max, reported), "{op}: log max {max} vs report {reported}");
        }
    }

    // Plant a regression: B is A with half the throughput and a 10x slower p99.
    let mut b: serde_json::Value = json.clone();
    let sb = &mut b["strategies"][0];
    let tput = sb["throughput_ops_per_s"].as_f64().unwrap();
    sb["throughput_ops_per_s"] = serde_json::json!(tput / 2.0);
    let p99 = sb["ops"]["mark_read"]["latency_us"]["p99"].as_u64().unwrap();
    sb["ops"]["mark_read"]["latency_us"]["p99"] = serde_json::json!(p99 * 10);
    let b_path = dir.join("b.json");
    std::fs::write(&b_path, serde_json::to_string(&b).unwrap()).unwrap();
    let a_path = a.join("report.json");
    let cmp = |x: &std::path::Path, y: &std::path::Path, extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
            .args(["compare", x.to_str().unwrap(), y.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let (code, out) = cmp(&a_path, &a_path, &["--fail-if-slower", "1"]);
    assert_eq!((code, out.contains("no regression")), (Some(0), true), "{out}");
    let (code, out) = cmp(&a_path, &b_path, &["--fail-if-slower", "20"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("conditional-update on postgres at read-committed: throughput"), "{out}");
    assert!(out.contains("-50.0%"), "{out}");
    assert!(out.contains("mark_read: p99"), "{out}");
    // Without a limit a slowdown is shown but not fatal.
    assert_eq!(cmp(&a_path, &b_path, &[]).0, Some(0));
    // Not a report: exit 2 with the file named.
    let (code, _) = cmp(&f, &a_path, &[]);
    assert_eq!(code, Some(2));
    std::fs::remove_dir_all(&dir).ok();
}
