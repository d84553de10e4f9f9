//! The SQL strategies, written once over `Db`: each op is one transaction at the
//! namespace's isolation level; they differ only in how they decide what changed.

use async_trait::async_trait;
use counterlab_core::Figure;
use counterlab_core::{
    CrashPoints, ErrorClass, Fault, NotificationId, OpError, OpKind, Outcome, Strategy, StrategyInfo, UserId,
    WorkerLoop,
};

use crate::db::{Begin, Db, Tx};
use crate::sqlfile::{common, statement};

/// Runs a closed-loop worker's loop holding a connection of its own (`held`) when the
/// pool has room for one per worker and one to spare (the sampler's probes, a
/// `mark_read_dup` group's other calls); else every op borrows from the pool, as before.
pub(crate) async fn hold_if_room(db: &Db, workers: u32, run: WorkerLoop<'_>) {
    if db.max_connections() > workers { crate::held::hold(run).await } else { run.await }
}

/// Every statement a strategy may use, looked up once in its dialect's file.
#[derive(Clone, Copy, Debug)]
struct Stmts {
    insert: &'static str,
    increment: &'static str,
    decrement: &'static str,
    subtract: &'static str,
    zero: &'static str,
    read: &'static str,
    read_state: &'static str,
    lock_one: &'static str,
    lock_unread: &'static str,
    set_read: &'static str,
    set_read_if_unread: &'static str,
    delete_unread: &'static str,
    delete_any: &'static str,
    mark_all_rows: &'static str,
    net_drift: &'static str,
}

impl Stmts {
    fn load(db: &Db) -> Stmts {
        let f = common(db.dialect());
        let s = |n| statement(f, n);
        Stmts {
            insert: s("insert_notification"),
            increment: s("counter_increment"),
            decrement: s("counter_decrement"),
            subtract: s("counter_subtract"),
            zero: s("counter_zero"),
            read: s("counter_read"),
            read_state: s("read_state"),
            lock_one: s("lock_one"),
            lock_unread: s("lock_unread"),
            set_read: s("set_read"),
            set_read_if_unread: s("set_read_if_unread"),
            net_drift: s("net_drift"),
            delete_unread: s("delete_unread"),
            delete_any: s("delete_any"),
            mark_all_rows: s("mark_all_rows"),
        }
    }
}

/// The four designs, one struct: they share create and read_count and differ in how
/// mark_read, delete and mark_all_read decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Design {
    /// Read is_read, decide in the app, write; no lock. mark_all_read zeroes the counter.
    DirectUpdate,
    /// Lock the row(s) first (`FOR UPDATE`; `BEGIN IMMEDIATE` on SQLite), then decide.
    SelectForUpdate,
    /// The guarded UPDATE/DELETE decides; the counter moves by the rows it changed.
    ConditionalUpdate,
    /// The mutant: UPDATE without `AND NOT is_read`, trusting rows_affected.
    ConditionalUpdateUnguarded,
}

pub struct SqlStrategy {
    info: StrategyInfo,
    design: Design,
    db: Db,
    s: Stmts,
    /// Armed `crash_after_commit` faults, and the ops they stopped.
    crashes: CrashPoints,
    /// Armed `error_before_commit` faults, and the ops they failed.
    errors: CrashPoints,
}

impl SqlStrategy {
    pub fn new(info: StrategyInfo, design: Design, db: Db) -> SqlStrategy {
        SqlStrategy {
            info,
            design,
            s: Stmts::load(&db),
            db,
            crashes: CrashPoints::default(),
            errors: CrashPoints::default(),
        }
    }

    /// Commits `op`'s transaction through its two fault points. Before the commit: an
    /// armed error fails the op and drops the transaction, which rolls it back. After
    /// it, before the reply: an armed crash turns the reply into an unknown outcome
    /// (each op is one transaction, so nothing is half applied).
    async fn commit(&self, tx: Tx, op: OpKind) -> Result<(), OpError> {
        if self.errors.fire(op) {
            return Err(OpError::new(ErrorClass::Other, Outcome::Fail, "error before the commit (injected)"));
        }
        tx.commit().await?;
        if self.crashes.fire(op) {
            return Err(OpError::new(ErrorClass::Connection, Outcome::Unknown, "crashed after the commit (injected)"));
        }
        Ok(())
    }

    /// delete, saying also whether it lowered the counter (the row was unread): designs
    /// that mirror the counter elsewhere (zset-replica-reads) move it by that.
    pub(crate) async fn delete_lowering(&self, user: UserId, id: NotificationId) -> Result<(bool, bool), OpError> {
        let s = &self.s;
        let mut tx = self.db.begin(self.begin_mode()).await?;
        let (deleted, was_unread) = match self.design {
            Design::DirectUpdate | Design::SelectForUpdate => {
                let check = if self.design == Design::DirectUpdate { s.read_state } else { s.lock_one };
                match tx.opt_bool(check, &[id, user]).await? {
                    None => (false, false),
                    // direct-update decrements on what it read even if a concurrent
                    // delete got there first: that is its delete race.
                    Some(is_read) => (tx.exec(s.delete_any, &[id, user]).await? > 0, !is_read),
                }
            }
            Design::ConditionalUpdate | Design::ConditionalUpdateUnguarded => {
                // Two guarded statements instead of DELETE ... RETURNING (which MySQL
                // lacks): the first deletes only an unread row, the second a read one.
                if tx.exec(s.delete_unread, &[id, user]).await? == 1 {
                    (true, true)
                } else {
                    (tx.exec(s.delete_any, &[id, user]).await? == 1, false)
                }
            }
        };
        if was_unread {
            tx.exec(s.decrement, &[user]).await?;
        }
        self.commit(tx, OpKind::Delete).await?;
        Ok((deleted, was_unread))
    }

    fn begin_mode(&self) -> Begin {
        match self.design {
            Design::SelectForUpdate => Begin::Locking,
            _ => Begin::Plain,
        }
    }
}

#[async_trait]
impl Strategy for SqlStrategy {
    fn info(&self) -> StrategyInfo {
        self.info
    }

    fn takes(&self, fault: Fault) -> bool {
        fault.takes_op()
    }

    async fn inject(&self, fault: Fault) -> Result<String, OpError> {
        arm_commit_fault(self.info.name, [&self.crashes, &self.errors], fault, "rolls back and fails")
    }

    fn figures(&self) -> Vec<(Figure, f64)> {
        commit_fault_figures([&self.crashes, &self.errors])
    }

    async fn worker_scope<'a>(&'a self, workers: u32, run: WorkerLoop<'a>) {
        hold_if_room(&self.db, workers, run).await
    }

    async fn net_drift(&self) -> Option<i64> {
        self.db.opt_i64(self.s.net_drift, &[]).await.ok().flatten()
    }

    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        let mut tx = self.db.begin(self.begin_mode()).await?;
        let id = tx.insert_id(self.s.insert, &[user]).await?;
        tx.exec(self.s.increment, &[user]).await?;
        self.commit(tx, OpKind::Create).await?;
        Ok(id)
    }

    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let s = &self.s;
        let mut tx = self.db.begin(self.begin_mode()).await?;
        let changed = match self.design {
            Design::DirectUpdate | Design::SelectForUpdate => {
                let check = if self.design == Design::DirectUpdate { s.read_state } else { s.lock_one };
                if tx.opt_bool(check, &[id, user]).await? == Some(false) {
                    tx.exec(s.set_read, &[id, user]).await?;
                    true
                } else {
                    false
                }
            }
            Design::ConditionalUpdate => tx.exec(s.set_read_if_unread, &[id, user]).await? == 1,
            Design::ConditionalUpdateUnguarded => tx.exec(s.set_read, &[id, user]).await? == 1,
        };
        if changed {
            tx.exec(s.decrement, &[user]).await?;
        }
        self.commit(tx, OpKind::MarkRead).await?;
        Ok(changed)
    }

    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        self.delete_lowering(user, id).await.map(|(deleted, _)| deleted)
    }

    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        let s = &self.s;
        let mut tx = self.db.begin(self.begin_mode()).await?;
        let n = match self.design {
            Design::DirectUpdate => {
                let n = tx.exec(s.mark_all_rows, &[user]).await?;
                // A create committed between these two statements is wiped from the count.
                tx.exec(s.zero, &[user]).await?;
                n
            }
            Design::SelectForUpdate => {
                // Lock the unread rows in id order, then change them; a row created after
                // the lock is neither locked nor, under READ COMMITTED, necessarily
                // unseen, so the counter moves by what the UPDATE really changed.
                tx.all_i64(s.lock_unread, &[user]).await?;
                let n = tx.exec(s.mark_all_rows, &[user]).await?;
                tx.exec(s.subtract, &[n as i64, user]).await?;
                n
            }
            Design::ConditionalUpdate | Design::ConditionalUpdateUnguarded => {
                let n = tx.exec(s.mark_all_rows, &[user]).await?;
                if n > 0 {
                    tx.exec(s.subtract, &[n as i64, user]).await?;
                }
                n
            }
        };
        self.commit(tx, OpKind::MarkAllRead).await?;
        Ok(n)
    }

    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        Ok(self.db.opt_i64(self.s.read, &[user]).await?.unwrap_or(0))
    }
}

/// Arms a commit fault of a SQL design (`points`: where crashes, then errors, fire);
/// `on_error` says what an error before commit does. Other faults are refused by name.
pub(crate) fn arm_commit_fault(
    who: &str,
    points: [&CrashPoints; 2],
    fault: Fault,
    on_error: &str,
) -> Result<String, OpError> {
    let which = |op: Option<OpKind>| op.map_or("op".to_string(), |k| k.name().to_string());
    match fault {
        Fault::CrashAfterCommit { op } => {
            points[0].arm(op);
            Ok(format!("the next {} to commit (whatever it changed) loses its reply", which(op)))
        }
        Fault::ErrorBeforeCommit { op } => {
            points[1].arm(op);
            Ok(format!("the next {} about to commit {on_error}", which(op)))
        }
        _ => Err(OpError::new(ErrorClass::Other, Outcome::Fail, format!("{who} does not support {}", fault.name()))),
    }
}

/// The commit faults that fired, as figures (crashes, then errors).
pub(crate) fn commit_fault_figures(points: [&CrashPoints; 2]) -> Vec<(Figure, f64)> {
    let crashes = points[0].figure().map(|n| (Figure::CrashesAfterCommit, n));
    let errors = points[1].figure().map(|n| (Figure::ErrorsBeforeCommit, n));
    crashes.into_iter().chain(errors).collect()
}
