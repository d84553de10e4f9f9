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

/// Appended to a copy of a report page: once laid out, writes into `<pre id="geom">` the
/// viewport, the page's scroll width, the box of every decision sentence and every
/// verdict of the decision view (with the row it belongs to), and every verdict cell of
/// every table with a `verdict` column beside the box its scroll container shows.
const GEOMETRY: &str = r##"<pre id="geom"></pre><script>
window.addEventListener("load", function () {
  var box = function (e) { var b = e.getBoundingClientRect();
    return { top: b.top, left: b.left, bottom: b.bottom, right: b.right, w: b.width, h: b.height }; };
  var out = { vw: window.innerWidth, vh: window.innerHeight,
    scroll_w: document.documentElement.scrollWidth, sentences: [], verdicts: [], cells: [] };
  document.querySelectorAll("table").forEach(function (t, ti) {
    var heads = Array.prototype.map.call(t.querySelectorAll("thead th"), function (h) { return h.textContent.trim(); });
    var col = heads.indexOf("verdict");
    if (col < 0) { return; }
    var shown = t.closest(".scroll") || document.documentElement;
    t.querySelectorAll("tbody tr").forEach(function (r) {
      var c = r.children[col];
      if (c) { out.cells.push(Object.assign(box(c), { table: ti, text: c.textContent, shown: box(shown) })); }
    });
  });
  document.querySelectorAll("#decision .decision-sentence").forEach(function (e) {
    out.sentences.push(Object.assign(box(e), { text: e.textContent })); });
  document.querySelectorAll("#decision .verdict[data-row]").forEach(function (e) {
    out.verdicts.push(Object.assign(box(e), { row: e.dataset.row })); });
  document.getElementById("geom").textContent = JSON.stringify(out);
});
</script>"##;

/// Runs `counterlab` with `args`; returns the exit code and its output.
fn counterlab(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(args)
        .env("COUNTERLAB_POSTGRES_URL", util::pg_url())
        .env("COUNTERLAB_MYSQL_URL", util::mysql_url())
        .output()
        .expect("spawn counterlab");
    (o.status.code(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// Whether Chromium is here; if not, says loudly that the test is skipped.
fn chromium_or_skip(test: &str) -> bool {
    if Path::new(CHROMIUM).exists() {
        return true;
    }
    eprintln!(
        "\n********************************************************************************\n\
         SKIPPED {test}: {CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)\n\
         ********************************************************************************\n"
    );
    false
}

/// The report in `out` laid out by Chromium in a 1280x800 window: the geometry JSON.
fn geometry(work: &Path, out: &Path, tag: &str) -> serde_json::Value {
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let page = work.join(format!("{tag}-geom.html"));
    std::fs::write(&page, html.replace("</body>", &format!("{GEOMETRY}\n</body>"))).unwrap();
    let dom = chromium(work, tag, &page, &["--window-size=1280,800", "--dump-dom"]);
    let start = dom
        .find("<pre id=\"geom\">")
        .unwrap_or_else(|| panic!("no geometry in the DOM: {}", &dom[..dom.len().min(2000)]));
    let rest = &dom[start + "<pre id=\"geom\">".len()..];
    let raw = &rest[..rest.find("</pre>").unwrap()];
    let json = raw.replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("geometry is not JSON ({e}): {json}"))
}

/// Asserts that every decision sentence and one verdict per strategy row of `out`'s
/// report.json lie inside the first 1280x800 viewport, and the page needs no horizontal
/// scrolling there.
fn assert_decision_in_first_viewport(work: &Path, out: &Path, tag: &str, groups: usize) {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let g = geometry(work, out, tag);
    // Headless Chromium's window of 1280x800 gives a 1280 px wide viewport (its height is
    // the window's less its frame): the page is laid out at the width that matters, and
    // the first 800 px of it are what a 1280x800 viewport shows.
    let (vw, vh) = (g["vw"].as_f64().unwrap(), 800.0);
    assert_eq!(vw, 1280.0, "Chromium did not lay out a 1280 px wide viewport: {g}");
    assert!(g["scroll_w"].as_f64().unwrap() <= vw, "the page scrolls sideways at 1280 px: {g}");
    let inside = |b: &serde_json::Value| {
        let f = |k: &str| b[k].as_f64().unwrap();
        f("w") > 0.0 && f("h") > 0.0 && f("top") >= 0.0 && f("left") >= 0.0 && f("bottom") <= vh && f("right") <= vw
    };
    let sentences = g["sentences"].as_array().unwrap();
    assert_eq!(sentences.len(), groups, "one sentence per backend x isolation: {g}");
    for s in sentences {
        assert!(s["text"].as_str().unwrap().starts_with("On "), "{s}");
        assert!(inside(s), "a decision sentence is outside the first 1280x800 viewport: {s}");
    }
    let rows: Vec<String> = json["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{} on {} at {}",
                s["strategy"].as_str().unwrap(),
                s["backend"].as_str().unwrap(),
                s["isolation"].as_str().unwrap()
            )
        })
        .collect();
    let verdicts = g["verdicts"].as_array().unwrap();
    for row in &rows {
        let v = verdicts
            .iter()
            .find(|v| v["row"] == row.as_str())
            .unwrap_or_else(|| panic!("no verdict for {row} in the decision view: {g}"));
        assert!(inside(v), "the verdict of {row} is outside the first 1280x800 viewport: {v}");
    }
    assert_eq!(verdicts.len(), rows.len(), "one verdict per row: {g}");
    assert_table_verdicts_shown(&g, vw);
}

/// Every verdict cell of every table lies within 1280 px and within what its scroll
/// container shows: no table hides a verdict behind sideways scrolling.
fn assert_table_verdicts_shown(g: &serde_json::Value, vw: f64) {
    let cells = g["cells"].as_array().unwrap();
    let tables: std::collections::BTreeSet<u64> = cells.iter().map(|c| c["table"].as_u64().unwrap()).collect();
    assert!(tables.len() >= 2, "the decision's ranked table and the figures table at least: {g}");
    for c in cells {
        let (f, shown) = (|k: &str| c[k].as_f64().unwrap(), |k: &str| c["shown"][k].as_f64().unwrap());
        let visible = f("w") > 0.0 && f("left") >= shown("left").max(0.0) && f("right") <= shown("right").min(vw);
        assert!(visible, "table {}'s verdict {:?} needs sideways scrolling at 1280 px: {c}", c["table"], c["text"]);
    }
}

/// The quickstart (1 s per strategy on PostgreSQL): its decision sentence and every
/// row's verdict are in the first 1280x800 viewport; its report.md's visible part (outside
/// `<details>`) is at most 40 lines; `counterlab report` re-renders report.md and
/// report.html byte for byte from report.json.
#[test]
fn quickstart_decision_is_in_the_first_viewport_and_re_renders_identically() {
    let _heavy = crate::util::heavy_blocking();
    let dir = crate::cli::tempdir("decision-qs");
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    let (code, text) =
        counterlab(&["run", "scenarios/quickstart.toml", "--backend", "postgres", "--duration-s", "1", "--out", o]);
    assert_eq!(code, Some(0), "{text}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let visible = visible_markdown_lines(&md);
    assert!(visible <= 40, "report.md shows {visible} lines outside <details>:\n{md}");
    assert!(md.starts_with("# counterlab run: quickstart\n\n## Decision\n\n**On postgres at read-committed, "), "{md}");

    let html = std::fs::read(out.join("report.html")).unwrap();
    std::fs::remove_file(out.join("report.md")).unwrap();
    std::fs::remove_file(out.join("report.html")).unwrap();
    let (code, text) = counterlab(&["report", out.join("report.json").to_str().unwrap()]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("DECISION") && text.contains("On postgres at read-committed"), "{text}");
    assert_eq!(std::fs::read_to_string(out.join("report.md")).unwrap(), md, "report.md differs after re-rendering");
    assert!(std::fs::read(out.join("report.html")).unwrap() == html, "report.html differs after re-rendering");
    let (code, text) = counterlab(&["report", dir.join("missing.json").to_str().unwrap()]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("cannot read") && text.contains("missing.json"), "{text}");

    if chromium_or_skip("quickstart_decision_is_in_the_first_viewport (geometry part)") {
        assert_decision_in_first_viewport(&dir, &out, "qs", 1);
    }
}

/// Lines of a Markdown document outside `<details>` blocks (their opening and closing
/// lines count: they show).
fn visible_markdown_lines(md: &str) -> usize {
    let mut depth = 0usize;
    let mut n = 0;
    for l in md.lines() {
        if l.starts_with("<details>") {
            depth += 1;
            n += 1;
        } else if l.starts_with("</details>") {
            depth = depth.saturating_sub(1);
            n += 1;
        } else if depth == 0 {
            n += 1;
        }
    }
    n
}

/// The isolation matrix (3 backends, every level, 150 ops per cell): 7 decision
/// sentences and all its rows' verdicts in the first 1280x800 viewport.
#[test]
fn isolation_matrix_decision_is_in_the_first_viewport() {
    let _heavy = crate::util::heavy_blocking();
    if !chromium_or_skip("isolation_matrix_decision_is_in_the_first_viewport") {
        return;
    }
    let dir = crate::cli::tempdir("decision-matrix");
    let out = dir.join("out");
    let (code, text) =
        counterlab(&["run", "scenarios/isolation-matrix.toml", "--ops", "150", "--out", out.to_str().unwrap()]);
    assert!(matches!(code, Some(0 | 1)), "{text}");
    assert_decision_in_first_viewport(&dir, &out, "matrix", 7);
}
