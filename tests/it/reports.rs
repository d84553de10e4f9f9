//! Every report.json committed under reports/ still loads into the typed report row,
//! writes its verdict, backend, level, guarantee and read source back as the same
//! strings, and renders (Markdown, HTML, terminal).

use std::path::{Path, PathBuf};

use counterlab_report::{Report, render_html, render_markdown, render_terminal};
use serde_json::Value;

fn report_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            report_files(&path, out);
        } else if path.file_name().is_some_and(|n| n == "report.json") {
            out.push(path);
        }
    }
}

/// The typed fields of one row as report.json holds them (a missing read source is the
/// primary, as it always read).
fn typed_fields(row: &Value) -> Vec<Value> {
    let read_from = row.get("read_from").cloned().unwrap_or_else(|| "primary".into());
    vec![
        row["backend"].clone(),
        row["isolation"].clone(),
        row["guarantee"].clone(),
        read_from,
        row["check"]["verdict"].clone(),
        row["check"].get("limits").cloned().unwrap_or_else(|| Value::Array(Vec::new())),
    ]
}

#[test]
fn every_committed_report_loads_writes_its_typed_fields_back_unchanged_and_renders() {
    let mut files = Vec::new();
    report_files(Path::new(env!("CARGO_MANIFEST_DIR")).join("reports").as_path(), &mut files);
    assert!(files.len() >= 20, "the committed reports were not found: {files:?}");
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let stored: Value = serde_json::from_str(&text).unwrap();
        let report: Report =
            serde_json::from_value(stored.clone()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let written = serde_json::to_value(&report).unwrap();
        let rows = stored["strategies"].as_array().unwrap();
        assert_eq!(rows.len(), report.strategies.len());
        for (i, row) in rows.iter().enumerate() {
            let mut expected = typed_fields(row);
            if row.get("isolation").is_none() {
                expected[1] = "read-committed".into();
            }
            assert_eq!(typed_fields(&written["strategies"][i]), expected, "{} row {i}", path.display());
        }
        for (i, skip) in stored["skipped"].as_array().into_iter().flatten().enumerate() {
            assert_eq!(written["skipped"][i]["backend"], skip["backend"], "{}", path.display());
            assert_eq!(written["skipped"][i]["isolation"], skip["isolation"], "{}", path.display());
        }
        assert!(!render_markdown(&report).is_empty() && !render_html(&report).is_empty());
        assert!(!render_terminal(&report).is_empty());
    }
}
