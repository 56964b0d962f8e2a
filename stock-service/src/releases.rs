//! The `seckill.stock.release` consumer: gives a cancelled or expired order's unit back to the
//! stock (idempotent: the ledger row is released once), then forwards the release to
//! `seckill.restock`, where seckill-service gives it back in Redis. Forwarded every time, even
//! when the ledger had already released it: the Redis side is idempotent too, and this way a
//! crash between the two steps loses nothing.

use lapin::BasicProperties;
use seckill_common::amqp::{AmqpNames, Release};
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
    pub async fn handle(&self, inbox: Inbox) -> anyhow::Result<()> {
        inbox
            .each(
                self.outage_pause,
                is_outage,
                |release: Release| async move { self.release(&release).await },
            )
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
        self.publisher.publish(&self.names.restock_queue(), &body, properties).await?;
        Ok(())
    }
}

fn is_outage(e: &anyhow::Error) -> bool {
    seckill_db::is_outage(e) || seckill_infra::is_outage(e)
}
