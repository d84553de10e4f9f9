//! The `failover` fault on a Redis Cluster: the shard serving user 1's keys fails over
//! while the load runs. Its replica's replication link is cut first for the fault's
//! `cut_ms` (the replica is given a wrong `masterauth`, so it cannot reconnect, and the
//! primary drops its replica links with `CLIENT KILL TYPE replica`): writes the primary
//! acknowledges meanwhile reach it alone, as with a lagging replica. Then
//! `CLUSTER FAILOVER TAKEOVER` on the replica promotes it without the primary's
//! agreement; the old primary learns of it, becomes its replica and resyncs, dropping
//! what only it had. Every wait is bounded; the replica's `masterauth` is restored.

use std::time::{Duration, Instant};

use counterlab_core::{ErrorClass, OpError, Outcome};
use redis::aio::MultiplexedConnection;

use super::target::{Node, owner_addr};
use super::{RedisSpace, classify_redis};

/// Bound on waiting for the roles to change after the takeover.
const ROLES_WITHIN: Duration = Duration::from_secs(10);

fn failed(what: String) -> OpError {
    OpError::new(ErrorClass::Other, Outcome::Fail, what)
}

/// The node's role (`master`, `slave`) as `ROLE` reports it.
async fn role(c: &mut MultiplexedConnection) -> Result<String, OpError> {
    let reply: Vec<redis::Value> = redis::cmd("ROLE").query_async(c).await.map_err(classify_redis)?;
    match reply.first() {
        Some(redis::Value::BulkString(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
        Some(redis::Value::SimpleString(s)) => Ok(s.clone()),
        other => Err(failed(format!("ROLE replied {other:?}"))),
    }
}

/// Whether the replica's link to its primary is up (it has the primary's data, up to
/// the last few writes): a replica still loading its first copy would lose far more.
async fn link_up(replica: &mut MultiplexedConnection) -> Result<bool, OpError> {
    let info: String = redis::cmd("INFO").arg("replication").query_async(replica).await.map_err(classify_redis)?;
    Ok(info.lines().any(|l| l.trim() == "master_link_status:up"))
}

/// Polls until the replica's link is up, within `ROLES_WITHIN`.
async fn await_link(replica: &mut MultiplexedConnection, addr: &str) -> Result<(), OpError> {
    let deadline = Instant::now() + ROLES_WITHIN;
    while !link_up(replica).await? {
        if Instant::now() >= deadline {
            return Err(failed(format!("the replica {addr} did not get in sync within {} s", ROLES_WITHIN.as_secs())));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Polls until `replica` says master and `primary` slave, and every node's view of the
/// cluster agrees (so later lookups see the new primary), within `ROLES_WITHIN`.
async fn await_roles(
    space: &RedisSpace,
    replica: &mut MultiplexedConnection,
    primary: &mut MultiplexedConnection,
    promoted: &str,
) -> Result<(), OpError> {
    let deadline = Instant::now() + ROLES_WITHIN;
    loop {
        if role(replica).await? == "master" && role(primary).await? == "slave" && agreed(space, promoted).await? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(failed(format!("the roles did not swap within {} s", ROLES_WITHIN.as_secs())));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether every node lists `promoted` as a primary.
async fn agreed(space: &RedisSpace, promoted: &str) -> Result<bool, OpError> {
    for addr in space.client.nodes().await.map_err(classify_redis)?.iter().map(|n| n.addr.clone()) {
        let client = space.client.node_client(&addr).map_err(classify_redis)?;
        let mut c = client.get_multiplexed_async_connection().await.map_err(classify_redis)?;
        let text: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut c).await.map_err(classify_redis)?;
        if !super::target::parse_nodes(&text).iter().any(|n| n.addr == promoted && n.primary) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The primary serving `key` and one of its replicas.
fn pick<'a>(nodes: &'a [Node], key: &str) -> Result<(&'a Node, &'a Node), OpError> {
    let addr = owner_addr(nodes, key).ok_or_else(|| failed(format!("no primary serves {key}")))?;
    let primary = nodes.iter().find(|n| n.addr == addr).expect("owner_addr names a listed node");
    let replica = nodes
        .iter()
        .find(|n| n.replica_of.as_deref() == Some(primary.id.as_str()))
        .ok_or_else(|| failed(format!("the primary {addr} has no replica to fail over to")))?;
    Ok((primary, replica))
}

impl RedisSpace {
    /// Fails over the shard serving user 1's keys (see the file's doc); `cut`: how long
    /// its replica is cut off first. Returns what it did.
    pub async fn failover(&self, cut: Duration) -> Result<String, OpError> {
        if !self.client.is_cluster() {
            return Err(failed("failover needs a Redis Cluster (--redis redis+cluster://host:port,...)".into()));
        }
        let started = Instant::now();
        let nodes = self.client.nodes().await.map_err(classify_redis)?;
        let (primary, replica) = pick(&nodes, &self.user_key(1, "unread"))?;
        let connect = |addr: &str| {
            let client = self.client.node_client(addr);
            async move { client?.get_multiplexed_async_connection().await }
        };
        let mut p = connect(&primary.addr).await.map_err(classify_redis)?;
        let mut r = connect(&replica.addr).await.map_err(classify_redis)?;
        await_link(&mut r, &replica.addr).await?;
        let mut cut_links = 0i64;
        let taken = if cut.is_zero() {
            takeover(&mut r).await
        } else {
            let saved: Vec<String> =
                redis::cmd("CONFIG").arg("GET").arg("masterauth").query_async(&mut r).await.map_err(classify_redis)?;
            let saved = saved.get(1).cloned().unwrap_or_default();
            let wrong = crate::sandbox::random_password();
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("masterauth")
                .arg(&wrong)
                .query_async::<()>(&mut r)
                .await
                .map_err(classify_redis)?;
            let cut_then_take = async {
                cut_links = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("replica")
                    .query_async(&mut p)
                    .await
                    .map_err(classify_redis)?;
                tokio::time::sleep(cut).await;
                takeover(&mut r).await
            }
            .await;
            // Restored whatever happened: the replica (now the primary) keeps its setting.
            let restored =
                redis::cmd("CONFIG").arg("SET").arg("masterauth").arg(&saved).query_async::<()>(&mut r).await;
            cut_then_take.and(restored.map_err(classify_redis))
        };
        taken?;
        await_roles(self, &mut r, &mut p, &replica.addr).await?;
        Ok(format!(
            "{} failed over to its replica {} (CLUSTER FAILOVER TAKEOVER after cutting replication for {} ms, {} link(s)); roles swapped in {} ms",
            primary.addr,
            replica.addr,
            cut.as_millis(),
            cut_links,
            started.elapsed().as_millis()
        ))
    }
}

async fn takeover(r: &mut MultiplexedConnection) -> Result<(), OpError> {
    redis::cmd("CLUSTER").arg("FAILOVER").arg("TAKEOVER").query_async::<()>(r).await.map_err(classify_redis)
}
