//! The internal order API seckill-service calls when Redis no longer knows what the orders
//! are: a buyer's active order (the result poll's fallback), a sale's active orders (a
//! rebuild), their count (the audit). Not routed by the gateway; only seckill-service's credential
//! is taken.

use actix_web::{HttpResponse, web};
use seckill_common::api::OrderCount;
use seckill_common::{GoodsId, UserId};
use seckill_db::conn;
use seckill_web::ApiError;
use serde::Deserialize;

use crate::orders;
use crate::state::AppState;

/// Most orders in one page.
const MAX_PAGE: i64 = 10_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActiveQuery {
    goods_id: GoodsId,
    /// One buyer's active order (a list of at most one).
    user_id: Option<UserId>,
    /// Otherwise a page of the sale's, by order id.
    #[serde(default)]
    after_id: i64,
    limit: Option<i64>,
}

/// `GET /internal/orders/active?goods_id=G[&user_id=U | &after_id=A&limit=L]`.
pub async fn active(
    state: web::Data<AppState>,
    query: web::Query<ActiveQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = query.into_inner();
    let mut conn = conn(&state.pool).await?;
    let page = match q.user_id {
        Some(u) => match orders::active_of_user(&mut conn, q.goods_id, u).await? {
            Some((order_id, request_id)) => vec![orders::active_order(order_id, u.get(), request_id)?],
            None => Vec::new(),
        },
        None => {
            let limit = q.limit.unwrap_or(MAX_PAGE);
            if !(1..=MAX_PAGE).contains(&limit) || q.after_id < 0 {
                return Err(ApiError::invalid(format!(
                    "limit must be 1 to {MAX_PAGE}, after_id not negative"
                )));
            }
            orders::active_of_sale(&mut conn, q.goods_id, q.after_id, limit).await?
        }
    };
    Ok(HttpResponse::Ok().json(page))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountQuery {
    goods_id: GoodsId,
}

/// `GET /internal/orders/count?goods_id=G`.
pub async fn count(
    state: web::Data<AppState>,
    query: web::Query<CountQuery>,
) -> Result<HttpResponse, ApiError> {
    let mut conn = conn(&state.pool).await?;
    let active = orders::count_active(&mut conn, query.goods_id).await?;
    Ok(HttpResponse::Ok().json(OrderCount { active }))
}
