//! Where a run's Redis is: one server (`redis://`) or a Redis Cluster
//! (`redis+cluster://host:port[,host:port...]`). `Target` opens the connections either
//! needs (a routed cluster connection for keyed commands, a plain one per node for
//! SCAN, ACL, CLIENT and WATCH) and reads the cluster's nodes and slot owners from
//! `CLUSTER NODES`.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;

/// Commands of a split pipeline in flight at once on a cluster connection.
const SPLIT_IN_FLIGHT: usize = 32;

/// Times a command the cluster refused without running it (`refused_unrun`) is sent
/// again, and the first and longest waits between (ms, doubling).
const CLUSTER_RESENDS: u32 = 5;
const RESEND_WAIT_MS: (u64, u64) = (50, 1000);

/// The URL scheme that selects a Redis Cluster.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// A Redis server or cluster, logged in as one account.
#[derive(Clone)]
pub(crate) enum Target {
    Single(Box<redis::Client>),
    Cluster(Box<ClusterTarget>),
}

/// A cluster: its seed nodes (`redis://[user:pass@]host:port`) and the client over them.
#[derive(Clone)]
pub(crate) struct ClusterTarget {
    seeds: Vec<String>,
    /// Username and password the nodes are logged in with (None: the URL's, if any).
    login: Option<(String, String)>,
    timeout: Duration,
    client: ClusterClient,
}

/// One node of a cluster as `CLUSTER NODES` lists it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Node {
    pub id: String,
    /// `host:port`
    pub addr: String,
    pub primary: bool,
    /// A replica's primary (its id).
    pub replica_of: Option<String>,
    /// Slot ranges it serves (primaries), inclusive.
    pub slots: Vec<(u16, u16)>,
}

/// A connection lent for commands: a reconnecting one to a server, a cluster connection
/// (routed by key), or a plain one.
#[derive(Clone)]
pub(crate) enum Conn {
    Managed(ConnectionManager),
    Cluster(ClusterConnection),
    Plain(MultiplexedConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        if !crate::gate::gated() {
            return self.raw_command(cmd);
        }
        Box::pin(crate::gate::step(|| cmd_text(cmd), value_text, self.raw_command(cmd)))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        if !crate::gate::gated() {
            return self.raw_commands(cmd, offset, count);
        }
        let label = || {
            let each: Vec<String> = cmd.cmd_iter().map(cmd_text).collect();
            let body = each.join("; ");
            if cmd.is_transaction() { format!("MULTI; {body}; EXEC") } else { body }
        };
        let show = |v: &Vec<redis::Value>| v.iter().map(value_text).collect::<Vec<_>>().join("; ");
        Box::pin(crate::gate::step(label, show, self.raw_commands(cmd, offset, count)))
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Managed(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Plain(c) => c.get_db(),
        }
    }
}

impl Conn {
    fn raw_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Managed(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => Box::pin(cluster_command(c.clone(), cmd)),
            Conn::Plain(c) => c.req_packed_command(cmd),
        }
    }

    fn raw_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Managed(c) => c.req_packed_commands(cmd, offset, count),
            // A cluster connection sends a pipeline to one node, so one whose commands
            // span slots (the bulk reads and the seed) goes as separate commands,
            // `SPLIT_IN_FLIGHT` at a time (replies in order; after a failover each may
            // be redirected, and a bound keeps that from becoming a storm); a
            // transaction (MULTI/EXEC) is one slot's by construction.
            Conn::Cluster(c) if !cmd.is_transaction() => {
                use futures_util::{StreamExt, TryStreamExt};
                let c = c.clone();
                let cmds: Vec<redis::Cmd> = cmd.cmd_iter().skip(offset).take(count).cloned().collect();
                Box::pin(async move {
                    let each = futures_util::stream::iter(cmds).map(move |one| {
                        let c = c.clone();
                        async move { cluster_command(c, &one).await }
                    });
                    each.buffered(SPLIT_IN_FLIGHT).try_collect().await
                })
            }
            Conn::Cluster(c) => {
                let c = c.clone();
                Box::pin(async move {
                    let mut wait = RESEND_WAIT_MS.0;
                    for _ in 0..CLUSTER_RESENDS {
                        match c.clone().req_packed_commands(cmd, offset, count).await {
                            Err(e) if refused_unrun(&e) => resend_wait(&mut wait).await,
                            r => return r,
                        }
                    }
                    c.clone().req_packed_commands(cmd, offset, count).await
                })
            }
            Conn::Plain(c) => c.req_packed_commands(cmd, offset, count),
        }
    }
}

/// Whether the cluster answered `e` without running the command, and a re-send can
/// succeed: a redirect or a slot not served now (MOVED, TRYAGAIN, CLUSTERDOWN,
/// MASTERDOWN, LOADING, READONLY on a demoted primary), no connection to the node, or a
/// refused connect. Not ASK: with `retries(0)` redis-rs does not follow it, and the same
/// node answers ASK again, so it fails at once (a slot in migration is not followed:
/// docs/not-built-yet.md). Only these are sent again; a dropped connection or a timeout may have run it and is the caller's
/// unknown outcome.
fn refused_unrun(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind as K, ServerErrorKind as S};
    e.is_connection_refusal()
        || matches!(
            e.kind(),
            K::ClusterConnectionNotFound
                | K::Server(S::Moved | S::TryAgain | S::ClusterDown | S::MasterDown | S::BusyLoading | S::ReadOnly)
        )
}

/// Waits `wait` ms, then doubles it up to the longest wait.
async fn resend_wait(wait: &mut u64) {
    tokio::time::sleep(Duration::from_millis(*wait)).await;
    *wait = (*wait * 2).min(RESEND_WAIT_MS.1);
}

/// One command on a cluster connection. The client itself re-sends nothing (`retries(0)`:
/// redis-rs 1.8 has one retry count for every error kind, and after a dropped connection
/// it would send a write again that may have run, so an op reported ok could apply
/// twice); a command the cluster refused unrun (`refused_unrun`) is sent again here, up
/// to `CLUSTER_RESENDS` times, after the client has refreshed its slot map.
async fn cluster_command(mut c: ClusterConnection, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
    let mut wait = RESEND_WAIT_MS.0;
    for _ in 0..CLUSTER_RESENDS {
        match c.req_packed_command(cmd).await {
            Err(e) if refused_unrun(&e) => resend_wait(&mut wait).await,
            r => return r,
        }
    }
    c.req_packed_command(cmd).await
}

/// A command as redis-cli takes it (a script's body by its SHA, as sent), for the
/// explorer's script.
fn cmd_text(cmd: &redis::Cmd) -> String {
    let words: Vec<String> = cmd
        .args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => {
                let t = String::from_utf8_lossy(b);
                if t.is_empty() || t.contains([' ', '"', '\n']) { format!("{t:?}") } else { t.into_owned() }
            }
            _ => "0".to_string(),
        })
        .collect();
    words.join(" ")
}

/// A reply as redis-cli shows it, on one line.
fn value_text(v: &redis::Value) -> String {
    use redis::Value as V;
    match v {
        V::Nil => "(nil)".into(),
        V::Int(i) => i.to_string(),
        V::BulkString(b) => format!("{:?}", String::from_utf8_lossy(b)),
        V::Array(a) | V::Set(a) => format!("[{}]", a.iter().map(value_text).collect::<Vec<_>>().join(", ")),
        V::SimpleString(s) => s.clone(),
        V::Okay => "OK".into(),
        other => format!("{other:?}"),
    }
}

/// Splits `redis+cluster://[user:pass@]h:p,h:p` into one `redis://` URL per seed node.
pub(crate) fn cluster_seeds(url: &str) -> Result<Vec<String>, String> {
    let rest = url.strip_prefix(CLUSTER_SCHEME).ok_or_else(|| format!("not a {CLUSTER_SCHEME} URL"))?;
    let rest = rest.split(['/', '?', '#']).next().unwrap_or("");
    let (userinfo, hosts) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let mut seeds = Vec::new();
    for host in hosts.split(',') {
        let seed = format!("redis://{userinfo}{host}");
        let parsed = url::Url::parse(&seed).map_err(|e| format!("node `{host}`: {e}"))?;
        if host.is_empty() || parsed.host_str().is_none_or(str::is_empty) || parsed.port().is_none() {
            return Err(format!("node `{host}` is not host:port"));
        }
        seeds.push(seed);
    }
    Ok(seeds)
}

impl ClusterTarget {
    pub(crate) fn new(
        seeds: Vec<String>,
        login: Option<(String, String)>,
        timeout: Duration,
    ) -> redis::RedisResult<Self> {
        let mut b = ClusterClientBuilder::new(seeds.clone())
            .connection_timeout(timeout)
            .response_timeout(timeout)
            // No re-send by the client: see `cluster_command`.
            .retries(0);
        if let Some((user, password)) = &login {
            b = b.username(user).password(password);
        }
        Ok(ClusterTarget { client: b.build()?, seeds, login, timeout })
    }

    /// A plain URL for one node, logged in as this target's account.
    fn node_url(&self, addr: &str) -> redis::RedisResult<redis::Client> {
        let template = redis::Client::open(self.seeds[0].as_str())?;
        let mut info = template.get_connection_info().clone();
        let (host, port) = addr.rsplit_once(':').unwrap_or((addr, "6379"));
        let port: u16 = port.parse().unwrap_or(6379);
        info = info.set_addr(redis::ConnectionAddr::Tcp(host.to_string(), port));
        if let Some((user, password)) = &self.login {
            let settings = info.redis_settings().clone().set_username(user).set_password(password);
            info = info.set_redis_settings(settings);
        }
        redis::Client::open(info)
    }
}

impl Target {
    /// The target named by `url` (`redis://...` or `redis+cluster://...`).
    pub(crate) fn open(url: &str, timeout: Duration) -> Result<Target, String> {
        if url.starts_with(CLUSTER_SCHEME) {
            let seeds = cluster_seeds(url)?;
            ClusterTarget::new(seeds, None, timeout)
                .map(|c| Target::Cluster(Box::new(c)))
                .map_err(|e| format!("invalid URL: {e}"))
        } else {
            redis::Client::open(url).map(|c| Target::Single(Box::new(c))).map_err(|e| format!("invalid URL: {e}"))
        }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Target::Cluster(_))
    }

    /// The same server or cluster, logged in as `user`.
    pub(crate) fn as_user(&self, user: &str, password: &str) -> redis::RedisResult<Target> {
        match self {
            Target::Single(client) => {
                let info = client.get_connection_info().clone();
                let settings = info.redis_settings().clone().set_username(user).set_password(password);
                redis::Client::open(info.set_redis_settings(settings)).map(|c| Target::Single(Box::new(c)))
            }
            Target::Cluster(c) => {
                let login = Some((user.to_string(), password.to_string()));
                ClusterTarget::new(c.seeds.clone(), login, c.timeout).map(|c| Target::Cluster(Box::new(c)))
            }
        }
    }

    /// Whether the one server selects a database other than 0 (a cluster has only 0).
    pub(crate) fn selects_db(&self) -> bool {
        match self {
            Target::Single(c) => c.get_connection_info().redis_settings().db() != 0,
            Target::Cluster(_) => false,
        }
    }

    /// A connection for keyed commands (routed by key on a cluster).
    pub(crate) async fn conn(&self) -> redis::RedisResult<Conn> {
        match self {
            Target::Single(c) => c.get_multiplexed_async_connection().await.map(Conn::Plain),
            Target::Cluster(c) => c.client.get_async_connection().await.map(Conn::Cluster),
        }
    }

    /// A reconnecting connection for one worker's ops.
    pub(crate) async fn managed(&self, response_timeout: Duration) -> redis::RedisResult<Conn> {
        match self {
            Target::Single(c) => {
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_response_timeout(Some(response_timeout))
                    .set_connection_timeout(Some(response_timeout))
                    .set_number_of_retries(3);
                ConnectionManager::new_with_config((**c).clone(), config).await.map(Conn::Managed)
            }
            Target::Cluster(c) => c.client.get_async_connection().await.map(Conn::Cluster),
        }
    }

    /// The cluster's nodes (a server: itself, a primary serving every slot), read from
    /// the first seed that answers; nodes marked failed or without an address are left out.
    pub(crate) async fn nodes(&self) -> redis::RedisResult<Vec<Node>> {
        let Target::Cluster(c) = self else {
            let whole = Node {
                id: String::new(),
                addr: String::new(),
                primary: true,
                replica_of: None,
                slots: vec![(0, 16383)],
            };
            return Ok(vec![whole]);
        };
        let mut last = None;
        for seed in &c.seeds {
            let mut info = redis::Client::open(seed.as_str())?.get_connection_info().clone();
            if let Some((user, password)) = &c.login {
                let settings = info.redis_settings().clone().set_username(user).set_password(password);
                info = info.set_redis_settings(settings);
            }
            let client = redis::Client::open(info)?;
            let conn = tokio::time::timeout(c.timeout, client.get_multiplexed_async_connection()).await;
            let text = match conn {
                Ok(Ok(mut conn)) => redis::cmd("CLUSTER").arg("NODES").query_async::<String>(&mut conn).await,
                Ok(Err(e)) => Err(e),
                Err(_) => Err(redis::RedisError::from((redis::ErrorKind::Io, "no answer", seed.clone()))),
            };
            match text {
                Ok(t) => return Ok(parse_nodes(&t)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| redis::RedisError::from((redis::ErrorKind::Client, "no seed node"))))
    }

    /// A plain connection to each node (`primaries`: only those that say they are one,
    /// by `ROLE`: a seed's view may lag a failover): what SCAN, ACL and CLIENT need,
    /// since a cluster keeps those per node.
    pub(crate) async fn node_conns(&self, primaries: bool) -> redis::RedisResult<Vec<MultiplexedConnection>> {
        match self {
            Target::Single(c) => Ok(vec![c.get_multiplexed_async_connection().await?]),
            Target::Cluster(c) => {
                let mut out = Vec::new();
                for node in self.nodes().await? {
                    let mut conn = c.node_url(&node.addr)?.get_multiplexed_async_connection().await?;
                    if primaries {
                        let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
                        if !matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master") {
                            continue;
                        }
                    }
                    out.push(conn);
                }
                Ok(out)
            }
        }
    }

    /// A plain client for the node at `addr` (a server: itself, whatever `addr`).
    pub(crate) fn node_client(&self, addr: &str) -> redis::RedisResult<redis::Client> {
        match self {
            Target::Single(c) => Ok((**c).clone()),
            Target::Cluster(c) => c.node_url(addr),
        }
    }
}

/// The address of the primary serving `key`'s slot among `nodes`.
pub(crate) fn owner_addr<'a>(nodes: &'a [Node], key: &str) -> Option<&'a str> {
    let slot = slot_of(key);
    nodes.iter().find(|n| n.primary && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))).map(|n| n.addr.as_str())
}

/// The hash slot of `key` (its `{tag}` if it has one), as the cluster computes it.
pub fn slot_of(key: &str) -> u16 {
    let b = key.as_bytes();
    let tag = b.iter().position(|c| *c == b'{').and_then(|open| {
        let close = b[open + 1..].iter().position(|c| *c == b'}')?;
        (close > 0).then(|| &b[open + 1..open + 1 + close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tag.unwrap_or(b)) % 16384
}

/// Parses `CLUSTER NODES`: `<id> <ip:port@cport[,host]> <flags> <primary> <ping> <pong>
/// <epoch> <link> <slot>...`. Slots being moved (`[..]`) are skipped.
pub(crate) fn parse_nodes(text: &str) -> Vec<Node> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let flags: Vec<&str> = f[2].split(',').collect();
        if flags.iter().any(|x| matches!(*x, "fail" | "noaddr" | "handshake")) {
            continue;
        }
        let addr = f[1].split(['@', ',']).next().unwrap_or("").to_string();
        let slots = f[8..]
            .iter()
            .filter(|s| !s.starts_with('['))
            .filter_map(|s| match s.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => s.parse().ok().map(|x| (x, x)),
            })
            .collect();
        let replica_of = (f[3] != "-").then(|| f[3].to_string());
        out.push(Node { id: f[0].to_string(), addr, primary: flags.contains(&"master"), replica_of, slots });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Node, cluster_seeds, parse_nodes, slot_of};

    #[test]
    fn cluster_urls_split_into_seeds() {
        let s = cluster_seeds("redis+cluster://u:p@127.0.0.1:7000,127.0.0.1:7001").unwrap();
        assert_eq!(s, ["redis://u:p@127.0.0.1:7000", "redis://u:p@127.0.0.1:7001"]);
        assert!(cluster_seeds("redis+cluster://127.0.0.1").is_err());
        assert!(cluster_seeds("redis+cluster://127.0.0.1:7000,").is_err());
    }

    #[test]
    fn slots_follow_hash_tags() {
        // Known values: CLUSTER KEYSLOT foo = 12182, {u:1} tags hash only `u:1`.
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("cl:x:{u:1}:unread"), slot_of("other:{u:1}:seq"));
    }

    #[test]
    fn nodes_are_parsed() {
        let text = "a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n\
                    b 127.0.0.1:7003@17003 slave a 0 0 1 connected\n\
                    c 127.0.0.1:7001@17001 master,fail - 0 0 2 disconnected 5461-10922\n";
        let nodes = parse_nodes(text);
        assert_eq!(
            nodes,
            [
                Node {
                    id: "a".into(),
                    addr: "127.0.0.1:7000".into(),
                    primary: true,
                    replica_of: None,
                    slots: vec![(0, 5460)]
                },
                Node {
                    id: "b".into(),
                    addr: "127.0.0.1:7003".into(),
                    primary: false,
                    replica_of: Some("a".into()),
                    slots: vec![]
                },
            ]
        );
    }
}
