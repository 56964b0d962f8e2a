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
use seckill_common::config::{AmqpSettings, ConfigError};
use seckill_common::ready::{self, Readiness};
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
    /// None until the first connection (the service starts while the broker is away).
    link: RwLock<Option<Arc<Link>>>,
    reconnecting: Mutex<Option<Instant>>,
    next: AtomicUsize,
    /// Connected, or what it waits for: set by [`Publisher::keep_connected`].
    readiness: Arc<Readiness>,
}

/// The shortest pause between two reconnect attempts from the publishing path, so an outage
/// is not hammered.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);
/// How often [`Publisher::keep_connected`] looks at a live connection: a lost one is opened
/// again within this even when nothing is published.
const LINK_WATCH: Duration = Duration::from_secs(1);

impl Publisher {
    /// Connects and declares `declares` (what this service publishes to); it publishes to
    /// `destinations` only. Fails while the broker is away: for tools and tests; a service
    /// starts with [`Publisher::unconnected`].
    pub async fn connect(
        settings: &AmqpSettings,
        service: &str,
        trust: Arc<Trust>,
        declares: Vec<Declare>,
        destinations: Vec<Destination>,
    ) -> anyhow::Result<Self> {
        let publisher = Self::unconnected(settings, service, trust, declares, destinations)?;
        publisher.reconnect().await?;
        publisher.readiness.set_ready();
        Ok(publisher)
    }

    /// As [`Publisher::connect`], connecting nothing yet: [`Publisher::keep_connected`]
    /// connects in the background, and until then a publish fails as the broker being away
    /// does. An `amqp.url` that cannot be parsed is an error now, naming the key.
    pub fn unconnected(
        settings: &AmqpSettings,
        service: &str,
        trust: Arc<Trust>,
        declares: Vec<Declare>,
        destinations: Vec<Destination>,
    ) -> anyhow::Result<Self> {
        settings
            .url
            .parse::<lapin::uri::AMQPUri>()
            .map_err(|e| ConfigError::at("amqp.url", format!("is not an AMQP URL: {e}")))?;
        Ok(Self {
            settings: settings.clone(),
            trust,
            names: AmqpNames::new(settings.prefix.clone()),
            service: service.to_owned(),
            declares,
            destinations,
            link: RwLock::new(None),
            reconnecting: Mutex::new(None),
            next: AtomicUsize::new(0),
            readiness: Arc::new(Readiness::new("broker", "not connected yet")),
        })
    }

    /// Connects, and connects again whenever the connection is lost, with back-off
    /// (`seckill_common::ready`), keeping [`Publisher::readiness`] saying why it is not
    /// connected. Runs until dropped (the service's stop): spawn it with
    /// `Lifecycle::spawn_start_up(publisher.ready(), ...)`.
    pub async fn keep_connected(self: Arc<Self>) {
        loop {
            ready::keep_trying(
                &self.readiness,
                |e: &PublishError| format!("not connected ({e})"),
                || self.reconnect_if_lost(),
            )
            .await;
            while self.is_connected().await {
                tokio::time::sleep(LINK_WATCH).await;
            }
            self.readiness.set_waiting("not connected (the connection was lost)");
        }
    }

    /// Connected (at least once), or what the publisher still waits for.
    pub fn ready(&self) -> Arc<Readiness> {
        self.readiness.clone()
    }

    pub fn names(&self) -> &AmqpNames {
        &self.names
    }

    pub async fn is_connected(&self) -> bool {
        self.link.read().await.as_ref().is_some_and(|link| link.connection.status().connected())
    }

    /// The broker's line of a service's `/readyz`: connected, or why not (`waiting: not
    /// connected (<the last failure>)`).
    pub async fn readiness(&self) -> Result<(), String> {
        if self.is_connected().await {
            Ok(())
        } else {
            self.readiness.check().and(Err("not connected".to_owned()))
        }
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

    /// The live link, or a new one if the connection dropped or was never made (at most one
    /// attempt per second from the publishing path; [`Publisher::keep_connected`] tries too).
    async fn current_link(&self) -> Result<Arc<Link>, PublishError> {
        if let Some(link) = self.live_link().await {
            return Ok(link);
        }
        let mut last_attempt = self.reconnecting.lock().await;
        if let Some(link) = self.live_link().await {
            return Ok(link);
        }
        if last_attempt.is_some_and(|at| at.elapsed() < RECONNECT_PAUSE) {
            return Err(PublishError::BackingOff);
        }
        self.open_locked(&mut last_attempt).await
    }

    async fn live_link(&self) -> Option<Arc<Link>> {
        self.link.read().await.as_ref().filter(|link| link.connection.status().connected()).cloned()
    }

    /// The live link, or a new one now (no pause): the background connector's try.
    async fn reconnect_if_lost(&self) -> Result<Arc<Link>, PublishError> {
        let mut last_attempt = self.reconnecting.lock().await;
        match self.live_link().await {
            Some(link) => Ok(link),
            None => self.open_locked(&mut last_attempt).await,
        }
    }

    /// A new link, whatever the old one's state.
    async fn reconnect(&self) -> Result<Arc<Link>, PublishError> {
        let mut last_attempt = self.reconnecting.lock().await;
        self.open_locked(&mut last_attempt).await
    }

    /// Opens a link and makes it current; the caller holds `reconnecting`.
    async fn open_locked(&self, last_attempt: &mut Option<Instant>) -> Result<Arc<Link>, PublishError> {
        *last_attempt = Some(Instant::now());
        if self.link.read().await.is_some() {
            tracing::warn!("broker connection lost: reconnecting the publisher");
        }
        let fresh = Arc::new(open_link(&self.settings, &self.names, &self.service, &self.declares).await?);
        *self.link.write().await = Some(fresh.clone());
        tracing::info!("publisher connected");
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
        if let Some(link) = link {
            close_quietly(&link.connection).await;
        }
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
