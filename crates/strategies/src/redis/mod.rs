//! The Redis strategies: counters (or their pending deltas) kept in Redis beside the SQL
//! notification rows, the write-back flusher, the reconciler, and the faults that tell
//! them apart. Scripts are the `.lua` files in `lua/`; every key lives under the run's
//! prefix with a hash tag per user (`cl:<tag>:{u:42}:unread`) or for the buffer
//! (`cl:<tag>:{buf}:pending`), so scripts and MULTI also work on Redis Cluster.
//!
//! This file holds the server, a run's key space and its connection pool (and, in
//! `dedicated.rs`, the pool of unshared connections WATCH needs); the designs are in
//! `designs.rs` (state, shared steps) and `ops.rs` (the `Strategy` ops), with
//! watch-multi's optimistic update in `watch.rs`, redis-hash's shard hashes in
//! `hash.rs`, redis-set's id sets in `set.rs` and cache-aside in `cache.rs`; the
//! background loops in `flusher.rs` and `reconciler.rs`, the keys' expiry in `ttl.rs`;
//! `target.rs` tells one server from a Redis Cluster (`redis+cluster://`), and
//! `failover.rs` fails a cluster's shard over (the `failover` fault).

mod cache;
mod dedicated;
mod designs;
mod failover;
mod flusher;
mod hash;
mod lane;
mod memory;
mod ops;
mod reconciler;
mod scripts;
pub(crate) use scripts::ScriptGuard;
mod set;
mod stats;
mod target;
mod ttl;
mod watch;
mod zset_replica;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use counterlab_core::{ErrorClass, OpError, Outcome, UserId};
use redis::AsyncCommands;

use crate::error::{BackendError, check_url, redact_url};
use crate::sandbox::Identity;
use dedicated::Dedicated;
pub(crate) use dedicated::DedicatedLease;
pub use target::{CLUSTER_SCHEME, slot_of};
use target::{Conn, Target};

pub use cache::CacheAside;
pub use designs::{RedisDesign, RedisStrategy};
pub use memory::{MAX_VALUE_BYTES, MemoryUse, namespace_cap};
pub use ttl::{KEY_TTL, REFRESH_EVERY};
pub use zset_replica::ZsetReplicaReads;

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
    } else if matches!(e.code(), Some("MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN")) {
        // A cluster's slot moved or is being moved (a failover): the command did not run.
        (ErrorClass::Connection, Outcome::Fail)
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
    target: Target,
    location: String,
    version: String,
    /// Ok when each run can get its own ACL user (probed at connect); Err says why not.
    sandbox: Result<(), String>,
}

impl RedisServer {
    pub async fn connect(url: &str, timeout: Duration) -> Result<RedisServer, BackendError> {
        let location = redact_url(url);
        let err =
            |detail: String| BackendError::Connect { backend: "redis", url: location.clone(), source: detail.into() };
        if !url.starts_with(CLUSTER_SCHEME) {
            let schemes = ["redis", "rediss", "redis+unix", "unix"];
            let example = "redis://[user:password@]host[:port][/db] or redis+cluster://host:port[,host:port...]";
            check_url(url, &schemes, example).map_err(err)?;
        }
        let target = Target::open(url, timeout).map_err(err)?;
        let conns = tokio::time::timeout(timeout, target.node_conns(false))
            .await
            .map_err(|_| err(format!("no answer within {} ms", timeout.as_millis())))?
            .map_err(|e| err(if e.is_connection_refusal() { crate::error::REFUSED.into() } else { e.to_string() }))?;
        let mut conn = conns.first().cloned().ok_or_else(|| err("the cluster lists no node".into()))?;
        let info: String =
            redis::cmd("INFO").arg("server").query_async(&mut conn).await.map_err(|e| err(e.to_string()))?;
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let probe = crate::sandbox::probe_name();
        let mut created: Result<(), redis::RedisError> = Ok(());
        for mut c in conns {
            created = redis::cmd("ACL").arg("SETUSER").arg(&probe).arg("off").query_async(&mut c).await;
            if created.is_err() {
                break;
            }
            let _: i64 = redis::cmd("ACL")
                .arg("DELUSER")
                .arg(&probe)
                .query_async(&mut c)
                .await
                .map_err(|e| err(e.to_string()))?;
        }
        let sandbox = match created {
            Ok(()) => Ok(()),
            Err(e) => Err(format!(
                "Redis {version} gave no ACL user to this account (ACL SETUSER: {e}); ACLs need Redis 6+ and the +acl right"
            )),
        };
        Ok(RedisServer { target, location, version, sandbox })
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

    /// Whether this is a Redis Cluster (`redis+cluster://`).
    pub fn is_cluster(&self) -> bool {
        self.target.is_cluster()
    }

    /// The configured account's client on one server (replica reads wait on it for the
    /// replica: WAIT); None on a cluster, where replica reads are not offered.
    pub fn client(&self) -> Option<&redis::Client> {
        match &self.target {
            Target::Single(c) => Some(c),
            _ => None,
        }
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
        self.space_with(namespace, response_timeout, n_conns, None).await
    }

    /// `space` whose ACL user has `login`'s password; with `login.attach` the marker and
    /// the user are not made again (a distributed run's agents log in as the user
    /// `counterlab prepare` made).
    pub async fn space_with(
        &self,
        namespace: &str,
        response_timeout: Duration,
        n_conns: u32,
        login: Option<SpaceLogin<'_>>,
    ) -> Result<RedisSpace, BackendError> {
        let err = |e: redis::RedisError| BackendError::Connect {
            backend: "redis",
            url: self.location.clone(),
            source: e.into(),
        };
        // The marker first (as the configured account): a run killed from here on is
        // found by `counterlab clean`, and the marker itself expires.
        let attach = login.is_some_and(|l| l.attach);
        if !attach {
            let marker = format!("{} ns={namespace}", crate::leftover::Marker::now().text());
            let mut admin = self.target.conn().await.map_err(err)?;
            redis::cmd("SET")
                .arg(format!("{}meta", crate::sandbox::redis_prefix(namespace)))
                .arg(&marker)
                .arg("EX")
                .arg(crate::leftover::REDIS_MARKER_TTL_S)
                .query_async::<()>(&mut admin)
                .await
                .map_err(err)?;
        }
        let password = login.map_or_else(crate::sandbox::random_password, |l| l.password.to_string());
        let (client, identity) = match &self.sandbox {
            Ok(()) => (
                match attach {
                    true => self.target.as_user(namespace, &password).map_err(err)?,
                    false => self.acl_user(namespace, &password).await.map_err(err)?,
                },
                Identity::Own { kind: "ACL user", name: namespace.into(), caveat: None },
            ),
            Err(why) => (self.target.clone(), Identity::Shared { why: why.clone() }),
        };
        let mut space = RedisSpace::bare(self.target.clone(), namespace, identity);
        space.dedicated = Arc::new(Dedicated::new(client.clone(), response_timeout, n_conns.clamp(1, MAX_REDIS_CONNS)));
        let mut conns = Vec::new();
        for _ in 0..n_conns.clamp(1, MAX_REDIS_CONNS) {
            match client.managed(response_timeout).await {
                Ok(c) => conns.push(c),
                Err(e) => {
                    space.release().await.ok();
                    return Err(err(e));
                }
            }
        }
        space.idle = Arc::new(Mutex::new(conns.clone()));
        space.conns = Arc::new(conns);
        space.lanes = lane::Lanes::new(&client, response_timeout).map(Arc::new);
        Ok(space)
    }

    /// Run namespaces with a marker key (`<prefix>meta`, the namespace named in its value) on
    /// this Redis.
    pub async fn leftovers(&self) -> Result<Vec<crate::leftover::Leftover>, BackendError> {
        let err = |e: redis::RedisError| BackendError::Step {
            backend: "redis",
            step: "list leftovers",
            namespace: "cl:*".into(),
            source: e.into(),
        };
        let mut keys: Vec<String> = Vec::new();
        let mut clients = String::new();
        for mut node in self.target.node_conns(false).await.map_err(err)? {
            let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut node).await.map_err(err)?;
            clients.push_str(&list);
            clients.push('\n');
        }
        for mut node in self.target.node_conns(true).await.map_err(err)? {
            let mut cursor: u64 = 0;
            for _ in 0..MAX_SCAN_ROUNDS {
                let (next, batch) = scan_page(&mut node, cursor, MARKER_PATTERN, 1000).await.map_err(err)?;
                keys.extend(batch);
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        let mut conn = self.target.conn().await.map_err(err)?;
        let mut out = Vec::new();
        for key in keys {
            // Another program's key that fits the pattern may be of another type, or not
            // UTF-8: not a marker, skipped; a lost connection still ends the listing.
            let text: Option<String> = match conn.get(&key).await {
                Ok(t) => t,
                Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => return Err(err(e)),
                Err(_) => None,
            };
            if let Some((ns, marker)) = text.and_then(|t| marker_namespace(&key, &t)) {
                let user = format!(" user={ns} ");
                let sessions = clients.lines().filter(|l| l.contains(&user)).count() as u64;
                let what = "keys and ACL user".into();
                out.push(crate::leftover::Leftover { backend: "redis", namespace: ns, marker, what, sessions });
            }
        }
        out.sort_by(|a, b| a.namespace.cmp(&b.namespace));
        Ok(out)
    }

    /// Deletes a leftover's keys (`redis_prefix(namespace)*`) and its ACL user.
    pub async fn remove(&self, l: &crate::leftover::Leftover) -> Result<u64, OpError> {
        assert!(crate::leftover::is_namespace_name(&l.namespace), "leftovers come from `leftovers`");
        let identity = Identity::Own { kind: "ACL user", name: l.namespace.clone(), caveat: None };
        let space = RedisSpace::bare(self.target.clone(), &l.namespace, identity);
        let deleted = space.delete_all().await?;
        if self.sandbox.is_ok() {
            space.release().await?;
        }
        Ok(deleted)
    }

    /// Whether anything of namespace `ns` is on this Redis: its ACL user on a node, or a
    /// key under its prefix (false: a second teardown finds it gone).
    pub async fn space_left(&self, ns: &str) -> Result<bool, BackendError> {
        let err = |e: redis::RedisError| BackendError::Step {
            backend: "redis",
            step: "look for what is left",
            namespace: ns.into(),
            source: e.into(),
        };
        let pattern = format!("{}*", crate::sandbox::redis_prefix(ns));
        for mut node in self.target.node_conns(false).await.map_err(err)? {
            let user: redis::Value =
                redis::cmd("ACL").arg("GETUSER").arg(ns).query_async(&mut node).await.map_err(err)?;
            if user != redis::Value::Nil {
                return Ok(true);
            }
            let mut cursor = 0;
            for _ in 0..MAX_SCAN_ROUNDS {
                let (next, batch) = scan_page(&mut node, cursor, &pattern, 1000).await.map_err(err)?;
                if !batch.is_empty() {
                    return Ok(true);
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(false)
    }

    /// Creates the namespace's ACL user (`sandbox::redis_acl_rules`) on every node (a
    /// cluster keeps ACL users per node) and returns a target that logs in as it.
    async fn acl_user(&self, namespace: &str, password: &str) -> Result<Target, redis::RedisError> {
        let (base, more) =
            crate::sandbox::redis_acl_rules(namespace, password, self.target.selects_db(), self.target.is_cluster());
        for mut admin in self.target.node_conns(false).await? {
            redis::cmd("ACL").arg("SETUSER").arg(namespace).arg(&base).query_async::<()>(&mut admin).await?;
            for rule in &more {
                let set = redis::cmd("ACL").arg("SETUSER").arg(namespace).arg(rule).query_async::<()>(&mut admin).await;
                match set {
                    Err(e) if e.to_string().contains("Unknown command") => {}
                    other => other?,
                }
            }
        }
        self.target.as_user(namespace, password)
    }
}

/// How a space's ACL user logs in (`RedisServer::space_with`).
#[derive(Clone, Copy)]
pub struct SpaceLogin<'a> {
    pub password: &'a str,
    /// The user and the marker exist already: log in only.
    pub attach: bool,
}

/// One SCAN round: the next cursor and up to about `count` keys matching `pattern`.
async fn scan_page(
    conn: &mut redis::aio::MultiplexedConnection,
    cursor: u64,
    pattern: &str,
    count: usize,
) -> redis::RedisResult<(u64, Vec<String>)> {
    redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(count).query_async(conn).await
}

/// Bound on SCAN rounds of 1000 keys (deleting a run's keys, listing markers).
const MAX_SCAN_ROUNDS: u32 = 100_000;

/// The marker keys `clean` looks for: `cl:` and 16 characters (`sandbox::redis_prefix`),
/// then `meta`.
const MARKER_PATTERN: &str = "cl:????????????????:meta";

/// The namespace a marker key names, and its marker: only when the value is a marker
/// (`counterlab host=.. pid=.. started=.. ns=<namespace>`) of a valid namespace name whose
/// own prefix is this key's, so a key of another program, or a marker copied under
/// another prefix, never leads `clean` to a namespace.
fn marker_namespace(key: &str, value: &str) -> Option<(String, crate::leftover::Marker)> {
    let marker = crate::leftover::Marker::parse(value)?;
    let ns = value.split(' ').find_map(|kv| kv.strip_prefix("ns="))?;
    let own = crate::leftover::is_namespace_name(ns) && key == format!("{}meta", crate::sandbox::redis_prefix(ns));
    own.then(|| (ns.to_string(), marker))
}

/// Upper bound on a run's Redis connections.
pub const MAX_REDIS_CONNS: u32 = 64;

/// One strategy run's keys (everything under `prefix`) and its connections.
#[derive(Clone)]
pub struct RedisSpace {
    client: Target,
    /// Unshared connections as the namespace's identity, for WATCH (see `dedicated.rs`).
    dedicated: Arc<Dedicated>,
    conns: Arc<Vec<Conn>>,
    idle: Arc<Mutex<Vec<Conn>>>,
    next: Arc<AtomicUsize>,
    /// Every key's start: `sandbox::redis_prefix(namespace)`.
    prefix: String,
    namespace: String,
    identity: Identity,
    /// The keys' expiry and its refresher (`ttl.rs`).
    expiry: Arc<ttl::Expiry>,
    /// Set while a script of the space was abandoned running (`scripts.rs`).
    abandoned: Arc<std::sync::atomic::AtomicBool>,
    /// The memory watcher and what it found (`memory.rs`).
    memory: Arc<memory::Watch>,
    /// Batched load's own plain connections, where the server allows them (`lane.rs`).
    lanes: Option<Arc<lane::Lanes>>,
}

/// A connection lent to one op, back to the idle list when dropped. Measured on two
/// cores with 8 clients: 79k ZINCRBY/s when each client has a connection to itself,
/// 34k when all share one multiplexed connection, 35k when spread round-robin.
pub struct Lease {
    c: Option<Conn>,
    /// Some when `c` came off the idle list and goes back on it; None for a shared one.
    idle: Option<Arc<Mutex<Vec<Conn>>>>,
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
    /// The space of `namespace` with no connection of its own yet.
    fn bare(client: Target, namespace: &str, identity: Identity) -> RedisSpace {
        RedisSpace {
            dedicated: Arc::new(Dedicated::new(client.clone(), Duration::from_secs(5), 1)),
            client,
            conns: Arc::new(Vec::new()),
            idle: Arc::new(Mutex::new(Vec::new())),
            next: Arc::new(AtomicUsize::new(0)),
            prefix: crate::sandbox::redis_prefix(namespace),
            namespace: namespace.into(),
            identity,
            expiry: Arc::default(),
            abandoned: scripts::flag(),
            memory: Arc::default(),
            lanes: None,
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The namespace's name (its ACL user's name).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Who the space's connections log in as.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// For `--keep`: the keys lose the run's expiry and the marker key becomes a note, so
    /// the kept keys stay and `counterlab clean` leaves them alone.
    pub async fn mark_kept(&self) -> Result<(), OpError> {
        self.persist_keys().await?;
        let mut admin = self.client.conn().await.map_err(classify_redis)?;
        let key = format!("{}meta", self.prefix);
        admin
            .set::<_, _, ()>(key, format!("kept by counterlab --keep ns={}", self.namespace))
            .await
            .map_err(classify_redis)
    }

    /// Drops the space's ACL user on every node (which also closes its connections);
    /// keys stay. Called again it does nothing.
    pub async fn release(&self) -> Result<(), OpError> {
        let Identity::Own { name, .. } = &self.identity else { return Ok(()) };
        if self.abandoned_script() {
            self.end_busy_script().await?;
        }
        for mut admin in self.client.node_conns(false).await.map_err(classify_redis)? {
            redis::cmd("ACL").arg("DELUSER").arg(name).query_async::<i64>(&mut admin).await.map_err(classify_redis)?;
        }
        Ok(())
    }

    fn user_key(&self, user: UserId, what: &str) -> String {
        format!("{}{{u:{user}}}:{what}", self.prefix)
    }

    fn buf_key(&self, what: &str) -> String {
        format!("{}{{buf}}:{what}", self.prefix)
    }

    /// A key shared by a shard of users (redis-hash): `cl:<tag>:{h:<shard>}:<what>`.
    fn shard_key(&self, shard: u64, what: &str) -> String {
        format!("{}{{h:{shard}}}:{what}", self.prefix)
    }

    /// A connection no other op uses while this op holds it (for WATCH ... EXEC; also
    /// file-defined strategies' ops that use WATCH or MULTI), to the node serving `key`.
    pub(crate) async fn dedicated(&self, key: &str) -> Result<DedicatedLease, OpError> {
        self.dedicated.take(key).await.map_err(classify_redis)
    }

    /// Pipelined load (`[workload] redis_pipeline = depth`, above 1): the `in_flight`
    /// ops share one connection per `depth` of them (the space's first ones, round
    /// robin, none lent to one op), so each multiplexed connection carries up to `depth`
    /// commands at once, written together and answered in order; every op still waits
    /// for its own reply. Dedicated connections (WATCH, MULTI) stay one per op.
    pub fn pipelined(mut self, depth: u32, in_flight: u32) -> RedisSpace {
        if depth > 1 {
            let keep = (in_flight.div_ceil(depth) as usize).clamp(1, self.conns.len().max(1));
            self.conns = Arc::new(self.conns[..keep].to_vec());
            self.idle = Arc::new(Mutex::new(Vec::new()));
        }
        self
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

    /// A worker's batch (`redis_batch`): on a lane of its own where the server allows
    /// one and no exploration gates the steps (`lane.rs`), else on a pooled connection.
    pub async fn query_batch(&self, pipe: &redis::Pipeline) -> redis::RedisResult<Vec<redis::Value>> {
        if let Some(lanes) = self.lanes.as_ref().filter(|_| !crate::gate::gated())
            && let Some(replies) = lanes.query(pipe).await
        {
            return replies;
        }
        pipe.query_async(&mut self.conn()).await
    }

    /// How many lanes of their own batches have open now; None: batches take the pooled
    /// connections here (not one server over plain TCP).
    pub fn batch_lanes(&self) -> Option<usize> {
        self.lanes.as_ref().map(|l| l.client_ids().len())
    }

    /// Kills every connection of this space on the server (`CLIENT ID` on each, then
    /// `CLIENT KILL ID` from another): only the run's own clients, never anyone else's.
    /// The connection managers reconnect on their next command; a killed dedicated
    /// connection fails its next command and is replaced.
    pub async fn kill_connections(&self) -> Result<u64, OpError> {
        if self.client.is_cluster() {
            return self.kill_cluster_connections().await;
        }
        let mut ids = self.dedicated.client_ids();
        ids.extend(self.lanes.iter().flat_map(|l| l.client_ids()));
        for c in self.conns.iter() {
            let mut c = c.clone();
            let id: i64 = redis::cmd("CLIENT").arg("ID").query_async(&mut c).await.map_err(classify_redis)?;
            ids.push(id);
        }
        // Kills go out on a connection of their own, so none is sent on a killed one; with
        // the space's own ACL user, an id kills only a client logged in as that user (an
        // id kept from before a server restart may name somebody else's client now).
        let mut admin = self.client.conn().await.map_err(classify_redis)?;
        let mut killed = 0u64;
        for id in ids {
            let mut kill = redis::cmd("CLIENT");
            kill.arg("KILL").arg("ID").arg(id);
            if let Identity::Own { name, .. } = &self.identity {
                kill.arg("USER").arg(name);
            }
            let n: i64 = kill.query_async(&mut admin).await.map_err(classify_redis)?;
            killed += n.max(0) as u64;
        }
        Ok(killed)
    }

    /// On a cluster: kills the connections of the space's ACL user on every node
    /// (`CLIENT KILL USER`); a space without its own user has no such handle.
    async fn kill_cluster_connections(&self) -> Result<u64, OpError> {
        let Identity::Own { name, .. } = &self.identity else {
            let why = "redis_disconnect on a cluster needs the run's own ACL user (CLIENT KILL USER)";
            return Err(OpError::new(ErrorClass::Other, Outcome::Fail, why.to_string()));
        };
        let mut killed = 0u64;
        for mut node in self.client.node_conns(false).await.map_err(classify_redis)? {
            let n: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("USER")
                .arg(name)
                .query_async(&mut node)
                .await
                .map_err(classify_redis)?;
            killed += n.max(0) as u64;
        }
        Ok(killed)
    }

    /// Deletes every key under the prefix (SCAN + UNLINK on every primary, one UNLINK per
    /// hash slot), at most `MAX_SCAN_ROUNDS` rounds of 1000 per node; returns how many
    /// were deleted.
    pub async fn delete_all(&self) -> Result<u64, OpError> {
        // SCAN sees every key on the server, so it runs as the configured account, never
        // as the space's ACL user.
        if self.abandoned_script() {
            self.end_busy_script().await?;
        }
        let pattern = format!("{}*", self.prefix);
        let mut deleted = 0u64;
        for mut conn in self.client.node_conns(true).await.map_err(classify_redis)? {
            deleted += delete_matching(&mut conn, &pattern, self.client.is_cluster()).await?;
        }
        Ok(deleted)
    }
}

/// Keys grouped by hash slot on a cluster (what one multi-key command may take there);
/// on one server, all in one group.
pub(crate) fn by_slot<K: AsRef<str>>(keys: &[K], cluster: bool) -> Vec<Vec<&K>> {
    if !cluster {
        return if keys.is_empty() { Vec::new() } else { vec![keys.iter().collect()] };
    }
    let mut groups: std::collections::BTreeMap<u16, Vec<&K>> = std::collections::BTreeMap::new();
    for k in keys {
        groups.entry(slot_of(k.as_ref())).or_default().push(k);
    }
    groups.into_values().collect()
}

/// SCAN + UNLINK of `pattern` on one node, bounded by `MAX_SCAN_ROUNDS`.
async fn delete_matching(
    conn: &mut redis::aio::MultiplexedConnection,
    pattern: &str,
    cluster: bool,
) -> Result<u64, OpError> {
    let mut cursor: u64 = 0;
    let mut deleted = 0u64;
    for _ in 0..MAX_SCAN_ROUNDS {
        let (next, keys) = scan_page(conn, cursor, pattern, 1000).await.map_err(classify_redis)?;
        for group in by_slot(&keys, cluster) {
            let n: u64 = redis::cmd("UNLINK").arg(&group).query_async(conn).await.map_err(classify_redis)?;
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

/// Tunables of the Redis strategies, from the scenario's `[redis]` table.
#[derive(Clone, Copy, Debug)]
pub struct RedisConfig {
    pub n_users: u64,
    pub flush_interval: Duration,
    /// Users taken per flush pass (a bound on the flusher's work per tick).
    pub flush_batch: u32,
    /// None: no reconciler.
    pub reconcile_interval: Option<Duration>,
    /// cache-aside: the wait before a write's second delete of the cached count.
    pub cache_delay: Duration,
    /// cache-aside: how long a cached count lives.
    pub cache_ttl: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_leads_to_its_own_namespace_only() {
        let ns = "cl_20261206t145301_abcd_lt_rc_redis_counter";
        let key = format!("{}meta", crate::sandbox::redis_prefix(ns));
        let value = format!("counterlab host=h pid=7 started=1 ns={ns}");
        assert_eq!(marker_namespace(&key, &value).map(|(n, m)| (n, m.pid)), Some((ns.to_string(), 7)));
        let other = format!("{}meta", crate::sandbox::redis_prefix("cl_20261206t145301_abcd_lt_rc_other"));
        assert!(marker_namespace(&other, &value).is_none(), "a marker copied under another prefix");
        assert!(marker_namespace(&key, "counterlab host=h pid=7 started=1").is_none(), "no ns= (an older build's)");
        assert!(marker_namespace(&key, "some app's value").is_none());
        let bad = "counterlab host=h pid=7 started=1 ns=cl_X;DROP";
        assert!(marker_namespace(&format!("{}meta", crate::sandbox::redis_prefix("cl_X;DROP")), bad).is_none());
        assert!(key.len() == MARKER_PATTERN.len() && key.starts_with("cl:") && key.ends_with(":meta"), "{key}");
    }
}
