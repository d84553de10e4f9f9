//! `--metrics-addr`: the run's live figures served as OpenMetrics (Prometheus text
//! format, encoded by `prometheus-client`) over HTTP (`tiny_http`) while the run lasts:
//! operations and errors so far, last-interval latency quantiles and ops/s, drift when
//! sampled, and where the run is (cell i of N, phase).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use counterlab::run::{Progress, Status};
use counterlab_core::OpKind;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// The metrics and the totals already counted (counters take increments).
struct Metrics {
    registry: Registry,
    ops: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    latency: Family<Labels, Gauge<f64, AtomicU64>>,
    rate: Family<Labels, Gauge<f64, AtomicU64>>,
    drift: Family<Labels, Gauge>,
    phase: Family<Labels, Gauge>,
    cell: Gauge,
    cells: Gauge,
    /// Per label set, the total the counter already holds.
    counted: HashMap<Labels, u64>,
    /// The phase gauge set to 1 last (set back to 0 on the next phase).
    last_phase: Option<Labels>,
}

impl Metrics {
    fn new() -> Metrics {
        let mut m = Metrics {
            registry: Registry::with_prefix("counterlab"),
            ops: Family::default(),
            errors: Family::default(),
            latency: Family::default(),
            rate: Family::default(),
            drift: Family::default(),
            phase: Family::default(),
            cell: Gauge::default(),
            cells: Gauge::default(),
            counted: HashMap::new(),
            last_phase: None,
        };
        let r = &mut m.registry;
        r.register("ops", "Operations completed in the strategy run's load, by op kind", m.ops.clone());
        r.register("errors", "Operations that returned an error in the strategy run's load", m.errors.clone());
        r.register("latency_seconds", "Latency quantile over the last sampled interval", m.latency.clone());
        r.register("ops_per_second", "Throughput over the last sampled interval", m.rate.clone());
        r.register("drift", "SUM(counters) - COUNT(unread rows), when the scenario samples it", m.drift.clone());
        r.register("phase", "1 for the phase the strategy run is in", m.phase.clone());
        r.register("cell", "1-based index of the strategy run in progress", m.cell.clone());
        r.register("cells", "Strategy runs (strategy x backend x isolation) the run has", m.cells.clone());
        m
    }

    /// Adds `total - already counted` to the counter of `labels`.
    fn count(&mut self, family: &str, labels: Labels, total: u64) {
        let mut key = labels.clone();
        key.push(("family".into(), family.into()));
        let before = self.counted.insert(key, total).unwrap_or(0);
        let delta = if total >= before { total - before } else { total };
        let f = if family == "ops" { &self.ops } else { &self.errors };
        f.get_or_create(&labels).inc_by(delta);
    }

    fn update(&mut self, s: &Status) {
        let cell: Labels = vec![
            ("strategy".into(), s.strategy.clone()),
            ("backend".into(), s.backend.clone()),
            ("isolation".into(), s.isolation.clone()),
        ];
        let with = |k: &str, v: &str| {
            let mut l = cell.clone();
            l.push((k.to_string(), v.to_string()));
            l
        };
        self.cell.set(s.cell as i64);
        self.cells.set(s.cells as i64);
        let phase = with("phase", &s.phase);
        if let Some(prev) = self.last_phase.replace(phase.clone()).filter(|p| *p != phase) {
            self.phase.get_or_create(&prev).set(0);
        }
        self.phase.get_or_create(&phase).set(1);
        for (kind, n) in OpKind::ALL.iter().zip(&s.ops_by_kind) {
            self.count("ops", with("op", kind.name()), *n);
        }
        self.count("errors", cell.clone(), s.errors);
        let Some(x) = &s.sample else { return };
        for (q, us) in [("0.5", x.p50_us), ("0.99", x.p99_us), ("0.999", x.p999_us)] {
            self.latency.get_or_create(&with("quantile", q)).set(us as f64 / 1e6);
        }
        self.rate.get_or_create(&cell).set(x.ops_per_s());
        if let Some(d) = x.drift {
            self.drift.get_or_create(&cell).set(d);
        }
    }

    fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

/// The endpoint, serving until `stop` (or drop).
pub struct MetricsServer {
    metrics: Arc<Mutex<Metrics>>,
    stop: Arc<AtomicBool>,
    server: Option<Arc<tiny_http::Server>>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub addr: String,
}

/// Requests answered after a stop at most (those already accepted).
const MAX_DRAINED: usize = 64;

/// Starts serving `GET /metrics` (any path answers the same) on `addr`.
pub fn serve(addr: &str) -> anyhow::Result<MetricsServer> {
    let parsed: SocketAddr = addr
        .parse()
        .map_err(|e| anyhow::anyhow!("--metrics-addr {addr}: expected HOST:PORT such as 127.0.0.1:9464 ({e})"))?;
    let server = tiny_http::Server::http(parsed)
        .map(Arc::new)
        .map_err(|e| anyhow::anyhow!("--metrics-addr {addr}: cannot listen: {e}"))?;
    let bound = server.server_addr().to_ip().map_or(addr.to_string(), |a| a.to_string());
    let metrics = Arc::new(Mutex::new(Metrics::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (m, st, sv) = (metrics.clone(), stop.clone(), server.clone());
    let thread = std::thread::spawn(move || {
        let header = openmetrics_header();
        // Bounded waits, so a stop is seen within 200 ms even with no request.
        while !st.load(Ordering::Relaxed) {
            match sv.recv_timeout(Duration::from_millis(200)) {
                Ok(Some(req)) => {
                    let body = m.lock().expect("metrics lock").encode();
                    req.respond(tiny_http::Response::from_string(body).with_header(header.clone())).ok();
                }
                Ok(None) => {}
                Err(_) => break,
            }
        }
    });
    Ok(MetricsServer { metrics, stop, server: Some(server), thread: Some(thread), addr: bound })
}

fn openmetrics_header() -> tiny_http::Header {
    tiny_http::Header::from_bytes(
        &b"Content-Type"[..],
        &b"application/openmetrics-text; version=1.0.0; charset=utf-8"[..],
    )
    .expect("a valid header")
}

impl MetricsServer {
    /// The status sink that updates the metrics.
    pub fn sink(&self) -> Progress {
        let m = self.metrics.clone();
        Arc::new(move |s: &Status| m.lock().expect("metrics lock").update(s))
    }

    /// Stops serving (the port is free when this returns).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(server) = self.server.take() {
            server.unblock();
            if let Some(t) = self.thread.take() {
                t.join().ok();
            }
            // A request accepted while stopping gets the last metrics: dropped unanswered,
            // tiny_http would answer it 500 (seen once in tests/it/live.rs).
            let body = self.metrics.lock().map(|m| m.encode()).unwrap_or_default();
            for _ in 0..MAX_DRAINED {
                match server.try_recv() {
                    Ok(Some(req)) => {
                        req.respond(tiny_http::Response::from_string(body.clone()).with_header(openmetrics_header()))
                            .ok();
                    }
                    _ => break,
                }
            }
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Both sinks, either, or none.
pub fn both(a: Option<Progress>, b: Option<Progress>) -> Option<Progress> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Arc::new(move |s: &Status| {
            a(s);
            b(s);
        })),
        (a, b) => a.or(b),
    }
}
