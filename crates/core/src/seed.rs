//! The seeded data's layout, computed in one place: user `u` owns notification ids
//! `first_id(u) ..= first_id(u) + notifications_per_user - 1`, the first
//! `initial_read_per_user` of them read; counters start equal to the truth.

use crate::model::{NotificationId, UserId};

/// What every namespace is seeded with, identically.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeedSpec {
    pub n_users: u64,
    pub notifications_per_user: u64,
    pub initial_read_per_user: u64,
}

impl SeedSpec {
    /// The id of `user`'s first seeded notification (users are numbered from 1).
    pub fn first_id(self, user: UserId) -> NotificationId {
        assert!(user >= 1, "users are numbered from 1");
        (user - 1) * self.notifications_per_user as i64 + 1
    }

    /// Every seeded row of `user`: its id and whether it starts read.
    pub fn rows_of(self, user: UserId) -> impl Iterator<Item = (NotificationId, bool)> {
        let first = self.first_id(user);
        (0..self.notifications_per_user).map(move |j| (first + j as i64, j < self.initial_read_per_user))
    }

    /// Whether `id` is one of `user`'s seeded rows, and if so whether it started read.
    pub fn seeded_state(self, user: UserId, id: NotificationId) -> Option<bool> {
        if user < 1 {
            return None;
        }
        let j = id - self.first_id(user);
        (0..self.notifications_per_user as i64).contains(&j).then_some((j as u64) < self.initial_read_per_user)
    }

    /// Unread notifications per user at the start (every counter's first value).
    pub fn unread_at_start(self) -> u64 {
        assert!(self.initial_read_per_user <= self.notifications_per_user);
        self.notifications_per_user - self.initial_read_per_user
    }
}

#[cfg(test)]
mod tests {
    use super::SeedSpec;

    #[test]
    fn users_own_consecutive_disjoint_id_ranges() {
        let s = SeedSpec { n_users: 3, notifications_per_user: 4, initial_read_per_user: 1 };
        assert_eq!(s.first_id(1), 1);
        assert_eq!(s.first_id(3), 9);
        let rows: Vec<_> = s.rows_of(2).collect();
        assert_eq!(rows, vec![(5, true), (6, false), (7, false), (8, false)]);
        assert_eq!(s.unread_at_start(), 3);
        assert_eq!((s.seeded_state(2, 5), s.seeded_state(2, 6), s.seeded_state(2, 9)), (Some(true), Some(false), None));
    }
}
