//! File-defined ("bring your own") strategies: each operation is a list of steps, each an
//! SQL statement with named parameters (`:user`, `:id`, `:step.field` from an earlier
//! step), a Redis command or a Lua script (keys templated as `u:{user}:unread`, always
//! under the run's prefix), with optional guards (`when = "sel.is_read == 0"`), loops
//! over an earlier step's array reply (`each`), SQL steps in one transaction or one per
//! step, and a result expression. `CustomSpec` is the textual form (from a scenario file,
//! printed into the report's plan); `compile` checks it for one dialect (parameters bound,
//! never spliced; one statement each; no schema-qualified names, so a file cannot reach
//! data outside the run's namespace) and `CustomStrategy` runs it.
//!
//! The spec, its expressions and its compile are `counterlab-spec` (no I/O, so the
//! scenario parser checks files without the servers' clients); here: `interpret.rs`
//! (running the steps), `redis_exec.rs` (Redis and Lua steps), `batch.rs` (ops of one
//! Redis step sent as one pipeline), `counters.rs` (the check's Redis read), `reply.rs`
//! (a reply as numbers).

mod batch;
mod counters;
mod interpret;
mod redis_exec;
mod reply;

use counterlab_core::Figure;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use counterlab_core::{
    CrashPoints, ErrorClass, Fault, NotificationId, OpError, OpKind, Outcome, SeedSpec, Strategy, StrategyInfo, UserId,
};

use crate::db::{Begin, Db};
use crate::redis::RedisSpace;
use counterlab_spec::compile::{Counters, Exec};
use counterlab_spec::spec::{SEED, leak, op_name};
use counterlab_spec::{Compiled, CustomSpec};

/// The op kinds in `CUSTOM_OPS` order: kind `OP_KINDS[i]` runs compiled op `i`.
const OP_KINDS: [OpKind; 5] =
    [OpKind::Create, OpKind::MarkRead, OpKind::Delete, OpKind::MarkAllRead, OpKind::ReadCount];

/// The compiled op a kind runs (None: `mark_read_dup`, K calls of `mark_read`).
fn op_index(kind: OpKind) -> Option<usize> {
    OP_KINDS.iter().position(|k| *k == kind)
}

/// An op error that says the op did not take effect (see `half_applied` for one after
/// an earlier step did).
fn other(m: String) -> OpError {
    OpError::new(ErrorClass::Other, Outcome::Fail, m)
}

/// A file-defined strategy running on one namespace (and, when it uses Redis, the run's
/// key space).
pub struct CustomStrategy {
    info: StrategyInfo,
    db: Db,
    redis: Option<RedisSpace>,
    c: Compiled,
    /// Each Lua step's script, by its source (shared with the compiled step), hashed once.
    scripts: Vec<(std::sync::Arc<str>, ::redis::Script)>,
    transaction: bool,
    begin: Begin,
    /// Armed `redis_timeout` faults: the next Redis writes run and lose their replies.
    replies_to_lose: AtomicU64,
    lost_replies: AtomicU64,
    /// Armed `crash_after_commit` faults, and the ops they stopped.
    crashes: CrashPoints,
    /// Armed `error_before_commit` faults.
    errors: CrashPoints,
    /// Retry groups: attempts beyond the first, and ops whose `until` never held.
    retries: AtomicU64,
    give_ups: AtomicU64,
    /// The lag its reads may show by design (`read_lag_ms`).
    read_lag: Option<std::time::Duration>,
}

impl CustomStrategy {
    /// The script of a Lua step (every one is hashed at build).
    fn script(&self, source: &std::sync::Arc<str>) -> &::redis::Script {
        let found = self.scripts.iter().find(|(s, _)| std::sync::Arc::ptr_eq(s, source));
        &found.expect("every Lua step's script is built at build").1
    }

    /// Compiles `spec` for the namespace's dialect (checked at load, so an error here is
    /// a dialect the spec does not cover), runs its setup statements and loads its Lua
    /// scripts (a script that does not compile fails here, naming its origin).
    pub async fn build(spec: &CustomSpec, db: Db, redis: Option<RedisSpace>) -> Result<CustomStrategy, OpError> {
        let c = spec.compile(db.dialect()).map_err(|e| other(format!("{}: {e}", spec.name)))?;
        if spec.needs_redis() && redis.is_none() {
            return Err(other(format!("{} uses Redis and the run has none", spec.name)));
        }
        for sql in &c.setup {
            let mut tx = db.begin(Begin::Plain).await?;
            tx.exec(leak(sql.clone()), &[]).await?;
            tx.commit().await?;
        }
        Self::prepare_all(spec, &c, &db).await?;
        let mut scripts = Vec::new();
        for step in c.steps.iter().flatten() {
            if let Exec::Lua { origin, source, .. } = &step.exec {
                let script = ::redis::Script::new(source);
                if let Some(space) = &redis {
                    script.prepare_invoke().load_async(&mut space.conn()).await.map_err(|e| {
                        other(format!("{}: Lua script ({origin}) was refused by Redis: {e}", spec.name))
                    })?;
                }
                scripts.push((source.clone(), script));
            }
        }
        let begin = if spec.sqlite_begin_immediate { Begin::Locking } else { Begin::Plain };
        Ok(CustomStrategy {
            info: spec.info(),
            db,
            redis,
            c,
            scripts,
            transaction: spec.transaction,
            begin,
            replies_to_lose: AtomicU64::new(0),
            lost_replies: AtomicU64::new(0),
            crashes: CrashPoints::default(),
            errors: CrashPoints::default(),
            retries: AtomicU64::new(0),
            give_ups: AtomicU64::new(0),
            read_lag: spec.read_lag_ms.map(std::time::Duration::from_millis),
        })
    }

    /// Prepares every SQL step (after `setup`, in the fresh namespace, as its identity) so
    /// a misspelt table, a syntax error or a missing right stops the run before the load,
    /// naming the step's file:line:col.
    async fn prepare_all(spec: &CustomSpec, c: &Compiled, db: &Db) -> Result<(), OpError> {
        for (op, steps) in c.steps.iter().enumerate().take(SEED) {
            for (idx, step) in steps.iter().enumerate() {
                if let Exec::Sql { sql, args, .. } = &step.exec {
                    db.prepare(sql, args.len()).await.map_err(|e| {
                        let at = &spec.op_steps(op)[idx].at;
                        other(format!("{at}: {} {}: {}", op_name(op), step.name, e.message))
                    })?;
                }
            }
        }
        if let Some(Counters::Sql(sql)) = &c.counters {
            db.prepare(sql, 0).await.map_err(|e| other(format!("{}: the counters query: {}", spec.name, e.message)))?;
        }
        Ok(())
    }
}

#[async_trait]
impl Strategy for CustomStrategy {
    fn info(&self) -> StrategyInfo {
        self.info
    }
    /// A worker's SQL steps use its own connection, as the built-ins' do.
    async fn worker_scope<'a>(&'a self, workers: u32, run: counterlab_core::WorkerLoop<'a>) {
        crate::strategies::hold_if_room(&self.db, workers, run).await
    }
    /// Runs the `redis_seed` steps (none without Redis).
    async fn seed(&self, spec: SeedSpec) -> Result<(), OpError> {
        match self.redis {
            Some(_) => self.seed_redis(spec).await,
            None => Ok(()),
        }
    }
    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        self.run(0, user, 0).await
    }
    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        Ok(self.run(1, user, id).await? != 0)
    }
    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        Ok(self.run(2, user, id).await? != 0)
    }
    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        Ok(self.run(3, user, 0).await?.max(0) as u64)
    }
    fn batches(&self, kind: OpKind) -> Result<(), String> {
        self.batchable(kind)
    }
    async fn batch(&self, ops: &[counterlab_core::BatchOp]) -> Vec<Result<i64, OpError>> {
        self.send_batch(ops).await
    }
    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        self.run(4, user, 0).await
    }
    async fn counters(&self, n_users: u64) -> Result<Option<counterlab_core::UserCounters>, OpError> {
        match &self.c.counters {
            None => Ok(None),
            Some(Counters::Sql(sql)) => {
                let mut out = counterlab_core::UserCounters::new(n_users);
                self.db.each_row(sql, |u, v| out.set(u, Some(v))).await?;
                Ok(Some(out))
            }
            Some(Counters::Redis { read, key, args }) => self.redis_counters(read, key, args, n_users).await.map(Some),
        }
    }
    fn takes(&self, fault: Fault) -> bool {
        let redis = self.redis.is_some();
        match fault {
            Fault::CrashAfterCommit { .. } | Fault::ErrorBeforeCommit { .. } => true,
            Fault::RedisDataLoss | Fault::RedisDisconnect | Fault::RedisTimeout | Fault::Failover { .. } => redis,
            _ => false,
        }
    }

    async fn inject(&self, fault: Fault) -> Result<String, OpError> {
        let which = |op: Option<OpKind>| op.map_or("op".to_string(), |k| k.name().to_string());
        if let Fault::CrashAfterCommit { op } = fault {
            self.crashes.arm(op);
            return Ok(format!("the next {} that commits a write stops after that commit", which(op)));
        }
        if let Fault::ErrorBeforeCommit { op } = fault {
            self.errors.arm(op);
            return Ok(format!("the next {} about to commit a write rolls back and fails", which(op)));
        }
        let Some(space) = &self.redis else {
            return Err(other(format!("{} uses no Redis: {} does not apply", self.info.name, fault.name())));
        };
        match fault {
            Fault::RedisDataLoss => Ok(format!("deleted {} keys", space.delete_all().await?)),
            Fault::RedisDisconnect => Ok(format!("killed {} connections", space.kill_connections().await?)),
            Fault::RedisTimeout => {
                self.replies_to_lose.fetch_add(1, Ordering::Relaxed);
                Ok("the next Redis write loses its reply".into())
            }
            Fault::FlusherCrash => Err(other(format!("{} has no flusher", self.info.name))),
            Fault::ConsumerCrashAfterApply => Err(other(format!("{} has no broker consumer", self.info.name))),
            Fault::Failover { cut_ms } => space.failover(std::time::Duration::from_millis(cut_ms)).await,
            Fault::CrashAfterCommit { .. }
            | Fault::ErrorBeforeCommit { .. }
            | Fault::Pause { .. }
            | Fault::ReplicaPause { .. } => {
                Err(other(format!("{} cannot inject {} here", self.info.name, fault.name())))
            }
        }
    }
    fn read_lag(&self) -> Option<std::time::Duration> {
        self.read_lag
    }
    fn figures(&self) -> Vec<(Figure, f64)> {
        let mut v = Vec::new();
        if let Some(n) = self.crashes.figure() {
            v.push((Figure::CrashesAfterCommit, n));
        }
        if let Some(n) = self.errors.figure() {
            v.push((Figure::ErrorsBeforeCommit, n));
        }
        if self.c.groups.iter().any(|g| !g.is_empty()) {
            v.push((Figure::GroupRetries, self.retries.load(Ordering::Relaxed) as f64));
            v.push((Figure::GroupGiveUps, self.give_ups.load(Ordering::Relaxed) as f64));
        }
        if self.redis.is_some() {
            v.push((Figure::LostReplies, self.lost_replies.load(Ordering::Relaxed) as f64));
        }
        v
    }
    async fn teardown(&self) -> Result<(), OpError> {
        if let Some(space) = &self.redis {
            space.delete_all().await?;
            space.release().await?;
        }
        Ok(())
    }
}
