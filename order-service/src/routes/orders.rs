//! The buyer's orders: list, look up, pay, cancel. Only the caller's own; another user's order
//! is answered exactly like a missing one, so ids reveal nothing.

use actix_web::{HttpResponse, web};
use seckill_common::api::{Order, OrderStatus};
use seckill_common::{ErrorCode, OrderId};
use seckill_db::{conn, query_error};
use seckill_web::{ApiError, AuthUser};

use crate::orders::{self, transition};
use crate::state::AppState;

fn not_found(id: OrderId) -> ApiError {
    ApiError::new(ErrorCode::OrderNotFound, format!("no order {id}"))
}

pub async fn list(state: web::Data<AppState>, user: AuthUser) -> Result<HttpResponse, ApiError> {
    let mut conn = conn(state.fulfiller.pool()).await?;
    let mine = orders::list_for_user(&mut conn, user.id).await.map_err(query_error)?;
    Ok(HttpResponse::Ok().json(mine))
}

pub async fn get(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<OrderId>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let mut conn = conn(state.fulfiller.pool()).await?;
    match orders::find_for_user(&mut conn, id, user.id).await.map_err(query_error)? {
        Some(order) => Ok(HttpResponse::Ok().json(order)),
        None => Err(not_found(id)),
    }
}

/// A simulated payment: unpaid -> paid in one conditional update. Paying a paid order again is
/// a no-op 200; an expired, cancelled or overdue one is 409.
#[tracing::instrument(skip_all, fields(order_id = %path, user_id = %user.id))]
pub async fn pay(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<OrderId>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let mut conn = conn(state.fulfiller.pool()).await?;
    if let Some(row) = transition::pay(&mut conn, id, user.id).await.map_err(query_error)? {
        tracing::info!("order paid");
        metrics::counter!("order_orders_paid_total").increment(1);
        return Ok(HttpResponse::Ok().json(Order::try_from(row).map_err(ApiError::internal)?));
    }
    match orders::find_for_user(&mut conn, id, user.id).await.map_err(query_error)? {
        None => Err(not_found(id)),
        Some(order) if order.status == OrderStatus::Paid => Ok(HttpResponse::Ok().json(order)),
        Some(order) => Err(ApiError::new(
            ErrorCode::OrderNotPayable,
            format!("order {id} is {} and cannot be paid", describe(&order)),
        )),
    }
}

/// unpaid -> cancelled in one conditional update, then the unit's release is sent (or, if the
/// broker is down, owed and sent by the sweeper).
#[tracing::instrument(skip_all, fields(order_id = %path, user_id = %user.id))]
pub async fn cancel(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<OrderId>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let mut conn = conn(state.fulfiller.pool()).await?;
    if let Some(row) = transition::cancel(&mut conn, id, user.id).await.map_err(query_error)? {
        drop(conn);
        tracing::info!("order cancelled");
        metrics::counter!("order_orders_cancelled_total").increment(1);
        if let Err(e) = state.releaser.send(std::slice::from_ref(&row)).await {
            tracing::warn!(error = format!("{e:#}"), "release not sent now; the sweeper sends it");
        }
        return Ok(HttpResponse::Ok().json(Order::try_from(row).map_err(ApiError::internal)?));
    }
    match orders::find_for_user(&mut conn, id, user.id).await.map_err(query_error)? {
        None => Err(not_found(id)),
        Some(order) => Err(ApiError::new(
            ErrorCode::OrderNotCancellable,
            format!("order {id} is {} and cannot be cancelled", describe(&order)),
        )),
    }
}

fn describe(order: &Order) -> String {
    if order.status == OrderStatus::Unpaid && order.expires_at <= chrono::Utc::now() {
        "past its payment deadline".into()
    } else {
        order.status.as_str().into()
    }
}
