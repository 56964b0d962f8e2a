//! `GET /api/goods`, `GET /api/goods/{id}`, `POST /api/admin/goods`.

use actix_web::{HttpResponse, web};
use seckill_common::api::NewGoods;
use seckill_common::{ErrorCode, GoodsId};
use seckill_db::{PgPool, conn, query_error};
use seckill_web::{ApiError, AuthUser};

use crate::goods;

pub async fn list(pool: web::Data<PgPool>) -> Result<HttpResponse, ApiError> {
    let mut conn = conn(&pool).await?;
    let all = goods::list(&mut conn).await.map_err(query_error)?;
    Ok(HttpResponse::Ok().json(all))
}

pub async fn get(pool: web::Data<PgPool>, path: web::Path<GoodsId>) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let mut conn = conn(&pool).await?;
    match goods::find(&mut conn, id).await.map_err(query_error)? {
        Some(g) => Ok(HttpResponse::Ok().json(g)),
        None => Err(ApiError::new(ErrorCode::GoodsNotFound, format!("no goods with id {id}"))),
    }
}

#[tracing::instrument(skip_all, fields(user_id = %user.id))]
pub async fn create(
    pool: web::Data<PgPool>,
    user: AuthUser,
    body: web::Json<NewGoods>,
) -> Result<HttpResponse, ApiError> {
    user.require_admin()?;
    body.validate().map_err(ApiError::invalid)?;
    let mut conn = conn(&pool).await?;
    let created = goods::insert(&mut conn, &body).await.map_err(query_error)?;
    tracing::info!(goods_id = %created.id, stock = created.stock_total, "goods created");
    Ok(HttpResponse::Created().json(created))
}
