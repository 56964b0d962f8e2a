//! HTTP routes of order-service.

pub mod internal;
pub mod orders;

use actix_web::{HttpResponse, web};

use seckill_common::trust::Peer;
use seckill_web::trust::internal_route;

use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/readyz", web::get().to(readyz))
        .route("/api/orders", web::get().to(orders::list))
        .route("/api/orders/{order_id}", web::get().to(orders::get))
        .route("/api/orders/{order_id}/pay", web::post().to(orders::pay))
        .route("/api/orders/{order_id}/cancel", web::post().to(orders::cancel))
        // Each internal route names the one service it serves (seckill_web::trust).
        .service(
            internal_route("/internal/orders/active", &[Peer::Seckill])
                .route(web::get().to(internal::active)),
        )
        .service(
            internal_route("/internal/orders/count", &[Peer::Seckill]).route(web::get().to(internal::count)),
        );
}

async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let database = state.database.readiness().await;
    let redis = seckill_infra::redis::readiness(state.fulfiller.results().redis(), &state.scripts).await;
    let broker = state.publisher.readiness().await;
    seckill_web::health::readiness(&[("database", database), ("redis", redis), ("broker", broker)])
}
