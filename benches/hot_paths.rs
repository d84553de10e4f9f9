//! Criterion benches of the client-side hot paths that sit between two database calls:
//! drawing the next op, picking a live id, and checking a large population.

use std::hint::black_box;
use std::sync::Arc;

use counterlab_core::{CheckInput, Guarantee, check_counters};
use counterlab_sim::{IdPool, Mix, OpGen, Skew, UserPicker};
use criterion::{Criterion, criterion_group, criterion_main};

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

fn checker(c: &mut Criterion) {
    let rows: Vec<CheckInput> = (1..=1_000_000i64)
        .map(|u| CheckInput { user: u, counter: Some(u % 17 - (u % 97 == 0) as i64), truth: u % 17 })
        .collect();
    c.bench_function("check_counters/1M-users", |b| b.iter(|| black_box(check_counters(&rows, Guarantee::Exact))));
}

criterion_group!(benches, workload, checker);
criterion_main!(benches);
