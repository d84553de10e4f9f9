//! The distributed phases through the binary: prepare, four `load` agents at once,
//! check, teardown; the merge against the agents' own files and a one-process run; a
//! zoo mutant caught across agents; a skewed agent clock measured; bad input refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

use base64::Engine as _;
use counterlab_report::Report;

use crate::redis::redis_url;
use crate::util;

const SECRET: &str = "test-run-secret-0123456789";

/// Three designs, hot users (so direct-update's duplicate mark_reads race), a fixed op
/// budget.
const SCENARIO: &str = r#"
name = "dist"
seed = 11
strategies = ["direct-update", "conditional-update", "zset-buffer"]
backends = ["postgres"]
isolation = ["read-committed"]

[data]
users = 40
notifications_per_user = 30

[workload]
workers = 8
ops = 2400
dup_k = 4

[workload.mix]
create = 20
mark_read = 30
mark_read_dup = 15
delete = 5
mark_all_read = 5
read_count = 25
"#;

fn counterlab(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_counterlab"));
    c.args(args)
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .env("COUNTERLAB_REDIS_URL", redis_url())
        .env("COUNTERLAB_RUN_SECRET", SECRET)
        .env_remove("COUNTERLAB_TEST_CLOCK_SKEW_MS");
    c
}

fn ok(o: &Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{what}: {:?}\n{err}\n{}", o.status, String::from_utf8_lossy(&o.stdout));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// prepare, then `n` agents at once (agent `skewed`, if any, with a clock skew), then
/// check into `dir/report`; the handle and check's output.
fn distributed(dir: &Path, scenario: &Path, n: u32, skewed: Option<(u32, i64)>) -> (PathBuf, Output) {
    let handle = dir.join("handle.json");
    let (s, h) = (scenario.to_str().unwrap(), handle.to_str().unwrap());
    ok(&counterlab(&["prepare", s, "--handle", h]).output().unwrap(), "prepare");
    let out = dir.join("agents");
    let agents: Vec<_> = (1..=n)
        .map(|k| {
            let mut c = counterlab(&["load", "--handle", h, "--segment", &format!("{k}/{n}"), "--out"]);
            c.arg(&out);
            if let Some((_, ms)) = skewed.filter(|(a, _)| *a == k) {
                c.env("COUNTERLAB_TEST_CLOCK_SKEW_MS", ms.to_string());
            }
            c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for (k, a) in agents.into_iter().enumerate() {
        ok(&a.wait_with_output().unwrap(), &format!("load {}/{n}", k + 1));
    }
    let rep = dir.join("report");
    let check = counterlab(&["check", "--handle", h, "--from", out.to_str().unwrap(), "--out", rep.to_str().unwrap()])
        .output()
        .unwrap();
    (handle, check)
}

fn teardown(handle: &Path) {
    ok(&counterlab(&["teardown", "--handle", handle.to_str().unwrap()]).output().unwrap(), "teardown");
}

fn report(path: &Path) -> Report {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every histogram of an interval log, summed by tag.
fn hlog(path: &Path) -> std::collections::BTreeMap<String, Histogram<u64>> {
    let text = std::fs::read(path).unwrap();
    let mut d = Deserializer::new();
    let mut out = std::collections::BTreeMap::new();
    for entry in IntervalLogIterator::new(&text) {
        if let LogEntry::Interval(h) = entry.unwrap() {
            let bytes = base64::engine::general_purpose::STANDARD.decode(h.encoded_histogram()).unwrap();
            let hist: Histogram<u64> = d.deserialize(&mut &bytes[..]).unwrap();
            let tag = h.tag().map(|t| t.as_str().to_string()).unwrap_or_default();
            out.entry(tag).or_insert_with(|| Histogram::new(3).unwrap()).add(&hist).unwrap();
        }
    }
    out
}

/// What is left of run `run_id` on PostgreSQL (schemas, roles) and Redis (keys, users).
async fn leftovers(run_id: &str) -> Vec<String> {
    let pattern = format!("cl_{run_id}_%");
    let admin = util::admin().await;
    let mut left: Vec<String> =
        sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE $1 UNION ALL SELECT rolname::text FROM pg_roles WHERE rolname LIKE $1")
            .bind(&pattern)
            .fetch_all(&admin)
            .await
            .unwrap();
    let mut r = crate::redis::redis_conn().await;
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(counterlab_strategies::redis_run_pattern(run_id)).query_async(&mut r).await.unwrap();
    let users: Vec<String> = redis::cmd("ACL").arg("USERS").query_async(&mut r).await.unwrap();
    left.extend(keys);
    left.extend(users.into_iter().filter(|u| u.starts_with(&format!("cl_{run_id}_"))));
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_agents_merge_into_one_check_that_matches_one_process() {
    crate::require!(Postgres, Redis);
    let _heavy = util::heavy().await;
    let dir = util::tempdir("dist");
    let scenario = dir.join("dist.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let (handle, check) = tokio::task::block_in_place(|| distributed(&dir, &scenario, 4, None));
    let h: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&handle).unwrap()).unwrap();
    let run_id = h["run_id"].as_str().unwrap().to_string();
    assert!(!std::fs::read_to_string(&handle).unwrap().contains(SECRET), "no secret in the handle");
    ok(&check, "check");
    let merged = report(&dir.join("report/report.json"));
    let agents_dir = dir.join("agents");
    for row in &merged.strategies {
        let a = row.agents.as_ref().expect("a distributed row names its agents");
        assert_eq!(a.agents.len(), 4, "{}", row.strategy);
        assert_eq!(row.ops_total, a.agents.iter().map(|x| x.ops).sum::<u64>(), "{}: merged ops", row.strategy);
        assert_eq!(a.agents.iter().map(|x| x.users).sum::<u64>(), 40);
        let short = row.namespace.strip_prefix(&format!("cl_{run_id}_")).unwrap();
        // The merged histogram is every agent's added, and counts every recorded op.
        let mut calls = std::collections::BTreeMap::<String, u64>::new();
        let mut sum = std::collections::BTreeMap::<String, Histogram<u64>>::new();
        for k in 1..=4 {
            let cell = agents_dir.join(format!("agent-{k}-of-4")).join(short);
            for line in std::fs::read_to_string(cell.join("history.jsonl")).unwrap().lines() {
                let e: counterlab_report::HistoryEvent = serde_json::from_str(line).unwrap();
                *calls.entry(e.op).or_default() += 1;
            }
            for (tag, hist) in hlog(&cell.join("latency.hlog")) {
                if let Some(kind) = tag.strip_prefix("s0.").and_then(|t| t.strip_suffix(".lat")) {
                    sum.entry(kind.to_string()).or_insert_with(|| Histogram::new(3).unwrap()).add(&hist).unwrap();
                }
            }
        }
        let merged_log = hlog(&dir.join("report").join(row.hdr_log.as_ref().expect("the merged HDR log")));
        for (kind, op) in &row.ops {
            let recorded = calls.get(kind).copied().unwrap_or(0) / if kind == "mark_read_dup" { 4 } else { 1 };
            let m = merged_log.get(kind).map_or(0, |h| h.len());
            assert_eq!(m, recorded, "{} {kind}: merged histogram vs recorded calls", row.strategy);
            assert_eq!(op.count, m, "{} {kind}: report count", row.strategy);
            if let (Some(a), Some(b)) = (merged_log.get(kind), sum.get(kind)) {
                let ea: Vec<_> = a.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect();
                let eb: Vec<_> = b.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect();
                assert_eq!(ea, eb, "{} {kind}: the merge is exact", row.strategy);
            }
        }
    }
    teardown(&handle);
    assert_eq!(leftovers(&run_id).await, Vec::<String>::new());
    // The same scenario in one process: the same verdicts.
    let one = dir.join("one");
    let o =
        counterlab(&["run", scenario.to_str().unwrap(), "--quiet", "--out", one.to_str().unwrap()]).output().unwrap();
    ok(&o, "run");
    let single = report(&one.join("report.json"));
    for s in &single.strategies {
        let d = merged.strategies.iter().find(|d| d.strategy == s.strategy).unwrap();
        let (vs, vd) = (s.check.label(), d.check.label());
        let verdicts = (vs.as_str(), vd.as_str());
        match s.strategy.as_str() {
            "direct-update" => assert_eq!(verdicts, ("drift-expected", "drift-expected"), "direct-update drifts"),
            _ => assert_eq!(verdicts, ("pass", "pass"), "{} is exact", s.strategy),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zoo_mutant_is_caught_across_agents() {
    crate::require!(Postgres, Redis);
    let _heavy = util::heavy().await;
    let dir = util::tempdir("dist-zoo");
    let zoo = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/zoo/naive-read-check-write.toml");
    let text = std::fs::read_to_string(zoo).unwrap().replace("duration_s = 1.5", "duration_s = 1");
    let scenario = dir.join("zoo.toml");
    std::fs::write(&scenario, format!("backends = [\"postgres\"]\n{text}")).unwrap();
    let (handle, check) = tokio::task::block_in_place(|| distributed(&dir, &scenario, 2, None));
    teardown(&handle);
    let r = report(&dir.join("report/report.json"));
    let names: Vec<&str> = r.strategies[0].anomalies.iter().map(|a| a.name.as_str()).collect();
    assert!(names.contains(&"double_decrement"), "{names:?}");
    assert_eq!(check.status.code(), Some(0), "the design is declared racy: its verdict holds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skewed_agent_clock_is_measured_and_gives_no_false_anomaly() {
    crate::require!(Postgres, Redis);
    let _heavy = util::heavy().await;
    let dir = util::tempdir("dist-skew");
    let scenario = dir.join("skew.toml");
    let text =
        SCENARIO.replace(r#"["direct-update", "conditional-update", "zset-buffer"]"#, r#"["conditional-update"]"#);
    std::fs::write(&scenario, text).unwrap();
    let (handle, check) = tokio::task::block_in_place(|| distributed(&dir, &scenario, 2, Some((2, -7000))));
    teardown(&handle);
    ok(&check, "check");
    let r = report(&dir.join("report/report.json"));
    let row = &r.strategies[0];
    let a = row.agents.as_ref().unwrap();
    let (one, two) = (&a.agents[0], &a.agents[1]);
    // Agent 2's clock runs 7 s behind: the server's is 7 s ahead of it.
    let err = (two.clock_offset_ms - one.clock_offset_ms - 7000.0).abs();
    assert!(err <= one.clock_uncertainty_ms + two.clock_uncertainty_ms + 1.0, "{a:?}");
    assert_eq!(row.check.label(), "pass", "{:?}", row.anomalies);
    assert!(row.anomalies.is_empty() && row.history.read_violations == 0, "{:?}", row.anomalies);
    assert!(row.history.reads_checked > 0);
}

#[test]
fn bad_handles_segments_and_agent_outputs_are_one_line_errors() {
    let dir = util::tempdir("dist-bad");
    let h = dir.join("h.json");
    let err = |args: &[&str]| {
        let o = counterlab(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        // One line says what and where (the line before it says where the URLs came from).
        assert_eq!(e.lines().filter(|l| l.starts_with("error:")).count(), 1, "{e}");
        assert!(!e.contains("panicked"), "{e}");
        e
    };
    let hs = h.to_str().unwrap();
    std::fs::write(&h, r#"{"format": "counterlab-handle/9", "run_id": "x"}"#).unwrap();
    assert!(err(&["teardown", "--handle", hs]).contains("counterlab-handle/9"));
    for seg in ["5/4", "0/4"] {
        let e = err(&["load", "--handle", hs, "--segment", seg, "--out", dir.to_str().unwrap()]);
        assert!(e.contains("outside 1..=4"), "{e}");
    }
    // A valid handle (no servers needed to read it), then outputs that do not fit it.
    // At its own path: the strategy files the quickstart lists are read beside it.
    let qs = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.toml");
    let (qs, text) = (qs.to_str().unwrap(), std::fs::read_to_string(&qs).unwrap());
    let plan = counterlab::scenario::parse(
        qs,
        &text,
        "q",
        &counterlab::run::phases::handle::Source { text: text.clone(), ..Default::default() }.overrides(42),
        &util::known(),
        42,
    )
    .unwrap();
    let printed = serde_json::to_value(&plan).unwrap();
    let handle = serde_json::json!({
        "format": "counterlab-handle/2", "run_id": "20261202t000000_abcd", "prepared_at_utc": "x", "seed": 42,
        "scenario": {"path": qs, "name": "q", "text": text, "strategies": [], "backends": [], "isolation": [],
                     "workers": null, "duration_s": null, "ops": null, "rate": null, "sets": []},
        "plan": printed,
        "cells": [{"strategy": "direct-update", "backend": "postgres", "isolation": "read-committed",
                   "namespace": "cl_20261202t000000_abcd_pg_rc_direct_update", "redis": false}],
    });
    std::fs::write(&h, handle.to_string()).unwrap();
    let from = dir.join("agents");
    std::fs::create_dir_all(from.join("agent-1-of-2")).unwrap();
    let fs = from.to_str().unwrap();
    let e = err(&["check", "--handle", hs, "--from", fs, "--out", dir.join("r").to_str().unwrap()]);
    assert!(e.contains("no agent output"), "{e}");
    let partial = |run: &str, k: u32| {
        serde_json::json!({"format": "counterlab-agent/2", "run_id": run, "k": k, "n": 2, "host": "h",
                           "clock": {"start": {"local_us": 0, "server_us": 0, "rtt_us": 0},
                                     "end": {"local_us": 0, "server_us": 0, "rtt_us": 0},
                                     "offset_us": 0, "uncertainty_us": 0}, "cells": []})
        .to_string()
    };
    std::fs::write(from.join("agent-1-of-2/partial.json"), partial("20261202t000000_abcd", 1)).unwrap();
    let e = err(&["check", "--handle", hs, "--from", fs, "--out", dir.join("r").to_str().unwrap()]);
    assert!(e.contains("missing agent(s) 2 of 2"), "{e}");
    std::fs::create_dir_all(from.join("agent-2-of-2")).unwrap();
    std::fs::write(from.join("agent-2-of-2/partial.json"), partial("20261202t111111_ffff", 2)).unwrap();
    let e = err(&["check", "--handle", hs, "--from", fs, "--out", dir.join("r").to_str().unwrap()]);
    assert!(e.contains("not this handle's run 20261202t000000_abcd"), "{e}");
}

/// A second teardown of the same handle finds every cell gone and says so (exit 0), as
/// does one after a cell's namespace was removed behind its back; nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_teardown_says_nothing_was_left() {
    crate::require!(Postgres, Redis);
    let dir = util::tempdir("dist-twice");
    let scenario = dir.join("twice.toml");
    std::fs::write(&scenario, SCENARIO.replace("ops = 2400", "ops = 50")).unwrap();
    let handle = dir.join("handle.json");
    let (s, h) = (scenario.to_str().unwrap(), handle.to_str().unwrap());
    ok(&counterlab(&["prepare", s, "--handle", h]).output().unwrap(), "prepare");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&handle).unwrap()).unwrap();
    let run_id = json["run_id"].as_str().unwrap().to_string();
    let cells: Vec<String> =
        json["cells"].as_array().unwrap().iter().map(|c| c["namespace"].as_str().unwrap().to_string()).collect();
    assert_eq!(cells.len(), 3);
    // One cell removed before any teardown: the first teardown says so for it alone.
    util::drop_schema(&util::admin().await, &cells[0]).await;
    let first = teardown_log(h);
    assert!(first.contains(&format!("nothing left to remove: {} already gone", cells[0])), "{first}");
    for ns in &cells[1..] {
        assert!(first.contains(&format!("dropped {ns}")), "{first}");
    }
    let second = teardown_log(h);
    for ns in &cells {
        assert!(second.contains(&format!("nothing left to remove: {ns} already gone")), "{second}");
    }
    assert!(!second.contains("left some behind") && !second.contains("dropped"), "{second}");
    assert_eq!(leftovers(&run_id).await, Vec::<String>::new());
}

/// `teardown` on handle `h`, which must succeed: what it printed.
fn teardown_log(h: &str) -> String {
    let o = counterlab(&["teardown", "--handle", h]).output().unwrap();
    ok(&o, "teardown");
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}
