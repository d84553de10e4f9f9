//! The contract every counter strategy implements, whatever backend keeps its counter.

use async_trait::async_trait;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::counters::UserCounters;
use crate::model::{ErrorClass, Guarantee, NotificationId, OpError, OpKind, Outcome, UserId};
use crate::seed::SeedSpec;

/// Faults a scenario can schedule. Each strategy says which it can suffer; all of them
/// touch only the run's own keys and connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Every key of the run's prefix deleted: a Redis restart without persistence.
    RedisDataLoss,
    /// The flusher dies after taking a delta and before its SQL commit, then restarts.
    FlusherCrash,
    /// The broker consumer dies right after its next apply of a first delivery commits,
    /// before it acks: its channel closes, the broker redelivers the message (and every
    /// other unacked one), and the consumer restarts.
    ConsumerCrashAfterApply,
    /// The run's Redis connections are killed (CLIENT KILL); they reconnect.
    RedisDisconnect,
    /// The next Redis write runs but its reply is lost: the op's outcome is unknown.
    RedisTimeout,
    /// The next op that commits SQL writes stops right after that commit, as if the
    /// application died there: its later steps never run and its outcome is unknown.
    /// A strategy whose op is one transaction loses only the reply; one that commits
    /// between statements is left half applied. `op`: only an op of that kind (a
    /// `mark_read_dup` call is a `mark_read`); None: the first op to commit.
    CrashAfterCommit { op: Option<OpKind> },
    /// The next op (of kind `op`, if given) about to commit SQL writes fails instead:
    /// its transaction rolls back and it reports an injected error. An op that already
    /// committed an earlier step is left half applied (unknown); otherwise nothing
    /// happened (fail).
    ErrorBeforeCommit { op: Option<OpKind> },
    /// Every operation that starts in the next `duration_ms` stalls at its entry until
    /// the pause ends, as if the server froze (the `Pausable` wrapper does it).
    Pause { duration_ms: u64 },
    /// Redis Cluster: the shard serving user 1's keys fails over. Its replica's
    /// replication link is cut for `cut_ms` (writes the primary acknowledges meanwhile
    /// reach it alone), then the replica takes over (`CLUSTER FAILOVER TAKEOVER`) and the
    /// old primary, now its replica, drops what it had alone: acknowledged writes lost.
    Failover { cut_ms: u64 },
    /// The replica that `read_count` reads from (`[replica] read_from`) stops applying
    /// the primary's changes for `duration_ms` while still answering reads: a PostgreSQL
    /// standby's WAL replay paused (`pg_wal_replay_pause()`), a Redis replica's
    /// replication stream held (`CLIENT PAUSE <ms> WRITE`). Only rows reading a replica.
    ReplicaPause { duration_ms: u64 },
}

impl Fault {
    pub const ALL: [Fault; 10] = [
        Fault::RedisDataLoss,
        Fault::FlusherCrash,
        Fault::ConsumerCrashAfterApply,
        Fault::RedisDisconnect,
        Fault::RedisTimeout,
        Fault::CrashAfterCommit { op: None },
        Fault::ErrorBeforeCommit { op: None },
        Fault::Pause { duration_ms: 0 },
        Fault::Failover { cut_ms: 0 },
        Fault::ReplicaPause { duration_ms: 0 },
    ];

    /// The op kinds a commit fault can be placed in: those that commit a write.
    pub const COMMITTING_OPS: [OpKind; 4] = [OpKind::Create, OpKind::MarkRead, OpKind::Delete, OpKind::MarkAllRead];

    pub fn name(self) -> &'static str {
        match self {
            Fault::RedisDataLoss => "redis_data_loss",
            Fault::FlusherCrash => "flusher_crash",
            Fault::ConsumerCrashAfterApply => "consumer_crash_after_apply",
            Fault::RedisDisconnect => "redis_disconnect",
            Fault::RedisTimeout => "redis_timeout",
            Fault::CrashAfterCommit { .. } => "crash_after_commit",
            Fault::ErrorBeforeCommit { .. } => "error_before_commit",
            Fault::Pause { .. } => "pause",
            Fault::Failover { .. } => "failover",
            Fault::ReplicaPause { .. } => "replica_pause",
        }
    }

    /// Placement rule: the commit faults may be placed in one op kind.
    pub fn takes_op(self) -> bool {
        matches!(self, Fault::CrashAfterCommit { .. } | Fault::ErrorBeforeCommit { .. })
    }

    /// Placement rule: the pauses need a duration; a failover may take one (how long its
    /// replica is cut off first; none: 0).
    pub fn takes_duration(self) -> bool {
        matches!(self, Fault::Pause { .. } | Fault::ReplicaPause { .. } | Fault::Failover { .. })
    }

    /// Whether the duration must be given (the pauses).
    pub fn needs_duration(self) -> bool {
        matches!(self, Fault::Pause { .. } | Fault::ReplicaPause { .. })
    }

    /// The commit faults placed in `op`'s kind; other faults have one place and stay as
    /// they are.
    pub fn placed(self, op: Option<OpKind>) -> Fault {
        match self {
            Fault::CrashAfterCommit { .. } => Fault::CrashAfterCommit { op },
            Fault::ErrorBeforeCommit { .. } => Fault::ErrorBeforeCommit { op },
            other => other,
        }
    }

    /// A pause lasting `duration_ms`; other faults stay as they are.
    pub fn lasting(self, duration_ms: u64) -> Fault {
        match self {
            Fault::Pause { .. } => Fault::Pause { duration_ms },
            Fault::Failover { .. } => Fault::Failover { cut_ms: duration_ms },
            Fault::ReplicaPause { .. } => Fault::ReplicaPause { duration_ms },
            other => other,
        }
    }

    /// The op kind a commit fault is placed in.
    pub fn op(self) -> Option<OpKind> {
        match self {
            Fault::CrashAfterCommit { op } | Fault::ErrorBeforeCommit { op } => op,
            _ => None,
        }
    }

    /// How long a pause lasts, or a failover's replica is cut off first.
    pub fn duration_ms(self) -> Option<u64> {
        match self {
            Fault::Pause { duration_ms } | Fault::ReplicaPause { duration_ms } => Some(duration_ms),
            Fault::Failover { cut_ms } => Some(cut_ms),
            _ => None,
        }
    }

    pub fn from_name(s: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == s)
    }
}

impl crate::Named for Fault {
    const ALL: &'static [Fault] = &Fault::ALL;
    fn name(self) -> &'static str {
        Fault::name(self)
    }
}

/// Static description of a strategy, shown by `counterlab list` and in reports.
#[derive(Clone, Copy, Debug)]
pub struct StrategyInfo {
    /// Stable kebab-case name used in scenarios and on the command line.
    pub name: &'static str,
    pub guarantee: Guarantee,
    /// One line: how it keeps the counter and why it is (or is not) safe.
    pub summary: &'static str,
}

/// One op of a batch (`Strategy::batch`): its kind, user and target (0: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchOp {
    pub kind: OpKind,
    pub user: UserId,
    pub id: NotificationId,
}

/// A closed-loop worker's op loop, handed to `Strategy::worker_scope`.
pub type WorkerLoop<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// One way to keep a per-user unread counter next to the notification rows.
///
/// Every method is one application-level operation as a request handler would run it;
/// the driver times it, records its outcome, and retries it only after a conflict the
/// server rolled back (or, with the scenario's `retry.on_unknown`, blindly after an
/// unknown outcome, to show what that does).
#[async_trait]
pub trait Strategy: Send + Sync {
    fn info(&self) -> StrategyInfo;

    /// Inserts an unread notification for `user` and counts it; returns its id.
    async fn create(&self, user: UserId) -> Result<NotificationId, OpError>;

    /// Marks one notification read; returns whether this call changed it from unread.
    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError>;

    /// Deletes one notification; returns whether this call deleted a row.
    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError>;

    /// Marks every notification of `user` read; returns how many this call changed.
    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError>;

    /// The number the application would show on the badge.
    async fn read_count(&self, user: UserId) -> Result<i64, OpError>;

    /// Seeds what the strategy keeps beside the SQL rows (Redis counters, state), from
    /// the same layout the namespace was seeded with; nothing by default.
    async fn seed(&self, spec: SeedSpec) -> Result<(), OpError> {
        let _ = spec;
        Ok(())
    }

    /// Runs one closed-loop worker's whole op loop (`run`; one of `workers` at once). A
    /// strategy may keep per-worker state around it: the SQL designs give the worker a
    /// connection of its own for the run, as pgbench gives each client, so no op pays the
    /// pool's release ping. By default it just runs the loop.
    async fn worker_scope<'a>(&'a self, workers: u32, run: WorkerLoop<'a>) {
        let _ = workers;
        run.await
    }

    /// Whether ops of `kind` can go out in one batch with others (`batch`): each one
    /// command no other reply decides. Err says why not (checked before the load of a
    /// `redis_batch` run). None by default.
    fn batches(&self, kind: OpKind) -> Result<(), String> {
        Err(format!("{} has no batched {}", self.info().name, kind.name()))
    }

    /// Sends `ops` (of kinds `batches` takes) at once, one Redis pipeline: each op's
    /// reply as its method returns it (create: the id; mark_read, delete: 1 or 0;
    /// mark_all_read: how many; read_count: the count), in order.
    async fn batch(&self, ops: &[BatchOp]) -> Vec<Result<i64, OpError>> {
        let why = |op: &BatchOp| self.batches(op.kind).err().unwrap_or_default();
        ops.iter().map(|op| Err(OpError::new(ErrorClass::Other, Outcome::Fail, why(op)))).collect()
    }

    /// Starts the strategy's background tasks (flusher, reconciler) before the load.
    async fn start(&self) {}

    /// One pass of the background work `start` would run between its ticks (a buffer
    /// flush), run by the explorer as a session of its own so that its calls interleave
    /// with the ops' (docs/explore.md). False: the design has no such pass.
    async fn background_pass(&self) -> Result<bool, OpError> {
        Ok(false)
    }

    /// After the load: stops background tasks and drains buffers, within `bound`. An
    /// error means it did not become quiescent in time.
    async fn settle(&self, bound: Duration) -> Result<(), OpError> {
        let _ = bound;
        Ok(())
    }

    /// The counter of users 1..=n_users as the application would show it, when the
    /// strategy keeps it outside the SQL `unread_counts` table (None: read that table).
    async fn counters(&self, n_users: u64) -> Result<Option<UserCounters>, OpError> {
        let _ = n_users;
        Ok(None)
    }

    /// Whether `inject` can take `fault` (checked before the load: a scenario that
    /// schedules a fault the strategy cannot take is refused, not run). Must agree with
    /// `inject`.
    fn takes(&self, fault: Fault) -> bool {
        let _ = fault;
        false
    }

    /// Injects a fault now; returns what it did. Unsupported faults are errors.
    async fn inject(&self, fault: Fault) -> Result<String, OpError> {
        Err(OpError::new(
            ErrorClass::Other,
            Outcome::Fail,
            format!("{} does not support {}", self.info().name, fault.name()),
        ))
    }

    /// Sampled about once a second while the run goes on: the amount buffered and not
    /// yet applied to the SQL counter (eventual strategies); None when nothing buffers.
    async fn pending(&self) -> Option<i64> {
        None
    }

    /// SUM(counters) - COUNT(unread rows) right now, when the strategy can say it
    /// cheaply enough to sample during a run; None otherwise.
    async fn net_drift(&self) -> Option<i64> {
        None
    }

    /// Reads served from a cache that may lag the counter by up to this long by design
    /// (the read check allows it, and names staler reads `stale_cache_read`); None: reads
    /// see the counter itself.
    fn read_lag(&self) -> Option<Duration> {
        None
    }

    /// Strategy-specific figures for the report (flushes, lost deltas, repairs...).
    fn figures(&self) -> Vec<(crate::Figure, f64)> {
        Vec::new()
    }

    /// Removes whatever the strategy keeps outside the SQL namespace (Redis keys and the
    /// namespace's ACL user).
    async fn teardown(&self) -> Result<(), OpError> {
        Ok(())
    }
}

/// Armed faults of one kind at one point of a strategy (`crash_after_commit`,
/// `error_before_commit`): one count per op kind and one for "whichever op gets there
/// first".
#[derive(Debug, Default)]
pub struct CrashPoints {
    armed: [std::sync::atomic::AtomicU64; 7],
    fired: std::sync::atomic::AtomicU64,
}

impl CrashPoints {
    pub fn arm(&self, op: Option<OpKind>) {
        self.armed[op.map_or(0, |k| k.index() + 1)].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// True (and disarmed) when `op`, having just committed a write, must crash now.
    pub fn fire(&self, op: OpKind) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let take =
            |slot: &std::sync::atomic::AtomicU64| slot.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1)).is_ok();
        let fired = take(&self.armed[op.index() + 1]) || take(&self.armed[0]);
        if fired {
            self.fired.fetch_add(1, Relaxed);
        }
        fired
    }

    /// Crashes fired; None when none was ever armed (no figure to report).
    pub fn figure(&self) -> Option<f64> {
        use std::sync::atomic::Ordering::Relaxed;
        let armed: u64 = self.armed.iter().map(|a| a.load(Relaxed)).sum();
        let fired = self.fired.load(Relaxed);
        (armed + fired > 0).then_some(fired as f64)
    }
}
