//! The internal order API seckill-service calls when Redis no longer knows what the orders
//! are: a buyer's active order (the result poll's fallback), a sale's active orders (a
//! rebuild), their count (the audit). Not routed by the gateway; only seckill-service's credential
//! is taken.

use actix_web::{HttpResponse, web};
use seckill_common::api::{ActiveOrder, OrderCount};
use seckill_common::{GoodsId, OrderId, UserId};
use seckill_db::{conn, query_error};
use seckill_web::ApiError;
use seckill_web::trust::ServiceCaller;
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
    _caller: ServiceCaller,
    state: web::Data<AppState>,
    query: web::Query<ActiveQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = query.into_inner();
    let mut conn = conn(state.fulfiller.pool()).await?;
    let rows: Vec<(i64, i64, uuid::Uuid)> = match q.user_id {
        Some(u) => orders::active_of_user(&mut conn, q.goods_id, u)
            .await
            .map_err(query_error)?
            .map(|(order_id, request_id)| (order_id, u.get(), request_id))
            .into_iter()
            .collect(),
        None => {
            let limit = q.limit.unwrap_or(MAX_PAGE);
            if !(1..=MAX_PAGE).contains(&limit) || q.after_id < 0 {
                return Err(ApiError::invalid(format!(
                    "limit must be 1 to {MAX_PAGE}, after_id not negative"
                )));
            }
            orders::active_of_sale(&mut conn, q.goods_id, q.after_id, limit).await.map_err(query_error)?
        }
    };
    let page = rows
        .into_iter()
        .map(|(order_id, user_id, request_id)| {
            Ok(ActiveOrder {
                order_id: OrderId::new(order_id).ok_or("order id")?,
                user_id: UserId::new(user_id).ok_or("user id")?,
                request_id,
            })
        })
        .collect::<Result<Vec<_>, &str>>()
        .map_err(|what| ApiError::internal(anyhow::anyhow!("a stored {what} is not positive")))?;
    Ok(HttpResponse::Ok().json(page))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountQuery {
    goods_id: GoodsId,
}

/// `GET /internal/orders/count?goods_id=G`.
pub async fn count(
    _caller: ServiceCaller,
    state: web::Data<AppState>,
    query: web::Query<CountQuery>,
) -> Result<HttpResponse, ApiError> {
    let mut conn = conn(state.fulfiller.pool()).await?;
    let active = orders::count_active(&mut conn, query.goods_id).await.map_err(query_error)?;
    Ok(HttpResponse::Ok().json(OrderCount { active }))
}
