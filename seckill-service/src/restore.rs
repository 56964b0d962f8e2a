//! Redis is a cache, never the truth: loading a sale into Redis, rebuilding it from the
//! authorities after Redis lost its data, ending that recovery, and the operator's audit and
//! repair.
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

use std::sync::atomic::Ordering;

use actix_web::web;
use seckill_common::amqp::{BroadcastKind, MAX_BATCH_REQUESTS, retry_queue};
use seckill_common::api::{
    AuthorityAudit, Goods, HeldResponse, QueueAudit, RedisAudit, SaleAudit, SaleRepair, SaleWindow,
};
use seckill_common::scripts::Epoch;
use seckill_common::{ErrorCode, GoodsId};
use seckill_web::ApiError;

use crate::broadcast;
use crate::sales::{Sale, not_found, now_ms};
use crate::state::AppState;

/// How long a rebuild may hold the sale's lock before another instance may take over.
const REBUILD_LOCK_MS: u64 = 15_000;

fn unavailable(dependency: &'static str) -> impl FnOnce(seckill_infra::upstream::UpstreamError) -> ApiError {
    move |e| ApiError::unavailable(dependency, e)
}

/// A sale created just now: nothing of it can be in flight, so its whole stock goes on sale.
pub async fn load_new(state: &AppState, goods: &Goods) -> Result<(), ApiError> {
    state.gate.load(goods.id, goods.stock_available, Epoch::new(now_ms()), None).await?;
    Ok(())
}

/// Starts rebuilding a sale missing in Redis, unless that is under way (here or in another
/// instance), and returns at once: the buyers are told to try again meanwhile.
pub async fn start_rebuild(state: &web::Data<AppState>, g: GoodsId) -> Result<(), ApiError> {
    if !state.gate.lock_rebuild(g, REBUILD_LOCK_MS).await? {
        return Ok(());
    }
    let state = state.clone();
    tokio::spawn(async move {
        if let Err(e) = rebuild_locked(&state, g).await {
            tracing::warn!(goods_id = %g, error = %e, "rebuild failed; the next buyer or the reconciler starts it again");
        }
        unlock(&state, g).await;
    });
    Ok(())
}

/// Rebuilds a sale missing in Redis and returns when it is done (at start, and for a repair).
pub async fn rebuild(state: &AppState, g: GoodsId) -> Result<(), ApiError> {
    if !state.gate.lock_rebuild(g, REBUILD_LOCK_MS).await? {
        return Err(being_restored());
    }
    let rebuilt = rebuild_locked(state, g).await;
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

async fn rebuild_locked(state: &AppState, g: GoodsId) -> Result<(), ApiError> {
    if state.gate.stock(g).await?.is_some() {
        return Ok(());
    }
    // Nobody can reserve until the stock key exists, so everything below is read before the
    // sale sells again. First the requests waiting in the broker, then a pause: the requests a
    // consumer held unacknowledged at that count (the broker counts only those waiting) are
    // claimed within a batch's time, and a claimed lost request is registered in flight,
    // counted below. A request counted twice holds a unit back for a while, never too few.
    let (waiting, _) = waiting_requests(state).await?;
    tokio::time::sleep(state.settings.rebuild_settle()).await;
    // The buyers who hold an order, so a repeat click is told REPEATED.
    let orders = state.orders.all_active(g).await.map_err(unavailable("order-service"))?;
    state.gate.restore_orders(g, &orders).await?;
    let snapshot = state.gate.snapshot(g).await?;
    let in_flight = i64::try_from(snapshot.in_flight.len()).unwrap_or(i64::MAX);
    let authority = state.stock.held(g, snapshot.in_flight).await.map_err(authority_error(g))?;
    // A message holds one request or a batch: the most a batch may carry bounds them.
    let holdback = i64::from(waiting).saturating_mul(MAX_BATCH_REQUESTS as i64);
    let stock = expected_stock(&authority, in_flight, holdback);
    if state.gate.load(g, stock, Epoch::new(now_ms()), Some(holdback)).await? {
        metrics::counter!("seckill_sales_rebuilt_total").increment(1);
        tracing::warn!(goods_id = %g, stock, held_back = holdback, in_flight, active_orders = orders.len(),
            available = authority.stock_available, "sale missing in redis: rebuilt from the authorities");
        if stock > 0 {
            back_on_sale(state, g).await;
        }
    }
    Ok(())
}

/// What the Redis stock should be: the authority's available units, less the `in_flight`
/// reservations not deducted there yet, less the units held back.
fn expected_stock(authority: &HeldResponse, in_flight: i64, holdback: i64) -> i64 {
    (authority.stock_available - (in_flight - authority.keys_held) - holdback).max(0)
}

/// Buy requests waiting in the broker (the orders queue and its retry queue), and the orders
/// queue's consumers.
async fn waiting_requests(state: &AppState) -> Result<(u32, u32), ApiError> {
    let queues = [state.names.orders_queue(), retry_queue(&state.names.orders_queue(), state.retry_delay_ms)];
    state.publisher.queue_counts(&queues).await.map_err(|e| ApiError::unavailable("broker", e))
}

/// At start: every sale stock-service lists is cached; those not ended are loaded into Redis
/// if they are missing there (a Redis that restarted with this service). A sale that cannot be
/// loaded now (order-service still starting) loads on its first buyer's request.
pub async fn warm_up(state: &AppState) -> anyhow::Result<usize> {
    let mut loaded = 0;
    for sale in state.sales.cache_all().await? {
        if sale.window_now() == SaleWindow::Ended {
            continue;
        }
        match state.gate.stock(sale.id()).await {
            Ok(Some(_)) => loaded += 1,
            Ok(None) => match rebuild(state, sale.id()).await {
                Ok(()) => loaded += 1,
                Err(e) => tracing::warn!(goods_id = %sale.id(), error = %e, "sale not loaded at start"),
            },
            Err(e) => return Err(e.into()),
        }
    }
    Ok(loaded)
}

/// The reconciler's look at each sale, every tick: an open sale missing in Redis is rebuilt
/// (without waiting for a buyer: the order consumer serves the lost requests meanwhile); a
/// recovering sale ends its recovery once the broker has had no buy request waiting at two
/// looks in a row (and the publishes of the old epoch had their confirm timeout to land): the
/// held-back units are released by a repair from the authority.
pub async fn look_after(state: &web::Data<AppState>, sale: &Sale) -> Result<(), ApiError> {
    let g = sale.id();
    // Two cheap reads a tick; the snapshot (a scan of the reservations) only at the end.
    let (recovering, loaded) = state.gate.recovering(g).await?;
    if !loaded && sale.window_now() == SaleWindow::Open {
        return start_rebuild(state, g).await;
    }
    let epoch = match (recovering, state.gate.epoch(g).await?) {
        (true, Some(epoch)) => epoch,
        _ => {
            sale.queue_seen_empty.store(false, Ordering::Relaxed);
            return Ok(());
        }
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
    let repaired = repair(state, g, true).await?;
    sale.queue_seen_empty.store(false, Ordering::Relaxed);
    tracing::info!(goods_id = %g, stock_before = ?repaired.stock_before, stock_after = ?repaired.stock_after,
        "recovery ended: no request of the lost data is left in the broker");
    Ok(())
}

/// Sets the sale's Redis data from the authorities: the active orders' buyers and results
/// written back, the stock corrected to what the authority has less what is in flight (less
/// the held-back units, unless `end_recovery`). A sale missing in Redis is rebuilt instead.
pub async fn repair(state: &AppState, g: GoodsId, end_recovery: bool) -> Result<SaleRepair, ApiError> {
    if state.gate.stock(g).await?.is_none() {
        rebuild(state, g).await?;
        let audit = audit(state, g).await?;
        return Ok(SaleRepair {
            stock_before: None,
            stock_after: audit.redis.stock,
            orders_restored: usize::try_from(audit.redis.reservations_ordered).unwrap_or_default(),
            audit,
        });
    }
    let orders = state.orders.all_active(g).await.map_err(unavailable("order-service"))?;
    state.gate.restore_orders(g, &orders).await?;
    let snapshot = state.gate.snapshot(g).await?;
    let (Some(stock), Some(epoch)) = (snapshot.stock, snapshot.epoch) else {
        return Err(ApiError::new(ErrorCode::Busy, "the sale's redis data changed meanwhile, try again"));
    };
    let in_flight = i64::try_from(snapshot.in_flight.len()).unwrap_or(i64::MAX);
    let authority = state.stock.held(g, snapshot.in_flight).await.map_err(unavailable("stock-service"))?;
    let holdback = if end_recovery { 0 } else { snapshot.holdback.unwrap_or(0) };
    let target = expected_stock(&authority, in_flight, holdback);
    let after = state.gate.adjust(g, epoch, target - stock, end_recovery).await?;
    if after.is_some_and(|s| s != stock) {
        metrics::counter!("seckill_sales_repaired_total").increment(1);
        tracing::warn!(goods_id = %g, stock_before = stock, stock_after = ?after, "redis stock repaired from the authority");
    }
    if after.is_some_and(|s| s > 0) {
        back_on_sale(state, g).await;
    }
    Ok(SaleRepair {
        stock_before: Some(stock),
        stock_after: after,
        orders_restored: orders.len(),
        audit: audit(state, g).await?,
    })
}

/// Every replica's sold-out flag down: the sale has stock again.
async fn back_on_sale(state: &AppState, g: GoodsId) {
    if let Some(sale) = state.sales.cached(g) {
        sale.clear_sold_out();
    }
    broadcast::announce(state, BroadcastKind::Restocked, g).await;
}

/// How Redis, the stock ledger, the orders and the queue compare for one sale. Also sets the
/// metrics an alert watches: `seckill_audit_differences{goods_id}` (0 when all agree) and
/// `seckill_audit_stock_difference{goods_id}` (Redis stock less what it should be).
pub async fn audit(state: &AppState, g: GoodsId) -> Result<SaleAudit, ApiError> {
    let snapshot = state.gate.snapshot(g).await?;
    let in_flight = i64::try_from(snapshot.in_flight.len()).unwrap_or(i64::MAX);
    let authority = state.stock.held(g, snapshot.in_flight).await.map_err(authority_error(g))?;
    let active_orders = state.orders.count_active(g).await.map_err(unavailable("order-service"))?;
    let (waiting, consumers) = waiting_requests(state).await?;
    let holdback = snapshot.holdback.unwrap_or(0);
    let expected = expected_stock(&authority, in_flight, holdback);

    let mut differences = Vec::new();
    match snapshot.stock {
        None => differences.push("the sale is not loaded in redis".to_owned()),
        Some(stock) if stock != expected => differences.push(format!(
            "redis stock is {stock}, the authority's figures give {expected} (available {}, {} in flight \
             not deducted, {holdback} held back)",
            authority.stock_available,
            in_flight - authority.keys_held
        )),
        Some(_) => {}
    }
    if snapshot.ordered != active_orders {
        differences.push(format!(
            "redis marks {} reservations as orders; the order database has {active_orders} active orders",
            snapshot.ordered
        ));
    }
    if authority.held_units != active_orders + authority.keys_held {
        differences.push(format!(
            "the ledger holds {} units for {active_orders} active orders and {} deducted requests in flight",
            authority.held_units, authority.keys_held
        ));
    }
    if authority.stock_total != authority.stock_available + authority.held_units {
        differences.push(format!(
            "stock-service: total {} != available {} + held {}",
            authority.stock_total, authority.stock_available, authority.held_units
        ));
    }
    if snapshot.holdback.is_some() {
        differences.push(format!("recovering from a loss of redis data: {holdback} units held back"));
    }
    let label = g.to_string();
    metrics::gauge!("seckill_audit_differences", "goods_id" => label.clone()).set(differences.len() as f64);
    metrics::gauge!("seckill_audit_stock_difference", "goods_id" => label)
        .set(snapshot.stock.map_or(-(expected as f64), |s| (s - expected) as f64));
    Ok(SaleAudit {
        goods_id: g,
        redis: RedisAudit {
            loaded: snapshot.stock.is_some(),
            epoch: snapshot.epoch,
            stock: snapshot.stock,
            holdback: snapshot.holdback,
            reservations_ordered: snapshot.ordered,
            reservations_in_flight: in_flight,
            pending: snapshot.pending,
        },
        authority: AuthorityAudit {
            stock_total: authority.stock_total,
            stock_available: authority.stock_available,
            ledger_held: authority.held_units,
            active_orders,
            in_flight_deducted: authority.keys_held,
        },
        queue: QueueAudit { waiting, consumers },
        expected_redis_stock: expected,
        agrees: differences.is_empty(),
        differences,
    })
}

/// stock-service's answer about a sale: no such goods is a 404, anything else an outage.
fn authority_error(g: GoodsId) -> impl FnOnce(seckill_infra::upstream::UpstreamError) -> ApiError {
    move |e| if e.is_not_found() { not_found(g) } else { ApiError::unavailable("stock-service", e) }
}

/// `GET /api/admin/goods/{goods_id}/audit` (admin only).
pub async fn audit_route(
    state: web::Data<AppState>,
    user: seckill_web::AuthUser,
    path: web::Path<GoodsId>,
) -> Result<actix_web::HttpResponse, ApiError> {
    user.require_admin()?;
    // An unknown id is answered from the sale book (and its cache of unknown ids), touching
    // neither Redis nor stock-service.
    let sale = state.sales.get(*path).await?;
    Ok(actix_web::HttpResponse::Ok().json(audit(&state, sale.id()).await?))
}

/// `POST /api/admin/goods/{goods_id}/repair` (admin only): a recovery under way keeps its
/// held-back units (it ends by itself once the broker has no request of the lost data left).
pub async fn repair_route(
    state: web::Data<AppState>,
    user: seckill_web::AuthUser,
    path: web::Path<GoodsId>,
) -> Result<actix_web::HttpResponse, ApiError> {
    user.require_admin()?;
    let g = *path;
    state.sales.get(g).await?;
    let repaired = repair(&state, g, false).await?;
    tracing::info!(goods_id = %g, user_id = %user.id, stock_before = ?repaired.stock_before,
        stock_after = ?repaired.stock_after, "sale repaired by an admin");
    Ok(actix_web::HttpResponse::Ok().json(repaired))
}
