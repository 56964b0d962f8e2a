//! Keeping every replica's sold-out flag right. A replica that sees a sale sell out tells the
//! others through the `seckill.broadcast` fanout; the replica that puts a unit back (restock)
//! tells them it is on sale again. Each replica hears both on its own exclusive queue. Losing a
//! broadcast costs at most `seckill.sold_out_recheck_ms`: the flag re-checks Redis by itself.

use std::collections::BTreeMap;

use actix_web::web;
use lapin::BasicProperties;
use seckill_common::amqp::{Broadcast, BroadcastKind, Release, decode, decode_releases, distinct_releases};
use seckill_common::keys::SaleBucket;
use seckill_common::trust::Peer;
use seckill_common::{GoodsId, UserId};
use seckill_infra::consumer::Inbox;
use uuid::Uuid;

use crate::sales::now_ms;
use crate::state::AppState;

/// Tells every replica (this one included), best effort: a failure is logged, not returned.
/// A sell-out is also told to the gateways holding buyers' streams of the sale.
pub async fn announce(state: &AppState, kind: BroadcastKind, g: GoodsId) {
    if kind == BroadcastKind::SoldOut
        && let Err(e) = state.gate.publish_sold_out(g).await
    {
        tracing::warn!(error = %e, goods_id = %g, "sold out not told to the buyers' streams (their next click is told)");
    }
    let body = match serde_json::to_vec(&Broadcast::new(kind, g)) {
        Ok(b) => b,
        Err(e) => return tracing::error!(error = %e, "cannot encode a broadcast"),
    };
    let properties = BasicProperties::default().with_content_type("application/json".into());
    if let Err(e) = state
        .publisher
        .publish_to(Peer::Seckill, &state.names.broadcast_exchange(), "", &body, properties)
        .await
    {
        tracing::warn!(error = %e, goods_id = %g, ?kind, "broadcast not sent; replicas re-check by themselves");
    }
}

/// What this replica hears from the others.
pub async fn handle_broadcasts(state: web::Data<AppState>, inbox: Inbox) -> anyhow::Result<()> {
    for d in &inbox.deliveries {
        match decode::<Broadcast>(&d.data) {
            Ok(b) => {
                if let Some(sale) = state.sales.cached(b.goods_id) {
                    match b.kind {
                        BroadcastKind::SoldOut => {
                            sale.flag_sold_out(now_ms(), state.settings.sold_out_recheck());
                        }
                        BroadcastKind::Restocked => sale.clear_sold_out(),
                    }
                }
            }
            Err(why) => tracing::error!(reason = why, "undecodable broadcast dropped"),
        }
    }
    if let Some(last) = inbox.deliveries.last() {
        inbox.ack_through(last).await?;
    }
    Ok(())
}

/// Most (user, request id) pairs one restore script call carries: Redis runs a script alone,
/// so a storm's restore is cut into calls of about a third of a millisecond.
const RESTORE_CHUNK: usize = 500;

/// `seckill.restock`: orders' units came back at the authority; back into Redis, and their
/// buyers may try again. Idempotent on each order key. Whatever the broker has ready, in
/// either message form, is restored per sale in a few script calls, with one broadcast per
/// sale, and acked at once. Redis refusing, dropping or not answering is an outage: every
/// message goes back after a pause, no try spent. Any other failure: each message is tried on
/// its own (retried later, and dead-lettered out of tries), so one cannot hold up the rest.
pub async fn handle_restocks(state: web::Data<AppState>, inbox: Inbox) -> anyhow::Result<()> {
    let pause = state.settings.sold_out_recheck();
    let good = inbox.decode_all(decode_releases).await?;
    let Some(&(last, _)) = good.last() else {
        return Ok(());
    };
    let all = distinct_releases(good.iter().map(|(_, r)| r));
    match restock(&state, &all).await {
        Ok(()) => inbox.ack_through(last).await?,
        Err(e) if seckill_infra::is_outage(&e) => {
            tracing::error!(
                releases = all.len(),
                error = format!("{e:#}"),
                "redis is down; the restocks go back to the queue"
            );
            tokio::time::sleep(pause).await;
            inbox.requeue_through(last).await?;
        }
        Err(e) => {
            tracing::error!(
                releases = all.len(),
                error = format!("{e:#}"),
                "restock batch failed; each message is tried on its own"
            );
            inbox
                .each_of(good, pause, seckill_infra::is_outage, |releases: Vec<Release>| {
                    let state = &state;
                    async move { restock(state, &releases).await }
                })
                .await?;
        }
    }
    Ok(())
}

/// Restores `releases` in Redis, sale by sale (each unit to the bucket that serves its buyer,
/// where the reservation is); a sale that got units back is announced once.
async fn restock(state: &AppState, releases: &[Release]) -> anyhow::Result<()> {
    let mut by_sale: BTreeMap<GoodsId, Vec<(UserId, Uuid)>> = BTreeMap::new();
    for r in releases {
        by_sale.entry(r.goods_id).or_default().push((r.user_id, r.order_key));
    }
    for (g, released) in by_sale {
        let sale = state.sales.get(g).await.map_err(|e| anyhow::anyhow!("sale {g}: {e}"))?;
        let mut by_bucket: BTreeMap<SaleBucket, Vec<(UserId, Uuid)>> = BTreeMap::new();
        for (u, key) in released.iter().copied() {
            by_bucket.entry(sale.bucket_of(u)).or_default().push((u, key));
        }
        let mut restored = 0;
        for (at, released) in &by_bucket {
            for chunk in released.chunks(RESTORE_CHUNK) {
                restored += state.gate.restore(*at, chunk).await?;
            }
        }
        tracing::debug!(goods_id = %g, releases = released.len(), restored, "restocks applied");
        if restored == 0 {
            continue;
        }
        tracing::info!(goods_id = %g, units = restored, "units back on sale");
        metrics::counter!("seckill_units_restocked_total").increment(restored as u64);
        if let Some(sale) = state.sales.cached(g) {
            sale.clear_sold_out();
        }
        announce(state, BroadcastKind::Restocked, g).await;
    }
    Ok(())
}
