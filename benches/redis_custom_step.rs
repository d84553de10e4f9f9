//! A strategy file's one-command op, as a run drives it: `read_count` of the parity
//! designs in `benches/redis/parity.toml` (GET, INCR, EVALSHA of a script doing INCR),
//! built by `CustomStrategy::build` over a run's Redis key space, 16 clients each on a
//! connection of its own, INCR with the 16 sharing one connection
//! (`[workload] redis_pipeline = 16`: their commands pipelined), and GET and INCR sent 16
//! at a time (`[workload] redis_batch = 16`: `Strategy::batch`). Time per op; skipped
//! when Redis does not answer. `benches/redis/parity.py` compares whole runs of the same
//! designs with redis-benchmark.

use std::sync::Arc;
use std::time::{Duration, Instant};

use counterlab::scenario::{Overrides, parse};
use counterlab_core::{BatchOp, OpKind, Strategy};
use counterlab_strategies::{CustomStrategy, Db, RedisServer, RedisSpace};
use criterion::{Criterion, Throughput};

const CLIENTS: u64 = 16;
const USERS: u64 = 10_000;

/// The parity design `name` built over `space` (its SQL side never touched: a lazy
/// in-memory SQLite pool stands in).
async fn design(name: &str, space: RedisSpace) -> Arc<CustomStrategy> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/redis/parity.toml");
    let text = std::fs::read_to_string(path).expect("the parity scenario");
    let plan = parse(path, &text, "parity", &Overrides::default(), &[], 1).expect("a valid scenario");
    let db = Db::Lite(sqlx::sqlite::SqlitePoolOptions::new().connect_lazy("sqlite::memory:").expect("lazy pool"));
    let spec = &plan.custom[name];
    Arc::new(CustomStrategy::build(spec, db, Some(space)).await.expect("the design builds"))
}

/// `iters` read_counts over `CLIENTS` tasks, each sending `batch` at once (1: one
/// `read_count` at a time; more: `Strategy::batch`, one pipeline); the wall time.
async fn drive(s: &Arc<CustomStrategy>, iters: u64, batch: u64) -> Duration {
    let start = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let s = s.clone();
            let n = iters / CLIENTS + u64::from(i < iters % CLIENTS);
            tokio::spawn(async move {
                let user = |k: u64| ((k * CLIENTS + i) % USERS + 1) as i64;
                let mut k = 0;
                while k < n {
                    let m = batch.min(n - k);
                    if m == 1 {
                        s.read_count(user(k)).await.expect("the command");
                    } else {
                        let ops: Vec<BatchOp> =
                            (k..k + m).map(|k| BatchOp { kind: OpKind::ReadCount, user: user(k), id: 0 }).collect();
                        for r in s.batch(&ops).await {
                            r.expect("the command");
                        }
                    }
                    k += m;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("client task");
    }
    start.elapsed()
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let url = std::env::var("COUNTERLAB_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // The scheduler a closed-loop run of 16 workers has (`runtime_with`). Since 2026-12-06;
    // before, a multi-thread runtime: baselines saved before then do not compare.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let server = match rt.block_on(RedisServer::connect(&url, Duration::from_secs(5))) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("redis_custom_step: skipped, {e}");
            return;
        }
    };
    let mut g = c.benchmark_group("redis_custom_step");
    g.throughput(Throughput::Elements(1)).sample_size(10).measurement_time(Duration::from_secs(3));
    for (label, name, pipeline, batch) in [
        ("get/16-clients", "parity-get", 1, 1),
        ("incr/16-clients", "parity-incr", 1, 1),
        ("evalsha/16-clients", "parity-evalsha", 1, 1),
        ("incr/16-clients-pipelined-16", "parity-incr", 16, 1),
        ("get/16-clients-batch-16", "parity-get", 1, 16),
        ("incr/16-clients-batch-16", "parity-incr", 1, 16),
    ] {
        let ns = format!("cl_bench_step_{}_{}", std::process::id(), label.replace(['/', '-'], "_"));
        let space = rt.block_on(server.space(&ns, Duration::from_secs(5), CLIENTS as u32)).expect("connections");
        let space = space.pipelined(pipeline, CLIENTS as u32);
        let s = rt.block_on(design(name, space.clone()));
        g.bench_function(label, |b| b.iter_custom(|iters| rt.block_on(drive(&s, iters, batch))));
        rt.block_on(async {
            space.stop_refresher();
            space.delete_all().await.expect("delete the keys");
            space.release().await.expect("drop the ACL user");
        });
    }
    g.finish();
    c.final_summary();
}
