//! The Redis strategies: counters (or their pending deltas) kept in Redis beside the SQL
//! notification rows, the write-back flusher, the reconciler, and the faults that tell
//! them apart. Scripts are the `.lua` files in `lua/`; every key lives under the run's
//! prefix with a hash tag per user (`cl:<namespace>:{u:42}:unread`) or for the buffer
//! (`cl:<namespace>:{buf}:pending`), so scripts and MULTI also work on Redis Cluster.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use counterlab_core::{ErrorClass, Fault, NotificationId, OpError, Outcome, Strategy, StrategyInfo, UserId};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};

use crate::db::{Begin, Db};
use crate::error::{BackendError, check_url, redact_url};
use crate::sandbox::Identity;
use crate::sqlfile::{common, statement};

/// The local Redis used when nothing else is configured.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Classifies a Redis error: a timeout or a dropped connection may have run the command
/// (unknown); a refused connection or a script error did not (fail).
pub fn classify_redis(e: redis::RedisError) -> OpError {
    let (class, outcome) = if e.is_timeout() {
        (ErrorClass::Timeout, Outcome::Unknown)
    } else if e.is_connection_refusal() {
        (ErrorClass::Connection, Outcome::Fail)
    } else if e.is_io_error() || e.is_connection_dropped() {
        (ErrorClass::Connection, Outcome::Unknown)
    } else if e.code() == Some("NOPERM") || is_script_acl_denial(&e.to_string()) {
        (ErrorClass::Permission, Outcome::Fail)
    } else {
        (ErrorClass::Other, Outcome::Fail)
    };
    OpError::new(class, outcome, format!("redis: {e}"))
}

/// NOPERM's form inside a script: `ERR The user executing the script can't access at
/// least one of the keys ...` or `... can't run this command or subcommand ...`.
fn is_script_acl_denial(msg: &str) -> bool {
    msg.contains("The user executing the script can't")
}

/// A reachable Redis server.
pub struct RedisServer {
    client: redis::Client,
    location: String,
    version: String,
    /// Ok when each run can get its own ACL user (probed at connect); Err says why not.
    sandbox: Result<(), String>,
}

impl RedisServer {
    pub async fn connect(url: &str, timeout: Duration) -> Result<RedisServer, BackendError> {
        let location = redact_url(url);
        let err = |detail: String| BackendError::Connect { backend: "redis", url: location.clone(), detail };
        let schemes = ["redis", "rediss", "redis+unix", "unix"];
        check_url(url, &schemes, "redis://[user:password@]host[:port][/db]").map_err(err)?;
        let client = redis::Client::open(url).map_err(|e| err(format!("invalid URL: {e}")))?;
        let mut conn = tokio::time::timeout(timeout, client.get_multiplexed_async_connection())
            .await
            .map_err(|_| err(format!("no answer within {} ms", timeout.as_millis())))?
            .map_err(|e| err(e.to_string()))?;
        let info: String =
            redis::cmd("INFO").arg("server").query_async(&mut conn).await.map_err(|e| err(e.to_string()))?;
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let probe = crate::sandbox::probe_name();
        let created: Result<(), redis::RedisError> =
            redis::cmd("ACL").arg("SETUSER").arg(&probe).arg("off").query_async(&mut conn).await;
        let sandbox = match created {
            Ok(()) => {
                let _: i64 = redis::cmd("ACL")
                    .arg("DELUSER")
                    .arg(&probe)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| err(e.to_string()))?;
                Ok(())
            }
            Err(e) => Err(format!(
                "Redis {version} gave no ACL user to this account (ACL SETUSER: {e}); ACLs need Redis 6+ and the +acl right"
            )),
        };
        Ok(RedisServer { client, location, version, sandbox })
    }

    /// Whether each run gets its own ACL user here (Err: why not).
    pub fn sandbox(&self) -> Result<(), &str> {
        self.sandbox.as_ref().map(|_| ()).map_err(|e| e.as_str())
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    pub fn location(&self) -> &str {
        &self.location
    }

    /// `n_conns` reconnecting connections, lent to one op at a time (see `Lease`), whose
    /// replies time out after `response_timeout`: a timed-out command may still have run,
    /// and is reported as unknown.
    pub async fn space(
        &self,
        namespace: &str,
        response_timeout: Duration,
        n_conns: u32,
    ) -> Result<RedisSpace, BackendError> {
        let err = |e: redis::RedisError| BackendError::Connect {
            backend: "redis",
            url: self.location.clone(),
            detail: e.to_string(),
        };
        // The marker first (as the configured account): a run killed from here on is
        // found by `counterlab clean`, and the marker itself expires.
        let marker = crate::leftover::Marker::now().text();
        let mut admin = self.client.get_multiplexed_async_connection().await.map_err(err)?;
        redis::cmd("SET")
            .arg(format!("cl:{namespace}:meta"))
            .arg(&marker)
            .arg("EX")
            .arg(crate::leftover::REDIS_MARKER_TTL_S)
            .query_async::<()>(&mut admin)
            .await
            .map_err(err)?;
        let (client, identity) = match &self.sandbox {
            Ok(()) => (
                self.acl_user(namespace).await.map_err(err)?,
                Identity::Own { kind: "ACL user", name: namespace.into(), caveat: None },
            ),
            Err(why) => (self.client.clone(), Identity::Shared { why: why.clone() }),
        };
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(response_timeout))
            .set_connection_timeout(Some(response_timeout))
            .set_number_of_retries(3);
        let mut space = RedisSpace {
            client: self.client.clone(),
            idle: Arc::new(Mutex::new(Vec::new())),
            conns: Arc::new(Vec::new()),
            next: Arc::new(AtomicUsize::new(0)),
            prefix: format!("cl:{namespace}:"),
            identity,
        };
        let mut conns = Vec::new();
        for _ in 0..n_conns.clamp(1, MAX_REDIS_CONNS) {
            match ConnectionManager::new_with_config(client.clone(), config.clone()).await {
                Ok(c) => conns.push(c),
                Err(e) => {
                    space.release().await.ok();
                    return Err(err(e));
                }
            }
        }
        space.idle = Arc::new(Mutex::new(conns.clone()));
        space.conns = Arc::new(conns);
        Ok(space)
    }

    /// Run namespaces with a marker key (`cl:<namespace>:meta`) on this Redis.
    pub async fn leftovers(&self) -> Result<Vec<crate::leftover::Leftover>, BackendError> {
        let err = |e: redis::RedisError| BackendError::Step {
            backend: "redis",
            step: "list leftovers",
            namespace: "cl:*".into(),
            detail: e.to_string(),
        };
        let mut conn = self.client.get_multiplexed_async_connection().await.map_err(err)?;
        let mut keys: Vec<String> = Vec::new();
        let mut cursor: u64 = 0;
        for _ in 0..MAX_SCAN_ROUNDS {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg("cl:cl_*:meta")
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(err)?;
            keys.extend(batch);
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        let clients: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut conn).await.map_err(err)?;
        let mut out = Vec::new();
        for key in keys {
            let ns = key.trim_start_matches("cl:").trim_end_matches(":meta").to_string();
            let text: Option<String> = conn.get(&key).await.map_err(err)?;
            if let Some(marker) = text.as_deref().and_then(crate::leftover::Marker::parse)
                && crate::leftover::is_namespace_name(&ns)
            {
                let user = format!(" user={ns} ");
                let sessions = clients.lines().filter(|l| l.contains(&user)).count() as u64;
                let what = "keys and ACL user".into();
                out.push(crate::leftover::Leftover { backend: "redis", namespace: ns, marker, what, sessions });
            }
        }
        out.sort_by(|a, b| a.namespace.cmp(&b.namespace));
        Ok(out)
    }

    /// Deletes a leftover's keys (`cl:<namespace>:*`) and its ACL user.
    pub async fn remove(&self, l: &crate::leftover::Leftover) -> Result<u64, OpError> {
        assert!(crate::leftover::is_namespace_name(&l.namespace), "leftovers come from `leftovers`");
        let space = RedisSpace {
            client: self.client.clone(),
            conns: Arc::new(Vec::new()),
            idle: Arc::new(Mutex::new(Vec::new())),
            next: Arc::new(AtomicUsize::new(0)),
            prefix: format!("cl:{}:", l.namespace),
            identity: Identity::Own { kind: "ACL user", name: l.namespace.clone(), caveat: None },
        };
        let deleted = space.delete_all().await?;
        if self.sandbox.is_ok() {
            space.release().await?;
        }
        Ok(deleted)
    }

    /// Creates the namespace's ACL user (`sandbox::redis_acl_rules`) and returns a
    /// client that logs in as it.
    async fn acl_user(&self, namespace: &str) -> Result<redis::Client, redis::RedisError> {
        let password = crate::sandbox::random_password();
        let info = self.client.get_connection_info().clone();
        let select_db = info.redis_settings().db() != 0;
        let mut admin = self.client.get_multiplexed_async_connection().await?;
        let (base, more) = crate::sandbox::redis_acl_rules(namespace, &password, select_db);
        redis::cmd("ACL").arg("SETUSER").arg(namespace).arg(base).query_async::<()>(&mut admin).await?;
        for rule in more {
            let set = redis::cmd("ACL").arg("SETUSER").arg(namespace).arg(&rule).query_async::<()>(&mut admin).await;
            match set {
                Err(e) if e.to_string().contains("Unknown command") => {}
                other => other?,
            }
        }
        let settings = info.redis_settings().clone().set_username(namespace).set_password(&password);
        redis::Client::open(info.set_redis_settings(settings))
    }
}

/// Bound on SCAN rounds of 1000 keys (deleting a run's keys, listing markers).
const MAX_SCAN_ROUNDS: u32 = 100_000;

/// Upper bound on a run's Redis connections.
pub const MAX_REDIS_CONNS: u32 = 64;

/// One strategy run's keys (everything under `prefix`) and its connections.
#[derive(Clone)]
pub struct RedisSpace {
    client: redis::Client,
    conns: Arc<Vec<ConnectionManager>>,
    idle: Arc<Mutex<Vec<ConnectionManager>>>,
    next: Arc<AtomicUsize>,
    prefix: String,
    identity: Identity,
}

/// A connection lent to one op, back to the idle list when dropped. Measured on two
/// cores with 8 clients: 79k ZINCRBY/s when each client has a connection to itself,
/// 34k when all share one multiplexed connection, 35k when spread round-robin.
pub struct Lease {
    c: Option<ConnectionManager>,
    /// Some when `c` came off the idle list and goes back on it; None for a shared one.
    idle: Option<Arc<Mutex<Vec<ConnectionManager>>>>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let (Some(c), Some(idle)) = (self.c.take(), &self.idle) {
            idle.lock().unwrap_or_else(|e| e.into_inner()).push(c);
        }
    }
}

impl redis::aio::ConnectionLike for Lease {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        self.c.as_mut().expect("leased").req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        self.c.as_mut().expect("leased").req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.c.as_ref().expect("leased").get_db()
    }
}

impl RedisSpace {
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Who the space's connections log in as.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// For `--keep`: the marker key becomes a note, so `counterlab clean` leaves the kept
    /// keys alone.
    pub async fn mark_kept(&self) -> Result<(), OpError> {
        let mut admin = self.client.get_multiplexed_async_connection().await.map_err(classify_redis)?;
        let key = format!("{}meta", self.prefix);
        admin.set::<_, _, ()>(key, "kept by counterlab --keep").await.map_err(classify_redis)
    }

    /// Drops the space's ACL user (which also closes its connections); keys stay. Called
    /// again it does nothing.
    pub async fn release(&self) -> Result<(), OpError> {
        let Identity::Own { name, .. } = &self.identity else { return Ok(()) };
        let mut admin = self.client.get_multiplexed_async_connection().await.map_err(classify_redis)?;
        redis::cmd("ACL").arg("DELUSER").arg(name).query_async::<i64>(&mut admin).await.map_err(classify_redis)?;
        Ok(())
    }

    fn user_key(&self, user: UserId, what: &str) -> String {
        format!("{}{{u:{user}}}:{what}", self.prefix)
    }

    fn buf_key(&self, what: &str) -> String {
        format!("{}{{buf}}:{what}", self.prefix)
    }

    /// A connection for one op: an idle one when there is one (so each worker talks on
    /// its own connection, as a client pool would), else a shared one.
    pub fn conn(&self) -> Lease {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match idle {
            Some(c) => Lease { c: Some(c), idle: Some(self.idle.clone()) },
            None => {
                let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
                Lease { c: Some(self.conns[i].clone()), idle: None }
            }
        }
    }

    /// Kills every connection of this space on the server (`CLIENT ID` on each, then
    /// `CLIENT KILL ID` from another): only the run's own clients, never anyone else's.
    /// The connection managers reconnect on their next command.
    pub async fn kill_connections(&self) -> Result<u64, OpError> {
        let mut ids = Vec::new();
        for c in self.conns.iter() {
            let mut c = c.clone();
            let id: i64 = redis::cmd("CLIENT").arg("ID").query_async(&mut c).await.map_err(classify_redis)?;
            ids.push(id);
        }
        // Kills go out on a connection of their own, so none is sent on a killed one.
        let mut admin = self.client.get_multiplexed_async_connection().await.map_err(classify_redis)?;
        let mut killed = 0u64;
        for id in ids {
            let n: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query_async(&mut admin)
                .await
                .map_err(classify_redis)?;
            killed += n.max(0) as u64;
        }
        Ok(killed)
    }

    /// Deletes every key under the prefix (SCAN + UNLINK), at most `MAX_SCAN_ROUNDS`
    /// rounds of 1000; returns how many were deleted.
    pub async fn delete_all(&self) -> Result<u64, OpError> {
        // SCAN sees every key on the server, so it runs as the configured account, never
        // as the space's ACL user.
        let mut conn = self.client.get_multiplexed_async_connection().await.map_err(classify_redis)?;
        let pattern = format!("{}*", self.prefix);
        let mut cursor: u64 = 0;
        let mut deleted = 0u64;
        for _ in 0..MAX_SCAN_ROUNDS {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(classify_redis)?;
            if !keys.is_empty() {
                let n: u64 = redis::cmd("UNLINK").arg(&keys).query_async(&mut conn).await.map_err(classify_redis)?;
                deleted += n;
            }
            cursor = next;
            if cursor == 0 {
                return Ok(deleted);
            }
        }
        Err(OpError::new(
            ErrorClass::Other,
            Outcome::Fail,
            format!("SCAN of {pattern} did not finish in {MAX_SCAN_ROUNDS} rounds"),
        ))
    }
}

struct Scripts {
    guard_begin: Script,
    guard_end: Script,
    counter_apply: Script,
    lua_create: Script,
    lua_mark_read: Script,
    lua_delete: Script,
    lua_mark_all_read: Script,
    repair: Script,
    zset_claim: Script,
}

impl Scripts {
    fn load() -> Scripts {
        Scripts {
            guard_begin: Script::new(include_str!("../lua/guard_begin.lua")),
            guard_end: Script::new(include_str!("../lua/guard_end.lua")),
            counter_apply: Script::new(include_str!("../lua/counter_apply.lua")),
            lua_create: Script::new(include_str!("../lua/lua_create.lua")),
            lua_mark_read: Script::new(include_str!("../lua/lua_mark_read.lua")),
            lua_delete: Script::new(include_str!("../lua/lua_delete.lua")),
            lua_mark_all_read: Script::new(include_str!("../lua/lua_mark_all_read.lua")),
            repair: Script::new(include_str!("../lua/repair.lua")),
            zset_claim: Script::new(include_str!("../lua/zset_claim.lua")),
        }
    }
}

/// The four Redis designs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisDesign {
    /// Deltas buffered in a sorted set; the flusher takes them (ZSCORE + ZREM) and then
    /// adds them to the SQL counter: a crash in between loses the delta.
    ZsetBuffer,
    /// Same buffer; the claim moves the delta to a processing hash under a claim id that
    /// the SQL transaction records, so a crash loses nothing and a replay is harmless.
    ZsetBufferDurable,
    /// The mutant of the durable buffer: the same claim, but the SQL add records no claim
    /// id, so replaying a claim whose add had committed (a crash after the commit,
    /// before the processing entry is deleted) applies its delta twice.
    ZsetBufferReplay,
    /// Unread state and counter in Redis, every check-and-change one Lua script.
    LuaScript,
    /// SQL conditional UPDATE decides, INCRBY/DECRBY on the user's key follows.
    RedisCounter,
}

impl RedisDesign {
    /// Designs that buffer deltas and flush them to SQL.
    pub fn buffered(self) -> bool {
        matches!(self, RedisDesign::ZsetBuffer | RedisDesign::ZsetBufferDurable | RedisDesign::ZsetBufferReplay)
    }
}

/// Tunables of the Redis strategies, from the scenario's `[redis]` table.
#[derive(Clone, Copy, Debug)]
pub struct RedisConfig {
    pub n_users: u64,
    pub flush_interval: Duration,
    /// Users taken per flush pass (a bound on the flusher's work per tick).
    pub flush_batch: u32,
    /// None: no reconciler.
    pub reconcile_interval: Option<Duration>,
}

#[derive(Default)]
struct Figures {
    flushes: AtomicU64,
    deltas_flushed_abs: AtomicU64,
    flusher_crashes: AtomicU64,
    /// Claims the replay mutant applied before a crash and will apply again.
    double_claims: AtomicU64,
    lost_replies: AtomicU64,
    lost_claims: AtomicU64,
    lost_delta_abs: AtomicU64,
    recovered_claims: AtomicU64,
    replayed_claims_skipped: AtomicU64,
    reconcile_passes: AtomicU64,
    repairs: AtomicU64,
    repair_standdowns: AtomicU64,
    /// Milliseconds from the last data loss to the first reconcile pass that found every
    /// user consistent; -1 until then.
    heal_ms: AtomicI64,
}

struct Shared {
    info: StrategyInfo,
    design: RedisDesign,
    db: Db,
    space: RedisSpace,
    scripts: Scripts,
    cfg: RedisConfig,
    sql: Sql,
    stop: AtomicBool,
    crashes_armed: AtomicU32,
    /// Replies still to lose (`redis_timeout`): the command runs, the reply is dropped.
    replies_to_lose: AtomicU32,
    /// Claim ids come from here, not from a Redis counter that a data loss would reset
    /// (and reissue ids that `flush_claims` already holds).
    next_claim: AtomicI64,
    /// Wakes the background loops when settle stops them.
    stop_notify: tokio::sync::Notify,
    data_loss_at: Mutex<Option<Instant>>,
    figures: Figures,
}

#[derive(Clone, Copy)]
struct Sql {
    insert: &'static str,
    set_read: &'static str,
    set_read_if_unread: &'static str,
    delete_unread: &'static str,
    delete_any: &'static str,
    mark_all_rows: &'static str,
    counter_read: &'static str,
    counter_add: &'static str,
    claim_record: &'static str,
    counters_all: &'static str,
    truth_all: &'static str,
    user_rows: &'static str,
}

pub struct RedisStrategy {
    shared: Arc<Shared>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

fn parse_delta(v: &str) -> i64 {
    v.parse::<f64>().map(|f| f.round() as i64).unwrap_or(0)
}

impl RedisStrategy {
    pub fn new(info: StrategyInfo, design: RedisDesign, db: Db, space: RedisSpace, cfg: RedisConfig) -> RedisStrategy {
        let f = common(db.dialect());
        let s = |n| statement(f, n);
        let sql = Sql {
            insert: s("insert_notification"),
            set_read: s("set_read"),
            set_read_if_unread: s("set_read_if_unread"),
            delete_unread: s("delete_unread"),
            delete_any: s("delete_any"),
            mark_all_rows: s("mark_all_rows"),
            counter_read: s("counter_read"),
            counter_add: s("counter_add"),
            claim_record: s("claim_record"),
            counters_all: s("counters_all"),
            truth_all: s("truth_all"),
            user_rows: s("user_rows"),
        };
        let shared = Shared {
            info,
            design,
            db,
            space,
            scripts: Scripts::load(),
            cfg,
            sql,
            stop: AtomicBool::new(false),
            crashes_armed: AtomicU32::new(0),
            replies_to_lose: AtomicU32::new(0),
            next_claim: AtomicI64::new(1),
            stop_notify: tokio::sync::Notify::new(),
            data_loss_at: Mutex::new(None),
            figures: Figures { heal_ms: AtomicI64::new(-1), ..Figures::default() },
        };
        RedisStrategy { shared: Arc::new(shared), tasks: Mutex::new(Vec::new()) }
    }

    /// Loads the Redis side of the seeded data (see `SeedSpec`): counters, and for
    /// lua-script the per-user unread state. Buffered designs start with empty buffers.
    pub async fn seed(&self, n_users: u64, per_user: u64, read_per_user: u64) -> Result<(), OpError> {
        let sh = &self.shared;
        if sh.design.buffered() {
            return Ok(());
        }
        let mut conn = sh.space.conn();
        let unread = (per_user - read_per_user) as i64;
        let mut pipe = redis::pipe();
        let mut queued = 0;
        for user in 1..=n_users as i64 {
            pipe.set(sh.space.user_key(user, "unread"), unread).ignore();
            if sh.design == RedisDesign::LuaScript && per_user > 0 {
                let first = (user - 1) * per_user as i64 + 1;
                let items: Vec<(i64, &str)> = (0..per_user as i64)
                    .map(|j| (first + j, if (j as u64) < read_per_user { "1" } else { "0" }))
                    .collect();
                pipe.hset_multiple(sh.space.user_key(user, "state"), &items).ignore();
            }
            queued += 1;
            if queued == 500 {
                pipe.query_async::<()>(&mut conn).await.map_err(classify_redis)?;
                pipe = redis::pipe();
                queued = 0;
            }
        }
        if queued > 0 {
            pipe.query_async::<()>(&mut conn).await.map_err(classify_redis)?;
        }
        Ok(())
    }

    /// The buffered designs' hot path alone (`ZINCRBY pending delta user`), exposed for
    /// the redis-benchmark comparison in `benches/redis_zincrby.rs`.
    pub async fn buffer_delta(&self, user: UserId, delta: i64) -> Result<(), OpError> {
        self.shared.buffer(user, delta).await
    }

    fn guarded(&self) -> bool {
        self.shared.cfg.reconcile_interval.is_some()
            && matches!(self.shared.design, RedisDesign::LuaScript | RedisDesign::RedisCounter)
    }
}

impl Shared {
    fn k(&self, user: UserId, what: &str) -> String {
        self.space.user_key(user, what)
    }

    async fn guard_begin(&self, user: UserId, on: bool) -> Result<(), OpError> {
        if on {
            let mut c = self.space.conn();
            self.scripts
                .guard_begin
                .key(self.k(user, "inflight"))
                .key(self.k(user, "seq"))
                .invoke_async::<i64>(&mut c)
                .await
                .map_err(classify_redis)?;
        }
        Ok(())
    }

    async fn guard_end(&self, user: UserId, on: bool) {
        if on {
            let mut c = self.space.conn();
            // Best effort: a lost DECR leaves the user "in flight", which only makes the
            // reconciler stand down for that user, never repair it wrongly.
            let _ = self.scripts.guard_end.key(self.k(user, "inflight")).invoke_async::<i64>(&mut c).await;
        }
    }

    /// Runs one of lua-script's per-user scripts (keys: unread, state, inflight).
    async fn user_script<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        user: UserId,
        args: &[String],
    ) -> Result<T, OpError> {
        let mut c = self.space.conn();
        let mut inv = script.prepare_invoke();
        inv.key(self.k(user, "unread")).key(self.k(user, "state")).key(self.k(user, "inflight"));
        for a in args {
            inv.arg(a);
        }
        inv.invoke_async(&mut c).await.map_err(classify_redis)
    }

    /// An op's SQL step; on failure the reconciler guard is released before returning.
    async fn sql_step<T>(
        &self,
        user: UserId,
        guarded: bool,
        step: impl Future<Output = Result<T, OpError>>,
    ) -> Result<T, OpError> {
        let r = step.await;
        if r.is_err() {
            self.guard_end(user, guarded).await;
        }
        r
    }

    /// The Redis step of the SQL-decided designs: counter or buffer moves by `delta`.
    async fn apply_delta(&self, user: UserId, delta: i64, guarded: bool) -> Result<(), OpError> {
        match self.design {
            RedisDesign::RedisCounter => self.counter_apply(user, delta, guarded).await,
            _ => self.buffer(user, delta).await,
        }
    }

    /// Fault point "after the Redis command ran, before its reply arrived": when a
    /// `redis_timeout` is armed, the command has run and the caller gets an unknown.
    fn lose_reply(&self) -> Result<(), OpError> {
        if self.replies_to_lose.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
            self.figures.lost_replies.fetch_add(1, Ordering::Relaxed);
            return Err(OpError::new(
                ErrorClass::Timeout,
                Outcome::Unknown,
                "redis: reply lost after the command ran (injected)",
            ));
        }
        Ok(())
    }

    /// redis-counter's Redis step: counter += delta, leaving the guard in the same script.
    async fn counter_apply(&self, user: UserId, delta: i64, guarded: bool) -> Result<(), OpError> {
        if delta == 0 {
            self.guard_end(user, guarded).await;
            return Ok(());
        }
        let mut c = self.space.conn();
        self.scripts
            .counter_apply
            .key(self.k(user, "unread"))
            .key(self.k(user, "inflight"))
            .arg(delta)
            .arg(if guarded { "1" } else { "0" })
            .invoke_async::<i64>(&mut c)
            .await
            .map_err(classify_redis)?;
        self.lose_reply()
    }

    async fn buffer(&self, user: UserId, delta: i64) -> Result<(), OpError> {
        if delta != 0 {
            let mut c = self.space.conn();
            c.zincr::<_, _, _, f64>(self.space.buf_key("pending"), user, delta).await.map_err(classify_redis)?;
            return self.lose_reply();
        }
        Ok(())
    }

    async fn get_i64(&self, key: String) -> Result<Option<i64>, OpError> {
        let mut c = self.space.conn();
        let v: Option<String> = c.get(key).await.map_err(classify_redis)?;
        Ok(v.map(|s| parse_delta(&s)))
    }

    /// One write-back of one user's claimed delta, idempotent through the claim id.
    /// The replay mutant records nothing and always applies.
    async fn apply_claim(&self, user: UserId, claim: i64, delta: i64) -> Result<bool, OpError> {
        let mut tx = self.db.begin(Begin::Plain).await?;
        let fresh =
            self.design == RedisDesign::ZsetBufferReplay || tx.exec(self.sql.claim_record, &[claim]).await? == 1;
        if fresh {
            tx.exec(self.sql.counter_add, &[delta, user]).await?;
        }
        tx.commit().await?;
        let mut c = self.space.conn();
        c.hdel::<_, _, ()>(self.space.buf_key("processing"), user).await.map_err(classify_redis)?;
        Ok(fresh)
    }

    /// Replays claims left in the processing hash by a crashed flusher.
    async fn recover(&self) -> Result<(), OpError> {
        let mut c = self.space.conn();
        let open: HashMap<i64, String> = c.hgetall(self.space.buf_key("processing")).await.map_err(classify_redis)?;
        for (user, entry) in open {
            let Some((claim, delta)) = entry.split_once(':') else { continue };
            let fresh = self.apply_claim(user, claim.parse().unwrap_or(0), parse_delta(delta)).await?;
            if fresh {
                self.figures.recovered_claims.fetch_add(1, Ordering::Relaxed);
            } else {
                self.figures.replayed_claims_skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// One flush pass over at most `flush_batch` users. `may_crash`: honour armed crashes.
    async fn flush_pass(&self, may_crash: bool) -> Result<(), OpError> {
        if matches!(self.design, RedisDesign::ZsetBufferDurable | RedisDesign::ZsetBufferReplay) {
            self.recover().await?;
        }
        let mut c = self.space.conn();
        let users: Vec<i64> = c
            .zrange(self.space.buf_key("pending"), 0, self.cfg.flush_batch as isize - 1)
            .await
            .map_err(classify_redis)?;
        for user in users {
            let crash = may_crash
                && self.crashes_armed.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok();
            match self.design {
                RedisDesign::ZsetBuffer => {
                    // The seed design: ZSCORE + ZREM in MULTI/EXEC.
                    let pending = self.space.buf_key("pending");
                    let (d, _): (Option<String>, i64) = redis::pipe()
                        .atomic()
                        .zscore(&pending, user)
                        .zrem(&pending, user)
                        .query_async(&mut c)
                        .await
                        .map_err(classify_redis)?;
                    let Some(d) = d.map(|d| parse_delta(&d)) else { continue };
                    if crash {
                        // Fault point "flusher after claim, before DB write": the delta
                        // has left Redis and dies with the flusher.
                        self.figures.flusher_crashes.fetch_add(1, Ordering::Relaxed);
                        self.figures.lost_claims.fetch_add(1, Ordering::Relaxed);
                        self.figures.lost_delta_abs.fetch_add(d.unsigned_abs(), Ordering::Relaxed);
                        return Ok(());
                    }
                    let mut tx = self.db.begin(Begin::Plain).await?;
                    let applied = async {
                        tx.exec(self.sql.counter_add, &[d, user]).await?;
                        tx.commit().await
                    }
                    .await;
                    if let Err(e) = applied {
                        // The seed design has nowhere to put it back: the delta is lost.
                        self.figures.lost_claims.fetch_add(1, Ordering::Relaxed);
                        self.figures.lost_delta_abs.fetch_add(d.unsigned_abs(), Ordering::Relaxed);
                        return Err(e);
                    }
                    self.figures.flushes.fetch_add(1, Ordering::Relaxed);
                    self.figures.deltas_flushed_abs.fetch_add(d.unsigned_abs(), Ordering::Relaxed);
                }
                RedisDesign::ZsetBufferDurable | RedisDesign::ZsetBufferReplay => {
                    let claimed: Option<String> = self
                        .scripts
                        .zset_claim
                        .key(self.space.buf_key("pending"))
                        .key(self.space.buf_key("processing"))
                        .arg(user)
                        .arg(self.next_claim.fetch_add(1, Ordering::Relaxed))
                        .invoke_async(&mut c)
                        .await
                        .map_err(classify_redis)?;
                    let Some((claim, d)) = claimed.as_deref().and_then(|e| e.split_once(':')) else { continue };
                    let (claim, d) = (claim.parse().unwrap_or(0), parse_delta(d));
                    if crash && self.design == RedisDesign::ZsetBufferReplay {
                        // The mutant's fault point is later: after the SQL add committed,
                        // before the processing entry is deleted. The restarted flusher
                        // replays the entry and, recording no claim id, adds it again.
                        let mut tx = self.db.begin(Begin::Plain).await?;
                        tx.exec(self.sql.counter_add, &[d, user]).await?;
                        tx.commit().await?;
                        self.figures.flusher_crashes.fetch_add(1, Ordering::Relaxed);
                        self.figures.double_claims.fetch_add(1, Ordering::Relaxed);
                        return Ok(());
                    }
                    if crash {
                        // Same fault point: the claim stays in the processing hash and the
                        // restarted flusher replays it.
                        self.figures.flusher_crashes.fetch_add(1, Ordering::Relaxed);
                        return Ok(());
                    }
                    self.apply_claim(user, claim, d).await?;
                    self.figures.flushes.fetch_add(1, Ordering::Relaxed);
                    self.figures.deltas_flushed_abs.fetch_add(d.unsigned_abs(), Ordering::Relaxed);
                }
                _ => unreachable!("only buffered designs flush"),
            }
        }
        Ok(())
    }

    async fn buffers_empty(&self) -> Result<bool, OpError> {
        let mut c = self.space.conn();
        let pending: u64 = c.zcard(self.space.buf_key("pending")).await.map_err(classify_redis)?;
        let processing: u64 = c.hlen(self.space.buf_key("processing")).await.map_err(classify_redis)?;
        Ok(pending == 0 && processing == 0)
    }

    /// One reconcile pass: per user, read the guard, then the SQL truth, then repair only
    /// if no op was in flight or started in between (the repair script re-checks).
    /// `quiescent`: the load has stopped, so the guard is not needed (and is reset).
    async fn reconcile_pass(&self, quiescent: bool) -> Result<(), OpError> {
        self.figures.reconcile_passes.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let n = self.cfg.n_users as i64;
        let mut c = self.space.conn();
        let mut guards: Vec<(String, i64, Option<i64>)> = Vec::with_capacity(n as usize);
        for chunk in (1..=n).collect::<Vec<_>>().chunks(500) {
            let mut pipe = redis::pipe();
            for u in chunk {
                pipe.get(self.k(*u, "seq")).get(self.k(*u, "inflight")).get(self.k(*u, "unread"));
            }
            let vals: Vec<Option<String>> = pipe.query_async(&mut c).await.map_err(classify_redis)?;
            for v in vals.chunks(3) {
                guards.push((
                    v[0].clone().unwrap_or_else(|| "0".into()),
                    v[1].as_deref().map_or(0, parse_delta),
                    v[2].as_deref().map(parse_delta),
                ));
            }
        }
        let truth: HashMap<i64, i64> = self.db.rows::<(i64, i64)>(self.sql.truth_all, &[]).await?.into_iter().collect();
        let (mut wrong, mut stood_down) = (0u64, 0u64);
        for (i, (seq, inflight, counter)) in guards.into_iter().enumerate() {
            let user = i as i64 + 1;
            let t = truth.get(&user).copied().unwrap_or(0);
            if counter == Some(t) {
                continue;
            }
            wrong += 1;
            if inflight != 0 && !quiescent {
                stood_down += 1;
                continue;
            }
            let lua = self.design == RedisDesign::LuaScript;
            let mut inv = self.scripts.repair.prepare_invoke();
            inv.key(self.k(user, "unread"))
                .key(self.k(user, "seq"))
                .key(self.k(user, "inflight"))
                .key(self.k(user, "state"));
            inv.arg(&seq).arg(t).arg(if lua { "1" } else { "0" }).arg(if quiescent { "1" } else { "0" });
            if lua {
                for (id, read) in self.db.rows::<(i64, bool)>(self.sql.user_rows, &[user]).await? {
                    inv.arg(id).arg(if read { "1" } else { "0" });
                }
            }
            let done: i64 = inv.invoke_async(&mut c).await.map_err(classify_redis)?;
            if done == 1 {
                self.figures.repairs.fetch_add(1, Ordering::Relaxed);
            } else {
                stood_down += 1;
            }
        }
        self.figures.repair_standdowns.fetch_add(stood_down, Ordering::Relaxed);
        if wrong == 0 {
            let mut at = self.data_loss_at.lock().unwrap_or_else(|e| e.into_inner());
            // Only a pass that began after the loss can say the loss is healed.
            if let Some(t0) = at.filter(|t0| started > *t0) {
                self.figures.heal_ms.store(started.duration_since(t0).as_millis() as i64, Ordering::Relaxed);
                *at = None;
            }
        }
        Ok(())
    }
}

/// An error after a script already changed Redis: the op is half applied, so its
/// outcome is unknown (never a retryable fail: a retry would see Redis already changed
/// and report no transition, leaving the counter off for good).
fn half_applied(e: OpError) -> OpError {
    OpError::new(e.class, Outcome::Unknown, format!("after the script changed Redis: {}", e.message))
}

fn other(msg: String) -> OpError {
    OpError::new(ErrorClass::Other, Outcome::Fail, msg)
}

#[async_trait]
impl Strategy for RedisStrategy {
    fn info(&self) -> StrategyInfo {
        self.shared.info
    }

    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        let sh = &self.shared;
        let g = self.guarded();
        sh.guard_begin(user, g).await?;
        let id = sh
            .sql_step(user, g, async {
                let mut tx = sh.db.begin(Begin::Plain).await?;
                let id = tx.insert_id(sh.sql.insert, &[user]).await?;
                tx.commit().await?;
                Ok(id)
            })
            .await?;
        if sh.design == RedisDesign::LuaScript {
            let flag = if g { "1" } else { "0" };
            sh.user_script::<i64>(&sh.scripts.lua_create, user, &[id.to_string(), flag.into()]).await?;
        } else {
            sh.apply_delta(user, 1, g).await?;
        }
        Ok(id)
    }

    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let sh = &self.shared;
        let g = self.guarded();
        sh.guard_begin(user, g).await?;
        if sh.design == RedisDesign::LuaScript {
            // Redis decides; the SQL row follows; the guard ends only after the SQL write
            // so the reconciler never reads a truth this op is about to change.
            let r = async {
                let changed: i64 =
                    sh.user_script(&sh.scripts.lua_mark_read, user, &[id.to_string(), "0".into()]).await?;
                if changed == 1 {
                    let mut tx = sh.db.begin(Begin::Plain).await.map_err(half_applied)?;
                    tx.exec(sh.sql.set_read, &[id, user]).await.map_err(half_applied)?;
                    tx.commit().await.map_err(half_applied)?;
                }
                Ok(changed == 1)
            }
            .await;
            sh.guard_end(user, g).await;
            return r;
        }
        let changed = sh
            .sql_step(user, g, async {
                let mut tx = sh.db.begin(Begin::Plain).await?;
                let n = tx.exec(sh.sql.set_read_if_unread, &[id, user]).await?;
                tx.commit().await?;
                Ok(n == 1)
            })
            .await?;
        sh.apply_delta(user, if changed { -1 } else { 0 }, g).await?;
        Ok(changed)
    }

    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let sh = &self.shared;
        let g = self.guarded();
        sh.guard_begin(user, g).await?;
        if sh.design == RedisDesign::LuaScript {
            let r = async {
                let was: i64 = sh.user_script(&sh.scripts.lua_delete, user, &[id.to_string(), "0".into()]).await?;
                if was >= 0 {
                    let mut tx = sh.db.begin(Begin::Plain).await.map_err(half_applied)?;
                    tx.exec(sh.sql.delete_any, &[id, user]).await.map_err(half_applied)?;
                    tx.commit().await.map_err(half_applied)?;
                }
                Ok(was >= 0)
            }
            .await;
            sh.guard_end(user, g).await;
            return r;
        }
        let (deleted, was_unread) = sh
            .sql_step(user, g, async {
                let mut tx = sh.db.begin(Begin::Plain).await?;
                let r = if tx.exec(sh.sql.delete_unread, &[id, user]).await? == 1 {
                    (true, true)
                } else {
                    (tx.exec(sh.sql.delete_any, &[id, user]).await? == 1, false)
                };
                tx.commit().await?;
                Ok(r)
            })
            .await?;
        sh.apply_delta(user, if was_unread { -1 } else { 0 }, g).await?;
        Ok(deleted)
    }

    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        let sh = &self.shared;
        let g = self.guarded();
        sh.guard_begin(user, g).await?;
        if sh.design == RedisDesign::LuaScript {
            let r = async {
                let ids: Vec<i64> = sh.user_script(&sh.scripts.lua_mark_all_read, user, &["0".into()]).await?;
                if !ids.is_empty() {
                    let mut tx = sh.db.begin(Begin::Plain).await.map_err(half_applied)?;
                    for id in &ids {
                        tx.exec(sh.sql.set_read, &[*id, user]).await.map_err(half_applied)?;
                    }
                    tx.commit().await.map_err(half_applied)?;
                }
                Ok(ids.len() as u64)
            }
            .await;
            sh.guard_end(user, g).await;
            return r;
        }
        let n = sh
            .sql_step(user, g, async {
                let mut tx = sh.db.begin(Begin::Plain).await?;
                let n = tx.exec(sh.sql.mark_all_rows, &[user]).await?;
                tx.commit().await?;
                Ok(n)
            })
            .await?;
        sh.apply_delta(user, -(n as i64), g).await?;
        Ok(n)
    }

    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        let sh = &self.shared;
        match sh.design {
            RedisDesign::LuaScript | RedisDesign::RedisCounter => {
                Ok(sh.get_i64(sh.k(user, "unread")).await?.unwrap_or(0))
            }
            RedisDesign::ZsetBuffer | RedisDesign::ZsetBufferDurable | RedisDesign::ZsetBufferReplay => {
                let base = sh.db.opt_i64(sh.sql.counter_read, &[user]).await?.unwrap_or(0);
                let mut c = sh.space.conn();
                let pending: Option<f64> = c.zscore(sh.space.buf_key("pending"), user).await.map_err(classify_redis)?;
                let claimed: Option<String> =
                    c.hget(sh.space.buf_key("processing"), user).await.map_err(classify_redis)?;
                let claimed = claimed.as_deref().and_then(|e| e.split_once(':')).map_or(0, |(_, d)| parse_delta(d));
                Ok(base + pending.map_or(0, |p| p.round() as i64) + claimed)
            }
        }
    }

    async fn start(&self) {
        let sh = self.shared.clone();
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        if sh.design.buffered() {
            let s = sh.clone();
            tasks.push(tokio::spawn(async move {
                while !s.stop.load(Ordering::Relaxed) {
                    tokio::select! {
                        _ = tokio::time::sleep(s.cfg.flush_interval) => {}
                        _ = s.stop_notify.notified() => break,
                    }
                    // An error ends this pass only; the next tick tries again.
                    let _ = s.flush_pass(true).await;
                }
            }));
        }
        if let (Some(every), true) = (sh.cfg.reconcile_interval, self.guarded()) {
            let s = sh.clone();
            tasks.push(tokio::spawn(async move {
                while !s.stop.load(Ordering::Relaxed) {
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {}
                        _ = s.stop_notify.notified() => break,
                    }
                    let _ = s.reconcile_pass(false).await;
                }
            }));
        }
    }

    async fn settle(&self, bound: Duration) -> Result<(), OpError> {
        let sh = &self.shared;
        let deadline = Instant::now() + bound;
        sh.stop.store(true, Ordering::Relaxed);
        sh.stop_notify.notify_waiters();
        let tasks: Vec<_> = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for mut t in tasks {
            // Each loop ends after its current pass; past the bound it is cut off.
            if tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), &mut t).await.is_err() {
                t.abort();
                return Err(other(format!("background tasks still running after {} ms", bound.as_millis())));
            }
        }
        if sh.design.buffered() {
            loop {
                sh.flush_pass(false).await?;
                if sh.buffers_empty().await? {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(other(format!("buffers not drained within {} ms", bound.as_millis())));
                }
            }
        }
        if self.guarded() {
            // Quiescent now: one pass repairs whatever stood down during the load (guards
            // knocked off by a data loss included), a second confirms and times the heal.
            sh.reconcile_pass(true).await?;
            sh.reconcile_pass(true).await?;
        }
        Ok(())
    }

    async fn counters(&self, n_users: u64) -> Result<Option<Vec<Option<i64>>>, OpError> {
        let sh = &self.shared;
        match sh.design {
            RedisDesign::LuaScript | RedisDesign::RedisCounter => {
                let mut c = sh.space.conn();
                let mut out = Vec::with_capacity(n_users as usize);
                for chunk in (1..=n_users as i64).collect::<Vec<_>>().chunks(1000) {
                    let mut pipe = redis::pipe();
                    for u in chunk {
                        pipe.get(sh.k(*u, "unread"));
                    }
                    let vals: Vec<Option<String>> = pipe.query_async(&mut c).await.map_err(classify_redis)?;
                    out.extend(vals.into_iter().map(|v| v.map(|s| parse_delta(&s))));
                }
                Ok(Some(out))
            }
            RedisDesign::ZsetBuffer | RedisDesign::ZsetBufferDurable | RedisDesign::ZsetBufferReplay => {
                // Conservation: SQL counter + pending + claimed-but-unapplied, per user.
                let mut out: Vec<Option<i64>> = vec![None; n_users as usize];
                for (u, v) in sh.db.rows::<(i64, i64)>(sh.sql.counters_all, &[]).await? {
                    if u >= 1 && u as u64 <= n_users {
                        out[(u - 1) as usize] = Some(v);
                    }
                }
                let mut c = sh.space.conn();
                let pending: Vec<(i64, f64)> =
                    c.zrange_withscores(sh.space.buf_key("pending"), 0, -1).await.map_err(classify_redis)?;
                let claimed: HashMap<i64, String> =
                    c.hgetall(sh.space.buf_key("processing")).await.map_err(classify_redis)?;
                let extra = pending.into_iter().map(|(u, d)| (u, d.round() as i64)).chain(
                    claimed.into_iter().filter_map(|(u, e)| e.split_once(':').map(|(_, d)| (u, parse_delta(d)))),
                );
                for (u, d) in extra {
                    if u >= 1 && u as u64 <= n_users {
                        let slot = &mut out[(u - 1) as usize];
                        *slot = Some(slot.unwrap_or(0) + d);
                    }
                }
                Ok(Some(out))
            }
        }
    }

    async fn inject(&self, fault: Fault) -> Result<String, OpError> {
        let sh = &self.shared;
        match fault {
            Fault::RedisDataLoss => {
                let n = sh.space.delete_all().await?;
                *sh.data_loss_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                Ok(format!("deleted {n} keys under {}", sh.space.prefix()))
            }
            Fault::RedisDisconnect => {
                let n = sh.space.kill_connections().await?;
                Ok(format!("killed {n} of the run's Redis connections (CLIENT KILL ID); they reconnect"))
            }
            Fault::RedisTimeout if sh.design != RedisDesign::LuaScript => {
                sh.replies_to_lose.fetch_add(1, Ordering::Relaxed);
                Ok("the next Redis write runs but its reply is lost: outcome unknown".into())
            }
            Fault::FlusherCrash if sh.design.buffered() => {
                sh.crashes_armed.fetch_add(1, Ordering::Relaxed);
                Ok(if sh.design == RedisDesign::ZsetBufferReplay {
                    "the flusher will die after its next SQL commit, before clearing the claim, and restart".into()
                } else {
                    "the flusher will die after its next claim, before the SQL commit, and restart".into()
                })
            }
            _ => Err(other(format!("{} has no {} fault point", sh.info.name, fault.name()))),
        }
    }

    /// Buffered designs: users with a pending delta plus claims not yet applied.
    async fn pending(&self) -> Option<i64> {
        let sh = &self.shared;
        if !sh.design.buffered() {
            return None;
        }
        let mut c = sh.space.conn();
        let pending: u64 = c.zcard(sh.space.buf_key("pending")).await.ok()?;
        let processing: u64 = c.hlen(sh.space.buf_key("processing")).await.ok()?;
        Some((pending + processing) as i64)
    }

    fn figures(&self) -> Vec<(&'static str, f64)> {
        let f = &self.shared.figures;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let mut v = Vec::new();
        if self.shared.design.buffered() {
            v.extend([
                ("flushes", g(&f.flushes)),
                ("deltas_flushed_abs", g(&f.deltas_flushed_abs)),
                ("flusher_crashes", g(&f.flusher_crashes)),
                ("lost_replies", g(&f.lost_replies)),
                ("lost_flush_claims", g(&f.lost_claims)),
                ("lost_flush_delta_abs", g(&f.lost_delta_abs)),
                ("double_flush_claims", g(&f.double_claims)),
                ("recovered_claims", g(&f.recovered_claims)),
                ("replayed_claims_skipped", g(&f.replayed_claims_skipped)),
            ]);
        }
        if self.shared.design == RedisDesign::RedisCounter {
            v.push(("lost_replies", g(&f.lost_replies)));
        }
        if self.guarded() {
            v.extend([
                ("reconcile_passes", g(&f.reconcile_passes)),
                ("repairs", g(&f.repairs)),
                ("repair_standdowns", g(&f.repair_standdowns)),
                ("heal_ms", f.heal_ms.load(Ordering::Relaxed) as f64),
            ]);
        }
        v
    }

    async fn teardown(&self) -> Result<(), OpError> {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner())) {
            t.abort();
        }
        self.shared.space.delete_all().await?;
        self.shared.space.release().await
    }
}
