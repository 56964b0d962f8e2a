//! Keeping every replica's sold-out flag right. A replica that sees a sale sell out tells the
//! others through the `seckill.broadcast` fanout; the replica that puts a unit back (restock)
//! tells them it is on sale again. Each replica hears both on its own exclusive queue. Losing a
//! broadcast costs at most `seckill.sold_out_recheck_ms`: the flag re-checks Redis by itself.

use actix_web::web;
use lapin::BasicProperties;
use seckill_common::GoodsId;
use seckill_common::amqp::{Broadcast, BroadcastKind, Release, decode};
use seckill_common::trust::Peer;
use seckill_infra::consumer::Inbox;

use crate::sales::now_ms;
use crate::state::AppState;

/// Tells every replica (this one included), best effort: a failure is logged, not returned.
pub async fn announce(state: &AppState, kind: BroadcastKind, g: GoodsId) {
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

/// `seckill.restock`: an order's unit came back at the authority; back into Redis, and the
/// buyer may try again. Idempotent on the order key.
pub async fn handle_restocks(state: web::Data<AppState>, inbox: Inbox) -> anyhow::Result<()> {
    let pause = state.settings.sold_out_recheck();
    // Redis refusing, dropping or not answering is an outage (the message waits without
    // spending a try); any other Redis error is retried and, out of tries, dead-lettered.
    inbox.each(pause, seckill_infra::is_outage, |release: Release| restock(&state, release)).await
}

async fn restock(state: &AppState, release: Release) -> anyhow::Result<()> {
    if state.gate.restore(release.goods_id, release.user_id, release.order_key).await? {
        tracing::info!(goods_id = %release.goods_id, user_id = %release.user_id, reason = ?release.reason,
            "unit back on sale");
        metrics::counter!("seckill_units_restocked_total").increment(1);
        if let Some(sale) = state.sales.cached(release.goods_id) {
            sale.clear_sold_out();
        }
        announce(state, BroadcastKind::Restocked, release.goods_id).await;
    }
    Ok(())
}
