//! Dedicated Redis connections for commands whose state lives on the connection (WATCH
//! before MULTI/EXEC): a bounded pool of plain connections, each held by one op at a
//! time and never shared or silently reconnected, so a WATCH cannot leak into another
//! op's transaction or vanish under a reconnect. On a cluster each goes to the primary
//! serving the op's key (from a cached `CLUSTER NODES`, read again after a lease ends
//! dirty: a moved slot shows as MOVED, which the op's bounded retry takes again).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::target::{Conn, Node, Target, owner_addr};

/// An open connection: the node it goes to (`host:port`; empty for one server), the
/// connection and the server's `CLIENT ID` for it.
type Open = (String, Conn, i64);

/// The pool: at most `size` connections exist at once (the semaphore's permits), idle
/// ones kept for reuse, and the server's `CLIENT ID` of every open one.
pub(super) struct Dedicated {
    target: Target,
    config: AsyncConnectionConfig,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<Open>>,
    ids: Mutex<BTreeSet<i64>>,
    /// The cluster's nodes as last read (None: read them at the next take).
    nodes: Mutex<Option<Vec<Node>>>,
    stale: AtomicBool,
}

impl Dedicated {
    /// Connections of `target` (the namespace's identity), at most `size` at once.
    pub(super) fn new(target: Target, timeout: Duration, size: u32) -> Dedicated {
        let config =
            AsyncConnectionConfig::new().set_response_timeout(Some(timeout)).set_connection_timeout(Some(timeout));
        Dedicated {
            target,
            config,
            permits: Arc::new(Semaphore::new(size.max(1) as usize)),
            idle: Mutex::new(Vec::new()),
            ids: Mutex::new(BTreeSet::new()),
            nodes: Mutex::new(None),
            stale: AtomicBool::new(false),
        }
    }

    /// Server ids of the open connections (for `redis_disconnect`).
    pub(super) fn client_ids(&self) -> Vec<i64> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect()
    }

    /// The node serving `key`: empty for one server; on a cluster from the cached nodes.
    async fn node_for(&self, key: &str) -> Result<String, redis::RedisError> {
        if !self.target.is_cluster() {
            return Ok(String::new());
        }
        let cached = self.nodes.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let nodes = match cached {
            Some(n) if !self.stale.swap(false, Ordering::Relaxed) => n,
            _ => {
                let n = self.target.nodes().await?;
                *self.nodes.lock().unwrap_or_else(|e| e.into_inner()) = Some(n.clone());
                n
            }
        };
        owner_addr(&nodes, key).map(str::to_string).ok_or_else(|| {
            self.stale.store(true, Ordering::Relaxed);
            let kind = redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown);
            redis::RedisError::from((kind, "no primary serves the slot of", key.to_string()))
        })
    }

    /// A connection for this caller alone, to the node serving `key`: waits for a permit
    /// (the driver's op timeout bounds the wait), then takes an idle connection to that
    /// node or opens one.
    pub(super) async fn take(self: &Arc<Self>, key: &str) -> Result<DedicatedLease, redis::RedisError> {
        let permit = self.permits.clone().acquire_owned().await.expect("the semaphore is never closed");
        let node = self.node_for(key).await?;
        let idle = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.iter().position(|(n, ..)| *n == node).map(|i| idle.swap_remove(i))
        };
        let open = match idle {
            Some(c) => c,
            None => {
                let client = self.target.node_client(&node)?;
                let mut conn = client.get_multiplexed_async_connection_with_config(&self.config).await?;
                let id: i64 = redis::cmd("CLIENT").arg("ID").query_async(&mut conn).await?;
                self.ids.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
                (node, Conn::Plain(conn), id)
            }
        };
        Ok(DedicatedLease { conn: Some(open), pool: self.clone(), _permit: permit })
    }
}

/// One op's dedicated connection. `clean` puts it back for reuse; dropped otherwise
/// (an error, or the op cut off mid-transaction), it is closed, never reused.
pub(crate) struct DedicatedLease {
    conn: Option<Open>,
    pool: Arc<Dedicated>,
    _permit: OwnedSemaphorePermit,
}

impl DedicatedLease {
    pub(crate) fn conn(&mut self) -> &mut Conn {
        &mut self.conn.as_mut().expect("leased").1
    }

    /// The connection holds no WATCH and no open MULTI: it goes back to the pool.
    pub(crate) fn clean(mut self) {
        if let Some(c) = self.conn.take() {
            self.pool.idle.lock().unwrap_or_else(|e| e.into_inner()).push(c);
        }
    }
}

impl Drop for DedicatedLease {
    fn drop(&mut self) {
        if let Some((_, _, id)) = self.conn.take() {
            self.pool.ids.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            // Ended dirty (an error, perhaps MOVED): read the slot owners again.
            self.pool.stale.store(true, Ordering::Relaxed);
        }
    }
}
