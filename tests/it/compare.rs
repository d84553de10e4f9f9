//! `--repeat` and a noise-aware `compare`: two repeat-3 runs of the same build compare
//! as "no regression"; a build whose test strategy sleeps longer in every op is found
//! slower by the Mann-Whitney test, named in the output; reports with no row in common
//! say so and exit 4. Runs on SQLite (temporary files), 1.5 s per repeat.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use counterlab::run::{Phase, run_plan};
use counterlab::scenario::{Overrides, parse};
use counterlab_core::{Guarantee, NotificationId, OpError, Strategy, StrategyInfo, UserId};
use counterlab_strategies::{Build, Builtin, Db, Registry, build};

use crate::util;

/// conditional-update's statements behind a fixed sleep at the start of every op: the
/// "build" under test. The sleep makes the load latency-bound (4 workers / (sleep + op)),
/// so the machine's noise moves it little, and the slow build is unmistakable. (With a
/// 2 ms sleep, a CI machine losing a quarter of its CPU to steal moved a same-build
/// pair's op p99 by 70%, all three repeats apart.)
struct Probe {
    inner: Arc<dyn Strategy>,
    sleep: Duration,
    info: StrategyInfo,
}

impl Probe {
    async fn nap(&self) {
        tokio::time::sleep(self.sleep).await;
    }
}

#[async_trait]
impl Strategy for Probe {
    fn info(&self) -> StrategyInfo {
        self.info
    }
    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        self.nap().await;
        self.inner.create(user).await
    }
    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        self.nap().await;
        self.inner.mark_read(user, id).await
    }
    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        self.nap().await;
        self.inner.delete(user, id).await
    }
    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        self.nap().await;
        self.inner.mark_all_read(user).await
    }
    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        self.nap().await;
        self.inner.read_count(user).await
    }
}

const PROBE: StrategyInfo = StrategyInfo { name: "probe", guarantee: Guarantee::Exact, summary: "test-only" };

fn probe(db: Db, sleep: Duration) -> Arc<dyn Strategy> {
    let inner = build("conditional-update", db).expect("a built-in to delegate to");
    Arc::new(Probe { inner, sleep, info: PROBE })
}

/// The build as shipped: 10 ms per op.
fn probe_fast(_: StrategyInfo, db: Db) -> Arc<dyn Strategy> {
    probe(db, Duration::from_millis(10))
}

/// The build with the injected slowdown: 200 ms per op (at most 20 ops/s with 4 workers;
/// the fast build would have to fall below 40 ops/s under load to hide it).
fn probe_slow(_: StrategyInfo, db: Db) -> Arc<dyn Strategy> {
    probe(db, Duration::from_millis(200))
}

const SCENARIO: &str = "backends = [\"sqlite\"]\nrepeat = 3\n\
    [data]\nusers = 50\nnotifications_per_user = 4\n\
    [workload]\nworkers = 4\nduration_s = 1.5\n\
    [workload.mix]\ncreate = 1\nmark_read = 1\nread_count = 1\n";

const RACY: StrategyInfo =
    StrategyInfo { name: "racy-exact", guarantee: Guarantee::Exact, summary: "test-only, read-check-write" };

/// direct-update's read-check-write, claiming an exact guarantee: it breaks it when the
/// duplicate mark_read race is hit (on PostgreSQL, where writers do race).
fn racy(_: StrategyInfo, db: Db) -> Arc<dyn Strategy> {
    let inner = build("direct-update", db).expect("a built-in to delegate to");
    Arc::new(Probe { inner, sleep: Duration::ZERO, info: RACY })
}

/// Runs `strategies` with the probe built by `f`; writes report.json into `dir/name` and
/// returns its path, with the namespaces in the order their loads started.
async fn run(
    dir: &std::path::Path,
    name: &str,
    f: fn(StrategyInfo, Db) -> Arc<dyn Strategy>,
    strategies: &str,
) -> (std::path::PathBuf, Vec<String>) {
    let registry = Registry::builtin().with(Builtin::new(PROBE, Build::Sql(f)));
    let toml = format!("strategies = [{strategies}]\n{SCENARIO}");
    let plan = parse("probe.toml", &toml, "probe", &Overrides::default(), &registry.names(), 11).expect("a valid plan");
    assert_eq!(plan.repeat, 3);
    let sqlite = util::tempdir("compare-sqlite");
    let mut opts = util::options(false, Some(sqlite.to_path_buf()));
    opts.registry = registry;
    let order = Arc::new(Mutex::new(Vec::new()));
    let seen = order.clone();
    opts.on_phase = Some(Arc::new(move |p, ns: &str| {
        if p == Phase::Load {
            seen.lock().unwrap().push(ns.to_string());
        }
    }));
    let report = run_plan(&plan, &opts, &mut |_| {}).await.expect("the run completes");
    let out = dir.join(name);
    std::fs::create_dir_all(&out).unwrap();
    let path = out.join("report.json");
    std::fs::write(&path, counterlab_report::render_json(&report)).unwrap();
    let order = order.lock().unwrap().clone();
    (path, order)
}

/// `counterlab compare a b` with `extra` flags: exit code and stdout.
fn compare(a: &std::path::Path, b: &std::path::Path, extra: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["compare", a.to_str().unwrap(), b.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_interleave_and_record_medians_and_spread() {
    let _alone = util::alone().await;
    let dir = util::tempdir("repeat");
    let (path, order) = run(&dir, "ab", probe_fast, "\"probe\", \"conditional-update\"").await;
    // A B A B A B: every cell once per round, each repeat in its own namespace.
    let tail: Vec<String> = order.iter().map(|n| n.rsplit("_lt_sr_").next().unwrap().to_string()).collect();
    assert_eq!(
        tail,
        ["probe_r1", "conditional_update_r1", "probe_r2", "conditional_update_r2", "probe_r3", "conditional_update_r3"],
        "{order:?}"
    );
    let report: counterlab_report::Report = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(report.strategies.len(), 2, "one row per cell, not per repeat");
    for row in &report.strategies {
        assert_eq!(row.repeats.len(), 3, "{}", row.label());
        let mut t: Vec<f64> = row.repeats.iter().map(|r| r.throughput_ops_per_s).collect();
        t.sort_by(f64::total_cmp);
        assert_eq!(row.throughput_ops_per_s, t[1], "the row holds the median");
        assert!(
            row.repeats.iter().all(|r| r.seed == 11 && r.verdict == "pass" && r.ops_total > 0),
            "{:?}",
            row.repeats
        );
        let ns: std::collections::BTreeSet<&str> = row.repeats.iter().map(|r| r.namespace.as_str()).collect();
        assert_eq!(ns.len(), 3);
        let shown = counterlab_report::throughput_with_spread(row);
        assert!(shown.ends_with(&format!("({:.0}–{:.0}, n=3)", t[0], t[2])), "{shown}");
        assert_eq!(row.check.label(), "pass");
    }
    assert!(report.replay_command.contains("--repeat 3"), "{}", report.replay_command);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_finds_no_regression_between_same_builds_and_finds_the_injected_slowdown() {
    let _alone = util::alone().await;
    let dir = util::tempdir("compare");
    let (a1, _) = run(&dir, "a1", probe_fast, "\"probe\"").await;
    let (a2, _) = run(&dir, "a2", probe_fast, "\"probe\"").await;
    let (slow, _) = run(&dir, "slow", probe_slow, "\"probe\"").await;
    let (md, json) = (dir.join("cmp.md"), dir.join("cmp.json"));
    let files = |limit| ["--fail-if-slower", limit, "--md", md.to_str().unwrap(), "--json", json.to_str().unwrap()];

    // The same build: nothing past 90% (a shared machine moves a p99 by tens of percent).
    let (code, out) = compare(&a1, &a2, &files("90"));
    eprintln!("same build:\n{out}");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("\nno regression") && out.contains("Mann-Whitney U"), "{out}");
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["conclusion"], "no regression");
    assert_eq!(j["rows"][0]["repeats"], serde_json::json!([3, 3]));
    assert_eq!(j["rows"][0]["noise_measured"], true);
    assert!(std::fs::read_to_string(&md).unwrap().contains("**no regression**"));

    let (code, out) = compare(&a1, &slow, &files("50"));
    eprintln!("slowed build:\n{out}");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("probe on sqlite at serializable: throughput"), "{out}");
    assert!(out.contains("Mann-Whitney U p = 0.050 <= 0.05"), "the test is named: {out}");
    assert!(!out.contains("no regression"), "{out}");
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(j["conclusion"].as_str().unwrap().ends_with("regression(s)"), "{j}");
    assert_eq!(j["rows"][0]["throughput_p_value"], 0.05);
    assert!(j["rows"][0]["throughput_change_pct"].as_f64().unwrap() < -50.0, "{j}");
    let md_text = std::fs::read_to_string(&md).unwrap();
    assert!(md_text.contains("## Regressions") && md_text.contains("Mann-Whitney U p = 0.050"), "{md_text}");

    // Nothing in common: said, exit 4, never "no regression".
    let mut other: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&a2).unwrap()).unwrap();
    other["strategies"][0]["strategy"] = serde_json::json!("someone-else");
    let other_path = dir.join("other.json");
    std::fs::write(&other_path, other.to_string()).unwrap();
    let (code, out) = compare(&a1, &other_path, &files("50"));
    assert_eq!(code, Some(4), "{out}");
    assert!(out.contains("nothing to compare") && !out.contains("no regression"), "{out}");
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["conclusion"], "nothing to compare");
}

#[test]
fn repeat_is_bounded_in_the_file_and_on_the_command_line() {
    let known = util::known();
    let toml = |n: &str| format!("strategies = [\"conditional-update\"]\n{}", SCENARIO.replace("repeat = 3", n));
    let err = parse("r.toml", &toml("repeat = 0"), "r", &Overrides::default(), &known, 1).unwrap_err().to_string();
    assert!(err.contains("r.toml:3:10") && err.contains("repeat must be in 1..=20, got 0"), "{err}");
    let flag = Overrides { repeat: Some(21), ..Overrides::default() };
    let err = parse("r.toml", &toml("repeat = 2"), "r", &flag, &known, 1).unwrap_err().to_string();
    assert!(err.contains("--repeat must be in 1..=20, got 21"), "{err}");
    let flag = Overrides { repeat: Some(5), ..Overrides::default() };
    assert_eq!(parse("r.toml", &toml("repeat = 2"), "r", &flag, &known, 1).unwrap().repeat, 5, "the flag wins");
    assert_eq!(parse("r.toml", &toml(""), "r", &Overrides::default(), &known, 1).unwrap().repeat, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarantee_broken_in_any_repeat_is_broken_and_every_failing_repeat_s_anomalies_are_kept() {
    crate::require!(Postgres);
    let _heavy = util::heavy().await;
    let registry = Registry::builtin().with(Builtin::new(RACY, Build::Sql(racy)));
    let toml = "strategies = [\"racy-exact\"]\nbackends = [\"postgres\"]\nisolation = [\"read-committed\"]\n\
                [data]\nusers = 10\nnotifications_per_user = 5\n\
                [workload]\nworkers = 4\nduration_s = 1\ndup_k = 4\n\
                [workload.mix]\ncreate = 1\nmark_read_dup = 3\nread_count = 1\n";
    let flags = Overrides { repeat: Some(3), ..Overrides::default() };
    let plan = parse("racy.toml", toml, "racy", &flags, &registry.names(), 9).expect("a valid plan");
    let mut opts = util::options(false, None);
    opts.registry = registry;
    let report = run_plan(&plan, &opts, &mut |_| {}).await.expect("the run completes");
    assert_eq!(report.strategies.len(), 1);
    let row = &report.strategies[0];
    assert_eq!(row.repeats.len(), 3);
    let failing: Vec<u32> = row.repeats.iter().filter(|r| !r.matches_guarantee).map(|r| r.repeat).collect();
    assert!(!failing.is_empty(), "the race was hit in no repeat: {:?}", row.repeats);
    assert!(row.check.label().starts_with("FAIL") && !row.check.matches_guarantee && !report.all_guarantees_held);
    // Each failing repeat's anomalies are on the row, saying which repeat; no others.
    for a in &row.anomalies {
        let n: u32 = a.detail.strip_prefix("repeat ").and_then(|d| d.split(':').next()).unwrap().parse().unwrap();
        assert!(failing.contains(&n), "{} from a passing repeat {n}", a.name);
    }
    for n in &failing {
        assert!(row.anomalies.iter().any(|a| a.detail.starts_with(&format!("repeat {n}:"))), "{:?}", row.anomalies);
    }
    // Every repeat's schema is gone.
    let admin = util::admin().await;
    for r in &row.repeats {
        assert!(r.namespace.ends_with(&format!("_r{}", r.repeat)), "{}", r.namespace);
        assert!(!util::schema_exists(&admin, &r.namespace).await, "{} left behind", r.namespace);
    }
}
