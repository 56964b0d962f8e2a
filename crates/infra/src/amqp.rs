//! RabbitMQ: connecting, the topology (declared here and nowhere else), and a publisher that
//! keeps many publisher confirms in flight across a few channels.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lapin::Confirmation;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use seckill_common::amqp::AmqpNames;
use seckill_common::config::AmqpSettings;
use tokio::sync::{Mutex, RwLock};

/// Opens a connection named after the service (shown by `rabbitmqctl list_connections`).
pub async fn connect(url: &str, service: &str) -> lapin::Result<Connection> {
    let props = ConnectionProperties::default().with_connection_name(service.into());
    Connection::connect(url, props).await
}

/// Declares every queue the services use; idempotent, so each service calls it at start and
/// after reconnecting, in any order. Queues are durable; quorum queues on request (a cluster).
pub async fn declare_topology(
    channel: &Channel,
    names: &AmqpNames,
    settings: &AmqpSettings,
) -> lapin::Result<()> {
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let mut dead = FieldTable::default();
    queue_type(&mut dead, settings);
    channel
        .queue_declare(names.orders_dead_queue().into(), durable, dead)
        .await?;

    let mut orders = FieldTable::default();
    queue_type(&mut orders, settings);
    // What the consumer rejects (undecodable, unknown version, out of tries) goes to the dead
    // letters with the broker's x-death record of where it came from.
    orders.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("")),
    );
    orders.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(LongString::from(names.orders_dead_queue())),
    );
    channel
        .queue_declare(names.orders_queue().into(), durable, orders)
        .await?;
    Ok(())
}

fn queue_type(args: &mut FieldTable, settings: &AmqpSettings) {
    if settings.quorum_queues {
        args.insert(
            "x-queue-type".into(),
            AMQPValue::LongString(LongString::from("quorum")),
        );
    }
}

/// Why a message may not have reached the broker's disk.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
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
    names: AmqpNames,
    service: String,
    link: RwLock<Arc<Link>>,
    reconnecting: Mutex<Option<Instant>>,
    next: AtomicUsize,
}

/// The shortest pause between two reconnect attempts, so an outage is not hammered.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

impl Publisher {
    pub async fn connect(settings: &AmqpSettings, service: &str) -> anyhow::Result<Self> {
        let names = AmqpNames::new(settings.prefix.clone());
        let link = open_link(settings, &names, service).await?;
        Ok(Self {
            settings: settings.clone(),
            names,
            service: service.to_owned(),
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

    /// Publishes `body` to `queue` through the default exchange, persistent and mandatory, and
    /// returns once the broker confirmed it (or fails; then the broker may or may not hold it).
    pub async fn publish(
        &self,
        queue: &str,
        body: &[u8],
        properties: BasicProperties,
    ) -> Result<(), PublishError> {
        let timeout = Duration::from_millis(self.settings.confirm_timeout_ms);
        let link = self.current_link().await?;
        let channel =
            &link.channels[self.next.fetch_add(1, Ordering::Relaxed) % link.channels.len()];
        let properties = properties.with_delivery_mode(2);
        let confirmed = tokio::time::timeout(timeout, async {
            let confirm = channel
                .basic_publish(
                    ShortString::from(""),
                    ShortString::from(queue),
                    BasicPublishOptions {
                        mandatory: true,
                        ..BasicPublishOptions::default()
                    },
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
        let fresh = Arc::new(open_link(&self.settings, &self.names, &self.service).await?);
        *self.link.write().await = fresh.clone();
        tracing::info!("publisher reconnected");
        Ok(fresh)
    }

    pub async fn close(&self) {
        let link = self.link.read().await.clone();
        let _ = link.connection.close(200, "shutting down".into()).await;
    }
}

async fn open_link(
    settings: &AmqpSettings,
    names: &AmqpNames,
    service: &str,
) -> lapin::Result<Link> {
    let connection = connect(&settings.url, service).await?;
    let mut channels = Vec::with_capacity(settings.publish_channels.max(1));
    for _ in 0..settings.publish_channels.max(1) {
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        channels.push(channel);
    }
    declare_topology(&channels[0], names, settings).await?;
    Ok(Link {
        connection,
        channels,
    })
}
