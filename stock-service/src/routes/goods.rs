//! `GET /api/goods`, `GET /api/goods/{id}`, `POST /api/admin/goods`.

use actix_web::http::header::ContentType;
use actix_web::{HttpResponse, web};
use seckill_common::api::NewGoods;
use seckill_common::{ErrorCode, GoodsId};
use seckill_db::{PgPool, conn, query_error};
use seckill_web::ApiError;
use seckill_web::trust::ServiceCaller;

use crate::goods::{self, ListCache};

/// `GET /api/goods`, from [`ListCache`] while it is fresh.
pub async fn list(pool: web::Data<PgPool>, cache: web::Data<ListCache>) -> Result<HttpResponse, ApiError> {
    let json = cache
        .get_or_refill(|| async {
            let mut conn = conn(&pool).await?;
            let all = goods::list(&mut conn).await.map_err(query_error)?;
            serde_json::to_vec(&all).map(web::Bytes::from).map_err(ApiError::internal)
        })
        .await?;
    Ok(HttpResponse::Ok().content_type(ContentType::json()).body(json))
}

pub async fn get(pool: web::Data<PgPool>, path: web::Path<GoodsId>) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let mut conn = conn(&pool).await?;
    match goods::find(&mut conn, id).await.map_err(query_error)? {
        Some(g) => Ok(HttpResponse::Ok().json(g)),
        None => Err(ApiError::new(ErrorCode::GoodsNotFound, format!("no goods with id {id}"))),
    }
}

/// `POST /internal/stock/goods`: seckill-service publishing a sale (it checked the admin).
pub async fn create(
    _caller: ServiceCaller,
    pool: web::Data<PgPool>,
    cache: web::Data<ListCache>,
    body: web::Json<NewGoods>,
) -> Result<HttpResponse, ApiError> {
    body.validate().map_err(ApiError::invalid)?;
    let mut conn = conn(&pool).await?;
    let created = goods::insert(&mut conn, &body).await.map_err(query_error)?;
    // The creator lists the goods next: not the list from before.
    cache.invalidate();
    tracing::info!(goods_id = %created.id, stock = created.stock_total, "goods created");
    Ok(HttpResponse::Created().json(created))
}
