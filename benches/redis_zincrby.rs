//! The zset-buffer hot path (ZINCRBY pending delta user) driven exactly as counterlab's
//! strategies drive it (`RedisStrategy::buffer_delta` over the same ConnectionManager
//! setup), closed loop. As `cargo bench` runs it: a criterion bench (time per ZINCRBY
//! with 8 clients; skipped when Redis does not answer). With numbers, a fixed-time run
//! that prints ops/s, which `benches/redis/compare.sh` runs back to back with
//! redis-benchmark on the same command and client count:
//!
//!     cargo bench --bench redis_zincrby -- CLIENTS SECONDS USERS

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use counterlab_sim::Rng;
use counterlab_strategies::{Db, RedisConfig, RedisDesign, RedisServer, RedisSpace, RedisStrategy, find};
use criterion::{Criterion, Throughput};

/// The positional numbers on the command line (criterion's own flags left out).
fn numbers() -> Vec<u64> {
    std::env::args().skip(1).filter(|a| !a.starts_with("--")).filter_map(|a| a.parse().ok()).collect()
}

fn main() {
    let n = numbers();
    if n.is_empty() {
        let mut c = Criterion::default().configure_from_args();
        criterion_bench(&mut c);
        c.final_summary();
        return;
    }
    let arg = |i: usize, default: u64| n.get(i).copied().unwrap_or(default);
    let (clients, seconds, users) = (arg(0, 8), arg(1, 1), arg(2, 10_000));
    let url = std::env::var("COUNTERLAB_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async move {
        let server = match RedisServer::connect(&url, Duration::from_secs(5)).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("redis_zincrby: skipped, {e}");
                return;
            }
        };
        // The namespace `bench` gives the key cl:6d1d395e896d1d39:{buf}:pending
        // (`redis_prefix("bench")`), which the redis-benchmark side of the comparison uses too.
        let space = server.space("bench", Duration::from_secs(5), clients as u32).await.expect("connections");
        let s = zset_buffer(&space, users);
        let done = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let deadline = start + Duration::from_secs(seconds);
        let tasks: Vec<_> = (0..clients)
            .map(|i| {
                let (s, done) = (s.clone(), done.clone());
                tokio::spawn(async move {
                    let mut rng = Rng::derive(7, i);
                    while Instant::now() < deadline {
                        s.buffer_delta(rng.below(users) as i64 + 1, 1).await.expect("ZINCRBY");
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("client task");
        }
        let secs = start.elapsed().as_secs_f64();
        let n = done.load(Ordering::Relaxed);
        println!("counterlab_zincrby clients={clients} seconds={secs:.2} ops={n} ops_per_s={:.0}", n as f64 / secs);
        space.stop_refresher();
        space.delete_all().await.expect("cleanup");
        space.release().await.expect("drop the ACL user");
    });
}

/// zset-buffer over `space`, as a run builds it. The SQL side is never touched on this
/// path; a lazy in-memory pool stands in.
fn zset_buffer(space: &RedisSpace, users: u64) -> Arc<RedisStrategy> {
    let db = Db::Lite(sqlx::sqlite::SqlitePoolOptions::new().connect_lazy("sqlite::memory:").expect("lazy pool"));
    let cfg = RedisConfig {
        n_users: users,
        flush_interval: Duration::from_secs(3600),
        flush_batch: 1,
        reconcile_interval: None,
        cache_delay: Duration::from_millis(100),
        cache_ttl: Duration::from_secs(10),
    };
    let info = find("zset-buffer").expect("a built-in").info;
    Arc::new(RedisStrategy::new(info, RedisDesign::ZsetBuffer, db, space.clone(), cfg))
}

/// Time per ZINCRBY with 8 clients over 10 000 users: each sample runs `iters` calls
/// split over the clients.
fn criterion_bench(c: &mut Criterion) {
    const CLIENTS: u64 = 8;
    let url = std::env::var("COUNTERLAB_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let ns = format!("cl_bench_zincrby_{}", std::process::id());
    let server = match rt.block_on(RedisServer::connect(&url, Duration::from_secs(5))) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("redis_zincrby: skipped, {e}");
            return;
        }
    };
    let space = rt.block_on(server.space(&ns, Duration::from_secs(5), CLIENTS as u32)).expect("connections");
    let s = zset_buffer(&space, 10_000);
    let mut g = c.benchmark_group("redis_zincrby");
    g.throughput(Throughput::Elements(1)).sample_size(10).measurement_time(Duration::from_secs(3));
    g.bench_function("buffer_delta/8-clients", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                let tasks: Vec<_> = (0..CLIENTS)
                    .map(|i| {
                        let s = s.clone();
                        let n = iters / CLIENTS + u64::from(i < iters % CLIENTS);
                        tokio::spawn(async move {
                            let mut rng = Rng::derive(7, i);
                            for _ in 0..n {
                                s.buffer_delta(rng.below(10_000) as i64 + 1, 1).await.expect("ZINCRBY");
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.expect("client task");
                }
                start.elapsed()
            })
        })
    });
    g.finish();
    rt.block_on(async {
        space.stop_refresher();
        space.delete_all().await.expect("delete the keys");
        space.release().await.expect("drop the ACL user");
    });
}
