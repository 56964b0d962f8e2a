//! RabbitMQ: connecting, the topology (declared here and nowhere else), and a publisher that
//! keeps many publisher confirms in flight across a few channels.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lapin::Confirmation;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use seckill_common::amqp::{AmqpNames, dead_queue, retry_queue};
use seckill_common::config::AmqpSettings;
use seckill_common::trust::{Peer, SIGNATURE_HEADER, Trust};
use tokio::sync::{Mutex, RwLock};

/// Opens a connection named after the service (shown by `rabbitmqctl list_connections`).
pub async fn connect(url: &str, service: &str) -> lapin::Result<Connection> {
    let props = ConnectionProperties::default().with_connection_name(service.into());
    Connection::connect(url, props).await
}

/// What a service declares at start and after reconnecting. Declaring is idempotent, so every
/// service declares what it publishes to and consumes from, in any order; the arguments of each
/// queue are set here and nowhere else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Declare {
    /// A queue some service consumes, with its dead-letter and retry queues.
    WorkQueue(String),
    /// The delay queue of new orders (TTL `ttl_secs`), dead-lettering into the expire queue.
    OrderDelay { ttl_secs: u64 },
    /// The fanout exchange of the seckill-service replicas.
    Broadcast,
}

pub async fn declare(
    channel: &Channel,
    names: &AmqpNames,
    settings: &AmqpSettings,
    what: &[Declare],
) -> lapin::Result<()> {
    for d in what {
        match d {
            Declare::WorkQueue(queue) => declare_work_queue(channel, queue, settings).await?,
            Declare::OrderDelay { ttl_secs } => {
                let expire = names.order_expire_queue();
                declare_work_queue(channel, &expire, settings).await?;
                let mut args = base_args(settings);
                args.insert(
                    "x-message-ttl".into(),
                    AMQPValue::LongLongInt(i64::try_from(ttl_secs * 1000).unwrap_or(i64::MAX)),
                );
                dead_letter_to(&mut args, &expire, settings);
                queue(channel, &names.order_delay_queue(*ttl_secs), args).await?;
            }
            Declare::Broadcast => {
                channel
                    .exchange_declare(
                        names.broadcast_exchange().into(),
                        ExchangeKind::Fanout,
                        ExchangeDeclareOptions { durable: true, ..ExchangeDeclareOptions::default() },
                        FieldTable::default(),
                    )
                    .await?;
            }
        }
    }
    Ok(())
}

/// `<queue>` dead-letters what it rejects into `<queue>.dead`; `<queue>.retry.<ms>ms` holds a
/// message for the retry delay, then dead-letters it back into `<queue>`.
async fn declare_work_queue(channel: &Channel, name: &str, settings: &AmqpSettings) -> lapin::Result<()> {
    let dead = dead_queue(name);
    queue(channel, &dead, base_args(settings)).await?;

    let mut retry = base_args(settings);
    retry.insert(
        "x-message-ttl".into(),
        AMQPValue::LongLongInt(i64::try_from(settings.retry_delay_ms).unwrap_or(i64::MAX)),
    );
    dead_letter_to(&mut retry, name, settings);
    queue(channel, &retry_queue(name, settings.retry_delay_ms), retry).await?;

    let mut main = base_args(settings);
    dead_letter_to(&mut main, &dead, settings);
    queue(channel, name, main).await
}

async fn queue(channel: &Channel, name: &str, args: FieldTable) -> lapin::Result<()> {
    let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    channel.queue_declare(name.into(), durable, args).await.map(|_| ())
}

fn base_args(settings: &AmqpSettings) -> FieldTable {
    let mut args = FieldTable::default();
    if settings.quorum_queues {
        args.insert("x-queue-type".into(), AMQPValue::LongString(LongString::from("quorum")));
    }
    args
}

/// Dead letters go through the default exchange straight to `queue`, with the broker's
/// `x-death` record of where they came from. On quorum queues dead-lettering is at-most-once
/// unless asked otherwise; the retry and expiry paths run through it, so ask for at-least-once
/// (which needs `reject-publish` overflow).
fn dead_letter_to(args: &mut FieldTable, queue: &str, settings: &AmqpSettings) {
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString(LongString::from("")));
    args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(LongString::from(queue)));
    if settings.quorum_queues {
        args.insert(
            "x-dead-letter-strategy".into(),
            AMQPValue::LongString(LongString::from("at-least-once")),
        );
        args.insert("x-overflow".into(), AMQPValue::LongString(LongString::from("reject-publish")));
    }
}

/// Where a publisher sends: what a service lists in its `BrokerUse`, and the publisher refuses
/// anything else (so a publish its description misses fails the service's tests, not its
/// broker user's permissions in production).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A queue, through the default exchange (`amq.default` to the broker's permissions).
    Queue(String),
    /// An exchange, with a routing key.
    Exchange { exchange: String, routing_key: String },
}

impl Destination {
    fn is(&self, exchange: &str, routing_key: &str) -> bool {
        match self {
            Self::Queue(queue) => exchange.is_empty() && queue == routing_key,
            Self::Exchange { exchange: e, routing_key: k } => e == exchange && k == routing_key,
        }
    }
}

/// Why a message may not have reached the broker's disk.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// A bug, not an outage: the destination is not in the publisher's list.
    #[error("publishing to exchange {exchange:?} key {routing_key:?} is not declared by this service")]
    Undeclared { exchange: String, routing_key: String },
    #[error("broker unavailable: {0}")]
    Unavailable(#[from] lapin::Error),
    #[error("broker unavailable (reconnecting is backed off)")]
    BackingOff,
    #[error("the broker refused the message (nack)")]
    Nacked,
    #[error("no queue took the message")]
    Unroutable,
    #[error("no confirm within {0:?}")]
    Timeout(Duration),
}

struct Link {
    connection: Connection,
    channels: Vec<Channel>,
}

/// Publishes persistent messages and waits for each one's confirm. Callers publish
/// concurrently: every channel carries many unconfirmed messages at once, which is what makes
/// confirms fast (one at a time they cost a disk flush each).
pub struct Publisher {
    settings: AmqpSettings,
    /// Signs every message with the key of the link to its receiver.
    trust: Arc<Trust>,
    names: AmqpNames,
    service: String,
    declares: Vec<Declare>,
    /// The only destinations `publish_to` takes (one to three: a scan is cheapest).
    destinations: Vec<Destination>,
    link: RwLock<Arc<Link>>,
    reconnecting: Mutex<Option<Instant>>,
    next: AtomicUsize,
}

/// The shortest pause between two reconnect attempts, so an outage is not hammered.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

impl Publisher {
    /// Connects and declares `declares` (what this service publishes to); it publishes to
    /// `destinations` only.
    pub async fn connect(
        settings: &AmqpSettings,
        service: &str,
        trust: Arc<Trust>,
        declares: Vec<Declare>,
        destinations: Vec<Destination>,
    ) -> anyhow::Result<Self> {
        let names = AmqpNames::new(settings.prefix.clone());
        let link = open_link(settings, &names, service, &declares).await?;
        Ok(Self {
            settings: settings.clone(),
            trust,
            names,
            service: service.to_owned(),
            declares,
            destinations,
            link: RwLock::new(Arc::new(link)),
            reconnecting: Mutex::new(None),
            next: AtomicUsize::new(0),
        })
    }

    pub fn names(&self) -> &AmqpNames {
        &self.names
    }

    pub async fn is_connected(&self) -> bool {
        self.link.read().await.connection.status().connected()
    }

    /// The broker's line of a service's `/readyz`.
    pub async fn readiness(&self) -> Result<(), String> {
        if self.is_connected().await { Ok(()) } else { Err("not connected".to_owned()) }
    }

    /// Publishes `body` to `queue` through the default exchange, persistent and mandatory,
    /// signed for `to` (the service that consumes the queue), and returns once the broker
    /// confirmed it (or fails; then the broker may or may not hold it).
    pub async fn publish(
        &self,
        to: Peer,
        queue: &str,
        body: &[u8],
        properties: BasicProperties,
    ) -> Result<(), PublishError> {
        self.publish_to(to, "", queue, body, properties).await
    }

    /// As [`Self::publish`], to an exchange.
    pub async fn publish_to(
        &self,
        to: Peer,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        properties: BasicProperties,
    ) -> Result<(), PublishError> {
        if !self.destinations.iter().any(|d| d.is(exchange, routing_key)) {
            tracing::error!(exchange, routing_key, "publish to a destination this service does not declare");
            return Err(PublishError::Undeclared {
                exchange: exchange.to_owned(),
                routing_key: routing_key.to_owned(),
            });
        }
        let timeout = Duration::from_millis(self.settings.confirm_timeout_ms);
        let link = self.current_link().await?;
        let channel = &link.channels[self.next.fetch_add(1, Ordering::Relaxed) % link.channels.len()];
        let mut headers = properties.headers().clone().unwrap_or_default();
        headers.insert(
            SIGNATURE_HEADER.into(),
            AMQPValue::LongString(LongString::from(self.trust.sign_message(to, body))),
        );
        let properties = properties.with_headers(headers).with_delivery_mode(2);
        let confirmed = tokio::time::timeout(timeout, async {
            let confirm = channel
                .basic_publish(
                    ShortString::from(exchange),
                    ShortString::from(routing_key),
                    BasicPublishOptions { mandatory: true, ..BasicPublishOptions::default() },
                    body,
                    properties,
                )
                .await?;
            confirm.await
        })
        .await
        .map_err(|_| PublishError::Timeout(timeout))??;
        match confirmed {
            Confirmation::Ack(None) => Ok(()),
            Confirmation::Ack(Some(_)) => Err(PublishError::Unroutable),
            Confirmation::Nack(_) => Err(PublishError::Nacked),
            // Confirms are selected on every channel in `open_link`.
            Confirmation::NotRequested => Ok(()),
        }
    }

    /// The live link, or a new one if the connection dropped (at most one attempt per second).
    async fn current_link(&self) -> Result<Arc<Link>, PublishError> {
        {
            let link = self.link.read().await;
            if link.connection.status().connected() {
                return Ok(link.clone());
            }
        }
        let mut last_attempt = self.reconnecting.lock().await;
        let link = self.link.read().await.clone();
        if link.connection.status().connected() {
            return Ok(link);
        }
        if last_attempt.is_some_and(|at| at.elapsed() < RECONNECT_PAUSE) {
            return Err(PublishError::BackingOff);
        }
        *last_attempt = Some(Instant::now());
        tracing::warn!("broker connection lost: reconnecting the publisher");
        let fresh = Arc::new(open_link(&self.settings, &self.names, &self.service, &self.declares).await?);
        *self.link.write().await = fresh.clone();
        tracing::info!("publisher reconnected");
        Ok(fresh)
    }

    /// Messages ready in `queues`, and the consumers of the first, as the broker counts them.
    /// Passive declares, on a channel of their own: a missing queue closes only that channel.
    /// Messages a consumer holds unacknowledged are not counted.
    pub async fn queue_counts(&self, queues: &[String]) -> Result<(u32, u32), PublishError> {
        let link = self.current_link().await?;
        let channel = link.connection.create_channel().await?;
        let (mut ready, mut consumers) = (0, 0);
        for (i, q) in queues.iter().enumerate() {
            let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
            let declared = channel.queue_declare(q.as_str().into(), passive, FieldTable::default()).await?;
            ready += declared.message_count();
            if i == 0 {
                consumers = declared.consumer_count();
            }
        }
        let _ = channel.close(200, "counted".into()).await;
        Ok((ready, consumers))
    }

    pub async fn close(&self) {
        let link = self.link.read().await.clone();
        close_quietly(&link.connection).await;
    }
}

async fn open_link(
    settings: &AmqpSettings,
    names: &AmqpNames,
    service: &str,
    declares: &[Declare],
) -> lapin::Result<Link> {
    let connection = connect(&settings.url, &format!("{}{service}", names.prefix())).await?;
    let mut channels = Vec::with_capacity(settings.publish_channels.max(1));
    for _ in 0..settings.publish_channels.max(1) {
        let channel = connection.create_channel().await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        channels.push(channel);
    }
    declare(&channels[0], names, settings, declares).await?;
    Ok(Link { connection, channels })
}

/// Closes a connection (and its channels) at shutdown, waiting at most two seconds for the
/// broker's answer: a broker that is gone must not hold the shutdown up.
pub async fn close_quietly(connection: &Connection) {
    let closing = connection.close(200, "shutting down".into());
    match tokio::time::timeout(Duration::from_secs(2), closing).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "connection already closed"),
        Err(_) => tracing::warn!("the broker did not answer the close in time"),
    }
}
