//! The cost of one pass of the expiry refresher (`RedisSpace::refresh_expiry`, see
//! `crates/strategies/src/redis/ttl.rs`): keys shaped like redis-counter's
//! (`cl:<tag>:{u:<id>}:unread`) under a fresh namespace. As `cargo bench` runs it: a
//! criterion bench, time per refresh pass over 10 000 keys (skipped when Redis does not
//! answer). With numbers, USERS keys, the first pass (every key gets a deadline) and
//! PASSES refresh passes timed; prints milliseconds:
//!
//!     cargo bench --bench redis_expiry -- USERS PASSES

use std::time::{Duration, Instant};

use counterlab_strategies::{RedisServer, RedisSpace};
use criterion::Criterion;

fn main() {
    let n: Vec<u64> =
        std::env::args().skip(1).filter(|a| !a.starts_with("--")).filter_map(|a| a.parse().ok()).collect();
    if n.is_empty() {
        let mut c = Criterion::default().configure_from_args();
        criterion_bench(&mut c);
        c.final_summary();
        return;
    }
    let arg = |i: usize, default: u64| n.get(i).copied().unwrap_or(default);
    let (users, passes) = (arg(0, 10_000), arg(1, 3).max(1));
    let url = std::env::var("COUNTERLAB_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async move {
        let server = match RedisServer::connect(&url, Duration::from_secs(5)).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("redis_expiry: skipped, {e}");
                return;
            }
        };
        let space = seeded_space(&server, &url, users).await;
        let t = Instant::now();
        let set = space.keep_alive().await.expect("first pass");
        println!("first pass: {set} keys in {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
        let mut ms = Vec::new();
        for _ in 0..passes {
            let t = Instant::now();
            let moved = space.refresh_expiry().await.expect("refresh pass");
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(moved, users, "every key moved on");
        }
        ms.sort_by(f64::total_cmp);
        println!(
            "refresh pass over {users} keys: median {:.1} ms, min {:.1} ms ({passes} passes)",
            ms[ms.len() / 2],
            ms[0]
        );
        space.stop_refresher();
        space.delete_all().await.expect("delete the keys");
        space.release().await.expect("drop the ACL user");
    });
}

/// A fresh key space holding `users` counter keys.
async fn seeded_space(server: &RedisServer, url: &str, users: u64) -> RedisSpace {
    let ns = format!("cl_bench_expiry_{}", std::process::id());
    let space = server.space(&ns, Duration::from_secs(5), 1).await.expect("a key space");
    let client = redis::Client::open(url).expect("URL");
    let mut c = client.get_multiplexed_async_connection().await.expect("connection");
    for chunk in (1..=users).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for u in chunk {
            pipe.set(format!("{}{{u:{u}}}:unread", counterlab_strategies::redis_prefix(&ns)), 5).ignore();
        }
        pipe.query_async::<()>(&mut c).await.expect("seed keys");
    }
    space
}

fn criterion_bench(c: &mut Criterion) {
    let url = std::env::var("COUNTERLAB_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let server = match rt.block_on(RedisServer::connect(&url, Duration::from_secs(5))) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("redis_expiry: skipped, {e}");
            return;
        }
    };
    let space = rt.block_on(seeded_space(&server, &url, 10_000));
    rt.block_on(space.keep_alive()).expect("first pass");
    let mut g = c.benchmark_group("redis_expiry");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    g.bench_function("refresh_pass/10k-keys", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let moved = rt.block_on(space.refresh_expiry()).expect("refresh pass");
                assert_eq!(moved, 10_000, "every key moved on");
            }
            t.elapsed()
        })
    });
    g.finish();
    rt.block_on(async {
        space.stop_refresher();
        space.delete_all().await.expect("delete the keys");
        space.release().await.expect("drop the ACL user");
    });
}
