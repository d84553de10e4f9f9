//! Sending a file-defined strategy's Redis and Lua steps: on the run's shared connections,
//! or, for an op that sends WATCH or MULTI, on one dedicated connection held for the whole
//! op (WATCH and MULTI state lives on the connection); MULTI's queued commands, EXEC's
//! replies (nil when a WATCHed key changed: nothing ran) and what each reply means as
//! numbers and as effects.

use counterlab_core::{ErrorClass, OpError, Outcome};
use redis::aio::ConnectionLike;

use super::{CustomStrategy, other};
use crate::redis::{DedicatedLease, classify_redis};
use counterlab_spec::compile::Exec;
use counterlab_spec::expr::{Env, Template, expand_into};
use counterlab_spec::redis_steps::TxCmd;

/// An op's Redis connection state.
pub(super) struct RedisState {
    /// The op sends WATCH or MULTI: every Redis step goes to `lease`.
    dedicated: bool,
    lease: Option<DedicatedLease>,
    /// A MULTI sent before any keyed step has not gone out yet: the lease's node (on a
    /// cluster, the one serving the op's keys) is known only at the first key.
    held_multi: bool,
    /// A MULTI is open (commands are queued), a WATCH is set, a queued command writes.
    multi: bool,
    watching: bool,
    queued_writes: bool,
}

impl RedisState {
    pub(super) fn new(dedicated: bool) -> RedisState {
        RedisState { dedicated, lease: None, held_multi: false, multi: false, watching: false, queued_writes: false }
    }

    /// At the op's end: a connection with no WATCH and no open MULTI goes back to the pool
    /// after an op that succeeded; otherwise (an error, a transaction left open) it is
    /// closed, which ends whatever it held.
    pub(super) fn end(&mut self, ok: bool) {
        self.held_multi = false;
        if let Some(lease) = self.lease.take()
            && ok
            && !self.multi
            && !self.watching
        {
            lease.clean();
        }
    }
}

/// A step's reply as numbers: `value`, then `flags` (EXEC: `nil`), then an array reply's
/// elements; `writes`: the call changed Redis.
pub(super) struct Reply {
    pub(super) value: i64,
    pub(super) flags: Vec<i64>,
    pub(super) list: Option<Vec<i64>>,
    pub(super) writes: bool,
}

/// A command or a script invocation, ready to send.
pub(super) enum Call<'a> {
    Cmd(::redis::Cmd),
    Lua(::redis::ScriptInvocation<'a>),
}

/// A call and its first key (None: a keyless command such as MULTI or EXEC).
pub(super) type Keyed<'a> = (Call<'a>, Option<String>);

async fn send<C: ConnectionLike + Send>(c: &mut C, call: &Call<'_>) -> Result<::redis::Value, ::redis::RedisError> {
    match call {
        Call::Cmd(cmd) => cmd.query_async(c).await,
        Call::Lua(inv) => inv.invoke_async(c).await,
    }
}

/// A script call that answered (a reply or an error from Redis) has ended; one cut off
/// (the client's timeout, a lost connection) may still run, and its guard kills it.
pub(super) fn disarm<T>(guard: Option<crate::redis::ScriptGuard<'_>>, sent: &Result<T, ::redis::RedisError>) {
    let ended = match sent {
        Ok(_) => true,
        Err(e) => !(e.is_timeout() || e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error()),
    };
    if let (Some(g), true) = (guard, ended) {
        g.disarm();
    }
}

/// A step's outputs from its reply: the value, then the flags and the array reply's
/// elements, 0 past them (added to `out[0]`: an `each` step sums its values).
pub(super) fn fill(out: &mut [i64], r: &Reply) {
    out[0] = out[0].saturating_add(r.value);
    let mut rest = r.flags.iter().chain(r.list.iter().flatten()).chain(std::iter::repeat(&0));
    for slot in out[1..].iter_mut() {
        *slot = *rest.next().expect("endless");
    }
}

/// A key's or argument's text, expanded into `buf` (one buffer for the op's call).
fn text<'b>(buf: &'b mut String, t: &Template, prefix: &str, env: &Env, vals: &[Vec<i64>]) -> Result<&'b str, OpError> {
    expand_into(buf, t, prefix, env, vals).map_err(other)?;
    Ok(buf.as_str())
}

impl CustomStrategy {
    /// The command or script of a Redis or Lua step, its keys prefixed (and its first key
    /// when `keyed`: a dedicated connection goes to the node serving it); its templates
    /// read the op's inputs and its steps' outputs so far, and expand in `buf` (scratch: a
    /// batch's ops share one).
    pub(super) fn call<'a>(
        &'a self,
        exec: &'a Exec,
        (env, vals): (&Env, &[Vec<i64>]),
        keyed: bool,
        buf: &mut String,
    ) -> Result<Keyed<'a>, OpError> {
        let prefix = self.redis.as_ref().expect("checked at build").prefix();
        let mut first = None;
        let call = match exec {
            Exec::Redis { command, keys, args, .. } => {
                // Sized once: the command's name, then each key and argument.
                let size = command.len() + keys.len() * (prefix.len() + 32) + args.len() * 24;
                let mut cmd = ::redis::Cmd::with_capacity(1 + keys.len() + args.len(), size);
                cmd.arg(*command);
                for k in keys {
                    let k = text(buf, k, prefix, env, vals)?;
                    if keyed && first.is_none() {
                        first = Some(k.to_string());
                    }
                    cmd.arg(k);
                }
                for a in args {
                    cmd.arg(text(buf, a, "", env, vals)?);
                }
                Call::Cmd(cmd)
            }
            Exec::Lua { source, keys, args, .. } => {
                let mut inv = self.script(source).prepare_invoke();
                for k in keys {
                    let k = text(buf, k, prefix, env, vals)?;
                    if keyed && first.is_none() {
                        first = Some(k.to_string());
                    }
                    inv.key(k);
                }
                for a in args {
                    inv.arg(text(buf, a, "", env, vals)?);
                }
                Call::Lua(inv)
            }
            Exec::Sql { .. } => unreachable!("not a Redis step"),
        };
        Ok((call, first))
    }

    /// One Redis or Lua step, on the op's dedicated connection when it has one.
    pub(super) async fn redis_call(
        &self,
        exec: &Exec,
        env: &Env,
        vals: &[Vec<i64>],
        rs: &mut RedisState,
    ) -> Result<Reply, OpError> {
        let (call, key) = self.call(exec, (env, vals), rs.dedicated, &mut String::with_capacity(64))?;
        // Once its keys are over their memory cap, the space takes no further step.
        self.redis.as_ref().expect("checked at build").refuse_over_cap()?;
        let (tx, writes) = match exec {
            Exec::Redis { tx, writes, .. } => (*tx, *writes),
            _ => (None, true),
        };
        // EXEC runs the queued writes: an error there may come after they ran.
        let may_have_run = tx == Some(TxCmd::Exec) && rs.queued_writes;
        let failed = |e: ::redis::RedisError| {
            let e = classify_redis(e);
            if may_have_run { OpError::new(e.class, Outcome::Unknown, e.message) } else { e }
        };
        let reply = if rs.dedicated {
            if rs.lease.is_none() && key.is_none() && tx == Some(TxCmd::Multi) {
                // Held until the first keyed step tells which node the op talks to.
                rs.held_multi = true;
                return rs.reply(tx, writes, &::redis::Value::Okay);
            }
            // Boxed: opening a dedicated connection is a large future, which every op's
            // future would otherwise carry (and copy into its box).
            Box::pin(self.dedicated_call(&call, key.as_deref(), rs)).await?.map_err(failed)?
        } else {
            let space = self.redis.as_ref().expect("checked at build");
            // A script that does not return is killed once its op gives up on it.
            let guard = matches!(call, Call::Lua(_)).then(|| space.script_guard());
            let sent = send(&mut space.conn(), &call).await;
            disarm(guard, &sent);
            sent.map_err(failed)?
        };
        rs.reply(tx, writes, &reply)
    }
}

impl CustomStrategy {
    /// A step on the op's dedicated connection (taken at its first keyed step, to the
    /// node serving `key`), sending a held MULTI first.
    async fn dedicated_call(
        &self,
        call: &Call<'_>,
        key: Option<&str>,
        rs: &mut RedisState,
    ) -> Result<Result<::redis::Value, ::redis::RedisError>, OpError> {
        let space = self.redis.as_ref().expect("checked at build");
        let lease = match &mut rs.lease {
            Some(l) => l,
            None => rs.lease.insert(space.dedicated(key.unwrap_or("")).await?),
        };
        if std::mem::take(&mut rs.held_multi) {
            ::redis::cmd("MULTI").query_async::<()>(lease.conn()).await.map_err(classify_redis)?;
        }
        let guard = matches!(call, Call::Lua(_)).then(|| space.script_guard());
        let sent = send(lease.conn(), call).await;
        disarm(guard, &sent);
        Ok(sent)
    }
}

impl RedisState {
    /// What a reply means, given the transaction state it came in (and moves it on).
    pub(super) fn reply(&mut self, tx: Option<TxCmd>, writes: bool, reply: &::redis::Value) -> Result<Reply, OpError> {
        let plain = |value, writes| Reply { value, flags: Vec::new(), list: None, writes };
        match tx {
            None if self.multi => {
                // Queued: it runs at EXEC.
                self.queued_writes |= writes;
                Ok(plain(0, false))
            }
            Some(TxCmd::Watch) => {
                self.watching = true;
                Ok(plain(1, false))
            }
            Some(TxCmd::Unwatch) => {
                self.watching = false;
                Ok(plain(1, false))
            }
            Some(TxCmd::Multi) => {
                (self.multi, self.queued_writes) = (true, false);
                Ok(plain(1, false))
            }
            Some(TxCmd::Discard) => {
                (self.multi, self.watching) = (false, false);
                Ok(plain(1, false))
            }
            Some(TxCmd::Exec) => {
                (self.multi, self.watching) = (false, false);
                if matches!(reply, ::redis::Value::Nil) {
                    return Ok(Reply { value: 0, flags: vec![1], list: None, writes: false });
                }
                let (value, list) = super::reply::decode(reply).map_err(|e| {
                    let outcome = if self.queued_writes { Outcome::Unknown } else { Outcome::Fail };
                    OpError::new(ErrorClass::Other, outcome, format!("EXEC: {e}"))
                })?;
                Ok(Reply { value, flags: vec![0], list, writes: self.queued_writes })
            }
            None => {
                let (value, list) = super::reply::decode(reply).map_err(|e| {
                    OpError::new(ErrorClass::Other, if writes { Outcome::Unknown } else { Outcome::Fail }, e)
                })?;
                Ok(Reply { value, flags: Vec::new(), list, writes })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::redis::Value as V;

    #[test]
    fn watch_multi_exec_moves_the_state_and_a_nil_exec_wrote_nothing() {
        let mut rs = RedisState::new(true);
        rs.reply(Some(TxCmd::Watch), false, &V::Okay).unwrap();
        let got = rs.reply(None, false, &V::BulkString(b"4".to_vec())).unwrap();
        assert_eq!((got.value, got.writes), (4, false));
        rs.reply(Some(TxCmd::Multi), false, &V::Okay).unwrap();
        assert!(rs.multi && rs.watching);
        let queued = rs.reply(None, true, &V::SimpleString("QUEUED".into())).unwrap();
        assert_eq!((queued.value, queued.writes), (0, false));
        assert!(rs.queued_writes);
        let aborted = rs.reply(Some(TxCmd::Exec), false, &V::Nil).unwrap();
        assert_eq!((aborted.value, aborted.flags.clone(), aborted.writes), (0, vec![1], false));
        assert!(!rs.multi && !rs.watching);
        rs.reply(Some(TxCmd::Watch), false, &V::Okay).unwrap();
        rs.reply(Some(TxCmd::Multi), false, &V::Okay).unwrap();
        rs.reply(None, true, &V::SimpleString("QUEUED".into())).unwrap();
        let ran = rs.reply(Some(TxCmd::Exec), false, &V::Array(vec![V::Okay])).unwrap();
        assert_eq!((ran.value, ran.flags, ran.list, ran.writes), (1, vec![0], Some(vec![1]), true));
    }

    #[test]
    fn a_bad_exec_reply_after_queued_writes_is_unknown_and_discard_ends_all() {
        let mut rs = RedisState::new(true);
        rs.reply(Some(TxCmd::Multi), false, &V::Okay).unwrap();
        rs.reply(None, true, &V::SimpleString("QUEUED".into())).unwrap();
        let e = rs.reply(Some(TxCmd::Exec), false, &V::Array(vec![V::BulkString(b"x".to_vec())])).err().unwrap();
        assert_eq!(e.outcome, Outcome::Unknown);
        rs.reply(Some(TxCmd::Watch), false, &V::Okay).unwrap();
        rs.reply(Some(TxCmd::Multi), false, &V::Okay).unwrap();
        rs.reply(Some(TxCmd::Discard), false, &V::Okay).unwrap();
        assert!(!rs.multi && !rs.watching);
        rs.reply(Some(TxCmd::Watch), false, &V::Okay).unwrap();
        rs.reply(Some(TxCmd::Unwatch), false, &V::Okay).unwrap();
        assert!(!rs.watching);
    }
}
