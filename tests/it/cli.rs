//! The binary end to end: exit codes, messages, report files and namespace hygiene.

use std::process::{Command, Output};

use crate::util;

fn counterlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(args)
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .output()
        .expect("spawn counterlab")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn list_names_every_strategy_and_guarantee() {
    let o = counterlab(&["list"]);
    assert!(o.status.success());
    let out = text(&o);
    for s in counterlab::BUILTINS.iter().map(|r| r.info) {
        let line = out.lines().find(|l| l.starts_with(s.name)).unwrap_or_else(|| panic!("{} missing:\n{out}", s.name));
        assert!(line.contains(&format!("guarantee: {}", s.guarantee.name())), "{line}");
    }
}

#[test]
fn bad_input_exits_2_with_a_located_message() {
    let dir = tempdir("bad-input");
    let f = dir.join("broken.toml");
    std::fs::write(&f, "[data]\nusers = 10\nnotifications_per_user = 2\n[workload]\nworkers = 0\nops = 10\n[workload.mix]\nmark_read = 1\n").unwrap();
    let o = counterlab(&["run", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("broken.toml:5:11: workers must be in 1..="), "{}", text(&o));

    let o = counterlab(&["run", "scenarios/quickstart.toml", "--strategy", "naive"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("valid: direct-update, select-for-update, conditional-update"), "{}", text(&o));

    let o = counterlab(&["run", "no/such/file.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no/such/file.toml: cannot read scenario"), "{}", text(&o));
}

#[test]
fn unreachable_backend_exits_2_without_the_password() {
    let o = counterlab(&[
        "run",
        "scenarios/quickstart.toml",
        "--ops",
        "10",
        "--postgres",
        "postgres://alice:hunter2@127.0.0.1:1/test",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let out = text(&o);
    assert!(!out.contains("hunter2"), "password leaked: {out}");
    assert!(out.contains("postgres://alice:***@127.0.0.1:1/test"), "{out}");
    assert!(out.contains("hint:"), "{out}");
}

/// `run` with `var` pointing at port 1, where nothing listens, on `scenario`: exit 2 and
/// the returned output.
fn refused(var: &str, url: &str, scenario: &str, args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", scenario])
        .args(args)
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .env(var, url)
        .output()
        .expect("spawn counterlab");
    assert_eq!(o.status.code(), Some(2), "{var}: {}", text(&o));
    text(&o)
}

/// sqlx retries a refused connection until its acquire timeout and then says only "pool
/// timed out": the message names the server and says what happened, without the password.
#[test]
fn a_refused_connection_says_connection_refused() {
    let quick = ["--ops", "10"];
    for (var, url, backend) in [
        ("COUNTERLAB_POSTGRES_URL", "postgres://alice:hunter2@127.0.0.1:1/test", "postgres"),
        ("COUNTERLAB_MYSQL_URL", "mysql://alice:hunter2@127.0.0.1:1/test", "mysql"),
    ] {
        let out = refused(var, url, "scenarios/quickstart.toml", &[&quick[..], &["--backend", backend]].concat());
        let at = format!("cannot connect to {backend} at {}", url.replace("hunter2", "***"));
        assert!(out.contains(&at) && out.contains("connection refused"), "{out}");
        assert!(!out.contains("pool timed out") && !out.contains("hunter2"), "{out}");
    }
}

#[test]
fn a_refused_redis_connection_says_connection_refused() {
    crate::require!(Postgres);
    let dir = tempdir("refused-redis");
    let f = dir.join("redis.toml");
    std::fs::write(
        &f,
        "strategies = [\"zset-buffer\"]\nbackends = [\"postgres\"]\n[data]\nusers = 5\nnotifications_per_user = 2\n\
         [workload]\nworkers = 1\nops = 10\n[workload.mix]\nmark_read = 1\n",
    )
    .unwrap();
    let out = refused("COUNTERLAB_REDIS_URL", "redis://:hunter2@127.0.0.1:1", f.to_str().unwrap(), &[]);
    assert!(out.contains("cannot connect to redis at redis://:***@127.0.0.1:1: connection refused"), "{out}");
    assert!(out.contains("COUNTERLAB_REDIS_URL") && !out.contains("hunter2"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_writes_reports_and_leaves_nothing_behind() {
    crate::require!(Postgres);
    let admin = util::admin().await;
    // Data outside counterlab's namespaces that a run must not touch.
    sqlx::query("CREATE TABLE IF NOT EXISTS public.counterlab_sentinel (v int)").execute(&admin).await.unwrap();
    sqlx::query("DELETE FROM public.counterlab_sentinel").execute(&admin).await.unwrap();
    sqlx::query("INSERT INTO public.counterlab_sentinel VALUES (42)").execute(&admin).await.unwrap();

    let dir = tempdir("report");
    let o = counterlab(&[
        "run",
        "scenarios/duplicate-mark-read.toml",
        "--ops",
        "400",
        "--workers",
        "4",
        "--history",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert!(std::fs::read_to_string(dir.join("report.md")).unwrap().contains("| direct-update |"));
    assert_eq!(json["scenario"], "duplicate-mark-read");
    assert_eq!(json["seed"], 7);
    assert_eq!(json["plan"]["workload"]["ops"], 400);
    assert!(json["git_commit"].as_str().unwrap().len() >= 7);
    assert!(json["servers"][0]["version"].as_str().unwrap().starts_with(|c: char| c.is_ascii_digit()));
    let strategies = json["strategies"].as_array().unwrap();
    assert_eq!(strategies.len(), 4);
    for s in strategies {
        for key in ["strategy", "backend", "throughput_ops_per_s", "namespace"] {
            assert!(!s[key].is_null(), "{key} missing in {s}");
        }
        for key in ["users_checked", "users_mismatched", "drift_abs_total", "negative_counters", "verdict"] {
            assert!(!s["check"][key].is_null(), "check.{key} missing in {s}");
        }
        let dup = &s["ops"]["mark_read_dup"];
        for key in ["p50", "p99", "p999", "max"] {
            assert!(dup["latency_us"][key].as_u64().unwrap() > 0, "{key} in {dup}");
        }
        assert!(dup["count"].as_u64().unwrap() > 0 && !dup["errors"].is_null());
        // --history: every recorded call is in the file, readable back, and the racy
        // design's double decrements are named with witnesses.
        let h = &s["history"];
        let file = std::fs::read_to_string(dir.join(h["file"].as_str().unwrap())).unwrap();
        let events = counterlab_report::read_history(&file).unwrap();
        assert_eq!(events.len() as u64, h["events"].as_u64().unwrap());
        assert_eq!(h["dropped"], 0);
        assert!(h["reads_checked"].as_u64().unwrap() > 0);
        let calls = |op: &str| events.iter().filter(|e| e.op == op).count() as u64;
        assert_eq!(calls("create"), s["ops"]["create"]["count"].as_u64().unwrap());
        let names: Vec<&str> = s["anomalies"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
        if s["check"]["users_mismatched"].as_u64().unwrap() > 0 {
            assert!(names.contains(&"double_decrement"), "{names:?}");
            let w = &s["anomalies"][0]["witnesses"][0];
            assert_eq!(w["ops"].as_array().unwrap().len(), 2, "{w}");
        } else {
            assert!(names.is_empty(), "{names:?}");
        }
        // Dropped after the run: no --keep.
        assert!(!util::schema_exists(&admin, s["namespace"].as_str().unwrap()).await);
    }
    let v: i32 = sqlx::query_scalar("SELECT v FROM public.counterlab_sentinel").fetch_one(&admin).await.unwrap();
    assert_eq!(v, 42);
}

pub use crate::util::tempdir;

/// Ctrl-C, SIGTERM (timeout, docker stop, CI cancellation) and SIGHUP all stop the load,
/// check what ran, write the report and clean up, exiting with 128 + the signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_sigterm_and_sighup_stop_the_load_check_and_clean_up() {
    crate::require!(Postgres);
    for (signal, code) in [("INT", 130), ("TERM", 143), ("HUP", 129)] {
        interrupted_by(signal, code).await;
    }
}

async fn interrupted_by(signal: &str, code: i32) {
    use std::io::{BufReader, Read};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let dir = tempdir("interrupt");
    let mut child = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", "scenarios/quickstart.toml", "--duration-s", "600", "--out", dir.to_str().unwrap()])
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first strategy's load to begin (the line after its seed); the stream
    // ending first means the run failed, which the assertion reports.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let (_, seen) = util::wait_for_line(&mut stderr, "its load started", |l| l.contains("seeded"));
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).ok();
        s
    });
    let kill = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    // Bounded wait: the run must stop within one op timeout plus check and teardown; a
    // hang past two minutes is a failure, not something to wait out.
    let give_up = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > give_up {
            child.kill().ok();
            panic!("counterlab did not stop after SIG{signal}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let stderr_rest = rest.join().unwrap();
    assert_eq!(status.code(), Some(code), "SIG{signal}: {seen}{stderr_rest}{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["interrupted"], true);
    let strategies = json["strategies"].as_array().unwrap();
    assert_eq!(strategies.len(), 1, "later strategies must not start");
    assert_eq!(strategies[0]["strategy"], "direct-update");
    assert!(strategies[0]["load_s"].as_f64().unwrap() < 600.0);
    let admin = util::admin().await;
    let ns = strategies[0]["namespace"].as_str().unwrap();
    assert!(!util::schema_exists(&admin, ns).await, "SIG{signal}: schema left");
    let roles: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_roles WHERE rolname = $1")
        .bind(ns)
        .fetch_one(&admin)
        .await
        .unwrap();
    assert_eq!(roles, 0, "SIG{signal}: role left");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn quickstart_runs_on_sqlite_without_any_server() {
    let dir = tempdir("sqlite-quickstart");
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", "scenarios/quickstart.toml", "--backend", "sqlite", "--ops", "300"])
        .args(["--out", dir.to_str().unwrap()])
        .env_remove("COUNTERLAB_POSTGRES_URL")
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let json = the_quickstart_tells_the_story_on_sqlite(&o, &dir);
    // The quickstart's [[expect]]: on SQLite direct-update cannot drift, and says why.
    let direct = &json["strategies"][0];
    assert_eq!(direct["expectations"][0]["met"], true, "{direct}");
    assert!(direct["check"]["summary"].as_str().unwrap().contains("one writer at a time"), "{direct}");
    // The decision says the same, and stands on the quickstart's 3 repeats a side.
    let g = &json["decision"]["groups"][0];
    let words: Vec<&str> = g["rows"].as_array().unwrap().iter().map(|r| r["in_words"].as_str().unwrap()).collect();
    assert!(words.iter().any(|w| w.contains("none can here: SQLite runs one writer at a time")), "{g}");
    assert!(!words.iter().any(|w| w.contains("not hit")), "{g}");
    // 3 runs each; the exact designs, while their order is not settled, up to 6.
    let runs = |s: &serde_json::Value| s["repeats"].as_array().map_or(1, Vec::len);
    assert!(json["strategies"].as_array().unwrap().iter().all(|s| (3..=6).contains(&runs(s))), "{json}");
    let no_guarantee = json["strategies"].as_array().unwrap().iter().filter(|s| s["guarantee"] == "none");
    assert!(no_guarantee.map(runs).eq([3, 3]), "the designs without a guarantee never run again: {json}");
    let basis = g["basis"].as_str().unwrap();
    assert!(["throughput", "p99", "moving-parts", "not-settled"].contains(&basis), "{g}");
    assert_eq!(g["pick"].is_null(), basis == "not-settled", "{g}");
    assert!(g["outcome"].as_str().is_some() && g["settled"].is_boolean(), "{g}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The quickstart with no network at all (`unshare -n`: not even loopback, so no server
/// answers and no URL is set): it falls back to embedded SQLite on its own and still
/// shows a design that drifts, with a named anomaly. Skipped where `unshare -n` is
/// refused (it needs root or user namespaces).
#[test]
fn quickstart_with_no_network_falls_back_to_sqlite_and_shows_a_drift() {
    if !Command::new("unshare").args(["-n", "true"]).status().is_ok_and(|s| s.success()) {
        eprintln!("skipped: `unshare -n` is not allowed here");
        return;
    }
    let dir = tempdir("unshare-quickstart");
    let o = Command::new("unshare")
        .args(["-n", env!("CARGO_BIN_EXE_counterlab"), "run", "scenarios/quickstart.toml", "--ops", "300"])
        .args(["--out", dir.to_str().unwrap()])
        .env_remove("COUNTERLAB_POSTGRES_URL")
        .env_remove("COUNTERLAB_MYSQL_URL")
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(text(&o).contains("running on embedded SQLite"), "{}", text(&o));
    the_quickstart_tells_the_story_on_sqlite(&o, &dir);
    std::fs::remove_dir_all(&dir).ok();
}

/// What a quickstart run on SQLite (`o`, its output folder `dir`) must show: exit 0 with
/// every [[expect]] met; autocommit-direct-update (each statement its own transaction)
/// drifted with a named anomaly, beside direct-update, which cannot drift there; the
/// decision's sentence says so, and so do the terminal's verdict lines. Returns report.json.
fn the_quickstart_tells_the_story_on_sqlite(o: &Output, dir: &std::path::Path) -> serde_json::Value {
    assert_eq!(o.status.code(), Some(0), "{}", text(o));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["servers"][0]["backend"], "sqlite");
    assert!(text(o).contains("backend sqlite"), "{}", text(o));
    let rows = json["strategies"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|s| s["strategy"].as_str().unwrap()).collect();
    assert_eq!(names, ["direct-update", "autocommit-direct-update", "select-for-update", "conditional-update"]);
    assert_eq!(json["expectations_unmet"], 0, "{}", text(o));
    let auto = &rows[1];
    assert_eq!(auto["check"]["verdict"], "drift-expected", "{auto}");
    assert_eq!(auto["expectations"][0]["met"], true, "{auto}");
    assert!(auto["check"]["users_mismatched"].as_u64().is_some_and(|n| n > 0), "{auto}");
    // Named: an anomaly of docs/history.md's list, with its witnesses.
    let history = std::fs::read_to_string("docs/history.md").unwrap();
    let named = |a: &serde_json::Value| a["name"].as_str().is_some_and(|n| history.contains(&format!("`{n}`")));
    let anomalies = auto["anomalies"].as_array().unwrap();
    assert!(anomalies.iter().any(|a| named(a) && a["count"].as_u64() > Some(0)), "{auto}");
    let sentence = json["decision"]["groups"][0]["sentence"].as_str().unwrap();
    assert!(sentence.contains("autocommit-direct-update lost "), "{sentence}");
    assert!(text(o).contains("drift-expected") && text(o).contains("autocommit-direct-update"), "{}", text(o));
    json
}

/// The terminal report of the quickstart on SQLite: by default it opens with the decision
/// and ends with the verdict table and verdict lines, with no per-op latency table; `-v`
/// adds that table; `-q` is the decision's sentence and the verdict table in at most 15
/// lines, its verdicts those of report.json.
#[test]
fn the_terminal_report_opens_with_the_decision_and_quiet_is_short() {
    let dir = tempdir("terminal-detail");
    let run = |flag: &str| {
        let out = dir.join(format!("out{flag}"));
        let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
            .args(["run", "scenarios/quickstart.toml", "--backend", "sqlite", "--ops", "300", "--repeat", "1"])
            .args(["--out", out.to_str().unwrap()])
            .args((!flag.is_empty()).then_some(flag))
            .env_remove("DATABASE_URL")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{flag}: {}", text(&o));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
        (String::from_utf8(o.stdout).unwrap(), json)
    };
    let (normal, _) = run("");
    assert!(normal.starts_with("DECISION\n\nOn sqlite at serializable, "), "{normal}");
    assert!(!normal.contains("p99.9"), "the latency table is for -v: {normal}");
    let (body, tail) = normal.rsplit_once("\nverdicts:\n").unwrap();
    let (verdicts, report) = tail.rsplit_once("\n\n").unwrap();
    assert!(verdicts.lines().all(|l| l.starts_with("  ")) && report.starts_with("report: "), "{normal}");
    assert_eq!(verdicts.lines().filter(|l| l.contains(" sqlite at serializable: ")).count(), 4, "{normal}");
    let table = body.rfind("│ autocommit-direct-update").unwrap();
    assert!(table > body.find("scenario quickstart").unwrap(), "the verdict table comes last: {normal}");
    let (verbose, _) = run("-v");
    assert!(verbose.starts_with("DECISION\n") && verbose.contains("p99.9") && verbose.contains("mark_read_dup"));
    let (quiet, json) = run("-q");
    let lines: Vec<&str> = quiet.lines().collect();
    assert!(lines.len() <= 15, "{} lines:\n{quiet}", lines.len());
    assert!(
        quiet.starts_with("On sqlite at serializable, ") && lines.last().unwrap().starts_with("report: "),
        "{quiet}"
    );
    assert!(!quiet.contains("DECISION") && !quiet.contains("verdicts:") && !quiet.contains("seeded"), "{quiet}");
    for s in json["strategies"].as_array().unwrap() {
        let (name, verdict) = (s["strategy"].as_str().unwrap(), s["check"]["verdict"].as_str().unwrap());
        let row = lines.iter().find(|l| l.starts_with(&format!("│ {name} "))).unwrap_or_else(|| panic!("{quiet}"));
        assert!(row.contains(&format!(" {verdict} ")), "{row} vs {verdict}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_breached_threshold_exits_1_and_names_it() {
    let dir = tempdir("threshold");
    let f = dir.join("gate.toml");
    std::fs::write(
        &f,
        "strategies = [\"conditional-update\"]\nbackends = [\"sqlite\"]\n\
         [[thresholds]]\nmetric = \"min_ops_per_s\"\nlimit = 1000000000\n\
         [[thresholds]]\nmetric = \"max_drift\"\nlimit = 0\n\
         [data]\nusers = 10\nnotifications_per_user = 5\n[workload]\nworkers = 2\nops = 50\n[workload.mix]\nmark_read = 1\n",
    )
    .unwrap();
    let o = counterlab(&["run", f.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("1 threshold(s) breached"), "{}", text(&o));
    assert!(text(&o).contains("min_ops_per_s = "), "{}", text(&o));
    assert!(text(&o).contains("breaches minimum 1000000000"), "{}", text(&o));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["thresholds_breached"], 1);
    let t = json["strategies"][0]["thresholds"].as_array().unwrap();
    assert_eq!((t[0]["passed"].as_bool(), t[1]["passed"].as_bool()), (Some(false), Some(true)), "{t:?}");
}

/// The live line appears on a terminal (a pty from util-linux `script`), as plain lines
/// in a pipe (CI logs), and not with --quiet.
#[test]
fn a_progress_line_only_on_a_terminal() {
    let dir = tempdir("progress");
    let f = dir.join("p.toml");
    std::fs::write(
        &f,
        "strategies = [\"conditional-update\"]\nbackends = [\"sqlite\"]\n[data]\nusers = 50\n\
         notifications_per_user = 5\n[workload]\nworkers = 2\nduration_s = 2.5\n[workload.mix]\nmark_read = 1\n",
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_counterlab");
    let run = |extra: &str| {
        let cmd = format!("{bin} run {} --out {} {extra}", f.display(), dir.display());
        let o = Command::new("script").args(["-qec", &cmd, "/dev/null"]).output().expect("util-linux script");
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        text(&o)
    };
    // The terminal is 80 columns wide: the label is shortened to fit.
    let live = "[1/1] conditional-upda";
    let tty = run("");
    assert!(tty.contains(live) && tty.contains(" | load | ") && tty.contains(" ops/s | 0 err | "), "{tty}");
    assert!(!run("--quiet").contains(live));
    let live = "[1/1] conditional-update sqlite@serializable | load";
    // In a pipe: plain lines (every --progress-interval seconds), no terminal codes.
    let piped = counterlab(&["run", f.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
    assert!(text(&piped).contains(live) && !text(&piped).contains('\r'), "{}", text(&piped));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn malformed_urls_exit_2_and_never_show_the_password() {
    let cases = [
        ("postgres", "--postgres", "postgres//alice:hunter2@127.0.0.1/test"),
        ("postgres", "--postgres", "host=127.0.0.1 user=alice password=hunter2 dbname=test"),
        ("mysql", "--mysql", "mysql:/alice:hunter2@127.0.0.1/test"),
    ];
    for (backend, flag, url) in cases {
        let o = counterlab(&["run", "scenarios/quickstart.toml", "--ops", "10", "--backend", backend, flag, url]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(2), "{url}: {out}");
        assert!(!out.contains("hunter2"), "password leaked: {out}");
        assert!(out.contains("expected") && out.contains("://user[:password]@host"), "{url}: {out}");
    }
}

#[test]
fn a_scenario_name_cannot_move_the_output_directory() {
    let root = tempdir("name-escape");
    let cwd = root.join("a/b/c");
    std::fs::create_dir_all(&cwd).unwrap();
    let quickstart = std::fs::read_to_string("scenarios/quickstart.toml").unwrap();
    let (_, body) = quickstart.split_once("\nname = ").unwrap();
    let (_, rest) = body.split_once('\n').unwrap();
    let scenario = cwd.join("s.toml");
    std::fs::write(&scenario, format!("name = \"x/../../../escaped\"\n{rest}")).unwrap();
    // The strategy file the quickstart lists, beside the copy as beside the original.
    std::fs::create_dir_all(cwd.join("strategies")).unwrap();
    let file = "strategies/autocommit-direct-update.toml";
    std::fs::copy(std::path::Path::new("scenarios").join(file), cwd.join(file)).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", "s.toml", "--backend", "sqlite", "--ops", "100", "--quiet"])
        .current_dir(&cwd)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let runs: Vec<_> = std::fs::read_dir(cwd.join("reports/runs")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(runs[0].to_string_lossy().ends_with("-x_.._.._.._escaped"), "{runs:?}");
    assert!(cwd.join("reports/runs").join(&runs[0]).join("report.json").exists());
    assert!(!root.join("a/escaped").exists() && !root.join("escaped").exists());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn an_unwritable_output_folder_is_refused_before_any_load() {
    let dir = tempdir("out-file");
    let file = dir.join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let o = counterlab(&["run", "scenarios/quickstart.toml", "--ops", "100000", "--out", file.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("is a file, not a directory") && !out.contains("seeded"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--sqlite DIR` (or DATABASE_URL's sqlite: folder) that does not exist is a flag error
/// naming its source and path, before any output folder or SQLite file is made.
#[test]
fn a_missing_sqlite_folder_is_refused_not_created() {
    let dir = tempdir("sqlite-missing");
    let missing = dir.join("no/such");
    let out = dir.join("out");
    let run = |extra: &[&str], database_url: Option<String>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_counterlab"));
        cmd.args(["run", "scenarios/quickstart.toml", "--backend", "sqlite", "--ops", "100"]);
        cmd.args(["--out", out.to_str().unwrap()]).args(extra).env_remove("DATABASE_URL");
        if let Some(url) = database_url {
            cmd.env("DATABASE_URL", url);
        }
        cmd.output().unwrap()
    };
    let o = run(&["--sqlite", missing.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let said = format!("error: --sqlite: the SQLite folder {} does not exist", missing.display());
    assert!(text(&o).starts_with(&said), "{}", text(&o));
    let o = run(&[], Some(format!("sqlite://{}/run.db", missing.display())));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("DATABASE_URL: the SQLite folder"), "{}", text(&o));
    assert!(!dir.join("no").exists() && !out.exists(), "a folder was created");
    let file = dir.join("file");
    std::fs::write(&file, "").unwrap();
    let o = run(&["--sqlite", file.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains(&format!("the SQLite folder {} is not a directory", file.display())), "{}", text(&o));
}

/// A report file that cannot be written in full (a file size limit standing in for a
/// full disk, SIGXFSZ ignored so the write fails with EFBIG) leaves the previous file as
/// it was and no temporary file, and `counterlab report` exits 2 naming it.
#[test]
fn a_report_the_disk_cuts_short_leaves_the_previous_file_whole() {
    let dir = tempdir("atomic-report");
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", "scenarios/quickstart.toml", "--backend", "sqlite", "--ops", "300", "--quiet"])
        .args(["--out", dir.to_str().unwrap()])
        .env_remove("COUNTERLAB_POSTGRES_URL")
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(std::fs::metadata(dir.join("report.md")).unwrap().len() > 1024, "the limit below must cut report.md");
    std::fs::write(dir.join("report.md"), "the previous report.md\n").unwrap();
    std::fs::write(dir.join("report.html"), "the previous report.html\n").unwrap();
    let before = util::files_under(&dir);
    // bash's `ulimit -f 1`: no file of this process may grow past 1024 bytes.
    let o = Command::new("bash")
        .args(["-c", "trap '' XFSZ; ulimit -f 1; exec \"$0\" report \"$1\""])
        .args([env!("CARGO_BIN_EXE_counterlab"), dir.join("report.json").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains(&format!("cannot write {}", dir.join("report.md").display())), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(dir.join("report.md")).unwrap(), "the previous report.md\n");
    assert_eq!(std::fs::read_to_string(dir.join("report.html")).unwrap(), "the previous report.html\n");
    assert_eq!(util::files_under(&dir), before, "a temporary file was left");
}

#[test]
fn the_replay_command_keeps_the_server_options_without_passwords() {
    crate::require!(Postgres);
    let dir = tempdir("replay");
    let url = format!("{}?application_name=x", util::pg_url())
        .replace("postgres://postgres@", "postgres://postgres:pw-secret@");
    let o = counterlab(&[
        "run",
        "scenarios/quickstart.toml",
        "--ops",
        "60",
        "--strategy",
        "conditional-update",
        "--postgres",
        &url,
        "--out",
        dir.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let replay = json["replay_command"].as_str().unwrap();
    assert!(
        replay.contains("--postgres 'postgres://postgres:***@") && replay.contains("put yours in place of ***"),
        "{replay}"
    );
    assert!(!std::fs::read_to_string(dir.join("report.json")).unwrap().contains("pw-secret"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Starts a run of redis-counter on `backend`, waits for its load to begin and kills it
/// with SIGKILL; returns the namespace it left.
fn killed_run(backend: &str, dir: &std::path::Path) -> String {
    use std::io::BufReader;
    let mut child = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", "scenarios/quickstart.toml", "--strategy", "redis-counter", "--backend", backend])
        .args(["--duration-s", "600", "--out", dir.to_str().unwrap()])
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let (line, _) = util::wait_for_line(&mut stderr, "its load started", |l| l.contains("seeded"));
    let ns = line.trim().rsplit_once(" into ").expect("the seed line names the namespace").1.to_string();
    child.kill().unwrap();
    child.wait().unwrap();
    ns
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sigkill_clean_removes_the_marked_leftovers_and_nothing_else() {
    crate::require!(Postgres, Mariadb, Redis);
    let dir = tempdir("sigkill");
    let tag = counterlab::run::new_run_id();
    let admin = util::admin().await;
    let unmarked = format!("cl_unmarked_{tag}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{unmarked}\""))).execute(&admin).await.unwrap();
    let pg = killed_run("postgres", &dir);
    let my = killed_run("mysql", &dir);
    // SQLite: the run's temporary folder (`counterlab-<run id>-*`) holds its marker file;
    // a folder of the same shape without one must stay.
    let lite = killed_run("sqlite", &dir);
    let run_id: Vec<&str> = lite.strip_prefix("cl_").unwrap().splitn(3, '_').take(2).collect();
    let prefix = format!("counterlab-{}-", run_id.join("_"));
    let lite_dir = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&prefix))
        .expect("the killed SQLite run's folder");
    assert!(lite_dir.join("counterlab.meta").exists(), "{}", lite_dir.display());
    let unmarked_dir = tempfile::Builder::new().prefix("counterlab-unmarked-").tempdir().unwrap();
    let mysql = util::mysql_admin().await;
    let mut redis =
        redis::Client::open(crate::redis::redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let left = |ns: String| {
        let (admin, mysql) = (admin.clone(), mysql.clone());
        async move {
            let pg: i64 = sqlx::query_scalar(
                "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = $1) + (SELECT count(*) FROM pg_roles WHERE rolname = $1)",
            )
            .bind(&ns)
            .fetch_one(&admin)
            .await
            .unwrap();
            let my: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?")
                .bind(&ns)
                .fetch_one(&mysql)
                .await
                .unwrap();
            pg + my
        }
    };
    assert_eq!(left(pg.clone()).await, 2, "the killed PostgreSQL run left its schema and role");
    assert_eq!(left(my.clone()).await, 1, "the killed MariaDB run left its database");
    let keys = |ns: &str| format!("{}*", counterlab_strategies::redis_prefix(ns));
    for ns in [&pg, &my] {
        let k: Vec<String> = redis::AsyncCommands::keys(&mut redis, keys(ns)).await.unwrap();
        assert!(!k.is_empty(), "{ns}: no Redis keys left to clean?");
        // Even unclean, the killed run's keys go by themselves: each has an expiry.
        for key in &k {
            let ttl: i64 = redis::AsyncCommands::ttl(&mut redis, key).await.unwrap();
            assert!(ttl > 0, "{key}: TTL {ttl}, the killed run's key would never expire");
        }
    }
    let dry = counterlab(&["clean"]);
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry));
    for ns in [&pg, &my, &lite_dir.display().to_string()] {
        assert!(text(&dry).contains(&format!("{ns} (")) && text(&dry).contains("would remove"), "{}", text(&dry));
    }
    assert!(lite_dir.exists(), "a dry run removes no folder");
    assert_eq!(left(pg.clone()).await, 2, "a dry run removes nothing");
    let done = counterlab(&["clean", "--yes"]);
    assert_eq!(done.status.code(), Some(0), "{}", text(&done));
    assert_eq!(left(pg.clone()).await + left(my.clone()).await, 0, "{}", text(&done));
    let users: Vec<String> = redis::cmd("ACL").arg("USERS").query_async(&mut redis).await.unwrap();
    for ns in [&pg, &my] {
        let k: Vec<String> = redis::AsyncCommands::keys(&mut redis, keys(ns)).await.unwrap();
        assert!(k.is_empty() && !users.contains(ns), "{ns}: keys {k:?} or ACL user left");
    }
    assert!(util::schema_exists(&admin, &unmarked).await, "an unmarked schema was touched");
    assert!(!lite_dir.exists(), "the killed SQLite run's folder is gone: {}", text(&done));
    assert!(unmarked_dir.path().exists(), "an unmarked folder was touched");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA \"{unmarked}\""))).execute(&admin).await.unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

/// Redis dies mid-load and stays down: the SQL strategy before it keeps its verdict, the
/// Redis strategy's check is retried (bounded) and cannot complete, but its ops failed
/// past the error budget, so it is `FAIL: errors` (exit 1); its cleanup failure is on its
/// row and the report is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_lost_mid_load_fails_its_row_on_errors_and_the_report_stands() {
    crate::require!(Postgres);
    use std::io::{BufReader, Read};
    let dir = tempdir("redis-lost");
    let mut redis = util::PrivateRedis::start(false);
    let url = format!("redis://127.0.0.1:{}", redis.1);
    let mut child = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", "scenarios/quickstart.toml", "--backend", "postgres", "--duration-s", "2", "--repeat", "1"])
        .args(["--strategy", "conditional-update", "--strategy", "redis-counter", "--redis", &url])
        .args(["--out", dir.to_str().unwrap()])
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let (_, seen) = util::wait_for_line(&mut stderr, "redis-counter's load", |l| {
        l.starts_with("redis-counter on") && l.contains("seeded")
    });
    redis.0.kill().unwrap();
    redis.0.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).expect("a report on disk")).unwrap();
    let rows = json["strategies"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{seen}{rest}");
    assert_eq!(rows[0]["check"]["verdict"], "pass", "{seen}{rest}");
    let verdict = rows[1]["check"]["verdict"].as_str().unwrap();
    // Its ops failed past the error budget: that fails it even though its check could
    // not complete (the summary says both).
    assert_eq!(verdict, "FAIL: errors", "{seen}{rest}");
    let summary = rows[1]["check"]["summary"].as_str().unwrap();
    assert!(summary.contains("could not complete: read the counters"), "{summary}");
    assert!(rest.contains("retrying in"), "bounded retries are logged: {rest}");
    assert!(rows[1]["cleanup_error"].as_str().unwrap_or_default().contains("counterlab clean"), "{}", rows[1]);
    assert_eq!(status.code(), Some(1), "{seen}{rest}");
    let admin = util::admin().await;
    for r in rows {
        assert!(!util::schema_exists(&admin, r["namespace"].as_str().unwrap()).await, "the SQL namespace is dropped");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `--keep` on SQLite: the run's temporary folder stays, and its marker becomes a note,
/// so `clean` never lists (or removes) what the user kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_sqlite_folder_is_not_a_leftover() {
    let plan = util::plan(
        "strategies = [\"conditional-update\"]\nbackends = [\"sqlite\"]\n[data]\nusers = 5\nnotifications_per_user = 2\n\
         [workload]\nworkers = 1\nops = 20\n[workload.mix]\nmark_read = 1\n",
    );
    let report = counterlab::run::run_plan(&plan, &util::options(true, None), &mut |_| {}).await.unwrap();
    let folder = std::path::PathBuf::from(&report.servers[0].url);
    assert!(folder.join("counterlab.meta").exists(), "the kept folder and its note: {}", folder.display());
    let listed = counterlab::clean::sqlite_leftovers(&std::env::temp_dir());
    assert!(listed.iter().all(|l| l.namespace != folder.display().to_string()), "a kept folder is listed");
    std::fs::remove_dir_all(&folder).unwrap();
}

/// `repeat_until_settled`: after `repeat` rounds, the designs that kept their guarantee
/// run again while their order is not settled, up to the bound; the others do not. With
/// one round first no order can settle before 3 runs a side, so the two exact designs run
/// exactly 3 times and direct-update (no guarantee) once.
#[test]
fn unsettled_designs_run_again_up_to_the_bound_and_no_others() {
    let dir = tempdir("until-settled");
    let f = dir.join("seq.toml");
    std::fs::write(
        &f,
        "strategies = [\"conditional-update\", \"select-for-update\", \"direct-update\"]\nbackends = [\"sqlite\"]\n\
         repeat = 1\nrepeat_until_settled = 3\n\
         [data]\nusers = 50\nnotifications_per_user = 4\n[workload]\nworkers = 2\nops = 100\n\
         [workload.mix]\ncreate = 1\nmark_read = 1\nread_count = 1\n",
    )
    .unwrap();
    let out = dir.join("out");
    let o = counterlab(&["run", f.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let runs: Vec<(String, usize)> = json["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["strategy"].as_str().unwrap().to_string(), s["repeats"].as_array().map_or(1, Vec::len)))
        .collect();
    let expected = [("conditional-update", 3), ("select-for-update", 3), ("direct-update", 1)];
    assert_eq!(runs, expected.map(|(s, n)| (s.to_string(), n)), "{}", text(&o));
    assert!(json["replay_command"].as_str().unwrap().contains("--repeat-until-settled 3"), "{json}");
    // A bound below the repeat is refused, located.
    let bad = std::fs::read_to_string(&f).unwrap().replace("repeat = 1", "repeat = 4");
    std::fs::write(&f, bad).unwrap();
    let o = counterlab(&["run", f.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("seq.toml:4:") && text(&o).contains("must be at least repeat (4)"), "{}", text(&o));
    std::fs::remove_dir_all(&dir).ok();
}

/// `run`'s runtime: one thread (current-thread) for a closed-loop scenario of up to 16
/// workers, more for an open loop or more workers
/// on a machine with more than one core, `--threads` over both, `TOKIO_WORKER_THREADS`
/// over the default.
#[test]
fn a_closed_loop_runs_on_one_runtime_thread_unless_told_otherwise() {
    let dir = tempdir("threads");
    let out = dir.to_str().unwrap();
    let run = |scenario: &str, extra: &[&str], env: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_counterlab"));
        c.args(["run", scenario, "--backend", "sqlite", "--duration-s", "0.5", "--repeat", "1", "--out", out]);
        c.args(["--strategy", "conditional-update"]).args(extra).env_remove("TOKIO_WORKER_THREADS");
        if let Some(n) = env {
            c.env("TOKIO_WORKER_THREADS", n);
        }
        let o = c.output().unwrap();
        let t = text(&o);
        // It ran to its verdict (0 or 1: a threshold a short run may breach), no crash.
        assert!(matches!(o.status.code(), Some(0 | 1)), "{scenario} {extra:?}: {:?} {t}", o.status);
        let line = t.lines().find(|l| l.starts_with("runtime: ")).unwrap_or_else(|| panic!("no runtime line: {t}"));
        line.to_string()
    };
    let one = "runtime: 1 thread (current-thread)";
    assert_eq!(run("scenarios/quickstart.toml", &[], None), one);
    assert_eq!(run("scenarios/quickstart.toml", &["--threads", "1"], None), one);
    assert_eq!(run("scenarios/quickstart.toml", &["--workers", "16"], None), one);
    assert_eq!(run("scenarios/quickstart.toml", &["--threads", "3"], None), "runtime: 3 worker threads");
    assert_eq!(run("scenarios/quickstart.toml", &[], Some("2")), "runtime: 2 worker threads");
    // tokio sizes its default from the cores it counts; on more than one, not one thread.
    if std::thread::available_parallelism().map_or(1, usize::from) > 1 {
        let open = run("scenarios/open-loop-ramp.toml", &[], None);
        assert!(open.ends_with("worker threads"), "{open}");
        let many = run("scenarios/quickstart.toml", &["--workers", "17"], None);
        assert!(many.ends_with("worker threads"), "{many}");
    }
}
