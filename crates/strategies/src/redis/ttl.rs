//! A run's Redis keys expire unless the run is alive: right after seeding, every key under
//! the namespace's prefix gets a deadline `KEY_TTL` ahead, and a refresher task moves it
//! on every `REFRESH_EVERY` until teardown (or until the space's last clone is dropped).
//! So even a SIGKILL'd run's keys go by themselves. The marker key (its own, longer
//! expiry) and keys a design gave an expiry of its own are left alone.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use counterlab_core::{ErrorClass, OpError, Outcome};
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;

use super::{MAX_SCAN_ROUNDS, RedisSpace, classify_redis};

/// How far ahead of each refresher pass a run's keys expire.
pub const KEY_TTL: Duration = Duration::from_secs(3600);

/// How often the refresher moves the deadline on: six chances before a key could expire.
pub const REFRESH_EVERY: Duration = Duration::from_secs(600);

/// Bound on one pass (its SCAN rounds are bounded by `MAX_SCAN_ROUNDS` too).
const PASS_LIMIT: Duration = Duration::from_secs(60);

/// Keys asked of each SCAN round, and so about the most one script call sees (each call
/// blocks Redis for about 1.7 us per key: under a millisecond).
const SCAN_COUNT: usize = 500;

/// Passes of one refresher at most: it ends by itself after the marker key's lifetime.
const MAX_PASSES: u64 = crate::leftover::REDIS_MARKER_TTL_S / REFRESH_EVERY.as_secs();

/// The refresher of one space, shared by the space's clones; dropping the last stops it.
#[derive(Default)]
pub(super) struct Expiry {
    /// Deadlines this run set (unix ms, the server's clock) that keys may still carry.
    deadlines: Arc<Mutex<Vec<i64>>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Expiry {
    fn stop(&self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            t.abort();
        }
    }
}

impl Drop for Expiry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a pass needs, without the space itself (whose clones own the refresher task).
#[derive(Clone)]
struct Pass {
    client: super::target::Target,
    prefix: String,
    deadlines: Arc<Mutex<Vec<i64>>>,
}

impl Pass {
    /// Sets a deadline `ttl` ahead on the run's keys (None: removes the run's deadlines),
    /// within `PASS_LIMIT`; returns how many keys changed.
    async fn run(&self, ttl: Option<Duration>) -> Result<u64, OpError> {
        tokio::time::timeout(PASS_LIMIT, self.scan(ttl)).await.unwrap_or_else(|_| {
            let what = format!("the expiry pass over {}* took over {} s", self.prefix, PASS_LIMIT.as_secs());
            Err(OpError::new(ErrorClass::Timeout, Outcome::Unknown, what))
        })
    }

    async fn scan(&self, ttl: Option<Duration>) -> Result<u64, OpError> {
        let mut nodes = self.client.node_conns(true).await.map_err(classify_redis)?;
        let Some(first) = nodes.first_mut() else { return Ok(0) };
        // One clock for the deadlines: the first primary's (a cluster's nodes share the
        // machine's here; elsewhere they drift by far less than KEY_TTL).
        let (s, us): (i64, i64) = redis::cmd("TIME").query_async(first).await.map_err(classify_redis)?;
        let now_ms = s * 1000 + us / 1000;
        let new = ttl.map_or(0, |t| now_ms + t.as_millis() as i64);
        let ours: Vec<i64> = {
            let mut d = self.deadlines.lock().unwrap_or_else(|e| e.into_inner());
            // Deadlines past are gone with their keys; the new one is recorded before any
            // key gets it, so a pass cut short leaves no key with an unknown deadline.
            d.retain(|t| *t > now_ms);
            let ours = d.clone();
            d.extend((new > 0).then_some(new));
            ours
        };
        let mut changed = 0u64;
        for conn in &mut nodes {
            changed += self.scan_node(conn, new, &ours).await?;
        }
        if new > 0 {
            // Every key of ours now has `new`: the older deadlines are spent.
            self.deadlines.lock().unwrap_or_else(|e| e.into_inner()).retain(|t| *t >= new);
        }
        Ok(changed)
    }

    /// One node's keys: SCAN pages, each page's keys given the deadline by one script
    /// call per hash slot (a script's keys must share a slot on a cluster).
    async fn scan_node(&self, conn: &mut MultiplexedConnection, new: i64, ours: &[i64]) -> Result<u64, OpError> {
        let script = redis::Script::new(include_str!("../../lua/key_expiry.lua"));
        let (pattern, marker) = (format!("{}*", self.prefix), format!("{}meta", self.prefix));
        let (mut cursor, mut changed) = (0u64, 0u64);
        for _ in 0..MAX_SCAN_ROUNDS {
            let (next, keys) = super::scan_page(conn, cursor, &pattern, SCAN_COUNT).await.map_err(classify_redis)?;
            let keys: Vec<&String> = keys.iter().filter(|k| **k != marker).collect();
            for group in super::by_slot(&keys, self.client.is_cluster()) {
                let mut call = script.prepare_invoke();
                call.arg(new).arg(ours);
                for k in group {
                    call.key(*k);
                }
                changed += call.invoke_async::<u64>(conn).await.map_err(classify_redis)?;
            }
            cursor = next;
            if cursor == 0 {
                return Ok(changed);
            }
        }
        let what = format!("SCAN of {pattern} did not finish in {MAX_SCAN_ROUNDS} rounds");
        Err(OpError::new(ErrorClass::Other, Outcome::Fail, what))
    }
}

/// Moves the deadline on every `REFRESH_EVERY`, at most `MAX_PASSES` times; an error ends
/// that pass only (the deadline is an hour away, the next pass tries again).
async fn refresher(pass: Pass) {
    for _ in 0..MAX_PASSES {
        tokio::time::sleep(REFRESH_EVERY).await;
        let _ = pass.run(Some(KEY_TTL)).await;
    }
}

impl RedisSpace {
    fn pass(&self) -> Pass {
        Pass { client: self.client.clone(), prefix: self.prefix.clone(), deadlines: self.expiry.deadlines.clone() }
    }

    /// Right after seeding: every key of the space gets a deadline `KEY_TTL` ahead, and
    /// the refresher starts (keys made later get theirs at its next pass). Returns how
    /// many keys got one; on an error the refresher is started all the same.
    pub async fn keep_alive(&self) -> Result<u64, OpError> {
        let pass = self.pass();
        let first = pass.run(Some(KEY_TTL)).await;
        let task = tokio::spawn(refresher(pass));
        if let Some(old) = self.expiry.task.lock().unwrap_or_else(|e| e.into_inner()).replace(task) {
            old.abort();
        }
        first
    }

    /// One refresher pass now: the keys without an expiry, and those with one this run
    /// set, get a deadline `KEY_TTL` ahead. Returns how many keys changed.
    pub async fn refresh_expiry(&self) -> Result<u64, OpError> {
        self.pass().run(Some(KEY_TTL)).await
    }

    /// Stops the refresher (teardown, whatever happened before it); keys keep their
    /// deadline. Called again it does nothing.
    pub fn stop_refresher(&self) {
        self.expiry.stop();
    }

    /// For `--keep`: stops the refresher and takes this run's deadlines off its keys.
    pub(super) async fn persist_keys(&self) -> Result<u64, OpError> {
        self.stop_refresher();
        self.pass().run(None).await
    }
}
