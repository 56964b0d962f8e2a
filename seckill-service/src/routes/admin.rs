//! The admin's routes: `POST /api/admin/goods` publishes a sale (the row is created at
//! stock-service, the authority, then the sale's stock is loaded into Redis before the 201, so
//! the sale can sell the moment the admin hears it exists); a sale's audit and repair.

use actix_web::{HttpResponse, web};
use seckill_common::api::NewGoods;
use seckill_common::{ErrorCode, GoodsId};
use seckill_infra::stock_client::StockError;
use seckill_web::{ApiError, AuthUser};

use crate::state::AppState;
use crate::{audit, rebuild, repair};

#[tracing::instrument(skip_all, fields(user_id = %user.id))]
pub async fn create_sale(
    state: web::Data<AppState>,
    user: AuthUser,
    body: web::Json<NewGoods>,
) -> Result<HttpResponse, ApiError> {
    user.require_admin()?;
    // Decided here, before stock-service is asked; stock-service decides again, on its own.
    let sale = body.validate().map_err(|e| ApiError::invalid(e.to_string()))?;
    let goods = state.stock.create_goods(&sale).await.map_err(|e| match e {
        StockError::Refused { status: 400, body } => ApiError::invalid(body.message),
        StockError::Refused { status: 403, body } => ApiError::new(ErrorCode::Forbidden, body.message),
        other => ApiError::unavailable("stock-service", other),
    })?;
    rebuild::load_new(&state, &goods).await?;
    state.sales.cache(goods.clone());
    tracing::info!(goods_id = %goods.id, stock = goods.stock_total, "sale published");
    Ok(HttpResponse::Created().json(goods))
}

/// `GET /api/admin/goods/{goods_id}/audit` (admin only).
pub async fn audit(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<GoodsId>,
) -> Result<HttpResponse, ApiError> {
    user.require_admin()?;
    // An unknown id is answered from the sale book (and its cache of unknown ids), touching
    // neither Redis nor stock-service.
    let sale = state.sales.get(*path).await?;
    Ok(HttpResponse::Ok().json(audit::audit(&state, &sale).await?))
}

/// `POST /api/admin/goods/{goods_id}/repair` (admin only): a recovery under way keeps its
/// held-back units (it ends by itself once the broker has no request of the lost data left).
pub async fn repair(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<GoodsId>,
) -> Result<HttpResponse, ApiError> {
    user.require_admin()?;
    let g = *path;
    let sale = state.sales.get(g).await?;
    let repaired = repair::repair(&state, &sale, false).await?;
    tracing::info!(goods_id = %g, user_id = %user.id, stock_before = ?repaired.stock_before,
        stock_after = ?repaired.stock_after, "sale repaired by an admin");
    Ok(HttpResponse::Ok().json(repaired))
}
