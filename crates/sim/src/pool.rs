//! The driver's view of which notifications exist, per user: creates add, deletes
//! remove, reads move ids from the unread to the read set. It only steers the workload
//! towards live rows; the checker never trusts it, it reads the database.
//!
//! Memory is bits, not boxed ids: the seeded layout is arithmetic (`SeedSpec`), so each
//! seeded notification is one bit in an `unread` bitset and one in a `read` bitset
//! (neither: deleted), 2 bits a row. Ids created during the run live in a small per-user
//! tail (unread first), kept only for users that have one. Users share a fixed set of
//! lock stripes, so there is no per-user allocation at all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use counterlab_core::{NotificationId, SeedSpec, UserId};

/// Lock stripes: a user's bits and tail change only under its stripe's lock.
const STRIPES: usize = 1024;

/// A fixed-size bitset whose words may be shared by neighbouring users: bits change with
/// atomic and/or, so two stripes touching one word never lose each other's bits.
#[derive(Debug)]
struct Bits(Vec<AtomicU64>);

impl Bits {
    fn new(len: u64, set: impl Fn(u64) -> bool) -> Bits {
        let words = len.div_ceil(64);
        Bits(
            (0..words)
                .map(|w| {
                    let word = (0..64).filter(|b| w * 64 + b < len && set(w * 64 + b)).fold(0u64, |a, b| a | 1 << b);
                    AtomicU64::new(word)
                })
                .collect(),
        )
    }

    fn get(&self, i: u64) -> bool {
        self.0[(i / 64) as usize].load(Ordering::Relaxed) & (1 << (i % 64)) != 0
    }

    fn set(&self, i: u64, on: bool) {
        let (w, m) = ((i / 64) as usize, 1u64 << (i % 64));
        if on {
            self.0[w].fetch_or(m, Ordering::Relaxed)
        } else {
            self.0[w].fetch_and(!m, Ordering::Relaxed)
        };
    }

    /// The words covering bits `start..end`, each with the mask of the bits inside.
    fn words(start: u64, end: u64) -> impl Iterator<Item = (usize, u64)> {
        let (first, last) = (start / 64, end.div_ceil(64));
        (first..last).map(move |w| {
            let lo = start.max(w * 64) - w * 64;
            let hi = end.min(w * 64 + 64) - w * 64;
            let mask = if hi - lo == 64 { u64::MAX } else { ((1u64 << (hi - lo)) - 1) << lo };
            (w as usize, mask)
        })
    }

    fn count(&self, start: u64, end: u64) -> u64 {
        Self::words(start, end).map(|(w, m)| (self.0[w].load(Ordering::Relaxed) & m).count_ones() as u64).sum()
    }

    /// The offset from `start` of the `k`-th (0-based) set bit in `start..end`.
    fn select(&self, start: u64, end: u64, mut k: u64) -> Option<u64> {
        for (w, m) in Self::words(start, end) {
            let mut word = self.0[w].load(Ordering::Relaxed) & m;
            let n = word.count_ones() as u64;
            if k < n {
                for _ in 0..k {
                    word &= word - 1;
                }
                return Some(w as u64 * 64 + word.trailing_zeros() as u64 - start);
            }
            k -= n;
        }
        None
    }

    /// Takes the bits `start..end` out (cleared), returning them as a per-word mask list.
    fn take(&self, start: u64, end: u64) -> Vec<(usize, u64)> {
        Self::words(start, end).map(|(w, m)| (w, self.0[w].fetch_and(!m, Ordering::Relaxed) & m)).collect()
    }

    fn put(&self, taken: &[(usize, u64)]) {
        for (w, bits) in taken {
            self.0[*w].fetch_or(*bits, Ordering::Relaxed);
        }
    }
}

/// Ids created during the run for one user: `ids[..unread]` unread, the rest read.
#[derive(Default, Debug)]
struct Tail {
    ids: Vec<NotificationId>,
    unread: usize,
}

impl Tail {
    fn position(&self, id: NotificationId) -> Option<usize> {
        self.ids.iter().position(|x| *x == id)
    }

    fn add_unread(&mut self, id: NotificationId) {
        if self.position(id).is_none() {
            self.ids.push(id);
            let last = self.ids.len() - 1;
            self.ids.swap(self.unread, last);
            self.unread += 1;
        }
    }

    fn mark_read(&mut self, id: NotificationId) {
        if let Some(p) = self.position(id).filter(|p| *p < self.unread) {
            self.unread -= 1;
            self.ids.swap(p, self.unread);
        }
    }

    fn remove(&mut self, id: NotificationId) {
        let Some(mut p) = self.position(id) else { return };
        if p < self.unread {
            self.unread -= 1;
            self.ids.swap(p, self.unread);
            p = self.unread;
        }
        self.ids.swap_remove(p);
    }
}

/// Live notification ids per user: seeded ones as bits, created ones in a tail.
#[derive(Debug)]
pub struct IdPool {
    spec: SeedSpec,
    unread: Bits,
    read: Bits,
    tails: Vec<Mutex<HashMap<UserId, Tail>>>,
}

/// What one user holds, counted: seeded unread, tail unread, seeded read, tail read.
struct Counts([u64; 4]);

impl IdPool {
    /// The pool matching the seeded layout: user `u` (1-based) owns ids
    /// `(u-1)*per_user + 1 ..= u*per_user`, the first `read_per_user` of them read.
    pub fn seeded(n_users: u64, per_user: u64, read_per_user: u64) -> IdPool {
        assert!(read_per_user <= per_user);
        let spec = SeedSpec { n_users, notifications_per_user: per_user, initial_read_per_user: read_per_user };
        let len = n_users.checked_mul(per_user).expect("seeded rows fit in u64");
        let tails = (0..STRIPES.min(n_users.max(1) as usize)).map(|_| Mutex::new(HashMap::new())).collect();
        IdPool {
            spec,
            unread: Bits::new(len, |i| i % per_user >= read_per_user),
            read: Bits::new(len, |i| i % per_user < read_per_user),
            tails,
        }
    }

    /// The user's stripe, locked. A panic while holding it cannot leave the state
    /// inconsistent (each method is a few infallible moves), so a poisoned lock is usable.
    fn lock(&self, user: UserId) -> MutexGuard<'_, HashMap<UserId, Tail>> {
        assert!(user >= 1 && user as u64 <= self.spec.n_users, "user {user} outside 1..={}", self.spec.n_users);
        let slot = &self.tails[(user - 1) as usize % self.tails.len()];
        slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The user's seeded bit range.
    fn range(&self, user: UserId) -> (u64, u64) {
        let start = (user - 1) as u64 * self.spec.notifications_per_user;
        (start, start + self.spec.notifications_per_user)
    }

    /// The bit index of `id` when it is one of `user`'s seeded rows.
    fn seeded_bit(&self, user: UserId, id: NotificationId) -> Option<u64> {
        self.spec.seeded_state(user, id).map(|_| (id - 1) as u64)
    }

    fn counts(&self, user: UserId, tails: &HashMap<UserId, Tail>) -> Counts {
        let (s, e) = self.range(user);
        let (tu, tr) = tails.get(&user).map_or((0, 0), |t| (t.unread as u64, (t.ids.len() - t.unread) as u64));
        Counts([self.unread.count(s, e), tu, self.read.count(s, e), tr])
    }

    /// The `i`-th live id in the order seeded unread, tail unread, seeded read, tail read.
    fn nth(&self, user: UserId, tails: &HashMap<UserId, Tail>, c: &Counts, mut i: u64) -> NotificationId {
        let (s, e) = self.range(user);
        let first = self.spec.first_id(user);
        let tail = tails.get(&user);
        for (part, n) in c.0.iter().enumerate() {
            if i >= *n {
                i -= n;
                continue;
            }
            return match (part, tail) {
                (0, _) => first + self.unread.select(s, e, i).expect("counted unread bit") as i64,
                (2, _) => first + self.read.select(s, e, i).expect("counted read bit") as i64,
                (1, Some(t)) => t.ids[i as usize],
                (3, Some(t)) => t.ids[t.unread + i as usize],
                _ => unreachable!("a tail part counted without a tail"),
            };
        }
        unreachable!("index within the counted live ids")
    }

    /// Any live id of the user, uniformly; None when the user has none.
    pub fn pick_any(&self, user: UserId, pick: u64) -> Option<NotificationId> {
        let tails = self.lock(user);
        let c = self.counts(user, &tails);
        let n: u64 = c.0.iter().sum();
        (n > 0).then(|| self.nth(user, &tails, &c, pick % n))
    }

    /// An unread id when the user has one (to aim races at real transitions), else any.
    pub fn pick_unread_first(&self, user: UserId, pick: u64) -> Option<NotificationId> {
        let tails = self.lock(user);
        let c = self.counts(user, &tails);
        let unread = c.0[0] + c.0[1];
        let n = if unread > 0 { unread } else { c.0.iter().sum() };
        (n > 0).then(|| self.nth(user, &tails, &c, pick % n))
    }

    pub fn add_unread(&self, user: UserId, id: NotificationId) {
        let mut tails = self.lock(user);
        match self.seeded_bit(user, id) {
            Some(b) => {
                self.read.set(b, false);
                self.unread.set(b, true);
            }
            None => tails.entry(user).or_default().add_unread(id),
        }
    }

    pub fn mark_read(&self, user: UserId, id: NotificationId) {
        let mut tails = self.lock(user);
        match self.seeded_bit(user, id) {
            Some(b) if self.unread.get(b) => {
                self.unread.set(b, false);
                self.read.set(b, true);
            }
            Some(_) => {}
            None => {
                if let Some(t) = tails.get_mut(&user) {
                    t.mark_read(id);
                }
            }
        }
    }

    pub fn remove(&self, user: UserId, id: NotificationId) {
        let mut tails = self.lock(user);
        match self.seeded_bit(user, id) {
            Some(b) => {
                self.unread.set(b, false);
                self.read.set(b, false);
            }
            None => {
                if let Some(t) = tails.get_mut(&user) {
                    t.remove(id);
                    if t.ids.is_empty() {
                        tails.remove(&user);
                    }
                }
            }
        }
    }

    pub fn mark_all_read(&self, user: UserId) {
        let mut tails = self.lock(user);
        let (s, e) = self.range(user);
        self.read.put(&self.unread.take(s, e));
        if let Some(t) = tails.get_mut(&user) {
            t.unread = 0;
        }
    }

    pub fn n_users(&self) -> u64 {
        self.spec.n_users
    }

    /// Bytes this pool holds: the two bitsets, the stripes and the created ids' tails.
    pub fn heap_bytes(&self) -> u64 {
        let bits = (self.unread.0.len() + self.read.0.len()) as u64 * 8;
        let stripes = self.tails.len() as u64 * std::mem::size_of::<Mutex<HashMap<UserId, Tail>>>() as u64;
        let tails: u64 = self
            .tails
            .iter()
            .map(|m| {
                let t = m.lock().unwrap_or_else(|e| e.into_inner());
                let entries = t.capacity() as u64 * (std::mem::size_of::<(UserId, Tail)>() as u64 + 1);
                entries + t.values().map(|t| t.ids.capacity() as u64 * 8).sum::<u64>()
            })
            .sum();
        bits + stripes + tails
    }
}

#[cfg(test)]
mod tests;
