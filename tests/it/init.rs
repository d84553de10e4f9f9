//! `counterlab init`, `validate` and `list`'s sections end to end: the generated
//! scenario and strategy file validate and run (SQLite without a server, PostgreSQL when
//! it answers), init never overwrites, a bad column is named at the strategy file's
//! line, and a validation leaves no namespace, role or file behind.

use std::path::Path;
use std::process::{Command, Output};

use crate::util;

/// counterlab with `args`, PostgreSQL at the suite's URL and no `DATABASE_URL`.
fn counterlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(args)
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .env_remove("DATABASE_URL")
        .output()
        .expect("spawn counterlab")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `counterlab init dir`, which must succeed; the scenario's path.
fn init(dir: &Path) -> String {
    let o = counterlab(&["init", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let scenario = dir.join("counterlab.toml").display().to_string();
    assert!(out.contains(&format!("wrote {scenario}")), "{out}");
    assert!(out.contains("strategies/my-counter.toml"), "{out}");
    assert!(out.contains(&format!("counterlab validate {scenario}")), "{out}");
    assert!(out.contains(&format!("counterlab run {scenario}")), "{out}");
    scenario
}

/// `validate` on `backend` (SQLite files in `sqlite`): the output and the run id it used.
fn validate(scenario: &str, backend: &str, sqlite: &Path) -> (Output, String) {
    let o = counterlab(&["validate", scenario, "--backend", backend, "--sqlite", sqlite.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    let id = err.lines().find_map(|l| l.strip_prefix("validate ")).map(|id| id.trim().to_string());
    let id = id.unwrap_or_else(|| panic!("no run id: {}", text(&o)));
    (o, id)
}

/// The schemas and roles of run `id` still on PostgreSQL.
async fn pg_leftovers(id: &str) -> Vec<String> {
    let admin = util::admin().await;
    sqlx::query_scalar(
        "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE $1 \
         UNION ALL SELECT rolname::text FROM pg_roles WHERE rolname LIKE $1",
    )
    .bind(format!("cl_{id}_%"))
    .fetch_all(&admin)
    .await
    .unwrap()
}

/// Every strategy of the generated scenario validated ok on `backend`.
fn all_ok(o: &Output, backend: &str) {
    assert_eq!(o.status.code(), Some(0), "{}", text(o));
    let out = String::from_utf8_lossy(&o.stdout);
    for s in ["my-counter", "conditional-update", "direct-update"] {
        assert!(out.lines().any(|l| l == format!("{s} on {backend}: ok")), "{s}: {out}");
    }
    assert!(out.contains("3 ok, 0 failed, 0 skipped"), "{out}");
}

/// `run` of the generated scenario, shortened to a second: exit 0, three rows, and
/// the default mix (the scenario has no `[workload.mix]`).
fn run_short(scenario: &str, backend: &str, out: &Path) {
    let o = counterlab(&["run", scenario, "--backend", backend, "--duration-s", "1", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["strategies"].as_array().unwrap().len(), 3, "{json}");
    assert_eq!(json["expectations_unmet"], 0);
    let mix = &json["plan"]["workload"]["mix"];
    let weights: Vec<u64> = counterlab_core::OpKind::ALL.iter().map(|k| mix[k.name()].as_u64().unwrap()).collect();
    assert_eq!(weights, counterlab::scenario::DEFAULT_MIX.weights.map(u64::from), "{mix}");
}

#[test]
fn init_then_validate_then_run_on_sqlite() {
    let dir = util::tempdir("init-sqlite");
    let scenario = init(&dir);
    let files = util::tempdir("init-sqlite-files");
    let (o, _) = validate(&scenario, "sqlite", &files);
    all_ok(&o, "sqlite");
    assert_eq!(util::files_under(&files), Vec::<std::path::PathBuf>::new(), "validate left files");
    run_short(&scenario, "sqlite", &dir.join("out"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_then_validate_then_run_on_postgres() {
    crate::require!(Postgres);
    let dir = util::tempdir("init-pg");
    let scenario = init(&dir);
    let (o, id) = validate(&scenario, "postgres", &dir);
    all_ok(&o, "postgres");
    assert_eq!(pg_leftovers(&id).await, Vec::<String>::new(), "validate left schemas or roles");
    run_short(&scenario, "postgres", &dir.join("out"));
}

#[test]
fn init_refuses_to_overwrite_and_names_the_file() {
    let dir = util::tempdir("init-twice");
    let scenario = init(&dir);
    std::fs::write(&scenario, "# mine\n").unwrap();
    let o = counterlab(&["init", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains(&format!("{scenario} exists")), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&scenario).unwrap(), "# mine\n", "overwritten");
    // One file there already: nothing is written, the other file neither.
    let other = util::tempdir("init-one-there");
    std::fs::create_dir(other.join("strategies")).unwrap();
    std::fs::write(other.join("strategies/my-counter.toml"), "").unwrap();
    let o = counterlab(&["init", other.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("strategies/my-counter.toml exists"), "{}", text(&o));
    assert!(!other.join("counterlab.toml").exists());
}

/// The generated strategy file with mark_read's first step naming a column that does
/// not exist; the line of that step's `sql`.
fn break_a_column(dir: &Path) -> usize {
    let path = dir.join("strategies/my-counter.toml");
    let good = "sql = \"UPDATE notifications SET is_read = TRUE WHERE id = :id";
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text.lines().position(|l| l.starts_with(good)).expect("mark_read's step") + 1;
    std::fs::write(&path, text.replacen(good, "sql = \"UPDATE notifications SET is_red = TRUE WHERE id = :id", 1))
        .unwrap();
    line
}

/// validate's output for the broken file: exit 1, my-counter failed at `line`, the
/// built-ins ok.
fn failed_at(o: &Output, backend: &str, line: usize) {
    assert_eq!(o.status.code(), Some(1), "{}", text(o));
    let out = String::from_utf8_lossy(&o.stdout);
    let failed = out
        .lines()
        .find(|l| l.starts_with(&format!("my-counter on {backend}: FAILED: ")))
        .unwrap_or_else(|| panic!("no failed line: {}", text(o)));
    assert!(failed.contains(&format!("strategies/my-counter.toml:{line}:7: mark_read step set: ")), "{failed}");
    assert!(failed.contains("is_red"), "{failed}");
    assert!(out.lines().any(|l| l == format!("conditional-update on {backend}: ok")), "{out}");
    assert!(out.contains("2 ok, 1 failed, 0 skipped"), "{out}");
}

#[test]
fn validate_names_the_strategy_files_line_for_a_bad_column_on_sqlite() {
    let dir = util::tempdir("validate-bad-sqlite");
    let scenario = init(&dir);
    let line = break_a_column(&dir);
    let files = util::tempdir("validate-bad-sqlite-files");
    let (o, _) = validate(&scenario, "sqlite", &files);
    failed_at(&o, "sqlite", line);
    assert_eq!(util::files_under(&files), Vec::<std::path::PathBuf>::new(), "validate left files");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_names_the_strategy_files_line_for_a_bad_column_on_postgres() {
    crate::require!(Postgres);
    let dir = util::tempdir("validate-bad-pg");
    let scenario = init(&dir);
    let line = break_a_column(&dir);
    let (o, id) = validate(&scenario, "postgres", &dir);
    failed_at(&o, "postgres", line);
    assert_eq!(pg_leftovers(&id).await, Vec::<String>::new(), "validate left schemas or roles");
}

#[test]
fn validate_of_a_malformed_scenario_exits_2_located() {
    let dir = util::tempdir("validate-malformed");
    let f = dir.join("bad.toml");
    std::fs::write(&f, "[data]\nusers = 10\nnotifications_per_user = 2\n[workload]\nworkers = 0\nops = 10\n").unwrap();
    let o = counterlab(&["validate", f.to_str().unwrap(), "--backend", "sqlite"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("bad.toml:5:11: workers must be in 1..="), "{}", text(&o));
}

#[test]
fn list_shows_the_designs_then_the_mutants_each_in_the_zoo() {
    let o = counterlab(&["list"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    let designs = lines.iter().position(|l| *l == "designs:").expect("designs heading");
    let mutants = lines.iter().position(|l| *l == "mutants (bug zoo, deliberately wrong):").expect("mutants heading");
    assert!(designs < mutants);
    let zoo: String = std::fs::read_dir("scenarios/zoo")
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    for row in counterlab::BUILTINS {
        let at = lines.iter().position(|l| l.starts_with(&format!("{} ", row.info.name))).expect(row.info.name);
        assert_eq!(at > mutants, row.is_mutant(), "{} in the wrong section:\n{out}", row.info.name);
        if row.is_mutant() {
            assert!(zoo.contains(&format!("\"{}\"", row.info.name)), "{} is in no zoo scenario", row.info.name);
        }
    }
    assert!(counterlab::BUILTINS.iter().any(|r| r.is_mutant()));
}
