//! Running a compiled file-defined strategy: an op's steps in order with their guards,
//! `each` loops and transactions, the Redis seed, and the fault points (`redis_timeout`,
//! `crash_after_commit`, `error_before_commit`) the ops pass through.

use std::sync::atomic::Ordering;

use counterlab_core::{ErrorClass, OpError, OpKind, Outcome, SeedSpec};
use futures_util::StreamExt;

use super::redis_exec::RedisState;
use super::{CustomStrategy, other};
use crate::db::Tx;
use counterlab_spec::compile::{Exec, Step};
use counterlab_spec::expr::{Env, eval, eval_ref};
use counterlab_spec::spec::{MAX_EACH, SEED};

/// An error after an earlier step took effect (a committed write, a Redis write): the op
/// is half applied, so its outcome is unknown and it is never retried as a whole.
fn half_applied(e: OpError) -> OpError {
    if e.outcome == Outcome::Fail {
        OpError::new(e.class, Outcome::Unknown, format!("after an earlier step took effect: {}", e.message))
    } else {
        e
    }
}

/// An op's progress through its steps.
struct Run {
    /// Each step's outputs so far (`Step::width` of them).
    vals: Vec<Vec<i64>>,
    /// Each Redis or Lua step's array reply, for the `each` loops after it.
    lists: Vec<Option<Vec<i64>>>,
    /// The open transaction, and whether it wrote.
    open: Option<Tx>,
    open_writes: bool,
    /// Something this op did is already visible (committed SQL write, Redis write).
    effects: bool,
    /// The op being run (None: the Redis seed).
    kind: Option<OpKind>,
    /// Its dedicated Redis connection and transaction state (ops with WATCH or MULTI).
    redis: RedisState,
}

impl CustomStrategy {
    /// Runs the `redis_seed` steps for users 1..=n_users (16 users at a time).
    pub(crate) async fn seed_redis(&self, spec: SeedSpec) -> Result<(), OpError> {
        if self.c.steps[SEED].is_empty() {
            return Ok(());
        }
        let results: Vec<Result<i64, OpError>> = futures_util::stream::iter(1..=spec.n_users as i64)
            .map(|user| {
                let env = Env {
                    user,
                    seed: [
                        spec.unread_at_start() as i64,
                        spec.notifications_per_user as i64,
                        spec.initial_read_per_user as i64,
                        spec.first_id(user),
                    ],
                    ..Env::default()
                };
                async move { self.run_env(SEED, env).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().find_map(|r| r.err()).map_or(Ok(()), Err)
    }

    async fn sql_step(
        tx: &mut Tx,
        sql: &'static str,
        returns: usize,
        returning_id: bool,
        args: &[i64],
    ) -> Result<Vec<i64>, OpError> {
        if returning_id {
            let row = tx.row_i64(sql, args, 1).await?;
            Ok(vec![row.is_some() as i64, row.map_or(0, |r| r[0])])
        } else if returns == 0 {
            let (rows, last_id) = tx.exec_full(sql, args).await?;
            Ok(vec![rows as i64, last_id])
        } else {
            let row = tx.row_i64(sql, args, returns).await?;
            let mut v = vec![row.is_some() as i64, 0];
            v.extend(row.unwrap_or_else(|| vec![0; returns]));
            Ok(v)
        }
    }

    /// Runs op `op`'s steps and returns its result.
    pub(super) async fn run(&self, op: usize, user: i64, id: i64) -> Result<i64, OpError> {
        self.run_env(op, Env { user, id, ..Env::default() }).await
    }

    async fn run_env(&self, op: usize, env: Env) -> Result<i64, OpError> {
        let steps = &self.c.steps[op];
        let mut st = Run {
            vals: steps.iter().map(|s| vec![0; s.width]).collect(),
            lists: vec![None; steps.len()],
            open: None,
            open_writes: false,
            effects: false,
            redis: RedisState::new(self.c.dedicated[op]),
            kind: super::OP_KINDS.get(op).copied(),
        };
        let r = match self.steps(op, env, &mut st).await {
            Ok(()) if op == SEED => Ok(0),
            Ok(()) => eval(&self.c.results[op], &env, &st.vals).map_err(|e| other(format!("result: {e}"))),
            Err(e) => Err(e),
        };
        st.redis.end(r.is_ok());
        match r {
            Err(e) if st.effects => Err(half_applied(e)),
            r => r,
        }
    }

    /// Runs the op's steps in order; at the last step of a retry group, its `until` is
    /// read, and while it is false the group runs again from its first step (its outputs
    /// back to 0), at most `max_attempts` times in all.
    async fn steps(&self, op: usize, env: Env, st: &mut Run) -> Result<(), OpError> {
        let steps = &self.c.steps[op];
        let groups = &self.c.groups[op];
        let mut attempts = vec![1u32; groups.len()];
        let mut i = 0;
        while i < steps.len() {
            let s = &steps[i];
            let guard = match &s.when {
                Some(w) => eval(w, &env, &st.vals).map_err(|e| other(format!("{} when: {e}", s.name)))? != 0,
                None => true,
            };
            if guard {
                if let Some(ms) = s.after_ms {
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                }
                self.step(i, s, i + 1 < steps.len(), env, st).await?;
            }
            i += 1;
            let Some(k) = groups.iter().position(|g| g.end == i) else { continue };
            let g = &groups[k];
            if eval(&g.until, &env, &st.vals).map_err(|e| other(format!("retry {} until: {e}", g.name)))? != 0 {
                continue;
            }
            if attempts[k] >= g.max_attempts {
                self.give_ups.fetch_add(1, Ordering::Relaxed);
                return Err(OpError::new(
                    ErrorClass::Serialization,
                    Outcome::Fail,
                    format!("retry {}: `until` still false after {} attempts", g.name, g.max_attempts),
                ));
            }
            attempts[k] += 1;
            self.retries.fetch_add(1, Ordering::Relaxed);
            for v in &mut st.vals[g.start..g.end] {
                v.fill(0);
            }
            i = g.start;
        }
        if st.open.is_none() {
            return Ok(());
        }
        Box::pin(self.commit_open(st, "the last step", true)).await
    }

    /// Runs step `i` (once, or once per element of its `each` list) and stores its
    /// outputs; `more`: steps follow it.
    async fn step(&self, i: usize, s: &Step, more: bool, env: Env, st: &mut Run) -> Result<(), OpError> {
        let elements: Vec<Option<i64>> = match s.each {
            None => vec![None],
            Some(src) => {
                let list = st.lists[src].clone().unwrap_or_default();
                if list.len() > MAX_EACH {
                    return Err(other(format!("`each` over {} elements (at most {MAX_EACH})", list.len())));
                }
                list.into_iter().map(Some).collect()
            }
        };
        let mut out = vec![0i64; s.width];
        for e in elements {
            let env = Env { each: e.unwrap_or(0), ..env };
            match &s.exec {
                Exec::Sql { .. } => {
                    // Boxed: sqlx's futures are large, and an op's future is moved whole
                    // into its box per op (a Redis-only op would pay for the copy).
                    let v = Box::pin(self.sql_exec(&s.exec, &s.name, more, env, st)).await?;
                    out[0] = out[0].saturating_add(v[0]);
                    out[1..].copy_from_slice(&v[1..]);
                }
                exec => {
                    let r = self.redis_call(exec, &env, &st.vals, &mut st.redis).await?;
                    st.effects |= r.writes;
                    if r.writes {
                        self.maybe_lose_reply()?;
                    }
                    super::redis_exec::fill(&mut out, &r);
                    st.lists[i] = r.list;
                }
            }
        }
        st.vals[i] = out;
        if s.commit {
            Box::pin(self.commit_open(st, &s.name, true)).await?;
        }
        Ok(())
    }

    /// One SQL step in the op's transaction (opened at its first SQL step); without
    /// `transaction`, committed at once.
    async fn sql_exec(&self, exec: &Exec, name: &str, more: bool, env: Env, st: &mut Run) -> Result<Vec<i64>, OpError> {
        let Exec::Sql { sql, args, returns, returning_id, writes } = exec else { unreachable!("an SQL step") };
        let args: Vec<i64> = args.iter().map(|a| eval_ref(*a, &env, &st.vals)).collect();
        let tx = match &mut st.open {
            Some(tx) => tx,
            None => st.open.insert(self.db.begin(self.begin).await?),
        };
        let v = Self::sql_step(tx, sql, *returns, *returning_id, &args).await?;
        st.open_writes |= *writes;
        if !self.transaction {
            // After the last step a crash would only lose the reply.
            self.commit_open(st, name, more).await?;
        }
        Ok(v)
    }

    /// An armed `redis_timeout`: the write ran, its reply is lost.
    pub(super) fn maybe_lose_reply(&self) -> Result<(), OpError> {
        if self.replies_to_lose.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_err() {
            return Ok(());
        }
        self.lost_replies.fetch_add(1, Ordering::Relaxed);
        Err(OpError::new(ErrorClass::Timeout, Outcome::Unknown, "redis: reply lost after the command ran (injected)"))
    }

    /// Commits the op's open transaction, if any, through the two commit fault points.
    async fn commit_open(&self, st: &mut Run, step: &str, may_crash: bool) -> Result<(), OpError> {
        let Some(tx) = st.open.take() else { return Ok(()) };
        if let Err(e) = self.committing(st) {
            drop(tx); // rolled back
            return Err(e);
        }
        tx.commit().await?;
        self.committed(st, step, may_crash)
    }

    /// Before a commit of writes: an armed `error_before_commit` fails the op here (the
    /// open transaction is dropped, so it rolls back).
    fn committing(&self, st: &Run) -> Result<(), OpError> {
        if st.open_writes && st.kind.is_some_and(|k| self.errors.fire(k)) {
            return Err(other("error before the commit (injected)".into()));
        }
        Ok(())
    }

    /// After a commit: its writes are visible; an armed `crash_after_commit` stops the
    /// op here when they were writes and `may_crash`.
    fn committed(&self, st: &mut Run, step: &str, may_crash: bool) -> Result<(), OpError> {
        if !std::mem::take(&mut st.open_writes) {
            return Ok(());
        }
        st.effects = true;
        if may_crash && st.kind.is_some_and(|k| self.crashes.fire(k)) {
            return Err(OpError::new(
                ErrorClass::Connection,
                Outcome::Unknown,
                format!("crashed after the commit of {step} (injected)"),
            ));
        }
        Ok(())
    }
}
