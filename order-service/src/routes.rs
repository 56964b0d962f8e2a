//! HTTP routes of order-service.

pub mod orders;

use actix_web::{HttpResponse, web};

use crate::fulfil::Fulfiller;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/readyz", web::get().to(readyz))
        .route("/api/orders", web::get().to(orders::list))
        .route("/api/orders/{order_id}", web::get().to(orders::get));
}

async fn readyz(fulfiller: web::Data<Fulfiller>) -> HttpResponse {
    let database = seckill_db::ping(fulfiller.pool()).await;
    let redis = seckill_infra::redis::ping(fulfiller.results().pool()).await;
    seckill_web::health::readiness(&[("database", database), ("redis", redis)])
}
