//! The `seckill.stock.release` consumer: gives a cancelled or expired order's unit back to the
//! stock (idempotent: the ledger row is released once), then forwards the release to
//! `seckill.restock`, where seckill-service gives it back in Redis. Forwarded every time, even
//! when the ledger had already released it: the Redis side is idempotent too, and this way a
//! crash between the two steps loses nothing.

use lapin::BasicProperties;
use seckill_common::amqp::{AmqpNames, Release, decode};
use seckill_db::PgPool;
use seckill_infra::amqp::Publisher;
use seckill_infra::consumer::{Inbox, Retry};

use crate::ledger;

pub struct ReleaseHandler {
    pub pool: PgPool,
    pub publisher: Publisher,
    pub names: AmqpNames,
    pub outage_pause: std::time::Duration,
}

impl ReleaseHandler {
    pub async fn handle(&self, inbox: Inbox) -> anyhow::Result<()> {
        for d in &inbox.deliveries {
            let release = match decode::<Release>(&d.data) {
                Ok(r) => r,
                Err(why) => {
                    inbox.dead_letter(d, &why).await?;
                    continue;
                }
            };
            match self.release(&release).await {
                Ok(()) => inbox.ack(d).await?,
                Err(e) if seckill_db::is_outage(&e) || seckill_infra::is_outage(&e) => {
                    tracing::error!(
                        error = format!("{e:#}"),
                        "a dependency is down; the release goes back to the queue"
                    );
                    tokio::time::sleep(self.outage_pause).await;
                    inbox.requeue(d).await?;
                }
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), order_key = %release.order_key, "release failed");
                    if inbox.retry_later(d).await? == Retry::Exhausted {
                        inbox.dead_letter(d, "out of tries").await?;
                    }
                }
            }
        }
        Ok(())
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
        self.publisher.publish(&self.names.restock_queue(), &body, properties).await?;
        Ok(())
    }
}
