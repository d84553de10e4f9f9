//! A file-defined strategy's batched ops (`[workload] redis_batch`): an op whose whole
//! recipe is one Redis command or Lua script, with no guard, loop, wait, retry group or
//! transaction command, goes out with the rest of its worker's batch as one pipeline;
//! each reply is read as the op's one step would read it and its result evaluated.

use counterlab_core::{BatchOp, ErrorClass, OpError, OpKind, Outcome};

use super::redis_exec::{Call, RedisState, disarm, fill};
use super::{CustomStrategy, op_index, other};
use crate::redis::classify_redis;
use counterlab_spec::compile::{Exec, Step};
use counterlab_spec::expr::{Env, eval};

/// Whether a reply says the script is not loaded (the command did not run).
fn noscript(v: &::redis::Value) -> bool {
    matches!(v, ::redis::Value::ServerError(e) if e.code() == "NOSCRIPT")
}

impl CustomStrategy {
    /// Ok when ops of `kind` can be batched; Err says why not.
    pub(super) fn batchable(&self, kind: OpKind) -> Result<(), String> {
        let Some(i) = op_index(kind) else { return Err("mark_read_dup is K calls of one op".into()) };
        let steps = &self.c.steps[i];
        let why = match steps.as_slice() {
            _ if self.redis.is_none() => "the design has no Redis".to_string(),
            [s] => match &s.exec {
                Exec::Sql { .. } => "its step is SQL".into(),
                Exec::Redis { tx: Some(_), .. } => "its step is a transaction command".into(),
                _ if s.when.is_some() || s.each.is_some() || s.after_ms.is_some() => {
                    "its step has `when`, `each` or `after_ms`".into()
                }
                _ if !self.c.groups[i].is_empty() || self.c.dedicated[i] => "it retries or holds a connection".into(),
                _ => return Ok(()),
            },
            more => format!("it has {} steps", more.len()),
        };
        Err(format!("{}'s {} is not one Redis command: {why}", self.info.name, kind.name()))
    }

    /// Sends `ops` as one pipeline on a shared connection; each op's result in order.
    pub(super) async fn send_batch(&self, ops: &[BatchOp]) -> Vec<Result<i64, OpError>> {
        // The run refuses unbatchable designs before the load: checked once per kind here.
        let mut seen = 0u8;
        for op in ops {
            let bit = 1u8 << op_index(op.kind).unwrap_or(7);
            if seen & bit == 0 {
                seen |= bit;
                if let Err(why) = self.batchable(op.kind) {
                    return vec![Err(other(why)); ops.len()];
                }
            }
        }
        let space = self.redis.as_ref().expect("batchable: it has Redis");
        if let Err(e) = space.refuse_over_cap() {
            return vec![Err(e); ops.len()];
        }
        let mut pipe = ::redis::Pipeline::with_capacity(ops.len());
        pipe.ignore_errors();
        let mut early: Vec<Option<Result<i64, OpError>>> = vec![None; ops.len()];
        let (mut scripts, mut buf) = (false, String::with_capacity(64));
        for (k, op) in ops.iter().enumerate() {
            let s = self.only_step(op.kind);
            // One step: its templates name the op's inputs only, no step's outputs.
            match self.call(&s.exec, (&env(op), &[]), false, &mut buf) {
                Ok((Call::Cmd(c), _)) => {
                    pipe.add_command(c);
                }
                Ok((Call::Lua(inv), _)) => {
                    scripts = true;
                    pipe.invoke_script(&inv);
                }
                Err(e) => early[k] = Some(Err(e)),
            }
        }
        // A script that does not return is killed once the batch gives up on it.
        let guard = scripts.then(|| space.script_guard());
        let sent = space.query_batch(&pipe).await;
        disarm(guard, &sent);
        let mut replies = match sent {
            Ok(v) => v.into_iter(),
            Err(e) => {
                // The batch as a whole failed: on a cluster it is split by command, so
                // some may have run; only a refused connection ran none.
                let ran_none = e.is_connection_refusal();
                let e = classify_redis(e);
                let failed = |op: &BatchOp| match self.writes(op.kind) && !ran_none {
                    true => OpError::new(e.class, Outcome::Unknown, e.message.clone()),
                    false => e.clone(),
                };
                return ops.iter().zip(early).map(|(op, r)| r.unwrap_or_else(|| Err(failed(op)))).collect();
            }
        };
        let (mut out, mut vals) = (Vec::with_capacity(ops.len()), vec![Vec::new()]);
        for (op, r) in ops.iter().zip(early) {
            let r = match r {
                Some(r) => r,
                None => self.batch_reply(op, replies.next(), &mut vals).await,
            };
            out.push(r.map(|v| normalised(op.kind, v)));
        }
        out
    }

    /// One op's reply read as its step reads it, then its result (`vals`: the step's
    /// outputs, a buffer the batch's ops share).
    async fn batch_reply(
        &self,
        op: &BatchOp,
        v: Option<::redis::Value>,
        vals: &mut [Vec<i64>],
    ) -> Result<i64, OpError> {
        let i = op_index(op.kind).expect("a batchable kind");
        let s = self.only_step(op.kind);
        let v = v.ok_or_else(|| OpError::new(ErrorClass::Other, Outcome::Unknown, "no reply in the batch"))?;
        if noscript(&v) {
            // Not run (a failover or a flush lost the script): the op alone loads it.
            return self.run(i, op.user, op.id).await;
        }
        let r = match v {
            ::redis::Value::ServerError(e) => return Err(classify_redis(e.into())),
            v => RedisState::new(false).reply(None, self.writes(op.kind), &v)?,
        };
        if r.writes {
            self.maybe_lose_reply()?;
        }
        vals[0].clear();
        vals[0].resize(s.width, 0);
        fill(&mut vals[0], &r);
        eval(&self.c.results[i], &env(op), vals).map_err(|e| match r.writes {
            // The write ran: what the op did is not known (`half_applied`'s rule).
            true => OpError::new(ErrorClass::Other, Outcome::Unknown, format!("after its write ran: result: {e}")),
            false => other(format!("result: {e}")),
        })
    }

    /// Whether the op's command may change Redis (a script may).
    fn writes(&self, kind: OpKind) -> bool {
        !matches!(self.only_step(kind).exec, Exec::Redis { writes: false, .. })
    }

    fn only_step(&self, kind: OpKind) -> &Step {
        &self.c.steps[op_index(kind).expect("a batchable kind")][0]
    }
}

/// A result as the op's own method returns it (`Strategy`'s contract): mark_read and
/// delete 1 or 0, mark_all_read never below 0.
fn normalised(kind: OpKind, v: i64) -> i64 {
    match kind {
        OpKind::MarkRead | OpKind::Delete => (v != 0) as i64,
        OpKind::MarkAllRead => v.max(0),
        _ => v,
    }
}

fn env(op: &BatchOp) -> Env {
    Env { user: op.user, id: op.id, ..Env::default() }
}
