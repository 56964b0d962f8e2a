//! HTTP routes of stock-service.

pub mod goods;
pub mod internal;
pub mod rooms;

use actix_web::{HttpResponse, web};
use seckill_common::trust::Peer;
use seckill_common::{ErrorCode, GoodsId};
use seckill_web::ApiError;
use seckill_web::trust::internal_route;

use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/readyz", web::get().to(readyz))
        .route("/api/goods", web::get().to(goods::list))
        .route("/api/goods/{goods_id}", web::get().to(goods::get))
        // Each internal route names the one service it serves (seckill_web::trust).
        .service(
            internal_route("/internal/stock/goods", &[Peer::Seckill]).route(web::post().to(goods::create)),
        )
        .service(
            internal_route("/internal/stock/deduct", &[Peer::Order]).route(web::post().to(internal::deduct)),
        )
        .service(
            internal_route("/internal/stock/deduct-batch", &[Peer::Order])
                .route(web::post().to(internal::deduct_batch)),
        )
        .service(
            internal_route("/internal/stock/release", &[Peer::Order])
                .route(web::post().to(internal::release)),
        )
        // The keys of a sale's reservations in flight can outgrow the usual body limit.
        .service(
            internal_route("/internal/stock/{goods_id}/held", &[Peer::Seckill])
                .app_data(seckill_web::extract::json_config(internal::HELD_BODY_LIMIT))
                .route(web::post().to(internal::held)),
        )
        .service(
            internal_route("/internal/stock/rooms/{goods_id}", &[Peer::Seckill])
                .route(web::post().to(rooms::raise))
                .route(web::get().to(rooms::record)),
        );
}

async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    seckill_web::health::readiness(&[("database", state.database.readiness().await)])
}

/// The public and the internal routes answer a missing sale alike.
fn goods_not_found(id: GoodsId) -> ApiError {
    ApiError::new(ErrorCode::GoodsNotFound, format!("no goods with id {id}"))
}
