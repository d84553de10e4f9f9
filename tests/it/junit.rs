//! CI formats (issue 35): `run --junit FILE` validates against the JUnit schema
//! (tests/data/junit.xsd, with xmllint) and fails exactly the rows that make the exit
//! code non-zero; with `GITHUB_ACTIONS=true` each such row is an `::error` line; shell
//! completions and the man page generate.

use std::process::Command;

use crate::util;

/// conditional-update (exact, passes) beside delete-decrements (a file-defined mutant
/// whose counters end too low on any backend), on SQLite.
fn scenario(dir: &std::path::Path) -> std::path::PathBuf {
    let mutant = std::fs::canonicalize("scenarios/strategies/delete-decrements.toml").unwrap();
    let f = dir.join("ci.toml");
    let toml = format!(
        "strategies = [\"conditional-update\", \"delete-decrements\"]\nstrategy_files = [{:?}]\n\
         backends = [\"sqlite\"]\n[data]\nusers = 20\nnotifications_per_user = 6\ninitial_read_per_user = 3\n\
         [workload]\nworkers = 2\nops = 400\n[workload.mix]\ncreate = 1\nmark_read = 2\ndelete = 2\n",
        mutant.display().to_string()
    );
    std::fs::write(&f, toml).unwrap();
    f
}

/// The schema check, or None (the test is listed as skipped) without xmllint.
fn validate(xml: &std::path::Path) -> Option<std::process::Output> {
    let o = Command::new("xmllint").args(["--noout", "--schema", "tests/data/junit.xsd"]).arg(xml).output();
    match o {
        Ok(o) => Some(o),
        Err(e) => {
            util::skip(&format!("SKIPPED junit::schema (xmllint: {e}; Debian: libxml2-utils)"));
            None
        }
    }
}

#[test]
fn junit_and_annotations_fail_exactly_the_rows_the_exit_code_fails() {
    let dir = util::tempdir("junit");
    let xml = dir.join("junit").join("counterlab.xml");
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", scenario(&dir).to_str().unwrap(), "-q", "--out", dir.to_str().unwrap(), "--junit"])
        .arg(&xml)
        .arg("--csv")
        .arg(dir.join("figures.csv"))
        .env("GITHUB_ACTIONS", "true")
        .output()
        .unwrap();
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}");
    let text = std::fs::read_to_string(&xml).unwrap();
    if let Some(v) = validate(&xml) {
        assert!(v.status.success(), "{}{text}", String::from_utf8_lossy(&v.stderr));
    }
    // Two rows run, two combinations skipped (SQLite has one level); one failure.
    assert!(text.contains(r#"<testsuites name="counterlab" tests="4" skipped="2" failures="1" errors="0">"#), "{text}");
    let case = |name: &str| {
        let at = text.find(&format!("<testcase name=\"{name} on sqlite at serializable\"")).expect(name);
        text[at..text[at..].find("</testcase>").map_or(text.len(), |e| at + e)].to_string()
    };
    assert!(!case("conditional-update").contains("<failure"), "{text}");
    let failed = case("delete-decrements");
    assert!(failed.contains(r#"<failure message="verdict FAIL: counters"#), "{failed}");
    assert!(failed.contains("anomaly wrong_delete_adjustment"), "the witnesses are in the failure: {failed}");
    figures_match_the_report(&dir);
    let errors: Vec<&str> = out.lines().filter(|l| l.starts_with("::")).collect();
    assert_eq!(errors.len(), 1, "{out}");
    assert!(
        errors[0].starts_with("::error title=counterlab%3A delete-decrements on sqlite at serializable::verdict FAIL"),
        "{}",
        errors[0]
    );
}

/// `--csv`: the header, then one record per row and op kind that ran, each with the
/// row's verdict and the op's count as report.json has them.
fn figures_match_the_report(dir: &std::path::Path) {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let mut want = Vec::new();
    for s in json["strategies"].as_array().unwrap() {
        for (op, o) in s["ops"].as_object().unwrap().iter().filter(|(_, o)| o["count"].as_u64() > Some(0)) {
            let field = |k: &str| s[k].as_str().unwrap().to_string();
            let verdict = s["check"]["verdict"].as_str().unwrap().to_string();
            want.push([
                field("strategy"),
                field("backend"),
                field("isolation"),
                verdict,
                op.clone(),
                o["count"].to_string(),
            ]);
        }
    }
    let mut r = csv::Reader::from_path(dir.join("figures.csv")).unwrap();
    assert_eq!(r.headers().unwrap().iter().collect::<Vec<_>>(), counterlab_report::CSV_HEADER);
    let got: Vec<[String; 6]> = r
        .records()
        .map(|rec| {
            let rec = rec.unwrap();
            [1, 2, 3, 5, 8, 9].map(|i| rec[i].to_string())
        })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn completions_for_bash_zsh_and_fish_and_a_man_page_are_generated() {
    let bin = env!("CARGO_BIN_EXE_counterlab");
    for shell in ["bash", "zsh", "fish"] {
        let o = Command::new(bin).args(["completions", shell]).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success() && text.contains("counterlab") && text.contains("junit"), "{shell}: {text}");
        if shell == "bash" {
            // bash parses what it would source.
            let dir = util::tempdir("completions");
            let f = dir.join("counterlab.bash");
            std::fs::write(&f, text.as_bytes()).unwrap();
            let n = Command::new("bash").arg("-n").arg(&f).output().unwrap();
            assert!(n.status.success(), "{}", String::from_utf8_lossy(&n.stderr));
        }
    }
    let bad = Command::new(bin).args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let man = Command::new(bin).arg("man").output().unwrap();
    let page = String::from_utf8_lossy(&man.stdout);
    assert!(man.status.success() && page.contains(".TH counterlab 1") && page.contains("completions"), "{page}");
}
