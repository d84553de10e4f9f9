//! Where the check reads a file-defined strategy's Redis counters: one read-only command
//! or script per user (GET, HGET, SCARD, ZSCORE, a Lua script...), pipelined 1000 users
//! at a time, each reply read as an integer and nil as a missing counter.

use counterlab_core::{OpError, UserCounters};

use super::{CustomStrategy, other};
use crate::redis::classify_redis;
use counterlab_spec::compile::RedisRead;
use counterlab_spec::expr::{Env, Template, expand};

/// Users per pipeline.
const CHUNK: usize = 1000;

impl CustomStrategy {
    /// Each user's counter (users 1..=n_users), None where the reply is nil.
    pub(super) async fn redis_counters(
        &self,
        read: &RedisRead,
        key: &Template,
        args: &[Template],
        n_users: u64,
    ) -> Result<UserCounters, OpError> {
        let space = self.redis.as_ref().expect("checked at build");
        let mut conn = space.conn();
        let script = match read {
            RedisRead::Lua(source) => Some(::redis::Script::new(source)),
            RedisRead::Command(_) => None,
        };
        if let Some(script) = &script {
            script.prepare_invoke().load_async(&mut conn).await.map_err(classify_redis)?;
        }
        let mut out = UserCounters::new(n_users);
        for chunk in counterlab_core::user_chunks(n_users, CHUNK) {
            let mut pipe = ::redis::pipe();
            for u in chunk.clone() {
                let env = Env { user: u, ..Env::default() };
                let mut cmd = match read {
                    RedisRead::Command(c) => ::redis::cmd(c),
                    RedisRead::Lua(_) => {
                        let mut c = ::redis::cmd("EVALSHA");
                        c.arg(script.as_ref().expect("a script read").get_hash()).arg(1);
                        c
                    }
                };
                cmd.arg(expand(key, space.prefix(), &env, &[]).map_err(other)?);
                for a in args {
                    cmd.arg(expand(a, "", &env, &[]).map_err(other)?);
                }
                pipe.add_command(cmd);
            }
            let vals: Vec<::redis::Value> = pipe.query_async(&mut conn).await.map_err(classify_redis)?;
            for (u, v) in chunk.zip(vals) {
                out.set(
                    u,
                    match v {
                        ::redis::Value::Nil => None,
                        v => Some(super::reply::decode(&v).map_err(other)?.0),
                    },
                );
            }
        }
        Ok(out)
    }
}
