//! A consumer that survives the broker: it connects, declares what it needs, consumes in
//! batches of what is ready, and after any connection or channel failure (the broker away at
//! start included) reconnects with back-off (`seckill_common::ready`: 100 ms doubling to 5 s)
//! and declares again. On shutdown the batch in hand is
//! finished; unacked messages the broker had handed over return to their queue.
//!
//! Handlers settle each message themselves through [`Inbox`]: ack, retry later (bounded by
//! `amqp.max_attempts`, through the queue's retry queue), or dead-letter with a log line.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    BasicRejectOptions, ConfirmSelectOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation};
use seckill_common::amqp::{AmqpNames, decode, retry_queue};
use seckill_common::config::AmqpSettings;
use seckill_common::ready;
use seckill_common::trust::{Peer, SIGNATURE_HEADER, Trust};
use tokio_util::sync::CancellationToken;

use crate::amqp::{Declare, connect, declare};

/// The header counting a message's tries (absent on the first).
const ATTEMPT_HEADER: &str = "x-attempt";

/// Where the messages come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A durable work queue shared by every replica of the consumer.
    Queue(String),
    /// A fanout exchange: each consumer gets its own exclusive queue, gone when it disconnects.
    Fanout(String),
}

#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    /// For logs and the broker's connection list.
    pub name: String,
    pub source: Source,
    /// The one service allowed to send to this queue; any other message is refused.
    pub from: Peer,
    /// Checks each message's signature before the handler sees it.
    pub trust: Arc<Trust>,
    pub declares: Vec<Declare>,
    /// Unacked messages the broker hands over at once: the backpressure.
    pub prefetch: u16,
    /// Most messages handed to the handler at once.
    pub batch_size: usize,
}

impl ConsumerSpec {
    /// Prefetch and batch size of a consumer whose messages are few and cheap (releases,
    /// restocks, expiries, broadcasts): a busy one sets its own with [`ConsumerSpec::batches`].
    pub const PREFETCH: u16 = 100;
    pub const BATCH_SIZE: usize = 50;

    pub fn new(
        name: impl Into<String>,
        source: Source,
        from: Peer,
        trust: Arc<Trust>,
        declares: Vec<Declare>,
    ) -> Self {
        Self {
            name: name.into(),
            source,
            from,
            trust,
            declares,
            prefetch: Self::PREFETCH,
            batch_size: Self::BATCH_SIZE,
        }
    }

    /// Sets the backpressure (`prefetch`) and the most messages per handler call.
    #[must_use]
    pub fn batches(mut self, prefetch: u16, batch_size: usize) -> Self {
        self.prefetch = prefetch;
        self.batch_size = batch_size;
        self
    }
}

/// One batch of deliveries and the means to settle each.
pub struct Inbox {
    pub deliveries: Vec<Delivery>,
    channel: Channel,
    /// Confirms on: a retry copy is acknowledged by the broker before its original is acked.
    publisher: Channel,
    queue: String,
    settings: AmqpSettings,
}

/// What became of a message that failed a try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// It waits in the retry queue and comes back after the delay.
    Later,
    /// It had its tries: the caller compensates, then dead-letters it.
    Exhausted,
}

impl Inbox {
    /// Which try this is (1 for the first).
    pub fn attempt(delivery: &Delivery) -> u32 {
        delivery
            .properties
            .headers()
            .as_ref()
            .and_then(|h| h.inner().get(ATTEMPT_HEADER))
            .and_then(|v| match v {
                AMQPValue::LongUInt(n) => Some(*n),
                AMQPValue::LongLongInt(n) => u32::try_from(*n).ok(),
                AMQPValue::LongInt(n) => u32::try_from(*n).ok(),
                _ => None,
            })
            .unwrap_or(1)
    }

    pub async fn ack(&self, delivery: &Delivery) -> lapin::Result<()> {
        self.channel.basic_ack(delivery.delivery_tag, BasicAckOptions::default()).await
    }

    /// Acks every delivery up to and including `delivery`'s (one frame for a whole batch).
    pub async fn ack_through(&self, delivery: &Delivery) -> lapin::Result<()> {
        self.channel.basic_ack(delivery.delivery_tag, BasicAckOptions { multiple: true }).await
    }

    /// Hands it back to the queue at once, its try not counted (the failure was not its own:
    /// a dependency is down). Callers pause first, so an outage is not spun on.
    pub async fn requeue(&self, delivery: &Delivery) -> lapin::Result<()> {
        self.channel
            .basic_nack(delivery.delivery_tag, BasicNackOptions { multiple: false, requeue: true })
            .await
    }

    /// As [`Self::requeue`], for every delivery up to and including `delivery`'s.
    pub async fn requeue_through(&self, delivery: &Delivery) -> lapin::Result<()> {
        self.channel
            .basic_nack(delivery.delivery_tag, BasicNackOptions { multiple: true, requeue: true })
            .await
    }

    /// Sends it to the queue's dead-letter queue, naming why in the log.
    pub async fn dead_letter(&self, delivery: &Delivery, why: &str) -> lapin::Result<()> {
        tracing::error!(queue = %self.queue, delivery_tag = delivery.delivery_tag,
            body = %String::from_utf8_lossy(&delivery.data), reason = why, "message sent to the dead-letter queue");
        metrics::counter!("amqp_messages_dead_lettered_total", "queue" => self.queue.clone()).increment(1);
        self.channel.basic_reject(delivery.delivery_tag, BasicRejectOptions { requeue: false }).await
    }

    /// Dead-letters every delivery not signed by `from` (forged, altered, unsigned, or from
    /// another service) and keeps the rest: a handler never sees a message whose sender it
    /// cannot name.
    pub async fn refuse_strangers(&mut self, trust: &Trust, from: Peer) -> lapin::Result<()> {
        let mut kept = Vec::with_capacity(self.deliveries.len());
        for d in std::mem::take(&mut self.deliveries) {
            let verdict = trust.verify_message(from, signature_of(&d), &d.data);
            match verdict {
                Ok(()) => kept.push(d),
                Err(why) => {
                    metrics::counter!("amqp_messages_refused_total", "queue" => self.queue.clone(), "reason" => why.label())
                        .increment(1);
                    tracing::warn!(queue = %self.queue, expected = %from, reason = %why,
                        "message refused: not signed by the service that sends to this queue");
                    self.channel.basic_reject(d.delivery_tag, BasicRejectOptions { requeue: false }).await?;
                }
            }
        }
        self.deliveries = kept;
        Ok(())
    }

    /// Puts a copy with the next try number in the retry queue (confirmed), then acks the
    /// original; or, when it had its tries, says so and leaves it unsettled for the caller.
    pub async fn retry_later(&self, delivery: &Delivery) -> anyhow::Result<Retry> {
        let attempt = Self::attempt(delivery);
        if attempt >= self.settings.max_attempts {
            return Ok(Retry::Exhausted);
        }
        let mut headers = delivery.properties.headers().clone().unwrap_or_default();
        headers.insert(ATTEMPT_HEADER.into(), AMQPValue::LongUInt(attempt + 1));
        let properties: BasicProperties =
            delivery.properties.clone().with_headers(headers).with_delivery_mode(2);
        let confirm = self
            .publisher
            .basic_publish(
                ShortString::from(""),
                retry_queue(&self.queue, self.settings.retry_delay_ms).into(),
                BasicPublishOptions { mandatory: true, ..BasicPublishOptions::default() },
                &delivery.data,
                properties,
            )
            .await?
            .await?;
        anyhow::ensure!(matches!(confirm, Confirmation::Ack(None)), "retry copy not confirmed: {confirm:?}");
        self.ack(delivery).await?;
        metrics::counter!("amqp_messages_retried_total", "queue" => self.queue.clone()).increment(1);
        Ok(Retry::Later)
    }

    /// Handles each delivery on its own, decoded as `T`, and settles it by the outcome: done,
    /// acked; a dependency down (as `is_outage` tells), handed back after `outage_pause`
    /// without counting a try; any other failure, retried later, and dead-lettered once out of
    /// tries; undecodable, dead-lettered at once.
    pub async fn each<T, F, Fut>(
        &self,
        outage_pause: Duration,
        is_outage: fn(&anyhow::Error) -> bool,
        handle: F,
    ) -> anyhow::Result<()>
    where
        T: serde::de::DeserializeOwned,
        F: FnMut(T) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let decoded = self.decode_all(decode::<T>).await?;
        self.each_of(decoded, outage_pause, is_outage, handle).await
    }

    /// Decodes every delivery with `decode`; the undecodable go to the dead letters at once.
    /// Returns the others with what they carry, in delivery order: a handler that serves them
    /// all together acks them with [`Self::ack_through`] the last, and falls back to
    /// [`Self::each_of`] when the whole fails.
    pub async fn decode_all<T>(
        &self,
        decode: fn(&[u8]) -> Result<T, String>,
    ) -> lapin::Result<Vec<(&Delivery, T)>> {
        let mut good = Vec::with_capacity(self.deliveries.len());
        for d in &self.deliveries {
            match decode(&d.data) {
                Ok(m) => good.push((d, m)),
                Err(why) => self.dead_letter(d, &why).await?,
            }
        }
        Ok(good)
    }

    /// As [`Self::each`], for deliveries already decoded by [`Self::decode_all`].
    pub async fn each_of<T, F, Fut>(
        &self,
        decoded: Vec<(&Delivery, T)>,
        outage_pause: Duration,
        is_outage: fn(&anyhow::Error) -> bool,
        mut handle: F,
    ) -> anyhow::Result<()>
    where
        F: FnMut(T) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        for (d, message) in decoded {
            match handle(message).await {
                Ok(()) => self.ack(d).await?,
                Err(e) if is_outage(&e) => {
                    tracing::error!(queue = %self.queue, error = format!("{e:#}"),
                        "a dependency is down; the message goes back to the queue");
                    tokio::time::sleep(outage_pause).await;
                    self.requeue(d).await?;
                }
                Err(e) => {
                    tracing::error!(queue = %self.queue, error = format!("{e:#}"), "message failed");
                    if self.retry_later(d).await? == Retry::Exhausted {
                        self.dead_letter(d, "out of tries").await?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A delivery's [`SIGNATURE_HEADER`], borrowed: checked on every message, so not copied.
fn signature_of(d: &Delivery) -> Option<&[u8]> {
    match d.properties.headers().as_ref()?.inner().get(SIGNATURE_HEADER)? {
        AMQPValue::LongString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// Runs until `cancel`, reconnecting after failures. `handle` settles every delivery of the
/// inbox it is given; an error from it means the connection is in doubt, and the consumer
/// reconnects (unsettled messages come back).
pub async fn run<F, Fut>(settings: AmqpSettings, spec: ConsumerSpec, cancel: CancellationToken, handle: F)
where
    F: Fn(Inbox) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut pauses = ready::backoff();
    loop {
        let mut consuming = false;
        match consume(&settings, &spec, &cancel, &handle, &mut consuming).await {
            Ok(()) => return,
            Err(e) => {
                // Losing a connection that consumed is news (ERROR, and the pauses start short
                // again); each further try that does not get as far is the same outage going on
                // (WARN), not a new error every few seconds for as long as the broker is away.
                if consuming {
                    pauses = ready::backoff();
                }
                let backoff = pauses.next().unwrap_or(ready::RETRY_MAX);
                if consuming {
                    tracing::error!(consumer = %spec.name, error = format!("{e:#}"), ?backoff, "consumer lost its connection; reconnecting");
                } else {
                    tracing::warn!(consumer = %spec.name, error = format!("{e:#}"), ?backoff, "consumer cannot reach the broker yet; trying again");
                }
                metrics::counter!("amqp_consumer_reconnects_total", "consumer" => spec.name.clone())
                    .increment(1);
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
            }
        }
    }
}

async fn consume<F, Fut>(
    settings: &AmqpSettings,
    spec: &ConsumerSpec,
    cancel: &CancellationToken,
    handle: &F,
    consuming: &mut bool,
) -> anyhow::Result<()>
where
    F: Fn(Inbox) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let names = AmqpNames::new(settings.prefix.clone());
    let connection = connect(&settings.url, &format!("{}{}", names.prefix(), spec.name)).await?;
    let channel = connection.create_channel().await?;
    declare(&channel, &names, settings, &spec.declares).await?;
    let queue = match &spec.source {
        Source::Queue(q) => q.clone(),
        Source::Fanout(exchange) => {
            let q = channel
                .queue_declare(
                    "".into(),
                    QueueDeclareOptions {
                        exclusive: true,
                        auto_delete: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await?;
            let name = q.name().to_string();
            channel
                .queue_bind(
                    name.as_str().into(),
                    exchange.as_str().into(),
                    "".into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
            name
        }
    };
    let publisher = connection.create_channel().await?;
    publisher.confirm_select(ConfirmSelectOptions::default()).await?;
    channel.basic_qos(spec.prefetch, BasicQosOptions::default()).await?;
    let consumer = channel
        .basic_consume(
            queue.as_str().into(),
            format!("{}-{}", spec.name, uuid::Uuid::new_v4().simple()).into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    tracing::info!(consumer = %spec.name, %queue, "consuming");
    *consuming = true;
    // Whatever the broker has ready, up to a batch: big batches under load, single messages
    // (no added latency) when it is quiet.
    let mut batches = consumer.ready_chunks(spec.batch_size.max(1));
    loop {
        let next = tokio::select! {
            () = cancel.cancelled() => None,
            next = batches.next() => Some(next),
        };
        let Some(next) = next else {
            crate::amqp::close_quietly(&connection).await;
            return Ok(());
        };
        let Some(batch) = next else {
            anyhow::bail!("the broker ended the consumer");
        };
        let deliveries = batch.into_iter().collect::<Result<Vec<_>, _>>()?;
        let mut inbox = Inbox {
            deliveries,
            channel: channel.clone(),
            publisher: publisher.clone(),
            queue: queue.clone(),
            settings: settings.clone(),
        };
        inbox.refuse_strangers(&spec.trust, spec.from).await?;
        if !inbox.deliveries.is_empty() {
            handle(inbox).await?;
        }
    }
}
