//! The single-statement design (writable-cte) and its mutant: every changing op is one
//! statement that changes the rows and moves the counter by what changed, sent in
//! autocommit (no BEGIN, no COMMIT): one round trip per op. PostgreSQL only; the runner
//! lists it as unsupported on the other dialects (its registry row's `not_on`).

use async_trait::async_trait;
use counterlab_core::Figure;
use counterlab_core::{
    CrashPoints, ErrorClass, Fault, NotificationId, OpError, OpKind, Outcome, Strategy, StrategyInfo, UserId,
    WorkerLoop,
};

use crate::db::Db;
use crate::sqlfile::{common, single, statement};
use crate::strategies::{arm_commit_fault, commit_fault_figures, hold_if_room};

/// Why the design does not run on MySQL/MariaDB and SQLite.
pub const NO_WRITABLE_CTE: &str = "no data-modifying CTEs (WITH ... UPDATE ... RETURNING) on this dialect: the single-statement design needs PostgreSQL";

#[derive(Clone, Copy, Debug)]
struct Stmts {
    create: &'static str,
    mark_read: &'static str,
    delete: &'static str,
    mark_all_read: &'static str,
}

pub struct SingleStatement {
    info: StrategyInfo,
    db: Db,
    /// None on a dialect without writable CTEs: every op is refused.
    s: Option<Stmts>,
    read: &'static str,
    net_drift: &'static str,
    crashes: CrashPoints,
    errors: CrashPoints,
}

impl SingleStatement {
    /// `snapshot_mutant`: mark_read's counter guard reads the table (the statement's
    /// snapshot) instead of what the UPDATE returned.
    pub fn new(info: StrategyInfo, db: Db, snapshot_mutant: bool) -> SingleStatement {
        let s = single(db.dialect()).map(|f| Stmts {
            create: statement(f, "cte_create"),
            mark_read: statement(f, if snapshot_mutant { "cte_mark_read_snapshot" } else { "cte_mark_read" }),
            delete: statement(f, "cte_delete"),
            mark_all_read: statement(f, "cte_mark_all_read"),
        });
        let c = common(db.dialect());
        SingleStatement {
            info,
            s,
            read: statement(c, "counter_read"),
            net_drift: statement(c, "net_drift"),
            db,
            crashes: CrashPoints::default(),
            errors: CrashPoints::default(),
        }
    }

    /// Runs `op`'s one statement through its fault points. The statement is its own
    /// transaction, so "about to commit" is before it is sent: an armed error fails the
    /// op with nothing applied. After it, an armed crash loses the reply (unknown).
    async fn one(&self, op: OpKind, pick: fn(&Stmts) -> &'static str, args: &[i64]) -> Result<i64, OpError> {
        let s = self.s.as_ref().ok_or_else(|| {
            OpError::new(ErrorClass::Other, Outcome::Fail, format!("{}: {NO_WRITABLE_CTE}", self.db.dialect().name()))
        })?;
        if self.errors.fire(op) {
            return Err(OpError::new(ErrorClass::Other, Outcome::Fail, "error before the commit (injected)"));
        }
        let n = self.db.opt_i64(pick(s), args).await?.unwrap_or(0);
        if self.crashes.fire(op) {
            return Err(OpError::new(ErrorClass::Connection, Outcome::Unknown, "crashed after the commit (injected)"));
        }
        Ok(n)
    }
}

#[async_trait]
impl Strategy for SingleStatement {
    fn info(&self) -> StrategyInfo {
        self.info
    }

    async fn worker_scope<'a>(&'a self, workers: u32, run: WorkerLoop<'a>) {
        hold_if_room(&self.db, workers, run).await
    }

    fn takes(&self, fault: Fault) -> bool {
        fault.takes_op()
    }

    async fn inject(&self, fault: Fault) -> Result<String, OpError> {
        let on_error = "fails before its statement is sent";
        arm_commit_fault(self.info.name, [&self.crashes, &self.errors], fault, on_error)
    }

    fn figures(&self) -> Vec<(Figure, f64)> {
        commit_fault_figures([&self.crashes, &self.errors])
    }

    async fn net_drift(&self) -> Option<i64> {
        self.db.opt_i64(self.net_drift, &[]).await.ok().flatten()
    }

    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        self.one(OpKind::Create, |s| s.create, &[user]).await
    }

    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        Ok(self.one(OpKind::MarkRead, |s| s.mark_read, &[id, user]).await? == 1)
    }

    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        Ok(self.one(OpKind::Delete, |s| s.delete, &[id, user]).await? == 1)
    }

    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        Ok(self.one(OpKind::MarkAllRead, |s| s.mark_all_read, &[user]).await? as u64)
    }

    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        Ok(self.db.opt_i64(self.read, &[user]).await?.unwrap_or(0))
    }
}
