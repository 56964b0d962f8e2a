//! HTTP routes of seckill-service.

pub mod admin;
pub mod buy;
pub mod queue;
pub mod sale;

use actix_web::{HttpResponse, web};
use seckill_common::trust::Peer;
use seckill_web::trust::internal_route;

use crate::state::AppState;

/// The buyer's routes come first, the order first of all: the router tries routes in this
/// order, and each pattern with a `{segment}` is a regex match (perf shows them).
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/api/seckill/{goods_id}/orders", web::post().to(buy::order))
        .route("/api/seckill/{goods_id}/token", web::post().to(buy::path_token))
        .route("/api/seckill/{goods_id}/result", web::get().to(buy::result))
        .route("/api/seckill/{goods_id}/queue", web::get().to(queue::status))
        .route("/api/seckill/{goods_id}/queue", web::post().to(queue::join))
        .route("/api/seckill/{goods_id}/queue/challenge", web::post().to(queue::challenge))
        .route("/api/seckill/{goods_id}/state", web::get().to(sale::sale_state))
        .route("/readyz", web::get().to(readyz))
        .route("/api/admin/goods", web::post().to(admin::create_sale))
        .route("/api/admin/goods/{goods_id}/audit", web::get().to(admin::audit))
        .route("/api/admin/goods/{goods_id}/repair", web::post().to(admin::repair))
        // The room's state, which the gateway answers status polls from (seckill_web::trust).
        .service(
            internal_route("/internal/gateway/rooms/{goods_id}", &[Peer::Gateway])
                .route(web::get().to(queue::room_snapshot)),
        );
}

async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let redis = seckill_infra::redis::readiness(state.gate.redis(), &state.scripts).await;
    let broker = state.publisher.readiness().await;
    seckill_web::health::readiness(&[("redis", redis), ("broker", broker)])
}
