//! A namespace's Redis memory, capped: what the run's keys hold (SCAN and `MEMORY USAGE`
//! as the configured account), a cap per value and per namespace, and a watcher that,
//! once the namespace is over either, makes every further file-defined Redis step fail
//! at once (a refusal: the strategy's verdict is `FAIL: denied`).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use counterlab_core::{ErrorClass, OpError, Outcome, SeedSpec};
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;

use super::{MAX_SCAN_ROUNDS, RedisSpace, classify_redis, scan_page};

/// The largest value one key of a namespace may hold.
pub const MAX_VALUE_BYTES: u64 = 32 << 20;
/// A namespace's memory: this much whatever its size...
pub const CAP_BASE_BYTES: u64 = 64 << 20;
/// ...plus this per seeded user and per seeded notification (a counter design keeps a
/// few small keys per user and at most a set or hash entry per notification: tens of
/// bytes each).
pub const CAP_USER_BYTES: u64 = 1024;
pub const CAP_ROW_BYTES: u64 = 512;

/// The shortest time between two passes of the watcher; a pass that takes long makes the
/// next wait twice as long (its `MEMORY USAGE` calls take Redis's time, or it waited on
/// a busy Redis).
pub const WATCH_EVERY: Duration = Duration::from_secs(1);
/// Passes of one watcher at most (it is stopped at the load's end well before).
const MAX_PASSES: u64 = 7 * 24 * 3600;
/// Keys asked of each SCAN round.
const SCAN_COUNT: usize = 1000;

/// The cap for a seed of this size.
pub fn namespace_cap(seed: SeedSpec) -> u64 {
    let rows = seed.n_users.saturating_mul(seed.notifications_per_user);
    CAP_BASE_BYTES
        .saturating_add(seed.n_users.saturating_mul(CAP_USER_BYTES))
        .saturating_add(rows.saturating_mul(CAP_ROW_BYTES))
}

/// What a namespace's keys hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryUse {
    pub keys: u64,
    pub bytes: u64,
    /// The largest key (without the namespace's prefix) and its bytes.
    pub largest: Option<(String, u64)>,
}

impl MemoryUse {
    /// Why this is over the caps (None: within both).
    pub fn over(&self, cap: u64) -> Option<String> {
        let (key, size) = self.largest.clone().unwrap_or_default();
        if size > MAX_VALUE_BYTES {
            return Some(format!(
                "Redis key {key} holds {}, over the cap of {} per value",
                mb(size),
                mb(MAX_VALUE_BYTES)
            ));
        }
        (self.bytes > cap).then(|| {
            format!("the namespace's {} Redis keys hold {}, over its cap of {}", self.keys, mb(self.bytes), mb(cap))
        })
    }

    fn add(&mut self, key: &str, bytes: u64) {
        self.keys += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        if self.largest.as_ref().is_none_or(|(_, b)| bytes > *b) {
            self.largest = Some((key.to_string(), bytes));
        }
    }
}

fn mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

/// The watcher of one space, shared by its clones (dropping the last stops it): the
/// first reason it found the space over its cap, and its task.
#[derive(Default)]
pub(super) struct Watch {
    /// Set once (a lock-free read: every file-defined Redis step checks it).
    over: Arc<OnceLock<String>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Watch {
    fn stop(&self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            t.abort();
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Records the first reason found; true when there is one.
fn record(over: &OnceLock<String>, why: Option<String>) -> bool {
    let Some(why) = why else { return false };
    let _ = over.set(why);
    true
}

impl RedisSpace {
    /// What the space's keys hold now, on every primary (bounded by `MAX_SCAN_ROUNDS`).
    pub async fn memory_use(&self) -> Result<MemoryUse, OpError> {
        let mut conns = self.client.node_conns(true).await.map_err(classify_redis)?;
        measure(&mut conns, &self.prefix).await.map_err(classify_redis)
    }

    /// Measures the space every `WATCH_EVERY` (or twice a long pass) until
    /// `stop_memory_watch`, and records the first time it is over `cap`. A pass's error
    /// ends only that pass (the connections are made again at the next).
    pub fn watch_memory(&self, cap: u64) {
        let (client, prefix, over) = (self.client.clone(), self.prefix.clone(), self.memory.over.clone());
        let task = tokio::spawn(async move {
            let mut conns = None;
            for _ in 0..MAX_PASSES {
                let started = Instant::now();
                if conns.is_none() {
                    conns = client.node_conns(true).await.ok();
                }
                if let Some(c) = conns.as_mut() {
                    match measure(c, &prefix).await {
                        Ok(m) if record(&over, m.over(cap)) => return,
                        Ok(_) => {}
                        Err(_) => conns = None,
                    }
                }
                tokio::time::sleep(WATCH_EVERY.max(started.elapsed() * 2)).await;
            }
        });
        *self.memory.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    /// Stops the watcher and measures once more (the load's end); the reason the space
    /// is over its cap, if it ever was.
    pub async fn stop_memory_watch(&self, cap: u64) -> Option<String> {
        self.memory.stop();
        if self.over_cap().is_none()
            && let Ok(m) = self.memory_use().await
        {
            record(&self.memory.over, m.over(cap));
        }
        self.over_cap()
    }

    /// Why the space is over its cap, once a pass found it so.
    pub fn over_cap(&self) -> Option<String> {
        self.memory.over.get().cloned()
    }

    /// The refusal a Redis step gets once the space is over its cap.
    pub fn refuse_over_cap(&self) -> Result<(), OpError> {
        match self.memory.over.get() {
            None => Ok(()),
            Some(why) => Err(OpError::new(ErrorClass::Permission, Outcome::Fail, format!("refused: {why}"))),
        }
    }
}

/// SCAN of `prefix*` on each node, with `MEMORY USAGE` of every key found (one pipeline
/// per round).
async fn measure(conns: &mut [MultiplexedConnection], prefix: &str) -> redis::RedisResult<MemoryUse> {
    let (pattern, mut out) = (format!("{prefix}*"), MemoryUse::default());
    for conn in conns {
        let mut cursor = 0u64;
        for _ in 0..MAX_SCAN_ROUNDS {
            let (next, keys) = scan_page(conn, cursor, &pattern, SCAN_COUNT).await?;
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("MEMORY").arg("USAGE").arg(k);
            }
            // A key gone between SCAN and MEMORY USAGE is nil: 0 bytes.
            let sizes: Vec<Option<u64>> = if keys.is_empty() { Vec::new() } else { pipe.query_async(conn).await? };
            for (k, b) in keys.iter().zip(sizes) {
                out.add(k.strip_prefix(prefix).unwrap_or(k), b.unwrap_or(0));
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_names_the_value_or_the_namespace() {
        let seed = SeedSpec { n_users: 4, notifications_per_user: 10, initial_read_per_user: 0 };
        let cap = namespace_cap(seed);
        assert_eq!(cap, (64 << 20) + 4 * 1024 + 40 * 512);
        let mut m = MemoryUse::default();
        m.add("c:1", 100);
        m.add("z:1", 2000);
        assert_eq!((m.keys, m.bytes, m.largest.clone()), (2, 2100, Some(("z:1".into(), 2000))));
        assert_eq!(m.over(cap), None);
        m.add("big", 40 << 20);
        assert_eq!(m.over(cap).unwrap(), "Redis key big holds 41.9 MB, over the cap of 33.6 MB per value");
        let mut many = MemoryUse::default();
        for i in 0..3 {
            many.add(&format!("v:{i}"), 30 << 20);
        }
        assert_eq!(many.over(cap).unwrap(), "the namespace's 3 Redis keys hold 94.4 MB, over its cap of 67.1 MB");
    }
}
