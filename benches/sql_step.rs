//! The SQL per-op path as a run drives it: conditional-update's `read_count`,
//! `mark_read` and `create` over 16 clients, each inside the strategy's `worker_scope`
//! (a connection of its own for the loop, as pgbench gives each client), on PostgreSQL
//! (skipped when it does not answer) and on the embedded SQLite. Time per op: the
//! baseline for changes to the op's future, the step gate and the held connection
//! (`cargo bench --bench sql_step -- --save-baseline main`). `mark_read` cycles over the
//! seeded ids: after the first pass its guarded UPDATE changes no row (the path a
//! duplicate takes). A bench that panics leaves its PostgreSQL namespace behind
//! (`cl_bench_sql_<pid>_postgres`; `counterlab clean --yes` removes it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use counterlab_core::{SeedSpec, Strategy};
use counterlab_strategies::{Isolation, Namespace, PoolSpec, Server};
use criterion::{Criterion, Throughput};

const CLIENTS: u64 = 16;
const SEED: SeedSpec = SeedSpec { n_users: 10_000, notifications_per_user: 10, initial_read_per_user: 2 };

#[derive(Clone, Copy)]
enum Op {
    ReadCount,
    MarkRead,
    Create,
}

/// One op of client `i`'s `k`-th turn: users and seeded ids spread over the clients.
async fn one(s: &dyn Strategy, op: Op, i: u64, k: u64) {
    let n = k * CLIENTS + i;
    let user = (n % SEED.n_users + 1) as i64;
    let r = match op {
        Op::ReadCount => s.read_count(user).await.map(drop),
        Op::MarkRead => {
            let id = SEED.first_id(user) + (n / SEED.n_users % SEED.notifications_per_user) as i64;
            s.mark_read(user, id).await.map(drop)
        }
        Op::Create => s.create(user).await.map(drop),
    };
    r.expect("the op");
}

/// `iters` ops over `CLIENTS` workers, each in the strategy's worker scope; the wall time.
async fn drive(s: &Arc<dyn Strategy>, op: Op, iters: u64) -> Duration {
    let start = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let s = s.clone();
            let n = iters / CLIENTS + u64::from(i < iters % CLIENTS);
            tokio::spawn(async move {
                let inner = s.clone();
                let run = Box::pin(async move {
                    for k in 0..n {
                        one(inner.as_ref(), op, i, k).await;
                    }
                });
                s.worker_scope(CLIENTS as u32, run).await;
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("client task");
    }
    start.elapsed()
}

/// A seeded namespace on `server` (dropped by the caller).
async fn namespace(server: &Server, backend: &str) -> Namespace {
    let name = format!("cl_bench_sql_{}_{backend}", std::process::id());
    // SQLite transactions are always serializable; the servers' default level elsewhere.
    let isolation = if backend == "sqlite" { Isolation::Serializable } else { Isolation::ReadCommitted };
    let spec = PoolSpec { max_connections: CLIENTS as u32, acquire_timeout: Duration::from_secs(5), isolation };
    let ns = server.create_namespace(&name, spec).await.expect("the namespace");
    ns.seed(SEED).await.expect("the seed");
    ns
}

fn bench_on(c: &mut Criterion, rt: &tokio::runtime::Runtime, backend: &str, server: &Server) {
    let ns = rt.block_on(namespace(server, backend));
    let s = counterlab_strategies::build("conditional-update", ns.db().clone()).expect("a built-in");
    let mut g = c.benchmark_group(format!("sql_step/{backend}"));
    g.throughput(Throughput::Elements(1)).sample_size(10).measurement_time(Duration::from_secs(3));
    for (label, op) in [("read_count", Op::ReadCount), ("mark_read", Op::MarkRead), ("create", Op::Create)] {
        g.bench_function(format!("{label}/16-clients"), |b| b.iter_custom(|iters| rt.block_on(drive(&s, op, iters))));
    }
    g.finish();
    drop(s);
    rt.block_on(ns.drop_namespace()).expect("drop the namespace");
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let url = std::env::var("COUNTERLAB_POSTGRES_URL")
        .unwrap_or_else(|_| counterlab_strategies::DEFAULT_POSTGRES_URL.to_string());
    match rt.block_on(Server::connect_postgres(&url, Duration::from_secs(5))) {
        Ok(pg) => bench_on(&mut c, &rt, "postgres", &pg),
        Err(e) => eprintln!("sql_step: PostgreSQL skipped, {e}"),
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let lite = rt.block_on(Server::open_sqlite(dir.path())).expect("the embedded SQLite");
    bench_on(&mut c, &rt, "sqlite", &lite);
    c.final_summary();
}
