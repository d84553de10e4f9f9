//! `IdPool` against a model: two plain sets per user (what the HashMap pool kept), and
//! picks that must cover exactly the live ids, each once, over `0..n` (uniform choice).

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;

#[test]
fn moves_between_sets() {
    let pool = IdPool::seeded(2, 3, 1);
    // user 2 owns 4..=6, id 4 read.
    assert!([5, 6].contains(&pool.pick_unread_first(2, 0).unwrap()));
    pool.mark_read(2, 5);
    pool.mark_read(2, 6);
    assert_eq!(pool.pick_unread_first(2, 7).map(|id| (4..=6).contains(&id)), Some(true));
    pool.remove(2, 4);
    pool.remove(2, 5);
    pool.remove(2, 6);
    assert_eq!(pool.pick_any(2, 1), None);
    pool.add_unread(2, 99);
    assert_eq!(pool.pick_any(2, 12345), Some(99));
    pool.mark_all_read(2);
    assert_eq!(pool.pick_unread_first(2, 0), Some(99));
    assert_eq!(pool.pick_any(1, 5).map(|id| (1..=3).contains(&id)), Some(true));
}

#[test]
fn bit_ranges_straddle_words() {
    // 7 users x 13 rows: ranges cross word boundaries at 64 and 128.
    let pool = IdPool::seeded(7, 13, 4);
    for u in 1..=7 {
        let first = (u - 1) * 13 + 1;
        let unread: BTreeSet<i64> = (0..9).map(|p| pool.pick_unread_first(u, p).unwrap()).collect();
        assert_eq!(unread, (first + 4..first + 13).collect(), "user {u}");
    }
    pool.mark_all_read(5);
    assert_eq!(pool.pick_unread_first(5, 3).map(|id| (53..=65).contains(&id)), Some(true));
    let (_, unread) = live(&pool, 5);
    assert!(unread.is_empty());
    let (_, unread4) = live(&pool, 4);
    assert_eq!(unread4.len(), 9, "a neighbour sharing the word is untouched");
}

#[test]
fn two_bits_a_seeded_row() {
    let pool = IdPool::seeded(1_000_000, 10, 2);
    let per_row = pool.heap_bytes() as f64 / 10_000_000.0;
    assert!(per_row < 0.5, "{per_row} B per seeded row");
}

/// (live ids, unread ids) of a user, read through the picks: pick_any over 0..n must
/// list every live id once, pick_unread_first over 0..unread every unread id once.
fn live(pool: &IdPool, user: UserId) -> (BTreeSet<i64>, BTreeSet<i64>) {
    let tails = pool.lock(user);
    let c = pool.counts(user, &tails);
    drop(tails);
    let n: u64 = c.0.iter().sum();
    let all: Vec<i64> = (0..n).map(|p| pool.pick_any(user, p).unwrap()).collect();
    let unread: Vec<i64> = (0..c.0[0] + c.0[1]).map(|p| pool.pick_unread_first(user, p).unwrap()).collect();
    let (a, u): (BTreeSet<i64>, BTreeSet<i64>) = (all.iter().copied().collect(), unread.iter().copied().collect());
    assert_eq!(a.len(), all.len(), "pick_any repeats an id: {all:?}");
    assert_eq!(u.len(), unread.len(), "pick_unread_first repeats an id: {unread:?}");
    (a, u)
}

#[derive(Clone, Debug)]
enum Step {
    Add(i64, i64),
    MarkRead(i64, u64),
    Remove(i64, u64),
    MarkAll(i64),
    /// An id the pool may not hold (already gone, another user's, never created).
    MarkReadRaw(i64, i64),
    RemoveRaw(i64, i64),
}

fn step(users: i64) -> impl Strategy<Value = Step> {
    let u = 1..=users;
    prop_oneof![
        (u.clone(), 1000i64..1040).prop_map(|(u, id)| Step::Add(u, id)),
        (u.clone(), any::<u64>()).prop_map(|(u, p)| Step::MarkRead(u, p)),
        (u.clone(), any::<u64>()).prop_map(|(u, p)| Step::Remove(u, p)),
        u.clone().prop_map(Step::MarkAll),
        (u.clone(), 1i64..1040).prop_map(|(u, id)| Step::MarkReadRaw(u, id)),
        (u, 1i64..1040).prop_map(|(u, id)| Step::RemoveRaw(u, id)),
    ]
}

/// The model: per user, unread and read sets (the old pool's content without its index).
struct Model {
    unread: Vec<BTreeSet<i64>>,
    read: Vec<BTreeSet<i64>>,
}

impl Model {
    fn apply(&mut self, pool: &IdPool, s: &Step) {
        let ix = |u: i64| (u - 1) as usize;
        match *s {
            Step::Add(u, id) => {
                // Created ids are unique across users in a real run.
                if self.unread.iter().chain(&self.read).any(|set| set.contains(&id)) {
                    return;
                }
                pool.add_unread(u, id);
                self.unread[ix(u)].insert(id);
            }
            Step::MarkRead(u, p) => match pool.pick_any(u, p) {
                Some(id) => self.mark_read(pool, u, id),
                None => assert!(self.unread[ix(u)].is_empty() && self.read[ix(u)].is_empty()),
            },
            Step::Remove(u, p) => match pool.pick_any(u, p) {
                Some(id) => self.remove(pool, u, id),
                None => assert!(self.unread[ix(u)].is_empty() && self.read[ix(u)].is_empty()),
            },
            Step::MarkAll(u) => {
                pool.mark_all_read(u);
                let moved = std::mem::take(&mut self.unread[ix(u)]);
                self.read[ix(u)].extend(moved);
            }
            Step::MarkReadRaw(u, id) => self.mark_read(pool, u, id),
            Step::RemoveRaw(u, id) => self.remove(pool, u, id),
        }
    }

    fn mark_read(&mut self, pool: &IdPool, u: i64, id: i64) {
        pool.mark_read(u, id);
        let i = (u - 1) as usize;
        if self.unread[i].remove(&id) {
            self.read[i].insert(id);
        }
    }

    fn remove(&mut self, pool: &IdPool, u: i64, id: i64) {
        pool.remove(u, id);
        let i = (u - 1) as usize;
        if !self.unread[i].remove(&id) {
            self.read[i].remove(&id);
        }
    }
}

proptest! {
    #[test]
    fn agrees_with_a_set_model(
        (users, per_user, read) in (1u64..6, 0u64..40).prop_flat_map(|(u, p)| (Just(u), Just(p), 0..=p)),
        steps in prop::collection::vec(step(5), 0..120),
    ) {
        let pool = IdPool::seeded(users, per_user, read);
        let spec = SeedSpec { n_users: users, notifications_per_user: per_user, initial_read_per_user: read };
        let mut model = Model {
            unread: (1..=users as i64).map(|u| spec.rows_of(u).filter(|r| !r.1).map(|r| r.0).collect()).collect(),
            read: (1..=users as i64).map(|u| spec.rows_of(u).filter(|r| r.1).map(|r| r.0).collect()).collect(),
        };
        for s in steps.iter().filter(|s| step_user(s) <= users as i64) {
            model.apply(&pool, s);
        }
        for u in 1..=users as i64 {
            let (all, unread) = live(&pool, u);
            let i = (u - 1) as usize;
            prop_assert_eq!(&unread, &model.unread[i]);
            let model_all: BTreeSet<i64> = model.unread[i].union(&model.read[i]).copied().collect();
            prop_assert_eq!(all, model_all);
            if unread.is_empty() {
                // Falls back to any live id.
                let any = pool.pick_unread_first(u, 7);
                prop_assert_eq!(any.is_some(), !model.read[i].is_empty());
            }
        }
    }
}

fn step_user(s: &Step) -> i64 {
    match *s {
        Step::Add(u, _)
        | Step::MarkRead(u, _)
        | Step::Remove(u, _)
        | Step::MarkAll(u)
        | Step::MarkReadRaw(u, _)
        | Step::RemoveRaw(u, _) => u,
    }
}

#[test]
fn neighbours_sharing_a_word_do_not_lose_bits() {
    // 3 rows a user: 21 users per word. Each thread owns users u = t+1, t+9, ...; all
    // threads write the same words at once, each checks only its own users.
    let pool = std::sync::Arc::new(IdPool::seeded(64, 3, 0));
    let threads: Vec<_> = (0..8i64)
        .map(|t| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                for round in 0..2000u64 {
                    for u in (t + 1..=64).step_by(8) {
                        let first = (u - 1) * 3 + 1;
                        match round % 3 {
                            0 => pool.mark_read(u, first + (round % 3) as i64),
                            1 => pool.mark_all_read(u),
                            _ => (0..3).for_each(|j| pool.add_unread(u, first + j)),
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // The last round (1999 % 3 == 1) marked everything read.
    for u in 1..=64 {
        let first = (u - 1) * 3 + 1;
        let (all, unread) = live(&pool, u);
        assert!(unread.is_empty(), "user {u}: {unread:?}");
        assert_eq!(all, (first..first + 3).collect(), "user {u}");
    }
}
