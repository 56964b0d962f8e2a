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
        .route("/internal/stock/release", web::post().to(internal::release))
        // The keys of a sale's reservations in flight can outgrow the usual body limit.
        .service(
            web::resource("/internal/stock/{goods_id}/held")
                .app_data(seckill_web::extract::json_config(internal::HELD_BODY_LIMIT))
                .route(web::post().to(internal::held)),
        );
}

async fn readyz(pool: web::Data<PgPool>) -> HttpResponse {
    seckill_web::health::readiness(&[("database", seckill_db::ping(&pool).await)])
}
