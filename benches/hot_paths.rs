//! Criterion benches of the client-side hot paths that sit between two database calls:
//! drawing the next op, picking a live id, recording a latency, checking a large
//! population, and checking a history's reads in memory against the same history spilled
//! to part files; the explorer's step gate outside a session.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;

use counterlab_core::{
    CheckInput, Event, Guarantee, OpKind, Outcome, ReadSource, check_counters, check_reads_from, check_reads_parts,
    sort_history,
};
use counterlab_sim::{IdPool, Mix, OpGen, Rng, Skew, UserPicker, new_latency_histogram};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn workload(c: &mut Criterion) {
    let mix = Mix { weights: [20, 35, 10, 10, 5, 20] };
    for (name, skew) in [("uniform", Skew::Uniform), ("zipf-1.2", Skew::Zipf { exponent: 1.2 })] {
        let users = Arc::new(UserPicker::new(100_000, skew));
        let mut g = OpGen::new(42, 0, mix, users);
        c.bench_function(&format!("next_op/{name}/100k-users"), |b| b.iter(|| black_box(g.next_op())));
    }
    let pool = IdPool::seeded(10_000, 20, 5);
    let mut i = 0u64;
    c.bench_function("id_pool/pick_then_mark_read", |b| {
        b.iter(|| {
            i = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let user = (i % 10_000) as i64 + 1;
            if let Some(id) = pool.pick_unread_first(user, i) {
                pool.mark_read(user, id);
                pool.add_unread(user, id);
            }
        })
    });
}

/// A worker's first 1000 latencies (50 µs to 50 ms) into a fresh histogram that grows as
/// they arrive, into one sized for a second up front (every worker's 13 before issue 37),
/// and into one already grown (the steady state).
fn recording(c: &mut Criterion) {
    let mut rng = Rng::new(7);
    let values: Vec<u64> = (0..1000).map(|_| 50 + rng.below(50_000)).collect();
    let record_all = |h: &mut Histogram<u64>| values.iter().for_each(|&v| h.record(v).expect("auto-resizing"));
    let presized = || {
        let mut h = Histogram::<u64>::new_with_bounds(1, 1 << 20, 3).expect("valid bounds");
        h.auto(true);
        h
    };
    let mut g = c.benchmark_group("latency_record/1k-values");
    g.throughput(Throughput::Elements(values.len() as u64));
    g.bench_function("fresh-growing", |b| b.iter(|| record_all(black_box(&mut new_latency_histogram()))));
    g.bench_function("fresh-presized-1s", |b| b.iter(|| record_all(black_box(&mut presized()))));
    let mut grown = new_latency_histogram();
    record_all(&mut grown);
    g.bench_function("grown", |b| b.iter(|| record_all(black_box(&mut grown))));
    g.finish();
}

fn checker(c: &mut Criterion) {
    let rows: Vec<CheckInput> = (1..=1_000_000i64)
        .map(|u| CheckInput { user: u, counter: Some(u % 17 - (u % 97 == 0) as i64), truth: u % 17 })
        .collect();
    c.bench_function("check_counters/1M-users", |b| b.iter(|| black_box(check_counters(&rows, Guarantee::Exact))));
}

/// `calls` calls over `users` users: random kinds, overlapping times, mostly ok.
fn history_of(calls: u64, users: u64) -> Vec<Event> {
    let mut r = Rng::derive(5, 0);
    let mut events: Vec<Event> = (0..calls)
        .map(|i| {
            let op = OpKind::ALL[r.below(OpKind::ALL.len() as u64) as usize];
            let invoke_us = i * 2 + r.below(40);
            Event {
                worker: r.below(16) as u32,
                op,
                user: r.below(users) as i64 + 1,
                id: i as i64,
                invoke_us,
                complete_us: invoke_us + r.below(200),
                outcome: if r.below(50) == 0 { Outcome::Unknown } else { Outcome::Ok },
                observed: r.below(if op == OpKind::ReadCount { 30 } else { 2 }) as i64,
                attempts: 1,
                unknown_attempts: 0,
            }
        })
        .collect();
    sort_history(&mut events);
    events
}

/// The read check over 1M calls: in memory, and spilled to part files (read back,
/// sorted and checked part by part, as a run past `SPILL_AFTER` calls does).
fn history(c: &mut Criterion) {
    let events = history_of(1_000_000, 100_000);
    let mut spilled = counterlab_runner::spill::spill(events.iter().copied(), None).expect("spill");
    let mut g = c.benchmark_group("history");
    g.throughput(Throughput::Elements(events.len() as u64)).sample_size(10);
    g.bench_function("check_reads/1M-calls/memory", |b| {
        b.iter(|| black_box(check_reads_from(&events, &|_| 15, ReadSource::Counter).reads_checked))
    });
    g.bench_function("check_reads/1M-calls/spilled", |b| {
        b.iter(|| {
            black_box(check_reads_parts(&mut spilled, &|_| 15, ReadSource::Counter).expect("parts").reads_checked)
        })
    });
    g.finish();
}

/// A ready future polled once, as a call that came back at once.
fn ready<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => unreachable!("a ready future"),
    }
}

/// The explorer's step gate outside an explorer's session, which every SQL and Redis call
/// of a normal run passes (one task-local lookup), against the bare call.
fn gate(c: &mut Criterion) {
    use counterlab_strategies::gate;
    let mut g = c.benchmark_group("step_gate/outside-a-session");
    g.bench_function("bare-call", |b| b.iter(|| ready(async { Ok::<i64, String>(black_box(1)) })));
    g.bench_function("gated-call", |b| {
        b.iter(|| ready(gate::step(String::new, |_: &i64| String::new(), async { Ok::<i64, String>(black_box(1)) })))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    // Short: `cargo bench` stays minutes (benches/README.md).
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = workload, recording, checker, history, gate
}
criterion_main!(benches);
