//! Dedicated Redis connections for commands whose state lives on the connection (WATCH
//! before MULTI/EXEC): a bounded pool of plain connections, each held by one op at a
//! time and never shared or silently reconnected, so a WATCH cannot leak into another
//! op's transaction or vanish under a reconnect.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The pool: at most `size` connections exist at once (the semaphore's permits), idle
/// ones kept for reuse, and the server's `CLIENT ID` of every open one.
pub(super) struct Dedicated {
    client: redis::Client,
    config: AsyncConnectionConfig,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<(MultiplexedConnection, i64)>>,
    ids: Mutex<BTreeSet<i64>>,
}

impl Dedicated {
    /// Connections of `client` (the namespace's identity), at most `size` at once.
    pub(super) fn new(client: redis::Client, timeout: Duration, size: u32) -> Dedicated {
        let config =
            AsyncConnectionConfig::new().set_response_timeout(Some(timeout)).set_connection_timeout(Some(timeout));
        Dedicated {
            client,
            config,
            permits: Arc::new(Semaphore::new(size.max(1) as usize)),
            idle: Mutex::new(Vec::new()),
            ids: Mutex::new(BTreeSet::new()),
        }
    }

    /// Server ids of the open connections (for `redis_disconnect`).
    pub(super) fn client_ids(&self) -> Vec<i64> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect()
    }

    /// A connection for this caller alone: waits for a permit (the driver's op timeout
    /// bounds the wait), then takes an idle connection or opens one.
    pub(super) async fn take(self: &Arc<Self>) -> Result<DedicatedLease, redis::RedisError> {
        let permit = self.permits.clone().acquire_owned().await.expect("the semaphore is never closed");
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let (conn, id) = match idle {
            Some(c) => c,
            None => {
                let mut conn = self.client.get_multiplexed_async_connection_with_config(&self.config).await?;
                let id: i64 = redis::cmd("CLIENT").arg("ID").query_async(&mut conn).await?;
                self.ids.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
                (conn, id)
            }
        };
        Ok(DedicatedLease { conn: Some((conn, id)), pool: self.clone(), _permit: permit })
    }
}

/// One op's dedicated connection. `clean` puts it back for reuse; dropped otherwise
/// (an error, or the op cut off mid-transaction), it is closed, never reused.
pub(crate) struct DedicatedLease {
    conn: Option<(MultiplexedConnection, i64)>,
    pool: Arc<Dedicated>,
    _permit: OwnedSemaphorePermit,
}

impl DedicatedLease {
    pub(crate) fn conn(&mut self) -> &mut MultiplexedConnection {
        &mut self.conn.as_mut().expect("leased").0
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
        if let Some((_, id)) = self.conn.take() {
            self.pool.ids.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
        }
    }
}
