//! The `seckill.stock.release` consumer: gives a cancelled or expired order's unit back to the
//! stock (idempotent: the ledger row is released once), then forwards the release to
//! `seckill.restock`, where seckill-service gives it back in Redis. Forwarded every time, even
//! when the ledger had already released it: the Redis side is idempotent too, and this way a
//! crash between the two steps loses nothing.

use lapin::BasicProperties;
use seckill_common::amqp::{AmqpNames, Release};
use seckill_common::trust::Peer;
use seckill_db::PgPool;
use seckill_infra::amqp::Publisher;
use seckill_infra::consumer::Inbox;

use crate::ledger;

pub struct ReleaseHandler {
    pub pool: PgPool,
    pub publisher: Publisher,
    pub names: AmqpNames,
    pub outage_pause: std::time::Duration,
}

impl ReleaseHandler {
    /// Every failure of a release that decodes goes back to the queue after the pause, no try
    /// counted: a release is a unit owed back to the sale, and order-service's outbox counts it
    /// as sent once the broker confirmed it, so a dead-lettered release would strand that unit
    /// for good. Every step is idempotent, so trying again is always safe; a release that keeps
    /// failing costs a pause per try, shows in the log and in `stock_release_failures_total`,
    /// and delays the messages after it in its batch by that pause only. Undecodable messages
    /// still go to the dead letters.
    pub async fn handle(&self, inbox: Inbox) -> anyhow::Result<()> {
        inbox
            .each(self.outage_pause, always, |release: Release| async move {
                self.release(&release).await.inspect_err(|e| {
                    tracing::error!(order_key = %release.order_key, goods_id = %release.goods_id,
                        outage = is_outage(e), error = format!("{e:#}"), "release failed; it will be tried again");
                    metrics::counter!("stock_release_failures_total").increment(1);
                })
            })
            .await
    }

    async fn release(&self, release: &Release) -> anyhow::Result<()> {
        let released = {
            let mut conn = self.pool.get().await?;
            ledger::release(&mut conn, release.order_key).await?
        };
        if released {
            tracing::info!(order_key = %release.order_key, goods_id = %release.goods_id, reason = ?release.reason, "stock released");
            metrics::counter!("stock_units_released_total").increment(1);
        }
        let body = serde_json::to_vec(release)?;
        let properties = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_message_id(release.order_key.to_string().into());
        self.publisher.publish(Peer::Seckill, &self.names.restock_queue(), &body, properties).await?;
        Ok(())
    }
}

/// The `is_outage` of [`Inbox::each`] for releases: every failure is requeued, none counted.
fn always(_: &anyhow::Error) -> bool {
    true
}

/// For the log: a dependency down, or a failure of its own (a bug, a bad row).
fn is_outage(e: &anyhow::Error) -> bool {
    seckill_db::is_outage(e) || seckill_infra::is_outage(e)
}
