//! `GET /api/seckill/{goods_id}/state` (anonymous): the sale page's one call as it opens. The
//! gateway answers it itself while it remembers seckill-service calling the sale gone
//! (`crate::closed`) and knows the sale's window (from the storefront's pages, or an earlier
//! answer); else seckill-service answers, and the window is learnt on the way.

use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use seckill_common::api::SaleState;
use seckill_common::{ErrorBody, ErrorCode, GoodsId};
use seckill_web::ApiError;

use crate::proxy::Service;
use crate::state::Gateway;
use crate::storefront::NO_STORE;

pub async fn sale_state(
    req: HttpRequest,
    payload: web::Payload,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    let goods = req.match_info().get("goods_id").and_then(|v| v.parse::<GoodsId>().ok());
    if let Some(answer) = goods.and_then(|g| closed_state(&gateway, g)) {
        return Ok(answer);
    }
    let res = gateway.pass(Service::Seckill, &req, payload, None).await?;
    match goods {
        Some(g) if res.status() == StatusCode::OK && gateway.storefront.window(g).is_none() => {
            let (res, body) = res.into_parts();
            let body = actix_web::body::to_bytes(body)
                .await
                .map_err(|e| ApiError::internal(anyhow::anyhow!("{e}")))?;
            if let Ok(state) = serde_json::from_slice::<SaleState>(&body) {
                gateway.storefront.learn_window(state.goods_id, state.start_at, state.end_at);
            }
            Ok(res.set_body(body).map_into_boxed_body())
        }
        _ => Ok(res),
    }
}

/// The gateway's own answer for sale `g`, if it remembers the sale gone and knows its window.
fn closed_state(gateway: &Gateway, g: GoodsId) -> Option<HttpResponse> {
    let body = gateway.closed.remembered(g)?;
    let (start_at, end_at) = gateway.storefront.window(g)?;
    // `ENDED` closes a sale too; only `SOLD_OUT` says it sold out.
    let sold_out =
        serde_json::from_slice::<ErrorBody>(&body).is_ok_and(|b| b.code == ErrorCode::SoldOut.as_str());
    let state = SaleState { goods_id: g, start_at, end_at, sold_out, now_ms: Utc::now().timestamp_millis() };
    metrics::counter!("gateway_sale_state_answers_total").increment(1);
    Some(HttpResponse::Ok().insert_header((header::CACHE_CONTROL, NO_STORE)).json(state))
}
