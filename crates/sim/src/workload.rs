//! The seeded operation stream: op kind from the mix weights, user from the skew.

use counterlab_core::{OpKind, UserId};

use counterlab_core::Rng;

/// Relative weights of each operation, indexed by `OpKind::index()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    pub weights: [u32; 6],
}

impl Mix {
    pub fn weight(&self, op: OpKind) -> u32 {
        self.weights[op.index()]
    }

    pub fn total(&self) -> u64 {
        self.weights.iter().map(|w| *w as u64).sum()
    }
}

/// How users are chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Skew {
    Uniform,
    /// P(user of rank k) proportional to 1 / k^exponent; user 1 is the hottest.
    Zipf {
        exponent: f64,
    },
}

/// One agent's share of a run (`load --segment K/N`): user `u` belongs to segment
/// `((u - 1) mod N) + 1`. `WHOLE` (1/1) is a one-process run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// 1-based: `1..=n`.
    pub k: u32,
    pub n: u32,
}

impl Segment {
    pub const WHOLE: Segment = Segment { k: 1, n: 1 };

    /// How many of users `1..=n_users` are in this segment.
    pub fn users(self, n_users: u64) -> u64 {
        let (k, n) = (self.k as u64, self.n as u64);
        if k > n_users { 0 } else { (n_users - k) / n + 1 }
    }

    /// The `j`-th user (1-based) of this segment.
    pub fn user(self, j: u64) -> UserId {
        ((j - 1) * self.n as u64 + self.k as u64) as UserId
    }

    /// This segment's part of `total` (workers, ops): `total / N`, one more for the first
    /// `total mod N` segments, so the parts add up to `total`.
    pub fn share(self, total: u64) -> u64 {
        let (k, n) = (self.k as u64, self.n as u64);
        total / n + u64::from(k - 1 < total % n)
    }
}

/// Draws users according to a skew. Zipf uses an exact cumulative table (8 bytes per
/// user) and a binary search, so it is deterministic and exact for any exponent. A
/// segment's picker draws among its own users (ranked by id: its lowest is its hottest).
#[derive(Clone, Debug)]
pub struct UserPicker {
    n_users: u64,
    cdf: Option<Vec<f64>>,
    segment: Segment,
}

impl UserPicker {
    pub fn new(n_users: u64, skew: Skew) -> UserPicker {
        UserPicker::for_segment(n_users, skew, Segment::WHOLE)
    }

    /// Draws among segment `segment`'s users of `1..=n_users` only.
    pub fn for_segment(n_users: u64, skew: Skew, segment: Segment) -> UserPicker {
        let n_users = segment.users(n_users);
        assert!(n_users > 0, "no users");
        let cdf = match skew {
            Skew::Uniform => None,
            Skew::Zipf { exponent } => {
                assert!(exponent.is_finite() && exponent > 0.0, "bad zipf exponent {exponent}");
                let mut acc = 0.0;
                let mut cdf: Vec<f64> = (1..=n_users)
                    .map(|k| {
                        acc += 1.0 / (k as f64).powf(exponent);
                        acc
                    })
                    .collect();
                let total = acc;
                cdf.iter_mut().for_each(|c| *c /= total);
                Some(cdf)
            }
        };
        UserPicker { n_users, cdf, segment }
    }

    pub fn pick(&self, rng: &mut Rng) -> UserId {
        let j = match &self.cdf {
            None => rng.below(self.n_users) + 1,
            Some(cdf) => {
                let u = rng.unit_f64();
                let idx = cdf.partition_point(|c| *c <= u);
                idx.min(cdf.len() - 1) as u64 + 1
            }
        };
        self.segment.user(j)
    }
}

/// One planned operation. `pick` chooses among the user's live notifications at the
/// moment the op runs; the plan itself depends only on the seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedOp {
    pub kind: OpKind,
    pub user: UserId,
    pub pick: u64,
}

/// A worker's operation stream.
#[derive(Clone, Debug)]
pub struct OpGen {
    rng: Rng,
    cumulative: [u64; 6],
    total: u64,
    users: std::sync::Arc<UserPicker>,
}

impl OpGen {
    pub fn new(seed: u64, worker_idx: u64, mix: Mix, users: std::sync::Arc<UserPicker>) -> OpGen {
        let total = mix.total();
        assert!(total > 0, "mix has no positive weight");
        let mut cumulative = [0u64; 6];
        let mut acc = 0u64;
        for (i, w) in mix.weights.iter().enumerate() {
            acc += *w as u64;
            cumulative[i] = acc;
        }
        OpGen { rng: Rng::derive(seed, worker_idx), cumulative, total, users }
    }

    pub fn next_op(&mut self) -> PlannedOp {
        let r = self.rng.below(self.total);
        let idx = self.cumulative.partition_point(|c| *c <= r);
        let kind = OpKind::ALL[idx];
        let user = self.users.pick(&mut self.rng);
        let pick = self.rng.next_u64();
        PlannedOp { kind, user, pick }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn gen_ops(seed: u64, worker: u64, mix: Mix, n_users: u64, skew: Skew, n: usize) -> Vec<PlannedOp> {
        let mut g = OpGen::new(seed, worker, mix, Arc::new(UserPicker::new(n_users, skew)));
        (0..n).map(|_| g.next_op()).collect()
    }

    #[test]
    fn segments_split_users_disjointly_and_whole_is_unchanged() {
        let mix = Mix { weights: [1, 1, 1, 1, 1, 1] };
        let whole = gen_ops(7, 3, mix, 10, Skew::Uniform, 200);
        let mut g = OpGen::new(7, 3, mix, Arc::new(UserPicker::for_segment(10, Skew::Uniform, Segment::WHOLE)));
        assert_eq!(whole, (0..200).map(|_| g.next_op()).collect::<Vec<_>>());
        let mut seen = std::collections::BTreeSet::new();
        for k in 1..=4 {
            let seg = Segment { k, n: 4 };
            assert_eq!(seg.users(10), [3, 3, 2, 2][k as usize - 1]);
            let picker = UserPicker::for_segment(10, Skew::Zipf { exponent: 1.1 }, seg);
            let mut rng = counterlab_core::Rng::new(k as u64);
            for _ in 0..500 {
                let u = picker.pick(&mut rng);
                assert_eq!((u - 1) % 4 + 1, k as i64, "user {u} outside segment {k}/4");
                seen.insert(u);
            }
        }
        assert_eq!(seen.len(), 10, "every user belongs to some segment");
        assert_eq!((1..=4).map(|k| Segment { k, n: 4 }.share(10)).collect::<Vec<_>>(), [3, 3, 2, 2]);
    }

    fn mix_strategy() -> impl Strategy<Value = Mix> {
        prop::array::uniform6(0u32..20)
            .prop_filter("some weight positive", |w| w.iter().any(|x| *x > 0))
            .prop_map(|weights| Mix { weights })
    }

    proptest! {
        // Same seed and worker: the same op sequence, whatever the skew.
        #[test]
        fn same_seed_same_sequence(seed in any::<u64>(), worker in 0u64..64, mix in mix_strategy(),
                                   users in 1u64..500, zipf in prop::option::of(0.5f64..2.0)) {
            let skew = zipf.map_or(Skew::Uniform, |exponent| Skew::Zipf { exponent });
            let a = gen_ops(seed, worker, mix, users, skew, 200);
            let b = gen_ops(seed, worker, mix, users, skew, 200);
            prop_assert_eq!(&a, &b);
            prop_assert!(a.iter().all(|op| op.user >= 1 && op.user as u64 <= users));
            let other = gen_ops(seed.wrapping_add(1), worker, mix, users, skew, 200);
            prop_assert_ne!(a, other);
        }

        // Zero-weight ops never appear; each op's share is within 5 points of its weight's
        // share over 20 000 draws (the binomial standard deviation is below 0.4 points).
        #[test]
        fn weights_are_respected(seed in any::<u64>(), mix in mix_strategy()) {
            let n = 20_000;
            let ops = gen_ops(seed, 0, mix, 10, Skew::Uniform, n);
            let total = mix.total() as f64;
            for kind in OpKind::ALL {
                let seen = ops.iter().filter(|op| op.kind == kind).count();
                if mix.weight(kind) == 0 {
                    prop_assert_eq!(seen, 0, "{} has weight 0", kind);
                } else {
                    let share = seen as f64 / n as f64;
                    let want = mix.weight(kind) as f64 / total;
                    prop_assert!((share - want).abs() < 0.05, "{kind}: {share} vs {want}");
                }
            }
        }
    }

    #[test]
    fn zipf_makes_user_one_hottest() {
        let ops = gen_ops(1, 0, Mix { weights: [1, 0, 0, 0, 0, 0] }, 1000, Skew::Zipf { exponent: 1.2 }, 20_000);
        let count = |u: i64| ops.iter().filter(|op| op.user == u).count();
        assert!(count(1) > count(2) && count(2) > count(10) && count(10) > count(500));
        let uniform = gen_ops(1, 0, Mix { weights: [1, 0, 0, 0, 0, 0] }, 1000, Skew::Uniform, 20_000);
        assert!(uniform.iter().filter(|op| op.user == 1).count() < count(1) / 10);
    }
}
