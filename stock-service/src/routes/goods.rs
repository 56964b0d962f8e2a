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
    let sale = body.validate().map_err(|e| ApiError::invalid(e.to_string()))?;
    let mut conn = conn(&state.pool).await?;
    let created = goods::insert(&mut conn, &sale).await.map_err(insert_error)?;
    // The creator lists the goods next: not the list from before.
    state.goods_list.invalidate();
    tracing::info!(goods_id = %created.id, stock = created.stock_total, "goods created");
    Ok(HttpResponse::Created().json(created))
}

/// A database error from writing a sale. Validation keeps out what the database cannot store;
/// should a value slip past it (a rule the database has that `validate` lacks), the data
/// exception is still the client's input: 400, not a 500 that seckill-service would pass on
/// as stock-service being unavailable.
fn insert_error(e: seckill_db::QueryError) -> ApiError {
    let e = seckill_db::DbError::from(e);
    if e.is_bad_value() {
        tracing::warn!(error.cause_chain = %format_args!("{:#}", anyhow::Error::from(e)), "goods refused by the database");
        ApiError::invalid("a field of the sale holds a value the database cannot store")
    } else {
        e.into()
    }
}
