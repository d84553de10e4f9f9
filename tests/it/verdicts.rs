//! One verdict everywhere: the label in report.json, report.md, report.html and the
//! terminal, and the exit code, for a run whose reads are wrong (counters right), one
//! whose operations all fail, one with no evidence (a delete-only mix on an empty seed),
//! and one whose history was capped (a qualified label, never a silent pass).

use std::path::Path;
use std::process::Command;

use crate::util;

/// The conditional-update file strategy as `twin`, with `edit` applied, in a small
/// scenario with `mix` on PostgreSQL; written to a fresh directory.
fn scenario(tag: &str, data: &str, mix: &str, edit: impl Fn(String) -> String) -> crate::util::Tmp {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/strategies/conditional-update.toml");
    let base = std::fs::read_to_string(f).unwrap().replace("conditional-update-file", "twin");
    let dir = crate::cli::tempdir(tag);
    let text = format!(
        "name = \"{tag}\"\nseed = 3\nstrategies = [\"twin\"]\nbackends = [\"postgres\"]\n\
         [data]\n{data}\n[workload]\nworkers = 2\nops = 300\n[workload.mix]\n{mix}\n{}",
        edit(base)
    );
    std::fs::write(dir.join("s.toml"), text).unwrap();
    dir
}

/// Runs the scenario with `extra` flags; returns the exit code, the terminal output and
/// the three report files.
fn run(dir: crate::util::Tmp, extra: &[&str]) -> (Option<i32>, String, serde_json::Value, String, String) {
    let (path, out) = (dir.join("s.toml"), dir.join("out"));
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", path.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .args(extra)
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .output()
        .unwrap();
    let term = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let json = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    (o.status.code(), term, json, md, html)
}

fn assert_everywhere(
    label: &str,
    (code, term, json, md, html): &(Option<i32>, String, serde_json::Value, String, String),
    exit: i32,
) {
    let s = &json["strategies"][0]["check"];
    assert_eq!(s["verdict"], label, "{term}");
    assert_eq!(*code, Some(exit), "{term}");
    assert!(term.contains(&format!("  {label} ")), "terminal: {term}");
    assert!(md.contains(&format!("| {label} |")) && md.contains(&format!("- `{label}`")), "markdown: {md}");
    assert!(html.contains(&format!(">{label}</span>")), "html");
}

const DATA: &str = "users = 20\nnotifications_per_user = 5";
const READ: &str = "sql = \"SELECT unread FROM unread_counts WHERE user_id = :user\"";

#[test]
fn wrong_reads_with_right_counters_fail_as_reads_in_every_output() {
    crate::require!(Postgres);
    let dir = scenario("reads", DATA, "mark_read = 50\nread_count = 50", |b| {
        b.replace(READ, "sql = \"SELECT unread + 1 AS unread FROM unread_counts WHERE user_id = :user\"")
    });
    let r = run(dir, &[]);
    assert_eq!(r.2["strategies"][0]["check"]["users_mismatched"], 0, "the counters themselves are right");
    assert_everywhere("FAIL: reads", &r, 1);
    assert_eq!(r.2["strategies"][0]["check"]["matches_guarantee"], false);
}

#[test]
fn operations_that_all_fail_are_a_failure_naming_the_error() {
    crate::require!(Postgres);
    let dir = scenario("errors", DATA, "mark_read = 50\nread_count = 50", |b| {
        b.replace(
            "sql = \"UPDATE unread_counts SET unread = unread - 1 WHERE user_id = :user\"",
            "sql = \"UPDATE unread_counts SET unread = unread / 0 WHERE user_id = :user\"",
        )
    });
    let r = run(dir, &[]);
    assert_everywhere("FAIL: errors", &r, 1);
    let summary = r.2["strategies"][0]["check"]["summary"].as_str().unwrap().to_string();
    assert!(summary.contains("division by zero"), "{summary}");
}

#[test]
fn a_delete_only_mix_on_an_empty_seed_is_no_evidence_and_fails_under_strict() {
    crate::require!(Postgres);
    let data = "users = 20\nnotifications_per_user = 0";
    let r = run(scenario("empty", data, "delete = 1", |b| b), &[]);
    assert_everywhere("NO EVIDENCE", &r, 0);
    assert!(r.1.contains("pass --strict"), "{}", r.1);
    let r = run(scenario("empty-strict", data, "delete = 1", |b| b), &["--strict"]);
    assert_everywhere("NO EVIDENCE", &r, 1);
}

/// `[[expect]]` per backend: on SQLite direct-update cannot drift (one writer at a time),
/// so an expectation that it drifts there is not met (exit 1, said in every output with
/// the reason), while the expectation that it shows no drift there is met.
#[test]
fn per_backend_expectations_are_judged_in_every_output_and_the_exit_code() {
    let dir = crate::cli::tempdir("expect");
    let body = "strategies = [\"direct-update\"]\nbackends = [\"sqlite\"]\n\
                [data]\nusers = 20\nnotifications_per_user = 5\n\
                [workload]\nworkers = 4\nops = 400\n\
                [workload.mix]\nmark_read = 2\nmark_read_dup = 2\ncreate = 1\nread_count = 1\n\
                [[expect]]\nstrategy = \"direct-update\"\nbackends = [\"sqlite\"]\nverdict = \"no-drift-observed\"\n";
    let unmet = format!("{body}[[expect]]\nstrategy = \"direct-update\"\nverdict = \"drift-expected\"\n");
    std::fs::write(dir.join("s.toml"), format!("name = \"expect\"\nseed = 4\n{unmet}")).unwrap();
    let (code, term, json, md, html) = run(dir, &[]);
    assert_eq!(json["expectations_unmet"], 1, "{term}");
    let results = json["strategies"][0]["expectations"].as_array().unwrap().clone();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!((results[0]["met"].as_bool(), results[1]["met"].as_bool()), (Some(true), Some(false)));
    let detail = results[1]["detail"].as_str().unwrap();
    let want = "expected direct-update: verdict drift-expected; sqlite at serializable: verdict no-drift-observed";
    assert!(detail.contains(want), "{detail}");
    assert!(json["expectations_not_judged"].as_array().unwrap().is_empty(), "both entries were judged");
    assert!(detail.contains("one writer at a time"), "the reason is given: {detail}");
    assert_eq!(code, Some(1), "{term}");
    assert!(
        term.contains("expectations not met") && term.contains("1 expectation(s) of the scenario not met"),
        "{term}"
    );
    assert!(md.contains("expected **NOT MET**") && md.contains("expected met"), "{md}");
    assert!(html.contains("<h2>Expectations</h2>") && html.contains("NOT MET"), "html");
}

#[test]
fn a_capped_history_qualifies_the_label_everywhere_and_fails_under_strict() {
    crate::require!(Postgres);
    let mix = "mark_read = 50\nread_count = 50";
    for (strict, exit) in [(false, 0), (true, 1)] {
        let dir = scenario("capped", DATA, mix, |b| b);
        let extra: &[&str] = if strict { &["--history-limit", "100", "--strict"] } else { &["--history-limit", "100"] };
        let r = run(dir, extra);
        let (check, history) = (&r.2["strategies"][0]["check"], &r.2["strategies"][0]["history"]);
        let dropped = history["dropped"].as_u64().unwrap();
        assert!(dropped > 0 && history["events"] == 100, "{history}");
        let limit = format!("history capped at 100 calls ({dropped} not recorded): reads not checked");
        assert_everywhere(&format!("pass [{limit}]"), &r, exit);
        assert_eq!(check["limits"], serde_json::json!([limit]));
        assert_eq!((check["matches_guarantee"].as_bool(), history["reads_checked"].as_u64()), (Some(true), Some(0)));
        assert!(r.1.contains("1 strategy run(s) not checked in full"), "{}", r.1);
        assert!(r.1.contains("twin kept exact counts (reads not checked: history capped)"), "decision view: {}", r.1);
        assert!(!check["summary"].as_str().unwrap().contains("every read"), "{check}");
    }
    // Uncapped, the same run checks every read and its label has no brackets.
    let r = run(scenario("uncapped", DATA, mix, |b| b), &[]);
    assert_everywhere("pass", &r, 0);
    assert_eq!(r.2["strategies"][0]["check"].get("limits"), None);
    assert!(r.2["strategies"][0]["history"]["reads_checked"].as_u64() > Some(50));
}
