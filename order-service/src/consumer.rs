//! The two queues order-service consumes: `seckill.orders` (accepted buy requests, fulfilled in
//! batches) and `seckill.order.expire` (orders whose delay ran out). Connection handling,
//! retries and dead letters are `seckill_infra::consumer`'s; this is what each message means.

use std::collections::HashSet;
use std::time::Duration;

use seckill_common::amqp::{OrderExpiry, OrderRequest, decode};
use seckill_infra::consumer::{Inbox, Retry};

use crate::fulfil::{Fulfiller, is_outage};
use crate::orders::transition;
use crate::releases::Releaser;

/// Fulfils one batch of buy requests and settles it: acked once fulfilled; handed back after a
/// pause when a dependency is down; otherwise each retried later, and a request out of tries
/// compensated and dead-lettered. Undecodable messages go straight to the dead letters.
pub async fn handle_orders(
    fulfiller: &Fulfiller,
    inbox: Inbox,
    outage_pause: Duration,
) -> anyhow::Result<()> {
    let mut requests: Vec<OrderRequest> = Vec::with_capacity(inbox.deliveries.len());
    let mut distinct = HashSet::with_capacity(inbox.deliveries.len());
    let mut good = Vec::with_capacity(inbox.deliveries.len());
    for d in &inbox.deliveries {
        match decode::<OrderRequest>(&d.data) {
            Ok(r) => {
                if distinct.insert(r.request_id) {
                    requests.push(r);
                }
                good.push((d, r));
            }
            Err(why) => inbox.dead_letter(d, &why).await?,
        }
    }
    let Some((last, _)) = good.last() else {
        return Ok(());
    };
    match fulfiller.fulfil(&requests).await {
        Ok(report) => {
            inbox.ack_through(last).await?;
            metrics::counter!("order_requests_ordered_total").increment(report.ordered as u64);
            metrics::counter!("order_requests_failed_total").increment(report.failed as u64);
            metrics::counter!("order_requests_stale_total").increment(report.stale as u64);
            metrics::counter!("order_requests_recovered_total").increment(report.recovered as u64);
            metrics::counter!("order_requests_superseded_total").increment(report.superseded as u64);
            tracing::debug!(?report, batch = requests.len(), "batch fulfilled");
        }
        Err(e) if is_outage(&e) => {
            tracing::error!(
                error = format!("{e:#}"),
                batch = requests.len(),
                "a dependency is down; the batch goes back to the queue"
            );
            metrics::counter!("order_batches_requeued_total").increment(1);
            tokio::time::sleep(outage_pause).await;
            inbox.requeue_through(last).await?;
        }
        Err(e) => {
            tracing::error!(
                error = format!("{e:#}"),
                batch = requests.len(),
                "batch failed; each request is retried on its own"
            );
            for (d, r) in &good {
                if inbox.retry_later(d).await? == Retry::Exhausted {
                    // Only a compensated request may leave for the dead letters: one whose
                    // compensation failed would end in limbo (a unit held, a buyer queued for
                    // ever), so it goes back to the queue and is compensated on its next turn.
                    match fulfiller.compensate(r).await {
                        Ok(()) => inbox.dead_letter(d, "out of tries").await?,
                        Err(e) => {
                            tracing::error!(error = format!("{e:#}"), request_id = %r.request_id,
                                "compensation failed; the request goes back to the queue");
                            metrics::counter!("order_compensations_failed_total").increment(1);
                            tokio::time::sleep(outage_pause).await;
                            inbox.requeue(d).await?;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// Expires the orders of each message that are still unpaid and sends their releases.
pub async fn handle_expiries(
    releaser: &Releaser,
    fulfiller: &Fulfiller,
    inbox: Inbox,
    outage_pause: Duration,
) -> anyhow::Result<()> {
    inbox.each(outage_pause, is_outage, |expiry: OrderExpiry| expire(releaser, fulfiller, expiry)).await
}

async fn expire(releaser: &Releaser, fulfiller: &Fulfiller, expiry: OrderExpiry) -> anyhow::Result<()> {
    let expired = {
        let mut conn = fulfiller.pool().get().await?;
        transition::expire(&mut conn, &expiry.order_ids).await?
    };
    // Orders not returned were paid or cancelled meanwhile (or expired by an earlier copy).
    if !expired.is_empty() {
        tracing::info!(orders = expired.len(), "orders expired unpaid");
        metrics::counter!("order_orders_expired_total").increment(expired.len() as u64);
        releaser.send(&expired).await?;
    }
    Ok(())
}
