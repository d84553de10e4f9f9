//! What recording the history costs the driver: the no-op strategy driven closed loop
//! with and without history, alternating, in one process (the driver alone is measured;
//! a real strategy's round trips dwarf it).
//!
//!   cargo run --release -p counterlab-sim --example history_overhead -- [rounds] [ops] [workers]

use std::sync::Arc;
use std::time::Instant;

use counterlab_core::Strategy;
use counterlab_sim::{DriverConfig, IdPool, Mix, Monitor, NullStrategy, Stop, run_load};

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let rounds = args.first().copied().unwrap_or(4);
    let ops = args.get(1).copied().unwrap_or(1_000_000);
    let workers = args.get(2).copied().unwrap_or(8) as u32;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!("round  history  ops  seconds  ops_per_s  recorded");
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let mut rate = [0.0f64; 2];
        // Alternate which goes first, so drift in the machine's load cancels out.
        let order = if round % 2 == 1 { [false, true] } else { [true, false] };
        for history in order {
            let stages = DriverConfig::closed_stage(workers, Stop::Ops(ops));
            let cfg = DriverConfig {
                history_limit: if history { 4_000_000 } else { 0 },
                segment: counterlab_sim::Segment::WHOLE,
                ..DriverConfig::plain(round, stages, Mix { weights: [2, 4, 0, 1, 1, 2] })
            };
            let s: Arc<dyn Strategy> = Arc::new(NullStrategy::default());
            let pool = Arc::new(IdPool::seeded(10_000, 10, 0));
            let t = Instant::now();
            let load = rt.block_on(run_load(s, pool, &cfg, Monitor::new()));
            let secs = t.elapsed().as_secs_f64();
            let r = load.total_ops() as f64 / secs;
            rate[history as usize] = r;
            println!("{round}  {history}  {}  {secs:.2}  {r:.0}  {}", load.total_ops(), load.history.len());
        }
        ratios.push(rate[1] / rate[0]);
    }
    let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.3}")).collect();
    println!("with/without history throughput per round: {}", shown.join(" "));
}
