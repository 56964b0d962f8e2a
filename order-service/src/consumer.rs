//! The two queues order-service consumes: `seckill.orders` (accepted buy requests, one or a
//! batch a message, fulfilled many messages at a time) and `seckill.order.expire` (orders whose delay ran out). Connection handling,
//! retries and dead letters are `seckill_infra::consumer`'s; this is what each message means.

use std::collections::HashSet;
use std::time::Duration;

use lapin::message::Delivery;
use seckill_common::OrderId;
use seckill_common::amqp::{OrderExpiry, OrderRequest, decode, decode_order_requests};
use seckill_infra::consumer::{Inbox, Retry};

use crate::fulfil::{BatchReport, Fulfiller, is_outage};
use crate::orders::transition;
use crate::pace::ExpiryPace;
use crate::releases::Releaser;

/// Fulfils the buy requests of the deliveries in hand (each message holds one request, or a
/// batch of them), at most `batch_size` requests at a time (one deduct call, one insert each),
/// and settles each message: all acked once fulfilled; all handed back after a pause when a
/// dependency is down. When a group fails otherwise, each of its requests is fulfilled on its
/// own, so one bad request never takes the others down with it: a message whose requests all
/// went through is acked, one that holds a failing request is tried again later (its fulfilled
/// requests are answered again then, idempotently), and once out of tries its failing requests
/// are compensated and it goes to the dead letters. Undecodable messages go straight there.
pub async fn handle_orders(
    fulfiller: &Fulfiller,
    inbox: Inbox,
    batch_size: usize,
    outage_pause: Duration,
) -> anyhow::Result<()> {
    let mut requests: Vec<OrderRequest> = Vec::with_capacity(inbox.deliveries.len());
    let mut distinct = HashSet::with_capacity(inbox.deliveries.len());
    let mut good: Vec<(&Delivery, Vec<OrderRequest>)> = Vec::with_capacity(inbox.deliveries.len());
    for d in &inbox.deliveries {
        match decode_order_requests(&d.data) {
            Ok(held) => {
                requests.extend(held.iter().filter(|r| distinct.insert(r.request_id)));
                good.push((d, held));
            }
            Err(why) => inbox.dead_letter(d, &why).await?,
        }
    }
    let Some(&(last, _)) = good.last() else {
        return Ok(());
    };
    let mut failing = HashSet::new();
    for group in requests.chunks(batch_size.max(1)) {
        match fulfiller.fulfil(group).await {
            Ok(report) => {
                record(&report);
                tracing::debug!(?report, batch = group.len(), "batch fulfilled");
            }
            Err(e) if is_outage(&e) => {
                return requeue_all(&inbox, last, &e, requests.len(), outage_pause).await;
            }
            Err(e) => {
                tracing::error!(
                    error = format!("{e:#}"),
                    batch = group.len(),
                    "batch failed; each request is fulfilled on its own"
                );
                for r in group {
                    match fulfiller.fulfil(std::slice::from_ref(r)).await {
                        Ok(report) => record(&report),
                        Err(e) if is_outage(&e) => {
                            return requeue_all(&inbox, last, &e, requests.len(), outage_pause).await;
                        }
                        Err(e) => {
                            tracing::error!(error = format!("{e:#}"), request_id = %r.request_id,
                                "request failed on its own; its message is tried again later");
                            failing.insert(r.request_id);
                        }
                    }
                }
            }
        }
    }
    if failing.is_empty() {
        inbox.ack_through(last).await?;
        return Ok(());
    }
    for (d, held) in &good {
        let bad: Vec<&OrderRequest> = held.iter().filter(|r| failing.contains(&r.request_id)).collect();
        if bad.is_empty() {
            inbox.ack(d).await?;
        } else if inbox.retry_later(d).await? == Retry::Exhausted {
            settle_exhausted(fulfiller, &inbox, d, &bad, outage_pause).await?;
        }
    }
    Ok(())
}

/// A dependency is down: every delivery in hand goes back to the queue after a pause, its try
/// not counted.
async fn requeue_all(
    inbox: &Inbox,
    last: &Delivery,
    e: &anyhow::Error,
    requests: usize,
    outage_pause: Duration,
) -> anyhow::Result<()> {
    tracing::error!(
        error = format!("{e:#}"),
        batch = requests,
        "a dependency is down; the batch goes back to the queue"
    );
    metrics::counter!("order_batches_requeued_total").increment(1);
    tokio::time::sleep(outage_pause).await;
    inbox.requeue_through(last).await?;
    Ok(())
}

/// A message out of tries: its failing requests are compensated, then it goes to the dead
/// letters. Only a compensated request may leave: one whose compensation failed would end in
/// limbo (a unit held, a buyer queued for ever), so its message goes back to the queue and is
/// compensated on its next turn.
async fn settle_exhausted(
    fulfiller: &Fulfiller,
    inbox: &Inbox,
    d: &Delivery,
    failing: &[&OrderRequest],
    outage_pause: Duration,
) -> anyhow::Result<()> {
    for r in failing {
        if let Err(e) = fulfiller.compensate(r).await {
            tracing::error!(error = format!("{e:#}"), request_id = %r.request_id,
                "compensation failed; the request goes back to the queue");
            metrics::counter!("order_compensations_failed_total").increment(1);
            tokio::time::sleep(outage_pause).await;
            inbox.requeue(d).await?;
            return Ok(());
        }
    }
    inbox.dead_letter(d, "out of tries").await?;
    Ok(())
}

fn record(report: &BatchReport) {
    metrics::counter!("order_requests_ordered_total").increment(report.ordered as u64);
    metrics::counter!("order_requests_failed_total").increment(report.failed as u64);
    metrics::counter!("order_requests_stale_total").increment(report.stale as u64);
    metrics::counter!("order_requests_recovered_total").increment(report.recovered as u64);
    metrics::counter!("order_requests_superseded_total").increment(report.superseded as u64);
}

/// Most orders one expiry statement takes: a storm's expiries go through in statements of this
/// many (fewer when paced: a step of [`ExpiryPace`]), each followed by its releases.
pub const EXPIRE_CHUNK: usize = 5_000;

/// Expires the orders of every message in hand that are still unpaid, in one statement per
/// [`EXPIRE_CHUNK`] orders at the pace `pace` allows, sends their releases (a few batch messages), and acks all the
/// messages at once: thirty minutes after a big sale they all come back together. A dependency
/// down: every message goes back after the pause. Any other failure: each message on its own
/// (retried later, dead-lettered out of tries), so one cannot hold up the rest. Undecodable
/// messages go straight to the dead letters.
pub async fn handle_expiries(
    releaser: &Releaser,
    fulfiller: &Fulfiller,
    pace: &ExpiryPace,
    inbox: Inbox,
    outage_pause: Duration,
) -> anyhow::Result<()> {
    let good = inbox.decode_all(decode::<OrderExpiry>).await?;
    let Some(&(last, _)) = good.last() else {
        return Ok(());
    };
    let ids: Vec<OrderId> = good.iter().flat_map(|(_, e)| e.order_ids.iter().copied()).collect();
    match expire(releaser, fulfiller, pace, &ids).await {
        Ok(expired) => {
            // Orders not expired were paid or cancelled meanwhile (or expired by an earlier copy).
            tracing::info!(messages = good.len(), orders = ids.len(), expired, "expiries done");
            inbox.ack_through(last).await?;
        }
        Err(e) if is_outage(&e) => {
            tracing::error!(
                orders = ids.len(),
                error = format!("{e:#}"),
                "a dependency is down; the expiries go back to the queue"
            );
            tokio::time::sleep(outage_pause).await;
            inbox.requeue_through(last).await?;
        }
        Err(e) => {
            tracing::error!(
                orders = ids.len(),
                error = format!("{e:#}"),
                "expiry batch failed; each message is tried on its own"
            );
            inbox
                .each_of(good, outage_pause, is_outage, |expiry: OrderExpiry| async move {
                    expire(releaser, fulfiller, pace, &expiry.order_ids).await.map(drop)
                })
                .await?;
        }
    }
    Ok(())
}

/// Expires those of `ids` still unpaid and sends their releases, with those of `ids` expired
/// before (an earlier try of the message may have died before its releases were confirmed).
/// Returns how many expired now.
async fn expire(
    releaser: &Releaser,
    fulfiller: &Fulfiller,
    pace: &ExpiryPace,
    ids: &[OrderId],
) -> anyhow::Result<usize> {
    let mut total = 0;
    for chunk in ids.chunks(pace.step()) {
        pace.wait(chunk.len()).await;
        let (rows, fresh) = {
            let mut conn = fulfiller.pool().get().await?;
            let mut rows = transition::expire(&mut conn, chunk).await?;
            let fresh = rows.len();
            if fresh < chunk.len() {
                // The others were paid or cancelled meanwhile, or expired before.
                let now: HashSet<i64> = rows.iter().map(|r| r.id).collect();
                let rest: Vec<i64> = chunk.iter().map(|id| id.get()).filter(|id| !now.contains(id)).collect();
                rows.extend(transition::expired_among(&mut conn, &rest).await?);
            }
            (rows, fresh)
        };
        let (now, before) = rows.split_at(fresh);
        for row in now {
            tracing::debug!(
                order_id = row.id,
                user_id = row.user_id,
                goods_id = row.goods_id,
                "order expired unpaid"
            );
        }
        if !before.is_empty() {
            tracing::info!(orders = before.len(), "releases of orders expired before sent again");
        }
        metrics::counter!("order_orders_expired_total").increment(fresh as u64);
        let fresh_ids: Vec<i64> = now.iter().map(|r| r.id).collect();
        releaser.send_carried(&rows, &fresh_ids).await?;
        total += fresh;
    }
    Ok(total)
}
