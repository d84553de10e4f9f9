//! The run as it runs and the command-line conventions, end to end through the binary:
//! the live view in an 80-column terminal (tmux), plain progress lines in a pipe,
//! `--json`, `list --json`, `--metrics-addr` scraped during a real run, `--set` and
//! `${VAR}` interpolation with their located errors, `REDIS_URL` and `DATABASE_URL`.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::{self, tempdir};

const BIN: &str = env!("CARGO_BIN_EXE_counterlab");

/// A short SQLite scenario: two strategies, `secs` seconds of load each.
fn scenario(dir: &Path, secs: f64) -> std::path::PathBuf {
    let f = dir.join("live.toml");
    let text = format!(
        "strategies = [\"conditional-update\", \"select-for-update\"]\nbackends = [\"sqlite\"]\n\
         [data]\nusers = 50\nnotifications_per_user = 5\n[workload]\nworkers = 2\nduration_s = {secs}\n\
         sample_interval_ms = 200\n[workload.mix]\nmark_read = 2\ncreate = 1\nread_count = 1\n"
    );
    std::fs::write(&f, text).unwrap();
    f
}

fn counterlab(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args).env("COUNTERLAB_POSTGRES_URL", util::pg_url());
    for var in ["DATABASE_URL", "REDIS_URL", "MYSQL_URL", "MARIADB_URL", "COUNTERLAB_REDIS_URL"] {
        c.env_remove(var);
    }
    c.envs(env.iter().copied()).output().expect("spawn counterlab")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A private tmux server (its own socket), killed when dropped.
struct Tmux(String);

impl Tmux {
    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux").arg("-L").arg(&self.0).args(args).output().expect("tmux runs")
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.cmd(&["kill-server"]);
    }
}

/// The progress lines (`[i/N] ...`) of a pane capture, wrapped lines joined.
fn progress_lines(pane: &str) -> Vec<&str> {
    pane.lines()
        .map(str::trim_end)
        .filter(|l| l.starts_with('[') && l.find("] ").is_some_and(|i| l[1..i].contains('/')))
        .collect()
}

#[test]
fn the_live_view_fits_80_columns_in_tmux() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("SKIPPED the_live_view_fits_80_columns_in_tmux: tmux is not installed");
        return;
    }
    let dir = tempdir("live-tmux");
    let f = scenario(&dir, 2.0);
    let tmux = Tmux(format!("counterlab-test-{}", std::process::id()));
    let exit = dir.join("exit");
    let cmd = format!(
        "{BIN} run {} --out {} --backend sqlite; echo $? > {}; sleep 60",
        f.display(),
        dir.display(),
        exit.display()
    );
    let o = tmux.cmd(&["new-session", "-d", "-x", "80", "-y", "24", "-s", "live", &cmd]);
    assert!(o.status.success(), "{}", text(&o));
    let mut captures = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while !exit.exists() && Instant::now() < deadline {
        // -J joins wrapped lines: a line wider than the pane shows as one long line.
        let o = tmux.cmd(&["capture-pane", "-p", "-J", "-t", "live"]);
        captures.push(String::from_utf8_lossy(&o.stdout).into_owned());
        std::thread::sleep(Duration::from_millis(150));
    }
    let code = std::fs::read_to_string(&exit).unwrap_or_else(|_| panic!("the run did not end in 90 s"));
    let o = tmux.cmd(&["capture-pane", "-p", "-J", "-t", "live"]);
    captures.push(String::from_utf8_lossy(&o.stdout).into_owned());
    assert_eq!(code.trim(), "0", "{}", captures.last().cloned().unwrap_or_default());
    let mut loads = 0;
    for pane in &captures {
        let lines = progress_lines(pane);
        // One live line, redrawn in place: never a stream of stale copies.
        assert!(lines.len() <= 1, "{} live lines at once:\n{pane}", lines.len());
        for l in lines {
            assert!(l.chars().count() <= 80, "{} columns: {l}", l.chars().count());
            assert!(l.starts_with("[1/2] ") || l.starts_with("[2/2] "), "{l}");
            loads += (l.contains(" | load | ") && l.contains(" ops/s | ") && l.contains("s ETA ")) as usize;
        }
    }
    assert!(loads > 0, "no load line seen in {} captures:\n{}", captures.len(), captures.join("\n-----\n"));
    let last = captures.last().unwrap();
    assert!(progress_lines(last).is_empty() && last.contains("report: "), "the live line is cleared: {last}");
    // The report ends with its verdicts: the last 80x24 screen holds the verdict table and
    // the verdict lines, none wider than the pane (-J joins a wrapped line into one).
    assert!(last.contains("│ conditional-update ") && last.contains("│ select-for-update "), "{last}");
    assert!(last.contains("\nverdicts:\n  pass ") && !last.contains("p99.9"), "{last}");
    assert!(last.lines().all(|l| l.trim_end().chars().count() <= 80), "{last}");
}

#[test]
fn plain_lines_in_a_pipe_json_on_stdout_and_quiet() {
    let dir = tempdir("live-plain");
    let f = scenario(&dir, 1.5);
    let (f, out) = (f.to_str().unwrap(), dir.to_str().unwrap());
    let o = counterlab(&["run", f, "--out", out, "--progress-interval", "0.2", "--json", "--verbose"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains('\r') && !err.contains("\x1b["), "terminal codes in a pipe: {err}");
    let plain: Vec<&str> =
        err.lines().filter(|l| l.starts_with("[1/2] conditional-update sqlite@serializable | load | ")).collect();
    assert!(plain.len() >= 2, "expected a line every 0.2 s of a 1.5 s load:\n{err}");
    assert!(err.contains("[2/2] select-for-update on sqlite at serializable: check ("), "--verbose phases: {err}");
    // stdout is the summary and nothing else; it agrees with report.json and the exit code.
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON value");
    assert_eq!(summary["exit_code"], 0);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(summary["run_id"], report["run_id"]);
    for (s, r) in summary["strategies"].as_array().unwrap().iter().zip(report["strategies"].as_array().unwrap()) {
        assert_eq!((&s["verdict"], &s["ops"]), (&r["check"]["verdict"], &r["ops_total"]));
    }
    assert_eq!(summary["strategies"].as_array().unwrap().len(), 2);
    assert_eq!(summary["decision"], report["decision"], "the decision is the same in both");
    assert_eq!(summary["decision"]["groups"][0]["rows"].as_array().map(Vec::len), Some(2));

    let o = counterlab(&["run", f, "--out", out, "--quiet"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let all = text(&o);
    assert!(!all.contains("[1/2]") && !all.contains("seeded "), "--quiet shows progress or log: {all}");
    assert!(all.contains("pass") && all.contains("report: "), "{all}");

    // Bad input: exit 2, and stdout still holds one JSON value saying so.
    let o = counterlab(&["run", f, "--out", out, "--json", "--set", "seed=x"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let error: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON value");
    assert_eq!(error["exit_code"], 2);
    assert!(error["error"].as_str().unwrap().starts_with("--set:1:6: invalid type"), "{error}");

    let o = counterlab(&["list", "--json"], &[]);
    let list: serde_json::Value = serde_json::from_slice(&o.stdout).expect("list --json is JSON");
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    let builtins: Vec<&str> = counterlab::BUILTINS.iter().map(|r| r.info.name).collect();
    assert_eq!(names, builtins);
    assert!(list[0]["guarantee"].is_string() && list[0]["needs"].is_string());
}

/// One HTTP GET of `addr`'s /metrics: the body, or None while nothing answers.
fn scrape(addr: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/openmetrics-text"), "{head}");
    Some(body.to_string())
}

/// OpenMetrics' shape: HELP/TYPE/UNIT lines, samples of declared families (counters as
/// `_total`), `# EOF` last.
fn check_openmetrics(body: &str) {
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "{body}");
    let mut families: Vec<(String, String)> = Vec::new();
    for l in &lines[..lines.len() - 1] {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            families.push((name.to_string(), kind.to_string()));
        } else if !l.starts_with("# HELP ") && !l.starts_with("# UNIT ") {
            let name = l.split(['{', ' ']).next().unwrap();
            let (family, kind) = families.last().unwrap_or_else(|| panic!("sample before TYPE: {l}"));
            let expected = if kind == "counter" { format!("{family}_total") } else { family.clone() };
            assert_eq!(name, expected, "{l}");
            let value = l.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{l}");
        }
    }
}

#[test]
fn metrics_are_served_during_the_run_and_agree_with_the_report() {
    let dir = tempdir("live-metrics");
    let f = scenario(&dir, 3.0);
    let addr = "127.0.0.1:9461";
    let mut child = Command::new(BIN)
        .args(["run", f.to_str().unwrap(), "--out", dir.to_str().unwrap(), "--metrics-addr", addr, "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn counterlab");
    let mut last_with_ops = None;
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        if let Some(body) = scrape(addr)
            && body.contains("counterlab_ops_total{")
        {
            last_with_ops = Some(body);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(scrape(addr).is_none(), "the endpoint still answers after the run");
    let body = last_with_ops.expect("no scrape during the load had ops");
    check_openmetrics(&body);
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("parses");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let value = |v: &prometheus_parse::Value| match v {
        prometheus_parse::Value::Counter(x)
        | prometheus_parse::Value::Gauge(x)
        | prometheus_parse::Value::Untyped(x) => *x,
        _ => panic!("unexpected {v:?}"),
    };
    let mut seen_ops = 0.0;
    for r in report["strategies"].as_array().unwrap() {
        let strategy = r["strategy"].as_str().unwrap();
        let ops: f64 = scrape
            .samples
            .iter()
            .filter(|s| s.metric == "counterlab_ops_total" && s.labels.get("strategy") == Some(strategy))
            .map(|s| value(&s.value))
            .sum();
        // A scrape is a moment of the load: never more than the report's total.
        assert!(ops <= r["ops_total"].as_f64().unwrap(), "{strategy}: {ops} > {}", r["ops_total"]);
        seen_ops += ops;
    }
    assert!(seen_ops > 0.0, "{body}");
    let p99 = scrape
        .samples
        .iter()
        .find(|s| s.metric == "counterlab_latency_seconds" && s.labels.get("quantile") == Some("0.99"));
    assert!(p99.is_some_and(|s| value(&s.value) > 0.0), "{body}");
    let phases: Vec<_> =
        scrape.samples.iter().filter(|s| s.metric == "counterlab_phase" && value(&s.value) == 1.0).collect();
    assert_eq!(phases.len(), 1, "one phase at a time: {body}");
    assert!(scrape.samples.iter().any(|s| s.metric == "counterlab_cells" && value(&s.value) == 2.0), "{body}");
    let o =
        counterlab(&["run", f.to_str().unwrap(), "--out", dir.to_str().unwrap(), "--metrics-addr", "nonsense"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--metrics-addr nonsense: expected HOST:PORT"), "{}", text(&o));
}

#[test]
fn set_overrides_fields_and_its_errors_name_the_flag() {
    let dir = tempdir("live-set");
    let f = scenario(&dir, 0.5);
    let (f, out) = (f.to_str().unwrap(), dir.to_str().unwrap());
    let run = |extra: &[&str]| {
        counterlab(&[&["run", f, "--out", out, "--strategy", "conditional-update"], extra].concat(), &[])
    };
    let o = run(&["--set", "workload.workers=3", "--set", "data.users=40", "--set", "name=set test"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["scenario"], "set test");
    assert_eq!(report["plan"]["workload"]["n_workers"], 3, "{}", report["plan"]["workload"]);
    assert_eq!(report["strategies"][0]["check"]["users_checked"], 40);
    for (set, message) in [
        (
            "workload.workers=abc",
            "--set:1:18: invalid type: string \"abc\", expected u32 (in `--set workload.workers=abc`)",
        ),
        ("workload.workers=0", "--set:1:18: workers must be in 1..="),
        ("workload.nope=1", "--set:1:1: unknown field `nope`"),
        ("workload.stages.0.rate=5", "--set:1:1: `workload.stages` is not in the file"),
        ("workload", "--set:1:1: expected `path.to.field=value`"),
    ] {
        let o = run(&["--set", "seed=1", "--set", set]);
        assert_eq!(o.status.code(), Some(2), "{set}: {}", text(&o));
        let want = message.replace("--set:1:", "--set:2:");
        assert!(text(&o).contains(&want), "{set}: want {want}\n{}", text(&o));
    }
}

#[test]
fn variables_are_interpolated_located_and_their_passwords_never_shown() {
    let dir = tempdir("live-env");
    let f = dir.join("env.toml");
    std::fs::write(
        &f,
        "name = \"${RUN_NAME:-fallback}\"\nstrategies = [\"${STRATEGY}\"]\nbackends = [\"sqlite\"]\n\
         [data]\nusers = 20\nnotifications_per_user = 3\n[workload]\nworkers = 1\nops = 50\n\
         skew = \"$${literal}\"\n[workload.mix]\nmark_read = 1\n",
    )
    .unwrap();
    let (fs, out) = (f.to_str().unwrap(), dir.to_str().unwrap());
    let o = counterlab(&["run", fs, "--out", out], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("env.toml:2:16: environment variable STRATEGY is not set"), "{}", text(&o));
    let o = counterlab(&["run", fs, "--out", out], &[("STRATEGY", "conditional-update")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("env.toml:10:8: ") && text(&o).contains("${literal}"), "$${{ is a literal: {}", text(&o));
    let o =
        counterlab(&["run", fs, "--out", out, "--set", "workload.skew=uniform"], &[("STRATEGY", "conditional-update")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let report = std::fs::read_to_string(dir.join("report.json")).unwrap();
    assert!(report.contains("\"scenario\": \"fallback\""), "{report}");
    let secret = [("STRATEGY", "conditional-update"), ("RUN_NAME", "postgres://bob:hunter2@db/x")];
    let o = counterlab(&["run", fs, "--out", out, "--set", "workload.skew=uniform"], &secret);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let all = format!("{}{}", text(&o), std::fs::read_to_string(dir.join("report.json")).unwrap());
    assert!(!all.contains("hunter2") && all.contains("postgres://bob:***@db/x"), "{all}");
    let o = counterlab(&["run", fs, "--out", out], &[("STRATEGY", "postgres://bob:hunter2@db/x")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!text(&o).contains("hunter2") && text(&o).contains("env.toml:2:"), "{}", text(&o));
}

#[test]
fn conventional_variables_are_read_and_said() {
    let dir = tempdir("live-vars");
    let f = scenario(&dir, 0.3);
    let (f, out) = (f.to_str().unwrap(), dir.to_str().unwrap());
    let args = ["run", f, "--out", out, "--strategy", "conditional-update"];
    let sqlite = dir.join("db");
    std::fs::create_dir(&sqlite).unwrap();
    let url = format!("sqlite://{}/x.db", sqlite.display());
    let keep = [&args[..], &["--keep"]].concat();
    let o = counterlab(&keep, &[("REDIS_URL", "redis://127.0.0.1:6379"), ("DATABASE_URL", &url)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let all = text(&o);
    assert!(all.contains("redis URL from REDIS_URL") && all.contains("sqlite folder from DATABASE_URL"), "{all}");
    let kept: Vec<_> =
        std::fs::read_dir(&sqlite).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(
        kept.iter().any(|n| n.starts_with("cl_") && n.contains("conditional_update")),
        "the SQLite files go to DATABASE_URL's folder: {kept:?}"
    );
    let o = counterlab(&args, &[("DATABASE_URL", "mysql://nobody:hunter2@127.0.0.1:1/x")]);
    assert!(text(&o).contains("mysql URL from DATABASE_URL") && !text(&o).contains("hunter2"), "{}", text(&o));
}
