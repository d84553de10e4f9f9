//! The driver's view of which notifications exist, per user: creates add, deletes
//! remove, reads move ids from the unread to the read set. It only steers the workload
//! towards live rows; the checker never trusts it, it reads the database.

use std::collections::HashMap;
use std::sync::Mutex;

use counterlab_core::{NotificationId, SeedSpec, UserId};

/// A set with O(1) insert, remove and uniform choice.
#[derive(Default, Debug)]
struct IdSet {
    items: Vec<NotificationId>,
    index: HashMap<NotificationId, usize>,
}

impl IdSet {
    fn insert(&mut self, id: NotificationId) {
        if !self.index.contains_key(&id) {
            self.index.insert(id, self.items.len());
            self.items.push(id);
        }
    }

    fn remove(&mut self, id: NotificationId) -> bool {
        let Some(pos) = self.index.remove(&id) else {
            return false;
        };
        self.items.swap_remove(pos);
        if let Some(moved) = self.items.get(pos) {
            self.index.insert(*moved, pos);
        }
        true
    }

    fn len(&self) -> usize {
        self.items.len()
    }
}

#[derive(Default, Debug)]
struct UserIds {
    unread: IdSet,
    read: IdSet,
}

/// Live notification ids per user, behind one mutex per user.
#[derive(Debug)]
pub struct IdPool {
    users: Vec<Mutex<UserIds>>,
}

impl IdPool {
    /// The pool matching the seeded layout: user `u` (1-based) owns ids
    /// `(u-1)*per_user + 1 ..= u*per_user`, the first `read_per_user` of them read.
    pub fn seeded(n_users: u64, per_user: u64, read_per_user: u64) -> IdPool {
        assert!(read_per_user <= per_user);
        let spec = SeedSpec { n_users, notifications_per_user: per_user, initial_read_per_user: read_per_user };
        let users = (1..=n_users as i64)
            .map(|u| {
                let mut ids = UserIds::default();
                for (id, read) in spec.rows_of(u) {
                    if read { ids.read.insert(id) } else { ids.unread.insert(id) }
                }
                Mutex::new(ids)
            })
            .collect();
        IdPool { users }
    }

    fn user(&self, user: UserId) -> std::sync::MutexGuard<'_, UserIds> {
        let slot = &self.users[(user - 1) as usize];
        // A panic while holding the lock cannot leave the sets inconsistent (each method
        // is one or two infallible moves), so a poisoned lock is still usable.
        slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Any live id of the user, uniformly; None when the user has none.
    pub fn pick_any(&self, user: UserId, pick: u64) -> Option<NotificationId> {
        let ids = self.user(user);
        let n = ids.unread.len() + ids.read.len();
        if n == 0 {
            return None;
        }
        let i = (pick % n as u64) as usize;
        Some(if i < ids.unread.len() { ids.unread.items[i] } else { ids.read.items[i - ids.unread.len()] })
    }

    /// An unread id when the user has one (to aim races at real transitions), else any.
    pub fn pick_unread_first(&self, user: UserId, pick: u64) -> Option<NotificationId> {
        {
            let ids = self.user(user);
            if ids.unread.len() > 0 {
                return Some(ids.unread.items[(pick % ids.unread.len() as u64) as usize]);
            }
        }
        self.pick_any(user, pick)
    }

    pub fn add_unread(&self, user: UserId, id: NotificationId) {
        self.user(user).unread.insert(id);
    }

    pub fn mark_read(&self, user: UserId, id: NotificationId) {
        let mut ids = self.user(user);
        if ids.unread.remove(id) {
            ids.read.insert(id);
        }
    }

    pub fn remove(&self, user: UserId, id: NotificationId) {
        let mut ids = self.user(user);
        if !ids.unread.remove(id) {
            ids.read.remove(id);
        }
    }

    pub fn mark_all_read(&self, user: UserId) {
        let mut ids = self.user(user);
        let unread = std::mem::take(&mut ids.unread);
        for id in unread.items {
            ids.read.insert(id);
        }
    }

    pub fn n_users(&self) -> u64 {
        self.users.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_between_sets() {
        let pool = IdPool::seeded(2, 3, 1);
        // user 2 owns 4..=6, id 4 read.
        assert_eq!(pool.pick_unread_first(2, 0), Some(5));
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
}
