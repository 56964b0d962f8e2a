//! `GET /api/goods`, `GET /api/goods/{id}`, `POST /internal/stock/goods`.

use actix_web::http::header::ContentType;
use actix_web::{HttpResponse, web};
use seckill_common::GoodsId;
use seckill_common::api::NewGoods;
use seckill_db::conn;
use seckill_web::ApiError;
use seckill_web::trust::ServiceCaller;

use super::goods_not_found;
use crate::goods;
use crate::state::AppState;

/// `GET /api/goods`, from [`ListCache`](goods::ListCache) while it is fresh.
pub async fn list(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let json = state
        .goods_list
        .get_or_refill(|| async {
            let mut conn = conn(&state.pool).await?;
            let all = goods::list(&mut conn).await?;
            serde_json::to_vec(&all).map(web::Bytes::from).map_err(ApiError::internal)
        })
        .await?;
    Ok(HttpResponse::Ok().content_type(ContentType::json()).body(json))
}

pub async fn get(state: web::Data<AppState>, path: web::Path<GoodsId>) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let mut conn = conn(&state.pool).await?;
    let found = goods::find(&mut conn, id).await?.ok_or_else(|| goods_not_found(id))?;
    Ok(HttpResponse::Ok().json(found))
}

/// `POST /internal/stock/goods`: seckill-service publishing a sale (it checked the admin).
pub async fn create(
    _caller: ServiceCaller,
    state: web::Data<AppState>,
    body: web::Json<NewGoods>,
) -> Result<HttpResponse, ApiError> {
    body.validate().map_err(ApiError::invalid)?;
    let mut conn = conn(&state.pool).await?;
    let created = goods::insert(&mut conn, &body).await?;
    // The creator lists the goods next: not the list from before.
    state.goods_list.invalidate();
    tracing::info!(goods_id = %created.id, stock = created.stock_total, "goods created");
    Ok(HttpResponse::Created().json(created))
}
