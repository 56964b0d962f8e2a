//! Giving units back: the release message of a cancelled or expired order, and the sweeper
//! that owes nothing for long.
//!
//! Who owes a release until the broker confirmed it: for a cancel (and the sweeper's own
//! expiries) the order row, its own outbox: `release_sent_at` is set only after the confirm, so
//! a crash between the status change and the publish is caught by the sweeper, which also
//! expires overdue orders whose delay message was lost. For an expiry, the expiry message: it
//! stays unacked until its releases are confirmed, and a copy that comes back (redelivered
//! after a crash, or a retry) sends the releases of its orders already expired again, so the
//! expiry writes each row once (a storm of them halves its database writes). The ledger at
//! stock-service takes each order key once, so a release sent twice gives one unit back.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::try_join_all;
use lapin::BasicProperties;
use seckill_common::amqp::{AmqpNames, MESSAGE_VERSION, Release, ReleaseReason, release_bodies};
use seckill_common::api::OrderStatus;
use seckill_common::trust::Peer;
use seckill_common::{GoodsId, OrderId, UserId};
use seckill_db::PgPool;
use seckill_infra::amqp::Publisher;
use seckill_web::Ticker;
use tokio_util::sync::CancellationToken;

use crate::orders::{OrderRow, transition};

/// Rows per sweep step: a backlog drains over several ticks rather than in one huge statement.
const SWEEP_LIMIT: i64 = 500;

pub struct Releaser {
    pool: PgPool,
    publisher: Arc<Publisher>,
    names: AmqpNames,
}

impl Releaser {
    pub fn new(pool: PgPool, publisher: Arc<Publisher>, names: AmqpNames) -> Self {
        Self { pool, publisher, names }
    }

    /// Publishes the release of each order (cancelled or expired), confirmed, then records it.
    pub async fn send(&self, rows: &[OrderRow]) -> anyhow::Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        self.publish(rows).await?;
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let mut conn = self.pool.get().await?;
        transition::mark_release_sent(&mut conn, &ids).await?;
        Ok(())
    }

    /// Publishes the releases an expiry message carries: `rows`, of which `fresh` were expired
    /// by this try (recorded as sent by [`transition::expire`] itself). Nothing to record after.
    /// If the publish fails, the fresh ones are owed to the sweeper: the message comes back
    /// and sends them again, unless it ran out of tries.
    pub async fn send_carried(&self, rows: &[OrderRow], fresh: &[i64]) -> anyhow::Result<()> {
        let Err(e) = self.publish(rows).await else {
            return Ok(());
        };
        if let Err(also) = self.owe(fresh).await {
            tracing::warn!(
                orders = fresh.len(),
                error = format!("{also:#}"),
                "releases not handed to the sweeper; the expiry message sends them when it comes back"
            );
        }
        Err(e)
    }

    async fn owe(&self, ids: &[i64]) -> anyhow::Result<()> {
        let mut conn = self.pool.get().await?;
        transition::owe_release(&mut conn, ids).await?;
        Ok(())
    }

    /// Publishes the release of each order, confirmed: many travel in a few batch messages (an
    /// expiry storm), one in the single form.
    async fn publish(&self, rows: &[OrderRow]) -> anyhow::Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let releases = rows.iter().map(release_of).collect::<anyhow::Result<Vec<Release>>>()?;
        let queue = self.names.stock_release_queue();
        try_join_all(release_bodies(&releases)?.into_iter().map(|body| {
            let properties = BasicProperties::default().with_content_type("application/json".into());
            let queue = &queue;
            async move { self.publisher.publish(Peer::Stock, queue, &body, properties).await }
        }))
        .await?;
        metrics::counter!("order_releases_sent_total").increment(rows.len() as u64);
        Ok(())
    }

    /// One sweep: overdue unpaid orders expire; owed releases are sent.
    pub async fn sweep(&self, grace: Duration) -> anyhow::Result<()> {
        let grace = chrono::Duration::from_std(grace)?;
        let expired = {
            let mut conn = self.pool.get().await?;
            transition::expire_overdue(&mut conn, grace, SWEEP_LIMIT).await?
        };
        if !expired.is_empty() {
            tracing::warn!(orders = expired.len(), "expired overdue orders whose delay message did not come");
            self.send(&expired).await?;
        }
        let owed = {
            let mut conn = self.pool.get().await?;
            transition::releases_owed(&mut conn, grace, SWEEP_LIMIT).await?
        };
        if !owed.is_empty() {
            tracing::warn!(orders = owed.len(), "sending releases that were owed");
            self.send(&owed).await?;
        }
        Ok(())
    }
}

fn release_of(row: &OrderRow) -> anyhow::Result<Release> {
    let reason = match OrderStatus::parse(&row.status) {
        Some(OrderStatus::Cancelled) => ReleaseReason::Cancelled,
        Some(OrderStatus::Expired) => ReleaseReason::Expired,
        other => anyhow::bail!("order {} is {other:?}: nothing to release", row.id),
    };
    Ok(Release {
        v: MESSAGE_VERSION,
        order_key: row.request_id,
        order_id: OrderId::new(row.id).ok_or_else(|| anyhow::anyhow!("order id {}", row.id))?,
        user_id: UserId::new(row.user_id).ok_or_else(|| anyhow::anyhow!("user id {}", row.user_id))?,
        goods_id: GoodsId::new(row.goods_id).ok_or_else(|| anyhow::anyhow!("goods id {}", row.goods_id))?,
        reason,
    })
}

/// Sweeps every `every` until cancelled. `grace` is how far past its expiry an unpaid order, or
/// how old an owed release, must be before the sweeper acts (the queues normally act first).
pub async fn run_sweeper(
    releaser: Arc<Releaser>,
    every: Duration,
    grace: Duration,
    cancel: CancellationToken,
) {
    let mut ticker = Ticker::new(every);
    while ticker.tick(&cancel).await {
        if let Err(e) = releaser.sweep(grace).await {
            tracing::warn!(error = format!("{e:#}"), "sweep failed; next tick tries again");
        }
    }
}
