//! The consumer task: takes deliveries from the run's queue, applies each delta to the
//! SQL counter in one transaction (the idempotent design records the message id in it),
//! then acks. The `consumer_crash_after_apply` fault point sits between the commit and
//! the ack: the channel closes unacked, the broker redelivers, the consumer restarts.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use counterlab_core::OpError;
use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions};

use super::classify_amqp;
use super::shared::{Message, MqDesign, Shared, other};
use crate::db::Begin;

/// Bound on consumer (re)starts in one run: crashes are bounded by the scenario's
/// faults; failed starts wait `RESTART_PAUSE` each.
const MAX_STARTS: u32 = 100_000;
const RESTART_PAUSE: Duration = Duration::from_millis(20);

/// How one consumer channel ended.
enum End {
    /// Told to stop.
    Stopped,
    /// Died at the fault point; a new channel takes over.
    Crashed,
}

impl Shared {
    /// The consumer task: one channel after another until told to stop.
    pub(super) async fn run_consumer(self: Arc<Self>) {
        let mut stop = self.stop.subscribe();
        for round in 0..MAX_STARTS {
            if *stop.borrow() {
                return;
            }
            if round > 0 {
                self.figures.consumer_restarts.fetch_add(1, Ordering::Relaxed);
            }
            match self.consume_channel(round, &mut stop).await {
                Ok(End::Stopped) => return,
                Ok(End::Crashed) => {}
                // The channel or connection failed: wait a little, then a new channel.
                Err(_) => {
                    tokio::select! {
                        _ = tokio::time::sleep(RESTART_PAUSE) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
            }
        }
    }

    /// One consumer channel: deliveries until stopped, crashed or failed.
    async fn consume_channel(&self, round: u32, stop: &mut tokio::sync::watch::Receiver<bool>) -> Result<End, OpError> {
        let (ch, mut consumer) = self.space.consume(&format!("consumer-{round}"), self.cfg.prefetch).await?;
        let end = loop {
            // A delivery already buffered wins over stop: settle stops the consumer only
            // once every confirmed delta is acked, and nothing taken is dropped.
            let next = tokio::select! {
                biased;
                d = consumer.next() => d,
                _ = stop.wait_for(|s| *s) => break Ok(End::Stopped),
            };
            let Some(delivery) = next else { break Err(other("amqp: the consumer's channel closed".into())) };
            let delivery = match delivery {
                Ok(d) => d,
                Err(e) => break Err(classify_amqp(e)),
            };
            self.ledger.lock().unwrap_or_else(|e| e.into_inner()).in_hand += 1;
            let handled = self.handle(delivery).await;
            self.ledger.lock().unwrap_or_else(|e| e.into_inner()).in_hand -= 1;
            match handled {
                Ok(true) => {}
                Ok(false) => break Ok(End::Crashed),
                Err(e) => break Err(e),
            }
        };
        // Closing the channel hands every unacked delivery back to the broker.
        super::within(self.space.timeout, "close", ch.close(200, "consumer done".into())).await.ok();
        end
    }

    /// One delivery: apply, then ack. Ok(false): the consumer crashed after the apply.
    async fn handle(&self, d: Delivery) -> Result<bool, OpError> {
        self.figures.deliveries.fetch_add(1, Ordering::Relaxed);
        if d.redelivered {
            self.figures.redelivered.fetch_add(1, Ordering::Relaxed);
        }
        let Some(m) = Message::decode(&d.data) else {
            // Not ours to apply; counted and dropped.
            self.figures.apply_errors.fetch_add(1, Ordering::Relaxed);
            d.acker.nack(BasicNackOptions { requeue: false, ..Default::default() }).await.map_err(classify_amqp)?;
            return Ok(true);
        };
        if self.apply(m).await.is_err() {
            // Rolled back (or its commit's outcome is unknown): the broker redelivers.
            self.figures.apply_errors.fetch_add(1, Ordering::Relaxed);
            d.acker.nack(BasicNackOptions { requeue: true, ..Default::default() }).await.map_err(classify_amqp)?;
            tokio::time::sleep(RESTART_PAUSE).await;
            return Ok(true);
        }
        let crash = !d.redelivered
            && self.crashes_armed.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok();
        if crash {
            // Fault point "after the apply committed, before the ack": the consumer dies
            // and its channel closes with the delivery unacked. Only first deliveries
            // crash, so several armed crashes hit several messages (not one message
            // redelivered again and again).
            self.figures.consumer_crashes.fetch_add(1, Ordering::Relaxed);
            return Ok(false);
        }
        d.acker.ack(BasicAckOptions::default()).await.map_err(classify_amqp)?;
        self.ledger.lock().unwrap_or_else(|e| e.into_inner()).acked.insert(m.id);
        Ok(true)
    }

    /// Adds the message's delta to the SQL counter in one transaction; the idempotent
    /// design first records the message id there and adds nothing when it was recorded.
    async fn apply(&self, m: Message) -> Result<(), OpError> {
        let mut tx = self.db.begin(Begin::Plain).await?;
        let fresh = self.design == MqDesign::Naive || tx.exec(self.sql.message_record, &[m.id]).await? == 1;
        if fresh {
            tx.exec(self.sql.counter_add, &[m.delta, m.user]).await?;
        }
        tx.commit().await?;
        let lag_us = (self.now_us() - m.published_us).max(0) as u64;
        let first = self.ledger.lock().unwrap_or_else(|e| e.into_inner()).applied.insert(m.id);
        match (fresh, first) {
            (true, true) => {
                self.lag.lock().unwrap_or_else(|e| e.into_inner()).saturating_record(lag_us);
            }
            (true, false) => {
                self.figures.double_applies.fetch_add(1, Ordering::Relaxed);
                if m.delta > 0 {
                    self.figures.double_applies_raising.fetch_add(1, Ordering::Relaxed);
                }
            }
            (false, _) => {
                self.figures.duplicates_skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}
