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
