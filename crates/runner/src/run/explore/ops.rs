//! The explorer's ops and the op pairs of its matrix, from one user's fresh state: three
//! notifications, `a` read, `b` and `c` unread, the counter at 2.

use counterlab_core::{NotificationId, OpError, OpKind, SeedSpec, Strategy, UserId};
use serde::{Deserialize, Serialize};

/// What each user starts with: 3 notifications, the first read (the seed's layout).
pub const STATE: (u64, u64) = (3, 1);

/// The seed of an explored namespace with `n_users` fresh users.
pub fn seed(n_users: u64) -> SeedSpec {
    SeedSpec { n_users, notifications_per_user: STATE.0, initial_read_per_user: STATE.1 }
}

/// The state in words, for the report and the scripts.
pub const STATE_WORDS: &str = "one user with notifications a (read), b and c (unread); counter 2";

/// One session's op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Create,
    /// mark_read of b (unread).
    MarkRead,
    /// mark_read of c (unread): another row than `MarkRead`'s.
    MarkReadOther,
    /// delete of b (unread).
    DeleteUnread,
    /// delete of a (read).
    DeleteRead,
    MarkAllRead,
    /// One pass of the design's background work (a buffer flush): the session an
    /// eventual design's schedules add beside the pair (not a pair's op).
    Flush,
    /// One pass of a broker design's consumer (`Strategy::background_pass`: get, apply,
    /// ack until the queue has nothing ready): the session the broker designs' schedules
    /// add beside the pair (not a pair's op).
    Consume,
    /// One pass of an exact design's reconciler (`Strategy::background_pass` of a design
    /// that keeps the counter exact while its reconciler runs): judged as the schedule
    /// leaves it, with no settle first.
    Reconcile,
}

impl Op {
    pub const ALL: [Op; 6] =
        [Op::Create, Op::MarkRead, Op::MarkReadOther, Op::DeleteUnread, Op::DeleteRead, Op::MarkAllRead];

    pub fn name(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::MarkRead => "mark_read(b)",
            Op::MarkReadOther => "mark_read(c)",
            Op::DeleteUnread => "delete(b, unread)",
            Op::DeleteRead => "delete(a, read)",
            Op::MarkAllRead => "mark_all_read",
            Op::Flush => "flush",
            Op::Consume => "consume",
            Op::Reconcile => "reconcile",
        }
    }

    /// Whether it is a design's background session (a flush, consume or reconcile pass),
    /// not an op.
    pub fn background(self) -> bool {
        matches!(self, Op::Flush | Op::Consume | Op::Reconcile)
    }

    /// The history's kind of the op (None: the background passes, no ops of the history).
    pub fn kind(self) -> Option<OpKind> {
        match self {
            Op::Create => Some(OpKind::Create),
            Op::MarkRead | Op::MarkReadOther => Some(OpKind::MarkRead),
            Op::DeleteUnread | Op::DeleteRead => Some(OpKind::Delete),
            Op::MarkAllRead => Some(OpKind::MarkAllRead),
            Op::Flush | Op::Consume | Op::Reconcile => None,
        }
    }

    /// The notification it acts on, for `user` of `seed` (None: create, mark_all_read).
    pub fn target(self, seed: SeedSpec, user: UserId) -> Option<NotificationId> {
        let first = seed.first_id(user);
        match self {
            Op::DeleteRead => Some(first),
            Op::MarkRead | Op::DeleteUnread => Some(first + 1),
            Op::MarkReadOther => Some(first + 2),
            Op::Create | Op::MarkAllRead | Op::Flush | Op::Consume | Op::Reconcile => None,
        }
    }

    /// Runs the op once: the id it acted on (created) and what it replied, as the
    /// history records it (1 when it changed something, mark_all_read how many).
    pub async fn run(self, s: &dyn Strategy, seed: SeedSpec, user: UserId) -> Result<(NotificationId, i64), OpError> {
        let id = self.target(seed, user).unwrap_or(0);
        match self {
            Op::Create => s.create(user).await.map(|id| (id, 1)),
            Op::MarkRead | Op::MarkReadOther => s.mark_read(user, id).await.map(|c| (id, c as i64)),
            Op::DeleteUnread | Op::DeleteRead => s.delete(user, id).await.map(|c| (id, c as i64)),
            Op::MarkAllRead => s.mark_all_read(user).await.map(|n| (0, n as i64)),
            Op::Flush | Op::Consume | Op::Reconcile => s.background_pass().await.map(|ran| (0, ran as i64)),
        }
    }
}

/// The matrix's op pairs: every pair (either order is the same pair: the explorer runs
/// both orders) of create, mark_read(b), delete(b), delete(a) and mark_all_read, and
/// mark_read(b) beside mark_read(c) (another row of the same user).
pub fn pairs() -> Vec<(Op, Op)> {
    let main = [Op::Create, Op::MarkRead, Op::DeleteUnread, Op::DeleteRead, Op::MarkAllRead];
    let mut out = Vec::new();
    for (i, &a) in main.iter().enumerate() {
        for &b in &main[i..] {
            out.push((a, b));
        }
    }
    out.insert(2, (Op::MarkRead, Op::MarkReadOther));
    out
}

/// Parses a pair as `a,b` of op names (`create`, `mark_read`, `mark_read_other`,
/// `delete_unread`, `delete_read`, `mark_all_read`).
pub fn parse_pair(s: &str) -> Result<(Op, Op), String> {
    let one = |n: &str| {
        let n = n.trim();
        Op::ALL
            .into_iter()
            .find(|o| serde_json::to_value(o).ok().and_then(|v| v.as_str().map(|v| v == n)).unwrap_or(false))
            .ok_or_else(|| format!("unknown op {n:?} (one of create, mark_read, mark_read_other, delete_unread, delete_read, mark_all_read)"))
    };
    match s.split_once(',') {
        Some((a, b)) => Ok((one(a)?, one(b)?)),
        None => Err(format!("an op pair is two ops joined by a comma, not {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_has_every_pair_once_and_the_other_row_pair() {
        let p = pairs();
        assert_eq!(p.len(), 16);
        assert!(p.contains(&(Op::MarkRead, Op::MarkRead)) && p.contains(&(Op::MarkRead, Op::MarkReadOther)));
        let set: std::collections::BTreeSet<_> = p.iter().collect();
        assert_eq!(set.len(), p.len());
        assert_eq!(parse_pair("mark_read, delete_read"), Ok((Op::MarkRead, Op::DeleteRead)));
        assert!(parse_pair("mark_read").is_err() && parse_pair("x,create").is_err());
    }

    #[test]
    fn targets_follow_the_seeded_layout() {
        let s = seed(4);
        assert_eq!(s.seeded_state(2, Op::DeleteRead.target(s, 2).unwrap()), Some(true));
        assert_eq!(s.seeded_state(2, Op::MarkRead.target(s, 2).unwrap()), Some(false));
        assert_eq!(s.seeded_state(2, Op::MarkReadOther.target(s, 2).unwrap()), Some(false));
        assert_ne!(Op::MarkRead.target(s, 2), Op::MarkReadOther.target(s, 2));
    }
}
