//! The `seckill.stock.release` consumer: gives cancelled and expired orders' units back to the
//! stock, then forwards the releases to `seckill.restock`, where seckill-service gives them back
//! in Redis. Forwarded every time, even when the ledger had already released them: the Redis
//! side is idempotent too, and this way a crash between the two steps loses nothing.
//!
//! Releases come in storms (every unpaid order of a big sale expires within seconds), so they
//! are handled in batches: whatever the broker has ready, in either message form, released in
//! one transaction per [`ledger::MAX_BATCH`] keys, forwarded in a few batch messages, and
//! acknowledged with one multiple-ack.

use std::collections::HashSet;

use futures_util::future::try_join_all;
use lapin::BasicProperties;
use lapin::message::Delivery;
use seckill_common::amqp::{AmqpNames, Release, decode_releases, distinct_releases, release_bodies};
use seckill_common::trust::Peer;
use seckill_db::PgPool;
use seckill_infra::amqp::Publisher;
use seckill_infra::consumer::Inbox;
use uuid::Uuid;

use crate::ledger;

pub struct ReleaseHandler {
    pub pool: PgPool,
    pub publisher: std::sync::Arc<Publisher>,
    pub names: AmqpNames,
    pub outage_pause: std::time::Duration,
}

impl ReleaseHandler {
    /// Releases everything the deliveries in hand carry, each key once, and acks them all.
    /// Undecodable messages go to the dead letters. A dependency down: every delivery goes
    /// back after the pause. Any other failure: each message is tried on its own, release by
    /// release, so a poison release holds back only its own message.
    ///
    /// A release that decodes is never dead-lettered, nor its try counted: it is a unit owed
    /// back to the sale, and order-service's outbox counts it as sent once the broker confirmed
    /// it, so a dead letter would strand that unit for good. Every step is idempotent, so
    /// trying again is always safe; a release that keeps failing costs a pause per try, shows
    /// in the log and in `stock_release_failures_total`.
    pub async fn handle(&self, inbox: Inbox) -> anyhow::Result<()> {
        let good = inbox.decode_all(decode_releases).await?;
        let Some(&(last, _)) = good.last() else {
            return Ok(());
        };
        let all = distinct_releases(good.iter().map(|(_, r)| r));
        match self.release(&all).await {
            Ok(released) => {
                tracing::info!(
                    messages = good.len(),
                    releases = all.len(),
                    released_now = released,
                    "releases done and forwarded to seckill-service"
                );
                inbox.ack_through(last).await?;
            }
            Err(e) if is_outage(&e) => {
                failed(&e, all.len());
                tokio::time::sleep(self.outage_pause).await;
                inbox.requeue_through(last).await?;
            }
            Err(e) => {
                failed(&e, all.len());
                for (d, releases) in &good {
                    self.settle_alone(&inbox, d, releases).await?;
                }
            }
        }
        Ok(())
    }

    /// One message of a batch that failed, release by release: those that go through are done
    /// (a no-op when the message comes back); if any failed, the message goes back after the
    /// pause.
    async fn settle_alone(&self, inbox: &Inbox, d: &Delivery, releases: &[Release]) -> anyhow::Result<()> {
        let mut all_done = true;
        for r in releases {
            if let Err(e) = self.release(std::slice::from_ref(r)).await {
                tracing::error!(order_key = %r.order_key, goods_id = %r.goods_id, outage = is_outage(&e),
                    error = format!("{e:#}"), "release failed; it will be tried again");
                all_done = false;
            }
        }
        if all_done {
            inbox.ack(d).await?;
        } else {
            tokio::time::sleep(self.outage_pause).await;
            inbox.requeue(d).await?;
        }
        Ok(())
    }

    /// Releases `releases` at the authority, then forwards every one of them (confirmed).
    /// Returns how many were released now (the rest were released before, or unknown).
    async fn release(&self, releases: &[Release]) -> anyhow::Result<usize> {
        let mut released = 0;
        {
            let mut conn = self.pool.get().await?;
            for chunk in releases.chunks(ledger::MAX_BATCH) {
                let keys: Vec<Uuid> = chunk.iter().map(|r| r.order_key).collect();
                let now: HashSet<Uuid> = ledger::release_batch(&mut conn, &keys).await?.into_iter().collect();
                released += now.len();
                for r in chunk.iter().filter(|r| now.contains(&r.order_key)) {
                    tracing::debug!(order_key = %r.order_key, goods_id = %r.goods_id, reason = ?r.reason, "stock released");
                }
            }
        }
        metrics::counter!("stock_units_released_total").increment(released as u64);
        let queue = self.names.restock_queue();
        try_join_all(release_bodies(releases)?.into_iter().map(|body| {
            let properties = BasicProperties::default().with_content_type("application/json".into());
            let queue = &queue;
            async move { self.publisher.publish(Peer::Seckill, queue, &body, properties).await }
        }))
        .await?;
        Ok(released)
    }
}

fn failed(e: &anyhow::Error, releases: usize) {
    tracing::error!(releases, outage = is_outage(e), error = format!("{e:#}"), "release batch failed");
    metrics::counter!("stock_release_failures_total").increment(1);
}

/// A dependency down, or a failure of its own (a bug, a bad row).
fn is_outage(e: &anyhow::Error) -> bool {
    seckill_db::is_outage(e) || seckill_infra::is_outage(e)
}
