//! Repository hygiene that reviewers would otherwise check by hand.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') && name != "reports" {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_rust_file_opens_with_a_doc_line() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(root, &mut files);
    assert!(files.len() > 15, "{files:?}");
    let missing: Vec<_> = files
        .iter()
        .filter(|f| !std::fs::read_to_string(f).unwrap().starts_with("//!"))
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect();
    assert!(missing.is_empty(), "files without a leading //! line: {missing:?}");
}

#[test]
fn every_sql_file_says_what_it_is_for() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/strategies/sql/postgres");
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        assert!(std::fs::read_to_string(&p).unwrap().starts_with("-- "), "{} lacks a header comment", p.display());
    }
}

/// docs/history.md's anomaly table, the `AnomalyKind` enum (which the report and the zoo
/// use) and the zoo's files name the same anomalies: none can be added in one place only.
#[test]
fn the_anomaly_names_agree_everywhere() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/history.md")).unwrap();
    let table = doc.split("## Anomalies").nth(1).expect("an Anomalies section");
    let mut documented: Vec<String> = table
        .lines()
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| l.strip_prefix("| `"))
        .flat_map(|l| {
            l.split(" |").next().unwrap().split(" / ").map(|n| n.trim_matches('`').to_string()).collect::<Vec<_>>()
        })
        .collect();
    documented.sort();
    let mut named: Vec<String> = counterlab_core::AnomalyKind::ALL.iter().map(|k| k.name().to_string()).collect();
    named.sort();
    assert_eq!(documented, named, "docs/history.md's table and AnomalyKind differ");
    for k in counterlab_core::AnomalyKind::ALL {
        assert!(!k.meaning().is_empty(), "{} has no legend line", k.name());
    }
    // Every zoo file expects a name that exists (parsing checks it; this keeps the list honest).
    for e in std::fs::read_dir(root.join("scenarios/zoo")).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        let expected = text.lines().find_map(|l| l.strip_prefix("expect_anomaly = ")).unwrap().trim_matches('"');
        assert!(expected == "none" || counterlab_core::AnomalyKind::from_name(expected).is_some(), "{expected}");
    }
}
