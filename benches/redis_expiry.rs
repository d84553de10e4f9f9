//! The cost of one pass of the expiry refresher (`RedisSpace::refresh_expiry`, see
//! `crates/strategies/src/redis/ttl.rs`): USERS keys shaped like redis-counter's
//! (`cl:<ns>:{u:<id>}:unread`) under a fresh namespace, the first pass (every key gets a
//! deadline) and PASSES refresh passes timed; prints milliseconds.
//!
//!     cargo bench --bench redis_expiry -- USERS PASSES
//!
//! Run without arguments (as `cargo bench` does) it does a smoke run over 10 000 keys.

use std::time::{Duration, Instant};

use counterlab_strategies::RedisServer;

fn arg(i: usize, default: u64) -> u64 {
    std::env::args().filter(|a| !a.starts_with("--")).nth(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn main() {
    let (users, passes) = (arg(1, 10_000), arg(2, 3).max(1));
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
        let ns = format!("cl_bench_expiry_{}", std::process::id());
        let space = server.space(&ns, Duration::from_secs(5), 1).await.expect("a key space");
        let client = redis::Client::open(url.as_str()).expect("URL");
        let mut c = client.get_multiplexed_async_connection().await.expect("connection");
        for chunk in (1..=users).collect::<Vec<_>>().chunks(1000) {
            let mut pipe = redis::pipe();
            for u in chunk {
                pipe.set(format!("cl:{ns}:{{u:{u}}}:unread"), 5).ignore();
            }
            pipe.query_async::<()>(&mut c).await.expect("seed keys");
        }
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
