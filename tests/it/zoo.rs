//! `counterlab zoo` can fail: a correct strategy expected to show an anomaly is a miss, a
//! racy one expected to show none is a false positive; both exit 1 with the replay
//! command; a run the environment decided is rerun and counted apart; and a file
//! without `expect_anomaly` is refused before anything runs.

use std::process::Command;

use crate::cli::tempdir;
use crate::util;

const BODY: &str = "[data]\nusers = 10\nnotifications_per_user = 5\n[workload]\nworkers = 4\nduration_s = 0.5\ndup_k = 4\n[workload.mix]\ncreate = 1\nmark_read_dup = 3\nread_count = 1\n";

fn zoo(dir: &std::path::Path, out: &std::path::Path) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["zoo", "--seeds", "1", "--strict", "--dir"])
        .arg(dir)
        .arg("--out")
        .arg(out)
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .output()
        .expect("spawn counterlab");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.code().unwrap_or(-1), text)
}

#[test]
fn a_miss_and_a_false_positive_fail_the_zoo() {
    crate::require!(Postgres);
    let _heavy = crate::util::heavy_blocking();
    let dir = tempdir("zoo");
    let write = |name: &str, head: &str| std::fs::write(dir.join(name), format!("{head}\n{BODY}")).unwrap();
    write(
        "a-miss.toml",
        "strategies = [\"conditional-update\"]\nbackends = [\"postgres\"]\nexpect_anomaly = \"double_decrement\"",
    );
    write(
        "b-false-positive.toml",
        "strategies = [\"direct-update\"]\nbackends = [\"postgres\"]\nexpect_anomaly = \"none\"",
    );
    let out = dir.join("out");
    let (code, text) = zoo(&dir, &out);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("a-miss.toml conditional-update seed"), "{text}");
    assert!(text.contains(": missed (found: )"), "{text}");
    assert!(text.contains(": false positive (found: double_decrement x"), "{text}");
    assert!(text.contains("replay: `counterlab run "), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("zoo.json")).unwrap()).unwrap();
    let results: Vec<&str> = json["runs"].as_array().unwrap().iter().map(|r| r["result"].as_str().unwrap()).collect();
    assert_eq!(results, ["missed", "false positive"]);

    // A file that is not a zoo entry stops the zoo before anything runs.
    write("c-plain.toml", "strategies = [\"conditional-update\"]");
    let (code, text) = zoo(&dir, &out);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("c-plain.toml: not a zoo scenario: it declares no expect_anomaly"), "{text}");
    assert!(!text.contains("zoo: "), "nothing may run: {text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A control whose run the environment decided (here NO EVIDENCE: the scenario asks for
/// more calls of each kind than half a second makes) is not a false positive: it is run
/// once more, then listed as an `environment` failure, and still fails the zoo.
#[test]
fn a_run_the_environment_decided_is_rerun_and_counted_apart_from_false_positives() {
    crate::require!(Postgres);
    let _heavy = crate::util::heavy_blocking();
    let dir = tempdir("zoo-env");
    let head = "strategies = [\"conditional-update\"]\nbackends = [\"postgres\"]\nexpect_anomaly = \"none\"\n\
                [verdict]\nmin_ops_per_kind = 1000000";
    std::fs::write(dir.join("starved.toml"), format!("{head}\n{BODY}")).unwrap();
    let out = dir.join("out");
    let (code, text) = zoo(&dir, &out);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("the environment decided it; once more"), "{text}");
    assert!(text.contains("0 missed, 0 false positives, 1 environment failures (run twice)"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("zoo.json")).unwrap()).unwrap();
    let run = &json["runs"][0];
    assert_eq!((run["result"].as_str(), run["rerun"].as_bool()), (Some("environment"), Some(true)), "{run}");
    std::fs::remove_dir_all(&dir).ok();
}
