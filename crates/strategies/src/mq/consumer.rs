//! The consumer task: takes deliveries from the run's queue, applies each delta to the
//! SQL counter in one transaction (the idempotent design records the message id in it),
//! then acks. The `consumer_crash_after_apply` fault point sits between the commit and
//! the ack: the channel closes unacked, the broker redelivers, the consumer restarts.
//! The same apply-then-ack also runs one `basic.get` at a time (`pull_pass`): the
//! explorer's consumer session, each broker call a step of the gate, and settle's drain
//! when no consumer task runs.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use counterlab_core::OpError;
use futures_util::StreamExt;
use lapin::Channel;
use lapin::message::{BasicGetMessage, Delivery};
use lapin::options::{BasicAckOptions, BasicNackOptions};

use super::shared::{Message, MqDesign, Shared, other};
use super::{classify_amqp, within};
use crate::db::Begin;
use crate::gate;

/// Bound on consumer (re)starts in one run: crashes are bounded by the scenario's
/// faults; failed starts wait `RESTART_PAUSE` each.
const MAX_STARTS: u32 = 100_000;
const RESTART_PAUSE: Duration = Duration::from_millis(20);

/// Most deliveries one pull pass takes (a schedule publishes a few).
const MAX_PASS_DELIVERIES: u32 = 64;
/// After a crash in a pull pass, how long the restarted consumer's first get waits for
/// the broker to requeue the delivery the dead channel held (it does so when it sees the
/// channel gone, which the channel's close-ok does not wait for).
const REQUEUE_WAIT: Duration = Duration::from_secs(2);
const REQUEUE_POLL: Duration = Duration::from_millis(2);

/// How one delivery was handled.
enum Handled {
    /// Acked, or nacked back to the queue (an apply that failed, a message not ours).
    Done,
    /// The consumer died at the fault point after message `id`'s apply committed.
    Crashed { id: i64 },
}

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
            let handled = self.handle(delivery, true).await;
            self.ledger.lock().unwrap_or_else(|e| e.into_inner()).in_hand -= 1;
            match handled {
                Ok(Handled::Done) => {}
                Ok(Handled::Crashed { .. }) => break Ok(End::Crashed),
                Err(e) => break Err(e),
            }
        };
        // Closing the channel hands every unacked delivery back to the broker.
        super::within(self.space.timeout, "close", ch.close(200, "consumer done".into())).await.ok();
        end
    }

    /// One delivery: apply, then ack (a gate step). `may_crash`: an armed crash fires.
    async fn handle(&self, d: Delivery, may_crash: bool) -> Result<Handled, OpError> {
        self.figures.deliveries.fetch_add(1, Ordering::Relaxed);
        if d.redelivered {
            self.figures.redelivered.fetch_add(1, Ordering::Relaxed);
        }
        let t = self.space.timeout;
        let Some(m) = Message::decode(&d.data) else {
            // Not ours to apply; counted and dropped.
            self.figures.apply_errors.fetch_add(1, Ordering::Relaxed);
            within(t, "basic.nack", d.acker.nack(BasicNackOptions { requeue: false, ..Default::default() })).await?;
            return Ok(Handled::Done);
        };
        if self.apply(m).await.is_err() {
            // Rolled back (or its commit's outcome is unknown): the broker redelivers.
            self.figures.apply_errors.fetch_add(1, Ordering::Relaxed);
            let nack = within(t, "basic.nack", d.acker.nack(BasicNackOptions { requeue: true, ..Default::default() }));
            gate::step(|| format!("basic.nack message {} (requeue)", m.id), |_| "ok".into(), nack).await?;
            tokio::time::sleep(RESTART_PAUSE).await;
            return Ok(Handled::Done);
        }
        let crash = may_crash
            && !d.redelivered
            && self.crashes_armed.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok();
        if crash {
            // Fault point "after the apply committed, before the ack": the consumer dies
            // and its channel closes with the delivery unacked. Only first deliveries
            // crash, so several armed crashes hit several messages (not one message
            // redelivered again and again).
            self.figures.consumer_crashes.fetch_add(1, Ordering::Relaxed);
            return Ok(Handled::Crashed { id: m.id });
        }
        let ack = within(t, "basic.ack", d.acker.ack(BasicAckOptions::default()));
        gate::step(|| format!("basic.ack message {}", m.id), |_| "ok".into(), ack).await?;
        self.ledger.lock().unwrap_or_else(|e| e.into_inner()).acked.insert(m.id);
        Ok(Handled::Done)
    }

    /// One pass of the consumer taking deliveries one `basic.get` at a time (each a gate
    /// step), each applied then acked as `handle` does, until the queue has none ready:
    /// the explorer's consumer session (`Strategy::background_pass`) and settle's drain
    /// when no consumer task runs. With `may_crash` an armed `consumer_crash_after_apply`
    /// fires once in the pass, at its fault point: the channel closes with the delivery
    /// unacked (a step) and the pass goes on as the restarted consumer, on a new channel
    /// whose first get waits (bounded) for the broker's redelivery. The apply, the ack
    /// and the close are declared independent of the other sessions' steps
    /// (`gate::independent`): no op of these designs reads or writes the counter row, the
    /// message record or a delivery, and a requeued message goes back ahead of any
    /// published after it. Returns the deliveries taken.
    pub(super) async fn pull_pass(&self, may_crash: bool) -> Result<u32, OpError> {
        let mut ch = self.space.channel().await?;
        let (mut taken, mut awaiting, mut crashed) = (0, None, false);
        let r = loop {
            if taken >= MAX_PASS_DELIVERIES {
                break Ok(taken);
            }
            let got = match self.gated_get(&ch, awaiting.take()).await {
                Ok(Some(got)) => got,
                Ok(None) => break Ok(taken),
                Err(e) => break Err(e),
            };
            taken += 1;
            self.ledger.lock().unwrap_or_else(|e| e.into_inner()).in_hand += 1;
            let handled = gate::independent(self.handle(got.delivery, may_crash && !crashed)).await;
            self.ledger.lock().unwrap_or_else(|e| e.into_inner()).in_hand -= 1;
            match handled {
                Ok(Handled::Done) => {}
                Ok(Handled::Crashed { id }) => {
                    crashed = true;
                    match gate::independent(self.crash_channel(&ch, id)).await {
                        Ok(fresh) => ch = fresh,
                        Err(e) => return Err(e),
                    }
                    awaiting = Some(id);
                }
                Err(e) => break Err(e),
            }
        };
        self.space.close(&ch, "pass done").await.ok();
        r
    }

    /// The consumer dies holding message `id` unacked: its channel closes (a gate step)
    /// and the restarted consumer opens a new one.
    async fn crash_channel(&self, ch: &Channel, id: i64) -> Result<Channel, OpError> {
        let label = || format!("channel.close: the consumer dies after message {id}'s apply, before its basic.ack");
        let show = |_: &()| format!("closed; message {id}, unacked, goes back to the queue");
        gate::step(label, show, self.space.close(ch, "consumer crash")).await?;
        self.figures.consumer_restarts.fetch_add(1, Ordering::Relaxed);
        self.space.channel().await
    }

    /// One `basic.get` as a gate step. `awaiting`: the delivery a crash left unacked,
    /// which the broker requeues once it sees the dead channel gone: the get waits for a
    /// message (at most `REQUEUE_WAIT`), so the redelivery comes inside the pass.
    async fn gated_get(&self, ch: &Channel, awaiting: Option<i64>) -> Result<Option<BasicGetMessage>, OpError> {
        let label = || match awaiting {
            None => "basic.get deltas".to_string(),
            Some(id) => format!("basic.get deltas (the restarted consumer; message {id} requeued)"),
        };
        let get = async {
            let deadline = Instant::now() + REQUEUE_WAIT;
            loop {
                let got = self.space.get(ch).await?;
                match (got, awaiting) {
                    (Some(got), _) => return Ok(Some(got)),
                    (None, None) => return Ok(None),
                    (None, Some(id)) if Instant::now() >= deadline => {
                        let ms = REQUEUE_WAIT.as_millis();
                        return Err(other(format!(
                            "amqp: message {id} was not redelivered within {ms} ms of its crash"
                        )));
                    }
                    (None, Some(_)) => tokio::time::sleep(REQUEUE_POLL).await,
                }
            }
        };
        gate::step(label, shown, get).await
    }

    /// Settle's drain when no consumer task runs: pull passes (no crash) until one takes
    /// nothing and every confirmed delta is acked, within `bound`.
    pub(super) async fn drain(&self, bound: Duration) -> Result<(), OpError> {
        let deadline = Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let taken = tokio::time::timeout(left, self.pull_pass(false)).await.unwrap_or(Ok(0))?;
            if taken == 0 && self.all_acked() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let n = self.unapplied();
                return Err(other(format!(
                    "queue not drained within {} ms: {n} deltas not applied",
                    bound.as_millis()
                )));
            }
            if taken == 0 {
                tokio::time::sleep(REQUEUE_POLL).await;
            }
        }
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

/// What a get brought: the message as the scripts show it, or `empty`.
fn shown(got: &Option<BasicGetMessage>) -> String {
    let Some(got) = got else { return "empty".to_string() };
    let again = if got.delivery.redelivered { " (redelivered)" } else { "" };
    match Message::decode(&got.delivery.data) {
        Some(m) => format!("message {}{again}: user {}, delta {:+}", m.id, m.user, m.delta),
        None => format!("a message not ours{again}"),
    }
}
