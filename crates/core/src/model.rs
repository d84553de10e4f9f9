//! Plain data types shared by every crate: ids, operation kinds, outcomes, error classes.

use std::fmt;

/// A user of the simulated product; users are numbered `1..=n_users`.
pub type UserId = i64;
/// Primary key of a notification row.
pub type NotificationId = i64;

crate::named_enum! {
    /// The operations a workload issues, by their stable snake_case names (scenarios,
    /// reports). `MarkReadDup` is K concurrent `mark_read` calls on one notification: the
    /// race that breaks read-check-write designs.
    pub enum OpKind {
        Create = "create",
        MarkRead = "mark_read",
        MarkReadDup = "mark_read_dup",
        Delete = "delete",
        MarkAllRead = "mark_all_read",
        ReadCount = "read_count",
    }
}

crate::named_enum! {
    /// Where `read_count` reads: the primary (the counter itself), a replica, or a
    /// replica with the primary as fallback when the replica read fails (the seed's
    /// "read the slave, fall back to the master").
    pub enum ReadFrom {
        Primary = "primary",
        Replica = "replica",
        ReplicaFallback = "replica-fallback",
    }
}

impl OpKind {
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What became of one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The operation took effect (or was a no-op the strategy decided on, such as
    /// marking an already-read notification).
    Ok,
    /// The operation certainly did not take effect (rolled back, rejected).
    Fail,
    /// The reply was lost or timed out: it may or may not have taken effect.
    Unknown,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Unknown => "unknown",
        }
    }
}

/// Why an operation failed, as far as the client can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    /// The server refused to serialize: PostgreSQL 40001, MariaDB 1020.
    Serialization,
    /// PostgreSQL 40P01, MySQL 1213.
    Deadlock,
    /// A server-side lock wait gave up: MySQL 1205, PostgreSQL 55P03.
    LockTimeout,
    /// SQLite's SQLITE_BUSY / SQLITE_LOCKED: another connection holds the write lock.
    Busy,
    /// No reply in time (client op timeout, pool wait, statement timeout).
    Timeout,
    Connection,
    /// The server refused the statement or command for lack of a privilege (PostgreSQL
    /// 42501, MySQL 1044/1142/1143/1227/1370, SQLite SQLITE_AUTH, Redis NOPERM): the
    /// namespace's identity hit its boundary.
    Permission,
    Other,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; ErrorClass::COUNT] = [
        ErrorClass::Serialization,
        ErrorClass::Deadlock,
        ErrorClass::LockTimeout,
        ErrorClass::Busy,
        ErrorClass::Timeout,
        ErrorClass::Connection,
        ErrorClass::Permission,
        ErrorClass::Other,
    ];
    pub const COUNT: usize = 8;

    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::Serialization => "serialization",
            ErrorClass::Deadlock => "deadlock",
            ErrorClass::LockTimeout => "lock_timeout",
            ErrorClass::Busy => "busy",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Connection => "connection",
            ErrorClass::Permission => "permission",
            ErrorClass::Other => "other",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// Conflicts the server resolved by rolling the transaction back: running the whole
    /// operation again is safe and is what applications do.
    pub fn is_conflict(self) -> bool {
        matches!(self, ErrorClass::Serialization | ErrorClass::Deadlock | ErrorClass::LockTimeout | ErrorClass::Busy)
    }
}

/// A failed operation: its class, whether it may still have taken effect, and the
/// backend's message (kept for the first few errors of a run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpError {
    pub class: ErrorClass,
    pub outcome: Outcome,
    pub message: String,
}

impl OpError {
    /// True when the op certainly did not apply and failed on a conflict, so a retry of
    /// the whole operation cannot double-apply it.
    pub fn retryable(&self) -> bool {
        self.outcome == Outcome::Fail && self.class.is_conflict()
    }

    pub fn new(class: ErrorClass, outcome: Outcome, message: impl Into<String>) -> OpError {
        assert!(outcome != Outcome::Ok, "an error cannot have outcome ok");
        OpError { class, outcome, message: message.into() }
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.class.name(), self.outcome.name(), self.message)
    }
}

impl std::error::Error for OpError {}

/// What a strategy promises about its counters; the checker judges against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Guarantee {
    /// Counter equals the truth whenever no operation is in flight.
    Exact,
    /// Counter equals the truth after settle (buffers drained).
    Eventual,
    /// Known racy: drift is expected and is reported, not failed.
    None,
}

impl Guarantee {
    pub fn name(self) -> &'static str {
        match self {
            Guarantee::Exact => "exact",
            Guarantee::Eventual => "eventual",
            Guarantee::None => "none",
        }
    }
}
