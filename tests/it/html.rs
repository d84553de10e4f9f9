//! The HTML report in a real browser: a short run of the binary writes report.html beside
//! report.json, headless Chromium lays out every chart with a non-zero size (read back
//! from the page's own self-check in the dumped DOM), and takes a non-trivial screenshot.

use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::util;

const CHROMIUM: &str = "/usr/bin/chromium";

/// How long one Chromium invocation may take before it is killed and the test fails.
const CHROMIUM_BOUND: Duration = Duration::from_secs(60);

/// Two strategies on PostgreSQL for 3 s each over tiny data: the quickstart's shape.
const SCENARIO: &str = r#"
name = "html-report"
seed = 11
strategies = ["conditional-update", "direct-update"]
backends = ["postgres"]

[data]
users = 50
notifications_per_user = 6
initial_read_per_user = 1

[workload]
workers = 4
duration_s = 3
dup_k = 2
op_timeout_ms = 5000

[workload.mix]
create = 20
mark_read = 35
mark_read_dup = 10
delete = 10
mark_all_read = 5
read_count = 20
"#;

fn chromium_or_fail() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install Debian's `chromium` package (apt-get install chromium); .ci/run installs it"
    );
}

/// Runs headless Chromium on `page` with a fresh profile, `extra` arguments and a bounded
/// wait; returns its stdout. `tag` names the run's files under `work`.
fn chromium(work: &Path, tag: &str, page: &Path, extra: &[&str]) -> String {
    let profile = work.join(format!("profile-{tag}"));
    std::fs::create_dir_all(&profile).unwrap();
    let (out, err) = (work.join(format!("{tag}.stdout")), work.join(format!("{tag}.stderr")));
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap())
        // Its own process group, so a hang is ended with every helper process it started.
        .process_group(0)
        .spawn()
        .expect("spawn chromium");
    let give_up = Instant::now() + CHROMIUM_BOUND;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > give_up {
            Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status().ok();
            child.kill().ok();
            child.wait().ok();
            panic!(
                "chromium ({tag}) did not finish within {CHROMIUM_BOUND:?}; stderr:\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(status.success(), "chromium ({tag}) exited with {status}; stderr:\n{stderr}");
    std::fs::read_to_string(&out).unwrap()
}

/// The page's self-check result: `body[data-charts]` of the dumped DOM, unescaped.
fn charts(dom: &str) -> Vec<serde_json::Value> {
    let Some(start) = dom.find("data-charts=\"") else {
        panic!("no data-charts in the dumped DOM: the self-check did not run:\n{}", &dom[..dom.len().min(2000)]);
    };
    let rest = &dom[start + "data-charts=\"".len()..];
    let raw = &rest[..rest.find('"').expect("closing quote")];
    let json = raw
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("data-charts is not JSON ({e}): {json}"))
}

#[test]
fn html_report_lays_out_every_chart_in_chromium() {
    crate::require!(Postgres);
    let _heavy = crate::util::heavy_blocking();
    chromium_or_fail();
    let dir = crate::cli::tempdir("html");
    let scenario = dir.join("html-report.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let out = dir.join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", scenario.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .output()
        .expect("spawn counterlab");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let page = out.join("report.html");
    assert!(page.exists(), "no report.html beside report.json in {}: the CLI must write it", out.display());
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("http://") && !html.contains("https://"), "the page refers to the network");

    let strategies = json["strategies"].as_array().unwrap();
    assert_eq!(strategies.len(), 2, "{json}");
    for s in strategies {
        let series = s["series"].as_array().map_or(0, |a| a.len());
        assert!(series > 0, "{} has an empty series: the time charts have nothing to draw", s["strategy"]);
    }

    let dom = chromium(&dir, "dom", &page, &["--dump-dom"]);
    assert!(dom.contains("conditional-update") && dom.contains("direct-update"), "{}", &dom[..dom.len().min(2000)]);
    let charts = charts(&dom);
    let find = |id: &str| {
        charts.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("chart {id} missing from {charts:?}"))
    };
    let size =
        |c: &serde_json::Value| (c["series"].as_u64().unwrap(), c["w"].as_f64().unwrap(), c["h"].as_f64().unwrap());
    // Time charts: at least one line per strategy report, laid out with a real size.
    for id in ["throughput", "latency-p99"] {
        let (n, w, h) = size(find(id));
        assert!(n >= strategies.len() as u64 && w > 0.0 && h > 0.0, "{id}: {n} series, {w} x {h}");
    }
    // Percentile curves: corrected and uncorrected for every op that ran.
    for (i, s) in strategies.iter().enumerate() {
        let ran = s["ops"].as_object().unwrap().values().filter(|o| o["count"].as_u64().unwrap() > 0).count();
        let (n, w, h) = size(find(&format!("percentiles-{i}")));
        assert!(
            ran > 0 && n == 2 * ran as u64 && w > 0.0 && h > 0.0,
            "percentiles-{i}: {n} series for {ran} ops, {w} x {h}"
        );
    }
    // Drift: sampled only when the plan asks; otherwise the chart says so.
    let (n, w, _) = size(find("drift-pending"));
    if n == 0 {
        let start = dom.find("id=\"drift-pending\"").unwrap();
        assert!(dom[start..].split("</svg>").next().unwrap().contains("not sampled"));
    } else {
        assert!(w > 0.0, "drift-pending: {n} series, width {w}");
    }
    assert_eq!(charts.len(), 3 + strategies.len(), "{charts:?}");

    let png = dir.join("report.png");
    chromium(&dir, "shot", &page, &[&format!("--screenshot={}", png.display()), "--window-size=1280,2400"]);
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", png.display()));
    assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000, "screenshot of {} bytes", bytes.len());
}
