//! HTTP routes of stock-service.

pub mod goods;
pub mod internal;

use actix_web::{HttpResponse, web};
use seckill_db::PgPool;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/readyz", web::get().to(readyz))
        .route("/api/goods", web::get().to(goods::list))
        .route("/api/goods/{goods_id}", web::get().to(goods::get))
        .route("/api/admin/goods", web::post().to(goods::create))
        .route("/internal/stock/deduct", web::post().to(internal::deduct))
        .route("/internal/stock/deduct-batch", web::post().to(internal::deduct_batch))
        .route("/internal/stock/release", web::post().to(internal::release));
}

async fn readyz(pool: web::Data<PgPool>) -> HttpResponse {
    seckill_web::health::readiness(&[("database", seckill_db::ping(&pool).await)])
}
