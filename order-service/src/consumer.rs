//! The `seckill.orders` consumer: batches what the broker has ready, fulfils the batch, acks it
//! with one multiple-ack. Connection trouble is survived by reconnecting with backoff; on
//! shutdown the batch in hand is finished and acked before the consumer stops.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lapin::Channel;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::FieldTable;
use seckill_common::amqp::{AmqpNames, MESSAGE_VERSION, OrderRequest};
use seckill_common::config::AmqpSettings;
use tokio_util::sync::CancellationToken;

use crate::configuration::{OrderSettings, SERVICE};
use crate::fulfil::Fulfiller;

pub struct ConsumerConfig {
    pub amqp: AmqpSettings,
    pub order: OrderSettings,
    pub names: AmqpNames,
}

/// Runs one consumer until `cancel`; reconnects with backoff (1 s doubling to 30 s) after any
/// connection or channel failure.
pub async fn run(
    index: usize,
    config: Arc<ConsumerConfig>,
    fulfiller: Arc<Fulfiller>,
    cancel: CancellationToken,
) {
    let mut backoff = Duration::from_secs(1);
    loop {
        match consume(index, &config, &fulfiller, &cancel).await {
            Ok(()) => return,
            Err(e) => {
                tracing::error!(
                    consumer = index,
                    error = format!("{e:#}"),
                    ?backoff,
                    "consumer stopped; reconnecting"
                );
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// One connection's life: returns Ok on shutdown, Err when the connection or channel fails.
async fn consume(
    index: usize,
    config: &ConsumerConfig,
    fulfiller: &Fulfiller,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    let connection =
        seckill_infra::amqp::connect(&config.amqp.url, &format!("{SERVICE}-consumer-{index}"))
            .await?;
    let channel = connection.create_channel().await?;
    seckill_infra::amqp::declare_topology(&channel, &config.names, &config.amqp).await?;
    channel
        .basic_qos(config.order.prefetch, BasicQosOptions::default())
        .await?;
    let consumer = channel
        .basic_consume(
            config.names.orders_queue().into(),
            format!("{SERVICE}-{index}-{}", uuid::Uuid::new_v4().simple()).into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    tracing::info!(consumer = index, queue = %config.names.orders_queue(), "consuming");
    // Whatever the broker has ready, up to a batch: big batches under load, single messages
    // (no added latency) when it is quiet.
    let mut batches = consumer.ready_chunks(config.order.batch_size);
    let retry_delay = Duration::from_millis(config.order.retry_delay_ms);
    loop {
        let next = tokio::select! {
            () = cancel.cancelled() => None,
            next = batches.next() => Some(next),
        };
        let Some(next) = next else {
            // Shutdown between batches: nothing in hand. Unacked prefetched messages go back
            // to the queue when the channel closes.
            let _ = channel.close(200, "shutting down".into()).await;
            let _ = connection.close(200, "shutting down".into()).await;
            return Ok(());
        };
        let Some(batch) = next else {
            anyhow::bail!("the broker ended the consumer");
        };
        let deliveries = batch.into_iter().collect::<Result<Vec<_>, _>>()?;
        handle_batch(&channel, fulfiller, deliveries, retry_delay).await?;
    }
}

/// Decodes, fulfils and settles one batch. Undecodable messages and unknown versions are
/// rejected to the dead-letter queue; the rest are acked once fulfilled, or handed back after
/// a pause when a dependency failed.
async fn handle_batch(
    channel: &Channel,
    fulfiller: &Fulfiller,
    deliveries: Vec<Delivery>,
    retry_delay: Duration,
) -> anyhow::Result<()> {
    let mut requests: Vec<OrderRequest> = Vec::with_capacity(deliveries.len());
    let mut distinct = HashSet::with_capacity(deliveries.len());
    let mut last_good_tag = None;
    for d in &deliveries {
        match decode(d) {
            Ok(r) => {
                if distinct.insert(r.request_id) {
                    requests.push(r);
                }
                last_good_tag = Some(d.delivery_tag);
            }
            Err(why) => {
                tracing::error!(delivery_tag = d.delivery_tag, body = %String::from_utf8_lossy(&d.data),
                    reason = %why, "poison message sent to the dead-letter queue");
                metrics::counter!("order_messages_dead_lettered_total").increment(1);
                channel
                    .basic_reject(d.delivery_tag, BasicRejectOptions { requeue: false })
                    .await?;
            }
        }
    }
    let Some(last_tag) = last_good_tag else {
        return Ok(());
    };
    match fulfiller.fulfil(&requests).await {
        Ok(report) => {
            channel
                .basic_ack(last_tag, BasicAckOptions { multiple: true })
                .await?;
            metrics::counter!("order_requests_ordered_total").increment(report.ordered as u64);
            metrics::counter!("order_requests_failed_total").increment(report.failed as u64);
            metrics::counter!("order_requests_stale_total").increment(report.stale as u64);
            tracing::debug!(?report, batch = requests.len(), "batch fulfilled");
        }
        Err(e) => {
            tracing::error!(
                error = format!("{e:#}"),
                batch = requests.len(),
                ?retry_delay,
                "batch failed on a dependency; handing it back to the queue"
            );
            metrics::counter!("order_batches_retried_total").increment(1);
            tokio::time::sleep(retry_delay).await;
            channel
                .basic_nack(
                    last_tag,
                    BasicNackOptions {
                        multiple: true,
                        requeue: true,
                    },
                )
                .await?;
        }
    }
    Ok(())
}

fn decode(d: &Delivery) -> Result<OrderRequest, String> {
    let v: serde_json::Value =
        serde_json::from_slice(&d.data).map_err(|e| format!("not JSON: {e}"))?;
    match v.get("v").and_then(serde_json::Value::as_u64) {
        Some(version) if version == u64::from(MESSAGE_VERSION) => {}
        other => return Err(format!("unknown message version {other:?}")),
    }
    serde_json::from_value(v).map_err(|e| format!("not an order request: {e}"))
}
