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

crate::named_enum! {
    /// What a strategy promises about its counters; the checker judges against it.
    pub enum Guarantee {
        /// Counter equals the truth whenever no operation is in flight.
        Exact = "exact",
        /// Counter equals the truth after settle (buffers drained).
        Eventual = "eventual",
        /// Known racy: drift is expected and is reported, not failed.
        None = "none",
    }
}

crate::named_enum! {
    /// The SQL dialects, by the names scenarios and reports use.
    pub enum Dialect {
        Postgres = "postgres",
        Mysql = "mysql",
        Sqlite = "sqlite",
    }
}

crate::named_enum! {
    /// Transaction isolation a namespace's connections use by default.
    pub enum Isolation {
        ReadCommitted = "read-committed",
        RepeatableRead = "repeatable-read",
        Serializable = "serializable",
    }
}

impl Isolation {
    /// The SQL spelling, as in `SET TRANSACTION ISOLATION LEVEL <sql>`.
    pub fn sql(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "READ COMMITTED",
            Isolation::RepeatableRead => "REPEATABLE READ",
            Isolation::Serializable => "SERIALIZABLE",
        }
    }
}

crate::named_enum! {
    /// A server a strategy uses beside its SQL database.
    pub enum Companion {
        Redis = "redis",
        Rabbitmq = "rabbitmq",
    }
}

/// Where a report row ran: the SQL dialect and the companion server, if any
/// (`postgres`, `postgres+redis`, `postgres+rabbitmq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Backend {
    pub sql: Dialect,
    pub with: Option<Companion>,
}

impl Backend {
    pub fn new(sql: Dialect, with: Option<Companion>) -> Backend {
        Backend { sql, with }
    }

    /// `sql` alone.
    pub fn sql(sql: Dialect) -> Backend {
        Backend { sql, with: None }
    }

    /// The name reports print: `postgres`, `postgres+redis`.
    pub fn name(self) -> String {
        match self.with {
            Some(c) => format!("{}+{}", self.sql.name(), c.name()),
            None => self.sql.name().to_string(),
        }
    }

    /// A name as `name()` writes it; None for any other text.
    pub fn parse(name: &str) -> Option<Backend> {
        let (sql, with) = match name.split_once('+') {
            Some((sql, c)) => (sql, Some(Companion::from_name(c)?)),
            None => (name, None),
        };
        Some(Backend { sql: Dialect::from_name(sql)?, with })
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// What a report row missing the field reads as (reports older than the field).
impl Default for Guarantee {
    /// The strictest: a row with no guarantee is judged as exact.
    fn default() -> Guarantee {
        Guarantee::Exact
    }
}

impl Default for Isolation {
    /// The level every run used before levels could be chosen.
    fn default() -> Isolation {
        Isolation::ReadCommitted
    }
}

impl Default for ReadFrom {
    /// Reads went to the primary before replicas could serve them.
    fn default() -> ReadFrom {
        ReadFrom::Primary
    }
}

impl Default for Backend {
    /// Reports older than the backend field ran on PostgreSQL.
    fn default() -> Backend {
        Backend::sql(Dialect::Postgres)
    }
}

/// The phase name of a warm-up stage (the scenario reserves it).
pub const WARMUP: &str = "warmup";
/// The phase name of the interval after the load, while the strategy settles.
pub const SETTLE: &str = "settle";
