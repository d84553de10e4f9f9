//! The driver's own cost: a strategy that does nothing (each op only yields once to the
//! runtime), so what is measured is the pacer, the hand-off to workers and the
//! recording. As `cargo bench` runs it, criterion benches: wall time per op in closed
//! loop (1 worker, history off and on), and process CPU time per op in open loop at
//! 10k ops/s (from /proc/self/stat, Linux only; 10 ms ticks over a second of load).
//! With numbers, fixed-rate runs that print, per rate, the schedule lag (intended to
//! actual start; criterion holds no percentile of it), achieved/target, and the CPU
//! time per second of load, scaled to 10k ops/s (`benches/open-loop/measure.sh`):
//!
//!     cargo bench --bench open_loop_driver -- SECONDS RATE...
//!
//! And a closed loop of WORKERS null workers for OPS ops on a current-thread runtime (a
//! closed-loop run's own up to 16 workers), history on, printing ops/s and CPU per op:
//! the harness's per-op cost alone, for A/B runs and `valgrind --tool=callgrind`
//! (instructions per op: the difference of two op counts over the difference of ops):
//!
//!     cargo bench --bench open_loop_driver -- closed WORKERS OPS

use std::sync::Arc;
use std::time::{Duration, Instant};

use counterlab_core::Strategy;
use counterlab_sim::{DriverConfig, HistorySink, IdPool, LoadModel, Mix, Monitor, NullStrategy, Stage, Stop, run_load};
use criterion::{Criterion, Throughput};

/// utime + stime of this process, in seconds (clock ticks at the usual 100 Hz).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if let [mode, workers, ops, ..] = raw.as_slice()
        && mode == "closed"
    {
        let parse = |v: &str| v.parse::<u64>().unwrap_or_else(|_| panic!("not a count: {v}"));
        closed_null(parse(workers) as u32, parse(ops));
        return;
    }
    let args: Vec<f64> =
        std::env::args().skip(1).filter(|a| !a.starts_with("--")).filter_map(|a| a.parse().ok()).collect();
    let (seconds, rates) = match args.split_first() {
        Some((s, r)) if !r.is_empty() => (*s, r.to_vec()),
        _ => {
            let mut c = Criterion::default().configure_from_args();
            criterion_bench(&mut c);
            c.final_summary();
            return;
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    println!(
        "rate_target  achieved  achieved/target  lag_p50_us  lag_p99_us  lag_p999_us  lag_max_us  cpu_s_per_s  cpu_per_10k_ops_s"
    );
    for rate in rates {
        rt.block_on(async {
            let cfg = DriverConfig::plain(1, open_stage(rate, seconds), Mix { weights: [1, 2, 0, 0, 0, 1] });
            let strategy: Arc<dyn Strategy> = Arc::new(NullStrategy::default());
            let pool = Arc::new(IdPool::seeded(10_000, 10, 0));
            let (cpu0, t0) = (cpu_seconds(), Instant::now());
            let load = run_load(strategy, pool, &cfg, Monitor::new()).await;
            let (cpu, wall) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
            let (_scheduled, started, _dropped, _late, lag) = load.open_loop_totals();
            let achieved = started as f64 / seconds;
            let cpu_per_s = cpu / wall;
            println!(
                "{rate:>11.0}  {achieved:>8.0}  {:>15.4}  {:>10}  {:>10}  {:>11}  {:>10}  {cpu_per_s:>11.3}  {:>17.3}",
                achieved / rate,
                lag.value_at_quantile(0.5),
                lag.value_at_quantile(0.99),
                lag.value_at_quantile(0.999),
                lag.max(),
                cpu_per_s / (rate / 10_000.0)
            );
        });
    }
}

/// `ops` ops of a null strategy by `workers` closed-loop workers, the history kept (as a
/// run keeps it, through a sink): prints ops/s and the process's CPU per op.
fn closed_null(workers: u32, ops: u64) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let cfg = DriverConfig {
        history_limit: u64::MAX,
        history_sink: Some(Arc::new(Discard)),
        // mark_read alone, over the parity bench's data (benches/pgbench/mark-read.toml).
        ..DriverConfig::plain(
            1,
            DriverConfig::closed_stage(workers, Stop::Ops(ops)),
            Mix { weights: [0, 1, 0, 0, 0, 0] },
        )
    };
    let strategy: Arc<dyn Strategy> = Arc::new(NullStrategy::default());
    let pool = Arc::new(IdPool::seeded(10_000, 100, 0));
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    let load = rt.block_on(run_load(strategy, pool, &cfg, Monitor::new()));
    let (cpu, wall) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
    let n = load.total_ops();
    println!("workers {workers} ops {n} ops_per_s {:.0} cpu_us_per_op {:.3}", n as f64 / wall, cpu * 1e6 / n as f64);
}

/// A history sink that drops what it is given (a run's spills it to its store).
#[derive(Debug)]
struct Discard;

impl HistorySink for Discard {
    fn accept(&self, calls: Vec<counterlab_core::Event>) {
        std::hint::black_box(calls);
    }
}

/// An open-loop stage at `rate` ops/s for `seconds`.
fn open_stage(rate: f64, seconds: f64) -> Vec<Stage> {
    vec![Stage {
        name: "load".into(),
        stop: Stop::Duration(Duration::from_secs_f64(seconds)),
        model: LoadModel::Open { rate_from: rate, rate_to: rate, poisson: false, max_in_flight: 16 },
        measured: true,
    }]
}

fn criterion_bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let mix = Mix { weights: [1, 2, 0, 0, 0, 1] };
    let mut g = c.benchmark_group("driver");
    g.throughput(Throughput::Elements(1))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, limit) in [("history-off", 0), ("history-on", u64::MAX)] {
        g.bench_function(format!("closed/null/1-worker/{name}"), |b| {
            b.iter_custom(|iters| {
                let cfg = DriverConfig {
                    history_limit: limit,
                    ..DriverConfig::plain(1, DriverConfig::closed_stage(1, Stop::Ops(iters)), mix)
                };
                let strategy: Arc<dyn Strategy> = Arc::new(NullStrategy::default());
                let pool = Arc::new(IdPool::seeded(10_000, 10, 0));
                let t0 = Instant::now();
                rt.block_on(run_load(strategy, pool, &cfg, Monitor::new()));
                t0.elapsed()
            })
        });
    }
    // CPU time, not wall time: at a fixed rate the wall time is the schedule's.
    g.bench_function("open/null/10k-per-s/cpu", |b| {
        b.iter_custom(|iters| {
            let cfg = DriverConfig::plain(1, open_stage(10_000.0, iters as f64 / 10_000.0), mix);
            let strategy: Arc<dyn Strategy> = Arc::new(NullStrategy::default());
            let pool = Arc::new(IdPool::seeded(10_000, 10, 0));
            let cpu0 = cpu_seconds();
            rt.block_on(run_load(strategy, pool, &cfg, Monitor::new()));
            Duration::from_secs_f64(cpu_seconds() - cpu0)
        })
    });
    g.finish();
}
