//! Redis is a cache, never the truth: loading a sale into Redis, rebuilding it from the
//! authorities after Redis lost its data, and ending that recovery.
//!
//! What is counted, and where (docs/DECISIONS.md has the reasoning):
//! - Redis stock = units the authority has available, less the reservations not yet deducted
//!   there, less the units held back while recovering.
//! - After a loss, the requests that were accepted but still waited in the broker are invisible
//!   to both databases and to Redis. The broker's count of waiting messages bounds them (each
//!   holds at most `MAX_BATCH_REQUESTS`): that many units are held back from the rebuilt
//!   stock, so nobody is accepted for a unit one of them will take (the ones a consumer
//!   already holds are registered in flight when it claims them, and counted as such). Each
//!   such request, when the consumer meets it, takes its unit out of the held-back ones. When
//!   the broker has had no buy request waiting at two looks in a row, the recovery ends: the
//!   stock is set again from the authority, and the units held back for nothing are on sale
//!   again.
//! - The buyers who hold an active order come from order-service, so a repeat click is told
//!   REPEATED and every result agrees with the orders.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use actix_web::web;
use seckill_common::amqp::{BroadcastKind, MAX_BATCH_REQUESTS, retry_queue};
use seckill_common::api::{Goods, HeldResponse, SaleWindow};
use seckill_common::keys::SaleBucket;
use seckill_common::scripts::Epoch;
use seckill_common::{ErrorCode, GoodsId};
use seckill_web::ApiError;

use crate::broadcast;
use crate::gate::Recovery;
use crate::repair::repair;
use crate::sales::{Sale, not_found, now_ms};
use crate::snapshot::SaleSnapshot;
use crate::state::AppState;

/// How long a rebuild may hold the sale's lock before another instance may take over.
const REBUILD_LOCK_MS: u64 = 15_000;

pub(crate) fn unavailable(
    dependency: &'static str,
) -> impl FnOnce(seckill_infra::upstream::UpstreamError) -> ApiError {
    move |e| ApiError::unavailable(dependency, e)
}

/// A sale created just now: nothing of it can be in flight, so its whole stock goes on sale,
/// split over its buckets (the rest of the division to bucket 0), all of one epoch.
pub async fn load_new(state: &AppState, goods: &Goods) -> Result<(), ApiError> {
    let epoch = Epoch::new(now_ms());
    let buckets: Vec<SaleBucket> = SaleBucket::all(goods.id, goods.buckets).collect();
    for (at, units) in buckets.iter().zip(split(goods.stock_available, buckets.len())) {
        state.gate.load(*at, units, epoch, None).await?;
    }
    Ok(())
}

/// `units` over `parts` parts (at least one): as even as can be, the rest of the division to
/// the first.
pub(crate) fn split(units: i64, parts: usize) -> Vec<i64> {
    let n = i64::try_from(parts.max(1)).unwrap_or(1);
    let mut shares = vec![units / n; parts.max(1)];
    shares[0] += units % n;
    shares
}

/// Starts rebuilding a sale missing in Redis (some or all of its buckets), unless that is
/// under way (here or in another instance), and returns at once: the buyers are told to try
/// again meanwhile.
pub async fn start_rebuild(state: &web::Data<AppState>, sale: &Arc<Sale>) -> Result<(), ApiError> {
    let g = sale.id();
    if !state.gate.lock_rebuild(g, REBUILD_LOCK_MS).await? {
        return Ok(());
    }
    let (state, sale) = (state.clone(), sale.clone());
    tokio::spawn(async move {
        if let Err(e) = rebuild_locked(&state, &sale).await {
            tracing::warn!(goods_id = %g, error = %e, "rebuild failed; the next buyer or the reconciler starts it again");
        }
        unlock(&state, g).await;
    });
    Ok(())
}

/// Rebuilds a sale missing in Redis and returns when it is done (at start, and for a repair).
pub async fn rebuild(state: &AppState, sale: &Sale) -> Result<(), ApiError> {
    let g = sale.id();
    if !state.gate.lock_rebuild(g, REBUILD_LOCK_MS).await? {
        return Err(being_restored());
    }
    let rebuilt = rebuild_locked(state, sale).await;
    unlock(state, g).await;
    rebuilt
}

pub fn being_restored() -> ApiError {
    ApiError::new(ErrorCode::Busy, "the sale is being restored, try again in a moment")
}

async fn unlock(state: &AppState, g: GoodsId) {
    if let Err(e) = state.gate.unlock_rebuild(g).await {
        tracing::warn!(error = %e, goods_id = %g, "rebuild lock not released; it lapses by itself");
    }
}

/// Loads the buckets of the sale that Redis lost (on a cluster, a node may lose some of them
/// and keep the others). The lost buckets get what the authorities say Redis should hold, less
/// what the buckets still loaded hold or are sending on its way to another.
async fn rebuild_locked(state: &AppState, sale: &Sale) -> Result<(), ApiError> {
    let g = sale.id();
    let buckets = sale.buckets();
    let stocks = state.gate.stocks(&buckets).await?;
    let lost: Vec<SaleBucket> =
        buckets.iter().zip(&stocks).filter(|(_, stock)| stock.is_none()).map(|(at, _)| *at).collect();
    if lost.is_empty() {
        return Ok(());
    }
    // Nobody can reserve in a lost bucket until its stock key exists, so everything below is
    // read before it sells again. First the requests waiting in the broker, then a pause: the
    // requests a consumer held unacknowledged at that count (the broker counts only those
    // waiting) are claimed within a batch's time, and a claimed lost request is registered in
    // flight, counted below. A request counted twice holds a unit back for a while, never too
    // few.
    let (waiting, _) = waiting_requests(state).await?;
    tokio::time::sleep(state.settings.rebuild_settle()).await;
    // The buyers who hold an order, so a repeat click is told REPEATED.
    let orders = state.orders.all_active(g).await.map_err(unavailable("order-service"))?;
    state.gate.restore_orders(&orders, |u| sale.bucket_of(u)).await?;
    let snapshot = SaleSnapshot::take(state, &buckets).await?;
    let in_flight = snapshot.in_flight();
    let in_flight_count = i64::try_from(in_flight.len()).unwrap_or(i64::MAX);
    let authority = state.stock.held(g, in_flight).await.map_err(authority_error(g))?;
    // A message holds one request or a batch: the most a batch may carry bounds them. Those
    // units are kept out of the stock once, whatever the buckets; only a lost bucket's requests
    // are lost, and any one lost bucket may hold all of them, so each gets the whole count for
    // its claims to take from (a counter, not units: the stock is not counted twice).
    let holdback = i64::from(waiting).saturating_mul(MAX_BATCH_REQUESTS as i64);
    let expected = expected_stock(&authority, in_flight_count, holdback);
    let kept = snapshot.loaded_stock() + snapshot.in_transit();
    let remainder = (expected - kept).max(0);
    let epoch = Epoch::new(now_ms());
    let mut loaded = false;
    for (at, stock) in lost.iter().zip(split(remainder, lost.len())) {
        if state.gate.load(*at, stock, epoch, Some(holdback)).await? {
            loaded = true;
            tracing::warn!(goods_id = %g, bucket = at.bucket, stock, held_back = holdback, in_flight = in_flight_count,
                active_orders = orders.len(), available = authority.stock_available, kept_by_other_buckets = kept,
                "sale missing in redis: rebuilt from the authorities");
        }
    }
    if loaded {
        metrics::counter!("seckill_sales_rebuilt_total").increment(1);
        if remainder > 0 {
            back_on_sale(state, g).await;
        }
    }
    Ok(())
}

/// What the Redis stock should be: the authority's available units, less the `in_flight`
/// reservations not deducted there yet, less the units held back.
pub(crate) fn expected_stock(authority: &HeldResponse, in_flight: i64, holdback: i64) -> i64 {
    (authority.stock_available - (in_flight - authority.keys_held) - holdback).max(0)
}

/// Buy requests waiting in the broker (the orders queue and its retry queue), and the orders
/// queue's consumers.
pub(crate) async fn waiting_requests(state: &AppState) -> Result<(u32, u32), ApiError> {
    let queues = [state.names.orders_queue(), retry_queue(&state.names.orders_queue(), state.retry_delay_ms)];
    state.publisher.queue_counts(&queues).await.map_err(|e| ApiError::unavailable("broker", e))
}

/// At start: the sales the upkeep looks after are cached (not the ones that ended before the
/// grace period: see `sales`); those not ended are loaded into Redis if they are missing there
/// (a Redis that restarted with this service). A sale that cannot be loaded now (order-service
/// still starting) loads on its first buyer's request.
pub async fn warm_up(state: &AppState) -> anyhow::Result<usize> {
    let mut loaded = 0;
    for sale in state.sales.cache_watched(state.settings.ended_grace()).await? {
        if sale.window_now() == SaleWindow::Ended {
            continue;
        }
        if state.gate.stocks(&sale.buckets()).await?.iter().all(Option::is_some) {
            loaded += 1;
            continue;
        }
        match rebuild(state, &sale).await {
            Ok(()) => loaded += 1,
            Err(e) => tracing::warn!(goods_id = %sale.id(), error = %e, "sale not loaded at start"),
        }
    }
    Ok(loaded)
}

/// The reconciler's look at each sale, every tick: an open sale missing in Redis is rebuilt
/// (without waiting for a buyer: the order consumer serves the lost requests meanwhile); a
/// recovering sale ends its recovery once the broker has had no buy request waiting at two
/// looks in a row (and the publishes of the old epoch had their confirm timeout to land): the
/// held-back units are released by a repair from the authority.
pub async fn look_after(state: &web::Data<AppState>, sale: &Arc<Sale>) -> Result<(), ApiError> {
    let g = sale.id();
    let buckets = sale.buckets();
    // Two cheap reads a tick (a bucket); the snapshot (a scan of the reservations) only at
    // the end.
    let Recovery { held_back, loaded } = state.gate.recovering(&buckets).await?;
    if !loaded && sale.window_now() == SaleWindow::Open {
        return start_rebuild(state, sale).await;
    }
    let mut newest: Option<Epoch> = None;
    if held_back {
        for at in &buckets {
            if let Some(e) = state.gate.epoch(*at).await?
                && newest.is_none_or(|n| e.loaded_at_ms() > n.loaded_at_ms())
            {
                newest = Some(e);
            }
        }
    }
    let Some(epoch) = newest else {
        sale.queue_seen_empty.store(false, Ordering::Relaxed);
        return Ok(());
    };
    if now_ms() - epoch.loaded_at_ms() < i64::try_from(state.confirm_timeout_ms).unwrap_or(i64::MAX) {
        return Ok(());
    }
    let (waiting, _) = waiting_requests(state).await?;
    if waiting > 0 {
        sale.queue_seen_empty.store(false, Ordering::Relaxed);
        return Ok(());
    }
    if !sale.queue_seen_empty.swap(true, Ordering::Relaxed) {
        return Ok(());
    }
    let repaired = repair(state, sale, true).await?;
    sale.queue_seen_empty.store(false, Ordering::Relaxed);
    tracing::info!(goods_id = %g, stock_before = ?repaired.stock_before, stock_after = ?repaired.stock_after,
        "recovery ended: no request of the lost data is left in the broker");
    Ok(())
}

/// Every replica's sold-out flag down: the sale has stock again.
pub(crate) async fn back_on_sale(state: &AppState, g: GoodsId) {
    if let Some(sale) = state.sales.cached(g) {
        sale.clear_sold_out();
    }
    broadcast::announce(state, BroadcastKind::Restocked, g).await;
}

/// stock-service's answer about a sale: no such goods is a 404, anything else an outage.
pub(crate) fn authority_error(g: GoodsId) -> impl FnOnce(seckill_infra::upstream::UpstreamError) -> ApiError {
    move |e| if e.is_not_found() { not_found(g) } else { ApiError::unavailable("stock-service", e) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stock_is_split_evenly_with_the_rest_to_the_first_bucket() {
        assert_eq!(split(10, 4), [4, 2, 2, 2]);
        assert_eq!(split(3, 4), [3, 0, 0, 0]);
        assert_eq!(split(8, 1), [8]);
        assert_eq!(split(0, 0), [0], "at least one part");
    }
}
