//! The zset-buffer hot path (ZINCRBY pending delta user) driven exactly as counterlab's
//! strategies drive it (`RedisStrategy::buffer_delta` over the same ConnectionManager
//! setup), closed loop, for a fixed time; prints ops/s. `benches/redis/compare.sh` runs it
//! back to back with redis-benchmark on the same command and client count.
//!
//!     cargo bench --bench redis_zincrby -- CLIENTS SECONDS USERS
//!
//! Run without arguments (as `cargo bench` does) it does a 1-second smoke run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use counterlab_sim::Rng;
use counterlab_strategies::{Db, RedisConfig, RedisDesign, RedisServer, RedisStrategy, find};

fn arg(i: usize, default: u64) -> u64 {
    std::env::args().filter(|a| !a.starts_with("--")).nth(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn main() {
    let (clients, seconds, users) = (arg(1, 8), arg(2, 1), arg(3, 10_000));
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
        // The namespace `bench` gives the key cl:bench:{buf}:pending, which the
        // redis-benchmark side of the comparison uses too.
        let space = server.space("bench", Duration::from_secs(5), clients as u32).await.expect("connections");
        // The SQL side is never touched on this path; a lazy in-memory pool stands in.
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
        let s = Arc::new(RedisStrategy::new(info, RedisDesign::ZsetBuffer, db, space.clone(), cfg));
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
        space.delete_all().await.expect("cleanup");
    });
}
