//! `POST /api/admin/goods`: publishing a sale. The row is created at stock-service (the
//! authority), then the sale's stock is loaded into Redis before the 201, so the sale can sell
//! the moment the admin hears it exists.

use actix_web::{HttpResponse, web};
use seckill_common::ErrorCode;
use seckill_common::api::NewGoods;
use seckill_infra::stock_client::StockError;
use seckill_web::{ApiError, AuthUser};

use crate::restore;
use crate::state::AppState;

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
    restore::load_new(&state, &goods).await?;
    state.sales.cache(goods.clone());
    tracing::info!(goods_id = %goods.id, stock = goods.stock_total, "sale published");
    Ok(HttpResponse::Created().json(goods))
}
