//! The internal stock API: order-service deducts (one key or a batch) and releases;
//! seckill-service creates sales and reads a sale's counts. Not routed by the gateway; each
//! route names the one service whose credential it takes (a NetworkPolicy narrows who can
//! even connect in a cluster).

use actix_web::{HttpResponse, web};
use seckill_common::api::{
    DeductBatchRequest, DeductBatchResponse, DeductOutcome, DeductRequest, DeductResponse, HeldRequest,
    ReleaseRequest, ReleaseResponse,
};
use seckill_common::{ErrorCode, GoodsId};
use seckill_db::conn;
use seckill_web::ApiError;

use super::goods_not_found;
use crate::ledger;
use crate::state::AppState;

fn check_items(items: &[DeductRequest]) -> Result<(), ApiError> {
    if items.len() > ledger::MAX_BATCH {
        return Err(ApiError::invalid(format!("at most {} items per batch", ledger::MAX_BATCH)));
    }
    if let Some(bad) = items.iter().find(|i| i.quantity <= 0) {
        return Err(ApiError::invalid(format!("quantity of {} must be positive", bad.order_key)));
    }
    Ok(())
}

#[tracing::instrument(skip_all, fields(order_key = %body.order_key, goods_id = %body.goods_id))]
pub async fn deduct(
    state: web::Data<AppState>,
    body: web::Json<DeductRequest>,
) -> Result<HttpResponse, ApiError> {
    let item = body.into_inner();
    check_items(&[item])?;
    let mut conn = conn(&state.pool).await?;
    let results = ledger::deduct_batch(&mut conn, &[item]).await?;
    match results.first().map(|r| r.outcome) {
        Some(DeductOutcome::Deducted) => Ok(HttpResponse::Ok().json(DeductResponse { deducted: true })),
        Some(DeductOutcome::UnknownGoods) => Err(goods_not_found(item.goods_id)),
        Some(DeductOutcome::Released) => Err(ApiError::new(
            ErrorCode::KeyReleased,
            "this order key was deducted and released; it cannot deduct again",
        )),
        Some(DeductOutcome::OutOfStock) | None => {
            Err(ApiError::new(ErrorCode::OutOfStock, "not enough stock"))
        }
    }
}

#[tracing::instrument(skip_all, fields(items = body.items.len()))]
pub async fn deduct_batch(
    state: web::Data<AppState>,
    body: web::Json<DeductBatchRequest>,
) -> Result<HttpResponse, ApiError> {
    check_items(&body.items)?;
    let mut conn = conn(&state.pool).await?;
    let results = ledger::deduct_batch(&mut conn, &body.items).await?;
    Ok(HttpResponse::Ok().json(DeductBatchResponse { results }))
}

#[tracing::instrument(skip_all, fields(order_key = %body.order_key))]
pub async fn release(
    state: web::Data<AppState>,
    body: web::Json<ReleaseRequest>,
) -> Result<HttpResponse, ApiError> {
    let mut conn = conn(&state.pool).await?;
    let released = ledger::release(&mut conn, body.order_key).await?;
    if released {
        tracing::info!("stock released");
    }
    Ok(HttpResponse::Ok().json(ReleaseResponse { released }))
}

/// Most keys one `held` call may ask about: a sale's reservations in flight, far fewer.
const MAX_HELD_KEYS: usize = 100_000;
/// Its body: that many keys as JSON strings.
pub const HELD_BODY_LIMIT: usize = MAX_HELD_KEYS * 40 + 1_024;

/// `POST /internal/stock/{goods_id}/held`: the sale's counts, and how many of the given
/// requests hold a unit, read together (seckill-service's audit and repair of Redis).
pub async fn held(
    state: web::Data<AppState>,
    path: web::Path<GoodsId>,
    body: web::Json<HeldRequest>,
) -> Result<HttpResponse, ApiError> {
    let g = path.into_inner();
    if body.order_keys.len() > MAX_HELD_KEYS {
        return Err(ApiError::invalid(format!("at most {MAX_HELD_KEYS} order keys")));
    }
    let mut conn = conn(&state.pool).await?;
    let counts =
        ledger::counts(&mut conn, g.get(), &body.order_keys).await?.ok_or_else(|| goods_not_found(g))?;
    Ok(HttpResponse::Ok().json(counts))
}
