//! Checker cost: builds a synthetic history of N calls (default 1 000 000) over U users
//! from a linearizable counter model, then times `check_reads` and `classify` on it.
//!
//!   cargo run --release -p counterlab-core --example check_cost -- [calls] [users]

use std::time::Instant;

use counterlab_core::{CheckInput, Context, Event, Guarantee, OpKind, Outcome, check_reads, classify};

/// xorshift64*: enough for a synthetic workload.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (calls, users) = (args.first().copied().unwrap_or(1_000_000), args.get(1).copied().unwrap_or(10_000));
    let (events, unread) = synthetic_history(calls, users);
    let t = Instant::now();
    let reads = check_reads(&events, &|_| 15);
    let read_s = t.elapsed().as_secs_f64();
    let rows: Vec<CheckInput> = (1..=users as i64)
        .map(|u| CheckInput { user: u, counter: Some(unread[u as usize]), truth: unread[u as usize] })
        .collect();
    let cx = Context {
        guarantee: Guarantee::Exact,
        lost_flushes: 0,
        double_flushes: 0,
        double_applies: (0, 0),
        reconciler: false,
        failover_us: None,
        seed: counterlab_core::SeedSpec { n_users: 0, notifications_per_user: 0, initial_read_per_user: 0 },
    };
    let t = Instant::now();
    let anomalies = classify(&events, &rows, Some(&reads), &[], cx);
    let classify_s = t.elapsed().as_secs_f64();
    let per_m = |s: f64| s * 1e6 / calls as f64 * 1000.0;
    println!(
        "calls={calls} users={users} reads_checked={} violations={} anomalies={} check_reads_ms={:.0} classify_ms={:.0} check_reads_ms_per_million={:.0}",
        reads.reads_checked,
        reads.violations_total,
        anomalies.len(),
        read_s * 1000.0,
        classify_s * 1000.0,
        per_m(read_s)
    );
    assert_eq!(reads.violations_total, 0, "a linearizable history must pass");
}

/// One planned call: (linearization point, worker, user, invoke, complete, kind draw).
type Planned = (u64, u32, i64, u64, u64, u64);

/// `calls` calls over `users` users (15 unread each to begin with), by completion time,
/// and every user's unread count at the end (indexed by user; 0 unused).
fn synthetic_history(calls: u64, users: u64) -> (Vec<Event>, Vec<i64>) {
    let mut planned = plan_calls(calls, users);
    // Applied in the order of their linearization points.
    planned.sort_unstable();
    let mut unread = vec![15i64; users as usize + 1];
    let mut events = Vec::with_capacity(calls as usize);
    for (i, (_, w, user, invoke, complete, kind)) in planned.into_iter().enumerate() {
        let (op, observed) = apply(&mut unread[user as usize], kind);
        events.push(Event {
            worker: w,
            op,
            user,
            id: i as i64,
            invoke_us: invoke,
            complete_us: complete,
            outcome: Outcome::Ok,
            observed,
            attempts: 1,
            unknown_attempts: 0,
        });
    }
    events.sort_by_key(|e| e.complete_us);
    (events, unread)
}

/// 16 workers: each call lasts 200..1200 us and applies at its midpoint; calls of a
/// worker follow each other, so calls of different workers overlap.
fn plan_calls(calls: u64, users: u64) -> Vec<Planned> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut clock = [0u64; 16];
    (0..calls)
        .map(|i| {
            let w = (i % 16) as usize;
            let user = 1 + (rng.next() % users) as i64;
            let len = 200 + rng.next() % 1000;
            let (invoke, complete) = (clock[w], clock[w] + len);
            clock[w] = complete + 10;
            (invoke + len / 2, w as u32, user, invoke, complete, rng.next() % 10)
        })
        .collect()
}

/// Applies the call drawn as `kind` (0..10: creates 2, mark_reads 3, mark_all_reads 1,
/// reads 4) to a user's unread count `u`; returns the op and its reply.
fn apply(u: &mut i64, kind: u64) -> (OpKind, i64) {
    match kind {
        0..=1 => {
            *u += 1;
            (OpKind::Create, 1)
        }
        2..=4 => {
            let t = (*u > 0) as i64;
            *u -= t;
            (OpKind::MarkRead, t)
        }
        5 => {
            let n = *u;
            *u = 0;
            (OpKind::MarkAllRead, n)
        }
        _ => (OpKind::ReadCount, *u),
    }
}
