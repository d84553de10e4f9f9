//! The broker designs (mq-consumer, mq-consumer-idempotent): each op commits its
//! notification change in SQL and publishes the counter delta to a RabbitMQ queue named
//! under the run's namespace (`<namespace>.deltas`); a consumer task applies the deltas to
//! the SQL counter table with manual acks.
//!
//! This file holds the broker (`AmqpServer`: preflight, queue per namespace, leftover
//! removal) and one run's queue and channels (`MqSpace`); the designs' state is in
//! `shared.rs`, the consumer loop in `consumer.rs`, the `Strategy` ops in `ops.rs`.
//! The broker is used with the configured account: AMQP 0-9-1 cannot create users (that
//! needs the management API), and only these built-ins talk to it.

mod consumer;
mod ops;
mod shared;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use counterlab_core::{ErrorClass, OpError, Outcome};
use lapin::message::BasicGetMessage;
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, Consumer};

use crate::error::{BackendError, check_url, redact_url};

pub use shared::{MqDesign, MqStrategy};

/// The local RabbitMQ used when nothing else is configured (the default vhost `/`).
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// A queue nobody consumes from for this long is deleted by the broker itself
/// (`x-expires`): the safety net for a run killed before its teardown.
pub const QUEUE_EXPIRES_MS: i32 = 600_000;

/// Upper bound on a run's publishing channels.
pub const MAX_PUBLISH_CHANNELS: u32 = 16;

/// The queue of a run namespace.
pub fn queue_name(namespace: &str) -> String {
    format!("{namespace}.deltas")
}

/// Classifies a broker error: a lost connection or channel may have delivered the
/// publish (unknown); anything else the broker refused (fail).
pub fn classify_amqp(e: lapin::Error) -> OpError {
    let (class, outcome) = match e.kind() {
        lapin::ErrorKind::IOError(_) | lapin::ErrorKind::InvalidConnectionState(_) => {
            (ErrorClass::Connection, Outcome::Unknown)
        }
        lapin::ErrorKind::InvalidChannelState(..) => (ErrorClass::Connection, Outcome::Unknown),
        lapin::ErrorKind::ProtocolError(p) if p.get_id() == 403 => (ErrorClass::Permission, Outcome::Fail),
        _ => (ErrorClass::Other, Outcome::Fail),
    };
    OpError::new(class, outcome, format!("amqp: {e}"))
}

fn timed_out(what: &str, t: Duration) -> OpError {
    OpError::new(ErrorClass::Timeout, Outcome::Unknown, format!("amqp: {what}: no answer within {} ms", t.as_millis()))
}

/// Runs a broker call within `t`; past it the outcome is unknown.
async fn within<T>(
    t: Duration,
    what: &str,
    f: impl std::future::Future<Output = lapin::Result<T>>,
) -> Result<T, OpError> {
    tokio::time::timeout(t, f).await.map_err(|_| timed_out(what, t))?.map_err(classify_amqp)
}

/// A reachable AMQP 0-9-1 broker (RabbitMQ).
pub struct AmqpServer {
    url: String,
    location: String,
    timeout: Duration,
}

impl AmqpServer {
    /// Connects once (and closes): the preflight that the broker answers and the account
    /// may log in.
    pub async fn connect(url: &str, timeout: Duration) -> Result<AmqpServer, BackendError> {
        let location = redact_url(url);
        let err = |d: String| BackendError::Connect { backend: "rabbitmq", url: location.clone(), source: d.into() };
        check_url(url, &["amqp", "amqps"], "amqp://user:password@host[:port]/vhost").map_err(err)?;
        let conn = open(url, "counterlab preflight", timeout).await.map_err(|e| err(e.message))?;
        within(timeout, "close", conn.close(200, "preflight done".into())).await.ok();
        Ok(AmqpServer { url: url.to_string(), location, timeout })
    }

    pub fn location(&self) -> &str {
        &self.location
    }

    /// AMQP 0-9-1 does not say the broker's version in a form lapin exposes.
    pub fn version(&self) -> &str {
        "AMQP 0-9-1"
    }

    /// One run's connection: its queue declared (`<namespace>.deltas`, expiring when
    /// unused) and `n_channels` publishing channels in confirm mode.
    pub async fn space(&self, namespace: &str, n_channels: u32) -> Result<MqSpace, BackendError> {
        let queue = queue_name(namespace);
        let err = |e: OpError| BackendError::Step {
            backend: "rabbitmq",
            step: "declare the run's queue",
            namespace: namespace.to_string(),
            source: e.message.into(),
        };
        let conn = Arc::new(open(&self.url, namespace, self.timeout).await.map_err(err)?);
        let space = MqSpace {
            url: self.url.clone(),
            conn,
            queue,
            publish: Arc::new(Vec::new()),
            next: Arc::new(AtomicUsize::new(0)),
            timeout: self.timeout,
        };
        let made = async {
            let ch = within(self.timeout, "open a channel", space.conn.create_channel()).await?;
            let mut args = FieldTable::default();
            args.insert("x-expires".into(), AMQPValue::LongInt(QUEUE_EXPIRES_MS));
            let declare = ch.queue_declare(space.queue.as_str().into(), QueueDeclareOptions::default(), args);
            within(self.timeout, "declare the queue", declare).await?;
            within(self.timeout, "close", ch.close(200, "declared".into())).await.ok();
            let mut publish = Vec::new();
            for _ in 0..n_channels.clamp(1, MAX_PUBLISH_CHANNELS) {
                let ch = within(self.timeout, "open a channel", space.conn.create_channel()).await?;
                within(self.timeout, "confirm.select", ch.confirm_select(ConfirmSelectOptions::default())).await?;
                publish.push(ch);
            }
            Ok(publish)
        }
        .await;
        match made {
            Ok(publish) => Ok(MqSpace { publish: Arc::new(publish), ..space }),
            Err(e) => {
                space.delete().await.ok();
                Err(err(e))
            }
        }
    }

    /// Deletes the queue of a leftover namespace (`counterlab clean`): the broker cannot
    /// list queues over AMQP, so the namespaces found elsewhere name the queues to try.
    /// Returns the messages the queue held (0 also when there was none).
    pub async fn remove(&self, namespace: &str) -> Result<u32, OpError> {
        assert!(crate::leftover::is_namespace_name(namespace), "leftovers come from `leftovers`");
        let conn = open(&self.url, "counterlab clean", self.timeout).await?;
        let deleted = async {
            let ch = within(self.timeout, "open a channel", conn.create_channel()).await?;
            let del = ch.queue_delete(queue_name(namespace).as_str().into(), QueueDeleteOptions::default());
            within(self.timeout, "delete the queue", del).await
        }
        .await;
        within(self.timeout, "close", conn.close(200, "clean done".into())).await.ok();
        deleted
    }

    /// Whether the queue of `namespace` exists (a passive declare on a connection of its
    /// own): tests check a run left none behind.
    pub async fn queue_exists(&self, namespace: &str) -> Result<bool, OpError> {
        let conn = open(&self.url, "counterlab check", self.timeout).await?;
        let ch = within(self.timeout, "open a channel", conn.create_channel()).await;
        let q = match ch {
            Ok(ch) => within(self.timeout, "passive declare", passive(&ch, &queue_name(namespace))).await,
            Err(e) => Err(e),
        };
        within(self.timeout, "close", conn.close(200, "checked".into())).await.ok();
        match q {
            Ok(_) => Ok(true),
            Err(e) if e.message.contains("NOT_FOUND") => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// A passive declare: the queue's counts, or a 404 (which closes the channel).
fn passive(ch: &Channel, queue: &str) -> impl std::future::Future<Output = lapin::Result<lapin::Queue>> {
    let opts = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
    ch.queue_declare(queue.into(), opts, FieldTable::default())
}

/// A connection named after the run's namespace (the broker's connection list shows it).
async fn open(url: &str, name: &str, t: Duration) -> Result<Connection, OpError> {
    let props = ConnectionProperties::default().with_connection_name(name.into());
    within(t, "connect", Connection::connect(url, props)).await
}

/// One strategy run's queue and connection.
#[derive(Clone)]
pub struct MqSpace {
    url: String,
    conn: Arc<Connection>,
    queue: String,
    publish: Arc<Vec<Channel>>,
    next: Arc<AtomicUsize>,
    timeout: Duration,
}

impl MqSpace {
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Publishes one message to the run's queue and waits for the broker's confirm.
    pub(crate) async fn publish(&self, payload: &[u8]) -> Result<(), OpError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.publish.len();
        let ch = &self.publish[i];
        let sent = async {
            let opts = BasicPublishOptions::default();
            let confirm = ch.basic_publish("".into(), self.queue.as_str().into(), opts, payload, props()).await?;
            confirm.await
        };
        match within(self.timeout, "publish", sent).await? {
            Confirmation::Ack(_) => Ok(()),
            other => {
                Err(OpError::new(ErrorClass::Other, Outcome::Fail, format!("amqp: publish not confirmed: {other:?}")))
            }
        }
    }

    /// A fresh channel consuming the queue with manual acks, `prefetch` unacked at most.
    pub(crate) async fn consume(&self, tag: &str, prefetch: u16) -> Result<(Channel, Consumer), OpError> {
        let ch = within(self.timeout, "open a channel", self.conn.create_channel()).await?;
        within(self.timeout, "basic.qos", ch.basic_qos(prefetch, BasicQosOptions::default())).await?;
        let opts = BasicConsumeOptions::default();
        let consume = ch.basic_consume(self.queue.as_str().into(), tag.into(), opts, FieldTable::default());
        let consumer = within(self.timeout, "basic.consume", consume).await?;
        Ok((ch, consumer))
    }

    /// A fresh channel to take deliveries one at a time (`get`), manual acks.
    pub(crate) async fn channel(&self) -> Result<Channel, OpError> {
        within(self.timeout, "open a channel", self.conn.create_channel()).await
    }

    /// One `basic.get` on `ch` (manual ack): the next ready message, or None.
    pub(crate) async fn get(&self, ch: &Channel) -> Result<Option<BasicGetMessage>, OpError> {
        let opts = BasicGetOptions { no_ack: false };
        within(self.timeout, "basic.get", ch.basic_get(self.queue.as_str().into(), opts)).await
    }

    /// Closes a channel within the broker timeout: every delivery it holds unacked goes
    /// back to the queue.
    pub(crate) async fn close(&self, ch: &Channel, why: &str) -> Result<(), OpError> {
        within(self.timeout, "close", ch.close(200, why.into())).await
    }

    /// Messages ready in the queue (not counting those delivered and not yet acked), by
    /// a passive declare on a channel of its own.
    pub(crate) async fn depth(&self) -> Result<u32, OpError> {
        let ch = within(self.timeout, "open a channel", self.conn.create_channel()).await?;
        let q = within(self.timeout, "passive declare", passive(&ch, &self.queue)).await;
        within(self.timeout, "close", ch.close(200, "depth read".into())).await.ok();
        Ok(q?.message_count())
    }

    /// Deletes the queue and closes the connection (a new connection when the run's
    /// is gone). Called again it does nothing harmful.
    pub async fn delete(&self) -> Result<(), OpError> {
        let fresh;
        let conn = if self.conn.status().connected() {
            &*self.conn
        } else {
            fresh = open(&self.url, "counterlab teardown", self.timeout).await?;
            &fresh
        };
        let deleted = async {
            let ch = within(self.timeout, "open a channel", conn.create_channel()).await?;
            within(
                self.timeout,
                "delete the queue",
                ch.queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default()),
            )
            .await
        }
        .await;
        within(self.timeout, "close", conn.close(200, "teardown".into())).await.ok();
        deleted.map(|_| ())
    }
}

/// Messages are transient: the queue lives for one run, and a broker restart is not a
/// fault these designs model.
fn props() -> BasicProperties {
    BasicProperties::default()
}

/// Tunables of the broker strategies.
#[derive(Clone, Copy, Debug)]
pub struct MqConfig {
    /// Unacked deliveries the consumer may hold (basic.qos prefetch).
    pub prefetch: u16,
}
