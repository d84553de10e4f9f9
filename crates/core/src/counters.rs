//! The counters a strategy keeps outside the SQL `unread_counts` table (Redis, a file's
//! own table), one per user 1..=n, in 8 bytes and a bit a user for the final check.

/// One counter or none per user 1..=n: the values in one array, which users have one in
/// a bitset (`Vec<Option<i64>>` takes 16 bytes a user; this 8 and a bit).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserCounters {
    vals: Vec<i64>,
    present: Vec<u64>,
}

impl UserCounters {
    /// Users 1..=n_users, none with a counter yet.
    pub fn new(n_users: u64) -> UserCounters {
        UserCounters { vals: vec![0; n_users as usize], present: vec![0; n_users.div_ceil(64) as usize] }
    }

    /// How many users (n_users).
    pub fn len(&self) -> u64 {
        self.vals.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.vals.is_empty()
    }

    fn index(&self, user: i64) -> Option<usize> {
        (user >= 1 && user as u64 <= self.len()).then(|| (user - 1) as usize)
    }

    /// `user`'s counter; None for no counter or a user outside 1..=n.
    pub fn get(&self, user: i64) -> Option<i64> {
        let i = self.index(user)?;
        (self.present[i / 64] & 1 << (i % 64) != 0).then(|| self.vals[i])
    }

    /// Sets `user`'s counter (None: no counter); a user outside 1..=n is ignored.
    pub fn set(&mut self, user: i64, v: Option<i64>) {
        let Some(i) = self.index(user) else { return };
        let bit = 1u64 << (i % 64);
        match v {
            Some(v) => {
                self.vals[i] = v;
                self.present[i / 64] |= bit;
            }
            None => {
                self.vals[i] = 0;
                self.present[i / 64] &= !bit;
            }
        }
    }

    /// Adds `d` to `user`'s counter, a missing one counting as 0 (and then present).
    pub fn add(&mut self, user: i64, d: i64) {
        let v = self.get(user).unwrap_or(0).saturating_add(d);
        self.set(user, Some(v));
    }

    /// Every user's counter in user order.
    pub fn iter(&self) -> impl Iterator<Item = Option<i64>> + '_ {
        (1..=self.len() as i64).map(|u| self.get(u))
    }
}

impl FromIterator<Option<i64>> for UserCounters {
    /// Users 1, 2, ... in the iterator's order.
    fn from_iter<I: IntoIterator<Item = Option<i64>>>(it: I) -> UserCounters {
        let it = it.into_iter();
        let mut vals = Vec::with_capacity(it.size_hint().0);
        let mut present = Vec::with_capacity(it.size_hint().0.div_ceil(64));
        for (i, v) in it.enumerate() {
            if i % 64 == 0 {
                present.push(0);
            }
            vals.push(v.unwrap_or(0));
            if v.is_some() {
                *present.last_mut().expect("pushed above") |= 1 << (i % 64);
            }
        }
        UserCounters { vals, present }
    }
}

/// Users 1..=n_users in consecutive ranges of at most `size` (the last may be shorter),
/// for reading counters a pipeline or a batch at a time.
pub fn user_chunks(n_users: u64, size: usize) -> impl Iterator<Item = std::ops::RangeInclusive<i64>> {
    let (n, size) = (n_users as i64, size.max(1) as i64);
    (1..=n).step_by(size as usize).map(move |first| first..=(first + size - 1).min(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Whatever is set, added or collected reads back as a Vec<Option<i64>> would.
        #[test]
        fn reads_back_as_a_vec_of_options(
            init in prop::collection::vec(prop::option::of(any::<i64>()), 0..200),
            edits in prop::collection::vec((0i64..210, prop::option::of(-5i64..5), any::<bool>()), 0..50),
        ) {
            let mut model = init.clone();
            let mut c: UserCounters = init.into_iter().collect();
            for (user, v, add) in edits {
                let slot = (user >= 1 && user as usize <= model.len()).then(|| (user - 1) as usize);
                if add {
                    let d = v.unwrap_or(1);
                    c.add(user, d);
                    if let Some(i) = slot { model[i] = Some(model[i].unwrap_or(0).saturating_add(d)); }
                } else {
                    c.set(user, v);
                    if let Some(i) = slot { model[i] = v; }
                }
            }
            prop_assert_eq!(c.len() as usize, model.len());
            prop_assert_eq!(c.iter().collect::<Vec<_>>(), model.clone());
            prop_assert_eq!(c.get(0), None);
            prop_assert_eq!(c.get(model.len() as i64 + 1), None);
        }
    }

    proptest! {
        // The chunks cover 1..=n once, in order, each at most `size` users.
        #[test]
        fn user_chunks_cover_every_user_once_in_order(n in 0u64..3000, size in 0usize..1100) {
            let chunks: Vec<_> = user_chunks(n, size).collect();
            prop_assert!(chunks.iter().all(|c| c.clone().count() <= size.max(1)));
            prop_assert!(chunks.iter().all(|c| !c.is_empty()));
            let users: Vec<i64> = chunks.into_iter().flatten().collect();
            prop_assert_eq!(users, (1..=n as i64).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_new_set_has_no_counter_and_takes_a_bit_per_user_beside_its_values() {
        let c = UserCounters::new(130);
        assert_eq!(c.len(), 130);
        assert!(c.iter().all(|v| v.is_none()));
        assert_eq!(c.present.len(), 3);
    }
}
