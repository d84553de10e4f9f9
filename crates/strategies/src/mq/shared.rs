//! What an `MqStrategy` holds: the design, the run's queue, the SQL statements, the
//! consumer's stop signal and the figures (published, applied, redelivered, doubled,
//! skipped, apply lag) that settle and the report read.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use counterlab_core::{ErrorClass, OpError, Outcome, StrategyInfo, UserId};
use hdrhistogram::Histogram;

use super::{MqConfig, MqSpace};
use crate::db::Db;
use crate::sqlfile::{common, statement};

/// Apply lags above this (an hour, in microseconds) are recorded as this.
const MAX_LAG_US: u64 = 3_600_000_000;

/// The two broker designs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MqDesign {
    /// The consumer applies every delivery: a redelivery after a lost ack applies twice.
    Naive,
    /// The consumer records each message id in the apply's transaction and skips ids
    /// already recorded.
    Idempotent,
}

/// What the run reports about the broker side.
#[derive(Default)]
pub(super) struct Figures {
    pub(super) published: AtomicU64,
    pub(super) publish_failures: AtomicU64,
    pub(super) deliveries: AtomicU64,
    pub(super) redelivered: AtomicU64,
    pub(super) consumer_crashes: AtomicU64,
    pub(super) consumer_restarts: AtomicU64,
    /// Applies of a message whose first apply had committed (the naive design).
    pub(super) double_applies: AtomicU64,
    /// Of those, the ones whose delta raised the counter (the rest lowered it).
    pub(super) double_applies_raising: AtomicU64,
    /// Redeliveries the idempotent design recognised and skipped.
    pub(super) duplicates_skipped: AtomicU64,
    pub(super) apply_errors: AtomicU64,
    pub(super) depth_max: AtomicU64,
}

/// The consumer's own record of which message ids it applied and acked (instrumentation,
/// not the design: the naive design reads none of it). Bounded by the messages published.
#[derive(Default)]
pub(super) struct Ledger {
    /// Ids whose publish the broker confirmed.
    pub(super) confirmed: HashSet<i64>,
    pub(super) applied: HashSet<i64>,
    pub(super) acked: HashSet<i64>,
    /// Deliveries the consumer took and has not yet acked or nacked.
    pub(super) in_hand: u64,
}

/// Everything the ops and the consumer task share.
pub(super) struct Shared {
    pub(super) info: StrategyInfo,
    pub(super) design: MqDesign,
    pub(super) db: Db,
    pub(super) space: MqSpace,
    pub(super) cfg: MqConfig,
    pub(super) sql: Sql,
    /// Message ids come from here: unique within the run (the queue is the run's own).
    pub(super) next_id: AtomicI64,
    /// Publish times are microseconds since this instant (one process publishes and
    /// consumes, so one clock measures the lag).
    pub(super) base: Instant,
    pub(super) crashes_armed: AtomicU32,
    pub(super) stop: tokio::sync::watch::Sender<bool>,
    pub(super) ledger: Mutex<Ledger>,
    /// Publish to applied, microseconds (first applies only).
    pub(super) lag: Mutex<Histogram<u64>>,
    pub(super) figures: Figures,
}

/// The SQL statements of the broker designs, from `sql/<dialect>/common.sql`.
#[derive(Clone, Copy)]
pub(super) struct Sql {
    pub(super) insert: &'static str,
    pub(super) set_read_if_unread: &'static str,
    pub(super) delete_unread: &'static str,
    pub(super) delete_any: &'static str,
    pub(super) mark_all_rows: &'static str,
    pub(super) counter_read: &'static str,
    pub(super) counter_add: &'static str,
    pub(super) message_record: &'static str,
}

/// A counter delta on the wire: message id, user, delta, publish time (us since `base`),
/// four little-endian i64s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Message {
    pub(super) id: i64,
    pub(super) user: UserId,
    pub(super) delta: i64,
    pub(super) published_us: i64,
}

impl Message {
    pub(super) fn encode(self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, v) in [self.id, self.user, self.delta, self.published_us].into_iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    pub(super) fn decode(data: &[u8]) -> Option<Message> {
        if data.len() != 32 {
            return None;
        }
        let at = |i: usize| i64::from_le_bytes(data[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Some(Message { id: at(0), user: at(1), delta: at(2), published_us: at(3) })
    }
}

/// A broker design over a namespace's SQL pool and the run's queue.
pub struct MqStrategy {
    pub(super) shared: Arc<Shared>,
    pub(super) task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl MqStrategy {
    pub fn new(info: StrategyInfo, design: MqDesign, db: Db, space: MqSpace, cfg: MqConfig) -> MqStrategy {
        let f = common(db.dialect());
        let s = |n| statement(f, n);
        let sql = Sql {
            insert: s("insert_notification"),
            set_read_if_unread: s("set_read_if_unread"),
            delete_unread: s("delete_unread"),
            delete_any: s("delete_any"),
            mark_all_rows: s("mark_all_rows"),
            counter_read: s("counter_read"),
            counter_add: s("counter_add"),
            message_record: s("message_record"),
        };
        let shared = Shared {
            info,
            design,
            db,
            space,
            cfg,
            sql,
            next_id: AtomicI64::new(1),
            base: Instant::now(),
            crashes_armed: AtomicU32::new(0),
            stop: tokio::sync::watch::channel(false).0,
            ledger: Mutex::new(Ledger::default()),
            lag: Mutex::new(Histogram::new_with_bounds(1, MAX_LAG_US, 3).expect("valid bounds")),
            figures: Figures::default(),
        };
        MqStrategy { shared: Arc::new(shared), task: Mutex::new(None) }
    }
}

impl Shared {
    pub(super) fn now_us(&self) -> i64 {
        self.base.elapsed().as_micros() as i64
    }

    /// The broker step of an op whose SQL change committed: publish the delta (none
    /// when nothing changed). A failed publish leaves the op half applied: unknown.
    pub(super) async fn publish(&self, user: UserId, delta: i64) -> Result<(), OpError> {
        if delta == 0 {
            return Ok(());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let m = Message { id, user, delta, published_us: self.now_us() };
        let label = || format!("basic.publish deltas message {id}: user {user}, delta {delta:+}");
        match crate::gate::step(label, |_| "confirmed".into(), self.space.publish(&m.encode())).await {
            Ok(()) => {
                self.figures.published.fetch_add(1, Ordering::Relaxed);
                self.ledger.lock().unwrap_or_else(|e| e.into_inner()).confirmed.insert(id);
                Ok(())
            }
            Err(e) => {
                self.figures.publish_failures.fetch_add(1, Ordering::Relaxed);
                let msg = format!("after the SQL commit, the delta's publish failed: {}", e.message);
                Err(OpError::new(e.class, Outcome::Unknown, msg))
            }
        }
    }

    /// Whether every message whose publish was confirmed has been acked (by id: a
    /// message whose confirm was lost may be acked too, and must not stand in for
    /// another) and no delivery is in the consumer's hands.
    pub(super) fn all_acked(&self) -> bool {
        let l = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        l.in_hand == 0 && l.confirmed.is_subset(&l.acked)
    }

    /// Published deltas not yet applied (first applies counted).
    pub(super) fn unapplied(&self) -> i64 {
        let applied = self.ledger.lock().unwrap_or_else(|e| e.into_inner()).applied.len() as i64;
        self.figures.published.load(Ordering::Relaxed) as i64 - applied
    }

    /// The queue's ready messages now, also kept as the run's maximum.
    pub(super) async fn sample_depth(&self) -> Result<u64, OpError> {
        let d = self.space.depth().await? as u64;
        self.figures.depth_max.fetch_max(d, Ordering::Relaxed);
        Ok(d)
    }

    /// Apply lag quantile in milliseconds (0 before any apply).
    pub(super) fn lag_ms(&self, q: f64) -> f64 {
        let h = self.lag.lock().unwrap_or_else(|e| e.into_inner());
        if h.is_empty() { 0.0 } else { h.value_at_quantile(q) as f64 / 1000.0 }
    }
}

pub(super) fn other(msg: String) -> OpError {
    OpError::new(ErrorClass::Other, Outcome::Fail, msg)
}

#[cfg(test)]
mod tests {
    use super::Message;

    #[test]
    fn a_message_round_trips() {
        let m = Message { id: 7, user: 42, delta: -3, published_us: 123_456 };
        assert_eq!(Message::decode(&m.encode()), Some(m));
        assert_eq!(Message::decode(b"short"), None);
    }
}
