//! The background upkeep of the sales this instance looks after: every sale not ended, and
//! one that ended (or was last touched) less than `seckill.ended_grace_secs` ago
//! (`SaleBook::watched`; their count is the `seckill_reconciler_sales_watched` gauge):
//! - a reservation whose message the broker never confirmed (the process died between the
//!   reserve script and the confirm, or the confirm was lost) is published again. Never given
//!   back: a pending entry older than a timeout is no proof that its message is gone (consumer
//!   lag of minutes is normal in a spike), and the consumer is idempotent on the request id, so
//!   a second copy is harmless while a lost one would leave a buyer told 202 with nothing;
//! - a transfer of units between two buckets of a sale that its process left half done (it
//!   died, or Redis failed, between the steps) is finished (`buckets::Transfers::finish_stale`);
//! - an open sale missing in Redis is rebuilt, and a sale recovering from a loss of its Redis
//!   data ends its recovery once the broker holds no request of the lost data
//!   (`rebuild::look_after`);
//! - every `seckill.audit_interval_secs`, the open sales are audited, which keeps the
//!   disagreement metrics current.

use std::time::{Duration, Instant};

use actix_web::web;
use seckill_common::amqp::{BroadcastKind, OrderRequest};
use seckill_common::api::SaleWindow;
use seckill_common::keys::SaleBucket;
use seckill_common::trust::Peer;
use seckill_web::Ticker;
use tokio_util::sync::CancellationToken;

use crate::batcher::order_message;
use crate::sales::{Sale, now_ms};
use crate::state::AppState;
use crate::{audit, broadcast, rebuild};

pub async fn run(state: web::Data<AppState>, cancel: CancellationToken) {
    // Both at least 1: refused at start otherwise.
    let every = Duration::from_secs(state.settings.reconcile_interval_secs);
    let audit_every = Duration::from_secs(state.settings.audit_interval_secs);
    let mut last_audit = Instant::now();
    let mut ticker = Ticker::new(every);
    while ticker.tick(&cancel).await {
        let audit_now = last_audit.elapsed() >= audit_every;
        if audit_now {
            last_audit = Instant::now();
        }
        let watched = state.sales.watched(state.settings.ended_grace());
        metrics::gauge!("seckill_reconciler_sales_watched").set(watched.len() as f64);
        for sale in watched {
            for at in sale.buckets() {
                republish_unconfirmed(&state, at).await;
            }
            finish_transfers(&state, &sale).await;
            if let Err(e) = rebuild::look_after(&state, &sale).await {
                tracing::warn!(error = %e, goods_id = %sale.id(), "recovery check failed; next tick tries again");
            }
            if audit_now
                && sale.window_now() == SaleWindow::Open
                && let Err(e) = audit::audit(&state, &sale).await
            {
                tracing::warn!(error = %e, goods_id = %sale.id(), "audit failed");
            }
        }
    }
}

/// Transfers between the sale's buckets left unsettled for `seckill.reconcile_after_secs`.
async fn finish_transfers(state: &AppState, sale: &Sale) {
    if sale.goods.buckets <= 1 {
        return;
    }
    let after = Duration::from_secs(state.settings.reconcile_after_secs);
    let mut finished = 0;
    for from in sale.buckets() {
        match state.transfers.finish_stale(from, after).await {
            Ok(n) => finished += n,
            Err(e) => {
                tracing::warn!(error = %e, goods_id = %from.goods, bucket = from.bucket, "reconciler cannot finish transfers; next tick tries again")
            }
        }
    }
    // Their units arrived where buyers may have been told sold out meanwhile.
    if finished > 0 {
        sale.clear_sold_out();
        broadcast::announce(state, BroadcastKind::Restocked, sale.id()).await;
    }
}

async fn republish_unconfirmed(state: &AppState, at: SaleBucket) {
    let after_ms =
        i64::try_from(state.settings.reconcile_after_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    let g = at.goods;
    let stale = match state.gate.unconfirmed(at, now_ms().saturating_sub(after_ms)).await {
        Ok(stale) if stale.is_empty() => return,
        Ok(stale) => stale,
        Err(e) => return tracing::warn!(error = %e, goods_id = %g, "reconciler cannot read redis"),
    };
    let epoch = match state.gate.epoch(at).await {
        Ok(epoch) => epoch,
        Err(e) => return tracing::warn!(error = %e, goods_id = %g, "reconciler cannot read redis"),
    };
    for (user, request_id) in stale {
        let msg = OrderRequest::new(request_id, user, g, now_ms()).in_bucket(at).with_epoch(epoch);
        let Ok((body, properties)) = order_message(&[msg]) else { continue };
        match state.publisher.publish(Peer::Order, &state.names.orders_queue(), &body, properties).await {
            Ok(()) => {
                if let Err(e) = state.gate.confirmed(&[(at, user, request_id)]).await {
                    tracing::warn!(error = %e, "pending entry not cleared; it is published again later");
                }
                metrics::counter!("seckill_reservations_republished_total").increment(1);
                tracing::warn!(goods_id = %g, user_id = %user, %request_id,
                    "reservation without a confirmed message: published again");
            }
            Err(e) => {
                tracing::warn!(error = %e, goods_id = %g, "reconciler cannot publish; next tick tries again");
                return;
            }
        }
    }
}
